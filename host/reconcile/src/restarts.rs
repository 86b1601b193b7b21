//! Restarting replicas that die, with exponential back-off. The controller,
//! not Docker, restarts voodu's replicas (their Docker restart policy is
//! `no`), so every death and restart is an event, and a replica that keeps
//! dying is shown as crash-looping rather than restarted in a tight loop.
//!
//! - The first death of a replica is restarted at once.
//! - Each further death in a row doubles the wait, from
//!   [`FIRST_BACKOFF`] up to [`MAX_BACKOFF`].
//! - A replica that ran for [`STABLE_AFTER`] since its last restart starts
//!   again from a clean slate.
//! - From [`CRASH_LOOP_AFTER`] deaths in a row, when its restart has to
//!   wait, it is crash-looping.
//!
//! Pure bookkeeping over a clock the caller passes in, so it is unit-tested
//! without time passing.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The wait before the second restart in a row.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between restarts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a replica must run for its death count to start again.
pub const STABLE_AFTER: Duration = Duration::from_secs(30);
/// Deaths in a row from which a replica is crash-looping.
pub const CRASH_LOOP_AFTER: u32 = 2;

/// How one replica last died, as `vd describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashRecord {
    /// The replica.
    pub replica_id: String,
    /// Deaths in a row, without a stable run between them.
    pub deaths: u32,
    /// The last exit code Docker reported.
    pub last_exit_code: Option<i64>,
    /// Whether the kernel's OOM killer ended it last.
    pub oom_killed: bool,
    /// Whether it dies often enough to be crash-looping.
    pub crash_looping: bool,
}

#[derive(Debug, Clone)]
struct History {
    deaths: u32,
    last_exit_code: Option<i64>,
    oom_killed: bool,
    last_restart: Option<Instant>,
    last_death: Instant,
}

/// The death history of every replica of one controller, by container.
#[derive(Debug, Default)]
pub struct Restarts {
    by_container: HashMap<String, (String, History)>,
}

impl Restarts {
    /// Records a death. `oom` marks an OOM kill (Docker's `oom` event comes
    /// before the `die`, so an `oom` then a `die` count as one death).
    pub fn died(
        &mut self,
        container: &str,
        replica_id: &str,
        exit_code: Option<i64>,
        oom: bool,
        now: Instant,
    ) {
        let entry = self
            .by_container
            .entry(container.to_owned())
            .or_insert_with(|| {
                (
                    replica_id.to_owned(),
                    History {
                        deaths: 0,
                        last_exit_code: None,
                        oom_killed: false,
                        last_restart: None,
                        last_death: now,
                    },
                )
            });
        let history = &mut entry.1;
        let stable = history
            .last_restart
            .is_some_and(|restart| now.saturating_duration_since(restart) >= STABLE_AFTER);
        // An `oom` followed by its `die`: one death.
        let same_death = history.deaths > 0
            && history.oom_killed
            && now.saturating_duration_since(history.last_death) < Duration::from_secs(1)
            && history.last_restart.is_none_or(|r| r < history.last_death);
        if stable {
            history.deaths = 0;
        }
        if !same_death {
            history.deaths += 1;
            history.oom_killed = oom;
        } else {
            history.oom_killed |= oom;
        }
        if exit_code.is_some() {
            history.last_exit_code = exit_code;
        }
        history.last_death = now;
    }

    /// Records that the controller started the container again.
    pub fn restarted(&mut self, container: &str, now: Instant) {
        if let Some((_, history)) = self.by_container.get_mut(container) {
            history.last_restart = Some(now);
        }
    }

    /// How long to wait before restarting the container: zero for a first
    /// death (or none recorded), then doubling.
    pub fn wait_before_restart(&self, container: &str, now: Instant) -> Duration {
        let Some((_, history)) = self.by_container.get(container) else {
            return Duration::ZERO;
        };
        if history.deaths <= 1 {
            return Duration::ZERO;
        }
        let backoff = crate::doubling_wait(FIRST_BACKOFF, MAX_BACKOFF, history.deaths - 2);
        (history.last_death + backoff).saturating_duration_since(now)
    }

    /// The last exit code of a container, if it died.
    pub fn last_exit_code(&self, container: &str) -> Option<i64> {
        self.by_container
            .get(container)
            .and_then(|(_, history)| history.last_exit_code)
    }

    /// The records of the given containers that have died. One is
    /// crash-looping while it has died [`CRASH_LOOP_AFTER`] times in a row
    /// and has not yet run for [`STABLE_AFTER`] since its last restart.
    pub fn records<'a>(
        &self,
        containers: impl IntoIterator<Item = &'a str>,
        now: Instant,
    ) -> Vec<CrashRecord> {
        containers
            .into_iter()
            .filter_map(|container| self.by_container.get(container))
            .map(|(replica_id, history)| CrashRecord {
                replica_id: replica_id.clone(),
                deaths: history.deaths,
                last_exit_code: history.last_exit_code,
                oom_killed: history.oom_killed,
                crash_looping: history.deaths >= CRASH_LOOP_AFTER
                    && history.last_restart.is_none_or(|restart| {
                        now.saturating_duration_since(restart) < STABLE_AFTER
                    }),
            })
            .collect()
    }

    /// Forgets a container that was removed.
    pub fn forget(&mut self, container: &str) {
        self.by_container.remove(container);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_death_restarts_at_once_then_the_wait_doubles_to_a_cap() {
        let mut restarts = Restarts::default();
        let mut now = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..10 {
            restarts.died("c1", "a1", Some(1), false, now);
            let wait = restarts.wait_before_restart("c1", now);
            waits.push(wait.as_secs());
            now += wait;
            restarts.restarted("c1", now);
            now += Duration::from_millis(10);
        }
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        let record = &restarts.records(["c1"], now)[0];
        assert!(record.crash_looping);
        assert_eq!(record.last_exit_code, Some(1));
        assert_eq!(record.deaths, 10);
    }

    #[test]
    fn a_stable_run_clears_the_count() {
        let mut restarts = Restarts::default();
        let mut now = Instant::now();
        for _ in 0..4 {
            restarts.died("c1", "a1", Some(2), false, now);
            now += restarts.wait_before_restart("c1", now);
            restarts.restarted("c1", now);
        }
        assert!(restarts.records(["c1"], now)[0].crash_looping);
        now += STABLE_AFTER;
        restarts.died("c1", "a1", Some(2), false, now);
        assert_eq!(restarts.wait_before_restart("c1", now), Duration::ZERO);
        assert!(!restarts.records(["c1"], now)[0].crash_looping);
    }

    #[test]
    fn an_oom_kill_and_its_die_are_one_death_marked_oom() {
        let mut restarts = Restarts::default();
        let now = Instant::now();
        restarts.died("c1", "a1", None, true, now);
        restarts.died("c1", "a1", Some(137), false, now + Duration::from_millis(5));
        let record = &restarts.records(["c1"], now)[0];
        assert_eq!(record.deaths, 1);
        assert!(record.oom_killed);
        assert_eq!(record.last_exit_code, Some(137));
        assert!(restarts.records(["other"], now).is_empty());
    }
}
