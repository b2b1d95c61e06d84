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

use std::path::{Path, PathBuf};
use std::process::Command;

fn harness_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("differential")
}

fn tool(name: &str) -> Command {
    // npm is a script on Windows.
    if cfg!(windows) && name == "npm" {
        let mut c = Command::new("cmd");
        c.args(["/C", "npm"]);
        c
    } else {
        Command::new(name)
    }
}

fn require_tool(name: &str) {
    match tool(name).arg("--version").output() {
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

fn ensure_reference_installed(dir: &Path) {
    let installed = dir
        .join("node_modules")
        .join("@earendil-works")
        .join("pi-agent-core")
        .join("package.json");
    if installed.exists() {
        return;
    }
    let out = tool("npm")
        .args(["install", "--no-audit", "--no-fund", "--ignore-scripts"])
        .current_dir(dir)
        .output()
        .expect("running npm install");
    assert!(
        out.status.success(),
        "npm install in {} failed ({}):\n{}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        installed.exists(),
        "npm install did not install @earendil-works/pi-agent-core"
    );
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
    require_tool("node");
    require_tool("npm");
    let dir = harness_dir();
    ensure_reference_installed(&dir);

    if std::env::var_os("SESSIONTREE_TEST_PG").is_none() {
        assert!(
            std::env::var_os("SESSIONTREE_REQUIRE_PG").is_none(),
            "SESSIONTREE_REQUIRE_PG is set but SESSIONTREE_TEST_PG is not"
        );
        // Past the harness's capture, so that it shows.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"skipped: the differential test's postgres backend (no server: SESSIONTREE_TEST_PG)\n",
        );
    }
    let bin = env!("CARGO_BIN_EXE_sessiontree");
    let gen_bin = generator_binary(Path::new(bin));
    let out = tool("node")
        .arg(dir.join("run.mjs"))
        .arg("--bin")
        .arg(bin)
        .arg("--gen-bin")
        .arg(&gen_bin)
        .env("SESSIONTREE_BIN", bin)
        .env("TZ", "UTC")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running node tests/differential/run.mjs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "differential test failed ({}); harness output above.\n{}",
        out.status,
        stdout
            .lines()
            .filter(|l| l.starts_with("differential:")
                || l.starts_with("MISMATCH")
                || l.starts_with("HARNESS"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
