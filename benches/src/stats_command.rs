//! `sessiontree-bench stats`: how long `stats` and `ls` take to answer from
//! an archive's maintained facts (the usage facts and the session rows), the
//! median and slowest of `--runs` runs of each query, on an archive made with
//! `gen` and `sessiontree import` (docs/cli.md quotes the figure for 400,000
//! entries). The query is the archive's (`Archive::usage`); the
//! command groups its few thousand rows further, which is not timed here.

use crate::Report;
use clap::Args;
use serde_json::json;
use sessiontree::backend::sqlite::Archive;
use sessiontree::listing::ListQuery;
use sessiontree::usage::{UsageQuery, DAY_MS};
use sessiontree::{Durability, Result};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The SQLite archive to query.
    #[arg(long)]
    pub db: PathBuf,
    /// Runs of each query.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
}

/// Times each query `runs` times: (median, slowest) in ms.
fn time(runs: usize, mut f: impl FnMut() -> Result<usize>) -> Result<(f64, f64, usize)> {
    let mut ms = Vec::with_capacity(runs);
    let mut rows = 0;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        rows = f()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    Ok((ms[ms.len() / 2], ms[ms.len() - 1], rows))
}

/// `stats`.
pub fn run(args: &StatsArgs) -> Result<Report> {
    let archive = Archive::open(&args.db, Durability::Relaxed)?;
    let entries = archive.totals()?.entries;
    let all = archive.usage(&UsageQuery::default())?;
    let last_day = all.iter().map(|r| r.day).max().unwrap_or(0);
    let cwd = all.first().map(|r| r.cwd.clone());
    let queries: Vec<(&str, UsageQuery)> = vec![
        ("stats (all usage)", UsageQuery::default()),
        (
            "stats --since (last 30 days)",
            UsageQuery {
                since_ms: Some((last_day - 29) * DAY_MS),
                ..UsageQuery::default()
            },
        ),
        (
            "stats --cwd (one project)",
            UsageQuery {
                cwd_under: cwd,
                ..UsageQuery::default()
            },
        ),
    ];
    let mut text = format!("{} entries in {}\n", entries, args.db.display());
    let mut results = Vec::new();
    for (name, q) in &queries {
        let (median, max, rows) = time(args.runs, || Ok(archive.usage(q)?.len()))?;
        text.push_str(&format!(
            "{name:<30} median {median:>8.2} ms  slowest {max:>8.2} ms  ({rows} session-day-model rows)\n"
        ));
        results.push(json!({"query": name, "medianMs": median, "maxMs": max, "rows": rows}));
    }
    let page = ListQuery {
        limit: Some(50),
        by_activity: true,
        ..ListQuery::default()
    };
    let (median, max, rows) = time(args.runs, || Ok(archive.list(&page)?.len()))?;
    text.push_str(&format!(
        "{:<30} median {median:>8.2} ms  slowest {max:>8.2} ms  ({rows} sessions)\n",
        "ls (first page)"
    ));
    results
        .push(json!({"query": "ls (first page)", "medianMs": median, "maxMs": max, "rows": rows}));
    Ok(Report {
        json: json!({"entries": entries, "runs": args.runs, "queries": results}),
        text,
    })
}
