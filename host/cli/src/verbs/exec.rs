//! `vd exec`: [`Request::Exec`]. What the command writes is printed as it
//! comes, to standard output or standard error as it wrote it, by
//! [`WatchView::output`](crate::render::WatchView::output); its answer,
//! [`Response::Exited`](voodu_api::Response::Exited), is its exit code,
//! which `vd exec` exits with.

use std::process::ExitCode;

use std::io::{IsTerminal, Read, Write};

use voodu_api::client::{Client, RequestInput};
use voodu_api::{ExecInput, ExecSession, Request, TerminalSize};

use super::{workload_or_replica, Call};
use crate::{fail, OutputArg, EXIT_USAGE};

/// `vd exec`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl; or one replica,
    /// as voodu names it: its container (prod-esl.a1f3) or SCOPE/NAME.ID.
    #[arg(value_name = "KIND/SCOPE/NAME | POD")]
    target: String,
    /// The replica: its id, or a statefulset's ordinal; default: the
    /// oldest running one.
    #[arg(long, value_name = "ID")]
    replica: Option<String>,
    /// Keep standard input open: what `vd exec` reads is the command's
    /// standard input (`-i`; `-it` for a shell).
    #[arg(short = 'i', long = "interactive")]
    stdin: bool,
    /// Run the command in a terminal the size of this one, this one in raw
    /// mode meanwhile (`-t`, which implies `-i`); standard input must be a
    /// terminal.
    #[arg(short = 't', long = "tty")]
    tty: bool,
    /// A variable for the command, beside the container's (repeat it).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = key_value)]
    env: Vec<String>,
    /// The directory the command runs in.
    #[arg(short = 'w', long, value_name = "DIR")]
    workdir: Option<String>,
    /// The user it runs as: a name, a uid, or uid:gid.
    #[arg(short = 'u', long, value_name = "USER")]
    user: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
    #[command(flatten)]
    output: OutputArg,
}

impl ExecArgs {
    /// [`Request::Exec`], with a session for `-i` and `-t`.
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        let tty = if self.tty {
            if !std::io::stdin().is_terminal() {
                return Err(fail(
                    "vd exec: -t asks for a terminal, and standard input is not one — drop -t (vd exec -i ...) to pipe input to the command",
                    EXIT_USAGE,
                ));
            }
            let (cols, rows) = crossterm::terminal::size().unwrap_or((80, 24));
            Some(TerminalSize { cols, rows })
        } else {
            None
        };
        let session = (self.stdin || self.tty).then_some(ExecSession { tty });
        let (workload, named) = workload_or_replica(client, &self.target)
            .map_err(|message| fail(format!("vd exec: {message}"), EXIT_USAGE))?;
        Ok(Call::new(
            Request::Exec {
                workload,
                replica: self.replica.or(named),
                command: self.command,
                env: self.env,
                workdir: self.workdir,
                user: self.user,
                session,
            },
            self.output.output,
        ))
    }
}

/// One [`ExecInput`] as the line the controller reads.
fn input_line(input: &ExecInput) -> Vec<u8> {
    let mut line = serde_json::to_vec(input).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Sends what `vd exec -i` reads from standard input to the controller,
/// as [`ExecInput`] lines, a piece as it comes, then the end of input.
pub fn feed_stdin(mut socket: RequestInput) {
    let mut stdin = std::io::stdin().lock();
    let mut buffer = [0u8; 8192];
    loop {
        let read = match stdin.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let line = input_line(&ExecInput::Stdin(buffer[..read].to_vec()));
        if socket.write_all(&line).is_err() {
            return;
        }
    }
    let _ = socket.write_all(&input_line(&ExecInput::Eof));
}

/// As [`feed_stdin`], for `vd exec -t`: also sends this terminal's new
/// size each time it changes (SIGWINCH), so the command's terminal
/// follows it.
pub fn feed_terminal(socket: RequestInput) {
    let mut resizes = socket.clone();
    if let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGWINCH]) {
        std::thread::spawn(move || {
            for _ in signals.forever() {
                let Ok((cols, rows)) = crossterm::terminal::size() else {
                    continue;
                };
                let line = input_line(&ExecInput::Resize(TerminalSize { cols, rows }));
                if resizes.write_all(&line).is_err() {
                    return;
                }
            }
        });
    }
    feed_stdin(socket);
}

/// This terminal in raw mode (`vd exec -t`: every key goes to the
/// command, Ctrl-C too) until dropped.
pub struct RawTerminal;

impl RawTerminal {
    /// Puts the terminal in raw mode; `None` when it cannot be.
    pub fn enable() -> Option<RawTerminal> {
        crossterm::terminal::enable_raw_mode()
            .ok()
            .map(|()| RawTerminal)
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// `KEY=VALUE`, with a key.
fn key_value(text: &str) -> Result<String, String> {
    match text.split_once('=') {
        Some((key, _)) if !key.is_empty() => Ok(text.to_owned()),
        _ => Err(format!(
            "{text:?} is not KEY=VALUE — write -e LOG_LEVEL=debug"
        )),
    }
}
