//! A session's skeleton ([`crate::skeleton`]) read from the archive's
//! indexes alone: no entry text is decoded, and no page of the `entries`
//! table is read.
//!
//! Since schema 6 `entries` has no parent column: an entry's parent is
//! implied by its key (`entry_key = segment << 32 | depth`, see the
//! invariants in [`crate::backend::branch_cache`]): the entry at `depth - 1` of the
//! same segment if `depth` is past the segment's `first_depth`, else the
//! entry at `depth - 1` of `parent_segment`; a root segment's first entry has
//! no parent, or the dangling `missing_root_parent`. Each query below is
//! answered by one index alone (`entries_by_seq`, `entries_by_id`, the partial
//! `entries_by_type`, `segments_by_session`, the `labels` key), so a session
//! of `N` entries costs `N` index rows of a few dozen bytes each, whatever
//! its text weighs.

use super::branch_cache::{entry_key, split_key};
use super::codec::Codec;
use super::error::sql;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::skeleton::{SkeletonEntry, SkeletonItem, SkeletonParent};
use rusqlite::{params, Connection};
use std::collections::HashMap;

/// Entries read per statement by [`visit_by_id`].
const BY_ID_BATCH: usize = 256;

/// What a skeleton needs of a segment.
struct Seg {
    parent: Option<i64>,
    first_depth: i64,
    missing_root_parent: Option<String>,
}

/// Hands `sink` the skeleton of session `session_key`: every entry (in id
/// order, each with its log position and its parent's), then the current labels.
pub(super) fn visit(
    conn: &Connection,
    session_key: i64,
    sink: &mut dyn FnMut(SkeletonItem<'_>) -> Result<()>,
) -> Result<()> {
    let fail = sql("reading the tree's skeleton");
    // Log positions by entry key, sorted by key for the parent lookups.
    let mut by_key: Vec<(i64, u32)> = Vec::new();
    {
        let mut st = conn
            .prepare_cached(
                "SELECT entry_key, seq FROM entries INDEXED BY entries_by_seq
                 WHERE session_key = ?1",
            )
            .map_err(&fail)?;
        let mut rows = st.query([session_key]).map_err(&fail)?;
        while let Some(r) = rows.next().map_err(&fail)? {
            let seq: i64 = r.get(1).map_err(&fail)?;
            let pos = u32::try_from(seq)
                .map_err(|_| Error::Corrupt(format!("an entry's log position is {seq}")))?;
            by_key.push((r.get(0).map_err(&fail)?, pos));
        }
    }
    by_key.sort_unstable();
    let pos_of = |key: i64| -> Result<usize> {
        by_key
            .binary_search_by_key(&key, |&(k, _)| k)
            .map(|i| by_key[i].1 as usize)
            .map_err(|_| {
                let (s, d) = split_key(key);
                Error::Corrupt(format!(
                    "the branch cache names entry {d} of segment {s}, which is not stored"
                ))
            })
    };
    let mut segments: HashMap<i64, Seg> = HashMap::new();
    {
        let mut st = conn
            .prepare_cached(
                "SELECT segment_id, parent_segment, first_depth, missing_root_parent
                 FROM segments WHERE session_key = ?1",
            )
            .map_err(&fail)?;
        let mut rows = st.query([session_key]).map_err(&fail)?;
        while let Some(r) = rows.next().map_err(&fail)? {
            segments.insert(
                r.get(0).map_err(&fail)?,
                Seg {
                    parent: r.get(1).map_err(&fail)?,
                    first_depth: r.get(2).map_err(&fail)?,
                    missing_root_parent: r.get(3).map_err(&fail)?,
                },
            );
        }
    }
    // Types other than `message`, by log position: the partial type index
    // holds exactly these (most entries are messages).
    let mut types: HashMap<u32, String> = HashMap::new();
    {
        let mut st = conn
            .prepare_cached(
                "SELECT seq, type FROM entries INDEXED BY entries_by_type
                 WHERE session_key = ?1 AND type <> 'message'",
            )
            .map_err(&fail)?;
        let mut rows = st.query([session_key]).map_err(&fail)?;
        while let Some(r) = rows.next().map_err(&fail)? {
            let seq: i64 = r.get(0).map_err(&fail)?;
            types.insert(
                u32::try_from(seq).unwrap_or(u32::MAX),
                r.get(1).map_err(&fail)?,
            );
        }
    }
    {
        let mut st = conn
            .prepare_cached(
                "SELECT id, entry_key FROM entries INDEXED BY entries_by_id
                 WHERE session_key = ?1",
            )
            .map_err(&fail)?;
        let mut rows = st.query([session_key]).map_err(&fail)?;
        while let Some(r) = rows.next().map_err(&fail)? {
            let id: &str = r.get_ref(0).and_then(|v| Ok(v.as_str()?)).map_err(&fail)?;
            let key: i64 = r.get(1).map_err(&fail)?;
            let pos = pos_of(key)?;
            let (seg_id, depth) = split_key(key);
            let seg = segments.get(&seg_id).ok_or_else(|| {
                Error::Corrupt(format!(
                    "entry {id} lies in segment {seg_id}, which is not stored"
                ))
            })?;
            let parent = if depth > seg.first_depth {
                SkeletonParent::At(pos_of(key - 1)?)
            } else if let Some(p) = seg.parent {
                SkeletonParent::At(pos_of(entry_key(p, depth - 1))?)
            } else {
                seg.missing_root_parent
                    .as_deref()
                    .map_or(SkeletonParent::None, SkeletonParent::Id)
            };
            let entry_type = types.get(&(pos as u32)).map_or("message", String::as_str);
            sink(SkeletonItem::Entry(SkeletonEntry {
                pos,
                id,
                parent,
                entry_type,
                // A message's role is in its text only.
                user: (entry_type != "message").then_some(false),
            }))?;
        }
    }
    // The labels table is the replay of the label entries: each current
    // label once (a cleared one has no row).
    let mut st = conn
        .prepare_cached("SELECT target_id FROM labels WHERE session_key = ?1")
        .map_err(&fail)?;
    let mut rows = st.query([session_key]).map_err(&fail)?;
    while let Some(r) = rows.next().map_err(&fail)? {
        let target: &str = r.get_ref(0).and_then(|v| Ok(v.as_str()?)).map_err(&fail)?;
        sink(SkeletonItem::Label { target, set: true })?;
    }
    Ok(())
}

/// Hands `sink` the entries answering to `ids` (with their index in `ids`),
/// one statement per batch, decoding one entry at a time.
pub(super) fn visit_by_id(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    ids: &[&str],
    sink: &mut dyn FnMut(usize, Entry) -> Result<()>,
) -> Result<()> {
    let fail = sql("reading entries by id");
    let mut st = conn
        .prepare_cached(
            // CROSS JOIN keeps the list outermost: left to the planner, it
            // scanned the whole session once per id asked.
            "SELECT j.key, e.json FROM json_each(?2) j
             CROSS JOIN entries e INDEXED BY entries_by_id
             WHERE e.session_key = ?1 AND e.id = j.value",
        )
        .map_err(&fail)?;
    for (b, batch) in ids.chunks(BY_ID_BATCH).enumerate() {
        let list = serde_json::to_string(batch)
            .map_err(|e| Error::Corrupt(format!("listing entry ids: {e}")))?;
        let mut rows = st.query(params![session_key, list]).map_err(&fail)?;
        while let Some(r) = rows.next().map_err(&fail)? {
            let i: i64 = r.get(0).map_err(&fail)?;
            let entry = codec.decode_entry(conn, r.get_ref(1).map_err(&fail)?, None)?;
            let i = usize::try_from(i).unwrap_or(usize::MAX);
            sink(b * BY_ID_BATCH + i, entry)?;
        }
    }
    Ok(())
}

/// Whether each of `ids` is a user message, from the role each entry's row
/// names (`entries.role_id`, the message's `role` as
/// [`crate::search::searchable_text`] reads it); a message with no text to
/// search has no role there and its own text read.
pub(super) fn visit_user_messages(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    ids: &[&str],
    sink: &mut dyn FnMut(usize, bool) -> Result<()>,
) -> Result<()> {
    let fail = sql("reading message roles");
    let mut st = conn
        .prepare_cached(
            "SELECT j.key, r.name FROM json_each(?2) j
             CROSS JOIN entries e INDEXED BY entries_by_id
             LEFT JOIN roles r ON r.role_id = e.role_id
             WHERE e.session_key = ?1 AND e.id = j.value",
        )
        .map_err(&fail)?;
    for (b, batch) in ids.chunks(BY_ID_BATCH).enumerate() {
        let list = serde_json::to_string(batch)
            .map_err(|e| Error::Corrupt(format!("listing entry ids: {e}")))?;
        let mut unindexed = Vec::new();
        let mut rows = st.query(params![session_key, list]).map_err(&fail)?;
        while let Some(r) = rows.next().map_err(&fail)? {
            let i = usize::try_from(r.get::<_, i64>(0).map_err(&fail)?).unwrap_or(usize::MAX);
            match r.get_ref(1).map_err(&fail)? {
                rusqlite::types::ValueRef::Text(role) => {
                    sink(b * BY_ID_BATCH + i, role == b"user")?
                }
                _ => unindexed.push(i),
            }
        }
        let rest: Vec<&str> = unindexed
            .iter()
            .filter_map(|&i| batch.get(i).copied())
            .collect();
        visit_by_id(conn, codec, session_key, &rest, &mut |k, e| {
            sink(b * BY_ID_BATCH + unindexed[k], e.facts().is_user_message())
        })?;
    }
    Ok(())
}
