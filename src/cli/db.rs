//! Which archive `--db` names: an SQLite file, or a team archive on
//! PostgreSQL (`postgres://…`), and what the commands that work on both ask
//! of it. `--db` defaults to `SESSIONTREE_DB`, then to the user's data
//! directory. A team archive may live in one schema of its database
//! (several archives in one database): `?options=-csearch_path%3DNAME`.

use super::Cli;
use sessiontree::backend::postgres::{is_postgres_url, PgArchive};
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::{export_storage_to_file, ExportOutcome};
use sessiontree::listing::{ArchiveTotals, ListQuery, SearchFilter, SearchHit, SessionSummary};
use sessiontree::{Error, Result, SessionStorage};
use std::path::{Path, PathBuf};

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

/// An open archive of either kind.
#[derive(Debug, Clone)]
pub enum Db {
    /// An SQLite file.
    Sqlite(Archive),
    /// A team archive.
    Postgres(PgArchive),
}

/// Opens the archive `--db` names to read it (an SQLite archive must exist).
pub fn open_for_reading(cli: &Cli) -> Result<Db> {
    match postgres_url(cli) {
        Some(url) => open_postgres(cli, &url).map(Db::Postgres),
        None => super::open_archive_for_reading(cli).map(Db::Sqlite),
    }
}

/// Opens the archive `--db` names to write to it (an SQLite file is created
/// if needed, as the SQLite-only commands always did).
pub fn open_for_writing(cli: &Cli) -> Result<Db> {
    match postgres_url(cli) {
        Some(url) => open_postgres(cli, &url).map(Db::Postgres),
        None => super::open_archive(cli).map(Db::Sqlite),
    }
}

impl Db {
    /// Deletes a session and everything derived from it, in one transaction;
    /// refuses a session a live writer holds.
    pub fn delete_session(&self, id: &str) -> Result<()> {
        match self {
            Db::Sqlite(a) => a.delete_session(id),
            Db::Postgres(a) => a.delete_session(id),
        }
    }

    /// Sessions newest first, filtered and paged.
    pub fn list(&self, q: &ListQuery) -> Result<Vec<SessionSummary>> {
        match self {
            Db::Sqlite(a) => a.list(q),
            Db::Postgres(a) => a.list(q),
        }
    }

    /// How many sessions [`Db::list`] would list without a page.
    pub fn count(&self, q: &ListQuery) -> Result<u64> {
        match self {
            Db::Sqlite(a) => a.count(q),
            Db::Postgres(a) => a.count(q),
        }
    }

    /// The full id a session id or unique prefix names.
    pub fn resolve_session(&self, arg: &str) -> Result<String> {
        match self {
            Db::Sqlite(a) => a.resolve_session(arg),
            Db::Postgres(a) => a.resolve_session(arg),
        }
    }

    /// Full-text search, best first.
    pub fn search_page(
        &self,
        query: &str,
        filter: &SearchFilter<'_>,
        limit: usize,
        offset: usize,
    ) -> Result<Vec<SearchHit>> {
        match self {
            Db::Sqlite(a) => a.search_page(query, filter, limit, offset),
            Db::Postgres(a) => a.search_page(query, filter, limit, offset),
        }
    }

    /// Totals over every session, for `stats`.
    pub fn totals(&self) -> Result<ArchiveTotals> {
        match self {
            Db::Sqlite(a) => a.totals(),
            Db::Postgres(a) => a.totals(),
        }
    }

    /// Entries in session `id`.
    pub fn entry_count(&self, id: &str) -> Result<usize> {
        match self {
            Db::Sqlite(a) => a.open_session(id)?.entry_count(),
            Db::Postgres(a) => a.open_session(id)?.entry_count(),
        }
    }

    /// Writes session `id` at the path `place` gives for its metadata, by
    /// export's never-destroy rules; `progress` hears the entries written.
    pub fn export_session(
        &self,
        id: &str,
        place: impl Fn(&sessiontree::SessionMetadata) -> Result<PathBuf>,
        force: bool,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(PathBuf, ExportOutcome)> {
        let write = |s: &dyn SessionStorage, header: &str, path: &Path, progress| {
            export_storage_to_file(header, s, path, force, progress)
        };
        match self {
            Db::Sqlite(a) => {
                let s = a.open_session(id)?;
                let path = place(&s.metadata()?)?;
                Ok((path.clone(), write(&s, &s.header_json()?, &path, progress)?))
            }
            Db::Postgres(a) => {
                let s = a.open_session(id)?;
                let path = place(&s.metadata()?)?;
                Ok((path.clone(), write(&s, &s.header_json()?, &path, progress)?))
            }
        }
    }
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
