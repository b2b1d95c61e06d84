//! Repositories of many sessions (spec §9): create, open, list, delete, fork.

pub mod archive;
pub mod jsonl;
pub mod memory;
pub mod postgres;
pub mod sqlite;

use crate::entry::{new_session_id, timestamp_millis, Entry};
use crate::error::{Error, Result};
use crate::header::Header;
use crate::json::JsonText;
use crate::rules::{fork_start, ForkPosition};
use crate::session::Session;
use crate::storage::{SessionMetadata, SessionStorage};
use std::cmp::Reverse;

/// What a new session is created with.
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// The session id; a fresh UUIDv7 when absent.
    pub id: Option<String>,
    /// The working directory the session belongs to (non-empty).
    pub cwd: String,
    /// The session it was forked from.
    pub parent_session: Option<String>,
    /// Application metadata (a JSON object).
    pub metadata: Option<JsonText>,
}

impl CreateOptions {
    /// The new session's fields, as given (a fresh id when none is).
    pub fn fields(&self) -> Result<SessionFields> {
        SessionFields::new(
            self.id.as_deref(),
            self.cwd.clone(),
            self.parent_session.clone(),
            self.metadata.as_ref().map(|m| m.as_str().to_owned()),
        )
    }
}

/// What a new session is written with, resolved from its options: all of its
/// header but the creation time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFields {
    /// The session id.
    pub id: String,
    /// The working directory.
    pub cwd: String,
    /// The session it was forked from (`parentSession`).
    pub parent_session: Option<String>,
    /// Application metadata (a JSON object), exact text.
    pub metadata: Option<String>,
}

impl SessionFields {
    /// Refuses an empty id or cwd: pi's header needs both, so such a session
    /// could be neither read back from its file nor exported to one.
    fn new(
        id: Option<&str>,
        cwd: String,
        parent_session: Option<String>,
        metadata: Option<String>,
    ) -> Result<Self> {
        let id = id.map_or_else(new_session_id, str::to_owned);
        if id.is_empty() || cwd.is_empty() {
            return Err(Error::InvalidSession(format!(
                "a session needs a non-empty id and cwd (id {id:?}, cwd {cwd:?})"
            )));
        }
        Ok(SessionFields {
            id,
            cwd,
            parent_session,
            metadata,
        })
    }

    /// The row an archive writes for this session, created now, with a pi
    /// header (so export writes what pi would have).
    pub fn new_session(self) -> crate::listing::NewSession {
        let created_at = crate::entry::now_timestamp();
        let header = self.header(&created_at).json;
        crate::listing::NewSession {
            id: self.id,
            created_at,
            cwd: self.cwd,
            parent_session: self.parent_session,
            metadata: self.metadata,
            header,
            // Created through the SDK contract (a repository's create or fork).
            contract: crate::contract::Contract::Sdk,
        }
    }

    /// The pi header of the new session, created at `created_at`.
    pub fn header(&self, created_at: &str) -> Header {
        Header::new(
            &self.id,
            created_at,
            &self.cwd,
            self.parent_session.as_deref(),
            self.metadata.as_deref(),
        )
    }
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

impl ForkOptions {
    /// The fork's fields: each option where given, else a fresh id, the
    /// source's working directory and metadata, and as parent the source's
    /// file (what pi writes as `parentSession`) or, without one, its id.
    pub fn inherit(&self, source: &SessionMetadata) -> Result<SessionFields> {
        SessionFields::new(
            self.id.as_deref(),
            self.cwd
                .clone()
                .or_else(|| source.cwd.clone())
                .unwrap_or_default(),
            self.parent_session
                .clone()
                .or_else(|| source.path.clone())
                .or_else(|| Some(source.id.clone())),
            self.metadata
                .as_ref()
                .map(|m| m.as_str().to_owned())
                .or_else(|| source.metadata.clone()),
        )
    }
}

/// Many sessions in one place.
pub trait SessionRepo {
    /// The storage of one session of this repository.
    type Storage: SessionStorage;

    /// Creates an empty session (`invalid_session` for an empty id or cwd).
    fn create(&mut self, options: &CreateOptions) -> Result<Session<Self::Storage>>;

    /// Opens a listed session (`not_found` if it is gone).
    fn open(&self, session: &SessionMetadata) -> Result<Session<Self::Storage>>;

    /// The sessions, newest first; only those of `cwd` when given. Sessions
    /// created in the same millisecond list the later created first (JSONL,
    /// which does not record the order, the greater id: so for generated ids).
    fn list(&self, cwd: Option<&str>) -> Result<Vec<SessionMetadata>>;

    /// Deletes a session and everything in it.
    fn delete(&mut self, session: &SessionMetadata) -> Result<()>;

    /// Copies (part of) a session into a new one, keeping entry ids; what the
    /// options leave out is inherited (see [`ForkOptions::inherit`]).
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
    let mut entries = Vec::new();
    visit_entries_to_fork(storage, entry_id, position, &mut |e| {
        entries.push(e);
        Ok(())
    })?;
    Ok(entries)
}

/// [`entries_to_fork`], handed to `sink` one at a time: a whole-log fork
/// streams the log, a path fork the path ([`SessionStorage::visit_path`]),
/// in bounded memory however long either is.
pub fn visit_entries_to_fork<S: SessionStorage + ?Sized>(
    storage: &S,
    entry_id: Option<&str>,
    position: ForkPosition,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    match fork_start(entry_id, position, |id| storage.entry(id))? {
        None => storage.visit_entries(0, None, &mut |text| sink(Entry::from_checked_text(text))),
        Some(start) => storage.visit_path(start.as_deref(), sink),
    }
}

/// Orders listed sessions newest first as the SQLite archive's index does: by
/// creation time with unparsable times last, then by the paired tiebreak
/// descending, so that sessions created in the same millisecond list the same
/// way every time (the later one first where the tiebreak follows creation).
fn newest_first<K: Ord>(listed: Vec<(SessionMetadata, K)>) -> Vec<SessionMetadata> {
    let mut keyed: Vec<_> = listed
        .into_iter()
        .map(|(m, k)| (Reverse((timestamp_millis(&m.created_at), k)), m))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, m)| m).collect()
}
