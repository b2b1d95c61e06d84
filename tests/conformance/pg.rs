//! The PostgreSQL test server: its URL from `SESSIONTREE_TEST_PG` (started by
//! `.ci/pg-cluster`), and throw-away archives, each in its own schema. Without
//! a server the PostgreSQL tests are skipped, and say so on stderr once per
//! test binary (written past the test harness's capture, so it shows); with
//! `SESSIONTREE_REQUIRE_PG` set (CI) a missing server fails them instead.

use sessiontree::backend::postgres::PgArchive;
use sessiontree::Durability;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static SKIPPED: Once = Once::new();
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The test server's URL, or `None` (after the skip line) when there is none.
pub fn url() -> Option<String> {
    match std::env::var("SESSIONTREE_TEST_PG") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("SESSIONTREE_REQUIRE_PG").is_none(),
                "SESSIONTREE_REQUIRE_PG is set but SESSIONTREE_TEST_PG is not: no PostgreSQL to test against"
            );
            SKIPPED.call_once(|| {
                let binary = std::env::args().next().unwrap_or_default();
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: the PostgreSQL tests of {binary} (no server: set SESSIONTREE_TEST_PG=postgres://…; `.ci/pg-cluster start DIR` starts one)"
                );
            });
            None
        }
    }
}

/// A schema name no other test (or test process) uses.
pub fn fresh_schema() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "st_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `server`'s URL with its sessions in `schema` (created on first use).
pub fn url_in_schema(server: &str, schema: &str) -> String {
    let sep = if server.contains('?') { '&' } else { '?' };
    format!("{server}{sep}options=-csearch_path%3D{schema}")
}

/// An archive in a fresh schema of the test server, dropped with it.
pub struct TempArchive {
    /// The server.
    pub url: String,
    /// The archive's schema.
    pub schema: String,
    /// The open archive.
    pub archive: PgArchive,
}

impl TempArchive {
    /// A fresh empty archive, or `None` (skipped) without a server.
    pub fn new() -> Option<Self> {
        let url = url()?;
        let schema = fresh_schema();
        let archive = PgArchive::open_in_schema(&url, &schema, Durability::Relaxed)
            .expect("open a PostgreSQL archive on the test server");
        Some(TempArchive {
            url,
            schema,
            archive,
        })
    }

    /// A URL that opens this archive (for the binary: `--db URL`, `sync --to URL`).
    pub fn schema_url(&self) -> String {
        url_in_schema(&self.url, &self.schema)
    }

    /// The same archive, opened again (a new pool).
    pub fn reopen(&self) -> PgArchive {
        PgArchive::open_in_schema(&self.url, &self.schema, Durability::Relaxed)
            .expect("reopen the PostgreSQL archive")
    }
}

impl Drop for TempArchive {
    fn drop(&mut self) {
        let _ = self.archive.clone().drop_schema();
    }
}
