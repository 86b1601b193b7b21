//! The `probes` core block: readiness and liveness checks the controller
//! runs against each replica at its `voodu0` address, so they need no tool
//! inside the image.
//!
//! ```hcl
//! probes {
//!   readiness {
//!     http { path = "/ready" }      # or tcp {}, or exec { command = [...] }
//!     interval          = "2s"
//!     timeout           = "1s"
//!     failure_threshold = 3
//!     success_threshold = 1
//!     initial_delay     = "0s"
//!   }
//!   liveness {
//!     tcp { port = 8084 }
//!   }
//! }
//! ```
//!
//! `http` takes `path`, and optionally `port` (default: the workload's
//! first container port) and `status` (the codes that pass; default 200 to
//! 399). `tcp` takes an optional `port`. `exec` takes `command`, run through
//! Docker exec; it passes when it exits 0.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How often a probe runs when `interval` is not set.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// How long one check may take when `timeout` is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// Failures in a row that make a replica fail its probe, by default.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// Successes in a row that make it pass again, by default.
pub const DEFAULT_SUCCESS_THRESHOLD: u32 = 1;

/// A workload's probes, with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Probes {
    /// Gates the endpoint set: a replica is published only while it passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Probe>,
    /// Restarts a replica that fails it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<Probe>,
}

impl Probes {
    /// Whether there is neither a readiness nor a liveness probe.
    pub fn is_empty(&self) -> bool {
        self.readiness.is_none() && self.liveness.is_none()
    }
}

/// One probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// What is checked.
    #[serde(flatten)]
    pub check: Check,
    /// How often.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
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

/// What a probe checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    /// An HTTP GET of `path` that answers one of `status`.
    Http {
        /// The path, from `/`.
        path: String,
        /// The container port.
        port: u16,
        /// The codes that pass; empty is 200 to 399.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        status: Vec<u16>,
    },
    /// A TCP connection to the port.
    Tcp {
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
    /// How messages name the check: `http GET :8084/ready`.
    pub fn describe(&self) -> String {
        match self {
            Check::Http { path, port, .. } => format!("http GET :{port}{path}"),
            Check::Tcp { port } => format!("tcp :{port}"),
            Check::Exec { command } => format!("exec {}", command.join(" ")),
        }
    }

    /// Whether an HTTP status passes.
    pub fn passes_status(&self, code: u16) -> bool {
        match self {
            Check::Http { status, .. } if !status.is_empty() => status.contains(&code),
            _ => (200..400).contains(&code),
        }
    }
}
