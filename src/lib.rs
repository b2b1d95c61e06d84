//! sessiontree: a storage engine for conversation trees.
//!
//! One contract — pi's session storage (`@earendil-works/pi-agent-core` 0.83.0,
//! written down in `session-contract.md`) — implemented three ways behind the
//! [`SessionStorage`] trait: in memory ([`backend::memory`]), as pi-compatible
//! JSONL files ([`backend::jsonl`]), and over SQLite with a materialized branch
//! cache ([`backend::sqlite`]).
//!
//! Layout: [`entry`] is the entry model, [`storage`] the trait, [`rules`] and
//! [`context`] the contract's rules written once, [`session`] the session layer,
//! [`repo`] repositories of many sessions, [`convert`] import and export between
//! formats, [`rpc`] the contract over stdio, [`gen`] deterministic pi-realistic
//! workloads for tests and benchmarks.

pub mod backend;
pub mod context;
pub mod convert;
pub mod entry;
pub mod error;
mod fnv;
pub mod header;
pub mod json;
pub mod layout;
pub mod preview;
pub mod repo;
pub mod rpc;
pub mod rules;
pub mod session;
pub mod storage;

pub use entry::{Entry, EntryType};
pub use error::{Error, ErrorCode, Result};
pub use json::JsonText;
pub use session::Session;
pub use storage::{Durability, LeafMove, SessionMetadata, SessionStorage};
