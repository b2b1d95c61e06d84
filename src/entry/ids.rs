//! New ids: entry ids (short, checked against those taken) and session ids.

use crate::error::Result;

/// A fresh entry id (spec §7): the last 8 characters of a new UUIDv7, retried
/// while `taken` says it collides, then a full UUIDv7.
pub fn new_entry_id(mut taken: impl FnMut(&str) -> Result<bool>) -> Result<String> {
    for _ in 0..100 {
        let full = uuid::Uuid::now_v7().to_string();
        let short = &full[full.len() - 8..];
        if !taken(short)? {
            return Ok(short.to_owned());
        }
    }
    Ok(uuid::Uuid::now_v7().to_string())
}

/// A fresh session id: a full UUIDv7.
pub fn new_session_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
