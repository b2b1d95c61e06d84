//! How each backend is set up for the conformance cases: a fresh empty
//! session, and a way to close and reopen it.

use sessiontree::backend::jsonl::{Header, JsonlStorage};
use sessiontree::backend::memory::MemoryStorage;
use sessiontree::backend::postgres::PgStorage;
use sessiontree::backend::sqlite::{Archive, NewSession, SqliteStorage};
use sessiontree::{Durability, Entry, Session, SessionStorage};
use tempfile::TempDir;

#[path = "pg.rs"]
#[allow(dead_code)] // each test binary uses its part
pub mod pg;

/// A backend under test.
pub trait Harness {
    /// Its storage.
    type S: SessionStorage;
    /// A fresh, empty session.
    fn fresh(&mut self) -> Self::S;
    /// Closes `s` and opens the same session again (identity where nothing persists).
    fn reopen(&mut self, s: Self::S) -> Self::S;
    /// Whether a duplicate entry id is refused (SQLite) rather than shadowing (pi).
    const REFUSES_DUPLICATE_IDS: bool;
}

/// The in-memory backend.
pub struct Memory;

impl Harness for Memory {
    type S = MemoryStorage;
    fn fresh(&mut self) -> MemoryStorage {
        MemoryStorage::new()
    }
    fn reopen(&mut self, s: MemoryStorage) -> MemoryStorage {
        s
    }
    const REFUSES_DUPLICATE_IDS: bool = false;
}

/// The JSONL backend, in a temp directory.
pub struct Jsonl {
    dir: TempDir,
    n: usize,
}

impl Jsonl {
    pub fn new() -> Self {
        Jsonl {
            dir: tempfile::tempdir().expect("temp dir"),
            n: 0,
        }
    }
}

impl Harness for Jsonl {
    type S = JsonlStorage;
    fn fresh(&mut self) -> JsonlStorage {
        self.n += 1;
        let path = self.dir.path().join(format!("s{}.jsonl", self.n));
        let header = Header::new(
            &format!("session-{}", self.n),
            "2025-01-01T00:00:00.000Z",
            "/work",
            None,
            None,
        );
        JsonlStorage::create(path, header, Durability::Relaxed).expect("create session file")
    }
    fn reopen(&mut self, s: JsonlStorage) -> JsonlStorage {
        let path = s.path().to_owned();
        drop(s);
        JsonlStorage::open(path, Durability::Relaxed).expect("reopen session file")
    }
    const REFUSES_DUPLICATE_IDS: bool = false;
}

/// The SQLite backend, one archive per harness.
pub struct Sqlite {
    _dir: TempDir,
    archive: Archive,
    n: usize,
}

impl Sqlite {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let archive = Archive::open(dir.path().join("archive.db"), Durability::Relaxed)
            .expect("open archive");
        Sqlite {
            _dir: dir,
            archive,
            n: 0,
        }
    }
}

impl Harness for Sqlite {
    type S = SqliteStorage;
    fn fresh(&mut self) -> SqliteStorage {
        self.n += 1;
        let id = format!("session-{}", self.n);
        self.archive
            .create_session(&NewSession::sdk(&id, "2025-01-01T00:00:00.000Z", "/work"))
            .expect("create session")
    }
    fn reopen(&mut self, s: SqliteStorage) -> SqliteStorage {
        let id = s.id().to_owned();
        let path = self.archive.path().to_owned();
        drop(s);
        self.archive = Archive::open(path, Durability::Relaxed).expect("reopen archive");
        let problems = self.archive.check_consistency(Some(&id)).expect("check");
        assert!(
            problems.is_empty(),
            "branch cache differs from its rebuild: {problems:?}"
        );
        self.archive.open_session(&id).expect("reopen session")
    }
    const REFUSES_DUPLICATE_IDS: bool = true;
}

/// The PostgreSQL backend, one schema of the test server per harness.
pub struct Postgres {
    temp: pg::TempArchive,
    n: usize,
}

impl Postgres {
    /// A fresh archive, or `None` (the tests skip) without a server.
    pub fn new() -> Option<Self> {
        Some(Postgres {
            temp: pg::TempArchive::new()?,
            n: 0,
        })
    }
}

impl Harness for Postgres {
    type S = PgStorage;
    fn fresh(&mut self) -> PgStorage {
        self.n += 1;
        let id = format!("session-{}", self.n);
        self.temp
            .archive
            .create_session(&NewSession::sdk(&id, "2025-01-01T00:00:00.000Z", "/work"))
            .expect("create session")
    }
    fn reopen(&mut self, s: PgStorage) -> PgStorage {
        let id = s.id().to_owned();
        drop(s);
        self.temp.archive = self.temp.reopen();
        self.temp.archive.open_session(&id).expect("reopen session")
    }
    const REFUSES_DUPLICATE_IDS: bool = true;
}

/// Everything observable about a session, for comparing two of them.
pub fn snapshot<S: SessionStorage>(s: &S) -> Result<String, Box<dyn std::error::Error>> {
    snapshot_from(s, 0)
}

/// Like [`snapshot`], but with the paths and labels of the entries from the
/// `from`-th on only (the log, leaf, name, stats and context in full): cheaper
/// for a long log, where a step can change little else.
pub fn snapshot_from<S: SessionStorage>(
    s: &S,
    from: usize,
) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    let log = s.entries(0, None)?;
    for (i, e) in log.iter().enumerate() {
        out.push_str(e.json());
        out.push('\n');
        if i < from {
            continue;
        }
        let path = s
            .path_to_root_or_compaction(Some(e.id()))
            .map(|p| p.iter().map(Entry::id).collect::<Vec<_>>().join(","))
            .map_err(|e| e.code());
        out.push_str(&format!("path {path:?} label {:?}\n", s.label(e.id())?));
    }
    out.push_str(&format!(
        "leaf {:?} name {:?} stats {:?}\n",
        s.leaf_id().map_err(|e| e.code()),
        s.session_name()?,
        s.session_stats()
            .map(|st| st.to_json().to_string())
            .map_err(|e| e.code())
    ));
    let ctx = Session::new(SnapshotRef(s))
        .build_context(None)
        .map(|c| c.to_json_text())
        .map_err(|e| e.code());
    out.push_str(&format!("context {ctx:?}\n"));
    Ok(out)
}

/// Lets a borrowed storage serve a read-only `Session`.
struct SnapshotRef<'a, S>(&'a S);

impl<S: SessionStorage> SessionStorage for SnapshotRef<'_, S> {
    fn metadata(&self) -> sessiontree::Result<sessiontree::SessionMetadata> {
        self.0.metadata()
    }
    fn stored_leaf_id(&self) -> sessiontree::Result<Option<String>> {
        self.0.stored_leaf_id()
    }
    fn append_entry(&mut self, _: Entry) -> sessiontree::Result<()> {
        Err(sessiontree::Error::Unknown("read-only".into()))
    }
    fn entry(&self, id: &str) -> sessiontree::Result<Option<Entry>> {
        self.0.entry(id)
    }
    fn find_entries(&self, t: &str) -> sessiontree::Result<Vec<Entry>> {
        self.0.find_entries(t)
    }
    fn label(&self, id: &str) -> sessiontree::Result<Option<sessiontree::json::JsString>> {
        self.0.label(id)
    }
    fn session_name(&self) -> sessiontree::Result<Option<sessiontree::json::JsString>> {
        self.0.session_name()
    }
    fn session_stats(&self) -> sessiontree::Result<sessiontree::rules::SessionStats> {
        self.0.session_stats()
    }
    fn entries(&self, after: usize, limit: Option<usize>) -> sessiontree::Result<Vec<Entry>> {
        self.0.entries(after, limit)
    }
    fn entry_count(&self) -> sessiontree::Result<usize> {
        self.0.entry_count()
    }
    fn path_to_root_or_compaction(&self, id: Option<&str>) -> sessiontree::Result<Vec<Entry>> {
        self.0.path_to_root_or_compaction(id)
    }
}
