//! `stop` and `start` (`vd stop`, `vd start`), as voodu has them, under
//! the write lock. `stop` freezes the replicas in the store first
//! ([`voodu_store::StateStore::freeze`], with a `stopped` event), so no
//! pass starts them again or replaces them, then the reconciler drains
//! and stops them, keeping their containers
//! ([`voodu_reconcile::Reconciler::stop_replicas`]). `start` thaws them
//! (a `started` event) and removes their stopped containers, and the
//! workload's pass creates them anew from the current spec and config.
//! A replica on another node of a cluster is stopped by `vd stop` on that
//! node; the freeze itself is the cluster's.

use std::collections::BTreeSet;

use voodu_api::{Failure, Response};
use voodu_model::{EventLevel, WorkloadId};
use voodu_runtime::Replica;
use voodu_store::{Freeze, NewEvent};

use super::store_failure;
use crate::{block_on, no_replicas, not_found, Controller};

/// The replicas of `workload` on this node that `replica` names (all of
/// them when it names none).
fn chosen(
    controller: &Controller,
    workload: &WorkloadId,
    replica: Option<&str>,
) -> Result<Vec<Replica>, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Err(no_replicas());
    };
    let here = block_on(reconciler.live_replicas(Some(workload)))
        .map_err(|error| Failure::new(error.to_string()))?;
    let Some(wanted) = replica else {
        return Ok(here);
    };
    let named: Vec<Replica> = here
        .iter()
        .filter(|listed| listed.replica_id == wanted)
        .cloned()
        .collect();
    if named.is_empty() {
        let ids: Vec<&str> = here.iter().map(|r| r.replica_id.as_str()).collect();
        let elsewhere = controller
            .cluster()
            .map(|_| {
                " (in a cluster, run it on the node that runs the replica: vd get pods names it)"
            })
            .unwrap_or_default();
        return Err(Failure::new(format!(
            "{workload}: no replica {wanted} here — here: {}{elsewhere}",
            if ids.is_empty() {
                "none".to_owned()
            } else {
                ids.join(", ")
            }
        )));
    }
    Ok(named)
}

/// `vd stop`: freezes and stops the replicas of `workload` on this node
/// (or the one `replica` names).
pub(crate) fn stop(
    controller: &Controller,
    workload: &WorkloadId,
    replica: Option<&str>,
) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let store = &controller.store;
    if store.workload(workload).map_err(store_failure)?.is_none() {
        return Err(not_found(workload));
    }
    if workload.kind.runs_to_completion() {
        return Err(Failure::new(format!(
            "{workload}: a {}'s runs end on their own — vd delete {workload} removes it (a running run is killed), and suspend = true pauses a cronjob's schedule",
            workload.kind
        )));
    }
    let replicas = chosen(controller, workload, replica)?;
    let ids: BTreeSet<String> = replicas.iter().map(|r| r.replica_id.clone()).collect();
    if ids.is_empty() {
        return Err(Failure::new(format!(
            "{workload}: no replica of it is here to stop — vd get pods {workload} shows where they run"
        )));
    }
    let listed: Vec<&str> = ids.iter().map(String::as_str).collect();
    let event = NewEvent {
        workload: workload.clone(),
        level: EventLevel::Info,
        reason: voodu_model::EventReason::Stopped,
        message: format!(
            "vd stop: replica {} drained and stopped, frozen until vd start",
            listed.join(", ")
        ),
    };
    store
        .freeze(workload, &Freeze::Add(ids.clone()), &[event])
        .map_err(store_failure)?
        .ok_or_else(|| not_found(workload))?;
    if let Some(reconciler) = controller.reconciler() {
        block_on(reconciler.stop_replicas(workload, &replicas))
            .map_err(|error| Failure::new(format!("{workload}: {error}")))?;
    }
    Ok(Response::Stopped {
        workload: workload.clone(),
        replicas: ids.into_iter().collect(),
    })
}

/// `vd start`: thaws the frozen replicas of `workload` (or the one
/// `replica` names); each is created anew.
pub(crate) fn start(
    controller: &Controller,
    workload: &WorkloadId,
    replica: Option<&str>,
) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let store = &controller.store;
    let Some(stored) = store.workload(workload).map_err(store_failure)? else {
        return Err(not_found(workload));
    };
    let thawed: BTreeSet<String> = match replica {
        Some(id) => std::iter::once(id.to_owned()).collect(),
        None => stored.frozen.clone(),
    };
    if thawed.is_empty() || !thawed.is_subset(&stored.frozen) {
        return Err(Failure::new(format!(
            "{workload}: {} — vd stop freezes a replica; frozen now: {}",
            match replica {
                Some(id) => format!("replica {id} is not stopped by vd stop"),
                None => "no replica of it is stopped by vd stop".to_owned(),
            },
            if stored.frozen.is_empty() {
                "none".to_owned()
            } else {
                stored.frozen.iter().cloned().collect::<Vec<_>>().join(", ")
            }
        )));
    }
    let listed: Vec<&str> = thawed.iter().map(String::as_str).collect();
    let event = NewEvent {
        workload: workload.clone(),
        level: EventLevel::Info,
        reason: voodu_model::EventReason::Started,
        message: format!(
            "vd start: replica {} thawed, created anew from the current spec",
            listed.join(", ")
        ),
    };
    let change = match replica {
        Some(_) => Freeze::Remove(Some(thawed.clone())),
        None => Freeze::Remove(None),
    };
    store
        .freeze(workload, &change, &[event])
        .map_err(store_failure)?
        .ok_or_else(|| not_found(workload))?;
    if let Some(reconciler) = controller.reconciler() {
        let here = block_on(reconciler.live_replicas(Some(workload)))
            .map_err(|error| Failure::new(error.to_string()))?;
        let stopped: Vec<Replica> = here
            .into_iter()
            .filter(|listed| thawed.contains(&listed.replica_id))
            .collect();
        block_on(reconciler.start_replicas(workload, &stopped))
            .map_err(|error| Failure::new(format!("{workload}: {error}")))?;
    }
    Ok(Response::Started {
        workload: workload.clone(),
        replicas: thawed.into_iter().collect(),
    })
}
