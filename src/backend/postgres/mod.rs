//! The PostgreSQL backend: a team archive many machines write to and search,
//! with the SQLite archive's contract and branch cache.
//!
//! # Layout
//! `mod.rs` opens archives (connection settings, pool, migrations from
//! `schema/postgres/`); [`branch_cache`] is the SQLite archive's bounded
//! branch cache in PostgreSQL's SQL (the invariants are stated once, in
//! `backend::sqlite::branch_cache`, and the pure rules are shared through
//! `backend::branch_rules`); `writer.rs` appends inside a transaction and
//! maintains every derived fact; `archive.rs` is the many-session side
//! (create, list, delete, search); `storage.rs` is one session as a
//! [`crate::SessionStorage`]; [`claim`] is the one-writer rule across machines.
//!
//! # Concurrency
//! Readers take pooled connections and read committed data under MVCC: they
//! never wait for writers. Each session has one writer at a time ([`claim`]),
//! and every append locks its session row (`FOR UPDATE`), so two appenders
//! of one session — a writer and a sync, say — never interleave.
//!
//! # Durability
//! Every append (or batch) is one transaction, acknowledged after COMMIT;
//! [`Durability::Full`] waits for the server's WAL flush
//! (`synchronous_commit = on`), [`Durability::Relaxed`] does not
//! (`synchronous_commit = off`: a server crash may lose the last moments, a
//! client crash loses nothing acknowledged).

mod archive;
pub mod branch_cache;
mod check;
pub mod claim;
mod storage;
mod writer;

use crate::error::{Error, Result};
use crate::storage::Durability;
use ::postgres::types::FromSql;
use ::postgres::{Config, NoTls, Row};
use r2d2_postgres::PostgresConnectionManager;
use std::sync::Arc;
use std::time::Duration;

pub use archive::SessionWriter;
pub use storage::PgStorage;

/// The connection pool.
pub type Pool = r2d2::Pool<PostgresConnectionManager<NoTls>>;

/// A pooled connection.
pub type Conn = r2d2::PooledConnection<PostgresConnectionManager<NoTls>>;

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
];

/// The advisory lock key that serializes migrations (any fixed number: only
/// sessiontree's own migrations take it).
const MIGRATION_LOCK: i64 = 0x5e55_1017_7ee0_0001;

/// Whether `db` names a PostgreSQL archive rather than a file.
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// Maps a client error to [`Error::Postgres`] with `context`.
pub(crate) fn pg(context: &'static str) -> impl Fn(::postgres::Error) -> Error {
    move |e| Error::postgres(context, e)
}

/// Column `i` of `row`, as a library error when its type is not `T`.
pub(crate) fn col<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> Result<T> {
    row.try_get(i)
        .map_err(|e| Error::postgres("reading a row", e))
}

/// Labels and names are stored as their JSON literal (so lone surrogates survive).
fn stored_js_string(text: String) -> crate::json::JsString {
    crate::json::JsString::from_json_literal(&text)
        .unwrap_or_else(|| crate::json::JsString::new(&text))
}

#[derive(Debug)]
struct ArchiveInner {
    pool: Pool,
    url: String,
    schema: Option<String>,
}

/// A team archive: one PostgreSQL database (or one schema of it).
#[derive(Debug, Clone)]
pub struct PgArchive(Arc<ArchiveInner>);

/// Whether `name` may be used as a schema name unquoted.
fn plain_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The schema a connection's `options` set as its `search_path`, when it is
/// one plain name.
fn schema_in_options(options: &str) -> Option<String> {
    let (_, rest) = options.split_once("search_path=")?;
    let name: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ',')
        .collect();
    plain_identifier(&name).then_some(name)
}

impl PgArchive {
    /// Opens the archive at `url` (`postgres://…`), creating its tables on
    /// first use and migrating them to the latest schema.
    pub fn open(url: &str, durability: Durability) -> Result<Self> {
        Self::open_inner(url, None, durability)
    }

    /// [`PgArchive::open`] inside schema `schema` of the database (created if
    /// missing): several archives in one database, as the tests use it.
    pub fn open_in_schema(url: &str, schema: &str, durability: Durability) -> Result<Self> {
        if !plain_identifier(schema) {
            return Err(Error::Usage(format!(
                "{schema:?} is not a plain schema name (lower-case letters, digits, _)"
            )));
        }
        Self::open_inner(url, Some(schema), durability)
    }

    fn open_inner(url: &str, schema: Option<&str>, durability: Durability) -> Result<Self> {
        let mut config: Config = url
            .parse()
            .map_err(|e| Error::Usage(format!("{url} is not a PostgreSQL connection URL: {e}")))?;
        let sync = match durability {
            Durability::Full => "on",
            Durability::Relaxed => "off",
        };
        let mut options = format!("-c synchronous_commit={sync}");
        if let Some(s) = schema {
            options.push_str(&format!(" -c search_path={s}"));
        }
        // A schema named in the URL (`?options=-csearch_path%3Dteam`) is
        // created on first use like the tables in it.
        let named = config.get_options().and_then(schema_in_options);
        if let Some(given) = config.get_options() {
            options = format!("{given} {options}");
        }
        let schema = schema.map(str::to_owned).or(named);
        config.options(&options);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("sessiontree");
        }
        let manager = PostgresConnectionManager::new(config, NoTls);
        let pool = r2d2::Pool::builder()
            .max_size(8)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_secs(30))
            .build_unchecked(manager);
        let archive = PgArchive(Arc::new(ArchiveInner {
            pool,
            url: url.to_owned(),
            schema,
        }));
        archive.migrate()?;
        Ok(archive)
    }

    /// Applies the migrations not yet applied, each in its own transaction,
    /// under an advisory lock so that machines opening a new archive at once
    /// create it once.
    fn migrate(&self) -> Result<()> {
        let mut conn = self.conn()?;
        let ctx = "migrating the archive";
        if let Some(schema) = &self.0.schema {
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
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS sessiontree_schema (version BIGINT NOT NULL)",
            )
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
                    self.0.url,
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

    /// The URL the archive was opened with.
    pub fn url(&self) -> &str {
        &self.0.url
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool {
        &self.0.pool
    }

    /// A pooled connection.
    pub fn conn(&self) -> Result<Conn> {
        Ok(self.0.pool.get()?)
    }

    /// Drops the archive's schema and everything in it (only an archive
    /// opened with [`PgArchive::open_in_schema`]: a test's throw-away archive).
    pub fn drop_schema(self) -> Result<()> {
        let Some(schema) = self.0.schema.clone() else {
            return Err(Error::Usage(
                "only an archive in its own schema can be dropped".into(),
            ));
        };
        let mut conn = self.conn()?;
        conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .map_err(pg("dropping a schema"))
    }
}
