//! The JSON documents the store keeps under its keys: each one the typed
//! value of one key, read and written with serde.

use serde::{Deserialize, Serialize};
use voodu_model::{CoreSpec, EventLevel, NormalisedBlock, WorkloadId};
use voodu_plugin_abi::messages::Endpoint;
use voodu_store::{Event, NewEvent, Publication, Revision};

pub(crate) use voodu_store::rfc3339;

/// A workload as of its current revision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WorkloadDoc {
    pub(crate) revision: i64,
    pub(crate) spec_hash: String,
    pub(crate) core_spec: CoreSpec,
    pub(crate) blocks: Vec<NormalisedBlock>,
    pub(crate) source: Option<String>,
    pub(crate) created_ms: i64,
    pub(crate) updated_ms: i64,
    /// When `vd restart` last marked it; kept by every apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) restarted_ms: Option<i64>,
    /// The replicas `vd stop` froze; kept by every apply.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub(crate) frozen: std::collections::BTreeSet<String>,
}

/// One revision applied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RevisionDoc {
    pub(crate) revision: i64,
    pub(crate) spec_hash: String,
    pub(crate) core_spec: CoreSpec,
    pub(crate) blocks: Vec<NormalisedBlock>,
    pub(crate) applied_ms: i64,
    #[serde(default)]
    pub(crate) recreated: bool,
}

impl RevisionDoc {
    pub(crate) fn into_revision(self) -> Revision {
        Revision {
            revision: self.revision,
            spec_hash: self.spec_hash,
            applied_at: rfc3339(self.applied_ms),
            core_spec: self.core_spec,
            blocks: self.blocks,
            recreated: self.recreated,
        }
    }
}

/// One event, with its workload (`deployment/prod/esl`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EventDoc {
    pub(crate) workload: String,
    pub(crate) id: i64,
    pub(crate) at_ms: i64,
    pub(crate) level: EventLevel,
    pub(crate) reason: voodu_model::EventReason,
    pub(crate) message: String,
    /// The node that recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<String>,
}

impl EventDoc {
    pub(crate) fn new(id: i64, at_ms: i64, event: &NewEvent, node: Option<&str>) -> EventDoc {
        EventDoc {
            workload: event.workload.to_string(),
            id,
            at_ms,
            level: event.level,
            reason: event.reason.clone(),
            message: event.message.clone(),
            node: node.map(str::to_owned),
        }
    }

    /// Its workload; `None` for a key no voodu writes.
    pub(crate) fn workload(&self) -> Option<WorkloadId> {
        self.workload.parse().ok()
    }

    pub(crate) fn event(&self) -> Event {
        Event {
            id: self.id,
            at: rfc3339(self.at_ms),
            level: self.level,
            reason: self.reason.clone(),
            message: self.message.clone(),
            node: self.node.clone(),
        }
    }
}

/// The last set published to one block.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PublicationDoc {
    pub(crate) block_type: String,
    pub(crate) labels: Vec<String>,
    pub(crate) generation: u64,
    pub(crate) endpoints: Vec<Endpoint>,
    pub(crate) at_ms: i64,
    pub(crate) forgotten_ms: Option<i64>,
}

impl PublicationDoc {
    pub(crate) fn into_publication(self) -> Publication {
        Publication {
            block_type: self.block_type,
            labels: self.labels,
            generation: self.generation,
            endpoints: self.endpoints,
            at: rfc3339(self.at_ms),
            forgotten_at: self.forgotten_ms.map(rfc3339),
        }
    }
}

/// A deletion, unfinished or finished (a tombstone).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DeletionDoc {
    pub(crate) core_spec: CoreSpec,
    pub(crate) blocks: Vec<NormalisedBlock>,
    pub(crate) at_ms: i64,
    pub(crate) finished_ms: Option<i64>,
}

/// A config variable as stored: plain, or sealed under a secrets key (its
/// value then the nonce and ciphertext in hex). A document written before
/// sealing reads as plain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ConfigDoc {
    pub(crate) value: String,
    #[serde(default)]
    pub(crate) secret: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sealed_with: Option<String>,
}

impl ConfigDoc {
    /// The document of `stored`.
    pub(crate) fn of(stored: voodu_store::sealing::StoredValue) -> ConfigDoc {
        ConfigDoc {
            value: stored.value,
            secret: stored.secret,
            sealed_with: stored.sealed_with.map(|id| id.as_str().to_owned()),
        }
    }

    /// The value it stores.
    pub(crate) fn stored(self) -> voodu_store::sealing::StoredValue {
        voodu_store::sealing::StoredValue {
            value: self.value,
            secret: self.secret,
            sealed_with: self.sealed_with.map(voodu_store::sealing::KeyId::stored),
        }
    }
}
