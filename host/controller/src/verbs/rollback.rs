//! `rollback`: under the write lock, an earlier revision's spec is
//! validated again through today's plugins and stored as a new revision
//! ([`crate::history::rollback`]); the reconciler then rolls it out.

use voodu_api::{Failure, Response};
use voodu_model::WorkloadId;

use super::{refusal, store_failure};
use crate::history::{rollback, RollbackError};
use crate::Controller;

/// Rolls `workload` back to revision `to`, or to the one before its
/// current revision.
pub(crate) fn handle(
    controller: &Controller,
    workload: &WorkloadId,
    to: Option<i64>,
) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let since_event = controller.store.last_event_id().map_err(store_failure)?;
    let reconciler = controller.reconciler().map(|reconciler| &**reconciler);
    match rollback(
        workload,
        to,
        &controller.plugins,
        &*controller.store,
        reconciler,
    ) {
        Ok(mut report) => {
            report.since_event = since_event;
            if let Some(reconciler) = controller.reconciler() {
                for applied in &report.workloads {
                    reconciler.await_rollout(&applied.workload, applied.revision);
                }
                reconciler.enqueue(workload);
            }
            Ok(Response::Applied(report))
        }
        Err(RollbackError::Refused(diagnostics)) => Err(refusal(diagnostics, |found| {
            format!("rollback refused: {found} found, nothing changed")
        })),
        Err(error) => Err(Failure::new(error.to_string())),
    }
}
