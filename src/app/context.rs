//! What the model sees, as pi 1.6 builds it: `buildContextEntries`,
//! `buildSessionProjection`, `buildSessionContext`, and the system message
//! a compaction keeps (`getCurrentSystemMessage`).

use super::value::JsValue;
use super::AppSession;
use crate::entry::{timestamp_millis, Entry, EntryType};
use crate::error::{Error, Result};
use crate::storage::SessionStorage;
use std::collections::HashMap;

/// pi's `buildSessionContext()`: `{messages, thinkingLevel, model}`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppContext {
    /// The messages, in order.
    pub messages: Vec<JsValue>,
    /// The thinking level (`None`: a change entry without one, which
    /// `JSON.stringify` drops).
    pub thinking_level: Option<JsValue>,
    /// `{provider, modelId}` (members as found) or `null`.
    pub model: JsValue,
}

/// One entry of the projection and the messages it contributes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectedEntry {
    /// The entry (written as its stored text).
    pub source_entry: Entry,
    /// Its messages.
    pub messages: Vec<JsValue>,
}

/// pi's `buildSessionProjection()`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppProjection {
    /// The context entries and what each contributes.
    pub entries: Vec<ProjectedEntry>,
    /// The context: the session context's fields.
    pub context: AppContext,
}

fn push_list(out: &mut String, items: &[JsValue]) {
    out.push('[');
    for (i, m) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        m.write_json(out);
    }
    out.push(']');
}

impl AppContext {
    /// The context as pi's `JSON.stringify` writes it.
    pub fn to_json_text(&self) -> String {
        let mut out = String::from("{\"messages\":");
        push_list(&mut out, &self.messages);
        self.write_settings(&mut out);
        out.push('}');
        out
    }

    fn write_settings(&self, out: &mut String) {
        if let Some(level) = &self.thinking_level {
            out.push_str(",\"thinkingLevel\":");
            level.write_json(out);
        }
        out.push_str(",\"model\":");
        self.model.write_json(out);
    }
}

impl AppProjection {
    /// The projection as pi's `JSON.stringify` writes it (entries as their stored text).
    pub fn to_json_text(&self) -> String {
        let mut out = String::from("{\"entries\":[");
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"sourceEntry\":");
            out.push_str(e.source_entry.json());
            out.push_str(",\"messages\":");
            push_list(&mut out, &e.messages);
            out.push('}');
        }
        out.push_str("],\"messages\":");
        push_list(&mut out, &self.context.messages);
        self.context.write_settings(&mut out);
        out.push('}');
        out
    }
}

/// The error pi's JavaScript throws reading `prop` of a missing value.
pub(crate) fn type_error(of: Option<&JsValue>, prop: &str) -> Error {
    let what = if matches!(of, Some(JsValue::Null)) {
        "null"
    } else {
        "undefined"
    };
    Error::InvalidEntry(format!(
        "Cannot read properties of {what} (reading '{prop}')"
    ))
}

/// `entry.message.role`, failing as pi does when the message is missing.
fn message_role(v: &JsValue) -> Result<Option<&JsValue>> {
    match v.get("message") {
        Some(m @ (JsValue::Object(_) | JsValue::Array(_))) => Ok(m.get("role")),
        Some(JsValue::Null) | None => Err(type_error(v.get("message"), "role")),
        Some(_) => Ok(None),
    }
}

/// `new Date(timestamp).getTime()` for an entry's timestamp: NaN as `null`
/// in JSON.
fn millis(entry: &Entry) -> JsValue {
    JsValue::Number(timestamp_millis(entry.timestamp()).map_or(f64::NAN, |ms| ms as f64))
}

/// An object built member by member, `undefined` members left out as
/// `JSON.stringify` leaves them out.
fn object(members: Vec<(&str, Option<JsValue>)>) -> JsValue {
    let mut o = JsValue::Object(Vec::new());
    for (k, v) in members {
        if let Some(v) = v {
            o.set(k, v);
        }
    }
    o
}

/// pi's `sessionEntryToContextMessages`.
fn entry_messages(entry: &Entry, v: &JsValue) -> Result<Vec<JsValue>> {
    Ok(match entry.entry_type() {
        EntryType::Message => {
            let role = message_role(v)?;
            let mut message = v.get("message").cloned().unwrap_or(JsValue::Null);
            if JsValue::nullish(message.get("content")) {
                if role.is_some_and(|r| r.is_str("system")) {
                    message.set("content", JsValue::str(""));
                } else if role.is_some_and(|r| {
                    r.is_str("user") || r.is_str("assistant") || r.is_str("toolResult")
                }) {
                    message.set("content", JsValue::Array(Vec::new()));
                }
            }
            vec![message]
        }
        EntryType::CustomMessage => {
            let content = match v.get("content") {
                Some(c) if !JsValue::nullish(Some(c)) => c.clone(),
                _ => JsValue::Array(Vec::new()),
            };
            vec![object(vec![
                ("role", Some(JsValue::str("custom"))),
                ("customType", v.get("customType").cloned()),
                ("content", Some(content)),
                ("display", v.get("display").cloned()),
                ("details", v.get("details").cloned()),
                ("timestamp", Some(millis(entry))),
            ])]
        }
        EntryType::BranchSummary if JsValue::truthy(v.get("summary")) => vec![object(vec![
            ("role", Some(JsValue::str("branchSummary"))),
            ("summary", v.get("summary").cloned()),
            ("fromId", v.get("fromId").cloned()),
            ("timestamp", Some(millis(entry))),
        ])],
        EntryType::Compaction => {
            let summary = object(vec![
                ("role", Some(JsValue::str("compactionSummary"))),
                ("summary", v.get("summary").cloned()),
                ("tokensBefore", v.get("tokensBefore").cloned()),
                ("timestamp", Some(millis(entry))),
            ]);
            match v.get("systemMessage") {
                Some(sys) if JsValue::truthy(Some(sys)) => vec![sys.clone(), summary],
                _ => vec![summary],
            }
        }
        _ => Vec::new(),
    })
}

/// pi's `projectContextEntry`: the entry's messages with its latest edit applied.
fn project(entry: &Entry, v: &JsValue, edit: Option<&JsValue>) -> Result<Vec<JsValue>> {
    let messages = entry_messages(entry, v)?;
    let Some(edit) = edit else {
        return Ok(messages);
    };
    let replacement = edit.get("replacement");
    if matches!(replacement, Some(JsValue::Null)) {
        return Ok(Vec::new());
    }
    messages
        .into_iter()
        .map(|mut message| {
            let role = message.get("role").cloned();
            let is = |r: &str| role.as_ref().is_some_and(|x| x.is_str(r));
            if !(is("user") || is("assistant") || is("toolResult") || is("custom")) {
                return Ok(message);
            }
            let Some(replacement) = replacement else {
                return Err(type_error(None, "content"));
            };
            let content = replacement.get("content");
            let content = match content {
                Some(JsValue::String(s)) if is("assistant") || is("toolResult") => {
                    Some(JsValue::Array(vec![object(vec![
                        ("type", Some(JsValue::str("text"))),
                        ("text", Some(JsValue::String(s.clone()))),
                    ])]))
                }
                other => other.cloned(),
            };
            match content {
                Some(c) => message.set("content", c),
                // `{...message, content: undefined}`: JSON.stringify drops it.
                None => {
                    if let JsValue::Object(members) = &mut message {
                        members.retain(|(k, _)| k.json() != "\"content\"");
                    }
                }
            }
            Ok(message)
        })
        .collect()
}

/// pi's `getSessionContextSettings`: thinking level and model from the whole path.
fn settings(path: &[(Entry, JsValue)]) -> Result<(Option<JsValue>, JsValue)> {
    let mut level = Some(JsValue::str("off"));
    let mut model = JsValue::Null;
    for (entry, v) in path {
        match entry.entry_type() {
            EntryType::ThinkingLevelChange => level = v.get("thinkingLevel").cloned(),
            EntryType::ModelChange => {
                model = object(vec![
                    ("provider", v.get("provider").cloned()),
                    ("modelId", v.get("modelId").cloned()),
                ]);
            }
            EntryType::Message if message_role(v)?.is_some_and(|r| r.is_str("assistant")) => {
                let m = v.get("message");
                model = object(vec![
                    ("provider", m.and_then(|m| m.get("provider")).cloned()),
                    ("modelId", m.and_then(|m| m.get("model")).cloned()),
                ]);
            }
            _ => {}
        }
    }
    Ok((level, model))
}

/// pi's `buildContextEntries` over a path (root first).
fn context_selection(path: &[(Entry, JsValue)]) -> Result<Vec<usize>> {
    let Some(c) = path
        .iter()
        .rposition(|(e, _)| *e.entry_type() == EntryType::Compaction)
    else {
        return Ok((0..path.len()).collect());
    };
    // `path.findIndex(e => e.id === compaction.id)`: the first with that id.
    let id = path[c].0.id();
    let c = path.iter().position(|(e, _)| e.id() == id).unwrap_or(c);
    let first_kept = path[c].1.get("firstKeptEntryId");
    let mut out = vec![c];
    let mut found = false;
    for (i, (e, v)) in path.iter().enumerate().take(c) {
        if first_kept.is_some_and(|k| k.is_str(e.id())) {
            found = true;
        }
        if found {
            let system = *e.entry_type() == EntryType::Message
                && message_role(v)?.is_some_and(|r| r.is_str("system"));
            if !system {
                out.push(i);
            }
        }
    }
    out.extend(c + 1..path.len());
    Ok(out)
}

impl<S: SessionStorage> AppSession<S> {
    /// The path from the leaf, each entry with its parsed value.
    fn parsed_path(&self) -> Result<Vec<(Entry, JsValue)>> {
        self.branch(None)?
            .into_iter()
            .map(|e| {
                let v = JsValue::parse(e.json())?;
                Ok((e, v))
            })
            .collect()
    }

    /// pi's `buildContextEntries()`: the leaf's path, compaction-aware.
    pub fn context_entries(&self) -> Result<Vec<Entry>> {
        if self.leaf.is_none() {
            return Ok(Vec::new());
        }
        let path = self.parsed_path()?;
        Ok(context_selection(&path)?
            .into_iter()
            .map(|i| path[i].0.clone())
            .collect())
    }

    /// pi's `buildSessionProjection()`.
    pub fn session_projection(&self) -> Result<AppProjection> {
        let path = if self.leaf.is_none() {
            Vec::new()
        } else {
            self.parsed_path()?
        };
        let (thinking_level, model) = settings(&path)?;
        let selection = context_selection(&path)?;
        let mut edits: HashMap<String, &JsValue> = HashMap::new();
        for &i in &selection {
            let (e, v) = &path[i];
            if *e.entry_type() == EntryType::Other("context_edit".into()) {
                let key = v
                    .get("targetId")
                    .map_or_else(|| "undefined".into(), JsValue::to_json);
                edits.insert(key, v);
            }
        }
        let mut entries = Vec::with_capacity(selection.len());
        let mut messages = Vec::new();
        for (n, &i) in selection.iter().enumerate() {
            let (e, v) = &path[i];
            // Only the newest compaction (first in the selection) speaks; an
            // older one inside the kept range contributes nothing.
            let ms = if n > 0 && *e.entry_type() == EntryType::Compaction {
                Vec::new()
            } else {
                let key = crate::json::JsString::new(e.id()).json().to_owned();
                project(e, v, edits.get(&key).copied())?
            };
            messages.extend(ms.iter().cloned());
            entries.push(ProjectedEntry {
                source_entry: e.clone(),
                messages: ms,
            });
        }
        Ok(AppProjection {
            entries,
            context: AppContext {
                messages,
                thinking_level,
                model,
            },
        })
    }

    /// pi's `buildSessionContext()`.
    pub fn session_context(&self) -> Result<AppContext> {
        Ok(self.session_projection()?.context)
    }
}

/// pi-ai's `contentText(content)`: a string as is, else the `text` blocks
/// joined with newlines; as UTF-16 code units (lone surrogates kept).
fn content_text(content: Option<&JsValue>) -> Result<Vec<u16>> {
    match content {
        Some(JsValue::String(s)) => Ok(s.to_utf16()),
        Some(JsValue::Array(blocks)) => {
            let mut out: Vec<u16> = Vec::new();
            let mut first = true;
            for b in blocks {
                if matches!(b, JsValue::Null) {
                    return Err(type_error(Some(b), "type"));
                }
                if b.get("type").is_some_and(|t| t.is_str("text")) {
                    if !first {
                        out.push(u16::from(b'\n'));
                    }
                    first = false;
                    // `Array.prototype.join` writes null and undefined as "".
                    match b.get("text") {
                        None | Some(JsValue::Null) => {}
                        other => out.extend(JsValue::js_to_string(other).to_utf16()),
                    }
                }
            }
            Ok(out)
        }
        other => Err(Error::InvalidEntry(format!(
            "content.filter is not a function ({})",
            other.map_or_else(|| "undefined".into(), JsValue::to_json)
        ))),
    }
}

/// pi-ai's `getCurrentSystemMessage(messages)`: every system message replayed
/// into one (`None` when there is none and no tools).
pub(crate) fn current_system_message(messages: &[JsValue]) -> Result<Option<JsValue>> {
    let mut content: Vec<Vec<u16>> = Vec::new();
    let mut sections: Vec<(crate::json::JsString, JsValue)> = Vec::new();
    let mut timestamp: Option<JsValue> = None;
    let mut tools: Vec<(String, JsValue)> = Vec::new();
    for m in messages {
        if !m.get("role").is_some_and(|r| r.is_str("system")) {
            continue;
        }
        if timestamp.is_none() && !JsValue::nullish(m.get("timestamp")) {
            timestamp = m.get("timestamp").cloned();
        }
        let text = content_text(m.get("content"))?;
        if !text.is_empty() {
            content.push(text);
        }
        if let Some(JsValue::Object(members)) = m.get("sections") {
            for (name, value) in members {
                sections.retain(|(k, _)| k != name);
                if !matches!(value, JsValue::Null) {
                    sections.push((name.clone(), value.clone()));
                }
            }
        }
        // getCurrentTools: removals then additions, by name, in a Map.
        let name_key = |t: &JsValue| {
            t.get("name")
                .map_or_else(|| "undefined".into(), JsValue::to_json)
        };
        if let Some(JsValue::Array(removed)) = m.get("toolsRemoved") {
            for t in removed {
                let k = name_key(t);
                tools.retain(|(n, _)| *n != k);
            }
        }
        if let Some(JsValue::Array(added)) = m.get("toolsAdded") {
            for t in added {
                let k = name_key(t);
                match tools.iter_mut().find(|(n, _)| *n == k) {
                    Some((_, v)) => *v = t.clone(),
                    None => tools.push((k, t.clone())),
                }
            }
        }
    }
    if timestamp.is_none() && tools.is_empty() {
        return Ok(None);
    }
    let mut out = JsValue::Object(Vec::new());
    out.set("role", JsValue::str("system"));
    let joined = content.join(&[u16::from(b'\n'), u16::from(b'\n')][..]);
    out.set(
        "content",
        JsValue::String(crate::json::JsString::from_utf16(&joined)),
    );
    if !sections.is_empty() {
        out.set("sections", JsValue::Object(sections));
    }
    if !tools.is_empty() {
        out.set(
            "toolsAdded",
            JsValue::Array(tools.into_iter().map(|(_, t)| t).collect()),
        );
    }
    out.set("timestamp", timestamp.unwrap_or(JsValue::Number(0.0)));
    Ok(Some(out))
}
