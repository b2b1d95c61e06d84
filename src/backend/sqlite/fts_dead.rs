//! Search rows a delete leaves behind (schema step 0020).
//!
//! FTS5 deletes a row of a contentless index by adding a tombstone to every
//! segment that may hold it, and rebuilds a segment's tombstone hash whole,
//! in the one delete that finds a page of it half full: deleting a
//! 1,000,000-entry session ended with a rebuild of up to half a million
//! rowids, one statement no batch can split (71–153 ms under the write lock
//! at 1,000,000 entries). So a delete leaves its entries' rows in the index
//! ([`leave_behind`]) and records, per branch-cache segment (an entry key's
//! upper 32 bits), how many rows and indexed tokens it left in the index's
//! `dead_` table ([`dead_table`]). Search passes over them and takes them
//! out of its ranking's totals; `compact` removes them ([`remove_step`] for
//! a few, the rebuild of [`super::fts_rebuild`] for many).
//!
//! # Invariants
//! 1. **Every search row without an entry lies in a segment the index's
//!    `dead_` table names**, with how many such rows of that segment the
//!    index holds and their tokens (`check` holds an archive to it). (While
//!    a delete is under way, the same segment's other rows are those of
//!    entries it has yet to delete, in a session no search reads.)
//! 2. **A segment named there has no entry of a published session**: it is
//!    recorded in the transaction that deletes its entries, and a session's
//!    entries go only when the session is deleted (or a half-done fork
//!    undone), its row marked unpublished first.
//! 3. **No new segment takes an id named there** ([`highest_dead_segment`]),
//!    so no new entry's key meets a row left behind.

use super::error::sql;
use crate::error::Result;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::{BTreeMap, HashSet};

/// The search index `message_text`.
pub(super) const INDEX: &str = "message_text";

/// The table that names the segments whose rows were left in `index`
/// (`dead_message_text`: not `message_text_…`, which reads as one of FTS5's
/// own tables).
pub(super) fn dead_table(index: &str) -> String {
    format!("dead_{index}")
}

/// The entry keys of segment `segment`: its id in the upper 32 bits.
fn key_range(segment: i64) -> (i64, i64) {
    (segment << 32, (segment << 32) | 0xFFFF_FFFF)
}

/// The indexed tokens of a row's `_docsize.sz` value, column `column` of
/// `row`.
fn tokens_of(row: &rusqlite::Row<'_>, column: usize) -> rusqlite::Result<u64> {
    Ok(row
        .get_ref(column)?
        .as_blob_or_null()?
        .map_or(0, super::fts::indexed_length))
}

/// Leaves the search rows of session `session_key`'s entries from `seq`
/// `lowest` on, which the caller deletes in the same transaction, in `index`
/// (`message_text`, or the index a compact builds beside it) and records
/// them in its `dead_` table.
pub(super) fn leave_behind(
    conn: &Connection,
    index: &str,
    session_key: i64,
    lowest: i64,
) -> Result<()> {
    let ctx = "deleting a session";
    let mut left: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut rows = conn
        .prepare_cached(&format!(
            "SELECT e.entry_key, d.sz FROM entries e JOIN {index}_docsize d ON d.id = e.entry_key
             WHERE e.session_key = ?1 AND e.seq >= ?2"
        ))
        .map_err(sql(ctx))?;
    let mut found = rows.query(params![session_key, lowest]).map_err(sql(ctx))?;
    while let Some(row) = found.next().map_err(sql(ctx))? {
        let key: i64 = row.get(0).map_err(sql(ctx))?;
        let tokens = tokens_of(row, 1).map_err(sql(ctx))?;
        let segment = left.entry(key >> 32).or_default();
        segment.0 += 1;
        segment.1 += i64::try_from(tokens).unwrap_or(i64::MAX);
    }
    drop(found);
    let mut record = conn
        .prepare_cached(&format!(
            "INSERT INTO {} (segment_id, rows, tokens) VALUES (?1, ?2, ?3)
             ON CONFLICT (segment_id) DO UPDATE
             SET rows = rows + excluded.rows, tokens = tokens + excluded.tokens",
            dead_table(index)
        ))
        .map_err(sql(ctx))?;
    for (segment, (rows, tokens)) in left {
        record
            .execute(params![segment, rows, tokens])
            .map_err(sql(ctx))?;
    }
    Ok(())
}

/// The segments whose rows `message_text` holds for deleted entries (empty
/// for an archive with none: then nothing need be passed over).
pub(super) fn dead_segments(conn: &Connection) -> Result<HashSet<i64>> {
    conn.prepare_cached("SELECT segment_id FROM dead_message_text")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .map_err(sql("reading the search rows of deleted entries"))
}

/// The rows and tokens `message_text` holds for deleted entries.
pub(super) fn dead_totals(conn: &Connection) -> Result<(u64, u64)> {
    conn.prepare_cached(
        "SELECT coalesce(sum(rows), 0), coalesce(sum(tokens), 0) FROM dead_message_text",
    )
    .and_then(|mut st| st.query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))))
    .map(|(rows, tokens)| (rows.max(0) as u64, tokens.max(0) as u64))
    .map_err(sql("reading the search rows of deleted entries"))
}

/// The highest segment id a `dead_` table that writers keep names (the
/// index's, and the one of the index a compact builds beside it): a new
/// segment's id must be above it.
pub(super) fn highest_dead_segment(conn: &Connection) -> Result<Option<i64>> {
    let ctx = "choosing a new segment's id";
    let mut highest: Option<i64> = conn
        .prepare_cached("SELECT max(segment_id) FROM dead_message_text")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(sql(ctx))?;
    if super::fts_rebuild::rebuilding(conn)? {
        let next: Option<i64> = conn
            .prepare_cached(&format!(
                "SELECT max(segment_id) FROM {}",
                dead_table(super::fts_rebuild::NEXT)
            ))
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .optional()
            .map_err(sql(ctx))?
            .flatten();
        highest = highest.max(next);
    }
    Ok(highest)
}

/// Rows of one segment removed per step of [`remove_step`].
const REMOVE_ROWS: i64 = 64;

/// One step of removing the rows `message_text` holds for deleted entries
/// the way FTS5 deletes (a tombstone each, merged out by the merge that
/// follows): up to [`REMOVE_ROWS`] of the lowest segment's, or its record
/// once it has none (the rows of entries a delete under way has yet to
/// delete are left to it). True when none is left. For a few rows: FTS5
/// rebuilds a tombstone hash in one statement, so many are better dropped
/// by building the index again.
pub(super) fn remove_step(conn: &Connection) -> Result<bool> {
    let ctx = "removing the search rows of deleted entries";
    let segment: Option<i64> = conn
        .prepare_cached("SELECT min(segment_id) FROM dead_message_text")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(sql(ctx))?;
    let Some(segment) = segment else {
        return Ok(true);
    };
    let (from, to) = key_range(segment);
    let found: Vec<(i64, u64)> = conn
        .prepare_cached(
            "SELECT d.id, d.sz FROM message_text_docsize d WHERE d.id BETWEEN ?1 AND ?2
               AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.entry_key = d.id) LIMIT ?3",
        )
        .and_then(|mut st| {
            st.query_map(params![from, to, REMOVE_ROWS], |r| {
                Ok((r.get(0)?, tokens_of(r, 1)?))
            })?
            .collect()
        })
        .map_err(sql(ctx))?;
    if found.is_empty() {
        conn.prepare_cached("DELETE FROM dead_message_text WHERE segment_id = ?1")
            .and_then(|mut st| st.execute([segment]))
            .map_err(sql(ctx))?;
        return Ok(false);
    }
    let mut delete = conn
        .prepare_cached("DELETE FROM message_text WHERE rowid = ?1")
        .map_err(sql(ctx))?;
    let mut tokens = 0u64;
    for (key, length) in &found {
        delete.execute([key]).map_err(sql(ctx))?;
        tokens += length;
    }
    conn.prepare_cached(
        "UPDATE dead_message_text SET rows = rows - ?2, tokens = tokens - ?3 WHERE segment_id = ?1",
    )
    .and_then(|mut st| {
        st.execute(params![
            segment,
            found.len() as i64,
            i64::try_from(tokens).unwrap_or(i64::MAX)
        ])
    })
    .map_err(sql(ctx))?;
    Ok(false)
}

/// What `check` finds wrong with the rows `message_text` holds for deleted
/// entries: a recorded segment of a published session (its entries would
/// be passed over by search), or counts that are not the rows and tokens
/// the index holds in the segment.
pub(super) fn problems(conn: &Connection) -> Result<Vec<String>> {
    let ctx = "checking the search rows of deleted entries";
    let mut problems = Vec::new();
    let published: i64 = conn
        .query_row(
            "SELECT count(*) FROM dead_message_text g
             JOIN segments s ON s.segment_id = g.segment_id
             JOIN sessions ss ON ss.session_key = s.session_key
             WHERE ss.staged_from IS NULL",
            [],
            |r| r.get(0),
        )
        .map_err(sql(ctx))?;
    if published > 0 {
        problems.push(format!(
            "dead_message_text: {published} segments of stored sessions are recorded as deleted \
             (search passes over their entries)"
        ));
    }
    let recorded: Vec<(i64, i64, i64)> = conn
        .prepare("SELECT segment_id, rows, tokens FROM dead_message_text ORDER BY segment_id")
        .and_then(|mut st| {
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })
        .map_err(sql(ctx))?;
    let mut held = conn
        .prepare(
            "SELECT d.sz FROM message_text_docsize d WHERE d.id BETWEEN ?1 AND ?2
               AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.entry_key = d.id)",
        )
        .map_err(sql(ctx))?;
    let mut wrong = 0;
    for (segment, rows, tokens) in recorded {
        let (from, to) = key_range(segment);
        let (mut n, mut t) = (0i64, 0u64);
        let mut found = held.query(params![from, to]).map_err(sql(ctx))?;
        while let Some(row) = found.next().map_err(sql(ctx))? {
            n += 1;
            t += tokens_of(row, 0).map_err(sql(ctx))?;
        }
        if n != rows || i64::try_from(t).ok() != Some(tokens) {
            wrong += 1;
        }
    }
    if wrong > 0 {
        problems.push(format!(
            "dead_message_text: {wrong} segments record other row or token counts than the \
             search index holds for them"
        ));
    }
    Ok(problems)
}
