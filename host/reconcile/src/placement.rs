//! Which of a workload's replicas this controller runs. On one host it
//! runs them all. In a cluster the leader places each replica on a node
//! (`voodu_model::placement`), and each node's reconciler converges only
//! its share, with the same passes: surge-first rollouts, probes, drains
//! and restarts, per node.

use std::collections::BTreeSet;

use voodu_model::WorkloadId;

/// The replicas of one workload this controller runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Share {
    /// All of them: one host, no cluster.
    All,
    /// This many of a deployment's replicas.
    Replicas(u32),
    /// These ordinals of a statefulset.
    Ordinals(BTreeSet<u32>),
    /// The leader has not placed the workload yet: nothing is created or
    /// removed until it has.
    Unplaced,
}

/// Where a controller learns its share of each workload.
pub trait ReplicaPlacement: Send + Sync + std::fmt::Debug {
    /// This controller's share of `workload`'s replicas now.
    fn share(&self, workload: &WorkloadId) -> Share;
}
