//! The archive's rows beside the `sessions` row's mapping (which is
//! `backend::session_rows`, for every store): how a column of a SQLite row
//! is read there, the rows a writer inserts (`sessions`, `imports`), and
//! the `roles` row a role name is stored as.

use crate::backend::session_rows::{Column, StoredRow};
use rusqlite::{Connection, OptionalExtension, Row};

pub(super) use crate::backend::session_rows::{
    facts_at, metadata_at, stats_at, FACTS_COLUMNS, METADATA_COLUMNS, STATS_COLUMNS,
};
pub use crate::listing::NewSession;

/// Inside a row callback, a failed read is the driver's error.
impl StoredRow for Row<'_> {
    type Error = rusqlite::Error;

    fn at<T: Column>(&self, i: usize) -> rusqlite::Result<T> {
        self.get(i)
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

/// The `roles` row that spells `name` (`entries.role_id`), if any.
pub(super) fn role_id(conn: &Connection, name: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT role_id FROM roles WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()
}
