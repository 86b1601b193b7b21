//! What one node of a cluster asks another for: that node's own share of a
//! view (its replicas, their usage, their logs, its end of a rollout), so
//! that every node answers `vd get pods`, `vd stats`, `vd logs`, `vd
//! describe` and `vd rollout status` for the whole cluster.
//!
//! A node serves these on its peer listener (its `--advertise` address and
//! `--peer-port`): one [`PeerRequestLine`] per TCP connection, answered with
//! [`crate::Frame`] lines exactly as the API socket answers, ending in one
//! `done` or `failed` frame. Every peer request but one only reads: none
//! changes anything on the node that answers it. The one is
//! [`PeerRequest::Exec`] (`vd exec` into a replica of another node), which
//! runs a command: a node answers it only on a channel of mutual TLS, and
//! an interactive one's input follows its request line as
//! [`crate::ExecInput`] lines, as on the API socket. A build's context
//! ([`PeerRequest::BuildContext`]) is source code: it too travels only
//! over mutual TLS.

use serde::{Deserialize, Serialize};
use voodu_model::WorkloadId;

use crate::PROTOCOL_VERSION;

/// The port a node answers the others on unless `--peer-port` says
/// otherwise.
pub const DEFAULT_PEER_PORT: u16 = 7947;

/// The largest peer request line a node reads, newline included.
pub const MAX_PEER_REQUEST_BYTES: usize = 1024 * 1024;

/// One peer request as it travels: the protocol and the asking node beside
/// the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerRequestLine {
    /// The asking node's [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The asking node's name, for the answering node's log.
    pub from: String,
    /// The node asked: a node that is not it refuses, so an answer never
    /// comes from the wrong node.
    pub to: String,
    /// What it asks.
    #[serde(flatten)]
    pub request: PeerRequest,
}

impl PeerRequestLine {
    /// A request line of this crate's protocol, from node `from` to node
    /// `to`.
    pub fn new(from: impl Into<String>, to: impl Into<String>, request: PeerRequest) -> Self {
        PeerRequestLine {
            protocol: PROTOCOL_VERSION,
            from: from.into(),
            to: to.into(),
            request,
        }
    }
}

/// What a node asks another of its own share: each is the local half of an
/// API verb, answered as that verb answers but for the answering node's
/// replicas alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "peer_verb", rename_all = "snake_case")]
pub enum PeerRequest {
    /// The node's replicas (`vd get pods`, `vd describe`): answered with
    /// [`crate::Response::Pods`].
    Pods {
        /// Only this workload's, when given.
        #[serde(default)]
        workload: Option<WorkloadId>,
    },
    /// The node's replicas with their usage (`vd stats`): answered with
    /// [`crate::Response::Stats`].
    Stats {
        /// Only this workload's, when given.
        #[serde(default)]
        workload: Option<WorkloadId>,
    },
    /// The node's replicas' logs (`vd logs`): `log` frames, then
    /// [`crate::Response::LogsEnded`] (without `follow`).
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
        /// Only this replica's log (its id).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<String>,
    },
    /// The node's end of a rollout (`vd apply`, `vd rollout status`): a
    /// fresh pass of each workload on the node, its steps as `progress`
    /// frames, then [`crate::Response::Waited`].
    Wait {
        /// The workloads.
        workloads: Vec<WorkloadId>,
        /// Give up after this long.
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// The build context the node keeps under `digest` (it took the apply
    /// that built it), made ready to build: answered with
    /// [`crate::Response::BuildContext`]. Answered only over mutual TLS
    /// (`--peer-cert`): a context is the workload's source.
    BuildContext {
        /// Which context.
        digest: voodu_model::build::ContextDigest,
    },
    /// `vd exec` into one running replica of the node: `output` frames as
    /// the command writes, then [`crate::Response::Exited`]. Answered only
    /// over mutual TLS (`--peer-cert`): it changes what runs.
    Exec {
        /// Which workload.
        workload: WorkloadId,
        /// The replica (its id, or a statefulset's ordinal), which runs on
        /// the node asked.
        replica: String,
        /// The command and its arguments.
        command: Vec<String>,
        /// Variables set for the command beside the container's.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
        /// The directory it runs in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workdir: Option<String>,
        /// The user it runs as.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        /// An interactive exec's terminal, if any; its input follows the
        /// request line.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<crate::ExecSession>,
    },
}

/// A node whose share of a view is missing from an answer: it did not
/// answer, or it is lost. An answer that names one is incomplete, and `vd`
/// exits non-zero on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unanswered {
    /// The node; empty when the other nodes could not be known at all
    /// (the cluster store did not answer), so every one is left out.
    pub node: String,
    /// Whether the cluster counts it lost (its lease lapsed), rather than
    /// alive but silent.
    #[serde(default)]
    pub lost: bool,
    /// Why its share is missing, and what to do.
    pub reason: String,
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.node.is_empty() {
            write!(formatter, "the other nodes are left out: {}", self.reason)
        } else {
            write!(formatter, "node {} is left out: {}", self.node, self.reason)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_request_line_reads_back_as_written() {
        let line = PeerRequestLine::new(
            "a",
            "b",
            PeerRequest::Logs {
                workload: "deployment/prod/web".parse().expect("an id"),
                follow: true,
                since_unix: None,
                tail: Some(5),
                replica: None,
            },
        );
        let text = serde_json::to_string(&line).expect("serialises");
        assert!(text.contains(r#""peer_verb":"logs""#), "{text}");
        let back: PeerRequestLine = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, line);
    }
}
