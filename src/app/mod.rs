//! The app contract: pi-coding-agent 1.6.0's `SessionManager` rules, written
//! once over any [`SessionStorage`] (memory, JSONL, SQLite, PostgreSQL).
//!
//! The SDK contract ([`crate::session`], [`crate::rules`]) keeps the leaf in
//! the log (`leaf` entries) and cuts paths at compactions. The pi program
//! itself keeps the leaf in memory: on open it is the last entry in log order,
//! `branch`/`resetLeaf` move it without writing, appends attach there, and
//! `getBranch` walks the whole path to the root. [`AppSession`] answers what
//! pi 1.6's `SessionManager` answers, value for value; [`crate::rpc::app`]
//! serves it over stdio.
//!
//! The parts: `value` (entries as JavaScript sees them), `context` (context
//! entries, projection, context), `path` (`getBranch` streamed), `tree`
//! (`getTree`, `getChildren`, V8's sort), `labels` (the label map), `stats`
//! (session statistics and cost breakdown), `write` (the writers and pi's
//! ids).

mod context;
mod labels;
mod path;
mod projection;
mod session;
mod stats;
mod tree;
mod v8sort;
mod value;
mod write;

pub use context::{AppContext, AppProjection, ProjectedEntry};
pub use labels::AppLabel;
pub use path::visit_whole_path;
pub use session::AppSession;
pub use stats::{AppStats, UsageCost};
pub use tree::AppTreeNode;
pub use value::{JsSum, JsValue};
pub use write::{new_app_entry_id, BranchSummaryArgs, CompactionArgs, UsageArgs};

#[cfg(test)]
mod tests;
