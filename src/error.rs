//! The one error type of the crate, with codes that mirror the contract's.
//!
//! `Display` text is for humans and copies pi's wording where pi has one;
//! programs branch on [`Error::code`], never on the message.

use std::path::PathBuf;

/// The contract's error codes (spec §9), stable across releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// An entry or session that was asked for does not exist.
    NotFound,
    /// The stored session is unusable as a whole (bad header, dangling leaf or parent, cycle).
    InvalidSession,
    /// One entry is malformed (bad line, missing field, duplicate id).
    InvalidEntry,
    /// A fork names an entry that cannot be forked from.
    InvalidForkTarget,
    /// The storage below failed (I/O, SQLite, lock held by another writer).
    Storage,
    /// The caller asked for something that does not make sense (a command-line
    /// or request mistake, not a stored-data problem).
    Usage,
    /// Anything else.
    Unknown,
}

impl ErrorCode {
    /// The code as the contract spells it, e.g. `"not_found"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NotFound => "not_found",
            ErrorCode::InvalidSession => "invalid_session",
            ErrorCode::InvalidEntry => "invalid_entry",
            ErrorCode::InvalidForkTarget => "invalid_fork_target",
            ErrorCode::Storage => "storage",
            ErrorCode::Usage => "usage",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every failure the library reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An entry id that must exist does not (`not_found`).
    #[error("Entry {0} not found")]
    EntryNotFound(String),
    /// There is no archive at the path a command that only reads was given
    /// (`not_found`): reading never creates one.
    #[error("no archive at {}: `sessiontree import` creates one", .0.display())]
    ArchiveNotFound(PathBuf),
    /// A session that was asked for does not exist (`not_found`).
    #[error("Session not found: {0}")]
    SessionNotFound(String),
    /// The leaf or a parent on a walk names an entry that does not exist (`invalid_session`).
    #[error("Entry {0} not found")]
    DanglingReference(String),
    /// A session with this id is already in the archive (`invalid_session`).
    #[error("session {0} already exists in the archive")]
    SessionExists(String),
    /// A `parentId` chain loops back on itself (`invalid_session`); pi would hang.
    #[error("Entry {0} is its own ancestor: the parentId chain has a cycle")]
    ParentCycle(String),
    /// A session file's header is missing or malformed (`invalid_session`).
    #[error("Invalid JSONL session file {path}: {reason}")]
    InvalidHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong, in pi's words.
        reason: String,
    },
    /// One line of a session file is not a valid entry (`invalid_entry`).
    #[error("Invalid JSONL session file {path}: line {line} {reason}")]
    InvalidLine {
        /// The file.
        path: PathBuf,
        /// The line number, counting non-blank lines with the header as line 1.
        line: u64,
        /// What is wrong, in pi's words.
        reason: String,
    },
    /// A usage mistake: an ambiguous prefix, a malformed option value (`usage`).
    #[error("{0}")]
    Usage(String),
    /// An entry given through the API is not valid, or cannot be stored (`invalid_entry`).
    #[error("{0}")]
    InvalidEntry(String),
    /// The session cannot be used as asked (`invalid_session`).
    #[error("{0}")]
    InvalidSession(String),
    /// A session id that cannot become a file name, or a session that would
    /// export outside the directory asked for (`invalid_session`).
    #[error("session {id:?} {reason}")]
    UnsafeSessionId {
        /// The session id.
        id: String,
        /// Why it is refused.
        reason: String,
    },
    /// A pi file of an older format version, which opens read-only (`invalid_session`).
    #[error("{} is a version {version} session file: it opens read-only here; `sessiontree import` it and write to the archive session, or `sessiontree export` that session as a version 3 file", path.display())]
    ReadOnlyVersion {
        /// The file.
        path: PathBuf,
        /// Its format version.
        version: u32,
    },
    /// A file changed since it was imported in a way a merge by entry id
    /// cannot take in (`invalid_session`); `how` says how, and the step out.
    #[error("{} changed since it was imported as session {session}: {how}", path.display())]
    ImportedFileChanged {
        /// The file.
        path: PathBuf,
        /// The session it was imported as.
        session: String,
        /// How it changed, and the one step that resolves it.
        how: String,
    },
    /// A pi file and the archive hold an entry id with different content
    /// (`invalid_session`): nothing of that session was written.
    #[error("{}", conflict_message(session, path, conflicts))]
    MergeConflict {
        /// The session.
        session: String,
        /// pi's file.
        path: PathBuf,
        /// Each entry whose two sides differ.
        conflicts: Vec<MergeConflict>,
    },
    /// An export would write over a pi file of an older format (version 1
    /// or 2, or one pi upgraded that the archive knows by its old ids)
    /// (`invalid_session`): nothing written unless `--upgrade`.
    #[error("{} is {what}; export writes nothing over it. To rewrite it as version 3 with every entry of both (pi's file kept beside it as a .bak): sessiontree export {session} --out {} --upgrade", path.display(), shell_quote(&out.display().to_string()))]
    OldFormatFile {
        /// The file.
        path: PathBuf,
        /// The session.
        session: String,
        /// The `--out` the export was given.
        out: PathBuf,
        /// What the file is.
        what: String,
    },
    /// A fork target does not exist (`invalid_fork_target`).
    #[error("Entry {0} not found")]
    ForkTargetNotFound(String),
    /// A `before` fork names an entry that is not a user message (`invalid_fork_target`).
    #[error("Entry {0} is not a user message")]
    ForkTargetNotUserMessage(String),
    /// A file operation failed (`storage`, or `not_found` for a missing file).
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the path.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A file is in the way of an export and differs from what it would get (`storage`).
    #[error("{path} exists and is not a copy of the archive's session ({reason}); nothing written. Run the same export with --force to replace it (the old file is kept beside it as NAME.bak)")]
    WouldOverwrite {
        /// The file in the way.
        path: std::path::PathBuf,
        /// How it differs.
        reason: String,
    },
    /// SQLite failed (`storage`).
    #[error("{context}: {source}")]
    Sqlite {
        /// What was being done.
        context: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// PostgreSQL failed (`storage`): the server's message, SQLSTATE code,
    /// detail and hint, or the client's reason (a refused connection, a
    /// missing socket directory), with the causes beneath it.
    #[error("{context}: {message}")]
    Postgres {
        /// What was being done.
        context: String,
        /// What went wrong, in full ([`describe_postgres`]).
        message: String,
        /// The client's error (the server's message, code and detail).
        #[source]
        source: postgres::Error,
    },
    /// The connection pool could not hand out a connection (`storage`).
    #[error("connection pool: {0}")]
    Pool(#[from] r2d2::Error),
    /// Another writer holds the session (`storage`).
    #[error("session {session} is already open for writing by {holder}{hint}")]
    WriterClaimed {
        /// The session id.
        session: String,
        /// Who holds it: host, process id, claim token and lease.
        holder: String,
        /// What to do about it (`sessiontree unclaim`), from `; ` or `, `.
        hint: String,
    },
    /// The archive was written by a newer sessiontree (`storage`).
    #[error("database {path} has schema version {found}, newer than the {supported} this build knows; upgrade sessiontree")]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// The version stored in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// SQLite would not switch the archive to WAL journaling, which its
    /// readers and crash safety need (`storage`).
    #[error("{}: SQLite would not switch to WAL journaling (got {mode})", path.display())]
    JournalMode {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite kept.
        mode: String,
    },
    /// Stored bytes cannot be read back as they were written: a damaged
    /// compressed entry, a missing dictionary or blob (`storage`).
    #[error("{0}")]
    Corrupt(String),
    /// A store was poisoned by an earlier failed write and refuses further writes (`storage`).
    #[error("{0}")]
    Poisoned(String),
    /// A request that makes no sense (`unknown`).
    #[error("{0}")]
    Unknown(String),
}

impl Error {
    /// The contract code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::EntryNotFound(_) | Error::SessionNotFound(_) | Error::ArchiveNotFound(_) => {
                ErrorCode::NotFound
            }
            Error::DanglingReference(_)
            | Error::SessionExists(_)
            | Error::ParentCycle(_)
            | Error::InvalidHeader { .. }
            | Error::UnsafeSessionId { .. }
            | Error::ReadOnlyVersion { .. }
            | Error::ImportedFileChanged { .. }
            | Error::MergeConflict { .. }
            | Error::OldFormatFile { .. }
            | Error::InvalidSession(_) => ErrorCode::InvalidSession,
            Error::InvalidLine { .. } | Error::InvalidEntry(_) => ErrorCode::InvalidEntry,
            Error::ForkTargetNotFound(_) | Error::ForkTargetNotUserMessage(_) => {
                ErrorCode::InvalidForkTarget
            }
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                ErrorCode::NotFound
            }
            Error::Io { .. }
            | Error::Sqlite { .. }
            | Error::Postgres { .. }
            | Error::WouldOverwrite { .. }
            | Error::Pool(_)
            | Error::WriterClaimed { .. }
            | Error::SchemaTooNew { .. }
            | Error::JournalMode { .. }
            | Error::Corrupt(_)
            | Error::Poisoned(_) => ErrorCode::Storage,
            Error::Usage(_) => ErrorCode::Usage,
            Error::Unknown(_) => ErrorCode::Unknown,
        }
    }

    /// An I/O error with the context (naming the path) that caused it.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An SQLite error with the context that caused it; SQLite finding the
    /// file damaged becomes [`Error::Corrupt`], saying what to do.
    pub fn sqlite(context: impl Into<String>, source: rusqlite::Error) -> Self {
        if let rusqlite::Error::SqliteFailure(f, _) = &source {
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
            ) {
                return Error::Corrupt(format!(
                    "{}: {source}: the archive file is damaged; nothing more was written. Run `sessiontree check`, and restore the archive from a backup",
                    context.into()
                ));
            }
        }
        Error::Sqlite {
            context: context.into(),
            source,
        }
    }
}

impl Error {
    /// A PostgreSQL error with the context that caused it.
    pub fn postgres(context: impl Into<String>, source: postgres::Error) -> Self {
        Error::Postgres {
            context: context.into(),
            message: describe_postgres(&source),
            source,
        }
    }

    /// The SQLSTATE code of a PostgreSQL server error (`23505`), if this is one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Postgres { source, .. } => source.as_db_error().map(|d| d.code().code()),
            _ => None,
        }
    }
}

/// A PostgreSQL client error in words. The client's own `Display` says only
/// "db error" for everything the server reports; the server's severity,
/// message, SQLSTATE code, detail, hint and the object it names are in
/// [`postgres::Error::as_db_error`]. Any other error (I/O, a refused or
/// timed-out connection) is followed by its causes, which `Display` leaves
/// out ("error connecting to server: No such file or directory").
pub fn describe_postgres(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; detail: {detail}"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        let names = [
            ("schema", db.schema()),
            ("table", db.table()),
            ("column", db.column()),
            ("constraint", db.constraint()),
        ];
        for (what, name) in names {
            if let Some(name) = name {
                text.push_str(&format!("; {what} {name}"));
            }
        }
        return text;
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One entry id that pi's file and the archive hold with different content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeConflict {
    /// The entry id.
    pub entry: String,
    /// The archive's text of it (shortened).
    pub archive: String,
    /// The file's text of it (shortened).
    pub file: String,
}

/// The root of pi's layout a session file sits in (`ROOT/--cwd--/FILE`):
/// what `export --out` takes to write to that file again.
pub fn sessions_root_of(path: &std::path::Path) -> PathBuf {
    path.parent()
        .and_then(std::path::Path::parent)
        .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf)
}

/// A conflict's message: session, entries, both sources, and the one step
/// that resolves it (keep the archive's entries; pi's file is kept as a backup).
fn conflict_message(session: &str, path: &std::path::Path, conflicts: &[MergeConflict]) -> String {
    let mut m = format!(
        "session {session}: {} entr{} differ between pi's file {} and the archive; nothing of this session was written:",
        conflicts.len(),
        if conflicts.len() == 1 { "y" } else { "ies" },
        path.display()
    );
    for c in conflicts.iter().take(5) {
        m.push_str(&format!(
            "\n  entry {}: archive {} / file {}",
            c.entry, c.archive, c.file
        ));
    }
    if conflicts.len() > 5 {
        m.push_str(&format!("\n  … and {} more", conflicts.len() - 5));
    }
    m.push_str(&format!(
        "\nto keep the archive's copy and move pi's file aside to a .bak: sessiontree export {session} --out {} --force",
        shell_quote(&sessions_root_of(path).display().to_string())
    ));
    m
}

/// `s` quoted for a POSIX shell where it needs it.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:=@%,".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
