//! Two naive SQLite designs over the same data, as baselines (never used by
//! the library):
//!
//! - **sql-cte**: the log in a plain table `log(session, seq, id, parent, json)`
//!   with a unique index on `(session, id)`; a path is a recursive-CTE
//!   parent-pointer walk that applies the contract's compaction stop rule
//!   (spec §5) as it goes and returns the same entries as the library.
//! - **sql-pathcopy**: the same log, plus pi-style path-copy materialization:
//!   every leaf move copies the whole root→leaf path (entry text included)
//!   into a `branch` table, with the position where the compaction rule cuts
//!   it; reading the active branch reads that table only. Appending at the
//!   leaf adds one row.
//!
//! Two narrow columns, `stop` (0 = ordinary, 1 = compaction, 2 = compaction
//! with a retained tail) and `kept` (its `firstKeptEntryId`), let the CTE apply
//! the stop rule without parsing JSON on every step: that makes the baseline
//! *stronger* than a literal five-column table (a `json_extract` per step
//! would add to every step), so ratios against it are conservative.
//!
//! Both designs share one file and one `sessions` table (id, header, replayed
//! leaf, entry count), so listing and search are the same for both.

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use sessiontree::backend::jsonl::read_session;
use sessiontree::search::searchable_text;
use sessiontree::{Entry, EntryType, Error, Result};
use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;

fn sql(context: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| Error::sqlite(context, e)
}

/// The schema of both naive designs.
pub const SCHEMA: &str = "
CREATE TABLE sessions (
    session    INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    cwd        TEXT NOT NULL,
    header     TEXT NOT NULL,
    leaf       TEXT,
    entries    INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE log (
    session INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    id      TEXT NOT NULL,
    parent  TEXT,
    stop    INTEGER NOT NULL,
    kept    TEXT,
    json    TEXT NOT NULL
);
CREATE UNIQUE INDEX log_by_id ON log (session, id);
CREATE UNIQUE INDEX log_by_seq ON log (session, seq);
-- path-copy materialization: rowid = session << 32 | position on the branch
CREATE TABLE branch (
    pos  INTEGER PRIMARY KEY,
    id   TEXT NOT NULL,
    json TEXT NOT NULL
);
CREATE TABLE branch_meta (
    session INTEGER PRIMARY KEY,
    cut     INTEGER NOT NULL,   -- first position the compaction rule keeps
    len     INTEGER NOT NULL    -- positions on the branch
);
";

/// The `stop` column of an entry.
pub fn stop_kind(e: &Entry) -> i64 {
    let f = e.facts();
    match f.entry_type {
        EntryType::Compaction if f.has_retained_tail => 2,
        EntryType::Compaction => 1,
        _ => 0,
    }
}

/// An open naive database.
pub struct Naive {
    /// The connection.
    pub conn: Connection,
}

/// The one key for a branch row.
fn branch_key(session: i64, pos: i64) -> i64 {
    (session << 32) | pos
}

/// Where the compaction rule cuts a root→leaf path given as (id, stop, kept),
/// walking from the leaf: the index of the first entry kept.
pub fn cut_of(path: &[(String, i64, Option<String>)]) -> usize {
    let mut pending: Option<&str> = None;
    for i in (0..path.len()).rev() {
        let (id, stop, kept) = &path[i];
        if pending == Some(id.as_str()) {
            return i;
        }
        match stop {
            2 => return i,
            1 => pending = kept.as_deref(),
            _ => {}
        }
    }
    0
}

impl Naive {
    /// Opens (creating with the schema if new) a naive database with the same
    /// per-connection settings as the archive: WAL, `synchronous` FULL or
    /// NORMAL, a 16 MB page cache.
    pub fn open(path: &Path, durable: bool) -> Result<Naive> {
        let fresh = !path.exists();
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql("opening the naive database"))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql("opening the naive database"))?;
        conn.pragma_update(None, "synchronous", if durable { "FULL" } else { "NORMAL" })
            .map_err(sql("opening the naive database"))?;
        conn.pragma_update(None, "cache_size", -16_000)
            .map_err(sql("opening the naive database"))?;
        if fresh {
            conn.execute_batch(SCHEMA)
                .map_err(sql("creating the naive schema"))?;
        }
        Ok(Naive { conn })
    }

    /// Imports one pi file into the log (one transaction, streaming), and with
    /// `materialize` also copies the final active branch. Returns the session
    /// key and the entries imported.
    pub fn import_file(&mut self, file: &Path, materialize: bool) -> Result<(i64, u64)> {
        self.conn
            .pragma_update(None, "cache_size", -200_000)
            .map_err(sql("importing"))?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("importing"))?;
        let f = std::fs::File::open(file)
            .map_err(|e| Error::io(format!("reading {}", file.display()), e))?;
        let mut session: Option<i64> = None;
        let mut seq = 0i64;
        let mut leaf: Option<String> = None;
        // For materializing: id -> (parent, stop, kept, seq); kept small (no text).
        let mut tree: HashMap<String, (Option<String>, i64, Option<String>)> = HashMap::new();
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO log (session, seq, id, parent, stop, kept, json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(sql("importing"))?;
            read_session(BufReader::with_capacity(1 << 16, f), file, |h, e| {
                let s = match session {
                    Some(s) => s,
                    None => {
                        tx.execute(
                                "INSERT INTO sessions (id, created_at, cwd, header) VALUES (?1, ?2, ?3, ?4)",
                                params![h.id, h.timestamp, h.cwd, h.json],
                            )
                            .map_err(sql("importing"))?;
                        let s = tx.last_insert_rowid();
                        session = Some(s);
                        s
                    }
                };
                let facts = e.facts();
                let stop = stop_kind(&e);
                insert
                    .execute(params![
                        s,
                        seq,
                        facts.id,
                        facts.parent_id,
                        stop,
                        facts.first_kept_entry_id,
                        e.json()
                    ])
                    .map_err(sql("importing"))?;
                seq += 1;
                leaf = facts.leaf_after().map(str::to_owned);
                if materialize {
                    tree.insert(
                        facts.id.clone(),
                        (
                            facts.parent().map(str::to_owned),
                            stop,
                            facts.first_kept_entry_id.clone(),
                        ),
                    );
                }
                Ok(())
            })?;
        }
        let s = match session {
            Some(s) => s,
            None => return Err(Error::Unknown(format!("{} has no entries", file.display()))),
        };
        tx.execute(
            "UPDATE sessions SET leaf = ?2, entries = ?3 WHERE session = ?1",
            params![s, leaf, seq],
        )
        .map_err(sql("importing"))?;
        if materialize {
            let mut path = Vec::new();
            let mut cur = leaf.clone();
            while let Some(id) = cur {
                let Some((parent, stop, kept)) = tree.get(&id) else {
                    break;
                };
                path.push((id.clone(), *stop, kept.clone()));
                cur = parent.clone();
            }
            path.reverse();
            write_branch(&tx, s, &path)?;
        }
        tx.commit().map_err(sql("importing"))?;
        self.conn
            .pragma_update(None, "cache_size", -16_000)
            .map_err(sql("importing"))?;
        Ok((s, seq as u64))
    }

    /// The session key of a session id.
    pub fn session_key(&self, id: &str) -> Result<i64> {
        self.conn
            .prepare_cached("SELECT session FROM sessions WHERE id = ?1")
            .and_then(|mut st| st.query_row([id], |r| r.get(0)))
            .map_err(sql("finding a session"))
    }

    /// The replayed leaf.
    pub fn leaf(&self, session: i64) -> Result<Option<String>> {
        self.conn
            .prepare_cached("SELECT leaf FROM sessions WHERE session = ?1")
            .and_then(|mut st| st.query_row([session], |r| r.get(0)))
            .map_err(sql("reading the leaf"))
    }

    /// sql-cte: the path from `id` to the root or the compaction stop, root-side
    /// first, by a recursive CTE that applies the stop rule on the way.
    pub fn cte_path(&self, session: i64, id: &str) -> Result<Vec<Entry>> {
        let mut st = self
            .conn
            .prepare_cached(
                "WITH RECURSIVE walk (id, parent, stop, kept, pending, json) AS (
                   SELECT id, parent, stop, kept, NULL, json FROM log WHERE session = ?1 AND id = ?2
                   UNION ALL
                   SELECT l.id, l.parent, l.stop, l.kept,
                          CASE WHEN w.stop = 1 THEN w.kept ELSE w.pending END, l.json
                   FROM walk w JOIN log l ON l.session = ?1 AND l.id = w.parent
                   WHERE w.parent IS NOT NULL AND w.parent <> '' AND w.stop <> 2
                     AND (w.pending IS NULL OR w.pending <> w.id)
                 )
                 SELECT json FROM walk",
            )
            .map_err(sql("walking a path"))?;
        let mut rows = st
            .query(params![session, id])
            .map_err(sql("walking a path"))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(sql("walking a path"))? {
            let text = row
                .get_ref(0)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(sql("walking a path"))?;
            out.push(parse(text)?);
        }
        out.reverse();
        Ok(out)
    }

    /// [`Naive::cte_path`] returning the text only (no [`Entry`] parse): the
    /// SQL cost of the walk, for the diagnostic rows. Returns the rows.
    pub fn cte_path_text(&self, session: i64, id: &str) -> Result<usize> {
        let mut st = self
            .conn
            .prepare_cached(
                "WITH RECURSIVE walk (id, parent, stop, kept, pending, json) AS (
                   SELECT id, parent, stop, kept, NULL, json FROM log WHERE session = ?1 AND id = ?2
                   UNION ALL
                   SELECT l.id, l.parent, l.stop, l.kept,
                          CASE WHEN w.stop = 1 THEN w.kept ELSE w.pending END, l.json
                   FROM walk w JOIN log l ON l.session = ?1 AND l.id = w.parent
                   WHERE w.parent IS NOT NULL AND w.parent <> '' AND w.stop <> 2
                     AND (w.pending IS NULL OR w.pending <> w.id)
                 )
                 SELECT json FROM walk",
            )
            .map_err(sql("walking a path"))?;
        let mut rows = st
            .query(params![session, id])
            .map_err(sql("walking a path"))?;
        let mut n = 0;
        while let Some(row) = rows.next().map_err(sql("walking a path"))? {
            let text = row
                .get_ref(0)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(sql("walking a path"))?;
            n += usize::from(!text.is_empty());
        }
        Ok(n)
    }

    /// sql-pathcopy: the active branch, read from the materialized table (from
    /// the compaction cut on).
    pub fn branch(&self, session: i64) -> Result<Vec<Entry>> {
        let (cut, len): (i64, i64) = self
            .conn
            .prepare_cached("SELECT cut, len FROM branch_meta WHERE session = ?1")
            .and_then(|mut st| st.query_row([session], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(sql("reading the branch"))?;
        let mut st = self
            .conn
            .prepare_cached("SELECT json FROM branch WHERE pos BETWEEN ?1 AND ?2")
            .map_err(sql("reading the branch"))?;
        let mut rows = st
            .query(params![
                branch_key(session, cut),
                branch_key(session, len - 1)
            ])
            .map_err(sql("reading the branch"))?;
        let mut out = Vec::with_capacity(usize::try_from(len - cut).unwrap_or(0));
        while let Some(row) = rows.next().map_err(sql("reading the branch"))? {
            let text = row
                .get_ref(0)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(sql("reading the branch"))?;
            out.push(parse(text)?);
        }
        Ok(out)
    }

    fn next_seq(&self, session: i64) -> Result<i64> {
        self.conn
            .prepare_cached("SELECT entries FROM sessions WHERE session = ?1")
            .and_then(|mut st| st.query_row([session], |r| r.get(0)))
            .map_err(sql("reading the entry count"))
    }

    /// Appends one entry (a transaction; durable per the connection's
    /// `synchronous`). With `pathcopy`, the entry is also added to the
    /// materialized branch (it extends the branch when its parent is the leaf;
    /// otherwise the branch is copied afresh).
    pub fn append(&mut self, session: i64, e: &Entry, pathcopy: bool) -> Result<()> {
        let seq = self.next_seq(session)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql("appending"))?;
        let f = e.facts();
        let old_leaf: Option<String> = tx
            .prepare_cached("SELECT leaf FROM sessions WHERE session = ?1")
            .and_then(|mut st| st.query_row([session], |r| r.get(0)))
            .map_err(sql("appending"))?;
        tx.prepare_cached(
            "INSERT INTO log (session, seq, id, parent, stop, kept, json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut st| {
            st.execute(params![
                session,
                seq,
                f.id,
                f.parent_id,
                stop_kind(e),
                f.first_kept_entry_id,
                e.json()
            ])
        })
        .map_err(sql("appending"))?;
        let new_leaf = f.leaf_after().map(str::to_owned);
        tx.prepare_cached("UPDATE sessions SET leaf = ?2, entries = ?3 WHERE session = ?1")
            .and_then(|mut st| st.execute(params![session, new_leaf, seq + 1]))
            .map_err(sql("appending"))?;
        if pathcopy {
            let extends = f.entry_type != EntryType::Leaf
                && f.entry_type != EntryType::Compaction
                && f.parent().is_some()
                && f.parent() == old_leaf.as_deref();
            if extends {
                let len: i64 = tx
                    .prepare_cached("SELECT len FROM branch_meta WHERE session = ?1")
                    .and_then(|mut st| st.query_row([session], |r| r.get(0)))
                    .map_err(sql("appending"))?;
                tx.prepare_cached("INSERT INTO branch (pos, id, json) VALUES (?1, ?2, ?3)")
                    .and_then(|mut st| {
                        st.execute(params![branch_key(session, len), f.id, e.json()])
                    })
                    .map_err(sql("appending"))?;
                tx.prepare_cached("UPDATE branch_meta SET len = ?2 WHERE session = ?1")
                    .and_then(|mut st| st.execute(params![session, len + 1]))
                    .map_err(sql("appending"))?;
            } else {
                materialize(&tx, session, new_leaf.as_deref())?;
            }
        }
        tx.commit().map_err(sql("appending"))
    }

    /// Moves the leaf to `target` by appending a `leaf` entry (as the contract
    /// says) with the given id and time; with `pathcopy` the branch is copied afresh.
    pub fn move_leaf(
        &mut self,
        session: i64,
        target: &str,
        id: &str,
        timestamp: &str,
        pathcopy: bool,
    ) -> Result<()> {
        let exists: Option<i64> = self
            .conn
            .prepare_cached("SELECT 1 FROM log WHERE session = ?1 AND id = ?2")
            .and_then(|mut st| {
                st.query_row(params![session, target], |r| r.get(0))
                    .optional()
            })
            .map_err(sql("moving the leaf"))?;
        if exists.is_none() {
            return Err(Error::EntryNotFound(target.to_owned()));
        }
        let leaf = self.leaf(session)?;
        let e = Entry::new_leaf(id, leaf.as_deref(), timestamp, Some(target));
        self.append(session, &e, pathcopy)
    }

    /// Sessions newest first with their entry counts (`LIMIT limit`).
    pub fn list_first_page(&self, limit: usize) -> Result<Vec<(String, String, i64)>> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT s.id, s.created_at, (SELECT count(*) FROM log l WHERE l.session = s.session)
                 FROM sessions s ORDER BY s.created_at DESC LIMIT ?1",
            )
            .map_err(sql("listing"))?;
        let rows = st
            .query_map([limit as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(Iterator::collect)
            .map_err(sql("listing"));
        rows
    }

    /// Every message whose text contains `term` (a `LIKE` scan over the
    /// entry text, then the same text extraction as the archive's index):
    /// the number of hits and the first `limit` entry ids.
    pub fn search_like(&self, term: &str, limit: usize) -> Result<(usize, Vec<String>)> {
        let mut st = self
            .conn
            .prepare_cached("SELECT json FROM log WHERE json LIKE ?1")
            .map_err(sql("searching"))?;
        let mut rows = st.query([format!("%{term}%")]).map_err(sql("searching"))?;
        let needle = term.to_lowercase();
        let mut hits = 0;
        let mut first = Vec::new();
        while let Some(row) = rows.next().map_err(sql("searching"))? {
            let text = row
                .get_ref(0)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(sql("searching"))?;
            let e = parse(text)?;
            if let Some((_, t)) = searchable_text(&e) {
                if t.to_lowercase().contains(&needle) {
                    hits += 1;
                    if first.len() < limit {
                        first.push(e.id().to_owned());
                    }
                }
            }
        }
        Ok((hits, first))
    }

    /// The rowid range of a session's log rows.
    pub fn rowid_range(&self, session: i64) -> Result<(i64, i64)> {
        self.conn
            .query_row(
                "SELECT min(rowid), max(rowid) FROM log WHERE session = ?1",
                [session],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(sql("reading the rowid range"))
    }

    /// The physical floor of reading `rows` entries: one primary-key (rowid)
    /// range scan from `start`; with `parse`, each row also becomes an
    /// [`Entry`] as a path read returns it. Returns the bytes read.
    pub fn floor_scan(&self, start: i64, rows: i64, parse_rows: bool) -> Result<usize> {
        let mut st = self
            .conn
            .prepare_cached("SELECT json FROM log WHERE rowid BETWEEN ?1 AND ?2")
            .map_err(sql("scanning"))?;
        let mut q = st
            .query(params![start, start + rows - 1])
            .map_err(sql("scanning"))?;
        let mut bytes = 0;
        let mut kept = Vec::new();
        while let Some(row) = q.next().map_err(sql("scanning"))? {
            let text = row
                .get_ref(0)
                .and_then(|v| v.as_str().map_err(Into::into))
                .map_err(sql("scanning"))?;
            bytes += text.len();
            if parse_rows {
                kept.push(parse(text)?);
            }
        }
        Ok(bytes + kept.len())
    }
}

impl Naive {
    /// The floor of printing a context: opens the naive database read-only
    /// with no settings, scans `rows` rows from rowid `start` in one range
    /// query and writes each row's text to `out` as one line.
    pub fn floor_write(
        path: &Path,
        start: i64,
        rows: i64,
        out: &mut dyn std::io::Write,
    ) -> Result<usize> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql("opening the naive database"))?;
        let mut st = conn
            .prepare("SELECT json FROM log WHERE rowid BETWEEN ?1 AND ?2")
            .map_err(sql("scanning"))?;
        let mut q = st
            .query(params![start, start + rows - 1])
            .map_err(sql("scanning"))?;
        let mut n = 0;
        let write = |e| Error::io("writing the floor's output", e);
        while let Some(row) = q.next().map_err(sql("scanning"))? {
            let text = row
                .get_ref(0)
                .and_then(|v| v.as_bytes().map_err(Into::into))
                .map_err(sql("scanning"))?;
            out.write_all(text).map_err(write)?;
            out.write_all(b"\n").map_err(write)?;
            n += 1;
        }
        out.flush().map_err(write)?;
        Ok(n)
    }
}

fn parse(text: &str) -> Result<Entry> {
    Entry::from_stored_line(text)
        .map_err(|p| Error::InvalidSession(format!("stored entry is corrupt: {}", p.reason())))
}

/// Copies the whole root→`leaf` path into the branch table (the path-copy
/// design's leaf move), replacing the session's previous branch.
pub fn materialize(conn: &Connection, session: i64, leaf: Option<&str>) -> Result<()> {
    let mut path: Vec<(String, i64, Option<String>)> = Vec::new();
    if let Some(leaf) = leaf {
        let mut st = conn
            .prepare_cached(
                "WITH RECURSIVE up (id, parent, stop, kept) AS (
                   SELECT id, parent, stop, kept FROM log WHERE session = ?1 AND id = ?2
                   UNION ALL
                   SELECT l.id, l.parent, l.stop, l.kept FROM up u
                   JOIN log l ON l.session = ?1 AND l.id = u.parent
                   WHERE u.parent IS NOT NULL AND u.parent <> ''
                 )
                 SELECT id, stop, kept FROM up",
            )
            .map_err(sql("materializing the branch"))?;
        path = st
            .query_map(params![session, leaf], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .and_then(Iterator::collect)
            .map_err(sql("materializing the branch"))?;
        path.reverse();
    }
    write_branch(conn, session, &path)
}

fn write_branch(
    conn: &Connection,
    session: i64,
    path: &[(String, i64, Option<String>)],
) -> Result<()> {
    conn.prepare_cached("DELETE FROM branch WHERE pos BETWEEN ?1 AND ?2")
        .and_then(|mut st| {
            st.execute(params![
                branch_key(session, 0),
                branch_key(session, (1 << 32) - 1)
            ])
        })
        .map_err(sql("materializing the branch"))?;
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO branch (pos, id, json) SELECT ?1, id, json FROM log WHERE session = ?2 AND id = ?3",
        )
        .map_err(sql("materializing the branch"))?;
    for (pos, (id, _, _)) in path.iter().enumerate() {
        insert
            .execute(params![branch_key(session, pos as i64), session, id])
            .map_err(sql("materializing the branch"))?;
    }
    let cut = cut_of(path) as i64;
    conn.prepare_cached(
        "INSERT INTO branch_meta (session, cut, len) VALUES (?1, ?2, ?3)
         ON CONFLICT (session) DO UPDATE SET cut = excluded.cut, len = excluded.len",
    )
    .and_then(|mut st| st.execute(params![session, cut, path.len() as i64]))
    .map_err(sql("materializing the branch"))?;
    Ok(())
}
