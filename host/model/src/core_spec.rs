//! The workload's core spec: the attributes and blocks voodu itself owns,
//! as stored and as plugins see it in a validate request's `workload`.
//! The parser (`voodu-manifest`) builds and type-checks it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use voodu_plugin_abi::messages::WorkloadKind;

use crate::build::Build;
use crate::config::BucketName;
use crate::container::{ContainerShape, InitStep, Release};
use crate::on_deploy::OnDeploy;
use crate::placement::NodeName;
use crate::ports::PortMapping;
use crate::probes::Probes;
use crate::resources::Resources;
use crate::secrets::SecretPlace;

/// The core attributes a workload may set: voodu's, and this voodu's own
/// (`drain_timeout`, `max_surge`, `progress_deadline`, `nodes`).
pub const CORE_ATTRIBUTES: &[&str] = &[
    "image",
    "replicas",
    "command",
    "env",
    "env_file",
    "env_from",
    "ports",
    "volumes",
    "networks",
    "network",
    "network_mode",
    "restart",
    "health_check",
    "post_deploy",
    "keep_releases",
    "extra_hosts",
    "cap_add",
    "ulimits",
    "docker_options",
    "drain_timeout",
    "max_surge",
    "progress_deadline",
    "nodes",
];

/// Core attributes this controller stores but does not act on yet, warned
/// about as the blocks of [`CORE_BLOCKS_NOT_ACTED_ON`] are.
pub const CORE_ATTRIBUTES_NOT_ACTED_ON: &[&str] = &["health_check", "post_deploy"];

/// The blocks voodu owns inside every workload; these never reach a plugin.
pub const CORE_BLOCKS: &[&str] = &[
    "build",
    "release",
    "depends_on",
    "resources",
    "autoscale",
    "on_deploy",
    "on_probe",
    "logs",
    "probes",
    "init",
];

/// Core blocks this controller stores but does not act on yet. An apply
/// warns about each, and `vd describe` marks it, so that no operator
/// believes one is in force.
pub const CORE_BLOCKS_NOT_ACTED_ON: &[&str] = &[
    "depends_on",
    "autoscale",
    "on_probe",
    "health_check",
    "post_deploy",
];

/// The warning for a core block (or attribute) this controller does not
/// act on.
pub fn not_acted_on_message(block_type: &str) -> String {
    if block_type == PORTS_NOT_PUBLISHED {
        "`ports` is stored but publishes nothing with network_mode \"host\" or \"none\": with the host's network the replica listens on the host's ports directly (Docker discards published ports there, as voodu's docker run does)".to_owned()
    } else if CORE_ATTRIBUTES_NOT_ACTED_ON.contains(&block_type) {
        format!("`{block_type}` is stored but not acted on by this voodu")
    } else {
        format!("`{block_type}` block is stored but not acted on by this voodu")
    }
}

/// What [`CoreSpec::blocks_not_acted_on`] lists for `ports` written beside
/// a `network_mode`, which publishes none of them.
pub const PORTS_NOT_PUBLISHED: &str = "ports";

/// How many revisions of a workload are kept when `keep_releases` is not
/// set (or not above 0), as voodu does.
pub const DEFAULT_KEEP_RELEASES: u32 = 5;

/// Core blocks that only statefulsets have.
pub const STATEFULSET_CORE_BLOCKS: &[&str] = &["volume_claim"];

/// How many new replicas a deployment's rolling update may start above its
/// replica count when `max_surge` is not set: one at a time.
pub const DEFAULT_MAX_SURGE: u32 = 1;
/// The largest `max_surge` accepted.
pub const MAX_MAX_SURGE: u32 = 100;

/// How long a new replica may take to become ready in a rollout when
/// `progress_deadline` is not set.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// The drain budget when `drain_timeout` is not set.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `name` is one of voodu's own blocks in a workload of `kind`.
pub fn is_core_block(kind: WorkloadKind, name: &str) -> bool {
    CORE_BLOCKS.contains(&name)
        || (kind == WorkloadKind::Statefulset && STATEFULSET_CORE_BLOCKS.contains(&name))
}

/// When the controller restarts a replica whose container exited, as
/// Docker's restart policies name them.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum RestartPolicy {
    /// Never.
    No,
    /// Always.
    Always,
    /// Only after a non-zero exit code.
    OnFailure,
    /// Always, unless an operator stopped it (the default).
    UnlessStopped,
}

impl RestartPolicy {
    /// The policy as written: `no`, `always`, `on-failure`, `unless-stopped`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The policy a word names, if any.
    pub fn parse(word: &str) -> Option<RestartPolicy> {
        word.parse().ok()
    }
}

/// A workload's core spec, as stored and as sent to plugins in the
/// `workload` field of a validate request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreSpec {
    /// The image to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// How many replicas to run.
    pub replicas: u32,
    /// The command, overriding the image's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Port mappings, checked at parse and stored as strings (see
    /// [`PortMapping`]).
    #[serde(default)]
    pub ports: Vec<PortMapping>,
    /// Volume mounts, `source:/target[:ro]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// Extra networks beside `voodu0`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<String>,
    /// When the controller restarts a replica that exited (default:
    /// always, as `unless-stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartPolicy>,
    /// The drain budget, written as a duration string (`"30s"`).
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// How many replicas a deployment's rolling update may start above
    /// `replicas` before old ones are drained and removed (default
    /// [`DEFAULT_MAX_SURGE`]). Statefulsets roll one ordinal at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<u32>,
    /// How long a new replica may take to become ready before its rollout
    /// fails (default [`DEFAULT_PROGRESS_DEADLINE`]), as a duration string.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "humantime_serde::option"
    )]
    pub progress_deadline: Option<Duration>,
    /// In a cluster, the only nodes that may run the workload's replicas;
    /// empty: any node. Without a cluster it has no effect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeName>,
    /// The container limits of the `resources` block; none set when there
    /// is no such block.
    #[serde(default, skip_serializing_if = "Resources::is_unlimited")]
    pub resources: Resources,
    /// The `probes` block, with every default filled in (its ports among
    /// them), so `vd describe` shows what runs; none when there is no such
    /// block.
    #[serde(default, skip_serializing_if = "Probes::is_empty")]
    pub probes: Probes,
    /// The config buckets whose variables are laid over `env`, in order
    /// (`env_from`); the workload's own bucket (`scope/name`) comes last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<BucketName>,
    /// The `release` block: commands run once per release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<Release>,
    /// The `build` block: the image is built from the context `vd apply`
    /// sends, and `image` names what it built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<Build>,
    /// The `on_deploy` webhooks, fired when a rollout settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_deploy: Option<OnDeploy>,
    /// A job's or cronjob's own settings (timeout, history limits, a
    /// cronjob's schedule); `None` for a deployment or statefulset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<crate::job::JobSpec>,
    /// The `init "name"` steps, in declaration order, run before each
    /// replica's main container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init: Vec<InitStep>,
    /// How many revisions to keep (`keep_releases`); `None`:
    /// [`DEFAULT_KEEP_RELEASES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_releases: Option<u32>,
    /// What shapes the container beyond the above: `ulimits`, `cap_add`,
    /// `network_mode`, `extra_hosts`, `logs`, `docker_options`,
    /// `volume_claim`s; at the top level of the JSON, as voodu names them.
    #[serde(flatten)]
    pub shape: ContainerShape,
    /// The core blocks this controller stores but does not act on
    /// (`init "migrate"`, `autoscale`, ...) as JSON, keyed by type;
    /// labelled ones are keyed by type, then label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub blocks: BTreeMap<String, Value>,
    /// Where secrets of config buckets reached this spec and its blocks
    /// through `${NAME}`, recorded at apply so that every view shows them
    /// hidden ([`crate::secrets`]); absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretPlace>,
}

/// What shapes a container, as [`CoreSpec::container_hash`] reads it: a
/// typed view of the core spec, so a field is in the hash by being named
/// here. The optional parts are left out while unset, so that containers
/// made before voodu acted on them keep their hash and do not roll.
#[derive(Serialize)]
struct ContainerDefinition<'a> {
    image: &'a Option<String>,
    command: &'a [String],
    env: &'a BTreeMap<String, String>,
    ports: &'a [PortMapping],
    volumes: &'a [String],
    networks: &'a [String],
    restart: &'a Option<RestartPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<&'a Resources>,
    #[serde(skip_serializing_if = "Option::is_none")]
    probes: Option<&'a Probes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    init: Option<&'a [InitStep]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env_from: Option<&'a [BucketName]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<&'a ContainerShape>,
}

impl CoreSpec {
    /// The hash of everything that shapes a container, and of its probes
    /// (a replica is probed with its own revision's probes, so new probes
    /// take effect through new replicas, surge-first): 24 hex digits.
    ///
    /// Every field of the spec is named below, in the hash or out of it
    /// with why, and a field added to [`CoreSpec`] does not compile here
    /// until it is one or the other: a new field never changes, or fails
    /// to change, the hash of running containers by accident.
    pub fn container_hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let CoreSpec {
            image,
            command,
            env,
            ports,
            volumes,
            networks,
            restart,
            resources,
            probes,
            init,
            env_from,
            shape,
            // Scaling changes how many, not what each one is.
            replicas: _,
            // How a rollout or a removal goes, not what it makes.
            drain_timeout: _,
            max_surge: _,
            progress_deadline: _,
            // Where replicas run, not what they are.
            nodes: _,
            // Run once per release, beside the replicas.
            release: _,
            // `image` names what it built.
            build: _,
            // Webhooks after a rollout.
            on_deploy: _,
            // A job's runs are not replicas.
            job: _,
            // How many revisions are kept.
            keep_releases: _,
            // Stored, not acted on.
            blocks: _,
            // Where secrets came from; their values are in `env` and the
            // rest already.
            secrets: _,
        } = self;
        let definition = ContainerDefinition {
            image,
            command,
            env,
            ports,
            volumes,
            networks,
            restart,
            resources: resources.any().then_some(resources),
            probes: (!probes.is_empty()).then_some(probes),
            init: (!init.is_empty()).then_some(init.as_slice()),
            // The buckets' order decides which value wins.
            env_from: (!env_from.is_empty()).then_some(env_from.as_slice()),
            shape: (!shape.is_empty()).then_some(shape),
        };
        // Through a JSON value, as the hash was always taken: its text is
        // what is hashed, so stored containers keep theirs.
        let text = serde_json::to_value(&definition)
            .expect("cannot fail: the spec is strings, numbers and maps with string keys")
            .to_string();
        hex::encode(&Sha256::digest(text.as_bytes())[..12])
    }
}

impl CoreSpec {
    /// A spec that runs `replicas` of `image` with every other attribute at
    /// its default, as a manifest with only `image` and `replicas` parses.
    pub fn of_image(image: impl Into<String>, replicas: u32) -> CoreSpec {
        CoreSpec {
            image: Some(image.into()),
            replicas,
            command: Vec::new(),
            env: BTreeMap::new(),
            ports: Vec::new(),
            volumes: Vec::new(),
            networks: Vec::new(),
            restart: None,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            max_surge: None,
            progress_deadline: None,
            nodes: Vec::new(),
            resources: Resources::default(),
            probes: Probes::default(),
            env_from: Vec::new(),
            init: Vec::new(),
            on_deploy: None,
            job: None,
            build: None,
            release: None,
            keep_releases: None,
            shape: ContainerShape::default(),
            blocks: BTreeMap::new(),
            secrets: Vec::new(),
        }
    }

    /// The buckets whose variables go into the replicas' env, in the order
    /// they are laid over `env`: its scope's (`prod`), `env_from`'s, then
    /// the workload's own (`prod/api`).
    pub fn buckets(&self, workload: &crate::WorkloadId) -> Vec<BucketName> {
        let scope = BucketName::of_scope(&workload.scope);
        let own = BucketName {
            scope: workload.scope.clone(),
            name: workload.name.clone(),
        };
        let mut buckets = vec![scope.clone()];
        buckets.extend(
            self.env_from
                .iter()
                .filter(|bucket| **bucket != own && **bucket != scope)
                .cloned(),
        );
        buckets.push(own);
        buckets
    }

    /// How many revisions to keep.
    pub fn releases_kept(&self) -> u32 {
        self.keep_releases.unwrap_or(DEFAULT_KEEP_RELEASES)
    }

    /// The first container port, the default port a plugin block
    /// publishes; `None` when there are no ports.
    pub fn first_container_port(&self) -> Option<u16> {
        self.ports.first().map(|mapping| mapping.container_port)
    }

    /// The rolling update's surge: `max_surge`, or [`DEFAULT_MAX_SURGE`].
    pub fn surge(&self) -> u32 {
        self.max_surge.unwrap_or(DEFAULT_MAX_SURGE)
    }

    /// The core blocks it holds that this controller does not act on, in
    /// name order.
    pub fn blocks_not_acted_on(&self) -> Vec<&str> {
        let mut blocks: Vec<&str> = self
            .blocks
            .keys()
            .map(String::as_str)
            // `init`, `release`, `on_deploy` or `build` in `blocks` is a spec stored
            // before they ran: applied again, they run.
            .filter(|block| {
                CORE_BLOCKS_NOT_ACTED_ON.contains(block)
                    || ["init", "release", "on_deploy", "build"].contains(block)
            })
            .collect();
        if self.resources.requests.is_some() {
            blocks.push("resources.requests");
        }
        if self.shape.network_mode.is_some() && !self.ports.is_empty() {
            blocks.push(PORTS_NOT_PUBLISHED);
        }
        blocks.sort_unstable();
        blocks
    }

    /// How long a new replica may take to become ready.
    pub fn progress_deadline(&self) -> Duration {
        self.progress_deadline.unwrap_or(DEFAULT_PROGRESS_DEADLINE)
    }

    /// The drain budget.
    pub fn drain_budget(&self) -> Duration {
        self.drain_timeout
    }

    /// The restart policy, `unless-stopped` when none is written.
    pub fn restart_policy(&self) -> RestartPolicy {
        self.restart.unwrap_or(RestartPolicy::UnlessStopped)
    }
}
