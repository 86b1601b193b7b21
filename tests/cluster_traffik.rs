//! traffik across a cluster's nodes, each on a host of its own (its own
//! engine and address, `support/hosts.rs`) with its own traffik instance
//! on one port of every host: an upgrade and a worker's death on a node,
//! under load through that node's traffik, keep its place and refuse
//! nothing. The rolling update and the host killed under load are in
//! `cluster_hosts.rs`.

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

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use cluster::{wait_or_dump, DockerCluster};
use load::{request, Load};
use voodu_tests::free_port;

/// Deployment `web` of `scope`, `replicas` of `image` at `release`, behind
/// every node's traffik on `port` of every host (host addressing). With
/// host addressing, a readiness probe: Docker's port publishing accepts a
/// connection for a replica that does not listen yet.
fn web_manifest(scope: &str, image: &str, replicas: u32, release: &str, port: u16) -> String {
    format!(
        "deployment \"{scope}\" \"web\" {{\n  image = \"{image}\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n  env = {{ RELEASE = \"{release}\" }}\n  probes {{\n    readiness {{\n      http_get {{ path = \"/ready\" }}\n      period = \"200ms\"\n    }}\n  }}\n  traffik \"http\" {{\n    port = 8084\n    bind = \"0.0.0.0:{port}\"\n    addressing = \"host\"\n  }}\n}}\n"
    )
}

/// Polls node `watcher`'s `vd get nodes` every 100 ms until stopped, and
/// collects every moment node `watched` was listed lost, and the start
/// times it was listed with.
struct NodeWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(Vec<String>, HashSet<String>)>,
}

impl NodeWatch {
    fn start(watcher: &cluster::Node, watched: &str) -> NodeWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let root = watcher.root.path().to_owned();
        let (watched, stopping) = (watched.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let (mut lost, mut started) = (Vec::new(), HashSet::new());
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                let output = std::process::Command::new(cluster::vd_binary())
                    .arg("--root")
                    .arg(&root)
                    .args(["get", "nodes", "-o", "json"])
                    .output()
                    .expect("vd runs");
                let answer: serde_json::Value =
                    serde_json::from_slice(&output.stdout).unwrap_or_default();
                for node in answer["nodes"].as_array().into_iter().flatten() {
                    if node["name"] == watched.as_str() {
                        if node["alive"] != true {
                            lost.push(node.to_string());
                        }
                        started.insert(node["started_at"].to_string());
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (lost, started)
        });
        NodeWatch { stop, thread }
    }

    /// The moments the node was listed lost, and the start times it was
    /// listed with.
    fn stop(self) -> (Vec<String>, HashSet<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the watch ran")
    }
}

/// Waits until `load` has `more` answers beyond what it had.
fn answered_more(load: &Load, more: usize) {
    let from = load.answered();
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(10), || {
        if load.answered() >= from + more {
            Ok(())
        } else {
            Err(format!(
                "{} answered since, {} failed",
                load.answered() - from,
                load.failed()
            ))
        }
    });
}

#[test]
fn an_upgrade_and_a_worker_s_death_on_a_cluster_node_keep_its_place_and_refuse_nothing() {
    let Some(rig) = DockerCluster::start(1) else {
        return;
    };
    let (image, scope) = (&rig.image, &rig.scope);
    let s = &scope.name;
    let web = format!("deployment/{s}/web");
    let a = rig.node("a");
    let b = rig.node("b");
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    let port = free_port();
    // Through a's traffik, at a's address: the node upgraded and killed.
    let through: SocketAddr = format!("{}:{port}", rig.hosts.address("a"))
        .parse()
        .unwrap();
    cluster::install_everywhere(&a, &traffik, "traffik", 2);
    a.apply("web.hcl", &web_manifest(s, &image.name, 2, "1", port));
    wait_or_dump(
        &[&a, &b],
        Duration::from_secs(40),
        Duration::from_millis(300),
        || {
            let spread = [a.running(&web).len(), b.running(&web).len()];
            let seen: HashSet<String> = (0..40).filter_map(|_| request(through).ok()).collect();
            if spread == [1, 1] && seen.len() == 2 {
                Ok(())
            } else {
                Err(format!(
                    "replicas on a, b: {spread:?}; answered by {seen:?}"
                ))
            }
        },
    );
    let containers_before = (a.container_ids(), b.container_ids());
    let watch = NodeWatch::start(&b, "a");
    let load = Load::start(50, through);
    answered_more(&load, 1_000);

    // An in-place upgrade of node a: its new worker takes the node's
    // lease over, so the cluster never counts a gone.
    let first_worker = a.pid();
    let upgraded = a.vd(&["controller", "upgrade", "-o", "json"]);
    assert!(upgraded.status.success(), "{upgraded:?}\n{}", a.log());
    let answer: serde_json::Value = serde_json::from_slice(&upgraded.stdout).unwrap();
    let second_worker = answer["pid"].as_i64().expect("the new worker's pid") as i32;
    assert_ne!(second_worker, first_worker);
    voodu_tests::wait_until_gone(first_worker as u32);
    answered_more(&load, 1_000);
    let (answered, failed, errors) = (load.answered(), load.failed(), load.errors());
    eprintln!("node a upgraded in place under 50 clients: {answered} answered, {failed} failed");
    assert_eq!(failed, 0, "an upgrade fails no request: {errors:?}");

    // A SIGKILL of node a's worker: the next one takes the lease over at
    // once; the connections open in the dead worker are cut, none refused.
    a.signal(libc::SIGKILL);
    let third_worker =
        voodu_tests::poll_until(Duration::from_secs(10), Duration::from_millis(10), || {
            match voodu_tests::current_worker_of(a.supervisor_pid()) {
                Some(pid) if pid as i32 != second_worker => Ok(pid),
                other => Err(other),
            }
        })
        .expect("a new worker starts");
    answered_more(&load, 1_000);
    let (answered, failed, errors) = (load.answered(), load.failed(), load.errors());
    let refused = load.refused();
    load.stop();
    let (lost, started) = watch.stop();
    eprintln!(
        "node a's worker killed under 50 clients: {answered} answered, {failed} failed (cut open), {refused} refused"
    );
    assert_eq!(refused, 0, "no connection is refused: {errors:?}");
    assert!(
        failed <= 50,
        "only connections open in the dead worker fail: {failed}: {errors:?}"
    );
    assert!(
        lost.is_empty(),
        "node b never saw node a lost: {lost:?}\n{}",
        a.log()
    );
    assert_eq!(
        started.len(),
        1,
        "node a kept its record (one start time): {started:?}"
    );
    assert!(
        a.log().contains("took over this node's lease"),
        "{}",
        a.log()
    );
    assert_ne!(third_worker as i32, first_worker);
    // Neither node moved or restarted a replica.
    assert_eq!((a.container_ids(), b.container_ids()), containers_before);
}
