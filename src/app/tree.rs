//! `getTree()` and `getChildren()` as pi 1.6 builds them, including what its
//! JavaScript does with odd logs: a repeated id's latest entry stands in
//! every place an entry with that id hangs, orphans and self-parents are
//! roots, children are sorted by `new Date(timestamp).getTime()` with V8's
//! own sort (so invalid dates, whose differences are NaN, land where V8 puts
//! them). Built and written without recursion, however deep.

use super::labels::AppLabel;
use super::session::AppSession;
use crate::entry::{timestamp_millis, Entry};
use crate::error::{Error, Result};
use crate::storage::SessionStorage;
use std::collections::HashMap;

/// One node of pi's `getTree()`: the entry, its children, its label. Not
/// `Clone` (a derived clone would recurse as deep as the tree); dropped
/// without recursion.
#[derive(Debug)]
pub struct AppTreeNode {
    /// The entry (written as its stored text).
    pub entry: Entry,
    /// The children, oldest first.
    pub children: Vec<AppTreeNode>,
    /// The label, with its timestamp.
    pub label: Option<AppLabel>,
}

impl Drop for AppTreeNode {
    /// Dropped without recursion: a chain of 100,000 nodes would overflow
    /// the stack if each node dropped its children in turn.
    fn drop(&mut self) {
        let mut stack = std::mem::take(&mut self.children);
        while let Some(mut node) = stack.pop() {
            stack.append(&mut node.children);
        }
    }
}

impl AppTreeNode {
    /// A list of nodes as pi's `JSON.stringify(getTree())` writes it
    /// (entries as their stored text), written without recursion.
    pub fn list_to_json_text(nodes: &[AppTreeNode]) -> String {
        enum Step<'a> {
            Node(&'a AppTreeNode),
            Text(&'static str),
            Tail(&'a AppTreeNode),
        }
        let mut out = String::from("[");
        let mut stack: Vec<Step<'_>> = Vec::new();
        fn push_list<'a>(stack: &mut Vec<Step<'a>>, list: &'a [AppTreeNode]) {
            for (i, n) in list.iter().enumerate().rev() {
                stack.push(Step::Node(n));
                if i > 0 {
                    stack.push(Step::Text(","));
                }
            }
        }
        push_list(&mut stack, nodes);
        while let Some(step) = stack.pop() {
            match step {
                Step::Text(t) => out.push_str(t),
                Step::Tail(n) => {
                    out.push(']');
                    if let Some(label) = &n.label {
                        out.push_str(",\"label\":");
                        label.label.write_json(&mut out);
                        out.push_str(",\"labelTimestamp\":");
                        out.push_str(label.timestamp.json());
                    }
                    out.push('}');
                }
                Step::Node(n) => {
                    out.push_str("{\"entry\":");
                    out.push_str(n.entry.json());
                    out.push_str(",\"children\":[");
                    stack.push(Step::Tail(n));
                    push_list(&mut stack, &n.children);
                }
            }
        }
        out.push(']');
        out
    }
}

/// The tree as an arena: nodes by index (one per distinct id, the latest
/// entry), children lists of node indices (a node may hang in several
/// places, as in pi when ids repeat).
#[derive(Debug, Default)]
pub(crate) struct TreeArena {
    pub(crate) nodes: Vec<(Entry, Option<AppLabel>)>,
    pub(crate) children: Vec<Vec<usize>>,
    pub(crate) roots: Vec<usize>,
}

pub(crate) use super::v8sort::v8_sort;

/// The JavaScript time of a timestamp (`NaN` for an invalid date).
fn time(e: &Entry) -> f64 {
    timestamp_millis(e.timestamp()).map_or(f64::NAN, |ms| ms as f64)
}

impl TreeArena {
    /// The tree as pi's `JSON.stringify(getTree())` writes it: entries as
    /// their stored text, `label`/`labelTimestamp` only where set.
    pub(crate) fn to_json_text(&self) -> Result<String> {
        let mut out = String::new();
        self.write_json(&mut |t| {
            out.push_str(t);
            Ok(())
        })?;
        Ok(out)
    }

    /// [`TreeArena::to_json_text`] handed to `emit` a piece at a time, so
    /// that the answer is written as it is made, never held beside the tree.
    pub(crate) fn write_json(&self, emit: &mut dyn FnMut(&str) -> Result<()>) -> Result<()> {
        enum Step {
            Node(usize),
            Text(&'static str),
            Tail(usize),
        }
        emit("[")?;
        let mut stack: Vec<Step> = Vec::new();
        let mut depth_guard = 0usize;
        for (i, &r) in self.roots.iter().enumerate().rev() {
            stack.push(Step::Node(r));
            if i > 0 {
                stack.push(Step::Text(","));
            }
        }
        // Each step writes one node's head; a repeated id makes a DAG, and
        // a loop through repeated ids would never end (pi's JSON.stringify
        // throws on it): bounded by a generous budget.
        let budget = self.nodes.len().saturating_mul(64).max(1 << 20);
        let mut label_text = String::new();
        while let Some(step) = stack.pop() {
            match step {
                Step::Text(t) => emit(t)?,
                Step::Tail(n) => {
                    emit("]")?;
                    if let Some(label) = &self.nodes[n].1 {
                        label_text.clear();
                        label_text.push_str(",\"label\":");
                        label.label.write_json(&mut label_text);
                        label_text.push_str(",\"labelTimestamp\":");
                        label_text.push_str(label.timestamp.json());
                        emit(&label_text)?;
                    }
                    emit("}")?;
                }
                Step::Node(n) => {
                    depth_guard += 1;
                    if depth_guard > budget {
                        return Err(Error::InvalidSession(
                            "Converting circular structure to JSON: the tree loops through repeated ids"
                                .into(),
                        ));
                    }
                    emit("{\"entry\":")?;
                    emit(self.nodes[n].0.json())?;
                    emit(",\"children\":[")?;
                    stack.push(Step::Tail(n));
                    for (i, &c) in self.children[n].iter().enumerate().rev() {
                        stack.push(Step::Node(c));
                        if i > 0 {
                            stack.push(Step::Text(","));
                        }
                    }
                }
            }
        }
        emit("]")
    }

    /// [`TreeArena::to_json_text`] written to `out` as it is made.
    pub(crate) fn write_to(&self, out: &mut dyn std::io::Write) -> Result<()> {
        self.write_json(&mut |t| {
            out.write_all(t.as_bytes())
                .map_err(|e| Error::io("writing the tree", e))
        })
    }

    /// The arena as nested nodes (recursion-free; a loop is an error).
    pub(crate) fn into_nodes(self) -> Result<Vec<AppTreeNode>> {
        // Post-order: build children before parents.
        let mut out = Vec::new();
        let budget = self.nodes.len().saturating_mul(64).max(1 << 20);
        let mut steps = 0usize;
        for &r in &self.roots {
            let mut stack = vec![(r, false)];
            let mut finished: Vec<AppTreeNode> = Vec::new();
            while let Some((n, expanded)) = stack.pop() {
                steps += 1;
                if steps > budget {
                    return Err(Error::InvalidSession(
                        "the tree loops through repeated ids".into(),
                    ));
                }
                if expanded {
                    let k = self.children[n].len();
                    let children = finished.split_off(finished.len() - k);
                    finished.push(AppTreeNode {
                        entry: self.nodes[n].0.clone(),
                        children,
                        label: self.nodes[n].1.clone(),
                    });
                } else {
                    stack.push((n, true));
                    for &c in self.children[n].iter().rev() {
                        stack.push((c, false));
                    }
                }
            }
            out.extend(finished);
        }
        Ok(out)
    }
}

impl<S: SessionStorage> AppSession<S> {
    /// pi's `getTree()`, as an arena.
    pub(crate) fn tree_arena(&self) -> Result<TreeArena> {
        let mut entries = Vec::new();
        self.storage.visit_entries(0, None, &mut |text| {
            entries.push(Entry::from_checked_text(text));
            Ok(())
        })?;
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut arena = TreeArena::default();
        // nodeMap: one node per id, the latest entry (its label looked up by id).
        for e in &entries {
            let key = crate::json::JsString::new(e.id()).json().to_owned();
            let label = self.label_by_key(&key)?;
            match index.get(e.id()) {
                Some(&n) => arena.nodes[n] = (e.clone(), label),
                None => {
                    index.insert(e.id().to_owned(), arena.nodes.len());
                    arena.nodes.push((e.clone(), label));
                    arena.children.push(Vec::new());
                }
            }
        }
        for e in &entries {
            let Some(&node) = index.get(e.id()) else {
                continue;
            };
            match e.parent_id() {
                None => arena.roots.push(node),
                Some(p) if p == e.id() => arena.roots.push(node),
                Some(p) => match index.get(p) {
                    Some(&parent) => arena.children[parent].push(node),
                    None => arena.roots.push(node),
                },
            }
        }
        // Sort every node's children, popping from a stack seeded with the
        // roots, as pi does (a node reached twice is sorted twice).
        let mut stack: Vec<usize> = arena.roots.clone();
        let budget = arena.nodes.len().saturating_mul(64).max(1 << 20);
        let mut steps = 0usize;
        while let Some(n) = stack.pop() {
            steps += 1;
            if steps > budget {
                return Err(Error::InvalidSession(
                    "the tree loops through repeated ids (pi would not return)".into(),
                ));
            }
            let mut kids = std::mem::take(&mut arena.children[n]);
            let times: HashMap<usize, f64> =
                kids.iter().map(|&k| (k, time(&arena.nodes[k].0))).collect();
            v8_sort(&mut kids, |a, b| times[a] - times[b]);
            stack.extend(kids.iter().copied());
            arena.children[n] = kids;
        }
        Ok(arena)
    }

    /// pi's `getTree()`: roots in log order, children oldest first.
    pub fn tree(&self) -> Result<Vec<AppTreeNode>> {
        self.tree_arena()?.into_nodes()
    }

    /// pi's `JSON.stringify(getTree())`, written without recursion.
    pub fn tree_json_text(&self) -> Result<String> {
        self.tree_arena()?.to_json_text()
    }

    /// pi's `getChildren(parentId)`: the latest entry of each id (in the order
    /// ids first appeared) whose `parentId` is `parent` (`None`: `null`).
    pub fn children(&self, parent: Option<&str>) -> Result<Vec<Entry>> {
        // Every id in the order it first appeared, with its latest entry
        // kept only while that entry is a child of `parent`: the log's ids
        // are held, not its texts.
        let mut order: Vec<String> = Vec::new();
        let mut latest: HashMap<String, Option<Entry>> = HashMap::new();
        self.storage.visit_entries(0, None, &mut |text| {
            let e = Entry::from_checked_text(text);
            let id = e.id().to_owned();
            let kept = (e.parent_id() == parent).then_some(e);
            match latest.get_mut(&id) {
                Some(slot) => *slot = kept,
                None => {
                    order.push(id.clone());
                    latest.insert(id, kept);
                }
            }
            Ok(())
        })?;
        Ok(order
            .into_iter()
            .filter_map(|id| latest.remove(&id).flatten())
            .collect())
    }
}
