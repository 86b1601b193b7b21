//! Cluster mode on the real engine: three `vd controller --cluster` nodes
//! on a three-member etcd, all driving this host's Docker engine (their
//! owner labels keep their containers apart). The leader places every
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
#[path = "support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::time::{Duration, Instant};

use cluster::{Engine, Node, LEASE_TTL};
use engine::{docker, engine_available, EchoImage, Scope};
use etcd::EtcdCluster;
use voodu_model::placement::STATEFUL_GRACE;
use voodu_tests::wait_until;

/// How many replicas of `workload` run on each node, in node order.
fn spread(nodes: &[&Node], workload: &str) -> Vec<usize> {
    nodes
        .iter()
        .map(|node| node.running(workload).len())
        .collect()
}

/// The replica ids of `workload` running on any of `nodes`, sorted.
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
    if !engine_available() {
        return;
    }
    let Some(etcd) = EtcdCluster::start(3) else {
        return;
    };
    let image = EchoImage::import();
    let scope = Scope::new();
    let a = Node::start(&etcd, "a", Engine::Docker);
    let b = Node::start(&etcd, "b", Engine::Docker);
    let mut c = Node::start(&etcd, "c", Engine::Docker);
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

    // c's host is lost: the node is killed, and its containers go with it.
    let killed = Instant::now();
    let c_containers = c.container_ids();
    assert!(!c_containers.is_empty(), "c ran no container");
    c.kill_hard();
    let mut remove = vec!["rm", "-f"];
    remove.extend(c_containers.iter().map(String::as_str));
    docker(&remove);

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
    // Its ordinal moves only after the lease expired plus the grace, and
    // then runs on a or b.
    wait_until(
        LEASE_TTL + STATEFUL_GRACE + Duration::from_secs(10),
        Duration::from_millis(300),
        || {
            let ids = running_on(&[&a, &b], &db);
            if ids == ["0", "1"] {
                Ok(())
            } else {
                Err(format!("db's ordinals on a and b: {ids:?}"))
            }
        },
    );
    let ordinal_moved_in = killed.elapsed();
    assert!(
        ordinal_moved_in >= LEASE_TTL + STATEFUL_GRACE - Duration::from_millis(500),
        "ordinal {c_ordinal} moved {ordinal_moved_in:?} after the kill, before the lease ({LEASE_TTL:?}) and the grace ({STATEFUL_GRACE:?}) were out"
    );
    eprintln!(
        "web's replica ran again {moved_in:?} after the kill; db's ordinal {c_ordinal} {ordinal_moved_in:?} after"
    );
    // pinned stays on a and b.
    assert_eq!(spread(&[&a, &b], &pinned), [2, 2]);
    // `vd get nodes` shows c lost.
    let listed = a.nodes();
    let c_row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["name"] == "c")
        .cloned()
        .unwrap();
    assert_eq!(c_row["alive"], false, "{listed}");
}
