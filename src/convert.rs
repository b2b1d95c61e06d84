//! Conversion between formats, above the backends: pi JSONL files into an
//! SQLite archive and back. Neither backend knows the other; this module
//! reads with one and writes with the other.

use crate::backend::jsonl::{read_session, Header, ReadSummary};
use crate::backend::sqlite::{Archive, NewSession, SqliteStorage};
use crate::error::{Error, Result};
use std::io::{BufReader, Write};
use std::path::Path;

/// What importing one file did.
#[derive(Debug)]
pub struct ImportReport {
    /// The session id (from the header).
    pub session_id: String,
    /// What was read.
    pub summary: ReadSummary,
}

/// Imports a pi session file (version 1, 2 or 3) as a new session of the
/// archive, streaming: memory is bounded by the longest line, not the file.
/// Atomic: a bad line imports nothing of the file, and the error names the line.
pub fn import_jsonl(archive: &Archive, path: &Path) -> Result<ImportReport> {
    let file = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("Failed to read session {}", path.display()), e))?;
    let reader = BufReader::with_capacity(1 << 16, file);
    archive.write_new_session(|writer| {
        let summary = read_session(reader, path, |header, entry| {
            if !writer.has_begun() {
                writer.begin(&new_session_from_header(header))?;
            }
            writer.push(&entry)
        })?;
        if !writer.has_begun() {
            writer.begin(&new_session_from_header(&summary.header))?;
        }
        Ok(ImportReport {
            session_id: summary.header.id.clone(),
            summary,
        })
    })
}

/// Writes a session of the archive as a pi JSONL file: its header line, then
/// every entry in log order, exactly as imported or appended.
pub fn export_jsonl(storage: &SqliteStorage, out: &mut impl Write) -> Result<()> {
    let io = |e| Error::io(format!("exporting session {}", storage.id()), e);
    let header = storage.header_json()?;
    out.write_all(header.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    storage.for_each_entry_json(|json| {
        out.write_all(json.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)
    })?;
    out.flush().map_err(io)
}

/// The session row of an import, from the file's header.
pub fn new_session_from_header(h: &Header) -> NewSession {
    NewSession {
        id: h.id.clone(),
        created_at: h.timestamp.clone(),
        cwd: h.cwd.clone(),
        parent_session: h.parent_session.clone(),
        metadata: h.metadata.clone(),
        header: h.json.clone(),
    }
}
