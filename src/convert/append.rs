//! The append import: the new lines of a file pi has appended to since
//! its import, written after the session's entries.

use super::hash::hash_prefix;
use super::pipeline::{pipelined, Source};
use super::plan::{FileImport, ImportOutcome, ImportReport};
use super::progress::ByteProgress;
use crate::backend::jsonl::{read_open_header, ReadStart};
use crate::backend::sqlite::{Archive, ImportRecord, SqliteStorage};
use crate::contract::Contract;
use crate::entry::Entry;
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
    // Entries after the imported prefix's last one that the file holds
    // next: what an append killed half-way committed (its import record,
    // written last, still names the old end), or what `export` appended to
    // the file from the archive. The append goes on after them.
    let mut held = Vec::new();
    if last_archived != last_imported {
        match held_since_import(
            &mut file,
            r,
            &storage,
            count,
            last_imported.as_deref(),
            last_archived.as_deref(),
        )? {
            Some(entries) => held = entries,
            None => {
                // Both sides wrote since the import: merged by id.
                drop(file);
                return merge_instead(archive, path, r, options);
            }
        }
    }
    drop(file);
    let held_count = held.len();
    // The session's length when the file was last imported: where the
    // appended lines' entries (and the lines kept among them) begin.
    let count = count - held_count;
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
            feed.already_held(held);
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
                let written = summary.entries.saturating_sub(held_count as u64);
                // Only lines the archive already held (`export` wrote them):
                // nothing new.
                let outcome = if written == 0 && held_count > 0 && skipped.is_empty() {
                    ImportOutcome::Unchanged
                } else {
                    ImportOutcome::Appended
                };
                let report = ImportReport::of(skipped, &summary, contract);
                // The last batch, at the archive's sync level; the claim goes.
                w.publish()?;
                Ok(FileImport {
                    session_id: r.session_id.clone(),
                    outcome,
                    entries: written,
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

/// The archive's entries after the imported prefix's last entry
/// (`last_imported`), if they are the entries on the file's first lines
/// after the prefix (from byte `r.bytes`), in order and the same (id and
/// value), the archive's last, `last_archived`, among them; `None` if the
/// archive holds anything else after it.
fn held_since_import(
    file: &mut File,
    r: &ImportRecord,
    storage: &SqliteStorage,
    count: usize,
    last_imported: Option<&str>,
    last_archived: Option<&str>,
) -> Result<Option<Vec<Entry>>> {
    let io = |e| Error::io("reading an imported file's new lines", e);
    let Some(last_archived) = last_archived else {
        return Ok(None);
    };
    let mut rest = Vec::new();
    file.seek(SeekFrom::Start(r.bytes)).map_err(io)?;
    file.read_to_end(&mut rest).map_err(io)?;
    // The lines holding an entry id, with it.
    let lines: Vec<(String, &[u8])> = rest
        .split(|&b| b == b'\n')
        .filter(|l| l.iter().any(|b| !b" \t\r".contains(b)))
        .filter_map(|l| last_entry_id(l).map(|id| (id, l)))
        .collect();
    let Some(at) = lines.iter().position(|(id, _)| id == last_archived) else {
        return Ok(None);
    };
    let held = at + 1;
    if held > count {
        return Ok(None);
    }
    let start = count - held;
    let mut archived = storage.entries(start.saturating_sub(1), None)?;
    let before = match start {
        0 => None,
        _ => Some(archived.remove(0).id().to_owned()),
    };
    let same = before.as_deref() == last_imported
        && archived.len() == held
        && archived.iter().zip(&lines).all(|(e, (id, line))| {
            e.id() == id && super::merge::same_entry(e.json(), &String::from_utf8_lossy(line))
        });
    Ok(same.then_some(archived))
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
