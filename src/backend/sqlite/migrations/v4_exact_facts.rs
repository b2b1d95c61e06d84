//! Schema version 4 (`schema/0004_exact_facts.sql`): every session's
//! maintained facts and labels rewritten from a replay of its log.

use crate::backend::sqlite::codec::Codec;
use crate::backend::sqlite::error::sql;
use crate::backend::sqlite::writer::{replay_session_facts, write_session_facts};
use crate::error::Result;
use rusqlite::params;
use rusqlite::Transaction;

/// Rewrites every session's maintained facts and labels from a replay of its
/// log (schema version 4: correctly rounded statistics, labels and names as
/// JSON literals).
pub(super) fn refresh_all_session_facts(
    tx: &Transaction,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let keys: Vec<i64> = tx
        .prepare("SELECT session_key FROM sessions ORDER BY session_key")
        .and_then(|mut st| st.query_map([], |r| r.get(0)).and_then(Iterator::collect))
        .map_err(sql("listing sessions to refresh"))?;
    let total = keys.len() as u64;
    for (done, key) in keys.into_iter().enumerate() {
        progress(done as u64, total);
        // Version 4 predates compressed text: every row is plain TEXT.
        let (facts, labels) = replay_session_facts(tx, &Codec::default(), key)?;
        write_session_facts(tx, key, &facts)?;
        tx.execute("DELETE FROM labels WHERE session_key = ?1", [key])
            .map_err(sql("refreshing labels"))?;
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO labels (session_key, target_id, label) VALUES (?1, ?2, ?3)",
            )
            .map_err(sql("refreshing labels"))?;
        for (target, label) in &labels {
            insert
                .execute(params![key, target, label.json()])
                .map_err(sql("refreshing labels"))?;
        }
    }
    Ok(())
}
