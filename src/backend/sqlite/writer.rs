//! Appending inside a transaction: placing entries in the branch cache and
//! maintaining every derived fact (session row, labels, leaf events, search rows).

use super::branch_cache;
use super::codec::{self, Codec, Encoder, Prepared};
use super::error::sql;
use super::rows::{self, ImportRecord, NewSession, FACTS_COLUMNS};
use crate::backend::session_rows::stored_js_string;
use crate::backend::session_rows::FactValues;
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use crate::json::JsString;
use crate::rules::{apply_label_change, Replay};
use crate::search;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub(super) fn insert_session(tx: &Transaction, new: &NewSession) -> Result<i64> {
    let exists: Option<i64> = tx
        .query_row(
            "SELECT session_key FROM sessions WHERE id = ?1",
            [&new.id],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql("creating a session"))?;
    if exists.is_some() {
        return Err(Error::SessionExists(new.id.clone()));
    }
    tx.execute(
        "INSERT INTO sessions (id, created_at, created_ms, cwd, parent_session, metadata, header, contract)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            new.id,
            new.created_at,
            crate::entry::timestamp_millis(&new.created_at),
            new.cwd,
            new.parent_session,
            new.metadata,
            new.header,
            new.contract.as_str()
        ],
    )
    .map_err(sql("creating a session"))?;
    Ok(tx.last_insert_rowid())
}

/// The maintained facts of a session row: the replay of its log.
pub(super) type SessionFacts = Replay;

pub(super) fn session_facts(conn: &Connection, key: i64) -> Result<SessionFacts> {
    conn.prepare_cached(&format!(
        "SELECT {FACTS_COLUMNS} FROM sessions WHERE session_key = ?1"
    ))
    .and_then(|mut s| s.query_row([key], |r| rows::facts_at(r, 0)))
    .map_err(sql("reading session facts"))
}

/// The facts of a session as a replay of its log gives them: the session row's
/// facts and the labels.
pub(in crate::backend::sqlite) fn replay_session_facts(
    conn: &Connection,
    codec: &Codec,
    key: i64,
) -> Result<(SessionFacts, HashMap<String, JsString>)> {
    let mut st = conn
        .prepare("SELECT json FROM entries WHERE session_key = ?1 ORDER BY seq")
        .map_err(sql("replaying session facts"))?;
    let mut rows = st.query([key]).map_err(sql("replaying session facts"))?;
    let mut facts = Replay::default();
    let mut labels = HashMap::new();
    while let Some(row) = rows.next().map_err(sql("replaying session facts"))? {
        let text = codec.decode(
            conn,
            row.get_ref(0).map_err(sql("replaying session facts"))?,
        )?;
        let entry = Entry::from_checked_text(text);
        if let Some(change) = facts.push(&entry) {
            apply_label_change(&mut labels, change);
        }
    }
    Ok((facts, labels))
}

pub(super) fn stored_labels(conn: &Connection, key: i64) -> Result<HashMap<String, JsString>> {
    conn.prepare("SELECT target_id, label FROM labels WHERE session_key = ?1")
        .and_then(|mut st| {
            st.query_map([key], |r| Ok((r.get(0)?, stored_js_string(r.get(1)?))))
                .and_then(Iterator::collect)
        })
        .map_err(sql("reading labels"))
}

/// Stores a session row's maintained facts.
pub(in crate::backend::sqlite) fn write_session_facts(
    tx: &Transaction,
    key: i64,
    facts: &SessionFacts,
) -> Result<()> {
    let v = FactValues::of(facts);
    tx.prepare_cached(
        "UPDATE sessions SET leaf_id = ?2, name = ?3, entry_count = ?4, message_count = ?5,
                cached_tokens = ?6, uncached_tokens = ?7, total_tokens = ?8, cost_total = ?9,
                broken_message_id = ?10
             WHERE session_key = ?1",
    )
    .and_then(|mut st| {
        st.execute(params![
            key,
            v.leaf,
            v.name,
            v.entry_count,
            v.message_count,
            v.cached_tokens,
            v.uncached_tokens,
            v.total_tokens,
            v.cost_total,
            v.broken_message
        ])
    })
    .map_err(sql("updating session facts"))?;
    Ok(())
}

/// Records one entry's usage (`usage_facts`), counted unless another
/// session holds the same entry (a fork's copy) already. For schema
/// versions up to 14 only, whose trigger `usage_daily_add` adds a counted
/// row to `usage_daily` (the version 14 step fills the facts this way), and
/// whose `usage_facts` has no `timed_ms` yet (schema step 0018): the lookup
/// goes by the dedup hash alone, which `usage_facts_by_dedup` indexes until
/// that step. From `0015_usage_daily_by_writer.sql` on, appends go through
/// [`DailyUsage`], which sums the day rows itself.
pub(in crate::backend::sqlite) fn insert_usage_fact(
    tx: &Connection,
    key: i64,
    fact: &crate::usage::UsageFact,
) -> Result<()> {
    insert_usage_row(tx, key, fact, UsageLookup::ByHash).map(drop)
}

/// Inserts one `usage_facts` row; returns whether it is counted, and its
/// `at_ms` as stored (the session's creation when the entry has none).
fn insert_usage_fact_returning(
    tx: &Connection,
    key: i64,
    fact: &crate::usage::UsageFact,
) -> Result<(bool, Option<i64>)> {
    insert_usage_row(tx, key, fact, UsageLookup::ByTime)
}

/// How a usage row's earlier copy (same `dedup`) is looked up.
#[derive(Clone, Copy)]
enum UsageLookup {
    /// By the dedup hash alone (`usage_facts_by_dedup`): schema versions
    /// before step 0018, which have no `timed_ms` column.
    ByHash,
    /// By `(timed_ms, dedup)` (`usage_facts_by_stamp`, schema step 0018):
    /// its own timestamp, or none (rows from before that step, and entries
    /// without one), so that an import's rows go to the index's last pages
    /// in time order instead of one random page each.
    ByTime,
}

/// One `usage_facts` row: read first, then a plain one-row insert. An
/// `INSERT … RETURNING` is a multi-row write to SQLite (its trigger
/// program and a result table), so every usage row opened a statement
/// journal, made the search index flush its pending terms, and cost an
/// import ~12 % of its CPU.
fn insert_usage_row(
    tx: &Connection,
    key: i64,
    fact: &crate::usage::UsageFact,
    lookup: UsageLookup,
) -> Result<(bool, Option<i64>)> {
    let (find, insert) = match lookup {
        UsageLookup::ByHash => (
            "SELECT NOT EXISTS (SELECT 1 FROM usage_facts WHERE dedup = ?2),
                    coalesce(?3, (SELECT created_ms FROM sessions WHERE session_key = ?1))",
            "INSERT INTO usage_facts (session_key, dedup, counted, at_ms, model, input, output,
                                      cache_read, cache_write, cost)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        ),
        UsageLookup::ByTime => (
            "SELECT NOT EXISTS (SELECT 1 FROM usage_facts
                                 WHERE (timed_ms IS NULL OR timed_ms = ?3) AND dedup = ?2),
                    coalesce(?3, (SELECT created_ms FROM sessions WHERE session_key = ?1))",
            "INSERT INTO usage_facts (session_key, dedup, counted, at_ms, model, input, output,
                                      cache_read, cache_write, cost, timed_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        ),
    };
    let (counted, at_ms) = tx
        .prepare_cached(find)
        .and_then(|mut st| {
            st.query_row(params![key, fact.dedup, fact.at_ms], |r| {
                Ok((r.get::<_, bool>(0)?, r.get::<_, Option<i64>>(1)?))
            })
        })
        .map_err(sql("recording usage"))?;
    let values: &[&dyn rusqlite::ToSql] = params![
        key,
        fact.dedup,
        counted,
        at_ms,
        fact.model,
        fact.input,
        fact.output,
        fact.cache_read,
        fact.cache_write,
        fact.cost,
        fact.at_ms
    ];
    let values = match lookup {
        UsageLookup::ByHash => &values[..10],
        UsageLookup::ByTime => values,
    };
    tx.prepare_cached(insert)
        .and_then(|mut st| st.execute(values))
        .map(|_| (counted, at_ms))
        .map_err(sql("recording usage"))
}

/// The counted usage of one append's entries, summed per (UTC day, model)
/// in memory by [`crate::usage::DailySums`] and written to `usage_daily`
/// once, at [`Appender::finish`]. A per-row trigger did this before (schema
/// step `0015_usage_daily_by_writer.sql` dropped it): its statement journal
/// and the search-index flush every journal forces cost an import ~9 % of
/// its time.
#[derive(Default)]
struct DailyUsage {
    days: crate::usage::DailySums,
}

impl DailyUsage {
    /// Records `fact` in `usage_facts` and, if counted, in the day sums.
    fn record(&mut self, tx: &Connection, key: i64, fact: &crate::usage::UsageFact) -> Result<()> {
        let (counted, at_ms) = insert_usage_fact_returning(tx, key, fact)?;
        if !counted {
            return Ok(());
        }
        self.days
            .add(at_ms, fact, |day, model| stored_day(tx, key, day, model))
    }

    /// Writes the day sums into `usage_daily`.
    fn flush(&mut self, tx: &Connection, key: i64) -> Result<()> {
        if self.days.is_empty() {
            return Ok(());
        }
        let mut st = tx
            .prepare_cached(
                "INSERT INTO usage_daily (session_key, day, model, entries, input, output,
                                          cache_read, cache_write, cost)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (session_key, day, model) DO UPDATE SET
                     entries = excluded.entries, input = excluded.input,
                     output = excluded.output, cache_read = excluded.cache_read,
                     cache_write = excluded.cache_write, cost = excluded.cost",
            )
            .map_err(sql("summing usage per day"))?;
        for row in self.days.take() {
            let s = row.sums;
            st.execute(params![
                key,
                row.day,
                row.model,
                s.entries,
                s.input,
                s.output,
                s.cache_read,
                s.cache_write,
                s.cost
            ])
            .map_err(sql("summing usage per day"))?;
        }
        Ok(())
    }
}

/// A session's `usage_daily` row of `day` and `model`, if it has one.
fn stored_day(
    tx: &Connection,
    key: i64,
    day: i64,
    model: &str,
) -> Result<Option<crate::usage::DaySums>> {
    tx.prepare_cached(
        "SELECT entries, input, output, cache_read, cache_write, cost FROM usage_daily
          WHERE session_key = ?1 AND day = ?2 AND model = ?3",
    )
    .and_then(|mut st| {
        st.query_row(params![key, day, model], |r| {
            Ok(crate::usage::DaySums {
                entries: r.get(0)?,
                input: r.get(1)?,
                output: r.get(2)?,
                cache_read: r.get(3)?,
                cache_write: r.get(4)?,
                cost: r.get(5)?,
            })
        })
        .optional()
    })
    .map_err(sql("summing usage per day"))
}

/// Moves a session's last activity forward to `ms` (never back).
pub(in crate::backend::sqlite) fn write_last_active(
    tx: &Connection,
    key: i64,
    ms: i64,
) -> Result<()> {
    tx.prepare_cached(
        "UPDATE sessions SET last_active_ms = max(coalesce(last_active_ms, ?2), ?2)
          WHERE session_key = ?1",
    )
    .and_then(|mut st| st.execute(params![key, ms]))
    .map_err(sql("recording the last activity"))?;
    Ok(())
}

/// A failed entry insert: `invalid_entry` when the session already holds an
/// entry with this id (asked of the table, not read from SQLite's message),
/// else the SQLite error.
fn duplicate_id_or(tx: &Transaction, session_key: i64, e: rusqlite::Error, id: &str) -> Error {
    let is_constraint = matches!(&e, rusqlite::Error::SqliteFailure(f, _)
        if f.code == rusqlite::ErrorCode::ConstraintViolation);
    let held = is_constraint
        && tx
            .query_row(
                "SELECT 1 FROM entries WHERE session_key = ?1 AND id = ?2",
                params![session_key, id],
                |_| Ok(()),
            )
            .optional()
            .is_ok_and(|found| found.is_some());
    if held {
        Error::InvalidEntry(format!(
            "Entry {id} already exists in this session: ids must be unique"
        ))
    } else {
        Error::sqlite("appending an entry", e)
    }
}

/// Appends entries to one session inside a transaction, maintaining every
/// derived fact; [`Appender::finish`] writes the session row back.
pub(super) struct Appender {
    pub(super) key: i64,
    facts: SessionFacts,
    /// Search-index rows not yet written (see [`PendingText`]).
    pending: PendingText,
    /// The segment being extended, written back by `finish`.
    tail: branch_cache::OpenTail,
    /// Encodes entry text with the newest dictionary, read in this
    /// transaction (so `compact` cannot remove it under us).
    encoder: Encoder,
    /// `roles` rows looked up or added in this transaction (a handful).
    role_ids: Vec<(String, i64)>,
    /// The newest timestamp (Unix ms) of the entries appended here.
    last_active: Option<i64>,
    /// The counted usage appended here, per day (see [`DailyUsage`]).
    daily: DailyUsage,
}

/// Search text buffered before it is written (bounds import memory).
const PENDING_TEXT_LIMIT: usize = 8 << 20;
/// A staged batch's search text indexed at a time. FTS5 keeps what one
/// transaction indexes in memory until its commit (or a megabyte of it):
/// indexing it in steps makes no more segments than at once.
const STAGED_TEXT_STEP: usize = 64 << 10;

/// Search-index rows not yet written. FTS5 flushes its pending terms at
/// every statement journal (each later write in the transaction opens one),
/// so rows are written together, not one per entry:
/// each row's entry key and where its text lies in `text` (one buffer for
/// the batch, the text copied in: an import's reader thread keeps its own
/// strings, and frees them itself).
#[derive(Default)]
pub(super) struct PendingText {
    rows: Vec<(i64, std::ops::Range<usize>)>,
    text: String,
    /// Whether a compact rebuilds the index beside it, looked up at the
    /// first flush: the rows are pending inside one write transaction (an
    /// appender's batch, or a writer's only one), and a rebuild begins and
    /// ends in transactions of its own, so the answer holds until the
    /// commit. A staged batch flushes every [`STAGED_TEXT_STEP`].
    rebuilding: Option<bool>,
}

impl PendingText {
    fn push(&mut self, entry_key: i64, text: &str) {
        let from = self.text.len();
        self.text.push_str(text);
        self.rows.push((entry_key, from..self.text.len()));
    }

    /// Takes over `other`'s rows, to be written with these.
    fn append(&mut self, other: PendingText) {
        if self.rows.is_empty() {
            *self = other;
            return;
        }
        let shift = self.text.len();
        self.text.push_str(&other.text);
        self.rows.extend(
            other
                .rows
                .into_iter()
                .map(|(key, span)| (key, span.start + shift..span.end + shift)),
        );
    }

    fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn over_limit(&self) -> bool {
        self.text.len() > PENDING_TEXT_LIMIT
    }

    fn bytes(&self) -> usize {
        self.text.len()
    }

    /// Writes the rows into the search index.
    pub(super) fn flush(&mut self, tx: &Transaction) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let mut st = tx
            .prepare_cached("INSERT INTO message_text (rowid, text) VALUES (?1, ?2)")
            .map_err(sql("indexing message text"))?;
        // While a compact rebuilds the index beside it, the new one gets
        // the rows too (its invariant 1).
        let rebuilding = match self.rebuilding {
            Some(known) => known,
            None => *self.rebuilding.insert(super::fts_rebuild::rebuilding(tx)?),
        };
        let mut next = match rebuilding {
            true => Some(
                tx.prepare_cached(&format!(
                    "INSERT INTO {} (rowid, text) VALUES (?1, ?2)",
                    super::fts_rebuild::NEXT
                ))
                .map_err(sql("indexing message text"))?,
            ),
            false => None,
        };
        for (key, span) in self.rows.drain(..) {
            let text = &self.text[span];
            st.execute(params![key, text])
                .map_err(sql("indexing message text"))?;
            if let Some(next) = next.as_mut() {
                next.execute(params![key, text])
                    .map_err(sql("indexing message text"))?;
            }
        }
        self.text.clear();
        Ok(())
    }
}

impl Appender {
    pub(super) fn start(tx: &Transaction, codec: &Codec, key: i64) -> Result<Self> {
        Ok(Appender {
            key,
            facts: session_facts(tx, key)?,
            pending: PendingText::default(),
            tail: branch_cache::OpenTail::default(),
            encoder: codec.encoder(tx)?,
            role_ids: Vec::new(),
            last_active: None,
            daily: DailyUsage::default(),
        })
    }

    /// The `roles` row of `name`, added if the archive has none yet.
    fn role_id(&mut self, tx: &Transaction, name: &str) -> Result<i64> {
        if let Some((_, id)) = self.role_ids.iter().find(|(n, _)| n == name) {
            return Ok(*id);
        }
        let fail = sql("recording a message role");
        let id = match rows::role_id(tx, name).map_err(&fail)? {
            Some(id) => id,
            None => {
                tx.prepare_cached("INSERT INTO roles (name) VALUES (?1)")
                    .and_then(|mut st| st.execute([name]))
                    .map_err(&fail)?;
                tx.last_insert_rowid()
            }
        };
        self.role_ids.push((name.to_owned(), id));
        Ok(id)
    }

    /// The dictionary this write encodes with, if the archive has one.
    pub(super) fn dictionary_id(&self) -> Option<i64> {
        self.encoder.dictionary_id()
    }

    pub(super) fn push(&mut self, tx: &Transaction, entry: &Entry) -> Result<()> {
        let prepared = self.encoder.prepare(entry.json());
        let text = search::searchable_text(entry);
        let text = text
            .as_ref()
            .map(|(role, text)| (role.as_str(), text.as_str()));
        let usage = crate::usage::usage_fact(entry);
        self.push_prepared(tx, entry, text, usage.as_ref(), &prepared)
    }

    /// [`Appender::push`] with the entry's search text and usage extracted
    /// and its text encoded already (on another thread).
    fn push_prepared(
        &mut self,
        tx: &Transaction,
        entry: &Entry,
        search_text: Option<(&str, &str)>,
        usage: Option<&crate::usage::UsageFact>,
        prepared: &Prepared,
    ) -> Result<()> {
        let f = entry.facts();
        let placed = branch_cache::place(tx, self.key, entry, &mut self.tail)?;
        let seq = i64::try_from(self.facts.entry_count).unwrap_or(i64::MAX);
        // Encoded elsewhere with another dictionary: only ours is sure to exist.
        let reencoded;
        let prepared = if prepared.dictionary() != self.encoder.dictionary_id()
            && prepared.dictionary().is_some()
        {
            reencoded = self.encoder.prepare(entry.json());
            &reencoded
        } else {
            prepared
        };
        let trails = codec::message_trails(entry.json(), f.message_span.as_ref());
        let (stored, blobs) = codec::store(tx, entry.json(), prepared, trails)?;
        let role_id = match &search_text {
            Some((role, _)) => Some(self.role_id(tx, role)?),
            None => None,
        };
        tx.prepare_cached(
            "INSERT INTO entries (entry_key, session_key, seq, id, type, json, role_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut s| {
            s.execute(params![
                placed.key,
                self.key,
                seq,
                f.id,
                f.entry_type.as_str(),
                stored,
                role_id
            ])
        })
        .map_err(|e| duplicate_id_or(tx, self.key, e, &f.id))?;
        codec::record_blob_refs(tx, self.key, placed.key, &blobs)?;
        if f.entry_type == EntryType::Leaf {
            tx
                .prepare_cached("INSERT INTO leaf_events (session_key, seq, entry_key, target_id) VALUES (?1, ?2, ?3, ?4)")
                .and_then(|mut s| s.execute(params![self.key, seq, placed.key, f.target_id]))
                .map_err(sql("recording a leaf move"))?;
        }
        if let Some((target, label)) = f.label_update() {
            let r = match label {
                Some(l) => tx
                    .prepare_cached(
                        "INSERT INTO labels (session_key, target_id, label) VALUES (?1, ?2, ?3)
                         ON CONFLICT (session_key, target_id) DO UPDATE SET label = excluded.label",
                    )
                    .and_then(|mut s| s.execute(params![self.key, target, l.json()])),
                None => tx
                    .prepare_cached("DELETE FROM labels WHERE session_key = ?1 AND target_id = ?2")
                    .and_then(|mut s| s.execute(params![self.key, target])),
            };
            r.map_err(sql("updating a label"))?;
        }
        if let Some((_, text)) = search_text {
            self.pending.push(placed.key, text);
            if self.pending.over_limit() {
                self.pending.flush(tx)?;
            }
        }
        if let Some(fact) = usage {
            self.daily.record(tx, self.key, fact)?;
        }
        if let Some(ms) = crate::entry::timestamp_millis(&f.timestamp) {
            self.last_active = Some(self.last_active.map_or(ms, |t| t.max(ms)));
        }
        // The label change is already in the table; the rest of the fold is kept here.
        let _ = self.facts.push(entry);
        Ok(())
    }

    pub(super) fn finish(mut self, tx: &Transaction) -> Result<()> {
        self.pending.flush(tx)?;
        self.finish_holding_text(tx).map(drop)
    }

    /// [`Appender::finish`] but for the search text, handed back unwritten.
    fn finish_holding_text(mut self, tx: &Transaction) -> Result<PendingText> {
        self.tail
            .flush(&mut branch_cache::SqliteCache::new(tx, self.key))?;
        write_session_facts(tx, self.key, &self.facts)?;
        self.daily.flush(tx, self.key)?;
        if let Some(ms) = self.last_active {
            write_last_active(tx, self.key, ms)?;
        }
        Ok(self.pending)
    }
}

/// Writes sessions inside [`Archive::write_session`](super::Archive::write_session)'s
/// transaction: one (staged or not), or several one after another
/// ([`SessionWriter::end_session`]).
pub struct SessionWriter<'c> {
    pub(super) tx: Transaction<'c>,
    /// When the transaction took the write lock.
    pub(super) lock_taken: Instant,
    pub(super) appender: Option<Appender>,
    pub(super) codec: &'c Codec,
    /// Set by [`SessionWriter::begin_staged`]: the write commits in batches.
    pub(super) staged: Option<Staged>,
    /// Opens the staged write's background checkpointer.
    pub(super) manager: &'c super::connection::ConnectionManager,
    /// The search text of sessions ended by [`SessionWriter::end_session`],
    /// indexed when the transaction ends.
    pub(super) held_text: PendingText,
}

/// A staged session write: invisible to readers until published, committed
/// in batches of at most [`BATCHED_WRITE`], commit included, so that other
/// writers get the lock (a writer of another session, arriving at a
/// batch's start and waiting for its commit too, stays within the 100 ms
/// bound; at 100 ms, appends waited p50 145 ms during a 200,000-entry
/// import on a loaded machine).
#[derive(Debug)]
pub(super) struct Staged {
    key: i64,
    token: String,
    published: bool,
    /// The connection's `synchronous` level while the batches before the
    /// publishing one commit without waiting for the disk (set back before
    /// the publishing commit, and on any failure).
    relaxed_from: Option<i64>,
    /// When a batch is due: [`BATCHED_WRITE`], the tail of search rows and
    /// commit included.
    clock: crate::backend::pending::TailClock,
    /// Entries written in this batch (a test's `SESSIONTREE_TEST_BATCH`
    /// bounds them).
    rows: u64,
    /// The pause between two of its transactions.
    gap: Duration,
    /// An append to a session readers already see
    /// ([`SessionWriter::resume_batched`]): each batch is visible as it
    /// commits, and a failure leaves the batches committed (never
    /// discards the session).
    visible: bool,
    /// Committed early while its writer waits for input
    /// ([`SessionWriter::pause_batch`]): no transaction is open until
    /// [`SessionWriter::resume_batch`].
    paused: bool,
}

impl Staged {
    /// A batched write of session `key` under claim `token`, `gap` between
    /// batches; `visible` for an append to a session readers see. (Each
    /// batch is timed from [`SessionWriter::lock_taken`].)
    fn new(key: i64, token: String, gap: Duration, visible: bool) -> Staged {
        Staged {
            key,
            token,
            published: false,
            relaxed_from: None,
            clock: Default::default(),
            rows: 0,
            gap,
            visible,
            paused: false,
        }
    }

    /// The staged session's key.
    pub(super) fn key(&self) -> i64 {
        self.key
    }

    /// The token of the claim the staged write holds.
    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// Entries written in the batch now open.
    pub(super) fn rows(&self) -> u64 {
        self.rows
    }

    /// The `synchronous` level to set back on the connection, if relaxed.
    pub(super) fn relaxed_from(&self) -> Option<i64> {
        self.relaxed_from
    }

    /// Whether it appends to a session readers already see.
    pub(super) fn visible(&self) -> bool {
        self.visible
    }
}

/// `PRAGMA synchronous = NORMAL`: in WAL mode a commit does not wait for the
/// disk (the database stays consistent if the machine fails; the last
/// commits may be lost). A staged import's batches are invisible until its
/// publishing commit, which runs at the connection's own level and, by
/// syncing the log, makes every earlier batch durable with it.
const RELAXED_SYNC: i64 = 1;

/// Relaxes `conn` (outside a transaction) to [`RELAXED_SYNC`] for a batch
/// that leaves nothing a reader sees: the level to set back with
/// [`restore_sync`] on every path, or `None` if it was no stricter.
pub(super) fn relax_sync(conn: &Connection) -> Result<Option<i64>> {
    let context = "relaxing a batch's sync";
    let level: i64 = conn
        .pragma_query_value(None, "synchronous", |r| r.get(0))
        .map_err(sql(context))?;
    if level <= RELAXED_SYNC {
        return Ok(None);
    }
    conn.pragma_update(None, "synchronous", RELAXED_SYNC)
        .map_err(sql(context))?;
    Ok(Some(level))
}

/// Sets a connection relaxed by a staged write back to the archive's
/// `synchronous` level (outside a transaction). (Checkpoints are the
/// handle's [`LogCheckpointer`](super::checkpointer::LogCheckpointer)'s, on
/// every connection alike: a `wal_autocheckpoint` pragma would put SQLite's
/// checkpoint-in-the-commit back.)
pub(super) fn restore_sync(conn: &Connection, level: i64) -> Result<()> {
    conn.pragma_update(None, "synchronous", level)
        .map_err(sql("restoring the archive's sync"))
}

/// How long one transaction of a batched write (a fork's copy, a delete)
/// may run before it commits and lets other writers in: half the bound on
/// any writer's wait, so that the bound holds with a commit on top on a
/// loaded machine.
pub const BATCHED_WRITE: Duration = crate::backend::pending::BATCH_TIME;

/// `sessions.staged_from` of a fork being written in batches (never a
/// canonical path, which an import's marker is): invisible until published;
/// removed by the next open of the archive if its writer died.
pub const FORK_MARKER: &str = crate::backend::pending::FORK_MARK;

/// `sessions.staged_from` of a session being deleted in batches: invisible
/// from the first batch; whoever opens the archive next finishes it if its
/// deleter died.
pub const DELETE_MARKER: &str = crate::backend::pending::DELETE_MARK;

/// The pause between a staged import's transactions: longer than other
/// writers' busy-wait step (`ConnectionManager`'s busy handler polls every
/// millisecond), so a writer waiting for the lock gets it before the import
/// takes it again.
pub const STAGED_GAP: Duration = Duration::from_millis(3);

/// The pause between two batches of a fork's copy or a delete: long enough
/// that a writer of another session, woken late from its 1 ms busy-wait
/// sleep on a loaded machine, takes the lock before the next batch does.
/// With 3 ms gaps (200,000-entry fork and delete beside an appender, load
/// 10) a waiting append missed most gaps and waited p50 73 and 53 ms; the
/// batched migration measured the same (3 ms: p50 62 ms; 20 ms: p50 11 ms).
/// An import keeps [`STAGED_GAP`]: its throughput is its purpose.
pub const BATCHED_GAP: Duration = Duration::from_millis(20);

impl SessionWriter<'_> {
    /// Creates the session row for an import of `source` (its canonical
    /// path) and writes it in short transactions: until
    /// [`SessionWriter::publish`] no reader sees the session, and the import
    /// holds its writer claim, so that the next import of `source` can tell a
    /// live import from one that died (and discard that one).
    pub fn begin_staged(&mut self, new: &NewSession, source: &str) -> Result<()> {
        self.begin_staged_in(new, source, STAGED_GAP)
    }

    /// Creates a new session (a fork's copy) and writes it as a staged write
    /// ([`SessionWriter::begin_staged`]) in transactions of at most
    /// [`BATCHED_WRITE`]: until [`SessionWriter::publish`] it is invisible,
    /// and if its writer dies first, the next open of the archive removes it
    /// ([`Archive::recover_half_done`](super::handle::Archive)).
    pub fn begin_batched(&mut self, new: &NewSession) -> Result<()> {
        self.begin_staged_in(new, FORK_MARKER, BATCHED_GAP)
    }

    fn begin_staged_in(&mut self, new: &NewSession, source: &str, gap: Duration) -> Result<()> {
        self.refuse_if_writing()?;
        if !self.held_text.is_empty() {
            return Err(Error::Unknown(
                "a staged write holds one session, not several".into(),
            ));
        }
        let key = insert_session(&self.tx, new)?;
        let token = uuid::Uuid::now_v7().to_string();
        self.tx
            .execute(
                "UPDATE sessions SET staged_from = ?2 WHERE session_key = ?1",
                params![key, source],
            )
            .map_err(sql("staging an import"))?;
        super::claim::insert_claim(&self.tx, key, &token)?;
        self.appender = Some(Appender::start(&self.tx, self.codec, key)?);
        self.staged = Some(Staged::new(key, token, gap, false));
        Ok(())
    }

    /// Makes a staged session visible, with everything written so far, in
    /// the transaction that commits last; releases the import's claim.
    pub fn publish(&mut self) -> Result<()> {
        if self
            .staged
            .as_ref()
            .is_some_and(|s| s.relaxed_from.is_some() && !s.published)
        {
            // The publishing commit waits for the disk as the archive is set to.
            self.next_batch(false)?;
        }
        let Some(staged) = self.staged.as_mut() else {
            return Ok(());
        };
        self.tx
            .execute(
                "UPDATE sessions SET staged_from = NULL WHERE session_key = ?1",
                [staged.key],
            )
            .map_err(sql("publishing an import"))?;
        super::claim::release_claim(&self.tx, staged.key, &staged.token)?;
        staged.published = true;
        Ok(())
    }

    /// Counts an entry of a staged write's batch, and commits the batch once
    /// it has held the lock for [`BATCHED_WRITE`] less the tail its commit is
    /// expected to take (see [`TailClock`](crate::backend::pending::TailClock)),
    /// pauses so that waiting writers get the lock, and goes on in a new
    /// transaction (renewing the import's claim).
    fn end_batch_if_due(&mut self) -> Result<()> {
        let Some(staged) = self.staged.as_mut() else {
            return Ok(());
        };
        staged.rows += 1;
        if staged.published {
            return Ok(());
        }
        // The batch's search text goes into the index as it comes, inside
        // the clock: left to the commit it was most of a tail that no clock
        // foresees (25–55 ms after a batch was due at 1,000,000 entries).
        if let Some(appender) = self.appender.as_mut() {
            if appender.pending.bytes() >= STAGED_TEXT_STEP {
                appender.pending.flush(&self.tx)?;
            }
        }
        if !staged.clock.due(self.lock_taken.elapsed(), staged.rows) {
            return Ok(());
        }
        self.next_batch(true)
    }

    /// Commits a staged write's batch and goes on in a new transaction
    /// (renewing the import's claim). Batches but the first and the
    /// publishing one commit `relaxed` ([`RELAXED_SYNC`]); `relaxed` false
    /// sets the connection's own level back for the commits that follow.
    fn next_batch(&mut self, relaxed: bool) -> Result<()> {
        if !self.commit_batch(relaxed)? {
            return Ok(());
        }
        let gap = self.staged.as_ref().map_or(STAGED_GAP, |s| s.gap);
        super::turnstile::between_batches(&self.manager.path, gap);
        self.begin_batch()
    }

    /// Commits a staged write's batch early when its writer has nothing to
    /// write for a while (an import's reader is behind): holding the lock
    /// while it waits would keep every other writer out for nothing (an
    /// import batch held it 92 ms, 20 ms on a CPU, waiting for the reader at
    /// 1,000,000 entries, and an append waited 199 ms). The next
    /// [`SessionWriter::resume_batch`] begins the next batch. True if a
    /// batch was committed; false if this is no staged write, or a
    /// published or already paused one, or a test counts its batches' rows.
    pub fn pause_batch(&mut self) -> Result<bool> {
        match &self.staged {
            Some(s) if !s.published && !s.paused => {}
            _ => return Ok(false),
        }
        // A test's `SESSIONTREE_TEST_BATCH` makes every batch its row count.
        if crate::backend::pending::test_batch().is_some() {
            return Ok(false);
        }
        if !self.commit_batch(true)? {
            return Ok(false);
        }
        if let Some(s) = self.staged.as_mut() {
            s.paused = true;
        }
        Ok(true)
    }

    /// Begins the next batch of a write [`SessionWriter::pause_batch`]
    /// paused (nothing otherwise): every other method of the writer needs
    /// its transaction open.
    pub fn resume_batch(&mut self) -> Result<()> {
        match self.staged.as_mut() {
            Some(s) if s.paused => s.paused = false,
            _ => return Ok(()),
        }
        // The wait was the pause; writers that announced themselves
        // meanwhile still go first.
        super::turnstile::between_batches(&self.manager.path, Duration::ZERO);
        self.begin_batch()
    }

    /// Runs `read` with the write lock let go: a staged write's open batch
    /// commits early ([`SessionWriter::pause_batch`]) and the next begins
    /// after `read`. A fork read its source's next chunk inside a batch: on
    /// top of the batch's own work, one held the lock 100 ms on a CPU at
    /// 1,000,000 entries. (A failed `read` leaves no transaction open;
    /// `write_session`'s cleanup expects that.)
    pub fn read_between_batches(&mut self, read: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.pause_batch()?;
        read()?;
        self.resume_batch()
    }

    /// Commits a staged write's batch: its search rows, its claim renewed;
    /// false (nothing done) if this is no staged write. The connection is
    /// then outside a transaction until [`SessionWriter::begin_batch`].
    fn commit_batch(&mut self, relaxed: bool) -> Result<bool> {
        let Some(staged) = self.staged.as_ref() else {
            return Ok(false);
        };
        let (key, token) = (staged.key, staged.token.clone());
        // The batch's tail: its search rows, the rest of its rows, the commit.
        let tail_from = Instant::now();
        if let Some(appender) = self.appender.take() {
            appender.finish(&self.tx)?;
        }
        super::claim::renew_claim(&self.tx, key, &token)?;
        let relaxed_from = self.staged.as_ref().and_then(|s| s.relaxed_from);
        // The `Transaction` stays open across the batch: it is the same
        // connection's transaction, begun again, and its final commit (or
        // rollback on drop) ends the last batch.
        let committing = Instant::now();
        self.tx
            .execute_batch("COMMIT")
            .map_err(sql("committing an import batch"))?;
        if let Some(s) = self.staged.as_mut() {
            s.clock.record_tail(tail_from.elapsed());
            let span = super::lock_trace::started_at("staged-batch", self.lock_taken);
            super::lock_trace::end(
                span,
                s.rows,
                &format!(
                    "tail_ms={:.2} commit_ms={:.2}",
                    tail_from.elapsed().as_secs_f64() * 1e3,
                    committing.elapsed().as_secs_f64() * 1e3
                ),
            );
        }
        // `synchronous` can change only outside a transaction: relaxing
        // takes effect from the next batch's commit.
        if relaxed && relaxed_from.is_none() {
            // Set back on every path from here.
            let level = relax_sync(&self.tx)?;
            if let Some(s) = self.staged.as_mut() {
                s.relaxed_from = level;
            }
        } else if let (false, Some(level)) = (relaxed, relaxed_from) {
            restore_sync(&self.tx, level)?;
            if let Some(s) = self.staged.as_mut() {
                s.relaxed_from = None;
            }
        }
        super::checkpointer::keep_log_short(&self.tx, self.manager.checkpointer());
        Ok(true)
    }

    /// Begins a staged write's next batch (after [`SessionWriter::commit_batch`]):
    /// takes the lock through the turnstile, does the search index's due
    /// merge work on the batch's clock, and goes on appending.
    fn begin_batch(&mut self) -> Result<()> {
        let Some(key) = self.staged.as_ref().map(|s| s.key) else {
            return Ok(());
        };
        super::turnstile::begin_announced(&self.manager.path, || {
            self.tx.execute_batch("BEGIN IMMEDIATE")
        })
        .map_err(sql("starting an import batch"))?;
        super::lock_trace::lock_taken();
        self.lock_taken = Instant::now();
        if let Some(staged) = self.staged.as_mut() {
            staged.rows = 0;
        }
        super::connection::refuse_if_log_missing(&self.manager.path)?;
        // Inside the batch's time: the clock started with the lock.
        super::fts::merge_due(&self.tx, super::fts::WRITER_MERGE_TIME)?;
        self.appender = Some(Appender::start(&self.tx, self.codec, key)?);
        Ok(())
    }

    /// A session is being written: another cannot begin until
    /// [`SessionWriter::end_session`] (its rows would be left unfinished).
    fn refuse_if_writing(&self) -> Result<()> {
        match &self.appender {
            Some(_) => Err(Error::Unknown(
                "a session write began while another was open (end_session first)".into(),
            )),
            None => Ok(()),
        }
    }

    /// Ends the session being written (begun with [`SessionWriter::begin`]),
    /// so that another can follow in this transaction; its search text is
    /// indexed with the others' when the transaction ends (FTS5 flushes and
    /// merges a segment whenever it is written to between other writes).
    /// Not for a staged write, which holds one session.
    pub fn end_session(&mut self) -> Result<()> {
        if self.staged.is_some() {
            return Err(Error::Unknown(
                "a staged write holds one session, not several".into(),
            ));
        }
        if let Some(appender) = self.appender.take() {
            let text = appender.finish_holding_text(&self.tx)?;
            self.held_text.append(text);
            if self.held_text.over_limit() {
                self.held_text.flush(&self.tx)?;
            }
        }
        Ok(())
    }

    /// Indexes the search text held back so far (the ended sessions', then
    /// the open one's) if it comes to at least `min_bytes`: a writer about to
    /// wait for its input spends the wait on the index instead of adding it
    /// to the commit. Each call makes a search-index segment, hence the floor.
    pub fn index_held_text(&mut self, min_bytes: usize) -> Result<()> {
        let open = self.appender.as_ref().map_or(0, |a| a.pending.bytes());
        if self.held_text.bytes() + open < min_bytes {
            return Ok(());
        }
        self.held_text.flush(&self.tx)?;
        match self.appender.as_mut() {
            Some(appender) => appender.pending.flush(&self.tx),
            None => Ok(()),
        }
    }

    /// Creates the session row; must come before any entry.
    pub fn begin(&mut self, new: &NewSession) -> Result<()> {
        self.refuse_if_writing()?;
        let key = insert_session(&self.tx, new)?;
        self.appender = Some(Appender::start(&self.tx, self.codec, key)?);
        Ok(())
    }

    /// Continues an existing session (appending after its last entry), as its
    /// writer: fails if a live writer holds its claim; a claim whose lease ran
    /// out, or whose holder on this host is gone, is taken over — removed in
    /// this transaction, so the writer that held it is refused at its next
    /// append instead of appending on top of this one.
    pub fn resume(&mut self, session_id: &str) -> Result<()> {
        self.refuse_if_writing()?;
        let key: i64 = self
            .tx
            .query_row(
                "SELECT session_key FROM sessions WHERE id = ?1 AND staged_from IS NULL",
                [session_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql("resuming a session"))?
            .ok_or_else(|| Error::SessionNotFound(session_id.to_owned()))?;
        super::claim::refuse_if_held(&self.tx, key, session_id)?;
        self.tx
            .execute("DELETE FROM writer_claims WHERE session_key = ?1", [key])
            .map_err(sql("taking over a writer claim"))?;
        self.appender = Some(Appender::start(&self.tx, self.codec, key)?);
        Ok(())
    }

    /// Continues an existing session as [`SessionWriter::resume`] does, as a
    /// batched write: it commits every [`BATCHED_WRITE`] as a staged write
    /// does, holding the session's writer claim until
    /// [`SessionWriter::publish`] (which also commits the last batch at the
    /// archive's own sync level). For the lines pi appended to an imported
    /// file: thousands of them in one transaction held every other writer
    /// for as long (10,000 entries, 9.4 MB: 0.37 s). Readers see each batch
    /// as it commits, a prefix of the appended lines, as pi's own file
    /// shows them while pi writes. If the write fails, the batches
    /// committed stay (every entry whole) and the claim is released; the
    /// import record, written last, still names the old end, and the next
    /// import checks the entries already there against the file and goes
    /// on after them.
    pub fn resume_batched(&mut self, session_id: &str) -> Result<()> {
        self.resume(session_id)?;
        let key = self.open_key()?;
        let token = uuid::Uuid::now_v7().to_string();
        super::claim::insert_claim(&self.tx, key, &token)?;
        self.staged = Some(Staged::new(key, token, STAGED_GAP, true));
        Ok(())
    }

    /// When this write's transaction took the write lock (a group of
    /// writes times its batch from it).
    pub fn lock_taken(&self) -> Instant {
        self.lock_taken
    }

    /// The encoder entries of this write are prepared with (see
    /// [`SessionWriter::push_prepared`]), its dictionary read in this
    /// transaction.
    pub fn encoder(&self) -> Result<Encoder> {
        self.codec.encoder(&self.tx)
    }

    /// Records (or updates) where the session was imported from.
    pub fn record_import(&mut self, record: &ImportRecord) -> Result<()> {
        let key =
            self.appender.as_ref().map(|a| a.key).ok_or_else(|| {
                Error::Unknown("an import was recorded before its session".into())
            })?;
        let n = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        self.tx
            .execute(
                "INSERT INTO imports (source_path, session_key, bytes, prefix_hash, lines, file_size, file_mtime)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (source_path) DO UPDATE SET session_key = excluded.session_key,
                   bytes = excluded.bytes, prefix_hash = excluded.prefix_hash, lines = excluded.lines,
                   file_size = excluded.file_size, file_mtime = excluded.file_mtime",
                params![
                    record.source_path,
                    key,
                    n(record.bytes),
                    record.prefix_hash,
                    n(record.lines),
                    n(record.file_size),
                    record.file_mtime
                ],
            )
            .map_err(sql("recording an import"))?;
        Ok(())
    }

    /// Keeps lines of the session's file that pi skips, verbatim, each
    /// `position` entries into the session's log (`-1`: before the header).
    pub fn keep_lines(&mut self, lines: &[crate::storage::KeptLine]) -> Result<()> {
        let key = self.open_key()?;
        let mut st = self
            .tx
            .prepare_cached(
                "INSERT INTO kept_lines (session_key, position, text) VALUES (?1, ?2, ?3)",
            )
            .map_err(sql("keeping a skipped line"))?;
        for line in lines {
            st.execute(params![key, line.position, line.text])
                .map_err(sql("keeping a skipped line"))?;
        }
        Ok(())
    }

    /// Records that the session's file ended without its final `\n` after
    /// `entries` entries (`None`: it ended with one).
    pub fn set_open_end(&mut self, entries: Option<i64>) -> Result<()> {
        let key = self.open_key()?;
        self.tx
            .execute(
                "UPDATE sessions SET open_end = ?2 WHERE session_key = ?1",
                params![key, entries],
            )
            .map_err(sql("recording the file's end"))?;
        Ok(())
    }

    /// Sets whose rules the session being written follows.
    pub fn set_contract(&mut self, contract: crate::contract::Contract) -> Result<()> {
        let key = self.open_key()?;
        self.tx
            .execute(
                "UPDATE sessions SET contract = ?2 WHERE session_key = ?1",
                params![key, contract.as_str()],
            )
            .map_err(sql("recording the session's contract"))?;
        Ok(())
    }

    /// The key of the session being written.
    fn open_key(&self) -> Result<i64> {
        self.appender.as_ref().map(|a| a.key).ok_or_else(|| {
            Error::Unknown("a session's lines were written before the session".into())
        })
    }

    /// Appends one entry to the new session.
    pub fn push(&mut self, entry: &Entry) -> Result<()> {
        let appender = self.appender.as_mut().ok_or_else(|| {
            Error::Unknown("a session's entries were written before the session".into())
        })?;
        appender.push(&self.tx, entry)?;
        self.end_batch_if_due()
    }

    /// Appends one entry whose search text (role, text), usage and stored
    /// encoding the caller made, e.g. on another thread (see
    /// `search::searchable_text`, `usage::usage_fact` and
    /// [`SessionWriter::encoder`]).
    pub fn push_prepared(
        &mut self,
        entry: &Entry,
        search_text: Option<(&str, &str)>,
        usage: Option<&crate::usage::UsageFact>,
        prepared: &Prepared,
    ) -> Result<()> {
        let appender = self.appender.as_mut().ok_or_else(|| {
            Error::Unknown("a session's entries were written before the session".into())
        })?;
        appender.push_prepared(&self.tx, entry, search_text, usage, prepared)?;
        self.end_batch_if_due()
    }
}
