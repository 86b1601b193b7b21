//! Cluster mode's two latencies, on the real engine and a real etcd (three
//! members, three `vd controller --cluster` nodes on this host, lease TTL
//! 2 s), from one run:
//!
//! - **apply → publish**: a change to a workload's plugin block applied on
//!   node a, until all three nodes' plugins have the new set; p50 and p99
//!   over 20 applies, against the target p99 of 500 ms.
//! - **kill → withdrawal**: a node SIGKILLed, until the other two nodes'
//!   plugins have a set without its replica; p50 and p99 over 10 kills,
//!   against the target of the lease TTL plus 1 s.
//!
//! Run: `cargo bench -p voodu-tests --bench cluster_publish` (needs Docker
//! and `etcd`: `tests/run --setup` installs it). Percentiles need every
//! sample, so this bench keeps them itself rather than through criterion.

#[path = "../support/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[path = "../support/engine.rs"]
#[allow(dead_code)]
mod engine;
#[path = "../support/etcd.rs"]
#[allow(dead_code)]
mod etcd;
#[path = "../support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cluster::{Engine, Node, LEASE_TTL};
use engine::{engine_available, EchoImage, Scope};
use etcd::EtcdCluster;
use voodu_tests::{recorded_calls, wait_until};

const APPLIES: usize = 20;
const KILLS: usize = 10;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos()
}

/// The `q` quantile (0 to 1) of `samples`, nearest rank.
fn quantile(samples: &[Duration], q: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn manifest(
    scope: &str,
    name: &str,
    image: &str,
    replicas: u32,
    round: usize,
    calls: &Path,
) -> String {
    format!(
        "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n  recorder {{\n    file = \"{}\"\n    round = {round}\n  }}\n}}\n",
        calls.display()
    )
}

/// When each of `pids` first received a publish of workload `name`
/// matching `wanted`, after `since_ns`; `None` until all have.
fn published_by_all(
    calls: &Path,
    name: &str,
    pids: &[u32],
    since_ns: u128,
    wanted: impl Fn(&voodu_tests::RecordedCall) -> bool,
) -> Option<u128> {
    let calls = recorded_calls(calls);
    let mut latest = 0;
    for pid in pids {
        let first = calls.iter().find(|call| {
            call.call == "publish"
                && call.pid == *pid
                && call.at_ns > since_ns
                && call.request["name"] == name
                && wanted(call)
        })?;
        latest = latest.max(first.at_ns);
    }
    Some(latest)
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    if !engine_available() {
        eprintln!("cluster_publish: no Docker engine here; skipped");
        return;
    }
    let Some(etcd) = EtcdCluster::start(3) else {
        eprintln!("cluster_publish: no etcd here; skipped");
        return;
    };
    let image = EchoImage::import();
    let scope = Scope::new();
    let s = &scope.name;
    let calls_dir = tempfile::tempdir().unwrap();
    let calls = calls_dir.path().join("calls.jsonl");
    let a = Node::start(&etcd, "a", Engine::Docker);
    let b = Node::start(&etcd, "b", Engine::Docker);
    let recorder = voodu_tests::rust_cdylib("voodu_fixture_recorder");
    let installed = a.vd(&["plugins:install", &recorder.to_string_lossy()]);
    assert!(installed.status.success(), "{installed:?}");
    let mut c = Node::start(&etcd, "c", Engine::Docker);
    std::thread::sleep(Duration::from_secs(3));

    // Apply → publish on all three nodes.
    let pids = [a.pid() as u32, b.pid() as u32, c.pid() as u32];
    a.apply("web.hcl", &manifest(s, "web", &image.name, 3, 0, &calls));
    cluster::wait_or_dump(
        &[&a, &b, &c],
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            published_by_all(&calls, "web", &pids, 0, |call| {
                call.replica_ids().len() == 3
            })
            .ok_or("not every node has the three replicas yet")
        },
    );
    let mut applies = Vec::new();
    for round in 1..=APPLIES {
        let started = now_ns();
        a.apply(
            "web.hcl",
            &manifest(s, "web", &image.name, 3, round, &calls),
        );
        let done = cluster::wait_or_dump(
            &[&a, &b, &c],
            Duration::from_secs(30),
            Duration::from_millis(5),
            || {
                published_by_all(&calls, "web", &pids, started, |call| {
                call.request["block"]["spec"]["round"] == round
            })
            .ok_or_else(|| {
                let by: Vec<(u32, serde_json::Value)> = recorded_calls(&calls)
                    .into_iter()
                    .filter(|call| call.call == "publish" && call.at_ns > started)
                    .map(|call| (call.pid, call.request["block"]["spec"]["round"].clone()))
                    .collect();
                format!("round {round}: not every node of {pids:?} has published the new spec yet: {by:?}")
            })
            },
        );
        applies.push(Duration::from_nanos((done - started) as u64));
    }
    let (p50, p99) = (quantile(&applies, 0.5), quantile(&applies, 0.99));
    println!(
        "apply → publish on all three nodes, {APPLIES} applies: p50 {p50:?}, p99 {p99:?} (target p99 500 ms: {:.2}× the target)",
        p99.as_secs_f64() / 0.5
    );

    // Kill → withdrawal on the other two nodes: each round a workload of
    // three replicas, one of them on c, then c killed (and started again
    // for the next round).
    let ab = [a.pid() as u32, b.pid() as u32];
    let mut kills = Vec::new();
    for round in 0..KILLS {
        let name = format!("k{round}");
        // Placed on c only once c reports the recorder.
        wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            let nodes = a.nodes();
            let c_ready = nodes.as_array().into_iter().flatten().any(|node| {
                node["name"] == "c"
                    && node["alive"] == true
                    && node["plugins"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|plugin| plugin["name"] == "recorder")
            });
            if c_ready {
                Ok(())
            } else {
                Err(format!(
                    "{name}: c does not report the recorder yet: {nodes}"
                ))
            }
        });
        a.apply(
            &format!("{name}.hcl"),
            &manifest(s, &name, &image.name, 3, 0, &calls),
        );
        let c_replica = wait_until(Duration::from_secs(60), Duration::from_millis(100), || {
            let on_c = c.running(&format!("deployment/{s}/{name}"));
            let in_sets = published_by_all(&calls, &name, &ab, 0, |call| {
                on_c.first()
                    .is_some_and(|id| call.replica_ids().contains(id))
            });
            match (on_c.first(), in_sets) {
                (Some(id), Some(_)) => Ok(id.clone()),
                _ => Err(format!(
                    "{name}: c's replica is not in a's and b's sets yet"
                )),
            }
        });
        let killed = now_ns();
        c.kill_hard();
        let withdrawn = wait_until(
            LEASE_TTL + Duration::from_secs(10),
            Duration::from_millis(5),
            || {
                published_by_all(&calls, &name, &ab, killed, |call| {
                    !call.replica_ids().contains(&c_replica)
                })
                .ok_or("not withdrawn on both yet")
            },
        );
        kills.push(Duration::from_nanos((withdrawn - killed) as u64));
        c = Node::start(&etcd, "c", Engine::Docker);
    }
    let (p50, p99) = (quantile(&kills, 0.5), quantile(&kills, 0.99));
    let target = LEASE_TTL + Duration::from_secs(1);
    println!(
        "kill → withdrawal on the other nodes, {KILLS} kills, lease TTL {LEASE_TTL:?}: p50 {p50:?}, p99 {p99:?} (target TTL + 1 s = {target:?}: {:.2}× the target)",
        p99.as_secs_f64() / target.as_secs_f64()
    );
}
