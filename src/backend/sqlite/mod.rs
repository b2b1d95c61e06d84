//! The SQLite backend: many sessions in one archive file, an append-only log
//! per session, and a materialized branch cache ([`branch_cache`]).
//!
//! # Layout
//! `mod.rs` opens archives (connection settings, pool, migration);
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
pub mod block;
pub mod branch_cache;
mod check;
mod checkpointer;
pub mod claim;
pub mod codec;
mod compact;
mod error;
pub mod fts;
pub mod migrate;
mod query;
mod rows;
mod skeleton;
mod stored;
/// The search text rules, shared by every indexed backend.
pub use crate::search;
mod storage;
mod writer;

use crate::backend::session_rows::stored_js_string;
use crate::error::{Error, Result};
use crate::storage::Durability;
use error::sql;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub use crate::listing::{ArchiveTotals, ListQuery, SearchFilter, SearchHit, SessionSummary};
pub use compact::{CompactReport, StorageSplit};
pub use query::QueryResult;
pub use rows::{ImportRecord, NewSession};
pub use storage::SqliteStorage;
pub use writer::{SessionWriter, STAGED_GAP};

/// How long a connection waits for another's lock before `database is locked`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// SQLite's busy handler: try again every millisecond for [`BUSY_TIMEOUT`].
/// (SQLite's own `busy_timeout` backs off to one try per 100 ms, and would
/// miss the short gap a staged import leaves between its transactions.)
fn wait_for_the_lock(attempt: i32) -> bool {
    std::thread::sleep(Duration::from_millis(1));
    u128::try_from(attempt).unwrap_or(0) < BUSY_TIMEOUT.as_millis()
}

/// A busy handler that gives up after a second: for a checkpoint that
/// truncates the log, which waits for every reader while new writers wait
/// behind it (a log left untruncated is only bytes the next checkpoint takes).
fn wait_a_second(attempt: i32) -> bool {
    std::thread::sleep(Duration::from_millis(1));
    attempt < 1000
}

/// Checkpoints the whole log into the database and truncates it, waiting
/// at most a second for readers ([`wait_a_second`]); the connection's own
/// busy handler is back afterwards.
fn truncate_log(conn: &mut Connection) -> rusqlite::Result<()> {
    conn.busy_handler(Some(wait_a_second))?;
    let done = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    conn.busy_handler(Some(wait_for_the_lock))?;
    match done {
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => Ok(()),
        other => other,
    }
}

/// Entry text appended without a dictionary after which a writer trains
/// the archive's first one from its entries (what `import` trains on).
pub const TRAIN_AFTER_APPENDING: usize = codec::IMPORT_TRAINING_BUDGET;

/// The reader pool.
pub type Pool = r2d2::Pool<ConnectionManager>;

/// Opens pooled connections with the per-connection settings.
#[derive(Debug, Clone)]
pub struct ConnectionManager {
    path: PathBuf,
    durability: Durability,
    read_only: bool,
    /// Read-only, and the directory allows no `-shm` file: SQLite is told
    /// nobody writes the file (`immutable=1`), which is true for us.
    immutable: bool,
}

/// A `file:` URI opening `path` as immutable.
fn immutable_uri(path: &Path) -> String {
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

impl ConnectionManager {
    fn connect_raw(&self) -> rusqlite::Result<Connection> {
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
        }
        conn.set_prepared_statement_cache_capacity(64);
        compact::register_reencode_guard(&conn)?;
        Ok(conn)
    }
}

/// Whether a connection handed back may be lent again: not if it is still
/// inside a transaction (a rollback that failed). That is also the one state
/// in which a staged import cannot set a relaxed connection's sync level back
/// (`synchronous` cannot change inside a transaction), so a connection
/// relaxed for an import is never lent to a write that was promised `Full`.
/// Free: SQLite's autocommit flag.
fn fit_to_lend_again(conn: &Connection) -> bool {
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

struct ArchiveInner {
    manager: ConnectionManager,
    /// Built on first need: a one-shot command never needs more than the
    /// connection its open made, and then starts no pool threads.
    pool: OnceLock<Pool>,
    /// The connection the open checked the schema on, lent out again while
    /// nobody holds it (so its parsed schema is not parsed a second time).
    spare: Mutex<Option<Connection>>,
    path: PathBuf,
    codec: codec::Codec,
    /// Entry text this process appended while the archive had no dictionary
    /// (see [`Archive::appended_untrained`]).
    untrained_bytes: AtomicUsize,
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
pub struct Archive(Arc<ArchiveInner>);

/// The file `check` leaves beside an archive whose `PRAGMA integrity_check`
/// failed (`archive.db.damaged`, holding what it found). While it exists,
/// every write is refused; `check` removes it once the archive passes again.
pub fn damage_marker(archive: &Path) -> PathBuf {
    let mut name = archive.file_name().unwrap_or_default().to_owned();
    name.push(".damaged");
    archive.with_file_name(name)
}

/// Refuses to write to an archive `check` found damaged (`storage`).
fn refuse_if_damaged(archive: &Path) -> Result<()> {
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
fn switch_to_wal(conn: &Connection) -> rusqlite::Result<String> {
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

impl Archive {
    /// Opens (creating if needed) an archive, migrated to the latest schema.
    pub fn open(path: impl AsRef<Path>, durability: Durability) -> Result<Self> {
        Self::open_with_progress(path, durability, &mut |_| {})
    }

    /// [`Archive::open`], reporting the progress of any migration that
    /// rewrites rows (a progress bar for a large archive).
    pub fn open_with_progress(
        path: impl AsRef<Path>,
        durability: Durability,
        progress: &mut dyn FnMut(migrate::MigrationProgress),
    ) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let manager = ConnectionManager {
            path: path.clone(),
            durability,
            read_only: false,
            immutable: false,
        };
        let ctx = || format!("opening archive {}", path.display());
        let mut conn = manager.connect_raw().map_err(|e| Error::sqlite(ctx(), e))?;
        let mode = switch_to_wal(&conn).map_err(|e| Error::sqlite(ctx(), e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::JournalMode { path, mode });
        }
        migrate::migrate(&mut conn, &path, progress)?;
        Ok(Archive::with_connection(manager, path, conn))
    }

    /// Opens an existing archive for reading only: nothing is created (a
    /// missing file is `not_found` naming it), nothing is written, and it
    /// works in a directory we may not write to. An archive of an older
    /// schema is migrated first if it can be written; if not, the error says
    /// which command would.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_owned();
        if !path.is_file() {
            return Err(Error::ArchiveNotFound(path));
        }
        let ctx = || format!("opening archive {} for reading", path.display());
        // A WAL database is readable without writing only where SQLite may
        // create its `-shm` file; where it may not (a read-only directory),
        // SQLite is told the file is immutable, which it is for us.
        let mut manager = ConnectionManager {
            path: path.clone(),
            durability: Durability::Relaxed,
            read_only: true,
            immutable: false,
        };
        let probe = |m: &ConnectionManager| -> Result<(i64, Connection)> {
            let conn = m.connect_raw().map_err(|e| Error::sqlite(ctx(), e))?;
            Ok((migrate::current_version(&conn)?, conn))
        };
        let (found, conn) = match probe(&manager) {
            Ok(found) => found,
            Err(_) => {
                manager.immutable = true;
                probe(&manager)?
            }
        };
        if found < migrate::latest_version() {
            return Archive::open(&path, Durability::Full).map_err(|e| match e.code() {
                crate::ErrorCode::Storage => Error::Corrupt(format!(
                    "{} has schema version {found} and must be migrated to {} before it can be read, which needs write access ({e}); run `sessiontree check` where it can be written",
                    path.display(),
                    migrate::latest_version()
                )),
                _ => e,
            });
        }
        if found > migrate::latest_version() {
            return Err(Error::SchemaTooNew {
                path,
                found,
                supported: migrate::latest_version(),
            });
        }
        Ok(Archive::with_connection(manager, path, conn))
    }

    /// The archive, lending `conn` (opened by `manager`) before any other.
    fn with_connection(manager: ConnectionManager, path: PathBuf, conn: Connection) -> Self {
        Archive(Arc::new(ArchiveInner {
            manager,
            pool: OnceLock::new(),
            spare: Mutex::new(Some(conn)),
            path,
            codec: codec::Codec::default(),
            untrained_bytes: AtomicUsize::new(0),
        }))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.0.path
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE`: the write lock now, so
    /// it never fails half-way on a busy upgrade), refusing while the archive
    /// is marked damaged ([`damage_marker`]).
    pub(crate) fn begin_write<'c>(
        &self,
        conn: &'c mut Connection,
        what: &'static str,
    ) -> Result<rusqlite::Transaction<'c>> {
        refuse_if_damaged(self.path())?;
        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql(what))
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
