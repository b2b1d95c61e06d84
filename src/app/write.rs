//! The writers, building entries as pi 1.6's `SessionManager` does: its key
//! order, members that are `undefined` left out as `JSON.stringify` leaves
//! them out, ids from `generateId`, timestamps from `toISOString()`. Each
//! appends at the in-memory leaf and moves the leaf to the new entry.

use super::context::{current_system_message, type_error};
use super::session::AppSession;
use super::value::JsValue;
use crate::entry::{iso_timestamp, timestamp_millis, Entry, EntryType};
use crate::error::{Error, Result};
use crate::json::JsString;
use crate::storage::SessionStorage;

/// pi's `generateId(byId)`: the first 8 characters of a random (version 4)
/// UUID, retried while `taken` says it is in use, 100 times; then a full UUID.
pub fn new_app_entry_id(mut taken: impl FnMut(&str) -> Result<bool>) -> Result<String> {
    for _ in 0..100 {
        let id = random_uuid();
        if !taken(&id[..8])? {
            return Ok(id[..8].to_owned());
        }
    }
    Ok(random_uuid())
}

/// A random version 4 UUID (`crypto.randomUUID()`), its random bits taken
/// from the random part of two version 7 UUIDs (the crate's only generator).
fn random_uuid() -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&uuid::Uuid::now_v7().as_bytes()[8..]);
    bytes[8..].copy_from_slice(&uuid::Uuid::now_v7().as_bytes()[8..]);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// `appendUsage(kind, provider, model, usage, note)`'s arguments (`None`: undefined).
#[derive(Debug, Clone, Default)]
pub struct UsageArgs {
    /// `kind`.
    pub kind: Option<JsValue>,
    /// `provider`.
    pub provider: Option<JsValue>,
    /// `model`.
    pub model: Option<JsValue>,
    /// `usage`.
    pub usage: Option<JsValue>,
    /// `note` (written only when truthy).
    pub note: Option<JsValue>,
}

/// `appendCompaction(summary, firstKeptEntryId, tokensBefore, details, fromHook, usage)`'s arguments.
#[derive(Debug, Clone, Default)]
pub struct CompactionArgs {
    /// `summary`.
    pub summary: Option<JsValue>,
    /// `firstKeptEntryId` (`null`/undefined: the compaction's own id).
    pub first_kept_entry_id: Option<JsValue>,
    /// `tokensBefore`.
    pub tokens_before: Option<JsValue>,
    /// `details`.
    pub details: Option<JsValue>,
    /// `fromHook`.
    pub from_hook: Option<JsValue>,
    /// `usage`.
    pub usage: Option<JsValue>,
}

/// `branchWithSummary(branchFromId, summary, details, fromHook, usage)`'s
/// arguments after the first.
#[derive(Debug, Clone, Default)]
pub struct BranchSummaryArgs {
    /// `summary`.
    pub summary: Option<JsValue>,
    /// `details`.
    pub details: Option<JsValue>,
    /// `fromHook`.
    pub from_hook: Option<JsValue>,
    /// `usage`.
    pub usage: Option<JsValue>,
}

/// An entry under construction, members in pi's order.
struct Builder(JsValue);

impl Builder {
    fn new() -> Self {
        Builder(JsValue::Object(Vec::new()))
    }
    fn put(mut self, key: &str, v: Option<JsValue>) -> Self {
        if let Some(v) = v {
            self.0.set(key, v);
        }
        self
    }
    fn s(self, key: &str, v: &str) -> Self {
        self.put(key, Some(JsValue::str(v)))
    }
    fn parent(self, leaf: Option<&str>) -> Self {
        self.put("parentId", Some(leaf.map_or(JsValue::Null, JsValue::str)))
    }
}

/// `String(x)` for an error message.
fn shown(v: Option<&JsValue>) -> String {
    JsValue::js_to_string(v).to_string_lossy()
}

impl<S: SessionStorage> AppSession<S> {
    fn fresh_id(&self) -> Result<String> {
        new_app_entry_id(|id| self.storage.contains_entry(id))
    }

    /// Appends a built entry at the leaf and moves the leaf to it.
    fn append_built(&mut self, b: Builder) -> Result<Entry> {
        let entry = Entry::from_json(&b.0.to_json())?;
        self.storage.append_entry(entry.clone())?;
        self.note_appended(&entry)?;
        Ok(entry)
    }

    /// The common head: `type, id, parentId, timestamp`.
    fn head(&self, kind: &str) -> Result<Builder> {
        Ok(Builder::new()
            .s("type", kind)
            .s("id", &self.fresh_id()?)
            .parent(self.leaf.as_deref())
            .s("timestamp", &crate::entry::now_timestamp()))
    }

    /// pi's `appendMessage(message)`: the new id.
    pub fn append_message(&mut self, message: Option<JsValue>) -> Result<String> {
        let b = self.head("message")?.put("message", message);
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `appendThinkingLevelChange(thinkingLevel)`.
    pub fn append_thinking_level_change(&mut self, level: Option<JsValue>) -> Result<String> {
        let b = self
            .head("thinking_level_change")?
            .put("thinkingLevel", level);
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `appendModelChange(provider, modelId)`.
    pub fn append_model_change(
        &mut self,
        provider: Option<JsValue>,
        model_id: Option<JsValue>,
    ) -> Result<String> {
        let b = self
            .head("model_change")?
            .put("provider", provider)
            .put("modelId", model_id);
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `appendUsage(kind, provider, model, usage, note)`: the new entry.
    pub fn append_usage(&mut self, a: UsageArgs) -> Result<Entry> {
        let note = a.note.filter(|n| JsValue::truthy(Some(n)));
        let b = self
            .head("usage")?
            .put("kind", a.kind)
            .put("provider", a.provider)
            .put("model", a.model)
            .put("usage", a.usage)
            .put("note", note);
        self.append_built(b)
    }

    /// pi's `appendCompaction(...)`: keeps the current context's system
    /// message (every system message replayed into one) in `systemMessage`.
    pub fn append_compaction(&mut self, a: CompactionArgs) -> Result<String> {
        let ms = chrono::Utc::now().timestamp_millis();
        let timestamp = iso_timestamp(ms);
        let system = current_system_message(&self.shared_projection()?.context.messages)?;
        let id = self.fresh_id()?;
        let first_kept = match a.first_kept_entry_id {
            Some(v) if !JsValue::nullish(Some(&v)) => v,
            _ => JsValue::str(&id),
        };
        let system = system.map(|mut s| {
            // `{...systemMessage, timestamp: new Date(timestamp).getTime()}`.
            let t = timestamp_millis(&timestamp).unwrap_or(ms);
            s.set("timestamp", JsValue::Number(t as f64));
            s
        });
        let b = Builder::new()
            .s("type", "compaction")
            .s("id", &id)
            .parent(self.leaf.as_deref())
            .s("timestamp", &timestamp)
            .put("summary", a.summary)
            .put("firstKeptEntryId", Some(first_kept))
            .put("tokensBefore", a.tokens_before)
            .put("details", a.details)
            .put("usage", a.usage)
            .put("fromHook", a.from_hook)
            .put("systemMessage", system);
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `appendCustomEntry(customType, data)`.
    pub fn append_custom_entry(
        &mut self,
        custom_type: Option<JsValue>,
        data: Option<JsValue>,
    ) -> Result<String> {
        let b = Builder::new()
            .s("type", "custom")
            .put("customType", custom_type)
            .put("data", data)
            .s("id", &self.fresh_id()?)
            .parent(self.leaf.as_deref())
            .s("timestamp", &crate::entry::now_timestamp());
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `appendSessionInfo(name)`: line breaks become one space, then trimmed.
    pub fn append_session_info(&mut self, name: Option<&JsValue>) -> Result<String> {
        let name = match name {
            Some(JsValue::String(s)) => sanitize_name(s),
            None | Some(JsValue::Null) => return Err(type_error(name, "replace")),
            Some(_) => return Err(Error::InvalidEntry("name.replace is not a function".into())),
        };
        let b = self
            .head("session_info")?
            .put("name", Some(JsValue::String(name)));
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `appendCustomMessageEntry(customType, content, display, details)`.
    pub fn append_custom_message_entry(
        &mut self,
        custom_type: Option<JsValue>,
        content: Option<JsValue>,
        display: Option<JsValue>,
        details: Option<JsValue>,
    ) -> Result<String> {
        let b = Builder::new()
            .s("type", "custom_message")
            .put("customType", custom_type)
            .put("content", content)
            .put("display", display)
            .put("details", details)
            .s("id", &self.fresh_id()?)
            .parent(self.leaf.as_deref())
            .s("timestamp", &crate::entry::now_timestamp());
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `appendContextEdit(targetId, replacement)`: replaces (or, with
    /// `null`, drops) the content of an earlier entry on the active branch.
    pub fn append_context_edit(
        &mut self,
        target_id: Option<&JsValue>,
        replacement: Option<&JsValue>,
    ) -> Result<String> {
        let valid = match replacement {
            Some(JsValue::Null) => true,
            Some(r @ JsValue::Object(_)) => {
                matches!(
                    r.get("content"),
                    Some(JsValue::String(_) | JsValue::Array(_))
                )
            }
            _ => false,
        };
        if !valid {
            return Err(Error::InvalidEntry(
                "Context edit replacement must be null or contain string/array content".into(),
            ));
        }
        let not_found = || Error::EntryNotFound(shown(target_id));
        let Some(JsValue::String(target)) = target_id else {
            return Err(not_found());
        };
        let target = target.to_str().ok_or_else(not_found)?;
        let Some(entry) = self.storage.entry(&target)? else {
            return Err(not_found());
        };
        // The path streamed, its ids compared as they come: never held.
        let mut on_branch = false;
        self.visit_branch(None, &mut |e| {
            on_branch |= e.id() == target;
            Ok(())
        })?;
        if !on_branch {
            return Err(Error::InvalidEntry(format!(
                "Entry {target} is not on the active branch"
            )));
        }
        let v = JsValue::parse(entry.json())?;
        let role = match entry.entry_type() {
            EntryType::CustomMessage => Some("custom".to_owned()),
            EntryType::Message => {
                let m = v.get("message");
                if JsValue::nullish(m) {
                    return Err(type_error(m, "role"));
                }
                m.and_then(|m| m.get("role"))
                    .and_then(JsValue::as_js_str)
                    .and_then(JsString::to_str)
                    .filter(|r| r == "user" || r == "assistant" || r == "toolResult")
            }
            _ => None,
        };
        let Some(role) = role else {
            return Err(Error::InvalidEntry(format!(
                "Entry {target} does not contribute editable model content"
            )));
        };
        let replacement = match replacement {
            Some(JsValue::Object(_)) if role == "assistant" || role == "toolResult" => {
                let r = replacement.cloned().unwrap_or(JsValue::Null);
                match r.get("content") {
                    Some(JsValue::String(s)) => {
                        let mut block = JsValue::Object(Vec::new());
                        block.set("type", JsValue::str("text"));
                        block.set("text", JsValue::String(s.clone()));
                        let mut o = JsValue::Object(Vec::new());
                        o.set("content", JsValue::Array(vec![block]));
                        o
                    }
                    _ => r,
                }
            }
            other => other.cloned().unwrap_or(JsValue::Null),
        };
        let b = self
            .head("context_edit")?
            .put("targetId", Some(JsValue::str(&target)))
            .put("replacement", Some(replacement));
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `appendLabelChange(targetId, label)`: sets the label as written
    /// (a falsy one clears it); the target must exist.
    pub fn append_label_change(
        &mut self,
        target_id: Option<&JsValue>,
        label: Option<JsValue>,
    ) -> Result<String> {
        let exists = match target_id {
            Some(JsValue::String(s)) => match s.to_str() {
                Some(id) => self.storage.contains_entry(&id)?,
                None => false,
            },
            _ => false,
        };
        if !exists {
            return Err(Error::EntryNotFound(shown(target_id)));
        }
        let b = self
            .head("label")?
            .put("targetId", target_id.cloned())
            .put("label", label);
        Ok(self.append_built(b)?.id().to_owned())
    }

    /// pi's `branchWithSummary(branchFromId, summary, details, fromHook, usage)`:
    /// moves the leaf to `from` (`None`: a new root) and appends a
    /// `branch_summary` there whose `fromId` is the old leaf (or `"root"`).
    pub fn branch_with_summary(
        &mut self,
        from: Option<&str>,
        a: BranchSummaryArgs,
    ) -> Result<String> {
        if let Some(id) = from {
            if !self.storage.contains_entry(id)? {
                return Err(Error::EntryNotFound(id.to_owned()));
            }
        }
        let from_id = self.leaf.clone().unwrap_or_else(|| "root".to_owned());
        self.leaf = from.map(str::to_owned);
        let b = self
            .head("branch_summary")?
            .s("fromId", &from_id)
            .put("summary", a.summary)
            .put("details", a.details)
            .put("usage", a.usage)
            .put("fromHook", a.from_hook);
        Ok(self.append_built(b)?.id().to_owned())
    }
}

/// `name.replace(/[\r\n]+/g, " ").trim()`.
fn sanitize_name(name: &JsString) -> JsString {
    let mut out: Vec<u16> = Vec::new();
    let mut in_break = false;
    for u in name.to_utf16() {
        if u == 0x0d || u == 0x0a {
            if !in_break {
                out.push(0x20);
            }
            in_break = true;
        } else {
            in_break = false;
            out.push(u);
        }
    }
    JsString::from_utf16(&out).js_trim()
}
