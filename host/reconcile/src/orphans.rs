//! Containers the store does not account for. A store cannot tell "never
//! had this workload" from "lost it" (a deleted `state.db`, a restored
//! backup), so the containers tell it: a pass acts only on the containers
//! its store accounts for, and leaves every other one running.
//!
//! - A stored workload owns all its containers. Those made for another
//!   store (their `voodu.store` label) are **adopted**: recorded once, and
//!   from then on treated as the workload's own (no restart when the spec
//!   matches).
//! - A deleted workload owns the containers made by the time it was
//!   deleted (its tombstone, [`voodu_store::Tombstone`]); its sweep drains
//!   and removes those.
//! - Any other container is an **orphan**: never removed by a pass or a
//!   sweep, reported once per process (a warning in the log and an
//!   `orphaned` event), listed by `vd get pods --orphans`, and removed only
//!   when the operator asks ([`Reconciler::prune_orphans`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use voodu_model::EventReason;

use parking_lot::Mutex;

use super::{event, ReconcileError, Reconciler};
use voodu_model::core_spec::DEFAULT_DRAIN_TIMEOUT;
use voodu_model::WorkloadId;
use voodu_runtime::{JobRun, Replica, StepContainer};
use voodu_store::EventLevel;

/// Which of a workload's containers a pass may act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The workload is stored: all of them (adopting another store's).
    Stored,
    /// The workload was deleted at this time (Unix milliseconds): those
    /// made by then.
    DeletedAt(i64),
    /// The store has no record of the workload: none.
    Unaccounted,
}

impl Ownership {
    /// Whether a pass may act on this container.
    pub fn owns(self, replica: &Replica) -> bool {
        match self {
            Ownership::Stored => true,
            // Docker gives creation times in whole seconds.
            Ownership::DeletedAt(deleted_ms) => replica.created.saturating_mul(1000) <= deleted_ms,
            Ownership::Unaccounted => false,
        }
    }

    /// Splits a listing into the containers a pass may act on and the
    /// orphans, each in listing order.
    pub fn split(self, listed: Vec<Replica>) -> (Vec<Replica>, Vec<Replica>) {
        listed.into_iter().partition(|replica| self.owns(replica))
    }
}

/// Which orphans and adopted containers were reported, so each is reported
/// once per process.
#[derive(Debug, Default)]
pub struct OrphanReports {
    /// Container ids reported as orphans.
    orphaned: Mutex<HashSet<String>>,
    /// Container ids recorded as adopted.
    adopted: Mutex<HashSet<String>>,
}

/// How a set of containers came to be without a record: which store made
/// them, as their labels say.
fn origin(replicas: &[Replica], store_id: &str) -> String {
    let foreign: BTreeSet<&str> = replicas
        .iter()
        .filter_map(|replica| replica.store_id.as_deref())
        .filter(|id| *id != store_id)
        .collect();
    let were = if replicas.len() == 1 { "was" } else { "were" };
    if !foreign.is_empty() {
        let ids: Vec<&str> = foreign.into_iter().collect();
        let stores = if ids.len() == 1 { "store" } else { "stores" };
        format!("{were} made by another {stores} ({})", ids.join(", "))
    } else if replicas.iter().all(|replica| replica.store_id.is_some()) {
        format!(
            "{were} made by this store, which has no record of them (restored from a backup taken before they were applied?)"
        )
    } else {
        format!("{were} made by a voodu that did not label its store, and this store has no record of them")
    }
}

fn replicas_of(count: usize, workload: &WorkloadId) -> String {
    if count == 1 {
        format!("1 replica of {workload}")
    } else {
        format!("{count} replicas of {workload}")
    }
}

impl Reconciler {
    /// Reports the orphans of one workload not reported yet: a warning in
    /// the log and an `orphaned` event naming them and what to do.
    pub(super) fn report_orphans(&self, workload: &WorkloadId, orphans: &[Replica]) {
        let fresh = {
            let mut reported = self.orphans.orphaned.lock();
            orphans
                .iter()
                .filter(|replica| reported.insert(replica.container_id.clone()))
                .count()
        };
        if fresh == 0 {
            return;
        }
        let ids: Vec<&str> = orphans.iter().map(|r| r.replica_id.as_str()).collect();
        let message = format!(
            "{} ({}) {}; they are left running — apply their manifests to adopt them, or vd prune --orphans to remove them",
            replicas_of(orphans.len(), workload),
            ids.join(", "),
            origin(orphans, &self.store_id)
        );
        tracing::warn!("{message}");
        self.record(&[event(
            workload,
            EventLevel::Warning,
            EventReason::Orphaned,
            message,
        )]);
    }

    /// Records, once, the containers of a stored workload that were made
    /// for another store: the workload adopts them.
    pub(super) fn note_adopted(&self, workload: &WorkloadId, observed: &[Replica]) {
        let mut foreign = observed.iter().filter(|replica| {
            replica
                .store_id
                .as_deref()
                .is_some_and(|id| id != self.store_id)
        });
        // Almost every pass has none: the lock is taken only for those it has.
        let Some(first) = foreign.next() else {
            return;
        };
        let foreign: Vec<Replica> = {
            let mut adopted = self.orphans.adopted.lock();
            std::iter::once(first)
                .chain(foreign)
                .filter(|replica| adopted.insert(replica.container_id.clone()))
                .cloned()
                .collect()
        };
        if foreign.is_empty() {
            return;
        }
        let ids: Vec<&str> = foreign.iter().map(|r| r.replica_id.as_str()).collect();
        let message = format!(
            "adopted {} ({}), which {}",
            super::converge::plural(foreign.len(), "replica"),
            ids.join(", "),
            origin(&foreign, &self.store_id)
        );
        tracing::info!(%workload, "{message}");
        self.record(&[event(
            workload,
            EventLevel::Info,
            EventReason::Adopted,
            message,
        )]);
    }

    /// Which of a workload's containers the store accounts for.
    pub(super) fn ownership(&self, workload: &WorkloadId) -> Result<Ownership, ReconcileError> {
        let store = &self.store;
        if store.workload(workload)?.is_some() {
            return Ok(Ownership::Stored);
        }
        Ok(match store.tombstone(workload)? {
            Some(tombstone) => Ownership::DeletedAt(tombstone.deleted_ms),
            None => Ownership::Unaccounted,
        })
    }

    /// Every orphan of this controller, by workload (see the module doc):
    /// replicas, then the containers their failed init or release steps
    /// kept (their replica id is `a1f3.init-migrate`), then the runs of
    /// jobs (`run-1206-0405-12-a1f3`).
    pub async fn orphans(&self) -> Result<BTreeMap<WorkloadId, Vec<Replica>>, ReconcileError> {
        let mut orphans = self.orphan_replicas().await?;
        let steps = self.orphan_step_containers().await?;
        let runs = self.orphan_job_runs().await?;
        for listed in steps
            .iter()
            .map(StepContainer::as_listed)
            .chain(runs.iter().map(JobRun::as_listed))
        {
            orphans
                .entry(listed.workload.clone())
                .or_default()
                .push(listed);
        }
        Ok(orphans)
    }

    /// The runs of jobs the store has no record of.
    async fn orphan_job_runs(&self) -> Result<Vec<JobRun>, ReconcileError> {
        let runs = self.runtime.job_runs(None).await?;
        self.unowned(runs, |run| run.as_listed())
    }

    /// Those of `containers` whose workload does not own them (see
    /// [`Ownership`]), each seen as `listed` sees it.
    pub(super) fn unowned<T>(
        &self,
        containers: Vec<T>,
        listed: impl Fn(&T) -> Replica,
    ) -> Result<Vec<T>, ReconcileError> {
        let mut unowned = Vec::new();
        for container in containers {
            let seen = listed(&container);
            if !self.ownership(&seen.workload)?.owns(&seen) {
                unowned.push(container);
            }
        }
        Ok(unowned)
    }

    /// The replicas among the orphans, by workload.
    async fn orphan_replicas(&self) -> Result<BTreeMap<WorkloadId, Vec<Replica>>, ReconcileError> {
        let listed = self.runtime.list(None).await?;
        let mut by_workload: BTreeMap<WorkloadId, Vec<Replica>> = BTreeMap::new();
        for replica in listed {
            by_workload
                .entry(replica.workload.clone())
                .or_default()
                .push(replica);
        }
        let mut orphans = BTreeMap::new();
        for (workload, replicas) in by_workload {
            let (_, orphaned) = self.ownership(&workload)?.split(replicas);
            if !orphaned.is_empty() {
                orphans.insert(workload, orphaned);
            }
        }
        Ok(orphans)
    }

    /// Removes every orphan, as the operator asked: each is drained by the
    /// blocks of its workload's last stored revision, if the store has one,
    /// within its budget, then stopped and removed. Returns what was
    /// removed.
    pub async fn prune_orphans(
        &self,
    ) -> Result<BTreeMap<WorkloadId, Vec<Replica>>, ReconcileError> {
        let mut orphans = self.orphan_replicas().await?;
        for (workload, replicas) in &orphans {
            let last = self.store.last_revision(workload)?;
            let (blocks, budget) = match last {
                Some((core_spec, blocks)) => (blocks, core_spec.drain_budget()),
                None => (Vec::new(), DEFAULT_DRAIN_TIMEOUT),
            };
            for replica in replicas {
                self.remove_replica(workload, &blocks, replica, budget)
                    .await?;
                self.orphans.orphaned.lock().remove(&replica.container_id);
            }
            self.record(&[event(
                workload,
                EventLevel::Info,
                EventReason::Pruned,
                format!(
                    "removed {} that the store had no record of, as asked (vd prune --orphans)",
                    replicas_of(replicas.len(), workload)
                ),
            )]);
        }
        // Nothing was published for a step or a run: each is removed
        // without a drain (a run still running is killed).
        for step in self.orphan_step_containers().await? {
            self.runtime.remove_step_container(&step).await?;
            let listed = step.as_listed();
            orphans
                .entry(listed.workload.clone())
                .or_default()
                .push(listed);
        }
        for run in self.orphan_job_runs().await? {
            self.runtime.remove_job_run(&run).await?;
            let listed = run.as_listed();
            orphans
                .entry(listed.workload.clone())
                .or_default()
                .push(listed);
        }
        Ok(orphans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(created: i64, store_id: Option<&str>) -> Replica {
        Replica {
            created,
            store_id: store_id.map(str::to_owned),
            ..crate::test_replica(&created.to_string())
        }
    }

    #[test]
    fn a_deleted_workload_owns_only_the_containers_made_by_its_deletion() {
        let (owned, orphans) = Ownership::DeletedAt(2_000).split(vec![
            replica(1, None),
            replica(2, None),
            replica(3, None),
        ]);
        let ids = |replicas: &[Replica]| -> Vec<String> {
            replicas.iter().map(|r| r.replica_id.clone()).collect()
        };
        assert_eq!(ids(&owned), ["1", "2"]);
        assert_eq!(ids(&orphans), ["3"]);
        assert!(Ownership::Unaccounted
            .split(vec![replica(1, None)])
            .0
            .is_empty());
        assert_eq!(
            Ownership::Stored.split(vec![replica(9, Some("x"))]).0.len(),
            1
        );
    }

    #[test]
    fn orphans_say_which_store_made_them() {
        assert_eq!(
            origin(
                &[replica(1, Some("aaaa")), replica(2, Some("aaaa"))],
                "bbbb"
            ),
            "were made by another store (aaaa)"
        );
        assert!(origin(&[replica(1, Some("bbbb"))], "bbbb").starts_with("was made by this store"));
        assert!(origin(&[replica(1, None)], "bbbb").contains("did not label its store"));
    }
}
