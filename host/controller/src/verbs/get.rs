//! `get`: the stored workloads, of one kind or all, one summary each.

use voodu_api::{Failure, Response, WorkloadSummary};
use voodu_plugin_abi::messages::WorkloadKind;

use super::store_failure;
use crate::{wire, Controller};

/// Lists the stored workloads of `kind`, or all of them.
pub(crate) fn handle(
    controller: &Controller,
    kind: Option<WorkloadKind>,
) -> Result<Response, Failure> {
    let workloads = controller.store.workloads(kind).map_err(store_failure)?;
    Ok(Response::Workloads {
        workloads: workloads
            .iter()
            .map(|workload| WorkloadSummary::from(&wire::stored_workload(workload)))
            .collect(),
    })
}
