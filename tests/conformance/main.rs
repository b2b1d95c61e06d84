//! The conformance suites, one test binary: every rule of the session
//! contract run against every backend (`cases.rs`), and every rule of a
//! repository (spec §9) run against every repository (`repo.rs`, and the
//! repository over `Arc<dyn SessionArchive>`), and every rule of an archive
//! run through `dyn SessionArchive` on SQLite and PostgreSQL (`archive.rs`). A rule is
//! written once, in a `cases!` block; a backend joins a suite with one line
//! at the end of this file.

/// Defines a suite of cases, each written once as `fn name(h) { … }`.
///
/// Every case becomes `pub fn name<H: Harness>(h: &mut H) -> Result<…>` in the
/// invoking module; the suite's own macro, `$suite!(backend, make)`, then
/// declares `mod backend` with one `#[test]` per case, each on a fresh `make`.
/// Declaring the tests from the same list as the functions is what keeps a
/// case from being written without being run.
macro_rules! cases {
    (
        suite = $suite:ident, module = $module:ident, harness = $harness:ident;
        $( $(#[$attr:meta])* fn $name:ident($h:ident) $body:block )*
    ) => {
        $(
            $(#[$attr])*
            pub fn $name<H: $harness>($h: &mut H) -> Result<(), Box<dyn std::error::Error>>
            $body
        )*

        /// Runs every case of this suite as a `#[test]` against one backend.
        macro_rules! $suite {
            ($backend:ident, $make:expr) => {
                mod $backend {
                    #[allow(unused_imports)]
                    use super::*;
                    $(
                        #[test]
                        fn $name() -> Result<(), Box<dyn std::error::Error>> {
                            let mut h = $make;
                            crate::$module::$name(&mut h)
                        }
                    )*
                }
            };
        }
    };
}

#[macro_use]
mod archive;
#[macro_use]
mod cases;
mod harness;
#[macro_use]
mod repo;

conformance!(memory, harness::Memory);
conformance!(jsonl, harness::Jsonl::new());
conformance!(sqlite, harness::Sqlite::new());
conformance!(
    postgres,
    match harness::Postgres::new() {
        Some(h) => h,
        None => return Ok(()),
    }
);

repo_conformance!(memory_repo, repo::Memory::new());
repo_conformance!(jsonl_repo, repo::Jsonl::new());
repo_conformance!(sqlite_repo, repo::Sqlite::new());
repo_conformance!(
    postgres_repo,
    match repo::Postgres::new() {
        Some(h) => h,
        None => return Ok(()),
    }
);

repo_conformance!(sqlite_dyn_repo, archive::Dyn::new(repo::Sqlite::new()));
repo_conformance!(
    postgres_dyn_repo,
    match repo::Postgres::new() {
        Some(h) => archive::Dyn::new(h),
        None => return Ok(()),
    }
);

archive_conformance!(sqlite_archive, repo::Sqlite::new());
archive_conformance!(
    postgres_archive,
    match repo::Postgres::new() {
        Some(h) => h,
        None => return Ok(()),
    }
);
