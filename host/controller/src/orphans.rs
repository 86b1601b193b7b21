//! `vd get pods --orphans` and `vd prune --orphans`: the containers of this
//! controller whose workload the store has no record of (a lost or
//! replaced store, a backup restored), which the reconciler reports and
//! leaves running (`voodu_reconcile::orphans`), listed, and removed only
//! when the operator asks.

use voodu_api::{Failure, Response};
use voodu_model::WorkloadId;
use voodu_reconcile::Reconciler;

use crate::{block_on, wire};

/// The orphans, of one workload or all, as `vd get pods` rows.
pub(crate) fn list(
    reconciler: &Reconciler,
    workload: Option<&WorkloadId>,
) -> Result<Response, Failure> {
    let orphans =
        block_on(reconciler.orphans()).map_err(|error| Failure::new(error.to_string()))?;
    let replicas: Vec<_> = orphans
        .into_iter()
        .filter(|(id, _)| workload.is_none_or(|wanted| wanted == id))
        .flat_map(|(_, replicas)| replicas)
        .collect();
    Ok(Response::Pods {
        unanswered: Vec::new(),
        replicas: wire::replicas(&replicas),
    })
}

/// Removes every orphan, each drained as any removal; a dry run only names
/// them. The caller holds the write lock, so no apply adopts one while it
/// is removed.
pub(crate) fn prune(reconciler: &Reconciler, dry_run: bool) -> Result<Response, Failure> {
    let failure = |error: voodu_reconcile::ReconcileError| {
        Failure::new(format!(
            "prune: {error} — what was removed before it is named in `vd events`; run it again to finish"
        ))
    };
    let orphans = if dry_run {
        block_on(reconciler.orphans()).map_err(failure)?
    } else {
        block_on(reconciler.prune_orphans()).map_err(failure)?
    };
    let replicas: Vec<_> = orphans.into_values().flatten().collect();
    Ok(Response::Pruned {
        replicas: wire::replicas(&replicas),
        dry_run,
    })
}
