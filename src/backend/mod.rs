//! The storage backends. Each stores and indexes; none imports another.

pub(crate) mod branch_cache;
pub(crate) mod branch_rules;
pub mod claim;
pub(crate) mod holder;
pub mod jsonl;
mod log_index;
pub mod memory;
pub(crate) mod path_memo;
pub mod pending;
pub mod postgres;
pub(crate) mod session_rows;
pub mod sqlite;

use log_index::log_index_reads;
pub use log_index::LogIndex;
