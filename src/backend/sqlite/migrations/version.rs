//! The schema version an archive stores (SQLite's `user_version`).

use crate::error::{Error, Result};
use rusqlite::Connection;

/// The schema version stored in the database.
pub fn current_version(conn: &Connection) -> Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(|e| Error::sqlite("reading the schema version", e))
}
