//! What to do next to bring one workload's containers to its desired state.
//! Pure: it looks at the desired state and the containers, and names the
//! next batch of steps, all of one sort, that may run at once, so every
//! ordering rule is unit-tested without an engine.
//!
//! - Deployments create missing replicas in parallel, at most
//!   [`MAX_PARALLEL_CREATES`] at a time.
//! - Deployments roll surge-first: new replicas are started before old ones
//!   are drained and removed, `max_surge` at a time (one by default).
//! - Statefulsets keep their ordinals and names: they scale up bottom-up,
//!   scale down top-down, and roll top-down, replacing in place (a second
//!   container cannot take the same name, so there is no surge).
//! - Stopped replicas of the current spec are started again rather than
//!   replaced.

use std::collections::BTreeSet;

use voodu_plugin_abi::messages::WorkloadKind;

use voodu_runtime::Replica;

/// The most replicas of one workload created at once.
pub const MAX_PARALLEL_CREATES: usize = 8;

/// The desired state of one workload's containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Deployment or statefulset.
    pub kind: WorkloadKind,
    /// How many replicas.
    pub replicas: u32,
    /// The spec hash replicas must carry to be current.
    pub spec_hash: String,
    /// How many replicas a rolling update may run above `replicas`
    /// (deployments only; at least 1).
    pub max_surge: u32,
    /// The statefulset ordinals this controller runs (its share in a
    /// cluster); `None`: every ordinal below `replicas`.
    pub ordinals: Option<BTreeSet<u32>>,
    /// Other hashes whose replicas count as current: those a config
    /// change made with `--no-restart` keeps running with the env they
    /// have ([`voodu_store::config::ConfigHold`]). New replicas carry
    /// `spec_hash`.
    pub held: BTreeSet<String>,
}

impl Desired {
    /// Whether this controller runs statefulset ordinal `n`.
    fn runs_ordinal(&self, n: u32) -> bool {
        n < self.replicas && self.ordinals.as_ref().is_none_or(|mine| mine.contains(&n))
    }
}

/// Why a step is taken, for progress and events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
pub enum Reason {
    /// Fewer replicas than desired.
    #[strum(serialize = "scale up")]
    ScaleUp,
    /// More replicas than desired.
    #[strum(serialize = "scale down")]
    ScaleDown,
    /// A replica runs an older spec.
    #[strum(serialize = "rolling update")]
    Roll,
    /// The workload was deleted.
    #[strum(serialize = "delete")]
    Delete,
}

impl Reason {
    /// How messages name the reason.
    pub fn as_str(self) -> &'static str {
        self.into()
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
    replica.spec_hash == desired.spec_hash || desired.held.contains(&replica.spec_hash)
}

/// The next batch of steps for one workload, empty when it has converged.
/// The steps of a batch are all of one sort and may run at once.
/// `observed` are the workload's containers, oldest first.
pub fn next_steps(desired: &Desired, observed: &[Replica]) -> Vec<Step> {
    match desired.kind {
        // A job wants no replicas (`replicas` is 0): any container listed as
        // one is removed as a deployment's surplus would be.
        WorkloadKind::Deployment | WorkloadKind::Job | WorkloadKind::Cronjob => {
            next_deployment_steps(desired, observed)
        }
        WorkloadKind::Statefulset => next_statefulset_step(desired, observed)
            .into_iter()
            .collect(),
    }
}

fn removals(replicas: Vec<&Replica>, reason: Reason) -> Vec<Step> {
    replicas
        .into_iter()
        .map(|replica| Step::Remove {
            replica: replica.clone(),
            reason,
        })
        .collect()
}

fn next_deployment_steps(desired: &Desired, observed: &[Replica]) -> Vec<Step> {
    let wanted = desired.replicas as usize;
    let (current, mut stale): (Vec<&Replica>, Vec<&Replica>) = observed
        .iter()
        .partition(|replica| is_current(replica, desired));
    stale.sort_by_key(|replica| replica.created);
    if observed.len() > wanted {
        // Stale replicas that serve nobody (stopped, or running but not
        // ready) all go first: waiting for them to serve again could stall
        // the rollout for good.
        let stopped_stale: Vec<&Replica> = stale
            .iter()
            .copied()
            .filter(|replica| !replica.is_serving())
            .collect();
        if !stopped_stale.is_empty() {
            return removals(stopped_stale, Reason::Roll);
        }
        // Running stale replicas go, oldest first, only as far as more
        // replicas serve than wanted: new replicas have taken their place
        // (surge-first). A new replica that does not stay up, or is not
        // ready yet, never costs a serving old one.
        let serving = observed
            .iter()
            .filter(|replica| replica.is_serving())
            .count();
        if serving > wanted && !stale.is_empty() {
            let extra = (serving - wanted).min(stale.len());
            return removals(stale.into_iter().take(extra).collect(), Reason::Roll);
        }
        // Too many current replicas: remove stopped ones, then the newest.
        if current.len() > wanted {
            let mut by_preference = current.clone();
            by_preference
                .sort_by_key(|replica| (replica.is_serving(), std::cmp::Reverse(replica.created)));
            let extra = current.len() - wanted;
            return removals(
                by_preference.into_iter().take(extra).collect(),
                Reason::ScaleDown,
            );
        }
    }
    let stopped: Vec<Step> = current
        .iter()
        .filter(|replica| !replica.is_running())
        .map(|replica| Step::Start {
            replica: (*replica).clone(),
        })
        .collect();
    if !stopped.is_empty() {
        return stopped;
    }
    if current.len() < wanted {
        let reason = if stale.is_empty() {
            Reason::ScaleUp
        } else {
            Reason::Roll
        };
        // Never more than `max_surge` above the replica count while old
        // replicas still run, and never more than the parallel bound at once.
        let room = (wanted + desired.max_surge.max(1) as usize).saturating_sub(observed.len());
        let count = (wanted - current.len()).min(room).min(MAX_PARALLEL_CREATES);
        return (0..count)
            .map(|_| Step::Create {
                replica_id: None,
                reason,
            })
            .collect();
    }
    Vec::new()
}

fn ordinal(replica: &Replica) -> Option<u32> {
    replica.replica_id.parse().ok()
}

fn next_statefulset_step(desired: &Desired, observed: &[Replica]) -> Option<Step> {
    // Anything that is not an ordinal below the desired count (and this
    // controller's, in a cluster) goes, the highest ordinal first.
    if let Some(extra) = observed
        .iter()
        .filter(|replica| ordinal(replica).is_none_or(|n| !desired.runs_ordinal(n)))
        .max_by_key(|replica| ordinal(replica))
    {
        return Some(Step::Remove {
            replica: extra.clone(),
            reason: Reason::ScaleDown,
        });
    }
    // Missing ordinals are created lowest first. A gap below a running
    // ordinal was removed to be replaced; one above them all is new. (An
    // ordinal just removed by a top-down roll is also above them all: the
    // caller, which saw the removal, names that one a roll.)
    if let Some(missing) = (0..desired.replicas)
        .filter(|n| desired.runs_ordinal(*n))
        .find(|n| !observed.iter().any(|replica| ordinal(replica) == Some(*n)))
    {
        let highest = observed.iter().filter_map(ordinal).max();
        let reason = if highest.is_some_and(|highest| highest > missing) {
            Reason::Roll
        } else {
            Reason::ScaleUp
        };
        // Scaling up is paced, as voodu paces it: ordinal N starts only
        // once every lower ordinal here serves (running, and ready where a
        // probe or HEALTHCHECK decides it), so a replica that joins a
        // primary or a quorum finds it up. A stopped lower ordinal is
        // started first; one still starting is waited for (its readiness
        // flip queues the workload again).
        // Only current lower ordinals gate it: in a top-down roll the
        // lower ones are still the old spec's (unready, even crash-looping,
        // when that is why it rolls), and the roll must go on.
        if reason == Reason::ScaleUp {
            let lower_not_serving = observed
                .iter()
                .filter(|replica| ordinal(replica).is_some_and(|n| n < missing))
                .filter(|replica| is_current(replica, desired))
                .filter(|replica| !replica.is_serving())
                .min_by_key(|replica| ordinal(replica));
            if let Some(lower) = lower_not_serving {
                return (!lower.is_running()).then(|| Step::Start {
                    replica: lower.clone(),
                });
            }
        }
        return Some(Step::Create {
            replica_id: Some(missing.to_string()),
            reason,
        });
    }
    // Stale ordinals are replaced highest first, so pod 0 goes last, and
    // only once every replaced one is ready again.
    let waiting_for_ready = observed.iter().any(|replica| {
        is_current(replica, desired) && replica.is_running() && !replica.is_serving()
    });
    if let Some(stale) = observed
        .iter()
        .filter(|_| !waiting_for_ready)
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

    fn replica(id: &str, hash: &str, created: i64, running: bool) -> Replica {
        Replica {
            spec_hash: hash.into(),
            state: if running { "running" } else { "exited" }.into(),
            ip: running.then(|| "172.18.0.2".into()),
            created,
            ..crate::test_replica(id)
        }
    }

    fn desired(kind: WorkloadKind, replicas: u32) -> Desired {
        Desired {
            kind,
            replicas,
            spec_hash: "new".into(),
            max_surge: 1,
            ordinals: None,
            held: BTreeSet::new(),
        }
    }

    fn next_step(desired: &Desired, observed: &[Replica]) -> Option<Step> {
        next_steps(desired, observed).into_iter().next()
    }

    /// Applies batches of steps to a simulated set of containers until
    /// convergence, returning each batch as short strings.
    fn converge_batches(desired: &Desired, mut observed: Vec<Replica>) -> Vec<Vec<String>> {
        let mut log = Vec::new();
        let mut clock = 100;
        loop {
            let steps = next_steps(desired, &observed);
            if steps.is_empty() {
                return log;
            }
            assert!(log.len() < 50, "no convergence: {log:?}");
            let mut batch = Vec::new();
            for step in steps {
                clock += 1;
                apply(step, desired, &mut observed, &mut batch, clock);
            }
            log.push(batch);
        }
    }

    /// Applies steps to a simulated set of containers until convergence,
    /// returning the steps as short strings.
    fn converge(desired: &Desired, observed: Vec<Replica>) -> Vec<String> {
        converge_batches(desired, observed).concat()
    }

    fn apply(
        step: Step,
        desired: &Desired,
        observed: &mut Vec<Replica>,
        log: &mut Vec<String>,
        clock: i64,
    ) {
        {
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
    }

    #[test]
    fn a_statefulset_share_runs_only_its_own_ordinals() {
        let mine = Desired {
            ordinals: Some(BTreeSet::from([1])),
            ..desired(WorkloadKind::Statefulset, 3)
        };
        // Ordinal 0 runs here but is another node's now: it goes; ordinal 1
        // is created; ordinal 2 is left to its node.
        let observed = vec![replica("0", "new", 1, true)];
        assert_eq!(
            next_step(&mine, &observed),
            Some(Step::Remove {
                replica: observed[0].clone(),
                reason: Reason::ScaleDown
            })
        );
        assert_eq!(
            next_step(&mine, &[]),
            Some(Step::Create {
                replica_id: Some("1".into()),
                reason: Reason::ScaleUp
            })
        );
        assert_eq!(next_step(&mine, &[replica("1", "new", 1, true)]), None);
    }

    #[test]
    fn missing_deployment_replicas_are_created_in_parallel_batches() {
        let batches = converge_batches(&desired(WorkloadKind::Deployment, 20), vec![]);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [8, 8, 4]);
    }

    #[test]
    fn max_surge_rolls_that_many_replicas_at_a_time() {
        let old: Vec<Replica> = (0..4)
            .map(|n| replica(&format!("o{n}"), "old", n, true))
            .collect();
        let surge_two = Desired {
            max_surge: 2,
            ..desired(WorkloadKind::Deployment, 4)
        };
        let batches = converge_batches(&surge_two, old);
        assert_eq!(
            batches,
            [
                vec!["+n101", "+n102"],
                vec!["-o0", "-o1"],
                vec!["+n105", "+n106"],
                vec!["-o2", "-o3"],
            ]
        );
        // Never more than replicas + max_surge containers at once.
        let old: Vec<Replica> = (0..4)
            .map(|n| replica(&format!("o{n}"), "old", n, true))
            .collect();
        assert_eq!(next_steps(&surge_two, &old).len(), 2);
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
    fn a_statefulset_starts_each_ordinal_only_once_the_one_below_serves() {
        let desired = desired(WorkloadKind::Statefulset, 3);
        let mut zero = replica("0", "new", 1, true);
        zero.ready = Some(false);
        // Ordinal 0 runs but is not ready yet: ordinal 1 waits.
        assert!(next_steps(&desired, std::slice::from_ref(&zero)).is_empty());
        zero.ready = Some(true);
        assert_eq!(
            reasons(next_steps(&desired, std::slice::from_ref(&zero))),
            [("+1".to_owned(), Reason::ScaleUp)]
        );
        // A stopped lower ordinal is started before a higher one is made.
        let stopped = replica("0", "new", 1, false);
        assert!(matches!(
            next_steps(&desired, &[stopped]).as_slice(),
            [Step::Start { replica }] if replica.replica_id == "0"
        ));
        // A stale lower ordinal that is not ready (a top-down roll of a
        // failing spec) never holds the replaced top one back.
        let mut stale = replica("0", "old", 1, true);
        stale.ready = Some(false);
        assert_eq!(
            reasons(next_steps(&desired, &[stale])),
            [("+1".to_owned(), Reason::ScaleUp)]
        );
        // Without a probe, running is serving: the next one follows at once.
        assert_eq!(
            reasons(next_steps(&desired, &[replica("0", "new", 1, true)])),
            [("+1".to_owned(), Reason::ScaleUp)]
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

    fn reasons(steps: Vec<Step>) -> Vec<(String, Reason)> {
        steps
            .into_iter()
            .filter_map(|step| match step {
                Step::Create { replica_id, reason } => Some((format!("+{}", replica_id?), reason)),
                Step::Remove { replica, reason } => {
                    Some((format!("-{}", replica.replica_id), reason))
                }
                Step::Start { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_statefulset_scaled_and_rolled_at_once_names_each_step_rightly() {
        let desired = desired(WorkloadKind::Statefulset, 2);
        // Replica 1 is new: a scale up, though replica 0 is stale.
        let one_old = [replica("0", "old", 1, true)];
        assert_eq!(
            reasons(next_steps(&desired, &one_old)),
            [("+1".to_owned(), Reason::ScaleUp)]
        );
        let both = [replica("0", "old", 1, true), replica("1", "new", 2, true)];
        assert_eq!(
            reasons(next_steps(&desired, &both)),
            [("-0".to_owned(), Reason::Roll)]
        );
        // Replica 0 comes back in its own place: a rolling update.
        let gap = [replica("1", "new", 2, true)];
        assert_eq!(
            reasons(next_steps(&desired, &gap)),
            [("+0".to_owned(), Reason::Roll)]
        );
    }

    #[test]
    fn a_new_replica_that_is_not_ready_never_costs_a_serving_old_one() {
        let mut new = replica("n", "new", 9, true);
        new.ready = Some(false);
        let observed = vec![
            replica("a", "old", 1, true),
            replica("b", "old", 2, true),
            new.clone(),
        ];
        // Two wanted, surge 1: the new replica is up but not ready, so no
        // old one goes and no other new one starts.
        assert!(next_steps(&desired(WorkloadKind::Deployment, 2), &observed).is_empty());
        new.ready = Some(true);
        let observed = vec![
            replica("a", "old", 1, true),
            replica("b", "old", 2, true),
            new,
        ];
        assert_eq!(
            reasons(next_steps(&desired(WorkloadKind::Deployment, 2), &observed)),
            [("-a".to_owned(), Reason::Roll)]
        );
    }

    #[test]
    fn a_statefulset_rolls_on_only_once_the_replaced_ordinal_is_ready() {
        let mut two = replica("2", "new", 9, true);
        two.ready = Some(false);
        let observed = [
            replica("0", "old", 1, true),
            replica("1", "old", 2, true),
            two,
        ];
        assert!(next_steps(&desired(WorkloadKind::Statefulset, 3), &observed).is_empty());
    }

    #[test]
    fn an_unready_old_replica_never_stalls_the_rollout() {
        // One wanted; the old replica is unready, the new one ready: the old
        // one goes, rather than waiting for more to serve than wanted.
        let mut old = replica("a", "old", 1, true);
        old.ready = Some(false);
        let mut new = replica("n", "new", 2, true);
        new.ready = Some(true);
        assert_eq!(
            reasons(next_steps(
                &desired(WorkloadKind::Deployment, 1),
                &[old, new]
            )),
            [("-a".to_owned(), Reason::Roll)]
        );
    }
}
