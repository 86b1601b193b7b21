//! The containers init and release steps leave behind. A step that
//! succeeds removes its own container; one that fails keeps it for
//! `docker logs`. So that failed retries do not pile up (a deployment's
//! replica ids are new on every attempt, so each attempt's container has a
//! name of its own), a workload keeps at most its **last failed** step
//! container:
//!
//! - a step that fails removes the workload's earlier finished ones;
//! - a replica that is created after its steps ran removes them all (the
//!   next success);
//! - a finished deletion removes them all (a pass under way when the
//!   workload was deleted may have made one after the deletion);
//! - those of a workload the store has no record of are orphans, listed by
//!   `vd get pods --orphans` and removed by `vd prune --orphans`.
//!
//! A step container that still runs (another replica's step, being
//! created now) is never touched here.

use voodu_model::WorkloadId;
use voodu_runtime::{InitOutcome, StepContainer};

use super::orphans::Ownership;
use super::{ReconcileError, Reconciler};

impl Reconciler {
    /// Removes the workload's finished step containers (exited or dead:
    /// never one another replica's step is still being created or run in)
    /// that `ownership` gives this pass, except the one named `keep`. It
    /// is housekeeping: a failure is logged, never the pass's (the next
    /// success tries again). Returns how many went.
    pub(super) async fn clear_step_containers(
        &self,
        workload: &WorkloadId,
        ownership: Ownership,
        keep: Option<&str>,
    ) -> usize {
        let finished = match self.runtime.step_containers(Some(workload)).await {
            Ok(finished) => finished,
            Err(error) => {
                tracing::warn!(%error, %workload, "the finished init containers could not be listed");
                return 0;
            }
        };
        let mut removed = 0;
        for step in finished
            .iter()
            .filter(|step| step.is_finished())
            .filter(|step| keep != Some(step.container_name.as_str()))
            .filter(|step| ownership.owns(&step.as_listed()))
        {
            match self.runtime.remove_step_container(step).await {
                Ok(()) => removed += 1,
                Err(error) => {
                    tracing::warn!(%error, %workload, container = %step.container_name, "a finished init container could not be removed");
                }
            }
        }
        removed
    }

    /// After a step ran: a failed one's container is the one the workload
    /// keeps, and the earlier ones go.
    pub(super) async fn keep_only_the_last_failed(
        &self,
        workload: &WorkloadId,
        outcome: &InitOutcome,
    ) {
        if let InitOutcome::Failed { container, .. } = outcome {
            self.clear_step_containers(workload, Ownership::Stored, Some(container))
                .await;
        }
    }

    /// The step containers of workloads the store has no record of, by
    /// workload (see [`super::orphans`]).
    pub(super) async fn orphan_step_containers(
        &self,
    ) -> Result<Vec<StepContainer>, ReconcileError> {
        let steps = self.runtime.step_containers(None).await?;
        self.unowned(steps, |step| step.as_listed())
    }
}
