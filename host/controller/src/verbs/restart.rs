//! `restart` (`vd restart`): under the write lock, the workload is marked
//! restarted in the store ([`voodu_store::StateStore::restart`]), with a
//! `restarted` event; its spec and revision stay. The mark is part of the
//! hash its replicas must carry ([`voodu_reconcile::replica_hash`]), so the
//! reconciler replaces every replica made before it as a rolling update
//! does: new replicas first, each old one drained. The answer is an
//! apply's, so `vd restart` follows the rollout as `vd apply` does.
//!
//! `vd release REF run` is a restart that first runs the workload's
//! release `pre_command` and `command` on this node
//! ([`voodu_reconcile::Reconciler::run_release_now`]), outside the write
//! lock (they may take minutes); if one fails, nothing is marked and the
//! replicas stay.

use voodu_api::{AppliedWorkload, ApplyReport, Failure, Response, WorkloadOutcome};
use voodu_model::EventReason;
use voodu_model::{EventLevel, NormalisedBlock, WorkloadId};
use voodu_store::NewEvent;

use super::store_failure;
use crate::{not_found, Controller};

/// Marks `workload` restarted and queues its pass; with `release`, after
/// its release commands ran.
pub(crate) fn handle(
    controller: &Controller,
    workload: &WorkloadId,
    release: bool,
) -> Result<Response, Failure> {
    let ran = if release {
        let Some(reconciler) = controller.reconciler() else {
            return Err(Failure::new(format!(
                "{workload}: this controller runs without Docker (--no-docker), so it runs no release"
            )));
        };
        crate::block_on(reconciler.run_release_now(workload))
            .map_err(|error| Failure::new(format!("{workload}: {error}")))?
    } else {
        0
    };
    let _writes = controller.lock_writes()?;
    let store = &controller.store;
    let since_event = store.last_event_id().map_err(store_failure)?;
    let Some(stored) = store.workload(workload).map_err(store_failure)? else {
        return Err(not_found(workload));
    };
    let event = NewEvent {
        workload: workload.clone(),
        level: EventLevel::Info,
        reason: EventReason::Restarted,
        message: if release {
            format!(
                "release run asked: its {ran} release command(s) ran; every replica is replaced, the spec of revision {} kept",
                stored.revision
            )
        } else {
            format!(
                "restart asked: every replica is replaced, the spec of revision {} kept",
                stored.revision
            )
        },
    };
    if store
        .restart(workload, &[event])
        .map_err(store_failure)?
        .is_none()
    {
        return Err(not_found(workload));
    }
    if let Some(reconciler) = controller.reconciler() {
        if release {
            reconciler.release_restarted(workload);
        }
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
