//! `vd stop` and `vd start`, as voodu has them. The caller records the
//! change in the store first (`StateStore::freeze`), so a pass never
//! starts a frozen replica again nor replaces it: it keeps its slot
//! ([`crate::converge`]'s `Target::unfrozen`).
//!
//! - [`Reconciler::stop_replicas`]: each replica is withdrawn from every
//!   block's set, drained, then stopped; its container (and a
//!   statefulset's volumes) stays.
//! - [`Reconciler::start_replicas`]: each stopped container is removed, and
//!   the workload's pass creates its replica anew from the current spec
//!   and config (a statefulset ordinal keeps its number and volumes), as
//!   voodu's `vd start` does.

use std::collections::BTreeSet;

use voodu_model::WorkloadId;
use voodu_runtime::Replica;

use super::converge::Retire;
use super::{ReconcileError, Reconciler, STOP_TIMEOUT_SECS};

impl Reconciler {
    /// Withdraws `replicas` of `workload` from every block's set, drains
    /// them, and stops them, keeping their containers; then queues a pass.
    pub async fn stop_replicas(
        &self,
        workload: &WorkloadId,
        replicas: &[Replica],
    ) -> Result<(), ReconcileError> {
        let Some(stored) = self.store.workload(workload)? else {
            return Ok(());
        };
        let stopping: BTreeSet<&str> = replicas
            .iter()
            .map(|replica| replica.replica_id.as_str())
            .collect();
        // The sets without them, before any drain.
        let listed = self.live_replicas(Some(workload)).await?;
        let staying: Vec<Replica> = listed
            .into_iter()
            .filter(|replica| !stopping.contains(replica.replica_id.as_str()))
            .collect();
        let tickets = self.offer_serving(
            workload,
            &stored.blocks,
            &staying,
            std::time::Instant::now(),
        );
        self.await_publishes(tickets).await;
        let budget = stored.core_spec.drain_budget();
        for replica in replicas.iter().filter(|replica| replica.is_running()) {
            self.retire_replica(workload, &stored.blocks, replica, budget, Retire::Stop)
                .await?;
        }
        self.enqueue(workload);
        Ok(())
    }

    /// Removes the stopped containers of `replicas` of `workload` (thawed
    /// in the store by the caller), and queues the pass that creates them
    /// anew.
    pub async fn start_replicas(
        &self,
        workload: &WorkloadId,
        replicas: &[Replica],
    ) -> Result<(), ReconcileError> {
        for replica in replicas.iter().filter(|replica| !replica.is_running()) {
            self.lives.removing(&replica.container_id);
            self.runtime.remove(replica, STOP_TIMEOUT_SECS).await?;
            self.lives.removed(&replica.container_id);
            self.forget_listed(&replica.container_id);
        }
        self.enqueue(workload);
        Ok(())
    }
}
