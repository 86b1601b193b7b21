//! `apply` and `apply --dry-run`: parse ([`crate::parse_bounded`]), then,
//! under the write lock, validate through the plugins and store all or
//! nothing ([`crate::apply`]); an apply then queues each workload for the
//! reconciler, whose rollouts a client follows with `wait`.

use std::collections::BTreeMap;

use voodu_api::{ApplyProgress, Failure, Response};
use voodu_model::ManifestSource;

use super::{refusal, store_failure};
use crate::apply::{apply, dry_run, ApplyError};
use crate::{parse_bounded, Controller};

/// What an apply asks, besides its manifests.
pub(crate) struct ApplyOptions {
    /// Say what would change; store nothing.
    pub dry_run: bool,
    /// The `vd apply` shell's values of the variables the manifests use.
    pub environment: BTreeMap<String, String>,
    /// Leave out voodu's kinds that this voodu does not run.
    pub skip_unsupported: bool,
    /// The files `env_file` names, as `vd apply` read them.
    pub env_files: BTreeMap<String, String>,
}

/// Answers `apply`, or with `dry_run` says what it would do.
pub(crate) fn handle(
    controller: &Controller,
    sources: Vec<ManifestSource>,
    options: ApplyOptions,
    progress: &mut (dyn FnMut(ApplyProgress) + Send),
) -> Result<Response, Failure> {
    let dry_run_only = options.dry_run;
    // Parsing is pure and can be slow for a large manifest: it runs before
    // the write lock, so it never holds up others.
    let parsed = parse_bounded(sources, options, controller.store.clone())?;
    let _writes = controller.lock_writes()?;
    if dry_run_only {
        return match dry_run(parsed, &controller.plugins, &*controller.store, progress) {
            Ok(report) => Ok(Response::DryRun(report)),
            Err(ApplyError::Refused(diagnostics)) => Err(refusal(diagnostics, |found| {
                format!("dry run: the apply would be refused: {found} found")
            })),
            Err(ApplyError::Store(error)) => Err(store_failure(error)),
        };
    }
    let since_event = controller.store.last_event_id().map_err(store_failure)?;
    let reconciler = controller.reconciler().map(|reconciler| &**reconciler);
    match apply(
        parsed,
        &controller.plugins,
        &*controller.store,
        reconciler,
        progress,
    ) {
        Ok(mut report) => {
            report.since_event = since_event;
            // Stored: the rollouts run in the reconciler's workers; a client
            // that wants to follow them asks with `Request::Wait`.
            if let Some(reconciler) = controller.reconciler() {
                for applied in &report.workloads {
                    reconciler.enqueue(&applied.workload);
                }
            }
            Ok(Response::Applied(report))
        }
        Err(ApplyError::Refused(diagnostics)) => Err(refusal(diagnostics, |found| {
            format!("apply refused: {found} found, nothing was stored")
        })),
        Err(ApplyError::Store(error)) => Err(store_failure(error)),
    }
}
