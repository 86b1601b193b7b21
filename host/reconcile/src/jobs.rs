//! A job's runs. `vd run` and a cronjob's schedule start them
//! ([`Reconciler::run_job`]): each run is a container of its own, made
//! from the job's stored spec (its config buckets laid over its env, as a
//! replica's), which runs to its end or its `timeout` and is kept. Every
//! pass of a job keeps its finished runs within its history limits
//! ([`Reconciler::keep_run_history`]); a deleted job's runs go with it,
//! a running one killed.
//!
//! The schedule ([`Reconciler::schedule_cronjobs`]) looks at the stored
//! cronjobs every second and starts a run for each tick that came since
//! it last looked (never one from before it began to schedule, so a tick
//! runs at most once, on the one node that schedules: the only one, or
//! a cluster's leader).

use std::collections::HashMap;
use std::time::Duration;
use voodu_model::EventReason;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc::UnboundedSender;

use voodu_model::job::{runs_past_history, ConcurrencyPolicy, FinishedRun, RunTrigger};
use voodu_model::WorkloadId;
use voodu_plugin_abi::messages::WorkloadKind;
use voodu_runtime::{ExecOutput, JobRun, JobRunRequest};
use voodu_store::EventLevel;

use super::{event, ReconcileError, Reconciler};

/// How often the schedule looks at the stored cronjobs.
const SCHEDULE_EVERY: Duration = Duration::from_secs(1);

/// How one run of a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The run's id.
    pub run_id: String,
    /// Its container, kept for `vd logs`.
    pub container_name: String,
    /// Its exit code; `None` when it was killed at its timeout.
    pub exit_code: Option<i64>,
    /// The job's timeout, when it has one.
    pub timeout: Option<Duration>,
}

impl RunOutcome {
    /// How it ended, for messages: `exited with code 3`, or `ran past its
    /// timeout of 10m and was killed`.
    pub fn ending(&self) -> String {
        match (self.exit_code, self.timeout) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(timeout)) => format!(
                "ran past its timeout of {} and was killed",
                humantime::format_duration(timeout)
            ),
            (None, None) => "was killed".to_owned(),
        }
    }
}

/// A run's id: when it started, to the second, and four random hex
/// characters (`1206-0405-12-a1f3`), so that its container names sort by
/// time and never collide.
fn new_run_id(now: DateTime<Utc>) -> String {
    format!(
        "{}-{}",
        now.format("%m%d-%H%M%S"),
        voodu_model::naming::new_replica_id(&[])
    )
}

impl Reconciler {
    /// Runs `workload` (a stored job or cronjob) once, to its end or its
    /// timeout, what it writes sent to `output` as it comes; records
    /// `run-started` and `run-finished` (or `run-failed`), and queues a
    /// pass that keeps the history within its limits.
    pub async fn run_job(
        &self,
        workload: &WorkloadId,
        trigger: RunTrigger,
        output: Option<&UnboundedSender<ExecOutput>>,
    ) -> Result<RunOutcome, ReconcileError> {
        let target = self.target(workload)?;
        let (Some(core), false) = (target.core.as_ref(), target.deleted) else {
            return Err(ReconcileError::NotRunnable(format!(
                "{workload}: not stored — apply it first (vd apply -f FILE)"
            )));
        };
        let Some(job) = core.job.as_ref() else {
            return Err(ReconcileError::NotRunnable(format!(
                "{workload}: a {} runs its replicas all the time; vd run runs a job or a cronjob",
                workload.kind
            )));
        };
        self.ensure_built_image(workload, core).await?;
        self.runtime.ensure_network().await?;
        let run_id = new_run_id(Utc::now());
        let spec = self.replica_spec(workload, core, &target, run_id.clone());
        let request = JobRunRequest {
            run_id: run_id.clone(),
            trigger,
            timeout: job.timeout,
        };
        let by = match trigger {
            RunTrigger::Manual => "by vd run".to_owned(),
            RunTrigger::Schedule { tick } => format!(
                "on its schedule, for the tick of {}",
                DateTime::from_timestamp(tick, 0)
                    .map_or_else(|| tick.to_string(), |at| at.to_rfc3339())
            ),
        };
        self.record(&[event(
            workload,
            EventLevel::Info,
            EventReason::RunStarted,
            format!("run {run_id} started {by}"),
        )]);
        let ended = self.runtime.run_job(&spec, &request, output).await;
        self.enqueue(workload);
        let end = match ended {
            Ok(end) => end,
            Err(error) => {
                self.record(&[event(
                    workload,
                    EventLevel::Error,
                    EventReason::RunFailed,
                    format!("run {run_id} could not run: {error}"),
                )]);
                return Err(error.into());
            }
        };
        let outcome = RunOutcome {
            run_id,
            container_name: end.container_name,
            exit_code: end.exit_code,
            timeout: job.timeout,
        };
        let (level, reason) = if outcome.exit_code == Some(0) {
            (EventLevel::Info, EventReason::RunFinished)
        } else {
            (EventLevel::Error, EventReason::RunFailed)
        };
        self.record(&[event(
            workload,
            level,
            reason,
            format!(
                "run {} {} — vd logs {} shows its output",
                outcome.run_id,
                outcome.ending(),
                outcome.container_name
            ),
        )]);
        Ok(outcome)
    }

    /// The runs of `workload` on this node, or of every job, oldest first.
    pub async fn job_runs(
        &self,
        workload: Option<&WorkloadId>,
    ) -> Result<Vec<JobRun>, ReconcileError> {
        Ok(self.runtime.job_runs(workload).await?)
    }

    /// Keeps a job's finished runs within its history limits, removing
    /// the oldest past them; a job no longer stored loses every run made
    /// for this store (a running one is killed). Called by every pass of
    /// a job; a failure is logged, and the next pass tries again.
    pub(super) async fn keep_run_history(&self, workload: &WorkloadId) {
        let runs = match self.runtime.job_runs(Some(workload)).await {
            Ok(runs) => runs,
            Err(error) => {
                tracing::warn!(%workload, %error, "the job's runs could not be listed");
                return;
            }
        };
        let stored = match self.store.workload(workload) {
            Ok(stored) => stored,
            Err(error) => {
                tracing::warn!(%workload, %error, "the job could not be read");
                return;
            }
        };
        let past: Vec<&JobRun> = match stored.and_then(|stored| stored.core_spec.job) {
            Some(job) => {
                let finished: Vec<FinishedRun<usize>> = runs
                    .iter()
                    .enumerate()
                    .filter(|(_, run)| run.is_finished())
                    .map(|(at, run)| FinishedRun {
                        id: at,
                        created: run.created,
                        succeeded: run.exit_code == Some(0),
                    })
                    .collect();
                runs_past_history(
                    &finished,
                    job.successful_history_limit,
                    job.failed_history_limit,
                )
                .into_iter()
                .map(|at| &runs[at])
                .collect()
            }
            // Deleted: its runs go, never another store's.
            None => runs
                .iter()
                .filter(|run| run.store_id.as_deref().is_none_or(|id| id == self.store_id))
                .collect(),
        };
        for run in past {
            match self.runtime.remove_job_run(run).await {
                Ok(()) => {
                    tracing::debug!(%workload, run = %run.container_name, "removed a run past the history")
                }
                Err(error) => {
                    tracing::warn!(%workload, run = %run.container_name, %error, "a run past the history could not be removed")
                }
            }
        }
    }

    /// Starts the runs of every stored cronjob's ticks, for as long as the
    /// controller runs, while this node schedules (in a cluster, only its
    /// leader does). Ticks are only those after
    /// the schedule first saw the cronjob (or this node began to
    /// schedule), so none runs twice and none from the past.
    pub(super) async fn schedule_cronjobs(self: std::sync::Arc<Self>) {
        // The last moment each cronjob's ticks were considered up to.
        let mut considered: HashMap<WorkloadId, DateTime<Utc>> = HashMap::new();
        loop {
            tokio::time::sleep(SCHEDULE_EVERY).await;
            if !self.schedules_cronjobs() {
                considered.clear();
                continue;
            }
            let now = Utc::now();
            let cronjobs = match self.store.workloads(Some(WorkloadKind::Cronjob)) {
                Ok(stored) => stored,
                Err(error) => {
                    tracing::warn!(%error, "the cronjobs could not be read; the schedule looks again");
                    continue;
                }
            };
            let mut seen = Vec::new();
            for stored in cronjobs {
                let Some(cron) = stored
                    .core_spec
                    .job
                    .as_ref()
                    .and_then(|job| job.cron.clone())
                else {
                    continue;
                };
                let workload = stored.id.clone();
                seen.push(workload.clone());
                let since = *considered.entry(workload.clone()).or_insert(now);
                considered.insert(workload.clone(), now);
                if cron.suspend {
                    continue;
                }
                // The latest tick in (since, now]; earlier ones missed in
                // the same second are the same run.
                let mut due = None;
                let mut at = since;
                while let Some(tick) = cron.next_tick_after(at) {
                    if tick > now {
                        break;
                    }
                    due = Some(tick);
                    at = tick;
                }
                let Some(tick) = due else {
                    continue;
                };
                let reconciler = self.clone();
                tokio::spawn(async move {
                    reconciler
                        .run_on_schedule(&workload, tick.timestamp(), cron.concurrency_policy)
                        .await;
                });
            }
            considered.retain(|workload, _| seen.contains(workload));
        }
    }

    /// Starts one scheduled run of a cronjob, as its concurrency policy
    /// allows: `Forbid` skips the tick while a run is running, `Replace`
    /// removes the running ones first.
    async fn run_on_schedule(&self, workload: &WorkloadId, tick: i64, policy: ConcurrencyPolicy) {
        if policy != ConcurrencyPolicy::Allow {
            let running: Vec<JobRun> = match self.runtime.job_runs(Some(workload)).await {
                Ok(runs) => runs.into_iter().filter(|run| !run.is_finished()).collect(),
                Err(error) => {
                    tracing::warn!(%workload, %error, "the cronjob's runs could not be listed; the tick is skipped");
                    return;
                }
            };
            if !running.is_empty() {
                let names: Vec<&str> = running.iter().map(|run| run.run_id.as_str()).collect();
                if policy == ConcurrencyPolicy::Forbid {
                    self.record(&[event(
                        workload,
                        EventLevel::Warning,
                        EventReason::RunSkipped,
                        format!(
                            "a scheduled run was skipped: run {} still runs, and concurrency_policy is \"Forbid\"",
                            names.join(", ")
                        ),
                    )]);
                    return;
                }
                for run in &running {
                    if let Err(error) = self.runtime.remove_job_run(run).await {
                        tracing::warn!(%workload, %error, run = %run.run_id, "a run to replace could not be removed");
                    }
                }
                self.record(&[event(
                    workload,
                    EventLevel::Info,
                    EventReason::RunReplaced,
                    format!(
                        "run {} was stopped for the next scheduled run (concurrency_policy \"Replace\")",
                        names.join(", ")
                    ),
                )]);
            }
        }
        if let Err(error) = self
            .run_job(workload, RunTrigger::Schedule { tick }, None)
            .await
        {
            tracing::warn!(%workload, %error, "a scheduled run failed to start");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_sort_by_their_start_and_say_how_a_run_ended() {
        let early = new_run_id("2026-12-06T04:05:12Z".parse().unwrap());
        let late = new_run_id("2026-12-06T04:05:13Z".parse().unwrap());
        assert!(early.starts_with("1206-040512-"), "{early}");
        assert!(early < late);
        let timed_out = RunOutcome {
            run_id: early,
            container_name: "prod-seed.run-x".into(),
            exit_code: None,
            timeout: Some(Duration::from_secs(2)),
        };
        assert_eq!(
            timed_out.ending(),
            "ran past its timeout of 2s and was killed"
        );
    }
}
