//! `sessiontree import`: pi session files into the archive, each whole or
//! not at all, idempotent; one bad file never stops the others.

use super::{Cli, Report};
use clap::Args;
use serde_json::json;
use sessiontree::backend::jsonl::SkipReason;
use sessiontree::convert::ImportOutcome;
use sessiontree::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Files or directories (searched recursively for `*.jsonl`); default:
    /// pi's sessions directory, found as pi 1.6 finds it
    /// (`$PI_CODING_AGENT_SESSION_DIR`, else the `sessionDir` of pi's
    /// settings, else `$PI_CODING_AGENT_DIR/sessions` or `~/.pi/agent/sessions`).
    pub paths: Vec<PathBuf>,
    /// Do not draw a progress bar (none is drawn anyway when stderr is not a
    /// terminal, or with `--json`).
    #[arg(long)]
    pub quiet: bool,
    /// Write a generated demo (three small sessions) into its own archive
    /// beside the archive (`archive-demo.db` beside `archive.db`), never into
    /// the archive itself.
    #[arg(long, conflicts_with = "paths")]
    pub demo: bool,
    /// Whose rules the imported sessions follow: `app` (the pi program's
    /// SessionManager) or `sdk` (pi-agent-core's SessionStorage). Default:
    /// detected per file (`sdk` if it holds `leaf` or `active_tools_change`
    /// entries, else `app`).
    #[arg(long, value_name = "app|sdk")]
    pub rules: Option<sessiontree::Contract>,
}

/// The demo archive of the archive at `archive`: `NAME-demo.EXT` beside it
/// (an archive already named as a demo is its own demo archive).
pub fn demo_archive_path(archive: &Path) -> PathBuf {
    let stem = archive
        .file_stem()
        .map_or_else(|| "archive".into(), |s| s.to_string_lossy().into_owned());
    if stem.ends_with("-demo") {
        return archive.to_owned();
    }
    let name = match archive.extension() {
        Some(ext) => format!("{stem}-demo.{}", ext.to_string_lossy()),
        None => format!("{stem}-demo"),
    };
    archive.with_file_name(name)
}

/// Writes the demo sessions beside the demo archive `db` (once) and returns
/// their directory.
fn demo_sessions(db: &Path) -> Result<PathBuf> {
    let dir = db.parent().map_or_else(
        || PathBuf::from("demo-sessions"),
        |p| p.join("demo-sessions"),
    );
    if !dir.is_dir() {
        super::demo::write_demo(&dir)?;
    }
    Ok(dir)
}

/// Runs `import`.
pub fn run(cli: &Cli, args: &ImportArgs) -> Result<Report> {
    let mut note = String::new();
    let mut db = super::archive_path(cli);
    let roots = if args.demo {
        // The demo never goes into the user's archive: a generated session
        // there would be listed, searched and exported with the real ones.
        db = demo_archive_path(&db);
        let demo = demo_sessions(&db)?;
        note = format!(
            "demo sessions from {} imported into the demo archive {} (not into {}); browse it with: sessiontree --db {} ls\n",
            demo.display(),
            db.display(),
            super::archive_path(cli).display(),
            db.display()
        );
        vec![demo]
    } else if args.paths.is_empty() {
        let pi = sessiontree::layout::pi_sessions_dir_found();
        if !pi.dir.is_dir() {
            return Err(Error::Io {
                context: format!(
                    "no pi sessions directory at {} ({}); set PI_CODING_AGENT_SESSION_DIR or PI_CODING_AGENT_DIR, or name files or directories to import (`sessiontree import --demo` writes a demo archive of its own)",
                    pi.dir.display(),
                    pi.source.describe(),
                ),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        vec![pi.dir]
    } else {
        args.paths.clone()
    };
    let mut files = Vec::new();
    for root in &roots {
        sessiontree::layout::collect_jsonl_files(root, &mut files)?;
    }
    let archive = super::open_archive_at(cli, db.clone())?;
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .collect();
    let started = Instant::now();
    let bar = super::progress_bar(
        cli,
        "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}",
    );
    bar.set_length(sizes.iter().sum());
    // The bar moves by bytes: how far the library has read into each file
    // (never past the size listed, should pi append meanwhile), whatever
    // order it takes them in.
    let mut reached = vec![0u64; files.len()];
    let mut position = 0u64;
    // Files heard of so far (a file is heard again when it is hashed, then
    // written, or when its group is imported again one file at a time).
    let (mut heard, mut count) = (vec![false; files.len()], 0);
    let options = sessiontree::convert::ImportOptions { rules: args.rules };
    let results =
        sessiontree::convert::import_jsonl_files_with(&archive, &files, &options, &mut |i, at| {
            if !heard[i] {
                heard[i] = true;
                count += 1;
                bar.set_message(format!("{count} / {} files", files.len()));
            }
            let at = at.min(sizes[i]);
            position = position + at - reached[i].min(at);
            reached[i] = reached[i].max(at);
            bar.set_position(position);
        })?;
    let (mut imported, mut appended, mut unchanged, mut present) = (0u64, 0u64, 0u64, 0u64);
    let mut elsewhere = 0u64;
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut failed = Vec::new();
    let mut torn = Vec::new();
    // Lines kept verbatim (pi skips them), and what pi 1.6 would rewrite.
    let (mut kept_text, mut kept_json, mut blank) = (String::new(), Vec::new(), 0u64);
    let (mut rewrites_text, mut rewrites_json) = (String::new(), Vec::new());
    for (file, result) in files.iter().zip(results) {
        let shown = file.display().to_string();
        match result {
            Ok(r) => {
                for k in &r.report.kept {
                    let why = k.why.describe();
                    if matches!(k.why, SkipReason::Blank) {
                        blank += 1;
                    } else {
                        kept_text.push_str(&format!(
                            "{}:{}: kept verbatim, {why}\n",
                            super::terminal_safe(&shown),
                            k.line
                        ));
                    }
                    kept_json.push(json!({
                        "file": shown,
                        "line": k.line,
                        "session": r.session_id,
                        "blank": matches!(k.why, SkipReason::Blank),
                        "why": why,
                    }));
                }
                for rewrite in &r.report.pi_rewrites {
                    rewrites_text.push_str(&format!(
                        "{}: pi 1.6 will {rewrite} (not done to it here)\n",
                        super::terminal_safe(&shown),
                    ));
                }
                if !r.report.pi_rewrites.is_empty() {
                    rewrites_json.push(json!({"file": shown, "piWill": r.report.pi_rewrites}));
                }
                match r.outcome {
                    ImportOutcome::Imported => imported += 1,
                    ImportOutcome::Appended => appended += 1,
                    ImportOutcome::Unchanged => unchanged += 1,
                    ImportOutcome::AlreadyPresent => present += 1,
                    ImportOutcome::InProgressElsewhere => elsewhere += 1,
                }
                entries += r.entries;
                bytes += r.bytes_read;
                if let Some(t) = r.torn_tail {
                    torn.push(json!({"file": file.display().to_string(), "line": t.line}));
                }
            }
            Err(e) => {
                if std::fs::metadata(file).is_ok_and(|m| m.len() == 0) {
                    rewrites_text.push_str(&format!(
                        "{}: pi 1.6 will write a session header into this empty file on open (not done to it here)\n",
                        super::terminal_safe(&shown)
                    ));
                    rewrites_json.push(json!({"file": shown, "piWill": ["write a session header into this empty file on open"]}));
                }
                failed.push((shown, e))
            }
        }
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let mb_per_s = if secs > 0.0 {
        bytes as f64 / 1e6 / secs
    } else {
        0.0
    };
    let mut text = note;
    text.push_str(&format!(
        "{} files: {imported} imported, {appended} appended, {unchanged} unchanged, {present} already present, {} failed\n{entries} entries, {:.1} MB in {secs:.2} s ({mb_per_s:.1} MB/s)\n",
        files.len(),
        failed.len(),
        bytes as f64 / 1e6
    ));
    if elsewhere > 0 {
        text.push_str(&format!(
            "{elsewhere} file(s) skipped: another process is importing them right now (import again later)\n"
        ));
    }
    for (file, e) in &failed {
        let message = e.to_string();
        if message.contains(file.as_str()) {
            text.push_str(&format!("failed [{}]: {message}\n", e.code()));
        } else {
            text.push_str(&format!("failed [{}]: {file}: {message}\n", e.code()));
        }
    }
    for t in &torn {
        text.push_str(&format!(
            "torn last line left for later: {}:{}\n",
            t["file"].as_str().unwrap_or(""),
            t["line"]
        ));
    }
    text.push_str(&kept_text);
    if blank > 0 {
        text.push_str(&format!(
            "{blank} blank line(s) kept verbatim (pi skips them)\n"
        ));
    }
    text.push_str(&rewrites_text);
    let json = json!({
        "archive": db.display().to_string(),
        "roots": roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>(),
        "files": files.len(),
        "imported": imported,
        "appended": appended,
        "unchanged": unchanged,
        "alreadyPresent": present,
        "inProgressElsewhere": elsewhere,
        "failed": failed.iter().map(|(f, e)| json!({
            "file": f,
            "code": e.code().as_str(),
            "message": e.to_string(),
            "line": match e { Error::InvalidLine { line, .. } => Some(*line), _ => None },
        })).collect::<Vec<_>>(),
        "tornTails": torn,
        "keptLines": kept_json,
        "piWill": rewrites_json,
        "entries": entries,
        "bytes": bytes,
        "seconds": secs,
    });
    let mut report = Report::new(json, text);
    if !failed.is_empty() {
        report.status = super::exit::SOME_FAILED;
    }
    Ok(report)
}
