//! The whole path to the root, as pi's `getBranch` walks it, built from the
//! store's cached SDK walks.
//!
//! The SDK walk (`path_to_root_or_compaction`) is what every store caches
//! (SQLite's and PostgreSQL's branch cache), but it stops at a compaction's
//! first kept entry. The app's path goes on to the root: so it is the SDK
//! walks chained, each starting at the parent of where the last one stopped.
//! A read costs one cached walk per compaction on the path, never a scan.

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::storage::SessionStorage;
use std::collections::HashSet;

/// The path from `start` (which need not exist) to the root, root first:
/// `[]` when `start` names no entry, ending (at its root side) at an entry
/// whose parent is missing. A parent chain that loops is an error (pi would
/// hang).
pub(crate) fn whole_path<S: SessionStorage + ?Sized>(st: &S, start: &str) -> Result<Vec<Entry>> {
    if !st.contains_entry(start)? {
        return Ok(Vec::new());
    }
    // Segments leaf side first; each is root side first.
    let mut segments: Vec<Vec<Entry>> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut next = Some(start.to_owned());
    while let Some(id) = next.take() {
        let segment = match st.path_to_root_or_compaction(Some(&id)) {
            Ok(segment) => segment,
            // The SDK refuses a path with a missing parent; the app stops
            // there. Only the segment that reaches it is walked entry by entry.
            Err(Error::DanglingReference(_) | Error::EntryNotFound(_)) => step_walk(st, &id)?,
            Err(e) => return Err(e),
        };
        for e in &segment {
            if !seen.insert(e.id().to_owned()) {
                return Err(Error::ParentCycle(e.id().to_owned()));
            }
        }
        if let Some(parent) = segment.first().and_then(|f| f.facts().parent()) {
            if st.contains_entry(parent)? {
                next = Some(parent.to_owned());
            }
        }
        segments.push(segment);
    }
    let mut path = Vec::with_capacity(segments.iter().map(Vec::len).sum());
    for segment in segments.into_iter().rev() {
        path.extend(segment);
    }
    Ok(path)
}

/// The walk from `start` one lookup per entry, to the root or to the entry
/// whose parent is missing; root first.
fn step_walk<S: SessionStorage + ?Sized>(st: &S, start: &str) -> Result<Vec<Entry>> {
    let mut path = Vec::new();
    let mut seen = HashSet::new();
    let mut current = st.entry(start)?;
    while let Some(e) = current {
        if !seen.insert(e.id().to_owned()) {
            return Err(Error::ParentCycle(e.id().to_owned()));
        }
        current = match e.facts().parent() {
            Some(p) => st.entry(p)?,
            None => None,
        };
        path.push(e);
    }
    path.reverse();
    Ok(path)
}
