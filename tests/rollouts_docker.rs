//! Rollouts on the real engine: sets published, surge-first updates, scaling, statefulset ordinals, addressing, resources, two roots side by side, `vd up`.
//! On CI (`CI=true`) a missing engine fails these tests.

use std::time::Duration;

use serde_json::json;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/recorder_rig.rs"]
mod recorder_rig;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::{created_ns, docker, engine_available, event_times, voodu0_ip, EchoImage, Scope};
use recorder_rig::*;

#[test]
fn a_three_replica_apply_publishes_one_set_of_three_whose_ips_match_docker() {
    let Some(rig) = Rig::start() else { return };
    let file = rig.manifest("deployment", "web", "  replicas = 3", "");
    let applied = rig.apply(&file);
    assert!(applied.stderr.contains("started replica"), "{applied:?}");

    let publishes = of_kind(&rig.calls(), "publish");
    let full: Vec<&Call> = publishes
        .iter()
        .filter(|p| p.endpoints().len() == 3)
        .collect();
    assert_eq!(full.len(), 1, "{publishes:#?}");
    let containers = rig.scope.containers();
    assert_eq!(containers.len(), 3);
    for (replica_id, address) in full[0].endpoints() {
        let ip = voodu0_ip(&rig.container_name("web", &replica_id));
        assert_eq!(address, format!("{ip}:8084"));
    }
    // Generations rise with each publish.
    let generations: Vec<u64> = publishes
        .iter()
        .map(|p| p.request["generation"].as_u64().unwrap())
        .collect();
    assert!(
        generations.windows(2).all(|pair| pair[0] < pair[1]),
        "{generations:?}"
    );
    // The replica really answers with its id over voodu0's published port.
    let (replica_id, _) = &full[0].endpoints()[0];
    let port = docker(&["port", &rig.container_name("web", replica_id), "8084/tcp"]);
    assert!(
        port.starts_with("127.0.0.1:"),
        "bare ports publish on loopback: {port}"
    );
    let described = rig.describe_json("deployment", "web");
    assert_eq!(described["replicas"].as_array().unwrap().len(), 3);
    assert_eq!(
        described["publications"][0]["endpoints"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn scaling_down_drains_exactly_the_removed_replica_before_its_container_goes() {
    let Some(rig) = Rig::start() else { return };
    let since = now_secs();
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 3", ""));
    let before: Vec<String> = rig.last_published_ids();
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));

    let recorded = rig.calls();
    let drains = of_kind(&recorded, "drain");
    assert_eq!(drains.len(), 1, "{drains:#?}");
    let drained = drains[0].drained_replica();
    assert!(before.contains(&drained));
    let last = of_kind(&recorded, "publish").last().cloned().unwrap();
    assert_eq!(last.endpoints().len(), 2);
    assert!(!last.replica_ids().contains(&drained));
    assert!(
        last.at_ns > drains[0].at_ns,
        "the set is published after the drain"
    );
    let destroyed = event_times(&format!("voodu.replica_id={drained}"), "destroy", since);
    assert_eq!(
        destroyed.len(),
        1,
        "the drained replica's container is gone"
    );
    assert!(
        drains[0].at_ns < destroyed[0],
        "drain came before the container went"
    );
    // No other replica was touched.
    assert_eq!(rig.scope.containers().len(), 2);
}

#[test]
fn an_image_or_env_change_rolls_surge_first() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 3", ""));
    let old: Vec<String> = rig.last_published_ids();
    let mark = rig.calls().len();
    let rolled = rig.apply(&rig.manifest(
        "deployment",
        "web",
        "  replicas = 3\n  env = { RELEASE = \"2\" }",
        "",
    ));
    assert!(rolled.stderr.contains("rolling update"), "{rolled:?}");

    let during: Vec<Call> = rig.calls()[mark..].to_vec();
    let drains = of_kind(&during, "drain");
    assert_eq!(drains.len(), 3, "each old replica is drained once");
    for drain in &drains {
        let drained = drain.drained_replica();
        assert!(old.contains(&drained));
        // The last publish before the drain had four endpoints: the new
        // replica was already serving next to the one being drained.
        let previous = during
            .iter()
            .rfind(|c| c.call == "publish" && c.at_ns < drain.at_ns)
            .expect("a publish before the drain");
        assert_eq!(previous.endpoints().len(), 4, "{during:#?}");
        assert!(previous.replica_ids().contains(&drained));
    }
    // Container creation times interleave with the drains: new, drain, new, drain, ...
    let final_ids: Vec<String> = rig.last_published_ids();
    assert!(final_ids.iter().all(|id| !old.contains(id)));
    let mut created: Vec<u128> = final_ids
        .iter()
        .map(|id| created_ns(&rig.container_name("web", id)))
        .collect();
    created.sort();
    for (index, drain) in drains.iter().enumerate() {
        assert!(
            created[index] < drain.at_ns,
            "new replica {index} was created before drain {index}"
        );
        if let Some(next) = created.get(index + 1) {
            assert!(
                drain.at_ns < *next,
                "drain {index} came before new replica {}",
                index + 1
            );
        }
    }
}

#[test]
fn vd_up_installs_plugins_and_brings_the_deployment_up() {
    if !engine_available() {
        return;
    }
    let image = EchoImage::import();
    let scope = Scope::new();
    let root = tempfile::tempdir().unwrap();
    let calls = root.path().join("calls.jsonl");
    let file = root.path().join("up.vd");
    std::fs::write(
        &file,
        format!(
            "deployment \"{}\" \"up\" {{\n  image = \"{}\"\n  replicas = 2\n  ports = [\"8084\"]\n  recorder {{ file = \"{}\" }}\n}}\n",
            scope.name,
            image.name,
            calls.display()
        ),
    )
    .unwrap();
    let mut up = std::process::Command::new(vd::vd_binary())
        .arg("up")
        .arg("--root")
        .arg(root.path().join("root"))
        .args(["--plugin", &recorder_plugin(), "-f"])
        .arg(&file)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let published = std::panic::catch_unwind(|| {
        wait_for_calls(&calls, Duration::from_secs(20), |calls| {
            calls
                .iter()
                .any(|c| c.call == "publish" && c.endpoints().len() == 2)
        })
    });
    // SAFETY: signalling our own child.
    unsafe { libc::kill(up.id() as libc::pid_t, libc::SIGTERM) };
    let _ = up.wait();
    assert!(published.is_ok(), "vd up never published two replicas");
    assert_eq!(scope.containers().len(), 2);
}

#[test]
fn a_block_whose_spec_changes_is_published_again_without_touching_replicas() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let containers = rig.scope.containers();
    let before = of_kind(&rig.calls(), "publish").last().cloned().unwrap();
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", "    note = \"v2\""));
    let after = of_kind(&rig.calls(), "publish").last().cloned().unwrap();
    assert_eq!(after.request["block"]["spec"]["note"], "v2");
    assert_eq!(after.endpoints(), before.endpoints());
    assert!(after.request["generation"].as_u64() > before.request["generation"].as_u64());
    assert_eq!(
        rig.scope.containers(),
        containers,
        "a block change replaced no container"
    );
}

#[test]
fn dns_addressing_publishes_container_names() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest(
        "deployment",
        "web",
        "  replicas = 2",
        "    addressing = \"dns\"\n    port = 9000",
    ));
    let last = of_kind(&rig.calls(), "publish").last().cloned().unwrap();
    assert_eq!(last.endpoints().len(), 2);
    for (replica_id, address) in last.endpoints() {
        assert_eq!(
            address,
            format!("{}:9000", rig.container_name("web", &replica_id))
        );
    }
}

#[test]
fn a_block_that_wants_no_endpoints_needs_no_port_and_is_never_published_or_drained() {
    let Some(rig) = Rig::start() else { return };
    // No ports on the workload and none named by the block: accepted,
    // because the plugin answered addressing "none".
    let manifest = |replicas: u32| {
        rig.controller.manifest(
            "quiet.hcl",
            &format!(
                "deployment \"{scope}\" \"quiet\" {{\n  image = \"{image}\"\n  replicas = {replicas}\n  recorder {{\n    file = \"{calls}\"\n    addressing = \"none\"\n  }}\n}}\n",
                scope = rig.scope.name,
                image = rig.image.name,
                calls = rig.calls.display(),
            ),
        )
    };
    rig.apply(&manifest(2));
    assert_eq!(rig.scope.containers().len(), 2);
    let described = rig.describe_json("deployment", "quiet");
    assert_eq!(
        described["blocks"][0]["endpoints"],
        json!({"port": null, "addressing": "none"}),
        "{described:#}"
    );
    rig.apply(&manifest(1));
    assert_eq!(rig.scope.containers().len(), 1);
    rig.controller
        .vd(&["delete", &format!("deployment/{}/quiet", rig.scope.name)])
        .success();
    let calls: Vec<String> = wait_for_calls(&rig.calls, Duration::from_secs(10), |calls| {
        !of_kind(calls, "forget").is_empty()
    })
    .into_iter()
    .map(|call| call.call)
    .collect();
    assert!(calls.iter().any(|call| call == "validate"), "{calls:?}");
    assert!(
        !calls
            .iter()
            .any(|call| call == "publish" || call == "drain"),
        "a block with addressing none is sent neither publish nor drain: {calls:?}"
    );
}

#[test]
fn statefulsets_use_ordinals_scale_up_bottom_up_and_down_top_down() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("statefulset", "db", "  replicas = 3", ""));
    let names: Vec<String> = rig
        .scope
        .containers()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names.len(), 3);
    let created: Vec<u128> = (0..3)
        .map(|n| created_ns(&rig.container_name("db", &n.to_string())))
        .collect();
    assert!(
        created[0] < created[1] && created[1] < created[2],
        "bottom-up: {created:?}"
    );
    rig.apply(&rig.manifest("statefulset", "db", "  replicas = 1", ""));
    let order: Vec<String> = of_kind(&rig.calls(), "drain")
        .iter()
        .map(|d| d.drained_replica())
        .collect();
    assert_eq!(order, ["2", "1"], "top-down");
    let left: Vec<String> = rig
        .scope
        .containers()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(left, [rig.container_name("db", "0")]);
}

#[test]
fn a_controller_restart_republishes_the_same_set_without_churn() {
    let Some(mut rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let before = rig.scope.containers();
    let last = of_kind(&rig.calls(), "publish").last().cloned().unwrap();
    let count = rig.calls().len();
    rig.controller.restart();
    let recorded = wait_for_calls(&rig.calls, Duration::from_secs(10), |calls| {
        calls[count.min(calls.len())..]
            .iter()
            .any(|c| c.call == "publish")
    });
    let replayed = recorded[count..]
        .iter()
        .find(|c| c.call == "publish")
        .cloned()
        .unwrap();
    assert_eq!(replayed.endpoints(), last.endpoints());
    assert!(replayed.request["generation"].as_u64() > last.request["generation"].as_u64());
    assert_eq!(rig.scope.containers(), before, "no container was replaced");
}

#[test]
fn max_surge_starts_that_many_new_replicas_before_draining_old_ones() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 4\n  max_surge = 2", ""));
    let mark = rig.calls().len();
    rig.apply(&rig.manifest(
        "deployment",
        "web",
        "  replicas = 4\n  max_surge = 2\n  env = { RELEASE = \"2\" }",
        "",
    ));
    let during = rig.calls()[mark..].to_vec();
    let sizes: Vec<usize> = of_kind(&during, "publish")
        .iter()
        .map(|p| p.endpoints().len())
        .collect();
    assert_eq!(sizes.iter().max(), Some(&6), "{sizes:?}");
    assert_eq!(of_kind(&during, "drain").len(), 4);
    // Two drains at a time: each of the first two drains came before any
    // replica of the second new pair was published.
    let drains = of_kind(&during, "drain");
    let first_full = of_kind(&during, "publish")
        .into_iter()
        .find(|p| p.endpoints().len() == 6)
        .unwrap();
    assert!(drains[0].at_ns > first_full.at_ns && drains[1].at_ns > first_full.at_ns);
    assert_eq!(rig.last_published_ids().len(), 4);
}

#[test]
fn two_controller_roots_on_one_host_never_touch_each_others_replicas() {
    let Some(rig) = Rig::start() else { return };
    let other = vd::Controller::start_with_docker();
    other.vd(&["plugins:install", &recorder_plugin()]).success();
    let text = std::fs::read_to_string(rig.controller.root().join(rig.manifest(
        "deployment",
        "web",
        "  replicas = 2",
        "",
    )))
    .unwrap();
    let other_file = other.manifest("web.hcl", &text.replace("calls.jsonl", "other-calls.jsonl"));
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    other.vd(&["apply", "-f", &other_file]).success();
    // Each sees its own two; the engine runs four; a resync changes nothing.
    let pods = |controller: &vd::Controller| {
        controller
            .vd(&["get", "pods", "-o", "json"])
            .success()
            .json()["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["workload"]["scope"] == rig.scope.name.as_str())
            .map(|r| r["container_id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let mine = pods(&rig.controller);
    let theirs = pods(&other);
    assert_eq!(mine.len(), 2);
    assert_eq!(theirs.len(), 2);
    assert!(mine.iter().all(|id| !theirs.contains(id)));
    assert_eq!(rig.scope.containers().len(), 4);
    other.vd(&["apply", "-f", &other_file]).success();
    assert_eq!(pods(&rig.controller), mine);
    // Deleting it on one root leaves the other's replicas running.
    other
        .vd(&["delete", &format!("deployment/{}/web", rig.scope.name)])
        .success();
    assert!(pods(&other).is_empty());
    assert_eq!(pods(&rig.controller), mine);
    assert_eq!(rig.scope.containers().len(), 2);
}

#[test]
fn resources_are_container_limits_and_an_oom_kill_is_an_event() {
    let Some(rig) = Rig::start() else { return };
    let file = rig.manifest(
        "deployment",
        "limited",
        "  replicas = 1\n  resources {\n    limits {\n      memory = \"64Mi\"\n      cpu    = \"500m\"\n      pids   = 100\n    }\n  }",
        "",
    );
    rig.apply(&file);
    let container = rig.container_name("limited", &rig.last_published_ids()[0]);
    let limits = docker(&[
        "inspect",
        "--format",
        "{{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} {{.HostConfig.NanoCpus}} {{.HostConfig.PidsLimit}}",
        &container,
    ]);
    assert_eq!(limits, "67108864 67108864 500000000 100");

    // A replica that needs more than its limit is OOM-killed, and the
    // event says so.
    let hog = rig.manifest(
        "deployment",
        "hog",
        "  replicas = 1\n  env = { ALLOCATE_MB = \"256\" }\n  resources {\n    limits { memory = \"32Mi\" }\n  }",
        "",
    );
    rig.controller
        .vd(&["apply", "--no-wait", "-f", &hog])
        .success();
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        let described = rig.describe_json("deployment", "hog");
        let oom = described["events"]
            .as_array()
            .is_some_and(|events| events.iter().any(|event| event["reason"] == "oom-killed"));
        if oom {
            Ok(())
        } else {
            Err(format!("no OOM event: {described:#}"))
        }
    });
}

#[test]
fn a_statefulset_s_ordinals_start_in_order_each_once_the_one_below_is_ready_and_resolve_by_name() {
    let Some(rig) = Rig::start() else { return };
    // Each replica answers its readiness probe only 1.5 s after it starts.
    let warmup_ms = 1_500;
    let body = format!(
        "  replicas = 3\n  env = {{ WARMUP_MS = \"{warmup_ms}\" }}\n  probes {{\n    readiness {{\n      http_get {{ path = \"/ready\" }}\n      period = \"200ms\"\n    }}\n  }}"
    );
    let applied = rig.apply(&rig.manifest("statefulset", "db", &body, ""));
    for n in 1..=3 {
        assert!(
            applied.stderr.contains(&format!("starting replica {n}/3")),
            "progress counts each ordinal: {applied:?}"
        );
    }
    let created: Vec<u128> = (0..3)
        .map(|n| created_ns(&rig.container_name("db", &n.to_string())))
        .collect();
    for pair in created.windows(2) {
        let gap_ms = (pair[1] - pair[0]) / 1_000_000;
        assert!(
            gap_ms >= warmup_ms,
            "an ordinal is created only once the one below is ready, which takes {warmup_ms} ms: {created:?}"
        );
    }
    // Every ordinal has its own name on voodu0 beside the shared one, as
    // voodu names them; resolved from ordinal 0's container.
    let scope = &rig.scope.name;
    let from_zero = rig.container_name("db", "0");
    for n in 0..3 {
        let ip = voodu0_ip(&rig.container_name("db", &n.to_string()));
        for name in [format!("db-{n}.{scope}"), format!("db-{n}.{scope}.voodu")] {
            let resolved = docker(&["exec", &from_zero, "/echo-server", "resolve", &name]);
            assert_eq!(resolved, ip, "{name}");
        }
    }
    let shared = docker(&[
        "exec",
        &from_zero,
        "/echo-server",
        "resolve",
        &format!("db.{scope}"),
    ]);
    assert_eq!(
        shared.lines().count(),
        3,
        "the shared name has every ordinal: {shared}"
    );
}
