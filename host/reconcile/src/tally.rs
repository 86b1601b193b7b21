//! What the control loop reports of its own work, for whoever counts it
//! (the controller's Prometheus metrics): each pass and how it ended, how
//! long each workload waited in the queue, how long a change took to be
//! published, each drain by plugin, each replica restarted.
//!
//! The reconciler knows nothing of Prometheus: it calls a
//! [`ReconcileObserver`] set once ([`crate::Reconciler::observe_with`]),
//! and calls nothing when none is set. Every method is called on the
//! reconciler's own tasks and must return at once (count, never block).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

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

/// Where the reconciler and its publisher find the observer: empty until
/// one is set, set once.
#[derive(Clone, Default)]
pub(crate) struct ObserverSlot(Arc<OnceLock<Arc<dyn ReconcileObserver>>>);

impl std::fmt::Debug for ObserverSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ObserverSlot")
            .field(&self.0.get().is_some())
            .finish()
    }
}

impl ObserverSlot {
    /// Sets the observer; a second call changes nothing.
    pub(crate) fn set(&self, observer: Arc<dyn ReconcileObserver>) {
        let _ = self.0.set(observer);
    }

    /// Tells the observer, if there is one.
    pub(crate) fn tell(&self, what: impl FnOnce(&dyn ReconcileObserver)) {
        if let Some(observer) = self.0.get() {
            what(observer.as_ref());
        }
    }
}
