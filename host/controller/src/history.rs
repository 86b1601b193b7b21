//! Revision history and rollback. Every stored revision is kept (see
//! [`Store::revisions`]); a rollback applies one of them again, through the
//! same validation as an apply: each block goes to its plugin's `validate`
//! (the plugin installed now), and a refusal changes nothing. The result is
//! a new revision with the old spec, so history only ever grows.

use crate::apply::{store_validated, validate_block, ApplyError};
use voodu_api::ApplyReport;
use voodu_model::diagnostic::Diagnostic;
use voodu_model::WorkloadId;
use voodu_plugin_host::PluginRegistry;
use voodu_reconcile::Reconciler;
use voodu_store::{EventLevel, NewEvent, StateStore, StoreError, WorkloadInput};

/// Why a rollback changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    /// No such workload is stored.
    #[error("{0}: no such workload — `vd get workloads` lists what is stored")]
    NotFound(WorkloadId),
    /// The workload has no such revision.
    #[error("{workload}: no revision {revision} — `vd history {workload}` lists its revisions ({available})")]
    NoSuchRevision {
        /// The workload.
        workload: WorkloadId,
        /// The revision asked for.
        revision: i64,
        /// The revisions there are, `1 to 4`.
        available: String,
    },
    /// The workload has only its first revision.
    #[error("{0}: it has only one revision, so there is nothing to roll back to")]
    NothingBefore(WorkloadId),
    /// The revision's blocks were refused by their plugins now.
    #[error("the rollback was refused with {} problem(s); nothing changed", .0.len())]
    Refused(Vec<Diagnostic>),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ApplyError> for RollbackError {
    fn from(error: ApplyError) -> Self {
        match error {
            ApplyError::Refused(problems) => RollbackError::Refused(problems),
            ApplyError::Store(error) => RollbackError::Store(error),
        }
    }
}

/// Applies revision `to` of a workload again (default: the one before the
/// current revision), as a new revision.
pub fn rollback(
    id: &WorkloadId,
    to: Option<i64>,
    plugins: &PluginRegistry,
    store: &dyn StateStore,
    reconciler: Option<&Reconciler>,
) -> Result<ApplyReport, RollbackError> {
    let stored = store
        .workload(id)?
        .ok_or_else(|| RollbackError::NotFound(id.clone()))?;
    let revisions = store.revisions(id)?;
    let wanted = match to {
        Some(revision) => revision,
        None if stored.revision > 1 => stored.revision - 1,
        None => return Err(RollbackError::NothingBefore(id.clone())),
    };
    let Some(target) = revisions
        .iter()
        .find(|revision| revision.revision == wanted)
    else {
        return Err(RollbackError::NoSuchRevision {
            workload: id.clone(),
            revision: wanted,
            available: match (revisions.first(), revisions.last()) {
                (Some(first), Some(last)) => {
                    format!("{} to {}", first.revision, last.revision)
                }
                _ => "none".to_owned(),
            },
        });
    };
    let mut blocks = Vec::with_capacity(target.blocks.len());
    let mut problems = Vec::new();
    for block in &target.blocks {
        let Some(plugin) = plugins.get(&block.block_type) else {
            problems.push(Diagnostic::for_workload(
                id,
                format!(
                    "{} of revision {wanted} belongs to a plugin named \"{}\", which is not installed — run `vd plugins:install <source>`",
                    block.display_name(),
                    block.block_type
                ),
                None,
            ));
            continue;
        };
        match validate_block(id, &target.core_spec, &block.to_block(), &plugin) {
            Ok(validated) => blocks.push(validated),
            Err(message) => problems.push(Diagnostic::for_workload(
                id,
                format!("{message} (revision {wanted})"),
                None,
            )),
        }
    }
    if !problems.is_empty() {
        return Err(RollbackError::Refused(problems));
    }
    let input = WorkloadInput {
        block_locations: Vec::new(),
        id: id.clone(),
        core_spec: target.core_spec.clone(),
        blocks,
        source: stored.source,
    };
    let event = NewEvent {
        workload: id.clone(),
        level: EventLevel::Info,
        reason: voodu_model::EventReason::Rollback,
        message: format!(
            "rolled back from revision {} to the spec of revision {wanted}",
            stored.revision
        ),
    };
    let mut report = store_validated(&[input], Vec::new(), &[event], plugins, store, reconciler)?;
    for applied in &mut report.workloads {
        applied.rolled_back_to = Some(wanted);
    }
    Ok(report)
}
