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

use parking_lot::Mutex;

use crate::apply::{default_port, validate_block};
use voodu_model::diagnostic::Diagnostic;
use voodu_model::WorkloadId;
use voodu_plugin_host::{InstallOptions, Installed, PluginRegistry, RegistryError};
use voodu_store::{EventLevel, NewEvent, Store, StoreError, WorkloadInput};

/// What an install did.
#[derive(Debug, Clone)]
pub struct InstallReport {
    /// The plugin now live, and the version it replaced.
    pub installed: Installed,
    /// The workloads whose blocks the new version normalised differently,
    /// each stored as a new revision.
    pub revalidated: Vec<WorkloadId>,
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
    store: &Mutex<Store>,
) -> Result<InstallReport, InstallError> {
    let staged = plugins.stage(source, options)?;
    let name = staged.handle().name().to_owned();
    let version = staged.handle().info().version.clone();
    let users = store.lock().workloads_with_block_type(&name)?;
    let mut inputs = Vec::new();
    let mut events = Vec::new();
    let mut problems = Vec::new();
    for id in users {
        let Some(stored) = store.lock().workload(&id)? else {
            continue;
        };
        let default_port = match default_port(&stored.core_spec) {
            Ok(port) => port,
            Err(message) => {
                problems.push(Diagnostic::for_workload(&id, message, None));
                continue;
            }
        };
        let mut blocks = Vec::with_capacity(stored.blocks.len());
        let mut changed = Vec::new();
        for block in &stored.blocks {
            if block.block_type != name {
                blocks.push(block.clone());
                continue;
            }
            match validate_block(
                &id,
                &stored.core_spec,
                default_port,
                &block.to_block(),
                staged.handle(),
            ) {
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
                reason: "plugin".into(),
                message: format!(
                    "{} normalised anew by {name} {version} at its install",
                    changed.join(", ")
                ),
            });
            inputs.push(WorkloadInput {
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
    let mut went_live = None;
    let stored = store.lock().apply_then(&inputs, &events, || {
        let committed = plugins.commit(staged)?;
        went_live = Some(committed.clone());
        Ok::<_, RegistryError>(committed)
    });
    match stored {
        Ok(Ok((_, (installed, replaced)))) => {
            if let Some(replaced) = replaced {
                replaced.shutdown();
            }
            Ok(InstallReport {
                installed,
                revalidated: inputs.into_iter().map(|input| input.id).collect(),
            })
        }
        Ok(Err(error)) => Err(InstallError::Registry(error)),
        Err(error) => match went_live {
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
