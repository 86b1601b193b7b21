//! Cluster mode, the node's part, each node on a host of its own
//! (`support/hosts.rs`, hosts without engines) and etcd on hosts of
//! theirs: `vd controller --cluster URL --node NAME` keeps the desired
//! state in a real etcd and registers the node under a lease; `vd get nodes` lists every node, alive or lost. A name is held by
//! one live node at a time; the stored workloads and the plugins installed
//! cluster-wide outlive any one node.

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

use std::process::{Command, Stdio};
use std::time::Duration;

use cluster::{stderr, vd_binary, BareCluster, Engine, Launch, Node};
use voodu_tests::{rust_cdylib, wait_until};

#[test]
fn nodes_list_each_other_and_a_lost_node_s_state_and_plugins_stay_with_the_cluster() {
    let Some(cluster) = BareCluster::start(1) else {
        return;
    };
    let mut a = cluster.node("a");

    // Its plugins are reported with its next renewal.
    let echo = rust_cdylib("voodu_echo");
    let installed = a.vd(&["plugins:install", &echo.to_string_lossy()]);
    assert!(installed.status.success(), "{installed:?}");
    wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        let nodes = a.nodes();
        let listed = &nodes[0];
        if nodes.as_array().map(Vec::len) == Some(1)
            && listed["name"] == "a"
            && listed["alive"] == true
            && listed["this_node"] == true
            && listed["plugins"][0]["name"] == "echo"
        {
            Ok(())
        } else {
            Err(format!("not listed yet: {nodes}"))
        }
    });
    let table = a.vd(&["get", "nodes"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("NAME"), "{text}");
    assert!(text.contains("a *") && text.contains("alive"), "{text}");

    // The desired state lives in etcd: a workload applied on a.
    std::fs::write(
        a.root.path().join("esl.hcl"),
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo \"http\" {}\n}\n",
    )
    .unwrap();
    let applied = a.vd(&[
        "apply",
        "-f",
        &a.root.path().join("esl.hcl").to_string_lossy(),
    ]);
    assert!(applied.status.success(), "{applied:?}");

    // While a is alive its name is taken; a second node joins beside it.
    let same_name = Node::refused(&cluster.etcd, "a");
    assert!(
        stderr(&same_name).contains("node \"a\" is already alive in this cluster"),
        "{}",
        stderr(&same_name)
    );
    let bad_name = Command::new(vd_binary())
        .args(["controller", "--no-docker", "--cluster"])
        .arg(cluster.endpoints().join(","))
        .args(["--node", "a/b"])
        .output()
        .unwrap();
    assert!(
        stderr(&bad_name).contains("is not a node name"),
        "{}",
        stderr(&bad_name)
    );
    let b = cluster.node("b");
    wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        let nodes = a.nodes();
        let alive = nodes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|node| node["alive"] == true)
            .count();
        let leaders = nodes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|node| node["leader"] == true)
            .count();
        if alive == 2 && leaders == 1 {
            Ok(())
        } else {
            Err(format!(
                "a does not list both alive and one leader: {nodes}"
            ))
        }
    });

    // a is killed: once its lease runs out, b lists it as lost, and has
    // a's workload and plugin.
    a.kill_hard();
    let nodes = wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        let nodes = b.nodes();
        let a_alive = nodes
            .as_array()
            .into_iter()
            .flatten()
            .any(|node| node["name"] == "a" && node["alive"] == true);
        if a_alive {
            Err(format!("a is still listed alive: {nodes}"))
        } else {
            Ok(nodes)
        }
    });
    let by_name = |name: &str| {
        nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|node| node["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not listed: {nodes}"))
    };
    assert_eq!(by_name("a")["alive"], false);
    assert_eq!(by_name("b")["alive"], true);
    assert_eq!(by_name("b")["this_node"], true);
    let workloads = b.vd(&["get", "workloads", "-o", "json"]);
    assert!(
        String::from_utf8_lossy(&workloads.stdout).contains("\"esl\""),
        "{workloads:?}"
    );
    // The plugin installed on a was stored for the cluster: b fetched it,
    // checked its SHA-256 and loaded it, and reports it.
    let plugins = b.vd(&["plugins:list", "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_slice(&plugins.stdout).unwrap();
    assert_eq!(listed["plugins"][0]["name"], "echo", "{listed}");
    wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        let nodes = b.nodes();
        let b_row = nodes
            .as_array()
            .and_then(|nodes| nodes.iter().find(|node| node["name"] == "b"))
            .cloned()
            .unwrap_or_default();
        if b_row["plugins"][0]["name"] == "echo" {
            Ok(())
        } else {
            Err(format!("b does not report echo yet: {nodes}"))
        }
    });
    // Removed on b: gone from the cluster, so a node started later lacks it.
    let removed = b.vd(&["plugins:remove", "echo"]);
    assert!(
        !removed.status.success(),
        "refused while esl uses it: {removed:?}"
    );
}

#[test]
fn a_controller_without_cluster_says_how_to_join_one() {
    let root = tempfile::tempdir().unwrap();
    let mut controller = Command::new(vd_binary())
        .args(["controller", "--no-docker", "--root"])
        .arg(root.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = root.path().join("controller.sock");
    wait_until(Duration::from_secs(20), Duration::from_millis(50), || {
        std::os::unix::net::UnixStream::connect(&socket).map(|_| ())
    });
    let output = Command::new(vd_binary())
        .arg("--root")
        .arg(root.path())
        .args(["get", "nodes"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    // SAFETY: signalling a child of ours.
    unsafe { libc::kill(controller.id() as i32, libc::SIGTERM) };
    let _ = controller.wait();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("not in a cluster — start it with `vd controller --cluster"),
        "{}",
        stderr(&output)
    );
}

/// `vd node remove` is for a host that is gone: a node that is alive is
/// never removed from under its replicas, and a name the cluster never
/// knew is named as such; a lost node is removed and no longer listed.
#[test]
fn node_remove_refuses_a_live_node_and_an_unknown_one_and_removes_a_lost_one() {
    let Some(cluster) = BareCluster::start(1) else {
        return;
    };
    let a = cluster.node("a");
    let mut b = cluster.node("b");
    let alive = a.vd(&["node", "remove", "b"]);
    assert_eq!(alive.status.code(), Some(1), "{alive:?}");
    assert!(
        cluster::stderr(&alive)
            .contains("node \"b\" is alive — `vd node remove` is for a host that is gone"),
        "{alive:?}"
    );
    let unknown = a.vd(&["node", "remove", "zz"]);
    assert_eq!(unknown.status.code(), Some(1), "{unknown:?}");
    assert!(
        cluster::stderr(&unknown).contains("this cluster knows no node \"zz\""),
        "{unknown:?}"
    );
    b.kill_hard();
    let removed =
        voodu_tests::poll_until(Duration::from_secs(20), Duration::from_millis(200), || {
            let removed = a.vd(&["node", "remove", "b"]);
            if removed.status.success() {
                Ok(removed)
            } else {
                Err(cluster::stderr(&removed))
            }
        })
        .unwrap_or_else(|error| panic!("b, lost, was never removed: {error}"));
    assert!(
        String::from_utf8_lossy(&removed.stdout)
            .contains("removed node b: no statefulset ordinal waited on it"),
        "{removed:?}"
    );
    assert!(!a.lists("b"), "{}", a.nodes());
}

/// A node stopped with SIGTERM (an operator's `systemctl stop`) gives up
/// the lead at once, before its lease could expire (the others see it
/// still alive when another leads), and keeps its lease: started again on
/// its root within the TTL, it takes the lease over, so the cluster never
/// counts it gone and its record keeps its start.
#[test]
fn a_node_stopped_with_sigterm_hands_the_lead_over_at_once_and_keeps_its_lease() {
    let Some(cluster) = BareCluster::start(1) else {
        return;
    };
    // A lease long enough to outlive a stop and start of the node.
    let launch = |name: &str| Launch {
        lease_ttl: Some(Duration::from_secs(20)),
        ..cluster.launch(name)
    };
    let urls = cluster.endpoints().join(",");
    let mut nodes = [
        Node::launch(&urls, "a", Engine::None, &launch("a")),
        Node::launch(&urls, "b", Engine::None, &launch("b")),
    ];
    let leader_of = |node: &Node| -> Option<(String, serde_json::Value)> {
        let listed = node.nodes();
        let leader = listed
            .as_array()?
            .iter()
            .find(|row| row["leader"] == true)?["name"]
            .as_str()?
            .to_owned();
        Some((leader, listed))
    };
    let (first, _) = wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        leader_of(&nodes[0]).ok_or("no leader yet")
    });
    let (leading, other) = if first == "a" { (0, 1) } else { (1, 0) };
    let started_at = |listed: &serde_json::Value, name: &str| {
        listed
            .as_array()
            .into_iter()
            .flatten()
            .find(|row| row["name"] == name)
            .map(|row| (row["started_at"].clone(), row["alive"].clone()))
    };
    let before = started_at(&nodes[other].nodes(), &first).expect("the leader is listed");
    nodes[leading].terminate();
    // The other node leads while the stopped one still holds its lease.
    let listed = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match leader_of(&nodes[other]) {
            Some((leader, listed)) if leader != first => Ok(listed),
            seen => Err(format!("{first} still leads: {seen:?}")),
        },
    );
    assert_eq!(
        started_at(&listed, &first),
        Some((before.0.clone(), serde_json::json!(true))),
        "{first} kept its lease: {listed}"
    );
    // Started again on its root: the same lease, the same record.
    nodes[leading].start_again();
    let again = wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        let listed = nodes[other].nodes();
        match started_at(&listed, &first) {
            Some((started, alive)) if alive == true => Ok(started),
            seen => Err(format!("{first}: {seen:?}")),
        }
    });
    assert_eq!(
        again, before.0,
        "it took its lease over instead of joining afresh"
    );
    assert!(
        nodes[leading].log().contains("adopt") || nodes[leading].log().contains("took over"),
        "{}",
        nodes[leading].log()
    );
}

/// `nodes` naming a node the cluster has never seen is stored (it may
/// join later) but warned about at apply, and in the dry run, with the
/// nodes it does know.
#[test]
fn nodes_naming_a_node_never_seen_is_warned_about_at_apply() {
    let Some(cluster) = BareCluster::start(1) else {
        return;
    };
    let a = cluster.node("a");
    let file = a.root.path().join("zz.hcl");
    std::fs::write(
        &file,
        "deployment \"prod\" \"zz\" {\n  image = \"esl:1\"\n  nodes = [\"a\", \"zz\"]\n}\n",
    )
    .unwrap();
    let file = file.to_string_lossy().into_owned();
    let warning = "deployment/prod/zz: attribute \"nodes\" names node \"zz\", which this cluster has never seen (it knows a)";
    let dry = a.vd(&["apply", "--dry-run", "-f", &file]);
    assert!(dry.status.success(), "{dry:?}");
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains(warning) || stderr(&dry).contains(warning),
        "{dry:?}"
    );
    let applied = a.vd(&["apply", "--no-wait", "-f", &file]);
    assert!(applied.status.success(), "{applied:?}");
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&applied.stdout),
        stderr(&applied)
    );
    assert!(shown.contains(warning), "{shown}");
    assert!(shown.contains("zz.hcl:1:1"), "at the workload: {shown}");
}

/// `plugins:remove` on one node unloads the plugin on every node: one
/// that runs unloads it at once, one that was stopped meanwhile unloads
/// it when it starts again.
/// Nodes a and b, without engines, on a one-member cluster, with leases
/// long enough to outlive a stop and start of a node.
fn two_nodes_that_may_restart(cluster: &BareCluster) -> (Node, Node) {
    let urls = cluster.endpoints().join(",");
    let launch = |name: &str| Launch {
        lease_ttl: Some(Duration::from_secs(20)),
        ..cluster.launch(name)
    };
    (
        Node::launch(&urls, "a", Engine::None, &launch("a")),
        Node::launch(&urls, "b", Engine::None, &launch("b")),
    )
}

#[test]
fn plugins_remove_on_one_node_unloads_the_plugin_on_every_node() {
    let Some(cluster) = BareCluster::start(1) else {
        return;
    };
    let (mut a, b) = two_nodes_that_may_restart(&cluster);
    let echo = rust_cdylib("voodu_echo");
    let loaded_on = |node: &Node| -> bool {
        let listed = node.vd(&["plugins:list", "-o", "json"]);
        String::from_utf8_lossy(&listed.stdout).contains("\"echo\"")
    };
    cluster::install_everywhere(&a, &echo, "echo", 2);
    // a runs: it unloads echo as soon as b removes it.
    let removed = b.vd(&["plugins:remove", "echo"]);
    assert!(removed.status.success(), "{removed:?}");
    // Unloaded first, then its files go.
    wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        if loaded_on(&a) {
            Err("a still has echo")
        } else if a.root.path().join("plugins/echo").exists() {
            Err("a still has echo's files")
        } else {
            Ok(())
        }
    });
    // a is stopped while b removes it again: a unloads it when it starts.
    cluster::install_everywhere(&b, &echo, "echo", 2);
    a.terminate();
    let removed = b.vd(&["plugins:remove", "echo"]);
    assert!(removed.status.success(), "{removed:?}");
    a.start_again();
    assert!(!loaded_on(&a), "a started again without echo: {}", a.log());
    assert!(!loaded_on(&b));
}

/// In a cluster every event names the node that recorded it, in `vd
/// events` and `vd describe`, JSON and text: two nodes' publishes of one
/// block are told apart.
#[test]
fn events_name_the_node_that_recorded_them() {
    let Some(cluster) = BareCluster::start(1) else {
        return;
    };
    let a = cluster.node("a");
    let b = cluster.node("b");
    let file = a.root.path().join("ev.hcl");
    std::fs::write(
        &file,
        "deployment \"prod\" \"ev\" {\n  image = \"esl:1\"\n}\n",
    )
    .unwrap();
    let applied = a.vd(&["apply", "--no-wait", "-f", &file.to_string_lossy()]);
    assert!(applied.status.success(), "{applied:?}");
    let events = b.vd(&["events", "deployment/prod/ev", "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_slice(&events.stdout)
        .unwrap_or_else(|error| panic!("{error}: {events:?}"));
    let applied_event = listed["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|event| event["reason"] == "applied")
        .cloned()
        .unwrap_or_else(|| panic!("no applied event: {listed}"));
    assert_eq!(applied_event["node"], "a", "{listed}");
    let text = b.vd(&["describe", "deployment/prod/ev"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("applied        a: created revision 1"),
        "{text:?}"
    );
}

/// Signed plugins, on hosts of their own: nodes started with an
/// operator's public key (`--trust-key`) load a plugin installed
/// cluster-wide only once that operator signed its record. Unsigned, or
/// signed by a key they do not trust, it is refused and named in `vd get
/// nodes`; a record and its file written into etcd by hand (the attack of
/// anyone who can write etcd) is loaded by no node.
#[test]
fn nodes_load_only_cluster_plugins_a_trusted_key_signed_and_name_the_ones_they_refuse() {
    let Some(cluster) = BareCluster::start(1) else {
        return;
    };
    let urls = cluster.endpoints().join(",");
    let keys = tempfile::tempdir().unwrap();
    let key = |name: &str| keys.path().join(name).display().to_string();
    for name in ["operator.key", "stranger.key"] {
        let made = Command::new(vd_binary())
            .args(["keys", "new", "signing", &key(name)])
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
    }
    let trusting = |name: &str| {
        let mut launch = cluster.launch(name);
        launch
            .args
            .extend(["--trust-key".to_owned(), key("operator.key.pub")]);
        Node::launch(&urls, name, Engine::None, &launch)
    };
    let a = trusting("a");
    let b = trusting("b");
    let refusals_on_b = || -> Vec<(String, String)> {
        b.nodes()
            .as_array()
            .into_iter()
            .flatten()
            .filter(|row| row["name"] == "b")
            .flat_map(|row| {
                row["refused_plugins"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|refused| {
                (
                    refused["name"].as_str().unwrap_or_default().to_owned(),
                    refused["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let refused_on_b = |plugin: &str, why: &str| {
        wait_until(Duration::from_secs(15), Duration::from_millis(200), || {
            let refused = refusals_on_b();
            if refused
                .iter()
                .any(|(name, reason)| name == plugin && reason.contains(why))
            {
                Ok(())
            } else {
                Err(format!("b refuses {refused:?}; its log: {}", b.log()))
            }
        })
    };
    let loaded_on_b = |plugin: &str| {
        let listed = b.vd(&["plugins:list", "-o", "json"]);
        String::from_utf8_lossy(&listed.stdout).contains(&format!("\"{plugin}\""))
    };

    // Installed unsigned on a: a loads it (its operator asked it), b not.
    let echo = rust_cdylib("voodu_echo");
    let installed = a.vd(&["plugins:install", &echo.to_string_lossy()]);
    assert!(installed.status.success(), "{installed:?}");
    assert!(
        String::from_utf8_lossy(&installed.stdout).contains("load it once signed"),
        "{installed:?}"
    );
    refused_on_b("echo", "it is not signed");
    let shown = b.vd(&["get", "nodes"]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("node b refused plugin echo"),
        "{shown:?}"
    );
    // A workload with an echo block, stored through a (which has echo).
    a.apply(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo \"http\" {}\n}\n",
    );
    // Signed by a key b does not trust: still refused, naming the key, and
    // the workload that uses echo hears of it.
    let echo_sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(&echo).unwrap()))
    };
    // Nothing is signed unless the record is of the file approved.
    let other_file = a.vd(&[
        "plugins:sign",
        "echo",
        "--signing-key",
        &key("operator.key"),
        "--sha256",
        &"ab".repeat(32),
    ]);
    assert_eq!(other_file.status.code(), Some(1), "{other_file:?}");
    assert!(
        String::from_utf8_lossy(&other_file.stderr).contains("nothing was signed"),
        "{other_file:?}"
    );
    let stranger = a.vd(&[
        "plugins:sign",
        "echo",
        "--signing-key",
        &key("stranger.key"),
        "--sha256",
        &echo_sha,
    ]);
    assert!(stranger.status.success(), "{stranger:?}");
    refused_on_b("echo", "which this node does not trust");
    assert!(!loaded_on_b("echo"));
    wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        let events = a.vd(&["events", "deployment/prod/esl"]);
        let said = String::from_utf8_lossy(&events.stdout).into_owned();
        if said.contains("node b refused the cluster's record of plugin echo 1.0.0")
            && said.contains("does not trust")
        {
            Ok(())
        } else {
            Err(said)
        }
    });
    // Signed by the operator: b loads it, and refuses nothing.
    let signed = a.vd(&[
        "plugins:sign",
        "echo",
        "--signing-key",
        &key("operator.key"),
        "--sha256",
        &echo_sha,
    ]);
    assert!(
        String::from_utf8_lossy(&signed.stdout).contains("signed the cluster's record of echo"),
        "{signed:?}"
    );
    wait_until(Duration::from_secs(15), Duration::from_millis(200), || {
        if loaded_on_b("echo") && refusals_on_b().is_empty() {
            Ok(())
        } else {
            Err(format!(
                "b refuses {:?}; its log: {}",
                refusals_on_b(),
                b.log()
            ))
        }
    });

    // Whoever can write etcd puts a plugin of their own there, record and
    // file, as `plugins:install` would: no node loads it.
    let evil = b"\x7fELF not really a plugin";
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(evil))
    };
    let etcdctl = |args: &[&str], input: Option<&[u8]>| {
        use std::io::Write;
        let mut child = Command::new("etcdctl")
            .args(["--endpoints", &urls])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("etcdctl runs");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.unwrap_or_default()).unwrap();
        drop(stdin);
        assert!(child.wait().unwrap().success(), "etcdctl {args:?}");
    };
    etcdctl(
        &["put", &format!("/voodu/plugin-chunks/evil/{sha}/000000")],
        Some(evil),
    );
    let record = format!(
        r#"{{"name":"evil","version":"6.6.6","sha256":"{sha}","size":{},"chunks":1}}"#,
        evil.len()
    );
    etcdctl(&["put", "/voodu/plugin-records/evil", &record], None);
    refused_on_b("evil", "it is not signed");
    let on_a = a.nodes();
    assert!(
        !on_a
            .to_string()
            .contains("\"name\":\"evil\",\"version\":\"6.6.6\",\"abi\""),
        "no node loaded evil: {on_a}"
    );
    assert!(!loaded_on_b("evil") && loaded_on_b("echo"));

    // The record deleted by hand: b keeps echo, and says why.
    etcdctl(&["del", "/voodu/plugin-records/echo"], None);
    wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        if b.log()
            .contains("without a signed removal: kept on this node")
        {
            Ok(())
        } else {
            Err(b.log())
        }
    });
    assert!(loaded_on_b("echo"));
    // Installed again, signed; then removed on a: b unloads it only once
    // the removal is signed.
    let again = a.vd(&[
        "plugins:install",
        "--replace",
        &echo.to_string_lossy(),
        "--signing-key",
        &key("operator.key"),
    ]);
    assert!(again.status.success(), "{again:?}");
    let deleted = a.vd(&["delete", "deployment/prod/esl", "--no-wait"]);
    assert!(deleted.status.success(), "{deleted:?}");
    wait_until(Duration::from_secs(15), Duration::from_millis(200), || {
        let removed = a.vd(&["plugins:remove", "echo"]);
        if removed.status.success() {
            Ok(())
        } else {
            Err(format!("{removed:?}"))
        }
    });
    refused_on_b("echo", "its removal: it is not signed");
    assert!(loaded_on_b("echo"));
    let signed = a.vd(&[
        "plugins:sign",
        "echo",
        "--signing-key",
        &key("operator.key"),
        "--removal",
    ]);
    assert!(
        String::from_utf8_lossy(&signed.stdout).contains("signed the removal of echo"),
        "{signed:?}"
    );
    wait_until(Duration::from_secs(15), Duration::from_millis(200), || {
        if loaded_on_b("echo") {
            Err(format!("b still has echo; its log: {}", b.log()))
        } else {
            Ok(())
        }
    });
}

#[test]
fn plugin_settings_given_on_one_node_reach_every_node_and_one_that_was_down() {
    let Some(cluster) = BareCluster::start(1) else {
        return;
    };
    let (mut a, b) = two_nodes_that_may_restart(&cluster);
    cluster::install_everywhere(&a, &rust_cdylib("voodu_traffik"), "traffik", 2);
    let settings_of = |node: &Node| -> serde_json::Value {
        let shown = node.vd(&["plugins:settings", "traffik", "-o", "json"]);
        assert!(shown.status.success(), "{}", stderr(&shown));
        serde_json::from_slice(&shown.stdout).expect("JSON")
    };
    let give = |node: &Node, settings: &str| {
        let file = node.root.path().join("settings.json");
        std::fs::write(&file, settings).expect("written");
        let given = node.vd(&["plugins:settings", "traffik", &file.to_string_lossy()]);
        assert!(given.status.success(), "{}", stderr(&given));
    };
    let reaches = |node: &Node, wanted: serde_json::Value| {
        wait_until(Duration::from_secs(15), Duration::from_millis(200), || {
            let now = settings_of(node);
            if now == wanted {
                Ok(())
            } else {
                Err(format!("{} has {now}, not {wanted}", node.name))
            }
        });
    };
    give(&b, r#"{"default_bind_host": "127.0.0.1"}"#);
    reaches(&a, serde_json::json!({"default_bind_host": "127.0.0.1"}));
    // Changed while a is down: a takes them when it starts.
    a.terminate();
    give(&b, r#"{"default_bind_host": "127.0.0.2"}"#);
    a.start_again();
    reaches(&a, serde_json::json!({"default_bind_host": "127.0.0.2"}));
    // Dropped on a: b drops them too.
    give(&a, "{}");
    reaches(&b, serde_json::json!({}));
}
