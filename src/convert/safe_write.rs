//! The safe ways export writes into a directory someone else owns: a file
//! that grows is replaced whole by its longer copy (never appended to in
//! place), and no path below `--out` is followed through a symbolic link.
//!
//! Why replace instead of append: an append of many lines cannot be one
//! atomic `write` (a kill, a full disk or a power cut can stop it anywhere),
//! and a file left ending mid-line is worse than it looks: pi 1.6 skips the
//! torn line, then appends its next entry right after it, so that entry is
//! glued to the torn bytes and lost too. The new content is already whole
//! and fsynced in a temporary file beside the target (export writes every
//! session that way), so a `rename` over the target gives any reader either
//! the old file or the new one, never a part. See `docs/durability.md`.

use crate::error::{Error, Result};
use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};

/// What was seen of the target file when it was compared with the export:
/// if any of it changed before the replace, someone wrote the file
/// meanwhile (pi appending, say) and the replace is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl Seen {
    /// What `meta` (of the file as opened for comparing) says.
    pub(super) fn of(meta: &Metadata) -> Seen {
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        Seen {
            dev,
            ino,
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// The file at `path` as a regular file, not through a link: a symbolic
/// link (or a FIFO, a device, a directory) there is refused, so that export
/// never writes into a file a link points at.
pub(super) fn open_regular(path: &Path) -> Result<(File, Metadata)> {
    let io = |e| Error::io(format!("reading {}", path.display()), e);
    let linked = std::fs::symlink_metadata(path).map_err(io)?;
    if !linked.file_type().is_file() {
        return Err(refused(
            path,
            "it is not a regular file (a symbolic link, say)",
        ));
    }
    let file = open_nofollow(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(refused(path, "it is not a regular file"));
    }
    Ok((file, meta))
}

/// Opens `path` for reading without following a final symbolic link (and
/// without blocking on a FIFO swapped in meanwhile).
fn open_nofollow(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NOFOLLOW | O_NONBLOCK (Linux values; std exposes no constants).
        options.custom_flags(0o400000 | 0o4000);
    }
    options.open(path)
}

/// Puts `tmp` — a finished, fsynced export whose first bytes equal the whole
/// file at `path` as `seen` — at `path` by one `rename`, with that file's
/// permission bits, and syncs the directory. Returns the bytes the file
/// grew by. If the file at `path` is no longer what was seen (pi appended
/// to it while the export ran), nothing is changed and the export is
/// refused: run it again.
pub(super) fn replace_grown(tmp: &Path, path: &Path, seen: &Seen, old: &Metadata) -> Result<u64> {
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    let ours = File::open(tmp).map_err(|e| io("reading", tmp, e))?;
    ours.set_permissions(old.permissions())
        .map_err(|e| io("writing", tmp, e))?;
    ours.sync_all().map_err(|e| io("writing", tmp, e))?;
    let ours_len = ours.metadata().map_err(|e| io("reading", tmp, e))?.len();
    drop(ours);
    let now = std::fs::symlink_metadata(path).map_err(|e| io("reading", path, e))?;
    if !now.file_type().is_file() || Seen::of(&now) != *seen {
        return Err(refused(
            path,
            "it changed while the export ran (another program writes it); run the export again",
        ));
    }
    std::fs::rename(tmp, path).map_err(|e| io("writing", path, e))?;
    sync_dir(path);
    Ok(ours_len.saturating_sub(seen.len))
}

/// Appends `bytes` (whole lines) to the regular file at `path` without ever
/// leaving it torn: the file is copied beside itself (its last line ended
/// if it was left open), `bytes` added, the copy fsynced and renamed over it
/// by [`replace_grown`]. A writer that changed the file meanwhile makes it
/// refused, nothing changed. Costs a copy of the file; a kill at any instant
/// leaves the old file or the new one, and at worst a temporary file that
/// the next export of the same file replaces.
pub(super) fn append_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let (mut theirs, meta) = open_regular(path)?;
    let seen = Seen::of(&meta);
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".sessiontree-tmp");
    let tmp = path.with_file_name(tmp_name);
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    let written = (|| -> Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut ours = File::create(&tmp).map_err(|e| io("writing", &tmp, e))?;
        let copied = std::io::copy(&mut theirs, &mut ours).map_err(|e| io("copying", path, e))?;
        if copied != seen.len {
            return Err(refused(
                path,
                "it changed while the export ran (another program writes it); run the export again",
            ));
        }
        if copied > 0 {
            let mut last = [0u8; 1];
            theirs
                .seek(SeekFrom::Start(copied - 1))
                .and_then(|_| theirs.read_exact(&mut last))
                .map_err(|e| io("reading", path, e))?;
            if last[0] != b'\n' {
                ours.write_all(b"\n").map_err(|e| io("writing", &tmp, e))?;
            }
        }
        ours.write_all(bytes).map_err(|e| io("writing", &tmp, e))?;
        ours.sync_all().map_err(|e| io("writing", &tmp, e))?;
        drop(ours);
        replace_grown(&tmp, path, &seen, &meta).map(|_| ())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Syncs the directory holding `path`, so that a rename in it is durable.
/// Best effort: some file systems cannot sync a directory.
pub(super) fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Refuses `path` (a file below `out`) if any directory between `out` and
/// it, or the file itself, is a symbolic link: export never writes outside
/// `--out` by a link someone planted there, nor into the file a link points
/// at. `out` itself may be a link (the user named it). Returns `path`.
pub fn refuse_links_below(out: &Path, path: &Path) -> Result<PathBuf> {
    let rel = path
        .strip_prefix(out)
        .map_err(|_| refused(path, &format!("it is not below {}", out.display())))?;
    let mut at = out.to_owned();
    for part in rel.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refused(
                    path,
                    &format!(
                        "{} is a symbolic link, which export does not follow out of {}",
                        at.display(),
                        out.display()
                    ),
                ))
            }
            Ok(_) => {}
            // Nothing there yet: nothing below it either.
            Err(_) => break,
        }
    }
    Ok(path.to_owned())
}

/// The error for a target export will not write.
fn refused(path: &Path, why: &str) -> Error {
    Error::io(
        format!("export refuses to write {}", path.display()),
        std::io::Error::new(std::io::ErrorKind::PermissionDenied, why.to_owned()),
    )
}
