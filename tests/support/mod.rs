//! Helpers shared by the cli, compact, crash, hostile, concurrency, faults,
//! security and sqlite_engine suites: the real binary as a child speaking the
//! rpc protocol, a small seeded PRNG, fixture files and lines, read-only
//! guards that work even as root, and dumps of what a store holds.
#![allow(dead_code)]

pub mod node;

use serde_json::{json, Value};
use sessiontree::backend::jsonl::{Header, JsonlStorage};
use sessiontree::backend::sqlite::Archive;
use sessiontree::{Durability, Entry, SessionStorage};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The `sessiontree` binary built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sessiontree")
}

/// A tiny deterministic PRNG (splitmix64); no extra dependency needed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded from the environment variable `var` if set, else from the clock.
    /// The seed is printed so that a failing run can be replayed.
    pub fn from_env(var: &str, what: &str) -> Rng {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(42, |d| d.as_nanos() as u64)
            });
        eprintln!("{what}: seed {seed} (replay with {var}={seed})");
        Rng(seed)
    }
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// An environment knob with a default.
pub fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A running `sessiontree … rpc …` child: requests go to its stdin, complete
/// response lines come back through a reader thread.
pub struct RpcChild {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    next_id: u64,
}

impl RpcChild {
    /// Spawns the binary with `args` (e.g. `["rpc", "f.jsonl"]`).
    pub fn spawn<I, S>(args: I) -> RpcChild
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Self::spawn_command(Command::new(bin()).args(args))
    }

    /// Spawns a prepared command (its stdio is replaced by pipes).
    pub fn spawn_command(cmd: &mut Command) -> RpcChild {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sessiontree");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    // Only whole lines count: a response cut short by a kill was never sent.
                    Ok(n) if n > 0 && line.ends_with(b"\n") => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                    _ => break,
                }
            }
        });
        RpcChild {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            next_id: 1,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes raw bytes to the child's stdin (errors ignored: it may be dead).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = s.write_all(bytes);
            let _ = s.flush();
        }
    }

    /// Hands the stdin to a thread that writes `bytes` (so a full pipe never
    /// blocks the caller); the pipe is closed when done.
    pub fn send_in_background(&mut self, bytes: Vec<u8>) -> std::thread::JoinHandle<()> {
        let stdin = self.stdin.take();
        std::thread::spawn(move || {
            if let Some(mut s) = stdin {
                let _ = s.write_all(&bytes);
                let _ = s.flush();
            }
        })
    }

    /// A request line for `method` with `params`, with a fresh request id.
    pub fn request(&mut self, method: &str, params: Value) -> (u64, String) {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"id": id, "method": method, "params": params}).to_string();
        (id, line)
    }

    /// The next response, waiting at most `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Some(parse_response(&line)),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// One request, one response.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let (id, line) = self.request(method, params);
        self.send_raw(format!("{line}\n").as_bytes());
        let r = self
            .recv(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no response to {method}"));
        assert_eq!(r["id"], json!(id), "responses come in order");
        r
    }

    /// SIGKILL, reap, and collect every complete response line it had written.
    pub fn kill9(mut self) -> Vec<Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.stdin.take());
        let mut out = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            out.push(parse_response(&line));
        }
        out
    }

    /// Closes stdin and waits for a clean exit, returning remaining responses.
    pub fn finish(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let mut out = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(30)) {
            out.push(parse_response(&line));
        }
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "rpc child exited with {status}");
        out
    }
}

impl Drop for RpcChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Parses a response line. Members nested deeper than serde_json's recursion
/// limit (an echoed request id can be) are replaced by the string `"<deep>"`.
pub fn parse_response(line: &[u8]) -> Value {
    let members: std::collections::BTreeMap<String, Box<serde_json::value::RawValue>> =
        serde_json::from_slice(line).unwrap_or_else(|e| {
            panic!(
                "response is not a JSON object ({e}): {:.300}",
                String::from_utf8_lossy(line)
            )
        });
    let mut out = serde_json::Map::new();
    for (k, v) in members {
        let parsed =
            serde_json::from_str(v.get()).unwrap_or_else(|_| Value::String("<deep>".into()));
        out.insert(k, parsed);
    }
    Value::Object(out)
}

/// The contract's error codes.
pub const CODES: &[&str] = &[
    "not_found",
    "invalid_session",
    "invalid_entry",
    "invalid_fork_target",
    "storage",
    "unknown",
];

/// Asserts a response is well formed: `ok: true` with a value, or `ok: false`
/// with one of the contract's codes. Returns the code for errors.
pub fn response_code(r: &Value) -> Option<String> {
    match r["ok"].as_bool() {
        Some(true) => {
            assert!(r.get("value").is_some(), "ok response without value: {r}");
            None
        }
        Some(false) => {
            let code = r["error"]["code"].as_str().expect("error code");
            assert!(CODES.contains(&code), "not a contract code: {r}");
            assert!(
                r["error"]["message"].is_string(),
                "error without message: {r}"
            );
            Some(code.to_owned())
        }
        None => panic!("response without ok: {r}"),
    }
}

/// Runs the binary to completion.
pub fn run_cli<I, S>(args: I) -> std::process::Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run sessiontree")
}

/// A fresh version-3 JSONL session file with only its header.
pub fn new_jsonl(path: &Path, id: &str, durability: Durability) -> JsonlStorage {
    let header = Header::new(id, "2025-01-01T00:00:00.000Z", "/work/project", None, None);
    JsonlStorage::create(path, header, durability).expect("create session file")
}

/// A compact message entry.
pub fn message_entry(id: &str, parent: Option<&str>, role: &str, text: &str) -> Entry {
    let v = json!({
        "type": "message",
        "id": id,
        "parentId": parent,
        "timestamp": "2025-01-01T00:00:01.000Z",
        "message": {"role": role, "content": [{"type": "text", "text": text}]},
    });
    Entry::from_value(&v).expect("valid entry")
}

/// Every entry's exact text, in log order.
pub fn jsons(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| e.json().to_owned()).collect()
}

/// What an archive holds, as a comparable dump: every table that stores data,
/// in a stable order (used to prove that a refused operation changed nothing).
pub fn archive_dump(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .expect("open archive read-only");
    let mut out = Vec::new();
    for (table, order) in [
        ("sessions", "session_key"),
        ("entries", "entry_key"),
        ("labels", "session_key, target_id"),
        ("leaf_events", "session_key, seq"),
        ("segments", "segment_id"),
        ("segment_ancestry", "segment_id, from_depth"),
        ("compactions", "entry_key"),
        ("imports", "source_path"),
        ("roles", "role_id"),
        ("dead_message_text", "first_segment"),
    ] {
        let mut st = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY {order}"))
            .expect("prepare dump");
        let n = st.column_count();
        let rows = st
            .query_map([], |r| {
                let mut cells = Vec::with_capacity(n);
                for i in 0..n {
                    cells.push(format!("{:?}", r.get_ref(i)?));
                }
                Ok(format!("{table}: {}", cells.join(" | ")))
            })
            .expect("dump")
            .collect::<Result<Vec<_>, _>>()
            .expect("dump rows");
        out.extend(rows);
    }
    // The index keeps no text: which entries it holds, with their token counts.
    let fts: Vec<String> = conn
        .prepare("SELECT id, sz FROM message_text_docsize ORDER BY id")
        .expect("prepare fts dump")
        .query_map([], |r| {
            Ok(format!("fts: {:?} {:?}", r.get_ref(0)?, r.get_ref(1)?))
        })
        .expect("fts dump")
        .collect::<Result<_, _>>()
        .expect("fts rows");
    out.extend(fts);
    out
}

/// Opens an archive and runs `check` on it, panicking on any problem.
pub fn assert_archive_ok(db: &Path) -> Archive {
    let archive = Archive::open(db, Durability::Relaxed).expect("archive opens");
    let problems = archive.check(None).expect("check runs");
    assert!(
        problems.is_empty(),
        "archive check found problems: {problems:?}"
    );
    archive
}

/// The entries of a session of an archive, in log order.
pub fn archive_entries(archive: &Archive, id: &str) -> Vec<Entry> {
    archive
        .open_session(id)
        .expect("session opens")
        .entries(0, None)
        .expect("entries")
}

/// A file of the crate's own fixtures, `tests/fixtures/<rel>` (pi's real
/// files are elsewhere: see [`fixtures_dir`]).
pub fn test_fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Where pi's fixture sessions are (`PI_FIXTURES_DIR`, else
/// `shared/fixtures/pi-sessions` beside the crate); `None` when absent (then
/// synthetic lines stand in).
pub fn fixtures_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("PI_FIXTURES_DIR") {
        Some(dir) => PathBuf::from(dir),
        // shared/ lies beside the checkout (CI's clone and every worktree
        // alike), so no absolute path is needed.
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pi-sessions"),
    };
    Some(dir).filter(|d| d.is_dir())
}

/// The lines of pi's fixture session files (read in place, never copied), or
/// a few synthetic pi-shaped lines when the fixtures are not available.
pub fn fixture_lines() -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(dir) = fixtures_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("fixtures dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("fixture readable");
            // Long lines are kept but capped, so that mutation stays fast.
            lines.extend(
                text.lines()
                    .filter(|l| !l.trim().is_empty() && l.len() < 20_000)
                    .map(str::to_owned),
            );
        }
    }
    if lines.is_empty() {
        eprintln!("pi fixtures not found: using synthetic pi-shaped lines");
        lines = vec![
            r#"{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#.into(),
            r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":[{"type":"text","text":"hello"}]}}"#.into(),
            r#"{"type":"message","id":"a2","parentId":"a1","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","provider":"p","model":"m","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"totalTokens":10,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.5}},"content":[{"type":"text","text":"hi"}]}}"#.into(),
            r#"{"type":"compaction","id":"a3","parentId":"a2","timestamp":"2025-01-01T00:00:03.000Z","summary":"s","firstKeptEntryId":"a2","tokensBefore":5}"#.into(),
            r#"{"type":"leaf","id":"a4","parentId":"a3","timestamp":"2025-01-01T00:00:04.000Z","targetId":"a1"}"#.into(),
            r#"{"type":"label","id":"a5","parentId":"a1","timestamp":"2025-01-01T00:00:05.000Z","targetId":"a1","label":"x"}"#.into(),
        ];
    }
    lines
}

/// Makes `path` (a file or a directory) unwritable for this process, even as
/// root (then with `chattr +i`), and undoes it when dropped. `Err` gives the
/// reason when the environment cannot do it (the caller skips, saying why).
pub struct ReadOnly {
    path: PathBuf,
    mode: u32,
    immutable: bool,
}

impl ReadOnly {
    pub fn make(path: &Path) -> Result<ReadOnly, String> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
        let mode = meta.permissions().mode();
        let ro = if meta.is_dir() { 0o555 } else { 0o444 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(ro))
            .map_err(|e| e.to_string())?;
        let mut guard = ReadOnly {
            path: path.to_owned(),
            mode,
            immutable: false,
        };
        if !writable(path) {
            return Ok(guard);
        }
        // Root ignores permission bits: make the inode immutable instead.
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            guard.immutable = true;
            if !writable(path) {
                return Ok(guard);
            }
        }
        Err(format!(
            "cannot make {} read-only here (privileged process and no working chattr +i)",
            path.display()
        ))
    }
}

fn writable(path: &Path) -> bool {
    if path.is_dir() {
        let probe = path.join(".write-probe");
        let ok = std::fs::File::create(&probe).is_ok();
        let _ = std::fs::remove_file(&probe);
        ok
    } else {
        std::fs::OpenOptions::new().append(true).open(path).is_ok()
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.immutable {
            let _ = Command::new("chattr")
                .arg("-i")
                .arg(&self.path)
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(self.mode));
    }
}

/// Waits until `cond` holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// Turns an archive of the latest schema back into what a version-7 build
/// wrote: a search index that keeps token positions (`detail = full`) and
/// each text's role and session; no role ids in `entries`.
pub fn downgrade_to_version_7(db: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let texts = Archive::open(db, Durability::Relaxed)?
        .query_read_only("SELECT entry_key, entry_text(entry_key), session_key FROM entries")?;
    let conn = rusqlite::Connection::open(db)?;
    drop_role_ids(&conn)?;
    conn.execute_batch(
        "DROP TABLE check_marks; DROP TRIGGER check_marks_entry_rewritten; DROP TRIGGER check_marks_entry_removed; DROP TRIGGER check_marks_segment_rewritten; DROP TRIGGER check_marks_segment_removed; DROP TRIGGER check_marks_leaf_event_rewritten; DROP TRIGGER check_marks_leaf_event_removed; DROP TRIGGER check_marks_compaction_rewritten; DROP TRIGGER check_marks_compaction_removed;
         DROP TABLE dead_message_text;
         DROP TABLE usage_daily; DROP TABLE usage_facts;
         ALTER TABLE sessions DROP COLUMN last_active_ms;
         DROP TABLE kept_lines;
         ALTER TABLE sessions DROP COLUMN contract;
         ALTER TABLE sessions DROP COLUMN open_end;
         CREATE TRIGGER entries_are_append_only BEFORE UPDATE ON entries
         WHEN sessiontree_may_reencode() IS NOT 1
           OR NEW.entry_key IS NOT OLD.entry_key OR NEW.session_key IS NOT OLD.session_key
           OR NEW.seq IS NOT OLD.seq OR NEW.id IS NOT OLD.id OR NEW.type IS NOT OLD.type
         BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
         DROP TABLE message_text;
         DROP TABLE IF EXISTS message_text_content;
         CREATE VIRTUAL TABLE message_text USING fts5 (text, role UNINDEXED, session_key UNINDEXED,
             content = '', contentless_delete = 1, contentless_unindexed = 1,
             tokenize = 'unicode61 remove_diacritics 2');",
    )?;
    for row in &texts.rows {
        let [key, rusqlite::types::Value::Text(text), session] = &row[..] else {
            panic!("an entry without text: {row:?}");
        };
        let entry = Entry::from_json(text)?;
        if let Some((role, text)) = sessiontree::search::searchable_text(&entry) {
            conn.execute(
                "INSERT INTO message_text (rowid, text, role, session_key) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![key, text, role, session],
            )?;
        }
    }
    conn.execute_batch("PRAGMA user_version = 7;")?;
    Ok(())
}

/// Undoes schema version 11's block ids (on an archive no `compact` packed)
/// and version 10's role ids (leaving the append-only trigger dropped: the
/// caller writes the one of its version).
fn drop_role_ids(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "DROP TABLE entry_blocks;
         DROP TRIGGER entries_are_append_only;
         ALTER TABLE entries DROP COLUMN role_id;
         DROP TABLE roles;",
    )
}

/// Turns an archive of the latest schema back into what a version-5 build
/// wrote: no staged imports (version 7), every entry's text stored plain (with `parent_id` and `timestamp`
/// columns), the search index holding its own copy of the text, no
/// dictionaries or blobs.
pub fn downgrade_to_version_5(db: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let texts = Archive::open(db, Durability::Relaxed)?
        .query_read_only("SELECT entry_key, entry_text(entry_key), session_key FROM entries")?;
    let conn = rusqlite::Connection::open(db)?;
    drop_role_ids(&conn)?;
    conn.execute_batch(
        "DROP TABLE check_marks; DROP TRIGGER check_marks_entry_rewritten; DROP TRIGGER check_marks_entry_removed; DROP TRIGGER check_marks_segment_rewritten; DROP TRIGGER check_marks_segment_removed; DROP TRIGGER check_marks_leaf_event_rewritten; DROP TRIGGER check_marks_leaf_event_removed; DROP TRIGGER check_marks_compaction_rewritten; DROP TRIGGER check_marks_compaction_removed;
         DROP TABLE dead_message_text;
         DROP TABLE usage_daily; DROP TABLE usage_facts;
         ALTER TABLE sessions DROP COLUMN last_active_ms;
         DROP TABLE kept_lines;
         ALTER TABLE sessions DROP COLUMN contract;
         ALTER TABLE sessions DROP COLUMN open_end;
         DROP INDEX sessions_staged;
         ALTER TABLE sessions DROP COLUMN staged_from;
         DROP INDEX entries_by_type;
         ALTER TABLE entries ADD COLUMN parent_id TEXT;
         ALTER TABLE entries ADD COLUMN timestamp TEXT NOT NULL DEFAULT '';
         DROP TABLE message_text;
         -- SQLite 3.54 leaves this shadow table of a contentless_unindexed table behind.
         DROP TABLE IF EXISTS message_text_content;
         CREATE VIRTUAL TABLE message_text USING fts5 (text, role UNINDEXED, session_key UNINDEXED,
             tokenize = 'unicode61 remove_diacritics 2');
         DROP TABLE dictionaries; DROP TABLE entry_blobs; DROP TABLE blobs;",
    )?;
    for row in &texts.rows {
        let [key, rusqlite::types::Value::Text(text), session] = &row[..] else {
            panic!("an entry without text: {row:?}");
        };
        let entry = Entry::from_json(text)?;
        conn.execute(
            "UPDATE entries SET json = ?2, parent_id = ?3, timestamp = ?4 WHERE entry_key = ?1",
            rusqlite::params![key, text, entry.facts().parent(), entry.timestamp()],
        )?;
        if let Some((role, text)) = sessiontree::search::searchable_text(&entry) {
            conn.execute(
                "INSERT INTO message_text (rowid, text, role, session_key) VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![key, text, role, session],
            )?;
        }
    }
    conn.execute_batch(
        "CREATE INDEX entries_by_type ON entries (session_key, type, seq);
         CREATE TRIGGER entries_are_append_only BEFORE UPDATE ON entries
         BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
         PRAGMA user_version = 5;",
    )?;
    Ok(())
}
