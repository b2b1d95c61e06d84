//! Opening an archive (the one place a database is opened): WAL, the
//! connection settings, then the migrations, before any pooled connection
//! is handed out; or reading one without writing anything.

use super::codec;
use super::connection::{switch_to_wal, ConnectionManager};
use super::handle::{Archive, ArchiveInner};
use super::migrations;
use crate::error::{Error, Result};
use crate::storage::Durability;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock};

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
        let manager = ConnectionManager {
            path: path.clone(),
            durability,
            read_only: false,
            immutable: false,
        };
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
        }))
    }
}
