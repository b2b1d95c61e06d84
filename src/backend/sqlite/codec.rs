//! How an entry's exact text is kept in `entries.json`: plain, compressed
//! with the archive's own zstd dictionary, and with large base64 payloads
//! (screenshots, pasted images) moved out of line into the content-addressed
//! `blobs` table, stored once however many entries hold them.
//!
//! # Invariants
//! 1. **Exact text.** Decoding a stored value gives back the entry's text byte
//!    for byte. A TEXT value *is* the text (rows written before schema
//!    version 6, and entries for which no encoding pays). A BLOB value is an
//!    encoded body (format below).
//! 2. **Immutable dictionaries.** A `dictionaries` row never changes and is
//!    committed before any entry uses it (in a transaction of its own, or in
//!    the migration's), so the in-memory cache keyed by id is never stale.
//!    Ids come from AUTOINCREMENT and are never reused. A dictionary is
//!    deleted only when no entry uses it and a newer one exists; a writer
//!    checks its dictionary still exists inside its write transaction.
//! 3. **Counted blob references.** Every blob id in a body has a row of
//!    `entry_blobs` (session, entry, blob); a blob is deleted only when no
//!    row names it (session delete).
//! 4. **Content-addressed blobs.** `blobs.hash` is FNV-1a 64 of the payload
//!    text; equal payloads share one row (bytes compared, never the hash alone).
//!
//! # Body format (BLOB values)
//! ```text
//! tag       u8      bit 0: the payload is a zstd frame in zstd's magicless
//!                          format (a frame without its 4-byte magic number)
//!                   bit 1: a dictionary id follows
//!                   bit 2: blob splices follow
//!                   bit 3: the entry's `message` member is an object and its
//!                          last and only one (schema version 9): a reader
//!                          finds its span from the members before it
//!                          ([`crate::json::trailing_object_member`]), not by
//!                          scanning the message (most of an entry's text)
//!                   bit 4: the text is a member of a block (schema
//!                          version 11, [`super::block`]): a block reference
//!                          follows and nothing else (only bit 3 may be set)
//!                   a reader refuses any other bit (a newer format)
//! dict id   varint  (bit 1)
//! splices   varint n, then n × (varint gap, varint blob id)        (bit 2)
//!                   gap: template bytes since the previous splice
//! payload   the template: the text with each blob's payload cut out
//! ```
//! A blob is a JSON string's content (between its quotes) of at least
//! [`BLOB_THRESHOLD`] bytes, all in the base64 alphabet. Canonical base64 is
//! stored decoded (three quarters of the size); anything else as its text.

use super::sql;
use crate::error::{Error, Result};
use base64::Engine as _;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use zstd::zstd_safe;

const COMPRESSED: u8 = 1;
const WITH_DICTIONARY: u8 = 2;
const WITH_BLOBS: u8 = 4;
pub(super) const TRAILING_MESSAGE: u8 = 8;
/// Tag bit 4: the text is a member of a block (its body is read by
/// [`super::block`], which builds on this module).
pub(super) const MEMBER: u8 = 16;
const KNOWN_BITS: u8 = COMPRESSED | WITH_DICTIONARY | WITH_BLOBS | TRAILING_MESSAGE;
/// zstd's magic number, which the stored (magicless) frames leave out.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// The longest zstd frame header (`ZSTD_FRAMEHEADERSIZE_MAX`).
const MAX_FRAME_HEADER: usize = 18;

/// The zstd level entries are compressed at as they are written (fast
/// enough for a bulk import on the reader thread).
pub const LEVEL: i32 = 3;
/// The level `compact` re-encodes at (mostly blocks, [`super::block`]):
/// ~15 % smaller than [`LEVEL`] on real pi sessions. On the generated
/// 100,000-entry forked session, in blocks: level 16 37.26 MB in 16 s on
/// two cores, 17 37.23 MB in 15 s, 18 37.10 MB in 21 s, 19 37.03 MB in
/// 29 s; an offline rewrite can afford 18 (decompression costs the same).
/// Before blocks, level 16 was 2.6 % smaller than level 12 for 2.4× the CPU.
pub const COMPACT_LEVEL: i32 = 18;
/// A base64 string at least this long goes out of line.
pub const BLOB_THRESHOLD: usize = 8 << 10;
/// Training needs at least this much sample text to beat no dictionary.
pub const MIN_TRAINING_BYTES: usize = 256 << 10;
/// Sample text read to train a dictionary from a whole archive (`compact`,
/// the migration); training takes ~0.05 s per MB.
pub const TRAINING_BUDGET: usize = 8 << 20;
/// Sample text read from the files of an import to train an archive's first
/// dictionary: an eighth of [`TRAINING_BUDGET`], half of what it was, for half
/// the training time (the import's fixed cost) at 0.7 % more archive on a
/// generated 20,000-entry session and ~3 % on pi's real files (`compact`
/// retrains on the whole archive).
pub const IMPORT_TRAINING_BUDGET: usize = 1 << 20;
/// A single sample is cut to this length (many short samples teach more
/// than a few long ones).
pub const SAMPLE_LIMIT: usize = 16 << 10;
/// The largest dictionary trained. Only a whole-archive training
/// ([`TRAINING_BUDGET`] ÷ 20 ≈ 410 KB) reaches past zstd's recommended
/// 112 KB: on the generated 100,000-entry session that is 1.1 % smaller
/// at level 12 and, with [`COMPACT_LEVEL`], 3.7 % (42.27 → 40.70 MB), with
/// no cold-resume cost measurable; pi's real files stay the same size
/// (their larger dictionary takes what their entries save).
pub const MAX_DICTIONARY: usize = 512 << 10;

/// How blob bytes are kept.
const BLOB_TEXT: i64 = 0;
const BLOB_BASE64: i64 = 1;

/// A trained zstd dictionary of an archive.
pub struct Dictionary {
    /// Its `dictionaries.dict_id`.
    pub id: i64,
    /// Unique in this process: what thread-local compressors key on (ids
    /// repeat across archives).
    serial: u64,
    bytes: Vec<u8>,
    ddict: zstd_safe::DDict<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("id", &self.id)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Dictionary {
    fn new(id: i64, bytes: Vec<u8>) -> Result<Self> {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        let ddict = zstd_safe::DDict::try_create(&bytes).ok_or_else(|| {
            Error::Corrupt(format!(
                "compression dictionary {id} is damaged: zstd cannot load it"
            ))
        })?;
        Ok(Dictionary {
            id,
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            ddict,
            bytes,
        })
    }

    /// The dictionary's size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the dictionary is empty (never, for a trained one).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// An archive's dictionaries, loaded once each (invariant 2).
#[derive(Debug)]
pub struct Codec {
    dictionaries: Mutex<HashMap<i64, Arc<Dictionary>>>,
    /// Unique in this process: what the block a thread keeps is keyed on
    /// (block ids repeat across archives).
    serial: u64,
}

impl Default for Codec {
    fn default() -> Self {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        Codec {
            dictionaries: Mutex::default(),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Codec {
    pub(super) fn serial(&self) -> u64 {
        self.serial
    }

    /// Dictionary `id`, from the cache or the database.
    pub fn dictionary(&self, conn: &Connection, id: i64) -> Result<Arc<Dictionary>> {
        if let Some(d) = self.cached(id) {
            return Ok(d);
        }
        let d = Arc::new(Dictionary::new(id, read_dictionary(conn, id)?)?);
        self.dictionaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::clone(&d));
        Ok(d)
    }

    fn cached(&self, id: i64) -> Option<Arc<Dictionary>> {
        self.dictionaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// The newest dictionary, the one new entries are compressed with.
    pub fn newest(&self, conn: &Connection) -> Result<Option<Arc<Dictionary>>> {
        let id: Option<i64> = conn
            .prepare_cached("SELECT max(dict_id) FROM dictionaries")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(sql("reading the compression dictionary"))?;
        id.map(|id| self.dictionary(conn, id)).transpose()
    }

    /// An encoder with the newest dictionary.
    pub fn encoder(&self, conn: &Connection) -> Result<Encoder> {
        Ok(Encoder::new(self.newest(conn)?))
    }

    /// The text of an entry body stored alone (not a block member: see
    /// [`super::stored`]), and whether its tag says its `message` trails.
    pub(super) fn decode_body(&self, conn: &Connection, body: &[u8]) -> Result<(String, bool)> {
        let header = Header::parse(body)?;
        let template = self.template(conn, &header, body)?;
        let text = if header.splices.is_empty() {
            template
        } else {
            splice(conn, &template, &header.splices)?
        };
        String::from_utf8(text)
            .map(|text| (text, header.trailing_message))
            .map_err(|_| Error::Corrupt("a decoded entry is not UTF-8 text".into()))
    }
}

impl Codec {
    /// `payload`, a zstd frame without its magic, decompressed with
    /// dictionary `dictionary` (if any); refused before it allocates when
    /// the frame does not say it holds exactly `expected` bytes (if given).
    pub(super) fn inflate(
        &self,
        conn: &Connection,
        dictionary: Option<i64>,
        payload: &[u8],
        expected: Option<usize>,
    ) -> Result<Vec<u8>> {
        let dictionary = dictionary.map(|id| self.dictionary(conn, id)).transpose()?;
        decompress_sized(payload, dictionary.as_deref(), expected)
    }

    /// A body's template: its text with each blob's payload cut out.
    fn template(&self, conn: &Connection, header: &Header, body: &[u8]) -> Result<Vec<u8>> {
        let payload = &body[header.payload_start..];
        if !header.compressed {
            return Ok(payload.to_vec());
        }
        self.inflate(conn, header.dictionary, payload, None)
    }

    /// The template of a stored body that splices blobs (its text with the
    /// blobs cut out), cut to a training sample's length; `None` for any
    /// other stored value.
    pub(super) fn spliced_sample(
        &self,
        conn: &Connection,
        stored: ValueRef<'_>,
    ) -> Result<Option<Vec<u8>>> {
        let Some((header, body)) = spliced(stored)? else {
            return Ok(None);
        };
        let mut template = self.template(conn, &header, body)?;
        template.truncate(SAMPLE_LIMIT);
        Ok(Some(template))
    }

    /// A stored body that splices blobs, re-encoded by `encoder` with its
    /// splices kept: only the template is decompressed and compressed
    /// again, so `compact` neither reads, re-encodes nor re-hashes an
    /// entry's images. The new template is checked to decompress to the
    /// old one (same template, same splices: the same text). `None` for any
    /// other stored value (re-encoded from its text).
    pub fn reencode_spliced(
        &self,
        conn: &Connection,
        encoder: &Encoder,
        stored: ValueRef<'_>,
    ) -> Result<Option<(rusqlite::types::Value, Vec<i64>)>> {
        let Some((header, body)) = spliced(stored)? else {
            return Ok(None);
        };
        let template = self.template(conn, &header, body)?;
        let new = match encoder.compress_template(&template) {
            Some(payload) => {
                let dictionary = encoder.dictionary.as_deref();
                if decompress(&payload, dictionary)? != template {
                    return Err(Error::Corrupt(
                        "an entry's template would not decode to itself after re-encoding; nothing changed"
                            .into(),
                    ));
                }
                let id = encoder.dictionary_id();
                write_body(true, id, header.trailing_message, &header.splices, &payload)
            }
            None => write_body(
                false,
                None,
                header.trailing_message,
                &header.splices,
                &template,
            ),
        };
        let blobs = header.splices.iter().map(|s| s.1).collect();
        Ok(Some((rusqlite::types::Value::Blob(new), blobs)))
    }
}

/// The header and body of a stored value whose body splices blobs; `None`
/// for any other value (text, a block member, a body without splices).
fn spliced(stored: ValueRef<'_>) -> Result<Option<(Header, &[u8])>> {
    let ValueRef::Blob(body) = stored else {
        return Ok(None);
    };
    if body.first().is_some_and(|t| t & MEMBER != 0) {
        return Ok(None);
    }
    let header = Header::parse(body)?;
    Ok((!header.splices.is_empty()).then_some((header, body)))
}

/// Whether an entry's text may be stored with tag bit 3: its `message`
/// member (at `message_span`, as its facts located it) is an object and its
/// last and only one, which is what a reader then assumes.
pub fn message_trails(text: &str, message_span: Option<&Range<usize>>) -> bool {
    message_span.is_some_and(|span| {
        crate::json::trailing_object_member(text, "message").as_ref() == Some(span)
    })
}

/// [`message_trails`] for checked text whose facts are not at hand (one
/// scan of the text to locate its `message`).
pub fn stored_message_trails(text: &str) -> bool {
    let span = crate::json::checked_object_members(text, ["message"])
        .and_then(|[m]| m)
        .map(|raw| {
            let start = raw.as_ptr() as usize - text.as_ptr() as usize;
            start..start + raw.len()
        });
    message_trails(text, span.as_ref())
}

/// The dictionary and blob ids of an entry body stored alone, read from
/// its header (see [`super::stored::body_refs`]).
pub(super) fn body_header_refs(body: &[u8]) -> Result<(Option<i64>, Vec<i64>)> {
    let h = Header::parse(body)?;
    Ok((h.dictionary, h.splices.iter().map(|s| s.1).collect()))
}

struct Header {
    compressed: bool,
    trailing_message: bool,
    dictionary: Option<i64>,
    /// (gap, blob id)
    splices: Vec<(usize, i64)>,
    payload_start: usize,
}

impl Header {
    fn parse(body: &[u8]) -> Result<Header> {
        let bad = || Error::Corrupt("a stored entry has a damaged header".into());
        let (&tag, _) = body.split_first().ok_or_else(bad)?;
        if tag & !KNOWN_BITS != 0 {
            return Err(Error::Corrupt(format!(
                "a stored entry uses encoding {tag:#x}, newer than this build knows; upgrade sessiontree"
            )));
        }
        let mut at = 1;
        let dictionary = if tag & WITH_DICTIONARY != 0 {
            Some(read_varint(body, &mut at).ok_or_else(bad)? as i64)
        } else {
            None
        };
        let mut splices = Vec::new();
        if tag & WITH_BLOBS != 0 {
            let n = read_varint(body, &mut at).ok_or_else(bad)?;
            for _ in 0..n {
                let gap = read_varint(body, &mut at).ok_or_else(bad)?;
                let id = read_varint(body, &mut at).ok_or_else(bad)?;
                splices.push((usize::try_from(gap).map_err(|_| bad())?, id as i64));
            }
        }
        Ok(Header {
            compressed: tag & COMPRESSED != 0,
            trailing_message: tag & TRAILING_MESSAGE != 0,
            dictionary,
            splices,
            payload_start: at,
        })
    }
}

pub(super) fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

thread_local! {
    /// One decompression context per thread (creating one per entry costs
    /// more than decompressing a small entry), reading magicless frames.
    static DCTX: RefCell<Option<zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
    /// One compression context per thread, with the dictionary (by serial)
    /// and level it has loaded: loading a dictionary builds its tables once.
    static CCTX: RefCell<((u64, i32), zstd_safe::CCtx<'static>)> = RefCell::new(((u64::MAX, 0), zstd_safe::CCtx::create()));
}

fn zstd_error(what: &str, code: usize) -> Error {
    Error::Corrupt(format!("{what}: {}", zstd_safe::get_error_name(code)))
}

fn decompress(payload: &[u8], dictionary: Option<&Dictionary>) -> Result<Vec<u8>> {
    decompress_sized(payload, dictionary, None)
}

/// The largest zstd block.
const MAX_BLOCK_BYTES: usize = 128 << 10;

/// The content size a magicless frame's header states: zstd reads sizes
/// only from framed headers, so the header (at most
/// [`MAX_FRAME_HEADER`] bytes) is framed on the stack, never the payload.
fn frame_content_size(payload: &[u8]) -> Option<u64> {
    let mut header = [0u8; 4 + MAX_FRAME_HEADER];
    let len = payload.len().min(MAX_FRAME_HEADER);
    header[..4].copy_from_slice(&ZSTD_MAGIC);
    header[4..4 + len].copy_from_slice(&payload[..len]);
    zstd_safe::get_frame_content_size(&header[..4 + len])
        .ok()
        .flatten()
}

/// Decompresses a stored (magicless) frame, refusing before it allocates a
/// frame that does not say it holds exactly `expected` bytes (when given).
fn decompress_sized(
    payload: &[u8],
    dictionary: Option<&Dictionary>,
    expected: Option<usize>,
) -> Result<Vec<u8>> {
    let size = match frame_content_size(payload) {
        Some(n) => {
            usize::try_from(n).map_err(|_| Error::Corrupt("a stored entry is too large".into()))?
        }
        None => {
            return Err(Error::Corrupt(
                "a stored entry's zstd frame has no size".into(),
            ))
        }
    };
    if expected.is_some_and(|e| e != size) {
        return Err(Error::Corrupt(format!(
            "a stored entry's zstd frame claims {size} bytes where {} are expected",
            expected.unwrap_or_default()
        )));
    }
    // A zstd block of at most 128 KB takes at least 4 bytes (an RLE block),
    // so no frame decodes to more than this: a damaged header claiming more
    // is an error, not an allocation that aborts the process.
    if size > payload.len().saturating_mul(MAX_BLOCK_BYTES / 4) + MAX_BLOCK_BYTES {
        return Err(Error::Corrupt(format!(
            "a stored entry's zstd frame claims {size} bytes from {} stored",
            payload.len()
        )));
    }
    let mut out = Vec::with_capacity(size);
    DCTX.with(|d| {
        let mut d = d.borrow_mut();
        let d = match &mut *d {
            Some(d) => d,
            None => {
                let mut fresh = zstd_safe::DCtx::create();
                fresh
                    .set_parameter(zstd_safe::DParameter::Format(
                        zstd_safe::FrameFormat::Magicless,
                    ))
                    .map_err(|c| zstd_error("setting up zstd", c))?;
                d.insert(fresh)
            }
        };
        match dictionary {
            Some(dict) => d.decompress_using_ddict(&mut out, payload, &dict.ddict),
            None => d.decompress(&mut out, payload),
        }
        .map_err(|c| zstd_error("a stored entry does not decompress", c))
    })?;
    if out.len() != size {
        return Err(Error::Corrupt(
            "a stored entry decompressed to the wrong size".into(),
        ));
    }
    Ok(out)
}

/// Compresses `data` into a magicless frame, or `None` if zstd fails.
fn compress(data: &[u8], dictionary: Option<&Dictionary>, level: i32) -> Option<Vec<u8>> {
    CCTX.with(|c| {
        let mut c = c.borrow_mut();
        let loaded = (dictionary.map_or(0, |d| d.serial), level);
        if c.0 != loaded {
            let cctx = &mut c.1;
            cctx.reset(zstd_safe::ResetDirective::SessionAndParameters)
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::CompressionLevel(level))
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::ChecksumFlag(false))
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::ContentSizeFlag(true))
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::DictIdFlag(false))
                .ok()?;
            cctx.set_parameter(zstd_safe::CParameter::Format(
                zstd_safe::FrameFormat::Magicless,
            ))
            .ok()?;
            cctx.load_dictionary(dictionary.map_or(&[][..], |d| &d.bytes))
                .ok()?;
            c.0 = loaded;
        }
        let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
        if c.1.compress2(&mut out, data).is_err() {
            c.0 = (u64::MAX, 0);
            return None;
        }
        Some(out)
    })
}

/// A payload cut out of an entry, to be stored in `blobs`.
#[derive(Debug, Clone)]
pub struct BlobPayload {
    /// FNV-1a 64 of the payload text.
    pub hash: i64,
    /// `BLOB_TEXT` or `BLOB_BASE64`.
    encoding: i64,
    /// What `blobs.bytes` holds.
    bytes: Vec<u8>,
    /// The payload text's length.
    text_len: usize,
}

/// An entry's text made ready to store: the costly part (cutting out blobs,
/// compressing) done on any thread; the writer assigns blob ids.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// Stored as TEXT: nothing pays.
    Plain,
    /// Stored as a BLOB body.
    Encoded {
        /// The dictionary used, if any.
        dictionary: Option<i64>,
        /// Whether `payload` is a zstd frame.
        compressed: bool,
        /// (gap, payload) for each blob, in text order.
        blobs: Vec<(usize, BlobPayload)>,
        /// The template, compressed or raw.
        payload: Vec<u8>,
    },
}

impl Prepared {
    /// The dictionary the payload was compressed with, if any.
    pub fn dictionary(&self) -> Option<i64> {
        match self {
            Prepared::Encoded { dictionary, .. } => *dictionary,
            Prepared::Plain => None,
        }
    }
}

/// Records which blobs an entry holds (invariant 3).
pub fn record_blob_refs(
    conn: &Connection,
    session_key: i64,
    entry_key: i64,
    blobs: &[i64],
) -> Result<()> {
    if blobs.is_empty() {
        return Ok(());
    }
    let mut st = conn
        .prepare_cached("INSERT OR IGNORE INTO entry_blobs (session_key, entry_key, blob_id) VALUES (?1, ?2, ?3)")
        .map_err(sql("recording blob references"))?;
    for id in blobs {
        st.execute(params![session_key, entry_key, id])
            .map_err(sql("recording blob references"))?;
    }
    Ok(())
}

/// Prepares entries for storage with one dictionary (or none).
#[derive(Debug, Clone)]
pub struct Encoder {
    dictionary: Option<Arc<Dictionary>>,
    level: i32,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new(None)
    }
}

impl Encoder {
    /// An encoder with this dictionary (or none), at [`LEVEL`].
    pub fn new(dictionary: Option<Arc<Dictionary>>) -> Self {
        Encoder {
            dictionary,
            level: LEVEL,
        }
    }

    /// The same encoder at another zstd level.
    pub fn with_level(self, level: i32) -> Self {
        Encoder { level, ..self }
    }

    /// The dictionary's id, if any.
    pub fn dictionary_id(&self) -> Option<i64> {
        self.dictionary.as_ref().map(|d| d.id)
    }

    /// `template` compressed with this encoder's dictionary and level, if
    /// that pays: a frame must beat the raw bytes by more than its tag and id.
    fn compress_template(&self, template: &[u8]) -> Option<Vec<u8>> {
        compress(template, self.dictionary.as_deref(), self.level)
            .filter(|c| c.len() + 4 < template.len())
    }

    /// Encodes `text`: blobs cut out, the rest compressed if that pays.
    pub fn prepare(&self, text: &str) -> Prepared {
        let ranges = blob_ranges(text);
        let mut blobs = Vec::with_capacity(ranges.len());
        let template: std::borrow::Cow<'_, [u8]> = if ranges.is_empty() {
            text.as_bytes().into()
        } else {
            let mut template = Vec::with_capacity(text.len());
            let mut from = 0;
            for r in ranges {
                template.extend_from_slice(&text.as_bytes()[from..r.start]);
                blobs.push((r.start - from, blob_payload(&text[r.clone()])));
                from = r.end;
            }
            template.extend_from_slice(&text.as_bytes()[from..]);
            template.into()
        };
        match self.compress_template(&template) {
            Some(payload) => Prepared::Encoded {
                dictionary: self.dictionary_id(),
                compressed: true,
                blobs,
                payload,
            },
            None if blobs.is_empty() => Prepared::Plain,
            None => Prepared::Encoded {
                dictionary: None,
                compressed: false,
                blobs,
                payload: template.into_owned(),
            },
        }
    }
}

/// Whether `text` holds a payload that goes out of line.
pub(super) fn has_blobs(text: &str) -> bool {
    !blob_ranges(text).is_empty()
}

/// The content ranges of JSON strings long enough and base64-only. Each
/// string's end is found first (quotes alone, `json::quoted_end`), and only
/// a long one is looked at byte by byte.
fn blob_ranges(text: &str) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    if text.len() < BLOB_THRESHOLD {
        return found;
    }
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(q) = memchr::memchr(b'"', &b[i..]) {
        let open = i + q;
        let Some(end) = crate::json::quoted_end(b, open) else {
            return found;
        };
        let content = open + 1..end - 1;
        if content.len() >= BLOB_THRESHOLD
            && b[content.clone()]
                .iter()
                .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='))
        {
            found.push(content);
        }
        i = end;
    }
    found
}

fn blob_payload(text: &str) -> BlobPayload {
    let hash = crate::fnv::Fnv::of(text.as_bytes()) as i64;
    match base64_decode(text) {
        Some(bytes) => BlobPayload {
            hash,
            encoding: BLOB_BASE64,
            bytes,
            text_len: text.len(),
        },
        None => BlobPayload {
            hash,
            encoding: BLOB_TEXT,
            bytes: text.as_bytes().to_vec(),
            text_len: text.len(),
        },
    }
}

/// Base64 as blobs hold it: the standard alphabet, canonical padding and
/// no stray trailing bits, so a text that decodes is the one encoding of
/// its bytes and round-trips exactly.
fn base64_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of canonical base64 `text` (see [`base64_encode`]), or `None`.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn splice(conn: &Connection, template: &[u8], splices: &[(usize, i64)]) -> Result<Vec<u8>> {
    let mut st = conn
        .prepare_cached("SELECT encoding, bytes FROM blobs WHERE blob_id = ?1")
        .map_err(sql("reading a blob"))?;
    let mut out = Vec::with_capacity(template.len());
    let mut at = 0;
    for &(gap, id) in splices {
        let end = at + gap;
        out.extend_from_slice(template.get(at..end).ok_or_else(|| {
            Error::Corrupt("a stored entry's blob splice lies outside its text".into())
        })?);
        at = end;
        let (encoding, bytes): (i64, Vec<u8>) = st
            .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(sql("reading a blob"))?
            .ok_or_else(|| Error::Corrupt(format!("blob {id} is missing from the archive")))?;
        match encoding {
            BLOB_BASE64 => out.extend_from_slice(base64_encode(&bytes).as_bytes()),
            BLOB_TEXT => out.extend_from_slice(&bytes),
            other => {
                return Err(Error::Corrupt(format!(
                    "blob {id} has unknown encoding {other}"
                )))
            }
        }
    }
    out.extend_from_slice(&template[at..]);
    Ok(out)
}

/// The stored value of a prepared entry: TEXT or a BLOB body, with blobs
/// interned in this transaction (the ids are returned for `entry_blobs`).
/// `message_trails`: [`message_trails`] holds for `text` (tag bit 3).
pub fn store(
    conn: &Connection,
    text: &str,
    prepared: &Prepared,
    message_trails: bool,
) -> Result<(rusqlite::types::Value, Vec<i64>)> {
    use rusqlite::types::Value;
    let Prepared::Encoded {
        dictionary,
        compressed,
        blobs,
        payload,
    } = prepared
    else {
        return Ok((Value::Text(text.to_owned()), Vec::new()));
    };
    let mut splices = Vec::with_capacity(blobs.len());
    for (gap, blob) in blobs {
        splices.push((*gap, intern_blob(conn, blob)?));
    }
    let body = write_body(*compressed, *dictionary, message_trails, &splices, payload);
    Ok((
        Value::Blob(body),
        splices.into_iter().map(|s| s.1).collect(),
    ))
}

/// A body in the format of the module's docs.
fn write_body(
    compressed: bool,
    dictionary: Option<i64>,
    message_trails: bool,
    splices: &[(usize, i64)],
    payload: &[u8],
) -> Vec<u8> {
    let mut tag = 0;
    if compressed {
        tag |= COMPRESSED;
    }
    if dictionary.is_some() {
        tag |= WITH_DICTIONARY;
    }
    if !splices.is_empty() {
        tag |= WITH_BLOBS;
    }
    if message_trails {
        tag |= TRAILING_MESSAGE;
    }
    let mut body = Vec::with_capacity(payload.len() + 8 + 4 * splices.len());
    body.push(tag);
    if let Some(d) = dictionary {
        write_varint(&mut body, d as u64);
    }
    if !splices.is_empty() {
        write_varint(&mut body, splices.len() as u64);
        for &(gap, id) in splices {
            write_varint(&mut body, gap as u64);
            write_varint(&mut body, id as u64);
        }
    }
    body.extend_from_slice(payload);
    body
}

/// The id of a blob with these bytes, inserting it if new (invariant 4).
fn intern_blob(conn: &Connection, blob: &BlobPayload) -> Result<i64> {
    let mut find = conn
        .prepare_cached("SELECT blob_id, encoding, bytes FROM blobs WHERE hash = ?1")
        .map_err(sql("storing a blob"))?;
    let mut rows = find.query([blob.hash]).map_err(sql("storing a blob"))?;
    while let Some(row) = rows.next().map_err(sql("storing a blob"))? {
        let same = row.get::<_, i64>(1).map_err(sql("storing a blob"))? == blob.encoding
            && row
                .get_ref(2)
                .map_err(sql("storing a blob"))?
                .as_blob()
                .ok()
                == Some(&blob.bytes[..]);
        if same {
            return row.get(0).map_err(sql("storing a blob"));
        }
    }
    drop(rows);
    conn.prepare_cached(
        "INSERT INTO blobs (hash, encoding, text_len, bytes) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut st| {
        st.execute(params![
            blob.hash,
            blob.encoding,
            i64::try_from(blob.text_len).unwrap_or(i64::MAX),
            blob.bytes
        ])
    })
    .map_err(sql("storing a blob"))?;
    Ok(conn.last_insert_rowid())
}

/// How hard a training looks for a good dictionary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Training {
    /// zstd's parameter search (`ZDICT_trainFromBuffer`: five fastCover
    /// builds, each scored by compressing held-out samples): for `compact`
    /// and the migration, where 8 MB of samples get a dictionary 1.2 %
    /// better on held-out entries for 0.5 s more.
    Search,
    /// One fastCover build with the parameters the search settles on for
    /// session text (k = [`QUICK_SEGMENT`], d = 8), accelerated
    /// ([`QUICK_ACCEL`]): a fifth of the time, for
    /// an import's first dictionary (a fresh 1,000-entry import went from
    /// 124 to 64 ms) and for an archive filled by appends, which waits for
    /// it. Its dictionaries compress within about 2 % of the search's:
    /// held-out lines of pi's real files −1.8 % (+1.0 % unaccelerated);
    /// imported archives, real files +0.8 %, generated sessions −0.6 to
    /// +0.9 % (unaccelerated; see [`QUICK_ACCEL`] for its own cost).
    Quick,
}

/// The segment size ([`Training::Quick`]) zstd's search picks on pi
/// sessions, real and generated, at the end of its range [50, 2000].
pub const QUICK_SEGMENT: u32 = 1998;

/// fastCover's acceleration ([`Training::Quick`]): frequencies counted at
/// every fourth position, and the entropy tables fitted on a quarter of the
/// samples instead of compressing all of them. A first dictionary from
/// pi's 1 MB real file: 99.9 → 61.5 M instructions (its import into a new
/// archive 34.7 → 28.3 ms); the archives it makes, pi's real files +0.9 %
/// and +1.1 %, a generated 10,000-entry session −0.3 % (accelerations 2 to
/// 8 all landed within ±1.7 %).
pub const QUICK_ACCEL: u32 = 4;

/// Trains a dictionary from sample entry texts; `None` when there is too
/// little text or zstd cannot find one.
pub fn train(samples: &[Vec<u8>], training: Training) -> Option<Vec<u8>> {
    let total: usize = samples.iter().map(Vec::len).sum();
    if total < MIN_TRAINING_BYTES || samples.len() < 16 {
        return None;
    }
    let size = (total / 20).clamp(16 << 10, MAX_DICTIONARY);
    match training {
        Training::Search => zstd::dict::from_samples(samples, size).ok(),
        Training::Quick => train_fast_cover(samples, size),
    }
}

/// One `ZDICT_trainFromBuffer_fastCover` build, which zstd's safe wrappers
/// do not offer (they run the search).
#[allow(unsafe_code)]
fn train_fast_cover(samples: &[Vec<u8>], capacity: usize) -> Option<Vec<u8>> {
    use zstd_safe::zstd_sys;
    let sizes: Vec<usize> = samples.iter().map(Vec::len).collect();
    let flat = samples.concat();
    let count = u32::try_from(samples.len()).ok()?;
    // Zero is zstd's "the default" for every parameter not set.
    let params = zstd_sys::ZDICT_fastCover_params_t {
        k: QUICK_SEGMENT,
        d: 8,
        // A 2^18-entry frequency table, not zstd's default 2^20: its 4 MB
        // were most of a training's time (22 → 13 ms on pi's real files, the
        // same compression within 0.1 %).
        f: 18,
        steps: 0,
        nbThreads: 0,
        splitPoint: 0.0,
        accel: QUICK_ACCEL,
        shrinkDict: 0,
        shrinkDictMaxRegression: 0,
        zParams: zstd_sys::ZDICT_params_t {
            compressionLevel: LEVEL,
            notificationLevel: 0,
            dictID: 0,
        },
    };
    let mut dict = vec![0u8; capacity];
    // SAFETY: `dict` is writable for `capacity` bytes; `flat` holds exactly
    // the sum of `sizes` bytes (it is their concatenation) and `sizes` has
    // `count` elements; zstd keeps no pointer past the call.
    let written = unsafe {
        zstd_sys::ZDICT_trainFromBuffer_fastCover(
            dict.as_mut_ptr().cast(),
            capacity,
            flat.as_ptr().cast(),
            sizes.as_ptr(),
            count,
            params,
        )
    };
    // SAFETY: a pure function of its argument.
    if unsafe { zstd_sys::ZDICT_isError(written) } != 0 {
        return None;
    }
    dict.truncate(written);
    Some(dict)
}

/// A sample for training: the text as it will be compressed (blobs cut out,
/// cut to [`SAMPLE_LIMIT`]).
pub fn training_sample(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len().min(SAMPLE_LIMIT));
    let mut from = 0;
    for r in blob_ranges(text) {
        out.extend_from_slice(&text.as_bytes()[from..r.start]);
        from = r.end;
    }
    out.extend_from_slice(&text.as_bytes()[from..]);
    out.truncate(SAMPLE_LIMIT);
    out
}

/// Stores a trained dictionary (in the caller's transaction) and returns it.
pub fn insert_dictionary(
    conn: &Connection,
    bytes: Vec<u8>,
    samples: usize,
    sample_bytes: usize,
) -> Result<Arc<Dictionary>> {
    conn.execute(
        "INSERT INTO dictionaries (created_at, samples, sample_bytes, bytes) VALUES (?1, ?2, ?3, ?4)",
        params![
            crate::entry::now_timestamp(),
            i64::try_from(samples).unwrap_or(i64::MAX),
            i64::try_from(sample_bytes).unwrap_or(i64::MAX),
            bytes
        ],
    )
    .map_err(sql("storing a compression dictionary"))?;
    Ok(Arc::new(Dictionary::new(conn.last_insert_rowid(), bytes)?))
}

/// Dictionary `id`'s bytes, read straight from its pages into one buffer
/// (a column read would assemble up to [`MAX_DICTIONARY`] in SQLite's memory
/// first, then copy it out: a cold start pays for every page it touches).
fn read_dictionary(conn: &Connection, id: i64) -> Result<Vec<u8>> {
    use std::io::Read;
    let missing = || {
        Error::Corrupt(format!(
            "compression dictionary {id} is missing from the archive"
        ))
    };
    let mut blob = match conn.blob_open(rusqlite::MAIN_DB, c"dictionaries", c"bytes", id, true) {
        Ok(blob) => blob,
        Err(rusqlite::Error::SqliteFailure(f, _)) if f.code == rusqlite::ErrorCode::Unknown => {
            // SQLite answers a missing row with a plain SQLITE_ERROR.
            return Err(missing());
        }
        Err(e) => return Err(Error::sqlite("reading a compression dictionary", e)),
    };
    let mut bytes = vec![0; blob.len()];
    blob.read_exact(&mut bytes)
        .map_err(|e| Error::io(format!("reading compression dictionary {id}"), e))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sqlite::stored::body_refs;
    use crate::entry::Entry;

    /// `blob_ranges` as it was, a byte at a time through every string.
    fn blob_ranges_byte_by_byte(text: &str) -> Vec<Range<usize>> {
        let mut found = Vec::new();
        if text.len() < BLOB_THRESHOLD {
            return found;
        }
        let b = text.as_bytes();
        let mut i = 0;
        while let Some(q) = b[i..].iter().position(|&c| c == b'"') {
            let start = i + q + 1;
            let mut j = start;
            let mut base64 = true;
            loop {
                match b.get(j) {
                    None => return found,
                    Some(b'"') => break,
                    Some(b'\\') => {
                        base64 = false;
                        j += 2;
                    }
                    Some(c) => {
                        base64 &= c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=');
                        j += 1;
                    }
                }
            }
            if base64 && j - start >= BLOB_THRESHOLD {
                found.push(start..j);
            }
            i = j + 1;
        }
        found
    }

    #[test]
    fn blobs_are_found_as_a_byte_by_byte_scan_finds_them() {
        let blob = |n: usize, seed: usize| -> String {
            (0..n)
                .map(|i| {
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
                        [(i * 7 + seed) % 64] as char
                })
                .collect()
        };
        let pieces = [
            format!("\"{}\"", blob(BLOB_THRESHOLD, 1)),
            format!("\"{}==\"", blob(BLOB_THRESHOLD + 5, 2)),
            format!("\"{}\"", blob(BLOB_THRESHOLD - 1, 3)),
            format!("\"{}\\n{}\"", blob(5000, 4), blob(5000, 5)),
            format!("\"{} {}\"", blob(5000, 6), blob(5000, 7)),
            "\"text with \\\"quotes\\\" and a backslash \\\\\"".to_owned(),
            "\"ends in a backslash \\\\\"".to_owned(),
            ",\"k\":".to_owned(),
            "{\"a\":[1,2,{\"b\":\"}\"}]}".to_owned(),
            format!("\"{}", blob(BLOB_THRESHOLD * 2, 8)),
            "\"\\u00e9t\\u00e9\"".to_owned(),
            "\"\"".to_owned(),
        ];
        let mut seed = 12345u64;
        for _ in 0..400 {
            let mut text = String::from("{");
            for _ in 0..6 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push_str(&pieces[(seed >> 33) as usize % pieces.len()]);
            }
            assert_eq!(
                blob_ranges(&text),
                blob_ranges_byte_by_byte(&text),
                "{}",
                &text[..text.len().min(300)]
            );
        }
    }

    #[test]
    fn a_frame_claiming_more_than_zstd_can_hold_is_an_error_not_an_abort() {
        // Highly compressible text still decodes (an RLE-like 4 MB run).
        let big = vec![b'a'; 4 << 20];
        let frame = zstd::bulk::compress(&big, 3).unwrap();
        assert_eq!(decompress_sized(&frame[4..], None, None).unwrap(), big);
        // The same frame with its content size rewritten to 2^40 bytes.
        let mut header = zstd::bulk::compress(b"abc", 3).unwrap();
        let descriptor = header[4];
        header[4] = (descriptor & 0x3f) | 0xc0; // an 8-byte content size
        let field = 5 + usize::from(descriptor & 0x20 == 0); // window byte
        let old = match descriptor >> 6 {
            0 => 1,
            1 => 2,
            2 => 4,
            _ => 8,
        };
        header.splice(field..field + old, (1u64 << 40).to_le_bytes());
        let err = decompress_sized(&header[4..], None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("claims 1099511627776 bytes"), "{err}");
    }

    fn archive() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE dictionaries (dict_id INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT, samples INTEGER, sample_bytes INTEGER, bytes BLOB NOT NULL);
             CREATE TABLE blobs (blob_id INTEGER PRIMARY KEY, hash INTEGER NOT NULL, encoding INTEGER NOT NULL, text_len INTEGER NOT NULL, bytes BLOB NOT NULL);",
        )
        .unwrap();
        conn
    }

    fn round_trip(conn: &Connection, encoder: &Encoder, text: &str) -> rusqlite::types::Value {
        let prepared = encoder.prepare(text);
        let trails = stored_message_trails(text);
        let (value, _) = store(conn, text, &prepared, trails).unwrap();
        let codec = Codec::default();
        let back = codec.decode(conn, ValueRef::from(&value)).unwrap();
        assert_eq!(back, text);
        // The span the tag lets a reader find equals the one a scan finds.
        let entry = codec
            .decode_entry(conn, ValueRef::from(&value), None)
            .unwrap();
        assert_eq!(entry.json(), text);
        let scanned = Entry::from_checked_text(text.to_owned()).message_span();
        assert_eq!(entry.message_span(), scanned, "{text}");
        value
    }

    #[test]
    fn a_trailing_message_is_tagged_only_when_it_is_the_last_and_only_one() {
        let conn = archive();
        let encoder = Encoder::default();
        let content = "a long enough message to be worth compressing ".repeat(20);
        let m = format!(r#"{{"role":"user","content":"{content}"}}"#);
        let cases = [
            (
                format!(r#"{{"type":"message","id":"a","message":{m}}}"#),
                true,
            ),
            (
                format!("{{\"type\":\"message\", \"message\" : {m} \n}}\n"),
                true,
            ),
            (
                format!(r#"{{"type":"message","message":{m},"id":"a"}}"#),
                false,
            ),
            (
                format!(r#"{{"message":{m},"type":"message","message":{m}}}"#),
                false,
            ),
            (
                format!(r#"{{"type":"message","message":null,"x":"{content}"}}"#),
                false,
            ),
            (
                format!(r#"{{"type":"message","message":"{content}"}}"#),
                false,
            ),
            (format!(r#"{{"\u0074ype":"message","message":{m}}}"#), false),
            (format!(r#"{{"type":"custom","data":{m}}}"#), false),
        ];
        for (text, trails) in &cases {
            assert_eq!(stored_message_trails(text), *trails, "{text}");
            let rusqlite::types::Value::Blob(body) = round_trip(&conn, &encoder, text) else {
                panic!("not encoded: {text}")
            };
            assert_eq!(body[0] & TRAILING_MESSAGE != 0, *trails, "{text}");
        }
    }

    #[test]
    fn a_damaged_or_missing_dictionary_is_a_storage_error() {
        let conn = archive();
        // zstd's dictionary magic, then a header zstd cannot load.
        let mut damaged = vec![0x37, 0xA4, 0x30, 0xEC];
        damaged.extend(std::iter::repeat_n(0xFF, 64));
        conn.execute(
            "INSERT INTO dictionaries (dict_id, created_at, samples, sample_bytes, bytes) VALUES (7, 't', 1, 1, ?1)",
            [&damaged],
        )
        .unwrap();
        let codec = Codec::default();
        for id in [7, 8] {
            let e = codec.dictionary(&conn, id).unwrap_err();
            assert_eq!(e.code(), crate::ErrorCode::Storage, "{e}");
            assert!(e.to_string().contains(&format!("dictionary {id}")), "{e}");
        }
    }

    #[test]
    fn base64_round_trips_and_refuses_non_canonical_text() {
        for n in 0..40 {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let text = base64_encode(&bytes);
            assert_eq!(base64_decode(&text).unwrap(), bytes);
        }
        // Stray trailing bits ("QR==" would decode to "QQ=="'s byte), bad
        // or missing padding: not canonical, so kept as text.
        for text in ["QR==", "QQ=A", "QQ", "QQ=", "QUI=QUI=", "QUJD\n"] {
            assert!(base64_decode(text).is_none(), "{text}");
        }
        // Whatever decodes is the one encoding of its bytes (the blob store
        // relies on it to give the text back exactly): every one- and
        // two-character change of canonical texts.
        let alphabet = b"AQgw/+=9aZ";
        for n in 1..7 {
            let canonical = base64_encode(&(0..n).map(|i| (i * 91 + 7) as u8).collect::<Vec<_>>());
            for i in 0..canonical.len() {
                for &a in alphabet {
                    for &b in alphabet {
                        let mut t = canonical.as_bytes().to_vec();
                        t[i] = a;
                        t[(i + 1) % canonical.len()] = b;
                        let t = String::from_utf8(t).unwrap();
                        if let Some(bytes) = base64_decode(&t) {
                            assert_eq!(base64_encode(&bytes), t);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn texts_come_back_exactly_whatever_their_encoding() {
        let conn = archive();
        let plain = Encoder::default();
        let image = base64_encode(
            &(0..30_000u32)
                .map(|i| (i * 7919 % 251) as u8)
                .collect::<Vec<_>>(),
        );
        // "AB==" decodes, but re-encodes as "AA==": kept as text.
        let odd = format!("{}B==", "A".repeat(BLOB_THRESHOLD + 1));
        let texts = [
            r#"{"type":"leaf","id":"a"}"#.to_owned(),
            format!(
                r#"{{"type":"message","message":{{"content":"{}"}}}}"#,
                "repeat ".repeat(500)
            ),
            format!(
                r#"{{"content":[{{"type":"image","data":"{image}"}},{{"type":"image","data":"{image}"}}],"x":"\u00e9\ud800"}}"#
            ),
            format!(r#"{{"a":"{odd}","b":"{}"}}"#, "=".repeat(BLOB_THRESHOLD)),
        ];
        for t in &texts {
            round_trip(&conn, &plain, t);
        }
        let blobs: i64 = conn
            .query_row("SELECT count(*) FROM blobs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(blobs, 3, "the two copies of the image share one blob");
        let stored: i64 = conn
            .query_row(
                "SELECT sum(length(bytes)) FROM blobs WHERE encoding = 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(stored, 30_000, "canonical base64 is kept decoded");
    }

    /// 2,000 message entries of `role` saying `text(i)`: training samples.
    fn message_samples(role: &str, text: impl Fn(usize) -> String) -> Vec<Vec<u8>> {
        (0..2000)
            .map(|i| format!(r#"{{"type":"message","id":"{i:08x}","parentId":"{:08x}","timestamp":"2025-06-01T11:00:{:02}.000Z","message":{{"role":"{role}","content":[{{"type":"text","text":"{}"}}]}}}}"#, i + 1, i % 60, text(i)).into_bytes())
            .collect()
    }

    #[test]
    fn an_entry_holding_images_is_reencoded_from_its_template_alone() {
        let conn = archive();
        let image = base64_encode(
            &(0..20_000u32)
                .map(|i| (i * 31 % 253) as u8)
                .collect::<Vec<_>>(),
        );
        let text = format!(
            r#"{{"type":"message","message":{{"content":[{{"type":"text","text":"{}"}},{{"type":"image","data":"{image}"}},{{"type":"image","data":"{image}"}}]}}}}"#,
            "the login page again ".repeat(40)
        );
        let stored = round_trip(&conn, &Encoder::default(), &text);
        let samples = message_samples("user", |i| format!("the login page again, step {i}"));
        let dict = insert_dictionary(
            &conn,
            train(&samples, Training::Quick).expect("trains"),
            2000,
            0,
        )
        .unwrap();
        let codec = Codec::default();
        let (new, blobs) = codec
            .reencode_spliced(
                &conn,
                &Encoder::new(Some(dict)).with_level(COMPACT_LEVEL),
                (&stored).into(),
            )
            .unwrap()
            .expect("it splices blobs");
        assert_eq!(codec.decode(&conn, (&new).into()).unwrap(), text);
        let (old_refs, new_refs) = (
            body_refs((&stored).into()).unwrap(),
            body_refs((&new).into()).unwrap(),
        );
        assert_eq!(
            (new_refs.blobs.clone(), blobs),
            (old_refs.blobs.clone(), old_refs.blobs)
        );
        assert_eq!(
            new_refs.dictionary,
            Some(1),
            "re-encoded with the new dictionary"
        );
        assert_eq!(
            codec.training_sample_of(&conn, (&stored).into()).unwrap(),
            training_sample(&text),
            "the template is the text's training sample"
        );
        // Anything that splices nothing is re-encoded from its text.
        let plain = round_trip(&conn, &Encoder::default(), r#"{"type":"leaf","id":"a"}"#);
        assert!(codec
            .reencode_spliced(&conn, &Encoder::default(), (&plain).into())
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_trained_dictionary_compresses_small_entries() {
        let conn = archive();
        let samples = message_samples("assistant", |i| format!("step {i} of the plan"));
        let dict = insert_dictionary(
            &conn,
            train(&samples, Training::Search).expect("trains"),
            2000,
            0,
        )
        .unwrap();
        let encoder = Encoder::new(Some(dict));
        let text = std::str::from_utf8(&samples[7]).unwrap();
        let stored = round_trip(&conn, &encoder, text);
        let rusqlite::types::Value::Blob(body) = stored else {
            panic!("not compressed")
        };
        assert!(
            body.len() * 2 < text.len(),
            "{} of {}",
            body.len(),
            text.len()
        );
        assert_eq!(
            body_refs(ValueRef::Blob(&body)).unwrap().dictionary,
            Some(1)
        );
        // Short texts that nothing helps stay plain TEXT.
        assert!(matches!(Encoder::default().prepare("{}"), Prepared::Plain));
    }

    /// Held-out bytes: `dict` compressing each of `texts` at [`LEVEL`].
    fn compressed_bytes(dict: &[u8], texts: &[Vec<u8>]) -> usize {
        let mut c = zstd::bulk::Compressor::with_dictionary(LEVEL, dict).unwrap();
        texts.iter().map(|t| c.compress(t).unwrap().len()).sum()
    }

    #[test]
    fn a_quick_training_compresses_about_as_well_as_the_search() {
        let mut lines = Vec::new();
        for file in crate::pi_fixture_files() {
            let text = std::fs::read_to_string(file).unwrap();
            lines.extend(text.lines().skip(1).map(training_sample));
        }
        // Trained on every other line, scored on the lines between.
        let (train_on, held_out): (Vec<_>, Vec<_>) =
            lines.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
        let train_on: Vec<Vec<u8>> = train_on.into_iter().map(|(_, l)| l).collect();
        let held_out: Vec<Vec<u8>> = held_out.into_iter().map(|(_, l)| l).collect();
        let quick = train(&train_on, Training::Quick).expect("a quick dictionary");
        let search = train(&train_on, Training::Search).expect("a searched dictionary");
        assert!(
            zstd_safe::get_dict_id(&quick).is_some(),
            "a zstd dictionary"
        );
        let (quick, search) = (
            compressed_bytes(&quick, &held_out),
            compressed_bytes(&search, &held_out),
        );
        let none: usize = held_out
            .iter()
            .map(|t| zstd::bulk::compress(t, LEVEL).unwrap().len())
            .sum();
        assert!(
            quick * 100 <= search * 102,
            "quick {quick} B vs search {search} B"
        );
        assert!(
            quick * 10 < none * 9,
            "quick {quick} B vs no dictionary {none} B"
        );
        // Too little text trains nothing, however quickly.
        assert!(train(&train_on[..10], Training::Quick).is_none());
    }

    #[test]
    fn damaged_bodies_are_errors_not_panics() {
        let conn = archive();
        let codec = Codec::default();
        for body in [
            &[][..],
            &[0x80],
            &[1, 2, 3],
            &[2, 0xff],
            &[4, 1, 5, 9],
            &[3, 7, 1, 2],
        ] {
            let e = codec.decode(&conn, ValueRef::Blob(body)).unwrap_err();
            assert_eq!(e.code(), crate::ErrorCode::Storage, "{body:?}: {e}");
        }
    }
}
