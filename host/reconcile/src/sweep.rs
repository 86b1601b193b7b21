//! Workloads that are no longer stored: deleted ones, whose deletion (its
//! tombstone) the store keeps. A pass converges the containers made by the
//! time of the deletion to zero replicas with the deleted revision's
//! blocks, draining each within its budget (never removing without
//! draining), and only then are their blocks forgotten and their deletion
//! marked finished. Containers of a workload the store has no record of
//! are orphans ([`super::orphans`]): a sweep never removes them.

use super::converge::Target;
use super::orphans::Ownership;
use super::plan::Desired;
use super::{ReconcileError, Reconciler};
use voodu_model::core_spec::DEFAULT_DRAIN_TIMEOUT;
use voodu_model::WorkloadId;
use voodu_store::StateStore;

impl Reconciler {
    /// What a pass of a workload that is not stored works towards: no
    /// replicas of those made by its deletion, with the deleted revision's
    /// blocks; none at all of a workload the store has no record of.
    pub(super) fn removal_target(
        &self,
        store: &dyn StateStore,
        workload: &WorkloadId,
    ) -> Result<Target, ReconcileError> {
        self.forget_probes(workload);
        let Some(tombstone) = store.tombstone(workload)? else {
            return Ok(Target {
                revision: 0,
                desired: nothing(workload),
                core: None,
                blocks: Vec::new(),
                budget: DEFAULT_DRAIN_TIMEOUT,
                deleted: true,
                deletion_pending: false,
                ownership: Ownership::Unaccounted,
                unplaced: false,
                frozen: Default::default(),
            });
        };
        let budget = tombstone.core_spec.drain_budget();
        let blocks = tombstone.blocks;
        let deletion_pending = !tombstone.finished;
        Ok(Target {
            revision: 0,
            desired: nothing(workload),
            core: None,
            blocks,
            budget,
            deleted: true,
            deletion_pending,
            ownership: Ownership::DeletedAt(tombstone.deleted_ms),
            unplaced: false,
            frozen: Default::default(),
        })
    }

    /// The last replica of a deleted workload is gone: its plugins forget
    /// its blocks, and the deletion is marked finished.
    pub(super) async fn finish_deletion(
        &self,
        workload: &WorkloadId,
        target: &Target,
    ) -> Result<(), ReconcileError> {
        // No set queued for a block reaches its plugin after its forget.
        let heard = self.publisher.forget_workload(workload);
        self.tally.forget_workload(workload);
        if !target.deletion_pending && !heard.is_empty() {
            // Another node of the cluster finished the deletion first: this
            // node's plugins forget what they were told all the same.
            let plugins = self.plugins.clone();
            let id = workload.clone();
            let forgotten = tokio::task::spawn_blocking(move || {
                crate::forget::forget_heard(&id, &heard, &*plugins)
            })
            .await;
            if let Err(error) = forgotten {
                tracing::warn!(%error, "forgetting the blocks of a deleted workload panicked");
            }
        }
        if target.deletion_pending {
            let plugins = self.plugins.clone();
            let store = self.store.clone();
            let id = workload.clone();
            let blocks = target.blocks.clone();
            let forgotten = tokio::task::spawn_blocking(move || {
                crate::forget::forget_blocks(&id, &blocks, &*plugins, &*store)
            })
            .await;
            if let Err(error) = forgotten {
                tracing::warn!(%error, "forgetting the blocks of a deleted workload panicked");
            }
        }
        // What its failed steps kept goes with it: all of it, those a pass
        // under way when it was deleted made after the deletion too (a step
        // container holds nothing to keep, unlike a replica).
        self.clear_step_containers(workload, Ownership::Stored, None)
            .await;
        self.store.finish_deletion(workload)?;
        if let Err(error) = self.runtime.remove_network_if_unused().await {
            tracing::warn!(%error, "the voodu0 network could not be removed");
        }
        Ok(())
    }
}

/// No replicas at all.
fn nothing(workload: &WorkloadId) -> Desired {
    Desired {
        kind: workload.kind,
        replicas: 0,
        spec_hash: String::new(),
        max_surge: 1,
        ordinals: None,
        held: Default::default(),
    }
}
