//! # voodu-controller
//!
//! The controller: the long-lived process that owns the store and the
//! loaded plugins, and answers API requests. [`Controller::handle`] hands
//! each request to its verb's handler module (`verbs`, one module per
//! verb); [`server`] carries requests over the unix socket; [`stream`]
//! answers the streaming ones (waits, watches, logs).
//!
//! - [`apply`]: parse, validate through the plugins, store, all or nothing.
//! - [`delete`]: deleting a workload; [`history`]: revisions and rollback.
//! - [`install`]: installing or replacing a plugin as one transaction.
//! - `orphans`: `vd get pods --orphans` and `vd prune --orphans`;
//!   `backup`: `vd store backup`.
//! - [`wire`]: the controller's state turned into the API's types.
//!
//! **May not depend on** the CLI (`voodu-cli`) or the `vd` binary
//! (`tests/crate_rules.rs` checks this).

#![warn(missing_docs)]

pub use voodu_model::lang::BaseImages;

pub mod acceptance;
pub mod apply;
mod backup;
mod build_context;
pub mod check;
pub mod cluster;
pub mod delete;
mod everywhere;
mod exec;
pub mod history;
pub mod install;
pub mod metrics;
mod orphans;
pub mod peers;
pub mod plugin_settings;
pub mod server;
pub mod stream;
pub mod supervisor;
mod verbs;
pub mod wire;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use voodu_model::EventReason;

use parking_lot::Mutex;

use sha2::{Digest, Sha256};
use voodu_api::ApplyProgress;
use voodu_api::{Failure, Request, Response};
use voodu_manifest::{parse_manifests_with, ParseOptions, ParsedManifests};
use voodu_model::core_spec::{CORE_BLOCKS, STATEFULSET_CORE_BLOCKS};
use voodu_model::placement::NodeName;
pub use voodu_model::signing::TrustedKeys;
use voodu_model::{ManifestSource, WorkloadId};
use voodu_plugin_host::InstallOptions;
use voodu_plugin_host::{LoadFailure, LoadOptions, PluginRegistry, RegistryError};
use voodu_reconcile::activity::{ActivityBus, Notice};
use voodu_reconcile::Reconciler;
pub use voodu_store::sealing::SecretKeys;
use voodu_store::{SqliteStore, StateStore, StoreError};
use voodu_store_etcd::{
    EtcdOptions, EtcdStore, HeldOrdinals, JoinError, Membership, NodePlugin, NodeReport,
};

use crate::install::install_plugin;

pub use voodu_reconcile::DEFAULT_WORKERS;

/// How long a worker handing over waits for its reconcile passes in
/// progress to finish their step.
pub const HAND_OVER_WAIT: Duration = Duration::from_secs(30);

/// Whether the process must end with `_exit` rather than a normal exit: a
/// plugin library whose constructor never returned holds the dynamic
/// loader's lock, which a normal exit takes to run library destructors, so
/// a normal exit would hang. Everything the controller must save is saved
/// by then (the store commits as it goes).
pub fn must_exit_at_once() -> bool {
    voodu_plugin_host::loader::load_is_stuck()
}

/// The environment variable that makes this binary an out-of-process
/// plugin's child.
pub const PLUGIN_CHILD_ENV: &str = voodu_plugin_host::out_of_process::CHILD_ENV;

/// Serves as an out-of-process plugin's child when this process was
/// started as one (see `voodu_plugin_host::out_of_process`), and returns
/// its exit code; `None` otherwise. `vd`'s `main` calls it first.
pub fn serve_as_plugin_child() -> Option<i32> {
    voodu_plugin_host::out_of_process::serve_if_child()
}

/// Hands memory freed after a large request back to the system. An apply
/// of 1,000 workloads peaks near 120 MiB while hcl-edit's syntax tree is
/// alive; glibc keeps what was freed in its arenas, so without this the
/// controller would sit at its peak (161 MiB measured) instead of ~25 MiB.
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How long parsing one apply's manifests may take. The text checks
/// (`voodu_manifest::limits`) refuse the inputs known to send hcl-edit's
/// parser backtracking; this bound is the net under what they miss.
pub const PARSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many parses that overran [`PARSE_TIMEOUT`] may still be running
/// (a parse cannot be interrupted) before further applies are refused.
pub const MAX_RUNAWAY_PARSES: usize = 2;

static RUNAWAY_PARSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Parses on a thread of its own within [`PARSE_TIMEOUT`]. A parse that
/// overruns is left to finish on its own and counted, and the apply is
/// refused with the reason; so a pathological manifest costs at most
/// [`MAX_RUNAWAY_PARSES`] threads, never the controller.
fn parse_bounded(
    sources: Vec<ManifestSource>,
    options: verbs::apply::ApplyOptions,
    store: Arc<dyn StateStore>,
) -> Result<ParsedManifests, Failure> {
    bounded(PARSE_TIMEOUT, move || {
        let buckets = StoredBuckets(store);
        parse_manifests_with(
            &sources,
            ParseOptions {
                variables: &options.environment,
                skip_unsupported: options.skip_unsupported,
                env_files: &options.env_files,
                buckets: Some(&buckets),
            },
        )
    })
}

/// The config buckets `${NAME}` may read at parse time, from the store.
struct StoredBuckets(Arc<dyn StateStore>);

impl voodu_manifest::prescan::BucketLookup for StoredBuckets {
    fn bucket(&self, bucket: &voodu_model::config::BucketName) -> voodu_model::config::Bucket {
        match self.0.config_bucket(bucket) {
            Ok(values) => values,
            Err(error) => {
                // The reference is then reported as undefined, naming it.
                tracing::warn!(%error, %bucket, "a config bucket could not be read for interpolation");
                Default::default()
            }
        }
    }
}

/// Runs `parse` as [`parse_bounded`] describes, within `timeout`.
fn bounded(
    timeout: Duration,
    parse: impl FnOnce() -> ParsedManifests + Send + 'static,
) -> Result<ParsedManifests, Failure> {
    use std::sync::atomic::{AtomicU8, Ordering};
    const RUNNING: u8 = 0;
    const DONE: u8 = 1;
    const ABANDONED: u8 = 2;
    if RUNAWAY_PARSES.load(Ordering::SeqCst) >= MAX_RUNAWAY_PARSES {
        return Err(Failure::new(format!(
            "apply refused: {MAX_RUNAWAY_PARSES} earlier manifests are still being parsed after {}s — wait, or restart the controller; simplify the manifest that took so long",
            PARSE_TIMEOUT.as_secs()
        )));
    }
    let (sender, receiver) = crossbeam_channel::bounded(1);
    let state = Arc::new(AtomicU8::new(RUNNING));
    let thread_state = state.clone();
    let spawned = std::thread::Builder::new()
        .name("voodu-parse".into())
        .spawn(move || {
            let parsed = parse();
            if thread_state.swap(DONE, Ordering::SeqCst) == ABANDONED {
                RUNAWAY_PARSES.fetch_sub(1, Ordering::SeqCst);
            }
            let _ = sender.send(parsed);
        });
    if let Err(error) = spawned {
        return Err(Failure::new(format!(
            "apply refused: cannot start a parse: {error}"
        )));
    }
    if let Ok(parsed) = receiver.recv_timeout(timeout) {
        return Ok(parsed);
    }
    // Counted before it is marked, so the thread's uncount comes after.
    RUNAWAY_PARSES.fetch_add(1, Ordering::SeqCst);
    if state
        .compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        // It finished just now after all.
        RUNAWAY_PARSES.fetch_sub(1, Ordering::SeqCst);
        if let Ok(parsed) = receiver.recv() {
            return Ok(parsed);
        }
    }
    Err(Failure::new(format!(
        "apply refused: the manifests took longer than {}s to parse, nothing was stored — simplify them (deeply nested or unbalanced expressions send the HCL parser backtracking)",
        timeout.as_secs()
    )))
}

#[cfg(test)]
mod parse_bound_tests {
    use super::*;

    #[test]
    fn a_parse_that_overruns_is_refused_counted_and_uncounted_when_it_ends() {
        let slow = || {
            std::thread::sleep(Duration::from_millis(600));
            ParsedManifests::default()
        };
        let before = RUNAWAY_PARSES.load(std::sync::atomic::Ordering::SeqCst);
        let refused = bounded(Duration::from_millis(100), slow).unwrap_err();
        assert!(
            refused
                .message
                .starts_with("apply refused: the manifests took longer than"),
            "{}",
            refused.message
        );
        assert_eq!(
            RUNAWAY_PARSES.load(std::sync::atomic::Ordering::SeqCst),
            before + 1
        );
        std::thread::sleep(Duration::from_millis(900));
        assert_eq!(
            RUNAWAY_PARSES.load(std::sync::atomic::Ordering::SeqCst),
            before
        );
        let fast = bounded(Duration::from_secs(5), ParsedManifests::default);
        assert!(fast.is_ok());
    }
}

/// How often the controller hands freed memory back to the system.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(10);

/// How often one plugin may be reloaded in one controller's life: each
/// reload leaves the old instance's thread (stuck, if it was wedged) and its
/// library mapped, since code may still be running in them.
pub const MAX_RELOADS: u32 = 16;

/// The state database's file name inside the root.
pub const STATE_FILE: &str = "state.db";
/// The plugins directory's name inside the root.
pub const PLUGINS_DIR: &str = "plugins";

/// How to start a controller.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// The root directory: state, plugins and socket live here.
    pub root: PathBuf,
    /// The bound on every plugin call.
    pub plugin_call_timeout: Duration,
    /// Whether to drive Docker. Without it the controller validates and
    /// stores, and nothing runs: for tests and for checking manifests.
    pub docker: bool,
    /// How often every workload is converged again, to repair what events
    /// missed.
    pub resync_every: Duration,
    /// How many workloads reconcile at once.
    pub workers: usize,
    /// With `--cluster`: the cluster store to keep the desired state in,
    /// and this node's name; without it, SQLite in the root.
    pub cluster: Option<ClusterConfig>,
    /// With `--metrics-listen`: where `/metrics` is served.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The language handlers' base images (`--build-base`).
    pub build_bases: voodu_model::lang::BaseImages,
    /// The keys secrets are sealed at rest with (`--secrets-key`, the
    /// first seals); none: secrets are stored plain.
    pub secrets: Option<Arc<SecretKeys>>,
}

/// How a node joins a cluster (`vd controller --cluster`).
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The etcd client URLs.
    pub endpoints: Vec<String>,
    /// The key prefix the cluster's state lives under.
    pub prefix: String,
    /// This node's name.
    pub node: NodeName,
    /// The lease the node holds while it is alive.
    pub lease_ttl: Duration,
    /// The address the other nodes reach this node's published ports at
    /// (`--advertise`), for `host` addressing; the other nodes reach its
    /// peer listener there too (loopback without it).
    pub advertise: Option<std::net::IpAddr>,
    /// The port of the peer listener, where this node answers the other
    /// nodes' requests for its share of a view (`--peer-port`); 0 for any
    /// free port, which the node reports to the cluster.
    pub peer_port: u16,
    /// The CA certificate that signed etcd's (`--cluster-cacert`), for
    /// `https://` URLs.
    pub cluster_ca: Option<PathBuf>,
    /// This node's client certificate and key for etcd (`--cluster-cert`,
    /// `--cluster-key`).
    pub cluster_identity: Option<(PathBuf, PathBuf)>,
    /// The etcd user and its password (`--cluster-user`, the password from
    /// `--cluster-password-file` or `VOODU_CLUSTER_PASSWORD`).
    pub cluster_user: Option<(String, String)>,
    /// The node-to-node channel's mutual TLS (`--peer-cacert`,
    /// `--peer-cert`, `--peer-key`); plain TCP without it.
    pub peer_tls: Option<peers::tls::PeerTlsFiles>,
    /// Which cluster plugins the node loads: those a trusted key signed
    /// (`--trust-key`), or any (`--trust-unsigned-plugins`, for a lab).
    pub plugin_trust: PluginTrust,
    /// Under a supervisor whose earlier worker held this node's place (an
    /// upgrade's old worker, or one that died): the lease it held the name
    /// under, taken over instead of a new join, so the cluster never sees
    /// the node gone. The worker takes charge of it once it serves
    /// ([`Controller::take_charge`]).
    pub adopt_lease: Option<i64>,
}

/// Which cluster plugins a node loads.
#[derive(Debug, Clone)]
pub enum PluginTrust {
    /// Those whose record one of these keys signed (none: no plugin).
    Signed(voodu_model::signing::TrustedKeys),
    /// Any, signed or not (`--trust-unsigned-plugins`).
    Unsigned,
}

impl Controller {
    /// An event on each stored workload with a block of a plugin this node
    /// newly refused, naming the record, the node and why (the workloads it
    /// leaves without that plugin here).
    fn record_refusals(&self, refused: &[voodu_store_etcd::RefusedPlugin]) {
        let node = self.node_name().unwrap_or_default();
        for refusal in refused {
            let users = match self.store.workloads_with_block_type(&refusal.name) {
                Ok(users) => users,
                Err(error) => {
                    tracing::warn!(%error, plugin = %refusal.name, "could not find the workloads a refused plugin leaves out");
                    continue;
                }
            };
            let events: Vec<voodu_store::NewEvent> = users
                .into_iter()
                .map(|workload| voodu_store::NewEvent {
                    workload,
                    level: voodu_store::EventLevel::Warning,
                    reason: EventReason::PluginRefused,
                    message: format!(
                        "node {node} refused the cluster's record of plugin {} {}: {}",
                        refusal.name, refusal.version, refusal.reason
                    ),
                })
                .collect();
            if let Err(error) = self.store.record_events(&events) {
                tracing::warn!(%error, plugin = %refusal.name, "the refusal of a plugin could not be recorded as events");
            }
        }
    }
}

impl PluginTrust {
    /// Why this node does not act on `record` (install it, or unload it
    /// when it records a removal); `None` when it does.
    fn refusal(&self, record: &voodu_store_etcd::PluginRecord) -> Option<String> {
        let PluginTrust::Signed(keys) = self else {
            return None;
        };
        if keys.is_empty() {
            return Some("this node trusts no operator's key — start it with --trust-key FILE.pub (or --trust-unsigned-plugins, for a lab only)".to_owned());
        }
        keys.check_record(
            &record.name,
            &record.version,
            &record.sha256,
            record.removed,
            record.signature.as_ref(),
        )
        .err()
        .map(|error| {
            if record.removed {
                format!("its removal: {error}")
            } else {
                error.to_string()
            }
        })
    }
}

/// The node's place in its cluster, when it runs in one.
#[derive(Debug)]
pub struct ClusterNode {
    /// The cluster store.
    pub store: Arc<EtcdStore>,
    /// This node's membership: its lease and record.
    pub membership: Membership,
    /// This node's view of its cluster: its share of every workload, and
    /// the other nodes' serving replicas.
    pub view: Arc<cluster::NodeView>,
    /// The node's cluster tasks ([`cluster::start`]), stopped when the
    /// worker hands over.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// Which cluster plugins the node loads.
    pub plugin_trust: PluginTrust,
}

/// Why a controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The root directory could not be prepared.
    #[error("cannot prepare the root {path}: {source}")]
    Root {
        /// The root.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The node-to-node channel's certificates cannot be used.
    #[error("{0}")]
    PeerTls(#[from] peers::tls::PeerTlsError),
    /// The stored secrets cannot be sealed or opened with the keys given.
    #[error("{0}")]
    Secrets(StoreError),
    /// Another controller holds the root.
    #[error("another controller is already running on {0} — stop it first, or use another --root")]
    AlreadyRunning(PathBuf),
    /// The cluster store could not be reached.
    #[error("the cluster store at {endpoints} cannot be used: {source} — check that etcd runs there and has a quorum")]
    ClusterStore {
        /// The etcd client URLs.
        endpoints: String,
        /// What the store said.
        source: StoreError,
    },
    /// The cluster store answered, but refused this node (its TLS or its
    /// etcd user).
    #[error("the cluster store at {endpoints} refused this node: {refusal}")]
    ClusterAccess {
        /// The etcd client URLs.
        endpoints: String,
        /// What refused it, and the fix.
        refusal: String,
    },
    /// The node could not join its cluster.
    #[error("cannot join the cluster: {0}")]
    Join(#[from] JoinError),
    /// The store could not be opened.
    #[error("the state database {path} cannot be used: {source} — nothing was run or removed; restore a backup (`vd store backup`, README \"Backups\") or move the file aside to start afresh (the replicas then running are reported as orphans and left running)")]
    StoreOpen {
        /// The database file.
        path: PathBuf,
        /// What the store said.
        source: StoreError,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The plugins directory could not be read.
    #[error(transparent)]
    Plugins(#[from] RegistryError),
    /// Docker could not be reached.
    #[error(
        "{0} — or run `vd controller --no-docker` to validate and store without running anything"
    )]
    Docker(#[from] voodu_runtime::RuntimeError),
    /// The socket could not be served.
    #[error("cannot serve {path}: {source}")]
    Socket {
        /// The socket's path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The peer listener could not be bound.
    #[error("cannot answer the other nodes on {address} (--peer-port): {source} — if another process (another node on this host) holds the port, give each node on one host its own --peer-port, or 0 for any free port")]
    PeerListener {
        /// Where it was asked for.
        address: std::net::SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// A worker's channel to its supervisor failed.
    #[error("the channel to the controller's supervisor failed: {0} — see the supervisor's log lines above")]
    Supervisor(std::io::Error),
}

/// The controller's state: the store and the loaded plugins.
#[derive(Debug)]
pub struct Controller {
    root: PathBuf,
    store: Arc<dyn StateStore>,
    /// With `--cluster`: the cluster store and this node's membership.
    cluster: Option<ClusterNode>,
    plugins: Arc<PluginRegistry>,
    /// The language handlers' base images, for builds without a
    /// Dockerfile.
    build_bases: voodu_model::lang::BaseImages,
    reconciler: OnceLock<Arc<Reconciler>>,
    load_failures: Mutex<Vec<LoadFailure>>,
    /// The metrics, when `--metrics-listen` serves them.
    metrics: OnceLock<Arc<metrics::Metrics>>,
    /// Set once this worker has handed over to an upgrade's new worker: no
    /// write starts in it again.
    handed_over: std::sync::atomic::AtomicBool,
    /// Under a supervisor: the channel to it, and this worker's process.
    supervisor: OnceLock<(Arc<supervisor::control::WorkerLink>, voodu_api::WorkerInfo)>,
    activity: ActivityBus,
    /// One apply, delete, install or remove at a time, so two cannot
    /// interleave their checks and their writes. It covers validation and
    /// the store's transaction only, never a rollout: those run in the
    /// reconciler's workers.
    writes: Mutex<()>,
    /// How often each plugin was reloaded by this controller.
    reloads: Mutex<std::collections::HashMap<String, u32>>,
    /// Where this node answers the other nodes of its cluster.
    peer_address: OnceLock<std::net::SocketAddr>,
    /// The keys the store seals secrets with.
    pub(crate) secrets: Option<Arc<SecretKeys>>,
    /// The node-to-node channel's TLS, in a cluster started with it.
    pub(crate) peer_tls: Option<Arc<peers::tls::PeerTls>>,
    /// The cluster plugins this node refused to load at the last look.
    refused_plugins: Mutex<Vec<voodu_store_etcd::RefusedPlugin>>,
}

impl Controller {
    /// Opens the store and loads every installed plugin. A plugin that fails
    /// to load is logged and listed, and does not stop the others.
    pub fn open(config: &ControllerConfig) -> Result<Controller, ControllerError> {
        create_private_dir(&config.root)?;
        // Checked before the node joins: a node whose certificates do not
        // load never appears in the cluster.
        let peer_tls = config
            .cluster
            .as_ref()
            .and_then(|cluster| cluster.peer_tls.as_ref())
            .map(|files| peers::tls::PeerTls::from_files(files).map(Arc::new))
            .transpose()?;
        let (store, cluster): (Arc<dyn StateStore>, Option<ClusterNode>) = match &config.cluster {
            None => {
                let state = config.root.join(STATE_FILE);
                let store =
                    SqliteStore::open(&state).map_err(|source| ControllerError::StoreOpen {
                        path: state.clone(),
                        source,
                    })?;
                store.set_secret_keys(config.secrets.clone());
                (Arc::new(store), None)
            }
            Some(cluster) => {
                let mut options = EtcdOptions::new(cluster.endpoints.clone());
                options.prefix.clone_from(&cluster.prefix);
                if cluster.cluster_ca.is_some() || cluster.cluster_identity.is_some() {
                    options.tls = Some(voodu_store_etcd::EtcdTls {
                        ca: cluster.cluster_ca.clone(),
                        identity: cluster.cluster_identity.clone(),
                    });
                }
                options.user = cluster
                    .cluster_user
                    .clone()
                    .map(|(name, password)| voodu_store_etcd::EtcdUser { name, password });
                let mut store = EtcdStore::connect(&options).map_err(|source| {
                    let endpoints = cluster.endpoints.join(",");
                    match source {
                        StoreError::ClusterAccess(refusal) => {
                            ControllerError::ClusterAccess { endpoints, refusal }
                        }
                        source => ControllerError::ClusterStore { endpoints, source },
                    }
                })?;
                store.set_secret_keys(config.secrets.clone());
                let store = Arc::new(store);
                let membership = match cluster.adopt_lease {
                    Some(lease) => {
                        store.adopt(cluster.node.as_str(), cluster.lease_ttl, lease, false)?
                    }
                    None => store.join(
                        cluster.node.as_str(),
                        cluster.lease_ttl,
                        NodeReport::default(),
                    )?,
                };
                tracing::info!(node = %cluster.node, prefix = %cluster.prefix, "joined the cluster");
                let view = Arc::new(cluster::NodeView::new(
                    cluster.node.clone(),
                    cluster.advertise.map(|address| address.to_string()),
                    store.clone(),
                    &membership,
                    peers::ContextSource {
                        store: store.clone(),
                        node: cluster.node.to_string(),
                        tls: peer_tls.clone(),
                        root: config.root.clone(),
                    },
                ));
                (
                    store.clone() as Arc<dyn StateStore>,
                    Some(ClusterNode {
                        store,
                        membership,
                        view,
                        tasks: Mutex::new(Vec::new()),
                        plugin_trust: cluster.plugin_trust.clone(),
                    }),
                )
            }
        };
        let activity = ActivityBus::default();
        let sink = activity.clone();
        store.set_event_sink(Box::new(move |workload, event| {
            sink.send(Notice::stored(workload, event))
        }));
        let reserved = CORE_BLOCKS
            .iter()
            .chain(STATEFULSET_CORE_BLOCKS)
            .copied()
            .collect();
        let (plugins, load_failures) = PluginRegistry::open_with_settings_check(
            &config.root.join(PLUGINS_DIR),
            LoadOptions {
                call_timeout: config.plugin_call_timeout,
                out_of_process: false,
            },
            reserved,
            Some(plugin_settings::json_schema_check()),
        )?;
        let controller = Controller {
            build_bases: config.build_bases.clone(),
            root: config.root.clone(),
            store,
            cluster,
            plugins: Arc::new(plugins),
            reconciler: OnceLock::new(),
            load_failures: Mutex::new(load_failures),
            supervisor: OnceLock::new(),
            metrics: OnceLock::new(),
            handed_over: std::sync::atomic::AtomicBool::new(false),
            activity,
            writes: Mutex::new(()),
            reloads: Mutex::new(std::collections::HashMap::new()),
            peer_address: OnceLock::new(),
            secrets: config.secrets.clone(),
            peer_tls,
            refused_plugins: Mutex::new(Vec::new()),
        };
        controller.seal_stored_secrets()?;
        controller.fetch_cluster_plugins();
        if let Some(cluster) = &controller.cluster {
            // What the node ran stays reported (a predecessor's report,
            // when its place was taken over) until the report task counts
            // again; the plugins are this worker's.
            let running = cluster.membership.report();
            controller.report_to_cluster(running.replicas, running.held_ordinals);
        }
        Ok(controller)
    }

    /// Seals the secrets stored plain before this controller had a key
    /// (the first start with `--secrets-key`), then opens every stored
    /// secret once: one sealed under a key this controller lacks stops the
    /// start, naming the key, rather than a workload starting without it.
    fn seal_stored_secrets(&self) -> Result<(), ControllerError> {
        let sealed = self
            .store
            .reseal_secrets(voodu_store::sealing::Reseal::Plain)
            .map_err(ControllerError::Secrets)?;
        if sealed > 0 {
            tracing::info!(
                sealed,
                "sealed the secrets stored before a secrets key was given"
            );
        }
        for bucket in self
            .store
            .config_buckets()
            .map_err(ControllerError::Secrets)?
        {
            self.store
                .config_bucket(&bucket)
                .map_err(ControllerError::Secrets)?;
        }
        Ok(())
    }

    /// In a cluster: installs every plugin installed cluster-wide that this
    /// node lacks, or has another file of, from the cluster store, its
    /// SHA-256 checked; a failure is logged and listed with the plugins
    /// that did not load, and does not stop the others. Each plugin
    /// installed is sent every block's set at once. Takes
    /// the controller's write lock around each install only.
    pub(crate) fn fetch_cluster_plugins(&self) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let records = match cluster.store.plugin_records() {
            Ok(records) => records,
            Err(error) => {
                tracing::warn!(%error, "the cluster's plugins could not be listed");
                return;
            }
        };
        let mut refused = Vec::new();
        let records: Vec<_> = records
            .into_iter()
            .filter(|record| match cluster.plugin_trust.refusal(record) {
                None => !record.removed,
                Some(reason) => {
                    tracing::warn!(plugin = %record.name, version = %record.version, removed = record.removed, %reason, "refused a cluster plugin record: nothing of it is acted on");
                    refused.push(voodu_store_etcd::RefusedPlugin {
                        name: record.name.clone(),
                        version: record.version.clone(),
                        reason,
                    });
                    false
                }
            })
            .collect();
        let newly_refused: Vec<voodu_store_etcd::RefusedPlugin> = {
            let before = self.refused_plugins.lock();
            refused
                .iter()
                .filter(|refusal| !before.contains(refusal))
                .cloned()
                .collect()
        };
        self.record_refusals(&newly_refused);
        let changed = *self.refused_plugins.lock() != refused;
        *self.refused_plugins.lock() = refused;
        if changed {
            let running = cluster.membership.report();
            self.report_to_cluster(running.replicas, running.held_ordinals);
        }
        // Read before the installs, so each is installed with the settings
        // the cluster stores for it.
        let cluster_settings = match cluster.store.plugin_settings() {
            Ok(settings) => Some(settings),
            Err(error) => {
                tracing::warn!(%error, "the cluster's plugin settings could not be read");
                None
            }
        };
        for record in &records {
            let local = self
                .plugins
                .installed_file(&record.name)
                .ok()
                .and_then(|(file, _)| std::fs::read(file).ok())
                .map(|bytes| hex::encode(Sha256::digest(&bytes)));
            if local.as_deref() == Some(record.sha256.as_str()) {
                continue;
            }
            let fetched = self.root.join("fetched");
            let outcome = cluster
                .store
                .plugin_file(record)
                .map_err(|error| error.to_string())
                .and_then(|bytes| {
                    create_private_dir(&fetched).map_err(|error| error.to_string())?;
                    let file = fetched.join(format!("lib{}.so", record.name));
                    std::fs::write(&file, bytes).map_err(|error| error.to_string())?;
                    // Only the install itself is one of the controller's
                    // writes: the store is read before, without the lock, so
                    // a store that does not answer never holds up an apply.
                    let _writes = self.writes.lock();
                    let installed = install_plugin(
                        &file,
                        &InstallOptions {
                            replace: true,
                            sha256: Some(record.sha256.clone()),
                            settings: cluster_settings.as_ref().map(|all| {
                                all.get(&record.name).cloned().unwrap_or_else(|| {
                                    serde_json::Value::Object(Default::default())
                                })
                            }),
                            out_of_process: Some(self.plugins.runs_out_of_process(&record.name)),
                        },
                        &self.plugins,
                        &*self.store,
                    )
                    .map_err(|error| error.to_string());
                    let _ = std::fs::remove_file(&file);
                    installed
                });
            match outcome {
                Ok(_) => {
                    tracing::info!(plugin = %record.name, version = %record.version, "installed from the cluster");
                    if let Some(reconciler) = self.reconciler() {
                        reconciler.plugin_changed(&record.name);
                    }
                }
                Err(error) => {
                    tracing::warn!(plugin = %record.name, %error, "a plugin of the cluster could not be installed on this node");
                    self.load_failures.lock().push(LoadFailure {
                        path: self.root.join(PLUGINS_DIR).join(&record.name),
                        error: format!("installed cluster-wide, but not on this node: {error}"),
                    });
                }
            }
        }
        if let Some(cluster_settings) = cluster_settings {
            self.take_cluster_settings(&cluster_settings);
        }
        self.remove_plugins_gone_from_the_cluster();
    }

    /// In a cluster: hands each loaded plugin the settings the cluster
    /// stores for it (`{}` when none), where they differ from those it
    /// keeps; a plugin that refuses them keeps its own, and says so.
    fn take_cluster_settings(
        &self,
        cluster_settings: &std::collections::BTreeMap<String, serde_json::Value>,
    ) {
        let none = serde_json::Value::Object(Default::default());
        for handle in self.plugins.list() {
            let name = handle.name();
            let wanted = cluster_settings.get(name).unwrap_or(&none);
            let _writes = self.writes.lock();
            match self.plugins.settings(name) {
                Ok(kept) if kept == *wanted => continue,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(plugin = %name, %error, "its settings could not be read");
                    continue;
                }
            }
            match self.plugins.set_settings(name, wanted) {
                Ok(_) => tracing::info!(plugin = %name, "took the settings the cluster stores"),
                Err(error) => {
                    tracing::warn!(plugin = %name, %error, "refused the settings the cluster stores: kept its own")
                }
            }
        }
    }

    /// In a cluster every plugin is the cluster's (`plugins:install`
    /// stores it for every node): one this node has that the cluster no
    /// longer records was removed on another node (`plugins:remove`), so
    /// it goes here too, also when this node was down at the time.
    ///
    /// The cluster's records are read without the write lock, so a store
    /// that does not answer (no quorum) never holds up an apply for its
    /// bound. The plugins loaded are taken under the lock first, when no
    /// install is half-way (an install loads, then stores its record, both
    /// under the lock), and only a plugin still loaded as that same handle
    /// when the lock is taken again is removed: one installed or replaced
    /// meanwhile is never taken for removed.
    fn remove_plugins_gone_from_the_cluster(&self) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let loaded_before = {
            let _writes = self.writes.lock();
            self.plugins.list()
        };
        let records = match cluster.store.plugin_records() {
            Ok(records) => records,
            Err(error) => {
                tracing::warn!(%error, "the cluster's plugins could not be listed");
                return;
            }
        };
        let gone: Vec<_> = loaded_before
            .into_iter()
            .filter(|handle| {
                let record = records.iter().find(|record| record.name == handle.name());
                match (&cluster.plugin_trust, record) {
                    // Gone when its removal is recorded, or its record.
                    (PluginTrust::Unsigned, record) => record.is_none_or(|record| record.removed),
                    // Gone only when a trusted key signed its removal.
                    (PluginTrust::Signed(_), Some(record)) => {
                        record.removed && cluster.plugin_trust.refusal(record).is_none()
                    }
                    (PluginTrust::Signed(_), None) => {
                        tracing::warn!(plugin = %handle.name(), "its record vanished from the cluster without a signed removal: kept on this node");
                        false
                    }
                }
            })
            .collect();
        if gone.is_empty() {
            return;
        }
        let _writes = self.writes.lock();
        let loaded_now = self.plugins.list();
        for handle in gone {
            let name = handle.name().to_owned();
            if !loaded_now.iter().any(|now| Arc::ptr_eq(now, &handle)) {
                continue;
            }
            // plugins:remove refuses a plugin a stored block uses; a block
            // stored meanwhile keeps it until it goes.
            match self.store.workloads_with_block_type(&name) {
                Ok(users) if users.is_empty() => {}
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(%error, plugin = %name, "could not check who uses a plugin the cluster removed");
                    continue;
                }
            }
            match self.plugins.remove(&name) {
                Ok(_) => {
                    tracing::info!(plugin = %name, "removed from the cluster: unloaded on this node too")
                }
                Err(error) => {
                    tracing::warn!(plugin = %name, %error, "removed from the cluster, but not from this node")
                }
            }
        }
    }

    /// This node's place in its cluster, when it runs in one.
    pub fn cluster(&self) -> Option<&ClusterNode> {
        self.cluster.as_ref()
    }

    /// This node's name, in a cluster.
    pub fn node_name(&self) -> Option<String> {
        self.cluster
            .as_ref()
            .map(|cluster| cluster.membership.name().to_owned())
    }

    /// Where this node answers the other nodes (its peer listener), once
    /// it listens; reported to the cluster from then on.
    pub fn set_peer_address(&self, address: std::net::SocketAddr) {
        let _ = self.peer_address.set(address);
        if let Some(cluster) = &self.cluster {
            // Said at once, not at the next count of the replicas.
            let running = cluster.membership.report();
            self.report_to_cluster(running.replicas, running.held_ordinals);
        }
    }

    /// Tells the cluster what this node runs: its plugins, how many
    /// `replicas`, and the statefulset ordinals it `held`.
    pub fn report_to_cluster(&self, replicas: usize, held_ordinals: Vec<HeldOrdinals>) {
        if let Some(cluster) = &self.cluster {
            let plugins = self
                .plugins
                .list()
                .iter()
                .map(|handle| {
                    let info = handle.info();
                    NodePlugin {
                        name: info.name.clone(),
                        version: info.version.clone(),
                        abi: format!("{}.{}", info.abi_major, info.abi_minor),
                    }
                })
                .collect();
            cluster.membership.set_report(NodeReport {
                plugins,
                replicas,
                held_ordinals,
                peer: self.peer_address.get().copied(),
                refused_plugins: self.refused_plugins.lock().clone(),
            });
        }
    }

    /// The live stream of events and steps.
    pub fn activity(&self) -> &ActivityBus {
        &self.activity
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The loaded plugins.
    pub fn plugins(&self) -> &Arc<PluginRegistry> {
        &self.plugins
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    /// Attaches the reconciler: from now on applies converge Docker, and
    /// deletes drain and remove replicas.
    pub fn attach_reconciler(&self, reconciler: Arc<Reconciler>) {
        let _ = self.reconciler.set(reconciler);
    }

    /// The reconciler, when the controller drives Docker.
    pub fn reconciler(&self) -> Option<&Arc<Reconciler>> {
        self.reconciler.get()
    }

    /// Answers one request. `progress` hears how an apply is going.
    pub fn handle(
        &self,
        request: Request,
        progress: &mut (dyn FnMut(ApplyProgress) + Send),
    ) -> Result<Response, Failure> {
        let large = matches!(request, Request::Apply { .. });
        let verb = voodu_api::Verb::from(&request);
        let answer = verbs::answer(self, request, progress);
        if let Some(metrics) = self.metrics.get() {
            metrics.api_request(verb, answer.is_ok());
        }
        if large {
            return_freed_memory();
        }
        answer
    }

    /// The write lock, for one apply, delete, install, remove, rollback,
    /// prune or config change at a time; refused once this worker has
    /// handed over to an upgrade's new worker (which owns the store), so a
    /// request that reached the old worker just before is told to run
    /// again instead of waiting for ever.
    pub(crate) fn lock_writes(&self) -> Result<parking_lot::MutexGuard<'_, ()>, Failure> {
        loop {
            if self.handed_over.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(Failure::new(
                    "the controller was being upgraded and this request reached the old worker after it handed over — run the command again (the new worker answers it)",
                ));
            }
            if let Some(guard) = self.writes.try_lock_for(Duration::from_millis(50)) {
                return Ok(guard);
            }
        }
    }

    /// Counts what this controller does in `metrics` from now on (plugin
    /// calls, API requests and the reconciler's work; attach the reconciler
    /// first); its scrape reads the rest.
    pub fn attach_metrics(&self, metrics: Arc<metrics::Metrics>) {
        metrics.observe_plugin_calls();
        if let Some(reconciler) = self.reconciler() {
            reconciler.observe_with(metrics.clone());
        }
        let _ = self.metrics.set(metrics);
    }

    /// This worker runs under a supervisor, reached through `link`.
    pub fn attach_supervisor(
        &self,
        link: Arc<supervisor::control::WorkerLink>,
        worker: voodu_api::WorkerInfo,
    ) {
        let _ = self.supervisor.set((link, worker));
    }

    /// The channel to the supervisor, when there is one.
    pub(crate) fn supervisor_link(&self) -> Option<&Arc<supervisor::control::WorkerLink>> {
        self.supervisor.get().map(|(link, _)| link)
    }

    /// An upgrade's new worker, told to go, takes charge of the node's
    /// lease it adopted: leaving revokes it from now on.
    pub fn take_charge(&self) {
        if let Some(cluster) = &self.cluster {
            cluster.membership.take_charge();
        }
    }

    /// This worker's process, when it runs under a supervisor.
    pub fn worker_info(&self) -> Option<voodu_api::WorkerInfo> {
        self.supervisor.get().map(|(_, worker)| worker.clone())
    }

    /// `(plugin, why)` of each installed plugin that did not load.
    pub fn unloaded_plugins(&self) -> Vec<(String, String)> {
        self.load_failures
            .lock()
            .iter()
            .map(|failure| {
                let name = failure
                    .path
                    .file_name()
                    .map(|name| name.to_string_lossy().into_owned())
                    .unwrap_or_else(|| failure.path.display().to_string());
                (name, failure.error.clone())
            })
            .collect()
    }

    /// This worker replaces one that died (`how`): records, on each
    /// workload with a block of the plugin concerned, an event for the
    /// connections cut through each plugin's sockets and one for each
    /// plugin quarantined because it crashed the worker inside a call.
    pub fn record_worker_death(&self, how: &str, connections_cut: &[(String, usize)]) {
        let mut events = Vec::new();
        let mut on_users = |plugin: &str, level, reason: EventReason, message: String| {
            tracing::warn!(plugin, "{message}");
            match self.store.workloads_with_block_type(plugin) {
                Ok(users) => {
                    events.extend(users.into_iter().map(|workload| voodu_store::NewEvent {
                        workload,
                        level,
                        reason: reason.clone(),
                        message: message.clone(),
                    }))
                }
                Err(error) => {
                    tracing::warn!(%error, plugin, "the workloads to tell could not be listed")
                }
            }
        };
        for (plugin, cut) in connections_cut {
            on_users(
                plugin,
                voodu_model::EventLevel::Warning,
                EventReason::WorkerDied,
                format!(
                    "the controller's worker {how}: {cut} connection(s) open through plugin {plugin} were cut with it, as last counted (their clients saw a reset); its listening sockets stayed open, so no new connection was refused"
                ),
            );
        }
        for (plugin, why) in self.unloaded_plugins() {
            if why.starts_with("quarantined") {
                on_users(
                    &plugin,
                    voodu_model::EventLevel::Error,
                    EventReason::PluginQuarantined,
                    format!("the controller's worker {how}; plugin {plugin} is {why}"),
                );
            }
        }
        if let Err(error) = self.store.record_events(&events) {
            tracing::warn!(%error, "the worker's death could not be recorded as events");
        }
    }

    /// Hands this worker's duties over to an upgrade's new worker, which
    /// could not load `unloaded`: refused (`Err`, why) when that includes
    /// a plugin this worker serves. Otherwise waits for the writes in
    /// progress and keeps any more from starting, then stops reconciling
    /// and waits (up to [`HAND_OVER_WAIT`]) for the passes in progress.
    /// The plugins keep serving until the worker stops.
    pub fn hand_over(&self, unloaded: &[(String, String)]) -> Result<(), String> {
        if let Some((plugin, why)) = unloaded
            .iter()
            .find(|(plugin, _)| self.plugins.get(plugin).is_some())
        {
            return Err(format!(
                "the new worker could not load plugin {plugin}, which this one serves: {why}"
            ));
        }
        // No write starts again in this worker: the new one owns the store.
        std::mem::forget(self.writes.lock());
        self.handed_over
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(reconciler) = self.reconciler() {
            reconciler.stop();
            let until = std::time::Instant::now() + HAND_OVER_WAIT;
            while reconciler.passes_running() > 0 && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if let Some(cluster) = &self.cluster {
            cluster::hand_over(cluster);
        }
        tracing::info!("handed over to the new worker; the plugins serve until it stops");
        Ok(())
    }

    /// Stops the reconciler's workers and shuts every plugin down, all at
    /// once, waiting for each up to the shutdown grace the supervisor gave
    /// (`VOODU_SHUTDOWN_GRACE_MS`, during which a plugin lets its open
    /// connections finish), or the plugin call bound.
    pub fn shutdown(&self) {
        if let Some(reconciler) = self.reconciler() {
            reconciler.stop();
        }
        let plugins = self.plugins.list();
        let grace = voodu_plugin_abi::sdk::shutdown_grace();
        std::thread::scope(|scope| {
            for plugin in &plugins {
                let bound = grace.map_or(plugin.call_timeout(), |grace| {
                    grace.max(plugin.call_timeout()) + Duration::from_millis(500)
                });
                scope.spawn(move || plugin.shutdown_within(bound));
            }
        });
    }
}

/// Runs async work from a request's blocking thread.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(future)
}

/// Runs blocking `work` (store calls, plugin calls) on tokio's blocking
/// pool; a panic in it becomes the error `panicked` makes of its message.
async fn off_the_runtime<T: Send + 'static, E: Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
    panicked: impl FnOnce(String) -> E,
) -> Result<T, E> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|error| Err(panicked(error.to_string())))
}

/// The answer to a question about replicas of a controller without Docker.
fn no_replicas() -> Failure {
    Failure::new("this controller runs without Docker (--no-docker), so it has no replicas")
}

pub(crate) fn not_found(workload: &WorkloadId) -> Failure {
    Failure::new(format!(
        "{workload}: no such workload — `vd get workloads` lists what is stored"
    ))
}

/// Creates a directory only its owner can enter.
pub(crate) fn create_private_dir(path: &Path) -> Result<(), ControllerError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let error = |source| ControllerError::Root {
        path: path.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(error)
}

#[cfg(test)]
mod plugin_trust_tests {
    use super::PluginTrust;
    use voodu_model::signing::{SigningKey, TrustedKeys};

    fn record(
        signature: Option<voodu_model::signing::PluginSignature>,
    ) -> voodu_store_etcd::PluginRecord {
        voodu_store_etcd::PluginRecord {
            name: "echo".into(),
            version: "1.0.0".into(),
            sha256: "aa".into(),
            size: 1,
            chunks: 1,
            signature,
            removed: false,
        }
    }

    /// A node with no operator's key refuses every cluster plugin and says
    /// how to give it one; the lab mode takes any; a trusted key's
    /// signature is taken.
    #[test]
    fn a_node_trusting_no_key_refuses_and_says_how_to_give_it_one() {
        let refusal = PluginTrust::Signed(TrustedKeys::default())
            .refusal(&record(None))
            .expect("refused");
        assert!(refusal.contains("--trust-key FILE.pub"), "{refusal}");
        assert!(refusal.contains("--trust-unsigned-plugins"), "{refusal}");
        assert_eq!(PluginTrust::Unsigned.refusal(&record(None)), None);
        let operator = SigningKey::from_seed([8; 32]);
        let statement = voodu_model::signing::PluginStatement {
            name: "echo".into(),
            version: "1.0.0".into(),
            abi: "1.2".into(),
            sha256: "aa".into(),
            node: "a".into(),
            at: "2026-12-06T08:00:00Z".into(),
            removed: false,
        };
        let signed = record(Some(operator.sign(&statement.to_text())));
        assert_eq!(
            PluginTrust::Signed(TrustedKeys::of(&[&operator])).refusal(&signed),
            None
        );
    }
}
