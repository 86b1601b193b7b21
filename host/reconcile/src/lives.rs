//! Each replica's life as this controller sees it, in one place: its deaths
//! and restart back-off ([`Restarts`]), whether Docker has reported it dead
//! (a listing can still say `running` just after a `die`), whether this
//! controller is removing it on purpose (its death is then no crash), and
//! how often the controller restarted it (Docker's own count stays 0: the
//! restart policy is `no`).
//!
//! Each part has its own lock, held only to read or write one entry: never
//! across an engine call, a plugin call or another lock.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::restarts::{CrashRecord, Restarts};
use voodu_runtime::{Replica, RuntimeEvent};

/// What a container event meant for its replica's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// It died by itself (a crash, or the kernel's OOM killer).
    Crashed {
        /// Killed for memory.
        oom: bool,
    },
    /// The controller is removing it on purpose: nothing to heal.
    OnPurpose,
    /// Anything else: a start, a stop, a health change.
    Other,
}

/// Every replica's life, by container id.
#[derive(Debug, Default)]
pub struct ReplicaLives {
    /// Deaths in a row, exit codes and the restart back-off.
    history: Mutex<Restarts>,
    /// Containers Docker reported dead, until they start again.
    dead: Mutex<HashSet<String>>,
    /// Containers this controller is removing on purpose.
    removing: Mutex<HashSet<String>>,
    /// How often the controller restarted each container since it started.
    restart_counts: Mutex<HashMap<String, u32>>,
}

impl ReplicaLives {
    /// Takes in one container event, and says whether it was a crash.
    pub fn heard(&self, event: &RuntimeEvent, now: Instant) -> Heard {
        let container = event.container_id.as_str();
        let on_purpose = self.removing.lock().contains(container);
        match event.action.as_str() {
            "die" | "oom" | "stop" | "destroy" => {
                self.dead.lock().insert(container.to_owned());
            }
            "start" | "restart" | "unpause" => {
                self.dead.lock().remove(container);
            }
            _ => {}
        }
        let heard = match event.action.as_str() {
            _ if on_purpose => Heard::OnPurpose,
            "die" | "oom" => {
                let oom = event.action == "oom";
                self.history
                    .lock()
                    .died(container, &event.replica_id, event.exit_code, oom, now);
                Heard::Crashed { oom }
            }
            _ => Heard::Other,
        };
        if event.action == "destroy" {
            self.removing.lock().remove(container);
            self.dead.lock().remove(container);
            if !on_purpose {
                self.history.lock().forget(container);
            }
        }
        heard
    }

    /// A removal on purpose begins: the container's death is no crash.
    pub fn removing(&self, container: &str) {
        self.removing.lock().insert(container.to_owned());
    }

    /// A removal on purpose failed: a later death is a crash again.
    pub fn removal_failed(&self, container: &str) {
        self.removing.lock().remove(container);
    }

    /// The container is gone: its death history goes with it.
    pub fn removed(&self, container: &str) {
        self.history.lock().forget(container);
    }

    /// The controller is stopping a container on purpose (a fenced
    /// node's statefulset replica): its death is no crash.
    pub fn stopping(&self, container: &str) {
        self.removing.lock().insert(container.to_owned());
    }

    /// The controller is starting a stopped container again: a later
    /// death of it is a crash again.
    pub fn starting(&self, container: &str) {
        self.dead.lock().remove(container);
        self.removing.lock().remove(container);
    }

    /// The controller started it again; `counted` when it stayed up (a
    /// restart shown in `vd get pods`), not when it died again at once.
    pub fn restarted(&self, container: &str, now: Instant, counted: bool) {
        self.history.lock().restarted(container, now);
        if counted {
            *self
                .restart_counts
                .lock()
                .entry(container.to_owned())
                .or_default() += 1;
        }
    }

    /// The exit code its last death reported, if it died.
    pub fn last_exit_code(&self, container: &str) -> Option<i64> {
        self.history.lock().last_exit_code(container)
    }

    /// How long its restart has to wait out the back-off.
    pub fn wait_before_restart(&self, container: &str, now: Instant) -> Duration {
        self.history.lock().wait_before_restart(container, now)
    }

    /// The crash records of these containers, as `vd describe` shows them.
    pub fn records<'a>(
        &self,
        containers: impl Iterator<Item = &'a str>,
        now: Instant,
    ) -> Vec<CrashRecord> {
        self.history.lock().records(containers, now)
    }

    /// Shows what a listing may not know yet: a container Docker reported
    /// dead as exited, whatever the listing says.
    pub fn mark_dead(&self, replicas: &mut [Replica]) {
        let dead = self.dead.lock();
        for replica in replicas {
            if dead.contains(&replica.container_id) && replica.is_running() {
                replica.state = "exited".into();
            }
        }
    }

    /// Fills in each replica's restart count.
    pub fn mark_restarts(&self, replicas: &mut [Replica]) {
        let counts = self.restart_counts.lock();
        for replica in replicas {
            replica.restarts = counts.get(&replica.container_id).copied().unwrap_or(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voodu_model::WorkloadId;
    use voodu_plugin_abi::messages::WorkloadKind;

    fn event(action: &str, exit_code: Option<i64>) -> RuntimeEvent {
        RuntimeEvent {
            workload: WorkloadId::new(WorkloadKind::Deployment, "prod", "web"),
            replica_id: "a1f3".into(),
            container_id: "c1".into(),
            action: action.into(),
            exit_code,
            time_nanos: 0,
        }
    }

    #[test]
    fn a_death_is_a_crash_unless_the_controller_is_removing_the_replica() {
        let lives = ReplicaLives::default();
        let now = Instant::now();
        assert_eq!(
            lives.heard(&event("die", Some(3)), now),
            Heard::Crashed { oom: false }
        );
        assert_eq!(lives.last_exit_code("c1"), Some(3));
        lives.removing("c1");
        assert_eq!(lives.heard(&event("die", Some(0)), now), Heard::OnPurpose);
        assert_eq!(
            lives.last_exit_code("c1"),
            Some(3),
            "a removal records no death"
        );
        lives.heard(&event("destroy", None), now);
        lives.removal_failed("c1");
        assert_eq!(
            lives.heard(&event("oom", None), now),
            Heard::Crashed { oom: true }
        );
    }
}
