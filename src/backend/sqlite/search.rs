//! What of an entry is searchable text: message content, custom messages and
//! summaries, with the role they are shown as.

use crate::entry::{Entry, EntryType};
use serde_json::Value;

/// The role and plain text of an entry a person would search for, if any.
pub fn searchable_text(entry: &Entry) -> Option<(String, String)> {
    let (role, text) = match entry.entry_type() {
        EntryType::Message => {
            let v = entry.value();
            let m = v.get("message")?;
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or("message")
                .to_owned();
            (role, content_text(m.get("content")?))
        }
        EntryType::CustomMessage => (
            "custom".to_owned(),
            content_text(entry.value().get("content")?),
        ),
        EntryType::Compaction => (
            "compactionSummary".to_owned(),
            entry.value().get("summary")?.as_str()?.to_owned(),
        ),
        EntryType::BranchSummary => (
            "branchSummary".to_owned(),
            entry.value().get("summary")?.as_str()?.to_owned(),
        ),
        _ => return None,
    };
    (!text.trim().is_empty()).then_some((role, text))
}

/// The text of a content value: a string, or the `text` of its text parts.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
