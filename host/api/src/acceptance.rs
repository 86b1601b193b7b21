//! The report of `vd plugins:test`: an acceptance run of a plugin on the
//! engine, a throwaway controller driven through an operator's steps
//! (install, apply, rolling update, a replica killed, a scale down, a
//! delete), with load through the address the plugin serves when one is
//! given. Each step says how it ended, how long it took, and how many
//! requests went through while it ran.

use serde::{Deserialize, Serialize};

pub use crate::check::CheckOutcome as StepOutcome;
use crate::CallFigures;

/// Requests sent through the plugin's address while one step ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCount {
    /// Answered in full.
    pub answered: u64,
    /// Refused, cut or unanswered.
    pub failed: u64,
    /// The first failure's reason, when one failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
}

/// One step of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestStep {
    /// What was done (`rolling update of deployment/t/web`).
    pub name: String,
    /// How it ended: a step that did not do what it should fails, as does
    /// one that lost requests through the plugin meanwhile (but a replica
    /// killed, whose requests in flight are cut with it).
    pub outcome: StepOutcome,
    /// What was seen.
    pub detail: String,
    /// How long the step took, in milliseconds.
    pub took_ms: u64,
    /// The requests sent through the plugin while it ran, under load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestCount>,
}

/// The whole report, as `vd plugins:test -o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestReport {
    /// The plugin file tested.
    pub file: String,
    /// Every step, in order.
    pub steps: Vec<TestStep>,
    /// The plugin's calls over the run: how many of each, refused,
    /// failed, and their 99th percentile.
    pub calls: Vec<CallFigures>,
    /// Requests through the plugin over the whole run, under load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestCount>,
}

impl TestReport {
    /// Whether the plugin passed: no step failed (a step other than a
    /// replica killed fails when a request through the plugin was lost
    /// while it ran).
    pub fn passed(&self) -> bool {
        self.steps
            .iter()
            .all(|step| step.outcome != StepOutcome::Fail)
    }
}

/// Where `vd plugins:test --through` sends its load: the address the
/// plugin serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Through {
    /// `tcp://IP:PORT` (or `IP:PORT`): a connection, a line sent, a line
    /// read back.
    Tcp(std::net::SocketAddr),
    /// `http://IP:PORT/PATH`: a GET answered below 500.
    Http {
        /// Where.
        address: std::net::SocketAddr,
        /// The path asked for.
        path: String,
    },
}

impl std::str::FromStr for Through {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| {
            format!("{text:?} {why} — write tcp://IP:PORT, IP:PORT or http://IP:PORT/PATH")
        };
        let (http, rest) = match text.split_once("://") {
            Some(("http", rest)) => (true, rest),
            Some(("tcp", rest)) => (false, rest),
            Some(_) => return Err(bad("names a scheme other than tcp or http")),
            None => (false, text),
        };
        let (address, path) = match rest.find('/') {
            Some(slash) if http => (&rest[..slash], &rest[slash..]),
            Some(_) => return Err(bad("has a path, which only http:// takes")),
            None => (rest, "/"),
        };
        let address = address
            .parse()
            .map_err(|_| bad("does not name an IP address and port"))?;
        Ok(if http {
            Through::Http {
                address,
                path: path.to_owned(),
            }
        } else {
            Through::Tcp(address)
        })
    }
}

impl std::fmt::Display for Through {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Through::Tcp(address) => write!(f, "tcp://{address}"),
            Through::Http { address, path } => write!(f, "http://{address}{path}"),
        }
    }
}

/// What `vd plugins:test` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestPlan {
    /// The plugin's shared object.
    pub plugin: std::path::PathBuf,
    /// The manifest applied, whose workloads carry the plugin's blocks.
    pub manifest: std::path::PathBuf,
    /// Where load goes through the plugin, if anywhere.
    pub through: Option<Through>,
    /// The `vd` binary the throwaway controller and each step run as.
    pub vd: std::path::PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_through_address_is_tcp_or_http_and_a_wrong_one_says_how_to_write_it() {
        let tcp: Through = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(tcp, Through::Tcp("127.0.0.1:8080".parse().unwrap()));
        assert_eq!("tcp://127.0.0.1:8080".parse::<Through>().unwrap(), tcp);
        assert_eq!(
            "http://[::1]:80/health".parse::<Through>().unwrap(),
            Through::Http {
                address: "[::1]:80".parse().unwrap(),
                path: "/health".into()
            }
        );
        assert_eq!(
            "http://10.0.0.5:80".parse::<Through>().unwrap().to_string(),
            "http://10.0.0.5:80/"
        );
        for wrong in ["udp://1.2.3.4:5", "example.com:80", "tcp://1.2.3.4:5/x"] {
            let error = wrong.parse::<Through>().unwrap_err();
            assert!(error.contains("write tcp://IP:PORT"), "{error}");
        }
    }
}
