//! `vd rollout status`: [`Request::Wait`] for one workload; its answer,
//! [`Response::Waited`](voodu_api::Response::Waited), is also what following
//! an apply, a delete or a rollback folds in.

use std::time::Duration;

use anstream::println;
use clap::Subcommand;

use voodu_api::{Request, WaitReport, WorkloadId};

use super::Call;
use crate::render::{diagnostic, ERROR, GOOD, WARNING};
use crate::{duration_ms, OutputArg};

/// `vd rollout`'s arguments: a subcommand.
#[derive(Debug, clap::Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    command: RolloutCommand,
}

/// What `vd rollout` does.
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Wait until the workload's containers match what is stored, showing
    /// each step; exits 1 if it fails or crash-loops.
    Status(StatusArgs),
}

/// `vd rollout status`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl.
    workload: WorkloadId,
    /// Stop waiting after this long, naming the step in progress.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    timeout: Option<Duration>,
    #[command(flatten)]
    output: OutputArg,
}

impl RolloutArgs {
    /// [`Request::Wait`] for the one workload, from its first step on.
    pub fn call(self) -> Call {
        let RolloutCommand::Status(StatusArgs {
            workload,
            timeout,
            output,
        }) = self.command;
        Call::new(
            Request::Wait {
                workloads: vec![workload],
                since_event: None,
                timeout_ms: timeout.map(duration_ms),
            },
            output.output,
        )
    }
}

/// Prints how each workload's wait ended, then the warnings and errors on
/// the way.
pub fn waited(report: &WaitReport) {
    for workload in &report.workloads {
        let style = match workload.phase {
            voodu_api::Phase::Converged | voodu_api::Phase::Gone => GOOD,
            _ => ERROR,
        };
        println!(
            "{}: {style}{}{style:#}",
            workload.workload,
            workload.phase.as_str()
        );
    }
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    for error in &report.errors {
        diagnostic("error", ERROR, error);
    }
}
