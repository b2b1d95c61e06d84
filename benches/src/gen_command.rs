//! `sessiontree-bench gen`: deterministic pi-realistic session files (see
//! [`crate::gen`]).

use crate::gen::{generate, GenOptions, Shape};
use crate::Report;
use clap::{Args, ValueEnum};
use serde_json::json;
use sessiontree::Result;
use std::path::PathBuf;
use std::time::Instant;

/// `--shape`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ShapeArg {
    /// One chat without forks.
    Linear,
    /// One long conversation with many forks (regenerations and moves back).
    Forked,
    /// Many sessions in pi's directory layout.
    Archive,
    /// One chat whose latest reply is regenerated about every `--fork-every`
    /// entries (default 4): every fork on the active path.
    Regenerate,
    /// A long spine with a one-entry dead-end side branch at every
    /// `--fork-every`-th spine entry (default 1).
    Caterpillar,
    /// A short handle, then `--forks` sibling replies under one user message
    /// (default entries/2, at most 10,000, cut to what fits).
    Broom,
    /// Like `forked`, but the first entry's parentId names an entry that is
    /// not in the file (a file cut from a longer one).
    DanglingRoot,
}

impl From<ShapeArg> for Shape {
    fn from(s: ShapeArg) -> Self {
        match s {
            ShapeArg::Linear => Shape::Linear,
            ShapeArg::Forked => Shape::Forked,
            ShapeArg::Archive => Shape::Archive,
            ShapeArg::Regenerate => Shape::Regenerate,
            ShapeArg::Caterpillar => Shape::Caterpillar,
            ShapeArg::Broom => Shape::Broom,
            ShapeArg::DanglingRoot => Shape::DanglingRoot,
        }
    }
}

/// Arguments of `gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// The shape of the workload.
    #[arg(long, value_enum, default_value_t = ShapeArg::Linear)]
    pub shape: ShapeArg,
    /// Entries in all (an archive spreads them over its sessions).
    #[arg(long, default_value_t = 10_000)]
    pub entries: usize,
    /// Forks (default: one per 100 entries for `forked` and `dangling-root`,
    /// one per 150 for `archive`); for `broom`, its bristles.
    #[arg(long)]
    pub forks: Option<usize>,
    /// About how many entries between regenerations (`regenerate`, default 4,
    /// at least 2), or spine entries per side branch (`caterpillar`, default 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub fork_every: Option<u64>,
    /// Sessions of an archive (default: one per 100 entries).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// About how many entries between compactions (0: none).
    #[arg(long, default_value_t = 500)]
    pub compaction_every: usize,
    /// The seed: the same seed and options always write the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Working directory recorded in a single session's header.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Where to write (pi's layout: `DIR/--<cwd>--/<createdAt>_<id>.jsonl`).
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `gen`.
pub fn run(args: &GenArgs) -> Result<Report> {
    let started = Instant::now();
    let options = GenOptions {
        shape: args.shape.into(),
        entries: args.entries,
        forks: args.forks,
        fork_every: args
            .fork_every
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        sessions: args.sessions,
        compaction_every: args.compaction_every,
        seed: args.seed,
        cwd: args.cwd.clone(),
    };
    let report = generate(&args.out, &options)?;
    let secs = started.elapsed().as_secs_f64();
    let mut text = String::new();
    let shown = 20;
    for s in report.sessions.iter().take(shown) {
        text.push_str(&format!(
            "{}  {} entries  {:.1} MB  {} forks  {} compactions  leaf depth {}  max depth {}\n",
            s.path.display(),
            s.entries,
            s.bytes as f64 / 1e6,
            s.forks,
            s.compactions,
            s.leaf_depth,
            s.max_depth
        ));
    }
    if report.sessions.len() > shown {
        text.push_str(&format!(
            "… and {} more sessions\n",
            report.sessions.len() - shown
        ));
    }
    let total = report.total_entries();
    let bytes = report.total_bytes();
    text.push_str(&format!(
        "wrote {} session(s), {} entries, {:.1} MB ({:.0} B/entry) under {} in {:.2} s (shape {}, seed {})\n",
        report.sessions.len(),
        total,
        bytes as f64 / 1e6,
        bytes as f64 / total.max(1) as f64,
        args.out.display(),
        secs,
        report.shape.as_str(),
        report.seed
    ));
    let sessions: Vec<_> = report
        .sessions
        .iter()
        .map(|s| {
            json!({
                "path": s.path.to_string_lossy(),
                "id": s.id,
                "cwd": s.cwd,
                "createdAt": s.created_at,
                "entries": s.entries,
                "bytes": s.bytes,
                "forks": s.forks,
                "compactions": s.compactions,
                "leafId": s.leaf_id,
                "leafDepth": s.leaf_depth,
                "maxDepth": s.max_depth,
            })
        })
        .collect();
    Ok(Report::new(
        json!({
            "shape": report.shape.as_str(),
            "seed": report.seed,
            "entries": total,
            "bytes": bytes,
            "seconds": secs,
            "sessions": sessions,
        }),
        text,
    ))
}
