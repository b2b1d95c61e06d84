//! A real terminal for the tests of what a user sees: tmux runs the binary in
//! a pane of a known size, the test types keys into it and reads the screen
//! back. Skipped without tmux, unless `SESSIONTREE_REQUIRE_TMUX` is set.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A tmux server of its own (its socket named for this test), with one pane.
pub(crate) struct Pane {
    socket: String,
}

impl Pane {
    /// Starts `script` in a `columns`×`rows` pane; `None` without tmux.
    pub(crate) fn start(name: &str, script: &str, columns: u16, rows: u16) -> Option<Pane> {
        if Command::new("tmux").arg("-V").output().is_err() {
            assert!(
                std::env::var_os("SESSIONTREE_REQUIRE_TMUX").is_none(),
                "tmux is required (SESSIONTREE_REQUIRE_TMUX is set)"
            );
            eprintln!("skipped: tmux is not installed");
            return None;
        }
        let pane = Pane {
            socket: format!("sessiontree-{name}-{}", std::process::id()),
        };
        let started = pane.tmux(&[
            "new-session",
            "-d",
            "-x",
            &columns.to_string(),
            "-y",
            &rows.to_string(),
            script,
        ]);
        assert!(started.status.success(), "{started:?}");
        Some(pane)
    }

    pub(crate) fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux")
    }

    /// What the pane shows now.
    pub(crate) fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-J"]).stdout).into_owned()
    }

    /// The pane's whole history, wrapped lines joined.
    pub(crate) fn history(&self) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-p", "-J", "-S", "-", "-E", "-"])
                .stdout,
        )
        .into_owned()
    }

    /// Waits (up to 30 s: a loaded machine runs the suites in parallel) until the screen shows `text`; returns the screen.
    pub(crate) fn wait_for(&self, text: &str) -> String {
        self.wait_until_shown(text, Pane::screen)
    }

    /// Like [`Pane::wait_for`], over the whole history.
    pub(crate) fn wait_for_in_history(&self, text: &str) -> String {
        self.wait_until_shown(text, Pane::history)
    }

    fn wait_until_shown(&self, text: &str, read: fn(&Pane) -> String) -> String {
        let start = Instant::now();
        loop {
            let screen = read(self);
            if screen.contains(text) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the screen never showed {text:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types keys (tmux key names: `Enter`, `Escape`, `BSpace`, `Up`, or text).
    pub(crate) fn keys(&self, keys: &[&str]) {
        for k in keys {
            let sent = self.tmux(&["send-keys", k]);
            assert!(sent.status.success(), "{sent:?}");
            // One key at a time, as typed: each is drawn before the next.
            std::thread::sleep(Duration::from_millis(60));
        }
    }

    /// Types text literally, a character at a time.
    pub(crate) fn type_text(&self, text: &str) {
        for c in text.chars() {
            let sent = self.tmux(&["send-keys", "-l", &c.to_string()]);
            assert!(sent.status.success(), "{sent:?}");
            std::thread::sleep(Duration::from_millis(40));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}
