//! Context building (spec §8 `buildContext`): which entries of the active path a
//! model sees, and as which messages.

use crate::entry::{timestamp_millis, Entry, EntryType};
use crate::error::{Error, Result};
use crate::json::{self, raw_value, ObjectWriter};
use crate::rules::message_missing;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;

/// Rewrites the list of context entries (pi's `entryTransforms`); runs in order
/// after the default compaction transform.
pub type EntryTransform = Box<dyn Fn(Vec<Entry>) -> Vec<Entry> + Send + Sync>;

/// Turns a `custom` entry into messages (pi's `entryProjectors`), given the
/// entry, its index and all context entries.
pub type EntryProjector = Box<dyn Fn(&Entry, usize, &[Entry]) -> Vec<Value> + Send + Sync>;

/// Application hooks for context building.
#[derive(Default)]
pub struct ContextOptions {
    /// Entry transforms, applied in order.
    pub entry_transforms: Vec<EntryTransform>,
    /// Projectors by `customType`.
    pub entry_projectors: HashMap<String, EntryProjector>,
}

impl std::fmt::Debug for ContextOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextOptions")
            .field("entry_transforms", &self.entry_transforms.len())
            .field(
                "entry_projectors",
                &self.entry_projectors.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What a model sees: state derived from the path plus the messages.
#[derive(Debug, Clone)]
pub struct SessionContext {
    /// The thinking level as stored (`"off"` unless changed; absent if a change named none).
    pub thinking_level: Option<Box<RawValue>>,
    /// `{provider, modelId}` of the last model change or assistant message.
    pub model: Option<ModelRef>,
    /// The active tools as stored, if ever set.
    pub active_tool_names: Option<Box<RawValue>>,
    /// The messages, each as exact JSON text.
    pub messages: Vec<ContextMessage>,
}

/// One context message as exact JSON text: an entry's stored `message`
/// member, shared with the entry rather than copied (a long context is
/// megabytes of it), or a message built from an entry.
#[derive(Debug, Clone)]
pub struct ContextMessage(MessageText);

#[derive(Debug, Clone)]
enum MessageText {
    Cut(Entry, std::ops::Range<usize>),
    Built(Box<RawValue>),
}

impl ContextMessage {
    /// The message's JSON text.
    pub fn get(&self) -> &str {
        match &self.0 {
            MessageText::Cut(entry, span) => &entry.json()[span.clone()],
            MessageText::Built(raw) => raw.get(),
        }
    }
}

impl From<Box<RawValue>> for ContextMessage {
    fn from(raw: Box<RawValue>) -> Self {
        ContextMessage(MessageText::Built(raw))
    }
}

/// The model a context names: each member's stored JSON text, absent if the
/// entry had none.
#[derive(Debug, Clone)]
pub struct ModelRef {
    /// `provider`.
    pub provider: Option<Box<RawValue>>,
    /// `modelId` (an assistant message's `model`).
    pub model_id: Option<Box<RawValue>>,
}

impl SessionContext {
    /// The context as pi returns it: `{thinkingLevel, model, activeToolNames, messages}`.
    pub fn to_json_text(&self) -> String {
        // One buffer, sized up front: a long context is megabytes, and every
        // regrowth copies it into freshly faulted pages.
        let messages_len: usize = self.messages.iter().map(|m| m.get().len() + 1).sum();
        let mut text = String::with_capacity(messages_len + 256);
        let Ok(()) = self.json_pieces::<std::convert::Infallible>(&mut |piece| {
            text.push_str(piece);
            Ok(())
        });
        text
    }

    /// Writes [`SessionContext::to_json_text`] to `out` piece by piece,
    /// without ever holding it whole (a long context is megabytes).
    pub fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.json_pieces(&mut |piece| out.write_all(piece.as_bytes()))
    }

    /// The context's JSON text, handed to `piece` in order.
    fn json_pieces<E>(&self, piece: &mut dyn FnMut(&str) -> Result<(), E>) -> Result<(), E> {
        piece(&head_json(
            &self.thinking_level,
            &self.model,
            &self.active_tool_names,
        ))?;
        for (i, m) in self.messages.iter().enumerate() {
            if i > 0 {
                piece(",")?;
            }
            piece(m.get())?;
        }
        piece("]}")
    }
}

/// The context's JSON up to its messages: `{thinkingLevel, model,
/// activeToolNames, "messages":[` (the messages and `]}` follow).
fn head_json(
    thinking_level: &Option<Box<RawValue>>,
    model: &Option<ModelRef>,
    active_tool_names: &Option<Box<RawValue>>,
) -> String {
    {
        let raw = |r: &Option<Box<RawValue>>| r.as_ref().map(|r| r.get().to_owned());
        let mut w = ObjectWriter::new();
        w.opt_raw("thinkingLevel", raw(thinking_level).as_deref());
        match model {
            // pi builds `{provider, modelId}` in that order.
            Some(m) => {
                let mut mw = ObjectWriter::new();
                mw.opt_raw("provider", raw(&m.provider).as_deref())
                    .opt_raw("modelId", raw(&m.model_id).as_deref());
                w.raw("model", &mw.finish());
            }
            None => {
                w.raw("model", "null");
            }
        }
        w.raw(
            "activeToolNames",
            active_tool_names.as_ref().map_or("null", |t| t.get()),
        );
        // The members so far, then the messages array, written as it goes.
        w.raw("messages", "[");
        w.unclosed()
    }
}

/// JavaScript's truthiness of a member given as raw JSON (absent is falsy):
/// arrays and objects are truthy without being parsed.
fn raw_truthy(raw: Option<&RawValue>) -> bool {
    let Some(raw) = raw else { return false };
    let text = raw.get().trim();
    match text.as_bytes().first() {
        Some(b'[' | b'{') => true,
        _ => match crate::json::parse_value_lossy(text) {
            Ok(Value::Null | Value::Bool(false)) | Err(_) => false,
            Ok(Value::String(s)) => !s.is_empty(),
            Ok(Value::Number(n)) => n.as_f64().is_some_and(|x| x != 0.0),
            Ok(_) => true,
        },
    }
}

/// The members of an entry (or of an object inside one) as stored.
fn members(entry: &Entry, text: &str) -> Result<json::OrderedObject> {
    json::OrderedObject::parse(text)
        .map_err(|_| Error::InvalidEntry(format!("Entry {} is not an object", entry.id())))
}

fn member(object: &json::OrderedObject, key: &str) -> Option<Box<RawValue>> {
    object.get(key).map(|r| json::raw_value(r.get()))
}

/// The `message` member of a message entry as stored: cut from the text
/// where the entry's facts located it, else found by a parse.
fn message_of(entry: &Entry) -> Result<Option<ContextMessage>> {
    match entry.message_span() {
        Some(Some(span)) if entry.json().get(span.clone()).is_some() => {
            return Ok(Some(ContextMessage(MessageText::Cut(entry.clone(), span))))
        }
        Some(None) => return Ok(None),
        _ => {}
    }
    let [message] = members_of(entry, entry.json(), ["message"])?;
    Ok(message.map(ContextMessage::from))
}

/// The members `keys` of `text` (an entry, or an object inside one), found
/// in one pass without building the object where the text allows.
fn members_of<const N: usize>(
    entry: &Entry,
    text: &str,
    keys: [&str; N],
) -> Result<[Option<Box<RawValue>>; N]> {
    Ok(match json::object_members(text, keys) {
        Ok(found) => found.map(|r| r.map(|r| json::raw_value(r.get()))),
        Err(_) => {
            let object = members(entry, text)?;
            keys.map(|k| member(&object, k))
        }
    })
}

/// Whether a message entry lacks its `message` (or it is `null`), read
/// without the entry's other facts where the text allows.
fn lacks_message(entry: &Entry) -> bool {
    match entry.message_span() {
        Some(None) => true,
        Some(Some(span)) => entry.json().get(span) == Some("null"),
        None => entry.facts().message_missing,
    }
}

/// The state pi derives from the whole path: thinking level, model, active tools.
#[allow(clippy::type_complexity)]
fn derive_state(
    path: &[Entry],
) -> Result<(
    Option<Box<RawValue>>,
    Option<ModelRef>,
    Option<Box<RawValue>>,
)> {
    let mut thinking = Some(json::raw_value("\"off\""));
    let mut model = None;
    let mut tools = None;
    // Only the last thinking level and the last model count: the entries
    // that set them are found from their facts, and only they are parsed
    // (a long context has thousands of assistant messages).
    let is_assistant = |e: &Entry| {
        *e.entry_type() == EntryType::Message && e.facts().role.as_deref() == Some("assistant")
    };
    let last_thinking = path
        .iter()
        .rposition(|e| *e.entry_type() == EntryType::ThinkingLevelChange);
    let last_model = path
        .iter()
        .rposition(|e| *e.entry_type() == EntryType::ModelChange || is_assistant(e));
    for (i, entry) in path.iter().enumerate() {
        match entry.entry_type() {
            EntryType::ThinkingLevelChange if Some(i) == last_thinking => {
                let [level] = members_of(entry, entry.json(), ["thinkingLevel"])?;
                thinking = level;
            }
            EntryType::ModelChange if Some(i) == last_model => {
                let [provider, model_id] =
                    members_of(entry, entry.json(), ["provider", "modelId"])?;
                model = Some(ModelRef { provider, model_id });
            }
            EntryType::Message if lacks_message(entry) => return Err(message_missing(entry.id())),
            EntryType::Message if Some(i) == last_model => {
                let [provider, model_id] = match message_of(entry)? {
                    Some(raw) => members_of(entry, raw.get(), ["provider", "model"])?,
                    None => [None, None],
                };
                model = Some(ModelRef { provider, model_id });
            }
            EntryType::ActiveToolsChange => {
                let m = members(entry, entry.json())?;
                let list = m.get("activeToolNames").map(RawValue::get);
                tools = match list {
                    Some(t) if t.starts_with('[') => Some(json::raw_value(t)),
                    // A string spreads into its characters, as pi's array copy does.
                    Some(t) if t.starts_with('"') => {
                        let units = json::JsString::from_json_literal(t)
                            .map(|s| s.to_utf16())
                            .unwrap_or_default();
                        let chars: Vec<String> = char::decode_utf16(units.iter().copied())
                            .map(|c| match c {
                                Ok(c) => json::JsString::new(&c.to_string()).json().to_owned(),
                                Err(lone) => {
                                    json::JsString::from_utf16(&[lone.unpaired_surrogate()])
                                        .json()
                                        .to_owned()
                                }
                            })
                            .collect();
                        Some(json::raw_value(&format!("[{}]", chars.join(","))))
                    }
                    _ => {
                        return Err(Error::InvalidEntry(format!(
                            "Entry {} has no activeToolNames list",
                            entry.id()
                        )))
                    }
                }
            }
            _ => {}
        }
    }
    Ok((thinking, model, tools))
}

/// pi's default transform: the last compaction on the path, then (without a
/// retained tail) the kept entries before it, then everything after it.
pub fn default_context_entries(path: &[Entry]) -> Vec<Entry> {
    let Some(c_index) = path
        .iter()
        .rposition(|e| *e.entry_type() == EntryType::Compaction)
    else {
        return path.to_vec();
    };
    let compaction = &path[c_index];
    let mut out = vec![compaction.clone()];
    let f = compaction.facts();
    if !f.has_retained_tail {
        if let Some(first_kept) = f.first_kept_entry_id.as_deref().filter(|s| !s.is_empty()) {
            if let Some(start) = path[..c_index].iter().position(|e| e.id() == first_kept) {
                out.extend_from_slice(&path[start..c_index]);
            }
        }
    }
    out.extend_from_slice(&path[c_index + 1..]);
    out
}

/// The context entries: the default transform, then the application's.
pub fn context_entries(path: &[Entry], options: &ContextOptions) -> Vec<Entry> {
    let mut entries = default_context_entries(path);
    for t in &options.entry_transforms {
        entries = t(entries);
    }
    entries
}

fn millis(entry: &Entry) -> String {
    timestamp_millis(entry.timestamp()).map_or_else(|| "null".to_owned(), |ms| ms.to_string())
}

/// The messages one context entry becomes (pi's `sessionEntryToContextMessages`).
fn entry_messages(
    entry: &Entry,
    index: usize,
    entries: &[Entry],
    options: &ContextOptions,
) -> Result<Vec<ContextMessage>> {
    let obj = || {
        crate::json::OrderedObject::parse(entry.json())
            .map_err(|_| Error::InvalidEntry(format!("Entry {} is not an object", entry.id())))
    };
    Ok(match entry.entry_type() {
        EntryType::Message => match message_of(entry)? {
            Some(m) if m.get() != "null" => vec![m],
            _ => return Err(message_missing(entry.id())),
        },
        EntryType::CustomMessage => {
            let o = obj()?;
            let mut w = ObjectWriter::new();
            w.str("role", "custom");
            for key in ["customType", "content", "display", "details"] {
                w.opt_raw(key, o.get(key).map(RawValue::get));
            }
            w.raw("timestamp", &millis(entry));
            vec![raw_value(&w.finish()).into()]
        }
        EntryType::Compaction => {
            let o = obj()?;
            let mut w = ObjectWriter::new();
            w.str("role", "compactionSummary");
            w.opt_raw("summary", o.get("summary").map(RawValue::get));
            w.opt_raw("tokensBefore", o.get("tokensBefore").map(RawValue::get));
            w.raw("timestamp", &millis(entry));
            let mut out = vec![raw_value(&w.finish()).into()];
            if let Some(tail) = o.get("retainedTail") {
                if let Ok(items) = serde_json::from_str::<Vec<Box<RawValue>>>(tail.get()) {
                    out.extend(items.into_iter().map(ContextMessage::from));
                } else if let Ok(Value::Array(items)) = crate::json::parse_value_lossy(tail.get()) {
                    out.extend(items.iter().map(|v| raw_value(&v.to_string()).into()));
                }
            }
            out
        }
        EntryType::BranchSummary => {
            // The members as raw text: `details` may nest deeper than a
            // parser's recursion limit, and pi reads it all the same.
            let o = obj()?;
            if !raw_truthy(o.get("summary")) {
                return Ok(Vec::new());
            }
            let mut w = ObjectWriter::new();
            w.str("role", "branchSummary");
            w.opt_raw("summary", o.get("summary").map(RawValue::get));
            w.opt_raw("fromId", o.get("fromId").map(RawValue::get));
            w.raw("timestamp", &millis(entry));
            vec![raw_value(&w.finish()).into()]
        }
        EntryType::Custom => {
            // `data` may nest deeper than a parser's recursion limit: only
            // `customType` is parsed.
            let o = obj()?;
            let custom_type = o
                .get("customType")
                .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
                .unwrap_or_default();
            let custom_type = custom_type.as_str();
            match options.entry_projectors.get(custom_type) {
                Some(project) => project(entry, index, entries)
                    .iter()
                    .map(|v| raw_value(&v.to_string()).into())
                    .collect(),
                None => Vec::new(),
            }
        }
        _ => Vec::new(),
    })
}

/// Builds the context from an active path (pi's `buildSessionContext`).
pub fn build_context(path: &[Entry], options: &ContextOptions) -> Result<SessionContext> {
    let (thinking_level, model, active_tool_names) = derive_state(path)?;
    let entries = context_entries(path, options);
    let mut messages = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        messages.extend(entry_messages(e, i, &entries, options)?);
    }
    Ok(SessionContext {
        thinking_level,
        model,
        active_tool_names,
        messages,
    })
}

/// A path read that can be repeated: hands the same path to its sink,
/// root-side first, each time it is called
/// ([`crate::SessionStorage::visit_path`] from a fixed entry).
pub type PathVisit<'a> = dyn Fn(&mut dyn FnMut(Entry) -> Result<()>) -> Result<()> + 'a;

/// [`build_context`] without the path in memory (default options: no
/// transforms, no projectors): the state and the compaction's place are
/// read in a first pass over the path (a second finds the compaction's
/// first kept entry), and the messages are made in a last pass, each
/// handed out as it is made ([`StreamedContext::visit_messages`]). Memory
/// holds a few entries whatever the path's length. Errors of the state
/// (a message entry without a message) come from [`StreamedContext::read`],
/// before any message.
#[derive(Debug)]
pub struct StreamedContext {
    /// The thinking level, as [`SessionContext::thinking_level`].
    pub thinking_level: Option<Box<RawValue>>,
    /// The model, as [`SessionContext::model`].
    pub model: Option<ModelRef>,
    /// The active tools, as [`SessionContext::active_tool_names`].
    pub active_tool_names: Option<Box<RawValue>>,
    /// The last compaction on the path, its index, and the index of its
    /// first kept entry before it where the default transform keeps some.
    compaction: Option<(Entry, usize, Option<usize>)>,
}

impl StreamedContext {
    /// The first passes over the path `visit` reads.
    pub fn read(visit: &PathVisit<'_>) -> Result<StreamedContext> {
        // derive_state's rule in one pass: the last thinking-level and model
        // entries are kept and read at the end; its errors are the first in
        // path order, so each is kept with its index and the least wins.
        let mut last_thinking: Option<(usize, Entry)> = None;
        let mut last_model: Option<(usize, Entry)> = None;
        let mut tools = None;
        let mut first_error: Option<(usize, Error)> = None;
        let mut compaction: Option<(usize, Entry)> = None;
        let mut i = 0;
        visit(&mut |entry| {
            let at = i;
            i += 1;
            let is_assistant = *entry.entry_type() == EntryType::Message
                && entry.facts().role.as_deref() == Some("assistant");
            match entry.entry_type() {
                EntryType::ThinkingLevelChange => last_thinking = Some((at, entry.clone())),
                EntryType::ModelChange => last_model = Some((at, entry.clone())),
                EntryType::Message => {
                    if first_error.is_none() && lacks_message(&entry) {
                        first_error = Some((at, message_missing(entry.id())));
                    }
                    if is_assistant {
                        last_model = Some((at, entry.clone()));
                    }
                }
                EntryType::ActiveToolsChange if first_error.is_none() => {
                    match derive_state(std::slice::from_ref(&entry)) {
                        Ok((_, _, t)) => tools = t,
                        Err(e) => first_error = Some((at, e)),
                    }
                }
                EntryType::Compaction => compaction = Some((at, entry)),
                _ => {}
            }
            Ok(())
        })?;
        let mut thinking_level = Some(json::raw_value("\"off\""));
        let mut model = None;
        let mut errors = Vec::from_iter(first_error);
        if let Some((at, entry)) = &last_thinking {
            match members_of(entry, entry.json(), ["thinkingLevel"]) {
                Ok([level]) => thinking_level = level,
                Err(e) => errors.push((*at, e)),
            }
        }
        if let Some((at, entry)) = &last_model {
            let found = if *entry.entry_type() == EntryType::ModelChange {
                members_of(entry, entry.json(), ["provider", "modelId"])
            } else if lacks_message(entry) {
                Ok([None, None])
            } else {
                message_of(entry).and_then(|m| match m {
                    Some(raw) => members_of(entry, raw.get(), ["provider", "model"]),
                    None => Ok([None, None]),
                })
            };
            match found {
                Ok([provider, model_id]) => model = Some(ModelRef { provider, model_id }),
                Err(e) => errors.push((*at, e)),
            }
        }
        if let Some((_, e)) = errors.into_iter().min_by_key(|(at, _)| *at) {
            return Err(e);
        }
        let compaction = match compaction {
            None => None,
            Some((c_index, entry)) => {
                let f = entry.facts();
                let kept = match f.first_kept_entry_id.as_deref().filter(|s| !s.is_empty()) {
                    Some(first_kept) if !f.has_retained_tail => {
                        let mut found = None;
                        let mut i = 0;
                        visit(&mut |e| {
                            if found.is_none() && i < c_index && e.id() == first_kept {
                                found = Some(i);
                            }
                            i += 1;
                            Ok(())
                        })?;
                        found
                    }
                    _ => None,
                };
                Some((entry, c_index, kept))
            }
        };
        Ok(StreamedContext {
            thinking_level,
            model,
            active_tool_names: tools,
            compaction,
        })
    }

    /// The context's messages, made in one more pass over the path and
    /// handed to `sink` in order, as [`build_context`] makes them.
    pub fn visit_messages(
        &self,
        visit: &PathVisit<'_>,
        sink: &mut dyn FnMut(&ContextMessage) -> Result<()>,
    ) -> Result<()> {
        let options = ContextOptions::default();
        if let Some((compaction, _, _)) = &self.compaction {
            for m in entry_messages(compaction, 0, &[], &options)? {
                sink(&m)?;
            }
        }
        let mut i = 0;
        visit(&mut |entry| {
            let at = i;
            i += 1;
            let keep = match &self.compaction {
                None => true,
                Some((_, c, kept)) => at > *c || (at < *c && kept.is_some_and(|k| at >= k)),
            };
            if keep {
                for m in entry_messages(&entry, at, &[], &options)? {
                    sink(&m)?;
                }
            }
            Ok(())
        })
    }

    /// Writes the context's JSON ([`SessionContext::to_json_text`]'s text) to
    /// `out` as its messages are made. An error after the first byte leaves
    /// the text unfinished.
    pub fn write_json(&self, visit: &PathVisit<'_>, out: &mut dyn std::io::Write) -> Result<()> {
        let io = |e| Error::io("writing a context", e);
        out.write_all(
            head_json(&self.thinking_level, &self.model, &self.active_tool_names).as_bytes(),
        )
        .map_err(io)?;
        let mut first = true;
        self.visit_messages(visit, &mut |m| {
            if !first {
                out.write_all(b",").map_err(io)?;
            }
            first = false;
            out.write_all(m.get().as_bytes()).map_err(io)
        })?;
        out.write_all(b"]}").map_err(io)
    }
}
