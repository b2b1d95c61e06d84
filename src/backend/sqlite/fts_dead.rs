//! Search rows a delete leaves behind (schema step 0020).
//!
//! FTS5 deletes a row of a contentless index by adding a tombstone to every
//! segment that may hold it, and rebuilds a segment's tombstone hash whole,
//! in the one delete that finds a page of it half full: deleting a
//! 1,000,000-entry session ended with a rebuild of up to half a million
//! rowids, one statement no batch can split (71–153 ms under the write lock
//! at 1,000,000 entries). So a delete leaves its entries' rows in the index
//! ([`leave_behind`]) and records, per run of consecutive branch-cache
//! segments (an entry key's upper 32 bits), how many rows and indexed
//! tokens it left, in the index's `dead_` table ([`dead_table`]). Runs, not
//! single segments: a session of a million forks has a million segments,
//! numbered one after another as it was written, and each search reads the
//! record whole ([`left_behind`]). Search passes over the rows and takes
//! them out of its ranking's totals; `compact` removes them
//! ([`remove_step`] for a few, the rebuild of [`super::fts_rebuild`] for
//! many).
//!
//! # Invariants
//! 1. **Every search row without an entry lies in a run the index's `dead_`
//!    table names**, which counts those rows of the run and their tokens
//!    (`check` holds an archive to it). While a delete is under way, the
//!    run's other rows are those of the entries it has yet to delete, in a
//!    session no search reads.
//! 2. **No segment in a run has an entry of a published session**: a run is
//!    recorded in the transaction that deletes its entries, and a session's
//!    entries go only when the session is deleted (or a half-done fork
//!    undone), its row marked unpublished first.
//! 3. **No new segment takes an id in a run** (`fts_rebuild`'s
//!    `highest_dead_segment`), so no new entry's key meets a row left
//!    behind.

use super::error::sql;
use crate::error::Result;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;

/// The search index `message_text`.
pub(super) const INDEX: &str = "message_text";

/// The table that names the runs of segments whose rows were left in
/// `index` (`dead_message_text`: not `message_text_…`, which reads as one of
/// FTS5's own tables).
pub(super) fn dead_table(index: &str) -> String {
    format!("dead_{index}")
}

/// The entry keys of segments `first` to `last`: a segment's id is a key's
/// upper 32 bits.
fn key_range(first: i64, last: i64) -> (i64, i64) {
    (first << 32, (last << 32) | 0xFFFF_FFFF)
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
/// them in its `dead_` table, joined to the runs next to them.
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
    // Consecutive segments as runs (first, last, rows, tokens).
    let mut runs: Vec<(i64, i64, i64, i64)> = Vec::new();
    for (segment, (rows, tokens)) in left {
        match runs.last_mut() {
            Some(run) if run.1 + 1 == segment => {
                run.1 = segment;
                run.2 += rows;
                run.3 += tokens;
            }
            _ => runs.push((segment, segment, rows, tokens)),
        }
    }
    for run in runs {
        record_run(conn, &dead_table(index), run)?;
    }
    Ok(())
}

/// Adds run `(first, last, rows, tokens)` to `table`, as one run with the
/// runs it overlaps or touches.
fn record_run(conn: &Connection, table: &str, run: (i64, i64, i64, i64)) -> Result<()> {
    let ctx = "deleting a session";
    let (mut first, mut last, mut rows, mut tokens) = run;
    // The run that begins at or before this one, if it reaches it.
    let before: Option<(i64, i64)> = conn
        .prepare_cached(&format!(
            "SELECT first_segment, last_segment FROM {table}
             WHERE first_segment <= ?1 ORDER BY first_segment DESC LIMIT 1"
        ))
        .and_then(|mut st| {
            st.query_row([first], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(sql(ctx))?;
    if let Some((from, to)) = before.filter(|&(_, to)| to + 1 >= first) {
        first = from;
        last = last.max(to);
    }
    // Every run that begins inside the joined one or right after it.
    let joined: Vec<(i64, i64, i64, i64)> = conn
        .prepare_cached(&format!(
            "DELETE FROM {table} WHERE first_segment BETWEEN ?1 AND ?2
             RETURNING first_segment, last_segment, rows, tokens"
        ))
        .and_then(|mut st| {
            st.query_map(params![first, last + 1], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect()
        })
        .map_err(sql(ctx))?;
    for (_, to, r, t) in joined {
        last = last.max(to);
        rows += r;
        tokens += t;
    }
    conn.prepare_cached(&format!(
        "INSERT INTO {table} (first_segment, last_segment, rows, tokens) VALUES (?1, ?2, ?3, ?4)"
    ))
    .and_then(|mut st| st.execute(params![first, last, rows, tokens]))
    .map_err(sql(ctx))?;
    Ok(())
}

/// The rows `message_text` holds for deleted entries, with the key ranges
/// of their runs (none in an archive without any: then nothing need be
/// passed over): the record read once, as each search needs it.
pub(super) fn left_behind(conn: &Connection) -> Result<super::fts::LeftBehind> {
    let runs: Vec<(i64, i64, i64, i64)> = conn
        .prepare_cached(
            "SELECT first_segment, last_segment, rows, tokens
             FROM dead_message_text ORDER BY first_segment",
        )
        .and_then(|mut st| {
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .map_err(sql("reading the search rows of deleted entries"))?;
    let mut left = super::fts::LeftBehind::default();
    for (first, last, rows, tokens) in runs {
        left.key_ranges.push(key_range(first, last));
        left.rows += rows.max(0) as u64;
        left.tokens += tokens.max(0) as u64;
    }
    Ok(left)
}

/// The rows and tokens `message_text` holds for deleted entries.
pub(super) fn dead_totals(conn: &Connection) -> Result<(u64, u64)> {
    left_behind(conn).map(|left| (left.rows, left.tokens))
}

/// The highest segment id in a run `index`'s `dead_` table names, if any:
/// the last of the run that begins last (runs never overlap), one lookup
/// by the table's key.
pub(super) fn highest_dead_segment(conn: &Connection, index: &str) -> Result<Option<i64>> {
    conn.prepare_cached(&format!(
        "SELECT last_segment FROM {} ORDER BY first_segment DESC LIMIT 1",
        dead_table(index)
    ))
    .and_then(|mut st| st.query_row([], |r| r.get(0)))
    .optional()
    .map_err(sql("choosing a new segment's id"))
}

/// The `message_text_docsize` rows (`d`) of entry keys `?1` to `?2` whose
/// entries are gone: the rows left behind there.
const LEFT_IN_RANGE: &str = "FROM message_text_docsize d WHERE d.id BETWEEN ?1 AND ?2
     AND NOT EXISTS (SELECT 1 FROM entries e WHERE e.entry_key = d.id)";

/// Rows removed per step of [`remove_step`].
const REMOVE_ROWS: i64 = 64;

/// One step of removing the rows `message_text` holds for deleted entries
/// the way FTS5 deletes (a tombstone each, merged out by the merge that
/// follows): up to [`REMOVE_ROWS`] of the lowest run's, or its record once
/// it has none (the rows of entries a delete under way has yet to delete
/// are left to it). True when none is left. For a few rows: FTS5 rebuilds
/// a tombstone hash in one statement, so many are better dropped by
/// building the index again.
pub(super) fn remove_step(conn: &Connection) -> Result<bool> {
    let ctx = "removing the search rows of deleted entries";
    let run: Option<(i64, i64)> = conn
        .prepare_cached(
            "SELECT first_segment, last_segment FROM dead_message_text
             ORDER BY first_segment LIMIT 1",
        )
        .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))).optional())
        .map_err(sql(ctx))?;
    let Some((first, last)) = run else {
        return Ok(true);
    };
    let (from, to) = key_range(first, last);
    let found: Vec<(i64, u64)> = conn
        .prepare_cached(&format!("SELECT d.id, d.sz {LEFT_IN_RANGE} LIMIT ?3"))
        .and_then(|mut st| {
            st.query_map(params![from, to, REMOVE_ROWS], |r| {
                Ok((r.get(0)?, tokens_of(r, 1)?))
            })?
            .collect()
        })
        .map_err(sql(ctx))?;
    if found.is_empty() {
        conn.prepare_cached("DELETE FROM dead_message_text WHERE first_segment = ?1")
            .and_then(|mut st| st.execute([first]))
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
        "UPDATE dead_message_text SET rows = rows - ?2, tokens = tokens - ?3
         WHERE first_segment = ?1",
    )
    .and_then(|mut st| {
        st.execute(params![
            first,
            found.len() as i64,
            i64::try_from(tokens).unwrap_or(i64::MAX)
        ])
    })
    .map_err(sql(ctx))?;
    Ok(false)
}

/// What `check` finds wrong with the record of the rows `message_text`
/// holds for deleted entries: a run that holds a segment of a published
/// session (search would pass over its entries), runs that overlap, or
/// counts that are not the rows and tokens the index holds there without
/// an entry.
pub(super) fn problems(conn: &Connection) -> Result<Vec<String>> {
    let ctx = "checking the search rows of deleted entries";
    let mut problems = Vec::new();
    let published: i64 = conn
        .query_row(
            "SELECT count(*) FROM dead_message_text g
             JOIN segments s ON s.segment_id BETWEEN g.first_segment AND g.last_segment
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
    let recorded: Vec<(i64, i64, i64, i64)> = conn
        .prepare(
            "SELECT first_segment, last_segment, rows, tokens FROM dead_message_text
             ORDER BY first_segment",
        )
        .and_then(|mut st| {
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .map_err(sql(ctx))?;
    let mut held = conn
        .prepare(&format!("SELECT d.sz {LEFT_IN_RANGE}"))
        .map_err(sql(ctx))?;
    let (mut wrong, mut overlapping, mut reached) = (0, 0, i64::MIN);
    for (first, last, rows, tokens) in recorded {
        if first <= reached || last < first {
            overlapping += 1;
        }
        reached = reached.max(last);
        let (from, to) = key_range(first, last);
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
    if overlapping > 0 {
        problems.push(format!(
            "dead_message_text: {overlapping} runs of segments overlap the run before them or end before they begin"
        ));
    }
    if wrong > 0 {
        problems.push(format!(
            "dead_message_text: {wrong} runs of segments record other row or token counts than \
             the search index holds for them"
        ));
    }
    Ok(problems)
}
