//! Command-line interface: argument parsing, and one module per group of
//! commands. Commands return a [`Report`] and only [`run`] prints it; `tree`
//! streams its lines through [`pager`] instead (bounded memory on any tree).

mod browse;
mod columns;
mod complete;
mod db;
mod demo;
mod import;
mod maintain;
mod pager;
mod rpc;
mod show;
mod spend;
mod sync;
mod target;
mod tree;
mod tui;
mod unclaim;
mod watch;
mod write;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;
use sessiontree::{Durability, Error, ErrorCode};
use std::path::PathBuf;

/// sessiontree: pi's conversation trees in one fast archive.
#[derive(Debug, Parser)]
#[command(name = "sessiontree", version, about, long_about = None)]
pub struct Cli {
    /// The archive: an SQLite file, or a team archive `postgres://…` (every
    /// command but import, compact and sql); default `$SESSIONTREE_DB`, else
    /// `$XDG_DATA_HOME/sessiontree/archive.db` (`~/.local/share/sessiontree/archive.db`).
    #[arg(long, global = true)]
    pub db: Option<PathBuf>,
    /// How hard appends work to survive a crash.
    #[arg(long, global = true, value_enum, default_value_t = DurabilityArg::Full)]
    pub durability: DurabilityArg,
    /// Print machine-readable JSON instead of text: one JSON value on one
    /// line of stdout; on failure `{"error":{"code","message"}}` (stderr still
    /// gets the text).
    #[arg(long, global = true)]
    pub json: bool,
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
    /// Import pi session files or directories into the archive (idempotent).
    #[command(after_help = "\
Examples:
  sessiontree import                  # pi's sessions directory, found as pi finds it
  sessiontree import --demo           # a generated demo, into its own archive beside yours
  sessiontree import session.jsonl    # one file; again later: only what pi appended")]
    Import(import::ImportArgs),
    /// Keep the archive in step with pi's sessions directory while pi writes.
    #[command(after_help = "\
Examples:
  sessiontree watch                          # pi's sessions directory; a line per session updated; Ctrl-C stops
  sessiontree watch --once                   # one pass, for cron: what pi wrote since the last run
  sessiontree watch --once --quiet --json    # the same: problems only, then a JSON summary")]
    Watch(watch::WatchArgs),
    /// List sessions, newest first.
    #[command(after_help = "\
Examples:
  sessiontree ls
  sessiontree ls --since 2025-12-01 --limit 10   # the ten newest since December
  sessiontree ls --cwd /Users/badlogic/workspaces/pi-mono --page 2")]
    Ls(browse::LsArgs),
    /// Browse the archive in a terminal UI: find, read, name, label, fork, delete, resume in pi.
    Browse(tui::BrowseArgs),
    /// Show a session's tree, pi `/tree` style.
    Tree(tree::TreeArgs),
    /// Print an entry, or a whole path, in full: text, Markdown or one HTML page.
    Show(show::ShowArgs),
    /// Print the active path (or the path from an entry).
    #[command(after_help = "\
Examples:
  sessiontree branch ffae                   # the active path, root first
  sessiontree branch ffae --from v1-00176   # the path ending at an entry
  sessiontree branch session.jsonl --json   # the entries exactly as stored")]
    Branch(browse::BranchArgs),
    /// Print the model-visible context of the active path.
    #[command(after_help = "\
Examples:
  sessiontree context ffae                   # what the model sees at the leaf
  sessiontree context ffae --from v1-00020   # what it saw at an earlier entry
  sessiontree context session.jsonl --json   # pi's buildContext value, from a file")]
    Context(browse::BranchArgs),
    /// Where the leaf has been moved, newest first ("where was I before").
    #[command(after_help = "\
Examples:
  sessiontree history ffae
  sessiontree history ffae --limit 5 --json")]
    History(browse::HistoryArgs),
    /// Full-text search over message text.
    #[command(after_help = "\
Examples:
  sessiontree search compaction abort --limit 3              # both words, in any order
  sessiontree search '\"abort controller\"' --role assistant   # a phrase, in assistant messages
  sessiontree search 'refactor*' --session ffae --page 2     # a prefix, one session, page 2")]
    Search(browse::SearchArgs),
    /// Token, cost and message totals, per session or archive-wide.
    #[command(after_help = "\
Examples:
  sessiontree stats   # the whole archive, with sessions per cwd
  sessiontree stats ffae --json")]
    Stats(browse::StatsArgs),
    /// Export sessions as pi JSONL files in pi's directory layout.
    #[command(after_help = "\
Examples:
  sessiontree export --all --out backup/          # every session, in pi's layout below backup/
  sessiontree export ffae d703 --out backup/      # again: identical files are left alone
  sessiontree export ffae --out backup/ --force   # replace a differing file, keeping NAME.bak")]
    Export(write::ExportArgs),
    /// Fork a session at an entry into a new session.
    #[command(after_help = "\
Examples:
  sessiontree fork ffae --entry v1-00012                 # a new session: the path before that message
  sessiontree fork ffae --entry v1-00176 --position at   # ... the path up to and with that entry
  sessiontree fork ffae                                  # a copy of the whole log")]
    Fork(write::ForkArgs),
    /// Set (or clear, with an empty text) the label of an entry.
    #[command(after_help = "\
Examples:
  sessiontree label ffae v1-00012 'AgentSession idea'
  sessiontree label ffae v1-00012 ''   # clears it")]
    Label(write::LabelArgs),
    /// Name a session.
    #[command(after_help = "\
Examples:
  sessiontree name ffae 'AgentSession refactor'
  sessiontree name session.jsonl 'AgentSession refactor'   # appends to the file, as pi would")]
    Name(write::NameArgs),
    /// Move the leaf to an entry, optionally with a branch summary.
    #[command(after_help = "\
Examples:
  sessiontree move ffae v1-00014                                    # back to an earlier entry
  sessiontree move ffae v1-00020 --summary 'Tried e2e tests only'   # and summarise the branch left
  sessiontree move ffae root                                        # before the first entry")]
    Move(write::MoveArgs),
    /// Check the archive: SQLite integrity and the branch cache against a rebuild (only what changed since the last check; --full: everything).
    #[command(after_help = "\
Examples:
  sessiontree check                 # what changed since the last check
  sessiontree check --full          # the whole archive, every entry and page
  sessiontree check session.jsonl   # a pi file, without importing it

Without --full, a session a check found clean is not read again: the next
check reads only the entries appended to it since, replayed on top of what
the last check verified, and runs PRAGMA quick_check (every page and B-tree,
not each index against its table). A session rewritten since (compact,
delete, an import that replaces it, a migration) is read whole. Only --full
finds damage to entries verified before that SQLite cannot see (bytes of a
stored text changed inside a valid page), an index that disagrees with its
table, and damage the search index's own check finds. A team archive on
PostgreSQL is always checked whole (--full or not).")]
    Check(write::CheckArgs),
    /// Clear a session's writer claim, left by a writer that is gone (names the holder).
    #[command(after_help = "\
Examples:
  sessiontree unclaim ffae           # a claim whose holder was killed, or set by a clock ahead
  sessiontree unclaim ffae --force   # even from a running process on this host")]
    Unclaim(unclaim::UnclaimArgs),
    /// Delete sessions from the archive, with everything derived from it (in short batches; invisible from the first).
    #[command(after_help = "\
Examples:
  sessiontree delete d703
  sessiontree delete ffae d703 --json   # pi's own files are never touched")]
    Delete(write::DeleteArgs),
    /// Retrain the compression dictionary, re-encode every entry, drop what nothing uses, VACUUM.
    #[command(after_help = "\
Examples:
  sessiontree compact   # prints the sizes before and after
  sessiontree compact --quiet --json")]
    Compact(maintain::CompactArgs),
    /// Run one read-only SQL statement on the archive (`entry_text(entry_key)` reads an entry).
    #[command(after_help = "\
Examples:
  sessiontree sql 'SELECT id, entry_count, cwd FROM sessions'
  sessiontree sql 'SELECT type, count(*) FROM entries GROUP BY type' --json
  sessiontree sql 'SELECT name, sum(pgsize) FROM dbstat GROUP BY name'   # bytes per table and index")]
    Sql(maintain::SqlArgs),
    /// Serve the session contract over stdin/stdout (JSON lines).
    #[command(after_help = "\
Examples:
  echo '{\"id\":1,\"method\":\"getSessionStats\"}' | sessiontree rpc ffae
  echo '{\"id\":1,\"method\":\"getLeafId\"}' | sessiontree rpc session.jsonl --backend memory")]
    Rpc(rpc::RpcArgs),
    /// Push the local archive (or pi session files) to a team archive on PostgreSQL.
    #[command(after_help = "\
Examples:
  sessiontree sync --to postgres://team@db.example/sessions                        # the local archive
  sessiontree sync --to postgres://team@db.example/sessions ~/.pi/agent/sessions   # pi's files
  sessiontree sync --to postgres://team@db.example/sessions --json                 # again: only what is new")]
    Sync(sync::SyncArgs),
    /// Print a shell completion script to stdout.
    #[command(after_help = "\
Examples:
  sessiontree completions bash > ~/.local/share/bash-completion/completions/sessiontree
  sessiontree completions zsh > ~/.zfunc/_sessiontree   # with fpath+=~/.zfunc in ~/.zshrc
  sessiontree completions fish > ~/.config/fish/completions/sessiontree.fish")]
    Completions(CompletionsArgs),
    /// Sessions whose id or name starts with PREFIX, for the completion scripts.
    #[command(hide = true)]
    CompleteSessions(complete::CompleteSessionsArgs),
}

/// Arguments of `completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

/// JSON written straight to standard output, piece by piece.
pub type JsonStream = Box<dyn FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>>;

/// What a command has to say: JSON for `--json`, text otherwise.
pub struct Report {
    /// The stable JSON form, as text (entries inside it keep their exact stored text).
    pub json: String,
    /// The JSON form written as it is made instead of `json` (output too
    /// long to hold twice: a long context).
    pub json_stream: Option<JsonStream>,
    /// The readable form written as it is made instead of `text` (a long
    /// path), already escaped ([`terminal_safe`]).
    pub text_stream: Option<JsonStream>,
    /// The readable form.
    pub text: String,
    /// Exit status when the command succeeded only in part (e.g. some files
    /// failed): one of [`exit`].
    pub status: i32,
}

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Report")
            .field("json", &self.json)
            .field("json_stream", &self.json_stream.is_some())
            .field("text_stream", &self.text_stream.is_some())
            .field("text", &self.text)
            .field("status", &self.status)
            .finish()
    }
}

impl Report {
    /// A report that exits 0.
    pub fn new(json: Value, text: String) -> Self {
        Report::raw(json.to_string(), text)
    }

    /// A report whose JSON is already text (to embed entries exactly as stored).
    pub fn raw(json: String, text: String) -> Self {
        Report {
            json,
            json_stream: None,
            text_stream: None,
            text,
            status: exit::OK,
        }
    }

    /// A report whose both forms are written as they are made: an error
    /// of the command's own (not of the output) that a stream meets comes
    /// back wrapped in its `io::Error` ([`stream_error`]) and is reported as
    /// the command's error.
    pub fn streamed_both(json: JsonStream, text: JsonStream) -> Self {
        Report {
            json_stream: Some(json),
            text_stream: Some(text),
            ..Report::raw(String::new(), String::new())
        }
    }
}

/// A command's error met while its output is streamed, carried through the
/// stream's `io::Error` so that [`run`] reports it with its own exit status.
pub fn stream_error(e: Error) -> std::io::Error {
    std::io::Error::other(e)
}

/// Every exit status (documented in the README): one per error code, and two
/// for a command that ran but reports failures.
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// Code `unknown`.
    pub const UNKNOWN: i32 = 1;
    /// A usage mistake (clap's, or code `usage`).
    pub const USAGE: i32 = 2;
    /// `import`, `export` or `delete` with some files or sessions failed (the rest done).
    pub const SOME_FAILED: i32 = 2;
    /// Code `not_found`.
    pub const NOT_FOUND: i32 = 3;
    /// Code `invalid_session`.
    pub const INVALID_SESSION: i32 = 4;
    /// Code `invalid_entry`.
    pub const INVALID_ENTRY: i32 = 5;
    /// Code `invalid_fork_target`.
    pub const INVALID_FORK_TARGET: i32 = 6;
    /// Code `storage` (also: the output could not be written).
    pub const STORAGE: i32 = 7;
    /// `check` found problems.
    pub const CHECK_PROBLEMS: i32 = 8;
}

/// Exit status for an error, by contract code.
pub fn exit_status(e: &Error) -> i32 {
    match e.code() {
        ErrorCode::NotFound => exit::NOT_FOUND,
        ErrorCode::InvalidSession => exit::INVALID_SESSION,
        ErrorCode::InvalidEntry => exit::INVALID_ENTRY,
        ErrorCode::InvalidForkTarget => exit::INVALID_FORK_TARGET,
        ErrorCode::Storage => exit::STORAGE,
        ErrorCode::Usage => exit::USAGE,
        ErrorCode::Unknown => exit::UNKNOWN,
    }
}

/// Parses arguments, runs the command, prints, and returns the exit status.
pub fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return argument_error(&e),
    };
    if let Some(refused) = refuse_on_postgres(&cli) {
        return report_error(&cli, &refused);
    }
    let result = match &cli.command {
        Command::Sync(args) => sync::run(&cli, args).map(Some),
        Command::Rpc(args) => rpc::run(&cli, args).map(|()| None),
        Command::Import(args) => import::run(&cli, args).map(Some),
        Command::Watch(args) => watch::run(&cli, args).map(Some),
        Command::Ls(args) => browse::ls(&cli, args).map(Some),
        Command::Browse(args) => tui::run(&cli, args).map(Some),
        Command::Tree(args) => return print_tree(&cli, args),
        Command::Show(args) => return print_show(&cli, args),
        Command::Completions(args) => return print_completions(&cli, args),
        Command::CompleteSessions(args) => return write_stdout(&complete::candidates(&cli, args)),
        Command::Branch(args) => browse::branch(&cli, args).map(Some),
        Command::Context(args) => browse::context(&cli, args).map(Some),
        Command::History(args) => browse::history(&cli, args).map(Some),
        Command::Search(args) => browse::search(&cli, args).map(Some),
        Command::Stats(args) => browse::stats(&cli, args).map(Some),
        Command::Export(args) => write::export(&cli, args).map(Some),
        Command::Fork(args) => write::fork(&cli, args).map(Some),
        Command::Label(args) => write::label(&cli, args).map(Some),
        Command::Name(args) => write::name(&cli, args).map(Some),
        Command::Move(args) => write::move_leaf(&cli, args).map(Some),
        Command::Check(args) => write::check(&cli, args).map(Some),
        Command::Delete(args) => write::delete(&cli, args).map(Some),
        Command::Unclaim(args) => unclaim::run(&cli, args).map(Some),
        Command::Compact(args) => maintain::compact(&cli, args).map(Some),
        Command::Sql(args) => return maintain::print_sql(&cli, args),
    };
    match result {
        Ok(None) => exit::OK,
        Ok(Some(Report {
            json_stream: Some(stream),
            status,
            ..
        })) if cli.json => write_stream(&cli, status, |out| {
            stream(out)?;
            out.write_all(b"\n")
        }),
        Ok(Some(Report {
            text_stream: Some(stream),
            status,
            ..
        })) => write_stream(&cli, status, stream),
        Ok(Some(report)) => {
            let mut out = if cli.json {
                report.json
            } else {
                highlight(&terminal_safe(&report.text))
            };
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            match write_stdout(&out) {
                exit::OK => report.status,
                failed => failed,
            }
        }
        Err(e) => report_error(&cli, &e),
    }
}

/// The refusal of a command about the local SQLite file (import, compact,
/// sql) when `--db` (or `SESSIONTREE_DB`) names a team archive; `sync`
/// reads only an explicit `--db`.
fn refuse_on_postgres(cli: &Cli) -> Option<Error> {
    let name = match &cli.command {
        Command::Ls(_)
        | Command::Browse(_)
        | Command::Search(_)
        | Command::Rpc(_)
        | Command::Export(_)
        | Command::Completions(_)
        | Command::CompleteSessions(_)
        | Command::Branch(_)
        | Command::Context(_)
        | Command::History(_)
        | Command::Stats(_)
        | Command::Label(_)
        | Command::Name(_)
        | Command::Move(_)
        | Command::Fork(_)
        | Command::Delete(_)
        | Command::Unclaim(_)
        | Command::Tree(_)
        | Command::Show(_)
        | Command::Check(_) => return None,
        Command::Sync(_) => {
            let explicit = cli.db.as_ref().map(|p| p.to_string_lossy().into_owned());
            return explicit
                .filter(|db| sessiontree::backend::postgres::is_postgres_url(db))
                .map(|_| Error::Usage("sync reads a local archive: --db names an SQLite file here, --to the team archive".into()));
        }
        Command::Import(_) => "import",
        Command::Watch(_) => "watch",
        Command::Compact(_) => "compact",
        Command::Sql(_) => "sql",
    };
    db::postgres_url(cli).map(|_| db::sqlite_only(name))
}

/// Prints a failed command's error (stdout too with `--json`); returns its exit status.
fn report_error(cli: &Cli, e: &Error) -> i32 {
    let mut message = e.to_string();
    // SQLite reports a damaged page without saying which file it is in:
    // the archive this command opened is named, so the user knows which to
    // check and restore.
    if matches!(e, Error::Corrupt(_)) && db::postgres_url(cli).is_none() {
        let path = archive_path(cli).display().to_string();
        if !message.contains(&path) {
            message = format!("archive {path}: {message}");
        }
    }
    if cli.json {
        let err = serde_json::json!({"error": {"code": e.code().as_str(), "message": message}});
        write_stdout(&format!("{err}\n"));
    }
    eprintln!(
        "sessiontree: error [{}]: {}",
        e.code(),
        terminal_safe(&message)
    );
    exit_status(e)
}

/// `tree` streams: a large tree is written line by line (to a pager on a
/// terminal, see pager.rs) instead of gathered into a [`Report`]. The session
/// is indexed first, so a bad argument fails before any output or pager.
fn print_tree(cli: &Cli, args: &tree::TreeArgs) -> i32 {
    let view = match tree::prepare(cli, args) {
        Ok(view) => view,
        Err(e) => return report_error(cli, &e),
    };
    let mut printer = pager::Printer::open_at(cli.json, args.display(), view.pager_start());
    let written = view.write(&mut printer);
    let failed = printer.finish();
    match (written, failed) {
        (Err(e), _) => report_error(cli, &e),
        (Ok(()), Some(e)) => {
            eprintln!("sessiontree: error [storage]: writing output: {e}");
            exit::STORAGE
        }
        (Ok(()), None) => exit::OK,
    }
}

/// `show` streams like `tree`: the target is resolved first, so a bad
/// argument fails before any output or pager.
fn print_show(cli: &Cli, args: &show::ShowArgs) -> i32 {
    let shown = match show::prepare(cli, args) {
        Ok(shown) => shown,
        Err(e) => return report_error(cli, &e),
    };
    let mut printer = pager::Printer::open(cli.json, show::display(args));
    let written = if cli.json {
        shown.write_json(&mut printer)
    } else {
        shown.write(args.format, &mut show::PrinterSink::new(&mut printer))
    };
    let failed = printer.finish();
    match (written, failed) {
        (Err(e), _) => report_error(cli, &e),
        (Ok(()), Some(e)) => {
            eprintln!("sessiontree: error [storage]: writing output: {e}");
            exit::STORAGE
        }
        (Ok(()), None) => exit::OK,
    }
}

/// A command line clap refused (or `--help`/`--version`, which clap reports
/// the same way): printed as clap prints it; with `--json`, a usage error is
/// also the one JSON error object on stdout, like every other failure.
fn argument_error(e: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    let informational = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if !informational && std::env::args_os().any(|a| a == "--json") {
        let message = e.render().to_string();
        let first = message
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        let err = serde_json::json!({"error": {"code": "usage", "message": first}});
        write_stdout(&format!("{err}\n"));
    }
    // Printing can only fail on a closed stream, where there is no one to tell.
    let _ = e.print();
    // clap's own: 0 for help and version, 2 (`exit::USAGE`) otherwise.
    e.exit_code()
}

/// `completions`: the script goes out byte for byte, never through
/// [`terminal_safe`] (which would escape a tab inside it). With `--json` it is
/// `{shell, script}`, like every other command's one JSON value.
fn print_completions(cli: &Cli, args: &CompletionsArgs) -> i32 {
    use clap::CommandFactory;
    let script = complete::script(&mut Cli::command(), args.shell);
    if cli.json {
        let json = serde_json::json!({"shell": args.shell.to_string(), "script": script});
        write_stdout(&format!("{json}\n"))
    } else {
        write_stdout(&script)
    }
}

/// Where a report marks a match to show in colour: these private-use
/// characters around it (stored text cannot bring them in: `search` replaces
/// any it holds), turned into colour only after the text is made safe.
pub const MATCH_START: char = '\u{e000}';
/// The end of a marked match (see [`MATCH_START`]).
pub const MATCH_END: char = '\u{e001}';

/// Colours the marked matches (bold red), the only escape sequences added to
/// a report's text.
fn highlight(text: &str) -> String {
    if !text.contains(MATCH_START) {
        return text.to_owned();
    }
    text.replace(MATCH_START, "\x1b[1;31m")
        .replace(MATCH_END, "\x1b[0m")
}

/// Human-readable output with every control character that stored text may
/// carry shown escaped, so a session can never drive the terminal (ANSI escape
/// sequences, carriage returns, bidirectional overrides): `\x1b` → `\u{1b}`,
/// tab → `\t`. Line breaks stay.
pub fn terminal_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Runs of characters that pass as they are are copied whole.
    let mut from = 0;
    for (at, c) in text.char_indices() {
        let escaped = match c {
            '\t' => "\\t".to_owned(),
            '\r' => "\\r".to_owned(),
            '\n' => continue,
            c if c.is_control()
                || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                c.escape_unicode().to_string()
            }
            _ => continue,
        };
        out.push_str(&text[from..at]);
        out.push_str(&escaped);
        from = at + c.len_utf8();
    }
    out.push_str(&text[from..]);
    out
}

/// Stored text (an id, a name, a label, a cwd, a value) as one field of a
/// line of human output: everything [`terminal_safe`] escapes, and line
/// breaks too (`\n`), so that stored data can never forge a row of `ls`,
/// `tree`, `search`, `stats` or `show`. JSON output never passes here: it
/// stays exact.
pub fn field(text: &str) -> String {
    if !text
        .chars()
        .any(|c| c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}' | '\u{85}'))
    {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\u{2028}' | '\u{2029}' => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    // The rest (tabs, CR, escape sequences, bidi marks) as everywhere.
    terminal_safe(&out)
}

/// Writes to stdout. A closed pipe (`sessiontree tree … | head`) is not an
/// error; any other write failure is reported and exits as `storage` (7).
fn write_stdout(s: &str) -> i32 {
    write_stdout_with(|out| out.write_all(s.as_bytes()))
}

/// Runs a report's stream on standard output ([`write_stdout_with`]): a
/// command's error it meets ([`stream_error`]) is reported as that error.
fn write_stream(
    cli: &Cli,
    status: i32,
    stream: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> i32 {
    let mut command_error = None;
    let written = write_stdout_with(|out| match stream(out) {
        Err(e) if e.get_ref().is_some_and(|inner| inner.is::<Error>()) => {
            // What was written stays written; the error follows it.
            let _ = out.flush();
            command_error = e
                .into_inner()
                .and_then(|inner| inner.downcast::<Error>().ok());
            Ok(())
        }
        other => other,
    });
    match (command_error.map(|e| *e), written) {
        // The output closed (`| head`) while the command wrote it.
        (Some(Error::Io { source, .. }), _) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            status
        }
        (Some(e), _) => report_error(cli, &e),
        (None, exit::OK) => status,
        (None, failed) => failed,
    }
}

/// Runs `write` on standard output (buffered) and flushes it; a closed pipe
/// is success (`| head`), another failure a `storage` error.
fn write_stdout_with(write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) -> i32 {
    use std::io::Write;
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, unbuffered_stdout());
    match write(&mut stdout).and_then(|()| stdout.flush()) {
        Ok(()) => exit::OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("sessiontree: error [storage]: writing output: {e}");
            exit::STORAGE
        }
    }
}

/// Standard output, written straight to its descriptor: Rust's `Stdout` is a
/// line writer, which searches every buffer handed to it for its last
/// newline (that search was 4 % of printing a 10,000-message context, 9 M
/// instructions). Whatever `Stdout` holds is flushed first, so output stays
/// in order; without a descriptor to duplicate, `Stdout` it is.
pub fn unbuffered_stdout() -> Box<dyn std::io::Write> {
    use std::io::Write;
    let stdout = std::io::stdout();
    let _ = stdout.lock().flush();
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        if let Ok(fd) = stdout.as_fd().try_clone_to_owned() {
            return Box::new(std::fs::File::from(fd));
        }
    }
    Box::new(stdout)
}

/// The archive path: `--db`, else `SESSIONTREE_DB` (unless it names a team
/// archive), else the user's data directory.
pub fn archive_path(cli: &Cli) -> PathBuf {
    if let Some(p) = &cli.db {
        return p.clone();
    }
    if let Some(p) = std::env::var_os("SESSIONTREE_DB").filter(|p| {
        !p.is_empty() && !sessiontree::backend::postgres::is_postgres_url(&p.to_string_lossy())
    }) {
        return PathBuf::from(p);
    }
    sessiontree::layout::default_archive_path()
}

/// Opens the archive, which must exist: a command that only reads or
/// rewrites an archive never creates one at a mistyped path.
pub fn open_existing_archive(
    cli: &Cli,
) -> sessiontree::Result<sessiontree::backend::sqlite::Archive> {
    let path = archive_path(cli);
    if !path.is_file() {
        return Err(Error::ArchiveNotFound(path));
    }
    open_archive(cli)
}

/// Opens the archive to read it: never created (a missing one is
/// `not_found` naming the path), never written, readable in a read-only
/// directory.
pub fn open_archive_for_reading(
    cli: &Cli,
) -> sessiontree::Result<sessiontree::backend::sqlite::Archive> {
    sessiontree::backend::sqlite::Archive::open_read_only(archive_path(cli))
}

/// Opens (creating if needed) the archive.
pub fn open_archive(cli: &Cli) -> sessiontree::Result<sessiontree::backend::sqlite::Archive> {
    open_archive_at(cli, archive_path(cli))
}

/// Opens (creating if needed) the archive at `path` (the demo archive, say).
pub fn open_archive_at(
    cli: &Cli,
    path: PathBuf,
) -> sessiontree::Result<sessiontree::backend::sqlite::Archive> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    }
    // A migration that rewrites rows (a large archive from an older build)
    // shows a progress bar on a terminal; the bar appears only if one has
    // rows to rewrite (a new archive's migrations have none: no flash of 0/0).
    let mut bar: Option<indicatif::ProgressBar> = None;
    let archive = sessiontree::backend::sqlite::Archive::open_with_progress(
        path,
        cli.durability.into(),
        &mut |p| {
            if p.total == 0 && bar.is_none() {
                return;
            }
            let bar = bar.get_or_insert_with(|| {
                progress_bar(cli, "{msg} {bar:30} {pos}/{len} ({eta} left)")
            });
            bar.set_message(format!("migrating the archive to schema {}", p.version));
            bar.set_length(p.total);
            bar.set_position(p.done);
        },
    );
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    archive
}

/// A progress bar on stderr drawn with `template` (length 0 until the
/// command sets it), or a hidden one when nobody would watch it: stderr is
/// not a terminal, `--json`, or the command's `--quiet`. Every long command
/// makes its bar here, so they all go quiet by the same rules.
pub fn progress_bar(cli: &Cli, template: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let quiet = match &cli.command {
        Command::Import(args) => args.quiet,
        Command::Compact(args) => args.quiet,
        _ => false,
    };
    if quiet || cli.json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(0), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

#[cfg(test)]
mod terminal_tests {
    use super::terminal_safe;

    #[test]
    fn field_escapes_line_breaks_and_every_control() {
        use super::field;
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a\nb"), "a\\nb");
        assert_eq!(field("a\r\nb\tc"), "a\\r\\nb\\tc");
        assert_eq!(field("x\u{1b}[2Ky"), "x\\u{1b}[2Ky");
        assert_eq!(field("p\u{2028}q\u{85}"), "p\\u{2028}q\\u{85}");
        assert!(!field("a\nb\u{2029}c\u{b}").contains(['\n', '\u{2029}', '\u{b}']));
    }

    #[test]
    fn terminal_safe_escapes_controls_and_bidi_marks_and_keeps_the_rest() {
        assert_eq!(terminal_safe("plain\nlines"), "plain\nlines");
        assert_eq!(terminal_safe("a\tb\rc"), "a\\tb\\rc");
        assert_eq!(terminal_safe("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(terminal_safe("x\u{202e}y\u{2066}"), "x\\u{202e}y\\u{2066}");
        assert_eq!(terminal_safe("ünï… 中 \u{7f}"), "ünï… 中 \\u{7f}");
        assert_eq!(terminal_safe(""), "");
    }
}
