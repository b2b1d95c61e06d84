//! What the model sees, as pi 1.6 builds it: `buildContextEntries`,
//! `buildSessionProjection`, `buildSessionContext`, and the system message
//! a compaction keeps (`getCurrentSystemMessage`).

use super::projection::PathScan;
pub use super::projection::{AppContext, AppProjection, ProjectedEntry};
use super::session::AppSession;
use super::value::JsValue;
use crate::entry::{timestamp_millis, Entry, EntryType};
use crate::error::{Error, Result};
use crate::storage::{MessageFact, PathHint, SessionStorage};
use std::collections::HashMap;
use std::sync::Arc;

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

/// Member `key` of an object, taken out of it (the value is consumed).
fn take(v: &mut JsValue, key: &str) -> Option<JsValue> {
    match v {
        JsValue::Object(members) => members
            .iter_mut()
            .find(|(k, _)| k.is(key))
            .map(|(_, m)| std::mem::replace(m, JsValue::Null)),
        _ => None,
    }
}

/// pi's `sessionEntryToContextMessages` (the entry's parsed value is
/// consumed: its members move into the messages).
fn entry_messages(entry: &Entry, mut v: JsValue) -> Result<Vec<JsValue>> {
    Ok(match entry.entry_type() {
        EntryType::Message => {
            let (system, empty_array) = {
                let role = message_role(&v)?;
                let is = |r: &str| role.is_some_and(|x| x.is_str(r));
                (
                    is("system"),
                    is("user") || is("assistant") || is("toolResult"),
                )
            };
            let mut message = take(&mut v, "message").unwrap_or(JsValue::Null);
            if JsValue::nullish(message.get("content")) {
                if system {
                    message.set("content", JsValue::str(""));
                } else if empty_array {
                    message.set("content", JsValue::Array(Vec::new()));
                }
            }
            vec![message]
        }
        EntryType::CustomMessage => {
            let content = match take(&mut v, "content") {
                Some(c) if !JsValue::nullish(Some(&c)) => c,
                _ => JsValue::Array(Vec::new()),
            };
            vec![object(vec![
                ("role", Some(JsValue::str("custom"))),
                ("customType", take(&mut v, "customType")),
                ("content", Some(content)),
                ("display", take(&mut v, "display")),
                ("details", take(&mut v, "details")),
                ("timestamp", Some(millis(entry))),
            ])]
        }
        EntryType::BranchSummary if JsValue::truthy(v.get("summary")) => vec![object(vec![
            ("role", Some(JsValue::str("branchSummary"))),
            ("summary", take(&mut v, "summary")),
            ("fromId", take(&mut v, "fromId")),
            ("timestamp", Some(millis(entry))),
        ])],
        EntryType::Compaction => {
            let summary = object(vec![
                ("role", Some(JsValue::str("compactionSummary"))),
                ("summary", take(&mut v, "summary")),
                ("tokensBefore", take(&mut v, "tokensBefore")),
                ("timestamp", Some(millis(entry))),
            ]);
            match take(&mut v, "systemMessage") {
                Some(sys) if JsValue::truthy(Some(&sys)) => vec![sys, summary],
                _ => vec![summary],
            }
        }
        _ => Vec::new(),
    })
}

/// pi's `projectContextEntry`: the entry's messages with its latest edit applied.
fn project(entry: &Entry, v: JsValue, edit: Option<&JsValue>) -> Result<Vec<JsValue>> {
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

/// `{provider, modelId}` of a `model_change` entry.
fn model_of_change(v: &JsValue) -> JsValue {
    object(vec![
        ("provider", v.get("provider").cloned()),
        ("modelId", v.get("modelId").cloned()),
    ])
}

/// `{provider, modelId}` of an assistant message entry, `None` when the
/// entry's `message.role` is not `"assistant"` (its message is present).
fn model_of_message(v: &JsValue) -> Option<JsValue> {
    let m = v.get("message");
    let assistant = matches!(m, Some(JsValue::Object(_) | JsValue::Array(_)))
        && m.and_then(|m| m.get("role"))
            .is_some_and(|r| r.is_str("assistant"));
    assistant.then(|| {
        object(vec![
            ("provider", m.and_then(|m| m.get("provider")).cloned()),
            ("modelId", m.and_then(|m| m.get("model")).cloned()),
        ])
    })
}

impl PathScan {
    /// Scans the path from `leaf`.
    fn read<S: SessionStorage + ?Sized>(st: &S, leaf: &str) -> Result<PathScan> {
        let mut scan = PathScan::default();
        st.visit_path_facts(leaf, &mut |f| {
            let i = scan.ends.len();
            scan.ids.push_str(f.id);
            scan.ends.push(scan.ids.len());
            match f.entry_type {
                "compaction" => scan.last_compaction = Some(i),
                "thinking_level_change" => scan.last_thinking = Some(i),
                "model_change" => scan.model_candidates.push((i, None)),
                "message" => match f.message {
                    MessageFact::Present { role: Some(r) } if r != "assistant" => {}
                    MessageFact::Present { .. } | MessageFact::NotMessage => {
                        scan.model_candidates.push((i, None));
                    }
                    MessageFact::Text(text) => {
                        scan.parsed += 1;
                        let v = JsValue::parse(text)?;
                        match v.get("message") {
                            m @ (Some(JsValue::Null) | None) => {
                                if scan.broken.is_none() {
                                    scan.broken = Some(type_error(m, "role").to_string());
                                }
                            }
                            Some(_) => {
                                if let Some(model) = model_of_message(&v) {
                                    scan.model_candidates.push((i, Some(model)));
                                }
                            }
                        }
                    }
                },
                _ => {}
            }
            Ok(())
        })?;
        Ok(scan)
    }
}

/// Path entries with their parsed values, root first.
type ParsedPath = Vec<(Entry, JsValue)>;

/// Entries read by id for the settings, a batch per statement where the
/// store batches: the first batch small (the newest candidate usually
/// decides), each next one four times larger, up to the last size.
const SETTINGS_BATCHES: [usize; 4] = [2, 8, 32, 128];

impl<S: SessionStorage> AppSession<S> {
    /// The light scan of the leaf's path, kept for the leaf until the log
    /// changes.
    fn scan(&self) -> Result<std::sync::Arc<PathScan>> {
        let leaf = self.leaf.clone().unwrap_or_default();
        if let Some((at, scan)) = &*self.scanned.borrow() {
            if *at == leaf {
                return Ok(std::sync::Arc::clone(scan));
            }
        }
        let scan = std::sync::Arc::new(if leaf.is_empty() {
            PathScan::default()
        } else {
            PathScan::read(&self.storage, &leaf)?
        });
        self.parses.set(self.parses.get() + scan.parsed);
        *self.scanned.borrow_mut() = Some((leaf, std::sync::Arc::clone(&scan)));
        Ok(scan)
    }

    /// The path entry at `i` of `scan`, parsed.
    fn parsed_at(&self, scan: &PathScan, i: usize) -> Result<Option<JsValue>> {
        self.parses.set(self.parses.get() + 1);
        match self.storage.entry(scan.id(i))? {
            Some(e) => Ok(Some(JsValue::parse(e.json())?)),
            None => Ok(None),
        }
    }

    /// pi's `getSessionContextSettings` over the scanned path: the newest
    /// thinking level and model, reading only the entries that decide them.
    fn settings(&self, scan: &PathScan) -> Result<(Option<JsValue>, JsValue)> {
        if let Some(e) = &scan.broken {
            return Err(Error::InvalidEntry(e.clone()));
        }
        let level = match scan.last_thinking {
            Some(i) => self
                .parsed_at(scan, i)?
                .and_then(|v| v.get("thinkingLevel").cloned()),
            None => Some(JsValue::str("off")),
        };
        // The newest candidate that is one decides; read newest first, a
        // batch at a time.
        let mut pending = scan.model_candidates.iter().rev().peekable();
        let mut round = 0;
        while pending.peek().is_some() {
            let size = SETTINGS_BATCHES[round.min(SETTINGS_BATCHES.len() - 1)];
            round += 1;
            let batch: Vec<&(usize, Option<JsValue>)> = pending.by_ref().take(size).collect();
            let ids: Vec<&str> = batch
                .iter()
                .filter(|(_, known)| known.is_none())
                .map(|(i, _)| scan.id(*i))
                .collect();
            let mut texts: HashMap<usize, Entry> = HashMap::new();
            self.storage.visit_entries_by_id(&ids, &mut |n, e| {
                texts.insert(n, e);
                Ok(())
            })?;
            // The ids asked for are the batch's own up to its first known
            // model, where the loop ends: so `n` indexes both.
            for (n, (_, known)) in batch.into_iter().enumerate() {
                if let Some(model) = known {
                    return Ok((level, model.clone()));
                }
                let entry = texts.remove(&n);
                let Some(entry) = entry else { continue };
                self.parses.set(self.parses.get() + 1);
                let v = JsValue::parse(entry.json())?;
                if *entry.entry_type() == EntryType::ModelChange {
                    return Ok((level, model_of_change(&v)));
                }
                if let Some(model) = model_of_message(&v) {
                    return Ok((level, model));
                }
            }
        }
        Ok((level, JsValue::Null))
    }

    /// pi's `buildContextEntries` over the scanned path: the context's
    /// entries parsed, and which of them are selected (indices into it).
    /// Reads the path from the newest compaction's first kept entry (or the
    /// compaction itself) to the leaf; the whole path where there is no
    /// compaction.
    fn selection(&self, scan: &PathScan) -> Result<(ParsedPath, Vec<usize>)> {
        let (from, c, kept) = match scan.last_compaction {
            None => (0, None, None),
            Some(c) => {
                // `path.findIndex(e => e.id === compaction.id)`: ids on a
                // path are distinct (a repeat would be a loop), so it is `c`.
                let first_kept = self
                    .parsed_at(scan, c)?
                    .and_then(|v| v.get("firstKeptEntryId").cloned());
                let kept = first_kept
                    .as_ref()
                    .and_then(|k| (0..c).find(|&i| k.is_str(scan.id(i))));
                (kept.unwrap_or(c), Some(c), kept)
            }
        };
        let need = scan.len() - from;
        let leaf = self.leaf.as_deref().unwrap_or_default();
        let mut suffix = if need == 0 {
            Vec::new()
        } else {
            crate::storage::path_suffix(&self.storage, leaf, need)?
        };
        if suffix.len() < need {
            return Err(Error::Corrupt(format!(
                "the path from {leaf} changed while it was read"
            )));
        }
        let suffix = suffix.split_off(suffix.len() - need);
        self.parses.set(self.parses.get() + suffix.len());
        let path = suffix
            .into_iter()
            .map(|e| {
                let v = JsValue::parse(e.json())?;
                Ok((e, v))
            })
            .collect::<Result<Vec<_>>>()?;
        let selection = select(&path, c.map(|c| c - from), kept.is_some())?;
        Ok((path, selection))
    }

    /// The store's [`PathHint`] for the leaf's path, where it has one.
    fn hint(&self) -> Result<Option<PathHint>> {
        match self.leaf.as_deref() {
            Some(leaf) if !leaf.is_empty() => self.storage.path_hint(leaf),
            _ => Ok(None),
        }
    }

    /// [`Self::selection`] from the store's hint instead of a scan: the
    /// newest compaction's first kept entry located by the store, then the
    /// path from it (or the compaction; the root where there is none) to
    /// the leaf read as one range.
    fn hinted_selection(&self, hint: &PathHint) -> Result<(ParsedPath, Vec<usize>)> {
        let leaf = self.leaf.as_deref().unwrap_or_default();
        let (from, c, kept) = match &hint.compaction {
            None => (0, None, false),
            Some((c, entry)) => {
                self.parses.set(self.parses.get() + 1);
                let v = JsValue::parse(entry.json())?;
                // `entry.id === compaction.firstKeptEntryId` before the
                // compaction: a string naming an ancestor of it.
                let kept = match v.get("firstKeptEntryId").and_then(JsValue::as_js_str) {
                    Some(k) => match k.to_str() {
                        Some(k) => self.storage.depth_on_path(leaf, &k)?.filter(|d| d < c),
                        None => None,
                    },
                    None => None,
                };
                (kept.unwrap_or(*c), Some(*c), kept.is_some())
            }
        };
        let mut path = Vec::new();
        self.storage
            .visit_path_range(leaf, from, hint.depth, &mut |e| {
                let v = JsValue::parse(e.json())?;
                path.push((e, v));
                Ok(())
            })?;
        self.parses.set(self.parses.get() + path.len());
        if path.len() as u64 != hint.depth - from + 1 {
            return Err(Error::Corrupt(format!(
                "the path from {leaf} changed while it was read"
            )));
        }
        let c = c.map(|c| usize::try_from(c - from).unwrap_or(usize::MAX));
        let selection = select(&path, c, kept)?;
        Ok((path, selection))
    }

    /// pi's `getSessionContextSettings` from the store's hint and the
    /// context's path range (`path`, the path's entries from depth `from`
    /// to the leaf): the newest thinking level change is the hint's; the
    /// model is the newest `model_change` or assistant message, found in
    /// the range from its leaf end, else read back from the range's start
    /// towards the hint's newest `model_change`, a batch at a time.
    fn hinted_settings(
        &self,
        hint: &PathHint,
        path: &[(Entry, JsValue)],
    ) -> Result<(Option<JsValue>, JsValue)> {
        let level = match &hint.thinking_level_change {
            Some(e) => {
                self.parses.set(self.parses.get() + 1);
                JsValue::parse(e.json())?.get("thinkingLevel").cloned()
            }
            None => Some(JsValue::str("off")),
        };
        let decides = |e: &Entry, v: &JsValue| match e.entry_type() {
            EntryType::ModelChange => Some(model_of_change(v)),
            EntryType::Message => model_of_message(v),
            _ => None,
        };
        if let Some(model) = path.iter().rev().find_map(|(e, v)| decides(e, v)) {
            return Ok((level, model));
        }
        let from = hint.depth + 1 - path.len() as u64;
        // Only an assistant message newer than the newest model change can
        // decide now; the hint has that change.
        let floor = hint.model_change.as_ref().map_or(0, |(d, _)| d + 1);
        let leaf = self.leaf.as_deref().unwrap_or_default();
        let mut high = from;
        let mut size = SETTINGS_BATCHES[0] as u64;
        while high > floor {
            let low = high.saturating_sub(size).max(floor);
            let mut batch = Vec::new();
            self.storage
                .visit_path_range(leaf, low, high - 1, &mut |e| {
                    if *e.entry_type() == EntryType::Message {
                        batch.push(e);
                    }
                    Ok(())
                })?;
            for e in batch.iter().rev() {
                self.parses.set(self.parses.get() + 1);
                let v = JsValue::parse(e.json())?;
                if let Some(model) = model_of_message(&v) {
                    return Ok((level, model));
                }
            }
            high = low;
            size = size.saturating_mul(4);
        }
        let model = match &hint.model_change {
            Some((_, e)) => {
                self.parses.set(self.parses.get() + 1);
                model_of_change(&JsValue::parse(e.json())?)
            }
            None => JsValue::Null,
        };
        Ok((level, model))
    }

    /// pi's `buildContextEntries()`: the leaf's path, compaction-aware.
    pub fn context_entries(&self) -> Result<Vec<Entry>> {
        if self.leaf.is_none() {
            return Ok(Vec::new());
        }
        let (path, selection) = match self.hint()? {
            Some(hint) if hint.compaction.is_some() => self.hinted_selection(&hint)?,
            Some(_) => return self.branch(None),
            None => {
                let scan = self.scan()?;
                if scan.last_compaction.is_none() {
                    // The whole path, as stored: nothing to parse.
                    return self.branch(None);
                }
                self.selection(&scan)?
            }
        };
        Ok(selection.into_iter().map(|i| path[i].0.clone()).collect())
    }

    /// pi's `buildSessionProjection()`: where the store gives a
    /// [`PathHint`], the context's range of the path read alone and the
    /// settings from the hint and that range; else the settings from a
    /// light scan of the whole path, the context from the newest compaction
    /// on (parsed entries: the context's and the few that decide the
    /// settings). Kept for the leaf until the log changes.
    pub fn session_projection(&self) -> Result<AppProjection> {
        Ok((*self.shared_projection()?).clone())
    }

    /// [`Self::session_projection`] as pi's `JSON.stringify` writes it,
    /// written from the kept projection (nothing copied).
    pub fn session_projection_json(&self) -> Result<String> {
        Ok(self.shared_projection()?.to_json_text())
    }

    /// The projection at the leaf, built once and shared until the log
    /// changes (readers that only write it out need no copy of it).
    pub(crate) fn shared_projection(&self) -> Result<Arc<AppProjection>> {
        let leaf = self.leaf.clone().unwrap_or_default();
        if let Some((at, p)) = &*self.projected.borrow() {
            if *at == leaf {
                return Ok(Arc::clone(p));
            }
        }
        let (path, selection, thinking_level, model) = if let Some(hint) = self.hint()? {
            let (path, selection) = self.hinted_selection(&hint)?;
            let (level, model) = self.hinted_settings(&hint, &path)?;
            (path, selection, level, model)
        } else {
            let scan = self.scan()?;
            let (level, model) = self.settings(&scan)?;
            let (path, selection) = if self.leaf.is_none() {
                (Vec::new(), Vec::new())
            } else {
                self.selection(&scan)?
            };
            (path, selection, level, model)
        };
        let projection = Arc::new(assemble(path, &selection, thinking_level, model)?);
        *self.projected.borrow_mut() = Some((leaf, Arc::clone(&projection)));
        Ok(projection)
    }

    /// pi's `buildSessionContext()`.
    pub fn session_context(&self) -> Result<AppContext> {
        Ok(self.shared_projection()?.context.clone())
    }

    /// [`Self::session_context`] as pi's `JSON.stringify` writes it, written
    /// from the kept projection (nothing copied).
    pub fn session_context_json(&self) -> Result<String> {
        Ok(self.shared_projection()?.context.to_json_text())
    }

    /// Entries parsed into JS values by context reads so far (what the
    /// bound on a resume's work counts).
    pub fn parsed_entries(&self) -> usize {
        self.parses.get()
    }
}

/// pi's `buildContextEntries` selection over the context's part of a parsed
/// path: everything where there is no compaction (`c` `None`); else the
/// compaction at `c`, the entries before it (the first kept on, which the
/// path starts at) unless `kept` is false or they are system messages, and
/// every entry after it.
fn select(path: &[(Entry, JsValue)], c: Option<usize>, kept: bool) -> Result<Vec<usize>> {
    let Some(c) = c else {
        return Ok((0..path.len()).collect());
    };
    let mut out = vec![c];
    if kept {
        for (i, (e, v)) in path.iter().enumerate().take(c) {
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

/// pi's `buildSessionProjection()` over the selected entries of a parsed
/// path: each entry's messages with its latest `context_edit` applied.
fn assemble(
    path: Vec<(Entry, JsValue)>,
    selection: &[usize],
    thinking_level: Option<JsValue>,
    model: JsValue,
) -> Result<AppProjection> {
    let is_edit = |e: &Entry| matches!(e.entry_type(), EntryType::Other(t) if t == "context_edit");
    let mut edits: HashMap<String, JsValue> = HashMap::new();
    for &i in selection {
        let (e, v) = &path[i];
        if is_edit(e) {
            let key = v
                .get("targetId")
                .map_or_else(|| "undefined".into(), JsValue::to_json);
            edits.insert(key, v.clone());
        }
    }
    // Each selected entry is used once (the selection has no repeats), so
    // its parsed value moves into its messages.
    let mut path: Vec<Option<(Entry, JsValue)>> = path.into_iter().map(Some).collect();
    let mut entries = Vec::with_capacity(selection.len());
    let mut messages = Vec::new();
    for (n, &i) in selection.iter().enumerate() {
        let Some((e, v)) = path.get_mut(i).and_then(Option::take) else {
            return Err(Error::Corrupt(format!("context entry {i} selected twice")));
        };
        // Only the newest compaction (first in the selection) speaks; an
        // older one inside the kept range contributes nothing.
        let ms = if n > 0 && *e.entry_type() == EntryType::Compaction {
            Vec::new()
        } else {
            let edit = if edits.is_empty() {
                None
            } else {
                edits.get(crate::json::JsString::new(e.id()).json())
            };
            project(&e, v, edit)?
        };
        messages.extend(ms.iter().cloned());
        entries.push(ProjectedEntry {
            source_entry: e,
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

/// The rules as first written, over the whole path parsed: what the light
/// reads above must answer alike (the tests compare them on every shape).
#[cfg(test)]
pub(super) mod reference {
    use super::*;

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

    /// pi's `buildSessionProjection()`.
    pub fn projection(path: &[(Entry, JsValue)]) -> Result<AppProjection> {
        let (thinking_level, model) = settings(path)?;
        let selection = context_selection(path)?;
        assemble(path.to_vec(), &selection, thinking_level, model)
    }

    /// pi's `buildContextEntries()`.
    pub fn context_entries(path: &[(Entry, JsValue)]) -> Result<Vec<Entry>> {
        Ok(context_selection(path)?
            .into_iter()
            .map(|i| path[i].0.clone())
            .collect())
    }
}
