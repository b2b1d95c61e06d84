//! The import pipeline: a reader thread parses (and encodes) entries while
//! the importing thread writes them.

use super::hash::HashingReader;
use super::plan::NewFile;
use super::progress::ByteProgress;
use crate::backend::jsonl::{
    read_session_leniently, Leniency, ReadStart, ReadSummary, SkippedLine,
};
use crate::backend::sqlite::codec::{Encoder, Prepared};
use crate::backend::sqlite::SessionWriter;
use crate::error::{Error, Result};
use crate::fnv::WideFnv;
use crate::search::searchable_text;
use crate::storage::KeptLine;
use crate::usage::{usage_fact, UsageFact};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

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
/// How long a batched write (a large file's import) keeps the write lock
/// while it waits for the reader's next entries, before it commits its
/// batch and waits without it ([`SessionWriter::pause_batch`]). A reader
/// behind by more is a reader off its CPU (the machine is busy): other
/// writers should not wait for it too.
const IDLE_HOLD: Duration = Duration::from_millis(5);
/// Bytes of entry text the reading thread parses ahead while the archive's
/// first dictionary is being trained (entries cannot be encoded before it
/// exists): enough to keep it busy through most of a training, a bound on
/// the memory that costs.
const TRAINING_READ_AHEAD: usize = 8 << 20;

/// One parsed entry on its way to the writer, with what the reader derived
/// from it (so the writer, the busier thread, only writes rows).
struct Parsed {
    entry: crate::entry::Entry,
    /// Its search text (role, text).
    text: Option<(String, String)>,
    /// The usage it counts towards statistics.
    usage: Option<UsageFact>,
    /// Its stored encoding, unless the reader left that to the writer.
    prepared: Option<Prepared>,
}

/// A file for [`pipelined`]'s reader to read.
pub(super) struct Source {
    pub(super) path: PathBuf,
    pub(super) start: ReadStart,
    /// Whether to hash the bytes read ([`WideFnv`]): a new file's import
    /// record holds the hash of all of them.
    pub(super) hash: bool,
}

impl Source {
    /// A new file, read and hashed from its start.
    pub(super) fn new_file(file: &NewFile) -> Self {
        Source {
            path: file.path.clone(),
            start: ReadStart::Beginning,
            hash: true,
        }
    }
}

/// What the reader made of one file.
pub(super) struct FileRead {
    pub(super) summary: ReadSummary,
    /// The lines pi 1.6 skips (or the archive cannot hold), kept verbatim,
    /// with the entries of this read before each.
    pub(super) skipped: Vec<SkippedLine>,
    /// The tagged hash of every byte read, if the [`Source`] asked for it.
    pub(super) hash: Option<String>,
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
pub(super) fn pipelined<T>(
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
            read: 0,
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
            held: std::collections::VecDeque::new(),
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
    /// Entries read, for a test's stalls ([`test_reader_stall`]).
    read: u64,
}

/// A reader that stalls, as a test makes it (`SESSIONTREE_TEST_READER_STALL=EVERY:MS`):
/// a pause of MS after every EVERY entries, as a reader off its CPU on a
/// busy machine. `None` unless set.
fn test_reader_stall() -> Option<(u64, Duration)> {
    static SET: std::sync::OnceLock<Option<(u64, Duration)>> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        let v = std::env::var("SESSIONTREE_TEST_READER_STALL").ok()?;
        let (every, ms) = v.split_once(':')?;
        Some((
            every.trim().parse().ok().filter(|&n| n > 0)?,
            Duration::from_millis(ms.trim().parse().ok()?),
        ))
    })
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
        // pi 1.6 opens what it can; an archive needs unique ids.
        let mut skipped = Vec::new();
        let lines_before = match &start {
            ReadStart::Beginning => 0,
            ReadStart::After { lines, .. } => *lines,
        };
        let summary = read_session_leniently(
            super::door::LineCap::new(reader, lines_before),
            &path,
            start,
            Leniency::APP_UNIQUE_IDS,
            |_, entry| {
                if self.abandoned() {
                    return Err(file_left());
                }
                self.take(entry, consumed.get())
            },
            |line| {
                skipped.push(line);
                Ok(())
            },
        )?;
        self.finish_file(consumed.get())?;
        Ok(FileRead {
            summary,
            skipped,
            hash: hashing.hash.map(|h| h.tagged_hex()),
        })
    }

    /// Takes one parsed entry, whose line ended at `at`: held back while
    /// there is no encoder yet (up to the read-ahead), else batched.
    fn take(&mut self, entry: crate::entry::Entry, at: u64) -> Result<()> {
        self.read += 1;
        if let Some((every, stall)) = test_reader_stall() {
            if self.read.is_multiple_of(every) {
                std::thread::sleep(stall);
            }
        }
        let parsed = Parsed {
            text: searchable_text(&entry),
            usage: usage_fact(&entry),
            entry,
            prepared: None,
        };
        if self.encoder.is_none() {
            match self.encoder_receive.try_recv() {
                Ok(e) => self.encoder = Some(e),
                Err(std::sync::mpsc::TryRecvError::Empty)
                    if self.ahead_bytes < TRAINING_READ_AHEAD =>
                {
                    self.ahead_bytes += parsed.entry.json().len();
                    self.ahead.push_back((parsed, at));
                    return Ok(());
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => self.wait_for_encoder()?,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err(self.stop()),
            }
        }
        self.push_ahead()?;
        self.push(parsed, at)
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
        self.batch_bytes += parsed.entry.json().len();
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
            for Parsed {
                entry, prepared, ..
            } in &mut full
            {
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
pub(super) struct Feed<'s> {
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
    pub(super) next_file: usize,
    /// Entries the archive already holds (see [`Feed::already_held`]): the
    /// next ones read are checked against them and not written again.
    held: std::collections::VecDeque<crate::entry::Entry>,
    reading: std::thread::ScopedJoinHandle<'s, Result<()>>,
}

impl Feed<'_> {
    /// Writes the entries of the reader's next file into `w`'s session;
    /// returns what the reader read. Either way the feed is then at the
    /// file after: a failed write leaves the rest of this one unread.
    pub(super) fn write(
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

    /// The next entries read are `held` (the batches an append killed
    /// half-way committed, found the same on the file's lines): each is
    /// checked again (the file may have changed since) and passed by
    /// instead of written, so the write goes on after them as if it had
    /// never stopped. One that differs fails the write before it commits.
    pub(super) fn already_held(&mut self, held: Vec<crate::entry::Entry>) {
        self.held = held.into();
    }

    /// Waits for the reader's next batch (`None`: the reader stopped). A
    /// batched write `w` that waits longer than [`IDLE_HOLD`] commits its
    /// batch and waits without the write lock, and begins its next batch
    /// when the input comes; a failure to do either is `written`'s.
    fn wait_for_batch(
        &mut self,
        w: Option<&mut SessionWriter<'_>>,
        written: &mut Result<()>,
    ) -> Option<Handed> {
        use std::sync::mpsc::RecvTimeoutError;
        let Some(w) = w.filter(|_| written.is_ok()) else {
            return self.batches.recv().ok();
        };
        match self.batches.recv_timeout(IDLE_HOLD) {
            Ok(handed) => return Some(handed),
            Err(RecvTimeoutError::Disconnected) => return None,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let paused = w.pause_batch();
        let handed = self.batches.recv().ok();
        *written = paused.and_then(|_| w.resume_batch());
        handed
    }

    /// Passes the reader's next file by, unwritten.
    fn skip(&mut self) {
        let _ = self.take_file(None, &mut ByteProgress::new(&mut |_| {}));
    }

    /// Passes the reader's files by, unwritten, up to (not including) the
    /// one at `index`.
    pub(super) fn skip_until(&mut self, index: usize) {
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
                    let handed = self.wait_for_batch(w.as_deref_mut(), &mut written);
                    self.writer_waiting.store(false, Ordering::Release);
                    if written.is_err() {
                        self.abandoned_below.fetch_max(file + 1, Ordering::AcqRel);
                    }
                    match handed {
                        Some(handed) => handed,
                        None => return written.and(Err(reader_stopped())),
                    }
                }
            };
            match handed {
                Handed::Batch(mut batch, reached) => {
                    if let (Some(w), Ok(()), Some(mine)) =
                        (w.as_deref_mut(), &written, self.mine.as_ref())
                    {
                        written = push_batch(w, mine, &mut batch, &mut self.held);
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
                    if w.is_some() && !self.held.is_empty() {
                        return Err(Error::Unknown(format!(
                            "the file changed while it was imported: {} entries the archive holds from it are gone",
                            self.held.len()
                        )));
                    }
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

/// Writes one batch of parsed entries, encoding those the reader left;
/// those `held` names (the first ones) are checked and passed by.
fn push_batch(
    w: &mut SessionWriter<'_>,
    mine: &Encoder,
    batch: &mut [Parsed],
    held: &mut std::collections::VecDeque<crate::entry::Entry>,
) -> Result<()> {
    for Parsed {
        entry,
        text,
        usage,
        prepared,
    } in batch
    {
        if let Some(had) = held.pop_front() {
            if had.id() != entry.id() || !super::merge::same_entry(had.json(), entry.json()) {
                return Err(Error::Unknown(format!(
                    "the file changed while it was imported: entry {} where the archive holds {}",
                    entry.id(),
                    had.id()
                )));
            }
            continue;
        }
        let prepared = prepared.get_or_insert_with(|| mine.prepare(entry.json()));
        let text = text
            .as_ref()
            .map(|(role, text)| (role.as_str(), text.as_str()));
        w.push_prepared(entry, text, usage.as_ref(), prepared)?;
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

/// Keeps a read's skipped lines in the session being written, `base`
/// entries in (the entries it held before the read), and where the file
/// ended without its final `\n`.
pub(super) fn keep_lines(
    w: &mut SessionWriter<'_>,
    skipped: &[SkippedLine],
    base: i64,
    summary: &ReadSummary,
) -> Result<()> {
    let kept: Vec<KeptLine> = skipped
        .iter()
        .map(|l| KeptLine {
            position: if l.entries_before < 0 {
                -1
            } else {
                base + l.entries_before
            },
            text: l.text.clone(),
        })
        .collect();
    if !kept.is_empty() {
        w.keep_lines(&kept)?;
    }
    let open_end = (summary.missing_final_newline && summary.torn_tail.is_none())
        .then(|| base + i64::try_from(summary.entries).unwrap_or(i64::MAX));
    w.set_open_end(open_end)
}
