//! pi's directory layout: where pi keeps its sessions, and the directory and
//! file names it gives them. Used by the JSONL repository, export and import;
//! no backend depends on it.

use crate::error::{Error, Result};
use crate::storage::SessionMetadata;
use std::path::{Component, Path, PathBuf};

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

/// The archive used when none is named: `$XDG_DATA_HOME/sessiontree/archive.db`
/// (an absolute `XDG_DATA_HOME` only), else `~/.local/share/sessiontree/archive.db`.
pub fn default_archive_path() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("sessiontree").join("archive.db")
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

/// The file a session exports to, refusing anything that would land outside `out`.
pub fn export_path(out: &Path, meta: &SessionMetadata) -> Result<PathBuf> {
    let dir = encode_cwd(meta.cwd.as_deref().unwrap_or(""));
    let file = session_file_name(&meta.created_at, &meta.id);
    let rel = PathBuf::from(&dir).join(&file);
    let safe = rel.components().count() == 2
        && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !safe || file.contains(['/', '\\']) || dir.contains(['/', '\\']) {
        return Err(Error::UnsafeSessionId {
            id: meta.id.clone(),
            reason: format!(
                "would export to {rel:?}, outside {}; refused",
                out.display()
            ),
        });
    }
    Ok(out.join(rel))
}

/// Adds `path` (a file) or the `*.jsonl` files below it (a directory, in
/// name order, symlinked directories not followed) to `out`: what import reads.
pub fn collect_jsonl_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let meta =
        std::fs::metadata(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    if meta.is_file() {
        out.push(path.to_owned());
        return Ok(());
    }
    let mut items: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::io(format!("listing {}", path.display()), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    items.sort();
    for item in items {
        // Symlinked directories are not followed: a link loop, or a link to
        // `/`, would otherwise walk far outside what was asked for.
        let linked = std::fs::symlink_metadata(&item).is_ok_and(|m| m.file_type().is_symlink());
        if item.is_dir() {
            if !linked {
                collect_jsonl_files(&item, out)?;
            }
        } else if item.extension().is_some_and(|e| e == "jsonl") {
            out.push(item);
        }
    }
    Ok(())
}
