//! The controller's live stream of what happens: every event the store
//! records (applies, drains, publishes, deaths, restarts, ...) and the
//! transient steps of a rollout ("draining replica 5ed8"). `vd apply` and
//! `vd rollout status` follow it while they wait, and `vd events -w` and
//! `vd get pods -w` stream it.
//!
//! It is a bounded broadcast channel: a subscriber that falls more than
//! [`CAPACITY`] notices behind loses the oldest, and is told so by
//! tokio's `Lagged` error; nothing ever blocks the sender.

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use voodu_model::EventReason;

use voodu_model::WorkloadId;
use voodu_store::{Event, EventLevel};

/// How many notices a slow subscriber may fall behind.
pub const CAPACITY: usize = 4096;

/// One thing that happened to a workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// The workload it concerns.
    pub workload: WorkloadId,
    /// The stored event, or `None` for a transient step that is not stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<i64>,
    /// When, RFC 3339 (stored events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// How serious it is.
    pub level: EventLevel,
    /// Why: [`EventReason::Step`] for a transient step.
    pub reason: EventReason,
    /// What happened, one line.
    pub message: String,
    /// For a container notice: the replica and Docker's action (`die`,
    /// `start`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_action: Option<(String, String)>,
    /// In a cluster, the node that recorded it; absent on one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl Notice {
    /// The notice of a stored event.
    pub fn stored(workload: &WorkloadId, event: &Event) -> Notice {
        Notice {
            workload: workload.clone(),
            event_id: Some(event.id),
            at: Some(event.at.clone()),
            level: event.level,
            reason: event.reason.clone(),
            message: event.message.clone(),
            container_action: None,
            node: event.node.clone(),
        }
    }

    /// A transient step of a rollout.
    pub fn step(workload: &WorkloadId, message: impl Into<String>) -> Notice {
        Notice {
            workload: workload.clone(),
            event_id: None,
            at: None,
            level: EventLevel::Info,
            reason: EventReason::Step,
            message: message.into(),
            container_action: None,
            node: None,
        }
    }
}

/// The sending side, cheap to clone.
#[derive(Debug, Clone)]
pub struct ActivityBus {
    sender: broadcast::Sender<Notice>,
}

impl Default for ActivityBus {
    fn default() -> Self {
        ActivityBus {
            sender: broadcast::channel(CAPACITY).0,
        }
    }
}

impl ActivityBus {
    /// Sends a notice to every subscriber; none listening is fine.
    pub fn send(&self, notice: Notice) {
        let _ = self.sender.send(notice);
    }

    /// A new subscriber, hearing notices sent from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.sender.subscribe()
    }
}
