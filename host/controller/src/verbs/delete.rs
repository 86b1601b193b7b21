//! `delete`: under the write lock, the store records the deletion
//! ([`crate::delete`]); the reconciler then drains and removes the replicas
//! and tells each block's plugin to forget it. Without Docker there are no
//! replicas, and the blocks are forgotten at once.

use voodu_api::{Failure, Response};
use voodu_model::WorkloadId;

use super::store_failure;
use crate::delete::delete_workload;
use crate::{not_found, Controller};

/// Deletes `workload`.
pub(crate) fn handle(controller: &Controller, workload: &WorkloadId) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let since_event = controller.store.last_event_id().map_err(store_failure)?;
    let reconciler = controller.reconciler();
    let report = delete_workload(
        workload,
        &*controller.plugins,
        &*controller.store,
        reconciler.is_none(),
    )
    .map_err(store_failure)?;
    let Some(mut report) = report else {
        return Err(not_found(workload));
    };
    report.since_event = since_event;
    if let Some(reconciler) = reconciler {
        reconciler.enqueue(workload);
    }
    Ok(Response::Deleted(report))
}
