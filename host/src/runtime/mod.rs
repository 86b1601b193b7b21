//! The Docker runtime: creates, lists, inspects and removes voodu's labelled
//! containers through bollard, and reports their events. It knows nothing of
//! plugins; the reconciler is the only caller.
//!
//! - [`naming`] holds voodu's container labels, names and aliases.
//! - [`docker`] talks to the engine.

pub mod docker;
pub mod naming;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::manifest::ports::PortMapping;
use crate::manifest::WorkloadId;

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
    /// Docker's restart policy name.
    pub restart: String,
    /// The controller that owns it (see [`naming::OWNER_LABEL`]).
    pub owner: String,
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
    /// When it was created, in Unix seconds.
    pub created: i64,
    /// The controller that owns it, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl Replica {
    /// Whether the container is running, the only state that is published.
    pub fn is_running(&self) -> bool {
        self.state == "running"
    }
}

/// A change to one of voodu's containers, from Docker's event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeEvent {
    /// The workload the container belongs to.
    pub workload: WorkloadId,
    /// The container's replica id.
    pub replica_id: String,
    /// Docker's action: `start`, `die`, `stop`, `destroy`, ...
    pub action: String,
    /// When Docker saw it, in nanoseconds since the Unix epoch.
    pub time_nanos: i64,
}
