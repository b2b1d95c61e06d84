//! Checks of what the archive derives from each entry's stored text: that
//! it decodes (codec invariant 1) to an entry whose id and type are the
//! columns beside it, that its blob references are recorded and present
//! (invariant 3), and that its search row is there exactly when it has
//! searchable text, with the right role.

use super::codec::{body_refs, Codec};
use super::{search, sql};
use crate::entry::Entry;
use crate::error::Result;
use rusqlite::{Connection, OptionalExtension};
use std::collections::BTreeSet;

/// Problems with the stored text of one session's entries (empty when none).
pub(super) fn verify_stored_text(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut st = conn
        .prepare(
            "SELECT entry_key, id, type, json FROM entries WHERE session_key = ?1 ORDER BY seq",
        )
        .map_err(sql("checking stored text"))?;
    let mut refs = conn
        .prepare("SELECT blob_id FROM entry_blobs WHERE session_key = ?1 AND entry_key = ?2")
        .map_err(sql("checking stored text"))?;
    let mut blob = conn
        .prepare("SELECT 1 FROM blobs WHERE blob_id = ?1")
        .map_err(sql("checking stored text"))?;
    let mut search_row = conn
        .prepare("SELECT role FROM message_text WHERE rowid = ?1")
        .map_err(sql("checking stored text"))?;
    let mut rows = st
        .query([session_key])
        .map_err(sql("checking stored text"))?;
    while let Some(row) = rows.next().map_err(sql("checking stored text"))? {
        let key: i64 = row.get(0).map_err(sql("checking stored text"))?;
        let id: String = row.get(1).map_err(sql("checking stored text"))?;
        let kind: String = row.get(2).map_err(sql("checking stored text"))?;
        let stored = row.get_ref(3).map_err(sql("checking stored text"))?;
        let text = match codec.decode(conn, stored) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("entry {id}: its stored text does not decode: {e}"));
                continue;
            }
        };
        let entry = Entry::from_checked_text(text);
        if entry.id() != id || entry.entry_type().as_str() != kind {
            problems.push(format!(
                "entry {id}: its text says id {} and type {}, its row says {id} and {kind}",
                entry.id(),
                entry.entry_type().as_str()
            ));
        }
        let named: BTreeSet<i64> = body_refs(stored)?.blobs.into_iter().collect();
        let recorded: BTreeSet<i64> = refs
            .query_map(rusqlite::params![session_key, key], |r| r.get(0))
            .and_then(Iterator::collect)
            .map_err(sql("checking stored text"))?;
        if named != recorded {
            problems.push(format!(
                "entry {id}: its text holds blobs {named:?}, entry_blobs records {recorded:?}"
            ));
        }
        for b in &named {
            let present = blob
                .query_row([b], |_| Ok(()))
                .optional()
                .map_err(sql("checking stored text"))?
                .is_some();
            if !present {
                problems.push(format!("entry {id}: blob {b} is missing"));
            }
        }
        let indexed: Option<String> = search_row
            .query_row([key], |r| r.get(0))
            .optional()
            .map_err(sql("checking stored text"))?;
        match (search::searchable_text(&entry), indexed) {
            (Some((role, _)), Some(found)) if role != found => problems.push(format!(
                "entry {id}: its search row has role {found}, its text says {role}"
            )),
            (Some(_), None) => problems.push(format!("entry {id}: its search row is missing")),
            (None, Some(_)) => problems.push(format!(
                "entry {id}: has a search row but no searchable text"
            )),
            _ => {}
        }
    }
    Ok(problems)
}
