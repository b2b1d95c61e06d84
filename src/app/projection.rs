//! What the app's context reads produce and keep: the context and
//! projection pi 1.6 answers, and the light scan of a path they are built
//! from (below `context` and `session`, which both hold them).

use super::value::JsValue;
use crate::entry::Entry;

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

/// What the light scan of the leaf's path found ([`SessionStorage::visit_path_facts`]):
/// what pi's `getSessionContextSettings` and `buildContextEntries` read of
/// every entry of the path, without its text where the store keeps enough.
#[derive(Debug, Default)]
pub(crate) struct PathScan {
    /// The ids, root first, end to end in one text (`ends`: where each ends).
    pub(super) ids: String,
    pub(super) ends: Vec<usize>,
    /// The newest `compaction`.
    pub(super) last_compaction: Option<usize>,
    /// The newest `thinking_level_change`.
    pub(super) last_thinking: Option<usize>,
    /// Entries that may set the model, root first: `model_change` entries
    /// and messages that may be assistant messages, with the model where
    /// the scan parsed the entry anyway.
    pub(super) model_candidates: Vec<(usize, Option<JsValue>)>,
    /// pi's TypeError (its message) for the first `message` entry without a message.
    pub(super) broken: Option<String>,
    /// Entries parsed (for the bound's test).
    pub(super) parsed: usize,
}

impl PathScan {
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(super) fn id(&self, i: usize) -> &str {
        let from = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.ids[from..self.ends[i]]
    }
}
