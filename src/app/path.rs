//! pi 1.6's `getBranch` streamed: the whole path from an entry to the root,
//! across compactions, handed out root first one entry at a time, holding
//! one id per compaction on the path, never the path's entries.
//!
//! The stores stream the SDK's walks ([`SessionStorage::visit_path`]), each
//! cut at a compaction's stop; pi's path is those walks chained, each
//! starting at the parent of the entry where the one before it stopped. The
//! chain is found leaf side first but written root side first, so the walks'
//! starts are collected first: a probe reads a walk's first (root-side)
//! entry and stops there. The root-most walk, the last one probed, is
//! written as it is probed; then every other walk is streamed, root side
//! first.

use super::session::AppSession;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::storage::{first_revisit, SessionStorage};
use std::collections::HashSet;

/// What probing one walk found.
enum Probe {
    /// The walk's root-side entry names this parent: the walk before it
    /// starts there, if the session holds it.
    Parent(String),
    /// The walk ends at a root: it was handed to the sink whole.
    Streamed,
    /// The store refused the walk before its first entry: a parent is
    /// missing before any compaction stop (the SDK refuses such a path,
    /// pi stops at the entry naming it).
    Refused,
}

/// Where a probe stands in the walk it reads.
enum ProbeState {
    /// No entry read yet.
    Unread,
    /// The first entry was a root: the walk is being written.
    Streaming,
    /// The first entry names a parent: the read was stopped there.
    Stopped(String),
}

/// Reads the walk from `start` up to its first entry: a root means it is
/// the root-most walk, which is then handed to `sink` whole; otherwise the
/// read stops (the sink's error ends the store's read) and the parent is
/// returned.
fn probe<S: SessionStorage + ?Sized>(
    st: &S,
    start: &str,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<Probe> {
    let mut state = ProbeState::Unread;
    let read = st.visit_path(Some(start), &mut |e| match state {
        ProbeState::Streaming => sink(e),
        ProbeState::Stopped(_) => Err(Error::Unknown("a probe read past its stop".into())),
        ProbeState::Unread => match e.facts().parent() {
            Some(parent) => {
                state = ProbeState::Stopped(parent.to_owned());
                // Ends the store's read: only the first entry was wanted.
                Err(Error::Unknown(
                    "a probe stops at the walk's first entry".into(),
                ))
            }
            None => {
                state = ProbeState::Streaming;
                sink(e)
            }
        },
    });
    match (read, state) {
        // The error is the probe's own stop.
        (_, ProbeState::Stopped(parent)) => Ok(Probe::Parent(parent)),
        (Ok(()), _) => Ok(Probe::Streamed),
        (Err(Error::DanglingReference(_) | Error::EntryNotFound(_)), ProbeState::Unread) => {
            Ok(Probe::Refused)
        }
        (Err(e), _) => Err(e),
    }
}

/// The walk from `start` one lookup per entry, to the root or to the entry
/// whose parent is missing, handed to `sink` root first: holds the walk's
/// ids (not its entries) to turn it round. Only a walk the store refused
/// (a missing parent, no compaction stop before it) is read this way.
fn step_walk<S: SessionStorage + ?Sized>(
    st: &S,
    start: &str,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    let mut ids: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut current = st.entry(start)?;
    while let Some(e) = current {
        if !seen.insert(e.id().to_owned()) {
            return Err(Error::ParentCycle(e.id().to_owned()));
        }
        ids.push(e.id().to_owned());
        current = match e.facts().parent() {
            Some(p) => st.entry(p)?,
            None => None,
        };
    }
    drop(seen);
    for id in ids.iter().rev() {
        // Each id was just read: its latest entry is still there.
        let e = st
            .entry(id)?
            .ok_or_else(|| Error::EntryNotFound(id.clone()))?;
        sink(e)?;
    }
    Ok(())
}

/// pi 1.6's whole path from `start` (`getBranch`) handed to `sink` root
/// first, the same entries [`crate::storage::whole_path`] returns: nothing
/// when `start` names no entry, ending (at its root side) at an entry whose
/// parent is missing; a parent chain that loops is an error, found before
/// any entry is handed out. Memory: one id per walk (one per compaction on
/// the path) and what the store holds to stream one walk; the walk that
/// reaches a missing parent without a compaction stop holds its ids.
/// `sink` must not call back into `st`.
pub fn visit_whole_path<S: SessionStorage + ?Sized>(
    st: &S,
    start: &str,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    if !st.contains_entry(start)? {
        return Ok(());
    }
    // The starts of the walks after the root-most one, leaf side first.
    let mut starts: Vec<String> = Vec::new();
    // The walk from an entry is the same whenever it is taken, so a start
    // met twice means the chain loops.
    let mut seen: HashSet<String> = HashSet::new();
    let mut id = start.to_owned();
    loop {
        if !seen.insert(id.clone()) {
            return Err(first_revisit(st, start));
        }
        match probe(st, &id, sink)? {
            Probe::Streamed => break,
            Probe::Refused => {
                step_walk(st, &id, sink)?;
                break;
            }
            Probe::Parent(parent) => {
                if st.contains_entry(&parent)? {
                    starts.push(std::mem::replace(&mut id, parent));
                } else {
                    // A compaction stop whose parent is missing: this walk
                    // is the root-most one after all.
                    st.visit_path(Some(&id), sink)?;
                    break;
                }
            }
        }
    }
    for id in starts.iter().rev() {
        st.visit_path(Some(id), sink)?;
    }
    Ok(())
}

impl<S: SessionStorage> AppSession<S> {
    /// pi's `getBranch(fromId?)` handed to `sink` an entry at a time, root
    /// first ([`visit_whole_path`]): the entries [`AppSession::branch`]
    /// returns, in memory bounded by the compactions on the path rather
    /// than its length. `sink` must not call back into this session.
    pub fn visit_branch(
        &self,
        from: Option<&str>,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        match from.or(self.leaf.as_deref()) {
            Some(start) if !start.is_empty() => visit_whole_path(&self.storage, start, sink),
            _ => Ok(()),
        }
    }
}
