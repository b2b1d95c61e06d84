//! Repositories of many sessions (spec §9): create, open, list, delete, fork.

pub mod jsonl;
pub mod memory;
pub mod sqlite;

use crate::entry::Entry;
use crate::error::Result;
use crate::json::JsonText;
use crate::rules::{fork_start, ForkPosition};
use crate::session::Session;
use crate::storage::{SessionMetadata, SessionStorage};

/// What a new session is created with.
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// The session id; a fresh UUIDv7 when absent.
    pub id: Option<String>,
    /// The working directory the session belongs to.
    pub cwd: String,
    /// The session it was forked from.
    pub parent_session: Option<String>,
    /// Application metadata (a JSON object).
    pub metadata: Option<JsonText>,
}

/// How to fork a session (spec §9).
#[derive(Debug, Clone, Default)]
pub struct ForkOptions {
    /// The entry to fork at; none (or empty) copies the whole log.
    pub entry_id: Option<String>,
    /// Before (default) or at the entry.
    pub position: ForkPosition,
    /// The new session's id.
    pub id: Option<String>,
    /// The new session's working directory (the source's when absent).
    pub cwd: Option<String>,
    /// The new session's parent reference (the source when absent).
    pub parent_session: Option<String>,
    /// The new session's metadata (the source's when absent).
    pub metadata: Option<JsonText>,
}

/// Many sessions in one place.
pub trait SessionRepo {
    /// The storage of one session of this repository.
    type Storage: SessionStorage;

    /// Creates an empty session.
    fn create(&mut self, options: &CreateOptions) -> Result<Session<Self::Storage>>;

    /// Opens a listed session (`not_found` if it is gone).
    fn open(&self, session: &SessionMetadata) -> Result<Session<Self::Storage>>;

    /// The sessions, newest first; only those of `cwd` when given.
    fn list(&self, cwd: Option<&str>) -> Result<Vec<SessionMetadata>>;

    /// Deletes a session and everything in it.
    fn delete(&mut self, session: &SessionMetadata) -> Result<()>;

    /// Copies (part of) a session into a new one, keeping entry ids.
    fn fork(
        &mut self,
        source: &SessionMetadata,
        options: &ForkOptions,
    ) -> Result<Session<Self::Storage>>;
}

/// The entries a fork copies (pi's `getEntriesToFork`): the whole log, or the
/// path to the target (`at`) or to its parent (`before`, user messages only).
pub fn entries_to_fork<S: SessionStorage + ?Sized>(
    storage: &S,
    entry_id: Option<&str>,
    position: ForkPosition,
) -> Result<Vec<Entry>> {
    match fork_start(entry_id, position, |id| storage.entry(id))? {
        None => storage.entries(0, None),
        Some(start) => storage.path_to_root_or_compaction(start.as_deref()),
    }
}
