//! `sessiontree rpc`: the contract over stdio.

use super::db::Access;
use super::Cli;
use clap::{Args, ValueEnum};
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::memory::MemoryStorage;
use sessiontree::{rpc, Result, Session, SessionRef, SessionStorage};

/// Which backend serves the requests.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Backend {
    /// The JSONL file itself (appends go to the file).
    Jsonl,
    /// The JSONL file loaded into memory (appends are not saved).
    Memory,
}

/// Arguments of `rpc`.
#[derive(Debug, Args)]
pub struct RpcArgs {
    /// A `.jsonl` session file, or a session id (or unique prefix) of the archive.
    pub source: String,
    /// For a `.jsonl` source: serve it from the file or from memory.
    #[arg(long, value_enum, default_value_t = Backend::Jsonl)]
    pub backend: Backend,
}

/// Runs `rpc`.
pub fn run(cli: &Cli, args: &RpcArgs) -> Result<()> {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    let io = |e| sessiontree::Error::io("rpc: stdio", e);
    let path = match SessionRef::parse(&args.source) {
        SessionRef::File(path) => path,
        SessionRef::Archive(prefix) => {
            // The session is opened for reading; its writer claim is taken
            // at the first write. An error is the answer to every request.
            let session = super::target::open_in_archive(cli, &prefix, Access::Write);
            return rpc::serve(session.map(Session::new), stdin, stdout).map_err(io);
        }
    };
    let jsonl = JsonlStorage::open(&path, cli.durability.into());
    match args.backend {
        Backend::Jsonl => rpc::serve(jsonl.map(Session::new), stdin, stdout).map_err(io),
        Backend::Memory => {
            let memory = jsonl.and_then(|j| {
                Ok(MemoryStorage::loaded(
                    j.metadata()?,
                    j.all_entries().iter().cloned(),
                ))
            });
            rpc::serve(memory.map(Session::new), stdin, stdout).map_err(io)
        }
    }
}
