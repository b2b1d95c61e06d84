//! `sessiontree rpc`: a contract over stdio.

use super::db::Access;
use super::Cli;
use clap::{Args, ValueEnum};
use sessiontree::app::AppSession;
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::memory::MemoryStorage;
use sessiontree::rpc::app::AppRpc;
use sessiontree::{rpc, Result, Session, SessionRef, SessionStorage};
use std::io::{BufRead, Write};

/// Which backend serves the requests.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Backend {
    /// The JSONL file itself (appends go to the file).
    Jsonl,
    /// The JSONL file loaded into memory (appends are not saved).
    Memory,
}

/// Whose rules the requests are answered by.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum RpcContract {
    /// pi-agent-core 0.83.0's `SessionStorage` and `Session` (the SDK contract).
    #[default]
    Sdk,
    /// pi-coding-agent 1.6.0's `SessionManager` (the pi app's own rules).
    App,
}

/// Arguments of `rpc`.
#[derive(Debug, Args)]
pub struct RpcArgs {
    /// A `.jsonl` session file, or a session id (or unique prefix) of the archive.
    pub source: String,
    /// For a `.jsonl` source: serve it from the file or from memory.
    #[arg(long, value_enum, default_value_t = Backend::Jsonl)]
    pub backend: Backend,
    /// The contract served: the SDK's methods (`getPathToRootOrCompaction`,
    /// `moveTo`, …) or the pi app's `SessionManager` methods (`getBranch`,
    /// `branch`, `branchWithSummary`, …).
    #[arg(long, value_enum, default_value_t = RpcContract::Sdk)]
    pub contract: RpcContract,
}

/// Serves `storage` (or its opening error) by `contract`'s rules.
fn serve<S: SessionStorage>(
    storage: Result<S>,
    contract: RpcContract,
    input: impl BufRead,
    output: impl Write,
) -> Result<()> {
    let io = |e| sessiontree::Error::io("rpc: stdio", e);
    match contract {
        RpcContract::Sdk => rpc::serve(storage.map(Session::new), input, output).map_err(io),
        RpcContract::App => {
            let served = storage.and_then(|s| {
                let id = s.metadata()?.id;
                Ok(AppRpc::new(AppSession::open(s)?, id))
            });
            rpc::app::serve(served, input, output).map_err(io)
        }
    }
}

/// Runs `rpc`.
pub fn run(cli: &Cli, args: &RpcArgs) -> Result<()> {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    let path = match SessionRef::parse(&args.source) {
        SessionRef::File(path) => path,
        SessionRef::Archive(prefix) => {
            // The session is opened for reading; its writer claim is taken
            // at the first write. An error is the answer to every request.
            let session = super::target::open_in_archive(cli, &prefix, Access::Write);
            return serve(session, args.contract, stdin, stdout);
        }
    };
    let jsonl = JsonlStorage::open(&path, cli.durability.into());
    match args.backend {
        Backend::Jsonl => serve(jsonl, args.contract, stdin, stdout),
        Backend::Memory => {
            let memory = jsonl.and_then(|j| {
                Ok(MemoryStorage::loaded(
                    j.metadata()?,
                    j.all_entries().iter().cloned(),
                ))
            });
            serve(memory, args.contract, stdin, stdout)
        }
    }
}
