//! Schema version 5 (`schema/0005_branch_cache_v2.sql`): a version-1
//! branch cache rewritten into bounded ancestry blocks with jump pointers.

use crate::backend::branch_rules::{jump_for_child, ANCESTRY_BLOCK};
use crate::backend::sqlite::error::sql;
use crate::error::Error;
use crate::error::Result;
use rusqlite::params;
use rusqlite::Connection;
use std::collections::HashMap;

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
