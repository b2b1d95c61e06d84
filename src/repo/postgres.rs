//! The repository over a team archive on PostgreSQL.

use super::{visit_entries_to_fork, CreateOptions, ForkOptions, SessionRepo};
use crate::backend::postgres::{PgArchive, PgStorage};
use crate::error::Result;
use crate::listing::ListQuery;
use crate::session::Session;
use crate::storage::{SessionMetadata, SessionStorage};

/// Sessions of one team archive.
#[derive(Debug, Clone)]
pub struct PgRepo {
    archive: PgArchive,
}

impl PgRepo {
    /// The repository of an open archive.
    pub fn new(archive: PgArchive) -> Self {
        PgRepo { archive }
    }

    /// The archive.
    pub fn archive(&self) -> &PgArchive {
        &self.archive
    }
}

impl SessionRepo for PgRepo {
    type Storage = PgStorage;

    fn create(&mut self, options: &CreateOptions) -> Result<Session<PgStorage>> {
        let new = options.fields()?.new_session();
        self.archive.create_session(&new).map(Session::new)
    }

    fn open(&self, session: &SessionMetadata) -> Result<Session<PgStorage>> {
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
    ) -> Result<Session<PgStorage>> {
        let storage = self.archive.open_session(&source.id)?;
        let new = options.inherit(&storage.metadata()?)?.new_session();
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
