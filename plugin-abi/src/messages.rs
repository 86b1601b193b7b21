//! The JSON messages of every plugin call, shared by the host and the Rust SDK
//! so the two cannot drift apart. Shapes follow the design note: a block is
//! `{"type", "labels"?, "spec"}`, and `labels` is left out when empty.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The kind of workload a block sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// `deployment "scope" "name" {}`: interchangeable replicas.
    Deployment,
    /// `statefulset "scope" "name" {}`: ordinal replicas.
    Statefulset,
    /// `job "scope" "name" {}`: a one-shot container, run by `vd run`; it
    /// serves nothing, so its blocks are validated and forgotten but never
    /// published to.
    Job,
    /// `cronjob "scope" "name" {}`: a job run on its `schedule`.
    Cronjob,
}

impl WorkloadKind {
    /// The kind as voodu spells it in manifests and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployment",
            WorkloadKind::Statefulset => "statefulset",
            WorkloadKind::Job => "job",
            WorkloadKind::Cronjob => "cronjob",
        }
    }

    /// Whether its containers run to completion (a job or a cronjob)
    /// rather than serve as replicas.
    pub fn runs_to_completion(self) -> bool {
        matches!(self, WorkloadKind::Job | WorkloadKind::Cronjob)
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One plugin block as voodu carries it: its type, its labels and its body as
/// opaque JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    /// The block's type, which is also the name of the plugin that owns it.
    #[serde(rename = "type")]
    pub block_type: String,
    /// The block's labels, in source order; absent from the JSON when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// The block's body (at validate) or its normalised spec (afterwards).
    pub spec: Value,
}

/// `validate` request: one block, with the workload it sits in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateRequest {
    /// The workload's kind.
    pub kind: WorkloadKind,
    /// The workload's scope (`prod` in `deployment "prod" "esl"`).
    pub scope: String,
    /// The workload's name (`esl` in `deployment "prod" "esl"`).
    pub name: String,
    /// The block to validate, with its body as written.
    pub block: Block,
    /// The workload's core spec (image, replicas, ports, ...) without its
    /// plugin blocks, so a plugin can refuse a combination it cannot serve.
    pub workload: Value,
}

/// How the host addresses endpoints it publishes to a block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Addressing {
    /// `IP:port` on the `voodu0` network: for plugins on the host network.
    #[default]
    Ip,
    /// `container-name:port`: for plugins on `voodu0`, which resolve names and
    /// survive a container being recreated at another address.
    Dns,
    /// No endpoints at all: the block is sent no `publish` and no `drain`,
    /// only `validate` and `forget`. For a plugin that configures something
    /// other than traffic to the replicas. (ABI 1.1.)
    None,
    /// `ADDRESS:host-port`: the address of the node a replica runs on (its
    /// `--advertise`, else the host IP its port is published on) and the
    /// host port Docker published the block's port on. For a cluster,
    /// where container addresses and names are reachable on their own
    /// host only: a block with it needs its port published on the host.
    Host,
}

/// What a plugin asks the host to publish for one block.
///
/// Every published address has a port: the one named here, or else the
/// workload's first container port. A block with neither is refused at
/// apply, unless its plugin asks for [`Addressing::None`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRequest {
    /// The container port to publish; default: the workload's first port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// How to address replicas; default: [`Addressing::Ip`].
    #[serde(default)]
    pub addressing: Addressing,
}

/// `validate` reply: the normalised spec the host stores, the endpoint
/// envelope and the block's exclusive claims, the only parts of the reply
/// the host reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateReply {
    /// The block's spec with the plugin's defaults filled in.
    pub spec: Value,
    /// What the plugin asks the host to publish.
    #[serde(default)]
    pub endpoints: EndpointRequest,
    /// What the block must hold alone across every workload (the address
    /// it listens on). The host refuses an apply in which two blocks claim
    /// overlapping things, naming both; absent from the JSON when empty,
    /// and an older host ignores it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
}

impl ValidateReply {
    /// A reply with the normalised spec and the endpoint envelope, and no
    /// claims ([`ValidateReply::claiming`] adds them).
    pub fn new(spec: Value, endpoints: EndpointRequest) -> Self {
        ValidateReply {
            spec,
            endpoints,
            claims: Vec::new(),
        }
    }

    /// The reply with `claim` added to its claims.
    pub fn claiming(mut self, claim: Claim) -> Self {
        self.claims.push(claim);
        self
    }
}

/// The transport protocol of a listen claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimProtocol {
    /// A TCP listener.
    Tcp,
    /// A UDP socket.
    Udp,
}

impl ClaimProtocol {
    /// The protocol as the JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimProtocol::Tcp => "tcp",
            ClaimProtocol::Udp => "udp",
        }
    }
}

/// Something one block must hold alone, named in its `validate` reply:
/// `{"kind": "listen", "protocol": "tcp", "address": "127.0.0.1:21300"}`.
///
/// Two listen claims of one protocol overlap when they name one port and
/// either the same IP or an unspecified one (`0.0.0.0`, `[::]`), since a
/// socket on the unspecified address takes that port's connections on
/// every address. Port 0 (a port the system picks) never overlaps.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Claim {
    /// An address the block listens on, in the controller (the host's
    /// listen service) or in a process of its own (an nginx).
    Listen {
        /// TCP or UDP.
        protocol: ClaimProtocol,
        /// `IP:port`; on a cluster, every node's host binds it.
        address: std::net::SocketAddr,
    },
}

impl Claim {
    /// A TCP listen claim on `address`.
    pub fn listen_tcp(address: std::net::SocketAddr) -> Self {
        Claim::Listen {
            protocol: ClaimProtocol::Tcp,
            address,
        }
    }

    /// Whether this claim and `other` cannot both be held (see [`Claim`]).
    pub fn overlaps(&self, other: &Claim) -> bool {
        let (
            Claim::Listen {
                protocol,
                address: mine,
            },
            Claim::Listen {
                protocol: other_protocol,
                address: theirs,
            },
        ) = (self, other);
        protocol == other_protocol
            && mine.port() != 0
            && mine.port() == theirs.port()
            && (mine.ip() == theirs.ip()
                || mine.ip().is_unspecified()
                || theirs.ip().is_unspecified())
    }

    /// The protocol and port the claim is about: claims on different
    /// ones never overlap, so a store files them under it.
    pub fn port_key(&self) -> (ClaimProtocol, u16) {
        match self {
            Claim::Listen { protocol, address } => (*protocol, address.port()),
        }
    }
}

impl std::fmt::Display for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Claim::Listen {
                protocol: ClaimProtocol::Tcp,
                address,
            } => write!(f, "{address}"),
            Claim::Listen {
                protocol: ClaimProtocol::Udp,
                address,
            } => write!(f, "{address} (udp)"),
        }
    }
}

/// One live replica as published to a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// The replica's id (4 hex characters, or the ordinal for statefulsets).
    pub replica_id: String,
    /// `IP:port`, `container-name:port` or `node-address:host-port`, as
    /// the block asked.
    pub address: String,
    /// In a cluster, the node the replica runs on; absent on one host. An
    /// optional member: a plugin that does not know it ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// `publish` request: the whole live endpoint set of one block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishRequest {
    /// The workload's kind.
    pub kind: WorkloadKind,
    /// The workload's scope.
    pub scope: String,
    /// The workload's name.
    pub name: String,
    /// The block, with its normalised spec.
    pub block: Block,
    /// Rises with each change of the set; a plugin ignores older generations.
    pub generation: u64,
    /// Every running replica; never a partial update.
    pub endpoints: Vec<Endpoint>,
}

/// `drain` request: one replica about to be removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainRequest {
    /// The workload's kind.
    pub kind: WorkloadKind,
    /// The workload's scope.
    pub scope: String,
    /// The workload's name.
    pub name: String,
    /// The block, with its normalised spec.
    pub block: Block,
    /// The replica to drain.
    pub replica: Endpoint,
    /// The whole drain budget, in milliseconds.
    pub budget_ms: u64,
    /// How much of the budget has already passed, in milliseconds.
    pub elapsed_ms: u64,
}

/// `drain` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum DrainReply {
    /// The replica has no more work in this plugin; it may be removed.
    Drained,
    /// The replica still has work; ask again after `retry_after_ms`.
    Draining {
        /// When to ask again, in milliseconds.
        retry_after_ms: u64,
    },
}

/// `configure` request (ABI 1.3): the plugin-wide settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigureRequest {
    /// The whole settings object, as the operator gave it and checked
    /// against the plugin's settings schema; `{}` when none were given.
    pub settings: serde_json::Value,
}

/// `forget` request: the block is gone (workload deleted or block removed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForgetRequest {
    /// The workload's kind.
    pub kind: WorkloadKind,
    /// The workload's scope.
    pub scope: String,
    /// The workload's name.
    pub name: String,
    /// The block being forgotten.
    pub block: Block,
}

/// The body of a REFUSED or ERROR reply, and of a failed `init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReply {
    /// What went wrong, in the plugin's own words, one line.
    pub message: String,
    /// In a refusal of `validate`: the option at fault, as a JSON pointer
    /// (RFC 6901) into the block's `spec`: `/listen`, or
    /// `/@blocks/0/spec/port` in a nested block. The operator is then
    /// pointed at that attribute's own file, line and column instead of
    /// the block's. Left out when the refusal is about the block as a
    /// whole; an older host ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
}

impl FailureReply {
    /// A failure with a message only.
    pub fn new(message: impl Into<String>) -> Self {
        FailureReply {
            message: message.into(),
            pointer: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn block_without_labels_serialises_without_the_labels_key() {
        let block = Block {
            block_type: "traffik".into(),
            labels: vec![],
            spec: json!({"port": 8084}),
        };
        assert_eq!(
            serde_json::to_value(&block).unwrap(),
            json!({"type": "traffik", "spec": {"port": 8084}})
        );
    }

    #[test]
    fn publish_request_matches_the_seed_shape() {
        let request = PublishRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: Block {
                block_type: "traffik".into(),
                labels: vec!["http".into()],
                spec: json!({"port": 8084, "bind": "0.0.0.0:8084"}),
            },
            generation: 3,
            endpoints: vec![Endpoint {
                replica_id: "a1".into(),
                address: "172.18.0.5:8084".into(),
                node: None,
            }],
        };
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            json!({
                "kind": "deployment", "scope": "prod", "name": "esl",
                "block": {"type": "traffik", "labels": ["http"],
                          "spec": {"port": 8084, "bind": "0.0.0.0:8084"}},
                "generation": 3,
                "endpoints": [{"replica_id": "a1", "address": "172.18.0.5:8084"}]
            })
        );
    }

    #[test]
    fn drain_replies_use_the_state_tag() {
        assert_eq!(
            serde_json::from_value::<DrainReply>(json!({"state": "drained"})).unwrap(),
            DrainReply::Drained
        );
        assert_eq!(
            serde_json::from_value::<DrainReply>(
                json!({"state": "draining", "retry_after_ms": 250})
            )
            .unwrap(),
            DrainReply::Draining {
                retry_after_ms: 250
            }
        );
    }

    #[test]
    fn validate_reply_defaults_to_ip_addressing_and_no_port() {
        let reply: ValidateReply = serde_json::from_value(json!({"spec": {}})).unwrap();
        assert_eq!(reply.endpoints, EndpointRequest::default());
        assert_eq!(reply.endpoints.addressing, Addressing::Ip);
        assert!(reply.claims.is_empty());
    }

    #[test]
    fn claims_travel_in_the_validate_reply_and_are_left_out_when_none() {
        let reply = ValidateReply::new(json!({"port": 1}), EndpointRequest::default())
            .claiming(Claim::listen_tcp("127.0.0.1:21300".parse().unwrap()));
        assert_eq!(
            serde_json::to_value(&reply).unwrap()["claims"],
            json!([{"kind": "listen", "protocol": "tcp", "address": "127.0.0.1:21300"}])
        );
        let none = ValidateReply::new(json!({}), EndpointRequest::default());
        assert!(serde_json::to_value(&none).unwrap().get("claims").is_none());
        // A kind this host does not know is an invalid reply, never ignored.
        assert!(serde_json::from_value::<ValidateReply>(
            json!({"spec": {}, "claims": [{"kind": "disk", "path": "/x"}]})
        )
        .is_err());
    }

    #[test]
    fn listen_claims_overlap_on_one_port_at_one_or_an_unspecified_ip() {
        let claim = |text: &str| Claim::listen_tcp(text.parse().unwrap());
        assert!(claim("127.0.0.1:80").overlaps(&claim("127.0.0.1:80")));
        assert!(claim("0.0.0.0:80").overlaps(&claim("127.0.0.1:80")));
        assert!(claim("10.0.0.1:80").overlaps(&claim("[::]:80")));
        assert!(!claim("10.0.0.1:80").overlaps(&claim("10.0.0.2:80")));
        assert!(!claim("0.0.0.0:80").overlaps(&claim("0.0.0.0:81")));
        assert!(!claim("0.0.0.0:0").overlaps(&claim("0.0.0.0:0")));
        let udp = Claim::Listen {
            protocol: ClaimProtocol::Udp,
            address: "0.0.0.0:53".parse().unwrap(),
        };
        assert!(!udp.overlaps(&claim("0.0.0.0:53")));
    }
}
