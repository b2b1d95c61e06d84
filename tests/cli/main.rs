//! The `sessiontree` command line, end to end: the built binary run on
//! temporary archives, with `HOME` and `XDG_DATA_HOME` pointing into a temp
//! directory so nothing of the user's is read or written.
//!
//! One test binary (one link, not one per file), a module per command group:
//! `import`, `browse` (ls, tree, branch, context, history, search, stats),
//! `write` (label, name, move, fork, export, delete), `args` (SESSION
//! arguments, errors, help and its examples, completions), `rpc`, `tree`
//! (real trees: known shapes, large generated sessions, memory, colour and
//! the pager), `watch` (pi's sessions directory, `sessiontree watch`) and
//! `readme` (the examples of README.md and `docs/` against the binary). This file holds what they share: the sandbox that runs the
//! binary, the session files they start from, and example command lines (of
//! `--help` and the documents) taken apart.
//!
//! Inputs are the real pi files in `../shared/fixtures/pi-sessions/` (version
//! 1: ids `v1-00001`…) and the small version-3 sessions of `tests/fixtures/cli/`,
//! with fixed ids and timestamps. `tests/snapshots/tree.txt` holds the
//! expected `tree` text; run with `UPDATE_SNAPSHOTS=1` to rewrite it after a
//! deliberate change.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[path = "../support/mod.rs"]
mod support;

mod abuse;
mod args;
mod browse;
mod contract;
mod doors;
mod import;
mod ls_stats;
mod merge;
mod pane;
mod read;
mod readme;
mod rpc;
mod rpc_app;
mod tree;
mod tui;
mod watch;
mod write;

/// pi's real files, which the import and export tests count on.
fn pi_fixtures() -> PathBuf {
    support::fixtures_dir().expect(
        "pi's fixture files: shared/fixtures/pi-sessions beside the crate, or PI_FIXTURES_DIR",
    )
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
        let mut c = Command::new(support::bin());
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

    /// Runs an example command line ([`ShellLine`]) in `cwd` as a shell
    /// would: stdin from its `echo`, stdout into its `>` file, cut to its
    /// `| head -N`. `~/` means this sandbox's HOME.
    fn run_line(&self, line: &ShellLine, cwd: &Path) -> Run {
        let mut c = self.command();
        c.current_dir(cwd)
            .args(&line.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("run sessiontree");
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(text) = &line.stdin {
            std::io::Write::write_all(&mut stdin, text.as_bytes()).expect("write stdin");
        }
        drop(stdin);
        let out = child.wait_with_output().expect("wait for sessiontree");
        let mut stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
        if let Some(n) = line.head {
            stdout = stdout.split_inclusive('\n').take(n).collect();
        }
        if let Some(file) = &line.redirect {
            let path = cwd.join(file);
            // The shell would need the directory to exist; where that shell
            // is installed, its completion directory does.
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, std::mem::take(&mut stdout)).expect("write redirect");
        }
        Run {
            args: line.args.clone(),
            status: out.status.code().expect("exit status"),
            stdout,
            stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
        }
    }

    /// `sessiontree --help`'s subcommands (without `help`).
    fn subcommands(&self) -> Vec<String> {
        let help = self.run(&["--help"]).ok().to_owned();
        let list = help
            .split_once("\nCommands:\n")
            .expect("--help lists commands")
            .1;
        list.lines()
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(str::to_owned)
            .collect()
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

// ---------------------------------------------------------------------------
// Example command lines, as the documents' transcripts and `--help` show them.

/// One example command line taken apart the way a POSIX shell would, for
/// the few forms the examples use: quoted words, a trailing `# comment`, a
/// leading `~/`, a backslash escape, `echo 'TEXT' | sessiontree …`, `sessiontree … | head -N`
/// and `sessiontree … > FILE`. Anything else (globs, `$`, `;`, other pipes)
/// is refused, so an example that needs a real shell to mean what it shows
/// fails its test instead of passing for the wrong reason.
#[derive(Debug)]
struct ShellLine {
    /// The arguments after `sessiontree`.
    args: Vec<String>,
    /// `echo 'TEXT' |`: TEXT and a newline on stdin.
    stdin: Option<String>,
    /// `| head -N`: only the first N lines of stdout.
    head: Option<usize>,
    /// `> FILE`: stdout written to FILE instead.
    redirect: Option<String>,
}

/// A token of a [`ShellLine`].
#[derive(Debug, PartialEq)]
enum ShellToken {
    Word(String),
    Pipe,
    Redirect,
}

impl ShellLine {
    /// Parses `line`; a word starting `~/` gets `home` in place of `~`.
    fn parse(line: &str, home: &Path) -> ShellLine {
        let tokens = shell_tokens(line, home);
        let mut stages: Vec<Vec<ShellToken>> = vec![Vec::new()];
        for t in tokens {
            match t {
                ShellToken::Pipe => stages.push(Vec::new()),
                t => stages.last_mut().expect("a stage").push(t),
            }
        }
        let words = |stage: &[ShellToken]| -> Vec<String> {
            stage
                .iter()
                .map(|t| match t {
                    ShellToken::Word(w) => w.clone(),
                    t => panic!("unsupported shell syntax {t:?} in {line:?}"),
                })
                .collect()
        };
        let mut stdin = None;
        if stages.len() > 1 && matches!(stages[0].first(), Some(ShellToken::Word(w)) if w == "echo")
        {
            let echo = words(&stages.remove(0));
            assert_eq!(echo.len(), 2, "echo takes one word: {line:?}");
            stdin = Some(format!("{}\n", echo[1]));
        }
        let mut head = None;
        if stages.len() > 1 {
            let tail = words(&stages.pop().expect("a stage"));
            let n = match tail.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["head", n] if n.starts_with('-') => n[1..].parse().ok(),
                ["head", "-n", n] => n.parse().ok(),
                _ => None,
            };
            head = Some(n.unwrap_or_else(|| panic!("only `| head -N` may follow: {line:?}")));
        }
        assert_eq!(
            stages.len(),
            1,
            "one sessiontree command per line: {line:?}"
        );
        let mut stage = stages.pop().expect("a stage");
        let mut redirect = None;
        if let Some(i) = stage.iter().position(|t| *t == ShellToken::Redirect) {
            let rest = words(&stage.split_off(i)[1..]);
            assert_eq!(rest.len(), 1, "`> FILE` ends the line: {line:?}");
            redirect = rest.into_iter().next();
        }
        let mut args = words(&stage);
        assert_eq!(
            args.first().map(String::as_str),
            Some("sessiontree"),
            "an example runs sessiontree: {line:?}"
        );
        args.remove(0);
        ShellLine {
            args,
            stdin,
            head,
            redirect,
        }
    }
}

/// The words, pipes and redirections of `line`, quotes removed, a comment cut.
fn shell_tokens(line: &str, home: &Path) -> Vec<ShellToken> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    let mut word: Option<String> = None;
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if let Some(w) = word.take() {
                    tokens.push(ShellToken::Word(w));
                }
            }
            '#' if word.is_none() => break,
            '|' | '>' if word.is_none() => tokens.push(if c == '|' {
                ShellToken::Pipe
            } else {
                ShellToken::Redirect
            }),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => panic!("unterminated ' in {line:?}"),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') if matches!(chars.peek(), Some('"' | '\\' | '$' | '`')) => {
                            w.push(chars.next().expect("peeked"));
                        }
                        Some('$' | '`') => panic!("unsupported expansion in {line:?}"),
                        Some(c) => w.push(c),
                        None => panic!("unterminated \" in {line:?}"),
                    }
                }
            }
            '\\' => {
                let c = chars
                    .next()
                    .unwrap_or_else(|| panic!("a lone \\ ends {line:?}"));
                word.get_or_insert_with(String::new).push(c);
            }
            '~' if word.is_none() && chars.peek() == Some(&'/') => {
                word = Some(home.display().to_string());
            }
            c if "$`;&<>|()*?[]{}!".contains(c) => {
                panic!("unsupported shell syntax {c:?} in {line:?}")
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(w) = word {
        tokens.push(ShellToken::Word(w));
    }
    tokens
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

// ---------------------------------------------------------------------------
// The version-3 session files of `tests/fixtures/cli/` (fixed ids and timestamps).

/// The text of `tests/fixtures/cli/<name>`.
fn cli_fixture(name: &str) -> String {
    read(&support::test_fixture(&format!("cli/{name}")))
}

/// The lines of `tests/fixtures/cli/<name>`.
fn cli_fixture_lines(name: &str) -> Vec<String> {
    cli_fixture(name).lines().map(str::to_owned).collect()
}

/// A pi session file, as lines: tests may change it, then save it into their
/// sandbox. Commands never run on a fixture in place (some append to the file
/// they are given).
struct PiFile {
    id: String,
    cwd: String,
    created: String,
    lines: Vec<String>,
}

impl PiFile {
    /// The session of `lines`; its id, cwd and creation time are its header's.
    fn from_lines(lines: Vec<String>) -> Self {
        let header: Value = serde_json::from_str(&lines[0]).expect("header line");
        let field = |key: &str| header[key].as_str().expect("header field").to_owned();
        PiFile {
            id: field("id"),
            cwd: field("cwd"),
            created: field("timestamp"),
            lines,
        }
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

/// The hand-built session of the `tree` snapshot (`tree-session.jsonl`):
/// forks, labels, a move back with a branch summary, a retry after a failed
/// turn, a compaction, a session name, and a long linear run. The leaf is the
/// last label; the abandoned branches end in `leaf` entries. Its entries are
/// one second apart, and every assistant message reports the same usage: 520
/// tokens (400 cached, 100 uncached), $0.25. `tree-session.appended.jsonl`
/// holds what pi appends to it later.
///
/// ```text
/// mdl00001 ─ thk00001 ─ usr00001 … ast00002 ─ lbl00001 ┬ usr00002 … ast00004 ─ leaf0001        (nom, abandoned)
///                                                       └ bsm00001 ─ usr00004 ─ lbl00002 ─ (11 tool steps)
///                                                         ─ cmp00001 ─ usr00005 ─ ast00011 ─ nam00001
///                                                           ┬ usr00006 ─ ast00012 ─ leaf0002 (failed, retried)
///                                                           └ usr00007 ─ ast00013 ─ lbl00003 (leaf)
/// ```
fn tree_session() -> PiFile {
    PiFile::from_lines(cli_fixture_lines("tree-session.jsonl"))
}

/// A small linear session: a question about `topic`, an answer, named `name`,
/// from `small-session.template.jsonl`. Each `{key}` of the template becomes
/// its value, JSON-escaped; `{hour}` is the date and hour of `created`, which
/// the entries follow a second apart. Without a name, the line that carries
/// `{name}` (the `session_info` entry) is left out.
fn small_session(id: &str, cwd: &str, created: &str, topic: &str, name: Option<&str>) -> PiFile {
    let values = [
        ("{id}", Some(id)),
        ("{cwd}", Some(cwd)),
        ("{created}", Some(created)),
        ("{hour}", Some(&created[..14])),
        ("{topic}", Some(topic)),
        ("{name}", name),
    ];
    let lines = cli_fixture("small-session.template.jsonl")
        .lines()
        .filter_map(|line| {
            values
                .iter()
                .try_fold(line.to_owned(), |line, (key, value)| match value {
                    Some(v) => Some(line.replace(key, &json_escaped(v))),
                    None => (!line.contains(key)).then_some(line),
                })
        })
        .collect();
    PiFile::from_lines(lines)
}

/// Stored text that would drive a terminal: SGR and OSC escape sequences, a
/// bell, a carriage return, a tab, a bidirectional override and a C1 control.
const HOSTILE: &str =
    "\u{1b}[31mred\u{1b}[0m \u{1b}]0;title\u{7} back\rspace\ttab \u{202e}rtl \u{9b}c1";

/// Imports a small session whose topic and name are [`HOSTILE`]; returns its id prefix.
fn hostile_session(sb: &Sandbox) -> &'static str {
    let f = small_session(
        "01950000-ffff-7000-8000-000000000001",
        "/home/ada/esc",
        "2025-03-01T10:00:00.000Z",
        HOSTILE,
        Some(HOSTILE),
    );
    let src = f.save(sb, "pi");
    sb.import(&[&src]);
    "01950000-ffff"
}

/// `text` as it stands inside a JSON string (without the quotes).
fn json_escaped(text: &str) -> String {
    let quoted = Value::from(text).to_string();
    quoted[1..quoted.len() - 1].to_owned()
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
