//! Memory bounds a caller relies on, measured as the child process's peak
//! resident set (`VmHWM`): an rpc answer of any length is written as it is
//! read, so `getEntries` and `findEntries` over a whole large session grow
//! the process by about SQLite's page cache, not by the size of the answer;
//! a whole-session `fork` and `check` stay far below the session's size.
//! CI-sized by default; `MEMORY_MB=1000` runs it on a session of about 1 GB.

mod support;

use serde_json::json;
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::import_jsonl;
use sessiontree::Durability;
use std::time::Duration;
use support::*;

fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse().ok())
        })
        .unwrap_or(0)
}

fn session_mb() -> usize {
    std::env::var("MEMORY_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

/// Runs the binary with `args` to the end, polling its peak RSS (`VmHWM`
/// only grows, so the last reading before it exits is its peak); returns
/// whether it succeeded and the peak in MB.
fn run_measured(args: &[&std::ffi::OsStr]) -> (bool, u64) {
    let mut child = std::process::Command::new(bin())
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut peak = 0;
    loop {
        peak = peak.max(peak_rss_kb(child.id()));
        if let Some(status) = child.try_wait().unwrap() {
            return (status.success(), peak / 1024);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A whole-session `fork` copies the log as it reads it, and `check`
/// verifies a session without holding its text: both stay far below the
/// session's size.
#[test]
fn fork_and_check_of_a_large_session_take_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mb = session_mb();
    let (db, id) = large_archive(dir.path(), mb);
    let os = |s: &str| std::ffi::OsString::from(s);
    // A fork holds two connections' page caches (16 MB each) and a zstd
    // context, whatever the session's size; check holds each entry's id and
    // place in the tree (about 100 bytes an entry), not its text.
    let bounds = [
        (vec![os("fork"), os(&id)], 80),
        (vec![os("check")], 48 + mb as u64 / 4),
    ];
    for (command, bound_mb) in bounds {
        let mut args = vec![os("--db"), db.clone().into_os_string()];
        args.extend(command.iter().cloned());
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (ok, peak_mb) = run_measured(&refs);
        assert!(ok, "{command:?} failed");
        eprintln!("{command:?} on a {mb} MB session: peak RSS {peak_mb} MB");
        assert!(
            peak_mb < bound_mb,
            "{command:?} peaked at {peak_mb} MB for a {mb} MB session (bound {bound_mb} MB)"
        );
    }
}

/// `sql` writes its rows as SQLite makes them: the peak RSS of a query
/// whose answer is ten times longer grows by less than SQLite's page cache,
/// where holding the result grew it by several times the answer.
#[test]
fn sql_streams_its_rows_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A third of the others' size keeps it cheap in CI: holding the result
    // still grows the process by several times the larger answer.
    let mb = (session_mb() / 3).max(4);
    let (db, _) = large_archive(dir.path(), mb);
    let entries = mb * 1_000_000 / 900;
    let os = |s: &str| std::ffi::OsString::from(s);
    let mut peaks = Vec::new();
    for rows in [entries / 10, entries] {
        let query = format!("SELECT entry_text(entry_key) FROM entries LIMIT {rows}");
        let args = [
            os("--db"),
            db.clone().into_os_string(),
            os("--json"),
            os("sql"),
            os(&query),
        ];
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (ok, peak_mb) = run_measured(&refs);
        assert!(ok, "sql failed");
        eprintln!("sql of {rows} entries' text ({mb} MB session): peak RSS {peak_mb} MB");
        peaks.push(peak_mb);
    }
    // The larger answer is about 0.9 × `mb` MB longer.
    assert!(
        peaks[1] < peaks[0] + 12,
        "sql grew from {} MB to {} MB with an answer {} MB longer",
        peaks[0],
        peaks[1],
        mb * 9 / 10
    );
}

/// An archive holding one generated linear session of about `mb` MB.
fn large_archive(dir: &std::path::Path, mb: usize) -> (std::path::PathBuf, String) {
    let report = sessiontree_bench::gen::generate(
        &dir.join("files"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Linear,
            entries: mb * 1_000_000 / 900,
            seed: 5,
            ..Default::default()
        },
    )
    .unwrap();
    let session = &report.sessions[0];
    let db = dir.join("m.db");
    import_jsonl(
        &Archive::open(&db, Durability::Relaxed).unwrap(),
        &session.path,
    )
    .unwrap();
    (db, session.id.clone())
}

#[test]
fn rpc_lists_of_entries_stream_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mb = session_mb();
    let (db, id) = large_archive(dir.path(), mb);
    let entries = mb * 1_000_000 / 900;
    let mut rpc = RpcChild::spawn([
        std::ffi::OsStr::new("--db"),
        db.as_os_str(),
        std::ffi::OsStr::new("rpc"),
        std::ffi::OsStr::new(&id),
    ]);
    let (_, line) = rpc.request("getSessionStats", json!({}));
    rpc.send_raw(format!("{line}\n").as_bytes());
    rpc.recv(Duration::from_secs(30)).expect("stats");
    let baseline = peak_rss_kb(rpc.pid());
    for (method, params) in [
        ("getEntries", json!({})),
        ("findEntries", json!({"type": "message"})),
    ] {
        let (_, line) = rpc.request(method, params);
        rpc.send_raw(format!("{line}\n").as_bytes());
        let answer = rpc.recv(Duration::from_secs(120)).expect("an answer");
        let listed = answer["value"].as_array().map_or(0, Vec::len);
        assert!(listed > entries / 2, "{method}: {listed} entries");
        let grown_mb = peak_rss_kb(rpc.pid()).saturating_sub(baseline) / 1024;
        eprintln!(
            "{method}: {listed} entries ({mb} MB session), peak RSS grew {grown_mb} MB over {} MB",
            baseline / 1024
        );
        // SQLite's page cache is 16 MB; the answer itself is about `mb` MB.
        assert!(
            grown_mb < 24,
            "{method} grew the process by {grown_mb} MB for a {mb} MB answer"
        );
    }
}

/// No command recurses over tree depth or fork nesting: a 30,000-entry
/// caterpillar (a dead-end side entry at every spine entry, so every fork is
/// nested under the previous one) goes through `tree`, `check`, `export`,
/// `fork` (whole, and at the deepest entry), `branch` and `context`.
/// `DEEP_ENTRIES=1000000` runs the full size.
#[test]
fn every_command_takes_deep_and_bushy_trees() {
    let entries: usize = std::env::var("DEEP_ENTRIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30_000);
    let dir = tempfile::tempdir().unwrap();
    let report = sessiontree_bench::gen::generate(
        &dir.path().join("files"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Caterpillar,
            entries,
            fork_every: Some(1),
            compaction_every: 0,
            seed: 9,
            ..Default::default()
        },
    )
    .unwrap();
    let session = &report.sessions[0];
    assert!(session.max_depth > entries / 3, "{:?}", session.max_depth);
    let db = dir.path().join("deep.db");
    import_jsonl(
        &Archive::open(&db, Durability::Relaxed).unwrap(),
        &session.path,
    )
    .unwrap();
    let out = dir.path().join("out");
    let db_arg = db.display().to_string();
    let file_arg = session.path.display().to_string();
    let out_arg = out.display().to_string();
    let leaf = session.leaf_id.clone().expect("a leaf");
    for args in [
        vec!["tree", &session.id],
        vec!["tree", &session.id, "--all"],
        vec!["tree", &file_arg],
        vec!["check"],
        vec!["check", &file_arg],
        vec!["export", "--all", "--out", &out_arg],
        vec!["fork", &session.id],
        vec!["fork", &session.id, "--entry", &leaf, "--position", "at"],
        vec!["branch", &session.id],
        vec!["context", &session.id],
    ] {
        let result = std::process::Command::new(bin())
            .args(["--db", &db_arg])
            .args(&args)
            .stdout(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            result.status.success(),
            "{args:?}: {}\n{}",
            result.status,
            String::from_utf8_lossy(&result.stderr)
        );
    }
}

/// A linear session of `entries` entries without compactions (its active
/// path is the whole log), in an archive; its id, and the id of the entry
/// a tenth of the way down (a path a tenth as long).
fn path_archive(dir: &std::path::Path, entries: usize) -> (std::path::PathBuf, String, String) {
    let report = sessiontree_bench::gen::generate(
        &dir.join("files"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Linear,
            entries,
            compaction_every: 0,
            seed: 7,
            ..Default::default()
        },
    )
    .unwrap();
    let session = &report.sessions[0];
    let db = dir.join("p.db");
    import_jsonl(
        &Archive::open(&db, Durability::Relaxed).unwrap(),
        &session.path,
    )
    .unwrap();
    // Line 0 is the header.
    let text = std::fs::read_to_string(&session.path).unwrap();
    let line = text.lines().nth(entries / 10 + 1).unwrap();
    let tenth: serde_json::Value = serde_json::from_str(line).unwrap();
    let tenth = tenth["id"].as_str().unwrap().to_owned();
    (db, session.id.clone(), tenth)
}

/// Every whole-path answer (CLI `branch` and `context`, both forms; rpc
/// `getBranch`, `getEntriesToFork`, `getPathToRootOrCompaction`,
/// `buildContext`) is written as the path is read: the process's peak RSS
/// for a path ten times longer grows by far less than the path (about
/// 36 MB here), where holding it grew it by more than the path.
/// `SESSIONTREE_SCALE_TESTS=1` runs it on a 1,000,000-entry path.
#[test]
fn whole_path_answers_stream_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    let entries = if std::env::var_os("SESSIONTREE_SCALE_TESTS").is_some() {
        1_000_000
    } else {
        40_000
    };
    let dir = tempfile::tempdir().unwrap();
    let (db, id, tenth) = path_archive(dir.path(), entries);
    let os = |s: &str| std::ffi::OsString::from(s);
    for command in [
        vec!["--json", "branch"],
        vec!["branch"],
        vec!["--json", "context"],
        vec!["context"],
    ] {
        let mut peaks = Vec::new();
        for from in [Some(tenth.as_str()), None] {
            let mut args = vec![os("--db"), db.clone().into_os_string()];
            args.extend(command.iter().map(|a| os(a)));
            args.push(os(&id));
            if let Some(from) = from {
                args.extend([os("--from"), os(from)]);
            }
            let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
            let (ok, peak_mb) = run_measured(&refs);
            assert!(ok, "{command:?} failed");
            peaks.push(peak_mb);
        }
        eprintln!(
            "{command:?}: peak RSS {} MB for a tenth of the path, {} MB for all {entries} entries",
            peaks[0], peaks[1]
        );
        assert!(
            peaks[1] < peaks[0] + 12,
            "{command:?} grew from {} MB to {} MB with a path ten times longer",
            peaks[0],
            peaks[1]
        );
    }
    let mut rpc = RpcChild::spawn([
        std::ffi::OsStr::new("--db"),
        db.as_os_str(),
        std::ffi::OsStr::new("rpc"),
        std::ffi::OsStr::new(&id),
    ]);
    // The leaf is the last entry of a linear session.
    let leaf = rpc.call("getLeafId", json!({}))["value"]
        .as_str()
        .unwrap()
        .to_owned();
    rpc.call("getSessionStats", json!({}));
    let baseline = peak_rss_kb(rpc.pid());
    for (method, params) in [
        ("getBranch", json!({})),
        (
            "getEntriesToFork",
            json!({"entryId": leaf, "position": "at"}),
        ),
        ("getPathToRootOrCompaction", json!({"leafId": leaf})),
        ("buildContext", json!({})),
    ] {
        let (_, line) = rpc.request(method, params);
        rpc.send_raw(format!("{line}\n").as_bytes());
        let answer = rpc.recv(Duration::from_secs(600)).expect("an answer");
        let value = &answer["value"];
        let listed = value
            .as_array()
            .or_else(|| value["messages"].as_array())
            .map_or(0, Vec::len);
        assert!(
            listed >= entries / 2,
            "{method}: {listed} of {entries}: {answer}"
        );
        let grown_mb = peak_rss_kb(rpc.pid()).saturating_sub(baseline) / 1024;
        eprintln!(
            "{method}: {listed} entries, peak RSS grew {grown_mb} MB over {} MB",
            baseline / 1024
        );
        // SQLite's page cache is 16 MB; the answer is about 36 MB.
        assert!(
            grown_mb < 20,
            "{method} grew the process by {grown_mb} MB for a {entries}-entry path"
        );
    }
}
