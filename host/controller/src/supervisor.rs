//! `vd controller`'s supervisor: a small process that holds the root's
//! lock, the API socket and every listening socket a plugin asks for, and
//! runs the controller itself as a worker process it starts again whenever
//! it dies, or replaces on an upgrade.
//!
//! The supervisor loads no plugin and opens no store. It binds
//! `controller.sock` once and hands the listening socket to every worker it
//! starts, inherited as descriptor 3. Descriptor 4 is the worker's control
//! channel ([`control`]: one JSON message a line each way) and descriptor
//! 5 its channel to the socket keeper
//! (`voodu_plugin_host::listeners::keeper`): a plugin's `listen` in the
//! worker is answered with a descriptor of a socket the supervisor bound
//! and keeps. The worker is told them by `--worker-fds 3,4,5`.
//!
//! So when a worker dies (a plugin that segfaults or calls `exit()`, a
//! SIGKILL, an OOM kill) every socket stays open: a `vd` request, or a
//! client of a plugin's port, that arrives meanwhile waits in the backlog
//! and is answered by the next worker, never refused. The crashed plugin
//! is quarantined by the next worker's start, as before, and the sockets
//! of a plugin that worker did not load are closed then (refused, not left
//! hanging).
//!
//! - The socket file appears only once the first worker is ready (it is
//!   bound under a temporary name and renamed then), so "the socket
//!   accepts" still means "the controller serves".
//! - A worker that dies after it served is started again at once. One
//!   that dies before it serves waits first, from the second such death in
//!   a row, doubling from [`FIRST_BACKOFF`] up to [`MAX_BACKOFF`]. The
//!   supervisor never exits because a worker died.
//! - The first worker failing before it is ready (a corrupt store, a bad
//!   flag) ends the supervisor with the worker's exit code: the worker has
//!   said why on the shared stderr.
//! - **Upgrade** (SIGHUP, or `vd controller upgrade` through the worker):
//!   a new worker starts from the binary now at the controller's path,
//!   with `--takeover`. It opens the store and loads the plugins, then says
//!   `loaded`. The old worker is told to hand over: it stops accepting API
//!   requests, waits for the writes in progress, stops reconciling and says
//!   `handed_over` (or refuses, keeping on, if the new worker lacks a
//!   plugin it serves). The new one is told to go: it reconciles, its
//!   plugins ask for their sockets (the same ones) and it accepts. Then
//!   the old one gets SIGTERM: its plugins stop accepting and finish their
//!   open connections, and it is killed if it has not exited within the
//!   upgrade timeout. A new worker that exits before it has loaded leaves
//!   the old one serving, and the operator is told why; one that exits
//!   after the old one handed over is replaced at once by a worker started
//!   afresh, and the old one retires.
//! - SIGTERM or SIGINT is passed to the worker, which stops as it always
//!   did; the supervisor then removes the socket and exits with the
//!   worker's code.
//! - A worker gets SIGKILL when the supervisor dies (`PR_SET_PDEATHSIG`),
//!   so a supervisor killed outright leaves no worker behind.

pub mod connections;
pub mod control;

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use voodu_api::{WorkerInfo, SOCKET_FILE};
use voodu_plugin_host::listeners::{keeper, ListenerTable};

use crate::ControllerError;
use control::{FromWorker, Inbox, ToWorker};

/// The wait before starting a worker again after a second quick death.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two starts of a worker that keeps dying.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The default of `--upgrade-timeout`: how long an old worker (after an
/// upgrade) or the last one (at a stop) may take to finish its open
/// connections before it is killed.
pub const DEFAULT_UPGRADE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the supervisor looks at its workers and its signals.
const TICK: Duration = Duration::from_millis(10);
/// How often the supervisor counts the connections open through the
/// worker's plugins' sockets (the count said when the worker dies).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// The descriptor a worker finds the API socket on.
pub const WORKER_API_FD: i32 = 3;
/// The descriptor of a worker's control channel.
pub const WORKER_CONTROL_FD: i32 = 4;
/// The descriptor of a worker's channel to the socket keeper.
pub const WORKER_KEEPER_FD: i32 = 5;

/// Set by SIGTERM or SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set by SIGHUP: upgrade.
static UPGRADE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_upgrade_signal(_signal: libc::c_int) {
    UPGRADE.store(true, Ordering::SeqCst);
}

/// How to start a worker: the program (this `vd`) and its arguments,
/// without `--worker-fds`, which the supervisor adds.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments (`--root R controller ...`).
    pub args: Vec<OsString>,
    /// How long an old worker may take to finish its connections after an
    /// upgrade, or the last one after a stop, before it is killed.
    pub upgrade_timeout: Duration,
}

/// Why the supervisor ended.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Root, lock or socket trouble, as the controller would say it.
    #[error(transparent)]
    Controller(#[from] ControllerError),
    /// The first worker ended before it was ready; it said why.
    #[error("the controller did not start ({0}) — see the lines above for why")]
    FirstStartFailed(String),
    /// systemd passed an API socket voodu's commands would not find.
    #[error("{0}")]
    SystemdSocket(String),
    /// A worker could not be started at all.
    #[error("could not start the controller's worker {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// One worker process and its channels.
#[derive(Debug)]
struct Worker {
    child: Child,
    inbox: Inbox,
    started: Instant,
    /// What it said when it served; `None` until then.
    serving: Option<WorkerInfo>,
    /// The connections open through its plugins' kept sockets, by plugin,
    /// and when that was counted.
    open_connections: (std::collections::BTreeMap<String, usize>, Instant),
}

impl Worker {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: signalling our own child, which we have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// An upgrade under way: the new worker, and how far it has got.
#[derive(Debug)]
struct Upgrade {
    new: Worker,
    phase: UpgradePhase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpgradePhase {
    /// The new worker opens the store and loads the plugins.
    Loading,
    /// The old worker was told to hand over.
    HandingOver,
    /// The new worker was told to go.
    Starting,
}

/// An old worker finishing its connections, and when it is killed.
#[derive(Debug)]
struct Retiring {
    worker: Worker,
    deadline: Instant,
}

/// Stops every running statefulset replica of controller `owner` on the
/// engine, each given [`crate::cluster::FENCE_STOP_SECS`] to exit.
fn fence_statefulsets(owner: String) {
    use voodu_runtime::ContainerRuntime;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "the statefulset replicas cannot be fenced");
            return;
        }
    };
    runtime.block_on(async {
        let engine = match voodu_runtime::DockerRuntime::connect(owner).await {
            Ok(engine) => engine,
            Err(error) => {
                tracing::error!(%error, "the statefulset replicas cannot be fenced: Docker does not answer");
                return;
            }
        };
        let replicas = match engine.list(None).await {
            Ok(replicas) => replicas,
            Err(error) => {
                tracing::error!(%error, "the statefulset replicas to fence could not be listed");
                return;
            }
        };
        let running = replicas.iter().filter(|replica| {
            replica.workload.kind == voodu_plugin_abi::messages::WorkloadKind::Statefulset
                && replica.is_running()
        });
        let stops = running.map(|replica| async {
            match engine.stop(replica, crate::cluster::FENCE_STOP_SECS).await {
                Ok(()) => tracing::warn!(replica = %replica.container_name, "fenced: stopped by the supervisor"),
                Err(error) => tracing::error!(%error, replica = %replica.container_name, "a statefulset replica could not be fenced"),
            }
        });
        futures_util::future::join_all(stops).await;
    });
}

/// Runs the supervisor until SIGTERM or SIGINT: takes the root's lock,
/// binds the API socket, and keeps a worker running on it; `ready` is
/// called once, when the first worker serves. Returns the last worker's
/// exit status.
pub fn supervise(
    root: &Path,
    command: &WorkerCommand,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<ExitStatus, SupervisorError> {
    let root_error = |source| ControllerError::Root {
        path: root.to_owned(),
        source,
    };
    crate::create_private_dir(root)?;
    let lock = File::create(root.join("controller.lock")).map_err(root_error)?;
    if lock.try_lock().is_err() {
        return Err(ControllerError::AlreadyRunning(root.to_owned()).into());
    }
    let socket = root.join(SOCKET_FILE);
    let (listener, staging) = match from_systemd(&socket)? {
        Some(listener) => (listener, None),
        None => {
            let (listener, staging) = crate::server::bind_owner_only(&socket)?;
            (listener, Some(staging))
        }
    };
    install_signal_handlers();
    let mut supervisor = Supervisor {
        command,
        listener: &listener,
        ready: Some(ready),
        socket: &socket,
        staging: staging.as_deref(),
        quick_deaths: 0,
        // A controller stopped on this root kept its node's lease: taken
        // over if it is still held (the adoption checks), else joined anew.
        node_lease: std::fs::read_to_string(root.join(crate::cluster::NODE_LEASE_FILE))
            .ok()
            .and_then(|lease| lease.trim().parse().ok()),
        upgrade: None,
        retiring: Vec::new(),
        deaths: 0,
        unrecorded_deaths: Vec::new(),
        root,
        lease: None,
    };
    let outcome = supervisor.run();
    // A socket systemd made is systemd's to remove.
    if let Some(staging) = &staging {
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(staging);
    }
    drop(lock);
    outcome
}

/// The sockets systemd passed (`LISTEN_FDS`, socket activation): the unix
/// one is the API socket, which must be at `socket`; each TCP one is kept
/// for the first plugin that asks for its address. `None` when systemd
/// passed no API socket.
fn from_systemd(
    socket: &Path,
) -> Result<Option<std::os::unix::net::UnixListener>, SupervisorError> {
    let mut passed = listenfd::ListenFd::from_env();
    let mut api = None;
    for index in 0..passed.len() {
        if let Ok(Some(unix)) = passed.take_unix_listener(index) {
            let at = unix
                .local_addr()
                .ok()
                .and_then(|address| address.as_pathname().map(Path::to_owned));
            let expected = std::fs::canonicalize(socket.parent().unwrap_or(Path::new("/")))
                .map(|parent| parent.join(SOCKET_FILE))
                .ok();
            let at_canonical = at.as_deref().and_then(|at| {
                std::fs::canonicalize(at.parent()?)
                    .ok()
                    .map(|parent| parent.join(at.file_name().unwrap_or_default()))
            });
            if at_canonical.is_none() || at_canonical != expected {
                return Err(SupervisorError::SystemdSocket(format!(
                    "systemd passed a unix socket at {}, but vd's commands look for {} — set ListenStream={} in the .socket unit (or --root to the socket's directory)",
                    at.map_or("an unnamed address".into(), |at| at.display().to_string()),
                    socket.display(),
                    socket.display()
                )));
            }
            tracing::info!(socket = %socket.display(), "the API socket is systemd's");
            api = Some(unix);
            continue;
        }
        let tcp = passed
            .take_tcp_listener(index)
            .map(|listener| listener.map(OwnedFd::from))
            .or_else(|_| {
                passed
                    .take_custom::<std::net::TcpListener>(
                        index,
                        libc::AF_INET6,
                        libc::SOCK_STREAM,
                        "tcp6 socket",
                    )
                    .map(|listener| listener.map(OwnedFd::from))
            });
        match tcp {
            Ok(Some(listener)) => match ListenerTable::process().adopt(listener) {
                Ok(address) => {
                    tracing::info!(%address, "systemd's socket is kept for the plugin that asks for it")
                }
                Err(error) => {
                    tracing::warn!(%error, "a socket systemd passed cannot be used; it is closed")
                }
            },
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, index, "a descriptor systemd passed is neither a unix nor a TCP listener; it is left alone")
            }
        }
    }
    Ok(api)
}

/// The supervisor's state between ticks.
struct Supervisor<'a> {
    command: &'a WorkerCommand,
    listener: &'a std::os::unix::net::UnixListener,
    /// Called when the first worker serves.
    ready: Option<Box<dyn FnOnce() + Send>>,
    socket: &'a Path,
    /// Where the API socket was bound until the first worker serves;
    /// `None` when systemd made it.
    staging: Option<&'a Path>,
    quick_deaths: u32,
    /// In a cluster: the lease the node's name is held under, as its
    /// worker last told; every later worker takes it over
    /// (`--node-lease`), so neither an upgrade nor a worker's death shows
    /// the node gone to the cluster.
    node_lease: Option<i64>,
    upgrade: Option<Upgrade>,
    retiring: Vec<Retiring>,
    /// Workers that died, counted from 1.
    deaths: u64,
    /// The deaths no worker has said it recorded yet (by number): each is
    /// told to every new worker until one answers
    /// [`FromWorker::DeathRecorded`].
    unrecorded_deaths: Vec<(u64, ToWorker)>,
    /// The root: its hash names this controller's containers.
    root: &'a Path,
    /// In a cluster with Docker: the node's lease as the workers last told
    /// it ([`FromWorker::LeaseFresh`]), and whether this supervisor has
    /// fenced the node since.
    lease: Option<LeaseWatch>,
}

/// A worker says the node's lease was renewed `renewed_ms_ago`: `lease`
/// takes it if it is newer than what it holds.
fn lease_fresh(lease: &mut Option<LeaseWatch>, renewed_ms_ago: u64, ttl_ms: u64) {
    let renewed = Instant::now()
        .checked_sub(Duration::from_millis(renewed_ms_ago))
        .unwrap_or_else(Instant::now);
    if lease.is_some_and(|held| renewed <= held.renewed) {
        return;
    }
    if lease.is_some_and(|held| held.fenced) {
        tracing::info!(
            "the node's lease is renewed again: its worker converges its statefulset replicas"
        );
    }
    *lease = Some(LeaseWatch {
        renewed,
        ttl: Duration::from_millis(ttl_ms),
        fenced: false,
    });
}

/// When the node's lease was last renewed, as its workers tell it.
#[derive(Debug, Clone, Copy)]
struct LeaseWatch {
    /// When it was renewed.
    renewed: Instant,
    /// Its TTL.
    ttl: Duration,
    /// Whether this supervisor stopped the node's statefulset replicas
    /// since that renewal.
    fenced: bool,
}

impl Supervisor<'_> {
    /// Keeps a worker serving until told to stop.
    fn run(&mut self) -> Result<ExitStatus, SupervisorError> {
        let mut current = self.spawn(false)?;
        loop {
            if STOP.load(Ordering::SeqCst) {
                return Ok(self.stop(current));
            }
            self.reap_retiring();
            self.guard_the_lease();
            if UPGRADE.swap(false, Ordering::SeqCst) {
                self.begin_upgrade(&current, false);
            }
            for message in current.inbox.drain() {
                self.heard_from_current(&mut current, message);
            }
            if let Some(next) = self.step_upgrade(&mut current) {
                // The new worker serves (or a fresh one replaces a failed
                // upgrade's): the old one retires.
                let old = std::mem::replace(&mut current, next);
                self.retire(old);
                continue;
            }
            if current.open_connections.1.elapsed() >= SAMPLE_EVERY {
                let held = ListenerTable::process().held();
                let counted = connections::open_through(&held);
                // A count the kernel did not answer keeps the last one:
                // a death then still names every plugin it cut through.
                if counted.len() == plugins_keeping(&held).len() {
                    current.open_connections.0 = counted;
                }
                current.open_connections.1 = Instant::now();
            }
            if let Some(status) = current.exited() {
                current = match self.replace_dead(current, status)? {
                    Some(next) => next,
                    None => return Ok(status),
                };
                continue;
            }
            std::thread::sleep(TICK);
        }
    }

    /// What the current worker said.
    fn heard_from_current(&mut self, current: &mut Worker, message: FromWorker) {
        match message {
            FromWorker::Ready { worker } => self.served(current, worker),
            FromWorker::UpgradeRequested => self.begin_upgrade(current, true),
            FromWorker::HandedOver => {
                if let Some(upgrade) = &mut self.upgrade {
                    if upgrade.phase == UpgradePhase::HandingOver {
                        upgrade.new.inbox.tell(&ToWorker::Go);
                        upgrade.phase = UpgradePhase::Starting;
                    }
                }
            }
            FromWorker::KeepServing { reason } => {
                if let Some(upgrade) = self.upgrade.take() {
                    abandon(upgrade.new);
                    tracing::warn!("the upgrade was called off: {reason}");
                    current.inbox.tell(&ToWorker::UpgradeFailed { reason });
                }
            }
            FromWorker::NodeLease { lease } => self.node_lease = Some(lease),
            FromWorker::LeaseFresh {
                renewed_ms_ago,
                ttl_ms,
            } => lease_fresh(&mut self.lease, renewed_ms_ago, ttl_ms),
            FromWorker::DeathRecorded { death } => {
                self.unrecorded_deaths
                    .retain(|(number, _)| *number != death);
            }
            FromWorker::Loaded { .. } => {}
        }
    }

    /// Stops the node's statefulset replicas once its lease has gone
    /// unrenewed for two thirds of its TTL with no worker renewing it, so
    /// that they are stopped before the lease can expire (at most one
    /// container per ordinal, even with no worker alive).
    fn guard_the_lease(&mut self) {
        let Some(lease) = &mut self.lease else {
            return;
        };
        if lease.fenced || lease.renewed.elapsed() < crate::cluster::fence_after(lease.ttl) {
            return;
        }
        lease.fenced = true;
        tracing::warn!(
            unrenewed_for = %humantime::format_duration(Duration::from_millis(lease.renewed.elapsed().as_millis() as u64)),
            "no worker renews the node's lease: the supervisor stops its statefulset replicas before the lease can expire"
        );
        let owner = crate::server::owner_id(self.root);
        // On a thread of its own: the supervisor keeps replacing workers
        // meanwhile.
        std::thread::spawn(move || fence_statefulsets(owner));
    }

    /// A worker serves; the first one puts the socket in place.
    fn served(&mut self, worker: &mut Worker, info: WorkerInfo) {
        worker.serving = Some(info);
        if let Some(ready) = self.ready.take() {
            if let Some(staging) = self.staging {
                if std::fs::rename(staging, self.socket).is_err() {
                    tracing::error!(socket = %self.socket.display(), "the API socket could not be put in place");
                }
            }
            ready();
        }
    }

    /// Starts a new worker from the binary now at the controller's path,
    /// unless one is already starting.
    fn begin_upgrade(&mut self, current: &Worker, asked_by_worker: bool) {
        if current.serving.is_none() {
            tracing::warn!(
                "no upgrade while the worker is still starting; ask again once it serves"
            );
            return;
        }
        if self.upgrade.is_some() {
            if asked_by_worker {
                current.inbox.tell(&ToWorker::UpgradeFailed {
                    reason: "an upgrade is already under way — wait for it".into(),
                });
            }
            return;
        }
        tracing::info!(program = %self.command.program.display(), "upgrading: starting a new worker");
        match self.spawn(true) {
            Ok(new) => {
                self.upgrade = Some(Upgrade {
                    new,
                    phase: UpgradePhase::Loading,
                })
            }
            Err(error) => {
                tracing::error!("the upgrade did not start: {error}");
                current.inbox.tell(&ToWorker::UpgradeFailed {
                    reason: error.to_string(),
                });
            }
        }
    }

    /// Moves an upgrade on; the new worker once it serves, or a worker
    /// started afresh when the new one died after the old one had handed
    /// over (either way, the current one retires).
    fn step_upgrade(&mut self, current: &mut Worker) -> Option<Worker> {
        let upgrade = self.upgrade.as_mut()?;
        let mut serving = None;
        for message in upgrade.new.inbox.drain() {
            match message {
                FromWorker::Loaded { unloaded } if upgrade.phase == UpgradePhase::Loading => {
                    upgrade.phase = UpgradePhase::HandingOver;
                    current.inbox.tell(&ToWorker::HandOver { unloaded });
                }
                FromWorker::Ready { worker } => serving = Some(worker),
                FromWorker::NodeLease { lease } => self.node_lease = Some(lease),
                FromWorker::LeaseFresh {
                    renewed_ms_ago,
                    ttl_ms,
                } => lease_fresh(&mut self.lease, renewed_ms_ago, ttl_ms),
                other => tracing::debug!(?other, "ignored from an upgrade's new worker"),
            }
        }
        if let Some(info) = serving {
            let mut upgrade = self.upgrade.take()?;
            tracing::info!(
                old = current.pid(),
                new = upgrade.new.pid(),
                "upgraded: the new worker serves; the old one finishes its connections"
            );
            current.inbox.tell(&ToWorker::Upgraded {
                worker: info.clone(),
            });
            upgrade.new.serving = Some(info);
            return Some(upgrade.new);
        }
        if let Some(status) = upgrade.new.exited() {
            let upgrade = self.upgrade.take()?;
            let reason = format!(
                "the new worker ({}) {} before it served — see the controller's log; the old worker serves on",
                self.command.program.display(),
                describe(&status)
            );
            tracing::error!("{reason}");
            current.inbox.tell(&ToWorker::UpgradeFailed { reason });
            match upgrade.phase {
                UpgradePhase::Loading => {}
                // The old worker has handed over: it reconciles no more,
                // nor (in a cluster) renews the node's lease. A worker is
                // started afresh at once, and the old one retires (its
                // plugins finish their connections) rather than being
                // waited for.
                UpgradePhase::HandingOver | UpgradePhase::Starting => {
                    tracing::error!(
                        "the old worker had handed over; a worker is started afresh now and the old one stops"
                    );
                    match self.spawn(false) {
                        Ok(fresh) => return Some(fresh),
                        Err(error) => {
                            tracing::error!("no worker could be started afresh: {error}; the old worker is stopped and replaced once it exits");
                            current.signal(libc::SIGTERM);
                        }
                    }
                }
            }
        }
        None
    }

    /// The current worker died: the upgrade's new worker takes over if one
    /// is loading, or a new one starts (after a back-off if it keeps dying
    /// before it serves). `None` when the first worker never served.
    fn replace_dead(
        &mut self,
        dead: Worker,
        status: ExitStatus,
    ) -> Result<Option<Worker>, SupervisorError> {
        if self.ready.is_some() {
            // The first worker never served: it has said why.
            return Err(SupervisorError::FirstStartFailed(describe(&status)));
        }
        let ran = dead.started.elapsed();
        if let Some(upgrade) = self.upgrade.take() {
            tracing::error!(
                pid = dead.pid(),
                "the old worker {} during an upgrade; the new worker takes over",
                describe(&status)
            );
            if upgrade.phase != UpgradePhase::Starting {
                upgrade.new.inbox.tell(&ToWorker::Go);
            }
            return Ok(Some(upgrade.new));
        }
        // A worker that served is started again at once; one that died
        // before it served (a store it cannot open, say) waits, doubling
        // with each such death in a row.
        self.quick_deaths = if dead.serving.is_some() {
            0
        } else {
            self.quick_deaths + 1
        };
        let backoff = match self.quick_deaths {
            0 | 1 => Duration::ZERO,
            deaths => (FIRST_BACKOFF * 2u32.saturating_pow(deaths - 2)).min(MAX_BACKOFF),
        };
        // Every plugin keeping a socket now: one that began to listen
        // after the last count had none counted (0).
        let mut counted = plugins_keeping(&ListenerTable::process().held());
        counted.extend(dead.open_connections.0.clone());
        let connections_cut: Vec<(String, usize)> = counted.into_iter().collect();
        tracing::error!(
            pid = dead.pid(),
            "the controller's worker {} after {}{}; every socket stays open and a new worker starts{}",
            describe(&status),
            humantime::format_duration(Duration::from_millis(ran.as_millis() as u64)),
            connections_cut
                .iter()
                .map(|(plugin, cut)| format!(", cutting the {cut} connection(s) open through {plugin}"))
                .collect::<String>(),
            if backoff.is_zero() {
                " now".to_owned()
            } else {
                format!(" in {}", humantime::format_duration(backoff))
            }
        );
        let until = Instant::now() + backoff;
        while Instant::now() < until && !STOP.load(Ordering::SeqCst) {
            self.reap_retiring();
            self.guard_the_lease();
            std::thread::sleep(TICK);
        }
        if STOP.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let next = self.spawn(false)?;
        // Every death a worker has not yet said it recorded: a worker
        // killed before it recorded its predecessor's leaves it to the next.
        self.deaths += 1;
        self.unrecorded_deaths.push((
            self.deaths,
            ToWorker::PreviousWorkerDied {
                how: describe(&status),
                connections_cut,
                death: self.deaths,
            },
        ));
        for (_, death) in &self.unrecorded_deaths {
            next.inbox.tell(death);
        }
        Ok(Some(next))
    }

    /// An old worker: told to stop, and killed at the deadline.
    fn retire(&mut self, old: Worker) {
        old.signal(libc::SIGTERM);
        self.retiring.push(Retiring {
            worker: old,
            deadline: Instant::now() + self.command.upgrade_timeout,
        });
    }

    /// Reaps old workers that exited; kills those past their deadline.
    fn reap_retiring(&mut self) {
        let timeout = self.command.upgrade_timeout;
        self.retiring.retain_mut(|old| {
            if let Some(status) = old.worker.exited() {
                tracing::info!(pid = old.worker.pid(), "the old worker {}", describe(&status));
                return false;
            }
            if Instant::now() >= old.deadline {
                tracing::warn!(
                    pid = old.worker.pid(),
                    "the old worker did not finish its connections within the upgrade timeout ({}); killed",
                    humantime::format_duration(timeout)
                );
                old.worker.signal(libc::SIGKILL);
                let _ = old.worker.child.wait();
                return false;
            }
            true
        });
    }

    /// SIGTERM or SIGINT: the workers are told to stop and given the
    /// upgrade timeout to finish; the current one's status.
    fn stop(&mut self, mut current: Worker) -> ExitStatus {
        if let Some(upgrade) = self.upgrade.take() {
            abandon(upgrade.new);
        }
        current.signal(libc::SIGTERM);
        let deadline = Instant::now() + self.command.upgrade_timeout;
        let status = loop {
            if let Some(status) = current.exited() {
                break status;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    "the worker did not stop within the upgrade timeout ({}); killed",
                    humantime::format_duration(self.command.upgrade_timeout)
                );
                current.signal(libc::SIGKILL);
                break current
                    .child
                    .wait()
                    .unwrap_or_else(|_| ExitStatus::from_raw(9));
            }
            self.reap_retiring();
            std::thread::sleep(TICK);
        };
        while !self.retiring.is_empty() {
            self.reap_retiring();
            std::thread::sleep(TICK);
        }
        status
    }

    /// Starts a worker (`takeover`: an upgrade's, which waits to be told
    /// to go) with the API socket, its control channel and its keeper
    /// channel inherited.
    fn spawn(&self, takeover: bool) -> Result<Worker, SupervisorError> {
        let worker = self.command;
        let spawn_error = |source| SupervisorError::Spawn {
            program: worker.program.clone(),
            source,
        };
        let (control, worker_control) = UnixStream::pair().map_err(spawn_error)?;
        let (keeper_end, worker_keeper) = keeper::channel_pair().map_err(spawn_error)?;
        let api = self.listener.as_raw_fd();
        let control_fd = worker_control.as_raw_fd();
        let keeper_fd = worker_keeper.as_raw_fd();
        let supervisor = std::process::id() as libc::pid_t;
        let mut command = Command::new(&worker.program);
        command.args(&worker.args).arg("--worker-fds").arg(format!(
            "{WORKER_API_FD},{WORKER_CONTROL_FD},{WORKER_KEEPER_FD}"
        ));
        if takeover {
            command.arg("--takeover");
        }
        if let Some(lease) = self.node_lease {
            command.arg("--node-lease").arg(lease.to_string());
        }
        // How long the worker's plugins may let open connections finish
        // when it stops: the upgrade timeout, less the wait for requests in
        // progress that comes first and a margin before the kill.
        let grace = worker
            .upgrade_timeout
            .saturating_sub(crate::server::REQUESTS_FINISH_WAIT + Duration::from_secs(1))
            .max(Duration::from_secs(1));
        command.env(
            voodu_plugin_abi::ffi::SHUTDOWN_GRACE_ENV,
            grace.as_millis().to_string(),
        );
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                // Copied above the targets first, so that no source is
                // overwritten by an earlier dup2; dup2 leaves the copies
                // without close-on-exec.
                let (api, control, keeper) = (
                    libc::fcntl(api, libc::F_DUPFD_CLOEXEC, 10),
                    libc::fcntl(control_fd, libc::F_DUPFD_CLOEXEC, 10),
                    libc::fcntl(keeper_fd, libc::F_DUPFD_CLOEXEC, 10),
                );
                if api < 0
                    || control < 0
                    || keeper < 0
                    || libc::dup2(api, WORKER_API_FD) < 0
                    || libc::dup2(control, WORKER_CONTROL_FD) < 0
                    || libc::dup2(keeper, WORKER_KEEPER_FD) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // The worker dies with the supervisor, never outlives it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                if libc::getppid() != supervisor {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(spawn_error)?;
        drop((worker_control, worker_keeper));
        serve_keeper(keeper_end);
        Ok(Worker {
            child,
            inbox: Inbox::new(control).map_err(spawn_error)?,
            started: Instant::now(),
            serving: None,
            open_connections: (std::collections::BTreeMap::new(), Instant::now()),
        })
    }
}

/// Every plugin that keeps a socket, each at 0 connections.
fn plugins_keeping(
    held: &[(std::net::SocketAddr, String)],
) -> std::collections::BTreeMap<String, usize> {
    held.iter().map(|(_, plugin)| (plugin.clone(), 0)).collect()
}

/// Answers a worker's asks for listening sockets on a thread of its own,
/// until the worker's end closes.
fn serve_keeper(channel: OwnedFd) {
    let spawned = std::thread::Builder::new()
        .name("voodu-socket-keeper".into())
        .spawn(move || keeper::serve(ListenerTable::process(), channel));
    if let Err(error) = spawned {
        tracing::error!(%error, "the socket keeper's thread did not start: the worker's plugins get no listener");
    }
}

/// Ends an upgrade's new worker that will not serve.
fn abandon(mut new: Worker) {
    new.signal(libc::SIGKILL);
    let _ = new.child.wait();
}

/// How a worker ended, in words.
fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (_, Some(signal)) => format!("was killed by signal {signal}"),
        _ => "ended".into(),
    }
}

fn install_signal_handlers() {
    let handlers: [(libc::c_int, extern "C" fn(libc::c_int)); 3] = [
        (libc::SIGTERM, on_stop_signal),
        (libc::SIGINT, on_stop_signal),
        (libc::SIGHUP, on_upgrade_signal),
    ];
    for (signal, handler) in handlers {
        // SAFETY: a handler that only stores to an atomic.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}
