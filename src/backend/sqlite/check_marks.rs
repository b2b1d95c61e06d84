//! What `check` verified of each session (`check_marks`, schema step 16), so
//! that a plain `check` reads only the entries appended since and
//! `check --full` everything.
//!
//! A mark says: the entries with `seq` up to its own were verified, and the
//! replay of them gave these facts and labels. A session only grows by
//! appends, which insert entries, raise a segment's `tail_depth` and add leaf
//! events, compactions and labels; anything else that touches its rows (a
//! re-encode, a delete, an import that replaces it, a migration's rewrite)
//! fires a trigger of the schema that deletes the mark (`schema/0016_check_marks.sql`),
//! so no writer has to remember it. What the triggers cannot see (bytes
//! changed under SQLite, a bug that writes through another table) is what
//! `check --full` is for; the [`digest`] catches the part of it that changes
//! the verified part's leaf events, compactions, segments or entry count.
//!
//! Writing a mark is two steps: [`claim`] before the check reads (in its own
//! short transaction), [`record`] after, only where the claim is still
//! there: a rewrite that commits between the two deleted it with the mark.

use super::error::sql;
use super::migrations::current_version;
use super::rows::{facts_at, FACTS_COLUMNS};
use crate::backend::session_rows::{stored_js_string, FactValues};
use crate::error::Result;
use crate::fnv::Fnv;
use crate::json::JsString;
use crate::rules::Replay;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::collections::HashMap;

/// What a check verified of one session: its entries through `seq`, and what
/// their replay gave.
#[derive(Debug, Clone)]
pub(super) struct Mark {
    /// The last entry verified.
    pub(super) seq: i64,
    /// The session's facts as a replay through `seq` gives them.
    pub(super) facts: Replay,
    /// Its labels as that replay gives them.
    pub(super) labels: HashMap<String, JsString>,
    /// [`digest`] of the session through `seq` when it was verified.
    pub(super) digest: i64,
}

/// The mark of session `key`, if a check of this schema version left one.
/// (A mark of another version is not used: a migration may store facts
/// another way.) A mark whose labels do not read is no mark: the session is
/// then verified whole.
pub(super) fn load(conn: &Connection, key: i64) -> Result<Option<Mark>> {
    let version = current_version(conn)?;
    let row = conn
        .prepare_cached(&format!(
            "SELECT seq, digest, labels, {FACTS_COLUMNS} FROM check_marks
             WHERE session_key = ?1 AND seq IS NOT NULL AND schema_version = ?2"
        ))
        .and_then(|mut st| {
            st.query_row(params![key, version], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    facts_at(r, 3)?,
                ))
            })
            .optional()
        })
        .map_err(sql("reading what the last check verified"))?;
    let Some((seq, digest, labels, facts)) = row else {
        return Ok(None);
    };
    let Ok(pairs) = serde_json::from_str::<Vec<(String, String)>>(&labels) else {
        return Ok(None);
    };
    let labels = pairs
        .into_iter()
        .map(|(target, label)| (target, stored_js_string(label)))
        .collect();
    Ok(Some(Mark {
        seq,
        facts,
        labels,
        digest,
    }))
}

/// Claims the marks of `keys` for check run `run` (a mark already there is
/// kept, to be read): [`record`] writes only where this claim survives.
pub(super) fn claim(conn: &Connection, keys: &[i64], run: i64) -> Result<()> {
    let what = "claiming check marks";
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
        .map_err(sql(what))?;
    {
        let mut st = tx
            .prepare_cached(
                "INSERT INTO check_marks (session_key, run) VALUES (?1, ?2)
                 ON CONFLICT (session_key) DO UPDATE SET run = excluded.run",
            )
            .map_err(sql(what))?;
        for key in keys {
            st.execute(params![key, run]).map_err(sql(what))?;
        }
    }
    tx.commit().map_err(sql(what))
}

/// Writes `marks` (session key, mark) where run `run`'s claim is still
/// there, in one transaction; the number written.
pub(super) fn record(conn: &Connection, run: i64, marks: &[(i64, Mark)]) -> Result<usize> {
    let what = "recording what check verified";
    if marks.is_empty() {
        return Ok(0);
    }
    let version = current_version(conn)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
        .map_err(sql(what))?;
    let mut written = 0;
    {
        let mut st = tx
            .prepare_cached(
                "UPDATE check_marks SET seq = ?3, schema_version = ?4, digest = ?5,
                        checked_ms = ?6, labels = ?7, leaf_id = ?8, name = ?9,
                        entry_count = ?10, message_count = ?11, cached_tokens = ?12,
                        uncached_tokens = ?13, total_tokens = ?14, cost_total = ?15,
                        broken_message_id = ?16
                 WHERE session_key = ?1 AND run = ?2",
            )
            .map_err(sql(what))?;
        for (key, mark) in marks {
            let mut labels: Vec<(&str, &str)> = mark
                .labels
                .iter()
                .map(|(t, l)| (t.as_str(), l.json()))
                .collect();
            labels.sort_unstable();
            // Strings always serialize; were it ever empty, the mark
            // would not read back, and the session would be read whole.
            let labels = serde_json::to_string(&labels).unwrap_or_default();
            let f = FactValues::of(&mark.facts);
            written += st
                .execute(params![
                    key,
                    run,
                    mark.seq,
                    version,
                    mark.digest,
                    now,
                    labels,
                    f.leaf,
                    f.name,
                    f.entry_count,
                    f.message_count,
                    f.cached_tokens,
                    f.uncached_tokens,
                    f.total_tokens,
                    f.cost_total,
                    f.broken_message
                ])
                .map_err(sql(what))?;
        }
    }
    tx.commit().map_err(sql(what))?;
    Ok(written)
}

/// FNV-1a 64 of session `key`'s rows that belong to its entries through
/// `seq` and that appends never change: how many entries there are, the
/// segments they began (every column but `tail_depth`, which appends raise),
/// their leaf events and their compactions' stops. Read from the tables and
/// their indexes without any entry's text.
pub(super) fn digest(conn: &Connection, key: i64, seq: i64) -> Result<i64> {
    const PARTS: [&str; 4] = [
        "SELECT count(*) FROM entries WHERE session_key = ?1 AND seq <= ?2",
        "SELECT s.segment_id, s.parent_segment, s.first_depth, s.position, s.jump_segment,
                s.inherited_compaction, s.missing_root_parent
         FROM segments s JOIN entries e ON e.entry_key = (s.segment_id << 32) | s.first_depth
         WHERE s.session_key = ?1 AND e.seq <= ?2 ORDER BY s.segment_id",
        "SELECT seq, entry_key, target_id FROM leaf_events
         WHERE session_key = ?1 AND seq <= ?2 ORDER BY seq",
        "SELECT c.entry_key, c.stop_key FROM compactions c JOIN entries e USING (entry_key)
         WHERE c.session_key = ?1 AND e.seq <= ?2 ORDER BY c.entry_key",
    ];
    let mut h = Fnv::new();
    for part in PARTS {
        let mut st = conn
            .prepare_cached(part)
            .map_err(sql("digesting what check verified"))?;
        let columns = st.column_count();
        let mut rows = st
            .query(params![key, seq])
            .map_err(sql("digesting what check verified"))?;
        while let Some(row) = rows.next().map_err(sql("digesting what check verified"))? {
            for i in 0..columns {
                let value = row
                    .get_ref(i)
                    .map_err(sql("digesting what check verified"))?;
                // A tag per value, so that NULL, 0 and "" differ.
                match value {
                    ValueRef::Null => h.update(b"n"),
                    ValueRef::Integer(n) => {
                        h.update(b"i");
                        h.update(&n.to_le_bytes());
                    }
                    ValueRef::Real(x) => {
                        h.update(b"r");
                        h.update(&x.to_le_bytes());
                    }
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        h.update(b"t");
                        h.update(&(t.len() as u64).to_le_bytes());
                        h.update(t);
                    }
                }
            }
        }
        h.update(b"|");
    }
    Ok(h.value() as i64)
}
