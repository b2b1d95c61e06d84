//! Opening a `SESSION` argument ([`SessionRef`]): a session file through the
//! JSONL backend, an archive session through the archive.

use super::Cli;
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::sqlite::Archive;
use sessiontree::{Result, SessionRef, SessionStorage};

/// Opens the session named by `arg` as a storage of the right backend, to
/// write to it.
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
            let archive = open_archive(cli)?;
            let id = archive.resolve_session(&prefix)?;
            Ok(Box::new(archive.open_session(&id)?))
        }
    }
}
