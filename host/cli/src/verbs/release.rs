//! `vd release REF [history|run]`: voodu's release verb. `run` runs the
//! deployment's release `pre_command` and `command` now, whether or not
//! they ran for its spec, then replaces its replicas as `vd restart` does
//! and follows the rollout ([`Request::Restart`] with `release`); its
//! `post_command` runs once they are replaced. `history` (the default)
//! lists what its releases ran and how each ended: the workload's release
//! events ([`Request::Events`]).

use std::process::ExitCode;

use voodu_api::{Notice, Request, WorkloadId};

use super::Call;
use crate::{fail, OutputArg, WaitArgs, EXIT_USAGE};

/// What `vd release` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
enum ReleaseAction {
    /// What its releases ran, and how each ended.
    #[default]
    History,
    /// Run its release commands now, then replace its replicas.
    Run,
}

/// `vd release`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ReleaseArgs {
    /// The deployment: SCOPE/NAME as voodu writes it (prod/api), or
    /// KIND/SCOPE/NAME.
    #[arg(value_name = "SCOPE/NAME")]
    target: String,
    /// `history` (the default) or `run`.
    #[arg(value_enum, default_value_t = ReleaseAction::History)]
    action: ReleaseAction,
    /// How many of its recent events `history` looks through.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    output: OutputArg,
}

/// The workload `vd release` names: KIND/SCOPE/NAME, or SCOPE/NAME for a
/// deployment (voodu's releases are deployments').
fn released_workload(target: &str) -> Result<WorkloadId, String> {
    target
        .parse()
        .or_else(|_| format!("deployment/{target}").parse())
        .map_err(|error: voodu_model::WorkloadIdError| {
            format!("{error} — write SCOPE/NAME (vd release prod/api run) or KIND/SCOPE/NAME")
        })
}

/// Whether `notice` is one of a release's: its commands ran, or failed.
fn is_release_event(notice: &Notice) -> bool {
    matches!(
        notice.reason,
        voodu_model::EventReason::Release | voodu_model::EventReason::ReleaseFailed
    )
}

impl ReleaseArgs {
    /// `run`: [`Request::Restart`] with `release`, followed unless
    /// `--no-wait`; `history`: the workload's events, only its releases'.
    pub fn call(self) -> Result<Call, ExitCode> {
        let workload = released_workload(&self.target)
            .map_err(|message| fail(format!("vd release: {message}"), EXIT_USAGE))?;
        Ok(match self.action {
            ReleaseAction::Run => {
                let mut call = Call::new(
                    Request::Restart {
                        workload,
                        release: true,
                    },
                    self.output.output,
                );
                call.follow = self.wait.follow_up();
                call
            }
            ReleaseAction::History => {
                let mut call = Call::new(
                    Request::Events {
                        workload: Some(workload),
                        limit: self.limit,
                        follow: false,
                    },
                    self.output.output,
                );
                call.only_events = Some(is_release_event);
                call
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_names_a_deployment_as_voodu_writes_it_or_any_kind_whole() {
        assert_eq!(
            released_workload("prod/api").map(|id| id.to_string()),
            Ok("deployment/prod/api".to_owned())
        );
        assert_eq!(
            released_workload("statefulset/data/pg").map(|id| id.to_string()),
            Ok("statefulset/data/pg".to_owned())
        );
        let refused = released_workload("api").unwrap_err();
        assert!(refused.contains("vd release prod/api run"), "{refused}");
    }
}
