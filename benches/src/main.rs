//! `sessiontree-bench`: the bench report and the workload generator. Only
//! this file prints or exits.

use clap::{Parser, Subcommand};
use sessiontree_bench::{gen_command, report, stats_command, team};

/// sessiontree's benchmarks and generated workloads.
#[derive(Debug, Parser)]
#[command(name = "sessiontree-bench", version, about, long_about = None)]
struct Cli {
    /// Print the JSON form instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The commands.
// Parsed once per run: the report's many options need no box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmark SQLite against JSONL, memory and naive SQL designs; write a report.
    Report(report::BenchArgs),
    /// Generate deterministic pi-realistic session files (benchmarks, tests).
    Gen(gen_command::GenArgs),
    /// How long `stats` and `ls` take to answer from an archive's maintained facts.
    Stats(stats_command::StatsArgs),
    /// The team archive on PostgreSQL beside SQLite: load, resume, path, leaf move, append, concurrency.
    Team(team::TeamArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Report(args) => report::run(args),
        Command::Gen(args) => gen_command::run(args),
        Command::Team(args) => team::run(args),
        Command::Stats(args) => stats_command::run(args),
    };
    match result {
        Ok(report) => {
            if cli.json {
                println!("{}", report.json);
            } else {
                print!("{}", report.text);
            }
        }
        Err(e) => {
            eprintln!("sessiontree-bench: error [{}]: {e}", e.code());
            std::process::exit(1);
        }
    }
}
