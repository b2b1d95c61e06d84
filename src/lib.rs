//! sessiontree: a storage engine for conversation trees.
//!
//! ```
//! use sessiontree::backend::sqlite::Archive;
//! use sessiontree::repo::{sqlite::SqliteRepo, CreateOptions, SessionRepo};
//! use sessiontree::{Durability, JsonText, SessionStorage};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("sessiontree-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # std::env::set_current_dir(&dir)?; // a doctest is a process of its own
//! // An archive is one SQLite file; a repository creates and lists its sessions.
//! let archive = Archive::open("archive.db", Durability::Full)?;
//! let mut repo = SqliteRepo::new(archive);
//! let mut session = repo.create(&CreateOptions { cwd: "/home/ada/project".into(), ..Default::default() })?;
//!
//! // Append a question and two answers: regenerating the answer moves the
//! // leaf back to the question, so the first answer stays as a side branch.
//! let question = session.append_message(&JsonText::parse(r#"{"role":"user","content":"Why?"}"#)?)?;
//! session.append_message(&JsonText::parse(r#"{"role":"assistant","content":"Because."}"#)?)?;
//! session.move_to(Some(&question), None)?;
//! let answer = session.append_message(&JsonText::parse(r#"{"role":"assistant","content":"Since."}"#)?)?;
//!
//! // The active path runs root first to the leaf; the model sees its context.
//! let path = session.branch(None)?;
//! assert_eq!(path.iter().map(|e| e.id()).collect::<Vec<_>>(), [question.as_str(), answer.as_str()]);
//! assert_eq!(session.build_context(None)?.messages.len(), 2);
//! assert_eq!(session.storage().entry_count()?, 4); // every entry is kept, the leaf move too
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! One contract — pi's SDK session storage (`@earendil-works/pi-agent-core`
//! 0.83.0, written down in `session-contract.md`) — implemented four ways
//! behind the [`SessionStorage`] trait: in memory ([`backend::memory`]), as
//! pi-compatible JSONL files ([`backend::jsonl`]), and in an archive of many
//! sessions with a materialized branch cache, over SQLite ([`backend::sqlite`])
//! or PostgreSQL ([`backend::postgres`]). The README shows this example;
//! `docs/` describes the rest.
//!
//! Layout: [`entry`] is the entry model, [`storage`] the trait, [`rules`] and
//! [`context`] the contract's rules written once, [`session`] the session layer,
//! [`archive`] what an archive of many sessions answers, whatever stores it,
//! [`repo`] repositories of many sessions, [`convert`] import and export between
//! formats, [`rpc`] the contract over stdio; [`header`] and [`layout`] are pi's
//! session header and directory layout, [`preview`] what a person reads of an
//! entry, [`session_ref`] how a person names a session, [`skeleton`] and
//! [`tree_index`] a session's tree shape without its text. The workload generator
//! and the benchmarks live in the `sessiontree-bench` crate (`benches/`).

pub mod app;
pub mod archive;
pub mod backend;
pub mod context;
pub mod contract;
pub mod convert;
pub mod entry;
pub mod error;
mod fnv;
pub mod header;
pub mod json;
pub mod layout;
pub mod listing;
pub mod preview;
pub mod repo;
pub mod rpc;
pub mod rules;
pub mod search;
pub mod session;
pub mod session_ref;
pub mod skeleton;
pub mod storage;
pub mod sync;
pub mod tree_index;
pub mod usage;

/// pi's fixture session files, for unit tests: read in place (never
/// copied) from `PI_FIXTURES_DIR`, else `shared/fixtures/pi-sessions`
/// beside the checkout; sorted.
#[cfg(test)]
pub(crate) fn pi_fixture_files() -> Vec<std::path::PathBuf> {
    let dir = match std::env::var_os("PI_FIXTURES_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pi-sessions")
        }
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("pi's fixture sessions in {}: {e}", dir.display()))
        .map(|f| f.expect("a fixture").path())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no fixture sessions in {}",
        dir.display()
    );
    files
}

pub use contract::Contract;
pub use entry::{Entry, EntryType};
pub use error::{Error, ErrorCode, Result};
pub use json::JsonText;
pub use session::Session;
pub use session_ref::SessionRef;
pub use storage::{Durability, KeptLine, KeptLines, LeafMove, SessionMetadata, SessionStorage};
