//! The control loop's triggers from outside an apply: Docker's events for
//! this controller's containers, and the periodic resync.
//!
//! An event is handled at once, without waiting for the workload's pass: a
//! death is recorded (with its exit code, or as an OOM kill), the replica is
//! withdrawn from every block's set, and the workload is queued, so the
//! replica is restarted by the next pass (within its back-off). Deaths the
//! controller caused itself, by removing a replica, are not crashes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use voodu_model::EventReason;

use futures_util::StreamExt;

use super::{event, Reconciler};
use crate::lives::Heard;
use voodu_model::WorkloadId;
use voodu_runtime::RuntimeEvent;
use voodu_store::EventLevel;

impl Reconciler {
    /// Follows the runtime's events. Reconnects with back-off if the stream
    /// ends; after a reconnect every workload gets a pass, in case an event
    /// was missed.
    pub(super) async fn follow_events(self: Arc<Self>) {
        let mut pause = Duration::from_millis(100);
        loop {
            let mut events = self.runtime.events();
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        pause = Duration::from_millis(100);
                        self.on_event(&event).await;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the event stream failed");
                        break;
                    }
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(10));
            self.resync().await;
        }
    }

    /// Handles one container event.
    pub async fn on_event(&self, runtime_event: &RuntimeEvent) {
        // What this event changes is published this long after it is heard.
        let heard_at = std::time::Instant::now();
        let workload = &runtime_event.workload;
        tracing::debug!(%workload, replica = %runtime_event.replica_id, action = %runtime_event.action, "container event");
        let heard = self.lives.heard(runtime_event, tokio::time::Instant::now());
        if let Heard::Crashed { oom } = heard {
            let (reason, message) = if oom {
                (
                    EventReason::OomKilled,
                    format!(
                        "replica {} was killed by the kernel's OOM killer",
                        runtime_event.replica_id
                    ),
                )
            } else {
                (
                    EventReason::Died,
                    match runtime_event.exit_code {
                        Some(code) => {
                            format!(
                                "replica {} died (exit code {code})",
                                runtime_event.replica_id
                            )
                        }
                        None => format!("replica {} died", runtime_event.replica_id),
                    },
                )
            };
            self.record(&[event(workload, EventLevel::Warning, reason, message)]);
        }
        self.activity.send(crate::activity::Notice {
            reason: EventReason::Container,
            container_action: Some((
                runtime_event.replica_id.clone(),
                runtime_event.action.clone(),
            )),
            ..crate::activity::Notice::step(
                workload,
                format!(
                    "container of replica {}: {}",
                    runtime_event.replica_id, runtime_event.action
                ),
            )
        });
        // Withdraw (or add back) at once, whatever the workload's pass is
        // doing.
        let blocks = match self.target(workload) {
            Ok(target) => target.blocks,
            Err(error) => {
                tracing::warn!(%workload, %error, "the workload could not be read after an event");
                Vec::new()
            }
        };
        if let Err(error) = self.observe_and_offer(workload, &blocks, heard_at).await {
            tracing::warn!(%workload, %error, "republish after an event failed");
        }
        let heal = heard != Heard::OnPurpose
            && matches!(
                runtime_event.action.as_str(),
                "die" | "oom" | "stop" | "destroy" | "health_status"
            );
        if heal {
            self.enqueue(workload);
        }
    }

    /// Queues every stored workload, every unfinished deletion, and every
    /// workload of which this controller runs containers but does not store
    /// (a deleted one's leftovers are swept; orphans are reported and left
    /// running, see [`crate::orphans`]).
    pub async fn resync(&self) {
        let mut workloads: BTreeSet<WorkloadId> = BTreeSet::new();
        {
            let store = &self.store;
            match store.workload_ids() {
                Ok(ids) => workloads.extend(ids),
                Err(error) => tracing::error!(%error, "the store could not be read for a resync"),
            }
            match store.deletions() {
                Ok(ids) => workloads.extend(ids),
                Err(error) => {
                    tracing::error!(%error, "the deletions could not be read for a resync")
                }
            }
        }
        match self.replicas(None).await {
            Ok(replicas) => workloads.extend(replicas.into_iter().map(|replica| replica.workload)),
            Err(error) => tracing::warn!(%error, "listing containers for a resync failed"),
        }
        for workload in &workloads {
            self.enqueue(workload);
        }
    }

    /// Replays the store at start-up, then queues everything again every
    /// `every`, so missed events and failed steps are repaired.
    pub(super) async fn keep_resyncing(self: Arc<Self>, every: Duration) {
        loop {
            self.resync().await;
            tokio::time::sleep(every).await;
        }
    }
}
