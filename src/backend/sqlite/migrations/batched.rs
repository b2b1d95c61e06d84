//! Migration steps whose row rewrite runs in batches, so that no other
//! writer waits for more than one batch (issue 40.1: step 14 in one
//! transaction held the write lock 30–42 s on 200,000 entries).
//!
//! The first transaction runs the step's SQL, creates the durable cursor
//! (`sessiontree_migration`) and the log of entries appended meanwhile
//! (`sessiontree_migration_appended`, filled by a trigger on `entries`), and
//! does the first batch. Each later transaction reads the cursor, rewrites
//! rows until [`BATCHED_WRITE`] has passed (or the test's row bound), and
//! stores the cursor, then pauses [`GAP`] for waiting writers; the last one also drops the cursor, the log and its
//! triggers and sets `user_version`, so the schema a finished step leaves is
//! exactly the one-transaction step's. A process killed between batches
//! leaves the cursor: the next open goes on from it.
//!
//! **Who may write between batches.** A build of this version (or newer)
//! never uses the archive before its open has brought it to the latest
//! version: a second process that opens meanwhile takes the next batch from
//! the same cursor (in its own IMMEDIATE transaction) and returns when the
//! step is done; so no reader of this build sees the step half done. A build
//! of the version before the step that opened the archive earlier keeps
//! reading and writing between batches at its own version (it sees
//! `user_version` unchanged). That is why only a step whose rewrite writes
//! rows such a build never reads may be batched (step 14: new tables and a
//! new column), and why the rewrite must also cover what that build appends
//! meanwhile: the trigger logs every entry inserted after the step began and
//! the rewrite takes them last, in the order they were appended. A step
//! whose rewrite changes what older builds read (4: session facts; 5: the
//! branch cache; 6: entry encoding; 8, 10: the search index) stays one
//! transaction: between its batches an older build would read half-rewritten
//! rows as whole. An older build that migrates by itself (one transaction)
//! while this one is between batches fails on the step's SQL (its `ALTER
//! TABLE` finds the column there) and changes nothing.
//!
//! [`BATCHED_WRITE`]: crate::backend::sqlite::writer::BATCHED_WRITE

use super::version::current_version;
use crate::backend::pending;
use crate::backend::sqlite::error::sql;
use crate::error::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::path::Path;
use std::time::{Duration, Instant};

/// Where a batched rewrite stands; kept in `sessiontree_migration` between
/// transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The rewrite's phase, in its own numbering (0 first).
    pub phase: i64,
    /// The last key done in the phase (two keys of the rewrite's choosing).
    pub at: (i64, i64),
    /// Units done.
    pub done: u64,
    /// Units in all: counted when the step began, plus what was appended since.
    pub total: u64,
    /// Whether nothing is left to do (set by the rewrite's last chunk).
    pub finished: bool,
}

/// A step's rewrite in batches: each chunk starts where the cursor says, so
/// that whoever holds the cursor can go on (another process, or the next
/// open after a kill).
#[derive(Clone, Copy)]
pub struct Batched {
    /// Counts the units the rewrite will do, in the step's first transaction.
    pub count: fn(&Connection) -> Result<u64>,
    /// Does at most `limit` units from the cursor and advances it (setting
    /// `finished` when nothing is left); returns how many units it did.
    pub chunk: fn(&Connection, &mut Cursor, u64) -> Result<u64>,
}

/// Units a chunk does before the batch's clock is looked at again: about
/// 0.6 ms of step 14's CPU (9 µs an entry at 200,000 entries), so that on a
/// loaded machine a batch runs past [`BATCHED_WRITE`] by little.
const CHUNK: u64 = 64;

/// The pause between two batches: the fork's and the delete's
/// [`BATCHED_GAP`](crate::backend::sqlite::writer::BATCHED_GAP), one rule
/// for every batched write that another session's writer waits beside.
/// It was measured here first, at 200,000 entries with a writer polling
/// every millisecond: at load 11, 3 ms gaps gave wait p50 62 ms, max
/// 186 ms, and 20 ms gaps p50 11 ms, max 123 ms; at load 8, 20 ms gaps
/// p50 6–16 ms, max 90–95 ms (docs/durability.md). A migration runs once
/// per archive; the writers it delays do not.
const GAP: Duration = crate::backend::sqlite::writer::BATCHED_GAP;

/// The cursor and the log of entries appended while the step runs. Every
/// build's inserts fire the trigger (it is plain SQL in the schema), so an
/// older build's appends between batches are logged too.
const SCRATCH: &str = "
CREATE TABLE IF NOT EXISTS sessiontree_migration (
    version INTEGER PRIMARY KEY,
    phase   INTEGER NOT NULL,
    at_a    INTEGER NOT NULL,
    at_b    INTEGER NOT NULL,
    done    INTEGER NOT NULL,
    total   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS sessiontree_migration_appended (
    n         INTEGER PRIMARY KEY,
    entry_key INTEGER NOT NULL UNIQUE
);
CREATE TRIGGER IF NOT EXISTS sessiontree_migration_append AFTER INSERT ON entries
BEGIN
    INSERT OR IGNORE INTO sessiontree_migration_appended (entry_key) VALUES (new.entry_key);
END;
CREATE TRIGGER IF NOT EXISTS sessiontree_migration_remove AFTER DELETE ON entries
BEGIN
    DELETE FROM sessiontree_migration_appended WHERE entry_key = old.entry_key;
END;
";

/// Removes what [`SCRATCH`] made.
const DROP_SCRATCH: &str = "
DROP TRIGGER IF EXISTS sessiontree_migration_append;
DROP TRIGGER IF EXISTS sessiontree_migration_remove;
DROP TABLE IF EXISTS sessiontree_migration_appended;
DROP TABLE IF EXISTS sessiontree_migration;
";

/// The rows the next chunk of a batch that has done `rows` may do: what is
/// left of the test's batch bound when one is set (so that a small archive
/// takes several batches, each of at most that many rows), else [`CHUNK`].
fn chunk_rows(rows: u64) -> u64 {
    pending::test_batch().map_or(CHUNK, |(bound, _)| {
        bound.saturating_sub(rows).clamp(1, CHUNK)
    })
}

/// Brings the database to `version` by step `sql_text` + `rewrite` in
/// batches, going on from a cursor a killed or concurrent run left.
/// `progress` hears (done, total) after each batch's commit (outside the
/// transaction).
pub(super) fn run(
    conn: &mut Connection,
    path: &Path,
    sql_text: &str,
    rewrite: &Batched,
    version: i64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let ctx = || format!("applying schema migration {version} to {}", path.display());
    loop {
        crate::backend::sqlite::connection::refuse_if_damaged(path)?;
        // Waiting behind another long operation (another process's run of
        // this step, an import), it announces itself like any writer.
        let tx = crate::backend::sqlite::turnstile::begin_announced(path, || {
            conn.transaction_with_behavior(TransactionBehavior::Immediate)
        })
        .map_err(|e| Error::sqlite(ctx(), e))?;
        // Another process may have finished the step while we waited.
        if current_version(&tx)? >= version {
            return Ok(());
        }
        let started = Instant::now();
        let mut cursor = match read_cursor(&tx, version)? {
            Some(cursor) => cursor,
            None => {
                tx.execute_batch(sql_text)
                    .map_err(|e| Error::sqlite(ctx(), e))?;
                begin(&tx, rewrite, version)?
            }
        };
        let mut rows = 0;
        while !cursor.finished && !pending::batch_due(started.elapsed(), rows) {
            rows += (rewrite.chunk)(&tx, &mut cursor, chunk_rows(rows))?.max(1);
        }
        if cursor.finished {
            tx.execute_batch(DROP_SCRATCH)
                .and_then(|()| tx.pragma_update(None, "user_version", version))
                .map_err(|e| Error::sqlite(ctx(), e))?;
        } else {
            save_cursor(&tx, version, &cursor)?;
        }
        tx.commit().map_err(|e| Error::sqlite(ctx(), e))?;
        progress(cursor.done, cursor.total.max(cursor.done));
        // After the last batch too, as compact's phases do: the next step's
        // transaction would follow at once, and a writer waiting during this
        // batch would wait for both.
        crate::backend::sqlite::turnstile::between_batches(path, GAP);
        if cursor.finished {
            return Ok(());
        }
    }
}

/// The whole rewrite in the caller's transaction (a new archive's later
/// steps, and the tests that replay every step in one): the same chunks in
/// the same order as [`run`], so both leave the same rows.
pub(super) fn run_whole(
    tx: &Connection,
    rewrite: &Batched,
    version: i64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let mut cursor = begin(tx, rewrite, version)?;
    while !cursor.finished {
        (rewrite.chunk)(tx, &mut cursor, CHUNK)?;
        progress(cursor.done, cursor.total.max(cursor.done));
    }
    tx.execute_batch(DROP_SCRATCH)
        .map_err(sql("finishing a migration"))
}

/// Creates the cursor and the log of appended entries, counts the work.
fn begin(tx: &Connection, rewrite: &Batched, version: i64) -> Result<Cursor> {
    tx.execute_batch(SCRATCH)
        .map_err(sql("starting a batched migration"))?;
    let cursor = Cursor {
        phase: 0,
        at: (i64::MIN, i64::MIN),
        done: 0,
        total: (rewrite.count)(tx)?,
        finished: false,
    };
    save_cursor(tx, version, &cursor)?;
    Ok(cursor)
}

/// The cursor a run of step `version` left, if any.
fn read_cursor(tx: &Connection, version: i64) -> Result<Option<Cursor>> {
    let context = "reading a migration's cursor";
    let exists: bool = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema
                             WHERE type = 'table' AND name = 'sessiontree_migration')",
            [],
            |r| r.get(0),
        )
        .map_err(sql(context))?;
    if !exists {
        return Ok(None);
    }
    tx.query_row(
        "SELECT phase, at_a, at_b, done, total FROM sessiontree_migration WHERE version = ?1",
        [version],
        |r| {
            Ok(Cursor {
                phase: r.get(0)?,
                at: (r.get(1)?, r.get(2)?),
                done: r.get::<_, i64>(3)?.try_into().unwrap_or(0),
                total: r.get::<_, i64>(4)?.try_into().unwrap_or(0),
                finished: false,
            })
        },
    )
    .optional()
    .map_err(sql(context))
}

/// Stores `cursor` for step `version`.
fn save_cursor(tx: &Connection, version: i64, cursor: &Cursor) -> Result<()> {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT OR REPLACE INTO sessiontree_migration (version, phase, at_a, at_b, done, total)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            version,
            cursor.phase,
            cursor.at.0,
            cursor.at.1,
            count(cursor.done),
            count(cursor.total)
        ],
    )
    .map_err(sql("storing a migration's cursor"))?;
    Ok(())
}
