//! Serves the controller's API on `<root>/controller.sock`: one JSON request
//! line per connection, answered by JSON frame lines. The socket is created
//! inside the owner-only root with mode 0600, and each connection's peer
//! must run as the controller's own user.

use std::fs::File;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

use super::{Controller, ControllerConfig, ControllerError};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use voodu_api::{
    Failure, Frame, Request, RequestLine, MAX_REQUEST_BYTES, PROTOCOL_VERSION, SOCKET_FILE,
};
use voodu_reconcile::{BlockPlugins, Reconciler, ReconcilerConfig};
use voodu_runtime::DockerRuntime;

/// The controller's socket inside a root.
pub fn socket_path(root: &Path) -> PathBuf {
    root.join(SOCKET_FILE)
}

/// Runs a controller in the foreground until SIGINT or SIGTERM: takes the
/// root's lock, opens the store, loads the plugins and serves the socket.
/// `ready` is called once the socket accepts connections.
pub fn run(
    config: ControllerConfig,
    ready: impl FnOnce(&Controller, &Path),
) -> Result<(), ControllerError> {
    serve_root(config, None, ready)
}

/// What a supervisor hands its worker (see [`crate::supervisor`]).
#[derive(Debug)]
pub struct WorkerChannels {
    /// The API socket, bound and listening.
    pub api: std::os::unix::net::UnixListener,
    /// The control channel.
    pub control: std::os::unix::net::UnixStream,
    /// The channel to the socket keeper.
    pub keeper: std::os::fd::OwnedFd,
    /// An upgrade's new worker: load, then wait to be told to go.
    pub takeover: bool,
}

/// Runs a controller as a supervisor's worker: the supervisor holds the
/// root's lock, the API socket and the plugins' listening sockets, and
/// hands over the channels to them; the worker opens the store, loads the
/// plugins and serves until SIGINT or SIGTERM (or until it has handed
/// over to an upgrade's new worker and is then told to stop), and leaves
/// the socket's file to the supervisor.
pub fn run_worker(
    config: ControllerConfig,
    channels: WorkerChannels,
    ready: impl FnOnce(&Controller, &Path),
) -> Result<(), ControllerError> {
    serve_root(config, Some(channels), ready)
}

/// The owner the metrics port is held for in the socket table: no plugin
/// can take the name (a plugin name has no space).
const METRICS_OWNER: &str = "controller metrics";

/// This process, as a worker of the supervisor that started it.
fn this_worker() -> voodu_api::WorkerInfo {
    voodu_api::WorkerInfo {
        pid: std::process::id(),
        // SAFETY: getppid has no preconditions and cannot fail.
        supervisor_pid: unsafe { libc::getppid() } as u32,
        started_at_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        binary: std::env::current_exe()
            .map(|path| path.display().to_string())
            .unwrap_or_default(),
    }
}

/// Runs a controller; with `inherited`, on the supervisor's socket and
/// channels, the root's lock held by the supervisor.
fn serve_root(
    config: ControllerConfig,
    inherited: Option<WorkerChannels>,
    ready: impl FnOnce(&Controller, &Path),
) -> Result<(), ControllerError> {
    let root_error = |source| ControllerError::Root {
        path: config.root.clone(),
        source,
    };
    super::create_private_dir(&config.root)?;
    let lock = match inherited {
        Some(_) => None,
        None => {
            let lock = File::create(config.root.join("controller.lock")).map_err(root_error)?;
            if lock.try_lock().is_err() {
                return Err(ControllerError::AlreadyRunning(config.root.clone()));
            }
            Some(lock)
        }
    };
    let owns_socket = inherited.is_none();
    let worker = this_worker();
    let (inherited, link, takeover) = match inherited {
        None => (None, None, false),
        Some(channels) => {
            let keeper = voodu_plugin_host::listeners::keeper::KeeperClient::new(channels.keeper)
                .map_err(ControllerError::Supervisor)?;
            voodu_plugin_host::listeners::ListenerTable::process().hold_through(keeper);
            (
                Some(channels.api),
                Some(super::supervisor::control::WorkerLink::new(
                    channels.control,
                )),
                channels.takeover,
            )
        }
    };
    let controller = Arc::new(Controller::open(&config)?);
    if let Some(link) = &link {
        if takeover {
            tracing::info!("loaded; waiting for the old worker to hand over");
            if let Err(error) = link.await_go(controller.unloaded_plugins()) {
                tracing::info!(%error, "this upgrade's worker was not needed");
                controller.shutdown();
                return Ok(());
            }
        }
        // The sockets of a plugin this worker did not load (quarantined
        // after a crash, say) are closed: refused, not left waiting.
        // The metrics port is the controller's own, kept too.
        let kept: Vec<String> = controller
            .plugins()
            .list()
            .iter()
            .map(|plugin| plugin.name().to_owned())
            .chain([METRICS_OWNER.to_owned()])
            .collect();
        voodu_plugin_host::listeners::ListenerTable::process().retain_only(&kept);
        controller.attach_supervisor(link.clone(), worker.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(root_error)?;
    let socket = socket_path(&config.root);
    let result = runtime.block_on(async {
        // The peer listener comes before the reconciler: a node that runs
        // a replica has already said where the other nodes reach it, so
        // `vd exec` or `vd logs` from another node never finds a replica
        // on a node it cannot ask.
        if let Some(cluster) = &config.cluster {
            let address = std::net::SocketAddr::new(
                cluster
                    .advertise
                    .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
                cluster.peer_port,
            );
            let bound = super::peers::listen(controller.clone(), &config.root, address)
                .map_err(|source| ControllerError::PeerListener { address, source })?;
            tracing::info!(address = %bound, "answering the other nodes");
            controller.set_peer_address(bound);
        }
        if config.docker {
            let owner = owner_id(&config.root);
            let engine = DockerRuntime::connect(owner.clone()).await?;
            let plugins: Arc<dyn BlockPlugins> = controller.plugins().clone();
            let reconciler = Reconciler::new(
                Arc::new(engine),
                plugins,
                controller.store().clone(),
                controller.activity().clone(),
                ReconcilerConfig {
                    owner,
                    workers: config.workers,
                    publish_wait: config.plugin_call_timeout + std::time::Duration::from_secs(1),
                },
            );
            if let Some(cluster) = controller.cluster() {
                reconciler.join_cluster(cluster.view.clone());
            }
            controller.attach_reconciler(reconciler.clone());
            reconciler.start(config.resync_every);
        } else {
            tracing::info!(
                "running without Docker: applies are validated and stored, nothing runs"
            );
        }
        super::cluster::start(&controller);
        let listener = match inherited {
            Some(listener) => {
                let error = |source| ControllerError::Socket {
                    path: socket.clone(),
                    source,
                };
                listener.set_nonblocking(true).map_err(error)?;
                UnixListener::from_std(listener).map_err(error)?
            }
            None => bind(&socket)?,
        };
        if let Some(address) = config.metrics_listen {
            let metrics = Arc::new(super::metrics::Metrics::new());
            controller.attach_metrics(metrics.clone());
            // Asked of the plugins' socket table, so under a supervisor the
            // port is the supervisor's and outlives this worker.
            let socket_error = |source| ControllerError::Socket {
                path: PathBuf::from(address.to_string()),
                source,
            };
            let (socket, _) = voodu_plugin_host::listeners::ListenerTable::process()
                .listen_at(METRICS_OWNER, address, false)
                .map_err(|error| socket_error(std::io::Error::other(error.to_string())))?;
            let listener = std::net::TcpListener::from(socket);
            listener.set_nonblocking(true).map_err(socket_error)?;
            let listener = tokio::net::TcpListener::from_std(listener).map_err(socket_error)?;
            tracing::info!(%address, "serving metrics on /metrics");
            tokio::spawn(super::metrics::serve(controller.clone(), metrics, listener));
        }
        let handed_over = Arc::new(tokio::sync::Notify::new());
        if let Some(link) = &link {
            let handing = controller.clone();
            let stop_accepting = handed_over.clone();
            let recording = controller.clone();
            link.listen(
                Box::new(move |unloaded| {
                    handing.hand_over(unloaded)?;
                    stop_accepting.notify_one();
                    Ok(())
                }),
                Box::new(move |how, connections_cut| {
                    recording.record_worker_death(how, connections_cut);
                }),
            )
            .map_err(ControllerError::Supervisor)?;
            // The node's lease first, so that an upgrade asked for as soon
            // as this worker serves already has it to hand on.
            if let Some(lease) = controller
                .cluster()
                .and_then(|cluster| cluster.membership.lease())
            {
                link.tell(&super::supervisor::control::FromWorker::NodeLease { lease })
                    .map_err(ControllerError::Supervisor)?;
            }
            link.tell(&super::supervisor::control::FromWorker::Ready {
                worker: worker.clone(),
            })
            .map_err(ControllerError::Supervisor)?;
            // The node's lease, if it was a predecessor's, is this worker's
            // from now on, and its record this worker's to write: only now
            // that it serves, so a worker that fails before never revokes
            // the lease its successor will adopt.
            controller.take_charge();
        }
        ready(&controller, &socket);
        // What passes and applies freed goes back to the system now and
        // then, so the controller's footprint follows what it holds.
        tokio::spawn(async {
            let mut every = tokio::time::interval(super::TRIM_EVERY);
            loop {
                every.tick().await;
                super::return_freed_memory();
            }
        });
        let requests = tokio_util::task::TaskTracker::new();
        let stopped = tokio::select! {
            _ = serve(controller.clone(), listener, &requests, shutdown_signal()) => true,
            _ = handed_over.notified() => false,
        };
        if !stopped {
            // Handed over: the plugins serve on until the supervisor says
            // stop.
            shutdown_signal().await;
        } else if let Some(cluster) = controller.cluster() {
            // Stopped: the lead goes at once, the lease stays for a
            // restart.
            super::cluster::stop_keeping_the_lease(cluster);
        }
        // Requests in progress (an apply, the upgrade that asked for this
        // stop) finish and are answered first.
        requests.close();
        if tokio::time::timeout(REQUESTS_FINISH_WAIT, requests.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "requests still running after {}s are cut short",
                REQUESTS_FINISH_WAIT.as_secs()
            );
        }
        Ok(())
    });
    if owns_socket {
        let _ = std::fs::remove_file(&socket);
    }
    // Requests still running finish (or give up) before the root is
    // unlocked for another controller.
    runtime.shutdown_timeout(std::time::Duration::from_secs(10));
    controller.shutdown();
    drop(lock);
    result
}

/// This controller's id on the engine's containers: a hash of its root, so
/// every controller of one root (across restarts) is the same owner.
pub(crate) fn owner_id(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
    hex::encode(&Sha256::digest(root.as_os_str().as_encoded_bytes())[..8])
}

/// Binds the socket, replacing a stale one, readable by the owner only.
pub fn bind(socket: &Path) -> Result<UnixListener, ControllerError> {
    let error = |source| ControllerError::Socket {
        path: socket.to_owned(),
        source,
    };
    let (listener, staging) = bind_owner_only(socket)?;
    std::fs::rename(&staging, socket).map_err(error)?;
    listener.set_nonblocking(true).map_err(error)?;
    UnixListener::from_std(listener).map_err(error)
}

/// Binds `socket`'s listener under a temporary name beside it
/// (`controller.sock.binding`), made owner-only, after removing a stale
/// socket and a stale temporary: the caller renames it into place, so the
/// socket never appears at its path with a wider mode. The root's lock
/// must be held, so any socket file found is stale.
pub(crate) fn bind_owner_only(
    socket: &Path,
) -> Result<(std::os::unix::net::UnixListener, PathBuf), ControllerError> {
    let error = |source| ControllerError::Socket {
        path: socket.to_owned(),
        source,
    };
    if socket.exists() {
        std::fs::remove_file(socket).map_err(error)?;
    }
    let staging = socket.with_extension("sock.binding");
    if staging.exists() {
        std::fs::remove_file(&staging).map_err(error)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(&staging).map_err(error)?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600)).map_err(error)?;
    Ok((listener, staging))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down");
}

/// The most connections served at once; further clients wait in the
/// socket's backlog until one ends. Watches (`-w`, `logs -f`) count too.
pub const MAX_CONNECTIONS: usize = 256;

/// How long the accept loop waits after a failed accept (at the file
/// descriptor limit, say) before it tries again, so it never spins.
pub const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a stopping controller waits for the requests in progress
/// (not watches or follows, which end with it) to be answered.
pub const REQUESTS_FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Accepts connections until `shutdown` completes, at most
/// [`MAX_CONNECTIONS`] at a time; each request that is not a stream runs
/// under `requests`, so a stop can wait for them to be answered.
pub async fn serve(
    controller: Arc<Controller>,
    listener: UnixListener,
    requests: &tokio_util::task::TaskTracker,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut accept_failures = AcceptFailures::default();
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => {
                permit.expect("cannot fail: the semaphore is never closed")
            }
            _ = &mut shutdown => return,
        };
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let controller = controller.clone();
                    let requests = requests.clone();
                    tokio::spawn(async move {
                        serve_connection(controller, stream, &requests).await;
                        drop(permit);
                    });
                }
                Err(error) => {
                    accept_failures.record(&error);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            _ = &mut shutdown => return,
        }
    }
}

/// Logs failed accepts at most once a minute, with how many were not
/// logged, so a controller at its descriptor limit cannot flood its log.
#[derive(Debug, Default)]
struct AcceptFailures {
    last_logged: Option<std::time::Instant>,
    unlogged: u64,
}

impl AcceptFailures {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(60);

    fn record(&mut self, error: &std::io::Error) {
        let due = self
            .last_logged
            .is_none_or(|last| last.elapsed() >= Self::EVERY);
        if due {
            tracing::warn!(
                %error,
                since_last = self.unlogged,
                "accepting a connection failed; retrying every 100 ms"
            );
            self.last_logged = Some(std::time::Instant::now());
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
    }
}

pub(crate) async fn write_frame(
    stream: &mut (impl AsyncWriteExt + Unpin),
    frame: &Frame,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(frame).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line).await?;
    stream.flush().await
}

/// How long a client may take to send its request line; a client that
/// connects and sends nothing is answered and dropped after it.
pub const REQUEST_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads one request line, at most [`MAX_REQUEST_BYTES`] long and within
/// [`REQUEST_READ_TIMEOUT`]; `Ok(None)` when the client hung up first.
async fn read_request(
    lines: &mut FramedRead<tokio::net::unix::OwnedReadHalf, LinesCodec>,
) -> Result<Option<Request>, Failure> {
    let line = match tokio::time::timeout(REQUEST_READ_TIMEOUT, lines.next()).await {
        Err(_) => {
            return Err(Failure::new(format!(
                "no request line within {}s — send one JSON line per connection",
                REQUEST_READ_TIMEOUT.as_secs()
            )))
        }
        Ok(None) => return Ok(None),
        Ok(Some(Err(LinesCodecError::MaxLineLengthExceeded))) => {
            return Err(Failure::new(format!(
                "the request line is longer than {MAX_REQUEST_BYTES} bytes — split the apply into smaller ones"
            )))
        }
        Ok(Some(Err(error))) => {
            return Err(Failure::new(format!("cannot read the request: {error}")))
        }
        Ok(Some(Ok(line))) => line,
    };
    let line: RequestLine = serde_json::from_str(&line)
        .map_err(|error| Failure::new(format!("malformed request: {error}")))?;
    if line.protocol != PROTOCOL_VERSION {
        return Err(Failure::new(format!(
            "the client speaks API protocol {}, this controller {PROTOCOL_VERSION} — use the vd of the controller's version",
            line.protocol
        )));
    }
    Ok(Some(line.request))
}

async fn serve_connection(
    controller: Arc<Controller>,
    stream: UnixStream,
    requests: &tokio_util::task::TaskTracker,
) {
    let (reader, mut writer) = stream.into_split();
    let peer = writer.as_ref().peer_cred();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own_uid = unsafe { libc::geteuid() };
    if !peer.is_ok_and(|credentials| credentials.uid() == own_uid) {
        let refusal = Frame::Failed(Failure::new(
            "only the user the controller runs as may use its socket",
        ));
        let _ = write_frame(&mut writer, &refusal).await;
        return;
    }
    let mut lines = FramedRead::new(reader, LinesCodec::new_with_max_length(MAX_REQUEST_BYTES));
    let request = match read_request(&mut lines).await {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(failure) => {
            let _ = write_frame(&mut writer, &Frame::Failed(failure)).await;
            return;
        }
    };
    let (frames, mut outgoing) = tokio::sync::mpsc::unbounded_channel::<Frame>();
    if super::stream::is_stream(&request) {
        // An interactive exec's input: the lines after its request.
        let input = matches!(
            request,
            Request::Exec {
                session: Some(_),
                ..
            }
        )
        .then(|| crate::exec::session_input(lines));
        tokio::spawn(super::stream::serve(controller, request, frames, input));
        while let Some(frame) = outgoing.recv().await {
            if write_frame(&mut writer, &frame).await.is_err() {
                // The client went away: dropping `outgoing` ends the stream.
                break;
            }
        }
        return;
    }
    tokio::task::spawn_blocking(move || {
        let result = controller.handle(request, &mut |progress| {
            let _ = frames.send(Frame::Progress(progress));
        });
        let _ = frames.send(match result {
            Ok(response) => Frame::Done(Box::new(response)),
            Err(failure) => Frame::Failed(failure),
        });
    });
    // The answer is written under the tracker, so a stop waits for it.
    requests
        .track_future(async move {
            while let Some(frame) = outgoing.recv().await {
                if write_frame(&mut writer, &frame).await.is_err() {
                    // The client went away; the request still finishes.
                    break;
                }
            }
        })
        .await;
}
