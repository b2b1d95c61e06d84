//! Memory bounds a caller relies on, measured as the child process's peak
//! resident set (`VmHWM`): an rpc answer of any length is written as it is
//! read, so `getEntries` and `findEntries` over a whole large session grow
//! the process by about SQLite's page cache, not by the size of the answer.
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

#[test]
fn rpc_lists_of_entries_stream_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mb = session_mb();
    let report = sessiontree_bench::gen::generate(
        &dir.path().join("files"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Linear,
            entries: mb * 1_000_000 / 900,
            seed: 5,
            ..Default::default()
        },
    )
    .unwrap();
    let session = &report.sessions[0];
    let db = dir.path().join("m.db");
    import_jsonl(
        &Archive::open(&db, Durability::Relaxed).unwrap(),
        &session.path,
    )
    .unwrap();

    let mut rpc = RpcChild::spawn([
        std::ffi::OsStr::new("--db"),
        db.as_os_str(),
        std::ffi::OsStr::new("rpc"),
        std::ffi::OsStr::new(&session.id),
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
        assert!(listed > session.entries / 2, "{method}: {listed} entries");
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
