//! FNV-1a 64: a tiny stable hash, written once for the archive's blob keys
//! (`blobs.hash`) and the import's record of a file prefix
//! (`imports.prefix_hash` before schema version 12), and [`WideFnv`], the prefix hash of
//! schema version 12. Stored values depend on both: never change them.

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

/// The prefix hash of imports recorded since schema version 12 (`fnv4:` and 16 hex
/// digits): FNV-1a's step on four lanes of 8-byte words, each rotated so
/// that high bits reach low ones, the lanes and the tail folded by FNV-1a
/// at the end. Byte-wise FNV-1a waits for one multiplication per byte and
/// was 5 % of an import's CPU; this does four at a time per 32 bytes. It
/// only needs to tell a file's prefix from a changed one, as FNV-1a did.
#[derive(Debug, Clone)]
pub(crate) struct WideFnv {
    lanes: [u64; 4],
    pending: [u8; 32],
    pending_len: usize,
    total: u64,
}

/// How a stored prefix hash of schema version 12 begins.
pub(crate) const WIDE_TAG: &str = "fnv4:";

impl WideFnv {
    /// The hash of nothing yet.
    pub(crate) fn new() -> Self {
        WideFnv {
            lanes: [0xcbf2_9ce4_8422_2325; 4],
            pending: [0; 32],
            pending_len: 0,
            total: 0,
        }
    }

    fn absorb(lanes: &mut [u64; 4], chunk: &[u8]) {
        for (lane, word) in lanes.iter_mut().zip(chunk.chunks_exact(8)) {
            let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
            *lane = ((*lane ^ w).wrapping_mul(0x0100_0000_01b3)).rotate_left(29);
        }
    }

    /// Feeds `bytes` (the result does not depend on how input is split).
    pub(crate) fn update(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.pending_len > 0 {
            let take = (32 - self.pending_len).min(bytes.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&bytes[..take]);
            self.pending_len += take;
            bytes = &bytes[take..];
            if self.pending_len < 32 {
                return;
            }
            let chunk = self.pending;
            Self::absorb(&mut self.lanes, &chunk);
            self.pending_len = 0;
        }
        let mut chunks = bytes.chunks_exact(32);
        for chunk in &mut chunks {
            Self::absorb(&mut self.lanes, chunk);
        }
        let rest = chunks.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    /// The hash so far, as stored: [`WIDE_TAG`] and 16 hex digits.
    pub(crate) fn tagged_hex(&self) -> String {
        let mut fold = Fnv::new();
        for lane in self.lanes {
            fold.update(&lane.to_le_bytes());
        }
        fold.update(&self.pending[..self.pending_len]);
        fold.update(&self.total.to_le_bytes());
        format!("{WIDE_TAG}{:016x}", fold.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_hash_does_not_depend_on_how_input_is_split() {
        let text: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut whole = WideFnv::new();
        whole.update(&text);
        for cuts in [[1, 31, 33], [32, 64, 65], [5, 500, 999], [0, 0, 1000]] {
            let mut pieces = WideFnv::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([text.len()]) {
                pieces.update(&text[from..cut]);
                from = cut;
            }
            assert_eq!(pieces.tagged_hex(), whole.tagged_hex(), "{cuts:?}");
        }
    }

    #[test]
    fn the_wide_hash_tells_a_prefix_from_a_change_anywhere() {
        let text: Vec<u8> = (0..300u32).map(|i| b'a' + (i % 26) as u8).collect();
        let of = |bytes: &[u8]| {
            let mut h = WideFnv::new();
            h.update(bytes);
            h.tagged_hex()
        };
        let original = of(&text);
        assert!(original.starts_with(WIDE_TAG));
        assert_ne!(of(&text[..299]), original, "a shorter prefix");
        for at in [0, 7, 31, 32, 63, 150, 288, 299] {
            for bit in [0, 3, 7] {
                let mut changed = text.clone();
                changed[at] ^= 1 << bit;
                assert_ne!(of(&changed), original, "byte {at} bit {bit}");
            }
        }
        // Zero bytes count: a prefix of zeros is not the empty file.
        assert_ne!(of(&[0; 32]), of(&[]));
        assert_ne!(of(&[0; 33]), of(&[0; 32]));
    }
}
