//! The requests that stream until something happens: `Wait` (what `vd
//! apply`, `vd delete` and `vd rollout status` follow), `Events` with
//! `follow` (`vd events -w`) and `Pods` with `watch` (`vd get pods -w`).
//! They run on the async runtime, listening to the activity stream and the
//! reconciler's status board; none of them holds a lock while it waits, so
//! any number of them can run beside applies and rollouts.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use voodu_model::EventReason;

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::mpsc::UnboundedSender;

use super::Controller;
use futures_util::StreamExt;
use voodu_reconcile::activity::Notice;

use voodu_api::ApplyProgress;
use voodu_api::{
    Failure, Frame, LogLine, PodChange, Request, Response, WaitReport, WaitedWorkload,
};
use voodu_model::diagnostic::Diagnostic;
use voodu_model::WorkloadId;
use voodu_reconcile::status::Phase;
use voodu_reconcile::Reconciler;
use voodu_runtime::LogRequest;

use crate::wire;
use voodu_store::EventLevel;

/// How many stored events a wait replays at most.
const REPLAY_LIMIT: usize = 10_000;

/// Whether `request` is answered by [`serve`] rather than
/// [`Controller::handle`].
pub fn is_stream(request: &Request) -> bool {
    matches!(
        request,
        Request::Wait { .. }
            | Request::Logs { .. }
            | Request::Exec { .. }
            | Request::Run { .. }
            | Request::Events { follow: true, .. }
            | Request::Pods { watch: true, .. }
    )
}

/// Answers one streaming request, sending frames until it is done or the
/// client hangs up (`frames` closes).
pub async fn serve(
    controller: Arc<Controller>,
    request: Request,
    frames: UnboundedSender<Frame>,
    input: Option<tokio::sync::mpsc::UnboundedReceiver<voodu_runtime::ExecInput>>,
) {
    let end = match request {
        Request::Wait {
            workloads,
            since_event,
            timeout_ms,
        } => {
            crate::everywhere::wait(&controller, &workloads, since_event, timeout_ms, &frames).await
        }
        Request::Events {
            workload, limit, ..
        } => follow_events(&controller, workload.as_ref(), limit, &frames).await,
        Request::Pods { workload, .. } => watch_pods(&controller, workload.as_ref(), &frames).await,
        Request::Logs {
            workload,
            follow,
            since_unix,
            tail,
            replica,
        } => {
            let request = LogRequest {
                follow,
                since_unix,
                tail,
            };
            crate::everywhere::logs(
                &controller,
                &workload,
                replica.as_deref(),
                &request,
                &frames,
            )
            .await
        }
        Request::Exec {
            workload,
            replica,
            command,
            env,
            workdir,
            user,
            session,
        } => {
            let command = voodu_runtime::ExecCommand {
                argv: command,
                env,
                workdir,
                user,
            };
            let order =
                crate::exec::ExecOrder::new(&workload, replica.as_deref(), command, session, input);
            crate::exec::exec(&controller, order, &frames).await
        }
        Request::Run { scope, name, kind } => run(&controller, &scope, &name, kind, &frames).await,
        other => Err(Failure::new(format!(
            "{other:?} is not a streaming request"
        ))),
    };
    let frame = match end {
        Ok(Some(response)) => Frame::Done(Box::new(response)),
        Ok(None) => return,
        Err(failure) => Frame::Failed(failure),
    };
    let _ = frames.send(frame);
}

/// Runs `work`, which writes its output to the sender it is given, and
/// sends each piece as an `output` frame as it comes; `None` when the
/// client hung up.
pub(crate) async fn forward_output<T, Work>(
    frames: &UnboundedSender<Frame>,
    work: impl FnOnce(UnboundedSender<voodu_runtime::ExecOutput>) -> Work,
) -> Result<Option<T>, Failure>
where
    Work: std::future::Future<Output = Result<T, Failure>>,
{
    let forward = |piece: voodu_runtime::ExecOutput| {
        let output = voodu_api::ExecOutput {
            stderr: piece.stderr,
            text: String::from_utf8_lossy(&piece.bytes).into_owned(),
        };
        frames.send(Frame::Output(output)).is_ok()
    };
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let ended = {
        let work = work(sender);
        tokio::pin!(work);
        loop {
            tokio::select! {
                ended = &mut work => break ended?,
                Some(piece) = receiver.recv() => {
                    if !forward(piece) {
                        return Ok(None);
                    }
                }
            }
        }
    };
    // What came after the last look at the output (the work dropped its
    // sender when it ended).
    while let Ok(piece) = receiver.try_recv() {
        if !forward(piece) {
            return Ok(None);
        }
    }
    Ok(Some(ended))
}

/// `vd run`: runs the stored job (or cronjob) `scope/name` once on this
/// node, what it writes sent as `output` frames; answered with how it
/// ended. The client hanging up does not stop the run.
async fn run(
    controller: &Controller,
    scope: &str,
    name: &str,
    kind: Option<voodu_plugin_abi::messages::WorkloadKind>,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Err(Failure::new(
            "this controller runs without Docker (--no-docker), so it runs no jobs",
        ));
    };
    let kinds = match kind {
        Some(kind) if kind.runs_to_completion() => vec![kind],
        Some(kind) => {
            return Err(Failure::new(format!(
                "{kind}/{scope}/{name}: a {kind} runs its replicas all the time; vd run runs a job or a cronjob — vd restart {kind}/{scope}/{name} replaces its replicas"
            )))
        }
        None => vec![voodu_plugin_abi::messages::WorkloadKind::Job, voodu_plugin_abi::messages::WorkloadKind::Cronjob],
    };
    let mut found = None;
    for kind in kinds {
        let workload = WorkloadId::new(kind, scope, name);
        let stored = controller
            .store()
            .workload(&workload)
            .map_err(|error| Failure::new(error.to_string()))?;
        if stored.is_some() {
            found = Some(workload);
            break;
        }
    }
    let Some(workload) = found else {
        return Err(Failure::new(format!(
            "{scope}/{name}: no job or cronjob of that name is stored — vd get jobs lists them; apply one first (job \"{scope}\" \"{name}\" {{ image = \"...\" command = [...] }})"
        )));
    };
    // The run goes on when the client hangs up: it runs on a task of its
    // own, and its output is dropped once nobody reads it.
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let task = {
        let reconciler = reconciler.clone();
        let workload = workload.clone();
        tokio::spawn(async move {
            reconciler
                .run_job(
                    &workload,
                    voodu_model::job::RunTrigger::Manual,
                    Some(&sender),
                )
                .await
        })
    };
    let outcome = forward_output(frames, |relay| async move {
        while let Some(piece) = receiver.recv().await {
            if relay.send(piece).is_err() {
                break;
            }
        }
        task.await
            .map_err(|error| Failure::new(format!("{workload}: the run's task failed: {error}")))?
            .map_err(|error| Failure::new(format!("{workload}: {error}")))
            .map(|outcome| (workload, outcome))
    })
    .await?;
    let Some((workload, outcome)) = outcome else {
        return Ok(None);
    };
    Ok(Some(Response::RunEnded {
        ending: outcome.ending(),
        workload,
        run_id: outcome.run_id,
        container: outcome.container_name,
        exit_code: outcome.exit_code,
    }))
}

/// The reasons of stored events a wait shows as finished steps. A failed
/// pass (`converge-failed`) is not among them: the wait's answer names it,
/// once, as its error.
fn shown_while_waiting(notice: &Notice) -> bool {
    matches!(
        notice.reason,
        EventReason::Replica
            | EventReason::Restarted
            | EventReason::Died
            | EventReason::OomKilled
            | EventReason::CreateFailed
            | EventReason::Adopted
            | EventReason::DrainUnfinished
            | EventReason::PublishFailed
            | EventReason::ForgetFailed
            | EventReason::OrphansRemoved
            | EventReason::Step
    )
}

fn progress_of(notice: &Notice) -> ApplyProgress {
    let workload = notice.workload.clone();
    let message = notice.message.clone();
    if notice.event_id.is_none() {
        ApplyProgress::Step { workload, message }
    } else if notice.level == EventLevel::Info {
        ApplyProgress::Runtime { workload, message }
    } else {
        ApplyProgress::Warning { workload, message }
    }
}

/// What one workload of a wait is waiting for.
struct Waited {
    ticket: u64,
    done: Option<WaitedWorkload>,
}

/// This node's own end of a wait: its passes of `workloads` alone (a
/// peer's wait, and the whole of one without a cluster).
pub(crate) async fn wait_here(
    controller: &Controller,
    workloads: &[WorkloadId],
    since_event: Option<i64>,
    timeout_ms: Option<u64>,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let Some(reconciler) = controller.reconciler().cloned() else {
        // Without Docker nothing runs, so everything stored has converged.
        return Ok(Some(Response::Waited(WaitReport {
            workloads: workloads
                .iter()
                .map(|id| WaitedWorkload {
                    workload: id.clone(),
                    phase: voodu_api::Phase::Converged,
                })
                .collect(),
            ..Default::default()
        })));
    };
    // Each workload's stored revision (0: deleted): a wait follows that
    // one. A workload the store never had, nor deleted, is no workload.
    let mut revisions: HashMap<&WorkloadId, i64> = HashMap::new();
    {
        let store = controller.store();
        let failure = |error: voodu_store::StoreError| Failure::new(error.to_string());
        for id in workloads {
            let revision = match store.workload(id).map_err(failure)? {
                Some(stored) => stored.revision,
                None if store.tombstone(id).map_err(failure)?.is_some() => 0,
                None => return Err(crate::not_found(id)),
            };
            revisions.insert(id, revision);
        }
    }
    let wanted: HashSet<&WorkloadId> = workloads.iter().collect();
    let mut notices = controller.activity().subscribe();
    let mut changes = reconciler.status_changes();
    let mut report = WaitReport::default();
    let mut last_replayed = 0;
    let take = |notice: &Notice, report: &mut WaitReport| {
        if !wanted.contains(&notice.workload) || !shown_while_waiting(notice) {
            return;
        }
        if notice.event_id.is_some() && notice.level != EventLevel::Info {
            report.warnings.push(Diagnostic::for_workload(
                &notice.workload,
                notice.message.clone(),
                None,
            ));
        }
        let _ = frames.send(Frame::Progress(progress_of(notice)));
    };
    if let Some(since) = since_event {
        let replay = controller
            .store()
            .events_after(None, since, REPLAY_LIMIT)
            .map_err(|error| Failure::new(error.to_string()))?;
        for (workload, event) in &replay {
            last_replayed = last_replayed.max(event.id);
            take(&Notice::stored(workload, event), &mut report);
        }
    }
    // A live notice, unless the replay above already showed it.
    let take_live = |notice: &Notice, report: &mut WaitReport| {
        if notice.event_id.is_none_or(|id| id > last_replayed) {
            take(notice, report);
        }
    };
    // A step begun before this wait subscribed is not on the stream: show
    // the one in progress from the status board (a step after the
    // subscription may then be shown twice, never not at all), if it is
    // of the revision this wait follows, not an earlier rollout's.
    for id in workloads {
        if let Some((status, _)) = reconciler.status(id) {
            let current = revisions.get(id) == Some(&status.revision);
            if let (Phase::Progressing, Some(step), true) = (status.phase, status.step, current) {
                let _ = frames.send(Frame::Progress(ApplyProgress::Step {
                    workload: id.clone(),
                    message: step,
                }));
            }
        }
    }
    let mut waited: HashMap<WorkloadId, Waited> = workloads
        .iter()
        .map(|id| {
            (
                id.clone(),
                Waited {
                    // Following an apply, delete or rollback, which queued
                    // a pass once it had stored: that pass answers (one
                    // more would only repeat its steps and failures).
                    // Otherwise a fresh pass.
                    ticket: since_event
                        .and_then(|_| reconciler.last_ticket(id))
                        .unwrap_or_else(|| reconciler.enqueue(id)),
                    done: None,
                },
            )
        })
        .collect();
    let deadline = timeout_ms.map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    loop {
        settle(&reconciler, &mut waited, &mut report);
        if waited.values().all(|w| w.done.is_some()) {
            // A pass records its events before it settles, so every step
            // of the settling pass is already queued here: show them all
            // before the answer, or the last lines (`removed replica ..`)
            // could be lost to the race between the two channels.
            loop {
                match notices.try_recv() {
                    Ok(notice) => take_live(&notice, &mut report),
                    Err(TryRecvError::Lagged(_)) => {}
                    Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                }
            }
            for id in workloads {
                if let Some(done) = waited.get_mut(id).and_then(|w| w.done.take()) {
                    report.workloads.push(done);
                }
            }
            return Ok(Some(Response::Waited(report)));
        }
        let sleep = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // Notices first: a step is shown before the settling it led to.
            biased;
            notice = notices.recv() => match notice {
                Ok(notice) => take_live(&notice, &mut report),
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return Err(Failure::new("the controller is shutting down")),
            },
            _ = changes.changed() => {}
            _ = sleep => return Err(timed_out(&reconciler, &waited, timeout_ms.unwrap_or(0))),
            _ = frames.closed() => return Ok(None),
        }
    }
}

/// Marks each workload whose ticket a pass has settled.
fn settle(
    reconciler: &Reconciler,
    waited: &mut HashMap<WorkloadId, Waited>,
    report: &mut WaitReport,
) {
    for (id, entry) in waited.iter_mut() {
        if entry.done.is_some() {
            continue;
        }
        let Some(settled) = reconciler.settled(id) else {
            continue;
        };
        if settled.ticket < entry.ticket {
            continue;
        }
        match settled.phase {
            Phase::Failed => report.errors.push(Diagnostic::for_workload(
                id,
                format!(
                    "stored, but Docker did not converge: {}",
                    settled.error.as_deref().unwrap_or("unknown error")
                ),
                None,
            )),
            Phase::CrashLooping => {
                let crashes: Vec<String> = settled
                    .crashes
                    .iter()
                    .filter(|crash| crash.crash_looping)
                    .map(|crash| {
                        format!(
                            "replica {} died {} times in a row{}{}",
                            crash.replica_id,
                            crash.deaths,
                            crash
                                .last_exit_code
                                .map(|code| format!(", last with exit code {code}"))
                                .unwrap_or_default(),
                            if crash.oom_killed { ", OOM-killed" } else { "" }
                        )
                    })
                    .collect();
                report.errors.push(Diagnostic::for_workload(
                    id,
                    format!(
                        "stored, but crash-looping: {} — the controller keeps restarting it with back-off; `vd describe {id}` shows its events",
                        if crashes.is_empty() { "a replica keeps dying".to_owned() } else { crashes.join("; ") }
                    ),
                    None,
                ));
            }
            _ => {}
        }
        entry.done = Some(WaitedWorkload {
            workload: id.clone(),
            phase: crate::wire::phase(settled.phase),
        });
    }
}

fn timed_out(
    reconciler: &Reconciler,
    waited: &HashMap<WorkloadId, Waited>,
    timeout_ms: u64,
) -> Failure {
    let mut still: Vec<String> = waited
        .iter()
        .filter(|(_, entry)| entry.done.is_none())
        .map(|(id, _)| match reconciler.status(id) {
            Some((status, _)) => match (status.step, status.step_ms) {
                (Some(step), Some(ms)) => format!(
                    "{id} is still {}: {step} ({} so far)",
                    status.phase.as_str(),
                    humantime::format_duration(Duration::from_millis(ms - ms % 1000))
                ),
                _ => format!("{id} is still {}", status.phase.as_str()),
            },
            None => format!("{id} is still pending"),
        })
        .collect();
    still.sort();
    Failure::new(format!(
        "timed out after {}: {} — the rollout goes on in the controller; `vd rollout status` follows it",
        humantime::format_duration(Duration::from_millis(timeout_ms)),
        still.join("; ")
    ))
}

async fn follow_events(
    controller: &Controller,
    workload: Option<&WorkloadId>,
    limit: usize,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let mut notices = controller.activity().subscribe();
    let recent = controller
        .store()
        .recent_events(workload, limit)
        .map_err(|error| Failure::new(error.to_string()))?;
    let mut last = 0;
    for (id, event) in &recent {
        last = last.max(event.id);
        let _ = frames.send(Frame::Notice(wire::notice(&Notice::stored(id, event))));
    }
    loop {
        tokio::select! {
            notice = notices.recv() => match notice {
                Ok(notice) => {
                    let stored_after = notice.event_id.is_some_and(|id| id > last);
                    if stored_after && workload.is_none_or(|w| *w == notice.workload) {
                        let _ = frames.send(Frame::Notice(wire::notice(&notice)));
                    }
                }
                Err(RecvError::Lagged(missed)) => tracing::warn!(missed, "an event follower fell behind"),
                Err(RecvError::Closed) => return Ok(None),
            },
            _ = frames.closed() => return Ok(None),
        }
    }
}

/// Sends every replica's log on this node as `log` frames, interleaved as
/// the lines come; with `follow`, until the client hangs up (it follows the
/// replicas that run when it starts).
pub(crate) async fn logs_here(
    controller: &Controller,
    workload: &WorkloadId,
    only: Option<&str>,
    request: &LogRequest,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let Some(reconciler) = controller.reconciler() else {
        return Err(Failure::new(
            "this controller runs without Docker (--no-docker), so it has no logs",
        ));
    };
    let stored = controller
        .store()
        .workload(workload)
        .map_err(|error| Failure::new(error.to_string()))?;
    let replicas = reconciler
        .replicas_and_runs(Some(workload))
        .await
        .map_err(|error| Failure::new(error.to_string()))?;
    if stored.is_none() && replicas.is_empty() {
        return Err(super::not_found(workload));
    }
    // One replica's, when asked (`vd logs POD`).
    let replicas: Vec<_> = replicas
        .into_iter()
        .filter(|replica| only.is_none_or(|only| replica.replica_id == only))
        .collect();
    let node = controller.node_name();
    let streams = replicas.iter().map(|replica| {
        let replica_id = replica.replica_id.clone();
        reconciler
            .replica_logs(replica, request)
            .map(move |line| (replica_id.clone(), line))
    });
    let mut merged = futures_util::stream::select_all(streams);
    let mut sent = 0;
    loop {
        tokio::select! {
            next = merged.next() => match next {
                Some((replica_id, Ok(line))) => {
                    let line = LogLine { replica_id, line, node: node.clone() };
                    if frames.send(Frame::Log(line)).is_err() {
                        return Ok(None);
                    }
                    sent += 1;
                }
                Some((replica_id, Err(error))) => {
                    tracing::warn!(%error, replica = %replica_id, "a replica's log could not be read");
                }
                None => return Ok(Some(Response::LogsEnded { lines: sent, unanswered: Vec::new() })),
            },
            _ = frames.closed() => return Ok(None),
        }
    }
}

async fn watch_pods(
    controller: &Controller,
    workload: Option<&WorkloadId>,
    frames: &UnboundedSender<Frame>,
) -> Result<Option<Response>, Failure> {
    let Some(reconciler) = controller.reconciler().cloned() else {
        return Err(Failure::new(
            "this controller runs without Docker (--no-docker), so it has no replicas",
        ));
    };
    let mut notices = controller.activity().subscribe();
    let mut known: HashMap<String, voodu_api::Replica> = HashMap::new();
    let send_changes = |replicas: Vec<voodu_api::Replica>,
                        scope: Option<&WorkloadId>,
                        known: &mut HashMap<String, voodu_api::Replica>| {
        let mut seen = HashSet::new();
        for replica in replicas {
            seen.insert(replica.container_id.clone());
            let change = match known.get(&replica.container_id) {
                None => "added",
                Some(before) if before != &replica => "modified",
                Some(_) => continue,
            };
            known.insert(replica.container_id.clone(), replica.clone());
            let _ = frames.send(Frame::Pod(PodChange {
                change: change.into(),
                replica,
            }));
        }
        let gone: Vec<String> = known
            .iter()
            .filter(|(id, replica)| {
                !seen.contains(*id) && scope.is_none_or(|scope| &replica.workload == scope)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some(replica) = known.remove(&id) {
                let _ = frames.send(Frame::Pod(PodChange {
                    change: "removed".into(),
                    replica,
                }));
            }
        }
    };
    let initial = reconciler
        .live_replicas(workload)
        .await
        .map_err(|error| Failure::new(error.to_string()))?;
    send_changes(wire::replicas(&initial), workload, &mut known);
    loop {
        tokio::select! {
            notice = notices.recv() => {
                let changed = match notice {
                    Ok(notice) if workload.is_none_or(|w| *w == notice.workload) => {
                        // A death is shown at once, even if the listing
                        // lags or the replica is restarted before it is read.
                        if let Some((replica_id, action)) = &notice.container_action {
                            if matches!(action.as_str(), "die" | "oom" | "stop") {
                                let dead = known.values_mut().find(|r| {
                                    r.workload == notice.workload
                                        && &r.replica_id == replica_id
                                        && r.is_running()
                                });
                                if let Some(replica) = dead {
                                    replica.state = "exited".into();
                                    let _ = frames.send(Frame::Pod(PodChange {
                                        change: "modified".into(),
                                        replica: replica.clone(),
                                    }));
                                }
                            }
                        }
                        Some(notice.workload)
                    }
                    Ok(_) => None,
                    Err(RecvError::Lagged(_)) => workload.cloned(),
                    Err(RecvError::Closed) => return Ok(None),
                };
                if let Some(changed) = changed {
                    if let Ok(replicas) = reconciler.live_replicas(Some(&changed)).await {
                        send_changes(wire::replicas(&replicas), Some(&changed), &mut known);
                    }
                }
            }
            _ = frames.closed() => return Ok(None),
        }
    }
}
