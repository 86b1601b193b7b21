//! The runtime half on the real engine, in one run:
//!
//! - `event_to_publish`: from a replica's death or start, as Docker stamps
//!   the event, to the recorder plugin receiving the publish that reflects
//!   it. Each iteration kills one replica and starts it again (two events).
//!   Criterion reports the mean per event pair; the p50 and p99 of the
//!   single-event latencies are printed at the end.
//! - `converge_20`: `vd apply` of a 20-replica deployment from nothing,
//!   against two peers: `docker run -d` of the same 20 containers (same
//!   image, network, port and labels) from a sequential shell loop, and the
//!   same 20 `docker run` 8 at a time (`xargs -P 8`).
//!
//! Run: `cargo bench -p voodu-tests --bench reconcile` (needs the engine).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};

#[allow(dead_code)] // The bench uses part of the helpers.
#[path = "../support/engine.rs"]
mod engine;
#[allow(dead_code)]
#[path = "../support/vd.rs"]
mod vd;

use engine::{docker, EchoImage, Scope};
use vd::Controller;

fn publishes(path: &Path) -> Vec<(u128, Vec<String>)> {
    voodu_tests::recorded_publishes(path)
        .into_iter()
        .map(|p| (p.at_ns, p.replica_ids))
        .collect()
}

/// Waits for the first publish after `seen` publishes whose set satisfies
/// `done`; returns its receive time.
fn wait_publish(path: &Path, seen: usize, done: impl Fn(&[String]) -> bool) -> u128 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some((at, _)) = publishes(path)
            .into_iter()
            .skip(seen)
            .find(|(_, ids)| done(ids))
        {
            return at;
        }
        assert!(Instant::now() < deadline, "no publish arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Docker's events for one scope, as (time_ns, action, replica id).
fn follow_events(scope: &str) -> mpsc::Receiver<(u128, String, String)> {
    let (sender, receiver) = mpsc::channel();
    let mut child = Command::new("docker")
        .args([
            "events",
            "--filter",
            &format!("label=voodu.scope={scope}"),
            "--filter",
            "type=container",
            "--format",
            "{{.TimeNano}} {{.Action}} {{index .Actor.Attributes \"voodu.replica_id\"}}",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("docker events runs");
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut parts = line.split_whitespace();
            if let (Some(at), Some(action), Some(id)) = (parts.next(), parts.next(), parts.next()) {
                if let Ok(at) = at.parse() {
                    let _ = sender.send((at, action.to_owned(), id.to_owned()));
                }
            }
        }
        let _ = child.wait();
    });
    receiver
}

fn wait_event(
    events: &mpsc::Receiver<(u128, String, String)>,
    action: &str,
    replica: &str,
) -> u128 {
    loop {
        let (at, seen_action, seen_replica) = events
            .recv_timeout(Duration::from_secs(10))
            .expect("docker reported the event");
        if seen_action == action && seen_replica == replica {
            return at;
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn manifest(scope: &str, name: &str, image: &str, replicas: u32, calls: Option<&Path>) -> String {
    let recorder = calls
        .map(|calls| format!("  recorder {{ file = \"{}\" }}\n", calls.display()))
        .unwrap_or_default();
    format!(
        "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n{recorder}}}\n"
    )
}

fn bench_reconcile(c: &mut Criterion) {
    if !engine::engine_available() {
        return;
    }
    let image = EchoImage::import();
    let scope = Scope::new();
    let controller = Controller::start_with_docker();
    let recorder = PathBuf::from(
        voodu_tests::rust_cdylib("voodu_fixture_recorder")
            .display()
            .to_string(),
    );
    controller
        .vd(&["plugins:install", &recorder.display().to_string()])
        .success();
    let calls = controller.root().join("calls.jsonl");

    // Event to publish.
    let file = controller.manifest(
        "web.hcl",
        &manifest(&scope.name, "web", &image.name, 2, Some(&calls)),
    );
    controller.vd(&["apply", "-f", &file]).success();
    let events = follow_events(&scope.name);
    let victim = publishes(&calls).last().expect("a publish").1[0].clone();
    let container = format!("{}-web.{victim}", scope.name);
    let mut latencies: Vec<Duration> = Vec::new();
    let mut group = c.benchmark_group("event_to_publish");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("die_then_start", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let seen = publishes(&calls).len();
                docker(&["kill", &container]);
                let died = wait_event(&events, "die", &victim);
                let withdrawn = wait_publish(&calls, seen, |ids| !ids.contains(&victim));
                let seen = publishes(&calls).len();
                docker(&["start", &container]);
                let started = wait_event(&events, "start", &victim);
                let readded = wait_publish(&calls, seen, |ids| ids.contains(&victim));
                for latency in [
                    withdrawn.saturating_sub(died),
                    readded.saturating_sub(started),
                ] {
                    let latency = Duration::from_nanos(latency as u64);
                    latencies.push(latency);
                    total += latency;
                }
            }
            total
        })
    });
    group.finish();
    latencies.sort();
    // Empty when a filter skipped the group.
    if !latencies.is_empty() {
        eprintln!(
            "event_to_publish over {} events: p50 {:?}, p99 {:?}, max {:?}",
            latencies.len(),
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            latencies.last().copied().unwrap_or_default()
        );
    }
    controller
        .vd(&["delete", &format!("deployment/{}/web", scope.name)])
        .success();

    // Converge 20 replicas from nothing, against a `docker run` loop.
    let mut group = c.benchmark_group("converge_20");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(60));
    let mut round = 0;
    group.bench_function("vd_apply", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                round += 1;
                let name = format!("c{round}");
                let file = controller.manifest(
                    &format!("{name}.hcl"),
                    &manifest(&scope.name, &name, &image.name, 20, None),
                );
                let started = Instant::now();
                controller.vd(&["apply", "-f", &file]).success();
                total += started.elapsed();
                controller
                    .vd(&["delete", &format!("deployment/{}/{name}", scope.name)])
                    .success();
            }
            total
        })
    });
    for (peer, runner) in [
        ("docker_run_loop", "for i in $(seq 1 20); do run $i; done"),
        // The same 20 `docker run`, 8 at a time.
        (
            "docker_run_parallel_8",
            "export -f run; seq 1 20 | xargs -P 8 -I{} bash -c 'run {}'",
        ),
    ] {
        group.bench_function(peer, |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    round += 1;
                    let script = format!(
                        "docker network inspect voodu0 >/dev/null 2>&1 || docker network create voodu0 >/dev/null; \
                         run() {{ docker run -d --name {scope}-peer{round}.$1 --network voodu0 \
                         --network-alias peer{round}.{scope} -p 127.0.0.1::8084 --restart unless-stopped \
                         --label createdby=voodu-bench --label voodu.scope={scope} -e VOODU_REPLICA_ID=$1 {image} >/dev/null; }}; \
                         export round={round}; {runner}",
                        scope = scope.name,
                        image = image.name,
                    );
                    let started = Instant::now();
                    let status = Command::new("bash")
                        .args(["-c", &script])
                        .status()
                        .expect("bash runs");
                    total += started.elapsed();
                    assert!(status.success());
                    let ids = docker(&["ps", "-aq", "--filter", "label=createdby=voodu-bench"]);
                    let ids: Vec<&str> = ids.split_whitespace().collect();
                    let mut remove = vec!["rm", "-f"];
                    remove.extend(ids);
                    docker(&remove);
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_reconcile);
criterion_main!(benches);
