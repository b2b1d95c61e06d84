//! The SQLite backend: many sessions in one archive file, an append-only log
//! per session, and a materialized branch cache ([`branch_cache`]).
//!
//! # Opening
//! [`Archive::open`] is the one place a database is opened: WAL journal,
//! `synchronous` from [`Durability`], `foreign_keys`, `busy_timeout`, then the
//! migrations in `schema/`, all before any pooled connection is handed out.
//!
//! # Concurrency
//! Readers take pooled connections and see only committed transactions (WAL
//! snapshots); they never wait for writers. Each session has at most one
//! writer at a time ([`claim`]); it is taken at the first write.
//!
//! # Durability
//! Every append (or batch) is one IMMEDIATE transaction; it is acknowledged
//! after COMMIT, which with `synchronous=FULL` has reached the disk.

pub mod branch_cache;
pub mod claim;
pub mod migrate;
pub mod search;

use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use crate::rules::{SessionStats, StatsAccumulator};
use crate::storage::{Durability, SessionMetadata, SessionStorage};
use branch_cache::ReadCost;
use claim::WriterClaim;
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The reader pool.
pub type Pool = r2d2::Pool<ConnectionManager>;

/// Opens pooled connections with the per-connection settings.
#[derive(Debug, Clone)]
pub struct ConnectionManager {
    path: PathBuf,
    durability: Durability,
    read_only: bool,
}

impl ConnectionManager {
    fn connect_raw(&self) -> rusqlite::Result<Connection> {
        let flags = if self.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = Connection::open_with_flags(&self.path, flags)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.pragma_update(None, "foreign_keys", true)?;
        let sync = match self.durability {
            Durability::Full => "FULL",
            Durability::Relaxed => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync)?;
        conn.pragma_update(None, "cache_size", -16_000)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(conn)
    }
}

impl r2d2::ManageConnection for ConnectionManager {
    type Connection = Connection;
    type Error = rusqlite::Error;
    fn connect(&self) -> rusqlite::Result<Connection> {
        self.connect_raw()
    }
    fn is_valid(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        conn.execute_batch("")
    }
    fn has_broken(&self, _conn: &mut Connection) -> bool {
        false
    }
}

#[derive(Debug)]
struct ArchiveInner {
    pool: Pool,
    path: PathBuf,
}

/// An archive: one SQLite file holding many sessions.
#[derive(Debug, Clone)]
pub struct Archive(Arc<ArchiveInner>);

/// The fields of a new session row.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSession {
    /// Session id.
    pub id: String,
    /// Creation time (ISO-8601).
    pub created_at: String,
    /// Working directory.
    pub cwd: String,
    /// Parent session reference.
    pub parent_session: Option<String>,
    /// Metadata JSON object text.
    pub metadata: Option<String>,
    /// The exact header line, for export.
    pub header: String,
}

/// One row of a session listing.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// Metadata.
    pub metadata: SessionMetadata,
    /// Session name.
    pub name: Option<String>,
    /// Entries in the log.
    pub entry_count: i64,
    /// Statistics.
    pub stats: SessionStats,
}

/// Archive-wide totals.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ArchiveTotals {
    /// Sessions in the archive.
    pub sessions: i64,
    /// Entries in all sessions.
    pub entries: i64,
    /// Statistics summed over all sessions.
    pub stats: SessionStats,
    /// Per working directory: cwd, sessions, messages, cost.
    pub per_cwd: Vec<(String, i64, i64, f64)>,
}

/// Which sessions to list.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only this working directory.
    pub cwd: Option<String>,
    /// Only sessions created at or after this time (Unix ms).
    pub since_ms: Option<i64>,
    /// Only sessions whose name contains this text.
    pub name_contains: Option<String>,
    /// Page size (all when `None`).
    pub limit: Option<usize>,
    /// Rows to skip.
    pub offset: usize,
}

/// One full-text search hit.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// Session id.
    pub session_id: String,
    /// Entry id.
    pub entry_id: String,
    /// Role of the message.
    pub role: String,
    /// Text around the match, with the match in `[` `]`.
    pub snippet: String,
    /// BM25 rank (lower is better).
    pub rank: f64,
}

fn sql(context: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| Error::sqlite(context, e)
}

impl Archive {
    /// Opens (creating if needed) an archive, migrated to the latest schema.
    pub fn open(path: impl AsRef<Path>, durability: Durability) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let manager = ConnectionManager {
            path: path.clone(),
            durability,
            read_only: false,
        };
        let ctx = || format!("opening archive {}", path.display());
        let mut conn = manager.connect_raw().map_err(|e| Error::sqlite(ctx(), e))?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(|e| Error::sqlite(ctx(), e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::InvalidSession(format!(
                "{}: SQLite would not switch to WAL journaling (got {mode})",
                path.display()
            )));
        }
        migrate::migrate(&mut conn, &path)?;
        drop(conn);
        let pool = r2d2::Pool::builder()
            .max_size(8)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_secs(30))
            .build(manager)?;
        Ok(Archive(Arc::new(ArchiveInner { pool, path })))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool {
        &self.0.pool
    }

    /// A pooled connection.
    pub fn conn(&self) -> Result<r2d2::PooledConnection<ConnectionManager>> {
        Ok(self.0.pool.get()?)
    }

    /// Creates a session and returns it open for writing (claim taken).
    pub fn create_session(&self, new: &NewSession) -> Result<SqliteStorage> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("creating a session"))?;
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
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("creating a session"))?;
        let key = insert_session(&tx, new)?;
        let mut appender = Appender::start(&tx, key)?;
        for e in entries {
            appender.push(&tx, &e?)?;
        }
        appender.finish(&tx)?;
        tx.commit().map_err(sql("creating a session"))?;
        Ok(key)
    }

    /// Creates one session inside one transaction, fed by `fill` through a
    /// [`SessionWriter`] (streaming import): all of it commits, or nothing.
    pub fn write_session<T>(
        &self,
        fill: impl FnOnce(&mut SessionWriter<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("starting a session write"))?;
        let mut writer = SessionWriter { tx, appender: None };
        let out = fill(&mut writer)?;
        let SessionWriter { tx, appender } = writer;
        if let Some(a) = appender {
            a.finish(&tx)?;
        }
        tx.commit().map_err(sql("committing a session write"))?;
        Ok(out)
    }

    /// Opens a session by id for reading; it takes the writer claim at its first write.
    pub fn open_session(&self, id: &str) -> Result<SqliteStorage> {
        let conn = self.conn()?;
        let key: Option<i64> = conn
            .prepare_cached("SELECT session_key FROM sessions WHERE id = ?1")
            .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
            .map_err(sql("opening a session"))?;
        let key = key.ok_or_else(|| Error::SessionNotFound(id.to_owned()))?;
        Ok(SqliteStorage {
            archive: self.clone(),
            session_key: key,
            id: id.to_owned(),
            claim: None,
            last_read: Cell::new(ReadCost::default()),
        })
    }

    /// The ids of sessions whose id starts with `prefix` (at most `limit`).
    pub fn sessions_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached("SELECT id FROM sessions WHERE id >= ?1 AND id < ?1 || char(1114111) ORDER BY id LIMIT ?2")
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

    /// Sessions newest first, filtered and paged, without touching entries.
    pub fn list(&self, q: &ListQuery) -> Result<Vec<SessionSummary>> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached(
                "SELECT id, created_at, cwd, parent_session, metadata, name, entry_count, message_count,
                        cached_tokens, uncached_tokens, total_tokens, cost_total
                 FROM sessions
                 WHERE (?1 IS NULL OR cwd = ?1) AND (?2 IS NULL OR created_ms >= ?2)
                   AND (?3 IS NULL OR instr(lower(name), lower(?3)) > 0)
                 ORDER BY created_ms DESC, session_key DESC LIMIT ?4 OFFSET ?5",
            )
            .map_err(sql("listing sessions"))?;
        let limit = q.limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let offset = i64::try_from(q.offset).unwrap_or(i64::MAX);
        let rows = st
            .query_map(
                params![q.cwd, q.since_ms, q.name_contains, limit, offset],
                |r| {
                    Ok(SessionSummary {
                        metadata: SessionMetadata {
                            id: r.get(0)?,
                            created_at: r.get(1)?,
                            cwd: Some(r.get(2)?),
                            path: None,
                            parent_session: r.get(3)?,
                            metadata: r.get(4)?,
                        },
                        name: r.get(5)?,
                        entry_count: r.get(6)?,
                        stats: SessionStats {
                            message_count: r.get::<_, i64>(7)?.try_into().unwrap_or(0),
                            cached_tokens: r.get(8)?,
                            uncached_tokens: r.get(9)?,
                            total_tokens: r.get(10)?,
                            cost_total: r.get(11)?,
                        },
                    })
                },
            )
            .and_then(Iterator::collect)
            .map_err(sql("listing sessions"));
        rows
    }

    /// Totals over every session, from the maintained session rows only.
    pub fn totals(&self) -> Result<ArchiveTotals> {
        let conn = self.conn()?;
        let mut t = conn
            .query_row(
                "SELECT count(*), coalesce(sum(entry_count), 0), coalesce(sum(message_count), 0),
                        coalesce(sum(cached_tokens), 0), coalesce(sum(uncached_tokens), 0),
                        coalesce(sum(total_tokens), 0), coalesce(sum(cost_total), 0) FROM sessions",
                [],
                |r| {
                    Ok(ArchiveTotals {
                        sessions: r.get(0)?,
                        entries: r.get(1)?,
                        stats: SessionStats {
                            message_count: r.get::<_, i64>(2)?.try_into().unwrap_or(0),
                            cached_tokens: r.get(3)?,
                            uncached_tokens: r.get(4)?,
                            total_tokens: r.get(5)?,
                            cost_total: r.get(6)?,
                        },
                        per_cwd: Vec::new(),
                    })
                },
            )
            .map_err(sql("summing sessions"))?;
        let mut st = conn
            .prepare(
                "SELECT cwd, count(*), sum(message_count), sum(cost_total) FROM sessions
                 GROUP BY cwd ORDER BY count(*) DESC, cwd",
            )
            .map_err(sql("summing sessions"))?;
        t.per_cwd = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .and_then(Iterator::collect)
            .map_err(sql("summing sessions"))?;
        Ok(t)
    }

    /// Deletes a session and everything in it, in one transaction.
    pub fn delete_session(&self, id: &str) -> Result<()> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("deleting a session"))?;
        let key: Option<i64> = tx
            .query_row(
                "SELECT session_key FROM sessions WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql("deleting a session"))?;
        let key = key.ok_or_else(|| Error::SessionNotFound(id.to_owned()))?;
        tx.execute(
            "DELETE FROM message_text WHERE rowid IN (SELECT entry_key FROM entries WHERE session_key = ?1)",
            [key],
        )
        .map_err(sql("deleting a session"))?;
        tx.execute("DELETE FROM sessions WHERE session_key = ?1", [key])
            .map_err(sql("deleting a session"))?;
        tx.commit().map_err(sql("deleting a session"))
    }

    /// Full-text search over message text, best first.
    pub fn search(
        &self,
        query: &str,
        session: Option<&str>,
        cwd: Option<&str>,
        role: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SearchHit>> {
        let words = fts_query(query);
        if words.is_empty() {
            // No words, no hits (FTS5 would call an empty query a syntax error).
            return Ok(Vec::new());
        }
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached(
                "SELECT s.id, e.id, m.role, snippet(message_text, 0, '[', ']', '…', 12), bm25(message_text)
                 FROM message_text m
                 JOIN entries e ON e.entry_key = m.rowid
                 JOIN sessions s ON s.session_key = e.session_key
                 WHERE message_text MATCH ?1
                   AND (?2 IS NULL OR s.id = ?2) AND (?3 IS NULL OR s.cwd = ?3) AND (?4 IS NULL OR m.role = ?4)
                 ORDER BY bm25(message_text) LIMIT ?5",
            )
            .map_err(sql("searching"))?;
        let hits = st
            .query_map(
                params![
                    words,
                    session,
                    cwd,
                    role,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |r| {
                    Ok(SearchHit {
                        session_id: r.get(0)?,
                        entry_id: r.get(1)?,
                        role: r.get(2)?,
                        snippet: r.get(3)?,
                        rank: r.get(4)?,
                    })
                },
            )
            .and_then(Iterator::collect)
            .map_err(sql("searching"));
        hits
    }

    /// `PRAGMA integrity_check` plus the branch-cache [`branch_cache::verify`] of
    /// each session (or one): the problems found, empty when all is well.
    pub fn check(&self, session: Option<&str>) -> Result<Vec<String>> {
        let conn = self.conn()?;
        let mut problems = Vec::new();
        let mut st = conn
            .prepare("PRAGMA integrity_check")
            .map_err(sql("checking integrity"))?;
        let rows: Vec<String> = st
            .query_map([], |r| r.get(0))
            .and_then(Iterator::collect)
            .map_err(sql("checking integrity"))?;
        problems.extend(rows.into_iter().filter(|r| r != "ok"));
        let mut st = conn
            .prepare("SELECT session_key, id FROM sessions WHERE ?1 IS NULL OR id = ?1")
            .map_err(sql("checking sessions"))?;
        let sessions: Vec<(i64, String)> = st
            .query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(Iterator::collect)
            .map_err(sql("checking sessions"))?;
        for (key, id) in sessions {
            for p in branch_cache::verify(&conn, key)? {
                problems.push(format!("session {id}: {p}"));
            }
            for p in verify_session_facts(&conn, key)? {
                problems.push(format!("session {id}: {p}"));
            }
        }
        Ok(problems)
    }
}

/// Quotes each word so user text is never read as FTS5 syntax. NUL splits
/// words too: FTS5 reads its query as a C string and would stop at one.
fn fts_query(query: &str) -> String {
    query
        .split(|c: char| c.is_whitespace() || c == '\0')
        .filter(|w| !w.is_empty())
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn insert_session(tx: &Transaction, new: &NewSession) -> Result<i64> {
    let exists: Option<i64> = tx
        .query_row(
            "SELECT session_key FROM sessions WHERE id = ?1",
            [&new.id],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql("creating a session"))?;
    if exists.is_some() {
        return Err(Error::InvalidSession(format!(
            "session {} already exists in the archive",
            new.id
        )));
    }
    tx.execute(
        "INSERT INTO sessions (id, created_at, created_ms, cwd, parent_session, metadata, header)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            new.id,
            new.created_at,
            crate::entry::timestamp_millis(&new.created_at),
            new.cwd,
            new.parent_session,
            new.metadata,
            new.header
        ],
    )
    .map_err(sql("creating a session"))?;
    Ok(tx.last_insert_rowid())
}

/// The maintained facts of a session row.
#[derive(Debug, Clone, PartialEq)]
struct SessionFacts {
    leaf_id: Option<String>,
    name: Option<String>,
    entry_count: i64,
    stats: StatsAccumulator,
}

fn session_facts(conn: &Connection, key: i64) -> Result<SessionFacts> {
    conn.prepare_cached(
        "SELECT leaf_id, name, entry_count, message_count, cached_tokens, uncached_tokens, total_tokens,
                cost_total, broken_message_id FROM sessions WHERE session_key = ?1",
    )
    .and_then(|mut s| {
        s.query_row([key], |r| {
            Ok(SessionFacts {
                leaf_id: r.get(0)?,
                name: r.get(1)?,
                entry_count: r.get(2)?,
                stats: StatsAccumulator {
                    stats: SessionStats {
                        message_count: r.get::<_, i64>(3)?.try_into().unwrap_or(0),
                        cached_tokens: r.get(4)?,
                        uncached_tokens: r.get(5)?,
                        total_tokens: r.get(6)?,
                        cost_total: r.get(7)?,
                    },
                    broken_message: r.get(8)?,
                },
            })
        })
    })
    .map_err(sql("reading session facts"))
}

/// Replays the log and compares the maintained facts (leaf, name, stats, labels).
fn verify_session_facts(conn: &Connection, key: i64) -> Result<Vec<String>> {
    let stored = session_facts(conn, key)?;
    let mut st = conn
        .prepare("SELECT json FROM entries WHERE session_key = ?1 ORDER BY seq")
        .map_err(sql("verifying session facts"))?;
    let rows = st
        .query_map([key], |r| r.get::<_, String>(0))
        .map_err(sql("verifying session facts"))?;
    let mut log = crate::backend::LogIndex::default();
    for json in rows {
        log.push(branch_cache::stored_entry(
            &json.map_err(sql("verifying session facts"))?,
        )?);
    }
    let mut stats = StatsAccumulator::default();
    for e in log.all() {
        stats.add(e);
    }
    let expected = SessionFacts {
        leaf_id: log.leaf().map(str::to_owned),
        name: log.name(),
        entry_count: log.all().len() as i64,
        stats,
    };
    let mut problems = Vec::new();
    if expected != stored {
        problems.push(format!(
            "maintained facts {stored:?} differ from a replay {expected:?}"
        ));
    }
    let mut st = conn
        .prepare("SELECT target_id, label FROM labels WHERE session_key = ?1")
        .map_err(sql("verifying labels"))?;
    let labels: Vec<(String, String)> = st
        .query_map([key], |r| Ok((r.get(0)?, r.get(1)?)))
        .and_then(Iterator::collect)
        .map_err(sql("verifying labels"))?;
    for (target, label) in &labels {
        if log.label(target).as_deref() != Some(label) {
            problems.push(format!(
                "label on {target} is {label:?}, a replay gives {:?}",
                log.label(target)
            ));
        }
    }
    Ok(problems)
}

/// The entries table's unique id index refusing a duplicate becomes `invalid_entry`.
fn duplicate_id_or(e: rusqlite::Error, id: &str) -> Error {
    match &e {
        rusqlite::Error::SqliteFailure(f, Some(msg))
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                && msg.contains("entries.id") =>
        {
            Error::InvalidEntry(format!(
                "Entry {id} already exists in this session: ids must be unique"
            ))
        }
        _ => Error::sqlite("appending an entry", e),
    }
}

/// Appends entries to one session inside a transaction, maintaining every
/// derived fact; [`Appender::finish`] writes the session row back.
struct Appender {
    key: i64,
    facts: SessionFacts,
    /// Search-index rows not yet written. FTS5 flushes its pending terms at
    /// every statement journal (each later write in the transaction opens one),
    /// so rows are written together, not one per entry.
    pending_text: Vec<(i64, String, String)>,
    pending_bytes: usize,
}

/// Search text buffered before it is written (bounds import memory).
const PENDING_TEXT_LIMIT: usize = 8 << 20;

impl Appender {
    fn start(tx: &Transaction, key: i64) -> Result<Self> {
        Ok(Appender {
            key,
            facts: session_facts(tx, key)?,
            pending_text: Vec::new(),
            pending_bytes: 0,
        })
    }

    fn flush_text(&mut self, tx: &Transaction) -> Result<()> {
        let mut st = tx
            .prepare_cached(
                "INSERT INTO message_text (rowid, text, role, session_key) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(sql("indexing message text"))?;
        for (key, text, role) in self.pending_text.drain(..) {
            st.execute(params![key, text, role, self.key])
                .map_err(sql("indexing message text"))?;
        }
        self.pending_bytes = 0;
        Ok(())
    }

    fn push(&mut self, tx: &Transaction, entry: &Entry) -> Result<()> {
        let f = entry.facts();
        let placed = branch_cache::place(tx, self.key, entry)?;
        let seq = self.facts.entry_count;
        tx
            .prepare_cached(
                "INSERT INTO entries (entry_key, session_key, seq, id, parent_id, type, timestamp, json)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut s| {
                s.execute(params![placed.key, self.key, seq, f.id, f.parent_id, f.entry_type.as_str(), f.timestamp, entry.json()])
            })
            .map_err(|e| duplicate_id_or(e, &f.id))?;
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
                    .and_then(|mut s| s.execute(params![self.key, target, l])),
                None => tx
                    .prepare_cached("DELETE FROM labels WHERE session_key = ?1 AND target_id = ?2")
                    .and_then(|mut s| s.execute(params![self.key, target])),
            };
            r.map_err(sql("updating a label"))?;
        }
        if let Some((role, text)) = search::searchable_text(entry) {
            self.pending_bytes += text.len();
            self.pending_text.push((placed.key, text, role));
            if self.pending_bytes > PENDING_TEXT_LIMIT {
                self.flush_text(tx)?;
            }
        }
        if let Some(name) = f.session_name_update() {
            self.facts.name = name.map(str::to_owned);
        }
        self.facts.stats.add(entry);
        self.facts.leaf_id = f.leaf_after().map(str::to_owned);
        self.facts.entry_count += 1;
        Ok(())
    }

    fn finish(mut self, tx: &Transaction) -> Result<()> {
        self.flush_text(tx)?;
        let s = &self.facts.stats.stats;
        tx.prepare_cached(
            "UPDATE sessions SET leaf_id = ?2, name = ?3, entry_count = ?4, message_count = ?5,
                    cached_tokens = ?6, uncached_tokens = ?7, total_tokens = ?8, cost_total = ?9,
                    broken_message_id = ?10
                 WHERE session_key = ?1",
        )
        .and_then(|mut st| {
            st.execute(params![
                self.key,
                self.facts.leaf_id,
                self.facts.name,
                self.facts.entry_count,
                i64::try_from(s.message_count).unwrap_or(i64::MAX),
                s.cached_tokens,
                s.uncached_tokens,
                s.total_tokens,
                s.cost_total,
                self.facts.stats.broken_message
            ])
        })
        .map_err(sql("updating session facts"))?;
        Ok(())
    }
}

/// Where an imported session came from (the `imports` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportRecord {
    /// Canonical path of the source file.
    pub source_path: String,
    /// The session it became.
    pub session_id: String,
    /// Bytes imported (through the last complete line).
    pub bytes: u64,
    /// FNV-1a 64 of those bytes, hex.
    pub prefix_hash: String,
    /// Non-blank lines in them, the header included.
    pub lines: u64,
    /// File size when last seen.
    pub file_size: u64,
    /// File modification time (Unix ms) when last seen.
    pub file_mtime: i64,
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

    /// Whether a session with this id exists.
    pub fn has_session(&self, id: &str) -> Result<bool> {
        let conn = self.conn()?;
        conn.query_row("SELECT 1 FROM sessions WHERE id = ?1", [id], |_| Ok(()))
            .optional()
            .map(|r| r.is_some())
            .map_err(sql("looking up a session"))
    }
}

/// Writes one session inside [`Archive::write_session`]'s transaction.
pub struct SessionWriter<'c> {
    tx: Transaction<'c>,
    appender: Option<Appender>,
}

impl SessionWriter<'_> {
    /// Creates the session row; must come before any entry.
    pub fn begin(&mut self, new: &NewSession) -> Result<()> {
        let key = insert_session(&self.tx, new)?;
        self.appender = Some(Appender::start(&self.tx, key)?);
        Ok(())
    }

    /// Continues an existing session (appending after its last entry). Fails
    /// if another process holds its writer claim.
    pub fn resume(&mut self, session_id: &str) -> Result<()> {
        let row: Option<(i64, Option<i64>)> = self
            .tx
            .query_row(
                "SELECT s.session_key, c.expires_ms FROM sessions s
                 LEFT JOIN writer_claims c ON c.session_key = s.session_key WHERE s.id = ?1",
                [session_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(sql("resuming a session"))?;
        let (key, claim_expiry) =
            row.ok_or_else(|| Error::SessionNotFound(session_id.to_owned()))?;
        if claim_expiry.is_some_and(|e| e > chrono::Utc::now().timestamp_millis()) {
            return Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: "another writer".to_owned(),
            });
        }
        self.appender = Some(Appender::start(&self.tx, key)?);
        Ok(())
    }

    /// Whether [`SessionWriter::begin`] or [`SessionWriter::resume`] has run.
    pub fn has_begun(&self) -> bool {
        self.appender.is_some()
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

    /// Appends one entry to the new session.
    pub fn push(&mut self, entry: &Entry) -> Result<()> {
        let appender = self.appender.as_mut().ok_or_else(|| {
            Error::Unknown("a session's entries were written before the session".into())
        })?;
        appender.push(&self.tx, entry)
    }
}

/// One session of an archive.
#[derive(Debug)]
pub struct SqliteStorage {
    archive: Archive,
    session_key: i64,
    id: String,
    claim: Option<WriterClaim>,
    last_read: Cell<ReadCost>,
}

impl SqliteStorage {
    /// The archive this session lives in.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Takes the writer claim now (it is otherwise taken at the first write).
    pub fn claim_writer(&mut self) -> Result<()> {
        if self.claim.is_none() {
            self.claim = Some(WriterClaim::acquire(
                self.archive.pool(),
                self.session_key,
                &self.id,
            )?);
        }
        Ok(())
    }

    /// Whether this handle holds the writer claim.
    pub fn is_writer(&self) -> bool {
        self.claim.is_some()
    }

    /// What the last path read cost (statements, rows, VM steps).
    pub fn last_read_cost(&self) -> ReadCost {
        self.last_read.get()
    }

    /// The exact header line, for export.
    pub fn header_json(&self) -> Result<String> {
        let conn = self.archive.conn()?;
        conn.query_row(
            "SELECT header FROM sessions WHERE session_key = ?1",
            [self.session_key],
            |r| r.get(0),
        )
        .map_err(sql("reading the session header"))
    }

    /// Visits every entry's exact text in log order without holding them all.
    pub fn for_each_entry_json(&self, mut visit: impl FnMut(&str) -> Result<()>) -> Result<()> {
        let conn = self.archive.conn()?;
        let mut st = conn
            .prepare_cached("SELECT json FROM entries WHERE session_key = ?1 ORDER BY seq")
            .map_err(sql("reading entries"))?;
        let mut rows = st
            .query([self.session_key])
            .map_err(sql("reading entries"))?;
        while let Some(row) = rows.next().map_err(sql("reading entries"))? {
            let json = row
                .get_ref(0)
                .map_err(sql("reading entries"))?
                .as_str()
                .map_err(|e| sql("reading entries")(e.into()))?;
            visit(json)?;
        }
        Ok(())
    }

    fn write(&mut self, entries: &[Entry]) -> Result<()> {
        self.claim_writer()?;
        let mut conn = self.archive.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("starting an append"))?;
        if let Some(claim) = &self.claim {
            claim.check(&tx, &self.id)?;
        }
        let mut appender = Appender::start(&tx, self.session_key)?;
        for e in entries {
            appender.push(&tx, e)?;
        }
        appender.finish(&tx)?;
        tx.commit().map_err(sql("committing an append"))
    }

    fn query_entries(
        &self,
        sql_text: &'static str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<Entry>> {
        let conn = self.archive.conn()?;
        let mut st = conn
            .prepare_cached(sql_text)
            .map_err(sql("reading entries"))?;
        let rows = st
            .query_map(params, |r| r.get::<_, String>(0))
            .map_err(sql("reading entries"))?;
        let mut out = Vec::new();
        for json in rows {
            out.push(branch_cache::stored_entry(
                &json.map_err(sql("reading entries"))?,
            )?);
        }
        Ok(out)
    }

    fn facts(&self) -> Result<SessionFacts> {
        session_facts(&*self.archive.conn()?, self.session_key)
    }
}

impl SessionStorage for SqliteStorage {
    fn metadata(&self) -> Result<SessionMetadata> {
        let conn = self.archive.conn()?;
        conn.prepare_cached("SELECT id, created_at, cwd, parent_session, metadata FROM sessions WHERE session_key = ?1")
            .and_then(|mut s| {
                s.query_row([self.session_key], |r| {
                    Ok(SessionMetadata {
                        id: r.get(0)?,
                        created_at: r.get(1)?,
                        cwd: Some(r.get(2)?),
                        path: None,
                        parent_session: r.get(3)?,
                        metadata: r.get(4)?,
                    })
                })
            })
            .map_err(sql("reading session metadata"))
    }

    fn stored_leaf_id(&self) -> Result<Option<String>> {
        Ok(self.facts()?.leaf_id)
    }

    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        self.write(std::slice::from_ref(&entry))
    }

    fn append_entries(&mut self, entries: &[Entry]) -> Result<()> {
        self.write(entries)
    }

    fn entry(&self, id: &str) -> Result<Option<Entry>> {
        let conn = self.archive.conn()?;
        let json: Option<String> = conn
            .prepare_cached("SELECT json FROM entries WHERE session_key = ?1 AND id = ?2")
            .and_then(|mut s| {
                s.query_row(params![self.session_key, id], |r| r.get(0))
                    .optional()
            })
            .map_err(sql("reading an entry"))?;
        json.map(|j| branch_cache::stored_entry(&j)).transpose()
    }

    fn contains_entry(&self, id: &str) -> Result<bool> {
        Ok(branch_cache::key_of(&*self.archive.conn()?, self.session_key, id)?.is_some())
    }

    fn find_entries(&self, entry_type: &str) -> Result<Vec<Entry>> {
        self.query_entries(
            "SELECT json FROM entries WHERE session_key = ?1 AND type = ?2 ORDER BY seq",
            params![self.session_key, entry_type],
        )
    }

    fn label(&self, id: &str) -> Result<Option<String>> {
        let conn = self.archive.conn()?;
        conn.prepare_cached("SELECT label FROM labels WHERE session_key = ?1 AND target_id = ?2")
            .and_then(|mut s| {
                s.query_row(params![self.session_key, id], |r| r.get(0))
                    .optional()
            })
            .map_err(sql("reading a label"))
    }

    fn session_name(&self) -> Result<Option<String>> {
        Ok(self.facts()?.name)
    }

    fn session_stats(&self) -> Result<SessionStats> {
        self.facts()?.stats.result()
    }

    fn entries(&self, after: usize, limit: Option<usize>) -> Result<Vec<Entry>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        self.query_entries(
            "SELECT json FROM entries WHERE session_key = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
            params![self.session_key, after, limit],
        )
    }

    fn entry_count(&self) -> Result<usize> {
        Ok(usize::try_from(self.facts()?.entry_count).unwrap_or(0))
    }

    fn path_to_root_or_compaction(&self, id: Option<&str>) -> Result<Vec<Entry>> {
        let Some(id) = id else {
            return Ok(Vec::new());
        };
        let conn = self.archive.conn()?;
        let mut cost = ReadCost::default();
        let path = branch_cache::path(&conn, self.session_key, id, &mut cost);
        self.last_read.set(cost);
        path
    }
}
