//! Telling plugins that blocks are gone, so nothing is left orphaned in any
//! plugin: when a workload is deleted, and when a new revision drops a
//! block.

use parking_lot::Mutex;
use voodu_plugin_abi::messages::ForgetRequest;

use crate::diagnostic::Diagnostic;
use crate::manifest::{NormalisedBlock, WorkloadId};
use crate::reconcile::{BlockCallError, BlockPlugins};
use crate::store::{EventLevel, NewEvent, Store, StoreError};

/// Sends `forget` for each block to its plugin. Failures do not stop the
/// others; each becomes a warning, returned and recorded as an event.
pub fn forget_blocks(
    workload: &WorkloadId,
    blocks: &[NormalisedBlock],
    plugins: &dyn BlockPlugins,
    store: &Mutex<Store>,
) -> Vec<Diagnostic> {
    let mut warnings = Vec::new();
    let mut events = Vec::new();
    for block in blocks {
        let request = ForgetRequest {
            kind: workload.kind,
            scope: workload.scope.clone(),
            name: workload.name.clone(),
            block: block.to_block(),
        };
        let outcome = match plugins.forget(&block.block_type, &request) {
            Err(BlockCallError::NotInstalled(_)) => Err(format!(
                "plugin \"{}\" is not installed, so it was not told to forget the block",
                block.block_type
            )),
            Err(error) => Err(format!("forget failed: {error}")),
            Ok(()) => Ok(()),
        };
        let (level, reason, message) = match outcome {
            Ok(()) => (
                EventLevel::Info,
                "forgotten",
                format!("{} forgotten by its plugin", block.display_name()),
            ),
            Err(problem) => {
                let message = format!("{}: {problem}", block.display_name());
                warnings.push(Diagnostic::for_workload(workload, message.clone(), None));
                (EventLevel::Warning, "forget-failed", message)
            }
        };
        events.push(NewEvent {
            workload: workload.clone(),
            level,
            reason: reason.into(),
            message,
        });
    }
    if let Err(error) = store.lock().record_events(&events) {
        warnings.push(Diagnostic::for_workload(
            workload,
            format!("the forget events could not be recorded: {error}"),
            None,
        ));
    }
    warnings
}

/// What deleting a workload did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeleteReport {
    /// `deployment/prod/esl`.
    pub workload: String,
    /// The blocks whose plugins are told to forget them.
    pub forgotten: Vec<String>,
    /// Whether the controller is still draining and removing the replicas,
    /// after which the blocks are forgotten.
    #[serde(default)]
    pub pending: bool,
    /// Plugins that could not be told.
    pub warnings: Vec<Diagnostic>,
    /// The newest event id before the delete: a wait that follows replays
    /// the steps recorded after it.
    #[serde(default)]
    pub since_event: i64,
}

/// Deletes a workload from the store, leaving a deletion for the
/// reconciler to finish (drain and remove the replicas, then forget the
/// blocks). With `forget_now` (a controller without Docker, which has no
/// replicas), the blocks are forgotten here and the deletion is finished.
/// `Ok(None)` when there is no such workload.
pub fn delete_workload(
    id: &WorkloadId,
    plugins: &dyn BlockPlugins,
    store: &Mutex<Store>,
    forget_now: bool,
) -> Result<Option<DeleteReport>, StoreError> {
    let deleted = store.lock().delete(id)?;
    let Some(deleted) = deleted else {
        return Ok(None);
    };
    let mut warnings = Vec::new();
    if forget_now {
        warnings = forget_blocks(id, &deleted.blocks, plugins, store);
        store.lock().finish_deletion(id)?;
    }
    Ok(Some(DeleteReport {
        workload: id.to_string(),
        forgotten: deleted
            .blocks
            .iter()
            .map(NormalisedBlock::display_name)
            .collect(),
        pending: !forget_now,
        warnings,
        since_event: 0,
    }))
}
