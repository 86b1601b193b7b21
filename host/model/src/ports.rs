//! Port mappings as voodu writes them: `"8084"` publishes container port
//! 8084 on 127.0.0.1 at a port Docker picks; `"8084:8084"` and
//! `"0.0.0.0:8084:8084"` pin a host port. A `/udp` suffix selects UDP.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The transport protocol of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP, the default.
    #[default]
    Tcp,
    /// UDP, written `/udp`.
    Udp,
}

/// One parsed entry of a workload's `ports`. It is stored and sent as the
/// string voodu writes (`"8084"`, `"0.0.0.0:80:8084/udp"`), its
/// [`Display`](fmt::Display) form, which parses back to the same mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PortMapping {
    /// The address the host side listens on; 127.0.0.1 unless written.
    pub host_ip: IpAddr,
    /// The pinned host port, or `None` when Docker picks one.
    pub host_port: Option<u16>,
    /// The port inside the container.
    pub container_port: u16,
    /// TCP or UDP.
    pub protocol: Protocol,
}

impl PortMapping {
    /// Whether the mapping pins a host port, which limits the workload to one
    /// replica per host address.
    pub fn pins_host_port(&self) -> bool {
        self.host_port.is_some()
    }
}

/// Why a string is not a port mapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("port {input:?} is not a port mapping ({reason}) — write \"8084\", \"8084:8084\" or \"0.0.0.0:8084:8084\", with /udp for UDP")]
pub struct PortMappingError {
    input: String,
    reason: String,
}

fn parse_port(text: &str, what: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(0) => Err(format!("the {what} port cannot be 0")),
        Ok(port) => Ok(port),
        Err(_) => Err(format!(
            "{what} port {text:?} is not a number from 1 to 65535"
        )),
    }
}

/// The host part of a mapping: a port, or, after an address, nothing
/// (`0.0.0.0::8084`: Docker picks the host port on that address).
fn host_port(text: &str, after_an_address: bool) -> Result<Option<u16>, String> {
    if text.is_empty() && after_an_address {
        return Ok(None);
    }
    parse_port(text, "host").map(Some)
}

impl FromStr for PortMapping {
    type Err = PortMappingError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |reason: String| PortMappingError {
            input: input.to_owned(),
            reason,
        };
        let (ports, protocol) = match input.rsplit_once('/') {
            Some((ports, "tcp")) => (ports, Protocol::Tcp),
            Some((ports, "udp")) => (ports, Protocol::Udp),
            Some((_, other)) => return Err(error(format!("unknown protocol {other:?}"))),
            None => (input, Protocol::Tcp),
        };
        let loopback = IpAddr::from([127, 0, 0, 1]);
        // An IPv6 host address is written in brackets: "[::1]:8084:8084".
        let (host_ip, rest) = if let Some(bracketed) = ports.strip_prefix('[') {
            let (ip, rest) = bracketed
                .split_once("]:")
                .ok_or_else(|| error("an IPv6 address needs a closing bracket".into()))?;
            let ip = ip
                .parse::<IpAddr>()
                .map_err(|_| error(format!("{ip:?} is not an IP address")))?;
            (Some(ip), rest)
        } else {
            (None, ports)
        };
        let parts: Vec<&str> = rest.split(':').collect();
        let mapping = match (host_ip, parts.as_slice()) {
            (None, [container]) => PortMapping {
                host_ip: loopback,
                host_port: None,
                container_port: parse_port(container, "container").map_err(error)?,
                protocol,
            },
            (None, [host, container]) | (Some(_), [host, container]) => PortMapping {
                host_ip: host_ip.unwrap_or(loopback),
                host_port: host_port(host, host_ip.is_some()).map_err(error)?,
                container_port: parse_port(container, "container").map_err(error)?,
                protocol,
            },
            (None, [ip, host, container]) => PortMapping {
                host_ip: ip
                    .parse()
                    .map_err(|_| error(format!("{ip:?} is not an IP address")))?,
                host_port: host_port(host, true).map_err(error)?,
                container_port: parse_port(container, "container").map_err(error)?,
                protocol,
            },
            _ => return Err(error("too many parts".into())),
        };
        Ok(mapping)
    }
}

impl TryFrom<String> for PortMapping {
    type Error = PortMappingError;

    fn try_from(written: String) -> Result<Self, Self::Error> {
        written.parse()
    }
}

impl From<PortMapping> for String {
    fn from(mapping: PortMapping) -> String {
        mapping.to_string()
    }
}

/// The shortest form that parses back to the mapping: the host address is
/// left out when it is the default 127.0.0.1, and `/tcp` always is.
impl fmt::Display for PortMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let loopback = self.host_ip == IpAddr::from([127, 0, 0, 1]);
        match (self.host_port, self.host_ip) {
            (None, _) if loopback => write!(f, "{}", self.container_port)?,
            (None, IpAddr::V6(ip)) => write!(f, "[{ip}]::{}", self.container_port)?,
            (None, IpAddr::V4(ip)) => write!(f, "{ip}::{}", self.container_port)?,
            (Some(host_port), _) if loopback => write!(f, "{host_port}:{}", self.container_port)?,
            (Some(host_port), IpAddr::V6(ip)) => {
                write!(f, "[{ip}]:{host_port}:{}", self.container_port)?
            }
            (Some(host_port), IpAddr::V4(ip)) => {
                write!(f, "{ip}:{host_port}:{}", self.container_port)?
            }
        }
        if self.protocol == Protocol::Udp {
            f.write_str("/udp")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_with_no_host_port_lets_docker_pick_one_there() {
        for written in ["0.0.0.0::8084", "[::]::8084", "10.0.0.7::8084/udp"] {
            let mapping: PortMapping = written.parse().unwrap();
            assert_eq!(mapping.host_port, None, "{written}");
            assert_eq!(mapping.container_port, 8084);
            assert_eq!(mapping.to_string(), written, "read back as written");
        }
        assert!(
            "::8084".parse::<PortMapping>().is_err(),
            "no address, no empty host port"
        );
    }

    #[test]
    fn a_bare_port_publishes_on_loopback_without_pinning() {
        let mapping: PortMapping = "8084".parse().unwrap();
        assert_eq!(mapping.host_ip, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(mapping.host_port, None);
        assert_eq!(mapping.container_port, 8084);
        assert!(!mapping.pins_host_port());
    }

    #[test]
    fn a_host_part_pins_the_host_port() {
        let pinned: PortMapping = "0.0.0.0:80:8084/udp".parse().unwrap();
        assert_eq!(pinned.host_ip, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(pinned.host_port, Some(80));
        assert_eq!(pinned.protocol, Protocol::Udp);
        assert!("8084:8084".parse::<PortMapping>().unwrap().pins_host_port());
        let v6: PortMapping = "[::1]:80:8084".parse().unwrap();
        assert_eq!(v6.to_string(), "[::1]:80:8084");
    }

    #[test]
    fn a_mapping_is_stored_as_the_shortest_string_that_parses_back() {
        for (written, stored) in [
            ("8084", "8084"),
            ("8084/tcp", "8084"),
            ("8084:8084", "8084:8084"),
            ("127.0.0.1:80:8084", "80:8084"),
            ("0.0.0.0:80:8084/udp", "0.0.0.0:80:8084/udp"),
            ("[::]:80:8084", "[::]:80:8084"),
        ] {
            let mapping: PortMapping = written.parse().unwrap();
            let json = serde_json::to_value(mapping).unwrap();
            assert_eq!(json, serde_json::json!(stored), "{written}");
            assert_eq!(
                serde_json::from_value::<PortMapping>(json).unwrap(),
                mapping
            );
        }
        let refused = serde_json::from_value::<PortMapping>(serde_json::json!("80a"));
        assert!(refused
            .unwrap_err()
            .to_string()
            .contains("is not a port mapping"));
    }

    #[test]
    fn bad_ports_say_what_to_write() {
        let error = "80a".parse::<PortMapping>().unwrap_err().to_string();
        assert!(error.starts_with("port \"80a\" is not a port mapping (container port \"80a\" is not a number from 1 to 65535)"), "{error}");
        assert!(error.ends_with(
            "write \"8084\", \"8084:8084\" or \"0.0.0.0:8084:8084\", with /udp for UDP"
        ));
        assert!("1:2:3:4".parse::<PortMapping>().is_err());
        assert!("0".parse::<PortMapping>().is_err());
        assert!("8084/sctp".parse::<PortMapping>().is_err());
    }
}
