//! Crash safety: kill -9 trials against the real binary on both durable
//! backends, and JSONL files torn at every byte of their last record.
//!
//! A trial starts `sessiontree rpc FILE.jsonl` (or `--db A.db rpc SESSION`),
//! waits until it answers, pipes it a burst of appends (messages, appends
//! under chosen parents, leaf moves, moves with branch summaries, labels,
//! names, compactions, now and then a 64–300 KB entry so that a kill can land
//! inside a write), SIGKILLs it 0–30 ms later, and reopens the store (every
//! other trial runs the child with `--durability relaxed`: no fsync, which
//! must survive a process crash all the same). An
//! `append…` response is written only once the entry is durable, so every
//! response read is an acknowledged entry. After each kill:
//!
//! * the store opens (`Archive::check` passes for SQLite);
//! * the log before the trial is unchanged, byte for byte;
//! * the new entries are exactly a prefix of what was requested, in order,
//!   cut at a request boundary (a `moveTo` with its summary is one append:
//!   never stored in part, but for a JSONL line torn by the kill),
//!   and cover every acknowledged request; returned ids name those entries;
//! * the leaf and its path equal an in-memory replay of the log.
//!
//! The PostgreSQL trials run the same against a team archive on the test
//! server (`SESSIONTREE_TEST_PG`; skipped without one): a client killed
//! mid-transaction leaves the server to roll it back, or to commit it if the
//! `COMMIT` was sent, so the reopen first waits on the session row's lock.
//!
//! `CRASH_TRIALS=N` sets the trials per backend (default 100), `CRASH_SEED`
//! replays a run.

#[path = "conformance/pg.rs"]
#[allow(dead_code)]
mod pg;
mod support;

use serde_json::{json, Value};
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::memory::MemoryStorage;
use sessiontree::backend::postgres::PgArchive;
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::import_jsonl;
use sessiontree::repo::postgres::PgRepo;
use sessiontree::repo::sqlite::SqliteRepo;
use sessiontree::repo::{CreateOptions, SessionRepo};
use sessiontree::{Durability, Entry, EntryType, SessionMetadata, SessionStorage};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;

const TS: &str = "2025-02-03T04:05:06.789Z";

/// One request of a trial.
#[derive(Debug, Clone)]
enum Op {
    /// `appendEntry` with an entry whose id, parent and text we chose.
    Entry(String),
    /// `appendMessage`.
    Message(Value),
    /// `setLeafId`.
    SetLeaf(Option<String>),
    /// `moveTo` with a branch summary: a `leaf` and a `branch_summary` entry, one append.
    MoveTo(String, String),
    /// `appendLabel`.
    Label(String, String),
    /// `appendSessionName`.
    Name(String),
}

impl Op {
    fn method_params(&self) -> (&'static str, Value) {
        match self {
            Op::Entry(json) => (
                "appendEntry",
                json!({ "entry": serde_json::from_str::<Value>(json).expect("entry json") }),
            ),
            Op::Message(m) => ("appendMessage", json!({ "message": m })),
            Op::SetLeaf(t) => ("setLeafId", json!({ "leafId": t })),
            Op::MoveTo(t, s) => ("moveTo", json!({"entryId": t, "summary": {"summary": s}})),
            Op::Label(t, l) => ("appendLabel", json!({"targetId": t, "label": l})),
            Op::Name(n) => ("appendSessionName", json!({ "name": n })),
        }
    }

    /// How many entries the request appends.
    fn entries(&self) -> usize {
        match self {
            Op::MoveTo(..) => 2,
            _ => 1,
        }
    }

    /// Whether the `step`-th entry this request appends may be `e`, given the
    /// log before it (`log`).
    fn check(&self, step: usize, e: &Entry, log: &MemoryStorage) -> Result<(), String> {
        let v = e.value();
        let leaf_before = log.stored_leaf_id().expect("leaf");
        let expect = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "{what}: request {self:?} step {step}, stored {}",
                    e.json()
                ))
            }
        };
        match (self, step) {
            (Op::Entry(json), 0) => expect(e.json() == json, "entry text differs"),
            (Op::Message(m), 0) => {
                expect(
                    v["type"] == "message" && &v["message"] == m,
                    "not this message",
                )?;
                expect(
                    e.parent_id() == leaf_before.as_deref(),
                    "parent is not the leaf",
                )
            }
            (Op::SetLeaf(t), 0) => {
                expect(
                    *e.entry_type() == EntryType::Leaf && v["targetId"] == json!(t),
                    "not this leaf move",
                )?;
                expect(
                    e.parent_id() == leaf_before.as_deref(),
                    "parent is not the leaf",
                )
            }
            (Op::MoveTo(t, _), 0) => expect(
                *e.entry_type() == EntryType::Leaf
                    && v["targetId"] == json!(t)
                    && e.parent_id() == leaf_before.as_deref(),
                "not this move's leaf entry",
            ),
            (Op::MoveTo(t, s), 1) => expect(
                v["type"] == "branch_summary"
                    && v["fromId"] == json!(t)
                    && v["summary"] == json!(s)
                    && e.parent_id() == Some(t.as_str()),
                "not this move's branch summary",
            ),
            (Op::Label(t, l), 0) => {
                expect(
                    v["type"] == "label" && v["targetId"] == json!(t) && v["label"] == json!(l),
                    "not this label",
                )?;
                expect(
                    e.parent_id() == leaf_before.as_deref(),
                    "parent is not the leaf",
                )
            }
            (Op::Name(n), 0) => expect(
                v["type"] == "session_info"
                    && v["name"] == json!(sessiontree::session::sanitize_session_name(n)),
                "not this name",
            ),
            _ => Err(format!("request {self:?} has no step {step}")),
        }
    }
}

/// A durable store under test.
#[derive(Debug, Clone)]
enum Store {
    Jsonl(PathBuf),
    Sqlite { db: PathBuf, id: String },
    Postgres { url: String, id: String },
}

/// What reopening a store after a kill found.
struct Reopened {
    storage: Box<dyn SessionStorage>,
    /// JSONL: the file's bytes up to the end of its last complete line.
    complete: Option<Vec<u8>>,
    torn: bool,
}

impl Store {
    fn create(dir: &Path, kind: &str, n: usize) -> Store {
        match kind {
            "jsonl" => {
                let path = dir.join(format!("s{n}.jsonl"));
                new_jsonl(&path, &format!("crash-{n}"), Durability::Full);
                Store::Jsonl(path)
            }
            "postgres" => {
                let server = pg::url().expect("a PostgreSQL test server");
                let url = pg::url_in_schema(&server, &pg::fresh_schema());
                let archive = PgArchive::open(&url, Durability::Full).expect("team archive");
                let id = format!("crash-{n}");
                let session = PgRepo::new(archive)
                    .create(&CreateOptions {
                        id: Some(id.clone()),
                        cwd: "/work/project".into(),
                        ..CreateOptions::default()
                    })
                    .expect("create session");
                drop(session); // releases the writer claim
                Store::Postgres { url, id }
            }
            _ => {
                let db = dir.join(format!("a{n}.db"));
                let archive = Archive::open(&db, Durability::Full).expect("archive");
                let id = format!("crash-{n}");
                let mut repo = SqliteRepo::new(archive);
                let session = repo
                    .create(&CreateOptions {
                        id: Some(id.clone()),
                        cwd: "/work/project".into(),
                        ..CreateOptions::default()
                    })
                    .expect("create session");
                drop(session); // releases the writer claim
                Store::Sqlite { db, id }
            }
        }
    }

    /// The binary serving this store; `relaxed` runs it without fsync, which
    /// must survive a process crash just the same.
    fn spawn(&self, relaxed: bool) -> RpcChild {
        let durability = if relaxed { "relaxed" } else { "full" };
        let mut args: Vec<&std::ffi::OsStr> = vec!["--durability".as_ref(), durability.as_ref()];
        match self {
            Store::Jsonl(path) => args.extend(["rpc".as_ref(), path.as_os_str()]),
            Store::Sqlite { db, id } => {
                args.extend(["--db".as_ref(), db.as_os_str(), "rpc".as_ref(), id.as_ref()])
            }
            Store::Postgres { url, id } => {
                let (url, id): (&std::ffi::OsStr, &std::ffi::OsStr) = (url.as_ref(), id.as_ref());
                args.extend(["--db".as_ref(), url, "rpc".as_ref(), id])
            }
        }
        RpcChild::spawn(args)
    }

    fn reopen(&self) -> Reopened {
        match self {
            Store::Jsonl(path) => {
                let s = JsonlStorage::open(path, Durability::Full).unwrap_or_else(|e| {
                    panic!("{} does not open after a kill: {e}", path.display())
                });
                let bytes = std::fs::read(path).expect("read file");
                let end = s.torn_tail().map_or(bytes.len(), |t| t.offset as usize);
                let torn = s.torn_tail().is_some();
                Reopened {
                    storage: Box::new(s),
                    complete: Some(bytes[..end].to_vec()),
                    torn,
                }
            }
            Store::Sqlite { db, id } => {
                let archive = Archive::open(db, Durability::Full)
                    .unwrap_or_else(|e| panic!("{} does not open after a kill: {e}", db.display()));
                let problems = archive.check(None).expect("check runs");
                assert!(problems.is_empty(), "check after a kill: {problems:?}");
                let s = archive.open_session(id).expect("session opens");
                Reopened {
                    storage: Box::new(s),
                    complete: None,
                    torn: false,
                }
            }
            Store::Postgres { url, id } => {
                wait_for_a_killed_clients_commit(url, id);
                let archive = PgArchive::open(url, Durability::Full)
                    .unwrap_or_else(|e| panic!("the team archive does not open after a kill: {e}"));
                let s = archive.open_session(id).expect("session opens");
                Reopened {
                    storage: Box::new(s),
                    complete: None,
                    torn: false,
                }
            }
        }
    }
}

/// Waits until no transaction of the killed child can still commit. The
/// server runs a statement the client sent before it died, so a `COMMIT`
/// sent just before the kill may land after it: a read at once saw the log
/// without an unacknowledged entry that appeared a moment later (a CI run
/// failed so). Every append locks its session row from its first statement
/// to its commit, so taking that lock waits for it, as the next writer's
/// claim does.
fn wait_for_a_killed_clients_commit(url: &str, id: &str) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    let mut tx = client.transaction().expect("begin");
    tx.query("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", &[&id])
        .expect("lock the session row");
    tx.rollback().expect("rollback");
}

/// What the trials know about a store between kills.
struct State {
    log: Vec<Entry>,
    /// JSONL: bytes of the complete lines, which no later trial may change.
    bytes: Vec<u8>,
    next_id: u64,
}

#[derive(Default, Debug)]
struct Tally {
    trials: usize,
    requests: usize,
    acked: usize,
    mid_burst: usize,
    unacked_but_stored: usize,
    torn_tails: usize,
    entries_at_end: usize,
}

fn random_text(rng: &mut Rng, len: usize) -> String {
    const WORDS: &[&str] = &[
        "alpha",
        "beta",
        "ünïcødé",
        "🌍",
        "quote\"",
        "back\\slash",
        "tab\t",
        "line\nbreak",
        "'; DROP TABLE entries; --",
    ];
    let mut s = String::new();
    while s.len() < len {
        s.push_str(rng.pick::<&str>(WORDS));
        s.push(' ');
    }
    s
}

fn generate(rng: &mut Rng, state: &mut State, count: usize) -> Vec<Op> {
    let mut ids: Vec<String> = state.log.iter().map(|e| e.id().to_owned()).collect();
    // The leaf as far as it can be predicted (helpers choose their own ids).
    let mut leaf: Option<Option<String>> = Some(
        MemoryStorage::with_entries(SessionMetadata::default(), state.log.iter().cloned())
            .expect("replay")
            .stored_leaf_id()
            .expect("leaf"),
    );
    let mut ops = Vec::with_capacity(count);
    for _ in 0..count {
        let roll = rng.below(100);
        let existing = (!ids.is_empty()).then(|| rng.pick(&ids).clone());
        let op = match (roll, existing) {
            (0..=44, _) | (_, None) => {
                state.next_id += 1;
                let id = format!("k{:06}", state.next_id);
                let parent = match (rng.below(10), &leaf, ids.is_empty()) {
                    (0, _, _) | (_, _, true) => None,
                    (1..=6, Some(l), _) => l.clone(),
                    _ => Some(rng.pick(&ids).clone()),
                };
                // Now and then a large entry, so that a kill can land inside a write.
                let text_len = match rng.below(100) {
                    0..=7 => 64_000 + rng.below(240_000) as usize,
                    _ => rng.below(200) as usize,
                };
                let body = if rng.chance(10) && !ids.is_empty() {
                    json!({"type": "compaction", "id": id, "parentId": parent, "timestamp": TS,
                           "summary": random_text(rng, text_len), "firstKeptEntryId": rng.pick(&ids),
                           "tokensBefore": 1234})
                } else {
                    json!({"type": "message", "id": id, "parentId": parent, "timestamp": TS,
                           "message": {"role": if rng.chance(50) {"user"} else {"assistant"},
                                       "content": [{"type": "text", "text": random_text(rng, text_len)}]}})
                };
                ids.push(id.clone());
                leaf = Some(Some(id));
                Op::Entry(body.to_string())
            }
            (45..=64, _) => {
                leaf = None;
                Op::Message(
                    json!({"role": "user", "content": random_text(rng, 40), "n": rng.next_u64() % 1000}),
                )
            }
            (65..=74, Some(t)) => {
                let target = (!rng.chance(5)).then_some(t);
                leaf = Some(target.clone());
                Op::SetLeaf(target)
            }
            (75..=82, Some(t)) => {
                leaf = None;
                Op::MoveTo(t, random_text(rng, 30))
            }
            (83..=94, Some(t)) => {
                leaf = None;
                Op::Label(t, format!("label {}", rng.below(1000)))
            }
            (_, Some(_)) => {
                leaf = None;
                Op::Name(format!("name {}", random_text(rng, 12)))
            }
        };
        ops.push(op);
    }
    ops
}

fn trial(store: &Store, state: &mut State, rng: &mut Rng, tally: &mut Tally, relaxed: bool) {
    let ops = generate(rng, state, 40);
    let mut child = store.spawn(relaxed);
    let ready = child.call("getLeafId", json!({}));
    assert_eq!(response_code(&ready), None, "the store opens: {ready}");
    let mut burst = String::new();
    let mut request_ids = Vec::new();
    for op in &ops {
        let (method, params) = op.method_params();
        let (rid, line) = child.request(method, params);
        request_ids.push(rid);
        burst.push_str(&line);
        burst.push('\n');
    }
    let writer = child.send_in_background(burst.into_bytes());
    std::thread::sleep(Duration::from_micros(rng.below(30_000)));
    let responses = child.kill9();
    let _ = writer.join();

    assert!(responses.len() <= ops.len());
    for (r, rid) in responses.iter().zip(&request_ids) {
        assert_eq!(r["id"], json!(rid), "responses come in request order");
        assert_eq!(
            response_code(r),
            None,
            "an append failed during a trial: {r}"
        );
    }
    tally.trials += 1;
    tally.requests += ops.len();
    tally.acked += responses.len();
    if responses.len() < ops.len() {
        tally.mid_burst += 1;
    }

    let reopened = store.reopen();
    let storage = &reopened.storage;
    let entries = storage.entries(0, None).expect("entries");
    let old = state.log.len();
    assert!(
        entries.len() >= old,
        "entries were lost: {} < {old}",
        entries.len()
    );
    assert_eq!(
        jsons(&entries[..old]),
        jsons(&state.log),
        "the log before the trial changed"
    );
    if let Some(complete) = &reopened.complete {
        assert!(
            complete.len() >= state.bytes.len() && complete[..state.bytes.len()] == state.bytes[..],
            "bytes of complete lines changed after a kill"
        );
    }
    if reopened.torn {
        tally.torn_tails += 1;
    }

    // The new entries: a prefix of the requested ones, in order.
    let mut replay =
        MemoryStorage::with_entries(SessionMetadata::default(), state.log.iter().cloned())
            .expect("replay");
    let mut new = entries[old..].iter();
    let mut complete_ops = 0;
    let mut cut_inside: Option<&Op> = None;
    'ops: for (i, op) in ops.iter().enumerate() {
        for step in 0..op.entries() {
            let Some(e) = new.next() else {
                if step > 0 {
                    cut_inside = Some(op);
                }
                break 'ops;
            };
            if let Err(why) = op.check(step, e, &replay) {
                panic!(
                    "entry {} after the kill is not the next requested one: {why}",
                    old + i
                );
            }
            replay.append_entry(e.clone()).expect("replay");
        }
        complete_ops += 1;
        // Ids that a response returned name exactly this request's entry.
        if let Some(r) = responses.get(i) {
            let last = replay
                .entries(replay.entry_count().unwrap() - 1, None)
                .unwrap();
            match op {
                Op::Message(_) | Op::Label(..) | Op::MoveTo(..) => {
                    assert_eq!(r["value"], json!(last[0].id()), "returned id of {op:?}")
                }
                _ => {}
            }
        }
    }
    assert!(
        new.next().is_none(),
        "more entries were stored than requested"
    );
    if let Some(op) = cut_inside {
        // A move with a summary is one append of both entries (one SQLite
        // transaction, one write of both JSONL lines): only a JSONL write
        // torn by the kill can cut it, and then the torn line is the cut.
        assert!(
            matches!(op, Op::MoveTo(..)) && matches!(store, Store::Jsonl(_)) && reopened.torn,
            "a single request was stored in part: {op:?}"
        );
    }
    assert!(
        responses.len() <= complete_ops,
        "an acknowledged request is missing: {} acknowledged, {complete_ops} stored",
        responses.len()
    );
    tally.unacked_but_stored += complete_ops - responses.len();

    // The leaf is a valid replay, and so is its path.
    let leaf = storage.leaf_id().expect("the leaf names an entry");
    assert_eq!(
        leaf,
        replay.leaf_id().expect("replayed leaf"),
        "leaf differs from a replay"
    );
    let path = storage
        .path_to_root_or_compaction(leaf.as_deref())
        .expect("path");
    let expected = replay
        .path_to_root_or_compaction(leaf.as_deref())
        .expect("replayed path");
    assert_eq!(jsons(&path), jsons(&expected), "path differs from a replay");
    assert_eq!(
        storage.session_name().unwrap(),
        replay.session_name().unwrap()
    );
    assert_eq!(storage.entry_count().unwrap(), entries.len());
    for e in entries.iter().rev().take(5) {
        assert_eq!(
            storage.label(e.id()).unwrap(),
            replay.label(e.id()).unwrap()
        );
    }

    state.log = entries;
    if let Some(complete) = reopened.complete {
        state.bytes = complete;
    }
}

fn run_trials(kind: &str) {
    let trials = env_usize("CRASH_TRIALS", 100);
    let mut rng = Rng::from_env("CRASH_SEED", &format!("kill -9 trials ({kind})"));
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut store = Store::create(dir.path(), kind, 0);
    let mut state = State {
        log: Vec::new(),
        bytes: Vec::new(),
        next_id: 0,
    };
    for t in 0..trials {
        // A fresh small store now and then keeps trials fast.
        if t > 0 && t % 25 == 0 {
            tally.entries_at_end += state.log.len();
            store = Store::create(dir.path(), kind, t);
            state = State {
                log: Vec::new(),
                bytes: Vec::new(),
                next_id: state.next_id,
            };
        }
        if let Store::Jsonl(path) = &store {
            if state.bytes.is_empty() {
                state.bytes = std::fs::read(path).expect("read");
            }
        }
        // Every other trial without fsync: a process crash loses nothing either way.
        trial(&store, &mut state, &mut rng, &mut tally, t % 2 == 1);
    }
    tally.entries_at_end += state.log.len();
    eprintln!(
        "kill -9 trials ({kind}): {tally:?} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(tally.trials, trials);
    assert!(
        tally.acked > 0,
        "no request was ever acknowledged: the trials test nothing"
    );
}

#[test]
fn kill9_trials_jsonl() {
    run_trials("jsonl");
}

#[test]
fn kill9_trials_sqlite() {
    run_trials("sqlite");
}

#[test]
fn kill9_trials_postgres() {
    if pg::url().is_some() {
        run_trials("postgres");
    }
}

/// A session file whose last record holds multi-byte UTF-8 and escapes, so
/// that cuts land inside characters and escape sequences.
fn torn_fixture(dir: &Path, id: &str) -> (PathBuf, Vec<Entry>, usize) {
    let path = dir.join(format!("{id}.jsonl"));
    let mut s = new_jsonl(&path, id, Durability::Relaxed);
    let a = message_entry("a1", None, "user", "first");
    let b = message_entry("b2", Some("a1"), "assistant", "second");
    let c = Entry::from_value(&json!({
        "type": "message", "id": "c3", "parentId": "b2", "timestamp": TS,
        "message": {"role": "user", "content": "héllo 🌍 \"quoted\" \\ \u{2028} end"},
    }))
    .expect("entry");
    s.append_entries(&[a.clone(), b.clone(), c.clone()])
        .expect("append");
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let start = len - c.json().len() - 1;
    (path, vec![a, b, c], start)
}

/// A JSONL file cut at every byte offset of its last record opens with every
/// earlier entry, reports the torn tail, and appends cleanly afterwards (the
/// torn bytes gone); importing the cut file takes the complete lines only.
#[test]
fn torn_tail_at_every_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, entries, start) = torn_fixture(dir.path(), "torn-000000");
    let full = std::fs::read(&path).unwrap();
    let end = full.len();
    let archive = Archive::open(dir.path().join("import.db"), Durability::Relaxed).unwrap();
    let header_line_len = full.iter().position(|&b| b == b'\n').unwrap() + 1;
    let mut cases = 0;
    for cut in start..end {
        cases += 1;
        // Same length header with a per-cut id, so each cut imports as its own session.
        let id = format!("torn-{cut:06}");
        let header = String::from_utf8(full[..header_line_len].to_vec())
            .unwrap()
            .replace("torn-000000", &id);
        let mut bytes = header.into_bytes();
        bytes.extend_from_slice(&full[header_line_len..cut]);
        let file = dir.path().join(format!("{id}.jsonl"));
        std::fs::write(&file, &bytes).unwrap();

        // What should survive: the last record only when just its '\n' is missing.
        let survivors: &[Entry] = if cut == end - 1 {
            &entries
        } else {
            &entries[..2]
        };
        let torn_expected = cut > start && cut < end - 1;

        let s = JsonlStorage::open(&file, Durability::Relaxed)
            .unwrap_or_else(|e| panic!("cut at {cut} does not open: {e}"));
        assert_eq!(jsons(s.all_entries()), jsons(survivors), "cut at {cut}");
        match s.torn_tail() {
            Some(t) => {
                assert!(torn_expected, "cut at {cut}: unexpected torn tail {t:?}");
                assert_eq!(t.offset as usize, start, "cut at {cut}");
                assert_eq!(t.len as usize, cut - start, "cut at {cut}");
                assert_eq!(t.line, 4, "cut at {cut}: header is line 1");
            }
            None => assert!(!torn_expected, "cut at {cut}: torn tail not reported"),
        }
        assert_eq!(
            s.leaf_id().unwrap().as_deref(),
            survivors.last().map(Entry::id)
        );

        // Import before appending: complete lines only.
        let imported =
            import_jsonl(&archive, &file).unwrap_or_else(|e| panic!("cut at {cut}: import: {e}"));
        assert_eq!(imported.session_id, id);
        assert_eq!(imported.torn_tail.is_some(), torn_expected, "cut at {cut}");
        assert_eq!(
            jsons(&archive_entries(&archive, &id)),
            jsons(survivors),
            "cut at {cut}: import"
        );

        // Append: the torn bytes are cut off first, a missing '\n' written first.
        let mut s = s;
        let d = message_entry("d4", Some("b2"), "user", "after the crash");
        s.append_entry(d.clone()).expect("append after a torn tail");
        drop(s);
        let mut expected_bytes = bytes[..if cut == end - 1 { cut } else { start }].to_vec();
        if cut == end - 1 {
            expected_bytes.push(b'\n');
        }
        expected_bytes.extend_from_slice(d.json().as_bytes());
        expected_bytes.push(b'\n');
        assert_eq!(
            std::fs::read(&file).unwrap(),
            expected_bytes,
            "cut at {cut}: file after append"
        );
        let again = JsonlStorage::open(&file, Durability::Relaxed).expect("reopens");
        assert!(
            again.torn_tail().is_none(),
            "cut at {cut}: still torn after append"
        );
        let mut want = jsons(survivors);
        want.push(d.json().to_owned());
        assert_eq!(
            jsons(again.all_entries()),
            want,
            "cut at {cut}: after append"
        );
        assert_eq!(again.leaf_id().unwrap().as_deref(), Some("d4"));

        // The grown file re-imports as an append of the new line(s) only.
        let re = import_jsonl(&archive, &file);
        if let Ok(r) = &re {
            assert_eq!(
                jsons(&archive_entries(&archive, &id)),
                want,
                "cut at {cut}: re-import"
            );
            assert!(r.torn_tail.is_none());
        }
        // A file that was cut (its torn bytes replaced) is "changed, not only
        // appended to" when the torn bytes were part of the recorded prefix —
        // they never are: the import stopped before them.
        re.unwrap_or_else(|e| panic!("cut at {cut}: re-import after append: {e}"));
        std::fs::remove_file(&file).unwrap();
    }
    assert!(
        cases > 40,
        "the last record is long enough to cut many ways"
    );
    let problems = archive.check(None).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

/// A torn tail that is followed by a later complete line is not a tail: it is
/// a broken line in the middle, and the SDK's open refuses it with
/// `invalid_entry`; the app's (pi 1.6's) skips it, the file unchanged.
#[test]
fn torn_line_in_the_middle_is_invalid_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _, start) = torn_fixture(dir.path(), "mid");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(start + 10);
    bytes.push(b'\n');
    bytes.extend_from_slice(message_entry("z9", None, "user", "later").json().as_bytes());
    bytes.push(b'\n');
    std::fs::write(&path, &bytes).unwrap();
    let err = JsonlStorage::open_as(&path, Durability::Relaxed, sessiontree::Contract::Sdk)
        .expect_err("refused");
    assert_eq!(err.code(), sessiontree::ErrorCode::InvalidEntry, "{err}");
    assert!(err.to_string().contains("line 4"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "open changed nothing");
    let app = JsonlStorage::open(&path, Durability::Relaxed).expect("pi 1.6 opens it");
    assert_eq!(app.skipped_lines()[0].line, 4);
    assert_eq!(app.all_entries().len(), 3);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "open changed nothing");
}
