//! pi's directory layout: where pi keeps its sessions, and the directory and
//! file names it gives them. Used by the JSONL repository, export and import;
//! no backend depends on it.

use crate::error::{Error, Result};
use std::path::PathBuf;

/// pi's sessions directory: `$PI_CODING_AGENT_DIR/sessions`, else
/// `~/.pi/agent/sessions`.
pub fn pi_sessions_dir() -> PathBuf {
    // Set but empty means unset, as shells treat it.
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = set("PI_CODING_AGENT_DIR") {
        return PathBuf::from(dir).join("sessions");
    }
    let home = set("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".pi").join("agent").join("sessions")
}

/// Refuses a session id that cannot safely become part of a file name: empty,
/// `.` or `..`, or holding a path separator or NUL (`invalid_session`).
pub fn check_session_id(id: &str) -> Result<()> {
    if id.is_empty() || id == "." || id == ".." || id.contains(['/', '\\', '\0']) {
        return Err(Error::UnsafeSessionId {
            id: id.to_owned(),
            reason:
                "cannot be a file name: it must be non-empty, not . or .., and hold no /, \\ or NUL"
                    .into(),
        });
    }
    Ok(())
}

/// The file name pi gives a session: `<createdAt with : and . as ->_<id>.jsonl`.
pub fn session_file_name(created_at: &str, id: &str) -> String {
    format!("{}_{id}.jsonl", created_at.replace([':', '.'], "-"))
}

/// The directory pi keeps a working directory's sessions in: `--<cwd encoded>--`.
pub fn encode_cwd(cwd: &str) -> String {
    let trimmed = cwd.strip_prefix(['/', '\\']).unwrap_or(cwd);
    format!("--{}--", trimmed.replace(['/', '\\', ':'], "-"))
}
