//! The archive's checkpoints, off every writer's commit path.
//!
//! SQLite's own policy checkpoints inside the commit that finds the log past
//! 1,000 pages: whichever connection commits then copies the whole log into
//! the database and waits for the disk before its commit returns. While a
//! long operation (import, fork, delete, compact) writes, the log is always
//! past that mark, and the connection that committed most often — a writer
//! appending to another session every few milliseconds — ran nearly every
//! checkpoint of the operation's log: at 1,000,000 entries its appends waited
//! up to 1.6 s during an import and 3.4 s during a delete, though no
//! transaction held the write lock for more than 100 ms.
//!
//! Here every writing connection of an archive handle only *asks* for a
//! checkpoint ([`LogCheckpointer::request`], from SQLite's commit hook)
//! and a thread of the handle's own runs it, `PASSIVE`, on its own
//! connection: it takes no write lock and waits for no reader, copies only
//! committed frames, and syncs the log before it copies. A long operation,
//! which writes the log, keeps it short on its own thread between its
//! batches ([`keep_log_short`]), so that the log starts over instead of
//! growing for the whole operation. Checkpoints are an optimisation SQLite
//! may do at any moment: their running late, failing, or never running
//! (the last connection to close checkpoints too) changes no data.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Log pages past which a commit asks for a checkpoint: SQLite's own default.
pub(super) const CHECKPOINT_PAGES: i64 = 1_000;

/// Log pages past which a long operation checkpoints between its batches
/// (64 MB at SQLite's 4 KB pages), so that its next batch starts the log
/// over ([`keep_log_short`]).
pub(super) const LONG_OPERATION_LOG_PAGES: i64 = 16_384;

/// The least time between two background checkpoints: each one waits for
/// the disk twice, and pages written again and again (indexes, search
/// segments) are copied once per checkpoint, not once per commit.
const PACE: Duration = Duration::from_millis(100);

/// What the writing connections and the checkpointing thread share.
#[derive(Debug, Default)]
struct Shared {
    /// `(asked, stopping)`.
    state: Mutex<(bool, bool)>,
    wake: Condvar,
    /// Held while this handle checkpoints (its thread, or a long operation
    /// catching up): one at a time, so the catching up waits for the
    /// thread's checkpoint instead of finding the log busy.
    checkpointing: Mutex<()>,
}

/// The background checkpointer of one archive handle: started on the first
/// request, stopped (and its thread waited for) when the handle's last
/// connection manager is dropped.
#[derive(Debug, Default)]
pub struct LogCheckpointer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Pages in the log as of the last commit through this handle.
    log_pages: AtomicI64,
    /// The log's pages when [`keep_log_short`] last gave up (0: it did not):
    /// it tries again only once the log has grown by as much again, or
    /// started over.
    gave_up_at: AtomicI64,
}

impl LogCheckpointer {
    /// Called after every commit of a writing connection with the pages now
    /// in the log: past [`CHECKPOINT_PAGES`], wakes the thread (starting it
    /// the first time) and returns at once.
    pub(super) fn request(&self, path: &Path, pages: i64) {
        self.log_pages.store(pages, Ordering::Relaxed);
        if pages < CHECKPOINT_PAGES {
            return;
        }
        {
            let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.1 {
                return;
            }
            state.0 = true;
        }
        self.shared.wake.notify_one();
        let mut thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if thread.is_none() {
            // A checkpointer that cannot start leaves the log to the next
            // request, to the long operations' own checkpoints
            // ([`keep_log_short`]) and to the last connection's close.
            *thread = spawn(Arc::clone(&self.shared), path.to_owned());
        }
    }

    /// Pages in the log as of the last commit through this handle.
    pub(super) fn log_pages(&self) -> i64 {
        self.log_pages.load(Ordering::Relaxed)
    }

    /// This handle's turn to checkpoint: held, its thread runs none.
    pub(super) fn turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared
            .checkpointing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

/// The checkpointing thread: one `PASSIVE` checkpoint per wake, at most one
/// per [`PACE`], until the checkpointer is dropped.
fn spawn(shared: Arc<Shared>, path: PathBuf) -> Option<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("sessiontree-checkpoint".into())
        .spawn(move || {
            // No commit hook on this connection: it never commits, and a
            // checkpoint does not call it.
            let Ok(conn) = rusqlite::Connection::open_with_flags(
                &path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            ) else {
                return;
            };
            let mut last: Option<Instant> = None;
            loop {
                {
                    let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                    while !state.0 && !state.1 {
                        state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
                    }
                    if state.1 {
                        return;
                    }
                    // Waits out the pace, unless stopped meanwhile.
                    if let Some(rest) = last.and_then(|t| PACE.checked_sub(t.elapsed())) {
                        state = shared
                            .wake
                            .wait_timeout_while(state, rest, |s| !s.1)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                        if state.1 {
                            return;
                        }
                    }
                    state.0 = false;
                }
                last = Some(Instant::now());
                let turn = shared
                    .checkpointing
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                // A busy or failed checkpoint leaves the frames to the next.
                let _ = passive_checkpoint(&conn, "ckpt-background");
                drop(turn);
            }
        })
        .ok()
}

impl Drop for LogCheckpointer {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1 = true;
        self.shared.wake.notify_all();
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

/// How long a long operation waits between two batches for the log to be
/// copied ([`keep_log_short`]) before it goes on regardless.
const CATCH_UP: Duration = Duration::from_secs(2);

/// One `PASSIVE` checkpoint: whether it ran (copying every frame no
/// reader's snapshot still needs), rather than finding another process's
/// checkpoint running.
fn passive_checkpoint(conn: &rusqlite::Connection, what: &'static str) -> rusqlite::Result<bool> {
    checkpoint(conn, "PASSIVE", what)
}

/// One `PASSIVE` checkpoint: whether it copied the whole log (it ran, and
/// no reader's snapshot held a frame back).
pub(super) fn passive_checkpoint_of_all(
    conn: &rusqlite::Connection,
    what: &'static str,
) -> rusqlite::Result<bool> {
    checkpoint_counts(conn, "PASSIVE", what).map(|(busy, log, copied)| busy == 0 && log == copied)
}

/// One checkpoint of `mode` (traced as `what`): whether it ran rather than
/// finding the log busy.
fn checkpoint(
    conn: &rusqlite::Connection,
    mode: &str,
    what: &'static str,
) -> rusqlite::Result<bool> {
    checkpoint_counts(conn, mode, what).map(|(busy, _, _)| busy == 0)
}

/// One checkpoint of `mode` (traced as `what`): SQLite's answer, whether
/// the log was busy, its frames and the frames copied.
fn checkpoint_counts(
    conn: &rusqlite::Connection,
    mode: &str,
    what: &'static str,
) -> rusqlite::Result<(i64, i64, i64)> {
    let span = super::lock_trace::start(what);
    let done = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    let extra = match &done {
        Ok((busy, log, copied)) => format!("busy={busy} log={log} copied={copied}"),
        Err(e) => format!("error={:?}", e.to_string()),
    };
    super::lock_trace::end(span, 0, &extra);
    done
}

std::thread_local! {
    /// A shorter wait for a lock than the busy handler's own, while
    /// [`waiting_at_most`] runs on this thread.
    static WAIT_LIMIT: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
}

/// Sets this thread's lock wait back when dropped (also if `f` unwinds).
struct WaitLimitBack(Option<Duration>);

impl Drop for WaitLimitBack {
    fn drop(&mut self) {
        WAIT_LIMIT.with(|w| w.set(self.0));
    }
}

/// Runs `f` with this thread's waits for a lock cut to `limit` each (on
/// every connection whose busy handler is
/// [`wait_for_the_lock`](super::connection::wait_for_the_lock)): for a
/// checkpoint that holds the write lock while it waits for readers, where
/// waiting long would make every other writer wait as long. Needs no
/// `&mut Connection`, unlike swapping the handler.
fn waiting_at_most<T>(limit: Duration, f: impl FnOnce() -> T) -> T {
    let _back = WaitLimitBack(WAIT_LIMIT.with(|w| w.replace(Some(limit))));
    f()
}

/// This thread's wait for a lock if [`waiting_at_most`] cut it.
pub(super) fn wait_limit() -> Option<Duration> {
    WAIT_LIMIT.with(std::cell::Cell::get)
}

/// How long the checkpoint that starts the log over ([`keep_log_short`])
/// waits for the write lock, and then, holding it, for readers: other
/// writers wait behind it as long.
const RESTART_WAIT: Duration = Duration::from_millis(20);

/// [`LONG_OPERATION_LOG_PAGES`], or fewer as a test sets it
/// (`SESSIONTREE_TEST_LOG_PAGES`), so that a CI-sized fork passes it many
/// times.
fn long_operation_log_pages() -> i64 {
    static SET: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        std::env::var("SESSIONTREE_TEST_LOG_PAGES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n: &i64| n > 0)
            .unwrap_or(LONG_OPERATION_LOG_PAGES)
    })
}

/// Between two batches of a long operation (outside any transaction): once
/// the log passes [`LONG_OPERATION_LOG_PAGES`], copies it into the database
/// on this thread and makes the next write start it over. The operation
/// waits for the disk here, not the writers of other sessions.
///
/// Two steps. A `PASSIVE` checkpoint (waiting for the running one: this
/// process's, or for at most [`CATCH_UP`] another's) copies the log
/// holding no lock. But a writer of another session appending every few
/// milliseconds commits frames while it copies, so it never copied the
/// whole log, and SQLite starts the log over only at a write that begins
/// when every frame is copied: with an appender beside it the log grew to
/// 383 MB during a 200,000-entry fork and 486 MB during the delete. So a
/// `RESTART` checkpoint follows: it takes the write lock, copies the few
/// frames appended meanwhile, syncs, and waits for readers of the old log
/// to finish (at most [`RESTART_WAIT`] each, the lock held), after which
/// the next write, whoever's, starts the log over. A busy or failed
/// checkpoint leaves the log to the next batch.
pub(super) fn keep_log_short(conn: &rusqlite::Connection, checkpointer: &LogCheckpointer) {
    let pages = checkpointer.log_pages();
    let limit = long_operation_log_pages();
    let gave_up_at = checkpointer.gave_up_at.load(Ordering::Relaxed);
    // Another process's checkpoint that ran out the wait is not waited for
    // again at every batch.
    let retry = gave_up_at == 0 || pages < gave_up_at || pages >= gave_up_at + limit;
    if pages < limit || !retry {
        return;
    }
    let _turn = checkpointer.turn();
    let started = Instant::now();
    // Busy: another process checkpoints.
    loop {
        match passive_checkpoint(conn, "ckpt-op-passive") {
            Ok(true) => break,
            Ok(false) if started.elapsed() < CATCH_UP => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(false) => {
                checkpointer.gave_up_at.store(pages, Ordering::Relaxed);
                return;
            }
            Err(_) => return,
        }
    }
    checkpointer.gave_up_at.store(0, Ordering::Relaxed);
    // The copy is on its way to the disk, not there: a `PASSIVE` checkpoint
    // syncs the database only if it copied every frame, which an appender
    // committing meanwhile prevents, and the `RESTART` below then waited
    // for the whole copy to reach the disk, holding the write lock (up to
    // 107 ms at 200,000 entries, load 12). Synced here, without the lock,
    // the `RESTART`'s own sync (which still runs: durability is SQLite's,
    // unchanged) waits only for the few frames appended meanwhile. A failed
    // sync leaves that wait to the `RESTART`, as before.
    let span = super::lock_trace::start("db-sync");
    let synced = sync_database_file(conn);
    super::lock_trace::end(span, 0, if synced.is_ok() { "" } else { "failed=1" });
    // Busy (the write lock or a reader held past the wait): the next batch
    // tries again.
    let _ = waiting_at_most(RESTART_WAIT, || {
        checkpoint(conn, "RESTART", "ckpt-op-restart")
    });
}

/// Syncs the database file of `conn` (outside any transaction) through
/// SQLite's own open file, so that what a `PASSIVE` checkpoint copied is on
/// disk before a checkpoint that holds the write lock syncs it again. Not
/// through a second descriptor of our own: closing any descriptor of the
/// file drops every POSIX lock this process holds on it, its connections'
/// included.
#[allow(unsafe_code)]
fn sync_database_file(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::ffi;
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: `conn.handle()` is this open connection, used on this thread
    // only while no statement of it runs; `SQLITE_FCNTL_FILE_POINTER` writes
    // the `sqlite3_file*` of its main database (owned by the connection,
    // open until it closes, which cannot happen while `conn` is borrowed)
    // into `file`; its `xSync` is the VFS's own sync of that open file, the
    // call SQLite makes itself at a checkpoint.
    let rc = unsafe {
        let rc = ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&mut file as *mut *mut ffi::sqlite3_file).cast(),
        );
        if rc != ffi::SQLITE_OK || file.is_null() || (*file).pMethods.is_null() {
            ffi::SQLITE_NOTFOUND
        } else {
            match (*(*file).pMethods).xSync {
                Some(sync) => sync(file, ffi::SQLITE_SYNC_NORMAL),
                None => ffi::SQLITE_NOTFOUND,
            }
        }
    };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(ffi::Error::new(rc), None))
    }
}
