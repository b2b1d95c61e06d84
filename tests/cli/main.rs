//! The `sessiontree` command line, end to end: the built binary run on
//! temporary archives, with `HOME` and `XDG_DATA_HOME` pointing into a temp
//! directory so nothing of the user's is read or written.
//!
//! One test binary (one link, not one per file), a module per command group:
//! `import`, `browse` (ls, tree, branch, context, history, search, stats),
//! `write` (label, name, move, fork, export, delete), `args` (SESSION
//! arguments, errors, help) and `rpc`. This file holds what they share: the
//! sandbox that runs the binary and the session files they start from.
//!
//! Inputs are the real pi files in `shared/fixtures/pi-sessions/` (version 1:
//! ids `v1-00001`…) and small version-3 sessions written here with fixed ids and
//! timestamps. `tests/snapshots/tree.txt` holds the expected `tree` text; run
//! with `UPDATE_SNAPSHOTS=1` to rewrite it after a deliberate change.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

mod args;
mod browse;
mod import;
mod rpc;
mod write;

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
