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

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// When a claim taken or renewed now runs out (Unix ms).
fn lease_end() -> i64 {
    now_ms().saturating_add(i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX))
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
    /// When the lease runs out (Unix ms).
    pub expires_ms: i64,
}

/// The `writer_claims` statements of a store, on one connection (inside the
/// caller's transaction where there is one).
pub trait ClaimRows {
    /// The session's claim row, if any (`context` names a failure).
    fn holder(&mut self, session_key: i64, context: &'static str) -> Result<Option<Holder>>;
    /// Records `holder` as the session's claim, replacing any other.
    fn record(&mut self, session_key: i64, holder: &Holder) -> Result<()>;
    /// Moves the lease end of claim `token`, if it is still the session's.
    fn renew(&mut self, session_key: i64, token: &str, expires_ms: i64) -> Result<()>;
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
    if let Some(h) = rows.holder(session_key, "reading the writer claim")? {
        let pid = i64::from(std::process::id());
        let dead_here =
            h.host == host_name() && h.pid != pid && process_alive(h.pid) == Some(false);
        if h.expires_ms > now_ms() && !dead_here {
            return Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: format!("process {} on {} (claim {})", h.pid, h.host, h.token),
            });
        }
    }
    Ok(())
}

/// Inside a write transaction: records `token` as the session's writer
/// claim, for this process, for one lease.
pub fn record<R: ClaimRows + ?Sized>(rows: &mut R, session_key: i64, token: &str) -> Result<()> {
    rows.record(
        session_key,
        &Holder {
            token: token.to_owned(),
            host: host_name(),
            pid: i64::from(std::process::id()),
            expires_ms: lease_end(),
        },
    )
}

/// Extends the lease of claim `token` by one lease from now.
pub fn renew<R: ClaimRows + ?Sized>(rows: &mut R, session_key: i64, token: &str) -> Result<()> {
    rows.renew(session_key, token, lease_end())
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
            Some(h) if h.token == self.token => Ok(()),
            Some(h) => Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: format!(
                    "process {} on {} (claim {}), which took over this writer's expired claim",
                    h.pid, h.host, h.token
                ),
            }),
            None => Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: "nobody: this writer's claim was released".to_owned(),
            }),
        }
    }
}

fn renew_until_stopped<S: ClaimStore>(store: &S, session_key: i64, token: &str, stop: &AtomicBool) {
    let step = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(step);
        waited += step;
        if waited < HEARTBEAT {
            continue;
        }
        waited = Duration::ZERO;
        // A failed renewal is retried next beat; the lease outlives several beats.
        let _ = store.on_connection(&mut |rows| renew(rows, session_key, token));
    }
}

impl<S: ClaimStore> Drop for WriterClaim<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
        let (key, token) = (self.session_key, self.token.as_str());
        let _ = self
            .store
            .on_connection(&mut |rows| rows.release(key, token));
    }
}
