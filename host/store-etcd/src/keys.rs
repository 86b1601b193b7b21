//! The store's keys, all under one prefix (the table in the crate's
//! documentation). Scopes and names are lowercase letters, digits and
//! dashes (the parser checks), so `/` only ever separates; block labels
//! are free text, so a publication's key carries them hex-encoded.

use voodu_model::config::BucketName;
use voodu_model::{parse_kind_exact, WorkloadId};
use voodu_plugin_abi::messages::ClaimProtocol;
use voodu_plugin_abi::messages::WorkloadKind;

/// The name segment of a scope's own bucket in its keys.
const SCOPE_BUCKET: &str = "-";

/// Builds and reads the store's keys.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

/// A sequence number as a key part: 20 digits, so keys sort as numbers.
fn seq(number: i64) -> String {
    format!("{number:020}")
}

fn workload_path(id: &WorkloadId) -> String {
    format!("{}/{}/{}", id.kind.as_str(), id.scope, id.name)
}

/// The first key after every key that starts with `prefix`, for a range.
pub(crate) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The sequence number a key ends with.
pub(crate) fn id_of(key: &[u8]) -> Option<i64> {
    std::str::from_utf8(key)
        .ok()?
        .rsplit('/')
        .next()?
        .parse()
        .ok()
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn store_id(&self) -> String {
        format!("{}/meta/store_id", self.prefix)
    }

    pub(crate) fn event_seq(&self) -> String {
        format!("{}/meta/event_seq", self.prefix)
    }

    pub(crate) fn workloads(&self, kind: Option<WorkloadKind>) -> String {
        match kind {
            Some(kind) => format!("{}/workloads/{}/", self.prefix, kind.as_str()),
            None => format!("{}/workloads/", self.prefix),
        }
    }

    pub(crate) fn workload(&self, id: &WorkloadId) -> String {
        format!("{}/workloads/{}", self.prefix, workload_path(id))
    }

    pub(crate) fn revisions(&self, id: &WorkloadId) -> String {
        format!("{}/revisions/{}/", self.prefix, workload_path(id))
    }

    pub(crate) fn revision(&self, id: &WorkloadId, revision: i64) -> String {
        format!("{}{}", self.revisions(id), seq(revision))
    }

    pub(crate) fn events(&self) -> String {
        format!("{}/events/", self.prefix)
    }

    pub(crate) fn event(&self, id: i64) -> String {
        format!("{}{}", self.events(), seq(id))
    }

    pub(crate) fn workload_events(&self, id: &WorkloadId) -> String {
        format!("{}/workload-events/{}/", self.prefix, workload_path(id))
    }

    pub(crate) fn workload_event(&self, workload: &WorkloadId, id: i64) -> String {
        format!("{}{}", self.workload_events(workload), seq(id))
    }

    pub(crate) fn publications(&self, id: &WorkloadId) -> String {
        format!("{}/publications/{}/", self.prefix, workload_path(id))
    }

    pub(crate) fn publication(
        &self,
        id: &WorkloadId,
        block_type: &str,
        labels: &[String],
    ) -> String {
        let labels = serde_json::to_vec(labels).unwrap_or_default();
        format!(
            "{}{block_type}/{}",
            self.publications(id),
            hex::encode(labels)
        )
    }

    pub(crate) fn leader(&self) -> String {
        format!("{}/leader", self.prefix)
    }

    pub(crate) fn placements(&self) -> String {
        format!("{}/placements/", self.prefix)
    }

    pub(crate) fn placement(&self, id: &WorkloadId) -> String {
        format!("{}{}", self.placements(), workload_path(id))
    }

    pub(crate) fn all_endpoints(&self) -> String {
        format!("{}/endpoints/", self.prefix)
    }

    pub(crate) fn endpoints(&self, id: &WorkloadId, node: &str) -> String {
        format!("{}{}/{node}", self.all_endpoints(), workload_path(id))
    }

    pub(crate) fn drains(&self) -> String {
        format!("{}/drains/", self.prefix)
    }

    pub(crate) fn drain(&self, id: &str) -> String {
        format!("{}{id}", self.drains())
    }

    pub(crate) fn all_drain_answers(&self) -> String {
        format!("{}/drain-answers/", self.prefix)
    }

    pub(crate) fn drain_answers(&self, id: &str) -> String {
        format!("{}{id}/", self.all_drain_answers())
    }

    pub(crate) fn drain_answer(&self, id: &str, node: &str) -> String {
        format!("{}{node}", self.drain_answers(id))
    }

    /// Every config bucket's keys.
    pub(crate) fn all_config(&self) -> String {
        format!("{}/config/", self.prefix)
    }

    /// A bucket's keys: `config/<scope>/<name>/`, and `config/<scope>/-/`
    /// for a scope's own bucket (`-` can start no bucket name).
    pub(crate) fn config_bucket(&self, bucket: &BucketName) -> String {
        let name = if bucket.is_scope() {
            SCOPE_BUCKET
        } else {
            bucket.name.as_str()
        };
        format!("{}{}/{name}/", self.all_config(), bucket.scope)
    }

    /// The bucket a key under [`Keys::all_config`] belongs to.
    pub(crate) fn config_bucket_of(&self, key: &str) -> Option<BucketName> {
        let mut parts = key.strip_prefix(&self.all_config())?.split('/');
        let (scope, name) = (parts.next()?, parts.next()?);
        if name == SCOPE_BUCKET {
            scope.parse().ok()
        } else {
            format!("{scope}/{name}").parse().ok()
        }
    }

    pub(crate) fn config_value(&self, bucket: &BucketName, key: &str) -> String {
        format!("{}{key}", self.config_bucket(bucket))
    }

    /// A workload's config holds: `config-holds/<kind>/<scope>/<name>/`,
    /// a JSON `voodu_store::config::ConfigHold` under each hash.
    pub(crate) fn config_holds(&self, id: &WorkloadId) -> String {
        format!(
            "{}/config-holds/{}/{}/{}/",
            self.prefix,
            id.kind.as_str(),
            id.scope,
            id.name
        )
    }

    /// Every claim on one protocol and port: a JSON list of
    /// `voodu_store::claims::HeldClaim`.
    pub(crate) fn claims(&self, protocol: ClaimProtocol, port: u16) -> String {
        format!("{}/claims/{}/{port}", self.prefix, protocol.as_str())
    }

    pub(crate) fn deletions(&self) -> String {
        format!("{}/deletions/", self.prefix)
    }

    pub(crate) fn deletion(&self, id: &WorkloadId) -> String {
        format!("{}{}", self.deletions(), workload_path(id))
    }

    pub(crate) fn plugin_records(&self) -> String {
        format!("{}/plugin-records/", self.prefix)
    }

    pub(crate) fn plugin_record(&self, name: &str) -> String {
        format!("{}{name}", self.plugin_records())
    }

    pub(crate) fn all_plugin_settings(&self) -> String {
        format!("{}/plugin-settings/", self.prefix)
    }

    pub(crate) fn plugin_settings(&self, name: &str) -> String {
        format!("{}{name}", self.all_plugin_settings())
    }

    pub(crate) fn plugin_chunk_sets(&self, name: &str) -> String {
        format!("{}/plugin-chunks/{name}/", self.prefix)
    }

    pub(crate) fn plugin_chunks(&self, name: &str, sha256: &str) -> String {
        format!("{}{sha256}/", self.plugin_chunk_sets(name))
    }

    pub(crate) fn nodes(&self) -> String {
        format!("{}/nodes/", self.prefix)
    }

    pub(crate) fn node(&self, name: &str) -> String {
        format!("{}{name}", self.nodes())
    }

    pub(crate) fn node_records(&self) -> String {
        format!("{}/node-records/", self.prefix)
    }

    pub(crate) fn node_record(&self, name: &str) -> String {
        format!("{}{name}", self.node_records())
    }

    /// The workload a `workloads/<kind>/<scope>/<name>` key names.
    pub(crate) fn workload_id_of(&self, key: &[u8]) -> Option<WorkloadId> {
        self.id_after(key, &self.workloads(None))
    }

    /// The workload a `deletions/<kind>/<scope>/<name>` key names.
    pub(crate) fn deletion_id_of(&self, key: &[u8]) -> Option<WorkloadId> {
        self.id_after(key, &self.deletions())
    }

    fn id_after(&self, key: &[u8], prefix: &str) -> Option<WorkloadId> {
        let path = std::str::from_utf8(key).ok()?.strip_prefix(prefix)?;
        let mut parts = path.split('/');
        let (kind, scope, name) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        Some(WorkloadId::new(parse_kind_exact(kind)?, scope, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_number_and_read_back() {
        let keys = Keys::new("/voodu/");
        let id = WorkloadId::new(WorkloadKind::Deployment, "prod", "esl");
        assert_eq!(keys.workload(&id), "/voodu/workloads/deployment/prod/esl");
        assert_eq!(
            keys.workload_id_of(keys.workload(&id).as_bytes()),
            Some(id.clone())
        );
        assert!(keys.event(9) < keys.event(10));
        assert_eq!(id_of(keys.event(42).as_bytes()), Some(42));
        assert_eq!(prefix_end("/voodu/events/"), b"/voodu/events0".to_vec());
        assert!(keys
            .publication(&id, "traffik", &["a/b".into()])
            .starts_with("/voodu/publications/deployment/prod/esl/traffik/"));
    }
}
