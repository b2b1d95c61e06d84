//! The import plan: what importing a file comes to (unchanged, appended
//! to, changed, or new), decided before anything is written.

use super::hash::{hash_prefix_reporting, PrefixHash};
use super::progress::ByteProgress;
use crate::backend::jsonl::{read_open_header, ReadSummary, SkippedLine, TornTail};
use crate::backend::sqlite::{Archive, ImportRecord};
use crate::contract::Contract;
use crate::error::{Error, Result};
use crate::header::Header;
use crate::layout::check_session_id;
use std::path::{Path, PathBuf};

/// What importing one file did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    /// A new session was created.
    Imported,
    /// The file grew since its last import; its new entries were appended.
    Appended,
    /// Nothing to do: the file is as it was last imported.
    Unchanged,
    /// The session id is already in the archive from another source; skipped.
    AlreadyPresent,
    /// Another process is importing this file right now; skipped.
    InProgressElsewhere,
}

/// The result of importing one file.
#[derive(Debug, Clone)]
pub struct FileImport {
    /// The session id.
    pub session_id: String,
    /// What happened.
    pub outcome: ImportOutcome,
    /// Entries written.
    pub entries: u64,
    /// Bytes of the file read.
    pub bytes_read: u64,
    /// A torn final line left out (pi may be writing it right now); a later
    /// import picks it up once complete.
    pub torn_tail: Option<TornTail>,
    /// What the import found that pi 1.6 skips or would rewrite.
    pub report: ImportReport,
}

/// What an import found in a file besides its entries: the lines pi 1.6
/// skips (kept verbatim in the archive), the contract the session follows,
/// and what pi 1.6 would rewrite in the file when it opens it (never done to
/// the user's file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// The lines kept verbatim, in file order (blank ones included).
    pub kept: Vec<SkippedLine>,
    /// The contract the session follows, if it was written.
    pub contract: Option<Contract>,
    /// What pi 1.6 would do to the file on open, each to follow `pi 1.6 will `.
    pub pi_rewrites: Vec<String>,
    /// Entries the archive holds that the file no longer has (someone
    /// truncated or rewrote it since it was imported); the archive keeps them.
    pub archive_only: u64,
}

impl ImportReport {
    /// The report of a file read: its kept lines and pi 1.6's rewrites.
    pub(super) fn of(kept: Vec<SkippedLine>, summary: &ReadSummary, contract: Contract) -> Self {
        let mut pi_rewrites = Vec::new();
        match summary.header.version {
            1 => pi_rewrites.push(
                "upgrade this file on open: version 1 to 3, every entry given a new random id"
                    .into(),
            ),
            2 => pi_rewrites.push("upgrade this file on open: version 2 to 3".into()),
            _ => {}
        }
        if summary.missing_final_newline || summary.torn_tail.is_some() {
            pi_rewrites.push("append a final newline to this file on open".into());
        }
        ImportReport {
            kept,
            contract: Some(contract),
            pi_rewrites,
            archive_only: 0,
        }
    }
}

pub(super) fn file_facts(path: &Path) -> Result<(String, u64, i64)> {
    super::door::admit(path)?;
    let io = |e| Error::io(format!("Failed to read session {}", path.display()), e);
    let canon = std::fs::canonicalize(path).map_err(io)?;
    let meta = std::fs::metadata(&canon).map_err(io)?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Ok((canon.to_string_lossy().into_owned(), meta.len(), mtime))
}

/// What importing a file comes to, decided before anything is written.
pub(super) enum Plan {
    /// Nothing (more) to write.
    Done(FileImport),
    /// A file not imported before.
    New(NewFile),
    /// A file holding session `session` of the archive, to merge by entry
    /// id: changed since its import other than by appending, or (`present`)
    /// never imported from this path.
    Merge {
        session: String,
        canon: String,
        present: bool,
    },
    /// A file pi has appended to since its import `record`.
    Append {
        record: ImportRecord,
        size: u64,
        mtime: i64,
    },
}

/// A file to import as a new session.
pub(super) struct NewFile {
    pub(super) path: PathBuf,
    /// Its canonical path, as its import record names it.
    pub(super) canon: String,
    pub(super) size: u64,
    pub(super) mtime: i64,
    pub(super) header: Header,
}

/// Looks at `path` and the archive's record of it: unchanged, appended to
/// (the imported prefix is hashed, reported to `progress`), changed or
/// holding a session the archive has (a merge by id), or new (its header
/// read and checked).
pub(super) fn plan_import(
    archive: &Archive,
    path: &Path,
    (canon, size, mtime): (String, u64, i64),
    progress: &mut ByteProgress<'_>,
) -> Result<Plan> {
    let unchanged = |r: &ImportRecord| {
        Plan::Done(FileImport {
            session_id: r.session_id.clone(),
            outcome: ImportOutcome::Unchanged,
            entries: 0,
            bytes_read: 0,
            torn_tail: None,
            report: ImportReport::default(),
        })
    };
    match archive.import_record(&canon)? {
        Some(r) if r.file_size == size && r.file_mtime == mtime => Ok(unchanged(&r)),
        Some(r)
            if size >= r.bytes
                && hash_prefix_reporting(
                    path,
                    r.bytes,
                    PrefixHash::like(&r.prefix_hash),
                    Some(progress),
                )? == r.prefix_hash =>
        {
            if size == r.bytes {
                archive.write_session(|w| {
                    w.resume(&r.session_id)?;
                    w.record_import(&ImportRecord {
                        file_size: size,
                        file_mtime: mtime,
                        ..r.clone()
                    })
                })?;
                return Ok(unchanged(&r));
            }
            Ok(Plan::Append {
                record: r,
                size,
                mtime,
            })
        }
        // Changed otherwise (pi rewrote it: an upgrade of a version 1 or 2
        // file; or lines the archive wrote went in by export): merged by id.
        Some(r) if read_open_header(path)?.id == r.session_id => Ok(Plan::Merge {
            session: r.session_id,
            canon,
            present: false,
        }),
        // The path holds another session now: imported as the file it is.
        Some(_) | None => {
            let header = read_open_header(path)?;
            // An id that could not be exported (a path, `..`) is refused at the door.
            check_session_id(&header.id)?;
            let skipped = |session_id, outcome| {
                Plan::Done(FileImport {
                    session_id,
                    outcome,
                    entries: 0,
                    bytes_read: 0,
                    torn_tail: None,
                    report: ImportReport::default(),
                })
            };
            // An earlier import of this file that never published: another
            // process is still at it, or it died and its batches go.
            if let Some(id) = archive.discard_dead_staged_import(&canon)? {
                return Ok(skipped(id, ImportOutcome::InProgressElsewhere));
            }
            // The session from another file (pi renamed or moved it, or a
            // copy): merged by id, so pi's later entries are not stranded.
            if archive.has_session(&header.id)? {
                return Ok(Plan::Merge {
                    session: header.id,
                    canon,
                    present: true,
                });
            }
            Ok(Plan::New(NewFile {
                path: path.to_owned(),
                canon,
                size,
                mtime,
                header,
            }))
        }
    }
}

/// How files are imported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Whose rules the imported sessions follow; detected from each file's
    /// entries when `None` (the SDK's if it holds a `leaf` or
    /// `active_tools_change` entry, else the pi app's). `import --rules`.
    pub rules: Option<Contract>,
}
