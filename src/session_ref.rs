//! How a person names a session on a command line or in a request: a path to
//! a pi session file, or an archive session's id or unique id prefix. One
//! rule, so every command reads a `SESSION` argument the same way.

use std::path::{Path, PathBuf};

/// A session named by a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionRef {
    /// A pi session file, used directly through the JSONL backend.
    File(PathBuf),
    /// An archive session: a full id or a unique prefix of one (see
    /// [`crate::archive::SessionArchive::resolve_session`]).
    Archive(String),
}

impl SessionRef {
    /// Reads a `SESSION` argument. A bare word is an archive id even if a file
    /// of that name is in the working directory; a path says so with a
    /// `.jsonl` ending, or with a separator and an existing file.
    pub fn parse(arg: &str) -> SessionRef {
        let is_file =
            arg.ends_with(".jsonl") || (arg.contains(['/', '\\']) && Path::new(arg).is_file());
        if is_file {
            SessionRef::File(PathBuf::from(arg))
        } else {
            SessionRef::Archive(arg.to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_files_and_bare_words_are_archive_ids() {
        assert_eq!(
            SessionRef::parse("a/b.jsonl"),
            SessionRef::File("a/b.jsonl".into())
        );
        assert_eq!(
            SessionRef::parse("x.jsonl"),
            SessionRef::File("x.jsonl".into())
        );
        assert_eq!(
            SessionRef::parse("0195ab"),
            SessionRef::Archive("0195ab".into())
        );
        // A separator alone is not enough: the file must exist.
        assert_eq!(
            SessionRef::parse("no/such/file"),
            SessionRef::Archive("no/such/file".into())
        );
    }
}
