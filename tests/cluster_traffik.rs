//! traffik across a cluster, on the real engine and a real etcd: three
//! nodes on this one host, each with its own traffik instance on one shared
//! port (`reuse_port`, the kernel spreading connections over them), each
//! balancing over every node's replicas (`host` addressing). A rolling
//! update of all three nodes under 50 clients loses no request; a node
//! killed under load leaves the others serving.

#[path = "support/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[path = "support/engine.rs"]
#[allow(dead_code)]
mod engine;
#[path = "support/etcd.rs"]
#[allow(dead_code)]
mod etcd;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/load.rs"]
mod load;
#[path = "support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use cluster::{wait_or_dump, DockerCluster, LEASE_TTL};
use load::{request, Load};
use voodu_tests::free_port;

#[test]
fn a_rolling_update_across_three_nodes_under_50_clients_loses_no_request() {
    let Some(rig) = DockerCluster::start(3) else {
        return;
    };
    let (image, scope) = (&rig.image, &rig.scope);
    let s = &scope.name;
    let web = format!("deployment/{s}/web");
    let a = rig.node("a");
    let b = rig.node("b");
    let mut c = rig.node("c");
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    let through = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // With host addressing, a readiness probe: Docker's port publishing
    // accepts a connection for a replica that does not listen yet.
    let manifest = |release: &str| {
        format!(
            "deployment \"{s}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n  ports = [\"8084\"]\n  env = {{ RELEASE = \"{release}\" }}\n  probes {{\n    readiness {{\n      http_get {{ path = \"/ready\" }}\n      period = \"200ms\"\n    }}\n  }}\n  traffik \"http\" {{\n    port = 8084\n    bind = \"{through}\"\n    addressing = \"host\"\n    reuse_port = true\n  }}\n}}\n",
            image.name
        )
    };
    // Applied once every node has traffik, so each runs a replica.
    cluster::install_everywhere(&a, &traffik, "traffik", 3);
    a.apply("web.hcl", &manifest("1"));
    // Every node's traffik reaches every node's replica.
    let before = wait_or_dump(
        &[&a, &b, &c],
        Duration::from_secs(40),
        Duration::from_millis(300),
        || {
            let spread: Vec<usize> = [&a, &b, &c]
                .iter()
                .map(|node| node.running(&web).len())
                .collect();
            let seen: HashSet<String> = (0..60).filter_map(|_| request(through).ok()).collect();
            if spread == [1, 1, 1] && seen.len() == 3 {
                Ok(seen)
            } else {
                Err(format!(
                    "replicas on a, b, c: {spread:?}; answered by {seen:?}"
                ))
            }
        },
    );

    let load = Load::start(50, through);
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(10), || {
        if load.answered() >= 1_000 {
            Ok(())
        } else {
            Err(format!(
                "{} answered, {} failed",
                load.answered(),
                load.failed()
            ))
        }
    });
    b.apply("web.hcl", &manifest("2"));
    // Each node rolls its replica, surge-first, drained by every node's
    // traffik before it goes.
    wait_or_dump(
        &[&a, &b, &c],
        Duration::from_secs(60),
        Duration::from_millis(300),
        || {
            let now: Vec<Vec<String>> =
                [&a, &b, &c].iter().map(|node| node.running(&web)).collect();
            let rolled = now
                .iter()
                .all(|ids| ids.len() == 1 && !before.contains(&ids[0]));
            if rolled {
                Ok(())
            } else {
                Err(format!("replicas on a, b, c: {now:?}, before: {before:?}"))
            }
        },
    );
    let settled_at = load.answered();
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(10), || {
        if load.answered() >= settled_at + 1_000 {
            Ok(())
        } else {
            Err(format!("{} answered since", load.answered() - settled_at))
        }
    });
    let (answered, failed, errors) = load.stop();
    eprintln!("rolling update across three nodes: {answered} requests answered, {failed} failed");
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed: {errors:?}",
        answered + failed
    );
    let after: HashSet<String> = (0..60).filter_map(|_| request(through).ok()).collect();
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(after.is_disjoint(&before), "every replica was replaced");

    // A node killed under load: its traffik is gone with it, the others
    // serve on, and its replica runs again on a or b within the lease TTL
    // plus 10 s.
    let load = Load::start(50, through);
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(10), || {
        if load.answered() >= 500 {
            Ok(())
        } else {
            Err(format!("{} answered", load.answered()))
        }
    });
    let failed_before = load.failed();
    c.kill_hard();
    voodu_tests::wait_until(
        LEASE_TTL + Duration::from_secs(10),
        Duration::from_millis(300),
        || {
            let on_ab = a.running(&web).len() + b.running(&web).len();
            if on_ab == 3 {
                Ok(())
            } else {
                Err(format!("a and b run {on_ab} replicas"))
            }
        },
    );
    let at = load.answered();
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(10), || {
        if load.answered() >= at + 1_000 {
            Ok(())
        } else {
            Err(format!("{} answered since", load.answered() - at))
        }
    });
    let failed_at = load.failed();
    let settled = load.answered();
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(10), || {
        if load.answered() >= settled + 1_000 {
            Ok(())
        } else {
            Err(format!("{} answered since", load.answered() - settled))
        }
    });
    let (answered, failed, errors) = load.stop();
    eprintln!(
        "node c killed under 50 clients: {} requests failed around the kill (its traffik's open and queued connections), {answered} answered in all",
        failed_at - failed_before
    );
    assert_eq!(
        failed, failed_at,
        "once the kill was over, no request failed: {errors:?}"
    );
}
