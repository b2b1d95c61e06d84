//! The per-session writer claim: one writer per session, in this process or
//! any other, for as long as its holder lives.
//!
//! A claim is a row in `writer_claims` with a random token, the holder's host
//! and process id, and a lease that a heartbeat thread renews. A claim may be
//! taken over when its lease has expired, or at once when its holder ran on
//! this host and that process no longer exists. Every append re-checks the
//! token inside its transaction, so a writer whose claim was taken over can
//! never interleave with the new one.

use super::Archive;
use crate::error::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
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

pub use crate::backend::holder::host_name;
use crate::backend::holder::process_alive;

/// A held writer claim; released when dropped.
#[derive(Debug)]
pub struct WriterClaim {
    session_key: i64,
    token: String,
    stop: Arc<AtomicBool>,
    archive: Archive,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

/// Inside a write transaction: fails naming the holder if another writer
/// holds the session's claim (a live lease, not a dead process on this host).
pub fn refuse_if_held(conn: &Connection, session_key: i64, session_id: &str) -> Result<()> {
    let holder: Option<(String, String, i64, i64)> = conn
        .query_row(
            "SELECT token, host, pid, expires_ms FROM writer_claims WHERE session_key = ?1",
            [session_key],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()
        .map_err(|e| Error::sqlite("reading the writer claim", e))?;
    if let Some((their_token, their_host, their_pid, expires)) = holder {
        let pid = i64::from(std::process::id());
        let dead_here = their_host == host_name()
            && their_pid != pid
            && process_alive(their_pid) == Some(false);
        if expires > now_ms() && !dead_here {
            return Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: format!("process {their_pid} on {their_host} (claim {their_token})"),
            });
        }
    }
    Ok(())
}

/// Inside a write transaction: records `token` as the session's writer
/// claim, for this process, for one lease.
pub fn insert_claim(conn: &Connection, session_key: i64, token: &str) -> Result<()> {
    conn.execute(
        "INSERT INTO writer_claims (session_key, token, host, pid, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (session_key) DO UPDATE SET token = excluded.token, host = excluded.host,
             pid = excluded.pid, expires_ms = excluded.expires_ms",
        params![session_key, token, host_name(), i64::from(std::process::id()), now_ms() + lease_ms()],
    )
    .map_err(|e| Error::sqlite("taking the writer claim", e))?;
    Ok(())
}

/// Inside a write transaction: extends the lease of claim `token`.
pub fn renew_claim(conn: &Connection, session_key: i64, token: &str) -> Result<()> {
    conn.execute(
        "UPDATE writer_claims SET expires_ms = ?3 WHERE session_key = ?1 AND token = ?2",
        params![session_key, token, now_ms() + lease_ms()],
    )
    .map_err(|e| Error::sqlite("renewing the writer claim", e))?;
    Ok(())
}

impl WriterClaim {
    /// Takes the claim on a session, or fails naming the holder.
    pub fn acquire(archive: &Archive, session_key: i64, session_id: &str) -> Result<Self> {
        let token = uuid::Uuid::now_v7().to_string();
        let mut conn = archive.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| Error::sqlite("taking the writer claim", e))?;
        refuse_if_held(&tx, session_key, session_id)?;
        insert_claim(&tx, session_key, &token)?;
        tx.commit()
            .map_err(|e| Error::sqlite("taking the writer claim", e))?;
        drop(conn);
        let stop = Arc::new(AtomicBool::new(false));
        let heartbeat = {
            let (archive, stop, token) = (archive.clone(), stop.clone(), token.clone());
            std::thread::Builder::new()
                .name("sessiontree-claim".into())
                .spawn(move || renew_until_stopped(&archive, session_key, &token, &stop))
                .ok()
        };
        Ok(WriterClaim {
            session_key,
            token,
            stop,
            archive: archive.clone(),
            heartbeat,
        })
    }

    /// Checks, inside a write transaction, that the claim is still ours.
    pub fn check(&self, conn: &Connection, session_id: &str) -> Result<()> {
        let holder: Option<(String, String, i64)> = conn
            .prepare_cached("SELECT token, host, pid FROM writer_claims WHERE session_key = ?1")
            .and_then(|mut s| {
                s.query_row([self.session_key], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
            })
            .map_err(|e| Error::sqlite("checking the writer claim", e))?;
        match holder {
            Some((t, _, _)) if t == self.token => Ok(()),
            Some((t, host, pid)) => Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: format!("process {pid} on {host} (claim {t}), which took over this writer's expired claim"),
            }),
            None => Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: "nobody: this writer's claim was released".to_owned(),
            }),
        }
    }
}

fn lease_ms() -> i64 {
    i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

fn renew_until_stopped(archive: &Archive, session_key: i64, token: &str, stop: &AtomicBool) {
    let step = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(step);
        waited += step;
        if waited < HEARTBEAT {
            continue;
        }
        waited = Duration::ZERO;
        if let Ok(conn) = archive.conn() {
            // A failed renewal is retried next beat; the lease outlives several beats.
            let _ = conn.execute(
                "UPDATE writer_claims SET expires_ms = ?3 WHERE session_key = ?1 AND token = ?2",
                params![session_key, token, now_ms() + lease_ms()],
            );
        }
    }
}

impl Drop for WriterClaim {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
        if let Ok(conn) = self.archive.conn() {
            let _ = conn.execute(
                "DELETE FROM writer_claims WHERE session_key = ?1 AND token = ?2",
                params![self.session_key, self.token],
            );
        }
    }
}
