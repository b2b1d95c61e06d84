//! `sessiontree browse`: the archive in a terminal UI (ratatui over
//! crossterm). The state and its keys ([`app`], with one module per
//! screen: [`list`], [`tree`], [`reader`]) are apart from drawing
//! ([`draw`]), so the tests drive the state without a terminal.
//!
//! Bounded work per screen: the list reads the archive a page at a time, as
//! far as the screen needs; a session's tree opens on a window of its
//! active path read up from the leaf, then is the tree index (shape, no
//! text, read on another thread) with only the rows on screen read; an
//! entry is read whole only to be read in full. The terminal is restored by a guard, on every way out:
//! an error, a panic, or `q`.

pub mod app;
pub mod draw;
pub mod list;
pub mod markdown;
pub mod reader;
pub mod tree;

#[cfg(test)]
mod tests;

use super::{Cli, Report};
use app::{App, Key};
use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::crossterm::{cursor, execute};
use serde_json::json;
use sessiontree::{Error, Result};
use std::io::IsTerminal;

/// Arguments of `browse`.
#[derive(Debug, Args)]
#[command(after_help = "\
Keys are shown at the bottom of each screen, and all of them with `?`.

Examples:
  sessiontree browse                         # the archive; / filters, Enter opens, q quits
  sessiontree browse --run                   # p (resume in pi) runs `pi --session FILE` on exit")]
pub struct BrowseArgs {
    /// After `p` (resume in pi), run `pi --session FILE` instead of printing it.
    #[arg(long)]
    pub run: bool,
}

/// The terminal in raw mode on the alternate screen, for as long as this
/// lives: dropping it (on return, error or unwinding panic) puts it back.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> Result<Self> {
        enable_raw_mode().map_err(|e| Error::io("entering raw mode", e))?;
        let guard = TerminalGuard;
        execute!(std::io::stdout(), EnterAlternateScreen, cursor::Hide)
            .map_err(|e| Error::io("switching to the alternate screen", e))?;
        Ok(guard)
    }
}

/// Puts the terminal back (idempotent: errors are ignored, there is no
/// one left to tell).
fn restore_terminal() {
    let _ = execute!(std::io::stdout(), LeaveAlternateScreen, cursor::Show);
    let _ = disable_raw_mode();
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// `browse`.
pub fn run(cli: &Cli, args: &BrowseArgs) -> Result<Report> {
    if super::db::postgres_url(cli).is_none() {
        let path = super::archive_path(cli);
        if !path.is_file() {
            return Err(Error::ArchiveNotFound(path));
        }
    }
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(Error::Usage(
            "browse needs a terminal (stdin and stdout); `ls`, `tree` and `search` print instead"
                .into(),
        ));
    }
    let archive = super::db::open(cli, super::db::Access::Write)?;
    let mut app = App::new(archive, sessiontree::layout::pi_sessions_dir())?;
    // A panic restores the terminal before its message is printed.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        hook(info);
    }));
    let looped = {
        let _guard = TerminalGuard::enter()?;
        event_loop(&mut app)
    };
    let _ = std::panic::take_hook();
    looped?;
    let Some(path) = app.resume else {
        return Ok(Report::new(json!({"resume": null}), String::new()));
    };
    let file = path.display().to_string();
    if args.run {
        let status = std::process::Command::new("pi")
            .arg("--session")
            .arg(&path)
            .status()
            .map_err(|e| Error::io("running pi", e))?;
        let mut report = Report::new(json!({"resume": file, "ran": true}), String::new());
        report.status = status.code().unwrap_or(1);
        return Ok(report);
    }
    let quoted = if file
        .chars()
        .all(|c| c.is_alphanumeric() || "/._-+:@".contains(c))
    {
        file.clone()
    } else {
        format!("'{}'", file.replace('\'', "'\\''"))
    };
    Ok(Report::new(
        json!({"resume": file, "ran": false}),
        format!("pi --session {quoted}\n"),
    ))
}

/// Draws and handles keys until the app quits; an action's error goes to
/// the status line, a terminal error ends the loop.
fn event_loop(app: &mut App) -> Result<()> {
    let backend = ratatui::backend::CrosstermBackend::new(std::io::stdout());
    let mut terminal =
        ratatui::Terminal::new(backend).map_err(|e| Error::io("opening the terminal", e))?;
    terminal
        .clear()
        .map_err(|e| Error::io("clearing the terminal", e))?;
    loop {
        let size = terminal
            .size()
            .map_err(|e| Error::io("reading the terminal's size", e))?;
        if let Err(e) = app.prepare(size.width as usize, size.height as usize) {
            app.status = format!("error [{}]: {e}", e.code());
        }
        terminal
            .draw(|f| draw::draw(f, app))
            .map_err(|e| Error::io("drawing", e))?;
        if app.quit {
            return Ok(());
        }
        if app.opening.is_some() {
            if let Err(e) = app.poll_open(false) {
                app.status = format!("error [{}]: {e}", e.code());
            }
            // Opened (or failed): draw it. Still reading: look again soon.
            let key_waiting = event::poll(std::time::Duration::from_millis(50))
                .map_err(|e| Error::io("reading a key", e))?;
            if app.opening.is_none() || !key_waiting {
                continue;
            }
        }
        let ev = event::read().map_err(|e| Error::io("reading a key", e))?;
        let Event::Key(k) = ev else { continue };
        if k.kind == KeyEventKind::Release {
            continue;
        }
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        let key = match k.code {
            KeyCode::Char(c) if ctrl => Key::Ctrl(c.to_ascii_lowercase()),
            KeyCode::Char(c) => Key::Char(c),
            KeyCode::Enter => Key::Enter,
            KeyCode::Esc => Key::Esc,
            KeyCode::Backspace => Key::Backspace,
            KeyCode::Tab => Key::Tab,
            KeyCode::Up => Key::Up,
            KeyCode::Down => Key::Down,
            KeyCode::Left => Key::Left,
            KeyCode::Right => Key::Right,
            KeyCode::PageUp => Key::PageUp,
            KeyCode::PageDown => Key::PageDown,
            KeyCode::Home => Key::Home,
            KeyCode::End => Key::End,
            _ => continue,
        };
        if let Err(e) = app.key(key) {
            app.status = format!("error [{}]: {e}", e.code());
        }
    }
}
