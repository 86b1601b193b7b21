//! One reconcile pass of one workload: read the newest stored revision,
//! look at the containers, offer every block its live set, plan the next
//! batch of steps, run it, and again, until nothing is left to do.
//!
//! The order of a removal is always: the new set is published (and the pass
//! waits for the plugins to have it, within the call bound), then every
//! block drains the replica in parallel within the budget, then it is
//! stopped and removed, then the next set is published. A workload that is
//! no longer stored is converged to zero replicas the same way; `sweep`
//! gives its target and finishes its deletion.

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;
use voodu_model::EventReason;

use voodu_model::container::InitStep;
use voodu_model::on_deploy::DeployStatus;
use voodu_model::ports::PortMapping;
use voodu_plugin_abi::messages::WorkloadKind;

/// How long a failed init step waits before it runs again, as voodu does.
const INIT_RETRY_AFTER: Duration = Duration::from_secs(2);

use backon::Retryable;
use futures_util::future::join_all;

use super::cluster::PeerDrains;
use super::cluster::Share;
use super::drain::{drain_replica, DrainOutcome};
use super::orphans::Ownership;
use super::plan::{next_steps, Desired, Reason, Step};
use super::publish::PublishTicket;
use super::restarts::CrashRecord;
use super::status::Phase;
use super::tally::PassResult;
use super::{backoff, event, ReconcileError, Reconciler, MAX_STEPS, STOP_TIMEOUT_SECS};
use voodu_model::core_spec::{CoreSpec, RestartPolicy};
use voodu_model::naming::new_replica_id;
use voodu_model::{NormalisedBlock, WorkloadId};
use voodu_runtime::{Replica, ReplicaSpec, RuntimeError};
use voodu_store::EventLevel;

/// The first wait before a failed pass is tried again; it doubles.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait before a failed pass is tried again.
const MAX_RETRY: Duration = Duration::from_secs(30);
/// How soon a workload the leader has not placed is looked at again, should
/// the placement's own trigger be missed.
const AWAIT_PLACEMENT: Duration = Duration::from_secs(2);

/// What a pass works towards.
pub(super) struct Target {
    pub(super) revision: i64,
    pub(super) desired: Desired,
    pub(super) core: Option<CoreSpec>,
    pub(super) blocks: Vec<NormalisedBlock>,
    pub(super) budget: Duration,
    /// The workload is not stored: converge to nothing.
    pub(super) deleted: bool,
    /// A deletion is recorded and its blocks still have to be forgotten.
    pub(super) deletion_pending: bool,
    /// Which of the workload's containers the pass may act on; the others
    /// are orphans, reported and left running.
    pub(super) ownership: Ownership,
    /// In a cluster, the leader has not placed the workload yet: the pass
    /// publishes what runs and changes nothing.
    pub(super) unplaced: bool,
    /// The replicas `vd stop` froze: the pass leaves them as they are.
    pub(super) frozen: std::collections::BTreeSet<String>,
}

impl Target {
    /// The replicas a pass plans with, and what it plans for: replicas
    /// `vd stop` froze are left out, never restarted, replaced or removed,
    /// and keep their slots (a deployment wants that many fewer, a
    /// statefulset none of their ordinals).
    fn unfrozen(&self, observed: Vec<Replica>) -> (Vec<Replica>, Desired) {
        let mut desired = self.desired.clone();
        if self.frozen.is_empty() {
            return (observed, desired);
        }
        let (frozen, planned): (Vec<Replica>, Vec<Replica>) = observed
            .into_iter()
            .partition(|replica| self.frozen.contains(&replica.replica_id));
        match desired.kind {
            WorkloadKind::Statefulset => {
                let frozen_ordinals: std::collections::BTreeSet<u32> = self
                    .frozen
                    .iter()
                    .filter_map(|id| id.parse().ok())
                    .collect();
                let ordinals = desired
                    .ordinals
                    .take()
                    .unwrap_or_else(|| (0..desired.replicas).collect());
                desired.ordinals = Some(&ordinals - &frozen_ordinals);
            }
            _ => {
                let held = u32::try_from(frozen.len()).unwrap_or(u32::MAX);
                desired.replicas = desired.replicas.saturating_sub(held);
            }
        }
        (planned, desired)
    }
}

/// How a pass ended.
enum PassEnd {
    Converged(Vec<CrashRecord>),
    Gone,
    /// Replicas wait out their restart back-off.
    Waiting {
        retry_in: Duration,
        crashes: Vec<CrashRecord>,
    },
    /// Running replicas are not ready yet: the rollout is still in
    /// progress, and looks again after `retry_in` (or as soon as one
    /// turns ready).
    AwaitingReadiness {
        retry_in: Duration,
    },
    /// The cluster's leader has not placed the workload yet; it is looked
    /// at again when it does (or after `retry_in`).
    AwaitingPlacement {
        retry_in: Duration,
    },
}

/// What becomes of a replica once it is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retire {
    /// It is removed (a scale down, a roll, a delete).
    Remove,
    /// It is stopped and its container kept (`vd stop`).
    Stop,
}

/// Whether a stopped replica is started again now.
enum Restart {
    Now,
    After(Duration),
    Never,
}

impl Reconciler {
    /// Runs one pass of `workload` and settles its status; a failure is
    /// recorded and retried with back-off.
    pub(super) async fn pass(&self, workload: &WorkloadId) -> PassResult {
        let revision = self
            .store
            .workload(workload)
            .ok()
            .flatten()
            .map_or(0, |stored| stored.revision);
        let ticket = self.status.begin(workload, revision);
        let began = std::time::SystemTime::now();
        match self.converge(workload).await {
            Ok(end) => {
                self.passes.succeeded(workload);
                match end {
                    PassEnd::Converged(crashes) => {
                        self.passes.converged(workload, revision);
                        self.status
                            .settle(workload, ticket, Phase::Converged, None, crashes);
                        self.rollout_settled(workload, revision, began, DeployStatus::Success, "");
                        PassResult::Converged
                    }
                    PassEnd::Gone => {
                        self.passes.gone(workload);
                        self.status
                            .settle(workload, ticket, Phase::Gone, None, Vec::new());
                        PassResult::Gone
                    }
                    PassEnd::Waiting { retry_in, crashes } => {
                        self.queue.add_after(workload.clone(), retry_in);
                        self.status
                            .settle(workload, ticket, Phase::CrashLooping, None, crashes);
                        PassResult::CrashLooping
                    }
                    PassEnd::AwaitingReadiness { retry_in }
                    | PassEnd::AwaitingPlacement { retry_in } => {
                        // Not settled: whoever waits for this rollout goes
                        // on waiting until the replicas are ready.
                        self.queue.add_after(workload.clone(), retry_in);
                        PassResult::Waiting
                    }
                }
            }
            Err(error) => {
                let message = error.to_string();
                if self.superseded(workload, revision) {
                    // The stored revision changed under this pass: its
                    // failure is the old revision's, which nobody waits for
                    // any more; the new revision gets a pass at once.
                    tracing::info!(%workload, %error, "a pass of a superseded revision failed; passing the newer one");
                    self.queue.add(workload.clone());
                    self.status
                        .settle(workload, ticket, Phase::Failed, Some(message), Vec::new());
                    return PassResult::Superseded;
                }
                let (failures, first_of_its_kind) = self.passes.failed(workload, &message);
                let retry_in = super::doubling_wait(FIRST_RETRY, MAX_RETRY, failures - 1);
                tracing::warn!(%workload, %error, "did not converge");
                // One event per distinct failure: passes that fail the same
                // way again (a resync, a readiness flip) add nothing new.
                if first_of_its_kind {
                    self.record(&[event(
                        workload,
                        EventLevel::Error,
                        EventReason::ConvergeFailed,
                        format!(
                            "did not converge: {error}; retrying in {}",
                            humantime::format_duration(retry_in)
                        ),
                    )]);
                }
                self.queue.add_after(workload.clone(), retry_in);
                self.rollout_settled(workload, revision, began, DeployStatus::Failure, &message);
                self.status
                    .settle(workload, ticket, Phase::Failed, Some(message), Vec::new());
                PassResult::Failed
            }
        }
    }

    /// Whether the workload's stored revision is no longer `revision` (a
    /// newer apply, a rollback or a delete came in): what a pass of
    /// `revision` then fails at belongs to no request.
    pub(super) fn superseded(&self, workload: &WorkloadId, revision: i64) -> bool {
        match self.store.workload(workload) {
            Ok(stored) => stored.map_or(0, |stored| stored.revision) != revision,
            Err(_) => false,
        }
    }

    pub(super) fn target(&self, workload: &WorkloadId) -> Result<Target, ReconcileError> {
        let store = &self.store;
        if let Some(stored) = store.workload(workload)? {
            // The replicas' env: the buckets' variables laid over `env`, so
            // a change to a bucket changes the hash and rolls the replicas.
            let core = super::resolved_core(store.as_ref(), &stored)?;
            // Replicas a `--no-restart` config change keeps, while the
            // workload is as it was then. Read after the buckets: a change
            // committed in between is seen with its holds, so a pass never
            // sees the new env without them.
            let held = store
                .config_holds(workload)?
                .into_iter()
                .filter(|hold| hold.holds_for(&stored))
                .map(|hold| hold.hash)
                .collect();
            self.probes.configure(workload, core.probes.clone());
            let mut desired = Desired {
                kind: workload.kind,
                replicas: core.replicas,
                spec_hash: super::replica_hash(&core, stored.restarted_ms),
                max_surge: core.surge(),
                ordinals: None,
                held,
            };
            let mut unplaced = false;
            match self.share(workload) {
                Share::All => {}
                Share::Replicas(count) => desired.replicas = count,
                Share::Ordinals(ordinals) => desired.ordinals = Some(ordinals),
                Share::Unplaced => unplaced = true,
            }
            return Ok(Target {
                revision: stored.revision,
                desired,
                unplaced,
                budget: core.drain_budget(),
                core: Some(core),
                blocks: stored.blocks,
                frozen: stored.frozen,
                deleted: false,
                deletion_pending: false,
                ownership: Ownership::Stored,
            });
        }
        self.removal_target(store.as_ref(), workload)
    }

    fn may_restart(&self, core: &CoreSpec, replica: &Replica) -> Restart {
        let exit_code = self.lives.last_exit_code(&replica.container_id);
        match core.restart_policy() {
            RestartPolicy::No => Restart::Never,
            RestartPolicy::OnFailure if exit_code == Some(0) => Restart::Never,
            _ => {
                let wait = self
                    .lives
                    .wait_before_restart(&replica.container_id, tokio::time::Instant::now());
                if wait.is_zero() {
                    Restart::Now
                } else {
                    Restart::After(wait)
                }
            }
        }
    }

    /// Waits until the plugins have the sets just offered, each within the
    /// publish bound; failures are already recorded as events.
    pub(crate) async fn await_publishes(&self, tickets: Vec<PublishTicket>) {
        let bound = self.config.publish_wait;
        join_all(tickets.into_iter().map(|ticket| async move {
            match tokio::time::timeout(bound, ticket.outcome).await {
                Ok(Ok(Ok(_))) => {}
                Ok(Ok(Err(error))) => {
                    tracing::debug!(block = %ticket.block, %error, "publish failed")
                }
                Ok(Err(_)) | Err(_) => {
                    tracing::debug!(block = %ticket.block, "publish still in flight; going on")
                }
            }
        }))
        .await;
    }

    async fn converge(&self, workload: &WorkloadId) -> Result<PassEnd, ReconcileError> {
        // A job keeps no replicas: its pass keeps its runs within their
        // history (and removes them all once it is deleted).
        if workload.kind.runs_to_completion() {
            self.keep_run_history(workload).await;
        }
        // Statefulset ordinals this pass removed to replace them: creating
        // one again is part of the rolling update, not a scale up.
        let mut rolled: HashSet<String> = HashSet::new();
        for _ in 0..MAX_STEPS {
            let target = self.target(workload)?;
            let (listed, tickets) = self
                .observe_and_offer(workload, &target.blocks, std::time::Instant::now())
                .await?;
            let (observed, orphans) = target.ownership.split(listed);
            if !orphans.is_empty() {
                self.report_orphans(workload, &orphans);
            }
            if target.ownership == Ownership::Stored {
                self.note_adopted(workload, &observed);
            }
            self.sync_probers(workload, &observed);
            if target.unplaced {
                self.step(
                    workload,
                    target.revision,
                    "waiting for the cluster's leader to place its replicas".to_owned(),
                );
                self.await_publishes(tickets).await;
                return Ok(PassEnd::AwaitingPlacement {
                    retry_in: AWAIT_PLACEMENT,
                });
            }
            let (observed, desired) = target.unfrozen(observed);
            let mut steps = next_steps(&desired, &observed);
            if target.deleted {
                steps.retain(|step| matches!(step, Step::Remove { .. }));
            }
            for step in &mut steps {
                match step {
                    Step::Remove { reason, .. } if target.deleted => *reason = Reason::Delete,
                    Step::Remove {
                        replica,
                        reason: Reason::Roll,
                    } => {
                        rolled.insert(replica.replica_id.clone());
                    }
                    Step::Create {
                        replica_id: Some(id),
                        reason,
                    } if rolled.contains(id.as_str()) => *reason = Reason::Roll,
                    _ => {}
                }
            }
            let mut retry_in: Option<Duration> = None;
            if let Some(core) = &target.core {
                steps.retain(|step| match step {
                    Step::Start { replica } => match self.may_restart(core, replica) {
                        Restart::Now => true,
                        Restart::After(wait) => {
                            retry_in = Some(retry_in.map_or(wait, |r| r.min(wait)));
                            false
                        }
                        Restart::Never => false,
                    },
                    _ => true,
                });
            }
            if steps.is_empty() {
                self.await_publishes(tickets).await;
                let crashes = self.lives.records(
                    observed.iter().map(|r| r.container_id.as_str()),
                    tokio::time::Instant::now(),
                );
                if let Some(retry_in) = retry_in {
                    return Ok(PassEnd::Waiting { retry_in, crashes });
                }
                if crashes.iter().any(|crash| crash.crash_looping) {
                    // Up right now, but not for long enough to count as
                    // recovered: look again once it would.
                    return Ok(PassEnd::Waiting {
                        retry_in: super::restarts::STABLE_AFTER,
                        crashes,
                    });
                }
                if target.deleted {
                    // A workload the store never had (or lost) has no
                    // deletion to finish: its containers are orphans.
                    if target.ownership != Ownership::Unaccounted {
                        self.finish_deletion(workload, &target).await?;
                    }
                    return Ok(PassEnd::Gone);
                }
                if let Some(core) = &target.core {
                    if let Some(retry_in) =
                        self.awaiting_readiness(workload, core, &target, &observed)?
                    {
                        return Ok(PassEnd::AwaitingReadiness { retry_in });
                    }
                    // The rollout is done: the release's post_command.
                    self.release_after_converged(workload, core, &target)
                        .await?;
                }
                return Ok(PassEnd::Converged(crashes));
            }
            if steps.iter().any(|step| matches!(step, Step::Remove { .. })) {
                // Surge-first: the plugins have the new set before anything
                // is drained.
                self.await_publishes(tickets).await;
            }
            self.run_batch(workload, &target, &observed, steps).await?;
        }
        Err(ReconcileError::TooManySteps)
    }

    /// When running replicas of the current spec are not ready: the step
    /// to show and how soon to look again, or the rollout's failure when a
    /// new replica has not been ready within `progress_deadline`. `None`
    /// when every running replica is ready.
    fn awaiting_readiness(
        &self,
        workload: &WorkloadId,
        core: &CoreSpec,
        target: &Target,
        observed: &[Replica],
    ) -> Result<Option<Duration>, ReconcileError> {
        let unready: Vec<&Replica> = observed
            .iter()
            .filter(|replica| replica.is_running() && replica.ready == Some(false))
            .collect();
        let Some(first) = unready.first() else {
            return Ok(None);
        };
        let deadline = core.progress_deadline();
        let why = |replica: &Replica| {
            let state = self.probes.readiness(&replica.container_id);
            match (state.and_then(|state| state.last_failure), &replica.health) {
                (Some(failure), _) => failure,
                (None, Some(health)) => format!("its HEALTHCHECK reports {health}"),
                (None, None) => "its readiness probe has not passed yet".to_owned(),
            }
        };
        for replica in &unready {
            // Only a replica this process created for the spec being rolled
            // out, and never ready since: not one found at a start, nor one
            // that was ready and turned unready.
            let overdue = self
                .probes
                .created_at(&replica.container_id)
                .is_some_and(|created| created.elapsed() > deadline);
            if replica.spec_hash == target.desired.spec_hash
                && overdue
                && !self.probes.ever_ready(&replica.container_id)
            {
                return Err(ReconcileError::NotReady(format!(
                    "replica {} was not ready within the progress deadline of {}: {} — {}; fix the probe or the image and apply again, or raise progress_deadline",
                    replica.replica_id,
                    humantime::format_duration(deadline),
                    why(replica),
                    still_serving(observed, &target.desired.spec_hash),
                )));
            }
        }
        self.step(
            workload,
            target.revision,
            format!(
                "waiting for replica {} to be ready ({})",
                first.replica_id,
                why(first)
            ),
        );
        Ok(Some(super::probes::readiness_recheck(&core.probes)))
    }

    async fn run_batch(
        &self,
        workload: &WorkloadId,
        target: &Target,
        observed: &[Replica],
        steps: Vec<Step>,
    ) -> Result<(), ReconcileError> {
        let mut taken: Vec<String> = observed.iter().map(|r| r.replica_id.clone()).collect();
        let replacing = self.passes.converged_at(workload, target.revision);
        // Each step's line for the `replica` event; a restart records its
        // own `restarted` event, so it has none.
        let mut results: Vec<Result<Option<String>, ReconcileError>> = Vec::new();
        let mut creates = Vec::new();
        let mut starts = Vec::new();
        let mut removes = Vec::new();
        for step in steps {
            match step {
                Step::Create { replica_id, reason } => {
                    let id = replica_id.unwrap_or_else(|| {
                        let refs: Vec<&str> = taken.iter().map(String::as_str).collect();
                        new_replica_id(&refs)
                    });
                    taken.push(id.clone());
                    creates.push((id, reason));
                }
                Step::Start { replica } => starts.push(replica),
                Step::Remove { replica, reason } => removes.push((replica, reason)),
            }
        }
        if let Some(core) = &target.core {
            if !creates.is_empty() {
                self.step(
                    workload,
                    target.revision,
                    creates_step(&target.desired, observed, &creates),
                );
            }
            let created = join_all(creates.into_iter().map(|(id, reason)| {
                self.create_replica(workload, core, target, id, reason, replacing)
            }))
            .await;
            // Its steps succeeded: what failed steps kept goes, once for
            // the batch.
            let has_steps = !core.init.is_empty() || core.release.is_some();
            if has_steps && created.iter().any(Result::is_ok) {
                self.clear_step_containers(workload, Ownership::Stored, None)
                    .await;
            }
            results.extend(created.into_iter().map(|result| result.map(Some)));
        }
        if !starts.is_empty() {
            self.step(
                workload,
                target.revision,
                format!("restarting {}", plural(starts.len(), "replica")),
            );
        }
        let started = join_all(starts.iter().map(|replica| self.restart_replica(replica))).await;
        results.extend(started.into_iter().map(|result| result.map(|()| None)));
        if !removes.is_empty() {
            let ids: Vec<&str> = removes.iter().map(|(r, _)| r.replica_id.as_str()).collect();
            let replicas = if ids.len() == 1 {
                "replica"
            } else {
                "replicas"
            };
            self.step(
                workload,
                target.revision,
                if target.blocks.is_empty() {
                    format!("removing {replicas} {}", ids.join(", "))
                } else {
                    let blocks: Vec<String> = target
                        .blocks
                        .iter()
                        .map(NormalisedBlock::display_name)
                        .collect();
                    format!(
                        "draining {replicas} {} ({}), budget {}",
                        ids.join(", "),
                        blocks.join(", "),
                        humantime::format_duration(target.budget)
                    )
                },
            );
        }
        let removed = join_all(removes.iter().map(|(replica, reason)| async move {
            self.remove_replica(workload, &target.blocks, replica, target.budget)
                .await
                .map(|()| {
                    Some(format!(
                        "removed replica {} ({})",
                        replica.replica_id,
                        reason.as_str()
                    ))
                })
        }))
        .await;
        results.extend(removed);
        let mut first_error = None;
        let mut events = Vec::new();
        for result in results {
            match result {
                Ok(Some(line)) => events.push(event(
                    workload,
                    EventLevel::Info,
                    EventReason::Replica,
                    line,
                )),
                Ok(None) => {}
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        self.record(&events);
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    async fn create_replica(
        &self,
        workload: &WorkloadId,
        core: &CoreSpec,
        target: &Target,
        replica_id: String,
        reason: Reason,
        replacing: bool,
    ) -> Result<String, ReconcileError> {
        let mut spec = self.replica_spec(workload, core, target, replica_id);
        // An image built from source at apply on another node of the
        // cluster is built here first, from that node's context.
        self.ensure_built_image(workload, core).await?;
        // voodu's release commands, once per release, before its first
        // replica; then its init steps, in declaration order, before the
        // replica's main container. One that fails stops here. They join
        // the replica's networks, so `voodu0` is made first.
        if core.release.is_some() || !core.init.is_empty() {
            (|| self.runtime.ensure_network()).retry(backoff()).await?;
        }
        if let Some(release) = &core.release {
            self.release_before_create(workload, &spec, release, &core.container_hash())
                .await?;
        }
        for step in &core.init {
            self.run_init_step(workload, &spec, step).await?;
        }
        let mut attempts = 0;
        let created = loop {
            attempts += 1;
            let result = (|| async {
                self.runtime.ensure_network().await?;
                self.runtime.create(&spec).await
            })
            .retry(backoff())
            // A name taken by another root is answered below; an image the
            // engine could not pull will not be pulled a moment later.
            .when(|error| {
                !matches!(
                    error,
                    RuntimeError::NameTaken { .. } | RuntimeError::ImageUnavailable { .. }
                )
            })
            .notify(|error, after| tracing::warn!(%error, ?after, "creating a replica failed; retrying"))
            .await;
            match result {
                // Another root's replica holds this deployment id's name:
                // take another id.
                Err(RuntimeError::NameTaken { .. })
                    if workload.kind == WorkloadKind::Deployment && attempts < 4 =>
                {
                    spec.replica_id = new_replica_id(&[spec.replica_id.as_str()]);
                }
                other => break other,
            }
        };
        let replica = match created {
            Ok(replica) => {
                self.probes.created(&replica.container_id);
                replica
            }
            Err(error) => {
                // A newer revision or a delete came in meanwhile: this
                // start belonged to no request any more.
                if self.superseded(workload, target.revision) {
                    tracing::info!(%workload, %error, replica = %spec.replica_id, "a replica of a superseded revision could not start");
                } else {
                    self.record(&[event(
                        workload,
                        EventLevel::Error,
                        EventReason::CreateFailed,
                        format!("could not start replica {}: {error}", spec.replica_id),
                    )]);
                }
                return Err(error.into());
            }
        };
        let replaced = replacing && reason == Reason::ScaleUp;
        let why = if replaced {
            self.record(&[event(
                workload,
                EventLevel::Info,
                EventReason::Replaced,
                format!(
                    "started replica {} in place of one that was removed",
                    replica.replica_id
                ),
            )]);
            "replacing a replica that was removed"
        } else {
            reason.as_str()
        };
        Ok(format!(
            "started replica {} ({why}) at {}",
            replica.replica_id,
            replica.ip.as_deref().unwrap_or("no address")
        ))
    }

    /// The workload's ports as this node publishes them: on a cluster node
    /// with `--advertise IP`, a port published on loopback at a port
    /// Docker picks (voodu's `"8084"`) is published on the advertised
    /// address instead, where the other hosts (their balancers, with
    /// `host` addressing) reach it; on one host, as written.
    fn ports_on_this_node(&self, ports: &[PortMapping]) -> Vec<PortMapping> {
        let advertised: Option<IpAddr> = self
            .cluster
            .get()
            .and_then(|cluster| cluster.advertised_address())
            .and_then(|address| address.parse().ok());
        ports
            .iter()
            .map(|port| match advertised {
                Some(address) if port.host_ip.is_loopback() && port.host_port.is_none() => {
                    PortMapping {
                        host_ip: address,
                        ..*port
                    }
                }
                _ => *port,
            })
            .collect()
    }

    /// What a replica of `target` is created from.
    pub(super) fn replica_spec(
        &self,
        workload: &WorkloadId,
        core: &CoreSpec,
        target: &Target,
        replica_id: String,
    ) -> ReplicaSpec {
        ReplicaSpec {
            workload: workload.clone(),
            replica_id,
            spec_hash: target.desired.spec_hash.clone(),
            image: core.image.clone().unwrap_or_default(),
            command: core.command.clone(),
            env: core.env.clone(),
            ports: self.ports_on_this_node(&core.ports),
            volumes: core.volumes.clone(),
            networks: core.networks.clone(),
            resources: core.resources,
            owner: self.config.owner.clone(),
            store_id: self.store_id.clone(),
            probes: core.probes.clone(),
            shape: core.shape.clone(),
        }
    }

    /// Runs one init step for a replica about to be created, again after a
    /// failure, 2 s apart, as often as its `retries` say. A step that
    /// still fails records `init-failed`, naming the step, how it ended,
    /// its last output and its kept container; the replica is not created.
    async fn run_init_step(
        &self,
        workload: &WorkloadId,
        spec: &ReplicaSpec,
        step: &InitStep,
    ) -> Result<(), ReconcileError> {
        let attempts = step.retries + 1;
        let mut attempt = 1;
        loop {
            let outcome = self.runtime.run_init(spec, step).await?;
            self.keep_only_the_last_failed(workload, &outcome).await;
            let Some(failure) = outcome.failure(step.timeout) else {
                self.record(&[event(
                    workload,
                    EventLevel::Info,
                    EventReason::InitFinished,
                    format!(
                        "replica {}: init step {:?} finished",
                        spec.replica_id, step.name
                    ),
                )]);
                return Ok(());
            };
            if attempt < attempts {
                attempt += 1;
                tokio::time::sleep(INIT_RETRY_AFTER).await;
                continue;
            }
            let message = format!(
                "replica {}: init step {:?} {failure} (after {attempts} attempt(s)); the replica was not started",
                spec.replica_id, step.name
            );
            self.record(&[event(
                workload,
                EventLevel::Error,
                EventReason::InitFailed,
                message.clone(),
            )]);
            return Err(ReconcileError::Init(message));
        }
    }

    /// Starts a stopped replica again and records its one `restarted`
    /// event.
    async fn restart_replica(&self, replica: &Replica) -> Result<(), ReconcileError> {
        self.lives.starting(&replica.container_id);
        match (|| self.runtime.start(replica))
            .retry(backoff())
            .when(|error| !matches!(error, RuntimeError::NotRunning { .. }))
            .await
        {
            Ok(started) => {
                self.tally.tell(|tally| tally.replica_restarted());
                self.lives
                    .restarted(&replica.container_id, tokio::time::Instant::now(), true);
                let exit = self
                    .lives
                    .last_exit_code(&replica.container_id)
                    .map(|code| format!(" after it exited with code {code}"))
                    .unwrap_or_default();
                self.record(&[event(
                    &replica.workload,
                    EventLevel::Info,
                    EventReason::Restarted,
                    format!(
                        "restarted replica {}{exit} at {}",
                        started.replica_id,
                        started.ip.as_deref().unwrap_or("no address")
                    ),
                )]);
                Ok(())
            }
            // It died again at once: its death is recorded by its event and
            // the next restart waits out the back-off.
            Err(RuntimeError::NotRunning { .. }) => {
                self.tally.tell(|tally| tally.replica_restarted());
                self.lives
                    .restarted(&replica.container_id, tokio::time::Instant::now(), false);
                tracing::info!(replica = %replica.container_name, "restarted a replica, which stopped again at once");
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }

    pub(super) async fn remove_replica(
        &self,
        workload: &WorkloadId,
        blocks: &[NormalisedBlock],
        replica: &Replica,
        budget: Duration,
    ) -> Result<(), ReconcileError> {
        self.retire_replica(workload, blocks, replica, budget, Retire::Remove)
            .await
    }

    /// Drains `replica` in every block (here and, in a cluster, on every
    /// other node), then removes it or, for `vd stop`, stops it and keeps
    /// its container.
    pub(crate) async fn retire_replica(
        &self,
        workload: &WorkloadId,
        blocks: &[NormalisedBlock],
        replica: &Replica,
        budget: Duration,
        how: Retire,
    ) -> Result<(), ReconcileError> {
        if !blocks.is_empty() {
            let serving = self.as_serving(replica);
            let on_peers = async {
                match self.cluster.get() {
                    Some(cluster) => Some(cluster.drain_on_peers(workload, &serving, budget).await),
                    None => None,
                }
            };
            let (outcome, peers) = futures_util::join!(
                drain_replica(
                    &self.plugins,
                    &self.tally,
                    workload,
                    blocks,
                    &serving,
                    budget
                ),
                on_peers
            );
            self.record(&drain_events(
                workload,
                replica,
                budget,
                &outcome,
                peers.as_ref(),
            ));
        }
        if how == Retire::Stop {
            self.lives.stopping(&replica.container_id);
            let stopped = (|| self.runtime.stop(replica, STOP_TIMEOUT_SECS))
                .retry(backoff())
                .notify(
                    |error, after| tracing::warn!(%error, ?after, "stopping a replica failed; retrying"),
                )
                .await;
            if stopped.is_err() {
                self.lives.removal_failed(&replica.container_id);
            }
            return Ok(stopped?);
        }
        self.lives.removing(&replica.container_id);
        let removed = (|| self.runtime.remove(replica, STOP_TIMEOUT_SECS))
            .retry(backoff())
            .notify(
                |error, after| tracing::warn!(%error, ?after, "removing a replica failed; retrying"),
            )
            .await;
        if removed.is_err() {
            self.lives.removal_failed(&replica.container_id);
        }
        removed?;
        self.lives.removed(&replica.container_id);
        self.forget_listed(&replica.container_id);
        Ok(())
    }
}

/// The events of one replica's drain, here and on the other nodes: a
/// warning per block (or node) that had not finished, and the blocks that
/// said drained.
fn drain_events(
    workload: &WorkloadId,
    replica: &Replica,
    budget: Duration,
    outcome: &DrainOutcome,
    peers: Option<&PeerDrains>,
) -> Vec<voodu_store::NewEvent> {
    let mut events = Vec::new();
    let unfinished = |on: &str, unfinished: &crate::drain::Unfinished| {
        event(
            workload,
            EventLevel::Warning,
            EventReason::DrainUnfinished,
            format!(
                "replica {}: {} (plugin {}){on} {}; removed anyway",
                replica.replica_id, unfinished.block, unfinished.plugin, unfinished.why
            ),
        )
    };
    events.extend(outcome.unfinished.iter().map(|u| unfinished("", u)));
    let mut drained_on = Vec::new();
    if let Some(peers) = peers {
        for (node, answer) in &peers.answered {
            events.extend(
                answer
                    .unfinished
                    .iter()
                    .map(|u| unfinished(&format!(" on node {node}"), u)),
            );
            if !answer.drained.is_empty() {
                drained_on.push(node.to_string());
            }
        }
        events.extend(peers.silent.iter().map(|node| {
            event(
                workload,
                EventLevel::Warning,
                EventReason::DrainUnfinished,
                format!(
                    "replica {}: node {node} did not answer the drain within its {} budget, so it counts as not drained; removed anyway",
                    replica.replica_id,
                    humantime::format_duration(budget)
                ),
            )
        }));
    }
    if !outcome.drained.is_empty() || !drained_on.is_empty() {
        let on_nodes = match drained_on.len() {
            0 => String::new(),
            1 => format!(", and on node {}", drained_on[0]),
            _ => format!(", and on nodes {}", drained_on.join(", ")),
        };
        let here = if outcome.drained.is_empty() {
            "the other nodes' plugins".to_owned()
        } else {
            outcome.drained.join(", ")
        };
        events.push(event(
            workload,
            EventLevel::Info,
            EventReason::Drained,
            format!(
                "replica {} drained by {here} in {} ms{on_nodes}",
                replica.replica_id,
                outcome.elapsed.as_millis()
            ),
        ));
    }
    events
}

/// The step a batch of creates shows: a rolling update counts the
/// replacements against the replica count (`replacing replica 2/4`); a
/// statefulset's ordinal counts itself (`starting replica 2/3`); anything
/// else names how many start (the CLI counts them as they do).
pub(super) fn creates_step(
    desired: &Desired,
    observed: &[Replica],
    creates: &[(String, Reason)],
) -> String {
    let reason = creates[0].1;
    if reason == Reason::Roll {
        let current = observed
            .iter()
            .filter(|replica| replica.spec_hash == desired.spec_hash)
            .count();
        let (first, last) = (current + 1, current + creates.len());
        if first == last {
            format!(
                "replacing replica {first}/{} ({})",
                desired.replicas,
                reason.as_str()
            )
        } else {
            format!(
                "replacing replicas {first}-{last}/{} ({})",
                desired.replicas,
                reason.as_str()
            )
        }
    } else if let (WorkloadKind::Statefulset, [(ordinal, _)]) = (desired.kind, creates) {
        // Ordinals start one at a time, in order: count them by ordinal.
        let number = ordinal.parse::<u32>().map_or(1, |n| n + 1);
        format!(
            "starting replica {number}/{} ({})",
            desired.replicas,
            reason.as_str()
        )
    } else {
        format!(
            "starting {} ({})",
            plural(creates.len(), "replica"),
            reason.as_str()
        )
    }
}

/// What still serves while a rollout has failed, truthfully: the replicas
/// it was to replace, other ready ones, or none.
pub(super) fn still_serving(observed: &[Replica], spec_hash: &str) -> String {
    let serving: Vec<&Replica> = observed.iter().filter(|r| r.is_serving()).collect();
    let old = serving.iter().filter(|r| r.spec_hash != spec_hash).count();
    let keep = if serving.len() == 1 { "keeps" } else { "keep" };
    match (serving.len(), old) {
        (0, _) => "no replica of it is serving".to_owned(),
        (_, 0) => format!("{} {keep} serving", plural(serving.len(), "ready replica")),
        (_, old) if old == serving.len() => format!(
            "the {} it was to replace {keep} serving",
            plural(old, "replica")
        ),
        (all, old) => format!(
            "{} {keep} serving, {old} of them of the revision it was to replace",
            plural(all, "replica")
        ),
    }
}

/// `1 replica`, `3 replicas`.
pub(super) fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}
