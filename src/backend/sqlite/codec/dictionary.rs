//! A trained zstd dictionary, loaded once for decompression; how an
//! archive's dictionaries are cached is [`super::Codec`]'s.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use zstd::zstd_safe;

/// A trained zstd dictionary of an archive.
pub struct Dictionary {
    /// Its `dictionaries.dict_id`.
    pub id: i64,
    /// Unique in this process: what thread-local compressors key on (ids
    /// repeat across archives).
    pub(super) serial: u64,
    /// The dictionary as trained (what compressors load).
    pub(super) bytes: Vec<u8>,
    /// The dictionary prepared for decompression.
    pub(super) ddict: zstd_safe::DDict<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("id", &self.id)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Dictionary {
    /// Dictionary `id` from its bytes; a damaged one is an error.
    pub(super) fn new(id: i64, bytes: Vec<u8>) -> Result<Self> {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        let ddict = zstd_safe::DDict::try_create(&bytes).ok_or_else(|| {
            Error::Corrupt(format!(
                "compression dictionary {id} is damaged: zstd cannot load it"
            ))
        })?;
        Ok(Dictionary {
            id,
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            ddict,
            bytes,
        })
    }

    /// The dictionary's size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the dictionary is empty (never, for a trained one).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}
