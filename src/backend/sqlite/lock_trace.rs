//! Timings of the write-lock holds and checkpoints of long operations, for
//! finding what makes a writer of another session wait (issue 40.1).
//!
//! Only when `SESSIONTREE_LOCK_TRACE` names a file: one line per event is
//! appended to it (several processes may share the file: each line is one
//! `write` in append mode). Otherwise nothing is measured or written, at the
//! cost of one initialised-flag test per event. A line is `key=value` pairs:
//! `at` (Unix ms when the event began), `pid`, `what`, `ms` (wall), and for a
//! hold of the write lock `cpu_ms`/`runq_ms` (this thread's time on a CPU and
//! waiting for one, from `/proc/thread-self/schedstat`, to tell a long hold
//! from a descheduled one on a loaded machine) and `rows`.

use std::io::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The trace file, if `SESSIONTREE_LOCK_TRACE` names one that opens, or
/// else one the program named ([`trace_to`]).
fn file() -> Option<&'static Mutex<std::fs::File>> {
    static FILE: OnceLock<Option<Mutex<std::fs::File>>> = OnceLock::new();
    FILE.get_or_init(|| open(std::env::var_os("SESSIONTREE_LOCK_TRACE")?))
        .as_ref()
        .or_else(|| NAMED.get())
}

/// The trace file named by [`trace_to`].
static NAMED: OnceLock<Mutex<std::fs::File>> = OnceLock::new();

fn open(path: impl AsRef<std::path::Path>) -> Option<Mutex<std::fs::File>> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()
        .map(Mutex::new)
}

/// Traces this process's events into `path` from now on, as
/// `SESSIONTREE_LOCK_TRACE` would have from the start (which wins if set):
/// for a program whose own writes beside a traced operation are measured
/// (the avail bench's appender: how long its appends waited for the lock,
/// and for their commits). Once per process; false if the file does not
/// open or another was named first.
pub fn trace_to(path: &std::path::Path) -> bool {
    match open(path) {
        Some(file) => NAMED.set(file).is_ok(),
        None => false,
    }
}

/// This thread's `(on a CPU, waiting for a CPU)` so far, if the kernel says.
fn schedstat() -> Option<(Duration, Duration)> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    let run = fields.next()??;
    let wait = fields.next()??;
    Some((Duration::from_nanos(run), Duration::from_nanos(wait)))
}

/// An event being timed (only while tracing).
pub(super) struct Span {
    what: &'static str,
    began: Instant,
    began_at: SystemTime,
    sched: Option<(Duration, Duration)>,
}

/// Starts timing `what`, if tracing.
pub(super) fn start(what: &'static str) -> Option<Span> {
    file()?;
    Some(Span {
        what,
        began: Instant::now(),
        began_at: SystemTime::now(),
        sched: schedstat(),
    })
}

std::thread_local! {
    /// This thread's schedstat when it last took the write lock
    /// ([`lock_taken`]), if tracing.
    static TAKEN: std::cell::Cell<Option<(Duration, Duration)>> = const { std::cell::Cell::new(None) };
}

/// Notes that this thread has just taken the write lock, so that the hold's
/// line ([`started_at`]) can say how much of it was spent on a CPU.
pub(super) fn lock_taken() {
    if file().is_some() {
        TAKEN.with(|t| t.set(schedstat()));
    }
}

/// Starts timing `what` as from `began` (a hold of the write lock that
/// began then, at this thread's last [`lock_taken`]), if tracing.
pub(super) fn started_at(what: &'static str, began: Instant) -> Option<Span> {
    let mut span = start(what)?;
    let ago = span.began.saturating_duration_since(began);
    span.began = began;
    span.began_at = span.began_at.checked_sub(ago).unwrap_or(span.began_at);
    span.sched = TAKEN.with(std::cell::Cell::take);
    Some(span)
}

impl Span {
    /// Ends the event: one line with `rows` and `extra` (`key=value` pairs).
    pub(super) fn end(self, rows: u64, extra: &str) {
        let Some(file) = file() else { return };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = self
            .began_at
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3);
        let mut line = format!(
            "at={at:.1} pid={} what={} ms={:.2} rows={rows}",
            std::process::id(),
            self.what,
            ms(self.began.elapsed())
        );
        if let (Some((run0, wait0)), Some((run1, wait1))) = (self.sched, schedstat()) {
            line.push_str(&format!(
                " cpu_ms={:.2} runq_ms={:.2}",
                ms(run1.saturating_sub(run0)),
                ms(wait1.saturating_sub(wait0))
            ));
        }
        if !extra.is_empty() {
            line.push(' ');
            line.push_str(extra);
        }
        line.push('\n');
        // A trace that cannot be written is no reason to fail the write.
        let _ = file
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write_all(line.as_bytes());
    }
}

/// Ends `span` if there is one (the call sites' common case).
pub(super) fn end(span: Option<Span>, rows: u64, extra: &str) {
    if let Some(span) = span {
        span.end(rows, extra);
    }
}

/// Ends `span` if there is one and it took at least `least` (a lock wait:
/// most are none).
pub(super) fn end_if_over(span: Option<Span>, least: Duration, extra: &str) {
    if let Some(span) = span.filter(|s| s.began.elapsed() >= least) {
        span.end(0, extra);
    }
}
