//! The PostgreSQL backend: a team archive many machines write to and search,
//! with the SQLite archive's contract and branch cache.
//!
//! # Layout
//! `handle.rs` opens archives (connection settings, pool, migrations from
//! `schema/postgres/`); [`branch_cache`] is the bounded branch cache's
//! statements in PostgreSQL's SQL (the invariants, the placement and the
//! plan of a path read are written once, in `backend::branch_cache`);
//! `writer.rs` appends inside a transaction and
//! maintains every derived fact (a bulk write's rows by binary `COPY`, a
//! message's search vector built by [`TsVector`]); `archive.rs` is the many-session side
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
//! [`Durability::Full`](crate::storage::Durability::Full) waits for the server's WAL flush
//! (`synchronous_commit = on`), [`Durability::Relaxed`](crate::storage::Durability::Relaxed) does not
//! (`synchronous_commit = off`: a server crash may lose the last moments, a
//! client crash loses nothing acknowledged).

mod archive;
pub(crate) mod branch_cache;
mod check;
pub(crate) mod claim;
mod handle;
mod migrate;
mod open;
mod storage;
mod tsvector;
mod writer;

pub use archive::SessionWriter;
pub use handle::{is_postgres_url, Conn, PgArchive, Pool};
pub use storage::PgStorage;
pub use tsvector::TsVector;
