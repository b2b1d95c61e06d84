//! The per-session writer claim, written once for every store that keeps
//! one: one writer per session, in this process or any other (on any
//! machine sharing the store), for as long as its holder lives.
//!
//! A claim is a row in `writer_claims` with a random token, the holder's host
//! and process id, and a lease ([`LEASE`]) that a heartbeat thread renews. It
//! is taken in one transaction that refuses a live holder ([`refuse_if_held`])
//! and records the new one; it may be taken over when its lease has expired,
//! or at once when its holder ran on this host and that process no longer
//! exists. Every append re-checks the token inside its transaction
//! ([`WriterClaim::check`]), so a writer whose claim was taken over can never
//! interleave with the new one. Dropping the claim stops the heartbeat and
//! deletes the row if it is still this writer's.
//!
//! Time is the store's: a claim's expiry is set and judged by the clock of
//! whatever holds the rows (the server's `clock_timestamp()` on PostgreSQL,
//! this machine's for a local SQLite file), never by a client's clock alone.
//! A claim that runs out further ahead than any live writer would set it
//! ([`MAX_AHEAD`]: a host or client whose clock ran ahead wrote it) is stale,
//! like an expired one, so no row can block a session for ever; and
//! `sessiontree unclaim` clears one by hand ([`clear`]).
//!
//! A store supplies the statements ([`ClaimRows`]) and its connections and
//! transaction ([`ClaimStore`]); the rules above are here.

use crate::backend::holder::{host_name, process_alive};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a claim holds without renewal.
pub const LEASE: Duration = Duration::from_secs(30);
/// How often the heartbeat renews it.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// How far ahead of the store's clock a live claim can run out: one lease
/// (what a writer sets), and one more for a host sharing a local archive
/// file whose clock runs ahead of this one. A claim further ahead is stale.
pub const MAX_AHEAD: Duration = Duration::from_secs(2 * LEASE.as_secs());

/// This machine's clock (Unix ms): the store clock of a local archive.
pub fn local_now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The lease a claim is taken or renewed for (ms from the store's now).
pub fn lease_ms() -> i64 {
    ms(LEASE)
}

/// A `writer_claims` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The claim's random token.
    pub token: String,
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: i64,
    /// When the lease runs out (Unix ms, by the store's clock).
    pub expires_ms: i64,
}

/// A claim row as read, with the store's clock at the reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenClaim {
    /// The row.
    pub holder: Holder,
    /// The store's clock when it was read (Unix ms): the server's
    /// `clock_timestamp()` on PostgreSQL, this machine's for SQLite.
    pub now_ms: i64,
}

/// What a claim row amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// Its lease runs, within [`MAX_AHEAD`]: a writer may hold it.
    Live,
    /// Its lease ran out.
    Expired,
    /// It runs out further ahead than a live writer sets it (a clock ahead).
    TooFarAhead,
    /// Its holder ran on this host and that process is gone.
    DeadHere,
}

impl ClaimState {
    /// The state as a word for reports (`live`, `expired`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::Live => "live",
            ClaimState::Expired => "expired",
            ClaimState::TooFarAhead => "too_far_ahead",
            ClaimState::DeadHere => "holder_gone",
        }
    }
}

impl SeenClaim {
    /// Judges the claim by the store's clock and, for a holder on this host,
    /// whether its process lives.
    pub fn state(&self) -> ClaimState {
        let h = &self.holder;
        let pid = i64::from(std::process::id());
        if h.host == host_name() && h.pid != pid && process_alive(h.pid) == Some(false) {
            ClaimState::DeadHere
        } else if h.expires_ms <= self.now_ms {
            ClaimState::Expired
        } else if h.expires_ms > self.now_ms.saturating_add(ms(MAX_AHEAD)) {
            ClaimState::TooFarAhead
        } else {
            ClaimState::Live
        }
    }

    /// Whether the holder is a process on this host that is still running.
    pub fn held_here_alive(&self) -> bool {
        self.holder.host == host_name() && process_alive(self.holder.pid) != Some(false)
    }

    /// The holder in words: process, host, claim token and lease.
    pub fn describe(&self) -> String {
        let h = &self.holder;
        let left = h.expires_ms.saturating_sub(self.now_ms);
        let lease = match self.state() {
            ClaimState::Live => format!("lease runs {:.1} s more", left as f64 / 1000.0),
            ClaimState::Expired => "lease expired".to_owned(),
            ClaimState::TooFarAhead => format!(
                "lease set {:.0} s ahead, beyond any live writer's: a clock ahead",
                left as f64 / 1000.0
            ),
            ClaimState::DeadHere => "that process is gone".to_owned(),
        };
        format!(
            "process {} on {} (claim {}, {lease})",
            h.pid, h.host, h.token
        )
    }
}

/// The `writer_claims` statements of a store, on one connection (inside the
/// caller's transaction where there is one).
pub trait ClaimRows {
    /// The session's claim row, if any, with the store's clock at the
    /// reading (`context` names a failure).
    fn holder(&mut self, session_key: i64, context: &'static str) -> Result<Option<SeenClaim>>;
    /// Records claim `token` of `host`/`pid` as the session's, replacing any
    /// other, running out `lease_ms` after the store's now.
    fn record(
        &mut self,
        session_key: i64,
        token: &str,
        host: &str,
        pid: i64,
        lease_ms: i64,
    ) -> Result<()>;
    /// Moves the lease end of claim `token`, if it is still the session's,
    /// to `lease_ms` after the store's now.
    fn renew(&mut self, session_key: i64, token: &str, lease_ms: i64) -> Result<()>;
    /// Deletes claim `token`, if it is still the session's.
    fn release(&mut self, session_key: i64, token: &str) -> Result<()>;
}

/// What runs on a store's claim rows ([`ClaimStore`]).
pub type Use<'a> = &'a mut dyn FnMut(&mut dyn ClaimRows) -> Result<()>;

/// Where a store's claims live: the connections a claim is taken, renewed
/// and released on (each a connection of its own, not a writer's).
pub trait ClaimStore: Clone + Send + std::fmt::Debug + 'static {
    /// The heartbeat thread's name.
    const HEARTBEAT_THREAD: &'static str;
    /// Runs `take` in one write transaction and commits it when `take`
    /// succeeds: the transaction that takes the claim on session
    /// `session_key` (`session_id`), under whatever lock the store needs so
    /// that two claimants are serialized.
    fn in_claim_transaction(&self, session_key: i64, session_id: &str, take: Use) -> Result<()>;
    /// Runs `f` on a connection, outside any transaction (the heartbeat,
    /// the release).
    fn on_connection(&self, f: Use) -> Result<()>;
}

/// Inside a write transaction: fails naming the holder if another writer
/// holds the session's claim (a live lease, not a dead process on this host).
pub fn refuse_if_held<R: ClaimRows + ?Sized>(
    rows: &mut R,
    session_key: i64,
    session_id: &str,
) -> Result<()> {
    if let Some(seen) = rows.holder(session_key, "reading the writer claim")? {
        if seen.state() == ClaimState::Live {
            return Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: seen.describe(),
                hint: format!(
                    "; if that writer is gone, `sessiontree unclaim {session_id}` clears its claim"
                ),
            });
        }
    }
    Ok(())
}

/// What [`clear`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleared {
    /// The claim that was removed, as it was read.
    pub claim: SeenClaim,
    /// Its state when it was removed.
    pub state: ClaimState,
}

/// Inside a write transaction: removes the session's claim, whatever its
/// lease, and says whose it was; `None` if there was none. A holder that is
/// a running process on this host is refused unless `force` (it is writing
/// now); a holder elsewhere cannot be asked, so its claim is removed, and
/// should it still be writing, its next append fails (every append checks
/// its token) rather than interleave with a new writer.
pub fn clear<R: ClaimRows + ?Sized>(
    rows: &mut R,
    session_key: i64,
    session_id: &str,
    force: bool,
) -> Result<Option<Cleared>> {
    let Some(seen) = rows.holder(session_key, "reading the writer claim")? else {
        return Ok(None);
    };
    let state = seen.state();
    if state == ClaimState::Live && seen.held_here_alive() && !force {
        return Err(Error::WriterClaimed {
            session: session_id.to_owned(),
            holder: seen.describe(),
            hint: format!(
                ", a running process on this host; stop it, or `sessiontree unclaim {session_id} --force` to take the claim from it (its next write then fails)"
            ),
        });
    }
    rows.release(session_key, &seen.holder.token)?;
    Ok(Some(Cleared { claim: seen, state }))
}

/// Inside a write transaction: records `token` as the session's writer
/// claim, for this process, for one lease.
pub fn record<R: ClaimRows + ?Sized>(rows: &mut R, session_key: i64, token: &str) -> Result<()> {
    rows.record(
        session_key,
        token,
        &host_name(),
        i64::from(std::process::id()),
        lease_ms(),
    )
}

/// Extends the lease of claim `token` by one lease from now.
pub fn renew<R: ClaimRows + ?Sized>(rows: &mut R, session_key: i64, token: &str) -> Result<()> {
    rows.renew(session_key, token, lease_ms())
}

/// Inside a batch of a batched write (an import or append, a fork, a
/// delete) holding claim `token`: renews its lease, and fails if it is no
/// longer the session's claim (cleared by `unclaim`, or taken over once its
/// lease ran out, say while the process was stopped), so that the write
/// stops instead of going on after another writer's. What it committed
/// stays, for the next open or import to finish or undo.
pub fn hold<R: ClaimRows + ?Sized>(rows: &mut R, session_key: i64, token: &str) -> Result<()> {
    renew(rows, session_key, token)?;
    match rows.holder(session_key, "checking the writer claim")? {
        Some(seen) if seen.holder.token == token => Ok(()),
        seen => Err(Error::WriterClaimed {
            session: format!("(session key {session_key})"),
            holder: seen.map_or_else(|| "nobody".to_owned(), |s| s.describe()),
            hint: ": the claim of a batched write of it was cleared or taken over; that write stopped, and the next open or import finishes or undoes it".to_owned(),
        }),
    }
}

/// A held writer claim on store `S`; released when dropped.
#[derive(Debug)]
pub struct WriterClaim<S: ClaimStore> {
    session_key: i64,
    token: String,
    stop: Arc<AtomicBool>,
    store: S,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

impl<S: ClaimStore> WriterClaim<S> {
    /// Takes the claim on a session, or fails naming the holder.
    pub fn acquire(store: &S, session_key: i64, session_id: &str) -> Result<Self> {
        let token = uuid::Uuid::now_v7().to_string();
        store.in_claim_transaction(session_key, session_id, &mut |rows| {
            refuse_if_held(rows, session_key, session_id)?;
            record(rows, session_key, &token)
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let heartbeat = {
            let (store, stop, token) = (store.clone(), stop.clone(), token.clone());
            std::thread::Builder::new()
                .name(S::HEARTBEAT_THREAD.into())
                .spawn(move || renew_until_stopped(&store, session_key, &token, &stop))
                .ok()
        };
        Ok(WriterClaim {
            session_key,
            token,
            stop,
            store: store.clone(),
            heartbeat,
        })
    }

    /// Checks, inside a write transaction, that the claim is still ours.
    pub fn check<R: ClaimRows + ?Sized>(&self, rows: &mut R, session_id: &str) -> Result<()> {
        match rows.holder(self.session_key, "checking the writer claim")? {
            Some(seen) if seen.holder.token == self.token => Ok(()),
            Some(seen) => Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: format!(
                    "process {} on {} (claim {})",
                    seen.holder.pid, seen.holder.host, seen.holder.token
                ),
                hint: ", which took over this writer's expired or cleared claim; reopen the session to write".to_owned(),
            }),
            None => Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: "nobody".to_owned(),
                hint: ": this writer's claim was released or cleared (`sessiontree unclaim`); reopen the session to write".to_owned(),
            }),
        }
    }
}

fn renew_until_stopped<S: ClaimStore>(store: &S, session_key: i64, token: &str, stop: &AtomicBool) {
    // Parked, not sleeping in steps: the claim's drop unparks this thread, so
    // a process that is done writing exits at once instead of waiting out a
    // step (an rpc answered in 33 ms used to wait ~100 ms more at exit).
    let mut next_beat = std::time::Instant::now() + HEARTBEAT;
    while !stop.load(Ordering::Acquire) {
        let now = std::time::Instant::now();
        if now < next_beat {
            // May wake early (unpark or spuriously): the loop re-checks both.
            std::thread::park_timeout(next_beat - now);
            continue;
        }
        next_beat = now + HEARTBEAT;
        // A failed renewal is retried next beat; the lease outlives several beats.
        let _ = store.on_connection(&mut |rows| renew(rows, session_key, token));
    }
}

impl<S: ClaimStore> Drop for WriterClaim<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.heartbeat.take() {
            h.thread().unpark();
            let _ = h.join();
        }
        let (key, token) = (self.session_key, self.token.as_str());
        let _ = self
            .store
            .on_connection(&mut |rows| rows.release(key, token));
    }
}
