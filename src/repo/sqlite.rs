//! The repository over an SQLite archive: many sessions in one file.

/// Sessions of one SQLite archive.
pub type SqliteRepo = super::archive::ArchiveRepo<crate::backend::sqlite::Archive>;
