//! The team archive's schema steps (`schema/postgres/`), each with the
//! rows it rewrites in Rust, applied at open under an advisory lock.

use super::archive;
use super::handle::{col, pg, PgArchive};
use crate::error::{Error, Result};

/// A migration step's work after its SQL, in the same transaction.
type AfterSql = fn(&mut ::postgres::Transaction<'_>) -> Result<()>;

/// The migration steps, oldest first; step `i` brings the schema to version
/// `i + 1`: its SQL, then what it leaves to Rust.
const MIGRATIONS: &[(&str, Option<AfterSql>)] = &[
    (include_str!("../../../schema/postgres/0001_init.sql"), None),
    (
        include_str!("../../../schema/postgres/0002_search_rule.sql"),
        Some(archive::reindex_words),
    ),
    (
        include_str!("../../../schema/postgres/0003_contract.sql"),
        None,
    ),
    (
        include_str!("../../../schema/postgres/0004_usage_facts.sql"),
        Some(archive::fill_usage_facts),
    ),
    (
        include_str!("../../../schema/postgres/0005_search_vectors_sent_whole.sql"),
        None,
    ),
    (
        include_str!("../../../schema/postgres/0006_pending_sessions.sql"),
        None,
    ),
    (
        include_str!("../../../schema/postgres/0007_sync_sums_usage_by_day.sql"),
        None,
    ),
];

/// The advisory lock key that serializes migrations (any fixed number: only
/// sessiontree's own migrations take it).
const MIGRATION_LOCK: i64 = 0x5e55_1017_7ee0_0001;

/// Whether the server is in recovery: a hot standby, read-only.
pub(super) fn in_recovery(pool: &super::handle::Pool) -> Result<bool> {
    let mut conn = pool.get()?;
    let row = conn
        .query_typed_one("SELECT pg_is_in_recovery()", &[])
        .map_err(pg("asking whether the server is a standby"))?;
    col(&row, 0)
}

/// On a read-only archive (a hot standby): the schema must be the one this
/// build writes, since nothing can migrate it there.
pub(super) fn require_current(archive: &PgArchive) -> Result<()> {
    let latest = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let mut conn = archive.conn()?;
    let ctx = "reading the standby's schema version";
    let exists: bool = conn
        .query_typed_one("SELECT to_regclass('sessiontree_schema') IS NOT NULL", &[])
        .map_err(pg(ctx))
        .and_then(|r| col(&r, 0))?;
    let found: i64 = if exists {
        conn.query_typed_one(
            "SELECT coalesce(max(version), 0) FROM sessiontree_schema",
            &[],
        )
        .map_err(pg(ctx))
        .and_then(|r| col(&r, 0))?
    } else {
        0
    };
    if found == latest {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "{}: the server is a read-only hot standby and its archive has schema version {found}, not the {latest} this build reads; open the primary once with this build (it migrates), then the standby follows",
        archive.0.url
    )))
}

/// Applies the migrations not yet applied, each in its own transaction,
/// under an advisory lock so that machines opening a new archive at once
/// create it once.
pub(super) fn migrate(archive: &PgArchive) -> Result<()> {
    let mut conn = archive.conn()?;
    let ctx = "migrating the archive";
    if let Some(schema) = &archive.0.schema {
        conn.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .or_else(|e| {
                // Two creators at once: the loser sees the winner's schema.
                if e.code() == Some(&::postgres::error::SqlState::UNIQUE_VIOLATION) {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .map_err(pg(ctx))?;
    }
    for (i, (sql_text, after)) in MIGRATIONS.iter().enumerate() {
        let version = i64::try_from(i + 1).unwrap_or(i64::MAX);
        let mut tx = conn.transaction().map_err(pg(ctx))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(pg(ctx))?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS sessiontree_schema (version BIGINT NOT NULL)")
            .map_err(pg(ctx))?;
        let found: i64 = tx
            .query_one(
                "SELECT coalesce(max(version), 0) FROM sessiontree_schema",
                &[],
            )
            .map_err(pg(ctx))
            .and_then(|r| col(&r, 0))?;
        if found > i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX) {
            return Err(Error::Corrupt(format!(
                "the archive at {} has schema version {found}, newer than the {} this build knows; upgrade sessiontree",
                archive.0.url,
                MIGRATIONS.len()
            )));
        }
        if found >= version {
            continue;
        }
        tx.batch_execute(sql_text).map_err(pg(ctx))?;
        if let Some(after) = after {
            after(&mut tx)?;
        }
        tx.execute("DELETE FROM sessiontree_schema", &[])
            .map_err(pg(ctx))?;
        tx.execute(
            "INSERT INTO sessiontree_schema (version) VALUES ($1)",
            &[&version],
        )
        .map_err(pg(ctx))?;
        tx.commit().map_err(pg(ctx))?;
    }
    Ok(())
}
