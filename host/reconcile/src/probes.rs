//! Probes at run time: one prober task per running replica of a workload
//! with probes, checking it at its `voodu0` address (or through Docker exec)
//! every period.
//!
//! - **Startup** gates readiness: until it passes once, the replica is not
//!   ready; after `failure_threshold` failures in a row first, it is
//!   restarted as a liveness failure would. Once passed it stops, and
//!   readiness (or, with no readiness probe, the replica) takes over. A
//!   replica that was published before a controller restart has passed it.
//! - **Readiness** gates the endpoint set. A replica starts not ready; it
//!   turns ready after `success_threshold` passes in a row and not ready
//!   after `failure_threshold` failures in a row. Each flip offers every
//!   block of the workload its new set at once (a fresh generation) and
//!   queues the workload, whose rollout may be waiting for it.
//! - **Liveness**: after `failure_threshold` failures in a row the replica
//!   is stopped, which Docker reports as a death; the control loop restarts
//!   it with the same back-off as a crash.
//! - An image's own HEALTHCHECK is honoured too: such a replica is ready
//!   only while Docker reports it healthy.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;
use voodu_model::EventReason;

use parking_lot::Mutex;

use super::http::{http_get, system_tls};
use super::{event, Reconciler};
use voodu_model::probes::{Check, Probe, Probes, Scheme};
use voodu_model::WorkloadId;
use voodu_runtime::{ContainerRuntime, Replica};
use voodu_store::EventLevel;

/// What the probers know of each replica, and which workloads are gated.
#[derive(Debug, Default)]
pub struct ProbeBoard {
    /// Each workload's probes, as last read from the store.
    workloads: Mutex<HashMap<WorkloadId, Probes>>,
    /// One prober per running replica, by container id.
    probers: Mutex<HashMap<String, Prober>>,
    /// Containers that have been ready at least once in this process
    /// (probers come and go with restarts; this stays).
    ever_ready: Mutex<HashSet<String>>,
    /// When this process created each container: a rollout's progress
    /// deadline runs from there, and only for these.
    created: Mutex<HashMap<String, std::time::Instant>>,
    /// The replicas each workload's blocks were last published, read from
    /// the store once after a controller start: until its prober's first
    /// result, a replica that was published stays published, rather than
    /// every set going empty at each start.
    seeds: Mutex<HashMap<WorkloadId, Option<HashSet<String>>>>,
}

#[derive(Debug)]
struct Prober {
    workload: WorkloadId,
    probes: Probes,
    ip: Option<String>,
    state: ReadinessState,
    task: tokio::task::JoinHandle<()>,
}

/// Where one replica's readiness stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadinessState {
    /// Whether it passes its readiness probe now.
    pub ready: bool,
    /// Whether it ever has (a rollout's progress deadline applies until it
    /// does).
    pub ever_ready: bool,
    /// Its probe's last failure, `readiness http_get :8084/ready: answered
    /// 503`.
    pub last_failure: Option<String>,
}

impl Drop for ProbeBoard {
    fn drop(&mut self) {
        for prober in self.probers.lock().values() {
            prober.task.abort();
        }
    }
}

impl ProbeBoard {
    /// Records a workload's probes (from its stored core spec).
    pub fn configure(&self, workload: &WorkloadId, probes: Probes) {
        let mut workloads = self.workloads.lock();
        if probes == Probes::default() {
            workloads.remove(workload);
        } else {
            workloads.insert(workload.clone(), probes);
        }
    }

    /// The workload's probes, if it has any.
    pub fn probes_of(&self, workload: &WorkloadId) -> Option<Probes> {
        self.workloads.lock().get(workload).cloned()
    }

    /// The probes a replica is checked with: those it was created with (its
    /// own revision's, from its label), or for a container made before
    /// voodu labelled them, its workload's current ones. `None` when it has
    /// none.
    pub fn probes_for(&self, replica: &Replica) -> Option<Probes> {
        self.with_probes_of(replica, |probes| probes.cloned())
    }

    /// Whether a readiness or startup probe gates the replica (its own probes, as
    /// [`ProbeBoard::probes_for`] chooses them): asked for every replica of
    /// every listing, so nothing is cloned.
    pub fn gates(&self, replica: &Replica) -> bool {
        self.with_probes_of(replica, |probes| probes.is_some_and(Probes::gate_readiness))
    }

    /// Runs `look` on the probes a replica is checked with (see
    /// [`ProbeBoard::probes_for`]), `None` when it has none.
    fn with_probes_of<T>(&self, replica: &Replica, look: impl FnOnce(Option<&Probes>) -> T) -> T {
        let some = |probes: &Probes| *probes != Probes::default();
        match &replica.probes {
            Some(own) => look(Some(own).filter(|probes| some(probes))),
            None => look(
                self.workloads
                    .lock()
                    .get(&replica.workload)
                    .filter(|probes| some(probes)),
            ),
        }
    }

    /// A replica's readiness, if it has a prober.
    pub fn readiness(&self, container_id: &str) -> Option<ReadinessState> {
        self.probers
            .lock()
            .get(container_id)
            .map(|prober| prober.state.clone())
    }

    /// Notes that this process created a container just now.
    pub fn created(&self, container_id: &str) {
        self.created
            .lock()
            .insert(container_id.to_owned(), std::time::Instant::now());
    }

    /// When this process created the container, if it did.
    pub fn created_at(&self, container_id: &str) -> Option<std::time::Instant> {
        self.created.lock().get(container_id).copied()
    }

    /// Whether the container has been ready at least once in this process.
    pub fn ever_ready(&self, container_id: &str) -> bool {
        self.ever_ready.lock().contains(container_id)
    }

    /// Records a readiness result; returns whether `ready` flipped.
    fn record(&self, container_id: &str, passed: bool, failure: Option<String>) -> bool {
        if passed {
            self.ever_ready.lock().insert(container_id.to_owned());
        }
        let mut probers = self.probers.lock();
        let Some(prober) = probers.get_mut(container_id) else {
            return false;
        };
        if failure.is_some() {
            prober.state.last_failure = failure;
        }
        let flipped = prober.state.ready != passed;
        prober.state.ready = passed;
        prober.state.ever_ready |= passed;
        flipped
    }
}

impl Reconciler {
    /// Marks each replica ready or not, where a readiness probe or a
    /// HEALTHCHECK decides it (see [`Replica::ready`]).
    pub(super) fn mark_readiness(&self, workload: Option<&WorkloadId>, replicas: &mut [Replica]) {
        for replica in replicas {
            if workload.is_some_and(|workload| &replica.workload != workload) {
                continue;
            }
            let mut ready = None;
            replica.last_probe_failure = None;
            if self.probes.gates(replica) {
                ready = Some(match self.probes.readiness(&replica.container_id) {
                    Some(state) => {
                        if !state.ready {
                            replica.last_probe_failure = state.last_failure;
                        }
                        state.ready
                    }
                    None => self.was_published(&replica.workload, &replica.replica_id),
                });
            }
            if let Some(health) = &replica.health {
                let healthy = health == "healthy";
                if healthy {
                    self.probes
                        .ever_ready
                        .lock()
                        .insert(replica.container_id.clone());
                }
                ready = Some(ready.unwrap_or(true) && healthy);
            }
            replica.ready = ready;
        }
    }

    /// Whether a replica was in its workload's last published sets, as the
    /// store had them when this process first looked; `false` once the
    /// workload's probers have started (see [`ProbeBoard`]'s seeds).
    fn was_published(&self, workload: &WorkloadId, replica_id: &str) -> bool {
        let mut seeds = self.probes.seeds.lock();
        let seed = seeds.entry(workload.clone()).or_insert_with(|| {
            match self.store.publications(workload) {
                Ok(publications) => Some(
                    publications
                        .iter()
                        .flat_map(|publication| publication.endpoints.iter())
                        .map(|endpoint| endpoint.replica_id.clone())
                        .collect(),
                ),
                Err(error) => {
                    tracing::warn!(%error, %workload, "the last published sets could not be read; replicas start not ready");
                    None
                }
            }
        });
        seed.as_ref().is_some_and(|ids| ids.contains(replica_id))
    }

    /// Starts a prober for every running replica of `workload` that has
    /// probes and no prober, each with its own probes
    /// ([`ProbeBoard::probes_for`]), and restarts one whose probes changed
    /// (keeping its readiness) or whose address changed (it was restarted:
    /// not ready until it passes again). Stops those of replicas no longer
    /// running.
    pub(super) fn sync_probers(&self, workload: &WorkloadId, observed: &[Replica]) {
        let wanted: HashMap<&str, Probes> = observed
            .iter()
            .filter(|replica| replica.is_running())
            .filter_map(|replica| {
                let probes = self.probes.probes_for(replica)?;
                Some((replica.container_id.as_str(), probes))
            })
            .collect();
        // The first sync of a workload starts from what was published;
        // later ones from nothing.
        let seeded: Vec<(String, bool)> = observed
            .iter()
            .filter(|replica| replica.is_running())
            .map(|replica| {
                (
                    replica.container_id.clone(),
                    self.was_published(workload, &replica.replica_id),
                )
            })
            .collect();
        self.probes.seeds.lock().insert(workload.clone(), None);
        let mut probers = self.probes.probers.lock();
        let mut carried: HashMap<String, ReadinessState> = HashMap::new();
        probers.retain(|container_id, prober| {
            if &prober.workload != workload {
                return true;
            }
            let running = observed
                .iter()
                .find(|replica| &replica.container_id == container_id && replica.is_running());
            let keep = running.is_some_and(|replica| {
                replica.ip == prober.ip && wanted.get(container_id.as_str()) == Some(&prober.probes)
            });
            if !keep {
                prober.task.abort();
                if running.is_some_and(|replica| replica.ip == prober.ip) {
                    // Only the probe settings changed.
                    carried.insert(container_id.clone(), prober.state.clone());
                }
            }
            keep
        });
        for replica in observed.iter().filter(|replica| replica.is_running()) {
            let Some(probes) = wanted.get(replica.container_id.as_str()) else {
                continue;
            };
            if probers.contains_key(&replica.container_id) {
                continue;
            }
            let state = carried.remove(&replica.container_id).unwrap_or_else(|| {
                let published = seeded
                    .iter()
                    .any(|(id, published)| id == &replica.container_id && *published);
                ReadinessState {
                    ready: published,
                    ever_ready: published,
                    last_failure: None,
                }
            });
            let task = tokio::spawn(run_prober(
                self.me.clone(),
                self.runtime.clone(),
                replica.clone(),
                probes.clone(),
                state.ready,
            ));
            probers.insert(
                replica.container_id.clone(),
                Prober {
                    workload: workload.clone(),
                    probes: probes.clone(),
                    ip: replica.ip.clone(),
                    state,
                    task,
                },
            );
        }
    }

    /// Stops every prober of a workload (deleted, or without probes now).
    pub(super) fn forget_probes(&self, workload: &WorkloadId) {
        self.probes.configure(workload, Probes::default());
        self.observations.forget_workload(workload);
        self.probes.probers.lock().retain(|_, prober| {
            let keep = &prober.workload != workload;
            if !keep {
                prober.task.abort();
            }
            keep
        });
    }

    /// A replica's readiness flipped: every block hears the new set now,
    /// and the workload gets a pass (its rollout may be waiting for this).
    async fn readiness_changed(&self, replica: &Replica, ready: bool) {
        // The plugins first; the event and the pass can wait a moment.
        self.reoffer_last_observed(&replica.workload).await;
        let state = self.probes.readiness(&replica.container_id);
        let message = match (ready, state.and_then(|state| state.last_failure)) {
            (true, _) => format!("replica {} is ready", replica.replica_id),
            (false, Some(failure)) => {
                format!("replica {} is not ready: {failure}", replica.replica_id)
            }
            (false, None) => format!("replica {} is not ready", replica.replica_id),
        };
        let level = if ready {
            EventLevel::Info
        } else {
            EventLevel::Warning
        };
        self.record(&[event(
            &replica.workload,
            level,
            EventReason::Readiness,
            message,
        )]);
        self.enqueue(&replica.workload);
    }

    /// A replica failed its liveness probe, or its startup probe before it
    /// ever passed: it is stopped, and the control loop restarts it as it
    /// would a crashed one.
    async fn probe_failed(
        &self,
        replica: &Replica,
        which: ProbeKind,
        failure: &str,
        failures: u32,
    ) {
        let name: &'static str = which.into();
        self.record(&[event(
            &replica.workload,
            EventLevel::Warning,
            which.reason(),
            format!(
                "replica {} failed its {name} probe {failures} time(s) in a row ({failure}); restarting it",
                replica.replica_id
            ),
        )]);
        // No grace: a hung replica would only use it up, and its exit code
        // then says it did not stop by itself.
        if let Err(error) = self.runtime.stop(replica, 0).await {
            tracing::warn!(%error, replica = %replica.container_name, probe = name, "a replica that failed a probe could not be stopped");
        }
    }
}

/// The probes that restart a replica that fails them.
#[derive(Debug, Clone, Copy, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
enum ProbeKind {
    Startup,
    Liveness,
}

impl ProbeKind {
    /// The event's reason.
    fn reason(self) -> EventReason {
        match self {
            ProbeKind::Startup => EventReason::StartupFailed,
            ProbeKind::Liveness => EventReason::LivenessFailed,
        }
    }
}

/// Checks one replica until aborted: startup then readiness, and liveness
/// beside them.
async fn run_prober(
    reconciler: Weak<Reconciler>,
    runtime: Arc<dyn ContainerRuntime>,
    replica: Replica,
    probes: Probes,
    ready: bool,
) {
    let readiness = async {
        // A replica already ready (published before a controller restart)
        // has passed its startup probe.
        if let (Some(startup), false) = (&probes.startup, ready) {
            if !startup_loop(&reconciler, runtime.as_ref(), &replica, startup).await {
                return;
            }
        }
        match &probes.readiness {
            Some(probe) => {
                readiness_loop(&reconciler, runtime.as_ref(), &replica, probe, ready).await
            }
            None if probes.startup.is_some() && !ready => {
                let Some(reconciler) = reconciler.upgrade() else {
                    return;
                };
                if reconciler.probes.record(&replica.container_id, true, None) {
                    reconciler.readiness_changed(&replica, true).await;
                }
            }
            None => {}
        }
    };
    let liveness = async {
        if let Some(probe) = &probes.liveness {
            liveness_loop(&reconciler, runtime.as_ref(), &replica, probe).await;
        }
    };
    tokio::join!(readiness, liveness);
}

/// Runs the startup probe until it passes once (`true`), or until it
/// fails `failure_threshold` times in a row and the replica is restarted
/// (`false`).
async fn startup_loop(
    reconciler: &Weak<Reconciler>,
    runtime: &dyn ContainerRuntime,
    replica: &Replica,
    probe: &Probe,
) -> bool {
    tokio::time::sleep(probe.initial_delay).await;
    let mut failures = 0_u32;
    loop {
        let started = tokio::time::Instant::now();
        let result = check(runtime, replica, probe).await;
        let Some(reconciler) = reconciler.upgrade() else {
            return false;
        };
        match result {
            Ok(()) => return true,
            Err(why) => {
                failures = failures.saturating_add(1);
                let failure = format!("startup {}: {why}", probe.check.describe());
                reconciler
                    .probes
                    .record(&replica.container_id, false, Some(failure.clone()));
                if failures >= probe.failure_threshold {
                    reconciler
                        .probe_failed(replica, ProbeKind::Startup, &failure, failures)
                        .await;
                    return false;
                }
            }
        }
        drop(reconciler);
        tokio::time::sleep_until(started + probe.period).await;
    }
}

async fn readiness_loop(
    reconciler: &Weak<Reconciler>,
    runtime: &dyn ContainerRuntime,
    replica: &Replica,
    probe: &Probe,
    mut ready: bool,
) {
    tokio::time::sleep(probe.initial_delay).await;
    let (mut passes, mut failures) = (0_u32, 0_u32);
    loop {
        let started = tokio::time::Instant::now();
        let result = check(runtime, replica, probe).await;
        let Some(reconciler) = reconciler.upgrade() else {
            return;
        };
        let failure = match &result {
            Ok(()) => {
                passes = passes.saturating_add(1);
                failures = 0;
                None
            }
            Err(why) => {
                failures = failures.saturating_add(1);
                passes = 0;
                Some(format!("readiness {}: {why}", probe.check.describe()))
            }
        };
        let now_ready = if ready {
            failures < probe.failure_threshold
        } else {
            passes >= probe.success_threshold
        };
        let flipped = reconciler
            .probes
            .record(&replica.container_id, now_ready, failure);
        ready = now_ready;
        if flipped {
            reconciler.readiness_changed(replica, ready).await;
        }
        drop(reconciler);
        tokio::time::sleep_until(started + probe.period).await;
    }
}

async fn liveness_loop(
    reconciler: &Weak<Reconciler>,
    runtime: &dyn ContainerRuntime,
    replica: &Replica,
    probe: &Probe,
) {
    tokio::time::sleep(probe.initial_delay).await;
    let mut failures = 0_u32;
    loop {
        let started = tokio::time::Instant::now();
        match check(runtime, replica, probe).await {
            Ok(()) => failures = 0,
            Err(why) => {
                failures += 1;
                if failures >= probe.failure_threshold {
                    if let Some(reconciler) = reconciler.upgrade() {
                        let failure = format!("liveness {}: {why}", probe.check.describe());
                        reconciler
                            .probe_failed(replica, ProbeKind::Liveness, &failure, failures)
                            .await;
                    }
                    return;
                }
            }
        }
        tokio::time::sleep_until(started + probe.period).await;
    }
}

/// Runs one check within the probe's timeout. The error says what failed.
pub async fn check(
    runtime: &dyn ContainerRuntime,
    replica: &Replica,
    probe: &Probe,
) -> Result<(), String> {
    let attempt = async {
        match &probe.check {
            Check::HttpGet {
                path,
                port,
                scheme,
                http_headers,
                ..
            } => {
                let ip = replica.ip.as_deref().ok_or("the replica has no address")?;
                let tls = match scheme {
                    Scheme::Http => None,
                    Scheme::Https => Some(system_tls()?),
                };
                let code = http_get(ip, *port, path, http_headers, tls.as_ref()).await?;
                if probe.check.passes_status(code) {
                    Ok(())
                } else {
                    Err(format!("answered {code}"))
                }
            }
            Check::TcpSocket { port } => {
                let ip = replica.ip.as_deref().ok_or("the replica has no address")?;
                tokio::net::TcpStream::connect((ip, *port))
                    .await
                    .map(drop)
                    .map_err(|error| format!("cannot connect: {error}"))
            }
            Check::Exec { command } => match runtime
                .exec(
                    replica,
                    &voodu_runtime::ExecCommand::of(command),
                    None,
                    None,
                )
                .await
            {
                Ok(0) => Ok(()),
                Ok(code) => Err(format!("exited with code {code}")),
                Err(error) => Err(error.to_string()),
            },
        }
    };
    match tokio::time::timeout(probe.timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(probe.timeout)
        )),
    }
}

/// How long a rollout waits before it looks again at replicas that are not
/// ready yet (a flip re-queues it at once anyway).
pub fn readiness_recheck(probes: &Probes) -> Duration {
    probes
        .readiness
        .as_ref()
        .or(probes.startup.as_ref())
        .map_or(Duration::from_secs(1), |probe| probe.period)
        .max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::http::{crypto, tls_trusting};
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    /// A test CA (its key thrown away), and a certificate it signed for IP
    /// 127.0.0.1 with that certificate's key.
    const CA: &str = include_str!("test_tls/ca.pem");
    const CERT: &str = include_str!("test_tls/cert.pem");
    const KEY: &str = include_str!("test_tls/key.pem");

    /// A TLS server on 127.0.0.1 with the test certificate (for IP
    /// 127.0.0.1), answering each request with 204.
    async fn tls_server() -> u16 {
        let certificate = CertificateDer::from_pem_slice(CERT.as_bytes()).unwrap();
        let key = PrivateKeyDer::from_pem_slice(KEY.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(crypto())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![certificate], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(mut stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut buffer = [0_u8; 1024];
                    let _ = stream.read(&mut buffer).await;
                    let _ = stream
                        .write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
                        .await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn an_https_probe_verifies_the_certificate_against_its_roots() {
        let port = tls_server().await;
        let mut trusting = rustls::RootCertStore::empty();
        trusting
            .add(CertificateDer::from_pem_slice(CA.as_bytes()).unwrap())
            .unwrap();
        let trusting = tls_trusting(trusting).unwrap();
        let headers = BTreeMap::new();
        assert_eq!(
            http_get("127.0.0.1", port, "/", &headers, Some(&trusting)).await,
            Ok(204)
        );
        // With the system's roots (voodu's default verification), a
        // certificate of a private CA fails, naming why.
        let system = system_tls().expect("this host lists trusted TLS roots");
        let error = http_get("127.0.0.1", port, "/", &headers, Some(&system))
            .await
            .unwrap_err();
        assert!(
            error.starts_with("TLS handshake failed") && error.contains("certificate"),
            "{error}"
        );
        // Plain HTTP against a TLS port is no answer.
        assert!(http_get("127.0.0.1", port, "/", &headers, None)
            .await
            .is_err());
    }
}
