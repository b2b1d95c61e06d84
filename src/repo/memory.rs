//! Sessions held in memory, shared between the repository and open handles.

use super::{
    entries_to_fork, newest_first, CreateOptions, ForkOptions, SessionFields, SessionRepo,
};
use crate::backend::memory::MemoryStorage;
use crate::entry::{now_timestamp, Entry};
use crate::error::{Error, Result};
use crate::rules::SessionStats;
use crate::session::Session;
use crate::storage::{SessionMetadata, SessionStorage};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A handle to an in-memory session; clones share the session.
#[derive(Debug, Clone, Default)]
pub struct SharedMemoryStorage(Arc<Mutex<MemoryStorage>>);

impl SharedMemoryStorage {
    fn lock(&self) -> MutexGuard<'_, MemoryStorage> {
        // A panic while holding the lock cannot leave the log half-appended
        // (pushes are single operations), so a poisoned lock is still usable.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl SessionStorage for SharedMemoryStorage {
    fn metadata(&self) -> Result<SessionMetadata> {
        self.lock().metadata()
    }
    fn contract(&self) -> Result<crate::contract::Contract> {
        self.lock().contract()
    }
    fn kept_lines(&self) -> Result<crate::storage::KeptLines> {
        self.lock().kept_lines()
    }
    fn stored_leaf_id(&self) -> Result<Option<String>> {
        self.lock().stored_leaf_id()
    }
    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        self.lock().append_entry(entry)
    }
    fn entry(&self, id: &str) -> Result<Option<Entry>> {
        self.lock().entry(id)
    }
    fn find_entries(&self, entry_type: &str) -> Result<Vec<Entry>> {
        self.lock().find_entries(entry_type)
    }
    fn label(&self, id: &str) -> Result<Option<crate::json::JsString>> {
        self.lock().label(id)
    }
    fn session_name(&self) -> Result<Option<crate::json::JsString>> {
        self.lock().session_name()
    }
    fn session_stats(&self) -> Result<SessionStats> {
        self.lock().session_stats()
    }
    fn entries(&self, after: usize, limit: Option<usize>) -> Result<Vec<Entry>> {
        self.lock().entries(after, limit)
    }
    fn entry_count(&self) -> Result<usize> {
        self.lock().entry_count()
    }
}

/// An in-memory repository (pi's `InMemorySessionRepo`).
#[derive(Debug, Default)]
pub struct MemoryRepo {
    /// Each session with its creation sequence number, which breaks ties
    /// between sessions created in the same millisecond as SQLite's row key does.
    sessions: BTreeMap<String, (u64, SharedMemoryStorage)>,
    created: u64,
}

impl MemoryRepo {
    /// An empty repository.
    pub fn new() -> Self {
        Self::default()
    }

    fn insert(&mut self, storage: MemoryStorage) -> Result<Session<SharedMemoryStorage>> {
        let id = storage.metadata()?.id;
        let shared = SharedMemoryStorage(Arc::new(Mutex::new(storage)));
        self.created += 1;
        self.sessions.insert(id, (self.created, shared.clone()));
        Ok(Session::new(shared))
    }
}

fn new_metadata(fields: SessionFields) -> SessionMetadata {
    SessionMetadata {
        id: fields.id,
        created_at: now_timestamp(),
        cwd: Some(fields.cwd),
        path: None,
        parent_session: fields.parent_session,
        metadata: fields.metadata,
    }
}

impl SessionRepo for MemoryRepo {
    type Storage = SharedMemoryStorage;

    fn create(&mut self, options: &CreateOptions) -> Result<Session<SharedMemoryStorage>> {
        // Created through the SDK contract: it follows the SDK's rules.
        self.insert(
            MemoryStorage::with_metadata(new_metadata(options.fields()?))
                .with_contract(crate::contract::Contract::Sdk),
        )
    }

    fn open(&self, session: &SessionMetadata) -> Result<Session<SharedMemoryStorage>> {
        self.sessions
            .get(&session.id)
            .map(|(_, s)| Session::new(s.clone()))
            .ok_or_else(|| Error::SessionNotFound(session.id.clone()))
    }

    fn list(&self, cwd: Option<&str>) -> Result<Vec<SessionMetadata>> {
        let mut listed = Vec::new();
        for (created, storage) in self.sessions.values() {
            let meta = storage.metadata()?;
            if cwd.is_none_or(|c| meta.cwd.as_deref() == Some(c)) {
                listed.push((meta, *created));
            }
        }
        Ok(newest_first(listed))
    }

    fn delete(&mut self, session: &SessionMetadata) -> Result<()> {
        self.sessions.remove(&session.id);
        Ok(())
    }

    fn fork(
        &mut self,
        source: &SessionMetadata,
        options: &ForkOptions,
    ) -> Result<Session<SharedMemoryStorage>> {
        let source = self.open(source)?;
        let entries = entries_to_fork(
            source.storage(),
            options.entry_id.as_deref(),
            options.position,
        )?;
        let fields = options.inherit(&source.storage().metadata()?)?;
        // A fork follows its source's rules.
        let contract = source.storage().contract()?;
        let storage =
            MemoryStorage::with_entries(new_metadata(fields), entries)?.with_contract(contract);
        self.insert(storage)
    }
}
