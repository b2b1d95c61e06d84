//! The archive handle ([`Archive`]): its file, the connection it opened
//! with, the pool, the codec, and the transactions every part of the
//! archive starts. Opening one (which migrates) is [`super::open`]'s, above
//! the parts that migrations use, so none of them imports it.

use super::codec;
use super::connection::{fit_to_lend_again, refuse_if_damaged, ConnectionManager, Pool};
use super::error::sql;
use crate::error::Result;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Entry text appended without a dictionary after which a writer trains
/// the archive's first one from its entries (what `import` trains on).
pub const TRAIN_AFTER_APPENDING: usize = codec::IMPORT_TRAINING_BUDGET;

pub(super) struct ArchiveInner {
    pub(super) manager: ConnectionManager,
    /// Built on first need: a one-shot command never needs more than the
    /// connection its open made, and then starts no pool threads.
    pub(super) pool: OnceLock<Pool>,
    /// The connection the open checked the schema on, lent out again while
    /// nobody holds it (so its parsed schema is not parsed a second time).
    pub(super) spare: Mutex<Option<Connection>>,
    pub(super) path: PathBuf,
    pub(super) codec: codec::Codec,
    /// Entry text this process appended while the archive had no dictionary
    /// (see [`Archive::appended_untrained`]).
    pub(super) untrained_bytes: AtomicUsize,
    /// The inode of the write-ahead log the first write transaction found
    /// (0: none yet); see [`Archive::refuse_if_log_gone`].
    pub(super) wal_inode: AtomicU64,
}

impl std::fmt::Debug for ArchiveInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive").field("path", &self.path).finish()
    }
}

/// A connection of the archive: its spare one, or one from the pool.
/// Returned where it came from when dropped.
pub struct ArchiveConn {
    conn: Option<Connection>,
    pooled: Option<r2d2::PooledConnection<ConnectionManager>>,
    home: Arc<ArchiveInner>,
}

impl std::ops::Deref for ArchiveConn {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match (&self.conn, &self.pooled) {
            (Some(c), _) => c,
            (None, Some(p)) => p,
            (None, None) => unreachable!("an ArchiveConn holds a connection until dropped"),
        }
    }
}

impl std::ops::DerefMut for ArchiveConn {
    fn deref_mut(&mut self) -> &mut Connection {
        match (&mut self.conn, &mut self.pooled) {
            (Some(c), _) => c,
            (None, Some(p)) => p,
            (None, None) => unreachable!("an ArchiveConn holds a connection until dropped"),
        }
    }
}

impl Drop for ArchiveConn {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !fit_to_lend_again(&conn) {
                // The spare closes: if it was the last connection, SQLite
                // deletes the log and a later one makes a new file, which
                // is no sign of damage. (A deleted log is still noticed.)
                self.home.wal_inode.store(0, Ordering::Relaxed);
                return;
            }
            if let Ok(mut spare) = self.home.spare.lock() {
                spare.get_or_insert(conn);
            }
        }
    }
}

/// An archive: one SQLite file holding many sessions.
#[derive(Debug, Clone)]
pub struct Archive(pub(super) Arc<ArchiveInner>);

impl Archive {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`: the write lock now, so
    /// it never fails half-way on a busy upgrade), refusing while the archive
    /// is marked damaged ([`damage_marker`]), and does a bounded share of the
    /// search index's merge work first ([`fts::merge_due`](super::fts::merge_due)).
    /// While it waits for the lock it announces itself to long operations
    /// ([`super::turnstile`]).
    pub(crate) fn begin_write<'c>(
        &self,
        conn: &'c mut Connection,
        what: &'static str,
    ) -> Result<rusqlite::Transaction<'c>> {
        self.begin_write_clocked(conn, what).map(|(tx, _)| tx)
    }

    /// [`Archive::begin_write`], and when it took the lock: a batched
    /// writer's clock starts there, so that the merge share counts in its
    /// batch's time.
    pub(crate) fn begin_write_clocked<'c>(
        &self,
        conn: &'c mut Connection,
        what: &'static str,
    ) -> Result<(rusqlite::Transaction<'c>, Instant)> {
        refuse_if_damaged(self.path())?;
        let span = super::lock_trace::start("lock-wait");
        let tx = super::turnstile::begin_announced(self.path(), || {
            conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        })
        .map_err(sql(what))?;
        let taken = Instant::now();
        super::lock_trace::end_if_over(span, std::time::Duration::from_millis(10), "");
        super::lock_trace::lock_taken();
        self.refuse_if_log_gone()?;
        super::fts::merge_due(&tx, super::fts::WRITER_MERGE_TIME)?;
        Ok((tx, taken))
    }

    /// Inside a write transaction: refuses when the archive's write-ahead
    /// log (`-wal`) was deleted or replaced while this process had it open.
    /// SQLite deletes the log only when the last connection to the archive
    /// closes, and this archive keeps one open for as long as it lives (its
    /// spare), so while it lives the log is one file. If someone deletes it,
    /// this process's connections keep writing into the unlinked file, and
    /// every write after the last checkpoint is lost when they close (and
    /// `check`, reading the file on disk, sees nothing wrong): so the write
    /// is refused before it is made, naming the file. Cost: one `stat` per
    /// write transaction.
    pub(crate) fn refuse_if_log_gone(&self) -> Result<()> {
        let wal = super::connection::wal_path(self.path());
        let found = match std::fs::metadata(&wal) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(super::connection::log_gone(
                    self.path(),
                    &wal,
                    "was deleted",
                ));
            }
            Err(e) => {
                return Err(crate::error::Error::io(
                    format!("reading {}", wal.display()),
                    e,
                ))
            }
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let ino = found.ino().max(1);
            match self
                .0
                .wal_inode
                .compare_exchange(0, ino, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {}
                Err(seen) if seen == ino => {}
                Err(_) => {
                    return Err(super::connection::log_gone(
                        self.path(),
                        &wal,
                        "was deleted and another file took its place",
                    ))
                }
            }
        }
        #[cfg(not(unix))]
        let _ = found;
        Ok(())
    }

    /// Starts a read transaction on `conn`: every statement until it ends
    /// (dropped: a rollback, which for a reader only lets go of the
    /// snapshot) reads one snapshot, so a row and what it names (a member
    /// and its block, a search candidate and its entry) agree even while a
    /// `compact` or a delete commits.
    pub(crate) fn begin_read<'c>(
        conn: &'c Connection,
        what: &'static str,
    ) -> Result<rusqlite::Transaction<'c>> {
        conn.unchecked_transaction().map_err(sql(what))
    }

    /// Between two batches of a long operation: pauses `gap` (or a test's
    /// longer pause), then lets the writers waiting for the lock have it
    /// first ([`super::turnstile`]).
    pub(crate) fn between_batches(&self, gap: Duration) {
        super::turnstile::between_batches(self.path(), gap);
    }

    /// The connection pool, built on first need (connections made as needed).
    fn pool(&self) -> &Pool {
        self.0.pool.get_or_init(|| {
            r2d2::Pool::builder()
                .max_size(8)
                .min_idle(Some(0))
                .test_on_check_out(false)
                .connection_timeout(Duration::from_secs(30))
                .build_unchecked(self.0.manager.clone())
        })
    }

    /// Counts `bytes` of entry text appended without a dictionary; `true`
    /// once every [`TRAIN_AFTER_APPENDING`] bytes, when an archive filled by
    /// appends alone should train its first one
    /// ([`Archive::train_first_dictionary_from_entries`]).
    pub(crate) fn appended_untrained(&self, bytes: usize) -> bool {
        let before = self.0.untrained_bytes.fetch_add(bytes, Ordering::Relaxed);
        before / TRAIN_AFTER_APPENDING != (before + bytes) / TRAIN_AFTER_APPENDING
    }

    /// The archive's dictionaries: what decodes stored entry text.
    pub fn codec(&self) -> &codec::Codec {
        &self.0.codec
    }

    /// A connection: the spare one when nobody holds it, else a pooled one.
    pub fn conn(&self) -> Result<ArchiveConn> {
        let spare = self.0.spare.lock().ok().and_then(|mut s| s.take());
        let pooled = match spare {
            Some(_) => None,
            None => Some(self.pool().get()?),
        };
        Ok(ArchiveConn {
            conn: spare,
            pooled,
            home: self.0.clone(),
        })
    }
}
