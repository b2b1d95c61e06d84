//! Checkpoints on a thread of their own while a staged import writes.
//!
//! A staged import's batches commit without waiting for the disk; its
//! publishing commit syncs them all ([`super::writer`]). Left to SQLite's
//! automatic checkpoints, the writing thread also copied the log into the
//! database and waited for the disk each time, and at the end it waited for
//! the whole unsynced log (130 ms on the generated 100,000-entry session),
//! then for the final copy (90 ms): together about a sixth of the import.
//! Here a second connection checkpoints every [`INTERVAL`] while the import
//! writes, so those waits happen beside it: a `PASSIVE` checkpoint takes no
//! write lock and waits for no reader, copies only committed frames, and
//! syncs the log before it copies (so the publishing commit finds little
//! left to sync). Checkpoints are an optimisation SQLite may do at any
//! moment: stopping this thread, or its failing, changes no data.

use super::connection::ConnectionManager;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Time between two background checkpoints: a few batches' log each.
const INTERVAL: Duration = Duration::from_millis(150);

/// A running background checkpointer; stops (and waits for its thread)
/// when dropped.
#[derive(Debug)]
pub(super) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the archive `manager` opens, on a new thread
    /// with its own connection; `None` if that cannot be set up (SQLite's
    /// own checkpoints then do the work, as before).
    pub(super) fn start(manager: &ConnectionManager) -> Option<Self> {
        let conn = manager.connect_raw().ok()?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("sessiontree-checkpoint".into())
            .spawn(move || {
                let (flag, wake) = &*stopped;
                let mut done = flag.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    // Waits while not stopped: a stop set before the wait (or
                    // during a checkpoint) ends it at once, not an interval later.
                    done = wake
                        .wait_timeout_while(done, INTERVAL, |stop| !*stop)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    if *done {
                        break;
                    }
                    // Not holding the flag while the disk is waited for.
                    drop(done);
                    // A busy or failed checkpoint leaves the frames to the next one
                    // (or to SQLite's own): nothing is lost either way.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    done = flag.lock().unwrap_or_else(|p| p.into_inner());
                }
            })
            .ok()?;
        Some(Checkpointer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (flag, wake) = &*self.stop;
        *flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
