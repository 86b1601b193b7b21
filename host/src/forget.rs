//! Telling plugins that blocks are gone, so nothing is left orphaned in any
//! plugin: when a workload is deleted, and when a new revision drops a
//! block.

use parking_lot::Mutex;
use voodu_plugin_abi::messages::ForgetRequest;

use crate::diagnostic::Diagnostic;
use crate::manifest::{NormalisedBlock, WorkloadId};
use crate::plugin::PluginRegistry;
use crate::store::{EventLevel, NewEvent, Store, StoreError, StoredWorkload};

/// Sends `forget` for each block to its plugin. Failures do not stop the
/// others; each becomes a warning, returned and recorded as an event.
pub fn forget_blocks(
    workload: &WorkloadId,
    blocks: &[NormalisedBlock],
    plugins: &PluginRegistry,
    store: &Mutex<Store>,
) -> Vec<Diagnostic> {
    let mut warnings = Vec::new();
    let mut events = Vec::new();
    for block in blocks {
        let outcome = match plugins.get(&block.block_type) {
            None => Err(format!(
                "plugin \"{}\" is not installed, so it was not told to forget the block",
                block.block_type
            )),
            Some(plugin) => plugin
                .forget(&ForgetRequest {
                    kind: workload.kind,
                    scope: workload.scope.clone(),
                    name: workload.name.clone(),
                    block: block.to_block(),
                })
                .map_err(|error| format!("forget failed: {error}")),
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
    /// The blocks whose plugins were asked to forget them.
    pub forgotten: Vec<String>,
    /// Plugins that could not be told.
    pub warnings: Vec<Diagnostic>,
}

/// Deletes a workload from the store, runs `remove_replicas` (which drains
/// and removes its containers and returns warnings), then tells each plugin
/// with a block on it to forget the block. `Ok(None)` when there is no such
/// workload.
pub fn delete_workload(
    id: &WorkloadId,
    plugins: &PluginRegistry,
    store: &Mutex<Store>,
    remove_replicas: impl FnOnce(&StoredWorkload) -> Vec<Diagnostic>,
) -> Result<Option<DeleteReport>, StoreError> {
    let deleted = store.lock().delete(id)?;
    let Some(deleted) = deleted else {
        return Ok(None);
    };
    let mut warnings = remove_replicas(&deleted);
    warnings.extend(forget_blocks(id, &deleted.blocks, plugins, store));
    Ok(Some(DeleteReport {
        workload: id.to_string(),
        forgotten: deleted
            .blocks
            .iter()
            .map(NormalisedBlock::display_name)
            .collect(),
        warnings,
    }))
}
