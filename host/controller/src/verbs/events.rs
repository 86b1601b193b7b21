//! `events`: the newest stored events, of one workload or all. Following
//! them (`--watch`) is a stream ([`crate::stream`]).

use voodu_api::{Failure, Response};
use voodu_model::WorkloadId;
use voodu_reconcile::activity::Notice;

use super::store_failure;
use crate::{wire, Controller};

/// The newest `limit` events of `workload`, or of every workload.
pub(crate) fn handle(
    controller: &Controller,
    workload: Option<&WorkloadId>,
    limit: usize,
) -> Result<Response, Failure> {
    let events = controller
        .store
        .recent_events(workload, limit)
        .map_err(store_failure)?;
    Ok(Response::Events {
        events: events
            .iter()
            .map(|(workload, event)| wire::notice(&Notice::stored(workload, event)))
            .collect(),
    })
}
