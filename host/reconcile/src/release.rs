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
use voodu_model::EventReason;

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
    running: super::keyed_locks::KeyedLocks<WorkloadId>,
}

impl Releases {
    fn lock_of(&self, workload: &WorkloadId) -> Arc<tokio::sync::Mutex<()>> {
        self.running.of(workload)
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

    /// Marks the release `hash` of `workload` ran, its `post_command`
    /// held back until [`Releases::arm_post`].
    fn mark_held(&self, workload: &WorkloadId, hash: &str) {
        self.ran
            .lock()
            .insert(workload.clone(), (hash.to_owned(), true));
    }

    /// Lets the `post_command` of the release that ran last run once its
    /// rollout converged.
    fn arm_post(&self, workload: &WorkloadId) {
        if let Some((_, post_done)) = self.ran.lock().get_mut(workload) {
            *post_done = false;
        }
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
        self.run_release_commands(
            workload,
            replica,
            release,
            "the rollout stopped before any new replica, and the old replicas keep serving",
        )
        .await?;
        self.releases.mark(workload, release_key);
        Ok(())
    }

    /// `vd release run`: runs the stored workload's release `pre_command`
    /// and `command` now, whether or not they ran for its current spec,
    /// and marks them ran for it, so the rolling restart that follows
    /// runs them no more on this node. Its `post_command` waits for
    /// [`Reconciler::release_restarted`]: a pass before the restart is
    /// stored must not take the old replicas for the release's. Returns
    /// how many commands ran.
    pub async fn run_release_now(&self, workload: &WorkloadId) -> Result<usize, ReconcileError> {
        let target = self.target(workload)?;
        let Some(core) = target.core.as_ref() else {
            return Err(ReconcileError::NotRunnable(format!(
                "{workload} is not stored — apply its manifest first"
            )));
        };
        let Some(release) = &core.release else {
            return Err(ReconcileError::NotRunnable(format!(
                "{workload} has no release block — add release {{ command = [\"...\"] }} to it, or replace its replicas with vd restart {workload}"
            )));
        };
        let replica = self.replica_spec(workload, core, &target, String::new());
        self.ensure_built_image(workload, core).await?;
        let lock = self.releases.lock_of(workload);
        let _running = lock.lock().await;
        let ran = self
            .run_release_commands(workload, &replica, release, "no replica was replaced")
            .await?;
        self.releases.mark_held(workload, &core.container_hash());
        Ok(ran)
    }

    /// The restart that follows `vd release run` is stored: the release's
    /// `post_command` runs once its replicas are replaced.
    pub fn release_restarted(&self, workload: &WorkloadId) {
        self.releases.arm_post(workload);
    }

    /// Runs `pre_command` then `command` (those written), each recorded
    /// as an event; the first that fails stops them, recorded with
    /// `consequence`, and is the error. Returns how many ran.
    async fn run_release_commands(
        &self,
        workload: &WorkloadId,
        replica: &ReplicaSpec,
        release: &Release,
        consequence: &str,
    ) -> Result<usize, ReconcileError> {
        let mut ran = 0;
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
                let message = format!("release {name} {failure}; {consequence}");
                self.record(&[event(
                    workload,
                    EventLevel::Error,
                    EventReason::ReleaseFailed,
                    message.clone(),
                )]);
                return Err(ReconcileError::Release(message));
            }
            self.record(&[event(
                workload,
                EventLevel::Info,
                EventReason::Release,
                format!("release {name} finished"),
            )]);
            ran += 1;
        }
        Ok(ran)
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
            || !self.releases.take_post(workload, &core.container_hash())
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
        self.record(&[event(workload, level, EventReason::Release, message)]);
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
