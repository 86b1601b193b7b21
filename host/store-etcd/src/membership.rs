//! The nodes of a cluster: each node registers itself under a lease and
//! keeps it alive; its record stays after it is gone, so `vd get nodes`
//! names a lost node and when it was last seen.
//!
//! | key | value |
//! |---|---|
//! | `nodes/<name>` | the node, held by its lease: present while it is alive |
//! | `node-records/<name>` | the node's record (JSON): started, last seen, plugins, replicas |
//!
//! Every node is active: the leader (`voodu_store_etcd::placements`)
//! places each replica on one of them. A name is held by one live node at
//! a time ([`JoinError::NameTaken`]). A node whose lease is lost (frozen,
//! or cut off from the store for longer than its TTL) is counted gone by
//! the others; it joins again by itself as soon as it can reach the store
//! and its name is free, under a new lease ([`Membership::standing`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::{cluster, now_ms, EtcdStore};
use voodu_model::WorkloadId;
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
    /// The statefulset ordinals it holds a container for, running or
    /// stopped: the leader moves an ordinal only once no live node holds it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_ordinals: Vec<HeldOrdinals>,
    /// Where the node answers the other nodes' requests for its share of a
    /// view (its peer listener), once it listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<std::net::SocketAddr>,
    /// The cluster plugins it refused to load.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_plugins: Vec<RefusedPlugin>,
}

/// A cluster plugin a node refused to load, as its record names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedPlugin {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Why it was refused.
    pub reason: String,
}

/// The ordinals of one statefulset a node holds a container for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldOrdinals {
    /// The statefulset.
    pub workload: WorkloadId,
    /// Its ordinals held on the node.
    pub ordinals: BTreeSet<u32>,
}

/// When a node's lease was last renewed (see [`Membership::renewal`]).
#[derive(Debug, Clone)]
pub struct Renewal(Arc<Mutex<Instant>>);

impl Renewal {
    /// How long ago the lease was last renewed (or granted).
    pub fn ago(&self) -> Duration {
        self.0.lock().elapsed()
    }
}

/// Where this node stands in its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// It holds the lease with this id: the cluster counts it alive.
    Member {
        /// The lease's id.
        lease: i64,
    },
    /// Its lease was lost; it is trying to join again.
    Lost,
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
    /// The cluster store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a node was not removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoveError {
    /// Its lease is held: it runs.
    #[error("node \"{0}\" is alive — `vd node remove` is for a host that is gone; stop its `vd controller` (and, for its statefulset replicas, the host) first")]
    Alive(String),
}

/// This node's place in the cluster: its lease kept alive, its record
/// renewed. Leaving (dropping it) revokes the lease, so the others see it
/// gone at once.
pub struct Membership {
    name: String,
    report: Arc<Mutex<NodeReport>>,
    standing: tokio::sync::watch::Sender<Standing>,
    /// When the lease was last renewed (or granted).
    renewed: Arc<Mutex<Instant>>,
    ttl: Duration,
    stop: Arc<Notify>,
    /// Wakes the keep-alive task to write the record now.
    report_changed: Arc<Notify>,
    /// Whether this membership is the one the node's supervisor counts on:
    /// it writes the node's record, joins again when its lease is lost, and
    /// revokes the lease when it leaves. An adopted one is not until it
    /// takes charge ([`Membership::take_charge`]): until then it only
    /// renews the lease. One handed over is not again
    /// ([`Membership::hand_over`]).
    in_charge: Arc<AtomicBool>,
    /// Whether this membership granted its lease itself (it joined), so
    /// that one never taken charge of nor handed over (an upgrade called
    /// off) gives it back when it leaves.
    granted_here: bool,
    /// Set once it has handed the node over.
    handed_over: AtomicBool,
    store: Arc<EtcdStore>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("name", &self.name)
            .field("standing", &*self.standing.borrow())
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
        let _ = self.node.set(name.to_owned());
        let started = now_ms();
        let record = NodeRecord {
            name: name.to_owned(),
            alive: true,
            started_ms: started,
            last_seen_ms: started,
            report: report.clone(),
        };
        let lease = self.register(name, ttl, &record)?;
        Ok(self.member(record, lease, ttl, true, true))
    }

    /// Takes over node `name`'s place in the cluster from a predecessor in
    /// the same supervisor (an upgrade's old worker, or one that died):
    /// its `lease` is kept alive from now on, so the cluster never sees the
    /// node gone, and its record, with the report the predecessor last
    /// wrote, is kept. `in_charge`: whether leaving revokes the lease now
    /// (a successor of a dead worker), or only once it takes charge (an
    /// upgrade's, which waits for the old worker to hand over).
    ///
    /// When the name is no longer held under `lease` (it expired, or
    /// another node holds it), the node joins as [`EtcdStore::join`] does.
    pub fn adopt(
        self: &Arc<Self>,
        name: &str,
        ttl: Duration,
        lease: i64,
        in_charge: bool,
    ) -> Result<Membership, JoinError> {
        let _ = self.node.set(name.to_owned());
        // Renewed first, so that the lease is known to have a whole TTL
        // ahead of it: one nearly expired is never taken for fresh.
        let renewed = self.call(move |mut client| async move {
            let (mut keeper, mut answers) = client.lease_keep_alive(lease).await?;
            keeper.keep_alive().await?;
            answers.message().await
        });
        let alive = matches!(&renewed, Ok(Some(answer)) if answer.ttl() > 0);
        let node_key = self.keys.node(name);
        let record_key = self.keys.node_record(name);
        let held = Txn::new()
            .when([Compare::lease(node_key, CompareOp::Equal, lease)])
            .and_then([TxnOp::get(record_key, None)]);
        let answer = if alive {
            Some(self.call(move |mut client| {
                let held = held.clone();
                async move { client.txn(held).await }
            })?)
        } else {
            None
        };
        let Some(answer) = answer.filter(|answer| answer.succeeded()) else {
            tracing::info!(
                node = name,
                lease,
                "this node's name is no longer held under its predecessor's lease; it joins afresh"
            );
            let membership = self.join(name, ttl, NodeReport::default())?;
            membership.set_in_charge(in_charge);
            return Ok(membership);
        };
        let stored = answer.op_responses().into_iter().find_map(|op| match op {
            etcd_client::TxnOpResponse::Get(got) => got
                .kvs()
                .first()
                .and_then(|kv| serde_json::from_slice::<NodeRecord>(kv.value()).ok()),
            _ => None,
        });
        // A record that is missing or unreadable (written by another
        // version) is begun afresh: the name is this node's all the same.
        let mut record = stored.unwrap_or_else(|| NodeRecord {
            name: name.to_owned(),
            alive: true,
            started_ms: now_ms(),
            last_seen_ms: now_ms(),
            report: NodeReport::default(),
        });
        record.alive = true;
        record.last_seen_ms = now_ms();
        tracing::info!(
            node = name,
            lease,
            "took over this node's lease from its predecessor"
        );
        Ok(self.member(record, lease, ttl, in_charge, false))
    }

    /// The membership of node `record.name` under `lease`, kept alive from
    /// now on; `granted_here`: it joined under a lease it was granted.
    fn member(
        self: &Arc<Self>,
        record: NodeRecord,
        lease: i64,
        ttl: Duration,
        in_charge: bool,
        granted_here: bool,
    ) -> Membership {
        let membership = Membership {
            name: record.name.clone(),
            report: Arc::new(Mutex::new(record.report.clone())),
            standing: tokio::sync::watch::Sender::new(Standing::Member { lease }),
            renewed: Arc::new(Mutex::new(Instant::now())),
            ttl,
            stop: Arc::new(Notify::new()),
            report_changed: Arc::new(Notify::new()),
            in_charge: Arc::new(AtomicBool::new(in_charge)),
            granted_here,
            handed_over: AtomicBool::new(false),
            store: self.clone(),
        };
        membership.keep_alive(record);
        membership
    }

    /// Takes name `name` under a new lease of `ttl` and writes the node's
    /// record: the lease's id, or [`JoinError::NameTaken`] while a live node
    /// holds the name.
    fn register(&self, name: &str, ttl: Duration, record: &NodeRecord) -> Result<i64, JoinError> {
        let ttl_secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let lease = self
            .call(move |mut client| async move { client.lease_grant(ttl_secs, None).await })?
            .id();
        let node_key = self.keys.node(name);
        // Alive means holding `nodes/<name>`: no other node may, for this
        // one to take the name.
        let txn = Txn::new()
            .when([Compare::version(node_key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    node_key,
                    name.to_owned(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::put(self.keys.node_record(name), crate::to_json(record), None),
            ]);
        let joined = self.call(move |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        });
        match joined {
            Ok(response) if response.succeeded() => Ok(lease),
            other => {
                // Refused: the lease it was granted is given back.
                let _ =
                    self.call(move |mut client| async move { client.lease_revoke(lease).await });
                match other {
                    Err(error) => Err(error.into()),
                    Ok(_) => Err(JoinError::NameTaken(name.to_owned())),
                }
            }
        }
    }

    /// Declares node `name`'s host gone (`vd node remove`): its record is
    /// deleted, so the leader counts the node removed and moves its
    /// statefulset ordinals, which a lost node keeps. Refused while the
    /// node is alive; `Ok(false)` when the cluster knows no such node. A
    /// node of that name that starts again joins as a new one.
    pub fn remove_node(&self, name: &str) -> Result<Result<bool, RemoveError>, StoreError> {
        let node_key = self.keys.node(name);
        let record_key = self.keys.node_record(name);
        // Only while no live node holds the name: one that is alive is
        // stopped first, never removed from under its replicas.
        let txn = Txn::new()
            .when([Compare::version(node_key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::delete(record_key.clone(), None)]);
        let response = self.call(move |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })?;
        if !response.succeeded() {
            return Ok(Err(RemoveError::Alive(name.to_owned())));
        }
        let deleted = response.op_responses().into_iter().any(|op| match op {
            TxnOpResponse::Delete(deleted) => deleted.deleted() > 0,
            _ => false,
        });
        Ok(Ok(deleted))
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

    /// Replaces what this node reports (plugins, replicas, ordinals held);
    /// written at once when it changed, so the leader places replicas on a
    /// node as soon as it has their plugins, and with every renewal.
    pub fn set_report(&self, report: NodeReport) {
        let changed = {
            let mut held = self.report.lock();
            let changed = *held != report;
            *held = report;
            changed
        };
        if changed {
            self.report_changed.notify_one();
        }
    }

    /// What this node reports now (after [`EtcdStore::adopt`]: what its
    /// predecessor last reported).
    pub fn report(&self) -> NodeReport {
        self.report.lock().clone()
    }

    /// An adopted membership takes charge: from now on leaving revokes
    /// the lease (the old worker has handed over).
    pub fn take_charge(&self) {
        self.set_in_charge(true);
        // The record is this membership's to write from now on.
        self.report_changed.notify_one();
    }

    /// Hands this node's place over to a successor that has adopted its
    /// lease ([`EtcdStore::adopt`]): this membership stops renewing the
    /// lease and writing the record, and leaving no longer revokes the
    /// lease, which the successor keeps alive.
    pub fn hand_over(&self) {
        self.handed_over.store(true, Ordering::SeqCst);
        self.set_in_charge(false);
        // A permit, should the task not be waiting right now.
        self.stop.notify_one();
    }

    fn set_in_charge(&self, in_charge: bool) {
        self.in_charge.store(in_charge, Ordering::SeqCst);
    }

    /// Whether this node's lease was lost: the cluster counts it gone, and
    /// it must act on nothing until it has joined again.
    pub fn is_lost(&self) -> bool {
        *self.standing.borrow() == Standing::Lost
    }

    /// Follows this node's standing: it changes when the lease is lost and
    /// when the node has joined again.
    pub fn standing(&self) -> tokio::sync::watch::Receiver<Standing> {
        self.standing.subscribe()
    }

    /// The lease held now, if any.
    pub fn lease(&self) -> Option<i64> {
        match *self.standing.borrow() {
            Standing::Member { lease } => Some(lease),
            Standing::Lost => None,
        }
    }

    /// How long ago the lease was last renewed. Past half the TTL, the
    /// node may be cut off from the store: it stops its statefulset
    /// replicas before its lease can expire.
    pub fn renewed_ago(&self) -> Duration {
        self.renewal().ago()
    }

    /// The lease's time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A handle that tells how long ago the lease was last renewed, for
    /// whoever must not act on a lease that may be lost.
    pub fn renewal(&self) -> Renewal {
        Renewal(self.renewed.clone())
    }

    /// Keeps the lease alive every third of the TTL, and renews the
    /// record with the latest report. A renewal the cluster answers with
    /// the lease gone marks the node lost; one it does not answer (no
    /// quorum) is tried again, the node acting on as before until the lease
    /// is known lost. A lost node joins again under a new lease as soon as
    /// its name is free.
    fn keep_alive(&self, mut record: NodeRecord) {
        let store = self.store.clone();
        let report = self.report.clone();
        let standing = self.standing.clone();
        let renewed = self.renewed.clone();
        let stop = self.stop.clone();
        let report_changed = self.report_changed.clone();
        let in_charge = self.in_charge.clone();
        let name = self.name.clone();
        let ttl = self.ttl;
        let period = (ttl / 3).max(Duration::from_millis(200));
        let record_key = store.keys.node_record(&name);
        self.store.runtime.spawn(async move {
            let mut client = store.client.clone();
            let mut keeper = None;
            // Renewals keep their own pace, whatever reports come between.
            let mut next_renewal = tokio::time::Instant::now() + period;
            loop {
                tokio::select! {
                    _ = stop.notified() => return,
                    _ = tokio::time::sleep_until(next_renewal) => {
                        next_renewal = tokio::time::Instant::now() + period;
                    }
                    _ = report_changed.notified() => {
                        // A new report is written at once, between renewals
                        // (by the membership in charge only).
                        let member = matches!(*standing.borrow(), Standing::Member { .. });
                        if member && in_charge.load(Ordering::SeqCst) {
                            record.report = report.lock().clone();
                            let put = client.put(record_key.clone(), crate::to_json(&record), None);
                            let _ = tokio::time::timeout(period, put).await;
                        }
                        continue;
                    }
                }
                let now = *standing.borrow();
                let lease = match now {
                    Standing::Member { lease } => lease,
                    // Only the membership in charge joins again: one that
                    // has not taken charge yet must not take the name from
                    // the worker that serves.
                    Standing::Lost if !in_charge.load(Ordering::SeqCst) => continue,
                    Standing::Lost => {
                        record.last_seen_ms = now_ms();
                        record.report = report.lock().clone();
                        let (again, again_name, again_record) = (store.clone(), name.clone(), record.clone());
                        let joined = tokio::task::spawn_blocking(move || {
                            again.register(&again_name, ttl, &again_record)
                        })
                        .await;
                        if let Ok(Ok(lease)) = joined {
                            tracing::info!(node = %name, "this node joined its cluster again");
                            *renewed.lock() = Instant::now();
                            keeper = None;
                            standing.send_replace(Standing::Member { lease });
                        }
                        continue;
                    }
                };
                if keeper.is_none() {
                    match tokio::time::timeout(period, client.lease_keep_alive(lease)).await {
                        Ok(Ok(opened)) => keeper = Some(opened),
                        Ok(Err(error)) if lease_not_found(&error) => {
                            lost(&name, &standing);
                            continue;
                        }
                        outcome => {
                            tracing::debug!(node = %name, lease, ?outcome, "the keep-alive stream could not be opened; trying again");
                        }
                    }
                }
                let Some((lease_keeper, responses)) = keeper.as_mut() else {
                    continue;
                };
                let renewal = tokio::time::timeout(period, async {
                    lease_keeper.keep_alive().await?;
                    responses.message().await
                })
                .await;
                tracing::debug!(node = %name, lease, outcome = ?renewal.as_ref().map(|r| r.as_ref().map(|m| m.as_ref().map(|m| m.ttl()))), "lease renewal");
                match renewal {
                    Ok(Ok(Some(response))) if response.ttl() > 0 => {
                        *renewed.lock() = Instant::now();
                        if in_charge.load(Ordering::SeqCst) {
                            record.last_seen_ms = now_ms();
                            record.report = report.lock().clone();
                            let put = client.put(record_key.clone(), crate::to_json(&record), None);
                            if tokio::time::timeout(period, put).await.is_err() {
                                tracing::debug!(node = %name, "the node's record could not be renewed in time");
                            }
                        }
                    }
                    Ok(Ok(Some(_))) => {
                        keeper = None;
                        lost(&name, &standing);
                    }
                    Ok(Err(error)) if lease_not_found(&error) => {
                        keeper = None;
                        lost(&name, &standing);
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

/// Whether etcd answered that the lease no longer exists (it expired).
fn lease_not_found(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::NotFound || status.message().contains("lease not found")
        }
        other => other.to_string().contains("lease not found"),
    }
}

/// Marks the node lost: the cluster counts it gone.
fn lost(name: &str, standing: &tokio::sync::watch::Sender<Standing>) {
    tracing::error!(node = %name, "this node's lease is lost: the cluster counts it gone; it acts on nothing until it has joined again");
    standing.send_replace(Standing::Lost);
}

impl Drop for Membership {
    fn drop(&mut self) {
        // A permit, should the task not be waiting right now.
        self.stop.notify_one();
        let in_charge = self.in_charge.load(Ordering::SeqCst);
        let abandoned = self.granted_here && !self.handed_over.load(Ordering::SeqCst);
        if !in_charge && !abandoned {
            return;
        }
        let Some(lease) = self.lease() else {
            return;
        };
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
