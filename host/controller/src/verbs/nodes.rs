//! `nodes` (`vd get nodes`): every node of this node's cluster, alive or
//! lost, with when it was last seen, its plugins and its replicas.

use voodu_api::{Failure, NodePluginRow, NodeRow, Response};
use voodu_store::rfc3339;

use super::store_failure;
use crate::Controller;

/// Lists the cluster's nodes.
pub(crate) fn handle(controller: &Controller) -> Result<Response, Failure> {
    let Some(cluster) = controller.cluster() else {
        return Err(Failure::new(
            "this controller runs on its own (SQLite in its root), not in a cluster — start it with `vd controller --cluster http://HOST:2379 --node NAME` to keep its state in etcd",
        ));
    };
    let this_node = cluster.membership.name();
    let leader = cluster.store.leader().map_err(store_failure)?;
    let nodes = cluster
        .store
        .nodes()
        .map_err(store_failure)?
        .into_iter()
        .map(|node| NodeRow {
            this_node: node.name == this_node,
            leader: node.alive && leader.as_deref() == Some(node.name.as_str()),
            alive: node.alive,
            started_at: rfc3339(node.started_ms),
            last_seen: rfc3339(node.last_seen_ms),
            plugins: node
                .report
                .plugins
                .into_iter()
                .map(|plugin| NodePluginRow {
                    name: plugin.name,
                    version: plugin.version,
                    abi: plugin.abi,
                })
                .collect(),
            replicas: node.report.replicas,
            name: node.name,
        })
        .collect();
    Ok(Response::Nodes { nodes })
}
