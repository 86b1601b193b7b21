//! The cluster's leader and the placements it keeps.
//!
//! | key | value |
//! |---|---|
//! | `leader` | the leading node's name, held by that node's lease |
//! | `placements/<kind>/<scope>/<name>` | the workload's placement (JSON: its id and its slots) |
//! | `endpoints/<kind>/<scope>/<name>/<node>` | the node's serving replicas of the workload, held by the node's lease |
//!
//! One node at a time leads: it holds `leader` under its own lease, so a
//! lost leader leads no more once its lease expires, and another takes
//! over. Only the leader writes placements, and each write commits only
//! while `leader` still names it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, WatchOptions};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use voodu_model::placement::Placement;
use voodu_model::serving::ServingReplica;
use voodu_model::WorkloadId;
use voodu_store::StoreError;

use crate::EtcdStore;

/// The most placement writes in one transaction, under etcd's default
/// `--max-txn-ops` of 128.
const PLACEMENTS_PER_TXN: usize = 100;

/// A placement as stored: the workload it places, and its slots.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PlacementDoc {
    workload: WorkloadId,
    #[serde(flatten)]
    placement: Placement,
}

/// What a watch follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// The placements.
    Placements,
    /// The stored workloads.
    Workloads,
    /// The nodes and their records.
    Nodes,
    /// Every node's serving replicas.
    Endpoints,
    /// The plugins installed cluster-wide.
    Plugins,
    /// Their settings.
    PluginSettings,
    /// The drains asked of every node.
    Drains,
    /// The answers to them.
    DrainAnswers,
    /// The config buckets.
    Config,
}

impl EtcdStore {
    /// Leads the cluster as `node`, under `lease`, if no node does: whether
    /// `node` leads now.
    pub fn campaign(&self, node: &str, lease: i64) -> Result<bool, StoreError> {
        let key = self.keys.leader();
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                node.to_owned(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key, None)]);
        let response = self.call(move |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })?;
        if response.succeeded() {
            return Ok(true);
        }
        Ok(self.leader()?.as_deref() == Some(node))
    }

    /// `node` stops leading, if it leads: the `leader` key goes (only
    /// while it names `node`), so another node takes the lead at once
    /// rather than when `node`'s lease expires.
    pub fn resign(&self, node: &str) -> Result<(), StoreError> {
        let key = self.keys.leader();
        let txn = Txn::new()
            .when([Compare::value(
                key.clone(),
                CompareOp::Equal,
                node.to_owned(),
            )])
            .and_then([TxnOp::delete(key, None)]);
        self.call(move |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })?;
        Ok(())
    }

    /// The leading node's name, if a node leads.
    pub fn leader(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .get(self.keys.leader())?
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
    }

    /// Every stored placement, by workload.
    pub fn placements(&self) -> Result<BTreeMap<WorkloadId, Placement>, StoreError> {
        let mut placements = BTreeMap::new();
        for kv in self.range(self.keys.placements(), GetOptions::new())? {
            let doc: PlacementDoc = crate::from_json(&kv, "placement")?;
            placements.insert(doc.workload, doc.placement);
        }
        Ok(placements)
    }

    /// Stores `changed` placements and removes those of `gone` workloads,
    /// as the leader `node`: each transaction commits only while `leader`
    /// names `node`. `Ok(false)` when it leads no more.
    pub fn put_placements(
        &self,
        node: &str,
        changed: &[(WorkloadId, Placement)],
        gone: &[WorkloadId],
    ) -> Result<bool, StoreError> {
        let mut operations: Vec<TxnOp> = changed
            .iter()
            .map(|(workload, placement)| {
                let doc = PlacementDoc {
                    workload: workload.clone(),
                    placement: placement.clone(),
                };
                TxnOp::put(self.keys.placement(workload), crate::to_json(&doc), None)
            })
            .collect();
        operations.extend(
            gone.iter()
                .map(|workload| TxnOp::delete(self.keys.placement(workload), None)),
        );
        for batch in operations.chunks(PLACEMENTS_PER_TXN) {
            let txn = Txn::new()
                .when([Compare::value(
                    self.keys.leader(),
                    CompareOp::Equal,
                    node.as_bytes().to_vec(),
                )])
                .and_then(batch.to_vec());
            let response = self.call(move |mut client| {
                let txn = txn.clone();
                async move { client.txn(txn).await }
            })?;
            if !response.succeeded() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Notified whenever a key of `what` changes. The watch runs on the
    /// store's runtime and is opened again after a failure (the store
    /// unreachable), with a notification then, since changes may have been
    /// missed meanwhile.
    pub fn watch(&self, what: Watched) -> Arc<Notify> {
        let changed = Arc::new(Notify::new());
        let prefix = match what {
            Watched::Placements => self.keys.placements(),
            Watched::Workloads => self.keys.workloads(None),
            Watched::Nodes => self.keys.nodes(),
            Watched::Endpoints => self.keys.all_endpoints(),
            Watched::Plugins => self.keys.plugin_records(),
            Watched::PluginSettings => self.keys.all_plugin_settings(),
            Watched::Drains => self.keys.drains(),
            Watched::DrainAnswers => self.keys.all_drain_answers(),
            Watched::Config => self.keys.all_config(),
        };
        let notify = changed.clone();
        let client = self.client.clone();
        self.runtime.spawn(async move {
            loop {
                let mut watch_client = client.watch_client();
                match watch_client
                    .watch(prefix.clone(), Some(WatchOptions::new().with_prefix()))
                    .await
                {
                    Ok(mut stream) => {
                        notify.notify_one();
                        while let Ok(Some(response)) = stream.message().await {
                            if response.canceled() {
                                break;
                            }
                            if !response.events().is_empty() {
                                notify.notify_one();
                            }
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, prefix, "a watch could not be opened; trying again");
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        changed
    }
}

/// One node's serving replicas of one workload, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct EndpointsDoc {
    workload: WorkloadId,
    serving: Vec<ServingReplica>,
}

impl EtcdStore {
    /// Stores node `node`'s serving replicas of `workload` under its
    /// `lease`, so they vanish with it; none removes the key.
    pub fn put_endpoints(
        &self,
        node: &str,
        lease: i64,
        workload: &WorkloadId,
        serving: &[ServingReplica],
    ) -> Result<(), StoreError> {
        let key = self.keys.endpoints(workload, node);
        if serving.is_empty() {
            self.call(move |mut client| {
                let key = key.clone();
                async move { client.delete(key, None).await }
            })?;
            return Ok(());
        }
        let doc = crate::to_json(&EndpointsDoc {
            workload: workload.clone(),
            serving: serving.to_vec(),
        });
        self.put_leased(key, doc, lease)
    }

    /// Every node's serving replicas, by workload.
    pub fn endpoints(&self) -> Result<BTreeMap<WorkloadId, Vec<ServingReplica>>, StoreError> {
        let mut all: BTreeMap<WorkloadId, Vec<ServingReplica>> = BTreeMap::new();
        for kv in self.range(self.keys.all_endpoints(), GetOptions::new())? {
            let doc: EndpointsDoc = crate::from_json(&kv, "endpoints")?;
            all.entry(doc.workload).or_default().extend(doc.serving);
        }
        Ok(all)
    }
}

impl EtcdStore {
    /// The workloads whose document or deletion changed, as they change
    /// (another node applied, rolled back or deleted one): `None` when the
    /// watch was opened again after a failure, and changes may have been
    /// missed (the caller then looks at every workload).
    pub fn watch_workloads(&self) -> tokio::sync::mpsc::UnboundedReceiver<Option<WorkloadId>> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let client = self.client.clone();
        let keys = self.keys.clone();
        self.runtime.spawn(async move {
            loop {
                let mut watch_client = client.watch_client();
                let opened = watch_client
                    .watch(
                        keys.workloads(None),
                        Some(WatchOptions::new().with_prefix()),
                    )
                    .await;
                let deletions = watch_client
                    .watch(keys.deletions(), Some(WatchOptions::new().with_prefix()))
                    .await;
                match (opened, deletions) {
                    (Ok(mut workloads), Ok(mut deletions)) => {
                        if sender.send(None).is_err() {
                            return;
                        }
                        loop {
                            let response = tokio::select! {
                                response = workloads.message() => response,
                                response = deletions.message() => response,
                            };
                            let Ok(Some(response)) = response else {
                                break;
                            };
                            if response.canceled() {
                                break;
                            }
                            for event in response.events() {
                                let Some(kv) = event.kv() else {
                                    continue;
                                };
                                let id = keys
                                    .workload_id_of(kv.key())
                                    .or_else(|| keys.deletion_id_of(kv.key()));
                                if let Some(id) = id {
                                    if sender.send(Some(id)).is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    }
                    (opened, deletions) => {
                        tracing::debug!(
                            workloads = opened.is_ok(),
                            deletions = deletions.is_ok(),
                            "a workload watch could not be opened; trying again"
                        );
                    }
                }
                if sender.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        receiver
    }
}
