//! Conversion between formats, above the backends: pi JSONL files into an
//! SQLite archive and back. Neither backend knows the other; this module
//! reads with one and writes with the other.
//!
//! Imports are idempotent: each imported file is recorded with the bytes
//! imported and their hash. Re-importing an unchanged file does nothing; a file
//! pi has appended to since imports only its new lines; a file changed in any
//! other way is refused (delete the session to import it afresh).

use crate::backend::jsonl::{
    read_open_header, read_session_from, JsonlStorage, ReadStart, ReadSummary, TornTail,
};
use crate::backend::sqlite::codec::{Encoder, Prepared};
use crate::backend::sqlite::{Archive, ImportRecord, NewSession, SessionWriter, SqliteStorage};
use crate::error::{Error, Result};
use crate::fnv::{Fnv, WideFnv};
use crate::header::Header;
use crate::layout::check_session_id;
use crate::search::searchable_text;
use crate::storage::SessionStorage;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

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
}

/// Bytes between two reports of an import's progress: often enough for a
/// bar to move smoothly, rare enough to cost nothing next to the reading.
const PROGRESS_STEP: u64 = 1 << 20;

/// Reports an import's progress (bytes into the file) to a callback in steps
/// of at least [`PROGRESS_STEP`], never going backwards or repeating itself.
struct ByteProgress<'a> {
    report: &'a mut dyn FnMut(u64),
    last: Option<u64>,
}

impl<'a> ByteProgress<'a> {
    fn new(report: &'a mut dyn FnMut(u64)) -> Self {
        ByteProgress { report, last: None }
    }

    /// `at` bytes reached: reported if a step further than the last report.
    fn step(&mut self, at: u64) {
        if self.last.is_none_or(|last| at >= last + PROGRESS_STEP) {
            self.last = Some(at);
            (self.report)(at);
        }
    }

    /// `at` bytes reached at the end of a phase: reported unless already.
    fn reached(&mut self, at: u64) {
        if self.last.is_none_or(|last| at > last) {
            self.last = Some(at);
            (self.report)(at);
        }
    }
}

/// The hash of the first `len` bytes of a file, as a new import record
/// stores it ([`WideFnv`]).
fn hash_prefix(path: &Path, len: u64) -> Result<String> {
    hash_prefix_reporting(path, len, PrefixHash::Wide(WideFnv::new()), None)
}

/// A prefix hash being made, of the kind a record holds: records written
/// before schema 12 hold a bare FNV-1a ([`Fnv`]), later ones are tagged
/// ([`WideFnv`]).
enum PrefixHash {
    Bytewise(Fnv),
    Wide(WideFnv),
}

impl PrefixHash {
    /// A hash of the kind `recorded` is, to compare with it.
    fn like(recorded: &str) -> Self {
        if recorded.starts_with(crate::fnv::WIDE_TAG) {
            PrefixHash::Wide(WideFnv::new())
        } else {
            PrefixHash::Bytewise(Fnv::new())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            PrefixHash::Bytewise(h) => h.update(bytes),
            PrefixHash::Wide(h) => h.update(bytes),
        }
    }

    /// The hash as a record stores it.
    fn stored(&self) -> String {
        match self {
            PrefixHash::Bytewise(h) => h.hex(),
            PrefixHash::Wide(h) => h.tagged_hex(),
        }
    }
}

/// The hash (`hash`, fed from the start) of the first `len` bytes of a
/// file, reporting the bytes hashed as it goes; empty if the file is shorter.
fn hash_prefix_reporting(
    path: &Path,
    len: u64,
    mut hash: PrefixHash,
    mut progress: Option<&mut ByteProgress<'_>>,
) -> Result<String> {
    let io = |e| Error::io(format!("Failed to read session {}", path.display()), e);
    let mut f = File::open(path).map_err(io)?.take(len);
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = 0;
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        hash.update(&buf[..n]);
        if let Some(p) = progress.as_deref_mut() {
            p.step(seen);
        }
    }
    if let Some(p) = progress {
        p.reached(seen);
    }
    if seen < len {
        return Ok(String::new());
    }
    Ok(hash.stored())
}

fn file_facts(path: &Path) -> Result<(String, u64, i64)> {
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
        let Ok(f) = File::open(file) else { continue };
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
    let mut progress = ByteProgress::new(progress);
    let plan = plan_import(archive, path, file_facts(path)?, &mut progress)?;
    carry_out(archive, path, plan, &mut progress)
}

/// Writes what `plan` says for the file at `path`, alone.
fn carry_out(
    archive: &Archive,
    path: &Path,
    plan: Plan,
    progress: &mut ByteProgress<'_>,
) -> Result<FileImport> {
    match plan {
        Plan::Done(done) => Ok(done),
        Plan::New(file) => import_new(archive, &file, progress),
        Plan::Append {
            record,
            size,
            mtime,
        } => append_new_lines(archive, path, &record, size, mtime, progress),
    }
}

/// The most bytes of files [`import_jsonl_files`] writes in one transaction:
/// about as long a hold of the write lock as one batch of a staged import
/// (100 ms) at the import's speed. Bigger files are each imported in a
/// staged write of their own.
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
    write_grouped(archive, &grouped, progress, &mut results);
    for (index, plan) in alone {
        let mut report = |at| progress(index, at);
        let mut file_progress = ByteProgress::new(&mut report);
        results[index] = Some(carry_out(archive, &paths[index], plan, &mut file_progress));
    }
    Ok(results
        .into_iter()
        .enumerate()
        .map(|(index, result)| {
            result.unwrap_or_else(|| {
                import_jsonl_with_progress(archive, &paths[index], &mut |at| progress(index, at))
            })
        })
        .collect())
}

/// What importing a file comes to, decided before anything is written.
enum Plan {
    /// Nothing (more) to write.
    Done(FileImport),
    /// A file not imported before.
    New(NewFile),
    /// A file pi has appended to since its import `record`.
    Append {
        record: ImportRecord,
        size: u64,
        mtime: i64,
    },
}

/// A file to import as a new session.
struct NewFile {
    path: PathBuf,
    /// Its canonical path, as its import record names it.
    canon: String,
    size: u64,
    mtime: i64,
    header: Header,
}

/// Looks at `path` and the archive's record of it: unchanged, appended to
/// (the imported prefix is hashed, reported to `progress`), changed (an
/// error), or new (its header read and checked).
fn plan_import(
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
        Some(r) => Err(Error::ImportedFileChanged {
            path: path.to_owned(),
            session: r.session_id.clone(),
            how: "not only appended to",
        }),
        None => {
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
                })
            };
            // An earlier import of this file that never published: another
            // process is still at it, or it died and its batches go.
            if let Some(id) = archive.discard_dead_staged_import(&canon)? {
                return Ok(skipped(id, ImportOutcome::InProgressElsewhere));
            }
            if archive.has_session(&header.id)? {
                return Ok(skipped(header.id, ImportOutcome::AlreadyPresent));
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

/// Imports a new file in a staged write of its own: in short transactions
/// (other writers get the lock between them), invisible until published,
/// so the file is imported whole or not at all as far as any reader can tell.
fn import_new(
    archive: &Archive,
    file: &NewFile,
    progress: &mut ByteProgress<'_>,
) -> Result<FileImport> {
    // An archive without a dictionary gets its first one from this file,
    // trained while the reader parses ahead.
    let train = || train_dictionary_for(archive, std::slice::from_ref(&file.path)).map(drop);
    let imported = pipelined(vec![Source::new_file(file)], train, |feed| {
        archive.write_session(|w| {
            w.begin_staged(&new_session_from_header(&file.header), &file.canon)?;
            let read = feed.write(w, progress)?;
            let imported = record_new_file(w, file, read)?;
            w.publish()?;
            Ok(imported)
        })
    });
    imported.or_else(|e| lost_race(archive, file, e))
}

/// Writes `files` (all new, none bigger than [`GROUP_BYTES`]) in groups of
/// at most that many bytes, a transaction each, while one reader reads
/// ahead through all of them; puts each file's result in `results` once its
/// group has committed. A group
/// is written whole or not at all: one failing file (a bad line, a session
/// already there) rolls it back, and its files get no results here, to be
/// imported one by one. (A savepoint per file instead would cost every
/// file a search-index flush and a sub-journal of the pages it touches.)
fn write_grouped(
    archive: &Archive,
    files: &[(usize, NewFile)],
    progress: &mut dyn FnMut(usize, u64),
    results: &mut [Option<Result<FileImport>>],
) {
    if files.is_empty() {
        return;
    }
    let mut groups: Vec<&[(usize, NewFile)]> = Vec::new();
    let (mut from, mut bytes) = (0, 0);
    for (at, (_, file)) in files.iter().enumerate() {
        if at > from && bytes + file.size > GROUP_BYTES {
            groups.push(&files[from..at]);
            (from, bytes) = (at, 0);
        }
        bytes += file.size;
    }
    groups.push(&files[from..]);
    let paths: Vec<PathBuf> = files.iter().map(|(_, f)| f.path.clone()).collect();
    let train = || train_dictionary_for(archive, &paths).map(drop);
    let sources = files.iter().map(|(_, f)| Source::new_file(f)).collect();
    // A failure here leaves the files without results, to be imported alone.
    let _ = pipelined(sources, train, |feed| {
        for (n, group) in groups.iter().enumerate() {
            if n > 0 {
                // Writers waiting for the lock get it between two groups.
                std::thread::sleep(crate::backend::sqlite::STAGED_GAP);
            }
            let first = feed.next_file;
            let written = archive.write_session(|w| {
                let mut imported = Vec::with_capacity(group.len());
                for (index, file) in *group {
                    let mut report = |at| progress(*index, at);
                    w.begin(&new_session_from_header(&file.header))?;
                    let read = feed.write(w, &mut ByteProgress::new(&mut report))?;
                    imported.push(record_new_file(w, file, read)?);
                    w.end_session()?;
                }
                Ok(imported)
            });
            match written {
                Ok(imported) => {
                    for ((index, _), one) in group.iter().zip(imported) {
                        results[*index] = Some(Ok(one));
                    }
                }
                Err(_) => feed.skip_until(first + group.len()),
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
) -> Result<FileImport> {
    let summary = read.summary;
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
    Ok(FileImport {
        session_id: summary.header.id,
        outcome: ImportOutcome::Imported,
        entries: summary.entries,
        bytes_read: summary.bytes,
        torn_tail: summary.torn_tail,
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
    })
}

/// Entries the reading thread hands over at a time (one channel message per
/// batch, not per entry: a hand-over wakes the other thread).
const PIPELINE_BATCH: usize = 64;
/// Bytes of entry text after which a batch is handed over early (huge lines).
const PIPELINE_BATCH_BYTES: usize = 256 << 10;
/// Batches the reading thread may run ahead of the writing one: enough
/// (about 4 MB of typical entries, at most 16 MB) for the reader to keep
/// parsing while the writer indexes a transaction's search text and commits.
const PIPELINE_DEPTH: usize = 64;
/// Search text the writer indexes when it runs out of entries to write
/// (the reader is behind), once at least this much is held: the index is
/// built in time the writer would spend waiting instead of all at the
/// commit, while the reader idles. Each such write makes a search-index
/// segment, hence the floor (a 93 MB import: 6 segments → 7). Imports
/// 1,000 files 1.50 → 1.30 s, one 93 MB file 1.47 → 1.35 s, pi's 2.4 MB
/// real file into an archive 41.9 → 35.4 ms.
const IDLE_INDEX_BYTES: usize = 256 << 10;
/// Bytes of entry text the reading thread parses ahead while the archive's
/// first dictionary is being trained (entries cannot be encoded before it
/// exists): enough to keep it busy through most of a training, a bound on
/// the memory that costs.
const TRAINING_READ_AHEAD: usize = 8 << 20;

/// One parsed entry on its way to the writer: its search text (role, text)
/// and its stored encoding, unless the reader left that to the writer.
type Parsed = (
    crate::entry::Entry,
    Option<(String, String)>,
    Option<Prepared>,
);

/// A file for [`pipelined`]'s reader to read.
struct Source {
    path: PathBuf,
    start: ReadStart,
    /// Whether to hash the bytes read ([`WideFnv`]): a new file's import
    /// record holds the hash of all of them.
    hash: bool,
}

impl Source {
    /// A new file, read and hashed from its start.
    fn new_file(file: &NewFile) -> Self {
        Source {
            path: file.path.clone(),
            start: ReadStart::Beginning,
            hash: true,
        }
    }
}

/// What the reader made of one file.
struct FileRead {
    summary: ReadSummary,
    /// The tagged hash of every byte read, if the [`Source`] asked for it.
    hash: Option<String>,
}

/// What the reading thread hands the writing one.
enum Handed {
    /// Parsed entries, and the file offset the last one's line ended at.
    Batch(Vec<Parsed>, u64),
    /// The end of a file: what was read, or why reading it stopped (boxed:
    /// one per file, where batches are many).
    End(Box<Result<FileRead>>),
}

/// Reads and parses entries (and extracts their search text and compresses
/// them) on a second thread while this one writes them, so an import keeps
/// both cores busy; the reader goes through `sources` in order, the writer
/// takes each file's entries with [`Feed::write`] (or passes it by with
/// [`Feed::skip`]). Meanwhile, before any write, `before` runs on this
/// thread (training the archive's first dictionary: the reader parses ahead,
/// up to [`TRAINING_READ_AHEAD`], and encodes once `write` hands it the
/// encoder). Memory stays bounded: the reader is at most [`PIPELINE_DEPTH`]
/// batches of [`PIPELINE_BATCH`] entries (or [`PIPELINE_BATCH_BYTES`])
/// ahead, plus the read-ahead, and written batches wait to be freed by the
/// reader for at most as many more (it takes them back at every hand-over,
/// and the writer can only have written what was queued).
fn pipelined<T>(
    sources: Vec<Source>,
    before: impl FnOnce() -> Result<()>,
    write: impl FnOnce(&mut Feed<'_>) -> Result<T>,
) -> Result<T> {
    let writer_waiting = AtomicBool::new(false);
    let abandoned_below = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let (send, batches) = std::sync::mpsc::sync_channel::<Handed>(PIPELINE_DEPTH);
        let (encoder_send, encoder_receive) = std::sync::mpsc::channel::<Encoder>();
        let (spent_send, spent) = std::sync::mpsc::channel::<Vec<Parsed>>();
        let reader = PipelineReader {
            send,
            spent,
            encoder_receive,
            encoder: None,
            writer_waiting: &writer_waiting,
            abandoned_below: &abandoned_below,
            ahead: std::collections::VecDeque::new(),
            ahead_bytes: 0,
            batch: Vec::with_capacity(PIPELINE_BATCH),
            batch_bytes: 0,
            stopped: false,
            file: 0,
        };
        let reading = scope.spawn(move || reader.read_all(sources));
        let mut feed = Feed {
            encoder: Some(encoder_send),
            mine: None,
            batches,
            spent: spent_send,
            writer_waiting: &writer_waiting,
            abandoned_below: &abandoned_below,
            next_file: 0,
            reading,
        };
        let written = before().and_then(|()| write(&mut feed));
        // Stops a reader still going (the write failed), then joins it.
        let read = feed.finish();
        let written = written?;
        read?;
        Ok(written)
    })
}

/// The reading side of [`pipelined`], on its own thread.
struct PipelineReader<'s> {
    send: std::sync::mpsc::SyncSender<Handed>,
    /// Batches written, to be freed here (see [`Feed::spent`]).
    spent: std::sync::mpsc::Receiver<Vec<Parsed>>,
    encoder_receive: std::sync::mpsc::Receiver<Encoder>,
    encoder: Option<Encoder>,
    writer_waiting: &'s AtomicBool,
    /// Files before this index the writer no longer wants (its write of one
    /// failed, or it passed them by).
    abandoned_below: &'s AtomicUsize,
    /// Parsed entries waiting for the encoder, each with the offset its line ended at.
    ahead: std::collections::VecDeque<(Parsed, u64)>,
    ahead_bytes: usize,
    batch: Vec<Parsed>,
    batch_bytes: usize,
    /// The writer is gone: nothing more is read.
    stopped: bool,
    /// The index of the file being read.
    file: usize,
}

fn writer_stopped() -> Error {
    Error::Unknown("the import's writer stopped".into())
}

fn reader_stopped() -> Error {
    Error::Unknown("the import's reader stopped".into())
}

fn file_left() -> Error {
    Error::Unknown("an import's file left by its writer".into())
}

impl PipelineReader<'_> {
    /// Reads every source in turn, ending each with [`Handed::End`].
    fn read_all(mut self, sources: Vec<Source>) -> Result<()> {
        for (file, source) in sources.into_iter().enumerate() {
            let read = self.read_file(file, source);
            if self.stopped {
                return Err(writer_stopped());
            }
            if read.is_err() {
                // Nothing of a failed file reaches the next one's batches.
                self.batch.clear();
                self.batch_bytes = 0;
                self.ahead.clear();
                self.ahead_bytes = 0;
            }
            self.send
                .send(Handed::End(Box::new(read)))
                .map_err(|_| writer_stopped())?;
        }
        Ok(())
    }

    fn read_file(&mut self, file: usize, source: Source) -> Result<FileRead> {
        self.file = file;
        let Source { path, start, hash } = source;
        let offset = match &start {
            ReadStart::Beginning => 0,
            ReadStart::After { offset, .. } => *offset,
        };
        let io = |e| Error::io(format!("Failed to read session {}", path.display()), e);
        let mut opened = File::open(&path).map_err(io)?;
        if offset > 0 {
            opened.seek(SeekFrom::Start(offset)).map_err(io)?;
        }
        let mut hashing = HashingReader {
            inner: opened,
            hash: hash.then(WideFnv::new),
        };
        let consumed = std::cell::Cell::new(offset);
        let reader = Counting {
            inner: BufReader::with_capacity(1 << 16, &mut hashing),
            consumed: &consumed,
        };
        let summary = read_session_from(reader, &path, start, |_, entry| {
            if self.abandoned() {
                return Err(file_left());
            }
            self.take(entry, consumed.get())
        })?;
        self.finish_file(consumed.get())?;
        Ok(FileRead {
            summary,
            hash: hashing.hash.map(|h| h.tagged_hex()),
        })
    }

    /// Takes one parsed entry, whose line ended at `at`: held back while
    /// there is no encoder yet (up to the read-ahead), else batched.
    fn take(&mut self, entry: crate::entry::Entry, at: u64) -> Result<()> {
        let text = searchable_text(&entry);
        if self.encoder.is_none() {
            match self.encoder_receive.try_recv() {
                Ok(e) => self.encoder = Some(e),
                Err(std::sync::mpsc::TryRecvError::Empty)
                    if self.ahead_bytes < TRAINING_READ_AHEAD =>
                {
                    self.ahead_bytes += entry.json().len();
                    self.ahead.push_back(((entry, text, None), at));
                    return Ok(());
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => self.wait_for_encoder()?,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err(self.stop()),
            }
        }
        self.push_ahead()?;
        self.push((entry, text, None), at)
    }

    /// Ends a file whose last line ended at `end`: what it holds back goes.
    fn finish_file(&mut self, end: u64) -> Result<()> {
        // A file shorter than the read-ahead: everything waits for the encoder.
        if self.encoder.is_none() && !self.ahead.is_empty() {
            self.wait_for_encoder()?;
        }
        self.push_ahead()?;
        if !self.batch.is_empty() {
            self.hand_over(end)?;
        }
        Ok(())
    }

    /// Waits for the writer's encoder, unless the writer leaves this file
    /// (it may pass it by before it has an encoder to give).
    fn wait_for_encoder(&mut self) -> Result<()> {
        use std::sync::mpsc::RecvTimeoutError;
        loop {
            match self.encoder_receive.recv_timeout(Duration::from_millis(5)) {
                Ok(e) => {
                    self.encoder = Some(e);
                    return Ok(());
                }
                Err(RecvTimeoutError::Timeout) if self.abandoned() => return Err(file_left()),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(self.stop()),
            }
        }
    }

    /// Whether the writer no longer wants the file being read.
    fn abandoned(&self) -> bool {
        self.abandoned_below.load(Ordering::Acquire) > self.file
    }

    /// Batches what was read ahead of the encoder.
    fn push_ahead(&mut self) -> Result<()> {
        while let Some((parsed, at)) = self.ahead.pop_front() {
            self.push(parsed, at)?;
        }
        self.ahead_bytes = 0;
        Ok(())
    }

    fn push(&mut self, parsed: Parsed, at: u64) -> Result<()> {
        self.batch_bytes += parsed.0.json().len();
        self.batch.push(parsed);
        if self.batch.len() == PIPELINE_BATCH || self.batch_bytes >= PIPELINE_BATCH_BYTES {
            self.hand_over(at)?;
        }
        Ok(())
    }

    /// Encodes the batch's entries until the writer waits for one (it then
    /// encodes the rest itself), and sends it.
    fn hand_over(&mut self, at: u64) -> Result<()> {
        let mut full = std::mem::replace(&mut self.batch, Vec::with_capacity(PIPELINE_BATCH));
        self.batch_bytes = 0;
        self.spent.try_iter().for_each(drop);
        if let Some(encoder) = self.encoder.as_ref() {
            for (entry, _, prepared) in &mut full {
                // Checked at every entry, not once a batch: encoding a batch
                // of 64 takes a millisecond or more, which an idle writer
                // would spend waiting for it.
                if self.writer_waiting.load(Ordering::Acquire) {
                    break;
                }
                if prepared.is_none() {
                    *prepared = Some(encoder.prepare(entry.json()));
                }
            }
        }
        match self.send.send(Handed::Batch(full, at)) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.stop()),
        }
    }

    fn stop(&mut self) -> Error {
        self.stopped = true;
        writer_stopped()
    }
}

/// The writing side of [`pipelined`]: hands the reader its encoder, then
/// writes what it sends, file by file.
struct Feed<'s> {
    /// Hands the reader the encoder at the first write (dropped, the reader
    /// stops waiting for it).
    encoder: Option<std::sync::mpsc::Sender<Encoder>>,
    /// The same encoder, for the batches the reader leaves unencoded.
    mine: Option<Encoder>,
    batches: std::sync::mpsc::Receiver<Handed>,
    /// Written batches go back to the reader, which frees them: memory freed
    /// on the thread that allocated it takes no allocator lock (freeing the
    /// reader's entries here cost both threads ~10 % of an import in glibc's
    /// arena locks).
    spent: std::sync::mpsc::Sender<Vec<Parsed>>,
    /// Set while the writer waits for a batch: the reader then hands its
    /// batch over unencoded (the idle writer encodes it), and otherwise
    /// encodes it itself. (A count of queued batches was the wrong signal:
    /// with none queued the writer is usually busy with the last one, and
    /// it ended up encoding 45 % of the entries while the busier thread.)
    writer_waiting: &'s AtomicBool,
    abandoned_below: &'s AtomicUsize,
    /// The index of the file the next write takes.
    next_file: usize,
    reading: std::thread::ScopedJoinHandle<'s, Result<()>>,
}

impl Feed<'_> {
    /// Writes the entries of the reader's next file into `w`'s session;
    /// returns what the reader read. Either way the feed is then at the
    /// file after: a failed write leaves the rest of this one unread.
    fn write(
        &mut self,
        w: &mut SessionWriter<'_>,
        progress: &mut ByteProgress<'_>,
    ) -> Result<FileRead> {
        match self.hand_encoder(w) {
            Ok(()) => self.take_file(Some(w), progress),
            Err(e) => {
                // The file is passed by all the same: the feed stays in step.
                self.skip();
                Err(e)
            }
        }
    }

    /// Passes the reader's next file by, unwritten.
    fn skip(&mut self) {
        let _ = self.take_file(None, &mut ByteProgress::new(&mut |_| {}));
    }

    /// Passes the reader's files by, unwritten, up to (not including) the
    /// one at `index`.
    fn skip_until(&mut self, index: usize) {
        while self.next_file < index {
            self.skip();
        }
    }

    /// Sends the reader the encoder of `w`'s transaction, at the first write.
    fn hand_encoder(&mut self, w: &SessionWriter<'_>) -> Result<()> {
        if self.mine.is_some() {
            return Ok(());
        }
        match w.encoder() {
            Ok(mine) => {
                if let Some(send) = &self.encoder {
                    // A reader that stopped on an error says so when joined.
                    let _ = send.send(mine.clone());
                }
                self.mine = Some(mine);
                Ok(())
            }
            Err(e) => {
                // The reader stops waiting for one.
                self.encoder = None;
                Err(e)
            }
        }
    }

    /// Takes the next file's batches to its end, writing them into `w` if
    /// given (and until a write fails).
    fn take_file(
        &mut self,
        mut w: Option<&mut SessionWriter<'_>>,
        progress: &mut ByteProgress<'_>,
    ) -> Result<FileRead> {
        let file = self.next_file;
        self.next_file += 1;
        let mut written = Ok(());
        if w.is_none() {
            self.abandoned_below.fetch_max(file + 1, Ordering::AcqRel);
        }
        loop {
            let handed = match self.batches.try_recv() {
                Ok(handed) => handed,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    return written.and(Err(reader_stopped()));
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    if let (Some(w), Ok(())) = (w.as_deref_mut(), &written) {
                        written = w.index_held_text(IDLE_INDEX_BYTES);
                        if written.is_err() {
                            self.abandoned_below.fetch_max(file + 1, Ordering::AcqRel);
                        }
                    }
                    self.writer_waiting.store(true, Ordering::Release);
                    let handed = self.batches.recv();
                    self.writer_waiting.store(false, Ordering::Release);
                    match handed {
                        Ok(handed) => handed,
                        Err(_) => return written.and(Err(reader_stopped())),
                    }
                }
            };
            match handed {
                Handed::Batch(mut batch, reached) => {
                    if let (Some(w), Ok(()), Some(mine)) =
                        (w.as_deref_mut(), &written, self.mine.as_ref())
                    {
                        written = push_batch(w, mine, &mut batch);
                        if written.is_ok() {
                            progress.step(reached);
                        } else {
                            self.abandoned_below.fetch_max(file + 1, Ordering::AcqRel);
                        }
                    }
                    // A reader that has stopped frees nothing more: this thread does.
                    let _ = self.spent.send(batch);
                }
                Handed::End(read) => {
                    written?;
                    let read = (*read)?;
                    progress.reached(read.summary.bytes);
                    return Ok(read);
                }
            }
        }
    }

    /// Stops the reader if it is still going and joins it: its own failure
    /// (a file's failures came with the file).
    fn finish(self) -> Result<()> {
        let Feed {
            encoder,
            batches,
            reading,
            ..
        } = self;
        drop(encoder);
        drop(batches);
        reading
            .join()
            .map_err(|_| Error::Unknown("the import's reader panicked".into()))?
    }
}

/// Writes one batch of parsed entries, encoding those the reader left.
fn push_batch(w: &mut SessionWriter<'_>, mine: &Encoder, batch: &mut [Parsed]) -> Result<()> {
    for (entry, text, prepared) in batch {
        let prepared = prepared.get_or_insert_with(|| mine.prepare(entry.json()));
        let text = text
            .as_ref()
            .map(|(role, text)| (role.as_str(), text.as_str()));
        w.push_prepared(entry, text, prepared)?;
    }
    Ok(())
}

/// A buffered reader that counts the bytes consumed from it: the offset of
/// the end of the last line read (what a `BufReader` holds ahead is not counted).
struct Counting<'a, R> {
    inner: R,
    consumed: &'a std::cell::Cell<u64>,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed.set(self.consumed.get() + n as u64);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<'_, R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.consumed.set(self.consumed.get() + amt as u64);
        self.inner.consume(amt);
    }
}

fn append_new_lines(
    archive: &Archive,
    path: &Path,
    r: &ImportRecord,
    size: u64,
    mtime: i64,
    progress: &mut ByteProgress<'_>,
) -> Result<FileImport> {
    let header = read_open_header(path)?;
    if header.version != 3 {
        return Err(Error::ImportedFileChanged {
            path: path.to_owned(),
            session: r.session_id.clone(),
            how: "an old-format file, which is never appended to in place",
        });
    }
    let io = |e| Error::io(format!("Failed to read session {}", path.display()), e);
    let mut file = File::open(path).map_err(io)?;
    // The archive's copy must still end where the imported prefix ends: if
    // it was written since (the archive is then its source of truth), pi's
    // new lines would be mixed into a log that has moved on.
    let last_imported = last_entry_id(&last_line_before(&mut file, r.bytes).map_err(io)?);
    let storage = archive.open_session(&r.session_id)?;
    let count = storage.entry_count()?;
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
            });
        }
        return Err(Error::ArchiveSessionDiverged {
            path: path.to_owned(),
            session: r.session_id.clone(),
        });
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
                w.resume(&r.session_id)?;
                let summary = feed.write(w, progress)?.summary;
                w.record_import(&ImportRecord {
                    source_path: r.source_path.clone(),
                    session_id: r.session_id.clone(),
                    bytes: summary.complete_bytes,
                    prefix_hash: hash_prefix(path, summary.complete_bytes)?,
                    lines: summary.lines,
                    file_size: size,
                    file_mtime: mtime,
                })?;
                Ok(FileImport {
                    session_id: r.session_id.clone(),
                    outcome: ImportOutcome::Appended,
                    entries: summary.entries,
                    bytes_read: summary.bytes - r.bytes,
                    torn_tail: summary.torn_tail,
                })
            })
        },
    )
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

/// Hashes what is read through it, if it holds a hash.
struct HashingReader<R> {
    inner: R,
    hash: Option<WideFnv>,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(hash) = &mut self.hash {
            hash.update(&buf[..n]);
        }
        Ok(n)
    }
}

/// Writes a session of the archive as a pi JSONL file: its header line, then
/// every entry in log order, exactly as imported or appended.
pub fn export_jsonl(storage: &SqliteStorage, out: &mut impl Write) -> Result<()> {
    write_session_file(&storage.header_json()?, storage, out, &mut |_| {})
}

/// Entries between two reports of an export's progress.
const EXPORT_PROGRESS_STEP: u64 = 256;

/// A session as pi's version-3 file: `header`, then every entry's exact
/// text, one a line, streamed (bounded memory however long the log);
/// `progress` hears the entries written so far (about every
/// [`EXPORT_PROGRESS_STEP`] entries, and at the end).
fn write_session_file(
    header: &str,
    storage: &dyn SessionStorage,
    out: &mut impl Write,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let id = storage.metadata()?.id;
    let io = |e| Error::io(format!("exporting session {id}"), e);
    out.write_all(header.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    let mut written = 0u64;
    storage.visit_entries(0, None, &mut |json| {
        out.write_all(json.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
        written += 1;
        if written.is_multiple_of(EXPORT_PROGRESS_STEP) {
            progress(written);
        }
        Ok(())
    })?;
    if written == 0 || !written.is_multiple_of(EXPORT_PROGRESS_STEP) {
        progress(written);
    }
    out.flush().map_err(io)
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
    let mut theirs = File::open(path).map_err(|e| io("reading", path, e))?;
    let theirs_len = theirs.metadata().map_err(|e| io("reading", path, e))?.len();
    let mut ours = File::open(tmp).map_err(|e| io("reading", tmp, e))?;
    let common = common_prefix(&mut theirs, &mut ours).map_err(|e| io("comparing", path, e))?;
    if common == theirs_len && common == ours_len {
        return Ok(ExportOutcome::Unchanged);
    }
    if common == theirs_len {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| io("appending to", path, e))?;
        ours.seek(SeekFrom::Start(common))
            .map_err(|e| io("reading", tmp, e))?;
        let bytes = std::io::copy(&mut ours, &mut file).map_err(|e| io("appending to", path, e))?;
        file.sync_all().map_err(|e| io("appending to", path, e))?;
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
