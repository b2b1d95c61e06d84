//! The append import: the new lines of a file pi has appended to since
//! its import, written after the session's entries.

use super::hash::hash_prefix;
use super::pipeline::{pipelined, Source};
use super::plan::{FileImport, ImportOutcome, ImportReport};
use super::progress::ByteProgress;
use crate::backend::jsonl::{read_open_header, ReadStart};
use crate::backend::sqlite::{Archive, ImportRecord, SqliteStorage};
use crate::contract::Contract;
use crate::error::{Error, Result};
use crate::storage::SessionStorage;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

pub(super) fn append_new_lines(
    archive: &Archive,
    path: &Path,
    r: &ImportRecord,
    size: u64,
    mtime: i64,
    options: &super::plan::ImportOptions,
    progress: &mut ByteProgress<'_>,
) -> Result<FileImport> {
    let header = read_open_header(path)?;
    if header.version != 3 {
        // A version 1 or 2 file that grew is merged by id (pi writes only
        // version 3 lines; an old file that grew in place is someone's edit).
        return merge_instead(archive, path, r, options);
    }
    let io = |e| Error::io(format!("Failed to read session {}", path.display()), e);
    let mut file = File::open(path).map_err(io)?;
    // The archive's copy must still end where the imported prefix ends: if
    // it was written since (the archive is then its source of truth), pi's
    // new lines would be mixed into a log that has moved on.
    let last_imported = last_entry_id(&last_line_before(&mut file, r.bytes).map_err(io)?);
    let storage = archive.open_session(&r.session_id)?;
    let count = storage.entry_count()?;
    let open_end = storage.kept_lines()?.open_end;
    let stored_contract = storage.contract()?;
    let last_archived = match count {
        0 => None,
        n => storage
            .entries(n - 1, Some(1))?
            .first()
            .map(|e| e.id().to_owned()),
    };
    if last_archived != last_imported {
        // Unless the file caught up with the archive: `export` appended the
        // archive's new entries to it. Then it is recorded as imported whole.
        if caught_up(
            &mut file,
            r,
            size,
            &storage,
            count,
            last_imported.as_deref(),
        )? {
            let record = ImportRecord {
                bytes: size,
                prefix_hash: hash_prefix(path, size)?,
                lines: r.lines + count_nonblank_lines(&mut file, r.bytes).map_err(io)?,
                file_size: size,
                file_mtime: mtime,
                ..r.clone()
            };
            archive.write_session(|w| {
                w.resume(&r.session_id)?;
                w.record_import(&record)
            })?;
            return Ok(FileImport {
                session_id: r.session_id.clone(),
                outcome: ImportOutcome::Unchanged,
                entries: 0,
                bytes_read: 0,
                torn_tail: None,
                report: ImportReport::default(),
            });
        }
        // Both sides wrote since the import: merged by id.
        drop(file);
        return merge_instead(archive, path, r, options);
    }
    let source = Source {
        path: path.to_owned(),
        start: ReadStart::After {
            header,
            offset: r.bytes,
            lines: r.lines,
        },
        hash: false,
    };
    pipelined(
        vec![source],
        || Ok(()),
        |feed| {
            archive.write_session(|w| {
                // In batches: pi may have appended thousands of lines.
                w.resume_batched(&r.session_id)?;
                let read = feed.write(w, progress)?;
                let summary = read.summary;
                let base = i64::try_from(count).unwrap_or(i64::MAX);
                let mut skipped = read.skipped;
                // The `\n` pi wrote first, ending the line the file ended on.
                if open_end == Some(base)
                    && skipped
                        .first()
                        .is_some_and(|l| l.entries_before == 0 && l.text.is_empty())
                {
                    skipped.remove(0);
                }
                super::pipeline::keep_lines(w, &skipped, base, &summary)?;
                let contract = match options.rules {
                    Some(rules) => rules,
                    None if summary.sdk_only_entries => Contract::Sdk,
                    None => stored_contract,
                };
                if contract != stored_contract {
                    w.set_contract(contract)?;
                }
                w.record_import(&ImportRecord {
                    source_path: r.source_path.clone(),
                    session_id: r.session_id.clone(),
                    bytes: summary.complete_bytes,
                    prefix_hash: hash_prefix(path, summary.complete_bytes)?,
                    lines: summary.lines,
                    file_size: size,
                    file_mtime: mtime,
                })?;
                let report = ImportReport::of(skipped, &summary, contract);
                // The last batch, at the archive's sync level; the claim goes.
                w.publish()?;
                Ok(FileImport {
                    session_id: r.session_id.clone(),
                    outcome: ImportOutcome::Appended,
                    entries: summary.entries,
                    bytes_read: summary.bytes - r.bytes,
                    torn_tail: summary.torn_tail,
                    report,
                })
            })
        },
    )
}

/// The file merged into the session by entry id instead of appended.
fn merge_instead(
    archive: &Archive,
    path: &Path,
    r: &ImportRecord,
    options: &super::plan::ImportOptions,
) -> Result<FileImport> {
    super::merge::merge_file_into_archive(
        archive,
        path,
        &r.source_path,
        &r.session_id,
        options.rules,
    )
    .map(|(done, _)| done)
}

/// The last line holding more than blanks among the first `end` bytes of
/// `file` (empty if there is none), read backwards so that only the tail is read.
fn last_line_before(file: &mut File, end: u64) -> std::io::Result<Vec<u8>> {
    const STEP: u64 = 64 * 1024;
    let mut tail: Vec<u8> = Vec::new();
    let mut pos = end;
    loop {
        let content_end = tail
            .iter()
            .rposition(|b| !b" \t\r\n".contains(b))
            .map(|i| i + 1);
        match content_end {
            Some(e) => {
                if let Some(nl) = tail[..e].iter().rposition(|&b| b == b'\n') {
                    return Ok(tail[nl + 1..e].to_vec());
                }
                if pos == 0 {
                    return Ok(tail[..e].to_vec());
                }
            }
            None if pos == 0 => return Ok(Vec::new()),
            None => {}
        }
        let step = pos.min(STEP);
        pos -= step;
        let mut chunk = vec![0; usize::try_from(step).unwrap_or(0)];
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&tail);
        tail = chunk;
    }
}

/// The ids of the entries on the lines of `file` from `from` to its end.
fn ids_from(file: &mut File, from: u64) -> std::io::Result<(Vec<Option<String>>, bool)> {
    let mut rest = Vec::new();
    file.seek(SeekFrom::Start(from))?;
    file.read_to_end(&mut rest)?;
    let complete = rest.last().is_none_or(|&b| b == b'\n');
    let ids = rest
        .split(|&b| b == b'\n')
        .filter(|l| l.iter().any(|b| !b" \t\r".contains(b)))
        .map(last_entry_id)
        .collect();
    Ok((ids, complete))
}

/// Non-blank lines of `file` from `from` to its end.
fn count_nonblank_lines(file: &mut File, from: u64) -> std::io::Result<u64> {
    Ok(ids_from(file, from)?.0.len() as u64)
}

/// Whether the lines of `file` after the imported prefix are exactly the
/// entries the archive's session holds after the prefix's last entry (what
/// `export` appends to a file that is a prefix of the session).
fn caught_up(
    file: &mut File,
    r: &ImportRecord,
    size: u64,
    storage: &SqliteStorage,
    count: usize,
    last_imported: Option<&str>,
) -> Result<bool> {
    let io = |e| Error::io("reading an imported file's new lines", e);
    if size <= r.bytes {
        return Ok(false);
    }
    let (ids, complete) = ids_from(file, r.bytes).map_err(io)?;
    if !complete || ids.is_empty() || ids.len() > count {
        return Ok(false);
    }
    let start = count - ids.len();
    let archived: Vec<Option<String>> = storage
        .entries(start.saturating_sub(1), None)?
        .iter()
        .map(|e| Some(e.id().to_owned()))
        .collect();
    let (before, after) = if start == 0 {
        (None, archived.as_slice())
    } else {
        (archived[0].clone(), &archived[1..])
    };
    Ok(before.as_deref() == last_imported && after == ids.as_slice())
}

/// The entry id a file line holds, `None` for the header (or no entry).
fn last_entry_id(line: &[u8]) -> Option<String> {
    let value = crate::json::parse_value_lossy(&String::from_utf8_lossy(line)).ok()?;
    if value.get("type").and_then(serde_json::Value::as_str) == Some("session") {
        return None;
    }
    value
        .get("id")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}
