//! The stored body of an entry (see the format in [`super`]): its tag
//! bits, its header (dictionary id, blob splices), varints, and writing one.

use crate::error::{Error, Result};
use rusqlite::types::ValueRef;
use std::ops::Range;

pub(super) const COMPRESSED: u8 = 1;
pub(super) const WITH_DICTIONARY: u8 = 2;
pub(super) const WITH_BLOBS: u8 = 4;
pub(in crate::backend::sqlite) const TRAILING_MESSAGE: u8 = 8;
/// Tag bit 4: the text is a member of a block (its body is read by
/// [`super::block`], which builds on this module).
pub(in crate::backend::sqlite) const MEMBER: u8 = 16;
pub(super) const KNOWN_BITS: u8 = COMPRESSED | WITH_DICTIONARY | WITH_BLOBS | TRAILING_MESSAGE;
/// The header and body of a stored value whose body splices blobs; `None`
/// for any other value (text, a block member, a body without splices).
pub(super) fn spliced(stored: ValueRef<'_>) -> Result<Option<(Header, &[u8])>> {
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
pub(in crate::backend::sqlite) fn body_header_refs(body: &[u8]) -> Result<(Option<i64>, Vec<i64>)> {
    let h = Header::parse(body)?;
    Ok((h.dictionary, h.splices.iter().map(|s| s.1).collect()))
}

/// A stored body's header, parsed.
pub(super) struct Header {
    /// Whether the payload is a zstd frame.
    pub(super) compressed: bool,
    /// Whether the entry's `message` member trails (tag bit 3).
    pub(super) trailing_message: bool,
    /// The dictionary the payload was compressed with.
    pub(super) dictionary: Option<i64>,
    /// (gap, blob id)
    pub(super) splices: Vec<(usize, i64)>,
    /// Where the payload starts in the body.
    pub(super) payload_start: usize,
}

impl Header {
    pub(super) fn parse(body: &[u8]) -> Result<Header> {
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

pub(in crate::backend::sqlite) fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(in crate::backend::sqlite) fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
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

/// A body in the format of the module's docs.
pub(super) fn write_body(
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
