//! The branch cache's rules that hold whatever stores it: how an entry key
//! packs a segment and a depth, the block size, the segment row, and the
//! skew-binary jump rule. The invariants themselves are stated once, in
//! `backend::branch_cache`, which places entries for every store.

use crate::error::Result;

/// Bits of `entry_key` that hold the depth.
pub const DEPTH_BITS: u32 = 32;
/// Mask of the depth bits.
pub const DEPTH_MASK: i64 = (1 << DEPTH_BITS) - 1;
/// `to_depth` of a segment's own ancestry row: the segment may still grow.
pub const OPEN_END: i64 = DEPTH_MASK;
/// Ancestry rows per segment: itself and its nearest ancestors (invariant 4;
/// the SQLite archive's schema-5 migration trims version-1 archives to the same).
pub const ANCESTRY_BLOCK: i64 = 8;

/// The key of the entry at `depth` in `segment`.
pub fn entry_key(segment: i64, depth: i64) -> i64 {
    (segment << DEPTH_BITS) | depth
}

/// The segment and depth of an entry key.
pub fn split_key(key: i64) -> (i64, i64) {
    (key >> DEPTH_BITS, key & DEPTH_MASK)
}

/// A segment row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its id.
    pub id: i64,
    /// The segment it forks from.
    pub parent: Option<i64>,
    /// Depth of its first entry.
    pub first_depth: i64,
    /// Depth of its last entry.
    pub tail_depth: i64,
    /// Segments on the path from the root to it, itself included.
    pub position: i64,
    /// Its skew-binary jump pointer (`None` for a root).
    pub jump: Option<i64>,
    /// Nearest compaction above its first entry.
    pub inherited_compaction: Option<i64>,
    /// Missing parent id of its path's root.
    pub missing_root_parent: Option<String>,
}

/// Invariant 5: the jump pointer of a new child of `parent`, given a way to
/// read any segment's `(position, jump)`. One rule for every backend's placer, the
/// SQLite migration and the checks.
pub fn jump_for_child(
    parent: (i64, i64, Option<i64>),
    mut lookup: impl FnMut(i64) -> Result<(i64, Option<i64>)>,
) -> Result<i64> {
    let (parent_id, parent_position, parent_jump) = parent;
    // A root jumps to itself in Myers' formulation; its children jump to it.
    let Some(j) = parent_jump else {
        return Ok(parent_id);
    };
    let (j_position, j_jump) = lookup(j)?;
    let (jj, jj_position) = match j_jump {
        Some(jj) => (jj, lookup(jj)?.0),
        None => (j, j_position),
    };
    Ok(
        if parent_position - j_position == j_position - jj_position {
            jj
        } else {
            parent_id
        },
    )
}
