//! Resolving a `SESSION` argument: a full id, a unique id prefix, or a path to
//! a `.jsonl` file (then the JSONL backend is used directly).

use super::Cli;
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::{Error, Result, SessionStorage};

/// Opens the session named by `arg` as a storage of the right backend.
pub fn open(cli: &Cli, arg: &str) -> Result<Box<dyn SessionStorage>> {
    if is_file(arg) {
        return Ok(Box::new(JsonlStorage::open(arg, cli.durability.into())?));
    }
    let archive = super::open_archive(cli)?;
    let id = resolve_id(&archive, arg)?;
    Ok(Box::new(archive.open_session(&id)?))
}

/// Whether `arg` names a session file rather than an archive session.
pub fn is_file(arg: &str) -> bool {
    // A bare word is an archive id even if a file of that name happens to be
    // in the working directory; a path says so with `.jsonl` or a separator.
    arg.ends_with(".jsonl") || (arg.contains(['/', '\\']) && std::path::Path::new(arg).is_file())
}

/// The full id for an id or unique prefix.
pub fn resolve_id(archive: &sessiontree::backend::sqlite::Archive, arg: &str) -> Result<String> {
    if arg.is_empty() {
        return Err(Error::SessionNotFound("(empty session id)".into()));
    }
    if archive.has_session(arg)? {
        return Ok(arg.to_owned());
    }
    const SHOWN: usize = 10;
    let found = archive.sessions_with_prefix(arg, SHOWN + 1)?;
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::SessionNotFound(arg.to_owned())),
        _ => {
            let more = if found.len() > SHOWN { "\n  …" } else { "" };
            Err(Error::Usage(format!(
                "session prefix {arg:?} is ambiguous; give more characters. Candidates:\n  {}{more}",
                found[..found.len().min(SHOWN)].join("\n  ")
            )))
        }
    }
}
