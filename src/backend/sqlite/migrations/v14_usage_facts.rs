//! Schema version 14 (`schema/0014_usage_facts.sql`): every stored session's
//! last activity and usage facts, from its entries as an append writes them.

use crate::backend::sqlite::codec::Codec;
use crate::backend::sqlite::error::sql;
use crate::backend::sqlite::writer::{insert_usage_fact, write_last_active};
use crate::entry::{timestamp_millis, Entry};
use crate::error::Result;
use rusqlite::Transaction;

/// Fills `usage_facts` and `sessions.last_active_ms` for the entries already
/// stored, in entry order (the order an append would have written them, so
/// the first copy of a forked entry is the one counted).
pub(super) fn fill_usage_facts(tx: &Transaction, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
    let context = "recording usage of stored entries";
    let codec = Codec::default();
    let total: i64 = tx
        .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
        .map_err(sql(context))?;
    let total = u64::try_from(total).unwrap_or(0);
    progress(0, total);
    let mut st = tx
        .prepare("SELECT session_key, json FROM entries ORDER BY session_key, seq")
        .map_err(sql(context))?;
    let mut rows = st.query([]).map_err(sql(context))?;
    let mut newest: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
    let mut done = 0u64;
    while let Some(row) = rows.next().map_err(sql(context))? {
        let session: i64 = row.get(0).map_err(sql(context))?;
        let text = codec.decode(tx, row.get_ref(1).map_err(sql(context))?)?;
        let entry = Entry::from_checked_text(text);
        if let Some(fact) = crate::usage::usage_fact(&entry) {
            insert_usage_fact(tx, session, &fact)?;
        }
        if let Some(ms) = timestamp_millis(&entry.facts().timestamp) {
            let t = newest.entry(session).or_insert(ms);
            *t = (*t).max(ms);
        }
        done += 1;
        if done.is_multiple_of(4096) {
            progress(done, total);
        }
    }
    for (session, ms) in newest {
        write_last_active(tx, session, ms)?;
    }
    progress(done, total);
    Ok(())
}
