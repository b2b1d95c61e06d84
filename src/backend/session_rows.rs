//! The one place a `sessions` row maps to the library's types, for every
//! store with such a row (SQLite and PostgreSQL name its columns alike): the
//! column lists and the readers that go with them (so a new column, or a
//! reordering, is changed once, not in every query or store that reads a
//! session), and the values a writer stores back ([`FactValues`]). A store
//! supplies only how a column of its rows is read ([`StoredRow`]).

use crate::json::JsString;
use crate::rules::{Replay, SessionStats, StatsAccumulator};
use crate::storage::SessionMetadata;

/// The columns [`metadata_at`] reads, in its order.
pub const METADATA_COLUMNS: &str = "id, created_at, cwd, parent_session, metadata";

/// The columns [`stats_at`] reads, in its order.
pub const STATS_COLUMNS: &str =
    "message_count, cached_tokens, uncached_tokens, total_tokens, cost_total";

/// The columns [`facts_at`] reads (and [`FactValues`] holds), in its order.
pub const FACTS_COLUMNS: &str = "leaf_id, name, entry_count, message_count, cached_tokens, \
     uncached_tokens, total_tokens, cost_total, broken_message_id";

/// A value every store's driver reads from a column (text, integers, reals,
/// and their `NULL`able forms).
pub trait Column: rusqlite::types::FromSql + for<'a> ::postgres::types::FromSql<'a> {}

impl<T: rusqlite::types::FromSql + for<'a> ::postgres::types::FromSql<'a>> Column for T {}

/// A result row of a store, read by column index.
pub trait StoredRow {
    /// What a failed read returns (the driver's error where the caller is
    /// inside the driver's row callback).
    type Error;
    /// Column `i` as a `T`.
    fn at<T: Column>(&self, i: usize) -> Result<T, Self::Error>;
}

/// Labels and names are stored as their JSON literal (so lone surrogates
/// survive); text from before SQLite schema version 4 is read as plain text.
pub fn stored_js_string(text: String) -> JsString {
    JsString::from_json_literal(&text).unwrap_or_else(|| JsString::new(&text))
}

/// The session's metadata from [`METADATA_COLUMNS`] starting at column `first`.
pub fn metadata_at<R: StoredRow>(r: &R, first: usize) -> Result<SessionMetadata, R::Error> {
    Ok(SessionMetadata {
        id: r.at(first)?,
        created_at: r.at(first + 1)?,
        cwd: Some(r.at(first + 2)?),
        path: None,
        parent_session: r.at(first + 3)?,
        metadata: r.at(first + 4)?,
    })
}

/// The `contract` column at `i` (`app` or `sdk`; anything else reads as the
/// default, `app`, so that a row from a newer build still lists).
pub fn contract_at<R: StoredRow>(r: &R, i: usize) -> Result<crate::contract::Contract, R::Error> {
    Ok(r.at::<String>(i)?
        .parse::<crate::contract::Contract>()
        .unwrap_or_default())
}

/// Statistics from [`STATS_COLUMNS`] (or sums of them) starting at column `first`.
pub fn stats_at<R: StoredRow>(r: &R, first: usize) -> Result<SessionStats, R::Error> {
    Ok(SessionStats {
        message_count: r.at::<i64>(first)?.try_into().unwrap_or(0),
        cached_tokens: r.at(first + 1)?,
        uncached_tokens: r.at(first + 2)?,
        total_tokens: r.at(first + 3)?,
        cost_total: r.at(first + 4)?,
    })
}

/// A session's maintained facts (the replay of its log as stored) from
/// [`FACTS_COLUMNS`] starting at column `first`.
pub fn facts_at<R: StoredRow>(r: &R, first: usize) -> Result<Replay, R::Error> {
    Ok(Replay {
        leaf: r.at(first)?,
        name: r.at::<Option<String>>(first + 1)?.map(stored_js_string),
        entry_count: r.at::<i64>(first + 2)?.try_into().unwrap_or(0),
        stats: StatsAccumulator {
            stats: stats_at(r, first + 3)?,
            broken_message: r.at(first + 8)?,
        },
    })
}

/// A session's maintained facts as a writer stores them, in
/// [`FACTS_COLUMNS`] order: what [`facts_at`] reads back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FactValues<'a> {
    /// `leaf_id`.
    pub leaf: Option<&'a str>,
    /// `name`, as its JSON literal.
    pub name: Option<&'a str>,
    /// `entry_count`.
    pub entry_count: i64,
    /// `message_count`.
    pub message_count: i64,
    /// `cached_tokens`.
    pub cached_tokens: f64,
    /// `uncached_tokens`.
    pub uncached_tokens: f64,
    /// `total_tokens`.
    pub total_tokens: f64,
    /// `cost_total`.
    pub cost_total: f64,
    /// `broken_message_id`.
    pub broken_message: Option<&'a str>,
}

impl<'a> FactValues<'a> {
    /// The values of `facts` (counts past `i64::MAX` stored as `i64::MAX`).
    pub fn of(facts: &'a Replay) -> Self {
        let s = &facts.stats.stats;
        FactValues {
            leaf: facts.leaf.as_deref(),
            name: facts.name.as_ref().map(JsString::json),
            entry_count: i64::try_from(facts.entry_count).unwrap_or(i64::MAX),
            message_count: i64::try_from(s.message_count).unwrap_or(i64::MAX),
            cached_tokens: s.cached_tokens,
            uncached_tokens: s.uncached_tokens,
            total_tokens: s.total_tokens,
            cost_total: s.cost_total,
            broken_message: facts.stats.broken_message.as_deref(),
        }
    }
}

/// The `SessionStorage` methods both archives answer alike, written once:
/// the reads of the session's maintained facts (a `facts()` method
/// returning `leaf`, `name`, `stats` and `entry_count`), `entries` and
/// `find_entries` collected from the streamed `visit_entries` and
/// `visit_entries_of_type`, and appends through the store's own
/// `write(&mut self, &[Entry])` (one transaction, under the writer claim).
macro_rules! archive_fact_reads {
    () => {
        fn stored_leaf_id(&self) -> $crate::error::Result<Option<String>> {
            Ok(self.facts()?.leaf)
        }
        fn append_entry(&mut self, entry: $crate::entry::Entry) -> $crate::error::Result<()> {
            self.write(std::slice::from_ref(&entry))
        }
        fn append_entries(
            &mut self,
            entries: &[$crate::entry::Entry],
        ) -> $crate::error::Result<()> {
            self.write(entries)
        }
        fn session_name(&self) -> $crate::error::Result<Option<$crate::json::JsString>> {
            Ok(self.facts()?.name)
        }
        fn session_stats(&self) -> $crate::error::Result<$crate::rules::SessionStats> {
            self.facts()?.stats.result()
        }
        fn entry_count(&self) -> $crate::error::Result<usize> {
            Ok(usize::try_from(self.facts()?.entry_count).unwrap_or(0))
        }
        fn entries(
            &self,
            after: usize,
            limit: Option<usize>,
        ) -> $crate::error::Result<Vec<$crate::entry::Entry>> {
            $crate::storage::collect_entries(|sink| self.visit_entries(after, limit, sink))
        }
        fn find_entries(
            &self,
            entry_type: &str,
        ) -> $crate::error::Result<Vec<$crate::entry::Entry>> {
            $crate::storage::collect_entries(|sink| self.visit_entries_of_type(entry_type, sink))
        }
    };
}
pub(crate) use archive_fact_reads;

/// The accessors of an archive's session handle, alike in both archives
/// (fields `archive: $archive`, `session_key`, `id` and
/// `claim: Option<WriterClaim>`, where the archive is the claim's store).
macro_rules! archive_session_handle {
    ($archive:ty) => {
        /// The archive this session lives in.
        pub fn archive(&self) -> &$archive {
            &self.archive
        }

        /// The session id.
        pub fn id(&self) -> &str {
            &self.id
        }

        /// Takes the writer claim now (it is otherwise taken at the first write).
        pub fn claim_writer(&mut self) -> $crate::error::Result<()> {
            if self.claim.is_none() {
                self.claim = Some(WriterClaim::acquire(
                    &self.archive,
                    self.session_key,
                    &self.id,
                )?);
            }
            Ok(())
        }
    };
}
pub(crate) use archive_session_handle;
