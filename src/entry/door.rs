//! Entries pi 1.6 parses that would make a session unreadable later: an
//! archive refuses them at the door (import keeps the line verbatim and
//! reports it with its file and line; an append is `invalid_entry`).

use super::{Entry, EntryType};
use crate::error::{Error, Result};

/// What makes an entry unreadable later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// It names itself as its parent (pi 1.6's path walk never ends on it;
    /// its tree shows it as a root).
    SelfParent(String),
    /// A `message` entry whose `message` is `null` or absent (pi 1.6's
    /// context and statistics fail on it, for good: the log is append-only).
    NoMessage(String),
}

/// Whether `e` would make its session unreadable later, and why.
pub fn unreadable_later(e: &Entry) -> Option<Unreadable> {
    if e.parent_id() == Some(e.id()) {
        return Some(Unreadable::SelfParent(e.id().to_owned()));
    }
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
        Some(Unreadable::SelfParent(id)) => Err(Error::InvalidEntry(format!(
            "Entry {id} names itself as its parent; refused (pi 1.6's path walk would never end)"
        ))),
        Some(Unreadable::NoMessage(id)) => Err(Error::InvalidEntry(format!(
            "Entry {id} is a message entry without a message (null); refused (pi 1.6's context and statistics would fail on it for good)"
        ))),
        None => Ok(()),
    }
}
