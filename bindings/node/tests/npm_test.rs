//! Runs the npm package's own test suite (`npm test` in `bindings/node`)
//! under `cargo test`, so the README's test command and CI cover it: it
//! builds the addon, then runs the Node tests against pi-agent-core 0.83.0
//! (installed from the lockfile on first use). Fails, never skips, without
//! Node.js and npm.

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
    let mut test = npm();
    test.arg("test").current_dir(dir).env("TZ", "UTC");
    run(test, "npm test in bindings/node");
}
