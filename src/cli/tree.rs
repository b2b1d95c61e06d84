//! `sessiontree tree`: a session's whole tree as text, pi `/tree` style — the
//! active path marked `*`, labels in brackets, long linear runs folded, and a
//! one-line preview of each entry.

use super::browse::{one_line, truncate};
use super::{target, Cli, Report};
use clap::Args;
use serde_json::{json, Value};
use sessiontree::backend::sqlite::search::content_text;
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
    /// Fold linear runs longer than this many entries (0 = never fold).
    #[arg(long, default_value_t = 8)]
    pub fold: usize,
}

/// A one-line preview of an entry.
pub fn preview(e: &Entry, width: usize) -> String {
    let v = e.value();
    let s = match e.entry_type() {
        EntryType::Message => message_preview(&v["message"]),
        EntryType::ModelChange => format!(
            "model → {}/{}",
            v["provider"].as_str().unwrap_or("?"),
            v["modelId"].as_str().unwrap_or("?")
        ),
        EntryType::ThinkingLevelChange => {
            format!("thinking → {}", v["thinkingLevel"].as_str().unwrap_or("?"))
        }
        EntryType::ActiveToolsChange => format!("tools → {}", v["activeToolNames"]),
        EntryType::Compaction => format!(
            "[compaction: {}k tokens] {}",
            (v["tokensBefore"].as_f64().unwrap_or(0.0) / 1000.0).round(),
            one_line(v["summary"].as_str().unwrap_or(""))
        ),
        EntryType::BranchSummary => format!(
            "[branch summary] {}",
            one_line(v["summary"].as_str().unwrap_or(""))
        ),
        EntryType::Custom => format!("[custom {}]", v["customType"].as_str().unwrap_or("?")),
        EntryType::CustomMessage => format!(
            "[{}] {}",
            v["customType"].as_str().unwrap_or("custom"),
            one_line(&v.get("content").map(content_text).unwrap_or_default())
        ),
        EntryType::Label => format!(
            "[label {} → {}]",
            v["targetId"].as_str().unwrap_or("?"),
            v["label"].as_str().unwrap_or("(cleared)")
        ),
        EntryType::SessionInfo => format!("[name] {}", v["name"].as_str().unwrap_or("")),
        EntryType::Leaf => format!("[leaf → {}]", v["targetId"].as_str().unwrap_or("root")),
        EntryType::Other(t) => format!("[{t}]"),
    };
    truncate(&s, width)
}

/// `role: text` of a message, pi `/tree` style: an assistant turn without text
/// shows its tool calls (`[read: src/main.rs]`), or `(aborted)` / its error; a
/// tool result names its tool; a shell command shows `$ command`.
fn message_preview(m: &Value) -> String {
    let role = m["role"].as_str().unwrap_or("?");
    let text = one_line(&m.get("content").map(content_text).unwrap_or_default());
    let body = match role {
        "assistant" if text.is_empty() => {
            let calls: Vec<String> = m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["type"] == "toolCall")
                .map(|p| tool_call(p["name"].as_str().unwrap_or("tool"), &p["arguments"]))
                .collect();
            if !calls.is_empty() {
                calls.join(" ")
            } else if m["stopReason"] == "aborted" {
                "(aborted)".to_owned()
            } else if let Some(err) = m["errorMessage"].as_str() {
                format!("(error: {})", one_line(err))
            } else {
                "(no content)".to_owned()
            }
        }
        "toolResult" => match m["toolName"].as_str() {
            Some(tool) => return format!("toolResult [{tool}]: {text}"),
            None => text,
        },
        "bashExecution" => format!("$ {}", one_line(m["command"].as_str().unwrap_or(""))),
        _ => text,
    };
    format!("{role}: {body}")
}

/// `[name: argument]` for a tool call: the path, command or pattern it works
/// on, else its arguments as JSON.
fn tool_call(name: &str, args: &Value) -> String {
    let main = ["path", "file_path", "command", "pattern", "query", "url"]
        .iter()
        .find_map(|k| args[*k].as_str());
    let arg = match main {
        Some(a) => one_line(a),
        None if args.is_null() => String::new(),
        None => args.to_string(),
    };
    if arg.is_empty() {
        format!("[{name}]")
    } else {
        format!("[{name}: {}]", truncate(&arg, 48))
    }
}

struct Tree {
    entries: Vec<Entry>,
    children: HashMap<String, Vec<usize>>,
    roots: Vec<usize>,
    active: HashSet<String>,
    labels: HashMap<String, String>,
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
    let active: HashSet<String> = match &leaf {
        Some(l) => storage
            .path_to_root_or_compaction(Some(l))
            .unwrap_or_default()
            .iter()
            .map(|e| e.id().to_owned())
            .collect(),
        None => HashSet::new(),
    };
    let mut labels = HashMap::new();
    for e in &entries {
        if let Some(l) = storage.label(e.id())? {
            labels.insert(e.id().to_owned(), l);
        }
    }
    let starts = match from {
        Some(id) => vec![*by_id
            .get(id)
            .ok_or_else(|| Error::EntryNotFound(id.to_owned()))?],
        None => roots.clone(),
    };
    let tree = Tree {
        entries,
        children,
        roots,
        active,
        labels,
    };
    let mut out = String::new();
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
    let _ = tree.roots.len();
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
        out.push_str(&format!(
            "{prefix}{mark} {}{label} {}\n",
            e.id(),
            preview(e, 72)
        ));
    }

    fn node_json(&self, i: usize) -> Value {
        let e = &self.entries[i];
        json!({
            "id": e.id(),
            "type": e.entry_type().as_str(),
            "active": self.active.contains(e.id()),
            "label": self.labels.get(e.id()),
            "preview": preview(e, 72),
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
        let keep = fold / 2;
        let folded = fold > 0 && run.len() > fold;
        for (k, &n) in run.iter().enumerate() {
            let p = if k == 0 { first_prefix } else { prefix };
            if folded && k >= keep && k < run.len() - keep {
                if k == keep {
                    out.push_str(&format!(
                        "{prefix}  ⋮ {} more entries\n",
                        run.len() - 2 * keep
                    ));
                }
                continue;
            }
            let p = if k == 0 {
                p.to_owned()
            } else {
                prefix.to_owned()
            };
            self.line(n, &p, out);
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
