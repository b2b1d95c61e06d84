//! A team archive's handle ([`PgArchive`]): its pool and connections, and
//! how the archive's client errors and columns are read, for every part of
//! it. Imports no other part of the PostgreSQL backend, which all build on
//! it; opening one (which migrates) is `open.rs`'s, above them.

use crate::error::{Error, Result};
use ::postgres::types::FromSql;
use ::postgres::{NoTls, Row};
use r2d2_postgres::PostgresConnectionManager;
use std::sync::Arc;

/// The connection pool.
pub type Pool = r2d2::Pool<Manager>;

/// A pooled connection.
pub type Conn = r2d2::PooledConnection<Manager>;

/// The pool's connection manager: `r2d2_postgres`'s, lending first the
/// connection the open made directly. The open connects once itself, so a
/// connection that cannot be made fails at once with the client's reason
/// (the pool would retry it until its timeout, then report only "timed
/// out"), and that connection is not wasted: the pool's first `get` takes it.
pub struct Manager {
    inner: PostgresConnectionManager<NoTls>,
    first: std::sync::Mutex<Option<::postgres::Client>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager whose first connection is `first`, already made.
    pub(super) fn new(inner: PostgresConnectionManager<NoTls>, first: ::postgres::Client) -> Self {
        Manager {
            inner,
            first: std::sync::Mutex::new(Some(first)),
        }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = ::postgres::Client;
    type Error = ::postgres::Error;

    fn connect(&self) -> Result<::postgres::Client, ::postgres::Error> {
        let made = self.first.lock().ok().and_then(|mut f| f.take());
        match made {
            Some(c) if !c.is_closed() => Ok(c),
            _ => self.inner.connect(),
        }
    }

    fn is_valid(&self, conn: &mut ::postgres::Client) -> Result<(), ::postgres::Error> {
        self.inner.is_valid(conn)
    }

    fn has_broken(&self, conn: &mut ::postgres::Client) -> bool {
        self.inner.has_broken(conn)
    }
}

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

#[derive(Debug)]
pub(super) struct ArchiveInner {
    pub(super) pool: Pool,
    pub(super) url: String,
    pub(super) schema: Option<String>,
    /// Whether the server is a hot standby (`pg_is_in_recovery()` at open):
    /// then the archive opened read-only and every write is refused before
    /// it reaches the server ([`PgArchive::writable`]).
    pub(super) read_only: bool,
}

/// A team archive: one PostgreSQL database (or one schema of it).
#[derive(Debug, Clone)]
pub struct PgArchive(pub(super) Arc<ArchiveInner>);

impl PgArchive {
    /// The URL the archive was opened with.
    pub fn url(&self) -> &str {
        &self.0.url
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool {
        &self.0.pool
    }

    /// Whether the archive is read-only: its server is a hot standby (a
    /// streaming replica), where every read command works and nothing writes.
    pub fn is_read_only(&self) -> bool {
        self.0.read_only
    }

    /// Refuses `what` (a write) on a read-only archive, naming the primary
    /// as the place to write; nothing is sent to the server.
    pub fn writable(&self, what: &str) -> Result<()> {
        if self.0.read_only {
            return Err(Error::Usage(format!(
                "{}: the server is a read-only hot standby (pg_is_in_recovery); {what} writes, so run it against the primary",
                self.0.url
            )));
        }
        Ok(())
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
