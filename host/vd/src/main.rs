//! `vd`: the voodu command line, and the controller it runs for
//! `vd controller` and `vd up`. The client verbs live in `voodu-cli`, the
//! controller in `voodu-controller`; this binary only joins the two.
//!
//! **May not depend on** anything but those two and the logging crates
//! (`tests/crate_rules.rs` checks this).

use std::process::ExitCode;

use voodu_cli::ControllerOptions;
use voodu_controller::ControllerConfig;

fn main() -> ExitCode {
    if let Some(code) = serve_as_plugin_child() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    voodu_cli::main(voodu_cli::Hooks {
        controller: run_controller,
        check_plugin: voodu_controller::check::run_checks,
        test_plugin: voodu_controller::acceptance::run_acceptance,
    })
}

/// Serves as an out-of-process plugin's child when this process was
/// started as one: the plugin's own log lines go to the parent; the host's
/// few lines about it go to stderr, warnings and worse.
fn serve_as_plugin_child() -> Option<i32> {
    std::env::var_os(voodu_controller::PLUGIN_CHILD_ENV)?;
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .try_init();
    voodu_controller::serve_as_plugin_child()
}

/// Ends the process at once with `code` when a plugin library's
/// constructor never returned (see `voodu_controller::must_exit_at_once`).
fn exit_now_if_a_load_is_stuck(code: i32) {
    if voodu_controller::must_exit_at_once() {
        // SAFETY: _exit ends the process without running destructors, which
        // is the point: they would wait for the stuck loader lock.
        unsafe { libc::_exit(code) };
    }
}

/// How many log lines may wait for a slow stderr before new ones are
/// dropped.
const LOG_BUFFER_LINES: usize = 10_000;

/// Runs `vd controller`'s supervisor (see `voodu_controller::supervisor`):
/// it holds the root's lock and the API socket and keeps a worker, this
/// same binary started with `--worker-fds`, serving on it. Its few log
/// lines go to the same lossy stderr writer as the worker's, so a stderr
/// nobody reads never keeps it from starting a worker again.
fn supervise(options: &ControllerOptions, ready: Box<dyn FnOnce() + Send>) -> Result<(), String> {
    let program = std::env::current_exe().map_err(|error| {
        format!("cannot find this program to start the controller's worker: {error}")
    })?;
    let worker = voodu_controller::supervisor::WorkerCommand {
        program,
        args: options.worker_args().into_iter().map(Into::into).collect(),
        upgrade_timeout: options.upgrade_timeout,
    };
    match voodu_controller::supervisor::supervise(&options.root, &worker, ready) {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("the controller's worker ended with {status}")),
        Err(error) => Err(error.to_string()),
    }
}

/// The etcd user's password, for a node started with `--cluster-user`:
/// the first line of `--cluster-password-file`, else
/// `VOODU_CLUSTER_PASSWORD`; empty without a user.
fn cluster_password(cluster: Option<&voodu_cli::ClusterOptions>) -> Result<String, String> {
    let Some(cluster) = cluster else {
        return Ok(String::new());
    };
    let Some(user) = &cluster.user else {
        return Ok(String::new());
    };
    if let Some(file) = &cluster.password_file {
        let text = std::fs::read_to_string(file).map_err(|error| {
            format!(
                "cannot read --cluster-password-file {}: {error}",
                file.display()
            )
        })?;
        return Ok(text.lines().next().unwrap_or_default().to_owned());
    }
    std::env::var("VOODU_CLUSTER_PASSWORD").map_err(|_| {
        format!(
            "etcd user {user} needs its password: give --cluster-password-file FILE, or set VOODU_CLUSTER_PASSWORD"
        )
    })
}

/// Runs a controller in the foreground with its log on stderr
/// (`VOODU_LOG` sets the filter, default `info`). The log is written by a
/// thread of its own and dropped when stderr does not keep up (a full pipe
/// nobody reads), so logging never blocks the controller.
fn run_controller(
    options: &ControllerOptions,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("VOODU_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let (stderr, _flush_on_exit) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(LOG_BUFFER_LINES)
        .finish(std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(stderr)
        .with_ansi(anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never)
        .init();
    // A wrong --build-base stops the controller before it starts.
    let build_bases = voodu_controller::BaseImages::with_settings(&options.build_bases)?;
    // So does a secrets key that cannot be used.
    let secrets = voodu_controller::SecretKeys::from_files(&options.secrets_keys)
        .map_err(|error| error.to_string())?
        .map(std::sync::Arc::new);
    let Some(worker) = options.worker else {
        return supervise(options, ready);
    };
    let password = cluster_password(options.cluster.as_ref())?;
    let plugin_trust = match &options.cluster {
        Some(cluster) if cluster.trust_unsigned_plugins => voodu_controller::PluginTrust::Unsigned,
        Some(cluster) => voodu_controller::PluginTrust::Signed(
            voodu_controller::TrustedKeys::from_files(&cluster.trust_keys)
                .map_err(|error| format!("--trust-key {error}"))?,
        ),
        None => voodu_controller::PluginTrust::Unsigned,
    };
    let config = ControllerConfig {
        root: options.root.clone(),
        plugin_call_timeout: options.plugin_timeout,
        docker: options.docker,
        resync_every: options.resync,
        workers: options.workers.unwrap_or(voodu_controller::DEFAULT_WORKERS),
        cluster: options
            .cluster
            .as_ref()
            .map(|cluster| voodu_controller::ClusterConfig {
                endpoints: cluster.endpoints.clone(),
                prefix: cluster.prefix.clone(),
                node: cluster.node.clone(),
                lease_ttl: cluster.lease_ttl,
                advertise: cluster.advertise,
                peer_port: cluster.peer_port,
                cluster_ca: cluster.cacert.clone(),
                cluster_identity: cluster.identity.clone(),
                cluster_user: cluster.user.clone().map(|user| (user, password.clone())),
                plugin_trust: plugin_trust.clone(),
                peer_tls: cluster.peer_tls.clone().map(|(ca, cert, key)| {
                    voodu_controller::peers::tls::PeerTlsFiles { ca, cert, key }
                }),
                adopt_lease: worker.node_lease,
            }),
        metrics_listen: options.metrics_listen,
        build_bases,
        secrets,
    };
    // SAFETY: descriptors the supervisor handed over for this process
    // alone; each is owned from here on, and closed on exec so no process
    // a plugin starts inherits it.
    let channels = unsafe {
        use std::os::fd::FromRawFd;
        for fd in [worker.api, worker.control, worker.keeper] {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
        voodu_controller::server::WorkerChannels {
            api: std::os::unix::net::UnixListener::from_raw_fd(worker.api),
            control: std::os::unix::net::UnixStream::from_raw_fd(worker.control),
            keeper: std::os::fd::OwnedFd::from_raw_fd(worker.keeper),
            takeover: worker.takeover,
        }
    };
    let result = voodu_controller::server::run_worker(config, channels, |controller, socket| {
        let plugins = controller.plugins().list().len();
        tracing::info!(socket = %socket.display(), plugins, "controller ready");
        ready();
    })
    .map_err(|error| error.to_string());
    drop(_flush_on_exit);
    exit_now_if_a_load_is_stuck(if result.is_ok() { 0 } else { 1 });
    result
}
