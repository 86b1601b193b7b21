//! # voodu-reconcile
//!
//! The reconciler: where desired state, running containers and plugins
//! meet. It is the only part that uses both a [`ContainerRuntime`] and the
//! [`BlockPlugins`].
//!
//! It is a level-triggered control loop, after Kubernetes'
//! controller-runtime:
//!
//! - **Triggers** ([`Reconciler::enqueue`]): an apply or delete, a Docker
//!   event of one of the workload's containers, the periodic resync, a
//!   plugin install or replace.
//! - **The work queue** ([`queue`]) keyed by workload coalesces them: ten
//!   triggers make one pass, and one workload never has two passes at once.
//! - **Workers** (a bounded pool, [`ReconcilerConfig::workers`]) run passes
//!   of different workloads in parallel.
//! - **A pass** ([`converge`]) reads the newest stored revision before every
//!   batch of steps, so an apply in the middle of a rollout is picked up at
//!   its next step.
//! - **Events** ([`watch`]) withdraw a dead replica from every block at once,
//!   record the death, and queue the workload so the replica is restarted
//!   ([`restarts`] holds the back-off).
//! - **Publishing** ([`publish`]) goes through one lane per plugin: no lock
//!   is held across a plugin call, and a slow plugin delays only its own
//!   blocks.
//!
//! Locks: the store is held for one `StateStore` call at a time; the queue's,
//! the status board's, the publisher lanes' and the restart history's
//! mutexes only to read or move entries. The one lock held across an await
//! is a workload's own observe lock, around listing its containers and
//! offering the sets, so two listings of one workload are never published
//! out of order; it is never held across a plugin call.
//!
//! State has one owner each: [`lives`] holds each replica's deaths,
//! removals and restarts; [`probes`] its readiness; [`publish`] the sets;
//! [`status`] each workload's phase; [`orphans`] what was reported;
//! [`release`] which release ran its commands.
//!
//! [`activity`] is the live stream of events and steps that waits and
//! watches follow; [`sweep`] converges workloads that are no longer stored
//! to nothing and finishes their deletion; [`forget`] tells plugins a block
//! is gone; [`observe`] lists a workload's containers and offers their
//! sets.
//!
//! **May not depend on** the manifest parser, the API or the controller:
//! it works on stored workloads, through the [`ContainerRuntime`] and
//! [`BlockPlugins`] traits (`tests/crate_rules.rs` checks this).

#![warn(missing_docs)]

pub mod activity;
mod built_images;
pub mod cluster;
pub mod converge;
pub mod drain;
pub mod fence;
pub mod forget;
mod http;
pub use http::http_get;
pub mod jobs;
mod keyed_locks;
pub mod lives;
pub mod notify;
pub mod observe;
pub mod orphans;
pub mod passes;
pub mod plan;
pub mod plugins;
pub mod probes;
pub mod publish;
pub mod queue;
pub mod release;
pub mod restarts;
pub mod status;
pub mod step_containers;
pub mod stops;
pub mod sweep;
pub mod tally;
pub mod watch;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use voodu_model::EventReason;

use backon::{ExponentialBuilder, Retryable};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

pub use self::plugins::{BlockCallError, BlockPlugins};
use self::publish::{PublishTicket, Publisher};
use self::queue::WorkQueue;
use self::status::{StatusBoard, WorkloadStatus};
use crate::activity::{ActivityBus, Notice};
use voodu_model::core_spec::CoreSpec;
use voodu_model::{NormalisedBlock, WorkloadId};
use voodu_runtime::{ContainerRuntime, RuntimeError};
use voodu_store::{EventLevel, NewEvent, StateStore, StoreError};

/// How long a removed container gets to exit after SIGTERM.
const STOP_TIMEOUT_SECS: i32 = 10;
/// A bound on batches of steps per pass, against a plan that never settles.
const MAX_STEPS: usize = 500;
/// The default number of workloads reconciled at once.
pub const DEFAULT_WORKERS: usize = 8;

/// Why a workload did not converge.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The engine failed, after retries.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The plan did not settle.
    #[error("gave up after {MAX_STEPS} steps without converging")]
    TooManySteps,
    /// A new replica was not ready within the progress deadline.
    #[error("{0}")]
    NotReady(String),
    /// An init step of a new replica failed past its retries.
    #[error("{0}")]
    Init(String),
    /// A release's `pre_command` or `command` failed.
    #[error("{0}")]
    Release(String),
    /// `vd run` named what is no job, or no stored one.
    #[error("{0}")]
    NotRunnable(String),
    /// An image built from source could not be built on this node of a
    /// cluster (its context could not be fetched, or its build failed).
    #[error("{0}")]
    Build(String),
}

/// How the control loop runs.
#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    /// This controller's id on the engine's containers (from its root).
    pub owner: String,
    /// How many workloads reconcile at once.
    pub workers: usize,
    /// How long a rollout waits for a publish to reach a plugin before it
    /// drains (the plugin call bound).
    pub publish_wait: Duration,
}

/// The hash a workload's replicas must carry to be current: their
/// container's ([`CoreSpec::container_hash`]), and once `vd restart` marked the
/// workload, that mark with it, so every replica made before the mark is
/// stale and the rollout replaces it (surge-first, drained) while the spec
/// stays as it is.
pub fn replica_hash(core: &CoreSpec, restarted_ms: Option<i64>) -> String {
    let container = core.container_hash();
    match restarted_ms {
        None => container,
        Some(mark) => {
            let marked = format!("{container}/restarted/{mark}");
            hex::encode(&Sha256::digest(marked.as_bytes())[..12])
        }
    }
}

/// The core spec `stored`'s replicas run: its own, with the variables of
/// the config buckets it takes laid over its `env`, as `store` holds them
/// now (so a change to a bucket changes [`replica_hash`]).
pub fn resolved_core(
    store: &dyn StateStore,
    stored: &voodu_store::StoredWorkload,
) -> Result<CoreSpec, StoreError> {
    let mut core = stored.core_spec.clone();
    let buckets = core
        .buckets(&stored.id)
        .iter()
        .map(|bucket| store.config_bucket(bucket))
        .collect::<Result<Vec<_>, _>>()?;
    core.env = voodu_model::config::layered_env(&core.env, &buckets);
    Ok(core)
}

/// The reconciler of one controller.
pub struct Reconciler {
    runtime: Arc<dyn ContainerRuntime>,
    plugins: Arc<dyn BlockPlugins>,
    store: Arc<dyn StateStore>,
    activity: ActivityBus,
    publisher: Arc<Publisher>,
    queue: Arc<WorkQueue<WorkloadId>>,
    status: StatusBoard,
    /// Each replica's deaths, restarts and removals (see [`lives`]).
    lives: lives::ReplicaLives,
    /// Each workload's observe lock and last listing (see [`observe`]).
    observations: observe::Observations,
    /// Each workload's failed passes in a row and the revision it last
    /// converged at (see [`passes`]).
    passes: passes::PassHistory,
    /// Each replica's prober and readiness.
    probes: probes::ProbeBoard,
    /// Which release of each workload ran its commands.
    releases: release::Releases,
    /// Containers of workloads this store does not (or no longer) account
    /// for, and those it adopted, as reported so far.
    orphans: orphans::OrphanReports,
    /// The rollouts whose `on_deploy` webhooks fire when they settle.
    rollouts: notify::AwaitedRollouts,
    /// The store's identity, carried by every container made for it.
    store_id: String,
    /// The cluster this controller is a node of; unset on one host, where
    /// it runs every replica and publishes its own only.
    cluster: std::sync::OnceLock<Arc<dyn cluster::ClusterView>>,
    /// The images built from fetched contexts, one build of a tag at a
    /// time (see [`built_images`]).
    built_images: keyed_locks::KeyedLocks<String>,
    /// Who counts what the loop does (see [`tally`]), once set.
    tally: tally::Tally,
    /// This reconciler, for the tasks it spawns.
    me: std::sync::Weak<Reconciler>,
    config: ReconcilerConfig,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn event(
    workload: &WorkloadId,
    level: EventLevel,
    reason: EventReason,
    message: String,
) -> NewEvent {
    NewEvent {
        workload: workload.clone(),
        level,
        reason,
        message,
    }
}

impl Reconciler {
    /// A reconciler on `runtime` and `plugins`. Nothing runs until
    /// [`Reconciler::start`].
    pub fn new(
        runtime: Arc<dyn ContainerRuntime>,
        plugins: Arc<dyn BlockPlugins>,
        store: Arc<dyn StateStore>,
        activity: ActivityBus,
        config: ReconcilerConfig,
    ) -> Arc<Self> {
        let store_id = store.id().to_owned();
        let tally = tally::Tally::default();
        Arc::new_cyclic(|me| Reconciler {
            publisher: Publisher::new(plugins.clone(), store.clone(), tally.clone()),
            tally,
            runtime,
            plugins,
            store,
            activity,
            queue: Arc::new(WorkQueue::default()),
            status: StatusBoard::default(),
            lives: lives::ReplicaLives::default(),
            observations: observe::Observations::default(),
            passes: passes::PassHistory::default(),
            probes: probes::ProbeBoard::default(),
            releases: release::Releases::default(),
            orphans: orphans::OrphanReports::default(),
            rollouts: notify::AwaitedRollouts::default(),
            store_id,
            cluster: std::sync::OnceLock::new(),
            built_images: keyed_locks::KeyedLocks::default(),
            me: me.clone(),
            config,
        })
    }

    /// Starts the workers, the event follower and the periodic resync
    /// (which first replays the whole store). Must run inside a tokio
    /// runtime.
    pub fn start(self: &Arc<Self>, resync_every: Duration) {
        for _ in 0..self.config.workers.max(1) {
            tokio::spawn(self.clone().work());
        }
        tokio::spawn(self.clone().follow_events());
        tokio::spawn(self.clone().keep_resyncing(resync_every));
        tokio::spawn(self.clone().schedule_cronjobs());
    }

    /// Whether this controller starts the cronjobs' scheduled runs now:
    /// while it reconciles, and in a cluster only while it leads.
    fn schedules_cronjobs(&self) -> bool {
        !self.queue.is_closed()
            && self
                .cluster
                .get()
                .is_none_or(|cluster| cluster.schedules_cronjobs())
    }

    /// Makes this controller a node of `cluster`: each workload's passes
    /// converge only this node's share of its replicas, and publish the
    /// union of every node's serving replicas. Set once, before
    /// [`Reconciler::start`]; a second call changes nothing.
    pub fn join_cluster(&self, cluster: Arc<dyn cluster::ClusterView>) {
        let _ = self.cluster.set(cluster);
    }

    /// Reports what the loop does to `observer` from now on (see
    /// [`tally`]); a second call changes nothing.
    pub fn observe_with(&self, observer: Arc<dyn tally::ReconcileObserver>) {
        self.tally.set(observer);
    }

    /// What this controller last saw of each block of `workload` (its last
    /// publish's latency, its last drain), since it started.
    pub fn block_figures(&self, workload: &WorkloadId) -> Vec<tally::BlockFigures> {
        self.tally.blocks_of(workload)
    }

    /// This controller's share of a workload's replicas.
    pub fn share(&self, workload: &WorkloadId) -> cluster::Share {
        self.cluster
            .get()
            .map_or(cluster::Share::All, |cluster| cluster.share(workload))
    }

    /// Stops handing out work; passes in progress finish their step.
    pub fn stop(&self) {
        self.queue.close();
    }

    /// How many workloads wait for a pass.
    pub fn queue_depth(&self) -> usize {
        self.queue.len()
    }

    /// How many passes are running (after [`Reconciler::stop`], those
    /// still finishing their step).
    pub fn passes_running(&self) -> usize {
        self.queue.active()
    }

    /// Queues a pass of `workload` and returns the ticket that answers this
    /// trigger (see [`status`]).
    pub fn enqueue(&self, workload: &WorkloadId) -> u64 {
        let ticket = self.status.request(workload);
        self.queue.add(workload.clone());
        ticket
    }

    /// The newest ticket requested for a workload (by [`Reconciler::enqueue`]),
    /// without queueing another pass: a wait that follows a request which
    /// queued its pass after storing is answered by that pass.
    pub fn last_ticket(&self, workload: &WorkloadId) -> Option<u64> {
        self.status.last_requested(workload)
    }

    /// A workload's status and the newest ticket a pass settled.
    pub fn status(&self, workload: &WorkloadId) -> Option<(WorkloadStatus, u64)> {
        self.status.get(workload)
    }

    /// How the newest settled pass of a workload ended.
    pub fn settled(&self, workload: &WorkloadId) -> Option<status::Settled> {
        self.status.settled(workload)
    }

    /// Wakes whenever any workload's status changes.
    pub fn status_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.status.subscribe()
    }

    /// Blocks a new revision of `workload` removed: no set queued for one
    /// is sent, nor one in flight recorded, from now on. Called before
    /// their plugins are told to forget them
    /// ([`forget::forget_blocks`]).
    pub fn drop_blocks(&self, workload: &WorkloadId, blocks: &[NormalisedBlock]) {
        self.publisher.drop_blocks(workload, blocks);
    }

    /// A plugin was installed, replaced or reloaded: its new instance is
    /// sent every block's current set, and every workload with a block of
    /// it gets a pass.
    pub fn plugin_changed(self: &Arc<Self>, plugin: &str) {
        self.publisher.plugin_replaced(plugin);
        let users = match self.store.workloads_with_block_type(plugin) {
            Ok(users) => users,
            Err(error) => {
                tracing::warn!(%error, plugin, "the workloads of a replaced plugin could not be read");
                return;
            }
        };
        let runtime = tokio::runtime::Handle::try_current();
        for workload in users {
            // The new instance hears every block's current set at once,
            // even a block whose workload is in the middle of a drain (its
            // pass would offer it only at its next step).
            if let Ok(runtime) = &runtime {
                let reconciler = self.clone();
                let id = workload.clone();
                runtime.spawn(async move { reconciler.offer_current(&id).await });
            }
            self.enqueue(&workload);
        }
    }

    fn record(&self, events: &[NewEvent]) {
        if let Err(error) = self.store.record_events(events) {
            tracing::warn!(%error, "events could not be recorded");
        }
    }

    /// A transient step, for waiting clients and the status board.
    fn step(&self, workload: &WorkloadId, revision: i64, message: String) {
        self.status.step(workload, revision, message.clone());
        self.activity.send(Notice::step(workload, message));
    }

    /// The worker loop: one workload at a time, from the queue.
    async fn work(self: Arc<Self>) {
        while let Some((workload, waited)) = self.queue.next_timed().await {
            self.tally.tell(|tally| tally.waited_in_queue(waited));
            let started = std::time::Instant::now();
            let result = self.pass(&workload).await;
            self.tally
                .tell(|tally| tally.pass_finished(result, started.elapsed()));
            self.queue.done(&workload);
        }
    }
}

/// The `n`th wait (from 0) of a back-off that doubles from `first` up to
/// `max`, as backon's exponential back-off computes it (no jitter): the
/// failed-pass retry and the restart back-off both use it.
pub(crate) fn doubling_wait(first: Duration, max: Duration, n: u32) -> Duration {
    use backon::BackoffBuilder;
    ExponentialBuilder::default()
        .with_min_delay(first)
        .with_max_delay(max)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(n.min(32) as usize)
        .unwrap_or(max)
}

/// Retries engine calls: 3 more attempts, from 100 ms, doubling.
fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_times(3)
}

/// A running replica `id` of `deployment/prod/esl`, at no address, for
/// unit tests to adjust with struct update syntax.
#[cfg(test)]
pub(crate) fn test_replica(id: &str) -> voodu_runtime::Replica {
    voodu_runtime::Replica {
        container_id: format!("c-{id}"),
        container_name: format!("prod-esl.{id}"),
        workload: WorkloadId::new(
            voodu_plugin_abi::messages::WorkloadKind::Deployment,
            "prod",
            "esl",
        ),
        replica_id: id.into(),
        spec_hash: "h".into(),
        state: "running".into(),
        ip: None,
        host_ports: Default::default(),
        host_ip: None,
        created: 0,
        owner: None,
        store_id: None,
        probes: None,
        health: None,
        ready: None,
        last_probe_failure: None,
        restarts: 0,
    }
}

#[cfg(test)]
mod tests;
