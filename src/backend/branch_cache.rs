//! The materialized branch cache: how an append places an entry in the tree,
//! and how a path is read back with a bounded number of statements whatever
//! the depth and whatever the shape of the tree.
//!
//! The placement ([`place`], [`OpenTail`]), the compaction stop and the plan
//! of a path read ([`plan_path`]) are written here once, over a
//! [`CacheStore`]: the handful of statements a store runs on its own tables.
//! `backend::sqlite::branch_cache` and `backend::postgres::branch_cache` hold
//! only those statements, the path query and its rows. What differs in
//! PostgreSQL: every table is keyed by session first, segment ids count from
//! 1 in each session (so the schema distributes by session), entry rows are
//! inserted in batches after they are placed, and path rows come back ordered
//! by the server.
//!
//! # Invariants
//! 1. **Segments.** Every entry belongs to exactly one segment: a run of entries
//!    each the only child of the one before it. An entry extends its parent's
//!    segment when the parent is that segment's tail (has no child yet);
//!    otherwise it starts a new segment (a fork, or a root).
//! 2. **Depth.** An entry's depth is its distance from the root of its path
//!    (a root, or an entry whose parent does not exist, has depth 0). The entries
//!    of segment `s` have depths `first_depth..=tail_depth`, and
//!    `entry_key = s << 32 | depth`, so a segment's entries are one rowid range.
//! 3. **Segment tree.** `parent_segment` is the segment holding the parent of
//!    `s`'s first entry (`NULL` for a root); `position` is the number of
//!    segments on the path from the root to `s`, `s` included (1 for a root).
//!    A segment is created after its parent, so its id is larger: root-first
//!    order on a path is ascending segment id.
//! 4. **Nearest ancestry.** For every segment `s`, `segment_ancestry` holds
//!    one row for each of the [`ANCESTRY_BLOCK`] segments nearest to `s` on
//!    its path (`s` itself included; fewer near the root), with the depth
//!    range `from_depth..=to_depth` that segment contributes to `s`'s path;
//!    `s`'s own row has `to_depth = OPEN_END`. The ranges are disjoint and
//!    contiguous. A new segment copies its parent's block cut at the fork
//!    depth, less its root-most row: at most [`ANCESTRY_BLOCK`] rows,
//!    whatever the depth or the number of forks. A path read reads a block,
//!    then continues from the parent of the block's root-most segment.
//! 5. **Jump pointers.** `jump_segment` is an ancestor of `s` chosen by Myers'
//!    skew-binary rule ([`jump_for_child`]; `NULL` for a root): with `p` the
//!    parent and `j` its jump, `s` jumps to `j`'s jump when `p` and `j` are as
//!    far apart as `j` and its jump, otherwise to `p`. Then the segment on `s`'s
//!    path that holds a given depth is found in `O(log position)` steps
//!    ([`CacheStore::segment_holding`]), one statement.
//! 6. **Compactions.** Every compaction `c` has `stop_key`: where a walk that
//!    reaches `c` ends (spec §5). It depends only on `c` and its ancestors,
//!    because a compaction overwrites the pending stop: it is `c` itself with a
//!    retained tail; else `c`'s `firstKeptEntryId` when that entry is an
//!    ancestor no higher than the next compaction above; else that
//!    compaction's `stop_key`; `NULL` means the root.
//! 7. **Nearest compaction.** `segments.inherited_compaction` is the nearest
//!    compaction above the segment's first entry on its path, so the nearest
//!    compaction at or above any entry is one range query plus one row.
//! 8. **Dangling roots.** `segments.missing_root_parent` is the missing
//!    `parentId` of the path's root entry; a walk that runs to the root of
//!    such a path fails with `invalid_session`. An entry whose id is such a
//!    missing parent is refused, since it would re-parent existing entries.
//!
//! # Bounds
//! With `N` entries and `F` forks in a session, `k` segments on a path, `A`
//! entries in an answer and `B` = [`ANCESTRY_BLOCK`] (8), for **every** tree
//! shape (a fork at the tip again and again, a caterpillar with a side branch
//! at every entry, a broom):
//! * **space**: one `segments` row per segment (`F` + roots), at most `B`
//!   ancestry rows per segment, one `compactions` row per compaction:
//!   `O(N + B·F)` rows, never `O(F²)`;
//! * **append**: extending a segment writes no cache row until the write ends
//!   (then one update, [`OpenTail`]); starting a segment writes its row and at
//!   most `B` ancestry rows — the worst case of any single append; a
//!   compaction adds its own row after an `O(log k)` depth search;
//! * **leaf move**: an append (the `leaf` entry) plus its `leaf_events` row;
//!   the first append after it starts a segment: at most `B + 1` rows, at any
//!   depth;
//! * **path read**: five statements; the walk takes one step per block
//!   (`k / B + 1` steps) and reads one ancestry row per segment the answer
//!   spans, each of which contributes at least one entry to the answer, so
//!   rows read ≤ `2A + k / B + 1`;
//! * **open**: `O(1)` rows (the session row).
//!
//! # Why bounded blocks, and not full ancestry or Fenwick blocks
//! Materializing each segment's whole ancestry (version 1 of this cache)
//! copies a row per fork above a new segment: `O(F²)` on "regenerate the last
//! reply". A Fenwick decomposition (segment `p` stores its `lowbit(p)` nearest
//! ancestors) is `O(F log F)` on a single chain but `O(F²)` on a broom of
//! brooms (many siblings at a position `2^j`, each copying `2^j` rows), and
//! writes `O(F)` rows in a single append. A walk over parent pointers alone
//! is `O(1)` per append but pays a recursive step per segment, which on the
//! regenerate shape (a segment every two or three entries of the path)
//! doubled the cost of a path read. A fixed block of the nearest `B` segments
//! keeps every append `O(B)`, reads each segment's range from one contiguous
//! block, and needs a recursive step only every `B` segments; the jump
//! pointers keep the one query that is not answer-sized — "is this entry an
//! ancestor?" for a compaction's `firstKeptEntryId` — at `O(log k)`.
//! `B` = 8 was measured (`bench --ops shapes`, 100,000 entries, regenerate
//! shape against linear, path read per row / leaf move): 1.9× / 1.05× at
//! `B` = 4, 1.7× / 1.2× at 8, 2.7× / 1.7× at 16 — larger blocks cost more
//! per fork and make the ancestry table outgrow the page cache.
//! The SQLite archive's `check.rs` (`verify_branch_cache`) rebuilds all of
//! this from `entries` and compares.

use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};

pub use crate::backend::branch_rules::{
    entry_key, jump_for_child, split_key, Segment, ANCESTRY_BLOCK, OPEN_END,
};

/// A new segment's row before the store has numbered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewSegment<'a> {
    /// The segment it forks from (`None` for a root).
    pub parent: Option<i64>,
    /// Depth of its first entry (also its `tail_depth` until it grows).
    pub first_depth: i64,
    /// Segments on the path from the root to it, itself included.
    pub position: i64,
    /// Its skew-binary jump pointer (`None` for a root).
    pub jump: Option<i64>,
    /// Nearest compaction above its first entry.
    pub inherited_compaction: Option<i64>,
    /// Missing parent id of its path's root.
    pub missing_root_parent: Option<&'a str>,
}

/// The statements a store runs on its branch cache tables, for one session,
/// inside the caller's transaction: all [`place`] and [`plan_path`] ask of
/// a store, so that the rules above are written once. Each method is one
/// indexed statement (or none).
pub trait CacheStore {
    /// Segment `id`'s row.
    fn segment(&mut self, id: i64) -> Result<Segment>;
    /// Segment `id`'s `position` and `jump_segment` (what the jump rule reads).
    fn position_and_jump(&mut self, id: i64) -> Result<(i64, Option<i64>)>;
    /// The key of the entry answering to `id` in the session; a store that
    /// inserts entry rows after placing them answers for those too.
    fn key_of(&mut self, id: &str) -> Result<Option<i64>>;
    /// The largest compaction key in `from..=to` (two keys of one segment).
    fn last_compaction_in(&mut self, from: i64, to: i64) -> Result<Option<i64>>;
    /// Invariant 5's search: the segment on `from`'s path that holds `depth`
    /// (the deepest one whose first entry is at or above it), following jump
    /// pointers while they do not overshoot. One statement; `O(log
    /// position)` rows.
    fn segment_holding(&mut self, from: i64, depth: i64) -> Result<Option<i64>>;
    /// The `stop_key` of the compaction at `key` (invariant 6).
    fn stop_of(&mut self, key: i64) -> Result<Option<i64>>;
    /// Whether one of the session's roots has a missing parent (invariant 8).
    fn has_dangling_roots(&mut self) -> Result<bool>;
    /// Whether `id` is the missing parent of one of the session's roots.
    fn is_missing_root_parent(&mut self, id: &str) -> Result<bool>;
    /// Inserts a segment row (its `tail_depth` its `first_depth`) and returns
    /// its id, larger than the id of any segment of the session (invariant 3).
    fn insert_segment(&mut self, new: &NewSegment<'_>) -> Result<i64>;
    /// Inserts segment `id`'s own ancestry row: `from_depth..=to_depth` of itself.
    fn insert_own_ancestry(&mut self, id: i64, from_depth: i64, to_depth: i64) -> Result<()>;
    /// Copies `parent`'s ancestry block to its new `child`, each range cut at
    /// depth `cut`: the `ANCESTRY_BLOCK - 1` rows nearest the child.
    fn copy_ancestry(&mut self, child: i64, parent: i64, cut: i64) -> Result<()>;
    /// Writes segment `id`'s `tail_depth`.
    fn set_tail_depth(&mut self, id: i64, tail_depth: i64) -> Result<()>;
    /// Inserts the `compactions` row of the compaction at `key`.
    fn insert_compaction(&mut self, key: i64, stop: Option<i64>) -> Result<()>;
}

/// The segment the last entry of a write went into, kept in memory so that a
/// run of appends (an import, a chat turn) reads its row once and writes its
/// `tail_depth` once: [`OpenTail::flush`] must run before the transaction
/// commits (the writer does it when it finishes).
#[derive(Debug, Default)]
pub struct OpenTail {
    /// The last entry placed: its id and key.
    last: Option<(String, i64)>,
    /// Its segment as it is now (its `tail_depth` may be ahead of the row).
    segment: Option<Segment>,
    /// Whether the row's `tail_depth` is behind.
    dirty: bool,
    /// Whether the session has a dangling root (invariant 8), read at the
    /// first entry of the write and kept up to date by it: a session without
    /// one needs no re-parenting check per entry.
    dangling_roots: Option<bool>,
}

impl OpenTail {
    /// Writes the open segment's `tail_depth` if it moved.
    pub fn flush<S: CacheStore>(&mut self, store: &mut S) -> Result<()> {
        if let (true, Some(open)) = (self.dirty, &self.segment) {
            store.set_tail_depth(open.id, open.tail_depth)?;
        }
        self.dirty = false;
        Ok(())
    }

    fn switch_to<S: CacheStore>(&mut self, store: &mut S, segment: Segment) -> Result<()> {
        self.flush(store)?;
        self.segment = Some(segment);
        Ok(())
    }
}

/// Where an entry goes in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Its entry key.
    pub key: i64,
}

/// Places a new entry: extends its parent's segment or starts a new one, and
/// maintains the segment, jump, compaction and root facts (invariants 1–8).
/// Must run inside the append's transaction.
pub fn place<S: CacheStore>(
    store: &mut S,
    entry: &Entry,
    tail: &mut OpenTail,
) -> Result<Placement> {
    let f = entry.facts();
    if has_dangling_roots(store, tail)? {
        refuse_reparenting(store, &f.id)?;
    }
    let parent_key = match (f.parent(), &tail.last) {
        (Some(p), Some((last_id, last_key))) if last_id == p => Some(*last_key),
        (Some(p), _) => store.key_of(p)?,
        (None, _) => None,
    };
    let key = match parent_key {
        None => {
            if f.parent().is_some() {
                tail.dangling_roots = Some(true);
            }
            let root = new_segment(store, None, 0, None, f.parent())?;
            let key = entry_key(root.id, 0);
            tail.switch_to(store, root)?;
            key
        }
        Some(pk) => {
            let (pseg_id, pdepth) = split_key(pk);
            let pseg = match &tail.segment {
                Some(open) if open.id == pseg_id => open.clone(),
                _ => store.segment(pseg_id)?,
            };
            if pseg.tail_depth == pdepth {
                if tail.segment.as_ref().map(|open| open.id) != Some(pseg_id) {
                    tail.switch_to(store, pseg)?;
                }
                if let Some(open) = tail.segment.as_mut() {
                    open.tail_depth = pdepth + 1;
                    tail.dirty = true;
                }
                entry_key(pseg_id, pdepth + 1)
            } else {
                let inherited = nearest_compaction(store, &pseg, pdepth)?;
                let missing = pseg.missing_root_parent.as_deref();
                let fork = new_segment(store, Some(&pseg), pdepth + 1, inherited, missing)?;
                let key = entry_key(fork.id, pdepth + 1);
                tail.switch_to(store, fork)?;
                key
            }
        }
    };
    tail.last = Some((f.id.clone(), key));
    if f.entry_type == EntryType::Compaction {
        let stop = compaction_stop(store, entry, key)?;
        store.insert_compaction(key, stop)?;
    }
    Ok(Placement { key })
}

fn has_dangling_roots<S: CacheStore>(store: &mut S, tail: &mut OpenTail) -> Result<bool> {
    if let Some(known) = tail.dangling_roots {
        return Ok(known);
    }
    let found = store.has_dangling_roots()?;
    tail.dangling_roots = Some(found);
    Ok(found)
}

/// Invariant 8: an entry whose id is the missing parent of a stored root is refused.
fn refuse_reparenting<S: CacheStore>(store: &mut S, id: &str) -> Result<()> {
    if store.is_missing_root_parent(id)? {
        return Err(Error::InvalidEntry(format!(
            "Entry {id} is the missing parent of entries already stored; appending it now would re-parent them"
        )));
    }
    Ok(())
}

/// Writes a new segment's row and its ancestry block (invariants 3–5, 7, 8).
fn new_segment<S: CacheStore>(
    store: &mut S,
    parent: Option<&Segment>,
    first_depth: i64,
    inherited_compaction: Option<i64>,
    missing_root_parent: Option<&str>,
) -> Result<Segment> {
    let (position, jump) = match parent {
        None => (1, None),
        Some(p) => (
            p.position + 1,
            Some(jump_for_child((p.id, p.position, p.jump), |id| {
                store.position_and_jump(id)
            })?),
        ),
    };
    let new = NewSegment {
        parent: parent.map(|p| p.id),
        first_depth,
        position,
        jump,
        inherited_compaction,
        missing_root_parent,
    };
    let id = store.insert_segment(&new)?;
    // Its own row, then its parent's block cut at the fork, less the
    // root-most row (invariant 4).
    store.insert_own_ancestry(id, first_depth, OPEN_END)?;
    if let Some(p) = new.parent {
        store.copy_ancestry(id, p, first_depth - 1)?;
    }
    Ok(Segment {
        id,
        parent: new.parent,
        first_depth,
        tail_depth: first_depth,
        position,
        jump,
        inherited_compaction,
        missing_root_parent: missing_root_parent.map(str::to_owned),
    })
}

/// The nearest compaction at or above `depth` in `seg` on its path (invariant 7).
fn nearest_compaction<S: CacheStore>(
    store: &mut S,
    seg: &Segment,
    depth: i64,
) -> Result<Option<i64>> {
    if depth >= seg.first_depth {
        let found = store
            .last_compaction_in(entry_key(seg.id, seg.first_depth), entry_key(seg.id, depth))?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(seg.inherited_compaction)
}

/// Whether the entry at `key` lies on the path of `seg` at a depth below `depth`.
fn is_ancestor<S: CacheStore>(store: &mut S, key: i64, seg: &Segment, depth: i64) -> Result<bool> {
    let (kseg, kdepth) = split_key(key);
    if kdepth >= depth {
        return Ok(false);
    }
    if kdepth >= seg.first_depth {
        return Ok(kseg == seg.id);
    }
    // The segment holding `kdepth` on the path contributes every depth from
    // its first entry to the fork below it, `kdepth` included.
    Ok(store.segment_holding(seg.id, kdepth)? == Some(kseg))
}

/// Invariant 6: where a walk reaching the compaction `entry`, placed at
/// `key`, stops.
fn compaction_stop<S: CacheStore>(store: &mut S, entry: &Entry, key: i64) -> Result<Option<i64>> {
    let f = entry.facts();
    if f.has_retained_tail {
        return Ok(Some(key));
    }
    let (seg_id, depth) = split_key(key);
    let seg = store.segment(seg_id)?;
    let above = if depth > seg.first_depth {
        nearest_compaction(store, &seg, depth - 1)?
    } else {
        seg.inherited_compaction
    };
    if let Some(kept) = &f.first_kept_entry_id {
        if let Some(kept_key) = store.key_of(kept)? {
            let below_next = above.is_none_or(|a| split_key(kept_key).1 >= split_key(a).1);
            if below_next && is_ancestor(store, kept_key, &seg, depth)? {
                return Ok(Some(kept_key));
            }
        }
    }
    match above {
        Some(a) => store.stop_of(a),
        None => Ok(None),
    }
}

/// Where a path read starts and where it stops: the start's segment and
/// depth, and the depth of the root-side end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPlan {
    /// The start's segment.
    pub segment: i64,
    /// The start's depth.
    pub depth: i64,
    /// The depth of the path's root-side entry (the compaction stop's, or 0).
    pub low: i64,
}

/// The compaction stop rule through the indexes (invariants 5–7): at most
/// four statements, whatever the depth, counted into `statements` as the
/// bounds count them (the start's key, its segment and its nearest
/// compaction as three even when the caller read the key already). `start_key`
/// is the start's entry key where the caller read it.
pub fn plan_path<S: CacheStore>(
    store: &mut S,
    start: &str,
    start_key: Option<i64>,
    statements: &mut u32,
) -> Result<PathPlan> {
    let key = match start_key {
        Some(key) => key,
        None => store
            .key_of(start)?
            .ok_or_else(|| Error::EntryNotFound(start.to_owned()))?,
    };
    let (seg_id, depth) = split_key(key);
    let seg = store.segment(seg_id)?;
    let nearest = nearest_compaction(store, &seg, depth)?;
    *statements += 3;
    let stop = match nearest {
        Some(c) => {
            *statements += 1;
            store.stop_of(c)?
        }
        None => None,
    };
    let low = match stop {
        Some(s) => split_key(s).1,
        None => {
            if let Some(missing) = &seg.missing_root_parent {
                // The only stored entry a root may name as its missing parent
                // is itself (any other is refused, invariant 8): a cycle, as
                // the JSONL and memory backends' walk reports it.
                *statements += 1;
                return Err(match store.key_of(missing)? {
                    Some(_) => Error::ParentCycle(missing.clone()),
                    None => Error::DanglingReference(missing.clone()),
                });
            }
            0
        }
    };
    Ok(PathPlan {
        segment: seg_id,
        depth,
        low,
    })
}

/// One row of `segment_ancestry` (invariant 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AncestryRow {
    /// The segment whose block it is in.
    pub segment: i64,
    /// First depth the ancestor contributes to `segment`'s path.
    pub from_depth: i64,
    /// The ancestor (or `segment` itself).
    pub ancestor: i64,
    /// Last depth it contributes ([`OPEN_END`] for the segment's own row).
    pub to_depth: i64,
}

/// A store that can take a batch of placements' cache rows at once: the
/// statements [`Batched`] needs beyond [`CacheStore`]'s, so that a bulk
/// write (a sync) places every entry in memory through [`place`] — the one
/// placement — and writes the rows it produced in a few statements per
/// batch instead of a few per fork.
pub trait BatchStore: CacheStore {
    /// The id the session's next segment gets (ids only grow, invariant 3).
    fn next_segment_id(&mut self) -> Result<i64>;
    /// Segment `id`'s stored ancestry block.
    fn ancestry_block(&mut self, id: i64) -> Result<Vec<AncestryRow>>;
    /// Writes `rows` (new segments with their blocks, moved tails of stored
    /// segments, new compactions) and numbers the session's segments up to
    /// the last new one.
    fn write_batch(&mut self, rows: &CacheRows) -> Result<()>;
}

/// The cache rows a batch wrote and the store has not, and what the batch
/// knows of rows already stored (read once, kept up to date).
#[derive(Debug, Default)]
pub struct CacheRows {
    /// The next id to hand out, once read from the store.
    next_id: Option<i64>,
    /// The first id this batch handed out: segments from it on were all
    /// created here, so their compactions are all in [`CacheRows::compactions`].
    first_id: Option<i64>,
    /// Every segment row the batch knows, current (tails moved here included).
    known: std::collections::HashMap<i64, Segment>,
    /// Known ancestry blocks (rows never change once written).
    blocks: std::collections::HashMap<i64, Vec<AncestryRow>>,
    /// Compactions placed by this batch, by key, with their stops.
    compactions: std::collections::BTreeMap<i64, Option<i64>>,
    /// Ids of the segments not written yet.
    unwritten: std::collections::BTreeSet<i64>,
    /// Stored segments whose `tail_depth` moved, not written yet.
    moved: std::collections::BTreeSet<i64>,
    /// Compactions not written yet.
    unwritten_compactions: Vec<i64>,
}

impl CacheRows {
    /// Rows kept in memory past a write, at most: past it the knowledge of
    /// stored rows is dropped (it is re-read as needed), so memory stays
    /// bounded however long the sync.
    const KEEP: usize = 50_000;

    /// The segments to insert, ordered by id.
    pub fn new_segments(&self) -> impl Iterator<Item = &Segment> {
        self.unwritten.iter().filter_map(|id| self.known.get(id))
    }

    /// The ancestry rows of the segments to insert.
    pub fn new_ancestry(&self) -> impl Iterator<Item = &AncestryRow> {
        self.unwritten
            .iter()
            .filter_map(|id| self.blocks.get(id))
            .flatten()
    }

    /// Stored segments whose `tail_depth` moved: `(id, tail_depth)`.
    pub fn moved_tails(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.moved
            .iter()
            .filter_map(|id| self.known.get(id).map(|s| (*id, s.tail_depth)))
    }

    /// The compactions to insert: `(key, stop_key)`.
    pub fn new_compactions(&self) -> impl Iterator<Item = (i64, Option<i64>)> + '_ {
        self.unwritten_compactions
            .iter()
            .map(|k| (*k, self.compactions.get(k).copied().flatten()))
    }

    /// Whether there is nothing to write.
    pub fn is_clean(&self) -> bool {
        self.unwritten.is_empty() && self.moved.is_empty() && self.unwritten_compactions.is_empty()
    }

    /// Writes what is unwritten through `store` (inside the write's
    /// transaction), then forgets it as unwritten.
    pub fn write<S: BatchStore>(&mut self, store: &mut S) -> Result<()> {
        if self.is_clean() {
            return Ok(());
        }
        store.write_batch(self)?;
        self.unwritten.clear();
        self.moved.clear();
        self.unwritten_compactions.clear();
        if self.known.len() + self.blocks.len() + self.compactions.len() > Self::KEEP {
            self.known.clear();
            self.blocks.clear();
            self.compactions.clear();
            self.first_id = None;
        }
        Ok(())
    }

    /// Whether every compaction of segment `id` is in memory.
    fn holds_all_compactions_of(&self, id: i64) -> bool {
        self.first_id.is_some_and(|first| id >= first)
    }
}

/// A [`BatchStore`] with a batch's [`CacheRows`] in front of it: reads see
/// the batch's rows, writes go to memory until [`CacheRows::write`]. Each
/// method answers as the store's statement would after the batch's writes.
pub struct Batched<'a, S> {
    /// The store.
    pub store: S,
    /// The batch's rows.
    pub rows: &'a mut CacheRows,
}

impl<S: BatchStore> Batched<'_, S> {
    fn known(&mut self, id: i64) -> Result<&Segment> {
        if !self.rows.known.contains_key(&id) {
            let row = self.store.segment(id)?;
            self.rows.known.insert(id, row);
        }
        self.rows
            .known
            .get(&id)
            .ok_or_else(|| Error::Corrupt(format!("segment {id} vanished from the batch")))
    }
}

impl<S: BatchStore> CacheStore for Batched<'_, S> {
    fn segment(&mut self, id: i64) -> Result<Segment> {
        self.known(id).cloned()
    }

    fn position_and_jump(&mut self, id: i64) -> Result<(i64, Option<i64>)> {
        let s = self.known(id)?;
        Ok((s.position, s.jump))
    }

    fn key_of(&mut self, id: &str) -> Result<Option<i64>> {
        self.store.key_of(id)
    }

    fn last_compaction_in(&mut self, from: i64, to: i64) -> Result<Option<i64>> {
        let here = self
            .rows
            .compactions
            .range(from..=to)
            .next_back()
            .map(|(k, _)| *k);
        if self.rows.holds_all_compactions_of(split_key(from).0) {
            return Ok(here);
        }
        Ok(self.store.last_compaction_in(from, to)?.max(here))
    }

    /// The store's search, with the hops through this batch's segments taken
    /// in memory.
    fn segment_holding(&mut self, from: i64, depth: i64) -> Result<Option<i64>> {
        let mut at = from;
        loop {
            if !self.rows.unwritten.contains(&at) {
                return self.store.segment_holding(at, depth);
            }
            let s = self.known(at)?.clone();
            if s.first_depth <= depth {
                return Ok(Some(at));
            }
            let jump_first = match s.jump {
                Some(j) => Some(self.known(j)?.first_depth),
                None => None,
            };
            at = match (jump_first, s.jump, s.parent) {
                (Some(jf), Some(j), _) if jf > depth => j,
                (_, _, Some(p)) => p,
                _ => return Ok(None),
            };
        }
    }

    fn stop_of(&mut self, key: i64) -> Result<Option<i64>> {
        match self.rows.compactions.get(&key) {
            Some(stop) => Ok(*stop),
            None => self.store.stop_of(key),
        }
    }

    fn has_dangling_roots(&mut self) -> Result<bool> {
        let here = self.rows.unwritten.iter().any(|id| {
            self.rows
                .known
                .get(id)
                .is_some_and(|s| s.parent.is_none() && s.missing_root_parent.is_some())
        });
        Ok(here || self.store.has_dangling_roots()?)
    }

    fn is_missing_root_parent(&mut self, id: &str) -> Result<bool> {
        let here = self.rows.unwritten.iter().any(|s| {
            self.rows
                .known
                .get(s)
                .is_some_and(|s| s.parent.is_none() && s.missing_root_parent.as_deref() == Some(id))
        });
        Ok(here || self.store.is_missing_root_parent(id)?)
    }

    fn insert_segment(&mut self, new: &NewSegment<'_>) -> Result<i64> {
        let id = match self.rows.next_id {
            Some(id) => id,
            None => self.store.next_segment_id()?,
        };
        self.rows.next_id = Some(id + 1);
        self.rows.first_id.get_or_insert(id);
        self.rows.unwritten.insert(id);
        self.rows.known.insert(
            id,
            Segment {
                id,
                parent: new.parent,
                first_depth: new.first_depth,
                tail_depth: new.first_depth,
                position: new.position,
                jump: new.jump,
                inherited_compaction: new.inherited_compaction,
                missing_root_parent: new.missing_root_parent.map(str::to_owned),
            },
        );
        Ok(id)
    }

    fn insert_own_ancestry(&mut self, id: i64, from_depth: i64, to_depth: i64) -> Result<()> {
        self.rows.blocks.entry(id).or_default().push(AncestryRow {
            segment: id,
            from_depth,
            ancestor: id,
            to_depth,
        });
        Ok(())
    }

    /// As the stores' statement: the parent's rows nearest the child
    /// (largest `from_depth`), each cut at `cut`.
    fn copy_ancestry(&mut self, child: i64, parent: i64, cut: i64) -> Result<()> {
        if !self.rows.blocks.contains_key(&parent) {
            let block = self.store.ancestry_block(parent)?;
            self.rows.blocks.insert(parent, block);
        }
        let mut block = self.rows.blocks.get(&parent).cloned().unwrap_or_default();
        block.sort_by_key(|r| std::cmp::Reverse(r.from_depth));
        let copied = block
            .into_iter()
            .take(usize::try_from(ANCESTRY_BLOCK - 1).unwrap_or(0))
            .map(|r| AncestryRow {
                segment: child,
                to_depth: r.to_depth.min(cut),
                ..r
            });
        self.rows.blocks.entry(child).or_default().extend(copied);
        Ok(())
    }

    fn set_tail_depth(&mut self, id: i64, tail_depth: i64) -> Result<()> {
        if !self.rows.known.contains_key(&id) {
            // Unknown here: a row the batch never read; read it so that the
            // write below has the whole row to answer later reads from.
            self.known(id)?;
        }
        if let Some(s) = self.rows.known.get_mut(&id) {
            s.tail_depth = tail_depth;
        }
        if !self.rows.unwritten.contains(&id) {
            self.rows.moved.insert(id);
        }
        Ok(())
    }

    fn insert_compaction(&mut self, key: i64, stop: Option<i64>) -> Result<()> {
        self.rows.compactions.insert(key, stop);
        self.rows.unwritten_compactions.push(key);
        Ok(())
    }
}
