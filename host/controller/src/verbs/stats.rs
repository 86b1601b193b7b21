//! `stats` (`vd stats`): what each replica uses now, of one workload or
//! all: CPU, memory and network from the engine's stats API (every running
//! replica asked at once, so the answer takes about the engine's one-second
//! sample however many there are), and the restarts the controller made;
//! on every node of a cluster ([`crate::peers`]).

use voodu_api::peer::PeerRequest;
use voodu_api::{Failure, ReplicaStats, Response, Usage};
use voodu_model::WorkloadId;

use crate::{block_on, no_replicas, peers, Controller};

/// The replicas of `workload`, or all, with their usage, on every node.
pub(crate) fn handle(
    controller: &Controller,
    workload: Option<&WorkloadId>,
    filter: &voodu_api::WorkloadFilter,
) -> Result<Response, Failure> {
    let (mut replicas, unanswered) = peers::with_every_node(
        controller,
        here(controller, workload)?,
        PeerRequest::Stats {
            workload: workload.cloned(),
        },
        |answer| match answer {
            Response::Stats { replicas, .. } => Some(replicas),
            _ => None,
        },
        |a, b| (&a.workload, &a.replica_id, &a.node).cmp(&(&b.workload, &b.replica_id, &b.node)),
    )?;
    replicas.retain(|replica| filter.keeps(&replica.workload));
    Ok(Response::Stats {
        replicas,
        unanswered,
    })
}

/// This node's own replicas of `workload`, or all, with their usage.
pub(crate) fn here(
    controller: &Controller,
    workload: Option<&WorkloadId>,
) -> Result<Vec<ReplicaStats>, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Err(no_replicas());
    };
    let replicas = block_on(reconciler.live_replicas(workload))
        .map_err(|error| Failure::new(error.to_string()))?;
    let usages = block_on(futures_util::future::join_all(replicas.iter().map(
        |replica| async move {
            if !replica.is_running() {
                return None;
            }
            match reconciler.usage(replica).await {
                Ok(usage) => Some(usage),
                Err(error) => {
                    tracing::debug!(%error, replica = %replica.container_name, "no stats for a replica");
                    None
                }
            }
        },
    )));
    let node = controller.node_name();
    Ok(replicas
        .iter()
        .zip(usages)
        .map(|(replica, usage)| ReplicaStats {
            workload: replica.workload.clone(),
            replica_id: replica.replica_id.clone(),
            node: node.clone(),
            state: replica.state.clone(),
            restarts: replica.restarts,
            usage: usage.map(|usage| Usage {
                cpu_percent: usage.cpu_percent,
                memory_bytes: usage.memory_bytes,
                memory_limit_bytes: usage.memory_limit_bytes,
                network_rx_bytes: usage.network_rx_bytes,
                network_tx_bytes: usage.network_tx_bytes,
            }),
        })
        .collect())
}
