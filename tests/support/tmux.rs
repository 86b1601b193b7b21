//! A command in a real terminal: a detached tmux session of a given size,
//! its visible text read back and keys sent to it; killed on drop.

use std::process::Command;
use std::time::Duration;

/// A detached tmux session running one shell command.
pub struct Terminal {
    session: String,
}

fn tmux(args: &[&str]) -> bool {
    Command::new("tmux")
        .args(args)
        .status()
        .expect("tmux runs")
        .success()
}

impl Terminal {
    /// Starts `command` (a shell line) in a session named `session`, of
    /// `cols` x `rows`.
    pub fn start(session: &str, command: &str, cols: u16, rows: u16) -> Terminal {
        assert!(tmux(&[
            "new-session",
            "-d",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            "-s",
            session,
            command,
        ]));
        Terminal {
            session: session.to_owned(),
        }
    }

    /// The visible text of its pane.
    pub fn pane(&self) -> String {
        let output = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .expect("tmux runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Types `keys` (tmux's key names: `Enter`, `C-d`).
    pub fn send(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.session];
        args.extend_from_slice(keys);
        tmux(&args);
    }

    /// Resizes it.
    pub fn resize(&self, cols: u16, rows: u16) {
        tmux(&[
            "resize-window",
            "-t",
            &self.session,
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
        ]);
    }

    /// Waits up to `within` for its pane to show `text`, and returns the
    /// pane; fails the test with `what` and the pane otherwise.
    pub fn wait_for(&self, text: &str, within: Duration, what: &str) -> String {
        voodu_tests::wait_until(within, Duration::from_millis(100), || {
            let pane = self.pane();
            if pane.contains(text) {
                Ok(pane)
            } else {
                Err(format!("{what}: {pane}"))
            }
        })
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .status();
    }
}
