//! What the API shows of the controller's state: its own types, so that a
//! field renamed inside the store, the runtime or the reconciler never
//! changes the protocol. The controller fills them in (`voodu-controller`'s
//! `wire` module).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use voodu_model::{CoreSpec, EventLevel, NormalisedBlock, WorkloadId};
use voodu_plugin_abi::messages::Endpoint;

/// One of the controller's containers, as `vd get pods` shows it.
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
    /// The node it runs on, in a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The hash of the container-shaping part of the spec it was created
    /// from (image, command, env, ports, ..., probes): not the workload's
    /// `spec_hash`, which covers its whole spec and blocks.
    #[serde(rename = "container_hash", alias = "spec_hash")]
    pub spec_hash: String,
    /// Docker's state: `running`, `exited`, `created`, ...
    pub state: String,
    /// Its address on `voodu0`, when it has one.
    pub ip: Option<String>,
    /// When it was created, in Unix seconds.
    pub created: i64,
    /// The controller that owns it, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The identity of the store it was made for, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<String>,
    /// Docker's health status when the image has a HEALTHCHECK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Whether it is ready for traffic, when a probe or HEALTHCHECK
    /// decides it; `None`: running is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// While it is not ready: its probe's last failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_failure: Option<String>,
    /// How often the controller restarted it since the controller started.
    #[serde(default)]
    pub restarts: u32,
}

impl Replica {
    /// Whether the container is running.
    pub fn is_running(&self) -> bool {
        self.state == "running"
    }
}

/// One thing that happened to a workload: a stored event or a transient
/// step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// The workload it concerns.
    pub workload: WorkloadId,
    /// The stored event, or `None` for a transient step that is not stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<i64>,
    /// When, RFC 3339 (stored events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// How serious it is.
    pub level: EventLevel,
    /// Why: `step` for a transient step.
    pub reason: voodu_model::EventReason,
    /// What happened, one line.
    pub message: String,
    /// For a container notice: the replica and Docker's action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_action: Option<(String, String)>,
    /// In a cluster, the node that recorded it; absent on one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// A recorded event of one workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Rises with every event recorded, across workloads; named
    /// `event_id` in every view, as a notice names it.
    #[serde(rename = "event_id", alias = "id")]
    pub id: i64,
    /// When it was recorded, RFC 3339 in UTC.
    pub at: String,
    /// How serious it is.
    pub level: EventLevel,
    /// Why it was recorded.
    pub reason: voodu_model::EventReason,
    /// What happened.
    pub message: String,
    /// In a cluster, the node that recorded it; absent on one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// The last endpoint set published to one block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Publication {
    /// The block's type.
    #[serde(rename = "type")]
    pub block_type: String,
    /// The block's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// The generation it was published with.
    pub generation: u64,
    /// The endpoints, as published.
    pub endpoints: Vec<Endpoint>,
    /// When, RFC 3339.
    pub at: String,
    /// How long this controller's last publish to the block took, from the
    /// change it carried being seen (a Docker event, a readiness flip, a
    /// pass) to the plugin returning, in milliseconds; unknown before this
    /// controller published to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// The block's last drain by this controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drain: Option<LastDrain>,
}

/// How a block's plugin last drained a replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastDrain {
    /// The replica drained.
    pub replica_id: String,
    /// `drained`, `budget_exhausted` or `failed`.
    pub outcome: DrainOutcomeKind,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
    /// When it ended, RFC 3339.
    pub at: String,
}

/// How one plugin's drain of one replica ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum DrainOutcomeKind {
    /// The plugin said drained within the budget.
    Drained,
    /// The budget ran out first; the replica was removed anyway.
    BudgetExhausted,
    /// The plugin failed the call, or is not installed.
    Failed,
}

/// One stored revision of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revision {
    /// Its number, from 1.
    pub revision: i64,
    /// The hash of its core spec and blocks.
    pub spec_hash: String,
    /// When it was applied, RFC 3339.
    pub applied_at: String,
    /// Its core spec.
    pub core_spec: CoreSpec,
    /// Its normalised plugin blocks, in source order.
    pub blocks: Vec<NormalisedBlock>,
    /// Whether it applied the workload again after a delete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recreated: bool,
}

/// A stored workload, as of its current revision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredWorkload {
    /// Which workload.
    pub id: WorkloadId,
    /// Its current revision, from 1.
    pub revision: i64,
    /// The SHA-256 of its core spec and blocks.
    pub spec_hash: String,
    /// Its core spec.
    pub core_spec: CoreSpec,
    /// Its normalised plugin blocks, in source order.
    pub blocks: Vec<NormalisedBlock>,
    /// Where it was last declared.
    pub source: Option<String>,
    /// When it was first applied, RFC 3339.
    pub created_at: String,
    /// When its current revision was applied, RFC 3339.
    pub updated_at: String,
}

/// Where a workload's reconcile stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Phase {
    /// Waiting for its first pass.
    Pending,
    /// A pass is taking steps.
    Progressing,
    /// The containers match the stored revision.
    Converged,
    /// The last pass failed; it is retried with back-off.
    Failed,
    /// A replica keeps dying; it is restarted with back-off. (Earlier
    /// versions wrote `crash_looping`, still read.)
    #[serde(alias = "crash_looping")]
    CrashLooping,
    /// Deleted, and its replicas and blocks are gone.
    Gone,
}

impl Phase {
    /// How messages and JSON name the phase: `crash-looping`, one spelling.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A replica that has died, with its exit code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashRecord {
    /// The replica.
    pub replica_id: String,
    /// Deaths in a row, without a stable run between them.
    pub deaths: u32,
    /// The last exit code Docker reported.
    pub last_exit_code: Option<i64>,
    /// Whether the kernel's OOM killer ended it last.
    pub oom_killed: bool,
    /// Whether it dies often enough to be crash-looping.
    pub crash_looping: bool,
}

/// One workload's reconcile status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadStatus {
    /// Where it stands.
    pub phase: Phase,
    /// The stored revision the last pass worked towards (0: deleted).
    pub revision: i64,
    /// The step in progress, for a progressing pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// How long the step has been running, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms: Option<u64>,
    /// Why the last pass failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Replicas that have died, with their exit codes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crashes: Vec<CrashRecord>,
}

/// A plugin that was installed but did not load at start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadFailure {
    /// The plugin's directory.
    pub path: PathBuf,
    /// Why it did not load.
    pub error: String,
}

#[cfg(test)]
mod phase_tests {
    use super::Phase;

    #[test]
    fn a_phase_is_spelled_one_way_in_json_and_in_messages() {
        let json = serde_json::to_value(Phase::CrashLooping).expect("serialises");
        assert_eq!(json, "crash-looping");
        assert_eq!(Phase::CrashLooping.as_str(), "crash-looping");
        // What earlier controllers wrote still reads.
        let old: Phase = serde_json::from_value(serde_json::json!("crash_looping")).expect("reads");
        assert_eq!(old, Phase::CrashLooping);
    }
}
