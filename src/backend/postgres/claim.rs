//! The team archive's writer claim: the `writer_claims` statements in
//! PostgreSQL's SQL. The protocol (take, heartbeat, check, take over,
//! release) is `backend::claim`, the SQLite archive's rule on a server.
//!
//! A claim is taken in a transaction that first locks the session's row, so
//! two machines claiming at once are serialized by the server. Every append
//! locks the session row and re-checks the token in its transaction.
//!
//! Why a lease row and not `pg_advisory_lock`: a session-level advisory lock
//! belongs to one connection, so every open writer would pin a connection of
//! its pool (and of the server's `max_connections`) for as long as it is
//! open, and a transaction-pooling proxy (PgBouncer) would hand the lock to
//! whoever gets the connection next. A row survives any pooling, says who
//! holds it (the refusal names the host and process), and is read in the
//! append's own transaction. The price is that a writer killed on another
//! machine holds its session until the lease ([`claim::LEASE`]) runs out.
//!
//! Leases run by the server's clock: an expiry is written as
//! `clock_timestamp()` plus the lease, in the statement, and judged against
//! `clock_timestamp()` read with the row, so a client whose clock is wrong
//! neither blocks a session for longer nor takes a live claim early.

use super::handle::{col, pg, PgArchive};
use crate::backend::claim::{self, ClaimRows, ClaimStore, Holder, SeenClaim, Use};
use crate::error::{Error, Result};
use ::postgres::types::ToSql;
use ::postgres::GenericClient;

/// The server's clock now, in Unix ms (`clock_timestamp()`, not the
/// transaction's start: a claim taken late in a long transaction still
/// gets its whole lease).
const SERVER_NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// A held writer claim on a team archive; released when dropped.
pub type WriterClaim = claim::WriterClaim<PgArchive>;

/// The claim statements on one client (a connection or a transaction).
#[derive(Debug)]
pub struct PgClaims<'c, C>(pub &'c mut C);

impl<C: GenericClient> PgClaims<'_, C> {
    /// Runs `statement`, which writes.
    fn run(
        &mut self,
        context: &'static str,
        statement: &str,
        values: &[&(dyn ToSql + Sync)],
    ) -> Result<()> {
        self.0.execute(statement, values).map_err(pg(context))?;
        Ok(())
    }
}

impl<C: GenericClient> ClaimRows for PgClaims<'_, C> {
    fn holder(&mut self, session_key: i64, context: &'static str) -> Result<Option<SeenClaim>> {
        let found = self
            .0
            .query_opt(
                &format!(
                    "SELECT token, host, pid, expires_ms, {SERVER_NOW_MS}
                     FROM writer_claims WHERE session_key = $1"
                ),
                &[&session_key],
            )
            .map_err(pg(context))?;
        found
            .map(|r| {
                Ok(SeenClaim {
                    holder: Holder {
                        token: col(&r, 0)?,
                        host: col(&r, 1)?,
                        pid: col(&r, 2)?,
                        expires_ms: col(&r, 3)?,
                    },
                    now_ms: col(&r, 4)?,
                })
            })
            .transpose()
    }

    fn record(
        &mut self,
        session_key: i64,
        token: &str,
        host: &str,
        pid: i64,
        lease_ms: i64,
    ) -> Result<()> {
        self.run(
            "taking the writer claim",
            &format!(
                "INSERT INTO writer_claims (session_key, token, host, pid, expires_ms)
                 VALUES ($1, $2, $3, $4, {SERVER_NOW_MS} + $5)
                 ON CONFLICT (session_key) DO UPDATE SET token = excluded.token, host = excluded.host,
                     pid = excluded.pid, expires_ms = excluded.expires_ms"
            ),
            &[&session_key, &token, &host, &pid, &lease_ms],
        )
    }

    fn renew(&mut self, session_key: i64, token: &str, lease_ms: i64) -> Result<()> {
        self.run(
            "renewing the writer claim",
            &format!(
                "UPDATE writer_claims SET expires_ms = {SERVER_NOW_MS} + $3
                 WHERE session_key = $1 AND token = $2"
            ),
            &[&session_key, &token, &lease_ms],
        )
    }

    fn release(&mut self, session_key: i64, token: &str) -> Result<()> {
        self.run(
            "releasing the writer claim",
            "DELETE FROM writer_claims WHERE session_key = $1 AND token = $2",
            &[&session_key, &token],
        )
    }
}

impl ClaimStore for PgArchive {
    const HEARTBEAT_THREAD: &'static str = "sessiontree-pg-claim";

    /// Locks the session row first (`FOR UPDATE`): a deleted session is not
    /// found, and two machines claiming at once take turns.
    fn in_claim_transaction(&self, session_key: i64, session_id: &str, take: Use) -> Result<()> {
        self.writable(&format!("writing session {session_id}"))?;
        let ctx = "taking the writer claim";
        let mut conn = self.conn()?;
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
        take(&mut PgClaims(&mut tx))?;
        tx.commit().map_err(pg(ctx))
    }

    fn on_connection(&self, f: Use) -> Result<()> {
        f(&mut PgClaims(&mut *self.conn()?))
    }
}

/// Inside a write transaction: fails naming the holder if another writer
/// holds the session's claim ([`claim::refuse_if_held`]).
pub fn refuse_if_held<C: GenericClient>(
    c: &mut C,
    session_key: i64,
    session_id: &str,
) -> Result<()> {
    claim::refuse_if_held(&mut PgClaims(c), session_key, session_id)
}
