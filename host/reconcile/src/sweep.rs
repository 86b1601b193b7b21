//! Workloads that are no longer stored: deleted ones, and orphans (this
//! controller still runs their containers, but a delete was interrupted
//! before it recorded its deletion). A pass converges them to zero replicas
//! with their last blocks, draining each within its last budget (never
//! removing without draining), and only then are their blocks forgotten
//! and their deletion marked finished.

use serde_json::json;

use super::converge::Target;
use super::plan::Desired;
use super::{ReconcileError, Reconciler};
use voodu_model::core_spec::{CoreSpec, DEFAULT_DRAIN_TIMEOUT};
use voodu_model::WorkloadId;
use voodu_store::Store;

impl Reconciler {
    /// What a pass of a workload that is not stored works towards: no
    /// replicas, with the blocks of its deletion or of its last revision.
    pub(super) fn removal_target(
        &self,
        store: &Store,
        workload: &WorkloadId,
    ) -> Result<Target, ReconcileError> {
        let deletion = store.deletion(workload)?;
        let deletion_pending = deletion.is_some();
        self.forget_probes(workload);
        let (core_spec, blocks) = match deletion {
            Some(deletion) => deletion,
            None => store
                .last_revision(workload)?
                .unwrap_or_else(|| (json!({}), Vec::new())),
        };
        // A stored spec that no longer reads still drains, with the default
        // budget: never remove without draining.
        let budget = match serde_json::from_value::<CoreSpec>(core_spec) {
            Ok(core) => core.drain_budget(),
            Err(error) => {
                tracing::warn!(%workload, %error, "the deleted workload's core spec does not read; draining with the default budget");
                DEFAULT_DRAIN_TIMEOUT
            }
        };
        Ok(Target {
            revision: 0,
            desired: Desired {
                kind: workload.kind,
                replicas: 0,
                spec_hash: String::new(),
                max_surge: 1,
            },
            core: None,
            blocks,
            budget,
            deleted: true,
            deletion_pending,
        })
    }

    /// The last replica of a deleted workload is gone: its plugins forget
    /// its blocks, and the deletion is marked finished.
    pub(super) async fn finish_deletion(
        &self,
        workload: &WorkloadId,
        target: &Target,
    ) -> Result<(), ReconcileError> {
        if target.deletion_pending {
            let plugins = self.plugins.clone();
            let store = self.store.clone();
            let id = workload.clone();
            let blocks = target.blocks.clone();
            let forgotten = tokio::task::spawn_blocking(move || {
                crate::forget::forget_blocks(&id, &blocks, &*plugins, &store)
            })
            .await;
            if let Err(error) = forgotten {
                tracing::warn!(%error, "forgetting the blocks of a deleted workload panicked");
            }
        }
        self.publisher.forget_workload(workload);
        self.store.lock().finish_deletion(workload)?;
        if let Err(error) = self.runtime.remove_network_if_unused().await {
            tracing::warn!(%error, "the voodu0 network could not be removed");
        }
        Ok(())
    }
}
