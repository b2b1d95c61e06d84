//! The archive's sessions: create, open, list, delete, search, check, import records.

use super::error::sql;
use super::handle::Archive;
use super::rows::{self, ImportRecord, NewSession, METADATA_COLUMNS, STATS_COLUMNS};
use super::storage::SqliteStorage;
use super::writer::{
    insert_session, Appender, SessionWriter, BATCHED_GAP, DELETE_MARKER, FORK_MARKER,
};
use super::{branch_cache, fts, fts_dead};
use crate::backend::pending;
use crate::backend::session_rows::stored_js_string;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::listing::{ArchiveTotals, ListQuery, SearchFilter, SearchHit, SessionSummary};
use crate::search;
use crate::usage::{UsageQuery, UsageRow};
use rusqlite::{params, OptionalExtension};
use std::time::Instant;

/// The filter of [`Archive::list`] and [`Archive::count`]: `?1` a cwd,
/// `?2` a directory the cwd is (under), `?3` the earliest creation (ms),
/// `?4` a fragment of the name's stored JSON literal.
const LIST_FILTER: &str = "staged_from IS NULL AND (?1 IS NULL OR cwd = ?1)
     AND (?2 IS NULL OR cwd = ?2 OR substr(cwd, 1, length(?2) + 1) = ?2 || '/')
     AND (?3 IS NULL OR created_ms >= ?3)
     AND (?4 IS NULL OR instr(lower(name), lower(?4)) > 0)";

impl Archive {
    /// Creates a session and returns it open for writing (claim taken).
    pub fn create_session(&self, new: &NewSession) -> Result<SqliteStorage> {
        let mut conn = self.conn()?;
        let tx = self.begin_write(&mut conn, "creating a session")?;
        insert_session(&tx, new)?;
        tx.commit().map_err(sql("creating a session"))?;
        drop(conn);
        let mut s = self.open_session(&new.id)?;
        s.claim_writer()?;
        Ok(s)
    }

    /// Creates a session holding `entries`, all in one transaction (import, fork).
    /// Fails, writing nothing, if any entry fails.
    pub fn create_session_with<I>(&self, new: &NewSession, entries: I) -> Result<i64>
    where
        I: IntoIterator<Item = Result<Entry>>,
    {
        let mut conn = self.conn()?;
        let tx = self.begin_write(&mut conn, "creating a session")?;
        let key = insert_session(&tx, new)?;
        let mut appender = Appender::start(&tx, self.codec(), key)?;
        for e in entries {
            appender.push(&tx, &e?)?;
        }
        appender.finish(&tx)?;
        tx.commit().map_err(sql("creating a session"))?;
        Ok(key)
    }

    /// Writes a session (or several, one after another) inside one
    /// transaction, fed by `fill` through a [`SessionWriter`] (streaming
    /// import): all of it commits, or nothing. A staged write commits in
    /// batches instead (see [`SessionWriter::begin_staged`]).
    pub fn write_session<T>(
        &self,
        fill: impl FnOnce(&mut SessionWriter<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn()?;
        let (tx, lock_taken) = self.begin_write_clocked(&mut conn, "starting a session write")?;
        let mut writer = SessionWriter {
            tx,
            lock_taken,
            appender: None,
            codec: self.codec(),
            staged: None,
            manager: &self.0.manager,
            held_text: Default::default(),
        };
        // A batch paused while its writer waited for input is begun again:
        // what follows commits it.
        let filled = fill(&mut writer).and_then(|out| writer.resume_batch().map(|()| out));
        let SessionWriter {
            tx,
            lock_taken,
            appender,
            staged,
            mut held_text,
            ..
        } = writer;
        // A staged write that failed between relaxing and restoring the
        // connection's sync level must not hand it back to the pool relaxed.
        let relaxed_from = staged.as_ref().and_then(|s| s.relaxed_from());
        let out = match filled {
            Ok(out) => out,
            Err(e) => {
                // What failed is what the caller hears; each step of the
                // cleanup below is attempted whatever the others do.
                if let Some(level) = relaxed_from {
                    // Rolled back by hand: the level can only change outside
                    // a transaction (dropping `tx` then does nothing more).
                    // A failed COMMIT or BEGIN has left none open already.
                    if !tx.is_autocommit() {
                        let _ = tx.execute_batch("ROLLBACK");
                    }
                    // It can fail only inside a transaction (a rollback
                    // that failed), and such a connection is never lent
                    // again (`fit_to_lend_again`).
                    let _ = super::writer::restore_sync(&tx, level);
                }
                drop(tx);
                // Batches a staged write already committed are removed, so a
                // failed import leaves nothing behind, as a one-transaction
                // import never did (if this fails too, the next import of the
                // file discards them: they stay staged, invisible).
                // An append to a visible session keeps what it committed
                // (a prefix of whole entries) and lets go of its claim.
                match staged {
                    Some(staged) if staged.visible() => {
                        let _ = self.release_claim(staged.key(), staged.token());
                    }
                    Some(staged) => {
                        let _ = self.discard_staged(staged.key(), staged.token());
                    }
                    None => {}
                }
                return Err(e);
            }
        };
        if let Some(level) = relaxed_from {
            // Not published (a caller's choice): the last batch commits
            // relaxed, and the connection gets its level back after it.
            if let Some(a) = appender {
                a.finish(&tx)?;
            }
            tx.execute_batch("COMMIT")
                .map_err(sql("committing a session write"))?;
            super::writer::restore_sync(&tx, level)?;
            return Ok(out);
        }
        if let Some(a) = appender {
            a.finish(&tx)?;
        }
        held_text.flush(&tx)?;
        let committing = Instant::now();
        tx.commit().map_err(sql("committing a session write"))?;
        if let Some(staged) = &staged {
            let span = super::lock_trace::started_at("staged-last", lock_taken);
            super::lock_trace::end(
                span,
                staged.rows(),
                &format!("commit_ms={:.2}", committing.elapsed().as_secs_f64() * 1e3),
            );
        }
        Ok(out)
    }

    /// Opens a session by id for reading; it takes the writer claim at its first write.
    pub fn open_session(&self, id: &str) -> Result<SqliteStorage> {
        let conn = self.conn()?;
        let key: Option<i64> = conn
            .prepare_cached(
                "SELECT session_key FROM sessions WHERE id = ?1 AND staged_from IS NULL",
            )
            .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
            .map_err(sql("opening a session"))?;
        let key = key.ok_or_else(|| Error::SessionNotFound(id.to_owned()))?;
        Ok(SqliteStorage::new(self.clone(), key, id))
    }

    /// The ids of sessions whose id starts with `prefix` (at most `limit`),
    /// in id order: what
    /// [`resolve_session`](crate::archive::SessionArchive::resolve_session)
    /// chooses from.
    pub fn sessions_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached("SELECT id FROM sessions WHERE id >= ?1 AND id < ?1 || char(1114111) AND staged_from IS NULL ORDER BY id LIMIT ?2")
            .map_err(sql("resolving a session id"))?;
        let ids = st
            .query_map(
                params![prefix, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| r.get(0),
            )
            .and_then(Iterator::collect)
            .map_err(sql("resolving a session id"));
        ids
    }

    /// How many sessions did not come from a file below `dir` (sessions created
    /// in the archive count too).
    pub fn sessions_not_imported_from(&self, dir: &std::path::Path) -> Result<u64> {
        let prefix = format!("{}{}", dir.display(), std::path::MAIN_SEPARATOR);
        self.conn()?
            .query_row(
                "SELECT count(*) FROM sessions s WHERE s.staged_from IS NULL AND NOT EXISTS (
                     SELECT 1 FROM imports i WHERE i.session_key = s.session_key
                        AND substr(i.source_path, 1, length(?1)) = ?1)",
                [prefix],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(sql("counting sessions"))
    }

    /// Sessions newest first, filtered and paged, without touching entries.
    pub fn list(&self, q: &ListQuery) -> Result<Vec<SessionSummary>> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT {METADATA_COLUMNS}, name, entry_count, {STATS_COLUMNS}, contract,
                        last_active_ms
                 FROM sessions WHERE {LIST_FILTER}
                 ORDER BY {}
                 LIMIT ?5 OFFSET ?6",
                q.order_by("")
            ))
            .map_err(sql("listing sessions"))?;
        let limit = q.limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let offset = i64::try_from(q.offset).unwrap_or(i64::MAX);
        let (cwd, under, since, name) = q.filter_values();
        let rows = st
            .query_map(params![cwd, under, since, name, limit, offset], |r| {
                Ok(SessionSummary {
                    metadata: rows::metadata_at(r, 0)?,
                    name: r.get::<_, Option<String>>(5)?.map(stored_js_string),
                    entry_count: r.get(6)?,
                    stats: rows::stats_at(r, 7)?,
                    contract: crate::backend::session_rows::contract_at(r, 12)?,
                    last_active_ms: r.get(13)?,
                })
            })
            .and_then(Iterator::collect)
            .map_err(sql("listing sessions"));
        rows
    }

    /// How many sessions [`Archive::list`] would list without a page.
    pub fn count(&self, q: &ListQuery) -> Result<u64> {
        let (cwd, under, since, name) = q.filter_values();
        self.conn()?
            .prepare_cached(&format!(
                "SELECT count(*) FROM sessions WHERE {LIST_FILTER}"
            ))
            .and_then(|mut st| {
                st.query_row(params![cwd, under, since, name], |r| r.get::<_, i64>(0))
            })
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(sql("counting sessions"))
    }

    /// Usage summed by session, UTC day and model from the maintained
    /// `usage_facts` (each entry once across forks), no entry read.
    pub fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>> {
        let conn = self.conn()?;
        let plan = q.plan();
        let under = q
            .cwd_under
            .as_deref()
            .map(|d| d.strip_suffix('/').filter(|d| !d.is_empty()).unwrap_or(d));
        let mut st = conn
            .prepare_cached(
                "WITH f AS (
                   SELECT session_key, day, model, entries AS n, input AS i, output AS o,
                          cache_read AS cr, cache_write AS cw, cost AS c
                     FROM usage_daily
                    WHERE ?1 AND entries > 0 AND (?2 IS NULL OR day >= ?2) AND (?3 IS NULL OR day < ?3)
                   UNION ALL
                   SELECT session_key, at_ms / 86400000 - (at_ms % 86400000 < 0), model, 1,
                          input, output, cache_read, cache_write, cost
                     FROM usage_facts
                    WHERE counted = 1
                      AND ((at_ms >= ?4 AND at_ms < ?5) OR (at_ms >= ?6 AND at_ms < ?7)))
                 SELECT s.id, s.cwd, f.day, f.model, sum(f.n), sum(f.i), sum(f.o), sum(f.cr),
                        sum(f.cw), sum(f.c)
                   FROM f JOIN sessions s ON s.session_key = f.session_key
                  WHERE s.staged_from IS NULL
                    AND (?8 IS NULL OR s.cwd = ?8 OR substr(s.cwd, 1, length(?8) + 1) = ?8 || '/')
                  GROUP BY f.session_key, f.day, f.model
                  ORDER BY f.day, s.id, f.model",
            )
            .map_err(sql("summing usage"))?;
        let rows = st
            .query_map(
                params![
                    plan.daily,
                    plan.day_from,
                    plan.day_to,
                    plan.cut[0].unwrap_or_default().0,
                    plan.cut[0].unwrap_or_default().1,
                    plan.cut[1].unwrap_or_default().0,
                    plan.cut[1].unwrap_or_default().1,
                    under
                ],
                |r| {
                    Ok(UsageRow {
                        session: r.get(0)?,
                        cwd: r.get(1)?,
                        day: r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                        model: r.get(3)?,
                        entries: r.get(4)?,
                        input: r.get(5)?,
                        output: r.get(6)?,
                        cache_read: r.get(7)?,
                        cache_write: r.get(8)?,
                        cost: r.get(9)?,
                    })
                },
            )
            .and_then(Iterator::collect)
            .map_err(sql("summing usage"));
        rows
    }

    /// Totals over every session, from the maintained session rows only.
    pub fn totals(&self) -> Result<ArchiveTotals> {
        let conn = self.conn()?;
        let mut t = conn
            .query_row(
                "SELECT count(*), coalesce(sum(entry_count), 0), coalesce(sum(message_count), 0),
                        coalesce(sum(cached_tokens), 0), coalesce(sum(uncached_tokens), 0),
                        coalesce(sum(total_tokens), 0), coalesce(sum(cost_total), 0) FROM sessions
                 WHERE staged_from IS NULL",
                [],
                |r| {
                    Ok(ArchiveTotals {
                        sessions: r.get(0)?,
                        entries: r.get(1)?,
                        stats: rows::stats_at(r, 2)?,
                        per_cwd: Vec::new(),
                    })
                },
            )
            .map_err(sql("summing sessions"))?;
        let mut st = conn
            .prepare(
                "SELECT cwd, count(*), sum(message_count), sum(cost_total) FROM sessions
                 WHERE staged_from IS NULL GROUP BY cwd ORDER BY count(*) DESC, cwd",
            )
            .map_err(sql("summing sessions"))?;
        t.per_cwd = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .and_then(Iterator::collect)
            .map_err(sql("summing sessions"))?;
        Ok(t)
    }

    /// Deletes a session and everything derived from it (cache, labels, leaf
    /// events, search rows, import records); refuses a session a writer
    /// holds. The first, short transaction marks the session deleted
    /// ([`DELETE_MARKER`]: from then on no reader sees it) and takes its
    /// claim; the rows then go in transactions of at most
    /// [`BATCHED_WRITE`](super::writer::BATCHED_WRITE), so other writers wait at most one batch. If this
    /// process dies half-way, the next open of the archive finishes it
    /// ([`pending`]).
    pub fn delete_session(&self, id: &str) -> Result<()> {
        pending::delete_session(self, id)
    }

    /// Finishes what a process that died half-way left: a batched delete
    /// ([`DELETE_MARKER`]) is finished, a batched fork ([`FORK_MARKER`]) is
    /// removed. A session whose claim a live writer holds (its delete or
    /// fork is running now) is left to it. Returns how many it finished.
    pub fn recover_half_done(&self) -> Result<usize> {
        pending::recover_half_done(self)
    }

    /// Removes session `key`, already invisible to readers (staged, or
    /// marked deleted) and claimed by `token`, with everything derived from
    /// it: transactions of at most [`BATCHED_WRITE`](super::writer::BATCHED_WRITE) each, a pause of
    /// [`BATCHED_GAP`] between them so that a waiting writer gets the lock.
    /// Any process may finish it after a crash (each batch leaves a
    /// consistent, still invisible remainder).
    pub(super) fn remove_in_batches(&self, key: i64, token: &str) -> Result<()> {
        pending::remove_in_batches(self, key, token)
    }

    /// Removes session `id`'s writer claim, whatever its lease, and says
    /// whose it was (`None`: there was none); a running holder on this host
    /// is refused unless `force` ([`crate::backend::claim::clear`]).
    pub fn clear_claim(
        &self,
        id: &str,
        force: bool,
    ) -> Result<Option<crate::backend::claim::Cleared>> {
        let ctx = "clearing a writer claim";
        let mut conn = self.conn()?;
        let tx = self.begin_write(&mut conn, ctx)?;
        let key: i64 = tx
            .query_row(
                "SELECT session_key FROM sessions WHERE id = ?1 AND staged_from IS NULL",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql(ctx))?
            .ok_or_else(|| Error::SessionNotFound(id.to_owned()))?;
        let cleared =
            crate::backend::claim::clear(&mut super::claim::ClaimConn(&tx), key, id, force)?;
        tx.commit().map_err(sql(ctx))?;
        Ok(cleared)
    }

    /// What became of an earlier import of `source` that was staged and not
    /// published: `Some(id)` of a live one (another process is importing the
    /// file now), or `None` once a dead one is discarded (or there was none).
    pub fn discard_dead_staged_import(&self, source: &str) -> Result<Option<String>> {
        let mut conn = self.conn()?;
        let tx = self.begin_write(&mut conn, "discarding a staged import")?;
        let staged: Option<(i64, String)> = tx
            .query_row(
                "SELECT session_key, id FROM sessions WHERE staged_from = ?1",
                [source],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(sql("discarding a staged import"))?;
        let Some((key, id)) = staged else {
            return Ok(None);
        };
        match super::claim::refuse_if_held(&tx, key, &id) {
            Err(Error::WriterClaimed { .. }) => return Ok(Some(id)),
            other => other?,
        }
        // Claimed, so that no other import discards it at the same time; if
        // this process dies before the last batch, the next import of the
        // file finds what is left, still staged, and discards it.
        let token = uuid::Uuid::now_v7().to_string();
        super::claim::insert_claim(&tx, key, &token)?;
        tx.commit().map_err(sql("discarding a staged import"))?;
        drop(conn);
        self.remove_in_batches(key, &token)?;
        Ok(None)
    }

    /// Removes writer claim `token` of session `key` (a failed batched
    /// append's), in a transaction of its own.
    fn release_claim(&self, key: i64, token: &str) -> Result<()> {
        let ctx = "releasing a writer claim";
        let mut conn = self.conn()?;
        let tx = self.begin_write(&mut conn, ctx)?;
        super::claim::release_claim(&tx, key, token)?;
        tx.commit().map_err(sql(ctx))
    }

    /// Removes a staged session whose write failed (its committed batches),
    /// in batches; this process holds its claim (`token`). It stays staged
    /// meanwhile: if this fails half-way, the next import of its file (or,
    /// for a fork, the next open) removes the rest.
    pub(super) fn discard_staged(&self, key: i64, token: &str) -> Result<()> {
        self.remove_in_batches(key, token)
    }

    /// Full-text search over message text, best first: the first `limit` hits.
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

    /// Full-text search, best first: `limit` hits after skipping `offset`.
    /// Words match in any order; `"a b"` is a phrase; `foo*` matches words
    /// starting with `foo`; `a OR b`, `-word` and `( … )` as
    /// [`search::boolean`] reads them (each alternative a plain search here).
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

    /// [`Archive::search_page`] of a plain query (no `OR`, `-`, groups).
    fn plain_search_page(
        &self,
        query: &str,
        filter: &SearchFilter<'_>,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<SearchHit>> {
        let SearchFilter { session, cwd, role } = *filter;
        let plan = fts::IndexQuery::new(query)?;
        if plan.terms.is_empty() {
            // No tokens, no hits (FTS5 would call an empty query a syntax error).
            return Ok(Vec::new());
        }
        let conn = self.conn()?;
        let _snapshot = Archive::begin_read(&conn, "searching")?;
        // Rows a delete left in the index are passed over (fts_dead).
        let left_behind = fts_dead::left_behind(&conn)?;
        let ranking = fts::Ranking::new(&conn, &plan, &left_behind)?;
        // Candidates as (length, key): sorted, the best first. The index
        // ranks nothing itself (it keeps no counts): see fts::Ranking.
        // A role filter is checked on each candidate as the page is read,
        // best first (most role-filtered searches stop after a few reads).
        // A role no message has finds nothing.
        let role_id = match role {
            None => None,
            Some(name) => match super::rows::role_id(&conn, name).map_err(sql("searching"))? {
                None => return Ok(Vec::new()),
                id => id,
            },
        };
        // A candidate's entry and session matter only to a session or cwd
        // filter, or while an import is staged (its rows are not published);
        // otherwise no candidate looks them up before the page is read (most
        // of a search's work on a large archive).
        let whole_archive = session.is_none()
            && cwd.is_none()
            && !conn
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM sessions WHERE staged_from IS NOT NULL)",
                )
                .and_then(|mut st| st.query_row([], |r| r.get::<_, bool>(0)))
                .map_err(sql("searching"))?;
        let candidate = |r: &rusqlite::Row<'_>| {
            let sz = r.get_ref(1)?.as_blob()?;
            Ok((fts::indexed_length(sz), r.get(0)?))
        };
        let mut candidates: Vec<(u64, i64)> = if whole_archive {
            conn.prepare_cached(
                "SELECT m.rowid, d.sz
                 FROM message_text m
                 JOIN message_text_docsize d ON d.id = m.rowid
                 WHERE message_text MATCH ?1",
            )
            .and_then(|mut st| {
                st.query_map(params![plan.terms], candidate)?
                    .filter(|c| !matches!(c, Ok((_, key)) if left_behind.holds(*key)))
                    .collect()
            })
        } else {
            conn.prepare_cached(
                "SELECT m.rowid, d.sz
                 FROM message_text m
                 JOIN message_text_docsize d ON d.id = m.rowid
                 JOIN entries e ON e.entry_key = m.rowid
                 JOIN sessions s ON s.session_key = e.session_key
                 WHERE message_text MATCH ?1 AND s.staged_from IS NULL
                   AND (?2 IS NULL OR s.id = ?2) AND (?3 IS NULL OR s.cwd = ?3)",
            )
            .and_then(|mut st| {
                st.query_map(params![plan.terms, session, cwd], candidate)?
                    .collect()
            })
        }
        .map_err(sql("searching"))?;
        // Candidates that need no check are hits: only the best `offset +
        // limit` need an order (candidates are distinct, so the page is the
        // same).
        let checked = plan.confirm.is_some() || role_id.is_some();
        let wanted = offset.saturating_add(limit);
        if !checked && wanted < candidates.len() {
            candidates.select_nth_unstable(wanted);
            candidates.truncate(wanted);
        }
        candidates.sort_unstable();
        // Unchecked candidates are hits: the page starts at `offset`.
        // Otherwise hits are counted as they pass.
        let (start, mut skip) = if checked { (0, offset) } else { (offset, 0) };
        // The index keeps no text: each hit's snippet is cut from its entry.
        let terms = search::query_terms(query);
        let mut read = conn
            .prepare_cached(
                "SELECT s.id, e.id, e.json, s.name, s.created_at, e.role_id
                 FROM entries e JOIN sessions s ON s.session_key = e.session_key
                 WHERE e.entry_key = ?1",
            )
            .map_err(sql("searching"))?;
        let mut hits = Vec::with_capacity(limit.min(1024));
        for (length, key) in candidates.into_iter().skip(start) {
            if hits.len() >= limit {
                break;
            }
            let (session_id, entry_id, stored, name, created_at, stored_role) = read
                .query_row([key], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, rusqlite::types::Value>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                    ))
                })
                .map_err(sql("searching"))?;
            if role_id.is_some() && stored_role != role_id {
                continue;
            }
            let entry = self.codec().decode_entry(&conn, (&stored).into(), None)?;
            let (role, text) = search::searchable_text(&entry).unwrap_or_default();
            if !plan.confirms(&text)? {
                continue;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            hits.push(SearchHit {
                session_id,
                entry_id,
                role,
                session_name: name.map(stored_js_string),
                session_created_at: created_at,
                snippet: search::snippet(&text, &terms, search::SNIPPET_TOKENS),
                rank: ranking.score(length),
            });
        }
        Ok(hits)
    }
}

impl Archive {
    /// The branch cache's size per session (or for one): entries, segments
    /// and compaction rows, so a pathological session can be seen.
    pub fn cache_sizes(
        &self,
        session: Option<&str>,
    ) -> Result<Vec<(String, branch_cache::CacheSize)>> {
        branch_cache::cache_sizes(&*self.conn()?, session)
    }
}

/// The SQLite statements of [`pending`]'s half-done forks and deletes: the
/// mark is `sessions.staged_from`.
impl pending::PendingStore for Archive {
    const GAP: std::time::Duration = BATCHED_GAP;

    fn between_batches(&self) {
        Archive::between_batches(self, Self::GAP);
    }

    fn marked_sessions(&self) -> Result<Vec<(i64, String)>> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare("SELECT session_key, id FROM sessions WHERE staged_from IN (?1, ?2)")
            .map_err(sql("finding half-done deletes and forks"))?;
        let rows = st
            .query_map(params![DELETE_MARKER, FORK_MARKER], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .and_then(Iterator::collect);
        rows.map_err(sql("finding half-done deletes and forks"))
    }

    fn mark_deleted(&self, id: &str, token: &str) -> Result<i64> {
        let ctx = "deleting a session";
        let mut conn = self.conn()?;
        let tx = self.begin_write(&mut conn, ctx)?;
        let key: Option<i64> = tx
            .query_row(
                "SELECT session_key FROM sessions WHERE id = ?1 AND staged_from IS NULL",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql(ctx))?;
        let key = key.ok_or_else(|| Error::SessionNotFound(id.to_owned()))?;
        super::claim::refuse_if_held(&tx, key, id)?;
        tx.execute(
            "UPDATE sessions SET staged_from = ?2 WHERE session_key = ?1",
            params![key, DELETE_MARKER],
        )
        .map_err(sql(ctx))?;
        super::claim::insert_claim(&tx, key, token)?;
        tx.commit().map_err(sql(ctx))?;
        Ok(key)
    }

    fn take_marked(&self, key: i64, id: &str, token: &str) -> Result<bool> {
        let ctx = "finishing a half-done delete";
        let mut conn = self.conn()?;
        let tx = self.begin_write(&mut conn, ctx)?;
        super::claim::refuse_if_held(&tx, key, id)?;
        let n = tx
            .execute(
                "UPDATE sessions SET staged_from = ?2
                 WHERE session_key = ?1 AND staged_from IN (?2, ?3)",
                params![key, DELETE_MARKER, FORK_MARKER],
            )
            .map_err(sql(ctx))?;
        if n == 0 {
            return Ok(false);
        }
        super::claim::insert_claim(&tx, key, token)?;
        tx.commit().map_err(sql(ctx))?;
        Ok(true)
    }

    fn remove_batch(&self, key: i64, token: &str) -> Result<bool> {
        let mut conn = self.conn()?;
        // A batch that leaves the session's row commits without waiting
        // for the disk (as an import's batches do: the session is marked,
        // no reader sees it, and whoever opens the archive next finishes
        // it); the one that removes the row commits at the archive's own
        // level, its sync of the log making the others durable with it. A
        // batch's commit that synced the log held the lock 100 ms (34 on a
        // CPU) while the disk flushed other writes, at 1,000,000 entries.
        let relaxed_from = super::writer::relax_sync(&conn)?;
        let removed = self.remove_in_one_transaction(&mut conn, key, token, relaxed_from.is_none());
        if let Some(level) = relaxed_from {
            super::writer::restore_sync(&conn, level)?;
        }
        match removed? {
            Removal::More => Ok(false),
            Removal::Gone => Ok(true),
            Removal::RowLeft => self
                .remove_in_one_transaction(&mut conn, key, token, true)
                .map(|r| r == Removal::Gone),
        }
    }
}

/// How far a step of removing a session got ([`remove_some`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    /// Rows are left.
    More,
    /// Only the session's row is left (a step told not to remove it).
    RowLeft,
    /// The session is gone.
    Gone,
}

impl Archive {
    /// One batch of removing session `key` under claim `token`: steps of
    /// [`remove_some`] until the batch clock is due, committed; the
    /// session's row too if `remove_row`.
    fn remove_in_one_transaction(
        &self,
        conn: &mut rusqlite::Connection,
        key: i64,
        token: &str,
        remove_row: bool,
    ) -> Result<Removal> {
        // The batch's clock starts with the lock (its merge share counts).
        let (tx, started) = self.begin_write_clocked(conn, "deleting a session")?;
        super::claim::renew_claim(&tx, key, token)?;
        let clock = REMOVAL_CLOCK.with(std::cell::Cell::get);
        let mut steps = 0;
        let removal = loop {
            let removal = remove_some(&tx, key, remove_row)?;
            if removal != Removal::More {
                break removal;
            }
            steps += 1;
            if steps >= REMOVE_STEPS || clock.due(started.elapsed(), steps) {
                break removal;
            }
        };
        let committing = Instant::now();
        tx.commit().map_err(sql("deleting a session"))?;
        let span = super::lock_trace::started_at("delete-batch", started);
        super::lock_trace::end(
            span,
            steps,
            &format!("commit_ms={:.2}", committing.elapsed().as_secs_f64() * 1e3),
        );
        REMOVAL_CLOCK.with(|c| {
            let mut learnt = c.get();
            learnt.record_tail(committing.elapsed());
            c.set(learnt);
        });
        if removal != Removal::Gone {
            // Only this operation waits for the log it wrote to be copied.
            super::checkpointer::keep_log_short(conn, self.0.manager.checkpointer());
        }
        Ok(removal)
    }
}

std::thread_local! {
    /// The clock of this thread's removal batches: it learns how long their
    /// commits take (the pages they changed are written to the log) and ends the next batch that much earlier, so that the write
    /// lock is held for [`BATCHED_WRITE`](super::writer::BATCHED_WRITE) with
    /// the commit, not before it (the rule an import's batches follow).
    /// Timed at 200,000 entries (load 9), a batch's commit took 24 ms p50 and
    /// 84 ms at most after its 50 ms.
    static REMOVAL_CLOCK: std::cell::Cell<pending::TailClock> =
        std::cell::Cell::new(pending::TailClock::default());
}

/// Entries removed per step of [`remove_some`] (a step then checks the
/// clock). When each entry's search row cost a tombstone in every segment
/// that might hold it, 256 entries a step took 40–58 ms on a loaded machine
/// (200,000-entry delete, load 13), so a batch ran up to a step past its
/// [`BATCHED_WRITE`](super::writer::BATCHED_WRITE); at 64 a step was about
/// a quarter of that (the rows are now left behind: [`fts_dead`]).
const REMOVE_ENTRIES: i64 = 64;
/// Rows of the other tables removed per step.
const REMOVE_ROWS: i64 = 1_024;

/// The most steps of [`remove_some`] in one batch: 1,536 entries. Each entry
/// removed makes about one page dirty that no other nearby entry shares
/// (`entries_by_id` is in id order, which is not the log's), and the commit
/// writes every dirty page to the log: at 1,000,000 entries a batch of
/// 4,800 entries, its steps quick, committed for 61 ms on a CPU (10,400
/// pages written, 4,000 of them by the commit), after 36 ms of steps, where
/// the clock had learnt commits of 10–20 ms.
const REMOVE_STEPS: u64 = 24;

/// The tables that hold a session's rows besides `entries`, each with the
/// statement that removes up to `?2` of session `?1`'s rows.
const REMOVE_OTHER: [&str; 9] = [
    "DELETE FROM segments WHERE segment_id IN
       (SELECT segment_id FROM segments WHERE session_key = ?1 LIMIT ?2)",
    "DELETE FROM leaf_events WHERE session_key = ?1 AND seq IN
       (SELECT seq FROM leaf_events WHERE session_key = ?1 LIMIT ?2)",
    "DELETE FROM compactions WHERE entry_key IN
       (SELECT entry_key FROM compactions WHERE session_key = ?1 LIMIT ?2)",
    "DELETE FROM labels WHERE session_key = ?1 AND target_id IN
       (SELECT target_id FROM labels WHERE session_key = ?1 LIMIT ?2)",
    "DELETE FROM usage_facts WHERE fact_key IN
       (SELECT fact_key FROM usage_facts WHERE session_key = ?1 LIMIT ?2)",
    "DELETE FROM usage_daily WHERE session_key = ?1 AND (day, model) IN
       (SELECT day, model FROM usage_daily WHERE session_key = ?1 LIMIT ?2)",
    "DELETE FROM kept_lines WHERE kept_key IN
       (SELECT kept_key FROM kept_lines WHERE session_key = ?1 LIMIT ?2)",
    "DELETE FROM entry_blocks WHERE block_id IN
       (SELECT block_id FROM entry_blocks WHERE session_key = ?1 LIMIT ?2)",
    "DELETE FROM imports WHERE session_key = ?1",
];

/// One step of removing session `key` inside `tx`: its newest
/// [`REMOVE_ENTRIES`] entries (with the blobs only they held; their search
/// rows are left behind, [`fts_dead`]), or once none is left up to [`REMOVE_ROWS`] rows of another
/// table, or once those are gone too the session row (if `remove_row`).
/// Every step leaves a consistent remainder.
fn remove_some(tx: &rusqlite::Transaction, key: i64, remove_row: bool) -> Result<Removal> {
    let ctx = "deleting a session";
    let lowest: Option<i64> = tx
        .prepare_cached(
            "SELECT min(seq) FROM (SELECT seq FROM entries WHERE session_key = ?1
             ORDER BY seq DESC LIMIT ?2)",
        )
        .and_then(|mut st| st.query_row(params![key, REMOVE_ENTRIES], |r| r.get(0)))
        .map_err(sql(ctx))?;
    if let Some(lowest) = lowest {
        // Their search rows stay in the index, recorded as left behind
        // (fts_dead: FTS5 would rebuild a tombstone hash whole in one of
        // these steps), and in the index a compact is building beside it,
        // if one is.
        fts_dead::leave_behind(tx, fts_dead::INDEX, key, lowest)?;
        if super::fts_rebuild::rebuilding(tx)? {
            fts_dead::leave_behind(tx, super::fts_rebuild::NEXT, key, lowest)?;
        }
        // The blobs these entries held, before their rows forget which.
        let blobs: Vec<i64> = tx
            .prepare_cached(
                "SELECT DISTINCT blob_id FROM entry_blobs WHERE session_key = ?1 AND entry_key IN
                   (SELECT entry_key FROM entries WHERE session_key = ?1 AND seq >= ?2)",
            )
            .and_then(|mut st| {
                st.query_map(params![key, lowest], |r| r.get(0))
                    .and_then(Iterator::collect)
            })
            .map_err(sql(ctx))?;
        if !blobs.is_empty() {
            tx.prepare_cached(
                "DELETE FROM entry_blobs WHERE session_key = ?1 AND entry_key IN
                   (SELECT entry_key FROM entries WHERE session_key = ?1 AND seq >= ?2)",
            )
            .and_then(|mut st| st.execute(params![key, lowest]))
            .map_err(sql(ctx))?;
        }
        tx.prepare_cached("DELETE FROM entries WHERE session_key = ?1 AND seq >= ?2")
            .and_then(|mut st| st.execute(params![key, lowest]))
            .map_err(sql(ctx))?;
        remove_unheld_blobs(tx, &blobs)?;
        return Ok(Removal::More);
    }
    // Blob references left without their entries (none in a consistent
    // archive), with the blobs only they held.
    let blobs: Vec<i64> = tx
        .prepare_cached("SELECT DISTINCT blob_id FROM entry_blobs WHERE session_key = ?1")
        .and_then(|mut st| {
            st.query_map([key], |r| r.get(0))
                .and_then(Iterator::collect)
        })
        .map_err(sql(ctx))?;
    if !blobs.is_empty() {
        tx.execute("DELETE FROM entry_blobs WHERE session_key = ?1", [key])
            .map_err(sql(ctx))?;
        remove_unheld_blobs(tx, &blobs)?;
        return Ok(Removal::More);
    }
    for statement in REMOVE_OTHER {
        let n = tx
            .prepare_cached(statement)
            .and_then(|mut st| {
                if statement.contains("?2") {
                    st.execute(params![key, REMOVE_ROWS])
                } else {
                    st.execute(params![key])
                }
            })
            .map_err(sql(ctx))?;
        if n > 0 {
            return Ok(Removal::More);
        }
    }
    if !remove_row {
        return Ok(Removal::RowLeft);
    }
    // What is left cascades with the row (its claim, a few usage rows).
    tx.execute("DELETE FROM sessions WHERE session_key = ?1", [key])
        .map_err(sql(ctx))?;
    Ok(Removal::Gone)
}

/// Removes those of `blobs` that no entry holds any more.
fn remove_unheld_blobs(tx: &rusqlite::Transaction, blobs: &[i64]) -> Result<()> {
    for blob in blobs {
        tx.prepare_cached(
            "DELETE FROM blobs WHERE blob_id = ?1
               AND NOT EXISTS (SELECT 1 FROM entry_blobs WHERE blob_id = ?1)",
        )
        .and_then(|mut st| st.execute([blob]))
        .map_err(sql("deleting a session"))?;
    }
    Ok(())
}

impl Archive {
    /// The record of a previous import of `source_path`, if any.
    pub fn import_record(&self, source_path: &str) -> Result<Option<ImportRecord>> {
        let conn = self.conn()?;
        conn.query_row(
            "SELECT i.source_path, s.id, i.bytes, i.prefix_hash, i.lines, i.file_size, i.file_mtime
             FROM imports i JOIN sessions s USING (session_key) WHERE i.source_path = ?1",
            [source_path],
            |r| {
                Ok(ImportRecord {
                    source_path: r.get(0)?,
                    session_id: r.get(1)?,
                    bytes: r.get::<_, i64>(2)?.try_into().unwrap_or(0),
                    prefix_hash: r.get(3)?,
                    lines: r.get::<_, i64>(4)?.try_into().unwrap_or(0),
                    file_size: r.get::<_, i64>(5)?.try_into().unwrap_or(0),
                    file_mtime: r.get(6)?,
                })
            },
        )
        .optional()
        .map_err(sql("reading an import record"))
    }

    /// The files session `session_id` was imported from (or exported to
    /// and recorded), by canonical path: where an export writes it again.
    pub fn import_paths_of(&self, session_id: &str) -> Result<Vec<String>> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare(
                "SELECT i.source_path FROM imports i JOIN sessions s USING (session_key)
                 WHERE s.id = ?1 ORDER BY i.source_path",
            )
            .map_err(sql("reading import records"))?;
        let rows = st
            .query_map([session_id], |r| r.get::<_, String>(0))
            .map_err(sql("reading import records"))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(sql("reading import records"))
    }

    /// Whether a session with this id exists.
    pub fn has_session(&self, id: &str) -> Result<bool> {
        let conn = self.conn()?;
        conn.query_row(
            "SELECT 1 FROM sessions WHERE id = ?1 AND staged_from IS NULL",
            [id],
            |_| Ok(()),
        )
        .optional()
        .map(|r| r.is_some())
        .map_err(sql("looking up a session"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn new_session(id: &str) -> NewSession {
        NewSession::sdk(id, "2025-01-01T00:00:00.000Z", "/w")
    }

    /// A chain of `n` user messages, each holding the word `shared` and one
    /// of its own.
    fn messages(session: &str, n: usize) -> Vec<Result<Entry>> {
        (0..n)
            .map(|i| {
                let parent = i.checked_sub(1).map(|p| format!("{session}{p}"));
                Entry::from_value(&json!({
                    "type": "message", "id": format!("{session}{i}"), "parentId": parent,
                    "timestamp": "2025-01-01T00:00:00.000Z",
                    "message": {"role": "user", "content": format!("shared {session}word{i}")}
                }))
            })
            .collect()
    }

    fn matching(archive: &Archive, query: &str) -> i64 {
        archive
            .conn()
            .unwrap()
            .query_row(
                "SELECT count(*) FROM message_text WHERE message_text MATCH ?1",
                [query],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// Issue 40.1 (schema step 0019): FTS5's automerge is off, and each
    /// write transaction merges the search index a bounded amount at its
    /// start instead. 300 sessions, a transaction each, each adding a
    /// segment: no level holds more than FTS5's threshold (4) and the one
    /// segment the last write added, where without the writers' merges
    /// the levels would fill to FTS5's crisis merge (16).
    #[test]
    fn writers_keep_the_search_index_merged() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed).unwrap();
        let automerge: i64 = archive
            .conn()
            .unwrap()
            .query_row(
                "SELECT v FROM message_text_config WHERE k = 'automerge'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(automerge, 0);
        for i in 0..300 {
            let id = format!("s{i}n");
            archive
                .create_session_with(&new_session(&id), messages(&id, 3))
                .unwrap();
        }
        let shape = fts::index_shape(&archive.conn().unwrap()).unwrap();
        let fullest = shape.per_level.iter().copied().max().unwrap_or(0);
        assert!(fullest <= 5, "{shape:?}");
        assert!(shape.segments <= 3 * shape.levels + 2, "{shape:?}");
        assert_eq!(matching(&archive, "shared"), 900);
        assert_eq!(matching(&archive, "s299nword2"), 1);
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
    }

    /// A new archive in `dir` holding a chain of [`messages`] per
    /// `(session, entries)`.
    fn archive_holding(dir: &tempfile::TempDir, sessions: &[(&str, usize)]) -> Archive {
        let archive = Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed).unwrap();
        for &(id, n) in sessions {
            archive
                .create_session_with(&new_session(id), messages(id, n))
                .unwrap();
        }
        archive
    }

    /// Every hit of `query` through the archive's search, as (session,
    /// entry, rank bits), best first.
    fn hits(archive: &Archive, query: &str) -> Vec<(String, String, u64)> {
        archive
            .search(query, None, None, None, 100_000)
            .unwrap()
            .into_iter()
            .map(|h| (h.session_id, h.entry_id, h.rank.to_bits()))
            .collect()
    }

    /// Issue 40.1 (schema step 0020): a delete writes nothing to the search
    /// index. FTS5 would add a tombstone per row and, once a segment's
    /// tombstone hash filled, rebuild it whole in one statement (71–153 ms
    /// at 1,000,000 entries); it merged levels for them too, with
    /// `deletemerge` on. Counted: the index's segments and tombstones are as
    /// they were, its rows left behind are recorded per segment, and search
    /// answers exactly as an archive that never held the deleted session,
    /// ranks included. The next compact removes the rows.
    #[test]
    fn a_delete_leaves_its_search_rows_where_they_are_and_search_passes_them() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed).unwrap();
        let never = Archive::open(dir.path().join("never.db"), crate::Durability::Relaxed).unwrap();
        let n = 1_500;
        for archive in [&archive, &never] {
            archive
                .create_session_with(&new_session("kept"), messages("kept", n))
                .unwrap();
        }
        // Longer texts, so that leaving them out changes the average length.
        let gone: Vec<Result<Entry>> = (0..n)
            .map(|i| {
                let parent = i.checked_sub(1).map(|p| format!("gone{p}"));
                Entry::from_value(&json!({
                    "type": "message", "id": format!("gone{i}"), "parentId": parent,
                    "timestamp": "2025-01-01T00:00:00.000Z",
                    "message": {"role": "user", "content": format!("shared goneword{i} and more words {i}")}
                }))
            })
            .collect();
        archive
            .create_session_with(&new_session("gone"), gone)
            .unwrap();
        archive
            .conn()
            .unwrap()
            .execute(
                "INSERT INTO message_text (message_text) VALUES ('optimize')",
                [],
            )
            .unwrap();
        let before = fts::index_shape(&archive.conn().unwrap()).unwrap();
        assert_eq!(before.segments, 1, "{before:?}");
        archive.delete_session("gone").unwrap();
        let after = fts::index_shape(&archive.conn().unwrap()).unwrap();
        assert_eq!(after.segment_ids, before.segment_ids, "{after:?}");
        assert_eq!(
            (after.tombstones, after.rows),
            (0, 2 * n as u64),
            "{after:?}"
        );
        let conn = archive.conn().unwrap();
        assert_eq!(fts_dead::dead_totals(&conn).unwrap().0, n as u64);
        drop(conn);
        assert_eq!(matching(&archive, "shared"), 2 * n as i64);
        for query in [
            "shared",
            "keptword7",
            "goneword7",
            "more words",
            "shared kept*",
        ] {
            assert_eq!(hits(&archive, query), hits(&never, query), "{query}");
        }
        assert_eq!(hits(&archive, "shared").len(), n);
        assert!(hits(&archive, "goneword7").is_empty());
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
        archive.compact(&mut |_, _| {}).unwrap();
        assert_eq!(matching(&archive, "shared"), n as i64);
        let conn = archive.conn().unwrap();
        assert_eq!(fts_dead::dead_totals(&conn).unwrap(), (0, 0));
        assert!(fts_dead::left_behind(&conn).unwrap().key_ranges.is_empty());
        drop(conn);
        assert_eq!(hits(&archive, "shared"), hits(&never, "shared"));
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
    }

    /// The rows a delete leaves behind keep their keys from new entries:
    /// the newest session deleted (its segments the highest), the next
    /// one's segments are numbered past them, so its rows are indexed
    /// beside the ones left, and search finds each of its entries once.
    /// Reusing the ids, the new rows' keys would meet the old rows in the
    /// index (FTS5 refuses a second row of a key).
    #[test]
    fn new_entries_never_take_the_keys_of_rows_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let archive = archive_holding(&dir, &[("kept", 10), ("newest", 40)]);
        let highest = |archive: &Archive| -> i64 {
            archive
                .conn()
                .unwrap()
                .query_row("SELECT max(segment_id) FROM segments", [], |r| r.get(0))
                .unwrap()
        };
        let newest = highest(&archive);
        archive.delete_session("newest").unwrap();
        assert!(highest(&archive) < newest);
        archive
            .create_session_with(&new_session("next"), messages("next", 40))
            .unwrap();
        assert!(highest(&archive) > newest);
        assert_eq!(hits(&archive, "shared").len(), 50);
        assert_eq!(hits(&archive, "nextword39").len(), 1);
        assert!(hits(&archive, "newestword39").is_empty());
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
        // A few rows: the compact removes them the way FTS5 deletes.
        archive.compact(&mut |_, _| {}).unwrap();
        assert_eq!(matching(&archive, "shared"), 50);
        assert_eq!(hits(&archive, "shared").len(), 50);
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
    }

    /// A broom (every entry a child of the root, each its own segment)
    /// leaves its rows recorded as one run of segments, not one record per
    /// segment: each search reads the record whole.
    #[test]
    fn a_deleted_broom_is_recorded_as_one_run_of_segments() {
        let dir = tempfile::tempdir().unwrap();
        let archive = archive_holding(&dir, &[("kept", 10)]);
        let broom: Vec<Result<Entry>> = (0..500)
            .map(|i| {
                let parent = (i > 0).then_some("broom0");
                Entry::from_value(&json!({
                    "type": "message", "id": format!("broom{i}"), "parentId": parent,
                    "timestamp": "2025-01-01T00:00:00.000Z",
                    "message": {"role": "user", "content": format!("shared bristle{i}")}
                }))
            })
            .collect();
        archive
            .create_session_with(&new_session("broom"), broom)
            .unwrap();
        let count = |sql: &str| -> i64 {
            archive
                .conn()
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap()
        };
        assert!(count("SELECT count(*) FROM segments") > 400);
        archive.delete_session("broom").unwrap();
        assert_eq!(count("SELECT count(*) FROM dead_message_text"), 1);
        assert_eq!(count("SELECT sum(rows) FROM dead_message_text"), 500);
        assert_eq!(hits(&archive, "shared").len(), 10);
        assert!(hits(&archive, "bristle7").is_empty());
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
    }

    /// A delete batch removes at most [`REMOVE_STEPS`] steps' entries
    /// (1,536), however quick its steps: its commit writes a page for about
    /// every entry removed. Counted on a session a few steps longer, the
    /// clock far from due.
    #[test]
    fn a_delete_batch_removes_at_most_its_steps_entries() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed).unwrap();
        let cap = REMOVE_STEPS as usize * REMOVE_ENTRIES as usize;
        archive
            .create_session_with(&new_session("gone"), messages("gone", cap + 300))
            .unwrap();
        let token = "test-deleter";
        let key = pending::PendingStore::mark_deleted(&archive, "gone", token).unwrap();
        let mut conn = archive.conn().unwrap();
        let removal = archive
            .remove_in_one_transaction(&mut conn, key, token, true)
            .unwrap();
        assert_eq!(removal, Removal::More);
        let left: i64 = conn
            .query_row(
                "SELECT count(*) FROM entries WHERE session_key = ?1",
                [key],
                |r| r.get(0),
            )
            .unwrap();
        assert!(
            left >= 300,
            "one batch removed {} entries",
            cap + 300 - left as usize
        );
    }

    /// `check` holds the record of rows left behind to the index: a row
    /// without its entry outside any recorded segment, a recorded count the
    /// index does not hold, and a recorded segment of a stored session
    /// (search would pass over its entries) are each named.
    #[test]
    fn check_names_rows_left_behind_that_the_record_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let archive = archive_holding(&dir, &[("kept", 10), ("gone", 10)]);
        archive.delete_session("gone").unwrap();
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
        let conn = archive.conn().unwrap();
        let problem = |sql: &str, undo: &str, starts: &str| {
            conn.execute_batch(sql).unwrap();
            let problems = archive.check(None).unwrap();
            assert!(
                problems.iter().any(|p| p.starts_with(starts)),
                "{sql}: {problems:?}"
            );
            conn.execute_batch(undo).unwrap();
            assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
        };
        problem(
            "CREATE TEMP TABLE kept AS SELECT * FROM dead_message_text; DELETE FROM dead_message_text;",
            "INSERT INTO dead_message_text SELECT * FROM temp.kept; DROP TABLE temp.kept;",
            "message_text (search):",
        );
        problem(
            "UPDATE dead_message_text SET rows = rows + 1;",
            "UPDATE dead_message_text SET rows = rows - 1;",
            "dead_message_text:",
        );
        problem(
            "UPDATE dead_message_text SET tokens = tokens + 1;",
            "UPDATE dead_message_text SET tokens = tokens - 1;",
            "dead_message_text:",
        );
        problem(
            "INSERT INTO dead_message_text SELECT segment_id, segment_id, 0, 0 FROM segments;",
            "DELETE FROM dead_message_text WHERE rows = 0;",
            "dead_message_text:",
        );
    }

    /// A delete half done by another process (or killed, until the next
    /// open finishes it) is a state the archive passes through by design:
    /// its newest entries are gone before their compaction rows. `check`
    /// must not call it damage; a compaction row without its entry in a
    /// session nobody is deleting still is.
    #[test]
    fn check_passes_a_half_done_delete_and_names_a_real_orphan() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed).unwrap();
        let mut entries = messages("gone", 200);
        // A compaction among the newest entries, which the first step removes.
        entries.push(Entry::from_value(&json!({
            "type": "compaction", "id": "gone200", "parentId": "gone199",
            "timestamp": "2025-01-01T00:00:00.000Z", "summary": "so far",
            "firstKeptEntryId": "gone150", "tokensBefore": 1234
        })));
        archive
            .create_session_with(&new_session("gone"), entries)
            .unwrap();
        archive
            .create_session_with(&new_session("kept"), messages("kept", 10))
            .unwrap();
        let token = "test-deleter";
        let key = pending::PendingStore::mark_deleted(&archive, "gone", token).unwrap();
        {
            let mut conn = archive.conn().unwrap();
            let tx = conn.transaction().unwrap();
            let removal = remove_some(&tx, key, true).unwrap();
            assert_eq!(removal, Removal::More, "one step removed it all");
            tx.commit().unwrap();
        }
        let compactions_without_entry: i64 = archive
            .conn()
            .unwrap()
            .query_row(
                "SELECT count(*) FROM compactions WHERE entry_key NOT IN (SELECT entry_key FROM entries)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            compactions_without_entry, 1,
            "the step did not reach the compaction"
        );
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
        // The same row in a session nobody is deleting is damage.
        archive
            .conn()
            .unwrap()
            .execute(
                "UPDATE sessions SET staged_from = NULL WHERE session_key = ?1",
                [key],
            )
            .unwrap();
        let problems = archive.check(None).unwrap();
        assert!(
            problems.iter().any(|p| p.starts_with("compactions:")),
            "{problems:?}"
        );
    }

    fn tables_named(archive: &Archive, name: &str) -> i64 {
        archive
            .conn()
            .unwrap()
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// Issue 40.1: the search index rebuilt beside itself while other
    /// writers add and delete sessions between its transactions ends with
    /// exactly the rows of the entries there, as if indexed afresh: a
    /// session created during the rebuild is found, one deleted during it
    /// (after its rows were copied) is not, and one whose entries took
    /// keys a deleted session freed (below where the rebuild began) is
    /// found once. The old index and its tombstones are gone.
    #[test]
    fn a_rebuilt_search_index_keeps_what_writers_did_meanwhile() {
        use super::super::fts_rebuild::{self, IndexRebuild};
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed).unwrap();
        for (id, n) in [
            ("early", 20),
            ("kept", 1500),
            ("gone", 3000),
            ("newest", 10),
        ] {
            archive
                .create_session_with(&new_session(id), messages(id, n))
                .unwrap();
        }
        archive.delete_session("gone").unwrap();
        assert_eq!(
            fts_dead::dead_totals(&archive.conn().unwrap()).unwrap().0,
            3000
        );
        let conn = archive.conn().unwrap();
        let in_tx = |step: &mut dyn FnMut(&rusqlite::Connection) -> Result<bool>| {
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            let done = step(&conn).unwrap();
            conn.execute_batch("COMMIT").unwrap();
            done
        };
        while !in_tx(&mut |c| fts_rebuild::remove_step(c)) {}
        let mut rebuild = None;
        in_tx(&mut |c| {
            rebuild = Some(IndexRebuild::start(c)?);
            Ok(false)
        });
        let mut steps = 0;
        loop {
            let done = in_tx(&mut |c| {
                let under_way = rebuild.as_mut().unwrap();
                under_way.fill_step(c, archive.codec(), std::time::Duration::from_millis(5))
            });
            if done {
                break;
            }
            steps += 1;
            match steps {
                2 => {
                    // The newest session's rows left behind: the next
                    // session's keys pass them, past where the rebuild
                    // began.
                    archive.delete_session("newest").unwrap();
                    archive
                        .create_session_with(&new_session("reuse"), messages("reuse", 5))
                        .unwrap();
                }
                3 => {
                    archive.delete_session("early").unwrap();
                    archive
                        .create_session_with(&new_session("late"), messages("late", 30))
                        .unwrap();
                }
                _ => {}
            }
        }
        assert!(steps > 3, "{steps} steps");
        assert!(fts_rebuild::next_rows(&conn).unwrap().is_some());
        in_tx(&mut |c| {
            rebuild.take().unwrap().swap(c)?;
            Ok(true)
        });
        while !in_tx(&mut |c| fts_rebuild::remove_step(c)) {}
        drop(conn);
        assert_eq!(tables_named(&archive, fts_rebuild::NEXT), 0);
        assert_eq!(tables_named(&archive, fts_rebuild::GONE), 0);
        // Rows the deletes during the rebuild left in the new index are
        // recorded with it; the old index's went with it.
        let (dead, _) = fts_dead::dead_totals(&archive.conn().unwrap()).unwrap();
        assert!(dead <= 20 + 10, "{dead}");
        assert_eq!(matching(&archive, "shared"), 1500 + 30 + 5 + dead as i64);
        assert_eq!(hits(&archive, "shared").len(), 1500 + 30 + 5);
        for (word, found) in [
            ("keptword1499", 1),
            ("lateword29", 1),
            ("reuseword4", 1),
            ("earlyword3", 0),
            ("newestword1", 0),
            ("goneword5", 0),
        ] {
            assert_eq!(hits(&archive, word).len(), found, "{word}");
        }
        let shape = fts::index_shape(&archive.conn().unwrap()).unwrap();
        assert_eq!(shape.tombstones, 0, "{shape:?}");
        assert_eq!(shape.rows, 1535 + dead, "{shape:?}");
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
    }

    /// A rebuild a killed compact left (its new index half-filled) costs
    /// nothing but the writers' indexing into it until the next compact,
    /// which removes it in batches; searches read the old index throughout.
    #[test]
    fn the_next_compact_removes_a_rebuild_a_killed_one_left() {
        use super::super::fts_rebuild::{self, IndexRebuild};
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed).unwrap();
        archive
            .create_session_with(&new_session("kept"), messages("kept", 600))
            .unwrap();
        {
            let conn = archive.conn().unwrap();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            let mut rebuild = IndexRebuild::start(&conn).unwrap();
            rebuild
                .fill_step(&conn, archive.codec(), std::time::Duration::ZERO)
                .unwrap();
            conn.execute_batch("COMMIT").unwrap();
            assert_eq!(fts_rebuild::next_rows(&conn).unwrap(), Some(256));
        }
        archive
            .create_session_with(&new_session("late"), messages("late", 7))
            .unwrap();
        let conn = archive.conn().unwrap();
        assert_eq!(fts_rebuild::next_rows(&conn).unwrap(), Some(256 + 7));
        drop(conn);
        assert_eq!(matching(&archive, "shared"), 607);
        archive.compact(&mut |_, _| {}).unwrap();
        assert_eq!(tables_named(&archive, fts_rebuild::NEXT), 0);
        assert_eq!(tables_named(&archive, fts_rebuild::GONE), 0);
        assert_eq!(matching(&archive, "shared"), 607);
        assert_eq!(matching(&archive, "lateword6"), 1);
        assert_eq!(archive.check(None).unwrap(), Vec::<String>::new());
    }
}
