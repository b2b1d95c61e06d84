//! A pi home at a pi user's scale, generated in pi's layout and put through
//! every maintenance command as a user runs it: `import`, `ls`, `search`,
//! `stats`, `check`, `compact` and `sync` (to PostgreSQL when a server is
//! given), each a whole `sessiontree` process with its time, MB/s of the
//! home and peak RSS, at home sizes ten times apart (e.g. 50 MB, 500 MB,
//! 5 GB), so the report shows how each grows. `check` runs three times: the
//! first (whole) check of the fresh archive, a plain (incremental) check
//! after pi appended to a few sessions and `import` took the new lines, and
//! `check --full`.
//!
//! A home is thousands of sessions spread over `--<cwd>--` directories with
//! pi's file names ([`gen::generate`], [`Shape::Archive`]) holding 60 % of
//! its bytes, and two sessions of 20 % each made mostly of inline base64
//! screenshots in tool results (capped at 2 GB each), as the 1–2.6 GB files
//! pi users report are.

use crate::gen::{self, GenOptions, SessionSpec, Shape, SplitMix64, TreeShape};
use serde_json::{json, Value};
use sessiontree::{Error, Result};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Base64 characters of one generated screenshot (~225 KB of PNG).
const IMAGE_LEN: usize = 300_000;
/// The chance a tool result of a big session carries a screenshot.
const IMAGE_CHANCE: f64 = 0.25;
/// About how many bytes an entry of a big session takes (text ~940 B, a
/// third of the entries are tool results, a quarter of those an image).
const BIG_ENTRY_BYTES: u64 = 26_000;
/// About how many bytes a small session file takes.
const SMALL_FILE_BYTES: u64 = 500_000;

/// Parses a size such as `5G`, `500M`, `2.5G` or `123456` (bytes).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().trim_end_matches(['B', 'b']);
    let (num, mult) = match t.chars().last() {
        Some('G' | 'g') => (&t[..t.len() - 1], 1e9),
        Some('M' | 'm') => (&t[..t.len() - 1], 1e6),
        Some('K' | 'k') => (&t[..t.len() - 1], 1e3),
        _ => (t, 1.0),
    };
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 5G, 500M)"))?;
    if x <= 0.0 {
        return Err(format!("{s:?}: a home has a positive size"));
    }
    Ok((x * mult) as u64)
}

/// The home sizes measured for a largest one: a hundredth, a tenth and all
/// of it (none below 2 MB, at least two points).
pub fn points(max: u64) -> Vec<u64> {
    let mut v: Vec<u64> = [max / 100, max / 10, max]
        .into_iter()
        .filter(|&b| b >= 2_000_000)
        .collect();
    if v.len() < 2 {
        v = vec![(max / 4).max(500_000), max];
    }
    v.dedup();
    v
}

/// What [`generate_home`] wrote.
#[derive(Debug, Clone)]
pub struct Home {
    /// The agent directory (`PI_CODING_AGENT_DIR`); sessions under `sessions/`.
    pub dir: PathBuf,
    /// Session files written.
    pub files: usize,
    /// Entries written.
    pub entries: usize,
    /// Bytes of every session file.
    pub bytes: u64,
    /// Bytes and entries of each big (image) session.
    pub big: Vec<(u64, usize)>,
    /// Seconds to write it.
    pub secs: f64,
}

/// Generates a home of about `bytes` under `dir` (replacing what is there).
pub fn generate_home(dir: &Path, bytes: u64, seed: u64) -> Result<Home> {
    let t = Instant::now();
    let _ = std::fs::remove_dir_all(dir);
    let sessions = dir.join("sessions");
    let small_bytes = bytes * 6 / 10;
    let files = (small_bytes / SMALL_FILE_BYTES).max(10) as usize;
    let report = gen::generate(
        &sessions,
        &GenOptions {
            shape: Shape::Archive,
            entries: ((small_bytes / 940) as usize).max(files * 4),
            sessions: Some(files),
            seed,
            ..GenOptions::default()
        },
    )?;
    let mut home = Home {
        dir: dir.to_owned(),
        files: report.sessions.len(),
        entries: report.total_entries(),
        bytes: report.total_bytes(),
        big: Vec::new(),
        secs: 0.0,
    };
    let mut rng = SplitMix64::new(seed ^ 0x0b16_5e55);
    for (k, project) in ["screenshots-app", "design-review"].iter().enumerate() {
        let target = (bytes / 5).min(2_000_000_000);
        let entries = (target / BIG_ENTRY_BYTES).max(20) as usize;
        let created_ms = 1_748_736_000_000 + k as i64 * 3_600_000;
        let spec = SessionSpec {
            id: gen::uuid_v7(created_ms, &mut rng),
            created_ms,
            cwd: format!("/home/dev/projects/{project}"),
            entries,
            forks: entries / 100,
            compaction_every: 500,
            seed: rng.next_u64(),
            tree: TreeShape::Spread,
            dangling_root: false,
        };
        let d = sessions.join(sessiontree::layout::encode_cwd(&spec.cwd));
        std::fs::create_dir_all(&d)
            .map_err(|e| Error::io(format!("creating {}", d.display()), e))?;
        let path = d.join(sessiontree::layout::session_file_name(
            &gen::iso_millis(created_ms),
            &spec.id,
        ));
        let file = std::fs::File::create(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        let s = gen::write_session_with_images(&mut w, &spec, IMAGE_CHANCE, IMAGE_LEN)
            .and_then(|s| w.flush().map(|_| s))
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
        home.files += 1;
        home.entries += s.entries;
        home.bytes += s.bytes;
        home.big.push((s.bytes, s.entries));
    }
    home.secs = t.elapsed().as_secs_f64();
    Ok(home)
}

/// CPU seconds (user + system) a live process has used, from `/proc/PID/stat`.
fn cpu_secs(stat_path: &str) -> Option<f64> {
    let text = std::fs::read_to_string(stat_path).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Bytes a live process has read and written through system calls
/// (`rchar`, `wchar` of `/proc/PID/io`): how far a stopped command got.
fn io_bytes(io_path: &str) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(io_path).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("rchar:")?, field("wchar:")?))
}

/// What one whole process took.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Wall seconds, spawn to exit (to the kill when `stopped`).
    pub secs: f64,
    /// Peak RSS in kB (`VmHWM`, polled while it runs).
    pub peak_kb: u64,
    /// CPU seconds (user + system, polled: the last reading before exit).
    pub cpu_secs: f64,
    /// Bytes read and written through system calls (polled, last reading).
    pub io: (u64, u64),
    /// Killed at the time budget before it finished.
    pub stopped: bool,
}

/// One whole process: its wall and CPU seconds and peak RSS, its stdout, or
/// why it failed. With a `budget` the process is killed once it has run
/// that long and the result says `stopped` (every command the home runs
/// leaves the archive whole when killed: each writes in transactions).
pub fn run_measured(
    cmd: &mut Command,
    out_file: &Path,
    budget: Option<Duration>,
) -> Result<(Measured, String)> {
    let stdout = std::fs::File::create(out_file)
        .map_err(|e| Error::io(format!("creating {}", out_file.display()), e))?;
    let t = Instant::now();
    let mut child = cmd
        .stdout(stdout)
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| Error::io("spawning a measured command".to_owned(), e))?;
    let status_path = format!("/proc/{}/status", child.id());
    let stat_path = format!("/proc/{}/stat", child.id());
    let io_path = format!("/proc/{}/io", child.id());
    let mut peak = 0u64;
    let mut cpu = 0.0f64;
    let mut io = (0u64, 0u64);
    let mut stopped = false;
    let mut stderr = child.stderr.take();
    // Drain stderr on a thread so a chatty child never blocks on a full pipe.
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = stderr.as_mut() {
            let _ = std::io::Read::read_to_string(e, &mut s);
        }
        s
    });
    let mut nap = Duration::from_millis(1);
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_path) {
            if let Some(kb) = text
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
            {
                peak = peak.max(kb);
            }
        }
        if let Some(c) = cpu_secs(&stat_path) {
            cpu = cpu.max(c);
        }
        if let Some((r, w)) = io_bytes(&io_path) {
            io = (io.0.max(r), io.1.max(w));
        }
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(Error::io("waiting for a measured command".to_owned(), e)),
        }
        if budget.is_some_and(|b| t.elapsed() >= b) {
            // SIGKILL, as a user's kill -9 or a power cut: the command's
            // transactions leave what it finished in place.
            let _ = child.kill();
            stopped = true;
            break child
                .wait()
                .map_err(|e| Error::io("waiting for a killed command".to_owned(), e))?;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    };
    let secs = t.elapsed().as_secs_f64();
    let err = errs.join().unwrap_or_default();
    let out = std::fs::read_to_string(out_file).unwrap_or_default();
    if !status.success() && !stopped {
        let line = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(Error::Usage(format!("exit {status}: {}", line.trim())));
    }
    Ok((
        Measured {
            secs,
            peak_kb: peak,
            cpu_secs: cpu,
            io,
            stopped,
        },
        out,
    ))
}

/// `url` with its database name replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let path_start = rest.find('/').map(|i| scheme_end + 3 + i);
    let query_start = url.find('?');
    match (path_start, query_start) {
        (Some(p), Some(q)) if p < q => format!("{}/{db}{}", &url[..p], &url[q..]),
        (Some(p), None) => format!("{}/{db}", &url[..p]),
        (None, Some(q)) => format!("{}/{db}{}", &url[..q], &url[q..]),
        _ => format!("{url}/{db}"),
    }
}

/// Runs one statement through psql on `url`; its output, unaligned.
fn psql(url: &str, sql: &str) -> std::result::Result<String, String> {
    let out = Command::new("psql")
        .args([url, "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .map_err(|e| format!("running psql: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A fresh, empty database `db` on the server of `url` (psql); its URL.
pub(crate) fn fresh_database(url: &str, db: &str) -> std::result::Result<String, String> {
    psql(url, &format!("DROP DATABASE IF EXISTS {db}"))?;
    psql(url, &format!("CREATE DATABASE {db}"))?;
    Ok(with_database(url, db))
}

fn file_bytes(p: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{}{s}", p.display())).ok())
        .map(|m| m.len())
        .sum()
}

/// Free bytes of the file system holding `dir` (`df`), if it can be asked.
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// How the homes are measured.
#[derive(Debug, Clone, Default)]
pub struct HomeOptions {
    /// The home sizes (bytes), smallest first ([`points`]).
    pub sizes: Vec<u64>,
    /// Seed of the generated homes.
    pub seed: u64,
    /// A PostgreSQL server for `sync` (a fresh database per home, dropped after).
    pub pg: Option<String>,
    /// Keep the generated homes (and the sync databases).
    pub keep: bool,
    /// `compact` runs only on homes up to this many bytes.
    pub compact_max: u64,
    /// Seconds a command may run before it is stopped and recorded as
    /// stopped (how far it got, at what rate), so one slow command does
    /// not hold up the rest of the report ([`parse_budget`]).
    pub budget: Budget,
}

/// Time budgets of the home's commands: one for every command, and any
/// per command (`compact=300`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budget {
    /// Seconds for every command not named.
    pub all: Option<f64>,
    /// Seconds per named command.
    pub per_op: Vec<(String, f64)>,
}

impl Budget {
    /// The seconds `op` may run, if limited.
    pub fn of(&self, op: &str) -> Option<f64> {
        self.per_op
            .iter()
            .find(|(o, _)| o == op)
            .map(|(_, s)| *s)
            .or(self.all)
    }

    /// As the report states it.
    pub fn describe(&self) -> Option<String> {
        let mut parts: Vec<String> = self
            .per_op
            .iter()
            .map(|(o, s)| format!("`{o}` {s:.0} s"))
            .collect();
        if let Some(a) = self.all {
            parts.push(format!("every other command {a:.0} s"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// Parses `--home-budget`: `SECS` for every command and/or `OP=SECS` per
/// command, comma-separated (`600,compact=300,sync=300`).
pub fn parse_budget(s: &str) -> std::result::Result<Budget, String> {
    const OPS: [&str; 7] = [
        "import", "ls", "search", "stats", "check", "compact", "sync",
    ];
    let mut b = Budget::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (op, secs) = match part.split_once('=') {
            Some((op, secs)) => (Some(op.trim()), secs),
            None => (None, part),
        };
        let secs: f64 = secs
            .trim()
            .parse()
            .ok()
            .filter(|x: &f64| *x > 0.0)
            .ok_or_else(|| format!("{part:?}: a budget is a positive number of seconds"))?;
        match op {
            Some(op) if OPS.contains(&op) => b.per_op.push((op.to_owned(), secs)),
            Some(op) => return Err(format!("{op:?} is not one of {}", OPS.join(", "))),
            None => b.all = Some(secs),
        }
    }
    Ok(b)
}

/// Generates each home of `opts.sizes` under `work` in turn, runs the
/// commands on it and (unless `keep`) deletes it. Rows: one per (command,
/// home size).
pub fn measure(st: &Path, work: &Path, opts: &HomeOptions) -> Result<Value> {
    let mut rows = Vec::new();
    let mut homes = Vec::new();
    std::fs::create_dir_all(work)
        .map_err(|e| Error::io(format!("creating {}", work.display()), e))?;
    for (i, &bytes) in opts.sizes.iter().enumerate() {
        // The home, its archive (~0.65× the home) and compact's VACUUM copy
        // of it are on disk at once; the home's files go before `sync`.
        let need = bytes * 2 + bytes / 2;
        if let Some(free) = free_bytes(work).filter(|&f| f < need) {
            return Err(Error::Usage(format!(
                "a {:.1} GB home needs about {:.1} GB free under {}; {:.1} GB are",
                bytes as f64 / 1e9,
                need as f64 / 1e9,
                work.display(),
                free as f64 / 1e9
            )));
        }
        let dir = work.join(format!("home-{bytes}"));
        eprintln!(
            "bench: generating a {:.0} MB pi home in {}",
            bytes as f64 / 1e6,
            dir.display()
        );
        let home = generate_home(&dir, bytes, opts.seed ^ bytes)?;
        eprintln!(
            "bench: {:.0} MB in {} files, {} entries, in {:.0} s",
            home.bytes as f64 / 1e6,
            home.files,
            home.entries,
            home.secs
        );
        let mb = home.bytes as f64 / 1e6;
        let db = dir.join("archive.db");
        let out = dir.join("stdout.txt");
        let mut notes: Vec<Value> = Vec::new();
        // Set once `import` is stopped: every later command of this home
        // runs on the part imported, so its MB/s of the home is no measure.
        let mut partial = false;
        // `progress` says how far a stopped command got (`None`: from its I/O alone).
        let mut record = |op: &str,
                          args: &[&str],
                          extra: Value,
                          progress: &dyn Fn() -> Option<Value>|
         -> Result<()> {
            let started = Instant::now();
            eprintln!("bench: home {mb:.0} MB: {op}");
            let mut c = Command::new(st);
            c.arg("--db").arg(&db).args(args);
            let budget = opts.budget.of(op);
            let row = match run_measured(&mut c, &out, budget.map(Duration::from_secs_f64)) {
                Ok((m, _)) if m.stopped => {
                    let mut r = json!({"op": op, "home_mb": mb, "stopped_secs": m.secs,
                        "budget_secs": budget, "cpu_secs": m.cpu_secs,
                        "peak_rss_mb": m.peak_kb as f64 / 1024.0, "archive_mb": file_bytes(&db) as f64 / 1e6,
                        "read_mb": m.io.0 as f64 / 1e6, "written_mb": m.io.1 as f64 / 1e6,
                        // Not finished in the budget: the whole home at this
                        // command's speed takes longer, so its MB/s is below this.
                        "mb_per_s_below": mb / m.secs, "extra": extra});
                    if let Some(p) = progress() {
                        r["progress"] = p;
                    }
                    r
                }
                Ok((m, stdout)) => {
                    let mut r = json!({"op": op, "home_mb": mb, "secs": m.secs, "mb_per_s": mb / m.secs,
                    "cpu_secs": m.cpu_secs, "mb_per_cpu_s": mb / m.cpu_secs.max(0.01),
                    "peak_rss_mb": m.peak_kb as f64 / 1024.0, "archive_mb": file_bytes(&db) as f64 / 1e6,
                    "read_mb": m.io.0 as f64 / 1e6, "written_mb": m.io.1 as f64 / 1e6, "extra": extra});
                    // `check --json` says what it read (sessions whole, entries).
                    if let Ok(v) = serde_json::from_str::<Value>(&stdout) {
                        if v["checked"].is_object() {
                            r["checked"] = v["checked"].clone();
                        }
                    }
                    r
                }
                Err(e) => json!({"op": op, "home_mb": mb, "error": e.to_string()}),
            };
            eprintln!(
                "bench: home {mb:.0} MB: {op} {} in {:.0} s",
                if row["stopped_secs"].is_number() {
                    "stopped"
                } else if row["error"].is_string() {
                    "failed"
                } else {
                    "done"
                },
                started.elapsed().as_secs_f64()
            );
            let mut row = row;
            if partial {
                row["on_partial_archive"] = json!(true);
            }
            if op == "import" && row["stopped_secs"].is_number() {
                partial = true;
            }
            rows.push(row);
            Ok(())
        };
        let none = || None;
        let sessions = home.dir.join("sessions");
        let sessions_s = sessions.to_string_lossy().into_owned();
        record(
            "import",
            &["--json", "import", "--quiet", &sessions_s],
            json!({}),
            &none,
        )?;
        record("ls", &["ls"], json!({}), &none)?;
        record(
            "search",
            &["search", gen::SEARCH_TERMS[0]],
            json!({}),
            &none,
        )?;
        record("stats", &["stats"], json!({}), &none)?;
        // The first check of a fresh archive reads every entry (a whole
        // check); then pi appends to a few sessions and `import` takes their
        // new lines, and a plain check reads only those (incremental), and
        // `check --full` everything again.
        record("check", &["--json", "check"], json!({}), &none)?;
        match append_as_pi(&sessions, APPENDED_SESSIONS, APPENDED_ENTRIES, opts.seed) {
            Ok(files) => {
                let mut args = vec!["import".to_owned(), "--quiet".to_owned()];
                args.extend(files.iter().map(|f| f.to_string_lossy().into_owned()));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let appended =
                    json!({"sessions": files.len(), "entries": files.len() * APPENDED_ENTRIES});
                record(IMPORT_APPENDED, &args, appended.clone(), &none)?;
                record(CHECK_INCREMENTAL, &["--json", "check"], appended, &none)?;
            }
            Err(e) => {
                notes.push(json!({"op": CHECK_INCREMENTAL, "home_mb": mb, "error": e.to_string()}))
            }
        }
        record(CHECK_FULL, &["--json", "check", "--full"], json!({}), &none)?;
        if home.bytes <= opts.compact_max {
            record("compact", &["compact", "--quiet"], json!({}), &none)?;
            // A repeat compact keeps the dictionary that still serves and
            // leaves what is encoded with it (issue 42.2): its own row.
            record("compact again", &["compact", "--quiet"], json!({}), &none)?;
        } else {
            notes.push(json!({"op": "compact", "home_mb": mb, "skipped": format!("not run above {:.0} MB (--home-compact-max)", opts.compact_max as f64 / 1e6)}));
        }
        if !opts.keep {
            // `sync` reads the archive only: the home's files make room for
            // the PostgreSQL copy.
            let _ = std::fs::remove_dir_all(&sessions);
        }
        let sync_db = format!("sessiontree_bench_home_{i}");
        match opts.pg.as_deref() {
            Some(url) => match fresh_database(url, &sync_db) {
                Ok(to) => {
                    let entries = home.entries;
                    let count = || {
                        psql(&to, "SELECT count(*) FROM entries")
                            .ok()
                            .and_then(|n| n.parse::<u64>().ok())
                            .map(|n| json!({"entries_copied": n, "entries_in_home": entries}))
                    };
                    record(
                        "sync",
                        &["sync", "--to", &to],
                        json!({"to": "a fresh database on the given server", "entries": entries}),
                        &count,
                    )?;
                    if !opts.keep {
                        let _ = psql(url, &format!("DROP DATABASE IF EXISTS {sync_db}"));
                    }
                }
                Err(e) => notes.push(json!({"op": "sync", "home_mb": mb, "error": e})),
            },
            None => {
                notes.push(json!({"op": "sync", "home_mb": mb, "skipped": "no --pg server given"}))
            }
        }
        rows.append(&mut notes);
        homes.push(json!({"target_bytes": bytes, "bytes": home.bytes, "files": home.files, "entries": home.entries,
            "big_sessions": home.big.iter().map(|(b, e)| json!({"bytes": b, "entries": e})).collect::<Vec<_>>(),
            "generate_secs": home.secs}));
        if !opts.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(
        json!({"homes": homes, "rows": rows, "growth": growth(&rows), "budget": opts.budget.describe()}),
    )
}

/// The row of `import` of the lines pi appended to a few sessions.
const IMPORT_APPENDED: &str = "import of lines appended";
/// The row of the plain (incremental) `check` after those appends.
const CHECK_INCREMENTAL: &str = "check after appends";
/// The row of `check --full` (a whole check, after the incremental one).
const CHECK_FULL: &str = "check --full";
/// Sessions pi appends to before the incremental check.
const APPENDED_SESSIONS: usize = 5;
/// Entries appended to each.
const APPENDED_ENTRIES: usize = 4;
/// Files above this size are not picked to append to (their last line is
/// read whole to find the entry to append after).
const APPEND_MAX_FILE: u64 = 50_000_000;

/// Appends `entries` message entries to each of `count` session files under
/// `dir` (spread over the sorted list, none above [`APPEND_MAX_FILE`]), each
/// the child of the file's last entry, as pi appends to the session it
/// resumes. The files appended to.
pub fn append_as_pi(dir: &Path, count: usize, entries: usize, seed: u64) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let read =
            std::fs::read_dir(&d).map_err(|e| Error::io(format!("reading {}", d.display()), e))?;
        for e in read {
            let e = e.map_err(|e| Error::io(format!("reading {}", d.display()), e))?;
            let p = e.path();
            let meta = e
                .metadata()
                .map_err(|e| Error::io(format!("reading {}", p.display()), e))?;
            if meta.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") && meta.len() <= APPEND_MAX_FILE {
                files.push(p);
            }
        }
    }
    files.sort();
    let step = (files.len() / count.max(1)).max(1);
    let picked: Vec<PathBuf> = files.into_iter().step_by(step).take(count).collect();
    let mut rng = SplitMix64::new(seed ^ 0x0a99_e7d5);
    for path in &picked {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let mut parent: String = serde_json::from_str::<Value>(last)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_owned))
            .ok_or_else(|| {
                Error::Usage(format!("{}: its last line has no entry id", path.display()))
            })?;
        let mut out = String::new();
        for k in 0..entries {
            let id = format!("{:08x}", rng.next_u64() as u32);
            // After every generated timestamp (2025): the newest entries.
            let at = 1_780_000_000_000 + k as i64 * 1_000;
            out.push_str(&gen::message_entry(rng.next_u64(), &id, Some(&parent), at));
            out.push('\n');
            parent = id;
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        f.write_all(out.as_bytes())
            .map_err(|e| Error::io(format!("appending to {}", path.display()), e))?;
    }
    Ok(picked)
}

/// Per command: time per MB and peak RSS at the largest home over the
/// smallest (≤ 1: linear or better; RSS near 1: bounded memory), over the
/// homes where it finished; `stopped_*` names a larger home where it was
/// stopped at the budget (its time per MB is then at least that bound).
fn growth(rows: &[Value]) -> Vec<Value> {
    let mb = |x: &Value| x["home_mb"].as_f64().unwrap_or(0.0);
    let mut out = Vec::new();
    for op in [
        "import", "ls", "search", "stats", "check", CHECK_FULL, "compact", "sync",
    ] {
        let mut r: Vec<&Value> = rows
            .iter()
            .filter(|r| r["op"] == op && r["secs"].is_number() && r["on_partial_archive"] != true)
            .collect();
        r.sort_by(|a, b| mb(a).total_cmp(&mb(b)));
        let (Some(lo), Some(hi)) = (r.first(), r.last()) else {
            continue;
        };
        if r.len() < 2 {
            continue;
        }
        let per = |x: &Value| x["secs"].as_f64().unwrap_or(f64::NAN) / mb(x);
        let mut g = json!({"op": op, "from_mb": lo["home_mb"], "to_mb": hi["home_mb"],
            "secs_per_mb_growth": per(hi) / per(lo),
            "rss_growth": hi["peak_rss_mb"].as_f64().unwrap_or(f64::NAN) / lo["peak_rss_mb"].as_f64().unwrap_or(f64::NAN)});
        if let Some(s) = rows
            .iter()
            .filter(|s| {
                s["op"] == op
                    && s["stopped_secs"].is_number()
                    && s["on_partial_archive"] != true
                    && mb(s) > mb(hi)
            })
            .max_by(|a, b| mb(a).total_cmp(&mb(b)))
        {
            g["stopped_mb"] = s["home_mb"].clone();
            g["stopped_secs"] = s["stopped_secs"].clone();
            g["stopped_growth_at_least"] =
                json!(s["stopped_secs"].as_f64().unwrap_or(f64::NAN) / mb(s) / per(lo));
        }
        out.push(g);
    }
    out
}

/// The cores of this machine (the CPU ceiling of a command is its MB per
/// CPU second times these).
fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// The targets: import ≥ 60 MB/s, check ≥ 50 MB/s, compact ≥ 20 MB/s and
/// sync ≥ 50,000 entries/s at the largest home each ran on; every command
/// linear or better. A command stopped at the budget did not finish in
/// that time, so its rate is below home ÷ budget: a miss when that bound is
/// under the target, else not measured.
pub fn targets(v: &Value) -> Vec<Value> {
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let mb = |x: &Value| x["home_mb"].as_f64().unwrap_or(0.0);
    let ran = |op: &str, r: &Value| {
        r["op"] == op
            && (r["secs"].is_number() || r["stopped_secs"].is_number())
            && r["on_partial_archive"] != true
    };
    let n = cores();
    let mut out = Vec::new();
    for (op, min, unit) in [
        ("import", 60.0, "MB/s"),
        ("check", 50.0, "MB/s"),
        ("compact", 20.0, "MB/s"),
        ("sync", 50_000.0, "entries/s"),
    ] {
        let Some(r) = rows
            .iter()
            .filter(|r| ran(op, r))
            .max_by(|a, b| mb(a).total_cmp(&mb(b)))
        else {
            out.push(json!({"target": format!("`{op}` of the largest home ≥ {min} {unit}"), "measured": "not run", "met": null}));
            continue;
        };
        let home = mb(r);
        let entries = r["extra"]["entries"].as_f64().unwrap_or(f64::NAN);
        // The rate in the target's unit, from the home's size and a time.
        let rate = |secs: f64| {
            if unit == "MB/s" {
                home / secs
            } else {
                entries / secs
            }
        };
        let target = format!("`{op}` of the {home:.0} MB home ≥ {min} {unit}");
        let cpu = r["cpu_secs"].as_f64().unwrap_or(f64::NAN);
        // The CPU ceiling of this code: every core busy at its measured
        // rate per CPU second (a wall rate above it needs less CPU per MB).
        let ceiling = format!(
            "this code's CPU ceiling on {n:.0} cores: {:.1} {unit}",
            n * rate(cpu)
        );
        // What an import wrote (system calls: log, checkpoints, archive)
        // against the archive it made: its write amplification, the disk
        // time it needs whatever its CPU (issue 42.2).
        let written = match (op, r["written_mb"].as_f64(), r["archive_mb"].as_f64()) {
            ("import", Some(w), Some(a)) if a > 0.0 => {
                format!("; wrote {w:.0} MB, {:.1}× the {a:.0} MB archive", w / a)
            }
            _ => String::new(),
        };
        if let Some(secs) = r["secs"].as_f64() {
            let x = rate(secs);
            out.push(json!({"target": target, "measured": format!("{x:.1} {unit} wall in {secs:.1} s ({:.1} {unit} per CPU second; {ceiling}{written})", rate(cpu)), "met": x >= min}));
        } else {
            let secs = r["stopped_secs"].as_f64().unwrap_or(f64::NAN);
            let bound = rate(secs);
            let done = r["progress"]["entries_copied"]
                .as_f64()
                .map(|c| {
                    format!(
                        ", {c:.0} of {entries:.0} entries copied when stopped ({:.0} entries/s)",
                        c / secs
                    )
                })
                .unwrap_or_else(|| {
                    format!(
                        ", {:.0} MB read and {:.0} MB written when stopped",
                        r["read_mb"].as_f64().unwrap_or(f64::NAN),
                        r["written_mb"].as_f64().unwrap_or(f64::NAN)
                    )
                });
            out.push(json!({"target": target,
                "measured": format!("stopped at the {secs:.0} s budget (--home-budget) before the end, so below {bound:.1} {unit}{done}"),
                "met": if bound < min { Some(false) } else { None }}));
        }
        if op == "check" {
            // The target is met by a whole check (the first, of a fresh
            // archive); `--full` and the incremental check are said beside.
            if let Some(last) = out.last_mut() {
                let beside = check_beside(&rows, home);
                if let Some(m) = last["measured"].as_str() {
                    last["measured"] = json!(format!("whole (first) check {m}{beside}"));
                }
            }
        }
    }
    for g in v["growth"].as_array().into_iter().flatten() {
        let x = g["secs_per_mb_growth"].as_f64().unwrap_or(f64::NAN);
        let mut measured = format!(
            "{x:.2}× time per MB, {:.2}× peak RSS",
            g["rss_growth"].as_f64().unwrap_or(f64::NAN)
        );
        let mut met = Some(x <= 1.5);
        if let Some(at_least) = g["stopped_growth_at_least"].as_f64() {
            let _ = write!(
                measured,
                "; at the {:.0} MB home stopped after {:.0} s, so ≥ {at_least:.2}× time per MB there",
                g["stopped_mb"].as_f64().unwrap_or(0.0),
                g["stopped_secs"].as_f64().unwrap_or(0.0)
            );
            if at_least > 1.5 {
                met = Some(false);
            } else if met == Some(true) {
                // Linear where it finished; unknown at the home it did not.
                met = None;
            }
        }
        out.push(json!({"target": format!("`{}` grows linearly or better ({:.0} → {:.0} MB: time per MB ≤ 1.5× the smallest home's)", g["op"].as_str().unwrap_or(""), g["from_mb"].as_f64().unwrap_or(0.0), g["to_mb"].as_f64().unwrap_or(0.0)),
            "measured": measured, "met": met}));
    }
    out
}

/// The `check --full` and incremental-check figures of the `home` MB home,
/// as the check target states them beside the whole check's.
fn check_beside(rows: &[Value], home: f64) -> String {
    let at = |op: &str| {
        rows.iter()
            .find(|r| r["op"] == op && r["home_mb"].as_f64() == Some(home) && r["secs"].is_number())
    };
    let mut t = String::new();
    if let Some(r) = at(CHECK_FULL) {
        let _ = write!(
            t,
            "; `check --full` {:.1} MB/s wall in {:.1} s ({:.1} MB per CPU second)",
            r["mb_per_s"].as_f64().unwrap_or(f64::NAN),
            r["secs"].as_f64().unwrap_or(f64::NAN),
            r["mb_per_cpu_s"].as_f64().unwrap_or(f64::NAN)
        );
    }
    if let Some(r) = at(CHECK_INCREMENTAL) {
        let _ = write!(
            t,
            "; incremental `check` after {} entries appended to {} sessions: {:.2} s, {:.1} MB/s of the home, {} entries read",
            r["extra"]["entries"],
            r["extra"]["sessions"],
            r["secs"].as_f64().unwrap_or(f64::NAN),
            r["mb_per_s"].as_f64().unwrap_or(f64::NAN),
            r["checked"]["entries"]
        );
    }
    t
}

/// The section as markdown.
pub fn render(v: &Value) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "\n## A pi home at a user's scale\n");
    if let Some(why) = v["skipped"].as_str() {
        let _ = writeln!(t, "- skipped: {why}\n");
        return t;
    }
    for h in v["homes"].as_array().into_iter().flatten() {
        let _ = writeln!(
            t,
            "- home of {:.1} MB: {} files, {} entries; big sessions {}; generated in {:.1} s",
            h["bytes"].as_f64().unwrap_or(0.0) / 1e6,
            h["files"],
            h["entries"],
            h["big_sessions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| format!(
                    "{:.1} MB / {} entries",
                    b["bytes"].as_f64().unwrap_or(0.0) / 1e6,
                    b["entries"]
                ))
                .collect::<Vec<_>>()
                .join(", "),
            h["generate_secs"].as_f64().unwrap_or(0.0)
        );
    }
    let _ = writeln!(t, "\nEach command a whole `sessiontree` process on the home's archive, in this order (import into a fresh archive, then the rest on it; sync to a fresh PostgreSQL database); MB/s = the home's JSONL bytes ÷ the time; peak RSS = `VmHWM` polled while it runs.");
    let _ = writeln!(t, "`check` is the first check of the fresh archive, so it reads every entry (a whole check); then pi appends {APPENDED_ENTRIES} entries to each of {APPENDED_SESSIONS} sessions' files, `{IMPORT_APPENDED}` imports their new lines, `{CHECK_INCREMENTAL}` is a plain `check` (it reads only what was appended since the last check, MB/s still of the whole home it covers), and `{CHECK_FULL}` reads everything again.");
    if let Some(b) = v["budget"].as_str() {
        let _ = writeln!(t, "Time budgets (`--home-budget`): {b}. A command still running at its budget is killed (SIGKILL; each writes in transactions, so the archive stays whole) and its row says how far it got: it did not finish in that time, so its MB/s is below the home ÷ the budget (`<` in the MB/s column); read/written = its system-call I/O (`/proc/PID/io`).");
    }
    let _ = writeln!(t);
    let _ = writeln!(t, "| command | home MB | seconds | MB/s | CPU seconds | MB per CPU second | peak RSS MB | archive MB after |");
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in v["rows"].as_array().into_iter().flatten() {
        let op = if r["on_partial_archive"] == true {
            format!(
                "{} (on the part imported before the stop; no measure of the home)",
                r["op"].as_str().unwrap_or("")
            )
        } else {
            r["op"].as_str().unwrap_or("").to_owned()
        };
        let mb = r["home_mb"].as_f64().unwrap_or(0.0);
        if let Some(e) = r["error"].as_str().or(r["skipped"].as_str()) {
            let _ = writeln!(t, "| {op} | {mb:.0} | {} | | | | | |", e.replace('|', "/"));
            continue;
        }
        if let Some(secs) = r["stopped_secs"].as_f64() {
            let how_far = match r["progress"]["entries_copied"].as_f64() {
                Some(c) => format!(
                    "{c:.0} of {:.0} entries copied ({:.0}/s)",
                    r["progress"]["entries_in_home"]
                        .as_f64()
                        .unwrap_or(f64::NAN),
                    c / secs
                ),
                None => format!(
                    "read {:.0} MB, wrote {:.0} MB ({:.1} MB/s read)",
                    r["read_mb"].as_f64().unwrap_or(f64::NAN),
                    r["written_mb"].as_f64().unwrap_or(f64::NAN),
                    r["read_mb"].as_f64().unwrap_or(f64::NAN) / secs
                ),
            };
            let _ = writeln!(
                t,
                "| {op} | {mb:.0} | **stopped** after {secs:.0} (budget): {how_far} | < {:.1} | {:.2} | | {:.1} | {:.0} |",
                r["mb_per_s_below"].as_f64().unwrap_or(f64::NAN),
                r["cpu_secs"].as_f64().unwrap_or(f64::NAN),
                r["peak_rss_mb"].as_f64().unwrap_or(f64::NAN),
                r["archive_mb"].as_f64().unwrap_or(f64::NAN)
            );
            continue;
        }
        let rss = r["peak_rss_mb"]
            .as_f64()
            .filter(|x| *x > 0.0)
            .map_or("— (ended before a reading)".to_owned(), |x| {
                format!("{x:.1}")
            });
        let _ = writeln!(
            t,
            "| {op} | {mb:.0} | {:.3} | {:.1} | {:.2} | {:.1} | {rss} | {:.0} |",
            r["secs"].as_f64().unwrap_or(f64::NAN),
            r["mb_per_s"].as_f64().unwrap_or(f64::NAN),
            r["cpu_secs"].as_f64().unwrap_or(f64::NAN),
            r["mb_per_cpu_s"].as_f64().unwrap_or(f64::NAN),
            r["archive_mb"].as_f64().unwrap_or(f64::NAN)
        );
    }
    let _ = writeln!(t);
    for g in v["targets"].as_array().into_iter().flatten() {
        let verdict = match g["met"].as_bool() {
            Some(true) => "met",
            Some(false) => "missed",
            None => "not measured",
        };
        let _ = writeln!(
            t,
            "- target: {}: {}, **{verdict}**",
            g["target"].as_str().unwrap_or(""),
            g["measured"].as_str().unwrap_or("—")
        );
    }
    t
}

/// The plot: seconds (and peak RSS) against home size, log–log, one line
/// per command, with a dotted slope-1 guide (linear growth).
pub fn svg(v: &Value) -> String {
    // A stopped command is drawn at its budget as a hollow point: its time
    // is at least that (a lower bound, not a measurement).
    let rows: Vec<Value> = v["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["on_partial_archive"] != true)
        .filter_map(|r| {
            if r["secs"].is_number() {
                Some(r.clone())
            } else if r["stopped_secs"].is_number() {
                let mut r = r.clone();
                r["secs"] = r["stopped_secs"].clone();
                r["lower_bound"] = json!(true);
                Some(r)
            } else {
                None
            }
        })
        .collect();
    let ops = [
        "import", "ls", "search", "stats", "check", "compact", "sync",
    ];
    let colors = [
        "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#d62728", "#8c564b", "#17becf",
    ];
    let (w, h) = (900.0, 395.0);
    let (pw, ph, ml, mt) = (360.0, 280.0, 60.0, 40.0);
    let xs: Vec<f64> = rows.iter().filter_map(|r| r["home_mb"].as_f64()).collect();
    let (x0, x1) = (
        xs.iter().cloned().fold(f64::MAX, f64::min),
        xs.iter().cloned().fold(0.0, f64::max),
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    if rows.is_empty() || x1 <= x0 {
        let _ = writeln!(
            s,
            r#"<text x="20" y="30">no home measured at two sizes</text></svg>"#
        );
        return s;
    }
    for (panel, (key, title)) in [("secs", "seconds"), ("peak_rss_mb", "peak RSS (MB)")]
        .iter()
        .enumerate()
    {
        let left = ml + panel as f64 * (pw + 90.0);
        let ys: Vec<f64> = rows
            .iter()
            .filter_map(|r| r[*key].as_f64())
            .filter(|y| *y > 0.0)
            .collect();
        let (y0, y1) = (
            ys.iter().cloned().fold(f64::MAX, f64::min) / 1.5,
            ys.iter().cloned().fold(0.0, f64::max) * 1.5,
        );
        let lx = |x: f64| left + (x.ln() - x0.ln()) / (x1.ln() - x0.ln()).max(1e-9) * pw;
        let ly = |y: f64| mt + ph - (y.ln() - y0.ln()) / (y1.ln() - y0.ln()).max(1e-9) * ph;
        let _ = writeln!(
            s,
            r##"<rect x="{left}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13">{title} against home size (MB), log–log</text>"#,
            left + pw / 2.0,
            mt - 12.0
        );
        for x in [x0, (x0 * x1).sqrt(), x1] {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{x:.0}</text>"#,
                lx(x),
                mt + ph + 14.0
            );
        }
        for y in [y0 * 1.5, (y0 * y1).sqrt(), y1 / 1.5] {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                left - 4.0,
                ly(y) + 4.0,
                if y < 1.0 {
                    format!("{y:.3}")
                } else {
                    format!("{y:.1}")
                }
            );
        }
        if panel == 0 {
            // Slope 1 through the import's first point: linear growth.
            if let Some(r) = rows.iter().find(|r| r["op"] == "import") {
                let (a, b) = (
                    r["home_mb"].as_f64().unwrap_or(x0),
                    r["secs"].as_f64().unwrap_or(1.0),
                );
                let _ = writeln!(
                    s,
                    r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#bbb" stroke-dasharray="3,3"/>"##,
                    lx(a),
                    ly(b),
                    lx(x1),
                    ly(b * x1 / a).max(mt)
                );
            }
        }
        for (op, color) in ops.iter().zip(colors) {
            let mut pts: Vec<(f64, f64, bool)> = rows
                .iter()
                .filter(|r| r["op"] == *op)
                .filter_map(|r| {
                    Some((
                        r["home_mb"].as_f64()?,
                        r[*key].as_f64()?,
                        r["lower_bound"] == true,
                    ))
                })
                .filter(|p| p.1 > 0.0)
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if pts.is_empty() {
                continue;
            }
            let d: Vec<String> = pts
                .iter()
                .map(|(x, y, _)| format!("{:.1},{:.1}", lx(*x), ly(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                d.join(" ")
            );
            for (x, y, bound) in &pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="{}" fill="{}" stroke="{color}" stroke-width="2"/>"#,
                    lx(*x),
                    ly(*y),
                    if *bound { 4 } else { 3 },
                    if *bound { "white" } else { color }
                );
            }
        }
    }
    for (i, (op, color)) in ops.iter().zip(colors).enumerate() {
        let x = ml + i as f64 * 110.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{}" width="10" height="10" fill="{color}"/><text x="{}" y="{}">{op}</text>"#,
            h - 22.0,
            x + 14.0,
            h - 13.0
        );
    }
    if rows.iter().any(|r| r["lower_bound"] == true) {
        let _ = writeln!(
            s,
            r#"<text x="{ml}" y="{}">hollow point: stopped at the time budget (--home-budget), so the whole command takes longer</text>"#,
            h - 2.0
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// Writes `text` to `path`.
pub fn write(path: &Path, text: &str) -> Result<()> {
    let mut f = std::fs::File::create(path)
        .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_points_span_a_hundredfold() {
        assert_eq!(parse_size("5G").unwrap(), 5_000_000_000);
        assert_eq!(parse_size("2.5g").unwrap(), 2_500_000_000);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
        assert!(parse_size("lots").is_err());
        assert_eq!(
            points(5_000_000_000),
            vec![50_000_000, 500_000_000, 5_000_000_000]
        );
        assert_eq!(points(8_000_000), vec![2_000_000, 8_000_000]);
        assert_eq!(points(4_000_000), vec![1_000_000, 4_000_000]);
    }

    #[test]
    fn the_import_target_names_what_it_wrote_against_the_archive() {
        let rows = vec![
            json!({"op": "import", "home_mb": 5000.0, "secs": 500.0, "mb_per_s": 10.0,
            "cpu_secs": 200.0, "peak_rss_mb": 100.0, "archive_mb": 3000.0, "written_mb": 9000.0}),
        ];
        let v = json!({"rows": rows, "growth": growth(&rows)});
        let t = targets(&v);
        let import = t
            .iter()
            .find(|x| x["target"].as_str().unwrap().starts_with("`import`"))
            .unwrap();
        assert!(
            import["measured"]
                .as_str()
                .unwrap()
                .contains("wrote 9000 MB, 3.0× the 3000 MB archive"),
            "{import}"
        );
    }

    #[test]
    fn a_stopped_command_is_a_bound_not_a_measurement() {
        let rows = vec![
            json!({"op": "compact", "home_mb": 50.0, "secs": 25.0, "mb_per_s": 2.0, "cpu_secs": 40.0, "peak_rss_mb": 60.0}),
            json!({"op": "compact", "home_mb": 500.0, "secs": 250.0, "mb_per_s": 2.0, "cpu_secs": 400.0, "peak_rss_mb": 70.0}),
            json!({"op": "compact", "home_mb": 5000.0, "stopped_secs": 300.0, "mb_per_s_below": 5000.0 / 300.0,
                "cpu_secs": 500.0, "peak_rss_mb": 80.0, "read_mb": 700.0, "written_mb": 400.0}),
            json!({"op": "sync", "home_mb": 5000.0, "stopped_secs": 300.0, "mb_per_s_below": 5000.0 / 300.0,
                "cpu_secs": 100.0, "peak_rss_mb": 30.0, "extra": {"entries": 3_000_000},
                "progress": {"entries_copied": 300_000, "entries_in_home": 3_000_000}}),
            json!({"op": "check", "home_mb": 5000.0, "stopped_secs": 60.0, "mb_per_s_below": 5000.0 / 60.0,
                "cpu_secs": 60.0, "peak_rss_mb": 30.0, "read_mb": 4000.0, "written_mb": 0.0}),
        ];
        let mut rows = rows;
        // After a stopped import a fast check on the part imported is no
        // measure of the home: out of the targets and the growth.
        rows.push(
            json!({"op": "ls", "home_mb": 5000.0, "secs": 0.01, "mb_per_s": 5e5, "cpu_secs": 0.0,
            "peak_rss_mb": 5.0, "on_partial_archive": true}),
        );
        rows.push(json!({"op": "ls", "home_mb": 50.0, "secs": 0.01, "mb_per_s": 5e3, "cpu_secs": 0.0, "peak_rss_mb": 5.0}));
        let mut v = json!({"rows": rows, "growth": growth(&rows), "budget": "every command 300 s"});
        assert!(v["growth"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["op"] != "ls"));
        v["targets"] = json!(targets(&v));
        let t = v["targets"].as_array().unwrap();
        let find = |what: &str| {
            t.iter()
                .find(|x| x["target"].as_str().unwrap().starts_with(what))
                .unwrap()
        };
        // 5,000 MB not done in 300 s: below 16.7 MB/s, so under 20 MB/s.
        let compact = find("`compact` of the 5000 MB home");
        assert_eq!(compact["met"], json!(false), "{compact}");
        assert!(compact["measured"]
            .as_str()
            .unwrap()
            .contains("below 16.7 MB/s"));
        // Stopped at 60 s: below 83 MB/s, which does not decide ≥ 50 MB/s.
        let check = find("`check` of the 5000 MB home");
        assert_eq!(check["met"], json!(null), "{check}");
        let sync = find("`sync` of the 5000 MB home");
        assert_eq!(sync["met"], json!(false));
        assert!(sync["measured"]
            .as_str()
            .unwrap()
            .contains("300000 of 3000000 entries copied"));
        // Linear from 50 to 500 MB; at 5 GB at least 0.12× the time per MB:
        // no verdict either way.
        let g = find("`compact` grows");
        assert_eq!(g["met"], json!(null), "{g}");
        assert!(g["measured"].as_str().unwrap().contains("≥ 0.12×"));
        let md = render(&v);
        assert!(
            md.contains(
                "**stopped** after 300 (budget): 300000 of 3000000 entries copied (1000/s)"
            ),
            "{md}"
        );
        assert!(md.contains("Time budgets (`--home-budget`): every command 300 s"));
        assert!(svg(&v).contains("hollow point"));
        assert!(md.contains(
            "| ls (on the part imported before the stop; no measure of the home) | 5000 |"
        ));
    }

    #[test]
    fn budgets_parse_for_all_and_per_command() {
        let b = parse_budget("600, compact=300,sync=120").unwrap();
        assert_eq!(b.of("import"), Some(600.0));
        assert_eq!(b.of("compact"), Some(300.0));
        assert_eq!(b.of("sync"), Some(120.0));
        let only = parse_budget("compact=300").unwrap();
        assert_eq!(only.of("import"), None);
        assert_eq!(only.of("compact"), Some(300.0));
        assert!(parse_budget("compact=soon").is_err());
        assert!(parse_budget("defrag=10").is_err());
        assert!(parse_budget("0").is_err());
    }

    #[test]
    fn a_command_past_its_budget_is_stopped_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let (m, _) = run_measured(
            Command::new("sleep").arg("5"),
            &out,
            Some(Duration::from_millis(200)),
        )
        .unwrap();
        assert!(m.stopped && m.secs < 4.0, "{m:?}");
        let (m, _) = run_measured(
            Command::new("sleep").arg("0.05"),
            &out,
            Some(Duration::from_secs(5)),
        )
        .unwrap();
        assert!(!m.stopped, "{m:?}");
    }

    #[test]
    fn database_names_are_replaced_in_urls() {
        assert_eq!(
            with_database("postgres://postgres@localhost/postgres?host=/tmp/x", "b"),
            "postgres://postgres@localhost/b?host=/tmp/x"
        );
        assert_eq!(
            with_database("postgres://u@h:5432/db", "b"),
            "postgres://u@h:5432/b"
        );
    }

    #[test]
    fn a_small_home_is_in_pi_layout_with_images() {
        let dir = tempfile::tempdir().unwrap();
        let home = generate_home(&dir.path().join("h"), 3_000_000, 7).unwrap();
        assert!(home.files >= 12, "{home:?}");
        assert!(home.bytes > 1_500_000 && home.bytes < 6_000_000, "{home:?}");
        let mut images = 0;
        let mut dirs = 0;
        for d in std::fs::read_dir(dir.path().join("h/sessions")).unwrap() {
            let d = d.unwrap();
            let name = d.file_name().to_string_lossy().into_owned();
            assert!(name.starts_with("--") && name.ends_with("--"), "{name}");
            dirs += 1;
            for f in std::fs::read_dir(d.path()).unwrap() {
                let f = f.unwrap().path();
                assert!(f.extension().is_some_and(|e| e == "jsonl"));
                images += std::fs::read_to_string(&f)
                    .unwrap()
                    .matches("\"type\":\"image\"")
                    .count();
            }
        }
        assert!(dirs >= 3);
        assert!(images > 0, "the big sessions carry inline images");
    }

    /// pi's appends to a few sessions: each picked file grows by child
    /// entries of its last one, chained, which an import takes as new lines.
    #[test]
    fn appends_as_pi_grow_a_few_files_by_a_chain_from_their_last_entry() {
        let dir = tempfile::tempdir().unwrap();
        let home = generate_home(&dir.path().join("h"), 2_000_000, 3).unwrap();
        let sessions = home.dir.join("sessions");
        let before = |p: &Path| std::fs::read_to_string(p).unwrap();
        let files = append_as_pi(&sessions, 3, 2, 9).unwrap();
        assert_eq!(files.len(), 3, "{files:?}");
        let mut distinct = files.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), 3, "{files:?}");
        for f in &files {
            let text = before(f);
            let lines: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let n = lines.len();
            let (old, a, b) = (&lines[n - 3], &lines[n - 2], &lines[n - 1]);
            assert_eq!(a["type"], "message", "{a}");
            assert_eq!(a["parentId"], old["id"], "{f:?}");
            assert_eq!(b["parentId"], a["id"], "{f:?}");
            assert_ne!(a["id"], b["id"]);
        }
    }

    /// The check target is met by the whole check alone, and states the
    /// `--full` and incremental figures of the same home beside it.
    #[test]
    fn the_check_target_shows_the_full_and_incremental_checks() {
        let row = |op: &str, secs: f64| {
            json!({"op": op, "home_mb": 500.0, "secs": secs, "mb_per_s": 500.0 / secs,
                "cpu_secs": secs, "mb_per_cpu_s": 500.0 / secs, "peak_rss_mb": 50.0,
                "extra": {"sessions": 5, "entries": 20}, "checked": {"entries": 20}})
        };
        for (whole, met) in [(8.0, true), (20.0, false)] {
            let rows = vec![
                row("check", whole),
                row(CHECK_INCREMENTAL, 0.5),
                row(CHECK_FULL, 12.0),
            ];
            let v = json!({"rows": rows, "growth": growth(&rows)});
            let t = targets(&v);
            let check = t
                .iter()
                .find(|x| x["target"].as_str().unwrap().starts_with("`check` of"))
                .unwrap();
            assert_eq!(check["met"], json!(met), "{check}");
            let m = check["measured"].as_str().unwrap();
            assert!(m.contains("`check --full` 41.7 MB/s"), "{m}");
            assert!(
                m.contains("after 20 entries appended to 5 sessions: 0.50 s, 1000.0 MB/s of the home, 20 entries read"),
                "{m}"
            );
            let text = render(&json!({"rows": rows, "targets": t}));
            assert!(
                text.contains(&format!("| {CHECK_INCREMENTAL} | 500 |")),
                "{text}"
            );
        }
    }
}
