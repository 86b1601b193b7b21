//! Telling plugins that blocks are gone, so nothing is left orphaned in any
//! plugin: when a workload is deleted, and when a new revision drops a
//! block.

use voodu_model::EventReason;
use voodu_plugin_abi::messages::{Block, ForgetRequest};

use crate::{BlockCallError, BlockPlugins};
use voodu_model::diagnostic::Diagnostic;
use voodu_model::{NormalisedBlock, WorkloadId};
use voodu_store::{EventLevel, NewEvent, StateStore};

/// Sends `forget` for each block to its plugin, and marks the block's
/// publication forgotten (its set no longer shown, its generation kept).
/// Failures do not stop the others; each becomes a warning, returned and
/// recorded as an event. The caller has first dropped the blocks from the
/// publisher ([`crate::Reconciler::drop_blocks`]), so no set queued for one
/// reaches its plugin after the forget.
pub fn forget_blocks(
    workload: &WorkloadId,
    blocks: &[NormalisedBlock],
    plugins: &dyn BlockPlugins,
    store: &dyn StateStore,
) -> Vec<Diagnostic> {
    let mut warnings = Vec::new();
    let mut events = Vec::new();
    for block in blocks {
        let request = forget_request(workload, block.to_block());
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
                EventReason::Forgotten,
                format!("{} forgotten by its plugin", block.display_name()),
            ),
            Err(problem) => {
                let message = format!("{}: {problem}", block.display_name());
                warnings.push(Diagnostic::for_workload(workload, message.clone(), None));
                (EventLevel::Warning, EventReason::ForgetFailed, message)
            }
        };
        events.push(NewEvent {
            workload: workload.clone(),
            level,
            reason,
            message,
        });
        if let Err(error) = store.forget_publication(workload, &block.block_type, &block.labels) {
            warnings.push(Diagnostic::for_workload(
                workload,
                format!(
                    "{}: its last set could not be marked forgotten: {error}",
                    block.display_name()
                ),
                None,
            ));
        }
    }
    if let Err(error) = store.record_events(&events) {
        warnings.push(Diagnostic::for_workload(
            workload,
            format!("the forget events could not be recorded: {error}"),
            None,
        ));
    }
    warnings
}

/// Sends `forget` for blocks this controller's plugins heard sets for but
/// that another controller of its cluster forgot and marked in the store
/// (a block a new revision dropped, a deleted workload's): each node's
/// plugins forget what they were told. A failure is logged; the store is
/// not written again.
pub fn forget_heard(workload: &WorkloadId, blocks: &[Block], plugins: &dyn BlockPlugins) {
    for block in blocks {
        let request = forget_request(workload, block.clone());
        match plugins.forget(&block.block_type, &request) {
            Ok(()) => {
                tracing::info!(%workload, block = %block.block_type, "forgotten by this node's plugin")
            }
            Err(error) => {
                tracing::warn!(%workload, block = %block.block_type, %error, "this node's plugin could not forget a block")
            }
        }
    }
}

/// The `forget` request for one block of `workload`.
fn forget_request(workload: &WorkloadId, block: Block) -> ForgetRequest {
    ForgetRequest {
        kind: workload.kind,
        scope: workload.scope.clone(),
        name: workload.name.clone(),
        block,
    }
}
