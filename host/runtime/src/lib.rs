//! # voodu-runtime
//!
//! The Docker runtime: creates, lists, inspects and removes voodu's labelled
//! containers through bollard, and reports their events. It knows nothing of
//! plugins; the reconciler is the only caller.
//!
//! - [`ContainerRuntime`] is what the reconciler needs of an engine, so the
//!   control loop can be unit-tested against a fake one.
//! - [`naming`] holds voodu's container labels, names and aliases.
//! - [`docker`] implements it on the real engine through bollard.
//!
//! Every listing, removal and event of a runtime is this controller's own:
//! containers carry `voodu.owner` (a hash of the controller's root), and a
//! runtime never shows or touches another owner's containers.
//!
//! **May not depend on** any voodu crate but `voodu-model` and `voodu-plugin-abi`: it knows nothing of plugins (`tests/crate_rules.rs` checks this).

#![warn(missing_docs)]

pub mod docker;
pub use voodu_model::naming;

use std::collections::BTreeMap;

use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use voodu_model::container::{ContainerShape, InitStep};
use voodu_model::job::RunTrigger;
use voodu_model::ports::PortMapping;
use voodu_model::probes::Probes;
use voodu_model::resources::Resources;
use voodu_model::WorkloadId;

pub use docker::{DockerRuntime, RuntimeError};

/// Everything needed to create one replica's container.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSpec {
    /// The workload it belongs to.
    pub workload: WorkloadId,
    /// Its replica id: 4 hex characters, or the ordinal for statefulsets.
    pub replica_id: String,
    /// The hash of the container-relevant spec; replicas with another hash
    /// are stale.
    pub spec_hash: String,
    /// The image.
    pub image: String,
    /// The command, or empty for the image's own.
    pub command: Vec<String>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Port mappings.
    pub ports: Vec<PortMapping>,
    /// Volume mounts, `source:/target[:ro]`.
    pub volumes: Vec<String>,
    /// Networks to join beside `voodu0`.
    pub networks: Vec<String>,
    /// Memory, CPU and process limits.
    pub resources: Resources,
    /// The controller that owns it (see [`naming::OWNER_LABEL`]).
    pub owner: String,
    /// The identity of the store its workload is kept in (see
    /// [`naming::STORE_LABEL`]).
    pub store_id: String,
    /// The probes of the revision it is created for (see
    /// [`naming::PROBES_LABEL`]).
    pub probes: Probes,
    /// Everything else that shapes the container: ulimits, capabilities,
    /// network mode, extra hosts, log rotation, `docker_options` and a
    /// statefulset's volume claims.
    pub shape: ContainerShape,
}

/// How an init step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// It exited 0.
    Succeeded,
    /// It exited with another code, or ran past its timeout (`None`).
    Failed {
        /// Its exit code; `None` when it was killed at its timeout.
        exit_code: Option<i64>,
        /// The last lines it wrote.
        output: String,
        /// Its container, kept for `docker logs`.
        container: String,
    },
}

impl InitOutcome {
    /// How a failed step failed, for messages: `exited with code 3 (its
    /// last line: "...") — `docker logs NAME` shows why`; `None` when it
    /// succeeded. `timeout` is the step's, named when it ran past it.
    pub fn failure(&self, timeout: std::time::Duration) -> Option<String> {
        let InitOutcome::Failed {
            exit_code,
            output,
            container,
        } = self
        else {
            return None;
        };
        let how = match exit_code {
            Some(code) => format!("exited with code {code}"),
            None => format!(
                "ran past its timeout of {}",
                humantime::format_duration(timeout)
            ),
        };
        let said = output
            .lines()
            .last()
            .map(|line| format!(" (its last line: {line:?})"))
            .unwrap_or_default();
        Some(format!("{how}{said} — `docker logs {container}` shows why"))
    }
}

/// The container of an init or release step, which outlives its step only
/// when the step failed (kept for `docker logs`), or when its controller
/// stopped before it could remove it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepContainer {
    /// The container's id.
    pub container_id: String,
    /// `<scope>-<name>.<replica_id>.init-<step>`, or
    /// `<scope>-<name>.release.init-<step>` for a release command.
    pub container_name: String,
    /// The workload it ran for.
    pub workload: WorkloadId,
    /// The step's name.
    pub step: String,
    /// Docker's state: `exited` once the step ended, `running` while it runs.
    pub state: String,
    /// When it was created, in Unix seconds.
    pub created: i64,
    /// The identity of the store its workload was kept in, if it says.
    pub store_id: Option<String>,
}

impl StepContainer {
    /// Whether its step is over (exited, or dead): never one that is
    /// being created or runs now (another replica's step).
    pub fn is_finished(&self) -> bool {
        matches!(self.state.as_str(), "exited" | "dead")
    }

    /// The step container as a row of `vd get pods`: its replica id is
    /// what its name adds to the workload's (`a1f3.init-migrate`).
    pub fn as_listed(&self) -> Replica {
        let prefix = naming::container_name(&self.workload, "");
        Replica::of_one_shot(
            &self.container_id,
            &self.container_name,
            &self.workload,
            self.container_name
                .strip_prefix(&prefix)
                .unwrap_or(&self.container_name),
            &self.state,
            self.created,
            self.store_id.as_deref(),
        )
    }
}

/// One run of a job to start: what names it, what started it, and how
/// long it may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRunRequest {
    /// The run's id, which its container's name ends with
    /// (`prod-seed.run-<id>`).
    pub run_id: String,
    /// What started it.
    pub trigger: RunTrigger,
    /// Killed when it runs longer; `None`: no limit.
    pub timeout: Option<std::time::Duration>,
}

/// How a run of a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRunEnd {
    /// Its container, kept for `vd logs` within the history limits.
    pub container_name: String,
    /// Its exit code; `None` when it was killed at its timeout.
    pub exit_code: Option<i64>,
}

/// One of a job's runs, running or finished, as the engine lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRun {
    /// The container's id.
    pub container_id: String,
    /// `<scope>-<name>.run-<id>`.
    pub container_name: String,
    /// The job it ran for.
    pub workload: WorkloadId,
    /// The run's id.
    pub run_id: String,
    /// What started it, when its container says.
    pub trigger: Option<RunTrigger>,
    /// Docker's state: `running`, then `exited`.
    pub state: String,
    /// When it was created, in Unix seconds.
    pub created: i64,
    /// Its exit code, once it ended.
    pub exit_code: Option<i64>,
    /// The identity of the store its job was kept in, if it says.
    pub store_id: Option<String>,
}

impl JobRun {
    /// Whether it ended (exited, or dead).
    pub fn is_finished(&self) -> bool {
        matches!(self.state.as_str(), "exited" | "dead")
    }

    /// The run as a row of `vd get pods` and a source of `vd logs`: its
    /// replica id is `run-<id>`.
    pub fn as_listed(&self) -> Replica {
        Replica::of_one_shot(
            &self.container_id,
            &self.container_name,
            &self.workload,
            &format!("run-{}", self.run_id),
            &self.state,
            self.created,
            self.store_id.as_deref(),
        )
    }
}

/// A command to run in a replica (`vd exec`, an exec probe).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecCommand {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Variables set for it beside the container's, `KEY=VALUE`.
    pub env: Vec<String>,
    /// The directory it runs in; `None`: the container's.
    pub workdir: Option<String>,
    /// The user it runs as (`name`, `uid`, `uid:gid`); `None`: the
    /// container's.
    pub user: Option<String>,
}

impl ExecCommand {
    /// `argv`, with the container's env, directory and user.
    pub fn of(argv: &[String]) -> ExecCommand {
        ExecCommand {
            argv: argv.to_vec(),
            ..ExecCommand::default()
        }
    }
}

/// What the caller of an interactive `exec` sends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecInput {
    /// Bytes for the command's standard input.
    Stdin(Vec<u8>),
    /// The caller's terminal changed size.
    Resize {
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// Standard input ended.
    Eof,
}

/// An interactive `exec`: the command's standard input is attached, and
/// with `tty`, it runs in a terminal of that size (columns, rows).
#[derive(Debug)]
pub struct ExecSession {
    /// The terminal's size, when the command runs in one.
    pub tty: Option<(u16, u16)>,
    /// What the caller sends, as it comes.
    pub input: tokio::sync::mpsc::UnboundedReceiver<ExecInput>,
}

/// A piece of what a command run in a replica wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Whether it went to standard error (else standard output).
    pub stderr: bool,
    /// What was written.
    pub bytes: Vec<u8>,
}

/// One of voodu's containers as the engine reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// The container's id.
    pub container_id: String,
    /// `<scope>-<name>.<replica_id>`.
    pub container_name: String,
    /// The workload it belongs to.
    pub workload: WorkloadId,
    /// Its replica id.
    pub replica_id: String,
    /// The spec hash it was created from.
    pub spec_hash: String,
    /// Docker's state: `running`, `exited`, `created`, ...
    pub state: String,
    /// Its address on `voodu0`, when it has one.
    pub ip: Option<String>,
    /// Its TCP ports published on the host: container port to host port.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_ports: BTreeMap<u16, u16>,
    /// The host IP its ports are published on, unless they are published
    /// on every address (`0.0.0.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    /// When it was created, in Unix seconds.
    pub created: i64,
    /// The controller that owns it, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The identity of the store it was made for; `None` for a container
    /// made before voodu labelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<String>,
    /// The probes it was created with; `None` for a container made before
    /// voodu labelled them (it is probed with its workload's current ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<Probes>,
    /// Docker's health status when the image has a HEALTHCHECK: `starting`,
    /// `healthy` or `unhealthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Whether it is ready for traffic, when something decides it: its
    /// readiness probe, or its image's HEALTHCHECK. `None`: running is
    /// ready. Set by the reconciler, not by the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// While it is not ready: its probe's last failure
    /// (`readiness http_get :8084/ready: answered 503`). Set by the
    /// reconciler, not by the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_failure: Option<String>,
    /// How often the controller restarted it since the controller started.
    /// Set by the reconciler, not by the engine.
    #[serde(default)]
    pub restarts: u32,
}

impl Replica {
    /// A container that runs to its end (a step's, a job's run) as a row
    /// of the listings: no hash, address, ports or probes of a replica.
    fn of_one_shot(
        container_id: &str,
        container_name: &str,
        workload: &WorkloadId,
        replica_id: &str,
        state: &str,
        created: i64,
        store_id: Option<&str>,
    ) -> Replica {
        Replica {
            container_id: container_id.to_owned(),
            container_name: container_name.to_owned(),
            workload: workload.clone(),
            replica_id: replica_id.to_owned(),
            spec_hash: String::new(),
            state: state.to_owned(),
            ip: None,
            host_ports: BTreeMap::new(),
            host_ip: None,
            created,
            owner: None,
            store_id: store_id.map(str::to_owned),
            probes: None,
            health: None,
            ready: None,
            last_probe_failure: None,
            restarts: 0,
        }
    }

    /// Whether the container is running.
    pub fn is_running(&self) -> bool {
        self.state == "running"
    }

    /// Whether it serves: running, and ready when readiness is decided.
    /// Only serving replicas are published.
    pub fn is_serving(&self) -> bool {
        self.is_running() && self.ready != Some(false)
    }
}

/// Which part of a replica's log to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogRequest {
    /// Keep reading as new lines are written.
    pub follow: bool,
    /// Only lines written since this Unix time, in seconds.
    pub since_unix: Option<i64>,
    /// Only its last lines.
    pub tail: Option<u64>,
}

/// A change to one of voodu's containers, from Docker's event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeEvent {
    /// The workload the container belongs to.
    pub workload: WorkloadId,
    /// The container's replica id.
    pub replica_id: String,
    /// The container's id.
    pub container_id: String,
    /// Docker's action: `start`, `die`, `stop`, `destroy`, `oom`,
    /// `health_status`, ...
    pub action: String,
    /// The exit code a `die` event reports.
    pub exit_code: Option<i64>,
    /// When Docker saw it, in nanoseconds since the Unix epoch.
    pub time_nanos: i64,
}

impl RuntimeEvent {
    /// Whether the event says the container stopped running.
    pub fn is_death(&self) -> bool {
        matches!(
            self.action.as_str(),
            "die" | "destroy" | "oom" | "kill" | "stop"
        )
    }
}

/// What the reconciler needs of a container engine. [`DockerRuntime`] is
/// the real one; the reconciler's unit tests use a fake. Every method sees
/// only this controller's own containers (its `voodu.owner`).
#[async_trait::async_trait]
pub trait ContainerRuntime: Send + Sync + 'static {
    /// Creates the `voodu0` network if it is missing.
    async fn ensure_network(&self) -> Result<(), RuntimeError>;
    /// Removes `voodu0` when no voodu container (of any owner) is left;
    /// returns whether it was removed.
    async fn remove_network_if_unused(&self) -> Result<bool, RuntimeError>;
    /// This controller's containers, of one workload or all, running or
    /// not, oldest first.
    async fn list(&self, workload: Option<&WorkloadId>) -> Result<Vec<Replica>, RuntimeError>;
    /// Creates and starts one replica, and checks that it runs.
    async fn create(&self, spec: &ReplicaSpec) -> Result<Replica, RuntimeError>;
    /// Starts a stopped replica again.
    async fn start(&self, replica: &Replica) -> Result<Replica, RuntimeError>;
    /// Stops (within `stop_timeout_secs`) and removes a replica; one already
    /// gone is fine.
    async fn remove(&self, replica: &Replica, stop_timeout_secs: i32) -> Result<(), RuntimeError>;
    /// Stops a replica and keeps its container, as a crash would leave it
    /// (a liveness failure): the control loop restarts it.
    async fn stop(&self, replica: &Replica, stop_timeout_secs: i32) -> Result<(), RuntimeError>;
    /// Runs a command in a running replica and returns its exit code;
    /// what it writes goes to `output` as it comes, when one is given (and
    /// is read to its end and dropped otherwise). With a `session`, its
    /// standard input is what the session sends (in a terminal when it
    /// asks for one).
    async fn exec(
        &self,
        replica: &Replica,
        command: &ExecCommand,
        output: Option<&tokio::sync::mpsc::UnboundedSender<ExecOutput>>,
        session: Option<ExecSession>,
    ) -> Result<i64, RuntimeError>;
    /// Runs one init step for the replica `replica` is about to be
    /// created as, to its end or its timeout. A step that succeeds leaves
    /// nothing behind; one that fails keeps its stopped container, named
    /// in the outcome, for `docker logs` (a later run of the step replaces
    /// it; the reconciler removes the ones it no longer keeps).
    async fn run_init(
        &self,
        replica: &ReplicaSpec,
        step: &InitStep,
    ) -> Result<InitOutcome, RuntimeError>;
    /// Whether the engine has the image `tag`.
    async fn has_image(&self, tag: &str) -> Result<bool, RuntimeError>;
    /// Builds `archive` (a tar of the build context) with `build`'s
    /// Dockerfile and arguments as `tag`, each line the build writes given
    /// to `progress` as it comes; a failure carries the build's last
    /// lines.
    async fn build_image(
        &self,
        tag: &str,
        archive: Vec<u8>,
        build: &voodu_model::build::Build,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<(), RuntimeError>;
    /// The init and release step containers of this controller, of one
    /// workload or of all, oldest first.
    async fn step_containers(
        &self,
        workload: Option<&WorkloadId>,
    ) -> Result<Vec<StepContainer>, RuntimeError>;
    /// Removes a step container (killing it if its step still runs); one
    /// already gone is fine.
    async fn remove_step_container(&self, step: &StepContainer) -> Result<(), RuntimeError>;
    /// Runs one run of a job to its end or its timeout, from `spec` (the
    /// job's container, its `replica_id` unused), what it writes sent to
    /// `output` as it comes when one is given. Its container is kept.
    async fn run_job(
        &self,
        spec: &ReplicaSpec,
        run: &JobRunRequest,
        output: Option<&tokio::sync::mpsc::UnboundedSender<ExecOutput>>,
    ) -> Result<JobRunEnd, RuntimeError>;
    /// The runs of this controller's jobs, of one job or of all, running
    /// or finished, oldest first.
    async fn job_runs(&self, workload: Option<&WorkloadId>) -> Result<Vec<JobRun>, RuntimeError>;
    /// Removes a run's container (killing it if it still runs); one
    /// already gone is fine.
    async fn remove_job_run(&self, run: &JobRun) -> Result<(), RuntimeError>;
    /// A replica's log (stdout and stderr), one item per line.
    fn logs(
        &self,
        replica: &Replica,
        request: &LogRequest,
    ) -> BoxStream<'static, Result<String, RuntimeError>>;
    /// The events of this controller's containers, as they happen.
    fn events(&self) -> BoxStream<'static, Result<RuntimeEvent, RuntimeError>>;
    /// What a running replica uses now: CPU over the engine's last
    /// sampling interval (about a second), memory, and its network totals.
    async fn usage(&self, replica: &Replica) -> Result<ReplicaUsage, RuntimeError>;
}

/// What one replica uses, as the engine's stats API reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplicaUsage {
    /// CPU, in percent of one core (200 is two cores busy), over the
    /// engine's last sampling interval.
    pub cpu_percent: f64,
    /// Memory in use, less the page cache the kernel can reclaim, as
    /// `docker stats` counts it.
    pub memory_bytes: u64,
    /// The memory limit; `None` when the container has none.
    pub memory_limit_bytes: Option<u64>,
    /// Bytes received over every network, since the container started.
    pub network_rx_bytes: u64,
    /// Bytes sent over every network, since the container started.
    pub network_tx_bytes: u64,
}
