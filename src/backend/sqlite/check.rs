//! Every consistency check of the archive, in one place ([`Archive::check`]):
//! - the branch cache against a rebuild from the log (every invariant stated
//!   at the top of `backend/branch_cache.rs`, the leaf-event table, compaction stops);
//! - each entry's stored text: it decodes (codec invariant 1) to an entry whose
//!   id and type are the columns beside it, its blob references are recorded
//!   and present (invariant 3), and its search row is there exactly when it has
//!   searchable text, with the right role;
//! - each session row's maintained facts (leaf, name, statistics) and labels
//!   against a replay of its log;
//! - rows of any derived table that belong to no session, segment or entry.

use super::branch_cache::{jump_for_child, segment, split_key, Segment, ANCESTRY_BLOCK, OPEN_END};
use super::check_marks::{self, Mark};
use super::codec::Codec;
use super::connection::damage_marker;
use super::error::sql;
use super::handle::Archive;
use super::storage::SqliteStorage;
use super::stored::body_refs;
use super::writer::{session_facts, stored_labels};
use crate::backend::pending;
use crate::entry::{Entry, EntryType};
use crate::error::{Error, Result};
use crate::json::JsString;
use crate::rules::{apply_label_change, Replay, WalkEnd};
use crate::search;
use crate::storage::{CheckFindings, SessionStorage};
use crate::usage::{day_sums_differ, DaySums};
use rusqlite::{Connection, OptionalExtension};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The statements the per-entry checks run beside the scan of a session's
/// entries, prepared once per session (cached on the connection across
/// sessions).
struct EntryLookups<'c> {
    refs: rusqlite::CachedStatement<'c>,
    blob: rusqlite::CachedStatement<'c>,
    search_row: rusqlite::CachedStatement<'c>,
    block_session: rusqlite::CachedStatement<'c>,
}

impl<'c> EntryLookups<'c> {
    fn prepare(conn: &'c Connection) -> Result<Self> {
        let p = |q: &str| conn.prepare_cached(q).map_err(sql("checking stored text"));
        Ok(EntryLookups {
            refs: p("SELECT blob_id FROM entry_blobs WHERE session_key = ?1 AND entry_key = ?2")?,
            blob: p("SELECT 1 FROM blobs WHERE blob_id = ?1")?,
            search_row: p("SELECT 1 FROM message_text_docsize WHERE id = ?1")?,
            block_session: p("SELECT session_key FROM entry_blocks WHERE block_id = ?1")?,
        })
    }
}

/// What [`verify_session_entries`] found in one session, and what a mark
/// of it records when nothing was.
pub(super) struct SessionVerdict {
    /// What fails or disagrees.
    pub(super) problems: Vec<String>,
    /// The session's last entry (`None`: it has none).
    pub(super) last_seq: Option<i64>,
    /// The replay of the whole log: its facts and labels (as a mark keeps them).
    pub(super) facts: Replay,
    /// The labels of that replay.
    pub(super) labels: HashMap<String, JsString>,
    /// Entries whose stored text was read (decoded and checked).
    pub(super) entries_read: u64,
}

/// Every check that reads a session's entries, in one pass over them in log
/// order: each stored text is decoded and parsed once, and feeds
/// - the stored-text checks ([`check_stored_text`]: it decodes to an entry
///   whose id and type are its row's, its blobs, block and search row);
/// - the branch cache rebuilt in memory ([`BranchModel`]), compared with the
///   stored one when the log is read;
/// - the replay of the session's facts and labels, compared with the session row.
///
/// (Three scans, each decoding every entry, took most of `check`'s time.) A
/// text that does not decode is a problem of its entry; the branch cache and
/// facts are then not compared (a rebuild without that entry would report
/// differences that are not there), as when each check read the log itself.
///
/// With `mark` (what an earlier check verified: the entries through its
/// `seq`), only the entries after it are read: the rebuild starts from the
/// stored cache of the verified part ([`BranchModel::seeded`]) and the replay
/// from the mark's facts and labels; what is compared is the same (every
/// segment and ancestry block, the leaf events and compaction stops of the
/// new entries, the session's facts and labels). `None` when the mark does
/// not fit the stored cache (then the session is verified whole).
pub(super) fn verify_session_entries(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    mark: Option<&Mark>,
) -> Result<Option<SessionVerdict>> {
    let mut problems = Vec::new();
    let mut lookups = EntryLookups::prepare(conn)?;
    let (mut model, mut facts, mut labels, after) = match mark {
        Some(m) => match BranchModel::seeded(conn, session_key, m.seq)? {
            Some(model) => (model, m.facts.clone(), m.labels.clone(), m.seq),
            None => return Ok(None),
        },
        None => (
            BranchModel::default(),
            Replay::default(),
            HashMap::new(),
            i64::MIN,
        ),
    };
    let mut undecodable: Option<Error> = None;
    let mut last_seq = (after != i64::MIN).then_some(after);
    let mut entries_read = 0;
    let mut st = conn
        .prepare_cached(
            "SELECT e.entry_key, e.seq, e.id, e.type, e.json, r.name
             FROM entries e LEFT JOIN roles r ON r.role_id = e.role_id
             WHERE e.session_key = ?1 AND e.seq > ?2 ORDER BY e.seq",
        )
        .map_err(sql("checking stored text"))?;
    let mut rows = st
        .query([session_key, after])
        .map_err(sql("checking stored text"))?;
    while let Some(row) = rows.next().map_err(sql("checking stored text"))? {
        let key: i64 = row.get(0).map_err(sql("checking stored text"))?;
        let seq: i64 = row.get(1).map_err(sql("checking stored text"))?;
        let id: String = row.get(2).map_err(sql("checking stored text"))?;
        let kind: String = row.get(3).map_err(sql("checking stored text"))?;
        let stored = row.get_ref(4).map_err(sql("checking stored text"))?;
        let stored_role: Option<String> = row.get(5).map_err(sql("checking stored text"))?;
        last_seq = Some(seq);
        entries_read += 1;
        let (text, message_trails) = match codec.decode_with_tag(conn, stored) {
            Ok(decoded) => decoded,
            Err(e) => {
                problems.push(format!("entry {id}: its stored text does not decode: {e}"));
                undecodable.get_or_insert(e);
                continue;
            }
        };
        // The full parser: reads trust stored text, a check must not. What
        // it refuses is still read as readers read it (the lenient parse)
        // for the rebuild and the replay.
        let entry = match Entry::from_stored_line(&text) {
            Ok(entry) => {
                check_stored_text(
                    &mut lookups,
                    session_key,
                    (key, &id, &kind, stored_role.as_deref()),
                    stored,
                    (&text, message_trails),
                    &entry,
                    &mut problems,
                )?;
                entry
            }
            Err(p) => {
                problems.push(format!("entry {id}: its stored text {}", p.reason()));
                Entry::from_checked_text(text)
            }
        };
        if undecodable.is_none() {
            model.push(conn, key, seq, &entry, &mut problems)?;
            if let Some(change) = facts.push(&entry) {
                apply_label_change(&mut labels, change);
            }
        }
    }
    drop(rows);
    drop(st);
    drop(lookups);
    if undecodable.is_none() {
        model.finish(conn, codec, session_key, &mut problems)?;
        compare_session_facts(conn, session_key, &facts, &labels, &mut problems)?;
    }
    Ok(Some(SessionVerdict {
        problems,
        last_seq,
        facts,
        labels,
        entries_read,
    }))
}

/// The checks of one entry's stored text, parsed: the message span its tag
/// promises, its id and type against its row's, its block's owner, its blobs
/// recorded and present, its search row and role.
fn check_stored_text(
    lookups: &mut EntryLookups<'_>,
    session_key: i64,
    (key, id, kind, stored_role): (i64, &str, &str, Option<&str>),
    stored: rusqlite::types::ValueRef<'_>,
    (text, message_trails): (&str, bool),
    entry: &Entry,
    problems: &mut Vec<String>,
) -> Result<()> {
    // Tag bit 3 makes readers take the message's span without a scan:
    // it must be where the full parser finds it.
    if message_trails
        && crate::json::trailing_object_member(text, "message") != entry.message_span().flatten()
    {
        problems.push(format!(
            "entry {id}: its stored body says its message is its last member, and it is not"
        ));
    }
    if entry.id() != id || entry.entry_type().as_str() != kind {
        problems.push(format!(
            "entry {id}: its text says id {} and type {}, its row says {id} and {kind}",
            entry.id(),
            entry.entry_type().as_str()
        ));
    }
    let body = body_refs(stored)?;
    if let Some(block) = body.block {
        // Decoding found the block's members in place; a session delete
        // takes the block only with its own session (block invariant 2).
        let owner: Option<i64> = lookups
            .block_session
            .query_row([block], |r| r.get(0))
            .optional()
            .map_err(sql("checking stored text"))?;
        if owner != Some(session_key) {
            problems.push(format!(
                "entry {id}: its text is in entry block {block}, which belongs to session key {owner:?}"
            ));
        }
    }
    let named: BTreeSet<i64> = body.blobs.into_iter().collect();
    let recorded: BTreeSet<i64> = lookups
        .refs
        .query_map(rusqlite::params![session_key, key], |r| r.get(0))
        .and_then(Iterator::collect)
        .map_err(sql("checking stored text"))?;
    if named != recorded {
        problems.push(format!(
            "entry {id}: its text holds blobs {named:?}, entry_blobs records {recorded:?}"
        ));
    }
    for b in &named {
        let present = lookups
            .blob
            .query_row([b], |_| Ok(()))
            .optional()
            .map_err(sql("checking stored text"))?
            .is_some();
        if !present {
            problems.push(format!("entry {id}: blob {b} is missing"));
        }
    }
    let indexed = lookups
        .search_row
        .query_row([key], |_| Ok(()))
        .optional()
        .map_err(sql("checking stored text"))?
        .is_some();
    let searchable = search::searchable_text(entry);
    let role = searchable.as_ref().map(|(role, _)| role.as_str());
    if role != stored_role {
        problems.push(format!(
            "entry {id}: its row says role {}, its text says {}",
            stored_role.unwrap_or("none"),
            role.unwrap_or("none")
        ));
    }
    match (searchable.is_some(), indexed) {
        (true, false) => problems.push(format!("entry {id}: its search row is missing")),
        (false, true) => problems.push(format!(
            "entry {id}: has a search row but no searchable text"
        )),
        _ => {}
    }
    Ok(())
}

/// The reads a walk makes, tried where they can fail: the walk from the root
/// entry of every path whose root's parent is missing (or is the entry
/// itself) unless a compaction stops walks there (as `check FILE`, which
/// walks from every entry no other walk covered), the active path, and the
/// context built from it.
/// A root whose parent is missing is a warning when the walk from it fails
/// only at that parent (pi opens the file, its path stopping there); what
/// the active path and context need is still a problem if it fails. The
/// active path and context only when `active` (an incremental check skips
/// them for a session nothing was appended to since it verified them).
fn verify_walks(
    conn: &Connection,
    storage: &SqliteStorage,
    key: i64,
    warnings: &mut Vec<String>,
    active: bool,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let roots: Vec<String> = conn
        .prepare_cached(
            "SELECT e.id FROM segments s
             JOIN entries e ON e.entry_key = (s.segment_id << 32) | s.first_depth
             WHERE s.session_key = ?1 AND s.parent_segment IS NULL
               AND s.missing_root_parent IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM compactions c
                               WHERE c.session_key = s.session_key AND c.stop_key = e.entry_key)
             ORDER BY e.seq",
        )
        .and_then(|mut st| {
            st.query_map([key], |r| r.get(0))
                .and_then(Iterator::collect)
        })
        .map_err(sql("checking dangling roots"))?;
    for id in roots {
        match storage.path_to_root_or_compaction(Some(&id)) {
            Ok(_) => {}
            Err(Error::DanglingReference(parent)) => {
                warnings.push(crate::storage::missing_parent_warning(&id, &parent));
            }
            Err(e) => problems.push(format!("entry {id}: {e}")),
        }
    }
    if active {
        problems.extend(crate::storage::reader_problems(storage));
    }
    Ok(problems)
}

/// Leaves the damage marker while `PRAGMA integrity_check` fails, so that
/// writers refuse (see `damage_marker`), and removes it once it passes again.
fn mark_damage(archive: &std::path::Path, damage: &[String]) -> Result<()> {
    let marker = damage_marker(archive);
    let io = |e| Error::io(format!("writing {}", marker.display()), e);
    if damage.is_empty() {
        match std::fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
            _ => Ok(()),
        }
    } else {
        std::fs::write(&marker, damage.join("\n") + "\n").map_err(io)
    }
}

impl Archive {
    /// What `check` finds in an archive that does not open (`opened`, the
    /// error the open met: a damaged header, a truncated file, SQLite's
    /// schema pages unreadable): that error, then every problem `PRAGMA
    /// integrity_check` lists when SQLite can still read the file without
    /// writing to it, each page it names. Leaves the damage marker, so
    /// writers refuse the file until it passes again. `check` reports these
    /// rather than stopping at the first damaged page.
    pub fn damage_in_file(path: &std::path::Path, opened: &Error) -> Vec<String> {
        // The open's advice ("run `sessiontree check`") is this very report.
        let what = opened.to_string();
        let what = what
            .split("; nothing more was written")
            .next()
            .unwrap_or(&what);
        let mut found = vec![what.to_owned()];
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        match Connection::open_with_flags(path, flags) {
            Ok(conn) => found.extend(integrity_problems(&conn, "integrity_check")),
            Err(e) => found.push(format!("SQLite cannot open the file: {e}")),
        }
        if let Err(e) = mark_damage(path, &found) {
            found.push(e.to_string());
        }
        found
    }
}

/// One integrity check's rows (at most `limit`), or the error that stopped it.
fn integrity_rows(conn: &Connection, pragma: &str) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare(pragma)?;
    let rows = st.query_map([], |r| r.get::<_, String>(0))?;
    rows.collect()
}

/// What `PRAGMA integrity_check` finds (empty: it passed). SQLite stops the
/// whole check at the first page it cannot parse ("database disk image is
/// malformed"), naming nothing; then each table and index is checked on its
/// own (`PRAGMA integrity_check(NAME)`), so the report lists every one that
/// is damaged, with what SQLite says of its pages. If even the list of
/// tables cannot be read (the schema's own pages are damaged), that is said.
fn integrity_problems(conn: &Connection, pragma: &str) -> Vec<String> {
    const LIMIT: usize = 1000;
    // FTS5 keeps the search index's structure (its segments) cached on the
    // connection, and its own check inside the pragma reads through that
    // cache without asking whether another connection has written since; a
    // cursor opened on the table does ask. On a pooled connection that read
    // the index before, the check read a segment merged away since and
    // reported "fts5: corruption found reading blob …" on a whole archive
    // (`cache_costs_are_bounded_for_every_shape`, once the pragma ran on a
    // worker's connection). An archive without the table (before schema
    // step 2) has nothing to refresh.
    let _ = conn.query_row(
        "SELECT count(*) FROM message_text WHERE rowid = 0",
        [],
        |r| r.get::<_, i64>(0),
    );
    let whole = integrity_rows(conn, &format!("PRAGMA {pragma}({LIMIT})"));
    let e = match whole {
        Ok(rows) => {
            return rows
                .into_iter()
                .filter(|r| r != "ok")
                .map(|r| format!("{pragma}: {r}"))
                .collect()
        }
        Err(e) => e,
    };
    let mut found = vec![format!("{pragma} stopped: {e}")];
    let tables: rusqlite::Result<Vec<String>> = conn
        .prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND rootpage > 0 ORDER BY name",
        )
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect());
    let tables = match tables {
        Ok(t) => t,
        Err(e) => {
            found.push(format!(
                "the archive's schema cannot be read ({e}): the pages that describe its tables are damaged, so none of them can be checked or read"
            ));
            return found;
        }
    };
    for table in tables {
        let quoted = table.replace('"', "\"\"");
        match integrity_rows(conn, &format!("PRAGMA integrity_check(\"{quoted}\")")) {
            Ok(rows) => found.extend(
                rows.into_iter()
                    .filter(|r| r != "ok")
                    .take(LIMIT)
                    .map(|r| format!("table {table} (or its indexes): {r}")),
            ),
            Err(e) => found.push(format!("table {table} (or its indexes): {e}")),
        }
    }
    found
}

/// A session to check.
struct SessionRow {
    key: i64,
    id: String,
    /// Its entry count: the larger are checked first.
    entries: i64,
}

/// A row of `leaf_events`, stored or as the log gives it.
#[derive(Debug, PartialEq)]
struct LeafEventRow {
    seq: i64,
    entry_key: i64,
    target_id: Option<String>,
}

/// A row of `segment_ancestry`, stored or rebuilt.
#[derive(Debug, PartialEq)]
struct AncestryRow {
    from_depth: i64,
    ancestor_segment: i64,
    to_depth: i64,
}

/// A row of `compactions` with its entry's id.
struct CompactionRow {
    entry_key: i64,
    stop_key: Option<i64>,
    id: String,
}

/// How much a check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckMode {
    /// Everything: `PRAGMA integrity_check` (with the search index's own
    /// check, as `quick_check` has too), and every entry of every session.
    Full,
    /// What changed since the last check: `PRAGMA quick_check`, and of each
    /// session only the entries appended since a check last verified it (a
    /// session rewritten since, by compact, delete, an import that replaces
    /// it or a migration, is read whole). See docs/cli.md for what only
    /// [`CheckMode::Full`] finds.
    Incremental,
}

/// What a check read ([`Archive::check_run`]), to say so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckCoverage {
    /// Sessions checked.
    pub sessions: u64,
    /// Of them, those read whole (no mark of an earlier check, or `--full`).
    pub sessions_whole: u64,
    /// Of them, those with nothing appended since the last check.
    pub sessions_unchanged: u64,
    /// Entries whose stored text was decoded and checked.
    pub entries_read: u64,
    /// Sessions whose check is now recorded (a later check reads only what
    /// is appended to them).
    pub marks_recorded: u64,
}

/// A check's findings and what it read.
#[derive(Debug, Clone, Default)]
pub struct CheckRun {
    /// Problems and warnings.
    pub findings: CheckFindings,
    /// What it read.
    pub coverage: CheckCoverage,
}

/// Threads a check runs on at most. Each holds a connection of the pool and
/// its session's walks borrow another, beside the one that writes the marks:
/// 1 + 2 × 3 stays within the pool's 8, so no thread waits for a connection.
const MAX_THREADS: usize = 3;

/// Marks recorded per write transaction while a check runs.
const MARKS_PER_WRITE: usize = 256;

impl Archive {
    /// Everything [`Archive::check_consistency`] checks, plus what a reader
    /// of each session would hit: a parent cycle, a root whose parent is
    /// missing where no compaction cuts the walk before it (a file cut from a
    /// longer one; a fork after a compaction is cut there and fine), and the
    /// active path and its context failing to build. `sessiontree check --full`.
    pub fn check(&self, session: Option<&str>) -> Result<Vec<String>> {
        self.check_with_progress(session, &mut |_, _| {})
    }

    /// [`Archive::check`], telling `progress` (sessions checked, sessions to
    /// check) once `PRAGMA integrity_check` has passed and after each session.
    pub fn check_with_progress(
        &self,
        session: Option<&str>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<String>> {
        Ok(self.check_findings(session, progress)?.problems)
    }

    /// [`Archive::check_with_progress`] with its warnings: roots whose
    /// parent is missing where the walk from them stops there, which pi
    /// opens and reads tolerate (each prefixed with its session).
    pub fn check_findings(
        &self,
        session: Option<&str>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CheckFindings> {
        Ok(self.run_checks(session, true, None, progress)?.findings)
    }

    /// `sessiontree check`: [`Archive::check_findings`] in `mode`, recording
    /// what it verified of each session found clean (`check_marks`), so that
    /// the next [`CheckMode::Incremental`] check reads only what is appended
    /// after. (The other check methods neither read nor write marks.)
    pub fn check_run(
        &self,
        session: Option<&str>,
        mode: CheckMode,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CheckRun> {
        self.run_checks(session, true, Some(mode), progress)
    }

    /// [`Archive::check_run`] on `threads` threads (at least one; `check_run`
    /// uses the cores): the same findings in the same order, whatever the count.
    pub fn check_run_on(
        &self,
        session: Option<&str>,
        mode: CheckMode,
        threads: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CheckRun> {
        self.run_checks_on(session, true, Some(mode), threads, progress)
    }

    /// Every consistency check of the archive, or of one session: `PRAGMA
    /// integrity_check`, then per session its branch cache against a rebuild,
    /// its entries' stored text, blobs and search rows, and its maintained
    /// facts against a replay; archive-wide also orphan rows of every derived
    /// table (the search index's own check runs within the pragma). The problems found, empty when
    /// what is stored is exactly what the log implies (whatever the log holds).
    pub fn check_consistency(&self, session: Option<&str>) -> Result<Vec<String>> {
        Ok(self
            .run_checks(session, false, None, &mut |_, _| {})?
            .findings
            .problems)
    }

    fn run_checks(
        &self,
        session: Option<&str>,
        reads: bool,
        marks: Option<CheckMode>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CheckRun> {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        self.run_checks_on(session, reads, marks, threads, progress)
    }

    /// [`Archive::run_checks`] on `threads` threads. The SQLite pragma, the
    /// archive-wide scans and each session are independent reads: the
    /// pragma runs on the calling thread's connection while `threads`
    /// workers, each on a connection of its own, take the archive-wide scans
    /// and then the sessions, largest first (so a big one does not start
    /// last). What is found is reported in the
    /// serial order whatever finished first: the archive-wide problems, then
    /// each session's in the order they were listed; marks are recorded
    /// only once the pragma has passed (on damage nothing else is reported,
    /// as when the pragma ran before the rest).
    fn run_checks_on(
        &self,
        session: Option<&str>,
        reads: bool,
        marks: Option<CheckMode>,
        threads: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CheckRun> {
        let conn = self.conn()?;
        let incremental = marks == Some(CheckMode::Incremental);
        // The incremental check reads every page too, but skips comparing
        // each index with its table (`quick_check`): most of the pragma's time.
        let pragma = if incremental {
            "quick_check"
        } else {
            "integrity_check"
        };
        // On a damaged file SQLite may refuse the listing, or the pragma
        // itself; that is damage found too, and nothing else is checked
        // then: every derived check would read the same broken pages.
        let sessions = match list_sessions(&conn, session) {
            Ok(s) => s,
            Err(e) => {
                let damage = integrity_problems(&conn, pragma);
                return match damage_run(self.path(), damage) {
                    Err(run) => Ok(run),
                    Ok(_) => Err(e),
                };
            }
        };
        let total = sessions.len() as u64;
        progress(0, total);
        // Claimed before anything is read: a rewrite committed after this
        // deletes the claim, and with it the mark this run would write.
        let run = check_run_id();
        let claimed = if marks.is_some() {
            let keys: Vec<i64> = sessions.iter().map(|s| s.key).collect();
            check_marks::claim(&conn, &keys, run)
        } else {
            Ok(())
        };
        // Largest first: the sessions' order of work, not of the report.
        let mut order: Vec<usize> = (0..sessions.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sessions[i].entries));
        let tasks = Tasks {
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            order,
        };
        let opts = SessionOptions {
            incremental,
            reads,
            marks: marks.is_some(),
        };
        let mut found = Found {
            pragma: None,
            archive_wide: None,
            error: claimed.err(),
            sessions: Vec::new(),
            warnings: Vec::new(),
            coverage: CheckCoverage::default(),
            verified: Vec::new(),
            run,
        };
        if found.error.is_some() {
            tasks.stop.store(true, Ordering::Relaxed);
        }
        let threads = threads.clamp(1, MAX_THREADS.min(sessions.len() + 1));
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::channel::<Done>();
            for _ in 0..threads {
                let tx = tx.clone();
                let (tasks, sessions) = (&tasks, &sessions);
                scope.spawn(move || self.check_worker(tasks, sessions, session, opts, &tx));
            }
            drop(tx);
            // The pragma runs on this thread's connection, beside the
            // sessions on the others, whatever else failed: damage it finds
            // is the report (and the likely cause of the failure).
            let damage = pragma_in_a_small_cache(&conn, pragma);
            if !damage.is_empty() {
                tasks.stop.store(true, Ordering::Relaxed);
            }
            found.pragma = Some(damage);
            let mut pending: std::collections::BTreeMap<usize, SessionOutcome> =
                std::collections::BTreeMap::new();
            let mut emitted = 0usize;
            for done in rx {
                match done {
                    Done::ArchiveWide(r) => found.archive_wide = Some(r),
                    Done::Failed(e) => {
                        tasks.stop.store(true, Ordering::Relaxed);
                        found.error.get_or_insert(e);
                    }
                    Done::Session(i, outcome) => {
                        pending.insert(i, outcome);
                        while let Some(o) = pending.remove(&emitted) {
                            found.take(o);
                            emitted += 1;
                            progress(emitted as u64, total);
                        }
                    }
                }
                if found.pragma.as_ref().is_some_and(Vec::is_empty)
                    && found.verified.len() >= MARKS_PER_WRITE
                    && found.error.is_none()
                {
                    if let Err(e) = found.record(&conn) {
                        tasks.stop.store(true, Ordering::Relaxed);
                        found.error = Some(e);
                    }
                }
            }
        });
        // Damage found by the pragma is the report, whatever else failed.
        // (A pragma that never ran, its thread stopped by an error first,
        // neither leaves nor removes the damage marker.)
        let mut problems = match found.pragma.take().map(|d| damage_run(self.path(), d)) {
            Some(Ok(problems)) => problems,
            Some(Err(run)) => return Ok(run),
            None => Vec::new(),
        };
        if let Some(e) = found.error.take() {
            return Err(e);
        }
        found.record(&conn)?;
        problems.extend(found.archive_wide.take().unwrap_or(Ok(Vec::new()))?);
        problems.append(&mut found.sessions);
        Ok(CheckRun {
            findings: CheckFindings {
                problems,
                warnings: found.warnings,
            },
            coverage: found.coverage,
        })
    }

    /// One thread of a check: its own connection, the archive-wide scans if
    /// no thread has taken them, then sessions until none is left or the
    /// check stops.
    fn check_worker(
        &self,
        tasks: &Tasks,
        sessions: &[SessionRow],
        session: Option<&str>,
        opts: SessionOptions,
        tx: &std::sync::mpsc::Sender<Done>,
    ) {
        let conn = match self.conn() {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.send(Done::Failed(e));
                return;
            }
        };
        loop {
            let t = tasks.next.fetch_add(1, Ordering::Relaxed);
            if tasks.stop.load(Ordering::Relaxed) {
                return;
            }
            let done = match t {
                0 => Done::ArchiveWide(archive_wide_problems(&conn, session)),
                _ => match tasks.order.get(t - 1) {
                    None => return,
                    Some(&i) => match self.check_session(&conn, &sessions[i], opts) {
                        Ok(o) => Done::Session(i, o),
                        Err(e) => {
                            tasks.stop.store(true, Ordering::Relaxed);
                            Done::Failed(e)
                        }
                    },
                },
            };
            if tx.send(done).is_err() {
                return;
            }
        }
    }

    /// Every check of one session, in one snapshot of `conn`.
    fn check_session(
        &self,
        conn: &Connection,
        SessionRow { key, id, .. }: &SessionRow,
        opts: SessionOptions,
    ) -> Result<SessionOutcome> {
        let key = *key;
        let codec = self.codec();
        // One snapshot per session for the checks that read through
        // `conn`: its rows, blocks and derived tables as one commit left
        // them, whatever is written meanwhile. (The walks read through
        // the session's own storage, a connection of their own.)
        let snapshot = Archive::begin_read(conn, "checking sessions")?;
        let mut session_problems = Vec::new();
        let mut mark = if opts.incremental {
            check_marks::load(conn, key)?
        } else {
            None
        };
        // The verified part's rows that appends keep: changed, they were
        // rewritten past the triggers (damage, or a bug); the session is
        // then read whole.
        if let Some(m) = &mark {
            let now = check_marks::digest(conn, key, m.seq)?;
            if now != m.digest {
                session_problems.push(format!(
                    "the rows of its entries through seq {} (their count, segments, leaf events or compactions) changed since check verified them, though nothing rewrote the session",
                    m.seq
                ));
                mark = None;
            }
        }
        let verdict =
            match found_or_damage_verdict(verify_session_entries(conn, codec, key, mark.as_ref()))?
            {
                Ok(Some(v)) => Some(v),
                // The mark does not fit the stored cache: read it whole.
                Ok(None) => {
                    mark = None;
                    match found_or_damage_verdict(verify_session_entries(conn, codec, key, None))? {
                        Ok(v) => v,
                        Err(damage) => {
                            session_problems.push(damage);
                            None
                        }
                    }
                }
                Err(damage) => {
                    session_problems.push(damage);
                    None
                }
            };
        let appended = verdict.as_ref().is_none_or(|v| v.entries_read > 0);
        let mut outcome = SessionOutcome {
            whole: mark.is_none(),
            unchanged: mark.is_some() && !appended,
            entries_read: verdict.as_ref().map_or(0, |v| v.entries_read),
            ..SessionOutcome::default()
        };
        // A tolerated dangling root is said on every check; the reads
        // of the active path and context can change only with it.
        let mut found_warnings = Vec::new();
        if opts.reads {
            session_problems.extend(found_or_damage(verify_walks(
                conn,
                &SqliteStorage::new(self.clone(), key, id),
                key,
                &mut found_warnings,
                appended || mark.is_none(),
            ))?);
        }
        let clean =
            session_problems.is_empty() && verdict.as_ref().is_some_and(|v| v.problems.is_empty());
        if let Some(v) = verdict {
            if clean && opts.marks {
                let seq = v.last_seq.unwrap_or(-1);
                outcome.mark = Some((
                    key,
                    Mark {
                        seq,
                        digest: check_marks::digest(conn, key, seq)?,
                        facts: v.facts,
                        labels: v.labels,
                    },
                ));
            }
            session_problems.splice(0..0, v.problems);
        }
        drop(snapshot);
        outcome.warnings = found_warnings
            .into_iter()
            .map(|w| format!("session {id}: {w}"))
            .collect();
        outcome.problems = session_problems
            .into_iter()
            .map(|p| format!("session {id}: {p}"))
            .collect();
        Ok(outcome)
    }
}

/// [`integrity_problems`] with the connection's page cache cut to
/// [`PRAGMA_CACHE_KIB`] while it runs: the pragma reads every page once, so
/// a large cache buys it nothing (`quick_check` took no more CPU in 2 MB
/// than in 16 MB on a 312 MB archive, `integrity_check` ~5 % more), and
/// beside the threads checking sessions a full one would add its 16 MB to
/// the check's memory. The cache is set back after, for the sessions this
/// thread checks next. (A connection that refuses the setting runs the
/// pragma as it is: only memory is at stake.)
fn pragma_in_a_small_cache(conn: &Connection, pragma: &str) -> Vec<String> {
    let before: Option<i64> = conn.query_row("PRAGMA cache_size", [], |r| r.get(0)).ok();
    let cut = before.is_some()
        && conn
            .pragma_update(None, "cache_size", -PRAGMA_CACHE_KIB)
            .is_ok();
    let damage = integrity_problems(conn, pragma);
    if let (true, Some(size)) = (cut, before) {
        let _ = conn.pragma_update(None, "cache_size", size);
    }
    damage
}

/// The page cache, in KiB, of the connection running the pragma.
const PRAGMA_CACHE_KIB: i64 = 2_000;

/// The sessions a check reads (all, or the one named). A session marked
/// deleted is being removed in batches (by another process, or by the next
/// open after a killed delete): its remainder is short of entries by
/// design, not damaged, so it is left out.
fn list_sessions(conn: &Connection, session: Option<&str>) -> Result<Vec<SessionRow>> {
    conn.prepare(
        "SELECT session_key, id, entry_count FROM sessions
          WHERE (?1 IS NULL OR id = ?1) AND staged_from IS NOT ?2",
    )
    .and_then(|mut st| {
        st.query_map(rusqlite::params![session, pending::DELETE_MARK], |r| {
            Ok(SessionRow {
                key: r.get(0)?,
                id: r.get(1)?,
                entries: r.get(2)?,
            })
        })
        .and_then(Iterator::collect)
    })
    .map_err(sql("checking sessions"))
}

/// The archive-wide checks: orphan rows of every derived table (when the
/// whole archive is checked) and the per-day usage sums. (The search
/// index's own check, FTS5's `integrity-check`, is part of both pragmas:
/// SQLite runs every virtual table's check.)
fn archive_wide_problems(conn: &Connection, session: Option<&str>) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    if session.is_none() {
        problems.extend(orphan_rows(conn)?);
        problems.extend(super::fts_dead::problems(conn)?);
    }
    problems.extend(usage_day_sums(conn, session)?);
    Ok(problems)
}

/// What the pragma's `damage` makes of the check: `Err(report)` when it
/// found any (nothing else is reported then), else `Ok(problems)` to report
/// first (writing the damage marker can fail). Leaves or removes the marker.
fn damage_run(
    archive: &std::path::Path,
    damage: Vec<String>,
) -> std::result::Result<Vec<String>, CheckRun> {
    let mut problems = Vec::new();
    if let Err(e) = mark_damage(archive, &damage) {
        problems.push(e.to_string());
    }
    if damage.is_empty() {
        return Ok(problems);
    }
    problems.extend(damage);
    Err(CheckRun {
        findings: CheckFindings {
            problems,
            warnings: Vec::new(),
        },
        coverage: CheckCoverage::default(),
    })
}

/// The work of a check's threads: task 0 is the pragma, 1 the archive-wide
/// scans, 2.. the sessions in `order`.
struct Tasks {
    next: AtomicUsize,
    /// Set on damage or an error: no thread takes another task (but the pragma).
    stop: AtomicBool,
    /// Indexes into the sessions listed, in the order they are taken.
    order: Vec<usize>,
}

/// What every session of one check is checked for.
#[derive(Clone, Copy)]
struct SessionOptions {
    incremental: bool,
    reads: bool,
    marks: bool,
}

/// A task's result, sent to the thread that assembles the report.
enum Done {
    ArchiveWide(Result<Vec<String>>),
    Session(usize, SessionOutcome),
    Failed(Error),
}

/// What the check of one session found.
#[derive(Default)]
struct SessionOutcome {
    problems: Vec<String>,
    warnings: Vec<String>,
    whole: bool,
    unchanged: bool,
    entries_read: u64,
    /// Its mark, when it is clean and marks are kept.
    mark: Option<(i64, Mark)>,
}

/// The report as it is assembled, in the serial order.
struct Found {
    /// The pragma's problems, once it has run.
    pragma: Option<Vec<String>>,
    archive_wide: Option<Result<Vec<String>>>,
    /// The first error that stopped the check.
    error: Option<Error>,
    sessions: Vec<String>,
    warnings: Vec<String>,
    coverage: CheckCoverage,
    /// Marks not yet recorded.
    verified: Vec<(i64, Mark)>,
    run: i64,
}

impl Found {
    /// Adds the next session's outcome, in the order the sessions were listed.
    fn take(&mut self, o: SessionOutcome) {
        self.coverage.sessions += 1;
        self.coverage.sessions_whole += u64::from(o.whole);
        self.coverage.sessions_unchanged += u64::from(o.unchanged);
        self.coverage.entries_read += o.entries_read;
        self.sessions.extend(o.problems);
        self.warnings.extend(o.warnings);
        self.verified.extend(o.mark);
    }

    /// Records the marks kept so far.
    fn record(&mut self, conn: &Connection) -> Result<()> {
        self.coverage.marks_recorded += check_marks::record(conn, self.run, &self.verified)? as u64;
        self.verified.clear();
        Ok(())
    }
}

/// An id for one run of `check`, to tell its claims on marks from another's
/// (two checks at once: the later claim wins, the earlier writes nothing).
fn check_run_id() -> i64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    (nanos as i64) ^ (i64::from(std::process::id()) << 40)
}

/// [`found_or_damage`] for a session's verdict: damage met on the way is
/// `Err(problem)`; other errors stop the check.
fn found_or_damage_verdict(
    found: Result<Option<SessionVerdict>>,
) -> Result<std::result::Result<Option<SessionVerdict>, String>> {
    match found {
        Err(Error::Corrupt(damage)) => Ok(Err(damage)),
        Err(e) => Err(e),
        Ok(v) => Ok(Ok(v)),
    }
}

/// A check's problems, with damage it met on the way (an error reading
/// stored data) as one more; other errors (I/O, a busy archive) stop the check.
fn found_or_damage(found: Result<Vec<String>>) -> Result<Vec<String>> {
    match found {
        Err(Error::Corrupt(damage)) => Ok(vec![damage]),
        other => other,
    }
}

/// Rows of derived tables whose session, segment or entry is gone (a delete
/// done by hand, a bug): one problem per table that has any. A session
/// marked for a delete or fork (`staged_from`) is left out where its
/// removal passes through such states by design: a delete removes entries
/// before their compaction rows, and segments in no set order.
fn orphan_rows(conn: &rusqlite::Connection) -> Result<Vec<String>> {
    const ORPHANS: &[(&str, &str)] = &[
        ("entries", "SELECT count(*) FROM entries WHERE session_key NOT IN (SELECT session_key FROM sessions)"),
        ("segments", "SELECT count(*) FROM segments WHERE session_key NOT IN (SELECT session_key FROM sessions)"),
        ("segment_ancestry", "SELECT count(*) FROM segment_ancestry WHERE segment_id NOT IN (SELECT segment_id FROM segments)"),
        ("segments (parent or jump pointer)", "SELECT count(*) FROM segments s WHERE ((s.parent_segment IS NOT NULL AND s.parent_segment NOT IN (SELECT segment_id FROM segments)) OR (s.jump_segment IS NOT NULL AND s.jump_segment NOT IN (SELECT segment_id FROM segments))) AND s.session_key NOT IN (SELECT session_key FROM sessions WHERE staged_from IS NOT NULL)"),
        ("leaf_events", "SELECT count(*) FROM leaf_events WHERE session_key NOT IN (SELECT session_key FROM sessions)"),
        ("compactions", "SELECT count(*) FROM compactions WHERE entry_key NOT IN (SELECT entry_key FROM entries) AND session_key NOT IN (SELECT session_key FROM sessions WHERE staged_from IS NOT NULL)"),
        ("labels", "SELECT count(*) FROM labels WHERE session_key NOT IN (SELECT session_key FROM sessions)"),
        ("writer_claims", "SELECT count(*) FROM writer_claims WHERE session_key NOT IN (SELECT session_key FROM sessions)"),
        ("imports", "SELECT count(*) FROM imports WHERE session_key NOT IN (SELECT session_key FROM sessions)"),
        ("message_text (search)", "SELECT count(*) FROM message_text_docsize d WHERE NOT EXISTS (SELECT 1 FROM entries e JOIN sessions s ON s.session_key = e.session_key WHERE e.entry_key = d.id) AND NOT coalesce((SELECT g.last_segment >= (d.id >> 32) FROM dead_message_text g WHERE g.first_segment <= (d.id >> 32) ORDER BY g.first_segment DESC LIMIT 1), 0)"),
        ("entries (role)", "SELECT count(*) FROM entries e WHERE e.role_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM roles r WHERE r.role_id = e.role_id)"),
        ("entry_blobs", "SELECT count(*) FROM entry_blobs r WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.entry_key = r.entry_key AND e.session_key = r.session_key) OR NOT EXISTS (SELECT 1 FROM blobs b WHERE b.blob_id = r.blob_id)"),
        ("blobs", "SELECT count(*) FROM blobs b WHERE NOT EXISTS (SELECT 1 FROM entry_blobs r WHERE r.blob_id = b.blob_id)"),
        ("entry_blocks", "SELECT count(*) FROM entry_blocks WHERE session_key NOT IN (SELECT session_key FROM sessions)"),
    ];
    let mut problems = Vec::new();
    for (table, query) in ORPHANS {
        let n: i64 = conn
            .query_row(query, [], |r| r.get(0))
            .map_err(sql("checking for orphan rows"))?;
        if n > 0 {
            problems.push(format!(
                "{table}: {n} rows belong to no stored session, segment or entry"
            ));
        }
    }
    Ok(problems)
}
/// The per-day usage sums (`usage_daily`, which `stats` and `usage` read)
/// against the counted usage facts they sum: the writer adds them up in
/// memory ([`super::writer`]), so a sum lost or counted twice by a batch
/// boundary, a resumed import or a delete would otherwise go unnoticed.
/// Floats are compared as [`DaySums::agrees_with`] does.
fn usage_day_sums(conn: &Connection, session: Option<&str>) -> Result<Vec<String>> {
    const MOST: usize = 20;
    let mut st = conn
        .prepare(
            "WITH facts AS (
                 SELECT session_key, coalesce(at_ms / 86400000 - (at_ms % 86400000 < 0), 0) AS day,
                        model, count(*) AS entries, sum(input) AS input, sum(output) AS output,
                        sum(cache_read) AS cache_read, sum(cache_write) AS cache_write,
                        sum(cost) AS cost
                   FROM usage_facts WHERE counted GROUP BY 1, 2, 3)
             SELECT s.id, day, model,
                    d.entries, d.input, d.output, d.cache_read, d.cache_write, d.cost,
                    f.entries, f.input, f.output, f.cache_read, f.cache_write, f.cost
               FROM usage_daily d FULL JOIN facts f USING (session_key, day, model)
               JOIN sessions s USING (session_key)
              WHERE ?1 IS NULL OR s.id = ?1",
        )
        .map_err(sql("checking usage sums"))?;
    let mut rows = st.query([session]).map_err(sql("checking usage sums"))?;
    let mut problems = Vec::new();
    while let Some(r) = rows.next().map_err(sql("checking usage sums"))? {
        let sums = |from: usize| -> rusqlite::Result<Option<DaySums>> {
            let Some(entries) = r.get::<_, Option<i64>>(from)? else {
                return Ok(None);
            };
            Ok(Some(DaySums {
                entries,
                input: r.get(from + 1)?,
                output: r.get(from + 2)?,
                cache_read: r.get(from + 3)?,
                cache_write: r.get(from + 4)?,
                cost: r.get(from + 5)?,
            }))
        };
        let (stored, counted) = (
            sums(3).map_err(sql("checking usage sums"))?,
            sums(9).map_err(sql("checking usage sums"))?,
        );
        if let (Some(a), Some(b)) = (&stored, &counted) {
            if a.agrees_with(b) {
                continue;
            }
        }
        if problems.len() == MOST {
            problems.push("usage: more day sums differ (first 20 named)".to_owned());
            break;
        }
        let id: String = r.get(0).map_err(sql("checking usage sums"))?;
        let day: i64 = r.get(1).map_err(sql("checking usage sums"))?;
        let model: String = r.get(2).map_err(sql("checking usage sums"))?;
        problems.push(day_sums_differ(&id, day, &model, stored, counted));
    }
    Ok(problems)
}

/// Compares the maintained facts (leaf, name, stats) and labels with their
/// replay from the log.
fn compare_session_facts(
    conn: &Connection,
    key: i64,
    expected: &Replay,
    labels: &HashMap<String, JsString>,
    problems: &mut Vec<String>,
) -> Result<()> {
    let stored = session_facts(conn, key)?;
    if *expected != stored {
        problems.push(format!(
            "maintained facts {stored:?} differ from a replay {expected:?}"
        ));
    }
    let stored_labels = stored_labels(conn, key)?;
    for (target, label) in &stored_labels {
        if labels.get(target) != Some(label) {
            problems.push(format!(
                "label on {target} is {label}, a replay gives {:?}",
                labels.get(target).map(JsString::json)
            ));
        }
    }
    for (target, label) in labels {
        if !stored_labels.contains_key(target) {
            problems.push(format!("label {} on {target} is missing", label.json()));
        }
    }
    Ok(())
}
/// A segment as a replay of the log builds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelSegment {
    parent: Option<usize>,
    first_depth: i64,
    tail_depth: i64,
    position: i64,
    jump: Option<usize>,
    /// Key of the nearest compaction above the first entry.
    inherited_compaction: Option<i64>,
    missing_root_parent: Option<String>,
}
/// The branch cache of a session rebuilt in memory from its entries in log
/// order ([`BranchModel::push`]), then compared with the stored cache
/// ([`BranchModel::finish`]: every invariant above, and the leaf-event table
/// against the log's `leaf` entries).
#[derive(Default)]
struct BranchModel {
    segments: Vec<ModelSegment>,
    /// id -> (segment index, depth, key of the nearest compaction at or above)
    by_id: HashMap<String, (usize, i64, Option<i64>)>,
    /// stored segment id <-> model segment index, established in creation order
    seg_map: HashMap<i64, usize>,
    /// The keys of the entries pushed.
    keys: HashMap<String, i64>,
    leaf_entries: Vec<LeafEventRow>,
    /// Set by [`BranchModel::seeded`]: the session and its last verified
    /// entry, whose part is read from the stored cache, not pushed.
    verified: Option<(i64, i64)>,
}

impl BranchModel {
    /// The model as it stood after the entries of session `key` through
    /// `seq`, read from the stored cache instead of pushing them (an earlier
    /// check verified that part, and nothing rewrote it since: see
    /// `check_marks.rs`): the segments those entries are in, in creation
    /// order, with the tail each had then. Their entries are looked up when
    /// a later entry names one as its parent ([`BranchModel::place_of`]).
    /// `None` when the stored cache cannot be such a part (a segment whose
    /// parent or jump began later, or is gone).
    fn seeded(conn: &Connection, key: i64, seq: i64) -> Result<Option<Self>> {
        let what = "verifying the branch cache";
        // Index-only: `entries_by_seq` holds the key of each entry.
        let parts: Vec<(i64, i64)> = conn
            .prepare_cached(
                "SELECT entry_key >> 32, max(entry_key & 4294967295) FROM entries
                 WHERE session_key = ?1 AND seq <= ?2
                 GROUP BY entry_key >> 32 ORDER BY min(seq)",
            )
            .and_then(|mut st| {
                st.query_map([key, seq], |r| Ok((r.get(0)?, r.get(1)?)))
                    .and_then(Iterator::collect)
            })
            .map_err(sql(what))?;
        let mut model = BranchModel {
            verified: Some((key, seq)),
            ..BranchModel::default()
        };
        for (sid, tail) in parts {
            let stored = conn
                .prepare_cached(
                    "SELECT parent_segment, first_depth, position, jump_segment,
                            inherited_compaction, missing_root_parent
                     FROM segments WHERE segment_id = ?1 AND session_key = ?2",
                )
                .and_then(|mut st| {
                    st.query_row([sid, key], |r| {
                        Ok((
                            r.get::<_, Option<i64>>(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get::<_, Option<i64>>(3)?,
                            r.get(4)?,
                            r.get(5)?,
                        ))
                    })
                    .optional()
                })
                .map_err(sql(what))?;
            let Some((parent, first_depth, position, jump, inherited_compaction, missing)) = stored
            else {
                return Ok(None);
            };
            let index = |s: Option<i64>| match s {
                None => Some(None),
                Some(s) => model.seg_map.get(&s).map(|&m| Some(m)),
            };
            let (Some(parent), Some(jump)) = (index(parent), index(jump)) else {
                return Ok(None);
            };
            model.segments.push(ModelSegment {
                parent,
                first_depth,
                tail_depth: tail,
                position,
                jump,
                inherited_compaction,
                missing_root_parent: missing,
            });
            model.seg_map.insert(sid, model.segments.len() - 1);
        }
        Ok(Some(model))
    }

    /// Where the entry `id` is placed: pushed, or (in a seeded model) one of
    /// the verified part, read from its key and the stored compactions.
    fn place_of(
        &mut self,
        conn: &Connection,
        id: &str,
    ) -> Result<Option<(usize, i64, Option<i64>)>> {
        if let Some(place) = self.by_id.get(id) {
            return Ok(Some(*place));
        }
        let Some((session_key, seq)) = self.verified else {
            return Ok(None);
        };
        let what = "verifying the branch cache";
        let key: Option<i64> = conn
            .prepare_cached(
                "SELECT entry_key FROM entries WHERE session_key = ?1 AND id = ?2 AND seq <= ?3",
            )
            .and_then(|mut st| {
                st.query_row(rusqlite::params![session_key, id, seq], |r| r.get(0))
                    .optional()
            })
            .map_err(sql(what))?;
        let Some(key) = key else { return Ok(None) };
        let (sid, depth) = split_key(key);
        let Some(&seg) = self.seg_map.get(&sid) else {
            return Ok(None);
        };
        // The entries of a segment up to a depth are all on the path to it:
        // the deepest compaction among them, else the one the segment inherits.
        let nearest: Option<i64> = conn
            .prepare_cached(
                "SELECT max(entry_key) FROM compactions
                 WHERE session_key = ?1 AND entry_key BETWEEN ?2 AND ?3",
            )
            .and_then(|mut st| st.query_row([session_key, sid << 32, key], |r| r.get(0)))
            .map_err(sql(what))?;
        let place = (
            seg,
            depth,
            nearest.or(self.segments[seg].inherited_compaction),
        );
        self.by_id.insert(id.to_owned(), place);
        Ok(Some(place))
    }

    /// Places the next entry of the log (stored at `key`, `seq`), noting
    /// where the stored key disagrees.
    fn push(
        &mut self,
        conn: &Connection,
        key: i64,
        seq: i64,
        entry: &Entry,
        problems: &mut Vec<String>,
    ) -> Result<()> {
        let f = entry.facts();
        let parent = match f.parent() {
            Some(p) => self.place_of(conn, p)?,
            None => None,
        };
        let segments = &mut self.segments;
        let (seg, depth, above) = match parent {
            Some((pseg, pdepth, above)) if segments[pseg].tail_depth == pdepth => {
                segments[pseg].tail_depth += 1;
                (pseg, pdepth + 1, above)
            }
            Some((pseg, pdepth, above)) => {
                let p = &segments[pseg];
                let jump =
                    jump_for_child((pseg as i64, p.position, p.jump.map(|j| j as i64)), |s| {
                        let s = &segments[usize::try_from(s).unwrap_or(0)];
                        Ok((s.position, s.jump.map(|j| j as i64)))
                    })?;
                let next = ModelSegment {
                    parent: Some(pseg),
                    first_depth: pdepth + 1,
                    tail_depth: pdepth + 1,
                    position: p.position + 1,
                    jump: Some(usize::try_from(jump).unwrap_or(0)),
                    inherited_compaction: above,
                    missing_root_parent: p.missing_root_parent.clone(),
                };
                segments.push(next);
                (segments.len() - 1, pdepth + 1, above)
            }
            None => {
                segments.push(ModelSegment {
                    parent: None,
                    first_depth: 0,
                    tail_depth: 0,
                    position: 1,
                    jump: None,
                    inherited_compaction: None,
                    missing_root_parent: f.parent().map(str::to_owned),
                });
                (segments.len() - 1, 0, None)
            }
        };
        let (stored_seg, stored_depth) = split_key(key);
        match self.seg_map.get(&stored_seg) {
            Some(&m) if m != seg => {
                problems.push(format!("entry {} is in the wrong segment", f.id))
            }
            None => {
                self.seg_map.insert(stored_seg, seg);
            }
            _ => {}
        }
        if stored_depth != depth {
            problems.push(format!(
                "entry {} has depth {stored_depth}, expected {depth}",
                f.id
            ));
        }
        let is_compaction = f.entry_type == EntryType::Compaction;
        if f.entry_type == EntryType::Leaf {
            self.leaf_entries.push(LeafEventRow {
                seq,
                entry_key: key,
                target_id: f.target_id.clone(),
            });
        }
        let nearest = if is_compaction { Some(key) } else { above };
        self.keys.insert(f.id.clone(), key);
        self.by_id.insert(f.id.clone(), (seg, depth, nearest));
        Ok(())
    }

    /// Compares the rebuild with the stored segments, ancestry, leaf events
    /// and compaction stops.
    fn finish(
        self,
        conn: &Connection,
        codec: &Codec,
        session_key: i64,
        problems: &mut Vec<String>,
    ) -> Result<()> {
        let BranchModel {
            segments,
            seg_map,
            keys,
            leaf_entries,
            verified,
            ..
        } = self;
        let inverse: HashMap<usize, i64> = seg_map.iter().map(|(s, m)| (*m, *s)).collect();
        let stored_count: i64 = conn
            .query_row(
                "SELECT count(*) FROM segments WHERE session_key = ?1",
                [session_key],
                |r| r.get(0),
            )
            .map_err(sql("verifying the branch cache"))?;
        if usize::try_from(stored_count).ok() != Some(segments.len()) {
            problems.push(format!(
                "{stored_count} segments stored, the rebuild has {}",
                segments.len()
            ));
        }
        let mut ancestry = conn
            .prepare_cached(
                "SELECT from_depth, ancestor_segment, to_depth FROM segment_ancestry
                 WHERE segment_id = ?1 ORDER BY from_depth",
            )
            .map_err(sql("verifying the branch cache"))?;
        for (m, model) in segments.iter().enumerate() {
            let Some(&sid) = inverse.get(&m) else {
                problems.push(format!("segment #{m} of the rebuild has no stored segment"));
                continue;
            };
            let stored = segment(conn, sid)?;
            let expected = Segment {
                id: sid,
                parent: model.parent.and_then(|p| inverse.get(&p).copied()),
                first_depth: model.first_depth,
                tail_depth: model.tail_depth,
                position: model.position,
                jump: model.jump.and_then(|j| inverse.get(&j).copied()),
                inherited_compaction: model.inherited_compaction,
                missing_root_parent: model.missing_root_parent.clone(),
            };
            if stored != expected {
                problems.push(format!(
                    "segment {sid} is {stored:?}, its rebuild {expected:?}"
                ));
            }
            // Invariant 4: the nearest segments of its path, rebuilt by walking parents.
            let mut block = Vec::new();
            let (mut cur, mut to) = (Some(m), OPEN_END);
            while let Some(c) = cur.filter(|_| block.len() < ANCESTRY_BLOCK as usize) {
                let seg = &segments[c];
                block.push(AncestryRow {
                    from_depth: seg.first_depth,
                    ancestor_segment: inverse.get(&c).copied().unwrap_or(-1),
                    to_depth: to,
                });
                to = seg.first_depth - 1;
                cur = seg.parent;
            }
            block.reverse();
            let actual: Vec<AncestryRow> = ancestry
                .query_map([sid], |r| {
                    Ok(AncestryRow {
                        from_depth: r.get(0)?,
                        ancestor_segment: r.get(1)?,
                        to_depth: r.get(2)?,
                    })
                })
                .and_then(Iterator::collect)
                .map_err(sql("verifying the branch cache"))?;
            if actual != block {
                problems.push(format!(
                    "segment {sid} ancestry {actual:?} differs from its rebuild {block:?}"
                ));
            }
        }
        drop(ancestry);
        let after = verified.map_or(i64::MIN, |(_, seq)| seq);
        problems.extend(verify_leaf_events(conn, session_key, &leaf_entries, after)?);
        problems.extend(verify_compaction_stops(
            conn,
            codec,
            session_key,
            &keys,
            after,
        )?);
        Ok(())
    }
}

/// The leaf-event table holds exactly the log's `leaf` entries (those after
/// seq `after`: the rows of a verified part are in its mark's digest).
fn verify_leaf_events(
    conn: &Connection,
    session_key: i64,
    expected: &[LeafEventRow],
    after: i64,
) -> Result<Vec<String>> {
    let stored: Vec<LeafEventRow> = conn
        .prepare_cached(
            "SELECT seq, entry_key, target_id FROM leaf_events
             WHERE session_key = ?1 AND seq > ?2 ORDER BY seq",
        )
        .and_then(|mut st| {
            st.query_map([session_key, after], |r| {
                Ok(LeafEventRow {
                    seq: r.get(0)?,
                    entry_key: r.get(1)?,
                    target_id: r.get(2)?,
                })
            })
            .and_then(Iterator::collect)
        })
        .map_err(sql("verifying leaf events"))?;
    if stored == expected {
        return Ok(Vec::new());
    }
    let first_difference = stored
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(stored.len().min(expected.len()));
    Ok(vec![format!(
        "leaf_events has {} rows, the log {} leaf entries; first difference at row {first_difference}",
        stored.len(),
        expected.len()
    )])
}

/// Compaction stops of the entries after seq `after`, recomputed by the
/// reference walk of `rules.rs` (`keys`: the entries pushed; an earlier one
/// is looked up by its id).
fn verify_compaction_stops(
    conn: &Connection,
    codec: &Codec,
    session_key: i64,
    keys: &HashMap<String, i64>,
    after: i64,
) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut st = conn
        .prepare_cached(
            "SELECT c.entry_key, c.stop_key, e.id FROM compactions c JOIN entries e USING (entry_key)
             WHERE c.session_key = ?1 AND e.seq > ?2",
        )
        .map_err(sql("verifying the branch cache"))?;
    let stored: Vec<CompactionRow> = st
        .query_map([session_key, after], |r| {
            Ok(CompactionRow {
                entry_key: r.get(0)?,
                stop_key: r.get(1)?,
                id: r.get(2)?,
            })
        })
        .and_then(Iterator::collect)
        .map_err(sql("verifying the branch cache"))?;
    // An entry of the log: pushed, or (after a verified part) stored before it.
    let key_of = |id: &str| -> Result<Option<i64>> {
        if let Some(k) = keys.get(id) {
            return Ok(Some(*k));
        }
        if after == i64::MIN {
            return Ok(None);
        }
        conn.prepare_cached(
            "SELECT entry_key FROM entries WHERE session_key = ?1 AND id = ?2 AND seq <= ?3",
        )
        .and_then(|mut st| {
            st.query_row(rusqlite::params![session_key, id, after], |r| r.get(0))
                .optional()
        })
        .map_err(sql("verifying the branch cache"))
    };
    let lookup = |id: &str| -> Result<Option<Entry>> {
        match key_of(id)? {
            Some(k) => {
                let json: rusqlite::types::Value = conn
                    .prepare_cached("SELECT json FROM entries WHERE entry_key = ?1")
                    .and_then(|mut st| st.query_row([k], |r| r.get(0)))
                    .map_err(sql("verifying the branch cache"))?;
                Ok(Some(Entry::from_checked_text(
                    codec.decode(conn, (&json).into())?,
                )))
            }
            None => Ok(None),
        }
    };
    for CompactionRow {
        entry_key: ckey,
        stop_key: stop,
        id,
    } in stored
    {
        // The cache stores where the rule stops a walk from the compaction,
        // and nothing when the walk reaches the root or cannot be made.
        let expected = match crate::rules::walk(Some(&id), lookup) {
            Ok(w) if w.end == WalkEnd::CompactionStop => key_of(w.path[0].id())?,
            _ => None,
        };
        if expected != stop {
            problems.push(format!(
                "compaction {id} (key {ckey}) stops at {stop:?}, expected {expected:?}"
            ));
        }
    }
    Ok(problems)
}
