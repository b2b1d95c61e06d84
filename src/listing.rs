//! What an archive stores and answers about many sessions, whatever stores
//! it: a new session's row, the rows of a listing, the totals, the query of a listing and a search's filter and
//! hits. (The SQLite and PostgreSQL archives return the same types.)

use crate::contract::Contract;
use crate::json::JsString;
use crate::rules::SessionStats;
use crate::storage::SessionMetadata;

/// One row of a session listing.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    /// Metadata.
    pub metadata: SessionMetadata,
    /// Session name.
    pub name: Option<JsString>,
    /// Entries in the log.
    pub entry_count: i64,
    /// Statistics.
    pub stats: SessionStats,
    /// Whose rules the session follows.
    pub contract: Contract,
    /// The newest entry's timestamp (Unix ms); `None` before any entry with one.
    pub last_active_ms: Option<i64>,
}

impl SessionSummary {
    /// When the session was last active: its newest entry's time, else its creation.
    pub fn last_active_or_created(&self) -> Option<i64> {
        self.last_active_ms
            .or_else(|| crate::entry::timestamp_millis(&self.metadata.created_at))
    }
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
    /// Only this working directory and the directories below it.
    pub cwd_under: Option<String>,
    /// Only sessions created at or after this time (Unix ms).
    pub since_ms: Option<i64>,
    /// Only sessions whose name contains this text.
    pub name_contains: Option<String>,
    /// Page size (all when `None`).
    pub limit: Option<usize>,
    /// Rows to skip.
    pub offset: usize,
    /// Newest activity first (the newest entry's time: `ls`, `browse`)
    /// instead of newest created first (the SDK contract's `list` order).
    pub by_activity: bool,
}

impl ListQuery {
    /// The `ORDER BY` terms of a listing in this query's order (SQL common
    /// to SQLite and PostgreSQL, `nulls` the store's spelling for "empty last").
    pub fn order_by(&self, nulls: &str) -> String {
        if self.by_activity {
            format!(
                "coalesce(last_active_ms, created_ms) DESC{nulls}, created_ms DESC{nulls}, session_key DESC"
            )
        } else {
            format!("created_ms DESC{nulls}, session_key DESC")
        }
    }
}

impl ListQuery {
    /// The values a listing filters on: the cwd, the directory the cwd is (under),
    /// the earliest creation (ms), and the name fragment as it appears inside the
    /// name's stored JSON literal.
    pub fn filter_values(&self) -> (Option<&str>, Option<&str>, Option<i64>, Option<String>) {
        // Names are stored as JSON literals: look for the query as it is escaped there.
        let name_fragment = self.name_contains.as_deref().map(|n| {
            let literal = JsString::new(n);
            literal.json()[1..literal.json().len() - 1].to_owned()
        });
        // A directory given with a trailing separator means the same directory.
        let under = self
            .cwd_under
            .as_deref()
            .map(|d| d.strip_suffix('/').filter(|d| !d.is_empty()).unwrap_or(d));
        (self.cwd.as_deref(), under, self.since_ms, name_fragment)
    }
}

/// What a search is narrowed to.
#[derive(Debug, Clone, Copy, Default)]
pub struct SearchFilter<'a> {
    /// Only this session (full id).
    pub session: Option<&'a str>,
    /// Only sessions of this working directory.
    pub cwd: Option<&'a str>,
    /// Only messages of this role.
    pub role: Option<&'a str>,
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
    /// The session's name, if it has one.
    pub session_name: Option<JsString>,
    /// When the session was created.
    pub session_created_at: String,
    /// Text around the match, with the match in `[` `]`.
    pub snippet: String,
    /// BM25 rank (lower is better).
    pub rank: f64,
}

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
    /// Whose rules the session follows: the SDK's for a session created
    /// through the SDK contract, detected (or told) at import.
    pub contract: Contract,
}

impl NewSession {
    /// A session created through the SDK contract at `created_at` in `cwd`,
    /// with no parent and no metadata, and the pi header of those fields.
    pub fn sdk(id: &str, created_at: &str, cwd: &str) -> NewSession {
        NewSession {
            id: id.to_owned(),
            created_at: created_at.to_owned(),
            cwd: cwd.to_owned(),
            parent_session: None,
            metadata: None,
            header: crate::header::Header::new(id, created_at, cwd, None, None).json,
            contract: Contract::Sdk,
        }
    }
}
