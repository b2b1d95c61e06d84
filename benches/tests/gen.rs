//! The workload generator (`sessiontree_bench::gen`, `sessiontree-bench gen`)
//! and the bench report (`sessiontree-bench report`): deterministic output, files that
//! the JSONL backend opens and that import into SQLite with a clean check,
//! and a `report --quick` smoke run whose JSON report has the expected keys.
//! The adversarial shapes (regenerate, caterpillar, broom, dangling root) have
//! the trees they promise and read alike in the JSONL and memory backends.

use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::memory::MemoryStorage;
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::import_jsonl;
use sessiontree::{Durability, Entry, ErrorCode, Session, SessionStorage};
use sessiontree_bench::gen::{
    generate, GenOptions, GenReport, GeneratedSession, SessionIds, Shape, SplitMix64,
};
use std::collections::{HashMap, HashSet};
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
    for shape in Shape::ALL {
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
    // Every shape draws its own ids: no two shapes share a session id.
    let names: HashSet<_> = fa
        .iter()
        .filter_map(|(p, _)| {
            p.file_name()?
                .to_str()?
                .split_once('_')
                .map(|x| x.1.to_owned())
        })
        .collect();
    assert_eq!(names.len(), fa.len(), "session ids collide across shapes");
}

/// The tree of a generated file, read from its lines: ids in file order,
/// each entry's parent id, the first entry's `parentId`.
struct FileTree {
    ids: Vec<String>,
    parent: HashMap<String, Option<String>>,
    first_parent: Option<String>,
}

impl FileTree {
    fn read(path: &Path) -> FileTree {
        let text = std::fs::read_to_string(path).expect("reading");
        let mut tree = FileTree {
            ids: Vec::new(),
            parent: HashMap::new(),
            first_parent: None,
        };
        for line in text.lines().skip(1) {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            let id = v["id"].as_str().expect("id").to_owned();
            let parent = v["parentId"].as_str().map(str::to_owned);
            if tree.ids.is_empty() {
                tree.first_parent = parent.clone();
            }
            tree.ids.push(id.clone());
            tree.parent.insert(id, parent);
        }
        tree
    }

    /// How many entries name each entry as their parent.
    fn children(&self) -> HashMap<&str, usize> {
        let mut n = HashMap::new();
        for p in self.parent.values().flatten() {
            *n.entry(p.as_str()).or_insert(0) += 1;
        }
        n
    }

    /// The active path, leaf first, up to the root (or a missing parent).
    fn active_path(&self, leaf: &str) -> Vec<String> {
        let mut path = vec![leaf.to_owned()];
        while let Some(Some(p)) = self.parent.get(path.last().expect("non-empty")) {
            if !self.parent.contains_key(p) {
                break;
            }
            path.push(p.clone());
        }
        path
    }
}

/// The ids of a path, or the error's code.
fn path_ids(path: sessiontree::Result<Vec<Entry>>) -> Result<Vec<String>, ErrorCode> {
    path.map(|p| p.iter().map(|e| e.id().to_owned()).collect())
        .map_err(|e| e.code())
}

fn gen_with(dir: &Path, options: GenOptions) -> GeneratedSession {
    let report = generate(dir, &options).expect("generating");
    assert_eq!(report.sessions.len(), 1);
    let s = report.sessions[0].clone();
    assert_eq!(s.entries, options.entries, "exact entry count");
    s
}

#[test]
fn every_shape_reads_alike_in_the_jsonl_and_memory_backends() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for shape in Shape::ALL {
        if shape == Shape::Archive {
            continue;
        }
        let s = gen(&tmp.path().join(shape.as_str()), shape, 1500, 21).sessions[0].clone();
        let j = JsonlStorage::open(&s.path, Durability::Relaxed).expect("opens in JSONL");
        let mut m = MemoryStorage::new();
        let text = std::fs::read_to_string(&s.path).expect("reading");
        for line in text.lines().skip(1) {
            m.append_entry(Entry::from_stored_line(line).expect("valid entry"))
                .expect("memory append");
        }
        assert_eq!(j.entry_count().expect("count"), s.entries, "{shape:?}");
        assert_eq!(m.entry_count().expect("count"), s.entries, "{shape:?}");
        assert_eq!(j.leaf_id().expect("leaf"), s.leaf_id, "{shape:?}");
        assert_eq!(m.leaf_id().expect("leaf"), s.leaf_id, "{shape:?}");
        let tree = FileTree::read(&s.path);
        let mut from: Vec<Option<&str>> = vec![None, s.leaf_id.as_deref()];
        let ids = SessionIds::new(s.seed);
        let mut rng = SplitMix64::new(5);
        let picked: Vec<String> = (0..40)
            .map(|_| ids.id(rng.below(s.entries as u64) as u32))
            .collect();
        from.extend(picked.iter().map(|id| Some(id.as_str())));
        from.push(tree.ids.first().map(String::as_str));
        for id in from {
            let a = path_ids(j.path_to_root_or_compaction(id));
            let b = path_ids(m.path_to_root_or_compaction(id));
            assert_eq!(a, b, "{shape:?}: path from {id:?}");
            if id.is_some() && shape != Shape::DanglingRoot {
                assert!(
                    a.is_ok_and(|p| !p.is_empty()),
                    "{shape:?}: path from {id:?}"
                );
            }
        }
        let cj = Session::new(j)
            .build_context(None)
            .expect("context")
            .to_json_text();
        let cm = Session::new(m)
            .build_context(None)
            .map(|c| c.to_json_text());
        assert_eq!(Ok(cj), cm.map_err(|e| e.code()), "{shape:?}: context");
    }
}

#[test]
fn regenerate_forks_all_lie_on_the_active_path() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // forks ≈ entries / every; below about 5 entries per regeneration the
    // chat's own turns set the pace (a reply is regenerated at most three
    // times in a row before the chat goes on).
    for (entries, every, forks) in [
        (8000, None, 1700..=2300),
        (6000, Some(10), 510..=690),
        (400, Some(2), 50..=200),
    ] {
        let s = gen_with(
            &tmp.path().join(format!("r{entries}")),
            GenOptions {
                shape: Shape::Regenerate,
                entries,
                fork_every: every,
                compaction_every: 400,
                seed: 8,
                ..GenOptions::default()
            },
        );
        assert!(
            forks.contains(&s.forks),
            "every {every:?}: {} forks for {entries} entries",
            s.forks
        );
        let tree = FileTree::read(&s.path);
        let leaf = s.leaf_id.as_deref().expect("a leaf");
        let on_path: HashSet<String> = tree.active_path(leaf).into_iter().collect();
        assert_eq!(on_path.len(), s.leaf_depth + 1);
        let forks: Vec<(&str, usize)> = tree
            .children()
            .into_iter()
            .filter(|&(_, n)| n >= 2)
            .collect();
        // Each regeneration adds one child to its fork point (the last may
        // have had no room for its reply).
        let added: usize = forks.iter().map(|&(_, n)| n - 1).sum();
        assert!(
            added == s.forks || added + 1 == s.forks,
            "{added} extra children, {} forks",
            s.forks
        );
        assert!(
            forks.iter().all(|&(_, n)| n <= 4),
            "regenerated at most 3 times in a row"
        );
        for (id, _) in &forks {
            assert!(
                on_path.contains(*id),
                "fork point {id} is off the active path"
            );
        }
    }
}

#[test]
fn caterpillar_forks_at_nearly_every_spine_entry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = gen_with(
        tmp.path(),
        GenOptions {
            shape: Shape::Caterpillar,
            entries: 6000,
            compaction_every: 300,
            seed: 4,
            ..GenOptions::default()
        },
    );
    let tree = FileTree::read(&s.path);
    let children = tree.children();
    let path = tree.active_path(s.leaf_id.as_deref().expect("a leaf"));
    assert!(path.len() > 1500, "a long spine: {}", path.len());
    let spine = &path[3..]; // leaf first: the last few may not have forked yet
    let forked = spine
        .iter()
        .filter(|id| children.get(id.as_str()).copied().unwrap_or(0) >= 2)
        .count();
    assert!(
        forked * 10 >= spine.len() * 9,
        "{forked} of {} spine entries fork",
        spine.len()
    );
    assert!(s.forks >= forked, "{} forks reported", s.forks);
}

#[test]
fn broom_hangs_its_bristles_from_one_entry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (entries, forks) in [(4000, Some(1000)), (3000, None), (20, None)] {
        let s = gen_with(
            &tmp.path().join(format!("b{entries}")),
            GenOptions {
                shape: Shape::Broom,
                entries,
                forks,
                compaction_every: 250,
                seed: 9,
                ..GenOptions::default()
            },
        );
        if let Some(f) = forks {
            assert_eq!(s.forks, f, "all requested bristles fit");
        } else {
            assert!(s.forks >= entries / 3, "default bristles: {}", s.forks);
        }
        let tree = FileTree::read(&s.path);
        let children = tree.children();
        let (hub, n) = children.iter().max_by_key(|&(_, n)| *n).expect("children");
        assert!(*n >= s.forks, "the hub has {n} children, {} forks", s.forks);
        let path = tree.active_path(s.leaf_id.as_deref().expect("a leaf"));
        assert!(
            path.iter().any(|id| id == hub),
            "the chat goes on below the hub"
        );
    }
}

#[test]
fn dangling_root_names_a_parent_missing_from_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = gen_with(
        tmp.path(),
        GenOptions {
            shape: Shape::DanglingRoot,
            entries: 1200,
            compaction_every: 300,
            seed: 6,
            ..GenOptions::default()
        },
    );
    let tree = FileTree::read(&s.path);
    let missing = tree
        .first_parent
        .clone()
        .expect("the first entry has a parentId");
    assert!(
        !tree.parent.contains_key(&missing),
        "{missing} is in the file"
    );
    assert!(s.forks >= 10, "forked like Forked: {}", s.forks);
    let j = JsonlStorage::open(&s.path, Durability::Relaxed).expect("opens in JSONL");
    assert_eq!(j.leaf_id().expect("leaf"), s.leaf_id);
    let walk = j.path_to_root_or_compaction(Some(&tree.ids[0]));
    assert_eq!(path_ids(walk), Err(ErrorCode::InvalidSession));
}

#[test]
fn gen_command_names_every_shape_as_the_library_does() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for shape in Shape::ALL {
        let out = Command::new(env!("CARGO_BIN_EXE_sessiontree-bench"))
            .args([
                "--json",
                "gen",
                "--shape",
                shape.as_str(),
                "--entries",
                "120",
            ])
            .args(["--fork-every", "3", "--compaction-every", "40", "--out"])
            .arg(tmp.path().join(shape.as_str()))
            .output()
            .expect("running gen");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["shape"], shape.as_str());
        assert_eq!(v["entries"], 120);
    }
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
            assert_eq!(dir, Some(sessiontree::layout::encode_cwd(&s.cwd).as_str()));
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
    let mut files = vec![gen(tmp.path(), Shape::Forked, 3000, 3).sessions[0]
        .path
        .clone()];
    for shape in [
        Shape::Regenerate,
        Shape::Caterpillar,
        Shape::Broom,
        Shape::DanglingRoot,
    ] {
        let dir = tmp.path().join(shape.as_str());
        files.push(gen(&dir, shape, 500, 3).sessions[0].path.clone());
    }
    let script = "const fs=require('fs');let bad=0,n=0;for(const f of process.argv.slice(1)){for(const l of fs.readFileSync(f,'utf8').split('\\n')){if(!l)continue;n++;if(JSON.stringify(JSON.parse(l))!==l){bad++;if(bad<3)console.error(l.slice(0,200));}}}console.log(n+' '+bad);";
    let out = Command::new("node")
        .arg("-e")
        .arg(script)
        .args(&files)
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
    assert_eq!(lines, 3001 + 4 * 501);
    assert_eq!(bad, 0, "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn gen_command_prints_what_it_wrote() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_sessiontree-bench"))
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
    let out = Command::new(env!("CARGO_BIN_EXE_sessiontree-bench"))
        .args([
            "--json", "report", "--quick", "--sizes", "300", "--budget", "0.01", "--out",
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
            .or(check.get("same_entries_everywhere"))
            .or(check.get("equal"));
        assert_eq!(ok, Some(&serde_json::Value::Bool(true)), "{check}");
    }
    let rss = v["rss"].as_array().expect("rss");
    assert!(rss
        .iter()
        .any(|r| r["backend"] == "sqlite" && r["child"]["vmhwm_kb"].is_number()));
    // Six targets of the backends, six of the regenerate shape against the
    // linear one, five of issue 12 (floors, import of real files, peers),
    // six of issue 9 (two sizes, the images, three reads after `compact`).
    assert_eq!(v["targets"].as_array().map(Vec::len), Some(23));
    // Both archives of the compact-archive rows, each with its split.
    let compacted = v["compacted"].as_array().expect("compacted rows");
    for kind in ["imported", "compacted"] {
        assert!(compacted.iter().any(|r| r["op"] == "compact_bytes"
            && r["backend"] == kind
            && r["extra"]["ratio"].as_f64().is_some_and(|x| x > 0.0)
            && r["extra"]["split"]["entries"].is_number()));
        assert!(compacted.iter().any(|r| r["op"] == "compact_search"
            && r["backend"] == kind
            && r["median_s"].is_number()));
    }
    // The long path read beside its floors.
    for backend in ["sqlite", "floor-raw", "floor-parsed"] {
        assert!(
            results.iter().any(|r| r["op"] == "path_long"
                && r["backend"] == backend
                && r["median_s"].is_number()),
            "no path_long/{backend} result"
        );
    }
    // Whole processes: the floor and the commands a user runs, each timed.
    let processes = v["processes"].as_array().expect("processes");
    for name in [
        "sessiontree --version",
        "context, forked",
        "rpc buildContext, forked",
        "tree, forked",
        "ls",
        "search",
        "context, linear (no compactions)",
        "floor: print the path's rows, linear (no compactions)",
    ] {
        assert!(
            processes
                .iter()
                .any(|r| r["backend"] == name && r["median_s"].as_f64().is_some_and(|s| s > 0.0)),
            "no whole-process row {name}: {}",
            v["process_notes"]
        );
    }
    assert!(v["peers"].is_array());
    let shapes = v["shapes"].as_array().expect("shape rows");
    for shape in ["linear", "regenerate", "caterpillar"] {
        for op in ["import", "resume", "path", "leaf_move"] {
            assert!(
                shapes
                    .iter()
                    .any(|r| r["backend"] == shape && r["op"] == op),
                "no {op} row for the {shape} shape"
            );
        }
    }
    for name in ["report.json", "report.md", "scaling.svg"] {
        assert!(out_dir.join(name).is_file(), "{name} written");
    }
    let svg = std::fs::read_to_string(out_dir.join("scaling.svg")).expect("svg");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}
