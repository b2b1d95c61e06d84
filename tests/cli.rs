//! The `sessiontree` command line, end to end: the built binary run on
//! temporary archives, with `HOME` and `XDG_DATA_HOME` pointing into a temp
//! directory so nothing of the user's is read or written.
//!
//! Inputs are the real pi files in `shared/fixtures/pi-sessions/` (version 1:
//! ids `v1-00001`…) and small version-3 sessions written here with fixed ids and
//! timestamps. `tests/snapshots/tree.txt` holds the expected `tree` text; run
//! with `UPDATE_SNAPSHOTS=1` to rewrite it after a deliberate change.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sessiontree");

fn pi_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pi-sessions")
}

/// The two real pi files.
const COMPACTION_ID: &str = "ffae836b-9420-4060-ac13-7745215f90ff";
const LARGE_ID: &str = "d703a1a9-1b7b-4fb1-b512-c9738b1fe617";

// ---------------------------------------------------------------------------
// Running the binary.

/// A sandbox: its own HOME, XDG_DATA_HOME and scratch space.
struct Sandbox {
    dir: tempfile::TempDir,
}

/// What one run printed and how it exited.
#[derive(Debug)]
struct Run {
    #[allow(dead_code, reason = "shown when an assertion prints the run")]
    args: Vec<String>,
    status: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts exit status 0 and returns stdout.
    fn ok(&self) -> &str {
        assert_eq!(self.status, 0, "{self:#?}");
        &self.stdout
    }

    /// Asserts exit status 0 and parses stdout as one JSON value.
    fn json(&self) -> Value {
        self.ok();
        self.parse()
    }

    /// Parses stdout as one JSON line, whatever the status.
    fn parse(&self) -> Value {
        assert!(
            self.stdout.ends_with('\n') && self.stdout.trim_end().lines().count() == 1,
            "--json prints exactly one line: {self:#?}"
        );
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:#?}"))
    }

    /// Asserts the exit status and that stderr carries `sessiontree: error [code]`.
    fn fails(&self, status: i32, code: &str) -> &str {
        assert_eq!(self.status, status, "{self:#?}");
        assert!(
            self.stderr
                .starts_with(&format!("sessiontree: error [{code}]: ")),
            "{self:#?}"
        );
        &self.stderr
    }
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("home")).expect("home");
        Sandbox { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    /// The default archive, `$XDG_DATA_HOME/sessiontree/archive.db`.
    fn default_db(&self) -> PathBuf {
        self.path("data/sessiontree/archive.db")
    }

    fn command(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env_clear()
            .env("HOME", self.home())
            .env("XDG_DATA_HOME", self.path("data"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(self.dir.path());
        c
    }

    fn run_with(&self, mut c: Command, args: &[&str]) -> Run {
        let out = c.args(args).output().expect("run sessiontree");
        Run {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            status: out.status.code().expect("exit status"),
            stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(self.command(), args)
    }

    /// `args` with `--json` in front.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        self.run(&all).json()
    }

    /// Writes `text` at `rel` (creating directories) and returns the path.
    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
        p
    }

    /// Imports `paths`, expecting success, and returns the `--json` report.
    fn import(&self, paths: &[&Path]) -> Value {
        let mut args = vec!["--json", "import"];
        let strs: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        args.extend(strs.iter().map(String::as_str));
        self.run(&args).json()
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

// ---------------------------------------------------------------------------
// Writing version-3 session files with fixed ids and timestamps.

/// One JSON object with its keys in the given order (pi's order: type, id,
/// parentId, timestamp, …), as pi writes a line.
fn object(fields: &[(&str, Value)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{}", Value::from(*k), v))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// The usage every assistant message of these sessions reports: 520 tokens
/// (400 cached, 100 uncached), $0.25.
fn usage() -> Value {
    json!({"input": 100, "output": 20, "cacheRead": 400, "cacheWrite": 0, "totalTokens": 520,
           "cost": {"input": 0.125, "output": 0.125, "cacheRead": 0, "cacheWrite": 0, "total": 0.25}})
}

/// A pi session file being written: header first, then entries, each one
/// second after the last.
struct PiFile {
    id: String,
    cwd: String,
    created: String,
    lines: Vec<String>,
    clock: u32,
}

impl PiFile {
    /// `created` is `YYYY-MM-DDTHH:00:00.000Z`-like; entries follow it.
    fn new(id: &str, cwd: &str, created: &str) -> Self {
        let header = object(&[
            ("type", json!("session")),
            ("version", json!(3)),
            ("id", json!(id)),
            ("timestamp", json!(created)),
            ("cwd", json!(cwd)),
        ]);
        PiFile {
            id: id.to_owned(),
            cwd: cwd.to_owned(),
            created: created.to_owned(),
            lines: vec![header],
            clock: 0,
        }
    }

    fn timestamp(&mut self) -> (String, u64) {
        self.clock += 1;
        let (m, sec) = (self.clock / 60, self.clock % 60);
        (
            format!("{}{m:02}:{sec:02}.000Z", &self.created[..14]),
            1_740_000_000_000 + u64::from(self.clock) * 1000,
        )
    }

    /// Appends an entry of `kind` with the common fields and `extra`.
    fn entry(
        &mut self,
        kind: &str,
        id: &str,
        parent: Option<&str>,
        extra: Vec<(&str, Value)>,
    ) -> &mut Self {
        let (ts, _) = self.timestamp();
        let mut fields = vec![
            ("type", json!(kind)),
            ("id", json!(id)),
            ("parentId", json!(parent)),
            ("timestamp", json!(ts)),
        ];
        fields.extend(extra);
        self.lines.push(object(&fields));
        self
    }

    fn message(&mut self, id: &str, parent: Option<&str>, mut message: Value) -> &mut Self {
        let ms = 1_740_000_000_000 + u64::from(self.clock + 1) * 1000;
        message["timestamp"] = json!(ms);
        self.entry("message", id, parent, vec![("message", message)])
    }

    fn user(&mut self, id: &str, parent: &str, text: &str) -> &mut Self {
        let m = json!({"role": "user", "content": [{"type": "text", "text": text}]});
        self.message(id, Some(parent), m)
    }

    fn assistant(&mut self, id: &str, parent: &str, text: &str) -> &mut Self {
        let m = json!({"role": "assistant", "content": [{"type": "text", "text": text}],
                       "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage(),
                       "stopReason": "stop"});
        self.message(id, Some(parent), m)
    }

    /// An assistant turn that only calls a tool (`call-<id>`).
    fn call(&mut self, id: &str, parent: &str, tool: &str, args: Value) -> &mut Self {
        let m = json!({"role": "assistant",
                       "content": [{"type": "toolCall", "id": format!("call-{id}"), "name": tool, "arguments": args}],
                       "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage(),
                       "stopReason": "toolUse"});
        self.message(id, Some(parent), m)
    }

    /// The result of the call made by `parent`.
    fn result(&mut self, id: &str, parent: &str, tool: &str, text: &str) -> &mut Self {
        let m = json!({"role": "toolResult", "toolCallId": format!("call-{parent}"), "toolName": tool,
                       "content": [{"type": "text", "text": text}], "isError": false});
        self.message(id, Some(parent), m)
    }

    fn failed(&mut self, id: &str, parent: &str, error: &str) -> &mut Self {
        let m = json!({"role": "assistant", "content": [], "provider": "anthropic",
                       "model": "claude-sonnet-4-5", "usage": usage(), "stopReason": "error",
                       "errorMessage": error});
        self.message(id, Some(parent), m)
    }

    fn label(&mut self, id: &str, parent: &str, target: &str, label: &str) -> &mut Self {
        self.entry(
            "label",
            id,
            Some(parent),
            vec![("targetId", json!(target)), ("label", json!(label))],
        )
    }

    fn leaf(&mut self, id: &str, parent: &str, target: &str) -> &mut Self {
        self.entry("leaf", id, Some(parent), vec![("targetId", json!(target))])
    }

    fn text(&self) -> String {
        let mut t = self.lines.join("\n");
        t.push('\n');
        t
    }

    /// Where pi keeps this file below a sessions root.
    fn pi_path(&self) -> String {
        let cwd = self
            .cwd
            .trim_start_matches('/')
            .replace(['/', '\\', ':'], "-");
        let created = self.created.replace([':', '.'], "-");
        format!("--{cwd}--/{created}_{}.jsonl", self.id)
    }

    /// Writes the file in pi's layout below `root` (relative to the sandbox).
    fn save(&self, sb: &Sandbox, root: &str) -> PathBuf {
        sb.write(&format!("{root}/{}", self.pi_path()), &self.text())
    }
}

const TREE_ID: &str = "01950000-aaaa-7000-8000-000000000001";

/// The hand-built session of the `tree` snapshot: forks, labels, a move back
/// with a branch summary, a retry after a failed turn, a compaction, a session
/// name, and a long linear run. The leaf is the last label; the abandoned
/// branches end in `leaf` entries.
///
/// ```text
/// mdl00001 ─ thk00001 ─ usr00001 … ast00002 ─ lbl00001 ┬ usr00002 … ast00004 ─ leaf0001        (nom, abandoned)
///                                                       └ bsm00001 ─ usr00004 ─ lbl00002 ─ (11 tool steps)
///                                                         ─ cmp00001 ─ usr00005 ─ ast00011 ─ nam00001
///                                                           ┬ usr00006 ─ ast00012 ─ leaf0002 (failed, retried)
///                                                           └ usr00007 ─ ast00013 ─ lbl00003 (leaf)
/// ```
fn tree_session() -> PiFile {
    let mut f = PiFile::new(TREE_ID, "/home/ada/tinyjson", "2025-03-01T10:00:00.000Z");
    f.entry(
        "model_change",
        "mdl00001",
        None,
        vec![
            ("provider", json!("anthropic")),
            ("modelId", json!("claude-sonnet-4-5")),
        ],
    )
    .entry(
        "thinking_level_change",
        "thk00001",
        Some("mdl00001"),
        vec![("thinkingLevel", json!("high"))],
    )
    .user(
        "usr00001",
        "thk00001",
        "Set up a Rust crate for a tiny JSON parser",
    )
    .call(
        "ast00001",
        "usr00001",
        "bash",
        json!({"command": "cargo new tinyjson --lib"}),
    )
    .result(
        "res00001",
        "ast00001",
        "bash",
        "     Created library `tinyjson` package",
    )
    .assistant(
        "ast00002",
        "res00001",
        "The crate is ready:\nsrc/lib.rs and Cargo.toml.",
    )
    .label("lbl00001", "ast00002", "usr00001", "setup")
    // First attempt: nom. Abandoned by moving back to lbl00001.
    .user("usr00002", "lbl00001", "Parse numbers with the nom crate")
    .assistant(
        "ast00003",
        "usr00002",
        "Added nom = \"7\" and a number() combinator.",
    )
    .user("usr00003", "ast00003", "Compile times doubled; drop nom")
    .assistant("ast00004", "usr00003", "Understood, reverting.")
    .leaf("leaf0001", "ast00004", "lbl00001")
    .entry(
        "branch_summary",
        "bsm00001",
        Some("lbl00001"),
        vec![
            ("fromId", json!("lbl00001")),
            (
                "summary",
                json!("Tried nom for numbers; compile times doubled, abandoned."),
            ),
        ],
    )
    // Second attempt: by hand, with a long run of tool steps.
    .user(
        "usr00004",
        "bsm00001",
        "Write a hand-rolled recursive-descent parser instead",
    )
    .label("lbl00002", "usr00004", "usr00004", "hand-written")
    .call(
        "ast00005",
        "lbl00002",
        "read",
        json!({"path": "/home/ada/tinyjson/src/lib.rs"}),
    )
    .result(
        "res00005",
        "ast00005",
        "read",
        "pub fn add(left: u64, right: u64) -> u64 {",
    )
    .call(
        "ast00006",
        "res00005",
        "write",
        json!({"path": "src/parser.rs", "content": "…"}),
    )
    .result(
        "res00006",
        "ast00006",
        "write",
        "Wrote 212 lines to src/parser.rs",
    )
    .call(
        "ast00007",
        "res00006",
        "bash",
        json!({"command": "cargo test"}),
    )
    .result(
        "res00007",
        "ast00007",
        "bash",
        "test result: FAILED. 10 passed; 2 failed",
    )
    .call(
        "ast00008",
        "res00007",
        "edit",
        json!({"path": "src/parser.rs", "oldText": "a", "newText": "b"}),
    )
    .result("res00008", "ast00008", "edit", "Edited src/parser.rs")
    .call(
        "ast00009",
        "res00008",
        "bash",
        json!({"command": "cargo test"}),
    )
    .result(
        "res00009",
        "ast00009",
        "bash",
        "test result: ok. 12 passed; 0 failed",
    )
    .assistant(
        "ast00010",
        "res00009",
        "All 12 tests pass; the parser handles numbers, strings and arrays.",
    )
    .entry(
        "compaction",
        "cmp00001",
        Some("ast00010"),
        vec![
            (
                "summary",
                json!("Hand-written parser in src/parser.rs; 12 tests pass."),
            ),
            ("firstKeptEntryId", json!("ast00010")),
            ("tokensBefore", json!(48_200)),
            (
                "usage",
                json!({"input": 1000, "output": 200, "cacheRead": 0, "cacheWrite": 0,
                             "totalTokens": 1200, "cost": {"total": 0.5}}),
            ),
        ],
    )
    .user("usr00005", "cmp00001", "Add \\u escapes to strings")
    .assistant(
        "ast00011",
        "usr00005",
        "Strings now decode \\uXXXX escapes, surrogate pairs included.",
    )
    .entry(
        "session_info",
        "nam00001",
        Some("ast00011"),
        vec![("name", json!("tinyjson parser"))],
    )
    // A failed turn, retried from the same point.
    .user("usr00006", "nam00001", "Benchmark it against serde_json")
    .failed(
        "ast00012",
        "usr00006",
        "429 rate_limit_error: too many requests",
    )
    .leaf("leaf0002", "ast00012", "nam00001")
    .user(
        "usr00007",
        "nam00001",
        "Benchmark it against serde_json with criterion",
    )
    .assistant(
        "ast00013",
        "usr00007",
        "serde_json is 3x faster on the twitter.json corpus; fine for now.",
    )
    .label("lbl00003", "ast00013", "ast00013", "bench");
    f
}

/// A small linear session: a question about `topic`, an answer, named `name`.
fn small_session(id: &str, cwd: &str, created: &str, topic: &str, name: Option<&str>) -> PiFile {
    let mut f = PiFile::new(id, cwd, created);
    let question = json!({"role": "user", "content": format!("Tell me about {topic}")});
    f.message("u0000001", None, question);
    f.assistant(
        "a0000001",
        "u0000001",
        &format!("{topic} is a fine subject."),
    );
    if let Some(n) = name {
        f.entry(
            "session_info",
            "n0000001",
            Some("a0000001"),
            vec![("name", json!(n))],
        );
    }
    f
}

/// The `--json` entries of `branch`, by id.
fn ids(entries: &Value) -> Vec<String> {
    entries
        .as_array()
        .expect("array")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).expect("read")
}

/// The one file below `dir` (recursively) whose name ends with `suffix`.
fn find_file(dir: &Path, suffix: &str) -> PathBuf {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                found.push(p);
            }
        }
    }
    assert_eq!(
        found.len(),
        1,
        "{suffix} below {}: {found:?}",
        dir.display()
    );
    found.pop().expect("one")
}

// ---------------------------------------------------------------------------
// import

#[test]
fn import_real_pi_files_then_reimport_is_a_no_op() {
    let sb = Sandbox::new();
    let report = sb.import(&[&pi_fixtures()]);
    assert_eq!(report["files"], 2);
    assert_eq!(report["imported"], 2);
    assert_eq!(report["appended"], 0);
    assert_eq!(report["unchanged"], 0);
    assert_eq!(report["alreadyPresent"], 0);
    assert_eq!(report["failed"], json!([]));
    assert_eq!(report["tornTails"], json!([]));
    assert_eq!(report["entries"], 1002 + 1018);
    assert!(
        sb.default_db().is_file(),
        "the default archive is under XDG_DATA_HOME"
    );

    let again = sb.run(&["import", s(&pi_fixtures())]);
    let text = again.ok();
    assert!(
        text.starts_with(
            "2 files: 0 imported, 0 appended, 2 unchanged, 0 already present, 0 failed\n0 entries"
        ),
        "{text}"
    );
    let again = sb.json(&["import", s(&pi_fixtures())]);
    assert_eq!(
        (again["unchanged"].clone(), again["entries"].clone()),
        (json!(2), json!(0))
    );

    // The same session from another file is skipped, not duplicated.
    let copy = sb.write(
        "elsewhere/copy.jsonl",
        &read(&pi_fixtures().join("large-session.jsonl")),
    );
    let r = sb.import(&[&copy]);
    assert_eq!(
        (r["imported"].clone(), r["alreadyPresent"].clone()),
        (json!(0), json!(1))
    );

    // Version-1 files get ids v1-00001… chained in file order.
    let v = sb.json(&["branch", LARGE_ID]);
    let got = ids(&v["entries"]);
    assert_eq!(
        got.len(),
        1018,
        "no compaction: the whole file is the branch"
    );
    assert_eq!(got[0], "v1-00001");
    assert_eq!(got[1017], "v1-01018");
    assert_eq!(v["entries"][0]["parentId"], Value::Null);
    assert_eq!(v["entries"][1]["parentId"], "v1-00001");

    let ls = sb.json(&["ls"]);
    let listed: Vec<&str> = ls["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["id"].as_str().expect("id"))
        .collect();
    assert_eq!(listed, [COMPACTION_ID, LARGE_ID], "newest first");
    assert_eq!(ls["sessions"][0]["entries"], 1002);
    assert_eq!(ls["sessions"][0]["messages"], 990);
    assert_eq!(
        ls["sessions"][0]["cwd"],
        "/Users/badlogic/workspaces/pi-mono"
    );
    assert_eq!(ls["sessions"][0]["name"], Value::Null);

    let st = sb.json(&["stats", COMPACTION_ID]);
    assert_eq!(st["messageCount"], 990);
    assert_eq!(st["entries"], 1002);
    let total = sb.json(&["stats"]);
    assert_eq!(total["sessions"], 2);
    assert_eq!(total["entries"], 2020);
    assert_eq!(total["messageCount"], 990 + 914);
    assert_eq!(total["perCwd"][0]["sessions"], 2);
    let checked = sb.json(&["check"]);
    assert_eq!(
        (&checked["ok"], &checked["problems"]),
        (&json!(true), &json!([]))
    );
    // Two unforked sessions: a segment and its ancestry row each, and two compactions.
    assert_eq!(checked["cache"]["rows"], 6);
}

#[test]
fn import_defaults_to_pis_sessions_dir_and_db_overrides_the_archive() {
    let sb = Sandbox::new();
    // ~/.pi/agent/sessions
    small_session(
        "01950000-0000-7000-8000-00000000d001",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "home",
        None,
    )
    .save(&sb, "home/.pi/agent/sessions");
    // $PI_CODING_AGENT_DIR/sessions wins over it.
    small_session(
        "01950000-0000-7000-8000-00000000d002",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "env",
        None,
    )
    .save(&sb, "agent/sessions");

    let r = sb.run(&["--json", "import"]).json();
    assert_eq!(
        (r["files"].clone(), r["imported"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(
        r["roots"],
        json!([s(&sb.home().join(".pi/agent/sessions"))])
    );
    assert_eq!(
        sb.json(&["ls"])["sessions"][0]["id"],
        "01950000-0000-7000-8000-00000000d001"
    );

    let mut c = sb.command();
    c.env("PI_CODING_AGENT_DIR", sb.path("agent"));
    let db = sb.path("other.db");
    let r = sb.run_with(c, &["--json", "--db", s(&db), "import"]).json();
    assert_eq!(r["imported"], 1);
    assert_eq!(r["roots"], json!([s(&sb.path("agent/sessions"))]));
    assert!(db.is_file());
    let ls = sb.json(&["--db", s(&db), "ls"]);
    assert_eq!(ls["sessions"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        ls["sessions"][0]["id"],
        "01950000-0000-7000-8000-00000000d002"
    );

    // No pi directory at all: a generated demo archive, and a note saying so.
    let empty = Sandbox::new();
    let r = empty.run(&["import"]);
    let expected = format!(
        "no pi sessions at {}; imported a generated demo archive from {} instead\n",
        empty.home().join(".pi/agent/sessions").display(),
        empty.path("data/sessiontree/demo-sessions").display()
    );
    assert!(r.ok().starts_with(&expected), "{r:#?}");
    assert_eq!(
        empty.json(&["import"])["unchanged"],
        empty.json(&["stats"])["sessions"]
    );
    // A path that does not exist: not_found, naming it, nothing imported.
    let missing = empty.path("nowhere");
    let err = empty.run(&["import", s(&missing)]);
    assert!(err.fails(3, "not_found").contains(s(&missing)), "{err:#?}");
}

#[test]
fn appended_file_imports_only_the_new_lines() {
    let sb = Sandbox::new();
    let mut f = tree_session();
    let path = f.save(&sb, "sessions");
    let r = sb.import(&[&path]);
    assert_eq!(
        (r["imported"].clone(), r["entries"].clone()),
        (json!(1), json!(36))
    );
    let r = sb.import(&[&path]);
    assert_eq!(
        (r["unchanged"].clone(), r["entries"].clone()),
        (json!(1), json!(0))
    );

    // pi appends two entries.
    let before = f.lines.len();
    f.user("usr00008", "lbl00003", "Publish it to crates.io")
        .assistant("ast00014", "usr00008", "Published tinyjson 0.1.0.");
    std::fs::write(&path, f.text()).expect("append");
    let r = sb.import(&[&path]);
    assert_eq!(
        (
            r["appended"].clone(),
            r["imported"].clone(),
            r["entries"].clone()
        ),
        (json!(1), json!(0), json!(f.lines.len() - before))
    );
    let branch = ids(&sb.json(&["branch", TREE_ID])["entries"]);
    assert_eq!(branch.last().map(String::as_str), Some("ast00014"));
    let hits = sb.json(&["search", "crates.io"]);
    assert_eq!(hits["hits"][0]["entry"], "usr00008");
    assert_eq!(sb.json(&["import", s(&path)])["unchanged"], 1);

    // pi is writing a line right now: the torn tail waits for the next import.
    let mut text = f.text();
    text.push_str(r#"{"type":"message","id":"usr00009","parentId":"ast00014","timest"#);
    std::fs::write(&path, &text).expect("torn");
    let r = sb.import(&[&path]);
    assert_eq!(r["appended"], 1);
    assert_eq!(r["entries"], 0);
    assert_eq!(
        r["tornTails"],
        json!([{"file": s(&path), "line": f.lines.len() + 1}])
    );
    f.user("usr00009", "ast00014", "Thanks!");
    std::fs::write(&path, f.text()).expect("complete");
    let r = sb.run(&["import", s(&path)]);
    assert!(
        r.ok().starts_with("1 files: 0 imported, 1 appended"),
        "{r:#?}"
    );
    let branch = ids(&sb.json(&["branch", TREE_ID])["entries"]);
    assert_eq!(branch.last().map(String::as_str), Some("usr00009"));

    // A file rewritten (not appended to) is refused, and the archive keeps its copy.
    std::fs::write(&path, f.text().replace("Thanks!", "Thank you!")).expect("rewrite");
    let r = sb.run(&["--json", "import", s(&path)]);
    assert_eq!(r.status, 2, "{r:#?}");
    let v = r.parse();
    assert_eq!(v["failed"][0]["code"], "invalid_session");
    let msg = v["failed"][0]["message"].as_str().expect("message");
    assert!(msg.contains("changed since it was imported"), "{msg}");
    assert_eq!(
        sb.json(&["search", "Thanks"])["hits"][0]["entry"],
        "usr00009"
    );
    assert_eq!(sb.json(&["check"])["ok"], true);
}

#[test]
fn a_bad_file_is_reported_with_file_and_line_and_the_others_import() {
    let sb = Sandbox::new();
    let good_a = small_session(
        "01950000-0000-7000-8000-0000000000a1",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "alpha",
        None,
    )
    .save(&sb, "in");
    let good_c = small_session(
        "01950000-0000-7000-8000-0000000000c1",
        "/p",
        "2025-01-03T00:00:00.000Z",
        "gamma",
        None,
    )
    .save(&sb, "in");
    // Line 3 (of 4) is not JSON; the file imports nothing.
    let mut bad = small_session(
        "01950000-0000-7000-8000-0000000000b1",
        "/p",
        "2025-01-02T00:00:00.000Z",
        "beta",
        None,
    );
    bad.lines
        .insert(2, r#"{"type":"message","id":"oops","#.to_owned());
    let bad_path = bad.save(&sb, "in");
    // A file whose first line is not a session header.
    let no_header = sb.write("in/--p--/notes.jsonl", "{\"hello\":1}\n");

    let r = sb.run(&["import", s(&sb.path("in"))]);
    assert_eq!(r.status, 2, "{r:#?}");
    let text = &r.stdout;
    assert!(
        text.starts_with(
            "4 files: 2 imported, 0 appended, 0 unchanged, 0 already present, 2 failed\n"
        ),
        "{text}"
    );
    let line = format!(
        "failed [invalid_entry]: Invalid JSONL session file {}: line 3 ",
        bad_path.display()
    );
    assert!(text.contains(&line), "names file and line:\n{text}");
    let header = format!(
        "failed [invalid_session]: Invalid JSONL session file {}: first line is not a valid session header\n",
        no_header.display()
    );
    assert!(text.contains(&header), "{text}");

    let ls = sb.json(&["ls"]);
    let listed: Vec<&str> = ls["sessions"]
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s["id"].as_str().expect("id"))
        .collect();
    assert_eq!(
        listed,
        [
            "01950000-0000-7000-8000-0000000000c1",
            "01950000-0000-7000-8000-0000000000a1"
        ]
    );
    sb.run(&["tree", "01950000-0000-7000-8000-0000000000b1"])
        .fails(3, "not_found");
    assert!(good_a.exists() && good_c.exists());

    // The same in JSON, the bad line's number given on its own.
    let sb2 = Sandbox::new();
    let r = sb2.run(&["--json", "import", s(&good_a), s(&bad_path), s(&good_c)]);
    assert_eq!(r.status, 2);
    let v = r.parse();
    assert_eq!(v["imported"], 2);
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(1));
    let f = &v["failed"][0];
    assert_eq!(f["file"], s(&bad_path));
    assert_eq!(f["code"], "invalid_entry");
    assert_eq!(f["line"], 3);
    let msg = f["message"].as_str().expect("message");
    assert!(
        msg.starts_with(&format!(
            "Invalid JSONL session file {}: line 3 ",
            bad_path.display()
        )),
        "{msg}"
    );

    // Fixed, it imports; the others stay unchanged.
    bad.lines.remove(2);
    std::fs::write(&bad_path, bad.text()).expect("fix");
    let v = sb2.import(&[&good_a, &bad_path, &good_c]);
    assert_eq!(
        (v["imported"].clone(), v["unchanged"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(sb2.json(&["check"])["ok"], true);
}

// ---------------------------------------------------------------------------
// export

#[test]
fn export_is_byte_identical_for_v3_and_upgrades_v1() {
    let sb = Sandbox::new();
    let tree = tree_session();
    let original = tree.save(&sb, "sessions");
    let small = small_session(
        "01950000-0000-7000-8000-0000000000e1",
        "C:\\Users\\ada",
        "2025-01-01T00:00:00.000Z",
        "windows",
        None,
    );
    let small_path = small.save(&sb, "sessions");
    sb.import(&[&sb.path("sessions"), &pi_fixtures()]);

    // One session, by prefix: the same bytes at the same place in pi's layout.
    let out = sb.path("out");
    let v = sb.json(&["export", "01950000-aaaa", "--out", s(&out)]);
    let exported = out.join(tree.pi_path());
    assert_eq!(
        v,
        json!({"exported": [{"session": TREE_ID, "path": s(&exported), "action": "created", "backup": null}], "failed": []})
    );
    assert_eq!(
        std::fs::read(&exported).expect("exported"),
        std::fs::read(&original).expect("original")
    );

    // Everything.
    let all = sb.path("all");
    let r = sb.run(&["export", "--all", "--out", s(&all)]);
    assert_eq!(r.ok().lines().count(), 4, "{r:#?}");
    assert_eq!(read(&all.join(tree.pi_path())), read(&original));
    assert_eq!(read(&all.join(small.pi_path())), read(&small_path));
    assert!(
        small.pi_path().starts_with("--C--Users-ada--/"),
        "{}",
        small.pi_path()
    );

    // A version-1 file comes out as the upgraded version 3.
    let v1 = read(&find_file(&all, &format!("_{COMPACTION_ID}.jsonl")));
    let lines: Vec<Value> = v1
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 1003);
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["version"], 3);
    assert_eq!(lines[0]["id"], COMPACTION_ID);
    for (i, e) in lines.iter().enumerate().skip(1) {
        assert_eq!(e["id"], format!("v1-{i:05}"));
        let parent = if i == 1 {
            Value::Null
        } else {
            json!(format!("v1-{:05}", i - 1))
        };
        assert_eq!(e["parentId"], parent);
    }
    let compactions: Vec<&Value> = lines.iter().filter(|e| e["type"] == "compaction").collect();
    assert_eq!(compactions.len(), 2);
    for c in compactions {
        assert!(
            c["firstKeptEntryId"]
                .as_str()
                .is_some_and(|id| id.starts_with("v1-")),
            "{c}"
        );
        assert!(c.get("firstKeptEntryIndex").is_none());
    }
    // The upgraded file reads as the archive session does, and is a fixed point.
    let exported_v1 = find_file(&all, &format!("_{COMPACTION_ID}.jsonl"));
    assert_eq!(
        sb.run(&["tree", s(&exported_v1)]).ok(),
        sb.run(&["tree", COMPACTION_ID]).ok()
    );
    let sb2 = Sandbox::new();
    sb2.import(&[&exported_v1]);
    let again = sb2.path("again");
    sb2.json(&["export", COMPACTION_ID, "--out", s(&again)]);
    assert_eq!(read(&find_file(&again, ".jsonl")), v1);

    // Errors: nothing named, an unknown session.
    sb.run(&["export", "--out", s(&out)]).fails(2, "usage");
    sb.run(&["export", "nope", "--out", s(&out)])
        .fails(3, "not_found");
}

#[test]
fn export_refuses_to_write_outside_the_directory() {
    let sb = Sandbox::new();
    let evil = small_session(
        "../../escaped",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "escape",
        None,
    );
    let good = small_session(
        "01950000-0000-7000-8000-0000000000f1",
        "/p",
        "2025-01-02T00:00:00.000Z",
        "fine",
        None,
    );
    sb.write("in/evil.jsonl", &evil.text());
    good.save(&sb, "in");
    // Import refuses an id that could never be exported, naming the file.
    let imported = sb.run(&["--json", "import", s(&sb.path("in"))]);
    assert_eq!(imported.status, 2, "{imported:#?}");
    let v = imported.parse();
    assert_eq!(
        (v["imported"].as_u64(), v["failed"][0]["code"].as_str()),
        (Some(1), Some("invalid_session"))
    );
    assert!(
        v["failed"][0]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("evil.jsonl")),
        "{v}"
    );
    // An archive written before import checked ids may hold one: export
    // still refuses it.
    {
        let archive = sessiontree::backend::sqlite::Archive::open(
            sb.default_db(),
            sessiontree::Durability::Relaxed,
        )
        .expect("archive");
        let text = evil.text();
        let mut lines = text.lines();
        let header = lines.next().expect("header");
        let new = sessiontree::backend::sqlite::NewSession {
            id: "../../escaped".into(),
            created_at: "2025-01-01T00:00:00.000Z".into(),
            cwd: "/p".into(),
            parent_session: None,
            metadata: None,
            header: header.to_owned(),
        };
        archive
            .create_session_with(&new, lines.map(sessiontree::Entry::from_json))
            .expect("an old archive's session");
    }
    let out = sb.path("box/out");

    // The refused session is reported; the others are exported (status 2, as import).
    let r = sb.run(&["--json", "export", "--all", "--out", s(&out)]);
    assert_eq!(r.status, 2, "{r:#?}");
    let v = r.parse();
    assert_eq!(
        v["exported"],
        json!([{"session": good.id, "path": s(&out.join(good.pi_path())), "action": "created", "backup": null}])
    );
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["failed"][0]["session"], "../../escaped");
    assert_eq!(v["failed"][0]["code"], "invalid_session");
    let msg = v["failed"][0]["message"].as_str().expect("message");
    assert!(msg.contains("refused") && msg.contains(s(&out)), "{msg}");
    let r = sb.run(&["export", "../../escaped", "--out", s(&out)]);
    assert_eq!(r.status, 2);
    assert!(
        r.stdout.starts_with(
            "failed [invalid_session]: ../../escaped: session \"../../escaped\" would export to "
        ),
        "{r:#?}"
    );

    let written = walk(sb.dir.path());
    assert!(
        written
            .iter()
            .all(|f| !f.to_string_lossy().contains("escaped")),
        "{written:?}"
    );
    assert!(
        written
            .iter()
            .all(|f| !f.to_string_lossy().ends_with(".tmp")),
        "{written:?}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// reading: ls, tree, branch, context, search, stats

/// Five small sessions over two working directories and three months.
fn listing(sb: &Sandbox) {
    let sessions = [
        (
            "01950000-0000-7000-8000-000000000101",
            "/work/a",
            "2025-01-10T09:00:00.000Z",
            "rust lifetimes",
            Some("Lifetimes"),
        ),
        (
            "01950000-0000-7000-8000-000000000102",
            "/work/b",
            "2025-02-10T09:00:00.000Z",
            "sqlite pragmas",
            Some("SQLite tuning"),
        ),
        (
            "01950000-0000-7000-8000-000000000103",
            "/work/a",
            "2025-02-20T09:00:00.000Z",
            "rust traits",
            None,
        ),
        (
            "01950000-0000-7000-8000-000000000104",
            "/work/b",
            "2025-03-05T09:00:00.000Z",
            "fts5 ranking",
            Some("FTS ranking notes"),
        ),
        (
            "01950000-0000-7000-8000-000000000105",
            "/work/a",
            "2025-03-15T09:00:00.000Z",
            "rust macros",
            Some("macro_rules"),
        ),
    ];
    for (id, cwd, created, topic, name) in sessions {
        small_session(id, cwd, created, topic, name).save(sb, "sessions");
    }
    sb.import(&[&sb.path("sessions")]);
}

fn listed(v: &Value) -> Vec<String> {
    v["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["id"].as_str().expect("id")[33..].to_owned())
        .collect()
}

#[test]
fn ls_filters_and_pages() {
    let sb = Sandbox::new();
    assert_eq!(sb.run(&["ls"]).ok(), "no sessions\n");
    assert_eq!(
        sb.json(&["ls"]),
        json!({"sessions": [], "page": 1, "limit": 50})
    );
    listing(&sb);

    assert_eq!(
        listed(&sb.json(&["ls"])),
        ["105", "104", "103", "102", "101"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--cwd", "/work/a"])),
        ["105", "103", "101"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--since", "2025-02-15"])),
        ["105", "104", "103"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--since", "2025-02-10T09:00:00.000Z"])),
        ["105", "104", "103", "102"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--name", "sqlite"])),
        ["102"],
        "case-insensitive"
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--name", "n"])),
        ["104", "102"],
        "unnamed sessions never match"
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--cwd", "/work/b", "--since", "2025-03-01"])),
        ["104"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--cwd", "/nowhere"])),
        Vec::<String>::new()
    );

    let page = sb.json(&["ls", "--limit", "2", "--page", "2"]);
    assert_eq!(listed(&page), ["103", "102"]);
    assert_eq!(
        (page["page"].clone(), page["limit"].clone()),
        (json!(2), json!(2))
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--limit", "2", "--page", "3"])),
        ["101"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--limit", "2", "--page", "4"])),
        Vec::<String>::new()
    );
    assert_eq!(
        sb.run(&["ls", "--limit", "2", "--page", "4"]).ok(),
        "no sessions\n"
    );
    let r = sb.run(&["ls", "--page", "0"]);
    assert_eq!(r.status, 2, "a usage error: {r:#?}");
    assert!(r.stderr.contains("pages are numbered from 1"), "{r:#?}");

    let row = &sb.json(&["ls", "--name", "FTS"])["sessions"][0];
    assert_eq!(
        *row,
        json!({"id": "01950000-0000-7000-8000-000000000104", "createdAt": "2025-03-05T09:00:00.000Z",
               "cwd": "/work/b", "name": "FTS ranking notes", "entries": 3, "messages": 2,
               "cost": 0.25, "totalTokens": 520})
    );

    let text = sb.run(&["ls", "--cwd", "/work/b"]);
    let expected = "\
ID                                    CREATED                   ENTRIES    MSGS      COST  NAME                      CWD
01950000-0000-7000-8000-000000000104  2025-03-05T09:00:00.000Z        3       2    0.2500  FTS ranking notes         /work/b
01950000-0000-7000-8000-000000000102  2025-02-10T09:00:00.000Z        3       2    0.2500  SQLite tuning             /work/b
";
    assert_eq!(text.ok(), expected);

    let bad = sb.run(&["ls", "--since", "last tuesday"]);
    let err = bad.fails(2, "usage");
    assert!(
        err.contains("--since \"last tuesday\" is not an ISO-8601 date or time"),
        "{err}"
    );
}

#[test]
fn history_lists_leaf_moves_newest_first_from_archive_and_file() {
    let sb = Sandbox::new();
    let path = tree_session().save(&sb, "sessions");
    sb.import(&[&path]);
    let from_archive = sb.json(&["history", TREE_ID]);
    assert_eq!(
        from_archive["moves"],
        json!([
            {"id": "leaf0002", "timestamp": from_archive["moves"][0]["timestamp"], "from": "ast00012", "to": "nam00001"},
            {"id": "leaf0001", "timestamp": from_archive["moves"][1]["timestamp"], "from": "ast00004", "to": "lbl00001"},
        ])
    );
    assert_eq!(sb.json(&["history", s(&path)]), from_archive);
    assert_eq!(
        sb.json(&["history", TREE_ID, "--limit", "1"])["moves"],
        json!([from_archive["moves"][0]])
    );
    // Text: where the leaf was and where it went, with previews.
    let text = sb.run(&["history", TREE_ID]).ok().to_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].contains("from ast00012 ") && lines[1].contains("to nam00001 "),
        "{text}"
    );
    // A move made now is the newest.
    sb.run(&["move", TREE_ID, "usr00001"]).ok();
    let moves = sb.json(&["history", TREE_ID])["moves"].clone();
    assert_eq!(
        (moves[0]["from"].as_str(), moves[0]["to"].as_str()),
        (Some("lbl00003"), Some("usr00001"))
    );
    sb.run(&["history", "nope"]).fails(3, "not_found");
}

#[test]
fn tree_snapshot() {
    let sb = Sandbox::new();
    let path = tree_session().save(&sb, "sessions");
    sb.import(&[&path]);
    let text = sb.run(&["tree", TREE_ID]).ok().to_owned();

    let snapshot = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/tree.txt");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(snapshot.parent().expect("dir")).expect("mkdir");
        std::fs::write(&snapshot, &text).expect("write snapshot");
    }
    let expected = std::fs::read_to_string(&snapshot)
        .expect("tests/snapshots/tree.txt (run with UPDATE_SNAPSHOTS=1 to create it)");
    assert_eq!(
        text, expected,
        "tree output changed; if deliberate, rerun with UPDATE_SNAPSHOTS=1\n--- got ---\n{text}"
    );

    // The same from the file itself, through the alias, and by prefix.
    assert_eq!(sb.run(&["tree", s(&path)]).ok(), expected);
    assert_eq!(sb.run(&["show", "01950000-aaaa"]).ok(), expected);

    // No folding: every entry has its line.
    let all = sb.run(&["tree", TREE_ID, "--fold", "0"]);
    assert_eq!(all.ok().lines().count(), 36);
    assert!(!all.ok().contains('⋮'));

    // A subtree.
    let sub = sb.run(&["tree", TREE_ID, "--from", "nam00001"]);
    let expected_sub = "\
* nam00001 [name] tinyjson parser
├─ * usr00007 user: Benchmark it against serde_json with criterion
│  * ast00013 [bench] assistant: serde_json is 3x faster on the twitter.json corpus; fine for…
│  * lbl00003 [label ast00013 → bench]  ← leaf
└─   usr00006 user: Benchmark it against serde_json
     ast00012 assistant: (error: 429 rate_limit_error: too many requests)
     leaf0002 [leaf → nam00001]
";
    assert_eq!(sub.ok(), expected_sub);
    sb.run(&["tree", TREE_ID, "--from", "nope"])
        .fails(3, "not_found");

    // JSON: nested runs, every entry (folding is for text only), the active
    // branch first.
    let v = sb.json(&["tree", TREE_ID]);
    assert_eq!(v["leaf"], "lbl00003");
    let roots = v["roots"].as_array().expect("roots");
    assert_eq!(roots.len(), 1);
    let first = &roots[0];
    assert_eq!(
        ids(&first["entries"]),
        ["mdl00001", "thk00001", "usr00001", "ast00001", "res00001", "ast00002", "lbl00001"]
    );
    assert_eq!(
        first["entries"][2],
        json!({"id": "usr00001", "type": "message", "active": true, "label": "setup",
               "preview": "user: Set up a Rust crate for a tiny JSON parser"})
    );
    let forks = first["children"].as_array().expect("children");
    assert_eq!(forks.len(), 2);
    assert_eq!(forks[0]["entries"][0]["id"], "bsm00001");
    assert_eq!(
        forks[0]["entries"].as_array().map(Vec::len),
        Some(18),
        "the long run is whole"
    );
    assert_eq!(forks[1]["entries"][0]["id"], "usr00002");
    assert_eq!(forks[1]["entries"][0]["active"], false);
    assert_eq!(forks[1]["entries"][0]["label"], Value::Null);
    assert_eq!(forks[1]["children"], json!([]));
}

#[test]
fn branch_context_and_stats() {
    let sb = Sandbox::new();
    let f = tree_session();
    let path = f.save(&sb, "sessions");
    sb.import(&[&path]);

    // The active path, cut at the compaction (its first kept entry included).
    let v = sb.json(&["branch", TREE_ID]);
    assert_eq!(
        ids(&v["entries"]),
        [
            "ast00010", "cmp00001", "usr00005", "ast00011", "nam00001", "usr00007", "ast00013",
            "lbl00003"
        ]
    );
    // Entries come back exactly as written.
    let line_of = |id: &str| -> Value {
        let l = f
            .lines
            .iter()
            .find(|l| l.contains(&format!(r#""id":"{id}""#)))
            .expect("line");
        serde_json::from_str(l).expect("json")
    };
    assert_eq!(v["entries"][1], line_of("cmp00001"));
    let text = sb.run(&["branch", TREE_ID]);
    let expected = "\
ast00010  assistant: All 12 tests pass; the parser handles numbers, strings and arrays.
cmp00001  [compaction: 48k tokens] Hand-written parser in src/parser.rs; 12 tests pass.
usr00005  user: Add \\u escapes to strings
ast00011  assistant: Strings now decode \\uXXXX escapes, surrogate pairs included.
nam00001  [name] tinyjson parser
usr00007  user: Benchmark it against serde_json with criterion
ast00013  assistant: serde_json is 3x faster on the twitter.json corpus; fine for now.
lbl00003  [label ast00013 → bench]
";
    assert_eq!(text.ok(), expected);
    let from = sb.json(&["branch", TREE_ID, "--from", "usr00004"]);
    assert_eq!(
        ids(&from["entries"]),
        [
            "mdl00001", "thk00001", "usr00001", "ast00001", "res00001", "ast00002", "lbl00001",
            "bsm00001", "usr00004"
        ]
    );
    assert_eq!(
        sb.json(&["branch", s(&path)]),
        v,
        "a .jsonl path reads the same"
    );
    sb.run(&["branch", TREE_ID, "--from", "nope"])
        .fails(3, "not_found");

    // The model's context: the compaction summary, the kept entry, then what
    // follows. Its state comes from the same path, so the thinking level set
    // before the compaction is not seen.
    let c = sb.json(&["context", TREE_ID]);
    assert_eq!(c["thinkingLevel"], "off");
    assert_eq!(
        c["model"],
        json!({"provider": "anthropic", "modelId": "claude-sonnet-4-5"})
    );
    assert_eq!(c["activeToolNames"], Value::Null);
    let roles: Vec<&str> = c["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().expect("role"))
        .collect();
    assert_eq!(
        roles,
        [
            "compactionSummary",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(
        c["messages"][0]["summary"],
        "Hand-written parser in src/parser.rs; 12 tests pass."
    );
    assert_eq!(c["messages"][0]["tokensBefore"], 48_200);
    let text = sb.run(&["context", TREE_ID]);
    let expected = "\
thinking: off  model: anthropic/claude-sonnet-4-5  tools: -
compactionSummary: Hand-written parser in src/parser.rs; 12 tests pass.
        assistant: All 12 tests pass; the parser handles numbers, strings and arrays.
             user: Add \\u escapes to strings
        assistant: Strings now decode \\uXXXX escapes, surrogate pairs included.
             user: Benchmark it against serde_json with criterion
        assistant: serde_json is 3x faster on the twitter.json corpus; fine for now.
";
    assert_eq!(text.ok(), expected);
    // From the abandoned branch: its summary is not there, the nom turn is.
    let c = sb.json(&["context", TREE_ID, "--from", "ast00003"]);
    let roles: Vec<&str> = c["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().expect("role"))
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "user",
            "assistant"
        ]
    );
    // From the retried branch: the branch summary is a message.
    let c = sb.json(&["context", TREE_ID, "--from", "usr00004"]);
    assert_eq!(
        c["messages"][4],
        json!({"role": "branchSummary", "summary": "Tried nom for numbers; compile times doubled, abandoned.", "fromId": "lbl00001", "timestamp": c["messages"][4]["timestamp"]})
    );

    // Statistics over every branch: 26 messages, 13 assistant usages and the compaction's.
    let st = sb.json(&["stats", TREE_ID]);
    assert_eq!(
        st,
        json!({"messageCount": 26, "cachedTokens": 5200, "uncachedTokens": 2300,
               "totalTokens": 7960, "costTotal": 3.75, "entries": 36})
    );
    assert_eq!(sb.json(&["stats", s(&path)]), st);
    assert_eq!(
        sb.run(&["stats", TREE_ID]).ok(),
        "messages 26  tokens 7960 (cached 5200, uncached 2300)  cost $3.7500  entries 36\n"
    );
    let all = sb.json(&["stats"]);
    assert_eq!(
        all,
        json!({"sessions": 1, "entries": 36, "messageCount": 26, "cachedTokens": 5200,
               "uncachedTokens": 2300, "totalTokens": 7960, "costTotal": 3.75,
               "perCwd": [{"cwd": "/home/ada/tinyjson", "sessions": 1, "messages": 26, "cost": 3.75}]})
    );
    assert_eq!(
        sb.run(&["stats"]).ok(),
        "1 sessions, 36 entries, 26 messages, 7960 tokens, $3.7500\n     1 sessions       26 messages $    3.7500  /home/ada/tinyjson\n"
    );
}

#[test]
fn search_with_filters() {
    let sb = Sandbox::new();
    tree_session().save(&sb, "sessions");
    listing(&sb);
    sb.import(&[&sb.path("sessions")]);

    let hits = |args: &[&str]| -> Vec<(String, String, String)> {
        let mut all = vec!["search"];
        all.extend_from_slice(args);
        sb.json(&all)["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| {
                (
                    h["session"].as_str().expect("session")[24..].to_owned(),
                    h["entry"].as_str().expect("entry").to_owned(),
                    h["role"].as_str().expect("role").to_owned(),
                )
            })
            .collect()
    };
    let mut serde = hits(&["serde_json"]);
    serde.sort();
    assert_eq!(
        serde,
        [
            ("000000000001".into(), "ast00013".into(), "assistant".into()),
            ("000000000001".into(), "usr00006".into(), "user".into()),
            ("000000000001".into(), "usr00007".into(), "user".into()),
        ]
    );
    assert_eq!(
        hits(&["serde_json", "--role", "assistant"]),
        [("000000000001".into(), "ast00013".into(), "assistant".into())]
    );
    assert_eq!(hits(&["serde_json", "--role", "user"]).len(), 2);
    assert_eq!(hits(&["serde_json", "--limit", "1"]).len(), 1);
    // All words must match, in any order.
    assert_eq!(hits(&["criterion", "benchmark"]).len(), 1);

    let mut rust = hits(&["rust"]);
    rust.sort();
    assert_eq!(rust.len(), 7, "{rust:?}");
    let rust_a = hits(&["rust", "--cwd", "/work/a", "--role", "user"]);
    assert_eq!(rust_a.len(), 3);
    assert_eq!(
        hits(&["rust", "--session", "01950000-0000-7000-8000-000000000103"]).len(),
        2
    );
    assert_eq!(
        hits(&["rust", "--session", "01950000-aaaa", "--role", "user"]).len(),
        1,
        "by prefix"
    );
    sb.run(&["search", "rust", "--session", "01950000-0000"])
        .fails(2, "usage");
    sb.run(&["search", "rust", "--session", "nope"])
        .fails(3, "not_found");
    assert_eq!(hits(&["nothing-like-this"]).len(), 0);
    assert_eq!(
        sb.run(&["search", "nothing-like-this"]).ok(),
        "no matches\n"
    );
    // User text is never FTS5 syntax.
    for q in ["\"unbalanced", "rust AND", "NEAR(", "*", "a:b", "-x", "^"] {
        sb.run(&["search", "--", q]).ok();
    }

    let v = sb.json(&["search", "escapes", "--role", "user"]);
    let hit = &v["hits"][0];
    assert_eq!(hit["session"], TREE_ID);
    assert_eq!(hit["entry"], "usr00005");
    assert_eq!(hit["role"], "user");
    assert_eq!(hit["snippet"], "Add \\u [escapes] to strings");
    assert!(hit["rank"].is_number());
    assert_eq!(
        sb.run(&["search", "escapes", "--role", "user"]).ok(),
        format!("{TREE_ID} usr00005       user: Add \\u [escapes] to strings\n")
    );
}

// ---------------------------------------------------------------------------
// writes: label, name, move, fork; then check

/// The ids of the `--json` tree's entries that carry a label, with it.
fn labels(tree: &Value) -> Vec<(String, String)> {
    fn walk(run: &Value, out: &mut Vec<(String, String)>) {
        for e in run["entries"].as_array().into_iter().flatten() {
            if let Some(l) = e["label"].as_str() {
                out.push((e["id"].as_str().expect("id").to_owned(), l.to_owned()));
            }
        }
        for c in run["children"].as_array().into_iter().flatten() {
            walk(c, out);
        }
    }
    let mut out = Vec::new();
    for r in tree["roots"].as_array().into_iter().flatten() {
        walk(r, &mut out);
    }
    out.sort();
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// label, name and move on `session` (an archive id or a `.jsonl` path);
/// returns the ids of the entries they appended.
fn label_name_move(sb: &Sandbox, session: &str) -> Vec<String> {
    let mut appended = Vec::new();
    let entry = |appended: &mut Vec<String>, v: &Value, key: &str| {
        let id = v[key].as_str().expect("new entry id").to_owned();
        assert_eq!(id.len(), 8, "a fresh entry id is 8 characters: {id}");
        appended.push(id);
    };

    // label: set, shown, then cleared; the label entry becomes the leaf.
    let v = sb.json(&["label", session, "usr00005", " escapes "]);
    assert_eq!(
        (v["target"].as_str(), v["label"].as_str()),
        (Some("usr00005"), Some("escapes"))
    );
    entry(&mut appended, &v, "entry");
    assert_eq!(
        labels(&sb.json(&["tree", session])),
        pairs(&[
            ("ast00013", "bench"),
            ("usr00001", "setup"),
            ("usr00004", "hand-written"),
            ("usr00005", "escapes")
        ])
    );
    assert_eq!(sb.json(&["tree", session])["leaf"], v["entry"]);
    let text = sb.run(&["label", session, "usr00001", "  "]);
    assert!(
        text.ok()
            .starts_with("cleared the label of usr00001 (entry "),
        "{text:#?}"
    );
    appended.push(text.ok()[37..45].to_owned());
    let v = sb.json(&["label", session, "usr00004", "hand-written"]);
    assert_eq!(v["label"], "hand-written");
    entry(&mut appended, &v, "entry");
    assert_eq!(
        labels(&sb.json(&["tree", session])),
        pairs(&[
            ("ast00013", "bench"),
            ("usr00004", "hand-written"),
            ("usr00005", "escapes")
        ])
    );
    let err = sb.run(&["label", session, "nope", "x"]);
    assert!(
        err.fails(3, "not_found").contains("Entry nope not found"),
        "{err:#?}"
    );
    let err = sb.run(&["--json", "label", session, "nope", "x"]);
    assert_eq!(err.status, 3);
    assert_eq!(
        err.parse(),
        json!({"error": {"code": "not_found", "message": "Entry nope not found"}})
    );

    // name: CR/LF runs become one space, then trimmed.
    let v = sb.json(&["name", session, "  Tiny\r\n\nJSON  "]);
    assert_eq!(v["name"], "Tiny JSON");
    entry(&mut appended, &v, "entry");
    assert_eq!(
        sb.run(&["name", session, "tinyjson, final"]).ok(),
        "named \"tinyjson, final\"\n"
    );
    appended.push(
        sb.json(&["branch", session])["entries"]
            .as_array()
            .and_then(|a| a.last())
            .expect("last")["id"]
            .as_str()
            .expect("id")
            .to_owned(),
    );

    // move with a summary: back to the nom attempt.
    let v = sb.json(&[
        "move",
        session,
        "usr00002",
        "--summary",
        "Back to nom, with caching",
    ]);
    // It appends a `leaf` entry (whose id is not reported), then the summary.
    appended.push(String::new());
    entry(&mut appended, &v, "summary");
    assert_eq!(v["leaf"], v["summary"]);
    let branch = sb.json(&["branch", session]);
    let last = branch["entries"]
        .as_array()
        .and_then(|a| a.last())
        .expect("last")
        .clone();
    assert_eq!(last["type"], "branch_summary");
    assert_eq!(last["parentId"], "usr00002");
    assert_eq!(last["fromId"], "usr00002");
    assert_eq!(last["summary"], "Back to nom, with caching");
    let context = sb.json(&["context", session]);
    let messages = context["messages"].as_array().expect("messages");
    assert_eq!(messages.last().expect("last")["role"], "branchSummary");
    assert_eq!(
        messages.len(),
        6,
        "usr00001 … ast00002, usr00002, the summary"
    );
    let tree = sb.run(&["tree", session, "--fold", "0"]);
    assert_eq!(
        tree.ok().matches("[leaf → usr00002]").count(),
        1,
        "{}",
        tree.ok()
    );

    sb.run(&["move", session, "nope"]).fails(3, "not_found");

    // move to root: nothing is active, the context is empty.
    let v = sb.json(&["move", session, "root"]);
    assert_eq!(v, json!({"leaf": null, "summary": null}));
    appended.push(String::new());
    assert!(sb
        .run(&["tree", session])
        .ok()
        .starts_with("(the leaf stands before the first entry)\n"));
    assert_eq!(sb.json(&["context", session])["messages"], json!([]));
    assert_eq!(sb.json(&["branch", session])["entries"], json!([]));

    // And back, without a summary.
    let r = sb.run(&["move", session, "lbl00003"]);
    assert_eq!(r.ok(), "leaf is now lbl00003\n");
    appended.push(String::new());
    assert_eq!(sb.json(&["tree", session])["leaf"], "lbl00003");
    appended
}

/// The fork errors, the same for an archive session and a file.
fn fork_errors(sb: &Sandbox, session: &str) {
    let err = sb.run(&["fork", session, "--entry", "ast00013"]);
    assert!(
        err.fails(6, "invalid_fork_target")
            .contains("Entry ast00013 is not a user message"),
        "{err:#?}"
    );
    let err = sb.run(&["fork", session, "--entry", "nope", "--position", "at"]);
    assert!(
        err.fails(6, "invalid_fork_target")
            .contains("Entry nope not found"),
        "{err:#?}"
    );
    let err = sb.run(&["--json", "fork", session, "--entry", "nope"]);
    assert_eq!(err.status, 6);
    assert_eq!(err.parse()["error"]["code"], "invalid_fork_target");
    let err = sb.run(&[
        "fork",
        session,
        "--entry",
        "usr00004",
        "--position",
        "after",
    ]);
    assert_eq!(err.status, 2, "a bad value is a usage error: {err:#?}");
}

#[test]
fn writes_on_an_archive_session() {
    let sb = Sandbox::new();
    let original = tree_session().save(&sb, "sessions");
    sb.import(&[&original]);
    let appended = label_name_move(&sb, "01950000-aaaa");
    let ls = sb.json(&["ls", "--name", "TINYJSON"]);
    assert_eq!(ls["sessions"][0]["name"], "tinyjson, final");
    assert_eq!(ls["sessions"][0]["entries"], 36 + appended.len());

    // fork before a user message: the path to its parent.
    let v = sb.json(&["fork", TREE_ID, "--entry", "usr00004"]);
    assert_eq!(v["entries"], 8);
    assert_eq!(v["path"], Value::Null);
    let before = v["session"].as_str().expect("id").to_owned();
    assert_eq!(
        ids(&sb.json(&["branch", &before])["entries"]),
        [
            "mdl00001", "thk00001", "usr00001", "ast00001", "res00001", "ast00002", "lbl00001",
            "bsm00001"
        ]
    );
    // fork at an entry: its path, cut at the compaction as the contract says.
    let v = sb.json(&["fork", TREE_ID, "--entry", "usr00005", "--position", "at"]);
    assert_eq!(v["entries"], 3);
    let at = v["session"].as_str().expect("id").to_owned();
    assert_eq!(
        ids(&sb.json(&["branch", &at])["entries"]),
        ["ast00010", "cmp00001", "usr00005"]
    );
    // Without --entry: the whole log.
    let r = sb.run(&["fork", TREE_ID]);
    assert!(
        r.ok().starts_with("forked into ")
            && r.ok()
                .ends_with(&format!(" ({} entries)\n", 36 + appended.len())),
        "{r:#?}"
    );
    fork_errors(&sb, TREE_ID);
    sb.run(&["fork", "nope", "--entry", "usr00004"])
        .fails(3, "not_found");
    assert_eq!(
        sb.json(&["ls"])["sessions"].as_array().map(Vec::len),
        Some(4)
    );

    // The archive wrote pi lines: the export is the original plus them.
    let out = sb.path("out");
    sb.json(&["export", TREE_ID, "--out", s(&out)]);
    let exported = read(&out.join(tree_session().pi_path()));
    let original = read(&original);
    assert!(exported.starts_with(&original));
    let new_lines: Vec<Value> = exported[original.len()..]
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(new_lines.len(), appended.len());
    for (line, id) in new_lines.iter().zip(&appended) {
        if !id.is_empty() {
            assert_eq!(line["id"], id.as_str());
        }
        assert!(
            line["timestamp"]
                .as_str()
                .is_some_and(|t| t.len() == 24 && t.ends_with('Z')),
            "{line}"
        );
    }

    let checked = sb.json(&["check"]);
    assert_eq!(
        (&checked["ok"], &checked["problems"]),
        (&json!(true), &json!([]))
    );
    // The cache's size is reported, in all and for the sessions with the most rows per entry.
    let cache = &checked["cache"];
    assert!(cache["rows"].as_i64().is_some_and(|r| r > 0), "{checked}");
    assert!(
        cache["rowsPerEntry"].as_f64().is_some_and(|r| r < 1.0),
        "{checked}"
    );
    assert!(
        cache["mostPerEntry"][0]["segments"]
            .as_i64()
            .is_some_and(|s| s >= 1),
        "{checked}"
    );
    let text = sb.run(&["check", TREE_ID]).ok().to_owned();
    assert!(
        text.starts_with(
            "ok: integrity_check passed, every branch cache equals its rebuild, and every entry's stored text, blobs and search row check out\nbranch cache: "
        ),
        "{text}"
    );
    assert!(text.contains(&format!("  {TREE_ID}: ")), "{text}");
    sb.run(&["check", "nope"]).fails(3, "not_found");

    // A file with problems: listed, status 8. A missing file is an error.
    let header = &tree_session().lines[0];
    let broken = sb.write(
        "broken.jsonl",
        &format!(
            "{header}\n{}\n{}\n{}\n",
            r#"{"type":"custom","id":"a","parentId":"b","timestamp":"t","customType":"x"}"#,
            r#"{"type":"custom","id":"b","parentId":"a","timestamp":"t","customType":"x"}"#,
            r#"{"type":"custom","id":"c","parentId":"zz","timestamp":"t","customType":"x"}"#
        ),
    );
    let r = sb.run(&["--json", "check", s(&broken)]);
    assert_eq!(r.status, 8, "{r:#?}");
    let problems = r.parse()["problems"].clone();
    assert_eq!(
        problems[0],
        "entry a: Entry a is its own ancestor: the parentId chain has a cycle"
    );
    assert!(
        problems
            .as_array()
            .is_some_and(|p| p.contains(&json!("entry c: Entry zz not found"))),
        "{problems}"
    );
    let r = sb.run(&["check", s(&broken)]);
    assert_eq!(r.status, 8);
    assert!(
        r.stdout
            .starts_with("problem: entry a: Entry a is its own ancestor"),
        "{r:#?}"
    );
    let bad_line = sb.write("bad-line.jsonl", &format!("{header}\n{{\n"));
    let r = sb.run(&["check", s(&bad_line)]);
    assert_eq!(r.status, 8);
    assert_eq!(
        r.stdout,
        format!(
            "problem: Invalid JSONL session file {}: line 2 is not valid JSON\n",
            bad_line.display()
        )
    );
    sb.run(&["check", s(&sb.path("missing.jsonl"))])
        .fails(3, "not_found");
}

#[test]
fn writes_on_a_jsonl_path() {
    let sb = Sandbox::new();
    let path = tree_session().save(&sb, "sessions");
    let p = s(&path);
    sb.import(&[&path]);
    let before = read(&path);
    let appended = label_name_move(&sb, p);
    let after = read(&path);
    assert!(after.starts_with(&before), "only appended to");
    assert_eq!(after[before.len()..].lines().count(), appended.len());

    // The archive catches up by importing the appended lines, and then shows
    // exactly what the file shows.
    let r = sb.import(&[&path]);
    assert_eq!(
        (r["appended"].clone(), r["entries"].clone()),
        (json!(1), json!(appended.len()))
    );
    assert_eq!(sb.run(&["tree", p]).ok(), sb.run(&["tree", TREE_ID]).ok());
    assert_eq!(sb.json(&["stats", p]), sb.json(&["stats", TREE_ID]));
    assert_eq!(sb.json(&["context", p]), sb.json(&["context", TREE_ID]));

    // fork of a file: a new file next to it, pointing back at it.
    let v = sb.json(&["fork", p, "--entry", "usr00004"]);
    assert_eq!(v["entries"], 8);
    let id = v["session"].as_str().expect("id");
    let fork_path = PathBuf::from(v["path"].as_str().expect("path"));
    assert_eq!(fork_path.parent(), path.parent());
    assert!(fork_path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(&format!("_{id}.jsonl"))));
    let text = read(&fork_path);
    let header: Value = serde_json::from_str(text.lines().next().expect("header")).expect("json");
    assert_eq!(header["version"], 3);
    assert_eq!(header["id"], id);
    assert_eq!(header["cwd"], "/home/ada/tinyjson");
    assert_eq!(
        header["parentSession"],
        s(&std::fs::canonicalize(&path).expect("canonical"))
    );
    assert_eq!(
        ids(&sb.json(&["branch", s(&fork_path)])["entries"]),
        [
            "mdl00001", "thk00001", "usr00001", "ast00001", "res00001", "ast00002", "lbl00001",
            "bsm00001"
        ]
    );
    let v = sb.json(&["fork", p, "--entry", "usr00005", "--position", "at"]);
    assert_eq!(v["entries"], 3);
    fork_errors(&sb, p);
    // check validates a file too.
    assert_eq!(
        sb.run(&["check", p]).ok(),
        format!(
            "ok: {p} is a valid session file ({} entries)\n",
            36 + appended.len()
        )
    );
    assert_eq!(
        sb.json(&["check", s(&fork_path)]),
        json!({"ok": true, "problems": []})
    );
    sb.run(&["fork", s(&sb.path("missing.jsonl")), "--entry", "usr00004"])
        .fails(3, "not_found");
    // The forks import like any pi file.
    let r = sb.import(&[&sb.path("sessions")]);
    assert_eq!(
        (r["imported"].clone(), r["unchanged"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(sb.json(&["check"])["ok"], true);
}

// ---------------------------------------------------------------------------
// SESSION arguments, errors, help

#[test]
fn session_arguments_by_id_prefix_and_path() {
    let sb = Sandbox::new();
    let path = tree_session().save(&sb, "sessions");
    small_session(
        "01950000-0000-7000-8000-000000000101",
        "/w",
        "2025-01-01T00:00:00.000Z",
        "one",
        None,
    )
    .save(&sb, "sessions");
    small_session(
        "01950000-0000-7000-8000-000000000102",
        "/w",
        "2025-01-02T00:00:00.000Z",
        "two",
        None,
    )
    .save(&sb, "sessions");
    sb.import(&[&sb.path("sessions")]);

    // Full id, unique prefixes, and the file itself all name the same session.
    let full = sb.run(&["tree", TREE_ID]).ok().to_owned();
    for arg in [
        "01950000-a",
        "01950000-aaaa-7000-8000-00000000000",
        s(&path),
    ] {
        assert_eq!(sb.run(&["tree", arg]).ok(), full, "{arg}");
    }
    assert_eq!(
        sb.json(&["stats", "01950000-0000-7000-8000-000000000102"])["messageCount"],
        2
    );

    // Ambiguous: several sessions start so.
    for arg in ["0195", "01950000-0000-7000-8000-00000000010"] {
        let r = sb.run(&["stats", arg]);
        let err = r.fails(2, "usage");
        assert!(
            err.contains(&format!(
                "session prefix {arg:?} is ambiguous; give more characters"
            )),
            "{err}"
        );
        // Like git, the candidates are listed.
        assert!(
            err.contains("\n  01950000-0000-7000-8000-000000000101")
                && err.contains("\n  01950000-0000-7000-8000-000000000102"),
            "{err}"
        );
    }
    // Unknown, empty, a missing file.
    let r = sb.run(&["branch", "abc"]);
    assert_eq!(
        r.fails(3, "not_found"),
        "sessiontree: error [not_found]: Session not found: abc\n"
    );
    sb.run(&["branch", ""]).fails(3, "not_found");
    let missing = sb.path("missing.jsonl");
    let err = sb.run(&["tree", s(&missing)]);
    assert!(err.fails(3, "not_found").contains(s(&missing)), "{err:#?}");
    // A broken file is named with its line.
    let broken = sb.write(
        "broken.jsonl",
        &format!("{}\n[1]\n", tree_session().lines[0]),
    );
    let err = sb.run(&["tree", s(&broken)]);
    assert!(
        err.fails(5, "invalid_entry").contains(&format!(
            "Invalid JSONL session file {}: line 2 ",
            broken.display()
        )),
        "{err:#?}"
    );
    let err = sb.run(&["--json", "tree", s(&broken)]);
    assert_eq!(err.parse()["error"]["code"], "invalid_entry");
    // A directory that is no session file: the id lookup fails.
    sb.run(&["tree", s(&sb.path("sessions"))])
        .fails(3, "not_found");
}

#[test]
fn errors_in_json_are_one_object_on_stdout() {
    let sb = Sandbox::new();
    let r = sb.run(&["--json", "tree", "nope"]);
    assert_eq!(r.status, 3);
    assert_eq!(
        r.parse(),
        json!({"error": {"code": "not_found", "message": "Session not found: nope"}})
    );
    assert_eq!(
        r.stderr,
        "sessiontree: error [not_found]: Session not found: nope\n"
    );
    // Without --json nothing goes to stdout.
    let r = sb.run(&["tree", "nope"]);
    assert_eq!((r.status, r.stdout.as_str()), (3, ""));
    // The archive cannot be created: storage.
    let blocker = sb.write("file", "not a directory");
    let db = blocker.join("archive.db");
    let r = sb.run(&["--json", "--db", s(&db), "ls"]);
    assert_eq!(r.status, 7, "{r:#?}");
    assert_eq!(r.parse()["error"]["code"], "storage");
}

#[test]
fn help_describes_every_command() {
    let sb = Sandbox::new();
    let top = sb.run(&["--help"]);
    let commands = [
        "import", "ls", "tree", "branch", "context", "search", "stats", "export", "fork", "label",
        "name", "move", "check", "delete", "rpc",
    ];
    for c in commands {
        assert!(
            top.ok().contains(&format!("\n  {c} ")),
            "--help lists {c}:\n{}",
            top.ok()
        );
        let help = sb.run(&[c, "--help"]);
        let text = help.ok();
        assert!(text.contains(&format!("Usage: sessiontree {c}")), "{text}");
        assert!(
            text.contains("--json"),
            "{c} --help shows the global --json:\n{text}"
        );
    }
    assert!(sb.run(&["--version"]).ok().starts_with("sessiontree "));
    // Usage errors are clap's: status 2, a message on stderr.
    let r = sb.run(&["frobnicate"]);
    assert_eq!(r.status, 2);
    assert!(r.stderr.contains("unrecognized subcommand"), "{r:#?}");
}

#[test]
fn a_bare_session_id_is_an_archive_session_even_if_a_file_has_that_name() {
    let sb = Sandbox::new();
    let file = small_session(
        "01950000-0000-7000-8000-00000000e001",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "shadow",
        None,
    )
    .save(&sb, "sessions");
    sb.import(&[file.as_path()]);
    // A file in the working directory named like the session id prefix.
    sb.write("01950000", "not a session file\n");
    let branch = sb.json(&["branch", "01950000"]);
    assert!(
        !branch["entries"].as_array().expect("entries").is_empty(),
        "{branch}"
    );
    // A path still names a file.
    sb.run(&["branch", "./01950000"])
        .fails(4, "invalid_session");
}

#[cfg(unix)]
#[test]
fn import_does_not_follow_symlinked_directories() {
    let sb = Sandbox::new();
    let file = small_session(
        "01950000-0000-7000-8000-00000000e002",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "links",
        None,
    )
    .save(&sb, "tree");
    assert!(file.exists());
    // A loop back to the root, and a link to a directory elsewhere.
    std::os::unix::fs::symlink(sb.path("tree"), sb.path("tree/loop")).expect("symlink");
    let r = sb.json(&["import", sb.path("tree").to_str().expect("utf-8")]);
    assert_eq!(
        (r["files"].clone(), r["imported"].clone()),
        (json!(1), json!(1)),
        "{r}"
    );
}

/// A lone UTF-16 surrogate in a stored name or label leaves `ls --json`,
/// `label`/`name --json` and rpc as the same `\uXXXX` escape pi writes, never
/// as U+FFFD.
#[test]
fn lone_surrogates_in_names_and_labels_come_back_escaped() {
    let sb = Sandbox::new();
    let id = "0198aaaa-0000-7000-8000-00000000cafe";
    let file = sb.write(
        "pi/s.jsonl",
        &format!(
            concat!(
                r#"{{"type":"session","version":3,"id":"{}","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}}"#,
                "\n",
                r#"{{"type":"message","id":"m1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"hi"}}}}"#,
                "\n",
                r#"{{"type":"label","id":"l1","parentId":"m1","timestamp":"2025-01-01T00:00:02.000Z","targetId":"m1","label":" tag \udbff "}}"#,
                "\n",
                r#"{{"type":"session_info","id":"n1","parentId":"l1","timestamp":"2025-01-01T00:00:03.000Z","name":"name \ud800"}}"#,
                "\n"
            ),
            id
        ),
    );
    sb.import(&[&file]);
    let ls = sb.run(&["--json", "ls"]);
    assert_eq!(ls.status, 0, "{ls:#?}");
    assert!(ls.stdout.contains(r#""name":"name \ud800""#), "{ls:#?}");
    assert!(!ls.stdout.contains('\u{fffd}'), "{ls:#?}");
    let mut rpc = sb.command();
    rpc.args(["rpc", id]).stdin(std::process::Stdio::piped());
    let mut child = rpc
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("rpc");
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().expect("stdin");
        writeln!(
            stdin,
            r#"{{"id":1,"method":"getLabel","params":{{"id":"m1"}}}}"#
        )
        .unwrap();
        writeln!(stdin, r#"{{"id":2,"method":"getSessionName"}}"#).unwrap();
    }
    let out = child.wait_with_output().expect("rpc output");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.contains(r#""value":"tag \udbff""#), "{text}");
    assert!(text.contains(r#""value":"name \ud800""#), "{text}");
    // Reading the file directly (JSONL and memory backends) answers alike.
    for backend in ["jsonl", "memory"] {
        let mut rpc = sb.command();
        rpc.args(["rpc", "--backend", backend, s(&file)])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = rpc.spawn().expect("rpc");
        {
            use std::io::Write;
            let stdin = child.stdin.as_mut().expect("stdin");
            writeln!(
                stdin,
                r#"{{"id":1,"method":"getLabel","params":{{"id":"m1"}}}}"#
            )
            .unwrap();
        }
        let out = child.wait_with_output().expect("rpc output");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert!(
            text.contains(r#""value":"tag \udbff""#),
            "{backend}: {text}"
        );
    }
    // Blank is JavaScript's idea of blank: U+0085 is not whitespace there.
    let v = sb.json(&["label", id, "m1", "\u{85}"]);
    assert_eq!(v["label"], json!("\u{85}"), "{v}");
}

/// `export` never destroys a file: into pi's own directory it creates what is
/// missing, leaves identical files alone, appends to a file that is a prefix
/// of the archive's copy, and refuses a longer or different file (pi appended
/// since the import) unless `--force`, which keeps a backup.
#[test]
fn export_never_destroys_a_file_that_differs() {
    let sb = Sandbox::new();
    let f = small_session(
        "01950000-bbbb-7000-8000-000000000001",
        "/home/ada/safe",
        "2025-03-01T10:00:00.000Z",
        "safety",
        None,
    );
    let src = f.save(&sb, "pi");
    sb.import(&[&src]);
    let full = read(&src);
    let out = sb.path("pi");
    let export = |extra: &[&str]| {
        let mut args = vec!["--json", "export", "--all", "--out", s(&out)];
        args.extend_from_slice(extra);
        sb.run(&args)
    };
    let action = |r: &Run| r.parse()["exported"][0]["action"].clone();

    // The very file it came from: unchanged.
    let r = export(&[]);
    assert_eq!(r.status, 0, "{r:#?}");
    assert_eq!(action(&r), json!("unchanged"));
    assert_eq!(read(&src), full);

    // pi's file is a prefix (the archive has more): the rest is appended.
    let first_line = full.find('\n').expect("header line") + 1;
    std::fs::write(&src, &full[..first_line + 5]).expect("truncate");
    let r = export(&[]);
    assert_eq!(action(&r), json!("appended"), "{r:#?}");
    assert_eq!(read(&src), full);

    // pi appended a line since the import: refused, the file untouched.
    let longer = format!(
        "{full}{}\n",
        r#"{"type":"custom","id":"zz","parentId":null,"timestamp":"2025-03-02T00:00:00.000Z","customType":"pi-later"}"#
    );
    std::fs::write(&src, &longer).expect("append");
    let r = export(&[]);
    assert_eq!(r.status, 2, "{r:#?}");
    let v = r.parse();
    assert_eq!(v["failed"][0]["code"], json!("storage"), "{v}");
    assert!(
        v["failed"][0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("--force"),
        "{v}"
    );
    assert_eq!(read(&src), longer);

    // A file that differs inside: refused too.
    let different = full.replacen("safety", "SAFETY", 1);
    std::fs::write(&src, &different).expect("rewrite");
    assert_eq!(export(&[]).status, 2);
    assert_eq!(read(&src), different);

    // --force replaces it and keeps the old file beside it.
    let r = export(&["--force"]);
    assert_eq!(r.status, 0, "{r:#?}");
    assert_eq!(action(&r), json!("replaced"));
    let backup = PathBuf::from(r.parse()["exported"][0]["backup"].as_str().expect("backup"));
    assert_eq!(read(&src), full);
    assert_eq!(read(&backup), different);

    // No temporary file is left behind.
    let leftovers: Vec<_> = walk(&out)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("sessiontree-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A mistyped pi directory never fills a real archive with demo data: with
/// sessions already in the archive, `import` says what is missing and adds
/// nothing; `--demo` still adds the demo when asked.
#[test]
fn import_with_a_missing_pi_directory_leaves_a_real_archive_alone() {
    let sb = Sandbox::new();
    let f = small_session(
        "01950000-cccc-7000-8000-000000000001",
        "/home/ada/real",
        "2025-03-01T10:00:00.000Z",
        "real work",
        None,
    );
    let src = f.save(&sb, "pi");
    sb.import(&[&src]);
    let mut c = sb.command();
    c.env("PI_CODING_AGENT_DIR", sb.path("typo"));
    let r = sb.run_with(c, &["import"]);
    let msg = r.fails(3, "not_found").to_owned();
    assert!(msg.contains("typo") && msg.contains("--demo"), "{msg}");
    let listed = sb.json(&["ls"]);
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    let mut c = sb.command();
    c.env("PI_CODING_AGENT_DIR", sb.path("typo"));
    let r = sb.run_with(c, &["import", "--demo", "--quiet"]);
    assert_eq!(r.status, 0, "{r:#?}");
    let listed = sb.json(&["ls", "--limit", "1000"]);
    assert!(
        listed["sessions"].as_array().map_or(0, Vec::len) > 1,
        "{listed}"
    );
}

/// `delete` removes a session with everything derived from it (check finds no
/// orphan), the file then imports afresh; `check` reports orphans left by a
/// delete done by hand.
#[test]
fn delete_then_reimport_and_check_finds_orphans() {
    let sb = Sandbox::new();
    let f = small_session(
        "01950000-dddd-7000-8000-000000000001",
        "/home/ada/del",
        "2025-03-01T10:00:00.000Z",
        "deletion",
        Some("to delete"),
    );
    let src = f.save(&sb, "pi");
    let other = small_session(
        "01950000-eeee-7000-8000-000000000001",
        "/home/ada/keep",
        "2025-03-02T10:00:00.000Z",
        "keeping",
        None,
    )
    .save(&sb, "pi");
    sb.import(&[&src, &other]);
    let hits = |sb: &Sandbox| {
        sb.json(&["search", "deletion"])["hits"]
            .as_array()
            .map_or(0, Vec::len)
    };
    let before = hits(&sb);
    assert!(before > 0);

    let v = sb.json(&["delete", "01950000-dddd"]);
    assert_eq!(
        v["deleted"],
        json!(["01950000-dddd-7000-8000-000000000001"]),
        "{v}"
    );
    assert_eq!(sb.json(&["check"])["ok"], json!(true));
    assert_eq!(hits(&sb), 0);
    assert_eq!(
        sb.json(&["ls"])["sessions"].as_array().map(Vec::len),
        Some(1)
    );
    // Unknown ids fail alone; the command says so with exit 2.
    let r = sb.run(&["--json", "delete", "nope"]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert_eq!(r.parse()["failed"][0]["code"], json!("not_found"));

    // The file imports afresh, whole.
    let v = sb.import(&[&src]);
    assert_eq!(v["imported"], json!(1), "{v}");
    assert_eq!(hits(&sb), before);

    // A delete by hand (foreign keys off, search rows left) is found by check.
    let conn = rusqlite::Connection::open(sb.default_db()).expect("db");
    conn.execute_batch(
        "PRAGMA foreign_keys = OFF;
         DELETE FROM sessions WHERE id = '01950000-dddd-7000-8000-000000000001';",
    )
    .expect("delete by hand");
    drop(conn);
    let r = sb.run(&["--json", "check"]);
    let v = r.parse();
    assert_eq!(v["ok"], json!(false), "{v}");
    let problems = v["problems"].to_string();
    for table in ["entries", "segments", "message_text", "imports"] {
        assert!(
            problems.contains(table),
            "{table} orphans reported: {problems}"
        );
    }
}

/// Escape sequences and other control characters in stored text never reach
/// the terminal raw: every human-readable output shows them escaped.
#[test]
fn control_characters_in_stored_text_never_reach_the_terminal() {
    let sb = Sandbox::new();
    let hostile =
        "\u{1b}[31mred\u{1b}[0m \u{1b}]0;title\u{7} back\rspace\ttab \u{202e}rtl \u{9b}c1";
    let f = small_session(
        "01950000-ffff-7000-8000-000000000001",
        "/home/ada/esc",
        "2025-03-01T10:00:00.000Z",
        hostile,
        Some(hostile),
    );
    let src = f.save(&sb, "pi");
    sb.import(&[&src]);
    let id = "01950000-ffff";
    for args in [
        vec!["ls"],
        vec!["tree", id],
        vec!["branch", id],
        vec!["context", id],
        vec!["search", "red"],
        vec!["stats", id],
        vec!["label", id, "u0000001", hostile],
        vec!["name", id, hostile],
        vec!["tree", id],
    ] {
        let r = sb.run(&args);
        assert_eq!(r.status, 0, "{r:#?}");
        for c in ['\u{1b}', '\r', '\t', '\u{7}', '\u{202e}', '\u{9b}'] {
            assert!(
                !r.stdout.contains(c),
                "{args:?} printed {c:?} raw: {:?}",
                r.stdout
            );
            assert!(
                !r.stderr.contains(c),
                "{args:?} printed {c:?} raw to stderr"
            );
        }
    }
    // The text is still there, visibly.
    assert!(sb.run(&["context", id]).ok().contains("\\u{1b}[31mred"));
    // Errors that quote stored or given text are safe too.
    let r = sb.run(&["branch", "\u{1b}[2J"]);
    assert!(!r.stderr.contains('\u{1b}'), "{r:#?}");
}

/// A request of the wrong shape is answered under its own id whenever the
/// line is a JSON object with one (a client can match the error to its call).
#[test]
fn rpc_errors_for_malformed_requests_keep_the_request_id() {
    let sb = Sandbox::new();
    let file = small_session(
        "01950000-abab-7000-8000-000000000001",
        "/w",
        "2025-03-01T10:00:00.000Z",
        "ids",
        None,
    )
    .save(&sb, "pi");
    let mut rpc = sb.command();
    rpc.args(["rpc", s(&file)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = rpc.spawn().expect("rpc");
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().expect("stdin");
        stdin
            .write_all(b"{\"id\":42,\"params\":1}\n{\"id\":\"x\"}\n[1]\nnot json\n")
            .unwrap();
    }
    let out = child.wait_with_output().expect("rpc output");
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON answer"))
        .collect();
    let ids: Vec<Value> = answers.iter().map(|a| a["id"].clone()).collect();
    assert_eq!(ids, vec![json!(42), json!("x"), json!(null), json!(null)]);
    assert!(answers.iter().all(|a| a["ok"] == json!(false)));
}

/// Paging arithmetic never wraps: a page past any archive is a usage error.
#[test]
fn ls_paging_past_any_archive_is_a_usage_error() {
    let sb = Sandbox::new();
    let file = small_session(
        "01950000-acac-7000-8000-000000000001",
        "/w",
        "2025-03-01T10:00:00.000Z",
        "paging",
        None,
    )
    .save(&sb, "pi");
    sb.import(&[&file]);
    sb.run(&["ls", "--limit", "9223372036854775808", "--page", "3"])
        .fails(2, "usage");
    let v = sb.json(&["ls", "--limit", "9223372036854775808", "--page", "1"]);
    assert_eq!(v["sessions"].as_array().map(Vec::len), Some(1), "{v}");
}
