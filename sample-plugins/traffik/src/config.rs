//! Validating and normalising a `traffik` block. Pure: no I/O, so every
//! rule is unit-tested.

use serde_json::{Map, Value};
use voodu_plugin_abi::messages::Addressing;

/// The keys a `traffik` block takes.
pub const KNOWN_KEYS: &[&str] = &["port", "bind", "balance", "addressing", "reuse_port"];

/// How traffik picks a replica for a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Each new connection goes to the next replica in turn (the default).
    RoundRobin,
    /// Each new connection goes to the replica with the fewest open ones.
    LeastConn,
}

impl Balance {
    /// The name a block writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round_robin",
            Balance::LeastConn => "least_conn",
        }
    }
}

/// A normalised `traffik` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraffikSpec {
    /// The replicas' port: the one voodu publishes.
    pub port: u16,
    /// Where traffik listens, `host:port`.
    pub bind: String,
    /// How replicas are picked.
    pub balance: Balance,
    /// How voodu addresses the replicas: `ip` (their `voodu0` address, on
    /// one host), or `host` (their node's address and published host port,
    /// across the nodes of a cluster).
    pub addressing: Addressing,
    /// Whether several traffik instances on one host share the listening
    /// port (`SO_REUSEPORT`), the kernel spreading new connections over
    /// them: for a cluster's nodes run on one machine.
    pub reuse_port: bool,
}

impl TraffikSpec {
    /// The spec as JSON, every default filled in.
    pub fn to_json(&self) -> Value {
        let mut spec = serde_json::json!({
            "port": self.port,
            "bind": self.bind,
            "balance": self.balance.as_str(),
        });
        // Only when not the default, so a block stored before the option
        // existed normalises to the same spec.
        if self.addressing == Addressing::Host {
            spec["addressing"] = Value::from("host");
        }
        if self.reuse_port {
            spec["reuse_port"] = Value::from(true);
        }
        spec
    }

    /// Reads a spec that [`normalise`] produced.
    pub fn from_json(spec: &Value) -> Option<TraffikSpec> {
        Some(TraffikSpec {
            port: u16::try_from(spec.get("port")?.as_u64()?).ok()?,
            bind: spec.get("bind")?.as_str()?.to_owned(),
            balance: match spec.get("balance")?.as_str()? {
                "least_conn" => Balance::LeastConn,
                _ => Balance::RoundRobin,
            },
            addressing: match spec.get("addressing").and_then(Value::as_str) {
                Some("host") => Addressing::Host,
                _ => Addressing::Ip,
            },
            reuse_port: spec
                .get("reuse_port")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

/// Whether a voodu port mapping pins a host port: `"8084:8084"` and
/// `"0.0.0.0:8084:8084"` do; `"8084"` and `"0.0.0.0::8084"` (an address,
/// and a port Docker picks on it: how a cluster publishes replicas other
/// hosts reach) do not.
fn pins_host_port(mapping: &str) -> bool {
    let ports = mapping.split('/').next().unwrap_or(mapping);
    // `[v6]:host:container`: the address is everything to its bracket.
    let after_address = match ports.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once("]:") {
            Some((_, rest)) => {
                return rest
                    .split_once(':')
                    .is_some_and(|(host, _)| !host.is_empty())
            }
            None => return false,
        },
        None => ports,
    };
    let parts: Vec<&str> = after_address.split(':').collect();
    match parts.as_slice() {
        [_container] => false,
        [host, _container] => !host.is_empty(),
        [_address, host, _container] => !host.is_empty(),
        _ => false,
    }
}

/// Why a block is refused: the words, in the seed's tone, and the option
/// at fault, if one is (the host then points the operator at its line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The option at fault (`port`), or none for the block as a whole.
    pub option: Option<&'static str>,
    /// What is wrong, and the fix.
    pub message: String,
}

impl Refusal {
    /// A refusal of the block as a whole.
    fn block(message: impl Into<String>) -> Refusal {
        Refusal {
            option: None,
            message: message.into(),
        }
    }

    /// A refusal of one option.
    fn at(option: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            option: Some(option),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

/// Checks and normalises a block body against the workload it sits in, a
/// block without `bind` listening on every address. `Err` is the refusal.
pub fn normalise(
    spec: &Value,
    workload: &Value,
    scope: &str,
    name: &str,
) -> Result<TraffikSpec, Refusal> {
    normalise_with(
        spec,
        workload,
        scope,
        name,
        std::net::Ipv4Addr::UNSPECIFIED.into(),
    )
}

/// [`normalise`], a block without `bind` listening on `default_host` (the
/// plugin-wide setting `default_bind_host`).
pub fn normalise_with(
    spec: &Value,
    workload: &Value,
    scope: &str,
    name: &str,
    default_host: std::net::IpAddr,
) -> Result<TraffikSpec, Refusal> {
    let empty = Map::new();
    let fields = match spec {
        Value::Object(fields) => fields,
        Value::Null => &empty,
        other => {
            return Err(Refusal::block(format!(
                "a traffik block is a block, not {other}"
            )))
        }
    };
    if let Some(unknown) = fields
        .keys()
        .find(|key| !KNOWN_KEYS.contains(&key.as_str()))
    {
        return Err(Refusal::block(format!(
            "unknown key \"{unknown}\" — a traffik block takes {}",
            KNOWN_KEYS.join(", ")
        )));
    }
    let port = match fields.get("port") {
        None => {
            return Err(Refusal::block(
                "port is required — write traffik { port = 8084 } with the replicas' port",
            ))
        }
        Some(value) => value
            .as_u64()
            .filter(|port| (1..=65535).contains(port))
            .and_then(|port| u16::try_from(port).ok())
            .ok_or_else(|| {
                Refusal::at(
                    "port",
                    format!("port must be a number from 1 to 65535, not {value}"),
                )
            })?,
    };
    let bind = match fields.get("bind") {
        None => std::net::SocketAddr::new(default_host, port).to_string(),
        Some(Value::String(bind)) if bind.parse::<std::net::SocketAddr>().is_ok() => bind.clone(),
        Some(other) => {
            return Err(Refusal::at(
                "bind",
                format!("bind must be an address and port like \"0.0.0.0:{port}\", not {other}"),
            ))
        }
    };
    let balance = match fields.get("balance") {
        None => Balance::RoundRobin,
        Some(Value::String(text)) if text == "round_robin" => Balance::RoundRobin,
        Some(Value::String(text)) if text == "least_conn" => Balance::LeastConn,
        Some(other) => {
            return Err(Refusal::at(
                "balance",
                format!("balance must be \"round_robin\" or \"least_conn\", not {other}"),
            ))
        }
    };
    let addressing = match fields.get("addressing") {
        None => Addressing::Ip,
        Some(Value::String(text)) if text == "ip" => Addressing::Ip,
        Some(Value::String(text)) if text == "host" => Addressing::Host,
        Some(other) => {
            return Err(Refusal::at(
                "addressing",
                format!("addressing must be \"ip\" (one host) or \"host\" (a cluster: each replica's node address and published port), not {other}"),
            ))
        }
    };
    let reuse_port = match fields.get("reuse_port") {
        None => false,
        Some(Value::Bool(reuse)) => *reuse,
        Some(other) => {
            return Err(Refusal::at(
                "reuse_port",
                format!("reuse_port must be true or false, not {other}"),
            ))
        }
    };
    let replicas = workload
        .get("replicas")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let pinned = workload
        .get("ports")
        .and_then(Value::as_array)
        .is_some_and(|ports| ports.iter().filter_map(Value::as_str).any(pins_host_port));
    if pinned && replicas > 1 {
        return Err(Refusal::block(format!(
            "{scope}/{name} pins a host port, so it can only ever run one replica — a load balancer in front of it has nothing to balance"
        )));
    }
    Ok(TraffikSpec {
        port,
        bind,
        balance,
        addressing,
        reuse_port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workload(replicas: u64, ports: &[&str]) -> Value {
        json!({"image": "esl:1", "replicas": replicas, "ports": ports})
    }

    #[test]
    fn defaults_are_filled_in() {
        let spec = normalise(
            &json!({"port": 8084}),
            &workload(3, &["8084"]),
            "prod",
            "esl",
        )
        .unwrap();
        assert_eq!(
            spec.to_json(),
            json!({"port": 8084, "bind": "0.0.0.0:8084", "balance": "round_robin"})
        );
        assert_eq!(TraffikSpec::from_json(&spec.to_json()), Some(spec));
    }

    #[test]
    fn host_addressing_is_kept_and_anything_else_refused() {
        let spec = normalise(
            &json!({"port": 8084, "addressing": "host"}),
            &workload(3, &["8084"]),
            "prod",
            "esl",
        )
        .unwrap();
        assert_eq!(spec.addressing, Addressing::Host);
        assert_eq!(spec.to_json()["addressing"], "host");
        assert_eq!(TraffikSpec::from_json(&spec.to_json()), Some(spec));
        let refusal = normalise(
            &json!({"port": 8084, "addressing": "dns"}),
            &workload(3, &["8084"]),
            "prod",
            "esl",
        )
        .unwrap_err()
        .message;
        assert!(
            refusal.starts_with("addressing must be \"ip\""),
            "{refusal}"
        );
    }

    #[test]
    fn an_address_with_a_port_docker_picks_pins_nothing() {
        for unpinned in ["8084", "0.0.0.0::8084", "10.0.0.7::8084/tcp", "[::]::8084"] {
            assert!(!pins_host_port(unpinned), "{unpinned}");
        }
        for pinned in [
            "8084:8084",
            "0.0.0.0:80:8084",
            "[::1]:80:8084",
            "80:8084/udp",
        ] {
            assert!(pins_host_port(pinned), "{pinned}");
        }
    }

    #[test]
    fn a_pinned_host_port_with_several_replicas_is_refused_in_the_seeds_words() {
        let refusal = normalise(
            &json!({"port": 8084}),
            &workload(3, &["8084:8084"]),
            "prod",
            "esl",
        )
        .unwrap_err();
        assert_eq!(refusal.option, None);
        assert_eq!(
            refusal.message,
            "prod/esl pins a host port, so it can only ever run one replica — a load balancer in front of it has nothing to balance"
        );
        assert!(normalise(
            &json!({"port": 8084}),
            &workload(3, &["0.0.0.0:80:8084"]),
            "prod",
            "esl"
        )
        .is_err());
        // One replica may pin a port; a bare port pins nothing.
        assert!(normalise(
            &json!({"port": 8084}),
            &workload(1, &["8084:8084"]),
            "prod",
            "esl"
        )
        .is_ok());
        assert!(normalise(
            &json!({"port": 8084}),
            &workload(3, &["8084"]),
            "prod",
            "esl"
        )
        .is_ok());
    }

    #[test]
    fn bad_values_and_unknown_keys_are_refused_with_the_fix() {
        let w = workload(1, &["8084"]);
        assert_eq!(
            normalise(&json!({"port": 8084, "weight": 2}), &w, "prod", "esl")
                .unwrap_err()
                .message,
            "unknown key \"weight\" — a traffik block takes port, bind, balance, addressing, reuse_port"
        );
        assert_eq!(
            normalise(&json!({}), &w, "prod", "esl")
                .unwrap_err()
                .message,
            "port is required — write traffik { port = 8084 } with the replicas' port"
        );
        let refusal = normalise(&json!({"port": 70000}), &w, "prod", "esl").unwrap_err();
        assert!(refusal
            .message
            .starts_with("port must be a number from 1 to 65535"));
        // The option at fault is named, so the operator sees its line.
        assert_eq!(refusal.option, Some("port"));
        assert!(normalise(&json!({"port": 80, "balance": "random"}), &w, "prod", "esl").is_err());
        assert!(normalise(
            &json!({"port": 80, "bind": "everywhere"}),
            &w,
            "prod",
            "esl"
        )
        .is_err());
        let least = normalise(
            &json!({"port": 80, "balance": "least_conn", "bind": "127.0.0.1:9000"}),
            &w,
            "prod",
            "esl",
        )
        .unwrap();
        assert_eq!(least.balance, Balance::LeastConn);
        assert_eq!(least.bind, "127.0.0.1:9000");
    }
}
