//! The `SessionStorage` trait: the contract of spec §4, one session at a time.
//!
//! Required methods are what a backend must store and index; provided methods
//! are the contract's rules built on them, so every backend answers alike.

use crate::context::{build_context, ContextOptions};
use crate::contract::Contract;
use crate::entry::{new_entry_id, now_timestamp, Entry};
use crate::error::{Error, Result};
use crate::json::JsString;
use crate::rules::{walk_joining, walk_to_root_or_compaction, SessionStats, Walk, WalkEnd};
use crate::skeleton::{self, SkeletonItem};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::ops::ControlFlow;

/// How hard an append works to survive a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every acknowledged append survives power loss: JSONL fsyncs each append,
    /// SQLite runs with `synchronous=FULL`.
    #[default]
    Full,
    /// Every acknowledged append survives a crash of the process; the last
    /// moments before a power loss may be lost: no fsync, SQLite `synchronous=NORMAL`.
    Relaxed,
}

/// A session's metadata (spec §4 `getMetadata`), as each backend knows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionMetadata {
    /// The session id.
    pub id: String,
    /// When the session was created (ISO-8601).
    pub created_at: String,
    /// The working directory (JSONL and SQLite).
    pub cwd: Option<String>,
    /// The session file (JSONL).
    pub path: Option<String>,
    /// The session this one was forked from (`parentSession` in the header).
    pub parent_session: Option<String>,
    /// Application metadata (a JSON object), exact text.
    pub metadata: Option<String>,
}

impl SessionMetadata {
    /// The metadata as pi returns it: absent fields omitted.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), Value::String(self.id.clone()));
        m.insert("createdAt".into(), Value::String(self.created_at.clone()));
        if let Some(cwd) = &self.cwd {
            m.insert("cwd".into(), Value::String(cwd.clone()));
        }
        if let Some(path) = &self.path {
            m.insert("path".into(), Value::String(path.clone()));
        }
        if let Some(p) = &self.parent_session {
            m.insert("parentSessionPath".into(), Value::String(p.clone()));
        }
        if let Some(md) = &self.metadata {
            m.insert(
                "metadata".into(),
                crate::json::parse_value_lossy(md).unwrap_or(Value::Null),
            );
        }
        Value::Object(m)
    }
}

/// One line of a session file that pi skips when it opens the file, kept
/// verbatim: its text without the line's `\n`, and where it stood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptLine {
    /// How many entries precede it in the log; `-1`: it precedes the header.
    pub position: i64,
    /// Its bytes as they were in the file, without the terminating `\n`
    /// (invalid UTF-8 included).
    pub text: Vec<u8>,
}

/// The lines pi skips of a session's file, in file order, and whether the
/// file ended without a final `\n` (pi 1.6 appends one when it opens such a
/// file; an export of the untouched session leaves it out, as the file was).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeptLines {
    /// The kept lines, in file order.
    pub lines: Vec<KeptLine>,
    /// The entry count at which the imported file ended without its final
    /// `\n`: while the log still has exactly that many entries, an export
    /// leaves the last line unterminated.
    pub open_end: Option<i64>,
}

impl KeptLines {
    /// Whether there is nothing kept and the file ended with `\n`.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.open_end.is_none()
    }
}

/// One move of the leaf pointer: a `leaf` entry of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafMove {
    /// The `leaf` entry's id.
    pub id: String,
    /// When the move was made.
    pub timestamp: String,
    /// The leaf before the move (the `leaf` entry's parent).
    pub from: Option<String>,
    /// The leaf after it (`targetId`; `None` moves it before the first entry).
    pub to: Option<String>,
}

impl LeafMove {
    /// The move a `leaf` entry records.
    pub fn of(entry: &Entry) -> Self {
        let f = entry.facts();
        LeafMove {
            id: f.id.clone(),
            timestamp: f.timestamp.clone(),
            from: f.parent_id.clone(),
            to: f.target_id.clone(),
        }
    }
}

/// What a light scan of a path ([`SessionStorage::visit_path_facts`]) says
/// of one `message` entry's `message` member, read from what the store keeps
/// beside the text where it can (the search index's role, the stored tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageFact<'a> {
    /// Not a `message` entry.
    NotMessage,
    /// `message` is present and not `null` (reading its `role` does not
    /// throw). `role`: the role search filed the message under, where the
    /// store knows it: a name other than `assistant` proves `message.role`
    /// is not `"assistant"`; `assistant` or `None` prove nothing.
    Present {
        /// The search index's role, if any.
        role: Option<&'a str>,
    },
    /// Only the text says: the entry's text.
    Text(&'a str),
}

impl<'a> MessageFact<'a> {
    /// The fact for the `message` entry whose stored text is `text`, from a
    /// structural scan of it (no parse): present when its `message` member
    /// is there and not `null`; the text itself where the scan defers
    /// (duplicate keys, escapes) or the member is `null` or absent.
    pub fn of_text(text: &'a str) -> Self {
        match crate::json::checked_object_members(text, ["message"]) {
            Some([Some(raw)]) if !raw.trim_start().starts_with('n') => {
                MessageFact::Present { role: None }
            }
            _ => MessageFact::Text(text),
        }
    }
}

/// One entry of a path as [`SessionStorage::visit_path_facts`] hands it out.
#[derive(Debug, Clone, Copy)]
pub struct PathFact<'a> {
    /// `id`.
    pub id: &'a str,
    /// `type`.
    pub entry_type: &'a str,
    /// What is known of a `message` entry's `message`.
    pub message: MessageFact<'a>,
}

/// What a store's indexes tell of pi 1.6's whole path from an entry
/// ([`SessionStorage::path_hint`]) without reading the path: where it is
/// and the newest entries of the kinds whose newest one on the path
/// decides the app's context (`buildSessionContext`). Depths count from
/// the path's root-side end (0).
#[derive(Debug, Clone, Default)]
pub struct PathHint {
    /// The start's depth: the entries on the path above it.
    pub depth: u64,
    /// The newest `compaction` on the path and its depth.
    pub compaction: Option<(u64, Entry)>,
    /// The newest `thinking_level_change` on the path.
    pub thinking_level_change: Option<Entry>,
    /// The newest `model_change` on the path and its depth.
    pub model_change: Option<(u64, Entry)>,
}

/// One session's append-only log with its leaf pointer (spec §4).
///
/// Reads take `&self`; appends take `&mut self`. Every method that stores
/// something stores all of it or nothing.
pub trait SessionStorage {
    /// The session's metadata.
    fn metadata(&self) -> Result<SessionMetadata>;

    /// Whose rules the session follows. Stores that record it (SQLite,
    /// PostgreSQL) answer the stored value; the default detects it from the
    /// log: the SDK's if it holds a `leaf` or `active_tools_change` entry.
    fn contract(&self) -> Result<Contract> {
        for sdk_only in ["leaf", "active_tools_change"] {
            let mut found = false;
            self.visit_entries_of_type(sdk_only, &mut |_| {
                found = true;
                Ok(())
            })?;
            if found {
                return Ok(Contract::Sdk);
            }
        }
        Ok(Contract::App)
    }

    /// The lines of the session's file that pi skips when it opens it (not
    /// JSON, blank, or not a usable entry), kept verbatim where the store
    /// keeps them, so that an export of the untouched session is
    /// byte-identical to the file imported (see [`KeptLines`]).
    fn kept_lines(&self) -> Result<KeptLines> {
        Ok(KeptLines::default())
    }

    /// The leaf as replayed from the log, without checking that it exists.
    fn stored_leaf_id(&self) -> Result<Option<String>>;

    /// Appends one entry as given (the caller chose id, parent and timestamp) and
    /// acknowledges only once it is durable per the store's [`Durability`].
    fn append_entry(&mut self, entry: Entry) -> Result<()>;

    /// Appends entries in order, all or none (one transaction where the backend has them).
    fn append_entries(&mut self, entries: &[Entry]) -> Result<()> {
        for e in entries {
            self.append_entry(e.clone())?;
        }
        Ok(())
    }

    /// The entry that answers to `id` (the latest one, where ids repeat), if any.
    fn entry(&self, id: &str) -> Result<Option<Entry>>;

    /// Whether an entry answers to `id` (backends with an index answer without reading it).
    fn contains_entry(&self, id: &str) -> Result<bool> {
        Ok(self.entry(id)?.is_some())
    }

    /// Every entry of `entry_type`, in log order.
    fn find_entries(&self, entry_type: &str) -> Result<Vec<Entry>>;

    /// The current label of `id` (lone surrogates kept).
    fn label(&self, id: &str) -> Result<Option<JsString>>;

    /// The session name: the last `session_info` entry's name, trimmed, if not blank (lone surrogates kept).
    fn session_name(&self) -> Result<Option<JsString>>;

    /// Statistics over the whole log.
    fn session_stats(&self) -> Result<SessionStats>;

    /// The log slice `[after, after + limit)` by position (0-based).
    fn entries(&self, after: usize, limit: Option<usize>) -> Result<Vec<Entry>>;

    /// Number of entries in the log.
    fn entry_count(&self) -> Result<usize>;

    /// Hands the stored text of the log slice `[after, after + limit)` to
    /// `sink`, one entry at a time in log order, so that an answer of any size
    /// takes bounded memory (rpc streams `getEntries` through it), until
    /// `sink` answers [`ControlFlow::Break`]: the read ends there (a fork's
    /// chunk reader stops at a byte bound) and this answers `Break`. The
    /// default reads [`SessionStorage::entries`]; the in-memory logs hand out
    /// their own entries, the archives stream rows and end the statement.
    fn visit_entries_until(
        &self,
        after: usize,
        limit: Option<usize>,
        sink: &mut dyn FnMut(String) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        for e in self.entries(after, limit)? {
            if sink(e.json().to_owned())?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// [`SessionStorage::visit_entries_until`] with a sink that reads to the
    /// end of the slice (stores implement that one, not this).
    fn visit_entries(
        &self,
        after: usize,
        limit: Option<usize>,
        sink: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<()> {
        self.visit_entries_until(after, limit, &mut |text| {
            sink(text).map(ControlFlow::Continue)
        })
        .map(drop)
    }

    /// [`SessionStorage::find_entries`], handed to `sink` one at a time like
    /// [`SessionStorage::visit_entries`].
    fn visit_entries_of_type(
        &self,
        entry_type: &str,
        sink: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<()> {
        self.find_entries(entry_type)?
            .iter()
            .try_for_each(|e| sink(e.json().to_owned()))
    }

    /// The path from `id` towards the root, cut at a compaction (spec §5), root-side first.
    fn path_to_root_or_compaction(&self, id: Option<&str>) -> Result<Vec<Entry>> {
        walk_to_root_or_compaction(id, |id| self.entry(id))
    }

    /// [`SessionStorage::path_to_root_or_compaction`] handed to `sink` one
    /// entry at a time, root-side first, so that a path of any length is
    /// answered in bounded memory (the rpc's and the CLI's whole-path
    /// answers write each entry as it comes). Errors the walk finds before
    /// its first entry (an unknown start, a dangling root) come before any
    /// entry is handed out. `sink` must not call back into this storage.
    /// Stores that hold their log in memory keep this default; SQLite and
    /// PostgreSQL stream the rows of their branch cache's path read.
    fn visit_path(
        &self,
        id: Option<&str>,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        self.path_to_root_or_compaction(id)?
            .into_iter()
            .try_for_each(sink)
    }

    /// [`SessionStorage::visit_path`] from the current leaf
    /// ([`SessionStorage::leaf_id`]); returns the leaf.
    fn visit_active_path(
        &self,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<Option<String>> {
        let leaf = self.leaf_id()?;
        self.visit_path(leaf.as_deref(), sink)?;
        Ok(leaf)
    }

    /// pi 1.6's whole path from `start` (`getBranch`: to the root, across
    /// compactions, ending at an entry whose parent is missing) handed to
    /// `sink` root side first, one light fact per entry: what the app's
    /// context settings and compaction search read of every entry, without
    /// parsing texts where the store keeps enough beside them. Nothing is
    /// handed out when `start` names no entry; a parent chain that loops is
    /// an error. The default reads the path's entries (their texts scanned,
    /// not parsed); SQLite and PostgreSQL read columns only.
    fn visit_path_facts(
        &self,
        start: &str,
        sink: &mut dyn FnMut(PathFact<'_>) -> Result<()>,
    ) -> Result<()> {
        for e in whole_path(self, start)? {
            let message = if *e.entry_type() == crate::entry::EntryType::Message {
                MessageFact::of_text(e.json())
            } else {
                MessageFact::NotMessage
            };
            sink(PathFact {
                id: e.id(),
                entry_type: e.entry_type().as_str(),
                message,
            })?;
        }
        Ok(())
    }

    /// [`PathHint`] for the whole path from `start`, read from indexes in
    /// a number of statements that does not grow with the path. `None`
    /// where the store cannot tell without reading the path: the default,
    /// an unknown `start`, a session holding a `message` entry without a
    /// message (pi throws only if it is on the path, which only the path
    /// says), a path whose root names a stored entry as its parent (a loop).
    fn path_hint(&self, _start: &str) -> Result<Option<PathHint>> {
        Ok(None)
    }

    /// The entries of the whole path from `start` ([`whole_path`]) at
    /// depths `low..=high` (0: its root-side end; `high` past `start`'s
    /// depth means up to `start`), root first, handed to `sink` one at a
    /// time. Nothing when `start` names no entry. The default reads the
    /// whole path; SQLite reads the range only.
    fn visit_path_range(
        &self,
        start: &str,
        low: u64,
        high: u64,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        let (low, high) = (
            usize::try_from(low).unwrap_or(usize::MAX),
            usize::try_from(high).unwrap_or(usize::MAX),
        );
        whole_path(self, start)?
            .into_iter()
            .enumerate()
            .skip(low)
            .take_while(|(i, _)| *i <= high)
            .try_for_each(|(_, e)| sink(e))
    }

    /// The depth of entry `id` on the whole path from `start`
    /// ([`whole_path`]; 0: its root-side end), `None` when it is not on it.
    /// The default reads the whole path; SQLite asks its branch cache.
    fn depth_on_path(&self, start: &str, id: &str) -> Result<Option<u64>> {
        Ok(whole_path(self, start)?
            .iter()
            .position(|e| e.id() == id)
            .map(|i| i as u64))
    }

    /// The current leaf ([`SessionStorage::leaf_id`]) and the path from it
    /// ([`SessionStorage::path_to_root_or_compaction`]): what a resume reads.
    /// A store that answers both at once (PostgreSQL: one round trip)
    /// overrides it.
    fn active_path(&self) -> Result<(Option<String>, Vec<Entry>)> {
        let leaf = self.leaf_id()?;
        let path = self.path_to_root_or_compaction(leaf.as_deref())?;
        Ok((leaf, path))
    }

    /// The tree's skeleton (ids, parents, types, user messages, label
    /// changes; see [`crate::skeleton`]) handed to `sink`. The default reads
    /// the log in pages; backends with an index of the tree answer from it
    /// without reading entry text.
    fn visit_skeleton(&self, sink: &mut dyn FnMut(SkeletonItem<'_>) -> Result<()>) -> Result<()> {
        skeleton::from_pages(|start, limit| self.entries(start, Some(limit)), sink)
    }

    /// Whether each of `ids` that answers to an entry is a user message
    /// (a `message` with role `user`), handed to `sink` with its index in
    /// `ids`. Backends that index roles answer without reading the texts.
    fn visit_user_messages(
        &self,
        ids: &[&str],
        sink: &mut dyn FnMut(usize, bool) -> Result<()>,
    ) -> Result<()> {
        self.visit_entries_by_id(ids, &mut |i, e| sink(i, e.facts().is_user_message()))
    }

    /// Hands `sink` the entry answering to each of `ids` that exists, one at
    /// a time with its index in `ids` (in any order), so that memory holds one
    /// entry. Backends with an index read a batch in one statement.
    fn visit_entries_by_id(
        &self,
        ids: &[&str],
        sink: &mut dyn FnMut(usize, Entry) -> Result<()>,
    ) -> Result<()> {
        for (i, id) in ids.iter().enumerate() {
            if let Some(e) = self.entry(id)? {
                sink(i, e)?;
            }
        }
        Ok(())
    }

    /// The navigation history: the latest `limit` leaf moves, newest first
    /// ("where was I before"). Backends with an index of moves override this.
    fn leaf_moves(&self, limit: usize) -> Result<Vec<LeafMove>> {
        let leaves = self.find_entries("leaf")?;
        Ok(leaves.iter().rev().take(limit).map(LeafMove::of).collect())
    }

    /// The current leaf; `invalid_session` if it names an entry that does not exist.
    fn leaf_id(&self) -> Result<Option<String>> {
        let leaf = self.stored_leaf_id()?;
        if let Some(id) = &leaf {
            if !self.contains_entry(id)? {
                return Err(Error::DanglingReference(id.clone()));
            }
        }
        Ok(leaf)
    }

    /// A fresh entry id, unique in this session (spec §7).
    fn create_entry_id(&self) -> Result<String> {
        new_entry_id(|id| self.contains_entry(id))
    }

    /// Moves the leaf by appending a `leaf` entry; `id` must exist (`not_found`).
    fn set_leaf_id(&mut self, id: Option<&str>) -> Result<()> {
        let leaf = self.leaf_entry(id)?;
        self.append_entry(leaf)
    }

    /// The `leaf` entry that moves the leaf to `id` (which must exist,
    /// `not_found`), not yet appended: for a move that appends more with it.
    fn leaf_entry(&self, id: Option<&str>) -> Result<Entry> {
        if let Some(id) = id {
            if !self.contains_entry(id)? {
                return Err(Error::EntryNotFound(id.to_owned()));
            }
        }
        Ok(Entry::new_leaf(
            &self.create_entry_id()?,
            self.stored_leaf_id()?.as_deref(),
            &now_timestamp(),
            id,
        ))
    }
}

/// A boxed storage is a storage, so callers can pick a backend at run time.
impl<S: SessionStorage + ?Sized> SessionStorage for Box<S> {
    fn metadata(&self) -> Result<SessionMetadata> {
        (**self).metadata()
    }
    fn contract(&self) -> Result<Contract> {
        (**self).contract()
    }
    fn kept_lines(&self) -> Result<KeptLines> {
        (**self).kept_lines()
    }
    fn stored_leaf_id(&self) -> Result<Option<String>> {
        (**self).stored_leaf_id()
    }
    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        (**self).append_entry(entry)
    }
    fn append_entries(&mut self, entries: &[Entry]) -> Result<()> {
        (**self).append_entries(entries)
    }
    fn entry(&self, id: &str) -> Result<Option<Entry>> {
        (**self).entry(id)
    }
    fn contains_entry(&self, id: &str) -> Result<bool> {
        (**self).contains_entry(id)
    }
    fn active_path(&self) -> Result<(Option<String>, Vec<Entry>)> {
        (**self).active_path()
    }
    fn find_entries(&self, entry_type: &str) -> Result<Vec<Entry>> {
        (**self).find_entries(entry_type)
    }
    fn label(&self, id: &str) -> Result<Option<JsString>> {
        (**self).label(id)
    }
    fn session_name(&self) -> Result<Option<JsString>> {
        (**self).session_name()
    }
    fn session_stats(&self) -> Result<SessionStats> {
        (**self).session_stats()
    }
    fn entries(&self, after: usize, limit: Option<usize>) -> Result<Vec<Entry>> {
        (**self).entries(after, limit)
    }
    fn entry_count(&self) -> Result<usize> {
        (**self).entry_count()
    }
    fn visit_entries_until(
        &self,
        after: usize,
        limit: Option<usize>,
        sink: &mut dyn FnMut(String) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        (**self).visit_entries_until(after, limit, sink)
    }
    fn visit_entries(
        &self,
        after: usize,
        limit: Option<usize>,
        sink: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_entries(after, limit, sink)
    }
    fn visit_entries_of_type(
        &self,
        entry_type: &str,
        sink: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_entries_of_type(entry_type, sink)
    }
    fn path_to_root_or_compaction(&self, id: Option<&str>) -> Result<Vec<Entry>> {
        (**self).path_to_root_or_compaction(id)
    }
    fn visit_path(
        &self,
        id: Option<&str>,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_path(id, sink)
    }
    fn visit_active_path(
        &self,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<Option<String>> {
        (**self).visit_active_path(sink)
    }
    fn path_hint(&self, start: &str) -> Result<Option<PathHint>> {
        (**self).path_hint(start)
    }
    fn visit_path_range(
        &self,
        start: &str,
        low: u64,
        high: u64,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_path_range(start, low, high, sink)
    }
    fn depth_on_path(&self, start: &str, id: &str) -> Result<Option<u64>> {
        (**self).depth_on_path(start, id)
    }
    fn visit_path_facts(
        &self,
        start: &str,
        sink: &mut dyn FnMut(PathFact<'_>) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_path_facts(start, sink)
    }
    fn visit_skeleton(&self, sink: &mut dyn FnMut(SkeletonItem<'_>) -> Result<()>) -> Result<()> {
        (**self).visit_skeleton(sink)
    }
    fn visit_entries_by_id(
        &self,
        ids: &[&str],
        sink: &mut dyn FnMut(usize, Entry) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_entries_by_id(ids, sink)
    }
    fn visit_user_messages(
        &self,
        ids: &[&str],
        sink: &mut dyn FnMut(usize, bool) -> Result<()>,
    ) -> Result<()> {
        (**self).visit_user_messages(ids, sink)
    }
    fn leaf_id(&self) -> Result<Option<String>> {
        (**self).leaf_id()
    }
    fn leaf_moves(&self, limit: usize) -> Result<Vec<LeafMove>> {
        (**self).leaf_moves(limit)
    }
    fn create_entry_id(&self) -> Result<String> {
        (**self).create_entry_id()
    }
    fn set_leaf_id(&mut self, id: Option<&str>) -> Result<()> {
        (**self).set_leaf_id(id)
    }
    fn leaf_entry(&self, id: Option<&str>) -> Result<Entry> {
        (**self).leaf_entry(id)
    }
}

/// pi 1.6's whole path from `start` (`getBranch`), root first: `[]` when
/// `start` names no entry, ending (at its root side) at an entry whose
/// parent is missing. Built from the store's cached SDK walks
/// ([`SessionStorage::path_to_root_or_compaction`]) chained, each starting
/// at the parent of where the last stopped: one cached walk per compaction
/// on the path, never a scan, and no entry's facts parsed but the first of
/// each walk. A parent chain that loops is an error (pi would hang).
pub fn whole_path<S: SessionStorage + ?Sized>(st: &S, start: &str) -> Result<Vec<Entry>> {
    path_suffix(st, start, usize::MAX)
}

/// The root-side end of [`whole_path`] from `start` with at least `need`
/// entries (the whole path when it is shorter), root first: the walks
/// stop once they hold that many.
pub fn path_suffix<S: SessionStorage + ?Sized>(
    st: &S,
    start: &str,
    need: usize,
) -> Result<Vec<Entry>> {
    if !st.contains_entry(start)? {
        return Ok(Vec::new());
    }
    // Segments leaf side first; each is root side first.
    let mut segments: Vec<Vec<Entry>> = Vec::new();
    let mut held = 0usize;
    // Each walk's start: the walk from an entry is the same whenever it
    // is taken, so a start met twice means the chain loops.
    let mut starts: HashSet<String> = HashSet::new();
    let mut next = Some(start.to_owned());
    while let Some(id) = next.take() {
        if !starts.insert(id.clone()) {
            return Err(first_revisit(st, start));
        }
        let segment = match st.path_to_root_or_compaction(Some(&id)) {
            Ok(segment) => segment,
            // The SDK refuses a path with a missing parent; the app stops
            // there. Only the segment that reaches it is walked entry by entry.
            Err(Error::DanglingReference(_) | Error::EntryNotFound(_)) => step_walk(st, &id)?,
            Err(e) => return Err(e),
        };
        held += segment.len();
        if held < need {
            if let Some(parent) = segment.first().and_then(|f| f.facts().parent()) {
                if st.contains_entry(parent)? {
                    next = Some(parent.to_owned());
                }
            }
        }
        segments.push(segment);
    }
    let mut path = Vec::with_capacity(held);
    for segment in segments.into_iter().rev() {
        path.extend(segment);
    }
    Ok(path)
}

/// The error of a looping parent chain from `start`: the first entry the
/// walk meets again, found one lookup per entry.
pub(crate) fn first_revisit<S: SessionStorage + ?Sized>(st: &S, start: &str) -> Error {
    let mut seen = HashSet::new();
    let mut current = st.entry(start);
    loop {
        match current {
            Ok(Some(e)) => {
                if !seen.insert(e.id().to_owned()) {
                    return Error::ParentCycle(e.id().to_owned());
                }
                current = match e.facts().parent() {
                    Some(p) => st.entry(p),
                    None => Ok(None),
                };
            }
            Ok(None) => return Error::ParentCycle(start.to_owned()),
            Err(e) => return e,
        }
    }
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

/// What resuming `storage` would hit: the active path failing to read, or
/// its context failing to build. (Shared by every backend's check.)
pub fn reader_problems<S: SessionStorage + ?Sized>(storage: &S) -> Vec<String> {
    let active = storage
        .leaf_id()
        .and_then(|leaf| storage.path_to_root_or_compaction(leaf.as_deref()));
    let mut problems = Vec::new();
    if let Err(e) = &active {
        problems.push(format!("the active path: {e}"));
    }
    if let Err(e) = active.and_then(|path| build_context(&path, &ContextOptions::default())) {
        problems.push(format!("the context: {e}"));
    }
    problems
}

/// What `check` found in an archive: problems (stored data disagrees with
/// its log, or a read fails: exit status 8) and warnings (something pi
/// tolerates and every read here tolerates too, reported so it is known).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckFindings {
    /// What fails or disagrees.
    pub problems: Vec<String>,
    /// What reads tolerate.
    pub warnings: Vec<String>,
}

/// The warning for an entry whose parent is not in its session where no
/// compaction cuts the walk before it (a file cut from a longer one): pi
/// opens such a file, and its path stops at the entry.
pub fn missing_parent_warning(entry: &str, parent: &str) -> String {
    format!(
        "entry {entry} names parent {parent}, which is not in the session (a file cut from a longer one?); \
         pi opens it and a path through it stops there, at {entry}"
    )
}

/// What a path walk from an entry came to.
#[derive(Debug, Clone)]
enum WalkOutcome {
    /// It reached the root or a compaction's stop.
    Ok,
    /// It reached a parent that does not exist (reported once, as a
    /// warning on the entry that names it).
    Fails,
    /// It came back to an entry it had visited (the error's text).
    Cycle(String),
}

/// Everything a reader of `storage` relies on, tried: the path walk from
/// every entry (newest first, skipping entries an earlier walk covered), the
/// active path, the statistics and the context. The problems found, in log
/// order of the entry they concern; empty when every read would succeed.
/// (A walk that fails only at a root's missing parent is a warning of
/// [`contract_findings`], not a problem.)
pub fn contract_problems<S: SessionStorage + ?Sized>(storage: &S) -> Result<Vec<String>> {
    Ok(contract_findings(storage)?.problems)
}

/// [`contract_problems`] and its warnings: an entry whose parent is missing
/// where the walk from it fails there (no compaction stops it first) is
/// what pi opens, the path stopping at that entry — a warning naming it, as
/// the archives' `check` reports it; walks from entries below it fail for
/// the same reason and are not reported again. The active path and the
/// context still have to build (else a problem).
pub fn contract_findings<S: SessionStorage + ?Sized>(storage: &S) -> Result<CheckFindings> {
    let entries = storage.entries(0, None)?;
    let mut covered = std::collections::HashSet::new();
    let mut found = Vec::new();
    // What the walk from an entry came to, where known. A walk that arrives
    // at an entry with no stop pending goes on exactly as the walk from that
    // entry: its outcome is the memo's, so the whole check is linear in the
    // tree however it forks (a caterpillar was quadratic: 120 s at 30,000).
    let mut known: std::collections::HashMap<String, WalkOutcome> =
        std::collections::HashMap::new();
    for (i, e) in entries.iter().enumerate().rev() {
        if covered.contains(e.id()) {
            continue;
        }
        let mut fresh = Vec::new();
        let walked = walk_joining(
            Some(e.id()),
            |id| storage.entry(id),
            |id| {
                let is_known = known.contains_key(id);
                if !is_known {
                    fresh.push(id.to_owned());
                }
                is_known
            },
        );
        let outcome = match walked {
            Ok(Walk {
                end: WalkEnd::Joined(id),
                path,
            }) => {
                let outcome = known.get(&id).cloned().unwrap_or(WalkOutcome::Ok);
                if matches!(outcome, WalkOutcome::Ok) {
                    covered.extend(path.iter().map(|p| p.id().to_owned()));
                }
                outcome
            }
            Ok(walk) => {
                covered.extend(walk.path.iter().map(|p| p.id().to_owned()));
                WalkOutcome::Ok
            }
            Err(Error::DanglingReference(_)) => WalkOutcome::Fails,
            Err(err @ Error::ParentCycle(_)) => WalkOutcome::Cycle(err.to_string()),
            Err(err) => return Err(err),
        };
        // A cycle's message names where this walk re-entered it, which
        // depends on the start: not remembered.
        if !matches!(outcome, WalkOutcome::Cycle(_)) {
            for id in fresh {
                known.insert(id, outcome.clone());
            }
        }
        if let WalkOutcome::Cycle(err) = outcome {
            found.push((i, format!("entry {}: {err}", e.id())));
        }
    }
    found.sort();
    let mut problems: Vec<String> = found.into_iter().map(|(_, p)| p).collect();
    problems.extend(reader_problems(storage));
    if let Err(e) = storage.session_stats() {
        problems.push(format!("statistics: {e}"));
    }
    problems.dedup();
    let mut warnings = Vec::new();
    for e in &entries {
        let Some(parent) = e.facts().parent() else {
            continue;
        };
        if storage.entry(parent)?.is_some() {
            continue;
        }
        if let Err(Error::DanglingReference(missing)) =
            walk_joining(Some(e.id()), |id| storage.entry(id), |_| false)
        {
            if missing == parent {
                warnings.push(missing_parent_warning(e.id(), parent));
            }
        }
    }
    Ok(CheckFindings { problems, warnings })
}

/// The entries a streaming read hands its sink (`visit_entries`,
/// `visit_entries_of_type`), collected: what a store that streams its log
/// answers `entries` and `find_entries` with.
pub fn collect_entries(
    visit: impl FnOnce(&mut dyn FnMut(String) -> Result<()>) -> Result<()>,
) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    visit(&mut |text| {
        out.push(Entry::from_checked_text(text));
        Ok(())
    })?;
    Ok(out)
}

// Entries pi 1.6 parses that would make a session unreadable later (a
// `message` entry without a message): import keeps such a line verbatim
// out of the entries and reports it with its file and line; `appendEntry`
// takes it as pi's does (the SDK contract, alike on every backend), and
// reads then fail on it as pi's do.

/// What makes an entry unreadable later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// A `message` entry whose `message` is `null` or absent (pi 1.6's
    /// context and statistics fail on it, for good: the log is append-only).
    NoMessage(String),
}

/// Whether `e` would make its session unreadable later, and why. A
/// self-parent is not refused: pi 1.6 reads it (its tree shows it as a
/// root; the app differential's fixture holds one), so the archive stores
/// it as pi reads it.
pub fn unreadable_later(e: &Entry) -> Option<Unreadable> {
    if *e.entry_type() != crate::entry::EntryType::Message {
        return None;
    }
    let null = |raw: &str| raw.trim() == "null";
    let missing = match e.message_span() {
        Some(None) => true,
        Some(Some(span)) => e.json().get(span).is_none_or(null),
        None => crate::json::OrderedObject::parse(e.json())
            .map_or(true, |o| o.get("message").is_none_or(|m| null(m.get()))),
    };
    missing.then(|| Unreadable::NoMessage(e.id().to_owned()))
}
