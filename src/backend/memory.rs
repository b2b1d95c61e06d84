//! The in-memory backend: the reference every other backend is tested against.

use super::LogIndex;
use crate::contract::Contract;
use crate::entry::{new_session_id, now_timestamp, Entry};
use crate::error::{Error, Result};
use crate::storage::{KeptLines, SessionMetadata, SessionStorage};

/// A session held entirely in memory.
#[derive(Debug, Clone)]
pub struct MemoryStorage {
    metadata: SessionMetadata,
    log: LogIndex,
    /// The contract it was told it follows; detected from the log when `None`.
    contract: Option<Contract>,
    /// The lines of its file pi skips, kept verbatim.
    kept: KeptLines,
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
            contract: None,
            kept: KeptLines::default(),
        }
    }

    /// A session holding `entries`; like pi, refuses a log whose leaf names a missing entry.
    pub fn with_entries(
        metadata: SessionMetadata,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<Self> {
        let storage = Self::loaded(metadata, entries);
        if let Some(leaf) = storage.log.leaf() {
            if storage.log.get(leaf).is_none() {
                return Err(Error::DanglingReference(leaf.to_owned()));
            }
        }
        Ok(storage)
    }

    /// A session loaded from a log someone stored (a file), as pi opens a file:
    /// a leaf that names a missing entry fails only the reads that need it.
    pub fn loaded(metadata: SessionMetadata, entries: impl IntoIterator<Item = Entry>) -> Self {
        MemoryStorage {
            metadata,
            log: LogIndex::from_entries(entries),
            contract: None,
            kept: KeptLines::default(),
        }
    }

    /// Tells the session whose rules it follows (else detected from its log).
    pub fn set_contract(&mut self, contract: Contract) {
        self.contract = Some(contract);
    }

    /// The session with `contract` told (see [`MemoryStorage::set_contract`]).
    pub fn with_contract(mut self, contract: Contract) -> Self {
        self.set_contract(contract);
        self
    }

    /// Keeps the lines of the session's file that pi skips, to be handed
    /// back by [`SessionStorage::kept_lines`].
    pub fn set_kept_lines(&mut self, kept: KeptLines) {
        self.kept = kept;
    }
}

impl SessionStorage for MemoryStorage {
    fn metadata(&self) -> Result<SessionMetadata> {
        Ok(self.metadata.clone())
    }
    fn contract(&self) -> Result<Contract> {
        Ok(self.contract.unwrap_or_else(|| {
            Contract::detect(self.log.all().iter().map(|e| e.entry_type().as_str()))
        }))
    }
    fn kept_lines(&self) -> Result<KeptLines> {
        Ok(self.kept.clone())
    }
    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        self.log.push(entry);
        Ok(())
    }
    super::log_index_reads!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file whose last `leaf` entry names a missing entry opens, as pi opens
    /// it; only the reads that need the leaf fail.
    #[test]
    fn a_loaded_log_with_a_dangling_leaf_fails_only_leaf_reads() {
        let entries = [
            r#"{"type":"message","id":"m","parentId":null,"timestamp":"t","message":{"role":"user","content":"x"}}"#,
            r#"{"type":"leaf","id":"l","parentId":"m","timestamp":"t","targetId":"gone"}"#,
            r#"{"type":"leaf","id":"e","parentId":"l","timestamp":"t","targetId":""}"#,
        ]
        .map(|t| Entry::from_json(t).unwrap());
        let strict = MemoryStorage::with_entries(SessionMetadata::default(), entries[..2].to_vec());
        assert!(strict.is_err(), "pi's InMemorySessionStorage refuses it");
        for n in [2, 3] {
            let s = MemoryStorage::loaded(SessionMetadata::default(), entries[..n].to_vec());
            assert_eq!(s.entry_count().unwrap(), n);
            assert_eq!(
                s.leaf_id().unwrap_err().code(),
                crate::error::ErrorCode::InvalidSession
            );
            assert_eq!(s.path_to_root_or_compaction(Some("m")).unwrap().len(), 1);
            assert!(s.session_stats().is_ok());
        }
    }
}
