//! Conversion between formats, above the backends: pi JSONL files into an
//! SQLite archive and back. Neither backend knows the other; this module
//! reads with one and writes with the other.
//!
//! Imports are idempotent: each imported file is recorded with the bytes
//! imported and their hash. Re-importing an unchanged file does nothing; a file
//! pi has appended to since imports only its new lines; any other change
//! (both sides wrote, pi upgraded an old file, a file renamed) is merged by
//! entry id (`merge`): the entries the archive lacks are appended, and only
//! the same id with different content is refused, as a conflict.
//!
//! The parts: `progress` (byte progress reports), `hash` (the prefix hash an
//! import record holds), `plan` (what importing a file comes to),
//! `pipeline` (the reader and writer threads), `append` (importing the new
//! lines of a file imported before), `import` (the import functions) and
//! `export`.

mod append;
mod door;
mod export;
mod hash;
mod import;
mod merge;
mod pipeline;
mod plan;
mod progress;
mod safe_write;

pub use export::{
    app_resume_note, export_file_to_file, export_jsonl, export_storage_to_file, export_to_file,
    export_to_file_with_progress, ExportOutcome,
};
pub use import::{
    import_jsonl, import_jsonl_files, import_jsonl_files_with, import_jsonl_with,
    import_jsonl_with_progress, new_session_from_header, train_dictionary_for,
};
pub use merge::{
    export_to_pi_dir, files_holding_session, merge_export, session_files_by_id, session_target,
    MergeExport, PiExport,
};
pub use plan::{FileImport, ImportOptions, ImportOutcome, ImportReport};
pub use safe_write::refuse_links_below;
