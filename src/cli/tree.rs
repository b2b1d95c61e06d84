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
//! index ([`sessiontree::tree_index`]: ids interned to `u32`, parents, flag
//! bits, subtree sizes), and only entries that get a line are read, one at a
//! time, as their line is written — plus, where the skeleton does not say,
//! the messages a fold may hide, to learn which are the user's (in batches,
//! only on folded paths).
//! Nothing here recurses over the tree: every walk is a loop or an explicit
//! stack, so a deep or caterpillar-shaped tree cannot overflow the stack.

use super::columns::{fit, width};
use super::pager::{ColorChoice, Display, Printer, Style};
use super::{target, Cli};
use clap::Args;
use serde_json::{json, Value};
use sessiontree::preview::preview_in;
use sessiontree::tree_index::{Index, ACTIVE, LABELLED, LEAF, NONE, PRESENT, ROLE_OPEN};
use sessiontree::{Entry, EntryType, Error, Result, SessionStorage};
use std::collections::HashMap;

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
  sessiontree tree session.jsonl --all --fold 0        # a pi file, every branch, nothing folded")]
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
        idx.find(id)
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
        preview: preview_width(width),
    })
}

/// What the pager searches for to open at the leaf: the marker that ends
/// the leaf's line (the first line ending so; a preview cut to fit ends with
/// `…`, and only one ending exactly in "  ← leaf" could come first).
pub const LEAF_PATTERN: &str = "  ← leaf$";

impl View {
    /// Where the pager opens: at the `← leaf` line when the tree shows it
    /// (the active path is the spine), else at the top.
    pub fn pager_start(&self) -> Option<&'static str> {
        (matches!(self.start, SpineStart::Active) && self.idx.leaf() != NONE)
            .then_some(LEAF_PATTERN)
    }
}

/// The widest preview on lines `width` columns wide: [`PREVIEW`] at
/// [`DEFAULT_WIDTH`] and in proportion above it; below it, what is left of
/// the line after the id and the markers (about 24 columns), shrinking by a
/// column per 4 below [`DEFAULT_WIDTH`] — so an 80-column terminal still
/// reads 56 columns of each entry (in proportion it would be 48).
fn preview_width(width: usize) -> usize {
    let proportional = PREVIEW * width / DEFAULT_WIDTH;
    if width >= DEFAULT_WIDTH {
        return proportional;
    }
    let rest = width
        .saturating_sub(24)
        .min(PREVIEW - (DEFAULT_WIDTH - width).div_ceil(4));
    proportional.max(rest)
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
            SpineStart::Active if self.idx.leaf() == NONE => Vec::new(),
            SpineStart::Active => self.idx.ascend(self.idx.leaf()),
            SpineStart::From(n) => self.idx.descend(n, true),
            SpineStart::Around(n) => {
                let mut path = self.idx.ascend(n);
                path.extend(self.idx.descend(n, true).into_iter().skip(1));
                path
            }
        };
        let leaf = (self.idx.leaf() != NONE).then(|| self.idx.id(self.idx.leaf()));
        if out.json() {
            out.raw(&format!(r#"{{"leaf":{},"lines":["#, json!(leaf)));
        } else if self.idx.entries() == 0 {
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
                .roots()
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
            let ids: Vec<&str> = batch.iter().map(|&n| idx.id(n)).collect();
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
        let ids: Vec<&str> = nodes.iter().map(|&n| idx.id(n)).collect();
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
        let id = self.idx().id(n);
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
            .label(self.idx().id(n))?
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
        let entry_id = idx.id(n);
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
                v["branchOf"] = json!((b.fork != NONE).then(|| idx.id(b.fork)));
            }
            self.json_line(v);
            return Ok(());
        }
        let mark = if active { "*" } else { " " };
        let from = match branch_of {
            Some(b) if b.announce && b.fork != NONE => {
                format!("(from {}) ", fit(&safe(idx.id(b.fork)), 24))
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
            let ids: Vec<&str> = heads.iter().map(|&h| idx.id(h)).collect();
            let at = (fork != NONE).then(|| idx.id(fork));
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
                safe(self.idx().id(*only)),
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
                let id = safe(self.idx().id(h));
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
    super::field(s)
}

#[cfg(test)]
mod preview_tests {
    use super::preview_width;

    #[test]
    fn previews_take_72_columns_at_120_and_most_of_a_narrow_line() {
        assert_eq!(preview_width(120), 72);
        assert_eq!(preview_width(200), 120);
        assert_eq!(preview_width(80), 56);
        assert_eq!(preview_width(96), 66);
        assert_eq!(preview_width(119), 71);
        assert_eq!(preview_width(40), 24);
    }
}
