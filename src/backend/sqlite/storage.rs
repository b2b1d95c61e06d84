//! One session of an archive as a [`SessionStorage`].

use super::error::sql;
use super::handle::Archive;
use super::rows::{self, METADATA_COLUMNS};
use super::writer::{session_facts, Appender, SessionFacts};
use super::{branch_cache, claim};
use crate::backend::path_memo::{PathMemo, PathSource};
use crate::backend::session_rows::stored_js_string;
use crate::contract::Contract;
use crate::entry::Entry;
use crate::error::Result;
use crate::json::JsString;
use crate::storage::{LeafMove, MessageFact, SessionMetadata, SessionStorage};
use branch_cache::{EntryCache, ReadCost};
use claim::WriterClaim;
use rusqlite::{params, OptionalExtension};
use std::cell::{Cell, RefCell};
use std::ops::ControlFlow;

/// One session of an archive.
#[derive(Debug)]
pub struct SqliteStorage {
    archive: Archive,
    session_key: i64,
    id: String,
    claim: Option<WriterClaim>,
    last_read: Cell<ReadCost>,
    decoded: RefCell<EntryCache>,
    paths: RefCell<PathMemo>,
    /// Path rows this handle's light reads returned (facts, hints, ranges).
    path_rows: Cell<u64>,
}

impl SqliteStorage {
    /// A handle on session `key` (`id`), holding no claim yet.
    pub(super) fn new(archive: Archive, session_key: i64, id: &str) -> Self {
        SqliteStorage {
            archive,
            session_key,
            id: id.to_owned(),
            claim: None,
            last_read: Cell::new(ReadCost::default()),
            decoded: RefCell::new(EntryCache::default()),
            paths: RefCell::new(PathMemo::default()),
            path_rows: Cell::new(0),
        }
    }

    crate::backend::session_rows::archive_session_handle!(Archive);

    /// Whether this handle holds the writer claim.
    pub fn is_writer(&self) -> bool {
        self.claim.is_some()
    }

    /// Forgets the paths this handle keeps ([`PathMemo`]), so that the next
    /// path read runs its query: what a benchmark of the read itself needs.
    #[doc(hidden)]
    pub fn forget_paths(&self) {
        self.paths.borrow_mut().clear();
    }

    /// What the last path read cost (statements, rows, VM steps).
    pub fn last_read_cost(&self) -> ReadCost {
        self.last_read.get()
    }

    /// Rows the app's path reads on this handle have returned so far
    /// ([`SessionStorage::visit_path_facts`], [`SessionStorage::path_hint`],
    /// [`SessionStorage::visit_path_range`]): what the bound on a resume's
    /// reads counts.
    #[doc(hidden)]
    pub fn path_rows_read(&self) -> u64 {
        self.path_rows.get()
    }

    fn count_path_rows(&self, n: u64) {
        self.path_rows.set(self.path_rows.get() + n);
    }

    /// The entry stored at `key`, decoded.
    fn entry_at(&self, conn: &rusqlite::Connection, key: i64) -> Result<Option<Entry>> {
        let fail = sql("reading an entry");
        let mut st = conn
            .prepare_cached("SELECT type, json FROM entries WHERE entry_key = ?1")
            .map_err(&fail)?;
        let mut rows = st.query([key]).map_err(&fail)?;
        let Some(row) = rows.next().map_err(&fail)? else {
            return Ok(None);
        };
        let kind = row
            .get_ref(0)
            .and_then(|v| Ok(v.as_str()?))
            .map_err(&fail)?;
        let stored = row.get_ref(1).map_err(&fail)?;
        self.count_path_rows(1);
        self.archive
            .codec()
            .decode_entry(conn, stored, Some(crate::entry::EntryType::from_name(kind)))
            .map(Some)
    }

    /// The exact header line, for export.
    pub fn header_json(&self) -> Result<String> {
        let conn = self.archive.conn()?;
        conn.query_row(
            "SELECT header FROM sessions WHERE session_key = ?1",
            [self.session_key],
            |r| r.get(0),
        )
        .map_err(sql("reading the session header"))
    }

    fn write(&mut self, entries: &[Entry]) -> Result<()> {
        // Taking the claim is a write too: refused first on a damaged
        // archive (each append's transaction is checked by `begin_write`).
        if !self.is_writer() {
            super::connection::refuse_if_damaged(self.archive.path())?;
        }
        self.claim_writer()?;
        let untrained = {
            let mut conn = self.archive.conn()?;
            let tx = self.archive.begin_write(&mut conn, "starting an append")?;
            if let Some(claim) = &self.claim {
                claim.check(&mut claim::ClaimConn(&tx), &self.id)?;
            }
            let mut appender = Appender::start(&tx, self.archive.codec(), self.session_key)?;
            for e in entries {
                appender.push(&tx, e)?;
            }
            let untrained = appender.dictionary_id().is_none();
            appender.finish(&tx)?;
            if entries
                .iter()
                .any(|e| Contract::is_sdk_only_type(e.entry_type().as_str()))
            {
                // A session holding an SDK-only entry follows the SDK's rules.
                tx.prepare_cached(
                    "UPDATE sessions SET contract = 'sdk' WHERE session_key = ?1 AND contract <> 'sdk'",
                )
                .and_then(|mut st| st.execute([self.session_key]))
                .map_err(sql("recording the session's contract"))?;
            }
            // Traced when slow (`SESSIONTREE_LOCK_TRACE`): a commit waits
            // for the disk, which another process's writes can hold up.
            let span = super::lock_trace::start("append-commit");
            tx.commit().map_err(sql("committing an append"))?;
            super::lock_trace::end_if_over(span, std::time::Duration::from_millis(10), "");
            untrained
        };
        if untrained
            && self
                .archive
                .appended_untrained(entries.iter().map(|e| e.json().len()).sum())
        {
            // Best effort, after the append is committed: a training that
            // fails is tried again once as much text has been appended again.
            let _ = self.archive.train_first_dictionary_from_entries();
        }
        Ok(())
    }

    /// Runs a query whose one column is an entry's stored text, handing each
    /// decoded text to `sink` as the row is read.
    fn query_texts(
        &self,
        sql_text: &'static str,
        params: impl rusqlite::Params,
        sink: &mut dyn FnMut(String) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        let conn = self.archive.conn()?;
        let mut st = conn
            .prepare_cached(sql_text)
            .map_err(sql("reading entries"))?;
        let mut rows = st.query(params).map_err(sql("reading entries"))?;
        let codec = self.archive.codec();
        while let Some(row) = rows.next().map_err(sql("reading entries"))? {
            let text = codec.decode(&conn, row.get_ref(0).map_err(sql("reading entries"))?)?;
            if sink(text)?.is_break() {
                // Dropping `rows` resets the statement: the read ends here.
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    fn facts(&self) -> Result<SessionFacts> {
        session_facts(&*self.archive.conn()?, self.session_key)
    }
}

impl SessionStorage for SqliteStorage {
    fn metadata(&self) -> Result<SessionMetadata> {
        let conn = self.archive.conn()?;
        conn.prepare_cached(&format!(
            "SELECT {METADATA_COLUMNS} FROM sessions WHERE session_key = ?1"
        ))
        .and_then(|mut s| s.query_row([self.session_key], |r| rows::metadata_at(r, 0)))
        .map_err(sql("reading session metadata"))
    }

    fn contract(&self) -> Result<crate::contract::Contract> {
        let conn = self.archive.conn()?;
        conn.prepare_cached("SELECT contract FROM sessions WHERE session_key = ?1")
            .and_then(|mut s| {
                s.query_row([self.session_key], |r| {
                    crate::backend::session_rows::contract_at(r, 0)
                })
            })
            .map_err(sql("reading the session's contract"))
    }

    fn kept_lines(&self) -> Result<crate::storage::KeptLines> {
        let conn = self.archive.conn()?;
        let open_end: Option<i64> = conn
            .prepare_cached("SELECT open_end FROM sessions WHERE session_key = ?1")
            .and_then(|mut s| s.query_row([self.session_key], |r| r.get(0)))
            .map_err(sql("reading kept lines"))?;
        let lines = conn
            .prepare_cached(
                "SELECT position, text FROM kept_lines WHERE session_key = ?1
                 ORDER BY position, kept_key",
            )
            .and_then(|mut s| {
                s.query_map([self.session_key], |r| {
                    Ok(crate::storage::KeptLine {
                        position: r.get(0)?,
                        text: r.get(1)?,
                    })
                })
                .and_then(Iterator::collect)
            })
            .map_err(sql("reading kept lines"))?;
        Ok(crate::storage::KeptLines { lines, open_end })
    }

    /// Through the handle's decoded-entry cache, as a path read goes.
    fn entry(&self, id: &str) -> Result<Option<Entry>> {
        let entry = branch_cache::entry_by_id(
            &*self.archive.conn()?,
            self.archive.codec(),
            self.session_key,
            id,
            &mut self.decoded.borrow_mut(),
            &mut ReadCost::default(),
        )?;
        Ok(entry.map(|(_, entry)| entry))
    }

    fn contains_entry(&self, id: &str) -> Result<bool> {
        Ok(branch_cache::key_of(&*self.archive.conn()?, self.session_key, id)?.is_some())
    }

    fn visit_entries_of_type(
        &self,
        entry_type: &str,
        sink: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<()> {
        let sink = &mut |text: String| sink(text).map(ControlFlow::Continue);
        // The type index leaves messages out (most entries are messages).
        if entry_type == "message" {
            return self.query_texts(
                "SELECT json FROM entries WHERE session_key = ?1 AND type = 'message' ORDER BY seq",
                params![self.session_key],
                sink,
            )
            .map(drop);
        }
        self.query_texts(
            "SELECT json FROM entries WHERE session_key = ?1 AND type = ?2 AND type <> 'message' ORDER BY seq",
            params![self.session_key, entry_type],
            sink,
        )
        .map(drop)
    }

    fn label(&self, id: &str) -> Result<Option<JsString>> {
        let conn = self.archive.conn()?;
        conn.prepare_cached("SELECT label FROM labels WHERE session_key = ?1 AND target_id = ?2")
            .and_then(|mut s| {
                s.query_row(params![self.session_key, id], |r| r.get(0))
                    .optional()
            })
            .map(|label| label.map(stored_js_string))
            .map_err(sql("reading a label"))
    }

    crate::backend::session_rows::archive_fact_reads!();

    fn visit_entries_until(
        &self,
        after: usize,
        limit: Option<usize>,
        sink: &mut dyn FnMut(String) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        self.query_texts(
            "SELECT json FROM entries WHERE session_key = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3",
            params![self.session_key, after, limit],
            sink,
        )
    }

    /// Read from `leaf_events` newest first through its primary key: the
    /// moves asked for and nothing else, however long the log.
    fn leaf_moves(&self, limit: usize) -> Result<Vec<LeafMove>> {
        let conn = self.archive.conn()?;
        let mut st = conn
            .prepare_cached(
                "SELECT e.json, l.target_id FROM leaf_events l
                 JOIN entries e ON e.entry_key = l.entry_key
                 WHERE l.session_key = ?1 ORDER BY l.seq DESC LIMIT ?2",
            )
            .map_err(sql("reading leaf moves"))?;
        let mut rows = st
            .query(params![
                self.session_key,
                i64::try_from(limit).unwrap_or(i64::MAX)
            ])
            .map_err(sql("reading leaf moves"))?;
        let mut moves = Vec::new();
        while let Some(row) = rows.next().map_err(sql("reading leaf moves"))? {
            let stored = row.get_ref(0).map_err(sql("reading leaf moves"))?;
            let entry = Entry::from_checked_text(self.archive.codec().decode(&conn, stored)?);
            moves.push(LeafMove {
                id: entry.id().to_owned(),
                timestamp: entry.timestamp().to_owned(),
                from: entry.facts().parent().map(str::to_owned),
                to: row.get(1).map_err(sql("reading leaf moves"))?,
            });
        }
        Ok(moves)
    }

    /// From the indexes alone, no text decoded (`skeleton.rs`).
    fn visit_skeleton(
        &self,
        sink: &mut dyn FnMut(crate::skeleton::SkeletonItem<'_>) -> Result<()>,
    ) -> Result<()> {
        super::skeleton::visit(&*self.archive.conn()?, self.session_key, sink)
    }

    /// Roles from the search index, texts read only for messages it lacks.
    fn visit_user_messages(
        &self,
        ids: &[&str],
        sink: &mut dyn FnMut(usize, bool) -> Result<()>,
    ) -> Result<()> {
        let conn = self.archive.conn()?;
        super::skeleton::visit_user_messages(
            &conn,
            self.archive.codec(),
            self.session_key,
            ids,
            sink,
        )
    }

    fn visit_entries_by_id(
        &self,
        ids: &[&str],
        sink: &mut dyn FnMut(usize, Entry) -> Result<()>,
    ) -> Result<()> {
        let conn = self.archive.conn()?;
        super::skeleton::visit_by_id(&conn, self.archive.codec(), self.session_key, ids, sink)
    }

    /// From the branch cache and the type index: the start's key, its
    /// segment's row, the newest compaction through the segment's
    /// inherited one (invariant 7), the newest `thinking_level_change` and
    /// `model_change` newest first through `entries_by_type`, each tested
    /// for being an ancestor in `O(log segments)` (invariant 5); and the
    /// session row's first message without a message.
    fn path_hint(&self, start: &str) -> Result<Option<crate::storage::PathHint>> {
        use crate::backend::branch_cache::CacheStore;
        use crate::backend::branch_rules::{entry_key, split_key};
        let conn = self.archive.conn()?;
        let fail = sql("reading a path's hint");
        // One snapshot for every statement below.
        let snapshot = branch_cache::read_snapshot(&conn, "reading a path's hint")?;
        let broken: Option<String> = conn
            .prepare_cached("SELECT broken_message_id FROM sessions WHERE session_key = ?1")
            .and_then(|mut st| st.query_row([self.session_key], |r| r.get(0)).optional())
            .map_err(&fail)?
            .flatten();
        if broken.is_some() {
            return Ok(None);
        }
        let Some(key) = branch_cache::key_of(&conn, self.session_key, start)? else {
            return Ok(None);
        };
        let (seg_id, depth) = split_key(key);
        let mut cache = branch_cache::SqliteCache::new(&conn, self.session_key);
        let seg = cache.segment(seg_id)?;
        let root = if seg.first_depth == 0 {
            seg.clone()
        } else {
            match branch_cache::segment_holding(&conn, seg_id, 0)? {
                Some(r) => cache.segment(r)?,
                None => return Ok(None),
            }
        };
        if let Some(parent) = &root.missing_root_parent {
            // A root naming a stored entry as its parent: a loop, which the
            // whole read reports.
            if branch_cache::key_of(&conn, self.session_key, parent)?.is_some() {
                return Ok(None);
            }
        }
        let on_path = |k: i64| -> Result<bool> {
            let (ks, kd) = split_key(k);
            if kd > depth {
                return Ok(false);
            }
            if kd >= seg.first_depth {
                return Ok(ks == seg_id);
            }
            Ok(branch_cache::segment_holding(&conn, seg_id, kd)? == Some(ks))
        };
        let newest_of = |kind: &str| -> Result<Option<i64>> {
            let mut st = conn
                .prepare_cached(
                    "SELECT entry_key FROM entries
                     WHERE session_key = ?1 AND type = ?2 AND type <> 'message'
                     ORDER BY seq DESC",
                )
                .map_err(&fail)?;
            let mut rows = st.query(params![self.session_key, kind]).map_err(&fail)?;
            while let Some(r) = rows.next().map_err(&fail)? {
                let k: i64 = r.get(0).map_err(&fail)?;
                self.count_path_rows(1);
                // Ancestors come before their descendants in the log, so
                // the first on the path is the deepest there.
                if on_path(k)? {
                    return Ok(Some(k));
                }
            }
            Ok(None)
        };
        let compaction = cache
            .last_compaction_in(entry_key(seg_id, seg.first_depth), key)?
            .or(seg.inherited_compaction);
        let thinking = newest_of("thinking_level_change")?;
        let model = newest_of("model_change")?;
        let at = |k: Option<i64>| -> Result<Option<(u64, Entry)>> {
            let Some(k) = k else { return Ok(None) };
            let e = self.entry_at(&conn, k)?.ok_or_else(|| {
                crate::Error::Corrupt(format!("the branch cache names a missing entry {k}"))
            })?;
            Ok(Some((u64::try_from(split_key(k).1).unwrap_or(0), e)))
        };
        let hint = crate::storage::PathHint {
            depth: u64::try_from(depth).unwrap_or(0),
            compaction: at(compaction)?,
            thinking_level_change: at(thinking)?.map(|(_, e)| e),
            model_change: at(model)?,
        };
        if let Some(tx) = snapshot {
            tx.commit().map_err(&fail)?;
        }
        Ok(Some(hint))
    }

    /// The range from the segment holding `high` on the path (invariant 5),
    /// read as [`branch_cache::visit_path`] reads a path.
    fn visit_path_range(
        &self,
        start: &str,
        low: u64,
        high: u64,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        use crate::backend::branch_rules::split_key;
        let conn = self.archive.conn()?;
        let fail = sql("reading a path range");
        let snapshot = branch_cache::read_snapshot(&conn, "reading a path range")?;
        let Some(key) = branch_cache::key_of(&conn, self.session_key, start)? else {
            return Ok(());
        };
        let (seg_id, depth) = split_key(key);
        let low = i64::try_from(low).unwrap_or(i64::MAX);
        let high = i64::try_from(high).unwrap_or(i64::MAX).min(depth);
        if low > high {
            return Ok(());
        }
        let first_depth = branch_cache::segment(&conn, seg_id)?.first_depth;
        let segment = if high >= first_depth {
            seg_id
        } else {
            branch_cache::segment_holding(&conn, seg_id, high)?.ok_or_else(|| {
                crate::Error::Corrupt(format!("no segment holds depth {high} above {start}"))
            })?
        };
        let plan = crate::backend::branch_cache::PathPlan {
            segment,
            depth: high,
            low,
        };
        let mut cost = ReadCost::default();
        branch_cache::visit_planned(&conn, self.archive.codec(), &plan, &mut cost, &mut |e| {
            self.count_path_rows(1);
            sink(e)
        })?;
        if let Some(tx) = snapshot {
            tx.commit().map_err(&fail)?;
        }
        Ok(())
    }

    /// Whether `id` is an ancestor through the branch cache's jump
    /// pointers (invariant 5): a few statements at any depth.
    fn depth_on_path(&self, start: &str, id: &str) -> Result<Option<u64>> {
        use crate::backend::branch_rules::split_key;
        let conn = self.archive.conn()?;
        let (Some(key), Some(k)) = (
            branch_cache::key_of(&conn, self.session_key, start)?,
            branch_cache::key_of(&conn, self.session_key, id)?,
        ) else {
            return Ok(None);
        };
        let (seg_id, depth) = split_key(key);
        let (ks, kd) = split_key(k);
        if kd > depth {
            return Ok(None);
        }
        let first_depth = branch_cache::segment(&conn, seg_id)?.first_depth;
        let on = if kd >= first_depth {
            ks == seg_id
        } else {
            branch_cache::segment_holding(&conn, seg_id, kd)? == Some(ks)
        };
        Ok(on.then(|| u64::try_from(kd).unwrap_or(0)))
    }

    /// Columns only: one walk of the branch cache to the root (the path
    /// query of [`branch_cache::PATH_QUERY`] down to depth 0), each row's
    /// id, type and search role; a message's stored text is looked at only
    /// when the search index filed no role for it, and decoded only when
    /// its tag does not say its `message` is an object.
    fn visit_path_facts(
        &self,
        start: &str,
        sink: &mut dyn FnMut(crate::storage::PathFact<'_>) -> Result<()>,
    ) -> Result<()> {
        let conn = self.archive.conn()?;
        let Some(key) = branch_cache::key_of(&conn, self.session_key, start)? else {
            return Ok(());
        };
        let (segment, depth) = crate::backend::branch_rules::split_key(key);
        let fail = sql("reading a path's facts");
        // The roles' names, read once (a row never changes, invariant of
        // `roles`): rows carry the id only.
        let roles: std::collections::HashMap<i64, String> = conn
            .prepare_cached("SELECT role_id, name FROM roles")
            .and_then(|mut st| {
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .and_then(Iterator::collect)
            })
            .map_err(&fail)?;
        /// One row: its key, where its id ends in `ids`, its type (an index
        /// into `kinds`), its role id, and its text where it was decoded.
        struct Row {
            key: i64,
            id_end: u32,
            kind: u8,
            role: Option<i64>,
            text: Option<u32>,
        }
        let mut kinds: Vec<String> = Vec::new();
        let mut ids = String::new();
        let mut texts: Vec<String> = Vec::new();
        let mut rows: Vec<Row> = Vec::with_capacity(usize::try_from(depth + 1).unwrap_or(0));
        {
            let mut st = conn.prepare_cached(PATH_FACTS_QUERY).map_err(&fail)?;
            let mut found = st.query(params![segment, 0, depth]).map_err(&fail)?;
            while let Some(r) = found.next().map_err(&fail)? {
                let key: i64 = r.get(0).map_err(&fail)?;
                let id = r.get_ref(1).and_then(|v| Ok(v.as_str()?)).map_err(&fail)?;
                ids.push_str(id);
                let kind_name = r.get_ref(2).and_then(|v| Ok(v.as_str()?)).map_err(&fail)?;
                let kind = match kinds.iter().position(|k| k == kind_name) {
                    Some(k) => k,
                    None => {
                        kinds.push(kind_name.to_owned());
                        kinds.len() - 1
                    }
                };
                let role: Option<i64> = r.get(3).map_err(&fail)?;
                let text = match r.get_ref(4).map_err(&fail)? {
                    rusqlite::types::ValueRef::Null => None,
                    rusqlite::types::ValueRef::Blob(b)
                        if b.first()
                            .is_some_and(|t| t & super::codec::TRAILING_MESSAGE != 0) =>
                    {
                        None
                    }
                    other => {
                        texts.push(self.archive.codec().decode(&conn, other)?);
                        Some(u32::try_from(texts.len() - 1).unwrap_or(u32::MAX))
                    }
                };
                self.count_path_rows(1);
                rows.push(Row {
                    key,
                    id_end: u32::try_from(ids.len()).unwrap_or(u32::MAX),
                    kind: u8::try_from(kind).unwrap_or(u8::MAX),
                    role,
                    text,
                });
            }
        }
        // Root first is ascending key: segments root side first (invariant
        // 3), each segment's depths ascending.
        let mut order: Vec<(i64, u32)> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.key, u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        order.sort_unstable();
        if let Some(&(root_key, _)) = order.first() {
            let root_segment = crate::backend::branch_rules::split_key(root_key).0;
            let missing = branch_cache::segment(&conn, root_segment)?.missing_root_parent;
            // A root naming a stored entry as its parent names itself
            // (invariant 8): a loop, as the walk reports it.
            if let Some(parent) = missing {
                if branch_cache::key_of(&conn, self.session_key, &parent)?.is_some() {
                    return Err(crate::Error::ParentCycle(parent));
                }
            }
        }
        for (_, i) in order {
            let i = i as usize;
            let row = &rows[i];
            let id_start = if i == 0 {
                0
            } else {
                rows[i - 1].id_end as usize
            };
            let kind = kinds.get(usize::from(row.kind)).map_or("", String::as_str);
            let message = match (kind, row.role, row.text) {
                ("message", Some(role), _) => MessageFact::Present {
                    role: Some(roles.get(&role).map_or("", String::as_str)),
                },
                ("message", None, Some(t)) => MessageFact::of_text(&texts[t as usize]),
                ("message", None, None) => MessageFact::Present { role: None },
                _ => MessageFact::NotMessage,
            };
            sink(crate::storage::PathFact {
                id: &ids[id_start..row.id_end as usize],
                entry_type: kind,
                message,
            })?;
        }
        Ok(())
    }

    /// A path this handle read before, or one that follows from it, comes
    /// from its [`PathMemo`] without the path query.
    fn path_to_root_or_compaction(&self, id: Option<&str>) -> Result<Vec<Entry>> {
        let Some(id) = id else {
            return Ok(Vec::new());
        };
        let mut conn = self.archive.conn()?;
        let source = PathReads {
            storage: self,
            cost: RefCell::new(ReadCost::default()),
        };
        let read = self.paths.borrow_mut().read(&source, &mut *conn, id);
        self.last_read.set(source.cost.into_inner());
        read
    }

    /// Streams the rows of the branch cache's path read
    /// ([`branch_cache::visit_path`]): one entry in memory at a time, none
    /// kept in the handle's caches (a path that fits them is read by
    /// [`SessionStorage::path_to_root_or_compaction`]).
    fn visit_path(
        &self,
        id: Option<&str>,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        let Some(id) = id else {
            return Ok(());
        };
        let conn = self.archive.conn()?;
        let mut cost = ReadCost::default();
        let read = branch_cache::visit_path(
            &conn,
            self.archive.codec(),
            self.session_key,
            id,
            &mut cost,
            sink,
        );
        self.last_read.set(cost);
        read
    }
}

/// How a handle's [`PathMemo`] reads this archive, counting the work.
struct PathReads<'h> {
    storage: &'h SqliteStorage,
    cost: RefCell<ReadCost>,
}

impl PathSource<rusqlite::Connection> for PathReads<'_> {
    /// The start's entry key.
    type Start = i64;

    fn session_id(&self) -> &str {
        &self.storage.id
    }

    fn start(&self, conn: &mut rusqlite::Connection, id: &str) -> Result<Option<(i64, Entry)>> {
        let mut cost = self.cost.borrow_mut();
        cost.statements += 1;
        branch_cache::entry_by_id(
            conn,
            self.storage.archive.codec(),
            self.storage.session_key,
            id,
            &mut self.storage.decoded.borrow_mut(),
            &mut cost,
        )
    }

    fn still_this_session(&self, conn: &mut rusqlite::Connection) -> Result<bool> {
        self.cost.borrow_mut().statements += 1;
        conn.prepare_cached("SELECT 1 FROM sessions WHERE session_key = ?1 AND id = ?2")
            .and_then(|mut st| st.exists(params![self.storage.session_key, self.storage.id]))
            .map_err(sql("checking a kept path"))
    }

    fn query(
        &self,
        conn: &mut rusqlite::Connection,
        id: &str,
        start: Option<i64>,
    ) -> Result<Vec<Entry>> {
        branch_cache::path(
            conn,
            self.storage.archive.codec(),
            self.storage.session_key,
            id,
            start,
            &mut self.cost.borrow_mut(),
            &mut self.storage.decoded.borrow_mut(),
        )
    }
}

/// The path query's walk ([`branch_cache::path_walk`]: `?1` the start's
/// segment, `?2` the root-side depth, 0 for pi's whole path, `?3` the
/// start's depth), returning for each entry its
/// key, id, type, search role and — for a message the index filed no role
/// for — its stored text.
const PATH_FACTS_QUERY: &str = concat!(
    branch_cache::path_walk!(),
    " SELECT e.entry_key, e.id, e.type, e.role_id,
        CASE WHEN e.type = 'message' AND e.role_id IS NULL THEN e.json END
 FROM walk
 JOIN segment_ancestry a ON a.segment_id = walk.head AND a.to_depth >= ?2
 JOIN entries e ON e.entry_key BETWEEN ((a.ancestor_segment << 32) | max(a.from_depth, ?2))
                                 AND ((a.ancestor_segment << 32) | min(a.to_depth, walk.high))"
);
