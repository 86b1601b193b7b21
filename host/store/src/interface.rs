//! The store interface: what the controller and the reconciler need of a
//! store, so that SQLite (one host, [`SqliteStore`]) and a remote store
//! (several hosts) stand behind one seam, as k3s puts SQLite and etcd
//! behind one.
//!
//! Shaped for a store that can be remote and can fail:
//!
//! - every method takes `&self` (an implementation synchronises itself)
//!   and returns a typed [`StoreError`];
//! - **transactions are explicit**: each method is one transaction, all of
//!   it or none, and the methods that write several things say so
//!   ([`StateStore::apply`], [`StateStore::apply_then`],
//!   [`StateStore::delete`], [`StateStore::finish_deletion`]). No caller
//!   holds a transaction open across a call of its own, so no lock or
//!   lease of the store outlives one method.
//! - events reach the sink ([`StateStore::set_event_sink`]) only once their
//!   transaction has committed.

use std::path::Path;

use parking_lot::Mutex;
use voodu_model::config::{Bucket, BucketName};
use voodu_model::CoreSpec;
use voodu_model::{NormalisedBlock, WorkloadId};
use voodu_plugin_abi::messages::{Endpoint, WorkloadKind};

use crate::{
    Event, EventSink, NewEvent, Publication, Revision, Store, StoreChange, StoreError,
    StoredWorkload, Tombstone, WorkloadInput,
};

/// A store of voodu's desired state: workloads and their revisions,
/// deletions, events and the last published sets. Every method is one
/// transaction.
pub trait StateStore: Send + Sync + std::fmt::Debug {
    /// The store's identity: made when it was created, carried by every
    /// container made for its workloads; a backup keeps it.
    fn id(&self) -> String;

    /// Sets the function that hears every event recorded from now on, once
    /// its transaction has committed.
    fn set_event_sink(&self, sink: EventSink);

    /// Stores every workload and the events given, in one transaction: all
    /// of it or none. A workload whose spec hash is unchanged gets no new
    /// revision.
    fn apply(
        &self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
    ) -> Result<Vec<StoreChange>, StoreError>;

    /// Like [`StateStore::apply`], but runs `before_commit` once everything
    /// is written and before the commit; when it answers `false`, nothing
    /// is stored and `Ok(None)` is returned. It makes a change outside the
    /// store (a plugin going live) part of the same all-or-nothing step.
    fn apply_then(
        &self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
        before_commit: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Vec<StoreChange>>, StoreError>;

    /// One workload as of its current revision.
    fn workload(&self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError>;

    /// Every stored workload, of one kind or all.
    fn workloads(&self, kind: Option<WorkloadKind>) -> Result<Vec<StoredWorkload>, StoreError>;

    /// The ids of every stored workload.
    fn workload_ids(&self) -> Result<Vec<WorkloadId>, StoreError>;

    /// The stored workloads with a block of this type.
    fn workloads_with_block_type(&self, block_type: &str) -> Result<Vec<WorkloadId>, StoreError>;

    /// Deletes a workload, records a `deleted` event and leaves a deletion
    /// for the reconciler to finish, in one transaction. `None`: no such
    /// workload.
    fn delete(&self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError>;

    /// Every revision of a workload, oldest first, deleted or not.
    fn revisions(&self, id: &WorkloadId) -> Result<Vec<Revision>, StoreError>;

    /// The core spec and blocks of a workload's last revision.
    fn last_revision(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError>;

    /// How many revisions of a workload are stored.
    fn revision_count(&self, id: &WorkloadId) -> Result<i64, StoreError>;

    /// Records events, in one transaction.
    fn record_events(&self, events: &[NewEvent]) -> Result<(), StoreError>;

    /// The newest event's id (0 when there is none).
    fn last_event_id(&self) -> Result<i64, StoreError>;

    /// Events after an id, oldest first, of one workload or all.
    fn events_after(
        &self,
        workload: Option<&WorkloadId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError>;

    /// The newest events, oldest first, of one workload or all.
    fn recent_events(
        &self,
        workload: Option<&WorkloadId>,
        limit: usize,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError>;

    /// A workload's newest events, oldest first.
    fn events(&self, id: &WorkloadId, limit: usize) -> Result<Vec<Event>, StoreError>;

    /// Records what was last published to one block.
    fn record_publication(
        &self,
        workload: &WorkloadId,
        block_type: &str,
        labels: &[String],
        generation: u64,
        endpoints: &[Endpoint],
    ) -> Result<(), StoreError>;

    /// The last set published to each block of a workload.
    fn publications(&self, workload: &WorkloadId) -> Result<Vec<Publication>, StoreError>;

    /// Marks one block's publication forgotten: its set emptied, its
    /// generation kept (see [`crate::Store::forget_publication`]).
    fn forget_publication(
        &self,
        workload: &WorkloadId,
        block_type: &str,
        labels: &[String],
    ) -> Result<(), StoreError>;

    /// Forgets every set published to a workload's blocks.
    fn clear_publications(&self, workload: &WorkloadId) -> Result<(), StoreError>;

    /// An unfinished deletion: the deleted revision's core spec and blocks.
    fn deletion(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError>;

    /// Every workload whose deletion is unfinished.
    fn deletions(&self) -> Result<Vec<WorkloadId>, StoreError>;

    /// A workload's last deletion, finished or not, while it is not applied
    /// again.
    fn tombstone(&self, id: &WorkloadId) -> Result<Option<Tombstone>, StoreError>;

    /// Marks a deletion finished, and forgets its publications, in one
    /// transaction.
    fn finish_deletion(&self, id: &WorkloadId) -> Result<(), StoreError>;

    /// Writes a consistent copy of the whole store to `path`.
    fn backup_to(&self, path: &Path) -> Result<(), StoreError>;

    /// A config bucket's variables; empty when it has none.
    fn config_bucket(&self, bucket: &BucketName) -> Result<Bucket, StoreError>;

    /// Every config bucket that has a variable, in name order.
    fn config_buckets(&self) -> Result<Vec<BucketName>, StoreError>;

    /// Marks a workload restarted now (`vd restart`: its replicas are
    /// replaced, its spec and revision stay) and records `events`, all or
    /// nothing; returns the mark (Unix milliseconds), `None` when no such
    /// workload is stored.
    fn restart(&self, id: &WorkloadId, events: &[NewEvent]) -> Result<Option<i64>, StoreError>;

    /// Changes which of a workload's replicas are frozen (`vd stop`, `vd
    /// start`) and records `events`, all or nothing; returns the frozen
    /// set now, `None` when no such workload is stored.
    fn freeze(
        &self,
        id: &WorkloadId,
        change: &crate::Freeze,
        events: &[NewEvent],
    ) -> Result<Option<std::collections::BTreeSet<String>>, StoreError>;

    /// Sets `set` and removes `unset` in one bucket, and records
    /// `events`, all or nothing. Secrets are sealed under the first
    /// secrets key, when the store has keys ([`crate::sealing`]).
    fn change_config(
        &self,
        bucket: &BucketName,
        set: &Bucket,
        unset: &[String],
        events: &[NewEvent],
        holds: &crate::config::HoldChange,
    ) -> Result<(), StoreError>;

    /// The holds kept for `workload` (`vd config ... --no-restart`),
    /// current or not ([`crate::config::ConfigHold::holds_for`]).
    fn config_holds(
        &self,
        workload: &WorkloadId,
    ) -> Result<Vec<crate::config::ConfigHold>, StoreError>;

    /// Seals anew, under the first secrets key, every secret `reseal`
    /// wants, recording no event (no value changes); returns how many.
    /// Without keys, none. A secret under a key the store lacks fails it,
    /// naming the key, with nothing rewritten.
    fn reseal_secrets(&self, reseal: crate::sealing::Reseal) -> Result<usize, StoreError>;
}

/// The embedded store: one SQLite database ([`Store`]), its connection
/// behind a mutex held for one method at a time.
#[derive(Debug)]
pub struct SqliteStore {
    database: Mutex<Store>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore::from(Store::open(path)?))
    }

    /// A private in-memory database, for tests.
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore::from(Store::open_in_memory()?))
    }

    /// The schema version the database is at.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.database.lock().schema_version()
    }

    /// The keys secrets are sealed and opened with, from now on.
    pub fn set_secret_keys(&self, keys: Option<std::sync::Arc<crate::sealing::SecretKeys>>) {
        self.database.lock().set_secret_keys(keys);
    }
}

impl From<Store> for SqliteStore {
    fn from(database: Store) -> Self {
        SqliteStore {
            database: Mutex::new(database),
        }
    }
}

impl StateStore for SqliteStore {
    fn id(&self) -> String {
        self.database.lock().id().to_owned()
    }

    fn set_event_sink(&self, sink: EventSink) {
        self.database.lock().set_event_sink(sink);
    }

    fn apply(
        &self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
    ) -> Result<Vec<StoreChange>, StoreError> {
        self.database.lock().apply(workloads, extra_events)
    }

    fn apply_then(
        &self,
        workloads: &[WorkloadInput],
        extra_events: &[NewEvent],
        before_commit: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Vec<StoreChange>>, StoreError> {
        let stored = self
            .database
            .lock()
            .apply_then(workloads, extra_events, || {
                if before_commit() {
                    Ok(())
                } else {
                    Err(())
                }
            })?;
        Ok(stored.ok().map(|(changes, ())| changes))
    }

    fn workload(&self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError> {
        self.database.lock().workload(id)
    }

    fn workloads(&self, kind: Option<WorkloadKind>) -> Result<Vec<StoredWorkload>, StoreError> {
        self.database.lock().workloads(kind)
    }

    fn workload_ids(&self) -> Result<Vec<WorkloadId>, StoreError> {
        self.database.lock().workload_ids()
    }

    fn workloads_with_block_type(&self, block_type: &str) -> Result<Vec<WorkloadId>, StoreError> {
        self.database.lock().workloads_with_block_type(block_type)
    }

    fn delete(&self, id: &WorkloadId) -> Result<Option<StoredWorkload>, StoreError> {
        self.database.lock().delete(id)
    }

    fn revisions(&self, id: &WorkloadId) -> Result<Vec<Revision>, StoreError> {
        self.database.lock().revisions(id)
    }

    fn last_revision(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError> {
        self.database.lock().last_revision(id)
    }

    fn revision_count(&self, id: &WorkloadId) -> Result<i64, StoreError> {
        self.database.lock().revision_count(id)
    }

    fn record_events(&self, events: &[NewEvent]) -> Result<(), StoreError> {
        self.database.lock().record_events(events)
    }

    fn last_event_id(&self) -> Result<i64, StoreError> {
        self.database.lock().last_event_id()
    }

    fn events_after(
        &self,
        workload: Option<&WorkloadId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError> {
        self.database.lock().events_after(workload, after, limit)
    }

    fn recent_events(
        &self,
        workload: Option<&WorkloadId>,
        limit: usize,
    ) -> Result<Vec<(WorkloadId, Event)>, StoreError> {
        self.database.lock().recent_events(workload, limit)
    }

    fn events(&self, id: &WorkloadId, limit: usize) -> Result<Vec<Event>, StoreError> {
        self.database.lock().events(id, limit)
    }

    fn record_publication(
        &self,
        workload: &WorkloadId,
        block_type: &str,
        labels: &[String],
        generation: u64,
        endpoints: &[Endpoint],
    ) -> Result<(), StoreError> {
        self.database
            .lock()
            .record_publication(workload, block_type, labels, generation, endpoints)
    }

    fn publications(&self, workload: &WorkloadId) -> Result<Vec<Publication>, StoreError> {
        self.database.lock().publications(workload)
    }

    fn forget_publication(
        &self,
        workload: &WorkloadId,
        block_type: &str,
        labels: &[String],
    ) -> Result<(), StoreError> {
        self.database
            .lock()
            .forget_publication(workload, block_type, labels)
    }

    fn clear_publications(&self, workload: &WorkloadId) -> Result<(), StoreError> {
        self.database.lock().clear_publications(workload)
    }

    fn deletion(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<(CoreSpec, Vec<NormalisedBlock>)>, StoreError> {
        self.database.lock().deletion(id)
    }

    fn deletions(&self) -> Result<Vec<WorkloadId>, StoreError> {
        self.database.lock().deletions()
    }

    fn tombstone(&self, id: &WorkloadId) -> Result<Option<Tombstone>, StoreError> {
        self.database.lock().tombstone(id)
    }

    fn finish_deletion(&self, id: &WorkloadId) -> Result<(), StoreError> {
        self.database.lock().finish_deletion(id)
    }

    fn backup_to(&self, path: &Path) -> Result<(), StoreError> {
        self.database.lock().backup_to(path)
    }

    fn config_bucket(&self, bucket: &BucketName) -> Result<Bucket, StoreError> {
        self.database.lock().config_bucket(bucket)
    }

    fn config_buckets(&self) -> Result<Vec<BucketName>, StoreError> {
        self.database.lock().config_buckets()
    }

    fn restart(&self, id: &WorkloadId, events: &[NewEvent]) -> Result<Option<i64>, StoreError> {
        self.database.lock().restart(id, events)
    }

    fn freeze(
        &self,
        id: &WorkloadId,
        change: &crate::Freeze,
        events: &[NewEvent],
    ) -> Result<Option<std::collections::BTreeSet<String>>, StoreError> {
        self.database.lock().freeze(id, change, events)
    }

    fn change_config(
        &self,
        bucket: &BucketName,
        set: &Bucket,
        unset: &[String],
        events: &[NewEvent],
        holds: &crate::config::HoldChange,
    ) -> Result<(), StoreError> {
        self.database
            .lock()
            .change_config(bucket, set, unset, events, holds)
    }

    fn config_holds(
        &self,
        workload: &WorkloadId,
    ) -> Result<Vec<crate::config::ConfigHold>, StoreError> {
        self.database.lock().config_holds(workload)
    }

    fn reseal_secrets(&self, reseal: crate::sealing::Reseal) -> Result<usize, StoreError> {
        self.database.lock().reseal_secrets(reseal)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use voodu_plugin_abi::messages::WorkloadKind;

    use super::*;

    fn esl() -> WorkloadInput {
        WorkloadInput {
            block_locations: Vec::new(),
            id: WorkloadId::new(WorkloadKind::Deployment, "prod", "esl"),
            core_spec: CoreSpec::of_image("esl:1", 1),
            blocks: Vec::new(),
            source: None,
        }
    }

    /// Each test runs against the store as the controller holds it: a
    /// `dyn StateStore`.
    fn store() -> Arc<dyn StateStore> {
        Arc::new(SqliteStore::open_in_memory().expect("an in-memory store"))
    }

    #[test]
    fn apply_then_stores_nothing_and_says_so_when_its_step_refuses() {
        let store = store();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = heard.clone();
        store.set_event_sink(Box::new(move |_, event| {
            sink.lock().push(event.reason.clone())
        }));
        let refused = store
            .apply_then(&[esl()], &[], &mut || false)
            .expect("the store works");
        assert!(refused.is_none());
        assert!(store.workload(&esl().id).expect("readable").is_none());
        assert!(heard.lock().is_empty(), "no event of a rolled-back apply");
        let stored = store
            .apply_then(&[esl()], &[], &mut || true)
            .expect("the store works")
            .expect("committed");
        assert_eq!(stored.len(), 1);
        assert_eq!(
            store
                .workload(&esl().id)
                .expect("readable")
                .map(|w| w.revision),
            Some(1)
        );
        assert_eq!(
            *heard.lock(),
            [voodu_model::EventReason::Applied],
            "heard once committed"
        );
    }

    #[test]
    fn a_delete_and_its_finish_are_one_transaction_each() {
        let store = store();
        store.apply(&[esl()], &[]).expect("stored");
        let deleted = store.delete(&esl().id).expect("the store works");
        assert_eq!(deleted.map(|w| w.revision), Some(1));
        assert_eq!(store.deletions().expect("readable"), vec![esl().id]);
        store.finish_deletion(&esl().id).expect("finished");
        assert!(store.deletions().expect("readable").is_empty());
        assert!(store
            .tombstone(&esl().id)
            .expect("readable")
            .is_some_and(|t| t.finished));
        assert!(
            store.delete(&esl().id).expect("the store works").is_none(),
            "gone"
        );
    }
}
