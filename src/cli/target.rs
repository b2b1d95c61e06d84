//! Opening a `SESSION` argument ([`SessionRef`]): a session file through the
//! JSONL backend, an archive session through the archive `--db` names (an
//! SQLite file or a team archive on PostgreSQL, as one `dyn` archive).
//! Commands then work on the [`SessionStorage`] trait, so each runs the same
//! code on every backend.

use super::db::{self, Access};
use super::Cli;
use sessiontree::archive::BoxedStorage;
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::{Result, SessionRef};

/// Opens the session named by `arg` as a storage of the right backend, to
/// write to it (an archive session takes the writer claim at its first write).
pub fn open(cli: &Cli, arg: &str) -> Result<BoxedStorage> {
    open_with(cli, arg, Access::Write)
}

/// Opens the session named by `arg` to read it: an SQLite archive is opened
/// read-only (never created, and readable in a directory we cannot write).
pub fn open_for_reading(cli: &Cli, arg: &str) -> Result<BoxedStorage> {
    open_with(cli, arg, Access::Read)
}

fn open_with(cli: &Cli, arg: &str, access: Access) -> Result<BoxedStorage> {
    match SessionRef::parse(arg) {
        SessionRef::File(path) => Ok(Box::new(JsonlStorage::open(path, cli.durability.into())?)),
        SessionRef::Archive(prefix) => open_in_archive(cli, &prefix, access),
    }
}

/// Opens the archive session whose id is, or starts with, `prefix`, in the
/// archive `--db` names.
pub fn open_in_archive(cli: &Cli, prefix: &str, access: Access) -> Result<BoxedStorage> {
    let archive = db::open(cli, access)?;
    archive.open_storage(&archive.resolve_session(prefix)?)
}
