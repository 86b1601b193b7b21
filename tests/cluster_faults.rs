//! Cluster mode under faults, each node on a host of its own (its own
//! engine and network, `support/hosts.rs`) and etcd's members on hosts of
//! theirs: etcd
//! members killed (one, then two), a node cut off from the store through a
//! proxy that the test cuts, and a node frozen (SIGSTOP) past its lease.
//! Three rules are checked: a node that loses the store changes nothing
//! and keeps its replicas and plugins serving the last sets they had
//! (fail static); nothing is half-applied; and once the store is back,
//! everything converges by itself.

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
#[path = "support/proxy.rs"]
mod proxy;
#[path = "support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use cluster::{stderr, wait_or_dump, DockerCluster, Node, LEASE_TTL};
use proxy::CuttableProxy;
use voodu_tests::{recorded_calls, wait_until};

/// The replica ids of the last set process `pid`'s recorder was published
/// for `workload_name`.
fn last_ids(calls: &Path, pid: u32, workload_name: &str) -> Option<Vec<String>> {
    recorded_calls(calls)
        .into_iter()
        .rfind(|call| {
            call.call == "publish" && call.pid == pid && call.request["name"] == workload_name
        })
        .map(|call| call.replica_ids())
}

/// Installs the recorder through `node` and waits until `count` nodes have
/// loaded it.
fn install_recorder(node: &Node, count: usize) {
    let recorder = voodu_tests::rust_cdylib("voodu_fixture_recorder");
    cluster::install_everywhere(node, &recorder, "recorder", count);
}

/// A deployment of `replicas` echo replicas with a recorder block.
fn web(scope: &str, image: &str, replicas: u32, calls: &Path) -> String {
    format!(
        "deployment \"{scope}\" \"web\" {{\n  image = \"{image}\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n  recorder {{\n    file = \"{}\"\n  }}\n}}\n",
        calls.display()
    )
}

/// How many containers of `scope` run on the engines behind `sockets`
/// (each a `DOCKER_HOST`), with the further `filters` (`name=^...$`).
fn running_on(sockets: &[String], scope: &str, filters: &[String]) -> usize {
    sockets
        .iter()
        .map(|socket| {
            let mut command = std::process::Command::new("docker");
            command.env("DOCKER_HOST", socket).args([
                "ps",
                "-q",
                "--filter",
                &format!("label=voodu.scope={scope}"),
            ]);
            for filter in filters {
                command.args(["--filter", filter]);
            }
            let output = command.output().expect("docker runs");
            String::from_utf8_lossy(&output.stdout).lines().count()
        })
        .sum()
}

/// The `DOCKER_HOST` of each of `hosts`.
fn sockets(rig: &DockerCluster, hosts: &[&str]) -> Vec<String> {
    hosts
        .iter()
        .map(|host| rig.hosts.docker_host(host))
        .collect()
}

#[test]
fn with_one_etcd_member_down_nodes_go_on_and_with_two_an_apply_is_refused_and_replicas_serve_on() {
    let Some(mut rig) = DockerCluster::start(3) else {
        return;
    };
    let (image, scope) = (&rig.image, &rig.scope);
    let s = &scope.name;
    let a = rig.node("a");
    let b = rig.node("b");
    install_recorder(&a, 2);
    let calls_dir = tempfile::tempdir().unwrap();
    let calls = calls_dir.path().join("calls.jsonl");
    let pids = [a.pid() as u32, b.pid() as u32];
    let sets_of = |count: usize| {
        let calls = calls.clone();
        move || {
            let sets: Vec<_> = pids
                .iter()
                .map(|pid| last_ids(&calls, *pid, "web"))
                .collect();
            if sets
                .iter()
                .all(|set| set.as_ref().map(Vec::len) == Some(count))
            {
                Ok(())
            } else {
                Err(format!("the nodes' last sets: {sets:?}"))
            }
        }
    };

    a.apply("web.hcl", &web(s, &image.name, 2, &calls));
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(300),
        sets_of(2),
    );

    // One member of three down: an apply, its rollout and the publishes on
    // both nodes go on.
    rig.etcd.kill_member(2);
    b.apply("web.hcl", &web(s, &image.name, 3, &calls));
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(300),
        sets_of(3),
    );

    // Two down: the apply is refused within 5 s, naming the lost quorum,
    // and nothing is stored; the replicas and the plugins' sets stay.
    rig.etcd.kill_member(1);
    let started = Instant::now();
    let path = a.root.path().join("web.hcl");
    std::fs::write(&path, web(s, &image.name, 5, &calls)).unwrap();
    let refused = a.vd(&["apply", "--no-wait", "-f", &path.to_string_lossy()]);
    let took = started.elapsed();
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        stderr(&refused).contains(
            "the cluster store has no quorum (1 of 3 members reachable) — nothing was stored"
        ),
        "{}",
        stderr(&refused)
    );
    eprintln!("without quorum, the apply was refused after {took:?}");
    assert!(took < Duration::from_secs(5), "refused after {took:?}");
    let calls_before = recorded_calls(&calls).len();
    std::thread::sleep(LEASE_TTL * 2);
    assert_eq!(
        running_on(&sockets(&rig, &["a", "b"]), s, &[]),
        3,
        "every replica runs on without quorum"
    );
    let publishes_since: Vec<_> = recorded_calls(&calls)
        .into_iter()
        .skip(calls_before)
        .filter(|call| call.call == "publish")
        .map(|call| call.replica_ids())
        .collect();
    assert!(
        publishes_since.iter().all(|ids| ids.len() == 3),
        "the plugins keep serving the last sets: {publishes_since:?}"
    );

    // Quorum back: the nodes go on by themselves; the refused apply left
    // nothing behind, and the next one rolls out.
    rig.etcd.start_member(1);
    rig.etcd.wait_healthy(Duration::from_secs(30));
    let workloads = a.vd(&["describe", &format!("deployment/{s}/web"), "-o", "json"]);
    let described: serde_json::Value =
        serde_json::from_slice(&workloads.stdout).unwrap_or_default();
    assert!(
        !described.to_string().contains("\"replicas\":5"),
        "the refused apply stored nothing: {described}"
    );
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        let applied = a.vd(&["apply", "--no-wait", "-f", &path.to_string_lossy()]);
        if applied.status.success() {
            Ok(())
        } else {
            Err(stderr(&applied))
        }
    });
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(300),
        sets_of(5),
    );
}

#[test]
fn a_node_cut_off_from_etcd_changes_nothing_and_converges_when_it_is_back() {
    let Some(rig) = DockerCluster::start(1) else {
        return;
    };
    let (etcd, image, scope) = (&rig.etcd, &rig.image, &rig.scope);
    let s = &scope.name;
    let web_id = format!("deployment/{s}/web");
    let member: SocketAddr = etcd.endpoints()[0]
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    // On this machine's side of the rig's bridge, where host c reaches it.
    let proxy = CuttableProxy::start_on(&rig.hosts.bridge_address(), member);
    let a = rig.node("a");
    let b = rig.node("b");
    let c = rig.node_via(&proxy.url(), "c");
    install_recorder(&a, 3);
    let calls_dir = tempfile::tempdir().unwrap();
    let calls = calls_dir.path().join("calls.jsonl");
    a.apply("web.hcl", &web(s, &image.name, 3, &calls));
    let c_pid = c.pid() as u32;
    let c_replica = wait_until(Duration::from_secs(30), Duration::from_millis(300), || {
        let on_c = c.running(&web_id);
        let c_set = last_ids(&calls, c_pid, "web").unwrap_or_default();
        if on_c.len() == 1 && c_set.len() == 3 {
            Ok(on_c[0].clone())
        } else {
            Err(format!("c runs {on_c:?}, its plugin's last set: {c_set:?}"))
        }
    });
    let c_set = last_ids(&calls, c_pid, "web").unwrap();

    // Cut off: the others count c lost and run its replica elsewhere; c
    // keeps its replica and its plugin's last set, and changes nothing.
    proxy.cut();
    wait_until(
        LEASE_TTL + Duration::from_secs(10),
        Duration::from_millis(300),
        || match (a.running(&web_id).len(), b.running(&web_id).len()) {
            (on_a, on_b) if on_a + on_b == 3 => Ok(()),
            counts => Err(format!("a and b run {counts:?}")),
        },
    );
    std::thread::sleep(LEASE_TTL);
    assert!(
        c.runs(&web_id, &c_replica),
        "c keeps its replica while cut off"
    );
    assert_eq!(
        last_ids(&calls, c_pid, "web").unwrap(),
        c_set,
        "c's plugin keeps the last set it had"
    );

    // Back: c joins again and the cluster converges to one replica per
    // node, c's plugin publishing the cluster's current set. Either c
    // found its replica placed elsewhere and drained and removed it, or
    // the leader's rebalancing gave c a slot back first and c kept it (a
    // move for balance is surge-first: c's replica serves, then a fuller
    // node gives one up).
    proxy.restore();
    wait_or_dump(
        &[&a, &b, &c],
        Duration::from_secs(40),
        Duration::from_millis(300),
        || {
            let each: Vec<Vec<String>> = [&a, &b, &c]
                .iter()
                .map(|node| node.running(&web_id))
                .collect();
            let c_now = last_ids(&calls, c_pid, "web").unwrap_or_default();
            let mut expected: Vec<String> = each.iter().flatten().cloned().collect();
            expected.sort();
            if each.iter().all(|ids| ids.len() == 1) && c_now == expected {
                Ok(())
            } else {
                Err(format!("a, b and c run {each:?}, c's plugin has {c_now:?}"))
            }
        },
    );
    if !c.runs(&web_id, &c_replica) {
        let drained = recorded_calls(&calls)
            .into_iter()
            .any(|call| call.call == "drain" && call.drained_replica() == c_replica);
        assert!(
            drained,
            "c's replica {c_replica} was drained before its removal"
        );
    }
}

#[test]
fn a_node_frozen_past_its_lease_acts_on_nothing_stale_and_no_ordinal_ever_runs_twice() {
    let Some(rig) = DockerCluster::start(1) else {
        return;
    };
    let (image, scope) = (&rig.image, &rig.scope);
    let s = scope.name.clone();
    let db = format!("statefulset/{s}/db");
    let a = rig.node("a");
    let b = rig.node("b");
    a.apply(
        "db.hcl",
        &format!(
            "statefulset \"{s}\" \"db\" {{\n  image = \"{}\"\n  replicas = 1\n}}\n",
            image.name
        ),
    );
    let (frozen, other) = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(300),
        || match (a.runs(&db, "0"), b.runs(&db, "0")) {
            (true, false) => Ok((&a, &b)),
            (false, true) => Ok((&b, &a)),
            seen => Err(format!("ordinal 0 on a, b: {seen:?}")),
        },
    );

    // Both hosts' engines are watched throughout: ordinal 0 never runs
    // twice.
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (watching, s) = (watching.clone(), s.clone());
        let engines = sockets(&rig, &["a", "b"]);
        std::thread::spawn(move || {
            let mut most = 0;
            while watching.load(std::sync::atomic::Ordering::SeqCst) {
                let running = running_on(&engines, &s, &[format!("name=^{s}-db.0$")]);
                most = most.max(running);
                std::thread::sleep(Duration::from_millis(100));
            }
            most
        })
    };

    // Frozen well past its lease: the ordinal is not placed on the other
    // node (a lost node's host may still run it).
    frozen.signal(libc::SIGSTOP);
    std::thread::sleep(LEASE_TTL * 2 + Duration::from_secs(3));
    assert!(
        !other.runs(&db, "0"),
        "a lease's expiry alone moved ordinal 0"
    );
    let thawed = Instant::now();
    frozen.signal(libc::SIGCONT);
    // Thawed, it finds its lease lost before any step: it stops the
    // ordinal at once, joins again, and runs it again itself.
    wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        if frozen.runs(&db, "0") {
            Err("the thawed node still runs ordinal 0".to_owned())
        } else {
            Ok(())
        }
    });
    let stopped_after = thawed.elapsed();
    wait_or_dump(
        &[&a, &b],
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            if frozen.runs(&db, "0") {
                Ok(())
            } else {
                Err(format!("{} does not run ordinal 0 again yet", frozen.name))
            }
        },
    );
    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    let most = watcher.join().unwrap();
    assert!(most <= 1, "ordinal 0 ran in {most} containers at once");
    assert!(!other.runs(&db, "0"), "ordinal 0 never moved");
    eprintln!("the thawed node stopped ordinal 0 {stopped_after:?} after it was thawed");
    let log = frozen.log();
    assert!(
        log.contains("lease went unrenewed") || log.contains("lease is lost"),
        "the thawed node says why it stopped: {log}"
    );
}

#[test]
fn a_node_that_does_not_answer_a_drain_counts_as_not_drained_and_is_named() {
    let Some(rig) = DockerCluster::start(1) else {
        return;
    };
    let (image, scope) = (&rig.image, &rig.scope);
    let s = &scope.name;
    let web_id = format!("deployment/{s}/web");
    let a = rig.node("a");
    let b = rig.node("b");
    install_recorder(&a, 2);
    let calls_dir = tempfile::tempdir().unwrap();
    let calls = calls_dir.path().join("calls.jsonl");
    let pinned = |replicas: u32| {
        format!(
            "deployment \"{s}\" \"web\" {{\n  image = \"{}\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n  nodes = [\"a\"]\n  drain_timeout = \"3s\"\n  recorder {{\n    file = \"{}\"\n  }}\n}}\n",
            image.name,
            calls.display()
        )
    };
    a.apply("web.hcl", &pinned(2));
    wait_or_dump(
        &[&a, &b],
        Duration::from_secs(30),
        Duration::from_millis(300),
        || {
            let on_a = a.running(&web_id).len();
            let b_set = last_ids(&calls, b.pid() as u32, "web").unwrap_or_default();
            if on_a == 2 && b_set.len() == 2 {
                Ok(())
            } else {
                Err(format!("a runs {on_a}, b's plugin has {b_set:?}"))
            }
        },
    );

    // b is frozen while a removes a replica: a's drain round waits for b's
    // answer until the budget runs out, then removes it anyway, and says
    // which node did not answer.
    b.signal(libc::SIGSTOP);
    a.apply("web.hcl", &pinned(1));
    let warning = wait_or_dump(
        &[&a],
        Duration::from_secs(20),
        Duration::from_millis(300),
        || {
            let events = a.vd(&["events", &web_id, "--limit", "50"]);
            let text = String::from_utf8_lossy(&events.stdout).into_owned();
            match text
                .lines()
                .find(|line| line.contains("did not answer the drain"))
            {
                Some(line) => Ok(line.to_owned()),
                None => Err(format!("no warning yet: {text}")),
            }
        },
    );
    b.signal(libc::SIGCONT);
    assert!(
        warning.contains("node b did not answer the drain within its 3s budget, so it counts as not drained; removed anyway"),
        "{warning}"
    );
    // The warning is recorded as the removal begins; the replica is gone
    // once it ends.
    wait_until(
        Duration::from_secs(15),
        Duration::from_millis(200),
        || match a.running(&web_id).len() {
            1 => Ok(()),
            running => Err(format!("a runs {running} replicas")),
        },
    );
}
