//! `vd delete`: [`Request::Delete`], followed until the replicas are gone,
//! and its answer, [`Response::Deleted`](voodu_api::Response::Deleted).

use anstream::println;

use voodu_api::{DeleteReport, Request, WorkloadId};

use super::Call;
use crate::render::{diagnostic, ERROR, GOOD, WARNING};
use crate::{OutputArg, WaitArgs};

/// `vd delete`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl.
    workload: WorkloadId,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

impl DeleteArgs {
    /// [`Request::Delete`], to be followed unless `--no-wait`.
    pub fn call(self) -> Call {
        let mut call = Call::new(
            Request::Delete {
                workload: self.workload,
            },
            self.output.output,
        );
        call.follow = self.wait.follow_up();
        call
    }
}

/// Prints the deleted workload and what its plugins forgot (or will,
/// once its replicas are gone), then the warnings and errors.
pub fn deleted(report: &DeleteReport) {
    let forgotten = match (report.forgotten.len(), report.pending) {
        (0, _) => String::new(),
        (_, false) => format!(
            "; forgotten by their plugins: {}",
            report.forgotten.join(", ")
        ),
        (_, true) => format!(
            "; its replicas are being drained and removed, then these are forgotten by their plugins: {}",
            report.forgotten.join(", ")
        ),
    };
    println!("{}: {GOOD}deleted{GOOD:#}{forgotten}", report.workload);
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    for error in &report.errors {
        diagnostic("error", ERROR, error);
    }
}
