//! The facts of an entry: its type, its usage, and the few fields the
//! contract's rules read.

use crate::json::JsString;

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
    pub(super) fn unreadable() -> Self {
        EntryFacts::common(
            EntryType::Other("unreadable".to_owned()),
            String::new(),
            None,
            String::new(),
        )
    }

    /// The facts every entry has; the type-specific ones empty.
    pub(super) fn common(
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
