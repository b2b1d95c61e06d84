//! The repository over a team archive on PostgreSQL.

/// Sessions of one team archive.
pub type PgRepo = super::archive::ArchiveRepo<crate::backend::postgres::PgArchive>;
