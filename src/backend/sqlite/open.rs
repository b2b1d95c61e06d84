//! Opening an archive (the one place a database is opened): WAL, the
//! connection settings, then the migrations, before any pooled connection
//! is handed out; or reading one without writing anything.

use super::codec;
use super::connection::{switch_to_wal, wal_path, ConnectionManager};
use super::handle::{Archive, ArchiveInner};
use super::migrations;
use crate::error::{Error, Result};
use crate::storage::Durability;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

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
        progress: &mut dyn FnMut(migrations::MigrationProgress),
    ) -> Result<Self> {
        let path = path.as_ref().to_owned();
        inspect_file(&path, true)?;
        let manager = ConnectionManager::new(path.clone(), durability, false);
        let ctx = || format!("opening archive {}", path.display());
        let mut conn = manager.connect_raw().map_err(|e| Error::sqlite(ctx(), e))?;
        // A new archive gives space back a few pages at a time (`compact`
        // never holds the write lock for a whole VACUUM); the mode can only
        // be set before the first table.
        let pages: i64 = conn
            .pragma_query_value(None, "page_count", |r| r.get(0))
            .map_err(|e| Error::sqlite(ctx(), e))?;
        if pages == 0 {
            conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
                .map_err(|e| Error::sqlite(ctx(), e))?;
        }
        let mode = switch_to_wal(&conn).map_err(|e| Error::sqlite(ctx(), e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::JournalMode { path, mode });
        }
        migrations::migrate(&mut conn, &path, progress)?;
        let archive = Archive::with_connection(manager, path, conn);
        // A delete or fork that a dead process left half-done (invisible to
        // every reader meanwhile) is finished or undone now, in batches.
        // Best effort: what cannot be done now (the lock is busy, say)
        // stays invisible and is done at a later open.
        let _ = archive.recover_half_done();
        Ok(archive)
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
        inspect_file(&path, false)?;
        let ctx = || format!("opening archive {} for reading", path.display());
        // A WAL database is readable without writing only where SQLite may
        // create its `-shm` file; where it may not (a read-only directory),
        // SQLite is told the file is immutable, which it is for us.
        let mut manager = ConnectionManager::new(path.clone(), Durability::Relaxed, true);
        let probe = |m: &ConnectionManager| -> Result<(i64, Connection)> {
            let conn = m.connect_raw().map_err(|e| Error::sqlite(ctx(), e))?;
            Ok((migrations::current_version(&conn)?, conn))
        };
        let (found, conn) = match probe(&manager) {
            Ok(found) => found,
            Err(_) => {
                manager.immutable = true;
                probe(&manager)?
            }
        };
        if found < migrations::latest_version() {
            return Archive::open(&path, Durability::Full).map_err(|e| match e.code() {
                crate::ErrorCode::Storage => Error::Corrupt(format!(
                    "{} has schema version {found} and must be migrated to {} before it can be read, which needs write access ({e}); run `sessiontree check` where it can be written",
                    path.display(),
                    migrations::latest_version()
                )),
                _ => e,
            });
        }
        if found > migrations::latest_version() {
            return Err(Error::SchemaTooNew {
                path,
                found,
                supported: migrations::latest_version(),
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
            wal_inode: AtomicU64::new(0),
        }))
    }
}

/// How long a 0-byte file may be someone's archive being created: SQLite
/// creates the file empty and writes its first page when the creator
/// switches it to WAL, microseconds later. An empty file older than this
/// is an archive that lost its contents.
const CREATING: Duration = Duration::from_secs(5);

/// The size of an SQLite file header.
const HEADER: usize = 100;

/// The cheap check at every open (one `stat` of the file and its `-wal`, and
/// its first 100 bytes read): refuses a file that is not the archive that
/// was last closed before SQLite reads it as something else. A missing
/// file is fine (a writer creates it); an empty one is an error unless it
/// is being created this moment (`creating_allowed`, for a writer); so is a
/// file whose header is not SQLite's, or one shorter than its header says
/// while no write-ahead log holds the rest (a truncated copy). It cannot
/// see damage inside pages (only `sessiontree check` reads every page);
/// SQLite reports that when it reads such a page ([`Error::sqlite`]).
pub(super) fn inspect_file(path: &Path, creating_allowed: bool) -> Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
    };
    if !meta.is_file() {
        return Ok(());
    }
    let damaged = |what: String| {
        Err(Error::Corrupt(format!(
            "{} {what}; nothing was read or written. Restore it from a backup, or move it aside and `sessiontree import` pi's files into a new archive",
            path.display()
        )))
    };
    let len = meta.len();
    if len == 0 {
        let young = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age < CREATING);
        if creating_allowed && young {
            return Ok(());
        }
        return damaged(
            "is empty (0 bytes): not an archive, or one that lost its contents (truncated?)".into(),
        );
    }
    let mut head = [0u8; HEADER];
    let read = std::fs::File::open(path).and_then(|mut f| {
        use std::io::Read;
        let mut got = 0;
        while got < HEADER {
            match f.read(&mut head[got..])? {
                0 => break,
                n => got += n,
            }
        }
        Ok(got)
    });
    let got = read.map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    if got < HEADER {
        return damaged(format!(
            "is {len} bytes, shorter than SQLite's 100-byte header: a truncated archive"
        ));
    }
    if &head[..16] != b"SQLite format 3\0" {
        return damaged(
            "does not start with SQLite's header (\"SQLite format 3\"): not an SQLite archive, or its first bytes were overwritten".into(),
        );
    }
    let page_size = match u32::from(u16::from_be_bytes([head[16], head[17]])) {
        1 => 65536,
        n => n,
    };
    let sane = page_size.is_power_of_two()
        && (512..=65536).contains(&page_size)
        && matches!(head[18], 1 | 2)
        && matches!(head[19], 1 | 2)
        && head[21..24] == [64, 32, 32];
    if !sane {
        return damaged(format!(
            "has a damaged SQLite header (page size {page_size}, file format {}/{}, payload fractions {}/{}/{}): bytes 16-23 are not what SQLite writes",
            head[18], head[19], head[21], head[22], head[23]
        ));
    }
    // The page count in the header is valid when the change counter it was
    // written with (bytes 24-27) is the one stamped beside it (92-95). A
    // checkpoint killed half-way may leave the file shorter than that, with
    // the rest still in the write-ahead log; with no log, it is truncated.
    let counted = u32::from_be_bytes([head[28], head[29], head[30], head[31]]);
    if head[24..28] == head[92..96] && counted > 0 {
        let expected = u64::from(counted) * u64::from(page_size);
        let wal_len = std::fs::metadata(wal_path(path)).map_or(0, |m| m.len());
        if len < expected && wal_len == 0 {
            return damaged(format!(
                "is {len} bytes where its header counts {counted} pages of {page_size} ({expected} bytes), and no write-ahead log holds the rest: a truncated archive"
            ));
        }
    }
    Ok(())
}
