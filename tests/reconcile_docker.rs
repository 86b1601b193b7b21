//! The runtime half of voodu on the real Docker engine: the real `vd`
//! binary and controller, the static echo-server imported as an image, and
//! the `recorder` fixture plugin, which writes every call it receives to a
//! file. On CI (`CI=true`) a missing engine fails these tests.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::{
    created_ns, docker, engine_available, event_times, voodu0_ip, DockerRig, EchoImage, Scope,
};

/// One call the recorder received.
type Call = voodu_tests::RecordedCall;

fn calls(path: &Path) -> Vec<Call> {
    voodu_tests::recorded_calls(path)
}

fn of_kind(calls: &[Call], kind: &str) -> Vec<Call> {
    calls.iter().filter(|c| c.call == kind).cloned().collect()
}

/// Waits up to `timeout` for the recorded calls to satisfy `done`.
fn wait_for_calls(path: &Path, timeout: Duration, done: impl Fn(&[Call]) -> bool) -> Vec<Call> {
    let deadline = Instant::now() + timeout;
    loop {
        let recorded = calls(path);
        if done(&recorded) {
            return recorded;
        }
        assert!(
            Instant::now() < deadline,
            "the recorder never saw it: {recorded:#?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
}

fn recorder_plugin() -> String {
    voodu_tests::rust_cdylib("voodu_fixture_recorder")
        .display()
        .to_string()
}

/// An engine rig with the recorder installed, and the file it records to.
struct Rig {
    base: DockerRig,
    calls: PathBuf,
}

impl std::ops::Deref for Rig {
    type Target = DockerRig;
    fn deref(&self) -> &DockerRig {
        &self.base
    }
}

impl std::ops::DerefMut for Rig {
    fn deref_mut(&mut self) -> &mut DockerRig {
        &mut self.base
    }
}

impl Rig {
    fn start() -> Option<Rig> {
        Rig::start_with(vd::Controller::start_with_docker)
    }

    fn start_with(start_controller: impl FnOnce() -> vd::Controller) -> Option<Rig> {
        let base = DockerRig::start_with(&recorder_plugin(), start_controller)?;
        let calls = base.controller.root().join("calls.jsonl");
        Some(Rig { base, calls })
    }

    /// A manifest for `kind "<scope>" "<name>"` with the recorder block.
    fn manifest(&self, kind: &str, name: &str, body: &str, recorder: &str) -> String {
        self.controller.manifest(
            &format!("{name}.hcl"),
            &format!(
                "{kind} \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  ports = [\"8084\"]\n{body}\n  recorder {{\n    file = \"{calls}\"\n{recorder}\n  }}\n}}\n",
                scope = self.scope.name,
                image = self.image.name,
                calls = self.calls.display(),
            ),
        )
    }

    fn apply(&self, file: &str) -> vd::Run {
        self.controller.vd(&["apply", "-f", file]).success()
    }

    fn calls(&self) -> Vec<Call> {
        calls(&self.calls)
    }

    /// The replica ids of the last publish the recorder received.
    fn last_published_ids(&self) -> Vec<String> {
        of_kind(&self.calls(), "publish")
            .last()
            .expect("a publish was recorded")
            .replica_ids()
    }

    fn container_name(&self, name: &str, replica_id: &str) -> String {
        format!("{}-{name}.{replica_id}", self.scope.name)
    }
}

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
fn a_killed_replica_is_withdrawn_within_250ms_and_readded_when_it_comes_back() {
    let Some(rig) = Rig::start() else { return };
    let since = now_secs();
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let victim = rig.last_published_ids()[0].clone();
    let container = rig.container_name("web", &victim);
    let before_kill = rig.calls().len();
    docker(&["kill", &container]);
    let recorded = wait_for_calls(&rig.calls, Duration::from_secs(5), |calls| {
        calls[before_kill..].iter().any(|c| c.call == "publish")
    });
    let withdrawn = recorded[before_kill..]
        .iter()
        .find(|c| c.call == "publish")
        .cloned()
        .unwrap();
    assert_eq!(withdrawn.endpoints().len(), 1);
    assert!(!withdrawn.replica_ids().contains(&victim));
    let died = event_times(&format!("voodu.replica_id={victim}"), "die", since);
    let latency = Duration::from_nanos(withdrawn.at_ns.saturating_sub(died[0]) as u64);
    assert!(withdrawn.at_ns > died[0], "published after the death");
    assert!(
        latency < Duration::from_millis(250),
        "withdrawn {latency:?} after it died"
    );

    docker(&["start", &container]);
    wait_for_calls(&rig.calls, Duration::from_secs(5), |calls| {
        calls
            .iter()
            .rev()
            .find(|c| c.call == "publish")
            .is_some_and(|c| c.replica_ids().contains(&victim) && c.endpoints().len() == 2)
    });
}

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
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let voodu_containers = docker(&["ps", "-aq", "--filter", "label=createdby=voodu"]);
        let networks = docker(&["network", "ls", "-q", "--filter", "name=^voodu0$"]);
        if networks.is_empty() || !voodu_containers.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "voodu0 outlived the last voodu container"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `vd ARGS` against the rig's controller in the background, its
/// stdout read line by line into a channel.
fn spawn_vd(rig: &Rig, args: &[&str]) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = std::process::Command::new(vd::vd_binary())
        .args(args)
        .env("VOODU_ROOT", rig.controller.root())
        .env("NO_COLOR", "1")
        .current_dir(rig.controller.root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("vd runs");
    let stdout = child.stdout.take().expect("stdout");
    (child, voodu_tests::lines_of(stdout))
}

/// Reads lines until one satisfies `wanted`, within `timeout`.
fn read_until(
    lines: &std::sync::mpsc::Receiver<String>,
    timeout: Duration,
    mut wanted: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                let done = wanted(&line);
                seen.push(line);
                if done {
                    return seen;
                }
            }
            Err(_) => panic!("never saw the line; saw {seen:#?}"),
        }
    }
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
fn a_killed_replica_is_restarted_by_its_event_and_the_death_is_recorded() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 1", ""));
    let victim = rig.last_published_ids()[0].clone();
    let before = rig.calls().len();
    docker(&["kill", &rig.container_name("web", &victim)]);
    // No apply, no resync (30 s away): the event alone brings it back.
    wait_for_calls(&rig.calls, Duration::from_secs(10), |calls| {
        let publishes = of_kind(&calls[before..], "publish");
        publishes.len() >= 2
            && publishes[0].endpoints().is_empty()
            && publishes.last().unwrap().replica_ids() == [victim.clone()]
    });
    let events = rig.describe_json("deployment", "web")["events"].clone();
    let reasons: Vec<(&str, &str)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap(),
                e["message"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        reasons
            .iter()
            .any(|(r, m)| *r == "died" && m.contains("exit code 137")),
        "{reasons:#?}"
    );
    assert!(
        reasons
            .iter()
            .any(|(r, m)| *r == "restarted" && m.contains(&format!("replica {victim}"))),
        "{reasons:#?}"
    );
    // `vd get pods` shows it ready again, restarted once, with its age.
    let pods = rig
        .controller
        .vd(&["get", "pods", &format!("deployment/{}/web", rig.scope.name)])
        .success();
    let header: Vec<&str> = pods
        .stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "WORKLOAD",
            "REPLICA",
            "CONTAINER",
            "STATE",
            "READY",
            "RESTARTS",
            "AGE",
            "ADDRESS",
            "CONTAINER-HASH"
        ],
        "{pods:?}"
    );
    let row: Vec<&str> = pods
        .stdout
        .lines()
        .find(|line| line.contains(&format!(" {victim} ")))
        .expect("the victim's row")
        .split_whitespace()
        .collect();
    assert_eq!(
        (row[3], row[4], row[5]),
        ("running", "yes", "1"),
        "{pods:?}"
    );
    assert!(row[6].ends_with('s'), "age in seconds: {pods:?}");
}

#[test]
fn a_replica_that_keeps_dying_is_shown_crash_looping_with_its_exit_code() {
    let Some(rig) = Rig::start() else { return };
    let file = rig.manifest(
        "deployment",
        "crash",
        "  replicas = 1\n  env = { EXIT_AFTER_MS = \"400\", EXIT_CODE = \"3\" }",
        "",
    );
    rig.controller
        .vd(&["apply", "--no-wait", "-f", &file])
        .success();
    let described =
        voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
            let described = rig.describe_json("deployment", "crash");
            if described["status"]["phase"] == "crash-looping" {
                Ok(described)
            } else {
                Err(format!("never crash-looping: {described:#}"))
            }
        });
    let crash = &described["status"]["crashes"][0];
    assert_eq!(crash["last_exit_code"], 3, "{described:#}");
    assert_eq!(crash["crash_looping"], true);
    assert!(crash["deaths"].as_u64().unwrap() >= 2);
    let text = rig
        .controller
        .vd(&["describe", &format!("deployment/{}/crash", rig.scope.name)])
        .success();
    assert!(text.stdout.contains("status     crash-looping"), "{text:?}");
    assert!(text.stdout.contains("last exit code 3"), "{text:?}");
    // Restarts back off: at most one start per death, and far fewer than a
    // tight loop would make.
    let starts = event_times(
        &format!("voodu.scope={}", rig.scope.name),
        "start",
        now_secs() - 60,
    );
    assert!(starts.len() <= 8, "{} starts", starts.len());
    let waited = rig.controller.vd(&[
        "rollout",
        "status",
        &format!("deployment/{}/crash", rig.scope.name),
    ]);
    assert_eq!(waited.code, 1, "{waited:?}");
    assert!(
        waited.stderr.contains("crash-looping") && waited.stderr.contains("exit code 3"),
        "{waited:?}"
    );
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
fn no_wait_returns_once_stored_and_rollout_status_follows_to_the_end() {
    let Some(rig) = Rig::start() else { return };
    let file = rig.manifest("deployment", "web", "  replicas = 2", "");
    let stored = rig
        .controller
        .vd(&["apply", "--no-wait", "-f", &file])
        .success();
    assert!(!stored.stderr.contains("started replica"), "{stored:?}");
    assert!(stored.stdout.contains("created (revision 1"), "{stored:?}");
    let id = format!("deployment/{}/web", rig.scope.name);
    let followed = rig.controller.vd(&["rollout", "status", &id]).success();
    assert!(
        followed.stdout.contains(&format!("{id}: converged")),
        "{followed:?}"
    );
    assert_eq!(rig.scope.containers().len(), 2);
    // Applying the same again while nothing is left to do waits for
    // nothing, and says so.
    let again = rig.apply(&file);
    assert!(again.stdout.contains("nothing changed"), "{again:?}");
}

#[test]
fn pods_and_events_stream_changes_as_they_happen() {
    let Some(rig) = Rig::start() else { return };
    let id = format!("deployment/{}/web", rig.scope.name);
    let (mut pods, pod_lines) = spawn_vd(&rig, &["get", "pods", "-w", "-o", "json", &id]);
    let (mut events, event_lines) = spawn_vd(&rig, &["events", "-w", "-o", "json", &id]);
    std::thread::sleep(Duration::from_millis(300));
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 1", ""));
    let added = read_until(&pod_lines, Duration::from_secs(10), |line| {
        serde_json::from_str::<Value>(line)
            .is_ok_and(|v| v["change"] == "added" && v["replica"]["state"] == "running")
    });
    let change: Value = serde_json::from_str(added.last().unwrap()).unwrap();
    let replica = change["replica"]["replica_id"].as_str().unwrap().to_owned();
    let started = read_until(&event_lines, Duration::from_secs(10), |line| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| {
            v["reason"] == "replica"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&format!("started replica {replica}")))
        })
    });
    for line in &started {
        let event: Value = serde_json::from_str(line).expect("one JSON object per line");
        assert_eq!(event["workload"]["scope"], rig.scope.name.as_str());
    }
    docker(&["kill", &rig.container_name("web", &replica)]);
    // The controller restarts it at once, so the watch may see it exited,
    // or only running again with a new start: either way, modified.
    read_until(&pod_lines, Duration::from_secs(10), |line| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| {
            v["change"] == "modified" && v["replica"]["replica_id"] == replica.as_str()
        })
    });
    read_until(&event_lines, Duration::from_secs(10), |line| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| v["reason"] == "died")
    });
    let _ = pods.kill();
    let _ = events.kill();
    let _ = pods.wait();
    let _ = events.wait();
}

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
fn ctrl_c_stops_following_a_rollout_never_the_rollout_itself() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let scaled = rig.manifest(
        "deployment",
        "web",
        "  replicas = 1\n  drain_timeout = \"3s\"",
        "    drain = \"never\"",
    );
    let apply = std::process::Command::new(vd::vd_binary())
        .args(["apply", "-f", &scaled])
        .env("VOODU_ROOT", rig.controller.root())
        .env("NO_COLOR", "1")
        .current_dir(rig.controller.root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vd runs");
    wait_for_calls(&rig.calls, Duration::from_secs(10), |calls| {
        calls.iter().any(|c| c.call == "drain")
    });
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(apply.id() as i32, libc::SIGINT) };
    let output = apply.wait_with_output().expect("vd ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    let id = format!("deployment/{}/web", rig.scope.name);
    assert!(
        stderr.contains(&format!(
            "stopped waiting; the rollout goes on in the controller (Ctrl-C never cancels it) — `vd rollout status {id}` follows it again"
        )),
        "{stderr}"
    );
    // The drain runs out its budget and the scale-down finishes anyway.
    let followed = rig.controller.vd(&["rollout", "status", &id]).success();
    assert!(followed.stdout.contains("converged"), "{followed:?}");
    assert_eq!(rig.scope.containers().len(), 1);
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
fn resources_are_container_limits_and_an_oom_kill_is_an_event() {
    let Some(rig) = Rig::start() else { return };
    let file = rig.manifest(
        "deployment",
        "limited",
        "  replicas = 1\n  resources {\n    memory = \"64m\"\n    cpus   = 0.5\n    pids   = 100\n  }",
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
        "  replicas = 1\n  env = { ALLOCATE_MB = \"256\" }\n  resources { memory = \"32m\" }",
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
fn logs_show_every_replicas_lines_with_its_id_and_follow_new_ones() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let mut ids = rig.last_published_ids();
    ids.sort();
    let workload = format!("deployment/{}/web", rig.scope.name);
    let listening = |id: &str| format!("{id} | echo-server {id} listening on port 8084");

    let logs = rig.controller.vd(&["logs", &workload]).success();
    for id in &ids {
        assert!(
            logs.stdout.lines().any(|line| line == listening(id)),
            "{logs:?}"
        );
    }
    let json = rig
        .controller
        .vd(&["logs", &workload, "--tail", "1", "-o", "json"])
        .success();
    let mut lines: Vec<Value> = json
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    lines.sort_by_key(|line| line["replica_id"].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        lines.len(),
        2,
        "one line per replica with --tail 1: {json:?}"
    );
    assert_eq!(lines[0]["replica_id"], ids[0].as_str());
    assert!(rig
        .controller
        .vd(&["logs", &workload, "--since", "1h"])
        .success()
        .stdout
        .contains(&listening(&ids[0])));

    // Following: a line a replica writes later appears, with its id.
    let (mut follower, lines) = spawn_vd(&rig, &["logs", "-f", &workload]);
    // Both replicas' earlier lines come first.
    let mut earlier = 0;
    read_until(&lines, Duration::from_secs(10), |line| {
        if line == listening(&ids[0]) || line == listening(&ids[1]) {
            earlier += 1;
        }
        earlier == 2
    });
    let ip = voodu0_ip(&rig.container_name("web", &ids[1]));
    let mut said = std::net::TcpStream::connect((ip.as_str(), 8084)).expect("the replica listens");
    std::io::Write::write_all(&mut said, b"GET /say/hello-logs HTTP/1.0\r\n\r\n").expect("sent");
    let said_line = format!("{} | said hello-logs", ids[1]);
    read_until(&lines, Duration::from_secs(10), |line| line == said_line);
    let _ = follower.kill();
    let _ = follower.wait();

    let unknown = rig
        .controller
        .vd(&["logs", &format!("deployment/{}/nothing", rig.scope.name)]);
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(unknown.stderr.contains("no such workload"), "{unknown:?}");
}

/// The visible text of a tmux pane.
fn capture_pane(session: &str) -> String {
    let output = std::process::Command::new("tmux")
        .args(["capture-pane", "-p", "-t", session])
        .output()
        .expect("tmux runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn in_a_real_terminal_the_spinner_shows_the_drain_with_its_clock_and_leaves_plain_lines() {
    if !engine::tool_available("tmux") {
        return;
    }
    let Some(rig) = Rig::start() else { return };
    let body = |replicas: u32| format!("  replicas = {replicas}\n  drain_timeout = \"6s\"");
    rig.apply(&rig.manifest("deployment", "web", &body(2), "    drain = \"never\""));
    let file = rig.manifest("deployment", "web", &body(1), "    drain = \"never\"");
    let session = format!("vd-{}", rig.scope.name);
    let command = format!(
        "cd {root} && VOODU_ROOT={root} {vd} apply -f {file}; echo exit=$?; sleep 60",
        root = rig.controller.root().display(),
        vd = vd::vd_binary().display(),
    );
    let started = std::process::Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-x",
            "160",
            "-y",
            "40",
            "-s",
            &session,
            &command,
        ])
        .status()
        .expect("tmux runs");
    assert!(started.success());
    struct Kill(String);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = std::process::Command::new("tmux")
                .args(["kill-session", "-t", &self.0])
                .status();
        }
    }
    let _kill = Kill(session.clone());

    // While the drain runs, the spinner names it, its block, and its clock
    // against the budget.
    let deadline = Instant::now() + Duration::from_secs(20);
    let during = loop {
        let pane = capture_pane(&session);
        if let Some(line) = pane.lines().find(|line| line.contains("draining replica")) {
            if line.contains("s of 6s") && !line.trim_end().ends_with("0s of 6s") {
                break pane;
            }
        }
        assert!(Instant::now() < deadline, "no drain on screen: {pane}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let drain_line = during
        .lines()
        .find(|line| line.contains("draining replica"))
        .expect("the drain line");
    assert!(
        drain_line.contains("(recorder block)"),
        "the block being drained is named: {during}"
    );
    // Once done: plain lines, the warning, and no spinner left behind.
    let after =
        voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
            let pane = capture_pane(&session);
            if pane.contains("exit=") {
                Ok(pane)
            } else {
                Err(format!("the apply never ended: {pane}"))
            }
        });
    println!(
        "--- during the drain ---\n{}\n--- after ---\n{}",
        during.trim_end(),
        after.trim_end()
    );
    assert!(after.contains("exit=0"), "{after}");
    assert!(
        after.contains("had not finished draining within its 6s budget"),
        "the warning is printed: {after}"
    );
    assert!(after.contains("removed replica"), "{after}");
    // The warning is printed when the budget runs out: before the removal
    // it led to and before the apply's summary, not after.
    let position = |needle: &str| {
        after
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} is on screen: {after}"))
    };
    assert!(
        position("had not finished draining") < position("removed replica")
            && position("removed replica") < position(": updated (revision 2"),
        "warning, then removal, then the summary: {after}"
    );
    assert!(
        !after.lines().any(|line| line.contains("draining replica")),
        "the spinner's last frame is not left behind: {after}"
    );
}

#[test]
fn on_the_engine_dry_runs_run_nothing_json_steps_stream_filters_filter_and_rollback_rolls() {
    let Some(rig) = Rig::start() else { return };
    let body = |replicas: u32| format!("  replicas = {replicas}\n  drain_timeout = \"1s\"");
    let web = format!("deployment/{}/web", rig.scope.name);
    rig.apply(&rig.manifest("deployment", "web", &body(2), "    drain = \"never\""));
    rig.apply(&rig.manifest("deployment", "other", "  replicas = 1", ""));
    let containers_of = |name: &str| {
        rig.scope
            .containers()
            .into_iter()
            .filter(|(container, _)| container.starts_with(&format!("{}-{name}.", rig.scope.name)))
            .count()
    };
    assert_eq!((containers_of("web"), containers_of("other")), (2, 1));

    // `get pods KIND/SCOPE/NAME` shows that workload's replicas only.
    let pods = rig
        .controller
        .vd(&["get", "pods", &web, "-o", "json"])
        .success()
        .json();
    let names: Vec<&str> = pods["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter_map(|replica| replica["workload"]["name"].as_str())
        .collect();
    assert_eq!(names, ["web", "web"], "{pods:#}");

    // A dry run of a scale-up and an image change runs nothing.
    let events_before = rig.describe_json("deployment", "web")["events"]
        .as_array()
        .map_or(0, Vec::len);
    let planned = rig
        .controller
        .vd(&[
            "apply",
            "--dry-run",
            "-f",
            &rig.manifest(
                "deployment",
                "web",
                &format!("{}\n  env = {{ A = \"1\" }}", body(4)),
                "    drain = \"never\"",
            ),
        ])
        .success();
    assert!(
        planned.stdout.contains("dry run: nothing was stored"),
        "{planned:?}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(containers_of("web"), 2, "a dry run starts nothing");
    let described = rig.describe_json("deployment", "web");
    assert_eq!(described["revision"], 1);
    assert_eq!(
        described["events"].as_array().map_or(0, Vec::len),
        events_before,
        "a dry run records nothing"
    );

    // `-o json` streams the runtime steps too: the drain as a step, its
    // overrun as a warning, the removal as a runtime line.
    let scaled = rig.controller.vd(&[
        "apply",
        "-o",
        "json",
        "-f",
        &rig.manifest("deployment", "web", &body(1), "    drain = \"never\""),
    ]);
    assert_eq!(scaled.code, 0, "{scaled:?}");
    let steps: Vec<Value> = scaled
        .stderr
        .lines()
        .map(|line| serde_json::from_str(line).expect("each step is a JSON line"))
        .collect();
    let has = |kind: &str, text: &str| {
        steps.iter().any(|step| {
            step["step"] == kind
                && step["workload"] == web.as_str()
                && step["message"].as_str().is_some_and(|m| m.contains(text))
        })
    };
    assert!(has("step", "draining replica"), "{steps:#?}");
    assert!(
        has("warning", "had not finished draining within its 1s budget"),
        "{steps:#?}"
    );
    assert!(has("runtime", "(scale down)"), "{steps:#?}");
    assert_eq!(containers_of("web"), 1);

    // Rollback to revision 1 rolls the replicas back to two, as revision 3.
    let rolled = rig.controller.vd(&["rollback", &web, "--to", "1"]);
    assert_eq!(rolled.code, 0, "{rolled:?}");
    assert_eq!(containers_of("web"), 2, "{rolled:?}");
    assert_eq!(rig.describe_json("deployment", "web")["revision"], 3);
    assert_eq!(containers_of("other"), 1, "other workloads are untouched");
}

/// Samples `vd get workloads` every 200 ms on a thread of its own until
/// the returned flag is set; the join handle gives the slowest answer.
fn sample_get_latency(
    rig: &Rig,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<Duration>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let root = rig.controller.root().to_owned();
    let sampler = std::thread::spawn(move || {
        let mut slowest = Duration::ZERO;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let started = Instant::now();
            let status = std::process::Command::new(vd::vd_binary())
                .args(["get", "workloads"])
                .env("VOODU_ROOT", &root)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("vd runs");
            assert!(status.success(), "vd get failed beside a hostile plugin");
            slowest = slowest.max(started.elapsed());
            std::thread::sleep(Duration::from_millis(200));
        }
        slowest
    });
    (stop, sampler)
}

/// A misbehaving plugin at runtime: installs it, applies a two-replica
/// workload with `block`, and checks while it misbehaves that a killed
/// replica of the recorder's workload is withdrawn and published again,
/// that `vd get` answers in under a second throughout, and that the plugin
/// is listed with `state` and named in its workload's events (when
/// `event_reason` is given). Returns the slowest `vd get`.
fn hostile_plugin_beside_the_recorder(
    rig: &Rig,
    plugin_file: &str,
    plugin: &str,
    block: &str,
    state: &str,
    event_reason: Option<&str>,
) -> Duration {
    rig.controller
        .vd(&["plugins:install", plugin_file])
        .success();
    let (stop, sampler) = sample_get_latency(rig);
    let stuck = rig.controller.manifest(
        "stuck.hcl",
        &format!(
            "deployment \"{}\" \"stuck\" {{\n  image = \"{}\"\n  ports = [\"8084\"]\n  replicas = 2\n  drain_timeout = \"2s\"\n  {block}\n}}\n",
            rig.scope.name, rig.image.name
        ),
    );
    rig.controller
        .vd(&["apply", "--no-wait", "-f", &stuck])
        .success();
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 1", ""));
    let victim = rig.last_published_ids()[0].clone();
    let before = rig.calls().len();
    docker(&["kill", &rig.container_name("web", &victim)]);
    wait_for_calls(&rig.calls, Duration::from_secs(15), |calls| {
        let publishes = of_kind(&calls[before..], "publish");
        publishes.iter().any(|p| p.endpoints().is_empty())
            && publishes.last().is_some_and(|p| p.endpoints().len() == 1)
    });
    wait_until_listed(rig, plugin, state);
    if let Some(reason) = event_reason {
        voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
            let events = rig.describe_json("deployment", "stuck")["events"].clone();
            let named = events.as_array().is_some_and(|events| {
                events.iter().any(|event| {
                    event["reason"] == reason
                        && event["message"]
                            .as_str()
                            .is_some_and(|message| message.contains(&format!("{plugin} block")))
                })
            });
            if named {
                Ok(())
            } else {
                Err(format!("no {reason} event names {plugin}: {events:#}"))
            }
        });
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let slowest = sampler.join().expect("the sampler");
    assert!(
        slowest < Duration::from_secs(1),
        "vd get took {slowest:?} beside {plugin}"
    );
    slowest
}

/// A C failure fixture's path, as `vd plugins:install` takes it.
fn c_fixture(name: &str) -> String {
    voodu_tests::c_fixture(name).display().to_string()
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

/// Waits up to 20 s for `vd plugins:list` to show `plugin` in `state`.
fn wait_until_listed(rig: &DockerRig, plugin: &str, state: &str) {
    voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        let listed = rig.controller.vd(&["plugins:list"]).success();
        if listed
            .stdout
            .lines()
            .any(|line| line.starts_with(plugin) && line.contains(state))
        {
            Ok(())
        } else {
            Err(format!("{plugin} is not listed {state}: {listed:?}"))
        }
    });
}

#[test]
fn a_plugin_segfaulting_in_publish_is_quarantined_and_the_controller_serves_from_its_next_start() {
    let Some(mut rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 1", ""));
    rig.controller
        .vd(&["plugins:install", &c_fixture("segv")])
        .success();
    let boom = rig.controller.manifest(
        "boom.hcl",
        &format!(
            "deployment \"{}\" \"boom\" {{\n  image = \"{}\"\n  ports = [\"8084\"]\n  segv {{}}\n}}\n",
            rig.scope.name, rig.image.name
        ),
    );
    // The replica starts, the publish to segv crashes the controller.
    let crashed = rig.controller.vd(&["apply", "-f", &boom]);
    assert_ne!(crashed.code, 0, "{crashed:?}");
    // Every later start would publish to it again; it is quarantined
    // instead, and the controller keeps serving and publishing the others.
    rig.controller.restart();
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

/// A small deterministic generator for the crash test's choices, seeded
/// from the clock and printed, so a failing run can be replayed with
/// `VOODU_CRASH_SEED`.
struct Dice(u64);

impl Dice {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

/// The stored `replicas` and `env.ROUND` of a workload, if it is stored.
fn stored_round(rig: &Rig, name: &str) -> Option<(u64, String)> {
    let listed = rig
        .controller
        .vd(&["get", "workloads", "-o", "json"])
        .success()
        .json();
    let present = listed["workloads"]
        .as_array()
        .expect("workloads")
        .iter()
        .any(|workload| workload["id"]["name"] == name);
    if !present {
        return None;
    }
    let described = rig.describe_json("deployment", name);
    let core = &described["core_spec"];
    Some((
        core["replicas"].as_u64().expect("replicas"),
        core["env"]["ROUND"].as_str().unwrap_or("").to_owned(),
    ))
}

#[test]
fn sigkill_at_random_points_never_loses_or_half_applies_anything() {
    let Some(mut rig) = Rig::start() else { return };
    let kills: u64 = std::env::var("VOODU_CRASH_KILLS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(12);
    let seed = std::env::var("VOODU_CRASH_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(now_secs);
    println!("crash test: {kills} kills, seed {seed}");
    let mut dice = Dice(seed);
    let body = |replicas: u64, round: u64| {
        format!(
            "  replicas = {replicas}\n  drain_timeout = \"1s\"\n  env = {{ ROUND = \"{round}\" }}"
        )
    };
    // `web` rolls and scales (its drains take the whole budget); `gone` is
    // applied and deleted in turn.
    let mut web_rounds: Vec<(u64, String)> = vec![(2, "0".into())];
    rig.apply(&rig.manifest("deployment", "web", &body(2, 0), "    drain = \"never\""));
    let mut failures = Vec::new();
    let mut gone_stored = false;
    for round in 1..=kills {
        let action = dice.below(3);
        let (args, file): (Vec<String>, Option<String>) = match action {
            0 | 1 => {
                let replicas = 1 + dice.below(3);
                web_rounds.push((replicas, round.to_string()));
                let file = rig.manifest(
                    "deployment",
                    "web",
                    &body(replicas, round),
                    "    drain = \"never\"",
                );
                (
                    vec![
                        "apply".into(),
                        "--no-wait".into(),
                        "-f".into(),
                        file.clone(),
                    ],
                    Some(file),
                )
            }
            _ if gone_stored => (
                vec![
                    "delete".into(),
                    "--no-wait".into(),
                    format!("deployment/{}/gone", rig.scope.name),
                ],
                None,
            ),
            _ => {
                let file = rig.manifest("deployment", "gone", &body(2, round), "");
                (
                    vec![
                        "apply".into(),
                        "--no-wait".into(),
                        "-f".into(),
                        file.clone(),
                    ],
                    Some(file),
                )
            }
        };
        let _ = file;
        let command = std::process::Command::new(vd::vd_binary())
            .args(&args)
            .env("VOODU_ROOT", rig.controller.root())
            .current_dir(rig.controller.root())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("vd runs");
        // Anywhere from during the request to deep in the rollout.
        std::thread::sleep(Duration::from_millis(dice.below(2500)));
        rig.controller.kill_hard();
        let mut command = command;
        let _ = command.wait();
        rig.controller.restart();

        // The store opened (the controller serves); each apply is there
        // whole or not at all.
        let web = stored_round(&rig, "web");
        match &web {
            Some((replicas, round)) => {
                if !web_rounds.iter().any(|(r, n)| r == replicas && n == round) {
                    failures.push(format!("round {round}: web holds replicas {replicas} with ROUND {round}, which no apply wrote"));
                }
            }
            None => failures.push(format!("round {round}: web is gone")),
        }
        gone_stored = stored_round(&rig, "gone").is_some();

        // It converges to what is stored, with no orphan and nothing left
        // of a deleted workload.
        let status = rig.controller.vd(&[
            "rollout",
            "status",
            &format!("deployment/{}/web", rig.scope.name),
            "--timeout",
            "90s",
        ]);
        if status.code != 0 {
            failures.push(format!("round {round}: web did not converge: {status:?}"));
            continue;
        }
        if gone_stored {
            let _ = rig.controller.vd(&[
                "rollout",
                "status",
                &format!("deployment/{}/gone", rig.scope.name),
                "--timeout",
                "90s",
            ]);
        }
        let expected = web.map_or(0, |(replicas, _)| replicas) as usize;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let containers = rig.scope.containers();
            let web_count = containers
                .iter()
                .filter(|(name, _)| name.contains("-web."))
                .count();
            let gone_count = containers
                .iter()
                .filter(|(name, _)| name.contains("-gone."))
                .count();
            let stray = containers
                .iter()
                .filter(|(name, _)| !name.contains("-web.") && !name.contains("-gone."))
                .count();
            let gone_ok = if gone_stored {
                gone_count == 2
            } else {
                gone_count == 0
            };
            if web_count == expected && gone_ok && stray == 0 {
                break;
            }
            if Instant::now() > deadline {
                failures.push(format!("round {round}: containers {containers:?}, expected {expected} of web and gone stored {gone_stored}"));
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        // The recorder was re-published the current set.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let running: std::collections::BTreeSet<String> = rig
                .scope
                .containers()
                .iter()
                .filter(|(name, _)| name.contains("-web."))
                .filter_map(|(name, _)| name.rsplit('.').next().map(str::to_owned))
                .collect();
            let published: std::collections::BTreeSet<String> = rig
                .calls()
                .iter()
                .rfind(|call| call.call == "publish" && call.request["name"] == "web")
                .map(|call| call.replica_ids().into_iter().collect())
                .unwrap_or_default();
            if published == running {
                break;
            }
            if Instant::now() > deadline {
                failures.push(format!(
                    "round {round}: published {published:?}, running {running:?}"
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    println!("crash test: {kills} kills, {} failures", failures.len());
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
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
