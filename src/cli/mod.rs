//! Command-line interface: argument parsing and dispatch to one module per command.

mod rpc;

use clap::{Parser, Subcommand, ValueEnum};
use sessiontree::{Durability, Error, ErrorCode};
use std::path::PathBuf;

/// sessiontree: pi's conversation trees in memory, JSONL or SQLite.
#[derive(Debug, Parser)]
#[command(name = "sessiontree", version, about)]
pub struct Cli {
    /// The archive (SQLite file); default `$XDG_DATA_HOME/sessiontree/archive.db`.
    #[arg(long, global = true)]
    pub db: Option<PathBuf>,
    /// How hard appends work to survive a crash.
    #[arg(long, global = true, value_enum, default_value_t = DurabilityArg::Full)]
    pub durability: DurabilityArg,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--durability`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DurabilityArg {
    /// fsync every append (JSONL) / synchronous=FULL (SQLite).
    Full,
    /// No fsync; survives a process crash, not necessarily power loss.
    Relaxed,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::Full => Durability::Full,
            DurabilityArg::Relaxed => Durability::Relaxed,
        }
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the session contract over stdin/stdout (JSON lines).
    Rpc(rpc::RpcArgs),
}

/// Exit status for an error, by contract code.
pub fn exit_status(e: &Error) -> i32 {
    match e.code() {
        ErrorCode::NotFound => 3,
        ErrorCode::InvalidSession => 4,
        ErrorCode::InvalidEntry => 5,
        ErrorCode::InvalidForkTarget => 6,
        ErrorCode::Storage => 7,
        ErrorCode::Unknown => 1,
    }
}

/// Parses arguments, runs the command, and returns the exit status.
pub fn run() -> i32 {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Rpc(args) => rpc::run(&cli, args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sessiontree: error [{}]: {e}", e.code());
            exit_status(&e)
        }
    }
}

/// The archive path: `--db`, else the user's data directory.
pub fn archive_path(cli: &Cli) -> PathBuf {
    if let Some(p) = &cli.db {
        return p.clone();
    }
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("sessiontree").join("archive.db")
}
