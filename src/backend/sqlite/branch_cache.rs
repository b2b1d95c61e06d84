//! The materialized branch cache: how an append places an entry in the tree,
//! and how a path is read back with a depth-independent number of statements.
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
//! 3. **Ancestry.** For every segment `s`, `segment_ancestry` holds one row per
//!    segment on the path from the root to `s` (itself included) with the
//!    depth range `from_depth..=to_depth` that segment contributes; the ranges
//!    are disjoint and cover `0..` without gaps. `s`'s own row has
//!    `to_depth = OPEN_END`. A new segment copies its parent's rows (cut at the
//!    fork depth) plus its own: one row per fork on its path, nothing per entry.
//! 4. **Compactions.** Every compaction `c` has `stop_key`: where a walk that
//!    reaches `c` ends (spec §5). It depends only on `c` and its ancestors,
//!    because a compaction overwrites the pending stop: it is `c` itself with a
//!    retained tail; else `c`'s `firstKeptEntryId` when that entry is an
//!    ancestor no higher than the next compaction above; else that
//!    compaction's `stop_key`; `NULL` means the root.
//! 5. **Nearest compaction.** `segments.inherited_compaction` is the nearest
//!    compaction above the segment's first entry on its path, so the nearest
//!    compaction at or above any entry is one range query plus one row.
//! 6. **Dangling roots.** `segments.missing_root_parent` is the missing
//!    `parentId` of the path's root entry; a walk that runs to the root of
//!    such a path fails with `invalid_session`. An entry whose id is such a
//!    missing parent is refused, since it would re-parent existing entries.
//!
//! Hence: an append writes O(1) rows (plus one ancestry row per fork on the
//! path when it forks), a leaf move is an append, and a path read runs four
//! statements whatever the depth, reading the ancestry rows and the returned
//! entries only. [`verify`] rebuilds all of this from `entries` and compares.

use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;

/// Bits of `entry_key` that hold the depth.
pub const DEPTH_BITS: u32 = 32;
/// `to_depth` of a segment's own ancestry row: the segment may still grow.
pub const OPEN_END: i64 = (1 << DEPTH_BITS) - 1;

/// The key of the entry at `depth` in `segment`.
pub fn entry_key(segment: i64, depth: i64) -> i64 {
    (segment << DEPTH_BITS) | depth
}

/// The segment and depth of an entry key.
pub fn split_key(key: i64) -> (i64, i64) {
    (key >> DEPTH_BITS, key & OPEN_END)
}

fn sql(context: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| Error::sqlite(context, e)
}

/// A segment row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its id.
    pub id: i64,
    /// The segment it forks from.
    pub parent: Option<i64>,
    /// Depth of its first entry.
    pub first_depth: i64,
    /// Depth of its last entry.
    pub tail_depth: i64,
    /// Nearest compaction above its first entry.
    pub inherited_compaction: Option<i64>,
    /// Missing parent id of its path's root.
    pub missing_root_parent: Option<String>,
}

fn segment(conn: &Connection, id: i64) -> Result<Segment> {
    conn.prepare_cached(
        "SELECT parent_segment, first_depth, tail_depth, inherited_compaction, missing_root_parent
         FROM segments WHERE segment_id = ?1",
    )
    .and_then(|mut s| {
        s.query_row([id], |r| {
            Ok(Segment {
                id,
                parent: r.get(0)?,
                first_depth: r.get(1)?,
                tail_depth: r.get(2)?,
                inherited_compaction: r.get(3)?,
                missing_root_parent: r.get(4)?,
            })
        })
    })
    .map_err(sql("reading a segment"))
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

/// Whether the entry at `key` lies on the path of `seg` at a depth below `depth`.
fn is_ancestor(conn: &Connection, key: i64, seg: &Segment, depth: i64) -> Result<bool> {
    let (kseg, kdepth) = split_key(key);
    if kdepth >= depth {
        return Ok(false);
    }
    if kseg == seg.id {
        return Ok(kdepth >= seg.first_depth);
    }
    let row: Option<(i64, i64)> = conn
        .prepare_cached(
            "SELECT ancestor_segment, to_depth FROM segment_ancestry
             WHERE segment_id = ?1 AND from_depth <= ?2 ORDER BY from_depth DESC LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(params![seg.id, kdepth], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(sql("checking ancestry"))?;
    Ok(row.is_some_and(|(anc, to)| anc == kseg && kdepth <= to))
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
/// maintains the ancestry, compaction and root facts (invariants 1–6).
/// Must run inside the append's transaction.
pub fn place(
    conn: &Connection,
    session_key: i64,
    entry: &Entry,
    tail: &mut OpenTail,
) -> Result<Placement> {
    let f = entry.facts();
    let refused_reparent: Option<i64> = conn
        .prepare_cached(
            "SELECT segment_id FROM segments WHERE session_key = ?1 AND missing_root_parent = ?2
             AND parent_segment IS NULL LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(params![session_key, f.id], |r| r.get(0))
                .optional()
        })
        .map_err(sql("checking dangling parents"))?;
    if refused_reparent.is_some() {
        return Err(Error::InvalidEntry(format!(
            "Entry {} is the missing parent of entries already stored; appending it now would re-parent them",
            f.id
        )));
    }
    let parent_key = match (f.parent(), &tail.last) {
        (Some(p), Some((last_id, last_key))) if last_id == p => Some(*last_key),
        (Some(p), _) => key_of(conn, session_key, p)?,
        (None, _) => None,
    };
    let key = match parent_key {
        None => {
            let missing = f.parent().map(str::to_owned);
            let seg = new_segment(conn, session_key, None, 0, None, missing.as_deref())?;
            tail.switch_to(
                conn,
                Segment {
                    id: seg,
                    parent: None,
                    first_depth: 0,
                    tail_depth: 0,
                    inherited_compaction: None,
                    missing_root_parent: missing,
                },
            )?;
            entry_key(seg, 0)
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
                let seg = new_segment(
                    conn,
                    session_key,
                    Some(pseg_id),
                    pdepth + 1,
                    inherited,
                    pseg.missing_root_parent.as_deref(),
                )?;
                conn.prepare_cached(
                    "INSERT INTO segment_ancestry (segment_id, from_depth, ancestor_segment, to_depth)
                     SELECT ?1, from_depth, ancestor_segment, min(to_depth, ?3)
                     FROM segment_ancestry WHERE segment_id = ?2 AND from_depth <= ?3",
                )
                .and_then(|mut s| s.execute(params![seg, pseg_id, pdepth]))
                .map_err(sql("copying segment ancestry"))?;
                tail.switch_to(
                    conn,
                    Segment {
                        id: seg,
                        parent: Some(pseg_id),
                        first_depth: pdepth + 1,
                        tail_depth: pdepth + 1,
                        inherited_compaction: inherited,
                        missing_root_parent: pseg.missing_root_parent.clone(),
                    },
                )?;
                entry_key(seg, pdepth + 1)
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

fn new_segment(
    conn: &Connection,
    session_key: i64,
    parent: Option<i64>,
    first_depth: i64,
    inherited_compaction: Option<i64>,
    missing_root_parent: Option<&str>,
) -> Result<i64> {
    conn.prepare_cached(
        "INSERT INTO segments (session_key, parent_segment, first_depth, tail_depth, inherited_compaction, missing_root_parent)
         VALUES (?1, ?2, ?3, ?3, ?4, ?5)",
    )
    .and_then(|mut s| s.execute(params![session_key, parent, first_depth, inherited_compaction, missing_root_parent]))
    .map_err(sql("creating a segment"))?;
    let id = conn.last_insert_rowid();
    conn.prepare_cached(
        "INSERT INTO segment_ancestry (segment_id, from_depth, ancestor_segment, to_depth) VALUES (?1, ?2, ?1, ?3)",
    )
    .and_then(|mut s| s.execute(params![id, first_depth, OPEN_END]))
    .map_err(sql("creating a segment"))?;
    Ok(id)
}

/// Invariant 4: where a walk reaching this compaction stops.
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
}

/// The path from `start` to the root or the compaction stop (spec §5), root-side first.
pub fn path(
    conn: &Connection,
    session_key: i64,
    start: &str,
    cost: &mut ReadCost,
) -> Result<Vec<Entry>> {
    let key =
        key_of(conn, session_key, start)?.ok_or_else(|| Error::EntryNotFound(start.to_owned()))?;
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
                return Err(Error::DanglingReference(missing.clone()));
            }
            0
        }
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT e.json FROM segment_ancestry a
             JOIN entries e ON e.entry_key BETWEEN ((a.ancestor_segment << 32) | max(a.from_depth, ?2))
                                             AND ((a.ancestor_segment << 32) | min(a.to_depth, ?3))
             WHERE a.segment_id = ?1 AND a.from_depth <= ?3
               AND a.from_depth >= (SELECT max(from_depth) FROM segment_ancestry
                                    WHERE segment_id = ?1 AND from_depth <= ?2)
             ORDER BY a.from_depth, e.entry_key",
        )
        .map_err(sql("reading a path"))?;
    let before = stmt.get_status(rusqlite::StatementStatus::VmStep);
    let rows = stmt
        .query_map(params![seg_id, low, depth], |r| r.get::<_, String>(0))
        .map_err(sql("reading a path"))?;
    let mut out = Vec::with_capacity(usize::try_from(depth - low + 1).unwrap_or(0));
    for json in rows {
        let json = json.map_err(sql("reading a path"))?;
        out.push(Entry::from_checked_text(json));
    }
    cost.statements += 1;
    cost.rows += out.len() as u64;
    cost.vm_steps +=
        u64::try_from(stmt.get_status(rusqlite::StatementStatus::VmStep) - before).unwrap_or(0);
    Ok(out)
}

/// Rebuilds the branch cache of a session from `entries` in log order, in
/// memory, and compares it with the stored cache. Returns the differences found
/// (empty when the cache is exact).
pub fn verify(conn: &Connection, session_key: i64) -> Result<Vec<String>> {
    #[derive(Default)]
    struct Model {
        // id -> (segment index, depth)
        by_id: HashMap<String, (usize, i64)>,
        // per segment: parent segment, first depth, tail depth, missing root parent
        segments: Vec<(Option<usize>, i64, i64, Option<String>)>,
    }
    let mut problems = Vec::new();
    let mut model = Model::default();
    let mut stmt = conn
        .prepare("SELECT entry_key, json FROM entries WHERE session_key = ?1 ORDER BY seq")
        .map_err(sql("verifying the branch cache"))?;
    let rows = stmt
        .query_map([session_key], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(sql("verifying the branch cache"))?;
    // stored segment id -> model segment index, established in creation order
    let mut seg_map: HashMap<i64, usize> = HashMap::new();
    let mut keys = HashMap::new();
    for row in rows {
        let (key, json) = row.map_err(sql("verifying the branch cache"))?;
        let entry = Entry::from_checked_text(json);
        let f = entry.facts();
        let parent = f.parent().and_then(|p| model.by_id.get(p).copied());
        let (seg, depth) = match parent {
            Some((pseg, pdepth)) if model.segments[pseg].2 == pdepth => {
                model.segments[pseg].2 += 1;
                (pseg, pdepth + 1)
            }
            Some((pseg, pdepth)) => {
                let missing = model.segments[pseg].3.clone();
                model
                    .segments
                    .push((Some(pseg), pdepth + 1, pdepth + 1, missing));
                (model.segments.len() - 1, pdepth + 1)
            }
            None => {
                model
                    .segments
                    .push((None, 0, 0, f.parent().map(str::to_owned)));
                (model.segments.len() - 1, 0)
            }
        };
        let (stored_seg, stored_depth) = split_key(key);
        match seg_map.get(&stored_seg) {
            Some(&m) if m != seg => {
                problems.push(format!("entry {} is in the wrong segment", f.id))
            }
            None => {
                seg_map.insert(stored_seg, seg);
            }
            _ => {}
        }
        if stored_depth != depth {
            problems.push(format!(
                "entry {} has depth {stored_depth}, expected {depth}",
                f.id
            ));
        }
        keys.insert(f.id.clone(), key);
        model.by_id.insert(f.id.clone(), (seg, depth));
    }
    drop(stmt);
    let inverse: HashMap<usize, i64> = seg_map.iter().map(|(s, m)| (*m, *s)).collect();
    for (m, (parent, first, tail, missing)) in model.segments.iter().enumerate() {
        let Some(&sid) = inverse.get(&m) else {
            problems.push(format!("segment #{m} of the rebuild has no stored segment"));
            continue;
        };
        let stored = segment(conn, sid)?;
        let expected_parent = parent.and_then(|p| inverse.get(&p).copied());
        if stored.parent != expected_parent
            || stored.first_depth != *first
            || stored.tail_depth != *tail
            || stored.missing_root_parent != *missing
        {
            problems.push(format!("segment {sid} differs from its rebuild"));
        }
        // The ancestry rebuilt by walking parents.
        let mut expected = Vec::new();
        let mut cur = Some(m);
        let mut to = OPEN_END;
        while let Some(c) = cur {
            let (p, f, _, _) = &model.segments[c];
            expected.push((*f, inverse.get(&c).copied().unwrap_or(-1), to));
            to = f - 1;
            cur = *p;
        }
        expected.reverse();
        let mut st = conn
            .prepare_cached("SELECT from_depth, ancestor_segment, to_depth FROM segment_ancestry WHERE segment_id = ?1 ORDER BY from_depth")
            .map_err(sql("verifying the branch cache"))?;
        let actual: Vec<(i64, i64, i64)> = st
            .query_map([sid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(Iterator::collect)
            .map_err(sql("verifying the branch cache"))?;
        if actual != expected {
            problems.push(format!(
                "segment {sid} ancestry {actual:?} differs from its rebuild {expected:?}"
            ));
        }
    }
    // Compaction stops, recomputed by the reference walk over the rebuilt tree.
    let mut st = conn
        .prepare("SELECT c.entry_key, c.stop_key, e.id FROM compactions c JOIN entries e USING (entry_key) WHERE c.session_key = ?1")
        .map_err(sql("verifying the branch cache"))?;
    let stored: Vec<(i64, Option<i64>, String)> = st
        .query_map([session_key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .and_then(Iterator::collect)
        .map_err(sql("verifying the branch cache"))?;
    let lookup = |id: &str| -> Result<Option<Entry>> {
        match keys.get(id) {
            Some(k) => {
                let json: String = conn
                    .query_row("SELECT json FROM entries WHERE entry_key = ?1", [k], |r| {
                        r.get(0)
                    })
                    .map_err(sql("verifying the branch cache"))?;
                Ok(Some(Entry::from_checked_text(json)))
            }
            None => Ok(None),
        }
    };
    for (ckey, stop, id) in stored {
        let expected = match crate::rules::walk_to_root_or_compaction(Some(&id), lookup) {
            Ok(path) => {
                let first = &path[0];
                let reached_root = first.facts().parent().is_none_or(|p| !keys.contains_key(p))
                    && !stops_at_first(&path);
                if reached_root {
                    None
                } else {
                    keys.get(first.id()).copied()
                }
            }
            Err(_) => None,
        };
        if expected != stop {
            problems.push(format!(
                "compaction {id} (key {ckey}) stops at {stop:?}, expected {expected:?}"
            ));
        }
    }
    Ok(problems)
}

/// Whether a walk's first (root-side) entry is where a compaction rule stopped
/// it, rather than the root of the tree.
fn stops_at_first(path: &[Entry]) -> bool {
    let mut rule = crate::rules::StopRule::default();
    for (i, e) in path.iter().rev().enumerate() {
        if rule.stops_at(e) {
            return i == path.len() - 1;
        }
    }
    false
}
