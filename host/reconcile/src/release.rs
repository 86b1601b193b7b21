//! voodu's `release` hooks at run time: `pre_command` and `command` run
//! once per release (a new container hash), before the first replica of
//! it is created, in a one-shot container of the new image with the
//! replicas' env; one that fails stops the rollout there, so the old
//! replicas keep serving, and the next pass tries again. `post_command`
//! runs once the rollout has converged; its failure is a warning.
//!
//! What ran is kept in memory: after a controller restart, the first
//! replica a pass creates of a release runs its commands again (voodu asks
//! them to be idempotent), and a `post_command` runs only for a release
//! whose commands ran in this process.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use voodu_model::container::{InitStep, Release};
use voodu_model::resources::Resources;
use voodu_model::{CoreSpec, WorkloadId};
use voodu_runtime::ReplicaSpec;
use voodu_store::EventLevel;

use super::converge::Target;
use super::{event, ReconcileError, Reconciler};

/// Which release of each workload ran its commands, and whether its
/// `post_command` ran.
#[derive(Debug, Default)]
pub struct Releases {
    ran: Mutex<HashMap<WorkloadId, (String, bool)>>,
    /// One lock per workload, held while its release commands run: a
    /// batch creates replicas in parallel, and only the first runs them.
    running: Mutex<HashMap<WorkloadId, Arc<tokio::sync::Mutex<()>>>>,
}

impl Releases {
    fn lock_of(&self, workload: &WorkloadId) -> Arc<tokio::sync::Mutex<()>> {
        self.running
            .lock()
            .entry(workload.clone())
            .or_default()
            .clone()
    }

    fn ran_for(&self, workload: &WorkloadId, hash: &str) -> bool {
        self.ran
            .lock()
            .get(workload)
            .is_some_and(|(ran, _)| ran == hash)
    }

    fn mark(&self, workload: &WorkloadId, hash: &str) {
        self.ran
            .lock()
            .insert(workload.clone(), (hash.to_owned(), false));
    }

    /// Whether `post_command` is due for this release: its commands ran
    /// in this process and its post command has not; marks it run.
    fn take_post(&self, workload: &WorkloadId, hash: &str) -> bool {
        match self.ran.lock().get_mut(workload) {
            Some((ran, post_done)) if ran == hash && !*post_done => {
                *post_done = true;
                true
            }
            _ => false,
        }
    }
}

impl Reconciler {
    /// Runs the release's `pre_command` and `command` before the first
    /// replica of a release is created, unless they ran already. A release
    /// is a container hash (`release_key`): a `vd restart`, which replaces
    /// the replicas of the same spec, runs no release again.
    pub(super) async fn release_before_create(
        &self,
        workload: &WorkloadId,
        replica: &ReplicaSpec,
        release: &Release,
        release_key: &str,
    ) -> Result<(), ReconcileError> {
        if self.releases.ran_for(workload, release_key) {
            return Ok(());
        }
        let lock = self.releases.lock_of(workload);
        let _running = lock.lock().await;
        // Another replica of the batch may have run them meanwhile.
        if self.releases.ran_for(workload, release_key) {
            return Ok(());
        }
        for (name, command) in [
            ("pre_command", &release.pre_command),
            ("command", &release.command),
        ] {
            if command.is_empty() {
                continue;
            }
            if let Err(failure) = self
                .run_release_step(replica, release, name, command)
                .await?
            {
                let message = format!(
                    "release {name} {failure}; the rollout stopped before any new replica, and the old replicas keep serving"
                );
                self.record(&[event(
                    workload,
                    EventLevel::Error,
                    "release-failed",
                    message.clone(),
                )]);
                return Err(ReconcileError::Release(message));
            }
            self.record(&[event(
                workload,
                EventLevel::Info,
                "release",
                format!("release {name} finished"),
            )]);
        }
        self.releases.mark(workload, release_key);
        Ok(())
    }

    /// Runs the release's `post_command` once its rollout has converged,
    /// if its commands ran in this process; a failure is a warning. Every
    /// converged pass asks, so the replica spec is built only when one is
    /// due.
    pub(super) async fn release_after_converged(
        &self,
        workload: &WorkloadId,
        core: &CoreSpec,
        target: &Target,
    ) -> Result<(), ReconcileError> {
        let Some(release) = &core.release else {
            return Ok(());
        };
        if release.post_command.is_empty()
            || !self
                .releases
                .take_post(workload, &super::container_spec_hash(core))
        {
            return Ok(());
        }
        let replica = &self.replica_spec(workload, core, target, String::new());
        let (level, message) = match self
            .run_release_step(replica, release, "post_command", &release.post_command)
            .await?
        {
            Ok(()) => (EventLevel::Info, "release post_command finished".to_owned()),
            Err(failure) => (
                EventLevel::Warning,
                format!("release post_command {failure}; the rollout stands"),
            ),
        };
        self.record(&[event(workload, level, "release", message)]);
        Ok(())
    }

    /// Runs one release command as a one-shot container; `Err` with how it
    /// failed.
    async fn run_release_step(
        &self,
        replica: &ReplicaSpec,
        release: &Release,
        name: &str,
        command: &[String],
    ) -> Result<Result<(), String>, ReconcileError> {
        let mut spec = replica.clone();
        spec.replica_id = "release".to_owned();
        let step = InitStep {
            name: name.replace('_', "-"),
            command: command.to_vec(),
            image: None,
            timeout: release.timeout,
            retries: 0,
            resources: Resources::default(),
            ulimits: None,
            docker_options: None,
        };
        let outcome = self.runtime.run_init(&spec, &step).await?;
        self.keep_only_the_last_failed(&replica.workload, &outcome)
            .await;
        Ok(match outcome.failure(release.timeout) {
            None => Ok(()),
            Some(failure) => Err(failure),
        })
    }
}
