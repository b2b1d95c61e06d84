//! Half-done forks and deletes: the rule every durable store follows, over
//! a small per-store trait of its SQL ([`PendingStore`]).
//!
//! A long fork or delete runs in short transactions, so that writers of
//! other sessions wait for one batch at most (SQLite: its one write lock;
//! PostgreSQL: row locks, and a transaction's snapshot that holds back
//! VACUUM). Its session carries a durable mark meanwhile (SQLite's
//! `sessions.staged_from`, PostgreSQL's `sessions.pending`): no reader sees a
//! marked session, and its writer holds the session's claim. If that writer
//! dies, whoever opens the archive next takes the claim (so two processes
//! never both finish it) and finishes the delete, or removes the fork's
//! half-written copy: the same removal in batches.

use crate::error::{Error, Result};
use std::sync::OnceLock;
use std::time::Duration;

/// How long one batch (a transaction) of a fork's copy or a delete may run
/// before it commits and lets other writers in: half the bound on any
/// writer's wait, so that the bound holds with a commit on top on a loaded
/// machine.
pub const BATCH_TIME: Duration = Duration::from_millis(50);

/// A session's mark while its fork is written in batches.
pub const FORK_MARK: &str = "sessiontree:fork";

/// A session's mark while it is deleted in batches.
pub const DELETE_MARK: &str = "sessiontree:delete";

/// The size of a batch as a test sets it (`SESSIONTREE_TEST_BATCH=ROWS:PAUSE_MS`):
/// at most ROWS rows (entries copied, or removal steps) a batch, and a pause
/// of PAUSE_MS between batches, so that a small session still takes several
/// batches and a test can kill the process between two of them. `None`
/// (the default): batches are bounded by [`BATCH_TIME`] alone.
pub fn test_batch() -> Option<(u64, Duration)> {
    static SET: OnceLock<Option<(u64, Duration)>> = OnceLock::new();
    *SET.get_or_init(|| {
        let v = std::env::var("SESSIONTREE_TEST_BATCH").ok()?;
        let (rows, pause) = v.split_once(':').unwrap_or((v.as_str(), "0"));
        Some((
            rows.trim().parse().ok().filter(|&n| n > 0)?,
            Duration::from_millis(pause.trim().parse().unwrap_or(0)),
        ))
    })
}

/// Whether a batch that began `elapsed` ago and has done `rows` rows
/// (entries or removal steps) is due to commit.
pub fn batch_due(elapsed: Duration, rows: u64) -> bool {
    match test_batch() {
        Some((limit, _)) => rows >= limit || elapsed >= BATCH_TIME,
        None => elapsed >= BATCH_TIME,
    }
}

/// A batch clock that counts the commit's tail: a batch whose last work
/// (an import's search rows, the branch cache's tail, the commit with the
/// search index's flush) runs after the clock says "due" holds the write
/// lock for the clock plus that tail (an import at 200,000 entries: 50 ms,
/// then a median 25 ms and a worst 135 ms more). So a batch is due once the
/// time it has run plus the tail its predecessors took reaches
/// [`BATCH_TIME`]: the whole transaction, tail included, stays near the
/// clock. Under a test's `SESSIONTREE_TEST_BATCH`, a batch is due at its
/// row count alone, so that a test can count what each batch holds
/// whatever the machine's speed.
#[derive(Debug, Clone, Copy)]
pub struct TailClock {
    /// The tail a batch is expected to take after it is due.
    tail: Duration,
}

impl Default for TailClock {
    fn default() -> Self {
        // A first guess before any tail is measured: about a quarter of the
        // clock (the tails measured at 200,000 entries, median 25 ms).
        TailClock {
            tail: BATCH_TIME / 4,
        }
    }
}

impl TailClock {
    /// Whether a batch that began `elapsed` ago and has done `rows` rows is
    /// due to end, leaving time for its tail.
    pub fn due(&self, elapsed: Duration, rows: u64) -> bool {
        match test_batch() {
            Some((limit, _)) => rows >= limit,
            // At most half the clock: one stalled commit (an fsync behind
            // another process's writes) must not shrink every batch after
            // it to one row while the estimate decays.
            None => elapsed + self.tail.min(BATCH_TIME / 2) >= BATCH_TIME,
        }
    }

    /// Learns from a batch whose tail took `tail`: a longer tail counts at
    /// once, a shorter one lowers the estimate by a quarter at a time (one
    /// short commit does not make the next long one cheap).
    pub fn record_tail(&mut self, tail: Duration) {
        self.tail = tail.max(self.tail * 3 / 4);
    }

    /// The tail expected after the next batch.
    pub fn tail(&self) -> Duration {
        self.tail
    }
}

/// The pause between two batches: `gap` (what the store needs so that a
/// waiting writer gets in first), or longer as a test asks.
pub fn pause(gap: Duration) {
    let pause = pause_length(gap);
    if !pause.is_zero() {
        std::thread::sleep(pause);
    }
}

/// How long [`pause`] sleeps for `gap`: `gap`, or the test's pause if longer.
pub fn pause_length(gap: Duration) -> Duration {
    test_batch().map_or(gap, |(_, p)| p.max(gap))
}

/// A store's statements for half-done forks and deletes. Each method is one
/// short transaction of its own.
pub trait PendingStore {
    /// The pause between two removal batches.
    const GAP: Duration;

    /// Between two removal batches: [`pause`] for [`Self::GAP`] (SQLite
    /// then also lets announced waiters in first: its turnstile).
    fn between_batches(&self) {
        pause(Self::GAP);
    }

    /// The marked sessions (half-done forks and deletes): key and id.
    fn marked_sessions(&self) -> Result<Vec<(i64, String)>>;

    /// Marks visible session `id` deleted (from then on no reader sees it)
    /// and takes its claim as `token`; refuses a session a live writer
    /// holds. Returns the session's key.
    fn mark_deleted(&self, id: &str, token: &str) -> Result<i64>;

    /// Takes over marked session `key`: if it is still marked and no live
    /// writer holds its claim (its writer died), marks it deleted and takes
    /// its claim as `token`. False when it is not to be taken: another
    /// process is working on it, or it is gone.
    fn take_marked(&self, key: i64, id: &str, token: &str) -> Result<bool>;

    /// One batch of removing marked session `key`, claimed as `token`: its
    /// rows, a step at a time (each step leaves a consistent, still
    /// invisible remainder), until its clock says due (SQLite: a
    /// [`TailClock`] that counts the commit; PostgreSQL: [`batch_due`]),
    /// then commits. True once
    /// the session is gone.
    fn remove_batch(&self, key: i64, token: &str) -> Result<bool>;
}

/// Deletes session `id` in batches: the first, short transaction marks it
/// deleted and claims it; the rows then go a batch at a time. If this
/// process dies half-way, the next open finishes it.
pub fn delete_session<S: PendingStore + ?Sized>(store: &S, id: &str) -> Result<()> {
    let token = uuid::Uuid::now_v7().to_string();
    let key = store.mark_deleted(id, &token)?;
    remove_in_batches(store, key, &token)
}

/// Removes marked session `key`, claimed as `token`, a batch at a time.
pub fn remove_in_batches<S: PendingStore + ?Sized>(store: &S, key: i64, token: &str) -> Result<()> {
    while !store.remove_batch(key, token)? {
        store.between_batches();
    }
    Ok(())
}

/// Finishes what processes that died half-way left: a half-done delete is
/// finished, a half-written fork removed. A session whose claim a live
/// writer holds (its fork or delete is running now) is left to it. Returns
/// how many it finished.
pub fn recover_half_done<S: PendingStore + ?Sized>(store: &S) -> Result<usize> {
    let mut done = 0;
    for (key, id) in store.marked_sessions()? {
        let token = uuid::Uuid::now_v7().to_string();
        match store.take_marked(key, &id, &token) {
            Ok(true) => {}
            Ok(false) | Err(Error::WriterClaimed { .. }) => continue,
            Err(e) => return Err(e),
        }
        remove_in_batches(store, key, &token)?;
        done += 1;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A session of [`Fake`]: key, id, rows left, mark, claim token.
    type FakeSession = (i64, String, u64, Option<&'static str>, Option<String>);

    /// A store in memory: sessions with their rows and marks, and claims.
    #[derive(Default)]
    struct Fake {
        sessions: RefCell<Vec<FakeSession>>,
        batches: RefCell<u64>,
    }

    impl PendingStore for Fake {
        const GAP: Duration = Duration::ZERO;

        fn marked_sessions(&self) -> Result<Vec<(i64, String)>> {
            Ok(self
                .sessions
                .borrow()
                .iter()
                .filter(|s| s.3.is_some())
                .map(|s| (s.0, s.1.clone()))
                .collect())
        }

        fn mark_deleted(&self, id: &str, token: &str) -> Result<i64> {
            let mut all = self.sessions.borrow_mut();
            let s = all
                .iter_mut()
                .find(|s| s.1 == id && s.3.is_none())
                .ok_or_else(|| Error::SessionNotFound(id.into()))?;
            s.3 = Some(DELETE_MARK);
            s.4 = Some(token.into());
            Ok(s.0)
        }

        fn take_marked(&self, key: i64, _id: &str, token: &str) -> Result<bool> {
            let mut all = self.sessions.borrow_mut();
            match all.iter_mut().find(|s| s.0 == key && s.3.is_some()) {
                Some(s) if s.4.as_deref() != Some("live") => {
                    s.3 = Some(DELETE_MARK);
                    s.4 = Some(token.into());
                    Ok(true)
                }
                _ => Ok(false),
            }
        }

        fn remove_batch(&self, key: i64, token: &str) -> Result<bool> {
            *self.batches.borrow_mut() += 1;
            let mut all = self.sessions.borrow_mut();
            let i = all.iter().position(|s| s.0 == key).expect("a session");
            assert_eq!(
                all[i].4.as_deref(),
                Some(token),
                "removed without its claim"
            );
            if all[i].2 == 0 {
                all.remove(i);
                return Ok(true);
            }
            all[i].2 -= all[i].2.min(10);
            Ok(false)
        }
    }

    #[test]
    fn a_batch_ends_early_enough_for_the_tail_its_predecessors_took() {
        // Not under a test's row knob: that would end batches by rows.
        if test_batch().is_some() {
            return;
        }
        let mut clock = TailClock::default();
        let start = clock.tail();
        assert!(!start.is_zero() && start < BATCH_TIME);
        clock.record_tail(Duration::from_millis(30));
        assert_eq!(clock.tail(), Duration::from_millis(30));
        // 25 ms of writes plus a 30 ms tail would hold the lock 55 ms.
        assert!(clock.due(Duration::from_millis(25), 1));
        assert!(!clock.due(Duration::from_millis(15), 1));
        // A short tail lowers the estimate a quarter at a time.
        clock.record_tail(Duration::from_millis(2));
        assert_eq!(clock.tail(), Duration::from_micros(22_500));
        clock.record_tail(Duration::from_millis(20));
        assert_eq!(clock.tail(), Duration::from_millis(20));
        assert!(clock.due(Duration::from_millis(30), 1));
        assert!(!clock.due(Duration::from_millis(29), 1));
        // A stalled commit counts at most half the clock: the next batch
        // still gets 25 ms of writing, not one row.
        clock.record_tail(Duration::from_millis(500));
        assert!(clock.due(Duration::from_millis(25), 1));
        assert!(!clock.due(Duration::from_millis(24), 1));
    }

    #[test]
    fn half_done_work_is_finished_unless_a_live_writer_holds_it() {
        let fake = Fake::default();
        fake.sessions.borrow_mut().extend([
            (1, "visible".to_string(), 5, None, None),
            (
                2,
                "dead fork".to_string(),
                35,
                Some(FORK_MARK),
                Some("gone".into()),
            ),
            (
                3,
                "live delete".to_string(),
                5,
                Some(DELETE_MARK),
                Some("live".into()),
            ),
        ]);
        assert_eq!(recover_half_done(&fake).unwrap(), 1);
        let left: Vec<i64> = fake.sessions.borrow().iter().map(|s| s.0).collect();
        assert_eq!(
            left,
            vec![1, 3],
            "the dead fork is removed, the live delete left"
        );
        assert_eq!(
            *fake.batches.borrow(),
            5,
            "35 rows, 10 a batch, then the row"
        );
        delete_session(&fake, "visible").unwrap();
        assert!(matches!(
            delete_session(&fake, "visible"),
            Err(Error::SessionNotFound(_))
        ));
        assert_eq!(fake.sessions.borrow().len(), 1);
    }
}
