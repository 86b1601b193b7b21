//! Deleting a workload: the store keeps a deletion for the reconciler to
//! finish (drain and remove the replicas, then forget the blocks).

use voodu_api::DeleteReport;
use voodu_model::{NormalisedBlock, WorkloadId};
use voodu_reconcile::forget::forget_blocks;
use voodu_reconcile::BlockPlugins;
use voodu_store::{StateStore, StoreError};

/// Deletes a workload from the store, leaving a deletion for the
/// reconciler to finish (drain and remove the replicas, then forget the
/// blocks). With `forget_now` (a controller without Docker, which has no
/// replicas), the blocks are forgotten here and the deletion is finished.
/// `Ok(None)` when there is no such workload.
pub fn delete_workload(
    id: &WorkloadId,
    plugins: &dyn BlockPlugins,
    store: &dyn StateStore,
    forget_now: bool,
) -> Result<Option<DeleteReport>, StoreError> {
    let deleted = store.delete(id)?;
    let Some(deleted) = deleted else {
        return Ok(None);
    };
    let mut warnings = Vec::new();
    if forget_now {
        warnings = forget_blocks(id, &deleted.blocks, plugins, store);
        store.finish_deletion(id)?;
    }
    Ok(Some(DeleteReport {
        workload: id.clone(),
        forgotten: deleted
            .blocks
            .iter()
            .map(NormalisedBlock::display_name)
            .collect(),
        pending: !forget_now,
        warnings,
        errors: Vec::new(),
        since_event: 0,
    }))
}
