//! # voodu-controller
//!
//! The controller: the long-lived process that owns the store and the
//! loaded plugins, and answers API requests. [`Controller::handle`] does the
//! work of each request; [`server`] carries requests over the unix socket;
//! [`stream`] answers the streaming ones (waits, watches, logs).
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

pub mod apply;
mod backup;
pub mod delete;
pub mod history;
pub mod install;
mod orphans;
pub mod server;
pub mod stream;
pub mod wire;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use crate::apply::{apply, dry_run, ApplyError};
use crate::delete::delete_workload;
use crate::history::{rollback, RollbackError};
use crate::install::{install_plugin, InstallError};
use voodu_api::ApplyProgress;
use voodu_api::{Description, Failure, Request, Response, VersionInfo, WorkloadSummary};
use voodu_manifest::{parse_manifests, ParsedManifests};
use voodu_model::core_spec::{
    not_acted_on_message, CoreSpec, CORE_BLOCKS, STATEFULSET_CORE_BLOCKS,
};
use voodu_model::ManifestSource;
use voodu_plugin_host::{InstallOptions, LoadFailure, LoadOptions, PluginRegistry, RegistryError};
use voodu_reconcile::activity::{ActivityBus, Notice};
use voodu_reconcile::Reconciler;
use voodu_store::{SqliteStore, StateStore, StoreError};

pub use voodu_reconcile::DEFAULT_WORKERS;

/// Whether the process must end with `_exit` rather than a normal exit: a
/// plugin library whose constructor never returned holds the dynamic
/// loader's lock, which a normal exit takes to run library destructors, so
/// a normal exit would hang. Everything the controller must save is saved
/// by then (the store commits as it goes).
pub fn must_exit_at_once() -> bool {
    voodu_plugin_host::loader::load_is_stuck()
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
fn parse_bounded(sources: Vec<ManifestSource>) -> Result<ParsedManifests, Failure> {
    bounded(PARSE_TIMEOUT, move || parse_manifests(&sources))
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
    /// Another controller holds the root.
    #[error("another controller is already running on {0} — stop it first, or use another --root")]
    AlreadyRunning(PathBuf),
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
}

/// The controller's state: the store and the loaded plugins.
#[derive(Debug)]
pub struct Controller {
    root: PathBuf,
    store: Arc<dyn StateStore>,
    plugins: Arc<PluginRegistry>,
    reconciler: OnceLock<Arc<Reconciler>>,
    load_failures: Mutex<Vec<LoadFailure>>,
    activity: ActivityBus,
    /// One apply, delete, install or remove at a time, so two cannot
    /// interleave their checks and their writes. It covers validation and
    /// the store's transaction only, never a rollout: those run in the
    /// reconciler's workers.
    writes: Mutex<()>,
    /// How often each plugin was reloaded by this controller.
    reloads: Mutex<std::collections::HashMap<String, u32>>,
}

impl Controller {
    /// Opens the store and loads every installed plugin. A plugin that fails
    /// to load is logged and listed, and does not stop the others.
    pub fn open(config: &ControllerConfig) -> Result<Controller, ControllerError> {
        create_private_dir(&config.root)?;
        let state = config.root.join(STATE_FILE);
        let store = SqliteStore::open(&state).map_err(|source| ControllerError::StoreOpen {
            path: state.clone(),
            source,
        })?;
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
        let (plugins, load_failures) = PluginRegistry::open(
            &config.root.join(PLUGINS_DIR),
            LoadOptions {
                call_timeout: config.plugin_call_timeout,
            },
            reserved,
        )?;
        Ok(Controller {
            root: config.root.clone(),
            store: Arc::new(store),
            plugins: Arc::new(plugins),
            reconciler: OnceLock::new(),
            load_failures: Mutex::new(load_failures),
            activity,
            writes: Mutex::new(()),
            reloads: Mutex::new(std::collections::HashMap::new()),
        })
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
        let answer = self.answer(request, progress);
        if large {
            return_freed_memory();
        }
        answer
    }

    fn answer(
        &self,
        request: Request,
        progress: &mut (dyn FnMut(ApplyProgress) + Send),
    ) -> Result<Response, Failure> {
        let store_failure = |error: StoreError| Failure::new(error.to_string());
        match request {
            Request::Apply {
                sources,
                dry_run: true,
            } => {
                // Parsing is pure and can be slow for a large manifest: it
                // runs before the write lock, so it never holds up others.
                let parsed = parse_bounded(sources)?;
                let _writes = self.writes.lock();
                match dry_run(parsed, &self.plugins, &*self.store, progress) {
                    Ok(report) => Ok(Response::DryRun(report)),
                    Err(ApplyError::Refused(diagnostics)) => Err(Failure {
                        message: format!(
                            "dry run: the apply would be refused: {} problem{} found",
                            diagnostics.len(),
                            if diagnostics.len() == 1 { "" } else { "s" }
                        ),
                        diagnostics,
                    }),
                    Err(ApplyError::Store(error)) => Err(store_failure(error)),
                }
            }
            Request::Apply { sources, .. } => {
                let parsed = parse_bounded(sources)?;
                let _writes = self.writes.lock();
                let since_event = self.store.last_event_id().map_err(store_failure)?;
                match apply(parsed, &self.plugins, &*self.store, progress) {
                    Ok(mut report) => {
                        report.since_event = since_event;
                        // Stored: the rollouts run in the reconciler's
                        // workers; a client that wants to follow them asks
                        // with `Request::Wait`.
                        if let Some(reconciler) = self.reconciler() {
                            for applied in &report.workloads {
                                if let Ok(id) = applied.workload.parse() {
                                    reconciler.enqueue(&id);
                                }
                            }
                        }
                        Ok(Response::Applied(report))
                    }
                    Err(ApplyError::Refused(diagnostics)) => Err(Failure {
                        message: format!(
                            "apply refused: {} problem{} found, nothing was stored",
                            diagnostics.len(),
                            if diagnostics.len() == 1 { "" } else { "s" }
                        ),
                        diagnostics,
                    }),
                    Err(ApplyError::Store(error)) => Err(store_failure(error)),
                }
            }
            Request::Describe { workload, events } => {
                let (stored, events, publications) = {
                    let store = &self.store;
                    let Some(stored) = store.workload(&workload).map_err(store_failure)? else {
                        return Err(not_found(&workload.to_string()));
                    };
                    (
                        stored,
                        store.events(&workload, events).map_err(store_failure)?,
                        store.publications(&workload).map_err(store_failure)?,
                    )
                };
                let (replicas, status) = match self.reconciler() {
                    Some(reconciler) => (
                        block_on(reconciler.live_replicas(Some(&workload)))
                            .map_err(|error| Failure::new(error.to_string()))?,
                        reconciler.status(&workload).map(|(status, _)| status),
                    ),
                    None => (Vec::new(), None),
                };
                let not_acted_on = serde_json::from_value::<CoreSpec>(stored.core_spec.clone())
                    .map(|core| {
                        core.blocks_not_acted_on()
                            .into_iter()
                            .map(not_acted_on_message)
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Response::Described(Box::new(Description {
                    not_acted_on,
                    workload: wire::stored_workload(&stored),
                    replicas: wire::replicas(&replicas),
                    // Only the current revision's blocks: a block a later
                    // revision dropped was told to forget its set.
                    publications: publications
                        .iter()
                        .filter(|publication| {
                            stored.blocks.iter().any(|block| {
                                block.block_type == publication.block_type
                                    && block.labels == publication.labels
                            })
                        })
                        .map(wire::publication)
                        .collect(),
                    events: events.iter().map(wire::event).collect(),
                    status: status.as_ref().map(wire::status),
                })))
            }
            Request::Pods {
                workload, orphans, ..
            } => {
                let Some(reconciler) = self.reconciler() else {
                    return Err(no_replicas());
                };
                if orphans {
                    return orphans::list(reconciler, workload.as_ref());
                }
                let replicas = block_on(reconciler.live_replicas(workload.as_ref()))
                    .map_err(|error| Failure::new(error.to_string()))?;
                Ok(Response::Pods {
                    replicas: wire::replicas(&replicas),
                })
            }
            Request::Events {
                workload, limit, ..
            } => {
                let events = self
                    .store
                    .recent_events(workload.as_ref(), limit)
                    .map_err(store_failure)?;
                Ok(Response::Events {
                    events: events
                        .iter()
                        .map(|(workload, event)| wire::notice(&Notice::stored(workload, event)))
                        .collect(),
                })
            }
            Request::Wait { .. } | Request::Logs { .. } => Err(Failure::new(
                "this request is answered by the controller's stream handler",
            )),
            Request::Get { kind } => {
                let workloads = self.store.workloads(kind).map_err(store_failure)?;
                Ok(Response::Workloads {
                    workloads: workloads
                        .iter()
                        .map(|workload| WorkloadSummary::from(&wire::stored_workload(workload)))
                        .collect(),
                })
            }
            Request::Delete { workload } => {
                let _writes = self.writes.lock();
                let since_event = self.store.last_event_id().map_err(store_failure)?;
                let reconciler = self.reconciler();
                // Without Docker there are no replicas: the blocks are
                // forgotten at once. With it, the reconciler drains and
                // removes the replicas, then forgets the blocks.
                let report = delete_workload(
                    &workload,
                    &*self.plugins,
                    &*self.store,
                    reconciler.is_none(),
                )
                .map_err(store_failure)?;
                let Some(mut report) = report else {
                    return Err(not_found(&workload.to_string()));
                };
                report.since_event = since_event;
                if let Some(reconciler) = reconciler {
                    reconciler.enqueue(&workload);
                }
                Ok(Response::Deleted(report))
            }
            Request::PluginsInstall {
                path,
                replace,
                sha256,
            } => {
                let _writes = self.writes.lock();
                let (plugin, installed, report) = self.install(
                    &path,
                    &InstallOptions { replace, sha256 },
                    "plugins:install",
                )?;
                Ok(Response::Installed {
                    plugin,
                    replaced_version: installed.replaced_version,
                    revalidated: report.revalidated.iter().map(ToString::to_string).collect(),
                })
            }
            Request::PluginsReload { name } => {
                let _writes = self.writes.lock();
                let failure =
                    |error: RegistryError| Failure::new(format!("plugins:reload: {error}"));
                let (file, was_quarantined) =
                    self.plugins.installed_file(&name).map_err(failure)?;
                let left_behind = {
                    let mut reloads = self.reloads.lock();
                    let count = reloads.entry(name.clone()).or_insert(0);
                    if *count >= MAX_RELOADS {
                        return Err(Failure::new(format!(
                            "plugins:reload: {name} was reloaded {MAX_RELOADS} times by this controller, and each reload leaves the old instance's thread and library behind — restart the controller (`vd controller`) to reload it again"
                        )));
                    }
                    // An instance is left behind only when one was loaded.
                    if self.plugins.get(&name).is_some() {
                        *count += 1;
                    }
                    *count
                };
                let (plugin, _, _) = self.install(
                    &file,
                    &InstallOptions {
                        replace: true,
                        sha256: None,
                    },
                    "plugins:reload",
                )?;
                Ok(Response::Reloaded {
                    plugin,
                    was_quarantined,
                    instances_left_behind: left_behind,
                })
            }
            Request::PruneOrphans { dry_run } => {
                let Some(reconciler) = self.reconciler() else {
                    return Err(no_replicas());
                };
                let _writes = self.writes.lock();
                orphans::prune(reconciler, dry_run)
            }
            Request::StoreBackup { path } => backup::backup(&*self.store, &path),
            Request::Version => Ok(Response::Version(VersionInfo::current())),
            Request::History { workload } => {
                let store = &self.store;
                let Some(stored) = store.workload(&workload).map_err(store_failure)? else {
                    return Err(not_found(&workload.to_string()));
                };
                Ok(Response::History {
                    workload: workload.to_string(),
                    current: stored.revision,
                    revisions: store
                        .revisions(&workload)
                        .map_err(store_failure)?
                        .iter()
                        .map(wire::revision)
                        .collect(),
                })
            }
            Request::Rollback { workload, to } => {
                let _writes = self.writes.lock();
                let since_event = self.store.last_event_id().map_err(store_failure)?;
                match rollback(&workload, to, &self.plugins, &*self.store) {
                    Ok(mut report) => {
                        report.since_event = since_event;
                        if let Some(reconciler) = self.reconciler() {
                            reconciler.enqueue(&workload);
                        }
                        Ok(Response::Applied(report))
                    }
                    Err(RollbackError::Refused(diagnostics)) => Err(Failure {
                        message: format!(
                            "rollback refused: {} problem{} found, nothing changed",
                            diagnostics.len(),
                            if diagnostics.len() == 1 { "" } else { "s" }
                        ),
                        diagnostics,
                    }),
                    Err(error) => Err(Failure::new(error.to_string())),
                }
            }
            Request::PluginsList => Ok(Response::Plugins {
                plugins: self
                    .plugins
                    .list()
                    .iter()
                    .map(|handle| wire::plugin_row(handle))
                    .collect(),
                failures: self
                    .load_failures
                    .lock()
                    .iter()
                    .map(wire::load_failure)
                    .collect(),
            }),
            Request::PluginsRemove { name } => {
                let _writes = self.writes.lock();
                let users = self
                    .store
                    .workloads_with_block_type(&name)
                    .map_err(store_failure)?;
                if !users.is_empty() {
                    let names: Vec<String> = users.iter().map(ToString::to_string).collect();
                    return Err(Failure::new(format!(
                        "plugins:remove: plugin \"{name}\" is still used by {} — remove its blocks from {} or delete {} first",
                        names.join(", "),
                        if users.len() == 1 { "that workload" } else { "those workloads" },
                        if users.len() == 1 { "it" } else { "them" },
                    )));
                }
                self.plugins
                    .remove(&name)
                    .map_err(|error| Failure::new(format!("plugins:remove: {error}")))?;
                self.load_failures
                    .lock()
                    .retain(|failure| !failure.path.ends_with(&name));
                Ok(Response::Removed { name })
            }
        }
    }

    /// Installs (or replaces) a plugin and makes it hear every set; `verb`
    /// starts each error message.
    fn install(
        &self,
        path: &Path,
        options: &InstallOptions,
        verb: &str,
    ) -> Result<
        (
            voodu_api::PluginRow,
            voodu_plugin_host::Installed,
            install::InstallReport,
        ),
        Failure,
    > {
        let report = install_plugin(path, options, &self.plugins, &*self.store).map_err(|error| {
            match error {
                InstallError::Refused(diagnostics) => Failure {
                    message: format!(
                        "{verb}: the new version refused {} stored block{}; nothing changed — fix {} and apply, or keep the installed version",
                        diagnostics.len(),
                        if diagnostics.len() == 1 { "" } else { "s" },
                        if diagnostics.len() == 1 { "it" } else { "them" },
                    ),
                    diagnostics,
                },
                InstallError::LiveButNotStored { installed, error } => {
                    // Live all the same: it hears every set.
                    if let Some(reconciler) = self.reconciler() {
                        reconciler.plugin_changed(&installed.info.name);
                    }
                    Failure::new(format!(
                        "{verb}: {}",
                        InstallError::LiveButNotStored { installed, error }
                    ))
                }
                other => Failure::new(format!("{verb}: {other}")),
            }
        })?;
        let installed = report.installed.clone();
        let plugin = self
            .plugins
            .get(&installed.info.name)
            .map(|handle| wire::plugin_row(&handle))
            .ok_or_else(|| Failure::new("the plugin was removed while installing"))?;
        self.load_failures
            .lock()
            .retain(|failure| !failure.path.ends_with(&installed.info.name));
        if let Some(reconciler) = self.reconciler() {
            // The new instance hears every block's current set.
            reconciler.plugin_changed(&installed.info.name);
        }
        Ok((plugin, installed, report))
    }

    /// Stops the reconciler's workers and shuts every plugin down.
    pub fn shutdown(&self) {
        if let Some(reconciler) = self.reconciler() {
            reconciler.stop();
        }
        for plugin in self.plugins.list() {
            plugin.shutdown();
        }
    }
}

/// Runs async work from a request's blocking thread.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(future)
}

/// The answer to a question about replicas of a controller without Docker.
fn no_replicas() -> Failure {
    Failure::new("this controller runs without Docker (--no-docker), so it has no replicas")
}

pub(crate) fn not_found(workload: &str) -> Failure {
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
