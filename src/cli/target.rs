//! Opening a `SESSION` argument ([`SessionRef`]): a session file through the
//! JSONL backend, an archive session through the archive.

use super::Cli;
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::{Result, SessionRef, SessionStorage};

/// Opens the session named by `arg` as a storage of the right backend.
pub fn open(cli: &Cli, arg: &str) -> Result<Box<dyn SessionStorage>> {
    match SessionRef::parse(arg) {
        SessionRef::File(path) => Ok(Box::new(JsonlStorage::open(path, cli.durability.into())?)),
        SessionRef::Archive(prefix) => {
            let archive = super::open_archive(cli)?;
            let id = archive.resolve_session(&prefix)?;
            Ok(Box::new(archive.open_session(&id)?))
        }
    }
}
