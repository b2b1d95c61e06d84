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
use super::{fts, fts_dead, fts_rebuild};
use crate::error::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// Rows re-encoded per transaction by `compact`.
pub(in crate::backend::sqlite) const BATCH_ROWS: i64 = 2_000;

/// The least stored bytes a compact transaction writes again, however
/// long it takes: rows are deleted and inserted again ([`Rewrites`]), and
/// the pages at either end of a transaction's range stay partly empty. On
/// a loaded machine, transactions bounded by time alone took one block
/// each and left twice the unused space (16 % of the entries' pages,
/// 8 % before the compact); 256 KB is 64 pages, so the two ends cost
/// at most about 3 %.
const MIN_REWRITE_BYTES: usize = 256 * 1024;

/// How long a re-encode transaction may run, writing out and commit
/// included: another session's append waits for at most one.
const REWRITE_BOUND: std::time::Duration = BATCHED_WRITE;

/// When a re-encode transaction ends. Its rows are checked and encoded
/// first, then written out and committed ([`Rewrites::write`]), and the
/// writing out took as long again as the rest, or longer under load: a
/// transaction that stopped checking at half the bound ran 85–136 ms on a
/// loaded machine (98 MB pi home). So each transaction learns how long the
/// writing out of the one before took per stored byte, and stops once what
/// it has run plus what its writing out will take reaches the bound.
#[derive(Debug, Default, Clone, Copy)]
struct Pace {
    /// Seconds of writing out and commit per stored byte, smoothed over
    /// the transactions so far (`None` before the first).
    per_byte: Option<f64>,
}

impl Pace {
    /// Whether a transaction that has run `ran` over `bytes` stored bytes
    /// must stop now to end within [`REWRITE_BOUND`].
    fn must_end(&self, ran: std::time::Duration, bytes: usize) -> bool {
        let writing = match self.per_byte {
            Some(per_byte) => std::time::Duration::from_secs_f64(per_byte * bytes as f64),
            // Nothing learnt yet: about as long as the rest.
            None => ran,
        };
        ran + writing >= REWRITE_BOUND
    }

    /// Learns that writing out and committing `bytes` took `took`.
    fn learn(&mut self, took: std::time::Duration, bytes: usize) {
        let now = took.as_secs_f64() / bytes.max(1) as f64;
        self.per_byte = Some(match self.per_byte {
            // A slow commit (the disk, the machine's load) weighs at once;
            // a fast one brings the estimate down over a few.
            Some(before) if before > now => before * 0.7 + now * 0.3,
            _ => now,
        });
    }
}

/// The bytes a stored value takes.
fn stored_len(value: &rusqlite::types::Value) -> usize {
    use rusqlite::types::Value;
    match value {
        Value::Text(text) => text.len(),
        Value::Blob(bytes) => bytes.len(),
        Value::Null | Value::Integer(_) | Value::Real(_) => 8,
    }
}
/// Bytes of text held per batch (bounds memory whatever the entry sizes:
/// two batches are held at once, one compressing while the other is
/// written).
const BATCH_BYTES: usize = 8 << 20;
/// The most threads that compress one batch.
const MAX_ENCODE_THREADS: usize = 4;
/// A batch with less text than this per thread is compressed on the
/// calling thread alone (handing a chunk over costs more than it saves).
const MIN_BYTES_PER_THREAD: usize = 64 << 10;
/// Entries an archive may hold for its first dictionary, trained from
/// appends, to re-encode them all at once (about a second); the rest wait
/// for `compact`.
pub const REENCODE_AFTER_TRAINING: u64 = 50_000;

/// How hard [`Archive::compact_with`] works for a smaller archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactOptions {
    /// The zstd level blocks and entries are re-encoded at
    /// ([`CompactOptions::MIN_LEVEL`] to [`CompactOptions::MAX_LEVEL`]).
    pub level: i32,
    /// Train the dictionary with zstd's parameter search (five builds, each
    /// scored) instead of one fastCover build: about 1 % smaller entries for
    /// seconds more.
    pub search_dictionary: bool,
}

impl CompactOptions {
    /// The lowest level accepted.
    pub const MIN_LEVEL: i32 = 1;
    /// The highest level accepted (zstd's levels above it need a window
    /// larger than any block, and more memory, for nothing here).
    pub const MAX_LEVEL: i32 = 19;
    /// The default level: on a 98 MB pi home, 21 % less CPU than level 5
    /// for a 0.9 % larger archive (36 against 29 MB of JSONL per CPU
    /// second; 60.55 against 60.0 MB), which on a loaded machine is what
    /// decides the wall time. See docs/compact-archive.md.
    pub const DEFAULT_LEVEL: i32 = 3;
    /// `--best`'s level.
    pub const BEST_LEVEL: i32 = 19;

    /// The slow, strong setting (`compact --best`).
    pub fn best() -> Self {
        CompactOptions {
            level: Self::BEST_LEVEL,
            search_dictionary: true,
        }
    }

    /// The default setting at another level; an error outside
    /// [`CompactOptions::MIN_LEVEL`]..=[`CompactOptions::MAX_LEVEL`].
    pub fn at_level(level: i32) -> Result<Self> {
        if !(Self::MIN_LEVEL..=Self::MAX_LEVEL).contains(&level) {
            return Err(Error::Usage(format!(
                "compression level {level} is out of range: use {} to {}",
                Self::MIN_LEVEL,
                Self::MAX_LEVEL
            )));
        }
        Ok(CompactOptions {
            level,
            ..Self::default()
        })
    }
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            level: Self::DEFAULT_LEVEL,
            search_dictionary: false,
        }
    }
}

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
    /// Whether the newest dictionary was kept instead of retrained (a
    /// repeat compact: [`kept_dictionary`]).
    pub dictionary_kept: bool,
    /// Entries whose text was compressed again; the others were left as
    /// they were (blocks and entries alone already encoded with the kept
    /// dictionary at this level).
    pub entries_encoded: u64,
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

/// Of the sampled entries, the most that may be encoded with another
/// dictionary (or none) than the newest for a repeat `compact` to keep it:
/// past that the archive has changed enough that a retrain and a whole
/// pass are worth their time.
const STALE_SHARE: f64 = 0.10;
/// Blocks a repeat `compact` compresses again to learn whether they were
/// compressed at the level it is asked for (a zstd frame does not say).
const LEVEL_PROBES: usize = 3;

/// The newest dictionary, if a repeat `compact` at `options` may keep it
/// (issue 42.2: a compact retrained it every time, and a new dictionary
/// makes every entry's encoding new, so a repeat compact cost as much as
/// the first): only a quick training (not `--best`'s search); the
/// dictionary must be one a compact made blocks with, at this level (a
/// few of its blocks compressed again give the same bytes); it must have
/// been trained on at least half the text a training would sample now (a
/// small archive that has grown retrains); and at most [`STALE_SHARE`] of
/// the entries sampled over the whole archive may be encoded otherwise.
/// Read in `conn`'s snapshot.
fn kept_dictionary(
    conn: &Connection,
    codec: &Codec,
    options: CompactOptions,
) -> Result<Option<Arc<codec::Dictionary>>> {
    let e = || sql("sampling entries");
    if options.search_dictionary {
        return Ok(None);
    }
    let Some(newest) = codec.newest(conn)? else {
        return Ok(None);
    };
    let (samples, sample_bytes): (i64, i64) = conn
        .query_row(
            "SELECT samples, sample_bytes FROM dictionaries WHERE dict_id = ?1",
            [newest.id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(e())?;
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
        .map_err(e())?;
    let full_training = usize::try_from(sample_bytes).unwrap_or(0) * 2 >= codec::TRAINING_BUDGET;
    if !full_training && samples * 2 < rows.min(8_000) {
        return Ok(None);
    }
    // The same spread as the training samples ([`training_samples`]), the
    // stored values only (nothing decoded): which dictionary each uses.
    let k = (rows / 8_000).max(1);
    let mut st = conn
        .prepare(
            "SELECT json FROM entries
             WHERE ((entry_key >> 32) * 7919 + (entry_key & 4294967295) * 104729) % ?1 = 0",
        )
        .map_err(e())?;
    let mut head = conn
        .prepare_cached(
            "SELECT e.entry_key, e.json FROM entry_blocks b JOIN entries e ON e.entry_key = b.head_key
             WHERE b.block_id = ?1",
        )
        .map_err(e())?;
    let mut block_dictionary = std::collections::HashMap::new();
    let mut probes = Vec::new();
    let (mut sampled, mut stale) = (0u64, 0u64);
    let mut found = st.query([k]).map_err(e())?;
    while let Some(row) = found.next().map_err(e())? {
        let value = row.get_ref(0).map_err(e())?;
        // Plain text is what no encoding paid for: no dictionary serves it.
        if !matches!(value, rusqlite::types::ValueRef::Blob(_)) {
            continue;
        }
        let refs = super::stored::body_refs(value)?;
        let dictionary = match refs.block {
            None => refs.dictionary,
            Some(id) => match block_dictionary.get(&id) {
                Some(&d) => d,
                None => {
                    let head_row: Option<(i64, rusqlite::types::Value)> = head
                        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                        .map_err(e())?;
                    let d = match &head_row {
                        Some((_, value)) => super::stored::body_refs(value.into())?.dictionary,
                        None => None,
                    };
                    if d == Some(newest.id) && probes.len() < LEVEL_PROBES {
                        probes.extend(head_row.map(|(key, _)| key));
                    }
                    block_dictionary.insert(id, d);
                    d
                }
            },
        };
        sampled += 1;
        if dictionary != Some(newest.id) {
            stale += 1;
        }
    }
    drop(found);
    if probes.is_empty() || stale as f64 > sampled as f64 * STALE_SHARE {
        return Ok(None);
    }
    let encoder = Encoder::new(Some(Arc::clone(&newest))).with_level(options.level);
    for key in probes {
        if !compressed_alike(conn, codec, &encoder, key)? {
            return Ok(None);
        }
    }
    Ok(Some(newest))
}

/// Whether the block whose member 0 is entry `head` compresses with
/// `encoder` to the payload it holds (zstd is deterministic for one input,
/// dictionary and level).
fn compressed_alike(
    conn: &Connection,
    codec: &Codec,
    encoder: &Encoder,
    head: i64,
) -> Result<bool> {
    let e = || sql("sampling entries");
    let Some(first): Option<Vec<u8>> = conn
        .query_row(
            "SELECT json FROM entries WHERE entry_key = ?1",
            [head],
            |r| r.get(0),
        )
        .optional()
        .map_err(e())?
    else {
        return Ok(false);
    };
    let Some(header) = block::parse_member(&first)?.header else {
        return Ok(false);
    };
    let bodies: Vec<Vec<u8>> = conn
        .prepare_cached(
            "SELECT json FROM entries WHERE entry_key >= ?1 ORDER BY entry_key LIMIT ?2",
        )
        .and_then(|mut st| {
            st.query_map(params![head, header.lengths.len() as i64], |r| r.get(0))
                .and_then(Iterator::collect)
        })
        .map_err(e())?;
    let pieces: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    let unpacked = block::unpack(codec, conn, &pieces)?;
    let text: Vec<u8> = (0..unpacked.len())
        .filter_map(|i| unpacked.member(i))
        .flatten()
        .copied()
        .collect();
    let Ok(text) = String::from_utf8(text) else {
        return Ok(false);
    };
    let payload: Vec<u8> = pieces
        .iter()
        .map(|b| block::parse_member(b).map(|m| m.piece.to_vec()))
        .collect::<Result<Vec<_>>>()?
        .concat();
    Ok(
        matches!(encoder.prepare(&text), codec::Prepared::Encoded { payload: p, .. } if p == payload),
    )
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
    /// Entries whose text went to the encoder (the rest were left as they
    /// were: members of a block with the kept dictionary, entries alone
    /// with it that join no block).
    encoded: u64,
}

/// How a pass stores the entries it re-encodes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::backend::sqlite) enum Packing {
    /// Each entry alone; members of blocks are left in their blocks.
    Alone,
    /// Runs of a session's entries in blocks ([`block::runs`]), `compact`'s way.
    Blocks,
}

/// An entry row's columns besides its key, session and text.
type Rest = (i64, String, String, Option<i64>);

/// One entry row read for re-encoding.
struct Row {
    key: i64,
    session: i64,
    /// The row's other columns (seq, id, type, role_id; never changed),
    /// read when the row is to be written again whole ([`Rewrites`]).
    rest: Option<Rest>,
    old: rusqlite::types::Value,
    /// The entry's text; empty when `spliced`.
    text: String,
    /// Its stored body splices blobs: re-encoded from its template.
    spliced: bool,
    /// A block left as it was ([`Keep`]) lies between this row and the one
    /// before it in the batch: no run may join them (block invariant 2:
    /// members are consecutive rows).
    after_gap: bool,
}

/// What a repeat `compact` leaves as it is: the blocks compressed with
/// dictionary `dictionary` (kept, not retrained: [`kept_dictionary`]) at the
/// level asked for, and entries stored alone with it that join no block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::backend::sqlite) struct Keep {
    dictionary: i64,
}

impl Keep {
    /// Whether `row` is stored alone as encoding it alone again would store
    /// it: compressed with the kept dictionary, or plain text (for which no
    /// compression with it paid).
    fn holds_alone(self, row: &Row) -> bool {
        match &row.old {
            rusqlite::types::Value::Text(_) => true,
            old => {
                !block::is_member(old.into())
                    && super::stored::body_refs(old.into())
                        .is_ok_and(|refs| refs.dictionary == Some(self.dictionary))
            }
        }
    }
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
    let Some(batch) = read_batch(conn, codec, (after, max_rows), packing, (false, None), pass)?
    else {
        return Ok(None);
    };
    let last = batch.last;
    let encoded = encode_batch(batch, packing, pool, pass);
    write_batch(conn, codec, pool.encoder, encoded, pass)?;
    Ok(Some(last))
}

/// The rows of one batch, read.
pub(in crate::backend::sqlite) struct ReadBatch {
    rows: Vec<Row>,
    last: i64,
    /// What of it may be left as it is.
    keep: Option<Keep>,
}

/// A batch's rows, cut in runs (each a block or an entry alone), each run
/// compressed.
pub(in crate::backend::sqlite) struct EncodedBatch {
    rows: Arc<Vec<Row>>,
    runs: Arc<Vec<std::ops::Range<usize>>>,
    prepared: Vec<Compressed>,
}

/// A run compressed on the pool.
pub(in crate::backend::sqlite) struct Compressed {
    prepared: codec::Prepared,
    /// The worker decompressed it and found the run's text (a block's
    /// check, [`store_block`], then only checks how it is cut in members:
    /// decompression was a tenth of a pass on the one thread that also
    /// reads and writes).
    checked: bool,
}

/// Reads the entries after `after` (entry_key order), about `max_rows` of
/// them, never ending inside a block; `None` at the end. Needs no write lock
/// (`compact` reads in a read transaction, one snapshot).
fn read_batch(
    conn: &Connection,
    codec: &Codec,
    (after, max_rows): (i64, i64),
    packing: Packing,
    (whole, keep): (bool, Option<Keep>),
    pass: &mut Pass,
) -> Result<Option<ReadBatch>> {
    let mut rows = Vec::new();
    let mut bytes = 0;
    let mut last = None;
    // The block being left as it is (its member 0 named the kept
    // dictionary), and whether the next row read follows a block left.
    let mut leaving: Option<i64> = None;
    let mut after_gap = false;
    let mut st = conn
        .prepare_cached(
            if whole {
                "SELECT entry_key, session_key, json, seq, id, type, role_id FROM entries WHERE entry_key > ?1 ORDER BY entry_key LIMIT ?2"
            } else {
                "SELECT entry_key, session_key, json FROM entries WHERE entry_key > ?1 ORDER BY entry_key LIMIT ?2"
            },
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
        if let (Some(keep), Some((block, index))) = (keep, place) {
            if index == 0 {
                // Member 0 names the block's dictionary; the other members
                // follow it (batches never end inside a block).
                let dictionary = super::stored::body_refs((&old).into())?.dictionary;
                leaving = (dictionary == Some(keep.dictionary)).then_some(block);
            }
            if leaving == Some(block) {
                pass.entries += 1;
                after_gap = true;
                continue;
            }
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
        let rest = if whole {
            let e = || sql("re-encoding entries");
            Some((
                row.get(3).map_err(e())?,
                row.get(4).map_err(e())?,
                row.get(5).map_err(e())?,
                row.get(6).map_err(e())?,
            ))
        } else {
            None
        };
        rows.push(Row {
            key,
            session: row.get(1).map_err(sql("re-encoding entries"))?,
            rest,
            old,
            text,
            spliced,
            after_gap: std::mem::take(&mut after_gap),
        });
    }
    Ok(last.map(|last| ReadBatch { rows, last, keep }))
}

/// Cuts a batch in runs and compresses each (on the pool's threads): the
/// slow part, which holds no lock.
fn encode_batch(
    batch: ReadBatch,
    packing: Packing,
    pool: &EncodePool<'_>,
    pass: &mut Pass,
) -> EncodedBatch {
    pool.start(batch, packing, pass).finish(pool)
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

/// Writes an encoded batch in `conn`'s (write) transaction (the
/// migration's way: one transaction holds every batch).
fn write_batch(
    conn: &Connection,
    codec: &Codec,
    encoder: &Encoder,
    batch: EncodedBatch,
    pass: &mut Pass,
) -> Result<()> {
    let EncodedBatch {
        rows,
        runs,
        prepared,
    } = batch;
    let mut out = Rewrites::default();
    for (run, prepared) in runs.iter().zip(prepared) {
        write_run(
            conn,
            (codec, encoder),
            &rows[run.clone()],
            prepared,
            false,
            pass,
            &mut out,
        )?;
    }
    out.write(conn)
}

/// Writes one run (a block, or an entry alone) in `conn`'s (write)
/// transaction. `recheck`: the run was read before the transaction began,
/// so if its rows changed since it is left as it is now (the next
/// `compact` re-encodes it).
fn write_run(
    conn: &Connection,
    (codec, encoder): (&Codec, &Encoder),
    members: &[Row],
    Compressed { prepared, checked }: Compressed,
    recheck: bool,
    pass: &mut Pass,
    out: &mut Rewrites,
) -> Result<()> {
    pass.entries += members.len() as u64;
    if recheck && !unchanged(conn, members)? {
        return Ok(());
    }
    if let [row] = members {
        if row.spliced {
            if store_spliced(conn, codec, encoder, row, out)? {
                pass.reencoded += 1;
            }
            return Ok(());
        }
    }
    if members.len() > 1 && store_block(conn, codec, members, (&prepared, checked), pass, out)? {
        pass.reencoded += members.len() as u64;
        return Ok(());
    }
    // A run of one, or a run whose block did not pay: each alone.
    let alone = match members {
        [_] => vec![prepared],
        _ => members.iter().map(|r| encoder.prepare(&r.text)).collect(),
    };
    for (row, prepared) in members.iter().zip(alone) {
        if store_alone(conn, codec, row, &prepared, out)? {
            pass.reencoded += 1;
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
    out: &mut Rewrites,
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
    out.push(row, new, blobs);
    Ok(true)
}

/// Stores `row`, whose body splices blobs, re-encoded from its template
/// ([`Codec::reencode_spliced`]); whether its stored value changed.
fn store_spliced(
    conn: &Connection,
    codec: &Codec,
    encoder: &Encoder,
    row: &Row,
    out: &mut Rewrites,
) -> Result<bool> {
    let Some((new, blobs)) = codec.reencode_spliced(conn, encoder, (&row.old).into())? else {
        return Err(Error::Corrupt(format!(
            "entry {} no longer splices blobs; nothing changed",
            row.key
        )));
    };
    if new == row.old {
        return Ok(false);
    }
    out.push(row, new, blobs);
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
    (prepared, checked): (&codec::Prepared, bool),
    pass: &mut Pass,
    out: &mut Rewrites,
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
    // each checked on its own, and `compact` goes on. A payload the worker
    // decompressed to the members' joined text needs only its cut checked.
    let intact = if checked {
        block::assembles(&pieces, id, &lengths, prepared)
    } else {
        match block::unpack(codec, conn, &pieces) {
            Ok(unpacked) => {
                unpacked.len() == members.len()
                    && members
                        .iter()
                        .enumerate()
                        .all(|(i, r)| unpacked.member(i) == Some(r.text.as_bytes()))
            }
            Err(Error::Corrupt(_)) => false,
            Err(other) => return Err(other),
        }
    };
    if !intact {
        pass.blocks_refused += 1;
        return Ok(false);
    }
    for (row, body) in members.iter().zip(bodies) {
        out.push(row, rusqlite::types::Value::Blob(body), Vec::new());
    }
    Ok(true)
}

/// (key, session, the other columns if read, new value, its blobs,
/// whether the old value held blobs).
type Rewrite = (
    i64,
    i64,
    Option<Rest>,
    rusqlite::types::Value,
    Vec<i64>,
    bool,
);

/// Rows re-encoded in one write transaction, written at its end
/// ([`Rewrites::write`]).
#[derive(Default)]
struct Rewrites {
    /// (key, session, the other columns if read, new value, its blobs,
    /// whether the old value held blobs).
    rows: Vec<Rewrite>,
}

impl Rewrites {
    /// Queues `row`'s new stored value and the blobs it holds.
    fn push(&mut self, row: &Row, new: rusqlite::types::Value, blobs: Vec<i64>) {
        // A row of the version-6 migration (read without its other
        // columns) is unlinked whatever it held, as it always was.
        let held_blobs = row.spliced || row.rest.is_none();
        self.rows.push((
            row.key,
            row.session,
            row.rest.clone(),
            new,
            blobs,
            held_blobs,
        ));
    }

    /// Writes the queued rows. A row read whole is deleted, and once all
    /// are, inserted again with its new value, in key order: an UPDATE that
    /// shrinks a row leaves its page as it was (SQLite merges pages only
    /// when rows are deleted), so rows re-encoded in place gave nothing
    /// back (a 98 MB pi home: the entries' payload 20.3 → 16.0 MB, their
    /// pages 22.2 MB before and after; written again, 17.8 MB). The keys
    /// do not change and no table refers to an entry by anything else. A
    /// row read without its other columns (the version-6 migration, whose
    /// table has other columns than today's) is updated in place.
    fn write(self, conn: &Connection) -> Result<()> {
        let e = || sql("re-encoding entries");
        // Prepared only when a row is read whole: the version-6 table has
        // no `role_id` to insert.
        let whole = self.rows.iter().any(|r| r.2.is_some());
        if whole {
            let mut delete = conn
                .prepare_cached("DELETE FROM entries WHERE entry_key = ?1")
                .map_err(e())?;
            for (key, _, rest, ..) in &self.rows {
                if rest.is_some() {
                    delete.execute([key]).map_err(e())?;
                }
            }
        }
        let mut unlink = conn
            .prepare_cached("DELETE FROM entry_blobs WHERE session_key = ?1 AND entry_key = ?2")
            .map_err(e())?;
        for (key, session, rest, new, blobs, held_blobs) in &self.rows {
            match rest {
                Some((seq, id, kind, role)) => conn
                    .prepare_cached(
                        "INSERT INTO entries (entry_key, session_key, seq, id, type, json, role_id)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )
                    .and_then(|mut st| st.execute(params![key, session, seq, id, kind, new, role]))
                    .map_err(e())?,
                None => reencoding(|| {
                    conn.prepare_cached("UPDATE entries SET json = ?2 WHERE entry_key = ?1")
                        .and_then(|mut st| st.execute(params![key, new]))
                })
                .map_err(e())?,
            };
            // Only a value that held blobs has links to drop: most rows
            // hold none, and the lookup cost one index search a row.
            if *held_blobs {
                unlink.execute(params![session, key]).map_err(e())?;
            }
            codec::record_blob_refs(conn, *session, *key, blobs)?;
        }
        Ok(())
    }
}

/// Compresses batches on up to [`MAX_ENCODE_THREADS`] worker threads:
/// compression is most of a pass's time and runs compress independently,
/// while SQLite's reads and writes stay on the caller's connection. The
/// caller does not compress: it hands a batch over ([`EncodePool::start`])
/// and reads the next one and writes the one before while the workers
/// compress (on two cores that overlap took a pass from the sum of the two
/// to about the larger). Workers live for the whole pass, so each loads the
/// dictionary into its compression context once (at level 16 a load of a
/// 384 KB dictionary costs ~0.1 s).
pub(in crate::backend::sqlite) struct EncodePool<'a> {
    encoder: &'a Encoder,
    workers: Vec<Sender<Chunk>>,
}

/// A share of a batch for one worker: the runs `chunk` of `runs`, each
/// compressed as its members' texts joined; the encodings go to `done`.
struct Chunk {
    rows: Arc<Vec<Row>>,
    runs: Arc<Vec<std::ops::Range<usize>>>,
    chunk: std::ops::Range<usize>,
    done: Sender<Vec<Compressed>>,
}

impl Chunk {
    /// Each run compressed; a block's (a run of more than one) also
    /// decompressed and compared with its text, here on the worker.
    fn encode(&self, encoder: &Encoder) -> Vec<Compressed> {
        self.runs[self.chunk.clone()]
            .iter()
            .map(|run| match &self.rows[run.clone()] {
                [row] => Compressed {
                    prepared: encoder.prepare(&row.text),
                    checked: false,
                },
                members => {
                    let joined = members.iter().map(|r| r.text.as_str()).collect::<String>();
                    let prepared = encoder.prepare(&joined);
                    let checked = encoder.decodes_to(&prepared, joined.as_bytes());
                    Compressed { prepared, checked }
                }
            })
            .collect()
    }
}

/// Cuts a batch's rows in runs (each a block, or an entry alone) to
/// compress, never across a block left as it is, and leaves out an entry
/// alone that is stored alone with the kept dictionary already (counted in
/// `pass` as done).
fn plan_runs(
    rows: &[Row],
    packing: Packing,
    keep: Option<Keep>,
    pass: &mut Pass,
) -> Vec<std::ops::Range<usize>> {
    let runs: Vec<std::ops::Range<usize>> = match packing {
        Packing::Alone => (0..rows.len()).map(|i| i..i + 1).collect(),
        Packing::Blocks => block::runs(rows.iter().map(|r| (r.session, r.text.as_str())))
            .into_iter()
            .flat_map(|run| {
                // Rows on either side of a block left in place are not
                // consecutive rows of the table.
                let mut cuts: Vec<usize> =
                    run.clone().skip(1).filter(|&i| rows[i].after_gap).collect();
                cuts.push(run.end);
                let mut start = run.start;
                cuts.into_iter()
                    .map(move |end| std::mem::replace(&mut start, end)..end)
                    .collect::<Vec<_>>()
            })
            .collect(),
    };
    let runs: Vec<std::ops::Range<usize>> = runs
        .into_iter()
        .filter(|run| {
            let left = run.len() == 1 && keep.is_some_and(|k| k.holds_alone(&rows[run.start]));
            if left {
                pass.entries += 1;
            } else {
                pass.encoded += run.len() as u64;
            }
            !left
        })
        .collect();
    runs
}

/// Where a worker's encodings of a chunk come back.
type Reply = Receiver<Vec<Compressed>>;

/// A batch handed to the pool's workers ([`EncodePool::start`]).
pub(in crate::backend::sqlite) struct Pending {
    rows: Arc<Vec<Row>>,
    runs: Arc<Vec<std::ops::Range<usize>>>,
    /// Each chunk's runs, and where its encodings come back (`None`: no
    /// worker took it).
    chunks: Vec<(std::ops::Range<usize>, Option<Reply>)>,
}

impl Pending {
    /// The batch, compressed: waits for the workers (a chunk no worker took
    /// is compressed here).
    fn finish(self, pool: &EncodePool<'_>) -> EncodedBatch {
        let mut prepared = Vec::with_capacity(self.runs.len());
        for (chunk, from) in self.chunks {
            match from.and_then(|from| from.recv().ok()) {
                Some(done) => prepared.extend(done),
                None => prepared.extend(
                    Chunk {
                        rows: Arc::clone(&self.rows),
                        runs: Arc::clone(&self.runs),
                        chunk,
                        done: channel().0,
                    }
                    .encode(pool.encoder),
                ),
            }
        }
        EncodedBatch {
            rows: self.rows,
            runs: self.runs,
            prepared,
        }
    }
}

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
            let workers = (0..threads)
                .map(|_| {
                    let (chunks_in, chunks) = channel::<Chunk>();
                    scope.spawn(move || {
                        for chunk in chunks {
                            // A caller that is gone wants nothing more.
                            let _ = chunk.done.send(chunk.encode(encoder));
                        }
                    });
                    chunks_in
                })
                .collect();
            // Dropping the pool closes the workers' queues: they end before
            // the scope does.
            f(&EncodePool { encoder, workers })
        })
    }

    /// Cuts `batch` in runs and hands them to the workers, in as many
    /// chunks as there are workers (fewer for a small batch: handing a
    /// chunk over costs more than compressing a little text).
    fn start(&self, batch: ReadBatch, packing: Packing, pass: &mut Pass) -> Pending {
        let rows = batch.rows;
        let runs = plan_runs(&rows, packing, batch.keep, pass);
        let bytes: usize = rows.iter().map(|r| r.text.len()).sum();
        let n = self
            .workers
            .len()
            .min(bytes / MIN_BYTES_PER_THREAD)
            .min(runs.len())
            .max(1);
        let (rows, runs) = (Arc::new(rows), Arc::new(runs));
        let size = runs.len().div_ceil(n).max(1);
        let chunks = (0..runs.len())
            .step_by(size)
            .zip(&self.workers)
            .map(|(start, to)| {
                let chunk = start..(start + size).min(runs.len());
                let (done, from) = channel();
                let sent = to
                    .send(Chunk {
                        rows: Arc::clone(&rows),
                        runs: Arc::clone(&runs),
                        chunk: chunk.clone(),
                        done,
                    })
                    .is_ok();
                // A worker that is gone (it cannot be, short of a panic in
                // `prepare`) leaves its chunk to the caller.
                (chunk, sent.then_some(from))
            })
            .collect();
        Pending { rows, runs, chunks }
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
        self.reencode_all(&mut conn, &encoder, (Packing::Alone, None), &mut |_| {})?;
        Ok(true)
    }

    /// Re-encodes every entry with `encoder`: batches of at most
    /// [`BATCH_ROWS`] rows and [`BATCH_BYTES`] of text are read (no lock)
    /// and compressed on the pool while the batch before is written, in
    /// transactions of at most [`BATCHED_WRITE`] each (a writer waits at
    /// most one); `progress` hears the entries done after each.
    fn reencode_all(
        &self,
        conn: &mut Connection,
        encoder: &Encoder,
        (packing, keep): (Packing, Option<Keep>),
        progress: &mut dyn FnMut(u64),
    ) -> Result<Pass> {
        let mut pass = Pass::default();
        let mut pace = Pace::default();
        let mut after = i64::MIN;
        EncodePool::run(encoder, |pool| {
            let mut compressing: Option<Pending> = None;
            loop {
                // Read in one snapshot; only the writes (each run checked
                // unchanged first) take the lock.
                let read = {
                    let tx = Archive::begin_read(conn, "re-encoding entries")?;
                    read_batch(
                        &tx,
                        self.codec(),
                        (after, BATCH_ROWS),
                        packing,
                        (true, keep),
                        &mut pass,
                    )?
                };
                let next = read.map(|batch| {
                    after = batch.last;
                    pool.start(batch, packing, &mut pass)
                });
                if let Some(pending) = compressing.take() {
                    let encoded = pending.finish(pool);
                    self.write_in_bounded_transactions(
                        conn,
                        encoder,
                        encoded,
                        (&mut pass, &mut pace),
                        progress,
                    )?;
                }
                match next {
                    Some(pending) => compressing = Some(pending),
                    None => return Ok(pass),
                }
            }
        })
    }

    /// Writes an encoded batch, run by run, in write transactions that
    /// commit once they have run [`BATCHED_WRITE`] (never inside a run, so
    /// a reader finds every block whole), a pause between them so a writer
    /// waiting for the lock gets it.
    fn write_in_bounded_transactions(
        &self,
        conn: &mut Connection,
        encoder: &Encoder,
        batch: EncodedBatch,
        (pass, pace): (&mut Pass, &mut Pace),
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let EncodedBatch {
            rows,
            runs,
            prepared,
        } = batch;
        let mut work = runs.iter().zip(prepared).peekable();
        while work.peek().is_some() {
            let (tx, started) = self.begin_write_clocked(conn, "re-encoding entries")?;
            let mut out = Rewrites::default();
            let mut old_bytes = 0;
            for (run, prepared) in work.by_ref() {
                old_bytes += rows[run.clone()]
                    .iter()
                    .map(|row| stored_len(&row.old))
                    .sum::<usize>();
                write_run(
                    &tx,
                    (self.codec(), encoder),
                    &rows[run.clone()],
                    prepared,
                    true,
                    pass,
                    &mut out,
                )?;
                // The whole transaction, writing out and commit included,
                // within the bound; never less than MIN_REWRITE_BYTES,
                // which takes a few milliseconds on a quiet machine.
                if old_bytes >= MIN_REWRITE_BYTES && pace.must_end(started.elapsed(), old_bytes) {
                    break;
                }
            }
            let writing = std::time::Instant::now();
            out.write(&tx)?;
            tx.commit().map_err(sql("re-encoding entries"))?;
            let span = super::lock_trace::started_at("compact-reencode", started);
            super::lock_trace::end(
                span,
                old_bytes as u64,
                &format!("write_ms={:.2}", writing.elapsed().as_secs_f64() * 1e3),
            );
            pace.learn(writing.elapsed(), old_bytes);
            progress(pass.entries);
            // After every transaction, not only between two of one batch:
            // a batch's rows most often fit in one, and the log then went
            // unchecked through the whole re-encode (523 MB at 200,000
            // entries beside an appender, its frames all copied but never
            // started over).
            super::checkpointer::keep_log_short(conn, self.0.manager.checkpointer());
            // Not fork's 20 ms (`BATCHED_GAP`): measured beside an
            // appender (200,000 entries, load 5-6, alternated), 20 ms gave
            // longest waits of 113-180 ms against 93-101 ms and took the
            // compact 11.6-19.1 s against 10.8-11.9 s. After the last
            // transaction too, as [`in_batches`] does: the next phase's
            // first follows.
            self.between_batches(STAGED_GAP);
        }
        Ok(())
    }

    /// Retrains the dictionary on the archive's entries, re-encodes every
    /// entry with it (short transactions: writers wait at most one batch),
    /// removes dictionaries and blobs nothing uses, and VACUUMs.
    /// `progress` hears (entries done, entries in all).
    pub fn compact(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<CompactReport> {
        self.compact_with(CompactOptions::default(), progress)
    }

    /// [`Archive::compact`] at the level and training `options` ask for.
    pub fn compact_with(
        &self,
        options: CompactOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CompactReport> {
        let options = CompactOptions::at_level(options.level).map(|_| options)?;
        self.compact_checked(options, progress)
            .map_err(|e| name_what_ran_out(self, e))
    }

    /// [`Archive::compact_with`] with options already checked. Its
    /// transactions commit without waiting for the disk: none changes what
    /// a reader sees, and the closing checkpoint syncs the log and the
    /// archive before `compact` returns (a commit that syncs the log holds
    /// the lock while the disk is busy: a delete batch's took 100 ms, 34 on
    /// a CPU, at 1,000,000 entries).
    fn compact_checked(
        &self,
        options: CompactOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CompactReport> {
        let mut conn = self.conn()?;
        let relaxed_from = super::writer::relax_sync(&conn)?;
        let compacted = self.compact_on(&mut conn, options, progress);
        if let Some(level) = relaxed_from {
            // A failure may have left a transaction open (its rollback on
            // drop came first otherwise): the level changes only outside one.
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            super::writer::restore_sync(&conn, level)?;
        }
        compacted
    }

    /// [`Archive::compact_checked`] on `conn`.
    fn compact_on(
        &self,
        conn: &mut Connection,
        options: CompactOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CompactReport> {
        let mut report = CompactReport {
            bytes_before: file_bytes(self.path()),
            ..CompactReport::default()
        };
        // A repeat compact keeps the dictionary while it still serves (and
        // then leaves alone what is encoded with it at this level).
        let kept = {
            let tx = Archive::begin_read(conn, "sampling entries")?;
            kept_dictionary(&tx, self.codec(), options)?
        };
        if let Some(kept) = &kept {
            report.dictionary_kept = true;
            report.dictionary_bytes = kept.len();
        }
        // The dictionary is committed before any entry uses it (codec invariant 2).
        let encoder = if let Some(kept) = kept {
            Encoder::new(Some(kept)).with_level(options.level)
        } else {
            // Sampled in one snapshot and trained holding no lock (the
            // search takes seconds); only storing it takes the lock.
            let samples = {
                let tx = Archive::begin_read(conn, "sampling entries")?;
                training_samples(&tx, self.codec())?
            };
            let training = if options.search_dictionary {
                Training::Search
            } else {
                Training::Quick
            };
            let trained = match codec::train(&samples, training) {
                Some(bytes) => {
                    let tx = self.begin_write(conn, "training a dictionary")?;
                    let started = std::time::Instant::now();
                    let sample_bytes = samples.iter().map(Vec::len).sum();
                    let d = codec::insert_dictionary(&tx, bytes, samples.len(), sample_bytes)?;
                    tx.commit().map_err(sql("training a dictionary"))?;
                    let span = super::lock_trace::started_at("compact-dictionary", started);
                    super::lock_trace::end(span, 1, "");
                    Some(d)
                }
                None => None,
            };
            report.dictionary_bytes = trained.as_ref().map_or(0, |d| d.len());
            match trained {
                Some(d) => Encoder::new(Some(self.codec().dictionary(conn, d.id)?)),
                None => self.codec().encoder(conn)?,
            }
            .with_level(options.level)
        };
        let total = entry_total(conn)?;
        progress(0, total);
        let keep = report.dictionary_kept.then(|| Keep {
            dictionary: encoder.dictionary_id().unwrap_or_default(),
        });
        let pass = self.reencode_all(conn, &encoder, (Packing::Blocks, keep), &mut |done| {
            progress(done.min(total), total);
        })?;
        report.entries_encoded = pass.encoded;
        report.entries = pass.entries;
        report.reencoded = pass.reencoded;
        report.blocks_refused = pass.blocks_refused;
        let (dictionaries, blobs) = remove_unused(self, conn)?;
        report.dictionaries_removed = dictionaries;
        report.blobs_removed = blobs;
        // The search index without its deleted rows, if they crowd it; then
        // one b-tree instead of its many segments.
        rebuild_search_index(self, conn)?;
        merge_search_index(self, conn)?;
        give_back_space(self, conn)?;
        // `truncate_log` copies the log with a PASSIVE checkpoint (no lock)
        // before its TRUNCATE, which then holds the write lock only for
        // what was appended meanwhile. The TRUNCATE alone is traced as
        // `compact-truncate` (traced with the copy it was 95–104 ms at
        // 1,000,000 entries).
        super::connection::truncate_log(conn, self.0.manager.checkpointer(), "compact-truncate")
            .map_err(sql("vacuuming the archive"))?;
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
    // A compact after a compact leaves every old block unused (one per
    // ~40 entries: 25,000 at 1M entries): removed in bounded transactions,
    // not one.
    let mut unused_blocks = unused_blocks.into_iter();
    in_batches(
        archive,
        conn,
        ("removing unused blocks", "compact-unused-blocks"),
        &mut |tx| {
            let mut delete = tx
                .prepare_cached("DELETE FROM entry_blocks WHERE block_id = ?1")
                .map_err(sql("removing unused blocks"))?;
            for id in unused_blocks.by_ref().take(REMOVE_BLOCKS) {
                delete
                    .execute([id])
                    .map_err(sql("removing unused blocks"))?;
            }
            Ok(unused_blocks.len() == 0)
        },
    )?;
    let tx = archive.begin_write(conn, "removing unused dictionaries")?;
    let started = std::time::Instant::now();
    let newest = codec.newest(&tx)?.map(|d| d.id);
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
    let span = super::lock_trace::started_at("compact-unused-dictionaries", started);
    super::lock_trace::end(span, dictionaries + blobs as u64, "");
    Ok((dictionaries, blobs as u64))
}

/// Search-index leaf pages the first step of [`merge_search_index`]
/// writes; later steps write more or fewer to take about [`MERGE_STEP`].
const MERGE_PAGES: i64 = 64;
/// The fewest and most leaf pages a step of [`merge_search_index`] writes.
const MERGE_PAGES_RANGE: (i64, i64) = (4, 256);
/// How long a step of [`merge_search_index`] should take. FTS5 bounds a
/// merge step by the leaf pages it writes, not by what it reads: rows
/// deleted (a deleted fork's, each a tombstone since schema step 0017)
/// are read and dropped, so a step's time per page written varies with
/// how much of its input was deleted (19-53 ms for 64 pages at 200,000
/// entries after a fork was deleted, load 4-5). The pages per step follow
/// the time the step before took.
const MERGE_STEP: std::time::Duration = std::time::Duration::from_millis(10);
/// Unused blocks removed per step of [`remove_unused`].
const REMOVE_BLOCKS: usize = 256;
/// Free pages given back per step of [`give_back_space`].
const VACUUM_PAGES: i64 = 256;

/// Runs `step` in write transactions of at most [`BATCHED_WRITE`] each
/// (several steps to one), a pause between them so that a waiting writer
/// gets the lock, until `step` says it is done. Each transaction is one
/// line `phase` of the lock trace (its steps, longest step and commit).
fn in_batches(
    archive: &Archive,
    conn: &mut Connection,
    (what, phase): (&'static str, &'static str),
    step: &mut dyn FnMut(&Connection) -> Result<bool>,
) -> Result<()> {
    // The commit writes out the pages the steps changed: the transaction
    // stops once its steps and the longest commit so far reach the bound
    // (with the commit before's alone, a vacuum transaction whose commit
    // took 15 ms after one of 3 ran 63 ms, 56 ms on a CPU). A step is not
    // cut short: a transaction also stops before a step that, taking as
    // long as the longest of this transaction's and the one before's,
    // would carry it past the bound (only checking after each step, a
    // merge transaction that ended with one long step ran 55-89 ms, 57 ms
    // on a CPU, against the 50 ms bound).
    let mut longest_commit = std::time::Duration::ZERO;
    let mut longest_before = std::time::Duration::ZERO;
    loop {
        let (tx, started) = archive.begin_write_clocked(conn, what)?;
        let (mut steps, mut longest) = (0u64, std::time::Duration::ZERO);
        let done = loop {
            let stepping = std::time::Instant::now();
            let done = step(&tx)?;
            steps += 1;
            longest = longest.max(stepping.elapsed());
            if done {
                break true;
            }
            let next = longest.max(longest_before);
            if started.elapsed() + next + longest_commit >= BATCHED_WRITE {
                break false;
            }
        };
        longest_before = longest;
        let committing = std::time::Instant::now();
        tx.commit().map_err(sql(what))?;
        let last_commit = committing.elapsed();
        longest_commit = longest_commit.max(last_commit);
        let span = super::lock_trace::started_at(phase, started);
        super::lock_trace::end(
            span,
            steps,
            &format!(
                "step_max_ms={:.2} commit_ms={:.2}",
                longest.as_secs_f64() * 1e3,
                last_commit.as_secs_f64() * 1e3
            ),
        );
        if !done {
            super::checkpointer::keep_log_short(conn, archive.0.manager.checkpointer());
        }
        // After the last transaction too: the next phase's first would
        // follow at once, and a writer that began waiting during this one
        // waited for both (an append beside a 1,000,000-entry compact, 96
        // ms across the search index rebuild's last and the old index's
        // removal's first, each under 52 ms).
        archive.between_batches(STAGED_GAP);
        if done {
            return Ok(());
        }
    }
}

/// Builds the search index again beside itself if deleted rows crowd it
/// ([`fts_rebuild`]), a transaction of a few hundred entries at a time, puts
/// it in place and removes the old one; first removes what a killed
/// compact's rebuild left. Otherwise removes the few rows it holds for
/// deleted entries ([`fts_dead`]).
fn rebuild_search_index(archive: &Archive, conn: &mut Connection) -> Result<()> {
    let removing = ("removing an unused search index", "compact-index-remove");
    in_batches(archive, conn, removing, &mut |tx| {
        fts_rebuild::remove_step(tx)
    })?;
    let rebuilding = worth_rebuilding(conn)?;
    if rebuilding {
        let codec = archive.codec();
        let mut rebuild: Option<fts_rebuild::IndexRebuild> = None;
        in_batches(
            archive,
            conn,
            ("rebuilding the search index", "compact-rebuild"),
            &mut |tx| {
                let Some(under_way) = rebuild.as_mut() else {
                    rebuild = Some(fts_rebuild::IndexRebuild::start(tx)?);
                    return Ok(false);
                };
                if !under_way.fill_step(tx, codec, fts::WRITER_MERGE_TIME)? {
                    return Ok(false);
                }
                // Every entry is there: in its place, in this transaction.
                rebuild.take().map_or(Ok(()), |done| done.swap(tx))?;
                Ok(true)
            },
        )?;
        in_batches(archive, conn, removing, &mut |tx| {
            fts_rebuild::remove_step(tx)
        })?;
    }
    // A few rows left behind for deleted entries (or those of deletes
    // during the rebuild) go the way FTS5 deletes; the merge that follows
    // drops them. Many left during a rebuild wait for the next compact's.
    if rebuilding && worth_rebuilding(conn)? {
        return Ok(());
    }
    in_batches(
        archive,
        conn,
        (
            "removing the search rows of deleted entries",
            "compact-dead-remove",
        ),
        &mut |tx| fts_dead::remove_step(tx),
    )
}

/// Whether the search index is crowded enough by deleted rows, or rows
/// left behind for deleted entries, to be built again
/// ([`fts_rebuild::worth_rebuilding`]).
fn worth_rebuilding(conn: &Connection) -> Result<bool> {
    let tx = Archive::begin_read(conn, "reading the search index's structure")?;
    let (rows_left, _) = fts_dead::dead_totals(&tx)?;
    Ok(fts_rebuild::worth_rebuilding(
        &fts::index_shape(&tx)?,
        rows_left,
    ))
}

/// Merges the search index's segments into one b-tree (what FTS5's
/// `optimize` does in one go), a step of about [`MERGE_STEP`] at a time
/// ([`fts::IndexMerge`]).
fn merge_search_index(archive: &Archive, conn: &mut Connection) -> Result<()> {
    let mut merge = fts::IndexMerge::new();
    let mut pages = MERGE_PAGES;
    let (fewest, most) = MERGE_PAGES_RANGE;
    in_batches(
        archive,
        conn,
        ("merging the search index", "compact-merge"),
        &mut |tx| {
            let stepping = std::time::Instant::now();
            let done = merge.step(tx, pages)?;
            let took = stepping.elapsed();
            if took > MERGE_STEP * 2 {
                pages = (pages / 2).max(fewest);
            } else if took < MERGE_STEP / 2 {
                pages = (pages * 2).min(most);
            }
            Ok(done)
        },
    )
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
        let span = super::lock_trace::start("compact-vacuum-full");
        conn.execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")
            .map_err(sql("vacuuming the archive"))?;
        super::lock_trace::end(span, 0, "");
        return Ok(());
    }
    in_batches(
        archive,
        conn,
        ("vacuuming the archive", "compact-vacuum"),
        &mut |tx| {
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
        },
    )
}

/// SQLite's "database or disk is full" (SQLITE_FULL) says neither what
/// nor how full. This names it: FTS5's segment limit, the archive's
/// `max_page_count`, and the free space where the archive and SQLite's
/// temporary files are (issue 40.1: the search index's limit read as a
/// full disk with 42 GB free). Any other error is returned as it is.
fn name_what_ran_out(archive: &Archive, e: Error) -> Error {
    let Error::Sqlite {
        context,
        source: rusqlite::Error::SqliteFailure(code, _),
    } = &e
    else {
        return e;
    };
    if code.code != rusqlite::ErrorCode::DiskFull {
        return e;
    }
    let mut causes = Vec::new();
    let mut spaces = Vec::new();
    if let Ok(conn) = archive.conn() {
        if let Ok(shape) = fts::index_shape(&conn) {
            // A merge holds its output besides its inputs, and a flush
            // adds one: the limit bites a few segments before the record
            // (as last committed) reaches it.
            if shape.segments + 16 >= fts::MAX_SEGMENTS {
                causes.push(format!(
                    "the search index holds {} segments on {} levels and FTS5 allows at most {}",
                    shape.segments,
                    shape.levels,
                    fts::MAX_SEGMENTS
                ));
            }
        }
        let pragma = |name: &str| conn.pragma_query_value(None, name, |r| r.get::<_, i64>(0));
        if let (Ok(pages), Ok(most), Ok(size)) = (
            pragma("page_count"),
            pragma("max_page_count"),
            pragma("page_size"),
        ) {
            // SQLite's own most (2^32 - 2 pages) is no setting anyone made.
            if most < 0xffff_fffe && pages + 1024 >= most {
                causes.push(format!(
                    "the archive holds {pages} pages and its max_page_count is {most} ({})",
                    in_bytes(u64::try_from(most.saturating_mul(size)).unwrap_or(0))
                ));
            }
        }
    }
    let archive_dir = match archive.path().parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let temp_dir = sqlite_temp_dir();
    for (what, dir) in [
        ("the archive's", Some(archive_dir.clone())),
        ("SQLite's temporary", temp_dir),
    ] {
        let Some(dir) = dir else { continue };
        if what != "the archive's" && same_file_system(&dir, &archive_dir) {
            spaces.push(format!("{} is on the same file system", dir.display()));
            continue;
        }
        match free_bytes(&dir) {
            Some(free) => spaces.push(format!(
                "{what} directory {} has {} free",
                dir.display(),
                in_bytes(free)
            )),
            None => spaces.push(format!(
                "{what} directory {}: free space unknown",
                dir.display()
            )),
        }
    }
    let said = if causes.is_empty() {
        format!("database or disk is full: {}", spaces.join("; "))
    } else {
        format!(
            "database or disk is full: {} (not the disk: {})",
            causes.join("; "),
            spaces.join("; ")
        )
    };
    Error::Sqlite {
        context: context.clone(),
        source: rusqlite::Error::SqliteFailure(*code, Some(said)),
    }
}

/// The directory SQLite puts its temporary files in, chosen as SQLite's
/// unix VFS chooses it: `SQLITE_TMPDIR`, `TMPDIR`, `/var/tmp`, `/usr/tmp`,
/// `/tmp`, the first that is a directory it may write and search.
fn sqlite_temp_dir() -> Option<std::path::PathBuf> {
    let from_env = ["SQLITE_TMPDIR", "TMPDIR"]
        .into_iter()
        .filter_map(|v| std::env::var_os(v).map(std::path::PathBuf::from));
    let fixed = ["/var/tmp", "/usr/tmp", "/tmp"]
        .into_iter()
        .map(std::path::PathBuf::from);
    from_env
        .chain(fixed)
        .find(|dir| dir.is_dir() && writable(dir))
}

/// Whether this process may create files in `dir`.
#[cfg(unix)]
fn writable(dir: &std::path::Path) -> bool {
    use rustix::fs::Access;
    rustix::fs::access(dir, Access::WRITE_OK | Access::EXEC_OK).is_ok()
}

#[cfg(not(unix))]
fn writable(dir: &std::path::Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| !m.permissions().readonly())
}

/// Bytes an unprivileged writer may still use on `dir`'s file system.
#[cfg(unix)]
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

#[cfg(not(unix))]
fn free_bytes(_dir: &std::path::Path) -> Option<u64> {
    None
}

/// Whether `a` and `b` are on one file system (one device).
#[cfg(unix)]
fn same_file_system(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    matches!((std::fs::metadata(a), std::fs::metadata(b)), (Ok(a), Ok(b)) if a.dev() == b.dev())
}

#[cfg(not(unix))]
fn same_file_system(_a: &std::path::Path, _b: &std::path::Path) -> bool {
    false
}

/// `bytes` in words: "41.9 GB", "512 KB".
fn in_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        n if n >= 1 << 30 => format!("{:.1} GB", b / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1} MB", b / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.0} KB", b / 1024.0),
        n => format!("{n} bytes"),
    }
}

/// `PRAGMA auto_vacuum`'s value for incremental mode.
pub(in crate::backend::sqlite) const INCREMENTAL_VACUUM: i64 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLITE_FULL from compact names what ran out (issue 40.1: the search
    /// index's 2000 segments read as a full disk with 42 GB free).
    #[test]
    fn a_full_error_names_what_ran_out() {
        let dir = tempfile::tempdir().unwrap();
        let archive = Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed).unwrap();
        let full = || {
            Error::sqlite(
                "merging the search index",
                rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                    None,
                ),
            )
        };
        let dir_named = format!("the archive's directory {} has ", dir.path().display());
        let said = name_what_ran_out(&archive, full()).to_string();
        assert!(
            said.starts_with("merging the search index: database or disk is full: "),
            "{said}"
        );
        assert!(said.contains(&dir_named), "{said}");
        assert!(!said.contains("FTS5"), "{said}");
        // One segment a commit (FTS5 merges none), near FTS5's most.
        let conn = archive.conn().unwrap();
        conn.execute_batch(
            "PRAGMA synchronous = OFF;
             INSERT INTO message_text (message_text, rank) VALUES ('automerge', 0);
             INSERT INTO message_text (message_text, rank) VALUES ('crisismerge', 1999);",
        )
        .unwrap();
        for n in 1..=1990 {
            conn.execute(
                "INSERT INTO message_text (rowid, text) VALUES (?1, 'word')",
                [n],
            )
            .unwrap();
        }
        assert_eq!(fts::index_shape(&conn).unwrap().segments, 1990);
        drop(conn);
        let said = name_what_ran_out(&archive, full()).to_string();
        assert!(
            said.contains("database or disk is full: the search index holds 1990 segments on 1 levels and FTS5 allows at most 2000 (not the disk: "),
            "{said}"
        );
        assert!(said.contains(&dir_named), "{said}");
        // Any other error is left as it is.
        let busy = Error::sqlite(
            "merging the search index",
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                None,
            ),
        );
        let before = busy.to_string();
        assert_eq!(name_what_ran_out(&archive, busy).to_string(), before);
    }

    /// A writer that begins waiting for the lock during the last transaction
    /// of one batched phase of compact gets it before the next phase's
    /// first transaction: [`in_batches`] lets waiters in after its last
    /// transaction too. (Without, an append beside a 1,000,000-entry
    /// compact waited 96 ms across two transactions of two phases.)
    #[test]
    fn a_writer_waiting_as_a_phase_ends_gets_in_before_the_next_phase() {
        use super::super::turnstile::{wait_for_waiters, Turn};
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let archive = Archive::open(&db, crate::Durability::Relaxed).unwrap();
        archive
            .conn()
            .unwrap()
            .execute_batch("CREATE TABLE marks (n INTEGER)")
            .unwrap();
        let mut conn = archive.conn().unwrap();
        std::thread::scope(|scope| {
            let mut waiter = None;
            in_batches(&archive, &mut conn, ("a phase", "test-a"), &mut |_| {
                // Another session's write begins while this phase holds the
                // lock, and waits.
                let archive = archive.clone();
                waiter = Some(scope.spawn(move || {
                    let mut conn = archive.conn().unwrap();
                    let tx = archive.begin_write(&mut conn, "an append").unwrap();
                    tx.execute("INSERT INTO marks VALUES (1)", []).unwrap();
                    tx.commit().unwrap();
                }));
                let started = std::time::Instant::now();
                while wait_for_waiters(&db, Duration::ZERO) != Turn::Capped {
                    assert!(started.elapsed() < Duration::from_secs(30), "no waiter");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(true)
            })
            .unwrap();
            let mut seen = None;
            in_batches(
                &archive,
                &mut conn,
                ("the next phase", "test-b"),
                &mut |tx| {
                    seen = Some(
                        tx.query_row("SELECT count(*) FROM marks", [], |r| r.get::<_, i64>(0))
                            .map_err(sql("counting"))?,
                    );
                    Ok(true)
                },
            )
            .unwrap();
            waiter.unwrap().join().unwrap();
            assert_eq!(
                seen,
                Some(1),
                "the next phase began before the waiting writer had the lock"
            );
        });
    }

    /// A re-encode transaction stops once what it ran plus the writing out
    /// it learnt from the one before reaches the bound: a slow writing out
    /// shortens the next at once, a fast one lengthens them over a few.
    #[test]
    fn a_transaction_ends_before_its_writing_out_would_pass_the_bound() {
        use std::time::Duration;
        let bound = REWRITE_BOUND;
        let mb = 1 << 20;
        let mut pace = Pace::default();
        // Nothing learnt: the writing out is taken to be as long as the rest.
        assert!(!pace.must_end(bound / 2 - Duration::from_millis(1), mb));
        assert!(pace.must_end(bound / 2, mb));
        // Writing out 1 MB took 80 % of the bound: 1 MB may run 20 % more.
        pace.learn(bound * 4 / 5, mb);
        assert!(!pace.must_end(bound / 10, mb));
        assert!(pace.must_end(bound / 5 + Duration::from_micros(10), mb));
        // Half as many bytes, half the writing out.
        assert!(!pace.must_end(bound / 2, mb / 2));
        assert!(pace.must_end(bound * 3 / 5 + Duration::from_micros(10), mb / 2));
        // Slower: believed at once; 1 MB alone now passes the bound.
        pace.learn(bound * 2, mb);
        assert!(pace.must_end(Duration::ZERO, mb));
        // Faster: a third of the way down per transaction.
        pace.learn(Duration::ZERO, mb);
        let per_byte = pace.per_byte.unwrap();
        let expected = bound.as_secs_f64() * 2.0 * 0.7 / mb as f64;
        assert!(
            (per_byte - expected).abs() < expected * 1e-9,
            "{per_byte} {expected}"
        );
        assert!(!pace.must_end(Duration::ZERO, mb / 2));
    }

    /// Rows of parent chains (three sessions), of uneven lengths, some of
    /// them too short to pay.
    fn chain_rows(n: usize) -> Vec<Row> {
        (0..n)
            .map(|i| {
                let parent = if i % 300 == 0 {
                    "null".to_string()
                } else {
                    format!("\"e{}\"", i - 1)
                };
                let text = format!(
                    r#"{{"type":"message","id":"e{i}","parentId":{parent},"text":"{}"}}"#,
                    "word ".repeat(i % 97)
                );
                Row {
                    key: i as i64,
                    session: (i / 300) as i64,
                    rest: None,
                    old: rusqlite::types::Value::Text(text.clone()),
                    text,
                    spliced: false,
                    after_gap: false,
                }
            })
            .collect()
    }

    #[test]
    fn the_pool_encodes_every_run_in_order_as_one_thread_does() {
        let encoder = Encoder::default().with_level(5);
        for packing in [Packing::Alone, Packing::Blocks] {
            let rows = chain_rows(1_000);
            let runs = match packing {
                Packing::Alone => (0..rows.len()).map(|i| i..i + 1).collect(),
                Packing::Blocks => block::runs(rows.iter().map(|r| (r.session, r.text.as_str()))),
            };
            let alone: Vec<String> = runs
                .iter()
                .map(|run| {
                    let joined: String =
                        rows[run.clone()].iter().map(|r| r.text.as_str()).collect();
                    format!("{:?}", encoder.prepare(&joined))
                })
                .collect();
            if packing == Packing::Blocks {
                assert!(runs.iter().any(|r| r.len() > 1), "some runs are blocks");
            }
            let pooled = EncodePool::run(&encoder, |pool| {
                // Two batches in flight at once, as a pass holds them; then
                // a third: a worker serves every batch of a pass.
                let first = pool.start(
                    ReadBatch {
                        rows: chain_rows(1_000),
                        last: 0,
                        keep: None,
                    },
                    packing,
                    &mut Pass::default(),
                );
                let second = pool.start(
                    ReadBatch {
                        rows: chain_rows(1_000),
                        last: 0,
                        keep: None,
                    },
                    packing,
                    &mut Pass::default(),
                );
                let (first, second) = (first.finish(pool), second.finish(pool));
                let third = encode_batch(
                    ReadBatch {
                        rows: chain_rows(1_000),
                        last: 0,
                        keep: None,
                    },
                    packing,
                    pool,
                    &mut Pass::default(),
                );
                [first, second, third]
            });
            for batch in pooled {
                assert_eq!(*batch.runs, runs);
                let got: Vec<String> = batch
                    .prepared
                    .iter()
                    .map(|c| format!("{:?}", c.prepared))
                    .collect();
                // Every block was checked by the worker that compressed it.
                assert!(batch
                    .prepared
                    .iter()
                    .zip(batch.runs.iter())
                    .all(|(c, run)| c.checked
                        || run.len() == 1
                        || !matches!(c.prepared, codec::Prepared::Encoded { .. })));
                assert_eq!(got, alone);
            }
        }
    }
}
