//! What each workload's passes ended with, as the next pass needs it: its
//! failed passes in a row (for the retry back-off) with the failure last
//! recorded as an event, and the revision it last converged at (so a pass
//! tells a replacement, "replacing replica 2/4", from a scale-up).
//!
//! One lock, held only inside these methods, never across an await.

use std::collections::HashMap;

use parking_lot::Mutex;
use voodu_model::WorkloadId;

/// The outcomes of each workload's passes.
#[derive(Debug, Default)]
pub struct PassHistory {
    by_workload: Mutex<HashMap<WorkloadId, Outcomes>>,
}

#[derive(Debug, Default)]
struct Outcomes {
    /// Failed passes in a row, and the failure last recorded.
    failures: u32,
    last_failure: String,
    /// The revision the last successful pass converged at.
    converged_at: Option<i64>,
}

impl PassHistory {
    /// Counts a failed pass; returns the failures in a row and whether
    /// this failure differs from the one before it (and so is recorded
    /// as an event: a failure repeated by every pass is one event).
    pub(crate) fn failed(&self, workload: &WorkloadId, message: &str) -> (u32, bool) {
        let mut by_workload = self.by_workload.lock();
        let outcomes = by_workload.entry(workload.clone()).or_default();
        outcomes.failures += 1;
        let new = outcomes.last_failure != message;
        if new {
            message.clone_into(&mut outcomes.last_failure);
        }
        (outcomes.failures, new)
    }

    /// A pass succeeded without converging yet (it waits for readiness or
    /// a restart): the failure streak ends.
    pub(crate) fn succeeded(&self, workload: &WorkloadId) {
        if let Some(outcomes) = self.by_workload.lock().get_mut(workload) {
            outcomes.failures = 0;
            outcomes.last_failure.clear();
        }
    }

    /// A pass converged at `revision`: the streak ends.
    pub(crate) fn converged(&self, workload: &WorkloadId, revision: i64) {
        self.by_workload.lock().insert(
            workload.clone(),
            Outcomes {
                converged_at: Some(revision),
                ..Outcomes::default()
            },
        );
    }

    /// The workload is gone: nothing of it is kept.
    pub(crate) fn gone(&self, workload: &WorkloadId) {
        self.by_workload.lock().remove(workload);
    }

    /// Whether the last successful pass converged at `revision`: a pass at
    /// the same revision that creates replicas replaces lost ones.
    pub(crate) fn converged_at(&self, workload: &WorkloadId, revision: i64) -> bool {
        self.by_workload
            .lock()
            .get(workload)
            .and_then(|outcomes| outcomes.converged_at)
            == Some(revision)
    }
}
