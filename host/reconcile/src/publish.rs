//! Endpoint publication: the whole live set of each block, to the block's
//! plugin, only when it changed. Only running replicas are listed; the
//! address is `IP:port` on `voodu0`, or `container-name:port` for a block
//! whose plugin asked for DNS addressing at validate.
//!
//! Each plugin has its own **lane**: a queue of blocks waiting to be sent
//! and one task that sends them, one call at a time, on a blocking thread.
//! [`Publisher::offer`] only computes sets and queues them; it never calls a
//! plugin. The newest set offered for a block supersedes one not yet sent,
//! so a plugin that is slow (or wedged, up to its call bound) delays only its
//! own blocks and receives only the newest set once it answers. No lock is
//! held across a plugin call: the lane's lock guards its queue and its
//! memory of what was sent, and is released before the call.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use voodu_model::EventReason;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{oneshot, Notify};
use voodu_plugin_abi::messages::{Block, Endpoint, PublishRequest};

use super::plugins::BlockPlugins;
use voodu_model::serving::ServingReplica;
use voodu_model::{NormalisedBlock, WorkloadId};
use voodu_store::{EventLevel, NewEvent, StateStore};

/// The endpoint set of one block: its address of each serving replica,
/// here or on another node, by replica id (then node).
pub fn endpoint_set(block: &NormalisedBlock, serving: &[ServingReplica]) -> Vec<Endpoint> {
    let envelope = block.endpoints;
    let Some(port) = envelope.port.filter(|_| envelope.takes_endpoints()) else {
        return Vec::new();
    };
    let mut endpoints: Vec<Endpoint> = serving
        .iter()
        .filter_map(|replica| {
            Some(Endpoint {
                replica_id: replica.replica_id.clone(),
                address: replica.address(envelope.addressing, port)?,
                node: replica.node.as_ref().map(ToString::to_string),
            })
        })
        .collect();
    endpoints.sort_by(|a, b| (&a.replica_id, &a.node).cmp(&(&b.replica_id, &b.node)));
    endpoints
}

/// The event line of one publication: `echo "http" block: generation 4, 2
/// endpoints: 5ed8=172.19.0.2:8084, ef74=172.19.0.3:8084`, or `..., no
/// endpoints` for an empty set.
pub fn publication_line(block: &str, generation: u64, endpoints: &[Endpoint]) -> String {
    let listed: Vec<String> = endpoints
        .iter()
        .map(|endpoint| format!("{}={}", endpoint.replica_id, endpoint.address))
        .collect();
    match listed.len() {
        0 => format!("{block}: generation {generation}, no endpoints"),
        1 => format!(
            "{block}: generation {generation}, 1 endpoint: {}",
            listed[0]
        ),
        count => format!(
            "{block}: generation {generation}, {count} endpoints: {}",
            listed.join(", ")
        ),
    }
}

/// A block, by workload, type and labels.
type BlockKey = (WorkloadId, String, Vec<String>);

fn key_of(workload: &WorkloadId, block: &NormalisedBlock) -> BlockKey {
    (
        workload.clone(),
        block.block_type.clone(),
        block.labels.clone(),
    )
}

/// How a publish ended: the generation it was sent with, or why it failed.
pub type PublishOutcome = Result<u64, String>;

/// Resolves when the set offered for one block (or a newer one that
/// superseded it) has been sent, or failed.
#[derive(Debug)]
pub struct PublishTicket {
    /// `traffik "http" block`.
    pub block: String,
    /// The outcome, once known.
    pub outcome: oneshot::Receiver<PublishOutcome>,
}

#[derive(Debug, Clone)]
struct Published {
    endpoints: Vec<Endpoint>,
    /// The block's spec when it was sent: a changed spec is sent again.
    spec: Value,
    /// False once the plugin was replaced: the new instance has heard
    /// nothing, so the set is sent again even if unchanged.
    delivered: bool,
}

#[derive(Debug)]
struct Pending {
    block: NormalisedBlock,
    endpoints: Vec<Endpoint>,
    waiters: Vec<oneshot::Sender<PublishOutcome>>,
    /// When the earliest change this set carries was seen: the publish
    /// latency counts from it.
    since: std::time::Instant,
}

#[derive(Debug, Default)]
struct LaneState {
    order: VecDeque<BlockKey>,
    pending: HashMap<BlockKey, Pending>,
    /// The set being sent right now, per block, with who waits for it.
    in_flight: HashMap<BlockKey, Pending>,
    sent: HashMap<BlockKey, Published>,
    /// The last generation used per block, sent or failed.
    generations: HashMap<BlockKey, u64>,
}

/// One plugin's queue of blocks to publish.
#[derive(Debug)]
struct Lane {
    plugin: String,
    state: Mutex<LaneState>,
    wake: Notify,
}

/// Sends endpoint sets to plugins, one lane per plugin.
pub struct Publisher {
    plugins: Arc<dyn BlockPlugins>,
    store: Arc<dyn StateStore>,
    lanes: Mutex<HashMap<String, Arc<Lane>>>,
    /// Told each publish's latency.
    tally: crate::tally::Tally,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

impl Publisher {
    /// A publisher sending through `plugins` and recording each publication
    /// in `store` (generations survive restarts through it), and telling
    /// `tally` how long each set took to be published.
    pub(crate) fn new(
        plugins: Arc<dyn BlockPlugins>,
        store: Arc<dyn StateStore>,
        tally: crate::tally::Tally,
    ) -> Arc<Publisher> {
        Arc::new(Publisher {
            plugins,
            store,
            lanes: Mutex::new(HashMap::new()),
            tally,
        })
    }

    fn lane(self: &Arc<Self>, plugin: &str) -> Arc<Lane> {
        let mut lanes = self.lanes.lock();
        if let Some(lane) = lanes.get(plugin) {
            return lane.clone();
        }
        let lane = Arc::new(Lane {
            plugin: plugin.to_owned(),
            state: Mutex::new(LaneState::default()),
            wake: Notify::new(),
        });
        lanes.insert(plugin.to_owned(), lane.clone());
        tokio::spawn(self.clone().run_lane(lane.clone()));
        lane
    }

    /// Offers each block of a workload the live set of `serving`. A block
    /// whose set (and spec) is what its plugin last heard is left alone; any
    /// other is queued on its plugin's lane, superseding a set not yet sent.
    /// Returns a ticket per queued block. Blocks of the workload that are no
    /// longer in `blocks` are forgotten here, so adding one back publishes
    /// it again. Never calls a plugin. `since`: when the change was seen;
    /// a set that supersedes one not yet sent keeps the earlier time.
    pub fn offer(
        self: &Arc<Self>,
        workload: &WorkloadId,
        blocks: &[NormalisedBlock],
        serving: &[ServingReplica],
        since: std::time::Instant,
    ) -> Vec<PublishTicket> {
        // A block a new revision dropped is forgotten by the node that
        // stored it before its pass gets here; another node of a cluster
        // learns of it here, and tells its own plugin to forget it.
        let unwanted = self.drop_where(|(id, block_type, labels)| {
            id == workload
                && !blocks
                    .iter()
                    .any(|block| &block.block_type == block_type && &block.labels == labels)
        });
        if !unwanted.is_empty() {
            let plugins = self.plugins.clone();
            let workload = workload.clone();
            tokio::task::spawn_blocking(move || {
                crate::forget::forget_heard(&workload, &unwanted, &*plugins)
            });
        }
        let mut tickets = Vec::new();
        for block in blocks
            .iter()
            .filter(|block| block.endpoints.takes_endpoints())
        {
            let key = key_of(workload, block);
            let endpoints = endpoint_set(block, serving);
            let lane = self.lane(&block.block_type);
            let mut state = lane.state.lock();
            let (sender, receiver) = oneshot::channel();
            if let Some(pending) = state.pending.get_mut(&key) {
                // Not sent yet: the newest set takes its place.
                pending.block = block.clone();
                pending.endpoints = endpoints;
                pending.waiters.push(sender);
            } else if let Some(in_flight) = state.in_flight.get_mut(&key).filter(|sending| {
                sending.endpoints == endpoints && sending.block.spec == block.spec
            }) {
                // Being sent right now: wait for that.
                in_flight.waiters.push(sender);
            } else {
                let unchanged = match state.sent.get(&key) {
                    Some(sent) => {
                        sent.delivered && sent.endpoints == endpoints && sent.spec == block.spec
                    }
                    // This plugin instance has heard nothing of the block
                    // yet: tell it the set, unless there is nothing to tell
                    // and nothing was told before a restart either.
                    None => {
                        endpoints.is_empty()
                            && self
                                .stored_endpoints_empty(workload, block)
                                .unwrap_or(false)
                    }
                };
                if unchanged {
                    continue;
                }
                state.pending.insert(
                    key.clone(),
                    Pending {
                        block: block.clone(),
                        endpoints,
                        waiters: vec![sender],
                        since,
                    },
                );
                state.order.push_back(key);
            }
            drop(state);
            lane.wake.notify_one();
            tickets.push(PublishTicket {
                block: block.display_name(),
                outcome: receiver,
            });
        }
        tickets
    }

    /// Whether the store says the block was last published an empty set (or
    /// never). `None` when the store cannot say.
    fn stored_endpoints_empty(
        &self,
        workload: &WorkloadId,
        block: &NormalisedBlock,
    ) -> Option<bool> {
        let publications = self.store.publications(workload).ok()?;
        Some(
            publications
                .iter()
                .find(|p| p.block_type == block.block_type && p.labels == block.labels)
                .is_none_or(|p| p.endpoints.is_empty()),
        )
    }

    /// The plugin was replaced: its new instance has heard nothing, so the
    /// next offer of each of its blocks is sent even if unchanged.
    pub fn plugin_replaced(&self, plugin: &str) {
        if let Some(lane) = self.lanes.lock().get(plugin) {
            for sent in lane.state.lock().sent.values_mut() {
                sent.delivered = false;
            }
        }
    }

    /// Forgets what a deleted workload's blocks were sent, and drops the
    /// sets queued for them; the blocks whose plugin had been sent a set.
    pub fn forget_workload(&self, workload: &WorkloadId) -> Vec<Block> {
        self.drop_where(|(id, _, _)| id == workload)
    }

    /// Drops `blocks` of `workload`, which a new revision removed: a set
    /// queued for one is never sent, and one in flight is not recorded.
    /// Called before their plugins are told to forget them.
    pub fn drop_blocks(&self, workload: &WorkloadId, blocks: &[NormalisedBlock]) {
        let _ = self.drop_where(|(id, block_type, labels)| {
            id == workload
                && blocks
                    .iter()
                    .any(|block| &block.block_type == block_type && &block.labels == labels)
        });
    }

    /// Drops every block `dropped` picks from every lane: what it was sent,
    /// what is queued for it, and its generation (so a set in flight is
    /// known to be unwanted when it returns). Returns the blocks whose
    /// plugin had been sent a set, as it heard them.
    fn drop_where(&self, dropped: impl Fn(&BlockKey) -> bool) -> Vec<Block> {
        let lanes: Vec<Arc<Lane>> = self.lanes.lock().values().cloned().collect();
        let mut heard = Vec::new();
        for lane in &lanes {
            let mut state = lane.state.lock();
            state.sent.retain(|key, published| {
                if !dropped(key) {
                    return true;
                }
                let (_, block_type, labels) = key;
                heard.push(Block {
                    block_type: block_type.clone(),
                    labels: labels.clone(),
                    spec: published.spec.clone(),
                });
                false
            });
            state.pending.retain(|key, _| !dropped(key));
            state.order.retain(|key| !dropped(key));
            state.generations.retain(|key, _| !dropped(key));
        }
        heard
    }

    /// The last generation used for a block: from this process, or from the
    /// store after a restart. An unreadable store is an error, never a
    /// generation count restarted from zero.
    fn last_generation(&self, lane: &Lane, key: &BlockKey) -> Result<u64, String> {
        if let Some(generation) = lane.state.lock().generations.get(key) {
            return Ok(*generation);
        }
        let (workload, block_type, labels) = key;
        let publications = self
            .store
            .publications(workload)
            .map_err(|error| format!("the last generation could not be read: {error}"))?;
        Ok(publications
            .iter()
            .find(|p| &p.block_type == block_type && &p.labels == labels)
            .map_or(0, |p| p.generation))
    }

    /// The lane's sender: takes the oldest queued block, sends its newest
    /// set on a blocking thread, records the outcome, and goes on.
    async fn run_lane(self: Arc<Self>, lane: Arc<Lane>) {
        loop {
            let notified = lane.wake.notified();
            let next = {
                let mut state = lane.state.lock();
                let key = state.order.pop_front();
                key.and_then(|key| {
                    let pending = state.pending.remove(&key)?;
                    let sending = (
                        pending.block.clone(),
                        pending.endpoints.clone(),
                        pending.since,
                    );
                    state.in_flight.insert(key.clone(), pending);
                    Some((key, sending))
                })
            };
            let Some((key, (block, endpoints, since))) = next else {
                notified.await;
                continue;
            };
            let outcome = self.send(&lane, &key, &block, &endpoints).await;
            if outcome.is_ok() {
                self.tally.published(&key.0, &block, since.elapsed());
            }
            let waiters = lane
                .state
                .lock()
                .in_flight
                .remove(&key)
                .map(|sent| sent.waiters)
                .unwrap_or_default();
            for waiter in waiters {
                let _ = waiter.send(outcome.clone());
            }
        }
    }

    async fn send(
        &self,
        lane: &Lane,
        key: &BlockKey,
        block: &NormalisedBlock,
        endpoints: &[Endpoint],
    ) -> PublishOutcome {
        let (workload, _, _) = key;
        let generation = match self.last_generation(lane, key) {
            Ok(last) => last + 1,
            Err(error) => {
                self.record(
                    workload,
                    EventLevel::Warning,
                    EventReason::PublishFailed,
                    format!("{}: not published: {error}", block.display_name()),
                );
                return Err(error);
            }
        };
        lane.state
            .lock()
            .generations
            .insert(key.clone(), generation);
        let request = PublishRequest {
            kind: workload.kind,
            scope: workload.scope.clone(),
            name: workload.name.clone(),
            block: block.to_block(),
            generation,
            endpoints: endpoints.to_vec(),
        };
        let plugins = self.plugins.clone();
        let plugin = lane.plugin.clone();
        let result = tokio::task::spawn_blocking(move || plugins.publish(&plugin, &request))
            .await
            .unwrap_or_else(|error| {
                Err(super::plugins::BlockCallError::Failed(format!(
                    "the publish call panicked in the host: {error}"
                )))
            });
        match result {
            Ok(()) => {
                let mut state = lane.state.lock();
                // A block dropped (or its workload forgotten) while its set
                // was in flight stays dropped, in memory and in the store:
                // the check and the record are under the lane's lock, which
                // a drop takes before the block is forgotten, so a dropped
                // block's publication is never recorded after it (a store
                // write under the lane lock; never a plugin call).
                let still_wanted = state.generations.get(key) == Some(&generation);
                if still_wanted {
                    state.sent.insert(
                        key.clone(),
                        Published {
                            endpoints: endpoints.to_vec(),
                            spec: block.spec.clone(),
                            delivered: true,
                        },
                    );
                    let recorded = self.store.record_publication(
                        workload,
                        &block.block_type,
                        &block.labels,
                        generation,
                        endpoints,
                    );
                    if let Err(error) = recorded {
                        tracing::warn!(%error, "a publication could not be recorded");
                    }
                }
                drop(state);
                self.record(
                    workload,
                    EventLevel::Info,
                    EventReason::Published,
                    publication_line(&block.display_name(), generation, endpoints),
                );
                Ok(generation)
            }
            Err(error) => {
                let message = format!("{}: publish failed: {error}", block.display_name());
                self.record(
                    workload,
                    EventLevel::Warning,
                    EventReason::PublishFailed,
                    message.clone(),
                );
                Err(message)
            }
        }
    }

    fn record(
        &self,
        workload: &WorkloadId,
        level: EventLevel,
        reason: EventReason,
        message: String,
    ) {
        let event = NewEvent {
            workload: workload.clone(),
            level,
            reason,
            message,
        };
        if let Err(error) = self.store.record_events(&[event]) {
            tracing::warn!(%error, "a publish event could not be recorded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn replica(id: &str, ip: Option<&str>) -> ServingReplica {
        ServingReplica {
            node: None,
            replica_id: id.into(),
            ip: ip.map(str::to_owned),
            container_name: format!("prod-esl.{id}"),
            host_address: Some("10.0.0.7".into()),
            host_ports: [(8084, 32768)].into(),
        }
    }

    fn block(endpoints: Value) -> NormalisedBlock {
        let endpoints = serde_json::from_value(endpoints).expect("an envelope");
        NormalisedBlock {
            claims: Vec::new(),
            block_type: "traffik".into(),
            labels: vec![],
            spec: json!({"port": 8084}),
            endpoints,
        }
    }

    #[test]
    fn serving_replicas_are_listed_with_ip_and_port_by_replica_id() {
        let mut peer = replica("a1", Some("172.18.0.5"));
        peer.node = Some("b".parse().unwrap());
        let replicas = [replica("b2", Some("172.18.0.6")), peer, replica("c3", None)];
        let set = endpoint_set(&block(json!({"port": 8084, "addressing": "ip"})), &replicas);
        let addresses: Vec<_> = set
            .iter()
            .map(|e| (e.replica_id.as_str(), e.address.as_str(), e.node.as_deref()))
            .collect();
        assert_eq!(
            addresses,
            [
                ("a1", "172.18.0.5:8084", Some("b")),
                ("b2", "172.18.0.6:8084", None)
            ],
            "one with no address yet is left out"
        );
    }

    #[test]
    fn host_addressing_uses_the_node_address_and_the_published_port() {
        let set = endpoint_set(
            &block(json!({"port": 8084, "addressing": "host"})),
            &[replica("a1", Some("172.18.0.5"))],
        );
        assert_eq!(set[0].address, "10.0.0.7:32768");
    }

    #[test]
    fn dns_addressing_uses_container_names() {
        let set = endpoint_set(
            &block(json!({"port": 5060, "addressing": "dns"})),
            &[replica("a1", Some("172.18.0.5"))],
        );
        assert_eq!(set[0].address, "prod-esl.a1:5060");
    }

    #[test]
    fn publication_lines_read_well_for_empty_single_and_many_sets() {
        let endpoint = |id: &str| Endpoint {
            replica_id: id.into(),
            address: format!("172.19.0.2:{id}"),
            node: None,
        };
        assert_eq!(
            publication_line("echo block", 3, &[]),
            "echo block: generation 3, no endpoints"
        );
        assert_eq!(
            publication_line("echo block", 4, &[endpoint("1")]),
            "echo block: generation 4, 1 endpoint: 1=172.19.0.2:1"
        );
        assert_eq!(
            publication_line("echo block", 5, &[endpoint("1"), endpoint("2")]),
            "echo block: generation 5, 2 endpoints: 1=172.19.0.2:1, 2=172.19.0.2:2"
        );
    }

    #[test]
    fn no_address_is_published_without_a_port() {
        let replicas = [replica("a1", Some("172.18.0.5"))];
        assert!(endpoint_set(&block(json!({"addressing": "ip"})), &replicas).is_empty());
        assert!(
            endpoint_set(&block(json!({"port": 80, "addressing": "none"})), &replicas).is_empty()
        );
    }
}
