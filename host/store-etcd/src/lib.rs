//! # voodu-store-etcd
//!
//! voodu's desired state in **etcd**, for a cluster of nodes: [`EtcdStore`]
//! implements [`voodu_store::StateStore`], the interface the controller and
//! the reconciler hold, beside the embedded SQLite store (k3s puts SQLite
//! and etcd behind one interface the same way).
//!
//! Every key lives under one prefix (`/voodu` by default):
//!
//! | key | value (JSON) |
//! |---|---|
//! | `meta/store_id` | the store's identity (plain text), made once |
//! | `meta/event_seq` | the newest event id (plain text) |
//! | `workloads/<kind>/<scope>/<name>` | the current revision: spec hash, core spec, blocks, source, times |
//! | `revisions/<kind>/<scope>/<name>/<revision, 20 digits>` | every revision applied |
//! | `events/<id, 20 digits>` | every event, with its workload |
//! | `workload-events/<kind>/<scope>/<name>/<id, 20 digits>` | the same event, indexed by workload |
//! | `publications/<kind>/<scope>/<name>/<type>/<labels as hex JSON>` | the last set published to a block |
//! | `deletions/<kind>/<scope>/<name>` | an unfinished deletion, or its tombstone |
//! | `nodes/...`, `node-records/...` | the cluster's nodes ([`membership`]) |
//! | `drains/...`, `drain-answers/...` | the drain round across nodes ([`drains`]) |
//! | `leader`, `placements/...`, `endpoints/...` | the leading node, which node runs each replica, and each node's serving replicas ([`placements`]) |
//! | `plugin-records/...`, `plugin-chunks/...` | plugins installed cluster-wide ([`plugins`]) |
//!
//! Each method is **one etcd transaction**. A write reads what it changes,
//! then commits only if none of it changed since (compare-and-swap on each
//! key's modification revision, and on the event counter): two applies to
//! one workload on two nodes at once never mix; the second is computed
//! again over the first and applied after it. Every call is bounded
//! ([`EtcdOptions::request_timeout`]): a cluster without quorum fails the
//! call with [`StoreError::Cluster`] within it, and nothing is half-written.
//!
//! The store's calls are synchronous, as the interface's are: each runs on
//! the store's own small runtime and the caller waits for it, so it may be
//! called from a blocking thread or from a task alike.
//!
//! **May not depend on** the manifest parser, the runtime, the plugin host,
//! the reconciler, the controller, the API or the CLI
//! (`tests/crate_rules.rs` checks this).

#![warn(missing_docs)]

mod access;
mod documents;
pub mod drains;
mod keys;
pub mod membership;
pub mod placements;
pub mod plugins;

pub use access::{EtcdTls, EtcdUser};
pub use membership::{
    HeldOrdinals, JoinError, Membership, NodePlugin, NodeRecord, NodeReport, RefusedPlugin,
    RemoveError, Renewal, Standing,
};
pub use placements::Watched;
pub use plugins::PluginRecord;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, KeyValue, PutOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use parking_lot::Mutex;
use voodu_model::config::{Bucket, BucketName};
use voodu_model::{CoreSpec, EventLevel, NormalisedBlock, WorkloadId};
use voodu_plugin_abi::messages::{Claim, ClaimProtocol, Endpoint, WorkloadKind};
use voodu_store::claims::{claims_of_blocks, ports_of, settle, HeldClaim};
use voodu_store::config::{ConfigHold, HoldChange};
use voodu_store::sealing::{Reseal, SecretKeys, StoredValue};
use voodu_store::{
    spec_hash, Event, EventSink, NewEvent, Publication, Revision, StateStore, StoreChange,
    StoreError, StoredWorkload, Tombstone, WorkloadInput, MAX_EVENTS_PER_WORKLOAD,
};

use crate::documents::{
    ConfigDoc, DeletionDoc, EventDoc, PublicationDoc, RevisionDoc, WorkloadDoc,
};
use crate::keys::Keys;

/// How to reach the cluster store.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// The etcd client URLs (`http://127.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// The key prefix everything lives under (`/voodu`).
    pub prefix: String,
    /// The bound on every call: a store that cannot answer within it (no
    /// quorum, unreachable) fails the call.
    pub request_timeout: Duration,
    /// TLS to etcd, for `https://` URLs.
    pub tls: Option<EtcdTls>,
    /// The etcd user, when etcd's auth is on.
    pub user: Option<EtcdUser>,
}

impl EtcdOptions {
    /// The default prefix, `/voodu`.
    pub const DEFAULT_PREFIX: &'static str = "/voodu";
    /// The default bound on one call.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(3_500);

    /// Options for `endpoints` with the default prefix and bound.
    pub fn new(endpoints: Vec<String>) -> EtcdOptions {
        EtcdOptions {
            endpoints,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            request_timeout: Self::DEFAULT_TIMEOUT,
            tls: None,
            user: None,
        }
    }
}

/// Up to this many keys a write reads one by one; beyond, it reads their
/// whole prefix at once.
const FEW_KEYS: usize = 8;

/// How many operations a housekeeping transaction carries at most: under
/// etcd's default `--max-txn-ops` (128), so it works on any cluster.
const READS_PER_TXN: usize = 100;

/// How long a call waits before it tries a member again after one could
/// not be reached.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Whether a call failed because a member could not be reached (refused
/// connection, member down): the request was not served, and is made again.
fn unreachable_member(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => status.code() == tonic::Code::Unavailable,
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// How long a member gets to answer a status request when a call was not
/// answered, to tell a lost quorum from a slow cluster.
const MEMBER_PROBE: Duration = Duration::from_millis(300);

/// Whether a call failed because no member answered it in time (the
/// client's own deadline): a lost quorum looks like this.
fn timed_out(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
        ),
        other => other.to_string().contains("Timeout expired"),
    }
}

/// How many times a write computed over a state that changed before its
/// commit is computed again before it gives up.
const MAX_ATTEMPTS: usize = 16;

/// voodu's desired state in etcd (see the crate's documentation).
pub struct EtcdStore {
    client: Client,
    /// The members' client URLs, as given.
    members: Vec<String>,
    keys: Keys,
    runtime: tokio::runtime::Runtime,
    timeout: Duration,
    id: String,
    sink: Mutex<Option<EventSink>>,
    /// The node this store serves, once it joined: every event it records
    /// names it.
    node: std::sync::OnceLock<String>,
    /// The keys secrets are sealed and opened with; none: stored plain.
    secrets: Option<Arc<SecretKeys>>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.keys.prefix())
            .finish_non_exhaustive()
    }
}

/// A cluster failure as the store's error.
fn cluster(error: impl std::fmt::Display) -> StoreError {
    StoreError::Cluster(error.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

fn to_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect(
        "cannot fail: the store writes documents of strings, numbers and maps with string keys",
    )
}

fn from_json<T: serde::de::DeserializeOwned>(
    kv: &KeyValue,
    what: &'static str,
) -> Result<T, StoreError> {
    serde_json::from_slice(kv.value()).map_err(|source| StoreError::Corrupt { what, source })
}

/// The protocols and ports `blocks` claim.
fn claim_ports(blocks: &[NormalisedBlock]) -> BTreeSet<(ClaimProtocol, u16)> {
    blocks
        .iter()
        .flat_map(|block| &block.claims)
        .map(Claim::port_key)
        .collect()
}

/// The changes an apply made, and its events as recorded.
type Applied = (Vec<StoreChange>, Vec<(WorkloadId, Event)>);

/// How one attempt at an apply ended.
enum Attempt {
    /// Committed.
    Committed(Vec<StoreChange>, Vec<(WorkloadId, Event)>),
    /// `before_commit` said no: nothing is stored.
    Refused,
    /// What it read changed before its commit: it is computed again.
    Raced,
}

impl Attempt {
    /// As [`EtcdStore::until_committed`] takes it: `None` to try again,
    /// then what was applied, or `None` when refused.
    fn settled(self) -> Option<Option<Applied>> {
        match self {
            Attempt::Committed(changes, recorded) => Some(Some((changes, recorded))),
            Attempt::Refused => Some(None),
            Attempt::Raced => None,
        }
    }
}

/// What a write reads before it computes its transaction: each key's value
/// and modification revision (0 when absent), which the commit compares.
struct Read {
    compares: Vec<Compare>,
}

impl Read {
    fn new() -> Read {
        Read {
            compares: Vec::new(),
        }
    }

    /// Remembers that `key` was read as `kv` (or absent), so the commit
    /// fails if it changed meanwhile.
    fn saw(&mut self, key: &str, kv: Option<&KeyValue>) {
        let compare = match kv {
            Some(kv) => Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision()),
            None => Compare::version(key, CompareOp::Equal, 0),
        };
        self.compares.push(compare);
    }
}

impl EtcdStore {
    /// Connects to the cluster and makes the store's identity the first
    /// time. Fails within the request timeout when the cluster cannot be
    /// reached or has no quorum.
    pub fn connect(options: &EtcdOptions) -> Result<EtcdStore, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("voodu-etcd")
            .enable_all()
            .build()
            .map_err(cluster)?;
        let endpoints = options.endpoints.clone();
        let timeout = options.request_timeout;
        let connect_options =
            access::connect_options(&endpoints, options.tls.as_ref(), options.user.as_ref())?
                .with_connect_timeout(timeout)
                .with_timeout(timeout);
        let (user, tls) = (options.user.clone(), options.tls.clone());
        let refused = move |error: etcd_client::Error| match access::refusal(
            &error,
            user.as_ref(),
            tls.as_ref(),
        ) {
            Some(refusal) => StoreError::ClusterAccess(refusal),
            None => cluster(error),
        };
        let no_answer = || {
            cluster(format!(
                "no member of {} answered within {}",
                options.endpoints.join(","),
                humantime::format_duration(timeout)
            ))
        };
        let connect =
            runtime.spawn(async move { Client::connect(endpoints, Some(connect_options)).await });
        let client = runtime
            .block_on(async { tokio::time::timeout(timeout, connect).await })
            .map_err(|_| no_answer())?
            .map_err(cluster)?
            .map_err(&refused)?;
        // A first read, so that a refusal (TLS, auth) is named as one here
        // rather than as a failed call later.
        let probe = {
            let mut client = client.clone();
            let key = Keys::new(&options.prefix).store_id();
            runtime.spawn(async move { client.get(key, None).await })
        };
        runtime
            .block_on(async { tokio::time::timeout(timeout, probe).await })
            .map_err(|_| no_answer())?
            .map_err(cluster)?
            .map_err(&refused)?;
        let mut store = EtcdStore {
            client,
            members: options.endpoints.clone(),
            keys: Keys::new(&options.prefix),
            runtime,
            timeout,
            id: String::new(),
            sink: Mutex::new(None),
            node: std::sync::OnceLock::new(),
            secrets: None,
        };
        store.id = store.identity()?;
        Ok(store)
    }

    /// Runs one call against the cluster on the store's runtime, bounded by
    /// the request timeout, from any thread (a task's or a blocking one).
    /// A call that could not reach a member (one that is down) is made
    /// again, on the next, within the same bound: with one member of three
    /// down, calls go on.
    fn call<T, F>(&self, make: impl Fn(Client) -> F + Send + 'static) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        let (sender, receiver) = mpsc::sync_channel(1);
        let client = self.client.clone();
        let timeout = self.timeout;
        self.runtime.spawn(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let outcome = loop {
                match tokio::time::timeout_at(deadline, make(client.clone())).await {
                    Ok(Err(error)) if unreachable_member(&error) => {
                        if tokio::time::Instant::now() + RETRY_PAUSE >= deadline {
                            break Ok(Err(error));
                        }
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                    other => break other,
                }
            };
            let _ = sender.send(outcome);
        });
        let unanswered = || {
            let (reachable, members) = self.members_reachable();
            if reachable * 2 <= members {
                return StoreError::NoQuorum { reachable, members };
            }
            cluster(format!(
                "the cluster store did not answer within {} ({reachable} of {members} members reachable)",
                humantime::format_duration(timeout)
            ))
        };
        // A caller on one of a runtime's workers (a reconciler's pass, a
        // controller task) tells the runtime it blocks, so the runtime's
        // other tasks (the API socket among them) move to another worker
        // while the store takes up to its bound to answer.
        let wait = || receiver.recv_timeout(timeout + Duration::from_secs(1));
        let on_a_worker = tokio::runtime::Handle::try_current().is_ok_and(|runtime| {
            runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        });
        let answer = if on_a_worker {
            tokio::task::block_in_place(wait)
        } else {
            wait()
        };
        match answer {
            Ok(Ok(Err(error))) if timed_out(&error) || unreachable_member(&error) => {
                Err(unanswered())
            }
            Ok(Ok(answer)) => answer.map_err(cluster),
            Ok(Err(_)) | Err(_) => Err(unanswered()),
        }
    }

    /// How many of the store's members answer a status request now, each
    /// asked on a connection of its own within [`MEMBER_PROBE`], and how
    /// many it knows of.
    fn members_reachable(&self) -> (usize, usize) {
        let members = self.members.clone();
        let count = members.len();
        let probe = self.runtime.spawn(async move {
            let asked = members.into_iter().map(|member| async move {
                let options = ConnectOptions::new()
                    .with_connect_timeout(MEMBER_PROBE)
                    .with_timeout(MEMBER_PROBE);
                let answered = tokio::time::timeout(MEMBER_PROBE, async {
                    let mut client = Client::connect([member], Some(options)).await?;
                    client.status().await
                })
                .await;
                matches!(answered, Ok(Ok(_)))
            });
            futures_util::future::join_all(asked)
                .await
                .into_iter()
                .filter(|answered| *answered)
                .count()
        });
        let (sender, receiver) = mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = sender.send(probe.await.unwrap_or(0));
        });
        let reachable = receiver
            .recv_timeout(MEMBER_PROBE + Duration::from_millis(200))
            .unwrap_or(0);
        (reachable, count)
    }

    fn get(&self, key: String) -> Result<Option<KeyValue>, StoreError> {
        let response = self.call(move |mut client| {
            let key = key.clone();
            async move { client.get(key, None).await }
        })?;
        Ok(response.kvs().first().cloned())
    }

    /// Puts `value` at `key` under `lease`, so it vanishes with it.
    fn put_leased(&self, key: String, value: Vec<u8>, lease: i64) -> Result<(), StoreError> {
        self.call(move |mut client| {
            let (key, value) = (key.clone(), value.clone());
            async move {
                client
                    .put(key, value, Some(PutOptions::new().with_lease(lease)))
                    .await
            }
        })?;
        Ok(())
    }

    fn range(&self, prefix: String, options: GetOptions) -> Result<Vec<KeyValue>, StoreError> {
        let response = self.call(move |mut client| {
            let (prefix, options) = (prefix.clone(), options.clone());
            async move { client.get(prefix, Some(options.with_prefix())).await }
        })?;
        Ok(response.kvs().to_vec())
    }

    /// Commits `operations` if nothing `read` saw changed; `Ok(false)` when
    /// something did (the caller computes again).
    fn commit(&self, read: Read, operations: Vec<TxnOp>) -> Result<bool, StoreError> {
        let count = operations.len() + read.compares.len();
        let txn = Txn::new().when(read.compares).and_then(operations);
        let response = self
            .call(move |mut client| {
                let txn = txn.clone();
                async move { client.txn(txn).await }
            })
            .map_err(|error| match error {
                // etcd bounds one transaction (`--max-txn-ops`, 128 by
                // default, and `--max-request-bytes`); nothing of it is
                // written, and the operator is told what to raise.
                StoreError::Cluster(message)
                    if message.contains("too many operations in txn request")
                        || message.contains("request is too large") =>
                {
                    StoreError::Cluster(format!(
                        "this write is one transaction of {count} operations, more than the cluster's etcd takes ({message}) — raise etcd's --max-txn-ops (and --max-request-bytes), or apply fewer workloads at once"
                    ))
                }
                other => other,
            })?;
        Ok(response.succeeded())
    }

    /// The keys secrets are sealed and opened with, from now on (before
    /// the store is shared).
    pub fn set_secret_keys(&mut self, keys: Option<Arc<SecretKeys>>) {
        self.secrets = keys;
    }

    /// A bucket's variables as stored, each with its key-value.
    fn stored_bucket(
        &self,
        bucket: &BucketName,
    ) -> Result<Vec<(String, KeyValue, StoredValue)>, StoreError> {
        let prefix = self.keys.config_bucket(bucket);
        self.range(prefix.clone(), GetOptions::new())?
            .into_iter()
            .map(|kv| {
                let key = String::from_utf8_lossy(kv.key());
                let key = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
                let stored = from_json::<ConfigDoc>(&kv, "config value")?.stored();
                Ok((key, kv, stored))
            })
            .collect()
    }

    /// The store's identity, made by the first node to get there.
    fn identity(&self) -> Result<String, StoreError> {
        let key = self.keys.store_id();
        let made = format!("{:016x}", fastrand::u64(..));
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), made.clone(), None)]);
        self.call(move |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })?;
        let stored = self
            .get(key)?
            .ok_or_else(|| cluster("the store's identity vanished as it was made"))?;
        Ok(String::from_utf8_lossy(stored.value()).into_owned())
    }

    /// The newest event id and its key as read, for a write that records
    /// events.
    fn event_seq(&self, read: &mut Read) -> Result<i64, StoreError> {
        let key = self.keys.event_seq();
        let kv = self.get(key.clone())?;
        read.saw(&key, kv.as_ref());
        Ok(kv
            .and_then(|kv| String::from_utf8_lossy(kv.value()).parse().ok())
            .unwrap_or(0))
    }

    /// The puts of new events numbered after `seq`, and the events as
    /// recorded.
    fn event_puts(
        &self,
        seq: i64,
        events: &[NewEvent],
        at: i64,
        operations: &mut Vec<TxnOp>,
    ) -> Vec<(WorkloadId, Event)> {
        let mut recorded = Vec::with_capacity(events.len());
        for (offset, event) in events.iter().enumerate() {
            let id = seq + 1 + offset as i64;
            let document = EventDoc::new(id, at, event, self.node.get().map(String::as_str));
            let value = to_json(&document);
            operations.push(TxnOp::put(self.keys.event(id), value.clone(), None));
            operations.push(TxnOp::put(
                self.keys.workload_event(&event.workload, id),
                value,
                None,
            ));
            recorded.push((event.workload.clone(), document.event()));
        }
        if !events.is_empty() {
            operations.push(TxnOp::put(
                self.keys.event_seq(),
                (seq + events.len() as i64).to_string(),
                None,
            ));
        }
        recorded
    }

    /// How many events each of `workloads` has stored, counted by
    /// transactions of count-only reads ([`READS_PER_TXN`] each, under
    /// etcd's default `--max-txn-ops`) sent together in one call, not a
    /// round trip per workload.
    fn event_counts(&self, workloads: &[&WorkloadId]) -> Result<Vec<i64>, StoreError> {
        let txns: Vec<Txn> = workloads
            .chunks(READS_PER_TXN)
            .map(|chunk| {
                Txn::new().and_then(
                    chunk
                        .iter()
                        .map(|workload| {
                            TxnOp::get(
                                self.keys.workload_events(workload),
                                Some(GetOptions::new().with_prefix().with_count_only()),
                            )
                        })
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let responses = self.call(move |client| {
            let txns = txns.clone();
            async move {
                futures_util::future::try_join_all(txns.into_iter().map(|txn| {
                    let mut client = client.clone();
                    async move { client.txn(txn).await }
                }))
                .await
            }
        })?;
        Ok(responses
            .iter()
            .flat_map(|response| response.op_responses())
            .map(|answer| match answer {
                TxnOpResponse::Get(got) => got.count(),
                _ => 0,
            })
            .collect())
    }

    /// Keeps the newest [`MAX_EVENTS_PER_WORKLOAD`] events of each
    /// workload, after a commit (a prune that fails is retried by the
    /// next). The workloads' event counts are read in a few batched
    /// transactions; only a workload over the bound reads its oldest keys
    /// and deletes them, from its index and from the global log alike.
    fn prune_events(&self, recorded: &[(WorkloadId, Event)]) {
        let mut workloads: Vec<&WorkloadId> = recorded.iter().map(|(id, _)| id).collect();
        workloads.sort();
        workloads.dedup();
        let counts = match self.event_counts(&workloads) {
            Ok(counts) => counts,
            Err(error) => {
                tracing::warn!(%error, "event counts could not be read to prune old events");
                return;
            }
        };
        for (workload, count) in workloads.into_iter().zip(counts) {
            let excess = count - MAX_EVENTS_PER_WORKLOAD;
            if excess <= 0 {
                continue;
            }
            let prefix = self.keys.workload_events(workload);
            let Ok(oldest) = self.range(
                prefix.clone(),
                GetOptions::new()
                    .with_keys_only()
                    .with_sort(SortTarget::Key, SortOrder::Ascend)
                    // At most a transaction's worth at once; a later
                    // prune takes the rest.
                    .with_limit(excess.min(READS_PER_TXN as i64)),
            ) else {
                continue;
            };
            let Some(newest_dropped) = oldest.last() else {
                continue;
            };
            let mut end = newest_dropped.key().to_vec();
            end.push(0);
            let mut operations = vec![TxnOp::delete(
                prefix.clone(),
                Some(DeleteOptions::new().with_range(end)),
            )];
            operations.extend(
                oldest
                    .iter()
                    .filter_map(|kv| keys::id_of(kv.key()))
                    .map(|id| TxnOp::delete(self.keys.event(id), None)),
            );
            if let Err(error) = self.commit(Read::new(), operations) {
                tracing::warn!(%error, %workload, "old events could not be pruned");
            }
        }
    }

    fn emit(&self, recorded: &[(WorkloadId, Event)]) {
        if let Some(sink) = &*self.sink.lock() {
            for (workload, event) in recorded {
                sink(workload, event);
            }
        }
    }

    /// One workload's stored document, and what was read.
    fn workload_doc(&self, id: &WorkloadId) -> Result<Option<(KeyValue, WorkloadDoc)>, StoreError> {
        match self.get(self.keys.workload(id))? {
            Some(kv) => {
                let document = from_json(&kv, "workload")?;
                Ok(Some((kv, document)))
            }
            None => Ok(None),
        }
    }

    /// The newest revision stored for a workload, deleted or not.
    fn last_revision_doc(&self, id: &WorkloadId) -> Result<Option<RevisionDoc>, StoreError> {
        let newest = self.range(
            self.keys.revisions(id),
            GetOptions::new()
                .with_sort(SortTarget::Key, SortOrder::Descend)
                .with_limit(1),
        )?;
        newest
            .first()
            .map(|kv| from_json(kv, "revision"))
            .transpose()
    }

    /// One attempt at an apply: computes every change over what it reads,
    /// and commits it if none of that changed.
    fn try_apply(
        &self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
        before_commit: &mut Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Attempt, StoreError> {
        let at = now_ms();
        let mut read = Read::new();
        let mut operations = Vec::new();
        let mut changes = Vec::with_capacity(workloads.len());
        let mut events = Vec::new();
        let workload_keys: Vec<String> = workloads
            .iter()
            .map(|input| self.keys.workload(&input.id))
            .collect();
        let deletion_keys: Vec<String> = workloads
            .iter()
            .map(|input| self.keys.deletion(&input.id))
            .collect();
        let mut currents = self.read_many(&workload_keys, self.keys.workloads(None))?;
        let mut deletions = self.read_many(&deletion_keys, self.keys.deletions())?;
        // The ports whose claims the applied workloads held: read with the
        // ones they claim now, so their old claims are released.
        let mut claimed_ports = BTreeSet::new();
        for ((input, key), deletion_key) in workloads.iter().zip(workload_keys).zip(deletion_keys) {
            let id = &input.id;
            let current = currents.remove(&key);
            read.saw(&key, current.as_ref());
            let deletion = deletions.remove(&deletion_key);
            read.saw(&deletion_key, deletion.as_ref());
            if let Some(deletion) = &deletion {
                let document: DeletionDoc = from_json(deletion, "deletion")?;
                claimed_ports.extend(claim_ports(&document.blocks));
            }
            if deletion.is_some() {
                // Applied again: what an unfinished deletion left is
                // converged to the new revision instead.
                operations.push(TxnOp::delete(deletion_key, None));
            }
            let hash = spec_hash(&input.core_spec, &input.blocks);
            let current: Option<WorkloadDoc> = current
                .as_ref()
                .map(|kv| from_json(kv, "workload"))
                .transpose()?;
            if let Some(stored) = &current {
                claimed_ports.extend(claim_ports(&stored.blocks));
            }
            let change = match &current {
                Some(stored) if stored.spec_hash == hash => {
                    let mut same = stored.clone();
                    same.source.clone_from(&input.source);
                    operations.push(TxnOp::put(key, to_json(&same), None));
                    changes.push(StoreChange::Unchanged {
                        revision: stored.revision,
                    });
                    continue;
                }
                // The current document holds its revision's blocks.
                Some(stored) => StoreChange::Updated {
                    revision: stored.revision + 1,
                    previous_blocks: stored.blocks.clone(),
                },
                // A workload deleted and applied again continues its
                // revisions. Only such a one has revisions without a
                // current document, and it has a deletion (a tombstone
                // stays until it is applied again).
                None if deletion.is_some() => {
                    let last = self.last_revision_doc(id)?.map_or(0, |r| r.revision);
                    StoreChange::Created { revision: last + 1 }
                }
                None => StoreChange::Created { revision: 1 },
            };
            let (revision, recreated) = match &change {
                StoreChange::Created { revision } => (*revision, *revision > 1),
                StoreChange::Updated { revision, .. } => (*revision, false),
                StoreChange::Unchanged { revision } => (*revision, false),
            };
            let created_ms = match &current {
                Some(stored) => stored.created_ms,
                None if recreated => self.first_applied_ms(id)?.unwrap_or(at),
                None => at,
            };
            let document = WorkloadDoc {
                revision,
                spec_hash: hash.clone(),
                core_spec: input.core_spec.clone(),
                blocks: input.blocks.clone(),
                source: input.source.clone(),
                created_ms,
                updated_ms: at,
                restarted_ms: current.as_ref().and_then(|stored| stored.restarted_ms),
                frozen: current
                    .as_ref()
                    .map(|stored| stored.frozen.clone())
                    .unwrap_or_default(),
            };
            operations.push(TxnOp::put(key, to_json(&document), None));
            let revision_doc = RevisionDoc {
                revision,
                spec_hash: hash,
                core_spec: input.core_spec.clone(),
                blocks: input.blocks.clone(),
                applied_ms: at,
                recreated,
            };
            operations.push(TxnOp::put(
                self.keys.revision(id, revision),
                to_json(&revision_doc),
                None,
            ));
            // Only the newest `keep_releases` revisions are kept.
            let keep = i64::from(input.core_spec.releases_kept());
            if revision > keep {
                operations.push(TxnOp::delete(
                    self.keys.revision(id, 0),
                    Some(
                        DeleteOptions::new()
                            .with_range(self.keys.revision(id, revision - keep + 1)),
                    ),
                ));
            }
            let verb = match change {
                StoreChange::Created { .. } if recreated => "created again, after a delete, as",
                StoreChange::Created { .. } => "created",
                _ => "updated",
            };
            events.push(NewEvent {
                workload: id.clone(),
                level: EventLevel::Info,
                reason: voodu_model::EventReason::Applied,
                message: format!("{verb} revision {revision}"),
            });
            changes.push(change);
        }
        self.settle_claims(workloads, claimed_ports, &mut read, &mut operations)?;
        events.extend(extra_events.iter().cloned());
        let seq = self.event_seq(&mut read)?;
        let recorded = self.event_puts(seq, &events, at, &mut operations);
        if let Some(before_commit) = before_commit.take() {
            if !before_commit() {
                return Ok(Attempt::Refused);
            }
        }
        if self.commit(read, operations)? {
            Ok(Attempt::Committed(changes, recorded))
        } else {
            Ok(Attempt::Raced)
        }
    }

    /// Reads the claims on `ports` and on every port the applied workloads
    /// claim now, and writes each port's list anew: the other workloads'
    /// claims and the applied ones' new claims
    /// ([`voodu_store::claims::settle`]); fails with every conflict.
    fn settle_claims(
        &self,
        workloads: &[WorkloadInput],
        mut ports: BTreeSet<(ClaimProtocol, u16)>,
        read: &mut Read,
        operations: &mut Vec<TxnOp>,
    ) -> Result<(), StoreError> {
        let asked: Vec<HeldClaim> = workloads
            .iter()
            .flat_map(|input| claims_of_blocks(&input.id, &input.blocks, &input.block_locations))
            .collect();
        ports.extend(ports_of(&asked));
        let applied: BTreeSet<&WorkloadId> = workloads.iter().map(|input| &input.id).collect();
        let (mut held, mut previous) = (Vec::new(), Vec::new());
        for &(protocol, port) in &ports {
            let key = self.keys.claims(protocol, port);
            let kv = self.get(key.clone())?;
            read.saw(&key, kv.as_ref());
            let on_port: Vec<HeldClaim> = kv
                .as_ref()
                .map(|kv| from_json(kv, "claims"))
                .transpose()?
                .unwrap_or_default();
            for claim in on_port {
                if applied.contains(&claim.holder.workload) {
                    previous.push(claim);
                } else {
                    held.push(claim);
                }
            }
        }
        let accepted = settle(&held, &previous, workloads).map_err(StoreError::ClaimsConflict)?;
        for &(protocol, port) in &ports {
            let on_port: Vec<&HeldClaim> = held
                .iter()
                .chain(&accepted)
                .filter(|claim| claim.claim.port_key() == (protocol, port))
                .collect();
            operations.push(self.claims_write(protocol, port, &on_port));
        }
        Ok(())
    }

    /// The write of one port's claims: the list, or the key's delete when
    /// none is left.
    fn claims_write(&self, protocol: ClaimProtocol, port: u16, claims: &[&HeldClaim]) -> TxnOp {
        let key = self.keys.claims(protocol, port);
        if claims.is_empty() {
            TxnOp::delete(key, None)
        } else {
            TxnOp::put(key, to_json(&claims), None)
        }
    }

    /// The documents at `keys`, as read, absent ones left out: a get per
    /// key for a few, one range over `prefix` for many (an apply of a
    /// thousand workloads reads two ranges, not two thousand keys).
    fn read_many(
        &self,
        keys: &[String],
        prefix: String,
    ) -> Result<std::collections::HashMap<String, KeyValue>, StoreError> {
        let mut found = std::collections::HashMap::new();
        if keys.len() <= FEW_KEYS {
            for key in keys {
                if let Some(kv) = self.get(key.clone())? {
                    found.insert(key.clone(), kv);
                }
            }
            return Ok(found);
        }
        let wanted: std::collections::HashSet<&str> = keys.iter().map(String::as_str).collect();
        for kv in self.range(prefix, GetOptions::new())? {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            if wanted.contains(key.as_str()) {
                found.insert(key, kv);
            }
        }
        Ok(found)
    }

    /// When the oldest stored revision of a workload was applied.
    fn first_applied_ms(&self, id: &WorkloadId) -> Result<Option<i64>, StoreError> {
        let oldest = self.range(
            self.keys.revisions(id),
            GetOptions::new()
                .with_sort(SortTarget::Key, SortOrder::Ascend)
                .with_limit(1),
        )?;
        Ok(oldest
            .first()
            .map(|kv| from_json::<RevisionDoc>(kv, "revision"))
            .transpose()?
            .map(|revision| revision.applied_ms))
    }

    /// Runs a write computed by `attempt` until it commits over an
    /// unchanged state, at most [`MAX_ATTEMPTS`] times.
    fn until_committed<T>(
        &self,
        mut attempt: impl FnMut() -> Result<Option<T>, StoreError>,
    ) -> Result<T, StoreError> {
        for _ in 0..MAX_ATTEMPTS {
            if let Some(done) = attempt()? {
                return Ok(done);
            }
            std::thread::sleep(Duration::from_millis(fastrand::u64(1..20)));
        }
        Err(cluster(format!(
            "the write did not commit: what it read kept changing under it ({MAX_ATTEMPTS} attempts)"
        )))
    }

    /// Changes a stored workload's document beside its spec (its revision
    /// unchanged) with `change`, and records `events` at `at`, in one
    /// transaction; `None` when no such workload is stored.
    fn change_workload_doc<T>(
        &self,
        id: &WorkloadId,
        events: &[NewEvent],
        at: i64,
        change: impl Fn(&mut WorkloadDoc) -> T,
    ) -> Result<Option<T>, StoreError> {
        let outcome = self.until_committed(|| {
            let mut read = Read::new();
            let key = self.keys.workload(id);
            let Some((kv, mut document)) = self.workload_doc(id)? else {
                return Ok(Some(None));
            };
            read.saw(&key, Some(&kv));
            let changed = change(&mut document);
            let seq = self.event_seq(&mut read)?;
            let mut operations = vec![TxnOp::put(key, to_json(&document), None)];
            let recorded = self.event_puts(seq, events, at, &mut operations);
            Ok(self
                .commit(read, operations)?
                .then_some(Some((recorded, changed))))
        })?;
        let Some((recorded, changed)) = outcome else {
            return Ok(None);
        };
        self.emit(&recorded);
        self.prune_events(&recorded);
        Ok(Some(changed))
    }

    fn stored(id: &WorkloadId, document: WorkloadDoc) -> StoredWorkload {
        StoredWorkload {
            id: id.clone(),
            revision: document.revision,
            spec_hash: document.spec_hash,
            core_spec: document.core_spec,
            blocks: document.blocks,
            source: document.source,
            created_at: documents::rfc3339(document.created_ms),
            updated_at: documents::rfc3339(document.updated_ms),
            restarted_ms: document.restarted_ms,
            frozen: document.frozen,
        }
    }

    fn workload_docs(
        &self,
        kind: Option<WorkloadKind>,
    ) -> Result<Vec<(WorkloadId, WorkloadDoc)>, StoreError> {
        let prefix = self.keys.workloads(kind);
        let mut found = Vec::new();
        for kv in self.range(prefix, GetOptions::new())? {
            if let Some(id) = self.keys.workload_id_of(kv.key()) {
                found.push((id, from_json(&kv, "workload")?));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }

    fn deletion_doc(&self, id: &WorkloadId) -> Result<Option<(KeyValue, DeletionDoc)>, StoreError> {
        match self.get(self.keys.deletion(id))? {
            Some(kv) => {
                let document = from_json(&kv, "deletion")?;
                Ok(Some((kv, document)))
            }
            None => Ok(None),
        }
    }

    fn event_docs(
        &self,
        prefix: String,
        options: GetOptions,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError> {
        let mut events = Vec::new();
        for kv in self.range(prefix, options)? {
            let document: EventDoc = from_json(&kv, "event")?;
            if let Some(workload) = document.workload() {
                events.push((workload, document.event()));
            }
        }
        Ok(events)
    }
}

impl StateStore for EtcdStore {
    fn id(&self) -> String {
        self.id.clone()
    }

    fn set_event_sink(&self, sink: EventSink) {
        *self.sink.lock() = Some(sink);
    }

    fn apply(
        &self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
    ) -> Result<Vec<StoreChange>, StoreError> {
        let outcome = self.until_committed(|| {
            Ok(self
                .try_apply(workloads, extra_events, &mut None)?
                .settled())
        })?;
        // Without a `before_commit`, an attempt is never refused.
        let (changes, recorded) = outcome.unwrap_or_default();
        self.emit(&recorded);
        self.prune_events(&recorded);
        Ok(changes)
    }

    fn apply_then(
        &self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
        before_commit: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Vec<StoreChange>>, StoreError> {
        // `before_commit` runs once, before the first commit; a commit that
        // must be computed again (another node wrote meanwhile) does not
        // ask it twice.
        let mut once = Some(before_commit);
        let outcome = self.until_committed(|| {
            Ok(self
                .try_apply(workloads, extra_events, &mut once)?
                .settled())
        })?;
        let Some((changes, recorded)) = outcome else {
            return Ok(None);
        };
        self.emit(&recorded);
        self.prune_events(&recorded);
        Ok(Some(changes))
    }

    fn workload(&self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError> {
        Ok(self
            .workload_doc(id)?
            .map(|(_, document)| Self::stored(id, document)))
    }

    fn workloads(&self, kind: Option<WorkloadKind>) -> Result<Vec<StoredWorkload>, StoreError> {
        Ok(self
            .workload_docs(kind)?
            .into_iter()
            .map(|(id, document)| Self::stored(&id, document))
            .collect())
    }

    fn workload_ids(&self) -> Result<Vec<WorkloadId>, StoreError> {
        let mut ids: Vec<WorkloadId> = self
            .range(
                self.keys.workloads(None),
                GetOptions::new().with_keys_only(),
            )?
            .iter()
            .filter_map(|kv| self.keys.workload_id_of(kv.key()))
            .collect();
        ids.sort();
        Ok(ids)
    }

    fn workloads_with_block_type(&self, block_type: &str) -> Result<Vec<WorkloadId>, StoreError> {
        Ok(self
            .workload_docs(None)?
            .into_iter()
            .filter(|(_, document)| {
                document
                    .blocks
                    .iter()
                    .any(|block| block.block_type == block_type)
            })
            .map(|(id, _)| id)
            .collect())
    }

    fn delete(&self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError> {
        let outcome = self.until_committed(|| {
            let mut read = Read::new();
            let key = self.keys.workload(id);
            let Some((kv, document)) = self.workload_doc(id)? else {
                return Ok(Some(None));
            };
            read.saw(&key, Some(&kv));
            let at = now_ms();
            let deletion = DeletionDoc {
                core_spec: document.core_spec.clone(),
                blocks: document.blocks.clone(),
                at_ms: at,
                finished_ms: None,
            };
            let mut operations = vec![
                TxnOp::delete(key, None),
                TxnOp::put(self.keys.deletion(id), to_json(&deletion), None),
            ];
            let seq = self.event_seq(&mut read)?;
            let recorded = self.event_puts(
                seq,
                &[NewEvent {
                    workload: id.clone(),
                    level: EventLevel::Info,
                    reason: voodu_model::EventReason::Deleted,
                    message: format!("deleted at revision {}", document.revision),
                }],
                at,
                &mut operations,
            );
            Ok(self
                .commit(read, operations)?
                .then(|| Some((Self::stored(id, document), recorded))))
        })?;
        let Some((deleted, recorded)) = outcome else {
            return Ok(None);
        };
        self.emit(&recorded);
        self.prune_events(&recorded);
        Ok(Some(deleted))
    }

    fn revisions(&self, id: &WorkloadId) -> Result<Vec<Revision>, StoreError> {
        self.range(
            self.keys.revisions(id),
            GetOptions::new().with_sort(SortTarget::Key, SortOrder::Ascend),
        )?
        .iter()
        .map(|kv| Ok(from_json::<RevisionDoc>(kv, "revision")?.into_revision()))
        .collect()
    }

    fn last_revision(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError> {
        Ok(self
            .last_revision_doc(id)?
            .map(|revision| (revision.core_spec, revision.blocks)))
    }

    fn revision_count(&self, id: &WorkloadId) -> Result<i64, StoreError> {
        let prefix = self.keys.revisions(id);
        let response = self.call(move |mut client| {
            let prefix = prefix.clone();
            async move {
                client
                    .get(
                        prefix,
                        Some(GetOptions::new().with_prefix().with_count_only()),
                    )
                    .await
            }
        })?;
        Ok(response.count())
    }

    fn record_events(&self, events: &[NewEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let recorded = self.until_committed(|| {
            let mut read = Read::new();
            let seq = self.event_seq(&mut read)?;
            let mut operations = Vec::new();
            let recorded = self.event_puts(seq, events, now_ms(), &mut operations);
            Ok(self.commit(read, operations)?.then_some(recorded))
        })?;
        self.emit(&recorded);
        self.prune_events(&recorded);
        Ok(())
    }

    fn last_event_id(&self) -> Result<i64, StoreError> {
        self.event_seq(&mut Read::new())
    }

    fn events_after(
        &self,
        workload: Option<&WorkloadId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError> {
        let (prefix, from) = match workload {
            Some(id) => (
                self.keys.workload_events(id),
                self.keys.workload_event(id, after + 1),
            ),
            None => (self.keys.events(), self.keys.event(after + 1)),
        };
        let end = keys::prefix_end(&prefix);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let response = self.call(move |mut client| {
            let (from, end) = (from.clone(), end.clone());
            async move {
                client
                    .get(
                        from,
                        Some(
                            GetOptions::new()
                                .with_range(end)
                                .with_sort(SortTarget::Key, SortOrder::Ascend)
                                .with_limit(limit),
                        ),
                    )
                    .await
            }
        })?;
        let mut events = Vec::new();
        for kv in response.kvs() {
            let document: EventDoc = from_json(kv, "event")?;
            if let Some(workload) = document.workload() {
                events.push((workload, document.event()));
            }
        }
        Ok(events)
    }

    fn recent_events(
        &self,
        workload: Option<&WorkloadId>,
        limit: usize,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError> {
        let prefix = match workload {
            Some(id) => self.keys.workload_events(id),
            None => self.keys.events(),
        };
        let mut events = self.event_docs(
            prefix,
            GetOptions::new()
                .with_sort(SortTarget::Key, SortOrder::Descend)
                .with_limit(i64::try_from(limit).unwrap_or(i64::MAX)),
        )?;
        events.reverse();
        Ok(events)
    }

    fn events(&self, id: &WorkloadId, limit: usize) -> Result<Vec<Event>, StoreError> {
        Ok(self
            .recent_events(Some(id), limit)?
            .into_iter()
            .map(|(_, event)| event)
            .collect())
    }

    fn record_publication(
        &self,
        workload: &WorkloadId,
        block_type: &str,
        labels: &[String],
        generation: u64,
        endpoints: &[Endpoint],
    ) -> Result<(), StoreError> {
        let document = PublicationDoc {
            block_type: block_type.to_owned(),
            labels: labels.to_vec(),
            generation,
            endpoints: endpoints.to_vec(),
            at_ms: now_ms(),
            forgotten_ms: None,
        };
        let key = self.keys.publication(workload, block_type, labels);
        let value = to_json(&document);
        self.call(move |mut client| {
            let (key, value) = (key.clone(), value.clone());
            async move { client.put(key, value, None).await }
        })?;
        Ok(())
    }

    fn publications(&self, workload: &WorkloadId) -> Result<Vec<Publication>, StoreError> {
        let mut publications: Vec<Publication> = self
            .range(self.keys.publications(workload), GetOptions::new())?
            .iter()
            .map(|kv| Ok(from_json::<PublicationDoc>(kv, "publication")?.into_publication()))
            .collect::<Result<_, StoreError>>()?;
        publications.sort_by(|a, b| (&a.block_type, &a.labels).cmp(&(&b.block_type, &b.labels)));
        Ok(publications)
    }

    fn forget_publication(
        &self,
        workload: &WorkloadId,
        block_type: &str,
        labels: &[String],
    ) -> Result<(), StoreError> {
        let key = self.keys.publication(workload, block_type, labels);
        self.until_committed(|| {
            let mut read = Read::new();
            let Some(kv) = self.get(key.clone())? else {
                return Ok(Some(()));
            };
            read.saw(&key, Some(&kv));
            let mut document: PublicationDoc = from_json(&kv, "publication")?;
            document.endpoints.clear();
            document.forgotten_ms = Some(now_ms());
            let operations = vec![TxnOp::put(key.clone(), to_json(&document), None)];
            Ok(self.commit(read, operations)?.then_some(()))
        })
    }

    fn config_bucket(&self, bucket: &BucketName) -> Result<Bucket, StoreError> {
        self.stored_bucket(bucket)?
            .into_iter()
            .map(|(key, _, stored)| {
                let value = SecretKeys::open(self.secrets.as_deref(), bucket, &key, stored)?;
                Ok((key, value))
            })
            .collect()
    }

    fn reseal_secrets(&self, reseal: Reseal) -> Result<usize, StoreError> {
        let Some(keys) = self.secrets.clone() else {
            return Ok(0);
        };
        let mut resealed = 0;
        for bucket in self.config_buckets()? {
            // A bucket at a time, each variable's put guarded by what was
            // read, so a `config set` meanwhile is never overwritten.
            let count = self.until_committed(|| {
                let mut read = Read::new();
                let mut operations = Vec::new();
                for (key, kv, stored) in self.stored_bucket(&bucket)? {
                    if !reseal.wants(&keys, &stored) {
                        continue;
                    }
                    let value = SecretKeys::open(Some(&keys), &bucket, &key, stored)?;
                    let sealed = SecretKeys::seal(Some(&keys), &bucket, &key, &value)?;
                    read.saw(&String::from_utf8_lossy(kv.key()), Some(&kv));
                    operations.push(TxnOp::put(
                        kv.key().to_vec(),
                        to_json(&ConfigDoc::of(sealed)),
                        None,
                    ));
                }
                let count = operations.len();
                if count == 0 {
                    return Ok(Some(0));
                }
                Ok(self.commit(read, operations)?.then_some(count))
            })?;
            resealed += count;
        }
        Ok(resealed)
    }

    fn config_buckets(&self) -> Result<Vec<BucketName>, StoreError> {
        let prefix = self.keys.all_config();
        let mut buckets: Vec<BucketName> = self
            .range(prefix.clone(), GetOptions::new().with_keys_only())?
            .iter()
            .filter_map(|kv| {
                self.keys
                    .config_bucket_of(&String::from_utf8_lossy(kv.key()))
            })
            .collect();
        buckets.dedup();
        Ok(buckets)
    }

    fn restart(&self, id: &WorkloadId, events: &[NewEvent]) -> Result<Option<i64>, StoreError> {
        let at = now_ms();
        self.change_workload_doc(id, events, at, |document| {
            document.restarted_ms = Some(at);
            at
        })
    }

    fn freeze(
        &self,
        id: &WorkloadId,
        change: &voodu_store::Freeze,
        events: &[NewEvent],
    ) -> Result<Option<std::collections::BTreeSet<String>>, StoreError> {
        self.change_workload_doc(id, events, now_ms(), |document| {
            document.frozen = change.applied_to(std::mem::take(&mut document.frozen));
            document.frozen.clone()
        })
    }

    fn config_holds(&self, workload: &WorkloadId) -> Result<Vec<ConfigHold>, StoreError> {
        let prefix = self.keys.config_holds(workload);
        self.range(prefix, GetOptions::new())?
            .iter()
            .map(|kv| from_json::<ConfigHold>(kv, "config hold"))
            .collect()
    }

    fn change_config(
        &self,
        bucket: &BucketName,
        set: &Bucket,
        unset: &[String],
        events: &[NewEvent],
        holds: &HoldChange,
    ) -> Result<(), StoreError> {
        let recorded = self.until_committed(|| {
            let mut read = Read::new();
            let seq = self.event_seq(&mut read)?;
            let mut operations: Vec<TxnOp> = set
                .iter()
                .map(|(key, value)| {
                    let stored = SecretKeys::seal(self.secrets.as_deref(), bucket, key, value)?;
                    Ok(TxnOp::put(
                        self.keys.config_value(bucket, key),
                        to_json(&ConfigDoc::of(stored)),
                        None,
                    ))
                })
                .collect::<Result<_, StoreError>>()?;
            operations.extend(
                unset
                    .iter()
                    .filter(|key| !set.contains_key(*key))
                    .map(|key| TxnOp::delete(self.keys.config_value(bucket, key), None)),
            );
            match holds {
                HoldChange::Keep(kept) => operations.extend(kept.iter().map(|hold| {
                    let key = format!("{}{}", self.keys.config_holds(&hold.workload), hold.hash);
                    TxnOp::put(key, to_json(hold), None)
                })),
                HoldChange::Release(workloads) => {
                    operations.extend(workloads.iter().map(|workload| {
                        TxnOp::delete(
                            self.keys.config_holds(workload),
                            Some(DeleteOptions::new().with_prefix()),
                        )
                    }))
                }
            }
            let recorded = self.event_puts(seq, events, now_ms(), &mut operations);
            Ok(self.commit(read, operations)?.then_some(recorded))
        })?;
        self.emit(&recorded);
        self.prune_events(&recorded);
        Ok(())
    }

    fn clear_publications(&self, workload: &WorkloadId) -> Result<(), StoreError> {
        let prefix = self.keys.publications(workload);
        self.call(move |mut client| {
            let prefix = prefix.clone();
            async move {
                client
                    .delete(prefix, Some(DeleteOptions::new().with_prefix()))
                    .await
            }
        })?;
        Ok(())
    }

    fn deletion(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError> {
        Ok(self
            .deletion_doc(id)?
            .filter(|(_, document)| document.finished_ms.is_none())
            .map(|(_, document)| (document.core_spec, document.blocks)))
    }

    fn deletions(&self) -> Result<Vec<WorkloadId>, StoreError> {
        let mut pending = Vec::new();
        for kv in self.range(self.keys.deletions(), GetOptions::new())? {
            let document: DeletionDoc = from_json(&kv, "deletion")?;
            if document.finished_ms.is_none() {
                if let Some(id) = self.keys.deletion_id_of(kv.key()) {
                    pending.push((document.at_ms, id));
                }
            }
        }
        pending.sort();
        Ok(pending.into_iter().map(|(_, id)| id).collect())
    }

    fn tombstone(&self, id: &WorkloadId) -> Result<Option<Tombstone>, StoreError> {
        Ok(self.deletion_doc(id)?.map(|(_, document)| Tombstone {
            core_spec: document.core_spec,
            blocks: document.blocks,
            deleted_ms: document.at_ms,
            finished: document.finished_ms.is_some(),
        }))
    }

    fn finish_deletion(&self, id: &WorkloadId) -> Result<(), StoreError> {
        self.until_committed(|| {
            let mut read = Read::new();
            let key = self.keys.deletion(id);
            let mut operations = vec![TxnOp::delete(
                self.keys.publications(id),
                Some(DeleteOptions::new().with_prefix()),
            )];
            if let Some((kv, mut document)) = self.deletion_doc(id)? {
                read.saw(&key, Some(&kv));
                if document.finished_ms.is_none() {
                    // Its plugins have forgotten its blocks: what they
                    // claimed is free, unless it was applied again
                    // meanwhile (which claimed anew).
                    let workload_key = self.keys.workload(id);
                    let applied_again = self.get(workload_key.clone())?;
                    read.saw(&workload_key, applied_again.as_ref());
                    if applied_again.is_none() {
                        for (protocol, port) in claim_ports(&document.blocks) {
                            let claims_key = self.keys.claims(protocol, port);
                            let Some(kv) = self.get(claims_key.clone())? else {
                                continue;
                            };
                            read.saw(&claims_key, Some(&kv));
                            let on_port: Vec<HeldClaim> = from_json(&kv, "claims")?;
                            let kept: Vec<&HeldClaim> = on_port
                                .iter()
                                .filter(|claim| claim.holder.workload != *id)
                                .collect();
                            operations.push(self.claims_write(protocol, port, &kept));
                        }
                    }
                    document.finished_ms = Some(now_ms());
                    operations.push(TxnOp::put(key, to_json(&document), None));
                }
            }
            Ok(self.commit(read, operations)?.then_some(()))
        })
    }

    fn backup_to(&self, _path: &Path) -> Result<(), StoreError> {
        Err(StoreError::NotSupported(
            "a cluster's store is etcd: take its backup with `etcdctl snapshot save FILE` (etcd's own snapshot, consistent across the cluster)".into(),
        ))
    }
}
