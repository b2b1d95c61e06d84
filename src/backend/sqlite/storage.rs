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
use crate::storage::{LeafMove, SessionMetadata, SessionStorage};
use branch_cache::{EntryCache, ReadCost};
use claim::WriterClaim;
use rusqlite::{params, OptionalExtension};
use std::cell::{Cell, RefCell};

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
            tx.commit().map_err(sql("committing an append"))?;
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
        sink: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<()> {
        let conn = self.archive.conn()?;
        let mut st = conn
            .prepare_cached(sql_text)
            .map_err(sql("reading entries"))?;
        let mut rows = st.query(params).map_err(sql("reading entries"))?;
        let codec = self.archive.codec();
        while let Some(row) = rows.next().map_err(sql("reading entries"))? {
            let text = codec.decode(&conn, row.get_ref(0).map_err(sql("reading entries"))?)?;
            sink(text)?;
        }
        Ok(())
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
        // The type index leaves messages out (most entries are messages).
        if entry_type == "message" {
            return self.query_texts(
                "SELECT json FROM entries WHERE session_key = ?1 AND type = 'message' ORDER BY seq",
                params![self.session_key],
                sink,
            );
        }
        self.query_texts(
            "SELECT json FROM entries WHERE session_key = ?1 AND type = ?2 AND type <> 'message' ORDER BY seq",
            params![self.session_key, entry_type],
            sink,
        )
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

    fn visit_entries(
        &self,
        after: usize,
        limit: Option<usize>,
        sink: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<()> {
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
