//! Availability under long operations (issue 40.1): a large session is
//! imported, forked, the fork deleted and the archive compacted, each by a
//! `sessiontree` process as a user runs it, while a thread of this process
//! appends to a *different* session every few milliseconds through its own
//! connection. Per operation: how long it took, how many appends got in,
//! their p50/p99/max wait, and how many failed (e.g. `database is locked`).
//! On PostgreSQL (`--pg`) the same with `sync` as the import, and no
//! compact (the server maintains the archive).
//!
//! Two settings for finding where a long wait comes from:
//! `SESSIONTREE_AVAIL_OPS=fork,delete` runs only the named SQLite
//! operations after the import (of `fork`, `delete`, `compact`; `delete`
//! runs the fork too), and `SESSIONTREE_AVAIL_TRACE=MS` prints every append that
//! waited longer than MS with the wall-clock time it began (Unix ms), to
//! set beside the operation's own timings. `SESSIONTREE_AVAIL_KEEP_TRACE=DIR`
//! keeps each SQLite operation's lock trace as `DIR/OP-locks.txt`.
//! `SESSIONTREE_AVAIL_DURABILITY=relaxed` opens the appender's archive
//! with [`Durability::Relaxed`] (its commits do not wait for the disk), to
//! tell the waits for the lock from the waits of its own sync.

use crate::gen::{generate, GenOptions, Shape};
use serde_json::{json, Value};
use sessiontree::archive::SessionArchive;
use sessiontree::repo::CreateOptions;
use sessiontree::{Durability, Error, JsonText, Result, Session};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The pause between two appends of the appending thread.
const APPEND_EVERY: Duration = Duration::from_millis(3);

/// One append of the appending thread.
#[derive(Debug, Clone, Copy)]
struct Append {
    /// When it began.
    began: Instant,
    /// When it began, by the wall clock (to set beside another process's
    /// timings).
    began_at: std::time::SystemTime,
    /// How long it took (lock wait included).
    waited: Duration,
    /// How long the appending thread ran on a CPU meanwhile: waiting for
    /// the lock costs next to none, so a long one did work of its own
    /// (e.g. FTS5's automerge, on its commit, continuing a merge).
    cpu: Duration,
    /// Whether it failed.
    failed: bool,
}

/// Appends to one session every [`APPEND_EVERY`] on its own thread until
/// stopped, recording each append.
struct Appender {
    /// The lock trace this process's own events go to, if any
    /// ([`appender_trace`]): how long the appends waited for the lock, and
    /// for their commits.
    trace: Option<std::path::PathBuf>,
    running: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Append>>>,
    errors: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Appender {
    /// Starts appending to session `id` of `archive`.
    fn start(
        archive: Arc<dyn SessionArchive>,
        id: &str,
        trace: Option<std::path::PathBuf>,
    ) -> Result<Self> {
        let storage = archive.open_storage(id)?;
        let mut session = Session::new(storage);
        let message = JsonText::parse(r#"{"role":"user","content":"still here"}"#)
            .map_err(|e| Error::Unknown(format!("the appended message: {e}")))?;
        let running = Arc::new(AtomicBool::new(true));
        let log = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (r, l, e) = (running.clone(), log.clone(), errors.clone());
        let thread = std::thread::spawn(move || {
            while r.load(Ordering::SeqCst) {
                let began = Instant::now();
                let began_at = std::time::SystemTime::now();
                let cpu0 = thread_cpu();
                let result = session.append_message(&message);
                let waited = began.elapsed();
                let cpu = thread_cpu().saturating_sub(cpu0);
                if let Err(err) = &result {
                    let mut e = e.lock().unwrap_or_else(|p| p.into_inner());
                    if e.len() < 5 {
                        e.push(err.to_string());
                    }
                }
                l.lock().unwrap_or_else(|p| p.into_inner()).push(Append {
                    began,
                    began_at,
                    waited,
                    cpu,
                    failed: result.is_err(),
                });
                std::thread::sleep(APPEND_EVERY);
            }
        });
        Ok(Appender {
            trace,
            running,
            log,
            errors,
            thread: Some(thread),
        })
    }

    /// The appends that began in `[from, to]`.
    fn between(&self, from: Instant, to: Instant) -> Vec<Append> {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|a| a.began >= from && a.began <= to)
            .copied()
            .collect()
    }

    /// The longest lock wait and the longest commit of the appends that
    /// began in `[from, to]`, from the trace (each traced from 10 ms:
    /// zero when none took that long); `None` untraced.
    fn traced_between(&self, from: Instant, to: Instant) -> Option<(f64, f64)> {
        let text = std::fs::read_to_string(self.trace.as_ref()?).ok()?;
        let unix_ms = |t: Instant| {
            let ago = Instant::now().saturating_duration_since(t);
            (std::time::SystemTime::now() - ago)
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64() * 1e3)
        };
        let (from, to) = (unix_ms(from), unix_ms(to));
        let pid = std::process::id().to_string();
        let (mut lock, mut commit) = (0f64, 0f64);
        for line in text.lines() {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            };
            let num = |key: &str| field(key).and_then(|v| v.parse::<f64>().ok());
            let at = num("at").unwrap_or(0.0);
            if field("pid") != Some(pid.as_str()) || at < from || at > to {
                continue;
            }
            let ms = num("ms").unwrap_or(0.0);
            match field("what") {
                Some("lock-wait") => lock = lock.max(ms),
                Some("append-commit") => commit = commit.max(ms),
                _ => {}
            }
        }
        Some((lock, commit))
    }

    /// The first errors seen (at most five).
    fn errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops the thread and waits for it.
    fn stop(mut self) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// This thread's time on a CPU so far (`/proc/thread-self/schedstat`;
/// zero where there is none).
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// `SESSIONTREE_AVAIL_TRACE=MS`: appends waiting longer are printed.
fn trace_over() -> Option<Duration> {
    let ms: u64 = std::env::var("SESSIONTREE_AVAIL_TRACE")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_millis(ms))
}

/// Whether SQLite operation `op` (after the import) is to run:
/// `SESSIONTREE_AVAIL_OPS` (a comma list) names it, or is not set.
fn wanted(op: &str) -> bool {
    std::env::var("SESSIONTREE_AVAIL_OPS").map_or(true, |v| v.split(',').any(|o| o.trim() == op))
}

/// The `p`-quantile (0–1) of sorted `v`, nearest rank.
fn quantile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The largest size a file reached while `running`, polled every 10 ms
/// (0 while it does not exist).
fn largest_size_while(file: &Path, running: &AtomicBool) -> u64 {
    let mut largest = 0;
    while running.load(Ordering::SeqCst) {
        let size = std::fs::metadata(file).map_or(0, |m| m.len());
        largest = largest.max(size);
        std::thread::sleep(Duration::from_millis(10));
    }
    largest
}

/// Runs `sessiontree ARGS` as a child while `appender` appends; one row.
/// With `log` (a SQLite archive's write-ahead log), the row also says how
/// large the log grew meanwhile.
fn run_op(
    bin: &Path,
    name: &str,
    backend: &str,
    entries: usize,
    args: &[&str],
    appender: &Appender,
    log: Option<&Path>,
) -> Result<(Value, String)> {
    eprintln!("bench: avail: {backend} {name} ({entries} entries)");
    let running = AtomicBool::new(true);
    let started = Instant::now();
    // A SQLite operation traces its holds of the write lock into a file
    // beside its log (read below, then removed).
    let trace = log.map(|log| log.with_extension(format!("{name}-locks")));
    if let Some(trace) = &trace {
        let _ = std::fs::remove_file(trace);
    }
    let (out, largest_log) = std::thread::scope(|scope| {
        let sampler = log.map(|log| scope.spawn(|| largest_size_while(log, &running)));
        let mut child = Command::new(bin);
        child.args(args).stdin(Stdio::null());
        if let Some(trace) = &trace {
            child.env("SESSIONTREE_LOCK_TRACE", trace);
        }
        let out = child.output();
        running.store(false, Ordering::SeqCst);
        let largest = sampler.map(|s| s.join().unwrap_or(0));
        (out, largest)
    });
    let out = out.map_err(|e| Error::io(format!("running {}", bin.display()), e))?;
    let ended = Instant::now();
    if !out.status.success() {
        return Err(Error::Unknown(format!(
            "sessiontree {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut row = window_row(name, backend, entries, started, ended, appender);
    if let Some(bytes) = largest_log {
        row["log_mb"] = json!(bytes as f64 / 1e6);
    }
    if let Some(trace) = &trace {
        if let Some(holds) = longest_holds(trace) {
            row["holds"] = holds;
        }
        if let Some(keep) = std::env::var_os("SESSIONTREE_AVAIL_KEEP_TRACE") {
            let _ = std::fs::copy(trace, Path::new(&keep).join(format!("{name}-locks.txt")));
        }
        let _ = std::fs::remove_file(trace);
    }
    // Each row as it is measured: a long run interrupted keeps what it had.
    eprintln!("bench: avail: {row}");
    Ok((row, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// What an operation's lock trace (`SESSIONTREE_LOCK_TRACE`) says of its
/// holds of the write lock (its batches' transactions and the `RESTART`
/// checkpoints between them): how many, the longest by the wall clock, the
/// longest on a CPU, and the longest `RESTART`; for `compact`, whose holds
/// are of several kinds (`compact-reencode`, `compact-merge`, ...), also
/// per kind (`phases`: holds, longest wall, longest CPU). The wall
/// includes time the holder waited for a CPU; on a loaded machine the CPU
/// figure is the one that compares between runs. `None` if nothing was
/// traced.
fn longest_holds(trace: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(trace).ok()?;
    let (mut n, mut wall, mut cpu, mut restart) = (0u64, 0f64, 0f64, 0f64);
    let mut phases: Vec<(String, u64, f64, f64)> = Vec::new();
    for line in text.lines() {
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        };
        let ms = |key: &str| field(key).and_then(|v| v.parse::<f64>().ok());
        match field("what") {
            Some(what)
                if matches!(what, "staged-batch" | "staged-last" | "delete-batch")
                    || what.starts_with("compact-") =>
            {
                n += 1;
                let (w, c) = (ms("ms").unwrap_or(0.0), ms("cpu_ms").unwrap_or(0.0));
                wall = wall.max(w);
                cpu = cpu.max(c);
                if what.starts_with("compact-") {
                    match phases.iter_mut().find(|p| p.0 == what) {
                        Some(p) => {
                            p.1 += 1;
                            p.2 = p.2.max(w);
                            p.3 = p.3.max(c);
                        }
                        None => phases.push((what.to_string(), 1, w, c)),
                    }
                }
            }
            Some("ckpt-op-restart") => {
                n += 1;
                restart = restart.max(ms("ms").unwrap_or(0.0));
            }
            _ => {}
        }
    }
    let phases: Vec<Value> = phases
        .into_iter()
        .map(
            |(what, n, wall, cpu)| json!({"what": what, "n": n, "max_ms": wall, "max_cpu_ms": cpu}),
        )
        .collect();
    (n > 0).then(|| {
        json!({"n": n, "max_ms": wall, "max_cpu_ms": cpu, "restart_max_ms": restart, "phases": phases})
    })
}

/// The baseline: appends while no operation runs, for two seconds.
fn idle_row(backend: &str, appender: &Appender) -> Value {
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    window_row(
        "(none: baseline)",
        backend,
        0,
        started,
        Instant::now(),
        appender,
    )
}

/// The row of the appends that began between `started` and `ended`.
fn window_row(
    name: &str,
    backend: &str,
    entries: usize,
    started: Instant,
    ended: Instant,
    appender: &Appender,
) -> Value {
    // An append that began before the end and was still waiting counts:
    // let the thread finish it.
    std::thread::sleep(Duration::from_millis(50) + 2 * APPEND_EVERY);
    let appends = appender.between(started, ended);
    let mut waits: Vec<f64> = appends
        .iter()
        .filter(|a| !a.failed)
        .map(|a| a.waited.as_secs_f64() * 1e3)
        .collect();
    waits.sort_by(f64::total_cmp);
    if let Some(over) = trace_over() {
        for a in appends.iter().filter(|a| a.waited > over) {
            let at = a
                .began_at
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            eprintln!(
                "bench: avail: {name}: an append began at {} ms (Unix) and waited {:.1} ms ({:.1} ms on a CPU)",
                at.as_millis(),
                a.waited.as_secs_f64() * 1e3,
                a.cpu.as_secs_f64() * 1e3
            );
        }
    }
    let failed = appends.iter().filter(|a| a.failed).count();
    let traced = appender.traced_between(started, ended);
    json!({
        "lock_wait_max_ms": traced.map(|t| t.0),
        "commit_max_ms": traced.map(|t| t.1),
        "op": name,
        "backend": backend,
        "entries": entries,
        "secs": (ended - started).as_secs_f64(),
        "appends": waits.len(),
        "failed": failed,
        "p50_ms": quantile(&waits, 0.5),
        "p99_ms": quantile(&waits, 0.99),
        "max_ms": waits.last().copied().unwrap_or(0.0),
        "append_cpu_max_ms": appends
            .iter()
            .map(|a| a.cpu.as_secs_f64() * 1e3)
            .fold(0.0, f64::max),
    })
}

/// Samples the server every 5 ms while a PostgreSQL operation runs (a
/// `psql` of its own): how often any backend waited for a heavyweight lock
/// (`wait_event_type = 'Lock'`: row, tuple, transaction or relation locks,
/// the waits a writer of another session would have if the operation held
/// something it needs), and the longest-open transaction seen (how long the
/// operation held its snapshot, i.e. `xmin`, back from VACUUM).
struct PgSampler {
    url: String,
    child: std::process::Child,
}

/// The sampler's flag table (a stop request) and its loop.
const PG_SAMPLER: &str = "DO $$
DECLARE samples BIGINT := 0; waited BIGINT := 0; w BIGINT; longest DOUBLE PRECISION := 0; l DOUBLE PRECISION;
BEGIN
  LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM avail_stop);
    PERFORM pg_stat_clear_snapshot();
    SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'),
           coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)) FILTER (WHERE pid <> pg_backend_pid()), 0)
      INTO w, l FROM pg_stat_activity WHERE datname = current_database();
    samples := samples + 1;
    IF w > 0 THEN waited := waited + 1; END IF;
    longest := greatest(longest, l);
    PERFORM pg_sleep(0.005);
  END LOOP;
  RAISE NOTICE 'avail-sampler % % %', samples, waited, longest;
END $$;";

impl PgSampler {
    /// Starts sampling the database of `url`.
    fn start(url: &str) -> Result<Self> {
        let run = |sql: &str| {
            Command::new("psql")
                .args([url, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
                .output()
                .map_err(|e| Error::io("running psql".to_string(), e))
        };
        // Committed before the loop starts, so the stop request finds it.
        let made = run("DROP TABLE IF EXISTS avail_stop; CREATE TABLE avail_stop ()")?;
        if !made.status.success() {
            return Err(Error::Unknown(format!(
                "the lock sampler's table: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            )));
        }
        let child = Command::new("psql")
            .args([url, "-q", "-v", "ON_ERROR_STOP=1", "-c", PG_SAMPLER])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io("running psql".to_string(), e))?;
        Ok(PgSampler {
            url: url.to_owned(),
            child,
        })
    }

    /// Stops sampling: (samples, samples with a backend waiting on a lock,
    /// the longest transaction seen in seconds).
    fn stop(mut self) -> Result<(u64, u64, f64)> {
        let asked = Command::new("psql")
            .args([
                &self.url,
                "-q",
                "-c",
                "INSERT INTO avail_stop DEFAULT VALUES",
            ])
            .output()
            .map_err(|e| Error::io("running psql".to_string(), e))?;
        if !asked.status.success() {
            let _ = self.child.kill();
            return Err(Error::Unknown(format!(
                "stopping the lock sampler: {}",
                String::from_utf8_lossy(&asked.stderr).trim()
            )));
        }
        let out = self
            .child
            .wait_with_output()
            .map_err(|e| Error::io("running psql".to_string(), e))?;
        let err = String::from_utf8_lossy(&out.stderr);
        let found = err
            .lines()
            .find_map(|l| l.split("avail-sampler ").nth(1))
            .map(|rest| rest.split_whitespace().collect::<Vec<_>>());
        match found.as_deref() {
            Some([s, w, l]) => Ok((
                s.parse().unwrap_or(0),
                w.parse().unwrap_or(0),
                l.parse().unwrap_or(0.0),
            )),
            _ => Err(Error::Unknown(format!("the lock sampler: {}", err.trim()))),
        }
    }
}

/// [`run_op`] on PostgreSQL, with the server sampled meanwhile
/// ([`PgSampler`]).
fn run_pg_op(
    bin: &Path,
    name: &str,
    entries: usize,
    args: &[&str],
    appender: &Appender,
    url: &str,
) -> Result<(Value, String)> {
    let sampler = PgSampler::start(url)?;
    let (mut row, out) = run_op(bin, name, "postgres", entries, args, appender, None)?;
    let (samples, waited, longest) = sampler.stop()?;
    row["lock_samples"] = json!(samples);
    row["lock_wait_samples"] = json!(waited);
    row["longest_transaction_secs"] = json!(longest);
    Ok((row, out))
}

/// Generates the large session's file under `dir` (one forked session of
/// `entries` entries); its path and id.
fn long_file(dir: &Path, entries: usize, seed: u64) -> Result<(std::path::PathBuf, String)> {
    eprintln!("bench: avail: generating a session of {entries} entries");
    let report = generate(
        dir,
        &GenOptions {
            shape: Shape::Forked,
            entries,
            seed,
            ..Default::default()
        },
    )?;
    let s = report
        .sessions
        .first()
        .ok_or_else(|| Error::Unknown("the generator wrote no session".into()))?;
    Ok((s.path.clone(), s.id.clone()))
}

/// Creates the small session the appending thread writes to.
fn other_session(archive: &dyn SessionArchive) -> Result<()> {
    let fields = CreateOptions {
        id: Some("other".into()),
        cwd: "/work/other".into(),
        ..Default::default()
    }
    .fields()?;
    drop(archive.create_storage(&fields.new_session())?);
    Ok(())
}

/// The new session id a `--json fork` printed.
fn forked_id(stdout: &str) -> Result<String> {
    serde_json::from_str::<Value>(stdout)
        .ok()
        .and_then(|v| v["session"].as_str().map(str::to_owned))
        .ok_or_else(|| Error::Unknown(format!("fork printed no session id: {stdout:?}")))
}

/// Where this process's own lock events go (`SESSIONTREE_LOCK_TRACE`, or a
/// file under `dir` named from now on): the SQLite appender's waits for the
/// lock and for its commits, told apart from the append's whole time.
fn appender_trace(dir: &Path) -> Option<std::path::PathBuf> {
    if let Some(set) = std::env::var_os("SESSIONTREE_LOCK_TRACE") {
        return Some(set.into());
    }
    let named = dir.join("appender-locks");
    sessiontree::backend::sqlite::internals::trace_locks_to(&named).then_some(named)
}

/// The durability of the SQLite appender's archive:
/// `SESSIONTREE_AVAIL_DURABILITY=relaxed`, or full.
fn appender_durability() -> Durability {
    match std::env::var("SESSIONTREE_AVAIL_DURABILITY").as_deref() {
        Ok("relaxed") => Durability::Relaxed,
        _ => Durability::Full,
    }
}

/// The SQLite rows: import, fork, delete, compact of an `entries`-entry
/// session while another session is appended to.
fn sqlite_rows(bin: &Path, dir: &Path, entries: usize, seed: u64) -> Result<Vec<Value>> {
    let (file, id) = long_file(&dir.join("files"), entries, seed)?;
    let db = dir.join("avail.db");
    let dbs = db.to_string_lossy().into_owned();
    let archive: Arc<dyn SessionArchive> = Arc::new(sessiontree::backend::sqlite::Archive::open(
        &db,
        appender_durability(),
    )?);
    other_session(&*archive)?;
    let appender = Appender::start(archive.clone(), "other", appender_trace(dir))?;
    let mut rows = Vec::new();
    let file_s = file.to_string_lossy().into_owned();
    let log = dir.join("avail.db-wal");
    let log = Some(log.as_path());
    let mut ops = || -> Result<()> {
        rows.push(idle_row("sqlite", &appender));
        let (r, _) = run_op(
            bin,
            "import",
            "sqlite",
            entries,
            &["--db", &dbs, "import", "--quiet", &file_s],
            &appender,
            log,
        )?;
        rows.push(r);
        // `delete` deletes the fork: it needs one.
        if wanted("fork") || wanted("delete") {
            let (r, out) = run_op(
                bin,
                "fork",
                "sqlite",
                entries,
                &["--db", &dbs, "--json", "fork", &id],
                &appender,
                log,
            )?;
            rows.push(r);
            let fork = forked_id(&out)?;
            if wanted("delete") {
                let (r, _) = run_op(
                    bin,
                    "delete",
                    "sqlite",
                    entries,
                    &["--db", &dbs, "delete", &fork],
                    &appender,
                    log,
                )?;
                rows.push(r);
            }
        }
        if !wanted("compact") {
            return Ok(());
        }
        let (r, _) = run_op(
            bin,
            "compact",
            "sqlite",
            entries,
            &["--db", &dbs, "compact"],
            &appender,
            log,
        )?;
        rows.push(r);
        Ok(())
    };
    let result = ops();
    let errors = appender.errors();
    appender.stop();
    // An operation that fails (a full disk, say) ends the part, but the
    // rows measured before it are kept, and the failure is a row of its own.
    if let Err(e) = result {
        rows.push(json!({"backend": "sqlite", "error": e.to_string()}));
    }
    if let Some(last) = rows.last_mut() {
        last["append_errors"] = json!(errors);
    }
    Ok(rows)
}

/// The PostgreSQL rows: sync (the team archive's import), fork, delete of an
/// `entries`-entry session in a fresh database on `url`'s server.
fn pg_rows(bin: &Path, dir: &Path, entries: usize, seed: u64, url: &str) -> Result<Vec<Value>> {
    let (file, id) = long_file(&dir.join("pg-files"), entries, seed)?;
    let url = crate::home::fresh_database(url, "sessiontree_avail").map_err(Error::Unknown)?;
    let archive: Arc<dyn SessionArchive> = Arc::new(
        sessiontree::backend::postgres::PgArchive::open(&url, Durability::Full)?,
    );
    other_session(&*archive)?;
    let appender = Appender::start(archive.clone(), "other", None)?;
    let mut rows = Vec::new();
    let file_s = file.to_string_lossy().into_owned();
    let mut ops = || -> Result<()> {
        rows.push(idle_row("postgres", &appender));
        let (r, _) = run_pg_op(
            bin,
            "sync",
            entries,
            &["sync", "--to", &url, &file_s],
            &appender,
            &url,
        )?;
        rows.push(r);
        let (r, out) = run_pg_op(
            bin,
            "fork",
            entries,
            &["--db", &url, "--json", "fork", &id],
            &appender,
            &url,
        )?;
        rows.push(r);
        let fork = forked_id(&out)?;
        let (r, _) = run_pg_op(
            bin,
            "delete",
            entries,
            &["--db", &url, "delete", &fork],
            &appender,
            &url,
        )?;
        rows.push(r);
        Ok(())
    };
    let result = ops();
    let errors = appender.errors();
    appender.stop();
    result?;
    if let Some(last) = rows.last_mut() {
        last["append_errors"] = json!(errors);
    }
    Ok(rows)
}

/// Measures availability on SQLite with an `entries`-entry session (and on
/// PostgreSQL with a `pg_entries` one when `pg` names a server; `entries`
/// 0 measures PostgreSQL alone), under
/// `work/avail-N`, deleted afterwards.
pub fn measure(
    bin: &Path,
    work: &Path,
    entries: usize,
    pg: Option<(&str, usize)>,
    seed: u64,
) -> Result<Value> {
    let dir = work.join(format!("avail-{entries}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    // `entries` 0: PostgreSQL alone.
    let mut rows = if entries == 0 {
        Ok(Vec::new())
    } else {
        sqlite_rows(bin, &dir, entries, seed)
    };
    if let (Ok(r), Some((url, n))) = (&mut rows, pg) {
        match pg_rows(bin, &dir, n, seed, url) {
            Ok(more) => r.extend(more),
            Err(e) => r.push(json!({"backend": "postgres", "error": e.to_string()})),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(json!({
        "append_every_ms": APPEND_EVERY.as_secs_f64() * 1e3,
        "rows": rows?,
    }))
}

/// The availability table, as text.
pub fn render(v: &Value) -> String {
    let mut t = String::new();
    let Some(rows) = v["rows"].as_array() else {
        return t;
    };
    let _ = writeln!(
        t,
        "\n## Availability: appends to another session (one every {} ms) during long operations\n",
        v["append_every_ms"]
    );
    let _ = writeln!(
        t,
        "| backend | operation | entries | took | appends in it | failed | p50 wait | p99 wait | max wait | longest wait for the lock | longest commit | largest log | longest append on a CPU |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    // Traced from 10 ms.
    let traced = |v: &Value| {
        v.as_f64().map_or_else(String::new, |ms| match ms {
            ms if ms > 0.0 => format!("{ms:.1} ms"),
            _ => "< 10 ms".into(),
        })
    };
    for r in rows {
        if let Some(e) = r["error"].as_str() {
            let _ = writeln!(t, "| {} | error: {e} | | | | | | | | | | | |", r["backend"]);
            continue;
        }
        let _ = writeln!(
            t,
            "| {} | {} | {} | {:.2} s | {} | {} | {:.1} ms | {:.1} ms | {:.1} ms | {} | {} | {} | {} |",
            r["backend"].as_str().unwrap_or(""),
            r["op"].as_str().unwrap_or(""),
            r["entries"],
            r["secs"].as_f64().unwrap_or(0.0),
            r["appends"],
            r["failed"],
            r["p50_ms"].as_f64().unwrap_or(0.0),
            r["p99_ms"].as_f64().unwrap_or(0.0),
            r["max_ms"].as_f64().unwrap_or(0.0),
            traced(&r["lock_wait_max_ms"]),
            traced(&r["commit_max_ms"]),
            r["log_mb"]
                .as_f64()
                .map_or_else(String::new, |mb| format!("{mb:.0} MB")),
            r["append_cpu_max_ms"]
                .as_f64()
                .map_or_else(String::new, |ms| format!("{ms:.1} ms")),
        );
    }
    let traced: Vec<&Value> = rows.iter().filter(|r| r["holds"].is_object()).collect();
    if !traced.is_empty() {
        let _ = writeln!(
            t,
            "\nThe operation's own holds of the write lock (`SESSIONTREE_LOCK_TRACE`): its transactions and the `RESTART` checkpoints between them. Wall time includes waiting for a CPU; CPU time does not.\n\n| operation | holds | longest (wall) | longest on a CPU | longest RESTART |\n|---|---:|---:|---:|---:|"
        );
        for r in &traced {
            let h = &r["holds"];
            let _ = writeln!(
                t,
                "| {} | {} | {:.1} ms | {:.1} ms | {:.1} ms |",
                r["op"].as_str().unwrap_or(""),
                h["n"],
                h["max_ms"].as_f64().unwrap_or(0.0),
                h["max_cpu_ms"].as_f64().unwrap_or(0.0),
                h["restart_max_ms"].as_f64().unwrap_or(0.0),
            );
        }
    }
    let phased: Vec<&Value> = traced
        .iter()
        .copied()
        .filter(|r| {
            r["holds"]["phases"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
        })
        .collect();
    if !phased.is_empty() {
        let _ = writeln!(
            t,
            "\nThe operation's holds by kind (`compact`: `reencode` its re-encode transactions, `index-remove`/`rebuild` a search index crowded by deleted rows built again and the old one removed, `merge` the search index's merge, `unused-blocks`/`unused-dictionaries` the removal of what nothing uses, `vacuum` the pages given back, `truncate` the log's last checkpoint).\n\n| operation | kind | holds | longest (wall) | longest on a CPU |\n|---|---|---:|---:|---:|"
        );
        for r in phased {
            for p in r["holds"]["phases"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    t,
                    "| {} | {} | {} | {:.1} ms | {:.1} ms |",
                    r["op"].as_str().unwrap_or(""),
                    p["what"].as_str().unwrap_or(""),
                    p["n"],
                    p["max_ms"].as_f64().unwrap_or(0.0),
                    p["max_cpu_ms"].as_f64().unwrap_or(0.0),
                );
            }
        }
    }
    for r in rows.iter().filter(|r| r["lock_samples"].is_u64()) {
        let _ = writeln!(
            t,
            "\n{} {}: a backend waited for a lock in {} of {} samples (every 5 ms); the longest open transaction {:.2} s",
            r["backend"].as_str().unwrap_or(""),
            r["op"].as_str().unwrap_or(""),
            r["lock_wait_samples"],
            r["lock_samples"],
            r["longest_transaction_secs"].as_f64().unwrap_or(0.0),
        );
    }
    t
}
