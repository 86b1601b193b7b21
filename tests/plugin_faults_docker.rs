//! Plugins that misbehave beside the recorder on the real engine: hung, oversized, panicking, segfaulting or flooding plugins are named and the others are served; replaced and reloaded plugins hear every set.
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

use engine::docker;
use recorder_rig::*;

#[test]
fn a_plugin_hung_in_publish_delays_no_other_plugins_blocks() {
    let Some(rig) = Rig::start() else { return };
    let slowest = hostile_plugin_beside_the_recorder(
        &rig,
        &c_fixture("hang_publish"),
        "hang_publish",
        "hang_publish {}",
        "wedged in publish",
        Some("publish-failed"),
    );
    println!("hung publish: vd get at most {slowest:?}");
}

#[test]
fn a_replaced_plugin_revalidates_its_blocks_and_hears_every_set_within_a_second() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let live = rig.last_published_ids();
    let mark = rig.calls().len();
    let replaced_at_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos();
    let installed = rig
        .controller
        .vd(&["plugins:install", "--replace", &recorder_plugin()])
        .success();
    assert!(
        installed.stdout.contains("replacing 0.0.0"),
        "{installed:?}"
    );
    let recorded = wait_for_calls(&rig.calls, Duration::from_secs(5), |calls| {
        calls[mark..]
            .iter()
            .any(|call| call.call == "publish" && call.endpoints().len() == 2)
    });
    let after = &recorded[mark..];
    // The new version validated the stored block before it went live...
    let first = &after[0];
    assert_eq!(first.call, "validate", "{after:#?}");
    assert_eq!(first.request["block"]["type"], "recorder");
    // ...and then heard the whole live set, without a change on Docker.
    let publish = after
        .iter()
        .find(|call| call.call == "publish")
        .expect("a publish to the new instance");
    let mut heard = publish.replica_ids();
    heard.sort();
    let mut expected = live.clone();
    expected.sort();
    assert_eq!(heard, expected);
    let latency_ms = (publish.at_ns.saturating_sub(replaced_at_ns)) / 1_000_000;
    assert!(
        latency_ms < 1_000,
        "the new instance heard the set {latency_ms} ms after the replace began"
    );
    println!("replace to first publish: {latency_ms} ms");
}

#[test]
fn a_plugin_whose_publish_replies_too_much_is_named_and_others_are_served() {
    let Some(rig) = Rig::start() else { return };
    let slowest = hostile_plugin_beside_the_recorder(
        &rig,
        &c_fixture("huge_publish"),
        "huge_publish",
        "huge_publish {}",
        "failing in publish",
        Some("publish-failed"),
    );
    println!("huge publish reply: vd get at most {slowest:?}");
}

#[test]
fn a_plugin_answering_an_unknown_status_is_named_and_others_are_served() {
    let Some(rig) = Rig::start() else { return };
    let slowest = hostile_plugin_beside_the_recorder(
        &rig,
        &c_fixture("bad_status"),
        "bad_status",
        "bad_status {}",
        "failing in publish",
        Some("publish-failed"),
    );
    println!("unknown status: vd get at most {slowest:?}");
}

#[test]
fn a_rust_plugin_panicking_in_publish_is_named_and_others_are_served() {
    let Some(rig) = Rig::start() else { return };
    let panicky = voodu_tests::rust_cdylib("voodu_fixture_panicky")
        .display()
        .to_string();
    let slowest = hostile_plugin_beside_the_recorder(
        &rig,
        &panicky,
        "panicky",
        "panicky { then = \"panic-in-publish\" }",
        "failing in publish",
        Some("publish-failed"),
    );
    println!("panic in publish: vd get at most {slowest:?}");
}

#[test]
fn a_plugin_segfaulting_in_publish_is_quarantined_and_a_new_worker_serves_at_once() {
    let Some(mut rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 1", ""));
    // The supervisor starts a new worker at once, with nobody asking.
    rig.crash_the_worker_in_publish();
    // Every later start would publish to it again; it is quarantined
    // instead, and the new worker serves and publishes the others.
    let before = rig.calls().len();
    let victim = rig.last_published_ids()[0].clone();
    docker(&["kill", &rig.container_name("web", &victim)]);
    wait_for_calls(&rig.calls, Duration::from_secs(15), |calls| {
        let publishes = of_kind(&calls[before..], "publish");
        publishes.iter().any(|p| p.endpoints().is_empty())
            && publishes.last().is_some_and(|p| p.endpoints().len() == 1)
    });
    let listed = rig
        .controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    let failure = listed["failures"]
        .as_array()
        .and_then(|failures| {
            failures.iter().find(|failure| {
                failure["path"]
                    .as_str()
                    .is_some_and(|path| path.ends_with("/segv"))
            })
        })
        .unwrap_or_else(|| panic!("segv is not named: {listed:#}"));
    assert!(
        failure["error"]
            .as_str()
            .is_some_and(|error| error.starts_with(
                "quarantined: the controller crashed with SIGSEGV inside this plugin's publish"
            )),
        "{failure:#}"
    );
    // The workload whose plugin it is has an event that names the plugin
    // and the call.
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        let events = rig.describe_json("deployment", "boom")["events"].clone();
        let named = events.as_array().into_iter().flatten().any(|event| {
            event["reason"] == "plugin_quarantined"
                && event["message"].as_str().is_some_and(|message| {
                    message.starts_with("the controller's worker was killed by signal 11; plugin segv is quarantined: the controller crashed with SIGSEGV inside this plugin's publish")
                })
        });
        if named {
            Ok(())
        } else {
            Err(format!("no quarantine event: {events:#}"))
        }
    });
    // The operator can take it out: delete its workload, then remove it.
    rig.controller
        .vd(&["delete", &format!("deployment/{}/boom", rig.scope.name)])
        .success();
    rig.controller.vd(&["plugins:remove", "segv"]).success();
    rig.controller.restart();
    rig.controller.vd(&["get", "workloads"]).success();
}

#[test]
fn a_reloaded_plugin_hears_every_blocks_current_set_at_once() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    rig.apply(&rig.manifest("deployment", "other", "  replicas = 1", ""));
    let before = rig.calls().len();
    let reloaded_at = Instant::now();
    rig.controller.vd(&["plugins:reload", "recorder"]).success();
    // The fresh instance is sent validate for each stored block, then the
    // live set of each, without waiting for anything to change.
    let calls = wait_for_calls(&rig.calls, Duration::from_secs(5), |calls| {
        let publishes = of_kind(&calls[before..], "publish");
        ["web", "other"].iter().all(|name| {
            publishes
                .iter()
                .any(|publish| publish.request["name"] == *name)
        })
    });
    let took = reloaded_at.elapsed();
    println!("reload to every set published: {took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    let fresh = &calls[before..];
    for (name, replicas) in [("web", 2), ("other", 1)] {
        let last = of_kind(fresh, "publish")
            .into_iter()
            .rfind(|publish| publish.request["name"] == name)
            .expect("published");
        assert_eq!(last.endpoints().len(), replicas, "{name}: {last:#?}");
    }
    assert!(
        of_kind(fresh, "validate").len() >= 2,
        "the stored blocks are validated by the fresh instance: {fresh:#?}"
    );
}

#[test]
fn a_plugin_flooding_the_log_is_rate_limited_and_others_are_served() {
    let Some(rig) = Rig::start() else { return };
    let slowest = hostile_plugin_beside_the_recorder(
        &rig,
        &c_fixture("log_flood"),
        "log_flood",
        "log_flood {}",
        "ready",
        None,
    );
    let listed = rig
        .controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    let dropped = listed["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .find(|row| row["name"] == "log_flood")
        .and_then(|row| row["log_lines_dropped"].as_u64())
        .expect("a count");
    println!("log flood: {dropped} lines dropped; vd get at most {slowest:?}");
    assert!(dropped > 10_000, "{dropped}");
}
