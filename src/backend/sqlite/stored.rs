//! A stored `entries.json` value read back (codec invariant 1): text as it
//! is, an entry body stored alone ([`super::codec`]), or a member of a block
//! ([`super::block`]). The one module that knows both, so the layering
//! stays one way: blocks are built on the codec, never the reverse.

use super::block;
use super::codec::{self, training_sample, Codec};
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use rusqlite::types::ValueRef;
use rusqlite::Connection;

impl Codec {
    /// The exact entry text of a stored `entries.json` value.
    pub fn decode(&self, conn: &Connection, value: ValueRef<'_>) -> Result<String> {
        self.decode_with_tag(conn, value).map(|(text, _)| text)
    }

    /// The entry a stored `entries.json` value holds, with what its tag says
    /// of its text (its `message` member found without a scan, tag bit 3);
    /// `stored_type` is the row's `type`, if the caller read it.
    pub fn decode_entry(
        &self,
        conn: &Connection,
        value: ValueRef<'_>,
        stored_type: Option<EntryType>,
    ) -> Result<Entry> {
        let (text, message_trails) = self.decode_with_tag(conn, value)?;
        Ok(Entry::from_stored_text(text, stored_type, message_trails))
    }

    /// The text, and whether the tag says its `message` member trails.
    pub(super) fn decode_with_tag(
        &self,
        conn: &Connection,
        value: ValueRef<'_>,
    ) -> Result<(String, bool)> {
        match value {
            ValueRef::Text(t) => String::from_utf8(t.to_vec())
                .map(|text| (text, false))
                .map_err(|_| Error::Corrupt("a stored entry is not UTF-8 text".into())),
            ValueRef::Blob(b) if block::is_member(value) => {
                let trails = b[0] & codec::TRAILING_MESSAGE != 0;
                String::from_utf8(block::member_text(self, conn, b)?)
                    .map(|text| (text, trails))
                    .map_err(|_| Error::Corrupt("a decoded entry is not UTF-8 text".into()))
            }
            ValueRef::Blob(b) => self.decode_body(conn, b),
            other => Err(Error::Corrupt(format!(
                "a stored entry is {:?}, not text",
                other.data_type()
            ))),
        }
    }

    /// A stored entry's training sample ([`training_sample`] of its text):
    /// for a body that splices blobs, its template, without assembling the
    /// text (the template is the text with its blobs cut out).
    pub fn training_sample_of(&self, conn: &Connection, stored: ValueRef<'_>) -> Result<Vec<u8>> {
        match self.spliced_sample(conn, stored)? {
            Some(sample) => Ok(sample),
            None => Ok(training_sample(&self.decode(conn, stored)?)),
        }
    }
}

/// The dictionary and blob ids a stored value uses (for checks and compact).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyRefs {
    /// The dictionary, if compressed with one.
    pub dictionary: Option<i64>,
    /// Blob ids, in text order.
    pub blobs: Vec<i64>,
    /// The block holding the text, for a member of one (whose member 0
    /// names the block's dictionary).
    pub block: Option<i64>,
}

/// What a stored value refers to, read from its header alone.
pub fn body_refs(value: ValueRef<'_>) -> Result<BodyRefs> {
    match value {
        ValueRef::Blob(b) if block::is_member(value) => {
            let member = block::parse_member(b)?;
            Ok(BodyRefs {
                dictionary: member.header.and_then(|h| h.dictionary),
                blobs: Vec::new(),
                block: Some(member.block),
            })
        }
        ValueRef::Blob(b) => {
            let (dictionary, blobs) = codec::body_header_refs(b)?;
            Ok(BodyRefs {
                dictionary,
                blobs,
                block: None,
            })
        }
        _ => Ok(BodyRefs::default()),
    }
}
