//! The storage backends. Each stores and indexes; none imports another.

pub mod branch_cache;
pub mod branch_rules;
pub mod claim;
pub mod holder;
pub mod jsonl;
mod log_index;
pub mod memory;
pub mod path_memo;
pub mod postgres;
pub mod session_rows;
pub mod sqlite;

use log_index::log_index_reads;
pub use log_index::LogIndex;
