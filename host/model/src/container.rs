//! The attributes voodu documents that shape a replica's container beyond
//! its image, command, env, ports and volumes: `ulimits`, `cap_add`,
//! `network_mode`, `extra_hosts`, `logs`, `docker_options`, and a
//! statefulset's `volume_claim`s. Each is stored typed, as the parser
//! (`voodu-manifest`) checked it, and the runtime sets it on every
//! container.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One `ulimits` entry: `"65536"` (soft and hard alike), `"1024:65536"`
/// (soft, hard), or `"-1"` (unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Ulimit {
    /// The soft limit; -1 is unlimited.
    pub soft: i64,
    /// The hard limit; -1 is unlimited.
    pub hard: i64,
}

/// Why a string is not a ulimit value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a ulimit value — write \"65536\", \"1024:65536\" (soft:hard) or \"-1\" (unlimited)")]
pub struct UlimitError(String);

impl FromStr for Ulimit {
    type Err = UlimitError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let number = |part: &str| {
            part.trim()
                .parse::<i64>()
                .ok()
                .filter(|value| *value >= -1)
                .ok_or_else(|| UlimitError(text.to_owned()))
        };
        let (soft, hard) = match text.split_once(':') {
            Some((soft, hard)) => (number(soft)?, number(hard)?),
            None => {
                let both = number(text)?;
                (both, both)
            }
        };
        let unlimited = |value: i64| value == -1;
        if !unlimited(hard) && (unlimited(soft) || soft > hard) {
            return Err(UlimitError(text.to_owned()));
        }
        Ok(Ulimit { soft, hard })
    }
}

impl TryFrom<String> for Ulimit {
    type Error = UlimitError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<Ulimit> for String {
    fn from(ulimit: Ulimit) -> String {
        ulimit.to_string()
    }
}

impl fmt::Display for Ulimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.soft == self.hard {
            write!(f, "{}", self.soft)
        } else {
            write!(f, "{}:{}", self.soft, self.hard)
        }
    }
}

/// The ulimits voodu sets on every container, unless `ulimits` names the
/// resource: `nofile = "65536:65536"`, `nproc = "4096:4096"`.
pub fn default_ulimits() -> BTreeMap<String, Ulimit> {
    BTreeMap::from([
        (
            "nofile".to_owned(),
            Ulimit {
                soft: 65536,
                hard: 65536,
            },
        ),
        (
            "nproc".to_owned(),
            Ulimit {
                soft: 4096,
                hard: 4096,
            },
        ),
    ])
}

/// The resources a ulimit may name, as Docker names them.
pub const ULIMIT_NAMES: &[&str] = &[
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// `network_mode` other than the default bridge (`voodu0`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum NetworkMode {
    /// The host's network: the replica listens on the host's addresses,
    /// and plugins reach it at 127.0.0.1.
    Host,
    /// No network at all: no endpoints to publish.
    None,
}

/// The `logs` block: Docker's json-file rotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Logs {
    /// The size of one file, in Docker's units (`"10m"`).
    pub max_size: String,
    /// How many files are kept.
    pub max_files: u32,
}

impl Default for Logs {
    /// voodu's default: 10m × 3.
    fn default() -> Self {
        Logs {
            max_size: "10m".to_owned(),
            max_files: 3,
        }
    }
}

/// One `volume_claim "name" { mount_path size }` of a statefulset: a
/// Docker volume per ordinal, `voodu-<scope>-<name>-<claim>-<ordinal>`,
/// never removed by voodu.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeClaim {
    /// Where it is mounted in the container.
    pub mount_path: String,
    /// Its size, as written (`"10Gi"`): informational, as in voodu.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
}

/// The `docker_options` this voodu passes to the engine, parsed from the
/// `docker run` flags they were written as.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerOptions {
    /// `--shm-size`, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<i64>,
    /// `--pids-limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
    /// `--sysctl KEY=VALUE`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    /// `--device HOST[:CONTAINER[:PERMISSIONS]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// `--privileged`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
    /// `--cap-drop`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    /// `--security-opt`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_opt: Vec<String>,
    /// `--tmpfs PATH[:OPTIONS]`: path to options.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tmpfs: BTreeMap<String, String>,
    /// `--init`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub init: bool,
    /// `--read-only`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// `--user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `--workdir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// `--hostname`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// `--dns`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// `--dns-search`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns_search: Vec<String>,
    /// `--group-add`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_add: Vec<String>,
    /// `--stop-signal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    /// `--oom-score-adj`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i64>,
    /// `--ipc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipc: Option<String>,
    /// `--cpu-shares`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_shares: Option<i64>,
    /// `--cpuset-cpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset_cpus: Option<String>,
}

impl DockerOptions {
    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        *self == DockerOptions::default()
    }
}

/// Everything of this module a container is created with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerShape {
    /// `ulimits`, as written; [`default_ulimits`] fill in the rest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ulimits: BTreeMap<String, Ulimit>,
    /// `cap_add`: Linux capabilities, without `CAP_`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    /// `network_mode`; `None` is the bridge, `voodu0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_mode: Option<NetworkMode>,
    /// `extra_hosts`: `"name:ip"` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_hosts: Vec<String>,
    /// The `logs` block, when written; voodu's default otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<Logs>,
    /// `docker_options`, parsed.
    #[serde(default, skip_serializing_if = "DockerOptions::is_empty")]
    pub docker_options: DockerOptions,
    /// A statefulset's `volume_claim` blocks, by claim name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volume_claims: BTreeMap<String, VolumeClaim>,
}

impl ContainerShape {
    /// Whether nothing is set (every default applies).
    pub fn is_empty(&self) -> bool {
        *self == ContainerShape::default()
    }

    /// The ulimits a container is created with: those written, and
    /// `defaults` (voodu's, as this host allows them) for the rest.
    pub fn effective_ulimits(
        &self,
        defaults: BTreeMap<String, Ulimit>,
    ) -> BTreeMap<String, Ulimit> {
        let mut ulimits = defaults;
        ulimits.extend(
            self.ulimits
                .iter()
                .map(|(name, value)| (name.clone(), *value)),
        );
        ulimits
    }

    /// The log rotation a container is created with.
    pub fn effective_logs(&self) -> Logs {
        self.logs.clone().unwrap_or_default()
    }
}

/// How long an init step may run when `timeout` is not set, as voodu
/// documents.
pub const DEFAULT_INIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// One `init "name" { ... }` step: a one-shot container run, in
/// declaration order, before each replica's main container is created.
/// It inherits the replica's env, volumes, networks, extra hosts and
/// capabilities; not its resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitStep {
    /// Its name (the block's label).
    pub name: String,
    /// What it runs.
    pub command: Vec<String>,
    /// Its image; the workload's when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// How long it may run before it is killed and counts as failed.
    #[serde(with = "humantime_serde")]
    pub timeout: std::time::Duration,
    /// How often it is run again after a failure, 2 s apart.
    #[serde(default)]
    pub retries: u32,
    /// Its own limits: the workload's are not inherited.
    #[serde(
        default,
        skip_serializing_if = "crate::resources::Resources::is_unlimited"
    )]
    pub resources: crate::resources::Resources,
    /// Its own ulimits, replacing the workload's when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ulimits: Option<BTreeMap<String, Ulimit>>,
    /// Its own docker options, replacing the workload's when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_options: Option<DockerOptions>,
}

/// The `release { pre_command command post_command timeout }` block of a
/// deployment: commands run once per release (a new container hash), in a
/// one-shot container of the new image with the replicas' env.
/// `pre_command` and `command` run before the first new replica is
/// created, and one that fails stops the rollout with the old replicas
/// serving; `post_command` runs once the rollout is done, and its failure
/// is only a warning.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    /// Runs first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_command: Vec<String>,
    /// The release's task (a migration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Runs after the rollout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_command: Vec<String>,
    /// How long each may run (10m by default).
    #[serde(with = "humantime_serde")]
    pub timeout: std::time::Duration,
}

/// The Docker volume of one statefulset ordinal's claim, as voodu names
/// it: `voodu-<scope>-<name>-<claim>-<ordinal>`.
pub fn claim_volume_name(scope: &str, name: &str, claim: &str, ordinal: &str) -> String {
    format!("voodu-{scope}-{name}-{claim}-{ordinal}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulimits_read_voodus_forms_and_write_them_back() {
        let both: Ulimit = "1048576".parse().unwrap();
        assert_eq!((both.soft, both.hard), (1048576, 1048576));
        assert_eq!(both.to_string(), "1048576");
        let pair: Ulimit = "1024:65536".parse().unwrap();
        assert_eq!((pair.soft, pair.hard), (1024, 65536));
        assert_eq!(pair.to_string(), "1024:65536");
        assert_eq!("-1".parse::<Ulimit>().unwrap().hard, -1);
        assert!("65536:1024".parse::<Ulimit>().is_err(), "soft above hard");
        assert!("lots".parse::<Ulimit>().is_err());
    }

    #[test]
    fn written_ulimits_override_voodus_defaults_key_by_key() {
        let shape = ContainerShape {
            ulimits: BTreeMap::from([("nofile".to_owned(), "1048576".parse().unwrap())]),
            ..ContainerShape::default()
        };
        let effective = shape.effective_ulimits(default_ulimits());
        assert_eq!(effective["nofile"].soft, 1048576);
        assert_eq!(effective["nproc"].soft, 4096);
        assert_eq!(ContainerShape::default().effective_logs(), Logs::default());
        assert!(ContainerShape::default().is_empty());
        assert_eq!(
            serde_json::to_value(&shape).unwrap(),
            serde_json::json!({"ulimits": {"nofile": "1048576"}})
        );
    }
}
