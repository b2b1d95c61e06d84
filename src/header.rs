//! The session header: line 1 of a pi session file, and what the archive keeps
//! of it. A format-neutral model, so that every backend and repository can
//! build and read headers without importing another backend.

use crate::error::{Error, Result};
use crate::json::{self, raw_value, ObjectWriter, OrderedObject};
use crate::storage::SessionMetadata;
use serde_json::Value;
use std::path::Path;

/// The session header (line 1 of a session file).
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The exact text of the header line (after upgrading, for old versions).
    pub json: String,
    /// The format version the file was written in (1, 2 or 3).
    pub version: u32,
    /// `id`.
    pub id: String,
    /// `timestamp`: when the session was created.
    pub timestamp: String,
    /// `cwd`.
    pub cwd: String,
    /// `parentSession`.
    pub parent_session: Option<String>,
    /// `metadata`, exact text.
    pub metadata: Option<String>,
}

impl Header {
    /// A new version-3 header, as pi writes it.
    pub fn new(
        id: &str,
        timestamp: &str,
        cwd: &str,
        parent_session: Option<&str>,
        metadata: Option<&str>,
    ) -> Self {
        let mut w = ObjectWriter::new();
        w.str("type", "session")
            .raw("version", "3")
            .str("id", id)
            .str("timestamp", timestamp)
            .str("cwd", cwd);
        if let Some(p) = parent_session {
            w.str("parentSession", p);
        }
        w.opt_raw("metadata", metadata);
        Header {
            json: w.finish(),
            version: 3,
            id: id.to_owned(),
            timestamp: timestamp.to_owned(),
            cwd: cwd.to_owned(),
            parent_session: parent_session.map(str::to_owned),
            metadata: metadata.map(str::to_owned),
        }
    }

    /// Parses a header line with pi's checks, in pi's order; versions 1 and 2 are accepted.
    pub fn parse(line: &str, path: &Path) -> Result<Header> {
        let bad = |reason: &str| Error::InvalidHeader {
            path: path.to_owned(),
            reason: reason.to_owned(),
        };
        let not_header = "first line is not a valid session header";
        let value = json::parse_value_lossy(line).map_err(|_| bad(not_header))?;
        let Value::Object(h) = value else {
            return Err(bad(not_header));
        };
        if h.get("type").and_then(Value::as_str) != Some("session") {
            return Err(bad(not_header));
        }
        let version = match h.get("version") {
            None => 1,
            Some(v) if v.as_f64() == Some(2.0) => 2,
            Some(v) if v.as_f64() == Some(3.0) => 3,
            Some(_) => return Err(bad("unsupported session version")),
        };
        let non_empty = |key: &str| h.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
        let id = non_empty("id").ok_or_else(|| bad("session header is missing id"))?;
        let timestamp =
            non_empty("timestamp").ok_or_else(|| bad("session header is missing timestamp"))?;
        let cwd = non_empty("cwd").ok_or_else(|| bad("session header is missing cwd"))?;
        let parent_session = match h.get("parentSession") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(bad("session header parentSession must be a string")),
        };
        let metadata = match h.get("metadata") {
            None => None,
            Some(Value::Object(_)) => {
                let obj = OrderedObject::parse(line).map_err(|_| bad(not_header))?;
                obj.get("metadata").map(|r| r.get().to_owned())
            }
            Some(_) => return Err(bad("session header metadata must be an object")),
        };
        let json = if version == 3 {
            line.to_owned()
        } else {
            let mut obj = OrderedObject::parse(line).map_err(|_| bad(not_header))?;
            obj.set("version", raw_value("3"));
            obj.to_json()
        };
        Ok(Header {
            json,
            version,
            id: id.to_owned(),
            timestamp: timestamp.to_owned(),
            cwd: cwd.to_owned(),
            parent_session,
            metadata,
        })
    }

    pub(crate) fn metadata_for(&self, path: &Path) -> SessionMetadata {
        SessionMetadata {
            id: self.id.clone(),
            created_at: self.timestamp.clone(),
            cwd: Some(self.cwd.clone()),
            path: Some(path.to_string_lossy().into_owned()),
            parent_session: self.parent_session.clone(),
            metadata: self.metadata.clone(),
        }
    }
}
