//! Re-encoding an archive's entry text ([`codec`]): the version-6
//! migration (one transaction: a first dictionary, every entry encoded) and
//! [`Archive::compact`] (a retrained dictionary, entries re-encoded in short
//! transactions so writers never wait long, unused dictionaries and blobs
//! dropped, VACUUM). Every rewrite checks that the new value decodes to the
//! same text before it is written; a kill at any instant leaves each entry
//! in its old or its new encoding, both readable. Compression, nearly all
//! of a pass's time, runs on a pool of threads ([`EncodePool`]); SQLite
//! stays on the caller's connection.

use super::block;
use super::codec::{self, Codec, Encoder, Training};
use super::error::sql;
use super::handle::Archive;
use super::reencode_guard::reencoding;
use super::writer::{BATCHED_WRITE, STAGED_GAP};
use crate::error::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// Rows re-encoded per transaction by `compact`.
pub(in crate::backend::sqlite) const BATCH_ROWS: i64 = 2_000;
/// Bytes of text held per batch (bounds memory whatever the entry sizes).
const BATCH_BYTES: usize = 16 << 20;
/// The most threads that compress one batch.
const MAX_ENCODE_THREADS: usize = 4;
/// A batch with less text than this per thread is compressed on the
/// calling thread alone (handing a chunk over costs more than it saves).
const MIN_BYTES_PER_THREAD: usize = 64 << 10;
/// Entries an archive may hold for its first dictionary, trained from
/// appends, to re-encode them all at once (about a second); the rest wait
/// for `compact`.
pub const REENCODE_AFTER_TRAINING: u64 = 50_000;

/// What [`Archive::compact`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactReport {
    /// File bytes (database plus WAL) before.
    pub bytes_before: u64,
    /// File bytes (database plus WAL) after.
    pub bytes_after: u64,
    /// Entries read.
    pub entries: u64,
    /// Entries whose stored value changed.
    pub reencoded: u64,
    /// The new dictionary's size (0 when there was too little text to train).
    pub dictionary_bytes: usize,
    /// Dictionaries no entry used any more, removed.
    pub dictionaries_removed: u64,
    /// Blobs no entry held any more, removed.
    pub blobs_removed: u64,
    /// Blocks that did not decode to their members' texts and were not
    /// written (their members were stored alone): 0 unless this build has
    /// a bug.
    pub blocks_refused: u64,
}

/// Bytes per part of an archive (from SQLite's `dbstat`), for reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageSplit {
    /// (part, bytes), largest first: entries, search index, branch cache,
    /// blobs, dictionaries, sessions and the rest.
    pub parts: Vec<(&'static str, u64)>,
}

impl StorageSplit {
    /// All parts together.
    pub fn total(&self) -> u64 {
        self.parts.iter().map(|p| p.1).sum()
    }
}

fn part_of(table: &str) -> &'static str {
    match table {
        t if t.starts_with("message_text") => "search index",
        "entries" | "entries_by_seq" | "entries_by_id" | "entries_by_type" => "entries",
        "segments"
        | "segment_ancestry"
        | "compactions"
        | "leaf_events"
        | "segments_by_session"
        | "segments_by_missing_parent"
        | "compactions_by_session" => "branch cache",
        "entry_blocks" | "entry_blocks_by_session" => "entries",
        "blobs" | "blobs_by_hash" | "entry_blobs" | "entry_blobs_by_blob" => "blobs",
        "dictionaries" => "dictionaries",
        _ => "sessions and the rest",
    }
}

/// Samples of the archive's entry texts for training, spread over the whole
/// archive, at most [`codec::TRAINING_BUDGET`] bytes.
fn training_samples(conn: &Connection, codec: &Codec) -> Result<Vec<Vec<u8>>> {
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
        .map_err(sql("sampling entries"))?;
    // Every k-th entry by a hash of its key (deterministic, spread over
    // sessions and depths); ~8,000 samples.
    let k = (rows / 8_000).max(1);
    let mut st = conn
        .prepare(
            "SELECT json FROM entries
             WHERE ((entry_key >> 32) * 7919 + (entry_key & 4294967295) * 104729) % ?1 = 0",
        )
        .map_err(sql("sampling entries"))?;
    let mut found = st.query([k]).map_err(sql("sampling entries"))?;
    let mut samples = Vec::new();
    let mut bytes = 0;
    while let Some(row) = found.next().map_err(sql("sampling entries"))? {
        let sample =
            codec.training_sample_of(conn, row.get_ref(0).map_err(sql("sampling entries"))?)?;
        bytes += sample.len();
        samples.push(sample);
        if bytes >= codec::TRAINING_BUDGET {
            break;
        }
    }
    Ok(samples)
}

/// Trains a dictionary from the archive's entries and stores it (in `tx`).
pub(in crate::backend::sqlite) fn train_from_archive(
    tx: &Connection,
    codec: &Codec,
    training: Training,
) -> Result<Option<Arc<codec::Dictionary>>> {
    let samples = training_samples(tx, codec)?;
    let Some(bytes) = codec::train(&samples, training) else {
        return Ok(None);
    };
    let sample_bytes = samples.iter().map(Vec::len).sum();
    codec::insert_dictionary(tx, bytes, samples.len(), sample_bytes).map(Some)
}

/// Entries in the archive (the unit of re-encoding progress).
pub(in crate::backend::sqlite) fn entry_total(conn: &Connection) -> Result<u64> {
    let n: i64 = conn
        .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
        .map_err(sql("re-encoding entries"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[derive(Default)]
pub(in crate::backend::sqlite) struct Pass {
    pub(in crate::backend::sqlite) entries: u64,
    reencoded: u64,
    blocks_refused: u64,
}

/// How a pass stores the entries it re-encodes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::backend::sqlite) enum Packing {
    /// Each entry alone; members of blocks are left in their blocks.
    Alone,
    /// Runs of a session's entries in blocks ([`block::runs`]), `compact`'s way.
    Blocks,
}

/// One entry row read for re-encoding.
struct Row {
    key: i64,
    session: i64,
    old: rusqlite::types::Value,
    /// The entry's text; empty when `spliced`.
    text: String,
    /// Its stored body splices blobs: re-encoded from its template.
    spliced: bool,
}

/// Re-encodes the entries after `after` (entry_key order) in `conn`'s
/// transaction, about `max_rows` of them; returns the last key seen, `None`
/// at the end. A batch never ends inside a block: a reader between two
/// batches finds every block whole (its members all old or all new).
pub(in crate::backend::sqlite) fn reencode_batch(
    conn: &Connection,
    codec: &Codec,
    pool: &EncodePool<'_>,
    (after, max_rows): (i64, i64),
    packing: Packing,
    pass: &mut Pass,
) -> Result<Option<i64>> {
    let Some(batch) = read_batch(conn, codec, (after, max_rows), packing, pass)? else {
        return Ok(None);
    };
    let last = batch.last;
    let encoded = encode_batch(batch, packing, pool);
    write_batch(conn, codec, pool, encoded, false, pass)?;
    Ok(Some(last))
}

/// The rows of one batch, read.
pub(in crate::backend::sqlite) struct ReadBatch {
    rows: Vec<Row>,
    last: i64,
}

/// A batch's rows, cut in runs (each a block or an entry alone), each run
/// compressed.
pub(in crate::backend::sqlite) struct EncodedBatch {
    rows: Vec<Row>,
    runs: Vec<std::ops::Range<usize>>,
    prepared: Vec<codec::Prepared>,
}

/// Reads the entries after `after` (entry_key order), about `max_rows` of
/// them, never ending inside a block; `None` at the end. Needs no write lock
/// (`compact` reads in a read transaction, one snapshot).
fn read_batch(
    conn: &Connection,
    codec: &Codec,
    (after, max_rows): (i64, i64),
    packing: Packing,
    pass: &mut Pass,
) -> Result<Option<ReadBatch>> {
    let mut rows = Vec::new();
    let mut bytes = 0;
    let mut last = None;
    let mut st = conn
        .prepare_cached(
            "SELECT entry_key, session_key, json FROM entries WHERE entry_key > ?1 ORDER BY entry_key LIMIT ?2",
        )
        .map_err(sql("re-encoding entries"))?;
    let mut found = st
        .query(params![after, max_rows + block::BLOCK_ENTRIES as i64])
        .map_err(sql("re-encoding entries"))?;
    let mut seen = 0;
    while let Some(row) = found.next().map_err(sql("re-encoding entries"))? {
        let key: i64 = row.get(0).map_err(sql("re-encoding entries"))?;
        let old: rusqlite::types::Value = row.get(2).map_err(sql("re-encoding entries"))?;
        let place = block::place((&old).into());
        if (seen >= max_rows || bytes >= BATCH_BYTES) && block::may_end_before(place) {
            break;
        }
        seen += 1;
        last = Some(key);
        if packing == Packing::Alone && place.is_some() {
            pass.entries += 1;
            continue;
        }
        // An entry holding images is re-encoded from its template
        // (`store_spliced`); its text is never assembled. Left empty,
        // it never joins a block (an empty text is not an object).
        let spliced = place.is_none() && !super::stored::body_refs((&old).into())?.blobs.is_empty();
        let text = if spliced {
            String::new()
        } else {
            codec.decode(conn, (&old).into())?
        };
        bytes += text.len();
        rows.push(Row {
            key,
            session: row.get(1).map_err(sql("re-encoding entries"))?,
            old,
            text,
            spliced,
        });
    }
    Ok(last.map(|last| ReadBatch { rows, last }))
}

/// Cuts a batch in runs and compresses each (on the pool's threads): the
/// slow part, which holds no lock.
fn encode_batch(batch: ReadBatch, packing: Packing, pool: &EncodePool<'_>) -> EncodedBatch {
    let rows = batch.rows;
    let runs: Vec<std::ops::Range<usize>> = match packing {
        Packing::Alone => (0..rows.len()).map(|i| i..i + 1).collect(),
        Packing::Blocks => block::runs(rows.iter().map(|r| (r.session, r.text.as_str()))),
    };
    let joined: Vec<Option<String>> = runs
        .iter()
        .map(|run| {
            (run.len() > 1).then(|| rows[run.clone()].iter().map(|r| r.text.as_str()).collect())
        })
        .collect();
    let texts: Vec<&str> = runs
        .iter()
        .zip(&joined)
        .map(|(run, joined)| joined.as_deref().unwrap_or(rows[run.start].text.as_str()))
        .collect();
    let prepared = pool.encode(&texts);
    EncodedBatch {
        rows,
        runs,
        prepared,
    }
}

/// Whether every member of a run still holds the value it was read with
/// (a run read outside the write transaction: another `compact`, or the
/// re-encode after a first dictionary, or a delete, may have changed it).
fn unchanged(conn: &Connection, members: &[Row]) -> Result<bool> {
    let mut st = conn
        .prepare_cached("SELECT json FROM entries WHERE entry_key = ?1")
        .map_err(sql("re-encoding entries"))?;
    for row in members {
        let now: Option<rusqlite::types::Value> = st
            .query_row([row.key], |r| r.get(0))
            .optional()
            .map_err(sql("re-encoding entries"))?;
        if now.as_ref() != Some(&row.old) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes an encoded batch in `conn`'s (write) transaction. `recheck`: the
/// batch was read before the transaction began, so a run whose rows changed
/// since is left as it is now (the next `compact` re-encodes it).
fn write_batch(
    conn: &Connection,
    codec: &Codec,
    pool: &EncodePool<'_>,
    batch: EncodedBatch,
    recheck: bool,
    pass: &mut Pass,
) -> Result<()> {
    let EncodedBatch {
        rows,
        runs,
        prepared,
    } = batch;
    for (run, prepared) in runs.into_iter().zip(prepared) {
        let members = &rows[run];
        pass.entries += members.len() as u64;
        if recheck && !unchanged(conn, members)? {
            continue;
        }
        if let [row] = members {
            if row.spliced {
                if store_spliced(conn, codec, pool.encoder, row)? {
                    pass.reencoded += 1;
                }
                continue;
            }
        }
        if members.len() > 1 && store_block(conn, codec, members, &prepared, pass)? {
            pass.reencoded += members.len() as u64;
            continue;
        }
        // A run of one, or a run whose block did not pay: each alone.
        let alone = match members {
            [_] => vec![prepared],
            _ => members
                .iter()
                .map(|r| pool.encoder.prepare(&r.text))
                .collect(),
        };
        for (row, prepared) in members.iter().zip(alone) {
            if store_alone(conn, codec, row, &prepared)? {
                pass.reencoded += 1;
            }
        }
    }
    Ok(())
}

/// Stores `row` alone as `prepared`; whether its stored value changed.
fn store_alone(
    conn: &Connection,
    codec: &Codec,
    row: &Row,
    prepared: &codec::Prepared,
) -> Result<bool> {
    let trails = codec::stored_message_trails(&row.text);
    let (new, blobs) = codec::store(conn, &row.text, prepared, trails)?;
    if new == row.old {
        return Ok(false);
    }
    if codec.decode(conn, (&new).into())? != row.text {
        return Err(Error::Corrupt(format!(
            "entry {} would not decode to its text after re-encoding; nothing changed",
            row.key
        )));
    }
    rewrite(conn, row, &new, &blobs)?;
    Ok(true)
}

/// Stores `row`, whose body splices blobs, re-encoded from its template
/// ([`Codec::reencode_spliced`]); whether its stored value changed.
fn store_spliced(conn: &Connection, codec: &Codec, encoder: &Encoder, row: &Row) -> Result<bool> {
    let Some((new, blobs)) = codec.reencode_spliced(conn, encoder, (&row.old).into())? else {
        return Err(Error::Corrupt(format!(
            "entry {} no longer splices blobs; nothing changed",
            row.key
        )));
    };
    if new == row.old {
        return Ok(false);
    }
    rewrite(conn, row, &new, &blobs)?;
    Ok(true)
}

/// Stores `members` (a run of [`block::runs`], consecutive rows) as one
/// block, their joined text prepared as `prepared`, checked to decode to
/// their texts before it is written; `false` if a block does not pay or
/// does not decode to them (counted in `pass`).
fn store_block(
    conn: &Connection,
    codec: &Codec,
    members: &[Row],
    prepared: &codec::Prepared,
    pass: &mut Pass,
) -> Result<bool> {
    let lengths: Vec<usize> = members.iter().map(|r| r.text.len()).collect();
    let trails: Vec<bool> = members
        .iter()
        .map(|r| codec::stored_message_trails(&r.text))
        .collect();
    // The id is taken first (a block that does not pay leaves an unused id,
    // removed with the unused blocks).
    let id = block::new_id(conn, members[0].session, members[0].key)?;
    let Some(bodies) = block::member_bodies(prepared, id, &lengths, &trails) else {
        return Ok(false);
    };
    let pieces: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    // A block that does not decode to its members' texts (which would be a
    // bug of this build) is not written: its members are stored alone,
    // each checked on its own, and `compact` goes on.
    let intact = match block::unpack(codec, conn, &pieces) {
        Ok(unpacked) => {
            unpacked.len() == members.len()
                && members
                    .iter()
                    .enumerate()
                    .all(|(i, r)| unpacked.member(i) == Some(r.text.as_bytes()))
        }
        Err(Error::Corrupt(_)) => false,
        Err(other) => return Err(other),
    };
    if !intact {
        pass.blocks_refused += 1;
        return Ok(false);
    }
    for (row, body) in members.iter().zip(bodies) {
        rewrite(conn, row, &rusqlite::types::Value::Blob(body), &[])?;
    }
    Ok(true)
}

/// Writes `row`'s new stored value and the blobs it holds.
fn rewrite(
    conn: &Connection,
    row: &Row,
    new: &rusqlite::types::Value,
    blobs: &[i64],
) -> Result<()> {
    reencoding(|| {
        conn.prepare_cached("UPDATE entries SET json = ?2 WHERE entry_key = ?1")
            .and_then(|mut st| st.execute(params![row.key, new]))
    })
    .map_err(sql("re-encoding entries"))?;
    conn.prepare_cached("DELETE FROM entry_blobs WHERE session_key = ?1 AND entry_key = ?2")
        .and_then(|mut st| st.execute(params![row.session, row.key]))
        .map_err(sql("re-encoding entries"))?;
    codec::record_blob_refs(conn, row.session, row.key, blobs)
}

/// Compresses batches of texts on the caller's thread and up to
/// [`MAX_ENCODE_THREADS`] − 1 workers: compression is nearly all of a pass's
/// time (at [`codec::COMPACT_LEVEL`] ~0.2 ms per entry) and entries
/// compress independently, while SQLite's reads and writes stay on the
/// caller's connection. Workers live for the whole pass, so each loads the
/// dictionary into its compression context once (at level 16 a load of a
/// 384 KB dictionary costs ~0.1 s).
pub(in crate::backend::sqlite) struct EncodePool<'a> {
    encoder: &'a Encoder,
    workers: Vec<Worker>,
}

/// A worker of an [`EncodePool`]: where its texts go, and where their
/// encodings come back.
type Worker = (Sender<Vec<String>>, Receiver<Vec<codec::Prepared>>);

impl<'a> EncodePool<'a> {
    /// Runs `f` with a pool of workers encoding with `encoder`; the workers
    /// end with it.
    pub(in crate::backend::sqlite) fn run<T>(
        encoder: &'a Encoder,
        f: impl FnOnce(&EncodePool<'a>) -> T,
    ) -> T {
        let threads = std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .min(MAX_ENCODE_THREADS);
        std::thread::scope(|scope| {
            let workers = (1..threads)
                .map(|_| {
                    let (texts_in, texts) = channel::<Vec<String>>();
                    let (done, done_out) = channel();
                    scope.spawn(move || {
                        for batch in texts {
                            let prepared: Vec<codec::Prepared> =
                                batch.iter().map(|t| encoder.prepare(t)).collect();
                            if done.send(prepared).is_err() {
                                break;
                            }
                        }
                    });
                    (texts_in, done_out)
                })
                .collect();
            // Dropping the pool closes the workers' queues: they end before
            // the scope does.
            f(&EncodePool { encoder, workers })
        })
    }

    /// `texts` encoded, in order.
    fn encode(&self, texts: &[&str]) -> Vec<codec::Prepared> {
        let threads = (self.workers.len() + 1)
            .min(texts.iter().map(|t| t.len()).sum::<usize>() / MIN_BYTES_PER_THREAD)
            .min(texts.len())
            .max(1);
        let encode_here = |chunk: &[&str]| -> Vec<codec::Prepared> {
            chunk.iter().map(|t| self.encoder.prepare(t)).collect()
        };
        if threads == 1 {
            return encode_here(texts);
        }
        let mut chunks = texts.chunks(texts.len().div_ceil(threads));
        let first = chunks.next().unwrap_or_default();
        let mut sent = Vec::new();
        for (chunk, (to, from)) in chunks.zip(&self.workers) {
            let owned = chunk.iter().map(|t| (*t).to_owned()).collect();
            // A worker that is gone (it cannot be, short of a panic in
            // `prepare`) leaves its chunk to this thread.
            sent.push((chunk, to.send(owned).ok().map(|()| from)));
        }
        let mut prepared = encode_here(first);
        for (chunk, from) in sent {
            match from.and_then(|from| from.recv().ok()) {
                Some(done) => prepared.extend(done),
                None => prepared.extend(encode_here(chunk)),
            }
        }
        prepared
    }
}

fn file_bytes(path: &std::path::Path) -> u64 {
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    size(path) + size(std::path::Path::new(&wal))
}

impl Archive {
    /// Whether the archive has a trained dictionary.
    pub fn has_dictionary(&self) -> Result<bool> {
        Ok(self.codec().newest(&*self.conn()?)?.is_some())
    }

    /// Trains the archive's first dictionary from `samples` (entry texts
    /// about to be imported) unless it has one; returns its size, if trained.
    pub fn train_first_dictionary(&self, samples: &[Vec<u8>]) -> Result<Option<usize>> {
        let samples: Vec<Vec<u8>> = samples
            .iter()
            .map(|s| codec::training_sample(&String::from_utf8_lossy(s)))
            .collect();
        let Some(bytes) = codec::train(&samples, Training::Quick) else {
            return Ok(None);
        };
        let mut conn = self.conn()?;
        let tx = self.begin_write(&mut conn, "storing a compression dictionary")?;
        if self.codec().newest(&tx)?.is_some() {
            return Ok(None);
        }
        let size = bytes.len();
        let sample_bytes = samples.iter().map(Vec::len).sum();
        codec::insert_dictionary(&tx, bytes, samples.len(), sample_bytes)?;
        tx.commit()
            .map_err(sql("storing a compression dictionary"))?;
        Ok(Some(size))
    }

    /// Trains the archive's first dictionary from its own entries and
    /// re-encodes them with it, as `compact` does (short transactions), for an
    /// archive filled by appends alone (pi through `rpc` or the Node binding:
    /// no import to train from). Nothing happens if it has a dictionary or too
    /// little text to train one; past `REENCODE_AFTER_TRAINING` (50,000) entries the
    /// old ones are left to `compact`. Returns whether it trained.
    pub fn train_first_dictionary_from_entries(&self) -> Result<bool> {
        let mut conn = self.conn()?;
        let trained = {
            let tx = self.begin_write(&mut conn, "training a dictionary")?;
            if self.codec().newest(&tx)?.is_some() {
                return Ok(false);
            }
            let trained = train_from_archive(&tx, self.codec(), Training::Quick)?;
            tx.commit().map_err(sql("training a dictionary"))?;
            trained
        };
        let Some(trained) = trained else {
            return Ok(false);
        };
        if entry_total(&conn)? > REENCODE_AFTER_TRAINING {
            return Ok(true);
        }
        let encoder = Encoder::new(Some(self.codec().dictionary(&conn, trained.id)?));
        self.reencode_all(&mut conn, &encoder, Packing::Alone, &mut |_| {})?;
        Ok(true)
    }

    /// Re-encodes every entry with `encoder` in transactions of
    /// [`BATCH_ROWS`] (a writer waits at most one batch); `progress` hears the
    /// entries done after each.
    fn reencode_all(
        &self,
        conn: &mut Connection,
        encoder: &Encoder,
        packing: Packing,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Pass> {
        let mut pass = Pass::default();
        let mut after = i64::MIN;
        EncodePool::run(encoder, |pool| loop {
            // Read in one snapshot and compressed holding no lock; only
            // the writes (each run checked unchanged first) take the lock.
            let read = {
                let tx = Archive::begin_read(conn, "re-encoding entries")?;
                read_batch(&tx, self.codec(), (after, BATCH_ROWS), packing, &mut pass)?
            };
            let Some(batch) = read else {
                return Ok(pass);
            };
            after = batch.last;
            let encoded = encode_batch(batch, packing, pool);
            let tx = self.begin_write(conn, "re-encoding entries")?;
            write_batch(&tx, self.codec(), pool, encoded, true, &mut pass)?;
            tx.commit().map_err(sql("re-encoding entries"))?;
            progress(pass.entries);
        })
    }

    /// Retrains the dictionary on the archive's entries, re-encodes every
    /// entry with it (short transactions: writers wait at most one batch),
    /// removes dictionaries and blobs nothing uses, and VACUUMs.
    /// `progress` hears (entries done, entries in all).
    pub fn compact(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<CompactReport> {
        let mut report = CompactReport {
            bytes_before: file_bytes(self.path()),
            ..CompactReport::default()
        };
        let mut conn = self.conn()?;
        // The dictionary is committed before any entry uses it (codec invariant 2).
        let encoder = {
            // Sampled in one snapshot and trained holding no lock (the
            // search takes seconds); only storing it takes the lock.
            let samples = {
                let tx = Archive::begin_read(&conn, "sampling entries")?;
                training_samples(&tx, self.codec())?
            };
            let trained = match codec::train(&samples, Training::Search) {
                Some(bytes) => {
                    let tx = self.begin_write(&mut conn, "training a dictionary")?;
                    let sample_bytes = samples.iter().map(Vec::len).sum();
                    let d = codec::insert_dictionary(&tx, bytes, samples.len(), sample_bytes)?;
                    tx.commit().map_err(sql("training a dictionary"))?;
                    Some(d)
                }
                None => None,
            };
            report.dictionary_bytes = trained.as_ref().map_or(0, |d| d.len());
            match trained {
                Some(d) => Encoder::new(Some(self.codec().dictionary(&conn, d.id)?)),
                None => self.codec().encoder(&conn)?,
            }
            .with_level(codec::COMPACT_LEVEL)
        };
        let total = entry_total(&conn)?;
        progress(0, total);
        let pass = self.reencode_all(&mut conn, &encoder, Packing::Blocks, &mut |done| {
            progress(done.min(total), total);
        })?;
        report.entries = pass.entries;
        report.reencoded = pass.reencoded;
        report.blocks_refused = pass.blocks_refused;
        let (dictionaries, blobs) = remove_unused(self, &mut conn)?;
        report.dictionaries_removed = dictionaries;
        report.blobs_removed = blobs;
        // One b-tree for the search index instead of its many segments.
        merge_search_index(self, &mut conn)?;
        give_back_space(self, &mut conn)?;
        super::connection::truncate_log(&mut conn).map_err(sql("vacuuming the archive"))?;
        report.bytes_after = file_bytes(self.path());
        Ok(report)
    }

    /// The bytes each part of the archive takes.
    pub fn storage_split(&self) -> Result<StorageSplit> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
            .map_err(sql("measuring the archive"))?;
        let rows: Vec<(String, i64)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(Iterator::collect)
            .map_err(sql("measuring the archive"))?;
        let mut parts: Vec<(&'static str, u64)> = Vec::new();
        for (name, bytes) in rows {
            let part = part_of(&name);
            let bytes = u64::try_from(bytes).unwrap_or(0);
            match parts.iter_mut().find(|p| p.0 == part) {
                Some(p) => p.1 += bytes,
                None => parts.push((part, bytes)),
            }
        }
        parts.sort_by_key(|p| std::cmp::Reverse(p.1));
        Ok(StorageSplit { parts })
    }
}

/// Removes blocks no entry names, dictionaries no entry or block uses
/// (never the newest) and blobs no entry holds. Which are used is read in
/// one snapshot holding no lock (every entry is read); the removal is one
/// short transaction. Nothing written meanwhile can start using what is
/// removed: appends encode with the newest dictionary, and only `compact`
/// writes blocks.
fn remove_unused(archive: &Archive, conn: &mut Connection) -> Result<(u64, u64)> {
    let codec = archive.codec();
    let mut used = std::collections::HashSet::new();
    let mut blocks = std::collections::HashSet::new();
    let (unused_blocks, dictionary_ids) = {
        let tx = Archive::begin_read(conn, "removing unused dictionaries")?;
        let mut st = tx
            .prepare("SELECT json FROM entries WHERE typeof(json) = 'blob'")
            .map_err(sql("removing unused dictionaries"))?;
        let mut rows = st.query([]).map_err(sql("removing unused dictionaries"))?;
        while let Some(row) = rows.next().map_err(sql("removing unused dictionaries"))? {
            let refs = super::stored::body_refs(
                row.get_ref(0)
                    .map_err(sql("removing unused dictionaries"))?,
            )?;
            used.extend(refs.dictionary);
            blocks.extend(refs.block);
        }
        drop(rows);
        drop(st);
        let all_blocks: Vec<i64> = tx
            .prepare("SELECT block_id FROM entry_blocks")
            .and_then(|mut st| st.query_map([], |r| r.get(0)).and_then(Iterator::collect))
            .map_err(sql("removing unused blocks"))?;
        let ids: Vec<i64> = tx
            .prepare("SELECT dict_id FROM dictionaries")
            .and_then(|mut st| st.query_map([], |r| r.get(0)).and_then(Iterator::collect))
            .map_err(sql("removing unused dictionaries"))?;
        let unused: Vec<i64> = all_blocks
            .into_iter()
            .filter(|id| !blocks.contains(id))
            .collect();
        (unused, ids)
    };
    let tx = archive.begin_write(conn, "removing unused dictionaries")?;
    let newest = codec.newest(&tx)?.map(|d| d.id);
    {
        let mut delete = tx
            .prepare("DELETE FROM entry_blocks WHERE block_id = ?1")
            .map_err(sql("removing unused blocks"))?;
        for id in unused_blocks {
            delete
                .execute([id])
                .map_err(sql("removing unused blocks"))?;
        }
    }
    let mut dictionaries = 0;
    for id in dictionary_ids {
        if Some(id) != newest && !used.contains(&id) {
            tx.execute("DELETE FROM dictionaries WHERE dict_id = ?1", [id])
                .map_err(sql("removing unused dictionaries"))?;
            dictionaries += 1;
        }
    }
    let blobs = tx
        .execute(
            "DELETE FROM blobs WHERE NOT EXISTS (SELECT 1 FROM entry_blobs r WHERE r.blob_id = blobs.blob_id)",
            [],
        )
        .map_err(sql("removing unused blobs"))?;
    tx.commit().map_err(sql("removing unused dictionaries"))?;
    Ok((dictionaries, blobs as u64))
}

/// Search-index pages merged per step of [`merge_search_index`].
const MERGE_PAGES: i64 = 64;
/// Free pages given back per step of [`give_back_space`].
const VACUUM_PAGES: i64 = 256;

/// Runs `step` in write transactions of at most [`BATCHED_WRITE`] each
/// (several steps to one), a pause between them so that a waiting writer
/// gets the lock, until `step` says it is done.
fn in_batches(
    archive: &Archive,
    conn: &mut Connection,
    what: &'static str,
    step: &mut dyn FnMut(&Connection) -> Result<bool>,
) -> Result<()> {
    loop {
        let tx = archive.begin_write(conn, what)?;
        let started = std::time::Instant::now();
        let done = loop {
            if step(&tx)? {
                break true;
            }
            if started.elapsed() >= BATCHED_WRITE {
                break false;
            }
        };
        tx.commit().map_err(sql(what))?;
        if done {
            return Ok(());
        }
        std::thread::sleep(STAGED_GAP);
    }
}

/// Merges the search index's segments into one b-tree (what FTS5's
/// `optimize` does in one go), a few pages a step.
fn merge_search_index(archive: &Archive, conn: &mut Connection) -> Result<()> {
    in_batches(archive, conn, "merging the search index", &mut |tx| {
        let before = tx.total_changes();
        tx.execute(
            "INSERT INTO message_text (message_text, rank) VALUES ('merge', ?1)",
            [-MERGE_PAGES],
        )
        .map_err(sql("merging the search index"))?;
        // FTS5: fewer than two rows changed means nothing was left to merge.
        Ok(tx.total_changes() - before < 2)
    })
}

/// Gives the free pages back to the file system. An archive in incremental
/// auto-vacuum mode (every archive this build creates) moves pages and
/// truncates the file a few pages a step; an older one is VACUUMed once
/// (holding the lock for it) and set to incremental mode, so that its later
/// compacts step too.
fn give_back_space(archive: &Archive, conn: &mut Connection) -> Result<()> {
    let mode: i64 = conn
        .pragma_query_value(None, "auto_vacuum", |r| r.get(0))
        .map_err(sql("vacuuming the archive"))?;
    if mode != INCREMENTAL_VACUUM {
        return conn
            .execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")
            .map_err(sql("vacuuming the archive"));
    }
    in_batches(archive, conn, "vacuuming the archive", &mut |tx| {
        tx.query_row(
            &format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"),
            [],
            |_| Ok(()),
        )
        .optional()
        .map_err(sql("vacuuming the archive"))?;
        let free: i64 = tx
            .pragma_query_value(None, "freelist_count", |r| r.get(0))
            .map_err(sql("vacuuming the archive"))?;
        Ok(free == 0)
    })
}

/// `PRAGMA auto_vacuum`'s value for incremental mode.
pub(in crate::backend::sqlite) const INCREMENTAL_VACUUM: i64 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_encodes_every_text_in_order_as_one_thread_does() {
        // Distinct texts of uneven lengths, some of them plain (too short to
        // pay), enough for every worker to take a chunk.
        let texts: Vec<String> = (0..1_000)
            .map(|i| format!("{{\"n\":{i},\"text\":\"{}\"}}", "word ".repeat(i % 97)))
            .collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encoder = Encoder::default().with_level(codec::COMPACT_LEVEL);
        let alone: Vec<String> = texts
            .iter()
            .map(|t| format!("{:?}", encoder.prepare(t)))
            .collect();
        let pooled = EncodePool::run(&encoder, |pool| {
            // Twice: a worker serves every batch of a pass.
            (pool.encode(&texts), pool.encode(&texts[..300]))
        });
        let pooled: Vec<Vec<String>> = [pooled.0, pooled.1]
            .iter()
            .map(|p| p.iter().map(|p| format!("{p:?}")).collect())
            .collect();
        assert_eq!(pooled[0], alone);
        assert_eq!(pooled[1], alone[..300]);
    }
}
