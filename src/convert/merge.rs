//! Import and export as merges of two append-only trees by entry id.
//!
//! A session's entries are immutable and uniquely identified, so pi's file
//! and the archive's log always have a well-defined union: import appends the
//! entries of the file the archive lacks, export appends to the file the
//! entries it lacks. The same id with different content is the only
//! conflict; it writes nothing for that session.
//!
//! pi resumes a session at its file's last line, so an export never leaves
//! the file ending off pi's path: when the entries it appends end on a
//! branch (a label or name the archive wrote hangs off an older entry, or a
//! conversation the archive continued elsewhere), the labels and names among
//! them are re-issued on pi's tip (new entries whose parent is pi's last
//! entry, same target and text, pi's shape), or, when there are none, pi's
//! tip's own label state is re-stated (a no-op for pi), so the last line is
//! on pi's path again. Each re-issue is appended to the archive's log as well,
//! in the same step, so the two sides hold the same entries and neither an
//! import nor a later export takes it for new content.

use super::hash::hash_prefix;
use super::plan::{FileImport, ImportOutcome, ImportReport};
use crate::backend::jsonl::{
    read_session_leniently, Leniency, ReadStart, ReadSummary, SkippedLine,
};
use crate::backend::sqlite::{Archive, ImportRecord, SqliteStorage};
use crate::contract::Contract;
use crate::entry::{Entry, EntryType};
use crate::error::{Error, MergeConflict, Result};
use crate::header::Header;
use crate::storage::{KeptLine, SessionStorage};
use std::collections::{HashMap, HashSet};
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// A pi file read whole, as pi 1.6 reads it.
pub(super) struct FileSide {
    pub(super) header: Header,
    pub(super) entries: Vec<Entry>,
    pub(super) skipped: Vec<SkippedLine>,
    pub(super) summary: ReadSummary,
}

/// Reads the file at `path` whole (entries and the lines pi skips).
pub(super) fn read_file_side(path: &Path) -> Result<FileSide> {
    let io = |e| Error::io(format!("Failed to read session {}", path.display()), e);
    let file = std::fs::File::open(path).map_err(io)?;
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    let summary = read_session_leniently(
        BufReader::new(file),
        path,
        ReadStart::Beginning,
        Leniency::APP_UNIQUE_IDS,
        |_, e| {
            entries.push(e);
            Ok(())
        },
        |s| {
            skipped.push(s);
            Ok(())
        },
    )?;
    Ok(FileSide {
        header: summary.header.clone(),
        entries,
        skipped,
        summary,
    })
}

/// The archive's entries of one session, in log order, with an index by id.
struct ArchiveSide {
    entries: Vec<Entry>,
    by_id: HashMap<String, usize>,
}

fn read_archive_side(storage: &SqliteStorage) -> Result<ArchiveSide> {
    let mut entries = Vec::new();
    storage.visit_entries(0, None, &mut |json| {
        entries.push(Entry::from_checked_text(json));
        Ok(())
    })?;
    let by_id = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id().to_owned(), i))
        .collect();
    Ok(ArchiveSide { entries, by_id })
}

/// Whether two texts of one entry id are the same entry: the same bytes, or
/// the same JSON value (an entry written again with other spacing).
pub(super) fn same_entry(a: &str, b: &str) -> bool {
    a == b
        || matches!(
            (
                serde_json::from_str::<serde_json::Value>(a),
                serde_json::from_str::<serde_json::Value>(b),
            ),
            (Ok(x), Ok(y)) if x == y
        )
}

/// An entry's value without the members pi's version-1 migration assigns.
fn without_ids(text: &str) -> Option<serde_json::Value> {
    let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
    let o = v.as_object_mut()?;
    for k in ["id", "parentId", "firstKeptEntryId", "firstKeptEntryIndex"] {
        o.remove(k);
    }
    Some(v)
}

/// The file ids that are the archive's `v1-…` entries under another name:
/// a version 1 file the archive imported (ids `v1-NNNNN`, assigned in
/// memory) that pi itself upgraded since (random ids written into the file).
/// Matched by position and content (ids and parents aside); empty unless
/// every one of the archive's `v1-` entries matches.
fn v1_aliases(archive: &ArchiveSide, file: &FileSide) -> HashMap<String, String> {
    let v1: Vec<&Entry> = archive
        .entries
        .iter()
        .take_while(|e| e.id().starts_with("v1-"))
        .collect();
    if v1.is_empty() || file.entries.len() < v1.len() || file.entries[0].id().starts_with("v1-") {
        return HashMap::new();
    }
    let mut aliases = HashMap::new();
    for (a, f) in v1.iter().zip(&file.entries) {
        match (without_ids(a.json()), without_ids(f.json())) {
            (Some(x), Some(y)) if x == y => {
                aliases.insert(f.id().to_owned(), a.id().to_owned());
            }
            _ => return HashMap::new(),
        }
    }
    aliases
}

/// The shortest way to say where an entry's text comes from, for a conflict.
fn excerpt(text: &str) -> String {
    const MAX: usize = 160;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What merging a file into the archive comes to, before anything is written.
struct ImportMerge {
    /// The file's entries the archive lacks, in file order.
    new: Vec<Entry>,
    /// The file's lines pi skips that the archive does not keep yet.
    new_kept: Vec<Vec<u8>>,
    /// The archive's ids of the entries the file holds under other ids (a
    /// version 1 file pi upgraded).
    aliased: Vec<String>,
}

/// Compares `file` with the archive's session: the file's entries the
/// archive lacks, or every conflict (same id, different content).
fn plan_import_merge(
    session: &str,
    path: &Path,
    archive: &ArchiveSide,
    kept: &[KeptLine],
    file: &FileSide,
) -> Result<ImportMerge> {
    let aliases = v1_aliases(archive, file);
    let mut new = Vec::new();
    let mut conflicts = Vec::new();
    for e in &file.entries {
        if aliases.contains_key(e.id()) {
            continue;
        }
        match archive.by_id.get(e.id()) {
            Some(&i) => {
                let theirs = archive.entries[i].json();
                if !same_entry(theirs, e.json()) {
                    conflicts.push(MergeConflict {
                        entry: e.id().to_owned(),
                        archive: excerpt(theirs),
                        file: excerpt(e.json()),
                    });
                }
            }
            None => {
                if e.parent_id().is_some_and(|p| aliases.contains_key(p)) {
                    return Err(Error::ImportedFileChanged {
                        path: path.to_owned(),
                        session: session.to_owned(),
                        how: format!(
                            "pi upgraded it from version 1 (new ids for its entries) and wrote to it since; its new entries hang on ids the archive does not know, so they are not merged. To write the archive's copy over it as version 3 (pi's file kept beside it as a .bak): sessiontree export {session} --out {} --upgrade",
                            crate::error::shell_quote(
                                &crate::error::sessions_root_of(path).display().to_string()
                            )
                        ),
                    });
                }
                new.push(e.clone());
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(Error::MergeConflict {
            session: session.to_owned(),
            path: path.to_owned(),
            conflicts,
        });
    }
    // Kept lines are matched as a multiset of texts: a line the archive keeps
    // already (from this file or another) is not kept twice.
    let mut have: HashMap<&[u8], usize> = HashMap::new();
    for k in kept {
        *have.entry(&k.text).or_default() += 1;
    }
    let mut new_kept = Vec::new();
    for s in &file.skipped {
        if s.text.iter().all(|b| b" \t\r".contains(b)) {
            continue;
        }
        match have.get_mut(s.text.as_slice()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => new_kept.push(s.text.clone()),
        }
    }
    let aliased = aliases.into_values().collect();
    Ok(ImportMerge {
        new,
        new_kept,
        aliased,
    })
}

/// The import record of `path` as it is now: all of it imported.
fn whole_file_record(
    path: &Path,
    canon: &str,
    session: &str,
    summary: &ReadSummary,
) -> Result<ImportRecord> {
    let (_, size, mtime) = super::plan::file_facts(path)?;
    Ok(ImportRecord {
        source_path: canon.to_owned(),
        session_id: session.to_owned(),
        bytes: summary.complete_bytes,
        prefix_hash: hash_prefix(path, summary.complete_bytes)?,
        lines: summary.lines,
        file_size: size,
        file_mtime: mtime,
    })
}

/// Imports the file at `path` into the archive's session `session` by id:
/// the entries of the file the archive lacks are appended (whoever wrote to
/// the session since), the lines pi skips that the archive does not keep
/// are kept, and the file is recorded as imported whole. The same id with
/// different content is [`Error::MergeConflict`], and nothing is written.
pub(super) fn merge_file_into_archive(
    archive: &Archive,
    path: &Path,
    canon: &str,
    session: &str,
    rules: Option<Contract>,
) -> Result<(FileImport, FileSide)> {
    let file = read_file_side(path)?;
    if file.header.id != session {
        return Err(Error::ImportedFileChanged {
            path: path.to_owned(),
            session: session.to_owned(),
            how: format!(
                "it now holds session {}; import it again to import that one",
                file.header.id
            ),
        });
    }
    // A file shorter than when it was last imported lost entries (pi never
    // shortens its files); the archive keeps them, and the caller says so.
    let shrank = archive
        .import_record(canon)?
        .is_some_and(|r| r.bytes > file.summary.bytes);
    let storage = archive.open_session(session)?;
    let side = read_archive_side(&storage)?;
    let kept = storage.kept_lines()?;
    let stored_contract = storage.contract()?;
    let plan = plan_import_merge(session, path, &side, &kept.lines, &file)?;
    let record = whole_file_record(path, canon, session, &file.summary)?;
    let count = i64::try_from(side.entries.len()).unwrap_or(i64::MAX);
    let contract = match rules {
        Some(r) => r,
        None if file.summary.sdk_only_entries => Contract::Sdk,
        None => stored_contract,
    };
    archive.write_session(|w| {
        w.resume(session)?;
        for e in &plan.new {
            w.push(e)?;
        }
        let at = count + i64::try_from(plan.new.len()).unwrap_or(i64::MAX);
        let lines: Vec<KeptLine> = plan
            .new_kept
            .iter()
            .map(|t| KeptLine {
                position: at,
                text: t.clone(),
            })
            .collect();
        w.keep_lines(&lines)?;
        if contract != stored_contract {
            w.set_contract(contract)?;
        }
        w.record_import(&record)
    })?;
    let outcome = if plan.new.is_empty() && plan.new_kept.is_empty() {
        ImportOutcome::Unchanged
    } else {
        ImportOutcome::Appended
    };
    let mut report = ImportReport::of(Vec::new(), &file.summary, contract);
    // What the file lost (truncated, or rewritten without some entries):
    // the archive keeps it, and the caller says so.
    let in_file: HashSet<&str> = file
        .entries
        .iter()
        .map(|e| e.id())
        .chain(plan.aliased.iter().map(String::as_str))
        .collect();
    if shrank {
        report.archive_only = side
            .entries
            .iter()
            .filter(|e| !in_file.contains(e.id()) && *e.entry_type() != EntryType::Leaf)
            .count() as u64;
    }
    Ok((
        FileImport {
            session_id: session.to_owned(),
            outcome,
            entries: plan.new.len() as u64,
            bytes_read: file.summary.bytes,
            torn_tail: file.summary.torn_tail.clone(),
            report,
        },
        file,
    ))
}

/// What an export merged into an existing pi file did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeExport {
    /// The file's entries the archive lacked, imported first.
    pub imported: u64,
    /// The archive's entries the file lacked, appended to it (re-issues not counted).
    pub appended: u64,
    /// The re-issued entries: (new id, the archive's entry it re-issues).
    pub reissued: Vec<(String, String)>,
    /// The entry pi resumes at: the file's last entry after the merge.
    pub pi_leaf: Option<String>,
    /// The ends of the archive's conversation branches that fork from pi's
    /// path, now in the file as branches.
    pub branch_leaves: Vec<String>,
}

/// Merges the archive's session `session` into the pi file at `path` (a
/// version 3 file holding the session): first the file's entries the
/// archive lacks are imported (a conflict writes nothing), then the
/// archive's entries the file lacks are appended to it (never `leaf` lines
/// for an app session), ending on pi's path (see the module's notes), and
/// the file is recorded as imported whole.
pub fn merge_export(archive: &Archive, session: &str, path: &Path) -> Result<MergeExport> {
    let canon = std::fs::canonicalize(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
        .to_string_lossy()
        .into_owned();
    let (imported, file) = merge_file_into_archive(archive, path, &canon, session, None)?;
    let storage = archive.open_session(session)?;
    let app = storage.contract()? == Contract::App;
    let side = read_archive_side(&storage)?;
    let aliases = v1_aliases(&side, &file);
    let in_file: HashSet<&str> = file
        .entries
        .iter()
        .map(|e| aliases.get(e.id()).map_or(e.id(), String::as_str))
        .collect();
    let missing: Vec<&Entry> = side
        .entries
        .iter()
        .filter(|e| !in_file.contains(e.id()))
        .filter(|e| !(app && *e.entry_type() == EntryType::Leaf))
        .collect();
    // pi's tip: the file's last entry (pi 1.6 resumes there); of an SDK
    // session whose last line is a `leaf` entry, the entry it points at.
    let tip = file.entries.last().and_then(|e| {
        if *e.entry_type() == EntryType::Leaf {
            e.value()
                .get("targetId")
                .and_then(|t| t.as_str())
                .map(str::to_owned)
        } else {
            Some(e.id().to_owned())
        }
    });
    let mut out = MergeExport {
        imported: imported.entries,
        appended: missing.len() as u64,
        pi_leaf: tip.clone(),
        ..MergeExport::default()
    };
    if missing.is_empty() {
        return Ok(out);
    }
    let parents: HashMap<&str, Option<&str>> =
        missing.iter().map(|e| (e.id(), e.parent_id())).collect();
    // Whether an appended entry continues pi's path: its ancestors among
    // the appended entries lead to pi's tip.
    let continues_tip = |id: &str| {
        let mut at = Some(id);
        while let Some(a) = at {
            match parents.get(a) {
                Some(p) => at = *p,
                None => return Some(a) == tip.as_deref(),
            }
        }
        tip.is_none()
    };
    let last = missing.last().map(|e| e.id()).unwrap_or_default();
    let mut reissues: Vec<Entry> = Vec::new();
    if tip.is_some() && !continues_tip(last) {
        // Conversation entries that end a branch off pi's path.
        let has_child: HashSet<&str> = missing.iter().filter_map(|e| e.parent_id()).collect();
        out.branch_leaves = missing
            .iter()
            .filter(|e| !has_child.contains(e.id()))
            .filter(|e| !matches!(e.entry_type(), EntryType::Label | EntryType::SessionInfo))
            .filter(|e| !continues_tip(e.id()))
            .map(|e| e.id().to_owned())
            .collect();
        let mut taken: HashSet<String> = side.by_id.keys().cloned().collect();
        taken.extend(file.entries.iter().map(|e| e.id().to_owned()));
        let mut parent = tip.clone().unwrap_or_default();
        let sources: Vec<&Entry> = missing
            .iter()
            .copied()
            .filter(|e| matches!(e.entry_type(), EntryType::Label | EntryType::SessionInfo))
            .collect();
        let restated;
        let sources = if sources.is_empty() {
            restated = restate_tip_label(&file, &parent)?;
            vec![&restated]
        } else {
            sources
        };
        for source in sources {
            let id = crate::app::new_app_entry_id(|id| Ok(taken.contains(id)))?;
            taken.insert(id.clone());
            let entry = reissue(source, &id, &parent)?;
            out.reissued.push((id.clone(), source.id().to_owned()));
            parent = id;
            reissues.push(entry);
        }
    }
    // The archive first: should the file's append fail, the next export
    // finds the re-issues in the archive, on pi's path, and appends them;
    // should this process die after it, the next import finds them there.
    if !reissues.is_empty() {
        archive.write_session(|w| {
            w.resume(session)?;
            for e in &reissues {
                w.push(e)?;
            }
            Ok(())
        })?;
    }
    let mut bytes = Vec::new();
    for e in missing.iter().copied().chain(&reissues) {
        bytes.extend_from_slice(e.json().as_bytes());
        bytes.push(b'\n');
    }
    append_lines(path, &bytes)?;
    out.pi_leaf = reissues
        .last()
        .or(missing.last().copied())
        .map(|e| e.id().to_owned());
    let summary = read_file_side(path)?.summary;
    let record = whole_file_record(path, &canon, session, &summary)?;
    archive.write_session(|w| {
        w.resume(session)?;
        w.record_import(&record)
    })?;
    Ok(out)
}

/// A `label` entry stating again the label pi's tip `tip` has in `file`
/// (none: a label entry without one, which pi reads as clearing a label
/// that is not there): appended on the tip, it changes nothing pi shows and
/// keeps the file's last line on pi's path.
fn restate_tip_label(file: &FileSide, tip: &str) -> Result<Entry> {
    let mut label: Option<String> = None;
    for e in &file.entries {
        if *e.entry_type() == EntryType::Label {
            let v = e.value();
            if v.get("targetId").and_then(|t| t.as_str()) == Some(tip) {
                label = v
                    .get("label")
                    .filter(|l| !l.is_null())
                    .map(|l| l.to_string());
            }
        }
    }
    let mut w = crate::json::ObjectWriter::new();
    w.str("type", "label")
        .str("id", "restated")
        .str("parentId", tip)
        .str("timestamp", &crate::entry::now_timestamp())
        .str("targetId", tip)
        .opt_raw("label", label.as_deref());
    Entry::from_stored_line(&w.finish())
        .map_err(|p| Error::InvalidEntry(format!("a re-stated label: {}", p.reason())))
}

/// `source` (a label or session name) re-issued as entry `id` on `parent`:
/// its text with only id, parent and timestamp changed, so it keeps pi's
/// shape and member order.
fn reissue(source: &Entry, id: &str, parent: &str) -> Result<Entry> {
    let bad =
        |e: serde_json::Error| Error::InvalidEntry(format!("re-issuing {}: {e}", source.id()));
    let mut obj = crate::json::OrderedObject::parse(source.json()).map_err(bad)?;
    let raw = |s: &str| {
        serde_json::value::RawValue::from_string(crate::json::string_literal(s)).map_err(bad)
    };
    obj.set("id", raw(id)?);
    obj.set("parentId", raw(parent)?);
    obj.set("timestamp", raw(&crate::entry::now_timestamp())?);
    Entry::from_stored_line(&obj.to_json())
        .map_err(|p| Error::InvalidEntry(format!("re-issuing {}: {}", source.id(), p.reason())))
}

/// Appends `bytes` (whole lines, each ending in `\n`) to the pi file at
/// `path`, first ending its last line if pi left it open: through the safe
/// path of every export that grows a file (a whole new copy, one rename),
/// so a kill at any instant leaves pi's file as it was or whole.
pub(super) fn append_lines(path: &Path, bytes: &[u8]) -> Result<()> {
    super::safe_write::append_whole(path, bytes)
}

/// The pi files below `root` holding session `id`, by their headers.
pub fn files_holding_session(root: &Path, id: &str) -> Result<Vec<PathBuf>> {
    Ok(session_files_by_id(root)?.remove(id).unwrap_or_default())
}

/// Every pi file below `root`, grouped by the session id of its header
/// (files whose header does not read are left out).
pub fn session_files_by_id(root: &Path) -> Result<HashMap<String, Vec<PathBuf>>> {
    let mut files = Vec::new();
    if root.is_dir() {
        crate::layout::collect_jsonl_files(root, &mut files)?;
    }
    let mut by_id: HashMap<String, Vec<PathBuf>> = HashMap::new();
    for f in files {
        if let Ok(h) = crate::backend::jsonl::read_header(&f) {
            by_id.entry(h.id).or_default().push(f);
        }
    }
    Ok(by_id)
}

/// What [`export_to_pi_dir`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PiExport {
    /// As [`super::export::export_to_file`] does it: created, unchanged, appended to
    /// (a prefix of the session), or replaced with `force`.
    Plain(super::export::ExportOutcome),
    /// Merged by entry id into the file, which had entries of its own.
    Merged(MergeExport),
    /// An old-format file rewritten as version 3 (`--upgrade`); the old one kept.
    Upgraded {
        /// Where the old file now is.
        backup: PathBuf,
    },
}

/// Where session `id` goes below `out`: the file it was imported from or
/// last exported to there (whatever pi named it), else the file at pi's
/// path for it, else a file below `out` whose header holds the session (pi
/// renamed or moved it; `by_id` caches the scan for a run), else pi's path.
pub fn session_target(
    archive: &Archive,
    id: &str,
    out: &Path,
    default: PathBuf,
    by_id: &mut Option<HashMap<String, Vec<PathBuf>>>,
) -> Result<PathBuf> {
    let holds = |p: &Path| crate::backend::jsonl::read_header(p).is_ok_and(|h| h.id == id);
    if let Ok(root) = std::fs::canonicalize(out) {
        for recorded in archive.import_paths_of(id)? {
            let p = PathBuf::from(recorded);
            if p.starts_with(&root) && p.is_file() && holds(&p) {
                return Ok(p);
            }
        }
    }
    if default.exists() {
        return Ok(default);
    }
    if by_id.is_none() {
        *by_id = Some(session_files_by_id(out)?);
    }
    let found = by_id
        .as_ref()
        .and_then(|m| m.get(id))
        .and_then(|files| files.iter().find(|p| holds(p)).cloned());
    Ok(found.unwrap_or(default))
}

/// Records `path` as session `id`'s file, imported whole (the entries of it
/// the archive lacks merged in), unless its record is current.
fn record_file(archive: &Archive, id: &str, path: &Path) -> Result<()> {
    let (canon, size, mtime) = super::plan::file_facts(path)?;
    if let Some(r) = archive.import_record(&canon)? {
        if r.session_id == id && r.file_size == size && r.file_mtime == mtime {
            return Ok(());
        }
    }
    match merge_file_into_archive(archive, path, &canon, id, None) {
        // A live writer holds the session (pi's own session on the archive,
        // an rpc): the file is written and whole, only its record waits for
        // a later import or export; the next export still finds the file by
        // its path or its header.
        Err(Error::WriterClaimed { .. }) => Ok(()),
        other => other.map(drop),
    }
}

/// Exports session `id` of the archive into the pi sessions directory
/// `out`, as one file per session: to [`session_target`]'s file; a file
/// that is a prefix of the session gets the rest appended, and one that has
/// entries of its own is merged by id ([`merge_export`]); an old-format file
/// is written over only with `upgrade` (kept as `NAME.bak`), and `force`
/// replaces a differing file as [`super::export::export_to_file`] does. The file
/// written is recorded as the session's.
pub fn export_to_pi_dir(
    archive: &Archive,
    id: &str,
    out: &Path,
    (force, upgrade): (bool, bool),
    by_id: &mut Option<HashMap<String, Vec<PathBuf>>>,
    progress: &mut dyn FnMut(u64),
) -> Result<(PathBuf, PiExport)> {
    let storage = archive.open_session(id)?;
    let default = crate::layout::export_path(out, &storage.metadata()?)?;
    let path = session_target(archive, id, out, default, by_id)?;
    // Never through a link planted below `out` (nor into the file it names).
    // A recorded path is canonical: it is checked below `out`'s canonical
    // form (`out` itself may be a link the user named).
    let below = match std::fs::canonicalize(out) {
        Ok(root) if !path.starts_with(out) && path.starts_with(&root) => root,
        _ => out.to_owned(),
    };
    let path = super::safe_write::refuse_links_below(&below, &path)?;
    let header = storage.header_json()?;
    if path.exists() && !force {
        let version = crate::backend::jsonl::read_header(&path)?.version;
        let old = |what: String| Error::OldFormatFile {
            path: path.clone(),
            session: id.to_owned(),
            out: out.to_owned(),
            what,
        };
        if upgrade {
            // pi's entries first, so the rewrite loses none of them.
            let canon = super::plan::file_facts(&path)?.0;
            match merge_file_into_archive(archive, &path, &canon, id, None) {
                // pi's entries on ids the archive does not know stay in the .bak.
                Ok(_) | Err(Error::ImportedFileChanged { .. }) => {}
                Err(e) => return Err(e),
            }
            let storage = archive.open_session(id)?;
            return match super::export::export_storage_to_file(
                &header, &storage, &path, true, progress,
            )? {
                super::export::ExportOutcome::Replaced { backup } => {
                    record_file(archive, id, &path)?;
                    Ok((path, PiExport::Upgraded { backup }))
                }
                other => {
                    record_file(archive, id, &path)?;
                    Ok((path, PiExport::Plain(other)))
                }
            };
        }
        if version < 3 {
            return Err(old(format!("a version {version} pi file")));
        }
        return match super::export::export_storage_to_file(
            &header, &storage, &path, false, progress,
        ) {
            Ok(outcome) => {
                record_file(archive, id, &path)?;
                Ok((path, PiExport::Plain(outcome)))
            }
            Err(Error::WouldOverwrite { .. }) => {
                let file = read_file_side(&path)?;
                let side = read_archive_side(&storage)?;
                let aliases = v1_aliases(&side, &file);
                if !aliases.is_empty() {
                    // pi's upgrade of a file the archive holds as it was:
                    // nothing to write unless the archive has more.
                    let in_file: HashSet<&str> = file
                        .entries
                        .iter()
                        .map(|e| aliases.get(e.id()).map_or(e.id(), String::as_str))
                        .collect();
                    let app = storage.contract()? == Contract::App;
                    let more = side.entries.iter().any(|e| {
                        !(in_file.contains(e.id()) || (app && *e.entry_type() == EntryType::Leaf))
                    });
                    if !more {
                        record_file(archive, id, &path)?;
                        return Ok((
                            path,
                            PiExport::Plain(super::export::ExportOutcome::Unchanged),
                        ));
                    }
                    return Err(old(
                        "a version 1 file pi upgraded since it was imported (its entries have new ids)"
                            .into(),
                    ));
                }
                drop(storage);
                let merged = merge_export(archive, id, &path)?;
                Ok((path, PiExport::Merged(merged)))
            }
            Err(e) => Err(e),
        };
    }
    let outcome = super::export::export_storage_to_file(&header, &storage, &path, force, progress)?;
    record_file(archive, id, &path)?;
    Ok((path, PiExport::Plain(outcome)))
}
