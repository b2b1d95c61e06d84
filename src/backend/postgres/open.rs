//! Opening a team archive: the connection settings (sync level, schema,
//! timeouts), the pool, then the migrations ([`super::migrate`]).

use super::handle::{ArchiveInner, Manager, PgArchive};
use super::migrate;
use crate::error::{Error, Result};
use crate::storage::Durability;
use ::postgres::Config;
use ::postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;
use std::sync::Arc;
use std::time::Duration;

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

/// `url` with any password replaced by `***`, for messages.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}://{name}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl PgArchive {
    /// Opens the archive at `url` (`postgres://…`), creating its tables on
    /// first use and migrating them to the latest schema; on a hot standby
    /// (`pg_is_in_recovery()`), read-only: no migration, no claim, every
    /// write refused ([`PgArchive::writable`]), the schema required current.
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
        // One connection made here, not by the pool: a bad host, port,
        // socket directory or password fails now with the client's reason
        // (the pool would retry for its whole timeout and then say only
        // "timed out"). The pool lends this connection first.
        let first = config
            .connect(NoTls)
            .map_err(|e| Error::postgres(format!("connecting to {}", redacted(url)), e))?;
        let manager = Manager::new(PostgresConnectionManager::new(config, NoTls), first);
        let pool = r2d2::Pool::builder()
            .max_size(8)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_secs(30))
            .build_unchecked(manager);
        let read_only = migrate::in_recovery(&pool)?;
        let archive = PgArchive(Arc::new(ArchiveInner {
            pool,
            url: url.to_owned(),
            schema,
            read_only,
        }));
        if read_only {
            migrate::require_current(&archive)?;
        } else {
            migrate::migrate(&archive)?;
            // A delete or fork that a dead process left half-done (invisible
            // to every reader meanwhile) is finished or undone now, in
            // batches. Best effort: what cannot be done now stays invisible
            // and is done at a later open.
            let _ = archive.recover_half_done();
        }
        Ok(archive)
    }
}
