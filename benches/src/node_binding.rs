//! The Node binding (`bindings/node`) as a peer of the report: its own bench
//! script (`bench/bench.mjs`) run once, in process in Node, on one generated
//! session per size — the binding's archive and JSONL storages beside pi's
//! `JsonlSessionStorage` and pi's own SQLite store, same data, same run.
//!
//! The script does the measuring; this module installs and builds what it
//! needs (`npm ci`, `npm run build`), runs it and renders its rows.

use crate::peers::Node24;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `bindings/node` of this repository.
pub fn binding_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bindings/node")
}

/// Runs `npm args` in `dir`; why it failed, if it did.
fn npm(dir: &Path, args: &[&str], what: &str) -> std::result::Result<(), String> {
    let out = Command::new("npm")
        .current_dir(dir)
        .args(args)
        .output()
        .map_err(|e| format!("running npm: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(format!("{what} failed: {}", last.trim()))
}

/// Builds the binding's addon (`npm run build`: `cargo build --release -p
/// sessiontree-node`, then the library copied to `sessiontree.node`) every
/// time, never trusting an addon already there: one built before the code
/// changed would be benchmarked as this code. When nothing changed cargo's
/// build is a no-op and the copy is the same file.
pub fn build() -> std::result::Result<(), String> {
    eprintln!("bench: building the Node binding (npm run build)");
    npm(
        &binding_dir(),
        &["run", "build", "--silent"],
        "npm run build",
    )
}

/// Runs the binding's bench at `sizes` under `node24` (it then measures pi's
/// SQLite store too) or else `node` on PATH (its pi SQLite rows then say
/// skipped). `{"skipped": why}` when the binding cannot be built or run.
pub fn run(node24: Option<&Node24>, sizes: &[usize], quick: bool) -> Value {
    let dir = binding_dir();
    if !dir.join("bench/bench.mjs").is_file() {
        return json!({"skipped": format!("{} has no bench/bench.mjs", dir.display())});
    }
    if !dir
        .join("node_modules/@earendil-works/pi-agent-core")
        .is_dir()
    {
        eprintln!("bench: installing the Node binding's npm packages");
        if let Err(why) = npm(&dir, &["ci", "--no-audit", "--no-fund"], "npm ci") {
            return json!({"skipped": why});
        }
    }
    if let Err(why) = build() {
        return json!({"skipped": why});
    }
    let entries = sizes
        .iter()
        .filter(|&&s| s <= 100_000)
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    if entries.is_empty() {
        return json!({"skipped": "no size at or below 100,000 entries"});
    }
    let (repeat, reads) = if quick { ("3", "20") } else { ("7", "200") };
    let node = node24.map_or_else(|| PathBuf::from("node"), |n| n.node.clone());
    let mut c = Command::new(&node);
    c.current_dir(&dir).args([
        "bench/bench.mjs",
        "--json",
        "--entries",
        &entries,
        "--repeat",
        repeat,
        "--paths",
        reads,
        "--moves",
        reads,
    ]);
    // The report's own search for a Node >= 22.19 decides: without one the
    // script must not find one of its own (CI: the report says skipped).
    if node24.is_none() {
        c.arg("--no-pi-sqlite");
    }
    // The generator is this program: no second cargo build.
    if let Ok(exe) = std::env::current_exe() {
        c.env("SESSIONTREE_GEN_BIN", exe);
    }
    eprintln!(
        "bench: the Node binding's bench at {entries} entries ({})",
        node.display()
    );
    match c.output() {
        Err(e) => json!({"skipped": format!("running {}: {e}", node.display())}),
        out => crate::peers::node_answer(out, &node, "bench/bench.mjs"),
    }
}

/// The binding's rows as a markdown section.
pub fn render(v: &Value) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "\nThe Node binding (`bindings/node`, napi), in process from Node: pi's `Session` over the binding's archive (`archive`, SQLite) and JSONL (`jsonl-rs`) storages, pi's `JsonlSessionStorage` (`pi-jsonl`) and pi's own SQLite store (`pi-sqlite`, through `benches/pi-anchor/sqlite/anchor.mjs`), one generated forked session per size, same run. Ratio = the row's time / the archive's (same op, size and durability; > 1: the archive is faster).\n");
    if let Some(why) = v["skipped"].as_str() {
        let _ = writeln!(t, "- Node binding skipped: {why}");
        return t;
    }
    if let Some(e) = v["error"].as_str() {
        let _ = writeln!(t, "- Node binding: error: {e}");
        return t;
    }
    if let Some(why) = v["pi_sqlite"]["skipped"].as_str() {
        let _ = writeln!(
            t,
            "- pi SQLite skipped in the binding's bench: {why} (the report found no Node ≥ 22.19: see the peers above)\n"
        );
    }
    let _ = writeln!(
        t,
        "Node {}; median of {} resumes, mean over {} paths and {} move+append pairs.\n",
        v["node"].as_str().unwrap_or("?"),
        v["repeat"],
        v["paths"],
        v["moves"]
    );
    let _ = writeln!(t, "| entries | operation | storage | ms | ratio | |");
    let _ = writeln!(t, "|---:|---|---|---:|---:|---|");
    for r in v["rows"].as_array().into_iter().flatten() {
        if r["ms"].is_null() {
            continue;
        }
        let ms = r["ms"].as_f64().map_or("-".to_owned(), |m| {
            if m < 1.0 {
                format!("{m:.3}")
            } else {
                format!("{m:.1}")
            }
        });
        let ratio = r["ratio"]
            .as_f64()
            .map_or("-".to_owned(), |x| format!("{x:.2}×"));
        let _ = writeln!(
            t,
            "| {} | {} | {} | {ms} | {ratio} | {} |",
            r["size"],
            r["op"].as_str().unwrap_or(""),
            r["side"].as_str().unwrap_or(""),
            r["note"].as_str().unwrap_or("").replace('|', "/")
        );
    }
    t
}
