//! How an entry's exact text is kept in `entries.json`: plain, compressed
//! with the archive's own zstd dictionary, and with large base64 payloads
//! (screenshots, pasted images) moved out of line into the content-addressed
//! `blobs` table, stored once however many entries hold them.
//!
//! The parts: [`body`] is the stored body's format (tag, header, varints),
//! [`frame`] zstd's magicless frames, [`blob`] the payloads kept out of
//! line, [`train`] dictionary training; this module holds the dictionaries
//! of an archive ([`Codec`]) and what prepares and stores an entry.
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
mod blob;
mod body;
mod dictionary;
mod frame;
mod train;

pub(super) use blob::has_blobs;
pub use blob::record_blob_refs;
pub(super) use body::{body_header_refs, read_varint, write_varint, MEMBER, TRAILING_MESSAGE};
pub use body::{message_trails, stored_message_trails};
pub use dictionary::Dictionary;
pub use frame::LEVEL;
pub use train::{
    train, training_sample, Training, IMPORT_TRAINING_BUDGET, SAMPLE_LIMIT, TRAINING_BUDGET,
};

use super::error::sql;
use crate::error::{Error, Result};
use blob::{blob_payload, blob_ranges, intern_blob, splice, BlobPayload};
use body::{spliced, write_body, Header};
use frame::{compress, decompress, decompress_sized};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

    /// Whether `prepared`, compressed by this encoder from `text` with
    /// nothing cut out, decompresses to `text` (`compact`'s check of a new
    /// block, run on the thread that compressed it).
    pub fn decodes_to(&self, prepared: &Prepared, text: &[u8]) -> bool {
        match prepared {
            Prepared::Encoded {
                dictionary,
                compressed: true,
                blobs,
                payload,
            } if blobs.is_empty() && *dictionary == self.dictionary_id() => {
                decompress_sized(payload, self.dictionary.as_deref(), Some(text.len()))
                    .is_ok_and(|t| t == text)
            }
            _ => false,
        }
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
    use super::blob::{base64_encode, BLOB_THRESHOLD};
    use super::*;
    use crate::backend::sqlite::stored::body_refs;
    use crate::entry::Entry;

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
                &Encoder::new(Some(dict))
                    .with_level(crate::backend::sqlite::CompactOptions::BEST_LEVEL),
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
            zstd::zstd_safe::get_dict_id(&quick).is_some(),
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
