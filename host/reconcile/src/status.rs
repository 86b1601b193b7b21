//! Where each workload's reconcile stands, for `vd apply`'s wait, `vd
//! rollout status` and `vd describe`.
//!
//! Every trigger takes a ticket ([`StatusBoard::request`]); a reconcile pass
//! takes the newest ticket when it starts ([`StatusBoard::begin`]) and
//! settles it when it ends. A waiter holding ticket `t` is answered by the
//! first pass that settles a ticket `>= t`: that pass started after the
//! trigger, so it saw everything stored before it. Waiters are woken through
//! a `watch` channel; the board's lock is held only to read or write an
//! entry.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::restarts::CrashRecord;
use voodu_model::WorkloadId;

/// Where a workload's reconcile stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Phase {
    /// Waiting for its first pass.
    Pending,
    /// A pass is taking steps.
    Progressing,
    /// The containers match the stored revision.
    Converged,
    /// The last pass failed; it is retried with back-off.
    Failed,
    /// A replica keeps dying; it is restarted with back-off.
    CrashLooping,
    /// Deleted, and its replicas and blocks are gone.
    Gone,
}

impl Phase {
    /// How messages and JSON name the phase: `crash-looping`, one spelling.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One workload's reconcile status, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadStatus {
    /// Where it stands.
    pub phase: Phase,
    /// The stored revision the last pass worked towards (0: deleted).
    pub revision: i64,
    /// The step in progress, for a progressing pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// How long the step has been running, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms: Option<u64>,
    /// Why the last pass failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Replicas that have died, with their exit codes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crashes: Vec<CrashRecord>,
}

/// How the newest settled pass of a workload ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The newest ticket it answered.
    pub ticket: u64,
    /// How it ended.
    pub phase: Phase,
    /// Why it failed.
    pub error: Option<String>,
    /// Replicas that have died.
    pub crashes: Vec<CrashRecord>,
}

#[derive(Debug, Clone)]
struct Tracked {
    requested: u64,
    settled: Settled,
    status: WorkloadStatus,
    step_since: Option<Instant>,
}

/// The status of every workload this controller reconciles.
#[derive(Debug)]
pub struct StatusBoard {
    tracked: Mutex<HashMap<WorkloadId, Tracked>>,
    changed: watch::Sender<u64>,
}

impl Default for StatusBoard {
    fn default() -> Self {
        StatusBoard {
            tracked: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
        }
    }
}

impl StatusBoard {
    fn bump(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    fn entry<'a>(
        tracked: &'a mut HashMap<WorkloadId, Tracked>,
        id: &WorkloadId,
    ) -> &'a mut Tracked {
        tracked.entry(id.clone()).or_insert_with(|| Tracked {
            requested: 0,
            settled: Settled {
                ticket: 0,
                phase: Phase::Pending,
                error: None,
                crashes: Vec::new(),
            },
            status: WorkloadStatus {
                phase: Phase::Pending,
                revision: 0,
                step: None,
                step_ms: None,
                error: None,
                crashes: Vec::new(),
            },
            step_since: None,
        })
    }

    /// A trigger for `id`: returns the ticket a pass must settle to answer
    /// it.
    pub fn request(&self, id: &WorkloadId) -> u64 {
        let mut tracked = self.tracked.lock();
        let entry = Self::entry(&mut tracked, id);
        entry.requested += 1;
        entry.requested
    }

    /// The newest ticket requested for `id`, if any: the one a pass that
    /// begins from now on settles.
    pub fn last_requested(&self, id: &WorkloadId) -> Option<u64> {
        self.tracked
            .lock()
            .get(id)
            .map(|entry| entry.requested)
            .filter(|requested| *requested > 0)
    }

    /// A pass of `id` starts, working towards `revision`: returns the ticket
    /// it will settle.
    pub fn begin(&self, id: &WorkloadId, revision: i64) -> u64 {
        let ticket = {
            let mut tracked = self.tracked.lock();
            let entry = Self::entry(&mut tracked, id);
            entry.status.revision = revision;
            entry.requested
        };
        self.bump();
        ticket
    }

    /// The pass of `id` is taking a step.
    pub fn step(&self, id: &WorkloadId, revision: i64, step: impl Into<String>) {
        {
            let mut tracked = self.tracked.lock();
            let entry = Self::entry(&mut tracked, id);
            entry.status.phase = Phase::Progressing;
            entry.status.revision = revision;
            entry.status.step = Some(step.into());
            entry.status.error = None;
            entry.step_since = Some(Instant::now());
        }
        self.bump();
    }

    /// The pass of `id` ended with `phase`, answering tickets up to
    /// `ticket`.
    pub fn settle(
        &self,
        id: &WorkloadId,
        ticket: u64,
        phase: Phase,
        error: Option<String>,
        crashes: Vec<CrashRecord>,
    ) {
        {
            let mut tracked = self.tracked.lock();
            let entry = Self::entry(&mut tracked, id);
            entry.settled = Settled {
                ticket: entry.settled.ticket.max(ticket),
                phase,
                error: error.clone(),
                crashes: crashes.clone(),
            };
            entry.status.phase = phase;
            entry.status.step = None;
            entry.status.error = error;
            entry.status.crashes = crashes;
            entry.step_since = None;
        }
        self.bump();
    }

    /// The status of `id` and the newest ticket settled, if it is known.
    pub fn get(&self, id: &WorkloadId) -> Option<(WorkloadStatus, u64)> {
        let tracked = self.tracked.lock();
        tracked.get(id).map(|entry| {
            let mut status = entry.status.clone();
            status.step_ms = entry
                .step_since
                .map(|since| u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX));
            (status, entry.settled.ticket)
        })
    }

    /// How the newest settled pass of `id` ended, if one has.
    pub fn settled(&self, id: &WorkloadId) -> Option<Settled> {
        self.tracked
            .lock()
            .get(id)
            .map(|entry| entry.settled.clone())
    }

    /// Forgets a workload that is gone and has no waiter left.
    pub fn remove(&self, id: &WorkloadId) {
        self.tracked.lock().remove(id);
    }

    /// A receiver that changes whenever any status does.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voodu_plugin_abi::messages::WorkloadKind;

    #[test]
    fn a_ticket_is_answered_only_by_a_pass_that_began_after_it() {
        let board = StatusBoard::default();
        let esl = WorkloadId::new(WorkloadKind::Deployment, "prod", "esl");
        let first = board.request(&esl);
        let pass = board.begin(&esl, 1);
        assert_eq!(pass, first);
        // A trigger during the pass gets a later ticket...
        let second = board.request(&esl);
        board.settle(&esl, pass, Phase::Converged, None, Vec::new());
        let (status, settled) = board.get(&esl).unwrap();
        assert_eq!(status.phase, Phase::Converged);
        assert!(settled >= first);
        // ...which the finished pass does not answer.
        assert!(settled < second);
        let next = board.begin(&esl, 2);
        board.step(&esl, 2, "draining replica a1");
        let (status, _) = board.get(&esl).unwrap();
        assert_eq!(status.phase, Phase::Progressing);
        assert_eq!(status.step.as_deref(), Some("draining replica a1"));
        assert!(status.step_ms.is_some());
        board.settle(&esl, next, Phase::Converged, None, Vec::new());
        assert!(board.get(&esl).unwrap().1 >= second);
    }
}
