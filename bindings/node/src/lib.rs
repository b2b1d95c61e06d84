//! The Node.js addon behind the npm package `sessiontree`: a thin layer that
//! runs each request on libuv's thread pool (so every Promise is real and
//! the JS thread never waits on SQLite or the disk) and answers with JSON
//! text that `index.js` parses. Session calls go through
//! [`sessiontree::rpc::call`], the dispatch `sessiontree rpc` serves, so the
//! binding answers exactly as the rpc does. Errors reject with a message
//! that is a JSON object `{code, message}` (the contract's codes), which
//! `index.js` turns into pi's `SessionError`.
//!
//! pi 1.6's `SessionManager` is synchronous, so its calls
//! ([`NativeAppSession`]) run on the JS thread: each goes through
//! [`sessiontree::rpc::app::AppRpc::call`], the dispatch `sessiontree rpc
//! --contract app` serves, and throws the same `{code, message}`.

use napi::bindgen_prelude::{AsyncTask, ToNapiValue, TypeName};
use napi::{Env, Status, Task};
use napi_derive::napi;
use serde_json::{json, Value};
use sessiontree::app::AppSession;
use sessiontree::archive::{BoxedStorage, SessionArchive};
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::postgres::{is_postgres_url, PgArchive};
use sessiontree::backend::sqlite::{Archive, ListQuery, SearchFilter};
use sessiontree::convert::{self, ExportOutcome, ImportOutcome};
use sessiontree::listing::NewSession;
use sessiontree::repo::archive::ArchiveRepo;
use sessiontree::repo::{CreateOptions, ForkOptions, SessionRepo};
use sessiontree::rpc::app::AppRpc;
use sessiontree::rules::ForkPosition;
use sessiontree::{
    Contract, Durability, Entry, Error, JsonText, Result, Session, SessionMetadata, SessionStorage,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Work for the thread pool: a closure whose result becomes the Promise's value.
pub struct Job<T: ToNapiValue + TypeName + Send + 'static> {
    work: Option<Box<dyn FnOnce() -> Result<T> + Send>>,
}

/// Schedules `work` off the JS thread.
fn job<T: ToNapiValue + TypeName + Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> AsyncTask<Job<T>> {
    AsyncTask::new(Job {
        work: Some(Box::new(work)),
    })
}

/// The rejection for a contract error: its code and message as JSON, parsed by `index.js`.
fn rejection(e: &Error) -> napi::Error {
    napi::Error::new(
        Status::GenericFailure,
        json!({"code": e.code().as_str(), "message": e.to_string()}).to_string(),
    )
}

impl<T: ToNapiValue + TypeName + Send + 'static> Task for Job<T> {
    type Output = T;
    type JsValue = T;

    fn compute(&mut self) -> napi::Result<T> {
        let work = self
            .work
            .take()
            .ok_or_else(|| rejection(&Error::Unknown("a job ran twice".into())))?;
        work().map_err(|e| rejection(&e))
    }

    fn resolve(&mut self, _env: Env, output: T) -> napi::Result<T> {
        Ok(output)
    }
}

/// A durability named as the CLI names it (`full`, the default, or `relaxed`).
fn durability(name: Option<&str>) -> Result<Durability> {
    match name {
        None | Some("full") => Ok(Durability::Full),
        Some("relaxed") => Ok(Durability::Relaxed),
        Some(other) => Err(Error::Usage(format!(
            "durability must be \"full\" or \"relaxed\", not {other:?}"
        ))),
    }
}

/// Options given as JSON text by `index.js` (an object; `undefined` fields left out).
fn options(text: Option<&str>) -> Result<serde_json::Map<String, Value>> {
    match text.map(serde_json::from_str::<Value>) {
        None => Ok(serde_json::Map::new()),
        Some(Ok(Value::Object(m))) => Ok(m),
        Some(Ok(Value::Null)) => Ok(serde_json::Map::new()),
        Some(_) => Err(Error::Usage("options must be an object".into())),
    }
}

fn opt_str(o: &serde_json::Map<String, Value>, key: &str) -> Result<Option<String>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Error::Usage(format!("{key} must be a string"))),
    }
}

fn opt_usize(o: &serde_json::Map<String, Value>, key: &str) -> Result<Option<usize>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| Error::Usage(format!("{key} must be a non-negative integer"))),
    }
}

/// Application metadata given as an option: kept as the JSON object it is.
fn opt_metadata(o: &serde_json::Map<String, Value>) -> Result<Option<JsonText>> {
    match o.get("metadata") {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(JsonText::from(v.clone()))),
        Some(_) => Err(Error::Usage("metadata must be an object".into())),
    }
}

/// One open session: a storage behind the rpc dispatch, shared by the jobs
/// that read and write it. `None` once closed (which releases the writer claim).
type Shared = Arc<Mutex<Option<Session<Box<dyn SessionStorage + Send>>>>>;

/// A session opened for pi's `SessionStorage` calls (archive or JSONL file).
#[napi]
pub struct NativeSession {
    session: Shared,
    id: String,
}

impl NativeSession {
    fn new(storage: Box<dyn SessionStorage + Send>, id: String) -> Self {
        NativeSession {
            session: Arc::new(Mutex::new(Some(Session::new(storage)))),
            id,
        }
    }
}

/// Runs `f` on the open session, or fails with `storage` if it was closed.
fn with_session<T>(
    shared: &Shared,
    f: impl FnOnce(&mut Session<Box<dyn SessionStorage + Send>>) -> Result<T>,
) -> Result<T> {
    let mut guard = shared
        .lock()
        .map_err(|_| Error::Unknown("a previous call on this session panicked".into()))?;
    match guard.as_mut() {
        Some(session) => f(session),
        None => Err(Error::io(
            "the session storage was closed",
            std::io::Error::other("closed"),
        )),
    }
}

#[napi]
impl NativeSession {
    /// The session id.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// One pi method (`getLeafId`, `appendEntry`, …) with its parameters as
    /// a JSON object; resolves to the answer as JSON text.
    #[napi]
    pub fn call(&self, method: String, params: String) -> AsyncTask<Job<String>> {
        let shared = self.session.clone();
        job(move || with_session(&shared, |s| sessiontree::rpc::call(s, &method, &params)))
    }

    /// Closes the session: the writer claim (if taken) is released. Later calls fail.
    #[napi]
    pub fn close(&self) -> AsyncTask<Job<()>> {
        let shared = self.session.clone();
        job(move || {
            let closed = shared
                .lock()
                .map_err(|_| Error::Unknown("a previous call on this session panicked".into()))?
                .take();
            drop(closed);
            Ok(())
        })
    }
}

/// The error a synchronous call throws: the contract's code and message as
/// JSON, which `index.js` turns into pi's error.
fn thrown(e: &Error) -> napi::Error {
    rejection(e)
}

/// One archive session under the pi app's rules (pi-coding-agent 1.6's
/// `SessionManager`): the app dispatcher `sessiontree rpc --contract app`
/// serves, behind a mutex, called synchronously (pi's `SessionManager` is
/// synchronous). `None` once closed, which releases the writer claim.
#[napi]
pub struct NativeAppSession {
    rpc: Mutex<Option<AppRpc<BoxedStorage>>>,
    id: String,
}

impl NativeAppSession {
    /// Opens the app session over `storage` (its leaf is the last entry).
    fn open(storage: BoxedStorage, id: String) -> Result<Self> {
        let session = AppSession::open(storage)?;
        Ok(NativeAppSession {
            rpc: Mutex::new(Some(AppRpc::new(session, id.clone()))),
            id,
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Option<AppRpc<BoxedStorage>>>> {
        self.rpc
            .lock()
            .map_err(|_| Error::Unknown("a previous call on this session panicked".into()))
    }
}

#[napi]
impl NativeAppSession {
    /// The session id.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// One `SessionManager` method (pi's name) with its parameters as a
    /// JSON object; returns the answer as JSON text (`null` for pi's `undefined`).
    #[napi]
    pub fn call(&self, method: String, params: String) -> napi::Result<String> {
        let answer = self.lock().and_then(|mut guard| match guard.as_mut() {
            Some(rpc) => rpc.call(&method, &params),
            None => Err(Error::io(
                "the session manager was closed",
                std::io::Error::other("closed"),
            )),
        });
        answer.map_err(|e| thrown(&e))
    }

    /// Closes the session: the writer claim (if taken) is released. Later calls fail.
    #[napi]
    pub fn close(&self) -> napi::Result<()> {
        let closed = self.lock().map_err(|e| thrown(&e))?.take();
        drop(closed);
        Ok(())
    }
}

/// Opens a pi JSONL session file with the Rust JSONL backend.
#[napi]
pub fn open_jsonl(path: String, durability_name: Option<String>) -> AsyncTask<Job<NativeSession>> {
    job(move || {
        let storage = JsonlStorage::open(&path, durability(durability_name.as_deref())?)?;
        let id = storage.metadata()?.id;
        Ok(NativeSession::new(Box::new(storage), id))
    })
}

/// An open archive: an SQLite file or a team archive on PostgreSQL, held
/// as one [`SessionArchive`] as the CLI holds it.
#[napi]
pub struct NativeArchive {
    archive: Arc<dyn SessionArchive>,
    /// The SQLite file, for what only a local archive does (import); `None`
    /// for a team archive.
    local: Option<Archive>,
    /// The file's path or the team archive's URL.
    location: String,
}

impl NativeArchive {
    /// The local SQLite archive, or the refusal a team archive gets (as the
    /// CLI's: a team archive is filled by `sessiontree sync`).
    fn local(&self, what: &str) -> Result<Archive> {
        self.local.clone().ok_or_else(|| {
            Error::Usage(format!(
                "{what} works on a local SQLite archive only; to fill a team archive, use `sessiontree sync --to URL [PATH…]`"
            ))
        })
    }
}

/// Opens (creating if needed) the archive at `path`, or at the CLI's
/// default archive when `path` is absent; a `postgres://` URL opens a team
/// archive.
#[napi]
pub fn open_archive(
    path: Option<String>,
    durability_name: Option<String>,
) -> AsyncTask<Job<NativeArchive>> {
    job(move || {
        let durability = durability(durability_name.as_deref())?;
        if let Some(url) = path.as_deref().filter(|p| is_postgres_url(p)) {
            return Ok(NativeArchive {
                archive: Arc::new(PgArchive::open(url, durability)?),
                local: None,
                location: url.to_owned(),
            });
        }
        let path = path.map_or_else(sessiontree::layout::default_archive_path, PathBuf::from);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        let archive = Archive::open(&path, durability)?;
        Ok(NativeArchive {
            archive: Arc::new(archive.clone()),
            local: Some(archive),
            location: path.display().to_string(),
        })
    })
}

/// The pi file `id` was imported from that still exists (the import
/// records name canonical paths; a session pi copied has several, the one
/// imported furthest wins), or `None`.
fn source_file(archive: &Archive, id: &str) -> Result<Option<String>> {
    let failed = |e: &dyn std::fmt::Display| Error::Unknown(format!("reading import records: {e}"));
    let conn = archive.conn()?;
    let mut st = conn
        .prepare_cached(
            "SELECT i.source_path FROM imports i JOIN sessions s USING (session_key)
             WHERE s.id = ?1 ORDER BY i.bytes DESC",
        )
        .map_err(|e| failed(&e))?;
    let paths = st
        .query_map([id], |r| r.get::<_, String>(0))
        .and_then(Iterator::collect::<std::result::Result<Vec<String>, _>>)
        .map_err(|e| failed(&e))?;
    Ok(paths.into_iter().find(|p| Path::new(p).is_file()))
}

fn metadata_json(m: &SessionMetadata) -> Value {
    m.to_json()
}

#[napi]
impl NativeArchive {
    /// The archive file (or the team archive's URL).
    #[napi(getter)]
    pub fn path(&self) -> String {
        self.location.clone()
    }

    /// Opens one session for reading; its writer claim is taken at the first write.
    #[napi]
    pub fn open_session(&self, id: String) -> AsyncTask<Job<NativeSession>> {
        let archive = self.archive.clone();
        job(move || {
            let storage = archive.open_storage(&id)?;
            Ok(NativeSession::new(storage, id))
        })
    }

    /// Opens one session under the pi app's rules, synchronously; its writer
    /// claim is taken at the first write. A session that follows the SDK's
    /// rules is refused: app writes (no `leaf` entries) would move its leaf
    /// for pi 1.6 but not for the SDK's `Session`.
    #[napi]
    pub fn open_app_session(&self, id: String) -> napi::Result<NativeAppSession> {
        let open = || {
            let storage = self.archive.open_storage(&id)?;
            if storage.contract()? == Contract::Sdk {
                return Err(Error::Usage(format!(
                    "session {id} follows the SDK contract (pi-agent-core 0.83's Session: it was created through the SDK, or holds leaf or active_tools_change entries), not the pi app's; open it with archive.storage(id) or archive.repo(), not archive.sessionManager(id)"
                )));
            }
            NativeAppSession::open(storage, id.clone())
        };
        open().map_err(|e| thrown(&e))
    }

    /// Creates a session under the pi app's rules, synchronously (options
    /// JSON: `id`, `cwd`, `parentSession`), with pi's header and, in one
    /// transaction, `entries` (one entry's JSON text each, written as
    /// given); returns it open.
    #[napi]
    pub fn create_app_session(
        &self,
        options_json: String,
        entries: Option<Vec<String>>,
    ) -> napi::Result<NativeAppSession> {
        let create = || {
            let o = options(Some(&options_json))?;
            let new = CreateOptions {
                id: opt_str(&o, "id")?,
                cwd: opt_str(&o, "cwd")?.unwrap_or_default(),
                parent_session: opt_str(&o, "parentSession")?,
                metadata: None,
            }
            .fields()?
            .new_session();
            let new = NewSession {
                contract: Contract::App,
                ..new
            };
            let entries = entries
                .unwrap_or_default()
                .iter()
                .map(|text| {
                    Entry::parse(text).map_err(|p| {
                        Error::Usage(format!(
                            "an entry to write is not a pi entry ({p:?}): {text}"
                        ))
                    })
                })
                .collect::<Result<Vec<Entry>>>()?;
            self.archive.write_session(&mut |w| {
                w.begin(&new)?;
                entries.iter().try_for_each(|e| w.push(e))
            })?;
            let storage = self.archive.open_storage(&new.id)?;
            NativeAppSession::open(storage, new.id.clone())
        };
        create().map_err(|e| thrown(&e))
    }

    /// Creates an empty session (options JSON: `id`, `cwd`, `parentSessionPath`,
    /// `metadata`); resolves to its metadata as JSON text.
    #[napi]
    pub fn create_session(&self, options_json: String) -> AsyncTask<Job<String>> {
        let archive = self.archive.clone();
        job(move || {
            let o = options(Some(&options_json))?;
            let create = CreateOptions {
                id: opt_str(&o, "id")?,
                cwd: opt_str(&o, "cwd")?.unwrap_or_default(),
                parent_session: opt_str(&o, "parentSessionPath")?,
                metadata: opt_metadata(&o)?,
            };
            let session = ArchiveRepo::new(archive).create(&create)?;
            Ok(metadata_json(&session.storage().metadata()?).to_string())
        })
    }

    /// The sessions newest first (options JSON: `cwd`, `limit`, `offset`), as
    /// a JSON list of pi metadata objects.
    #[napi]
    pub fn list(&self, options_json: Option<String>) -> AsyncTask<Job<String>> {
        let archive = self.archive.clone();
        job(move || {
            let o = options(options_json.as_deref())?;
            let q = ListQuery {
                cwd: opt_str(&o, "cwd")?,
                limit: opt_usize(&o, "limit")?,
                offset: opt_usize(&o, "offset")?.unwrap_or(0),
                ..ListQuery::default()
            };
            let listed: Vec<Value> = archive
                .list(&q)?
                .iter()
                .map(|s| {
                    let mut m = metadata_json(&s.metadata);
                    // The session's name where it has one (pi's metadata
                    // otherwise, unchanged), as `ls --json` gives it.
                    if let Some(n) = &s.name {
                        m["name"] = serde_json::from_str(n.json())
                            .unwrap_or_else(|_| Value::String(n.to_string_lossy()));
                    }
                    m
                })
                .collect();
            Ok(Value::Array(listed).to_string())
        })
    }

    /// The sessions newest activity first, for pickers (options JSON: `cwd`,
    /// `nameContains`, `limit`, `offset`): id, cwd, creation time, name,
    /// last activity (Unix ms), entry count, and the pi file the session was
    /// imported from (`sourceFile`, `null` when none exists any more). One
    /// page of the listing `sessiontree ls` reads, so its time does not grow
    /// with the sessions beyond the page.
    #[napi]
    pub fn list_sessions(&self, options_json: Option<String>) -> AsyncTask<Job<String>> {
        let archive = self.archive.clone();
        let local = self.local.clone();
        job(move || {
            let o = options(options_json.as_deref())?;
            let q = ListQuery {
                cwd: opt_str(&o, "cwd")?,
                name_contains: opt_str(&o, "nameContains")?,
                limit: opt_usize(&o, "limit")?,
                offset: opt_usize(&o, "offset")?.unwrap_or(0),
                by_activity: true,
                ..ListQuery::default()
            };
            let listed: Vec<Value> = archive
                .list(&q)?
                .iter()
                .map(|s| {
                    let name = s.name.as_ref().map(|n| {
                        serde_json::from_str(n.json())
                            .unwrap_or_else(|_| Value::String(n.to_string_lossy()))
                    });
                    let source = match &local {
                        Some(a) => source_file(a, &s.metadata.id)?,
                        None => None,
                    };
                    Ok(json!({
                        "id": s.metadata.id,
                        "cwd": s.metadata.cwd,
                        "createdAt": s.metadata.created_at,
                        "name": name,
                        "lastActiveMs": s.last_active_or_created(),
                        "entryCount": s.entry_count,
                        "sourceFile": source,
                    }))
                })
                .collect::<Result<_>>()?;
            Ok(Value::Array(listed).to_string())
        })
    }

    /// The pi file each session was imported from (a JSON object from id to
    /// path, `null` for a session with no such file on disk): what pi's
    /// `switchSession` opens. Always `null` on a team archive.
    #[napi]
    pub fn source_files(&self, ids: Vec<String>) -> AsyncTask<Job<String>> {
        let local = self.local.clone();
        job(move || {
            let mut found = serde_json::Map::new();
            for id in ids {
                let path = match &local {
                    Some(a) => source_file(a, &id)?,
                    None => None,
                };
                found.insert(id, path.map_or(Value::Null, Value::String));
            }
            Ok(Value::Object(found).to_string())
        })
    }

    /// Deletes a session and everything in it.
    #[napi]
    pub fn delete_session(&self, id: String) -> AsyncTask<Job<()>> {
        let archive = self.archive.clone();
        job(move || archive.delete_session(&id))
    }

    /// Forks a session (options JSON: `entryId`, `position`, `id`, `cwd`,
    /// `parentSessionPath`, `metadata`); resolves to the fork's metadata as JSON text.
    #[napi]
    pub fn fork(&self, source_id: String, options_json: String) -> AsyncTask<Job<String>> {
        let archive = self.archive.clone();
        job(move || {
            let o = options(Some(&options_json))?;
            let position = match opt_str(&o, "position")? {
                None => ForkPosition::Before,
                Some(name) => ForkPosition::from_name(&name)
                    .ok_or_else(|| Error::Usage(format!("unknown fork position {name:?}")))?,
            };
            let fork = ForkOptions {
                entry_id: opt_str(&o, "entryId")?.filter(|id| !id.is_empty()),
                position,
                id: opt_str(&o, "id")?,
                cwd: opt_str(&o, "cwd")?,
                parent_session: opt_str(&o, "parentSessionPath")?,
                metadata: opt_metadata(&o)?,
            };
            let source = archive.open_storage(&source_id)?.metadata()?;
            let mut repo = ArchiveRepo::new(archive);
            let session = repo.fork(&source, &fork)?;
            Ok(metadata_json(&session.storage().metadata()?).to_string())
        })
    }

    /// Full-text search over message text, best first (options JSON:
    /// `sessionId`, `cwd`, `role`, `limit` (default 20), `offset`).
    #[napi]
    pub fn search(&self, query: String, options_json: Option<String>) -> AsyncTask<Job<String>> {
        let archive = self.archive.clone();
        job(move || {
            let o = options(options_json.as_deref())?;
            let (session, cwd, role) = (
                opt_str(&o, "sessionId")?,
                opt_str(&o, "cwd")?,
                opt_str(&o, "role")?,
            );
            let filter = SearchFilter {
                session: session.as_deref(),
                cwd: cwd.as_deref(),
                role: role.as_deref(),
            };
            let limit = opt_usize(&o, "limit")?.unwrap_or(20);
            let offset = opt_usize(&o, "offset")?.unwrap_or(0);
            let hits: Vec<Value> = archive
                .search_page(&query, &filter, limit, offset)?
                .into_iter()
                .map(|h| {
                    json!({
                        "sessionId": h.session_id,
                        "entryId": h.entry_id,
                        "role": h.role,
                        "sessionName": h.session_name.map(|n| n.to_string_lossy()),
                        "sessionCreatedAt": h.session_created_at,
                        "snippet": h.snippet,
                        "rank": h.rank,
                    })
                })
                .collect();
            Ok(Value::Array(hits).to_string())
        })
    }

    /// Archive-wide totals: sessions, entries, pi's statistics summed, and per working directory.
    #[napi]
    pub fn stats(&self) -> AsyncTask<Job<String>> {
        let archive = self.archive.clone();
        job(move || {
            let t = archive.totals()?;
            let stats: Value = serde_json::from_str(&t.stats.to_json_text())
                .map_err(|e| Error::Unknown(format!("statistics: {e}")))?;
            let per_cwd: Vec<Value> = t
                .per_cwd
                .iter()
                .map(|(cwd, sessions, messages, cost)| {
                    json!({"cwd": cwd, "sessions": sessions, "messages": messages, "costTotal": cost})
                })
                .collect();
            Ok(json!({
                "sessions": t.sessions,
                "entries": t.entries,
                "stats": stats,
                "perCwd": per_cwd,
            })
            .to_string())
        })
    }

    /// The `.jsonl` files import would read from `path` (a file, or a
    /// directory searched recursively; pi's sessions directory when absent), as a JSON list; trains the archive's
    /// first compression dictionary from them, as `sessiontree import` does.
    #[napi]
    pub fn prepare_import(&self, path: Option<String>) -> AsyncTask<Job<String>> {
        let archive = self.local("import");
        job(move || {
            let archive = archive?;
            let path = path.map_or_else(sessiontree::layout::pi_sessions_dir, PathBuf::from);
            let mut files = Vec::new();
            sessiontree::layout::collect_jsonl_files(&path, &mut files)?;
            convert::train_dictionary_for(&archive, &files)?;
            let names: Vec<Value> = files
                .iter()
                .map(|f| Value::String(f.display().to_string()))
                .collect();
            Ok(Value::Array(names).to_string())
        })
    }

    /// Imports one pi session file (idempotent, as `sessiontree import`);
    /// resolves to what it did as JSON text.
    #[napi]
    pub fn import_file(&self, path: String) -> AsyncTask<Job<String>> {
        let archive = self.local("import");
        job(move || {
            let archive = archive?;
            let r = convert::import_jsonl(&archive, Path::new(&path))?;
            let outcome = match r.outcome {
                ImportOutcome::Imported => "imported",
                ImportOutcome::Appended => "appended",
                ImportOutcome::Unchanged => "unchanged",
                ImportOutcome::AlreadyPresent => "alreadyPresent",
                ImportOutcome::InProgressElsewhere => "inProgressElsewhere",
            };
            Ok(json!({
                "file": path,
                "sessionId": r.session_id,
                "outcome": outcome,
                "entries": r.entries,
                "bytes": r.bytes_read,
                "tornTailLine": r.torn_tail.map(|t| t.line),
            })
            .to_string())
        })
    }

    /// Exports a session as a pi JSONL file in pi's layout below `dir`, never
    /// destroying a differing file unless `force` (then kept as `NAME.bak`).
    #[napi]
    pub fn export_session(
        &self,
        id: String,
        dir: String,
        force: Option<bool>,
    ) -> AsyncTask<Job<String>> {
        let archive = self.archive.clone();
        job(move || {
            let (path, outcome) = archive.export_session(
                &id,
                &|m| sessiontree::layout::export_path(Path::new(&dir), m),
                force.unwrap_or(false),
                &mut |_| {},
            )?;
            let (name, backup) = match outcome {
                ExportOutcome::Created => ("created", None),
                ExportOutcome::Unchanged => ("unchanged", None),
                ExportOutcome::Appended { .. } => ("appended", None),
                ExportOutcome::Replaced { backup } => ("replaced", Some(backup)),
            };
            Ok(json!({
                "sessionId": id,
                "path": path.display().to_string(),
                "outcome": name,
                "backup": backup.map(|b| b.display().to_string()),
            })
            .to_string())
        })
    }
}
