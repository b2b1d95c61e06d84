//! What of an entry is searchable text: message content, custom messages and
//! summaries, with the role they are shown as.

use crate::entry::{Entry, EntryType};
use serde_json::value::RawValue;
use serde_json::Value;

/// The few members search reads; everything else is skipped unparsed.
#[derive(serde::Deserialize)]
struct TextProbe<'a> {
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    role: Option<String>,
}

#[derive(serde::Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
}

fn probe_content(raw: &RawValue) -> Option<String> {
    let text = raw.get();
    if text.starts_with('"') {
        return serde_json::from_str(text).ok();
    }
    if text.starts_with('[') {
        let parts: Vec<Part> = serde_json::from_str(text).ok()?;
        return Some(
            parts
                .into_iter()
                .filter_map(|p| p.text)
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    Some(String::new())
}

/// The fast path: borrowed probes; `None` when the text needs the full parse
/// (duplicate keys, lone surrogates, odd shapes).
fn probe(entry: &Entry) -> Option<Option<(String, String)>> {
    let p: TextProbe = serde_json::from_str(entry.json()).ok()?;
    let (role, text) = match entry.entry_type() {
        EntryType::Message => {
            let m: TextProbe = serde_json::from_str(p.message?.get()).ok()?;
            let role = m.role.unwrap_or_else(|| "message".to_owned());
            match m.content {
                Some(c) => (role, probe_content(c)?),
                None => return Some(None),
            }
        }
        EntryType::CustomMessage => match p.content {
            Some(c) => ("custom".to_owned(), probe_content(c)?),
            None => return Some(None),
        },
        EntryType::Compaction => ("compactionSummary".to_owned(), p.summary?),
        EntryType::BranchSummary => ("branchSummary".to_owned(), p.summary?),
        _ => return Some(None),
    };
    Some((!text.trim().is_empty()).then_some((role, text)))
}

/// The role and plain text of an entry a person would search for, if any.
pub fn searchable_text(entry: &Entry) -> Option<(String, String)> {
    if let Some(found) = probe(entry) {
        return found;
    }
    full_parse(entry)
}

fn full_parse(entry: &Entry) -> Option<(String, String)> {
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
