//! This node's part in its cluster (`vd controller --cluster`), while it
//! runs. Its tasks, each with one job:
//!
//! - **plugins** ([`follow_plugins`]): a plugin installed cluster-wide on
//!   any node is installed on this one as soon as its record is stored.
//! - **drains** ([`drain_round`], [`answer_drains`]): before this node
//!   removes a replica, every other live node's plugins drain it too,
//!   within the same budget; this node drains what the others ask of it.
//! - **report** ([`report`]): every [`REPORT_EVERY`], the node tells the
//!   cluster its plugins, how many replicas it runs and which statefulset
//!   ordinals it holds a container for.
//! - **lead** ([`lead`]): the node campaigns for `leader` under its own
//!   lease; while it leads, it places every stored workload's replicas on
//!   the live nodes (`voodu_model::placement::place`) whenever a workload
//!   or a node changes, and at least every second.
//! - **workloads** ([`follow_workloads`]): a workload another node applied,
//!   rolled back or deleted gets a pass on this node as soon as it is
//!   stored, so every node rolls its share at once.
//! - **follow** ([`follow_placements`], [`follow_endpoints`]): the node
//!   keeps the placements and the other nodes' serving replicas in
//!   [`NodeView`], which its reconciler asks for its share of each
//!   workload and for the other nodes' replicas to publish beside its own;
//!   it queues a pass of every workload whose share changed, and offers
//!   every block of a workload whose peers changed their new union. The
//!   reconciler advertises the node's own serving replicas through it,
//!   under the node's lease, so they vanish with it.
//! - **guard** ([`guard_the_lease`]): a node whose lease has gone
//!   unrenewed for two thirds of its TTL may be cut off from the store: it
//!   **fences** itself. Its statefulset replicas are stopped before the
//!   lease can expire (at most one container per ordinal, ever), and its
//!   passes change nothing (fail static: deployment replicas and plugins go
//!   on serving the last sets they had). Once the lease is renewed again
//!   (or the node has joined again under a new one), it converges to the
//!   current placement.
//! - **renewals** ([`tell_the_supervisor_the_renewals`]): under a
//!   supervisor, it hears how fresh the lease is; if no worker renews it
//!   for two thirds of the TTL, the supervisor stops the node's statefulset
//!   replicas itself.
//! - **lease** ([`tell_the_supervisor_the_lease`]): under a supervisor,
//!   the node's lease is told to it, so that the next worker (an
//!   upgrade's, or one replacing a worker that died) takes the node's
//!   place over instead of joining anew; an upgrade's old worker stops
//!   every task here when it hands over ([`hand_over`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use voodu_model::placement::{place, NodeName, NodeStanding, Placement, PlacementInput};
use voodu_model::serving::ServingReplica;
use voodu_model::WorkloadId;
use voodu_plugin_abi::messages::WorkloadKind;
use voodu_reconcile::cluster::{ClusterView, PeerDrains, Share};
use voodu_reconcile::drain::DrainOutcome;
use voodu_store::StoreError;
use voodu_store_etcd::{
    EtcdStore, HeldOrdinals, Membership, NodeRecord, Renewal, Standing, Watched,
};

use crate::Controller;

/// How often a node tells the cluster what it runs.
pub const REPORT_EVERY: Duration = Duration::from_secs(2);
/// How often the leader places every workload even when nothing was heard
/// to change (a node's plugins, a lost node's grace running out).
const PLACE_EVERY: Duration = Duration::from_secs(1);
/// How often a node reads every placement even when no watch fired.
const FOLLOW_EVERY: Duration = Duration::from_secs(5);
/// How often a node checks how long ago its lease was renewed.
const GUARD_EVERY: Duration = Duration::from_millis(100);
/// After how long without a renewal of its lease a node fences itself: two
/// thirds of the TTL, so its statefulset replicas are stopped before the
/// lease can expire.
pub(crate) fn fence_after(ttl: Duration) -> Duration {
    ttl * 2 / 3
}

/// How long a fenced statefulset replica gets to exit after SIGTERM.
pub const FENCE_STOP_SECS: i32 = 1;

/// The placements as this node last read them, and its share of each.
#[derive(Debug)]
struct PlacementCache {
    node: NodeName,
    /// Every placement, once read; `None` before the first read.
    placements: RwLock<Option<BTreeMap<WorkloadId, Placement>>>,
}

impl PlacementCache {
    fn new(node: NodeName) -> PlacementCache {
        PlacementCache {
            node,
            placements: RwLock::new(None),
        }
    }

    /// Takes in every placement as read now; the workloads whose share on
    /// this node changed.
    fn update(&self, placements: BTreeMap<WorkloadId, Placement>) -> Vec<WorkloadId> {
        let mut held = self.placements.write();
        let before = held.take().unwrap_or_default();
        let share = |placement: Option<&Placement>| {
            placement.map(|placement| {
                (
                    placement.count_on(&self.node),
                    placement.ordinals_on(&self.node),
                )
            })
        };
        let changed = changed_keys(&before, &placements, |workload| {
            share(before.get(workload)) != share(placements.get(workload))
        });
        *held = Some(placements);
        changed
    }

    /// This node's share of `workload`: unplaced until the leader placed it.
    fn share(&self, workload: &WorkloadId) -> Share {
        let placements = self.placements.read();
        let Some(placement) = placements.as_ref().and_then(|all| all.get(workload)) else {
            return Share::Unplaced;
        };
        match workload.kind {
            WorkloadKind::Job | WorkloadKind::Cronjob => Share::Replicas(0),
            WorkloadKind::Deployment => Share::Replicas(placement.count_on(&self.node)),
            WorkloadKind::Statefulset => Share::Ordinals(placement.ordinals_on(&self.node)),
        }
    }
}

/// This node's view of its cluster (see the module doc): what its
/// reconciler asks in a cluster.
#[derive(Debug)]
pub struct NodeView {
    node: NodeName,
    /// The address the other nodes reach this node's published ports at.
    advertise: Option<String>,
    store: Arc<EtcdStore>,
    standing: tokio::sync::watch::Receiver<Standing>,
    /// When the lease was last renewed, and after how long without a
    /// renewal the node acts on nothing (two thirds of the TTL).
    renewal: Renewal,
    fence_after: Duration,
    placements: PlacementCache,
    /// The other nodes' serving replicas, by workload.
    peers: RwLock<BTreeMap<WorkloadId, Vec<ServingReplica>>>,
    /// What this node last advertised of each workload, under which lease.
    advertised: Mutex<HashMap<WorkloadId, (i64, Vec<ServingReplica>)>>,
    /// The node fenced itself (see the module doc): its passes change
    /// nothing.
    fenced: AtomicBool,
    /// The node leads the cluster now: it places the replicas, and it
    /// alone starts the cronjobs' scheduled runs.
    leading: AtomicBool,
    /// Where the node fetches the build contexts of images it lacks.
    contexts: crate::peers::ContextSource,
}

impl NodeView {
    /// The view of node `node` (`advertise`: its `--advertise`), none of
    /// the cluster read yet.
    pub(crate) fn new(
        node: NodeName,
        advertise: Option<String>,
        store: Arc<EtcdStore>,
        membership: &Membership,
        contexts: crate::peers::ContextSource,
    ) -> NodeView {
        NodeView {
            contexts,
            standing: membership.standing(),
            renewal: membership.renewal(),
            fence_after: fence_after(membership.ttl()),
            placements: PlacementCache::new(node.clone()),
            node,
            advertise,
            store,
            peers: RwLock::new(BTreeMap::new()),
            advertised: Mutex::new(HashMap::new()),
            fenced: AtomicBool::new(false),
            leading: AtomicBool::new(false),
        }
    }

    /// Whether this node leads the cluster now, unfenced: only then does
    /// it start the cronjobs' scheduled runs.
    pub fn leads(&self) -> bool {
        self.leading.load(Ordering::SeqCst) && !self.is_fenced()
    }

    /// Whether the node is fenced now, or its lease has gone unrenewed
    /// long enough that it must act on nothing (a node frozen past its
    /// lease finds it so before its first step, before the guard fences
    /// it).
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst) || self.renewal.ago() > self.fence_after
    }

    /// Takes in every placement as read now; the workloads whose share on
    /// this node changed.
    fn update_placements(&self, placements: BTreeMap<WorkloadId, Placement>) -> Vec<WorkloadId> {
        self.placements.update(placements)
    }

    /// Takes in every node's serving replicas as read now; the workloads
    /// whose replicas on the other nodes changed.
    fn update_peers(&self, all: BTreeMap<WorkloadId, Vec<ServingReplica>>) -> Vec<WorkloadId> {
        let others: BTreeMap<WorkloadId, Vec<ServingReplica>> = all
            .into_iter()
            .map(|(workload, serving)| {
                let mut others: Vec<ServingReplica> = serving
                    .into_iter()
                    .filter(|replica| replica.node.as_ref() != Some(&self.node))
                    .collect();
                others.sort();
                (workload, others)
            })
            .filter(|(_, others)| !others.is_empty())
            .collect();
        let mut peers = self.peers.write();
        let changed = changed_keys(&peers, &others, |workload| {
            peers.get(workload) != others.get(workload)
        });
        *peers = others;
        changed
    }
}

/// The keys of `before` and `after` for which `differs` holds.
fn changed_keys<V, W>(
    before: &BTreeMap<WorkloadId, V>,
    after: &BTreeMap<WorkloadId, W>,
    differs: impl Fn(&WorkloadId) -> bool,
) -> Vec<WorkloadId> {
    before
        .keys()
        .chain(after.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|workload| differs(workload))
        .cloned()
        .collect()
}

impl ClusterView for NodeView {
    fn schedules_cronjobs(&self) -> bool {
        self.leads()
    }

    fn node(&self) -> &NodeName {
        &self.node
    }

    fn advertised_address(&self) -> Option<&str> {
        self.advertise.as_deref()
    }

    fn share(&self, workload: &WorkloadId) -> Share {
        if self.is_fenced() {
            return Share::Unplaced;
        }
        self.placements.share(workload)
    }

    fn advertise(&self, workload: &WorkloadId, serving: &[ServingReplica]) {
        let Standing::Member { lease } = *self.standing.borrow() else {
            return;
        };
        let unchanged = self
            .advertised
            .lock()
            .get(workload)
            .is_some_and(|(under, last)| *under == lease && last.as_slice() == serving);
        if unchanged {
            return;
        }
        match self
            .store
            .put_endpoints(self.node.as_str(), lease, workload, serving)
        {
            Ok(()) => {
                self.advertised
                    .lock()
                    .insert(workload.clone(), (lease, serving.to_vec()));
            }
            Err(error) => {
                tracing::warn!(%error, %workload, "this node's serving replicas could not be advertised; the next listing tries again");
            }
        }
    }

    fn peers(&self, workload: &WorkloadId) -> Vec<ServingReplica> {
        self.peers.read().get(workload).cloned().unwrap_or_default()
    }

    fn drain_on_peers(
        &self,
        workload: &WorkloadId,
        replica: &ServingReplica,
        budget: Duration,
    ) -> BoxFuture<'static, PeerDrains> {
        let store = self.store.clone();
        let node = self.node.clone();
        let lease = match *self.standing.borrow() {
            Standing::Member { lease } => Some(lease),
            Standing::Lost => None,
        };
        let ask = DrainAsk {
            workload: workload.clone(),
            replica: replica.clone(),
            budget_ms: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
            asked_by: node.clone(),
            asked_at_ms: now_ms(),
        };
        Box::pin(async move {
            let Some(lease) = lease else {
                return PeerDrains::default();
            };
            drain_round(store, node, lease, ask, budget).await
        })
    }

    fn build_context(
        &self,
        build: &voodu_model::build::Build,
    ) -> BoxFuture<'static, Result<Vec<u8>, String>> {
        let source = self.contexts.clone();
        let build = build.clone();
        Box::pin(async move {
            let digest = build
                .digest
                .clone()
                .ok_or_else(|| {
                    "it was stored without its context's digest — apply it again".to_owned()
                })
                .and_then(voodu_model::build::ContextDigest::try_from)?;
            let archive = source.fetch(&digest, build.kept_by.as_deref()).await?;
            // A context is taken only if it is the one the image was built
            // from: a node that sent other bytes is not believed.
            if build.as_built().digest_of(&archive) != digest.as_str() {
                return Err(format!(
                    "the build context sent for {digest} is not the one it names (its digest differs) — apply it again"
                ));
            }
            source.keep(&digest, &archive);
            Ok(archive)
        })
    }
}

/// A drain one node asks of the others (see `voodu_store_etcd::drains`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct DrainAsk {
    workload: WorkloadId,
    replica: ServingReplica,
    budget_ms: u64,
    asked_by: NodeName,
    /// When it was asked, Unix milliseconds: an answering node drains for
    /// what is left of the budget.
    asked_at_ms: i64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

/// How often the asking node looks for the other nodes' answers.
const ANSWERS_EVERY: Duration = Duration::from_millis(50);

/// One drain round: asks every other live node, waits for their answers
/// within `budget`, and removes the round.
async fn drain_round(
    store: Arc<EtcdStore>,
    node: NodeName,
    lease: i64,
    ask: DrainAsk,
    budget: Duration,
) -> PeerDrains {
    let deadline = tokio::time::Instant::now() + budget;
    let nodes = {
        let store = store.clone();
        blocking(move || store.nodes()).await
    };
    let others: Vec<NodeName> = match nodes {
        Ok(nodes) => nodes
            .into_iter()
            .filter(|record| record.alive)
            .filter_map(|record| record.name.parse().ok())
            .filter(|name| *name != node)
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "the live nodes could not be read to drain on them; draining on this node only");
            return PeerDrains::default();
        }
    };
    if others.is_empty() {
        return PeerDrains::default();
    }
    let id = {
        let store = store.clone();
        match blocking(move || store.ask_drain(lease, &ask)).await {
            Ok(id) => id,
            Err(error) => {
                tracing::warn!(%error, "the drain could not be asked of the other nodes");
                return PeerDrains {
                    answered: Vec::new(),
                    silent: others,
                };
            }
        }
    };
    let mut answers: BTreeMap<String, DrainOutcome> = BTreeMap::new();
    loop {
        let read = {
            let (store, id) = (store.clone(), id.clone());
            blocking(move || store.drain_answers::<DrainOutcome>(&id)).await
        };
        if let Ok(read) = read {
            answers = read;
        }
        let all_answered = others
            .iter()
            .all(|other| answers.contains_key(other.as_str()));
        if all_answered || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep_until((tokio::time::Instant::now() + ANSWERS_EVERY).min(deadline)).await;
    }
    {
        let (store, id) = (store.clone(), id.clone());
        if let Err(error) = blocking(move || store.close_drain(&id)).await {
            tracing::debug!(%error, "a drain round could not be removed; it goes with this node's lease");
        }
    }
    let mut drains = PeerDrains::default();
    for other in others {
        match answers.remove(other.as_str()) {
            Some(outcome) => drains.answered.push((other, outcome)),
            None => drains.silent.push(other),
        }
    }
    drains
}

/// Drains what the other nodes ask of this node's plugins (see
/// [`drain_round`]), each ask once, for what is left of its budget.
async fn answer_drains(controller: Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let Some(reconciler) = controller.reconciler().cloned() else {
        return;
    };
    let asked = cluster.store.watch(Watched::Drains);
    let mut answered: BTreeSet<String> = BTreeSet::new();
    loop {
        asked.notified().await;
        let store = cluster.store.clone();
        let asks = match blocking(move || store.drain_asks::<DrainAsk>()).await {
            Ok(asks) => asks,
            Err(error) => {
                tracing::debug!(%error, "the drains asked could not be read");
                continue;
            }
        };
        answered.retain(|id| asks.contains_key(id));
        for (id, ask) in asks {
            if ask.asked_by == *cluster.view.node() || !answered.insert(id.clone()) {
                continue;
            }
            let Some(lease) = cluster.membership.lease() else {
                continue;
            };
            let spent = u64::try_from(now_ms().saturating_sub(ask.asked_at_ms)).unwrap_or(0);
            let left = Duration::from_millis(ask.budget_ms.saturating_sub(spent))
                .min(Duration::from_millis(ask.budget_ms));
            let (reconciler, store, node) = (
                reconciler.clone(),
                cluster.store.clone(),
                cluster.view.node().to_string(),
            );
            tokio::spawn(async move {
                let outcome = reconciler
                    .drain_for_peer(&ask.workload, &ask.replica, left)
                    .await;
                let written =
                    blocking(move || store.answer_drain(&id, &node, lease, &outcome)).await;
                if let Err(error) = written {
                    tracing::warn!(%error, workload = %ask.workload, "a drain answer could not be stored; the asking node counts this one as not drained");
                }
            });
        }
    }
}

/// Runs a blocking store call off the runtime's workers.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    crate::off_the_runtime(call, |error| {
        StoreError::Cluster(format!("a store call panicked: {error}"))
    })
    .await
}

/// Starts this node's cluster tasks (see the module doc). Must run inside
/// the controller's tokio runtime. They run until the worker hands the
/// node over to an upgrade's new worker ([`hand_over`]).
pub fn start(controller: &Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let tasks = [
        tokio::spawn(report(controller.clone())),
        tokio::spawn(lead(controller.clone())),
        tokio::spawn(follow_placements(controller.clone())),
        tokio::spawn(follow_workloads(controller.clone())),
        tokio::spawn(follow_config(controller.clone())),
        tokio::spawn(follow_endpoints(controller.clone())),
        tokio::spawn(follow_plugins(controller.clone())),
        tokio::spawn(answer_drains(controller.clone())),
        tokio::spawn(guard_the_lease(controller.clone())),
        tokio::spawn(tell_the_supervisor_the_lease(controller.clone())),
        tokio::spawn(tell_the_supervisor_the_renewals(controller.clone())),
    ];
    cluster
        .tasks
        .lock()
        .extend(tasks.iter().map(tokio::task::JoinHandle::abort_handle));
}

/// Hands this node's place over to an upgrade's new worker, which has
/// adopted its lease: every cluster task stops (none leads, fences,
/// answers drains or reports for this worker again) and the membership
/// stops renewing the lease without revoking it.
pub fn hand_over(cluster: &crate::ClusterNode) {
    for task in cluster.tasks.lock().drain(..) {
        task.abort();
    }
    cluster.membership.hand_over();
    tracing::info!(
        node = cluster.membership.name(),
        "handed this node's place in the cluster over to the new worker"
    );
}

/// This node stops (SIGTERM, SIGINT): every cluster task stops, it gives
/// up the lead at once (another node places replicas from now on), and it
/// keeps its lease unrenewed: its replicas run on, and a controller
/// started again on this root within the lease's TTL takes the lease over
/// (`<root>/node-lease`), so the cluster never counts the node gone and
/// nothing moves.
pub fn stop_keeping_the_lease(cluster: &crate::ClusterNode) {
    let node = cluster.membership.name().to_owned();
    for task in cluster.tasks.lock().drain(..) {
        task.abort();
    }
    if let Err(error) = cluster.store.resign(&node) {
        tracing::warn!(%error, "could not give up the cluster's lead; another node leads once this node's lease expires");
    }
    cluster.membership.hand_over();
    tracing::info!(
        node,
        "stopped: gave up the lead and kept the lease for a restart within its TTL"
    );
}

/// The file in a node's root that keeps the lease its name is held under,
/// for a controller started again on the root to take it over.
pub const NODE_LEASE_FILE: &str = "node-lease";

/// Under a supervisor: tells it the lease this node's name is held under,
/// whenever the node joins (again), so that the next worker (an
/// upgrade's, or one that replaces a worker that died) takes the lease
/// over instead of waiting for it to expire.
async fn tell_the_supervisor_the_lease(controller: Arc<Controller>) {
    let (Some(cluster), Some(link)) = (controller.cluster(), controller.supervisor_link()) else {
        return;
    };
    let mut standing = cluster.membership.standing();
    loop {
        let now = *standing.borrow_and_update();
        if let Standing::Member { lease } = now {
            let file = controller.root().join(NODE_LEASE_FILE);
            if let Err(error) = std::fs::write(&file, lease.to_string()) {
                tracing::warn!(%error, file = %file.display(), "the node's lease could not be kept for a restart; a restart joins afresh");
            }
            let told = link.tell(&crate::supervisor::control::FromWorker::NodeLease { lease });
            if let Err(error) = told {
                tracing::warn!(%error, "the supervisor could not be told this node's lease; a worker it starts next joins afresh");
            }
        }
        if standing.changed().await.is_err() {
            return;
        }
    }
}

/// Under a supervisor, with Docker: tells it every sixth of the TTL how
/// long ago the node's lease was renewed, so that if no worker renews it
/// (one died and the next cannot start, or one hangs), the supervisor
/// stops the node's statefulset replicas itself before the lease can
/// expire.
async fn tell_the_supervisor_the_renewals(controller: Arc<Controller>) {
    let (Some(cluster), Some(link), Some(_)) = (
        controller.cluster(),
        controller.supervisor_link(),
        controller.reconciler(),
    ) else {
        return;
    };
    let ttl = cluster.membership.ttl();
    let mut every = tokio::time::interval((ttl / 6).max(Duration::from_millis(100)));
    loop {
        every.tick().await;
        let told = link.tell(&crate::supervisor::control::FromWorker::LeaseFresh {
            renewed_ms_ago: u64::try_from(cluster.membership.renewed_ago().as_millis())
                .unwrap_or(u64::MAX),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        });
        if let Err(error) = told {
            tracing::debug!(%error, "the supervisor could not be told the lease's renewal");
        }
    }
}

/// Tells the cluster what this node runs, every [`REPORT_EVERY`].
async fn report(controller: Arc<Controller>) {
    let mut every = tokio::time::interval(REPORT_EVERY);
    loop {
        every.tick().await;
        let replicas = match controller.reconciler() {
            Some(reconciler) => reconciler.replicas(None).await.unwrap_or_default(),
            None => Vec::new(),
        };
        let mut held: BTreeMap<WorkloadId, BTreeSet<u32>> = BTreeMap::new();
        for replica in &replicas {
            if replica.workload.kind == WorkloadKind::Statefulset {
                if let Ok(ordinal) = replica.replica_id.parse() {
                    held.entry(replica.workload.clone())
                        .or_default()
                        .insert(ordinal);
                }
            }
        }
        let held = held
            .into_iter()
            .map(|(workload, ordinals)| HeldOrdinals { workload, ordinals })
            .collect();
        controller.report_to_cluster(replicas.len(), held);
    }
}

/// Keeps the placements in [`NodeView`] current and queues a pass of each workload
/// whose share on this node changed.
async fn follow_placements(controller: Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let changed = cluster.store.watch(Watched::Placements);
    loop {
        let store = cluster.store.clone();
        match blocking(move || store.placements()).await {
            Ok(placements) => {
                let moved = cluster.view.update_placements(placements);
                if let Some(reconciler) = controller.reconciler() {
                    for workload in &moved {
                        reconciler.enqueue(workload);
                    }
                }
            }
            Err(error) => tracing::debug!(%error, "the placements could not be read"),
        }
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
        }
    }
}

/// Queues a pass of every workload another node applied, rolled back or
/// deleted, as soon as it is stored (and of every workload when the watch
/// was opened again, since changes may have been missed meanwhile).
async fn follow_workloads(controller: Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let Some(reconciler) = controller.reconciler().cloned() else {
        return;
    };
    let mut changed = cluster.store.watch_workloads();
    let mut first = true;
    while let Some(workload) = changed.recv().await {
        match workload {
            Some(workload) => {
                reconciler.enqueue(&workload);
            }
            // The start-up resync already covers the first opening.
            None if first => first = false,
            None => reconciler.resync().await,
        }
    }
}

/// Gives every workload a pass when a config bucket changes on any node:
/// those that take the bucket roll to their new env (the node that stored
/// the change already queued its own).
async fn follow_config(controller: Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let changed = cluster.store.watch(Watched::Config);
    // The first notification is the watch opening; the start-up resync
    // covers it.
    changed.notified().await;
    loop {
        changed.notified().await;
        if let Some(reconciler) = controller.reconciler() {
            reconciler.resync().await;
        }
    }
}

/// Keeps the other nodes' serving replicas in [`NodeView`] and offers
/// every block of a workload whose peers changed their new union at once.
async fn follow_endpoints(controller: Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let changed = cluster.store.watch(Watched::Endpoints);
    loop {
        let store = cluster.store.clone();
        match blocking(move || store.endpoints()).await {
            Ok(all) => {
                let moved = cluster.view.update_peers(all);
                if let Some(reconciler) = controller.reconciler() {
                    for workload in moved {
                        let reconciler = reconciler.clone();
                        tokio::spawn(async move { reconciler.peers_changed(&workload).await });
                    }
                }
            }
            Err(error) => tracing::debug!(%error, "the cluster's endpoints could not be read"),
        }
        tokio::select! {
            _ = changed.notified() => {}
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
        }
    }
}

/// Installs every plugin installed cluster-wide while the node runs, as
/// soon as its record is stored (see [`Controller::fetch_cluster_plugins`]).
async fn follow_plugins(controller: Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let changed = cluster.store.watch(Watched::Plugins);
    let settings_changed = cluster.store.watch(Watched::PluginSettings);
    loop {
        tokio::select! {
            _ = changed.notified() => {}
            _ = settings_changed.notified() => {}
        }
        let controller = controller.clone();
        let fetched = tokio::task::spawn_blocking(move || controller.fetch_cluster_plugins()).await;
        if let Err(error) = fetched {
            tracing::error!(%error, "fetching the cluster's plugins panicked");
        }
    }
}

/// Campaigns for `leader`, and places every workload while this node
/// leads.
async fn lead(controller: Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let workloads_changed = cluster.store.watch(Watched::Workloads);
    let nodes_changed = cluster.store.watch(Watched::Nodes);
    let mut leading = false;
    loop {
        if let Some(lease) = cluster.membership.lease() {
            let store = cluster.store.clone();
            let node = cluster.membership.name().to_owned();
            let campaign = {
                let node = node.clone();
                let store = store.clone();
                blocking(move || store.campaign(&node, lease)).await
            };
            match campaign {
                Ok(true) => {
                    if !leading {
                        tracing::info!(node, "this node leads the cluster: it places the replicas");
                    }
                    leading = true;
                    cluster.view.leading.store(true, Ordering::SeqCst);
                    let state = controller.store().clone();
                    let outcome = blocking(move || {
                        let workloads = state.workloads(None)?;
                        let nodes = store.nodes()?;
                        let placements = store.placements()?;
                        let serving = store.endpoints()?;
                        Ok((workloads, nodes, placements, serving))
                    })
                    .await;
                    match outcome {
                        Ok((workloads, nodes, placements, serving)) => {
                            let (changed, gone) =
                                place_all(&workloads, &nodes, &placements, &serving);
                            if !changed.is_empty() || !gone.is_empty() {
                                let store = cluster.store.clone();
                                let written =
                                    blocking(move || store.put_placements(&node, &changed, &gone))
                                        .await;
                                if let Err(error) = written {
                                    tracing::warn!(%error, "the placements could not be stored");
                                }
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "the cluster could not be read to place replicas")
                        }
                    }
                }
                Ok(false) => {
                    leading = false;
                    cluster.view.leading.store(false, Ordering::SeqCst);
                }
                Err(error) => {
                    leading = false;
                    cluster.view.leading.store(false, Ordering::SeqCst);
                    tracing::debug!(%error, "could not campaign for the cluster's lead");
                }
            }
        }
        tokio::select! {
            _ = workloads_changed.notified() => {}
            _ = nodes_changed.notified() => {}
            _ = tokio::time::sleep(PLACE_EVERY) => {}
        }
    }
}

/// One round of the leader: each stored workload's next placement, those
/// that changed, and the placements of workloads no longer stored.
fn place_all(
    workloads: &[voodu_store::StoredWorkload],
    nodes: &[NodeRecord],
    placements: &BTreeMap<WorkloadId, Placement>,
    serving: &BTreeMap<WorkloadId, Vec<ServingReplica>>,
) -> (Vec<(WorkloadId, Placement)>, Vec<WorkloadId>) {
    let mut cluster_load: BTreeMap<NodeName, u32> = BTreeMap::new();
    for placement in placements.values() {
        for (node, count) in placement.load() {
            *cluster_load.entry(node).or_default() += count;
        }
    }
    let mut held: BTreeMap<NodeName, BTreeSet<u32>> = BTreeMap::new();
    let mut changed = Vec::new();
    let stored: BTreeSet<&WorkloadId> = workloads.iter().map(|stored| &stored.id).collect();
    for stored in workloads {
        let needs: BTreeSet<&str> = stored
            .blocks
            .iter()
            .map(|block| block.block_type.as_str())
            .collect();
        let mut standing = BTreeMap::new();
        held.clear();
        for node in nodes {
            let Ok(name) = node.name.parse::<NodeName>() else {
                continue;
            };
            let node_standing = if node.alive {
                let allowed =
                    stored.core_spec.nodes.is_empty() || stored.core_spec.nodes.contains(&name);
                let has_plugins = needs.iter().all(|plugin| {
                    node.report
                        .plugins
                        .iter()
                        .any(|loaded| loaded.name == *plugin)
                });
                if allowed && has_plugins {
                    NodeStanding::Eligible
                } else {
                    NodeStanding::Ineligible
                }
            } else {
                // A removed node has no record: absent from `standing`,
                // `place` counts it removed.
                NodeStanding::Lost
            };
            if let Some(ordinals) = node
                .report
                .held_ordinals
                .iter()
                .find(|held| held.workload == stored.id)
            {
                held.insert(name.clone(), ordinals.ordinals.clone());
            }
            standing.insert(name, node_standing);
        }
        let previous = placements.get(&stored.id).cloned().unwrap_or_default();
        let mut serving_on: BTreeMap<NodeName, u32> = BTreeMap::new();
        for replica in serving.get(&stored.id).into_iter().flatten() {
            if let Some(node) = &replica.node {
                *serving_on.entry(node.clone()).or_default() += 1;
            }
        }
        let next = place(
            &previous,
            PlacementInput {
                kind: stored.id.kind,
                replicas: stored.core_spec.replicas,
                nodes: &standing,
                held_ordinals: &held,
                serving: &serving_on,
                cluster_load: &mut cluster_load,
            },
        );
        if placements.get(&stored.id) != Some(&next) {
            changed.push((stored.id.clone(), next));
        }
    }
    let gone = placements
        .keys()
        .filter(|workload| !stored.contains(workload))
        .cloned()
        .collect();
    (changed, gone)
}

/// Fences the node while its lease goes unrenewed, and lifts the fence once
/// it holds a renewed lease again (see the module doc).
async fn guard_the_lease(controller: Arc<Controller>) {
    let Some(cluster) = controller.cluster() else {
        return;
    };
    let mut standing = cluster.membership.standing();
    let fence_after = fence_after(cluster.membership.ttl());
    loop {
        let renewed_ago = cluster.membership.renewed_ago();
        let member = matches!(*standing.borrow(), Standing::Member { .. });
        let fenced = cluster.view.fenced.load(Ordering::SeqCst);
        if !fenced && (!member || renewed_ago > fence_after) {
            cluster.view.fenced.store(true, Ordering::SeqCst);
            tracing::warn!(
                renewed_ago = %humantime::format_duration(Duration::from_millis(renewed_ago.as_millis() as u64)),
                "this node's lease went unrenewed: it stops its statefulset replicas and changes nothing else until the cluster store answers again"
            );
            if let Some(reconciler) = controller.reconciler() {
                reconciler.fence_statefulsets(FENCE_STOP_SECS).await;
            }
        } else if fenced && member && renewed_ago < fence_after {
            cluster.view.fenced.store(false, Ordering::SeqCst);
            tracing::info!("this node's lease is renewed: it converges to the current placement");
            if let Some(reconciler) = controller.reconciler() {
                reconciler.resync().await;
            }
        }
        tokio::select! {
            _ = standing.changed() => {}
            _ = tokio::time::sleep(GUARD_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voodu_model::CoreSpec;
    use voodu_store_etcd::{NodePlugin, NodeReport};

    fn node(name: &str, alive: bool, plugins: &[&str]) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            alive,
            started_ms: 0,
            last_seen_ms: 0,
            report: NodeReport {
                plugins: plugins
                    .iter()
                    .map(|plugin| NodePlugin {
                        name: (*plugin).into(),
                        version: "1".into(),
                        abi: "1.1".into(),
                    })
                    .collect(),
                replicas: 0,
                held_ordinals: Vec::new(),
                peer: None,
                refused_plugins: Vec::new(),
            },
        }
    }

    fn stored(id: &str, core: CoreSpec, plugins: &[&str]) -> voodu_store::StoredWorkload {
        voodu_store::StoredWorkload {
            id: id.parse().unwrap(),
            revision: 1,
            spec_hash: String::new(),
            core_spec: core,
            blocks: plugins
                .iter()
                .map(|plugin| voodu_model::NormalisedBlock {
                    claims: Vec::new(),
                    block_type: (*plugin).into(),
                    labels: Vec::new(),
                    spec: serde_json::json!({}),
                    endpoints: voodu_model::EndpointEnvelope {
                        port: Some(8080),
                        addressing: Default::default(),
                    },
                })
                .collect(),
            source: None,
            created_at: String::new(),
            updated_at: String::new(),
            restarted_ms: None,
            frozen: Default::default(),
        }
    }

    #[test]
    fn the_leader_places_only_on_live_nodes_with_the_plugins_and_in_the_nodes_list() {
        let nodes = [
            node("a", true, &["traffik"]),
            node("b", true, &[]),
            node("c", false, &["traffik"]),
            node("d", true, &["traffik"]),
        ];
        let mut restricted = CoreSpec::of_image("img", 2);
        restricted.nodes = vec!["d".parse().unwrap()];
        let workloads = [
            stored(
                "deployment/prod/web",
                CoreSpec::of_image("img", 4),
                &["traffik"],
            ),
            stored("deployment/prod/pinned", restricted, &[]),
        ];
        let (changed, gone) = place_all(&workloads, &nodes, &BTreeMap::new(), &BTreeMap::new());
        assert!(gone.is_empty());
        let placed: BTreeMap<String, Vec<String>> = changed
            .iter()
            .map(|(id, placement)| {
                (
                    id.to_string(),
                    placement
                        .slots
                        .iter()
                        .map(|slot| slot.as_ref().map_or("-".into(), |n| n.to_string()))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(placed["deployment/prod/web"], ["a", "d", "a", "d"]);
        assert_eq!(placed["deployment/prod/pinned"], ["d", "d"]);
    }

    #[test]
    fn a_node_follows_only_its_own_share() {
        let placements = PlacementCache::new("b".parse().unwrap());
        let web: WorkloadId = "deployment/prod/web".parse().unwrap();
        let db: WorkloadId = "statefulset/prod/db".parse().unwrap();
        assert_eq!(placements.share(&web), Share::Unplaced);
        let slots = |names: &[&str]| Placement {
            slots: names
                .iter()
                .map(|name| Some(name.parse().unwrap()))
                .collect(),
            moving: None,
        };
        let moved = placements.update(BTreeMap::from([
            (web.clone(), slots(&["a", "b", "b"])),
            (db.clone(), slots(&["b", "a"])),
        ]));
        assert_eq!(moved, [web.clone(), db.clone()]);
        assert_eq!(placements.share(&web), Share::Replicas(2));
        assert_eq!(placements.share(&db), Share::Ordinals(BTreeSet::from([0])));
        // Another node's change is not this node's.
        let moved = placements.update(BTreeMap::from([
            (web.clone(), slots(&["c", "b", "b"])),
            (db.clone(), slots(&["b", "a"])),
        ]));
        assert!(moved.is_empty(), "{moved:?}");
    }
}
