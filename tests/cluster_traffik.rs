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
#[path = "support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cluster::{wait_or_dump, Engine, Node, LEASE_TTL};
use engine::{engine_available, EchoImage, Scope};
use etcd::EtcdCluster;
use voodu_tests::free_port;

/// One HTTP request through traffik; the replica id that answered.
fn request(through: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&through, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: traffik\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .ok_or_else(|| std::io::Error::other(format!("no HTTP body in {answer:?}")))?;
    if !answer.starts_with("HTTP/1.1 200") || body.trim().is_empty() {
        return Err(std::io::Error::other(format!("bad answer {answer:?}")));
    }
    Ok(body.trim().to_owned())
}

/// Clients sending requests through traffik until stopped, counting what
/// was answered and what failed.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    errors: Arc<parking_lot::Mutex<Vec<String>>>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(clients: usize, through: SocketAddr) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let clients = (0..clients)
            .map(|_| {
                let (stop, ok, failed, errors) =
                    (stop.clone(), ok.clone(), failed.clone(), errors.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match request(through) {
                            Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                            Err(error) => {
                                errors.lock().push(error.to_string());
                                failed.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            errors,
            clients,
        }
    }

    fn answered(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    fn failed(&self) -> usize {
        self.failed.load(Ordering::Relaxed)
    }

    /// Stops the clients: (answered, failed, the first errors).
    fn stop(mut self) -> (usize, usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for client in std::mem::take(&mut self.clients) {
            client.join().expect("a client thread");
        }
        let errors = self.errors.lock().iter().take(5).cloned().collect();
        (self.answered(), self.failed(), errors)
    }
}

#[test]
fn a_rolling_update_across_three_nodes_under_50_clients_loses_no_request() {
    if !engine_available() {
        return;
    }
    let Some(etcd) = EtcdCluster::start(3) else {
        return;
    };
    let image = EchoImage::import();
    let scope = Scope::new();
    let s = &scope.name;
    let web = format!("deployment/{s}/web");
    let a = Node::start(&etcd, "a", Engine::Docker);
    let b = Node::start(&etcd, "b", Engine::Docker);
    let mut c = Node::start(&etcd, "c", Engine::Docker);
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    let installed = a.vd(&["plugins:install", &traffik.to_string_lossy()]);
    assert!(installed.status.success(), "{installed:?}");
    let through = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // With host addressing, a readiness probe: Docker's port publishing
    // accepts a connection for a replica that does not listen yet.
    let manifest = |release: &str| {
        format!(
            "deployment \"{s}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n  ports = [\"8084\"]\n  env = {{ RELEASE = \"{release}\" }}\n  probes {{\n    readiness {{\n      http {{ path = \"/ready\" }}\n      interval = \"200ms\"\n    }}\n  }}\n  traffik \"http\" {{\n    port = 8084\n    bind = \"{through}\"\n    addressing = \"host\"\n    reuse_port = true\n  }}\n}}\n",
            image.name
        )
    };
    // Applied once every node has traffik, so each runs a replica.
    wait_or_dump(
        &[&a, &b, &c],
        Duration::from_secs(15),
        Duration::from_millis(300),
        || {
            let nodes = a.nodes();
            let loaded = nodes
                .as_array()
                .into_iter()
                .flatten()
                .filter(|node| {
                    node["plugins"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|plugin| plugin["name"] == "traffik")
                })
                .count();
            if loaded == 3 {
                Ok(())
            } else {
                Err(format!("traffik loaded on {loaded} of 3 nodes"))
            }
        },
    );
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
