//! # voodu-store
//!
//! The embedded store: SQLite (through rusqlite, bundled) in
//! `<root>/state.db`, in WAL mode, with a versioned schema ([`schema`]).
//!
//! It keeps each workload's current revision, core spec and normalised
//! blocks, every revision ever applied, and an event log per workload. It
//! knows nothing of plugins or Docker: blocks are JSON to it. One module
//! per table: [`workloads`] (and blocks), [`revisions`], [`events`],
//! [`publications`], [`deletions`].
//!
//! **May not depend on** any voodu crate but `voodu-model` and
//! `voodu-plugin-abi` (`tests/crate_rules.rs` checks this).

#![warn(missing_docs)]

pub mod claims;
pub mod config;
pub mod deletions;
pub mod events;
pub mod interface;
pub mod publications;
pub mod revisions;
mod schema;
pub mod sealing;
pub mod workloads;

pub use deletions::Tombstone;
pub use events::{Event, EventSink, NewEvent, MAX_EVENTS_PER_WORKLOAD};
pub use interface::{SqliteStore, StateStore};
pub use publications::Publication;
pub use revisions::Revision;
pub use workloads::{spec_hash, Freeze, StoreChange, StoredWorkload, WorkloadInput};

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use voodu_model::{CoreSpec, WorkloadId};

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused an operation.
    #[error("the state database failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The schema could not be brought up to date.
    #[error("the state database schema could not be migrated: {0}")]
    Migration(#[from] rusqlite_migration::Error),
    /// A stored JSON column did not parse: the database was edited by hand
    /// or written by an incompatible voodu.
    #[error("the state database holds a malformed {what}: {source}")]
    Corrupt {
        /// Which column.
        what: &'static str,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A remote store (a cluster's etcd) failed or did not answer in
    /// time: nothing of the call was written.
    #[error("the cluster store failed: {0} — nothing was stored")]
    Cluster(String),
    /// A cluster's etcd answered, but refused this node: its TLS
    /// certificates, or its etcd user. The message names which, and the
    /// fix.
    #[error("{0}")]
    ClusterAccess(String),
    /// A cluster's etcd did not answer because too few of its members are
    /// reachable to make a quorum: nothing of the call was written.
    #[error("the cluster store has no quorum ({reachable} of {members} members reachable) — nothing was stored; start the members that are down, and the cluster goes on by itself")]
    NoQuorum {
        /// The members that answered a status request.
        reachable: usize,
        /// The members the store knows of.
        members: usize,
    },
    /// The store cannot do this; the message says what to do instead.
    #[error("{0}")]
    NotSupported(String),
    /// Blocks of the apply claim what other blocks hold: nothing was
    /// stored. Every conflict is listed.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    ClaimsConflict(Vec<claims::ClaimConflict>),
    /// A sealed secret cannot be opened.
    #[error("{0}")]
    Secret(Box<sealing::SecretError>),
    /// The system gave no random bytes to seal a secret with: nothing was
    /// stored.
    #[error("cannot seal a secret: the system gave no random bytes ({0}) — nothing was stored")]
    NoRandomness(String),
}

pub use voodu_model::EventLevel;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

/// Unix milliseconds as RFC 3339 to the second, in UTC: how every store
/// shows a time.
pub fn rfc3339(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect(
        "cannot fail: the store writes JSON values, strings and endpoint lists, \
         whose map keys are strings, into memory",
    )
}

fn from_json<T: for<'de> Deserialize<'de>>(
    text: &str,
    what: &'static str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|source| StoreError::Corrupt { what, source })
}

/// The state database.
pub struct Store {
    connection: Connection,
    sink: Option<EventSink>,
    /// The store's identity (see [`Store::id`]).
    id: String,
    /// The keys secrets are sealed and opened with; none: stored plain.
    secrets: Option<std::sync::Arc<sealing::SecretKeys>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path`, switches it to WAL
    /// and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::prepare(Connection::open(path)?)
    }

    /// A private in-memory database, for tests.
    pub fn open_in_memory() -> Result<Store, StoreError> {
        Store::prepare(Connection::open_in_memory()?)
    }

    fn prepare(mut connection: Connection) -> Result<Store, StoreError> {
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        // What is overwritten or deleted is zeroed, so a secret sealed in
        // place leaves no plain copy in a free page.
        connection.pragma_update(None, "secure_delete", "ON")?;
        connection.busy_timeout(Duration::from_secs(5))?;
        schema::migrations().to_latest(&mut connection)?;
        let id =
            connection.query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |row| {
                row.get(0)
            })?;
        Ok(Store {
            connection,
            sink: None,
            id,
            secrets: None,
        })
    }

    /// Writes a consistent copy of the whole database to `path`, through
    /// SQLite's online backup API: other connections may write meanwhile,
    /// and the copy is as of one moment. The caller holds this store's
    /// lock, so this connection's own writes wait.
    pub fn backup_to(&self, path: &Path) -> Result<(), StoreError> {
        self.connection
            .backup(rusqlite::MAIN_DB, path, None)
            .map_err(StoreError::from)
    }

    /// The store's identity: 16 hex digits made when it was created, and
    /// carried by every container made for its workloads. A backup keeps
    /// it; a new or lost store's is another.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Sets the function that hears every event recorded from now on, once
    /// its transaction has committed.
    pub fn set_event_sink(&mut self, sink: EventSink) {
        self.sink = Some(sink);
    }

    fn emit(&self, recorded: &[(WorkloadId, Event)]) {
        if let Some(sink) = &self.sink {
            for (workload, event) in recorded {
                sink(workload, event);
            }
        }
    }

    /// The schema version the database is at.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .connection
            .pragma_query_value(None, "user_version", |row| row.get(0))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use voodu_model::NormalisedBlock;
    use voodu_plugin_abi::messages::WorkloadKind;

    fn input(name: &str, replicas: u32, blocks: &[(&str, &[&str])]) -> WorkloadInput {
        WorkloadInput {
            block_locations: Vec::new(),
            id: WorkloadId::new(WorkloadKind::Deployment, "prod", name),
            core_spec: CoreSpec::of_image("esl:1", replicas),
            blocks: blocks
                .iter()
                .map(|(block_type, labels)| NormalisedBlock {
                    claims: Vec::new(),
                    block_type: (*block_type).into(),
                    labels: labels.iter().map(|l| (*l).to_owned()).collect(),
                    spec: json!({"port": 8084}),
                    endpoints: voodu_model::EndpointEnvelope {
                        port: Some(8084),
                        addressing: voodu_plugin_abi::messages::Addressing::Ip,
                    },
                })
                .collect(),
            source: Some("esl.hcl:1:1".into()),
        }
    }

    #[test]
    fn events_are_pruned_to_the_newest_thousand_per_workload() {
        let mut store = Store::open_in_memory().unwrap();
        let busy = WorkloadId::new(WorkloadKind::Deployment, "prod", "busy");
        let quiet = WorkloadId::new(WorkloadKind::Deployment, "prod", "quiet");
        let event = |workload: &WorkloadId, n: usize| NewEvent {
            workload: workload.clone(),
            level: EventLevel::Info,
            reason: voodu_model::EventReason::Other("test".into()),
            message: format!("event {n}"),
        };
        store.record_events(&[event(&quiet, 0)]).unwrap();
        let many: Vec<NewEvent> = (0..1500).map(|n| event(&busy, n)).collect();
        store.record_events(&many).unwrap();
        let kept = store.events(&busy, 5000).unwrap();
        assert_eq!(kept.len(), 1000);
        assert_eq!(kept.first().unwrap().message, "event 500");
        assert_eq!(kept.last().unwrap().message, "event 1499");
        assert_eq!(store.events(&quiet, 10).unwrap().len(), 1);
    }

    #[test]
    fn a_finished_deletion_leaves_a_tombstone_until_the_workload_is_applied_again() {
        let mut store = Store::open_in_memory().unwrap();
        let esl = WorkloadId::new(WorkloadKind::Deployment, "prod", "esl");
        assert!(store.tombstone(&esl).unwrap().is_none(), "never deleted");
        store
            .apply(&[input("esl", 1, &[("echo", &[])])], &[])
            .unwrap();
        let before_ms = now_ms();
        store.delete(&esl).unwrap().unwrap();
        let pending = store.tombstone(&esl).unwrap().unwrap();
        assert!(!pending.finished);
        assert!(pending.deleted_ms >= before_ms);
        assert_eq!(pending.blocks.len(), 1, "the deleted revision's blocks");
        store.finish_deletion(&esl).unwrap();
        let finished = store.tombstone(&esl).unwrap().unwrap();
        assert!(finished.finished);
        assert_eq!(finished.deleted_ms, pending.deleted_ms);
        // Deleted again after an apply: a fresh, unfinished tombstone.
        store.apply(&[input("esl", 1, &[])], &[]).unwrap();
        assert!(store.tombstone(&esl).unwrap().is_none(), "applied again");
        store.delete(&esl).unwrap().unwrap();
        assert!(!store.tombstone(&esl).unwrap().unwrap().finished);
    }

    #[test]
    fn a_store_keeps_its_identity_and_a_new_store_gets_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let first = Store::open(&path).unwrap().id().to_owned();
        assert_eq!(first.len(), 16);
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(Store::open(&path).unwrap().id(), first, "reopened");
        std::fs::remove_file(&path).unwrap();
        let _ = std::fs::remove_file(dir.path().join("state.db-wal"));
        let _ = std::fs::remove_file(dir.path().join("state.db-shm"));
        assert_ne!(
            Store::open(&path).unwrap().id(),
            first,
            "a lost store's successor"
        );
    }

    #[test]
    fn a_store_written_at_schema_3_migrates_with_its_data_and_gets_an_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            // The schema as the previous release wrote it, with a pending
            // deletion in it.
            let mut connection = Connection::open(&path).unwrap();
            schema::migrations().to_version(&mut connection, 3).unwrap();
            connection
                .execute(
                    "INSERT INTO deletions (kind, scope, name, core_spec, blocks, at_ms)
                     VALUES ('deployment', 'prod', 'esl', '{\"image\":\"esl:1\",\"replicas\":1,\"ports\":[],\"drain_timeout\":\"30s\"}', '[]', 5)",
                    [],
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 12);
        assert_eq!(store.id().len(), 16);
        let esl = WorkloadId::new(WorkloadKind::Deployment, "prod", "esl");
        assert_eq!(store.deletions().unwrap(), vec![esl.clone()]);
        let tombstone = store.tombstone(&esl).unwrap().unwrap();
        assert_eq!((tombstone.deleted_ms, tombstone.finished), (5, false));
    }

    #[test]
    fn the_database_is_in_wal_mode_at_the_latest_schema() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let mode: String = store
            .connection
            .pragma_query_value(None, "journal_mode", |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        assert_eq!(store.schema_version().unwrap(), 12);
        drop(store);
        // Reopening an up-to-date database migrates nothing and keeps data.
        assert_eq!(
            Store::open(&dir.path().join("state.db"))
                .unwrap()
                .schema_version()
                .unwrap(),
            12
        );
    }

    #[test]
    fn a_deletion_stays_until_finished_and_a_new_apply_clears_it() {
        let mut store = Store::open_in_memory().unwrap();
        let heard = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = heard.clone();
        store.set_event_sink(Box::new(move |id, event| {
            sink.lock().push((id.to_string(), event.reason.to_string()))
        }));
        let esl = WorkloadId::new(WorkloadKind::Deployment, "prod", "esl");
        let input = WorkloadInput {
            block_locations: Vec::new(),
            id: esl.clone(),
            core_spec: CoreSpec::of_image("esl:1", 1),
            blocks: vec![],
            source: None,
        };
        store.apply(std::slice::from_ref(&input), &[]).unwrap();
        store.delete(&esl).unwrap().unwrap();
        assert_eq!(store.deletions().unwrap(), std::slice::from_ref(&esl));
        let (core, blocks) = store.deletion(&esl).unwrap().unwrap();
        assert_eq!(core.image.as_deref(), Some("esl:1"));
        assert!(blocks.is_empty());
        store.apply(std::slice::from_ref(&input), &[]).unwrap();
        assert!(store.deletions().unwrap().is_empty());
        store.delete(&esl).unwrap().unwrap();
        store.finish_deletion(&esl).unwrap();
        assert!(store.deletion(&esl).unwrap().is_none());
        assert!(store.deletions().unwrap().is_empty());
        // Every event reached the sink once committed, with its workload.
        let reasons: Vec<String> = heard.lock().iter().map(|(_, r)| r.clone()).collect();
        assert_eq!(reasons, ["applied", "deleted", "applied", "deleted"]);
        let after = store.events_after(Some(&esl), 0, 10).unwrap();
        assert_eq!(after.len(), 4);
        assert_eq!(
            store.recent_events(None, 2).unwrap()[0].1.reason,
            voodu_model::EventReason::Applied
        );
        assert_eq!(store.last_event_id().unwrap(), after[3].1.id);
    }

    #[test]
    fn a_version_1_database_is_migrated_and_keeps_its_workloads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut old = Connection::open(&path).unwrap();
        schema::migrations().to_version(&mut old, 1).unwrap();
        old.execute(
            "INSERT INTO workloads VALUES ('deployment', 'prod', 'esl', 4, 'h', '{\"image\":\"esl:1\",\"replicas\":1,\"ports\":[],\"drain_timeout\":\"30s\"}', NULL, 0, 0)",
            [],
        )
        .unwrap();
        drop(old);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 12);
        let esl = store
            .workload(&WorkloadId::new(WorkloadKind::Deployment, "prod", "esl"))
            .unwrap()
            .unwrap();
        assert_eq!(esl.revision, 4);
        assert!(store.publications(&esl.id).unwrap().is_empty());
    }

    #[test]
    fn blocks_keep_their_order_and_are_found_by_type() {
        let mut store = Store::open_in_memory().unwrap();
        let blocks: &[(&str, &[&str])] =
            &[("traffik", &["b"]), ("haproxy", &[]), ("traffik", &["a"])];
        store
            .apply(&[input("esl", 1, blocks), input("api", 1, &[])], &[])
            .unwrap();
        let stored = store
            .workload(&WorkloadId::new(WorkloadKind::Deployment, "prod", "esl"))
            .unwrap()
            .unwrap();
        let order: Vec<_> = stored
            .blocks
            .iter()
            .map(|b| format!("{}{:?}", b.block_type, b.labels))
            .collect();
        assert_eq!(order, ["traffik[\"b\"]", "haproxy[]", "traffik[\"a\"]"]);
        assert_eq!(
            store.workloads_with_block_type("traffik").unwrap(),
            [WorkloadId::new(WorkloadKind::Deployment, "prod", "esl")]
        );
        assert!(store.workloads_with_block_type("echo").unwrap().is_empty());
        assert_eq!(store.workloads(None).unwrap().len(), 2);
        assert!(store
            .workloads(Some(WorkloadKind::Statefulset))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn delete_removes_the_workload_and_keeps_its_history() {
        let mut store = Store::open_in_memory().unwrap();
        let esl = input("esl", 1, &[("traffik", &[])]);
        store.apply(std::slice::from_ref(&esl), &[]).unwrap();
        let deleted = store.delete(&esl.id).unwrap().unwrap();
        assert_eq!(deleted.blocks.len(), 1);
        assert!(store.workload(&esl.id).unwrap().is_none());
        assert!(store
            .workloads_with_block_type("traffik")
            .unwrap()
            .is_empty());
        assert!(store.delete(&esl.id).unwrap().is_none());
        assert_eq!(
            store.events(&esl.id, 10).unwrap().last().unwrap().reason,
            voodu_model::EventReason::Deleted
        );
        // Applying it again continues the revision count.
        assert_eq!(
            store.apply(&[esl], &[]).unwrap(),
            [StoreChange::Created { revision: 2 }]
        );
    }

    #[test]
    fn schema_6_marks_the_sets_of_blocks_dropped_before_it_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            // Schema 5, with esl's one block "http", and sets published to
            // it and to a "sip" block a later revision dropped.
            let mut connection = Connection::open(&path).unwrap();
            schema::migrations().to_version(&mut connection, 5).unwrap();
            connection
                .execute_batch(
                    r#"INSERT INTO workloads VALUES ('deployment','prod','esl',2,'h','{"image":"esl:1","replicas":1,"drain_timeout":"30s"}',NULL,0,0);
                    INSERT INTO blocks VALUES ('deployment','prod','esl',0,'traffik','["http"]','{}','{"port":8084}');
                    INSERT INTO publications VALUES ('deployment','prod','esl','traffik','["http"]',3,'[]',1);
                    INSERT INTO publications VALUES ('deployment','prod','esl','traffik','["sip"]',5,'[{"replica_id":"a","address":"x:1"}]',1);"#,
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let esl = WorkloadId::new(WorkloadKind::Deployment, "prod", "esl");
        let publications = store.publications(&esl).unwrap();
        let state: Vec<(String, bool, u64, usize)> = publications
            .iter()
            .map(|p| {
                (
                    p.labels.join(","),
                    p.forgotten_at.is_some(),
                    p.generation,
                    p.endpoints.len(),
                )
            })
            .collect();
        assert_eq!(
            state,
            [("http".into(), false, 3, 0), ("sip".into(), true, 5, 0)]
        );
    }

    #[test]
    fn key_order_is_part_of_the_spec_and_of_its_hash() {
        // Plugins receive keys in the order they were written, so a block
        // written in another order is another spec.
        let core = CoreSpec::of_image("esl:1", 1);
        let with_spec = |spec: &str| {
            let mut block = input("esl", 1, &[("traffik", &[])]).blocks.remove(0);
            block.spec = serde_json::from_str(spec).unwrap();
            vec![block]
        };
        let a = spec_hash(&core, &with_spec(r#"{"a": 1, "b": 2}"#));
        assert_ne!(a, spec_hash(&core, &with_spec(r#"{"b": 2, "a": 1}"#)));
        assert_eq!(a, spec_hash(&core, &with_spec(r#"{"a": 1, "b": 2}"#)));
        assert_ne!(a, spec_hash(&core, &with_spec(r#"{"a": 1, "b": 3}"#)));
        assert_ne!(
            a,
            spec_hash(
                &CoreSpec::of_image("esl:2", 1),
                &with_spec(r#"{"a": 1, "b": 2}"#)
            )
        );
    }
}
