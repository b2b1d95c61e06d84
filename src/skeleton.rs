//! A session's tree without its text: per entry its id, its parent, its type
//! and whether it is a user message, plus the label changes — what
//! `sessiontree tree` needs to lay a tree out before it reads the few
//! entries it prints.
//!
//! The default ([`from_pages`], what `SessionStorage::visit_skeleton` does
//! unless a backend knows better) reads the log page by page, so every
//! backend answers; a backend that keeps ids, types and tree positions in
//! an index (SQLite) answers from that index without decoding any text.
//! This module depends on the entry model only: the storage trait uses its
//! types, not the other way round.

use crate::entry::Entry;
use crate::error::Result;

/// Where an entry of the skeleton hangs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkeletonParent<'a> {
    /// No parent id: a root.
    None,
    /// The entry answering to this id, which may not exist (a dangling parent).
    Id(&'a str),
    /// The entry at this log position (0-based), which the skeleton also lists.
    At(usize),
}

/// One entry of the skeleton.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkeletonEntry<'a> {
    /// Its position in the log (0-based).
    pub pos: usize,
    /// Its id.
    pub id: &'a str,
    /// Its parent.
    pub parent: SkeletonParent<'a>,
    /// Its type string (`message`, `compaction`, …).
    pub entry_type: &'a str,
    /// Whether it is a user message, where that is known without its text;
    /// `None` for a message whose role only its text says.
    pub user: Option<bool>,
}

/// One item of a skeleton, as handed to a visitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkeletonItem<'a> {
    /// An entry. Entries come in any order; where an id repeats, the entry
    /// with the later position is the one that answers to it.
    Entry(SkeletonEntry<'a>),
    /// A label change: `target` has a label after it (`set`) or none. Applied
    /// in the order given, they leave each target with its current label state.
    Label {
        /// The labelled entry's id (it may not exist).
        target: &'a str,
        /// Whether the target has a label after this change.
        set: bool,
    },
}

/// Entries read per page (fewer when entries are large).
const PAGE: usize = 4096;
/// About how many bytes of entry text one page may hold.
const PAGE_BYTES: usize = 16 << 20;

/// The skeleton of a log read page by page in log order through
/// `read_page(start, limit)` (a storage's `entries`): each entry, then the
/// label change it makes. Memory stays at about one page of text (large
/// entries, such as pasted images, make smaller pages).
pub fn from_pages(
    mut read_page: impl FnMut(usize, usize) -> Result<Vec<Entry>>,
    sink: &mut dyn FnMut(SkeletonItem<'_>) -> Result<()>,
) -> Result<()> {
    let mut pos = 0;
    let mut limit = PAGE;
    loop {
        let page = read_page(pos, limit)?;
        let bytes: usize = page.iter().map(|e| e.json().len()).sum();
        for e in &page {
            visit_entry(e, pos, sink)?;
            pos += 1;
        }
        if page.len() < limit {
            return Ok(());
        }
        limit = if bytes > PAGE_BYTES {
            (limit / 2).max(16)
        } else if bytes < PAGE_BYTES / 4 {
            (limit * 2).min(PAGE)
        } else {
            limit
        };
    }
}

/// One entry's items, from its facts.
fn visit_entry(
    e: &Entry,
    pos: usize,
    sink: &mut dyn FnMut(SkeletonItem<'_>) -> Result<()>,
) -> Result<()> {
    let f = e.facts();
    sink(SkeletonItem::Entry(SkeletonEntry {
        pos,
        id: &f.id,
        parent: f.parent().map_or(SkeletonParent::None, SkeletonParent::Id),
        entry_type: f.entry_type.as_str(),
        user: Some(f.is_user_message()),
    }))?;
    if let Some((target, label)) = f.label_update() {
        sink(SkeletonItem::Label {
            target,
            set: label.is_some(),
        })?;
    }
    Ok(())
}
