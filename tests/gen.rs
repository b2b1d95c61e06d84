//! The workload generator (`sessiontree::gen`, `sessiontree gen`) and the
//! benchmark command (`sessiontree bench`): deterministic output, files that
//! the JSONL backend opens and that import into SQLite with a clean check,
//! and a `bench --quick` smoke run whose JSON report has the expected keys.

use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::import_jsonl;
use sessiontree::gen::{generate, GenOptions, GenReport, SessionIds, Shape, SplitMix64};
use sessiontree::{Durability, Session, SessionStorage};
use std::path::{Path, PathBuf};
use std::process::Command;

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("listing") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn gen(dir: &Path, shape: Shape, entries: usize, seed: u64) -> GenReport {
    generate(
        dir,
        &GenOptions {
            shape,
            entries,
            seed,
            compaction_every: 300,
            ..GenOptions::default()
        },
    )
    .expect("generating")
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    for shape in [Shape::Linear, Shape::Forked, Shape::Archive] {
        gen(&a.join(shape.as_str()), shape, 2500, 11);
        gen(&b.join(shape.as_str()), shape, 2500, 11);
        gen(&c.join(shape.as_str()), shape, 2500, 12);
    }
    let rel = |root: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        files_under(root)
            .into_iter()
            .map(|p| {
                let bytes = std::fs::read(&p).expect("reading");
                (p.strip_prefix(root).expect("under root").to_owned(), bytes)
            })
            .collect()
    };
    let (fa, fb, fc) = (rel(&a), rel(&b), rel(&c));
    assert!(!fa.is_empty());
    assert_eq!(fa, fb, "same seed must write identical files");
    assert_ne!(fa, fc, "another seed must write other files");
}

#[test]
fn files_open_in_jsonl_and_import_into_sqlite_with_a_clean_check() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let archive =
        Archive::open(tmp.path().join("archive.db"), Durability::Relaxed).expect("archive");
    let mut total_entries = 0;
    let mut total_bytes = 0;
    for (shape, entries) in [
        (Shape::Linear, 1500),
        (Shape::Forked, 4000),
        (Shape::Archive, 3000),
    ] {
        let report = gen(&tmp.path().join(shape.as_str()), shape, entries, 5);
        assert_eq!(
            report.total_entries(),
            entries,
            "{shape:?}: exact entry count"
        );
        if shape == Shape::Archive {
            assert!(report.sessions.len() > 10, "an archive has many sessions");
        }
        if shape == Shape::Forked {
            let s = &report.sessions[0];
            assert!(s.forks >= 30, "forks made: {}", s.forks);
            assert!(s.compactions >= 5, "compactions: {}", s.compactions);
            assert!(
                s.max_depth > entries / 3,
                "the tree stays deep: {}",
                s.max_depth
            );
        }
        for s in &report.sessions {
            // pi's layout: <root>/--<cwd>--/<createdAt>_<id>.jsonl
            let name = s.path.file_name().and_then(|n| n.to_str()).expect("name");
            assert!(name.ends_with(&format!("_{}.jsonl", s.id)), "{name}");
            assert!(!name.contains(':'), "{name}");
            let dir = s
                .path
                .parent()
                .and_then(|d| d.file_name())
                .and_then(|d| d.to_str());
            assert_eq!(
                dir,
                Some(sessiontree::backend::jsonl::encode_cwd(&s.cwd).as_str())
            );
            assert_eq!(std::fs::metadata(&s.path).expect("file").len(), s.bytes);

            let j = JsonlStorage::open(&s.path, Durability::Relaxed)
                .expect("opens in the JSONL backend");
            assert_eq!(j.entry_count().expect("count"), s.entries);
            assert_eq!(j.leaf_id().expect("leaf"), s.leaf_id);
            let ctx = Session::new(j).build_context(None).expect("context");
            assert!(s.entries < 10 || !ctx.messages.is_empty());

            let imported = import_jsonl(&archive, &s.path).expect("imports into SQLite");
            assert_eq!(imported.entries as usize, s.entries);
            total_entries += s.entries;
            total_bytes += s.bytes;
        }
        // Paths from random entries agree between the two backends.
        let main = report
            .sessions
            .iter()
            .max_by_key(|s| s.entries)
            .expect("a session");
        let j = JsonlStorage::open(&main.path, Durability::Relaxed).expect("open");
        let q = archive.open_session(&main.id).expect("session");
        let ids = SessionIds::new(main.seed);
        let mut rng = SplitMix64::new(99);
        for _ in 0..25 {
            let id = ids.id(rng.below(main.entries as u64) as u32);
            let a = j.path_to_root_or_compaction(Some(&id)).expect("jsonl path");
            let b = q
                .path_to_root_or_compaction(Some(&id))
                .expect("sqlite path");
            assert!(!a.is_empty());
            assert_eq!(a, b, "path from {id}");
        }
    }
    let problems = archive.check(None).expect("check runs");
    assert!(problems.is_empty(), "check found: {problems:?}");
    let per_entry = total_bytes as f64 / total_entries as f64;
    assert!(
        (600.0..1300.0).contains(&per_entry),
        "entries average about 900 B, got {per_entry:.0}"
    );
}

#[test]
fn lines_are_what_json_stringify_writes() {
    // Every line must survive JSON.parse + JSON.stringify byte for byte.
    let has_node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_node {
        eprintln!("node is not available; skipping the JSON.stringify round trip");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let report = gen(tmp.path(), Shape::Forked, 3000, 3);
    let script = "const fs=require('fs');let bad=0,n=0;for(const f of process.argv.slice(1)){for(const l of fs.readFileSync(f,'utf8').split('\\n')){if(!l)continue;n++;if(JSON.stringify(JSON.parse(l))!==l){bad++;if(bad<3)console.error(l.slice(0,200));}}}console.log(n+' '+bad);";
    let out = Command::new("node")
        .arg("-e")
        .arg(script)
        .arg(&report.sessions[0].path)
        .output()
        .expect("running node");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text.split_whitespace();
    let lines: usize = parts
        .next()
        .and_then(|x| x.parse().ok())
        .expect("line count");
    let bad: usize = parts
        .next()
        .and_then(|x| x.parse().ok())
        .expect("mismatch count");
    assert_eq!(lines, 3001);
    assert_eq!(bad, 0, "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn gen_command_prints_what_it_wrote() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_sessiontree"))
        .args([
            "--json",
            "gen",
            "--shape",
            "forked",
            "--entries",
            "800",
            "--forks",
            "8",
            "--seed",
            "7",
            "--out",
        ])
        .arg(tmp.path())
        .output()
        .expect("running gen");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["entries"], 800);
    let path = v["sessions"][0]["path"].as_str().expect("path");
    assert!(Path::new(path).is_file());
    assert_eq!(v["sessions"][0]["forks"], 8);
}

#[test]
fn bench_quick_smoke_run_writes_a_report() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out_dir = tmp.path().join("report");
    let out = Command::new(env!("CARGO_BIN_EXE_sessiontree"))
        .args([
            "--json", "bench", "--quick", "--sizes", "300", "--budget", "0.01", "--out",
        ])
        .arg(&out_dir)
        .arg("--work")
        .arg(tmp.path().join("work"))
        .output()
        .expect("running bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report on stdout");
    for key in [
        "machine",
        "config",
        "operations",
        "datasets",
        "results",
        "ratios",
        "checks",
        "rss",
        "targets",
    ] {
        assert!(v.get(key).is_some(), "report lacks {key}");
    }
    let results = v["results"].as_array().expect("results");
    for op in [
        "resume",
        "path",
        "leaf_move",
        "append",
        "import",
        "list",
        "search",
    ] {
        for backend in ["sqlite", "jsonl"] {
            if op == "import" && backend == "jsonl" {
                continue;
            }
            assert!(
                results
                    .iter()
                    .any(|r| r["op"] == op && r["backend"] == backend && r["median_s"].is_number()),
                "no {op}/{backend} result"
            );
        }
    }
    assert!(results.iter().any(|r| r["backend"] == "sql-cte"));
    assert!(results.iter().any(|r| r["backend"] == "sql-pathcopy"));
    assert!(results.iter().any(|r| r["backend"] == "floor-parsed"));
    for check in v["checks"].as_array().expect("checks") {
        let ok = check
            .get("all_equal")
            .or(check.get("same_entries_everywhere"));
        assert_eq!(ok, Some(&serde_json::Value::Bool(true)), "{check}");
    }
    let rss = v["rss"].as_array().expect("rss");
    assert!(rss
        .iter()
        .any(|r| r["backend"] == "sqlite" && r["child"]["vmhwm_kb"].is_number()));
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(6));
    for name in ["report.json", "report.md", "scaling.svg"] {
        assert!(out_dir.join(name).is_file(), "{name} written");
    }
    let svg = std::fs::read_to_string(out_dir.join("scaling.svg")).expect("svg");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}
