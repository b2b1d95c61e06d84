//! Import and export as merges by entry id, with pi 1.6.0 writing the same
//! files: its own `SessionManager`, driven through Node 22 by
//! `tests/merge/pi-driver.mjs` (pi 1.6 installed in `tests/pi16`, as the
//! app differential test installs it). The newcomer's sequences of issue 39:
//! a label in the archive, pi appends, import, export back; a conflict and
//! the command it suggests; version 1 files both ways; one file per session
//! in pi's directory; and a property test interleaving pi's appends with
//! archive writes, imports and exports (`MERGE_PROP_CASES`, default 3;
//! `MERGE_PROP_SEED`).

use super::{pi_fixtures, s, Sandbox, LARGE_ID};
use crate::support::node::repo_root;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// pi 1.6's `SessionManager` in a Node process of its own.
struct Pi {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Pi {
    fn start() -> Pi {
        let mut child = Command::new(crate::support::node::pi16_node())
            .arg(repo_root().join("tests/merge/pi-driver.mjs"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start pi 1.6's driver");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Pi {
            child,
            stdin,
            stdout,
        }
    }

    fn call(&mut self, req: Value) -> Value {
        writeln!(self.stdin, "{req}").expect("write to pi");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read from pi");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert_eq!(v["ok"], true, "pi 1.6 refused {req}: {v}");
        v
    }

    fn open(&mut self, file: &Path) -> Value {
        self.call(json!({"op": "open", "file": file}));
        self.state()
    }

    fn user(&mut self, text: &str) -> String {
        str_of(&self.call(json!({"op": "user", "text": text}))["id"])
    }

    fn state(&mut self) -> Value {
        self.call(json!({"op": "state"}))
    }
}

impl Drop for Pi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn str_of(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_owned()
}

/// pi's sessions directory in the sandbox (`~/.pi/agent/sessions`).
fn pi_dir(sb: &Sandbox) -> PathBuf {
    sb.home().join(".pi/agent/sessions")
}

/// A new session made by pi 1.6 in `dir` (two messages): its file and id.
fn pi_session(pi: &mut Pi, dir: &Path) -> (PathBuf, String) {
    pi.call(json!({"op": "create", "cwd": "/home/ada/p", "dir": dir.join("--home-ada-p--")}));
    pi.user("hello");
    pi.user("and again");
    let st = pi.state();
    let file = PathBuf::from(str_of(&st["file"]));
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&file)
            .expect("pi's file")
            .lines()
            .next()
            .expect("header"),
    )
    .expect("header json");
    (file, str_of(&header["id"]))
}

/// Every `.jsonl` file below `dir`.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_below(&p));
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The entry ids of a pi file's lines (the header and non-entries left out).
fn file_ids(file: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(file)
        .expect("read")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] != "session")
        .filter_map(|v| v["id"].as_str().map(str::to_owned))
        .collect()
}

/// The archive's entries of `id`, by exporting it into a scratch directory.
fn archive_ids(sb: &Sandbox, db: &Path, id: &str, scratch: &str) -> BTreeSet<String> {
    let out = sb.path(scratch);
    let _ = std::fs::remove_dir_all(&out);
    let r = sb.run(&["--db", s(db), "export", id, "--out", s(&out)]);
    r.ok();
    let files = files_below(&out);
    assert_eq!(files.len(), 1, "{files:?}");
    file_ids(&files[0])
}

/// The command line a message suggests after `prefix` (to its line's end).
fn suggested(message: &str, prefix: &str) -> Vec<String> {
    let at = message
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {message}"));
    let line = message[at + prefix.len()..].lines().next().unwrap_or("");
    shell_words(line)
}

/// A shell line split into words (single quotes as `shell_quote` writes them).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            '\\' if !quoted => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_whitespace() && !quoted => {
                if any || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        words.push(cur);
    }
    words
}

#[test]
fn a_label_in_the_archive_survives_pi_appending_and_goes_back_to_pi() {
    let sb = Sandbox::new();
    let dir = pi_dir(&sb);
    let mut pi = Pi::start();
    let (file, id) = pi_session(&mut pi, &dir);
    let first = str_of(&pi.state()["ids"][0]);
    let r = sb.json(&["import", s(&dir)]);
    assert_eq!(r["imported"], 1, "{r}");
    sb.run(&["label", &id, &first, "reviewed"]).ok();

    // pi appends to the session (its file has no label).
    pi.open(&file);
    let tip = pi.user("pi later");

    // Import: pi's line merged, the label kept; the same again is unchanged.
    let r = sb.json(&["import", s(&dir)]);
    assert_eq!(
        (r["appended"].clone(), r["failed"].clone()),
        (json!(1), json!([])),
        "{r}"
    );
    assert_eq!(sb.json(&["import", s(&dir)])["unchanged"], 1);
    let ids = archive_ids(&sb, &sb.default_db(), &id, "scratch");
    assert!(ids.contains(&tip), "{ids:?}");

    // Export back into pi's directory: its one file, merged; pi 1.6 opens it
    // at the leaf it had (the re-issued label hangs on it), with the label.
    let r = sb.json(&["export", &id, "--out", s(&dir)]);
    assert_eq!(r["exported"][0]["action"], "merged", "{r}");
    assert_eq!(r["exported"][0]["path"], s(&file), "{r}");
    assert_eq!(files_below(&dir), std::slice::from_ref(&file));
    let st = pi.open(&file);
    assert_eq!(st["labels"][&first], "reviewed", "{st}");
    let branch: Vec<String> = st["branch"]
        .as_array()
        .expect("branch")
        .iter()
        .map(str_of)
        .collect();
    let leaf = str_of(&st["leafId"]);
    assert_eq!(branch.last(), Some(&leaf));
    assert_eq!(
        branch[branch.len() - 2],
        tip,
        "pi resumes on its own path: {st}"
    );
    assert_eq!(
        r["exported"][0]["merge"]["piLeaf"], leaf,
        "the command says where pi's leaf is: {r}"
    );
    // The archive holds the re-issue too: both sides agree, and the next
    // import and export have nothing to do.
    assert_eq!(
        archive_ids(&sb, &sb.default_db(), &id, "scratch"),
        file_ids(&file)
    );
    assert_eq!(sb.json(&["import", s(&dir)])["unchanged"], 1);
    let r = sb.json(&["export", &id, "--out", s(&dir)]);
    assert_eq!(r["exported"][0]["action"], "unchanged", "{r}");
}

#[test]
fn an_archive_branch_stays_a_branch_and_export_all_twice_keeps_one_file_per_session() {
    let sb = Sandbox::new();
    let dir = pi_dir(&sb);
    let mut pi = Pi::start();
    let (file, id) = pi_session(&mut pi, &dir);
    let (other, _) = pi_session(&mut pi, &dir);
    let first = str_of(&pi.open(&file)["ids"][0]);
    sb.json(&["import"]);
    // The archive goes back to the first message (a branch), pi goes on.
    sb.run(&["move", &id, &first, "--summary", "tried another way"])
        .ok();
    pi.open(&file);
    let tip = pi.user("pi goes on");
    let r = sb.json(&["export", "--all", "--out", s(&dir)]);
    let row = r["exported"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|row| row["session"] == id.as_str())
        .expect("the session's row")
        .clone();
    assert_eq!(row["action"], "merged", "{r}");
    let st = pi.open(&file);
    assert_eq!(
        str_of(&st["branch"][st["branch"].as_array().expect("b").len() - 2]),
        tip,
        "pi's leaf stays on its path: {st}"
    );
    let branch_leaf = str_of(&row["merge"]["branchLeaves"][0]);
    assert!(
        file_ids(&file).contains(&branch_leaf),
        "the archive's branch is in pi's file"
    );
    // pi renames a file: still found by its session id.
    let renamed = other.with_file_name("renamed.jsonl");
    std::fs::rename(&other, &renamed).expect("rename");
    for _ in 0..2 {
        let r = sb.json(&["export", "--all", "--out", s(&dir)]);
        assert_eq!(r["failed"], json!([]), "{r}");
        assert_eq!(files_below(&dir), {
            let mut v = vec![file.clone(), renamed.clone()];
            v.sort();
            v
        });
    }
    assert_eq!(sb.json(&["check"])["ok"], true);
    // A second file for one session: `check` names both and the step that
    // leaves one; that step works.
    let copy = file.with_file_name("copy.jsonl");
    std::fs::copy(&file, &copy).expect("copy");
    let r = sb.run(&["check"]);
    assert_eq!(r.status, 8, "{r:#?}");
    let words = suggested(&r.stdout, ": rm ");
    assert_eq!(words.len(), 1, "{words:?}");
    std::fs::remove_file(&words[0]).expect("the suggested rm");
    assert_eq!(sb.json(&["check"])["ok"], true);
    assert_eq!(files_below(&dir).len(), 2);
}

#[test]
fn a_conflict_names_both_sides_and_the_step_it_suggests_works() {
    let sb = Sandbox::new();
    let dir = pi_dir(&sb);
    let mut pi = Pi::start();
    let (file, id) = pi_session(&mut pi, &dir);
    let (_, other_id) = pi_session(&mut pi, &dir);
    sb.json(&["import"]);
    // Someone edits an entry of pi's file in place, and pi appends.
    let text = std::fs::read_to_string(&file).expect("read");
    std::fs::write(&file, text.replace("and again", "edited")).expect("edit");
    pi.open(&file);
    pi.user("after the edit");
    let r = sb.run(&["--json", "import"]);
    assert_eq!(r.status, 2, "{r:#?}");
    let v = r.parse();
    let msg = str_of(&v["failed"][0]["message"]);
    let edited = str_of(&pi.state()["ids"][1]);
    for part in [&id, &edited, &s(&file).to_owned(), &"archive".to_owned()] {
        assert!(msg.contains(part.as_str()), "{part} in {msg}");
    }
    // The rest of the run is done: the other session's file is unchanged.
    assert_eq!(v["unchanged"], 1, "{v}");
    let words = suggested(&msg, "sessiontree ");
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    let r = sb.run(&args);
    assert_eq!(r.status, 0, "{r:#?}");
    assert!(std::fs::read_dir(file.parent().expect("dir"))
        .expect("dir")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".bak")));
    let r = sb.json(&["import"]);
    assert_eq!(
        (r["unchanged"].clone(), r["failed"].clone()),
        (json!(2), json!([])),
        "{r}"
    );
    let _ = other_id;
}

#[test]
fn version_1_files_go_back_to_pi_only_when_asked_and_stay_unchanged_after_pi_upgrades_them() {
    let sb = Sandbox::new();
    let dir = pi_dir(&sb).join("--Users-badlogic-workspaces-pi-mono--");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("2025-11-20T23-33-50-805Z_d703a1a9-1b7b-4fb1-b512-c9738b1fe617.jsonl");
    std::fs::write(
        &file,
        std::fs::read(pi_fixtures().join("large-session.jsonl")).expect("fixture"),
    )
    .expect("copy");
    let copy = sb.path("other-root/--elsewhere--/s.jsonl");
    std::fs::create_dir_all(copy.parent().expect("dir")).expect("dir");
    std::fs::copy(&file, &copy).expect("copy");
    sb.json(&["import", s(&file), s(&copy)]);
    sb.run(&["label", LARGE_ID, "v1-00002", "kept"]).ok();

    // Export writes nothing over a version 1 file, and says the step.
    let before = std::fs::read(&file).expect("read");
    let root = pi_dir(&sb);
    let r = sb.run(&["export", LARGE_ID, "--out", s(&root)]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert_eq!(std::fs::read(&file).expect("read"), before);
    let words = suggested(&r.stdout, "sessiontree ");
    assert!(words.contains(&"--upgrade".to_owned()), "{words:?}");
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    sb.run(&args).ok();
    assert!(file
        .with_file_name(format!(
            "{}.bak",
            file.file_name().expect("name").to_string_lossy()
        ))
        .exists());
    let mut pi = Pi::start();
    let st = pi.open(&file);
    assert_eq!(
        (st["version"].clone(), st["labels"]["v1-00002"].clone()),
        (json!(3), json!("kept"))
    );
    assert_eq!(sb.json(&["import", s(&file)])["unchanged"], 1);

    // pi opens the other copy: it rewrites it as version 3 with new ids.
    // Import recognises it (unchanged), and export has nothing to add but
    // the archive's label, which needs --upgrade.
    let st = pi.open(&copy);
    assert_eq!(st["version"], 3);
    assert!(!str_of(&st["ids"][0]).starts_with("v1-"), "{st}");
    let r = sb.json(&["import", s(&copy)]);
    assert_eq!(
        (r["unchanged"].clone(), r["failed"].clone()),
        (json!(1), json!([])),
        "{r}"
    );

    // pi writes to its upgraded file: those entries hang on ids the archive
    // does not know; import says so and the step out, which works.
    pi.open(&copy);
    pi.user("after pi's upgrade");
    let r = sb.run(&["--json", "import", s(&copy)]);
    assert_eq!(r.status, 2, "{r:#?}");
    let msg = str_of(&r.parse()["failed"][0]["message"]);
    let words = suggested(&msg, "sessiontree ");
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    let r = sb.run(&args);
    assert_eq!(r.status, 0, "{r:#?}");
    assert!(copy.with_file_name("s.jsonl.bak").exists());
    assert_eq!(pi.open(&copy)["labels"]["v1-00002"], "kept");
    assert_eq!(sb.json(&["import", s(&copy)])["unchanged"], 1);
}

/// A tiny deterministic generator (xorshift64*), seeded per case.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

#[test]
fn interleaved_pi_appends_archive_writes_imports_and_exports_agree_on_the_entry_set() {
    let cases: u64 = std::env::var("MERGE_PROP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed: u64 = std::env::var("MERGE_PROP_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let mut pi = Pi::start();
    for case in 0..cases {
        let case_seed = seed.wrapping_add(case.wrapping_mul(0x9e37_79b9)) | 1;
        let mut rng = Rng(case_seed);
        let sb = Sandbox::new();
        let dir = pi_dir(&sb);
        let (file, id) = pi_session(&mut pi, &dir);
        sb.json(&["import"]);
        let mut log = Vec::new();
        for step in 0..14 {
            let ids: Vec<String> = file_ids(&file).into_iter().collect();
            let target = ids[rng.below(ids.len())].clone();
            let op = rng.below(7);
            log.push(format!("{op}:{target}"));
            let what = format!("case seed {case_seed}, step {step}, ops {log:?}");
            match op {
                0 | 1 => {
                    pi.open(&file);
                    pi.user(&format!("pi {step}"));
                }
                2 => {
                    pi.open(&file);
                    pi.call(json!({"op": "label", "target": target, "label": format!("pi{step}")}));
                }
                3 => {
                    // The archive labels an entry it has (one pi wrote since
                    // may not have been imported yet).
                    let r = sb.run(&["label", &id, &target, &format!("a{step}")]);
                    assert!(
                        r.status == 0 || r.stderr.contains("not found"),
                        "{what}: {r:#?}"
                    );
                }
                4 => {
                    sb.run(&["name", &id, &format!("name {step}")]).ok();
                }
                5 => {
                    let r = sb.json(&["import"]);
                    assert_eq!(r["failed"], json!([]), "{what}: {r}");
                }
                _ => {
                    let r = sb.json(&["export", &id, "--out", s(&dir)]);
                    assert_eq!(r["failed"], json!([]), "{what}: {r}");
                }
            }
            assert_eq!(files_below(&dir), std::slice::from_ref(&file), "{what}");
        }
        let what = format!("case seed {case_seed}, ops {log:?}");
        assert_eq!(sb.json(&["import"])["failed"], json!([]), "{what}");
        let r = sb.json(&["export", &id, "--out", s(&dir)]);
        assert_eq!(r["failed"], json!([]), "{what}: {r}");
        let in_file = file_ids(&file);
        let in_archive = archive_ids(&sb, &sb.default_db(), &id, "scratch");
        let fresh_db = sb.path("fresh.db");
        sb.run(&["--db", s(&fresh_db), "import", s(&file)]).ok();
        let fresh = archive_ids(&sb, &fresh_db, &id, "scratch2");
        assert_eq!(in_archive, in_file, "{what}");
        assert_eq!(fresh, in_file, "{what}");
        // pi opens the merged file whole.
        let st = pi.open(&file);
        let pi_ids: BTreeSet<String> = st["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(str_of)
            .collect();
        assert_eq!(pi_ids, in_file, "{what}");
    }
}
