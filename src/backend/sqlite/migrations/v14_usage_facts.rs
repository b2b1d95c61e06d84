//! Schema version 14 (`schema/0014_usage_facts.sql`): every stored session's
//! last activity and usage facts, from its entries as an append writes them.
//! Runs in batches ([`super::batched`]): the step only adds a column and
//! tables that older builds never read.

use super::batched::{Batched, Cursor};
use crate::backend::sqlite::codec::Codec;
use crate::backend::sqlite::error::sql;
use crate::backend::sqlite::writer::{insert_usage_fact, write_last_active};
use crate::entry::{timestamp_millis, Entry};
use crate::error::Result;
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use std::collections::HashMap;

/// Fills `usage_facts` and `sessions.last_active_ms` for the entries already
/// stored, in entry order (the order an append would have written them, so
/// the first copy of a forked entry is the one counted); then the entries an
/// older build appended while the step ran, in the order it appended them.
/// Progress counts entries.
pub(super) const USAGE_FACTS: Batched = Batched {
    count: count_entries,
    chunk: fill_chunk,
};

const CONTEXT: &str = "recording usage of stored entries";

/// The entries stored when the step begins.
fn count_entries(tx: &Connection) -> Result<u64> {
    let total: i64 = tx
        .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
        .map_err(sql(CONTEXT))?;
    Ok(u64::try_from(total).unwrap_or(0))
}

/// Phase 0: up to `limit` entries after `cursor.at` = (session key, seq),
/// passing over those logged as appended since the step began; phase 1: up
/// to `limit` logged entries, oldest first, each taken off the log.
fn fill_chunk(tx: &Connection, cursor: &mut Cursor, limit: u64) -> Result<u64> {
    let codec = Codec::default();
    let mut newest: HashMap<i64, i64> = HashMap::new();
    let mut record = |session: i64, json: ValueRef<'_>| -> Result<()> {
        let entry = Entry::from_checked_text(codec.decode(tx, json)?);
        if let Some(fact) = crate::usage::usage_fact(&entry) {
            insert_usage_fact(tx, session, &fact)?;
        }
        if let Some(ms) = timestamp_millis(&entry.facts().timestamp) {
            let t = newest.entry(session).or_insert(ms);
            *t = (*t).max(ms);
        }
        Ok(())
    };
    let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut seen = 0u64;
    let mut did = 0u64;
    if cursor.phase == 0 {
        let mut st = tx
            .prepare(
                "SELECT e.session_key, e.seq, e.json, EXISTS (SELECT 1 FROM
                        sessiontree_migration_appended a WHERE a.entry_key = e.entry_key)
                   FROM entries e WHERE (e.session_key, e.seq) > (?1, ?2)
                  ORDER BY e.session_key, e.seq LIMIT ?3",
            )
            .map_err(sql(CONTEXT))?;
        let mut rows = st
            .query(rusqlite::params![cursor.at.0, cursor.at.1, limit_sql])
            .map_err(sql(CONTEXT))?;
        while let Some(row) = rows.next().map_err(sql(CONTEXT))? {
            seen += 1;
            let session: i64 = row.get(0).map_err(sql(CONTEXT))?;
            cursor.at = (session, row.get(1).map_err(sql(CONTEXT))?);
            if !row.get::<_, bool>(3).map_err(sql(CONTEXT))? {
                record(session, row.get_ref(2).map_err(sql(CONTEXT))?)?;
                did += 1;
            }
        }
        if seen < limit {
            cursor.phase = 1;
            cursor.at = (i64::MIN, i64::MIN);
        }
    } else {
        let mut st = tx
            .prepare(
                "SELECT a.n, e.session_key, e.json FROM sessiontree_migration_appended a
                   LEFT JOIN entries e ON e.entry_key = a.entry_key ORDER BY a.n LIMIT ?1",
            )
            .map_err(sql(CONTEXT))?;
        let mut rows = st.query([limit_sql]).map_err(sql(CONTEXT))?;
        let mut last = None;
        while let Some(row) = rows.next().map_err(sql(CONTEXT))? {
            seen += 1;
            last = Some(row.get::<_, i64>(0).map_err(sql(CONTEXT))?);
            if let Some(session) = row.get::<_, Option<i64>>(1).map_err(sql(CONTEXT))? {
                record(session, row.get_ref(2).map_err(sql(CONTEXT))?)?;
                did += 1;
            }
        }
        drop(rows);
        if let Some(last) = last {
            tx.execute(
                "DELETE FROM sessiontree_migration_appended WHERE n <= ?1",
                [last],
            )
            .map_err(sql(CONTEXT))?;
        }
        cursor.total += did;
        cursor.finished = seen < limit;
    }
    for (session, ms) in newest {
        write_last_active(tx, session, ms)?;
    }
    cursor.done += did;
    Ok(seen)
}
