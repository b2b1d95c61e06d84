//! The compact in-memory index of a session's tree shape, built from its
//! [`skeleton`](crate::skeleton) without any entry text: entry ids interned
//! to dense `u32` node numbers, per node its parent, log position, flag bits
//! and subtree size, and its children ordered as pi's `/tree` lists them.
//! `sessiontree tree` lays a tree out from it before it reads the few
//! entries it prints.
//!
//! Nothing here recurses over the tree: every walk is a loop or an explicit
//! stack, so a deep or caterpillar-shaped tree cannot overflow the stack.

use crate::contract::Contract;
use crate::entry::EntryType;
use crate::error::{Error, Result};
use crate::skeleton::{SkeletonEntry, SkeletonItem, SkeletonParent};
use crate::storage::SessionStorage;
use std::hash::BuildHasher;

/// No node (a root's parent, no leaf).
pub const NONE: u32 = u32::MAX;

// Flag bits of a node (public ones are what `Index::has` asks about).
/// An entry answers to this id (not only named as a parent or label target).
pub const PRESENT: u16 = 1;
/// A user message (kept when a run is folded).
pub const USER: u16 = 1 << 1;
/// A compaction or branch summary (kept when a run is folded).
pub const MILESTONE: u16 = 1 << 2;
/// Has a label (per the log's label entries, latest wins).
pub const LABELLED: u16 = 1 << 3;
/// On the active path.
pub const ACTIVE: u16 = 1 << 4;
/// The leaf.
pub const LEAF: u16 = 1 << 5;
/// Reachable from a root: in the forest, not in or under a parent cycle.
pub const REACHED: u16 = 1 << 6;
/// On the spine being built (guards the upward walk against cycles).
const SPINE: u16 = 1 << 7;
/// A message whose role the skeleton left open (its text says whether it is
/// [`USER`]); looked up only where a fold asks.
pub const ROLE_OPEN: u16 = 1 << 8;
/// `parent` holds a log position (a [`SkeletonParent::At`]) until the
/// skeleton is read, then the node at it.
const PARENT_AT: u16 = 1 << 9;

/// Entry ids interned to dense `u32` numbers: one string arena and an
/// open-addressing table of numbers (about 20 bytes per id beyond its text,
/// where a `HashMap<String, u32>` costs three times that).
struct Ids {
    arena: String,
    ends: Vec<usize>,
    slots: Vec<u32>,
    hasher: std::hash::RandomState,
}

impl Ids {
    fn new() -> Self {
        Ids {
            arena: String::new(),
            ends: Vec::new(),
            slots: vec![NONE; 1024],
            hasher: std::hash::RandomState::new(),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, n: u32) -> &str {
        let n = n as usize;
        let start = if n == 0 { 0 } else { self.ends[n - 1] };
        &self.arena[start..self.ends[n]]
    }

    /// The slot holding `id`, or the empty slot where it would go.
    fn slot(&self, id: &str) -> usize {
        let mask = self.slots.len() - 1;
        // Truncating the hash to usize keeps its low bits, which the mask uses.
        let mut s = self.hasher.hash_one(id) as usize & mask;
        while self.slots[s] != NONE && self.get(self.slots[s]) != id {
            s = (s + 1) & mask;
        }
        s
    }

    fn find(&self, id: &str) -> Option<u32> {
        Some(self.slots[self.slot(id)]).filter(|&n| n != NONE)
    }

    /// The number of `id`, and whether it is new.
    fn intern(&mut self, id: &str) -> Result<(u32, bool)> {
        let s = self.slot(id);
        if self.slots[s] != NONE {
            return Ok((self.slots[s], false));
        }
        let n = u32::try_from(self.len())
            .ok()
            .filter(|&n| n < NONE)
            .ok_or_else(|| Error::InvalidSession("too many entries for `tree`".into()))?;
        self.arena.push_str(id);
        self.ends.push(self.arena.len());
        self.slots[s] = n;
        // Keep the table at most half full, so probes stay short.
        if self.len() * 2 > self.slots.len() {
            let mut slots = vec![NONE; self.slots.len() * 2];
            let mask = slots.len() - 1;
            for m in 0..self.len() as u32 {
                let mut s = self.hasher.hash_one(self.get(m)) as usize & mask;
                while slots[s] != NONE {
                    s = (s + 1) & mask;
                }
                slots[s] = m;
            }
            self.slots = slots;
        }
        Ok((n, true))
    }
}

/// The session's shape, without its text: per node (an id), its parent,
/// log position, flags, subtree size and children (ordered as pi's `/tree`
/// lists them: the branch holding the leaf first, then log order).
pub struct Index {
    ids: Ids,
    parent: Vec<u32>,
    pos: Vec<u32>,
    flags: Vec<u16>,
    /// Entries in the subtree (0 for nodes not [`REACHED`]).
    size: Vec<u32>,
    /// `children[child_start[n]..child_start[n + 1]]` are `n`'s children.
    child_start: Vec<u32>,
    children: Vec<u32>,
    roots: Vec<u32>,
    leaf: u32,
    /// Entries read.
    entries: usize,
}

/// The id of the session's last entry in log order (the app contract's leaf on open).
fn last_entry_id(storage: &dyn SessionStorage) -> Result<Option<String>> {
    let Some(last) = storage.entry_count()?.checked_sub(1) else {
        return Ok(None);
    };
    Ok(storage
        .entries(last, Some(1))?
        .first()
        .map(|e| e.id().to_owned()))
}

impl Index {
    /// Reads the session's skeleton and builds the index.
    pub fn build(storage: &dyn SessionStorage) -> Result<Index> {
        let leaf_id = match storage.contract()? {
            // pi 1.6 resumes at the last entry, whatever the log's `leaf` entries say.
            Contract::App => last_entry_id(storage)?,
            Contract::Sdk => storage.leaf_id()?,
        };
        let mut idx = Index {
            ids: Ids::new(),
            parent: Vec::new(),
            pos: Vec::new(),
            flags: Vec::new(),
            size: Vec::new(),
            child_start: Vec::new(),
            children: Vec::new(),
            roots: Vec::new(),
            leaf: NONE,
            entries: 0,
        };
        // The node at each log position, for parents given by position.
        let mut at: Vec<u32> = Vec::new();
        storage.visit_skeleton(&mut |item| match item {
            SkeletonItem::Entry(e) => idx.add(&e, &mut at),
            SkeletonItem::Label { target, set } => {
                let t = idx.node(target)? as usize;
                if set {
                    idx.flags[t] |= LABELLED;
                } else {
                    idx.flags[t] &= !LABELLED;
                }
                Ok(())
            }
        })?;
        for n in 0..idx.ids.len() {
            if idx.flags[n] & PARENT_AT != 0 {
                idx.flags[n] &= !PARENT_AT;
                idx.parent[n] = at.get(idx.parent[n] as usize).copied().unwrap_or(NONE);
            }
        }
        drop(at);
        if let Some(id) = leaf_id {
            idx.leaf = idx
                .ids
                .find(&id)
                .filter(|&n| idx.has(n, PRESENT))
                .ok_or(Error::DanglingReference(id))?;
            idx.flags[idx.leaf as usize] |= LEAF;
            // The active path as pi's /tree marks it: every ancestor of the
            // leaf up to the root (a parent cycle just ends the walk).
            let mut n = idx.leaf;
            while n != NONE && idx.has(n, PRESENT) && !idx.has(n, ACTIVE) {
                idx.flags[n as usize] |= ACTIVE;
                n = idx.parent[n as usize];
            }
        }
        idx.link();
        Ok(idx)
    }

    /// The shape of an active path read alone, without the rest of the
    /// tree: `ids` root side first, each the child of the one before, all on
    /// the active path, the last the leaf if `leaf`. (`browse` draws a
    /// session's leaf from it before the whole shape is read; a repeated id
    /// ends the chain.)
    pub fn chain(ids: &[&str], leaf: bool) -> Result<Index> {
        let mut idx = Index {
            ids: Ids::new(),
            parent: Vec::new(),
            pos: Vec::new(),
            flags: Vec::new(),
            size: Vec::new(),
            child_start: Vec::new(),
            children: Vec::new(),
            roots: Vec::new(),
            leaf: NONE,
            entries: 0,
        };
        let mut prev = NONE;
        for (i, id) in ids.iter().enumerate() {
            if idx.ids.find(id).is_some() {
                break;
            }
            let n = idx.node(id)?;
            idx.pos[n as usize] = u32::try_from(i).unwrap_or(NONE - 1);
            idx.parent[n as usize] = prev;
            idx.flags[n as usize] = PRESENT | ACTIVE;
            idx.entries += 1;
            prev = n;
        }
        if leaf && prev != NONE {
            idx.leaf = prev;
            idx.flags[prev as usize] |= LEAF;
        }
        idx.link();
        Ok(idx)
    }

    /// The id of node `n`.
    pub fn id(&self, n: u32) -> &str {
        self.ids.get(n)
    }

    /// The node of `id`, if the index has one (an entry's, or only named as
    /// a parent or label target: see [`PRESENT`]).
    pub fn find(&self, id: &str) -> Option<u32> {
        self.ids.find(id)
    }

    /// The leaf's node ([`NONE`] for no leaf).
    pub fn leaf(&self) -> u32 {
        self.leaf
    }

    /// The roots of the forest, as pi's `/tree` orders them.
    pub fn roots(&self) -> &[u32] {
        &self.roots
    }

    /// Entries read from the skeleton.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Folds one entry in; where an id repeats, the entry later in the log
    /// replaces the other (it is the one `entry(id)` answers with).
    fn add(&mut self, e: &SkeletonEntry<'_>, at: &mut Vec<u32>) -> Result<()> {
        let n = self.node(e.id)?;
        let pos = u32::try_from(e.pos).unwrap_or(NONE - 1);
        if at.len() <= e.pos {
            at.resize(e.pos + 1, NONE);
        }
        at[e.pos] = n;
        self.entries += 1;
        let n = n as usize;
        if self.flags[n] & PRESENT != 0 && self.pos[n] > pos {
            return Ok(());
        }
        let mut flags = PRESENT | (self.flags[n] & LABELLED);
        match e.user {
            Some(true) => flags |= USER,
            Some(false) => {}
            None => flags |= ROLE_OPEN,
        }
        if e.entry_type == EntryType::Compaction.as_str()
            || e.entry_type == EntryType::BranchSummary.as_str()
        {
            flags |= MILESTONE;
        }
        self.pos[n] = pos;
        self.parent[n] = match e.parent {
            SkeletonParent::None => NONE,
            SkeletonParent::Id(p) => self.node(p)?,
            SkeletonParent::At(p) => {
                flags |= PARENT_AT;
                u32::try_from(p).unwrap_or(NONE)
            }
        };
        self.flags[n] = flags;
        Ok(())
    }

    /// The node of `id`, made if new.
    fn node(&mut self, id: &str) -> Result<u32> {
        let (n, new) = self.ids.intern(id)?;
        if new {
            self.parent.push(NONE);
            self.pos.push(0);
            self.flags.push(0);
        }
        Ok(n)
    }

    /// Whether `n` has `flag` (with several flag bits: any of them).
    pub fn has(&self, n: u32, flag: u16) -> bool {
        self.flags[n as usize] & flag != 0
    }

    /// Children lists (one flat array), roots, and subtree sizes, without recursion.
    fn link(&mut self) {
        let len = self.ids.len();
        let present = |s: &Self, n: u32| n != NONE && s.has(n, PRESENT);
        let mut start = vec![0u32; len + 1];
        for n in 0..len as u32 {
            let p = self.parent[n as usize];
            if present(self, n) && present(self, p) {
                start[p as usize + 1] += 1;
            }
        }
        for i in 0..len {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut children = vec![0u32; start[len] as usize];
        let mut roots = Vec::new();
        for n in 0..len as u32 {
            if !present(self, n) {
                continue;
            }
            let p = self.parent[n as usize];
            if present(self, p) {
                children[fill[p as usize] as usize] = n;
                fill[p as usize] += 1;
            } else {
                roots.push(n);
            }
        }
        drop(fill);
        // pi lists the branch holding the leaf first, then the others in log order.
        let key = |n: &u32| (self.flags[*n as usize] & ACTIVE == 0, self.pos[*n as usize]);
        for i in 0..len {
            let list = &mut children[start[i] as usize..start[i + 1] as usize];
            if list.len() > 1 {
                list.sort_by_key(key);
            }
        }
        roots.sort_by_key(key);
        // Preorder from the roots with an explicit stack; sizes summed in
        // reverse preorder (children before parents).
        let mut order = Vec::with_capacity(len);
        let mut stack: Vec<u32> = roots.iter().rev().copied().collect();
        while let Some(n) = stack.pop() {
            if self.flags[n as usize] & REACHED != 0 {
                continue;
            }
            self.flags[n as usize] |= REACHED;
            order.push(n);
            stack.extend(
                children[start[n as usize] as usize..start[n as usize + 1] as usize]
                    .iter()
                    .rev(),
            );
        }
        let mut size = vec![0u32; len];
        for &n in order.iter().rev() {
            size[n as usize] += 1;
            let p = self.parent[n as usize];
            if present(self, p) {
                size[p as usize] = size[p as usize].saturating_add(size[n as usize]);
            }
        }
        self.size = size;
        self.child_start = start;
        self.children = children;
        self.roots = roots;
    }

    /// The parent of `n` in the forest ([`NONE`] for a root, or a parent
    /// that is only named, not present).
    pub fn parent(&self, n: u32) -> u32 {
        let p = self.parent[n as usize];
        if p != NONE && self.has(p, PRESENT) {
            p
        } else {
            NONE
        }
    }

    /// The children of `n` in the forest (none for a node in or under a
    /// parent cycle, so no walk can loop).
    pub fn kids(&self, n: u32) -> &[u32] {
        if !self.has(n, REACHED) {
            return &[];
        }
        let n = n as usize;
        &self.children[self.child_start[n] as usize..self.child_start[n + 1] as usize]
    }

    /// The path down from `n` through each first child (the active child
    /// where there is one), stopping at the leaf if `to_leaf`.
    pub fn descend(&self, n: u32, to_leaf: bool) -> Vec<u32> {
        let mut path = vec![n];
        let mut cur = n;
        while !(to_leaf && cur == self.leaf) {
            match self.kids(cur).first() {
                Some(&c) => {
                    path.push(c);
                    cur = c;
                }
                None => break,
            }
        }
        path
    }

    /// The path from the root down to `n` (up the parents; a parent cycle ends it).
    pub fn ascend(&mut self, n: u32) -> Vec<u32> {
        let mut path = Vec::new();
        let mut cur = n;
        while cur != NONE && self.has(cur, PRESENT) && !self.has(cur, SPINE) {
            self.flags[cur as usize] |= SPINE;
            path.push(cur);
            cur = self.parent[cur as usize];
        }
        for &m in &path {
            self.flags[m as usize] &= !SPINE;
        }
        path.reverse();
        path
    }

    /// Whether a folded run still shows `n`: user messages (the turns, and
    /// the only `fork --position before` targets), compactions, branch
    /// summaries, labelled entries and the leaf.
    /// (A message with [`ROLE_OPEN`] is decided by the caller, from its text.)
    pub fn keeps(&self, n: u32) -> bool {
        self.has(n, USER | MILESTONE | LABELLED | LEAF)
    }

    /// Entries in the subtrees under `heads`.
    pub fn entries_under(&self, heads: &[u32]) -> u64 {
        heads
            .iter()
            .map(|&h| u64::from(self.size[h as usize]))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryStorage;
    use crate::entry::Entry;
    use crate::storage::SessionMetadata;

    fn message(id: &str, parent: Option<&str>, role: &str) -> Entry {
        let parent = parent.map_or("null".to_owned(), |p| format!("{p:?}"));
        Entry::from_json(&format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"t","message":{{"role":"{role}","content":"x"}}}}"#
        ))
        .unwrap()
    }

    fn index(entries: Vec<Entry>) -> Index {
        Index::build(&MemoryStorage::loaded(SessionMetadata::default(), entries)).unwrap()
    }

    fn ids(idx: &Index, nodes: &[u32]) -> Vec<String> {
        nodes.iter().map(|&n| idx.id(n).to_owned()).collect()
    }

    #[test]
    fn a_fork_lists_the_branch_holding_the_leaf_first_and_paths_run_root_down() {
        // u1 → a1 → {x1 (a side branch, first in the log), u2 → a2 (the leaf)}.
        let mut idx = index(vec![
            message("u1", None, "user"),
            message("a1", Some("u1"), "assistant"),
            message("x1", Some("a1"), "user"),
            message("u2", Some("a1"), "user"),
            message("a2", Some("u2"), "assistant"),
        ]);
        assert_eq!(idx.entries(), 5);
        let node = |id: &str| idx.find(id).unwrap();
        let (u1, a1, x1, u2, a2) = (node("u1"), node("a1"), node("x1"), node("u2"), node("a2"));
        assert_eq!(idx.leaf(), a2);
        assert_eq!(idx.roots(), &[u1]);
        assert_eq!(ids(&idx, idx.kids(a1)), ["u2", "x1"]);
        assert_eq!(
            (idx.parent(u2), idx.parent(x1), idx.parent(u1)),
            (a1, a1, NONE)
        );
        assert_eq!(ids(&idx, &idx.descend(u1, true)), ["u1", "a1", "u2", "a2"]);
        let up = idx.ascend(a2);
        assert_eq!(ids(&idx, &up), ["u1", "a1", "u2", "a2"]);
        let up = idx.ascend(x1);
        assert_eq!(ids(&idx, &up), ["u1", "a1", "x1"]);
        assert!(idx.has(u1, USER) && idx.has(x1, USER) && !idx.has(a1, USER));
        assert!(idx.has(a2, LEAF) && !idx.has(u2, LEAF));
        for n in [u1, a1, u2, a2] {
            assert!(idx.has(n, ACTIVE), "{}", idx.id(n));
        }
        assert!(!idx.has(x1, ACTIVE));
        assert_eq!(idx.entries_under(&[x1]), 1);
        assert_eq!(idx.entries_under(&[a1]), 4);
        assert!(idx.find("nowhere").is_none());
    }

    #[test]
    fn a_missing_parent_is_named_but_not_present() {
        let idx = index(vec![
            message("u1", None, "user"),
            message("m1", Some("ghost"), "user"),
        ]);
        let ghost = idx.find("ghost").expect("a named parent gets a node");
        assert!(!idx.has(ghost, PRESENT));
        assert!(idx.has(idx.find("m1").unwrap(), PRESENT));
        assert_eq!(
            idx.parent(idx.find("m1").unwrap()),
            NONE,
            "a parent only named is none"
        );
        assert_eq!(idx.entries(), 2);
    }

    #[test]
    fn a_chain_is_one_active_path_ending_at_the_leaf() {
        let idx = Index::chain(&["a", "b", "c", "b"], true).unwrap();
        assert_eq!(idx.entries(), 3, "a repeated id ends the chain");
        let (a, b, c) = (
            idx.find("a").unwrap(),
            idx.find("b").unwrap(),
            idx.find("c").unwrap(),
        );
        assert_eq!(idx.roots(), &[a]);
        assert_eq!((idx.parent(b), idx.parent(c)), (a, b));
        assert_eq!(idx.leaf(), c);
        assert!(idx.has(c, LEAF) && idx.has(a, ACTIVE) && !idx.has(a, LEAF));
        assert_eq!(idx.entries_under(&[b]), 2);
        assert_eq!(Index::chain(&[], true).unwrap().leaf(), NONE);
    }

    #[test]
    fn a_deep_chain_is_walked_without_recursion() {
        // Deep enough that a recursive walk would overflow a test thread's stack.
        let n = 200_000;
        let mut entries = vec![message("e0", None, "user")];
        for i in 1..n {
            entries.push(message(
                &format!("e{i}"),
                Some(&format!("e{}", i - 1)),
                "user",
            ));
        }
        let mut idx = index(entries);
        let leaf = idx.leaf();
        assert_eq!(idx.id(leaf), format!("e{}", n - 1));
        assert_eq!(idx.ascend(leaf).len(), n);
        assert_eq!(idx.descend(idx.roots()[0], true).len(), n);
        assert_eq!(idx.entries_under(idx.roots()), n as u64);
    }
}
