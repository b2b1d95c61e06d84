//! Streamed output (`tree`): lines written as they are made, to stdout or,
//! when stdout is a terminal, through a pager; optionally in colour.
//!
//! Every piece of text passes through [`terminal_safe`] here, so stored
//! control characters reach the terminal escaped whatever the caller forgot;
//! the only escape sequences written are the colours this module adds.

use super::terminal_safe;
use std::io::{BufWriter, IsTerminal, Write};
use std::process::{Child, Command, Stdio};

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset or empty.
    Auto,
    /// Always colour (even into a pipe).
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// Whether to colour stdout: `auto` colours a terminal unless `NO_COLOR`
    /// is set (and not empty).
    pub fn enabled(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        }
    }
}

/// How a streamed command wants its text shown.
#[derive(Debug, Clone, Copy)]
pub struct Display {
    /// Use a pager when stdout is a terminal (`--no-pager` clears it).
    pub pager: bool,
    /// `--color`.
    pub color: ColorChoice,
}

/// What a piece of a line is, for colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Uncoloured.
    Plain,
    /// The `*` of an entry on the active path.
    Active,
    /// The `← leaf` marker.
    Leaf,
    /// An entry's label.
    Label,
    /// A line about side branches.
    Fork,
    /// A `⋮ N more entries` line.
    Fold,
    /// A message's role.
    Role,
}

impl Style {
    /// The SGR sequence that starts this style (modest: one colour each).
    fn sgr(self) -> Option<&'static str> {
        match self {
            Style::Plain => None,
            Style::Active => Some("\x1b[33m"),
            Style::Leaf => Some("\x1b[1;32m"),
            Style::Label => Some("\x1b[36m"),
            Style::Fork => Some("\x1b[35m"),
            Style::Fold => Some("\x1b[2m"),
            Style::Role => Some("\x1b[34m"),
        }
    }
}

const RESET: &str = "\x1b[0m";

/// Where streamed output goes. Writing never fails loudly: a closed pipe (the
/// pager quit, `| head`) just stops the output ([`Printer::is_open`] turns
/// false), and any other failure is kept for [`Printer::finish`] to report.
pub struct Printer {
    out: BufWriter<Box<dyn Write>>,
    pager: Option<Child>,
    colour: bool,
    json: bool,
    closed: bool,
    failed: Option<std::io::Error>,
}

impl Printer {
    /// Opens stdout (JSON: always plain stdout), or a pager on a terminal:
    /// `$PAGER` through `sh -c`, else `less -R` (with `LESS=FRX` when `LESS`
    /// is unset, as git does, so a short tree prints and exits). If the pager
    /// cannot be started the text goes to stdout.
    pub fn open(json: bool, display: Display) -> Printer {
        let terminal = std::io::stdout().is_terminal();
        let colour = !json && display.color.enabled();
        let mut pager = None;
        if !json && display.pager && terminal {
            pager = spawn_pager();
        }
        let out: Box<dyn Write> = match pager.as_mut().and_then(|p: &mut Child| p.stdin.take()) {
            Some(stdin) => Box::new(stdin),
            None => super::unbuffered_stdout(),
        };
        Printer {
            out: BufWriter::with_capacity(1 << 16, out),
            pager,
            colour,
            json,
            closed: false,
            failed: None,
        }
    }

    /// Whether the command should write JSON ([`Printer::raw`]) rather than lines.
    pub fn json(&self) -> bool {
        self.json
    }

    /// Whether output still goes anywhere: false once the reader has gone or
    /// a write failed, so the command can stop early.
    pub fn is_open(&self) -> bool {
        !self.closed && self.failed.is_none()
    }

    /// Writes a piece of a line in `style`, its control characters escaped.
    pub fn piece(&mut self, style: Style, text: &str) {
        if text.is_empty() {
            return;
        }
        let safe = terminal_safe(text);
        match style.sgr().filter(|_| self.colour) {
            Some(sgr) => {
                self.write(sgr);
                self.write(&safe);
                self.write(RESET);
            }
            None => self.write(&safe),
        }
    }

    /// Ends the current line.
    pub fn end_line(&mut self) {
        self.write("\n");
    }

    /// Writes JSON text as it is (JSON escapes control characters itself).
    pub fn raw(&mut self, text: &str) {
        self.write(text);
    }

    fn write(&mut self, s: &str) {
        if !self.is_open() {
            return;
        }
        if let Err(e) = self.out.write_all(s.as_bytes()) {
            self.fail(e);
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            self.closed = true;
        } else {
            self.failed = Some(e);
        }
    }

    /// Flushes, closes the pager's input and waits for it to exit; returns
    /// the write failure, if any (a closed pipe is none).
    pub fn finish(mut self) -> Option<std::io::Error> {
        if self.is_open() {
            if let Err(e) = self.out.flush() {
                self.fail(e);
            }
        }
        let Printer {
            out, pager, failed, ..
        } = self;
        // Dropping the writer closes the pipe, so the pager sees the end.
        drop(out);
        if let Some(mut child) = pager {
            // The pager's own exit status is the user's business (`q` in less).
            let _ = child.wait();
        }
        failed
    }
}

/// Starts `$PAGER` (through the shell, as git does: it may carry options),
/// else `less -R`.
fn spawn_pager() -> Option<Child> {
    let mut cmd = match std::env::var("PAGER") {
        Ok(p) if !p.trim().is_empty() => {
            let mut c = Command::new("sh");
            c.arg("-c").arg(p);
            c
        }
        _ => {
            let mut c = Command::new("less");
            c.arg("-R");
            c
        }
    };
    if std::env::var_os("LESS").is_none() {
        cmd.env("LESS", "FRX");
    }
    cmd.stdin(Stdio::piped()).spawn().ok()
}
