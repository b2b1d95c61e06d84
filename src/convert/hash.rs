//! The prefix hash: what an import record holds of the bytes it imported.

use super::progress::ByteProgress;
use crate::error::{Error, Result};
use crate::fnv::{Fnv, WideFnv};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// The hash of the first `len` bytes of a file, as a new import record
/// stores it ([`WideFnv`]).
pub(super) fn hash_prefix(path: &Path, len: u64) -> Result<String> {
    hash_prefix_reporting(path, len, PrefixHash::Wide(WideFnv::new()), None)
}

/// A prefix hash being made, of the kind a record holds: records written
/// before schema 12 hold a bare FNV-1a ([`Fnv`]), later ones are tagged
/// ([`WideFnv`]).
pub(super) enum PrefixHash {
    Bytewise(Fnv),
    Wide(WideFnv),
}

impl PrefixHash {
    /// A hash of the kind `recorded` is, to compare with it.
    pub(super) fn like(recorded: &str) -> Self {
        if recorded.starts_with(crate::fnv::WIDE_TAG) {
            PrefixHash::Wide(WideFnv::new())
        } else {
            PrefixHash::Bytewise(Fnv::new())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            PrefixHash::Bytewise(h) => h.update(bytes),
            PrefixHash::Wide(h) => h.update(bytes),
        }
    }

    /// The hash as a record stores it.
    fn stored(&self) -> String {
        match self {
            PrefixHash::Bytewise(h) => h.hex(),
            PrefixHash::Wide(h) => h.tagged_hex(),
        }
    }
}

/// The hash (`hash`, fed from the start) of the first `len` bytes of a
/// file, reporting the bytes hashed as it goes; empty if the file is shorter.
pub(super) fn hash_prefix_reporting(
    path: &Path,
    len: u64,
    mut hash: PrefixHash,
    mut progress: Option<&mut ByteProgress<'_>>,
) -> Result<String> {
    let io = |e| Error::io(format!("Failed to read session {}", path.display()), e);
    let mut f = File::open(path).map_err(io)?.take(len);
    let mut buf = vec![0u8; 1 << 16];
    let mut seen = 0;
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        hash.update(&buf[..n]);
        if let Some(p) = progress.as_deref_mut() {
            p.step(seen);
        }
    }
    if let Some(p) = progress {
        p.reached(seen);
    }
    if seen < len {
        return Ok(String::new());
    }
    Ok(hash.stored())
}

/// Hashes what is read through it, if it holds a hash.
pub(super) struct HashingReader<R> {
    pub(super) inner: R,
    pub(super) hash: Option<WideFnv>,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(hash) = &mut self.hash {
            hash.update(&buf[..n]);
        }
        Ok(n)
    }
}
