//! Labels as pi 1.6 keeps them: the label as written (no trimming; any
//! truthy value sets, anything else clears) with the label entry's timestamp.

use super::value::JsValue;
use super::AppSession;
use crate::entry::{Entry, EntryType};
use crate::error::Result;
use crate::json::JsString;
use crate::storage::SessionStorage;
use std::collections::HashMap;

/// A label and when it was set (pi's `labelsById` / `labelTimestampsById`).
#[derive(Debug, Clone, PartialEq)]
pub struct AppLabel {
    /// The label as written (a string, or whatever truthy value the entry holds).
    pub label: JsValue,
    /// The label entry's timestamp.
    pub timestamp: JsString,
}

/// Labels by target, keyed by the target id's JSON text (pi's `Map` keys are
/// the `targetId` values themselves: the string `"5"` and the number `5`
/// differ, and the JSON text keeps them apart).
#[derive(Debug, Default)]
pub(crate) struct LabelMap(HashMap<String, AppLabel>);

impl LabelMap {
    /// Applies one label entry as pi's `_buildIndex` does.
    pub(crate) fn apply(&mut self, entry: &Entry) -> Result<()> {
        if *entry.entry_type() != EntryType::Label {
            return Ok(());
        }
        let v = JsValue::parse(entry.json())?;
        let target = v
            .get("targetId")
            .map_or_else(|| "undefined".to_owned(), JsValue::to_json);
        match v.get("label") {
            Some(label) if JsValue::truthy(Some(label)) => {
                self.0.insert(
                    target,
                    AppLabel {
                        label: label.clone(),
                        timestamp: JsString::new(entry.timestamp()),
                    },
                );
            }
            _ => {
                self.0.remove(&target);
            }
        }
        Ok(())
    }

    /// The label of the entry whose id is `key` (a JSON text).
    pub(crate) fn get(&self, key: &str) -> Option<&AppLabel> {
        self.0.get(key)
    }
}

impl<S: SessionStorage> AppSession<S> {
    /// Runs `f` on the label map, building it first if this is its first use
    /// (one pass over the label entries).
    pub(crate) fn with_labels<T>(&self, f: impl FnOnce(&LabelMap) -> T) -> Result<T> {
        if self.labels.borrow().is_none() {
            let mut map = LabelMap::default();
            let mut failed = None;
            self.storage.visit_entries_of_type("label", &mut |text| {
                if let Err(e) = map.apply(&Entry::from_checked_text(text)) {
                    failed.get_or_insert(e);
                }
                Ok(())
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            *self.labels.borrow_mut() = Some(map);
        }
        let labels = self.labels.borrow();
        Ok(f(labels.as_ref().expect("built above")))
    }

    /// pi's `getLabel(id)`: the label as written, with its timestamp.
    pub fn label(&self, id: &str) -> Result<Option<AppLabel>> {
        self.label_by_key(JsString::new(id).json())
    }

    /// [`AppSession::label`] for an id given as JSON text (any JSON value, as
    /// pi's `Map` takes any key).
    pub fn label_by_key(&self, key: &str) -> Result<Option<AppLabel>> {
        self.with_labels(|m| m.get(key).cloned())
    }

    /// Keeps a built label map current after `entry` was appended.
    pub(crate) fn note_appended(&mut self, entry: &Entry) -> Result<()> {
        if let Some(map) = self.labels.get_mut().as_mut() {
            map.apply(entry)?;
        }
        if let Some(n) = self.distinct_ids.get_mut().as_mut() {
            *n += 1;
        }
        self.leaf = Some(entry.id().to_owned());
        Ok(())
    }
}
