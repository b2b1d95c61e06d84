//! An archive file's connections: the per-connection settings (busy
//! handling, sync level, the re-encode guard), the pool's manager, switching
//! to WAL, truncating the log, and the damage marker that refuses writes.
//! The bottom of the SQLite backend: it imports none of its other parts
//! but the leaf modules.

use super::checkpointer::LogCheckpointer;
use super::reencode_guard::register_reencode_guard;
use crate::error::{Error, Result};
use crate::storage::Durability;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long a connection waits for another's lock before `database is locked`.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

std::thread_local! {
    /// When this thread's current wait for a lock began (its first try).
    static WAITING_SINCE: std::cell::Cell<Option<std::time::Instant>> =
        const { std::cell::Cell::new(None) };
}

/// SQLite's busy handler: try again every millisecond for [`BUSY_TIMEOUT`].
/// (SQLite's own `busy_timeout` backs off to one try per 100 ms, and would
/// miss the short gap a staged import leaves between its transactions.)
/// Timed by the clock, not by counting tries: on a loaded machine a 1 ms
/// sleep takes several, and 10,000 tries ran past 25 s — past a writer
/// claim's 30 s lease once two such waits followed one another. SQLite
/// calls the handler on the waiting thread, attempt 0 first. A write
/// beginning ([`super::turnstile::announcing`]) announces itself on the
/// archive's turn file, so that a long operation lets it in before its
/// next batch however late this sleep ends ([`super::turnstile`]).
pub(super) fn wait_for_the_lock(attempt: i32) -> bool {
    let now = std::time::Instant::now();
    let since = WAITING_SINCE.with(|w| {
        if attempt == 0 {
            w.set(Some(now));
        }
        w.get().unwrap_or(now)
    });
    super::turnstile::announce();
    std::thread::sleep(Duration::from_millis(1) + super::turnstile::test_late_wake());
    let limit = super::checkpointer::wait_limit().map_or(BUSY_TIMEOUT, |l| l.min(BUSY_TIMEOUT));
    since.elapsed() < limit
}

/// A busy handler that gives up after a second: for a checkpoint that
/// truncates the log, which waits for every reader while new writers wait
/// behind it (a log left untruncated is only bytes the next checkpoint takes).
pub(super) fn wait_a_second(attempt: i32) -> bool {
    std::thread::sleep(Duration::from_millis(1));
    attempt < 1000
}

/// Checkpoints the whole log into the database and truncates it, waiting
/// at most a second for readers ([`wait_a_second`]); the connection's own
/// busy handler is back afterwards. It takes the handle's checkpoint turn
/// first: SQLite does not wait for a checkpoint already running, and one of
/// the handle's background checkpoints running then left the whole log
/// (a compact's report counted 6 MB of log as archive bytes). A `PASSIVE`
/// checkpoint copies the log first, holding no lock (traced as
/// `ckpt-op-passive`): `TRUNCATE` holds the write lock while it copies, and
/// copying what a long operation left made other writers wait for all of
/// it. The `TRUNCATE`, the part that holds the lock, is traced as `what`.
pub(super) fn truncate_log(
    conn: &mut Connection,
    checkpointer: &LogCheckpointer,
    what: &'static str,
) -> rusqlite::Result<()> {
    let _turn = checkpointer.turn();
    // Busy or failed: the truncating checkpoint copies the rest.
    if let Ok(true) = super::checkpointer::passive_checkpoint_of_all(conn, "ckpt-op-passive") {
        drop_cached_log(conn);
    }
    conn.busy_handler(Some(wait_a_second))?;
    let span = super::lock_trace::start(what);
    let done = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    super::lock_trace::end(span, 0, "");
    conn.busy_handler(Some(wait_for_the_lock))?;
    match done {
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => Ok(()),
        other => other,
    }
}

/// Drops the log's pages from the OS page cache, once a checkpoint has
/// copied every frame (they are clean then), so that the truncation after
/// it, which holds the write lock, does not evict them: it spent 10 ms of
/// CPU on a 70 MB log (0.3 ms once they were dropped beforehand; the drop
/// itself, without the lock, 10–13 ms). Frames appended meanwhile are
/// dropped too, and are read back from the disk if they must be copied. A
/// descriptor of our own is safe to close here: SQLite locks the database
/// and `-shm` files, never the log (closing a descriptor drops the
/// process's POSIX locks on that file only). Best effort: any failure
/// leaves the pages to the truncation.
fn drop_cached_log(conn: &Connection) {
    #[cfg(target_os = "linux")]
    if let Some(db) = conn.path().filter(|p| !p.is_empty()) {
        if let Ok(log) = std::fs::File::open(wal_path(Path::new(db))) {
            let _ = rustix::fs::fadvise(&log, 0, None, rustix::fs::Advice::DontNeed);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = conn;
}

/// The reader pool.
pub type Pool = r2d2::Pool<ConnectionManager>;

/// Opens pooled connections with the per-connection settings.
#[derive(Debug, Clone)]
pub struct ConnectionManager {
    pub(super) path: PathBuf,
    pub(super) durability: Durability,
    pub(super) read_only: bool,
    /// Read-only, and the directory allows no `-shm` file: SQLite is told
    /// nobody writes the file (`immutable=1`), which is true for us.
    pub(super) immutable: bool,
    /// Runs the checkpoints the handle's writing connections ask for, off
    /// their commit path (shared by every clone of the manager).
    pub(super) checkpointer: Arc<LogCheckpointer>,
}

/// A `file:` URI opening `path` as immutable.
pub(super) fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    for b in path.to_string_lossy().bytes() {
        match b {
            b'?' | b'#' | b'%' => uri.push_str(&format!("%{b:02X}")),
            _ => uri.push(char::from(b)),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// The log's size on disk once it starts over (128 MB): a larger log is
/// cut back to it, not left at its largest. Above the log a long operation
/// keeps (64 MB and a batch, 71–95 MB), so that its log is written over in
/// place: cut back to 64 MB at every start over, its freed blocks were
/// discarded and allocated again under the write lock, each time waiting
/// for the disk.
const LOG_SIZE_LIMIT: i64 = 128 << 20;

impl ConnectionManager {
    /// A manager for the archive at `path` (no connection is opened yet).
    pub(super) fn new(path: PathBuf, durability: Durability, read_only: bool) -> Self {
        ConnectionManager {
            path,
            durability,
            read_only,
            immutable: false,
            checkpointer: Arc::default(),
        }
    }

    /// The handle's background checkpointer.
    pub(super) fn checkpointer(&self) -> &LogCheckpointer {
        &self.checkpointer
    }

    /// Replaces SQLite's checkpoint in the commit (whichever connection
    /// commits past 1,000 log pages copies the whole log and waits for the
    /// disk before its commit returns) by a request to the handle's
    /// [`LogCheckpointer`], which returns at once. The hook holds the
    /// checkpointer weakly: a connection outliving its handle asks nothing.
    fn checkpoint_off_the_commit_path(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        conn.pragma_update(None, "journal_size_limit", LOG_SIZE_LIMIT)?;
        let checkpointer = Arc::downgrade(&self.checkpointer);
        let path = self.path.clone();
        conn.wal_hook(Some(
            move |_: &mut rusqlite::hooks::Wal, pages: std::ffi::c_int| {
                if let Some(c) = checkpointer.upgrade() {
                    c.request(&path, i64::from(pages));
                }
                Ok(())
            },
        ))
    }

    pub(super) fn connect_raw(&self) -> rusqlite::Result<Connection> {
        let flags = if self.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let mut conn = if self.read_only && self.immutable {
            Connection::open_with_flags(immutable_uri(&self.path), flags)?
        } else {
            Connection::open_with_flags(&self.path, flags)?
        };
        conn.busy_handler(Some(wait_for_the_lock))?;
        conn.pragma_update(None, "foreign_keys", true)?;
        let sync = match self.durability {
            Durability::Full => "FULL",
            Durability::Relaxed => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync)?;
        conn.pragma_update(None, "cache_size", -16_000)?;
        // Damaged b-tree pages are reported (SQLITE_CORRUPT) when read rather
        // than written through, so damage does not spread. A read-only
        // connection writes nothing through; the check would cost it ~15 % of
        // a search (every page it loads is checked), and SQLite's own checks
        // still report a damaged page it reads.
        if !self.read_only {
            conn.pragma_update(None, "cell_size_check", true)?;
            self.checkpoint_off_the_commit_path(&mut conn)?;
        }
        conn.set_prepared_statement_cache_capacity(64);
        register_reencode_guard(&conn)?;
        Ok(conn)
    }
}

/// Whether a connection handed back may be lent again: not if it is still
/// inside a transaction (a rollback that failed). That is also the one state
/// in which a staged import cannot set a relaxed connection's sync level back
/// (`synchronous` cannot change inside a transaction), so a connection
/// relaxed for an import is never lent to a write that was promised `Full`.
/// Free: SQLite's autocommit flag.
pub(super) fn fit_to_lend_again(conn: &Connection) -> bool {
    conn.is_autocommit()
}

impl r2d2::ManageConnection for ConnectionManager {
    type Connection = Connection;
    type Error = rusqlite::Error;
    fn connect(&self) -> rusqlite::Result<Connection> {
        self.connect_raw()
    }
    fn is_valid(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        conn.execute_batch("")
    }
    fn has_broken(&self, conn: &mut Connection) -> bool {
        !fit_to_lend_again(conn)
    }
}

/// The file `check` leaves beside an archive whose `PRAGMA integrity_check`
/// failed (`archive.db.damaged`, holding what it found). While it exists,
/// every write is refused; `check` removes it once the archive passes again.
pub fn damage_marker(archive: &Path) -> PathBuf {
    let mut name = archive.file_name().unwrap_or_default().to_owned();
    name.push(".damaged");
    archive.with_file_name(name)
}

/// Refuses to write to an archive `check` found damaged (`storage`).
pub(super) fn refuse_if_damaged(archive: &Path) -> Result<()> {
    let marker = damage_marker(archive);
    match std::fs::read_to_string(&marker) {
        Ok(found) => Err(Error::Corrupt(format!(
            "{} failed PRAGMA integrity_check ({}); writes are refused so the damage cannot spread. Restore it from a backup (or import the pi files into a new archive); `sessiontree check` then removes {}",
            archive.display(),
            found.lines().next().unwrap_or("see the marker file"),
            marker.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("reading {}", marker.display()), e)),
    }
}

/// Switches to WAL. Two processes creating one archive at once both try
/// this; SQLite answers the loser `SQLITE_BUSY` at once, without its busy
/// handler, so the switch is retried for as long as a busy wait would wait.
pub(super) fn switch_to_wal(conn: &Connection) -> rusqlite::Result<String> {
    let started = std::time::Instant::now();
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)) {
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// The archive's write-ahead log (`archive.db-wal`).
pub(super) fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// The refusal of a write whose write-ahead log is gone.
pub(super) fn log_gone(archive: &Path, wal: &Path, how: &str) -> crate::error::Error {
    crate::error::Error::Corrupt(format!(
        "{}: its write-ahead log {} {how} while this process was writing; writes are refused, since they would go to the deleted file and be lost. Writes this process made since the last checkpoint may be lost; stop it (and every other process using the archive), then run `sessiontree check`",
        archive.display(),
        wal.display()
    ))
}

/// Inside a write transaction that holds no [`super::handle::Archive`] (a
/// staged import's next batch): refuses when the write-ahead log is gone.
/// The archive's own check also notices a log replaced by another file.
pub(super) fn refuse_if_log_missing(archive: &Path) -> Result<()> {
    let wal = wal_path(archive);
    match std::fs::metadata(&wal) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(log_gone(archive, &wal, "was deleted"))
        }
        Err(e) => Err(Error::io(format!("reading {}", wal.display()), e)),
    }
}
