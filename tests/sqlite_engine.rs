//! The SQLite engine: schema and migrations, connection settings, writer
//! claims, and complexity tests that count work (statements, rows, VM steps,
//! rows written) instead of timing it.

mod support;

use serde_json::json;
use sessiontree::backend::sqlite::internals::{
    ANCESTRY_BLOCK, PATH_QUERY, PATH_RANGES_QUERY, SEGMENT_HOLDING_QUERY,
};
use sessiontree::backend::sqlite::{latest_version, CheckMode, CheckRun, ReadCost};
use sessiontree::backend::sqlite::{Archive, NewSession, SqliteStorage};
use sessiontree::{Durability, Entry, ErrorCode, SessionStorage};

use support::downgrade_to_version_5;

type R = Result<(), Box<dyn std::error::Error>>;

fn new_session(id: &str) -> NewSession {
    NewSession::sdk(id, "2025-01-01T00:00:00.000Z", "/w")
}

fn msg(id: &str, parent: Option<&str>) -> Entry {
    Entry::from_value(&json!({"type":"message","id":id,"parentId":parent,"timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"x"}}))
        .expect("entry")
}

#[test]
fn migrations_apply_once_and_refuse_a_newer_database() -> R {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("a.db");
    Archive::open(&path, Durability::Full)?;
    Archive::open(&path, Durability::Full)?; // migrating twice is a no-op
    let conn = rusqlite::Connection::open(&path)?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    assert_eq!(version, latest_version());
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    assert_eq!(mode, "wal");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for t in [
        "compactions",
        "entries",
        "imports",
        "labels",
        "leaf_events",
        "segment_ancestry",
        "segments",
        "sessions",
        "writer_claims",
    ] {
        assert!(tables.iter().any(|x| x == t), "table {t} in {tables:?}");
    }
    conn.pragma_update(None, "user_version", latest_version() + 1)?;
    drop(conn);
    let err = Archive::open(&path, Durability::Full).expect_err("newer schema");
    assert_eq!(err.code(), ErrorCode::Storage);
    assert!(err.to_string().contains("newer than"), "{err}");
    Ok(())
}

#[test]
fn pooled_connections_carry_the_durability_settings() -> R {
    let dir = tempfile::tempdir()?;
    for (d, level) in [(Durability::Full, 2), (Durability::Relaxed, 1)] {
        let archive = Archive::open(dir.path().join(format!("{level}.db")), d)?;
        let conn = archive.conn()?;
        let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
        let fk: i64 = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
        assert_eq!((sync, fk), (level, 1));
        // A pooled connection waits for another's write lock (its busy
        // handler retries every millisecond) instead of failing at once.
        let holder = rusqlite::Connection::open(archive.path())?;
        holder.execute_batch("BEGIN IMMEDIATE")?;
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            holder.execute_batch("COMMIT")
        });
        conn.execute_batch("BEGIN IMMEDIATE; COMMIT")?;
        release.join().expect("holder thread")?;
    }
    Ok(())
}

#[test]
fn the_append_only_tables_refuse_updates() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut s = archive.create_session(&new_session("s"))?;
    s.append_entry(msg("a", None))?;
    s.set_leaf_id(None)?;
    let conn = archive.conn()?;
    assert!(conn.execute("UPDATE entries SET json = '{}'", []).is_err());
    assert!(conn
        .execute("UPDATE leaf_events SET target_id = 'x'", [])
        .is_err());
    Ok(())
}

#[test]
fn one_writer_per_session_and_readers_need_no_claim() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut writer = archive.create_session(&new_session("s"))?;
    writer.append_entry(msg("a", None))?;
    let mut second = archive.open_session("s")?;
    assert_eq!(second.entry_count()?, 1, "readers read without a claim");
    let err = second
        .append_entry(msg("b", Some("a")))
        .expect_err("second writer");
    assert_eq!(err.code(), ErrorCode::Storage);
    assert!(
        err.to_string()
            .contains("session s is already open for writing by process"),
        "{err}"
    );
    assert_eq!(writer.entry_count()?, 1, "nothing was written");
    drop(writer);
    second.append_entry(msg("b", Some("a")))?;
    assert_eq!(second.entry_count()?, 2);
    Ok(())
}

#[test]
fn dead_or_expired_claims_are_taken_over() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    drop(archive.create_session(&new_session("s"))?);
    let host = sessiontree::backend::sqlite::internals::host_name();
    let far_future = chrono::Utc::now().timestamp_millis() + 3_600_000;
    let set_claim = |host: &str, pid: i64, expires: i64| -> R {
        archive.conn()?.execute(
            "INSERT OR REPLACE INTO writer_claims (session_key, token, host, pid, expires_ms)
             SELECT session_key, 'other', ?1, ?2, ?3 FROM sessions WHERE id = 's'",
            rusqlite::params![host, pid, expires],
        )?;
        Ok(())
    };
    // A holder on this host whose process is gone: taken over at once.
    set_claim(&host, 999_999_999, far_future)?;
    let mut s: SqliteStorage = archive.open_session("s")?;
    s.claim_writer()?;
    drop(s);
    // A live holder elsewhere: refused until its lease expires, naming the
    // holder and the command that clears its claim.
    let in_lease = chrono::Utc::now().timestamp_millis() + 20_000;
    set_claim("another-host", 1, in_lease)?;
    let mut s = archive.open_session("s")?;
    let err = s.claim_writer().expect_err("held elsewhere");
    assert!(err.to_string().contains("another-host"), "{err}");
    assert!(err.to_string().contains("`sessiontree unclaim s`"), "{err}");
    set_claim("another-host", 1, 0)?;
    s.claim_writer()?;
    drop(s);
    // A claim set further ahead than a live writer sets one (a host whose
    // clock runs an hour, or a year, ahead) blocks nothing: it is stale.
    for ahead in [3_600_000, 365 * 86_400_000] {
        set_claim(
            "clock-ahead-host",
            1,
            chrono::Utc::now().timestamp_millis() + ahead,
        )?;
        let mut s = archive.open_session("s")?;
        s.claim_writer()?;
    }
    Ok(())
}

#[test]
fn unclaim_clears_a_stale_claim_and_refuses_a_running_holder_here() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("a.db");
    let archive = Archive::open(&db, Durability::Relaxed)?;
    drop(archive.create_session(&new_session("s"))?);
    let set_claim = |host: &str, pid: i64| -> R {
        archive.conn()?.execute(
            "INSERT OR REPLACE INTO writer_claims (session_key, token, host, pid, expires_ms)
             SELECT session_key, 'tok', ?1, ?2, ?3 FROM sessions WHERE id = 's'",
            rusqlite::params![host, pid, chrono::Utc::now().timestamp_millis() + 25_000],
        )?;
        Ok(())
    };
    let unclaim = |extra: &[&str]| {
        let mut args = vec!["--db", db.to_str().unwrap(), "unclaim", "s"];
        args.extend_from_slice(extra);
        let out = support::run_cli(&args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    // A holder on another machine, in its lease: cleared, naming it.
    set_claim("killed-host", 4242)?;
    let (code, text) = unclaim(&[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("process 4242 on killed-host"), "{text}");
    archive.open_session("s")?.claim_writer()?;
    // Nothing to clear: said so, exit 0.
    let (code, text) = unclaim(&[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("no writer claim"), "{text}");
    // A running process on this host (this test): refused unless --force.
    let host = sessiontree::backend::sqlite::internals::host_name();
    set_claim(&host, i64::from(std::process::id()))?;
    let (code, text) = unclaim(&[]);
    assert_eq!(code, Some(7), "{text}");
    assert!(
        text.contains(&format!("process {}", std::process::id())),
        "{text}"
    );
    assert!(text.contains("--force"), "{text}");
    let (code, text) = unclaim(&["--force"]);
    assert_eq!(code, Some(0), "{text}");
    let left: i64 = archive
        .conn()?
        .query_row("SELECT count(*) FROM writer_claims", [], |r| r.get(0))?;
    assert_eq!(left, 0);
    Ok(())
}

/// A session with a main path `depth` entries deep that crosses `forks`
/// fork points (a side entry hangs off the main path before it continues),
/// and a compaction 5 entries above the tip keeping 20 entries before it.
fn deep_session(
    archive: &Archive,
    id: &str,
    depth: usize,
    forks: usize,
) -> Result<SqliteStorage, Box<dyn std::error::Error>> {
    let every = (depth / (forks + 1)).max(1);
    let mut entries = Vec::with_capacity(depth + forks + 1);
    let mut parent: Option<String> = None;
    let mut made = 0;
    for i in 0..depth {
        if i > 0 && i % every == 0 && made < forks {
            entries.push(Ok(msg(&format!("side{i}"), parent.as_deref())));
            made += 1;
        }
        let id = format!("m{i}");
        let e = if i + 5 == depth {
            Entry::from_value(
                &json!({"type":"compaction","id":id,"parentId":parent,"timestamp":"t","summary":"s","tokensBefore":1,"firstKeptEntryId":format!("m{}", i.saturating_sub(20))}),
            )?
        } else {
            msg(&id, parent.as_deref())
        };
        entries.push(Ok(e));
        parent = Some(id);
    }
    archive.create_session_with(&new_session(id), entries)?;
    Ok(archive.open_session(id)?)
}

fn path_cost(s: &SqliteStorage, id: &str) -> Result<(usize, ReadCost), Box<dyn std::error::Error>> {
    let path = s.path_to_root_or_compaction(Some(id))?;
    Ok((path.len(), s.last_read_cost()))
}

fn rows_written(
    archive: &Archive,
    f: impl FnOnce() -> sessiontree::Result<()>,
) -> Result<u64, Box<dyn std::error::Error>> {
    let count = || -> Result<i64, Box<dyn std::error::Error>> {
        let conn = archive.conn()?;
        let mut total = 0;
        for t in [
            "entries",
            "segments",
            "segment_ancestry",
            "leaf_events",
            "labels",
            "compactions",
            // One row per indexed text (the index itself keeps no rows).
            "message_text_docsize",
        ] {
            let n: i64 = conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))?;
            total += n;
        }
        Ok(total)
    };
    let before = count()?;
    f()?;
    Ok(u64::try_from(count()? - before)?)
}

/// The counted costs behind the branch cache tables of docs/engine.md.
#[test]
fn costs_follow_the_answer_not_the_history() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut rows = Vec::new();
    for (depth, forks) in [(10usize, 0usize), (1_000, 100), (100_000, 1_000)] {
        let mut s = deep_session(&archive, &format!("d{depth}"), depth, forks)?;
        // Path from the tip: cut by the compaction, 26 entries whatever the depth.
        let tip = format!("m{}", depth - 1);
        let (len_tip, cost_tip) = path_cost(&s, &tip)?;
        // Path from just below the compaction: the whole main path to the root.
        let below = format!("m{}", depth - 6);
        let (len_full, cost_full) = path_cost(&s, &below)?;
        assert_eq!(len_full, depth - 5);
        assert!(
            cost_tip.statements <= 5 && cost_full.statements <= 5,
            "{cost_tip:?} {cost_full:?}"
        );
        // Rows touched: the returned entries plus one ancestry row per fork they
        // span (the VM runs a small constant number of steps per row it reads).
        let bound = |len: usize, forks: usize| 16 * (len as u64 + forks as u64 + 4);
        assert!(
            cost_full.vm_steps <= bound(len_full, forks),
            "depth {depth}: {cost_full:?}"
        );
        assert!(
            cost_tip.vm_steps <= bound(len_tip, 1),
            "depth {depth}: {cost_tip:?}"
        );
        // A leaf move writes an entry and a leaf event (and maybe starts a segment).
        let target = format!("m{}", depth / 2);
        let moved = rows_written(&archive, || s.set_leaf_id(Some(&target)))?;
        assert!(moved <= 4, "leaf move wrote {moved} rows at depth {depth}");
        // Appending after the move forks: one ancestry row per fork on the path, no more.
        let forked = rows_written(&archive, || {
            s.append_entry(msg("after-move", Some(&target)))
        })?;
        assert!(
            forked as usize <= 5 + forks + 1,
            "fork append wrote {forked} rows at depth {depth}"
        );
        let appended = rows_written(&archive, || s.append_entry(msg("next", Some("after-move"))))?;
        assert!(
            appended <= 3,
            "append wrote {appended} rows at depth {depth}"
        );
        rows.push((
            depth, forks, len_tip, cost_tip, len_full, cost_full, moved, forked, appended,
        ));
    }
    // Cut paths cost the same at every depth: what the answer costs.
    let tip_steps: Vec<u64> = rows.iter().map(|r| r.3.vm_steps).collect();
    assert!(
        tip_steps.iter().max() <= Some(&(tip_steps[0] * 3 + 200)),
        "{tip_steps:?}"
    );
    for r in &rows {
        eprintln!(
            "depth {:>6} forks {:>5}: cut path {:>3} rows {:?}; full path {:>6} rows {:?}; leaf move {} rows, fork append {} rows, append {} rows",
            r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8
        );
    }
    Ok(())
}

#[test]
fn hot_queries_use_indexes() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let conn = archive.conn()?;
    let plan = |sql: &str| -> Result<String, Box<dyn std::error::Error>> {
        let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
        let unbound = vec![rusqlite::types::Null; st.parameter_count()];
        let rows: Vec<String> = st
            .query_map(rusqlite::params_from_iter(unbound), |r| r.get(3))?
            .collect::<Result<_, _>>()?;
        Ok(rows.join(" | "))
    };
    let checks = [
        (
            "SELECT leaf_id, name, entry_count FROM sessions WHERE session_key = 1",
            "INTEGER PRIMARY KEY",
        ),
        (
            "SELECT json FROM entries WHERE session_key = 1 AND id = 'x'",
            "entries_by_id",
        ),
        (
            "SELECT json FROM entries WHERE session_key = 1 AND type = 'x' AND type <> 'message' ORDER BY seq",
            "entries_by_type",
        ),
        (
            "SELECT json FROM entries WHERE session_key = 1 AND seq >= 5 ORDER BY seq LIMIT 10",
            "entries_by_seq",
        ),
        (
            "SELECT label FROM labels WHERE session_key = 1 AND target_id = 'x'",
            "PRIMARY KEY",
        ),
        (
            "SELECT max(entry_key) FROM compactions WHERE entry_key BETWEEN 1 AND 9",
            "INTEGER PRIMARY KEY",
        ),
        (PATH_QUERY, "INTEGER PRIMARY KEY"),
        (PATH_RANGES_QUERY, "INTEGER PRIMARY KEY"),
        (
            "SELECT entry_key, type, json FROM entries WHERE entry_key BETWEEN 1 AND 9 ORDER BY entry_key",
            "INTEGER PRIMARY KEY",
        ),
        (SEGMENT_HOLDING_QUERY, "INTEGER PRIMARY KEY"),
    ];
    for (sql, wanted) in checks {
        let p = plan(sql)?;
        assert!(p.contains(wanted), "{sql}\n  plan: {p}");
        assert!(
            !p.contains("SCAN e") && !p.contains("SCAN entries") && !p.contains("TEMP B-TREE"),
            "{sql}\n  plan: {p}"
        );
    }
    Ok(())
}

/// Turns an archive of the latest schema back into what a version-4 build
/// wrote (the quadratic v1 ancestry, no positions or jump pointers).
fn downgrade_to_version_4(db: &std::path::Path) -> R {
    downgrade_to_version_5(db)?;
    let conn = rusqlite::Connection::open(db)?;
    conn.execute_batch(
        "DELETE FROM segment_ancestry;
         WITH RECURSIVE up (seg, ancestor, from_depth, to_depth, parent) AS (
             SELECT segment_id, segment_id, first_depth, 4294967295, parent_segment FROM segments
             UNION ALL
             SELECT up.seg, p.segment_id, p.first_depth, up.from_depth - 1, p.parent_segment
             FROM up JOIN segments p ON p.segment_id = up.parent
         )
         INSERT INTO segment_ancestry SELECT seg, from_depth, ancestor, to_depth FROM up;
         ALTER TABLE segments DROP COLUMN jump_segment;
         ALTER TABLE segments DROP COLUMN position;
         PRAGMA user_version = 4;",
    )?;
    Ok(())
}

/// An archive written before schema version 4 (statistics summed from costs
/// read one ulp off, labels and names stored as plain text) reports pi's
/// answers once the migration has run.
#[test]
fn migration_4_recomputes_stats_and_keeps_labels() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("old.db");
    let costs = [
        "0.011844299999999999",
        "0.026755499999999998",
        "0.037346700000000004",
    ];
    let mut pi_total = 0.0_f64;
    {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        let mut w = archive.create_session(&new_session("s-old"))?;
        let mut parent: Option<String> = None;
        for (i, c) in costs.iter().enumerate() {
            let id = format!("a{i}");
            let text = format!(
                r#"{{"type":"message","id":"{id}","parentId":{},"timestamp":"2025-01-01T00:00:00.000Z","message":{{"role":"assistant","content":[],"usage":{{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"cost":{{"total":{c}}}}}}}}}"#,
                parent
                    .as_ref()
                    .map_or("null".to_owned(), |p| format!("{p:?}"))
            );
            w.append_entry(Entry::from_json(&text)?)?;
            pi_total += c.parse::<f64>()?;
            parent = Some(id);
        }
        w.append_entry(Entry::from_json(
            r#"{"type":"label","id":"l","parentId":"a2","timestamp":"t","targetId":"a0","label":" star "}"#,
        )?)?;
        w.append_entry(Entry::from_json(
            r#"{"type":"session_info","id":"n","parentId":"l","timestamp":"t","name":"Old name"}"#,
        )?)?;
    }
    // What a version-3 build left behind.
    {
        downgrade_to_version_4(&db)?;
        let conn = rusqlite::Connection::open(&db)?;
        // A stale total, as summed from mis-read costs.
        let wrong = pi_total + 1e-17;
        assert_ne!(wrong.to_bits(), pi_total.to_bits());
        conn.execute_batch(&format!(
            "UPDATE sessions SET cost_total = {wrong:?}, name = 'Old name';
             UPDATE labels SET label = 'star';
             PRAGMA user_version = 3;"
        ))?;
    }
    let archive = Archive::open(&db, Durability::Relaxed)?;
    assert_eq!(
        sessiontree::backend::sqlite::current_version(&rusqlite::Connection::open(&db)?)?,
        latest_version()
    );
    let s = archive.open_session("s-old")?;
    assert_eq!(s.session_stats()?.cost_total.to_bits(), pi_total.to_bits());
    assert_eq!(
        s.label("a0")?.map(|l| l.to_string_lossy()).as_deref(),
        Some("star")
    );
    assert_eq!(
        s.session_name()?.map(|n| n.to_string_lossy()).as_deref(),
        Some("Old name")
    );
    let listed = archive.list(&Default::default())?;
    assert_eq!(listed[0].stats.cost_total.to_bits(), pi_total.to_bits());
    assert_eq!(archive.check(Some("s-old"))?, Vec::<String>::new());
    Ok(())
}

fn leaf(id: &str, parent: &str, target: &str) -> Entry {
    Entry::from_value(&json!({"type":"leaf","id":id,"parentId":parent,"timestamp":"2025-01-01T00:00:00.000Z","targetId":target}))
        .expect("leaf entry")
}

fn compaction(id: &str, parent: &str, first_kept: &str) -> Entry {
    Entry::from_value(&json!({"type":"compaction","id":id,"parentId":parent,"timestamp":"t","summary":"s","tokensBefore":1,"firstKeptEntryId":first_kept}))
        .expect("compaction entry")
}

/// Adversarial shapes for the counting tests, each with `forks` forks on the
/// active path; returns the entries and the id of the tip.
#[derive(Debug, Clone, Copy)]
enum Adversary {
    /// "Regenerate the last reply" again and again: user, reply, leaf back to
    /// the user message, a new reply that the conversation goes on from.
    Regenerate,
    /// A spine with a dead-end side entry at every spine entry.
    Caterpillar,
    /// `forks` sibling replies to one message, the last one continued.
    Broom,
}

fn adversarial_entries(shape: Adversary, forks: usize) -> (Vec<Entry>, String) {
    let mut out = Vec::new();
    let mut tip = "root".to_owned();
    out.push(msg("root", None));
    for k in 0..forks {
        match shape {
            Adversary::Regenerate => {
                let (u, a, l, b) = (
                    format!("u{k}"),
                    format!("a{k}"),
                    format!("l{k}"),
                    format!("b{k}"),
                );
                out.push(msg(&u, Some(&tip)));
                out.push(msg(&a, Some(&u)));
                out.push(leaf(&l, &a, &u));
                out.push(msg(&b, Some(&u)));
                tip = b;
            }
            Adversary::Caterpillar => {
                let (s, x, l) = (format!("s{k}"), format!("x{k}"), format!("l{k}"));
                out.push(msg(&s, Some(&tip)));
                out.push(msg(&x, Some(&s)));
                out.push(leaf(&l, &x, &s));
                tip = s;
            }
            Adversary::Broom => {
                // Every bristle hangs from the root; the leaf returns there first.
                let (b, l) = (format!("b{k}"), format!("l{k}"));
                if k > 0 {
                    out.push(leaf(&l, &format!("b{}", k - 1), "root"));
                }
                out.push(msg(&b, Some("root")));
                tip = b;
            }
        }
    }
    (out, tip)
}

/// Segments on the path of the entry `id`, and the segment of each path
/// entry (read through the keys, not the cache).
fn segment_of(
    archive: &Archive,
    session: &str,
    id: &str,
) -> Result<i64, Box<dyn std::error::Error>> {
    let conn = archive.conn()?;
    let key: i64 = conn.query_row(
        "SELECT e.entry_key FROM entries e JOIN sessions s USING (session_key) WHERE s.id = ?1 AND e.id = ?2",
        [session, id],
        |r| r.get(0),
    )?;
    Ok(key >> 32)
}

/// Runs the jump-pointer search and counts its VM steps.
fn holding_steps(
    archive: &Archive,
    from: i64,
    depth: i64,
) -> Result<(Option<i64>, u64), Box<dyn std::error::Error>> {
    let conn = archive.conn()?;
    let mut st = conn.prepare(SEGMENT_HOLDING_QUERY)?;
    let found: Option<i64> = {
        let mut rows = st.query([from, depth])?;
        match rows.next()? {
            Some(r) => Some(r.get(0)?),
            None => None,
        }
    };
    Ok((
        found,
        st.get_status(rusqlite::StatementStatus::VmStep) as u64,
    ))
}

/// The bounds stated at the top of `branch_cache.rs`, counted on the shapes
/// that broke the first cache: every fork on the active path (regenerate),
/// a fork at every entry of it (caterpillar), and a broom.
#[test]
fn cache_costs_are_bounded_for_every_shape() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut report = Vec::new();
    for shape in [
        Adversary::Regenerate,
        Adversary::Caterpillar,
        Adversary::Broom,
    ] {
        let mut steps_per_row = Vec::new();
        for forks in [10usize, 1_000, 25_000] {
            let id = format!("{shape:?}-{forks}");
            let (entries, tip) = adversarial_entries(shape, forks);
            let n = entries.len();
            archive.create_session_with(&new_session(&id), entries.into_iter().map(Ok))?;
            let mut s = archive.open_session(&id)?;
            // Space: one segment per fork (plus the root) and a bounded block of
            // ancestry rows each, whatever the shape.
            let size = archive.cache_sizes(Some(&id))?[0].1;
            assert_eq!(size.entries as usize, n);
            assert!(
                size.segments as usize <= forks + 1
                    && size.ancestry <= ANCESTRY_BLOCK * size.segments
                    && size.compactions == 0,
                "{shape:?} F={forks}: {size:?}"
            );
            // Path read from the tip: five statements, VM work in proportion
            // to the answer (every segment read contributes an entry to it).
            let (len, cost) = path_cost(&s, &tip)?;
            assert!(cost.statements <= 5, "{shape:?} F={forks}: {cost:?}");
            assert_eq!(cost.rows as usize, len);
            assert!(
                cost.vm_steps <= 64 * (len as u64 + 4),
                "{shape:?} F={forks}: {len} rows, {cost:?}"
            );
            steps_per_row.push(cost.vm_steps as f64 / len as f64);
            // The jump-pointer search finds the segment holding any depth in
            // O(log F) steps, and finds the right one.
            let tip_segment = segment_of(&archive, &id, &tip)?;
            let path = s.path_to_root_or_compaction(Some(&tip))?;
            let mut worst_search = 0;
            for d in [0, len / 7, len / 3, len / 2, len - 1] {
                let (found, steps) = holding_steps(&archive, tip_segment, d as i64)?;
                assert_eq!(
                    found,
                    Some(segment_of(&archive, &id, path[d].id())?),
                    "{shape:?} F={forks} depth {d}"
                );
                worst_search = worst_search.max(steps);
            }
            let log_f = (forks as f64).log2().ceil() as u64 + 1;
            assert!(
                worst_search <= 100 * (log_f + 1),
                "{shape:?} F={forks}: the depth search took {worst_search} VM steps"
            );
            // Writes: an append, a leaf move and the fork after it each write
            // a bounded number of rows at any F (an entry, a leaf event or a
            // segment, a search row).
            // (On the caterpillar the tip already has its side entry: the
            // append there is a fork too.)
            let at_tip = rows_written(&archive, || s.append_entry(msg("next", Some(&tip))))?;
            let appended = rows_written(&archive, || s.append_entry(msg("next2", Some("next"))))?;
            let target = path[len / 2].id().to_owned();
            let moved = rows_written(&archive, || s.set_leaf_id(Some(&target)))?;
            let forked = rows_written(&archive, || {
                s.append_entry(msg("after-move", Some(&target)))
            })?;
            // A compaction whose kept entry is far up the path: its stop is
            // resolved by the jump-pointer search, and the path cut there.
            let kept = path[1].id().to_owned();
            let compacted = rows_written(&archive, || {
                s.append_entry(compaction("c", "after-move", &kept))
            })?;
            assert!(
                at_tip <= 3 + ANCESTRY_BLOCK as u64
                    && appended <= 3
                    && moved <= 2
                    && forked <= 3 + ANCESTRY_BLOCK as u64
                    && compacted <= 3,
                "{shape:?} F={forks}: append {appended}, move {moved}, fork {forked}, compaction {compacted}"
            );
            let cut = s.path_to_root_or_compaction(Some("c"))?;
            assert_eq!(cut.first().map(|e| e.id()), Some(kept.as_str()));
            // path[1..=len/2], the entry after the move, and the compaction.
            assert_eq!(cut.len(), len / 2 + 2);
            assert_eq!(archive.check(Some(&id))?, Vec::<String>::new());
            report.push(format!(
                "{shape:?} F={forks}: {n} entries, {} segments + {} ancestry rows; tip path {len} rows {cost:?}; depth search ≤ {worst_search} steps; writes: append {appended}, move {moved}, fork {forked}",
                size.segments,
                size.ancestry
            ));
        }
        // Work per returned row does not grow with the number of forks.
        assert!(
            steps_per_row[2] <= steps_per_row[0] * 1.5 + 2.0,
            "{shape:?}: VM steps per row {steps_per_row:?}"
        );
    }
    for line in report {
        eprintln!("{line}");
    }
    Ok(())
}

/// An archive whose branch cache is version 1 (what builds before schema 5
/// wrote) migrates in place: every path reads the same, `check` passes, the
/// ancestry table keeps the nearest segments only, and the rewrite reports
/// its progress.
#[test]
fn migration_5_rebuilds_the_branch_cache_in_place() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("v4.db");
    let mut before = Vec::new();
    {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        for (i, shape) in [
            Adversary::Regenerate,
            Adversary::Caterpillar,
            Adversary::Broom,
        ]
        .into_iter()
        .enumerate()
        {
            let id = format!("s{i}");
            let (mut entries, tip) = adversarial_entries(shape, 300);
            entries.push(compaction("c", &tip, "root"));
            entries.push(msg("after", Some("c")));
            archive.create_session_with(&new_session(&id), entries.into_iter().map(Ok))?;
            let s = archive.open_session(&id)?;
            for e in s.entries(0, None)? {
                let path = s.path_to_root_or_compaction(Some(e.id()))?;
                before.push((id.clone(), e.id().to_owned(), jsons(&path)));
            }
        }
        downgrade_to_version_4(&db)?;
        let conn = rusqlite::Connection::open(&db)?;
        let v1_rows: i64 =
            conn.query_row("SELECT count(*) FROM segment_ancestry", [], |r| r.get(0))?;
        assert!(
            v1_rows > 40_000,
            "the v1 cache is quadratic on these shapes: {v1_rows} rows"
        );
    }
    let mut heard = Vec::new();
    let archive = Archive::open_with_progress(&db, Durability::Relaxed, &mut |p| heard.push(p))?;
    let segments: i64 = archive
        .conn()?
        .query_row("SELECT count(*) FROM segments", [], |r| r.get(0))?;
    let last = heard
        .iter()
        .rev()
        .find(|p| p.version == 5)
        .expect("progress of migration 5");
    assert_eq!((last.done, last.total), (segments as u64, segments as u64));
    let (rows, widest): (i64, i64) = archive.conn()?.query_row(
        "SELECT count(*), max(n) FROM (SELECT count(*) AS n FROM segment_ancestry GROUP BY segment_id)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    assert!(
        rows > 0 && widest == ANCESTRY_BLOCK,
        "{rows} blocks, the widest {widest} rows"
    );
    // The quadratic ancestry's pages went back to the file system.
    let (free, pages): (i64, i64) = archive.conn()?.query_row(
        "SELECT (SELECT freelist_count FROM pragma_freelist_count), (SELECT page_count FROM pragma_page_count)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    assert_eq!(free, 0, "{free} of {pages} pages free after the migration");
    assert_eq!(archive.check(None)?, Vec::<String>::new());
    for (session, id, path) in before {
        let s = archive.open_session(&session)?;
        assert_eq!(
            jsons(&s.path_to_root_or_compaction(Some(&id))?),
            path,
            "{session} {id}"
        );
    }
    Ok(())
}

fn jsons(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| e.json().to_owned()).collect()
}

/// `check` compares every cache invariant with a rebuild from the log: a
/// wrong jump pointer, position, nearest compaction or leaf event is named.
#[test]
fn check_finds_every_kind_of_cache_damage() -> R {
    let damage = [
        ("jump pointer", "UPDATE segments SET jump_segment = parent_segment WHERE segment_id = (SELECT max(segment_id) FROM segments WHERE jump_segment <> parent_segment)"),
        ("position", "UPDATE segments SET position = position + 1 WHERE segment_id = (SELECT max(segment_id) FROM segments)"),
        ("nearest compaction", "UPDATE segments SET inherited_compaction = NULL WHERE inherited_compaction IS NOT NULL"),
        ("leaf event", "DELETE FROM leaf_events WHERE seq = (SELECT min(seq) FROM leaf_events)"),
        ("compaction stop", "UPDATE compactions SET stop_key = NULL"),
    ];
    for (what, sql) in damage {
        let dir = tempfile::tempdir()?;
        let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
        let (mut entries, tip) = adversarial_entries(Adversary::Regenerate, 40);
        entries.push(compaction("c", &tip, "u3"));
        // Forks below the compaction inherit it as their nearest compaction.
        let mut spine = "c".to_owned();
        for k in 0..5 {
            let (s, x, l) = (format!("cs{k}"), format!("cx{k}"), format!("cl{k}"));
            entries.push(msg(&s, Some(&spine)));
            entries.push(msg(&x, Some(&s)));
            entries.push(leaf(&l, &x, &s));
            spine = s;
        }
        archive.create_session_with(&new_session("s"), entries.into_iter().map(Ok))?;
        assert_eq!(
            archive.check(None)?,
            Vec::<String>::new(),
            "{what}: before the damage"
        );
        let changed = archive.conn()?.execute(sql, [])?;
        assert!(changed > 0, "{what}: the damage changed nothing");
        let problems = archive.check(None)?;
        assert!(!problems.is_empty(), "{what}: check found nothing");
    }
    Ok(())
}

/// `check` reads a session's entries once and feeds every check from that
/// one pass: damage of three kinds in one session (a search row gone, a
/// segment's position, the maintained message count) is named in one run,
/// each by its own check, and the untouched session beside it stays clean.
#[test]
fn one_check_pass_names_text_cache_and_facts_damage_together() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    for name in ["damaged", "clean"] {
        let (entries, _) = adversarial_entries(Adversary::Regenerate, 40);
        archive.create_session_with(&new_session(name), entries.into_iter().map(Ok))?;
    }
    assert_eq!(archive.check(None)?, Vec::<String>::new());
    let key: i64 = archive.conn()?.query_row(
        "SELECT session_key FROM sessions WHERE id = 'damaged'",
        [],
        |r| r.get(0),
    )?;
    archive.conn()?.execute_batch(&format!(
        "DELETE FROM message_text WHERE rowid = (SELECT max(entry_key) FROM entries
             WHERE session_key = {key} AND role_id IS NOT NULL);
         UPDATE segments SET position = position + 1
             WHERE segment_id = (SELECT max(segment_id) FROM segments WHERE session_key = {key});
         UPDATE sessions SET message_count = message_count + 1 WHERE session_key = {key};"
    ))?;
    let problems = archive.check(None)?;
    for (what, needle) in [
        ("stored text", "its search row is missing"),
        ("branch cache", "its rebuild"),
        ("facts", "differ from a replay"),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("session damaged:") && p.contains(needle)),
            "{what}: {problems:?}"
        );
    }
    assert!(
        !problems.iter().any(|p| p.contains("session clean")),
        "{problems:?}"
    );
    Ok(())
}

/// Damage inside the search index (a page of its inverted index
/// overwritten) is named by `check` and by the incremental check alike:
/// SQLite's page check runs FTS5's own check of the index, so no check
/// needs the write lock to run it again.
#[test]
fn check_names_a_damaged_search_index_without_the_write_lock() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let (entries, _) = adversarial_entries(Adversary::Regenerate, 40);
    archive.create_session_with(&new_session("s"), entries.into_iter().map(Ok))?;
    // Another connection holds the write lock all the while (a writer
    // mid-batch): the check must not need it.
    let holder = rusqlite::Connection::open(archive.path())?;
    holder.execute_batch("BEGIN IMMEDIATE")?;
    let clean = archive.check(None);
    holder.execute_batch("ROLLBACK")?;
    assert_eq!(clean?, Vec::<String>::new());
    let changed = archive.conn()?.execute(
        "UPDATE message_text_data SET block = zeroblob(length(block))
             WHERE id = (SELECT max(id) FROM message_text_data)",
        [],
    )?;
    assert_eq!(changed, 1);
    holder.execute_batch("BEGIN IMMEDIATE")?;
    let full = archive.check(None)?;
    let incremental = archive
        .check_run(None, CheckMode::Incremental, &mut |_, _| {})?
        .findings
        .problems;
    holder.execute_batch("ROLLBACK")?;
    for (which, problems) in [("full", &full), ("incremental", &incremental)] {
        assert!(
            problems.iter().any(|p| p.contains("message_text")),
            "{which}: {problems:?}"
        );
    }
    Ok(())
}

/// A handle decodes a row once: reading the active path again decodes only
/// the rows appended since, and every answer is the same text.
#[test]
fn a_handle_decodes_each_row_of_its_path_once() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut s = deep_session(&archive, "cached", 2_000, 20)?;
    let tip = "m1999";
    let first = s.path_to_root_or_compaction(Some(tip))?;
    assert_eq!(s.last_read_cost().decoded, first.len() as u64);
    let again = s.path_to_root_or_compaction(Some(tip))?;
    assert_eq!(s.last_read_cost().decoded, 0);
    assert_eq!(again, first);
    s.append_entry(msg("next", Some(tip)))?;
    let grown = s.path_to_root_or_compaction(Some("next"))?;
    assert_eq!(s.last_read_cost().decoded, 1);
    assert_eq!(grown[..first.len()], first[..]);
    // A fresh handle starts with nothing decoded, and reads the same text.
    let fresh = archive.open_session("cached")?;
    let cold = fresh.path_to_root_or_compaction(Some("next"))?;
    assert_eq!(fresh.last_read_cost().decoded, cold.len() as u64);
    assert_eq!(cold, grown);
    Ok(())
}

fn message_as(id: &str, parent: Option<&str>, role: &str) -> Entry {
    Entry::from_value(&json!({"type":"message","id":id,"parentId":parent,"timestamp":"t","message":{"role":role,"content":"x"}}))
        .expect("message")
}

fn typed(kind: &str, id: &str, parent: Option<&str>, extra: serde_json::Value) -> Entry {
    let mut v = json!({"type":kind,"id":id,"parentId":parent,"timestamp":"t"});
    for (k, x) in extra.as_object().expect("object") {
        v[k] = x.clone();
    }
    Entry::from_value(&v).expect("entry")
}

/// Where a skeleton's items go.
type SkeletonSink<'a> =
    dyn FnMut(sessiontree::skeleton::SkeletonItem<'_>) -> sessiontree::Result<()> + 'a;

/// A skeleton reduced to what it says: per entry in log order (position, id,
/// parent id, type, user message), and the labelled ids.
type Said = (
    Vec<(usize, String, Option<String>, String, bool)>,
    Vec<String>,
);

/// What `visit` hands out, with parents given by position turned into ids
/// and open roles read through `visit_entries_by_id`.
fn said(
    s: &SqliteStorage,
    visit: &dyn Fn(&mut SkeletonSink<'_>) -> sessiontree::Result<()>,
) -> Result<Said, Box<dyn std::error::Error>> {
    use sessiontree::skeleton::{SkeletonItem, SkeletonParent};
    let mut rows = Vec::new();
    let mut labels = std::collections::BTreeMap::new();
    visit(&mut |item| {
        match item {
            SkeletonItem::Entry(e) => rows.push((
                e.pos,
                e.id.to_owned(),
                match e.parent {
                    SkeletonParent::None => Err(None),
                    SkeletonParent::Id(p) => Err(Some(p.to_owned())),
                    SkeletonParent::At(p) => Ok(p),
                },
                e.entry_type.to_owned(),
                e.user,
            )),
            SkeletonItem::Label { target, set } => {
                labels.insert(target.to_owned(), set);
            }
        }
        Ok(())
    })?;
    rows.sort();
    let at: std::collections::HashMap<usize, String> =
        rows.iter().map(|r| (r.0, r.1.clone())).collect();
    let open: Vec<&str> = rows
        .iter()
        .filter(|r| r.4.is_none())
        .map(|r| r.1.as_str())
        .collect();
    let mut users = std::collections::HashMap::new();
    s.visit_entries_by_id(&open, &mut |i, e| {
        users.insert(open[i].to_owned(), e.facts().is_user_message());
        Ok(())
    })?;
    assert_eq!(users.len(), open.len(), "every open role read");
    let entries = rows
        .iter()
        .map(|(pos, id, parent, ty, user)| {
            let parent = match parent {
                Ok(p) => Some(at[p].clone()),
                Err(p) => p.clone(),
            };
            let user = user.unwrap_or_else(|| users[id]);
            (*pos, id.clone(), parent, ty.clone(), user)
        })
        .collect();
    let labelled = labels
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(t, _)| t)
        .collect();
    Ok((entries, labelled))
}

/// The archive hands out a session's skeleton from its indexes (no text
/// decoded); it says exactly what the skeleton built from the log says, on
/// every adversarial shape, with dangling roots, several roots, labels set,
/// cleared, set before their target exists and on missing entries.
#[test]
fn the_archive_skeleton_matches_the_one_read_from_the_log() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut cases: Vec<(String, Vec<Entry>)> = Vec::new();
    for shape in [
        Adversary::Regenerate,
        Adversary::Caterpillar,
        Adversary::Broom,
    ] {
        cases.push((format!("{shape:?}"), adversarial_entries(shape, 40).0));
    }
    let label = |id: &str, parent: &str, target: &str, text: &str| {
        typed(
            "label",
            id,
            Some(parent),
            json!({"targetId": target, "label": text}),
        )
    };
    cases.push((
        "mixed".into(),
        vec![
            message_as("r", Some("gone"), "user"),
            label("l1", "r", "a", "later"),
            message_as("a", Some("l1"), "assistant"),
            message_as("b", Some("a"), "toolResult"),
            typed(
                "compaction",
                "c",
                Some("b"),
                json!({"summary":"s","tokensBefore":1,"firstKeptEntryId":"b"}),
            ),
            typed(
                "branch_summary",
                "bs",
                Some("a"),
                json!({"fromId":"a","summary":"s"}),
            ),
            label("l2", "bs", "b", "kept"),
            label("l3", "l2", "a", "  "),
            label("l4", "l3", "nobody", "ghost"),
            message_as("r2", None, "user"),
            typed("custom", "cu", Some("r2"), json!({"customType":"x"})),
            message_as("u", Some("cu"), "user"),
            leaf("lf", "u", "c"),
            typed(
                "model_change",
                "m",
                Some("c"),
                json!({"provider":"p","modelId":"m"}),
            ),
            label("l5", "m", "c", "x"),
            label("l6", "l5", "c", ""),
        ],
    ));
    for (name, entries) in &cases {
        let mut s = archive.create_session(&new_session(name))?;
        s.append_entries(entries)?;
        let own = said(&s, &|sink| s.visit_skeleton(sink))?;
        let from_log = said(&s, &|sink| {
            sessiontree::skeleton::from_pages(|start, limit| s.entries(start, Some(limit)), sink)
        })?;
        assert_eq!(own.0.len(), entries.len(), "{name}: every entry once");
        assert_eq!(own, from_log, "{name}");
    }
    Ok(())
}

/// A handle keeps the paths it read (`path_memo.rs`): reading one again runs
/// no path query, the path of an entry appended below a kept one is that path
/// plus the new row, a compaction appended there is read by the query (its
/// stop differs), every answer equals a fresh handle's, and once the session
/// is deleted a kept path is never handed out again.
#[test]
fn a_handle_keeps_the_paths_it_read_exactly() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut s = deep_session(&archive, "kept", 2_000, 20)?;
    let tip = "m1999";
    let first = s.path_to_root_or_compaction(Some(tip))?;
    let queried = s.last_read_cost();
    assert!(queried.statements >= 4 && queried.rows == first.len() as u64);
    let again = s.path_to_root_or_compaction(Some(tip))?;
    assert_eq!(again, first);
    assert_eq!(
        (s.last_read_cost().statements, s.last_read_cost().rows),
        (1, 0)
    );

    s.append_entry(msg("next", Some(tip)))?;
    let grown = s.path_to_root_or_compaction(Some("next"))?;
    let cost = s.last_read_cost();
    assert_eq!((cost.statements, cost.rows, cost.decoded), (2, 0, 1));
    assert_eq!(grown[..first.len()], first[..]);
    assert_eq!(grown.last().map(Entry::id), Some("next"));
    let fresh = archive.open_session("kept")?;
    assert_eq!(fresh.path_to_root_or_compaction(Some("next"))?, grown);

    let cut = Entry::from_value(&json!({"type":"compaction","id":"cut","parentId":"next",
        "timestamp":"t","summary":"s","tokensBefore":1,"firstKeptEntryId":"m1990"}))?;
    s.append_entry(cut)?;
    let from_cut = s.path_to_root_or_compaction(Some("cut"))?;
    assert!(
        s.last_read_cost().rows > 0,
        "a compaction's path is read by the query"
    );
    assert_eq!(from_cut, fresh.path_to_root_or_compaction(Some("cut"))?);
    assert_eq!(from_cut.last().map(Entry::id), Some("cut"));
    s.append_entry(msg("after", Some("cut")))?;
    assert_eq!(
        s.path_to_root_or_compaction(Some("after"))?,
        fresh.path_to_root_or_compaction(Some("after"))?
    );
    drop(fresh);

    // Deleted, and its key taken by a session holding an entry of the same id.
    drop(s.path_to_root_or_compaction(Some(tip))?);
    let reader = archive.open_session("kept")?;
    drop(reader.path_to_root_or_compaction(Some(tip))?);
    drop(s);
    archive.delete_session("kept")?;
    archive.create_session_with(&new_session("other"), vec![Ok(msg(tip, None))])?;
    let e = reader
        .path_to_root_or_compaction(Some(tip))
        .expect_err("a deleted session's kept path is not handed out");
    assert_eq!(e.code(), ErrorCode::NotFound);
    Ok(())
}

fn user_says(id: &str, parent: Option<&str>, text: &str) -> Entry {
    Entry::from_value(&json!({"type":"message","id":id,"parentId":parent,"timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":text}}))
        .expect("entry")
}

/// A whole-archive search finds its candidates from the index alone, and
/// joins each candidate's session only under a filter or while an import is
/// staged: both ways give the same answers, and a staged (unpublished)
/// session's messages are never among them.
#[test]
fn a_search_answers_alike_with_and_without_a_staged_import() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    for (s, words) in [("s1", "zebra crossing"), ("s2", "a zebra and a zebu")] {
        let mut w = archive.create_session(&new_session(s))?;
        w.append_entry(user_says("a", None, words))?;
        w.append_entry(user_says("b", Some("a"), "nothing striped"))?;
        w.append_entry(user_says("c", Some("b"), &format!("{words} again, zebra")))?;
    }
    let answers =
        |archive: &Archive, session: Option<&str>| -> Result<Vec<_>, sessiontree::Error> {
            Ok(archive
                .search("zebra", session, None, None, 100)?
                .into_iter()
                // Ranks move a little while an import is staged (its tokens count
                // in FTS5's totals); the hits and their order do not.
                .map(|h| (h.session_id, h.entry_id, h.snippet))
                .collect::<Vec<_>>())
        };
    let published = answers(&archive, None)?;
    assert_eq!(published.len(), 4, "{published:?}");
    let in_s2 = answers(&archive, Some("s2"))?;
    assert_eq!(
        in_s2,
        published
            .iter()
            .filter(|h| h.0 == "s2")
            .cloned()
            .collect::<Vec<_>>()
    );

    // An import left staged (its writer never published it).
    archive.write_session(|w| {
        w.begin_staged(&new_session("staged"), "/nowhere/staged.jsonl")?;
        w.push(&user_says("a", None, "zebra zebra zebra"))?;
        Ok(())
    })?;
    let staged: i64 = archive.conn()?.query_row(
        "SELECT count(*) FROM sessions WHERE staged_from IS NOT NULL",
        [],
        |r| r.get(0),
    )?;
    assert_eq!(staged, 1);
    assert_eq!(
        answers(&archive, None)?,
        published,
        "the staged session stays invisible"
    );
    assert_eq!(answers(&archive, Some("s2"))?, in_s2);
    Ok(())
}

/// An import's writer indexes the search text it holds while it waits for
/// entries (`index_held_text`), part-way through a session and with ended
/// sessions' text held: searches answer exactly as when all of it is
/// indexed at the commit, and `check` finds nothing.
#[test]
fn search_text_indexed_part_way_through_a_write_answers_as_at_the_commit() -> R {
    let dir = tempfile::tempdir()?;
    let words = ["zebra", "crossing", "zebu", "striped", "again"];
    let text = |s: usize, i: usize| {
        format!(
            "{} {} number {i} of {s}",
            words[(s + i) % words.len()],
            words[(s * 7 + i * 3) % words.len()]
        )
    };
    let write = |name: &str, index_every: Option<usize>| -> Result<Archive, sessiontree::Error> {
        let archive = Archive::open(dir.path().join(name), Durability::Relaxed)?;
        archive.write_session(|w| {
            for s in 0..3 {
                w.begin(&new_session(&format!("s{s}")))?;
                for i in 0..40 {
                    let parent = (i > 0).then(|| format!("e{}", i - 1));
                    w.push(&user_says(&format!("e{i}"), parent.as_deref(), &text(s, i)))?;
                    if index_every.is_some_and(|n| i % n == n - 1) {
                        // Nothing is held back below the floor; all of it at 0.
                        w.index_held_text(usize::MAX)?;
                        w.index_held_text(0)?;
                    }
                }
                w.end_session()?;
            }
            Ok(())
        })?;
        Ok(archive)
    };
    let at_commit = write("commit.db", None)?;
    let part_way = write("part-way.db", Some(7))?;
    let answers = |archive: &Archive, q: &str| -> Result<Vec<_>, sessiontree::Error> {
        Ok(archive
            .search(q, None, None, None, 500)?
            .into_iter()
            .map(|h| (h.session_id, h.entry_id, h.snippet, h.rank.to_bits()))
            .collect::<Vec<_>>())
    };
    for q in words
        .iter()
        .copied()
        .chain(["zebra striped", "number", "of"])
    {
        let expected = answers(&at_commit, q)?;
        assert!(!expected.is_empty(), "{q} finds something");
        assert_eq!(answers(&part_way, q)?, expected, "{q}");
    }
    assert_eq!(part_way.check(None)?, Vec::<String>::new());
    Ok(())
}

/// Tag bit 3 lets readers take an entry's message from the members before
/// it: `check` compares the bit with the full parser's answer, so a body
/// that claims it wrongly is reported, and one that claims it rightly is not.
#[test]
fn check_reports_a_body_that_wrongly_says_its_message_trails() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("a.db");
    let archive = Archive::open(&db, Durability::Relaxed)?;
    let long = "the same words compress well ".repeat(40);
    // pi's member order (a `serde_json::Value` would sort the keys).
    let last = Entry::from_json(&format!(
        r#"{{"type":"message","id":"last","parentId":null,"timestamp":"t","message":{{"role":"user","content":"{long}"}}}}"#
    ))?;
    // A member after the message: never tagged. (An object, so that a
    // reader trusting a wrong bit would cut the message too long.)
    let not_last = Entry::from_json(&format!(
        r#"{{"type":"message","id":"not-last","parentId":"last","timestamp":"t","message":{{"role":"user","content":"{long}"}},"extra":{{"a":1}}}}"#
    ))?;
    archive.create_session_with(&new_session("s"), [Ok(last), Ok(not_last)])?;
    assert_eq!(archive.check(None)?, Vec::<String>::new());
    let tag_of = |id: &str| -> Result<u8, Box<dyn std::error::Error>> {
        let body: Vec<u8> =
            archive
                .conn()?
                .query_row("SELECT json FROM entries WHERE id = ?1", [id], |r| r.get(0))?;
        Ok(body[0])
    };
    assert_eq!(tag_of("last")? & 8, 8, "a trailing message is tagged");
    assert_eq!(tag_of("not-last")? & 8, 0);
    drop(archive);

    // Damage: set the bit on the entry whose message does not trail.
    let raw = rusqlite::Connection::open(&db)?;
    let trigger: String = raw.query_row(
        "SELECT sql FROM sqlite_schema WHERE name = 'entries_are_append_only'",
        [],
        |r| r.get(0),
    )?;
    let mut body: Vec<u8> =
        raw.query_row("SELECT json FROM entries WHERE id = 'not-last'", [], |r| {
            r.get(0)
        })?;
    body[0] |= 8;
    raw.execute_batch("DROP TRIGGER entries_are_append_only")?;
    raw.execute(
        "UPDATE entries SET json = ?1 WHERE id = 'not-last'",
        [&body],
    )?;
    raw.execute_batch(&trigger)?;
    drop(raw);

    let archive = Archive::open(&db, Durability::Relaxed)?;
    let problems = archive.check(None)?;
    assert!(
        problems
            .iter()
            .any(|p| p.contains("entry not-last")
                && p.contains("says its message is its last member")),
        "{problems:?}"
    );
    assert!(
        !problems.iter().any(|p| p.contains("entry last:")),
        "{problems:?}"
    );
    Ok(())
}

/// An archive written before schema version 13 (no `sessions.contract`, no
/// kept lines) learns each session's contract from its entries' types when
/// it opens: `sdk` for a session with a `leaf` entry, `app` for the others.
#[test]
fn migration_13_sets_each_sessions_contract_from_its_entries() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("old.db");
    {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        let mut app = archive.create_session(&NewSession {
            contract: sessiontree::Contract::App,
            ..new_session("app-session")
        })?;
        app.append_entry(msg("a", None))?;
        let mut sdk = archive.create_session(&NewSession {
            contract: sessiontree::Contract::App,
            ..new_session("sdk-session")
        })?;
        sdk.append_entry(msg("a", None))?;
        sdk.append_entry(msg("b", Some("a")))?;
        sdk.set_leaf_id(Some("a"))?;
    }
    // What a version-12 build left: the step's columns and table gone.
    {
        let conn = rusqlite::Connection::open(&db)?;
        conn.execute_batch(
            "DROP TABLE usage_daily; DROP TABLE usage_facts;
             ALTER TABLE sessions DROP COLUMN last_active_ms;
             DROP TABLE kept_lines;
             ALTER TABLE sessions DROP COLUMN contract;
             ALTER TABLE sessions DROP COLUMN open_end;
             DROP TABLE check_marks; DROP TRIGGER check_marks_entry_rewritten; DROP TRIGGER check_marks_entry_removed; DROP TRIGGER check_marks_segment_rewritten; DROP TRIGGER check_marks_segment_removed; DROP TRIGGER check_marks_leaf_event_rewritten; DROP TRIGGER check_marks_leaf_event_removed; DROP TRIGGER check_marks_compaction_rewritten; DROP TRIGGER check_marks_compaction_removed;
             DROP TABLE dead_message_text;
             PRAGMA user_version = 12;",
        )?;
    }
    let archive = Archive::open(&db, Durability::Relaxed)?;
    let contracts: Vec<(String, sessiontree::Contract)> = archive
        .list(&Default::default())?
        .into_iter()
        .map(|s| (s.metadata.id, s.contract))
        .collect();
    assert!(contracts.contains(&("app-session".into(), sessiontree::Contract::App)));
    assert!(contracts.contains(&("sdk-session".into(), sessiontree::Contract::Sdk)));
    assert_eq!(
        archive.open_session("sdk-session")?.contract()?,
        sessiontree::Contract::Sdk
    );
    assert!(archive
        .open_session("app-session")?
        .kept_lines()?
        .is_empty());
    assert!(archive.check_consistency(None)?.is_empty());
    Ok(())
}

/// A session created through the SDK contract is `sdk`; an app session
/// becomes `sdk` when an SDK-only entry is appended to it.
#[test]
fn sdk_only_entries_make_a_session_sdk() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut s = archive.create_session(&NewSession {
        contract: sessiontree::Contract::App,
        ..new_session("s")
    })?;
    s.append_entry(msg("a", None))?;
    assert_eq!(s.contract()?, sessiontree::Contract::App);
    s.set_leaf_id(Some("a"))?;
    assert_eq!(s.contract()?, sessiontree::Contract::Sdk);
    Ok(())
}

/// An archive of pi's real files and the app fixture with `usage` entries,
/// tool-result and summary usage (imported by the binary, as a user would).
fn usage_archive(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let fixtures = support::fixtures_dir()?;
    let db = dir.join("usage.db");
    for source in [fixtures, support::test_fixture("cli/app/h2.jsonl")] {
        let out = support::run_cli([
            "--db",
            db.to_str().expect("utf-8"),
            "import",
            source.to_str().expect("utf-8"),
            "--quiet",
        ]);
        assert!(out.status.success(), "{out:?}");
    }
    Some(db)
}

/// Usage rows summed by (session, model).
fn by_session_model(
    rows: &[sessiontree::usage::UsageRow],
) -> std::collections::BTreeMap<(String, String), (f64, f64)> {
    let mut m = std::collections::BTreeMap::new();
    for r in rows {
        let e = m
            .entry((r.session.clone(), r.model.clone()))
            .or_insert((0.0, 0.0));
        e.0 += r.cost;
        e.1 += r.input + r.output + r.cache_read + r.cache_write;
    }
    m
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The usage facts summed per session are pi 1.6's own figures:
/// `getUsageCostBreakdown` per model and `getSessionStats` tokens and cost.
#[test]
fn usage_facts_equal_pi_16_stats_and_cost_breakdown_per_session() -> R {
    let dir = tempfile::tempdir()?;
    let Some(db) = usage_archive(dir.path()) else {
        eprintln!("skipped: pi's fixture files are not here");
        return Ok(());
    };
    let archive = Archive::open(&db, Durability::Relaxed)?;
    let facts = by_session_model(&archive.usage(&Default::default())?);
    let sessions = archive.list(&Default::default())?;
    assert_eq!(sessions.len(), 3);
    let mut models_seen = 0;
    for s in &sessions {
        let id = &s.metadata.id;
        let app = sessiontree::app::AppSession::open(archive.open_session(id)?)?;
        let mine: Vec<(&String, &(f64, f64))> = facts
            .iter()
            .filter(|((sid, _), _)| sid == id)
            .map(|((_, model), v)| (model, v))
            .collect();
        let breakdown = app.usage_cost_breakdown()?;
        for u in &breakdown {
            let key = u.key.to_string_lossy();
            let (cost, tokens) = facts
                .get(&(id.clone(), key.clone()))
                .unwrap_or_else(|| panic!("{id}: pi has {key}, the facts do not"));
            // A usage member that is not a number (pi concatenates strings
            // into its sums) counts as 0 in the facts: compared where pi's
            // sum stayed a number.
            use sessiontree::app::JsSum;
            if let JsSum::Number(pi_cost) = u.cost {
                assert!(
                    close(*cost, pi_cost),
                    "{id} {key}: {cost} vs pi's {pi_cost}"
                );
            }
            if let JsSum::Number(pi_tokens) = u.tokens {
                assert!(
                    close(*tokens, pi_tokens),
                    "{id} {key}: {tokens} vs pi's {pi_tokens}"
                );
                models_seen += 1;
            }
        }
        // Keys pi leaves out of its breakdown have neither cost nor tokens.
        for (model, (cost, tokens)) in &mine {
            if !breakdown.iter().any(|u| u.key.to_string_lossy() == **model) {
                assert!(
                    *cost == 0.0 && *tokens == 0.0,
                    "{id} {model}: {cost} {tokens}"
                );
            }
        }
        let st = app.session_stats()?;
        let cost: f64 = mine.iter().map(|(_, v)| v.0).sum();
        let tokens: f64 = mine.iter().map(|(_, v)| v.1).sum();
        let t = &st.totals;
        let pi_tokens = t.input.to_number()
            + t.output.to_number()
            + t.cache_read.to_number()
            + t.cache_write.to_number();
        use sessiontree::app::JsSum;
        if let JsSum::Number(pi_cost) = t.cost {
            assert!(close(cost, pi_cost), "{id}: {cost} vs {pi_cost}");
        }
        let numbers = [&t.input, &t.output, &t.cache_read, &t.cache_write]
            .iter()
            .all(|x| matches!(x, JsSum::Number(_)));
        if numbers {
            assert!(close(tokens, pi_tokens), "{id}: {tokens} vs {pi_tokens}");
        }
    }
    assert!(
        models_seen >= 5,
        "the breakdowns hold several keys: {models_seen}"
    );
    assert!(facts.keys().any(|(_, m)| m == "Tools/summaries"));
    // `check` sums the counted facts again and compares each day's row
    // (the archive's hostile session has a parent cycle, which it names).
    let found = archive.check(None)?;
    assert!(!found.iter().any(|p| p.contains("usage")), "{found:?}");
    let changed = archive.conn()?.execute(
        "UPDATE usage_daily SET cost = cost + 0.01
          WHERE (session_key, day, model) = (SELECT session_key, day, model FROM usage_daily LIMIT 1)",
        [],
    )?;
    assert_eq!(changed, 1);
    let problems = archive.check(None)?;
    let usage: Vec<_> = problems.iter().filter(|p| !found.contains(p)).collect();
    assert!(
        usage.len() == 1 && usage[0].contains("its counted facts sum to"),
        "{problems:?}"
    );
    Ok(())
}

/// Schema step 14 fills the usage facts and the last activity of an archive
/// written before it, the same as a fresh import's, forks counted once.
#[test]
fn migration_14_fills_usage_facts_as_an_import_writes_them() -> R {
    let dir = tempfile::tempdir()?;
    let Some(db) = usage_archive(dir.path()) else {
        eprintln!("skipped: pi's fixture files are not here");
        return Ok(());
    };
    let before = Archive::open(&db, Durability::Relaxed)?.usage(&Default::default())?;
    let fork = support::run_cli([
        "--db",
        db.to_str().expect("utf-8"),
        "fork",
        "ffae836b-9420-4060-ac13-7745215f90ff",
    ]);
    assert!(fork.status.success(), "{fork:?}");
    let (fresh_usage, fresh_list) = {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        (
            archive.usage(&Default::default())?,
            archive.list(&Default::default())?,
        )
    };
    assert_eq!(fresh_list.len(), 4);
    let old = dir.path().join("old.db");
    std::fs::copy(&db, &old)?;
    {
        let conn = rusqlite::Connection::open(&old)?;
        conn.execute_batch(
            "PRAGMA wal_checkpoint(TRUNCATE);
             DROP TABLE usage_daily; DROP TRIGGER usage_facts_recount; DROP TABLE usage_facts;
             ALTER TABLE sessions DROP COLUMN last_active_ms;
             DROP TABLE check_marks; DROP TRIGGER check_marks_entry_rewritten; DROP TRIGGER check_marks_entry_removed; DROP TRIGGER check_marks_segment_rewritten; DROP TRIGGER check_marks_segment_removed; DROP TRIGGER check_marks_leaf_event_rewritten; DROP TRIGGER check_marks_leaf_event_removed; DROP TRIGGER check_marks_compaction_rewritten; DROP TRIGGER check_marks_compaction_removed;
             DROP TABLE dead_message_text;
             PRAGMA user_version = 13;",
        )?;
    }
    let archive = Archive::open(&old, Durability::Relaxed)?;
    assert_eq!(archive.usage(&Default::default())?, fresh_usage);
    assert_eq!(archive.list(&Default::default())?, fresh_list);
    // The fork's copies are not counted: the usage is what it was before it.
    assert_eq!(fresh_usage, before);
    let no_usage_problem = |archive: &Archive| -> R {
        let found = archive.check(None)?;
        assert!(!found.iter().any(|p| p.contains("usage")), "{found:?}");
        Ok(())
    };
    no_usage_problem(&archive)?;
    // A fork after step 18: its copies are timed (`timed_ms`), the rows they
    // copy, written before the step, are not, and are still found: nothing
    // is counted twice.
    let fork = support::run_cli([
        "--db",
        old.to_str().expect("utf-8"),
        "fork",
        "ffae836b-9420-4060-ac13-7745215f90ff",
    ]);
    assert!(fork.status.success(), "{fork:?}");
    assert_eq!(archive.usage(&Default::default())?, fresh_usage);
    // Deleting the forked-from session counts the fork's copies instead.
    let counted_before = archive.usage(&Default::default())?;
    archive.delete_session("ffae836b-9420-4060-ac13-7745215f90ff")?;
    no_usage_problem(&archive)?;
    assert_ne!(archive.usage(&Default::default())?, counted_before);
    // The same delete in the archive written at this version (every fact
    // timed) counts the same copies: the first fork's, the older ones.
    let fresh = Archive::open(&db, Durability::Relaxed)?;
    fresh.delete_session("ffae836b-9420-4060-ac13-7745215f90ff")?;
    no_usage_problem(&fresh)?;
    assert_eq!(
        fresh.usage(&Default::default())?,
        archive.usage(&Default::default())?
    );
    Ok(())
}

/// Changes entry `entry` of session `session` the way damage below SQLite
/// would: its stored text becomes that of the session's first entry, with
/// the triggers that forget a check's mark out of the way (so only what a
/// check reads can find it).
fn damage_past_the_triggers(archive: &Archive, session: &str, entry: &str) -> R {
    let conn = archive.conn()?;
    let triggers: Vec<(String, String)> = conn
        .prepare(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger'
             AND (name LIKE 'check_marks_%' OR name = 'entries_are_append_only')",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    assert!(triggers.len() > 2, "the schema has the mark triggers");
    for (name, _) in &triggers {
        conn.execute_batch(&format!("DROP TRIGGER {name}"))?;
    }
    let changed = conn.execute(
        "UPDATE entries SET json = (SELECT e.json FROM entries e
             WHERE e.session_key = entries.session_key ORDER BY e.seq LIMIT 1)
         WHERE id = ?2 AND session_key = (SELECT session_key FROM sessions WHERE id = ?1)",
        [session, entry],
    )?;
    assert_eq!(changed, 1, "{session} has an entry {entry}");
    for (_, sql) in &triggers {
        conn.execute_batch(sql)?;
    }
    Ok(())
}

fn incremental(archive: &Archive) -> Result<CheckRun, sessiontree::Error> {
    archive.check_run(None, CheckMode::Incremental, &mut |_, _| {})
}

/// A second check reads only the entries appended since the first (forks,
/// a label and a compaction among them, replayed on the first's facts and
/// stored cache), finds what a full check finds of them, and still compares
/// the facts; an old entry damaged below SQLite is found only by `--full`.
#[test]
fn a_second_check_reads_only_what_was_appended() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut grown = deep_session(&archive, "grown", 200, 6)?;
    deep_session(&archive, "quiet", 100, 2)?;
    let first = incremental(&archive)?;
    assert_eq!(first.findings.problems, Vec::<String>::new());
    assert_eq!(
        (first.coverage.sessions_whole, first.coverage.marks_recorded),
        (2, 2)
    );
    let all = first.coverage.entries_read;
    assert!(all >= 300, "{:?}", first.coverage);
    let second = incremental(&archive)?;
    assert_eq!(second.findings.problems, Vec::<String>::new());
    assert_eq!(
        (
            second.coverage.entries_read,
            second.coverage.sessions_unchanged
        ),
        (0, 2)
    );
    // Appended: the tip grows, a fork from an old entry of an old
    // segment, a label on an old entry, a compaction keeping an old one.
    grown.append_entry(msg("next", Some("m199")))?;
    grown.append_entry(msg("fork", Some("m50")))?;
    grown.append_entry(Entry::from_value(
        &json!({"type":"label","id":"lab","parentId":"fork","timestamp":"t","targetId":"m10","label":"here"}),
    )?)?;
    grown.append_entry(Entry::from_value(
        &json!({"type":"compaction","id":"cut","parentId":"next","timestamp":"t","summary":"s","tokensBefore":1,"firstKeptEntryId":"m190"}),
    )?)?;
    grown.append_entry(msg("after", Some("cut")))?;
    let third = incremental(&archive)?;
    assert_eq!(third.findings.problems, Vec::<String>::new());
    assert_eq!(
        (
            third.coverage.entries_read,
            third.coverage.sessions_whole,
            third.coverage.sessions_unchanged
        ),
        (5, 0, 1)
    );
    assert_eq!(archive.check(None)?, Vec::<String>::new());
    // Facts are compared on every check: a wrong count is found without
    // reading an entry.
    archive.conn()?.execute_batch(
        "UPDATE sessions SET message_count = message_count + 1 WHERE id = 'quiet'",
    )?;
    let facts = incremental(&archive)?;
    assert!(
        facts
            .findings
            .problems
            .iter()
            .any(|p| p.starts_with("session quiet:") && p.contains("differ from a replay")),
        "{:?}",
        facts.findings.problems
    );
    assert_eq!(facts.coverage.entries_read, 0);
    archive.conn()?.execute_batch(
        "UPDATE sessions SET message_count = message_count - 1 WHERE id = 'quiet'",
    )?;
    // A new entry of a verified session is checked like any: its
    // stored text damaged, the next plain check names it.
    grown.append_entry(msg("late", Some("after")))?;
    damage_past_the_triggers(&archive, "grown", "late")?;
    let late = incremental(&archive)?;
    assert!(
        late.findings
            .problems
            .iter()
            .any(|p| p.starts_with("session grown: entry late")),
        "{:?}",
        late.findings.problems
    );
    assert_eq!(late.coverage.entries_read, 1);
    // An old entry damaged below SQLite: the plain check does not read
    // it; `--full` does.
    damage_past_the_triggers(&archive, "quiet", "m40")?;
    let plain = incremental(&archive)?;
    assert!(
        !plain
            .findings
            .problems
            .iter()
            .any(|p| p.starts_with("session quiet")),
        "{:?}",
        plain.findings.problems
    );
    let full = archive.check_run(None, CheckMode::Full, &mut |_, _| {})?;
    assert!(
        full.findings
            .problems
            .iter()
            .any(|p| p.starts_with("session quiet: entry m40")),
        "{:?}",
        full.findings.problems
    );
    assert!(full.coverage.entries_read > all);
    Ok(())
}

/// What compact, a fork or a delete wrote is read whole by the next plain
/// check: compact's re-encode and a delete forget the marks of what they
/// rewrote (a new session that takes a deleted one's key too), a fork is a
/// session no check verified. Damage left there past the triggers is found.
#[test]
fn a_rewrite_forgets_what_check_verified() -> R {
    use sessiontree::repo::{archive::ArchiveRepo, ForkOptions, SessionRepo};
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    for name in ["compacted", "source", "last"] {
        deep_session(&archive, name, 60, 2)?;
    }
    let marked = |archive: &Archive| -> Result<i64, rusqlite::Error> {
        archive.conn().expect("a connection").query_row(
            "SELECT count(*) FROM check_marks WHERE seq IS NOT NULL",
            [],
            |r| r.get(0),
        )
    };
    assert_eq!(
        incremental(&archive)?.findings.problems,
        Vec::<String>::new()
    );
    assert_eq!(marked(&archive)?, 3);

    archive.compact(&mut |_, _| {})?;
    assert_eq!(marked(&archive)?, 0, "compact re-encodes every entry");
    damage_past_the_triggers(&archive, "compacted", "m30")?;
    let after_compact = incremental(&archive)?;
    assert!(
        after_compact
            .findings
            .problems
            .iter()
            .any(|p| p.starts_with("session compacted: entry m30")),
        "{:?}",
        after_compact.findings.problems
    );
    archive.delete_session("compacted")?;
    assert_eq!(
        incremental(&archive)?.findings.problems,
        Vec::<String>::new()
    );
    assert_eq!(marked(&archive)?, 2);

    let mut repo = ArchiveRepo::new(archive.clone());
    let source = archive.open_session("source")?.metadata()?;
    let options = ForkOptions {
        id: Some("forked".into()),
        ..ForkOptions::default()
    };
    drop(repo.fork(&source, &options)?);
    damage_past_the_triggers(&archive, "forked", "m20")?;
    let after_fork = incremental(&archive)?;
    assert!(
        after_fork
            .findings
            .problems
            .iter()
            .any(|p| p.starts_with("session forked: entry m20")),
        "{:?}",
        after_fork.findings.problems
    );
    archive.delete_session("forked")?;

    let key_of = |id: &str| -> Result<i64, rusqlite::Error> {
        archive.conn().expect("a connection").query_row(
            "SELECT session_key FROM sessions WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
    };
    let last = key_of("last")?;
    assert_eq!(
        incremental(&archive)?.findings.problems,
        Vec::<String>::new()
    );
    archive.delete_session("last")?;
    deep_session(&archive, "newcomer", 30, 0)?;
    assert_eq!(
        key_of("newcomer")?,
        last,
        "the new session takes the deleted one's key"
    );
    damage_past_the_triggers(&archive, "newcomer", "m20")?;
    let after_delete = incremental(&archive)?;
    assert!(
        after_delete
            .findings
            .problems
            .iter()
            .any(|p| p.starts_with("session newcomer: entry m20")),
        "{:?}",
        after_delete.findings.problems
    );
    Ok(())
}

/// A pi session file of `n` assistant messages, each with usage, one second
/// apart from `start_s` (Unix seconds), ids drawn from `seed`, each padded
/// with `pad` bytes of a member nothing indexes.
fn usage_session_file(
    path: &std::path::Path,
    id: &str,
    start_s: i64,
    n: usize,
    seed: u64,
    pad: usize,
) {
    use std::io::Write;
    let stamp = |s: i64| {
        chrono::DateTime::from_timestamp(s, 0)
            .expect("a time")
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    };
    let mut rng = support::Rng::new(seed);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("a file"));
    let header =
        json!({"type":"session","version":3,"id":id,"timestamp":stamp(start_s),"cwd":"/w"});
    writeln!(out, "{header}").expect("write");
    let mut parent: Option<String> = None;
    for i in 0..n {
        let entry_id = format!("{:016x}", rng.next_u64());
        let at = start_s + i as i64;
        let e = json!({"type":"message","id":entry_id,"parentId":parent,"timestamp":stamp(at),
            "pad":"p".repeat(pad),
            "message":{"role":"assistant","content":[{"type":"text","text":format!("answer {i}")}],
                "provider":"p","model":"m","stopReason":"stop","timestamp":at * 1000,
                "usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,
                    "cost":{"input":0.001,"output":0.002,"cacheRead":0,"cacheWrite":0,"total":0.003}}}});
        writeln!(out, "{e}").expect("write");
        parent = Some(entry_id);
    }
}

/// Pages each commit of an import writes to the log for the usage facts'
/// indexes: with the dedup lookup keyed by the hash alone, every batch put
/// its facts on as many random pages of a big index (40 % of an import's
/// log on a 482 MB home, each page written 114 times); keyed in time order
/// (schema step 0018) a batch's facts share the index's last pages. Counted
/// from the log's frame headers, with a reader holding the log so that no
/// frame is checkpointed away; fails with the hash-keyed index (about 20
/// frames a batch here against 3).
#[test]
fn an_import_batch_writes_few_pages_of_the_usage_indexes() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("a.db");
    let db_s = db.to_str().expect("utf-8");
    // 5,000 facts already in the archive: the hash-keyed index has ~25
    // leaf pages, more than a batch has facts.
    let old = dir.path().join("old.jsonl");
    usage_session_file(
        &old,
        "00000000-0000-7000-8000-000000000001",
        1_700_000_000,
        5_000,
        1,
        0,
    );
    let out = support::run_cli([
        "--db",
        db_s,
        "import",
        old.to_str().expect("utf-8"),
        "--quiet",
    ]);
    assert!(out.status.success(), "{out:?}");
    let new = dir.path().join("new.jsonl");
    // Past the 4 MB of a file imported in a group: a staged import, in batches.
    usage_session_file(
        &new,
        "00000000-0000-7000-8000-000000000002",
        1_710_000_000,
        1_000,
        2,
        4_500,
    );
    let pin = rusqlite::Connection::open(&db)?;
    pin.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
    // A reader from before the import: nothing it wrote is copied out of the log.
    pin.execute_batch("BEGIN")?;
    pin.query_row("SELECT count(*) FROM usage_facts", [], |r| {
        r.get::<_, i64>(0)
    })?;
    let out = std::process::Command::new(support::bin())
        .args([
            "--db",
            db_s,
            "import",
            new.to_str().expect("utf-8"),
            "--quiet",
        ])
        .env("SESSIONTREE_TEST_BATCH", "20:0")
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let wal = std::fs::read(dir.path().join("a.db-wal"))?;
    pin.execute_batch("COMMIT")?;
    let page_size = u32::from_be_bytes(wal[8..12].try_into()?) as usize;
    let (mut frames, mut commits) = (Vec::new(), 0);
    let mut at = 32;
    while at + 24 + page_size <= wal.len() {
        frames.push(i64::from(u32::from_be_bytes(wal[at..at + 4].try_into()?)));
        commits += usize::from(wal[at + 4..at + 8] != [0, 0, 0, 0]);
        at += 24 + page_size;
    }
    let index_pages: std::collections::HashSet<i64> = pin
        .prepare(
            "SELECT pageno FROM dbstat WHERE name IN
               (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'usage_facts')",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let index_frames = frames.iter().filter(|p| index_pages.contains(p)).count();
    assert!(
        commits >= 40,
        "1,000 entries in batches of 20: {commits} commits"
    );
    // Three indexes, each appended at its end: a page or two each a commit
    // (measured: 6 a commit; with the hash-keyed index as well, 20).
    assert!(
        index_frames <= commits * 10,
        "{index_frames} frames of the usage indexes in {commits} commits"
    );
    let counted: i64 =
        pin.query_row("SELECT count(*) FROM usage_facts WHERE counted", [], |r| {
            r.get(0)
        })?;
    assert_eq!(counted, 6_000, "every fact counted once");
    Ok(())
}

/// A check on two or three threads (the pragma on one, sessions on the
/// others, the largest first) finds what the serial check finds, and reports
/// it in the same order: damage in two sessions (a maintained count in a
/// small one listed early, a segment's position in the largest, listed
/// later and so taken first) is named for both, in the sessions' order,
/// with the same coverage, warnings and progress, whole and incremental.
#[test]
fn a_check_on_several_threads_reports_what_one_thread_does() -> R {
    let dir = tempfile::tempdir()?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let sizes = [
        ("s0", 30),
        ("s1", 20),
        ("s2", 60),
        ("s3", 10),
        ("s4", 200),
        ("s5", 40),
    ];
    for (id, depth) in sizes {
        deep_session(&archive, id, depth, 3)?;
    }
    archive.conn()?.execute_batch(
        "UPDATE sessions SET message_count = message_count + 1 WHERE id = 's1';
         UPDATE segments SET position = position + 1 WHERE segment_id = (
             SELECT max(segment_id) FROM segments
              WHERE session_key = (SELECT session_key FROM sessions WHERE id = 's4'));",
    )?;
    for mode in [CheckMode::Full, CheckMode::Incremental] {
        let mut runs = Vec::new();
        for threads in [1, 2, 3] {
            let mut progress = Vec::new();
            let run = archive.check_run_on(None, mode, threads, &mut |done, total| {
                progress.push((done, total))
            })?;
            runs.push((threads, run, progress));
        }
        let (_, serial, serial_progress) = &runs[0];
        let problems = &serial.findings.problems;
        let named = |id: &str| {
            problems
                .iter()
                .position(|p| p.starts_with(&format!("session {id}:")))
        };
        let (s1, s4) = (named("s1"), named("s4"));
        assert!(
            s1.is_some() && s4.is_some() && s1 < s4,
            "{mode:?}: {problems:?}"
        );
        assert!(
            problems
                .iter()
                .all(|p| p.starts_with("session s1:") || p.starts_with("session s4:")),
            "{mode:?}: {problems:?}"
        );
        let expected: Vec<(u64, u64)> = (0..=sizes.len() as u64)
            .map(|d| (d, sizes.len() as u64))
            .collect();
        assert_eq!(serial_progress, &expected, "{mode:?}");
        for (threads, run, progress) in &runs[1..] {
            assert_eq!(
                (&run.findings.problems, &run.findings.warnings),
                (problems, &serial.findings.warnings),
                "{mode:?} on {threads} threads"
            );
            assert_eq!(
                run.coverage, serial.coverage,
                "{mode:?} on {threads} threads"
            );
            assert_eq!(progress, serial_progress, "{mode:?} on {threads} threads");
        }
    }
    Ok(())
}

/// `check` answers for the archive as it is now, not as a connection last
/// saw its search index: FTS5 caches the index's structure (its segments)
/// per connection, and its own check inside `PRAGMA integrity_check` reads
/// through that cache without asking whether another connection wrote
/// since. A connection that searched before another process merged the
/// index's segments once reported the merged-away segment as "fts5:
/// corruption found reading blob …" on a whole archive.
#[test]
fn check_after_another_connection_merges_the_search_index_finds_nothing() -> R {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("a.db");
    let archive = Archive::open(&path, Durability::Relaxed)?;
    let mut w = archive.create_session(&new_session("s"))?;
    let mut parent: Option<String> = None;
    // A commit a message: a search-index segment each.
    for i in 0..24 {
        let id = format!("e{i}");
        w.append_entry(user_says(
            &id,
            parent.as_deref(),
            &format!("zebra number {i}"),
        ))?;
        parent = Some(id);
    }
    drop(w);
    // This process's connections read the index (and cache its structure).
    assert_eq!(archive.search("zebra", None, None, None, 100)?.len(), 24);
    assert_eq!(archive.check(None)?, Vec::<String>::new());
    // Another process merges every segment into one (the old ones are
    // deleted), as FTS5's automerge does in a long write.
    let other = rusqlite::Connection::open(&path)?;
    other.execute(
        "INSERT INTO message_text (message_text) VALUES ('optimize')",
        [],
    )?;
    drop(other);
    assert_eq!(archive.check(None)?, Vec::<String>::new());
    assert_eq!(archive.search("zebra", None, None, None, 100)?.len(), 24);
    Ok(())
}
