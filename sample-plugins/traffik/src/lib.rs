//! `traffik`: the sample load balancer. It owns `traffik {}` blocks:
//!
//! ```hcl
//! deployment "prod" "esl" {
//!   image    = "ghcr.io/acme/esl:1.2"
//!   replicas = 3
//!   ports    = ["8084"]
//!   traffik "http" { port = 8084 }
//! }
//! ```
//!
//! - **validate** ([`config`]) checks and normalises the block: `port` (the
//!   replicas' port) is required, `bind` defaults to `0.0.0.0:<port>`,
//!   `balance` to `round_robin`; a workload that pins a host port cannot
//!   have more than one replica behind a balancer.
//! - **publish** ([`proxy`]) swaps the block's replica set; the first one
//!   opens the listener, on traffik's own runtime and threads.
//! - **drain** stops new connections to the replica and answers `draining`
//!   while it still has open ones.
//! - **forget** closes the listener and frees the port.
//!
//! Two blocks (`traffik "sip"` and `traffik "http"`) are two balancers.

pub mod config;
pub mod proxy;

use voodu_plugin_abi::messages::{
    Block, Claim, DrainReply, DrainRequest, EndpointRequest, ForgetRequest, PublishRequest,
    ValidateReply, ValidateRequest, WorkloadKind,
};
use voodu_plugin_abi::{Host, LogLevel, Plugin, PluginError};

use self::config::{normalise_with, TraffikSpec};
use self::proxy::{Balancers, DrainState};

/// How often voodu should ask again while a replica still has connections.
const DRAIN_POLL_MS: u64 = 100;

/// The key of one block's balancer: `deployment/prod/esl/traffik "http"`.
pub fn block_key(kind: WorkloadKind, scope: &str, name: &str, block: &Block) -> String {
    let labels: String = block.labels.iter().map(|l| format!(" {l:?}")).collect();
    format!("{kind}/{scope}/{name}/{}{labels}", block.block_type)
}

/// The plugin instance: the host handle, the balancers and the
/// plugin-wide settings.
pub struct Traffik {
    host: Host,
    balancers: Balancers,
    /// Where a block without `bind` listens (`default_bind_host`).
    default_bind_host: std::net::IpAddr,
}

impl Plugin for Traffik {
    const NAME: &'static std::ffi::CStr = c"traffik";
    const VERSION: &'static std::ffi::CStr = c"1.0.0";

    fn init(host: Host) -> Result<Self, String> {
        let balancers = Balancers::with_host(host)
            .map_err(|error| format!("cannot start traffik's runtime: {error}"))?;
        Ok(Traffik {
            host,
            balancers,
            default_bind_host: std::net::Ipv4Addr::UNSPECIFIED.into(),
        })
    }

    fn describe_settings(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "type": "object",
            "description": "Settings for every traffik block on this host (a cluster's nodes each).",
            "properties": {
                "default_bind_host": {
                    "type": "string",
                    "description": "The address a block without bind listens on, for blocks validated from then on (at apply, or when traffik is replaced): a host's private address keeps traffik off its public one.",
                    "default": "0.0.0.0"
                }
            },
            "additionalProperties": false
        }))
    }

    fn configure(&mut self, settings: serde_json::Value) -> Result<(), PluginError> {
        // Every setting is checked before any is taken.
        let default_bind_host = match settings.get("default_bind_host") {
            None => std::net::Ipv4Addr::UNSPECIFIED.into(),
            Some(value) => value
                .as_str()
                .and_then(|host| host.parse().ok())
                .ok_or_else(|| {
                    PluginError::refused_at(
                        "/default_bind_host",
                        format!(
                            "default_bind_host must be an IP address (\"10.0.0.5\", \"::1\"), not {value}"
                        ),
                    )
                })?,
        };
        self.default_bind_host = default_bind_host;
        self.host.log(
            LogLevel::Info,
            &format!("blocks without bind listen on {default_bind_host}"),
        );
        Ok(())
    }

    fn validate(&mut self, request: ValidateRequest) -> Result<ValidateReply, PluginError> {
        let spec = normalise_with(
            &request.block.spec,
            &request.workload,
            &request.scope,
            &request.name,
            self.default_bind_host,
        )
        .map_err(|refusal| match refusal.option {
            Some(option) => PluginError::refused_at(format!("/{option}"), refusal.message),
            None => PluginError::Refused(refusal.message),
        })?;
        let reply = ValidateReply::new(
            spec.to_json(),
            EndpointRequest {
                port: Some(spec.port),
                addressing: spec.addressing,
            },
        );
        // The address traffik listens on is this block's alone: the host
        // refuses another block that claims it (normalise checked that it
        // parses).
        Ok(match spec.bind.parse() {
            Ok(bind) => reply.claiming(Claim::listen_tcp(bind)),
            Err(_) => reply,
        })
    }

    fn publish(&mut self, request: PublishRequest) -> Result<(), PluginError> {
        let key = block_key(request.kind, &request.scope, &request.name, &request.block);
        let spec = TraffikSpec::from_json(&request.block.spec).ok_or_else(|| {
            PluginError::Failed(format!(
                "{key}: the stored spec is not a normalised traffik spec"
            ))
        })?;
        let endpoints: Vec<(String, String)> = request
            .endpoints
            .iter()
            .map(|endpoint| (endpoint.replica_id.clone(), endpoint.address.clone()))
            .collect();
        let applied = self
            .balancers
            .publish(&key, &spec, request.generation, &endpoints)
            .map_err(|error| PluginError::Failed(format!("{key}: {error}")))?;
        if applied {
            let listening = self
                .balancers
                .local_address(&key)
                .map_or_else(String::new, |address| address.to_string());
            self.host.log(
                LogLevel::Info,
                &format!(
                    "{key}: generation {} on {listening}, {} replica(s)",
                    request.generation,
                    endpoints.len()
                ),
            );
        }
        Ok(())
    }

    fn drain(&mut self, request: DrainRequest) -> Result<DrainReply, PluginError> {
        let key = block_key(request.kind, &request.scope, &request.name, &request.block);
        match self.balancers.drain(&key, &request.replica.replica_id) {
            DrainState::Drained => Ok(DrainReply::Drained),
            DrainState::Open(open) => {
                self.host.log(
                    LogLevel::Debug,
                    &format!(
                        "{key}: replica {} still has {open} connection(s)",
                        request.replica.replica_id
                    ),
                );
                Ok(DrainReply::Draining {
                    retry_after_ms: DRAIN_POLL_MS,
                })
            }
        }
    }

    /// Stops accepting (a replaced or reloaded instance's successor, or an
    /// upgrade's new worker, accepts on the same sockets the host holds)
    /// and lets open connections finish for as long as the host allows
    /// (`voodu_plugin_abi::sdk::shutdown_grace`), or [`SHUTDOWN_GRACE`].
    fn shutdown(&mut self) {
        let grace = voodu_plugin_abi::sdk::shutdown_grace().unwrap_or(SHUTDOWN_GRACE);
        let left = self.balancers.stop_accepting_and_finish(grace);
        if left > 0 {
            self.host.log(
                LogLevel::Warn,
                &format!(
                    "{left} connection(s) were still open {grace:?} after traffik stopped accepting; they are cut"
                ),
            );
        }
    }

    fn describe(&self) -> Option<voodu_plugin_abi::serde_json::Value> {
        Some(voodu_plugin_abi::serde_json::json!({
            "type": "object",
            "description": "An in-process TCP load balancer in front of the workload's replicas.",
            "properties": {
                "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                         "description": "The replicas' container port: the one voodu publishes to traffik, not the one traffik listens on."},
                "bind": {"type": "string",
                         "description": "Where traffik listens, host:port (default 0.0.0.0:<port>)."},
                "balance": {"type": "string", "enum": ["round_robin", "least_conn"], "default": "round_robin",
                            "description": "How a new connection picks a replica: in turn, or the one with the fewest open connections."},
                "addressing": {"type": "string", "enum": ["ip", "host"], "default": "ip",
                               "description": "How traffik reaches the replicas: their voodu0 address, or their node's address and published port (a cluster)."},
                "reuse_port": {"type": "boolean", "default": false,
                               "description": "Share the listening port with other traffiks on this host (SO_REUSEPORT)."}
            },
            "required": ["port"],
            "examples": [{"port": 8084}],
            "additionalProperties": false
        }))
    }

    fn forget(&mut self, request: ForgetRequest) -> Result<(), PluginError> {
        let key = block_key(request.kind, &request.scope, &request.name, &request.block);
        if self.balancers.forget(&key) {
            self.host
                .log(LogLevel::Info, &format!("{key}: listener closed"));
        }
        Ok(())
    }
}

/// How long traffik's shutdown lets the connections it carries finish,
/// after it stops accepting, when the host sets no grace: well within the
/// host's bound on the call (`--plugin-timeout`, 5 s by default).
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

voodu_plugin_abi::export_plugin!(Traffik);
