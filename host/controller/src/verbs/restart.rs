//! `restart` (`vd restart`): under the write lock, the workload is marked
//! restarted in the store ([`voodu_store::StateStore::restart`]), with a
//! `restarted` event; its spec and revision stay. The mark is part of the
//! hash its replicas must carry ([`voodu_reconcile::replica_hash`]), so the
//! reconciler replaces every replica made before it as a rolling update
//! does: new replicas first, each old one drained. The answer is an
//! apply's, so `vd restart` follows the rollout as `vd apply` does.

use voodu_api::{AppliedWorkload, ApplyReport, Failure, Response, WorkloadOutcome};
use voodu_model::{EventLevel, NormalisedBlock, WorkloadId};
use voodu_store::NewEvent;

use super::store_failure;
use crate::{not_found, Controller};

/// Marks `workload` restarted and queues its pass.
pub(crate) fn handle(controller: &Controller, workload: &WorkloadId) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let store = &controller.store;
    let since_event = store.last_event_id().map_err(store_failure)?;
    let Some(stored) = store.workload(workload).map_err(store_failure)? else {
        return Err(not_found(workload));
    };
    let event = NewEvent {
        workload: workload.clone(),
        level: EventLevel::Info,
        reason: "restarted".into(),
        message: format!(
            "restart asked: every replica is replaced, the spec of revision {} kept",
            stored.revision
        ),
    };
    if store
        .restart(workload, &[event])
        .map_err(store_failure)?
        .is_none()
    {
        return Err(not_found(workload));
    }
    if let Some(reconciler) = controller.reconciler() {
        reconciler.await_rollout(workload, stored.revision);
        reconciler.enqueue(workload);
    }
    Ok(Response::Applied(ApplyReport {
        workloads: vec![AppliedWorkload {
            workload: workload.clone(),
            outcome: WorkloadOutcome::Updated,
            revision: stored.revision,
            blocks: stored
                .blocks
                .iter()
                .map(NormalisedBlock::display_name)
                .collect(),
            rolled_back_to: None,
            restarted: true,
        }],
        warnings: Vec::new(),
        errors: Vec::new(),
        skipped: Vec::new(),
        since_event,
        pruned: Vec::new(),
    }))
}
