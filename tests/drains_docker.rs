//! Drains on the real engine: the budget bounds a plugin that never drains or hangs, a failing drain is named, a drain never holds up another workload, and a replace asks again.
//! On CI (`CI=true`) a missing engine fails these tests.

use std::time::{Duration, Instant};

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/recorder_rig.rs"]
mod recorder_rig;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::event_times;
use recorder_rig::*;

#[test]
fn a_plugin_that_never_drains_is_overruled_by_the_budget_with_a_warning() {
    let Some(rig) = Rig::start() else { return };
    let since = now_secs();
    let body = "  replicas = 2\n  drain_timeout = \"1s\"";
    rig.apply(&rig.manifest("deployment", "web", body, "    drain = \"never\""));
    let started = Instant::now();
    let scaled = rig.apply(&rig.manifest(
        "deployment",
        "web",
        "  replicas = 1\n  drain_timeout = \"1s\"",
        "    drain = \"never\"",
    ));
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(
        scaled.stderr.contains(
            "(plugin recorder) had not finished draining within its 1s budget; removed anyway"
        ),
        "{scaled:?}"
    );
    let drains = of_kind(&rig.calls(), "drain");
    assert!(
        drains.len() >= 5,
        "polled at the retry_after_ms it gave: {}",
        drains.len()
    );
    let drained = drains[0].drained_replica();
    let destroyed = event_times(&format!("voodu.replica_id={drained}"), "destroy", since);
    assert_eq!(destroyed.len(), 1, "removed after the budget");
    assert!(destroyed[0] - drains[0].at_ns >= 1_000_000_000);
    let described = rig
        .controller
        .vd(&["describe", &format!("deployment/{}/web", rig.scope.name)])
        .success();
    assert!(
        described.stdout.contains("drain-unfinished"),
        "{described:?}"
    );
    assert_eq!(rig.scope.containers().len(), 1);
}

#[test]
fn a_plugin_whose_drain_fails_is_named_and_the_removal_goes_ahead() {
    let Some(rig) = Rig::start() else { return };
    let manifest = |replicas: u32| {
        rig.controller.manifest(
            "web.hcl",
            &format!(
                "deployment \"{scope}\" \"web\" {{\n  image = \"{image}\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n  recorder \"ok\" {{ file = \"{calls}\" }}\n  recorder \"broken\" {{\n    file = \"{calls}\"\n    drain = \"fail\"\n  }}\n}}\n",
                scope = rig.scope.name,
                image = rig.image.name,
                calls = rig.calls.display(),
            ),
        )
    };
    rig.apply(&manifest(2));
    let scaled = rig.apply(&manifest(1));
    assert!(
        scaled.stderr.contains("recorder \"broken\" block (plugin recorder) failed to drain it: plugin recorder failed in drain: the recorder was told to fail drains; removed anyway"),
        "{scaled:?}"
    );
    assert!(
        !scaled.stderr.contains("recorder \"ok\" block (plugin"),
        "{scaled:?}"
    );
    // Both blocks were asked, in parallel, and the replica went at once.
    assert_eq!(of_kind(&rig.calls(), "drain").len(), 2);
    assert_eq!(rig.scope.containers().len(), 1);
}

#[test]
fn an_apply_of_another_workload_does_not_wait_for_a_drain_in_progress() {
    let Some(rig) = Rig::start() else { return };
    let slow = rig.manifest(
        "deployment",
        "slow",
        "  replicas = 2\n  drain_timeout = \"20s\"",
        "    drain = \"never\"",
    );
    rig.apply(&slow);
    let scaled = rig.manifest(
        "deployment",
        "slow",
        "  replicas = 1\n  drain_timeout = \"20s\"",
        "    drain = \"never\"",
    );
    // The scale-down is stored and its drain starts; it cannot finish for
    // 20 s.
    rig.controller
        .vd(&["apply", "--no-wait", "-f", &scaled])
        .success();
    let slow_id = format!("deployment/{}/slow", rig.scope.name);
    wait_for_calls(&rig.calls, Duration::from_secs(10), |calls| {
        calls.iter().any(|c| c.call == "drain")
    });
    // A new workload's whole apply, with its replica started, finishes
    // while the other is still draining.
    let fresh = rig.manifest("deployment", "fresh", "  replicas = 1", "");
    let applied = rig.apply(&fresh);
    assert!(applied.stderr.contains("started replica"), "{applied:?}");
    let still = rig
        .controller
        .vd(&["rollout", "status", &slow_id, "--timeout", "200ms"]);
    assert_eq!(still.code, 1, "{still:?}");
    assert!(
        still
            .stderr
            .contains(&format!("{slow_id} is still progressing: draining replica")),
        "{still:?}"
    );
    assert!(still.stderr.contains("the rollout goes on"), "{still:?}");
    // So does a delete of the new one, drain and removal included.
    rig.controller
        .vd(&["delete", &format!("deployment/{}/fresh", rig.scope.name)])
        .success();
    let described = rig.describe_json("deployment", "slow");
    assert_eq!(described["status"]["phase"], "progressing", "{described:#}");
}

#[test]
fn a_drain_in_flight_during_a_replace_is_asked_again_of_the_new_instance() {
    let Some(rig) = Rig::start() else { return };
    let body = |replicas: u32| format!("  replicas = {replicas}\n  drain_timeout = \"6s\"");
    rig.apply(&rig.manifest("deployment", "web", &body(2), "    drain = \"never\""));
    let file = rig.manifest("deployment", "web", &body(1), "    drain = \"never\"");
    rig.controller
        .vd(&["apply", "--no-wait", "-f", &file])
        .success();
    // A drain is going on: the recorder answers `draining` to every poll.
    wait_for_calls(&rig.calls, Duration::from_secs(10), |calls| {
        calls.iter().any(|call| call.call == "drain")
    });
    let replaced_at_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos();
    rig.controller
        .vd(&["plugins:install", "--replace", &recorder_plugin()])
        .success();
    // The old instance is shut down, so any poll recorded from now on was
    // answered by the new one: the drain goes on there.
    let recorded = wait_for_calls(&rig.calls, Duration::from_secs(5), |calls| {
        calls
            .iter()
            .any(|call| call.call == "drain" && call.at_ns > replaced_at_ns + 50_000_000)
    });
    let drained: Vec<String> = of_kind(&recorded, "drain")
        .iter()
        .map(Call::drained_replica)
        .collect();
    assert!(
        drained.windows(2).all(|pair| pair[0] == pair[1]),
        "one replica is drained, before and after the replace: {drained:?}"
    );
    // The rollout ends at its budget, as it would have without the replace.
    let status = rig.controller.vd(&[
        "rollout",
        "status",
        &format!("deployment/{}/web", rig.scope.name),
        "--timeout",
        "30s",
    ]);
    assert_eq!(status.code, 0, "{status:?}");
    assert_eq!(rig.scope.containers().len(), 1);
}

#[test]
fn a_rollout_whose_drain_hangs_finishes_within_its_budget_plus_the_call_bound() {
    // A call bound (10 s) well above the drain budget (1 s): the budget,
    // not the call bound, ends the removal.
    let Some(rig) = Rig::start_with(|| {
        vd::Controller::start_with_docker_and_plugin_timeout(Duration::from_secs(10))
    }) else {
        return;
    };
    let before_scale_down = hostile_plugin_beside_the_recorder(
        &rig,
        &c_fixture("hang_drain"),
        "hang_drain",
        "hang_drain {}",
        "ready",
        None,
    );
    let scaled = rig.controller.manifest(
        "stuck.hcl",
        &format!(
            "deployment \"{}\" \"stuck\" {{\n  image = \"{}\"\n  ports = [\"8084\"]\n  replicas = 1\n  drain_timeout = \"1s\"\n  hang_drain {{}}\n}}\n",
            rig.scope.name, rig.image.name
        ),
    );
    let (stop, sampler) = sample_get_latency(&rig);
    let started = Instant::now();
    let applied = rig.controller.vd(&["apply", "-f", &scaled]);
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let during = sampler.join().expect("the sampler");
    let slowest = before_scale_down.max(during);
    println!("hung drain: scale-down took {took:?} (budget 1s, call bound 10s); vd get at most {slowest:?}");
    assert_eq!(applied.code, 0, "{applied:?}");
    assert!(
        took < Duration::from_secs(1 + 4),
        "the 1 s budget bounds a drain whose call hangs (call bound 10 s): {took:?}"
    );
    assert!(
        during < Duration::from_secs(1),
        "vd get took {during:?} during the hung drain"
    );
    assert!(
        applied.stderr.contains(
            "hang_drain block (plugin hang_drain) had not finished draining within its 1s budget"
        ),
        "the drain is not named: {applied:?}"
    );
    let events = rig.describe_json("deployment", "stuck")["events"].clone();
    assert!(
        events
            .as_array()
            .is_some_and(|events| events.iter().any(|event| {
                event["reason"] == "drain-unfinished"
                    && event["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("hang_drain block"))
            })),
        "{events:#}"
    );
    // Once the hung call overruns its bound, the plugin is listed wedged.
    wait_until_listed(&rig, "hang_drain", "wedged in drain");
}
