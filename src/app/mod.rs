//! The app contract: pi-coding-agent 1.6.0's `SessionManager` rules, written
//! once over any [`SessionStorage`] (memory, JSONL, SQLite, PostgreSQL).
//!
//! The SDK contract ([`crate::session`], [`crate::rules`]) keeps the leaf in
//! the log (`leaf` entries) and cuts paths at compactions. The pi program
//! itself keeps the leaf in memory: on open it is the last entry in log order,
//! `branch`/`resetLeaf` move it without writing, appends attach there, and
//! `getBranch` walks the whole path to the root. [`AppSession`] answers what
//! pi 1.6's `SessionManager` answers, value for value; [`crate::rpc::app`]
//! serves it over stdio.
//!
//! The parts: `value` (entries as JavaScript sees them), `path` (the whole
//! path, from the store's cached walks), `context` (context entries,
//! projection, context), `tree` (`getTree`, `getChildren`, V8's sort),
//! `labels` (the label map), `stats` (session statistics and cost
//! breakdown), `write` (the writers and pi's ids).

mod context;
mod labels;
mod path;
mod stats;
mod tree;
mod v8sort;
mod value;
mod write;

pub use context::{AppContext, AppProjection, ProjectedEntry};
pub use labels::AppLabel;
pub use stats::{AppStats, UsageCost};
pub use tree::AppTreeNode;
pub use value::{JsSum, JsValue};
pub use write::{new_app_entry_id, BranchSummaryArgs, CompactionArgs, UsageArgs};

use crate::entry::Entry;
use crate::error::Result;
use crate::storage::SessionStorage;
use std::cell::RefCell;

/// One session under pi 1.6's `SessionManager` rules: the storage, pi's
/// in-memory leaf, and the label map (built on first use, kept current on
/// appends).
#[derive(Debug)]
pub struct AppSession<S> {
    storage: S,
    /// pi's `leafId`: where the next append attaches (`None`: a new root).
    leaf: Option<String>,
    /// pi's `labelsById` and `labelTimestampsById`, built on the first read
    /// that needs them (a scan of the label entries), then kept current.
    labels: RefCell<Option<labels::LabelMap>>,
    /// pi's `byId.size` (distinct ids), counted on first use.
    distinct_ids: RefCell<Option<usize>>,
}

impl<S: SessionStorage> AppSession<S> {
    /// Opens a session as pi opens a file: the leaf is the last entry in log
    /// order (whatever its type; `None` when the session is empty). Reads one
    /// entry by position: opening never scans the session.
    pub fn open(storage: S) -> Result<Self> {
        let count = storage.entry_count()?;
        let leaf = match count.checked_sub(1) {
            Some(last) => storage
                .entries(last, Some(1))?
                .first()
                .map(|e| e.id().to_owned()),
            None => None,
        };
        Ok(AppSession {
            storage,
            leaf,
            labels: RefCell::new(None),
            distinct_ids: RefCell::new(None),
        })
    }

    /// The storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The storage, for writes outside the app's rules (the caller keeps the
    /// leaf and label map right: see [`AppSession::reload`]).
    pub fn storage_mut(&mut self) -> &mut S {
        &mut self.storage
    }

    /// The storage back.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// Forgets what was derived from the log (label map, id count) and puts
    /// the leaf back on the last entry, as reopening would.
    pub fn reload(&mut self) -> Result<()> {
        let storage = std::mem::replace(&mut self.labels, RefCell::new(None));
        drop(storage);
        *self.distinct_ids.borrow_mut() = None;
        let count = self.storage.entry_count()?;
        self.leaf = match count.checked_sub(1) {
            Some(last) => self
                .storage
                .entries(last, Some(1))?
                .first()
                .map(|e| e.id().to_owned()),
            None => None,
        };
        Ok(())
    }

    /// pi's `getLeafId()`.
    pub fn leaf_id(&self) -> Option<&str> {
        self.leaf.as_deref()
    }

    /// pi's `getLeafEntry()`.
    pub fn leaf_entry(&self) -> Result<Option<Entry>> {
        match &self.leaf {
            Some(id) => self.storage.entry(id),
            None => Ok(None),
        }
    }

    /// pi's `getEntry(id)`: the latest entry with that id.
    pub fn entry(&self, id: &str) -> Result<Option<Entry>> {
        self.storage.entry(id)
    }

    /// pi's `getBranch(fromId?)`: the whole path from `from` (else the leaf)
    /// to the root, root first; `[]` for an unknown id; stops at a missing
    /// parent. Read through the store's cached path walks.
    pub fn branch(&self, from: Option<&str>) -> Result<Vec<Entry>> {
        match from.or(self.leaf.as_deref()) {
            Some(start) if !start.is_empty() => path::whole_path(&self.storage, start),
            _ => Ok(Vec::new()),
        }
    }

    /// pi's `getEntryCount()`: the number of distinct ids.
    pub fn entry_count(&self) -> Result<usize> {
        if let Some(n) = *self.distinct_ids.borrow() {
            return Ok(n);
        }
        let mut ids = std::collections::HashSet::new();
        self.storage.visit_entries(0, None, &mut |text| {
            ids.insert(Entry::from_checked_text(text).id().to_owned());
            Ok(())
        })?;
        *self.distinct_ids.borrow_mut() = Some(ids.len());
        Ok(ids.len())
    }

    /// pi's `branch(branchFromId)`: moves the leaf in memory (nothing is
    /// written); `not_found` for an unknown id.
    pub fn branch_to(&mut self, id: &str) -> Result<()> {
        if !self.storage.contains_entry(id)? {
            return Err(crate::Error::EntryNotFound(id.to_owned()));
        }
        self.leaf = Some(id.to_owned());
        Ok(())
    }

    /// pi's `resetLeaf()`: the next append starts a new root.
    pub fn reset_leaf(&mut self) {
        self.leaf = None;
    }
}

#[cfg(test)]
mod tests;
