//! Which archive `--db` names: an SQLite file, or a team archive on
//! PostgreSQL (`postgres://…`), opened as one `dyn` [`SessionArchive`] for
//! the commands that work on both. `--db` defaults to `SESSIONTREE_DB`, then
//! to the user's data directory. A team archive may live in one schema of
//! its database (several archives in one database):
//! `?options=-csearch_path%3DNAME`.

use super::Cli;
use sessiontree::archive::SessionArchive;
use sessiontree::backend::postgres::{is_postgres_url, PgArchive};
use sessiontree::{Error, Result};
use std::sync::Arc;

/// `--db` (else `SESSIONTREE_DB`) when it is a PostgreSQL URL.
pub fn postgres_url(cli: &Cli) -> Option<String> {
    let given = cli
        .db
        .as_ref()
        .map(|p| p.to_string_lossy().into_owned())
        .or_else(|| {
            std::env::var("SESSIONTREE_DB")
                .ok()
                .filter(|s| !s.is_empty())
        })?;
    is_postgres_url(&given).then_some(given)
}

/// Opens the team archive at `url`.
pub fn open_postgres(cli: &Cli, url: &str) -> Result<PgArchive> {
    PgArchive::open(url, cli.durability.into())
}

/// Whether a command only reads the archive or may write to it: which
/// decides how an SQLite archive is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only: an SQLite archive must exist, and is never written (so it
    /// is readable in a directory we cannot write).
    Read,
    /// Read-write: an SQLite file (and its directory) is created if needed,
    /// as the SQLite-only commands always did.
    Write,
}

/// Opens the archive `--db` names: a team archive for a `postgres://` URL,
/// else the SQLite file, as `access` says. Every command that works on both
/// kinds holds it as this one `dyn` archive.
pub fn open(cli: &Cli, access: Access) -> Result<Arc<dyn SessionArchive>> {
    Ok(match (postgres_url(cli), access) {
        (Some(url), _) => Arc::new(open_postgres(cli, &url)?),
        (None, Access::Read) => Arc::new(super::open_archive_for_reading(cli)?),
        (None, Access::Write) => Arc::new(super::open_archive(cli)?),
    })
}

/// The refusal of a command about the local SQLite file itself, given a
/// URL: what to use on a team archive instead.
pub fn sqlite_only(command: &str) -> Error {
    let instead = match command {
        "import" => "to fill a team archive, use `sessiontree sync --to URL [PATH…]`",
        "sql" => "on a team archive, use `psql` (the tables are in schema/postgres/)",
        _ => "a team archive is maintained by its server (VACUUM, autovacuum)",
    };
    Error::Usage(format!(
        "`{command}` works on a local SQLite archive only; {instead}"
    ))
}
