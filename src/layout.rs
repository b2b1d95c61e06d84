//! pi's directory layout: where pi keeps its sessions, and the directory and
//! file names it gives them. Used by the JSONL repository, export and import;
//! no backend depends on it.

use crate::error::{Error, Result};
use crate::storage::SessionMetadata;
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Where pi's sessions directory came from (see [`resolve_pi_sessions_dir`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PiDirSource {
    /// `PI_CODING_AGENT_SESSION_DIR`.
    SessionDirEnv,
    /// The `sessionDir` of this settings file (the project's
    /// `.pi/settings.json` or the agent directory's `settings.json`).
    Settings(PathBuf),
    /// `$PI_CODING_AGENT_DIR/sessions`.
    AgentDirEnv,
    /// `~/.pi/agent/sessions`.
    Default,
}

impl PiDirSource {
    /// Says where the directory came from, for messages.
    pub fn describe(&self) -> String {
        match self {
            PiDirSource::SessionDirEnv => "PI_CODING_AGENT_SESSION_DIR".into(),
            PiDirSource::Settings(file) => format!("sessionDir in {}", file.display()),
            PiDirSource::AgentDirEnv => "PI_CODING_AGENT_DIR".into(),
            PiDirSource::Default => "pi's default".into(),
        }
    }
}

/// pi's sessions directory and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PiSessionsDir {
    /// The directory (absolute when `cwd` is).
    pub dir: PathBuf,
    /// What named it.
    pub source: PiDirSource,
}

/// pi's sessions directory, found as pi 1.6 finds it when started in the
/// current directory (see [`resolve_pi_sessions_dir`]).
pub fn pi_sessions_dir() -> PathBuf {
    pi_sessions_dir_found().dir
}

/// [`pi_sessions_dir`] with where it came from.
pub fn pi_sessions_dir_found() -> PiSessionsDir {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    resolve_pi_sessions_dir(&|name| std::env::var_os(name), &cwd)
}

/// pi's sessions directory as pi 1.6 (`main.js`, `config.js`,
/// `settings-manager.js`) resolves it for a pi started in `cwd` without
/// `--session-dir`, `env` giving the environment:
///
/// 1. `PI_CODING_AGENT_SESSION_DIR`, if set and not empty;
/// 2. else the `sessionDir` of pi's settings, the project's
///    (`cwd/.pi/settings.json`) over the global one (`settings.json` in the
///    agent directory), if a non-empty string (a file that does not parse
///    counts as empty, as pi reports it and goes on);
/// 3. else `sessions` in the agent directory: `PI_CODING_AGENT_DIR` if set
///    and not empty, else `~/.pi/agent`.
///
/// Each value has pi's `~` and `~/…` expanded to `HOME` and a `file://` URL
/// made a path; a relative one is taken from `cwd`, as pi takes it from its
/// working directory. With 1 or 2 pi keeps sessions flat in the directory,
/// with 3 in one subdirectory per working directory; import reads both.
pub fn resolve_pi_sessions_dir(
    env: &dyn Fn(&str) -> Option<OsString>,
    cwd: &Path,
) -> PiSessionsDir {
    // pi tests `if (envDir)`: set but empty means unset.
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    let home = set("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    let absolute = |p: PathBuf| lexical(&if p.is_absolute() { p } else { cwd.join(p) });
    let expand = |v: &OsString| absolute(normalize_pi_path(&v.to_string_lossy(), &home));
    if let Some(dir) = set("PI_CODING_AGENT_SESSION_DIR") {
        return PiSessionsDir {
            dir: expand(&dir),
            source: PiDirSource::SessionDirEnv,
        };
    }
    let agent = set("PI_CODING_AGENT_DIR");
    let agent_dir = agent
        .as_ref()
        .map_or_else(|| home.join(".pi").join("agent"), expand);
    let global = agent_dir.join("settings.json");
    let project = cwd.join(".pi").join("settings.json");
    // deepMergeObjects: the project's value, if the key is there at all
    // (even `null`), replaces the global one.
    let (value, file) = match settings_session_dir(&project) {
        Some(v) => (v, project),
        None => (settings_session_dir(&global).unwrap_or(Value::Null), global),
    };
    // `sessionDir ? normalizePath(sessionDir) : sessionDir`: only a
    // non-empty string counts (pi 1.6 fails to start on other truthy values).
    if let Some(dir) = value.as_str().filter(|s| !s.is_empty()) {
        return PiSessionsDir {
            dir: absolute(normalize_pi_path(dir, &home)),
            source: PiDirSource::Settings(file),
        };
    }
    PiSessionsDir {
        dir: lexical(&agent_dir.join("sessions")),
        source: if agent.is_some() {
            PiDirSource::AgentDirEnv
        } else {
            PiDirSource::Default
        },
    }
}

/// `path` without `.` components and with `..` taken back, as node's
/// `path.resolve` does (lexically: links are not followed).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            // `/..` is `/`; a relative path keeps a leading `..`.
            Component::ParentDir => {
                if out.file_name().is_some() {
                    out.pop();
                } else if !out.has_root() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The `sessionDir` key of a pi settings file, if the file parses (after a
/// byte-order mark) as a JSON object holding it.
fn settings_session_dir(file: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(file).ok()?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Object(mut map) => map.remove("sessionDir"),
        _ => None,
    }
}

/// pi's `normalizePath` on Linux: `~` and `~/…` from `home`, a `file://` URL
/// to its path; anything else unchanged (`~user` included).
fn normalize_pi_path(input: &str, home: &Path) -> PathBuf {
    if input == "~" {
        return home.to_owned();
    }
    if let Some(rest) = input.strip_prefix("~/") {
        return home.join(rest);
    }
    if let Some(url) = input.strip_prefix("file://") {
        let path = url.strip_prefix("localhost").unwrap_or(url);
        return PathBuf::from(percent_decode(path));
    }
    PathBuf::from(input)
}

/// `%XX` escapes decoded, as `fileURLToPath` does (invalid ones kept).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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
