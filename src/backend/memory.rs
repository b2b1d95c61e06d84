//! The in-memory backend: the reference every other backend is tested against.

use super::LogIndex;
use crate::entry::{new_session_id, now_timestamp, Entry};
use crate::error::{Error, Result};
use crate::storage::{SessionMetadata, SessionStorage};

/// A session held entirely in memory.
#[derive(Debug, Clone)]
pub struct MemoryStorage {
    metadata: SessionMetadata,
    log: LogIndex,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStorage {
    /// An empty session with a fresh id.
    pub fn new() -> Self {
        MemoryStorage::with_metadata(SessionMetadata {
            id: new_session_id(),
            created_at: now_timestamp(),
            ..SessionMetadata::default()
        })
    }

    /// An empty session with the given metadata.
    pub fn with_metadata(metadata: SessionMetadata) -> Self {
        MemoryStorage {
            metadata,
            log: LogIndex::default(),
        }
    }

    /// A session holding `entries`; like pi, refuses a log whose leaf names a missing entry.
    pub fn with_entries(
        metadata: SessionMetadata,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<Self> {
        let log = LogIndex::from_entries(entries);
        if let Some(leaf) = log.leaf() {
            if log.get(leaf).is_none() {
                return Err(Error::DanglingReference(leaf.to_owned()));
            }
        }
        Ok(MemoryStorage { metadata, log })
    }
}

impl SessionStorage for MemoryStorage {
    fn metadata(&self) -> Result<SessionMetadata> {
        Ok(self.metadata.clone())
    }
    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        self.log.push(entry);
        Ok(())
    }
    super::log_index_reads!();
}
