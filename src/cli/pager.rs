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
        Printer::open_at(json, display, None)
    }

    /// [`Printer::open`], with the pager opening where a line matches
    /// `pattern` (a `less` regular expression, e.g. `tree`'s `← leaf$`)
    /// instead of at the top, when the pager is `less` (the default, or a
    /// `$PAGER` that runs `less`): `less +/PATTERN -j-4`, so the line
    /// shows near the bottom of the screen with what leads to it above.
    pub fn open_at(json: bool, display: Display, pattern: Option<&str>) -> Printer {
        let terminal = std::io::stdout().is_terminal();
        let colour = !json && display.color.enabled();
        let mut pager = None;
        if !json && display.pager && terminal {
            pager = spawn_pager(pattern);
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

/// The `less` arguments that open it at the first line matching `pattern`,
/// that line 4 lines from the bottom of the screen.
fn start_args(pattern: Option<&str>) -> Vec<String> {
    match pattern {
        Some(p) => vec!["-j-4".to_owned(), format!("+/{p}")],
        None => Vec::new(),
    }
}

/// Whether a `$PAGER` command runs `less` (its first word is `less` or a
/// path to it), which takes [`start_args`].
fn runs_less(pager: &str) -> bool {
    pager
        .split_whitespace()
        .next()
        .is_some_and(|cmd| cmd.rsplit('/').next() == Some("less"))
}

/// Starts `$PAGER` (through the shell, as git does: it may carry options),
/// else `less -R`; a `less` is given [`start_args`] for `pattern`.
fn spawn_pager(pattern: Option<&str>) -> Option<Child> {
    let mut cmd = match std::env::var("PAGER") {
        Ok(p) if !p.trim().is_empty() => {
            let mut c = Command::new("sh");
            if runs_less(&p) && pattern.is_some() {
                // The arguments follow the user's own: `sh -c 'less -S "$@"' sh ARGS`.
                c.arg("-c").arg(format!("{p} \"$@\"")).arg("sh");
                c.args(start_args(pattern));
            } else {
                c.arg("-c").arg(p);
            }
            c
        }
        _ => {
            let mut c = Command::new("less");
            c.arg("-R");
            c.args(start_args(pattern));
            c
        }
    };
    if std::env::var_os("LESS").is_none() {
        cmd.env("LESS", "FRX");
    }
    cmd.stdin(Stdio::piped()).spawn().ok()
}

#[cfg(test)]
mod tests {
    use super::{runs_less, start_args};

    #[test]
    fn a_less_pager_opens_at_the_pattern() {
        assert!(runs_less("less") && runs_less("/usr/bin/less -S"));
        assert!(!runs_less("more") && !runs_less("bat --paging=always") && !runs_less(""));
        assert_eq!(start_args(Some("← leaf$")), ["-j-4", "+/← leaf$"]);
        assert!(start_args(None).is_empty());
    }
}
