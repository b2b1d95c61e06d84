//! The team archive's sessions: create, open, list, delete, search.

use super::claim::{refuse_if_held, PgClaims};
use super::handle::{col, pg, PgArchive};
use super::storage::PgStorage;
use super::writer::{
    metadata_at, stats_at, Appender, INDEXED_WORD_BYTES, METADATA_COLUMNS, STATS_COLUMNS,
};
use crate::backend::claim;
use crate::backend::pending::{self, DELETE_MARK, FORK_MARK};
use crate::backend::session_rows::stored_js_string;
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use crate::listing::{
    ArchiveTotals, ListQuery, NewSession, SearchFilter, SearchHit, SessionSummary,
};
use crate::search;
use crate::usage::{UsageQuery, UsageRow};
use ::postgres::{GenericClient, Transaction};
use std::time::{Duration, Instant};

/// Inserts a session row; `SessionExists` when the id is taken.
fn insert_session<C: GenericClient>(c: &mut C, new: &NewSession) -> Result<i64> {
    let row = c
        .query_opt(
            "INSERT INTO sessions (id, created_at, created_ms, cwd, parent_session, metadata, header, contract)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (id) DO NOTHING RETURNING session_key",
            &[
                &new.id,
                &new.created_at,
                &crate::entry::timestamp_millis(&new.created_at),
                &new.cwd,
                &new.parent_session,
                &new.metadata,
                &new.header,
                &new.contract.as_str(),
            ],
        )
        .map_err(pg("creating a session"))?;
    match row {
        Some(r) => col(&r, 0),
        None => Err(Error::SessionExists(new.id.clone())),
    }
}

/// The filter of [`PgArchive::list`] and [`PgArchive::count`]
/// ([`ListQuery::filter_values`] as `$1`–`$4`).
const LIST_FILTER: &str = "pending IS NULL AND ($1::TEXT IS NULL OR cwd = $1)
     AND ($2::TEXT IS NULL OR cwd = $2 OR left(cwd, length($2) + 1) = $2 || '/')
     AND ($3::BIGINT IS NULL OR created_ms >= $3)
     AND ($4::TEXT IS NULL OR strpos(lower(name), lower($4)) > 0)";

/// Writes one session inside [`PgArchive::write_session`]'s transaction.
pub struct SessionWriter<'c> {
    tx: Transaction<'c>,
    appender: Option<Appender>,
    staged: Option<Staged>,
}

/// A session written in batches ([`SessionWriter::begin_batched`]).
struct Staged {
    /// The session's key.
    key: i64,
    /// Its writer claim, held from the first batch to publishing.
    token: String,
    /// When the open batch began.
    started: Instant,
    /// Entries written in the open batch.
    rows: u64,
    /// Whether it is visible (in the open batch, which commits last).
    published: bool,
}

impl SessionWriter<'_> {
    /// Creates the session row; must come before any entry.
    pub fn begin(&mut self, new: &NewSession) -> Result<()> {
        let key = insert_session(&mut self.tx, new)?;
        self.appender = Some(Appender::start(&mut self.tx, key)?);
        Ok(())
    }

    /// Appends one entry to the session begun.
    pub fn push(&mut self, entry: &Entry) -> Result<()> {
        let appender = self.appender.as_mut().ok_or_else(|| {
            Error::Unknown("a session's entries were written before the session".into())
        })?;
        appender.push(&mut self.tx, entry)?;
        let Some(staged) = self.staged.as_mut() else {
            return Ok(());
        };
        staged.rows += 1;
        if staged.published || !pending::batch_due(staged.started.elapsed(), staged.rows) {
            return Ok(());
        }
        self.next_batch()
    }

    /// Creates the session row of a fork's copy, written in transactions of
    /// at most [`pending::BATCH_TIME`]: a long one would hold back VACUUM
    /// (its snapshot's `xmin`) and its row locks for its whole length. The
    /// row is marked ([`FORK_MARK`]) and claimed until
    /// [`SessionWriter::publish`], so no reader sees it; if the writer dies
    /// first, the next open removes it ([`pending::recover_half_done`]).
    pub fn begin_batched(&mut self, new: &NewSession) -> Result<()> {
        let ctx = "starting a fork";
        let key = insert_session(&mut self.tx, new)?;
        let token = uuid::Uuid::now_v7().to_string();
        self.tx
            .execute(
                "UPDATE sessions SET pending = $2 WHERE session_key = $1",
                &[&key, &FORK_MARK],
            )
            .map_err(pg(ctx))?;
        claim::record(&mut PgClaims(&mut self.tx), key, &token)?;
        self.appender = Some(Appender::start(&mut self.tx, key)?);
        self.staged = Some(Staged {
            key,
            token,
            started: Instant::now(),
            rows: 0,
            published: false,
        });
        Ok(())
    }

    /// Commits the open batch (its entries, the session row, the claim's
    /// lease renewed) and goes on in a new transaction. The `Transaction`
    /// stays open across batches: it is the same connection's transaction,
    /// begun again, and its final commit (or rollback on drop) ends the
    /// last batch.
    fn next_batch(&mut self) -> Result<()> {
        let ctx = "committing a fork's batch";
        let Some(staged) = self.staged.as_ref() else {
            return Ok(());
        };
        let (key, token) = (staged.key, staged.token.clone());
        if let Some(appender) = self.appender.take() {
            appender.finish(&mut self.tx)?;
        }
        hold_claim(&mut self.tx, key, &token)?;
        self.tx.batch_execute("COMMIT").map_err(pg(ctx))?;
        pending::pause(Duration::ZERO);
        self.tx.batch_execute("BEGIN").map_err(pg(ctx))?;
        self.appender = Some(Appender::start(&mut self.tx, key)?);
        if let Some(staged) = self.staged.as_mut() {
            staged.started = Instant::now();
            staged.rows = 0;
        }
        Ok(())
    }

    /// Runs `read` in the open batch: a PostgreSQL writer takes no lock
    /// that a writer of another session waits for.
    pub fn read_between_batches(&mut self, read: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        read()
    }

    /// Makes a session begun with [`SessionWriter::begin_batched`] visible
    /// with the last batch, and releases its claim.
    pub fn publish(&mut self) -> Result<()> {
        let ctx = "publishing a fork";
        let Some(staged) = self.staged.as_mut() else {
            return Ok(());
        };
        hold_claim(&mut self.tx, staged.key, &staged.token)?;
        self.tx
            .execute(
                "UPDATE sessions SET pending = NULL WHERE session_key = $1",
                &[&staged.key],
            )
            .map_err(pg(ctx))?;
        claim::ClaimRows::release(&mut PgClaims(&mut self.tx), staged.key, &staged.token)?;
        staged.published = true;
        Ok(())
    }
}

/// Inside a batch of a fork or a delete: [`claim::hold`] (renewed, or
/// refused if no longer this process's), so that two processes never both
/// write or remove a marked session.
fn hold_claim<C: GenericClient>(c: &mut C, key: i64, token: &str) -> Result<()> {
    claim::hold(&mut PgClaims(c), key, token)
}

/// Session `id`'s key, its row locked until `tx` ends (so no other
/// transaction deletes the session or takes its claim meanwhile).
fn lock_session_row(tx: &mut Transaction<'_>, id: &str, ctx: &'static str) -> Result<i64> {
    tx.query_opt(
        "SELECT session_key FROM sessions WHERE id = $1 AND pending IS NULL FOR UPDATE",
        &[&id],
    )
    .map_err(pg(ctx))?
    .ok_or_else(|| Error::SessionNotFound(id.to_owned()))
    .and_then(|r| col(&r, 0))
}

impl PgArchive {
    /// Creates a session and returns it open for writing (claim taken).
    pub fn create_session(&self, new: &NewSession) -> Result<PgStorage> {
        self.writable("creating a session")?;
        let key = insert_session(&mut *self.conn()?, new)?;
        let mut s = PgStorage::new(self.clone(), key, &new.id);
        s.claim_writer()?;
        Ok(s)
    }

    /// Creates one session inside one transaction, fed by `fill` through a
    /// [`SessionWriter`]: all of it commits, or nothing. A fork's copy
    /// ([`SessionWriter::begin_batched`]) commits in batches instead; if
    /// `fill` fails, the batches it committed are removed (still invisible).
    pub fn write_session<T>(
        &self,
        fill: impl FnOnce(&mut SessionWriter<'_>) -> Result<T>,
    ) -> Result<T> {
        self.writable("writing a session")?;
        let mut conn = self.conn()?;
        let tx = conn.transaction().map_err(pg("starting a session write"))?;
        let mut writer = SessionWriter {
            tx,
            appender: None,
            staged: None,
        };
        let filled = fill(&mut writer);
        let SessionWriter {
            mut tx,
            appender,
            staged,
        } = writer;
        let out = match filled {
            Ok(out) => out,
            Err(e) => {
                drop(tx);
                if let Some(staged) = staged {
                    // If this fails too, the next open removes it.
                    let _ = pending::remove_in_batches(self, staged.key, &staged.token);
                }
                return Err(e);
            }
        };
        if let Some(a) = appender {
            a.finish(&mut tx)?;
        }
        tx.commit().map_err(pg("committing a session write"))?;
        Ok(out)
    }

    /// Opens a session by id; it takes the writer claim at its first write.
    pub fn open_session(&self, id: &str) -> Result<PgStorage> {
        let row = self
            .conn()?
            .query_typed_opt(
                "SELECT session_key FROM sessions WHERE id = $1 AND pending IS NULL",
                &[(&id, ::postgres::types::Type::TEXT)],
            )
            .map_err(pg("opening a session"))?
            .ok_or_else(|| Error::SessionNotFound(id.to_owned()))?;
        Ok(PgStorage::new(self.clone(), col(&row, 0)?, id))
    }

    /// Whether a session with this exact id exists.
    pub fn has_session(&self, id: &str) -> Result<bool> {
        Ok(self
            .conn()?
            .query_opt(
                "SELECT 1 FROM sessions WHERE id = $1 AND pending IS NULL",
                &[&id],
            )
            .map_err(pg("looking up a session"))?
            .is_some())
    }

    /// Sessions newest first, filtered and paged, without touching entries.
    pub fn list(&self, q: &ListQuery) -> Result<Vec<SessionSummary>> {
        let (cwd, under, since, name) = q.filter_values();
        let limit = q.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let offset = i64::try_from(q.offset).unwrap_or(i64::MAX);
        let rows = self
            .conn()?
            .query(
                &format!(
                    "SELECT {METADATA_COLUMNS}, name, entry_count, {STATS_COLUMNS}, contract,
                            last_active_ms
                     FROM sessions WHERE {LIST_FILTER}
                     ORDER BY {} LIMIT $5 OFFSET $6",
                    q.order_by(" NULLS LAST")
                ),
                &[&cwd, &under, &since, &name, &limit, &offset],
            )
            .map_err(pg("listing sessions"))?;
        rows.iter()
            .map(|r| {
                Ok(SessionSummary {
                    metadata: metadata_at(r, 0)?,
                    name: col::<Option<String>>(r, 5)?.map(stored_js_string),
                    entry_count: col(r, 6)?,
                    stats: stats_at(r, 7)?,
                    contract: crate::backend::session_rows::contract_at(r, 12)?,
                    last_active_ms: col(r, 13)?,
                })
            })
            .collect()
    }

    /// How many sessions [`PgArchive::list`] would list without a page.
    pub fn count(&self, q: &ListQuery) -> Result<u64> {
        let (cwd, under, since, name) = q.filter_values();
        let r = self
            .conn()?
            .query_one(
                &format!("SELECT count(*) FROM sessions WHERE {LIST_FILTER}"),
                &[&cwd, &under, &since, &name],
            )
            .map_err(pg("counting sessions"))?;
        Ok(u64::try_from(col::<i64>(&r, 0)?).unwrap_or(0))
    }

    /// Usage summed by session, UTC day and model from the maintained
    /// `usage_facts` (each entry once across forks), no entry read.
    pub fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>> {
        let plan = q.plan();
        let under = q
            .cwd_under
            .as_deref()
            .map(|d| d.strip_suffix('/').filter(|d| !d.is_empty()).unwrap_or(d));
        let rows = self
            .conn()?
            .query(
                "WITH f AS (
                   SELECT session_key, day, model, entries AS n, input AS i, output AS o,
                          cache_read AS cr, cache_write AS cw, cost AS c
                     FROM usage_daily
                    WHERE $1 AND entries > 0 AND ($2::BIGINT IS NULL OR day >= $2)
                      AND ($3::BIGINT IS NULL OR day < $3)
                   UNION ALL
                   SELECT session_key, floor(at_ms / 86400000.0)::BIGINT, model, 1,
                          input, output, cache_read, cache_write, cost
                     FROM usage_facts
                    WHERE counted
                      AND ((at_ms >= $4 AND at_ms < $5) OR (at_ms >= $6 AND at_ms < $7)))
                 SELECT s.id, s.cwd, f.day, f.model, sum(f.n)::BIGINT, sum(f.i), sum(f.o),
                        sum(f.cr), sum(f.cw), sum(f.c)
                   FROM f JOIN sessions s ON s.session_key = f.session_key
                  WHERE s.pending IS NULL
                    AND ($8::TEXT IS NULL OR s.cwd = $8 OR left(s.cwd, length($8) + 1) = $8 || '/')
                  GROUP BY s.id, s.cwd, f.day, f.model
                  ORDER BY f.day, s.id, f.model",
                &[
                    &plan.daily,
                    &plan.day_from,
                    &plan.day_to,
                    &plan.cut[0].unwrap_or_default().0,
                    &plan.cut[0].unwrap_or_default().1,
                    &plan.cut[1].unwrap_or_default().0,
                    &plan.cut[1].unwrap_or_default().1,
                    &under,
                ],
            )
            .map_err(pg("summing usage"))?;
        rows.iter()
            .map(|r| {
                Ok(UsageRow {
                    session: col(r, 0)?,
                    cwd: col(r, 1)?,
                    day: col::<Option<i64>>(r, 2)?.unwrap_or(0),
                    model: col(r, 3)?,
                    entries: col(r, 4)?,
                    input: col(r, 5)?,
                    output: col(r, 6)?,
                    cache_read: col(r, 7)?,
                    cache_write: col(r, 8)?,
                    cost: col(r, 9)?,
                })
            })
            .collect()
    }

    /// Totals over every session, from the maintained session rows only (as
    /// the SQLite archive sums them; cwds ordered bytewise, as SQLite does).
    pub fn totals(&self) -> Result<ArchiveTotals> {
        let ctx = "summing sessions";
        let mut conn = self.conn()?;
        let r = conn
            .query_one(
                "SELECT count(*), coalesce(sum(entry_count), 0)::BIGINT,
                        coalesce(sum(message_count), 0)::BIGINT,
                        coalesce(sum(cached_tokens), 0), coalesce(sum(uncached_tokens), 0),
                        coalesce(sum(total_tokens), 0), coalesce(sum(cost_total), 0)
                 FROM sessions WHERE pending IS NULL",
                &[],
            )
            .map_err(pg(ctx))?;
        let mut t = ArchiveTotals {
            sessions: col(&r, 0)?,
            entries: col(&r, 1)?,
            stats: stats_at(&r, 2)?,
            per_cwd: Vec::new(),
        };
        let rows = conn
            .query(
                "SELECT cwd, count(*), sum(message_count)::BIGINT, sum(cost_total) FROM sessions
                 WHERE pending IS NULL GROUP BY cwd ORDER BY count(*) DESC, cwd COLLATE \"C\"",
                &[],
            )
            .map_err(pg(ctx))?;
        t.per_cwd = rows
            .iter()
            .map(|r| Ok((col(r, 0)?, col(r, 1)?, col(r, 2)?, col(r, 3)?)))
            .collect::<Result<_>>()?;
        Ok(t)
    }

    /// Deletes a session and everything derived from it; refuses a session
    /// a live writer holds. The first, short transaction marks it deleted
    /// ([`DELETE_MARK`]: from then on no reader sees it) and claims it; its
    /// rows then go in transactions of at most [`pending::BATCH_TIME`], so no
    /// transaction holds back VACUUM or its row locks for the whole delete.
    /// If this process dies half-way, the next open finishes it.
    pub fn delete_session(&self, id: &str) -> Result<()> {
        self.writable("deleting a session")?;
        pending::delete_session(self, id)
    }

    /// Finishes what processes that died half-way left: a half-done delete
    /// is finished, a half-written fork removed ([`pending`]); a session a
    /// live writer holds is left to it. Returns how many it finished.
    pub fn recover_half_done(&self) -> Result<usize> {
        self.writable("finishing half-done deletes and forks")?;
        pending::recover_half_done(self)
    }

    /// Removes session `id`'s writer claim, whatever its lease, and says
    /// whose it was (`None`: there was none); a running holder on this host
    /// is refused unless `force` ([`crate::backend::claim::clear`]). The
    /// lease is judged by the server's clock.
    pub fn clear_claim(
        &self,
        id: &str,
        force: bool,
    ) -> Result<Option<crate::backend::claim::Cleared>> {
        let ctx = "clearing a writer claim";
        let mut conn = self.conn()?;
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        let key = lock_session_row(&mut tx, id, ctx)?;
        let cleared =
            crate::backend::claim::clear(&mut super::claim::PgClaims(&mut tx), key, id, force)?;
        tx.commit().map_err(pg(ctx))?;
        Ok(cleared)
    }

    /// The ids of sessions whose id starts with `prefix` (at most `limit`),
    /// in id order: what
    /// [`resolve_session`](crate::archive::SessionArchive::resolve_session)
    /// chooses from.
    pub fn sessions_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let rows = self
            .conn()?
            .query(
                "SELECT id FROM sessions WHERE left(id, length($1)) = $1 AND pending IS NULL
                 ORDER BY id LIMIT $2",
                &[&prefix, &i64::try_from(limit).unwrap_or(i64::MAX)],
            )
            .map_err(pg("resolving a session id"))?;
        rows.iter().map(|r| col(r, 0)).collect()
    }

    /// Full-text search over message text with PostgreSQL's `tsvector` and
    /// its GIN index, best first (`ts_rank_cd`): `limit` hits after skipping
    /// `offset`. The query grammar and the tokens are the search rule every
    /// store follows ([`search::query_groups`]): words in any order,
    /// `"a phrase"`, `foo*`.
    /// `a OR b`, `-word` and `( … )` as [`search::boolean`] reads them: each
    /// alternative a plain search here, as on the SQLite archive.
    pub fn search_page(
        &self,
        query: &str,
        filter: &SearchFilter<'_>,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<SearchHit>> {
        let Some(alternatives) = search::boolean::alternatives(query)? else {
            return self.plain_search_page(query, filter, limit, offset);
        };
        search::boolean::search_page(
            &alternatives,
            limit,
            offset,
            |q, l, o| self.plain_search_page(q, filter, l, o),
            |hit| {
                let entry = crate::storage::SessionStorage::entry(
                    &self.open_session(&hit.session_id)?,
                    &hit.entry_id,
                )?;
                Ok(entry.and_then(|e| search::searchable_text(&e).map(|(_, t)| t)))
            },
        )
    }

    /// [`PgArchive::search_page`] of a plain query (no `OR`, `-`, groups).
    fn plain_search_page(
        &self,
        query: &str,
        filter: &SearchFilter<'_>,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<SearchHit>> {
        let groups = search::query_groups(query);
        let Some(ranked_by) = ts_query_of(&groups, " <-> ") else {
            return Ok(Vec::new());
        };
        // Where token order matters (a phrase, a word of several tokens),
        // PostgreSQL's positions do not decide: a tsvector keeps 256 of a
        // lexeme's positions and counts none past 16,383. The index finds
        // the entries holding every term, and the rule confirms each on its
        // text, as the SQLite archive confirms its candidates.
        // Likewise a term longer than a lexeme may be (cut to its first
        // 2,046 bytes, on both sides) is confirmed whole.
        let ordered = groups.iter().any(|g| g.len() > 1)
            || groups
                .iter()
                .flatten()
                .any(|t| search::pg_lexeme(&t.text).len() < t.text.len() + 2);
        let found_by = if ordered {
            ts_query_of(&groups, " & ").unwrap_or_default()
        } else {
            ranked_by.clone()
        };
        let page = Page {
            groups: &groups,
            ordered,
            found_by: &found_by,
            ranked_by: &ranked_by,
            terms: search::query_terms(query),
            filter: *filter,
            limit,
            offset,
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut conn = self.conn()?;
        if !ordered {
            return page.hits(&mut *conn);
        }
        // One snapshot for every batch of candidates.
        let mut tx = conn
            .build_transaction()
            .isolation_level(::postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(pg("searching"))?;
        page.hits(&mut tx)
    }

    /// Makes sure session `new.id` exists (creating it empty) for a sync to
    /// fill; an existing session must have been created with the same header
    /// (else `invalid_session`: two different sessions under one id).
    pub fn ensure_session(&self, new: &NewSession) -> Result<()> {
        self.writable("sync")?;
        let mut conn = self.conn()?;
        match insert_session(&mut *conn, new) {
            Err(Error::SessionExists(_)) => {
                // A session being deleted keeps its id until it is gone.
                let r = conn
                    .query_opt(
                        "SELECT header FROM sessions WHERE id = $1 AND pending IS NULL",
                        &[&new.id],
                    )
                    .map_err(pg("syncing a session"))?
                    .ok_or_else(|| Error::SessionExists(new.id.clone()))?;
                let header: String = col(&r, 0)?;
                if header == new.header {
                    Ok(())
                } else {
                    Err(Error::InvalidSession(format!(
                        "the archive already holds a different session {} (its header differs)",
                        new.id
                    )))
                }
            }
            other => other.map(|_| ()),
        }
    }

    /// Sets what a session's source says beside its entries: its contract,
    /// the lines of its file pi skips and where the file ended without its
    /// final `\n` (the team copy's are replaced, in one transaction: a sync
    /// run again writes the same).
    pub fn sync_session_extras(
        &self,
        id: &str,
        contract: crate::contract::Contract,
        kept: &crate::storage::KeptLines,
    ) -> Result<()> {
        let ctx = "syncing a session's kept lines";
        let mut conn = self.conn()?;
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        let key: i64 = tx
            .query_opt(
                "UPDATE sessions SET contract = $2, open_end = $3 WHERE id = $1 AND pending IS NULL
                 RETURNING session_key",
                &[&id, &contract.as_str(), &kept.open_end],
            )
            .map_err(pg(ctx))?
            .ok_or_else(|| Error::SessionNotFound(id.to_owned()))
            .and_then(|r| col(&r, 0))?;
        tx.execute("DELETE FROM kept_lines WHERE session_key = $1", &[&key])
            .map_err(pg(ctx))?;
        for line in &kept.lines {
            tx.execute(
                "INSERT INTO kept_lines (session_key, position, text) VALUES ($1, $2, $3)",
                &[&key, &line.position, &line.text],
            )
            .map_err(pg(ctx))?;
        }
        tx.commit().map_err(pg(ctx))
    }

    /// The id and exact text of the entry at log position `seq` of session
    /// `id`, with the session's entry count: where a sync stands.
    pub fn sync_position(&self, id: &str) -> Result<(u64, Option<String>)> {
        let r = self
            .conn()?
            .query_one(
                "SELECT s.entry_count, e.json FROM sessions s
                 LEFT JOIN entries e ON e.session_key = s.session_key AND e.seq = s.entry_count - 1
                 WHERE s.id = $1 AND s.pending IS NULL",
                &[&id],
            )
            .map_err(pg("reading where a sync stands"))?;
        Ok((u64::try_from(col::<i64>(&r, 0)?).unwrap_or(0), col(&r, 1)?))
    }

    /// Appends `entries` to session `id` in one transaction if its log still
    /// holds exactly `expected` entries: `Ok(true)` when written, `Ok(false)`
    /// (nothing written) when another writer moved it on first — a
    /// concurrent sync of the same source, which the caller re-reads and
    /// continues after. A session a live writer holds is refused.
    pub fn append_if_at(&self, id: &str, expected: u64, entries: &[Entry]) -> Result<bool> {
        self.writable("sync")?;
        let ctx = "syncing entries";
        let mut conn = self.conn()?;
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        // Not waiting for the WAL flush: a batch lost to a server crash is
        // copied again by the next sync, and the session's last transaction
        // (`sync_session_extras`) flushes the WAL past every batch before.
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .map_err(pg(ctx))?;
        let key: i64 = tx
            .query_opt(
                "SELECT session_key FROM sessions WHERE id = $1 AND pending IS NULL",
                &[&id],
            )
            .map_err(pg(ctx))?
            .ok_or_else(|| Error::SessionNotFound(id.to_owned()))
            .and_then(|r| col(&r, 0))?;
        let mut appender = Appender::start_sync(&mut tx, key)?;
        if appender.entry_count() != expected {
            return Ok(false);
        }
        refuse_if_held(&mut tx, key, id)?;
        appender.push_all(&mut tx, entries)?;
        appender.finish(&mut tx)?;
        tx.commit().map_err(pg(ctx))?;
        Ok(true)
    }

    /// [`PgArchive::search_page`]'s first page.
    pub fn search(
        &self,
        query: &str,
        session: Option<&str>,
        cwd: Option<&str>,
        role: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SearchHit>> {
        self.search_page(query, &SearchFilter { session, cwd, role }, limit, 0)
    }
}

/// Rows removed per step of [`remove_some`] (a step then checks the clock):
/// entries are large, the other tables' rows small.
const REMOVE_ENTRIES: i64 = 256;
/// Rows of the other tables removed per step.
const REMOVE_ROWS: i64 = 1_024;

/// A session's tables, in the order a batched delete empties them (each
/// before any table it depends on; `entries` last, for the rows the others
/// hold of its), with the rows a step removes. The session row then goes
/// with what cascades from it (its claim).
const REMOVE_TABLES: [(&str, i64); 11] = [
    ("message_text", REMOVE_ROWS),
    ("compactions", REMOVE_ROWS),
    ("segment_ancestry", REMOVE_ROWS),
    ("segments", REMOVE_ROWS),
    ("leaf_events", REMOVE_ROWS),
    ("labels", REMOVE_ROWS),
    ("usage_facts", REMOVE_ROWS),
    ("usage_daily", REMOVE_ROWS),
    ("kept_lines", REMOVE_ROWS),
    ("sync_sources", REMOVE_ROWS),
    ("entries", REMOVE_ENTRIES),
];

/// One step of removing session `key` inside `tx`: up to a step's rows of
/// the first of its tables that holds any ([`REMOVE_TABLES`]), or once all
/// are empty the session row. True when the session is gone. Rows are found
/// by the session's index and removed by their `ctid`, a statement per
/// table (every table is keyed by session first).
fn remove_some(tx: &mut Transaction<'_>, key: i64) -> Result<bool> {
    let ctx = "deleting a session";
    for (table, rows) in REMOVE_TABLES {
        let n = tx
            .execute(
                &format!(
                    "DELETE FROM {table} WHERE ctid = ANY(ARRAY(
                       SELECT ctid FROM {table} WHERE session_key = $1 LIMIT $2))"
                ),
                &[&key, &rows],
            )
            .map_err(pg(ctx))?;
        if n > 0 {
            return Ok(false);
        }
    }
    tx.execute("DELETE FROM sessions WHERE session_key = $1", &[&key])
        .map_err(pg(ctx))?;
    Ok(true)
}

/// The PostgreSQL statements of [`pending`]'s half-done forks and deletes:
/// the mark is `sessions.pending`; each transaction that changes a marked
/// session locks its row first, so two processes take turns.
impl pending::PendingStore for PgArchive {
    /// Row locks hold no other session's writer: no pause is needed.
    const GAP: Duration = Duration::ZERO;

    fn marked_sessions(&self) -> Result<Vec<(i64, String)>> {
        let rows = self
            .conn()?
            // Typed: no statement prepared (whose close would ride on the
            // next request) at every open.
            .query_typed(
                "SELECT session_key, id FROM sessions WHERE pending IS NOT NULL ORDER BY session_key",
                &[],
            )
            .map_err(pg("finding half-done deletes and forks"))?;
        rows.iter().map(|r| Ok((col(r, 0)?, col(r, 1)?))).collect()
    }

    fn mark_deleted(&self, id: &str, token: &str) -> Result<i64> {
        let ctx = "deleting a session";
        let mut conn = self.conn()?;
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        let key = lock_session_row(&mut tx, id, ctx)?;
        mark_deleted_and_claim(tx, key, id, token, ctx)?;
        Ok(key)
    }

    fn take_marked(&self, key: i64, id: &str, token: &str) -> Result<bool> {
        let ctx = "finishing a half-done delete";
        let mut conn = self.conn()?;
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        let marked = tx
            .query_opt(
                "SELECT 1 FROM sessions WHERE session_key = $1 AND pending IS NOT NULL FOR UPDATE",
                &[&key],
            )
            .map_err(pg(ctx))?;
        if marked.is_none() {
            return Ok(false);
        }
        mark_deleted_and_claim(tx, key, id, token, ctx)?;
        Ok(true)
    }

    fn remove_batch(&self, key: i64, token: &str) -> Result<bool> {
        let ctx = "deleting a session";
        let mut conn = self.conn()?;
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        let found = tx
            .query_opt(
                "SELECT 1 FROM sessions WHERE session_key = $1 FOR UPDATE",
                &[&key],
            )
            .map_err(pg(ctx))?;
        if found.is_none() {
            // Gone already: a failed commit of the last batch that did commit.
            return Ok(true);
        }
        hold_claim(&mut tx, key, token)?;
        let started = Instant::now();
        let mut steps = 0;
        let gone = loop {
            if remove_some(&mut tx, key)? {
                break true;
            }
            steps += 1;
            if pending::batch_due(started.elapsed(), steps) {
                break false;
            }
        };
        tx.commit().map_err(pg(ctx))?;
        Ok(gone)
    }
}

/// One page of [`PgArchive::search_page`].
struct Page<'q> {
    /// The query's groups of terms.
    groups: &'q [Vec<search::Term>],
    /// Whether token order matters, so each candidate is confirmed.
    ordered: bool,
    /// The `tsquery` that finds the candidates.
    found_by: &'q str,
    /// The `tsquery` they are ranked by (the query as written).
    ranked_by: &'q str,
    /// The terms a snippet marks.
    terms: Vec<String>,
    /// What the search is narrowed to.
    filter: SearchFilter<'q>,
    /// Hits on the page (more than 0).
    limit: usize,
    /// Hits skipped before it.
    offset: usize,
}

impl Page<'_> {
    /// The page's hits, best first: one statement when every candidate is a
    /// hit, else batches of candidates, each confirmed by the rule on its
    /// text, until the page is full.
    fn hits<C: GenericClient>(&self, c: &mut C) -> Result<Vec<SearchHit>> {
        let ctx = "searching";
        let SearchFilter { session, cwd, role } = self.filter;
        let select = c
            .prepare(
                "SELECT s.id, e.id, m.role, -ts_rank_cd(m.tsv, CAST($2::TEXT AS TSQUERY))::FLOAT8,
                        e.json, s.name, s.created_at
                 FROM message_text m
                 JOIN entries e ON e.session_key = m.session_key AND e.entry_key = m.entry_key
                 JOIN sessions s ON s.session_key = m.session_key AND s.pending IS NULL
                 WHERE m.tsv @@ CAST($1::TEXT AS TSQUERY)
                   AND ($3::TEXT IS NULL OR s.id = $3) AND ($4::TEXT IS NULL OR s.cwd = $4)
                   AND ($5::TEXT IS NULL OR m.role = $5)
                 ORDER BY 4, m.session_key, m.entry_key LIMIT $6 OFFSET $7",
            )
            .map_err(pg(ctx))?;
        let (batch, mut from, mut skip) = if self.ordered {
            let wanted = self.offset.saturating_add(self.limit);
            (wanted.clamp(64, 4096), 0, self.offset)
        } else {
            (self.limit, self.offset, 0)
        };
        let mut hits = Vec::new();
        loop {
            let rows = c
                .query(
                    &select,
                    &[
                        &self.found_by,
                        &self.ranked_by,
                        &session,
                        &cwd,
                        &role,
                        &i64::try_from(batch).unwrap_or(i64::MAX),
                        &i64::try_from(from).unwrap_or(i64::MAX),
                    ],
                )
                .map_err(pg(ctx))?;
            for r in &rows {
                // The entry is read only for the candidates fetched.
                let entry = Entry::from_checked_text(col(r, 4)?);
                let text = search::searchable_text(&entry)
                    .map(|(_, text)| text)
                    .unwrap_or_default();
                if self.ordered && !search::groups_match(self.groups, &text) {
                    continue;
                }
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                hits.push(SearchHit {
                    session_id: col(r, 0)?,
                    entry_id: col(r, 1)?,
                    role: col(r, 2)?,
                    rank: col(r, 3)?,
                    snippet: search::snippet(&text, &self.terms, search::SNIPPET_TOKENS),
                    session_name: col::<Option<String>>(r, 5)?.map(stored_js_string),
                    session_created_at: col(r, 6)?,
                });
                if hits.len() == self.limit {
                    return Ok(hits);
                }
            }
            if !self.ordered || rows.len() < batch {
                return Ok(hits);
            }
            from = from.saturating_add(batch);
        }
    }
}

/// Schema version 2: writes every searchable entry's row of `message_text`
/// again (the migration's SQL emptied it), its words folded by the search
/// rule, in the migration's transaction, a batch of entries at a time.
/// Schema version 4: usage facts and last activity for the entries already
/// stored, in each session's log order.
pub(super) fn fill_usage_facts(tx: &mut Transaction<'_>) -> Result<()> {
    let ctx = "recording usage of stored entries";
    let select = tx
        .prepare("SELECT session_key, json FROM entries ORDER BY session_key, seq")
        .map_err(pg(ctx))?;
    let portal = tx.bind(&select, &[]).map_err(pg(ctx))?;
    let mut session: Option<i64> = None;
    let mut facts = Vec::new();
    let mut newest: Option<i64> = None;
    loop {
        let rows = tx.query_portal(&portal, 1000).map_err(pg(ctx))?;
        for r in &rows {
            let key: i64 = col(r, 0)?;
            if session != Some(key) {
                if let Some(done) = session {
                    super::writer::insert_usage_facts(tx, done, &std::mem::take(&mut facts))?;
                    if let Some(ms) = newest.take() {
                        super::writer::write_last_active(tx, done, ms)?;
                    }
                }
                session = Some(key);
            }
            let entry = Entry::from_checked_text(col(r, 1)?);
            if let Some(fact) = crate::usage::usage_fact(&entry) {
                facts.push(fact);
            }
            if let Some(ms) = crate::entry::timestamp_millis(&entry.facts().timestamp) {
                newest = Some(newest.map_or(ms, |t| t.max(ms)));
            }
        }
        if rows.is_empty() {
            break;
        }
    }
    if let Some(done) = session {
        super::writer::insert_usage_facts(tx, done, &facts)?;
        if let Some(ms) = newest {
            super::writer::write_last_active(tx, done, ms)?;
        }
    }
    Ok(())
}

pub(super) fn reindex_words(tx: &mut Transaction<'_>) -> Result<()> {
    let ctx = "indexing message text for search";
    let types: Vec<&str> = [
        EntryType::Message,
        EntryType::CustomMessage,
        EntryType::Compaction,
        EntryType::BranchSummary,
    ]
    .iter()
    .map(EntryType::as_str)
    .collect();
    let select = tx
        .prepare(
            "SELECT session_key, entry_key, json FROM entries WHERE type = ANY($1)
             ORDER BY session_key, entry_key",
        )
        .map_err(pg(ctx))?;
    let portal = tx.bind(&select, &[&types]).map_err(pg(ctx))?;
    loop {
        let rows = tx.query_portal(&portal, 1000).map_err(pg(ctx))?;
        if rows.is_empty() {
            return Ok(());
        }
        let (mut sessions, mut keys, mut roles, mut words) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in &rows {
            let entry = Entry::from_checked_text(col(r, 2)?);
            if let Some((role, text)) = search::searchable_text(&entry) {
                sessions.push(col::<i64>(r, 0)?);
                keys.push(col::<i64>(r, 1)?);
                roles.push(role);
                words.push(search::index_words(&text, INDEXED_WORD_BYTES));
            }
        }
        tx.execute(
            "INSERT INTO message_text (session_key, entry_key, role, words)
             SELECT * FROM unnest($1::BIGINT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[])",
            &[&sessions, &keys, &roles, &words],
        )
        .map_err(pg(ctx))?;
    }
}

/// The `tsquery` text for a query's groups ([`search::query_groups`]),
/// `None` when it asks for nothing. It is read as `tsquery` input, never by
/// a text search parser: each term (folded by the rule the index was written
/// by) is a quoted lexeme ([`search::pg_lexeme`]), a prefix term `:*`; the
/// terms of a group (a phrase, a word of several tokens) are joined by
/// `within` (` <-> `: one after another; ` & `: in any order); groups are
/// ANDed.
fn ts_query_of(groups: &[Vec<search::Term>], within: &str) -> Option<String> {
    let parts: Vec<String> = groups
        .iter()
        .map(|group| {
            let words: Vec<String> = group
                .iter()
                .map(|t| {
                    let lexeme = search::pg_lexeme(&t.text);
                    if t.prefix {
                        lexeme + ":*"
                    } else {
                        lexeme
                    }
                })
                .collect();
            format!("({})", words.join(within))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(" & "))
}

/// Marks session `key` (`id`) deleted and records `token`'s claim on it in
/// `tx`, then commits: refused while a live writer holds the session.
fn mark_deleted_and_claim(
    mut tx: postgres::Transaction<'_>,
    key: i64,
    id: &str,
    token: &str,
    ctx: &'static str,
) -> Result<()> {
    refuse_if_held(&mut tx, key, id)?;
    tx.execute(
        "UPDATE sessions SET pending = $2 WHERE session_key = $1",
        &[&key, &DELETE_MARK],
    )
    .map_err(pg(ctx))?;
    claim::record(&mut PgClaims(&mut tx), key, token)?;
    tx.commit().map_err(pg(ctx))
}

#[cfg(test)]
mod tests {
    fn ts_query(query: &str) -> Option<String> {
        super::ts_query_of(&crate::search::query_groups(query), " <-> ")
    }

    #[test]
    fn user_text_is_quoted_lexemes() {
        assert_eq!(ts_query("  "), None);
        assert_eq!(ts_query("Foo bar*").as_deref(), Some("('foo') & ('bar':*)"));
        assert_eq!(
            ts_query("\"it's a\" x-y").as_deref(),
            Some("('it' <-> 's' <-> 'a') & ('x' <-> 'y')")
        );
        assert_eq!(
            ts_query("a\\b | !c").as_deref(),
            Some("('a' <-> 'b') & ('c')")
        );
        assert_eq!(ts_query("Ünï*").as_deref(), Some("('uni':*)"));
        assert_eq!(
            ts_query("foo*bar DOĞRU").as_deref(),
            Some("('foo' <-> 'bar') & ('dogru')"),
            "a `*` inside a word separates, as in FTS5"
        );
        assert_eq!(ts_query("🚀 \u{301}"), None, "no token: nothing asked for");
    }
}
