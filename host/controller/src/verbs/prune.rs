//! `prune_orphans` (`vd prune --orphans`): under the write lock, so that no
//! apply adopts an orphan while it is removed, every orphan is drained and
//! removed ([`crate::orphans::prune`]); a dry run only names them.

use voodu_api::{Failure, Response};

use crate::{no_replicas, orphans, Controller};

/// Removes the orphans, or with `dry_run` names them.
pub(crate) fn handle(controller: &Controller, dry_run: bool) -> Result<Response, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Err(no_replicas());
    };
    let _writes = controller.lock_writes()?;
    orphans::prune(reconciler, dry_run)
}
