//! Schema step 14 (usage facts) runs in bounded batches with a durable
//! cursor (`src/backend/sqlite/migrations/batched.rs`): another connection
//! appends between its batches and what it appends is counted; a migration
//! killed -9 mid-step goes on at the next open and ends with exactly the rows
//! an uninterrupted one writes. Batches are bounded by counting rows
//! (`SESSIONTREE_TEST_BATCH`), not by timing.

mod support;

use rusqlite::types::Value;
use rusqlite::Connection;
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::import_jsonl;
use sessiontree::Durability;
use sessiontree_bench::gen::{generate, GenOptions, Shape};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type R = Result<(), Box<dyn std::error::Error>>;

/// Rows per batch in this process's migrations (set before any batch reads it).
const BATCH_ROWS: u64 = 50;

fn bound_batches() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("SESSIONTREE_TEST_BATCH", format!("{BATCH_ROWS}:0")));
}

/// A generated archive of `entries` entries over a few sessions (assistant
/// messages carry usage), imported and brought back to schema version 13:
/// what step 14 and the later steps made is dropped, as an older build
/// would have left it.
fn archive_at_13(dir: &Path, entries: usize) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let report = generate(
        &dir.join("files"),
        &GenOptions {
            shape: Shape::Archive,
            entries,
            sessions: Some(4),
            seed: 14,
            ..GenOptions::default()
        },
    )?;
    let db = dir.join("v13.db");
    {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        // Smallest first: the first session the step records is a small one.
        for s in report.sessions.iter().rev() {
            import_jsonl(&archive, &s.path)?;
        }
    }
    let conn = Connection::open(&db)?;
    conn.execute_batch(
        "PRAGMA wal_checkpoint(TRUNCATE);
         DROP TABLE usage_daily; DROP TRIGGER usage_facts_recount; DROP TABLE usage_facts;
         ALTER TABLE sessions DROP COLUMN last_active_ms;
         DROP TABLE check_marks; DROP TRIGGER check_marks_entry_rewritten;
         DROP TRIGGER check_marks_entry_removed; DROP TRIGGER check_marks_segment_rewritten;
         DROP TRIGGER check_marks_segment_removed; DROP TRIGGER check_marks_leaf_event_rewritten;
         DROP TRIGGER check_marks_leaf_event_removed; DROP TRIGGER check_marks_compaction_rewritten;
         DROP TRIGGER check_marks_compaction_removed; DROP TABLE dead_message_text;
         PRAGMA user_version = 13;",
    )?;
    Ok(db)
}

/// The version-13 archive of 1,500 entries and a copy of it migrated in one
/// go (the reference), made once for the tests of this file (read only;
/// each test migrates its own copy).
struct Fixture {
    _dir: tempfile::TempDir,
    old: PathBuf,
    reference: PathBuf,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: std::sync::OnceLock<Fixture> = std::sync::OnceLock::new();
    FIXTURE.get_or_init(|| {
        bound_batches();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let old = archive_at_13(dir.path(), 1_500).expect("a version-13 archive");
        let reference = dir.path().join("reference.db");
        copy_db(&old, &reference).expect("a copy");
        Archive::open(&reference, Durability::Relaxed).expect("the reference migrates");
        Fixture {
            _dir: dir,
            old,
            reference,
        }
    })
}

fn copy_db(from: &Path, to: &Path) -> Result<(), Box<dyn std::error::Error>> {
    Connection::open(from)?.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
    std::fs::copy(from, to)?;
    Ok(())
}

/// Every row step 14 writes, in key order (fact keys included: an
/// interrupted migration must write the same facts in the same order), the
/// schema's object names and the version.
fn step_14_rows(db: &Path) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let conn = Connection::open(db)?;
    let mut out = Vec::new();
    for query in [
        "SELECT * FROM usage_facts ORDER BY fact_key",
        "SELECT * FROM usage_daily ORDER BY session_key, day, model",
        "SELECT session_key, last_active_ms FROM sessions ORDER BY session_key",
        "SELECT type, name FROM sqlite_schema ORDER BY name",
        "PRAGMA user_version",
    ] {
        let mut st = conn.prepare(query)?;
        let width = st.column_count();
        let mut rows = st.query([])?;
        while let Some(row) = rows.next()? {
            let values: Vec<Value> = (0..width).map(|i| row.get(i)).collect::<Result<_, _>>()?;
            out.push(format!("{query}: {values:?}"));
        }
    }
    Ok(out)
}

/// The facts step 14 writes for each entry, without their keys (an entry
/// appended while the step ran is recorded after the others), sorted.
fn facts_by_entry(db: &Path) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let conn = Connection::open(db)?;
    let mut st = conn.prepare(
        "SELECT session_key, dedup, counted, at_ms, model, input, output, cache_read,
                cache_write, cost FROM usage_facts",
    )?;
    let mut rows = st.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let values: Vec<Value> = (0..10).map(|i| row.get(i)).collect::<Result<_, _>>()?;
        out.push(format!("{values:?}"));
    }
    out.sort();
    Ok(out)
}

/// While step 14 migrates 1,500 entries, another connection (an older
/// build's writer, as it appends at version 13) inserts an entry after each
/// of ten batches, into a session the step has passed without waiting (no busy handler: in one transaction
/// the first insert failed with `database is locked`). Every batch does at
/// most BATCH_ROWS entries, the step takes many batches, and the entries
/// appended meanwhile get their facts: the result equals a migration of the
/// archive that held them from the start.
#[test]
fn step_14_commits_in_batches_while_another_connection_appends() -> R {
    bound_batches();
    let dir = tempfile::tempdir()?;
    let Fixture { old, reference, .. } = fixture();
    let (usage, list) = {
        let archive = Archive::open(reference, Durability::Relaxed)?;
        (
            archive.usage(&Default::default())?,
            archive.list(&Default::default())?,
        )
    };
    let db = dir.path().join("a.db");
    copy_db(old, &db)?;
    // The last 10 entries of the first session (the first the step
    // records) are taken out, to be appended again (the same rows) once
    // the step has passed that session: only its log of appended entries
    // can find them.
    let other = Connection::open(&db)?;
    let entries: u64 =
        other.query_row("SELECT count(*) FROM entries", [], |r| r.get::<_, i64>(0))? as u64;
    other.busy_timeout(Duration::ZERO)?;
    let (session, held): (i64, i64) = other.query_row(
        "SELECT session_key, count(*) FROM entries GROUP BY session_key ORDER BY session_key LIMIT 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let passed = u64::try_from(held - 10)?;
    let columns: Vec<String> = other
        .prepare("SELECT name FROM pragma_table_info('entries') ORDER BY cid")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut pending: Vec<Vec<Value>> = {
        let mut st = other
            .prepare("SELECT * FROM entries WHERE session_key = ?1 ORDER BY seq DESC LIMIT 10")?;
        let mut rows = st.query([session])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(
                (0..columns.len())
                    .map(|i| row.get(i))
                    .collect::<Result<_, _>>()?,
            );
        }
        out
    };
    assert_eq!(
        pending.len(),
        10,
        "the session holds 10 entries to take out"
    );
    let seq = columns
        .iter()
        .position(|c| c == "seq")
        .ok_or("no seq column")?;
    other.execute(
        "DELETE FROM entries WHERE session_key = ?1 AND seq >= ?2",
        rusqlite::params![session, pending.last().ok_or("no rows")?[seq].clone()],
    )?;
    let insert = format!(
        "INSERT INTO entries ({}) VALUES ({})",
        columns.join(", "),
        vec!["?"; columns.len()].join(", ")
    );
    let mut batches: Vec<(u64, u64)> = Vec::new();
    let mut appended = 0;
    let mut refused = Vec::new();
    Archive::open_with_progress(&db, Durability::Relaxed, &mut |p| {
        if p.version != 14 {
            return;
        }
        batches.push((p.done, p.total));
        if p.done < passed {
            return;
        }
        if let Some(row) = pending.pop() {
            match other.execute(&insert, rusqlite::params_from_iter(row.iter())) {
                Ok(_) => appended += 1,
                Err(e) => refused.push(e.to_string()),
            }
        }
    })?;
    assert_eq!(
        refused,
        Vec::<String>::new(),
        "appends between batches waited"
    );
    assert_eq!(appended, 10, "an append after each of ten batches");
    assert!(
        batches.len() as u64 >= entries / BATCH_ROWS,
        "{entries} entries in batches of {BATCH_ROWS}: {} batches",
        batches.len()
    );
    let mut before = 0;
    for &(done, _) in &batches {
        assert!(
            done >= before && done - before <= BATCH_ROWS,
            "a batch did {} entries: {batches:?}",
            done - before
        );
        before = done;
    }
    assert_eq!(batches.last().copied(), Some((entries, entries)));
    let archive = Archive::open(&db, Durability::Relaxed)?;
    assert_eq!(archive.usage(&Default::default())?, usage);
    assert_eq!(archive.list(&Default::default())?, list);
    assert_eq!(facts_by_entry(&db)?, facts_by_entry(reference)?);
    let leftovers: i64 = other.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'sessiontree_migration%'",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(leftovers, 0, "the cursor and its log are gone");
    Ok(())
}

/// The step's progress in the cursor a running migration keeps, if there is one yet.
fn cursor_done(db: &Path) -> Option<i64> {
    let conn = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.query_row(
        "SELECT done FROM sessiontree_migration WHERE version = 14",
        [],
        |r| r.get(0),
    )
    .ok()
}

/// `sessiontree ls` migrating step 14 in batches of 50 entries is killed
/// -9 once its cursor has passed `after` entries (several batches in, the
/// step unfinished); the next open goes on from the cursor, and the rows
/// are exactly those of an uninterrupted migration, fact keys included.
#[test]
fn a_killed_step_14_goes_on_at_the_next_open_as_if_uninterrupted() -> R {
    bound_batches();
    let dir = tempfile::tempdir()?;
    let Fixture { old, reference, .. } = fixture();
    let expected = step_14_rows(reference)?;
    let entries: i64 =
        Connection::open(old)?.query_row("SELECT count(*) FROM entries", [], |r| r.get(0))?;
    for (trial, after) in [200, 900].into_iter().enumerate() {
        let db = dir.path().join(format!("killed-{trial}.db"));
        copy_db(old, &db)?;
        let mut child = std::process::Command::new(support::bin())
            .arg("--db")
            .arg(&db)
            .arg("ls")
            .env("SESSIONTREE_TEST_BATCH", "50:20")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let started = Instant::now();
        let mut seen = None;
        while started.elapsed() < Duration::from_secs(60) {
            seen = cursor_done(&db).filter(|&done| done >= after);
            if seen.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill()?;
        child.wait()?;
        let seen = seen.ok_or("the cursor never passed its mark")?;
        let left = cursor_done(&db).ok_or("the kill left no cursor")?;
        assert!(
            left >= seen && left < entries,
            "killed with {left} of {entries} entries done (seen {seen})"
        );
        let version: i64 =
            Connection::open(&db)?.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        assert_eq!(
            version, 13,
            "the unfinished step left the version as it was"
        );
        Archive::open(&db, Durability::Relaxed)?;
        assert_eq!(
            step_14_rows(&db)?,
            expected,
            "after kill -9 at {left} entries"
        );
    }
    Ok(())
}

/// Two processes of this build open the version-13 archive at once: each
/// takes batches from the one cursor (neither records an entry twice nor
/// passes one over), both list what the reference lists, and the rows equal a single
/// uninterrupted migration's.
#[test]
fn two_processes_migrating_at_once_share_the_cursor() -> R {
    bound_batches();
    let dir = tempfile::tempdir()?;
    let Fixture { old, reference, .. } = fixture();
    let db = dir.path().join("shared.db");
    copy_db(old, &db)?;
    let start = || {
        std::process::Command::new(support::bin())
            .arg("--db")
            .arg(&db)
            .arg("ls")
            .env("SESSIONTREE_TEST_BATCH", "50:2")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
    };
    let (first, second) = (start()?, start()?);
    let listed = support::run_cli(["--db", reference.to_str().ok_or("utf-8")?, "ls"]);
    assert!(listed.status.success(), "{listed:?}");
    for child in [first, second] {
        let out = child.wait_with_output()?;
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            out.stdout, listed.stdout,
            "both list what the reference lists"
        );
    }
    assert_eq!(step_14_rows(&db)?, step_14_rows(reference)?);
    Ok(())
}
