//! The SQLite engine: schema and migrations, connection settings, writer
//! claims, and complexity tests that count work (statements, rows, VM steps,
//! rows written) instead of timing it.

use serde_json::json;
use sessiontree::backend::sqlite::branch_cache::ReadCost;
use sessiontree::backend::sqlite::migrate::latest_version;
use sessiontree::backend::sqlite::{Archive, NewSession, SqliteStorage};
use sessiontree::{Durability, Entry, ErrorCode, SessionStorage};

type R = Result<(), Box<dyn std::error::Error>>;

fn new_session(id: &str) -> NewSession {
    NewSession {
        id: id.to_owned(),
        created_at: "2025-01-01T00:00:00.000Z".to_owned(),
        cwd: "/w".to_owned(),
        parent_session: None,
        metadata: None,
        header: format!(
            r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}}"#
        ),
    }
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
        let timeout: i64 = conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0))?;
        assert_eq!((sync, fk), (level, 1));
        assert!(timeout > 0);
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
    let host = sessiontree::backend::sqlite::claim::host_name();
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
    // A live holder elsewhere: refused until its lease expires.
    set_claim("another-host", 1, far_future)?;
    let mut s = archive.open_session("s")?;
    let err = s.claim_writer().expect_err("held elsewhere");
    assert!(err.to_string().contains("another-host"), "{err}");
    set_claim("another-host", 1, 0)?;
    s.claim_writer()?;
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
            "message_text",
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

/// The counted costs behind the README's complexity table.
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
        let rows: Vec<String> = st.query_map([], |r| r.get(3))?.collect::<Result<_, _>>()?;
        Ok(rows.join(" | "))
    };
    let checks = [
        ("SELECT leaf_id, name, entry_count FROM sessions WHERE session_key = 1", "INTEGER PRIMARY KEY"),
        ("SELECT json FROM entries WHERE session_key = 1 AND id = 'x'", "entries_by_id"),
        ("SELECT json FROM entries WHERE session_key = 1 AND type = 'x' ORDER BY seq", "entries_by_type"),
        ("SELECT json FROM entries WHERE session_key = 1 AND seq >= 5 ORDER BY seq LIMIT 10", "entries_by_seq"),
        ("SELECT label FROM labels WHERE session_key = 1 AND target_id = 'x'", "PRIMARY KEY"),
        ("SELECT max(entry_key) FROM compactions WHERE entry_key BETWEEN 1 AND 9", "INTEGER PRIMARY KEY"),
        (
            "SELECT e.json FROM segment_ancestry a JOIN entries e ON e.entry_key BETWEEN ((a.ancestor_segment << 32) | max(a.from_depth, 0)) AND ((a.ancestor_segment << 32) | min(a.to_depth, 9)) WHERE a.segment_id = 1 AND a.from_depth <= 9 AND a.from_depth >= (SELECT max(from_depth) FROM segment_ancestry WHERE segment_id = 1 AND from_depth <= 0) ORDER BY a.from_depth, e.entry_key",
            "INTEGER PRIMARY KEY",
        ),
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
        sessiontree::backend::sqlite::migrate::current_version(&rusqlite::Connection::open(&db)?)?,
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
