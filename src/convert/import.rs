//! Importing pi session files into an archive: one file, or many in
//! grouped transactions.

use super::append::append_new_lines;
use super::hash::hash_prefix;
use super::pipeline::{keep_lines, pipelined, FileRead, Source};
use super::plan::{
    file_facts, plan_import, FileImport, ImportOptions, ImportOutcome, ImportReport, NewFile, Plan,
};
use super::progress::ByteProgress;
use crate::backend::pending::TailClock;
use crate::backend::sqlite::{Archive, ImportRecord, NewSession, SessionWriter};
use crate::contract::Contract;
use crate::error::{Error, Result};
use crate::header::Header;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// Trains the archive's first compression dictionary from the files about
/// to be imported, unless it has one (a later `compact` retrains on the
/// whole archive). Reads at most the training budget, spread over the
/// files; returns the dictionary's size if one was trained.
pub fn train_dictionary_for(
    archive: &Archive,
    files: &[std::path::PathBuf],
) -> Result<Option<usize>> {
    use crate::backend::sqlite::codec::IMPORT_TRAINING_BUDGET as TRAINING_BUDGET;
    if files.is_empty() || archive.has_dictionary()? {
        return Ok(None);
    }
    let per_file = (TRAINING_BUDGET / files.len()).max(64 << 10);
    let mut samples = Vec::new();
    let mut total = 0;
    for file in files {
        let Ok(f) = super::door::open_regular(file) else {
            continue;
        };
        let mut taken = 0;
        // The header line teaches nothing entries share.
        for line in BufReader::new(f).split(b'\n').skip(1) {
            let Ok(line) = line else { break };
            taken += line.len();
            total += line.len();
            samples.push(line);
            if taken >= per_file || total >= TRAINING_BUDGET {
                break;
            }
        }
        if total >= TRAINING_BUDGET {
            break;
        }
    }
    archive.train_first_dictionary(&samples)
}

/// Imports a pi session file (version 1, 2 or 3) into the archive, streaming
/// (memory bounded by the longest line, not the file) and atomically (a bad
/// line imports nothing of the file, and the error names the file and line).
pub fn import_jsonl(archive: &Archive, path: &Path) -> Result<FileImport> {
    import_jsonl_with_progress(archive, path, &mut |_| {})
}

/// [`import_jsonl`], telling `progress` how far into the file it has got, in
/// bytes: increasing, about every megabyte, and at the end the bytes read
/// (the file's size for a file read whole; a file appended to counts from
/// the start, its prefix being hashed). Not called for a file whose size and
/// modification time are as last imported. Called on this thread, so the
/// callback need not be `Send`.
pub fn import_jsonl_with_progress(
    archive: &Archive,
    path: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<FileImport> {
    import_jsonl_with(archive, path, &ImportOptions::default(), progress)
}

/// [`import_jsonl_with_progress`] with `options`.
pub fn import_jsonl_with(
    archive: &Archive,
    path: &Path,
    options: &ImportOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<FileImport> {
    let mut progress = ByteProgress::new(progress);
    let plan = plan_import(archive, path, file_facts(path)?, &mut progress)?;
    carry_out(archive, path, plan, options, &mut progress)
}

/// Writes what `plan` says for the file at `path`, alone.
fn carry_out(
    archive: &Archive,
    path: &Path,
    plan: Plan,
    options: &ImportOptions,
    progress: &mut ByteProgress<'_>,
) -> Result<FileImport> {
    match plan {
        Plan::Done(done) => Ok(done),
        Plan::New(file) => import_new(archive, &file, options, progress),
        Plan::Append {
            record,
            size,
            mtime,
        } => append_new_lines(archive, path, &record, size, mtime, options, progress),
        Plan::Merge {
            session,
            canon,
            present,
        } => {
            let (mut done, _) = super::merge::merge_file_into_archive(
                archive,
                path,
                &canon,
                &session,
                options.rules,
            )?;
            if present && done.outcome == ImportOutcome::Unchanged {
                done.outcome = ImportOutcome::AlreadyPresent;
            }
            progress.reached(done.bytes_read);
            Ok(done)
        }
    }
}

/// The most bytes of files [`import_jsonl_files`] writes in one transaction
/// (the batch clock, [`TailClock`], usually ends a group sooner), and the
/// largest file written whole in one: bigger files are each imported in a
/// staged write of their own, in batches.
const GROUP_BYTES: u64 = 4 << 20;

/// Imports many files, as [`import_jsonl`] each, returning each file's
/// result in `paths`' order; `progress` hears (file index, bytes into it),
/// a file at a time (a file whose group is rolled back is heard again when
/// it is imported alone). A first dictionary is trained from all of them.
/// New files up to [`GROUP_BYTES`] are written first, several to a
/// transaction, while the next ones are read: one commit, one sync and one
/// search-index flush per group instead of per file (a group with a bad file
/// in it is imported a file at a time, so a bad file still imports nothing
/// of itself and the others go on). The other files follow, each alone.
pub fn import_jsonl_files(
    archive: &Archive,
    paths: &[PathBuf],
    progress: &mut dyn FnMut(usize, u64),
) -> Result<Vec<Result<FileImport>>> {
    import_jsonl_files_with(archive, paths, &ImportOptions::default(), progress)
}

/// [`import_jsonl_files`] with `options`.
pub fn import_jsonl_files_with(
    archive: &Archive,
    paths: &[PathBuf],
    options: &ImportOptions,
    progress: &mut dyn FnMut(usize, u64),
) -> Result<Vec<Result<FileImport>>> {
    if paths.len() > 1 {
        train_dictionary_for(archive, paths)?;
    }
    let mut results: Vec<Option<Result<FileImport>>> = paths.iter().map(|_| None).collect();
    let mut grouped: Vec<(usize, NewFile)> = Vec::new();
    let mut alone: Vec<(usize, Plan)> = Vec::new();
    // A file left without a result here is imported last, as if alone, in
    // the order named: a file named again (two roots holding it, a symlink)
    // finds its record; of two files holding one session the first named is
    // imported whatever their sizes (groups go before the files imported
    // alone); a group rolled back (a bad file in it, the lock, the commit)
    // has its files planned again, as they are now.
    let mut canons = std::collections::HashSet::new();
    let mut session_ids = std::collections::HashSet::new();
    for (index, path) in paths.iter().enumerate() {
        let facts = match file_facts(path) {
            Ok(facts) => facts,
            Err(e) => {
                results[index] = Some(Err(e));
                continue;
            }
        };
        if !canons.insert(facts.0.clone()) {
            continue;
        }
        let mut report = |at| progress(index, at);
        match plan_import(archive, path, facts, &mut ByteProgress::new(&mut report)) {
            Err(e) => results[index] = Some(Err(e)),
            Ok(Plan::Done(done)) => results[index] = Some(Ok(done)),
            Ok(Plan::New(file)) if !session_ids.insert(file.header.id.clone()) => {}
            Ok(Plan::New(file)) if file.size <= GROUP_BYTES => grouped.push((index, file)),
            Ok(plan) => alone.push((index, plan)),
        }
    }
    write_grouped(archive, &grouped, options, progress, &mut results);
    for (index, plan) in alone {
        let mut report = |at| progress(index, at);
        let mut file_progress = ByteProgress::new(&mut report);
        results[index] = Some(carry_out(
            archive,
            &paths[index],
            plan,
            options,
            &mut file_progress,
        ));
    }
    Ok(results
        .into_iter()
        .enumerate()
        .map(|(index, result)| {
            result.unwrap_or_else(|| {
                import_jsonl_with(archive, &paths[index], options, &mut |at| {
                    progress(index, at)
                })
            })
        })
        .collect())
}

/// Imports a new file in a staged write of its own: in short transactions
/// (other writers get the lock between them), invisible until published,
/// so the file is imported whole or not at all as far as any reader can tell.
fn import_new(
    archive: &Archive,
    file: &NewFile,
    options: &ImportOptions,
    progress: &mut ByteProgress<'_>,
) -> Result<FileImport> {
    // An archive without a dictionary gets its first one from this file,
    // trained while the reader parses ahead.
    let train = || train_dictionary_for(archive, std::slice::from_ref(&file.path)).map(drop);
    let imported = pipelined(vec![Source::new_file(file)], train, |feed| {
        archive.write_session(|w| {
            w.begin_staged(&new_session_from_header(&file.header), &file.canon)?;
            let read = feed.write(w, progress)?;
            let imported = record_new_file(w, file, read, options)?;
            w.publish()?;
            Ok(imported)
        })
    });
    imported.or_else(|e| lost_race(archive, file, e))
}

/// Writes `files` (all new, none bigger than [`GROUP_BYTES`]) in groups,
/// a transaction each, while one reader reads ahead through all of them;
/// puts each file's result in `results` once its group has committed. A
/// group ends at a file's end once it holds [`GROUP_BYTES`], or once its
/// time plus the tail of search rows and commit the groups before it took
/// reaches the batch clock ([`TailClock`]): a group of small files holds
/// the write lock about as long as one batch of a staged import. A group
/// is written whole or not at all: one failing file (a bad line, a session
/// already there) rolls it back, and its files get no results here, to be
/// imported one by one. (A savepoint per file instead would cost every
/// file a search-index flush and a sub-journal of the pages it touches.)
fn write_grouped(
    archive: &Archive,
    files: &[(usize, NewFile)],
    options: &ImportOptions,
    progress: &mut dyn FnMut(usize, u64),
    results: &mut [Option<Result<FileImport>>],
) {
    if files.is_empty() {
        return;
    }
    let paths: Vec<PathBuf> = files.iter().map(|(_, f)| f.path.clone()).collect();
    let train = || train_dictionary_for(archive, &paths).map(drop);
    let sources = files.iter().map(|(_, f)| Source::new_file(f)).collect();
    let mut clock = TailClock::default();
    // A failure here leaves the files without results, to be imported alone.
    let _ = pipelined(sources, train, |feed| {
        let mut from = 0;
        while from < files.len() {
            if from > 0 {
                // Writers waiting for the lock get it between two groups.
                archive.between_batches(crate::backend::sqlite::STAGED_GAP);
            }
            // Files this group took on (the one that failed included).
            let taken = std::cell::Cell::new(0);
            let filled_at = std::cell::Cell::new(None);
            let written = archive.write_session(|w| {
                let started = w.lock_taken();
                let (mut imported, mut bytes, mut entries) = (Vec::new(), 0, 0);
                for (index, file) in &files[from..] {
                    let due = clock.due(started.elapsed(), entries);
                    if !imported.is_empty() && (bytes + file.size > GROUP_BYTES || due) {
                        break;
                    }
                    taken.set(taken.get() + 1);
                    let mut report = |at| progress(*index, at);
                    w.begin(&new_session_from_header(&file.header))?;
                    let read = feed.write(w, &mut ByteProgress::new(&mut report))?;
                    entries += read.summary.entries;
                    imported.push(record_new_file(w, file, read, options)?);
                    w.end_session()?;
                    bytes += file.size;
                }
                filled_at.set(Some(std::time::Instant::now()));
                Ok(imported)
            });
            if let Some(at) = filled_at.get() {
                // The search rows held back and the commit, after the files.
                clock.record_tail(at.elapsed());
            }
            let group = &files[from..from + taken.get()];
            match written {
                Ok(imported) => {
                    for ((index, _), one) in group.iter().zip(imported) {
                        results[*index] = Some(Ok(one));
                    }
                }
                Err(_) => feed.skip_until(from + taken.get()),
            }
            from += taken.get().max(1);
            if feed.next_file < from {
                // The write failed before its first file (the lock): the
                // feed passes the file by, which is imported alone later.
                feed.skip_until(from);
            }
        }
        Ok(())
    });
}

/// Records a new file's import in the write that imported it.
fn record_new_file(
    w: &mut SessionWriter<'_>,
    file: &NewFile,
    read: FileRead,
    options: &ImportOptions,
) -> Result<FileImport> {
    let summary = read.summary;
    let contract = options.rules.unwrap_or(if summary.sdk_only_entries {
        Contract::Sdk
    } else {
        Contract::App
    });
    keep_lines(w, &read.skipped, 0, &summary)?;
    w.set_contract(contract)?;
    // The session row was made from the header read when the file was
    // planned; pi may have rewritten the file since.
    if summary.header.json != file.header.json {
        return Err(Error::InvalidHeader {
            path: file.path.clone(),
            reason: "its header changed while it was being imported (import it again)".into(),
        });
    }
    let prefix_hash = match read.hash {
        Some(hash) if summary.torn_tail.is_none() => hash,
        _ => hash_prefix(&file.path, summary.complete_bytes)?,
    };
    w.record_import(&ImportRecord {
        source_path: file.canon.clone(),
        session_id: summary.header.id.clone(),
        bytes: summary.complete_bytes,
        prefix_hash,
        lines: summary.lines,
        file_size: file.size,
        file_mtime: file.mtime,
    })?;
    let report = ImportReport::of(read.skipped, &summary, contract);
    Ok(FileImport {
        session_id: summary.header.id,
        outcome: ImportOutcome::Imported,
        entries: summary.entries,
        bytes_read: summary.bytes,
        torn_tail: summary.torn_tail,
        report,
    })
}

/// Another import (another process, or a file before this one) created the
/// session between our look and our write: what it did stands, as if it had
/// come first. Any other error is `error`.
fn lost_race(archive: &Archive, file: &NewFile, error: Error) -> Result<FileImport> {
    let Error::SessionExists(id) = error else {
        return Err(error);
    };
    Ok(FileImport {
        session_id: id,
        outcome: match archive.import_record(&file.canon)? {
            Some(r) if r.file_size == file.size && r.file_mtime == file.mtime => {
                ImportOutcome::Unchanged
            }
            _ => ImportOutcome::AlreadyPresent,
        },
        entries: 0,
        bytes_read: 0,
        torn_tail: None,
        report: ImportReport::default(),
    })
}

/// The session row of an import, from the file's header.
pub fn new_session_from_header(h: &Header) -> NewSession {
    NewSession {
        id: h.id.clone(),
        created_at: h.timestamp.clone(),
        cwd: h.cwd.clone(),
        parent_session: h.parent_session.clone(),
        metadata: h.metadata.clone(),
        header: h.json.clone(),
        contract: crate::contract::Contract::App,
    }
}
