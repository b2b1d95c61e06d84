//! The per-session writer claim across machines: a row in `writer_claims`
//! with a random token, the holder's host and process id, and a lease a
//! heartbeat thread renews — the SQLite archive's rule, on a server.
//!
//! A claim is taken in a transaction that first locks the session's row, so
//! two machines claiming at once are serialized by the server; it may be
//! taken over when its lease has run out, or at once when its holder ran on
//! this host and that process is gone. Every append locks the session row
//! and re-checks the token in its transaction, so a writer whose claim was
//! taken over can never interleave with the new one.
//!
//! Why a lease row and not `pg_advisory_lock`: a session-level advisory lock
//! belongs to one connection, so every open writer would pin a connection of
//! its pool (and of the server's `max_connections`) for as long as it is
//! open, and a transaction-pooling proxy (PgBouncer) would hand the lock to
//! whoever gets the connection next. A row survives any pooling, says who
//! holds it (the refusal names the host and process), and is read in the
//! append's own transaction. The price is that a writer killed on another
//! machine holds its session until the lease ([`LEASE`]) runs out.

use super::{col, pg, Pool};
use crate::backend::holder::{host_name, process_alive};
use crate::error::{Error, Result};
use ::postgres::GenericClient;
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

fn lease_ms() -> i64 {
    i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// Inside a write transaction: fails naming the holder if another writer
/// holds the session's claim (a live lease, not a dead process on this host).
pub fn refuse_if_held<C: GenericClient>(
    c: &mut C,
    session_key: i64,
    session_id: &str,
) -> Result<()> {
    let holder = c
        .query_opt(
            "SELECT token, host, pid, expires_ms FROM writer_claims WHERE session_key = $1",
            &[&session_key],
        )
        .map_err(pg("reading the writer claim"))?;
    if let Some(r) = holder {
        let (token, host, their_pid, expires): (String, String, i64, i64) =
            (col(&r, 0)?, col(&r, 1)?, col(&r, 2)?, col(&r, 3)?);
        let pid = i64::from(std::process::id());
        let dead_here =
            host == host_name() && their_pid != pid && process_alive(their_pid) == Some(false);
        if expires > now_ms() && !dead_here {
            return Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: format!("process {their_pid} on {host} (claim {token})"),
            });
        }
    }
    Ok(())
}

/// A held writer claim; released when dropped.
#[derive(Debug)]
pub struct WriterClaim {
    session_key: i64,
    token: String,
    stop: Arc<AtomicBool>,
    pool: Pool,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

impl WriterClaim {
    /// Takes the claim on a session, or fails naming the holder.
    pub fn acquire(pool: &Pool, session_key: i64, session_id: &str) -> Result<Self> {
        let token = uuid::Uuid::now_v7().to_string();
        let ctx = "taking the writer claim";
        let mut conn = pool.get()?;
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        let found = tx
            .query_opt(
                "SELECT 1 FROM sessions WHERE session_key = $1 FOR UPDATE",
                &[&session_key],
            )
            .map_err(pg(ctx))?;
        if found.is_none() {
            return Err(Error::SessionNotFound(session_id.to_owned()));
        }
        refuse_if_held(&mut tx, session_key, session_id)?;
        tx.execute(
            "INSERT INTO writer_claims (session_key, token, host, pid, expires_ms)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (session_key) DO UPDATE SET token = excluded.token, host = excluded.host,
                 pid = excluded.pid, expires_ms = excluded.expires_ms",
            &[
                &session_key,
                &token,
                &host_name(),
                &i64::from(std::process::id()),
                &(now_ms() + lease_ms()),
            ],
        )
        .map_err(pg(ctx))?;
        tx.commit().map_err(pg(ctx))?;
        drop(conn);
        let stop = Arc::new(AtomicBool::new(false));
        let heartbeat = {
            let (pool, stop, token) = (pool.clone(), stop.clone(), token.clone());
            std::thread::Builder::new()
                .name("sessiontree-pg-claim".into())
                .spawn(move || renew_until_stopped(&pool, session_key, &token, &stop))
                .ok()
        };
        Ok(WriterClaim {
            session_key,
            token,
            stop,
            pool: pool.clone(),
            heartbeat,
        })
    }

    /// Checks, inside a write transaction, that the claim is still ours.
    pub fn check<C: GenericClient>(&self, c: &mut C, session_id: &str) -> Result<()> {
        let holder = c
            .query_opt(
                "SELECT token, host, pid FROM writer_claims WHERE session_key = $1",
                &[&self.session_key],
            )
            .map_err(pg("checking the writer claim"))?;
        match holder {
            Some(r) if col::<String>(&r, 0)? == self.token => Ok(()),
            Some(r) => Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: format!(
                    "process {} on {} (claim {}), which took over this writer's expired claim",
                    col::<i64>(&r, 2)?,
                    col::<String>(&r, 1)?,
                    col::<String>(&r, 0)?
                ),
            }),
            None => Err(Error::WriterClaimed {
                session: session_id.to_owned(),
                holder: "nobody: this writer's claim was released".to_owned(),
            }),
        }
    }
}

fn renew_until_stopped(pool: &Pool, session_key: i64, token: &str, stop: &AtomicBool) {
    let step = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(step);
        waited += step;
        if waited < HEARTBEAT {
            continue;
        }
        waited = Duration::ZERO;
        if let Ok(mut conn) = pool.get() {
            // A failed renewal is retried next beat; the lease outlives several beats.
            let _ = conn.execute(
                "UPDATE writer_claims SET expires_ms = $3 WHERE session_key = $1 AND token = $2",
                &[&session_key, &token, &(now_ms() + lease_ms())],
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
        if let Ok(mut conn) = self.pool.get() {
            let _ = conn.execute(
                "DELETE FROM writer_claims WHERE session_key = $1 AND token = $2",
                &[&self.session_key, &self.token],
            );
        }
    }
}
