//! What a controller that is a node of a cluster asks of it. On one host
//! there is none: the controller runs every replica, and publishes its own
//! replicas only. In a cluster:
//!
//! - the leader places each replica on a node (`voodu_model::placement`),
//!   and each node's reconciler converges only its **share**, with the same
//!   passes (surge-first rollouts, probes, drains, restarts), per node;
//! - each node **advertises** its serving replicas through the store, and
//!   every node publishes to its own plugins the **union** over all nodes,
//!   so a balancer on any node balances over every replica in the cluster;
//! - before a node removes a replica, every live node's plugins **drain**
//!   it, not only its own ([`ClusterView::drain_on_peers`]), and each node
//!   drains what the others ask of it ([`crate::Reconciler::drain_for_peer`]).

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::BoxFuture;

use voodu_model::placement::NodeName;
use voodu_model::serving::ServingReplica;
use voodu_model::WorkloadId;

use crate::drain::DrainOutcome;

/// How the other nodes' plugins drained a replica this node removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerDrains {
    /// Each node that answered, with its plugins' outcome.
    pub answered: Vec<(NodeName, DrainOutcome)>,
    /// The live nodes that did not answer within the budget: counted as
    /// not drained.
    pub silent: Vec<NodeName>,
}

/// The replicas of one workload this controller runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Share {
    /// All of them: one host, no cluster.
    All,
    /// This many of a deployment's replicas.
    Replicas(u32),
    /// These ordinals of a statefulset.
    Ordinals(BTreeSet<u32>),
    /// The leader has not placed the workload yet, or the node is fenced:
    /// nothing is created or removed until it has.
    Unplaced,
}

/// A controller's view of its cluster.
pub trait ClusterView: Send + Sync + std::fmt::Debug {
    /// This node's name.
    fn node(&self) -> &NodeName;
    /// The address this node's published host ports are reached at from
    /// the other nodes (`--advertise`), if set.
    fn advertised_address(&self) -> Option<&str>;
    /// Whether this node starts the cronjobs' scheduled runs now: only the
    /// leader does, so each tick runs on exactly one node.
    fn schedules_cronjobs(&self) -> bool;
    /// This node's share of `workload`'s replicas now.
    fn share(&self, workload: &WorkloadId) -> Share;
    /// Tells the cluster which of this node's replicas of `workload` serve
    /// now (none: the node runs none that serve). Called with every
    /// listing; writes only what changed.
    fn advertise(&self, workload: &WorkloadId, serving: &[ServingReplica]);
    /// The serving replicas of `workload` on every other live node, as
    /// they advertised them.
    fn peers(&self, workload: &WorkloadId) -> Vec<ServingReplica>;
    /// Asks every other live node's plugins to drain `replica` of
    /// `workload`, and waits for their answers within `budget`.
    fn drain_on_peers(
        &self,
        workload: &WorkloadId,
        replica: &ServingReplica,
        budget: Duration,
    ) -> BoxFuture<'static, PeerDrains>;
    /// The context `build` (a stored workload's, built from source at
    /// apply) was built from, made ready to build: fetched from the node
    /// that keeps it (its `kept_by` first) over the node-to-node channel
    /// and checked against its `digest`, so this node builds the very
    /// image the applying node built; why not, naming the nodes asked.
    fn build_context(
        &self,
        build: &voodu_model::build::Build,
    ) -> BoxFuture<'static, Result<Vec<u8>, String>>;
}
