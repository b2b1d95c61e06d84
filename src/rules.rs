//! The contract's rules, written once: statistics, the path-to-root-or-compaction
//! walk and its stop rule, and fork selection. Backends supply lookups; these
//! functions decide the answers.

use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use crate::json::{js_number, js_number_text, JsString};
use serde_json::{json, Value};
use std::collections::HashSet;

/// Session statistics over every entry of the log (spec §6).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SessionStats {
    /// Number of `message` entries.
    pub message_count: u64,
    /// Sum of `cacheRead`.
    pub cached_tokens: f64,
    /// Sum of `input + cacheWrite`.
    pub uncached_tokens: f64,
    /// Sum of `input + output + cacheRead + cacheWrite`.
    pub total_tokens: f64,
    /// Sum of `cost.total`.
    pub cost_total: f64,
}

impl SessionStats {
    /// The stats as pi's `JSON.stringify` writes them, numbers spelled as JavaScript spells them.
    pub fn to_json_text(&self) -> String {
        let mut w = crate::json::ObjectWriter::new();
        w.raw("messageCount", &self.message_count.to_string())
            .raw("cachedTokens", &js_number_text(self.cached_tokens))
            .raw("uncachedTokens", &js_number_text(self.uncached_tokens))
            .raw("totalTokens", &js_number_text(self.total_tokens))
            .raw("costTotal", &js_number_text(self.cost_total));
        w.finish()
    }

    /// The stats as pi returns them (camelCase, JavaScript numbers).
    pub fn to_json(&self) -> Value {
        json!({
            "messageCount": self.message_count,
            "cachedTokens": js_number(self.cached_tokens),
            "uncachedTokens": js_number(self.uncached_tokens),
            "totalTokens": js_number(self.total_tokens),
            "costTotal": js_number(self.cost_total),
        })
    }
}

/// Folds entries into [`SessionStats`] in log order, the way pi sums them (so
/// floating-point results match bit for bit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsAccumulator {
    /// The running totals.
    pub stats: SessionStats,
    /// The first `message` entry without a message: pi crashes computing stats
    /// over it; we report it instead.
    pub broken_message: Option<String>,
}

impl StatsAccumulator {
    /// Adds one entry.
    pub fn add(&mut self, entry: &Entry) {
        let f = entry.facts();
        if f.entry_type == EntryType::Message {
            self.stats.message_count += 1;
            if f.message_missing && self.broken_message.is_none() {
                self.broken_message = Some(f.id.clone());
            }
        }
        if let Some(u) = f.usage {
            self.stats.cached_tokens += u.cache_read;
            self.stats.uncached_tokens += u.input + u.cache_write;
            self.stats.total_tokens += u.input + u.output + u.cache_read + u.cache_write;
            self.stats.cost_total += u.cost_total;
        }
    }

    /// The stats, or the error pi would have crashed with.
    pub fn result(&self) -> Result<SessionStats> {
        match &self.broken_message {
            Some(id) => Err(message_missing(id)),
            None => Ok(self.stats),
        }
    }
}

/// The facts a replay of the log maintains (spec §3, §6): the leaf, the session
/// name, the statistics and the number of entries. Every backend folds its log
/// through this one rule; labels are returned to the caller, which keeps them
/// where it indexes them (a map, a table).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replay {
    /// The leaf after the last entry (may name a missing entry).
    pub leaf: Option<String>,
    /// The session name, trimmed; `None` if blank.
    pub name: Option<JsString>,
    /// The statistics so far.
    pub stats: StatsAccumulator,
    /// Entries folded in.
    pub entry_count: u64,
}

impl Replay {
    /// Folds in one entry; returns the label change it makes, if it is a `label` entry.
    pub fn push<'e>(&mut self, entry: &'e Entry) -> Option<(&'e str, Option<JsString>)> {
        let f = entry.facts();
        if let Some(name) = f.session_name_update() {
            self.name = name;
        }
        self.stats.add(entry);
        self.leaf = f.leaf_after().map(str::to_owned);
        self.entry_count += 1;
        f.label_update()
    }
}

/// Applies a label change (from [`Replay::push`]) to a map of current labels:
/// a label replaces, `None` clears.
pub fn apply_label_change(
    labels: &mut std::collections::HashMap<String, JsString>,
    (target, label): (&str, Option<JsString>),
) {
    match label {
        Some(l) => labels.insert(target.to_owned(), l),
        None => labels.remove(target),
    };
}

/// The error for a `message` entry that has no message.
pub fn message_missing(id: &str) -> Error {
    Error::InvalidSession(format!("Entry {id} is a message entry without a message"))
}

/// Where the path walk goes after visiting an entry (spec §5).
#[derive(Debug, Default, Clone)]
pub struct StopRule {
    pending_stop: Option<String>,
}

impl StopRule {
    /// Whether a compaction seen below has set a stop the walk may still
    /// reach; without one, the rest of the walk is the walk from the next
    /// entry.
    fn is_pending(&self) -> bool {
        self.pending_stop.is_some()
    }

    /// Visits the next entry on the way up; `true` means the walk ends here (the
    /// entry included).
    pub fn stops_at(&mut self, entry: &Entry) -> bool {
        let f = entry.facts();
        if self.pending_stop.as_deref() == Some(f.id.as_str()) {
            return true;
        }
        if f.entry_type == EntryType::Compaction {
            if f.has_retained_tail {
                return true;
            }
            // pi keeps a non-string firstKeptEntryId as the pending stop too; it can
            // never equal an id, which is what `None` means here as well.
            self.pending_stop = f.first_kept_entry_id.clone();
        }
        false
    }
}

/// Why a path walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkEnd {
    /// There was nothing to walk (no start entry).
    Empty,
    /// At the root of the tree: the first entry has no parent.
    Root,
    /// Where the compaction rule cut it: the first entry is a compaction's
    /// first kept entry, or a compaction with a retained tail.
    CompactionStop,
    /// At this entry, which [`walk_joining`]'s caller knew the rest of the
    /// walk from (the path stops just below it).
    Joined(String),
}

/// A path walk's answer: the path, root-side first, and why it ended there.
#[derive(Debug, Clone)]
pub struct Walk {
    /// The path, root-side first.
    pub path: Vec<Entry>,
    /// Why it ended where it did.
    pub end: WalkEnd,
}

/// The path from `start` towards the root, cut at the compaction rule, root-side
/// first (spec §5). `lookup` finds the entry that currently answers to an id.
pub fn walk_to_root_or_compaction(
    start: Option<&str>,
    lookup: impl FnMut(&str) -> Result<Option<Entry>>,
) -> Result<Vec<Entry>> {
    walk(start, lookup).map(|w| w.path)
}

/// [`walk_to_root_or_compaction`], saying why the walk ended.
pub fn walk(
    start: Option<&str>,
    lookup: impl FnMut(&str) -> Result<Option<Entry>>,
) -> Result<Walk> {
    walk_joining(start, lookup, |_| false)
}

/// [`walk`] that may end early where its outcome is known: `joins` is asked
/// about every entry the walk reaches with no compaction stop pending (from
/// there on it goes exactly as the walk from that entry would), and `true`
/// ends it there, before that entry, with [`WalkEnd::Joined`].
pub fn walk_joining(
    start: Option<&str>,
    mut lookup: impl FnMut(&str) -> Result<Option<Entry>>,
    mut joins: impl FnMut(&str) -> bool,
) -> Result<Walk> {
    let Some(start) = start else {
        return Ok(Walk {
            path: Vec::new(),
            end: WalkEnd::Empty,
        });
    };
    let mut current = lookup(start)?.ok_or_else(|| Error::EntryNotFound(start.to_owned()))?;
    let mut path = Vec::new();
    let mut rule = StopRule::default();
    let mut seen = HashSet::new();
    let end = loop {
        if !rule.is_pending() && joins(current.id()) {
            break WalkEnd::Joined(current.id().to_owned());
        }
        if !seen.insert(current.id().to_owned()) {
            return Err(Error::ParentCycle(current.id().to_owned()));
        }
        path.push(current.clone());
        if rule.stops_at(&current) {
            break WalkEnd::CompactionStop;
        }
        let Some(parent) = current.facts().parent() else {
            break WalkEnd::Root;
        };
        current = lookup(parent)?.ok_or_else(|| Error::DanglingReference(parent.to_owned()))?;
    };
    path.reverse();
    Ok(Walk { path, end })
}

/// Where a fork copies from (spec §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForkPosition {
    /// Up to the parent of the target, which must be a user message (pi's default).
    #[default]
    Before,
    /// Up to and including the target.
    At,
}

impl ForkPosition {
    /// Parses `"before"` / `"at"`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "before" => Some(ForkPosition::Before),
            "at" => Some(ForkPosition::At),
            _ => None,
        }
    }
}

/// The leaf a fork's path starts from, or `None` for "copy the whole log" (spec §9).
/// `Ok(Some(None))` means an empty path (forking before a root user message).
pub fn fork_start(
    entry_id: Option<&str>,
    position: ForkPosition,
    lookup: impl FnOnce(&str) -> Result<Option<Entry>>,
) -> Result<Option<Option<String>>> {
    let Some(entry_id) = entry_id.filter(|id| !id.is_empty()) else {
        return Ok(None);
    };
    let target = lookup(entry_id)?.ok_or_else(|| Error::ForkTargetNotFound(entry_id.to_owned()))?;
    match position {
        ForkPosition::At => Ok(Some(Some(target.id().to_owned()))),
        ForkPosition::Before => {
            if !target.facts().is_user_message() {
                return Err(Error::ForkTargetNotUserMessage(entry_id.to_owned()));
            }
            Ok(Some(target.parent_id().map(str::to_owned)))
        }
    }
}
