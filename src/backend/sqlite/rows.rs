//! The one place the archive's rows map to the library's types: the
//! `sessions` row's column lists and the readers that go with them (so a new
//! column, or a reordering, is changed once, not in every query that reads a
//! session), the rows a writer inserts (`sessions`, `imports`), and the
//! `roles` row a role name is stored as.

use super::stored_js_string;
use crate::rules::{Replay, SessionStats, StatsAccumulator};
use crate::storage::SessionMetadata;
use rusqlite::{Connection, OptionalExtension, Row};

pub use crate::listing::NewSession;

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

/// The columns [`metadata_at`] reads, in its order.
pub(super) const METADATA_COLUMNS: &str = "id, created_at, cwd, parent_session, metadata";

/// The columns [`stats_at`] reads, in its order.
pub(super) const STATS_COLUMNS: &str =
    "message_count, cached_tokens, uncached_tokens, total_tokens, cost_total";

/// The columns [`facts_at`] reads, in its order.
pub(super) const FACTS_COLUMNS: &str = "leaf_id, name, entry_count, message_count, cached_tokens, \
     uncached_tokens, total_tokens, cost_total, broken_message_id";

/// The session's metadata from [`METADATA_COLUMNS`] starting at column `first`.
/// The `roles` row that spells `name` (`entries.role_id`), if any.
pub(super) fn role_id(conn: &Connection, name: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT role_id FROM roles WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()
}

pub(super) fn metadata_at(r: &Row, first: usize) -> rusqlite::Result<SessionMetadata> {
    Ok(SessionMetadata {
        id: r.get(first)?,
        created_at: r.get(first + 1)?,
        cwd: Some(r.get(first + 2)?),
        path: None,
        parent_session: r.get(first + 3)?,
        metadata: r.get(first + 4)?,
    })
}

/// Statistics from [`STATS_COLUMNS`] (or sums of them) starting at column `first`.
pub(super) fn stats_at(r: &Row, first: usize) -> rusqlite::Result<SessionStats> {
    Ok(SessionStats {
        message_count: r.get::<_, i64>(first)?.try_into().unwrap_or(0),
        cached_tokens: r.get(first + 1)?,
        uncached_tokens: r.get(first + 2)?,
        total_tokens: r.get(first + 3)?,
        cost_total: r.get(first + 4)?,
    })
}

/// A session's maintained facts (the replay of its log as stored) from
/// [`FACTS_COLUMNS`] starting at column `first`.
pub(super) fn facts_at(r: &Row, first: usize) -> rusqlite::Result<Replay> {
    Ok(Replay {
        leaf: r.get(first)?,
        name: r.get::<_, Option<String>>(first + 1)?.map(stored_js_string),
        entry_count: r.get::<_, i64>(first + 2)?.try_into().unwrap_or(0),
        stats: StatsAccumulator {
            stats: stats_at(r, first + 3)?,
            broken_message: r.get(first + 8)?,
        },
    })
}
