//! A whole log held in memory with the indexes the contract's reads need —
//! the state pi keeps. The in-memory and JSONL backends both use it.

use crate::entry::Entry;
use crate::error::Result;
use crate::json::JsString;
use crate::rules::{apply_label_change, Replay, SessionStats};
use std::collections::HashMap;

/// An in-memory log: entries in order, the latest entry per id, labels, session
/// name, statistics and the replayed leaf, all maintained on append.
#[derive(Debug, Default, Clone)]
pub struct LogIndex {
    entries: Vec<Entry>,
    by_id: HashMap<String, usize>,
    labels: HashMap<String, JsString>,
    replay: Replay,
}

impl LogIndex {
    /// An index over `entries`, replayed in order.
    pub fn from_entries(entries: impl IntoIterator<Item = Entry>) -> Self {
        let mut index = LogIndex::default();
        for e in entries {
            index.push(e);
        }
        index
    }

    /// Adds one entry at the end of the log.
    pub fn push(&mut self, entry: Entry) {
        if let Some(change) = self.replay.push(&entry) {
            apply_label_change(&mut self.labels, change);
        }
        self.by_id
            .insert(entry.facts().id.clone(), self.entries.len());
        self.entries.push(entry);
    }

    /// The entry answering to `id` (the latest with that id).
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.by_id.get(id).map(|&i| &self.entries[i])
    }

    /// The replayed leaf.
    pub fn leaf(&self) -> Option<&str> {
        self.replay.leaf.as_deref()
    }

    /// All entries in log order.
    pub fn all(&self) -> &[Entry] {
        &self.entries
    }

    /// Entries of one type in log order.
    pub fn of_type(&self, entry_type: &str) -> Vec<Entry> {
        self.entries
            .iter()
            .filter(|e| e.entry_type().as_str() == entry_type)
            .cloned()
            .collect()
    }

    /// The label on `id`.
    pub fn label(&self, id: &str) -> Option<JsString> {
        self.labels.get(id).cloned()
    }

    /// The session name.
    pub fn name(&self) -> Option<JsString> {
        self.replay.name.clone()
    }

    /// The statistics.
    pub fn stats(&self) -> Result<SessionStats> {
        self.replay.stats.result()
    }

    /// `[after, after + limit)` by position.
    pub fn slice(&self, after: usize, limit: Option<usize>) -> Vec<Entry> {
        self.window(after, limit).to_vec()
    }

    /// The entries [`LogIndex::slice`] copies, borrowed.
    pub fn window(&self, after: usize, limit: Option<usize>) -> &[Entry] {
        let start = after.min(self.entries.len());
        let end = limit.map_or(self.entries.len(), |l| {
            start.saturating_add(l).min(self.entries.len())
        });
        &self.entries[start..end]
    }
}

/// The `SessionStorage` reads of a backend that keeps its whole log in a
/// [`LogIndex`] field named `log` (the in-memory and JSONL backends).
macro_rules! log_index_reads {
    () => {
        fn stored_leaf_id(&self) -> $crate::error::Result<Option<String>> {
            Ok(self.log.leaf().map(str::to_owned))
        }
        fn entry(&self, id: &str) -> $crate::error::Result<Option<$crate::entry::Entry>> {
            Ok(self.log.get(id).cloned())
        }
        fn find_entries(
            &self,
            entry_type: &str,
        ) -> $crate::error::Result<Vec<$crate::entry::Entry>> {
            Ok(self.log.of_type(entry_type))
        }
        fn label(&self, id: &str) -> $crate::error::Result<Option<$crate::json::JsString>> {
            Ok(self.log.label(id))
        }
        fn session_name(&self) -> $crate::error::Result<Option<$crate::json::JsString>> {
            Ok(self.log.name())
        }
        fn session_stats(&self) -> $crate::error::Result<$crate::rules::SessionStats> {
            self.log.stats()
        }
        fn entries(
            &self,
            after: usize,
            limit: Option<usize>,
        ) -> $crate::error::Result<Vec<$crate::entry::Entry>> {
            Ok(self.log.slice(after, limit))
        }
        fn entry_count(&self) -> $crate::error::Result<usize> {
            Ok(self.log.all().len())
        }
        /// Hands out the log's own entries: no copy of the slice first,
        /// and none of what follows a stop.
        fn visit_entries_until(
            &self,
            after: usize,
            limit: Option<usize>,
            sink: &mut dyn FnMut(String) -> $crate::error::Result<std::ops::ControlFlow<()>>,
        ) -> $crate::error::Result<std::ops::ControlFlow<()>> {
            for e in self.log.window(after, limit) {
                if sink(e.json().to_owned())?.is_break() {
                    return Ok(std::ops::ControlFlow::Break(()));
                }
            }
            Ok(std::ops::ControlFlow::Continue(()))
        }
    };
}
pub(crate) use log_index_reads;
