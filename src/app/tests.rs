//! The app contract checked against answers pi-coding-agent 1.6.0 itself
//! gave (`testdata/*.pi.*`, recorded by running pi's `SessionManager` under
//! Node 22 on the same session and requests), and the bounds of its reads.

use super::value::JsValue;
use super::AppSession;
use crate::backend::memory::MemoryStorage;
use crate::entry::Entry;
use crate::error::Result;
use crate::rpc::app::AppRpc;
use crate::skeleton::SkeletonItem;
use crate::storage::{SessionMetadata, SessionStorage};
use std::cell::Cell;

const H1: &str = include_str!("testdata/h1.jsonl");

/// A memory session from JSONL text (header first), ids as in the file.
fn load(text: &str) -> MemoryStorage {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = JsValue::parse(lines.next().expect("a header")).expect("json");
    let meta = SessionMetadata {
        id: header
            .get("id")
            .and_then(JsValue::as_js_str)
            .map(|s| s.to_string_lossy())
            .unwrap_or_default(),
        created_at: "2026-01-01T00:00:00.000Z".into(),
        cwd: Some("/tmp".into()),
        ..SessionMetadata::default()
    };
    MemoryStorage::loaded(
        meta,
        lines.map(|l| Entry::from_stored_line(l).expect("a valid line")),
    )
}

/// Runs request lines through [`AppRpc::call`]: (request id, answer) pairs,
/// an answer being `Ok(value)` or `Err(message)`.
fn run<S: SessionStorage>(
    rpc: &mut AppRpc<S>,
    requests: &str,
) -> Vec<(String, Result<JsValue, String>)> {
    requests
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let req = JsValue::parse(line).expect("a request");
            let id = req.get("id").map(JsValue::to_json).unwrap_or_default();
            let method = req
                .get("method")
                .and_then(JsValue::as_js_str)
                .expect("method");
            let params = req.get("params").map(JsValue::to_json).unwrap_or_default();
            let answer = rpc
                .call(&method.to_string_lossy(), &params)
                .map(|text| JsValue::parse(&text).expect("an answer is JSON"))
                .map_err(|e| e.to_string());
            (id, answer)
        })
        .collect()
}

/// pi's recorded answers (`{"id","ok","value"}` / `{"id","ok":false,"error":{"message"}}` lines).
fn recorded(text: &str) -> Vec<(String, Result<JsValue, String>)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let a = JsValue::parse(line).expect("json");
            let id = a.get("id").map(JsValue::to_json).unwrap_or_default();
            let answer = if a.get("ok") == Some(&JsValue::Bool(true)) {
                Ok(a.get("value").cloned().unwrap_or(JsValue::Null))
            } else {
                Err(a
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .and_then(JsValue::as_js_str)
                    .map(|s| s.to_string_lossy())
                    .unwrap_or_default())
            };
            (id, answer)
        })
        .collect()
}

/// Replaces what differs from run to run in writes: new ids (numbered in the
/// order the answers hand them out), timestamps and times of today.
fn normalize(answers: &mut [(String, Result<JsValue, String>)]) {
    let mut ids: Vec<String> = Vec::new();
    for (_, a) in answers.iter() {
        let id = match a {
            Ok(JsValue::String(s)) if s.to_string_lossy().len() == 8 => Some(s.to_string_lossy()),
            Ok(v @ JsValue::Object(_)) if v.get("type").is_some_and(|t| t.is_str("usage")) => v
                .get("id")
                .and_then(JsValue::as_js_str)
                .map(|s| s.to_string_lossy()),
            _ => None,
        };
        if let Some(id) = id.filter(|id| !ids.contains(id)) {
            ids.push(id);
        }
    }
    // A wall-clock time in ms (pi's `Date.now()` stamps): anything after
    // 2024-01-01. Not "the last day": pi's answers were recorded once, and
    // a day later their stamps no longer matched ours.
    let recent = 1_704_067_200_000.0;
    fn walk(v: &mut JsValue, ids: &[String], recent: f64) {
        match v {
            JsValue::String(s) => {
                let text = s.to_string_lossy();
                if let Some(n) = ids.iter().position(|i| *i == text) {
                    *v = JsValue::str(&format!("#{n}"));
                } else if text.len() == 24
                    && text.ends_with('Z')
                    && !text.starts_with("2026-01-01T")
                    && crate::entry::timestamp_millis(&text).is_some()
                {
                    *v = JsValue::str("TS");
                }
            }
            JsValue::Number(x) if *x > recent => *v = JsValue::str("MS"),
            JsValue::Array(items) => items.iter_mut().for_each(|i| walk(i, ids, recent)),
            JsValue::Object(members) => members.iter_mut().for_each(|(_, m)| walk(m, ids, recent)),
            _ => {}
        }
    }
    for (_, a) in answers.iter_mut() {
        if let Ok(v) = a {
            walk(v, &ids, recent);
        }
    }
}

fn assert_same(
    ours: &[(String, Result<JsValue, String>)],
    pi: &[(String, Result<JsValue, String>)],
) {
    assert_eq!(ours.len(), pi.len());
    for (o, p) in ours.iter().zip(pi) {
        assert_eq!(o.0, p.0);
        match (&o.1, &p.1) {
            (Ok(a), Ok(b)) => assert!(
                a == b,
                "request {}:\n ours {}\n pi   {}",
                o.0,
                a.to_json(),
                b.to_json()
            ),
            (a, b) => assert_eq!(a, b, "request {}", o.0),
        }
    }
}

/// Context edits, compactions with `systemMessage` and model changes before
/// them, branch summaries, labels with spaces, duplicate ids, missing
/// parents, self-parents, invalid dates, `content: null`, 17-digit costs,
/// numeric strings in usage, lone surrogates: every read as pi 1.6 answers.
#[test]
fn reads_answer_as_pi_does() {
    let mut rpc = AppRpc::new(AppSession::open(load(H1)).unwrap(), "h1".into());
    let ours = run(&mut rpc, include_str!("testdata/h1.reads.jsonl"));
    assert_same(&ours, &recorded(include_str!("testdata/h1.reads.pi.jsonl")));
}

/// Every writer (entries' shapes and key order, validations and pi's
/// messages), `branchWithSummary` to an entry and to a new root, label
/// set/clear, and reads after them, as pi 1.6 answers.
#[test]
fn writes_answer_as_pi_does() {
    let mut rpc = AppRpc::new(AppSession::open(load(H1)).unwrap(), "h1".into());
    let mut ours = run(&mut rpc, include_str!("testdata/h1.writes.jsonl"));
    let mut pi = recorded(include_str!("testdata/h1.writes.pi.jsonl"));
    normalize(&mut ours);
    normalize(&mut pi);
    assert_same(&ours, &pi);
}

/// The same LCG as the script that made the session pi sorted.
fn lcg(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *x >> 33
}

/// getTree sorts children by `new Date(..).getTime()` differences, NaN for
/// invalid dates: the order is V8's TimSort's (runs, merges, galloping),
/// recorded from pi for lists of 64 to 1,000 children.
#[test]
fn tree_children_are_sorted_as_v8_sorts_them() {
    let mut x = 42u64;
    let mut lines = vec![
        r#"{"type":"session","version":3,"id":"h5","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/tmp"}"#.to_owned(),
        r#"{"type":"custom","customType":"r","id":"root","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z"}"#.to_owned(),
    ];
    for (g, (count, thr)) in [(64, 300), (100, 100), (300, 50), (700, 500), (1000, 20)]
        .into_iter()
        .enumerate()
    {
        lines.push(format!(r#"{{"type":"custom","customType":"g","id":"g{g}","parentId":"root","timestamp":"2026-01-01T00:00:0{g}.000Z"}}"#));
        for i in 0..count {
            let ts = if lcg(&mut x) % 1000 < thr {
                "bad".to_owned()
            } else {
                let mi = lcg(&mut x) % 4;
                let se = lcg(&mut x) % 60;
                format!("2026-01-01T00:{mi:02}:{se:02}.000Z")
            };
            lines.push(format!(r#"{{"type":"custom","customType":"c","id":"g{g}_{i}","parentId":"g{g}","timestamp":"{ts}"}}"#));
        }
    }
    let session = AppSession::open(load(&lines.join("\n"))).unwrap();
    let tree = session.tree().unwrap();
    assert_eq!(tree.len(), 1);
    let ours: Vec<String> = tree[0]
        .children
        .iter()
        .map(|g| {
            let order: Vec<&str> = g
                .children
                .iter()
                .map(|c| c.entry.id().split('_').nth(1).unwrap())
                .collect();
            format!("{}: {}", g.entry.id(), order.join(" "))
        })
        .collect();
    let pi: Vec<&str> = include_str!("testdata/v8sort.pi.txt").lines().collect();
    assert_eq!(ours, pi);
}

/// A memory store that counts the reads the app makes of it: the store's
/// path walk is delegated whole (as a store with a branch cache answers it).
struct Counting {
    inner: MemoryStorage,
    walks: Cell<usize>,
    lookups: Cell<usize>,
    scans: Cell<usize>,
}

impl SessionStorage for Counting {
    fn metadata(&self) -> Result<SessionMetadata> {
        self.inner.metadata()
    }
    fn stored_leaf_id(&self) -> Result<Option<String>> {
        self.inner.stored_leaf_id()
    }
    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        self.inner.append_entry(entry)
    }
    fn entry(&self, id: &str) -> Result<Option<Entry>> {
        self.lookups.set(self.lookups.get() + 1);
        self.inner.entry(id)
    }
    fn find_entries(&self, entry_type: &str) -> Result<Vec<Entry>> {
        self.scans.set(self.scans.get() + 1);
        self.inner.find_entries(entry_type)
    }
    fn label(&self, id: &str) -> Result<Option<crate::json::JsString>> {
        self.inner.label(id)
    }
    fn session_name(&self) -> Result<Option<crate::json::JsString>> {
        self.inner.session_name()
    }
    fn session_stats(&self) -> Result<crate::rules::SessionStats> {
        self.scans.set(self.scans.get() + 1);
        self.inner.session_stats()
    }
    fn entries(&self, after: usize, limit: Option<usize>) -> Result<Vec<Entry>> {
        if limit != Some(1) {
            self.scans.set(self.scans.get() + 1);
        }
        self.inner.entries(after, limit)
    }
    fn entry_count(&self) -> Result<usize> {
        self.inner.entry_count()
    }
    fn path_to_root_or_compaction(&self, id: Option<&str>) -> Result<Vec<Entry>> {
        self.walks.set(self.walks.get() + 1);
        self.inner.path_to_root_or_compaction(id)
    }
    fn visit_skeleton(&self, sink: &mut dyn FnMut(SkeletonItem<'_>) -> Result<()>) -> Result<()> {
        self.scans.set(self.scans.get() + 1);
        self.inner.visit_skeleton(sink)
    }
}

/// Branch and context reads are chained cached walks, one per compaction
/// on the path, plus a lookup per walk: counted, not timed, on a 20,000-entry
/// chain with 200 compactions and a side branch of 5,000 entries.
#[test]
fn branch_and_context_reads_keep_the_bounds() {
    let mut entries = Vec::new();
    let mut parent: Option<String> = None;
    let ts = "2026-01-01T00:00:00.000Z";
    let push = |entries: &mut Vec<Entry>, text: String| {
        entries.push(Entry::from_json(&text).unwrap());
    };
    for i in 0..20_000 {
        let id = format!("e{i}");
        let p = parent
            .as_deref()
            .map_or("null".to_owned(), |p| format!("\"{p}\""));
        let text = if i % 100 == 99 {
            format!(
                r#"{{"type":"compaction","id":"{id}","parentId":{p},"timestamp":"{ts}","summary":"s{i}","firstKeptEntryId":"e{}","tokensBefore":1}}"#,
                i - 50
            )
        } else {
            format!(
                r#"{{"type":"message","id":"{id}","parentId":{p},"timestamp":"{ts}","message":{{"role":"user","content":"m{i}","timestamp":1}}}}"#
            )
        };
        push(&mut entries, text);
        parent = Some(id);
    }
    // A side branch from the middle, appended after the main chain.
    let mut side_parent = "e10000".to_owned();
    for i in 0..5_000 {
        let id = format!("s{i}");
        push(
            &mut entries,
            format!(
                r#"{{"type":"message","id":"{id}","parentId":"{side_parent}","timestamp":"{ts}","message":{{"role":"user","content":"x","timestamp":1}}}}"#
            ),
        );
        side_parent = id;
    }
    let store = Counting {
        inner: MemoryStorage::loaded(SessionMetadata::default(), entries),
        walks: Cell::new(0),
        lookups: Cell::new(0),
        scans: Cell::new(0),
    };
    let mut app = AppSession::open(store).unwrap();
    assert_eq!(
        app.storage().scans.get(),
        0,
        "open reads the last entry only"
    );
    assert_eq!(app.leaf_id(), Some("s4999"));
    app.branch_to("e19999").unwrap();
    let st = app.storage();
    st.walks.set(0);
    st.lookups.set(0);
    let path = app.branch(None).unwrap();
    assert_eq!(
        path.len(),
        20_000,
        "the whole path, never cut at a compaction"
    );
    assert_eq!(path[0].id(), "e0");
    assert!(st.walks.get() <= 201, "{} walks", st.walks.get());
    assert!(st.lookups.get() <= 2 * 201, "{} lookups", st.lookups.get());
    assert_eq!(st.scans.get(), 0);
    st.walks.set(0);
    let ctx = app.session_context().unwrap();
    // The latest compaction's summary, then the 50 kept entries: the
    // path's light facts (this store's default: the walks above) and the
    // walk that holds the context.
    assert_eq!(ctx.messages.len(), 1 + 50);
    assert!(st.walks.get() <= 201 + 1, "{} walks", st.walks.get());
    assert_eq!(st.scans.get(), 0, "the context reads no more than the path");
    // The side branch: its path joins the main chain's below e10000.
    let side = app.branch(Some("s4999")).unwrap();
    assert_eq!(side.len(), 10_001 + 5_000);
    assert_eq!(st.scans.get(), 0);
}

/// A chain deeper than any stack: the path, the tree and its JSON are
/// built without recursion.
#[test]
fn deep_chains_need_no_recursion() {
    let n = 100_000;
    let ts = "2026-01-01T00:00:00.000Z";
    let entries = (0..n).map(|i| {
        let p = if i == 0 {
            "null".to_owned()
        } else {
            format!("\"c{}\"", i - 1)
        };
        Entry::from_json(&format!(
            r#"{{"type":"custom","customType":"x","id":"c{i}","parentId":{p},"timestamp":"{ts}"}}"#
        ))
        .unwrap()
    });
    let app = AppSession::open(MemoryStorage::loaded(SessionMetadata::default(), entries)).unwrap();
    assert_eq!(app.branch(None).unwrap().len(), n);
    let json = app.tree_json_text().unwrap();
    assert!(json.starts_with(r#"[{"entry":{"type":"custom","customType":"x","id":"c0""#));
    assert_eq!(json.matches("\"children\":[").count(), n);
    let tree = app.tree().unwrap();
    let mut depth = 0;
    let mut node = &tree[0];
    while let Some(c) = node.children.first() {
        node = c;
        depth += 1;
    }
    assert_eq!(depth, n - 1);
    assert_eq!(super::AppTreeNode::list_to_json_text(&tree), json);
    drop(tree); // dropped without recursion
}

/// Ids as pi's `generateId` makes them: 8 hex characters (the head of a
/// version 4 UUID), retried on collision, a full UUID after 100 tries.
#[test]
fn ids_are_pi_shaped() {
    let id = super::new_app_entry_id(|_| Ok(false)).unwrap();
    assert_eq!(id.len(), 8);
    assert!(id
        .bytes()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    let full = super::new_app_entry_id(|_| Ok(true)).unwrap();
    assert_eq!(full.len(), 36);
    assert_eq!(&full[14..15], "4", "a version 4 UUID");
}

/// A SQLite store keeping count of what its path reads cost (its own
/// measure: statements and rows), and of any read that scans the log.
struct Measured {
    inner: crate::backend::sqlite::SqliteStorage,
    walks: Cell<usize>,
    statements: Cell<u64>,
    rows: Cell<u64>,
    scans: Cell<usize>,
}

impl SessionStorage for Measured {
    fn metadata(&self) -> Result<SessionMetadata> {
        self.inner.metadata()
    }
    fn stored_leaf_id(&self) -> Result<Option<String>> {
        self.inner.stored_leaf_id()
    }
    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        self.inner.append_entry(entry)
    }
    fn entry(&self, id: &str) -> Result<Option<Entry>> {
        self.inner.entry(id)
    }
    fn contains_entry(&self, id: &str) -> Result<bool> {
        self.inner.contains_entry(id)
    }
    fn find_entries(&self, entry_type: &str) -> Result<Vec<Entry>> {
        self.scans.set(self.scans.get() + 1);
        self.inner.find_entries(entry_type)
    }
    fn label(&self, id: &str) -> Result<Option<crate::json::JsString>> {
        self.inner.label(id)
    }
    fn session_name(&self) -> Result<Option<crate::json::JsString>> {
        self.inner.session_name()
    }
    fn session_stats(&self) -> Result<crate::rules::SessionStats> {
        self.inner.session_stats()
    }
    fn entries(&self, after: usize, limit: Option<usize>) -> Result<Vec<Entry>> {
        if limit != Some(1) {
            self.scans.set(self.scans.get() + 1);
        }
        self.inner.entries(after, limit)
    }
    fn entry_count(&self) -> Result<usize> {
        self.inner.entry_count()
    }
    fn path_to_root_or_compaction(&self, id: Option<&str>) -> Result<Vec<Entry>> {
        let path = self.inner.path_to_root_or_compaction(id)?;
        let cost = self.inner.last_read_cost();
        self.walks.set(self.walks.get() + 1);
        self.statements
            .set(self.statements.get() + u64::from(cost.statements));
        self.rows.set(self.rows.get() + cost.rows);
        Ok(path)
    }
}

/// On SQLite the whole path is the branch cache's reads chained: a handful
/// of statements per compaction on the path, rows in proportion to the
/// answer, no scan (a 20,000-entry chain with 200 compactions and a fork).
#[test]
fn sqlite_paths_are_cached_reads_chained() {
    use crate::repo::{sqlite::SqliteRepo, CreateOptions, SessionRepo};
    let dir = tempfile::tempdir().unwrap();
    let archive =
        crate::backend::sqlite::Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed)
            .unwrap();
    let mut repo = SqliteRepo::new(archive);
    let mut storage = repo
        .create(&CreateOptions {
            cwd: "/w".into(),
            ..Default::default()
        })
        .unwrap()
        .into_storage();
    let ts = "2026-01-01T00:00:00.000Z";
    let mut batch = Vec::new();
    for i in 0..20_000 {
        let p = if i == 0 {
            "null".to_owned()
        } else {
            format!("\"e{}\"", i - 1)
        };
        let text = if i % 100 == 99 {
            format!(
                r#"{{"type":"compaction","id":"e{i}","parentId":{p},"timestamp":"{ts}","summary":"s","firstKeptEntryId":"e{}","tokensBefore":1}}"#,
                i - 50
            )
        } else {
            format!(
                r#"{{"type":"message","id":"e{i}","parentId":{p},"timestamp":"{ts}","message":{{"role":"user","content":"m{i}","timestamp":1}}}}"#
            )
        };
        batch.push(Entry::from_json(&text).unwrap());
    }
    batch.push(Entry::from_json(&format!(r#"{{"type":"message","id":"f","parentId":"e15000","timestamp":"{ts}","message":{{"role":"user","content":"fork","timestamp":1}}}}"#)).unwrap());
    storage.append_entries(&batch).unwrap();
    let store = Measured {
        inner: storage,
        walks: Cell::new(0),
        statements: Cell::new(0),
        rows: Cell::new(0),
        scans: Cell::new(0),
    };
    let app = AppSession::open(store).unwrap();
    assert_eq!(app.leaf_id(), Some("f"));
    let path = app.branch(Some("e19999")).unwrap();
    assert_eq!(path.len(), 20_000);
    let st = app.storage();
    assert!(st.walks.get() <= 201, "{} walks", st.walks.get());
    assert!(
        st.statements.get() <= 8 * 201,
        "{} statements for {} walks",
        st.statements.get(),
        st.walks.get()
    );
    assert!(
        st.rows.get() <= 2 * 20_000 + 1_000,
        "{} rows",
        st.rows.get()
    );
    eprintln!(
        "{} walks, {} statements, {} rows",
        st.walks.get(),
        st.statements.get(),
        st.rows.get()
    );
    let fork = app.branch(None).unwrap();
    assert_eq!(fork.len(), 15_002);
    let ctx = app.session_context().unwrap();
    assert_eq!(
        ctx.messages.len(),
        1 + 50 + 2,
        "summary, kept entries, e15000 and the fork"
    );
    assert_eq!(st.scans.get(), 0, "no read scanned the log");
}

/// A random session of the shapes the light context read must get right:
/// forks, compactions whose first kept entry is on the path, off it, before
/// an older compaction, missing or not a string; assistant messages with
/// and without searchable text beside model changes; thinking changes
/// without a level; context edits of kept entries; messages whose
/// `message` is `null`, absent or a string; sessions without a compaction.
fn random_session(seed: u64, n: usize) -> Vec<Entry> {
    let mut x = seed;
    let ts = "2026-01-01T00:00:00.000Z";
    let mut ids: Vec<String> = Vec::new();
    let mut out = Vec::new();
    let compactions = !lcg(&mut x).is_multiple_of(4);
    for i in 0..n {
        let id = format!("r{i}");
        let parent = match (i, lcg(&mut x) % 10) {
            (0, _) => "null".to_owned(),
            (_, 0) => format!("\"{}\"", ids[(lcg(&mut x) as usize) % ids.len()]),
            _ => format!("\"{}\"", ids[i - 1]),
        };
        let any = |x: &mut u64| -> String {
            if ids.is_empty() {
                "nowhere".to_owned()
            } else {
                ids[(lcg(x) as usize) % ids.len()].clone()
            }
        };
        // An id a few entries back (on the path, mostly).
        let back = |x: &mut u64, within: usize| -> String {
            if ids.is_empty() {
                "nowhere".to_owned()
            } else {
                ids[i.saturating_sub(1 + (lcg(x) as usize) % within)].clone()
            }
        };
        let head = format!(r#""id":"{id}","parentId":{parent},"timestamp":"{ts}""#);
        let roll = lcg(&mut x) % 100;
        let text = match roll {
            0..=24 => format!(
                r#"{{"type":"message",{head},"message":{{"role":"user","content":"u{i}","timestamp":1}}}}"#
            ),
            25..=39 => format!(
                r#"{{"type":"message",{head},"message":{{"role":"assistant","content":[{{"type":"text","text":"a{i}"}}],"provider":"p{i}","model":"m{i}","timestamp":1}}}}"#
            ),
            40..=52 => format!(
                r#"{{"type":"message",{head},"message":{{"role":"assistant","content":[{{"type":"toolCall","id":"t","name":"bash","arguments":{{}}}}],"provider":"q{i}","model":"n{i}","timestamp":1}}}}"#
            ),
            53..=58 => format!(
                r#"{{"type":"message",{head},"message":{{"role":"toolResult","toolCallId":"t","content":[],"timestamp":1}}}}"#
            ),
            59..=61 => format!(
                r#"{{"type":"message",{head},"message":{{"role":"system","content":"sys{i}","timestamp":1}}}}"#
            ),
            62 => format!(r#"{{"type":"message",{head},"message":"just text"}}"#),
            63 if seed.is_multiple_of(3) => {
                format!(r#"{{"type":"message",{head},"message":null}}"#)
            }
            64 if seed.is_multiple_of(5) => format!(r#"{{"type":"message",{head}}}"#),
            65..=69 => {
                format!(r#"{{"type":"thinking_level_change",{head},"thinkingLevel":"high{i}"}}"#)
            }
            70 => format!(r#"{{"type":"thinking_level_change",{head}}}"#),
            71..=75 => {
                format!(r#"{{"type":"model_change",{head},"provider":"mp{i}","modelId":"mm{i}"}}"#)
            }
            76..=83 if compactions => {
                let kept = match lcg(&mut x) % 6 {
                    0 => "\"missing\"".to_owned(),
                    1 => "7".to_owned(),
                    2 => format!("\"{}\"", any(&mut x)),
                    _ => format!("\"{}\"", back(&mut x, 12)),
                };
                format!(
                    r#"{{"type":"compaction",{head},"summary":"c{i}","firstKeptEntryId":{kept},"tokensBefore":{i}}}"#
                )
            }
            84..=87 => {
                let target = back(&mut x, 8);
                let replacement = if lcg(&mut x).is_multiple_of(3) {
                    "null".to_owned()
                } else {
                    format!(r#"{{"content":"edited {i}"}}"#)
                };
                format!(
                    r#"{{"type":"context_edit",{head},"targetId":"{target}","replacement":{replacement}}}"#
                )
            }
            88..=90 => format!(
                r#"{{"type":"custom_message",{head},"customType":"k","content":"cm{i}","display":true}}"#
            ),
            91..=92 => format!(
                r#"{{"type":"branch_summary",{head},"fromId":"{}","summary":"b{i}"}}"#,
                any(&mut x)
            ),
            _ => format!(r#"{{"type":"custom",{head},"customType":"k","data":{{"i":{i}}}}}"#),
        };
        out.push(Entry::from_json(&text).unwrap_or_else(|e| panic!("{text}: {e}")));
        ids.push(id);
    }
    out
}

/// The answer of the rules as first written: the whole path parsed.
fn reference_answers<S: SessionStorage>(
    st: &S,
    leaf: &str,
) -> (
    std::result::Result<String, String>,
    std::result::Result<String, String>,
) {
    let path: Vec<(Entry, JsValue)> = crate::storage::whole_path(st, leaf)
        .unwrap()
        .into_iter()
        .map(|e| {
            let v = JsValue::parse(e.json()).unwrap();
            (e, v)
        })
        .collect();
    let projection = super::context::reference::projection(&path)
        .map(|p| p.to_json_text())
        .map_err(|e| e.to_string());
    let entries = super::context::reference::context_entries(&path)
        .map(|es| {
            es.iter()
                .map(|e| e.json().to_owned())
                .collect::<Vec<_>>()
                .join(",")
        })
        .map_err(|e| e.to_string());
    (projection, entries)
}

fn light_answers<S: SessionStorage>(
    app: &AppSession<S>,
) -> (
    std::result::Result<String, String>,
    std::result::Result<String, String>,
) {
    let projection = app
        .session_projection()
        .map(|p| p.to_json_text())
        .map_err(|e| e.to_string());
    let entries = app
        .context_entries()
        .map(|es| {
            es.iter()
                .map(|e| e.json().to_owned())
                .collect::<Vec<_>>()
                .join(",")
        })
        .map_err(|e| e.to_string());
    (projection, entries)
}

/// The context read from a light scan and the newest compaction on answers
/// exactly as the whole path parsed, on memory and SQLite (which reads the
/// scan from columns), at the last entry and at branches, before and after
/// appends (what an `AppSession` keeps between calls is let go).
#[test]
fn light_context_reads_answer_as_the_whole_path_parsed() {
    use crate::repo::{sqlite::SqliteRepo, CreateOptions, SessionRepo};
    let dir = tempfile::tempdir().unwrap();
    let archive =
        crate::backend::sqlite::Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed)
            .unwrap();
    let mut repo = SqliteRepo::new(archive);
    let (mut compared, mut errors) = (0, 0);
    for seed in 1..=16u64 {
        let entries = random_session(seed, 160);
        let memory = MemoryStorage::loaded(SessionMetadata::default(), entries.clone());
        let mut sqlite = repo
            .create(&CreateOptions {
                cwd: "/w".into(),
                ..Default::default()
            })
            .unwrap()
            .into_storage();
        sqlite.append_entries(&entries).unwrap();
        let mut x = seed * 7919;
        let leaves: Vec<String> = (0..6)
            .map(|k| {
                if k == 0 {
                    entries[entries.len() - 1].id().to_owned()
                } else {
                    entries[(lcg(&mut x) as usize) % entries.len()]
                        .id()
                        .to_owned()
                }
            })
            .collect();
        let mut apps = (
            AppSession::open(memory).unwrap(),
            AppSession::open(sqlite).unwrap(),
        );
        for leaf in &leaves {
            apps.0.branch_to(leaf).unwrap();
            apps.1.branch_to(leaf).unwrap();
            let want = reference_answers(apps.0.storage(), leaf);
            for _ in 0..2 {
                assert_eq!(
                    light_answers(&apps.0),
                    want,
                    "memory, seed {seed}, leaf {leaf}"
                );
                assert_eq!(
                    light_answers(&apps.1),
                    want,
                    "sqlite, seed {seed}, leaf {leaf}"
                );
            }
            compared += 1;
            errors += usize::from(want.0.is_err());
        }
        // An append moves the leaf and changes the path: nothing kept is stale.
        for app in [&mut apps.0 as &mut dyn AppendUser, &mut apps.1] {
            app.user_message();
        }
        // (Each side's append has its own id and time.)
        let leaf = apps.0.leaf_id().unwrap().to_owned();
        let want = reference_answers(apps.0.storage(), &leaf);
        assert_eq!(
            light_answers(&apps.0),
            want,
            "memory after an append, seed {seed}"
        );
        let leaf = apps.1.leaf_id().unwrap().to_owned();
        let want = reference_answers(apps.1.storage(), &leaf);
        assert_eq!(
            light_answers(&apps.1),
            want,
            "sqlite after an append, seed {seed}"
        );
    }
    assert!(
        compared >= 90 && errors > 0 && errors < compared,
        "{errors} of {compared}"
    );
}

/// An append through either backend's app session (the test's two sides).
trait AppendUser {
    fn user_message(&mut self);
}

impl<S: SessionStorage> AppendUser for AppSession<S> {
    fn user_message(&mut self) {
        let m = JsValue::parse(r#"{"role":"assistant","content":[],"provider":"after","model":"append","timestamp":1}"#)
            .unwrap();
        self.append_message(Some(m)).unwrap();
    }
}

/// Resume reads what the answer needs: on a 8,000-entry path (compactions every 1,000) whose newest
/// compaction is near the leaf, the entries parsed are the context's and a
/// few more (the compaction, the newest thinking and model entries), not
/// the path's; a second read parses nothing (kept for the leaf). Counted,
/// not timed, on memory and SQLite.
#[test]
fn resume_parses_the_context_not_the_path() {
    use crate::repo::{sqlite::SqliteRepo, CreateOptions, SessionRepo};
    let ts = "2026-01-01T00:00:00.000Z";
    let mut entries = vec![
        Entry::from_json(&format!(r#"{{"type":"thinking_level_change","id":"t","parentId":null,"timestamp":"{ts}","thinkingLevel":"high"}}"#)).unwrap(),
    ];
    for i in 0..8_000 {
        let p = if i == 0 {
            "t".to_owned()
        } else {
            format!("e{}", i - 1)
        };
        let text = if i % 1000 == 999 {
            format!(
                r#"{{"type":"compaction","id":"e{i}","parentId":"{p}","timestamp":"{ts}","summary":"s","firstKeptEntryId":"e{}","tokensBefore":1}}"#,
                i - 30
            )
        } else if i % 2 == 0 {
            format!(
                r#"{{"type":"message","id":"e{i}","parentId":"{p}","timestamp":"{ts}","message":{{"role":"user","content":"m{i}","timestamp":1}}}}"#
            )
        } else {
            // Tool calls only: nothing for search, so no role beside the text.
            format!(
                r#"{{"type":"message","id":"e{i}","parentId":"{p}","timestamp":"{ts}","message":{{"role":"assistant","content":[{{"type":"toolCall","id":"c","name":"x","arguments":{{}}}}],"provider":"p","model":"m{i}","timestamp":1}}}}"#
            )
        };
        entries.push(Entry::from_json(&text).unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let archive =
        crate::backend::sqlite::Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed)
            .unwrap();
    let mut sqlite = SqliteRepo::new(archive)
        .create(&CreateOptions {
            cwd: "/w".into(),
            ..Default::default()
        })
        .unwrap()
        .into_storage();
    sqlite.append_entries(&entries).unwrap();
    let memory = MemoryStorage::loaded(SessionMetadata::default(), entries);
    fn check<S: SessionStorage>(app: AppSession<S>, side: &str) {
        let ctx = app.session_context().unwrap();
        // The compaction at e7999 keeps from e7969: its summary and 30 entries.
        assert_eq!(ctx.messages.len(), 1 + 30, "{side}");
        assert_eq!(ctx.thinking_level, Some(JsValue::str("high")), "{side}");
        assert_eq!(
            ctx.model.get("modelId"),
            Some(&JsValue::str("m7997")),
            "{side}"
        );
        let parsed = app.parsed_entries();
        assert!(
            parsed <= ctx.messages.len() + 4,
            "{side}: {parsed} entries parsed"
        );
        app.session_context().unwrap();
        assert_eq!(
            app.parsed_entries(),
            parsed,
            "{side}: the second read is kept"
        );
    }
    check(AppSession::open(memory).unwrap(), "memory");
    check(AppSession::open(sqlite).unwrap(), "sqlite");
}

/// A resume on SQLite reads the context's rows, not the path's: a
/// 6,000-entry path whose thinking level and first model are set at its
/// root, a compaction near the leaf, and a side branch (appended last) with
/// newer changes that are not on the path. Counts the rows the store
/// returns; the whole-path scan this replaces returned one per path entry.
#[test]
fn resume_reads_the_context_rows_not_the_path() {
    use crate::repo::{sqlite::SqliteRepo, CreateOptions, SessionRepo};
    let ts = "2026-01-01T00:00:00.000Z";
    let line = |text: String| Entry::from_json(&text).unwrap();
    let mut entries = vec![
        line(format!(
            r#"{{"type":"thinking_level_change","id":"t","parentId":null,"timestamp":"{ts}","thinkingLevel":"high"}}"#
        )),
        line(format!(
            r#"{{"type":"model_change","id":"m","parentId":"t","timestamp":"{ts}","provider":"p","modelId":"first"}}"#
        )),
    ];
    let n = 6_000;
    for i in 0..n {
        let p = if i == 0 {
            "m".to_owned()
        } else {
            format!("e{}", i - 1)
        };
        let text = if i == n - 10 {
            format!(
                r#"{{"type":"compaction","id":"e{i}","parentId":"{p}","timestamp":"{ts}","summary":"s","firstKeptEntryId":"e{}","tokensBefore":1}}"#,
                i - 10
            )
        } else if i % 2 == 0 {
            format!(
                r#"{{"type":"message","id":"e{i}","parentId":"{p}","timestamp":"{ts}","message":{{"role":"user","content":"m{i}","timestamp":1}}}}"#
            )
        } else {
            format!(
                r#"{{"type":"message","id":"e{i}","parentId":"{p}","timestamp":"{ts}","message":{{"role":"assistant","content":[{{"type":"text","text":"a{i}"}}],"provider":"p","model":"m{i}","timestamp":1}}}}"#
            )
        };
        entries.push(line(text));
    }
    entries.push(line(format!(r#"{{"type":"thinking_level_change","id":"x1","parentId":"e3000","timestamp":"{ts}","thinkingLevel":"low"}}"#)));
    entries.push(line(format!(r#"{{"type":"model_change","id":"x2","parentId":"x1","timestamp":"{ts}","provider":"q","modelId":"side"}}"#)));
    // A second branch: a compaction keeping nothing, then a user message.
    entries.push(line(format!(r#"{{"type":"compaction","id":"c2","parentId":"e4000","timestamp":"{ts}","summary":"s2","firstKeptEntryId":"gone","tokensBefore":1}}"#)));
    entries.push(line(format!(r#"{{"type":"message","id":"u2","parentId":"c2","timestamp":"{ts}","message":{{"role":"user","content":"u2","timestamp":1}}}}"#)));
    let dir = tempfile::tempdir().unwrap();
    let archive =
        crate::backend::sqlite::Archive::open(dir.path().join("a.db"), crate::Durability::Relaxed)
            .unwrap();
    let mut sqlite = SqliteRepo::new(archive)
        .create(&CreateOptions {
            cwd: "/w".into(),
            ..Default::default()
        })
        .unwrap()
        .into_storage();
    sqlite.append_entries(&entries).unwrap();
    let mut app = AppSession::open(sqlite).unwrap();
    let leaf = format!("e{}", n - 1);
    app.branch_to(&leaf).unwrap();
    let before = app.storage().path_rows_read();
    let ctx = app.session_context().unwrap();
    let rows = app.storage().path_rows_read() - before;
    // The summary and the 19 entries from e5980 (the compaction speaks once).
    assert_eq!(ctx.messages.len(), 1 + 19);
    assert_eq!(ctx.thinking_level, Some(JsValue::str("high")));
    assert_eq!(ctx.model.get("modelId"), Some(&JsValue::str("m5999")));
    assert!(rows <= 40, "{rows} rows read for a 20-entry context");
    let want = reference_answers(app.storage(), &leaf);
    assert_eq!(light_answers(&app), want);
    // Without an assistant message in the context, the model is read back
    // to the nearest one before it, not to the root.
    let leaf = "u2".to_owned();
    app.branch_to(&leaf).unwrap();
    let before = app.storage().path_rows_read();
    let ctx = app.session_context().unwrap();
    let rows = app.storage().path_rows_read() - before;
    assert_eq!(ctx.messages.len(), 2);
    assert_eq!(ctx.model.get("modelId"), Some(&JsValue::str("m3999")));
    assert!(rows <= 40, "{rows} rows read");
    assert_eq!(light_answers(&app), reference_answers(app.storage(), &leaf));
}
