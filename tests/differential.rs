//! Differential test against the reference implementation: pi's session
//! storage from `@earendil-works/pi-agent-core` 0.83.0, driven by the Node.js
//! harness in `tests/differential/` against `sessiontree rpc` on the jsonl,
//! memory and sqlite backends, and on a team archive on PostgreSQL when
//! `SESSIONTREE_TEST_PG` names a server (said to be skipped otherwise).
//!
//! Needs `node` and `npm` (this test fails, it does not skip, without them).
//! The npm package is installed into `tests/differential/node_modules` on
//! first use. Knobs (environment): `DIFF_SEQUENCES` (per backend, default
//! 250), `DIFF_SEED`, `DIFF_BACKENDS`, `DIFF_JOBS`, `DIFF_EXOTIC`, … — see
//! `tests/differential/run.mjs`.

#[path = "support/node.rs"]
mod node;

use std::path::{Path, PathBuf};
use std::process::Command;

fn harness_dir() -> PathBuf {
    node::repo_root().join("tests").join("differential")
}

/// Fails the test, saying what it needs, unless `name --version` runs.
fn require_tool(mut command: Command, name: &str) {
    match command.arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`{name} --version` failed ({}): the differential test needs Node.js and npm\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            panic!("`{name}` is not available ({e}): the differential test needs Node.js and npm")
        }
    }
}

/// The workload generator's binary (`sessiontree-bench`, the bench crate),
/// beside the product's. `cargo test --workspace` has built it already; a
/// plain `cargo test` builds it here.
fn generator_binary(product: &Path) -> PathBuf {
    let gen_bin =
        product.with_file_name(format!("sessiontree-bench{}", std::env::consts::EXE_SUFFIX));
    if !gen_bin.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "sessiontree-bench",
                "--bin",
                "sessiontree-bench",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("running cargo build -p sessiontree-bench");
        assert!(status.success(), "building the workload generator failed");
    }
    gen_bin
}

#[test]
fn sessiontree_matches_pi_reference() {
    require_tool(Command::new("node"), "node");
    require_tool(node::npm(), "npm");
    let dir = harness_dir();
    let reference = dir
        .join("node_modules")
        .join("@earendil-works")
        .join("pi-agent-core")
        .join("package.json");
    node::npm_install(
        &dir,
        &["install", "--no-audit", "--no-fund", "--ignore-scripts"],
        &[reference],
        "@earendil-works/pi-agent-core 0.83.0 in tests/differential",
    );
    node::note_postgres_skipped("the differential test");
    let bin = env!("CARGO_BIN_EXE_sessiontree");
    let gen_bin = generator_binary(Path::new(bin));
    let out = Command::new("node")
        .arg(dir.join("run.mjs"))
        .arg("--bin")
        .arg(bin)
        .arg("--gen-bin")
        .arg(&gen_bin)
        .env("SESSIONTREE_BIN", bin)
        .env("TZ", "UTC")
        .current_dir(node::repo_root())
        .output()
        .expect("running node tests/differential/run.mjs");
    node::assert_harness_passed(&out, "differential");
}
