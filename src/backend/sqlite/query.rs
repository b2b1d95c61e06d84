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

impl Archive {
    /// Runs one read-only SQL statement with the entry functions
    /// registered; a statement that would write is refused by SQLite.
    pub fn query_read_only(&self, statement: &str) -> Result<QueryResult> {
        let conn = read_only(self.path(), Arc::new(Codec::default()))
            .map_err(sql("opening the archive read-only"))?;
        let mut st = conn
            .prepare(statement)
            .map_err(|e| Error::Usage(format!("SQL: {e}")))?;
        let columns: Vec<String> = st.column_names().map(str::to_owned).collect();
        let n = columns.len();
        let mut rows = Vec::new();
        let mut found = st
            .query([])
            .map_err(|e| Error::Usage(format!("SQL: {e}")))?;
        while let Some(row) = found
            .next()
            .map_err(|e| Error::Usage(format!("SQL: {e}")))?
        {
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                values.push(
                    row.get::<_, Value>(i)
                        .map_err(sql("reading a query's row"))?,
                );
            }
            rows.push(values);
        }
        Ok(QueryResult { columns, rows })
    }
}
