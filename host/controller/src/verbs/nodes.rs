//! `nodes` (`vd get nodes`): every node of this node's cluster, alive or
//! lost, with when it was last seen, its plugins and its replicas.

use std::collections::BTreeMap;
use voodu_api::{Failure, NodePluginRow, NodeRow, Response};

use voodu_model::placement::{NodeName, Placement};
use voodu_model::WorkloadId;
use voodu_plugin_abi::messages::WorkloadKind;
use voodu_store::rfc3339;

use super::store_failure;
use crate::Controller;

/// The cluster this controller is a node of, or the failure that says it
/// runs on its own.
fn cluster_of(controller: &Controller) -> Result<&crate::ClusterNode, Failure> {
    controller.cluster().ok_or_else(|| {
        Failure::new(
            "this controller runs on its own (SQLite in its root), not in a cluster — start it with `vd controller --cluster http://HOST:2379 --node NAME` to keep its state in etcd",
        )
    })
}

/// The statefulset ordinals placed on `node`: `statefulset/db/pg 0`.
fn statefulset_ordinals_on(
    placements: &BTreeMap<WorkloadId, Placement>,
    node: &NodeName,
) -> Vec<String> {
    placements
        .iter()
        .filter(|(workload, _)| workload.kind == WorkloadKind::Statefulset)
        .flat_map(|(workload, placement)| {
            placement
                .ordinals_on(node)
                .into_iter()
                .map(move |ordinal| format!("{workload} {ordinal}"))
        })
        .collect()
}

/// Declares lost node `name`'s host gone: its record goes, and the leader
/// moves what was placed on it. Names what moves.
pub(crate) fn remove(controller: &Controller, name: &str) -> Result<Response, Failure> {
    let cluster = cluster_of(controller)?;
    let node: NodeName = name
        .parse()
        .map_err(|error: voodu_model::placement::NodeNameError| Failure::new(error.to_string()))?;
    let placements = cluster.store.placements().map_err(store_failure)?;
    match cluster.store.remove_node(name).map_err(store_failure)? {
        Err(refused) => return Err(Failure::new(refused.to_string())),
        Ok(false) => {
            return Err(Failure::new(format!(
                "this cluster knows no node \"{name}\" — `vd get nodes` lists them"
            )))
        }
        Ok(true) => {}
    }
    let ordinals = statefulset_ordinals_on(&placements, &node);
    let deployment_replicas = placements
        .iter()
        .filter(|(workload, _)| workload.kind == WorkloadKind::Deployment)
        .map(|(_, placement)| placement.count_on(&node))
        .sum();
    tracing::warn!(
        node = name,
        ?ordinals,
        "node removed by an operator: what it held moves"
    );
    Ok(Response::NodeRemoved {
        name: name.to_owned(),
        ordinals,
        deployment_replicas,
    })
}

/// Lists the cluster's nodes.
pub(crate) fn handle(controller: &Controller) -> Result<Response, Failure> {
    let cluster = cluster_of(controller)?;
    let this_node = cluster.membership.name();
    let leader = cluster.store.leader().map_err(store_failure)?;
    let placements = cluster.store.placements().map_err(store_failure)?;
    let waiting = |name: &str| match name.parse::<NodeName>() {
        Ok(node) => statefulset_ordinals_on(&placements, &node),
        Err(_) => Vec::new(),
    };
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
            // A lost node's last report is stale: what it ran is not
            // known to run (its deployment replicas run elsewhere now).
            replicas: if node.alive { node.report.replicas } else { 0 },
            waiting_ordinals: if node.alive {
                Vec::new()
            } else {
                waiting(&node.name)
            },
            refused_plugins: node
                .report
                .refused_plugins
                .into_iter()
                .map(|refused| voodu_api::RefusedPluginRow {
                    name: refused.name,
                    version: refused.version,
                    reason: refused.reason,
                })
                .collect(),
            name: node.name,
        })
        .collect();
    Ok(Response::Nodes { nodes })
}
