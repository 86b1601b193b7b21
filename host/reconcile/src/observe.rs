//! Observing a workload: listing its containers through the runtime,
//! marking each replica's readiness and deaths, and offering every block
//! its live set, in listing order (the workload's observe lock).

use std::sync::Arc;

use voodu_model::serving::ServingReplica;
use voodu_model::WorkloadId;
use voodu_runtime::{Replica, RuntimeError};

use crate::*;

/// What observing owns: each workload's observe lock, its last listing,
/// and the counter that numbers listings. Each map's lock is held only to
/// read or write one entry.
#[derive(Debug, Default)]
pub(crate) struct Observations {
    /// Each workload's observe lock (see the crate doc).
    locks: Mutex<HashMap<WorkloadId, Arc<tokio::sync::Mutex<()>>>>,
    /// Each workload's last listing (see
    /// [`Reconciler::reoffer_last_observed`]).
    last: Mutex<HashMap<WorkloadId, Observed>>,
    /// Numbers every listing, to keep their offers in order.
    listings: std::sync::atomic::AtomicU64,
}

impl Observations {
    /// Forgets a workload's last listing (deleted, or without probes now).
    pub(crate) fn forget_workload(&self, workload: &WorkloadId) {
        self.last.lock().remove(workload);
    }
}

/// A workload's last container listing, and the blocks it was offered to.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    /// The listing's number: a higher one is newer.
    number: u64,
    replicas: Vec<Replica>,
    blocks: Vec<NormalisedBlock>,
}

impl Reconciler {
    /// Offers every stored block of a workload its live set now, outside
    /// any pass.
    pub(crate) async fn offer_current(&self, workload: &WorkloadId) {
        let blocks = match self.store.workload(workload) {
            Ok(Some(stored)) => stored.blocks,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, %workload, "the blocks to republish could not be read");
                return;
            }
        };
        let since = std::time::Instant::now();
        if let Err(error) = self.observe_and_offer(workload, &blocks, since).await {
            tracing::warn!(%error, %workload, "the live set could not be listed to republish");
        }
    }

    /// This controller's containers, of one workload or all, retried on
    /// engine errors.
    pub async fn replicas(
        &self,
        workload: Option<&WorkloadId>,
    ) -> Result<Vec<Replica>, RuntimeError> {
        (|| self.runtime.list(workload))
            .retry(backoff())
            .notify(|error, after| tracing::warn!(%error, ?after, "listing containers failed; retrying"))
            .await
    }

    /// What a running replica uses now, from the engine's stats API (about
    /// a second: the engine samples twice).
    pub async fn usage(
        &self,
        replica: &Replica,
    ) -> Result<voodu_runtime::ReplicaUsage, RuntimeError> {
        self.runtime.usage(replica).await
    }

    /// One replica's log, one item per line.
    pub fn replica_logs(
        &self,
        replica: &Replica,
        request: &voodu_runtime::LogRequest,
    ) -> futures_util::stream::BoxStream<'static, Result<String, RuntimeError>> {
        self.runtime.logs(replica, request)
    }

    /// The image `tag` built from `archive` for a `build` block, unless
    /// the engine has it already (an unchanged context) and `force` is not
    /// asked; each line the build writes goes to `progress`. Returns
    /// whether it built.
    pub async fn build_image(
        &self,
        tag: &str,
        archive: Vec<u8>,
        build: &voodu_model::build::Build,
        force: bool,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<bool, RuntimeError> {
        if !force && self.runtime.has_image(tag).await? {
            return Ok(false);
        }
        self.runtime
            .build_image(tag, archive, build, progress)
            .await?;
        Ok(true)
    }

    /// Runs `command` in a running replica (`vd exec`), what it writes
    /// sent to `output` as it comes, its standard input (and terminal)
    /// the `session`'s when there is one; returns its exit code.
    pub async fn exec_in(
        &self,
        replica: &Replica,
        command: &voodu_runtime::ExecCommand,
        output: &tokio::sync::mpsc::UnboundedSender<voodu_runtime::ExecOutput>,
        session: Option<voodu_runtime::ExecSession>,
    ) -> Result<i64, RuntimeError> {
        self.runtime
            .exec(replica, command, Some(output), session)
            .await
    }

    /// Like [`Reconciler::replicas`], with the containers Docker just
    /// reported dead shown as exited even while its listing lags.
    pub async fn live_replicas(
        &self,
        workload: Option<&WorkloadId>,
    ) -> Result<Vec<Replica>, RuntimeError> {
        let mut replicas = self.replicas(workload).await?;
        self.lives.mark_dead(&mut replicas);
        self.mark_readiness(workload, &mut replicas);
        self.lives.mark_restarts(&mut replicas);
        Ok(replicas)
    }

    /// This controller's replicas of `workload` (or of all), with the
    /// runs of its jobs as rows of their own (`run-<id>`), for listings,
    /// logs and exec; never what a pass plans with.
    pub async fn replicas_and_runs(
        &self,
        workload: Option<&WorkloadId>,
    ) -> Result<Vec<Replica>, RuntimeError> {
        let mut listed = self.live_replicas(workload).await?;
        if workload.is_none_or(|workload| workload.kind.runs_to_completion()) {
            let runs = self.runtime.job_runs(workload).await?;
            listed.extend(runs.iter().map(voodu_runtime::JobRun::as_listed));
        }
        Ok(listed)
    }

    pub(crate) fn observe_lock(&self, workload: &WorkloadId) -> Arc<tokio::sync::Mutex<()>> {
        self.observations
            .locks
            .lock()
            .entry(workload.clone())
            .or_default()
            .clone()
    }

    /// Lists a workload's containers and offers every block its live set.
    /// Containers Docker reported dead count as not running whatever the
    /// listing says. `since`: when the change that asks for it was seen,
    /// which the publish latency counts from.
    pub(crate) async fn observe_and_offer(
        &self,
        workload: &WorkloadId,
        blocks: &[NormalisedBlock],
        since: std::time::Instant,
    ) -> Result<(Vec<Replica>, Vec<PublishTicket>), RuntimeError> {
        // The listing is numbered before it starts, and the engine is not
        // waited on under the lock: a readiness flip is offered while a
        // listing is in flight. Under the lock, a listing older than one
        // already offered gives way to that newer one, so sets are never
        // published out of order.
        let number = self
            .observations
            .listings
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let listed = self.live_replicas(Some(workload)).await?;
        let lock = self.observe_lock(workload);
        let _observing = lock.lock().await;
        let mut observed = {
            let mut last = self.observations.last.lock();
            match last.get(workload) {
                Some(newer) if newer.number > number => newer.replicas.clone(),
                _ => {
                    last.insert(
                        workload.clone(),
                        Observed {
                            number,
                            replicas: listed.clone(),
                            blocks: blocks.to_vec(),
                        },
                    );
                    listed
                }
            }
        };
        // Deaths and readiness as they are now, not as when listing began.
        self.lives.mark_dead(&mut observed);
        self.mark_readiness(Some(workload), &mut observed);
        let tickets = self.offer_serving(workload, blocks, &observed, since);
        Ok((observed, tickets))
    }

    /// A replica of this controller's, as endpoints are computed from it
    /// (here, or on the other nodes of its cluster).
    pub(crate) fn as_serving(&self, replica: &Replica) -> ServingReplica {
        let cluster = self.cluster.get();
        let host_address = cluster
            .and_then(|cluster| cluster.advertised_address())
            .map(str::to_owned)
            .or_else(|| replica.host_ip.clone())
            .unwrap_or_else(|| std::net::Ipv4Addr::LOCALHOST.to_string());
        ServingReplica {
            node: cluster.map(|cluster| cluster.node().clone()),
            replica_id: replica.replica_id.clone(),
            ip: replica.ip.clone(),
            container_name: replica.container_name.clone(),
            host_address: Some(host_address),
            host_ports: replica.host_ports.clone(),
        }
    }

    /// Offers every block the serving replicas of `observed`, and in a
    /// cluster, advertises them and adds those of the other nodes.
    pub(crate) fn offer_serving(
        &self,
        workload: &WorkloadId,
        blocks: &[NormalisedBlock],
        observed: &[Replica],
        since: std::time::Instant,
    ) -> Vec<PublishTicket> {
        // A job's runs serve nothing: its blocks are never published to.
        if workload.kind.runs_to_completion() {
            return Vec::new();
        }
        let mut serving: Vec<ServingReplica> = observed
            .iter()
            .filter(|replica| replica.is_serving())
            .map(|replica| self.as_serving(replica))
            .collect();
        if let Some(cluster) = self.cluster.get() {
            cluster.advertise(workload, &serving);
            serving.extend(cluster.peers(workload));
        }
        self.publisher.offer(workload, blocks, &serving, since)
    }

    /// Another node's serving replicas of `workload` changed: every block
    /// is offered the new union at once.
    pub async fn peers_changed(&self, workload: &WorkloadId) {
        if self.observations.last.lock().contains_key(workload) {
            self.reoffer_last_observed(workload).await;
        } else {
            self.offer_current(workload).await;
        }
    }

    /// Drops a removed container from the cached listings, so a readiness
    /// flip of another replica never offers it again.
    pub(crate) fn forget_listed(&self, container_id: &str) {
        for observed in self.observations.last.lock().values_mut() {
            observed
                .replicas
                .retain(|replica| replica.container_id != container_id);
        }
    }

    /// Offers every block of a workload its set again from the last
    /// listing, with deaths and readiness as they are now: a readiness flip
    /// reaches the plugins without waiting for the engine to list the
    /// containers again. The pass it queues lists them anyway.
    pub(crate) async fn reoffer_last_observed(&self, workload: &WorkloadId) {
        let since = std::time::Instant::now();
        let lock = self.observe_lock(workload);
        let _observing = lock.lock().await;
        let Some(Observed {
            replicas: mut observed,
            blocks,
            ..
        }) = self.observations.last.lock().get(workload).cloned()
        else {
            return;
        };
        self.lives.mark_dead(&mut observed);
        self.mark_readiness(Some(workload), &mut observed);
        self.offer_serving(workload, &blocks, &observed, since);
    }
}
