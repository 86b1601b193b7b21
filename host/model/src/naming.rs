//! voodu's conventions on the engine: labels, container names, network
//! aliases and replica ids.

use std::collections::HashMap;

use voodu_plugin_abi::messages::WorkloadKind;

use crate::{parse_kind_exact, WorkloadId};

/// The network every replica joins.
pub const NETWORK: &str = "voodu0";
/// The label (and value) every voodu container carries.
pub const CREATED_BY: (&str, &str) = ("createdby", "voodu");
/// The workload kind label.
pub const KIND_LABEL: &str = "voodu.kind";
/// The workload scope label.
pub const SCOPE_LABEL: &str = "voodu.scope";
/// The workload name label.
pub const NAME_LABEL: &str = "voodu.name";
/// The replica id label.
pub const REPLICA_LABEL: &str = "voodu.replica_id";
/// The spec hash label.
pub const HASH_LABEL: &str = "voodu.manifest_hash";

/// The label naming the controller (by its root) that owns a container, so
/// that two voodu roots on one host never touch each other's replicas.
pub const OWNER_LABEL: &str = "voodu.owner";

/// The label naming the store (by its identity) whose workload a container
/// was made for: a container whose store is not the controller's own was
/// made before that store was lost or replaced, and is never removed
/// unasked.
pub const STORE_LABEL: &str = "voodu.store";

/// The label holding, as JSON, the probes a replica was created with: a
/// replica is probed with its own revision's probes until it is removed,
/// never with a later revision's. `{}` when it has none.
pub const PROBES_LABEL: &str = "voodu.probes";
/// The label a job's run carries, with the run's id; it has no replica id,
/// so no listing of replicas takes it for one.
pub const RUN_LABEL: &str = "voodu.run";
/// What started a job's run, as the JSON of
/// [`crate::job::RunTrigger`].
pub const RUN_TRIGGER_LABEL: &str = "voodu.run_trigger";

/// `<scope>-<name>.<replica_id>`.
pub fn container_name(workload: &WorkloadId, replica_id: &str) -> String {
    format!("{}-{}.{replica_id}", workload.scope, workload.name)
}

/// The aliases a replica has on each network it joins: `<name>.<scope>`
/// and `<name>.<scope>.voodu`, shared by every replica of the workload, and
/// for a statefulset's ordinal N also its own `<name>-N.<scope>` and
/// `<name>-N.<scope>.voodu`, as voodu names them (so `pg-0.data` always
/// reaches ordinal 0, whatever else runs).
pub fn network_aliases(workload: &WorkloadId, replica_id: &str) -> Vec<String> {
    let (name, scope) = (&workload.name, &workload.scope);
    let mut aliases = vec![format!("{name}.{scope}"), format!("{name}.{scope}.voodu")];
    if workload.kind == WorkloadKind::Statefulset {
        aliases.push(format!("{name}-{replica_id}.{scope}"));
        aliases.push(format!("{name}-{replica_id}.{scope}.voodu"));
    }
    aliases
}

/// The labels of one replica's container.
pub fn labels(
    workload: &WorkloadId,
    replica_id: &str,
    spec_hash: &str,
    owner: &str,
) -> HashMap<String, String> {
    HashMap::from([
        (OWNER_LABEL.to_owned(), owner.to_owned()),
        (CREATED_BY.0.to_owned(), CREATED_BY.1.to_owned()),
        (KIND_LABEL.to_owned(), workload.kind.as_str().to_owned()),
        (SCOPE_LABEL.to_owned(), workload.scope.clone()),
        (NAME_LABEL.to_owned(), workload.name.clone()),
        (REPLICA_LABEL.to_owned(), replica_id.to_owned()),
        (HASH_LABEL.to_owned(), spec_hash.to_owned()),
    ])
}

/// The label filters that select one workload's containers (or all of
/// voodu's when `workload` is `None`).
pub fn label_filters(workload: Option<&WorkloadId>) -> Vec<String> {
    let mut filters = vec![format!("{}={}", CREATED_BY.0, CREATED_BY.1)];
    if let Some(workload) = workload {
        filters.push(format!("{KIND_LABEL}={}", workload.kind.as_str()));
        filters.push(format!("{SCOPE_LABEL}={}", workload.scope));
        filters.push(format!("{NAME_LABEL}={}", workload.name));
    }
    filters
}

/// The workload and replica id a container's labels name, if they are
/// voodu's.
pub fn identify(labels: &HashMap<String, String>) -> Option<(WorkloadId, String)> {
    Some((
        identify_workload(labels)?,
        labels.get(REPLICA_LABEL)?.clone(),
    ))
}

/// The workload a container's labels name, if they are voodu's: a
/// replica's, or an init or release step's (which has no replica id).
pub fn identify_workload(labels: &HashMap<String, String>) -> Option<WorkloadId> {
    if labels.get(CREATED_BY.0).map(String::as_str) != Some(CREATED_BY.1) {
        return None;
    }
    let kind = parse_kind_exact(labels.get(KIND_LABEL)?)?;
    Some(WorkloadId::new(
        kind,
        labels.get(SCOPE_LABEL)?,
        labels.get(NAME_LABEL)?,
    ))
}

/// A fresh deployment replica id: 4 random hex characters not in `taken`.
pub fn new_replica_id(taken: &[&str]) -> String {
    loop {
        let id = format!("{:04x}", fastrand::u16(..));
        if !taken.contains(&id.as_str()) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_aliases_follow_voodus_conventions() {
        let esl = WorkloadId::new(WorkloadKind::Deployment, "prod", "esl");
        assert_eq!(container_name(&esl, "a1f3"), "prod-esl.a1f3");
        assert_eq!(
            network_aliases(&esl, "a1f3"),
            ["esl.prod", "esl.prod.voodu"]
        );
        let pg = WorkloadId::new(WorkloadKind::Statefulset, "data", "pg");
        assert_eq!(
            network_aliases(&pg, "2"),
            ["pg.data", "pg.data.voodu", "pg-2.data", "pg-2.data.voodu"]
        );
        let labels = labels(&esl, "a1f3", "abc", "root1");
        assert_eq!(labels["voodu.owner"], "root1");
        assert_eq!(labels["createdby"], "voodu");
        assert_eq!(labels["voodu.manifest_hash"], "abc");
        assert_eq!(identify(&labels), Some((esl, "a1f3".to_owned())));
    }

    #[test]
    fn replica_ids_are_four_hex_characters_and_avoid_taken_ones() {
        let first = new_replica_id(&[]);
        assert_eq!(first.len(), 4);
        assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
        let second = new_replica_id(&[first.as_str()]);
        assert_ne!(first, second);
    }
}
