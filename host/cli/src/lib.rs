//! # voodu-cli
//!
//! The `vd` command line: argument parsing, and one module per verb of the
//! API (`verbs/`: its arguments, its request, its text). Every
//! verb but `controller` is a client of the controller's API and never opens
//! the store or Docker itself.
//!
//! Exit codes: 0 success, 1 the request failed (a refused apply, an unknown
//! workload, ...), 2 bad arguments, 3 no controller is running.
//!
//! **May not depend on** any voodu crate but `voodu-api`, `voodu-model` and `voodu-plugin-abi`: it is a client of the controller's API, never opening the store or the engine, and runs a controller only through the [`RunController`] the `vd` binary hands it (`tests/crate_rules.rs` checks this).

#![warn(missing_docs)]

mod context;
mod progress;
mod render;
mod verbs;

pub use verbs::command_words;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use voodu_api::client::{Client, ClientError, Endpoint};
use voodu_api::ssh::SshTarget;
use voodu_api::{Frame, Request, Response, WaitReport};
use voodu_model::placement::NodeName;

/// Exit code of a request that failed.
const EXIT_FAILED: u8 = 1;
/// Exit code of bad arguments, as clap uses.
const EXIT_USAGE: u8 = 2;
/// Exit code when no controller answers.
pub(crate) const EXIT_NO_CONTROLLER: u8 = 3;
/// Exit code after Ctrl-C stopped a wait (the rollout goes on).
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Parser)]
#[command(
    name = "vd",
    version,
    about = "voodu: declare workloads in HCL, and the controller makes Docker match",
    after_help = "Exit codes: 0 success, 1 the request failed, 2 bad arguments, 3 no controller is running."
)]
struct Cli {
    /// The controller's root directory: state, plugins and socket.
    /// Default: $VOODU_ROOT, else $HOME/.voodu.
    // Read from the environment by hand, not with clap's `env`: clap counts
    // an argument taken from the environment as given, and so printed
    // `--root <DIR>` in every usage line as if it were required.
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Run the verb against a host's controller over SSH, as `docker -H
    /// ssh://` does: ssh://[user@]host[:port][/root] (the root there;
    /// default: --root, else that user's). The host needs vd on its PATH;
    /// your own ssh decides who gets in. Default: $VD_HOST.
    #[arg(short = 'H', long = "host", global = true, value_name = "URL")]
    host: Option<String>,
    /// Run the verb against a remote of `vd remote list` (voodu's, kept in
    /// .git/config); the remote named `voodu` is the default when there
    /// is one and neither -H nor --root is given.
    #[arg(
        short = 'r',
        long = "remote",
        global = true,
        value_name = "NAME",
        conflicts_with = "host"
    )]
    remote: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// How read verbs print their answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
enum Output {
    /// For people.
    #[default]
    Text,
    /// The API's JSON, for scripts.
    Json,
}

#[derive(Debug, Clone, clap::Args)]
struct OutputArg {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Debug, clap::Args)]
struct ControllerArgs {
    /// The bound on every plugin call; a plugin that overruns it is marked
    /// wedged.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    plugin_timeout: Duration,
    /// Validate and store only; never touch Docker.
    #[arg(long)]
    no_docker: bool,
    /// How often every workload is converged again, to repair what Docker's
    /// events missed.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    resync: Duration,
    /// How many workloads reconcile at once; rollouts of different
    /// workloads never wait for each other below this bound.
    /// Default: the controller's own (8).
    #[arg(long, value_parser = clap::value_parser!(usize))]
    workers: Option<usize>,
    /// Keep the desired state in this etcd cluster (client URLs, comma
    /// separated) instead of SQLite in the root, so that it outlives this
    /// host. Every node runs its share of the replicas, as the cluster's
    /// leader places them.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    cluster: Vec<String>,
    /// This node's name in the cluster: letters, digits, '.', '-', '_'.
    /// Default: the host name.
    #[arg(long, requires = "cluster")]
    node: Option<NodeName>,
    /// The etcd key prefix the cluster's state lives under.
    #[arg(long, default_value = "/voodu", requires = "cluster")]
    cluster_prefix: String,
    /// How long the node's lease lasts without renewal: a node not heard
    /// from for this long is counted lost (renewed every third of it).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, requires = "cluster")]
    lease_ttl: Duration,
    /// The IP address the other nodes reach this node's published ports
    /// at, for blocks with `host` addressing. Default: the host IP each
    /// port is published on (127.0.0.1 unless the port says otherwise).
    #[arg(long, value_name = "ADDR", requires = "cluster")]
    advertise: Option<std::net::IpAddr>,
    /// The TCP port, on the --advertise address (loopback without it),
    /// where this node answers the other nodes' requests for its share of
    /// `vd get pods`, `logs`, `stats`, `describe` and `rollout status`.
    /// 0: any free port, which the node reports to the cluster.
    #[arg(long, value_name = "PORT", default_value_t = voodu_api::peer::DEFAULT_PEER_PORT, requires = "cluster")]
    peer_port: u16,
    /// The CA certificate (PEM) that signed etcd's, for https:// cluster
    /// URLs.
    #[arg(long, value_name = "FILE", requires = "cluster")]
    cluster_cacert: Option<PathBuf>,
    /// This node's client certificate (PEM) for an etcd that asks for one
    /// (its --client-cert-auth); with --cluster-key.
    #[arg(long, value_name = "FILE", requires_all = ["cluster", "cluster_key"])]
    cluster_cert: Option<PathBuf>,
    /// The key (PEM) of --cluster-cert.
    #[arg(long, value_name = "FILE", requires_all = ["cluster", "cluster_cert"])]
    cluster_key: Option<PathBuf>,
    /// The etcd user, when etcd's auth is on; its password from
    /// --cluster-password-file or VOODU_CLUSTER_PASSWORD, never an argument.
    #[arg(long, value_name = "NAME", requires = "cluster")]
    cluster_user: Option<String>,
    /// A file holding the etcd user's password (its first line).
    #[arg(long, value_name = "FILE", requires = "cluster_user")]
    cluster_password_file: Option<PathBuf>,
    /// The cluster's CA certificate (PEM) for the node-to-node channel,
    /// which is then mutual TLS: a peer without a certificate of this CA
    /// is refused. With --peer-cert and --peer-key.
    #[arg(long, value_name = "FILE", requires_all = ["cluster", "peer_cert", "peer_key"])]
    peer_cacert: Option<PathBuf>,
    /// This node's certificate (PEM) for the node-to-node channel, signed
    /// by --peer-cacert and naming the node (--node) as a DNS name.
    #[arg(long, value_name = "FILE", requires = "peer_cacert")]
    peer_cert: Option<PathBuf>,
    /// The key (PEM) of --peer-cert.
    #[arg(long, value_name = "FILE", requires = "peer_cacert")]
    peer_key: Option<PathBuf>,
    /// An operator's public key (`vd keys new signing FILE` writes
    /// FILE.pub): the node loads a plugin installed cluster-wide only when
    /// its record is signed by one of these. Repeat it per operator.
    #[arg(long, value_name = "FILE.pub", requires = "cluster")]
    trust_key: Vec<PathBuf>,
    /// Load plugins installed cluster-wide without a signature: whoever can
    /// write etcd then runs code on this node. For a lab only.
    #[arg(long, requires = "cluster", conflicts_with = "trust_key")]
    trust_unsigned_plugins: bool,
    /// Serve the controller's metrics on `http://ADDR/metrics`, in the
    /// Prometheus text format (only metrics, never the API). Off by
    /// default.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// A language handler's base image for builds without a Dockerfile,
    /// `KEY=IMAGE` with `{version}` for the `lang` version: keys go,
    /// go-runtime, nodejs, python, ruby, rails (default
    /// golang:{version}-alpine, alpine:3.20, node:{version}-alpine,
    /// python:{version}-slim, ruby:{version}-slim). Repeat it per key.
    #[arg(long = "build-base", value_name = "KEY=IMAGE")]
    build_base: Vec<String>,
    /// Seal secrets (`config set --secret`) at rest in the store with this
    /// key (64 hex digits in a file only its owner reads: `vd keys new
    /// secrets FILE`). Repeat it to add a key: the first seals, each
    /// opens what it sealed (`vd config rotate-key` moves every secret to
    /// the first). Secrets stored plain before are sealed at the start.
    #[arg(long = "secrets-key", value_name = "FILE")]
    secrets_key: Vec<PathBuf>,
    /// How long an old worker may take to finish its open connections
    /// after `vd controller upgrade` (or SIGHUP), and the last worker after
    /// SIGTERM, before it is killed.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    upgrade_timeout: Duration,
    /// Run as the controller's worker, under `vd controller`'s supervisor,
    /// with the API socket, the control channel and the socket keeper's
    /// channel on these inherited descriptors. Set by the supervisor only.
    #[arg(long, hide = true, value_name = "API,CONTROL,KEEPER", value_parser = parse_worker_fds)]
    worker_fds: Option<WorkerFds>,
    /// With --worker-fds: an upgrade's new worker, which loads and then
    /// waits for the old one to hand over. Set by the supervisor only.
    #[arg(long, hide = true, requires = "worker_fds")]
    takeover: bool,
    /// With --worker-fds and --cluster: the lease this node's name is held
    /// under by the supervisor's earlier worker, taken over instead of a
    /// new join. Set by the supervisor only.
    #[arg(long, hide = true, requires = "worker_fds", value_name = "LEASE")]
    node_lease: Option<i64>,
}

/// The descriptors a worker inherits from its supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerFds {
    /// The API socket, listening.
    pub api: i32,
    /// The control channel to the supervisor.
    pub control: i32,
    /// The channel to the supervisor's socket keeper.
    pub keeper: i32,
    /// Whether this worker takes over from another (an upgrade).
    pub takeover: bool,
    /// In a cluster: the lease of the node's name its predecessor held.
    pub node_lease: Option<i64>,
}

/// `--worker-fds API,CONTROL,KEEPER`.
fn parse_worker_fds(text: &str) -> Result<WorkerFds, String> {
    let parts: Vec<i32> = text
        .split(',')
        .map(|part| {
            part.trim()
                .parse::<i32>()
                .map_err(|error| error.to_string())
        })
        .collect::<Result<_, _>>()?;
    let [api, control, keeper] = parts[..] else {
        return Err("three descriptors, API,CONTROL,KEEPER".into());
    };
    Ok(WorkerFds {
        api,
        control,
        keeper,
        takeover: false,
        node_lease: None,
    })
}

/// How a controller joins a cluster (`--cluster`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// The etcd client URLs.
    pub endpoints: Vec<String>,
    /// This node's name.
    pub node: NodeName,
    /// The key prefix.
    pub prefix: String,
    /// The node's lease.
    pub lease_ttl: Duration,
    /// The address the other nodes reach this node's published ports at.
    pub advertise: Option<std::net::IpAddr>,
    /// The port the node answers the other nodes on.
    pub peer_port: u16,
    /// The CA certificate that signed etcd's.
    pub cacert: Option<PathBuf>,
    /// This node's client certificate and key for etcd.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The etcd user.
    pub user: Option<String>,
    /// The file of the etcd user's password.
    pub password_file: Option<PathBuf>,
    /// The node-to-node channel's CA, certificate and key.
    pub peer_tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// The operators' public keys cluster plugins must be signed by.
    pub trust_keys: Vec<PathBuf>,
    /// Load unsigned cluster plugins (a lab).
    pub trust_unsigned_plugins: bool,
}

/// How `vd controller` and `vd up` want a controller run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerOptions {
    /// The root directory.
    pub root: PathBuf,
    /// The bound on every plugin call.
    pub plugin_timeout: Duration,
    /// Whether to drive the Docker engine.
    pub docker: bool,
    /// How often every workload is converged again.
    pub resync: Duration,
    /// How many workloads reconcile at once; `None`: the controller's
    /// default.
    pub workers: Option<usize>,
    /// With `--cluster`: the cluster to join.
    pub cluster: Option<ClusterOptions>,
    /// Set when this process is a supervisor's worker: the descriptors it
    /// inherited.
    pub worker: Option<WorkerFds>,
    /// How long an old or stopping worker may take to finish its
    /// connections before it is killed.
    pub upgrade_timeout: Duration,
    /// Where `/metrics` is served, if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The language handlers' base images, as `--build-base KEY=IMAGE`.
    pub build_bases: Vec<String>,
    /// The secrets key files, the one that seals first.
    pub secrets_keys: Vec<PathBuf>,
}

impl ControllerOptions {
    /// The arguments that run a worker of these options (`--root R
    /// controller ...`), without `--worker-fds`, which the supervisor adds.
    pub fn worker_args(&self) -> Vec<String> {
        let mut args = vec![
            "--root".to_owned(),
            self.root.display().to_string(),
            "controller".to_owned(),
            "--plugin-timeout".to_owned(),
            humantime::format_duration(self.plugin_timeout).to_string(),
            "--resync".to_owned(),
            humantime::format_duration(self.resync).to_string(),
        ];
        if !self.docker {
            args.push("--no-docker".into());
        }
        if let Some(address) = self.metrics_listen {
            args.extend(["--metrics-listen".into(), address.to_string()]);
        }
        for base in &self.build_bases {
            args.extend(["--build-base".into(), base.clone()]);
        }
        for key in &self.secrets_keys {
            args.extend(["--secrets-key".into(), key.display().to_string()]);
        }
        if let Some(workers) = self.workers {
            args.extend(["--workers".into(), workers.to_string()]);
        }
        if let Some(cluster) = &self.cluster {
            args.extend([
                "--cluster".into(),
                cluster.endpoints.join(","),
                "--node".into(),
                cluster.node.to_string(),
                "--cluster-prefix".into(),
                cluster.prefix.clone(),
                "--lease-ttl".into(),
                humantime::format_duration(cluster.lease_ttl).to_string(),
            ]);
            if let Some(advertise) = cluster.advertise {
                args.extend(["--advertise".into(), advertise.to_string()]);
            }
            args.extend(["--peer-port".into(), cluster.peer_port.to_string()]);
            if let Some(cacert) = &cluster.cacert {
                args.extend(["--cluster-cacert".into(), cacert.display().to_string()]);
            }
            if let Some((cert, key)) = &cluster.identity {
                args.extend(["--cluster-cert".into(), cert.display().to_string()]);
                args.extend(["--cluster-key".into(), key.display().to_string()]);
            }
            if let Some(user) = &cluster.user {
                args.extend(["--cluster-user".into(), user.clone()]);
            }
            // The password itself goes to the worker through the
            // environment it inherits, or as its file: never an argument.
            if let Some(file) = &cluster.password_file {
                args.extend(["--cluster-password-file".into(), file.display().to_string()]);
            }
            for key in &cluster.trust_keys {
                args.extend(["--trust-key".into(), key.display().to_string()]);
            }
            if cluster.trust_unsigned_plugins {
                args.push("--trust-unsigned-plugins".into());
            }
            if let Some((ca, cert, key)) = &cluster.peer_tls {
                for (flag, file) in [
                    ("--peer-cacert", ca),
                    ("--peer-cert", cert),
                    ("--peer-key", key),
                ] {
                    args.extend([flag.into(), file.display().to_string()]);
                }
            }
        }
        args
    }
}

/// Runs a controller in the foreground until SIGINT or SIGTERM, calling
/// `ready` once its socket accepts connections. The `vd` binary supplies
/// it (from `voodu-controller`), so that this crate stays a client of the
/// API. The error is one line for the operator.
pub type RunController = fn(&ControllerOptions, Box<dyn FnOnce() + Send>) -> Result<(), String>;

#[derive(Debug, clap::Args)]
struct WaitArgs {
    /// Return as soon as the change is stored, without following the
    /// rollout.
    #[arg(long)]
    no_wait: bool,
    /// Stop following after this long (the rollout goes on), exiting 1 and
    /// naming what is still converging, at which step.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    timeout: Option<Duration>,
}

impl WaitArgs {
    /// How to follow the rollout the request starts, unless `--no-wait`.
    fn follow_up(&self) -> Option<FollowUp> {
        (!self.no_wait).then_some(FollowUp {
            timeout: self.timeout,
        })
    }
}

/// What `vd controller` does besides running one.
#[derive(Debug, Subcommand)]
enum ControllerAction {
    /// Replace the running controller's worker with one started from the
    /// binary now at the controller's path (as SIGHUP to `vd controller`
    /// does): the new worker loads the plugins and takes over the same
    /// sockets, so no connection is refused; the old one finishes its open
    /// connections within --upgrade-timeout. If the new worker cannot start
    /// or lacks a plugin the old one serves, the old one serves on and this
    /// says why.
    Upgrade(verbs::version::UpgradeArgs),
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller in the foreground: owns the store and the plugins,
    /// and serves the API on <root>/controller.sock.
    Controller {
        #[command(flatten)]
        options: ControllerArgs,
        #[command(subcommand)]
        action: Option<ControllerAction>,
    },
    /// Run a controller in the foreground and apply manifests to it: for
    /// single-host use and demos. Ctrl-C stops the controller (the replicas
    /// keep running).
    Up {
        /// Manifest files or directories.
        #[arg(short = 'f', long = "file", required = true, num_args = 1.., value_name = "PATH")]
        files: Vec<PathBuf>,
        /// Plugins to install (or replace) before applying.
        #[arg(long = "plugin", value_name = "FILE.so")]
        plugins: Vec<PathBuf>,
        #[command(flatten)]
        options: ControllerArgs,
    },
    /// Apply manifests, all or nothing: every plugin block is validated by
    /// its plugin, and nothing is stored unless all pass. Then follow the
    /// rollouts until they converge (Ctrl-C stops following, not the
    /// rollout).
    Apply(verbs::apply::ApplyArgs),
    /// Show what an apply of manifests would change, as voodu's diff does,
    /// storing nothing: exit 0 when nothing would change, 2 when something
    /// would, 1 on an error.
    Diff(verbs::diff::DiffArgs),
    /// Follow a workload's rollout until it converges (or, for a deleted
    /// one, until its replicas are gone).
    #[command(name = "rollout")]
    Rollout(verbs::rollout::RolloutArgs),
    /// Show recent events, of one workload or all; -w streams new ones.
    Events(verbs::events::EventsArgs),
    /// Show one workload: core spec, normalised blocks in order, recent events.
    Describe(verbs::describe::DescribeArgs),
    /// List stored workloads, or the replicas Docker runs.
    Get(verbs::get::GetArgs),
    /// Show what each replica uses now: CPU, memory and network from the
    /// engine's stats, and restarts; of one workload or all; -w refreshes.
    Stats(verbs::stats::StatsArgs),
    /// Remove what the controller leaves alone unless asked: with
    /// --orphans, every container whose workload the store has no record
    /// of, each drained as any removal, after naming it.
    Prune(verbs::prune::PruneArgs),
    /// The store: `vd store backup FILE` writes a consistent copy of it
    /// while the controller runs.
    Store(verbs::store::StoreArgs),
    /// Make keys: `vd keys new secrets FILE` for `vd controller
    /// --secrets-key`. No controller is asked.
    Keys(verbs::keys::KeysArgs),
    /// voodu's remotes, the hosts `vd -r NAME` reaches over SSH, kept in
    /// this repository's .git/config: add, list, remove.
    Remote(verbs::remote::RemoteArgs),
    /// Join standard input and output to the controller's socket: what
    /// `vd -H ssh://host` runs on the host. Not for typing.
    #[command(name = "dial-stdio")]
    DialStdio,
    /// A cluster's nodes: `vd node remove NAME` declares a lost node's
    /// host gone, so its statefulset ordinals move.
    Node(verbs::node::NodeArgs),
    /// voodu's config buckets: variables kept in the store, which
    /// workloads take with env_from (and from their own bucket, scope/name);
    /// bucket values win over env, and a change rolls the workloads.
    Config(verbs::config::ConfigArgs),
    /// Delete a workload: its replicas are drained and removed, then each
    /// plugin with a block on it is told to forget it.
    Delete(verbs::delete::DeleteArgs),
    /// Install a plugin: check that it loads and names itself, then make it
    /// live under <root>/plugins/<name>/.
    #[command(name = "plugins:install")]
    PluginsInstall(verbs::plugins::PluginsInstallArgs),
    /// Check a plugin file against the plugin contract, with no controller
    /// and no Docker: it loads as plugins:install loads it, then every call
    /// is driven and every reply checked. One line per check; exit 0 only
    /// when none fails.
    #[command(name = "plugins:check")]
    PluginsCheck(verbs::check::PluginsCheckArgs),
    /// An acceptance run of a plugin on the engine, as `vd plugins:check`
    /// cannot: a throwaway controller installs it and applies the manifest,
    /// then each workload is rolled, a replica killed, one scaled down by
    /// a replica and all deleted, with load through the plugin's address
    /// when --through names it. One line per step, the plugin's calls and
    /// their latencies; exit 0 only when no step failed and no request was
    /// lost.
    #[command(name = "plugins:test")]
    PluginsTest(verbs::plugins_test::PluginsTestArgs),
    /// List the loaded plugins: name, version, ABI, kind, path, and the
    /// settings each was given.
    #[command(name = "plugins:list")]
    PluginsList(verbs::plugins::PluginsListArgs),
    /// Show a plugin's plugin-wide settings, or give it new ones from a
    /// JSON file (`-` reads standard input): checked against the settings
    /// the plugin describes (`vd explain NAME`), taken by the plugin at
    /// once, kept across restarts and, in a cluster, given to every node.
    #[command(name = "plugins:settings")]
    PluginsSettings(verbs::plugins::PluginsSettingsArgs),
    /// List a workload's stored revisions.
    History(verbs::history::HistoryArgs),
    /// Apply a stored revision of a workload again (through the plugins'
    /// validation), as a new revision, and follow the rollout.
    Rollback(verbs::rollback::RollbackArgs),
    /// Replace every replica of a workload, as a rolling update does (new
    /// ones first, each old one drained), its spec unchanged; and follow
    /// the rollout.
    Restart(verbs::rollback::RestartArgs),
    /// voodu's releases: `run` runs a deployment's release commands now,
    /// then replaces its replicas as restart does (and runs its
    /// post_command once they are); `history` lists what its releases
    /// ran and how each ended.
    Release(verbs::release::ReleaseArgs),
    /// Run a command in one of a workload's running replicas (this node's,
    /// or in a cluster another node's over the mutual-TLS node channel),
    /// print what it writes and exit with its exit code.
    Exec(verbs::exec::ExecArgs),
    /// Run a job (or a cronjob, out of its schedule) once, print what it
    /// writes and exit with its exit code (124 past its timeout); its
    /// container is kept for vd logs, within its history limits.
    Run(verbs::run::RunArgs),
    /// Stop a workload's replicas on this node (or one), each drained
    /// first, their containers kept; frozen until vd start (voodu's).
    Stop(verbs::stops::StopArgs),
    /// Start replicas vd stop froze, each created anew from the current
    /// spec and config (voodu's).
    Start(verbs::stops::StartArgs),
    /// Show every replica's log, each line prefixed with its replica id.
    Logs(verbs::logs::LogsArgs),
    /// Show the versions of this CLI and of the controller, and the plugin
    /// ABI they host.
    Version(verbs::version::VersionArgs),
    /// Print a shell completion script: `vd completions bash >
    /// /etc/bash_completion.d/vd`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Give a plugin a fresh instance: for one wedged in a call, poisoned by
    /// a panic, or quarantined after a crash. Its file is loaded anew, every
    /// stored block is validated again, and every block's endpoint set is
    /// sent to it at once.
    #[command(name = "plugins:reload")]
    PluginsReload(verbs::plugins::PluginsReloadArgs),
    /// Remove a plugin; refused while a stored workload has a block for it.
    #[command(name = "plugins:remove")]
    PluginsRemove(verbs::plugins::PluginsRemoveArgs),
    /// Sign the cluster's record of an installed plugin with an
    /// operator's key (`vd keys new signing FILE`): nodes started with
    /// --trust-key load only records a trusted key signed.
    #[command(name = "plugins:sign")]
    PluginsSign(verbs::plugins::PluginsSignArgs),
    /// Send one call (validate, publish, drain or forget) to a loaded
    /// plugin, the request as JSON from FILE or stdin, and print its reply:
    /// for a plugin author to see every call without Docker. It reaches the
    /// live instance: a publish changes what the plugin serves.
    /// `--example` prints a request to start from.
    #[command(name = "plugins:call")]
    PluginsCall(verbs::plugins::PluginsCallArgs),
    /// Show the options a block takes, as its plugin describes them: each
    /// option's type, default and meaning (`-o json`: the plugin's JSON
    /// Schema).
    Explain(verbs::explain::ExplainArgs),
    /// Write a new plugin project, in Rust or C, that builds and passes
    /// `vd plugins:check` as it is: one block option, a validate that
    /// refuses a bad value in voodu's style, publish, drain and forget, and
    /// a test (Rust) or a Makefile with `make check` (C). No controller.
    #[command(name = "plugins:new")]
    PluginsNew(verbs::new::PluginsNewArgs),
}

fn default_root() -> PathBuf {
    if let Some(root) = std::env::var_os("VOODU_ROOT").filter(|root| !root.is_empty()) {
        return PathBuf::from(root);
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib"))
        .join(".voodu")
}

/// Prints an error line on stderr and returns the exit code.
fn fail(message: impl std::fmt::Display, code: u8) -> ExitCode {
    render::error_line(&message.to_string());
    ExitCode::from(code)
}

pub use verbs::check::CheckPlugin;
pub use verbs::plugins_test::TestPlugin;

/// What only the `vd` binary can do, handed to [`main`]: this crate stays a
/// client of the API and never reaches the plugin host.
#[derive(Debug, Clone, Copy)]
pub struct Hooks {
    /// Runs the controller for `vd controller` and `vd up`.
    pub controller: RunController,
    /// Runs the checks of `vd plugins:check`.
    pub check_plugin: CheckPlugin,
    /// Runs the acceptance run of `vd plugins:test`.
    pub test_plugin: TestPlugin,
}

/// The environment variable `-H` defaults to.
const HOST_VAR: &str = "VD_HOST";

/// Where the verbs of `cli` reach their controller: `-H`, `-r`, $VD_HOST,
/// then this host's root when --root (or $VOODU_ROOT) names one, then the
/// `voodu` remote when this repository has one, then this host's default
/// root.
fn endpoint(cli: &Cli) -> Result<Endpoint, String> {
    let ssh = |target: SshTarget| Endpoint::Ssh(target.with_root(cli.root.as_deref()));
    if let Some(url) = &cli.host {
        return SshTarget::from_url(url)
            .map(ssh)
            .map_err(|error| format!("-H: {error}"));
    }
    if let Some(name) = &cli.remote {
        return verbs::remote::target(name)
            .map(ssh)
            .map_err(|error| format!("-r: {error}"));
    }
    if let Some(url) = std::env::var(HOST_VAR).ok().filter(|url| !url.is_empty()) {
        return SshTarget::from_url(&url)
            .map(ssh)
            .map_err(|error| format!("${HOST_VAR}: {error}"));
    }
    let root_named =
        cli.root.is_some() || std::env::var_os("VOODU_ROOT").is_some_and(|root| !root.is_empty());
    if !root_named {
        if let Some(target) = verbs::remote::default_target()
            .map_err(|error| format!("the default remote: {error}"))?
        {
            return Ok(ssh(target));
        }
    }
    Ok(Endpoint::Local(
        cli.root.clone().unwrap_or_else(default_root),
    ))
}

/// Runs `vd` with the process's arguments and the binary's `hooks`.
pub fn main(hooks: Hooks) -> ExitCode {
    let cli = Cli::parse_from(voodu_config_forms(std::env::args_os().collect()));
    let root = cli.root.clone().unwrap_or_else(default_root);
    let controller = hooks.controller;
    let runs_here = matches!(
        cli.command,
        Command::PluginsCheck(_)
            | Command::PluginsTest(_)
            | Command::PluginsNew(_)
            | Command::Controller { action: None, .. }
            | Command::Up { .. }
            | Command::Completions { .. }
            | Command::Remote(_)
            | Command::Keys(_)
            | Command::DialStdio
    );
    if runs_here && (cli.host.is_some() || cli.remote.is_some()) {
        return fail(
            "vd: this command runs on this host only, never through -H or -r — run it on the host itself (`ssh user@host vd ...`)",
            EXIT_USAGE,
        );
    }
    let client = if runs_here {
        Client::new(&root)
    } else {
        match endpoint(&cli) {
            Ok(endpoint) => Client::at(endpoint),
            Err(message) => return fail(format!("vd: {message}"), EXIT_USAGE),
        }
    };
    match cli.command {
        Command::Remote(args) => args.run(),
        Command::Keys(args) => args.run(),
        Command::DialStdio => verbs::dial::run(&root),
        Command::PluginsCheck(args) => args.run(hooks.check_plugin),
        Command::PluginsTest(args) => args.run(hooks.test_plugin),
        Command::PluginsNew(args) => args.run(),
        Command::Controller {
            options,
            action: None,
        } => run_controller(controller, &root, &options, None),
        Command::Up {
            files,
            plugins,
            options,
        } => run_controller(controller, &root, &options, Some((plugins, files))),
        Command::Completions { shell } => {
            // Generated into memory first: clap_complete panics on a write
            // error, and a reader that stops early (`| head -1`) is no
            // error of ours.
            let mut script = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "vd",
                &mut script,
            );
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(&script).and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(error) => fail(format!("vd completions: {error}"), EXIT_FAILED),
            }
        }
        Command::Stats(args) if args.watch => match args.watch(&client) {
            Ok(()) => ExitCode::SUCCESS,
            Err(
                error @ (ClientError::NotRunning { .. } | ClientError::NotRunningOnHost { .. }),
            ) => fail(error, EXIT_NO_CONTROLLER),
            Err(ClientError::Failed(failure)) => {
                render::failure(&failure);
                ExitCode::from(EXIT_FAILED)
            }
            Err(error) => fail(error, EXIT_FAILED),
        },
        Command::Apply(args) => run_apply(&client, args),
        command => run_client(&client, command),
    }
}

/// The words of a command line, with voodu's forms of `config` put in
/// this vd's: `config:set REF ...` and `config REF set ...` become
/// `config set REF ...` (so for get, list and unset), and `config REF`
/// alone lists the bucket.
fn voodu_config_forms(mut words: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const VERBS: [&str; 5] = ["set", "get", "list", "unset", "import"];
    // The subcommand: the first word that is no option and no value of a
    // global option (`--root DIR`, `-H URL`, `-r NAME`).
    const TAKE_VALUES: [&str; 5] = ["--root", "-H", "--host", "-r", "--remote"];
    let command = (1..words.len()).find(|&i| {
        !words[i].to_string_lossy().starts_with('-')
            && !words[i - 1]
                .to_str()
                .is_some_and(|option| TAKE_VALUES.contains(&option))
    });
    let Some(at) = command.filter(|&i| {
        words[i]
            .to_str()
            .is_some_and(|word| word == "config" || word.starts_with("config:"))
    }) else {
        return words;
    };
    let word = words[at].to_string_lossy().into_owned();
    if let Some(verb) = word.strip_prefix("config:") {
        if VERBS.contains(&verb) {
            words.splice(at..=at, ["config".into(), verb.into()]);
        }
        return bucket_flags(words, at);
    }
    if words
        .get(at + 1)
        .and_then(|word| word.to_str())
        .is_some_and(|word| VERBS.contains(&word))
    {
        return bucket_flags(words, at);
    }
    let next = |offset: usize| words.get(at + offset).and_then(|word| word.to_str());
    let is_verb = |word: Option<&str>| word.is_some_and(|word| VERBS.contains(&word));
    // A bucket: `prod/api`, or a scope alone (`prod`, its scope's bucket).
    let is_bucket = |word: Option<&str>| {
        word.is_some_and(|word| {
            !VERBS.contains(&word)
                && !word.starts_with('-')
                && !matches!(word, "help" | "rotate-key")
        })
    };
    match (next(1), next(2)) {
        // voodu's `config prod/api get PATTERN`: the variables whose
        // names contain it.
        (bucket, Some("get")) if is_bucket(bucket) => {
            let pattern = next(3)
                .filter(|word| !word.starts_with('-'))
                .map(str::to_owned);
            words.swap(at + 1, at + 2);
            if let Some(pattern) = pattern {
                words.splice(at + 3..=at + 3, ["--matching".into(), pattern.into()]);
            }
        }
        // `config prod/api set K=V`: the bucket before its verb.
        (bucket, verb) if is_bucket(bucket) && is_verb(verb) => {
            words.swap(at + 1, at + 2);
        }
        // `config prod/api`: its variables.
        (bucket, _) if is_bucket(bucket) => {
            words.insert(at + 1, "list".into());
        }
        _ => {}
    }
    words
}

/// voodu's bucket flags on `config VERB` (the verb at `at + 1`): `-a
/// APP` (`--app`) names the bucket, as do `-s SCOPE` (`--scope`) with or
/// without `-n NAME` (`--name`); each becomes this vd's bucket, the first
/// word after the verb. Without them, the words as they are.
fn bucket_flags(mut words: Vec<std::ffi::OsString>, at: usize) -> Vec<std::ffi::OsString> {
    let mut taken = |flags: [&str; 2]| -> Option<String> {
        // `-a prod`, or `--app=prod` in one word.
        let (index, joined) = (at + 2..words.len()).find_map(|i| {
            let word = words[i].to_str()?;
            if flags.contains(&word) {
                return Some((i, None));
            }
            let (flag, value) = word.split_once('=')?;
            (flag.starts_with("--") && flags.contains(&flag)).then(|| (i, Some(value.to_owned())))
        })?;
        if let Some(value) = joined {
            words.remove(index);
            return Some(value);
        }
        let value = words.get(index + 1)?.to_string_lossy().into_owned();
        words.drain(index..=index + 1);
        Some(value)
    };
    let app = taken(["-a", "--app"]);
    let scope = taken(["-s", "--scope"]);
    let name = taken(["-n", "--name"]);
    let bucket = match (app, scope, name) {
        (Some(app), _, _) => app,
        (None, Some(scope), Some(name)) => format!("{scope}/{name}"),
        (None, Some(scope), None) => scope,
        (None, None, _) => return words,
    };
    words.insert(at + 2, bucket.into());
    words
}

/// This host's name, the default node name (`node` when it is none).
fn host_name() -> NodeName {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .and_then(|name| name.trim().parse().ok())
        .unwrap_or_else(|| NodeName::from_str("node").expect("a valid node name"))
}

/// The controller options `options` ask for, on `root`.
fn controller_options(root: &Path, options: &ControllerArgs) -> ControllerOptions {
    ControllerOptions {
        root: root.to_owned(),
        plugin_timeout: options.plugin_timeout,
        docker: !options.no_docker,
        resync: options.resync,
        workers: options.workers.map(|workers| workers.max(1)),
        cluster: (!options.cluster.is_empty()).then(|| ClusterOptions {
            endpoints: options.cluster.clone(),
            node: options.node.clone().unwrap_or_else(host_name),
            prefix: options.cluster_prefix.clone(),
            lease_ttl: options.lease_ttl,
            advertise: options.advertise,
            peer_port: options.peer_port,
            cacert: options.cluster_cacert.clone(),
            identity: options
                .cluster_cert
                .clone()
                .zip(options.cluster_key.clone()),
            user: options.cluster_user.clone(),
            password_file: options.cluster_password_file.clone(),
            trust_keys: options
                .trust_key
                .iter()
                .map(|key| std::path::absolute(key).unwrap_or_else(|_| key.clone()))
                .collect(),
            trust_unsigned_plugins: options.trust_unsigned_plugins,
            peer_tls: match (&options.peer_cacert, &options.peer_cert, &options.peer_key) {
                (Some(ca), Some(cert), Some(key)) => Some((ca.clone(), cert.clone(), key.clone())),
                _ => None,
            },
        }),
        worker: options.worker_fds.map(|fds| WorkerFds {
            takeover: options.takeover,
            node_lease: options.node_lease,
            ..fds
        }),
        upgrade_timeout: options.upgrade_timeout,
        metrics_listen: options.metrics_listen,
        build_bases: options.build_base.clone(),
        // Absolute, so the worker reads the same files wherever it runs.
        secrets_keys: options
            .secrets_key
            .iter()
            .map(|key| std::path::absolute(key).unwrap_or_else(|_| key.clone()))
            .collect(),
    }
}

/// Runs a controller; with `up` (plugins, files), installs the plugins and
/// applies the files once it is ready, and stops it with exit code 1 if
/// either fails.
fn run_controller(
    controller: RunController,
    root: &Path,
    options: &ControllerArgs,
    up: Option<(Vec<PathBuf>, Vec<PathBuf>)>,
) -> ExitCode {
    RUNS_CONTROLLER.store(true, std::sync::atomic::Ordering::SeqCst);
    let config = controller_options(root, options);
    let apply_failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = apply_failed.clone();
    let root = root.to_owned();
    let result = controller(
        &config,
        Box::new(move || {
            if let Some((plugins, files)) = up {
                std::thread::spawn(move || {
                    let text = || OutputArg {
                        output: Output::Text,
                    };
                    let installed = plugins.into_iter().all(|path| {
                        let install = Command::PluginsInstall(verbs::plugins::PluginsInstallArgs {
                            path,
                            replace: true,
                            sha256: None,
                            settings: None,
                            out_of_process: false,
                            in_process: false,
                            signing_key: None,
                            output: text(),
                        });
                        run_client(&Client::new(&root), install) == ExitCode::SUCCESS
                    });
                    let apply = Command::Apply(verbs::apply::ApplyArgs {
                        files,
                        app: None,
                        eject: false,
                        dry_run: false,
                        skip_unsupported: false,
                        prune: false,
                        no_prune: false,
                        force: false,
                        auto_approve: false,
                        wait: WaitArgs {
                            no_wait: false,
                            timeout: None,
                        },
                        output: text(),
                    });
                    if !installed || run_client(&Client::new(&root), apply) != ExitCode::SUCCESS {
                        flag.store(true, std::sync::atomic::Ordering::SeqCst);
                        // SAFETY: signalling our own process has no memory effects.
                        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                    }
                });
            }
        }),
    );
    match result {
        Ok(()) if apply_failed.load(std::sync::atomic::Ordering::SeqCst) => {
            ExitCode::from(EXIT_FAILED)
        }
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(format!("vd controller: {error}"), EXIT_FAILED),
    }
}

/// What to do after the first answer: follow the rollouts it started.
struct FollowUp {
    timeout: Option<Duration>,
}

/// What a verb's command asks of the controller, from its verb module;
/// arguments that cannot make a request print why and give the exit code.
fn call_of(command: Command, client: &Client) -> Result<verbs::Call, ExitCode> {
    Ok(match command {
        Command::Controller {
            action: Some(ControllerAction::Upgrade(args)),
            ..
        } => args.call(),
        Command::Controller { .. }
        | Command::Up { .. }
        | Command::Completions { .. }
        | Command::PluginsCheck(_)
        | Command::PluginsTest(_)
        | Command::PluginsNew(_)
        | Command::Remote(_)
        | Command::Keys(_)
        | Command::DialStdio => {
            return Err(fail(
                "vd: the controller verbs do not talk to a controller",
                EXIT_FAILED,
            ))
        }
        Command::Apply(args) => args.call()?,
        Command::Diff(args) => args.call()?,
        Command::Rollout(args) => args.call(),
        Command::Events(args) => args.call(),
        Command::Describe(args) => args.call()?,
        Command::Get(args) => args.call()?,
        Command::Prune(args) => args.call(client),
        Command::Store(args) => args.call(client)?,
        Command::Node(args) => args.call(),
        Command::Config(args) => args.call()?,
        Command::Delete(args) => args.call(),
        Command::PluginsInstall(args) => args.call(client)?,
        Command::PluginsList(args) => args.call(),
        Command::PluginsSettings(args) => args.call()?,
        Command::History(args) => args.call(),
        Command::Rollback(args) => args.call(),
        Command::Restart(args) => args.call(),
        Command::Release(args) => args.call()?,
        Command::Exec(args) => args.call(client)?,
        Command::Run(args) => args.call(client)?,
        Command::Stop(args) => args.call(client)?,
        Command::Start(args) => args.call(client)?,
        Command::Logs(args) => args.call(client)?,
        Command::Version(args) => args.call(),
        Command::PluginsReload(args) => args.call(),
        Command::PluginsRemove(args) => args.call()?,
        Command::PluginsSign(args) => args.call()?,
        Command::PluginsCall(args) => args.call(client)?,
        Command::Explain(args) => args.call(),
        Command::Stats(args) => args.call(),
    })
}

fn run_client(client: &Client, command: Command) -> ExitCode {
    match call_of(command, client) {
        Ok(call) => run_call(client, call),
        Err(code) => code,
    }
}

/// `vd apply`: a Procfile's release phase first, when it has one (its
/// job applied alone and run; only when that succeeds are the processes
/// applied), or `--eject`'s file, or the apply itself.
fn run_apply(client: &Client, args: verbs::apply::ApplyArgs) -> ExitCode {
    use render::ERROR;
    if args.eject {
        return args.eject();
    }
    match args.release_phase() {
        Err(message) => fail(format!("vd apply: {message}"), EXIT_FAILED),
        Ok(None) => run_client(client, Command::Apply(args)),
        Ok(Some((release_apply, job))) => {
            let applied = run_call(client, release_apply);
            if applied != ExitCode::SUCCESS {
                return applied;
            }
            let ran = run_client(
                client,
                Command::Run(verbs::run::RunArgs::job(job.clone(), args.output.clone())),
            );
            if ran != ExitCode::SUCCESS {
                anstream::eprintln!(
                    "{ERROR}error:{ERROR:#} vd apply: the release phase ({job}) failed, so the Procfile's processes were not applied — see vd logs {job}, fix it and apply again"
                );
                return ran;
            }
            run_client(client, Command::Apply(args))
        }
    }
}

/// Sends `call`'s request, shows its answer as its verb does, follows up,
/// and gives the exit code.
fn run_call(client: &Client, call: verbs::Call) -> ExitCode {
    let verbs::Call {
        request,
        output,
        follow,
        diff,
        as_hcl,
        only_events,
        log_view,
        sign_with,
    } = call;

    let makes_progress = matches!(
        request,
        Request::Apply { .. }
            | Request::Delete { .. }
            | Request::Wait { .. }
            | Request::Rollback { .. }
            | Request::Restart { .. }
    );
    let mut progress = progress::ApplyProgressView::new(
        makes_progress && output == Output::Text,
        makes_progress && output == Output::Json,
    );
    let mut watch = render::WatchView::new(output == Output::Json, log_view);
    let is_wait = matches!(request, Request::Wait { .. });
    if is_wait {
        interrupt_message(&request);
    }
    let mut on_frame = |frame: &Frame| match frame {
        Frame::Progress(step) => progress.show(step),
        Frame::Notice(notice) => watch.notice(notice),
        Frame::Pod(change) => watch.pod(change),
        Frame::Log(line) => watch.log(line),
        Frame::Output(output) => watch.output(output),
        Frame::Done(_) | Frame::Failed(_) => {}
    };
    let answer = match &request {
        // `vd exec -i`: standard input goes to the command (in a terminal
        // in raw mode with `-t`, until the command ends).
        Request::Exec {
            session: Some(session),
            ..
        } => {
            let _raw = session.tty.and_then(|_| verbs::exec::RawTerminal::enable());
            let feed: Box<dyn FnOnce(voodu_api::client::RequestInput) + Send> =
                if session.tty.is_some() {
                    Box::new(verbs::exec::feed_terminal)
                } else {
                    Box::new(verbs::exec::feed_stdin)
                };
            client.call_with_input(&request, &mut on_frame, feed)
        }
        _ => client.call(&request, &mut on_frame),
    };
    let answer = match (answer, follow) {
        (Ok(response), Some(follow)) => {
            let followed = follow_rollouts(client, &response, &follow, &mut progress);
            merge_wait(response, followed, output)
        }
        (answer, _) => answer,
    };
    // The statement the answer gives, signed and sent back: `plugins:sign`
    // answers with the signing's answer; an install's comes after its own.
    let (answer, signed) = match (answer, sign_with) {
        (Ok(Response::PluginStatement { name, statement }), Some((key, approval))) => (
            sign_statement(client, &name, &statement, &key, &approval),
            None,
        ),
        (
            Ok(
                response @ Response::Installed {
                    statement: Some(_), ..
                },
            ),
            Some((key, approval)),
        ) => {
            let signed = match &response {
                Response::Installed {
                    plugin,
                    statement: Some(statement),
                    ..
                } => {
                    // The plugin is the one this file names itself as.
                    let approval = voodu_model::signing::Approval {
                        name: plugin.name.clone(),
                        ..approval
                    };
                    Some(sign_statement(
                        client,
                        &plugin.name,
                        statement,
                        &key,
                        &approval,
                    ))
                }
                _ => None,
            };
            (Ok(response), signed)
        }
        (
            Ok(Response::Removed {
                name,
                statement: Some(statement),
            }),
            Some((key, approval)),
        ) => {
            let signed = Some(sign_statement(client, &name, &statement, &key, &approval));
            (
                Ok(Response::Removed {
                    name,
                    statement: Some(statement),
                }),
                signed,
            )
        }
        (answer, _) => (answer, None),
    };
    progress.finish();
    let answer = match (answer, only_events) {
        (Ok(Response::Events { events }), Some(shown)) => Ok(Response::Events {
            events: events.into_iter().filter(shown).collect(),
        }),
        (answer, _) => answer,
    };
    match answer {
        Ok(response) => {
            match (output, &response) {
                // Streamed line by line already (JSON lines with -o json).
                (_, Response::LogsEnded { .. }) => {}
                // Its output was printed as it came; its code is the exit.
                (Output::Text, Response::Exited { .. }) => {}
                (
                    Output::Text,
                    Response::RunEnded {
                        workload,
                        run_id,
                        container,
                        ending,
                        ..
                    },
                ) => verbs::run::ended(workload, run_id, container, ending),
                // The plugin's JSON Schema itself (`null` when it
                // describes none), as the README and the guide say.
                (Output::Json, Response::Explained { schema, .. }) => render::json(schema),
                // The settings object itself, which `vd plugins:settings
                // NAME FILE` takes back.
                (Output::Json, Response::PluginSettings { settings, .. }) => render::json(settings),
                (Output::Json, _) => render::json(&response),
                (Output::Text, Response::DryRun(report)) if diff => verbs::diff::render(report),
                (Output::Text, Response::Config(listing)) if as_hcl => verbs::config::hcl(listing),
                (Output::Text, _) => render::text(&response),
            }
            render::unanswered(&response);
            match signed {
                Some(Ok(signed)) => match output {
                    Output::Json => render::json(&signed),
                    Output::Text => render::text(&signed),
                },
                Some(Err(error)) => {
                    return fail(
                        format!("the plugin is installed, but its record is not signed: {error}"),
                        EXIT_FAILED,
                    )
                }
                None => {}
            }
            match &response {
                Response::DryRun(report) if diff && verbs::diff::has_changes(report) => {
                    ExitCode::from(verbs::diff::EXIT_CHANGES)
                }
                // As a shell gives it: the low byte of the code.
                Response::Exited { exit_code, .. } => ExitCode::from((exit_code & 0xff) as u8),
                Response::RunEnded { exit_code, .. } => verbs::run::exit_code(*exit_code),
                _ => ExitCode::from(exit_code(&response)),
            }
        }
        Err(ClientError::Failed(failure)) => {
            match output {
                Output::Json => render::json(&failure),
                Output::Text => render::failure(&failure),
            }
            ExitCode::from(EXIT_FAILED)
        }
        Err(error @ (ClientError::NotRunning { .. } | ClientError::NotRunningOnHost { .. })) => {
            if matches!(request, Request::Version) {
                // The CLI's own version still answers.
                verbs::version::without_controller();
            }
            fail(error, EXIT_NO_CONTROLLER)
        }
        Err(error) => fail(error, EXIT_FAILED),
    }
}

/// Signs `statement` (plugin `name`'s record) with `key` and sends it,
/// if it states what `approval` approves.
fn sign_statement(
    client: &Client,
    name: &str,
    statement: &str,
    key: &voodu_model::signing::SigningKey,
    approval: &voodu_model::signing::Approval,
) -> Result<Response, ClientError> {
    approval.check(statement).map_err(|refusal| {
        ClientError::Failed(voodu_api::Failure::new(format!("plugins:sign: {refusal}")))
    })?;
    client.call(
        &Request::PluginsSign {
            name: name.to_owned(),
            signature: key.sign(statement),
        },
        &mut |_| {},
    )
}

/// The exit code of a successful answer: 1 when it carries errors (a
/// workload stored but not converged, a delete that did not finish), from
/// the typed report, never from a message's words.
fn exit_code(response: &Response) -> u8 {
    let failed = match response {
        Response::Applied(report) => !report.errors.is_empty(),
        Response::Waited(report) => !report.errors.is_empty(),
        Response::Deleted(report) => !report.errors.is_empty(),
        // A node's share is missing: the answer is incomplete.
        other => !other.unanswered().is_empty(),
    };
    if failed {
        EXIT_FAILED
    } else {
        0
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Set when this process runs a controller (`vd up`): Ctrl-C then belongs to
/// the controller's own graceful shutdown.
static RUNS_CONTROLLER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// On Ctrl-C while following a rollout, says that the rollout goes on and
/// how to follow it again, and exits.
fn interrupt_message(request: &Request) {
    if RUNS_CONTROLLER.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let workloads: Vec<String> = match request {
        Request::Wait { workloads, .. } => workloads.iter().map(ToString::to_string).collect(),
        _ => Vec::new(),
    };
    let _ = ctrlc::set_handler(move || {
        let again = match workloads.as_slice() {
            [one] => format!("`vd rollout status {one}`"),
            _ => "`vd rollout status KIND/SCOPE/NAME`".to_owned(),
        };
        eprintln!(
            "\nvd: stopped waiting; the rollout goes on in the controller (Ctrl-C never cancels it) — {again} follows it again"
        );
        std::process::exit(i32::from(EXIT_INTERRUPTED));
    });
}

/// Follows the rollouts an apply or delete started, streaming their steps
/// into `progress`.
fn follow_rollouts(
    client: &Client,
    response: &Response,
    follow: &FollowUp,
    progress: &mut progress::ApplyProgressView,
) -> Result<WaitReport, ClientError> {
    let (workloads, since_event) = match response {
        Response::Applied(report) => (
            report
                .workloads
                .iter()
                .map(|applied| applied.workload.clone())
                .chain(report.pruned.iter().cloned())
                .collect::<Vec<_>>(),
            report.since_event,
        ),
        Response::Deleted(report) => (vec![report.workload.clone()], report.since_event),
        _ => return Ok(WaitReport::default()),
    };
    let request = Request::Wait {
        workloads,
        since_event: Some(since_event),
        timeout_ms: follow.timeout.map(duration_ms),
    };
    interrupt_message(&request);
    match client.call(&request, &mut |frame| {
        if let Frame::Progress(step) = frame {
            progress.show(step)
        }
    })? {
        Response::Waited(report) => Ok(report),
        _ => Err(ClientError::Protocol(
            "the controller answered a wait with something else".into(),
        )),
    }
}

/// Folds what following the rollouts saw into the first answer. Warnings
/// were shown as they happened in text mode, so only JSON gets them again.
fn merge_wait(
    response: Response,
    followed: Result<WaitReport, ClientError>,
    output: Output,
) -> Result<Response, ClientError> {
    let followed = followed?;
    let keep_warnings = output == Output::Json;
    Ok(match response {
        Response::Applied(mut report) => {
            if keep_warnings {
                report.warnings.extend(followed.warnings);
            }
            report.errors.extend(followed.errors);
            Response::Applied(report)
        }
        Response::Deleted(mut report) => {
            report.pending = false;
            if keep_warnings {
                report.warnings.extend(followed.warnings);
            }
            report.errors.extend(followed.errors);
            Response::Deleted(report)
        }
        other => other,
    })
}

#[cfg(test)]
mod worker_args_tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_worker_started_with_worker_args_runs_with_the_supervisors_options() {
        let cli = Cli::parse_from([
            "vd",
            "--root",
            "/tmp/r",
            "controller",
            "--plugin-timeout",
            "2s",
            "--no-docker",
            "--resync",
            "1m",
            "--workers",
            "3",
            "--cluster",
            "http://a:2379,http://b:2379",
            "--node",
            "n1",
            "--lease-ttl",
            "4s",
            "--advertise",
            "10.0.0.1",
            "--peer-port",
            "7000",
            "--secrets-key",
            "/etc/voodu/new.key",
            "--secrets-key",
            "/etc/voodu/old.key",
        ]);
        let Command::Controller { options, .. } = cli.command else {
            panic!("not a controller");
        };
        let supervisor = controller_options(Path::new("/tmp/r"), &options);
        let mut argv = vec!["vd".to_owned()];
        argv.extend(supervisor.worker_args());
        argv.extend(["--worker-fds", "3,4,5", "--node-lease", "42"].map(str::to_owned));
        let worker_cli = Cli::parse_from(argv);
        let Command::Controller { options, .. } = worker_cli.command else {
            panic!("not a controller");
        };
        let worker = controller_options(Path::new("/tmp/r"), &options);
        assert_eq!(
            worker.worker,
            Some(WorkerFds {
                api: 3,
                control: 4,
                keeper: 5,
                takeover: false,
                node_lease: Some(42),
            })
        );
        assert_eq!(
            ControllerOptions {
                worker: None,
                ..worker
            },
            supervisor
        );
    }
}

#[cfg(test)]
mod config_form_tests {
    use super::voodu_config_forms;

    fn rewritten(line: &str) -> String {
        voodu_config_forms(line.split(' ').map(Into::into).collect())
            .iter()
            .map(|word| word.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn voodus_config_forms_become_this_vds() {
        assert_eq!(
            rewritten("vd config:set prod/api A=1"),
            "vd config set prod/api A=1"
        );
        assert_eq!(rewritten("vd config rotate-key"), "vd config rotate-key");
        assert_eq!(
            rewritten("vd --root /r config prod/api set A=1 --secret"),
            "vd --root /r config set prod/api A=1 --secret"
        );
        assert_eq!(
            rewritten("vd config prod/api unset A"),
            "vd config unset prod/api A"
        );
        assert_eq!(rewritten("vd config prod/api"), "vd config list prod/api");
        // A scope alone: its scope-wide bucket.
        assert_eq!(
            rewritten("vd config prod set A=1"),
            "vd config set prod A=1"
        );
        assert_eq!(rewritten("vd config prod"), "vd config list prod");
        // voodu's get takes a pattern; this vd's, a variable's name.
        assert_eq!(
            rewritten("vd config prod/api get LOG -o hcl"),
            "vd config get prod/api --matching LOG -o hcl"
        );
        assert_eq!(
            rewritten("vd config prod/api get"),
            "vd config get prod/api"
        );
        assert_eq!(
            rewritten("vd config prod/api import .env"),
            "vd config import prod/api .env"
        );
        assert_eq!(rewritten("vd config --help"), "vd config --help");
        // voodu's bucket flags: -a APP, or -s SCOPE [-n NAME].
        assert_eq!(
            rewritten("vd config set DATABASE_URL=x PORT=8080 -a prod"),
            "vd config set prod DATABASE_URL=x PORT=8080"
        );
        assert_eq!(
            rewritten("vd config get DATABASE_URL -a prod/api"),
            "vd config get prod/api DATABASE_URL"
        );
        assert_eq!(
            rewritten("vd config:list -s prod -n api -o json"),
            "vd config list prod/api -o json"
        );
        assert_eq!(
            rewritten("vd config import .env.production --app prod"),
            "vd config import prod .env.production"
        );
        assert_eq!(
            rewritten("vd config unset OLD_FLAG --scope prod"),
            "vd config unset prod OLD_FLAG"
        );
        assert_eq!(
            rewritten("vd config set A=1 --app=prod/api"),
            "vd config set prod/api A=1"
        );
        // Global options before the verb keep their values.
        assert_eq!(
            rewritten("vd -r prod config ws set K=V"),
            "vd -r prod config set ws K=V"
        );
        assert_eq!(
            rewritten("vd -H ssh://ops@web1 config:set K=V -a prod"),
            "vd -H ssh://ops@web1 config set prod K=V"
        );
        assert_eq!(
            rewritten("vd config prod/api -o json"),
            "vd config list prod/api -o json"
        );
        // This vd's own forms stay as they are.
        assert_eq!(
            rewritten("vd config set prod/api A=1"),
            "vd config set prod/api A=1"
        );
        assert_eq!(rewritten("vd config list"), "vd config list");
        assert_eq!(rewritten("vd apply -f config"), "vd apply -f config");
        assert_eq!(rewritten("vd logs config prod/x"), "vd logs config prod/x");
    }
}

#[cfg(test)]
mod exit_code_tests {
    use super::*;
    use voodu_api::DeleteReport;
    use voodu_model::diagnostic::Diagnostic;

    fn deleted(warnings: &[&str], errors: &[&str]) -> Response {
        let diagnostics =
            |messages: &[&str]| messages.iter().map(|m| Diagnostic::general(*m)).collect();
        Response::Deleted(DeleteReport {
            workload: "deployment/prod/esl".parse().unwrap(),
            forgotten: Vec::new(),
            pending: false,
            warnings: diagnostics(warnings),
            errors: diagnostics(errors),
            since_event: 0,
        })
    }

    #[test]
    fn a_delete_fails_on_its_errors_never_on_a_warnings_words() {
        assert_eq!(exit_code(&deleted(&[], &[])), 0);
        assert_eq!(
            exit_code(&deleted(&["stored, but a plugin could not be told"], &[])),
            0,
            "a warning, whatever it says"
        );
        assert_eq!(exit_code(&deleted(&[], &["did not converge"])), EXIT_FAILED);
    }
}
