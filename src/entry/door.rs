//! Entries pi 1.6 parses that would make a session unreadable later (a
//! `message` entry without a message): an archive refuses them at the door (import keeps the line verbatim and
//! reports it with its file and line; an append is `invalid_entry`).

use super::{Entry, EntryType};
use crate::error::{Error, Result};

/// What makes an entry unreadable later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// A `message` entry whose `message` is `null` or absent (pi 1.6's
    /// context and statistics fail on it, for good: the log is append-only).
    NoMessage(String),
}

/// Whether `e` would make its session unreadable later, and why. A
/// self-parent is not refused: pi 1.6 reads it (its tree shows it as a
/// root; the app differential's fixture holds one), so the archive stores
/// it as pi reads it.
pub fn unreadable_later(e: &Entry) -> Option<Unreadable> {
    if *e.entry_type() != EntryType::Message {
        return None;
    }
    let null = |raw: &str| raw.trim() == "null";
    let missing = match e.message_span() {
        Some(None) => true,
        Some(Some(span)) => e.json().get(span).is_none_or(null),
        None => crate::json::OrderedObject::parse(e.json())
            .map_or(true, |o| o.get("message").is_none_or(|m| null(m.get()))),
    };
    missing.then(|| Unreadable::NoMessage(e.id().to_owned()))
}

/// Refuses an append of `e` to an archive when it would make the session
/// unreadable later: `invalid_entry`, saying why.
pub fn refuse_unreadable(e: &Entry) -> Result<()> {
    match unreadable_later(e) {
        Some(Unreadable::NoMessage(id)) => Err(Error::InvalidEntry(format!(
            "Entry {id} is a message entry without a message (null); refused (pi 1.6's context and statistics would fail on it for good)"
        ))),
        None => Ok(()),
    }
}
