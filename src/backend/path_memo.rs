//! Paths an archive's session handle has read (SQLite or PostgreSQL), kept
//! so that reading one again (or the path of an entry appended below one)
//! runs no path query at all.
//!
//! # Why an answer can be kept
//! 1. The log is append-only and an entry's parent never changes (an archive
//!    refuses an entry that would re-parent stored ones, invariant 8 of
//!    `backend::branch_cache`), so the path from an entry is the same for as
//!    long as its session exists.
//! 2. The walk from an entry that is not a compaction is that entry after the
//!    walk from its parent: no compaction stop is pending when the walk
//!    leaves it ([`crate::rules::StopRule`]). So an agent's next context is
//!    its previous path plus the entries it appended since, and is built
//!    from the kept path and the new rows alone.
//!
//! # What is checked
//! A kept path is handed out only while the session row still holds this
//! session's id under its key (a deleted session's key may be reused by a
//! new one): one indexed row per read. Once it does not, the memo is
//! emptied and the read fails with `not_found`. Nothing else can change a path (a
//! session deleted and imported again under its own id is the same pi file,
//! which pi only ever appends to).
//!
//! # Bounds
//! At most [`PathMemo::PATHS`] paths holding [`PathMemo::BYTES`] of entry
//! text in all are kept (an entry on several kept paths counted each time;
//! the texts are shared with the handle's entry cache, not copied); past
//! either, the oldest paths go first, and a longer path is not kept at all.

use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::Arc;

/// How a handle reads what [`PathMemo::read`] needs, on its connection `C`.
pub trait PathSource<C> {
    /// What the start's row tells the path query (SQLite: its entry key).
    type Start;
    /// The session's id (what its row must still hold).
    fn session_id(&self) -> &str;
    /// The start entry, if the session has it.
    fn start(&self, conn: &mut C, id: &str) -> Result<Option<(Self::Start, Entry)>>;
    /// Whether the session row still holds this session.
    fn still_this_session(&self, conn: &mut C) -> Result<bool>;
    /// The path query, given what [`PathSource::start`] read if it ran.
    fn query(&self, conn: &mut C, id: &str, start: Option<Self::Start>) -> Result<Vec<Entry>>;
}

/// The paths a handle read most recently, by the id they start from.
#[derive(Debug, Default)]
pub struct PathMemo {
    /// Each path with the bytes of text it holds.
    paths: VecDeque<(Box<str>, Arc<[Entry]>, usize)>,
    bytes: usize,
}

impl PathMemo {
    /// Paths kept at most.
    pub const PATHS: usize = 64;
    /// Bytes of entry text kept at most, over all paths.
    pub const BYTES: usize = 32 << 20;

    /// Whether nothing is kept (then there is nothing to check either).
    fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The kept path from `start`.
    fn get(&self, start: &str) -> Option<&Arc<[Entry]>> {
        self.paths
            .iter()
            .rev()
            .find(|(id, _, _)| &**id == start)
            .map(|(_, path, _)| path)
    }

    /// The path from `entry`, if it follows from a kept one (point 2 above):
    /// `entry` is no compaction and the path from its parent is kept.
    fn extend(&self, entry: &Entry) -> Option<Vec<Entry>> {
        if *entry.entry_type() == EntryType::Compaction {
            return None;
        }
        let above = self.get(entry.facts().parent()?)?;
        let mut path = Vec::with_capacity(above.len() + 1);
        path.extend_from_slice(above);
        path.push(entry.clone());
        Some(path)
    }

    /// Keeps the path from `start`, dropping the oldest paths past the bounds.
    pub fn keep(&mut self, start: &str, path: &[Entry]) {
        let bytes: usize = path.iter().map(|e| e.json().len()).sum();
        if bytes > Self::BYTES || self.get(start).is_some() {
            return;
        }
        while self.paths.len() >= Self::PATHS || self.bytes + bytes > Self::BYTES {
            let Some((_, _, old)) = self.paths.pop_front() else {
                break;
            };
            self.bytes -= old;
        }
        self.bytes += bytes;
        self.paths.push_back((start.into(), path.into(), bytes));
    }

    /// The path from `id`: kept, following from a kept one, or read by
    /// `source`'s query and then kept.
    pub fn read<C, S: PathSource<C>>(
        &mut self,
        source: &S,
        conn: &mut C,
        id: &str,
    ) -> Result<Vec<Entry>> {
        let mut start_key = None;
        if !self.is_empty() {
            let kept = match self.get(id) {
                Some(path) => Some(path.to_vec()),
                None => {
                    // The start's row is read here instead of in the path
                    // query, so a miss costs no extra statement.
                    let start = source.start(conn, id)?;
                    start.and_then(|(key, entry)| {
                        let path = self.extend(&entry);
                        start_key = Some(key);
                        path
                    })
                }
            };
            if let Some(path) = kept {
                if !source.still_this_session(conn)? {
                    // Deleted since (its key may now be another session's).
                    self.clear();
                    return Err(Error::SessionNotFound(source.session_id().to_owned()));
                }
                self.keep(id, &path);
                return Ok(path);
            }
        }
        let path = source.query(conn, id, start_key)?;
        self.keep(id, &path);
        Ok(path)
    }

    /// Forgets every path (the session is not the one they were read from).
    pub fn clear(&mut self) {
        self.paths.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, parent: Option<&str>, kind: &str) -> Entry {
        let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
        let extra = if kind == "compaction" {
            r#","summary":"s","firstKeptEntryId":"a","tokensBefore":1"#
        } else {
            r#","message":{"role":"user","content":"x"}"#
        };
        Entry::from_json(&format!(
            r#"{{"type":"{kind}","id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:00.000Z"{extra}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_child_extends_its_parents_path_unless_it_is_a_compaction() {
        let (a, b) = (
            entry("a", None, "message"),
            entry("b", Some("a"), "message"),
        );
        let mut memo = PathMemo::default();
        memo.keep("b", &[a.clone(), b.clone()]);
        let c = entry("c", Some("b"), "message");
        assert_eq!(memo.extend(&c), Some(vec![a, b, c]));
        assert_eq!(memo.extend(&entry("d", Some("b"), "compaction")), None);
        assert_eq!(memo.extend(&entry("e", Some("zz"), "message")), None);
        assert_eq!(memo.extend(&entry("f", None, "message")), None);
    }

    #[test]
    fn the_oldest_paths_go_first_past_either_bound() {
        let e = entry("a", None, "message");
        let mut memo = PathMemo::default();
        for i in 0..PathMemo::PATHS + 3 {
            memo.keep(&format!("p{i}"), std::slice::from_ref(&e));
        }
        assert_eq!(memo.paths.len(), PathMemo::PATHS);
        assert!(memo.get("p2").is_none() && memo.get("p3").is_some());
        let many = PathMemo::BYTES / e.json().len() - 5;
        memo.keep("long", &vec![e.clone(); many]);
        assert!(memo.bytes <= PathMemo::BYTES);
        assert!(memo.get("long").is_some() && memo.get("p3").is_none());
        memo.keep("too-long", &vec![e; PathMemo::BYTES / 10]);
        assert!(memo.get("too-long").is_none());
    }
}
