//! `pods` (`vd get pods`): the live replicas, of one workload or all, on
//! every node of a cluster ([`crate::peers`]); with `--orphans`, the
//! containers on this node that no stored workload accounts for
//! ([`crate::orphans::list`]).

use voodu_api::peer::PeerRequest;
use voodu_api::{Failure, Replica, Response, Unanswered};
use voodu_model::WorkloadId;

use crate::{block_on, no_replicas, orphans, peers, wire, Controller};

/// Lists the replicas of `workload`, or all, on every node; or this
/// node's orphans.
pub(crate) fn handle(
    controller: &Controller,
    workload: Option<&WorkloadId>,
    orphans_only: bool,
) -> Result<Response, Failure> {
    if orphans_only {
        let Some(reconciler) = controller.reconciler() else {
            return Err(no_replicas());
        };
        return orphans::list(reconciler, workload);
    }
    let (replicas, unanswered) = everywhere(controller, workload)?;
    Ok(Response::Pods {
        replicas,
        unanswered,
    })
}

/// The replicas of `workload`, or all, on every node of the cluster (on
/// this one alone without a cluster), and the nodes left out.
pub(crate) fn everywhere(
    controller: &Controller,
    workload: Option<&WorkloadId>,
) -> Result<(Vec<Replica>, Vec<Unanswered>), Failure> {
    peers::with_every_node(
        controller,
        here(controller, workload)?,
        PeerRequest::Pods {
            workload: workload.cloned(),
        },
        |answer| match answer {
            Response::Pods { replicas, .. } => Some(replicas),
            _ => None,
        },
        |a, b| (&a.workload, &a.replica_id, &a.node).cmp(&(&b.workload, &b.replica_id, &b.node)),
    )
}

/// This node's own replicas of `workload`, or all, each naming this node
/// in a cluster.
pub(crate) fn here(
    controller: &Controller,
    workload: Option<&WorkloadId>,
) -> Result<Vec<Replica>, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Err(no_replicas());
    };
    let replicas = block_on(reconciler.replicas_and_runs(workload))
        .map_err(|error| Failure::new(error.to_string()))?;
    let node = controller.node_name();
    Ok(replicas
        .iter()
        .map(|replica| Replica {
            node: node.clone(),
            ..wire::replica(replica)
        })
        .collect())
}
