//! The turnstile: a writer waiting for the write lock gets it before a long
//! operation's next batch, even when it wakes late.
//!
//! A long operation (a staged import, a fork's copy, a delete, compact's
//! batches, a batched migration) commits a batch at least every ~50 ms and
//! pauses between batches, so that a writer of another session waiting in
//! the busy handler ([`wait_for_the_lock`](super::connection::wait_for_the_lock),
//! which sleeps 1 ms and tries again) gets the lock. SQLite's lock is not
//! fair: on a loaded machine the waiter's 1 ms sleep ends late, it misses
//! the pause, and waits a whole batch more, or several (an append beside a
//! 200,000-entry import at load 2.6–4 waited p50 49 ms, max 148 ms).
//!
//! So a waiter announces itself, and the long operation waits for it:
//! - A writer whose `BEGIN IMMEDIATE` finds the lock taken takes a *shared*
//!   advisory lock (`flock`) on the archive's turn file (`archive.db-turn`,
//!   [`turn_path`]) at its first busy-handler call, and lets go as soon as
//!   its `BEGIN` returns, whether it got the lock or gave up
//!   ([`Announcing`]).
//! - Between two batches the long operation sleeps its gap, then, while an
//!   *exclusive* lock on the turn file cannot be had (someone is waiting),
//!   sleeps 1 ms more, for at most [`YIELD_CAP`]: a waiter that never takes
//!   the lock (stopped, or waiting behind something else) must not stall
//!   the operation ([`between_batches`]).
//!
//! The turn file is a separate, empty file: its locks are `flock` locks,
//! which SQLite does not use, and no file descriptor of the database, its
//! `-wal` or `-shm` is ever opened or closed here (closing any descriptor of
//! a file drops every POSIX lock the process holds on it, SQLite's included).
//! It is made by the first writer that waits (not at the archive's
//! creation: an archive nobody waited on has none), with the database
//! file's permission bits, and never removed: removing it is harmless (a
//! waiter holding the old file is not seen for one wait; the next waiter
//! makes a new one). Where it cannot be made or opened (a read-only
//! directory), writers wait as they did without it. Only writers announce:
//! the background checkpointer's `RESTART` never does (it holds the lock
//! while it waits for readers, and is cut short anyway).

use std::cell::RefCell;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a long operation waits, beyond its gap, for announced waiters
/// before it begins its next batch anyway: about two batches. A waiter
/// woken late gets in well within it; one that never takes the lock costs
/// the operation this much per batch at most.
pub(super) const YIELD_CAP: Duration = Duration::from_millis(100);

/// How often the long operation looks again whether the waiters have gone.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// The turn file beside the archive at `archive` (`archive.db-turn`).
pub fn turn_path(archive: &Path) -> PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push("-turn");
    PathBuf::from(name)
}

/// This thread's write that may announce itself, while its `BEGIN` runs.
struct Waiter {
    /// The archive (its turn file is found from it only if the write waits).
    archive: PathBuf,
    /// The open turn file, share-locked once `locked`.
    file: Option<File>,
    /// Whether `file` holds the shared lock.
    locked: bool,
    /// The turn file could not be opened or locked: wait as without it.
    gave_up: bool,
}

std::thread_local! {
    /// The write this thread is beginning, if it may announce itself.
    static WAITING: RefCell<Option<Waiter>> = const { RefCell::new(None) };
}

/// While alive, this thread's `BEGIN IMMEDIATE` on the archive at the path
/// given to [`announcing`] announces itself if it has to wait; dropped, the
/// shared lock (if taken) is let go.
#[must_use = "the announcement lasts while the guard lives"]
pub(super) struct Announcing {
    /// What the thread had before (a `BEGIN` inside another's, which does
    /// not happen, would otherwise lose it).
    previous: Option<Waiter>,
}

/// Runs `begin` (a `BEGIN IMMEDIATE` on the archive at `archive`)
/// announced ([`announcing`]): every write of the archive begins so.
pub(super) fn begin_announced<T>(archive: &Path, begin: impl FnOnce() -> T) -> T {
    let _announcing = announcing(archive);
    begin()
}

/// Lets this thread's next `BEGIN IMMEDIATE` announce itself on the turn
/// file of `archive` if it finds the write lock taken, until the guard is
/// dropped (right after the `BEGIN` returns). Costs a path copy; the file
/// is touched only if the write waits.
fn announcing(archive: &Path) -> Announcing {
    let waiter = Waiter {
        archive: archive.to_owned(),
        file: None,
        locked: false,
        gave_up: false,
    };
    Announcing {
        previous: WAITING.with(|w| w.replace(Some(waiter))),
    }
}

impl Drop for Announcing {
    fn drop(&mut self) {
        let mine = WAITING.with(|w| w.replace(self.previous.take()));
        if let Some(Waiter {
            file: Some(file),
            locked: true,
            ..
        }) = mine
        {
            // Closing the file lets go too; unlocking says so.
            let _ = file.unlock();
        }
    }
}

/// Called by the busy handler on the waiting thread at every try: if this
/// thread is beginning a write ([`announcing`]) and has not announced yet,
/// share-locks the turn file (making it if missing). A lock refused for a
/// moment (a long operation looking, with its exclusive try) is tried again
/// at the next call.
pub(super) fn announce() {
    let _ = WAITING.try_with(|w| {
        let Ok(mut w) = w.try_borrow_mut() else {
            return;
        };
        let Some(waiter) = w.as_mut() else { return };
        if waiter.locked || waiter.gave_up {
            return;
        }
        if waiter.file.is_none() {
            match open_turn(&waiter.archive, true) {
                Some(file) => waiter.file = Some(file),
                None => {
                    waiter.gave_up = true;
                    return;
                }
            }
        }
        if let Some(file) = &waiter.file {
            match file.try_lock_shared() {
                Ok(()) => waiter.locked = true,
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(_)) => waiter.gave_up = true,
            }
        }
    });
}

/// The turn file of `archive`, opened read-only (a `flock` needs no write
/// access); if it is missing and `make`, made first with the database
/// file's permission bits (so every user who may write the archive may
/// open it). Never follows a link to make a file elsewhere (`create_new`).
/// `None` when it cannot be had.
fn open_turn(archive: &Path, make: bool) -> Option<File> {
    let turn = turn_path(archive);
    match File::open(&turn) {
        Ok(file) => return Some(file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && make => {}
        Err(_) => return None,
    }
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let mode = std::fs::metadata(archive).map_or(0o644, |m| m.mode() & 0o666);
        options.mode(mode);
    }
    match options.open(&turn) {
        Ok(_) => File::open(&turn).ok(),
        // Another waiter made it meanwhile.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => File::open(&turn).ok(),
        Err(_) => None,
    }
}

/// What [`wait_for_waiters`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    /// No turn file: nobody has ever waited (or it cannot be opened).
    NoFile,
    /// Nobody was waiting.
    Free,
    /// Waiters were there, and all had the lock (or gave up) after this long.
    Waited(Duration),
    /// Waiters were still there after the cap: the operation goes on.
    Capped,
}

/// Waits while someone holds the turn file of `archive` share-locked (a
/// writer waiting for the lock), looking every [`LOOK_EVERY`], for at most
/// `cap`.
pub(super) fn wait_for_waiters(archive: &Path, cap: Duration) -> Turn {
    let Some(file) = open_turn(archive, false) else {
        return Turn::NoFile;
    };
    let started = Instant::now();
    let mut seen = false;
    loop {
        match file.try_lock() {
            Ok(()) => {
                // Let go at once: a waiter's shared lock must not be refused
                // longer than it takes to look.
                let _ = file.unlock();
                return if seen {
                    Turn::Waited(started.elapsed())
                } else {
                    Turn::Free
                };
            }
            Err(TryLockError::WouldBlock) if started.elapsed() >= cap => return Turn::Capped,
            Err(TryLockError::WouldBlock) => {
                seen = true;
                std::thread::sleep(LOOK_EVERY);
            }
            // A file system without `flock`: as without the turnstile.
            Err(TryLockError::Error(_)) => return Turn::NoFile,
        }
    }
}

/// Between two batches of a long operation on the archive at `archive`:
/// sleeps `gap` (or a test's longer pause, [`pause_length`]), then lets
/// every writer that announced itself meanwhile take the lock first,
/// waiting at most [`YIELD_CAP`]. Traced (`SESSIONTREE_LOCK_TRACE`,
/// `turn-yield`) when it waited for someone.
///
/// [`pause_length`]: crate::backend::pending::pause_length
pub(super) fn between_batches(archive: &Path, gap: Duration) {
    let gap = crate::backend::pending::pause_length(gap);
    if !gap.is_zero() {
        std::thread::sleep(gap);
    }
    let span = super::lock_trace::start("turn-yield");
    let turn = wait_for_waiters(archive, YIELD_CAP);
    if matches!(turn, Turn::Waited(_) | Turn::Capped) {
        super::lock_trace::end(span, 0, &format!("capped={}", turn == Turn::Capped));
    }
}

/// A busy-handler sleep made longer by a test (`SESSIONTREE_TEST_LATE_WAKE_MS`):
/// a waiter on a loaded machine, whose 1 ms sleep ends late. Zero unless set.
pub(super) fn test_late_wake() -> Duration {
    static SET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SET.get_or_init(|| {
        std::env::var("SESSIONTREE_TEST_LATE_WAKE_MS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .map_or(Duration::ZERO, Duration::from_millis)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    /// A waiter as the busy handler makes one: a write beginning on
    /// `archive` that found the lock taken.
    fn waiting_on(archive: &Path) -> Announcing {
        let guard = announcing(archive);
        announce();
        guard
    }

    /// Whether this thread's current write holds the turn file share-locked.
    fn announced() -> bool {
        WAITING.with(|w| w.borrow().as_ref().is_some_and(|w| w.locked))
    }

    #[test]
    fn without_a_turn_file_a_long_operation_pauses_its_gap_only() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        assert_eq!(wait_for_waiters(&db, YIELD_CAP), Turn::NoFile);
        let started = Instant::now();
        between_batches(&db, Duration::from_millis(3));
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(3), "{took:?}");
        // A write that never waited made no file.
        drop(announcing(&db));
        assert!(!turn_path(&db).exists());
    }

    #[test]
    fn nobody_waiting_leaves_the_turn_free() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        drop(waiting_on(&db));
        assert!(turn_path(&db).exists(), "the first waiter makes the file");
        assert_eq!(wait_for_waiters(&db, YIELD_CAP), Turn::Free);
    }

    #[test]
    fn a_long_operation_waits_until_the_waiter_has_had_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let (announced_tx, announced_rx) = channel();
        let hold = Duration::from_millis(40);
        let waiter = std::thread::spawn({
            let db = db.clone();
            move || {
                let guard = waiting_on(&db);
                assert!(announced(), "the waiter took the shared lock");
                announced_tx.send(()).unwrap();
                std::thread::sleep(hold);
                // Its BEGIN returned: it lets go.
                drop(guard);
            }
        });
        announced_rx.recv().unwrap();
        let turn = wait_for_waiters(&db, Duration::from_secs(5));
        waiter.join().unwrap();
        match turn {
            Turn::Waited(waited) => {
                assert!(waited >= hold / 2, "waited only {waited:?}");
                assert!(waited < Duration::from_secs(5), "{waited:?}");
            }
            other => panic!("the waiter was not waited for: {other:?}"),
        }
        assert_eq!(wait_for_waiters(&db, YIELD_CAP), Turn::Free);
    }

    #[test]
    fn every_waiter_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let (announced_tx, announced_rx) = channel();
        let waiters: Vec<_> = [10, 60]
            .into_iter()
            .map(|ms| {
                let (db, announced_tx) = (db.clone(), announced_tx.clone());
                std::thread::spawn(move || {
                    let guard = waiting_on(&db);
                    announced_tx.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(ms));
                    drop(guard);
                })
            })
            .collect();
        announced_rx.recv().unwrap();
        announced_rx.recv().unwrap();
        let turn = wait_for_waiters(&db, Duration::from_secs(5));
        for w in waiters {
            w.join().unwrap();
        }
        assert!(
            matches!(turn, Turn::Waited(d) if d >= Duration::from_millis(30)),
            "the later waiter was not waited for: {turn:?}"
        );
    }

    #[test]
    fn a_waiter_that_never_proceeds_holds_the_operation_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let guard = waiting_on(&db);
        assert!(announced());
        let started = Instant::now();
        let turn = wait_for_waiters(&db, Duration::from_millis(30));
        let took = started.elapsed();
        assert_eq!(turn, Turn::Capped);
        assert!(
            took >= Duration::from_millis(30) && took < Duration::from_secs(2),
            "{took:?}"
        );
        // The real cap, through the function the operations call.
        let started = Instant::now();
        between_batches(&db, Duration::ZERO);
        let took = started.elapsed();
        assert!(
            took >= YIELD_CAP && took < YIELD_CAP + Duration::from_secs(2),
            "{took:?}"
        );
        drop(guard);
        assert_eq!(wait_for_waiters(&db, YIELD_CAP), Turn::Free);
    }

    #[test]
    fn a_thread_not_beginning_a_write_never_announces() {
        // The checkpointer's `RESTART` waits in the same busy handler.
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        announce();
        assert!(!turn_path(&db).exists());
        // Once the write's BEGIN has returned, it no longer announces.
        drop(announcing(&db));
        announce();
        assert!(!turn_path(&db).exists());
    }

    #[test]
    fn a_turn_file_that_cannot_be_made_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // A directory that does not exist stands for one that refuses files.
        let db = dir.path().join("missing").join("a.db");
        let guard = waiting_on(&db);
        assert!(!announced());
        announce();
        drop(guard);
        assert_eq!(wait_for_waiters(&db, YIELD_CAP), Turn::NoFile);
    }

    #[cfg(unix)]
    #[test]
    fn the_turn_file_has_the_archives_permissions_and_is_never_a_link_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        std::fs::write(&db, b"").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
        drop(waiting_on(&db));
        let mode = std::fs::metadata(turn_path(&db))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        // A dangling link in its place is not followed to make a file.
        let other = dir.path().join("b.db");
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, turn_path(&other)).unwrap();
        drop(waiting_on(&other));
        assert!(!target.exists());
    }
}
