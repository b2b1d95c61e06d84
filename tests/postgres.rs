//! The team archive on PostgreSQL beyond the shared suites: `sync --to`
//! (exact copies, idempotence, resumption after kill -9, concurrent syncs),
//! the writer claim held across processes (two machines simulated by two
//! processes), search through the GIN index, and the CLI on a team archive:
//! every command's output compared with its output on the SQLite archive the
//! team archive was synced from, writes refused under another writer's claim,
//! and `check` finding damage planted in the cache and the session rows;
//! round trips counted (a path read and a resume are one each, a sync's
//! branch cache is written per batch), and a hot standby
//! (`SESSIONTREE_TEST_PG_STANDBY`) answering every read command, refusing
//! every write.
//! Everything runs against the test server (`SESSIONTREE_TEST_PG`, started by
//! `.ci/pg-cluster`); without one each test says it is skipped.

#[path = "conformance/pg.rs"]
#[allow(dead_code)]
mod pg;
#[path = "postgres/round_trips.rs"]
mod round_trips;
mod support;

use serde_json::{json, Value};
use sessiontree::archive::SessionArchive;
use sessiontree::backend::postgres::{PgArchive, TsVector};
use sessiontree::backend::sqlite::Archive;
use sessiontree::sync::SYNC_BATCH;
use sessiontree::{Durability, Entry, SessionStorage};
use sessiontree_bench::gen::{write_session, SessionSpec, TreeShape};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

/// Runs the binary; returns its JSON output and exit status.
fn cli_json(args: &[&str]) -> (Value, i32) {
    let out = run_cli(args.iter().copied().chain(["--json"]));
    let text = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (value, out.status.code().unwrap_or(-1))
}

/// A local SQLite archive holding pi's real sessions, or `None` without the fixtures.
fn fixture_archive(dir: &Path) -> Option<PathBuf> {
    let fixtures = fixtures_dir()?;
    let db = dir.join("local.db");
    let (_, status) = cli_json(&["--db", s(&db), "import", s(&fixtures), "--quiet"]);
    assert_eq!(status, 0);
    Some(db)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A generated session file of `entries` entries (with forks and compactions).
fn generated_file(dir: &Path, id: &str, entries: usize) -> PathBuf {
    spec_file(
        dir,
        &SessionSpec {
            id: id.to_owned(),
            created_ms: 1_748_736_000_000,
            cwd: "/work/team".into(),
            entries,
            forks: entries / 50,
            compaction_every: 400,
            seed: 7,
            tree: TreeShape::Spread,
            dangling_root: false,
        },
    )
}

/// The session `spec` describes, written to `dir/<id>.jsonl`.
fn spec_file(dir: &Path, spec: &SessionSpec) -> PathBuf {
    let path = dir.join(format!("{}.jsonl", spec.id));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    write_session(&mut out, spec).expect("generate");
    drop(out);
    path
}

/// Every entry's stored text.
fn texts(s: &dyn SessionStorage) -> Vec<String> {
    s.entries(0, None)
        .expect("entries")
        .iter()
        .map(|e| e.json().to_owned())
        .collect()
}

/// The leaf and the ids on its path.
fn active_path(s: &dyn SessionStorage) -> (Option<String>, Vec<String>) {
    let leaf = s.leaf_id().expect("leaf");
    let path = s
        .path_to_root_or_compaction(leaf.as_deref())
        .expect("path")
        .iter()
        .map(|e| Entry::id(e).to_owned())
        .collect();
    (leaf, path)
}

#[test]
fn sync_copies_the_local_archive_exactly_and_again_copies_nothing() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(db) = fixture_archive(dir.path()) else {
        eprintln!("skipped: pi's fixtures are not there");
        return;
    };
    let url = team.schema_url();
    let (first, status) = cli_json(&["--db", s(&db), "sync", "--to", &url]);
    assert_eq!(status, 0, "{first}");
    let local = Archive::open(&db, Durability::Relaxed).expect("local archive");
    let sessions = local.list(&Default::default()).expect("list");
    assert!(sessions.len() >= 2);
    for summary in &sessions {
        let id = &summary.metadata.id;
        let ours = local.open_session(id).expect("local session");
        let theirs = team.archive.open_session(id).expect("team session");
        assert_eq!(texts(&ours), texts(&theirs), "{id}: the log");
        assert_eq!(
            ours.header_json().ok(),
            theirs.header_json().ok(),
            "{id}: header"
        );
        assert_eq!(
            active_path(&ours),
            active_path(&theirs),
            "{id}: active path"
        );
        assert_eq!(
            ours.session_stats().ok(),
            theirs.session_stats().ok(),
            "{id}: stats"
        );
        assert_eq!(
            ours.metadata().ok(),
            theirs.metadata().ok(),
            "{id}: metadata"
        );
        let copied = first["synced"]
            .as_array()
            .expect("synced")
            .iter()
            .find(|r| r["session"] == json!(id))
            .map(|r| r["copied"].clone());
        assert_eq!(copied, Some(json!(summary.entry_count)), "{id}");
    }
    // Again: nothing is copied, nothing changes.
    let (second, status) = cli_json(&["--db", s(&db), "sync", "--to", &url]);
    assert_eq!(status, 0);
    assert!(
        second["synced"]
            .as_array()
            .expect("synced")
            .iter()
            .all(|r| r["copied"] == json!(0)),
        "{second}"
    );
    // The team archive answers ls and export as the local one does.
    let (ls_local, _) = cli_json(&["--db", s(&db), "ls"]);
    let (ls_team, _) = cli_json(&["--db", &url, "ls"]);
    assert_eq!(ls_local, ls_team);
    let (out_local, out_team) = (dir.path().join("a"), dir.path().join("b"));
    assert_eq!(
        cli_json(&["--db", s(&db), "export", "--all", "--out", s(&out_local)]).1,
        0
    );
    assert_eq!(
        cli_json(&["--db", &url, "export", "--all", "--out", s(&out_team)]).1,
        0
    );
    for summary in &sessions {
        let file = |root: &Path| {
            let mut found = Vec::new();
            collect_files(root, &mut found);
            let f = found
                .into_iter()
                .find(|f| s(f).contains(&summary.metadata.id))
                .expect("exported file");
            std::fs::read(f).expect("read export")
        };
        assert_eq!(file(&out_local), file(&out_team), "exports are identical");
    }
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("list") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            collect_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// A fresh team archive holding generated session `id` of `entries`
/// entries, synced there by the binary: the archive, the URL that opens it
/// and the session's file; `None` (skipped) without a server.
fn team_with_session(
    dir: &Path,
    id: &str,
    entries: usize,
) -> Option<(pg::TempArchive, String, PathBuf)> {
    let team = pg::TempArchive::new()?;
    let file = generated_file(dir, id, entries);
    let url = team.schema_url();
    assert_eq!(cli_json(&["sync", "--to", &url, s(&file)]).1, 0);
    Some((team, url, file))
}

/// Entries the team archive holds of session `id` (0 before the session row exists).
fn team_count(archive: &PgArchive, id: &str) -> usize {
    archive
        .open_session(id)
        .and_then(|s| s.entry_count())
        .unwrap_or(0)
}

/// A local archive of `sizes.len()` generated sessions (forks, compactions,
/// each its own shape), and their ids.
fn generated_archive(dir: &Path, sizes: &[usize]) -> (PathBuf, Vec<String>) {
    let files = dir.join("files");
    std::fs::create_dir_all(&files).expect("mkdir");
    let ids: Vec<String> = (0..sizes.len()).map(|i| format!("gen-{i}")).collect();
    for (i, (&entries, id)) in sizes.iter().zip(&ids).enumerate() {
        spec_file(
            &files,
            &SessionSpec {
                id: id.clone(),
                created_ms: 1_748_736_000_000 + i as i64 * 60_000,
                cwd: format!("/work/team/{i}"),
                entries,
                forks: entries / (20 + 30 * i),
                compaction_every: 250 + 150 * i,
                seed: 11 + i as u64,
                tree: if i % 2 == 0 {
                    TreeShape::Spread
                } else {
                    TreeShape::Regenerate { every: 6 }
                },
                dangling_root: false,
            },
        );
    }
    let db = dir.join("local.db");
    let (v, status) = cli_json(&["--db", s(&db), "import", s(&files), "--quiet"]);
    assert_eq!(status, 0, "{v}");
    (db, ids)
}

/// Every team session is an exact prefix of its source (a sync commits
/// whole batches, each with its session's facts), and with `whole` all of it.
fn team_is_prefix_of(local: &Archive, team: &PgArchive, ids: &[String], whole: bool) -> usize {
    let mut held = 0;
    for id in ids {
        let ours = texts(&local.open_session(id).expect("local session"));
        let Ok(copy) = team.open_session(id) else {
            assert!(!whole, "{id}: not synced");
            continue;
        };
        let theirs = texts(&copy);
        assert_eq!(copy.entry_count().expect("count"), theirs.len(), "{id}");
        assert!(theirs.len() <= ours.len(), "{id}: longer than its source");
        assert_eq!(theirs[..], ours[..theirs.len()], "{id}: not a prefix");
        if whole {
            assert_eq!(theirs.len(), ours.len(), "{id}: entries missing");
        }
        held += theirs.len();
    }
    held
}

/// kill -9 at two instants of a sync of a forked, compacted archive, then a
/// sync to the end: no entry lost or doubled, every session read back as the
/// source reads it, and a sync of the unchanged archive copies nothing.
#[test]
fn a_sync_killed_part_way_resumes_and_ends_identical() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, ids) = generated_archive(dir.path(), &[8_000, 2_500, 1_500]);
    let local = Archive::open(&db, Durability::Relaxed).expect("local archive");
    let total: usize = 12_000;
    let url = team.schema_url();
    let count = || {
        ids.iter()
            .map(|id| team_count(&team.archive, id))
            .sum::<usize>()
    };
    let mut held = 0;
    for kill_after in [SYNC_BATCH, 4 * SYNC_BATCH] {
        let mut child = Command::new(bin())
            .args(["--db", s(&db), "sync", "--to", &url])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sync");
        let started = wait_until(Duration::from_secs(120), || count() >= kill_after);
        let _ = child.kill();
        let _ = child.wait();
        assert!(started, "the sync never got past {kill_after} entries");
        let now = team_is_prefix_of(&local, &team.archive, &ids, false);
        assert!(now >= held, "{now} entries after a kill, {held} before");
        held = now;
    }
    let (again, status) = cli_json(&["--db", s(&db), "sync", "--to", &url]);
    assert_eq!(status, 0, "{again}");
    let copied: u64 = again["synced"]
        .as_array()
        .expect("synced")
        .iter()
        .map(|r| r["copied"].as_u64().expect("copied"))
        .sum();
    assert_eq!(copied as usize, total - held, "{again}");
    team_is_prefix_of(&local, &team.archive, &ids, true);
    for id in &ids {
        let ours = local.open_session(id).expect("local session");
        let copy = team.archive.open_session(id).expect("copy");
        assert_eq!(active_path(&ours), active_path(&copy), "{id}");
        assert_eq!(ours.session_stats().ok(), copy.session_stats().ok(), "{id}");
        assert_eq!(ours.metadata().ok(), copy.metadata().ok(), "{id}");
        for (i, e) in texts(&ours).iter().enumerate().step_by(97) {
            let at = Entry::from_checked_text(e.clone()).id().to_owned();
            assert_eq!(
                path_of(&copy, Some(&at)),
                path_of(&ours, Some(&at)),
                "{id} entry {i}"
            );
        }
    }
    for args in [&["ls"][..], &["stats"], &["tree", "gen-1"]] {
        same_on_both(s(&db), &url, args);
    }
    // Search finds the same entries (the stores rank them each its own way).
    for term in sessiontree_bench::gen::SEARCH_TERMS {
        let found = |hits: Vec<sessiontree::listing::SearchHit>| {
            let mut ids: Vec<String> = hits.into_iter().map(|h| h.entry_id).collect();
            ids.sort();
            ids
        };
        let ours = found(
            local
                .search(term, None, None, None, 100_000)
                .expect("search"),
        );
        let theirs = found(
            team.archive
                .search(term, None, None, None, 100_000)
                .expect("search"),
        );
        assert!(!ours.is_empty(), "{term}: no hit to compare");
        assert_eq!(ours, theirs, "{term}");
    }
    let (unchanged, status) = cli_json(&["--db", s(&db), "sync", "--to", &url]);
    assert_eq!(status, 0, "{unchanged}");
    assert!(
        unchanged["synced"]
            .as_array()
            .expect("synced")
            .iter()
            .all(|r| r["copied"] == json!(0)),
        "{unchanged}"
    );
}

/// The search vector built by the client ([`TsVector`], sent in binary) is
/// the value the server's cast makes of the same words' text: repeated
/// words, more than 256 positions of a word, positions past 16,383, long
/// and non-ASCII words.
#[test]
fn search_vectors_built_here_are_the_servers_cast_of_the_words() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let mut conn = team.archive.conn().expect("conn");
    let mut rng = sessiontree_bench::gen::SplitMix64::new(3);
    let pool = [
        "alpha",
        "beta",
        "gamma",
        "doğru",
        "İstanbul",
        "ＡＢＣ",
        "a-b",
        "x_y",
        "1.5",
        "ж",
    ];
    let mut texts = vec![
        String::new(),
        "the cat and the hat, the end".to_owned(),
        (0..20_000)
            .map(|i| pool[i % 3])
            .collect::<Vec<_>>()
            .join(" "),
        (0..17_000)
            .map(|i| format!("w{}", i % 700))
            .collect::<Vec<_>>()
            .join(" "),
        format!("{} short {}", "ж".repeat(1500), "é".repeat(3000)),
    ];
    for _ in 0..40 {
        let n = (rng.next_u64() % 3_000) as usize;
        texts.push(
            (0..n)
                .map(|_| pool[(rng.next_u64() % pool.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    for (i, text) in texts.iter().enumerate() {
        let words = sessiontree::search::index_words(text, 400_000);
        let vector = TsVector::from_index_words(&words);
        let row = conn
            .query_one(
                "SELECT $1::TSVECTOR = CAST($2::TEXT AS TSVECTOR), $1::TSVECTOR::TEXT,
                        CAST($2::TEXT AS TSVECTOR)::TEXT",
                &[&vector, &words],
            )
            .expect("compare");
        let (same, ours, theirs): (bool, String, String) = (row.get(0), row.get(1), row.get(2));
        assert!(
            same && ours == theirs,
            "text {i}: {ours:.300} / {theirs:.300}"
        );
    }
}

#[test]
fn two_concurrent_syncs_copy_every_entry_once() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let total = 6_000;
    let file = generated_file(dir.path(), "twice", total);
    let url = team.schema_url();
    let spawn = || {
        Command::new(bin())
            .args(["--json", "sync", "--to", &url, s(&file)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sync")
    };
    let (a, b) = (spawn(), spawn());
    let mut copied = 0;
    for child in [a, b] {
        let out = child.wait_with_output().expect("sync ends");
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(out.status.code(), Some(0), "{v}");
        copied += v["synced"][0]["copied"].as_u64().expect("copied");
    }
    assert_eq!(
        copied, total as u64,
        "each entry copied by exactly one sync"
    );
    let source = sessiontree::backend::jsonl::JsonlStorage::open(&file, Durability::Relaxed)
        .expect("source");
    let copy = team.archive.open_session("twice").expect("copy");
    assert_eq!(texts(&source), texts(&copy));
}

#[test]
fn a_team_copy_written_elsewhere_is_refused_not_overwritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((team, url, file)) = team_with_session(dir.path(), "diverged", 50) else {
        return;
    };
    // Someone appends on the team side.
    let mut team_side =
        sessiontree::Session::new(team.archive.open_session("diverged").expect("open"));
    team_side
        .append_session_name("renamed on the server")
        .expect("append");
    drop(team_side);
    let before = texts(&team.archive.open_session("diverged").expect("open"));
    let (v, status) = cli_json(&["sync", "--to", &url, s(&file)]);
    assert_eq!(status, 2, "{v}");
    assert_eq!(v["failed"][0]["code"], json!("invalid_session"), "{v}");
    assert_eq!(
        texts(&team.archive.open_session("diverged").expect("open")),
        before
    );
}

#[test]
fn one_writer_per_session_across_processes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((team, url, _)) = team_with_session(dir.path(), "claimed", 20) else {
        return;
    };
    let message = json!({"message": {"role": "user", "content": "hello"}});
    // Machine A writes and stays open: it holds the claim.
    let mut a = RpcChild::spawn(["--db", url.as_str(), "rpc", "claimed"]);
    let r = a.call("appendMessage", message.clone());
    assert_eq!(response_code(&r), None, "{r}");
    // Machine B reads freely, but its write is refused naming A.
    let mut b = RpcChild::spawn(["--db", url.as_str(), "rpc", "claimed"]);
    let r = b.call("getLeafId", json!({}));
    assert_eq!(response_code(&r), None, "{r}");
    let r = b.call("appendMessage", message.clone());
    assert_eq!(response_code(&r).as_deref(), Some("storage"), "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("process {}", a.pid()))),
        "{r}"
    );
    // A killed writer on this host is taken over at once.
    a.kill9();
    let r = b.call("appendMessage", message);
    assert_eq!(response_code(&r), None, "{r}");
    b.finish();
    assert_eq!(team_count(&team.archive, "claimed"), 22);
}

/// Server backends of this archive's clients asleep in a `COMMIT` (the
/// test's slow-commit trigger).
fn commits_asleep(conn: &mut postgres::Client) -> i64 {
    conn.query_one(
        "SELECT count(*) FROM pg_stat_activity
         WHERE wait_event = 'PgSleep' AND query = 'COMMIT' AND pid <> pg_backend_pid()
           AND application_name = 'sessiontree'",
        &[],
    )
    .expect("pg_stat_activity")
    .get(0)
}

/// A client killed after it sent `COMMIT` does not stop the server: its
/// append lands after the kill (a CI run of the kill -9 trials once read
/// the log before it did). A reader at that instant reads the log without
/// it; the next writer's first append takes the dead writer's claim over
/// under the session row's lock, so it waits for that commit and is stored
/// after it, both whole.
#[test]
fn a_killed_writers_sent_commit_lands_before_the_next_writers_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((team, url, _)) = team_with_session(dir.path(), "late", 20) else {
        return;
    };
    let mut conn = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    // Every commit that inserted an entry sleeps for as long as
    // `slow_commits` says, at the commit (a deferred trigger).
    conn.batch_execute(
        "CREATE TABLE slow_commits (seconds float8 NOT NULL);
         CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM pg_sleep(coalesce((SELECT max(seconds) FROM slow_commits), 0));
             RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON entries
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();
         INSERT INTO slow_commits VALUES (3);",
    )
    .expect("a slow commit");
    let message = |text: &str| json!({"message": {"role": "user", "content": text}});

    let mut a = RpcChild::spawn(["--db", url.as_str(), "rpc", "late"]);
    let (_, line) = a.request("appendMessage", message("sent before the kill"));
    a.send_raw(format!("{line}\n").as_bytes());
    let asleep = std::time::Instant::now();
    while commits_asleep(&mut conn) == 0 {
        assert!(
            asleep.elapsed() < Duration::from_secs(30),
            "the append's COMMIT never reached the server"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(a.kill9().is_empty(), "the append was acknowledged");
    conn.batch_execute("DELETE FROM slow_commits")
        .expect("later commits are quick");

    let seen = team_count(&team.archive, "late");
    assert_eq!(
        commits_asleep(&mut conn),
        1,
        "the killed client's COMMIT ended before the read: the test proves nothing"
    );
    assert_eq!(
        seen, 20,
        "a reader saw an append whose commit had not ended"
    );

    let mut b = RpcChild::spawn(["--db", url.as_str(), "rpc", "late"]);
    let r = b.call("appendMessage", message("after the kill"));
    assert_eq!(response_code(&r), None, "{r}");
    b.finish();
    assert_eq!(commits_asleep(&mut conn), 0);
    let stored = team.reopen().open_session("late").expect("session");
    let contents: Vec<Value> = stored
        .entries(20, None)
        .expect("entries")
        .iter()
        .map(|e| e.value()["message"]["content"].clone())
        .collect();
    assert_eq!(
        contents,
        vec![json!("sent before the kill"), json!("after the kill")],
        "the late commit, then the next writer's append"
    );
}

#[test]
fn search_finds_what_the_sqlite_index_finds() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(db) = fixture_archive(dir.path()) else {
        eprintln!("skipped: pi's fixtures are not there");
        return;
    };
    let url = team.schema_url();
    assert_eq!(cli_json(&["--db", s(&db), "sync", "--to", &url]).1, 0);
    let local = Archive::open(&db, Durability::Relaxed).expect("local");
    for query in [
        "compaction",
        "abort controller",
        "\"session manager\"",
        "refact*",
        "zzzznotthere",
    ] {
        let hits = |found: Vec<sessiontree::listing::SearchHit>| {
            let mut keys: Vec<(String, String)> = found
                .into_iter()
                .map(|h| (h.session_id, h.entry_id))
                .collect();
            keys.sort();
            keys
        };
        let ours = hits(
            local
                .search(query, None, None, None, 1000)
                .expect("sqlite search"),
        );
        let theirs = hits(
            team.archive
                .search(query, None, None, None, 1000)
                .expect("pg search"),
        );
        assert_eq!(ours, theirs, "{query}");
    }
    // Ranked best first, with a snippet around a match, through the CLI.
    let (v, status) = cli_json(&["--db", &url, "search", "compaction", "--limit", "5"]);
    assert_eq!(status, 0);
    let hits = v["hits"].as_array().expect("hits");
    assert_eq!(hits.len(), 5, "{v}");
    let ranks: Vec<f64> = hits
        .iter()
        .map(|h| h["rank"].as_f64().expect("rank"))
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{ranks:?}");
    assert!(
        hits.iter().all(|h| h["snippet"]
            .as_str()
            .is_some_and(|t| t.to_lowercase().contains("compaction"))),
        "{v}"
    );
}

#[test]
fn commands_that_need_an_sqlite_archive_refuse_a_url_and_create_nothing() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let url = team.schema_url();
    for args in [&["import"][..], &["compact"], &["sql", "SELECT 1"]] {
        let mut all = vec!["--db", url.as_str()];
        all.extend_from_slice(args);
        let (v, status) = cli_json(&all);
        assert_eq!(status, 2, "{args:?}: {v}");
        assert_eq!(v["error"]["code"], json!("usage"));
    }
    let (v, _) = cli_json(&["--db", &url, "import"]);
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("sync --to"), "{message}");
    assert!(!Path::new("postgres:").exists());
}

/// Runs the binary on `db` (text output, or `--json`): stdout and exit status.
fn on(db: &str, args: &[&str], json: bool) -> (String, i32) {
    let mut all = vec!["--db", db];
    all.extend_from_slice(args);
    if json {
        all.push("--json");
    }
    let out = run_cli(all);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

/// Asserts that `args` prints the same text and the same JSON on both archives.
fn same_on_both(local: &str, team: &str, args: &[&str]) {
    for json in [false, true] {
        let (ours, status) = on(local, args, json);
        assert_eq!(status, 0, "{args:?} on SQLite: {ours}");
        // A write's entry is stamped with the time it was made: the last
        // activity of a session written just now differs by milliseconds.
        let today = |text: String| {
            let day = &sessiontree::entry::now_timestamp()[..10];
            let mut out = text;
            while let Some(i) = out.find(&format!("{day}T")) {
                out.replace_range(i..i + 24, "(written now)");
            }
            out
        };
        assert_eq!(
            (today(ours), status),
            {
                let (theirs, status) = on(team, args, json);
                (today(theirs), status)
            },
            "{args:?} (json {json}): SQLite vs PostgreSQL"
        );
    }
}

/// The local archive and a team copy of it (by `sync`), or `None` when skipped.
fn synced_pair(dir: &Path) -> Option<(pg::TempArchive, PathBuf)> {
    let team = pg::TempArchive::new()?;
    let Some(db) = fixture_archive(dir) else {
        eprintln!("skipped: pi's fixtures are not there");
        return None;
    };
    let (v, status) = cli_json(&["--db", s(&db), "sync", "--to", &team.schema_url()]);
    assert_eq!(status, 0, "{v}");
    Some((team, db))
}

/// The ids of the active path's entries, and of its user messages.
fn path_ids(db: &str, session: &str) -> (Vec<String>, Vec<String>) {
    let (v, status) = cli_json(&["--db", db, "branch", session]);
    assert_eq!(status, 0, "{v}");
    let entries = v["entries"].as_array().expect("entries").clone();
    let id = |e: &Value| e["id"].as_str().expect("id").to_owned();
    let users = entries
        .iter()
        .filter(|e| e["type"] == "message" && e["message"]["role"] == "user")
        .map(id)
        .collect();
    (entries.iter().map(id).collect(), users)
}

#[test]
fn read_commands_print_the_same_on_postgres_as_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((team, db)) = synced_pair(dir.path()) else {
        return;
    };
    let (local, url) = (s(&db), team.schema_url());
    same_on_both(local, &url, &["stats"]);
    for summary in Archive::open(&db, Durability::Relaxed)
        .expect("local")
        .list(&Default::default())
        .expect("list")
    {
        let id = summary.metadata.id;
        let prefix = &id[..8];
        let (path, _) = path_ids(local, &id);
        let middle = &path[path.len() / 2];
        for args in [
            &["branch", prefix][..],
            &["branch", &id, "--from", middle],
            &["context", prefix],
            &["context", &id, "--from", middle],
            &["history", prefix],
            &["stats", prefix],
            &["tree", prefix],
            &["tree", prefix, "--all"],
        ] {
            same_on_both(local, &url, args);
        }
    }
    for missing in [&["branch", "zzzz"][..], &["tree", "zzzz"]] {
        let (v, status) = cli_json(&[&["--db", url.as_str()][..], missing].concat());
        assert_eq!(
            (status, &v["error"]["code"]),
            (3, &json!("not_found")),
            "{v}"
        );
    }
}

/// `history --json`: where each move went (the leaf entries' own ids and
/// times, and a summary entry moved from, are each archive's own).
fn moves(db: &str, session: &str) -> Vec<Value> {
    let (v, status) = cli_json(&["--db", db, "history", session]);
    assert_eq!(status, 0, "{v}");
    v["moves"]
        .as_array()
        .expect("moves")
        .iter()
        .map(|m| m["to"].clone())
        .collect()
}

#[test]
fn write_commands_do_on_postgres_what_they_do_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((team, db)) = synced_pair(dir.path()) else {
        return;
    };
    let (local, url) = (s(&db), team.schema_url());
    let id = "ffae836b";
    let (path, users) = path_ids(local, id);
    let (earlier, user) = (&path[path.len() / 3], &users[users.len() / 2]);
    for args in [
        &["label", id, earlier, "an idea"][..],
        &["name", id, "team refactor"],
        &["move", id, earlier, "--summary", "left for later"],
        &["move", id, "root"],
        &["move", id, user],
    ] {
        let (ours, status) = on(local, args, false);
        assert_eq!(status, 0, "{args:?}: {ours}");
        // Compare the text where it names no new entry (a label entry's id,
        // a summary entry as the leaf — every move of an app session, pi's
        // file, writes one): each archive makes its own ids.
        if args[0] != "label" && args[0] != "move" {
            assert_eq!((ours, 0), on(&url, args, false), "{args:?}");
        } else {
            assert_eq!(on(&url, args, false).1, 0, "{args:?}");
        }
    }
    assert_eq!(moves(local, id), moves(&url, id));
    let texts_of = |db: &str| {
        let (v, _) = cli_json(&["--db", db, "branch", id]);
        v["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| json!([e["type"], e["label"], e["name"], e["summary"]]))
            .collect::<Vec<_>>()
    };
    assert_eq!(texts_of(local), texts_of(&url));
    for args in [&["stats", id][..], &["ls"], &["context", id]] {
        same_on_both(local, &url, args);
    }
    // The tree, with the ids of the entries each archive wrote itself masked.
    let tree = |db: &str| {
        let (text, status) = on(db, &["tree", id, "--all"], false);
        assert_eq!(status, 0, "{text}");
        text.split_inclusive(' ')
            .map(|w| {
                let new_id =
                    w.trim_end().len() == 8 && w.trim_end().bytes().all(|b| b.is_ascii_hexdigit());
                if new_id {
                    "ID "
                } else {
                    w
                }
            })
            .collect::<String>()
    };
    assert_eq!(tree(local), tree(&url));

    // fork: a new session with the same entries in both archives.
    let fork = |db: &str| {
        let (v, status) = cli_json(&["--db", db, "fork", id, "--entry", user]);
        assert_eq!(status, 0, "{v}");
        let new = v["session"].as_str().expect("new id").to_owned();
        (v["entries"].clone(), path_ids(db, &new).0, new)
    };
    let (ours, theirs) = (fork(local), fork(&url));
    assert_eq!((&ours.0, &ours.1), (&theirs.0, &theirs.1));
    let (v, status) = cli_json(&["--db", &url, "fork", id, "--entry", earlier]);
    assert_eq!(
        (status, &v["error"]["code"]),
        (6, &json!("invalid_fork_target")),
        "{v}"
    );

    // delete: the fork goes, an unknown session is reported (exit 2).
    let (v, status) = cli_json(&["--db", &url, "delete", &theirs.2, "zzzz"]);
    assert_eq!(status, 2, "{v}");
    assert_eq!(v["deleted"], json!([theirs.2]));
    assert_eq!(v["failed"][0]["code"], json!("not_found"));
    assert!(!team.archive.has_session(&theirs.2).expect("has"));
    let (_, status) = on(local, &["delete", &ours.2], true);
    assert_eq!(status, 0);
    same_on_both(local, &url, &["ls"]);
}

#[test]
fn a_write_command_refuses_a_session_another_process_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((team, _db)) = synced_pair(dir.path()) else {
        return;
    };
    let url = team.schema_url();
    let mut held = team
        .archive
        .open_session(&team.archive.resolve_session("ffae836b").expect("resolve"))
        .expect("open");
    held.claim_writer().expect("claim");
    let (path, _) = path_ids(&url, "ffae836b");
    for args in [
        &["name", "ffae836b", "mine"][..],
        &["label", "ffae836b", &path[0], "x"],
        &["move", "ffae836b", &path[0]],
        &["delete", "ffae836b"],
    ] {
        let (out, status) = on(&url, args, true);
        let v: Value = serde_json::from_str(out.trim()).expect("JSON");
        // `delete` reports each session it could not delete and exits 2.
        let (error, expected) = match args[0] {
            "delete" => (&v["failed"][0], 2),
            _ => (&v["error"], 7),
        };
        assert_eq!(status, expected, "{args:?}: {out}");
        assert_eq!(error["code"], json!("storage"), "{args:?}: {out}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("already open for writing")),
            "{args:?}: {out}"
        );
    }
    assert_eq!(path_ids(&url, "ffae836b").0, path, "nothing was written");
    drop(held);
    let (out, status) = on(&url, &["name", "ffae836b", "mine"], true);
    assert_eq!(status, 0, "{out}");
}

#[test]
fn check_finds_a_team_archive_whole_and_reports_a_damaged_cache_or_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((team, _db)) = synced_pair(dir.path()) else {
        return;
    };
    let url = team.schema_url();
    for args in [&["check"][..], &["check", "ffae836b"]] {
        let (v, status) = cli_json(&[&["--db", url.as_str()][..], args].concat());
        assert_eq!((status, &v["ok"]), (0, &json!(true)), "{args:?}: {v}");
    }
    let mut conn = team.archive.conn().expect("conn");
    // The branch cache loses its compaction stops: path reads run past them.
    let cut = conn
        .execute(
            "DELETE FROM compactions
             WHERE session_key = (SELECT session_key FROM sessions WHERE id LIKE 'ffae836b%')",
            &[],
        )
        .expect("damage the cache");
    assert!(cut > 0);
    // A maintained fact out of step with the log in the other session.
    conn.execute(
        "UPDATE sessions SET message_count = message_count + 1 WHERE id LIKE 'd703a1a9%'",
        &[],
    )
    .expect("damage a row");
    drop(conn);
    let (v, status) = cli_json(&["--db", &url, "check"]);
    assert_eq!(status, 8, "{v}");
    let problems: Vec<&str> = v["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("session ffae836b") && p.contains("branch cache")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("session d703a1a9") && p.contains("statistics")),
        "{problems:?}"
    );
    let (v, status) = cli_json(&["--db", &url, "check", "d703a1a9"]);
    assert_eq!(status, 8, "{v}");
    assert!(v["problems"].as_array().expect("problems").iter().all(|p| p
        .as_str()
        .is_some_and(|p| p.starts_with("session d703a1a9"))));
}

/// A session whose root names a missing parent, cut after a compaction (pi
/// opens it; `tree` and `context` read it): `check` warns, naming the entry,
/// its session and what pi does, and exits 0 — as on the SQLite archive.
#[test]
fn check_warns_about_a_missing_parent_that_reads_tolerate_on_a_team_archive() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let line = |id: &str, parent: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2025-03-01T10:00:01.000Z","message":{{"role":"user","content":"{id} text","timestamp":1}}}}"#
        )
    };
    let file = dir.path().join("cut.jsonl");
    std::fs::write(
        &file,
        [
            r#"{"type":"session","version":3,"id":"01950000-cccc-7000-8000-000000000001","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/home/ada/cut"}"#.to_owned(),
            line("c0000001", "c75b2564"),
            line("c0000002", "c0000001"),
            r#"{"type":"compaction","id":"k0000001","parentId":"c0000002","timestamp":"2025-03-01T10:00:02.000Z","summary":"so far","firstKeptEntryId":"c0000002","tokensBefore":1000}"#.to_owned(),
            line("c0000003", "k0000001"),
        ]
        .join("\n")
            + "\n",
    )
    .expect("write");
    let url = team.schema_url();
    let (v, status) = cli_json(&["sync", "--to", &url, s(&file)]);
    assert_eq!(status, 0, "{v}");
    for args in [
        &["tree", "01950000-cccc", "--no-pager"][..],
        &["context", "01950000-cccc"],
    ] {
        let (v, status) = cli_json(&[&["--db", url.as_str()][..], args].concat());
        assert_eq!(status, 0, "{args:?}: {v}");
    }
    let warning = "session 01950000-cccc-7000-8000-000000000001: entry c0000001 names parent c75b2564, which is not in the session (a file cut from a longer one?); pi opens it and a path through it stops there, at c0000001";
    for args in [&["check"][..], &["check", "01950000-cccc"]] {
        let (v, status) = cli_json(&[&["--db", url.as_str()][..], args].concat());
        assert_eq!(status, 0, "{args:?}: {v}");
        assert_eq!(
            (&v["ok"], &v["problems"], &v["warnings"]),
            (&json!(true), &json!([]), &json!([warning])),
            "{args:?}"
        );
    }
}

/// An entry key as (segment rank, depth).
type RankedKey = (usize, i64);

/// A segment row: parent, first depth, tail depth, position, jump,
/// inherited compaction, missing root parent.
type RankedSegment = (
    Option<usize>,
    i64,
    i64,
    i64,
    Option<usize>,
    Option<RankedKey>,
    Option<String>,
);

/// A session's branch cache rows, with segments named by their rank in
/// creation order (SQLite numbers them across the archive, PostgreSQL from 1
/// in each session) and keys as [`RankedKey`].
#[derive(Debug, PartialEq)]
struct CacheRows {
    segments: Vec<RankedSegment>,
    /// Segment, from depth, ancestor, to depth.
    ancestry: Vec<(usize, i64, usize, i64)>,
    /// Compaction and its stop.
    compactions: Vec<(RankedKey, Option<RankedKey>)>,
}

/// Raw rows: segments `(id, parent, first, tail, position, jump, inherited,
/// missing)` by id, ancestry `(segment, from, ancestor, to)` by segment and
/// from depth, compactions `(key, stop)` by key.
type RawCache = (
    Vec<(
        i64,
        Option<i64>,
        i64,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        Option<String>,
    )>,
    Vec<(i64, i64, i64, i64)>,
    Vec<(i64, Option<i64>)>,
);

impl CacheRows {
    fn new((segments, ancestry, compactions): RawCache) -> Self {
        let rank: std::collections::HashMap<i64, usize> =
            segments.iter().enumerate().map(|(i, s)| (s.0, i)).collect();
        let seg = |id: i64| rank[&id];
        let key = |k: i64| (seg(k >> 32), k & 0xffff_ffff);
        CacheRows {
            segments: segments
                .iter()
                .map(|(_, p, f, t, pos, j, c, m)| {
                    (p.map(seg), *f, *t, *pos, j.map(seg), c.map(key), m.clone())
                })
                .collect(),
            ancestry: ancestry
                .iter()
                .map(|&(s, f, a, t)| (seg(s), f, seg(a), t))
                .collect(),
            compactions: compactions
                .iter()
                .map(|&(c, stop)| (key(c), stop.map(key)))
                .collect(),
        }
    }
}

/// The placement is written once for both stores (`backend::branch_cache`):
/// the same log placed by an SQLite import and by a sync into PostgreSQL
/// (entry rows inserted in batches after placing) gives the same segments,
/// jumps, ancestry blocks and compaction stops, which SQLite's `check`
/// verifies against a rebuild from the log.
#[test]
fn the_branch_cache_is_placed_alike_on_sqlite_and_postgres() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("local.db");
    let shapes = [
        ("spread", TreeShape::Spread, true),
        ("regen", TreeShape::Regenerate { every: 3 }, false),
    ];
    for (id, tree, dangling_root) in shapes {
        let path = spec_file(
            dir.path(),
            &SessionSpec {
                id: id.to_owned(),
                created_ms: 1_748_736_000_000,
                cwd: "/work/team".into(),
                entries: 2500,
                forks: 60,
                compaction_every: 300,
                seed: 11,
                tree,
                dangling_root,
            },
        );
        let (v, status) = cli_json(&["--db", s(&db), "import", s(&path), "--quiet"]);
        assert_eq!(status, 0, "{v}");
    }
    // (`check` reports the entries above a dangling root as unreadable: the
    // chat without one is checked.)
    let (v, status) = cli_json(&["--db", s(&db), "check", "regen"]);
    assert_eq!((status, &v["ok"]), (0, &json!(true)), "{v}");
    let (v, status) = cli_json(&["--db", s(&db), "sync", "--to", &team.schema_url()]);
    assert_eq!(status, 0, "{v}");
    let local = rusqlite::Connection::open(&db).expect("open the SQLite archive");
    let mut conn = team.archive.conn().expect("conn");
    for (id, _, _) in shapes {
        let key: i64 = local
            .query_row(
                "SELECT session_key FROM sessions WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .expect("session");
        let all = |sql: &str| {
            let mut st = local.prepare(sql).expect("prepare");
            let rows: Vec<Vec<rusqlite::types::Value>> = st
                .query_map([key], |r| {
                    (0..r.as_ref().column_count()).map(|i| r.get(i)).collect()
                })
                .and_then(Iterator::collect)
                .expect("query");
            rows
        };
        let int = |v: &rusqlite::types::Value| match v {
            rusqlite::types::Value::Integer(i) => Some(*i),
            _ => None,
        };
        let text = |v: &rusqlite::types::Value| match v {
            rusqlite::types::Value::Text(t) => Some(t.clone()),
            _ => None,
        };
        let n = |v: &rusqlite::types::Value| int(v).expect("an integer");
        let ours = CacheRows::new((
            all(
                "SELECT segment_id, parent_segment, first_depth, tail_depth, position,
                        jump_segment, inherited_compaction, missing_root_parent
                 FROM segments WHERE session_key = ?1 ORDER BY segment_id",
            )
            .iter()
            .map(|r| {
                (
                    n(&r[0]),
                    int(&r[1]),
                    n(&r[2]),
                    n(&r[3]),
                    n(&r[4]),
                    int(&r[5]),
                    int(&r[6]),
                    text(&r[7]),
                )
            })
            .collect(),
            all(
                "SELECT a.segment_id, a.from_depth, a.ancestor_segment, a.to_depth
                 FROM segment_ancestry a JOIN segments s USING (segment_id)
                 WHERE s.session_key = ?1 ORDER BY a.segment_id, a.from_depth",
            )
            .iter()
            .map(|r| (n(&r[0]), n(&r[1]), n(&r[2]), n(&r[3])))
            .collect(),
            all(
                "SELECT entry_key, stop_key FROM compactions WHERE session_key = ?1
                 ORDER BY entry_key",
            )
            .iter()
            .map(|r| (n(&r[0]), int(&r[1])))
            .collect(),
        ));
        let team_key: i64 = conn
            .query_one("SELECT session_key FROM sessions WHERE id = $1", &[&id])
            .expect("team session")
            .get(0);
        let q =
            |conn: &mut postgres::Client, sql: &str| conn.query(sql, &[&team_key]).expect("query");
        let theirs = CacheRows::new((
            q(
                &mut conn,
                "SELECT segment_id, parent_segment, first_depth, tail_depth, position,
                          jump_segment, inherited_compaction, missing_root_parent
                   FROM segments WHERE session_key = $1 ORDER BY segment_id",
            )
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    r.get(1),
                    r.get(2),
                    r.get(3),
                    r.get(4),
                    r.get(5),
                    r.get(6),
                    r.get(7),
                )
            })
            .collect(),
            q(
                &mut conn,
                "SELECT segment_id, from_depth, ancestor_segment, to_depth
                   FROM segment_ancestry WHERE session_key = $1 ORDER BY segment_id, from_depth",
            )
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect(),
            q(
                &mut conn,
                "SELECT entry_key, stop_key FROM compactions WHERE session_key = $1
                   ORDER BY entry_key",
            )
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect(),
        ));
        assert!(
            ours.segments.len() > 60,
            "{id}: {} segments",
            ours.segments.len()
        );
        assert!(!ours.compactions.is_empty(), "{id}: no compactions");
        assert_eq!(
            dangling_root(&ours),
            id == "spread",
            "{id}: a dangling root as generated"
        );
        assert_eq!(ours, theirs, "{id}: SQLite's cache vs PostgreSQL's");
    }
}

/// Whether a segment of `rows` records a missing root parent.
fn dangling_root(rows: &CacheRows) -> bool {
    rows.segments.iter().any(|s| s.6.is_some())
}

/// A session imported with lines pi skips, synced to the team archive:
/// its contract, its kept lines and its open end go with it, so the team
/// archive's export is the file imported, byte for byte; `ls` shows the
/// same contracts on both.
#[test]
fn sync_carries_the_contract_and_the_kept_lines_and_export_stays_byte_identical() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let msg = |id: &str, parent: Option<&str>| {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2025-01-01T00:00:01.000Z",
               "message": {"role": "user", "content": "x"}})
        .to_string()
    };
    let lines = [
        "before the header".to_owned(),
        r#"{"type":"session","version":3,"id":"kept-lines","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#.to_owned(),
        msg("a", None),
        "{not json".to_owned(),
        String::new(),
        msg("a", None),
        msg("b", Some("a")),
    ];
    let file = dir.path().join("kept.jsonl");
    std::fs::write(&file, lines.join("\n")).expect("write");
    let sdk = dir.path().join("sdk.jsonl");
    std::fs::write(
        &sdk,
        format!(
            "{}\n{}\n{}\n",
            r#"{"type":"session","version":3,"id":"sdk-one","timestamp":"2025-01-02T00:00:00.000Z","cwd":"/p"}"#,
            msg("a", None),
            r#"{"type":"leaf","id":"l1","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","targetId":null}"#
        ),
    )
    .expect("write");
    let db = dir.path().join("local.db");
    let (v, status) = cli_json(&["--db", s(&db), "import", s(&file), s(&sdk)]);
    assert_eq!(status, 0, "{v}");
    let url = team.schema_url();
    let (v, status) = cli_json(&["--db", s(&db), "sync", "--to", &url]);
    assert_eq!(status, 0, "{v}");
    let contracts = |db: &str| {
        let (v, status) = cli_json(&["--db", db, "ls"]);
        assert_eq!(status, 0, "{v}");
        v["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .map(|r| (r["id"].clone(), r["contract"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(contracts(s(&db)), contracts(&url));
    assert!(contracts(&url).contains(&(json!("sdk-one"), json!("sdk"))));
    assert!(contracts(&url).contains(&(json!("kept-lines"), json!("app"))));
    let out = dir.path().join("out");
    let (v, status) = cli_json(&["--db", &url, "export", "kept-lines", "--out", s(&out)]);
    assert_eq!(status, 0, "{v}");
    let path = v["exported"][0]["path"].as_str().expect("path");
    assert_eq!(
        std::fs::read(path).expect("exported"),
        lines.join("\n").into_bytes(),
        "byte-identical from the team archive"
    );
    // A second sync writes the same.
    assert_eq!(cli_json(&["--db", s(&db), "sync", "--to", &url]).1, 0);
    let kept = team
        .archive
        .open_session("kept-lines")
        .expect("open")
        .kept_lines()
        .expect("kept");
    assert_eq!(kept.lines.len(), 4, "{kept:?}");
    assert_eq!(kept.open_end, Some(2));
}

/// A team archive of schema version 2 learns each session's contract from
/// its entries' types when it opens.
#[test]
fn postgres_migration_3_sets_each_sessions_contract() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = generated_file(dir.path(), "gen-sdk", 30);
    assert_eq!(
        cli_json(&["sync", "--to", &team.schema_url(), s(&file)]).1,
        0
    );
    let has_leaf = !team
        .archive
        .open_session("gen-sdk")
        .expect("open")
        .find_entries("leaf")
        .expect("leaves")
        .is_empty();
    {
        let mut conn = team.archive.conn().expect("conn");
        conn.batch_execute(
            "DROP TABLE usage_daily; DROP TABLE usage_facts;
             DROP FUNCTION usage_daily_add; DROP FUNCTION usage_daily_remove;
             DROP FUNCTION usage_facts_recount;
             ALTER TABLE sessions DROP COLUMN last_active_ms;
             DROP TABLE kept_lines;
             ALTER TABLE sessions DROP COLUMN contract;
             ALTER TABLE sessions DROP COLUMN open_end;
             UPDATE sessiontree_schema SET version = 2;",
        )
        .expect("downgrade");
    }
    let reopened = team.reopen();
    let want = if has_leaf { "sdk" } else { "app" };
    assert_eq!(
        reopened
            .open_session("gen-sdk")
            .expect("open")
            .contract()
            .expect("contract")
            .as_str(),
        want
    );
}

/// `stats` gives the same numbers on the team archive as on the SQLite
/// archive it was synced from, for every filter and grouping, a fork
/// counted once on both; `ls` orders both by last activity.
#[test]
fn stats_and_ls_agree_between_sqlite_and_the_team_archive() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(db) = fixture_archive(dir.path()) else {
        eprintln!("skipped: pi's fixtures are not there");
        return;
    };
    let app = test_fixture("cli/app/h2.jsonl");
    assert_eq!(
        cli_json(&["--db", s(&db), "import", s(&app), "--quiet"]).1,
        0
    );
    let before = cli_json(&["--db", s(&db), "stats", "--by", "model"]).0["rows"].clone();
    let (fork, status) = cli_json(&[
        "--db",
        s(&db),
        "fork",
        "ffae836b-9420-4060-ac13-7745215f90ff",
    ]);
    assert_eq!(status, 0, "{fork}");
    assert_eq!(
        cli_json(&["--db", s(&db), "stats", "--by", "model"]).0["rows"],
        before
    );
    let url = team.schema_url();
    let (synced, status) = cli_json(&["--db", s(&db), "sync", "--to", &url]);
    assert_eq!(status, 0, "{synced}");
    for args in [
        vec!["stats"],
        vec!["stats", "--by", "model"],
        vec!["stats", "--by", "day,model"],
        vec!["stats", "--by", "week", "--by", "project"],
        vec![
            "stats",
            "--since",
            "2025-11-21",
            "--until",
            "2025-12-08",
            "--by",
            "model,day",
        ],
        vec![
            "stats",
            "--since",
            "2025-12-09T00:00:00Z",
            "--by",
            "project,model",
        ],
        vec!["stats", "--cwd", "/Users/badlogic", "--by", "model"],
        // Each shared entry counted in the same session: the fork and its
        // original synced one after another, as on SQLite.
        vec!["stats", "--by", "session,day,model"],
        vec!["ls"],
    ] {
        let ours = cli_json(&[&["--db", s(&db)], args.as_slice()].concat());
        let theirs = cli_json(&[&["--db", url.as_str()], args.as_slice()].concat());
        assert_eq!(ours.1, 0, "{args:?}: {}", ours.0);
        assert_eq!(ours, theirs, "{args:?}");
    }
    assert_eq!(
        cli_json(&["--db", url.as_str(), "stats", "--by", "model"]).0["rows"],
        before,
        "the fork adds nothing on the team archive either"
    );
    // Deleting the original counts the fork's copies instead, on both.
    for db in [s(&db), url.as_str()] {
        let (deleted, status) =
            cli_json(&["--db", db, "delete", "ffae836b-9420-4060-ac13-7745215f90ff"]);
        assert_eq!(status, 0, "{deleted}");
        let after = cli_json(&["--db", db, "stats", "--by", "model"]).0;
        assert_eq!(after["rows"], before, "{db}");
    }
    for args in [vec!["stats", "--by", "session,day,model"], vec!["ls"]] {
        let ours = cli_json(&[&["--db", s(&db)], args.as_slice()].concat());
        let theirs = cli_json(&[&["--db", url.as_str()], args.as_slice()].concat());
        assert_eq!(ours, theirs, "{args:?} after the delete");
    }
}

/// Schema step 4 fills the usage facts, their per-day sums and the last
/// activity of a team archive written before it, as the writer does.
#[test]
fn migration_4_fills_usage_facts_as_the_writer_does() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(db) = fixture_archive(dir.path()) else {
        eprintln!("skipped: pi's fixtures are not there");
        return;
    };
    let (fork, status) = cli_json(&[
        "--db",
        s(&db),
        "fork",
        "d703a1a9-1b7b-4fb1-b512-c9738b1fe617",
    ]);
    assert_eq!(status, 0, "{fork}");
    let (synced, status) = cli_json(&["--db", s(&db), "sync", "--to", &team.schema_url()]);
    assert_eq!(status, 0, "{synced}");
    let queries = [
        sessiontree::usage::UsageQuery::default(),
        sessiontree::usage::UsageQuery {
            since_ms: Some(1_763_700_000_000),
            until_ms: Some(1_765_250_000_000),
            cwd_under: None,
        },
    ];
    let written: Vec<_> = queries
        .iter()
        .map(|q| team.archive.usage(q).expect("usage"))
        .collect();
    let listed = team.archive.list(&Default::default()).expect("list");
    {
        let mut conn = team.archive.conn().expect("conn");
        conn.batch_execute(
            "DROP TABLE usage_daily; DROP TABLE usage_facts;
             DROP FUNCTION usage_daily_add; DROP FUNCTION usage_daily_remove;
             DROP FUNCTION usage_facts_recount;
             ALTER TABLE sessions DROP COLUMN last_active_ms;
             UPDATE sessiontree_schema SET version = 3;",
        )
        .expect("back to step 3");
    }
    let reopened = team.reopen();
    for (q, before) in queries.iter().zip(&written) {
        assert_eq!(&reopened.usage(q).expect("usage"), before, "{q:?}");
    }
    assert_eq!(reopened.list(&Default::default()).expect("list"), listed);
}

fn new_team_session(id: &str) -> sessiontree::backend::sqlite::NewSession {
    sessiontree::backend::sqlite::NewSession::sdk(id, "2025-01-01T00:00:00.000Z", "/w")
}

/// The server's clock, Unix ms.
fn server_now_ms(archive: &PgArchive) -> i64 {
    archive
        .conn()
        .expect("conn")
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .expect("now")
        .get(0)
}

/// Sets session `id`'s claim row as a client would write it.
fn set_team_claim(archive: &PgArchive, id: &str, host: &str, pid: i64, expires_ms: i64) {
    archive
        .conn()
        .expect("conn")
        .execute(
            "INSERT INTO writer_claims (session_key, token, host, pid, expires_ms)
             SELECT session_key, 'planted', $2, $3, $4 FROM sessions WHERE id = $1
             ON CONFLICT (session_key) DO UPDATE SET token = excluded.token, host = excluded.host,
                 pid = excluded.pid, expires_ms = excluded.expires_ms",
            &[&id, &host, &pid, &expires_ms],
        )
        .expect("plant a claim");
}

#[test]
fn team_claims_run_by_the_server_clock_and_unclaim_clears_them() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    drop(
        team.archive
            .create_session(&new_team_session("c"))
            .expect("create"),
    );
    // A claim is written by the server's clock: one lease after its now.
    let mut held = team.archive.open_session("c").expect("open");
    held.claim_writer().expect("claim");
    let (expires, now): (i64, i64) = {
        let row = team
            .archive
            .conn()
            .expect("conn")
            .query_one(
                "SELECT expires_ms, (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                 FROM writer_claims JOIN sessions USING (session_key) WHERE id = 'c'",
                &[],
            )
            .expect("claim row");
        (row.get(0), row.get(1))
    };
    let lease = sessiontree::backend::claim::LEASE.as_millis() as i64;
    assert!(
        (expires - (now + lease)).abs() < 5_000,
        "expires {expires}, server now {now}"
    );
    drop(held);
    // A client whose clock runs a day ahead wrote its claim by that clock:
    // further ahead than any live writer's, so stale, and taken over.
    set_team_claim(
        &team.archive,
        "c",
        "fast-clock-host",
        7,
        server_now_ms(&team.archive) + 86_400_000,
    );
    team.archive
        .open_session("c")
        .expect("open")
        .claim_writer()
        .expect("a claim a day ahead blocks nothing");
    // A claim in its lease (a writer killed on another machine) is refused,
    // naming the command that clears it; `unclaim` does, naming the holder.
    set_team_claim(
        &team.archive,
        "c",
        "killed-host",
        4242,
        server_now_ms(&team.archive) + 20_000,
    );
    let err = team
        .archive
        .open_session("c")
        .expect("open")
        .claim_writer()
        .expect_err("held");
    assert!(err.to_string().contains("`sessiontree unclaim c`"), "{err}");
    let url = team.schema_url();
    let out = run_cli(["--db", url.as_str(), "unclaim", "c"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("process 4242 on killed-host"), "{text}");
    team.archive
        .open_session("c")
        .expect("open")
        .claim_writer()
        .expect("cleared");
}

#[test]
fn a_postgres_error_shows_the_servers_message_and_sqlstate() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    drop(
        team.archive
            .create_session(&new_team_session("dup"))
            .expect("create"),
    );
    // A unique violation provoked on purpose, through the crate's error type.
    let e = team
        .archive
        .conn()
        .expect("conn")
        .execute(
            "INSERT INTO sessions (id, created_at, cwd, header) SELECT id, created_at, cwd, header FROM sessions WHERE id = 'dup'",
            &[],
        )
        .expect_err("duplicate id");
    let err = sessiontree::Error::postgres("inserting a session", e);
    let text = err.to_string();
    assert!(
        text.contains("duplicate key value violates unique constraint"),
        "{text}"
    );
    assert!(text.contains("SQLSTATE 23505"), "{text}");
    assert!(
        text.contains("detail: Key (id)=(dup) already exists"),
        "{text}"
    );
    assert_eq!(err.sqlstate(), Some("23505"));
    // A database that does not exist: the server's FATAL reaches the user
    // at once, with its code, not "db error" after the pool's timeout.
    let missing = team
        .url
        .replacen("/postgres?", "/no_such_database_here?", 1);
    assert_ne!(
        missing, team.url,
        "the test server URL names database postgres"
    );
    let started = std::time::Instant::now();
    let out = run_cli(["--db", missing.as_str(), "ls"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(
        stderr.contains("no_such_database_here\" does not exist"),
        "{stderr}"
    );
    assert!(stderr.contains("SQLSTATE 3D000"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Needs no server: the connection cannot be made at all.
#[test]
fn a_bad_connection_option_fails_at_once_saying_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nowhere = dir.path().join("no-socket-here");
    let url = format!(
        "postgres://postgres@localhost/postgres?host={}",
        nowhere.display()
    );
    let started = std::time::Instant::now();
    let err = PgArchive::open(&url, Durability::Relaxed).expect_err("no server there");
    let took = started.elapsed();
    let text = err.to_string();
    assert!(took < Duration::from_secs(5), "took {took:?}: {text}");
    assert!(text.contains("no-socket-here"), "{text}");
    assert!(text.contains("No such file or directory"), "{text}");
}

/// The path from `from` (or the leaf) on a storage, as ids.
fn path_of(s: &dyn SessionStorage, from: Option<&str>) -> Vec<String> {
    s.path_to_root_or_compaction(from)
        .expect("path")
        .iter()
        .map(|e| Entry::id(e).to_owned())
        .collect()
}

#[test]
fn a_path_read_and_a_resume_are_one_round_trip_each() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    // Forks and compactions: the plan has a compaction stop to find.
    let file = generated_file(dir.path(), "trips", 3_000);
    sessiontree::sync::sync_jsonl_file(&file, &team.archive).expect("sync");
    let source = sessiontree::backend::jsonl::JsonlStorage::open(&file, Durability::Relaxed)
        .expect("source");
    let proxy = round_trips::Proxy::new(&team.schema_url());
    let archive = PgArchive::open(&proxy.url, Durability::Relaxed).expect("open via the proxy");
    proxy.take();

    let s = archive.open_session("trips").expect("open");
    assert_eq!(proxy.take(), 1, "opening a session");
    let (leaf, path) = s.active_path().expect("resume");
    assert_eq!(proxy.take(), 1, "a resume: the leaf and its path");
    let ids: Vec<String> = path.iter().map(|e| e.id().to_owned()).collect();
    assert_eq!((leaf, ids.clone()), active_path(&source));

    for from in [&ids[ids.len() / 2], &ids[0], &ids[ids.len() - 1]] {
        let fresh = archive.open_session("trips").expect("open");
        proxy.take();
        let read = path_of(&fresh, Some(from));
        assert_eq!(proxy.take(), 1, "a path read from {from}");
        assert_eq!(read, path_of(&source, Some(from)), "from {from}");
    }
    // Through the SDK: a resume is build_context on a fresh handle.
    let session = sessiontree::Session::new(archive.open_session("trips").expect("open"));
    proxy.take();
    session.build_context(None).expect("context");
    assert_eq!(proxy.take(), 1, "Session::build_context");
    // A missing start is one round trip too, and `not_found`.
    let err = s
        .path_to_root_or_compaction(Some("no-such-entry"))
        .expect_err("missing");
    assert_eq!(err.code().as_str(), "not_found", "{err}");
    assert!(proxy.take() <= 2, "a missing start");
}

#[test]
fn sync_writes_the_branch_cache_per_batch_not_per_fork() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let entries = 3 * SYNC_BATCH;
    let file = spec_file(
        dir.path(),
        &SessionSpec {
            id: "forky".into(),
            created_ms: 1_748_736_000_000,
            cwd: "/work/team".into(),
            entries,
            forks: entries / 10,
            compaction_every: 300,
            seed: 5,
            tree: TreeShape::Spread,
            dangling_root: false,
        },
    );
    let proxy = round_trips::Proxy::new(&team.schema_url());
    let archive = PgArchive::open(&proxy.url, Durability::Relaxed).expect("open via the proxy");
    proxy.take();
    let (_, copied) = sessiontree::sync::sync_jsonl_file(&file, &archive).expect("sync");
    let trips = proxy.take();
    assert_eq!(copied, entries as u64);
    // Placed entry by entry, a fork cost about sixteen round trips (its
    // segment row, numbering, ancestry, jump and compaction reads: some
    // 5,000 here); per batch, about thirty per batch remain, plus the stored
    // rows a fork reaches back to in an earlier batch (its parent's key,
    // segment and block), read once each.
    assert!(
        trips <= 600,
        "{trips} round trips to sync 3 batches holding 300 forks"
    );
    let source = sessiontree::backend::jsonl::JsonlStorage::open(&file, Durability::Relaxed)
        .expect("source");
    let copy = team.archive.open_session("forky").expect("copy");
    assert_eq!(texts(&source), texts(&copy));
    assert_eq!(active_path(&source), active_path(&copy));
    // Every entry's path is the contract's walk (the cache rows placed per
    // batch answer as the entry-by-entry ones did).
    for (i, e) in texts(&source).iter().enumerate().step_by(37) {
        let id = Entry::from_checked_text(e.clone()).id().to_owned();
        assert_eq!(
            path_of(&copy, Some(&id)),
            path_of(&source, Some(&id)),
            "entry {i}"
        );
    }
}

/// The hot standby's URL (`SESSIONTREE_TEST_PG_STANDBY`, a streaming replica
/// of the test server that `.ci/pg-cluster standby` starts), or `None`
/// (skipped, said on stderr).
fn standby_url() -> Option<String> {
    match std::env::var("SESSIONTREE_TEST_PG_STANDBY") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("skipped: no hot standby (SESSIONTREE_TEST_PG_STANDBY; `.ci/pg-cluster standby PRIMARY_DIR DIR` starts one)");
            None
        }
    }
}

/// Waits until the standby at `standby` has replayed everything the primary
/// at `primary` had written when called.
fn wait_for_replay(primary: &str, standby: &str) {
    let mut p = postgres::Client::connect(primary, postgres::NoTls).expect("primary");
    let lsn: String = p
        .query_one("SELECT pg_current_wal_lsn()::TEXT", &[])
        .expect("lsn")
        .get(0);
    let mut r = postgres::Client::connect(standby, postgres::NoTls).expect("standby");
    let caught_up = wait_until(Duration::from_secs(60), || {
        r.query_one(
            "SELECT pg_last_wal_replay_lsn() >= $1::TEXT::pg_lsn",
            &[&lsn],
        )
        .map(|row| row.get::<_, bool>(0))
        .unwrap_or(false)
    });
    assert!(caught_up, "the standby never replayed up to {lsn}");
}

#[test]
fn a_hot_standby_answers_every_read_command_and_refuses_every_write() {
    let Some(standby) = standby_url() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((team, _db)) = synced_pair(dir.path()) else {
        return;
    };
    let primary = team.schema_url();
    let replica = pg::url_in_schema(&standby, &team.schema);
    wait_for_replay(&team.url, &standby);
    let archive = PgArchive::open(&replica, Durability::Relaxed).expect("open the standby");
    assert!(archive.is_read_only());
    assert!(!team.archive.is_read_only());

    let (v, status) = cli_json(&["--db", &primary, "ls"]);
    assert_eq!(status, 0, "{v}");
    let ids: Vec<String> = v["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_owned())
        .collect();
    assert!(ids.len() >= 2, "{v}");
    same_on_both(&primary, &replica, &["ls"]);
    same_on_both(&primary, &replica, &["stats"]);
    same_on_both(&primary, &replica, &["search", "the"]);
    same_on_both(&primary, &replica, &["check"]);
    // Per session on one (the others are read by ls, search, check and
    // export above): the CI budget.
    for id in &ids[..1] {
        for args in [
            &["show", id][..],
            &["branch", id],
            &["context", id],
            &["tree", id],
            &["history", id],
            &["stats", id],
        ] {
            same_on_both(&primary, &replica, args);
        }
    }
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    assert_eq!(
        cli_json(&["--db", &primary, "export", "--all", "--out", s(&a)]).1,
        0
    );
    assert_eq!(
        cli_json(&["--db", &replica, "export", "--all", "--out", s(&b)]).1,
        0
    );
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    collect_files(&a, &mut fa);
    collect_files(&b, &mut fb);
    assert_eq!(fa.len(), ids.len());
    for (x, y) in fa.iter().zip(&fb) {
        assert_eq!(
            std::fs::read(x).ok(),
            std::fs::read(y).ok(),
            "{}",
            x.display()
        );
    }
    // rpc reads.
    let mut rpc = RpcChild::spawn(["--db", replica.as_str(), "rpc", ids[0].as_str()]);
    let leaf = rpc.call("getLeafId", json!({}));
    assert!(leaf.get("error").is_none(), "{leaf}");
    let entries = rpc.call("getEntries", json!({}));
    assert!(entries.get("error").is_none(), "{entries}");
    drop(rpc.finish());

    // Every write is refused before it reaches the server, naming the standby.
    let id = ids[0].as_str();
    let entry = {
        let (v, _) = cli_json(&["--db", &primary, "branch", id]);
        v["entries"][0]["id"].as_str().expect("id").to_owned()
    };
    let fixtures = fixtures_dir();
    let mut writes: Vec<Vec<&str>> = vec![
        vec!["--db", &replica, "label", id, &entry, "nope"],
        vec!["--db", &replica, "name", id, "nope"],
        vec!["--db", &replica, "delete", id],
        vec!["--db", &replica, "move", id, &entry],
    ];
    let src;
    if let Some(f) = &fixtures {
        src = s(f).to_owned();
        writes.push(vec!["sync", "--to", &replica, &src]);
    }
    for args in writes {
        let (v, status) = cli_json(&args);
        assert_ne!(status, 0, "{args:?}: {v}");
        // `delete` reports each session's failure; the others, the one error.
        let message = v["error"]["message"]
            .as_str()
            .or(v["failed"][0]["message"].as_str())
            .unwrap_or_default();
        assert!(message.contains("read-only hot standby"), "{args:?}: {v}");
    }
    // Nothing changed on either side.
    same_on_both(&primary, &replica, &["ls"]);
    // A schema the primary never created is not created on the standby.
    let other = pg::url_in_schema(&standby, &pg::fresh_schema());
    let err = PgArchive::open(&other, Durability::Relaxed).expect_err("no archive there");
    assert!(err.to_string().contains("schema version 0"), "{err}");
}

/// The sessions of the team archive marked `mark` (a half-done fork or
/// delete): their keys, and the entries they hold.
fn marked_team(archive: &PgArchive, mark: &str) -> (Vec<i64>, i64) {
    let mut conn = archive.conn().expect("conn");
    let keys: Vec<i64> = conn
        .query(
            "SELECT session_key FROM sessions WHERE pending = $1",
            &[&mark],
        )
        .expect("marked sessions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let rows: i64 = conn
        .query_one(
            "SELECT count(*) FROM entries WHERE session_key = ANY($1)",
            &[&keys],
        )
        .expect("their entries")
        .get(0);
    (keys, rows)
}

/// The listed session ids of a team archive, sorted.
fn team_ids(archive: &PgArchive) -> Vec<String> {
    let mut ids: Vec<String> = archive
        .list(&Default::default())
        .expect("list")
        .into_iter()
        .map(|s| s.metadata.id)
        .collect();
    ids.sort();
    ids
}

/// A fork and a delete on a team archive commit in batches (made small with
/// `SESSIONTREE_TEST_BATCH`, so that 2,000 entries take many), each killed
/// with kill -9 after some of its batches committed. Meanwhile the marked
/// session is invisible (list, totals, open, search), appends to another
/// session go on, and an open by another process leaves the live writer's
/// work alone (its claim); after the kill the next open removes the fork's
/// copy and finishes the delete, leaving no row of either.
#[test]
fn a_killed_team_fork_or_delete_is_invisible_and_the_next_open_finishes_it() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let total = 2_000i64;
    team.archive
        .write_session(|w| {
            w.begin(&new_team_session("big"))?;
            let mut parent: Option<String> = None;
            for i in 0..total {
                let id = format!("e{i:05}");
                w.push(&message_entry(
                    &id,
                    parent.as_deref(),
                    "user",
                    &format!("word{i} batch"),
                ))?;
                parent = Some(id);
            }
            Ok(())
        })
        .expect("write a long session");
    let mut other = team
        .archive
        .create_session(&new_team_session("other"))
        .expect("create other");
    other
        .append_entry(message_entry("o0", None, "user", "first"))
        .expect("append");
    let url = team.schema_url();
    let before = vec!["big".to_string(), "other".to_string()];
    let mut appended = 1;
    for (command, mark, batch) in [
        ("fork", "sessiontree:fork", "100:400"),
        ("delete", "sessiontree:delete", "1:400"),
    ] {
        let mut child = Command::new(bin())
            .args(["--db", &url, command, "big"])
            .env("SESSIONTREE_TEST_BATCH", batch)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        // Some batches in and some not: committed rows of a marked session.
        let half = wait_until(Duration::from_secs(120), || {
            let (keys, rows) = marked_team(&team.archive, mark);
            keys.len() == 1
                && match command {
                    "fork" => rows > 300 && rows < total - 300,
                    _ => rows < total - 300 && rows > 300,
                }
        });
        assert!(half, "{command}: never half done (one transaction?)");
        // Another session's writer is not held up: its appends go on.
        for _ in 0..5 {
            let t = std::time::Instant::now();
            other
                .append_entry(message_entry(
                    &format!("o{appended}"),
                    Some(&format!("o{}", appended - 1)),
                    "user",
                    "during",
                ))
                .expect("append during");
            appended += 1;
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{command}: append waited {:?}",
                t.elapsed()
            );
        }
        // An open by another process leaves a live writer's work alone.
        drop(team.reopen());
        assert_eq!(
            marked_team(&team.archive, mark).0.len(),
            1,
            "{command}: taken from a live writer"
        );
        assert!(
            child.try_wait().expect("child").is_none(),
            "{command} ended before it was killed"
        );
        let _ = child.kill();
        let _ = child.wait();
        let (keys, _) = marked_team(&team.archive, mark);
        assert_eq!(keys.len(), 1, "{command}: the half-done session is gone");
        // Invisible while half done.
        let expected: Vec<String> = match command {
            "fork" => before.clone(),
            _ => vec!["other".to_string()],
        };
        assert_eq!(
            team_ids(&team.archive),
            expected,
            "{command}: a half-done session is listed"
        );
        assert_eq!(
            team.archive.totals().expect("totals").sessions,
            expected.len() as i64
        );
        let hits = team
            .archive
            .search("batch", None, None, None, 10_000)
            .expect("search");
        let from_big = if command == "fork" { total as usize } else { 0 };
        assert!(
            hits.iter().all(|h| h.session_id == "big") && hits.len() == from_big,
            "{command}: {} hits, some of the half-done session",
            hits.len()
        );
        if command == "delete" {
            assert!(!team.archive.has_session("big").expect("has"));
        }
        // Committed in several transactions, not one.
        if command == "fork" {
            let xids: i64 = team
                .archive
                .conn()
                .expect("conn")
                .query_one(
                    "SELECT count(DISTINCT xmin::text) FROM entries WHERE session_key = $1",
                    &[&keys[0]],
                )
                .expect("xids")
                .get(0);
            assert!(xids > 2, "the fork's rows came in {xids} transactions");
        }
        assert_eq!(
            team_ids(&team.archive),
            expected,
            "{command}: listed after the kill"
        );
        // The next open finishes it: no row of the half-done session is left.
        let reopened = team.reopen();
        assert_eq!(
            marked_team(&reopened, mark),
            (Vec::new(), 0),
            "{command}: not finished at open"
        );
        assert_eq!(team_ids(&reopened), expected);
        let rows: i64 = reopened
            .conn()
            .expect("conn")
            .query_one(
                "SELECT (SELECT count(*) FROM entries) + (SELECT count(*) FROM message_text)
                      + (SELECT count(*) FROM writer_claims WHERE session_key = $1)",
                &[&keys[0]],
            )
            .expect("rows")
            .get(0);
        let big = if command == "fork" { 2 * total } else { 0 };
        assert_eq!(
            rows,
            big + 2 * appended as i64,
            "{command}: rows of the half-done session are left"
        );
        let found = reopened
            .check_findings(None, &mut |_, _| {})
            .expect("check");
        assert!(found.problems.is_empty(), "{command}: {:?}", found.problems);
    }
    assert_eq!(team_count(&team.archive, "other"), appended as usize);
}

/// A sync's batch sums its usage by day itself (schema step 8), and the sums
/// are the per-row trigger's bit for bit: the same rows, summed again by the
/// trigger one fact at a time in insertion order, give the same doubles.
#[test]
fn a_syncs_usage_by_day_is_the_triggers_sum_bit_for_bit() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = generated_file(dir.path(), "daily", 3 * SYNC_BATCH);
    sessiontree::sync::sync_jsonl_file(&file, &team.archive).expect("sync");
    type Daily = Vec<(i64, String, i64, [u64; 5])>;
    let daily = |conn: &mut postgres::Client| -> Daily {
        conn.query(
            "SELECT day, model, entries, input, output, cache_read, cache_write, cost
               FROM usage_daily ORDER BY day, model",
            &[],
        )
        .expect("usage_daily")
        .iter()
        .map(|r| {
            let f = |i: usize| r.get::<_, f64>(i).to_bits();
            (r.get(0), r.get(1), r.get(2), [f(3), f(4), f(5), f(6), f(7)])
        })
        .collect()
    };
    let mut conn = team.archive.conn().expect("conn");
    let synced = daily(&mut conn);
    let counted: i64 = conn
        .query_one("SELECT count(*) FROM usage_facts WHERE counted", &[])
        .expect("count")
        .get(0);
    assert_eq!(synced.iter().map(|r| r.2).sum::<i64>(), counted);
    assert!(
        synced.iter().any(|r| r.2 > SYNC_BATCH as i64 / 10),
        "a row summed across batches: {synced:?}"
    );
    conn.batch_execute(
        "DELETE FROM usage_daily;
         CREATE TEMP TABLE was_counted AS SELECT fact_key FROM usage_facts WHERE counted;
         UPDATE usage_facts SET counted = FALSE WHERE counted;
         DO $$ DECLARE k BIGINT; BEGIN
             FOR k IN SELECT fact_key FROM was_counted ORDER BY fact_key LOOP
                 UPDATE usage_facts SET counted = TRUE WHERE fact_key = k;
             END LOOP;
         END $$;",
    )
    .expect("sum again by the trigger");
    assert_eq!(daily(&mut conn), synced);
}

/// PostgreSQL's `check` does what SQLite's does beyond each session's
/// replay: it compares each usage day row with the sum of its counted facts
/// (the sync sums them itself), and finds the rows of every table whose
/// session, entry or segment is gone, naming each. A fork and the delete of
/// its source (which moves the counting to the fork's copies) leave nothing
/// to find; a changed day row is named; a session row deleted by hand with
/// the foreign keys off leaves orphans in every table it had rows in.
#[test]
fn a_team_check_names_a_changed_day_sum_and_orphan_rows_and_nothing_after_fork_and_delete() {
    let Some(team) = pg::TempArchive::new() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = generated_file(dir.path(), "source", 450);
    sessiontree::sync::sync_jsonl_file(&file, &team.archive).expect("sync");
    let url = team.schema_url();
    let (v, status) = cli_json(&["--db", &url, "fork", "source"]);
    assert_eq!(status, 0, "{v}");
    let fork = v["session"].as_str().expect("new id").to_owned();
    {
        // A label and a leaf move, so that every table has rows of the fork.
        let mut s = team.archive.open_session(&fork).expect("open the fork");
        let first = s.entries(0, Some(1)).expect("entries")[0].id().to_owned();
        let leaf = s.leaf_id().expect("leaf");
        s.append_entry(
            Entry::from_value(&json!({"type": "label", "id": "lab00001", "parentId": leaf,
                "timestamp": "2025-06-01T00:00:00.000Z", "targetId": first, "label": "keep"}))
            .expect("label entry"),
        )
        .expect("label");
        s.set_leaf_id(Some(&first)).expect("move the leaf");
    }
    let (v, status) = cli_json(&["--db", &url, "delete", "source"]);
    assert_eq!(status, 0, "{v}");
    let check = |session: Option<&str>| {
        team.archive
            .check_findings(session, &mut |_, _| {})
            .expect("check")
            .problems
    };
    assert_eq!(check(None), Vec::<String>::new(), "after fork and delete");
    let mut conn = team.archive.conn().expect("conn");
    let counted: i64 = conn
        .query_one("SELECT count(*) FROM usage_facts WHERE counted", &[])
        .expect("counted")
        .get(0);
    assert!(counted > 0, "the fork's copies are counted now");

    // A changed day row is named, whole-archive and for its session.
    let changed = conn
        .query_one(
            "UPDATE usage_daily SET cost = cost + 0.01
              WHERE (session_key, day, model) = (SELECT session_key, day, model FROM usage_daily
                                                  ORDER BY day, model LIMIT 1)
              RETURNING day, model",
            &[],
        )
        .expect("change a day row");
    let (day, model): (i64, String) = (changed.get(0), changed.get(1));
    let named = format!(
        "session {fork}: usage of {} ({model}) is ",
        sessiontree::usage::day_string(day)
    );
    for session in [None, Some(fork.as_str())] {
        let found = check(session);
        assert!(
            found.len() == 1 && found[0].starts_with(&named),
            "{session:?}: {found:?}"
        );
    }
    conn.execute(
        "UPDATE usage_daily SET cost = cost - 0.01 WHERE day = $1 AND model = $2",
        &[&day, &model],
    )
    .expect("change it back");
    assert_eq!(check(None), Vec::<String>::new(), "changed back");

    // The fork's session row deleted by hand with the foreign keys off: each
    // table it had rows in is named, and no other.
    let key: i64 = conn
        .query_one("SELECT session_key FROM sessions WHERE id = $1", &[&fork])
        .expect("key")
        .get(0);
    let tables = [
        ("entries", "entries"),
        ("message_text", "message_text (search)"),
        ("compactions", "compactions"),
        ("leaf_events", "leaf_events"),
        ("segments", "segments"),
        ("segment_ancestry", "segment_ancestry"),
        ("labels", "labels"),
        ("usage_facts", "usage_facts"),
        ("usage_daily", "usage_daily"),
        ("kept_lines", "kept_lines"),
        ("sync_sources", "sync_sources"),
        ("writer_claims", "writer_claims"),
    ];
    let mut expected = Vec::new();
    for (table, name) in tables {
        let n: i64 = conn
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE session_key = $1"),
                &[&key],
            )
            .expect("count")
            .get(0);
        if n > 0 {
            expected.push(format!(
                "{name}: {n} rows belong to no stored session, segment or entry"
            ));
        }
    }
    for must in [
        "entries:",
        "message_text (search):",
        "compactions:",
        "leaf_events:",
        "segments:",
        "labels:",
        "usage_facts:",
        "usage_daily:",
    ] {
        assert!(
            expected.iter().any(|e| e.starts_with(must)),
            "the fork has no {must} rows: {expected:?}"
        );
    }
    conn.batch_execute(&format!(
        "SET session_replication_role = replica;
         DELETE FROM sessions WHERE session_key = {key};
         RESET session_replication_role;"
    ))
    .expect("delete the session row past its foreign keys");
    let mut found = check(None);
    found.sort();
    expected.sort();
    assert_eq!(found, expected);
}
