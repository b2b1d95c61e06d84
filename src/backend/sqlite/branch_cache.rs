//! The materialized branch cache: how an append places an entry in the tree,
//! and how a path is read back with a bounded number of statements whatever
//! the depth and whatever the shape of the tree.
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
//!    ([`segment_holding`]), one statement.
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
//! `check.rs` (`verify_branch_cache`) rebuilds all of this from `entries` and compares.

use super::codec::Codec;
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;

pub use crate::backend::branch_rules::{
    entry_key, jump_for_child, split_key, Segment, ANCESTRY_BLOCK, DEPTH_BITS, OPEN_END,
};

fn sql(context: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| Error::sqlite(context, e)
}

pub(super) fn segment(conn: &Connection, id: i64) -> Result<Segment> {
    conn.prepare_cached(
        "SELECT parent_segment, first_depth, tail_depth, position, jump_segment,
                inherited_compaction, missing_root_parent
         FROM segments WHERE segment_id = ?1",
    )
    .and_then(|mut s| {
        s.query_row([id], |r| {
            Ok(Segment {
                id,
                parent: r.get(0)?,
                first_depth: r.get(1)?,
                tail_depth: r.get(2)?,
                position: r.get(3)?,
                jump: r.get(4)?,
                inherited_compaction: r.get(5)?,
                missing_root_parent: r.get(6)?,
            })
        })
    })
    .map_err(sql("reading a segment"))
}

fn position_and_jump(conn: &Connection, id: i64) -> Result<(i64, Option<i64>)> {
    conn.prepare_cached("SELECT position, jump_segment FROM segments WHERE segment_id = ?1")
        .and_then(|mut s| s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(sql("reading a jump pointer"))
}

/// The key of the entry answering to `id` in the session.
pub fn key_of(conn: &Connection, session_key: i64, id: &str) -> Result<Option<i64>> {
    conn.prepare_cached("SELECT entry_key FROM entries WHERE session_key = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![session_key, id], |r| r.get(0))
                .optional()
        })
        .map_err(sql("looking up an entry id"))
}

/// The nearest compaction at or above `depth` in `seg` on its path.
fn nearest_compaction(conn: &Connection, seg: &Segment, depth: i64) -> Result<Option<i64>> {
    if depth >= seg.first_depth {
        let found: Option<i64> = conn
            .prepare_cached(
                "SELECT max(entry_key) FROM compactions WHERE entry_key BETWEEN ?1 AND ?2",
            )
            .and_then(|mut s| {
                s.query_row(
                    params![entry_key(seg.id, seg.first_depth), entry_key(seg.id, depth)],
                    |r| r.get(0),
                )
            })
            .map_err(sql("finding the nearest compaction"))?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(seg.inherited_compaction)
}

/// [`segment_holding`]'s statement (`?1` the segment, `?2` the depth).
pub const SEGMENT_HOLDING_QUERY: &str =
    "WITH RECURSIVE up (seg, first, parent, jump, jump_first) AS (
     SELECT s.segment_id, s.first_depth, s.parent_segment, s.jump_segment, j.first_depth
     FROM segments s LEFT JOIN segments j ON j.segment_id = s.jump_segment
     WHERE s.segment_id = ?1
     UNION ALL
     SELECT s.segment_id, s.first_depth, s.parent_segment, s.jump_segment, j.first_depth
     FROM up
     JOIN segments s ON s.segment_id = CASE WHEN up.jump_first > ?2 THEN up.jump ELSE up.parent END
     LEFT JOIN segments j ON j.segment_id = s.jump_segment
     WHERE up.first > ?2
 )
 SELECT seg FROM up WHERE first <= ?2 LIMIT 1";

/// Invariant 4's search: the segment on `from`'s path that holds `depth` (the
/// deepest one whose first entry is at or above it), following jump pointers
/// while they do not overshoot. One statement; `O(log position)` rows.
pub fn segment_holding(conn: &Connection, from: i64, depth: i64) -> Result<Option<i64>> {
    conn.prepare_cached(SEGMENT_HOLDING_QUERY)
        .and_then(|mut s| s.query_row([from, depth], |r| r.get(0)).optional())
        .map_err(sql("searching a path by depth"))
}

/// Whether the entry at `key` lies on the path of `seg` at a depth below `depth`.
fn is_ancestor(conn: &Connection, key: i64, seg: &Segment, depth: i64) -> Result<bool> {
    let (kseg, kdepth) = split_key(key);
    if kdepth >= depth {
        return Ok(false);
    }
    if kdepth >= seg.first_depth {
        return Ok(kseg == seg.id);
    }
    // The segment holding `kdepth` on the path contributes every depth from
    // its first entry to the fork below it, `kdepth` included.
    Ok(segment_holding(conn, seg.id, kdepth)? == Some(kseg))
}

fn stop_of(conn: &Connection, compaction_key: i64) -> Result<Option<i64>> {
    conn.prepare_cached("SELECT stop_key FROM compactions WHERE entry_key = ?1")
        .and_then(|mut s| s.query_row([compaction_key], |r| r.get(0)))
        .map_err(sql("reading a compaction's stop"))
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
    pub fn flush(&mut self, conn: &Connection) -> Result<()> {
        if let (true, Some(open)) = (self.dirty, &self.segment) {
            conn.prepare_cached("UPDATE segments SET tail_depth = ?2 WHERE segment_id = ?1")
                .and_then(|mut s| s.execute(params![open.id, open.tail_depth]))
                .map_err(sql("extending a segment"))?;
        }
        self.dirty = false;
        Ok(())
    }

    fn switch_to(&mut self, conn: &Connection, segment: Segment) -> Result<()> {
        self.flush(conn)?;
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
/// maintains the segment, jump, compaction and root facts (invariants 1–7).
/// Must run inside the append's transaction.
pub fn place(
    conn: &Connection,
    session_key: i64,
    entry: &Entry,
    tail: &mut OpenTail,
) -> Result<Placement> {
    let f = entry.facts();
    if has_dangling_roots(conn, session_key, tail)? {
        refuse_reparenting(conn, session_key, &f.id)?;
    }
    let parent_key = match (f.parent(), &tail.last) {
        (Some(p), Some((last_id, last_key))) if last_id == p => Some(*last_key),
        (Some(p), _) => key_of(conn, session_key, p)?,
        (None, _) => None,
    };
    let key = match parent_key {
        None => {
            if f.parent().is_some() {
                tail.dangling_roots = Some(true);
            }
            let root = new_segment(conn, session_key, None, 0, None, f.parent())?;
            let key = entry_key(root.id, 0);
            tail.switch_to(conn, root)?;
            key
        }
        Some(pk) => {
            let (pseg_id, pdepth) = split_key(pk);
            let pseg = match &tail.segment {
                Some(open) if open.id == pseg_id => open.clone(),
                _ => segment(conn, pseg_id)?,
            };
            if pseg.tail_depth == pdepth {
                if tail.segment.as_ref().map(|open| open.id) != Some(pseg_id) {
                    tail.switch_to(conn, pseg)?;
                }
                if let Some(open) = tail.segment.as_mut() {
                    open.tail_depth = pdepth + 1;
                    tail.dirty = true;
                }
                entry_key(pseg_id, pdepth + 1)
            } else {
                let inherited = nearest_compaction(conn, &pseg, pdepth)?;
                let missing = pseg.missing_root_parent.clone();
                let fork = new_segment(
                    conn,
                    session_key,
                    Some(&pseg),
                    pdepth + 1,
                    inherited,
                    missing.as_deref(),
                )?;
                let key = entry_key(fork.id, pdepth + 1);
                tail.switch_to(conn, fork)?;
                key
            }
        }
    };
    tail.last = Some((f.id.clone(), key));
    if f.entry_type == EntryType::Compaction {
        let stop = compaction_stop(conn, session_key, entry, key)?;
        conn.prepare_cached(
            "INSERT INTO compactions (entry_key, session_key, stop_key) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut s| s.execute(params![key, session_key, stop]))
        .map_err(sql("recording a compaction"))?;
    }
    Ok(Placement { key })
}

fn has_dangling_roots(conn: &Connection, session_key: i64, tail: &mut OpenTail) -> Result<bool> {
    if let Some(known) = tail.dangling_roots {
        return Ok(known);
    }
    let found = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM segments WHERE session_key = ?1
                            AND missing_root_parent IS NOT NULL AND parent_segment IS NULL)",
        )
        .and_then(|mut s| s.query_row([session_key], |r| r.get(0)))
        .map_err(sql("checking dangling parents"))?;
    tail.dangling_roots = Some(found);
    Ok(found)
}

/// Invariant 8: an entry whose id is the missing parent of a stored root is refused.
fn refuse_reparenting(conn: &Connection, session_key: i64, id: &str) -> Result<()> {
    let orphaned: Option<i64> = conn
        .prepare_cached(
            "SELECT segment_id FROM segments WHERE session_key = ?1 AND missing_root_parent = ?2
             AND parent_segment IS NULL LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(params![session_key, id], |r| r.get(0))
                .optional()
        })
        .map_err(sql("checking dangling parents"))?;
    match orphaned {
        Some(_) => Err(Error::InvalidEntry(format!(
            "Entry {id} is the missing parent of entries already stored; appending it now would re-parent them"
        ))),
        None => Ok(()),
    }
}

/// Copies a parent's (`?2`) ancestry block to its new child (`?1`), cut at
/// the fork depth (`?3`): the `ANCESTRY_BLOCK - 1` rows nearest the child.
/// (`+?2`: with a bare `?2` SQLite re-prepares this statement whenever the
/// bound value changes — same plan, a parse per fork; so the block size is
/// spelled out too rather than bound.)
const COPY_ANCESTRY: &str =
    "INSERT INTO segment_ancestry (segment_id, from_depth, ancestor_segment, to_depth)
     SELECT ?1, from_depth, ancestor_segment, min(to_depth, ?3)
     FROM segment_ancestry WHERE segment_id = +?2
     ORDER BY from_depth DESC LIMIT 7";

/// Writes a new segment's row and its ancestry block (invariants 3–5, 7, 8).
fn new_segment(
    conn: &Connection,
    session_key: i64,
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
                position_and_jump(conn, id)
            })?),
        ),
    };
    let parent_id = parent.map(|p| p.id);
    conn.prepare_cached(
        "INSERT INTO segments (session_key, parent_segment, first_depth, tail_depth, position,
                               jump_segment, inherited_compaction, missing_root_parent)
         VALUES (?1, ?2, ?3, ?3, ?4, ?5, ?6, ?7)",
    )
    .and_then(|mut s| {
        s.execute(params![
            session_key,
            parent_id,
            first_depth,
            position,
            jump,
            inherited_compaction,
            missing_root_parent
        ])
    })
    .map_err(sql("creating a segment"))?;
    let id = conn.last_insert_rowid();
    // Its own row, then its parent's block cut at the fork, less the
    // root-most row.
    conn.prepare_cached(
        "INSERT INTO segment_ancestry (segment_id, from_depth, ancestor_segment, to_depth)
         VALUES (?1, ?2, ?1, ?3)",
    )
    .and_then(|mut s| s.execute(params![id, first_depth, OPEN_END]))
    .map_err(sql("writing segment ancestry"))?;
    if let Some(p) = parent_id {
        conn.prepare_cached(COPY_ANCESTRY)
            .and_then(|mut s| s.execute(params![id, p, first_depth - 1]))
            .map_err(sql("writing segment ancestry"))?;
    }
    Ok(Segment {
        id,
        parent: parent_id,
        first_depth,
        tail_depth: first_depth,
        position,
        jump,
        inherited_compaction,
        missing_root_parent: missing_root_parent.map(str::to_owned),
    })
}

/// Invariant 5: where a walk reaching this compaction stops.
fn compaction_stop(
    conn: &Connection,
    session_key: i64,
    entry: &Entry,
    key: i64,
) -> Result<Option<i64>> {
    let f = entry.facts();
    if f.has_retained_tail {
        return Ok(Some(key));
    }
    let (seg_id, depth) = split_key(key);
    let seg = segment(conn, seg_id)?;
    let above = if depth > seg.first_depth {
        nearest_compaction(conn, &seg, depth - 1)?
    } else {
        seg.inherited_compaction
    };
    if let Some(kept) = &f.first_kept_entry_id {
        if let Some(kept_key) = key_of(conn, session_key, kept)? {
            let below_next = above.is_none_or(|a| split_key(kept_key).1 >= split_key(a).1);
            if below_next && is_ancestor(conn, kept_key, &seg, depth)? {
                return Ok(Some(kept_key));
            }
        }
    }
    match above {
        Some(a) => stop_of(conn, a),
        None => Ok(None),
    }
}

/// Counts of the work a path read did, for the complexity tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCost {
    /// SQL statements run.
    pub statements: u32,
    /// Rows the statements returned.
    pub rows: u64,
    /// Virtual-machine steps SQLite took (grows with rows touched, not returned).
    pub vm_steps: u64,
    /// Rows whose stored value was decoded (the rest came from the handle's cache).
    pub decoded: u64,
}

/// Where a path read starts and where it stops: the start's segment and
/// depth, and the depth of the root-side end.
struct PathPlan {
    segment: i64,
    depth: i64,
    low: i64,
}

/// The compaction stop rule through the indexes (invariants 5–7): four
/// statements, whatever the depth.
fn plan_path(
    conn: &Connection,
    session_key: i64,
    start: &str,
    start_key: Option<i64>,
    cost: &mut ReadCost,
) -> Result<PathPlan> {
    let key = match start_key {
        Some(key) => key,
        None => key_of(conn, session_key, start)?
            .ok_or_else(|| Error::EntryNotFound(start.to_owned()))?,
    };
    let (seg_id, depth) = split_key(key);
    let seg = segment(conn, seg_id)?;
    let nearest = nearest_compaction(conn, &seg, depth)?;
    cost.statements += 3;
    let stop = match nearest {
        Some(c) => {
            cost.statements += 1;
            stop_of(conn, c)?
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
                cost.statements += 1;
                return Err(match key_of(conn, session_key, missing)? {
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

/// The path query (`?1` the start's segment, `?2` the root-side depth, `?3`
/// the start's depth): a recursive walk from block to block (invariant 4),
/// each block's rows joined with their rowid ranges of entries.
pub const PATH_QUERY: &str = "WITH RECURSIVE walk (head, high) AS (
     SELECT ?1, ?3
     UNION ALL
     SELECT s.parent_segment, a.from_depth - 1
     FROM walk
     JOIN segment_ancestry a ON a.segment_id = walk.head
          AND a.from_depth = (SELECT min(from_depth) FROM segment_ancestry WHERE segment_id = walk.head)
     JOIN segments s ON s.segment_id = a.ancestor_segment
     WHERE a.from_depth > ?2 AND s.parent_segment IS NOT NULL
 )
 SELECT a.ancestor_segment, e.json, e.type, e.entry_key FROM walk
 JOIN segment_ancestry a ON a.segment_id = walk.head AND a.to_depth >= ?2
 JOIN entries e ON e.entry_key BETWEEN ((a.ancestor_segment << 32) | max(a.from_depth, ?2))
                                 AND ((a.ancestor_segment << 32) | min(a.to_depth, walk.high))";

/// Runs the path query of `plan`: each row is a segment id and one entry's
/// text. Rows come a segment at a time, each segment's entries root-side
/// first; blocks in the order the walk met them (deepest first), each
/// block's segments root-side first.
fn scan_path(
    conn: &Connection,
    plan: &PathPlan,
    cost: &mut ReadCost,
    mut visit: impl FnMut(i64, i64, rusqlite::types::ValueRef<'_>, &str) -> Result<()>,
) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(PATH_QUERY)
        .map_err(sql("reading a path"))?;
    let before = stmt.get_status(rusqlite::StatementStatus::VmStep);
    let mut rows = stmt
        .query(params![plan.segment, plan.low, plan.depth])
        .map_err(sql("reading a path"))?;
    let mut returned = 0;
    while let Some(row) = rows.next().map_err(sql("reading a path"))? {
        let seg: i64 = row.get(0).map_err(sql("reading a path"))?;
        let kind = row
            .get_ref(2)
            .and_then(|v| v.as_str().map_err(Into::into))
            .map_err(sql("reading a path"))?;
        let key: i64 = row.get(3).map_err(sql("reading a path"))?;
        visit(
            seg,
            key,
            row.get_ref(1).map_err(sql("reading a path"))?,
            kind,
        )?;
        returned += 1;
    }
    drop(rows);
    cost.statements += 1;
    cost.rows += returned;
    cost.vm_steps +=
        u64::try_from(stmt.get_status(rusqlite::StatementStatus::VmStep) - before).unwrap_or(0);
    Ok(())
}

/// Entries a session handle has decoded, by entry key, with the stored
/// value each was decoded from, kept while they fit in
/// [`EntryCache::BUDGET`] bytes. A hit needs the row's stored value to be
/// byte-identical to the one cached, so it is exact even if the session
/// were deleted and its keys reused behind the handle's back (`compact`
/// re-encodes rows: those are decoded again). A handle that reads its
/// active path again (an agent, every turn) decodes the new rows only.
#[derive(Debug, Default)]
pub struct EntryCache {
    entries: std::collections::HashMap<i64, (Box<[u8]>, Entry)>,
    bytes: usize,
    /// Set when a read filled the cache and it started over: the rest of
    /// that read is not kept (a path longer than the cache would only evict
    /// its own rows, copying every stored value for nothing).
    overflowed: bool,
}

impl EntryCache {
    /// Bytes (stored values and their text) held at most; past it the cache
    /// starts over (a path longer than that is decoded whole each time).
    pub const BUDGET: usize = 24 << 20;

    fn get(&self, key: i64, stored: &[u8]) -> Option<Entry> {
        match self.entries.get(&key) {
            Some((was, entry)) if **was == *stored => Some(entry.clone()),
            _ => None,
        }
    }

    /// A path read begins: what it decodes may be kept again.
    fn begin_read(&mut self) {
        self.overflowed = false;
    }

    fn insert(&mut self, key: i64, stored: &[u8], entry: &Entry) {
        if self.overflowed {
            return;
        }
        let len = stored.len() + entry.json().len();
        if self.bytes + len > Self::BUDGET {
            self.entries.clear();
            self.bytes = 0;
            self.overflowed = true;
            return;
        }
        if len <= Self::BUDGET {
            if let Some((was, old)) = self.entries.insert(key, (stored.into(), entry.clone())) {
                self.bytes -= was.len() + old.json().len();
            }
            self.bytes += len;
        }
    }
}

/// A stored `entries.json` value's bytes (TEXT or BLOB).
fn stored_bytes<'v>(stored: &rusqlite::types::ValueRef<'v>) -> &'v [u8] {
    match *stored {
        rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => b,
        _ => &[],
    }
}

/// The path from `start` to the root or the compaction stop (spec §5),
/// root-side first; rows found in `cache` are not decoded again. `start_key`
/// is the start's entry key where the caller already read it.
pub fn path(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    start: &str,
    start_key: Option<i64>,
    cost: &mut ReadCost,
    cache: &mut EntryCache,
) -> Result<Vec<Entry>> {
    let plan = plan_path(conn, session_key, start, start_key, cost)?;
    cache.begin_read();
    let mut rows = Vec::with_capacity(usize::try_from(plan.depth - plan.low + 1).unwrap_or(0));
    let mut decoded = 0;
    scan_path(conn, &plan, cost, |seg, key, stored, kind| {
        let entry = cached_entry(conn, codec, cache, key, kind, stored, &mut decoded)?;
        rows.push((seg, entry));
        Ok(())
    })?;
    cost.decoded += decoded;
    // Root-first is ascending segment id (invariant 3); each segment's rows
    // already come root-first, so a stable sort only reorders whole runs
    // (and finds the runs in one pass).
    rows.sort_by_key(|&(seg, _)| seg);
    Ok(rows.into_iter().map(|(_, entry)| entry).collect())
}

/// The entry of row `key` (of type `kind`, stored as `stored`): from `cache`
/// when it holds exactly that stored value, else decoded (counted in
/// `decoded`) and kept there.
fn cached_entry(
    conn: &Connection,
    codec: &Codec,
    cache: &mut EntryCache,
    key: i64,
    kind: &str,
    stored: rusqlite::types::ValueRef<'_>,
    decoded: &mut u64,
) -> Result<Entry> {
    let bytes = stored_bytes(&stored);
    if let Some(entry) = cache.get(key, bytes) {
        return Ok(entry);
    }
    let entry = codec.decode_entry(conn, stored, Some(EntryType::from_name(kind)))?;
    *decoded += 1;
    // Text spliced from blobs depends on more than the row's bytes.
    if super::stored::body_refs(stored)?.blobs.is_empty() {
        cache.insert(key, bytes, &entry);
    }
    Ok(entry)
}

/// Entry `id` of the session and its entry key, through the handle's
/// `cache` as a path read goes ([`EntryCache`]); `None` if the session has
/// no such entry.
pub fn entry_by_id(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    id: &str,
    cache: &mut EntryCache,
    cost: &mut ReadCost,
) -> Result<Option<(i64, Entry)>> {
    let mut st = conn
        .prepare_cached(
            "SELECT entry_key, type, json FROM entries WHERE session_key = ?1 AND id = ?2",
        )
        .map_err(sql("reading an entry"))?;
    let mut rows = st
        .query(params![session_key, id])
        .map_err(sql("reading an entry"))?;
    let Some(row) = rows.next().map_err(sql("reading an entry"))? else {
        return Ok(None);
    };
    let key: i64 = row.get(0).map_err(sql("reading an entry"))?;
    let kind = row
        .get_ref(1)
        .and_then(|v| v.as_str().map_err(Into::into))
        .map_err(sql("reading an entry"))?;
    let stored = row.get_ref(2).map_err(sql("reading an entry"))?;
    let entry = cached_entry(conn, codec, cache, key, kind, stored, &mut cost.decoded)?;
    Ok(Some((key, entry)))
}

/// The path's rows as stored, neither decoded nor built into entries: what
/// the bench's SQL-only diagnostic measures. Returns the rows read.
#[doc(hidden)]
pub fn path_rows_sql_only(
    conn: &Connection,
    session_key: i64,
    start: &str,
    cost: &mut ReadCost,
) -> Result<usize> {
    let plan = plan_path(conn, session_key, start, None, cost)?;
    let mut n = 0;
    scan_path(conn, &plan, cost, |_, _, stored, _| {
        n += usize::from(stored.as_bytes().is_ok_and(|b| !b.is_empty()));
        Ok(())
    })?;
    Ok(n)
}

/// The size of a session's branch cache: segments and compaction rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheSize {
    /// Entries in the session's log.
    pub entries: i64,
    /// `segments` rows.
    pub segments: i64,
    /// `segment_ancestry` rows.
    pub ancestry: i64,
    /// `compactions` rows.
    pub compactions: i64,
}

impl CacheSize {
    /// Cache rows in all.
    pub fn rows(&self) -> i64 {
        self.segments + self.ancestry + self.compactions
    }

    /// Cache rows per entry (0 for an empty session).
    pub fn rows_per_entry(&self) -> f64 {
        if self.entries == 0 {
            0.0
        } else {
            self.rows() as f64 / self.entries as f64
        }
    }
}

/// The cache size of every session (or of the one with id `session`), by
/// index range counts: what `check` reports so a pathological session shows.
pub fn cache_sizes(conn: &Connection, session: Option<&str>) -> Result<Vec<(String, CacheSize)>> {
    conn.prepare_cached(
        "SELECT s.id, s.entry_count,
                (SELECT count(*) FROM segments g WHERE g.session_key = s.session_key),
                (SELECT count(*) FROM segments g JOIN segment_ancestry a USING (segment_id)
                 WHERE g.session_key = s.session_key),
                (SELECT count(*) FROM compactions c WHERE c.session_key = s.session_key)
         FROM sessions s WHERE ?1 IS NULL OR s.id = ?1 ORDER BY s.session_key",
    )
    .and_then(|mut s| {
        s.query_map([session], |r| {
            Ok((
                r.get(0)?,
                CacheSize {
                    entries: r.get(1)?,
                    segments: r.get(2)?,
                    ancestry: r.get(3)?,
                    compactions: r.get(4)?,
                },
            ))
        })
        .and_then(Iterator::collect)
    })
    .map_err(sql("measuring the branch cache"))
}

/// Schema version 5's rewrite of a version-1 cache: each segment's ancestry
/// trimmed to its block (invariant 4), `position` and `jump_segment` filled
/// in (parents before children, by id). Progress counts segments.
pub(super) fn migrate_to_v2(tx: &Connection, mut progress: impl FnMut(u64, u64)) -> Result<()> {
    let total: i64 = tx
        .query_row("SELECT count(*) FROM segments", [], |r| r.get(0))
        .map_err(sql("counting segments"))?;
    let total = u64::try_from(total).unwrap_or(0);
    let mut known: HashMap<i64, (i64, Option<i64>)> = HashMap::new();
    let mut read = tx
        .prepare("SELECT segment_id, parent_segment FROM segments ORDER BY segment_id")
        .map_err(sql("reading segments"))?;
    let mut write = tx
        .prepare("UPDATE segments SET position = ?2, jump_segment = ?3 WHERE segment_id = ?1")
        .map_err(sql("writing jump pointers"))?;
    let mut trim = tx
        .prepare(
            "DELETE FROM segment_ancestry WHERE segment_id = ?1 AND from_depth <
                 (SELECT from_depth FROM segment_ancestry WHERE segment_id = ?1
                  ORDER BY from_depth DESC LIMIT 1 OFFSET ?2)",
        )
        .map_err(sql("trimming segment ancestry"))?;
    let mut rows = read.query([]).map_err(sql("reading segments"))?;
    let mut done = 0u64;
    while let Some(row) = rows.next().map_err(sql("reading segments"))? {
        let id: i64 = row.get(0).map_err(sql("reading segments"))?;
        let parent: Option<i64> = row.get(1).map_err(sql("reading segments"))?;
        let (position, jump) = match parent {
            None => (1, None),
            Some(p) => {
                let &(pp, pj) = known.get(&p).ok_or_else(|| {
                    Error::InvalidSession(format!(
                        "segment {id} names parent segment {p}, which is not an earlier segment"
                    ))
                })?;
                let jump = jump_for_child((p, pp, pj), |s| {
                    known
                        .get(&s)
                        .copied()
                        .ok_or_else(|| Error::Unknown(format!("segment {s} was not seen")))
                })?;
                (pp + 1, Some(jump))
            }
        };
        write
            .execute(params![id, position, jump])
            .map_err(sql("writing jump pointers"))?;
        // Rows above the block's root-most one go (a range delete by key).
        trim.execute(params![id, ANCESTRY_BLOCK - 1])
            .map_err(sql("trimming segment ancestry"))?;
        known.insert(id, (position, jump));
        done += 1;
        if done.is_multiple_of(4096) || done == total {
            progress(done, total);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_size_spelled_in_sql_is_the_constant() {
        assert!(COPY_ANCESTRY.ends_with(&format!("LIMIT {}", ANCESTRY_BLOCK - 1)));
    }

    /// Myers' rule gives every node of a chain a jump whose search reaches
    /// any depth in O(log n) steps.
    #[test]
    fn skew_binary_jumps_search_a_chain_in_logarithmic_steps() {
        let n = 100_000usize;
        // (position, jump) of segment i; segment i's parent is i - 1.
        let mut chain: Vec<(i64, Option<i64>)> = vec![(1, None)];
        for i in 1..n {
            let p = i - 1;
            let jump = jump_for_child((p as i64, chain[p].0, chain[p].1), |s| {
                Ok(chain[usize::try_from(s).unwrap_or(0)])
            })
            .expect("jump");
            chain.push((chain[p].0 + 1, Some(jump)));
        }
        let mut worst = 0;
        for target in [0usize, 1, 7, 4_095, 50_000, 99_998] {
            let (mut cur, mut steps) = (n - 1, 0);
            while cur > target {
                let j = chain[cur].1.map_or(cur, |j| j as usize);
                cur = if j >= target && j < cur { j } else { cur - 1 };
                steps += 1;
            }
            assert_eq!(cur, target);
            worst = worst.max(steps);
        }
        assert!(worst <= 3 * 17, "{worst} steps");
    }
}
