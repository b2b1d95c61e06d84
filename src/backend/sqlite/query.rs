//! Read-only SQL over an archive for people (`sessiontree sql`): entry text
//! is stored compressed ([`super::codec`]), so the connection registers
//! functions that read it back.
//!
//! - `entry_text(entry_key)`: the exact text of an entry;
//! - `decode_entry(json)`: the text of a stored `entries.json` value.

use super::codec::Codec;
use super::error::sql;
use super::handle::Archive;
use crate::error::{Error, Result};
use rusqlite::functions::FunctionFlags;
use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};
use std::sync::Arc;

/// The answer to a query: column names and rows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryResult {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// Rows of values.
    pub rows: Vec<Vec<Value>>,
}

/// A read-only connection to `path` with the entry functions registered.
fn read_only(path: &std::path::Path, codec: Arc<Codec>) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.pragma_update(None, "query_only", true)?;
    // `ATTACH` may open only files that exist, and only to read: `sql` makes no file.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_ATTACH_CREATE,
        false,
    )?;
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_ATTACH_WRITE,
        false,
    )?;
    let deterministic = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let c = Arc::clone(&codec);
    conn.create_scalar_function("decode_entry", 1, deterministic, move |ctx| {
        let stored = ctx.get_raw(0);
        if matches!(stored, rusqlite::types::ValueRef::Null) {
            return Ok(None);
        }
        let conn = running_connection(ctx)?;
        c.decode(&conn, stored)
            .map(Some)
            .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))
    })?;
    conn.create_scalar_function("entry_text", 1, deterministic, move |ctx| {
        let key: Option<i64> = ctx.get(0)?;
        let Some(key) = key else { return Ok(None) };
        let conn = running_connection(ctx)?;
        // Decoded while the row's statement is live: a statement that reads
        // no table (`SELECT entry_text(7)`) holds no snapshot of its own.
        let decoded = conn
            .prepare_cached("SELECT json FROM entries WHERE entry_key = ?1")
            .and_then(|mut st| {
                rusqlite::OptionalExtension::optional(
                    st.query_row([key], |r| Ok(codec.decode(&conn, r.get_ref(0)?))),
                )
            })?;
        decoded
            .transpose()
            .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))
    })?;
    Ok(conn)
}

/// The connection running a function's statement. Dictionaries, blobs and
/// blocks are read through it, inside the statement's own read transaction:
/// a second connection would read a later snapshot, where a `compact`
/// committed meanwhile has moved the row's text to another block.
fn running_connection<'a>(
    ctx: &'a rusqlite::functions::Context<'_>,
) -> rusqlite::Result<rusqlite::functions::ConnectionRef<'a>> {
    // SAFETY: the handle is the connection running this function, open for
    // the whole call; the reference is used on this thread and dropped
    // before the function returns (rusqlite's only caveat is sending it to
    // another thread).
    #[allow(unsafe_code)]
    unsafe {
        ctx.get_connection()
    }
}

/// Bounds on one read-only query ([`Archive::query_read_only_each`]): a
/// query over a large archive (a cross join, every entry's text) must end,
/// and within a memory bound, whatever is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryLimits {
    /// Rows handed out at most; the query stops at the next one.
    pub max_rows: u64,
    /// Wall-clock time the query may run, rows handed out included.
    pub max_time: std::time::Duration,
    /// Bytes of text and blobs in all the rows handed out.
    pub max_bytes: u64,
    /// Bytes of one text or blob value.
    pub max_value_bytes: u64,
}

impl QueryLimits {
    /// No bound (for tests and library callers that bound the query themselves).
    pub fn unlimited() -> QueryLimits {
        QueryLimits {
            max_rows: u64::MAX,
            max_time: std::time::Duration::MAX,
            max_bytes: u64::MAX,
            max_value_bytes: u64::MAX,
        }
    }
}

/// How a streamed query ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryEnd {
    /// Every row was handed out.
    Complete {
        /// Rows handed out.
        rows: u64,
    },
    /// A limit stopped it; the rows handed out before stand.
    Stopped {
        /// Rows handed out.
        rows: u64,
        /// Which limit, and how to raise it (a sentence).
        why: String,
    },
}

/// Refuses a statement that could write anything: SQLite's own verdict
/// (`sqlite3_stmt_readonly`) catches `VACUUM INTO`, which on a read-only
/// connection still creates its target file before failing.
fn refuse_writing(st: &rusqlite::Statement<'_>) -> Result<()> {
    if st.readonly() {
        Ok(())
    } else {
        Err(Error::Usage(
            "SQL: only a statement that reads is run (this one would write: VACUUM, a PRAGMA that sets, an INSERT…)"
                .into(),
        ))
    }
}

/// Stops `conn`'s statement (`sqlite3_interrupt`) once `limit` has passed,
/// unless the returned sender is dropped first.
fn interrupt_after(
    conn: &Connection,
    limit: std::time::Duration,
) -> Option<std::sync::mpsc::Sender<()>> {
    if limit == std::time::Duration::MAX {
        return None;
    }
    let handle = conn.get_interrupt_handle();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
            handle.interrupt();
        }
    });
    Some(done)
}

impl Archive {
    /// Runs one read-only SQL statement with the entry functions
    /// registered; a statement that would write is refused by SQLite.
    pub fn query_read_only(&self, statement: &str) -> Result<QueryResult> {
        let mut result = QueryResult::default();
        self.query_read_only_each(
            statement,
            &QueryLimits::unlimited(),
            &mut |columns| {
                result.columns = columns.to_vec();
                Ok(())
            },
            &mut |row| {
                let values = row
                    .iter()
                    .map(|v| <Value as rusqlite::types::FromSql>::column_result(*v))
                    .collect::<std::result::Result<Vec<Value>, _>>()
                    .map_err(|e| sql("reading a query's row")(e.into()))?;
                result.rows.push(values);
                Ok(())
            },
        )?;
        Ok(result)
    }

    /// Runs one read-only SQL statement as [`Archive::query_read_only`]
    /// does, handing its column names to `columns` and then each row to
    /// `row` as SQLite makes it, so that memory holds one row whatever the
    /// result's size; `limits` stop it (the rows handed out stand, and the
    /// end says which limit). A statement that would write, or `ATTACH` a
    /// file that is not there, is refused before it runs: no file is made.
    pub fn query_read_only_each(
        &self,
        statement: &str,
        limits: &QueryLimits,
        columns: &mut dyn FnMut(&[String]) -> Result<()>,
        row: &mut dyn FnMut(&[rusqlite::types::ValueRef<'_>]) -> Result<()>,
    ) -> Result<QueryEnd> {
        let conn = read_only(self.path(), Arc::new(Codec::default()))
            .map_err(sql("opening the archive read-only"))?;
        let usage = |e: rusqlite::Error| Error::Usage(format!("SQL: {e}"));
        let mut st = conn.prepare(statement).map_err(usage)?;
        refuse_writing(&st)?;
        let names: Vec<String> = st.column_names().map(str::to_owned).collect();
        columns(&names)?;
        let n = names.len();
        let started = std::time::Instant::now();
        let _timer = interrupt_after(&conn, limits.max_time);
        let (mut rows, mut bytes) = (0u64, 0u64);
        let stopped = |rows: u64, why: String| Ok(QueryEnd::Stopped { rows, why });
        let mut found = st.query([]).map_err(usage)?;
        loop {
            let next = match found.next() {
                Ok(next) => next,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::OperationInterrupted =>
                {
                    return stopped(
                        rows,
                        format!(
                            "stopped after {:.1} s, the time limit (--max-seconds raises it)",
                            started.elapsed().as_secs_f64()
                        ),
                    );
                }
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::OutOfMemory =>
                {
                    return stopped(
                        rows,
                        "stopped: SQLite reached its memory limit (--max-memory-mb raises it)"
                            .into(),
                    );
                }
                Err(e) => return Err(usage(e)),
            };
            let Some(r) = next else { break };
            if rows >= limits.max_rows {
                return stopped(
                    rows,
                    format!(
                        "stopped at {rows} rows, the row limit (--max-rows raises it; LIMIT and OFFSET page through)"
                    ),
                );
            }
            let mut values = Vec::with_capacity(n);
            for (i, name) in names.iter().enumerate() {
                let v = r.get_ref(i).map_err(sql("reading a query's row"))?;
                let len = match v {
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => {
                        b.len() as u64
                    }
                    _ => 0,
                };
                if len > limits.max_value_bytes {
                    return stopped(
                        rows,
                        format!(
                            "stopped at row {}: column {:?} holds {len} bytes, over the limit of one value (--max-value-mb raises it; substr() shows a part)",
                            rows + 1,
                            name
                        ),
                    );
                }
                bytes += len;
                values.push(v);
            }
            if bytes > limits.max_bytes {
                return stopped(
                    rows,
                    format!(
                        "stopped at row {}: the rows hold more than {} bytes, the output limit (--max-output-mb raises it)",
                        rows + 1,
                        limits.max_bytes
                    ),
                );
            }
            row(&values)?;
            rows += 1;
        }
        Ok(QueryEnd::Complete { rows })
    }
}
