//! The repository over an archive of many sessions: the SQLite archive, the
//! team archive on PostgreSQL, or either behind `Arc<dyn SessionArchive>`.

use super::{visit_entries_to_fork, CreateOptions, ForkOptions, SessionRepo};
use crate::archive::TypedArchive;
use crate::error::Result;
use crate::listing::ListQuery;
use crate::session::Session;
use crate::storage::{SessionMetadata, SessionStorage};

/// Sessions of one archive.
#[derive(Debug, Clone)]
pub struct ArchiveRepo<A> {
    archive: A,
}

impl<A> ArchiveRepo<A> {
    /// The repository of an open archive.
    pub fn new(archive: A) -> Self {
        ArchiveRepo { archive }
    }

    /// The archive.
    pub fn archive(&self) -> &A {
        &self.archive
    }
}

/// The most entries a whole-log fork reads per statement ([`LogChunks`]).
const FORK_READ_CHUNK: usize = 4096;

/// The most bytes of entry text a whole-log fork holds at once: a chunk
/// ends at [`FORK_READ_CHUNK`] entries or once it holds this much (one
/// entry past it at most), whatever the entries' sizes (a pi session with
/// inline images mixes 1 KB messages with multi-MB ones).
const FORK_READ_BYTES: usize = 8 << 20;

/// A session's log as it stood when [`LogChunks::new`] counted it, read a
/// chunk of at most [`FORK_READ_CHUNK`] entries (and about
/// [`FORK_READ_BYTES`]) per statement, each chunk read whole before any of
/// it is written. One statement over the whole log held one read snapshot
/// for the whole fork: on SQLite no checkpoint could copy the log past it,
/// so the write-ahead log grew by every batch of the fork and of every
/// other writer meanwhile (8.6 GB for a 1,000,000-entry fork with a writer
/// appending every 3 ms), and on PostgreSQL it held `xmin` back. Handing
/// each entry on while its chunk was still being read kept a snapshot open
/// across the fork's own batch commits, so the log could be copied but
/// never start over (1.43 GB at 200,000 entries); with the chunk read
/// first, no snapshot is open while the fork writes. The log is
/// append-only, so the first `count` entries are the same in every
/// snapshot; fewer than asked means the source was deleted meanwhile.
struct LogChunks<'s, S: ?Sized> {
    storage: &'s S,
    id: &'s str,
    /// Entries in the log when it was counted: the fork's copy.
    count: usize,
    /// Entries read so far.
    done: usize,
}

impl<'s, S: SessionStorage + ?Sized> LogChunks<'s, S> {
    /// The log of session `id` (open as `storage`) as it stands now.
    fn new(storage: &'s S, id: &'s str) -> Result<Self> {
        Ok(LogChunks {
            storage,
            id,
            count: storage.entry_count()?,
            done: 0,
        })
    }

    /// Reads the next chunk into `chunk` (empty when given): left empty
    /// once the log is read.
    fn read_next(&mut self, chunk: &mut Vec<String>) -> Result<()> {
        if self.done >= self.count {
            return Ok(());
        }
        let want = FORK_READ_CHUNK.min(self.count - self.done);
        let mut bytes = 0usize;
        let read = self
            .storage
            .visit_entries_until(self.done, Some(want), &mut |text| {
                bytes += text.len();
                chunk.push(text);
                Ok(if bytes >= FORK_READ_BYTES {
                    std::ops::ControlFlow::Break(())
                } else {
                    std::ops::ControlFlow::Continue(())
                })
            })?;
        if read.is_continue() && chunk.len() < want {
            return Err(crate::error::Error::SessionNotFound(self.id.to_owned()));
        }
        self.done += chunk.len();
        Ok(())
    }
}

impl<A: TypedArchive> SessionRepo for ArchiveRepo<A> {
    type Storage = A::Storage;

    fn create(&mut self, options: &CreateOptions) -> Result<Session<A::Storage>> {
        let new = options.fields()?.new_session();
        self.archive.new_session(&new).map(Session::new)
    }

    fn open(&self, session: &SessionMetadata) -> Result<Session<A::Storage>> {
        self.archive.session(&session.id).map(Session::new)
    }

    fn list(&self, cwd: Option<&str>) -> Result<Vec<SessionMetadata>> {
        let q = ListQuery {
            cwd: cwd.map(str::to_owned),
            ..ListQuery::default()
        };
        Ok(self
            .archive
            .as_archive()
            .list(&q)?
            .into_iter()
            .map(|s| s.metadata)
            .collect())
    }

    fn delete(&mut self, session: &SessionMetadata) -> Result<()> {
        self.archive.as_archive().delete_session(&session.id)
    }

    /// Forks into a new session, entry ids kept: in batches that other
    /// writers get between (the copy stays invisible until its last batch,
    /// and is removed by the next open if this process dies first).
    fn fork(
        &mut self,
        source: &SessionMetadata,
        options: &ForkOptions,
    ) -> Result<Session<A::Storage>> {
        let storage = self.archive.session(&source.id)?;
        let mut new = options.inherit(&storage.metadata()?)?.new_session();
        // A fork follows its source's rules: a path of a pi app session is
        // still one pi resumes at its last entry.
        new.contract = storage.contract()?;
        // The fork is read as it is written: a whole-session fork takes
        // bounded memory however long the session.
        let whole_log = options.entry_id.as_deref().is_none_or(str::is_empty);
        let mut log = whole_log
            .then(|| LogChunks::new(&storage, &source.id))
            .transpose()?;
        self.archive.as_archive().write_session(&mut |w| {
            w.begin_batched(&new)?;
            if let Some(log) = log.as_mut() {
                // Each chunk is read between two batches: only its writing
                // holds the write lock.
                let mut chunk = Vec::new();
                loop {
                    w.read_between_batches(&mut || log.read_next(&mut chunk))?;
                    if chunk.is_empty() {
                        break;
                    }
                    for text in chunk.drain(..) {
                        w.push(&crate::entry::Entry::from_checked_text(text))?;
                    }
                }
            } else {
                visit_entries_to_fork(
                    &storage,
                    options.entry_id.as_deref(),
                    options.position,
                    &mut |e| w.push(&e),
                )?;
            }
            w.publish()
        })?;
        self.archive.session(&new.id).map(Session::new)
    }
}
