//! Payloads moved out of line (codec invariants 3 and 4): JSON strings of
//! at least [`BLOB_THRESHOLD`] base64 bytes, found without a byte-by-byte
//! scan of every string, kept once in `blobs` by content (canonical base64
//! decoded), referenced from `entry_blobs`, and spliced back on reading.

use crate::backend::sqlite::error::sql;
use crate::error::{Error, Result};
use base64::Engine as _;
use rusqlite::{params, Connection, OptionalExtension};
use std::ops::Range;

/// A base64 string at least this long goes out of line.
pub const BLOB_THRESHOLD: usize = 8 << 10;
/// How blob bytes are kept.
pub(super) const BLOB_TEXT: i64 = 0;
pub(super) const BLOB_BASE64: i64 = 1;

/// A payload cut out of an entry, to be stored in `blobs`.
#[derive(Debug, Clone)]
pub struct BlobPayload {
    /// FNV-1a 64 of the payload text.
    pub hash: i64,
    /// `BLOB_TEXT` or `BLOB_BASE64`.
    pub(super) encoding: i64,
    /// What `blobs.bytes` holds.
    pub(super) bytes: Vec<u8>,
    /// The payload text's length.
    pub(super) text_len: usize,
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

/// Whether `text` holds a payload that goes out of line.
pub(in crate::backend::sqlite) fn has_blobs(text: &str) -> bool {
    !blob_ranges(text).is_empty()
}

/// The content ranges of JSON strings long enough and base64-only. Each
/// string's end is found first (quotes alone, `json::quoted_end`), and only
/// a long one is looked at byte by byte.
pub(super) fn blob_ranges(text: &str) -> Vec<Range<usize>> {
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
        if content.len() >= BLOB_THRESHOLD && is_base64_alphabet(&b[content.clone()]) {
            found.push(content);
        }
        i = end;
    }
    found
}

/// Whether every byte of `bytes` is a base64 character (`A-Za-z0-9+/=`).
/// A chunk at a time without an early exit inside it, so that the compiler
/// compares 32 bytes at once: a byte-at-a-time `all` over the inline images
/// of an import was 3.5 % of its CPU.
fn is_base64_alphabet(bytes: &[u8]) -> bool {
    bytes.chunks(64).all(|chunk| {
        chunk.iter().fold(true, |ok, &c| {
            ok & (c.is_ascii_alphanumeric() | (c == b'+') | (c == b'/') | (c == b'='))
        })
    })
}

pub(super) fn blob_payload(text: &str) -> BlobPayload {
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
pub(super) fn base64_encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of canonical base64 `text` (see [`base64_encode`]), or `None`.
pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

pub(super) fn splice(
    conn: &Connection,
    template: &[u8],
    splices: &[(usize, i64)],
) -> Result<Vec<u8>> {
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

/// The id of a blob with these bytes, inserting it if new (invariant 4).
pub(super) fn intern_blob(conn: &Connection, blob: &BlobPayload) -> Result<i64> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
