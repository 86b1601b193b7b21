//! The cluster on hosts that share neither an engine nor a network: each
//! host a network namespace of this machine with its own Docker engine
//! and address (`examples/hosts/rig.sh`, through `support/hosts.rs`), the
//! etcd members on hosts of their own. On CI (root) these run and never
//! skip.

#[path = "support/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[path = "support/engine.rs"]
#[allow(dead_code)]
mod engine;
#[path = "support/etcd.rs"]
#[allow(dead_code)]
mod etcd;
#[path = "support/hosts.rs"]
#[allow(dead_code)]
mod hosts;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/load.rs"]
mod load;
#[path = "support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use cluster::{install_everywhere, wait_or_dump, Engine, Node};
use engine::{engine_available, EchoImage, Scope};
use hosts::HostRig;
use load::request;

/// Each host of the rig is a machine of its own: a container published on
/// one host's engine answers at that host's address from another host,
/// and neither this machine's engine nor another host's sees it.
#[test]
fn each_host_has_its_own_engine_and_network() {
    if !engine_available() {
        return;
    }
    let Some(rig) = HostRig::up(&["a", "b"], &[]) else {
        return;
    };
    let image = EchoImage::import();
    rig.load("a", &image.name);
    let started = rig.docker(
        "a",
        &[
            "run",
            "-d",
            "-e",
            "VOODU_REPLICA_ID=ra",
            "-p",
            "0.0.0.0:18084:8084",
            &image.name,
        ],
    );
    let container = started.trim().to_owned();
    assert_eq!(container.len(), 64, "a's engine started it: {started:?}");
    assert!(rig
        .docker("b", &["ps", "-q", "--no-trunc"])
        .trim()
        .is_empty());
    assert!(!engine::docker(&["ps", "-q", "--no-trunc"]).contains(&container));
    // From b's network, at a's address: a's container answers.
    let answer =
        voodu_tests::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
            let output = Command::new("nsenter")
                .arg(format!("--net=/var/run/netns/{}", netns_of(&rig, "b")))
                .args(["bash", "-c"])
                .arg(format!(
                    "exec 3<>/dev/tcp/{}/18084; echo hi >&3; timeout 2 cat <&3",
                    rig.address("a")
                ))
                .output()
                .expect("nsenter runs");
            let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            if text == "ra" {
                Ok(text)
            } else {
                Err(String::from_utf8_lossy(&output.stderr).into_owned())
            }
        })
        .unwrap_or_else(|error| {
            panic!("a's container never answered at a's address from b: {error}")
        });
    assert_eq!(answer, "ra");
    // A cut host's address answers nothing; healed, it answers again.
    rig.fault("cut", "a");
    let through: SocketAddr = format!("{}:18084", rig.address("a")).parse().unwrap();
    assert!(request(through).is_err(), "a cut host answers nothing");
    rig.fault("heal", "a");
    voodu_tests::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        request(through).map_err(|error| error.to_string())
    })
    .unwrap_or_else(|error| panic!("a healed host answers again: {error}"));
}

fn netns_of(rig: &HostRig, host: &str) -> String {
    rig.wrap(host)[1]
        .trim_start_matches("--net=/var/run/netns/")
        .to_owned()
}

use std::process::Command;

/// Deployment `web`: 3 replicas published on each node's address at a
/// port Docker picks (a bare `"8084"` on a node with `--advertise`),
/// behind a traffik on every host at `0.0.0.0:port`, with `host`
/// addressing: every host's traffik balances over every host's replicas.
fn web(scope: &str, image: &str, port: u16) -> String {
    format!(
        "deployment \"{scope}\" \"web\" {{\n  image = \"{image}\"\n  replicas = 3\n  ports = [\"8084\"]\n  probes {{\n    readiness {{\n      http_get {{ path = \"/ready\" }}\n      period = \"200ms\"\n    }}\n  }}\n  traffik \"http\" {{\n    port = 8084\n    bind = \"0.0.0.0:{port}\"\n    addressing = \"host\"\n  }}\n}}\n"
    )
}

/// Three hosts, each with its own engine and a node, three etcd members
/// on hosts of their own: one replica per host, published on its host's
/// address; the traffik on any one host reaches the replicas on all three.
#[test]
fn a_traffik_on_one_host_balances_over_the_replicas_on_every_host() {
    if !engine_available() {
        return;
    }
    let Some(rig) = HostRig::up(&["a", "b", "c"], &["e1", "e2", "e3"]) else {
        return;
    };
    let Some(etcd) = rig.etcd(&["e1", "e2", "e3"]) else {
        return;
    };
    let image = EchoImage::import();
    let scope = Scope::new();
    let urls = etcd.endpoints().join(",");
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|host| {
            rig.load(host, &image.name);
            Node::launch(&urls, host, Engine::Docker, &rig.launch(host))
        })
        .collect();
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    install_everywhere(&nodes[0], &traffik, "traffik", 3);
    let port = 18080;
    nodes[0].apply("web.hcl", &web(&scope.name, &image.name, port));
    // One replica on each host's own engine, published on its address.
    let all: Vec<&Node> = nodes.iter().collect();
    let by_host: BTreeMap<&str, Vec<String>> = wait_or_dump(
        &all,
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let by_host: BTreeMap<&str, Vec<String>> = ["a", "b", "c"]
                .iter()
                .map(|host| {
                    let ports = rig.docker(
                        host,
                        &[
                            "ps",
                            "--filter",
                            &format!("label=voodu.scope={}", scope.name),
                            "--format",
                            "{{.Ports}}",
                        ],
                    );
                    (*host, ports.lines().map(str::to_owned).collect())
                })
                .collect();
            if by_host.values().all(|ports| ports.len() == 1) {
                Ok(by_host)
            } else {
                Err(format!("{by_host:?}"))
            }
        },
    );
    for (host, ports) in &by_host {
        assert!(
            ports[0].starts_with(&format!("{}:", rig.address(host))),
            "{host}'s replica is published on its address, not loopback: {ports:?}"
        );
    }
    // Each host's traffik, asked from this machine over the rig's
    // bridge, answers with every host's replica.
    for host in ["a", "b", "c"] {
        let through: SocketAddr = format!("{}:{port}", rig.address(host)).parse().unwrap();
        let seen = wait_or_dump(
            &all,
            Duration::from_secs(30),
            Duration::from_millis(200),
            || {
                let seen: HashSet<String> = (0..30).filter_map(|_| request(through).ok()).collect();
                if seen.len() == 3 {
                    Ok(seen)
                } else {
                    Err(format!("{host}'s traffik reached {seen:?}"))
                }
            },
        );
        assert_eq!(seen.len(), 3, "{seen:?}");
    }
    drop(all);
    drop(nodes);
    // The replicas were on the rig's engines, which go with the rig.
    drop(scope);
}
