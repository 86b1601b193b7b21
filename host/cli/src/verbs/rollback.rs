//! `vd rollback` ([`Request::Rollback`]) and `vd restart`
//! ([`Request::Restart`]), each followed as an apply; their answer is an
//! apply's, [`Response::Applied`](voodu_api::Response::Applied), printed by
//! [`super::apply::applied`].

use voodu_api::{Request, WorkloadId};

use super::Call;
use crate::{OutputArg, WaitArgs};

/// `vd rollback`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl.
    workload: WorkloadId,
    /// The revision to go back to; default: the one before the current.
    #[arg(long, value_name = "N")]
    to: Option<i64>,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

impl RollbackArgs {
    /// [`Request::Rollback`], to be followed unless `--no-wait`.
    pub fn call(self) -> Call {
        let mut call = Call::new(
            Request::Rollback {
                workload: self.workload,
                to: self.to,
            },
            self.output.output,
        );
        call.follow = self.wait.follow_up();
        call
    }
}

/// `vd restart`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RestartArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl.
    workload: WorkloadId,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

impl RestartArgs {
    /// [`Request::Restart`], to be followed unless `--no-wait`.
    pub fn call(self) -> Call {
        let mut call = Call::new(
            Request::Restart {
                workload: self.workload,
                release: false,
            },
            self.output.output,
        );
        call.follow = self.wait.follow_up();
        call
    }
}
