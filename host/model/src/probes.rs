//! The `probes` core block, as voodu documents it: startup, readiness
//! and liveness checks the controller runs against each replica at its
//! `voodu0` address (or through Docker exec), so they need no tool inside
//! the image.
//!
//! ```hcl
//! probes {
//!   startup {
//!     http_get {
//!       path = "/health"
//!       port = 8080
//!     }
//!     period            = "2s"
//!     failure_threshold = 30
//!   }
//!   readiness {
//!     http_get {            # or tcp_socket { port }, or exec { command }
//!       path = "/ready"
//!       port = 8080         # default: the workload's first container port
//!     }
//!     period            = "5s"
//!     timeout           = "1s"
//!     failure_threshold = 1
//!     success_threshold = 2
//!     initial_delay     = "0s"
//!   }
//!   liveness {
//!     tcp_socket { port = 8080 }
//!   }
//! }
//! ```
//!
//! - **startup** gates readiness: until it has passed once, the replica is
//!   not ready; after `failure_threshold` failures in a row it is
//!   restarted. It stops once it has passed.
//! - **readiness** gates the endpoint set.
//! - **liveness** restarts a replica that fails it.
//!
//! `http_get` takes `path`, `port`, `scheme` (`"http"`, or `"https"`,
//! verified against the host's trusted roots) and
//! `http_headers`, and passes on 200 to 399 (or on the codes of `status`,
//! this voodu's addition). Stored specs written with this project's
//! earlier spellings (`http`, `tcp`, `interval`) still load.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often a probe runs when `period` is not set, as voodu documents.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);
/// How long one check may take when `timeout` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// Failures in a row that make a replica fail its probe, by default.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// Successes in a row that make it pass again, by default.
pub const DEFAULT_SUCCESS_THRESHOLD: u32 = 1;

/// A workload's probes, with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Probes {
    /// Gates readiness until it has passed once; restarts a replica that
    /// fails it `failure_threshold` times in a row before that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<Probe>,
    /// Gates the endpoint set: a replica is published only while it passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Probe>,
    /// Restarts a replica that fails it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Probe>,
}

impl Probes {
    /// Whether there is no probe at all.
    pub fn is_empty(&self) -> bool {
        self.startup.is_none() && self.readiness.is_none() && self.liveness.is_none()
    }

    /// Whether readiness is gated: by a readiness probe, or by a startup
    /// probe until it passes.
    pub fn gate_readiness(&self) -> bool {
        self.startup.is_some() || self.readiness.is_some()
    }
}

/// One probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// What is checked.
    #[serde(flatten)]
    pub check: Check,
    /// How often (`interval` in stored specs of earlier versions).
    #[serde(with = "humantime_serde", alias = "interval")]
    pub period: Duration,
    /// How long one check may take.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Failures in a row that make the replica fail the probe.
    pub failure_threshold: u32,
    /// Successes in a row that make it pass again.
    pub success_threshold: u32,
    /// How long after the container starts the first check runs.
    #[serde(with = "humantime_serde")]
    pub initial_delay: Duration,
}

/// HTTP or HTTPS, for an `http_get` probe.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Scheme {
    /// Plain HTTP (the default).
    #[default]
    Http,
    /// HTTPS.
    Https,
}

impl Scheme {
    fn is_http(&self) -> bool {
        *self == Scheme::Http
    }
}

/// What a probe checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// An HTTP GET of `path` that answers 200 to 399, or one of `status`.
    #[serde(alias = "http")]
    HttpGet {
        /// The path, from `/`.
        path: String,
        /// The container port.
        port: u16,
        /// HTTP or HTTPS.
        #[serde(default, skip_serializing_if = "Scheme::is_http")]
        scheme: Scheme,
        /// Extra request headers.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        http_headers: BTreeMap<String, String>,
        /// The codes that pass; empty is 200 to 399.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        status: Vec<u16>,
    },
    /// A TCP connection to the port.
    #[serde(alias = "tcp")]
    TcpSocket {
        /// The container port.
        port: u16,
    },
    /// A command run in the container through Docker exec, passing on
    /// exit code 0.
    Exec {
        /// The command and its arguments.
        command: Vec<String>,
    },
}

impl Check {
    /// How messages name the check: `http_get :8084/ready`.
    pub fn describe(&self) -> String {
        match self {
            Check::HttpGet {
                path, port, scheme, ..
            } => match scheme {
                Scheme::Http => format!("http_get :{port}{path}"),
                Scheme::Https => format!("http_get https :{port}{path}"),
            },
            Check::TcpSocket { port } => format!("tcp_socket :{port}"),
            Check::Exec { command } => format!("exec {}", command.join(" ")),
        }
    }

    /// Whether an HTTP status passes.
    pub fn passes_status(&self, code: u16) -> bool {
        match self {
            Check::HttpGet { status, .. } if !status.is_empty() => status.contains(&code),
            _ => (200..400).contains(&code),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn specs_stored_with_the_earlier_spellings_still_load() {
        let stored = json!({"readiness": {"http": {"path": "/ready", "port": 8084}, "interval": "2s",
            "timeout": "1s", "failure_threshold": 3, "success_threshold": 1, "initial_delay": "0s"},
            "liveness": {"tcp": {"port": 5432}, "interval": "5s", "timeout": "1s",
            "failure_threshold": 3, "success_threshold": 1, "initial_delay": "0s"}});
        let probes: Probes = serde_json::from_value(stored).unwrap();
        let readiness = probes.readiness.unwrap();
        assert_eq!(readiness.period, Duration::from_secs(2));
        assert!(matches!(readiness.check, Check::HttpGet { port: 8084, .. }));
        assert_eq!(
            probes.liveness.unwrap().check,
            Check::TcpSocket { port: 5432 }
        );
    }
}
