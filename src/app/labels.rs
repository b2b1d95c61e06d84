//! Labels as pi 1.6 keeps them: the label as written (no trimming; any
//! truthy value sets, anything else clears) with the label entry's timestamp.

use super::value::JsValue;
use crate::entry::{Entry, EntryType};
use crate::error::Result;
use crate::json::JsString;
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
