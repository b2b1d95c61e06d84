//! The entry model: the exact JSON text of an entry plus the few facts the
//! contract's rules read from it.
//!
//! An entry is returned exactly as it was stored: unknown fields, key order,
//! number spelling and lone surrogate escapes all survive, because the text is
//! kept and never re-serialized. [`EntryFacts`] is parsed once, when the entry
//! is read or appended, with the checks pi applies to a session file line.

use crate::error::{Error, Result};
use crate::json::{self, JsString, ObjectWriter};
use serde::de::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// The eleven entry types of the contract, and room for types it does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryType {
    /// `message`: an agent message.
    Message,
    /// `thinking_level_change`.
    ThinkingLevelChange,
    /// `model_change`.
    ModelChange,
    /// `active_tools_change`.
    ActiveToolsChange,
    /// `compaction`: a summary that replaces older context.
    Compaction,
    /// `branch_summary`: a summary of an abandoned branch.
    BranchSummary,
    /// `custom`: application data, invisible to the model unless projected.
    Custom,
    /// `custom_message`: an application message visible to the model.
    CustomMessage,
    /// `label`: sets or clears a label on another entry.
    Label,
    /// `session_info`: sets the session name.
    SessionInfo,
    /// `leaf`: moves the leaf pointer.
    Leaf,
    /// Any other type string; stored and returned unchanged.
    Other(String),
}

impl EntryType {
    /// Parses a type string.
    pub fn from_name(name: &str) -> Self {
        match name {
            "message" => EntryType::Message,
            "thinking_level_change" => EntryType::ThinkingLevelChange,
            "model_change" => EntryType::ModelChange,
            "active_tools_change" => EntryType::ActiveToolsChange,
            "compaction" => EntryType::Compaction,
            "branch_summary" => EntryType::BranchSummary,
            "custom" => EntryType::Custom,
            "custom_message" => EntryType::CustomMessage,
            "label" => EntryType::Label,
            "session_info" => EntryType::SessionInfo,
            "leaf" => EntryType::Leaf,
            other => EntryType::Other(other.to_owned()),
        }
    }

    /// The type string as stored.
    pub fn as_str(&self) -> &str {
        match self {
            EntryType::Message => "message",
            EntryType::ThinkingLevelChange => "thinking_level_change",
            EntryType::ModelChange => "model_change",
            EntryType::ActiveToolsChange => "active_tools_change",
            EntryType::Compaction => "compaction",
            EntryType::BranchSummary => "branch_summary",
            EntryType::Custom => "custom",
            EntryType::CustomMessage => "custom_message",
            EntryType::Label => "label",
            EntryType::SessionInfo => "session_info",
            EntryType::Leaf => "leaf",
            EntryType::Other(s) => s,
        }
    }
}

/// Token usage and cost that one entry adds to the session statistics (spec §6).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    /// `usage.input`.
    pub input: f64,
    /// `usage.output`.
    pub output: f64,
    /// `usage.cacheRead`.
    pub cache_read: f64,
    /// `usage.cacheWrite`.
    pub cache_write: f64,
    /// `usage.cost.total`.
    pub cost_total: f64,
}

/// The fields of an entry that the contract's rules read.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryFacts {
    /// `type`.
    pub entry_type: EntryType,
    /// `id`, never empty.
    pub id: String,
    /// `parentId`: `None` for `null`; `Some("")` is kept because pi accepts it (and treats it as a root).
    pub parent_id: Option<String>,
    /// `timestamp`, never empty.
    pub timestamp: String,
    /// `targetId` of a `leaf` (`None` = `null`) or a `label` entry.
    pub target_id: Option<String>,
    /// `label` of a `label` entry, when it is a string (lone surrogates kept).
    pub label: Option<JsString>,
    /// `name` of a `session_info` entry, when it is a string (lone surrogates kept).
    pub name: Option<JsString>,
    /// `firstKeptEntryId` of a compaction, when it is a string.
    pub first_kept_entry_id: Option<String>,
    /// Whether a compaction's `retainedTail` is truthy in JavaScript's sense.
    pub has_retained_tail: bool,
    /// `message.role` of a message entry, when it is a string.
    pub role: Option<String>,
    /// Whether a `message` entry lacks its `message` (or it is `null`): pi crashes on it.
    pub message_missing: bool,
    /// The usage this entry counts towards statistics, if it counts.
    pub usage: Option<Usage>,
    /// Where the value of the `message` member sits in the entry's text, when
    /// the facts were read from that text in one pass (context building then
    /// hands it out without parsing the entry again).
    pub message_span: Option<std::ops::Range<usize>>,
}

impl EntryFacts {
    /// The facts of stored text that no longer parses.
    fn unreadable() -> Self {
        EntryFacts::common(
            EntryType::Other("unreadable".to_owned()),
            String::new(),
            None,
            String::new(),
        )
    }

    /// The facts every entry has; the type-specific ones empty.
    fn common(
        entry_type: EntryType,
        id: String,
        parent_id: Option<String>,
        timestamp: String,
    ) -> Self {
        EntryFacts {
            entry_type,
            id,
            parent_id,
            timestamp,
            target_id: None,
            label: None,
            name: None,
            first_kept_entry_id: None,
            has_retained_tail: false,
            role: None,
            message_missing: false,
            usage: None,
            message_span: None,
        }
    }

    /// The parent id if it leads somewhere: pi treats `null` and `""` alike as "no parent".
    pub fn parent(&self) -> Option<&str> {
        self.parent_id.as_deref().filter(|p| !p.is_empty())
    }

    /// The leaf after this entry is appended (spec §3).
    pub fn leaf_after(&self) -> Option<&str> {
        if self.entry_type == EntryType::Leaf {
            self.target_id.as_deref()
        } else {
            Some(&self.id)
        }
    }

    /// The label this entry sets (`Some(Some(..))`) or clears (`Some(None)`), for
    /// `label` entries: trimmed, blank counts as clearing.
    pub fn label_update(&self) -> Option<(&str, Option<JsString>)> {
        if self.entry_type != EntryType::Label {
            return None;
        }
        let target = self.target_id.as_deref()?;
        Some((target, trimmed_non_blank(self.label.as_ref())))
    }

    /// For a `session_info` entry, the name it leaves the session with (trimmed; blank is none).
    pub fn session_name_update(&self) -> Option<Option<JsString>> {
        if self.entry_type != EntryType::SessionInfo {
            return None;
        }
        Some(trimmed_non_blank(self.name.as_ref()))
    }

    /// Whether this is a user message (the only valid `before` fork target).
    pub fn is_user_message(&self) -> bool {
        self.entry_type == EntryType::Message && self.role.as_deref() == Some("user")
    }
}

/// The label and name rule: trimmed as JavaScript trims, blank counts as none.
fn trimmed_non_blank(s: Option<&JsString>) -> Option<JsString> {
    s.map(JsString::js_trim).filter(|t| !t.is_empty())
}

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

/// Why a line or JSON text is not a valid entry, in pi's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryProblem {
    /// Not JSON at all.
    NotJson,
    /// JSON, but not an object.
    NotObject,
    /// `type` is missing or not a string.
    MissingType,
    /// `id` is missing, empty or not a string.
    MissingId,
    /// `parentId` is missing or neither string nor null.
    InvalidParentId,
    /// `timestamp` is missing, empty or not a string.
    MissingTimestamp,
    /// A `leaf` whose `targetId` is neither string nor null.
    InvalidTargetId,
}

impl EntryProblem {
    /// pi's wording, as it follows `line <n>` in its messages.
    pub fn reason(&self) -> &'static str {
        match self {
            EntryProblem::NotJson => "is not valid JSON",
            EntryProblem::NotObject => "is not a valid session entry",
            EntryProblem::MissingType => "is missing entry type",
            EntryProblem::MissingId => "is missing entry id",
            EntryProblem::InvalidParentId => "has invalid parentId",
            EntryProblem::MissingTimestamp => "is missing timestamp",
            EntryProblem::InvalidTargetId => "has invalid targetId",
        }
    }
}

/// A member that may be absent; unlike `Option`, `null` is kept as present.
#[derive(Debug, Default)]
enum Field<'a> {
    #[default]
    Absent,
    Present(&'a str),
}

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(d).map(|r| Field::Present(r.get()))
    }
}

impl<'a> Field<'a> {
    fn raw(&self) -> Option<&'a str> {
        match self {
            Field::Absent => None,
            Field::Present(r) => Some(r),
        }
    }
    fn is_null_or_absent(&self) -> bool {
        matches!(self.raw(), None | Some("null"))
    }
    fn as_string(&self) -> Option<String> {
        let raw = self.raw()?;
        if !raw.starts_with('"') {
            return None;
        }
        // Ids, types and timestamps rarely hold escapes: then the text between
        // the quotes is the string.
        if raw.len() >= 2 && raw.ends_with('"') && !raw[1..raw.len() - 1].contains(['\\', '"']) {
            return Some(raw[1..raw.len() - 1].to_owned());
        }
        match json::parse_value_lossy(raw) {
            Ok(Value::String(s)) => Some(s),
            _ => None,
        }
    }
    fn as_js_string(&self) -> Option<JsString> {
        JsString::from_json_literal(self.raw()?)
    }
    fn is_string(&self) -> bool {
        self.raw().is_some_and(|r| r.starts_with('"'))
    }
    /// JavaScript truthiness of the value.
    fn is_truthy(&self) -> bool {
        match self.raw() {
            None | Some("null" | "false" | "\"\"") => false,
            Some(r) if r.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
                r.parse::<f64>().is_ok_and(|x| x != 0.0 && !x.is_nan())
            }
            Some(_) => true,
        }
    }
}

/// The members the rules read; everything else is skipped without being parsed.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Probe<'a> {
    #[serde(rename = "type", borrow)]
    entry_type: Field<'a>,
    #[serde(borrow)]
    id: Field<'a>,
    #[serde(rename = "parentId", borrow)]
    parent_id: Field<'a>,
    #[serde(borrow)]
    timestamp: Field<'a>,
    #[serde(rename = "targetId", borrow)]
    target_id: Field<'a>,
    #[serde(borrow)]
    label: Field<'a>,
    #[serde(borrow)]
    name: Field<'a>,
    #[serde(rename = "firstKeptEntryId", borrow)]
    first_kept_entry_id: Field<'a>,
    #[serde(rename = "retainedTail", borrow)]
    retained_tail: Field<'a>,
    #[serde(borrow)]
    message: Field<'a>,
    #[serde(borrow)]
    usage: Field<'a>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct MessageProbe<'a> {
    #[serde(borrow)]
    role: Field<'a>,
    #[serde(borrow)]
    usage: Field<'a>,
}

fn probe_object<'a, T: Deserialize<'a> + Default>(
    text: &'a str,
) -> Result<Option<T>, EntryProblem> {
    match serde_json::from_str::<T>(text) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.is_data() => {
            // Either not an object, or an object with a duplicate member (which JSON
            // allows, last wins): tell the two apart with a full parse.
            match json::parse_value_lossy(text) {
                Ok(Value::Object(_)) => Ok(None),
                Ok(_) => Err(EntryProblem::NotObject),
                Err(_) => Err(EntryProblem::NotJson),
            }
        }
        Err(_) => match json::parse_value_lossy(text) {
            Ok(Value::Object(_)) => Ok(None),
            Ok(_) => Err(EntryProblem::NotObject),
            Err(_) => Err(EntryProblem::NotJson),
        },
    }
}

/// Reads an object whose fast probe failed (duplicate keys, lone surrogates):
/// duplicates are resolved last-wins, as `JSON.parse` does, then probed again.
fn parse_facts(text: &str) -> Result<EntryFacts, EntryProblem> {
    if !text.trim_start().starts_with('{') {
        // An array is an object to JavaScript's `typeof`, so pi reports its missing type.
        return match json::parse_value_lossy(text) {
            Ok(Value::Array(_)) => Err(EntryProblem::MissingType),
            Ok(_) => Err(EntryProblem::NotObject),
            Err(_) => Err(EntryProblem::NotJson),
        };
    }
    if let Some(probe) = probe_object::<Probe>(text)? {
        let mut facts = facts_from_probe(&probe, None)?;
        facts.message_span = probe.message.raw().and_then(|raw| {
            // The probe borrows from `text`: the member's offset in it.
            let start = (raw.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
            let span = start..start + raw.len();
            (text.get(span.clone()) == Some(raw)).then_some(span)
        });
        return Ok(facts);
    }
    let obj = json::OrderedObject::parse(text).map_err(|_| EntryProblem::NotJson)?;
    let mut dedup = json::OrderedObject::default();
    for (k, v) in obj.members {
        dedup.set(&k, v);
    }
    let text = dedup.to_json();
    let sanitized = json::replace_lone_surrogates(&text).unwrap_or(text);
    let probe: Probe = serde_json::from_str(&sanitized).map_err(|_| EntryProblem::NotObject)?;
    let mut facts = facts_from_probe(&probe, None)?;
    // The sanitised text lost lone surrogates; labels and names keep them.
    let exact = |key| {
        dedup
            .get(key)
            .and_then(|r| JsString::from_json_literal(r.get()))
    };
    match facts.entry_type {
        EntryType::Label => facts.label = exact("label"),
        EntryType::SessionInfo => facts.name = exact("name"),
        _ => {}
    }
    Ok(facts)
}

/// The members [`Probe`] reads, in its field order.
const PROBE_KEYS: [&str; 11] = [
    "type",
    "id",
    "parentId",
    "timestamp",
    "targetId",
    "label",
    "name",
    "firstKeptEntryId",
    "retainedTail",
    "message",
    "usage",
];

/// The facts of text a store checked when it was appended, read by the fast
/// structural scan ([`json::checked_object_members`]); `None` where that scan
/// defers to the full parser, and where the text breaks a rule (only
/// [`parse_facts`] says which).
fn checked_facts(text: &str) -> Option<EntryFacts> {
    let (found, message) =
        json::checked_members_and_nested(text, PROBE_KEYS, "message", ["role", "usage"])?;
    let field = |i: usize| found[i].map_or(Field::Absent, Field::Present);
    let probe = Probe {
        entry_type: field(0),
        id: field(1),
        parent_id: field(2),
        timestamp: field(3),
        target_id: field(4),
        label: field(5),
        name: field(6),
        first_kept_entry_id: field(7),
        retained_tail: field(8),
        message: field(9),
        usage: field(10),
    };
    let message = message.map(|[role, usage]| MessageProbe {
        role: role.map_or(Field::Absent, Field::Present),
        usage: usage.map_or(Field::Absent, Field::Present),
    });
    let mut facts = facts_from_probe(&probe, Some(message)).ok()?;
    facts.message_span = found[9].map(|raw| {
        let start = raw.as_ptr() as usize - text.as_ptr() as usize;
        start..start + raw.len()
    });
    Some(facts)
}

/// The facts a probe's members say. `checked` is given for text a store
/// checked: then usage is read by the fast scan, and it holds the message's
/// members when that scan found them.
fn facts_from_probe(
    p: &Probe,
    checked: Option<Option<MessageProbe>>,
) -> Result<EntryFacts, EntryProblem> {
    let is_checked = checked.is_some();
    let usage = |raw: Option<&str>| {
        is_checked
            .then(|| checked_usage_from(raw))
            .flatten()
            .unwrap_or_else(|| usage_from(raw))
    };
    let entry_type = p
        .entry_type
        .as_string()
        .filter(|_| p.entry_type.is_string())
        .ok_or(EntryProblem::MissingType)?;
    let id =
        p.id.as_string()
            .filter(|s| !s.is_empty())
            .ok_or(EntryProblem::MissingId)?;
    let parent_id = match p.parent_id.raw() {
        Some("null") => None,
        Some(_) if p.parent_id.is_string() => p.parent_id.as_string(),
        _ => return Err(EntryProblem::InvalidParentId),
    };
    let timestamp = p
        .timestamp
        .as_string()
        .filter(|s| !s.is_empty())
        .ok_or(EntryProblem::MissingTimestamp)?;
    let entry_type = EntryType::from_name(&entry_type);
    if entry_type == EntryType::Leaf
        && !p.target_id.is_string()
        && p.target_id.raw() != Some("null")
    {
        return Err(EntryProblem::InvalidTargetId);
    }
    let mut facts = EntryFacts::common(entry_type, id, parent_id, timestamp);
    match facts.entry_type {
        EntryType::Leaf | EntryType::Label => facts.target_id = p.target_id.as_string(),
        _ => {}
    }
    match facts.entry_type {
        EntryType::Label => facts.label = p.label.as_js_string(),
        EntryType::SessionInfo => facts.name = p.name.as_js_string(),
        EntryType::Compaction => {
            facts.first_kept_entry_id = p.first_kept_entry_id.as_string();
            facts.has_retained_tail = p.retained_tail.is_truthy();
            facts.usage = usage(p.usage.raw());
        }
        EntryType::BranchSummary => facts.usage = usage(p.usage.raw()),
        EntryType::Message => {
            facts.message_missing = p.message.is_null_or_absent();
            if let Some(raw) = p.message.raw() {
                if raw.starts_with('{') {
                    let fast = checked.flatten();
                    if let Some(m) =
                        fast.or_else(|| probe_object::<MessageProbe>(raw).ok().flatten())
                    {
                        facts.role = m.role.as_string();
                        if facts.role.as_deref() == Some("assistant") {
                            facts.usage = usage(m.usage.raw());
                        }
                    } else if let Ok(Value::Object(m)) = json::parse_value_lossy(raw) {
                        facts.role = m.get("role").and_then(Value::as_str).map(str::to_owned);
                        if facts.role.as_deref() == Some("assistant") {
                            facts.usage = m.get("usage").and_then(usage_from_value);
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(facts)
}

/// The usage a checked entry's `usage` member counts, read by the fast scan;
/// `None` where the scan defers to [`usage_from`].
fn checked_usage_from(raw: Option<&str>) -> Option<Option<Usage>> {
    let Some(raw) = raw else {
        return Some(None);
    };
    if !raw.starts_with('{') {
        return Some(None);
    }
    let [input, output, cache_read, cache_write, cost] =
        json::checked_object_members(raw, ["input", "output", "cacheRead", "cacheWrite", "cost"])?;
    // serde refuses a number out of f64's range anywhere in the object (and
    // then nothing counts): such text goes to the full parser.
    if may_overflow_f64(raw) {
        return None;
    }
    let num = |r: Option<&str>| r.and_then(json::checked_number);
    let cost_total = match cost {
        Some(c) if c.starts_with('{') => {
            let [total] = json::checked_object_members(c, ["total"])?;
            num(total)
        }
        _ => None,
    };
    Some((|| {
        Some(Usage {
            input: num(input)?,
            output: num(output)?,
            cache_read: num(cache_read)?,
            cache_write: num(cache_write)?,
            cost_total: cost_total?,
        })
    })())
}

/// Whether `raw` may hold a number too large for an `f64`: an exponent, or
/// 300 digits in a row.
fn may_overflow_f64(raw: &str) -> bool {
    let mut run = 0;
    let mut prev = b' ';
    for &c in raw.as_bytes() {
        if (c | 0x20) == b'e' && (prev.is_ascii_digit() || prev == b'.') {
            return true;
        }
        run = if c.is_ascii_digit() { run + 1 } else { 0 };
        if run >= 300 {
            return true;
        }
        prev = c;
    }
    false
}

fn usage_from(raw: Option<&str>) -> Option<Usage> {
    let raw = raw?;
    if !raw.starts_with('{') {
        return None;
    }
    usage_from_value(&json::parse_value_lossy(raw).ok()?)
}

fn usage_from_value(v: &Value) -> Option<Usage> {
    let num = |key: &str| v.get(key).and_then(Value::as_f64);
    Some(Usage {
        input: num("input")?,
        output: num("output")?,
        cache_read: num("cacheRead")?,
        cache_write: num("cacheWrite")?,
        cost_total: v.get("cost")?.get("total")?.as_f64()?,
    })
}

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

/// The current time as JavaScript's `toISOString` writes it.
pub fn now_timestamp() -> String {
    iso_timestamp(chrono::Utc::now().timestamp_millis())
}

/// Unix milliseconds as JavaScript's `toISOString` writes them (years 0 to
/// 9999; a time outside chrono's range is written as the epoch).
pub fn iso_timestamp(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// `new Date(s).getTime()` for ECMAScript's date-time string format
/// (`YYYY`, `YYYY-MM`, `YYYY-MM-DD`, each optionally with `THH:mm`, `:ss`,
/// `.fraction` and `Z` or an offset; `24:00` is the next midnight; days up to
/// 31 roll over into the next month as V8 does). `None` where JavaScript gives
/// `NaN`. Forms without an offset are read as UTC (JavaScript would use the
/// local time zone for date-times), and V8's legacy formats (`Mar 1 2023`)
/// are not recognised.
pub fn timestamp_millis(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let mut pos = 0;
    let num = |pos: &mut usize, digits: usize| -> Option<i64> {
        let part = s.get(*pos..*pos + digits)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *pos += digits;
        part.parse().ok()
    };
    let year = match b.first()? {
        b'+' | b'-' => {
            pos = 1;
            let y = num(&mut pos, 6)?;
            if b[0] == b'-' {
                if y == 0 {
                    return None;
                }
                -y
            } else {
                y
            }
        }
        _ => num(&mut pos, 4)?,
    };
    let (mut month, mut day) = (1, 1);
    if b.get(pos) == Some(&b'-') {
        pos += 1;
        month = num(&mut pos, 2)?;
        if b.get(pos) == Some(&b'-') {
            pos += 1;
            day = num(&mut pos, 2)?;
        }
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let (mut hour, mut minute, mut second, mut millis) = (0, 0, 0, 0);
    let mut offset_minutes = 0;
    if matches!(b.get(pos), Some(b'T' | b't' | b' ')) {
        pos += 1;
        hour = num(&mut pos, 2)?;
        if b.get(pos) != Some(&b':') {
            return None;
        }
        pos += 1;
        minute = num(&mut pos, 2)?;
        if b.get(pos) == Some(&b':') {
            pos += 1;
            second = num(&mut pos, 2)?;
            if b.get(pos) == Some(&b'.') {
                pos += 1;
                let start = pos;
                while b.get(pos).is_some_and(u8::is_ascii_digit) {
                    pos += 1;
                }
                if pos == start {
                    return None;
                }
                let frac = &s[start..pos.min(start + 3)];
                millis =
                    frac.parse::<i64>().ok()? * 10_i64.pow(3 - u32::try_from(frac.len()).ok()?);
            }
        }
        if minute > 59
            || second > 59
            || hour > 24
            || (hour == 24 && (minute, second, millis) != (0, 0, 0))
        {
            return None;
        }
        match b.get(pos) {
            Some(b'Z' | b'z') => pos += 1,
            Some(&sign @ (b'+' | b'-')) => {
                pos += 1;
                let oh = num(&mut pos, 2)?;
                if b.get(pos) == Some(&b':') {
                    pos += 1;
                }
                let om = num(&mut pos, 2)?;
                if oh > 23 || om > 59 {
                    return None;
                }
                offset_minutes = (oh * 60 + om) * if sign == b'+' { 1 } else { -1 };
            }
            _ => {}
        }
    }
    if pos != b.len() {
        return None;
    }
    let days = days_from_civil(year, month, 1) + day - 1;
    let ms = (((days * 24 + hour) * 60 + minute - offset_minutes) * 60 + second) * 1000 + millis;
    // JavaScript dates end at ±8.64e15 ms.
    (ms.abs() <= 8_640_000_000_000_000).then_some(ms)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_follow_pi_checks() {
        let ok = Entry::parse(
            r#"{"type":"leaf","id":"a","parentId":null,"timestamp":"t","targetId":null}"#,
        )
        .expect("valid");
        assert_eq!(ok.facts().leaf_after(), None);
        let bad = |t: &str| Entry::parse(t).err();
        assert_eq!(bad("nope"), Some(EntryProblem::NotJson));
        assert_eq!(bad("[1]"), Some(EntryProblem::MissingType));
        assert_eq!(bad("3"), Some(EntryProblem::NotObject));
        assert_eq!(bad(r#"{"id":"a"}"#), Some(EntryProblem::MissingType));
        assert_eq!(
            bad(r#"{"type":"x","id":""}"#),
            Some(EntryProblem::MissingId)
        );
        assert_eq!(
            bad(r#"{"type":"x","id":"a","timestamp":"t"}"#),
            Some(EntryProblem::InvalidParentId)
        );
        assert_eq!(
            bad(r#"{"type":"x","id":"a","parentId":1,"timestamp":"t"}"#),
            Some(EntryProblem::InvalidParentId)
        );
        assert_eq!(
            bad(r#"{"type":"x","id":"a","parentId":null}"#),
            Some(EntryProblem::MissingTimestamp)
        );
        assert_eq!(
            bad(r#"{"type":"leaf","id":"a","parentId":null,"timestamp":"t","targetId":3}"#),
            Some(EntryProblem::InvalidTargetId)
        );
    }

    #[test]
    fn duplicate_keys_take_the_last_value_and_keep_text() {
        let text = r#"{"type":"label","id":"a","id":"b","parentId":null,"timestamp":"t","targetId":"x","label":" hi "}"#;
        let e = Entry::parse(text).expect("valid");
        assert_eq!(e.id(), "b");
        assert_eq!(e.json(), text);
        assert_eq!(
            e.facts().label_update(),
            Some(("x", Some(JsString::new("hi"))))
        );
    }

    #[test]
    fn assistant_usage_counts_only_when_complete() {
        let e = Entry::parse(r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"assistant","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"cost":{"total":0.5}}}}"#).expect("valid");
        assert_eq!(e.facts().usage.map(|u| u.cache_write), Some(4.0));
        let e = Entry::parse(r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"assistant","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"cost":{}}}}"#).expect("valid");
        assert_eq!(e.facts().usage, None);
    }

    #[test]
    fn lone_surrogates_survive_exactly() {
        let text = r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"\ud83d"}}"#;
        let e = Entry::parse(text).expect("valid");
        assert_eq!(e.json(), text);
        assert!(e.facts().is_user_message());
    }

    #[test]
    fn timestamps_parse_like_javascript_dates() {
        assert_eq!(timestamp_millis("1970-01-01T00:00:01.500Z"), Some(1500));
        assert_eq!(timestamp_millis("garbage"), None);
        // Cases pi 0.83.0 (V8) answers, from the differential harness.
        assert_eq!(timestamp_millis("2023"), Some(1_672_531_200_000));
        assert_eq!(timestamp_millis("2023-03"), Some(1_677_628_800_000));
        assert_eq!(
            timestamp_millis("2023-03-01T10:00+01:00"),
            Some(1_677_661_200_000)
        );
        assert_eq!(
            timestamp_millis("2023-03-01T24:00:00.000Z"),
            Some(1_677_715_200_000)
        );
        assert_eq!(
            timestamp_millis("2023-02-30T00:00:00.000Z"),
            Some(1_677_715_200_000)
        );
        assert_eq!(
            timestamp_millis("2023-03-01T10:00:00.000+0530"),
            Some(1_677_645_000_000)
        );
        assert_eq!(timestamp_millis("2023-03-01T23:59:60.000Z"), None);
        assert_eq!(timestamp_millis(" 2023-03-01T10:00:00.000Z"), None);
    }

    /// The fast scan of checked text gives exactly the full parser's facts,
    /// wherever it answers at all.
    fn assert_checked_facts_agree(text: &str) -> bool {
        let fast = checked_facts(text);
        if let (Some(fast), Ok(full)) = (&fast, parse_facts(text)) {
            assert_eq!(fast, &full, "{text}");
        }
        fast.is_some()
    }

    #[test]
    fn checked_facts_agree_with_the_parser_on_real_sessions() {
        use crate::storage::SessionStorage;
        let (mut lines, mut fast) = (0, 0);
        for file in crate::pi_fixture_files() {
            // Entries as a store keeps them (older pi formats upgraded).
            let storage = crate::backend::jsonl::JsonlStorage::open(
                file,
                crate::storage::Durability::Relaxed,
            )
            .expect("a pi session");
            for entry in storage.entries(0, None).expect("entries") {
                lines += 1;
                fast += usize::from(assert_checked_facts_agree(entry.json()));
            }
        }
        assert!(lines > 100, "{lines} lines");
        // The fast path is the one taken (only odd text defers).
        assert!(fast * 100 >= lines * 95, "{fast} of {lines} fast");
    }

    #[test]
    fn checked_facts_defer_where_the_parser_must_decide() {
        for text in [
            // A key spelled with an escape.
            r#"{"typ\u0065":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user"}}"#,
            // A wanted key twice (last wins, through the full parser).
            r#"{"type":"message","id":"a","id":"b","parentId":null,"timestamp":"t","message":{"role":"user"}}"#,
            // A lone surrogate.
            r#"{"type":"label","id":"a","parentId":null,"timestamp":"t","targetId":"x","label":"\ud800"}"#,
        ] {
            assert!(checked_facts(text).is_none(), "{text}");
            // The entry still reads: through the full parser.
            let full = parse_facts(text).expect("valid");
            assert_eq!(Entry::from_checked_text(text.to_owned()).facts(), &full);
        }
        // A message whose role is given twice: the message's members come
        // from the full parser, the rest from the fast scan.
        let text = r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","role":"assistant","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"cost":{"total":0.5}}}}"#;
        assert!(assert_checked_facts_agree(text));
        assert_eq!(
            checked_facts(text).and_then(|f| f.role),
            Some("assistant".into())
        );
    }

    mod generated {
        use super::*;
        use proptest::prelude::*;

        /// JSON string bodies with the characters a scan can trip on.
        fn string_body() -> impl Strategy<Value = String> {
            proptest::collection::vec(
                prop_oneof![
                    Just("a".to_owned()),
                    Just("word ".to_owned()),
                    Just("\\\"".to_owned()),
                    Just("\\\\".to_owned()),
                    Just("\\n".to_owned()),
                    Just("\\u0041".to_owned()),
                    Just("\\ud83d\\ude00".to_owned()),
                    Just("\\ud800".to_owned()),
                    Just("{[}]".to_owned()),
                    Just(",:".to_owned()),
                    Just("é😀".to_owned()),
                ],
                0..6,
            )
            .prop_map(|parts| parts.concat())
        }

        fn ws() -> impl Strategy<Value = &'static str> {
            prop_oneof![4 => Just(""), 1 => Just(" "), 1 => Just("\n\t ")]
        }

        fn scalar() -> impl Strategy<Value = String> {
            prop_oneof![
                string_body().prop_map(|s| format!("\"{s}\"")),
                Just("null".to_owned()),
                Just("true".to_owned()),
                Just("0".to_owned()),
                Just("-0".to_owned()),
                Just("0.30000000000000004".to_owned()),
                Just("12345678901234567".to_owned()),
                Just("1e400".to_owned()),
                Just("-2.5E-3".to_owned()),
                Just("18446744073709551616".to_owned()),
            ]
        }

        fn value() -> impl Strategy<Value = String> {
            scalar().prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec((ws(), inner.clone()), 0..4).prop_map(|items| {
                        let items: Vec<String> = items
                            .into_iter()
                            .map(|(w, v)| format!("{w}{v}{w}"))
                            .collect();
                        format!("[{}]", items.join(","))
                    }),
                    proptest::collection::vec((key(), ws(), inner), 0..4).prop_map(|members| {
                        let m: Vec<String> = members
                            .into_iter()
                            .map(|(k, w, v)| format!("{w}\"{k}\"{w}:{w}{v}"))
                            .collect();
                        format!("{{{}}}", m.join(","))
                    }),
                ]
            })
        }

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("type".to_owned()),
                Just("role".to_owned()),
                Just("usage".to_owned()),
                Just("total".to_owned()),
                Just("input".to_owned()),
                Just("content".to_owned()),
                Just("typ\\u0065".to_owned()),
                string_body(),
            ]
        }

        fn usage() -> impl Strategy<Value = String> {
            (scalar(), scalar(), value()).prop_map(|(a, b, extra)| {
                format!(
                    r#"{{"input":{a},"output":12,"cacheRead":{b},"cacheWrite":0,"extra":{extra},"cost":{{"input":0.1,"total":0.01234567890123456}}}}"#
                )
            })
        }

        fn message() -> impl Strategy<Value = String> {
            (
                prop_oneof![Just("\"user\""), Just("\"assistant\""), Just("3")],
                value(),
                usage(),
                any::<bool>(),
                ws(),
            )
                .prop_map(|(role, content, usage, twice, w)| {
                    let again = if twice { r#","role":"user""# } else { "" };
                    format!(
                        r#"{{{w}"role"{w}:{w}{role},"content":{content},"usage":{usage}{again}}}"#
                    )
                })
        }

        fn entry() -> impl Strategy<Value = String> {
            (
                prop_oneof![
                    Just("message"),
                    Just("compaction"),
                    Just("label"),
                    Just("leaf"),
                    Just("session_info"),
                    Just("branch_summary"),
                    Just("custom"),
                ],
                string_body(),
                message(),
                usage(),
                value(),
                proptest::collection::vec((key(), value()), 0..3),
                ws(),
            )
                .prop_map(|(kind, id, message, usage, other, extra, w)| {
                    let mut members = vec![
                        format!(r#""type":"{kind}""#),
                        format!(r#""id":"x{id}""#),
                        r#""parentId":null"#.to_owned(),
                        r#""timestamp":"2025-01-01T00:00:00.000Z""#.to_owned(),
                        format!(r#""message":{message}"#),
                        format!(r#""usage":{usage}"#),
                        format!(r#""targetId":{other}"#),
                        format!(r#""label":{other}"#),
                        format!(r#""name":{other}"#),
                        format!(r#""firstKeptEntryId":"x{id}""#),
                        format!(r#""retainedTail":{other}"#),
                    ];
                    members.extend(extra.into_iter().map(|(k, v)| format!(r#""{k}":{v}"#)));
                    format!("{w}{{{w}{}{w}}}{w}", members.join(&format!("{w},{w}")))
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]
            #[test]
            fn checked_facts_agree_with_the_parser(text in entry()) {
                assert_checked_facts_agree(&text);
            }

            #[test]
            fn checked_members_agree_with_the_parser(text in value()) {
                let keys = ["type", "role", "usage", "total", "content"];
                if let (Some(fast), Ok(full)) = (
                    json::checked_object_members(&text, keys),
                    json::object_members(&text, keys),
                ) {
                    prop_assert_eq!(fast, full.map(|r| r.map(RawValue::get)));
                }
            }
        }
    }
}
