//! Deletes on the real engine: drained, removed and forgotten, and finished after an interruption or a SIGKILL.
//! On CI (`CI=true`) a missing engine fails these tests.

use std::time::Duration;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/recorder_rig.rs"]
mod recorder_rig;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::docker;
use recorder_rig::*;

#[test]
fn replicas_left_behind_by_an_interrupted_delete_are_removed_at_the_next_start() {
    let Some(mut rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let ids = rig.last_published_ids();
    let web = voodu_model::WorkloadId::new(
        voodu_plugin_abi::messages::WorkloadKind::Deployment,
        rig.scope.name.clone(),
        "web",
    );
    // The workload leaves the store while its replicas still run, as when a
    // controller stops in the middle of a delete.
    rig.controller.restart_after(|root| {
        let mut store = voodu_store::Store::open(&root.join("state.db")).unwrap();
        store.delete(&web).unwrap().expect("it was stored");
    });
    voodu_tests::wait_until(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || match rig.scope.containers().len() {
            0 => Ok(()),
            left => Err(format!(
                "{left} replicas of the deleted workload were never removed"
            )),
        },
    );
    // They were drained first, with the blocks of the last revision.
    let mut drained: Vec<String> = of_kind(&rig.calls(), "drain")
        .iter()
        .map(Call::drained_replica)
        .collect();
    drained.sort();
    let mut expected = ids;
    expected.sort();
    assert_eq!(drained, expected);
}

#[test]
fn a_sigkill_in_the_middle_of_a_delete_still_drains_removes_and_forgets() {
    let Some(mut rig) = Rig::start() else { return };
    // Drains never finish, so the delete is surely in its drain (5 s
    // budget) when the controller is killed.
    rig.apply(&rig.manifest(
        "deployment",
        "web",
        "  replicas = 2\n  drain_timeout = \"5s\"",
        "    drain = \"never\"",
    ));
    let id = format!("deployment/{}/web", rig.scope.name);
    rig.controller.vd(&["delete", "--no-wait", &id]).success();
    wait_for_calls(&rig.calls, Duration::from_secs(15), |calls| {
        !of_kind(calls, "drain").is_empty()
    });
    assert!(of_kind(&rig.calls(), "forget").is_empty());
    rig.controller.kill_hard();
    let drains_before = of_kind(&rig.calls(), "drain").len();
    assert_eq!(rig.scope.containers().len(), 2, "killed mid-drain");
    rig.controller.restart();
    // The next start finishes the delete: the replicas are drained again
    // and removed (within the budget), and the block is forgotten.
    let calls = wait_for_calls(&rig.calls, Duration::from_secs(60), |calls| {
        !of_kind(calls, "forget").is_empty()
    });
    let forgets = of_kind(&calls, "forget");
    assert_eq!(forgets.len(), 1, "{forgets:#?}");
    let mut drained_after: Vec<String> = of_kind(&calls, "drain")[drains_before..]
        .iter()
        .map(Call::drained_replica)
        .collect();
    drained_after.sort();
    drained_after.dedup();
    assert_eq!(
        drained_after.len(),
        2,
        "both replicas are drained again before removal: {drained_after:?}"
    );
    assert!(rig.scope.containers().is_empty(), "nothing is left behind");
    let gone = rig.controller.vd(&["describe", &id]);
    assert_eq!(gone.code, 1, "the workload is gone: {gone:?}");
}

#[test]
fn delete_drains_removes_forgets_and_leaves_nothing_behind() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let ids: Vec<String> = rig.last_published_ids();
    let deleted = rig
        .controller
        .vd(&["delete", &format!("deployment/{}/web", rig.scope.name)])
        .success();
    assert!(
        deleted
            .stdout
            .contains("deleted; forgotten by their plugins: recorder block"),
        "{deleted:?}"
    );
    // Each removal is named for what it is: a delete.
    let removals: Vec<&str> = deleted
        .stderr
        .lines()
        .filter(|line| line.contains("removed replica"))
        .collect();
    assert_eq!(removals.len(), 2, "{deleted:?}");
    assert!(
        removals.iter().all(|line| line.ends_with("(delete)")),
        "{removals:?}"
    );
    let recorded = rig.calls();
    let mut drained: Vec<String> = of_kind(&recorded, "drain")
        .iter()
        .map(|d| d.drained_replica())
        .collect();
    drained.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(drained, expected);
    assert_eq!(
        of_kind(&recorded, "publish")
            .last()
            .unwrap()
            .endpoints()
            .len(),
        0
    );
    let forgets = of_kind(&recorded, "forget");
    assert_eq!(forgets.len(), 1);
    assert!(forgets[0].at_ns > of_kind(&recorded, "drain").last().unwrap().at_ns);
    assert!(rig.scope.containers().is_empty());
    let volumes = docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=voodu.scope={}", rig.scope.name),
    ]);
    assert!(volumes.is_empty());
    // voodu0 goes with the last voodu container (other tests, running
    // beside this one, may still use it, or be removing it).
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let voodu_containers = docker(&["ps", "-aq", "--filter", "label=createdby=voodu"]);
        let networks = docker(&["network", "ls", "-q", "--filter", "name=^voodu0$"]);
        if networks.is_empty() || !voodu_containers.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "voodu0 (network {networks}) outlived the last voodu container"
            ))
        }
    });
}
