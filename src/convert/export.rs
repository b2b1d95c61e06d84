//! Export: a session written as a pi JSONL file, without destroying what
//! is at its path.

use crate::backend::jsonl::JsonlStorage;
use crate::backend::sqlite::SqliteStorage;
use crate::contract::Contract;
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use crate::storage::SessionStorage;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

/// Writes a session of the archive as a pi JSONL file: its header line, then
/// every entry in log order, exactly as imported or appended.
pub fn export_jsonl(storage: &SqliteStorage, out: &mut impl Write) -> Result<()> {
    write_session_file(&storage.header_json()?, storage, out, &mut |_| {})
}

/// Entries between two reports of an export's progress.
const EXPORT_PROGRESS_STEP: u64 = 256;

/// A session as its program reads it, in pi's version-3 file: `header`,
/// then every entry's exact text, one a line, streamed (bounded memory
/// however long the log), with the lines of the imported file that pi skips
/// back where they were and the final `\n` left out where the file had none
/// and nothing was appended since ([`SessionStorage::kept_lines`]): an
/// untouched session exports byte-identical to the file imported. An app
/// session's `leaf` entries (the SDK's; pi 1.6 would take one for an
/// ordinary entry and resume on it) are left out. `progress` hears the
/// entries written so far (about every [`EXPORT_PROGRESS_STEP`] entries, and
/// at the end).
fn write_session_file(
    header: &str,
    storage: &dyn SessionStorage,
    out: &mut impl Write,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let id = storage.metadata()?.id;
    let io = |e| Error::io(format!("exporting session {id}"), e);
    let kept = storage.kept_lines()?;
    let drop_leaves = storage.contract()? == Contract::App;
    let mut kept_lines = kept.lines.iter().peekable();
    // Each line's `\n` is written when the next line comes, or at the end.
    let mut started = false;
    let mut line = |out: &mut dyn Write, text: &[u8]| -> std::io::Result<()> {
        if std::mem::replace(&mut started, true) {
            out.write_all(b"\n")?;
        }
        out.write_all(text)
    };
    while let Some(k) = kept_lines.next_if(|k| k.position < 0) {
        line(out, &k.text).map_err(io)?;
    }
    line(out, header.as_bytes()).map_err(io)?;
    let mut position = 0i64;
    let mut written = 0u64;
    storage.visit_entries(0, None, &mut |json| {
        while let Some(k) = kept_lines.next_if(|k| k.position <= position) {
            line(out, &k.text).map_err(io)?;
        }
        position += 1;
        if drop_leaves && is_leaf_line(&json) {
            return Ok(());
        }
        line(out, json.as_bytes()).map_err(io)?;
        written += 1;
        if written.is_multiple_of(EXPORT_PROGRESS_STEP) {
            progress(written);
        }
        Ok(())
    })?;
    for k in kept_lines {
        line(out, &k.text).map_err(io)?;
    }
    if kept.open_end != Some(position) {
        out.write_all(b"\n").map_err(io)?;
    }
    if written == 0 || !written.is_multiple_of(EXPORT_PROGRESS_STEP) {
        progress(written);
    }
    out.flush().map_err(io)
}

/// Whether an entry's stored text is a `leaf` entry's.
fn is_leaf_line(json: &str) -> bool {
    // Most entries are not: a cheap look for the type's spelling first.
    memchr::memmem::find(json.as_bytes(), b"\"leaf\"").is_some()
        && *Entry::from_checked_text(json.to_owned()).entry_type() == EntryType::Leaf
}

/// What pi 1.6 will do with an app session written by export that the
/// archive sees otherwise: where the archive's leaf is not the last entry
/// written (a `leaf` entry moved it, and no `branch_summary` records the
/// move), pi resumes at the last entry. `None` for an SDK session, or when
/// pi resumes where the archive's leaf is.
pub fn app_resume_note(storage: &dyn SessionStorage) -> Result<Option<String>> {
    if storage.contract()? != Contract::App {
        return Ok(None);
    }
    let Some(leaf) = storage.stored_leaf_id()? else {
        return Ok(None);
    };
    let count = storage.entry_count()?;
    // The last entry pi will read: the last one that is not a `leaf` entry.
    let mut last = None;
    let mut at = count;
    while at > 0 && last.is_none() {
        let from = at.saturating_sub(64);
        let page = storage.entries(from, Some(at - from))?;
        last = page
            .iter()
            .rev()
            .find(|e| *e.entry_type() != EntryType::Leaf)
            .map(|e| e.id().to_owned());
        at = from;
    }
    match last {
        Some(last) if last != leaf => Ok(Some(format!(
            "session {}: pi will resume at the last entry {last}, not at the archive's leaf {leaf} (an app session records a move only with a branch_summary: `sessiontree move --summary`)",
            storage.metadata()?.id
        ))),
        _ => Ok(None),
    }
}

/// What [`export_to_file`] did with the file at its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportOutcome {
    /// Nothing was there; the file was created.
    Created,
    /// The file there already held exactly this session.
    Unchanged,
    /// The file there was a prefix of this session; the rest was appended.
    Appended {
        /// Bytes appended.
        bytes: u64,
    },
    /// The file there differed and `force` replaced it; the old one was kept.
    Replaced {
        /// Where the old file now is.
        backup: std::path::PathBuf,
    },
}

/// Writes a session as a pi JSONL file at `path` without destroying anything:
/// it creates the file where nothing is, leaves a byte-identical file alone,
/// appends the rest to a file that is a prefix of the session (pi's file
/// before later appends reached the archive), and refuses any other file
/// ([`Error::WouldOverwrite`]) unless `force`, which moves it aside to
/// `NAME.bak` (or `NAME.bak.N`) first. The session is written and fsynced to
/// a temporary file beside `path` before anything at `path` is touched.
pub fn export_to_file(storage: &SqliteStorage, path: &Path, force: bool) -> Result<ExportOutcome> {
    export_to_file_with_progress(storage, path, force, &mut |_| {})
}

/// [`export_to_file`], telling `progress` how many of the session's entries
/// have been written so far (increasing, about every 256 entries, and once
/// at the end with all of them). Called on this thread.
pub fn export_to_file_with_progress(
    storage: &SqliteStorage,
    path: &Path,
    force: bool,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportOutcome> {
    export_storage_to_file(&storage.header_json()?, storage, path, force, progress)
}

/// [`export_to_file`] for a session file: a pi file of any version written
/// again as version 3 (its entries upgraded as pi reads them), by the same
/// rules at `path`.
pub fn export_file_to_file(
    source: &JsonlStorage,
    path: &Path,
    force: bool,
) -> Result<ExportOutcome> {
    export_storage_to_file(&source.header().json, source, path, force, &mut |_| {})
}

/// Writes `header` (the session header line) and `storage`'s entries at
/// `path` by the rules of [`export_to_file`]: any storage, a session of a
/// team archive say.
pub fn export_storage_to_file(
    header: &str,
    storage: &dyn SessionStorage,
    path: &Path,
    force: bool,
    progress: &mut dyn FnMut(u64),
) -> Result<ExportOutcome> {
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".sessiontree-tmp");
    let tmp = dir.join(tmp_name);
    // A temporary file of this name is ours: left by a killed export, never a user's.
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let file = File::create(&tmp).map_err(|e| io("writing", &tmp, e))?;
        let mut w = std::io::BufWriter::new(file);
        write_session_file(header, storage, &mut w, progress)?;
        let file = w
            .into_inner()
            .map_err(|e| io("writing", &tmp, e.into_error()))?;
        file.sync_all().map_err(|e| io("writing", &tmp, e))?;
        drop(file);
        place_export(&tmp, path, force)
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

/// Puts the finished export `tmp` at `path` by the rules of [`export_to_file`].
fn place_export(tmp: &Path, path: &Path, force: bool) -> Result<ExportOutcome> {
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    // A hard link creates `path` only if nothing is there (no window in which
    // a file pi just wrote could be replaced).
    match std::fs::hard_link(tmp, path) {
        Ok(()) => return Ok(ExportOutcome::Created),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) if std::fs::symlink_metadata(path).is_err() => {
            // No hard links on this file system: rename, after checking again.
            std::fs::rename(tmp, path).map_err(|e| io("writing", path, e))?;
            return Ok(ExportOutcome::Created);
        }
        Err(e) => return Err(io("writing", path, e)),
    }
    let ours_len = std::fs::metadata(tmp)
        .map_err(|e| io("reading", tmp, e))?
        .len();
    let (mut theirs, theirs_meta) = super::safe_write::open_regular(path)?;
    let theirs_len = theirs_meta.len();
    let mut ours = File::open(tmp).map_err(|e| io("reading", tmp, e))?;
    let common = common_prefix(&mut theirs, &mut ours).map_err(|e| io("comparing", path, e))?;
    if common == theirs_len && common == ours_len {
        return Ok(ExportOutcome::Unchanged);
    }
    if common == theirs_len {
        let seen = super::safe_write::Seen::of(&theirs_meta);
        let bytes = super::safe_write::replace_grown(tmp, path, &seen, &theirs_meta)?;
        return Ok(ExportOutcome::Appended { bytes });
    }
    if !force {
        let reason = if common == ours_len {
            format!(
                "it has {} bytes more than the archive's copy",
                theirs_len - ours_len
            )
        } else {
            format!("they differ from byte {common} on")
        };
        return Err(Error::WouldOverwrite {
            path: path.to_owned(),
            reason,
        });
    }
    let backup = free_backup_path(path);
    std::fs::rename(path, &backup).map_err(|e| io("moving aside", path, e))?;
    std::fs::rename(tmp, path).map_err(|e| io("writing", path, e))?;
    Ok(ExportOutcome::Replaced { backup })
}

/// How many leading bytes two readers share.
fn common_prefix(a: &mut impl Read, b: &mut impl Read) -> std::io::Result<u64> {
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let mut common = 0u64;
    loop {
        let na = read_full(a, &mut ba)?;
        let nb = read_full(b, &mut bb)?;
        let n = na.min(nb);
        let same = ba[..n]
            .iter()
            .zip(&bb[..n])
            .take_while(|(x, y)| x == y)
            .count();
        common += same as u64;
        if same < n || na != nb || na == 0 {
            return Ok(common);
        }
    }
}

/// Fills `buf` as far as the reader goes; returns how much was read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// `NAME.bak`, or `NAME.bak.N` for the first N not taken.
fn free_backup_path(path: &Path) -> std::path::PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut candidate = path.with_file_name(format!("{name}.bak"));
    let mut n = 1;
    while std::fs::symlink_metadata(&candidate).is_ok() {
        candidate = path.with_file_name(format!("{name}.bak.{n}"));
        n += 1;
    }
    candidate
}
