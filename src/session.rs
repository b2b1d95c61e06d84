//! The session layer (spec §8): typed appends, leaf moves with branch
//! summaries, branches and context, over any [`SessionStorage`].

use crate::context::{
    build_context, context_entries, ContextMessage, ContextOptions, SessionContext, StreamedContext,
};
use crate::entry::{now_timestamp, Entry};
use crate::error::{Error, Result};
use crate::json::{JsString, JsonText, ObjectWriter};
use crate::storage::SessionStorage;

/// The fields of a compaction entry besides those every entry has.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// `summary`.
    pub summary: JsonText,
    /// `firstKeptEntryId` (usually a string id).
    pub first_kept_entry_id: Option<JsonText>,
    /// `tokensBefore`.
    pub tokens_before: JsonText,
    /// `details`.
    pub details: Option<JsonText>,
    /// `fromHook`.
    pub from_hook: Option<JsonText>,
    /// `usage`.
    pub usage: Option<JsonText>,
    /// `retainedTail`: messages kept verbatim after the summary.
    pub retained_tail: Option<JsonText>,
}

/// A branch summary written by [`Session::move_to`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BranchSummary {
    /// `summary` (an empty one is still written, and skipped by context building).
    pub summary: Option<JsonText>,
    /// `details`.
    pub details: Option<JsonText>,
    /// `usage`.
    pub usage: Option<JsonText>,
    /// `fromHook`.
    pub from_hook: Option<JsonText>,
}

/// A session: a storage plus the application's context hooks.
#[derive(Debug)]
pub struct Session<S> {
    storage: S,
    options: ContextOptions,
}

impl<S: SessionStorage> Session<S> {
    /// Wraps a storage.
    pub fn new(storage: S) -> Self {
        Session {
            storage,
            options: ContextOptions::default(),
        }
    }

    /// Wraps a storage with context hooks (entry transforms, custom projectors).
    pub fn with_options(storage: S, options: ContextOptions) -> Self {
        Session { storage, options }
    }

    /// The storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The storage, for direct appends.
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// Gives the storage back.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// Builds an entry with a fresh id, the current leaf as parent and the time
    /// now, then the type's own fields, and appends it.
    fn append_built(
        &mut self,
        entry_type: &str,
        fields: impl FnOnce(&mut ObjectWriter),
    ) -> Result<String> {
        let id = self.storage.create_entry_id()?;
        let parent = self.storage.leaf_id()?;
        let entry = build_entry(entry_type, &id, parent.as_deref(), fields)?;
        self.storage.append_entry(entry)?;
        Ok(id)
    }

    /// Appends a `message` entry. The message must be a JSON object
    /// (`invalid_entry`, nothing written): pi would store `null` or a string
    /// too, and every later statistics or context read of the session would
    /// then fail. (An object without a `role` is pi's to judge: stored.)
    pub fn append_message(&mut self, message: &JsonText) -> Result<String> {
        // `JsonText` is compact JSON: an object is exactly what starts with `{`.
        if !message.as_str().starts_with('{') {
            let text = message.as_str();
            let shown: String = text.chars().take(60).collect();
            let more = if shown.len() < text.len() { "…" } else { "" };
            return Err(Error::InvalidEntry(format!(
                "appendMessage: the message must be a JSON object, got {shown}{more}"
            )));
        }
        self.append_built("message", |w| {
            w.raw("message", message.as_str());
        })
    }

    /// Appends a `thinking_level_change` entry.
    pub fn append_thinking_level_change(&mut self, thinking_level: &JsString) -> Result<String> {
        self.append_built("thinking_level_change", |w| {
            w.raw("thinkingLevel", thinking_level.json());
        })
    }

    /// Appends a `model_change` entry.
    pub fn append_model_change(
        &mut self,
        provider: &JsString,
        model_id: &JsString,
    ) -> Result<String> {
        self.append_built("model_change", |w| {
            w.raw("provider", provider.json())
                .raw("modelId", model_id.json());
        })
    }

    /// Appends an `active_tools_change` entry.
    pub fn append_active_tools_change(&mut self, names: &[JsString]) -> Result<String> {
        let list = format!(
            "[{}]",
            names
                .iter()
                .map(JsString::json)
                .collect::<Vec<_>>()
                .join(",")
        );
        self.append_built("active_tools_change", |w| {
            w.raw("activeToolNames", &list);
        })
    }

    /// Appends a `compaction` entry.
    pub fn append_compaction(&mut self, c: &Compaction) -> Result<String> {
        let text = |j: &Option<JsonText>| j.as_ref().map(|t| t.as_str().to_owned());
        self.append_built("compaction", |w| {
            w.raw("summary", c.summary.as_str())
                .opt_raw("firstKeptEntryId", text(&c.first_kept_entry_id).as_deref())
                .raw("tokensBefore", c.tokens_before.as_str())
                .opt_raw("retainedTail", text(&c.retained_tail).as_deref())
                .opt_raw("details", text(&c.details).as_deref())
                .opt_raw("usage", text(&c.usage).as_deref())
                .opt_raw("fromHook", text(&c.from_hook).as_deref());
        })
    }

    /// Appends a `custom` entry (application data the model does not see by default).
    pub fn append_custom_entry(
        &mut self,
        custom_type: &JsString,
        data: Option<&JsonText>,
    ) -> Result<String> {
        self.append_built("custom", |w| {
            w.raw("customType", custom_type.json())
                .opt_raw("data", data.map(JsonText::as_str));
        })
    }

    /// Appends a `custom_message` entry.
    pub fn append_custom_message_entry(
        &mut self,
        custom_type: &JsString,
        content: &JsonText,
        display: Option<bool>,
        details: Option<&JsonText>,
    ) -> Result<String> {
        self.append_built("custom_message", |w| {
            w.raw("customType", custom_type.json())
                .raw("content", content.as_str());
            if let Some(d) = display {
                w.raw("display", if d { "true" } else { "false" });
            }
            w.opt_raw("details", details.map(JsonText::as_str));
        })
    }

    /// Appends a `label` entry; the target must exist (`not_found`). `None` clears.
    pub fn append_label(&mut self, target_id: &str, label: Option<&str>) -> Result<String> {
        self.append_js_label(target_id, label.map(JsString::new).as_ref())
    }

    /// [`Session::append_label`] with any JavaScript string (lone surrogates kept).
    pub fn append_js_label(&mut self, target_id: &str, label: Option<&JsString>) -> Result<String> {
        if !self.storage.contains_entry(target_id)? {
            return Err(Error::EntryNotFound(target_id.to_owned()));
        }
        self.append_built("label", |w| {
            w.str("targetId", target_id);
            if let Some(l) = label {
                w.raw("label", l.json());
            }
        })
    }

    /// Appends a `session_info` entry; runs of CR/LF become one space, then trimmed.
    pub fn append_session_name(&mut self, name: &str) -> Result<String> {
        self.append_js_session_name(&JsString::new(name))
    }

    /// [`Session::append_session_name`] with any JavaScript string (lone surrogates kept).
    pub fn append_js_session_name(&mut self, name: &JsString) -> Result<String> {
        let sanitized = sanitize_js_session_name(name);
        self.append_built("session_info", |w| {
            w.raw("name", sanitized.json());
        })
    }

    /// Moves the leaf to `entry_id` (which must exist; `None` = before the root);
    /// with a summary, then appends a `branch_summary` child of the target, which
    /// becomes the leaf. Returns the summary's id.
    pub fn move_to(
        &mut self,
        entry_id: Option<&str>,
        summary: Option<&BranchSummary>,
    ) -> Result<Option<String>> {
        let leaf = self.storage.leaf_entry(entry_id)?;
        let Some(s) = summary else {
            self.storage.append_entry(leaf)?;
            return Ok(None);
        };
        // The move and its summary are one append: all of it or nothing.
        let mut id = self.storage.create_entry_id()?;
        while id == leaf.id() {
            id = self.storage.create_entry_id()?;
        }
        let text = |j: &Option<JsonText>| j.as_ref().map(|t| t.as_str().to_owned());
        let summary = build_entry("branch_summary", &id, entry_id, |w| {
            w.str("fromId", entry_id.unwrap_or("root"))
                .opt_raw("summary", text(&s.summary).as_deref())
                .opt_raw("details", text(&s.details).as_deref())
                .opt_raw("usage", text(&s.usage).as_deref())
                .opt_raw("fromHook", text(&s.from_hook).as_deref());
        })?;
        self.storage.append_entries(&[leaf, summary])?;
        Ok(Some(id))
    }

    /// The active path from `from` (or the current leaf), root-side first.
    pub fn branch(&self, from: Option<&str>) -> Result<Vec<Entry>> {
        match from {
            Some(id) => self.storage.path_to_root_or_compaction(Some(id)),
            None => Ok(self.storage.active_path()?.1),
        }
    }

    /// [`Session::branch`] handed to `sink` one entry at a time, root-side
    /// first ([`SessionStorage::visit_path`]): bounded memory whatever the
    /// path's length.
    pub fn visit_branch(
        &self,
        from: Option<&str>,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        match from {
            Some(id) => self.storage.visit_path(Some(id), sink),
            None => self.storage.visit_active_path(sink).map(drop),
        }
    }

    /// [`Session::build_context`] to be written as it is made: without
    /// transforms or projectors (the rpc's and the CLI's sessions), the path
    /// is read in passes and never held ([`StreamedContext`]); with them,
    /// the context is built whole. Errors of the state come from here,
    /// before any message.
    pub fn context_stream(&self, from: Option<&str>) -> Result<ContextStream<'_, S>> {
        if !self.options.entry_transforms.is_empty() || !self.options.entry_projectors.is_empty() {
            return Ok(ContextStream::Whole(self.build_context(from)?));
        }
        // The leaf is read once: every pass reads the same path.
        let start = match from {
            Some(id) => Some(id.to_owned()),
            None => self.storage.leaf_id()?,
        };
        let storage = &self.storage;
        let context = StreamedContext::read(&|sink: &mut dyn FnMut(Entry) -> Result<()>| {
            storage.visit_path(start.as_deref(), sink)
        })?;
        Ok(ContextStream::Streamed {
            storage,
            start,
            context,
        })
    }

    /// The entries the model sees, after the compaction rule and the transforms.
    pub fn context_entries(&self, from: Option<&str>) -> Result<Vec<Entry>> {
        Ok(context_entries(&self.branch(from)?, &self.options))
    }

    /// The model's context for the branch at `from` (or the current leaf).
    pub fn build_context(&self, from: Option<&str>) -> Result<SessionContext> {
        build_context(&self.branch(from)?, &self.options)
    }
}

/// A context to be written as it is made ([`Session::context_stream`]).
#[derive(Debug)]
pub enum ContextStream<'s, S> {
    /// Built whole (the session has transforms or projectors).
    Whole(SessionContext),
    /// Read from the path in passes; the messages are made as they are written.
    Streamed {
        /// The session's storage.
        storage: &'s S,
        /// The entry the path ends at (`None`: an empty session).
        start: Option<String>,
        /// The state and the compaction's place, from the first passes.
        context: StreamedContext,
    },
}

impl<S: SessionStorage> ContextStream<'_, S> {
    /// The thinking level, model and active tools, as stored.
    #[allow(clippy::type_complexity)]
    pub fn state(
        &self,
    ) -> (
        &Option<Box<serde_json::value::RawValue>>,
        &Option<crate::context::ModelRef>,
        &Option<Box<serde_json::value::RawValue>>,
    ) {
        match self {
            ContextStream::Whole(c) => (&c.thinking_level, &c.model, &c.active_tool_names),
            ContextStream::Streamed { context: c, .. } => {
                (&c.thinking_level, &c.model, &c.active_tool_names)
            }
        }
    }

    /// Hands each message to `sink` in order, made as it goes.
    pub fn visit_messages(
        &self,
        sink: &mut dyn FnMut(&ContextMessage) -> Result<()>,
    ) -> Result<()> {
        match self {
            ContextStream::Whole(c) => c.messages.iter().try_for_each(sink),
            ContextStream::Streamed {
                storage,
                start,
                context,
            } => context.visit_messages(
                &|s: &mut dyn FnMut(Entry) -> Result<()>| storage.visit_path(start.as_deref(), s),
                sink,
            ),
        }
    }

    /// Writes the context's JSON ([`SessionContext::to_json_text`]'s text) to
    /// `out`, never holding it whole.
    pub fn write_json(&self, out: &mut dyn std::io::Write) -> Result<()> {
        match self {
            ContextStream::Whole(c) => c
                .write_json(out)
                .map_err(|e| Error::io("writing a context", e)),
            ContextStream::Streamed {
                storage,
                start,
                context,
            } => context.write_json(
                &|s: &mut dyn FnMut(Entry) -> Result<()>| storage.visit_path(start.as_deref(), s),
                out,
            ),
        }
    }
}

/// The session-name rule for writing on any JavaScript string: runs of CR/LF
/// become one space, then trim.
pub fn sanitize_js_session_name(name: &JsString) -> JsString {
    let mut out = Vec::new();
    let mut in_break = false;
    for unit in name.to_utf16() {
        if unit == u16::from(b'\r') || unit == u16::from(b'\n') {
            if !in_break {
                out.push(u16::from(b' '));
            }
            in_break = true;
        } else {
            in_break = false;
            out.push(unit);
        }
    }
    JsString::from_utf16(&out).js_trim()
}

/// The session-name rule for writing: runs of CR/LF become one space, then trim.
pub fn sanitize_session_name(name: &str) -> String {
    sanitize_js_session_name(&JsString::new(name)).to_string_lossy()
}

/// An entry with the common fields (`type`, `id`, `parentId`, a timestamp of
/// now) and the fields `fields` writes, validated.
fn build_entry(
    entry_type: &str,
    id: &str,
    parent: Option<&str>,
    fields: impl FnOnce(&mut ObjectWriter),
) -> Result<Entry> {
    let mut w = ObjectWriter::new();
    w.str("type", entry_type)
        .str("id", id)
        .opt_str_or_null("parentId", parent)
        .str("timestamp", &now_timestamp());
    fields(&mut w);
    Entry::from_json(&w.finish())
}
