//! The measured operations, shared by the criterion benches
//! (`benches/storage.rs`) and the report (`sessiontree-bench report`), so both
//! measure exactly the same operations on the same data.
//!
//! # Data sets
//! [`prepare`] generates a workload with [`crate::gen`] and loads it
//! into every store once: the pi JSONL files themselves, an SQLite archive
//! (imported with [`import_jsonl`]), and a naive database holding both naive
//! SQL designs ([`naive`]). Prepared sets are cached under the work directory,
//! keyed by shape, size, seed and [`CACHE_VERSION`]; operations that write
//! run on scratch copies, so the cached sets never change.
//!
//! # Backends
//! `sqlite` (the library's archive with its branch cache), `jsonl` (the
//! library's pi-compatible files), `memory` (the library's in-memory backend:
//! everything already loaded, the lower bound for reads), `sql-cte` and
//! `sql-pathcopy` (the naive designs, implemented here and nowhere else).
use crate::gen::{
    generate, message_entry, GenOptions, GeneratedSession, SessionIds, Shape, SplitMix64,
    GENERATOR_VERSION,
};
use crate::naive::Naive;
use serde_json::{json, Value};
use sessiontree::backend::jsonl::{JsonlStorage, TornTail};
use sessiontree::backend::memory::MemoryStorage;
use sessiontree::backend::sqlite::{Archive, ListQuery, SqliteStorage};
use sessiontree::context::{build_context, ContextOptions};
use sessiontree::convert::{import_jsonl, import_jsonl_files};
use sessiontree::entry::now_timestamp;
use sessiontree::repo::jsonl::JsonlRepo;
use sessiontree::repo::SessionRepo;
use sessiontree::search::searchable_text;
use sessiontree::{Durability, Entry, Error, Result, Session, SessionStorage};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bumped when a prepared data set would differ (besides the generator's own version).
pub const CACHE_VERSION: u32 = 3;

/// The word searched for (see [`sessiontree::gen::SEARCH_TERMS`]).
pub const SEARCH_TERM: &str = "tokenizer";

/// Sessions per page when listing.
pub const PAGE: usize = 50;

/// The stores compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The library's SQLite archive.
    Sqlite,
    /// The library's JSONL files.
    Jsonl,
    /// The library's in-memory backend.
    Memory,
    /// Naive SQL: recursive-CTE parent walk.
    SqlCte,
    /// Naive SQL: pi-style path copy per branch.
    SqlPathCopy,
}

impl Backend {
    /// Every backend, in report order.
    pub const ALL: [Backend; 5] = [
        Backend::Sqlite,
        Backend::Jsonl,
        Backend::Memory,
        Backend::SqlCte,
        Backend::SqlPathCopy,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Jsonl => "jsonl",
            Backend::Memory => "memory",
            Backend::SqlCte => "sql-cte",
            Backend::SqlPathCopy => "sql-pathcopy",
        }
    }

    /// The backend of a name.
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// A prepared data set.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Its directory.
    pub dir: PathBuf,
    /// Shape.
    pub shape: Shape,
    /// Entries (all sessions).
    pub entries: usize,
    /// The pi files' root (pi's layout).
    pub files: PathBuf,
    /// The sessions, in creation order.
    pub sessions: Vec<GeneratedSession>,
    /// The SQLite archive holding every session.
    pub archive: PathBuf,
    /// The naive database holding every session (both naive designs).
    pub naive: PathBuf,
    /// Seconds the archive import took while preparing.
    pub archive_import_secs: f64,
}

impl Dataset {
    /// The largest session (the only one for `linear` and `forked`).
    pub fn main(&self) -> &GeneratedSession {
        self.sessions
            .iter()
            .max_by_key(|s| s.entries)
            .expect("a data set has sessions")
    }

    /// Bytes of pi JSONL in all.
    pub fn bytes(&self) -> u64 {
        self.sessions.iter().map(|s| s.bytes).sum()
    }
}

/// The directory name of a data set.
pub fn dataset_name(shape: Shape, entries: usize, seed: u64) -> String {
    format!(
        "{}-{entries}-seed{seed}-g{GENERATOR_VERSION}c{CACHE_VERSION}",
        shape.as_str()
    )
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |e| Error::io(context, e)
}

fn session_json(s: &GeneratedSession) -> Value {
    json!({
        "path": s.path.to_string_lossy(), "id": s.id, "cwd": s.cwd, "created_at": s.created_at,
        "seed": s.seed, "entries": s.entries, "bytes": s.bytes, "forks": s.forks,
        "compactions": s.compactions, "leaf_id": s.leaf_id, "leaf_depth": s.leaf_depth,
        "max_depth": s.max_depth,
    })
}

fn session_from_json(v: &Value) -> Option<GeneratedSession> {
    Some(GeneratedSession {
        path: PathBuf::from(v["path"].as_str()?),
        id: v["id"].as_str()?.to_owned(),
        cwd: v["cwd"].as_str()?.to_owned(),
        created_at: v["created_at"].as_str()?.to_owned(),
        seed: v["seed"].as_u64()?,
        entries: v["entries"].as_u64()? as usize,
        bytes: v["bytes"].as_u64()?,
        forks: v["forks"].as_u64()? as usize,
        compactions: v["compactions"].as_u64()? as usize,
        leaf_id: v["leaf_id"].as_str().map(str::to_owned),
        leaf_depth: v["leaf_depth"].as_u64()? as usize,
        max_depth: v["max_depth"].as_u64()? as usize,
    })
}

/// Generates (or reuses) a data set under `work` and loads it into every store.
pub fn prepare(
    work: &Path,
    shape: Shape,
    entries: usize,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Dataset> {
    prepare_stores(work, shape, entries, seed, true, 500, progress)
}

/// Generates (or reuses) a data set without compactions, loaded into every
/// store: its active path is the whole session (the long path reads and the
/// 10,000-message contexts of the report).
pub fn prepare_uncompacted(
    work: &Path,
    shape: Shape,
    entries: usize,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Dataset> {
    prepare_stores(work, shape, entries, seed, true, 0, progress)
}

/// Generates (or reuses) a data set with the SQLite archive only: for shapes
/// the naive path-copy design cannot hold (it copies a path per branch, so a
/// fork at the tip every few entries makes it quadratic).
pub fn prepare_archive_only(
    work: &Path,
    shape: Shape,
    entries: usize,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<Dataset> {
    prepare_stores(work, shape, entries, seed, false, 500, progress)
}

fn prepare_stores(
    work: &Path,
    shape: Shape,
    entries: usize,
    seed: u64,
    with_naive: bool,
    compaction_every: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Dataset> {
    let mut name = dataset_name(shape, entries, seed);
    if !with_naive {
        name.push_str("-archive-only");
    }
    if compaction_every == 0 {
        name.push_str("-uncompacted");
    }
    let dir = work.join(name);
    let manifest = dir.join("manifest.json");
    let files = dir.join("files");
    let archive = dir.join("archive.db");
    let naive_db = dir.join("naive.db");
    if let Ok(ds) = load(&dir) {
        if ds.shape == shape && ds.entries == entries {
            return Ok(ds);
        }
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io(format!("clearing {}", dir.display())))?;
    }
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    progress(&format!(
        "generating {} ({entries} entries)",
        shape.as_str()
    ));
    let report = generate(
        &files,
        &GenOptions {
            shape,
            entries,
            seed,
            compaction_every,
            ..GenOptions::default()
        },
    )?;
    progress(&format!(
        "importing {} ({:.1} MB) into the SQLite archive",
        shape.as_str(),
        report.total_bytes() as f64 / 1e6
    ));
    let started = Instant::now();
    {
        let a = Archive::open(&archive, Durability::Relaxed)?;
        let files: Vec<_> = report.sessions.iter().map(|s| s.path.clone()).collect();
        sessiontree::convert::train_dictionary_for(&a, &files)?;
        for s in &report.sessions {
            import_jsonl(&a, &s.path)?;
        }
    }
    let archive_import_secs = started.elapsed().as_secs_f64();
    if with_naive {
        progress(&format!(
            "importing {} into the naive database",
            shape.as_str()
        ));
        let mut n = Naive::open(&naive_db, false)?;
        for s in &report.sessions {
            n.import_file(&s.path, true)?;
        }
        n.conn
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(|e| Error::sqlite("checkpointing", e))?;
    }
    checkpoint_archive(&archive)?;
    let v = json!({
        "shape": shape.as_str(), "entries": entries, "seed": seed, "naive": with_naive,
        "generator_version": GENERATOR_VERSION, "cache_version": CACHE_VERSION,
        "archive_import_secs": archive_import_secs,
        "sessions": report.sessions.iter().map(session_json).collect::<Vec<_>>(),
    });
    std::fs::write(&manifest, v.to_string())
        .map_err(io(format!("writing {}", manifest.display())))?;
    Ok(Dataset {
        dir,
        shape,
        entries,
        files,
        sessions: report.sessions,
        archive,
        naive: naive_db,
        archive_import_secs,
    })
}

/// A data set prepared earlier (its `manifest.json`), if all its files are there.
pub fn load(dir: &Path) -> Result<Dataset> {
    let manifest = dir.join("manifest.json");
    let bad = || Error::Unknown(format!("{} is not a prepared data set", dir.display()));
    let text = std::fs::read_to_string(&manifest)
        .map_err(io(format!("reading {}", manifest.display())))?;
    let v: Value = serde_json::from_str(&text).map_err(|_| bad())?;
    let sessions: Vec<GeneratedSession> = v["sessions"]
        .as_array()
        .and_then(|a| a.iter().map(session_from_json).collect::<Option<Vec<_>>>())
        .ok_or_else(bad)?;
    let shape = Shape::ALL
        .into_iter()
        .find(|s| v["shape"].as_str() == Some(s.as_str()))
        .ok_or_else(bad)?;
    let archive = dir.join("archive.db");
    let naive = dir.join("naive.db");
    let wants_naive = v["naive"].as_bool().unwrap_or(true);
    if sessions.is_empty()
        || !sessions.iter().all(|s| s.path.is_file())
        || !archive.is_file()
        || (wants_naive && !naive.is_file())
        || !of_this_schema(&archive)
    {
        return Err(bad());
    }
    Ok(Dataset {
        dir: dir.to_owned(),
        shape,
        entries: v["entries"].as_u64().ok_or_else(bad)? as usize,
        files: dir.join("files"),
        sessions,
        archive,
        naive,
        archive_import_secs: v["archive_import_secs"].as_f64().unwrap_or(0.0),
    })
}

/// Whether `archive` was written at this build's schema version: an older
/// one would be migrated by the first measurement that opens it (timed, and
/// laid out as a migration leaves it rather than as an import writes it).
fn of_this_schema(archive: &Path) -> bool {
    rusqlite::Connection::open_with_flags(archive, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| c.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)))
        .is_ok_and(|v| v == sessiontree::backend::sqlite::latest_version())
}

/// Folds the archive's WAL into the main file, so copying the file copies the data.
fn checkpoint_archive(path: &Path) -> Result<()> {
    let conn = rusqlite::Connection::open(path).map_err(|e| Error::sqlite("checkpointing", e))?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .map_err(|e| Error::sqlite("checkpointing", e))
}

/// Removes an SQLite file and its WAL and shared-memory files.
pub fn remove_db(path: &Path) {
    let _ = std::fs::remove_file(path);
    for ext in ["-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(ext);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

/// A fresh scratch directory `work/scratch/<tag>`.
pub fn scratch(work: &Path, tag: &str) -> Result<PathBuf> {
    let dir = work.join("scratch").join(tag);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io(format!("clearing {}", dir.display())))?;
    }
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    Ok(dir)
}

fn copy(src: &Path, dst: &Path) -> Result<()> {
    std::fs::copy(src, dst).map_err(io(format!("copying {}", src.display())))?;
    Ok(())
}

fn parse_line(line: &str) -> Result<Entry> {
    Entry::from_stored_line(line)
        .map_err(|p| Error::InvalidEntry(format!("generated entry is invalid: {}", p.reason())))
}

/// Loads a session file fully into the in-memory backend.
pub fn load_memory(path: &Path) -> Result<MemoryStorage> {
    let j = JsonlStorage::open(path, Durability::Relaxed)?;
    MemoryStorage::with_entries(j.metadata()?, j.all_entries().to_vec())
}

// ---------------------------------------------------------------------------
// Cold resume: open the store, find the leaf, read its path, build the context.

/// Opens the store afresh and builds the context of the current leaf, as an
/// agent resuming a session does. Returns the number of context messages.
/// `memory` has nothing to open: it builds the context of an already loaded
/// `MemoryStorage` (pass it in), the floor for every backend.
pub fn resume(backend: Backend, ds: &Dataset, memory: Option<&MemoryStorage>) -> Result<usize> {
    let main = ds.main();
    match backend {
        Backend::Sqlite => {
            let archive = Archive::open(&ds.archive, Durability::Full)?;
            let s = Session::new(archive.open_session(&main.id)?);
            Ok(s.build_context(None)?.messages.len())
        }
        Backend::Jsonl => {
            let s = Session::new(JsonlStorage::open(&main.path, Durability::Full)?);
            Ok(s.build_context(None)?.messages.len())
        }
        Backend::Memory => {
            let m = memory.ok_or_else(|| Error::Unknown("memory resume needs a store".into()))?;
            let leaf = m.leaf_id()?;
            let path = m.path_to_root_or_compaction(leaf.as_deref())?;
            Ok(build_context(&path, &ContextOptions::default())?
                .messages
                .len())
        }
        Backend::SqlCte => {
            let n = Naive::open(&ds.naive, true)?;
            let key = n.session_key(&main.id)?;
            let leaf = n.leaf(key)?;
            let path = match leaf {
                Some(l) => n.cte_path(key, &l)?,
                None => Vec::new(),
            };
            Ok(build_context(&path, &ContextOptions::default())?
                .messages
                .len())
        }
        Backend::SqlPathCopy => {
            let n = Naive::open(&ds.naive, true)?;
            let key = n.session_key(&main.id)?;
            let path = n.branch(key)?;
            Ok(build_context(&path, &ContextOptions::default())?
                .messages
                .len())
        }
    }
}

// ---------------------------------------------------------------------------
// Path from a random entry.

/// The library's path query without building entries (text only), for a
/// diagnostic row that separates its SQL cost from the per-entry wrapping:
/// the library's own statements, reached through its hidden hook.
/// Returns the rows read.
pub fn branch_cache_sql_only(
    conn: &rusqlite::Connection,
    session_key: i64,
    id: &str,
) -> Result<usize> {
    let mut cost = sessiontree::backend::sqlite::ReadCost::default();
    sessiontree::backend::sqlite::internals::path_rows_sql_only(conn, session_key, id, &mut cost)
}

/// Every store of one data set open for reading, with sample start entries.
pub struct PathFixture {
    raw_archive: rusqlite::Connection,
    raw_session_key: i64,
    sqlite: SqliteStorage,
    jsonl: JsonlStorage,
    memory: MemoryStorage,
    naive: Naive,
    session_key: i64,
    /// The start entries, drawn uniformly from the whole log.
    pub ids: Vec<String>,
    /// Entries each path holds (what the floor reads for it).
    pub lengths: Vec<usize>,
    floor_starts: Vec<i64>,
}

impl PathFixture {
    /// Opens the stores and draws `samples` start entries from `seed`.
    pub fn new(ds: &Dataset, samples: usize, seed: u64) -> Result<PathFixture> {
        let main = ds.main();
        let jsonl = JsonlStorage::open(&main.path, Durability::Full)?;
        let memory = MemoryStorage::with_entries(jsonl.metadata()?, jsonl.all_entries().to_vec())?;
        let naive = Naive::open(&ds.naive, true)?;
        let session_key = naive.session_key(&main.id)?;
        let raw_archive = rusqlite::Connection::open_with_flags(
            &ds.archive,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| Error::sqlite("opening the archive", e))?;
        raw_archive
            .pragma_update(None, "cache_size", -16_000)
            .map_err(|e| Error::sqlite("opening the archive", e))?;
        let raw_session_key: i64 = raw_archive
            .query_row(
                "SELECT session_key FROM sessions WHERE id = ?1",
                [&main.id],
                |r| r.get(0),
            )
            .map_err(|e| Error::sqlite("opening the archive", e))?;
        let SqlitePaths {
            sqlite,
            ids,
            lengths,
        } = SqlitePaths::new(ds, samples, seed)?;
        let mut rng = SplitMix64::new(seed ^ 0xf100_5eed);
        let (lo, hi) = naive.rowid_range(session_key)?;
        let floor_starts = lengths
            .iter()
            .map(|&len| {
                let room = (hi - lo + 2 - len as i64).max(1);
                lo + rng.below(room as u64) as i64
            })
            .collect();
        Ok(PathFixture {
            raw_archive,
            raw_session_key,
            sqlite,
            jsonl,
            memory,
            naive,
            session_key,
            ids,
            lengths,
            floor_starts,
        })
    }

    /// The path from sample `i` on `backend`; returns its length.
    /// (`sql-pathcopy` materializes only the active branch: a path from any
    /// other entry is the CTE walk, so it is not measured separately.)
    pub fn read(&self, backend: Backend, i: usize) -> Result<usize> {
        let id = &self.ids[i];
        Ok(match backend {
            Backend::Sqlite => self.sqlite.path_to_root_or_compaction(Some(id))?.len(),
            Backend::Jsonl => self.jsonl.path_to_root_or_compaction(Some(id))?.len(),
            Backend::Memory => self.memory.path_to_root_or_compaction(Some(id))?.len(),
            Backend::SqlCte | Backend::SqlPathCopy => {
                self.naive.cte_path(self.session_key, id)?.len()
            }
        })
    }

    /// The path from sample `i` through the SQLite handle with its kept paths
    /// forgotten first: the path query itself, its decoded-entry cache warm.
    pub fn read_query(&self, i: usize) -> Result<usize> {
        self.sqlite.forget_paths();
        self.read(Backend::Sqlite, i)
    }

    /// Diagnostic: the path from sample `i` as text only (no entry parse):
    /// `sqlite` runs the library's path SQL, `sql-cte` the CTE. Returns rows.
    pub fn read_sql_only(&self, backend: Backend, i: usize) -> Result<usize> {
        let id = &self.ids[i];
        match backend {
            Backend::Sqlite => branch_cache_sql_only(&self.raw_archive, self.raw_session_key, id),
            _ => self.naive.cte_path_text(self.session_key, id),
        }
    }

    /// All paths on `backend`, root-side first, as entry ids (to check that
    /// every backend returns the same entries).
    pub fn ids_of(&self, backend: Backend, i: usize) -> Result<Vec<String>> {
        let id = &self.ids[i];
        let path = match backend {
            Backend::Sqlite => self.sqlite.path_to_root_or_compaction(Some(id))?,
            Backend::Jsonl => self.jsonl.path_to_root_or_compaction(Some(id))?,
            Backend::Memory => self.memory.path_to_root_or_compaction(Some(id))?,
            Backend::SqlCte | Backend::SqlPathCopy => self.naive.cte_path(self.session_key, id)?,
        };
        Ok(path.iter().map(|e| e.id().to_owned()).collect())
    }

    /// The physical floor for sample `i`: a rowid range scan of as many rows
    /// as its path holds; `parse` also turns each row into an [`Entry`].
    pub fn floor(&self, i: usize, parse: bool) -> Result<usize> {
        self.naive
            .floor_scan(self.floor_starts[i], self.lengths[i] as i64, parse)
    }

    /// Mean path length over the samples.
    pub fn mean_length(&self) -> f64 {
        self.lengths.iter().sum::<usize>() as f64 / self.lengths.len().max(1) as f64
    }
}

/// The SQLite archive of a data set open for path reads from sample entries
/// (for data sets without the other stores).
pub struct SqlitePaths {
    sqlite: SqliteStorage,
    /// The start entries, drawn uniformly from the whole log.
    pub ids: Vec<String>,
    /// Entries each path holds.
    pub lengths: Vec<usize>,
}

impl SqlitePaths {
    /// Opens the archive and draws `samples` start entries from `seed`.
    pub fn new(ds: &Dataset, samples: usize, seed: u64) -> Result<SqlitePaths> {
        let main = ds.main();
        let sqlite = Archive::open(&ds.archive, Durability::Full)?.open_session(&main.id)?;
        let names = SessionIds::new(main.seed);
        let mut rng = SplitMix64::new(seed);
        let ids: Vec<String> = (0..samples)
            .map(|_| names.id(rng.below(main.entries as u64) as u32))
            .collect();
        let mut lengths = Vec::with_capacity(samples);
        for id in &ids {
            lengths.push(sqlite.path_to_root_or_compaction(Some(id))?.len());
        }
        Ok(SqlitePaths {
            sqlite,
            ids,
            lengths,
        })
    }

    /// The path from sample `i`; returns its length.
    pub fn read(&self, i: usize) -> Result<usize> {
        Ok(self
            .sqlite
            .path_to_root_or_compaction(Some(&self.ids[i]))?
            .len())
    }

    /// The path from sample `i` with the handle's kept paths forgotten
    /// first: the path query itself.
    pub fn read_query(&self, i: usize) -> Result<usize> {
        self.sqlite.forget_paths();
        self.read(i)
    }

    /// Mean path length over the samples.
    pub fn mean_length(&self) -> f64 {
        self.lengths.iter().sum::<usize>() as f64 / self.lengths.len().max(1) as f64
    }
}

/// Bytes an SQLite database holds (pages in use, its WAL included), and the
/// rows of its `segments` table.
pub fn archive_bytes(path: &Path) -> Result<(u64, u64)> {
    let conn = rusqlite::Connection::open(path).map_err(|e| Error::sqlite("measuring", e))?;
    let (pages, free, size, segments): (i64, i64, i64, i64) = conn
        .query_row(
            "SELECT (SELECT page_count FROM pragma_page_count), (SELECT freelist_count FROM pragma_freelist_count),
                    (SELECT page_size FROM pragma_page_size), (SELECT count(*) FROM segments)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .map_err(|e| Error::sqlite("measuring", e))?;
    Ok((((pages - free) * size) as u64, segments as u64))
}

// ---------------------------------------------------------------------------
// Writes: leaf moves and durable appends, on scratch copies.

enum Store {
    Sqlite(SqliteStorage),
    Jsonl(JsonlStorage),
    Memory(MemoryStorage),
    Naive(Naive, i64, bool),
}

/// One backend's copy of a data set's main session, open for writing.
pub struct WriteFixture {
    store: Store,
    leaf: Option<String>,
    counter: u64,
    /// Move targets (leaf moves cycle through them).
    pub targets: Vec<String>,
    next_target: usize,
}

impl WriteFixture {
    /// Copies the main session of `ds` into `dir` for `backend`, opened with
    /// `durability`, with leaf-move targets drawn from entries `lo..hi` (by
    /// position in the log; in a linear session position = depth).
    pub fn new(
        backend: Backend,
        ds: &Dataset,
        dir: &Path,
        durability: Durability,
        targets: (usize, usize),
        seed: u64,
    ) -> Result<WriteFixture> {
        let main = ds.main();
        let store = match backend {
            Backend::Sqlite => {
                let db = dir.join("archive.db");
                copy(&ds.archive, &db)?;
                let archive = Archive::open(&db, durability)?;
                let mut s = archive.open_session(&main.id)?;
                s.claim_writer()?;
                Store::Sqlite(s)
            }
            Backend::Jsonl | Backend::Memory => {
                let file = dir.join("session.jsonl");
                copy(&main.path, &file)?;
                let j = JsonlStorage::open(&file, durability)?;
                if backend == Backend::Memory {
                    Store::Memory(MemoryStorage::with_entries(
                        j.metadata()?,
                        j.all_entries().to_vec(),
                    )?)
                } else {
                    Store::Jsonl(j)
                }
            }
            Backend::SqlCte | Backend::SqlPathCopy => {
                let db = dir.join("naive.db");
                copy(&ds.naive, &db)?;
                let n = Naive::open(&db, durability == Durability::Full)?;
                let key = n.session_key(&main.id)?;
                Store::Naive(n, key, backend == Backend::SqlPathCopy)
            }
        };
        let names = SessionIds::new(main.seed);
        let mut rng = SplitMix64::new(seed);
        let (lo, hi) = (targets.0.min(main.entries - 1), targets.1.min(main.entries));
        let targets = (0..64)
            .map(|_| names.id(rng.range(lo, hi.max(lo + 1) - 1) as u32))
            .collect();
        let mut f = WriteFixture {
            store,
            leaf: None,
            counter: 0,
            targets,
            next_target: 0,
        };
        f.leaf = f.read_leaf()?;
        Ok(f)
    }

    fn read_leaf(&self) -> Result<Option<String>> {
        match &self.store {
            Store::Sqlite(s) => s.leaf_id(),
            Store::Jsonl(s) => s.leaf_id(),
            Store::Memory(s) => s.leaf_id(),
            Store::Naive(n, key, _) => n.leaf(*key),
        }
    }

    /// Moves the leaf to the next target (the contract's `moveTo` without a
    /// summary: check the target exists, append a `leaf` entry).
    pub fn move_leaf(&mut self) -> Result<()> {
        let target = self.targets[self.next_target % self.targets.len()].clone();
        self.next_target += 1;
        self.counter += 1;
        match &mut self.store {
            Store::Sqlite(s) => move_to(s, &target)?,
            Store::Jsonl(s) => move_to(s, &target)?,
            Store::Memory(s) => move_to(s, &target)?,
            Store::Naive(n, key, pathcopy) => {
                let id = format!("mv{:06x}", self.counter);
                n.move_leaf(*key, &target, &id, &now_timestamp(), *pathcopy)?;
            }
        }
        self.leaf = Some(target);
        Ok(())
    }

    /// Appends one realistic message entry (about 900 B) at the leaf, the way
    /// an agent that holds the session open does (it knows its leaf).
    pub fn append(&mut self) -> Result<()> {
        self.counter += 1;
        let id = format!("ap{:06x}", self.counter);
        let line = message_entry(
            self.counter,
            &id,
            self.leaf.as_deref(),
            1_760_000_000_000 + self.counter as i64,
        );
        let entry = parse_line(&line)?;
        match &mut self.store {
            Store::Sqlite(s) => s.append_entry(entry)?,
            Store::Jsonl(s) => s.append_entry(entry)?,
            Store::Memory(s) => s.append_entry(entry)?,
            Store::Naive(n, key, pathcopy) => n.append(*key, &entry, *pathcopy)?,
        }
        self.leaf = Some(id);
        Ok(())
    }
}

fn move_to<S: SessionStorage>(s: &mut S, target: &str) -> Result<()> {
    // Session::move_to, without taking the storage out of the fixture.
    if s.entry(target)?.is_none() {
        return Err(Error::EntryNotFound(target.to_owned()));
    }
    s.set_leaf_id(Some(target))
}

// ---------------------------------------------------------------------------
// Bulk import: a pi file into a fresh store.

/// Imports `file` into a fresh store of `backend` in `dir` (replacing the
/// previous one), as `sessiontree import FILE` does. `jsonl` has nothing to write: it opens (reads, parses and
/// indexes) the file. Returns the entries loaded.
pub fn import(backend: Backend, file: &Path, dir: &Path) -> Result<u64> {
    match backend {
        Backend::Sqlite => {
            let db = dir.join("import.db");
            remove_db(&db);
            import_file_into(&Archive::open(&db, Durability::Full)?, file)
        }
        Backend::Jsonl | Backend::Memory => {
            let j = JsonlStorage::open(file, Durability::Full)?;
            let _: Option<&TornTail> = j.torn_tail();
            Ok(j.all_entries().len() as u64)
        }
        Backend::SqlCte | Backend::SqlPathCopy => {
            let db = dir.join("import-naive.db");
            remove_db(&db);
            let mut n = Naive::open(&db, true)?;
            Ok(n.import_file(file, backend == Backend::SqlPathCopy)?.1)
        }
    }
}

/// Imports `file` into `archive` as `sessiontree import FILE` does (a file
/// of a few MB is written in one transaction, a bigger one staged; an
/// archive without a dictionary gets its first one from the file). Returns
/// the entries loaded.
pub fn import_file_into(archive: &Archive, file: &Path) -> Result<u64> {
    let imported = import_jsonl_files(archive, &[file.to_owned()], &mut |_, _| {})?
        .pop()
        .ok_or_else(|| Error::Unknown("one file, one result".into()))??;
    Ok(imported.entries)
}

/// Imports `files` into a fresh archive in `dir`: `grouped` as `sessiontree
/// import` does ([`import_jsonl_files`]: small files several to a
/// transaction, read while the last ones are written), else one at a time
/// with [`import_jsonl`] (a transaction and a sync each, as before groups).
/// Returns the entries loaded.
pub fn import_files(files: &[PathBuf], dir: &Path, grouped: bool) -> Result<u64> {
    let db = dir.join("import-files.db");
    remove_db(&db);
    let archive = Archive::open(&db, Durability::Full)?;
    let mut entries = 0;
    if grouped {
        for r in import_jsonl_files(&archive, files, &mut |_, _| {})? {
            entries += r?.entries;
        }
    } else {
        sessiontree::convert::train_dictionary_for(&archive, files)?;
        for f in files {
            entries += import_jsonl(&archive, f)?.entries;
        }
    }
    Ok(entries)
}

// ---------------------------------------------------------------------------
// Many sessions: list the first page, search.

/// An archive data set open in every store.
pub struct ArchiveFixture {
    archive: Archive,
    repo: JsonlRepo,
    memory: Vec<MemoryStorage>,
    naive: Naive,
}

impl ArchiveFixture {
    /// Opens the stores of an `archive` data set (loads every session into memory too).
    pub fn new(ds: &Dataset) -> Result<ArchiveFixture> {
        let mut memory = Vec::with_capacity(ds.sessions.len());
        for s in &ds.sessions {
            memory.push(load_memory(&s.path)?);
        }
        Ok(ArchiveFixture {
            archive: Archive::open(&ds.archive, Durability::Full)?,
            repo: JsonlRepo::new(&ds.files, Durability::Full),
            memory,
            naive: Naive::open(&ds.naive, true)?,
        })
    }

    /// The first page of sessions, newest first; returns the rows.
    /// sqlite/sql-cte include entry counts; jsonl reads every header (pi's
    /// listing) and sorts; memory sorts the loaded sessions' metadata.
    pub fn list(&self, backend: Backend) -> Result<usize> {
        Ok(match backend {
            Backend::Sqlite => self
                .archive
                .list(&ListQuery {
                    limit: Some(PAGE),
                    ..ListQuery::default()
                })?
                .len(),
            Backend::Jsonl => {
                let mut all = self.repo.list(None)?;
                all.sort_by(|a, b| b.created_at.cmp(&a.created_at));
                all.truncate(PAGE);
                all.len()
            }
            Backend::Memory => {
                let mut all: Vec<_> = self
                    .memory
                    .iter()
                    .map(|m| Ok((m.metadata()?, m.entry_count()?)))
                    .collect::<Result<_>>()?;
                all.sort_by(|a, b| b.0.created_at.cmp(&a.0.created_at));
                all.truncate(PAGE);
                all.len()
            }
            Backend::SqlCte | Backend::SqlPathCopy => self.naive.list_first_page(PAGE)?.len(),
        })
    }

    /// Every message mentioning `term` (all hits are found; the first 20 are
    /// returned). sqlite: the FTS5 index, best 20 by BM25. jsonl: open every
    /// file and scan its messages. memory: scan the loaded messages. sql-cte:
    /// a `LIKE` scan over the log. Returns the number of hits seen.
    pub fn search(&self, backend: Backend, term: &str) -> Result<usize> {
        let needle = term.to_lowercase();
        let scan = |entries: &[Entry], hits: &mut usize| {
            for e in entries {
                if let Some((_, text)) = searchable_text(e) {
                    if text.to_lowercase().contains(&needle) {
                        *hits += 1;
                    }
                }
            }
        };
        Ok(match backend {
            Backend::Sqlite => self.archive.search(term, None, None, None, 20)?.len(),
            Backend::Jsonl => {
                let mut hits = 0;
                for meta in self.repo.list(None)? {
                    let path = meta.path.as_deref().unwrap_or_default();
                    let j = JsonlStorage::open(path, Durability::Full)?;
                    scan(j.all_entries(), &mut hits);
                }
                hits
            }
            Backend::Memory => {
                let mut hits = 0;
                for m in &self.memory {
                    scan(&m.entries(0, None)?, &mut hits);
                }
                hits
            }
            Backend::SqlCte | Backend::SqlPathCopy => self.naive.search_like(term, 20)?.0,
        })
    }
}

/// The first `entries` key of `session` in `archive`: where a single-segment
/// session's rows start.
pub fn archive_first_key(archive: &Archive, session: &str) -> Result<i64> {
    archive
        .conn()?
        .query_row(
            "SELECT min(entry_key) FROM entries WHERE session_key = \
             (SELECT session_key FROM sessions WHERE id = ?1)",
            [session],
            |r| r.get(0),
        )
        .map_err(|e| Error::sqlite("scanning the archive", e))
}

/// The floor of reading `rows` entries from the archive itself: one rowid
/// range scan of the `entries` rows from `start`, each row's stored value
/// decoded to its text (decompressed, blobs spliced back) and handed to
/// `sink`. What a path read of a single-segment path cannot go below, given
/// compressed storage. Returns the rows read.
pub fn archive_floor_scan(
    archive: &Archive,
    start: i64,
    rows: i64,
    sink: &mut dyn FnMut(String) -> Result<()>,
) -> Result<usize> {
    let conn = archive.conn()?;
    let sql = |e| Error::sqlite("scanning the archive", e);
    let mut st = conn
        .prepare_cached(
            "SELECT json FROM entries WHERE entry_key >= ?1 ORDER BY entry_key LIMIT ?2",
        )
        .map_err(sql)?;
    let mut q = st.query(rusqlite::params![start, rows]).map_err(sql)?;
    let mut n = 0;
    while let Some(row) = q.next().map_err(sql)? {
        sink(
            archive
                .codec()
                .decode(&conn, row.get_ref(0).map_err(sql)?)?,
        )?;
        n += 1;
    }
    Ok(n)
}
