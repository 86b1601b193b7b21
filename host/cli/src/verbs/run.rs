//! `vd run`: [`Request::Run`]; with a command after the target, voodu's
//! one-shot exec in a running replica ([`Request::Exec`]). A job (or a cronjob, out of its schedule)
//! runs once on the controller's node; what it writes is printed as it
//! comes, to standard output or standard error as it wrote it, and `vd
//! run` exits with its exit code (124 when it ran past its `timeout`, as
//! `timeout(1)` does), after one line on standard error that names its
//! container, kept for `vd logs`.

use std::process::ExitCode;

use voodu_api::{Request, WorkloadId};
use voodu_model::workload::parse_kind;

use voodu_api::client::Client;

use super::{workload_or_replica, Call};
use crate::{fail, OutputArg, EXIT_USAGE};

/// The exit code of a run killed at its timeout, as `timeout(1)` gives.
pub const EXIT_TIMED_OUT: u8 = 124;

/// `vd run`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job: SCOPE/NAME as voodu writes it (prod/seed), or
    /// KIND/SCOPE/NAME (job/prod/seed, cronjob/data/backup).
    #[arg(value_name = "SCOPE/NAME")]
    target: String,
    /// voodu's one-shot command: run it in a running replica of the
    /// workload (or the replica named), as `vd exec` does, instead of
    /// running a job.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<String>,
    #[command(flatten)]
    output: OutputArg,
}

impl RunArgs {
    /// `vd run TARGET`: the job `target` names, run once.
    pub(crate) fn job(target: String, output: OutputArg) -> RunArgs {
        RunArgs {
            target,
            command: Vec::new(),
            output,
        }
    }

    /// [`Request::Run`]; with a command, [`Request::Exec`] in a replica.
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        if !self.command.is_empty() {
            let (workload, replica) = workload_or_replica(client, &self.target)
                .map_err(|message| fail(format!("vd run: {message}"), EXIT_USAGE))?;
            let command = match self.command.first().map(String::as_str) {
                Some("--") => self.command[1..].to_vec(),
                _ => self.command,
            };
            return Ok(Call::new(
                Request::Exec {
                    workload,
                    replica,
                    command,
                    env: Vec::new(),
                    workdir: None,
                    user: None,
                    session: None,
                },
                self.output.output,
            ));
        }
        let (scope, name, kind) = if let Ok(workload) = self.target.parse::<WorkloadId>() {
            (workload.scope, workload.name, Some(workload.kind))
        } else {
            match self.target.split('/').collect::<Vec<_>>().as_slice() {
                [scope, name] if !scope.is_empty() && !name.is_empty() && parse_kind(scope).is_none() => {
                    ((*scope).to_owned(), (*name).to_owned(), None)
                }
                _ => {
                    return Err(fail(
                        format!(
                            "vd run: {:?} names no job — write SCOPE/NAME (vd run prod/seed) or KIND/SCOPE/NAME (vd run job/prod/seed)",
                            self.target
                        ),
                        EXIT_USAGE,
                    ))
                }
            }
        };
        Ok(Call::new(
            Request::Run { scope, name, kind },
            self.output.output,
        ))
    }
}

/// The line `vd run` ends with, on standard error.
pub fn ended(workload: &WorkloadId, run_id: &str, container: &str, ending: &str) {
    eprintln!("{workload}: run {run_id} {ending} — vd logs {container} shows its output again");
}

/// The exit code of a run: its own (its low byte, as a shell gives it),
/// or [`EXIT_TIMED_OUT`] when it was killed at its timeout.
pub fn exit_code(exit_code: Option<i64>) -> ExitCode {
    match exit_code {
        Some(code) => ExitCode::from((code & 0xff) as u8),
        None => ExitCode::from(EXIT_TIMED_OUT),
    }
}
