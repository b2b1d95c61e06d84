//! Opening a `SESSION` argument ([`SessionRef`]): a session file through the
//! JSONL backend, an archive session through the archive `--db` names (an
//! SQLite file or a team archive on PostgreSQL). Commands then work on the
//! [`SessionStorage`] trait, so each runs the same code on every backend.

use super::Cli;
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::sqlite::Archive;
use sessiontree::{Result, SessionRef, SessionStorage};

/// Opens the session named by `arg` as a storage of the right backend, to
/// write to it (on PostgreSQL the writer claim is taken at the first write).
pub fn open(cli: &Cli, arg: &str) -> Result<Box<dyn SessionStorage>> {
    open_with(cli, arg, super::open_archive)
}

/// Opens the session named by `arg` to read it: an archive is opened
/// read-only (never created, and readable in a directory we cannot write).
pub fn open_for_reading(cli: &Cli, arg: &str) -> Result<Box<dyn SessionStorage>> {
    open_with(cli, arg, super::open_archive_for_reading)
}

fn open_with(
    cli: &Cli,
    arg: &str,
    open_archive: fn(&Cli) -> Result<Archive>,
) -> Result<Box<dyn SessionStorage>> {
    match SessionRef::parse(arg) {
        SessionRef::File(path) => Ok(Box::new(JsonlStorage::open(path, cli.durability.into())?)),
        SessionRef::Archive(prefix) => {
            if let Some(url) = super::db::postgres_url(cli) {
                let archive = super::db::open_postgres(cli, &url)?;
                let id = archive.resolve_session(&prefix)?;
                return Ok(Box::new(archive.open_session(&id)?));
            }
            let archive = open_archive(cli)?;
            let id = archive.resolve_session(&prefix)?;
            Ok(Box::new(archive.open_session(&id)?))
        }
    }
}
