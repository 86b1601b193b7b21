//! The reconciler: where desired state, running containers and plugins
//! meet. It is the only part that uses both the runtime and the plugin
//! handles.
//!
//! One workload converges one [`plan::Step`] at a time. Before each step it
//! looks at the containers and publishes the live set to every block
//! ([`publish`]), so a rolling update goes: start the new replica, publish,
//! drain the old one ([`drain`]), remove it, publish, and on to the next.
//! Docker's event stream triggers a publish between reconciles, so a replica
//! that dies is withdrawn at once.

pub mod drain;
pub mod plan;
pub mod publish;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde_json::json;
use sha2::{Digest, Sha256};

use self::drain::drain_replica;
use self::plan::{next_step, Desired, Step};
use self::publish::Publisher;
use crate::apply::ApplyProgress;
use crate::manifest::core_spec::CoreSpec;
use crate::manifest::{NormalisedBlock, WorkloadId};
use crate::plugin::PluginRegistry;
use crate::runtime::naming::new_replica_id;
use crate::runtime::{DockerRuntime, Replica, ReplicaSpec, RuntimeError};
use crate::store::{EventLevel, NewEvent, Store, StoreError, StoredWorkload};

/// How long a removed container gets to exit after SIGTERM.
const STOP_TIMEOUT_SECS: i32 = 10;
/// A bound on steps per converge, against a plan that never settles.
const MAX_STEPS: usize = 500;

/// Where progress goes while converging.
pub type Progress<'a> = &'a mut (dyn FnMut(ApplyProgress) + Send);

/// Why a workload did not converge.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The engine failed, after retries.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored core spec does not parse.
    #[error("the stored core spec is unreadable: {0}")]
    CoreSpec(serde_json::Error),
    /// The plan did not settle.
    #[error("gave up after {MAX_STEPS} steps without converging")]
    TooManySteps,
}

/// What converging one workload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConvergeReport {
    /// One line per step taken.
    pub steps: Vec<String>,
    /// Drains that did not finish, publishes that failed.
    pub warnings: Vec<String>,
}

/// The hash of everything that shapes a container. `replicas`, the drain
/// budget and the blocks are left out, so scaling or a plugin block change
/// does not replace running replicas.
pub fn container_spec_hash(core: &CoreSpec) -> String {
    let shaping = json!({
        "image": core.image,
        "command": core.command,
        "env": core.env,
        "ports": core.ports,
        "volumes": core.volumes,
        "networks": core.networks,
        "restart": core.restart,
    });
    Sha256::digest(shaping.to_string().as_bytes())
        .iter()
        .take(12)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The reconciler of one controller.
pub struct Reconciler {
    runtime: DockerRuntime,
    plugins: Arc<PluginRegistry>,
    store: Arc<Mutex<Store>>,
    publisher: Publisher,
    /// One workload converges at a time.
    converging: tokio::sync::Mutex<()>,
    /// Looking at containers and publishing what was seen is one step.
    publishing: tokio::sync::Mutex<()>,
    handle: tokio::runtime::Handle,
    /// This controller's id on the engine's containers (from its root).
    owner: String,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler").finish_non_exhaustive()
    }
}

fn event(workload: &WorkloadId, level: EventLevel, reason: &str, message: String) -> NewEvent {
    NewEvent {
        workload: workload.clone(),
        level,
        reason: reason.into(),
        message,
    }
}

impl Reconciler {
    /// A reconciler on `runtime`, running its async work on `handle`.
    /// `owner` names this controller on the containers it creates; only
    /// those are ever swept as orphans.
    pub fn new(
        runtime: DockerRuntime,
        plugins: Arc<PluginRegistry>,
        store: Arc<Mutex<Store>>,
        handle: tokio::runtime::Handle,
        owner: String,
    ) -> Self {
        Reconciler {
            runtime,
            plugins,
            store,
            publisher: Publisher::default(),
            converging: tokio::sync::Mutex::new(()),
            publishing: tokio::sync::Mutex::new(()),
            handle,
            owner,
        }
    }

    /// The engine.
    pub fn runtime(&self) -> &DockerRuntime {
        &self.runtime
    }

    /// Runs async work from a blocking thread (an API request).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle.block_on(future)
    }

    fn record(&self, events: &[NewEvent]) {
        if let Err(error) = self.store.lock().record_events(events) {
            tracing::warn!(%error, "events could not be recorded");
        }
    }

    /// The containers of one workload, or of all, retried on engine errors.
    pub async fn replicas(
        &self,
        workload: Option<&WorkloadId>,
    ) -> Result<Vec<Replica>, RuntimeError> {
        (|| self.runtime.list(workload))
            .retry(backoff())
            .notify(|error, after| tracing::warn!(%error, ?after, "listing containers failed; retrying"))
            .await
    }

    /// Looks at a workload's containers and publishes the live set to every
    /// block whose set changed.
    /// Looks at a workload's containers and publishes the live set to every
    /// block whose set changed. `dead` is treated as not running whatever the
    /// listing says: Docker reports `die` before its listing catches up.
    async fn observe_and_publish(
        &self,
        workload: &WorkloadId,
        blocks: &[NormalisedBlock],
        dead: Option<&str>,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<Replica>, RuntimeError> {
        let _publishing = self.publishing.lock().await;
        let mut observed = self.replicas(Some(workload)).await?;
        if let Some(dead) = dead {
            observed
                .iter_mut()
                .filter(|replica| replica.replica_id == dead)
                .for_each(|replica| replica.state = "exited".into());
        }
        let published = tokio::task::block_in_place(|| {
            self.publisher
                .publish(&self.plugins, &self.store, workload, blocks, &observed)
        });
        warnings.extend(published);
        Ok(observed)
    }

    /// Publishes a stored workload's live set if it changed: what Docker's
    /// events trigger between reconciles. `dead` names a replica an event
    /// just reported dead.
    pub async fn republish(
        &self,
        workload: &WorkloadId,
        dead: Option<&str>,
    ) -> Result<(), ReconcileError> {
        let stored = self.store.lock().workload(workload)?;
        let Some(stored) = stored else {
            return Ok(());
        };
        let mut warnings = Vec::new();
        self.observe_and_publish(workload, &stored.blocks, dead, &mut warnings)
            .await?;
        Ok(())
    }

    /// Converges one stored workload to its desired state.
    pub async fn converge(
        &self,
        workload: &WorkloadId,
        progress: Progress<'_>,
    ) -> Result<ConvergeReport, ReconcileError> {
        let _converging = self.converging.lock().await;
        let stored = self.store.lock().workload(workload)?;
        let Some(stored) = stored else {
            return Ok(ConvergeReport::default());
        };
        let core: CoreSpec =
            serde_json::from_value(stored.core_spec.clone()).map_err(ReconcileError::CoreSpec)?;
        let desired = Desired {
            kind: workload.kind,
            replicas: core.replicas,
            spec_hash: container_spec_hash(&core),
        };
        self.converge_to(
            workload,
            &desired,
            Some(&core),
            &stored.blocks,
            core.drain_budget(),
            progress,
        )
        .await
    }

    /// Drains and removes every container of a workload that was deleted
    /// from the store, publishing after each removal.
    pub async fn remove_deleted(
        &self,
        deleted: &StoredWorkload,
        progress: Progress<'_>,
    ) -> Result<ConvergeReport, ReconcileError> {
        let _converging = self.converging.lock().await;
        let budget = serde_json::from_value::<CoreSpec>(deleted.core_spec.clone())
            .map(|core| core.drain_budget())
            .unwrap_or(crate::manifest::core_spec::DEFAULT_DRAIN_TIMEOUT);
        let desired = Desired {
            kind: deleted.id.kind,
            replicas: 0,
            spec_hash: String::new(),
        };
        let report = self
            .converge_to(
                &deleted.id,
                &desired,
                None,
                &deleted.blocks,
                budget,
                progress,
            )
            .await?;
        self.publisher.forget_workload(&deleted.id);
        self.store.lock().clear_publications(&deleted.id)?;
        if let Err(error) = self.runtime.remove_network_if_unused().await {
            tracing::warn!(%error, "the voodu0 network could not be removed");
        }
        Ok(report)
    }

    async fn converge_to(
        &self,
        workload: &WorkloadId,
        desired: &Desired,
        core: Option<&CoreSpec>,
        blocks: &[NormalisedBlock],
        budget: Duration,
        progress: Progress<'_>,
    ) -> Result<ConvergeReport, ReconcileError> {
        let mut report = ConvergeReport::default();
        let name = workload.to_string();
        for _ in 0..MAX_STEPS {
            let observed = self
                .observe_and_publish(workload, blocks, None, &mut report.warnings)
                .await?;
            let Some(step) = next_step(desired, &observed) else {
                return Ok(report);
            };
            let line = match (step, core) {
                (Step::Create { replica_id, reason }, Some(core)) => {
                    let taken: Vec<&str> = observed.iter().map(|r| r.replica_id.as_str()).collect();
                    let spec = ReplicaSpec {
                        workload: workload.clone(),
                        replica_id: replica_id.unwrap_or_else(|| new_replica_id(&taken)),
                        spec_hash: desired.spec_hash.clone(),
                        image: core.image.clone().unwrap_or_default(),
                        command: core.command.clone(),
                        env: core.env.clone(),
                        ports: core.port_mappings(),
                        volumes: core.volumes.clone(),
                        networks: core.networks.clone(),
                        restart: core
                            .restart
                            .clone()
                            .unwrap_or_else(|| "unless-stopped".into()),
                        owner: self.owner.clone(),
                    };
                    let created = (|| async {
                        self.runtime.ensure_network().await?;
                        self.runtime.create(&spec).await
                    })
                    .retry(backoff())
                    .notify(|error, after| tracing::warn!(%error, ?after, "creating a replica failed; retrying"))
                    .await;
                    let replica = match created {
                        Ok(replica) => replica,
                        Err(error) => {
                            self.record(&[event(
                                workload,
                                EventLevel::Error,
                                "create-failed",
                                format!("could not start replica {}: {error}", spec.replica_id),
                            )]);
                            return Err(error.into());
                        }
                    };
                    format!(
                        "started replica {} ({}) at {}",
                        replica.replica_id,
                        reason.as_str(),
                        replica.ip.as_deref().unwrap_or("no address")
                    )
                }
                (Step::Create { .. }, None) => return Ok(report),
                (Step::Start { replica }, _) => {
                    let started = (|| self.runtime.start(&replica)).retry(backoff()).await?;
                    format!(
                        "restarted replica {} at {}",
                        started.replica_id,
                        started.ip.as_deref().unwrap_or("no address")
                    )
                }
                (Step::Remove { replica, reason }, _) => {
                    self.remove_replica(workload, blocks, &replica, budget, &mut report, progress)
                        .await?;
                    format!(
                        "removed replica {} ({})",
                        replica.replica_id,
                        reason.as_str()
                    )
                }
            };
            self.record(&[event(workload, EventLevel::Info, "replica", line.clone())]);
            progress(ApplyProgress::Runtime {
                workload: name.clone(),
                message: line.clone(),
            });
            report.steps.push(line);
        }
        Err(ReconcileError::TooManySteps)
    }

    async fn remove_replica(
        &self,
        workload: &WorkloadId,
        blocks: &[NormalisedBlock],
        replica: &Replica,
        budget: Duration,
        report: &mut ConvergeReport,
        progress: Progress<'_>,
    ) -> Result<(), ReconcileError> {
        if !blocks.is_empty() {
            progress(ApplyProgress::Runtime {
                workload: workload.to_string(),
                message: format!("draining replica {}", replica.replica_id),
            });
            let outcome = tokio::task::block_in_place(|| {
                drain_replica(&self.plugins, workload, blocks, replica, budget)
            });
            let mut events = Vec::new();
            for unfinished in &outcome.unfinished {
                let message = format!(
                    "replica {}: {} (plugin {}) {}; removed anyway",
                    replica.replica_id, unfinished.block, unfinished.plugin, unfinished.why
                );
                events.push(event(
                    workload,
                    EventLevel::Warning,
                    "drain-unfinished",
                    message.clone(),
                ));
                report.warnings.push(message);
            }
            if !outcome.drained.is_empty() {
                events.push(event(
                    workload,
                    EventLevel::Info,
                    "drained",
                    format!(
                        "replica {} drained by {} in {} ms",
                        replica.replica_id,
                        outcome.drained.join(", "),
                        outcome.elapsed.as_millis()
                    ),
                ));
            }
            self.record(&events);
        }
        (|| {
            self.runtime
                .remove(replica, STOP_TIMEOUT_SECS)
        })
        .retry(backoff())
        .notify(
            |error, after| tracing::warn!(%error, ?after, "removing a replica failed; retrying"),
        )
        .await?;
        Ok(())
    }

    /// Converges every stored workload, and removes this controller's
    /// replicas of workloads no longer stored (a delete that failed half
    /// way, or a controller stopped during one). Failures are returned and
    /// do not stop the others.
    pub async fn converge_all(&self) -> Vec<(WorkloadId, ReconcileError)> {
        let workloads = match self.store.lock().workloads(None) {
            Ok(workloads) => workloads,
            Err(error) => {
                tracing::error!(%error, "the store could not be read");
                return Vec::new();
            }
        };
        let mut failures = Vec::new();
        for stored in &workloads {
            if let Err(error) = self.converge(&stored.id, &mut |_| {}).await {
                tracing::warn!(workload = %stored.id, %error, "did not converge");
                failures.push((stored.id.clone(), error));
            }
        }
        let orphans: std::collections::BTreeSet<WorkloadId> = match self.replicas(None).await {
            Ok(replicas) => replicas
                .into_iter()
                .filter(|replica| replica.owner.as_deref() == Some(self.owner.as_str()))
                .map(|replica| replica.workload)
                .filter(|id| !workloads.iter().any(|stored| &stored.id == id))
                .collect(),
            Err(error) => {
                tracing::warn!(%error, "listing replicas for orphans failed");
                Default::default()
            }
        };
        for orphan in orphans {
            let last = self.store.lock().last_revision(&orphan).ok().flatten();
            let (core_spec, blocks) = last.unwrap_or_else(|| (json!({}), Vec::new()));
            let deleted = StoredWorkload {
                id: orphan.clone(),
                revision: 0,
                spec_hash: String::new(),
                core_spec,
                blocks,
                source: None,
                created_at: String::new(),
                updated_at: String::new(),
            };
            match self.remove_deleted(&deleted, &mut |_| {}).await {
                Ok(_) => self.record(&[event(
                    &orphan,
                    EventLevel::Warning,
                    "orphans-removed",
                    "removed the replicas of this deleted workload that an earlier delete left behind".into(),
                )]),
                Err(error) => failures.push((orphan, error)),
            }
        }
        failures
    }

    /// Follows Docker's events for voodu's containers and republishes the
    /// workload each one concerns. Reconnects, with backoff, if the stream
    /// ends; after a reconnect every workload is republished, in case an
    /// event was missed.
    pub async fn follow_events(self: Arc<Self>) {
        let mut pause = Duration::from_millis(100);
        loop {
            let mut events = Box::pin(self.runtime.events());
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        pause = Duration::from_millis(100);
                        tracing::debug!(workload = %event.workload, replica = %event.replica_id, action = %event.action, "container event");
                        let dead = matches!(event.action.as_str(), "die" | "destroy" | "oom")
                            .then_some(event.replica_id.as_str());
                        if let Err(error) = self.republish(&event.workload, dead).await {
                            tracing::warn!(%error, "republish after an event failed");
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the event stream failed");
                        break;
                    }
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(10));
            let stored = self.store.lock().workloads(None).unwrap_or_default();
            for workload in stored {
                let _ = self.republish(&workload.id, None).await;
            }
        }
    }

    /// Replays the store at start-up, then converges every workload again
    /// every `every`, so missed events and failed steps are repaired.
    pub async fn keep_converging(self: Arc<Self>, every: Duration) {
        loop {
            let failures = self.converge_all().await;
            let pause = if failures.is_empty() {
                every
            } else {
                // Docker errors: try again sooner.
                every.min(Duration::from_secs(5))
            };
            for (workload, error) in failures {
                self.record(&[event(
                    &workload,
                    EventLevel::Error,
                    "converge-failed",
                    format!(
                        "did not converge: {error}; retrying in {}",
                        humantime::format_duration(pause)
                    ),
                )]);
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// Retries engine calls: 3 more attempts, from 100 ms, doubling.
fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_times(3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn core(value: serde_json::Value) -> CoreSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn scaling_and_drain_budget_do_not_change_the_container_hash() {
        let base =
            json!({"image": "esl:1", "replicas": 1, "ports": ["8084"], "drain_timeout": "30s"});
        let mut scaled = base.clone();
        scaled["replicas"] = json!(5);
        scaled["drain_timeout"] = json!("1m");
        let mut new_image = base.clone();
        new_image["image"] = json!("esl:2");
        let mut new_env = base.clone();
        new_env["env"] = json!({"A": "1"});
        assert_eq!(
            container_spec_hash(&core(base.clone())),
            container_spec_hash(&core(scaled))
        );
        assert_ne!(
            container_spec_hash(&core(base.clone())),
            container_spec_hash(&core(new_image))
        );
        assert_ne!(
            container_spec_hash(&core(base)),
            container_spec_hash(&core(new_env))
        );
    }
}
