//! How serious a recorded event is.

use serde::{Deserialize, Serialize};

/// How serious an event is.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum EventLevel {
    /// Something happened as asked.
    Info,
    /// Something happened, but not entirely as asked (a drain ran out of
    /// budget, a plugin could not be told).
    Warning,
    /// Something was refused or failed.
    Error,
}

impl EventLevel {
    /// The word the store and the API write: `info`, `warning`, `error`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The level a stored word names, if any.
    pub fn parse(text: &str) -> Option<EventLevel> {
        text.parse().ok()
    }
}

/// Why an event was recorded (or a transient step shown): the word the
/// store keeps, the API carries and `vd events` shows, typed once here and
/// shared by the reconciler, the controller, both stores, the API and the
/// CLI, so no step of the data path decides by comparing text.
///
/// A word this build does not know (written by a newer controller into a
/// shared store) is kept as [`EventReason::Other`], never refused.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    strum::EnumString,
    strum::IntoStaticStr,
    serde_with::SerializeDisplay,
    serde_with::DeserializeFromStr,
)]
#[strum(serialize_all = "kebab-case")]
pub enum EventReason {
    /// A manifest was applied (stored).
    Applied,
    /// A workload was deleted.
    Deleted,
    /// An apply was refused.
    Refused,
    /// A workload was rolled back to an earlier revision's spec.
    Rollback,
    /// A plugin install normalised a stored block anew.
    Plugin,
    /// A node refused the cluster's record of a plugin the workload uses.
    PluginRefused,
    /// A config bucket the workload takes changed.
    ConfigChanged,
    /// The workload was stopped (`vd stop`).
    Stopped,
    /// The workload was started again (`vd start`).
    Started,
    /// An apply's `--prune` deleted a workload no file names.
    Pruned,
    /// A transient step of a pass (never stored).
    Step,
    /// A replica was created, started or removed.
    Replica,
    /// A replica was replaced.
    Replaced,
    /// A replica's readiness changed.
    Readiness,
    /// A replica failed its startup probe.
    StartupFailed,
    /// A replica failed its liveness probe.
    LivenessFailed,
    /// A container of the workload did something Docker reported (a
    /// transient notice, never stored).
    Container,
    /// Containers of the workload no store knows were found.
    Orphaned,
    /// A plugin was told the endpoint set.
    Published,
    /// A plugin was told a block was dropped.
    Forgotten,
    /// An `on_deploy` webhook was delivered, or was not.
    Webhook,
    /// A replica was restarted after it died.
    Restarted,
    /// A replica died.
    Died,
    /// A replica was killed for memory.
    OomKilled,
    /// A replica could not be created.
    CreateFailed,
    /// A container the store did not know was adopted.
    Adopted,
    /// Containers no workload owns were removed.
    OrphansRemoved,
    /// A replica was drained before its removal.
    Drained,
    /// A drain ran out of its budget.
    DrainUnfinished,
    /// A plugin could not be told the endpoint set.
    PublishFailed,
    /// A plugin could not be told a block was dropped.
    ForgetFailed,
    /// A reconcile pass failed.
    ConvergeFailed,
    /// An init step finished.
    InitFinished,
    /// An init step failed.
    InitFailed,
    /// A release command ran.
    Release,
    /// A release command failed.
    ReleaseFailed,
    /// An image is being built.
    Building,
    /// An image was built.
    Built,
    /// A build failed.
    BuildFailed,
    /// A job or cronjob run started.
    RunStarted,
    /// A run finished with exit code 0.
    RunFinished,
    /// A run failed.
    RunFailed,
    /// A cronjob tick was skipped (its concurrency rule).
    RunSkipped,
    /// A cronjob run replaced the one still running.
    RunReplaced,
    /// A node lost its lease and fenced its replicas.
    Fenced,
    /// The controller's worker died, cutting the connections it carried.
    #[strum(serialize = "worker_died")]
    WorkerDied,
    /// A plugin was quarantined after it crashed the controller.
    #[strum(serialize = "plugin_quarantined")]
    PluginQuarantined,
    /// A word this build does not know, kept as it was written.
    #[strum(default)]
    Other(String),
}

impl EventReason {
    /// The word the store and the API write (`publish-failed`).
    pub fn as_str(&self) -> &str {
        match self {
            EventReason::Other(word) => word,
            known => known.into(),
        }
    }
}

impl std::fmt::Display for EventReason {
    /// The word, padded as asked (`{:<16}` in `vd events`' columns).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_written_as_the_store_has_always_kept_it_and_an_unknown_one_is_kept() {
        for (reason, word) in [
            (EventReason::PublishFailed, "publish-failed"),
            (EventReason::OomKilled, "oom-killed"),
            (EventReason::WorkerDied, "worker_died"),
            (EventReason::Applied, "applied"),
        ] {
            assert_eq!(reason.to_string(), word);
            assert_eq!(word.parse::<EventReason>().unwrap(), reason);
            assert_eq!(
                serde_json::to_string(&reason).unwrap(),
                format!("\"{word}\"")
            );
        }
        let newer: EventReason = serde_json::from_str("\"rebalanced\"").unwrap();
        assert_eq!(newer, EventReason::Other("rebalanced".into()));
        assert_eq!(newer.to_string(), "rebalanced");
        assert_eq!(format!("{:<8}|", EventReason::Died), "died    |");
    }
}
