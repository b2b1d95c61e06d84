//! The repository over an SQLite archive: many sessions in one file.

use super::{visit_entries_to_fork, CreateOptions, ForkOptions, SessionRepo};
use crate::backend::sqlite::{Archive, ListQuery, SqliteStorage};
use crate::error::Result;
use crate::session::Session;
use crate::storage::{SessionMetadata, SessionStorage};

/// Sessions of one archive.
#[derive(Debug, Clone)]
pub struct SqliteRepo {
    archive: Archive,
}

impl SqliteRepo {
    /// The repository of an open archive.
    pub fn new(archive: Archive) -> Self {
        SqliteRepo { archive }
    }

    /// The archive.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }
}

impl SessionRepo for SqliteRepo {
    type Storage = SqliteStorage;

    fn create(&mut self, options: &CreateOptions) -> Result<Session<SqliteStorage>> {
        let new = options.fields()?.new_session();
        self.archive.create_session(&new).map(Session::new)
    }

    fn open(&self, session: &SessionMetadata) -> Result<Session<SqliteStorage>> {
        self.archive.open_session(&session.id).map(Session::new)
    }

    fn list(&self, cwd: Option<&str>) -> Result<Vec<SessionMetadata>> {
        let q = ListQuery {
            cwd: cwd.map(str::to_owned),
            ..ListQuery::default()
        };
        Ok(self
            .archive
            .list(&q)?
            .into_iter()
            .map(|s| s.metadata)
            .collect())
    }

    fn delete(&mut self, session: &SessionMetadata) -> Result<()> {
        self.archive.delete_session(&session.id)
    }

    /// Forks in one transaction; entry ids are kept.
    fn fork(
        &mut self,
        source: &SessionMetadata,
        options: &ForkOptions,
    ) -> Result<Session<SqliteStorage>> {
        let storage = self.archive.open_session(&source.id)?;
        let new = options.inherit(&storage.metadata()?)?.new_session();
        // The fork is read as it is written: a whole-session fork takes
        // bounded memory however long the session.
        self.archive.write_session(|w| {
            w.begin(&new)?;
            visit_entries_to_fork(
                &storage,
                options.entry_id.as_deref(),
                options.position,
                &mut |e| w.push(&e),
            )
        })?;
        self.archive.open_session(&new.id).map(Session::new)
    }
}
