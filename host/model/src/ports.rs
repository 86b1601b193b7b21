//! Port mappings as voodu writes them: `"8084"` publishes container port
//! 8084 on 127.0.0.1 at a port Docker picks; `"8084:8084"` and
//! `"0.0.0.0:8084:8084"` pin a host port. A `/udp` suffix selects UDP. A
//! range, `"16384-32768/udp"` or `"0.0.0.0:5060-5061:5060-5061"`, maps
//! each port of it.

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
    /// The port inside the container; the first of a range.
    pub container_port: u16,
    /// How many ports follow `container_port` (and `host_port`) in a
    /// range: 0 for one port.
    pub extra_ports: u16,
    /// TCP or UDP.
    pub protocol: Protocol,
}

impl PortMapping {
    /// Whether the mapping pins a host port, which limits the workload to one
    /// replica per host address.
    pub fn pins_host_port(&self) -> bool {
        self.host_port.is_some()
    }

    /// Each container port it maps, with its pinned host port if any: one
    /// pair, or one per port of a range.
    pub fn each_port(&self) -> impl Iterator<Item = (u16, Option<u16>)> + '_ {
        (0..=self.extra_ports).map(|offset| {
            (
                self.container_port + offset,
                self.host_port.map(|host_port| host_port + offset),
            )
        })
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

/// A port or a range of ports, `5060` or `16384-32768`: the first port
/// and how many follow it.
fn parse_ports(text: &str, what: &str) -> Result<(u16, u16), String> {
    match text.split_once('-') {
        None => Ok((parse_port(text, what)?, 0)),
        Some((first, last)) => {
            let (first, last) = (parse_port(first, what)?, parse_port(last, what)?);
            if last <= first {
                return Err(format!(
                    "the {what} range {text:?} must run from a lower port to a higher one"
                ));
            }
            Ok((first, last - first))
        }
    }
}

/// The host part of a mapping: a port or a range, or, after an address,
/// nothing (`0.0.0.0::8084`: Docker picks the host port on that address).
fn host_ports(text: &str, after_an_address: bool) -> Result<Option<(u16, u16)>, String> {
    if text.is_empty() && after_an_address {
        return Ok(None);
    }
    parse_ports(text, "host").map(Some)
}

/// A mapping from its parts, its host and container ranges checked
/// against each other.
fn mapping(
    host_ip: IpAddr,
    host: Option<(u16, u16)>,
    container: &str,
    protocol: Protocol,
) -> Result<PortMapping, String> {
    let (container_port, extra_ports) = parse_ports(container, "container")?;
    if let Some((_, host_extra)) = host {
        if host_extra != extra_ports {
            return Err(format!(
                "the host side maps {} port(s) and the container side {} — give both sides ranges of one length",
                host_extra as u32 + 1,
                extra_ports as u32 + 1
            ));
        }
    }
    Ok(PortMapping {
        host_ip,
        host_port: host.map(|(first, _)| first),
        container_port,
        extra_ports,
        protocol,
    })
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
            (None, [container]) => mapping(loopback, None, container, protocol),
            (None, [host, container]) | (Some(_), [host, container]) => {
                let host = host_ports(host, host_ip.is_some()).map_err(error)?;
                mapping(host_ip.unwrap_or(loopback), host, container, protocol)
            }
            (None, [ip, host, container]) => {
                let ip = ip
                    .parse()
                    .map_err(|_| error(format!("{ip:?} is not an IP address")))?;
                let host = host_ports(host, true).map_err(error)?;
                mapping(ip, host, container, protocol)
            }
            _ => return Err(error("too many parts".into())),
        };
        mapping.map_err(error)
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
        let range = |first: u16| match self.extra_ports {
            0 => first.to_string(),
            extra => format!("{first}-{}", first + extra),
        };
        let container = range(self.container_port);
        let loopback = self.host_ip == IpAddr::from([127, 0, 0, 1]);
        match (self.host_port, self.host_ip) {
            (None, _) if loopback => write!(f, "{container}")?,
            (None, IpAddr::V6(ip)) => write!(f, "[{ip}]::{container}")?,
            (None, IpAddr::V4(ip)) => write!(f, "{ip}::{container}")?,
            (Some(host_port), _) if loopback => write!(f, "{}:{container}", range(host_port))?,
            (Some(host_port), IpAddr::V6(ip)) => {
                write!(f, "[{ip}]:{}:{container}", range(host_port))?
            }
            (Some(host_port), IpAddr::V4(ip)) => {
                write!(f, "{ip}:{}:{container}", range(host_port))?
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
    fn ranges_map_each_port_as_voodu_writes_them() {
        let rtp: PortMapping = "16384-32768/udp".parse().unwrap();
        assert_eq!(rtp.container_port, 16384);
        assert_eq!(rtp.extra_ports, 16384);
        assert_eq!(rtp.protocol, Protocol::Udp);
        assert_eq!(rtp.host_port, None);
        assert_eq!(rtp.each_port().count(), 16385);
        assert_eq!(rtp.to_string(), "16384-32768/udp");
        let pinned: PortMapping = "0.0.0.0:5060-5061:6060-6061".parse().unwrap();
        let pairs: Vec<_> = pinned.each_port().collect();
        assert_eq!(pairs, [(6060, Some(5060)), (6061, Some(5061))]);
        assert_eq!(pinned.to_string(), "0.0.0.0:5060-5061:6060-6061");
        let error = "5060-5062:6060-6061"
            .parse::<PortMapping>()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("the host side maps 3 port(s) and the container side 2"),
            "{error}"
        );
        assert!("9000-8000".parse::<PortMapping>().is_err());
    }

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
