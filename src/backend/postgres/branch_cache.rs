//! The SQLite archive's branch cache in PostgreSQL's SQL: segments, bounded
//! ancestry blocks, skew-binary jump pointers and compaction stops. The
//! invariants and bounds are those stated in `backend::sqlite::branch_cache`
//! (invariants 1–8, `B` =
//! [`ANCESTRY_BLOCK`](crate::backend::branch_rules::ANCESTRY_BLOCK)); the
//! pure rules (keys, the jump rule, the segment row) are
//! `backend::branch_rules`. What differs: every
//! table is keyed by session first, segment ids count from 1 in each session
//! (so the schema distributes by session), and path rows come back ordered
//! by the server.

use super::{col, pg};
use crate::backend::branch_rules::{entry_key, jump_for_child, split_key, Segment, OPEN_END};
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use ::postgres::GenericClient;

fn segment<C: GenericClient>(c: &mut C, session: i64, id: i64) -> Result<Segment> {
    let r = c
        .query_one(
            "SELECT parent_segment, first_depth, tail_depth, position, jump_segment,
                    inherited_compaction, missing_root_parent
             FROM segments WHERE session_key = $1 AND segment_id = $2",
            &[&session, &id],
        )
        .map_err(pg("reading a segment"))?;
    Ok(Segment {
        id,
        parent: col(&r, 0)?,
        first_depth: col(&r, 1)?,
        tail_depth: col(&r, 2)?,
        position: col(&r, 3)?,
        jump: col(&r, 4)?,
        inherited_compaction: col(&r, 5)?,
        missing_root_parent: col(&r, 6)?,
    })
}

fn position_and_jump<C: GenericClient>(
    c: &mut C,
    session: i64,
    id: i64,
) -> Result<(i64, Option<i64>)> {
    let r = c
        .query_one(
            "SELECT position, jump_segment FROM segments WHERE session_key = $1 AND segment_id = $2",
            &[&session, &id],
        )
        .map_err(pg("reading a jump pointer"))?;
    Ok((col(&r, 0)?, col(&r, 1)?))
}

/// The key of the entry answering to `id` in the session.
pub fn key_of<C: GenericClient>(c: &mut C, session: i64, id: &str) -> Result<Option<i64>> {
    c.query_opt(
        "SELECT entry_key FROM entries WHERE session_key = $1 AND id = $2",
        &[&session, &id],
    )
    .map_err(pg("looking up an entry id"))?
    .map(|r| col(&r, 0))
    .transpose()
}

/// Entries a write has placed but not yet inserted (the writer inserts them
/// in batches): id to key.
pub type Pending = std::collections::HashMap<String, i64>;

/// [`key_of`], looking first among the write's pending entries.
fn key_of_placed<C: GenericClient>(
    c: &mut C,
    session: i64,
    id: &str,
    pending: &Pending,
) -> Result<Option<i64>> {
    match pending.get(id) {
        Some(&key) => Ok(Some(key)),
        None => key_of(c, session, id),
    }
}

/// The nearest compaction at or above `depth` in `seg` on its path (invariant 7).
fn nearest_compaction<C: GenericClient>(
    c: &mut C,
    session: i64,
    seg: &Segment,
    depth: i64,
) -> Result<Option<i64>> {
    if depth >= seg.first_depth {
        let r = c
            .query_one(
                "SELECT max(entry_key) FROM compactions
                 WHERE session_key = $1 AND entry_key BETWEEN $2 AND $3",
                &[
                    &session,
                    &entry_key(seg.id, seg.first_depth),
                    &entry_key(seg.id, depth),
                ],
            )
            .map_err(pg("finding the nearest compaction"))?;
        let found: Option<i64> = col(&r, 0)?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(seg.inherited_compaction)
}

/// Invariant 5's search: the segment on `from`'s path that holds `depth`,
/// following jump pointers while they do not overshoot. One statement;
/// `O(log position)` rows.
const SEGMENT_HOLDING_QUERY: &str = "WITH RECURSIVE up (seg, first, parent, jump, jump_first) AS (
     SELECT s.segment_id, s.first_depth, s.parent_segment, s.jump_segment, j.first_depth
     FROM segments s LEFT JOIN segments j
          ON j.session_key = s.session_key AND j.segment_id = s.jump_segment
     WHERE s.session_key = $1 AND s.segment_id = $2
     UNION ALL
     SELECT s.segment_id, s.first_depth, s.parent_segment, s.jump_segment, j.first_depth
     FROM up
     JOIN segments s ON s.session_key = $1
          AND s.segment_id = CASE WHEN up.jump_first > $3 THEN up.jump ELSE up.parent END
     LEFT JOIN segments j ON j.session_key = s.session_key AND j.segment_id = s.jump_segment
     WHERE up.first > $3
 )
 SELECT seg FROM up WHERE first <= $3 LIMIT 1";

fn segment_holding<C: GenericClient>(
    c: &mut C,
    session: i64,
    from: i64,
    depth: i64,
) -> Result<Option<i64>> {
    c.query_opt(SEGMENT_HOLDING_QUERY, &[&session, &from, &depth])
        .map_err(pg("searching a path by depth"))?
        .map(|r| col(&r, 0))
        .transpose()
}

/// Whether the entry at `key` lies on the path of `seg` at a depth below `depth`.
fn is_ancestor<C: GenericClient>(
    c: &mut C,
    session: i64,
    key: i64,
    seg: &Segment,
    depth: i64,
) -> Result<bool> {
    let (kseg, kdepth) = split_key(key);
    if kdepth >= depth {
        return Ok(false);
    }
    if kdepth >= seg.first_depth {
        return Ok(kseg == seg.id);
    }
    Ok(segment_holding(c, session, seg.id, kdepth)? == Some(kseg))
}

fn stop_of<C: GenericClient>(c: &mut C, session: i64, compaction_key: i64) -> Result<Option<i64>> {
    let r = c
        .query_one(
            "SELECT stop_key FROM compactions WHERE session_key = $1 AND entry_key = $2",
            &[&session, &compaction_key],
        )
        .map_err(pg("reading a compaction's stop"))?;
    col(&r, 0)
}

/// The segment the last entry of a write went into, kept in memory so that a
/// run of appends reads its row once and writes its `tail_depth` once:
/// [`OpenTail::flush`] must run before the transaction commits.
#[derive(Debug, Default)]
pub struct OpenTail {
    last: Option<(String, i64)>,
    segment: Option<Segment>,
    dirty: bool,
    dangling_roots: Option<bool>,
}

impl OpenTail {
    /// Writes the open segment's `tail_depth` if it moved.
    pub fn flush<C: GenericClient>(&mut self, c: &mut C, session: i64) -> Result<()> {
        if let (true, Some(open)) = (self.dirty, &self.segment) {
            c.execute(
                "UPDATE segments SET tail_depth = $3 WHERE session_key = $1 AND segment_id = $2",
                &[&session, &open.id, &open.tail_depth],
            )
            .map_err(pg("extending a segment"))?;
        }
        self.dirty = false;
        Ok(())
    }

    fn switch_to<C: GenericClient>(&mut self, c: &mut C, session: i64, seg: Segment) -> Result<()> {
        self.flush(c, session)?;
        self.segment = Some(seg);
        Ok(())
    }
}

/// Places a new entry: extends its parent's segment or starts a new one, and
/// maintains the segment, jump, compaction and root facts (invariants 1–8).
/// Returns its entry key. Must run inside the append's transaction, where
/// `pending` holds the entries this write placed and has not inserted yet.
pub fn place<C: GenericClient>(
    c: &mut C,
    session: i64,
    entry: &Entry,
    tail: &mut OpenTail,
    pending: &Pending,
) -> Result<i64> {
    let f = entry.facts();
    if has_dangling_roots(c, session, tail)? {
        refuse_reparenting(c, session, &f.id)?;
    }
    let parent_key = match (f.parent(), &tail.last) {
        (Some(p), Some((last_id, last_key))) if last_id == p => Some(*last_key),
        (Some(p), _) => key_of_placed(c, session, p, pending)?,
        (None, _) => None,
    };
    let key = match parent_key {
        None => {
            if f.parent().is_some() {
                tail.dangling_roots = Some(true);
            }
            let root = new_segment(c, session, None, 0, None, f.parent())?;
            let key = entry_key(root.id, 0);
            tail.switch_to(c, session, root)?;
            key
        }
        Some(pk) => {
            let (pseg_id, pdepth) = split_key(pk);
            let pseg = match &tail.segment {
                Some(open) if open.id == pseg_id => open.clone(),
                _ => segment(c, session, pseg_id)?,
            };
            if pseg.tail_depth == pdepth {
                if tail.segment.as_ref().map(|open| open.id) != Some(pseg_id) {
                    tail.switch_to(c, session, pseg)?;
                }
                if let Some(open) = tail.segment.as_mut() {
                    open.tail_depth = pdepth + 1;
                    tail.dirty = true;
                }
                entry_key(pseg_id, pdepth + 1)
            } else {
                let inherited = nearest_compaction(c, session, &pseg, pdepth)?;
                let missing = pseg.missing_root_parent.clone();
                let fork = new_segment(
                    c,
                    session,
                    Some(&pseg),
                    pdepth + 1,
                    inherited,
                    missing.as_deref(),
                )?;
                let key = entry_key(fork.id, pdepth + 1);
                tail.switch_to(c, session, fork)?;
                key
            }
        }
    };
    tail.last = Some((f.id.clone(), key));
    if f.entry_type == EntryType::Compaction {
        let stop = compaction_stop(c, session, entry, key, pending)?;
        c.execute(
            "INSERT INTO compactions (session_key, entry_key, stop_key) VALUES ($1, $2, $3)",
            &[&session, &key, &stop],
        )
        .map_err(pg("recording a compaction"))?;
    }
    Ok(key)
}

fn has_dangling_roots<C: GenericClient>(
    c: &mut C,
    session: i64,
    tail: &mut OpenTail,
) -> Result<bool> {
    if let Some(known) = tail.dangling_roots {
        return Ok(known);
    }
    let r = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM segments WHERE session_key = $1
                            AND missing_root_parent IS NOT NULL AND parent_segment IS NULL)",
            &[&session],
        )
        .map_err(pg("checking dangling parents"))?;
    let found: bool = col(&r, 0)?;
    tail.dangling_roots = Some(found);
    Ok(found)
}

/// Invariant 8: an entry whose id is the missing parent of a stored root is refused.
fn refuse_reparenting<C: GenericClient>(c: &mut C, session: i64, id: &str) -> Result<()> {
    let orphaned = c
        .query_opt(
            "SELECT segment_id FROM segments WHERE session_key = $1 AND missing_root_parent = $2
             AND parent_segment IS NULL LIMIT 1",
            &[&session, &id],
        )
        .map_err(pg("checking dangling parents"))?;
    match orphaned {
        Some(_) => Err(Error::InvalidEntry(format!(
            "Entry {id} is the missing parent of entries already stored; appending it now would re-parent them"
        ))),
        None => Ok(()),
    }
}

/// Copies a parent's (`$3`) ancestry block to its new child (`$2`), cut at
/// the fork depth (`$4`): the `ANCESTRY_BLOCK - 1` rows nearest the child.
const COPY_ANCESTRY: &str =
    "INSERT INTO segment_ancestry (session_key, segment_id, from_depth, ancestor_segment, to_depth)
     SELECT $1, $2, from_depth, ancestor_segment, LEAST(to_depth, $4)
     FROM segment_ancestry WHERE session_key = $1 AND segment_id = $3
     ORDER BY from_depth DESC LIMIT 7";

/// Writes a new segment's row and its ancestry block (invariants 3–5, 7, 8).
fn new_segment<C: GenericClient>(
    c: &mut C,
    session: i64,
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
                position_and_jump(c, session, id)
            })?),
        ),
    };
    let parent_id = parent.map(|p| p.id);
    // Per-session ids, numbered on the session row this write has locked.
    let r = c
        .query_one(
            "UPDATE sessions SET segment_count = segment_count + 1 WHERE session_key = $1
             RETURNING segment_count",
            &[&session],
        )
        .map_err(pg("numbering a segment"))?;
    let id: i64 = col(&r, 0)?;
    c.execute(
        "INSERT INTO segments (session_key, segment_id, parent_segment, first_depth, tail_depth,
                               position, jump_segment, inherited_compaction, missing_root_parent)
         VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8)",
        &[
            &session,
            &id,
            &parent_id,
            &first_depth,
            &position,
            &jump,
            &inherited_compaction,
            &missing_root_parent,
        ],
    )
    .map_err(pg("creating a segment"))?;
    c.execute(
        "INSERT INTO segment_ancestry (session_key, segment_id, from_depth, ancestor_segment, to_depth)
         VALUES ($1, $2, $3, $2, $4)",
        &[&session, &id, &first_depth, &OPEN_END],
    )
    .map_err(pg("writing segment ancestry"))?;
    if let Some(p) = parent_id {
        c.execute(COPY_ANCESTRY, &[&session, &id, &p, &(first_depth - 1)])
            .map_err(pg("writing segment ancestry"))?;
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

/// Invariant 6: where a walk reaching this compaction stops.
fn compaction_stop<C: GenericClient>(
    c: &mut C,
    session: i64,
    entry: &Entry,
    key: i64,
    pending: &Pending,
) -> Result<Option<i64>> {
    let f = entry.facts();
    if f.has_retained_tail {
        return Ok(Some(key));
    }
    let (seg_id, depth) = split_key(key);
    let seg = segment(c, session, seg_id)?;
    let above = if depth > seg.first_depth {
        nearest_compaction(c, session, &seg, depth - 1)?
    } else {
        seg.inherited_compaction
    };
    if let Some(kept) = &f.first_kept_entry_id {
        if let Some(kept_key) = key_of_placed(c, session, kept, pending)? {
            let below_next = above.is_none_or(|a| split_key(kept_key).1 >= split_key(a).1);
            if below_next && is_ancestor(c, session, kept_key, &seg, depth)? {
                return Ok(Some(kept_key));
            }
        }
    }
    match above {
        Some(a) => stop_of(c, session, a),
        None => Ok(None),
    }
}

/// The path query (`$1` the session, `$2` the start's segment, `$3` the
/// root-side depth, `$4` the start's depth): a recursive walk from block to
/// block (invariant 4), each block's rows joined with their key ranges of
/// entries, root-side first.
const PATH_QUERY: &str = "WITH RECURSIVE walk (head, high) AS (
     SELECT $2::BIGINT, $4::BIGINT
     UNION ALL
     SELECT s.parent_segment, a.from_depth - 1
     FROM walk
     CROSS JOIN LATERAL (
         SELECT from_depth, ancestor_segment FROM segment_ancestry
         WHERE session_key = $1 AND segment_id = walk.head
         ORDER BY from_depth LIMIT 1
     ) a
     JOIN segments s ON s.session_key = $1 AND s.segment_id = a.ancestor_segment
     WHERE a.from_depth > $3 AND s.parent_segment IS NOT NULL
 )
 SELECT e.json FROM walk
 JOIN segment_ancestry a ON a.session_key = $1 AND a.segment_id = walk.head AND a.to_depth >= $3
 JOIN entries e ON e.session_key = $1
      AND e.entry_key BETWEEN ((a.ancestor_segment << 32) | GREATEST(a.from_depth, $3))
                          AND ((a.ancestor_segment << 32) | LEAST(a.to_depth, walk.high))
 ORDER BY a.ancestor_segment, e.entry_key";

/// The path from `start` to the root or the compaction stop (spec §5),
/// root-side first: the stop found through the indexes (invariants 5–7),
/// then one path query.
pub fn path<C: GenericClient>(c: &mut C, session: i64, start: &str) -> Result<Vec<Entry>> {
    let key = key_of(c, session, start)?.ok_or_else(|| Error::EntryNotFound(start.to_owned()))?;
    let (seg_id, depth) = split_key(key);
    let seg = segment(c, session, seg_id)?;
    let stop = match nearest_compaction(c, session, &seg, depth)? {
        Some(compaction) => stop_of(c, session, compaction)?,
        None => None,
    };
    let low = match stop {
        Some(s) => split_key(s).1,
        None => {
            if let Some(missing) = &seg.missing_root_parent {
                // The only stored entry a root may name as its missing parent
                // is itself (invariant 8): a cycle, as the walk reports it.
                return Err(match key_of(c, session, missing)? {
                    Some(_) => Error::ParentCycle(missing.clone()),
                    None => Error::DanglingReference(missing.clone()),
                });
            }
            0
        }
    };
    let rows = c
        .query(PATH_QUERY, &[&session, &seg_id, &low, &depth])
        .map_err(pg("reading a path"))?;
    rows.iter()
        .map(|r| col::<String>(r, 0).map(Entry::from_checked_text))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::branch_rules::ANCESTRY_BLOCK;

    #[test]
    fn the_block_size_spelled_in_sql_is_the_constant() {
        assert!(COPY_ANCESTRY.ends_with(&format!("LIMIT {}", ANCESTRY_BLOCK - 1)));
    }
}
