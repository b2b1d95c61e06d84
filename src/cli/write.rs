//! Commands that write: `export`, `fork`, `label`, `name`, `move`, and `check`.

use super::db::Access;
use super::{target, Cli, Report};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use sessiontree::app::{AppSession, BranchSummaryArgs, JsValue};
use sessiontree::archive::{BoxedStorage, SessionArchive};
use sessiontree::backend::postgres::PgArchive;
use sessiontree::backend::sqlite::{CacheSize, CheckCoverage, CheckMode};
use sessiontree::convert::{export_file_to_file, ExportOutcome, PiExport};
use sessiontree::json::{JsString, ObjectWriter};
use sessiontree::layout::{export_path, session_file_name};
use sessiontree::repo::archive::ArchiveRepo;
use sessiontree::repo::{ForkOptions, SessionRepo};
use sessiontree::rules::ForkPosition;
use sessiontree::session::BranchSummary;
use sessiontree::{
    Contract, Error, JsonText, Result, Session, SessionMetadata, SessionRef, SessionStorage,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Arguments of `export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Sessions: ids or unique prefixes of the archive's, or `.jsonl` files
    /// (written again as version 3, e.g. an old pi file).
    pub sessions: Vec<String>,
    /// Export every session of the archive.
    #[arg(long)]
    pub all: bool,
    /// The sessions root to write into (pi's layout below it).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace a file that differs from the archive's copy (it is kept as `NAME.bak`).
    /// Without it such a file is refused; a file that is a prefix of the
    /// archive's copy only has the rest appended.
    #[arg(long)]
    pub force: bool,
    /// Rewrite a pi file of an older format (version 1 or 2, or one pi
    /// upgraded since it was imported) as version 3 with the entries of both;
    /// the old file is kept as `NAME.bak`. Without it such a file is left alone.
    #[arg(long)]
    pub upgrade: bool,
    /// Write one self-contained HTML page per session (`SESSION_ID.html`
    /// directly in DIR: the active path in full, inline CSS, images
    /// embedded) instead of pi JSONL, as pi's `/export` does.
    #[arg(long)]
    pub html: bool,
}

/// What `export` is asked to write: an archive session, or a pi file (any
/// version) written again as version 3.
enum ExportSource {
    Archive(String),
    File(PathBuf),
}

/// `export`.
pub fn export(cli: &Cli, args: &ExportArgs) -> Result<Report> {
    // The archive is opened (read-only) only if a session of it is named.
    let mut archive = None;
    let mut archive = || -> Result<Arc<dyn SessionArchive>> {
        if archive.is_none() {
            archive = Some(super::db::open(cli, Access::Read)?);
        }
        archive
            .clone()
            .ok_or_else(|| Error::Unknown("the archive did not open".into()))
    };
    let sources: Vec<ExportSource> = if args.all {
        archive()?
            .list(&Default::default())?
            .into_iter()
            .map(|s| ExportSource::Archive(s.metadata.id))
            .collect()
    } else {
        if args.sessions.is_empty() {
            return Err(Error::Usage("name sessions to export, or --all".into()));
        }
        args.sessions
            .iter()
            .map(|s| match SessionRef::parse(s) {
                SessionRef::File(path) => Ok(ExportSource::File(path)),
                SessionRef::Archive(prefix) => {
                    Ok(ExportSource::Archive(archive()?.resolve_session(&prefix)?))
                }
            })
            .collect::<Result<_>>()?
    };
    // The local archive, opened for writing: an export into pi's directory
    // records the file it wrote and merges in the entries pi's file has.
    let mut local_archive: Option<sessiontree::backend::sqlite::Archive> = None;
    let mut by_id = None;
    // Like import, one session that cannot be exported never stops the others:
    // it is reported, and the exit status is 2.
    let mut written = Vec::new();
    let mut failed = Vec::new();
    let mut text = String::new();
    // The bar counts entries across sessions: those of the sessions done,
    // then those written of the current one. The counts come from the
    // session rows (a file counts its entries once open), read only when
    // someone will see the bar.
    let bar = super::progress_bar(
        cli,
        "exporting {bar:30} {pos}/{len} entries ({eta} left) {msg}",
    );
    let counts: Vec<u64> = if bar.is_hidden() {
        vec![0; sources.len()]
    } else {
        sources
            .iter()
            .map(|source| match source {
                ExportSource::Archive(id) => archive()
                    .and_then(|a| a.open_storage(id)?.entry_count())
                    .unwrap_or(0) as u64,
                ExportSource::File(_) => 0,
            })
            .collect()
    };
    bar.set_length(counts.iter().sum());
    let mut done_entries = 0u64;
    let total = sources.len();
    for (i, (source, entries)) in sources.into_iter().zip(counts).enumerate() {
        bar.set_message(format!("session {} / {total}", i + 1));
        let mut open_error = None;
        if matches!(source, ExportSource::Archive(_)) && !args.html && local_archive.is_none() {
            // A missing archive is refused as a read refuses it, never created.
            let opened = if super::archive_path(cli).exists() {
                super::open_archive(cli)
            } else {
                super::open_archive_for_reading(cli)
            };
            match opened {
                Ok(a) => local_archive = Some(a),
                // An archive that opens only for reading (a read-only
                // directory) exports as before: nothing merged or recorded.
                Err(_) if super::archive_path(cli).exists() => {}
                Err(e) => open_error = Some(e),
            }
        }
        let mut local = || -> Result<&sessiontree::backend::sqlite::Archive> {
            local_archive.as_ref().ok_or_else(|| {
                open_error
                    .take()
                    .unwrap_or_else(|| Error::Unknown("the archive did not open".into()))
            })
        };
        let mut reached = |n: u64| bar.set_position(done_entries + n.min(entries));
        let (name, result) = match &source {
            ExportSource::Archive(id) if args.html => (
                id.clone(),
                archive()
                    .and_then(|a| {
                        super::show::export_html(a.open_storage(id)?, &args.out, args.force)
                    })
                    .map(|(p, o)| (p, PiExport::Plain(o))),
            ),
            ExportSource::File(path) if args.html => (
                path.display().to_string(),
                target::open_for_reading(cli, &path.to_string_lossy())
                    .and_then(|s| super::show::export_html(s, &args.out, args.force))
                    .map(|(p, o)| (p, PiExport::Plain(o))),
            ),
            ExportSource::Archive(id)
                if super::db::postgres_url(cli).is_none() && local_archive.is_some() =>
            {
                (
                    id.clone(),
                    local().and_then(|a| {
                        sessiontree::convert::export_to_pi_dir(
                            a,
                            id,
                            &args.out,
                            (args.force, args.upgrade),
                            &mut by_id,
                            &mut reached,
                        )
                    }),
                )
            }
            ExportSource::Archive(id) => (
                id.clone(),
                archive().and_then(|a| {
                    a.export_session(id, &|m| out_path(&args.out, m), args.force, &mut reached)
                        .map(|(p, o)| (p, PiExport::Plain(o)))
                }),
            ),
            ExportSource::File(path) => (
                path.display().to_string(),
                export_file(path, &args.out, args.force).map(|(p, o)| (p, PiExport::Plain(o))),
            ),
        };
        done_entries += entries;
        bar.set_position(done_entries);
        match result {
            Ok((path, outcome)) => {
                let (what, backup) = match &outcome {
                    PiExport::Plain(ExportOutcome::Created) => ("created".to_owned(), None),
                    PiExport::Plain(ExportOutcome::Unchanged) => ("unchanged".to_owned(), None),
                    PiExport::Plain(ExportOutcome::Appended { bytes }) => {
                        (format!("appended {bytes} bytes"), None)
                    }
                    PiExport::Plain(ExportOutcome::Replaced { backup })
                    | PiExport::Upgraded { backup } => (
                        format!(
                            "{} (the old file is {})",
                            if matches!(outcome, PiExport::Upgraded { .. }) {
                                "upgraded to version 3"
                            } else {
                                "replaced"
                            },
                            backup.display()
                        ),
                        Some(backup.display().to_string()),
                    ),
                    PiExport::Merged(m) => (merged_text(&name, m), None),
                };
                text.push_str(&format!("{name} → {} ({what})\n", path.display()));
                let action = match &outcome {
                    PiExport::Plain(ExportOutcome::Created) => "created",
                    PiExport::Plain(ExportOutcome::Unchanged) => "unchanged",
                    PiExport::Plain(ExportOutcome::Appended { .. }) => "appended",
                    PiExport::Plain(ExportOutcome::Replaced { .. }) => "replaced",
                    PiExport::Upgraded { .. } => "upgraded",
                    PiExport::Merged(m) if m.imported == 0 && m.appended == 0 => "unchanged",
                    PiExport::Merged(_) => "merged",
                };
                // An app session whose leaf pi will not resume at: said on stderr.
                let note = match &source {
                    ExportSource::Archive(id) => archive()
                        .and_then(|a| sessiontree::convert::app_resume_note(&*a.open_storage(id)?))
                        .unwrap_or(None),
                    ExportSource::File(_) => None,
                };
                if let Some(note) = &note {
                    bar.suspend(|| eprintln!("note: {note}"));
                }
                let mut row = json!({"session": name, "path": path.display().to_string(), "action": action, "backup": backup});
                if let PiExport::Merged(m) = &outcome {
                    row["merge"] = json!({
                        "imported": m.imported,
                        "appended": m.appended,
                        "reissued": m.reissued.iter().map(|(n, o)| json!({"entry": n, "of": o})).collect::<Vec<_>>(),
                        "piLeaf": m.pi_leaf,
                        "branchLeaves": m.branch_leaves,
                    });
                }
                if let Some(note) = note {
                    row["note"] = json!(note);
                }
                written.push(row);
            }
            Err(e) => {
                text.push_str(&format!("failed [{}]: {name}: {e}\n", e.code()));
                failed.push(
                    json!({"session": name, "code": e.code().as_str(), "message": e.to_string()}),
                );
            }
        }
    }
    bar.finish_and_clear();
    let mut report = Report::new(json!({"exported": written, "failed": failed}), text);
    if !failed.is_empty() {
        report.status = super::exit::SOME_FAILED;
    }
    Ok(report)
}

/// What a merge into pi's file did, for `export`'s line: counts, the
/// re-issued entries, and where each side's leaf is.
fn merged_text(session: &str, m: &sessiontree::convert::MergeExport) -> String {
    if m.imported == 0 && m.appended == 0 {
        return "unchanged: pi's file holds every entry of the session, in its own order".into();
    }
    let mut t = format!(
        "merged: {} entr{} from pi's file imported, {} appended",
        m.imported,
        if m.imported == 1 { "y" } else { "ies" },
        m.appended
    );
    for (new, of) in &m.reissued {
        t.push_str(&format!("; {of} re-issued on pi's tip as {new}"));
    }
    if let Some(leaf) = &m.pi_leaf {
        t.push_str(&format!("; pi resumes at {leaf}"));
    }
    for leaf in &m.branch_leaves {
        t.push_str(&format!(
            "; the archive's branch ends at {leaf} (a branch in pi's /tree; `sessiontree branch {session} --leaf {leaf}` shows it)"
        ));
    }
    t
}

/// Where a session is exported below `out` (pi's layout), refused if a
/// symbolic link below `out` would take the write elsewhere.
fn out_path(out: &Path, meta: &SessionMetadata) -> Result<PathBuf> {
    sessiontree::convert::refuse_links_below(out, &export_path(out, meta)?)
}

/// Writes a pi file below `out` as version 3, by the same rules.
fn export_file(file: &Path, out: &Path, force: bool) -> Result<(PathBuf, ExportOutcome)> {
    let source =
        sessiontree::backend::jsonl::JsonlStorage::open(file, sessiontree::Durability::Relaxed)?;
    let meta = sessiontree::SessionStorage::metadata(&source)?;
    let path = out_path(out, &meta)?;
    let outcome = export_file_to_file(&source, &path, force)?;
    Ok((path, outcome))
}

/// `--position`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PositionArg {
    /// Up to the entry's parent (the entry must be a user message).
    Before,
    /// Up to and including the entry.
    At,
}

/// Arguments of `fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The session to fork: id, unique prefix, or `.jsonl` path (the fork is
    /// then a new file next to it).
    pub session: String,
    /// The entry to fork at; without it the whole log is copied.
    #[arg(long)]
    pub entry: Option<String>,
    /// Before (default) or at the entry.
    #[arg(long, value_enum, default_value_t = PositionArg::Before)]
    pub position: PositionArg,
}

/// The `--position` as the library's [`ForkPosition`].
fn fork_position(p: PositionArg) -> ForkPosition {
    match p {
        PositionArg::Before => ForkPosition::Before,
        PositionArg::At => ForkPosition::At,
    }
}

/// The fork the arguments ask for; the new session inherits the rest.
fn fork_options(args: &ForkArgs, parent_session: Option<String>) -> ForkOptions {
    ForkOptions {
        entry_id: args.entry.clone(),
        position: fork_position(args.position),
        parent_session,
        ..ForkOptions::default()
    }
}

/// `fork` of a `.jsonl` file: as pi does, the new session is a new file in the
/// same directory, its `parentSession` the source file's path.
fn fork_file(cli: &Cli, args: &ForkArgs) -> Result<Report> {
    use sessiontree::backend::jsonl::JsonlStorage;
    use sessiontree::SessionStorage;
    let source = JsonlStorage::open(&args.session, cli.durability.into())?;
    let source_path =
        std::fs::canonicalize(&args.session).unwrap_or_else(|_| PathBuf::from(&args.session));
    let options = fork_options(args, Some(source_path.to_string_lossy().into_owned()));
    let entries =
        sessiontree::repo::entries_to_fork(&source, options.entry_id.as_deref(), options.position)?;
    let fields = options.inherit(&source.metadata()?)?;
    let id = &fields.id;
    let created_at = sessiontree::entry::now_timestamp();
    let dir = source_path.parent().unwrap_or(Path::new("."));
    let path = dir.join(session_file_name(&created_at, id));
    let header = fields.header(&created_at);
    let mut target = JsonlStorage::create(&path, header, cli.durability.into())?;
    target.append_entries(&entries)?;
    let count = entries.len();
    Ok(Report::new(
        json!({"session": id, "entries": count, "path": path.display().to_string()}),
        format!("forked into {id} ({count} entries): {}\n", path.display()),
    ))
}

/// `fork`.
pub fn fork(cli: &Cli, args: &ForkArgs) -> Result<Report> {
    if let SessionRef::File(_) = SessionRef::parse(&args.session) {
        return fork_file(cli, args);
    }
    let mut repo = ArchiveRepo::new(super::db::open(cli, Access::Write)?);
    let source = SessionMetadata {
        id: repo.archive().resolve_session(&args.session)?,
        ..SessionMetadata::default()
    };
    let (new_id, count) = forked(&mut repo, &source, &fork_options(args, None))?;
    Ok(Report::new(
        json!({"session": new_id, "entries": count, "path": null}),
        format!("forked into {new_id} ({count} entries)\n"),
    ))
}

/// Forks `source` in `repo`: the new session's id and entry count.
pub(crate) fn forked<R: SessionRepo>(
    repo: &mut R,
    source: &SessionMetadata,
    options: &ForkOptions,
) -> Result<(String, usize)> {
    use sessiontree::SessionStorage;
    let forked = repo.fork(source, options)?;
    let storage = forked.storage();
    Ok((storage.metadata()?.id, storage.entry_count()?))
}

/// Arguments of `label`.
#[derive(Debug, Args)]
pub struct LabelArgs {
    /// Session id, prefix or `.jsonl` path.
    pub session: String,
    /// The entry to label.
    pub entry: String,
    /// The label; empty clears it.
    pub text: String,
}

/// `label`.
pub fn label(cli: &Cli, args: &LabelArgs) -> Result<Report> {
    label_in(target::open(cli, &args.session)?, &args.entry, &args.text)
}

/// `label` on an open session, by its rules (`browse` writes through it too).
pub(crate) fn label_in(storage: BoxedStorage, entry: &str, text: &str) -> Result<Report> {
    if storage.contract()? == Contract::App {
        return label_app(storage, entry, text);
    }
    let mut session = Session::new(storage);
    let id = session.append_label(entry, label_text(text))?;
    let label = session.storage().label(entry)?;
    let text = match &label {
        Some(l) => format!("labelled {} {} (entry {id})\n", entry, l.json()),
        None => format!("cleared the label of {} (entry {id})\n", entry),
    };
    let mut json = ObjectWriter::new();
    json.str("entry", &id)
        .str("target", entry)
        .raw("label", label.as_ref().map_or("null", JsString::json));
    Ok(Report::raw(json.finish(), text))
}

/// The label a text sets: none (a cleared label) when it is only white space.
pub(crate) fn label_text(text: &str) -> Option<&str> {
    (!sessiontree::json::js_trim(text).is_empty()).then_some(text)
}

/// `label` on an app session: pi's `appendLabelChange`, the label stored
/// as written (not trimmed; an empty one clears it).
fn label_app(storage: BoxedStorage, entry: &str, text: &str) -> Result<Report> {
    let mut app = AppSession::open(storage)?;
    let label = (!text.is_empty()).then(|| JsValue::str(text));
    let id = app.append_label_change(Some(&JsValue::str(entry)), label)?;
    let label = (!text.is_empty()).then(|| JsString::new(text));
    let text = match &label {
        Some(l) => format!("labelled {} {} (entry {id})\n", entry, l.json()),
        None => format!("cleared the label of {} (entry {id})\n", entry),
    };
    let mut json = ObjectWriter::new();
    json.str("entry", &id)
        .str("target", entry)
        .raw("label", label.as_ref().map_or("null", JsString::json));
    Ok(Report::raw(json.finish(), text))
}

/// Arguments of `name`.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// Session id, prefix or `.jsonl` path.
    pub session: String,
    /// The new name.
    pub text: String,
}

/// `name`.
pub fn name(cli: &Cli, args: &NameArgs) -> Result<Report> {
    name_in(target::open(cli, &args.session)?, &args.text)
}

/// `name` on an open session, by its rules (`browse` writes through it too).
pub(crate) fn name_in(storage: BoxedStorage, text: &str) -> Result<Report> {
    let (id, name) = if storage.contract()? == Contract::App {
        // pi's `appendSessionInfo`: its entry shape and key order.
        let mut app = AppSession::open(storage)?;
        let id = app.append_session_info(Some(&JsValue::str(text)))?;
        (id, app.storage().session_name()?)
    } else {
        let mut session = Session::new(storage);
        let id = session.append_session_name(text)?;
        (id, session.storage().session_name()?)
    };
    let mut json = ObjectWriter::new();
    json.str("entry", &id)
        .raw("name", name.as_ref().map_or("null", JsString::json));
    Ok(Report::raw(
        json.finish(),
        format!("named {}\n", name.as_ref().map_or("\"\"", JsString::json)),
    ))
}

/// Arguments of `move`.
#[derive(Debug, Args)]
pub struct MoveArgs {
    /// Session id, prefix or `.jsonl` path.
    pub session: String,
    /// The entry to move the leaf to (`root` for before the first entry).
    pub entry: String,
    /// Summarise the branch being left.
    #[arg(long)]
    pub summary: Option<String>,
}

/// `move`.
pub fn move_leaf(cli: &Cli, args: &MoveArgs) -> Result<Report> {
    let target = (args.entry != "root").then_some(args.entry.as_str());
    move_in(
        target::open(cli, &args.session)?,
        target,
        args.summary.as_deref(),
    )
}

/// `move` on an open session, by its rules (`browse` writes through it too):
/// the leaf to `target` (`None`: before the first entry).
pub(crate) fn move_in(
    storage: BoxedStorage,
    target: Option<&str>,
    summary: Option<&str>,
) -> Result<Report> {
    if storage.contract()? == Contract::App {
        // pi persists a move only as `branchWithSummary`: a `branch_summary`
        // whose parent is the target, `fromId` the old leaf (or "root").
        let mut app = AppSession::open(storage)?;
        let summary_id = app.branch_with_summary(
            target,
            BranchSummaryArgs {
                summary: summary.map(JsValue::str),
                ..BranchSummaryArgs::default()
            },
        )?;
        return Ok(Report::new(
            json!({"leaf": summary_id, "summary": summary_id, "target": target}),
            format!(
                "leaf is now {} (a branch_summary {summary_id} under {}, as pi records a move)\n",
                summary_id,
                target.unwrap_or("root")
            ),
        ));
    }
    let mut session = Session::new(storage);
    let summary = summary.map(|s| BranchSummary {
        summary: Some(JsonText::string(s)),
        ..BranchSummary::default()
    });
    let summary_id = session.move_to(target, summary.as_ref())?;
    let leaf = session.storage().leaf_id()?;
    Ok(Report::new(
        json!({"leaf": leaf, "summary": summary_id}),
        format!("leaf is now {}\n", leaf.as_deref().unwrap_or("root")),
    ))
}

/// Arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Only this session (id or unique prefix), or a `.jsonl` file to validate.
    pub session: Option<String>,
    /// Read everything again: `PRAGMA integrity_check`, the search index's
    /// own check and every entry. Without it, only what changed since the
    /// last check: `PRAGMA quick_check`, and of each session the entries
    /// appended since (a session rewritten since by compact, delete or an
    /// import is read whole). A team archive is always checked whole.
    #[arg(long)]
    pub full: bool,
    /// Threads that check sessions (and SQLite's pragma) at once; default:
    /// the cores, at most 3. The report is the same whatever the count.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=3))]
    pub jobs: Option<u16>,
}

/// `check`.
pub fn check(cli: &Cli, args: &CheckArgs) -> Result<Report> {
    if let Some(SessionRef::File(path)) = args.session.as_deref().map(SessionRef::parse) {
        return check_file(&path);
    }
    if let Some(url) = super::db::postgres_url(cli) {
        return check_team(cli, &super::db::open_postgres(cli, &url)?, args);
    }
    let archive = match super::open_existing_archive(cli) {
        Err(e @ Error::Corrupt(_)) => return Ok(damaged_archive_report(cli, &e)),
        other => other?,
    };
    let id = args
        .session
        .as_deref()
        .map(|s| archive.resolve_session(s))
        .transpose()?;
    let mode = if args.full {
        CheckMode::Full
    } else {
        CheckMode::Incremental
    };
    let run = match with_check_progress(cli, |p| match args.jobs {
        Some(jobs) => archive.check_run_on(id.as_deref(), mode, usize::from(jobs), p),
        None => archive.check_run(id.as_deref(), mode, p),
    }) {
        Err(e @ Error::Corrupt(_)) => return Ok(damaged_archive_report(cli, &e)),
        other => other?,
    };
    let (mut found, coverage) = (run.findings, run.coverage);
    if id.is_none() {
        found
            .problems
            .extend(pi_dir_duplicates(&sessiontree::layout::pi_sessions_dir())?);
    }
    let problems = &found.problems;
    let mut text = match (problems.is_empty(), mode) {
        (true, CheckMode::Full) => "ok: integrity_check passed, every branch cache equals its rebuild, and every entry's stored text, blobs and search row check out\n".to_owned(),
        (true, CheckMode::Incremental) => "ok: quick_check passed, every branch cache equals its rebuild, and every entry's stored text, blobs and search row check out\n".to_owned(),
        (false, _) => problems.iter().map(|p| format!("problem: {p}\n")).collect(),
    };
    text.push_str(&warning_lines(&found.warnings));
    text.push_str(&coverage_line(mode, &coverage));
    let (cache_text, cache_json) = cache_report(&archive.cache_sizes(id.as_deref())?);
    text.push_str(&cache_text);
    let mut report = Report::new(
        json!({"ok": problems.is_empty(), "problems": problems, "warnings": found.warnings, "cache": cache_json,
               "checked": {"full": mode == CheckMode::Full, "sessions": coverage.sessions,
                           "sessionsWhole": coverage.sessions_whole,
                           "sessionsUnchanged": coverage.sessions_unchanged,
                           "entries": coverage.entries_read, "recorded": coverage.marks_recorded}}),
        text,
    );
    if !problems.is_empty() {
        report.status = super::exit::CHECK_PROBLEMS;
    }
    Ok(report)
}

/// Sessions that have more than one file in pi's sessions directory `dir`
/// (pi's /resume lists each, and writes go to whichever was opened), each
/// with the one step that leaves one file and loses no entry.
pub(crate) fn pi_dir_duplicates(dir: &Path) -> Result<Vec<String>> {
    use sessiontree::error::shell_quote;
    let mut found = Vec::new();
    let mut by_id: Vec<(String, Vec<PathBuf>)> = sessiontree::convert::session_files_by_id(dir)?
        .into_iter()
        .filter(|(_, files)| files.len() > 1)
        .collect();
    by_id.sort();
    let ids_of = |p: &Path| -> Option<std::collections::HashSet<String>> {
        let f =
            sessiontree::backend::jsonl::JsonlStorage::open(p, sessiontree::Durability::Relaxed)
                .ok()?;
        Some(f.all_entries().iter().map(|e| e.id().to_owned()).collect())
    };
    for (id, mut files) in by_id {
        files.sort();
        let sets: Vec<_> = files.iter().map(|f| ids_of(f)).collect();
        // A file whose every entry another file holds can go.
        let spare = (0..files.len()).find(|&i| {
            (0..files.len()).any(|j| {
                j != i
                    && matches!((&sets[i], &sets[j]), (Some(a), Some(b)) if a.is_subset(b) && (a != b || i > j))
            })
        });
        let fix = match spare {
            Some(i) => format!(
                "every entry of {} is in another of them: rm {}",
                files[i].display(),
                shell_quote(&files[i].display().to_string())
            ),
            None => format!(
                "each has entries of its own: sessiontree import {} merges them into the archive, then `sessiontree export {id} --out {}` writes them all to one, and the others can go",
                files
                    .iter()
                    .map(|f| shell_quote(&f.display().to_string()))
                    .collect::<Vec<_>>()
                    .join(" "),
                shell_quote(&dir.display().to_string())
            ),
        };
        found.push(format!(
            "session {id} has {} files in pi's sessions directory ({}); pi lists it once per file. {fix}",
            files.len(),
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(found)
}

/// `check` of an archive too damaged to open or read through: what is
/// wrong with the file, every problem SQLite's integrity check lists, exit 8.
fn damaged_archive_report(cli: &Cli, opened: &Error) -> Report {
    let path = super::archive_path(cli);
    let problems = sessiontree::backend::sqlite::Archive::damage_in_file(&path, opened);
    let mut text: String = problems.iter().map(|p| format!("problem: {p}\n")).collect();
    text.push_str(&format!(
        "{} is damaged: writes to it are refused. Restore it from a backup, or move it aside and `sessiontree import` pi's files into a new archive\n",
        path.display()
    ));
    let mut report = Report::new(
        json!({"ok": false, "problems": problems, "warnings": [], "damaged": true}),
        text,
    );
    report.status = super::exit::CHECK_PROBLEMS;
    report
}

/// What a check read: sessions, entries, and what it skipped as verified
/// by an earlier check.
fn coverage_line(mode: CheckMode, c: &CheckCoverage) -> String {
    let read = format!(
        "checked {} sessions: {} entries read",
        c.sessions, c.entries_read
    );
    match mode {
        CheckMode::Full => format!("{read} (--full: every entry)\n"),
        CheckMode::Incremental => format!(
            "{read} ({} sessions read whole, {} unchanged since the last check; `check --full` reads every entry again)\n",
            c.sessions_whole, c.sessions_unchanged
        ),
    }
}

/// Runs a check with a progress bar over the sessions it checks.
fn with_check_progress<T>(
    cli: &Cli,
    check: impl FnOnce(&mut dyn FnMut(u64, u64)) -> Result<T>,
) -> Result<T> {
    let bar = super::progress_bar(cli, "checking {bar:30} {pos}/{len} sessions ({eta} left)");
    let problems = check(&mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    problems
}

/// `check` of a team archive: each session's branch reads and maintained
/// facts against a rebuild from its log (PostgreSQL checks its own pages).
fn check_team(cli: &Cli, archive: &PgArchive, args: &CheckArgs) -> Result<Report> {
    let id = args
        .session
        .as_deref()
        .map(|s| archive.resolve_session(s))
        .transpose()?;
    let found = with_check_progress(cli, |p| archive.check_findings(id.as_deref(), p))?;
    let problems = &found.problems;
    let mut text = if problems.is_empty() {
        "ok: every path read from the branch cache equals the walk of the log, and every session's leaf, name, statistics and labels equal a replay\n".to_owned()
    } else {
        problems.iter().map(|p| format!("problem: {p}\n")).collect()
    };
    text.push_str(&warning_lines(&found.warnings));
    let mut report = Report::new(
        json!({"ok": problems.is_empty(), "problems": problems, "warnings": found.warnings}),
        text,
    );
    if !problems.is_empty() {
        report.status = super::exit::CHECK_PROBLEMS;
    }
    Ok(report)
}

/// `warning: …` lines: what pi tolerates and reads here tolerate too (the
/// exit status stays 0 for them).
fn warning_lines(warnings: &[String]) -> String {
    warnings.iter().map(|w| format!("warning: {w}\n")).collect()
}

/// The branch cache's size: in all, and the sessions with the most cache
/// rows per entry (a healthy session has well under one).
fn cache_report(sizes: &[(String, CacheSize)]) -> (String, Value) {
    const SHOWN: usize = 5;
    let entries: i64 = sizes.iter().map(|(_, c)| c.entries).sum();
    let rows: i64 = sizes.iter().map(|(_, c)| c.rows()).sum();
    let mut worst: Vec<&(String, CacheSize)> = sizes.iter().collect();
    worst.sort_by(|a, b| b.1.rows_per_entry().total_cmp(&a.1.rows_per_entry()));
    worst.truncate(SHOWN);
    let per_entry = if entries > 0 {
        rows as f64 / entries as f64
    } else {
        0.0
    };
    let mut text = format!(
        "branch cache: {rows} rows for {entries} entries in {} sessions ({per_entry:.3} per entry)\n",
        sizes.len()
    );
    for (id, c) in worst.iter().filter(|(_, c)| c.entries > 0) {
        text.push_str(&format!(
            "  {id}: {:.3} rows per entry ({} segments, {} ancestry rows, {} compactions, {} entries)\n",
            c.rows_per_entry(),
            c.segments,
            c.ancestry,
            c.compactions,
            c.entries
        ));
    }
    let sessions: Vec<Value> = worst
        .iter()
        .map(|(id, c)| {
            json!({"session": id, "entries": c.entries, "segments": c.segments,
                   "ancestry": c.ancestry, "compactions": c.compactions,
                   "rowsPerEntry": c.rows_per_entry()})
        })
        .collect();
    let json = json!({"entries": entries, "rows": rows, "rowsPerEntry": per_entry, "mostPerEntry": sessions});
    (text, json)
}

/// `check` of a `.jsonl` file: it opens (every line valid), the contract's
/// path walk succeeds from every entry (no missing parent or `parentId` cycle
/// before a compaction stops it — the shared rule, so a fork cut at a
/// compaction is fine), and the leaf, branch, statistics and context can be
/// computed. A missing file is an error, not a problem.
fn check_file(path: &Path) -> Result<Report> {
    let sessiontree::backend::jsonl::FileCheck {
        entries: entries_checked,
        problems,
        warnings,
    } = sessiontree::backend::jsonl::JsonlStorage::check(path)?;
    let mut text = if problems.is_empty() {
        format!(
            "ok: {} is a valid session file ({entries_checked} entries)\n",
            path.display()
        )
    } else {
        problems.iter().map(|p| format!("problem: {p}\n")).collect()
    };
    text.push_str(&warning_lines(&warnings));
    let mut report = Report::new(
        json!({"ok": problems.is_empty(), "problems": problems, "warnings": warnings}),
        text,
    );
    if !problems.is_empty() {
        report.status = super::exit::CHECK_PROBLEMS;
    }
    Ok(report)
}

/// Arguments of `delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Sessions of the archive (ids or unique prefixes). pi's own files are never touched.
    #[arg(required = true)]
    pub sessions: Vec<String>,
}

/// `delete`: each session in its own transaction; one that cannot be deleted
/// (unknown, held by a writer) is reported and the others go on (exit 2).
pub fn delete(cli: &Cli, args: &DeleteArgs) -> Result<Report> {
    let archive = super::db::open(cli, Access::Write)?;
    let mut deleted = Vec::new();
    let mut failed = Vec::new();
    let mut text = String::new();
    for arg in &args.sessions {
        match archive.resolve_session(arg).and_then(|id| {
            archive.delete_session(&id)?;
            Ok(id)
        }) {
            Ok(id) => {
                text.push_str(&format!("deleted {id}\n"));
                deleted.push(id);
            }
            Err(e) => {
                text.push_str(&format!("failed [{}]: {arg}: {e}\n", e.code()));
                failed.push(
                    json!({"session": arg, "code": e.code().as_str(), "message": e.to_string()}),
                );
            }
        }
    }
    let mut report = Report::new(json!({"deleted": deleted, "failed": failed}), text);
    if !failed.is_empty() {
        report.status = super::exit::SOME_FAILED;
    }
    Ok(report)
}
