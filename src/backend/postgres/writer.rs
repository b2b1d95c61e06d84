//! Appending inside a transaction: placing entries in the branch cache and
//! maintaining every derived fact (session row, labels, leaf events, search
//! rows), as the SQLite archive's writer does.

use super::branch_cache;
use super::handle::{col, pg};
use crate::backend::session_rows::{facts_at, Column, FactValues, StoredRow, FACTS_COLUMNS};
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use crate::rules::Replay;
use crate::search::{index_words, searchable_text};

/// Bytes of a message's words that search indexes (a `tsvector` holds at most 1 MB).
pub(super) const INDEXED_WORD_BYTES: usize = 400_000;
use super::tsvector::TsVector;
use ::postgres::binary_copy::BinaryCopyInWriter;
use ::postgres::types::Type;
use ::postgres::{GenericClient, Row};
use std::collections::HashSet;

pub(super) use crate::backend::session_rows::{
    metadata_at, stats_at, METADATA_COLUMNS, STATS_COLUMNS,
};

/// A failed read of a column is a library error.
impl StoredRow for Row {
    type Error = Error;

    fn at<T: Column>(&self, i: usize) -> Result<T> {
        col(self, i)
    }
}

/// The maintained facts of session `key` (the replay of its log), read; with
/// `lock`, the session row is locked for this transaction's write.
pub(super) fn session_facts<C: GenericClient>(c: &mut C, key: i64, lock: bool) -> Result<Replay> {
    let sql_text = format!(
        "SELECT {FACTS_COLUMNS} FROM sessions WHERE session_key = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    let row = c
        .query_typed_opt(&sql_text, &[(&key, ::postgres::types::Type::INT8)])
        .map_err(pg("reading session facts"))?
        .ok_or_else(|| Error::SessionNotFound(format!("(deleted session, key {key})")))?;
    facts_at(&row, 0)
}

/// Stores a session row's maintained facts.
fn write_session_facts<C: GenericClient>(c: &mut C, key: i64, facts: &Replay) -> Result<()> {
    let v = FactValues::of(facts);
    c.query_typed(
        "UPDATE sessions SET leaf_id = $2, name = $3, entry_count = $4, message_count = $5,
                cached_tokens = $6, uncached_tokens = $7, total_tokens = $8, cost_total = $9,
                broken_message_id = $10
         WHERE session_key = $1",
        &[
            (&key, Type::INT8),
            (&v.leaf, Type::TEXT),
            (&v.name, Type::TEXT),
            (&v.entry_count, Type::INT8),
            (&v.message_count, Type::INT8),
            (&v.cached_tokens, Type::FLOAT8),
            (&v.uncached_tokens, Type::FLOAT8),
            (&v.total_tokens, Type::FLOAT8),
            (&v.cost_total, Type::FLOAT8),
            (&v.broken_message, Type::TEXT),
        ],
    )
    .map_err(pg("updating session facts"))?;
    Ok(())
}

/// Appends entries to one session inside a transaction, maintaining every
/// derived fact; [`Appender::finish`] writes the session row back. Entry and
/// search rows are inserted in batches (one statement per table per
/// [`INSERT_BATCH`] entries, through `unnest`), so a bulk write costs a few
/// round trips per thousand entries rather than several per entry.
pub(super) struct Appender {
    key: i64,
    facts: Replay,
    tail: crate::backend::branch_cache::OpenTail,
    /// The branch cache rows placed and not yet written.
    cache: crate::backend::branch_cache::CacheRows,
    /// Leaf moves waiting to be inserted: seq, entry key, target.
    leaf_moves: (Vec<i64>, Vec<i64>, Vec<Option<String>>),
    /// Placed, not yet inserted: id to key, and the rows.
    pending: branch_cache::Pending,
    rows: EntryRows,
    words: WordRows,
    /// Ids of this write's entries the session already holds (read once per write).
    stored: HashSet<String>,
    /// Usage facts waiting to be inserted.
    usage: Vec<crate::usage::UsageFact>,
    /// Label changes waiting to be written: each target's last, in order of
    /// first change (a removal is `None`).
    labels: Vec<(String, Option<String>)>,
    /// Where each target of [`Appender::labels`] is.
    label_at: std::collections::HashMap<String, usize>,
    /// The newest timestamp (Unix ms) of the entries appended here.
    last_active: Option<i64>,
    /// A sync's batch ([`Appender::start_sync`]): usage facts wait for
    /// [`Appender::finish`], which records them under [`USAGE_LOCK`].
    sync: bool,
}

/// The transaction-level advisory lock a sync's batch records its usage
/// facts under (any fixed number: only this code takes it). Whether a fact
/// is counted depends on whether a fork's copy of it was recorded first, so
/// two sessions of one fork family synced side by side (`sync --jobs`, or
/// two machines) must not both find the other's copy missing: the second
/// waits for the first's commit, then sees its rows.
const USAGE_LOCK: i64 = 0x5e55_1017_7ee0_0002;

/// Entry rows waiting to be inserted, a column each.
#[derive(Default)]
struct EntryRows {
    keys: Vec<i64>,
    seqs: Vec<i64>,
    ids: Vec<String>,
    types: Vec<String>,
    texts: Vec<String>,
}

/// Search rows waiting to be inserted, a column each.
#[derive(Default)]
struct WordRows {
    keys: Vec<i64>,
    roles: Vec<String>,
    /// Built here and sent in binary: the server parses no text.
    words: Vec<TsVector>,
}

/// Entries inserted per statement (a sync's batch is several of these: the
/// placed entries' keys are kept in memory this long, so a fork whose parent
/// is this many entries back costs no lookup).
const INSERT_BATCH: usize = 4096;

/// Rows from which entry and search rows go by `COPY … FROM STDIN` (binary)
/// rather than one `unnest` statement: a copy costs a round trip more, and
/// saves the server building and unpacking arrays, which pays off for a
/// bulk write's thousands of rows, not for a chat turn's few.
const COPY_FROM: usize = 64;

impl Appender {
    /// Starts appending to session `key`, locking its row until the
    /// transaction ends.
    pub(super) fn start<C: GenericClient>(c: &mut C, key: i64) -> Result<Self> {
        Ok(Appender {
            key,
            facts: session_facts(c, key, true)?,
            tail: crate::backend::branch_cache::OpenTail::default(),
            cache: crate::backend::branch_cache::CacheRows::default(),
            leaf_moves: Default::default(),
            pending: branch_cache::Pending::new(),
            rows: EntryRows::default(),
            words: WordRows::default(),
            stored: HashSet::new(),
            usage: Vec::new(),
            labels: Vec::new(),
            label_at: std::collections::HashMap::new(),
            last_active: None,
            sync: false,
        })
    }

    /// [`Appender::start`] for a sync's batch: its usage facts are recorded
    /// at [`Appender::finish`], under [`USAGE_LOCK`], so the lock is held
    /// from there to the commit only.
    pub(super) fn start_sync<C: GenericClient>(c: &mut C, key: i64) -> Result<Self> {
        Ok(Appender {
            sync: true,
            ..Appender::start(c, key)?
        })
    }

    /// Entries in the session's log, this write's included.
    pub(super) fn entry_count(&self) -> u64 {
        self.facts.entry_count
    }

    /// Appends `entries` in order: which of their ids the session already
    /// holds is asked once, so a duplicate is refused at its own entry (one
    /// entry needs no asking: its insert's unique index says so).
    pub(super) fn push_all<C: GenericClient>(
        &mut self,
        c: &mut C,
        entries: &[Entry],
    ) -> Result<()> {
        if let [one] = entries {
            return self.push(c, one);
        }
        if self.facts.entry_count == 0 {
            // An empty session holds no id yet (its row is locked: none arrives).
            return entries.iter().try_for_each(|e| self.push(c, e));
        }
        let ids: Vec<&str> = entries.iter().map(|e| e.id()).collect();
        let rows = c
            .query(
                "SELECT id FROM entries WHERE session_key = $1 AND id = ANY($2)",
                &[&self.key, &ids],
            )
            .map_err(pg("checking entry ids"))?;
        for r in &rows {
            self.stored.insert(col(r, 0)?);
        }
        entries.iter().try_for_each(|e| self.push(c, e))
    }

    /// Appends one entry.
    pub(super) fn push<C: GenericClient>(&mut self, c: &mut C, entry: &Entry) -> Result<()> {
        let f = entry.facts();
        if self.pending.contains_key(&f.id) || self.stored.contains(&f.id) {
            return Err(duplicate(&f.id));
        }
        let key = branch_cache::place(
            c,
            self.key,
            entry,
            &mut self.tail,
            &self.pending,
            &mut self.cache,
        )?;
        let seq = i64::try_from(self.facts.entry_count).unwrap_or(i64::MAX);
        self.pending.insert(f.id.clone(), key);
        self.rows.keys.push(key);
        self.rows.seqs.push(seq);
        self.rows.ids.push(f.id.clone());
        self.rows.types.push(f.entry_type.as_str().to_owned());
        self.rows.texts.push(entry.json().to_owned());
        if f.entry_type == EntryType::Leaf {
            self.leaf_moves.0.push(seq);
            self.leaf_moves.1.push(key);
            self.leaf_moves.2.push(f.target_id.clone());
        }
        if let Some((target, label)) = f.label_update() {
            let label = label.map(|l| l.json().to_owned());
            match self.label_at.get(target) {
                Some(&at) => self.labels[at].1 = label,
                None => {
                    self.label_at.insert(target.to_string(), self.labels.len());
                    self.labels.push((target.to_string(), label));
                }
            }
        }
        if let Some((role, text)) = searchable_text(entry) {
            self.words.keys.push(key);
            self.words.roles.push(role);
            self.words
                .words
                .push(TsVector::from_index_words(&index_words(
                    &text,
                    INDEXED_WORD_BYTES,
                )));
        }
        if let Some(fact) = crate::usage::usage_fact(entry) {
            self.usage.push(fact);
        }
        if let Some(ms) = crate::entry::timestamp_millis(&f.timestamp) {
            self.last_active = Some(self.last_active.map_or(ms, |t| t.max(ms)));
        }
        let _ = self.facts.push(entry);
        if self.rows.keys.len() >= INSERT_BATCH {
            self.insert_pending(c)?;
        }
        Ok(())
    }

    /// Inserts the entry, cache, leaf move and search rows placed so far.
    fn insert_pending<C: GenericClient>(&mut self, c: &mut C) -> Result<()> {
        self.cache.write(&mut branch_cache::PgCache::writing(
            c,
            self.key,
            &self.pending,
        ))?;
        let (seqs, keys, targets) = std::mem::take(&mut self.leaf_moves);
        if !seqs.is_empty() {
            c.query_typed(
                "INSERT INTO leaf_events (session_key, seq, entry_key, target_id)
                 SELECT $1, * FROM unnest($2::BIGINT[], $3::BIGINT[], $4::TEXT[])",
                &[
                    (&self.key, Type::INT8),
                    (&seqs, Type::INT8_ARRAY),
                    (&keys, Type::INT8_ARRAY),
                    (&targets, Type::TEXT_ARRAY),
                ],
            )
            .map_err(pg("recording leaf moves"))?;
        }
        let rows = std::mem::take(&mut self.rows);
        if rows.keys.len() >= COPY_FROM {
            copy_entries(c, self.key, &rows).map_err(|e| duplicate_id_or(e, &rows.ids))?;
        } else if !rows.keys.is_empty() {
            c.query_typed(
                "INSERT INTO entries (session_key, entry_key, seq, id, type, json)
                 SELECT $1, * FROM unnest($2::BIGINT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[], $6::TEXT[])",
                &[
                    (&self.key, Type::INT8),
                    (&rows.keys, Type::INT8_ARRAY),
                    (&rows.seqs, Type::INT8_ARRAY),
                    (&rows.ids, Type::TEXT_ARRAY),
                    (&rows.types, Type::TEXT_ARRAY),
                    (&rows.texts, Type::TEXT_ARRAY),
                ],
            )
            .map_err(|e| duplicate_id_or(e, &rows.ids))?;
        }
        let words = std::mem::take(&mut self.words);
        if words.keys.len() >= COPY_FROM {
            copy_words(c, self.key, &words).map_err(pg("indexing message text"))?;
        } else if !words.keys.is_empty() {
            c.query_typed(
                "INSERT INTO message_text (session_key, entry_key, role, tsv)
                 SELECT $1, * FROM unnest($2::BIGINT[], $3::TEXT[], $4::TSVECTOR[])",
                &[
                    (&self.key, Type::INT8),
                    (&words.keys, Type::INT8_ARRAY),
                    (&words.roles, Type::TEXT_ARRAY),
                    (&words.words, Type::TS_VECTOR_ARRAY),
                ],
            )
            .map_err(pg("indexing message text"))?;
        }
        self.write_labels(c)?;
        if !self.sync {
            insert_usage_facts(c, self.key, &std::mem::take(&mut self.usage))?;
        }
        self.pending.clear();
        Ok(())
    }

    /// Writes the label changes waiting: one statement for the labels set,
    /// one for those removed (each target's last change is what counts).
    fn write_labels<C: GenericClient>(&mut self, c: &mut C) -> Result<()> {
        self.label_at.clear();
        let (set, removed): (Vec<_>, Vec<_>) = std::mem::take(&mut self.labels)
            .into_iter()
            .partition(|(_, l)| l.is_some());
        if !removed.is_empty() {
            let targets: Vec<String> = removed.into_iter().map(|(t, _)| t).collect();
            c.query_typed(
                "DELETE FROM labels WHERE session_key = $1 AND target_id = ANY($2)",
                &[(&self.key, Type::INT8), (&targets, Type::TEXT_ARRAY)],
            )
            .map_err(pg("updating labels"))?;
        }
        if !set.is_empty() {
            let (targets, labels): (Vec<String>, Vec<String>) = set
                .into_iter()
                .map(|(t, l)| (t, l.unwrap_or_default()))
                .unzip();
            c.query_typed(
                "INSERT INTO labels (session_key, target_id, label)
                 SELECT $1, * FROM unnest($2::TEXT[], $3::TEXT[])
                 ON CONFLICT (session_key, target_id) DO UPDATE SET label = excluded.label",
                &[
                    (&self.key, Type::INT8),
                    (&targets, Type::TEXT_ARRAY),
                    (&labels, Type::TEXT_ARRAY),
                ],
            )
            .map_err(pg("updating labels"))?;
        }
        Ok(())
    }

    /// Inserts what is pending, writes back the open segment and the session row.
    pub(super) fn finish<C: GenericClient>(mut self, c: &mut C) -> Result<()> {
        self.tail
            .flush(&mut crate::backend::branch_cache::Batched {
                store: branch_cache::PgCache::writing(c, self.key, &self.pending),
                rows: &mut self.cache,
            })?;
        self.insert_pending(c)?;
        if !self.usage.is_empty() {
            c.query_typed(
                "SELECT pg_advisory_xact_lock($1)",
                &[(&USAGE_LOCK, Type::INT8)],
            )
            .map_err(pg("waiting to record usage"))?;
            insert_usage_facts_summed_here(c, self.key, &std::mem::take(&mut self.usage))?;
        }
        write_session_facts(c, self.key, &self.facts)?;
        match self.last_active {
            Some(ms) => write_last_active(c, self.key, ms),
            None => Ok(()),
        }
    }
}

/// Copies entry rows in (`COPY … FROM STDIN`, binary).
fn copy_entries<C: GenericClient>(
    c: &mut C,
    key: i64,
    rows: &EntryRows,
) -> std::result::Result<(), ::postgres::Error> {
    let sink = c.copy_in(
        "COPY entries (session_key, entry_key, seq, id, type, json) FROM STDIN (FORMAT binary)",
    )?;
    let mut w = BinaryCopyInWriter::new(
        sink,
        &[
            Type::INT8,
            Type::INT8,
            Type::INT8,
            Type::TEXT,
            Type::TEXT,
            Type::TEXT,
        ],
    );
    let columns = rows.keys.iter().zip(&rows.seqs).zip(&rows.ids);
    for (((entry_key, seq), id), (kind, json)) in columns.zip(rows.types.iter().zip(&rows.texts)) {
        w.write(&[&key, entry_key, seq, id, kind, json])?;
    }
    w.finish().map(|_| ())
}

/// Copies search rows in (`COPY … FROM STDIN`, binary).
fn copy_words<C: GenericClient>(
    c: &mut C,
    key: i64,
    words: &WordRows,
) -> std::result::Result<(), ::postgres::Error> {
    let sink = c.copy_in(
        "COPY message_text (session_key, entry_key, role, tsv) FROM STDIN (FORMAT binary)",
    )?;
    let mut w =
        BinaryCopyInWriter::new(sink, &[Type::INT8, Type::INT8, Type::TEXT, Type::TS_VECTOR]);
    for ((entry_key, role), vector) in words.keys.iter().zip(&words.roles).zip(&words.words) {
        w.write(&[&key, entry_key, role, vector])?;
    }
    w.finish().map(|_| ())
}

/// Records entries' usage (`usage_facts`), each counted unless another
/// session holds the same entry (a fork's copy) already.
pub(super) fn insert_usage_facts<C: GenericClient>(
    c: &mut C,
    key: i64,
    facts: &[crate::usage::UsageFact],
) -> Result<()> {
    insert_usage_facts_returning(c, key, facts, "").map(|_| ())
}

/// The session setting under which [`insert_usage_facts_summed_here`]'s
/// insert does not fire the per-row `usage_daily_add` trigger (schema step
/// 8: the trigger's `WHEN` reads it).
const DAILY_BY_WRITER: &str = "sessiontree.daily_by_writer";

/// [`insert_usage_facts`] for a sync's batch: the per-day sums are added
/// here rather than by the per-row trigger (an `INSERT … ON CONFLICT` run
/// through PL/pgSQL for each counted fact, which leaves a dead row version
/// each time). The sums are bit-identical to the trigger's: the facts come
/// back in insertion order (`fact_key`) and are summed by
/// [`crate::usage::DailySums`], starting from the stored rows (read
/// `FOR UPDATE`).
fn insert_usage_facts_summed_here<C: GenericClient>(
    c: &mut C,
    key: i64,
    facts: &[crate::usage::UsageFact],
) -> Result<()> {
    let ctx = "recording usage";
    c.query_typed(
        "SELECT set_config($1, 'on', true)",
        &[(&DAILY_BY_WRITER, Type::TEXT)],
    )
    .map_err(pg(ctx))?;
    let mut rows = insert_usage_facts_returning(
        c,
        key,
        facts,
        " RETURNING fact_key, counted, at_ms, model, input, output, cache_read, cache_write, \
         cost, dedup",
    )?;
    c.query_typed(
        "SELECT set_config($1, 'off', true)",
        &[(&DAILY_BY_WRITER, Type::TEXT)],
    )
    .map_err(pg(ctx))?;
    rows.retain(|r| r.get::<_, bool>(1));
    if rows.is_empty() {
        return Ok(());
    }
    rows.sort_by_key(|r| r.get::<_, i64>(0));
    // Each counted fact as stored (its `at_ms` filled from the session's
    // creation where the entry had none).
    let counted: Vec<crate::usage::UsageFact> = rows
        .iter()
        .map(|r| crate::usage::UsageFact {
            dedup: r.get(9),
            at_ms: r.get(2),
            model: r.get(3),
            input: r.get(4),
            output: r.get(5),
            cache_read: r.get(6),
            cache_write: r.get(7),
            cost: r.get(8),
        })
        .collect();
    let mut days: Vec<i64> = counted
        .iter()
        .map(|f| crate::usage::day_of(f.at_ms))
        .collect();
    days.sort_unstable();
    days.dedup();
    // One read (and lock) of every stored row the batch adds to.
    let mut stored: std::collections::HashMap<(i64, String), crate::usage::DaySums> = c
        .query_typed(
            "SELECT day, model, entries, input, output, cache_read, cache_write, cost
               FROM usage_daily WHERE session_key = $1 AND day = ANY($2)
              ORDER BY day, model FOR UPDATE",
            &[(&key, Type::INT8), (&days, Type::INT8_ARRAY)],
        )
        .map_err(pg(ctx))?
        .iter()
        .map(|r| {
            let sums = crate::usage::DaySums {
                entries: r.get(2),
                input: r.get(3),
                output: r.get(4),
                cache_read: r.get(5),
                cache_write: r.get(6),
                cost: r.get(7),
            };
            ((r.get(0), r.get(1)), sums)
        })
        .collect();
    let mut sums = crate::usage::DailySums::default();
    for fact in &counted {
        sums.add(fact.at_ms, fact, |day, model| {
            Ok::<_, Error>(stored.remove(&(day, model.to_owned())))
        })?;
    }
    let (updated, inserted): (Vec<_>, Vec<_>) = sums.take().into_iter().partition(|r| r.stored);
    write_daily(c, key, &updated, false)?;
    write_daily(c, key, &inserted, true)
}

/// Writes per-day sums (see [`insert_usage_facts_summed_here`]): rows that
/// were stored get their new totals; `new` rows are inserted, and should
/// another transaction have inserted one meanwhile (a delete's recount),
/// added to it as the trigger would.
fn write_daily<C: GenericClient>(
    c: &mut C,
    key: i64,
    rows: &[crate::usage::DayRow],
    new: bool,
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let day: Vec<i64> = rows.iter().map(|r| r.day).collect();
    let model: Vec<&str> = rows.iter().map(|r| r.model.as_str()).collect();
    let n: Vec<i64> = rows.iter().map(|r| r.sums.entries).collect();
    let col = |f: fn(&crate::usage::DaySums) -> f64| {
        rows.iter().map(|r| f(&r.sums)).collect::<Vec<f64>>()
    };
    let (input, output) = (col(|s| s.input), col(|s| s.output));
    let (cache_read, cache_write, cost) = (
        col(|s| s.cache_read),
        col(|s| s.cache_write),
        col(|s| s.cost),
    );
    let sql_text = if new {
        "INSERT INTO usage_daily AS d (session_key, day, model, entries, input, output,
                                       cache_read, cache_write, cost)
         SELECT $1, * FROM unnest($2::BIGINT[], $3::TEXT[], $4::BIGINT[], $5::FLOAT8[],
                                  $6::FLOAT8[], $7::FLOAT8[], $8::FLOAT8[], $9::FLOAT8[])
         ON CONFLICT (session_key, day, model) DO UPDATE SET
             entries = d.entries + excluded.entries, input = d.input + excluded.input,
             output = d.output + excluded.output, cache_read = d.cache_read + excluded.cache_read,
             cache_write = d.cache_write + excluded.cache_write, cost = d.cost + excluded.cost"
    } else {
        "UPDATE usage_daily AS d SET entries = u.n, input = u.i, output = u.o, cache_read = u.cr,
                cache_write = u.cw, cost = u.c
           FROM unnest($2::BIGINT[], $3::TEXT[], $4::BIGINT[], $5::FLOAT8[], $6::FLOAT8[],
                       $7::FLOAT8[], $8::FLOAT8[], $9::FLOAT8[]) AS u (day, model, n, i, o, cr, cw, c)
          WHERE d.session_key = $1 AND d.day = u.day AND d.model = u.model"
    };
    c.query_typed(
        sql_text,
        &[
            (&key, Type::INT8),
            (&day, Type::INT8_ARRAY),
            (&model, Type::TEXT_ARRAY),
            (&n, Type::INT8_ARRAY),
            (&input, Type::FLOAT8_ARRAY),
            (&output, Type::FLOAT8_ARRAY),
            (&cache_read, Type::FLOAT8_ARRAY),
            (&cache_write, Type::FLOAT8_ARRAY),
            (&cost, Type::FLOAT8_ARRAY),
        ],
    )
    .map_err(pg("recording usage by day"))?;
    Ok(())
}

/// [`insert_usage_facts`] with a `RETURNING` clause (`returning`, or "").
fn insert_usage_facts_returning<C: GenericClient>(
    c: &mut C,
    key: i64,
    facts: &[crate::usage::UsageFact],
    returning: &str,
) -> Result<Vec<Row>> {
    if facts.is_empty() {
        return Ok(Vec::new());
    }
    let col = |f: fn(&crate::usage::UsageFact) -> f64| facts.iter().map(f).collect::<Vec<f64>>();
    let dedup: Vec<i64> = facts.iter().map(|f| f.dedup).collect();
    let at: Vec<Option<i64>> = facts.iter().map(|f| f.at_ms).collect();
    let model: Vec<&str> = facts.iter().map(|f| f.model.as_str()).collect();
    let (input, output) = (col(|f| f.input), col(|f| f.output));
    let (cache_read, cache_write, cost) = (
        col(|f| f.cache_read),
        col(|f| f.cache_write),
        col(|f| f.cost),
    );
    // `OFFSET 0` keeps the planner from turning the `NOT EXISTS` into a
    // hashed subplan, which reads every stored usage fact (all sessions) to
    // build its hash table, once per statement: a sync's batches grew with
    // the team archive (48,467 rows read per batch at 100,000 entries).
    // Without it, each fact is one probe of `usage_facts_by_dedup`.
    let sql_text = format!(
        "INSERT INTO usage_facts (session_key, dedup, counted, at_ms, model, input, output,
                                  cache_read, cache_write, cost)
         SELECT $1, u.dedup, NOT EXISTS (SELECT 1 FROM usage_facts x WHERE x.dedup = u.dedup OFFSET 0),
                coalesce(u.at_ms, (SELECT created_ms FROM sessions WHERE session_key = $1)),
                u.model, u.i, u.o, u.cr, u.cw, u.c
           FROM unnest($2::BIGINT[], $3::BIGINT[], $4::TEXT[], $5::FLOAT8[], $6::FLOAT8[],
                       $7::FLOAT8[], $8::FLOAT8[], $9::FLOAT8[])
                AS u (dedup, at_ms, model, i, o, cr, cw, c){returning}"
    );
    c.query_typed(
        &sql_text,
        &[
            (&key, Type::INT8),
            (&dedup, Type::INT8_ARRAY),
            (&at, Type::INT8_ARRAY),
            (&model, Type::TEXT_ARRAY),
            (&input, Type::FLOAT8_ARRAY),
            (&output, Type::FLOAT8_ARRAY),
            (&cache_read, Type::FLOAT8_ARRAY),
            (&cache_write, Type::FLOAT8_ARRAY),
            (&cost, Type::FLOAT8_ARRAY),
        ],
    )
    .map_err(pg("recording usage"))
}

/// Moves a session's last activity forward to `ms` (never back).
pub(super) fn write_last_active<C: GenericClient>(c: &mut C, key: i64, ms: i64) -> Result<()> {
    c.query_typed(
        "UPDATE sessions SET last_active_ms = greatest(last_active_ms, $2) WHERE session_key = $1",
        &[(&key, Type::INT8), (&ms, Type::INT8)],
    )
    .map_err(pg("recording the last activity"))?;
    Ok(())
}

/// The refusal of an entry whose id the session holds already.
fn duplicate(id: &str) -> Error {
    Error::InvalidEntry(format!(
        "Entry {id} already exists in this session: ids must be unique"
    ))
}

/// A failed batch insert: `invalid_entry` when it broke the one-id-per-session
/// index (another writer's entry arrived since the ids were checked), else the
/// server's error.
fn duplicate_id_or(e: ::postgres::Error, ids: &[String]) -> Error {
    let duplicate_id = e
        .as_db_error()
        .filter(|d| d.constraint() == Some("entries_by_id"))
        .map(|d| {
            // The detail names the key: `Key (session_key, id)=(1, abc) already exists.`
            let detail = d.detail().unwrap_or_default();
            ids.iter()
                .find(|id| detail.contains(&format!(", {id})")))
                .cloned()
                .unwrap_or_default()
        });
    match duplicate_id {
        Some(id) => duplicate(&id),
        None => Error::postgres("appending entries", e),
    }
}
