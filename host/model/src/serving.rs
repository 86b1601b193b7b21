//! A serving replica as the endpoints published to plugins are computed
//! from it: one this controller runs, or, in a cluster, one another node
//! runs and advertised through the store. One shape for both, so a set is
//! the union of every node's serving replicas computed one way.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use voodu_plugin_abi::messages::Addressing;

use crate::placement::NodeName;

/// A replica that serves (running, and ready where it is probed).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServingReplica {
    /// The node it runs on; `None` on one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeName>,
    /// Its replica id.
    pub replica_id: String,
    /// Its address on `voodu0`, reachable on its own host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// Its container name, resolvable on `voodu0` on its own host.
    pub container_name: String,
    /// The address its published host ports are reached at: its node's
    /// `--advertise`, else the host IP the port is published on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_address: Option<String>,
    /// Its published TCP ports: container port to host port.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_ports: BTreeMap<u16, u16>,
}

impl ServingReplica {
    /// The address a block with `addressing` on container port `port`
    /// reaches it at; `None` when it has none (no IP yet, the port not
    /// published on the host, or `none` addressing).
    pub fn address(&self, addressing: Addressing, port: u16) -> Option<String> {
        match addressing {
            Addressing::Ip => self.ip.as_ref().map(|ip| format!("{ip}:{port}")),
            Addressing::Dns => Some(format!("{}:{port}", self.container_name)),
            Addressing::Host => {
                let host_port = self.host_ports.get(&port)?;
                let address = self.host_address.as_ref()?;
                Some(format!("{address}:{host_port}"))
            }
            Addressing::None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_addressing_names_the_replica_its_own_way() {
        let replica = ServingReplica {
            node: Some("a".parse().unwrap()),
            replica_id: "5ed8".into(),
            ip: Some("172.19.0.2".into()),
            container_name: "prod-esl.5ed8".into(),
            host_address: Some("10.0.0.7".into()),
            host_ports: BTreeMap::from([(8084, 32768)]),
        };
        assert_eq!(
            replica.address(Addressing::Ip, 8084).as_deref(),
            Some("172.19.0.2:8084")
        );
        assert_eq!(
            replica.address(Addressing::Dns, 8084).as_deref(),
            Some("prod-esl.5ed8:8084")
        );
        assert_eq!(
            replica.address(Addressing::Host, 8084).as_deref(),
            Some("10.0.0.7:32768")
        );
        assert_eq!(
            replica.address(Addressing::Host, 9090),
            None,
            "not published"
        );
        assert_eq!(replica.address(Addressing::None, 8084), None);
    }
}
