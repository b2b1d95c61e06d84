//! pi's sessions directory found as pi 1.6 finds it (compared with pi's own
//! code under Node 22), and `sessiontree watch`: appended lines picked up by
//! notification, a half line waiting for its newline, truncation and
//! replacement reported with nothing lost, restart and kill -9 resuming from
//! the import records, a burst of 1,000 files, and a clean stop on SIGTERM.

use super::{s, Sandbox};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// pi's directory.

/// One way of telling pi where its sessions are: the environment, the
/// settings files, and the directory pi would use (`~` is the case's HOME,
/// `.` its working directory).
struct Case {
    env: &'static [(&'static str, &'static str)],
    /// `~/.pi/agent/settings.json` (or in `PI_CODING_AGENT_DIR`).
    global: Option<&'static str>,
    /// `./.pi/settings.json`.
    project: Option<&'static str>,
    expected: &'static str,
}

const CASES: &[Case] = &[
    Case {
        env: &[],
        global: None,
        project: None,
        expected: "~/.pi/agent/sessions",
    },
    Case {
        env: &[("PI_CODING_AGENT_DIR", "./agent")],
        global: None,
        project: None,
        expected: "./agent/sessions",
    },
    Case {
        env: &[("PI_CODING_AGENT_DIR", "~/agent2")],
        global: None,
        project: None,
        expected: "~/agent2/sessions",
    },
    Case {
        env: &[("PI_CODING_AGENT_SESSION_DIR", "~/flat")],
        global: Some(r#"{"sessionDir":"~/g"}"#),
        project: Some(r#"{"sessionDir":"p"}"#),
        expected: "~/flat",
    },
    Case {
        env: &[
            ("PI_CODING_AGENT_SESSION_DIR", "rel/s"),
            ("PI_CODING_AGENT_DIR", "./agent"),
        ],
        global: None,
        project: None,
        expected: "./rel/s",
    },
    Case {
        env: &[("PI_CODING_AGENT_SESSION_DIR", "")],
        global: Some(r#"{"theme":"dark","sessionDir":"~/g"}"#),
        project: None,
        expected: "~/g",
    },
    Case {
        env: &[],
        global: Some(r#"{"sessionDir":"~/g"}"#),
        project: Some(r#"{"sessionDir":"p"}"#),
        expected: "./p",
    },
    Case {
        env: &[],
        global: Some(r#"{"sessionDir":"~/g"}"#),
        project: Some(r#"{"sessionDir":null}"#),
        expected: "~/.pi/agent/sessions",
    },
    Case {
        env: &[],
        global: Some(r#"{"sessionDir":"~/g"}"#),
        project: Some("{not json"),
        expected: "~/g",
    },
    Case {
        env: &[],
        global: Some("\u{feff}{\"sessionDir\":\"\"}"),
        project: None,
        expected: "~/.pi/agent/sessions",
    },
    Case {
        env: &[("PI_CODING_AGENT_DIR", "~/agent3")],
        global: Some(r#"{"sessionDir":"file:///TMP/u%20rl"}"#),
        project: None,
        expected: "/TMP/u rl",
    },
];

/// A case's sandbox path for `p` (`~` its HOME, `.` its directory, `/TMP` its scratch root).
fn place(root: &Path, case: usize, p: &str) -> PathBuf {
    let base = root.join(format!("c{case}"));
    if let Some(rest) = p.strip_prefix("~/") {
        base.join("home").join(rest)
    } else if let Some(rest) = p.strip_prefix("./") {
        base.join("cwd").join(rest)
    } else if let Some(rest) = p.strip_prefix("/TMP/") {
        root.join(rest)
    } else {
        base.join("cwd").join(p)
    }
}

/// The environment value of a case, `/TMP` made the scratch root.
fn env_value(root: &Path, v: &str) -> String {
    v.replace("/TMP", s(root))
}

/// Each case's directory as pi 1.6's own code resolves it (`main.js`:
/// `PI_CODING_AGENT_SESSION_DIR`, then `SettingsManager.getSessionDir()`,
/// then `getSessionsDir()`), run once under Node 22 for all the cases.
fn pi16_resolves(root: &Path) -> Vec<String> {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/pi16/node_modules/@earendil-works/pi-coding-agent/dist");
    let cases: Vec<Value> = CASES
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let env: serde_json::Map<String, Value> = c
                .env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(env_value(root, v))))
                .collect();
            json!({"env": env, "home": place(root, i, "~/"), "cwd": place(root, i, "./")})
        })
        .collect();
    let script = r#"
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
const [dist, casesJson] = process.argv.slice(1);
const cfg = await import(pathToFileURL(dist + "/config.js"));
const { SettingsManager } = await import(pathToFileURL(dist + "/core/settings-manager.js"));
const out = [];
for (const c of JSON.parse(casesJson)) {
  delete process.env[cfg.ENV_AGENT_DIR];
  delete process.env[cfg.ENV_SESSION_DIR];
  Object.assign(process.env, c.env, { HOME: c.home });
  process.chdir(c.cwd);
  const agentDir = cfg.getAgentDir();
  const envSessionDir = process.env[cfg.ENV_SESSION_DIR];
  const settings = SettingsManager.create(process.cwd(), agentDir);
  const dir = (envSessionDir ? cfg.expandTildePath(envSessionDir) : undefined) ?? settings.getSessionDir();
  out.push(resolve(dir || cfg.getSessionsDir()));
}
console.log(JSON.stringify(out));
"#;
    let out = Command::new(crate::support::node::pi16_node())
        .args([
            "--input-type=module",
            "-e",
            script,
            s(&dist),
            &Value::from(cases).to_string(),
        ])
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pi's answers")
}

/// `import` (hence `watch`, `browse` and the binding) reads the sessions
/// directory pi 1.6 itself would use, for every way of naming it.
#[test]
fn the_pi_directory_is_found_as_pi_16_finds_it() {
    let sb = Sandbox::new();
    let root = sb.path("cases");
    for (i, case) in CASES.iter().enumerate() {
        std::fs::create_dir_all(place(&root, i, "~/")).expect("home");
        std::fs::create_dir_all(place(&root, i, "./.pi")).expect("cwd");
        if let Some(text) = case.global {
            let agent = case
                .env
                .iter()
                .find(|(k, _)| *k == "PI_CODING_AGENT_DIR")
                .map_or("~/.pi/agent", |(_, v)| v);
            let file = place(&root, i, agent).join("settings.json");
            std::fs::create_dir_all(file.parent().expect("dir")).expect("mkdir");
            std::fs::write(file, text.replace("/TMP", s(&root))).expect("settings");
        }
        if let Some(text) = case.project {
            std::fs::write(place(&root, i, "./.pi/settings.json"), text).expect("settings");
        }
    }
    let pi = pi16_resolves(&root);
    for (i, case) in CASES.iter().enumerate() {
        let expected = place(&root, i, case.expected);
        assert_eq!(pi[i], s(&expected), "pi 1.6 resolves case {i} elsewhere");
        // A session in the directory; ours must find and import it.
        let id = format!("0195aaaa-0000-7000-8000-{i:012}");
        std::fs::create_dir_all(&expected).expect("dir");
        std::fs::write(expected.join("s.jsonl"), session_text(&id, 1)).expect("file");
        let mut c = sb.command();
        c.current_dir(place(&root, i, "./"))
            .env("HOME", place(&root, i, "~/"));
        for (k, v) in case.env {
            c.env(k, env_value(&root, v));
        }
        let r = sb.run_with(c, &["--json", "import"]).json();
        assert_eq!(
            (r["roots"].clone(), r["imported"].clone()),
            (json!([s(&expected)]), json!(1)),
            "case {i}"
        );
    }
}

// ---------------------------------------------------------------------------
// Session files.

/// A pi version-3 session `id` with `n` messages, as text.
fn session_text(id: &str, n: usize) -> String {
    let mut t = format!(
        "{{\"type\":\"session\",\"version\":3,\"id\":\"{id}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}}\n"
    );
    for k in 1..=n {
        t.push_str(&entry_line(k));
        t.push('\n');
    }
    t
}

/// Message `k` of a session (its parent message `k - 1`), without newline.
fn entry_line(k: usize) -> String {
    let parent = if k == 1 {
        "null".to_owned()
    } else {
        format!("\"e{:05}\"", k - 1)
    };
    format!(
        "{{\"type\":\"message\",\"id\":\"e{k:05}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:{:02}.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"line {k}\",\"timestamp\":{k}}}}}",
        k % 60
    )
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open");
    f.write_all(text.as_bytes()).expect("append");
}

/// Entries the archive holds for `id` (0 if it holds no such session).
fn entries(sb: &Sandbox, id: &str) -> u64 {
    let r = sb.run(&[
        "--json",
        "sql",
        &format!("SELECT entry_count AS n FROM sessions WHERE id = '{id}'"),
    ]);
    r.json()["rows"][0]["n"].as_u64().unwrap_or(0)
}

// ---------------------------------------------------------------------------
// The watcher.

/// A running `sessiontree watch --json`, its lines read as they come.
struct Watcher {
    child: Child,
    lines: Receiver<Value>,
}

impl Watcher {
    fn start(sb: &Sandbox, dir: &Path) -> Watcher {
        let mut child = sb
            .command()
            .args(["--json", "watch", "--interval", "60", s(dir)])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start watch");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v: Value =
                    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Watcher { child, lines }
    }

    /// The next line for which `want` holds (others skipped), within `limit`.
    fn wait_for(&self, limit: Duration, want: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + limit;
        loop {
            match self
                .lines
                .recv_timeout(end.saturating_duration_since(Instant::now()))
            {
                Ok(v) if want(&v) => return v,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("no such line within {limit:?}"),
                Err(RecvTimeoutError::Disconnected) => panic!("watch ended"),
            }
        }
    }

    /// Lines that came within `d`.
    fn lines_for(&self, d: Duration) -> Vec<Value> {
        let end = Instant::now() + d;
        let mut got = Vec::new();
        while let Ok(v) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            got.push(v);
        }
        got
    }

    /// Sends SIGTERM; the exit status and the last line.
    fn stop(mut self) -> (i32, Value) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success());
        let status = self.child.wait().expect("wait");
        let last = self
            .lines_for(Duration::from_secs(5))
            .pop()
            .expect("a last line");
        (status.code().expect("exit code"), last)
    }

    fn kill9(mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("wait");
    }

    /// The watcher's peak resident memory, in kB (`VmHWM`).
    fn peak_rss_kb(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }
}

fn is(event: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["event"] == event
}

/// Appended lines land by notification (the rescan is a minute away), a
/// half-written line waits for its newline, a truncated and a replaced file
/// are reported while the archive keeps every entry, and SIGTERM stops the
/// watcher cleanly.
#[test]
fn watch_follows_appends_waits_for_half_lines_and_reports_truncation() {
    let sb = Sandbox::new();
    let dir = sb.path("pi");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("a.jsonl");
    let id = "0195bbbb-0000-7000-8000-000000000001";
    std::fs::write(&file, session_text(id, 3)).expect("file");
    let w = Watcher::start(&sb, &dir);
    let first = w.wait_for(Duration::from_secs(20), is("imported"));
    assert_eq!(
        (first["session"].clone(), first["entries"].clone()),
        (json!(id), json!(3))
    );

    // Two complete lines: appended by notification, well inside the rescan.
    let at = Instant::now();
    append(&file, &format!("{}\n{}\n", entry_line(4), entry_line(5)));
    let v = w.wait_for(Duration::from_secs(10), is("appended"));
    let took = at.elapsed();
    assert_eq!(v["entries"], 2, "{v}");
    assert!(
        took < Duration::from_secs(5),
        "appended lines took {took:?}"
    );
    eprintln!("appended lines landed in {took:?}");
    assert_eq!(entries(&sb, id), 5);

    // Half a line: nothing imported, nothing reported, until its newline.
    let line6 = entry_line(6);
    let (head, tail) = line6.split_at(40);
    append(&file, head);
    let quiet = w.lines_for(Duration::from_millis(800));
    assert!(quiet.is_empty(), "{quiet:?}");
    assert_eq!(entries(&sb, id), 5);
    append(&file, &format!("{tail}\n"));
    let v = w.wait_for(Duration::from_secs(10), is("appended"));
    assert_eq!(v["entries"], 1, "{v}");
    assert_eq!(entries(&sb, id), 6);

    // Truncated: reported once, the archive keeps its six entries.
    let text = std::fs::read_to_string(&file).expect("read");
    let cut: String = text.split_inclusive('\n').take(3).collect();
    std::fs::write(&file, &cut).expect("truncate");
    let v = w.wait_for(Duration::from_secs(10), is("problem"));
    assert_eq!(v["file"], json!(s(&file)), "{v}");
    assert_eq!(entries(&sb, id), 6);

    // Replaced by another file under the same name (pi rewriting it): reported.
    let other = dir.join("a.jsonl.tmp");
    std::fs::write(&other, session_text(id, 2).replace("line", "other")).expect("other");
    std::fs::rename(&other, &file).expect("replace");
    let v = w.wait_for(Duration::from_secs(10), |v| {
        v["event"] == "problem" && v["file"] == json!(s(&file))
    });
    assert!(v["message"].as_str().is_some_and(|m| m.contains(id)), "{v}");
    assert_eq!(entries(&sb, id), 6);

    // Renamed: a file of a session the archive holds, said so; nothing lost.
    let renamed = dir.join("renamed.jsonl");
    std::fs::rename(&file, &renamed).expect("rename");
    let v = w.wait_for(Duration::from_secs(10), |v| v["file"] == json!(s(&renamed)));
    // Skipped (its session is the archive's), or, as here where its content
    // was replaced, a conflict naming the session: either way said, and
    // nothing lost.
    assert!(
        v["session"] == id || v["message"].as_str().is_some_and(|m| m.contains(id)),
        "{v}"
    );
    assert_eq!(entries(&sb, id), 6);

    let (status, last) = w.stop();
    assert_eq!(
        (status, last["event"].clone()),
        (0, json!("stopped")),
        "{last}"
    );
    assert_eq!(last["sessionsUpdated"], 3, "{last}");
}

/// A watcher stopped, or killed with -9 in the middle of a stream of
/// appends, resumes from the import records: every entry once, none lost.
#[test]
fn watch_resumes_after_restart_and_kill_9() {
    let sb = Sandbox::new();
    let dir = sb.path("pi");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("b.jsonl");
    let id = "0195cccc-0000-7000-8000-000000000001";
    std::fs::write(&file, session_text(id, 2)).expect("file");

    let w = Watcher::start(&sb, &dir);
    w.wait_for(Duration::from_secs(20), is("imported"));
    let (status, _) = w.stop();
    assert_eq!(status, 0);
    // Written while nobody watched: the next pass imports just these.
    append(
        &file,
        &format!("{}\n{}\n{}\n", entry_line(3), entry_line(4), entry_line(5)),
    );
    let r = sb.run(&["--json", "watch", "--once", s(&dir)]);
    assert_eq!(r.status, 0, "{r:#?}");
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines[0]["event"], "appended", "{lines:?}");
    assert_eq!(lines[0]["entries"], 3, "{lines:?}");
    assert_eq!(entries(&sb, id), 5);

    // kill -9 while pi keeps appending, one line every few milliseconds.
    let w = Watcher::start(&sb, &dir);
    let mut k = 6;
    let end = Instant::now() + Duration::from_millis(700);
    while Instant::now() < end {
        append(&file, &format!("{}\n", entry_line(k)));
        k += 1;
        std::thread::sleep(Duration::from_millis(3));
    }
    w.kill9();
    for _ in 0..20 {
        append(&file, &format!("{}\n", entry_line(k)));
        k += 1;
    }
    let r = sb.run(&["watch", "--once", "--quiet", s(&dir)]);
    assert_eq!((r.status, r.stdout.as_str()), (0, ""), "{r:#?}");
    assert_eq!(entries(&sb, id), (k - 1) as u64);
    let check = sb.run(&["check", id]);
    assert_eq!(check.status, 0, "{check:#?}");
}

/// 1,000 new files at once: all imported (events gathered, imported in
/// batches), in bounded memory.
#[test]
fn watch_takes_a_burst_of_a_thousand_files() {
    let sb = Sandbox::new();
    let dir = sb.path("pi");
    std::fs::create_dir_all(dir.join("--w--")).expect("dir");
    let w = Watcher::start(&sb, &dir);
    // The first (empty) pass is over once the watcher is quiet.
    std::thread::sleep(Duration::from_millis(300));
    let at = Instant::now();
    for i in 0..1000 {
        let id = format!("0195dddd-0000-7000-8000-{i:012}");
        std::fs::write(
            dir.join("--w--").join(format!("{i:04}.jsonl")),
            session_text(&id, 1),
        )
        .expect("file");
    }
    let mut seen = std::collections::HashSet::new();
    let end = Instant::now() + Duration::from_secs(60);
    while seen.len() < 1000 {
        let v = w.wait_for(end.saturating_duration_since(Instant::now()), |v| {
            v["event"] != "busy"
        });
        assert_eq!(v["event"], "imported", "{v}");
        seen.insert(v["session"].as_str().expect("id").to_owned());
    }
    eprintln!(
        "1,000 files imported {:?} after the first was written",
        at.elapsed()
    );
    let rss = w.peak_rss_kb();
    eprintln!("watch peak RSS: {rss} kB");
    assert!(rss < 256 * 1024, "peak RSS {rss} kB");
    let (status, last) = w.stop();
    assert_eq!(
        (status, last["sessionsUpdated"].clone()),
        (0, json!(1000)),
        "{last}"
    );
    let n = sb
        .run(&["--json", "sql", "SELECT count(*) AS n FROM sessions"])
        .json();
    assert_eq!(n["rows"][0]["n"], 1000);
}

/// The archive locked by another writer for longer than a connection waits
/// (10 s): the watcher reports `busy`, backs off, and imports the lines once
/// the lock is gone. Slow (about 12 s), so only with `WATCH_BUSY=1`.
#[test]
fn watch_retries_a_busy_archive() {
    if std::env::var_os("WATCH_BUSY").is_none() {
        eprintln!("skipped: WATCH_BUSY=1 runs it (about 12 s)");
        return;
    }
    let sb = Sandbox::new();
    let dir = sb.path("pi");
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("c.jsonl");
    let id = "0195eeee-0000-7000-8000-000000000001";
    std::fs::write(&file, session_text(id, 1)).expect("file");
    let w = Watcher::start(&sb, &dir);
    w.wait_for(Duration::from_secs(20), is("imported"));
    let lock = rusqlite::Connection::open(sb.default_db()).expect("open");
    lock.execute_batch("BEGIN IMMEDIATE").expect("lock");
    append(&file, &format!("{}\n", entry_line(2)));
    let v = w.wait_for(Duration::from_secs(30), is("busy"));
    assert!(v["retryInSeconds"].as_f64().is_some(), "{v}");
    lock.execute_batch("ROLLBACK").expect("unlock");
    drop(lock);
    let v = w.wait_for(Duration::from_secs(30), is("appended"));
    assert_eq!(v["entries"], 1, "{v}");
    assert_eq!(entries(&sb, id), 2);
    assert_eq!(w.stop().0, 0);
}
