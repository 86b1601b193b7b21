//! The nodes of a cluster: each node registers itself under a lease and
//! keeps it alive; its record stays after it is gone, so `vd get nodes`
//! names a lost node and when it was last seen.
//!
//! | key | value |
//! |---|---|
//! | `nodes/<name>` | the node, held by its lease: present while it is alive |
//! | `node-records/<name>` | the node's record (JSON): started, last seen, plugins, replicas |
//!
//! **One active node per cluster in this release.** Every node stores its
//! replicas' state on its own host; until replicas are placed across
//! nodes, a second node would run every workload a second time. So a node
//! joins only when no other is alive ([`JoinError::AnotherNodeActive`]),
//! and a node whose lease is lost stops acting ([`Membership::lost`]): a
//! node started after it (the host replaced) takes over the desired state.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::{cluster, now_ms, EtcdStore};
use voodu_store::StoreError;

/// A plugin a node has loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlugin {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The plugin ABI it was built against.
    pub abi: String,
}

/// What a node reports of itself, updated while it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The plugins it has loaded.
    pub plugins: Vec<NodePlugin>,
    /// How many replicas it runs.
    pub replicas: usize,
}

/// A node as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Its name (`--node`).
    pub name: String,
    /// Whether its lease is held: the node is alive.
    #[serde(default)]
    pub alive: bool,
    /// When it joined, Unix milliseconds.
    pub started_ms: i64,
    /// When it last renewed its record, Unix milliseconds.
    pub last_seen_ms: i64,
    /// What it last reported.
    #[serde(flatten)]
    pub report: NodeReport,
}

/// Why a node could not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A node of this name is alive.
    #[error("node \"{0}\" is already alive in this cluster — stop it first, or start this one with another --node")]
    NameTaken(String),
    /// Another node is active, and this release runs one per cluster.
    #[error("node \"{0}\" is active in this cluster, and this voodu runs one active node per cluster (replicas are not yet placed across nodes) — stop it first; this node then takes over its workloads")]
    AnotherNodeActive(String),
    /// The cluster store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// This node's place in the cluster: its lease kept alive, its record
/// renewed. Leaving (dropping it) revokes the lease, so the others see it
/// gone at once.
pub struct Membership {
    name: String,
    lease: i64,
    report: Arc<Mutex<NodeReport>>,
    lost: Arc<AtomicBool>,
    lost_notify: Arc<Notify>,
    stop: Arc<Notify>,
    store: Arc<EtcdStore>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Joins the cluster as node `name`, under a lease of `ttl`.
    pub fn join(
        self: &Arc<Self>,
        name: &str,
        ttl: Duration,
        report: NodeReport,
    ) -> Result<Membership, JoinError> {
        let ttl_secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let lease = self
            .call(move |mut client| async move { client.lease_grant(ttl_secs, None).await })?
            .id();
        let started = now_ms();
        let record = NodeRecord {
            name: name.to_owned(),
            alive: true,
            started_ms: started,
            last_seen_ms: started,
            report: report.clone(),
        };
        let node_key = self.keys.node(name);
        let nodes = self.keys.nodes();
        // Alive means holding a key under `nodes/`: none may be, for this
        // node to be the cluster's active one.
        let txn = Txn::new()
            .when([Compare::version(nodes.clone(), CompareOp::Equal, 0).with_prefix()])
            .and_then([
                TxnOp::put(
                    node_key.clone(),
                    name.to_owned(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::put(self.keys.node_record(name), crate::to_json(&record), None),
            ]);
        let joined = self
            .call(move |mut client| {
                let txn = txn.clone();
                async move { client.txn(txn).await }
            })?
            .succeeded();
        if !joined {
            // Refused: the lease it was granted is given back.
            let _ = self.call(move |mut client| async move { client.lease_revoke(lease).await });
            let alive = self
                .range(nodes, GetOptions::new())?
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
                .collect::<Vec<_>>();
            return Err(match alive.iter().find(|other| *other == name) {
                Some(_) => JoinError::NameTaken(name.to_owned()),
                None => JoinError::AnotherNodeActive(alive.join(", ")),
            });
        }
        let membership = Membership {
            name: name.to_owned(),
            lease,
            report: Arc::new(Mutex::new(report)),
            lost: Arc::new(AtomicBool::new(false)),
            lost_notify: Arc::new(Notify::new()),
            stop: Arc::new(Notify::new()),
            store: self.clone(),
        };
        membership.keep_alive(ttl, record);
        Ok(membership)
    }

    /// Every node the cluster has known, alive or lost, by name.
    pub fn nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        let alive: Vec<String> = self
            .range(self.keys.nodes(), GetOptions::new().with_keys_only())?
            .iter()
            .filter_map(|kv| {
                std::str::from_utf8(kv.key())
                    .ok()?
                    .rsplit('/')
                    .next()
                    .map(str::to_owned)
            })
            .collect();
        let mut records = Vec::new();
        for kv in self.range(self.keys.node_records(), GetOptions::new())? {
            let mut record: NodeRecord = crate::from_json(&kv, "node record")?;
            record.alive = alive.contains(&record.name);
            records.push(record);
        }
        records.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(records)
    }
}

impl Membership {
    /// This node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Replaces what this node reports (plugins, replicas); published with
    /// its next renewal.
    pub fn set_report(&self, report: NodeReport) {
        *self.report.lock() = report;
    }

    /// Whether this node's lease was lost: the cluster counts it gone, and
    /// it must act on nothing more.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Waits until the lease is lost.
    pub async fn lost(&self) {
        let notified = self.lost_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_lost() {
            return;
        }
        notified.await;
    }

    /// Keeps the lease alive every third of `ttl`, and renews the record
    /// with the latest report. A renewal the cluster answers with the lease
    /// gone marks the node lost; one it does not answer (no quorum) is
    /// tried again, the node acting on as before until the lease is known
    /// lost.
    fn keep_alive(&self, ttl: Duration, mut record: NodeRecord) {
        let store = self.store.clone();
        let lease = self.lease;
        let report = self.report.clone();
        let lost = self.lost.clone();
        let lost_notify = self.lost_notify.clone();
        let stop = self.stop.clone();
        let name = self.name.clone();
        let period = (ttl / 3).max(Duration::from_millis(200));
        let record_key = store.keys.node_record(&name);
        self.store.runtime.spawn(async move {
            let mut client = store.client.clone();
            let mut keeper = None;
            loop {
                tokio::select! {
                    _ = stop.notified() => return,
                    _ = tokio::time::sleep(period) => {}
                }
                if keeper.is_none() {
                    keeper = client.lease_keep_alive(lease).await.ok();
                }
                let Some((lease_keeper, responses)) = keeper.as_mut() else {
                    continue;
                };
                let renewed = tokio::time::timeout(period, async {
                    lease_keeper.keep_alive().await?;
                    responses.message().await
                })
                .await;
                match renewed {
                    Ok(Ok(Some(response))) if response.ttl() > 0 => {
                        record.last_seen_ms = now_ms();
                        record.report = report.lock().clone();
                        let _ = client.put(record_key.clone(), crate::to_json(&record), None).await;
                    }
                    Ok(Ok(Some(_))) => {
                        tracing::error!(node = %name, "this node's lease is lost: the cluster counts it gone; it acts on nothing more — restart it to join again");
                        lost.store(true, Ordering::SeqCst);
                        lost_notify.notify_waiters();
                        return;
                    }
                    other => {
                        tracing::warn!(node = %name, outcome = ?other.map(|r| r.map(|m| m.map(|m| m.ttl()))), "the lease could not be renewed; trying again");
                        keeper = None;
                    }
                }
            }
        });
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        // A permit, should the task not be waiting right now.
        self.stop.notify_one();
        let lease = self.lease;
        if let Err(error) = self
            .store
            .call(move |mut client| async move { client.lease_revoke(lease).await })
        {
            tracing::warn!(%error, "the lease could not be revoked; the node shows alive until it expires");
        }
    }
}

/// The error of a node's join that the cluster refused, as a store error.
impl From<JoinError> for StoreError {
    fn from(error: JoinError) -> StoreError {
        match error {
            JoinError::Store(error) => error,
            other => cluster(other),
        }
    }
}
