//! The archive's writer claim: the `writer_claims` statements in SQLite's
//! SQL. The protocol (take, heartbeat, check, take over, release) is
//! `backend::claim`; a claim is taken in an IMMEDIATE transaction, which
//! serializes two claimants on the archive's write lock.

use super::handle::Archive;
use crate::backend::claim::{self, ClaimRows, ClaimStore, Holder, SeenClaim, Use};
use crate::error::{Error, Result};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

pub use crate::backend::holder::host_name;

/// A held writer claim on an archive; released when dropped.
pub type WriterClaim = claim::WriterClaim<Archive>;

/// The claim statements on one connection of the archive.
#[derive(Debug, Clone, Copy)]
pub struct ClaimConn<'c>(pub &'c Connection);

impl ClaimConn<'_> {
    /// Runs `statement`, which writes.
    fn run(
        &self,
        context: &'static str,
        statement: &str,
        values: impl rusqlite::Params,
    ) -> Result<()> {
        self.0
            .execute(statement, values)
            .map_err(|e| Error::sqlite(context, e))?;
        Ok(())
    }
}

impl ClaimRows for ClaimConn<'_> {
    /// The store's clock is this machine's: the file is local.
    fn holder(&mut self, session_key: i64, context: &'static str) -> Result<Option<SeenClaim>> {
        let row: Option<(String, String, i64, i64)> = self
            .0
            .prepare_cached(
                "SELECT token, host, pid, expires_ms FROM writer_claims WHERE session_key = ?1",
            )
            .and_then(|mut s| {
                s.query_row([session_key], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })
                .optional()
            })
            .map_err(|e| Error::sqlite(context, e))?;
        Ok(row.map(|(token, host, pid, expires_ms)| SeenClaim {
            holder: Holder {
                token,
                host,
                pid,
                expires_ms,
            },
            now_ms: claim::local_now_ms(),
        }))
    }

    fn record(
        &mut self,
        session_key: i64,
        token: &str,
        host: &str,
        pid: i64,
        lease_ms: i64,
    ) -> Result<()> {
        let expires_ms = claim::local_now_ms().saturating_add(lease_ms);
        self.run(
            "taking the writer claim",
            "INSERT INTO writer_claims (session_key, token, host, pid, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (session_key) DO UPDATE SET token = excluded.token, host = excluded.host,
                 pid = excluded.pid, expires_ms = excluded.expires_ms",
            params![session_key, token, host, pid, expires_ms],
        )
    }

    fn renew(&mut self, session_key: i64, token: &str, lease_ms: i64) -> Result<()> {
        let expires_ms = claim::local_now_ms().saturating_add(lease_ms);
        self.run(
            "renewing the writer claim",
            "UPDATE writer_claims SET expires_ms = ?3 WHERE session_key = ?1 AND token = ?2",
            params![session_key, token, expires_ms],
        )
    }

    fn release(&mut self, session_key: i64, token: &str) -> Result<()> {
        self.run(
            "releasing the writer claim",
            "DELETE FROM writer_claims WHERE session_key = ?1 AND token = ?2",
            params![session_key, token],
        )
    }
}

impl ClaimStore for Archive {
    const HEARTBEAT_THREAD: &'static str = "sessiontree-claim";

    fn in_claim_transaction(&self, _session_key: i64, _session_id: &str, take: Use) -> Result<()> {
        let fail = |e| Error::sqlite("taking the writer claim", e);
        let mut conn = self.conn()?;
        let tx = super::turnstile::begin_announced(self.path(), || {
            conn.transaction_with_behavior(TransactionBehavior::Immediate)
        })
        .map_err(fail)?;
        take(&mut ClaimConn(&tx))?;
        tx.commit().map_err(fail)
    }

    fn on_connection(&self, f: Use) -> Result<()> {
        f(&mut ClaimConn(&*self.conn()?))
    }
}

/// Inside a write transaction: fails naming the holder if another writer
/// holds the session's claim ([`claim::refuse_if_held`]).
pub fn refuse_if_held(conn: &Connection, session_key: i64, session_id: &str) -> Result<()> {
    claim::refuse_if_held(&mut ClaimConn(conn), session_key, session_id)
}

/// Inside a write transaction: records `token` as the session's writer
/// claim, for this process, for one lease.
pub fn insert_claim(conn: &Connection, session_key: i64, token: &str) -> Result<()> {
    claim::record(&mut ClaimConn(conn), session_key, token)
}

/// Inside a write transaction: [`claim::hold`] on claim `token` of a
/// batched write (renewed, or refused if no longer the session's).
pub fn renew_claim(conn: &Connection, session_key: i64, token: &str) -> Result<()> {
    claim::hold(&mut ClaimConn(conn), session_key, token)
}

/// Inside a write transaction: deletes claim `token`, if it is still the
/// session's.
pub fn release_claim(conn: &Connection, session_key: i64, token: &str) -> Result<()> {
    claim::ClaimRows::release(&mut ClaimConn(conn), session_key, token)
}
