//! `vd exec`: [`Request::Exec`]. What the command writes is printed as it
//! comes, to standard output or standard error as it wrote it, by
//! [`WatchView::output`](crate::render::WatchView::output); its answer,
//! [`Response::Exited`](voodu_api::Response::Exited), is its exit code,
//! which `vd exec` exits with.

use std::process::ExitCode;

use voodu_api::client::Client;
use voodu_api::Request;

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
    #[arg(short = 'r', long, value_name = "ID")]
    replica: Option<String>,
    /// An interactive terminal (`-it`): not offered by this vd yet.
    #[arg(short = 'i', long = "stdin")]
    stdin: bool,
    /// A terminal: not offered by this vd yet.
    #[arg(short = 't', long = "tty")]
    tty: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
    #[command(flatten)]
    output: OutputArg,
}

impl ExecArgs {
    /// [`Request::Exec`]; `-i` and `-t` are refused with what to use.
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        if self.stdin || self.tty {
            return Err(fail(
                "vd exec: an interactive terminal (-i, -t) is not offered by this vd yet — run a command with its arguments (vd exec KIND/SCOPE/NAME -- sh -c '...'), or docker exec -it with the container vd get pods names",
                EXIT_USAGE,
            ));
        }
        let (workload, named) = workload_or_replica(client, &self.target)
            .map_err(|message| fail(format!("vd exec: {message}"), EXIT_USAGE))?;
        Ok(Call::new(
            Request::Exec {
                workload,
                replica: self.replica.or(named),
                command: self.command,
            },
            self.output.output,
        ))
    }
}
