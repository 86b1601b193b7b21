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
fn web(scope: &str, image: &str, port: u16, release: &str) -> String {
    format!(
        "deployment \"{scope}\" \"web\" {{\n  image = \"{image}\"\n  replicas = 3\n  ports = [\"8084\"]\n  env = {{ RELEASE = \"{release}\" }}\n  probes {{\n    readiness {{\n      http_get {{ path = \"/ready\" }}\n      period = \"200ms\"\n    }}\n  }}\n  traffik \"http\" {{\n    port = 8084\n    bind = \"0.0.0.0:{port}\"\n    addressing = \"host\"\n  }}\n}}\n"
    )
}

/// Three hosts (`a`, `b`, `c`), each with its own engine and a node
/// advertising its address, three etcd members on hosts of their own,
/// traffik installed cluster-wide and deployment `web` applied: one
/// replica per host. Dropped in order: nodes, scope, image, etcd, rig.
struct ThreeHosts {
    nodes: Vec<Node>,
    scope: Scope,
    image: EchoImage,
    /// Kept for its members' lives.
    _etcd: etcd::EtcdCluster,
    rig: HostRig,
    /// traffik's port on every host.
    port: u16,
}

impl ThreeHosts {
    fn start() -> Option<ThreeHosts> {
        ThreeHosts::start_with(false)
    }

    /// With `at_once`, `web` is applied right after traffik's install,
    /// before the other nodes have reported it loaded.
    fn start_with(at_once: bool) -> Option<ThreeHosts> {
        if !engine_available() {
            return None;
        }
        let rig = HostRig::up(&["a", "b", "c"], &["e1", "e2", "e3"])?;
        let etcd = rig.etcd(&["e1", "e2", "e3"])?;
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
        if at_once {
            let installed = nodes[0].vd(&["plugins:install", &traffik.to_string_lossy()]);
            assert!(installed.status.success(), "{installed:?}");
        } else {
            install_everywhere(&nodes[0], &traffik, "traffik", 3);
        }
        let hosts = ThreeHosts {
            nodes,
            scope,
            image,
            _etcd: etcd,
            rig,
            port: 18080,
        };
        hosts.nodes[0].apply("web.hcl", &hosts.web("1"));
        Some(hosts)
    }

    /// Deployment `web` at `release`.
    fn web(&self, release: &str) -> String {
        web(&self.scope.name, &self.image.name, self.port, release)
    }

    /// The ids of the scope's running replicas on `host`'s engine.
    fn replica_ids(&self, host: &str) -> Vec<String> {
        self.rig
            .docker(
                host,
                &[
                    "ps",
                    "--filter",
                    &format!("label=voodu.scope={}", self.scope.name),
                    "--format",
                    "{{.Label \"voodu.replica_id\"}}",
                ],
            )
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn all(&self) -> Vec<&Node> {
        self.nodes.iter().collect()
    }

    /// traffik's address on `host`.
    fn through(&self, host: &str) -> SocketAddr {
        format!("{}:{}", self.rig.address(host), self.port)
            .parse()
            .unwrap()
    }

    /// The published ports of the scope's running containers on each of
    /// `hosts`' engines, once each host has `per_host` of them.
    fn wait_spread(
        &self,
        hosts: &[&'static str],
        per_host: &[usize],
    ) -> BTreeMap<&'static str, Vec<String>> {
        wait_or_dump(
            &self.all(),
            Duration::from_secs(60),
            Duration::from_millis(250),
            || {
                let by_host: BTreeMap<&str, Vec<String>> = hosts
                    .iter()
                    .map(|host| {
                        let ports = self.rig.docker(
                            host,
                            &[
                                "ps",
                                "--filter",
                                &format!("label=voodu.scope={}", self.scope.name),
                                "--format",
                                "{{.Ports}}",
                            ],
                        );
                        (*host, ports.lines().map(str::to_owned).collect())
                    })
                    .collect();
                let counts: Vec<usize> = by_host.values().map(Vec::len).collect();
                if counts == per_host {
                    Ok(by_host)
                } else {
                    Err(format!("{by_host:?}"))
                }
            },
        )
    }

    /// Waits until `host`'s traffik answers with `replicas` replicas.
    fn wait_answering(&self, host: &str, replicas: usize) -> HashSet<String> {
        let through = self.through(host);
        wait_or_dump(
            &self.all(),
            Duration::from_secs(30),
            Duration::from_millis(200),
            || {
                let seen: HashSet<String> = (0..30).filter_map(|_| request(through).ok()).collect();
                if seen.len() == replicas {
                    Ok(seen)
                } else {
                    Err(format!("{host}'s traffik reached {seen:?}"))
                }
            },
        )
    }
}

/// Three hosts, each with its own engine and a node, three etcd members
/// on hosts of their own: one replica per host, published on its host's
/// address; the traffik on any one host reaches the replicas on all three.
#[test]
fn a_traffik_on_one_host_balances_over_the_replicas_on_every_host() {
    let Some(hosts) = ThreeHosts::start() else {
        return;
    };
    let by_host = hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    for (host, ports) in &by_host {
        assert!(
            ports[0].starts_with(&format!("{}:", hosts.rig.address(host))),
            "{host}'s replica is published on its address, not loopback: {ports:?}"
        );
    }
    // Each host's traffik, asked from this machine over the rig's
    // bridge, answers with every host's replica.
    for host in ["a", "b", "c"] {
        assert_eq!(hosts.wait_answering(host, 3).len(), 3);
    }
}

/// A host killed under 50 clients through another host's traffik: the
/// requests that fail are at most those in flight to it when it died (a
/// replica that does not answer a connect is passed over, and left out);
/// the other hosts' traffiks drop its endpoint once its lease expires, and
/// its replica runs again on the others.
#[test]
fn a_host_killed_under_load_fails_only_the_requests_in_flight_to_it() {
    let Some(hosts) = ThreeHosts::start() else {
        return;
    };
    hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    hosts.wait_answering("b", 3);
    let load = load::Load::start(50, hosts.through("b"));
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            if load.answered() >= 500 {
                Ok(())
            } else {
                Err(format!("{} answered", load.answered()))
            }
        },
    );
    let killed = std::time::Instant::now();
    hosts.rig.fault("kill", "a");
    // Nothing more reaches a: what b's traffik has open to it now is what
    // was in flight when it died.
    let in_flight = hosts.rig.established("b", "a");
    // a's replica runs again on b or c, and b's traffik answers with
    // three replicas again, none of them a's.
    let survivors = ["b", "c"];
    // Within the lease TTL plus 10 s of the death.
    let replaced = wait_or_dump(
        &hosts.all()[1..],
        cluster::LEASE_TTL + Duration::from_secs(10),
        Duration::from_millis(250),
        || {
            let running: usize = survivors
                .iter()
                .map(|host| {
                    hosts
                        .rig
                        .docker(
                            host,
                            &[
                                "ps",
                                "-q",
                                "--filter",
                                &format!("label=voodu.scope={}", hosts.scope.name),
                            ],
                        )
                        .lines()
                        .count()
                })
                .sum();
            if running == 3 {
                Ok(killed.elapsed())
            } else {
                Err(format!("{running} replicas on b and c"))
            }
        },
    );
    let answered_before = load.answered();
    wait_or_dump(
        &hosts.all()[1..],
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            if load.answered() >= answered_before + 500 {
                Ok(())
            } else {
                Err(format!("{} answered", load.answered()))
            }
        },
    );
    let (answered, failed, errors) = load.stop();
    println!(
        "host a killed under 50 clients through b's traffik: {answered} answered, {failed} failed, {in_flight} in flight to a at its death; its replica ran again on b or c after {replaced:?} (lease TTL {:?})",
        cluster::LEASE_TTL
    );
    assert!(
        failed <= in_flight,
        "{failed} failed, more than the {in_flight} in flight to the dead host: {errors:?}"
    );
    // The set every node offers its plugins (the union, as `vd describe`
    // shows it from b and from c) has no endpoint of a's any more.
    let web = format!("deployment/{}/web", hosts.scope.name);
    for node in &hosts.nodes[1..] {
        wait_or_dump(
            &[node],
            Duration::from_secs(20),
            Duration::from_millis(200),
            || {
                let output = node.vd(&["describe", &web, "-o", "json"]);
                let described: serde_json::Value =
                    serde_json::from_slice(&output.stdout).unwrap_or_default();
                let endpoints = described["publications"][0]["endpoints"].clone();
                let nodes: Vec<&str> = endpoints
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|endpoint| endpoint["node"].as_str())
                    .collect();
                if nodes.len() == 3 && !nodes.contains(&"a") {
                    Ok(())
                } else {
                    Err(format!("{}'s view of the set: {endpoints}", node.name))
                }
            },
        );
    }
}

/// A node's `vd` killed on a host that lives on: its statefulset
/// ordinal's container runs on, so the ordinal never moves on the lease's
/// expiry (two copies would be two primaries), checked on every host's
/// engine throughout; once the operator has the host down and runs `vd
/// node remove`, the ordinal runs on another host.
#[test]
fn a_killed_vd_s_ordinal_never_runs_twice_and_moves_after_node_remove() {
    let Some(mut hosts) = ThreeHosts::start() else {
        return;
    };
    let s = hosts.scope.name.clone();
    let holder = hosts.db_on_one_host();
    let ordinal_on = |hosts: &ThreeHosts, host: &str| hosts.ordinal_zero_on(host);
    // Every engine is watched from now on: db-0 never runs twice.
    let (watching, watcher) = hosts.watch_ordinal_zero();
    let index = ThreeHosts::index_of(holder);
    hosts.nodes[index].kill_hard();
    // Well past the lease: the ordinal waits for its node; its host still
    // runs it.
    std::thread::sleep(cluster::LEASE_TTL * 2 + Duration::from_secs(3));
    assert_eq!(ordinal_on(&hosts, holder), 1, "db-0 still runs on {holder}");
    let asker = &hosts.nodes[(index + 1) % 3];
    let listed = String::from_utf8_lossy(&asker.vd(&["get", "nodes"]).stdout).into_owned();
    assert!(
        listed.contains(&format!("statefulset/{s}/db 0")),
        "get nodes names the ordinal waiting on {holder}: {listed}"
    );
    // So do `vd rollout status` (which fails: the ordinal runs nowhere)
    // and `vd describe`, each with the command that moves it.
    let db = format!("statefulset/{s}/db");
    let status = asker.vd(&["rollout", "status", &db, "--timeout", "30s"]);
    let said = cluster::stderr(&status);
    assert_eq!(status.status.code(), Some(1), "{status:?}");
    assert!(
        said.contains(&format!("ordinal 0 waits on lost node {holder}"))
            && said.contains(&format!("`vd node remove {holder}`")),
        "rollout status names the ordinal waiting on {holder}: {said}"
    );
    let described = String::from_utf8_lossy(&asker.vd(&["describe", &db]).stdout).into_owned();
    assert!(
        described.contains(&format!("ordinal 0 waits on lost node {holder}"))
            && described.contains(&format!("`vd node remove {holder}`")),
        "describe names the ordinal waiting on {holder}: {described}"
    );
    // The operator has the host down, then declares it gone.
    hosts.rig.fault("kill", holder);
    let removed = asker.vd(&["node", "remove", holder]);
    assert!(removed.status.success(), "{removed:?}");
    let moved_to = wait_or_dump(
        &[asker],
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let on: Vec<&str> = ["a", "b", "c"]
                .into_iter()
                .filter(|host| *host != holder && ordinal_on(&hosts, host) == 1)
                .collect();
            match on.as_slice() {
                [one] => Ok(*one),
                other => Err(format!("db-0 runs on {other:?} of the others")),
            }
        },
    );
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    let most = watcher.join().unwrap();
    assert!(most <= 1, "db-0 ran in {most} containers at once");
    eprintln!("db-0 moved from {holder} to {moved_to} after `vd node remove`");
}

/// A rolling update of three replicas, one per host, under 50 clients
/// through the traffik of host a: every host replaces its replica
/// surge-first, each old one drained by every host's traffik before it
/// goes; no request fails.
#[test]
fn a_rolling_update_across_three_hosts_under_50_clients_fails_no_request() {
    let Some(hosts) = ThreeHosts::start() else {
        return;
    };
    hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    let before: Vec<String> = ["a", "b", "c"]
        .iter()
        .flat_map(|host| hosts.replica_ids(host))
        .collect();
    hosts.wait_answering("a", 3);
    let load = load::Load::start(50, hosts.through("a"));
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            if load.answered() >= 1_000 {
                Ok(())
            } else {
                Err(format!(
                    "{} answered, {} failed",
                    load.answered(),
                    load.failed()
                ))
            }
        },
    );
    hosts.nodes[1].apply("web.hcl", &hosts.web("2"));
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(90),
        Duration::from_millis(300),
        || {
            let now: Vec<Vec<String>> = ["a", "b", "c"]
                .iter()
                .map(|host| hosts.replica_ids(host))
                .collect();
            if now
                .iter()
                .all(|ids| ids.len() == 1 && !before.contains(&ids[0]))
            {
                Ok(())
            } else {
                Err(format!("replicas on a, b, c: {now:?}, before: {before:?}"))
            }
        },
    );
    let settled_at = load.answered();
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(30),
        Duration::from_millis(20),
        || {
            if load.answered() >= settled_at + 1_000 {
                Ok(())
            } else {
                Err(format!("{} answered since", load.answered() - settled_at))
            }
        },
    );
    let (answered, failed, errors) = load.stop();
    println!(
        "rolling update across three hosts under 50 clients: {answered} answered, {failed} failed"
    );
    assert_eq!(
        failed,
        0,
        "{failed} of {} failed: {errors:?}",
        answered + failed
    );
    assert_eq!(hosts.wait_answering("a", 3).len(), 3);
}

/// Placement converges: `web` applied right after traffik's install,
/// before the other nodes report it loaded (so its replicas first go to
/// the nodes that have it), and again after a node's `vd` was killed and
/// started again, ends with one replica per host, each move surge-first.
#[test]
fn placement_converges_to_one_replica_per_host() {
    let Some(mut hosts) = ThreeHosts::start_with(true) else {
        return;
    };
    hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    // c's vd dies with its host alive: its replica moves to a or b (a
    // second copy of a stateless replica is harmless) ...
    hosts.nodes[2].kill_hard();
    wait_or_dump(
        &hosts.all()[..2],
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let on: Vec<usize> = ["a", "b"]
                .iter()
                .map(|host| hosts.replica_ids(host).len())
                .collect();
            if on.iter().sum::<usize>() == 3 {
                Ok(())
            } else {
                Err(format!("replicas on a, b: {on:?}"))
            }
        },
    );
    // ... and once c is back, one moves back to it.
    hosts.nodes[2].start_again();
    hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    assert_eq!(hosts.wait_answering("a", 3).len(), 3);
}

impl ThreeHosts {
    /// Applies statefulset `db` of one replica and waits until one host
    /// runs ordinal 0: that host.
    fn db_on_one_host(&self) -> &'static str {
        let s = &self.scope.name;
        self.nodes[0].apply(
            "db.hcl",
            &format!(
                "statefulset \"{s}\" \"db\" {{\n  image = \"{}\"\n  replicas = 1\n}}\n",
                self.image.name
            ),
        );
        wait_or_dump(
            &self.all(),
            Duration::from_secs(60),
            Duration::from_millis(250),
            || {
                let on: Vec<&'static str> = ["a", "b", "c"]
                    .into_iter()
                    .filter(|host| self.ordinal_zero_on(host) == 1)
                    .collect();
                match on.as_slice() {
                    [one] => Ok(*one),
                    other => Err(format!("db-0 runs on {other:?}")),
                }
            },
        )
    }

    /// How many containers of db's ordinal 0 run on `host`'s engine.
    fn ordinal_zero_on(&self, host: &str) -> usize {
        self.rig
            .docker(
                host,
                &[
                    "ps",
                    "-q",
                    "--filter",
                    &format!("name=^{}-db.0$", self.scope.name),
                ],
            )
            .lines()
            .count()
    }

    /// Watches every host's engine until the returned flag is cleared:
    /// the most containers of db's ordinal 0 seen running at once.
    fn watch_ordinal_zero(
        &self,
    ) -> (
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<usize>,
    ) {
        let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sockets: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|host| self.rig.docker_host(host))
            .collect();
        let name = format!("name=^{}-db.0$", self.scope.name);
        let flag = watching.clone();
        let watcher = std::thread::spawn(move || {
            let mut most = 0;
            while flag.load(std::sync::atomic::Ordering::SeqCst) {
                let running: usize = sockets
                    .iter()
                    .map(|socket| {
                        Command::new("docker")
                            .args(["ps", "-q", "--filter", &name])
                            .env("DOCKER_HOST", socket)
                            .output()
                            .map(|output| String::from_utf8_lossy(&output.stdout).lines().count())
                            .unwrap_or(0)
                    })
                    .sum();
                most = most.max(running);
                std::thread::sleep(Duration::from_millis(100));
            }
            most
        });
        (watching, watcher)
    }

    /// The index of `host`'s node.
    fn index_of(host: &str) -> usize {
        ["a", "b", "c"]
            .iter()
            .position(|name| *name == host)
            .expect("a host of three")
    }
}

/// A host partitioned from the others and from etcd keeps serving what it
/// had (its replicas run, its traffik answers on the host itself), stops
/// its statefulset replica before its lease can expire (its ordinal never
/// runs twice, on any host), and converges when healed: it joins again and
/// runs its ordinal again itself.
#[test]
fn a_partitioned_host_serves_on_fences_its_ordinal_and_converges_when_healed() {
    let Some(hosts) = ThreeHosts::start() else {
        return;
    };
    hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    let cut = hosts.db_on_one_host();
    let node = &hosts.nodes[ThreeHosts::index_of(cut)];
    let (watching, watcher) = hosts.watch_ordinal_zero();
    hosts.rig.fault("partition", cut);
    // Before the lease (TTL 2 s) can expire, two thirds of it unrenewed,
    // the node stops db-0; its deployment replica runs on.
    wait_or_dump(
        &[node],
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match hosts.ordinal_zero_on(cut) {
            0 => Ok(()),
            running => Err(format!("db-0 still runs on {cut}: {running}")),
        },
    );
    assert_eq!(hosts.replica_ids(cut).len(), 1, "its web replica runs on");
    // Its traffik still serves, asked on the host itself.
    let on_the_host = Command::new(&hosts.rig.wrap(cut)[0])
        .args(&hosts.rig.wrap(cut)[1..])
        .args(["bash", "-c"])
        .arg(format!(
            "exec 3<>/dev/tcp/127.0.0.1/{}; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; timeout 2 cat <&3",
            hosts.port
        ))
        .output()
        .expect("nsenter runs");
    assert!(
        String::from_utf8_lossy(&on_the_host.stdout).starts_with("HTTP/1.1 200"),
        "{cut}'s traffik serves on the host: {on_the_host:?}"
    );
    std::thread::sleep(cluster::LEASE_TTL * 2);
    hosts.rig.fault("unpartition", cut);
    // Healed: it joins again and runs db-0 again itself.
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(60),
        Duration::from_millis(250),
        || match hosts.ordinal_zero_on(cut) {
            1 => Ok(()),
            running => Err(format!("db-0 on {cut}: {running}")),
        },
    );
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    let most = watcher.join().unwrap();
    assert!(most <= 1, "db-0 ran in {most} containers at once");
    assert!(
        node.log().contains("lease went unrenewed") || node.log().contains("lease is lost"),
        "{}",
        node.log()
    );
}

/// A host frozen past its lease (every process stopped, its containers
/// paused), then thawed, acts on nothing stale: its ordinal waited for it
/// (never on another host), it stops it once thawed, finding its lease
/// lost before any step, joins again and runs it again.
#[test]
fn a_frozen_host_thawed_acts_on_nothing_stale() {
    let Some(hosts) = ThreeHosts::start() else {
        return;
    };
    hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    let frozen = hosts.db_on_one_host();
    let node = &hosts.nodes[ThreeHosts::index_of(frozen)];
    let (watching, watcher) = hosts.watch_ordinal_zero();
    hosts.rig.fault("freeze", frozen);
    std::thread::sleep(cluster::LEASE_TTL * 2 + Duration::from_secs(2));
    // Its web replica runs on the others meanwhile.
    let others: Vec<&str> = ["a", "b", "c"]
        .into_iter()
        .filter(|host| *host != frozen)
        .collect();
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(30),
        Duration::from_millis(250),
        || {
            let running: usize = others
                .iter()
                .map(|host| hosts.replica_ids(host).len())
                .sum();
            if running == 3 {
                Ok(())
            } else {
                Err(format!("{running} web replicas on {others:?}"))
            }
        },
    );
    hosts.rig.fault("thaw", frozen);
    wait_or_dump(
        &[node],
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let log = node.log();
            if log.contains("lease went unrenewed") || log.contains("lease is lost") {
                Ok(())
            } else {
                Err("the thawed node has not found its lease lost yet".to_owned())
            }
        },
    );
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(60),
        Duration::from_millis(250),
        || match hosts.ordinal_zero_on(frozen) {
            1 => Ok(()),
            running => Err(format!("db-0 on {frozen}: {running}")),
        },
    );
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    let most = watcher.join().unwrap();
    assert!(most <= 1, "db-0 ran in {most} containers at once");
    for other in others {
        assert_eq!(
            hosts.ordinal_zero_on(other),
            0,
            "db-0 never moved to {other}"
        );
    }
}

/// The replicas of `workload`'s name in a `vd get pods` or `vd stats`
/// JSON answer, as (node, state) pairs, sorted.
fn nodes_of(answer: &serde_json::Value, name: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = answer["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|replica| replica["workload"]["name"] == name)
        .map(|replica| {
            (
                replica["node"].as_str().unwrap_or("-").to_owned(),
                replica["state"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    found.sort();
    found
}

/// One view from any node. From c, which runs no replica of `pair`
/// (placed on a and b only): `vd rollout status`, `vd get pods`, `vd
/// logs`, `vd stats` and `vd describe` cover the replicas on a and b, each
/// naming its node. A failure on a alone (its engine cannot pull the
/// image) fails c's `rollout status`, naming a. A frozen host is named by
/// c's `get pods`, whose exit code is then not 0.
#[test]
fn any_node_answers_for_every_node_s_replicas_and_names_the_ones_left_out() {
    let Some(hosts) = ThreeHosts::start() else {
        return;
    };
    hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    let s = hosts.scope.name.clone();
    let pair = format!(
        "deployment \"{s}\" \"pair\" {{\n  image = \"{}\"\n  replicas = 2\n  nodes = [\"a\", \"b\"]\n}}\n",
        hosts.image.name
    );
    hosts.nodes[0].apply("pair.hcl", &pair);
    let c = &hosts.nodes[2];
    let pair_id = format!("deployment/{s}/pair");
    let running = vec![
        ("a".to_owned(), "running".to_owned()),
        ("b".to_owned(), "running".to_owned()),
    ];
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let status = c.vd(&["rollout", "status", &pair_id]);
            let pods = c.vd(&["get", "pods", "-o", "json"]);
            let answer: serde_json::Value =
                serde_json::from_slice(&pods.stdout).unwrap_or_default();
            if status.status.success()
                && pods.status.success()
                && nodes_of(&answer, "pair") == running
            {
                Ok(())
            } else {
                Err(format!("rollout status {status:?}; get pods {answer}"))
            }
        },
    );
    assert!(
        c.running(&pair_id).is_empty(),
        "c runs no replica of pair itself"
    );
    // Every view names each replica's node.
    let table = String::from_utf8_lossy(&c.vd(&["get", "pods"]).stdout).into_owned();
    assert!(table.contains("NODE"), "{table}");
    let logs = c.vd(&["logs", &pair_id]);
    assert!(logs.status.success(), "{logs:?}");
    let logs = String::from_utf8_lossy(&logs.stdout).into_owned();
    for node in ["a", "b"] {
        assert!(
            logs.lines()
                .any(|line| line.contains(&format!(" on {node} | echo-server"))),
            "c's `vd logs` has {node}'s replica's lines: {logs}"
        );
    }
    let stats = c.vd(&["stats", &pair_id, "-o", "json"]);
    assert!(stats.status.success(), "{stats:?}");
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(nodes_of(&stats, "pair"), running, "{stats}");
    let described = c.vd(&["describe", &pair_id, "-o", "json"]);
    assert!(described.status.success(), "{described:?}");
    let described: serde_json::Value = serde_json::from_slice(&described.stdout).unwrap();
    assert_eq!(nodes_of(&described, "pair"), running, "{described}");

    // A failure on a alone: c's rollout status fails, naming a.
    let broken = format!(
        "deployment \"{s}\" \"broken\" {{\n  image = \"voodu-no-such-image-{s}:1\"\n  replicas = 1\n  nodes = [\"a\"]\n}}\n",
    );
    let path = std::env::temp_dir().join(format!("{s}-broken.hcl"));
    std::fs::write(&path, broken).unwrap();
    let applied = c.vd(&["apply", "--no-wait", "-f", &path.to_string_lossy()]);
    assert!(applied.status.success(), "{applied:?}");
    let status = c.vd(&[
        "rollout",
        "status",
        &format!("deployment/{s}/broken"),
        "--timeout",
        "60s",
    ]);
    let said = cluster::stderr(&status);
    assert_eq!(status.status.code(), Some(1), "{status:?}");
    assert!(
        said.contains("on node a:") && said.contains("did not converge"),
        "c's rollout status names a's failure: {said}"
    );

    // A replica that waits for a node never seen is no converged rollout.
    let ghost = format!(
        "deployment \"{s}\" \"ghost\" {{\n  image = \"{}\"\n  replicas = 1\n  nodes = [\"zz\"]\n}}\n",
        hosts.image.name
    );
    std::fs::write(&path, ghost).unwrap();
    let applied = c.vd(&["apply", "--no-wait", "-f", &path.to_string_lossy()]);
    assert!(
        applied.status.success() && cluster::stderr(&applied).contains("node \"zz\""),
        "the apply warns of zz: {applied:?}"
    );
    let status = c.vd(&[
        "rollout",
        "status",
        &format!("deployment/{s}/ghost"),
        "--timeout",
        "60s",
    ]);
    let said = cluster::stderr(&status);
    assert_eq!(status.status.code(), Some(1), "{status:?}");
    assert!(
        said.contains("1 replica of 1 waits for node \"zz\", which this cluster has never seen"),
        "rollout status names zz: {said}"
    );

    // A host that answers nothing is named, and the answer is not whole.
    hosts.rig.fault("freeze", "b");
    let pods = c.vd(&["get", "pods", "-o", "json"]);
    hosts.rig.fault("thaw", "b");
    let said = cluster::stderr(&pods);
    assert_ne!(pods.status.code(), Some(0), "{pods:?}");
    assert!(
        said.contains("node b is left out"),
        "c's get pods names b: {said}"
    );
    let answer: serde_json::Value = serde_json::from_slice(&pods.stdout).unwrap();
    assert_eq!(
        nodes_of(&answer, "pair"),
        vec![("a".to_owned(), "running".to_owned())],
        "a's replica is still listed: {answer}"
    );
    assert_eq!(answer["unanswered"][0]["node"], "b", "{answer}");
}

/// A node whose worker hangs (SIGSTOP) while its supervisor lives: no
/// worker renews the lease, so the supervisor stops the node's
/// statefulset replica itself, two thirds of the TTL after the last
/// renewal, before the lease can expire. The worker, resumed, starts it
/// again on its host; db-0 never runs twice.
#[test]
fn a_hung_worker_s_supervisor_stops_its_statefulset_replica_before_the_lease_expires() {
    let Some(hosts) = ThreeHosts::start() else {
        return;
    };
    hosts.wait_spread(&["a", "b", "c"], &[1, 1, 1]);
    let holder = hosts.db_on_one_host();
    let node = &hosts.nodes[ThreeHosts::index_of(holder)];
    let (watching, watcher) = hosts.watch_ordinal_zero();
    let hung_at = std::time::Instant::now();
    node.signal(libc::SIGSTOP);
    let stopped_after = wait_or_dump(
        &[node],
        cluster::LEASE_TTL * 4,
        Duration::from_millis(50),
        || match hosts.ordinal_zero_on(holder) {
            0 => Ok(hung_at.elapsed()),
            _ => Err(format!("db-0 still runs on {holder}")),
        },
    );
    node.signal(libc::SIGCONT);
    // Fenced at two thirds of the TTL after the last renewal (at most
    // that after the hang), then up to a second for the replica to exit,
    // and the polling's own lag.
    let bound = cluster::LEASE_TTL * 2 / 3 + Duration::from_millis(2_500);
    assert!(
        stopped_after <= bound,
        "db-0 stopped {stopped_after:?} after the hang, past {bound:?}"
    );
    assert!(
        node.log().contains(
            "no worker renews the node's lease: the supervisor stops its statefulset replicas"
        ),
        "the supervisor says why: {}",
        node.log()
    );
    wait_or_dump(
        &hosts.all(),
        Duration::from_secs(60),
        Duration::from_millis(250),
        || match hosts.ordinal_zero_on(holder) {
            1 => Ok(()),
            running => Err(format!("db-0 on {holder}: {running}")),
        },
    );
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    let most = watcher.join().unwrap();
    assert!(most <= 1, "db-0 ran in {most} containers at once");
    eprintln!(
        "a hung worker's supervisor stopped db-0 {stopped_after:?} after the hang (TTL {:?})",
        cluster::LEASE_TTL
    );
}

/// The ticks of the scope's cronjob runs on `host`'s engine, from the
/// trigger each run's container carries.
fn run_ticks(hosts: &ThreeHosts, host: &str) -> Vec<i64> {
    hosts
        .rig
        .docker(
            host,
            &[
                "ps",
                "-a",
                "--filter",
                &format!("label=voodu.scope={}", hosts.scope.name),
                "--filter",
                "label=voodu.run",
                "--format",
                "{{.Label \"voodu.run_trigger\"}}",
            ],
        )
        .lines()
        .filter_map(|trigger| serde_json::from_str::<serde_json::Value>(trigger).ok())
        .filter_map(|trigger| trigger["tick"].as_i64())
        .collect()
}

/// A cronjob in a cluster of three hosts: each tick runs on exactly one
/// host, the leader's, and when the leader's node dies, the next leader
/// runs the next ticks; no tick runs twice across the hosts.
#[test]
fn a_cronjob_s_tick_runs_on_exactly_one_host_and_moves_with_the_lead() {
    let Some(mut hosts) = ThreeHosts::start() else {
        return;
    };
    let s = hosts.scope.name.clone();
    let cronjob = format!(
        "cronjob \"{s}\" \"tick\" {{\n  schedule = \"*/2 * * * * *\"\n  image    = \"{}\"\n  command  = [\"job\", \"0\"]\n  successful_history_limit = 50\n}}\n",
        hosts.image.name
    );
    hosts.nodes[0].apply("tick.hcl", &cronjob);
    let ticks_by_host = |hosts: &ThreeHosts| -> BTreeMap<&'static str, Vec<i64>> {
        ["a", "b", "c"]
            .into_iter()
            .map(|host| (host, run_ticks(hosts, host)))
            .collect()
    };
    let leader = wait_or_dump(
        &hosts.all(),
        Duration::from_secs(30),
        Duration::from_millis(500),
        || {
            let by_host = ticks_by_host(&hosts);
            let running: Vec<&str> = by_host
                .iter()
                .filter(|(_, ticks)| !ticks.is_empty())
                .map(|(host, _)| *host)
                .collect();
            match running.as_slice() {
                [one] if by_host[one].len() >= 3 => Ok(*one),
                _ => Err(format!("runs by host: {by_host:?}")),
            }
        },
    );
    // The leader's node dies; its host (and its runs) stay. A run it was
    // starting as it died may still show up on its engine (the engine
    // finishes a create it was asked for): it is of a tick no later than
    // the death, and no other host runs that tick (asserted below).
    hosts.nodes[ThreeHosts::index_of(leader)].kill_hard();
    let dead_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64;
    let next = wait_or_dump(
        &hosts.all(),
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let by_host = ticks_by_host(&hosts);
            let others: Vec<&str> = by_host
                .iter()
                .filter(|(host, ticks)| **host != leader && !ticks.is_empty())
                .map(|(host, _)| *host)
                .collect();
            match others.as_slice() {
                [one] if by_host[one].len() >= 3 => Ok(*one),
                _ => Err(format!("runs by host after {leader} died: {by_host:?}")),
            }
        },
    );
    let by_host = ticks_by_host(&hosts);
    assert!(
        by_host[leader].iter().all(|tick| *tick <= dead_at),
        "the dead node's host ran a tick after it died at {dead_at}: {by_host:?}"
    );
    let mut all: Vec<i64> = by_host.values().flatten().copied().collect();
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "a tick ran twice: {by_host:?}");
    eprintln!("the ticks ran on {leader}, then on {next} once {leader}'s node died: {by_host:?}");
}
