//! The team archive's branch cache: the statements of a [`CacheStore`] in
//! PostgreSQL's SQL and the path query. The invariants, bounds, the
//! placement and the plan of a path read are `backend::branch_cache`,
//! written once for every store; what differs here is said there (tables
//! keyed by session first, per-session segment ids, entry rows inserted in
//! batches after placing, path rows ordered by the server).

use super::handle::{col, pg};
use crate::backend::branch_cache::{plan_path, CacheStore, NewSegment, OpenTail, Segment};
use crate::entry::Entry;
use crate::error::Result;
use ::postgres::GenericClient;

/// Entries a write has placed but not yet inserted (the writer inserts them
/// in batches): id to key.
pub type Pending = std::collections::HashMap<String, i64>;

/// The branch cache of session `session` on client `c` (inside the
/// caller's transaction where it writes).
pub(super) struct PgCache<'a, C> {
    c: &'a mut C,
    session: i64,
    /// The write's placed entries not yet inserted, which [`CacheStore::key_of`]
    /// answers for too.
    pending: Option<&'a Pending>,
}

impl<'a, C: GenericClient> PgCache<'a, C> {
    /// The cache of session `session` on `c`, for a read.
    pub(super) fn new(c: &'a mut C, session: i64) -> Self {
        PgCache {
            c,
            session,
            pending: None,
        }
    }

    /// The cache of session `session` on `c`, for a write that has placed
    /// `pending` and not inserted them yet.
    pub(super) fn writing(c: &'a mut C, session: i64, pending: &'a Pending) -> Self {
        PgCache {
            c,
            session,
            pending: Some(pending),
        }
    }

    /// Runs `statement` whose one row's first column is the answer.
    fn one<T: for<'r> ::postgres::types::FromSql<'r>>(
        &mut self,
        context: &'static str,
        statement: &str,
        params: &[&(dyn ::postgres::types::ToSql + Sync)],
    ) -> Result<T> {
        let r = self.c.query_one(statement, params).map_err(pg(context))?;
        col(&r, 0)
    }

    /// Runs `statement`, which writes.
    fn run(
        &mut self,
        context: &'static str,
        statement: &str,
        params: &[&(dyn ::postgres::types::ToSql + Sync)],
    ) -> Result<()> {
        self.c.execute(statement, params).map_err(pg(context))?;
        Ok(())
    }
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

/// Invariant 5's search ([`CacheStore::segment_holding`]), `$1` the
/// session, `$2` the segment, `$3` the depth.
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

/// Copies a parent's (`$3`) ancestry block to its new child (`$2`), cut at
/// the fork depth (`$4`): the `ANCESTRY_BLOCK - 1` rows nearest the child.
const COPY_ANCESTRY: &str =
    "INSERT INTO segment_ancestry (session_key, segment_id, from_depth, ancestor_segment, to_depth)
     SELECT $1, $2, from_depth, ancestor_segment, LEAST(to_depth, $4)
     FROM segment_ancestry WHERE session_key = $1 AND segment_id = $3
     ORDER BY from_depth DESC LIMIT 7";

impl<C: GenericClient> CacheStore for PgCache<'_, C> {
    fn segment(&mut self, id: i64) -> Result<Segment> {
        let r = self
            .c
            .query_one(
                "SELECT parent_segment, first_depth, tail_depth, position, jump_segment,
                        inherited_compaction, missing_root_parent
                 FROM segments WHERE session_key = $1 AND segment_id = $2",
                &[&self.session, &id],
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

    fn position_and_jump(&mut self, id: i64) -> Result<(i64, Option<i64>)> {
        let r = self
            .c
            .query_one(
                "SELECT position, jump_segment FROM segments WHERE session_key = $1 AND segment_id = $2",
                &[&self.session, &id],
            )
            .map_err(pg("reading a jump pointer"))?;
        Ok((col(&r, 0)?, col(&r, 1)?))
    }

    fn key_of(&mut self, id: &str) -> Result<Option<i64>> {
        match self.pending.and_then(|p| p.get(id)) {
            Some(&key) => Ok(Some(key)),
            None => key_of(self.c, self.session, id),
        }
    }

    fn last_compaction_in(&mut self, from: i64, to: i64) -> Result<Option<i64>> {
        let session = self.session;
        self.one(
            "finding the nearest compaction",
            "SELECT max(entry_key) FROM compactions
             WHERE session_key = $1 AND entry_key BETWEEN $2 AND $3",
            &[&session, &from, &to],
        )
    }

    fn segment_holding(&mut self, from: i64, depth: i64) -> Result<Option<i64>> {
        self.c
            .query_opt(SEGMENT_HOLDING_QUERY, &[&self.session, &from, &depth])
            .map_err(pg("searching a path by depth"))?
            .map(|r| col(&r, 0))
            .transpose()
    }

    fn stop_of(&mut self, key: i64) -> Result<Option<i64>> {
        let session = self.session;
        self.one(
            "reading a compaction's stop",
            "SELECT stop_key FROM compactions WHERE session_key = $1 AND entry_key = $2",
            &[&session, &key],
        )
    }

    fn has_dangling_roots(&mut self) -> Result<bool> {
        let session = self.session;
        self.one(
            "checking dangling parents",
            "SELECT EXISTS (SELECT 1 FROM segments WHERE session_key = $1
                            AND missing_root_parent IS NOT NULL AND parent_segment IS NULL)",
            &[&session],
        )
    }

    fn is_missing_root_parent(&mut self, id: &str) -> Result<bool> {
        let orphaned = self
            .c
            .query_opt(
                "SELECT segment_id FROM segments WHERE session_key = $1 AND missing_root_parent = $2
                 AND parent_segment IS NULL LIMIT 1",
                &[&self.session, &id],
            )
            .map_err(pg("checking dangling parents"))?;
        Ok(orphaned.is_some())
    }

    /// Numbered on the session row this write has locked: ids count from 1
    /// in each session.
    fn insert_segment(&mut self, new: &NewSegment<'_>) -> Result<i64> {
        let session = self.session;
        let id: i64 = self.one(
            "numbering a segment",
            "UPDATE sessions SET segment_count = segment_count + 1 WHERE session_key = $1
             RETURNING segment_count",
            &[&session],
        )?;
        let row: [&(dyn ::postgres::types::ToSql + Sync); 8] = [
            &session,
            &id,
            &new.parent,
            &new.first_depth,
            &new.position,
            &new.jump,
            &new.inherited_compaction,
            &new.missing_root_parent,
        ];
        self.run(
            "creating a segment",
            "INSERT INTO segments (session_key, segment_id, parent_segment, first_depth, tail_depth,
                                   position, jump_segment, inherited_compaction, missing_root_parent)
             VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8)",
            &row,
        )?;
        Ok(id)
    }

    fn insert_own_ancestry(&mut self, id: i64, from_depth: i64, to_depth: i64) -> Result<()> {
        let session = self.session;
        self.run(
            "writing segment ancestry",
            "INSERT INTO segment_ancestry (session_key, segment_id, from_depth, ancestor_segment, to_depth)
             VALUES ($1, $2, $3, $2, $4)",
            &[&session, &id, &from_depth, &to_depth],
        )
    }

    fn copy_ancestry(&mut self, child: i64, parent: i64, cut: i64) -> Result<()> {
        let session = self.session;
        self.run(
            "writing segment ancestry",
            COPY_ANCESTRY,
            &[&session, &child, &parent, &cut],
        )
    }

    fn set_tail_depth(&mut self, id: i64, tail_depth: i64) -> Result<()> {
        let session = self.session;
        self.run(
            "extending a segment",
            "UPDATE segments SET tail_depth = $3 WHERE session_key = $1 AND segment_id = $2",
            &[&session, &id, &tail_depth],
        )
    }

    fn insert_compaction(&mut self, key: i64, stop: Option<i64>) -> Result<()> {
        let session = self.session;
        self.run(
            "recording a compaction",
            "INSERT INTO compactions (session_key, entry_key, stop_key) VALUES ($1, $2, $3)",
            &[&session, &key, &stop],
        )
    }
}

/// Places a new entry of session `session` (`backend::branch_cache::place`
/// over the team archive's tables) and returns its entry key. Must run
/// inside the append's transaction, where `pending` holds the entries this
/// write placed and has not inserted yet.
pub fn place<C: GenericClient>(
    c: &mut C,
    session: i64,
    entry: &Entry,
    tail: &mut OpenTail,
    pending: &Pending,
) -> Result<i64> {
    let mut cache = PgCache::writing(c, session, pending);
    Ok(crate::backend::branch_cache::place(&mut cache, entry, tail)?.key)
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
/// root-side first: the stop found through the indexes ([`plan_path`]),
/// then one path query.
pub fn path<C: GenericClient>(c: &mut C, session: i64, start: &str) -> Result<Vec<Entry>> {
    let plan = plan_path(&mut PgCache::new(c, session), start, None, &mut 0)?;
    let rows = c
        .query(
            PATH_QUERY,
            &[&session, &plan.segment, &plan.low, &plan.depth],
        )
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
