//! Cluster mode on real hosts: three `vd controller --cluster` nodes, each
//! on a host of its own with its own Docker engine and address
//! (`support/hosts.rs`), on a three-member etcd whose members run on hosts
//! of theirs. The leader places every
//! replica on a node; each node runs only its share; a `nodes` list keeps a
//! workload on the nodes it names; a lost node's replicas move to the
//! others.

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
#[path = "support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::time::{Duration, Instant};

use cluster::{wait_or_dump, DockerCluster, Node, LEASE_TTL};
use voodu_tests::wait_until;

/// How many replicas of `workload` run on each node, in node order.
/// What a node answers `line` sent in the clear to its peer port at
/// `ip:port`, from the host `wrap` runs on.
fn in_the_clear(wrap: &[String], ip: &str, port: &str, line: &serde_json::Value) -> String {
    let sent = std::process::Command::new(&wrap[0])
        .args(&wrap[1..])
        .args([
            "bash",
            "-c",
            &format!("exec 3<>/dev/tcp/{ip}/{port}; echo '{line}' >&3; timeout 5 cat <&3; true"),
        ])
        .output()
        .expect("bash runs");
    String::from_utf8_lossy(&sent.stdout).into_owned()
}

fn spread(nodes: &[&Node], workload: &str) -> Vec<usize> {
    nodes
        .iter()
        .map(|node| node.running(workload).len())
        .collect()
}

/// The replica ids of `workload` running on any of `nodes`, sorted.
/// The other ordinal of a statefulset of two.
fn other_ordinal(ordinal: &str) -> String {
    if ordinal == "0" { "1" } else { "0" }.to_owned()
}

fn running_on(nodes: &[&Node], workload: &str) -> Vec<String> {
    let mut ids: Vec<String> = nodes
        .iter()
        .flat_map(|node| node.running(workload))
        .collect();
    ids.sort();
    ids
}

#[test]
fn replicas_are_placed_across_nodes_and_a_lost_node_s_move_to_the_others() {
    let Some(rig) = DockerCluster::start(3) else {
        return;
    };
    let (image, scope) = (&rig.image, &rig.scope);
    let a = rig.node("a");
    let b = rig.node("b");
    let mut c = rig.node("c");
    let nodes = [&a, &b, &c];
    let s = &scope.name;
    let web = format!("deployment/{s}/web");
    let pinned = format!("deployment/{s}/pinned");
    let db = format!("statefulset/{s}/db");

    // A deployment of three, applied on a: one replica on each node.
    a.apply(
        "web.hcl",
        &format!(
            "deployment \"{s}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n}}\n",
            image.name
        ),
    );
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(300),
        || match spread(&nodes, &web) {
            counts if counts == [1, 1, 1] => Ok(()),
            counts => Err(format!("web runs {counts:?} on a, b, c")),
        },
    );

    // `nodes` keeps a workload on the nodes it names: four replicas on a
    // and b, none on c. Applied on c, which does not run it.
    c.apply(
        "pinned.hcl",
        &format!(
            "deployment \"{s}\" \"pinned\" {{\n  image = \"{}\"\n  replicas = 4\n  nodes = [\"a\", \"b\"]\n}}\n",
            image.name
        ),
    );
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(300),
        || match spread(&nodes, &pinned) {
            counts if counts == [2, 2, 0] => Ok(()),
            counts => Err(format!("pinned runs {counts:?} on a, b, c")),
        },
    );
    // An exec into a replica of another node goes over the node-to-node
    // channel, which carries it only when it is mutual TLS: refused here,
    // naming the flags and the other way.
    let on_a = a.running(&pinned);
    let refused = c.vd(&["exec", &pinned, "--replica", &on_a[0], "--", "true"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let said = cluster::stderr(&refused);
    assert!(
        said.contains(&format!("replica {} runs on node a", on_a[0]))
            && said.contains("--peer-cacert, --peer-cert and --peer-key")
            && said.contains("vd -H ssh://a"),
        "{said}"
    );
    // Nor does a node answer one sent in the clear to its peer port, by
    // whatever can reach it: refused in the protocol's words, before the
    // replica is even looked up.
    let address = std::fs::read_to_string(a.root.path().join("peer-address")).unwrap();
    let (ip, port) = address.trim().rsplit_once(':').unwrap();
    let line = serde_json::json!({
        "protocol": voodu_api::PROTOCOL_VERSION,
        "from": "c",
        "to": "a",
        "peer_verb": "exec",
        "workload": {"kind": "deployment", "scope": s, "name": "pinned"},
        "replica": on_a[0],
        "command": ["/echo-server", "init", "sent-in-the-clear", "0"],
    });
    let wrap = rig.hosts.wrap("c");
    let answered = in_the_clear(&wrap, ip, port, &line);
    assert!(
        answered.contains("\"failed\"") && answered.contains("--peer-cert"),
        "{answered}"
    );
    // A build's context is the workload's source, and in a cluster the
    // other nodes build from the applying node's copy: without mutual TLS
    // a build block is refused at apply, naming the flags, and nothing is
    // stored; a node asked for a context in the clear refuses too.
    let app = c.root.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(app.join("Dockerfile"), format!("FROM {}\n", image.name)).unwrap();
    let manifest = c.root.path().join("built.hcl");
    std::fs::write(
        &manifest,
        format!(
            "deployment \"{s}\" \"built\" {{\n  build {{\n    context = \"{}\"\n  }}\n}}\n",
            app.display()
        ),
    )
    .unwrap();
    let refused = c.vd(&["apply", "-f", &manifest.to_string_lossy()]);
    let said = cluster::stderr(&refused);
    assert!(
        !refused.status.success()
            && said.contains(&format!("deployment/{s}/built"))
            && said.contains("travels only over mutual TLS")
            && said.contains("--peer-cacert, --peer-cert and --peer-key"),
        "{refused:?}"
    );
    let stored = c.vd(&["describe", &format!("deployment/{s}/built")]);
    assert!(!stored.status.success(), "{stored:?}");
    let line = serde_json::json!({
        "protocol": voodu_api::PROTOCOL_VERSION,
        "from": "c",
        "to": "a",
        "peer_verb": "build_context",
        "digest": "0".repeat(64),
    });
    let answered = in_the_clear(&wrap, ip, port, &line);
    assert!(
        answered.contains("\"failed\"")
            && answered.contains("only over mutual TLS")
            && answered.contains("--peer-cert"),
        "{answered}"
    );

    // A statefulset of two: each ordinal on one node only.
    b.apply(
        "db.hcl",
        &format!(
            "statefulset \"{s}\" \"db\" {{\n  image = \"{}\"\n  replicas = 2\n}}\n",
            image.name
        ),
    );
    let db_on = wait_until(Duration::from_secs(30), Duration::from_millis(300), || {
        let on: Vec<Vec<String>> = nodes.iter().map(|node| node.running(&db)).collect();
        let all: Vec<&String> = on.iter().flatten().collect();
        if all.len() == 2 && all.contains(&&"0".to_owned()) && all.contains(&&"1".to_owned()) {
            Ok(on)
        } else {
            Err(format!("db's ordinals on a, b, c: {on:?}"))
        }
    });
    // The statefulset went to the least loaded node first: c runs an
    // ordinal (it runs one web replica, a and b three each).
    assert_eq!(db_on[2].len(), 1, "db's ordinals on a, b, c: {db_on:?}");
    let c_ordinal = db_on[2][0].clone();

    // c's host is lost: the host dies, its node and containers with it.
    let killed = Instant::now();
    assert!(!c.container_ids().is_empty(), "c ran no container");
    rig.hosts.fault("kill", "c");
    c.kill_hard();

    // Its deployment replica runs again on a or b within the lease TTL plus
    // 10 s.
    wait_until(
        LEASE_TTL + Duration::from_secs(10),
        Duration::from_millis(300),
        || match running_on(&[&a, &b], &web).len() {
            3 => Ok(()),
            count => Err(format!("web runs {count} replicas on a and b")),
        },
    );
    let moved_in = killed.elapsed();
    // Its ordinal never moves on the lease's expiry alone: c's host may
    // still run it. `vd get nodes` names what waits on c, and how to move it.
    std::thread::sleep(LEASE_TTL + Duration::from_secs(3));
    assert_eq!(
        running_on(&[&a, &b], &db),
        vec![other_ordinal(&c_ordinal)],
        "c's ordinal {c_ordinal} waits for c"
    );
    let listed = a.nodes();
    let c_row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["name"] == "c")
        .cloned()
        .unwrap();
    assert_eq!(c_row["alive"], false, "{listed}");
    assert_eq!(
        c_row["waiting_ordinals"],
        serde_json::json!([format!("{db} {c_ordinal}")])
    );
    let nodes = a.vd(&["get", "nodes"]);
    let listed = String::from_utf8_lossy(&nodes.stdout);
    assert!(
        listed.contains(&format!("waiting on it: {db} {c_ordinal}"))
            && listed.contains("`vd node remove c` moves them"),
        "{listed}"
    );
    // The operator declares c's host gone: the ordinal runs on a or b.
    let removed = a.vd(&["node", "remove", "c"]);
    assert!(removed.status.success(), "{removed:?}");
    assert!(
        String::from_utf8_lossy(&removed.stdout).contains(&format!("{db} {c_ordinal}")),
        "{removed:?}"
    );
    wait_until(Duration::from_secs(20), Duration::from_millis(300), || {
        let ids = running_on(&[&a, &b], &db);
        if ids == ["0", "1"] {
            Ok(())
        } else {
            Err(format!("db's ordinals on a and b: {ids:?}"))
        }
    });
    let ordinal_moved_in = killed.elapsed();
    eprintln!(
        "web's replica ran again {moved_in:?} after the kill; db's ordinal {c_ordinal} {ordinal_moved_in:?} after"
    );
    // pinned stays on a and b.
    assert_eq!(spread(&[&a, &b], &pinned), [2, 2]);
    // A removed node is no longer listed: a node started again as c
    // joins as a new one.
    assert!(!a.lists("c"), "{}", a.nodes());
}

/// The endpoints (replica id, address, node) of the last publish of
/// `workload_name` that process `pid` made, if any.
fn last_set(
    calls: &std::path::Path,
    pid: u32,
    workload_name: &str,
) -> Option<Vec<(String, String, String)>> {
    voodu_tests::recorded_calls(calls)
        .into_iter()
        .rfind(|call| {
            call.call == "publish" && call.pid == pid && call.request["name"] == workload_name
        })
        .map(|call| call.endpoints_with_nodes())
}

/// What an echo replica at `address` says it is: its replica id. The
/// replica may not listen yet when it is first published (no readiness
/// probe: running counts as ready, and on a host's own address Docker
/// forwards to the container rather than accepting for it), so it is
/// asked until it answers, within 10 s.
fn replica_at(address: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut stream =
        voodu_tests::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
            std::net::TcpStream::connect(address)
        })
        .unwrap_or_else(|error| panic!("{address} does not answer: {error}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(b"who\n").unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    line.trim().to_owned()
}

#[test]
fn every_node_publishes_the_union_drains_for_the_others_and_withdraws_a_killed_node_within_the_lease(
) {
    let Some(rig) = DockerCluster::start(3) else {
        return;
    };
    let (image, scope) = (&rig.image, &rig.scope);
    let a = rig.node("a");
    let b = rig.node("b");
    let mut c = rig.node("c");
    let s = &scope.name;

    // Installed on a: stored for the cluster, and loaded by b and c while
    // they run.
    cluster::install_everywhere(
        &a,
        &voodu_tests::rust_cdylib("voodu_fixture_recorder"),
        "recorder",
        3,
    );

    let calls_dir = tempfile::tempdir().unwrap();
    let calls = calls_dir.path().join("calls.jsonl");
    b.apply(
        "web.hcl",
        &format!(
            "deployment \"{s}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n  ports = [\"8084\"]\n  recorder {{\n    file = \"{}\"\n    addressing = \"host\"\n  }}\n}}\n",
            image.name,
            calls.display()
        ),
    );
    let pids = [a.pid() as u32, b.pid() as u32, c.pid() as u32];
    // Every node publishes the same set to its own plugin: the three
    // replicas, one per node, each at its node's address and published
    // host port, with its node named.
    let union = wait_or_dump(
        &[&a, &b, &c],
        Duration::from_secs(30),
        Duration::from_millis(300),
        || {
            let sets: Vec<_> = pids
                .iter()
                .map(|pid| last_set(&calls, *pid, "web"))
                .collect();
            let first = sets[0].clone().unwrap_or_default();
            let nodes: std::collections::BTreeSet<&str> =
                first.iter().map(|(_, _, node)| node.as_str()).collect();
            if first.len() == 3
                && nodes == ["a", "b", "c"].into_iter().collect()
                && sets.iter().all(|set| set.as_ref() == Some(&first))
            {
                Ok(first)
            } else {
                Err(format!("the nodes' last sets: {sets:?}"))
            }
        },
    );
    for (replica_id, address, node) in &union {
        assert!(
            address.starts_with(&format!("{}:", rig.hosts.address(node))),
            "{address} is on {node}'s address"
        );
        assert_eq!(
            &replica_at(address),
            replica_id,
            "host addressing reaches replica {replica_id} of node {node} at {address}"
        );
    }

    // A rolling update: each node replaces its replica, and before one is
    // removed, every node's plugin drains it, not only its own node's.
    b.apply(
        "web.hcl",
        &format!(
            "deployment \"{s}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n  ports = [\"8084\"]\n  env = {{ V = \"2\" }}\n  recorder {{\n    file = \"{}\"\n    addressing = \"host\"\n  }}\n}}\n",
            image.name,
            calls.display()
        ),
    );
    let old: Vec<String> = union.iter().map(|(id, _, _)| id.clone()).collect();
    wait_or_dump(
        &[&a, &b, &c],
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            let drains: Vec<(u32, String)> = voodu_tests::recorded_calls(&calls)
                .into_iter()
                .filter(|call| call.call == "drain")
                .map(|call| (call.pid, call.drained_replica()))
                .collect();
            let missing: Vec<(u32, &String)> = pids
                .iter()
                .flat_map(|pid| old.iter().map(move |id| (*pid, id)))
                .filter(|(pid, id)| !drains.contains(&(*pid, (*id).clone())))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "no drain yet by (controller pid, replica): {missing:?}"
                ))
            }
        },
    );
    let union = wait_or_dump(
        &[&a, &b, &c],
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            let sets: Vec<_> = pids
                .iter()
                .map(|pid| last_set(&calls, *pid, "web"))
                .collect();
            let first = sets[0].clone().unwrap_or_default();
            let fresh = first.iter().all(|(id, _, _)| !old.contains(id));
            if first.len() == 3 && fresh && sets.iter().all(|set| set.as_ref() == Some(&first)) {
                Ok(first)
            } else {
                Err(format!("the nodes' last sets after the rollout: {sets:?}"))
            }
        },
    );
    let events = b.vd(&["events", &format!("deployment/{s}/web")]);
    let events = String::from_utf8_lossy(&events.stdout);
    assert!(
        events.contains("and on nodes"),
        "the drained events name the other nodes: {events}"
    );

    // c is killed: a and b withdraw its replica within the lease TTL plus
    // 1 s, then publish the one that replaces it.
    let c_replica = union
        .iter()
        .find(|(_, _, node)| node == "c")
        .map(|(id, _, _)| id.clone())
        .unwrap();
    let killed_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    c.kill_hard();
    let withdrawn_after = |pid: u32| {
        voodu_tests::recorded_calls(&calls)
            .into_iter()
            .filter(|call| call.call == "publish" && call.pid == pid && call.at_ns > killed_ns)
            .find(|call| !call.replica_ids().contains(&c_replica))
            .map(|call| Duration::from_nanos((call.at_ns - killed_ns) as u64))
    };
    let withdrawn = wait_until(
        LEASE_TTL + Duration::from_secs(5),
        Duration::from_millis(100),
        || match (withdrawn_after(pids[0]), withdrawn_after(pids[1])) {
            (Some(on_a), Some(on_b)) => Ok((on_a, on_b)),
            seen => Err(format!("withdrawn on a, b after: {seen:?}")),
        },
    );
    eprintln!(
        "c's endpoint withdrawn on a after {:?}, on b after {:?}",
        withdrawn.0, withdrawn.1
    );
    assert!(
        withdrawn.0.max(withdrawn.1) <= LEASE_TTL + Duration::from_secs(1),
        "withdrawn after {withdrawn:?}, more than the lease ({LEASE_TTL:?}) plus 1 s"
    );
    wait_until(
        LEASE_TTL + Duration::from_secs(10),
        Duration::from_millis(300),
        || {
            let sets: Vec<_> = pids[..2]
                .iter()
                .map(|pid| last_set(&calls, *pid, "web"))
                .collect();
            let full = sets.iter().all(|set| {
                set.as_ref().is_some_and(|set| {
                    set.len() == 3 && set.iter().all(|(_, _, node)| node == "a" || node == "b")
                })
            });
            if full {
                Ok(())
            } else {
                Err(format!("a's and b's last sets: {sets:?}"))
            }
        },
    );

    // Deleted on a: every node's plugin forgets the block, not only a's.
    let deleted = a.vd(&["delete", &format!("deployment/{s}/web")]);
    assert!(deleted.status.success(), "{deleted:?}");
    wait_until(Duration::from_secs(30), Duration::from_millis(300), || {
        let forgot: Vec<u32> = voodu_tests::recorded_calls(&calls)
            .into_iter()
            .filter(|call| call.call == "forget" && call.request["name"] == "web")
            .map(|call| call.pid)
            .collect();
        if pids[..2].iter().all(|pid| forgot.contains(pid)) {
            Ok(())
        } else {
            Err(format!("forgotten by {forgot:?} of {:?}", &pids[..2]))
        }
    });
}

/// `GREETING`'s value in each running container of this test's scope, on
/// every host's engine.
fn greetings(rig: &DockerCluster) -> Vec<String> {
    ["a", "b", "c"]
        .iter()
        .flat_map(|host| {
            let ids = rig.hosts.docker(
                host,
                &[
                    "ps",
                    "-q",
                    "--filter",
                    &format!("label=voodu.scope={}", rig.scope.name),
                ],
            );
            ids.split_whitespace()
                .map(|id| {
                    // A container may go between the listing and this (a
                    // roll): its greeting is then empty.
                    let env = rig
                        .hosts
                        .docker(host, &["inspect", "-f", "{{json .Config.Env}}", id]);
                    let env: Vec<String> = serde_json::from_str(env.trim()).unwrap_or_default();
                    env.into_iter()
                        .find_map(|entry| entry.strip_prefix("GREETING=").map(str::to_owned))
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_config_bucket_set_on_one_node_rolls_the_replicas_on_every_node() {
    let Some(rig) = DockerCluster::start(3) else {
        return;
    };
    let (image, scope) = (&rig.image, &rig.scope);
    let a = rig.node("a");
    let b = rig.node("b");
    let c = rig.node("c");
    let nodes = [&a, &b, &c];
    let s = &scope.name;
    let web = format!("deployment/{s}/web");
    let bucket = format!("{s}/shared");
    let set = a.vd(&["config", "set", &bucket, "GREETING=one"]);
    assert!(set.status.success(), "{set:?}");
    a.apply(
        "web.hcl",
        &format!(
            "deployment \"{s}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n  env = {{ GREETING = \"env\" }}\n  env_from = [\"shared\"]\n}}\n",
            image.name
        ),
    );
    wait_or_dump(
        &nodes,
        Duration::from_secs(30),
        Duration::from_millis(300),
        || match (spread(&nodes, &web), greetings(&rig)) {
            (counts, greetings) if counts == [1, 1, 1] && greetings == ["one"; 3] => Ok(()),
            seen => Err(format!("web runs {seen:?} on a, b, c")),
        },
    );

    // Changed on b: every node's replica rolls, well within the 30 s
    // resync (each node watches the buckets).
    let changed_at = Instant::now();
    let set = b.vd(&["config", "set", &bucket, "GREETING=two"]);
    assert!(set.status.success(), "{set:?}");
    wait_or_dump(
        &nodes,
        Duration::from_secs(20),
        Duration::from_millis(200),
        || match (spread(&nodes, &web), greetings(&rig)) {
            (counts, greetings) if counts == [1, 1, 1] && greetings == ["two"; 3] => Ok(()),
            seen => Err(format!("after the change: {seen:?}")),
        },
    );
    println!(
        "a bucket set on b rolled the replicas on a, b and c in {} ms",
        changed_at.elapsed().as_millis()
    );
}
