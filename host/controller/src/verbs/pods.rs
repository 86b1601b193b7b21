//! `pods` (`vd get pods`): the live replicas, of one workload or all; with
//! `--orphans`, the containers no stored workload accounts for
//! ([`crate::orphans::list`]).

use voodu_api::{Failure, Response};
use voodu_model::WorkloadId;

use crate::{block_on, no_replicas, orphans, wire, Controller};

/// Lists the replicas of `workload`, or all; or the orphans.
pub(crate) fn handle(
    controller: &Controller,
    workload: Option<&WorkloadId>,
    orphans_only: bool,
) -> Result<Response, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Err(no_replicas());
    };
    if orphans_only {
        return orphans::list(reconciler, workload);
    }
    let replicas = block_on(reconciler.live_replicas(workload))
        .map_err(|error| Failure::new(error.to_string()))?;
    Ok(Response::Pods {
        replicas: wire::replicas(&replicas),
    })
}
