//! The team archive's branch cache: the statements of a [`CacheStore`] in
//! PostgreSQL's SQL and the path query. The invariants, bounds, the
//! placement and the plan of a path read are `backend::branch_cache`,
//! written once for every store; what differs here is said there (tables
//! keyed by session first, per-session segment ids, entry rows inserted in
//! batches after placing, path rows ordered by the server).

use super::handle::{col, pg};
use crate::backend::branch_cache::{
    AncestryRow, BatchStore, Batched, CacheRows, CacheStore, NewSegment, OpenTail, Segment,
};
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

    /// Runs `statement`, which writes, in one round trip (its parameters'
    /// types given: no separate prepare).
    fn typed(
        &mut self,
        context: &'static str,
        statement: &str,
        params: &[(
            &(dyn ::postgres::types::ToSql + Sync),
            ::postgres::types::Type,
        )],
    ) -> Result<()> {
        self.c.query_typed(statement, params).map_err(pg(context))?;
        Ok(())
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
    c.query_typed_opt(
        "SELECT entry_key FROM entries WHERE session_key = $1 AND id = $2",
        &[
            (&session, ::postgres::types::Type::INT8),
            (&id, ::postgres::types::Type::TEXT),
        ],
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
/// over the team archive's tables, with `rows` in front of them: the cache
/// rows it writes wait in memory for [`CacheRows::write`]) and returns its
/// entry key. Must run inside the append's transaction, where `pending`
/// holds the entries this write placed and has not inserted yet.
pub fn place<C: GenericClient>(
    c: &mut C,
    session: i64,
    entry: &Entry,
    tail: &mut OpenTail,
    pending: &Pending,
    rows: &mut CacheRows,
) -> Result<i64> {
    let mut cache = Batched {
        store: PgCache::writing(c, session, pending),
        rows,
    };
    Ok(crate::backend::branch_cache::place(&mut cache, entry, tail)?.key)
}

impl<C: GenericClient> BatchStore for PgCache<'_, C> {
    fn next_segment_id(&mut self) -> Result<i64> {
        let session = self.session;
        let count: i64 = self.one(
            "numbering a segment",
            "SELECT segment_count FROM sessions WHERE session_key = $1",
            &[&session],
        )?;
        Ok(count + 1)
    }

    fn ancestry_block(&mut self, id: i64) -> Result<Vec<AncestryRow>> {
        let rows = self
            .c
            .query(
                "SELECT from_depth, ancestor_segment, to_depth FROM segment_ancestry
                 WHERE session_key = $1 AND segment_id = $2",
                &[&self.session, &id],
            )
            .map_err(pg("reading segment ancestry"))?;
        rows.iter()
            .map(|r| {
                Ok(AncestryRow {
                    segment: id,
                    from_depth: col(r, 0)?,
                    ancestor: col(r, 1)?,
                    to_depth: col(r, 2)?,
                })
            })
            .collect()
    }

    /// One statement per table, through `unnest`, each parsed, bound and
    /// run in one round trip (`query_typed`).
    fn write_batch(&mut self, rows: &CacheRows) -> Result<()> {
        use ::postgres::types::Type;
        let session = self.session;
        let segs: Vec<&Segment> = rows.new_segments().collect();
        if let Some(last) = segs.last() {
            let ids: Vec<i64> = segs.iter().map(|s| s.id).collect();
            let parents: Vec<Option<i64>> = segs.iter().map(|s| s.parent).collect();
            let firsts: Vec<i64> = segs.iter().map(|s| s.first_depth).collect();
            let tails: Vec<i64> = segs.iter().map(|s| s.tail_depth).collect();
            let positions: Vec<i64> = segs.iter().map(|s| s.position).collect();
            let jumps: Vec<Option<i64>> = segs.iter().map(|s| s.jump).collect();
            let inherited: Vec<Option<i64>> = segs.iter().map(|s| s.inherited_compaction).collect();
            let missing: Vec<Option<&str>> = segs
                .iter()
                .map(|s| s.missing_root_parent.as_deref())
                .collect();
            self.typed(
                "numbering segments",
                "UPDATE sessions SET segment_count = greatest(segment_count, $2) WHERE session_key = $1",
                &[(&session, Type::INT8), (&last.id, Type::INT8)],
            )?;
            self.typed(
                "creating segments",
                "INSERT INTO segments (session_key, segment_id, parent_segment, first_depth, tail_depth,
                                       position, jump_segment, inherited_compaction, missing_root_parent)
                 SELECT $1, * FROM unnest($2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[],
                                          $6::BIGINT[], $7::BIGINT[], $8::BIGINT[], $9::TEXT[])",
                &[
                    (&session, Type::INT8),
                    (&ids, Type::INT8_ARRAY),
                    (&parents, Type::INT8_ARRAY),
                    (&firsts, Type::INT8_ARRAY),
                    (&tails, Type::INT8_ARRAY),
                    (&positions, Type::INT8_ARRAY),
                    (&jumps, Type::INT8_ARRAY),
                    (&inherited, Type::INT8_ARRAY),
                    (&missing, Type::TEXT_ARRAY),
                ],
            )?;
            let anc: Vec<&AncestryRow> = rows.new_ancestry().collect();
            let segment: Vec<i64> = anc.iter().map(|r| r.segment).collect();
            let from: Vec<i64> = anc.iter().map(|r| r.from_depth).collect();
            let ancestor: Vec<i64> = anc.iter().map(|r| r.ancestor).collect();
            let to: Vec<i64> = anc.iter().map(|r| r.to_depth).collect();
            self.typed(
                "writing segment ancestry",
                "INSERT INTO segment_ancestry (session_key, segment_id, from_depth, ancestor_segment, to_depth)
                 SELECT $1, * FROM unnest($2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[])",
                &[
                    (&session, Type::INT8),
                    (&segment, Type::INT8_ARRAY),
                    (&from, Type::INT8_ARRAY),
                    (&ancestor, Type::INT8_ARRAY),
                    (&to, Type::INT8_ARRAY),
                ],
            )?;
        }
        let (moved, depths): (Vec<i64>, Vec<i64>) = rows.moved_tails().unzip();
        if !moved.is_empty() {
            self.typed(
                "extending segments",
                "UPDATE segments s SET tail_depth = u.t
                 FROM unnest($2::BIGINT[], $3::BIGINT[]) AS u (id, t)
                 WHERE s.session_key = $1 AND s.segment_id = u.id",
                &[
                    (&session, Type::INT8),
                    (&moved, Type::INT8_ARRAY),
                    (&depths, Type::INT8_ARRAY),
                ],
            )?;
        }
        let (keys, stops): (Vec<i64>, Vec<Option<i64>>) = rows.new_compactions().unzip();
        if !keys.is_empty() {
            self.typed(
                "recording compactions",
                "INSERT INTO compactions (session_key, entry_key, stop_key)
                 SELECT $1, * FROM unnest($2::BIGINT[], $3::BIGINT[])",
                &[
                    (&session, Type::INT8),
                    (&keys, Type::INT8_ARRAY),
                    (&stops, Type::INT8_ARRAY),
                ],
            )?;
        }
        Ok(())
    }
}

/// The recursive walk every path read of the branch cache runs (`$1` the
/// session): from block to block (invariant 4), seeded by `$seed`, a
/// `SELECT` of the start's segment, its depth and the root-side depth;
/// one row `(head, high, low)` per block. Written once, for
/// [`PATH_STATEMENT`] and the storage's facts statement.
macro_rules! path_walk {
    ($seed:literal) => {
        concat!(
            " walk (head, high, low) AS (
     ",
            $seed,
            "
     UNION ALL
     SELECT s.parent_segment, a.from_depth - 1, walk.low
     FROM walk
     CROSS JOIN LATERAL (
         SELECT from_depth, ancestor_segment FROM segment_ancestry
         WHERE session_key = $1 AND segment_id = walk.head
         ORDER BY from_depth LIMIT 1
     ) a
     JOIN segments s ON s.session_key = $1 AND s.segment_id = a.ancestor_segment
     WHERE a.from_depth > walk.low AND s.parent_segment IS NOT NULL
 )"
        )
    };
}
pub(super) use path_walk;

/// The whole path read in one statement: the start's row, the plan of a
/// path read (`backend::branch_cache::plan_path`'s rule in SQL: the nearest compaction at or above
/// the start — the largest compaction key in the start's segment up to it,
/// else the segment's inherited one — and that compaction's stop; without a
/// stop, a root with a missing parent is an error) and a recursive walk from block to block (invariant 4), each block's rows
/// joined with their key ranges of entries), so a path read is one round trip. `$1` the session, `$2`
/// the start's id; or, with `$2` NULL, the session's leaf (the resume's
/// read: the leaf and its path in the same round trip).
///
/// Rows: `(json, NULL, NULL, leaf)` for each entry of the path, root-side
/// first; or one row `(NULL, missing, cycle, leaf)` when the walk would reach
/// a root whose parent `missing` is not in the session (`cycle`: it is, as
/// the start's own ancestor); or one row `(NULL, NULL, NULL, leaf)` when the
/// leaf names no entry; no row when the start is not in the session.
const PATH_STATEMENT: &str = concat!(
    "WITH RECURSIVE
 target AS (
     SELECT coalesce($2::TEXT, (SELECT leaf_id FROM sessions WHERE session_key = $1)) AS id,
            (SELECT leaf_id FROM sessions WHERE session_key = $1 AND $2::TEXT IS NULL) AS leaf
 ),
 start AS (
     SELECT e.entry_key >> 32 AS seg, e.entry_key & 4294967295 AS depth, g.first_depth,
            g.inherited_compaction, g.missing_root_parent
     FROM target t
     JOIN entries e ON e.session_key = $1 AND e.id = t.id
     JOIN segments g ON g.session_key = $1 AND g.segment_id = e.entry_key >> 32
 ),
 plan AS (
     SELECT st.seg, st.depth, coalesce(c.stop_key & 4294967295, 0) AS low,
            c.stop_key IS NULL AND st.missing_root_parent IS NOT NULL AS broken,
            st.missing_root_parent AS missing
     FROM start st
     LEFT JOIN compactions c ON c.session_key = $1 AND c.entry_key = coalesce(
         (SELECT max(entry_key) FROM compactions
          WHERE session_key = $1
            AND entry_key BETWEEN ((st.seg << 32) | st.first_depth) AND ((st.seg << 32) | st.depth)),
         st.inherited_compaction)
 ),
",
    path_walk!("SELECT seg, depth, low FROM plan WHERE NOT broken"),
    ",
 rows AS (
     SELECT a.ancestor_segment AS o1, e.entry_key AS o2, e.json, NULL::TEXT AS missing,
            NULL::BOOLEAN AS cycle
     FROM walk
     JOIN segment_ancestry a ON a.session_key = $1 AND a.segment_id = walk.head
          AND a.to_depth >= walk.low
     JOIN entries e ON e.session_key = $1
          AND e.entry_key BETWEEN ((a.ancestor_segment << 32) | GREATEST(a.from_depth, walk.low))
                              AND ((a.ancestor_segment << 32) | LEAST(a.to_depth, walk.high))
     UNION ALL
     SELECT 0, 0, NULL, p.missing,
            EXISTS (SELECT 1 FROM entries WHERE session_key = $1 AND id = p.missing)
     FROM plan p WHERE p.broken
     UNION ALL
     SELECT 0, 0, NULL, NULL, NULL FROM target t
     WHERE t.leaf IS NOT NULL AND NOT EXISTS (SELECT 1 FROM start)
 )
 SELECT r.json, r.missing, r.cycle, t.leaf FROM rows r CROSS JOIN target t ORDER BY r.o1, r.o2"
);

/// What [`PATH_STATEMENT`] answered.
enum PathAnswer {
    /// The start is not in the session.
    NotFound,
    /// The leaf names an entry the session does not hold.
    DanglingLeaf(String),
    /// The path, with the leaf when the read started from it.
    Path(Option<String>, Vec<Entry>),
}

/// Runs [`PATH_STATEMENT`] (one round trip: parsed, bound and run in one
/// exchange with the server).
fn path_statement<C: GenericClient>(
    c: &mut C,
    session: i64,
    start: Option<&str>,
) -> Result<PathAnswer> {
    use ::postgres::types::Type;
    let rows = c
        .query_typed(
            PATH_STATEMENT,
            &[(&session, Type::INT8), (&start, Type::TEXT)],
        )
        .map_err(pg("reading a path"))?;
    let Some(first) = rows.first() else {
        return Ok(PathAnswer::NotFound);
    };
    let leaf: Option<String> = col(first, 3)?;
    if let Some(missing) = col::<Option<String>>(first, 1)? {
        return Err(if col::<Option<bool>>(first, 2)? == Some(true) {
            crate::error::Error::ParentCycle(missing)
        } else {
            crate::error::Error::DanglingReference(missing)
        });
    }
    if col::<Option<String>>(first, 0)?.is_none() {
        return Ok(PathAnswer::DanglingLeaf(leaf.unwrap_or_default()));
    }
    let path = rows
        .iter()
        .map(|r| col::<String>(r, 0).map(Entry::from_checked_text))
        .collect::<Result<Vec<_>>>()?;
    Ok(PathAnswer::Path(leaf, path))
}

/// The path from `start` to the root or the compaction stop (spec §5),
/// root-side first, in one statement ([`PATH_STATEMENT`]).
pub fn path<C: GenericClient>(c: &mut C, session: i64, start: &str) -> Result<Vec<Entry>> {
    match path_statement(c, session, Some(start))? {
        PathAnswer::Path(_, path) => Ok(path),
        PathAnswer::NotFound | PathAnswer::DanglingLeaf(_) => {
            Err(crate::error::Error::EntryNotFound(start.to_owned()))
        }
    }
}

/// The session's leaf and the path from it, in one statement: what a resume
/// reads. `Ok((None, []))` for a session without a leaf; a leaf naming no
/// entry is `invalid_session` ([`crate::SessionStorage::leaf_id`]'s rule).
pub fn active_path<C: GenericClient>(
    c: &mut C,
    session: i64,
) -> Result<(Option<String>, Vec<Entry>)> {
    match path_statement(c, session, None)? {
        PathAnswer::Path(leaf, path) => Ok((leaf, path)),
        PathAnswer::NotFound => Ok((None, Vec::new())),
        PathAnswer::DanglingLeaf(leaf) => Err(crate::error::Error::DanglingReference(leaf)),
    }
}

/// Rows a streamed path read ([`visit_path`]) fetches per round trip: a few
/// hundred entries in memory at most, few round trips on a long path.
const PATH_BATCH: i32 = 256;

/// [`PATH_STATEMENT`] run through a portal in a read-only transaction and
/// handed to `sink` [`PATH_BATCH`] rows at a time, root-side first: the
/// server orders the rows, the client holds one batch whatever the path's
/// length. `start` `None` reads from the session's leaf, which is returned
/// (`Ok(None)` for a session without one); errors as [`path`] and
/// [`active_path`] answer them, before any entry.
pub fn visit_path(
    c: &mut ::postgres::Client,
    session: i64,
    start: Option<&str>,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<Option<String>> {
    use ::postgres::types::Type;
    let mut tx = c
        .build_transaction()
        .read_only(true)
        .start()
        .map_err(pg("starting a path read"))?;
    let statement = tx
        .prepare_typed(PATH_STATEMENT, &[Type::INT8, Type::TEXT])
        .map_err(pg("reading a path"))?;
    let portal = tx
        .bind(&statement, &[&session, &start])
        .map_err(pg("reading a path"))?;
    let mut first = true;
    let mut leaf = None;
    loop {
        let rows = tx
            .query_portal(&portal, PATH_BATCH)
            .map_err(pg("reading a path"))?;
        if rows.is_empty() {
            if first {
                return match start {
                    Some(id) => Err(crate::error::Error::EntryNotFound(id.to_owned())),
                    None => Ok(None),
                };
            }
            break;
        }
        for row in &rows {
            if first {
                first = false;
                leaf = col::<Option<String>>(row, 3)?;
                if let Some(missing) = col::<Option<String>>(row, 1)? {
                    return Err(if col::<Option<bool>>(row, 2)? == Some(true) {
                        crate::error::Error::ParentCycle(missing)
                    } else {
                        crate::error::Error::DanglingReference(missing)
                    });
                }
                if col::<Option<String>>(row, 0)?.is_none() {
                    return Err(match start {
                        Some(id) => crate::error::Error::EntryNotFound(id.to_owned()),
                        None => crate::error::Error::DanglingReference(leaf.unwrap_or_default()),
                    });
                }
            }
            sink(Entry::from_checked_text(col::<String>(row, 0)?))?;
        }
    }
    tx.commit().map_err(pg("ending a path read"))?;
    Ok(leaf)
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
