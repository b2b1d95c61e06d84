//! `sync --to postgres://…`: pushes the local archive (or pi session files)
//! to a team archive (see `sessiontree::sync` for what makes it idempotent,
//! resumable and safe when several machines sync at once).

use super::{Cli, Report};
use clap::Args;
use serde_json::json;
use sessiontree::backend::postgres::is_postgres_url;
use sessiontree::{Error, Result};
use std::path::PathBuf;

/// Arguments of `sync`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The team archive: `postgres://user@host/db` (`?host=/socket/dir` for a unix socket).
    #[arg(long)]
    pub to: String,
    /// pi session files or directories of them (recursively); without any,
    /// the sessions of the local archive (`--db`).
    pub sources: Vec<PathBuf>,
}

/// Runs `sync`: every session is tried; one that fails is reported and the
/// exit status is 2.
pub fn run(cli: &Cli, args: &SyncArgs) -> Result<Report> {
    if !is_postgres_url(&args.to) {
        return Err(Error::Usage(format!(
            "--to {:?} is not a PostgreSQL URL (postgres://…)",
            args.to
        )));
    }
    let target = super::db::open_postgres(cli, &args.to)?;
    target.writable("sync --to")?;
    let mut results: Vec<(String, Result<u64>)> = Vec::new();
    if args.sources.is_empty() {
        let archive = super::open_archive_for_reading(cli)?;
        let ids: Vec<String> = archive
            .list(&Default::default())?
            .into_iter()
            .map(|s| s.metadata.id)
            .collect();
        for id in ids {
            let r = archive
                .open_session(&id)
                .and_then(|s| sessiontree::sync::sync_sqlite_session(&s, &target));
            results.push((id, r));
        }
    } else {
        let mut files = Vec::new();
        for source in &args.sources {
            sessiontree::layout::collect_jsonl_files(source, &mut files)?;
        }
        for file in files {
            match sessiontree::sync::sync_jsonl_file(&file, &target) {
                Ok((id, copied)) => results.push((id, Ok(copied))),
                Err(e) => results.push((file.display().to_string(), Err(e))),
            }
        }
    }
    let mut text = String::new();
    let (mut synced, mut failed) = (Vec::new(), Vec::new());
    for (name, r) in results {
        match r {
            Ok(0) => {
                text.push_str(&format!("{name}: up to date\n"));
                synced.push(json!({"session": name, "copied": 0}));
            }
            Ok(n) => {
                text.push_str(&format!("{name}: {n} entries copied\n"));
                synced.push(json!({"session": name, "copied": n}));
            }
            Err(e) => {
                text.push_str(&format!("failed [{}]: {name}: {e}\n", e.code()));
                failed.push(
                    json!({"session": name, "code": e.code().as_str(), "message": e.to_string()}),
                );
            }
        }
    }
    if synced.is_empty() && failed.is_empty() {
        text.push_str("nothing to sync\n");
    }
    let mut report = Report::new(json!({"synced": synced, "failed": failed}), text);
    if !failed.is_empty() {
        report.status = super::exit::SOME_FAILED;
    }
    Ok(report)
}
