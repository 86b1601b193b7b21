//! Fencing: a cluster node whose lease may be about to expire stops its
//! statefulset replicas at once, so that if an operator then declares its
//! host gone (`vd node remove`, the only thing that moves a lost node's
//! ordinals), no ordinal runs in two containers. Deployment replicas go
//! on running: fail static.

use voodu_model::EventReason;
use voodu_plugin_abi::messages::WorkloadKind;
use voodu_store::EventLevel;

use crate::{event, Reconciler};

impl Reconciler {
    /// Stops every running statefulset replica of this controller, each
    /// with `stop_within_secs` to exit after SIGTERM, in parallel; how many
    /// were stopped. Their deaths are no crashes; a later pass (once the
    /// node holds its lease again) starts those still its own.
    pub async fn fence_statefulsets(&self, stop_within_secs: i32) -> usize {
        let replicas = match self.replicas(None).await {
            Ok(replicas) => replicas,
            Err(error) => {
                tracing::error!(%error, "the statefulset replicas to fence could not be listed");
                return 0;
            }
        };
        let fenced: Vec<_> = replicas
            .into_iter()
            .filter(|replica| {
                replica.workload.kind == WorkloadKind::Statefulset && replica.is_running()
            })
            .collect();
        let stops = fenced.iter().map(|replica| async move {
            self.lives.stopping(&replica.container_id);
            match self.runtime.stop(replica, stop_within_secs).await {
                Ok(()) => true,
                Err(error) => {
                    tracing::error!(%error, replica = %replica.container_name, "a fenced statefulset replica could not be stopped");
                    false
                }
            }
        });
        let stopped = futures_util::future::join_all(stops).await;
        let events: Vec<_> = fenced
            .iter()
            .zip(&stopped)
            .filter(|(_, stopped)| **stopped)
            .map(|(replica, _)| {
                event(
                    &replica.workload,
                    EventLevel::Warning,
                    EventReason::Fenced,
                    format!(
                        "stopped replica {}: this node's lease went unrenewed, and its ordinal may move to another node",
                        replica.replica_id
                    ),
                )
            })
            .collect();
        // Recorded if the store answers; a fenced node often cannot reach it.
        self.record(&events);
        events.len()
    }
}
