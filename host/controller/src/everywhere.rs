//! The streaming views of a whole cluster: `vd logs` and the waits of `vd
//! apply` and `vd rollout status`, each this node's own
//! ([`crate::stream`]) beside every other node's, asked of them at once
//! ([`crate::peers`]). Without a cluster each is this node's alone.
//!
//! A wait is over when every node's end of it is: a failure on any node
//! is an error of the answer, named with the node, as is a node that did
//! not answer; a statefulset ordinal that waits on a lost node, or a
//! replica no node may run (`nodes` naming a node never seen), keeps the
//! workload from counting converged.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc::UnboundedSender;
use voodu_api::peer::PeerRequest;
use voodu_api::{ApplyProgress, Failure, Frame, Phase, Response, WaitReport};
use voodu_model::diagnostic::Diagnostic;
use voodu_model::placement::{NodeName, Placement};
use voodu_model::WorkloadId;
use voodu_plugin_abi::messages::WorkloadKind;
use voodu_runtime::LogRequest;

use voodu_store::StateStore;
use voodu_store_etcd::EtcdStore;

use crate::{peers, stream, Controller};

/// Every replica's log of `workload`, on every node, as `log` frames
/// naming the node; then how many lines and which nodes were left out.
pub(crate) async fn logs(
    controller: &Controller,
    workload: &WorkloadId,
    replica: Option<&str>,
    request: &LogRequest,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    if controller.cluster().is_none() {
        return stream::logs_here(controller, workload, replica, request, frames).await;
    }
    let asked = PeerRequest::Logs {
        workload: workload.clone(),
        follow: request.follow,
        since_unix: request.since_unix,
        tail: request.tail,
        replica: replica.map(str::to_owned),
    };
    let their_lines = AtomicUsize::new(0);
    let forward = |_: &str, frame: Frame| {
        if matches!(frame, Frame::Log(_)) {
            their_lines.fetch_add(1, Ordering::Relaxed);
            let _ = frames.send(frame);
        }
    };
    let both = async {
        tokio::join!(
            stream::logs_here(controller, workload, replica, request, frames),
            peers::ask_every_node(controller, asked, true, &forward)
        )
    };
    let (here, there) = tokio::select! {
        both = both => both,
        () = frames.closed() => return Ok(None),
    };
    let (_, unanswered) = there?;
    match here? {
        Some(Response::LogsEnded { lines, .. }) => Ok(Some(Response::LogsEnded {
            lines: lines + their_lines.load(Ordering::Relaxed),
            unanswered,
        })),
        other => Ok(other),
    }
}

/// Waits until every node's end of the rollouts of `workloads` is over
/// (see [`stream::wait_here`] for one node's), streaming every node's
/// steps, and answers with every node's errors and warnings.
pub(crate) async fn wait(
    controller: &Controller,
    workloads: &[WorkloadId],
    since_event: Option<i64>,
    timeout_ms: Option<u64>,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    if controller.cluster().is_none() {
        return stream::wait_here(controller, workloads, since_event, timeout_ms, frames).await;
    }
    let asked = PeerRequest::Wait {
        workloads: workloads.to_vec(),
        timeout_ms,
    };
    let forward = |node: &str, frame: Frame| {
        if let Frame::Progress(step) = frame {
            let _ = frames.send(Frame::Progress(on_node(node, step)));
        }
    };
    let both = async {
        tokio::join!(
            stream::wait_here(controller, workloads, since_event, timeout_ms, frames),
            peers::ask_every_node(controller, asked, true, &forward)
        )
    };
    let (here, there) = tokio::select! {
        both = both => both,
        () = frames.closed() => return Ok(None),
    };
    let (answers, unanswered) = there?;
    let Some(Response::Waited(mut report)) = here? else {
        return Ok(None);
    };
    for (node, answer) in answers {
        if let Response::Waited(theirs) = answer {
            merge(&mut report, &node, theirs);
        }
    }
    let held = held_elsewhere(controller, workloads).await;
    for id in workloads {
        for problem in &held {
            if &problem.workload == id {
                report
                    .errors
                    .push(Diagnostic::for_workload(id, problem.message.clone(), None));
                set_phase(&mut report, id, Phase::Progressing);
            }
        }
        for left_out in &unanswered {
            let lost = left_out.lost;
            let diagnostic = Diagnostic::for_workload(id, left_out.to_string(), None);
            // A lost node's share was placed elsewhere (a statefulset
            // ordinal it holds is named above); a live node that did not
            // answer may still be rolling.
            if lost {
                report.warnings.push(diagnostic);
            } else {
                report.errors.push(diagnostic);
            }
        }
    }
    Ok(Some(Response::Waited(report)))
}

/// A step another node took, named with the node.
fn on_node(node: &str, step: ApplyProgress) -> ApplyProgress {
    match step {
        ApplyProgress::Step { workload, message } => ApplyProgress::Step {
            workload,
            message: format!("on node {node}: {message}"),
        },
        ApplyProgress::Runtime { workload, message } => ApplyProgress::Runtime {
            workload,
            message: format!("on node {node}: {message}"),
        },
        ApplyProgress::Warning { workload, message } => ApplyProgress::Warning {
            workload,
            message: format!("on node {node}: {message}"),
        },
        other => other,
    }
}

/// Takes another node's end of the wait into `report`: its errors and
/// warnings named with the node, and the worse phase of each workload.
fn merge(report: &mut WaitReport, node: &str, theirs: WaitReport) {
    let named = |mut diagnostic: Diagnostic| {
        diagnostic.message = format!("on node {node}: {}", diagnostic.message);
        diagnostic
    };
    report.errors.extend(theirs.errors.into_iter().map(named));
    report
        .warnings
        .extend(theirs.warnings.into_iter().map(named));
    for waited in theirs.workloads {
        if matches!(waited.phase, Phase::Failed | Phase::CrashLooping) {
            set_phase(report, &waited.workload, waited.phase);
        }
    }
}

fn set_phase(report: &mut WaitReport, workload: &WorkloadId, phase: Phase) {
    for waited in &mut report.workloads {
        if &waited.workload == workload {
            waited.phase = phase;
        }
    }
}

/// Why part of a workload runs nowhere yet.
pub(crate) struct Held {
    /// The workload.
    pub(crate) workload: WorkloadId,
    /// What waits, on what, and the command that moves it.
    pub(crate) message: String,
}

/// [`held_now`] off the async runtime.
async fn held_elsewhere(controller: &Controller, workloads: &[WorkloadId]) -> Vec<Held> {
    let Some(cluster) = controller.cluster() else {
        return Vec::new();
    };
    let store = cluster.store.clone();
    let workloads_store = controller.store().clone();
    let workloads = workloads.to_vec();
    tokio::task::spawn_blocking(move || held_now(&store, workloads_store.as_ref(), &workloads))
        .await
        .unwrap_or_default()
}

/// The replicas of `workloads` that no node runs now: statefulset
/// ordinals placed on a lost node (they wait for it, or for `vd node
/// remove`), and slots no node may take (`nodes` names none that is alive
/// with the workload's plugins). Empty when the store does not answer.
pub(crate) fn held_now(
    store: &EtcdStore,
    workloads_store: &dyn StateStore,
    workloads: &[WorkloadId],
) -> Vec<Held> {
    let (Ok(placements), Ok(nodes)) = (store.placements(), store.nodes()) else {
        return Vec::new();
    };
    let lost: Vec<String> = nodes
        .iter()
        .filter(|node| !node.alive)
        .map(|node| node.name.clone())
        .collect();
    let known: Vec<String> = nodes.into_iter().map(|node| node.name).collect();
    let mut held = Vec::new();
    for id in workloads {
        let Some(placement) = placements.get(id) else {
            continue;
        };
        if id.kind == WorkloadKind::Statefulset {
            for node in &lost {
                held.extend(waiting_on_lost(id, placement, node));
            }
        }
        let unassigned = placement.slots.iter().filter(|slot| slot.is_none()).count();
        if unassigned == 0 {
            continue;
        }
        let named = workloads_store
            .workload(id)
            .ok()
            .flatten()
            .map(|stored| stored.core_spec.nodes)
            .unwrap_or_default();
        let never_seen: Vec<String> = named
            .iter()
            .filter(|node| !known.iter().any(|name| name == node.as_str()))
            .map(|node| format!("\"{node}\""))
            .collect();
        let replicas = format!(
            "{unassigned} replica{} of {} wait{}",
            if unassigned == 1 { "" } else { "s" },
            placement.slots.len(),
            if unassigned == 1 { "s" } else { "" }
        );
        let message = if never_seen.is_empty() {
            format!(
                "{replicas} for a node to run on: no live node that has its plugins may take it — `vd get nodes` shows which nodes are alive and what plugins each has"
            )
        } else {
            format!(
                "{replicas} for node {}, which this cluster has never seen — start a node with that --node, or fix attribute \"nodes\"",
                never_seen.join(", ")
            )
        };
        held.push(Held {
            workload: id.clone(),
            message,
        });
    }
    held
}

/// The ordinals of statefulset `id` that wait on lost node `node`.
fn waiting_on_lost(id: &WorkloadId, placement: &Placement, node: &str) -> Option<Held> {
    let name: NodeName = node.parse().ok()?;
    let ordinals = placement.ordinals_on(&name);
    if ordinals.is_empty() {
        return None;
    }
    let list: Vec<String> = ordinals.iter().map(ToString::to_string).collect();
    Some(Held {
        workload: id.clone(),
        message: format!(
            "ordinal{} {} wait{} on lost node {node}: at most one container per ordinal, so {} until {node} comes back, or an operator declares its host gone with `vd node remove {node}`",
            if list.len() == 1 { "" } else { "s" },
            list.join(", "),
            if list.len() == 1 { "s" } else { "" },
            if list.len() == 1 { "it runs nowhere" } else { "they run nowhere" },
        ),
    })
}
