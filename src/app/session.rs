//! [`AppSession`]: one session under pi 1.6's `SessionManager` rules — the
//! storage, pi's in-memory leaf and what is derived from the log (the label
//! map, the count of distinct ids). The reads and writers of the contract
//! are `impl` blocks in the modules above this one (`context`, `tree`,
//! `stats`, `write`).

use super::labels::{AppLabel, LabelMap};
use super::projection::{AppProjection, PathScan};
use crate::entry::Entry;
use crate::error::Result;
use crate::json::JsString;
use crate::storage::SessionStorage;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// One session under pi 1.6's `SessionManager` rules: the storage, pi's
/// in-memory leaf, and the label map (built on first use, kept current on
/// appends).
#[derive(Debug)]
pub struct AppSession<S> {
    pub(super) storage: S,
    /// pi's `leafId`: where the next append attaches (`None`: a new root).
    pub(super) leaf: Option<String>,
    /// pi's `labelsById` and `labelTimestampsById`, built on the first read
    /// that needs them (a scan of the label entries), then kept current.
    pub(super) labels: RefCell<Option<LabelMap>>,
    /// pi's `byId.size` (distinct ids), counted on first use.
    pub(super) distinct_ids: RefCell<Option<usize>>,
    /// The light scan of the path from the leaf it was read at (`""`: no
    /// leaf), kept until the log changes: pi derives it from memory.
    pub(super) scanned: RefCell<Option<(String, Arc<PathScan>)>>,
    /// The projection at the leaf it was built at, kept likewise.
    pub(super) projected: RefCell<Option<(String, Arc<AppProjection>)>>,
    /// Entries parsed into JS values by context reads.
    pub(super) parses: Cell<usize>,
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
            scanned: RefCell::new(None),
            projected: RefCell::new(None),
            parses: Cell::new(0),
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
        *self.labels.get_mut() = None;
        *self.distinct_ids.get_mut() = None;
        self.forget_paths();
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
            Some(start) if !start.is_empty() => crate::storage::whole_path(&self.storage, start),
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
        let empty = LabelMap::default();
        Ok(f(labels.as_ref().unwrap_or(&empty)))
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

    /// Forgets the kept scan and projection: the log changed.
    fn forget_paths(&mut self) {
        *self.scanned.get_mut() = None;
        *self.projected.get_mut() = None;
    }

    /// Keeps a built label map current after `entry` was appended.
    pub(crate) fn note_appended(&mut self, entry: &Entry) -> Result<()> {
        self.forget_paths();
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
