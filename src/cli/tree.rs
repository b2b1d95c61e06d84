//! `sessiontree tree`: a session's tree as text, pi `/tree` style, for trees
//! of any size and shape.
//!
//! By default the **spine** is the active path, root first (`*`, the leaf
//! marked `← leaf`), long linear runs folded into `⋮ N more entries`, and
//! the side branches at each fork folded into one line. `--depth N` and
//! `--all` unfold side branches as blocks at one fixed indentation, however
//! deep they fork (see [`TreeArgs`]).
//!
//! Memory stays bounded: the session's skeleton ([`sessiontree::skeleton`]:
//! ids, parents, types, labels; from the SQLite archive's indexes without
//! any text, from other backends the log read in pages) goes into a compact
//! index (ids interned to `u32`, parents, flag bits, subtree sizes), and
//! only entries that get a line are read, one at a time, as their line is
//! written — plus, where the skeleton does not say, the messages a fold may
//! hide, to learn which are the user's (in batches, only on folded paths).
//! Nothing here recurses over the tree: every walk is a loop or an explicit
//! stack, so a deep or caterpillar-shaped tree cannot overflow the stack.

use super::columns::{fit, width};
use super::pager::{ColorChoice, Display, Printer, Style};
use super::{target, Cli};
use clap::Args;
use serde_json::{json, Value};
use sessiontree::preview::preview_in;
use sessiontree::skeleton::{SkeletonEntry, SkeletonItem, SkeletonParent};
use sessiontree::{Entry, EntryType, Error, Result, SessionStorage};
use std::collections::HashMap;
use std::hash::BuildHasher;

/// Arguments of `tree`.
#[derive(Debug, Args)]
#[command(after_help = "\
Layout: the spine (by default the active path, root first) runs down the left \
edge; `*` marks the active path, `← leaf` the leaf. Where side branches leave \
it, one line says how many and how many entries they hold (`├─ 2 other \
branches (9 entries)`). --depth N and --all show side branches as blocks \
indented once (`├─`/`└─`, one level in from the spine): each block follows \
its branch's first child; a fork inside a block gets a line there, and its \
branches follow as blocks of their own at the same indentation, headed \
`(from ID)`, never nested deeper. Lines stay within the terminal's width (--width; 120 when stdout is not a terminal).

Examples:
  sessiontree tree ffae                                # the active path, linear runs folded
  sessiontree tree ffae --around v1-00176 --no-pager   # the entries either side of one, whole
  sessiontree show session.jsonl --all --fold 0        # a pi file, every branch, nothing folded")]
pub struct TreeArgs {
    /// Session id, unique id prefix, or `.jsonl` path.
    pub session: String,
    /// Show only the subtree under this entry (its spine: the path to the
    /// leaf if the leaf is below it, else down each first child).
    #[arg(long, conflicts_with = "around")]
    pub from: Option<String>,
    /// Show the path through this entry (root to the leaf if the leaf is
    /// below it, else down each first child) with the 10 entries each side of
    /// it whole; the rest of the path is folded.
    #[arg(long, value_name = "ID")]
    pub around: Option<String>,
    /// Fold linear runs longer than this many entries into `⋮ N more entries`
    /// lines, keeping their first and last FOLD/2 entries, user messages,
    /// compactions, branch summaries, labelled entries and the leaf (0 = never fold).
    #[arg(long, default_value_t = 8)]
    pub fold: usize,
    /// Unfold side branches up to N forks away from the spine (0: each fork's
    /// side branches are one line).
    #[arg(long, default_value_t = 0, conflicts_with = "all")]
    pub depth: usize,
    /// Show every branch (side branches as blocks, see below).
    #[arg(long)]
    pub all: bool,
    /// Lines at most this many columns wide (default: the terminal's width,
    /// or 120 when stdout is not a terminal); previews take 72 at 120.
    #[arg(long, value_name = "COLUMNS", value_parser = clap::value_parser!(u16).range(40..))]
    pub width: Option<u16>,
    /// Write to stdout even on a terminal (no pager). The pager is `$PAGER`,
    /// else `less -R`; never used for `--json` or when stdout is not a terminal.
    #[arg(long)]
    pub no_pager: bool,
    /// Colour the leaf marker, labels, roles and branch lines (auto: on a
    /// terminal when `NO_COLOR` is unset or empty; never with `--json`).
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
}

impl TreeArgs {
    /// Pager and colour, for the printing path.
    pub fn display(&self) -> Display {
        Display {
            pager: !self.no_pager,
            color: self.color,
        }
    }
}

/// The widest line `tree` writes when the width is not known (stdout is
/// not a terminal, no `--width`), in terminal columns.
const DEFAULT_WIDTH: usize = 120;
/// The widest preview at [`DEFAULT_WIDTH`] (pi's `/tree` shows about this
/// much); other widths scale it, so a wide terminal shows more of each entry.
const PREVIEW: usize = 72;
/// Entries shown whole on each side of `--around`'s entry.
const AROUND: usize = 10;
/// Messages whose role is looked up per request, when the skeleton leaves it open.
const ROLE_BATCH: usize = 256;
/// Lines whose entries are read in one batch.
const READ_AHEAD: usize = 256;
/// Entry text kept from one batch at most; an entry past it is read again
/// when its line comes (a batch of screenshots must not fill memory).
const READ_AHEAD_BYTES: usize = 8 << 20;

/// No node (a root's parent, no leaf).
const NONE: u32 = u32::MAX;

// Flag bits of a node.
/// An entry answers to this id (not only named as a parent or label target).
const PRESENT: u16 = 1;
/// A user message (kept when a run is folded).
const USER: u16 = 1 << 1;
/// A compaction or branch summary (kept when a run is folded).
const MILESTONE: u16 = 1 << 2;
/// Has a label (per the log's label entries, latest wins).
const LABELLED: u16 = 1 << 3;
/// On the active path.
const ACTIVE: u16 = 1 << 4;
/// The leaf.
const LEAF: u16 = 1 << 5;
/// Reachable from a root: in the forest, not in or under a parent cycle.
const REACHED: u16 = 1 << 6;
/// On the spine being built (guards the upward walk against cycles).
const SPINE: u16 = 1 << 7;
/// A message whose role the skeleton left open (its text says whether it is
/// [`USER`]); looked up only where a fold asks.
const ROLE_OPEN: u16 = 1 << 8;
/// `parent` holds a log position (a [`SkeletonParent::At`]) until the
/// skeleton is read, then the node at it.
const PARENT_AT: u16 = 1 << 9;

/// Entry ids interned to dense `u32` numbers: one string arena and an
/// open-addressing table of numbers (about 20 bytes per id beyond its text,
/// where a `HashMap<String, u32>` costs three times that).
struct Ids {
    arena: String,
    ends: Vec<usize>,
    slots: Vec<u32>,
    hasher: std::hash::RandomState,
}

impl Ids {
    fn new() -> Self {
        Ids {
            arena: String::new(),
            ends: Vec::new(),
            slots: vec![NONE; 1024],
            hasher: std::hash::RandomState::new(),
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, n: u32) -> &str {
        let n = n as usize;
        let start = if n == 0 { 0 } else { self.ends[n - 1] };
        &self.arena[start..self.ends[n]]
    }

    /// The slot holding `id`, or the empty slot where it would go.
    fn slot(&self, id: &str) -> usize {
        let mask = self.slots.len() - 1;
        // Truncating the hash to usize keeps its low bits, which the mask uses.
        let mut s = self.hasher.hash_one(id) as usize & mask;
        while self.slots[s] != NONE && self.get(self.slots[s]) != id {
            s = (s + 1) & mask;
        }
        s
    }

    fn find(&self, id: &str) -> Option<u32> {
        Some(self.slots[self.slot(id)]).filter(|&n| n != NONE)
    }

    /// The number of `id`, and whether it is new.
    fn intern(&mut self, id: &str) -> Result<(u32, bool)> {
        let s = self.slot(id);
        if self.slots[s] != NONE {
            return Ok((self.slots[s], false));
        }
        let n = u32::try_from(self.len())
            .ok()
            .filter(|&n| n < NONE)
            .ok_or_else(|| Error::InvalidSession("too many entries for `tree`".into()))?;
        self.arena.push_str(id);
        self.ends.push(self.arena.len());
        self.slots[s] = n;
        // Keep the table at most half full, so probes stay short.
        if self.len() * 2 > self.slots.len() {
            let mut slots = vec![NONE; self.slots.len() * 2];
            let mask = slots.len() - 1;
            for m in 0..self.len() as u32 {
                let mut s = self.hasher.hash_one(self.get(m)) as usize & mask;
                while slots[s] != NONE {
                    s = (s + 1) & mask;
                }
                slots[s] = m;
            }
            self.slots = slots;
        }
        Ok((n, true))
    }
}

/// The session's shape, without its text: per node (an id), its parent,
/// log position, flags, subtree size and children (ordered as pi's `/tree`
/// lists them: the branch holding the leaf first, then log order).
struct Index {
    ids: Ids,
    parent: Vec<u32>,
    pos: Vec<u32>,
    flags: Vec<u16>,
    /// Entries in the subtree (0 for nodes not [`REACHED`]).
    size: Vec<u32>,
    /// `children[child_start[n]..child_start[n + 1]]` are `n`'s children.
    child_start: Vec<u32>,
    children: Vec<u32>,
    roots: Vec<u32>,
    leaf: u32,
    /// Entries read.
    entries: usize,
}

impl Index {
    /// Reads the session's skeleton and builds the index.
    fn build(storage: &dyn SessionStorage) -> Result<Index> {
        let leaf_id = storage.leaf_id()?;
        let mut idx = Index {
            ids: Ids::new(),
            parent: Vec::new(),
            pos: Vec::new(),
            flags: Vec::new(),
            size: Vec::new(),
            child_start: Vec::new(),
            children: Vec::new(),
            roots: Vec::new(),
            leaf: NONE,
            entries: 0,
        };
        // The node at each log position, for parents given by position.
        let mut at: Vec<u32> = Vec::new();
        storage.visit_skeleton(&mut |item| match item {
            SkeletonItem::Entry(e) => idx.add(&e, &mut at),
            SkeletonItem::Label { target, set } => {
                let t = idx.node(target)? as usize;
                if set {
                    idx.flags[t] |= LABELLED;
                } else {
                    idx.flags[t] &= !LABELLED;
                }
                Ok(())
            }
        })?;
        for n in 0..idx.ids.len() {
            if idx.flags[n] & PARENT_AT != 0 {
                idx.flags[n] &= !PARENT_AT;
                idx.parent[n] = at.get(idx.parent[n] as usize).copied().unwrap_or(NONE);
            }
        }
        drop(at);
        if let Some(id) = leaf_id {
            idx.leaf = idx
                .ids
                .find(&id)
                .filter(|&n| idx.has(n, PRESENT))
                .ok_or(Error::DanglingReference(id))?;
            idx.flags[idx.leaf as usize] |= LEAF;
            // The active path as pi's /tree marks it: every ancestor of the
            // leaf up to the root (a parent cycle just ends the walk).
            let mut n = idx.leaf;
            while n != NONE && idx.has(n, PRESENT) && !idx.has(n, ACTIVE) {
                idx.flags[n as usize] |= ACTIVE;
                n = idx.parent[n as usize];
            }
        }
        idx.link();
        Ok(idx)
    }

    /// Folds one entry in; where an id repeats, the entry later in the log
    /// replaces the other (it is the one `entry(id)` answers with).
    fn add(&mut self, e: &SkeletonEntry<'_>, at: &mut Vec<u32>) -> Result<()> {
        let n = self.node(e.id)?;
        let pos = u32::try_from(e.pos).unwrap_or(NONE - 1);
        if at.len() <= e.pos {
            at.resize(e.pos + 1, NONE);
        }
        at[e.pos] = n;
        self.entries += 1;
        let n = n as usize;
        if self.flags[n] & PRESENT != 0 && self.pos[n] > pos {
            return Ok(());
        }
        let mut flags = PRESENT | (self.flags[n] & LABELLED);
        match e.user {
            Some(true) => flags |= USER,
            Some(false) => {}
            None => flags |= ROLE_OPEN,
        }
        if e.entry_type == EntryType::Compaction.as_str()
            || e.entry_type == EntryType::BranchSummary.as_str()
        {
            flags |= MILESTONE;
        }
        self.pos[n] = pos;
        self.parent[n] = match e.parent {
            SkeletonParent::None => NONE,
            SkeletonParent::Id(p) => self.node(p)?,
            SkeletonParent::At(p) => {
                flags |= PARENT_AT;
                u32::try_from(p).unwrap_or(NONE)
            }
        };
        self.flags[n] = flags;
        Ok(())
    }

    /// The node of `id`, made if new.
    fn node(&mut self, id: &str) -> Result<u32> {
        let (n, new) = self.ids.intern(id)?;
        if new {
            self.parent.push(NONE);
            self.pos.push(0);
            self.flags.push(0);
        }
        Ok(n)
    }

    fn has(&self, n: u32, flag: u16) -> bool {
        self.flags[n as usize] & flag != 0
    }

    /// Children lists (one flat array), roots, and subtree sizes, without recursion.
    fn link(&mut self) {
        let len = self.ids.len();
        let present = |s: &Self, n: u32| n != NONE && s.has(n, PRESENT);
        let mut start = vec![0u32; len + 1];
        for n in 0..len as u32 {
            let p = self.parent[n as usize];
            if present(self, n) && present(self, p) {
                start[p as usize + 1] += 1;
            }
        }
        for i in 0..len {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut children = vec![0u32; start[len] as usize];
        let mut roots = Vec::new();
        for n in 0..len as u32 {
            if !present(self, n) {
                continue;
            }
            let p = self.parent[n as usize];
            if present(self, p) {
                children[fill[p as usize] as usize] = n;
                fill[p as usize] += 1;
            } else {
                roots.push(n);
            }
        }
        drop(fill);
        // pi lists the branch holding the leaf first, then the others in log order.
        let key = |n: &u32| (self.flags[*n as usize] & ACTIVE == 0, self.pos[*n as usize]);
        for i in 0..len {
            let list = &mut children[start[i] as usize..start[i + 1] as usize];
            if list.len() > 1 {
                list.sort_by_key(key);
            }
        }
        roots.sort_by_key(key);
        // Preorder from the roots with an explicit stack; sizes summed in
        // reverse preorder (children before parents).
        let mut order = Vec::with_capacity(len);
        let mut stack: Vec<u32> = roots.iter().rev().copied().collect();
        while let Some(n) = stack.pop() {
            if self.flags[n as usize] & REACHED != 0 {
                continue;
            }
            self.flags[n as usize] |= REACHED;
            order.push(n);
            stack.extend(
                children[start[n as usize] as usize..start[n as usize + 1] as usize]
                    .iter()
                    .rev(),
            );
        }
        let mut size = vec![0u32; len];
        for &n in order.iter().rev() {
            size[n as usize] += 1;
            let p = self.parent[n as usize];
            if present(self, p) {
                size[p as usize] = size[p as usize].saturating_add(size[n as usize]);
            }
        }
        self.size = size;
        self.child_start = start;
        self.children = children;
        self.roots = roots;
    }

    /// The children of `n` in the forest (none for a node in or under a
    /// parent cycle, so no walk can loop).
    fn kids(&self, n: u32) -> &[u32] {
        if !self.has(n, REACHED) {
            return &[];
        }
        let n = n as usize;
        &self.children[self.child_start[n] as usize..self.child_start[n + 1] as usize]
    }

    /// The path down from `n` through each first child (the active child
    /// where there is one), stopping at the leaf if `to_leaf`.
    fn descend(&self, n: u32, to_leaf: bool) -> Vec<u32> {
        let mut path = vec![n];
        let mut cur = n;
        while !(to_leaf && cur == self.leaf) {
            match self.kids(cur).first() {
                Some(&c) => {
                    path.push(c);
                    cur = c;
                }
                None => break,
            }
        }
        path
    }

    /// The path from the root down to `n` (up the parents; a parent cycle ends it).
    fn ascend(&mut self, n: u32) -> Vec<u32> {
        let mut path = Vec::new();
        let mut cur = n;
        while cur != NONE && self.has(cur, PRESENT) && !self.has(cur, SPINE) {
            self.flags[cur as usize] |= SPINE;
            path.push(cur);
            cur = self.parent[cur as usize];
        }
        for &m in &path {
            self.flags[m as usize] &= !SPINE;
        }
        path.reverse();
        path
    }

    /// Whether a folded run still shows `n`: user messages (the turns, and
    /// the only `fork --position before` targets), compactions, branch
    /// summaries, labelled entries and the leaf.
    /// (A message with [`ROLE_OPEN`] is decided by [`Writer::learn_roles`].)
    fn keeps(&self, n: u32) -> bool {
        self.has(n, USER | MILESTONE | LABELLED | LEAF)
    }

    fn entries_under(&self, heads: &[u32]) -> u64 {
        heads
            .iter()
            .map(|&h| u64::from(self.size[h as usize]))
            .sum()
    }
}

/// What the spine is.
enum SpineStart {
    /// The active path.
    Active,
    /// `--from`: the subtree under an entry.
    From(u32),
    /// `--around`: the path through an entry, windowed.
    Around(u32),
}

/// A session indexed and ready to write (errors that need no output, such as
/// an unknown session or entry, happen before anything is printed).
pub struct View {
    storage: Box<dyn SessionStorage>,
    idx: Index,
    start: SpineStart,
    cwd: Option<String>,
    fold: usize,
    depth: usize,
    /// The widest line, in columns.
    width: usize,
    /// The widest preview, in columns.
    preview: usize,
}

/// Opens the session and indexes it.
pub fn prepare(cli: &Cli, args: &TreeArgs) -> Result<View> {
    let storage = target::open_for_reading(cli, &args.session)?;
    let idx = Index::build(&*storage)?;
    let find = |id: &str| {
        idx.ids
            .find(id)
            .filter(|&n| idx.has(n, PRESENT))
            .ok_or_else(|| Error::EntryNotFound(id.to_owned()))
    };
    let start = match (&args.from, &args.around) {
        (Some(id), _) => SpineStart::From(find(id)?),
        (None, Some(id)) => SpineStart::Around(find(id)?),
        (None, None) => SpineStart::Active,
    };
    let cwd = storage.metadata()?.cwd;
    let width = args
        .width
        .map(usize::from)
        .or_else(super::columns::terminal_width)
        .unwrap_or(DEFAULT_WIDTH)
        .max(40);
    Ok(View {
        storage,
        idx,
        start,
        cwd,
        fold: args.fold,
        depth: if args.all { usize::MAX } else { args.depth },
        width,
        preview: PREVIEW * width / DEFAULT_WIDTH,
    })
}

/// Where a path is drawn.
enum Place<'a> {
    /// The spine: at the left edge, its side branches right below each fork.
    Spine,
    /// A block `level` forks from the spine; forks inside it defer their
    /// branches (`(side, fork)` pairs) to blocks after it.
    Block {
        level: usize,
        deferred: &'a mut Vec<(u32, u32)>,
    },
}

impl View {
    /// Writes the tree, line by line, as text or JSON.
    pub fn write(mut self, out: &mut Printer) -> Result<()> {
        let spine = match self.start {
            SpineStart::Active if self.idx.leaf == NONE => Vec::new(),
            SpineStart::Active => self.idx.ascend(self.idx.leaf),
            SpineStart::From(n) => self.idx.descend(n, true),
            SpineStart::Around(n) => {
                let mut path = self.idx.ascend(n);
                path.extend(self.idx.descend(n, true).into_iter().skip(1));
                path
            }
        };
        let leaf = (self.idx.leaf != NONE).then(|| self.idx.ids.get(self.idx.leaf));
        if out.json() {
            out.raw(&format!(r#"{{"leaf":{},"lines":["#, json!(leaf)));
        } else if self.idx.entries == 0 {
            out.piece(Style::Plain, "empty session");
            out.end_line();
        } else if leaf.is_none() {
            out.piece(Style::Plain, "(the leaf stands before the first entry)");
            out.end_line();
        }
        let mut w = Writer {
            view: &self,
            out,
            first_json: true,
            users: HashMap::new(),
            ahead: HashMap::new(),
        };
        let written = w.spine(&spine);
        if w.out.json() {
            // A failure half way ends the partial line, so that the error
            // object the caller prints stands on a line of its own.
            w.out.raw(if written.is_ok() { "]}\n" } else { "\n" });
        }
        written
    }
}

/// The fork a block leaves (`NONE`: the block is a root).
#[derive(Clone, Copy)]
struct BranchOf {
    fork: u32,
    /// Say so in the text: `(from ID)` (blocks deferred from a fork inside
    /// another block; those right below a fork line need not).
    announce: bool,
}

/// Writes the lines of one view.
struct Writer<'v, 'o> {
    view: &'v View,
    out: &'o mut Printer,
    first_json: bool,
    /// Whether each [`ROLE_OPEN`] message looked up so far is the user's.
    users: HashMap<u32, bool>,
    /// Entries read ahead in one batch for the lines about to be written,
    /// rather than one statement per line.
    ahead: HashMap<u32, Entry>,
}

/// One line's geometry: what stands before its content.
struct Gutter<'g> {
    text: &'g str,
    level: usize,
}

impl Writer<'_, '_> {
    fn idx(&self) -> &Index {
        &self.view.idx
    }

    /// The spine, with the other roots (when it starts at a root) before it.
    fn spine(&mut self, spine: &[u32]) -> Result<()> {
        let idx = self.idx();
        let at_root = !matches!(self.view.start, SpineStart::From(_));
        if at_root {
            let top = spine.first().copied();
            let others: Vec<u32> = idx
                .roots
                .iter()
                .copied()
                .filter(|&r| Some(r) != top)
                .collect();
            if !others.is_empty() {
                let tee = if spine.is_empty() {
                    "└─ "
                } else {
                    "┌─ "
                };
                let cont = if spine.is_empty() { "   " } else { "│  " };
                self.fork(tee, NONE, &others, spine.is_empty(), 0)?;
                if self.view.depth > 0 {
                    self.blocks(&others, NONE, cont, 1)?;
                }
            }
        }
        let shown = match self.view.start {
            SpineStart::Around(n) => {
                let at = spine.iter().position(|&m| m == n).unwrap_or(0);
                let last = spine.len().saturating_sub(1);
                spine
                    .iter()
                    .enumerate()
                    .map(|(i, _)| i == 0 || i == last || i.abs_diff(at) <= AROUND)
                    .collect()
            }
            _ => self.folded(spine, false)?,
        };
        self.path(spine, &shown, "", "", Place::Spine, None)
    }

    /// Which entries of `path` a fold shows: runs end at forks (an entry with
    /// side branches, always shown) and at the end; a run longer than `fold`
    /// shows its first and last `fold / 2` entries and what [`Index::keeps`].
    fn folded(&mut self, path: &[u32], block: bool) -> Result<Vec<bool>> {
        let fold = self.view.fold;
        let keep = fold / 2;
        // Per entry: shown whatever it is (`Some(true)`), or only if a fold keeps it.
        let mut fixed = vec![Some(true); path.len()];
        let mut start = 0;
        for i in 0..path.len() {
            let fork = self.side(path, i).next().is_some();
            if !(fork || i + 1 == path.len()) {
                continue;
            }
            let len = i + 1 - start;
            if fold > 0 && len > fold {
                for k in 0..len {
                    if !(k < keep || k + keep >= len || start + k == i) {
                        fixed[start + k] = None;
                    }
                }
            }
            start = i + 1;
        }
        let open: Vec<u32> = path
            .iter()
            .zip(&fixed)
            .filter(|&(&n, f)| {
                f.is_none() && self.idx().has(n, ROLE_OPEN) && !self.users.contains_key(&n)
            })
            .map(|(&n, _)| n)
            .collect();
        self.learn_roles(&open)?;
        let idx = self.idx();
        let mut shown: Vec<bool> = path
            .iter()
            .zip(&fixed)
            .map(|(&n, f)| {
                f.unwrap_or_else(|| idx.keeps(n) || self.users.get(&n).copied().unwrap_or(false))
            })
            .collect();
        // A block's first entry carries its header.
        if block && !shown.is_empty() {
            shown[0] = true;
        }
        Ok(shown)
    }

    /// Reads the messages `nodes` (whose role the skeleton left open), in
    /// batches, to learn which are the user's.
    fn learn_roles(&mut self, nodes: &[u32]) -> Result<()> {
        for batch in nodes.chunks(ROLE_BATCH) {
            let idx = &self.view.idx;
            let ids: Vec<&str> = batch.iter().map(|&n| idx.ids.get(n)).collect();
            let users = &mut self.users;
            for &n in batch {
                users.insert(n, false);
            }
            self.view
                .storage
                .visit_user_messages(&ids, &mut |i, user| {
                    if let Some(&n) = batch.get(i) {
                        users.insert(n, user);
                    }
                    Ok(())
                })?;
        }
        Ok(())
    }

    /// Reads in one batch the entries the next [`READ_AHEAD`] lines of `path`
    /// from `i` show: each shown entry, and a fork's only side branch head
    /// (its fork line names it).
    fn read_ahead(&mut self, path: &[u32], shown: &[bool], i: usize) -> Result<()> {
        let mut nodes = Vec::with_capacity(READ_AHEAD);
        let mut k = i;
        while k < path.len() && nodes.len() < READ_AHEAD {
            let hidden = shown[k..].iter().take_while(|s| !**s).count();
            if hidden >= 2 {
                k += hidden;
                continue;
            }
            nodes.push(path[k]);
            let mut side = self.side(path, k);
            if let (Some(only), None) = (side.next(), side.next()) {
                nodes.push(only);
            }
            k += 1;
        }
        self.ahead.clear();
        let idx = &self.view.idx;
        let ids: Vec<&str> = nodes.iter().map(|&n| idx.ids.get(n)).collect();
        let ahead = &mut self.ahead;
        let mut kept = 0;
        self.view.storage.visit_entries_by_id(&ids, &mut |at, e| {
            kept += e.json().len();
            if kept <= READ_AHEAD_BYTES {
                ahead.insert(nodes[at], e);
            }
            Ok(())
        })
    }

    /// The side branches at `path[i]`: its children except the next entry.
    fn side<'p>(&'p self, path: &'p [u32], i: usize) -> impl Iterator<Item = u32> + 'p {
        let next = path.get(i + 1).copied();
        self.idx()
            .kids(path[i])
            .iter()
            .copied()
            .filter(move |&c| Some(c) != next)
    }

    /// Writes a path: its entries (hidden stretches of two or more folded
    /// into one line), and after each fork its side branches.
    fn path(
        &mut self,
        path: &[u32],
        shown: &[bool],
        first: &str,
        cont: &str,
        mut place: Place<'_>,
        branch_of: Option<BranchOf>,
    ) -> Result<()> {
        let level = match &place {
            Place::Spine => 0,
            Place::Block { level, .. } => *level,
        };
        let mut i = 0;
        while i < path.len() && self.out.is_open() {
            let gutter = Gutter {
                text: if i == 0 { first } else { cont },
                level,
            };
            let hidden = shown[i..].iter().take_while(|s| !**s).count();
            if hidden < 2 && !self.ahead.contains_key(&path[i]) {
                self.read_ahead(path, shown, i)?;
            }
            if hidden >= 2 {
                let branches: usize = (i..i + hidden).map(|k| self.side(path, k).count()).sum();
                let active = self.idx().has(path[i], ACTIVE);
                self.fold_line(&gutter, hidden, branches, active);
                i += hidden;
                continue;
            }
            self.entry(&gutter, path[i], branch_of.filter(|_| i == 0))?;
            let side: Vec<u32> = self.side(path, i).collect();
            if !side.is_empty() {
                let end = i + 1 == path.len();
                match &mut place {
                    Place::Spine => {
                        let unfold = self.view.depth > 0;
                        let (tee, g) = if end {
                            ("└─ ", "   ")
                        } else {
                            ("├─ ", "│  ")
                        };
                        self.fork(tee, path[i], &side, end, 0)?;
                        if unfold {
                            self.blocks(&side, path[i], g, 1)?;
                        }
                    }
                    Place::Block { level, deferred } => {
                        let tee = format!("{cont}├─ ");
                        let unfold = *level < self.view.depth;
                        self.fork(&tee, path[i], &side, false, *level)?;
                        if unfold {
                            deferred.extend(side.iter().map(|&s| (s, path[i])));
                        }
                    }
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// The side branches `heads` of `fork` as blocks at one indentation
    /// after `gutter`; forks inside them add blocks after theirs (an explicit
    /// stack, depth first), never indented further.
    fn blocks(&mut self, heads: &[u32], fork: u32, gutter: &str, level: usize) -> Result<()> {
        let mut stack: Vec<(u32, u32, usize)> =
            heads.iter().rev().map(|&h| (h, fork, level)).collect();
        while let Some((head, from, level)) = stack.pop() {
            if !self.out.is_open() {
                break;
            }
            let path = self.idx().descend(head, false);
            let defers = level < self.view.depth
                && path
                    .iter()
                    .enumerate()
                    .any(|(i, _)| self.side(&path, i).next().is_some());
            let last = stack.is_empty() && !defers;
            let (first, cont) = if last {
                (format!("{gutter}└─ "), format!("{gutter}   "))
            } else {
                (format!("{gutter}├─ "), format!("{gutter}│  "))
            };
            let shown = self.folded(&path, true)?;
            let mut deferred = Vec::new();
            self.path(
                &path,
                &shown,
                &first,
                &cont,
                Place::Block {
                    level,
                    deferred: &mut deferred,
                },
                Some(BranchOf {
                    fork: from,
                    // Blocks straight off the fork line need no `(from …)`.
                    announce: from != fork,
                }),
            )?;
            stack.extend(deferred.iter().rev().map(|&(h, f)| (h, f, level + 1)));
        }
        Ok(())
    }

    fn entry_of(&mut self, n: u32) -> Result<Entry> {
        if let Some(e) = self.ahead.remove(&n) {
            return Ok(e);
        }
        let id = self.idx().ids.get(n);
        self.view
            .storage
            .entry(id)?
            .ok_or_else(|| Error::EntryNotFound(id.to_owned()))
    }

    fn label_of(&self, n: u32) -> Result<Option<String>> {
        if !self.idx().has(n, LABELLED) {
            return Ok(None);
        }
        Ok(self
            .view
            .storage
            .label(self.idx().ids.get(n))?
            .map(|l| l.to_string_lossy()))
    }

    fn json_line(&mut self, v: Value) {
        if !self.first_json {
            self.out.raw(",");
        }
        self.first_json = false;
        self.out.raw(&v.to_string());
    }

    /// One entry's line; `branch_of` is set on a block's first entry.
    fn entry(&mut self, g: &Gutter<'_>, n: u32, branch_of: Option<BranchOf>) -> Result<()> {
        let e = self.entry_of(n)?;
        let label = self.label_of(n)?;
        let idx = self.idx();
        // The index's id is the entry's (asking the entry would parse it).
        let entry_id = idx.ids.get(n);
        let active = idx.has(n, ACTIVE);
        let is_leaf = idx.has(n, LEAF);
        let cwd = self.view.cwd.as_deref();
        if self.out.json() {
            let mut v = json!({
                "kind": "entry",
                "level": g.level,
                "id": entry_id,
                "type": e.entry_type().as_str(),
                // JSON is for programs: the same whatever the terminal.
                "preview": preview_in(&e, PREVIEW, cwd),
                "label": label,
                "active": active,
                "leaf": is_leaf,
            });
            if let Some(b) = branch_of {
                v["branchOf"] = json!((b.fork != NONE).then(|| idx.ids.get(b.fork)));
            }
            self.json_line(v);
            return Ok(());
        }
        let mark = if active { "*" } else { " " };
        let from = match branch_of {
            Some(b) if b.announce && b.fork != NONE => {
                format!("(from {}) ", fit(&safe(idx.ids.get(b.fork)), 24))
            }
            _ => String::new(),
        };
        let id = fit(&safe(entry_id), 48);
        let label = label
            .map(|l| format!(" [{}]", fit(&safe(&l), 32)))
            .unwrap_or_default();
        let here = if is_leaf { "  ← leaf" } else { "" };
        let used = width(g.text) + 2 + width(&from) + width(&id) + width(&label) + 1 + width(here);
        let preview = fit(
            &safe(&preview_in(&e, 4 * self.view.preview, cwd)),
            self.view.preview.min(self.view.width.saturating_sub(used)),
        );
        self.out.piece(Style::Plain, g.text);
        self.out
            .piece(if active { Style::Active } else { Style::Plain }, mark);
        self.out.piece(Style::Plain, " ");
        self.out.piece(Style::Plain, &from);
        self.out.piece(Style::Plain, &id);
        self.out.piece(Style::Label, &label);
        self.out.piece(Style::Plain, " ");
        // A message's preview reads `role: text` (`toolResult [read]: text`);
        // the part before the first `: ` is coloured.
        let role = match e.facts().role.as_deref() {
            Some(r) if *e.entry_type() == EntryType::Message && preview.starts_with(&safe(r)) => {
                preview.find(": ").unwrap_or(0)
            }
            _ => 0,
        };
        self.out.piece(Style::Role, &preview[..role]);
        self.out.piece(Style::Plain, &preview[role..]);
        self.out.piece(Style::Leaf, here);
        self.out.end_line();
        Ok(())
    }

    /// A `⋮ N more entries` line.
    fn fold_line(&mut self, g: &Gutter<'_>, hidden: usize, branches: usize, active: bool) {
        if self.out.json() {
            self.json_line(json!({
                "kind": "fold", "level": g.level, "entries": hidden,
                "sideBranches": branches, "active": active,
            }));
            return;
        }
        let mark = if active { "*" } else { " " };
        let more = match branches {
            0 => String::new(),
            b => format!(" (+{b} side {})", plural(b, "branch", "branches")),
        };
        self.out.piece(Style::Plain, g.text);
        self.out
            .piece(if active { Style::Active } else { Style::Plain }, mark);
        self.out.piece(Style::Plain, " ");
        self.out
            .piece(Style::Fold, &format!("⋮ {hidden} more entries{more}"));
        self.out.end_line();
    }

    /// The line for the side branches `heads` at `fork` (`NONE`: the other
    /// roots), after `tee`. Folded (they get no blocks) it names them: the
    /// one branch's first entry, or the first entries' ids.
    fn fork(&mut self, tee: &str, fork: u32, heads: &[u32], end: bool, level: usize) -> Result<()> {
        let idx = self.idx();
        let entries = idx.entries_under(heads);
        let unfolded = level < self.view.depth;
        if self.out.json() {
            let ids: Vec<&str> = heads.iter().map(|&h| idx.ids.get(h)).collect();
            let at = (fork != NONE).then(|| idx.ids.get(fork));
            self.json_line(json!({
                "kind": "branches", "level": level, "at": at, "branches": heads.len(),
                "entries": entries, "heads": ids, "unfolded": unfolded,
            }));
            return Ok(());
        }
        let k = heads.len();
        // `other`: the spine goes on past this fork (or starts at a root).
        let other = !end;
        let what = format!(
            "{k} {}{}{} ({entries} {})",
            if other { "other " } else { "" },
            if fork == NONE { "root " } else { "" },
            plural(k, "branch", "branches"),
            plural(entries as usize, "entry", "entries"),
        );
        let mut text = what;
        if unfolded {
            if level > 0 {
                text.push_str(", below");
            }
        } else if let [only] = heads {
            let e = self.entry_of(*only)?;
            let room = self
                .view
                .width
                .saturating_sub(width(tee) + width(&text) + 2);
            let head = format!(
                "{} {}",
                safe(self.idx().ids.get(*only)),
                safe(&preview_in(
                    &e,
                    4 * self.view.preview,
                    self.view.cwd.as_deref()
                ))
            );
            text.push_str(": ");
            text.push_str(&fit(&head, room));
        } else {
            let room = self
                .view
                .width
                .saturating_sub(width(tee) + width(&text) + 2);
            let mut list = String::new();
            for (j, &h) in heads.iter().enumerate() {
                let id = safe(self.idx().ids.get(h));
                let sep = if j == 0 { "" } else { ", " };
                // Room for this id, and for `, …` if more follow.
                let tail = if j + 1 < k { 3 } else { 0 };
                if width(&list) + width(sep) + width(&id) + tail > room {
                    list.push_str(if j == 0 { "…" } else { ", …" });
                    break;
                }
                list.push_str(sep);
                list.push_str(&id);
            }
            text.push_str(": ");
            text.push_str(&list);
        }
        self.out.piece(Style::Plain, tee);
        self.out.piece(
            Style::Fork,
            &fit(&text, self.view.width.saturating_sub(width(tee))),
        );
        self.out.end_line();
        Ok(())
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// Text as the terminal will get it (the printer escapes again; escaping is
/// idempotent), so that its width can be measured here.
fn safe(s: &str) -> String {
    super::terminal_safe(s)
}
