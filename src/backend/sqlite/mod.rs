//! The SQLite backend: many sessions in one archive file, an append-only log
//! per session, and a materialized branch cache ([`branch_cache`]).
//!
//! # Layout
//! `mod.rs` only declares the parts and re-exports the API: [`Archive`]
//! (`handle.rs`) is the handle every part uses, `connection.rs` its
//! connections, `open.rs` opens one (settings, then migration), above the
//! parts the migrations use, so no part imports one that imports it back;
//! [`branch_cache`] is the statements that place entries in the tree and
//! read paths (the invariants and the placement are `backend::branch_cache`); `writer.rs` appends inside a transaction and maintains
//! every derived fact; [`codec`] keeps entry text compressed with blobs out
//! of line (its invariants are stated there) and `compact.rs` re-encodes an
//! archive; `archive.rs` is the many-session side (create, list,
//! delete, search, check, import records); `storage.rs` is one session as a
//! [`crate::SessionStorage`], keeping the paths it read (`backend::path_memo`); [`claim`] is the one-writer rule; [`migrate`]
//! applies `schema/*.sql`.
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

mod archive;
pub(crate) mod block;
pub(crate) mod branch_cache;
mod check;
mod check_marks;
mod checkpointer;
pub(crate) mod claim;
pub(crate) mod codec;
mod compact;
mod connection;
mod error;
pub(crate) mod fts;
mod fts_dead;
mod fts_rebuild;
mod handle;
mod lock_trace;
mod migrations;
mod open;
mod query;
mod reencode_guard;
mod rows;
mod skeleton;
mod storage;
mod stored;
mod turnstile;
mod writer;

pub use crate::listing::{ArchiveTotals, ListQuery, SearchFilter, SearchHit, SessionSummary};
pub use branch_cache::{CacheSize, ReadCost};
pub use check::{CheckCoverage, CheckMode, CheckRun};
pub use compact::{CompactOptions, CompactReport, StorageSplit};
pub use connection::{damage_marker, ConnectionManager, Pool};
pub use handle::{Archive, ArchiveConn, TRAIN_AFTER_APPENDING};
pub use migrations::{current_version, latest_version, MigrationProgress};
pub use query::{QueryEnd, QueryLimits, QueryResult};
pub use rows::{ImportRecord, NewSession};
pub use storage::SqliteStorage;
pub use turnstile::turn_path;
pub use writer::{SessionWriter, STAGED_GAP};

/// What the counting tests and the benchmarks measure of the engine's
/// internals (the path query's SQL, a path read's statements, the block
/// bounds). Not part of the API: it may change with any release.
#[doc(hidden)]
pub mod internals {
    pub use super::block::{place, BLOCK_BYTES, BLOCK_ENTRIES};
    pub use super::branch_cache::{
        path_rows_sql_only, PATH_QUERY, PATH_RANGES_QUERY, SEGMENT_HOLDING_QUERY,
    };
    pub use super::claim::host_name;
    pub use super::lock_trace::trace_to as trace_locks_to;
    pub use crate::backend::branch_rules::ANCESTRY_BLOCK;
}
