//! A session opened into its tree: the shape from the tree index (ids,
//! parents, flags, subtree sizes: no text), laid out as rows with side
//! branches folded, the cursor on the leaf; entry text is read only for the
//! rows on screen.
//!
//! Opening draws at once, whatever the session's size: the first screen is
//! the active path up from the leaf, a window of [`WINDOW`] entries read
//! one parent at a time ([`TreeState::open_window`]); scrolling up near the
//! top of what is read reads the next window. The whole shape (side
//! branches, folds) is read on another thread and put in place by
//! [`TreeState::fill_in`], the cursor kept on its entry.
//!
//! Layout: each entry is a row; where a fork is, its side branches come
//! right after it, indented one step (folded to one row each until opened),
//! and the branch holding the leaf continues at the fork's indentation, so
//! the active path runs down one column however many forks it passes.

use sessiontree::archive::{BoxedStorage, SessionArchive};
use sessiontree::listing::SearchFilter;
use sessiontree::preview::preview_in;
use sessiontree::tree_index::{Index, ACTIVE, LABELLED, LEAF, NONE};
use sessiontree::Result;
use std::collections::{HashMap, HashSet};

/// Entry previews kept at most (read again when scrolled back to).
const CACHE: usize = 4096;
/// Hits a search within the session reads.
const SEARCH_HITS: usize = 200;
/// Entries of the active path read at a time before the whole shape is
/// read: the first screen's reads (more only for a screen over a third of it).
pub const WINDOW: usize = 128;

/// One row of the laid-out tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// The entry's node in the index.
    pub node: u32,
    /// Indentation steps.
    pub depth: u16,
    /// Entries folded away under it (0: nothing folded).
    pub hidden: u32,
}

/// What a row shows, read from the entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    /// One-line preview (`role: text`).
    pub preview: String,
    /// The entry's label.
    pub label: Option<String>,
}

/// A session's storage and shape, read to open its tree.
pub struct ReadSession {
    id: String,
    cwd: Option<String>,
    storage: BoxedStorage,
    idx: Index,
}

/// The tree screen's state.
pub struct TreeState {
    /// The session.
    pub id: String,
    /// Its working directory (previews show paths relative to it).
    pub cwd: Option<String>,
    storage: BoxedStorage,
    /// The session's shape.
    pub idx: Index,
    /// Nodes whose fold differs from the default (side branches folded).
    toggled: HashSet<u32>,
    /// The rows, in order.
    pub rows: Vec<Row>,
    /// The row the cursor is on.
    pub cursor: usize,
    /// The first row on screen.
    pub top: usize,
    /// Rows on screen.
    pub height: usize,
    /// Previews of entries read (only rows that were on screen, or read
    /// walking up the active path), by entry id: they outlive a new shape.
    shown: HashMap<String, Shown>,
    /// Entries in the session's log.
    pub total: usize,
    /// Only a window of the active path is laid out: the whole shape is
    /// still being read.
    pub partial: bool,
    /// While partial: the window's ids, root side first, and the parent of
    /// its first entry (the next window up), if any.
    path: Vec<String>,
    above: Option<String>,
    /// The last search within the session: the query and its hits' entries.
    pub search: Option<(String, Vec<String>, usize)>,
    /// Entries read for previews (for the tests: only what is on screen).
    pub entries_read: usize,
}

impl TreeState {
    /// Opens session `id`, indexes it and puts the cursor on the leaf.
    #[cfg(test)]
    pub fn open(archive: &dyn SessionArchive, id: &str, height: usize) -> Result<Self> {
        Ok(TreeState::from_read(TreeState::read(archive, id)?, height))
    }

    /// The slow part of opening: the session's storage and its shape (may
    /// run on another thread: what it returns is `Send`).
    pub fn read(archive: &dyn SessionArchive, id: &str) -> Result<ReadSession> {
        let storage = archive.open_storage(id)?;
        let cwd = storage.metadata()?.cwd;
        let idx = Index::build(&*storage)?;
        Ok(ReadSession {
            id: id.to_owned(),
            cwd,
            storage,
            idx,
        })
    }

    /// The tree of a session read, laid out, the cursor on the leaf.
    #[cfg(test)]
    pub fn from_read(read: ReadSession, height: usize) -> Self {
        let total = read.idx.entries();
        let mut t = TreeState {
            id: read.id,
            cwd: read.cwd,
            storage: read.storage,
            idx: read.idx,
            toggled: HashSet::new(),
            rows: Vec::new(),
            cursor: 0,
            top: 0,
            height: height.max(1),
            shown: HashMap::new(),
            search: None,
            entries_read: 0,
            total,
            partial: false,
            path: Vec::new(),
            above: None,
        };
        t.layout();
        t.go_to_leaf();
        t
    }

    /// Opens session `id` at once, whatever its size: the active path up
    /// from the leaf, one window of it (its entries read one parent at a
    /// time, previews and labels with them), the cursor on the leaf. No
    /// side branch is shown until [`TreeState::fill_in`] brings the whole
    /// shape.
    pub fn open_window(archive: &dyn SessionArchive, id: &str, height: usize) -> Result<Self> {
        let storage = archive.open_storage(id)?;
        let cwd = storage.metadata()?.cwd;
        let total = storage.entry_count()?;
        let leaf = storage.leaf_id()?;
        let mut t = TreeState {
            id: id.to_owned(),
            cwd,
            storage,
            idx: Index::chain(&[], false)?,
            toggled: HashSet::new(),
            rows: Vec::new(),
            cursor: 0,
            top: 0,
            height: height.max(1),
            shown: HashMap::new(),
            search: None,
            entries_read: 0,
            total,
            partial: true,
            path: Vec::new(),
            above: leaf,
        };
        t.read_up()?;
        t.go_to_leaf();
        Ok(t)
    }

    /// Entries a window of the path reads: [`WINDOW`], or three screens on
    /// a screen taller than a third of it.
    fn window(&self) -> usize {
        WINDOW.max(3 * self.height)
    }

    /// Reads the next window up the active path (from `above`), puts it
    /// above the rows read, and keeps the cursor and screen on their entries.
    fn read_up(&mut self) -> Result<()> {
        let Some(mut next) = self.above.take() else {
            return Ok(());
        };
        let mut seen: HashSet<String> = self.path.iter().cloned().collect();
        let mut read = Vec::new();
        let window = self.window();
        loop {
            if read.len() == window || !seen.insert(next.clone()) {
                self.above = Some(next);
                break;
            }
            let Some(e) = self.storage.entry(&next)? else {
                break;
            };
            let label = self.storage.label(&next)?.map(|l| l.to_string_lossy());
            let preview = preview_in(&e, 1000, self.cwd.as_deref());
            self.shown.insert(next.clone(), Shown { preview, label });
            let parent = e.parent_id().map(str::to_owned);
            read.push(next);
            match parent {
                Some(p) => next = p,
                None => break,
            }
        }
        // A repeat (a parent cycle) ends the path: nothing above it.
        if self
            .above
            .as_ref()
            .is_some_and(|a| seen.contains(a) && read.len() < window)
        {
            self.above = None;
        }
        self.entries_read += read.len();
        let added = read.len();
        read.reverse();
        read.append(&mut self.path);
        self.path = read;
        let leaf = !self.path.is_empty();
        let ids: Vec<&str> = self.path.iter().map(String::as_str).collect();
        self.idx = Index::chain(&ids, leaf)?;
        self.layout();
        if !self.rows.is_empty() {
            self.cursor = (self.cursor + added).min(self.rows.len() - 1);
            self.top += added;
        }
        Ok(())
    }

    /// Puts the whole shape in place of the window read so far (once, while
    /// partial; a shape read since, by [`TreeState::reload`], is newer and
    /// stays): side branches folded, the cursor on the same entry at the
    /// same line of the screen.
    pub fn fill_in(&mut self, read: ReadSession) {
        if !self.partial || read.id != self.id {
            return;
        }
        let at = self.current_id();
        let line = self.cursor.saturating_sub(self.top);
        self.storage = read.storage;
        self.cwd = read.cwd;
        self.idx = read.idx;
        self.partial = false;
        self.path = Vec::new();
        self.above = None;
        self.toggled.clear();
        self.layout();
        match at.and_then(|id| self.idx.find(&id)) {
            Some(n) => self.reveal(n),
            None => self.go_to_leaf(),
        }
        let last_top = self.rows.len().saturating_sub(self.height.max(1));
        self.top = self.cursor.saturating_sub(line).min(last_top);
    }

    /// Reads the session's shape again after a write (a label, a moved
    /// leaf), keeping folds and the cursor's entry.
    pub fn reload(&mut self, archive: &dyn SessionArchive) -> Result<()> {
        let at = self.current_id();
        self.storage = archive.open_storage(&self.id)?;
        self.idx = Index::build(&*self.storage)?;
        self.total = self.storage.entry_count()?;
        self.partial = false;
        self.path = Vec::new();
        self.above = None;
        self.toggled.clear();
        self.shown.clear();
        self.layout();
        match at.and_then(|id| self.idx.find(&id)) {
            Some(n) => self.reveal(n),
            None => self.go_to_leaf(),
        }
        Ok(())
    }

    /// Whether `n` is a side branch's first entry: not its parent's first child.
    fn side_head(&self, n: u32) -> bool {
        let p = self.idx.parent(n);
        p != NONE && self.idx.kids(p).first() != Some(&n)
    }

    /// Whether the entries below `n` are folded away.
    pub fn folded(&self, n: u32) -> bool {
        self.side_head(n) != self.toggled.contains(&n)
    }

    /// Lays the rows out from the index and the folds (no text read).
    fn layout(&mut self) {
        let mut rows = Vec::with_capacity(self.idx.entries().min(1 << 20));
        let mut stack: Vec<(u32, u16)> = self.idx.roots().iter().rev().map(|&r| (r, 0)).collect();
        while let Some((n, depth)) = stack.pop() {
            let kids = self.idx.kids(n);
            let folded = !kids.is_empty() && self.folded(n);
            rows.push(Row {
                node: n,
                depth,
                hidden: if folded {
                    u32::try_from(self.idx.entries_under(kids)).unwrap_or(u32::MAX)
                } else {
                    0
                },
            });
            if folded {
                continue;
            }
            if let Some((&first, side)) = kids.split_first() {
                stack.push((first, depth));
                for &s in side.iter().rev() {
                    stack.push((s, depth.saturating_add(1)));
                }
            }
        }
        self.rows = rows;
    }
}

impl TreeState {
    /// The entry id under the cursor.
    pub fn current_id(&self) -> Option<String> {
        self.rows
            .get(self.cursor)
            .map(|r| self.idx.id(r.node).to_owned())
    }

    /// The row of node `n`, if it is laid out.
    pub fn row_of(&self, n: u32) -> Option<usize> {
        self.rows.iter().position(|r| r.node == n)
    }

    /// The cursor on the leaf (or the first row without one), the leaf in
    /// the middle of the screen.
    /// A fold above the leaf is opened.
    pub fn go_to_leaf(&mut self) {
        let leaf = self.idx.leaf();
        if leaf != NONE {
            self.reveal(leaf);
        }
        if self.rows.get(self.cursor).map(|r| r.node) != Some(leaf) {
            self.cursor = 0;
            self.center();
        }
    }

    /// Puts the cursor's row in the middle of the screen
    /// (as near as the last screenful allows: no empty screen below the end).
    fn center(&mut self) {
        let last_top = self.rows.len().saturating_sub(self.height.max(1));
        self.top = self.cursor.saturating_sub(self.height / 2).min(last_top);
    }

    /// Scrolls as little as needed to keep the cursor on screen.
    fn follow(&mut self) {
        let h = self.height.max(1);
        if self.cursor < self.top {
            self.top = self.cursor;
        } else if self.cursor >= self.top + h {
            self.top = self.cursor + 1 - h;
        }
    }

    /// Whether the leaf's row is on screen.
    #[cfg(test)]
    pub fn leaf_in_view(&self) -> bool {
        let leaf = self.idx.leaf();
        self.row_of(leaf)
            .is_some_and(|r| r >= self.top && r < self.top + self.height)
    }

    /// Moves the cursor by `delta` rows.
    pub fn step(&mut self, delta: isize) {
        let last = self.rows.len().saturating_sub(1);
        self.cursor = self.cursor.saturating_add_signed(delta).min(last);
        self.follow();
    }

    /// Unfolds every fold above `n` and puts the cursor on it.
    pub fn reveal(&mut self, n: u32) {
        let mut changed = false;
        let mut p = self.idx.parent(n);
        let mut guard = 0usize;
        while p != NONE && guard <= self.idx.entries() {
            if self.folded(p) {
                self.toggle_node(p);
                changed = true;
            }
            p = self.idx.parent(p);
            guard += 1;
        }
        if changed {
            self.layout();
        }
        if let Some(r) = self.row_of(n) {
            self.cursor = r;
            self.center();
        }
    }

    fn toggle_node(&mut self, n: u32) {
        if !self.toggled.remove(&n) {
            self.toggled.insert(n);
        }
    }

    /// Folds or unfolds the entries below the cursor's entry.
    pub fn toggle(&mut self) {
        let Some(r) = self.rows.get(self.cursor).copied() else {
            return;
        };
        if self.idx.kids(r.node).is_empty() {
            return;
        }
        self.toggle_node(r.node);
        self.layout();
        self.cursor = self.row_of(r.node).unwrap_or(0);
        self.follow();
    }

    /// `→`: unfolds the cursor's entry if folded.
    pub fn unfold(&mut self) {
        if let Some(r) = self.rows.get(self.cursor) {
            if r.hidden > 0 {
                self.toggle();
            }
        }
    }

    /// `←`: folds the cursor's side branch (from its head), or goes to the
    /// fork it leaves from.
    pub fn fold_or_up(&mut self) {
        let Some(r) = self.rows.get(self.cursor).copied() else {
            return;
        };
        if r.hidden == 0 && self.side_head(r.node) {
            self.toggle();
            return;
        }
        // Up to the head of the branch this row is on, then to its fork.
        let mut n = r.node;
        while self.idx.parent(n) != NONE && !self.side_head(n) {
            n = self.idx.parent(n);
        }
        let target = if n == r.node { self.idx.parent(n) } else { n };
        if let Some(row) = (target != NONE).then(|| self.row_of(target)).flatten() {
            self.cursor = row;
            self.follow();
        }
    }

    /// Reads the previews of the rows on screen that are not read yet, in
    /// one batch.
    pub fn prepare(&mut self) -> Result<()> {
        // Within a screen of the top of a window: the next one up.
        if self.partial && self.above.is_some() && self.top < self.height {
            self.read_up()?;
        }
        let end = (self.top + self.height).min(self.rows.len());
        let missing: Vec<u32> = self.rows[self.top.min(end)..end]
            .iter()
            .map(|r| r.node)
            .filter(|&n| !self.shown.contains_key(self.idx.id(n)))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if self.shown.len() + missing.len() > CACHE {
            self.shown.clear();
        }
        let ids: Vec<&str> = missing.iter().map(|&n| self.idx.id(n)).collect();
        let mut read = Vec::new();
        self.storage.visit_entries_by_id(&ids, &mut |at, e| {
            read.push((at, preview_in(&e, 1000, self.cwd.as_deref())));
            Ok(())
        })?;
        self.entries_read += read.len();
        for (at, preview) in read {
            let n = missing[at];
            let label = if self.idx.has(n, LABELLED) {
                self.storage
                    .label(self.idx.id(n))?
                    .map(|l| l.to_string_lossy())
            } else {
                None
            };
            self.shown
                .insert(self.idx.id(n).to_owned(), Shown { preview, label });
        }
        Ok(())
    }

    /// What row `n` shows, if read.
    pub fn shown(&self, n: u32) -> Option<&Shown> {
        self.shown.get(self.idx.id(n))
    }

    /// Whether `n` is on the active path / is the leaf.
    pub fn marks(&self, n: u32) -> (bool, bool) {
        (self.idx.has(n, ACTIVE), self.idx.has(n, LEAF))
    }

    /// The storage, to read an entry in full.
    pub fn storage(&self) -> &BoxedStorage {
        &self.storage
    }

    /// Searches this session's messages (the archive's index) and goes to
    /// the best hit; `false` when nothing matched.
    pub fn search(&mut self, archive: &dyn SessionArchive, query: &str) -> Result<bool> {
        let filter = SearchFilter {
            session: Some(&self.id),
            ..SearchFilter::default()
        };
        let hits: Vec<String> = archive
            .search_page(query, &filter, SEARCH_HITS, 0)?
            .into_iter()
            .map(|h| h.entry_id)
            .collect();
        let found = !hits.is_empty();
        self.search = Some((query.to_owned(), hits, 0));
        if found {
            self.go_to_hit(0);
        }
        Ok(found)
    }

    /// Searches like [`TreeState::search`] but leaves the cursor on the
    /// leaf: `n` goes to the first hit. The hits found.
    pub fn arm_search(&mut self, archive: &dyn SessionArchive, query: &str) -> Result<usize> {
        self.search(archive, query)?;
        // `search` went to the first hit (unfolding what hid it): back to the leaf.
        self.go_to_leaf();
        let Some((_, hits, at)) = &mut self.search else {
            return Ok(0);
        };
        *at = hits.len().saturating_sub(1);
        Ok(hits.len())
    }

    /// Goes to the next (`forward`) or previous hit of the last search.
    pub fn next_hit(&mut self, forward: bool) {
        let Some((_, hits, at)) = &self.search else {
            return;
        };
        if hits.is_empty() {
            return;
        }
        let len = hits.len();
        let next = if forward {
            (at + 1) % len
        } else {
            (at + len - 1) % len
        };
        self.go_to_hit(next);
    }

    fn go_to_hit(&mut self, i: usize) {
        let Some((_, hits, at)) = &mut self.search else {
            return;
        };
        *at = i;
        if let Some(n) = hits.get(i).and_then(|id| self.idx.find(id)) {
            self.reveal(n);
        }
    }
}
