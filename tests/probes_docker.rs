//! Probes on the real engine: readiness gates the endpoint set and the
//! rollout, a replica that never gets ready fails the rollout within its
//! progress deadline, and liveness restarts a hung replica. The echo-server
//! warms up (`WARMUP_MS`), flips its readiness (`/toggle-ready`) and hangs
//! (`/hang`) on request. On CI (`CI=true`) a missing engine fails these
//! tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::{voodu0_ip, DockerRig};
use voodu_tests::{free_port, recorded_publishes};

/// One HTTP GET; the status code and the body.
fn get(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: test\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP status in {answer:?}")))?;
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    Ok((code, body.trim().to_owned()))
}

/// Held by every test here: they run one at a time, so that the latency
/// is not measured while another test loads this 2-core machine.
static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timing() -> std::sync::MutexGuard<'static, ()> {
    TIMING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn replica_address(rig: &DockerRig, name: &str, replica_id: &str) -> SocketAddr {
    let ip = voodu0_ip(&format!("{}-{name}.{replica_id}", rig.scope.name));
    SocketAddr::new(ip.parse().expect("an IP"), 8084)
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos()
}

/// What a load run saw.
#[derive(Debug, Default)]
struct Load {
    ok: AtomicUsize,
    not_200: AtomicUsize,
    failed: AtomicUsize,
}

impl Load {
    fn total(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
            + self.not_200.load(Ordering::Relaxed)
            + self.failed.load(Ordering::Relaxed)
    }
}

/// Rolls the traffik-fronted deployment (`apply` with a new env) while 50
/// clients send requests, until the roll is done and at least 10,000
/// requests were made.
fn roll_under_load(apply: impl FnOnce(), through: SocketAddr) -> Load {
    let load = Arc::new(Load::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..50)
        .map(|_| {
            let (load, stop) = (load.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match get(through, "/") {
                        Ok((200, _)) => load.ok.fetch_add(1, Ordering::Relaxed),
                        Ok(_) => load.not_200.fetch_add(1, Ordering::Relaxed),
                        Err(_) => load.failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    while load.total() < 1_000 {
        std::thread::sleep(Duration::from_millis(10));
    }
    apply();
    voodu_tests::wait_until(Duration::from_secs(120), Duration::from_millis(10), || {
        if load.total() >= 10_000 {
            Ok(())
        } else {
            Err(format!("too slow: {load:?}"))
        }
    });
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().expect("a client thread");
    }
    Arc::try_unwrap(load).expect("the clients are done")
}

#[test]
fn a_readiness_probe_turns_a_rolls_503s_from_warming_replicas_into_none() {
    let _timing = timing();
    let Some(rig) = DockerRig::with_rust_plugin("voodu_traffik") else {
        return;
    };
    let through = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let manifest = |release: u32, probes: &str| {
        rig.controller.manifest(
            "web.hcl",
            &format!(
                "deployment \"{scope}\" \"web\" {{\n  image = \"{image}\"\n  replicas = 3\n  ports = [\"8084\"]\n  env = {{ WARMUP_MS = \"1500\", RELEASE = \"{release}\" }}\n{probes}\n  traffik \"http\" {{\n    port = 8084\n    bind = \"{through}\"\n  }}\n}}\n",
                scope = rig.scope.name,
                image = rig.image.name,
            ),
        )
    };
    let probe = "  probes {\n    readiness {\n      http_get { path = \"/ready\" }\n      period = \"200ms\"\n      failure_threshold = 1\n    }\n  }";

    // Without a probe, a new replica is published as soon as it runs, and
    // answers 503 while it warms up.
    rig.controller
        .vd(&["apply", "-f", &manifest(1, "")])
        .success();
    std::thread::sleep(Duration::from_millis(1_600));
    let without = roll_under_load(
        || {
            rig.controller
                .vd(&["apply", "-f", &manifest(2, "")])
                .success();
        },
        through,
    );
    // With one, it is published only once ready.
    rig.controller
        .vd(&["apply", "-f", &manifest(3, probe)])
        .success();
    let with = roll_under_load(
        || {
            rig.controller
                .vd(&["apply", "-f", &manifest(4, probe)])
                .success();
        },
        through,
    );
    println!(
        "without a readiness probe: {} non-200 and {} failed of {} requests; with one: {} non-200 and {} failed of {}",
        without.not_200.load(Ordering::Relaxed),
        without.failed.load(Ordering::Relaxed),
        without.total(),
        with.not_200.load(Ordering::Relaxed),
        with.failed.load(Ordering::Relaxed),
        with.total(),
    );
    assert!(
        without.not_200.load(Ordering::Relaxed) > 0,
        "the test must tell the difference: {without:?}"
    );
    assert_eq!(with.not_200.load(Ordering::Relaxed), 0, "{with:?}");
    assert_eq!(with.failed.load(Ordering::Relaxed), 0, "{with:?}");
    assert!(with.total() >= 10_000 && without.total() >= 10_000);
}

/// The engine rig with the recorder plugin, and the file it records to.
fn recorder_rig() -> Option<(DockerRig, PathBuf)> {
    let rig = DockerRig::with_rust_plugin("voodu_fixture_recorder")?;
    let calls = rig.controller.root().join("calls.jsonl");
    Some((rig, calls))
}

fn recorded_manifest(rig: &DockerRig, calls: &std::path::Path, name: &str, body: &str) -> String {
    rig.controller.manifest(
        &format!("{name}.hcl"),
        &format!(
            "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  ports = [\"8084\"]\n{body}\n  recorder {{ file = \"{calls}\" }}\n}}\n",
            scope = rig.scope.name,
            image = rig.image.name,
            calls = calls.display(),
        ),
    )
}

/// Waits for the first publish after `since_ns` whose set satisfies `done`;
/// returns when it was received.
fn publish_after(
    calls: &std::path::Path,
    since_ns: u128,
    done: impl Fn(&[String]) -> bool,
) -> u128 {
    // Not too often: the time measured is the plugin's own, and a busy
    // loop here would only slow the controller down on 2 cores.
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(10), || {
        recorded_publishes(calls)
            .into_iter()
            .find(|publish| publish.at_ns > since_ns && done(&publish.replica_ids))
            .map(|publish| publish.at_ns)
            .ok_or("no such publish")
    })
}

#[test]
fn a_replica_that_turns_unready_is_withdrawn_within_an_interval_and_added_back() {
    let _timing = timing();
    let Some((rig, calls)) = recorder_rig() else {
        return;
    };
    let body = "  replicas = 2\n  probes {\n    readiness {\n      http_get { path = \"/ready\" }\n      period = \"200ms\"\n      failure_threshold = 1\n    }\n  }";
    rig.controller
        .vd(&["apply", "-f", &recorded_manifest(&rig, &calls, "web", body)])
        .success();
    let live = recorded_publishes(&calls)
        .last()
        .expect("a publish")
        .replica_ids
        .clone();
    assert_eq!(live.len(), 2, "both replicas are ready and published");
    let flipped = &live[0];
    let address = replica_address(&rig, "web", flipped);
    let mut latencies_ms = Vec::new();
    // One flip and back first, not counted: the controller's first
    // readiness event and pass after the apply settle.
    for flip in 0..21 {
        let turned = now_ns();
        let (_, state) = get(address, "/toggle-ready").expect("the replica answers");
        assert_eq!(state, "not ready");
        let withdrawn = publish_after(&calls, turned, |ids| !ids.contains(flipped));
        if flip > 0 {
            latencies_ms.push((withdrawn - turned) as f64 / 1e6);
        }
        let back = now_ns();
        get(address, "/toggle-ready").expect("the replica answers");
        publish_after(&calls, back, |ids| ids.contains(flipped) && ids.len() == 2);
    }
    latencies_ms.sort_by(f64::total_cmp);
    let p50 = latencies_ms[latencies_ms.len() / 2];
    let p99 = latencies_ms[latencies_ms.len() - 1];
    println!("withdrawal after a readiness flip, 20 flips: p50 {p50:.0} ms, p99 {p99:.0} ms (interval 200 ms): {latencies_ms:.0?}");
    assert!(
        p99 <= 300.0,
        "withdrawn within one interval plus 100 ms: {latencies_ms:?}"
    );
    // Every withdrawal and every return is a fresh generation.
    let generations: Vec<u64> = recorded_publishes(&calls)
        .iter()
        .filter(|publish| publish.workload_name == "web")
        .map(|publish| publish.generation)
        .collect();
    assert!(
        generations.len() > 2 * 21 && generations.windows(2).all(|pair| pair[0] < pair[1]),
        "each set has a fresh generation: {generations:?}"
    );
    let described = rig.describe_json("deployment", "web");
    let events = described["events"].as_array().expect("events");
    assert!(
        events.iter().any(|event| event["reason"] == "readiness"
            && event["message"].as_str().is_some_and(
                |m| m.contains("is not ready: readiness http_get :8084/ready: answered 503")
            )),
        "{described:#}"
    );
}

#[test]
fn a_replica_never_ready_fails_the_rollout_within_its_deadline_and_the_old_keep_serving() {
    let _timing = timing();
    let Some((rig, calls)) = recorder_rig() else {
        return;
    };
    let body = |warmup: &str| {
        format!("  replicas = 2\n  progress_deadline = \"4s\"\n  env = {{ WARMUP_MS = \"{warmup}\" }}\n  probes {{\n    readiness {{\n      http_get {{ path = \"/ready\" }}\n      period = \"200ms\"\n    }}\n  }}")
    };
    rig.controller
        .vd(&[
            "apply",
            "-f",
            &recorded_manifest(&rig, &calls, "web", &body("0")),
        ])
        .success();
    let old = recorded_publishes(&calls)
        .last()
        .expect("a publish")
        .replica_ids
        .clone();
    let started = Instant::now();
    let failed = rig.controller.vd(&[
        "apply",
        "-f",
        &recorded_manifest(&rig, &calls, "web", &body("600000")),
    ]);
    assert_eq!(failed.code, 1, "{failed:?}");
    let took = started.elapsed();
    assert!(
        took > Duration::from_secs(4) && took < Duration::from_secs(4 + 8),
        "fails once the 4 s deadline has passed, not long after: {took:?} {failed:?}"
    );
    // It names the new replica, not one of the old.
    let named = failed
        .stderr
        .split(" was not ready within")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .expect("a replica is named");
    assert!(
        failed
            .stderr
            .contains(&format!("replica {named} was not ready"))
            && !old.iter().any(|id| id == named),
        "the new replica is named: {failed:?}"
    );
    assert!(
        failed.stderr.contains("was not ready within the progress deadline of 4s: readiness http_get :8084/ready: answered 503"),
        "{failed:?}"
    );
    // The old replicas were never drained, and still serve.
    let last = recorded_publishes(&calls)
        .last()
        .expect("a publish")
        .replica_ids
        .clone();
    let mut sorted_old = old.clone();
    sorted_old.sort();
    let mut sorted_last = last.clone();
    sorted_last.sort();
    assert_eq!(sorted_last, sorted_old);
    for replica in &old {
        let (code, body) = get(replica_address(&rig, "web", replica), "/").expect("it answers");
        assert_eq!((code, body.as_str()), (200, replica.as_str()));
    }
    let described = rig.describe_json("deployment", "web");
    assert_eq!(described["status"]["phase"], "failed", "{described:#}");
    assert!(
        described["status"]["error"]
            .as_str()
            .is_some_and(
                |error| error.contains("was not ready within the progress deadline")
                    && error.contains("readiness http_get :8084/ready: answered 503")
            ),
        "describe names the replica, the probe and its last failure: {described:#}"
    );
}

#[test]
fn a_hung_replica_is_restarted_by_its_liveness_probe() {
    let _timing = timing();
    let Some((rig, calls)) = recorder_rig() else {
        return;
    };
    let body = "  replicas = 1\n  probes {\n    liveness {\n      http_get { path = \"/\" }\n      period = \"300ms\"\n      timeout = \"300ms\"\n      failure_threshold = 2\n    }\n  }";
    rig.controller
        .vd(&["apply", "-f", &recorded_manifest(&rig, &calls, "web", body)])
        .success();
    let replica = recorded_publishes(&calls)
        .last()
        .expect("a publish")
        .replica_ids[0]
        .clone();
    let address = replica_address(&rig, "web", &replica);
    get(address, "/hang").expect("it answers before it hangs");
    voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        let described = rig.describe_json("deployment", "web");
        let reasons: Vec<&str> = described["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter_map(|event| event["reason"].as_str())
            .collect();
        if reasons.contains(&"liveness-failed") && reasons.contains(&"restarted") {
            Ok(())
        } else {
            Err(format!("not restarted: {described:#}"))
        }
    });
    // The restarted replica answers again.
    let address = replica_address(&rig, "web", &replica);
    voodu_tests::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match get(address, "/") {
            Ok((200, _)) => Ok(()),
            other => Err(format!("the restarted replica never answered: {other:?}")),
        },
    );
}

/// When the first publish listing `replica_id` was received, if any.
fn first_published(calls: &std::path::Path, replica_id: &str) -> Option<u128> {
    recorded_publishes(calls)
        .into_iter()
        .find(|publish| publish.replica_ids.iter().any(|id| id == replica_id))
        .map(|publish| publish.at_ns)
}

#[test]
fn an_images_healthcheck_and_an_exec_probe_each_gate_the_endpoint_set() {
    let _timing = timing();
    let Some((rig, calls)) = recorder_rig() else {
        return;
    };
    let checked = engine::EchoImage::import_with_healthcheck("300ms");
    let manifest = |name: &str, image: &str, body: &str| {
        rig.controller.manifest(
            &format!("{name}.hcl"),
            &format!(
                "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  ports = [\"8084\"]\n  env = {{ WARMUP_MS = \"2000\" }}\n{body}\n  recorder {{ file = \"{calls}\" }}\n}}\n",
                scope = rig.scope.name,
                calls = calls.display(),
            ),
        )
    };

    // The image's HEALTHCHECK: published only once Docker says healthy.
    rig.controller
        .vd(&["apply", "-f", &manifest("health", &checked.name, "")])
        .success();
    let described = rig.describe_json("deployment", "health");
    let replica = described["replicas"][0]["replica_id"]
        .as_str()
        .expect("a replica")
        .to_owned();
    let container = format!("{}-health.{replica}", rig.scope.name);
    let started = engine::created_ns(&container);
    let published = first_published(&calls, &replica).expect("published once healthy");
    assert!(
        published >= started + 2_000_000_000,
        "published {} ms after it was created, inside its 2 s warm-up",
        (published - started) / 1_000_000
    );
    // Made unready, it turns unhealthy and is withdrawn.
    let turned = now_ns();
    get(replica_address(&rig, "health", &replica), "/toggle-ready").expect("it answers");
    publish_after(&calls, turned, |ids| !ids.contains(&replica));

    // An exec probe, run through Docker exec: the same gate.
    let probe = "  probes {\n    readiness {\n      exec { command = [\"/echo-server\", \"health\"] }\n      period = \"200ms\"\n    }\n  }";
    rig.controller
        .vd(&["apply", "-f", &manifest("exec", &rig.image.name, probe)])
        .success();
    let described = rig.describe_json("deployment", "exec");
    let replica = described["replicas"][0]["replica_id"]
        .as_str()
        .expect("a replica")
        .to_owned();
    assert_eq!(described["replicas"][0]["ready"], true, "{described:#}");
    let started = engine::created_ns(&format!("{}-exec.{replica}", rig.scope.name));
    let published = first_published(&calls, &replica).expect("published once ready");
    assert!(
        published >= started + 2_000_000_000,
        "published {} ms after it was created, inside its 2 s warm-up",
        (published - started) / 1_000_000
    );
}

#[test]
fn a_controller_restart_keeps_ready_replicas_published_and_fails_no_deadline() {
    let _timing = timing();
    let Some((mut rig, calls)) = recorder_rig() else {
        return;
    };
    let body = "  replicas = 2\n  progress_deadline = \"1s\"\n  probes {\n    readiness {\n      http_get { path = \"/ready\" }\n      period = \"200ms\"\n    }\n  }";
    rig.controller
        .vd(&["apply", "-f", &recorded_manifest(&rig, &calls, "web", body)])
        .success();
    assert_eq!(
        recorded_publishes(&calls)
            .last()
            .expect("a publish")
            .replica_ids
            .len(),
        2
    );
    let mark = recorded_publishes(&calls).len();
    rig.controller.restart();
    // Long enough for the new controller's probers to run, and for the
    // replicas to be older than the progress deadline.
    std::thread::sleep(Duration::from_secs(3));
    let after = recorded_publishes(&calls);
    assert!(
        after[mark..]
            .iter()
            .all(|publish| publish.replica_ids.len() == 2),
        "a restart never withdraws ready replicas: {:?}",
        after[mark..]
            .iter()
            .map(|p| &p.replica_ids)
            .collect::<Vec<_>>()
    );
    let described = rig.describe_json("deployment", "web");
    assert_ne!(described["status"]["phase"], "failed", "{described:#}");
    assert!(
        described["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .all(|replica| replica["ready"] == true),
        "{described:#}"
    );
}

#[test]
fn a_tcp_probe_gates_the_endpoint_set_on_a_listening_port() {
    let _timing = timing();
    let Some((rig, calls)) = recorder_rig() else {
        return;
    };
    let probe = |port: &str| {
        format!("  probes {{\n    readiness {{\n      tcp_socket {{{port}}}\n      period = \"200ms\"\n    }}\n  }}")
    };
    // The echo server listens on 8084, the default port: ready, published.
    rig.controller
        .vd(&[
            "apply",
            "-f",
            &recorded_manifest(&rig, &calls, "tcpok", &probe("")),
        ])
        .success();
    let described = rig.describe_json("deployment", "tcpok");
    let ready = described["replicas"][0]["replica_id"]
        .as_str()
        .expect("a replica")
        .to_owned();
    assert_eq!(described["replicas"][0]["ready"], true, "{described:#}");
    assert!(first_published(&calls, &ready).is_some());
    // Nothing listens on port 9: never ready, never published.
    rig.controller
        .vd(&[
            "apply",
            "--no-wait",
            "-f",
            &recorded_manifest(&rig, &calls, "tcpoff", &probe(" port = 9 ")),
        ])
        .success();
    std::thread::sleep(Duration::from_secs(3));
    let described = rig.describe_json("deployment", "tcpoff");
    let unready = described["replicas"][0]["replica_id"]
        .as_str()
        .expect("a replica")
        .to_owned();
    assert_eq!(described["replicas"][0]["ready"], false, "{described:#}");
    assert!(
        first_published(&calls, &unready).is_none(),
        "an unready replica was published"
    );
}

/// Whether each of these containers still runs.
fn all_running(containers: &[(String, String)]) -> bool {
    containers.iter().all(|(_, id)| {
        engine::docker(&["inspect", "-f", "{{.State.Running}}", id]).trim() == "true"
    })
}

#[test]
fn a_broken_probe_a_crashing_image_and_a_missing_image_each_fail_the_rollout_with_no_failed_request(
) {
    let _timing = timing();
    let Some(rig) = DockerRig::with_rust_plugin("voodu_traffik") else {
        return;
    };
    let through = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let manifest = |release: &str, image: &str, env: &str, probe_port: u16| {
        rig.controller.manifest(
            &format!("web-{release}.hcl"),
            &format!(
                "deployment \"{scope}\" \"web\" {{\n  image = \"{image}\"\n  replicas = 2\n  ports = [\"8084\"]\n  env = {{ RELEASE = \"{release}\"{env} }}\n  progress_deadline = \"4s\"\n  probes {{\n    readiness {{\n      tcp_socket {{ port = {probe_port} }}\n      period = \"500ms\"\n    }}\n  }}\n  traffik \"http\" {{\n    port = 8084\n    bind = \"{through}\"\n  }}\n}}\n",
                scope = rig.scope.name,
            ),
        )
    };
    let good = manifest("1", &rig.image.name, "", 8084);
    rig.controller.vd(&["apply", "-f", &good]).success();
    let serving = rig.scope.containers();
    assert_eq!(serving.len(), 2);
    let cases = [
        (
            "a readiness probe on the wrong port",
            manifest("2", &rig.image.name, "", 9997),
            "was not ready within the progress deadline of 4s: readiness tcp_socket :9997",
        ),
        (
            // It exits at start, before it listens (`cannot listen on port
            // none`), as a bad configuration makes a real service exit.
            "an image that exits at start",
            manifest("3", &rig.image.name, ", PORT = \"none\"", 8084),
            "crash",
        ),
        (
            "an image that does not exist",
            manifest("4", "voodu-missing-image:none", "", 8084),
            "voodu-missing-image:none",
        ),
    ];
    for (case, broken, why) in cases {
        let load = roll_under_load(
            || {
                let failed = rig
                    .controller
                    .vd(&["apply", "-f", &broken, "--timeout", "60s"]);
                assert_eq!(failed.code, 1, "{case}: the apply fails: {failed:?}");
                assert!(
                    failed.stderr.contains(why) || failed.stdout.contains(why),
                    "{case}: says why ({why}): {failed:?}"
                );
            },
            through,
        );
        println!(
            "{case}: {} failed and {} non-200 of {} requests",
            load.failed.load(Ordering::Relaxed),
            load.not_200.load(Ordering::Relaxed),
            load.total()
        );
        assert_eq!(load.failed.load(Ordering::Relaxed), 0, "{case}: {load:?}");
        assert_eq!(load.not_200.load(Ordering::Relaxed), 0, "{case}: {load:?}");
        assert!(all_running(&serving), "{case}: the old replicas run on");
        // Back to the serving revision: the broken replica goes, the old
        // ones stay.
        rig.controller.vd(&["apply", "-f", &good]).success();
        assert_eq!(rig.scope.containers(), serving, "{case}");
    }
}

/// A workload of the recorder rig with a 2 s warm-up and `body`.
fn warming_manifest(rig: &DockerRig, calls: &std::path::Path, name: &str, body: &str) -> String {
    rig.controller.manifest(
        &format!("{name}.hcl"),
        &format!(
            "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  ports = [\"8084\"]\n  env = {{ WARMUP_MS = \"{warmup}\" }}\n{body}\n  recorder {{ file = \"{calls}\" }}\n}}\n",
            scope = rig.scope.name,
            image = rig.image.name,
            warmup = if name == "never" { 600_000 } else { 2_000 },
            calls = calls.display(),
        ),
    )
}

fn event_reasons(described: &serde_json::Value) -> Vec<String> {
    described["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|event| event["reason"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_startup_probe_holds_a_replica_unpublished_until_it_passes_once() {
    let _timing = timing();
    let Some((rig, calls)) = recorder_rig() else {
        return;
    };
    // voodu's startup probe, with no readiness probe: it alone gates the
    // endpoint set, until it first passes.
    let startup = "  probes {\n    startup {\n      http_get {\n        path = \"/ready\"\n        port = 8084\n      }\n      period            = \"100ms\"\n      failure_threshold = 100\n    }\n  }";
    rig.controller
        .vd(&[
            "apply",
            "-f",
            &warming_manifest(&rig, &calls, "boot", startup),
        ])
        .success();
    let described = rig.describe_json("deployment", "boot");
    let replica = described["replicas"][0]["replica_id"]
        .as_str()
        .expect("a replica")
        .to_owned();
    let started = engine::created_ns(&format!("{}-boot.{replica}", rig.scope.name));
    let published =
        voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
            first_published(&calls, &replica).ok_or("not published yet")
        });
    assert!(
        published >= started + 2_000_000_000,
        "published {} ms after it was created, inside its 2 s warm-up",
        (published - started) / 1_000_000
    );
    // Once passed, the startup probe is done: turning unready withdraws
    // nothing, since no readiness probe follows it.
    get(replica_address(&rig, "boot", &replica), "/toggle-ready").expect("it answers");
    std::thread::sleep(Duration::from_millis(600));
    let last = recorded_publishes(&calls).pop().expect("a publish");
    assert_eq!(last.replica_ids, std::slice::from_ref(&replica), "{last:?}");
    assert_eq!(
        rig.describe_json("deployment", "boot")["replicas"][0]["ready"],
        true
    );
}

#[test]
fn a_startup_probe_that_never_passes_restarts_the_replica_which_is_never_published() {
    let _timing = timing();
    let Some((rig, calls)) = recorder_rig() else {
        return;
    };
    let startup = "  progress_deadline = \"30s\"\n  probes {\n    startup {\n      http_get { path = \"/ready\" }\n      period            = \"100ms\"\n      failure_threshold = 3\n    }\n    readiness {\n      http_get { path = \"/ready\" }\n      period = \"100ms\"\n    }\n  }";
    rig.controller
        .vd(&[
            "apply",
            "--no-wait",
            "-f",
            &warming_manifest(&rig, &calls, "never", startup),
        ])
        .success();
    let described =
        voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
            let described = rig.describe_json("deployment", "never");
            let reasons = event_reasons(&described);
            if reasons.iter().any(|reason| reason == "startup-failed")
                && reasons.iter().any(|reason| reason == "restarted")
            {
                Ok(described)
            } else {
                Err(format!("not restarted by its startup probe: {described:#}"))
            }
        });
    let failed = described["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["reason"] == "startup-failed")
        .expect("the event");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("failed its startup probe 3 time(s) in a row (startup http_get :8084/ready: answered 503)"),
        "{failed}"
    );
    let published: Vec<_> = recorded_publishes(&calls)
        .into_iter()
        .filter(|publish| !publish.replica_ids.is_empty())
        .collect();
    assert!(
        published.is_empty(),
        "never ready, never published: {published:?}"
    );
}

#[test]
fn http_headers_are_sent_with_an_http_get_probe() {
    let _timing = timing();
    let Some((rig, calls)) = recorder_rig() else {
        return;
    };
    let probe = |value: &str| {
        format!("  probes {{\n    readiness {{\n      http_get {{\n        path = \"/probe-header\"\n        port = 8084\n        http_headers = {{ \"X-Probe\" = \"{value}\" }}\n      }}\n      period = \"100ms\"\n    }}\n  }}")
    };
    rig.controller
        .vd(&[
            "apply",
            "-f",
            &recorded_manifest(&rig, &calls, "sent", &probe("voodu")),
        ])
        .success();
    let described = rig.describe_json("deployment", "sent");
    assert_eq!(described["replicas"][0]["ready"], true, "{described:#}");
    let replica = described["replicas"][0]["replica_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(first_published(&calls, &replica).is_some());

    // The wrong value: the server refuses, and the replica is not ready.
    rig.controller
        .vd(&[
            "apply",
            "--no-wait",
            "-f",
            &recorded_manifest(&rig, &calls, "wrong", &probe("someone-else")),
        ])
        .success();
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let described = rig.describe_json("deployment", "wrong");
        let replica = &described["replicas"][0];
        match replica["last_probe_failure"].as_str() {
            Some(failure) if failure.contains("answered 401") && replica["ready"] == false => {
                Ok(())
            }
            _ => Err(format!("no 401 seen yet: {described:#}")),
        }
    });
}
