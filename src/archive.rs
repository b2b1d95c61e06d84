//! An archive of many sessions, whatever stores it: [`SessionArchive`] is
//! what the SQLite archive ([`Archive`]) and the team archive on PostgreSQL
//! ([`PgArchive`]) both answer — open a session's storage, create and write
//! sessions, list and count them, resolve an id prefix, search, sum, delete —
//! so that the CLI and the repositories hold one `dyn SessionArchive` (or
//! are generic over it) instead of matching on the kind.
//!
//! The trait sits above the stores and below the session and repository
//! layers. It is object-safe: a session's storage comes back boxed
//! ([`SessionArchive::open_storage`]). Code that wants the concrete storage
//! (the benches, [`crate::repo::archive::ArchiveRepo`] over one kind) goes through
//! [`TypedArchive`] instead, or calls the archives' own methods, so reading
//! a session never pays for dynamic dispatch where it did not before.
//!
//! A directory of pi JSONL files is not a `SessionArchive`: it has no index
//! to search, a listing's statistics and the totals would read every file
//! whole, and `create`/`write` would be the JSONL repository's
//! ([`crate::repo::jsonl::JsonlRepo`]) job; a `SESSION` argument naming a
//! file is opened as a [`crate::backend::jsonl::JsonlStorage`] instead.
//!
//! # Writer claims
//! The one-writer rule is each storage's: [`SessionArchive::open_storage`]
//! opens a session for reading, and its storage takes the writer claim at
//! its first write; [`SessionArchive::create_storage`] hands the new session
//! back with the claim taken; dropping the storage releases it.
//! [`SessionArchive::delete_session`] refuses a session a live writer holds.

use crate::backend::postgres::PgArchive;
use crate::backend::sqlite::Archive;
use crate::convert::{export_storage_to_file, ExportOutcome};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::listing::{
    ArchiveTotals, ListQuery, NewSession, SearchFilter, SearchHit, SessionSummary,
};
use crate::storage::{SessionMetadata, SessionStorage};
use crate::usage::{UsageQuery, UsageRow};
use std::path::PathBuf;
use std::sync::Arc;

/// One session's storage as an archive hands it out: boxed, and movable to
/// another thread (the Node binding's jobs run on libuv's pool).
pub type BoxedStorage = Box<dyn SessionStorage + Send>;

/// Writes one whole session inside the transaction of
/// [`SessionArchive::write_session`]: what a fork (or an import) needs of
/// either archive's writer.
pub trait SessionWrite {
    /// Creates the session row; comes before any of its entries
    /// (`session_exists` when the id is taken).
    fn begin(&mut self, new: &NewSession) -> Result<()>;

    /// Appends one entry to the session begun.
    fn push(&mut self, entry: &Entry) -> Result<()>;

    /// Creates the session row of a large write (a fork) that may commit
    /// in several short transactions, so that writers of other sessions
    /// wait at most one of them: the session stays invisible until
    /// [`SessionWrite::publish`], and is removed by the next open if the
    /// writer dies first (on PostgreSQL too: one long transaction would hold
    /// back VACUUM and its row locks; see [`crate::backend::pending`]).
    fn begin_batched(&mut self, new: &NewSession) -> Result<()>;

    /// Makes a session begun with [`SessionWrite::begin_batched`] visible
    /// with its last transaction; called after its last entry.
    fn publish(&mut self) -> Result<()>;

    /// Runs `read` (a batched write's next input, such as a fork's next
    /// chunk of its source) with no batch holding the write lock: an open
    /// batch commits first and the next begins once `read` is done, so
    /// that writers of other sessions do not wait for the read as well.
    fn read_between_batches(&mut self, read: &mut dyn FnMut() -> Result<()>) -> Result<()>;
}

/// An archive of many sessions (see the module docs).
pub trait SessionArchive: std::fmt::Debug + Send + Sync {
    /// Opens session `id` (an exact id) for reading; its storage takes the
    /// writer claim at its first write. `not_found` if there is none.
    fn open_storage(&self, id: &str) -> Result<BoxedStorage>;

    /// Creates an empty session and returns it open for writing, its writer
    /// claim taken (`session_exists` when the id is taken).
    fn create_storage(&self, new: &NewSession) -> Result<BoxedStorage>;

    /// Writes one session inside one transaction, fed by `fill` through a
    /// [`SessionWrite`] (begun once, then its entries): all of it commits,
    /// or nothing (`fill`'s error is what the caller hears). `fill` is
    /// called once. (The archives' own `write_session` is generic over what
    /// `fill` returns, and the SQLite one also writes several sessions, or a
    /// staged import: import uses that.)
    fn write_session(
        &self,
        fill: &mut dyn FnMut(&mut dyn SessionWrite) -> Result<()>,
    ) -> Result<()>;

    /// Whether a session with this exact id exists.
    fn has_session(&self, id: &str) -> Result<bool>;

    /// The ids of sessions whose id starts with `prefix`, in id order, at
    /// most `limit` of them.
    fn sessions_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>>;

    /// Sessions newest first, filtered and paged, without reading entries.
    fn list(&self, q: &ListQuery) -> Result<Vec<SessionSummary>>;

    /// How many sessions [`SessionArchive::list`] would list without a page.
    fn count(&self, q: &ListQuery) -> Result<u64>;

    /// Full-text search over message text, best first: `limit` hits after
    /// skipping `offset`. Words match in any order; `"a b"` is a phrase;
    /// `foo*` matches words starting with `foo`.
    fn search_page(
        &self,
        query: &str,
        filter: &SearchFilter<'_>,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<SearchHit>>;

    /// Totals over every session, from the maintained session rows.
    fn totals(&self) -> Result<ArchiveTotals>;

    /// Usage by session, UTC day and model, from the maintained usage facts
    /// (each entry counted once across forks; see [`crate::usage`]).
    fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>>;

    /// Deletes a session and everything derived from it, in one
    /// transaction; refuses a session a live writer holds.
    fn delete_session(&self, id: &str) -> Result<()>;

    /// Removes session `id`'s writer claim and says whose it was (`None`:
    /// none); refuses a running holder on this host unless `force`.
    fn clear_claim(&self, id: &str, force: bool) -> Result<Option<crate::backend::claim::Cleared>>;

    /// Writes session `id` as a pi JSONL file at the path `place` gives for
    /// its metadata, by export's never-destroy rules
    /// ([`crate::convert::export_storage_to_file`]); `progress` hears the
    /// entries written. Each archive keeps the session's exact header line,
    /// which a [`SessionStorage`] does not hand out: hence a method here.
    fn export_session(
        &self,
        id: &str,
        place: &dyn Fn(&SessionMetadata) -> Result<PathBuf>,
        force: bool,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(PathBuf, ExportOutcome)>;

    /// The full id of the session `arg` names: its id, or a unique prefix of
    /// one. No match is `not_found`; several are a `usage` error listing up
    /// to ten candidates, as git does.
    fn resolve_session(&self, arg: &str) -> Result<String> {
        if arg.is_empty() {
            return Err(Error::SessionNotFound("(empty session id)".into()));
        }
        if self.has_session(arg)? {
            return Ok(arg.to_owned());
        }
        const SHOWN: usize = 10;
        let found = self.sessions_with_prefix(arg, SHOWN + 1)?;
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(Error::SessionNotFound(arg.to_owned())),
            _ => {
                let more = if found.len() > SHOWN { "\n  …" } else { "" };
                Err(Error::Usage(format!(
                    "session prefix {arg:?} is ambiguous; give more characters. Candidates:\n  {}{more}",
                    found[..found.len().min(SHOWN)].join("\n  ")
                )))
            }
        }
    }
}

/// An archive whose sessions' storage type is known: what
/// [`crate::repo::archive::ArchiveRepo`] is generic over, so that a repository over
/// one kind of archive hands out that kind's storage, statically dispatched
/// (`Arc<dyn SessionArchive>` is one too, handing out [`BoxedStorage`]).
pub trait TypedArchive {
    /// One session's storage.
    type Storage: SessionStorage;

    /// The archive's other operations.
    fn as_archive(&self) -> &dyn SessionArchive;

    /// [`SessionArchive::open_storage`], unboxed.
    fn session(&self, id: &str) -> Result<Self::Storage>;

    /// [`SessionArchive::create_storage`], unboxed.
    fn new_session(&self, new: &NewSession) -> Result<Self::Storage>;
}

impl TypedArchive for Arc<dyn SessionArchive> {
    type Storage = BoxedStorage;

    fn as_archive(&self) -> &dyn SessionArchive {
        &**self
    }

    fn session(&self, id: &str) -> Result<BoxedStorage> {
        self.open_storage(id)
    }

    fn new_session(&self, new: &NewSession) -> Result<BoxedStorage> {
        self.create_storage(new)
    }
}

/// Implements [`SessionWrite`], [`SessionArchive`] and [`TypedArchive`] for
/// an archive type by calling its own methods, which the SQLite and the
/// PostgreSQL archive name and shape alike: written once here rather than
/// once per archive. The archives keep their own methods (generic
/// `write_session`, concrete storage), which their other callers use.
macro_rules! session_archive {
    ($archive:ty, $storage:ty, $writer:ty) => {
        impl SessionWrite for $writer {
            fn begin(&mut self, new: &NewSession) -> Result<()> {
                <$writer>::begin(self, new)
            }

            fn push(&mut self, entry: &Entry) -> Result<()> {
                <$writer>::push(self, entry)
            }

            fn begin_batched(&mut self, new: &NewSession) -> Result<()> {
                <$writer>::begin_batched(self, new)
            }

            fn publish(&mut self) -> Result<()> {
                <$writer>::publish(self)
            }

            fn read_between_batches(&mut self, read: &mut dyn FnMut() -> Result<()>) -> Result<()> {
                <$writer>::read_between_batches(self, read)
            }
        }

        impl SessionArchive for $archive {
            fn open_storage(&self, id: &str) -> Result<BoxedStorage> {
                Ok(Box::new(<$archive>::open_session(self, id)?))
            }

            fn create_storage(&self, new: &NewSession) -> Result<BoxedStorage> {
                Ok(Box::new(<$archive>::create_session(self, new)?))
            }

            fn write_session(
                &self,
                fill: &mut dyn FnMut(&mut dyn SessionWrite) -> Result<()>,
            ) -> Result<()> {
                <$archive>::write_session(self, |w| fill(w))
            }

            fn has_session(&self, id: &str) -> Result<bool> {
                <$archive>::has_session(self, id)
            }

            fn sessions_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
                <$archive>::sessions_with_prefix(self, prefix, limit)
            }

            fn list(&self, q: &ListQuery) -> Result<Vec<SessionSummary>> {
                <$archive>::list(self, q)
            }

            fn count(&self, q: &ListQuery) -> Result<u64> {
                <$archive>::count(self, q)
            }

            fn search_page(
                &self,
                query: &str,
                filter: &SearchFilter<'_>,
                limit: usize,
                offset: usize,
            ) -> Result<Vec<SearchHit>> {
                <$archive>::search_page(self, query, filter, limit, offset)
            }

            fn totals(&self) -> Result<ArchiveTotals> {
                <$archive>::totals(self)
            }

            fn usage(&self, q: &UsageQuery) -> Result<Vec<UsageRow>> {
                <$archive>::usage(self, q)
            }

            fn delete_session(&self, id: &str) -> Result<()> {
                <$archive>::delete_session(self, id)
            }

            fn clear_claim(
                &self,
                id: &str,
                force: bool,
            ) -> Result<Option<crate::backend::claim::Cleared>> {
                <$archive>::clear_claim(self, id, force)
            }

            fn export_session(
                &self,
                id: &str,
                place: &dyn Fn(&SessionMetadata) -> Result<PathBuf>,
                force: bool,
                progress: &mut dyn FnMut(u64),
            ) -> Result<(PathBuf, ExportOutcome)> {
                let s = <$archive>::open_session(self, id)?;
                let path = place(&s.metadata()?)?;
                let outcome =
                    export_storage_to_file(&s.header_json()?, &s, &path, force, progress)?;
                Ok((path, outcome))
            }
        }

        impl TypedArchive for $archive {
            type Storage = $storage;

            fn as_archive(&self) -> &dyn SessionArchive {
                self
            }

            fn session(&self, id: &str) -> Result<$storage> {
                <$archive>::open_session(self, id)
            }

            fn new_session(&self, new: &NewSession) -> Result<$storage> {
                <$archive>::create_session(self, new)
            }
        }
    };
}

session_archive!(
    Archive,
    crate::backend::sqlite::SqliteStorage,
    crate::backend::sqlite::SessionWriter<'_>
);
session_archive!(
    PgArchive,
    crate::backend::postgres::PgStorage,
    crate::backend::postgres::SessionWriter<'_>
);
