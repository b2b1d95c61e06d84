//! `sessiontree watch`: keeps the archive in step with pi's sessions
//! directory while pi writes.
//!
//! File-system notifications (inotify through `notify`) say which files
//! changed; a full rescan every `--interval` catches whatever they missed
//! (an overflowed queue, a file system without notifications). Changed files
//! are imported with the import's own functions, so everything the import
//! guarantees holds here: a file is appended to from the bytes its import
//! record names (a restart, even after kill -9, resumes from what is stored),
//! a half-written last line waits for its newline, and a file truncated or
//! replaced since its import is refused and reported while the archive keeps
//! what it had. Idle, the loop sleeps in one blocking receive until an event,
//! the next rescan or a signal: no polling, and no state that grows.

use super::{Cli, Report};
use clap::Args;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use serde_json::json;
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::{FileImport, ImportOptions, ImportOutcome};
use sessiontree::{Error, Result};
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Files or directories to keep imported (directories recursively);
    /// default: pi's sessions directory, found as `import` finds it.
    pub paths: Vec<PathBuf>,
    /// Import what changed since the last run, once, then exit (for cron
    /// and scripts).
    #[arg(long)]
    pub once: bool,
    /// Seconds between full rescans, the fallback for notifications missed.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub interval: f64,
    /// Print only problems, not a line per session updated.
    #[arg(long)]
    pub quiet: bool,
    /// Whose rules newly imported sessions follow (as `import --rules`).
    #[arg(long, value_name = "app|sdk")]
    pub rules: Option<sessiontree::Contract>,
}

/// Files imported per call: bounds the memory of one pass (results, plans)
/// under a burst, and lets a signal stop the watcher between two calls.
const BATCH_FILES: usize = 256;
/// How long events are gathered after the first one before importing:
/// pi writes a turn as several appends in quick succession.
const GATHER: Duration = Duration::from_millis(60);
/// The longest events are gathered while they keep coming.
const GATHER_MAX: Duration = Duration::from_millis(250);
/// Retry delays while the archive is busy: doubling from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(8);
/// How long `--once` keeps retrying a busy archive before giving up.
const ONCE_PATIENCE: Duration = Duration::from_secs(60);
/// Events waiting for the loop at most; beyond it the notifier thread
/// drops them and asks for a rescan instead (memory stays bounded).
const QUEUE: usize = 4096;

/// What wakes the loop.
enum Msg {
    /// These paths changed.
    Changed(Vec<PathBuf>),
    /// Something was missed (the notifier's queue overflowed, or it failed):
    /// rescan everything.
    Rescan(String),
    /// Ctrl-C or SIGTERM.
    Stop,
}

/// Runs `watch`.
pub fn run(cli: &Cli, args: &WatchArgs) -> Result<Report> {
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        return Err(Error::Usage(format!(
            "--interval {} is not a number of seconds of at least 0.1",
            args.interval
        )));
    }
    let roots = roots(args)?;
    let archive = super::open_archive(cli)?;
    let mut w = Watch {
        archive,
        options: ImportOptions { rules: args.rules },
        out: Output {
            json: cli.json,
            quiet: args.quiet,
            reported: HashMap::new(),
            problems: 0,
        },
        roots,
        updated: 0,
        entries: 0,
    };
    let stopped = if args.once {
        w.once()?
    } else {
        w.watch(Duration::from_secs_f64(args.interval))?
    };
    let text = format!(
        "watch {}: {} session update(s), {} entries, {} problem(s) reported\n",
        if stopped { "stopped" } else { "done" },
        w.updated,
        w.entries,
        w.out.problems
    );
    let mut report = Report::new(
        json!({
            "event": if stopped { "stopped" } else { "done" },
            "roots": w.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>(),
            "sessionsUpdated": w.updated,
            "entries": w.entries,
            "problems": w.out.problems,
        }),
        if args.quiet && w.out.problems == 0 {
            String::new()
        } else {
            text
        },
    );
    if args.once && w.out.problems > 0 {
        report.status = super::exit::SOME_FAILED;
    }
    Ok(report)
}

/// The paths to watch: those named, else pi's sessions directory, which
/// must exist (a mistyped directory would otherwise be watched forever).
fn roots(args: &WatchArgs) -> Result<Vec<PathBuf>> {
    let named = if args.paths.is_empty() {
        let pi = sessiontree::layout::pi_sessions_dir_found();
        if !pi.dir.is_dir() {
            return Err(Error::Io {
                context: format!(
                    "no pi sessions directory at {} ({}); set PI_CODING_AGENT_SESSION_DIR or PI_CODING_AGENT_DIR, or name the directories to watch",
                    pi.dir.display(),
                    pi.source.describe()
                ),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        vec![pi.dir]
    } else {
        args.paths.clone()
    };
    // Canonical, so that a notification's path (always absolute, links
    // resolved by the kernel's view of the directory) is found under its root.
    named
        .iter()
        .map(|p| {
            std::fs::canonicalize(p).map_err(|e| Error::io(format!("watching {}", p.display()), e))
        })
        .collect()
}

/// The watcher's state.
struct Watch {
    archive: Archive,
    options: ImportOptions,
    out: Output,
    roots: Vec<PathBuf>,
    /// Sessions imported or appended to, and the entries written.
    updated: u64,
    entries: u64,
}

/// What one import of a batch left to do.
enum Pass {
    /// All done (problems reported).
    Done,
    /// These files could not be written for now (the archive busy, another
    /// import at them): try again after a pause.
    Retry(Vec<PathBuf>, String),
}

impl Watch {
    /// Every file below the roots.
    fn scan(&mut self) -> BTreeSet<PathBuf> {
        let mut files = Vec::new();
        for root in &self.roots {
            if let Err(e) = sessiontree::layout::collect_jsonl_files(root, &mut files) {
                self.out.problem(root, &e.to_string(), e.code().as_str());
            }
        }
        // Problems remembered for files gone are forgotten: the map stays
        // as big as the directory.
        let present: std::collections::HashSet<&PathBuf> = files.iter().collect();
        self.out
            .reported
            .retain(|p, _| present.contains(p) || self.roots.contains(p));
        files.into_iter().collect()
    }

    /// `--once`: one full pass, retrying a busy archive for a while.
    fn once(&mut self) -> Result<bool> {
        let mut pending = self.scan();
        let started = Instant::now();
        let mut delay = BACKOFF_FIRST;
        while !pending.is_empty() {
            let retry = self.import_some(&mut pending)?;
            if let Some((files, why)) = retry {
                if started.elapsed() >= ONCE_PATIENCE {
                    for f in &files {
                        self.out
                            .problem(f, &format!("not imported: {why}"), "storage");
                    }
                    break;
                }
                self.out.busy(&why, delay);
                std::thread::sleep(delay);
                delay = (delay * 2).min(BACKOFF_MAX);
                pending.extend(files);
            }
        }
        Ok(false)
    }

    /// Imports up to [`BATCH_FILES`] of `pending` (taken out of it); the
    /// files to retry, and why, if the archive would not take them now.
    fn import_some(
        &mut self,
        pending: &mut BTreeSet<PathBuf>,
    ) -> Result<Option<(Vec<PathBuf>, String)>> {
        let mut batch = Vec::with_capacity(BATCH_FILES.min(pending.len()));
        while batch.len() < BATCH_FILES {
            match pending.pop_first() {
                Some(f) => batch.push(f),
                None => break,
            }
        }
        Ok(match self.import_batch(&batch)? {
            Pass::Done => None,
            Pass::Retry(files, why) => Some((files, why)),
        })
    }

    /// Imports `files`, reporting each session updated and each problem.
    fn import_batch(&mut self, files: &[PathBuf]) -> Result<Pass> {
        if files.is_empty() {
            return Ok(Pass::Done);
        }
        let results = match sessiontree::convert::import_jsonl_files_with(
            &self.archive,
            files,
            &self.options,
            &mut |_, _| {},
        ) {
            Ok(results) => results,
            Err(e) if retryable(&e) => return Ok(Pass::Retry(files.to_vec(), e.to_string())),
            Err(e) => return Err(e),
        };
        let mut retry = Vec::new();
        let mut why = String::new();
        for (file, result) in files.iter().zip(results) {
            match result {
                Ok(done) => match done.outcome {
                    // Only a half-written line was new: it waits for its
                    // newline, and nothing was written.
                    ImportOutcome::Appended if done.entries == 0 => {
                        self.out.reported.remove(file);
                    }
                    _ if done.report.archive_only > 0 => self.out.problem(
                        file,
                        &format!(
                            "is shorter than when it was imported (truncated or rewritten): the archive keeps the {} entries it no longer has; `sessiontree export {} --out DIR` writes them back",
                            done.report.archive_only, done.session_id
                        ),
                        "invalid_session",
                    ),
                    ImportOutcome::Imported | ImportOutcome::Appended => {
                        self.updated += 1;
                        self.entries += done.entries;
                        self.out.updated(file, &done);
                        self.out.reported.remove(file);
                    }
                    ImportOutcome::Unchanged => {
                        self.out.reported.remove(file);
                    }
                    // As `import` counts it: not a failure (the session
                    // came from another copy of the file, or another source).
                    ImportOutcome::AlreadyPresent => self.out.skipped(file, &done.session_id),
                    ImportOutcome::InProgressElsewhere => {
                        why = "another process is importing it".into();
                        retry.push(file.clone());
                    }
                },
                Err(e) if retryable(&e) => {
                    why = e.to_string();
                    retry.push(file.clone());
                }
                Err(e) if !file.exists() => self.out.problem(
                    file,
                    &format!("removed ({e}); the archive keeps its session"),
                    "not_found",
                ),
                Err(e) => self.out.problem(
                    file,
                    &format!("{e} (the archive keeps what it had)"),
                    e.code().as_str(),
                ),
            }
        }
        Ok(if retry.is_empty() {
            Pass::Done
        } else {
            Pass::Retry(retry, why)
        })
    }

    /// Watches until Ctrl-C or SIGTERM; `true` when stopped by one.
    fn watch(&mut self, interval: Duration) -> Result<bool> {
        let (tx, rx) = mpsc::sync_channel::<Msg>(QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        // Kept alive for the loop's life: dropping it stops the notifications.
        let _watcher = self.start_notifier(tx.clone(), Arc::clone(&overflowed));
        start_signal_thread(tx)?;
        let mut pending = self.scan();
        let mut next_rescan = Instant::now() + interval;
        let mut retry_at: Option<Instant> = None;
        let mut delay = BACKOFF_FIRST;
        loop {
            let now = Instant::now();
            if !pending.is_empty() && retry_at.is_none_or(|at| now >= at) {
                match self.import_some(&mut pending)? {
                    None => {
                        if retry_at.is_some() && pending.is_empty() {
                            self.out.line(
                                json!({"event": "resumed"}),
                                "archive free again: caught up".into(),
                                false,
                            );
                        }
                        if pending.is_empty() {
                            retry_at = None;
                            delay = BACKOFF_FIRST;
                        }
                    }
                    Some((files, why)) => {
                        self.out.busy(&why, delay);
                        pending.extend(files);
                        retry_at = Some(Instant::now() + delay);
                        delay = (delay * 2).min(BACKOFF_MAX);
                    }
                }
            }
            // Sleep until the next thing to do: a rescan, a retry, or more of
            // a burst (no wait at all, only a look for a signal).
            let now = Instant::now();
            let mut until = next_rescan;
            if !pending.is_empty() {
                until = until.min(retry_at.unwrap_or(now));
            }
            let message = match rx.recv_timeout(until.saturating_duration_since(now)) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return Ok(true),
            };
            let mut stop = false;
            if let Some(first) = message {
                // Gather what comes right after: one import for a burst.
                let gather_end = Instant::now() + GATHER_MAX;
                let mut next = Some(first);
                while let Some(m) = next.take() {
                    match m {
                        Msg::Stop => stop = true,
                        Msg::Changed(paths) => self.take(paths, &mut pending),
                        Msg::Rescan(why) => {
                            self.out.line(
                                json!({"event": "rescan", "why": why}),
                                format!("rescanning: {why}"),
                                false,
                            );
                            pending.extend(self.scan());
                        }
                    }
                    if stop {
                        break;
                    }
                    let left = gather_end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    next = rx.recv_timeout(left.min(GATHER)).ok();
                }
            }
            if overflowed.swap(false, Ordering::Relaxed) {
                pending.extend(self.scan());
            }
            if stop {
                return Ok(true);
            }
            if Instant::now() >= next_rescan {
                pending.extend(self.scan());
                next_rescan = Instant::now() + interval;
            }
        }
    }

    /// Adds the files among `paths` that lie below the roots to `pending`;
    /// a directory (made, or moved in) is scanned whole.
    fn take(&mut self, paths: Vec<PathBuf>, pending: &mut BTreeSet<PathBuf>) {
        for path in paths {
            if !self.roots.iter().any(|r| path.starts_with(r)) {
                continue;
            }
            if path.extension().is_some_and(|e| e == "jsonl") {
                pending.insert(path);
            } else if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                let mut files = Vec::new();
                if sessiontree::layout::collect_jsonl_files(&path, &mut files).is_ok() {
                    pending.extend(files);
                }
            }
        }
    }

    /// Starts the notifications for the roots (a file root through its
    /// directory); `None`, reported, if the system has none to give: the
    /// rescans then do all the work.
    fn start_notifier(
        &mut self,
        tx: SyncSender<Msg>,
        overflowed: Arc<AtomicBool>,
    ) -> Option<notify::RecommendedWatcher> {
        let handler = move |event: notify::Result<notify::Event>| {
            let msg = match event {
                Ok(e) if e.need_rescan() => Msg::Rescan("the notifier missed events".into()),
                // Reads (ours included) change nothing; a close after a
                // write does.
                Ok(e) if matches!(e.kind, EventKind::Access(a) if a != AccessKind::Close(AccessMode::Write)) => {
                    return
                }
                Ok(e) => Msg::Changed(e.paths),
                Err(e) => Msg::Rescan(format!("the notifier failed: {e}")),
            };
            match tx.try_send(msg) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                // The loop is behind: it rescans once it catches up.
                Err(TrySendError::Full(_)) => overflowed.store(true, Ordering::Relaxed),
            }
        };
        let started = notify::recommended_watcher(handler).and_then(|mut w| {
            for root in &self.roots {
                if root.is_dir() {
                    w.watch(root, RecursiveMode::Recursive)?;
                } else {
                    let dir = root.parent().unwrap_or(root);
                    w.watch(dir, RecursiveMode::NonRecursive)?;
                }
            }
            Ok(w)
        });
        match started {
            Ok(w) => Some(w),
            Err(e) => {
                self.out.problem(
                    Path::new(""),
                    &format!("no file-system notifications ({e}); rescanning only"),
                    "storage",
                );
                None
            }
        }
    }
}

/// Ctrl-C and SIGTERM stop the loop between two imports; a second one
/// exits at once (a new file's import cut short leaves nothing visible; an
/// append cut short leaves whole entries, which the next import goes on
/// after).
fn start_signal_thread(tx: SyncSender<Msg>) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| Error::io("listening for Ctrl-C and SIGTERM", e))?;
    std::thread::spawn(move || {
        let mut asked = false;
        for _ in signals.forever() {
            if asked {
                std::process::exit(130);
            }
            asked = true;
            let _ = tx.send(Msg::Stop);
        }
    });
    Ok(())
}

/// Whether `e` is the archive being busy for now (locked, a session's writer
/// claimed), worth a retry.
fn retryable(e: &Error) -> bool {
    match e {
        Error::Sqlite {
            source: rusqlite::Error::SqliteFailure(f, _),
            ..
        } => matches!(
            f.code,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        ),
        Error::WriterClaimed { .. } | Error::Pool(_) => true,
        _ => false,
    }
}

/// The progress lines: one per session updated (not with `--quiet`), one
/// per problem (each said once while it lasts), as text or JSON lines.
struct Output {
    json: bool,
    quiet: bool,
    /// The problem last reported per file, with the file's size and
    /// modification time then, so a rescan does not repeat it.
    reported: HashMap<PathBuf, String>,
    problems: u64,
}

impl Output {
    /// Writes a line to stdout now (a watcher's output is read as it comes).
    fn line(&mut self, value: serde_json::Value, text: String, problem: bool) {
        if self.quiet && !problem {
            return;
        }
        let mut out = std::io::stdout().lock();
        let written = if self.json {
            writeln!(out, "{value}")
        } else {
            writeln!(
                out,
                "{} {}",
                chrono::Local::now().format("%H:%M:%S"),
                super::terminal_safe(&text)
            )
        };
        let _ = written.and_then(|()| out.flush());
    }

    /// A session imported or appended to from `file`.
    fn updated(&mut self, file: &Path, done: &FileImport) {
        let (event, verb) = match done.outcome {
            ImportOutcome::Imported => ("imported", "imported"),
            _ => ("appended", "appended to"),
        };
        self.line(
            json!({
                "event": event,
                "session": done.session_id,
                "file": file.display().to_string(),
                "entries": done.entries,
            }),
            format!(
                "{verb} {} ({} entries) from {}",
                done.session_id,
                done.entries,
                file.display()
            ),
            false,
        );
    }

    /// `file` holds a session the archive has from another file: said once
    /// per change of the file, not counted as a problem.
    fn skipped(&mut self, file: &Path, session: &str) {
        let message = format!(
            "session {session} is already in the archive from another file; this file is not imported"
        );
        if !self.fresh(file, &message) {
            return;
        }
        self.line(
            json!({"event": "skipped", "file": file.display().to_string(), "session": session, "message": message}),
            format!("skipped {}: {message}", file.display()),
            false,
        );
    }

    /// Whether `message` about `file` is news: not what was last said of
    /// it, or said before the file last changed (its size or modification
    /// time), so that a rescan does not repeat it. Remembers it.
    fn fresh(&mut self, file: &Path, message: &str) -> bool {
        let state = std::fs::metadata(file).map_or_else(
            |_| message.to_owned(),
            |m| format!("{message}\0{}\0{:?}", m.len(), m.modified().ok()),
        );
        if self.reported.get(file).is_some_and(|m| *m == state) {
            return false;
        }
        self.reported.insert(file.to_owned(), state);
        true
    }

    /// A problem with `file`, reported unless it is the one last reported for it.
    fn problem(&mut self, file: &Path, message: &str, code: &str) {
        if !self.fresh(file, message) {
            return;
        }
        self.problems += 1;
        let shown = file.display().to_string();
        let text = if shown.is_empty() || message.contains(&shown) {
            format!("problem [{code}]: {message}")
        } else {
            format!("problem [{code}]: {shown}: {message}")
        };
        self.line(
            json!({"event": "problem", "file": shown, "code": code, "message": message}),
            text,
            true,
        );
    }

    /// The archive would not take a write; the next try in `delay`.
    fn busy(&mut self, why: &str, delay: Duration) {
        self.line(
            json!({"event": "busy", "message": why, "retryInSeconds": delay.as_secs_f64()}),
            format!(
                "archive busy ({why}); retrying in {:.2} s",
                delay.as_secs_f64()
            ),
            true,
        );
    }
}
