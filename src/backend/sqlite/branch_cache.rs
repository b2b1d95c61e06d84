//! The SQLite archive's branch cache: the statements of a [`CacheStore`]
//! over its tables, the path query and the rows it reads. The invariants,
//! bounds, the placement and the plan of a path read are
//! `backend::branch_cache`, written once for every store.

use super::codec::Codec;
use crate::backend::branch_cache::{plan_path, CacheStore, NewSegment, PathPlan};
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension};

pub use crate::backend::branch_cache::{
    entry_key, jump_for_child, split_key, OpenTail, Placement, Segment, ANCESTRY_BLOCK, OPEN_END,
};

fn sql(context: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| Error::sqlite(context, e)
}

/// The branch cache of session `session_key` on `conn` (inside the caller's
/// transaction where it writes): statements prepared once per connection.
#[derive(Debug, Clone, Copy)]
pub struct SqliteCache<'c> {
    conn: &'c Connection,
    session_key: i64,
}

impl<'c> SqliteCache<'c> {
    /// The cache of session `session_key` on `conn`.
    pub fn new(conn: &'c Connection, session_key: i64) -> Self {
        SqliteCache { conn, session_key }
    }
}

/// Segment `id`'s row (segment ids are unique in the archive).
pub(super) fn segment(conn: &Connection, id: i64) -> Result<Segment> {
    conn.prepare_cached(
        "SELECT parent_segment, first_depth, tail_depth, position, jump_segment,
                inherited_compaction, missing_root_parent
         FROM segments WHERE segment_id = ?1",
    )
    .and_then(|mut s| {
        s.query_row([id], |r| {
            Ok(Segment {
                id,
                parent: r.get(0)?,
                first_depth: r.get(1)?,
                tail_depth: r.get(2)?,
                position: r.get(3)?,
                jump: r.get(4)?,
                inherited_compaction: r.get(5)?,
                missing_root_parent: r.get(6)?,
            })
        })
    })
    .map_err(sql("reading a segment"))
}

/// The key of the entry answering to `id` in the session.
pub fn key_of(conn: &Connection, session_key: i64, id: &str) -> Result<Option<i64>> {
    conn.prepare_cached("SELECT entry_key FROM entries WHERE session_key = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![session_key, id], |r| r.get(0))
                .optional()
        })
        .map_err(sql("looking up an entry id"))
}

/// [`segment_holding`]'s statement (`?1` the segment, `?2` the depth).
pub const SEGMENT_HOLDING_QUERY: &str =
    "WITH RECURSIVE up (seg, first, parent, jump, jump_first) AS (
     SELECT s.segment_id, s.first_depth, s.parent_segment, s.jump_segment, j.first_depth
     FROM segments s LEFT JOIN segments j ON j.segment_id = s.jump_segment
     WHERE s.segment_id = ?1
     UNION ALL
     SELECT s.segment_id, s.first_depth, s.parent_segment, s.jump_segment, j.first_depth
     FROM up
     JOIN segments s ON s.segment_id = CASE WHEN up.jump_first > ?2 THEN up.jump ELSE up.parent END
     LEFT JOIN segments j ON j.segment_id = s.jump_segment
     WHERE up.first > ?2
 )
 SELECT seg FROM up WHERE first <= ?2 LIMIT 1";

/// Invariant 5's search ([`CacheStore::segment_holding`]): the segment on
/// `from`'s path that holds `depth`. One statement; `O(log position)` rows.
pub fn segment_holding(conn: &Connection, from: i64, depth: i64) -> Result<Option<i64>> {
    conn.prepare_cached(SEGMENT_HOLDING_QUERY)
        .and_then(|mut s| s.query_row([from, depth], |r| r.get(0)).optional())
        .map_err(sql("searching a path by depth"))
}

/// Copies a parent's (`?2`) ancestry block to its new child (`?1`), cut at
/// the fork depth (`?3`): the `ANCESTRY_BLOCK - 1` rows nearest the child.
/// (`+?2`: with a bare `?2` SQLite re-prepares this statement whenever the
/// bound value changes — same plan, a parse per fork; so the block size is
/// spelled out too rather than bound.)
const COPY_ANCESTRY: &str =
    "INSERT INTO segment_ancestry (segment_id, from_depth, ancestor_segment, to_depth)
     SELECT ?1, from_depth, ancestor_segment, min(to_depth, ?3)
     FROM segment_ancestry WHERE segment_id = +?2
     ORDER BY from_depth DESC LIMIT 7";

impl CacheStore for SqliteCache<'_> {
    fn segment(&mut self, id: i64) -> Result<Segment> {
        segment(self.conn, id)
    }

    fn position_and_jump(&mut self, id: i64) -> Result<(i64, Option<i64>)> {
        self.conn
            .prepare_cached("SELECT position, jump_segment FROM segments WHERE segment_id = ?1")
            .and_then(|mut s| s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(sql("reading a jump pointer"))
    }

    fn key_of(&mut self, id: &str) -> Result<Option<i64>> {
        key_of(self.conn, self.session_key, id)
    }

    fn last_compaction_in(&mut self, from: i64, to: i64) -> Result<Option<i64>> {
        self.conn
            .prepare_cached(
                "SELECT max(entry_key) FROM compactions WHERE entry_key BETWEEN ?1 AND ?2",
            )
            .and_then(|mut s| s.query_row([from, to], |r| r.get(0)))
            .map_err(sql("finding the nearest compaction"))
    }

    fn segment_holding(&mut self, from: i64, depth: i64) -> Result<Option<i64>> {
        segment_holding(self.conn, from, depth)
    }

    fn stop_of(&mut self, key: i64) -> Result<Option<i64>> {
        self.conn
            .prepare_cached("SELECT stop_key FROM compactions WHERE entry_key = ?1")
            .and_then(|mut s| s.query_row([key], |r| r.get(0)))
            .map_err(sql("reading a compaction's stop"))
    }

    fn has_dangling_roots(&mut self) -> Result<bool> {
        self.conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM segments WHERE session_key = ?1
                                AND missing_root_parent IS NOT NULL AND parent_segment IS NULL)",
            )
            .and_then(|mut s| s.query_row([self.session_key], |r| r.get(0)))
            .map_err(sql("checking dangling parents"))
    }

    fn is_missing_root_parent(&mut self, id: &str) -> Result<bool> {
        let orphaned: Option<i64> = self
            .conn
            .prepare_cached(
                "SELECT segment_id FROM segments WHERE session_key = ?1 AND missing_root_parent = ?2
                 AND parent_segment IS NULL LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row(params![self.session_key, id], |r| r.get(0))
                    .optional()
            })
            .map_err(sql("checking dangling parents"))?;
        Ok(orphaned.is_some())
    }

    /// The rowid: segment ids grow across the archive, and pass the
    /// segments whose search rows a delete left behind (`fts_dead`: a new
    /// entry's key must not meet one of those rows).
    fn insert_segment(&mut self, new: &NewSegment<'_>) -> Result<i64> {
        let id = match super::fts_rebuild::highest_dead_segment(self.conn)? {
            None => None,
            Some(dead) => {
                let highest: Option<i64> = self
                    .conn
                    .prepare_cached("SELECT max(segment_id) FROM segments")
                    .and_then(|mut s| s.query_row([], |r| r.get(0)))
                    .map_err(sql("creating a segment"))?;
                Some(highest.map_or(dead, |h| h.max(dead)) + 1)
            }
        };
        self.conn
            .prepare_cached(
                "INSERT INTO segments (segment_id, session_key, parent_segment, first_depth,
                                       tail_depth, position, jump_segment, inherited_compaction,
                                       missing_root_parent)
                 VALUES (?8, ?1, ?2, ?3, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    self.session_key,
                    new.parent,
                    new.first_depth,
                    new.position,
                    new.jump,
                    new.inherited_compaction,
                    new.missing_root_parent,
                    id
                ])
            })
            .map_err(sql("creating a segment"))?;
        Ok(self.conn.last_insert_rowid())
    }

    fn insert_own_ancestry(&mut self, id: i64, from_depth: i64, to_depth: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO segment_ancestry (segment_id, from_depth, ancestor_segment, to_depth)
                 VALUES (?1, ?2, ?1, ?3)",
            )
            .and_then(|mut s| s.execute(params![id, from_depth, to_depth]))
            .map_err(sql("writing segment ancestry"))?;
        Ok(())
    }

    fn copy_ancestry(&mut self, child: i64, parent: i64, cut: i64) -> Result<()> {
        self.conn
            .prepare_cached(COPY_ANCESTRY)
            .and_then(|mut s| s.execute(params![child, parent, cut]))
            .map_err(sql("writing segment ancestry"))?;
        Ok(())
    }

    fn set_tail_depth(&mut self, id: i64, tail_depth: i64) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE segments SET tail_depth = ?2 WHERE segment_id = ?1")
            .and_then(|mut s| s.execute(params![id, tail_depth]))
            .map_err(sql("extending a segment"))?;
        Ok(())
    }

    fn insert_compaction(&mut self, key: i64, stop: Option<i64>) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO compactions (entry_key, session_key, stop_key) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut s| s.execute(params![key, self.session_key, stop]))
            .map_err(sql("recording a compaction"))?;
        Ok(())
    }
}

/// Places a new entry of session `session_key` (`backend::branch_cache::place`
/// over this archive's tables). Must run inside the append's transaction.
pub fn place(
    conn: &Connection,
    session_key: i64,
    entry: &Entry,
    tail: &mut OpenTail,
) -> Result<Placement> {
    crate::backend::branch_cache::place(&mut SqliteCache::new(conn, session_key), entry, tail)
}

/// Counts of the work a path read did, for the complexity tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCost {
    /// SQL statements run.
    pub statements: u32,
    /// Rows the statements returned.
    pub rows: u64,
    /// Virtual-machine steps SQLite took (grows with rows touched, not returned).
    pub vm_steps: u64,
    /// Rows whose stored value was decoded (the rest came from the handle's cache).
    pub decoded: u64,
}

/// The plan of a path read from `start` ([`plan_path`]), its statements
/// counted in `cost`.
fn plan(
    conn: &Connection,
    session_key: i64,
    start: &str,
    start_key: Option<i64>,
    cost: &mut ReadCost,
) -> Result<PathPlan> {
    let mut cache = SqliteCache::new(conn, session_key);
    plan_path(&mut cache, start, start_key, &mut cost.statements)
}

/// The recursive walk every path read of the branch cache starts with
/// (`?1` the start's segment, `?2` the root-side depth, `?3` the start's
/// depth): from block to block (invariant 4), one row `(head, high)` per
/// block, `high` the deepest depth the block contributes. Written once, for
/// [`PATH_QUERY`], [`PATH_RANGES_QUERY`] and the storage's facts query.
macro_rules! path_walk {
    () => {
        "WITH RECURSIVE walk (head, high) AS (
     SELECT ?1, ?3
     UNION ALL
     SELECT s.parent_segment, a.from_depth - 1
     FROM walk
     JOIN segment_ancestry a ON a.segment_id = walk.head
          AND a.from_depth = (SELECT min(from_depth) FROM segment_ancestry WHERE segment_id = walk.head)
     JOIN segments s ON s.segment_id = a.ancestor_segment
     WHERE a.from_depth > ?2 AND s.parent_segment IS NOT NULL
 )"
    };
}
pub(super) use path_walk;

/// The path query (`?1` the start's segment, `?2` the root-side depth, `?3`
/// the start's depth): a recursive walk from block to block (invariant 4),
/// each block's rows joined with their rowid ranges of entries.
pub const PATH_QUERY: &str = concat!(
    path_walk!(),
    " SELECT a.ancestor_segment, e.json, e.type, e.entry_key FROM walk
 JOIN segment_ancestry a ON a.segment_id = walk.head AND a.to_depth >= ?2
 JOIN entries e ON e.entry_key BETWEEN ((a.ancestor_segment << 32) | max(a.from_depth, ?2))
                                 AND ((a.ancestor_segment << 32) | min(a.to_depth, walk.high))"
);

/// Runs the path query of `plan`: each row is a segment id and one entry's
/// text. Rows come a segment at a time, each segment's entries root-side
/// first; blocks in the order the walk met them (deepest first), each
/// block's segments root-side first.
fn scan_path(
    conn: &Connection,
    plan: &PathPlan,
    cost: &mut ReadCost,
    mut visit: impl FnMut(i64, i64, rusqlite::types::ValueRef<'_>, &str) -> Result<()>,
) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(PATH_QUERY)
        .map_err(sql("reading a path"))?;
    let before = stmt.get_status(rusqlite::StatementStatus::VmStep);
    let mut rows = stmt
        .query(params![plan.segment, plan.low, plan.depth])
        .map_err(sql("reading a path"))?;
    let mut returned = 0;
    while let Some(row) = rows.next().map_err(sql("reading a path"))? {
        let seg: i64 = row.get(0).map_err(sql("reading a path"))?;
        let kind = row
            .get_ref(2)
            .and_then(|v| v.as_str().map_err(Into::into))
            .map_err(sql("reading a path"))?;
        let key: i64 = row.get(3).map_err(sql("reading a path"))?;
        visit(
            seg,
            key,
            row.get_ref(1).map_err(sql("reading a path"))?,
            kind,
        )?;
        returned += 1;
    }
    drop(rows);
    cost.statements += 1;
    cost.rows += returned;
    cost.vm_steps +=
        u64::try_from(stmt.get_status(rusqlite::StatementStatus::VmStep) - before).unwrap_or(0);
    Ok(())
}

/// Entries a session handle has decoded, by entry key, with the stored
/// value each was decoded from, kept while they fit in
/// [`EntryCache::BUDGET`] bytes. A hit needs the row's stored value to be
/// byte-identical to the one cached, so it is exact even if the session
/// were deleted and its keys reused behind the handle's back (`compact`
/// re-encodes rows: those are decoded again). A handle that reads its
/// active path again (an agent, every turn) decodes the new rows only.
#[derive(Debug, Default)]
pub struct EntryCache {
    entries: std::collections::HashMap<i64, (Box<[u8]>, Entry)>,
    bytes: usize,
    /// Set when a read filled the cache and it started over: the rest of
    /// that read is not kept (a path longer than the cache would only evict
    /// its own rows, copying every stored value for nothing).
    overflowed: bool,
}

impl EntryCache {
    /// Bytes (stored values and their text) held at most; past it the cache
    /// starts over (a path longer than that is decoded whole each time).
    pub const BUDGET: usize = 24 << 20;

    fn get(&self, key: i64, stored: &[u8]) -> Option<Entry> {
        match self.entries.get(&key) {
            Some((was, entry)) if **was == *stored => Some(entry.clone()),
            _ => None,
        }
    }

    /// A path read begins: what it decodes may be kept again.
    fn begin_read(&mut self) {
        self.overflowed = false;
    }

    fn insert(&mut self, key: i64, stored: &[u8], entry: &Entry) {
        if self.overflowed {
            return;
        }
        let len = stored.len() + entry.json().len();
        if self.bytes + len > Self::BUDGET {
            self.entries.clear();
            self.bytes = 0;
            self.overflowed = true;
            return;
        }
        if len <= Self::BUDGET {
            if let Some((was, old)) = self.entries.insert(key, (stored.into(), entry.clone())) {
                self.bytes -= was.len() + old.json().len();
            }
            self.bytes += len;
        }
    }
}

/// A stored `entries.json` value's bytes (TEXT or BLOB).
fn stored_bytes<'v>(stored: &rusqlite::types::ValueRef<'v>) -> &'v [u8] {
    match *stored {
        rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => b,
        _ => &[],
    }
}

/// The path from `start` to the root or the compaction stop (spec §5),
/// root-side first; rows found in `cache` are not decoded again. `start_key`
/// is the start's entry key where the caller already read it.
pub fn path(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    start: &str,
    start_key: Option<i64>,
    cost: &mut ReadCost,
    cache: &mut EntryCache,
) -> Result<Vec<Entry>> {
    let plan = plan(conn, session_key, start, start_key, cost)?;
    cache.begin_read();
    let mut rows = Vec::with_capacity(usize::try_from(plan.depth - plan.low + 1).unwrap_or(0));
    let mut decoded = 0;
    scan_path(conn, &plan, cost, |seg, key, stored, kind| {
        let entry = cached_entry(conn, codec, cache, key, kind, stored, &mut decoded)?;
        rows.push((seg, entry));
        Ok(())
    })?;
    cost.decoded += decoded;
    // Root-first is ascending segment id (invariant 3); each segment's rows
    // already come root-first, so a stable sort only reorders whole runs
    // (and finds the runs in one pass).
    rows.sort_by_key(|&(seg, _)| seg);
    Ok(rows.into_iter().map(|(_, entry)| entry).collect())
}

/// The entry of row `key` (of type `kind`, stored as `stored`): from `cache`
/// when it holds exactly that stored value, else decoded (counted in
/// `decoded`) and kept there.
fn cached_entry(
    conn: &Connection,
    codec: &Codec,
    cache: &mut EntryCache,
    key: i64,
    kind: &str,
    stored: rusqlite::types::ValueRef<'_>,
    decoded: &mut u64,
) -> Result<Entry> {
    let bytes = stored_bytes(&stored);
    if let Some(entry) = cache.get(key, bytes) {
        return Ok(entry);
    }
    let entry = codec.decode_entry(conn, stored, Some(EntryType::from_name(kind)))?;
    *decoded += 1;
    // Text spliced from blobs depends on more than the row's bytes.
    if super::stored::body_refs(stored)?.blobs.is_empty() {
        cache.insert(key, bytes, &entry);
    }
    Ok(entry)
}

/// Entry `id` of the session and its entry key, through the handle's
/// `cache` as a path read goes ([`EntryCache`]); `None` if the session has
/// no such entry.
pub fn entry_by_id(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    id: &str,
    cache: &mut EntryCache,
    cost: &mut ReadCost,
) -> Result<Option<(i64, Entry)>> {
    let mut st = conn
        .prepare_cached(
            "SELECT entry_key, type, json FROM entries WHERE session_key = ?1 AND id = ?2",
        )
        .map_err(sql("reading an entry"))?;
    let mut rows = st
        .query(params![session_key, id])
        .map_err(sql("reading an entry"))?;
    let Some(row) = rows.next().map_err(sql("reading an entry"))? else {
        return Ok(None);
    };
    let key: i64 = row.get(0).map_err(sql("reading an entry"))?;
    let kind = row
        .get_ref(1)
        .and_then(|v| v.as_str().map_err(Into::into))
        .map_err(sql("reading an entry"))?;
    let stored = row.get_ref(2).map_err(sql("reading an entry"))?;
    let entry = cached_entry(conn, codec, cache, key, kind, stored, &mut cost.decoded)?;
    Ok(Some((key, entry)))
}

/// The ranges of a path read (`?1` the start's segment, `?2` the root-side
/// depth, `?3` the start's depth): [`PATH_QUERY`]'s walk and ancestry rows
/// without the entries, one row `(segment, from_depth, to_depth)` for each
/// segment the path spans. Root-first order is ascending entry key
/// (invariants 2 and 3), so sorting these rows by segment orders the path.
pub const PATH_RANGES_QUERY: &str = concat!(
    path_walk!(),
    " SELECT a.ancestor_segment, max(a.from_depth, ?2), min(a.to_depth, walk.high) FROM walk
 JOIN segment_ancestry a ON a.segment_id = walk.head AND a.to_depth >= ?2"
);

/// The entries of one segment's depth range, root-side first (a rowid range).
const RANGE_QUERY: &str = "SELECT entry_key, type, json FROM entries
     WHERE entry_key BETWEEN ?1 AND ?2 ORDER BY entry_key";

/// The path from `start` to the root or the compaction stop (spec §5),
/// handed to `sink` root-side first, one entry at a time: the plan, then
/// the ranges of the segments the path spans (`O(segments)` integers, no
/// entry), then each range's rows in key order, each decoded and handed
/// out before the next is read. Memory holds one entry whatever the
/// path's length; one read transaction keeps the statements on one
/// snapshot. Statements: the plan's, one for the ranges, one per segment.
pub fn visit_path(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    start: &str,
    cost: &mut ReadCost,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    // The ranges and the rows they name come from one snapshot.
    let snapshot = read_snapshot(conn, "starting a path read")?;
    let plan = plan(conn, session_key, start, None, cost)?;
    visit_planned(conn, codec, &plan, cost, sink)?;
    if let Some(tx) = snapshot {
        tx.commit().map_err(sql("ending a path read"))?;
    }
    Ok(())
}

/// A deferred read transaction on `conn` where the caller holds none, so
/// that every statement until it ends reads one snapshot; `None` inside the
/// caller's own transaction. `what` names the read in an error.
pub fn read_snapshot<'c>(
    conn: &'c Connection,
    what: &'static str,
) -> Result<Option<rusqlite::Transaction<'c>>> {
    if !conn.is_autocommit() {
        return Ok(None);
    }
    rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Deferred)
        .map(Some)
        .map_err(sql(what))
}

/// The entries of `plan`'s path, from its start's depth up to its `low`
/// depth, handed to `sink` root-side first (what [`visit_path`] reads once
/// it has planned): one statement for the ranges, one per segment. The
/// caller holds the read transaction.
pub fn visit_planned(
    conn: &Connection,
    codec: &Codec,
    plan: &PathPlan,
    cost: &mut ReadCost,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    let mut ranges = conn
        .prepare_cached(PATH_RANGES_QUERY)
        .and_then(|mut st| {
            st.query_map(params![plan.segment, plan.low, plan.depth], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
        })
        .map_err(sql("reading a path"))?;
    cost.statements += 1;
    cost.rows += ranges.len() as u64;
    ranges.retain(|&(_, from, to)| from <= to);
    ranges.sort_unstable_by_key(|&(seg, _, _)| seg);
    let mut stmt = conn
        .prepare_cached(RANGE_QUERY)
        .map_err(sql("reading a path"))?;
    for (seg, from, to) in ranges {
        let mut rows = stmt
            .query([entry_key(seg, from), entry_key(seg, to)])
            .map_err(sql("reading a path"))?;
        cost.statements += 1;
        while let Some(row) = rows.next().map_err(sql("reading a path"))? {
            let kind = row
                .get_ref(1)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(sql("reading a path"))?;
            let stored = row.get_ref(2).map_err(sql("reading a path"))?;
            let entry = codec.decode_entry(conn, stored, Some(EntryType::from_name(kind)))?;
            cost.rows += 1;
            cost.decoded += 1;
            sink(entry)?;
        }
    }
    Ok(())
}

/// The path's rows as stored, neither decoded nor built into entries: what
/// the bench's SQL-only diagnostic measures. Returns the rows read.
#[doc(hidden)]
pub fn path_rows_sql_only(
    conn: &Connection,
    session_key: i64,
    start: &str,
    cost: &mut ReadCost,
) -> Result<usize> {
    let plan = plan(conn, session_key, start, None, cost)?;
    let mut n = 0;
    scan_path(conn, &plan, cost, |_, _, stored, _| {
        n += usize::from(stored.as_bytes().is_ok_and(|b| !b.is_empty()));
        Ok(())
    })?;
    Ok(n)
}

/// The size of a session's branch cache: segments and compaction rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheSize {
    /// Entries in the session's log.
    pub entries: i64,
    /// `segments` rows.
    pub segments: i64,
    /// `segment_ancestry` rows.
    pub ancestry: i64,
    /// `compactions` rows.
    pub compactions: i64,
}

impl CacheSize {
    /// Cache rows in all.
    pub fn rows(&self) -> i64 {
        self.segments + self.ancestry + self.compactions
    }

    /// Cache rows per entry (0 for an empty session).
    pub fn rows_per_entry(&self) -> f64 {
        if self.entries == 0 {
            0.0
        } else {
            self.rows() as f64 / self.entries as f64
        }
    }
}

/// The cache size of every session (or of the one with id `session`), by
/// index range counts: what `check` reports so a pathological session shows.
pub fn cache_sizes(conn: &Connection, session: Option<&str>) -> Result<Vec<(String, CacheSize)>> {
    conn.prepare_cached(
        "SELECT s.id, s.entry_count,
                (SELECT count(*) FROM segments g WHERE g.session_key = s.session_key),
                (SELECT count(*) FROM segments g JOIN segment_ancestry a USING (segment_id)
                 WHERE g.session_key = s.session_key),
                (SELECT count(*) FROM compactions c WHERE c.session_key = s.session_key)
         FROM sessions s WHERE ?1 IS NULL OR s.id = ?1 ORDER BY s.session_key",
    )
    .and_then(|mut s| {
        s.query_map([session], |r| {
            Ok((
                r.get(0)?,
                CacheSize {
                    entries: r.get(1)?,
                    segments: r.get(2)?,
                    ancestry: r.get(3)?,
                    compactions: r.get(4)?,
                },
            ))
        })
        .and_then(Iterator::collect)
    })
    .map_err(sql("measuring the branch cache"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_size_spelled_in_sql_is_the_constant() {
        assert!(COPY_ANCESTRY.ends_with(&format!("LIMIT {}", ANCESTRY_BLOCK - 1)));
    }

    /// Myers' rule gives every node of a chain a jump whose search reaches
    /// any depth in O(log n) steps.
    #[test]
    fn skew_binary_jumps_search_a_chain_in_logarithmic_steps() {
        let n = 100_000usize;
        // (position, jump) of segment i; segment i's parent is i - 1.
        let mut chain: Vec<(i64, Option<i64>)> = vec![(1, None)];
        for i in 1..n {
            let p = i - 1;
            let jump = jump_for_child((p as i64, chain[p].0, chain[p].1), |s| {
                Ok(chain[usize::try_from(s).unwrap_or(0)])
            })
            .expect("jump");
            chain.push((chain[p].0 + 1, Some(jump)));
        }
        let mut worst = 0;
        for target in [0usize, 1, 7, 4_095, 50_000, 99_998] {
            let (mut cur, mut steps) = (n - 1, 0);
            while cur > target {
                let j = chain[cur].1.map_or(cur, |j| j as usize);
                cur = if j >= target && j < cur { j } else { cur - 1 };
                steps += 1;
            }
            assert_eq!(cur, target);
            worst = worst.max(steps);
        }
        assert!(worst <= 3 * 17, "{worst} steps");
    }
}
