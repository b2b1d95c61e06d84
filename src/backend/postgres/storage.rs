//! One session of a team archive as a [`SessionStorage`].

use super::branch_cache;
use super::claim::WriterClaim;
use super::handle::{col, pg, PgArchive};
use super::writer::{metadata_at, session_facts, Appender, METADATA_COLUMNS};
use crate::backend::path_memo::{PathMemo, PathSource};
use crate::backend::session_rows::stored_js_string;
use crate::entry::Entry;
use crate::error::Result;
use crate::json::JsString;
use crate::rules::Replay;
use crate::storage::{LeafMove, MessageFact, SessionMetadata, SessionStorage};
use ::postgres::types::{ToSql, Type};
use std::cell::RefCell;
use std::ops::ControlFlow;

/// One session of a team archive.
#[derive(Debug)]
pub struct PgStorage {
    archive: PgArchive,
    session_key: i64,
    id: String,
    claim: Option<WriterClaim>,
    /// The paths this handle read ([`PathMemo`]).
    paths: RefCell<PathMemo>,
}

impl PgStorage {
    /// A handle on session `key` (`id`), holding no claim yet.
    pub(super) fn new(archive: PgArchive, session_key: i64, id: &str) -> Self {
        PgStorage {
            archive,
            session_key,
            id: id.to_owned(),
            claim: None,
            paths: RefCell::new(PathMemo::default()),
        }
    }

    crate::backend::session_rows::archive_session_handle!(PgArchive);

    /// Whether this handle holds the writer claim.
    pub fn is_writer(&self) -> bool {
        self.claim.is_some()
    }

    /// The exact header line, for export.
    pub fn header_json(&self) -> Result<String> {
        let r = self
            .archive
            .conn()?
            .query_one(
                "SELECT header FROM sessions WHERE session_key = $1",
                &[&self.session_key],
            )
            .map_err(pg("reading the session header"))?;
        col(&r, 0)
    }

    fn write(&mut self, entries: &[Entry]) -> Result<()> {
        self.claim_writer()?;
        let ctx = "appending";
        let mut conn = self.archive.conn()?;
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        // The session row is locked first, then the claim is checked under it.
        let mut appender = Appender::start(&mut tx, self.session_key)?;
        if let Some(claim) = &self.claim {
            claim.check(&mut super::claim::PgClaims(&mut tx), &self.id)?;
        }
        appender.push_all(&mut tx, entries)?;
        appender.finish(&mut tx)?;
        if entries
            .iter()
            .any(|e| crate::contract::Contract::is_sdk_only_type(e.entry_type().as_str()))
        {
            // A session holding an SDK-only entry follows the SDK's rules.
            tx.execute(
                "UPDATE sessions SET contract = 'sdk' WHERE session_key = $1 AND contract <> 'sdk'",
                &[&self.session_key],
            )
            .map_err(pg(ctx))?;
        }
        tx.commit().map_err(pg("committing an append"))
    }

    fn facts(&self) -> Result<Replay> {
        session_facts(&mut *self.archive.conn()?, self.session_key, false)
    }

    /// Runs a query whose one column is an entry's text, handing each to
    /// `sink` as the rows arrive (a portal: bounded memory for any answer).
    fn query_texts(
        &self,
        sql_text: &str,
        params: &[&(dyn ToSql + Sync)],
        sink: &mut dyn FnMut(String) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        let mut conn = self.archive.conn()?;
        let mut tx = conn.transaction().map_err(pg("reading entries"))?;
        let portal = tx.bind(sql_text, params).map_err(pg("reading entries"))?;
        loop {
            let rows = tx
                .query_portal(&portal, 1024)
                .map_err(pg("reading entries"))?;
            let done = rows.len() < 1024;
            for r in &rows {
                if sink(col(r, 0)?)?.is_break() {
                    // Dropping the read's transaction closes the portal.
                    return Ok(ControlFlow::Break(()));
                }
            }
            if done {
                return Ok(ControlFlow::Continue(()));
            }
        }
    }
}

impl SessionStorage for PgStorage {
    fn metadata(&self) -> Result<SessionMetadata> {
        let r = self
            .archive
            .conn()?
            .query_one(
                &format!("SELECT {METADATA_COLUMNS} FROM sessions WHERE session_key = $1"),
                &[&self.session_key],
            )
            .map_err(pg("reading session metadata"))?;
        metadata_at(&r, 0)
    }

    fn contract(&self) -> Result<crate::contract::Contract> {
        let r = self
            .archive
            .conn()?
            .query_one(
                "SELECT contract FROM sessions WHERE session_key = $1",
                &[&self.session_key],
            )
            .map_err(pg("reading the session's contract"))?;
        crate::backend::session_rows::contract_at(&r, 0)
    }

    fn kept_lines(&self) -> Result<crate::storage::KeptLines> {
        let mut conn = self.archive.conn()?;
        let open_end: Option<i64> = conn
            .query_one(
                "SELECT open_end FROM sessions WHERE session_key = $1",
                &[&self.session_key],
            )
            .map_err(pg("reading kept lines"))
            .and_then(|r| col(&r, 0))?;
        let rows = conn
            .query(
                "SELECT position, text FROM kept_lines WHERE session_key = $1 ORDER BY position, kept_key",
                &[&self.session_key],
            )
            .map_err(pg("reading kept lines"))?;
        let lines = rows
            .iter()
            .map(|r| {
                Ok(crate::storage::KeptLine {
                    position: col(r, 0)?,
                    text: col(r, 1)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(crate::storage::KeptLines { lines, open_end })
    }

    fn entry(&self, id: &str) -> Result<Option<Entry>> {
        Ok(self
            .start(&mut *self.archive.conn()?, id)?
            .map(|(_, entry)| entry))
    }

    fn contains_entry(&self, id: &str) -> Result<bool> {
        Ok(branch_cache::key_of(&mut *self.archive.conn()?, self.session_key, id)?.is_some())
    }

    fn visit_entries_of_type(
        &self,
        entry_type: &str,
        sink: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<()> {
        let sink = &mut |text: String| sink(text).map(ControlFlow::Continue);
        self.query_texts(
            "SELECT json FROM entries WHERE session_key = $1 AND type = $2 ORDER BY seq",
            &[&self.session_key, &entry_type],
            sink,
        )
        .map(drop)
    }

    fn label(&self, id: &str) -> Result<Option<JsString>> {
        self.archive
            .conn()?
            .query_opt(
                "SELECT label FROM labels WHERE session_key = $1 AND target_id = $2",
                &[&self.session_key, &id],
            )
            .map_err(pg("reading a label"))?
            .map(|r| col(&r, 0).map(stored_js_string))
            .transpose()
    }

    crate::backend::session_rows::archive_fact_reads!();

    fn visit_entries_until(
        &self,
        after: usize,
        limit: Option<usize>,
        sink: &mut dyn FnMut(String) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<()>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        self.query_texts(
            "SELECT json FROM entries WHERE session_key = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
            &[&self.session_key, &after, &limit],
            sink,
        )
    }

    /// Read from `leaf_events` newest first through its primary key.
    fn leaf_moves(&self, limit: usize) -> Result<Vec<LeafMove>> {
        let rows = self
            .archive
            .conn()?
            .query(
                "SELECT e.json, l.target_id FROM leaf_events l
                 JOIN entries e ON e.session_key = l.session_key AND e.entry_key = l.entry_key
                 WHERE l.session_key = $1 ORDER BY l.seq DESC LIMIT $2",
                &[&self.session_key, &i64::try_from(limit).unwrap_or(i64::MAX)],
            )
            .map_err(pg("reading leaf moves"))?;
        rows.iter()
            .map(|r| {
                let entry = Entry::from_checked_text(col(r, 0)?);
                Ok(LeafMove {
                    id: entry.id().to_owned(),
                    timestamp: entry.timestamp().to_owned(),
                    from: entry.facts().parent().map(str::to_owned),
                    to: col(r, 1)?,
                })
            })
            .collect()
    }

    /// One statement (the leaf and its path), kept like any path read.
    fn active_path(&self) -> Result<(Option<String>, Vec<Entry>)> {
        let (leaf, path) = branch_cache::active_path(&mut *self.archive.conn()?, self.session_key)?;
        if let Some(leaf) = &leaf {
            self.paths.borrow_mut().keep(leaf, &path);
        }
        Ok((leaf, path))
    }

    /// One statement, columns only ([`PATH_FACTS_STATEMENT`]): the path's
    /// ids, types and search roles, a message's text only where the search
    /// index filed no role for it.
    fn visit_path_facts(
        &self,
        start: &str,
        sink: &mut dyn FnMut(crate::storage::PathFact<'_>) -> Result<()>,
    ) -> Result<()> {
        let rows = self
            .archive
            .conn()?
            .query_typed(
                PATH_FACTS_STATEMENT,
                &[(&self.session_key, Type::INT8), (&start, Type::TEXT)],
            )
            .map_err(pg("reading a path's facts"))?;
        if let Some(first) = rows.first() {
            if let Some(parent) = col::<Option<String>>(first, 4)? {
                return Err(crate::Error::ParentCycle(parent));
            }
        }
        for r in &rows {
            let kind: &str = col(r, 1)?;
            let role: Option<&str> = col(r, 2)?;
            let text: Option<&str> = col(r, 3)?;
            let message = match (kind, role, text) {
                ("message", Some(role), _) => MessageFact::Present { role: Some(role) },
                ("message", None, Some(text)) => MessageFact::of_text(text),
                ("message", None, None) => MessageFact::Present { role: None },
                _ => MessageFact::NotMessage,
            };
            sink(crate::storage::PathFact {
                id: col(r, 0)?,
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
        self.paths.borrow_mut().read(self, &mut *conn, id)
    }

    /// The path statement's rows fetched a batch at a time through a portal
    /// ([`branch_cache::visit_path`]); nothing kept in the handle's memo.
    fn visit_path(
        &self,
        id: Option<&str>,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        let Some(id) = id else {
            return Ok(());
        };
        branch_cache::visit_path(&mut *self.archive.conn()?, self.session_key, Some(id), sink)
            .map(drop)
    }

    /// The leaf and its path in the same statement, streamed as
    /// [`SessionStorage::visit_path`] is.
    fn visit_active_path(
        &self,
        sink: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<Option<String>> {
        branch_cache::visit_path(&mut *self.archive.conn()?, self.session_key, None, sink)
    }
}

/// How the handle's [`PathMemo`] reads the team archive.
impl PathSource<::postgres::Client> for PgStorage {
    /// Nothing: the path query finds the start's key itself.
    type Start = ();

    fn session_id(&self) -> &str {
        &self.id
    }

    fn start(&self, conn: &mut ::postgres::Client, id: &str) -> Result<Option<((), Entry)>> {
        conn.query_typed_opt(
            "SELECT json FROM entries WHERE session_key = $1 AND id = $2",
            &[(&self.session_key, Type::INT8), (&id, Type::TEXT)],
        )
        .map_err(pg("reading an entry"))?
        .map(|r| col(&r, 0).map(|text| ((), Entry::from_checked_text(text))))
        .transpose()
    }

    fn still_this_session(&self, conn: &mut ::postgres::Client) -> Result<bool> {
        conn.query_typed_opt(
            "SELECT 1 FROM sessions WHERE session_key = $1 AND id = $2",
            &[(&self.session_key, Type::INT8), (&self.id, Type::TEXT)],
        )
        .map(|row| row.is_some())
        .map_err(pg("checking a kept path"))
    }

    fn query(&self, conn: &mut ::postgres::Client, id: &str, _: Option<()>) -> Result<Vec<Entry>> {
        branch_cache::path(conn, self.session_key, id)
    }
}

/// pi 1.6's whole path from an entry (`$1` the session, `$2` the entry's
/// id) as light facts, root first, in one statement: the walk of the
/// branch cache's path statement from block to block down to depth 0, each
/// row's id, type, search role (`message_text`) and — only for a message
/// the index filed no role for — its text. The first row's fifth column
/// names the root's missing parent when that is in the session (a loop).
const PATH_FACTS_STATEMENT: &str = concat!(
    "WITH RECURSIVE
 start AS (
     SELECT e.entry_key >> 32 AS seg, e.entry_key & 4294967295 AS depth
     FROM entries e WHERE e.session_key = $1 AND e.id = $2::TEXT
 ),
",
    super::branch_cache::path_walk!("SELECT seg, depth, 0::BIGINT FROM start"),
    ",
 rows AS (
     SELECT e.entry_key, e.id, e.type, m.role,
            CASE WHEN e.type = 'message' AND m.role IS NULL THEN e.json END AS json
     FROM walk
     JOIN segment_ancestry a ON a.session_key = $1 AND a.segment_id = walk.head
     JOIN entries e ON e.session_key = $1
          AND e.entry_key BETWEEN ((a.ancestor_segment << 32) | a.from_depth)
                              AND ((a.ancestor_segment << 32) | LEAST(a.to_depth, walk.high))
     LEFT JOIN message_text m ON m.session_key = $1 AND m.entry_key = e.entry_key
 )
 SELECT r.id, r.type, r.role, r.json,
        CASE WHEN r.entry_key = min(r.entry_key) OVER () THEN
            (SELECT g.missing_root_parent FROM segments g
             WHERE g.session_key = $1 AND g.segment_id = r.entry_key >> 32
               AND EXISTS (SELECT 1 FROM entries x
                           WHERE x.session_key = $1 AND x.id = g.missing_root_parent))
        END
 FROM rows r ORDER BY r.entry_key"
);
