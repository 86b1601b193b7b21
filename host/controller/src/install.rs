//! Installing a plugin as one all-or-nothing step.
//!
//! A new version of an installed plugin must accept every block already
//! stored for it, or it does not go live. So an install:
//!
//! 1. stages the file and loads it beside the live version
//!    ([`PluginRegistry::stage`]);
//! 2. sends every stored block of that plugin to the new version's
//!    `validate` (a plugin's `validate` accepts its own normalised spec);
//! 3. if any block is refused, stops: nothing changes, and every refused
//!    block is named with its workload;
//! 4. otherwise, in one store transaction, stores a new revision for each
//!    workload whose blocks the new version normalised differently, and
//!    makes the new version live ([`PluginRegistry::commit`]) before the
//!    transaction commits;
//! 5. shuts the old instance down once no lock is held.
//!
//! The controller then sends the new instance every block's current set
//! (`Reconciler::plugin_changed`).

use std::sync::Arc;

use crate::apply::{claim_refusals, validate_block};
use voodu_model::diagnostic::Diagnostic;
use voodu_model::WorkloadId;
use voodu_plugin_host::{InstallOptions, Installed, PluginHandle, PluginRegistry, RegistryError};
use voodu_store::{EventLevel, NewEvent, StateStore, StoreError, WorkloadInput};

/// What an install did.
#[derive(Debug, Clone)]
pub struct InstallReport {
    /// The plugin now live, and the version it replaced.
    pub installed: Installed,
    /// The workloads whose blocks the new version normalised differently,
    /// each stored as a new revision.
    pub revalidated: Vec<WorkloadId>,
    /// The instance the new version replaced, still running: the caller
    /// shuts it down once the new one has been offered every set, so a
    /// plugin serving traffic hands over without a gap.
    pub replaced: Option<Arc<PluginHandle>>,
}

/// Why an install changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The file could not be staged, loaded or made live.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The new version refused stored blocks; each is listed.
    #[error("the new version refused {} stored block(s); nothing changed", .0.len())]
    Refused(Vec<Diagnostic>),
    /// The store failed; nothing changed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store committed or rolled back without asking the new version
    /// to go live (a store that does not keep its contract).
    #[error("the store did not make the new version live; nothing changed — install it again")]
    NotMadeLive,
    /// The new version went live, but the store could not commit the specs
    /// it normalised anew.
    #[error("{} {} is live, but the blocks it normalised anew could not be stored: {error} — run `vd apply` again to store them", .installed.info.name, .installed.info.version)]
    LiveButNotStored {
        /// The plugin now live.
        installed: Box<Installed>,
        /// Why the store failed.
        error: StoreError,
    },
}

/// Installs (or, with `options.replace`, replaces) the plugin at `source`,
/// checking the new version against every stored block of it first.
pub fn install_plugin(
    source: &std::path::Path,
    options: &InstallOptions,
    plugins: &PluginRegistry,
    store: &dyn StateStore,
) -> Result<InstallReport, InstallError> {
    let staged = plugins.stage(source, options)?;
    let name = staged.handle().name().to_owned();
    let version = staged.handle().info().version.clone();
    let users = store.workloads_with_block_type(&name)?;
    let mut inputs = Vec::new();
    let mut events = Vec::new();
    let mut problems = Vec::new();
    for id in users {
        let Some(stored) = store.workload(&id)? else {
            continue;
        };
        let mut blocks = Vec::with_capacity(stored.blocks.len());
        let mut changed = Vec::new();
        for block in &stored.blocks {
            if block.block_type != name {
                blocks.push(block.clone());
                continue;
            }
            match validate_block(&id, &stored.core_spec, &block.to_block(), staged.handle()) {
                Ok(revalidated) => {
                    if revalidated != *block {
                        changed.push(revalidated.display_name());
                    }
                    blocks.push(revalidated);
                }
                Err(message) => problems.push(Diagnostic::for_workload(
                    &id,
                    format!("{message} (as stored; refused by {name} {version})"),
                    None,
                )),
            }
        }
        if !changed.is_empty() {
            events.push(NewEvent {
                workload: id.clone(),
                level: EventLevel::Info,
                reason: voodu_model::EventReason::Plugin,
                message: format!(
                    "{} normalised anew by {name} {version} at its install",
                    changed.join(", ")
                ),
            });
            inputs.push(WorkloadInput {
                block_locations: Vec::new(),
                id,
                core_spec: stored.core_spec,
                blocks,
                source: stored.source,
            });
        }
    }
    if !problems.is_empty() {
        // Dropping `staged` shuts the new version down and removes its files.
        return Err(InstallError::Refused(problems));
    }
    // The new version goes live inside the transaction, before it commits.
    // If the commit itself then fails, the plugin is live but its specs are
    // not stored: that is said as it is, never as "nothing changed".
    let mut made_live = None;
    let mut staged = Some(staged);
    let stored = store.apply_then(&inputs, &events, &mut || {
        let Some(staged) = staged.take() else {
            return false;
        };
        let committed = plugins.commit(staged);
        let live = committed.is_ok();
        made_live = Some(committed);
        live
    });
    match (stored, made_live) {
        (Ok(Some(_)), Some(Ok((installed, replaced)))) => Ok(InstallReport {
            installed,
            revalidated: inputs.into_iter().map(|input| input.id).collect(),
            replaced,
        }),
        (Ok(_), Some(Err(error))) => Err(InstallError::Registry(error)),
        (Ok(_), _) => Err(InstallError::NotMadeLive),
        // Checked before the new version goes live: nothing changed.
        (Err(StoreError::ClaimsConflict(conflicts)), None) => {
            Err(InstallError::Refused(claim_refusals(&conflicts)))
        }
        (Err(error), made_live) => match made_live.and_then(Result::ok) {
            Some((installed, replaced)) => {
                if let Some(replaced) = replaced {
                    replaced.shutdown();
                }
                Err(InstallError::LiveButNotStored {
                    installed: Box::new(installed),
                    error,
                })
            }
            None => Err(InstallError::Store(error)),
        },
    }
}
