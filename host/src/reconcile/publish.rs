//! Endpoint publication: the whole live set of each block, to the block's
//! plugin, only when it changed. Only running replicas are listed; the
//! address is `IP:port` on `voodu0`, or `container-name:port` for a block
//! whose plugin asked for DNS addressing at validate.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde_json::Value;
use voodu_plugin_abi::messages::{Addressing, Endpoint, PublishRequest};

use crate::manifest::{NormalisedBlock, WorkloadId};
use crate::plugin::PluginRegistry;
use crate::runtime::Replica;
use crate::store::{EventLevel, NewEvent, Store};

/// What the plugin asked voodu to publish for one block (the envelope of its
/// validate reply, as stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointEnvelope {
    /// The container port, if any.
    pub port: Option<u16>,
    /// IP or DNS addressing.
    pub addressing: Addressing,
}

impl EndpointEnvelope {
    /// Reads the stored envelope; voodu never reads the block's spec.
    pub fn of(block: &NormalisedBlock) -> Self {
        EndpointEnvelope {
            port: block
                .endpoints
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|port| u16::try_from(port).ok()),
            addressing: match block.endpoints.get("addressing").and_then(Value::as_str) {
                Some("dns") => Addressing::Dns,
                _ => Addressing::Ip,
            },
        }
    }
}

/// The endpoint set of one block: running replicas only, by replica id.
pub fn endpoint_set(block: &NormalisedBlock, replicas: &[Replica]) -> Vec<Endpoint> {
    let envelope = EndpointEnvelope::of(block);
    let mut endpoints: Vec<Endpoint> = replicas
        .iter()
        .filter(|replica| replica.is_running())
        .filter_map(|replica| {
            let host = match envelope.addressing {
                Addressing::Ip => replica.ip.clone()?,
                Addressing::Dns => replica.container_name.clone(),
            };
            Some(Endpoint {
                replica_id: replica.replica_id.clone(),
                address: match envelope.port {
                    Some(port) => format!("{host}:{port}"),
                    None => host,
                },
            })
        })
        .collect();
    endpoints.sort_by(|a, b| a.replica_id.cmp(&b.replica_id));
    endpoints
}

type BlockKey = (WorkloadId, String, Vec<String>);

#[derive(Debug, Clone)]
struct Published {
    generation: u64,
    endpoints: Vec<Endpoint>,
    /// The block's spec when it was sent: a changed spec is sent again.
    spec: Value,
}

/// Remembers what each block was last sent, so an unchanged set is not sent
/// again and generations keep rising (across restarts, from the store).
#[derive(Debug, Default)]
pub struct Publisher {
    sent: Mutex<HashMap<BlockKey, Published>>,
}

impl Publisher {
    /// Publishes each block's live set if it changed since the last publish
    /// in this process. Failures are returned as warnings and recorded as
    /// events; the set is then sent again next time.
    pub fn publish(
        &self,
        plugins: &PluginRegistry,
        store: &Mutex<Store>,
        workload: &WorkloadId,
        blocks: &[NormalisedBlock],
        replicas: &[Replica],
    ) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut events = Vec::new();
        let mut sent = self.sent.lock();
        // A block dropped from the workload is forgotten here too, so that
        // adding it back publishes it again.
        sent.retain(|(id, block_type, labels), _| {
            id != workload
                || blocks
                    .iter()
                    .any(|block| &block.block_type == block_type && &block.labels == labels)
        });
        for block in blocks {
            let key = (
                workload.clone(),
                block.block_type.clone(),
                block.labels.clone(),
            );
            let endpoints = endpoint_set(block, replicas);
            let previous = sent.get(&key).cloned();
            let stored = match &previous {
                Some(_) => None,
                None => store
                    .lock()
                    .publications(workload)
                    .ok()
                    .and_then(|publications| {
                        publications
                            .into_iter()
                            .find(|p| p.block_type == block.block_type && p.labels == block.labels)
                    }),
            };
            let unchanged = match (&previous, &stored) {
                // Sent in this process: resend when the set or the block's
                // spec changed.
                (Some(previous), _) => {
                    previous.endpoints == endpoints && previous.spec == block.spec
                }
                // This plugin instance has heard nothing yet: tell it the
                // set, unless there is nothing to tell and nothing was told
                // before the restart either.
                (None, stored) => {
                    endpoints.is_empty() && stored.as_ref().is_none_or(|p| p.endpoints.is_empty())
                }
            };
            if unchanged {
                continue;
            }
            let last_generation = match (&previous, &stored) {
                (Some(previous), _) => previous.generation,
                (None, stored) => stored
                    .as_ref()
                    .map_or(0, |publication| publication.generation),
            };
            let generation = last_generation + 1;
            let Some(plugin) = plugins.get(&block.block_type) else {
                warnings.push(format!(
                    "{}: plugin \"{}\" is not installed, so the endpoint set was not published",
                    block.display_name(),
                    block.block_type
                ));
                continue;
            };
            let request = PublishRequest {
                kind: workload.kind,
                scope: workload.scope.clone(),
                name: workload.name.clone(),
                block: block.to_block(),
                generation,
                endpoints: endpoints.clone(),
            };
            match plugin.publish(&request) {
                Ok(()) => {
                    if let Err(error) = store.lock().record_publication(
                        workload,
                        &block.block_type,
                        &block.labels,
                        generation,
                        &endpoints,
                    ) {
                        warnings.push(format!("the publication could not be recorded: {error}"));
                    }
                    events.push(NewEvent {
                        workload: workload.clone(),
                        level: EventLevel::Info,
                        reason: "published".into(),
                        message: format!(
                            "{}: generation {generation}, {} endpoint(s): {}",
                            block.display_name(),
                            endpoints.len(),
                            endpoints
                                .iter()
                                .map(|e| format!("{}={}", e.replica_id, e.address))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    });
                    sent.insert(
                        key,
                        Published {
                            generation,
                            endpoints,
                            spec: block.spec.clone(),
                        },
                    );
                }
                Err(error) => {
                    let message = format!("{}: publish failed: {error}", block.display_name());
                    events.push(NewEvent {
                        workload: workload.clone(),
                        level: EventLevel::Warning,
                        reason: "publish-failed".into(),
                        message: message.clone(),
                    });
                    warnings.push(message);
                }
            }
        }
        drop(sent);
        if !events.is_empty() {
            if let Err(error) = store.lock().record_events(&events) {
                warnings.push(format!("publish events could not be recorded: {error}"));
            }
        }
        warnings
    }

    /// Forgets what a deleted workload's blocks were sent.
    pub fn forget_workload(&self, workload: &WorkloadId) {
        self.sent.lock().retain(|(id, _, _), _| id != workload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use voodu_plugin_abi::messages::WorkloadKind;

    fn replica(id: &str, ip: &str, running: bool) -> Replica {
        Replica {
            container_id: id.into(),
            container_name: format!("prod-esl.{id}"),
            workload: WorkloadId::new(WorkloadKind::Deployment, "prod", "esl"),
            replica_id: id.into(),
            spec_hash: "h".into(),
            state: if running { "running" } else { "exited" }.into(),
            ip: Some(ip.into()),
            created: 0,
            owner: None,
        }
    }

    fn block(endpoints: Value) -> NormalisedBlock {
        NormalisedBlock {
            block_type: "traffik".into(),
            labels: vec![],
            spec: json!({"port": 8084}),
            endpoints,
        }
    }

    #[test]
    fn only_running_replicas_are_listed_with_ip_and_port() {
        let replicas = [
            replica("b2", "172.18.0.6", true),
            replica("a1", "172.18.0.5", true),
            replica("c3", "172.18.0.7", false),
        ];
        let set = endpoint_set(&block(json!({"port": 8084, "addressing": "ip"})), &replicas);
        let addresses: Vec<_> = set
            .iter()
            .map(|e| (e.replica_id.as_str(), e.address.as_str()))
            .collect();
        assert_eq!(
            addresses,
            [("a1", "172.18.0.5:8084"), ("b2", "172.18.0.6:8084")]
        );
    }

    #[test]
    fn dns_addressing_uses_container_names() {
        let set = endpoint_set(
            &block(json!({"port": 5060, "addressing": "dns"})),
            &[replica("a1", "172.18.0.5", true)],
        );
        assert_eq!(set[0].address, "prod-esl.a1:5060");
    }
}
