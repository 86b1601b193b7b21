//! From the controller's own state to the API's types ([`voodu_api`]): the
//! one place where a store, runtime, reconciler or plugin-host type turns
//! into what crosses the socket.

use voodu_api as api;
use voodu_model::secrets::redacted;
use voodu_plugin_host::handle::Health;
use voodu_plugin_host::{LoadFailure, PluginHandle};
use voodu_reconcile::activity::Notice;
use voodu_reconcile::restarts::CrashRecord;
use voodu_reconcile::status::{Phase, WorkloadStatus};
use voodu_runtime::Replica;
use voodu_store::{Event, Publication, Revision, StoredWorkload};

/// A replica as `vd get pods` shows it.
pub fn replica(replica: &Replica) -> api::Replica {
    api::Replica {
        container_id: replica.container_id.clone(),
        container_name: replica.container_name.clone(),
        workload: replica.workload.clone(),
        replica_id: replica.replica_id.clone(),
        node: None,
        spec_hash: replica.spec_hash.clone(),
        state: replica.state.clone(),
        ip: replica.ip.clone(),
        created: replica.created,
        owner: replica.owner.clone(),
        store_id: replica.store_id.clone(),
        health: replica.health.clone(),
        ready: replica.ready,
        last_probe_failure: replica.last_probe_failure.clone(),
        restarts: replica.restarts,
    }
}

/// Replicas as `vd get pods` shows them.
pub fn replicas(replicas: &[Replica]) -> Vec<api::Replica> {
    replicas.iter().map(replica).collect()
}

/// A notice of the activity stream.
pub fn notice(notice: &Notice) -> api::Notice {
    api::Notice {
        workload: notice.workload.clone(),
        event_id: notice.event_id,
        at: notice.at.clone(),
        level: notice.level,
        reason: notice.reason.clone(),
        message: notice.message.clone(),
        container_action: notice.container_action.clone(),
        node: notice.node.clone(),
    }
}

/// A stored event.
pub fn event(event: &Event) -> api::Event {
    api::Event {
        id: event.id,
        at: event.at.clone(),
        level: event.level,
        reason: event.reason.clone(),
        message: event.message.clone(),
        node: event.node.clone(),
    }
}

/// A block's last publication.
pub fn publication(
    publication: &Publication,
    figures: &[voodu_reconcile::tally::BlockFigures],
) -> api::Publication {
    use voodu_reconcile::tally::DrainResult;
    let seen = figures.iter().find(|figures| {
        figures.block_type == publication.block_type && figures.labels == publication.labels
    });
    api::Publication {
        block_type: publication.block_type.clone(),
        labels: publication.labels.clone(),
        generation: publication.generation,
        endpoints: publication.endpoints.clone(),
        at: publication.at.clone(),
        latency_ms: seen
            .and_then(|seen| seen.last_publish_latency)
            .map(|latency| latency.as_secs_f64() * 1000.0),
        last_drain: seen
            .and_then(|seen| seen.last_drain.as_ref())
            .map(|drain| api::LastDrain {
                replica_id: drain.replica_id.clone(),
                outcome: match drain.result {
                    DrainResult::Drained => api::DrainOutcomeKind::Drained,
                    DrainResult::BudgetExhausted => api::DrainOutcomeKind::BudgetExhausted,
                    DrainResult::Failed => api::DrainOutcomeKind::Failed,
                },
                took_ms: u64::try_from(drain.took.as_millis()).unwrap_or(u64::MAX),
                at: humantime::format_rfc3339_millis(drain.at).to_string(),
            }),
    }
}

/// A stored revision.
/// Secrets that reached it through `${NAME}` are shown hidden.
pub fn revision(revision: &Revision) -> api::Revision {
    let (core_spec, blocks) = redacted(&revision.core_spec, &revision.blocks);
    api::Revision {
        revision: revision.revision,
        spec_hash: revision.spec_hash.clone(),
        applied_at: revision.applied_at.clone(),
        core_spec,
        blocks,
        recreated: revision.recreated,
    }
}

/// A stored workload.
/// Secrets that reached it through `${NAME}` are shown hidden.
pub fn stored_workload(workload: &StoredWorkload) -> api::StoredWorkload {
    let (core_spec, blocks) = redacted(&workload.core_spec, &workload.blocks);
    api::StoredWorkload {
        id: workload.id.clone(),
        revision: workload.revision,
        spec_hash: workload.spec_hash.clone(),
        core_spec,
        blocks,
        source: workload.source.clone(),
        created_at: workload.created_at.clone(),
        updated_at: workload.updated_at.clone(),
    }
}

/// A reconcile phase.
pub fn phase(phase: Phase) -> api::Phase {
    match phase {
        Phase::Pending => api::Phase::Pending,
        Phase::Progressing => api::Phase::Progressing,
        Phase::Converged => api::Phase::Converged,
        Phase::Failed => api::Phase::Failed,
        Phase::CrashLooping => api::Phase::CrashLooping,
        Phase::Gone => api::Phase::Gone,
    }
}

fn crash(record: &CrashRecord) -> api::CrashRecord {
    api::CrashRecord {
        replica_id: record.replica_id.clone(),
        deaths: record.deaths,
        last_exit_code: record.last_exit_code,
        oom_killed: record.oom_killed,
        crash_looping: record.crash_looping,
    }
}

/// A workload's reconcile status.
pub fn status(status: &WorkloadStatus) -> api::WorkloadStatus {
    api::WorkloadStatus {
        phase: phase(status.phase),
        revision: status.revision,
        step: status.step.clone(),
        step_ms: status.step_ms,
        error: status.error.clone(),
        crashes: status.crashes.iter().map(crash).collect(),
    }
}

/// A plugin that did not load at start.
pub fn load_failure(failure: &LoadFailure) -> api::LoadFailure {
    api::LoadFailure {
        path: failure.path.clone(),
        error: failure.error.clone(),
    }
}

/// A plugin call, as the API names it.
fn call_kind(call: voodu_plugin_host::PluginCall) -> api::PluginCallKind {
    use voodu_plugin_host::PluginCall;
    match call {
        PluginCall::Init => api::PluginCallKind::Init,
        PluginCall::Validate => api::PluginCallKind::Validate,
        PluginCall::Publish => api::PluginCallKind::Publish,
        PluginCall::Drain => api::PluginCallKind::Drain,
        PluginCall::Forget => api::PluginCallKind::Forget,
        PluginCall::Describe => api::PluginCallKind::Describe,
        PluginCall::DescribeSettings => api::PluginCallKind::DescribeSettings,
        PluginCall::Configure => api::PluginCallKind::Configure,
    }
}

/// The `vd plugins:list` row of a loaded plugin.
pub fn plugin_row(handle: &PluginHandle) -> api::PluginRow {
    let (info, health) = (handle.info(), handle.health());
    let failure = handle.last_failure();
    api::PluginRow {
        calls: handle
            .call_figures()
            .into_iter()
            .map(|figures| api::CallFigures {
                call: call_kind(figures.call),
                calls: figures.calls,
                refused: figures.refused,
                errors: figures.errors,
                p99_ms: figures.p99.as_secs_f64() * 1000.0,
            })
            .collect(),
        last_failure: failure.as_ref().map(|failure| failure.error.clone()),
        last_error: handle.last_error().map(|error| error.error),
        log_lines_dropped: handle.log_lines_dropped(),
        settings: None,
        child_pid: handle.child_pid(),
        out_of_process: info.out_of_process,
        child_restarts: handle.child_restarts(),
        name: info.name.clone(),
        version: info.version.clone(),
        abi: format!("{}.{}", info.abi_major, info.abi_minor),
        kind: info.kind.to_string(),
        path: info.path.clone(),
        health: match health {
            Health::Ready => match &failure {
                Some(failure) => format!("failing in {}", failure.call),
                None => "ready".into(),
            },
            Health::Wedged { stuck_call } => format!("wedged in {stuck_call}"),
            Health::ShutDown => "shut down".into(),
        },
    }
}
