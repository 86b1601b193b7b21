//! What the control loop reports of its own work, for whoever counts it
//! (the controller's Prometheus metrics): each pass and how it ended, how
//! long each workload waited in the queue, how long a change took to be
//! published, each drain by plugin, each replica restarted.
//!
//! The reconciler knows nothing of Prometheus: it calls a
//! [`ReconcileObserver`] set once ([`crate::Reconciler::observe_with`]),
//! and calls nothing when none is set. Every method is called on the
//! reconciler's own tasks and must return at once (count, never block).
//!
//! Each block's last publish latency and last drain are kept here too, for
//! `vd describe` ([`crate::Reconciler::block_figures`]).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use voodu_model::{NormalisedBlock, WorkloadId};

/// How a pass ended, as `voodu_reconcile_passes_total{result}` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum PassResult {
    /// The workload runs as stored.
    Converged,
    /// It waits for replicas to be ready, or for the cluster to place
    /// them; another pass follows.
    Waiting,
    /// A replica keeps dying; its restart waits for the back-off.
    CrashLooping,
    /// The workload is deleted and its replicas are gone.
    Gone,
    /// The pass failed; it is retried with back-off.
    Failed,
    /// The pass failed, but a newer revision was stored meanwhile; that
    /// one gets a pass at once.
    Superseded,
}

/// How one plugin's drain of one replica ended, as
/// `voodu_drains_total{plugin, outcome}` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum DrainResult {
    /// The plugin said drained within the budget.
    Drained,
    /// The budget ran out first; the replica was removed anyway.
    BudgetExhausted,
    /// The plugin failed the call, or is not installed.
    Failed,
}

/// Receives what the control loop does (see the module doc).
pub trait ReconcileObserver: Send + Sync {
    /// A pass ended with `result` after `took`.
    fn pass_finished(&self, result: PassResult, took: Duration);
    /// A workload waited `waited` in the queue before its pass started.
    fn waited_in_queue(&self, waited: Duration);
    /// A plugin's publish returned `latency` after the change it carries
    /// was seen (a Docker event, a readiness flip, a pass's listing).
    fn published(&self, plugin: &str, latency: Duration);
    /// `plugin`'s drain of one replica ended with `result` after `took`.
    fn drained(&self, plugin: &str, result: DrainResult, took: Duration);
    /// A replica that had stopped was started again.
    fn replica_restarted(&self);
}

/// What the loop last saw of one block, for `vd describe`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockFigures {
    /// The block's type.
    pub block_type: String,
    /// Its labels.
    pub labels: Vec<String>,
    /// How long its last publish took from the change it carried being
    /// seen to the plugin returning.
    pub last_publish_latency: Option<Duration>,
    /// How its last drain ended, of which replica, and how long it took.
    pub last_drain: Option<BlockDrain>,
}

/// One block's last drain.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockDrain {
    /// The replica drained.
    pub replica_id: String,
    /// How it ended.
    pub result: DrainResult,
    /// How long it took.
    pub took: Duration,
    /// When it ended.
    pub at: std::time::SystemTime,
}

/// A block, by workload, type and labels.
type BlockKey = (WorkloadId, String, Vec<String>);

/// What the loop keeps of its own work: the observer, once set, and each
/// block's last publish and drain (this process's, since it started).
/// Shared by the reconciler and its publisher; each lock is held only to
/// read or write one entry.
#[derive(Clone, Default)]
pub(crate) struct Tally {
    observer: Arc<OnceLock<Arc<dyn ReconcileObserver>>>,
    blocks: Arc<Mutex<HashMap<BlockKey, BlockFigures>>>,
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tally")
            .field("observed", &self.observer.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Tally {
    /// Sets the observer; a second call changes nothing.
    pub(crate) fn set(&self, observer: Arc<dyn ReconcileObserver>) {
        let _ = self.observer.set(observer);
    }

    /// Tells the observer, if there is one.
    pub(crate) fn tell(&self, what: impl FnOnce(&dyn ReconcileObserver)) {
        if let Some(observer) = self.observer.get() {
            what(observer.as_ref());
        }
    }

    fn block(
        &self,
        workload: &WorkloadId,
        block: &NormalisedBlock,
        note: impl FnOnce(&mut BlockFigures),
    ) {
        let mut blocks = self.blocks.lock();
        let figures = blocks
            .entry((
                workload.clone(),
                block.block_type.clone(),
                block.labels.clone(),
            ))
            .or_insert_with(|| BlockFigures {
                block_type: block.block_type.clone(),
                labels: block.labels.clone(),
                ..BlockFigures::default()
            });
        note(figures);
    }

    /// A block's set was published `latency` after its change was seen.
    pub(crate) fn published(
        &self,
        workload: &WorkloadId,
        block: &NormalisedBlock,
        latency: Duration,
    ) {
        self.block(workload, block, |figures| {
            figures.last_publish_latency = Some(latency);
        });
        self.tell(|observer| observer.published(&block.block_type, latency));
    }

    /// A block's plugin drained `replica_id` with `result` after `took`.
    pub(crate) fn drained(
        &self,
        workload: &WorkloadId,
        block: &NormalisedBlock,
        replica_id: &str,
        result: DrainResult,
        took: Duration,
    ) {
        self.block(workload, block, |figures| {
            figures.last_drain = Some(BlockDrain {
                replica_id: replica_id.to_owned(),
                result,
                took,
                at: std::time::SystemTime::now(),
            });
        });
        self.tell(|observer| observer.drained(&block.block_type, result, took));
    }

    /// What was last seen of each block of `workload`.
    pub(crate) fn blocks_of(&self, workload: &WorkloadId) -> Vec<BlockFigures> {
        self.blocks
            .lock()
            .iter()
            .filter(|((id, _, _), _)| id == workload)
            .map(|(_, figures)| figures.clone())
            .collect()
    }

    /// Forgets a deleted workload's blocks.
    pub(crate) fn forget_workload(&self, workload: &WorkloadId) {
        self.blocks.lock().retain(|(id, _, _), _| id != workload);
    }
}
