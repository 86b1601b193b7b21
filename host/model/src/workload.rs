//! What a parsed manifest holds: workloads, their typed core spec, and their
//! plugin blocks in source order. Nothing here knows about plugins, the store
//! or Docker.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use voodu_plugin_abi::messages::{Addressing, Block, Claim, WorkloadKind};

use crate::core_spec::CoreSpec;

/// A place in a manifest file: `prod.hcl:7:3`. Lines and columns count from 1.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Location {
    /// The file as the operator named it.
    pub file: String,
    /// One-based line.
    pub line: usize,
    /// One-based column, in characters.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A workload's identity: `deployment/prod/esl`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkloadId {
    /// `deployment`, `statefulset`, `job` or `cronjob`.
    pub kind: WorkloadKind,
    /// The first label: the scope the workload lives in.
    pub scope: String,
    /// The second label: the workload's name within its scope.
    pub name: String,
}

impl WorkloadId {
    /// A workload id from its three parts.
    pub fn new(kind: WorkloadKind, scope: impl Into<String>, name: impl Into<String>) -> Self {
        WorkloadId {
            kind,
            scope: scope.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for WorkloadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.scope, self.name)
    }
}

/// Why a `KIND/SCOPE/NAME` string is not a workload id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a workload: {reason} — write it as KIND/SCOPE/NAME, for example deployment/prod/esl")]
pub struct WorkloadIdError {
    input: String,
    reason: &'static str,
}

impl FromStr for WorkloadId {
    type Err = WorkloadIdError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |reason| WorkloadIdError {
            input: input.to_owned(),
            reason,
        };
        let mut parts = input.split('/');
        let (Some(kind), Some(scope), Some(name), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(error("it needs exactly three parts"));
        };
        // voodu's `app` is applied here as its deployment, so its refs
        // (`app/prod/web`) name that deployment.
        let kind = match kind {
            "app" => Some(WorkloadKind::Deployment),
            kind => parse_kind(kind),
        }
        .ok_or_else(|| error("the kind is deployment, statefulset, job or cronjob"))?;
        if scope.is_empty() || name.is_empty() {
            return Err(error("the scope and the name cannot be empty"));
        }
        Ok(WorkloadId::new(kind, scope, name))
    }
}

/// The workload kind a manifest keyword names, if any. Plural forms are
/// accepted too, as `vd get deployments` spells them.
pub fn parse_kind(word: &str) -> Option<WorkloadKind> {
    match word {
        "deployment" | "deployments" => Some(WorkloadKind::Deployment),
        "statefulset" | "statefulsets" => Some(WorkloadKind::Statefulset),
        "job" | "jobs" => Some(WorkloadKind::Job),
        "cronjob" | "cronjobs" => Some(WorkloadKind::Cronjob),
        _ => None,
    }
}

/// The workload kind a stored kind string names (singular only).
pub fn parse_kind_exact(word: &str) -> Option<WorkloadKind> {
    match word {
        "deployment" => Some(WorkloadKind::Deployment),
        "statefulset" => Some(WorkloadKind::Statefulset),
        "job" => Some(WorkloadKind::Job),
        "cronjob" => Some(WorkloadKind::Cronjob),
        _ => None,
    }
}

/// A plugin block as written: type, labels and body as opaque JSON, and
/// where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginBlock {
    /// The block as the plugin sees it at validate (`spec` is the body).
    pub block: Block,
    /// Where the block starts.
    pub location: Location,
    /// Where each of its options is written, by the JSON pointer into
    /// `block.spec` a plugin's refusal names it with (`/port`,
    /// `/@blocks/0/spec/port`).
    pub option_locations: std::collections::BTreeMap<String, Location>,
}

impl PluginBlock {
    /// Where the option at JSON pointer `pointer` is written: the option
    /// itself, else the nearest enclosing one that is written (a pointer
    /// into an object value names its attribute), else the block.
    pub fn location_of(&self, pointer: &str) -> &Location {
        let mut at = pointer;
        loop {
            if let Some(location) = self.option_locations.get(at) {
                return location;
            }
            match at.rfind('/') {
                Some(cut) if cut > 0 => at = &at[..cut],
                _ => return &self.location,
            }
        }
    }
}

impl PluginBlock {
    /// How messages name the block: `traffik block` or `traffik "sip" block`.
    pub fn display_name(&self) -> String {
        block_display_name(&self.block.block_type, &self.block.labels)
    }
}

/// How messages name a block: `traffik block`, or `traffik "sip" block` when
/// it has labels.
pub fn block_display_name(block_type: &str, labels: &[String]) -> String {
    let mut name = block_type.to_owned();
    for label in labels {
        name.push(' ');
        name.push_str(&hcl_quoted(label));
    }
    name.push_str(" block");
    name
}

/// A string as HCL writes it: in quotes, with HCL's escapes (`\"`, `\\`,
/// `\n`, `$${`), and every other character as it is.
pub fn hcl_quoted(text: &str) -> String {
    hcl::format::to_string(&hcl::Expression::String(text.to_owned()))
        .expect("cannot fail: a string expression is formatted into memory")
}

/// One workload parsed from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// `deployment/prod/esl`.
    pub id: WorkloadId,
    /// The typed core attributes and voodu's own blocks.
    pub core: CoreSpec,
    /// Every plugin block, in source order.
    pub plugin_blocks: Vec<PluginBlock>,
    /// Where each of voodu's own blocks was written, by type, in source
    /// order; then where each attribute voodu stores but does not act on
    /// (`health_check`), and a `resources` block's `requests`
    /// (`resources.requests`), were.
    pub core_blocks_at: Vec<(String, Location)>,
    /// Where the workload block starts.
    pub location: Location,
    /// Where each of its attributes' values was written, by name, in
    /// source order, so a problem found after parsing (an `env_from`
    /// bucket without variables) is located at its attribute.
    pub attributes_at: Vec<(String, Location)>,
    /// The secrets of config buckets its `${NAME}`s took: the apply
    /// records where they land, so that no view shows them.
    pub secrets: Vec<crate::secrets::SecretUse>,
}

impl Workload {
    /// Where attribute `name`'s value was written; the workload's own
    /// place when it was not written.
    pub fn attribute_location(&self, name: &str) -> Location {
        self.attributes_at
            .iter()
            .find(|(written, _)| written == name)
            .map_or_else(|| self.location.clone(), |(_, at)| at.clone())
    }
}

/// One manifest file's name and text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestSource {
    /// The file as the operator named it; used in locations.
    pub path: String,
    /// The file's text.
    pub text: String,
}

/// A plugin block after its plugin validated it: what the store keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NormalisedBlock {
    /// The block type, which is also its plugin's name.
    #[serde(rename = "type")]
    pub block_type: String,
    /// The block's labels, in source order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// The spec as the plugin normalised it, defaults filled in.
    pub spec: Value,
    /// What the plugin asked voodu to publish, as stored:
    /// `{"port": N, "addressing": "ip"|"dns"|"none"}`.
    pub endpoints: EndpointEnvelope,
    /// What the block holds alone across every workload (the address it
    /// listens on), as its plugin's validate named it; absent when none,
    /// so a block without claims is stored, and hashed, as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
}

/// What a plugin asked voodu to publish for one block (the envelope of its
/// validate reply, with the workload's first container port filled in when
/// the plugin named none): typed once at apply, stored and read as this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointEnvelope {
    /// The container port; `null` only for a block that asked for no
    /// endpoints.
    pub port: Option<u16>,
    /// IP, DNS, or no addressing.
    #[serde(default)]
    pub addressing: Addressing,
}

impl EndpointEnvelope {
    /// Whether the block is published to and drained: it asked for
    /// endpoints, and has a port (an address is never published without
    /// one; apply refuses such a block, so only a store written by an older
    /// voodu can hold one).
    pub fn takes_endpoints(&self) -> bool {
        self.addressing != Addressing::None && self.port.is_some()
    }
}

impl NormalisedBlock {
    /// The block as plugin messages carry it (type, labels, normalised spec).
    pub fn to_block(&self) -> Block {
        Block {
            block_type: self.block_type.clone(),
            labels: self.labels.clone(),
            spec: self.spec.clone(),
        }
    }

    /// How messages name the block: `traffik "sip" block`.
    pub fn display_name(&self) -> String {
        block_display_name(&self.block_type, &self.labels)
    }

    /// Whether two blocks are the same block (same type and labels), whatever
    /// their specs.
    pub fn same_identity(&self, other: &NormalisedBlock) -> bool {
        self.block_type == other.block_type && self.labels == other.labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_ids_round_trip_through_their_display_form() {
        let id: WorkloadId = "statefulset/db/pg".parse().unwrap();
        assert_eq!(id, WorkloadId::new(WorkloadKind::Statefulset, "db", "pg"));
        assert_eq!(id.to_string(), "statefulset/db/pg");
    }

    #[test]
    fn voodus_app_refs_name_the_deployment_it_is_applied_as() {
        let id: WorkloadId = "app/prod/web".parse().unwrap();
        assert_eq!(id, WorkloadId::new(WorkloadKind::Deployment, "prod", "web"));
    }

    #[test]
    fn malformed_workload_ids_say_how_to_write_one() {
        let error = "deployment/esl".parse::<WorkloadId>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "\"deployment/esl\" is not a workload: it needs exactly three parts — write it as KIND/SCOPE/NAME, for example deployment/prod/esl"
        );
        assert!("pod/prod/esl".parse::<WorkloadId>().is_err());
    }

    #[test]
    fn labelled_blocks_are_named_with_their_labels_quoted() {
        assert_eq!(block_display_name("traffik", &[]), "traffik block");
        assert_eq!(
            block_display_name("traffik", &["sip".into()]),
            "traffik \"sip\" block"
        );
    }

    #[test]
    fn labels_are_quoted_as_hcl_writes_them() {
        assert_eq!(
            block_display_name("ledger", &["🦀 crab 👩\u{200d}👩\u{200d}👧".into()]),
            "ledger \"🦀 crab 👩\u{200d}👩\u{200d}👧\" block"
        );
        assert_eq!(hcl_quoted("a\"b\\c\nd ${x}"), r#""a\"b\\c\nd $${x}""#);
    }
}

#[cfg(test)]
mod envelope_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_endpoint_envelope_is_stored_in_the_shape_apply_always_wrote() {
        let ip = EndpointEnvelope {
            port: Some(8084),
            addressing: Addressing::Ip,
        };
        assert_eq!(
            serde_json::to_string(&ip).expect("serialises"),
            r#"{"port":8084,"addressing":"ip"}"#
        );
        let none = EndpointEnvelope {
            port: None,
            addressing: Addressing::None,
        };
        assert_eq!(
            serde_json::to_value(none).expect("serialises"),
            json!({"port": null, "addressing": "none"})
        );
        // What earlier versions stored reads back typed; a word voodu never
        // wrote is refused rather than taken for IP.
        let stored: EndpointEnvelope =
            serde_json::from_value(json!({"port": 5060, "addressing": "dns"})).expect("reads");
        assert_eq!(stored.port, Some(5060));
        assert!(serde_json::from_value::<EndpointEnvelope>(
            json!({"port": 1, "addressing": "carrier-pigeon"})
        )
        .is_err());
        assert!(ip.takes_endpoints() && !none.takes_endpoints());
    }
}
