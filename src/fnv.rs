//! FNV-1a 64: a tiny stable hash, written once for the import's record of a
//! file prefix (`imports.prefix_hash`) and the archive's blob keys
//! (`blobs.hash`). Stored values depend on it: never change it.

/// An FNV-1a 64 hash fed in pieces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Fnv {
    /// The hash of nothing yet.
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds `bytes`.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub(crate) fn value(self) -> u64 {
        self.0
    }

    /// The hash so far as 16 hex digits.
    pub(crate) fn hex(self) -> String {
        format!("{:016x}", self.0)
    }

    /// The hash of `bytes`.
    pub(crate) fn of(bytes: &[u8]) -> u64 {
        let mut h = Fnv::new();
        h.update(bytes);
        h.value()
    }
}
