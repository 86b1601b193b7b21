//! `history`: every stored revision of a workload, oldest first.

use voodu_api::{Failure, Response};
use voodu_model::WorkloadId;

use super::store_failure;
use crate::{not_found, wire, Controller};

/// Lists the revisions of `workload`.
pub(crate) fn handle(controller: &Controller, workload: &WorkloadId) -> Result<Response, Failure> {
    let store = &controller.store;
    let Some(stored) = store.workload(workload).map_err(store_failure)? else {
        return Err(not_found(workload));
    };
    Ok(Response::History {
        workload: workload.clone(),
        current: stored.revision,
        revisions: store
            .revisions(workload)
            .map_err(store_failure)?
            .iter()
            .map(wire::revision)
            .collect(),
    })
}
