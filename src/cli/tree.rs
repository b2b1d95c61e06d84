//! `sessiontree tree`: a session's whole tree as text, pi `/tree` style — the
//! active path (leaf to root) marked `*` and the leaf `← leaf`, the branch
//! holding the leaf first at each fork, labels in brackets, long linear runs
//! folded, and a one-line preview of each entry.

use super::{target, Cli, Report};
use clap::Args;
use serde_json::{json, Value};
use sessiontree::preview::preview_in;
use sessiontree::{Entry, EntryType, Error, Result, SessionStorage};
use std::collections::{HashMap, HashSet};

/// Arguments of `tree`.
#[derive(Debug, Args)]
pub struct TreeArgs {
    /// Session id, unique id prefix, or `.jsonl` path.
    pub session: String,
    /// Show only the subtree under this entry.
    #[arg(long)]
    pub from: Option<String>,
    /// Fold linear runs longer than this many entries into `⋮ N more entries`
    /// lines, keeping their first and last FOLD/2 entries, user messages,
    /// compactions, branch summaries, labelled entries and the leaf (0 = never fold).
    #[arg(long, default_value_t = 8)]
    pub fold: usize,
}

struct Tree {
    entries: Vec<Entry>,
    children: HashMap<String, Vec<usize>>,
    roots: Vec<usize>,
    active: HashSet<String>,
    labels: HashMap<String, String>,
    leaf: Option<String>,
    cwd: Option<String>,
}

/// Renders the tree; also returns it as nested JSON.
pub fn render(
    storage: &dyn SessionStorage,
    from: Option<&str>,
    fold: usize,
) -> Result<(String, Value)> {
    let entries = storage.entries(0, None)?;
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        by_id.insert(e.id(), i);
    }
    let mut children: HashMap<String, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        // Only the entry that answers to an id is a node (later duplicates win).
        if by_id.get(e.id()) != Some(&i) {
            continue;
        }
        match e.facts().parent().filter(|p| by_id.contains_key(p)) {
            Some(p) => children.entry(p.to_owned()).or_default().push(i),
            None => roots.push(i),
        }
    }
    let leaf = storage.leaf_id()?;
    // The active path as pi's /tree marks it: every ancestor of the leaf up to
    // the root (not cut at a compaction; a parent cycle just ends the walk).
    let mut active: HashSet<String> = HashSet::new();
    let mut cur = leaf.as_deref();
    while let Some(&i) = cur.and_then(|id| by_id.get(id)) {
        if !active.insert(entries[i].id().to_owned()) {
            break;
        }
        cur = entries[i].facts().parent();
    }
    let mut labels = HashMap::new();
    for e in &entries {
        if let Some(l) = storage.label(e.id())? {
            labels.insert(e.id().to_owned(), l.to_string_lossy());
        }
    }
    let from_index = match from {
        Some(id) => Some(
            *by_id
                .get(id)
                .ok_or_else(|| Error::EntryNotFound(id.to_owned()))?,
        ),
        None => None,
    };
    // pi lists the branch holding the leaf first, then the others in log order.
    let off_path = |k: &usize| !active.contains(entries[*k].id());
    for list in children.values_mut() {
        list.sort_by_key(off_path);
    }
    roots.sort_by_key(off_path);
    let tree = Tree {
        entries,
        children,
        roots,
        active,
        labels,
        leaf: leaf.clone(),
        cwd: storage.metadata()?.cwd,
    };
    let starts = from_index.map_or_else(|| tree.roots.clone(), |i| vec![i]);
    let mut out = String::new();
    if leaf.is_none() && !tree.entries.is_empty() {
        out.push_str("(the leaf stands before the first entry)\n");
    }
    let mut json_roots = Vec::new();
    let last = starts.len().saturating_sub(1);
    for (k, &r) in starts.iter().enumerate() {
        let (branch, cont) = if starts.len() > 1 {
            (
                if k == last { "└─ " } else { "├─ " },
                if k == last { "   " } else { "│  " },
            )
        } else {
            ("", "")
        };
        json_roots.push(tree.run(r, branch, cont, fold, &mut out));
    }
    Ok((out, json!({"leaf": leaf, "roots": json_roots})))
}

impl Tree {
    fn line(&self, i: usize, prefix: &str, out: &mut String) {
        let e = &self.entries[i];
        let mark = if self.active.contains(e.id()) {
            '*'
        } else {
            ' '
        };
        let label = self
            .labels
            .get(e.id())
            .map(|l| format!(" [{l}]"))
            .unwrap_or_default();
        let here = if self.leaf.as_deref() == Some(e.id()) {
            "  ← leaf"
        } else {
            ""
        };
        out.push_str(&format!(
            "{prefix}{mark} {}{label} {}{here}\n",
            e.id(),
            preview_in(e, 72, self.cwd.as_deref())
        ));
    }

    /// Whether a folded run still shows this entry: user messages (the turns,
    /// and the only `fork --position before` targets), compactions, branch
    /// summaries, labelled entries and the leaf.
    fn keeps(&self, i: usize) -> bool {
        let e = &self.entries[i];
        e.facts().is_user_message()
            || matches!(
                e.entry_type(),
                EntryType::Compaction | EntryType::BranchSummary
            )
            || self.labels.contains_key(e.id())
            || self.leaf.as_deref() == Some(e.id())
    }

    fn node_json(&self, i: usize) -> Value {
        let e = &self.entries[i];
        json!({
            "id": e.id(),
            "type": e.entry_type().as_str(),
            "active": self.active.contains(e.id()),
            "label": self.labels.get(e.id()),
            "preview": preview_in(e, 72, self.cwd.as_deref()),
        })
    }

    /// Prints the linear run starting at `i`, folding its middle, then its fork.
    fn run(
        &self,
        i: usize,
        first_prefix: &str,
        prefix: &str,
        fold: usize,
        out: &mut String,
    ) -> Value {
        let mut run = vec![i];
        let mut cur = i;
        while let Some([only]) = self.children.get(self.entries[cur].id()).map(Vec::as_slice) {
            run.push(*only);
            cur = *only;
        }
        // A run longer than `fold` shows its first and last `fold / 2` entries
        // and every entry `keeps` wants; each stretch of two or more others
        // becomes one `⋮` line. The active part of a run is a prefix ending at
        // the leaf, which is always shown, so a stretch is wholly on or off
        // the active path.
        let keep = fold / 2;
        let shown: Vec<bool> = run
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                fold == 0 || run.len() <= fold || k < keep || k >= run.len() - keep || self.keeps(n)
            })
            .collect();
        let mut k = 0;
        while k < run.len() {
            let hidden = shown[k..].iter().take_while(|s| !**s).count();
            if hidden >= 2 {
                let mark = if self.active.contains(self.entries[run[k]].id()) {
                    '*'
                } else {
                    ' '
                };
                out.push_str(&format!("{prefix}{mark} ⋮ {hidden} more entries\n"));
                k += hidden;
                continue;
            }
            self.line(run[k], if k == 0 { first_prefix } else { prefix }, out);
            k += 1;
        }
        let kids = self
            .children
            .get(self.entries[cur].id())
            .cloned()
            .unwrap_or_default();
        let last = kids.len().saturating_sub(1);
        let mut forks = Vec::new();
        for (k, &c) in kids.iter().enumerate() {
            let (b, cont) = if k == last {
                ("└─ ", "   ")
            } else {
                ("├─ ", "│  ")
            };
            forks.push(self.run(
                c,
                &format!("{prefix}{b}"),
                &format!("{prefix}{cont}"),
                fold,
                out,
            ));
        }
        json!({
            "entries": run.iter().map(|&n| self.node_json(n)).collect::<Vec<_>>(),
            "children": forks,
        })
    }
}

/// Runs `tree`.
pub fn run(cli: &Cli, args: &TreeArgs) -> Result<Report> {
    let storage = target::open(cli, &args.session)?;
    let (text, json) = render(&*storage, args.from.as_deref(), args.fold)?;
    Ok(Report::new(
        json,
        if text.is_empty() {
            "empty session\n".into()
        } else {
            text
        },
    ))
}
