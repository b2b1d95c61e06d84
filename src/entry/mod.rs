//! The entry model: the exact JSON text of an entry plus the few facts the
//! contract's rules read from it.
//!
//! An entry is returned exactly as it was stored: unknown fields, key order,
//! number spelling and lone surrogate escapes all survive, because the text is
//! kept and never re-serialized. [`EntryFacts`] is parsed once, when the entry
//! is read or appended, with the checks pi applies to a session file line.

//!
//! The parts: `facts` (the fields the rules read), `parse` (the facts
//! parser), `ids` (new ids) and `dates` (JavaScript dates).

mod dates;
mod facts;
mod ids;
mod parse;

pub use dates::{iso_timestamp, now_timestamp, timestamp_millis};
pub use facts::{EntryFacts, EntryType, Usage};
pub use ids::{new_entry_id, new_session_id};
pub use parse::EntryProblem;

use crate::error::{Error, Result};
use crate::json::{self, ObjectWriter};
use parse::{checked_facts, parse_facts};
use serde_json::Value;
use std::sync::{Arc, OnceLock};

#[derive(Debug)]
struct EntryInner {
    json: Box<str>,
    /// Parsed when the entry is checked, or on first use for text a store
    /// already checked when it was appended (reading a path never needs them).
    /// Boxed: most entries read from a store never need them, and a long
    /// path is hundreds of thousands of entries.
    facts: OnceLock<Box<EntryFacts>>,
    /// The type a store kept beside the text: asking for it parses nothing.
    stored_type: Option<EntryType>,
    /// Where the `message` member's value sits (`None`: absent), found
    /// without the other facts when first asked; `None` where that scan defers.
    message: OnceLock<Option<Option<std::ops::Range<usize>>>>,
    /// The store recorded that the `message` member is an object and the
    /// last and only one: it is found without scanning it.
    message_trails: bool,
}

/// One entry of a session log: its exact JSON text and its parsed facts.
/// Cloning is cheap (shared).
#[derive(Debug, Clone)]
pub struct Entry(Arc<EntryInner>);

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.json == other.0.json
    }
}

impl Entry {
    /// Parses one entry from JSON text with pi's line checks; surrounding
    /// whitespace is dropped and inner whitespace removed, so the text fits on one line.
    pub fn parse(text: &str) -> Result<Self, EntryProblem> {
        let compact = json::minify(json::trim_json_whitespace(text));
        let facts = parse_facts(&compact)?;
        Ok(Entry::with_facts(compact.into_boxed_str(), facts))
    }

    /// Parses a line exactly as stored in a file (no re-spacing), with pi's checks.
    pub fn from_stored_line(line: &str) -> Result<Self, EntryProblem> {
        let facts = parse_facts(line)?;
        Ok(Entry::with_facts(line.into(), facts))
    }

    /// Wraps text that a store checked when it was appended; its facts are
    /// parsed only if asked for. Text that no longer parses (a corrupted store)
    /// reads as an entry of type `unreadable`.
    pub fn from_checked_text(json: String) -> Self {
        Entry::from_stored_text(json, None, false)
    }

    /// [`Entry::from_checked_text`] with what the store kept beside the text:
    /// the `type` it recorded when the entry was appended, and whether it
    /// recorded that the `message` member is an object and the last and only
    /// one (then the message is found without scanning it, see
    /// [`json::trailing_object_member`]).
    pub fn from_stored_text(
        json: String,
        stored_type: Option<EntryType>,
        message_trails: bool,
    ) -> Self {
        Entry(Arc::new(EntryInner {
            json: json.into_boxed_str(),
            facts: OnceLock::new(),
            stored_type,
            message: OnceLock::new(),
            message_trails,
        }))
    }

    fn with_facts(json: Box<str>, facts: EntryFacts) -> Self {
        Entry(Arc::new(EntryInner {
            json,
            facts: OnceLock::from(Box::new(facts)),
            stored_type: None,
            message: OnceLock::new(),
            message_trails: false,
        }))
    }

    /// Where the `message` member's value sits in [`Entry::json`]
    /// (`Some(None)`: no such member), found by the fast scan without
    /// reading the other facts; `None` where only the full parser can say.
    pub fn message_span(&self) -> Option<Option<std::ops::Range<usize>>> {
        match self.0.facts.get() {
            // Without a span the facts came from the full parser's fallback.
            Some(f) => f.message_span.clone().map(Some),
            None => self
                .0
                .message
                .get_or_init(|| {
                    let text = &self.0.json;
                    if let Some(span) = self
                        .0
                        .message_trails
                        .then(|| json::trailing_object_member(text, "message"))
                        .flatten()
                    {
                        return Some(Some(span));
                    }
                    json::checked_object_members(text, ["message"]).map(|[m]| {
                        m.map(|raw| {
                            let start = raw.as_ptr() as usize - text.as_ptr() as usize;
                            start..start + raw.len()
                        })
                    })
                })
                .clone(),
        }
    }

    /// Parses JSON given through the API; problems become `invalid_entry` errors.
    pub fn from_json(text: &str) -> Result<Self> {
        Entry::parse(text)
            .map_err(|p| Error::InvalidEntry(format!("Invalid entry: {}", p.reason())))
    }

    /// Builds an entry from a `serde_json::Value` (keys in the value's order).
    pub fn from_value(value: &Value) -> Result<Self> {
        Entry::from_json(&value.to_string())
    }

    /// The exact JSON text of the entry, one line, no trailing newline.
    pub fn json(&self) -> &str {
        &self.0.json
    }

    /// The entry parsed into a `serde_json::Value` (lone surrogates read as U+FFFD).
    pub fn value(&self) -> Value {
        json::parse_value_lossy(&self.0.json).unwrap_or(Value::Null)
    }

    /// The parsed facts.
    pub fn facts(&self) -> &EntryFacts {
        self.0.facts.get_or_init(|| {
            Box::new(
                checked_facts(&self.0.json)
                    .or_else(|| parse_facts(&self.0.json).ok())
                    .unwrap_or_else(EntryFacts::unreadable),
            )
        })
    }

    /// `id`.
    pub fn id(&self) -> &str {
        &self.facts().id
    }

    /// `parentId` as stored (`None` for `null`).
    pub fn parent_id(&self) -> Option<&str> {
        self.facts().parent_id.as_deref()
    }

    /// `type`.
    pub fn entry_type(&self) -> &EntryType {
        match &self.0.stored_type {
            Some(t) => t,
            None => &self.facts().entry_type,
        }
    }

    /// `timestamp`.
    pub fn timestamp(&self) -> &str {
        &self.facts().timestamp
    }

    /// A `leaf` entry as `setLeafId` writes it.
    pub fn new_leaf(
        id: &str,
        parent_id: Option<&str>,
        timestamp: &str,
        target_id: Option<&str>,
    ) -> Self {
        let mut w = ObjectWriter::new();
        w.str("type", "leaf")
            .str("id", id)
            .opt_str_or_null("parentId", parent_id)
            .str("timestamp", timestamp)
            .opt_str_or_null("targetId", target_id);
        Entry::from_json(&w.finish()).expect("a leaf entry built from strings is valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_survive_exactly() {
        let text = r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"\ud83d"}}"#;
        let e = Entry::parse(text).expect("valid");
        assert_eq!(e.json(), text);
        assert!(e.facts().is_user_message());
    }
}
