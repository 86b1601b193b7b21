//! Cluster mode's figures on three real hosts: the rig of
//! `examples/hosts/rig.sh` (each host a network namespace with its own
//! Docker engine and address, the three etcd members on hosts of their
//! own), a `vd controller --cluster` node on each host advertising its
//! address, lease TTL 2 s. From one run:
//!
//! - **apply → publish**: a change to a workload's plugin block applied on
//!   host a, until the plugins of all three hosts' nodes have the new set;
//!   p50 and p99 over 20 applies, against the target p99 of 500 ms.
//! - **host death → withdrawal**: host c killed (its link down, then its
//!   containers, engine and node), until the plugins on a and b have a set
//!   without c's replica; p50 and p99 over 5 deaths, against the target of
//!   the lease TTL plus 1 s.
//! - **requests failed by a host death**: 50 clients through b's traffik
//!   over a replica on each host, host a killed: the requests that failed
//!   against the connections b had open to a when it died (in flight).
//!
//! Run as root: `cargo bench -p voodu-tests --bench cluster_publish` (needs
//! Docker, `ip`, `nsenter`, `iptables` and `etcd`: `tests/run --setup`
//! installs etcd). Percentiles need every sample, so this bench keeps them
//! itself rather than through criterion.

#[path = "../support/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[path = "../support/engine.rs"]
#[allow(dead_code)]
mod engine;
#[path = "../support/etcd.rs"]
#[allow(dead_code)]
mod etcd;
#[path = "../support/hosts.rs"]
#[allow(dead_code)]
mod hosts;
#[path = "../support/load.rs"]
#[allow(dead_code)]
mod load;
#[path = "../support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cluster::{install_everywhere, wait_or_dump, Engine, Node, LEASE_TTL};
use engine::{engine_available, EchoImage, Scope};
use hosts::HostRig;
use voodu_tests::{recorded_calls, wait_until};

const APPLIES: usize = 20;
const DEATHS: usize = 5;
const HOSTS: [&str; 3] = ["a", "b", "c"];
/// traffik's port on every host.
const TRAFFIK_PORT: u16 = 18080;

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

fn manifest(scope: &str, name: &str, image: &str, round: usize, calls: &Path) -> String {
    format!(
        "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  replicas = 3\n  ports = [\"8084\"]\n  recorder {{\n    file = \"{}\"\n    round = {round}\n  }}\n}}\n",
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

fn pids(nodes: &[Node]) -> Vec<u32> {
    nodes.iter().map(|node| node.pid() as u32).collect()
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    if !engine_available() {
        eprintln!("cluster_publish: no Docker engine here; skipped");
        return;
    }
    let Some(rig) = HostRig::up(&HOSTS, &["e1", "e2", "e3"]) else {
        eprintln!(
            "cluster_publish: the rig needs root, ip, nsenter, dockerd and iptables; skipped"
        );
        return;
    };
    let Some(etcd) = rig.etcd(&["e1", "e2", "e3"]) else {
        eprintln!("cluster_publish: no etcd here; skipped");
        return;
    };
    let urls = etcd.endpoints().join(",");
    let image = EchoImage::import();
    let scope = Scope::new();
    let s = &scope.name;
    let calls_dir = tempfile::tempdir().unwrap();
    let calls = calls_dir.path().join("calls.jsonl");
    let mut nodes: Vec<Node> = HOSTS
        .iter()
        .map(|host| {
            rig.load(host, &image.name);
            Node::launch(&urls, host, Engine::Docker, &rig.launch(host))
        })
        .collect();
    let recorder = voodu_tests::rust_cdylib("voodu_fixture_recorder");
    install_everywhere(&nodes[0], &recorder, "recorder", 3);

    // Apply → publish on all three hosts.
    let every = pids(&nodes);
    nodes[0].apply("web.hcl", &manifest(s, "web", &image.name, 0, &calls));
    wait_or_dump(
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            published_by_all(&calls, "web", &every, 0, |call| {
                call.replica_ids().len() == 3
            })
            .ok_or("not every node has the three replicas yet")
        },
    );
    let mut applies = Vec::new();
    for round in 1..=APPLIES {
        let started = now_ns();
        nodes[0].apply("web.hcl", &manifest(s, "web", &image.name, round, &calls));
        let done = wait_or_dump(
            &nodes.iter().collect::<Vec<_>>(),
            Duration::from_secs(30),
            Duration::from_millis(5),
            || {
                published_by_all(&calls, "web", &every, started, |call| {
                    call.request["block"]["spec"]["round"] == round
                })
                .ok_or_else(|| format!("round {round}: not every node has the new spec yet"))
            },
        );
        applies.push(Duration::from_nanos((done - started) as u64));
    }
    let (p50, p99) = (quantile(&applies, 0.5), quantile(&applies, 0.99));
    println!(
        "apply on host a → publish on all three hosts, {APPLIES} applies: p50 {p50:?}, p99 {p99:?} (target p99 500 ms: {:.2}× the target)",
        p99.as_secs_f64() / 0.5
    );

    // Host death → withdrawal on the other two: each round a workload of
    // three replicas, one on c, then host c killed (and brought back, with
    // a node of its own, for the next round).
    let mut deaths = Vec::new();
    for round in 0..DEATHS {
        let name = format!("k{round}");
        let survivors = [nodes[0].pid() as u32, nodes[1].pid() as u32];
        // Placed on c only once c reports the recorder.
        wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            let listed = nodes[0].nodes();
            let c_ready = listed.as_array().into_iter().flatten().any(|node| {
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
                    "{name}: c does not report the recorder yet: {listed}"
                ))
            }
        });
        nodes[0].apply(
            &format!("{name}.hcl"),
            &manifest(s, &name, &image.name, 0, &calls),
        );
        let c_replica = wait_until(Duration::from_secs(60), Duration::from_millis(100), || {
            let on_c = nodes[2].running(&format!("deployment/{s}/{name}"));
            let in_sets = published_by_all(&calls, &name, &survivors, 0, |call| {
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
        rig.fault("kill", "c");
        let withdrawn = wait_until(
            LEASE_TTL + Duration::from_secs(10),
            Duration::from_millis(5),
            || {
                published_by_all(&calls, &name, &survivors, killed, |call| {
                    !call.replica_ids().contains(&c_replica)
                })
                .ok_or("not withdrawn on both yet")
            },
        );
        deaths.push(Duration::from_nanos((withdrawn - killed) as u64));
        rig.restart("c");
        nodes[2] = Node::launch(&urls, "c", Engine::Docker, &rig.launch("c"));
    }
    let (p50, p99) = (quantile(&deaths, 0.5), quantile(&deaths, 0.99));
    let target = LEASE_TTL + Duration::from_secs(1);
    println!(
        "host death → its endpoints withdrawn on the other hosts, {DEATHS} deaths, lease TTL {LEASE_TTL:?}: p50 {p50:?}, p99 {p99:?} (target TTL + 1 s = {target:?}: {:.2}× the target)",
        p99.as_secs_f64() / target.as_secs_f64()
    );

    // Requests failed by a host death under 50 clients.
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    install_everywhere(&nodes[0], &traffik, "traffik", 3);
    let served = format!(
        "deployment \"{s}\" \"served\" {{\n  image = \"{}\"\n  replicas = 3\n  ports = [\"8084\"]\n  probes {{\n    readiness {{\n      http_get {{ path = \"/ready\" }}\n      period = \"200ms\"\n    }}\n  }}\n  traffik \"http\" {{\n    port = 8084\n    bind = \"0.0.0.0:{TRAFFIK_PORT}\"\n    addressing = \"host\"\n  }}\n}}\n",
        image.name
    );
    nodes[0].apply("served.hcl", &served);
    let through: std::net::SocketAddr = format!("{}:{TRAFFIK_PORT}", rig.address("b"))
        .parse()
        .unwrap();
    wait_or_dump(
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let seen: std::collections::HashSet<String> = (0..30)
                .filter_map(|_| load::request(through).ok())
                .collect();
            let spread: Vec<usize> = HOSTS
                .iter()
                .map(|host| {
                    rig.docker(
                        host,
                        &[
                            "ps",
                            "-q",
                            "--filter",
                            &format!("label=voodu.scope={s}"),
                            "--filter",
                            "label=voodu.name=served",
                        ],
                    )
                    .lines()
                    .count()
                })
                .collect();
            if seen.len() == 3 && spread == [1, 1, 1] {
                Ok(())
            } else {
                Err(format!(
                    "b's traffik reached {seen:?}; replicas per host {spread:?}"
                ))
            }
        },
    );
    let load = load::Load::start(50, through);
    wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
        if load.answered() >= 1_000 {
            Ok(())
        } else {
            Err(format!("{} answered", load.answered()))
        }
    });
    rig.fault("kill", "a");
    let in_flight = rig.established("b", "a");
    std::thread::sleep(LEASE_TTL + Duration::from_secs(3));
    let answered_before = load.answered();
    wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
        if load.answered() >= answered_before + 1_000 {
            Ok(())
        } else {
            Err(format!(
                "{} answered since",
                load.answered() - answered_before
            ))
        }
    });
    let (answered, failed, _) = load.stop();
    println!(
        "host a killed under 50 clients through b's traffik: {failed} failed of {} ({in_flight} in flight to a at its death: {:.2}× the in-flight bound)",
        answered + failed,
        failed as f64 / in_flight.max(1) as f64
    );
}
