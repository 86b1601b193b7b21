//! # voodu-api
//!
//! The controller's JSON API over its unix socket, and the client. One
//! connection carries one request: the client writes a [`RequestLine`] (the
//! [`PROTOCOL_VERSION`] and a [`Request`]) as one JSON line of at most
//! [`MAX_REQUEST_BYTES`], and the controller answers with [`Frame`] lines:
//! zero or more `progress`, `notice`, `pod` or `log` frames, then one `done`
//! or `failed` frame. A watch (`vd events -w`, `vd get pods -w`) streams
//! until the client hangs up.
//!
//! Every type that crosses the socket is defined here ([`views`],
//! [`reports`]), never borrowed from the store, the runtime or the
//! reconciler, so the protocol changes only when this crate does.
//! [`client`] is the CLI's end; [`sources`] reads the manifest files a
//! client sends.
//!
//! **May not depend on** any voodu crate but `voodu-model` and
//! `voodu-plugin-abi` (`tests/crate_rules.rs` checks this).

#![warn(missing_docs)]

pub mod acceptance;
pub mod check;
pub mod client;
pub mod peer;
pub mod reports;
pub mod sources;
pub mod ssh;
pub mod views;

use std::path::PathBuf;

use std::collections::BTreeMap;

use voodu_model::config::BucketName;

use serde::{Deserialize, Serialize};
use voodu_plugin_abi::messages::WorkloadKind;

pub use voodu_model::{Diagnostic, EventLevel, Location, ManifestSource, WorkloadId};

pub use crate::peer::Unanswered;
pub use crate::reports::{
    AppliedWorkload, ApplyProgress, ApplyReport, ConfigChange, ConfigListing, ConfigVariable,
    DeleteReport, DryRunReport, PlannedWorkload, WorkloadOutcome,
};
pub use crate::views::{
    CrashRecord, DrainOutcomeKind, Event, LastDrain, LoadFailure, Notice, Phase, Publication,
    Replica, Revision, StoredWorkload, WorkloadStatus,
};

/// The socket's file name inside the root.
pub const SOCKET_FILE: &str = "controller.sock";

/// The protocol this crate speaks. A controller refuses a request line of
/// another version, naming both, so a `vd` and a controller of different
/// builds never misread each other.
pub const PROTOCOL_VERSION: u32 = 2;

/// The largest request line a controller reads, newline included: 64 MiB,
/// room for a large apply. A longer line is refused and the connection
/// closed, without reading the rest.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// One request as it travels: the protocol version beside the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestLine {
    /// The client's [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// What it asks.
    #[serde(flatten)]
    pub request: Request,
}

impl RequestLine {
    /// A request line of this crate's protocol.
    pub fn new(request: Request) -> Self {
        RequestLine {
            protocol: PROTOCOL_VERSION,
            request,
        }
    }
}

/// What a client asks of the controller. Each variant is one verb of the
/// API ([`Verb`]); the controller answers each in one handler module, and
/// the CLI builds and renders each in one module, so a verb added here
/// fails to compile until both sides have it.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, strum::EnumDiscriminants)]
#[serde(tag = "verb", rename_all = "snake_case")]
#[strum_discriminants(
    name(Verb),
    doc = "The verbs of the API: one per [`Request`] variant, named as the wire names them (`plugins_install`).",
    derive(Hash, strum::EnumIter, strum::IntoStaticStr),
    strum(serialize_all = "snake_case")
)]
pub enum Request {
    /// Apply manifests, all or nothing.
    Apply {
        /// The manifest files' names and texts.
        sources: Vec<ManifestSource>,
        /// Parse and validate, and say what would change; store nothing.
        #[serde(default)]
        dry_run: bool,
        /// The values, in the shell of `vd apply`, of the variables the
        /// manifests reference (`${NAME}`); only those that are set.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        environment: BTreeMap<String, String>,
        /// Leave out top-level blocks of voodu's kinds that this voodu does
        /// not run (`ingress`, `job`, ...) and list them, rather than
        /// refusing the apply.
        #[serde(default)]
        skip_unsupported: bool,
        /// The files the manifests' `env_file` attributes name, read by
        /// `vd apply` from its working directory: path as written to
        /// contents.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env_files: BTreeMap<String, String>,
        /// Delete the stored workloads of each scope and kind the
        /// manifests declare that none of them names, as `vd delete` does
        /// (voodu's `apply --prune`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        prune: bool,
        /// The build context of each workload with a `build` block, as
        /// `vd apply` read it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        contexts: Vec<BuildContext>,
        /// Build again even when an image of the same context exists
        /// (`--force`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
    /// One workload: core spec, normalised blocks, recent events.
    Describe {
        /// Which workload.
        workload: WorkloadId,
        /// How many recent events to include.
        events: usize,
        /// Include the env its replicas run with
        /// ([`Description::env`]): `vd describe --show-env`.
        #[serde(default)]
        show_env: bool,
    },
    /// Stored workloads, of one kind or all.
    Get {
        /// Only this kind, when given.
        kind: Option<WorkloadKind>,
    },
    /// This controller's replicas, of one workload or all, from Docker.
    Pods {
        /// Only this workload's, when given.
        #[serde(default)]
        workload: Option<WorkloadId>,
        /// Keep streaming changes as `pod` frames.
        #[serde(default)]
        watch: bool,
        /// Only the orphans: containers of this controller whose workload
        /// the store has no record of, which it leaves running.
        #[serde(default)]
        orphans: bool,
    },
    /// Remove every orphan (see `Pods::orphans`), each drained as any
    /// removal; with `dry_run`, only name them.
    PruneOrphans {
        /// Name what would be removed; remove nothing.
        #[serde(default)]
        dry_run: bool,
    },
    /// Write a consistent copy of the store to a file, while the
    /// controller runs (SQLite's online backup).
    StoreBackup {
        /// Where, as an absolute path; an existing file is refused.
        path: PathBuf,
    },
    /// Waits until each workload has converged to what is stored (or, for
    /// one no longer stored, until its replicas are gone and its blocks
    /// forgotten), streaming its steps as `progress` frames.
    Wait {
        /// The workloads.
        workloads: Vec<WorkloadId>,
        /// Replay the steps of events recorded after this id first, so none
        /// between an apply's answer and this request is missed.
        #[serde(default)]
        since_event: Option<i64>,
        /// Give up after this long, naming what is still converging.
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// Recent events, of one workload or all; with `follow`, new ones
    /// stream as `notice` frames until the client hangs up.
    Events {
        /// Only this workload's, when given.
        #[serde(default)]
        workload: Option<WorkloadId>,
        /// How many recent events to send first.
        #[serde(default)]
        limit: usize,
        /// Keep streaming.
        #[serde(default)]
        follow: bool,
    },
    /// Delete a workload; its plugins forget its blocks.
    Delete {
        /// Which workload.
        workload: WorkloadId,
    },
    /// The controller's version and the plugin ABI it hosts.
    Version,
    /// Replace the controller's worker with one started from the binary
    /// now at the controller's path, refusing no connection (`vd
    /// controller upgrade`).
    UpgradeController,
    /// A workload's stored revisions.
    History {
        /// Which workload.
        workload: WorkloadId,
    },
    /// Applies a stored revision of a workload again, as a new revision.
    Rollback {
        /// Which workload.
        workload: WorkloadId,
        /// The revision; default: the one before the current.
        #[serde(default)]
        to: Option<i64>,
    },
    /// Runs a command in one of a workload's running replicas on this node,
    /// as `output` frames, answered with its exit code.
    Exec {
        /// Which workload.
        workload: WorkloadId,
        /// The replica (its id, or a statefulset's ordinal); default: the
        /// oldest running one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<String>,
        /// The command and its arguments.
        command: Vec<String>,
        /// Variables set for the command beside the container's,
        /// `KEY=VALUE` (`-e`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
        /// The directory it runs in (`-w`); default: the container's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workdir: Option<String>,
        /// The user it runs as (`-u`); default: the container's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// `vd exec -i` (and `-t`): the command's standard input is what
        /// the client sends after its request line, as [`ExecInput`]
        /// lines; absent: no standard input.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<ExecSession>,
    },
    /// Runs a stored job (or a cronjob, out of its schedule) once, on this
    /// node: what it writes as `output` frames as it comes, answered with
    /// how it ended ([`Response::RunEnded`]).
    Run {
        /// The job's scope.
        scope: String,
        /// The job's name.
        name: String,
        /// `job` or `cronjob`; default: whichever of them is stored by
        /// that scope and name (a job first).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<WorkloadKind>,
    },
    /// `vd stop`: stops a workload's replicas on this node (or one),
    /// each drained first, and freezes them: passes leave them stopped
    /// until `vd start`.
    Stop {
        /// Which workload.
        workload: WorkloadId,
        /// One replica (its id, or a statefulset's ordinal); default: all
        /// of them on this node.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<String>,
    },
    /// `vd start`: thaws a workload's frozen replicas (or one), each
    /// created anew from the current spec and config.
    Start {
        /// Which workload.
        workload: WorkloadId,
        /// One replica; default: every frozen one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<String>,
    },
    /// Replaces a workload's replicas, as a rolling update does (new ones
    /// first, each old one drained), its spec and revision unchanged.
    Restart {
        /// Which workload.
        workload: WorkloadId,
        /// `vd release REF run`: run its release's `pre_command` and
        /// `command` first, on the node asked, whether or not they ran for
        /// its spec; the replicas are replaced only if they succeed, and
        /// its `post_command` runs once they are.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        release: bool,
    },
    /// Every replica's log, as `log` frames; with `follow`, until the
    /// client hangs up.
    Logs {
        /// Which workload.
        workload: WorkloadId,
        /// Keep streaming new lines.
        #[serde(default)]
        follow: bool,
        /// Only lines written since this Unix time, in seconds.
        #[serde(default)]
        since_unix: Option<i64>,
        /// Only the last lines of each replica's log.
        #[serde(default)]
        tail: Option<u64>,
        /// Only this replica's log (its id); default: every replica's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<String>,
    },
    /// Install a plugin from a file the controller can read, or from the
    /// file's bytes sent along (`vd` on another host, over SSH).
    PluginsInstall {
        /// The plugin's shared object, as an absolute path; with `file`,
        /// the path it was read from on the client's host (named in the
        /// answer only).
        path: PathBuf,
        /// The file's bytes, base64 in JSON, when the controller cannot
        /// read `path` (it is on the client's host).
        #[serde_as(as = "Option<serde_with::base64::Base64>")]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<Vec<u8>>,
        /// Replace an installed plugin of the same name.
        replace: bool,
        /// The SHA-256 (hex) the file must have.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
        /// The plugin-wide settings to install it with (a JSON object);
        /// absent keeps those of the plugin it replaces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settings: Option<serde_json::Value>,
        /// Run it in a child process of its own (`true`) or in the
        /// controller (`false`); absent keeps where the plugin it replaces
        /// runs (in the controller for a new one, unless it is a second Go
        /// runtime).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out_of_process: Option<bool>,
    },
    /// Show an installed plugin's settings, or, with `settings`, give it
    /// new ones (`vd plugins:settings NAME [FILE]`).
    PluginsSettings {
        /// The plugin's name.
        name: String,
        /// The new settings (a JSON object, `{}` to drop them); absent
        /// only shows them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settings: Option<serde_json::Value>,
    },
    /// The loaded plugins, and those that failed to load.
    PluginsList,
    /// Give an installed plugin a fresh instance (a wedged, poisoned or
    /// quarantined one): a fresh copy of its file is loaded, checked
    /// against every stored block, and hears every block's set at once.
    PluginsReload {
        /// The plugin's name.
        name: String,
    },
    /// Remove a plugin no stored workload uses.
    PluginsRemove {
        /// The plugin's name.
        name: String,
    },
    /// The statement of a cluster plugin's record, for an operator's key
    /// to sign (`vd plugins:sign`).
    PluginsStatement {
        /// The plugin's name.
        name: String,
    },
    /// Put an operator's signature on a cluster plugin's record: it must
    /// be over the statement of the record as it is now.
    PluginsSign {
        /// The plugin's name.
        name: String,
        /// The signature, with the statement it is over.
        signature: voodu_model::signing::PluginSignature,
    },
    /// What each replica uses now, of one workload or all (`vd stats`):
    /// CPU, memory and network from the engine's stats API, and restarts.
    Stats {
        /// Only this workload's, when given.
        #[serde(default)]
        workload: Option<WorkloadId>,
        /// Only the workloads of this kind, scope or name (voodu's `vd
        /// stats deployment`, `vd stats prod`, `-k`, `-s`, `-n`).
        #[serde(default, skip_serializing_if = "WorkloadFilter::is_empty")]
        filter: WorkloadFilter,
    },
    /// The options of a block type, as its plugin describes them (`vd
    /// explain BLOCK`).
    Explain {
        /// The block type, which is the plugin's name.
        block: String,
    },
    /// Send one call, with the request as given, to a loaded plugin and
    /// answer its reply (`vd plugins:call`).
    PluginsCall {
        /// The plugin's name.
        name: String,
        /// Which call.
        call: PluginCallName,
        /// The request, as the plugin gets it.
        request: serde_json::Value,
    },
    /// The cluster's nodes, alive or lost (`vd get nodes`).
    Nodes,
    /// Declares a lost node's host gone (`vd node remove`): its
    /// statefulset ordinals, which wait for a lost node, move to the
    /// others. Refused while the node is alive.
    NodeRemove {
        /// The node's name.
        name: String,
    },
    /// Set variables of a config bucket; the workloads that take it roll.
    ConfigSet {
        /// The bucket, `scope/name`.
        bucket: BucketName,
        /// The variables and their values.
        values: BTreeMap<String, String>,
        /// Keep them as secrets: never printed unless asked.
        #[serde(default)]
        secret: bool,
        /// `--no-restart`: the workloads that take the bucket keep their
        /// replicas as they run, until their next `vd restart` or an
        /// apply that changes them.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_restart: bool,
    },
    /// Remove variables of a config bucket; the workloads that take it
    /// roll.
    ConfigUnset {
        /// The bucket.
        bucket: BucketName,
        /// The variables.
        keys: Vec<String>,
        /// `--no-restart`, as for [`Request::ConfigSet`].
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_restart: bool,
    },
    /// One variable of a bucket; a secret's value only with `reveal`.
    ConfigGet {
        /// The bucket.
        bucket: BucketName,
        /// The variable.
        key: String,
        /// Print a secret's value.
        #[serde(default)]
        reveal: bool,
    },
    /// A bucket's variables, secrets hidden; without a bucket, the name of
    /// every bucket.
    ConfigList {
        /// The bucket, or every bucket's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bucket: Option<BucketName>,
        /// Only the variables whose names contain this, in any case
        /// (voodu's `vd config REF get PATTERN`); one must.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        matching: Option<String>,
        /// Show secrets' values too.
        #[serde(default)]
        reveal: bool,
    },
    /// Seal every secret anew under the controller's first secrets key
    /// (`vd config rotate-key`); no value changes, no workload rolls.
    ConfigRotateKey,
}

/// Which workloads a listing keeps: any part left out matches every one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadFilter {
    /// Only this kind's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<voodu_plugin_abi::messages::WorkloadKind>,
    /// Only this scope's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Only workloads of this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl WorkloadFilter {
    /// Whether it keeps every workload.
    pub fn is_empty(&self) -> bool {
        self == &WorkloadFilter::default()
    }

    /// Whether it keeps `workload`.
    pub fn keeps(&self, workload: &WorkloadId) -> bool {
        self.kind.is_none_or(|kind| kind == workload.kind)
            && self
                .scope
                .as_ref()
                .is_none_or(|scope| *scope == workload.scope)
            && self.name.as_ref().is_none_or(|name| *name == workload.name)
    }
}

/// One line of the controller's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Frame {
    /// How far an apply has got.
    Progress(ApplyProgress),
    /// One event, for `vd events`.
    Notice(Notice),
    /// A replica appeared, changed or went away, for `vd get pods -w`.
    Pod(PodChange),
    /// One line of a replica's log, for `vd logs`.
    Log(LogLine),
    /// What a command run by `vd exec` wrote.
    Output(ExecOutput),
    /// The request succeeded.
    Done(Box<Response>),
    /// The request failed.
    Failed(Failure),
}

/// A successful answer.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// What an apply did.
    Applied(ApplyReport),
    /// One workload.
    Described(Box<Description>),
    /// Stored workloads.
    Workloads {
        /// One row per workload.
        workloads: Vec<WorkloadSummary>,
    },
    /// Every replica.
    Pods {
        /// The replicas, by workload.
        replicas: Vec<Replica>,
        /// Nodes whose replicas are missing here: they did not answer, or
        /// are lost.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unanswered: Vec<Unanswered>,
    },
    /// What a wait saw.
    Waited(WaitReport),
    /// Recent events.
    Events {
        /// Oldest first.
        events: Vec<Notice>,
    },
    /// What a delete did.
    Deleted(DeleteReport),
    /// A plugin was installed.
    Installed {
        /// The plugin now loaded.
        plugin: PluginRow,
        /// The version it replaced, if any.
        replaced_version: Option<String>,
        /// Workloads whose stored blocks the new version normalised
        /// differently, each stored as a new revision (`KIND/SCOPE/NAME`).
        #[serde(default)]
        revalidated: Vec<String>,
        /// In a cluster: the statement of the record stored for every
        /// node, for an operator's key to sign (`--signing-key`, or `vd
        /// plugins:sign` later); the other nodes load it once signed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        statement: Option<String>,
    },
    /// The statement of a cluster plugin's record, to sign.
    PluginStatement {
        /// The plugin.
        name: String,
        /// The statement's text, as it is signed.
        statement: String,
    },
    /// A cluster plugin's record was signed.
    PluginSigned {
        /// The plugin.
        name: String,
        /// The id of the key that signed it.
        key_id: String,
        /// What was signed is its removal.
        #[serde(default)]
        removed: bool,
    },
    /// What an apply would do (`--dry-run`).
    DryRun(DryRunReport),
    /// The controller's version.
    Version(VersionInfo),
    /// The upgrade is done: the new worker serves.
    Upgraded(WorkerInfo),
    /// What each replica uses (`vd stats`).
    Stats {
        /// The replicas, by workload.
        replicas: Vec<ReplicaStats>,
        /// Nodes whose replicas are missing here: they did not answer, or
        /// are lost.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unanswered: Vec<Unanswered>,
    },
    /// A block type's options (`vd explain`).
    Explained {
        /// The plugin that owns the block type.
        plugin: String,
        /// Its version.
        version: String,
        /// Its JSON Schema of the block's options; `None` when it describes
        /// none.
        schema: Option<serde_json::Value>,
        /// Its JSON Schema of its plugin-wide settings (ABI 1.3); absent
        /// when it takes none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settings_schema: Option<serde_json::Value>,
        /// The settings it was given; absent when none were.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        settings: Option<serde_json::Value>,
    },
    /// A plugin's settings (`vd plugins:settings`), after a change when
    /// one was asked.
    PluginSettings {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
        /// Its settings now (`{}` for none).
        settings: serde_json::Value,
        /// Those it had, when they were changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<serde_json::Value>,
        /// Its JSON Schema of its settings; absent when it takes none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<serde_json::Value>,
    },
    /// A plugin's OK reply to `vd plugins:call`.
    PluginReply {
        /// The plugin.
        plugin: String,
        /// The call.
        call: PluginCallName,
        /// Its reply: JSON, `null` when empty, or a string of what was not
        /// JSON.
        reply: serde_json::Value,
        /// How long the call took, in milliseconds.
        elapsed_ms: u64,
    },
    /// A workload's revisions, oldest first.
    History {
        /// `deployment/prod/esl`.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// Its current revision.
        current: i64,
        /// Every stored revision.
        revisions: Vec<Revision>,
    },
    /// A node's answer to [`peer::PeerRequest::BuildContext`]: the
    /// context it keeps, made ready to build.
    BuildContext {
        /// The tar, base64 in JSON.
        #[serde_as(as = "serde_with::base64::Base64")]
        archive: Vec<u8>,
    },
    /// A `vd exec` command ended.
    Exited {
        /// The replica it ran in.
        replica_id: String,
        /// Its exit code.
        exit_code: i64,
    },
    /// `vd stop` stopped and froze these replicas.
    Stopped {
        /// The workload.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// The replicas stopped, by id.
        replicas: Vec<String>,
    },
    /// `vd start` thawed these replicas; each is created anew.
    Started {
        /// The workload.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// The replicas thawed, by id.
        replicas: Vec<String>,
    },
    /// A `vd run` ended.
    RunEnded {
        /// The job it ran.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// The run's id.
        run_id: String,
        /// Its container, kept for `vd logs` within the history limits.
        container: String,
        /// Its exit code; absent when it was killed at its timeout.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i64>,
        /// How it ended, in words: `exited with code 3`, `ran past its
        /// timeout of 10s and was killed`.
        ending: String,
    },
    /// Every replica's log was sent (without `follow`).
    LogsEnded {
        /// How many lines.
        lines: usize,
        /// Nodes whose replicas are missing here: they did not answer, or
        /// are lost.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unanswered: Vec<Unanswered>,
    },
    /// The plugins.
    Plugins {
        /// Loaded plugins, by name.
        plugins: Vec<PluginRow>,
        /// Installed plugins that did not load at start.
        failures: Vec<LoadFailure>,
    },
    /// A plugin was given a fresh instance.
    Reloaded {
        /// The plugin now loaded.
        plugin: PluginRow,
        /// Whether it had been quarantined after a crash.
        #[serde(default)]
        was_quarantined: bool,
        /// How many earlier instances of it this controller has left behind
        /// (their threads and libraries stay until the controller exits).
        #[serde(default)]
        instances_left_behind: u32,
    },
    /// A plugin was removed.
    Removed {
        /// The plugin's name.
        name: String,
        /// In a cluster: the statement of its removal, for an operator's
        /// key to sign; nodes that trust operators' keys unload it once
        /// signed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        statement: Option<String>,
    },
    /// The cluster's nodes, by name.
    Nodes {
        /// Every node the cluster has known.
        nodes: Vec<NodeRow>,
    },
    /// A node was declared gone: what it held moves.
    NodeRemoved {
        /// The node.
        name: String,
        /// The statefulset ordinals that waited on it and now move,
        /// `statefulset/db/pg 0`.
        ordinals: Vec<String>,
        /// How many deployment replicas were still placed on it.
        deployment_replicas: u32,
    },
    /// Orphans removed (or, in a dry run, that would be).
    Pruned {
        /// The orphans, by workload.
        replicas: Vec<Replica>,
        /// Nothing was removed.
        dry_run: bool,
    },
    /// The store was copied.
    BackedUp {
        /// The copy.
        path: PathBuf,
        /// Its size in bytes.
        bytes: u64,
        /// The store's identity, which the copy keeps.
        store_id: String,
    },
    /// A config bucket was changed.
    ConfigChanged(ConfigChange),
    /// A config bucket's variables, or every bucket's name.
    Config(ConfigListing),
    /// Secrets were sealed anew (`vd config rotate-key`).
    SecretsResealed {
        /// How many were rewritten.
        resealed: usize,
        /// The id of the key they are sealed under now.
        key: String,
        /// The ids of the other keys the controller has, which now seal
        /// nothing and may go at its next start.
        retired: Vec<String>,
    },
    /// One variable of a config bucket (`vd config get`).
    ConfigValue {
        /// The bucket.
        bucket: BucketName,
        /// The variable; its value is `None` for a secret not revealed.
        variable: ConfigVariable,
    },
}

impl Response {
    /// The nodes whose share is missing from this answer: an answer that
    /// names any is incomplete.
    pub fn unanswered(&self) -> &[Unanswered] {
        match self {
            Response::Pods { unanswered, .. }
            | Response::Stats { unanswered, .. }
            | Response::LogsEnded { unanswered, .. } => unanswered,
            Response::Described(description) => &description.unanswered,
            _ => &[],
        }
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// One line saying what failed and how to fix it.
    pub message: String,
    /// Every problem, for an apply that was refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
}

impl Failure {
    /// A failure with a message only.
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            diagnostics: Vec::new(),
        }
    }
}

/// `vd describe`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Description {
    /// The workload as stored: core spec and normalised blocks in order.
    #[serde(flatten)]
    pub workload: StoredWorkload,
    /// Its containers, running or not (empty without Docker), on every
    /// node of a cluster.
    pub replicas: Vec<Replica>,
    /// Nodes whose replicas are missing from `replicas`: they did not
    /// answer, or are lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unanswered: Vec<Unanswered>,
    /// In a cluster, what of it runs nowhere now and why, with the command
    /// that moves it: statefulset ordinals waiting on a lost node, replicas
    /// no node may take.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
    /// The last endpoint set published to each block, with its generation.
    pub publications: Vec<Publication>,
    /// Its recent events, oldest first.
    pub events: Vec<Event>,
    /// Where its reconcile stands (absent without Docker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkloadStatus>,
    /// Its core blocks that this controller stores but does not act on,
    /// each as a one-line warning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_acted_on: Vec<String>,
    /// The env its replicas take, asked for by `show_env`: the manifest's
    /// `env` with its config buckets laid over it as they are now, by
    /// name; a secret's value never. (Replicas a `--no-restart` change
    /// keeps run the env they had.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVariable>>,
}

/// One variable of the env a workload's replicas run with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVariable {
    /// Its name.
    pub key: String,
    /// Its value; `None` for a bucket's secret. A manifest value that a
    /// secret reached through `${NAME}` is shown redacted
    /// (`<secret NAME from BUCKET>`).
    pub value: Option<String>,
    /// The config bucket it comes from; `None`: the manifest's `env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<BucketName>,
}

/// How a replica changed, in `vd get pods -w`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodChange {
    /// `added`, `modified` or `removed`.
    pub change: String,
    /// The replica as last seen.
    pub replica: Replica,
}

/// One workload's end of a wait.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitedWorkload {
    /// `deployment/prod/esl`.
    #[serde_as(as = "serde_with::DisplayFromStr")]
    pub workload: WorkloadId,
    /// Converged, gone, failed or crash-looping.
    pub phase: Phase,
}

/// What a wait saw: every workload's end, and the warnings and errors on
/// the way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitReport {
    /// One per workload waited for.
    pub workloads: Vec<WaitedWorkload>,
    /// Drains that ran out of budget, publishes and forgets that failed.
    pub warnings: Vec<Diagnostic>,
    /// Workloads that failed to converge or are crash-looping.
    pub errors: Vec<Diagnostic>,
}

/// One row of `vd get`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSummary {
    /// Which workload.
    pub id: WorkloadId,
    /// Its current revision.
    pub revision: i64,
    /// Its image, if it has one.
    pub image: Option<String>,
    /// Its desired replica count.
    pub replicas: u64,
    /// Its plugin blocks, named as messages name them.
    pub blocks: Vec<String>,
    /// When its current revision was applied.
    pub updated_at: String,
}

impl From<&StoredWorkload> for WorkloadSummary {
    fn from(workload: &StoredWorkload) -> Self {
        WorkloadSummary {
            id: workload.id.clone(),
            revision: workload.revision,
            image: workload.core_spec.image.clone(),
            replicas: u64::from(workload.core_spec.replicas),
            blocks: workload
                .blocks
                .iter()
                .map(|block| block.display_name())
                .collect(),
            updated_at: workload.updated_at.clone(),
        }
    }
}

/// One row of `vd stats`: a replica and what it uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaStats {
    /// Its workload.
    pub workload: WorkloadId,
    /// Its replica id.
    pub replica_id: String,
    /// The node it runs on, in a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Docker's state: `running`, `exited`, ...
    pub state: String,
    /// How often the controller restarted it since the controller started.
    pub restarts: u32,
    /// What it uses now; `None` when it is not running (or the engine did
    /// not answer for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// What a running replica uses, as the engine's stats API reports it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// CPU in percent of one core (200 is two cores busy), over the
    /// engine's last second.
    pub cpu_percent: f64,
    /// Memory in use, less reclaimable page cache, as `docker stats` counts.
    pub memory_bytes: u64,
    /// Its memory limit; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// Bytes received over its networks since it started.
    pub network_rx_bytes: u64,
    /// Bytes sent over its networks since it started.
    pub network_tx_bytes: u64,
}

/// One row of `vd plugins:list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginRow {
    /// The plugin's name, which is the block type it owns.
    pub name: String,
    /// Its own version.
    pub version: String,
    /// The ABI it was built against, `major.minor`.
    pub abi: String,
    /// `Rust` or `C`.
    pub kind: String,
    /// The installed file.
    pub path: PathBuf,
    /// `ready`, `failing in <call>` (it answers, but its last call failed),
    /// `wedged in <call>` or `shut down`.
    pub health: String,
    /// The last call's error, while the plugin is failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// The last call that failed since it was loaded, also when later
    /// calls succeeded: `publish: plugin x failed in publish: ...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Log lines the per-plugin rate limit dropped since it was loaded.
    #[serde(default)]
    pub log_lines_dropped: u64,
    /// Its calls since it was loaded, by call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallFigures>,
    /// The plugin-wide settings it was given; absent when none were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<serde_json::Value>,
    /// The process id of its own child process, when it runs out of
    /// process; absent when it runs in the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_pid: Option<u32>,
    /// Whether it runs out of process.
    #[serde(default)]
    pub out_of_process: bool,
    /// How many times its child process was started again after it died.
    #[serde(default)]
    pub child_restarts: u32,
}

/// A call the host makes into a plugin, as its figures name it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::Display, strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum PluginCallKind {
    /// Instance creation at load.
    Init,
    /// Block validation at apply.
    Validate,
    /// Endpoint publication.
    Publish,
    /// Draining a replica.
    Drain,
    /// Forgetting a block.
    Forget,
    /// Describing the block's options.
    Describe,
    /// Describing the plugin-wide settings.
    #[serde(rename = "describe_settings")]
    #[strum(serialize = "describe_settings")]
    DescribeSettings,
    /// Taking the plugin-wide settings.
    Configure,
}

/// How one call of one plugin went since the plugin was loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallFigures {
    /// The call.
    pub call: PluginCallKind,
    /// How many were made.
    pub calls: u64,
    /// How many the plugin refused (the operator's input).
    pub refused: u64,
    /// How many failed: an error, a timeout or a panic.
    pub errors: u64,
    /// The 99th percentile duration of the last 1,000, in milliseconds.
    pub p99_ms: f64,
}

/// One row of `vd get nodes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRow {
    /// Its name (`--node`).
    pub name: String,
    /// Whether it holds its lease: alive, or lost.
    pub alive: bool,
    /// Whether it is the node that answered.
    #[serde(default)]
    pub this_node: bool,
    /// Whether it leads the cluster: it places the replicas.
    #[serde(default)]
    pub leader: bool,
    /// When it joined, RFC 3339.
    pub started_at: String,
    /// When it last renewed its record, RFC 3339.
    pub last_seen: String,
    /// The plugins it has loaded.
    pub plugins: Vec<NodePluginRow>,
    /// How many replicas it runs; 0 for a lost node, whose last report
    /// is stale.
    pub replicas: usize,
    /// A lost node's statefulset ordinals, which wait for it (or for `vd
    /// node remove NAME`): `statefulset/db/pg 0`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_ordinals: Vec<String>,
    /// The cluster plugins it refused to load, each with why (a record no
    /// trusted key signed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_plugins: Vec<RefusedPluginRow>,
}

/// A cluster plugin a node refused to load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedPluginRow {
    /// Its name, as its record says.
    pub name: String,
    /// Its version, as its record says.
    pub version: String,
    /// Why.
    pub reason: String,
}

/// A plugin one node has loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePluginRow {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The ABI it was built against, `major.minor`.
    pub abi: String,
}

/// A call `vd plugins:call` can send to a plugin.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::EnumIter,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum PluginCallName {
    /// `validate`.
    Validate,
    /// `publish`.
    Publish,
    /// `drain`.
    Drain,
    /// `forget`.
    Forget,
}

/// What `vd version` shows of one program: the CLI, or the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    /// voodu's version.
    pub version: String,
    /// The plugin ABI it hosts, `MAJOR.MINOR`: plugins of that major
    /// version and any minor load.
    pub plugin_abi: String,
    /// How it was built: the profile and the target.
    pub build: String,
    /// The controller's worker process, when this is a controller's
    /// answer: which process serves, since when, from which binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerInfo>,
}

/// One worker process of `vd controller`: what `vd version` and `vd
/// controller upgrade` show of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Its process id.
    pub pid: u32,
    /// The supervisor's process id (the one to send SIGHUP or SIGTERM).
    pub supervisor_pid: u32,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_at_unix_ms: u64,
    /// voodu's version, as the worker's binary has it.
    pub version: String,
    /// The binary it runs.
    pub binary: String,
}

impl VersionInfo {
    /// This program's.
    pub fn current() -> Self {
        VersionInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            plugin_abi: format!(
                "{}.{}",
                voodu_plugin_abi::ffi::VOODU_ABI_VERSION_MAJOR,
                voodu_plugin_abi::ffi::VOODU_ABI_VERSION_MINOR
            ),
            build: format!(
                "{} build for {}-{}",
                if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "release"
                },
                std::env::consts::ARCH,
                std::env::consts::OS
            ),
            worker: None,
        }
    }
}

/// One workload's build context: its `build` block's `context` directory
/// as a tar (what `.dockerignore` leaves out is not in it), read by `vd
/// apply` where it runs.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildContext {
    /// `deployment/prod/api`.
    #[serde_as(as = "serde_with::DisplayFromStr")]
    pub workload: WorkloadId,
    /// The tar, base64 in JSON.
    #[serde_as(as = "serde_with::base64::Base64")]
    pub archive: Vec<u8>,
}

/// An interactive `vd exec`'s terminal, if it asks for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecSession {
    /// The terminal's size (`-t`); absent: no terminal, standard input
    /// only (`-i`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<TerminalSize>,
}

/// A terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// One line a client of an interactive `vd exec` sends after its request
/// line: `{"stdin": "<base64>"}`, `{"resize": {"cols": 80, "rows": 24}}`,
/// or `"eof"` (standard input ended).
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecInput {
    /// Bytes for the command's standard input, base64 in JSON.
    Stdin(#[serde_as(as = "serde_with::base64::Base64")] Vec<u8>),
    /// The terminal changed size.
    Resize(TerminalSize),
    /// Standard input ended.
    Eof,
}

/// What a command run by `vd exec` wrote, a piece at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// Whether it went to standard error (else standard output).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stderr: bool,
    /// What was written (as UTF-8, a byte that is not replaced).
    pub text: String,
}

/// One line of a replica's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// The replica that wrote it.
    pub replica_id: String,
    /// The line, without its newline.
    pub line: String,
    /// The node the replica runs on, in a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}
