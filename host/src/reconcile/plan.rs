//! What to do next to bring one workload's containers to its desired state,
//! one step at a time. Pure: it looks at the desired state and the
//! containers, and names one step, so every ordering rule is unit-tested
//! without an engine.
//!
//! - Deployments roll surge-first: a new replica is started before an old
//!   one is drained and removed, one at a time.
//! - Statefulsets keep their ordinals and names: they scale up bottom-up,
//!   scale down top-down, and roll top-down, replacing in place (a second
//!   container cannot take the same name, so there is no surge).
//! - Stopped replicas of the current spec are started again rather than
//!   replaced.

use voodu_plugin_abi::messages::WorkloadKind;

use crate::runtime::Replica;

/// The desired state of one workload's containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Deployment or statefulset.
    pub kind: WorkloadKind,
    /// How many replicas.
    pub replicas: u32,
    /// The spec hash replicas must carry to be current.
    pub spec_hash: String,
}

/// Why a step is taken, for progress and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Fewer replicas than desired.
    ScaleUp,
    /// More replicas than desired.
    ScaleDown,
    /// A replica runs an older spec.
    Roll,
}

impl Reason {
    /// How messages name the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ScaleUp => "scale up",
            Reason::ScaleDown => "scale down",
            Reason::Roll => "rolling update",
        }
    }
}

/// One step towards the desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create and start a replica with this id.
    Create {
        /// The new replica's id (`None`: a fresh random id, for deployments).
        replica_id: Option<String>,
        /// Why.
        reason: Reason,
    },
    /// Start this stopped replica again.
    Start {
        /// The replica.
        replica: Replica,
    },
    /// Drain, then stop and remove, this replica.
    Remove {
        /// The replica.
        replica: Replica,
        /// Why.
        reason: Reason,
    },
}

fn is_current(replica: &Replica, desired: &Desired) -> bool {
    replica.spec_hash == desired.spec_hash
}

/// The next step for one workload, or `None` when it has converged.
/// `observed` are the workload's containers, oldest first.
pub fn next_step(desired: &Desired, observed: &[Replica]) -> Option<Step> {
    match desired.kind {
        WorkloadKind::Deployment => next_deployment_step(desired, observed),
        WorkloadKind::Statefulset => next_statefulset_step(desired, observed),
    }
}

fn next_deployment_step(desired: &Desired, observed: &[Replica]) -> Option<Step> {
    let wanted = desired.replicas as usize;
    let (current, stale): (Vec<&Replica>, Vec<&Replica>) = observed
        .iter()
        .partition(|replica| is_current(replica, desired));
    if observed.len() > wanted {
        // Stopped stale replicas serve nobody: they go first.
        if let Some(replica) = stale
            .iter()
            .filter(|replica| !replica.is_running())
            .min_by_key(|replica| replica.created)
        {
            return Some(Step::Remove {
                replica: (*replica).clone(),
                reason: Reason::Roll,
            });
        }
        // A running stale replica goes, oldest first, only once more
        // replicas run than wanted: a new replica has taken its place
        // (surge-first). A new replica that does not stay up never costs a
        // running old one.
        let running = observed
            .iter()
            .filter(|replica| replica.is_running())
            .count();
        if running > wanted {
            if let Some(replica) = stale.iter().min_by_key(|replica| replica.created) {
                return Some(Step::Remove {
                    replica: (*replica).clone(),
                    reason: Reason::Roll,
                });
            }
        }
        // Too many current replicas: remove stopped ones, then the newest.
        if current.len() > wanted {
            let replica = current
                .iter()
                .min_by_key(|replica| (replica.is_running(), std::cmp::Reverse(replica.created)))?;
            return Some(Step::Remove {
                replica: (*replica).clone(),
                reason: Reason::ScaleDown,
            });
        }
    }
    if let Some(stopped) = current.iter().find(|replica| !replica.is_running()) {
        return Some(Step::Start {
            replica: (*stopped).clone(),
        });
    }
    if current.len() < wanted {
        let reason = if stale.is_empty() {
            Reason::ScaleUp
        } else {
            Reason::Roll
        };
        return Some(Step::Create {
            replica_id: None,
            reason,
        });
    }
    None
}

fn ordinal(replica: &Replica) -> Option<u32> {
    replica.replica_id.parse().ok()
}

fn next_statefulset_step(desired: &Desired, observed: &[Replica]) -> Option<Step> {
    // Anything that is not an ordinal below the desired count goes, the
    // highest ordinal first.
    if let Some(extra) = observed
        .iter()
        .filter(|replica| ordinal(replica).is_none_or(|n| n >= desired.replicas))
        .max_by_key(|replica| ordinal(replica))
    {
        return Some(Step::Remove {
            replica: extra.clone(),
            reason: Reason::ScaleDown,
        });
    }
    // Missing ordinals are created lowest first.
    if let Some(missing) =
        (0..desired.replicas).find(|n| !observed.iter().any(|replica| ordinal(replica) == Some(*n)))
    {
        let reason = if observed.iter().all(|replica| is_current(replica, desired)) {
            Reason::ScaleUp
        } else {
            Reason::Roll
        };
        return Some(Step::Create {
            replica_id: Some(missing.to_string()),
            reason,
        });
    }
    // Stale ordinals are replaced highest first, so pod 0 goes last.
    if let Some(stale) = observed
        .iter()
        .filter(|replica| !is_current(replica, desired))
        .max_by_key(|replica| ordinal(replica))
    {
        return Some(Step::Remove {
            replica: stale.clone(),
            reason: Reason::Roll,
        });
    }
    observed
        .iter()
        .find(|replica| !replica.is_running())
        .map(|replica| Step::Start {
            replica: replica.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::WorkloadId;

    fn replica(id: &str, hash: &str, created: i64, running: bool) -> Replica {
        Replica {
            container_id: format!("c-{id}"),
            container_name: format!("prod-esl.{id}"),
            workload: WorkloadId::new(WorkloadKind::Deployment, "prod", "esl"),
            replica_id: id.into(),
            spec_hash: hash.into(),
            state: if running { "running" } else { "exited" }.into(),
            ip: running.then(|| "172.18.0.2".into()),
            created,
            owner: None,
        }
    }

    fn desired(kind: WorkloadKind, replicas: u32) -> Desired {
        Desired {
            kind,
            replicas,
            spec_hash: "new".into(),
        }
    }

    /// Applies steps to a simulated set of containers until convergence,
    /// returning the steps as short strings.
    fn converge(desired: &Desired, mut observed: Vec<Replica>) -> Vec<String> {
        let mut log = Vec::new();
        let mut clock = 100;
        while let Some(step) = next_step(desired, &observed) {
            assert!(log.len() < 50, "no convergence: {log:?}");
            clock += 1;
            match step {
                Step::Create { replica_id, .. } => {
                    let id = replica_id.unwrap_or_else(|| format!("n{clock}"));
                    log.push(format!("+{id}"));
                    observed.push(replica(&id, &desired.spec_hash, clock, true));
                }
                Step::Start { replica } => {
                    log.push(format!("^{}", replica.replica_id));
                    observed
                        .iter_mut()
                        .filter(|r| r.replica_id == replica.replica_id)
                        .for_each(|r| r.state = "running".into());
                }
                Step::Remove { replica, .. } => {
                    log.push(format!("-{}", replica.replica_id));
                    observed.retain(|r| r.replica_id != replica.replica_id);
                }
            }
        }
        log
    }

    #[test]
    fn deployments_scale_up_from_nothing() {
        let log = converge(&desired(WorkloadKind::Deployment, 3), vec![]);
        assert_eq!(log.len(), 3);
        assert!(log.iter().all(|step| step.starts_with('+')));
    }

    #[test]
    fn deployments_roll_surge_first_one_replica_at_a_time() {
        let old = vec![
            replica("a", "old", 1, true),
            replica("b", "old", 2, true),
            replica("c", "old", 3, true),
        ];
        let log = converge(&desired(WorkloadKind::Deployment, 3), old);
        assert_eq!(log, ["+n101", "-a", "+n103", "-b", "+n105", "-c"]);
    }

    #[test]
    fn scaling_a_deployment_down_removes_only_the_extra_replicas() {
        let current = vec![
            replica("a", "new", 1, true),
            replica("b", "new", 2, true),
            replica("c", "new", 3, true),
        ];
        assert_eq!(
            converge(&desired(WorkloadKind::Deployment, 2), current),
            ["-c"]
        );
    }

    #[test]
    fn a_new_replica_that_is_not_running_never_costs_a_running_old_one() {
        let observed = vec![
            replica("a", "old", 1, true),
            replica("b", "old", 2, true),
            replica("n", "new", 3, false),
        ];
        // The crashed new replica is started again; no old one is removed.
        assert_eq!(
            next_step(&desired(WorkloadKind::Deployment, 2), &observed),
            Some(Step::Start {
                replica: observed[2].clone()
            })
        );
        // A stopped old replica goes before anything else.
        let with_dead_old = vec![
            replica("a", "old", 1, false),
            replica("b", "old", 2, true),
            replica("n", "new", 3, true),
        ];
        assert_eq!(
            converge(&desired(WorkloadKind::Deployment, 2), with_dead_old),
            ["-a", "+n102", "-b"]
        );
    }

    #[test]
    fn stopped_current_replicas_are_started_not_replaced() {
        let observed = vec![replica("a", "new", 1, true), replica("b", "new", 2, false)];
        assert_eq!(
            converge(&desired(WorkloadKind::Deployment, 2), observed),
            ["^b"]
        );
    }

    #[test]
    fn statefulsets_scale_up_bottom_up_and_down_top_down() {
        let up = converge(&desired(WorkloadKind::Statefulset, 3), vec![]);
        assert_eq!(up, ["+0", "+1", "+2"]);
        let three = vec![
            replica("0", "new", 1, true),
            replica("1", "new", 2, true),
            replica("2", "new", 3, true),
        ];
        assert_eq!(
            converge(&desired(WorkloadKind::Statefulset, 1), three),
            ["-2", "-1"]
        );
    }

    #[test]
    fn statefulsets_roll_top_down_in_place() {
        let old = vec![
            replica("0", "old", 1, true),
            replica("1", "old", 2, true),
            replica("2", "old", 3, true),
        ];
        let log = converge(&desired(WorkloadKind::Statefulset, 3), old);
        assert_eq!(log, ["-2", "+2", "-1", "+1", "-0", "+0"]);
    }
}
