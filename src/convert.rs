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
use crate::backend::sqlite::search::searchable_text;
use crate::backend::sqlite::{Archive, ImportRecord, NewSession, SessionWriter, SqliteStorage};
use crate::error::{Error, Result};
use crate::fnv::{Fnv, WideFnv};
use crate::header::Header;
use crate::layout::check_session_id;
use crate::storage::SessionStorage;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

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
    let (canon, size, mtime) = file_facts(path)?;
    let unchanged = |r: &ImportRecord| FileImport {
        session_id: r.session_id.clone(),
        outcome: ImportOutcome::Unchanged,
        entries: 0,
        bytes_read: 0,
        torn_tail: None,
    };
    match archive.import_record(&canon)? {
        Some(r) if r.file_size == size && r.file_mtime == mtime => Ok(unchanged(&r)),
        Some(r)
            if size >= r.bytes
                && hash_prefix_reporting(
                    path,
                    r.bytes,
                    PrefixHash::like(&r.prefix_hash),
                    Some(&mut progress),
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
            append_new_lines(archive, path, &r, size, mtime, &mut progress)
        }
        Some(r) => Err(Error::ImportedFileChanged {
            path: path.to_owned(),
            session: r.session_id.clone(),
            how: "not only appended to",
        }),
        None => import_new(archive, path, canon, size, mtime, &mut progress),
    }
}

fn import_new(
    archive: &Archive,
    path: &Path,
    canon: String,
    size: u64,
    mtime: i64,
    progress: &mut ByteProgress<'_>,
) -> Result<FileImport> {
    let header = read_open_header(path)?;
    // An id that could not be exported (a path, `..`) is refused at the door.
    check_session_id(&header.id)?;
    // An earlier import of this file that never published: another process
    // is still at it, or it died and its batches go.
    if let Some(id) = archive.discard_dead_staged_import(&canon)? {
        return Ok(FileImport {
            session_id: id,
            outcome: ImportOutcome::InProgressElsewhere,
            entries: 0,
            bytes_read: 0,
            torn_tail: None,
        });
    }
    if archive.has_session(&header.id)? {
        return Ok(FileImport {
            session_id: header.id,
            outcome: ImportOutcome::AlreadyPresent,
            entries: 0,
            bytes_read: 0,
            torn_tail: None,
        });
    }
    let io = |e| Error::io(format!("Failed to read session {}", path.display()), e);
    let file = File::open(path).map_err(io)?;
    let hash = std::sync::Mutex::new(WideFnv::new());
    let hashing = HashingReader {
        inner: file,
        hash: &hash,
    };
    let canon_for_race = canon.clone();
    // An archive without a dictionary gets its first one from this file,
    // trained while the reader parses ahead.
    let train = || {
        if !archive.has_dictionary()? {
            train_dictionary_for(archive, &[path.to_owned()])?;
        }
        Ok(())
    };
    let imported = pipelined(
        BufReader::with_capacity(1 << 16, hashing),
        path,
        ReadStart::Beginning,
        progress,
        train,
        |feed| {
            archive.write_session(|w| {
                // Written in short transactions (other writers get the lock between
                // them), invisible until published: the file is imported whole or not
                // at all as far as any reader can tell.
                w.begin_staged(&new_session_from_header(&header), &canon)?;
                let summary = feed.write(w)?;
                let prefix_hash = if summary.torn_tail.is_none() {
                    hash.lock().unwrap_or_else(|p| p.into_inner()).tagged_hex()
                } else {
                    hash_prefix(path, summary.complete_bytes)?
                };
                w.record_import(&ImportRecord {
                    source_path: canon,
                    session_id: summary.header.id.clone(),
                    bytes: summary.complete_bytes,
                    prefix_hash,
                    lines: summary.lines,
                    file_size: size,
                    file_mtime: mtime,
                })?;
                w.publish()?;
                Ok(FileImport {
                    session_id: summary.header.id.clone(),
                    outcome: ImportOutcome::Imported,
                    entries: summary.entries,
                    bytes_read: summary.bytes,
                    torn_tail: summary.torn_tail,
                })
            })
        },
    );
    match imported {
        // Another import (another process) created the session between our
        // look and our write: what it did stands, as if it had come first.
        Err(Error::SessionExists(id)) => Ok(FileImport {
            session_id: id,
            outcome: match archive.import_record(&canon_for_race)? {
                Some(r) if r.file_size == size && r.file_mtime == mtime => ImportOutcome::Unchanged,
                _ => ImportOutcome::AlreadyPresent,
            },
            entries: 0,
            bytes_read: 0,
            torn_tail: None,
        }),
        other => other,
    }
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

/// The writing side of [`pipelined`]: hands the reader its encoder, then
/// writes what it sends.
struct Feed<'s, 'p, 'q> {
    encoder: std::sync::mpsc::Sender<Encoder>,
    batches: std::sync::mpsc::Receiver<(Vec<Parsed>, u64)>,
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
    reading: std::thread::ScopedJoinHandle<'s, Result<ReadSummary>>,
    progress: &'p mut ByteProgress<'q>,
}

impl Feed<'_, '_, '_> {
    /// Writes every entry the reader parses into `w`'s session; returns what
    /// the reader read.
    fn write(self, w: &mut SessionWriter<'_>) -> Result<ReadSummary> {
        let Feed {
            encoder,
            batches,
            spent,
            writer_waiting,
            reading,
            progress,
        } = self;
        let mine = w.encoder()?;
        // A reader that stopped on an error says so when joined below.
        let _ = encoder.send(mine.clone());
        let mut written = Ok(());
        let next_batch = || match batches.try_recv() {
            Ok(batch) => Some(batch),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                writer_waiting.store(true, Ordering::Release);
                let batch = batches.recv().ok();
                writer_waiting.store(false, Ordering::Release);
                batch
            }
        };
        'batches: while let Some((mut batch, reached)) = next_batch() {
            for (entry, text, prepared) in &mut batch {
                let prepared = prepared.get_or_insert_with(|| mine.prepare(entry.json()));
                let text = text
                    .as_ref()
                    .map(|(role, text)| (role.as_str(), text.as_str()));
                if let Err(e) = w.push_prepared(entry, text, prepared) {
                    written = Err(e);
                    break 'batches;
                }
            }
            // A reader that has stopped frees nothing more: this thread does.
            let _ = spent.send(batch);
            progress.step(reached);
        }
        // Dropping the receiver stops a reader still sending.
        drop(batches);
        let read: Result<ReadSummary> = reading
            .join()
            .map_err(|_| Error::Unknown("the import's reader panicked".into()))?;
        written?;
        let summary = read?;
        progress.reached(summary.bytes);
        Ok(summary)
    }
}

/// Reads and parses entries (and extracts their search text and compresses
/// them) on a second thread while this one writes them, so an import keeps
/// both cores busy. Meanwhile, before any write, `before` runs on this
/// thread (training the archive's first dictionary: the reader parses ahead,
/// up to [`TRAINING_READ_AHEAD`], and encodes once `write` hands it the
/// encoder). `write` opens the session write and calls [`Feed::write`].
/// Memory stays bounded: the reader is at most [`PIPELINE_DEPTH`] batches of
/// [`PIPELINE_BATCH`] entries (or [`PIPELINE_BATCH_BYTES`]) ahead, plus the
/// read-ahead, and written batches wait to be freed by the reader for at most
/// as many more (it takes them back at every hand-over, and the writer can
/// only have written what was queued). Each batch carries the file offset its last line ended at;
/// `progress` hears it once the batch is written, on this thread.
fn pipelined<R: BufRead + Send, T>(
    reader: R,
    path: &Path,
    start: ReadStart,
    progress: &mut ByteProgress<'_>,
    before: impl FnOnce() -> Result<()>,
    write: impl FnOnce(Feed<'_, '_, '_>) -> Result<T>,
) -> Result<T> {
    let offset = match &start {
        ReadStart::Beginning => 0,
        ReadStart::After { offset, .. } => *offset,
    };
    let writer_waiting = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (send, batches) = std::sync::mpsc::sync_channel::<(Vec<Parsed>, u64)>(PIPELINE_DEPTH);
        let (encoder_send, encoder_receive) = std::sync::mpsc::channel::<Encoder>();
        let (spent_send, spent) = std::sync::mpsc::channel::<Vec<Parsed>>();
        let writer_waiting = &writer_waiting;
        let reading = scope.spawn(move || {
            let stopped = || Error::Unknown("the import's writer stopped".into());
            let consumed = std::cell::Cell::new(offset);
            let reader = Counting {
                inner: reader,
                consumed: &consumed,
            };
            let mut encoder: Option<Encoder> = None;
            // Parsed entries waiting for the encoder, each with the offset its line ended at.
            let mut ahead: std::collections::VecDeque<(Parsed, u64)> =
                std::collections::VecDeque::new();
            let mut ahead_bytes = 0;
            let mut batch: Vec<Parsed> = Vec::with_capacity(PIPELINE_BATCH);
            let mut bytes = 0;
            // Encodes a full batch unless the writer is waiting for one
            // (then it encodes the batch itself), and sends it.
            let hand_over = |mut full: Vec<Parsed>, encoder: &Encoder, at: u64| {
                spent.try_iter().for_each(drop);
                if !writer_waiting.load(Ordering::Acquire) {
                    for (entry, _, prepared) in &mut full {
                        if prepared.is_none() {
                            *prepared = Some(encoder.prepare(entry.json()));
                        }
                    }
                }
                send.send((full, at)).map_err(|_| stopped())
            };
            let summary = read_session_from(reader, path, start, |_, entry| {
                let text = searchable_text(&entry);
                if encoder.is_none() {
                    match encoder_receive.try_recv() {
                        Ok(e) => encoder = Some(e),
                        Err(std::sync::mpsc::TryRecvError::Empty)
                            if ahead_bytes < TRAINING_READ_AHEAD =>
                        {
                            ahead_bytes += entry.json().len();
                            ahead.push_back(((entry, text, None), consumed.get()));
                            return Ok(());
                        }
                        Err(std::sync::mpsc::TryRecvError::Empty) => {
                            encoder = Some(encoder_receive.recv().map_err(|_| stopped())?);
                        }
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err(stopped()),
                    }
                }
                let Some(encoder) = encoder.as_ref() else {
                    return Err(stopped());
                };
                let now = [((entry, text, None), consumed.get())];
                for ((entry, text, prepared), at) in ahead.drain(..).chain(now) {
                    bytes += entry.json().len();
                    batch.push((entry, text, prepared));
                    if batch.len() == PIPELINE_BATCH || bytes >= PIPELINE_BATCH_BYTES {
                        bytes = 0;
                        let full =
                            std::mem::replace(&mut batch, Vec::with_capacity(PIPELINE_BATCH));
                        hand_over(full, encoder, at)?;
                    }
                }
                Ok(())
            })?;
            // A file shorter than the read-ahead: everything waits for the encoder.
            if encoder.is_none() && !ahead.is_empty() {
                encoder = Some(encoder_receive.recv().map_err(|_| stopped())?);
            }
            let Some(encoder) = encoder.as_ref() else {
                return Ok(summary);
            };
            for (parsed, at) in ahead.drain(..) {
                batch.push(parsed);
                if batch.len() == PIPELINE_BATCH {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(PIPELINE_BATCH));
                    hand_over(full, encoder, at)?;
                }
            }
            if !batch.is_empty() {
                hand_over(batch, encoder, consumed.get())?;
            }
            Ok(summary)
        });
        let feed = Feed {
            encoder: encoder_send,
            batches,
            spent: spent_send,
            writer_waiting,
            reading,
            progress,
        };
        // A failure here drops the feed, which stops the reader; the scope joins it.
        before()?;
        write(feed)
    })
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
    file.seek(SeekFrom::Start(r.bytes)).map_err(io)?;
    let start = ReadStart::After {
        header,
        offset: r.bytes,
        lines: r.lines,
    };
    pipelined(
        BufReader::with_capacity(1 << 16, file),
        path,
        start,
        progress,
        || Ok(()),
        |feed| {
            archive.write_session(|w| {
                w.resume(&r.session_id)?;
                let summary = feed.write(w)?;
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

/// Hashes what is read through it into a hash the writing thread reads once
/// the reading thread is done.
struct HashingReader<'a, R> {
    inner: R,
    hash: &'a std::sync::Mutex<WideFnv>,
}

impl<R: Read> Read for HashingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .update(&buf[..n]);
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
