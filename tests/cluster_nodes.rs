//! Cluster mode, the node's part: `vd controller --cluster URL --node NAME`
//! keeps the desired state in a real etcd and registers the node under a
//! lease; `vd get nodes` lists every node, alive or lost. This voodu runs
//! one active node per cluster: a second node is refused while one is
//! alive, and takes over the stored workloads, and the plugins installed
//! cluster-wide, once the first is gone.

#[path = "support/etcd.rs"]
#[allow(dead_code)]
mod etcd;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use etcd::EtcdCluster;
use voodu_tests::{rust_cdylib, wait_until};

fn vd_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vd-under-test"))
}

/// The lease of the test nodes: short, so a killed node is lost soon.
const LEASE_TTL: &str = "2s";

/// One `vd controller --cluster` process on a root of its own.
struct Node {
    root: tempfile::TempDir,
    process: Child,
}

impl Node {
    fn command(cluster: &EtcdCluster, root: &Path, name: &str) -> Command {
        let mut command = Command::new(vd_binary());
        command
            .args(["controller", "--no-docker", "--root"])
            .arg(root)
            .args(["--cluster", &cluster.endpoints().join(",")])
            .args(["--node", name, "--lease-ttl", LEASE_TTL])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        command
    }

    /// Starts node `name` and waits until it serves its socket; panics if
    /// it exits instead.
    fn start(cluster: &EtcdCluster, name: &str) -> Node {
        Node::try_start(cluster, name).unwrap_or_else(|refusal| panic!("{refusal}"))
    }

    /// Starts node `name`: the node once it serves its socket, or why it
    /// exited first.
    fn try_start(cluster: &EtcdCluster, name: &str) -> Result<Node, String> {
        let root = tempfile::tempdir().unwrap();
        let log_path = root.path().join("controller.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut process = Node::command(cluster, root.path(), name)
            .stderr(log)
            .spawn()
            .expect("vd controller starts");
        let socket = root.path().join("controller.sock");
        let serving =
            voodu_tests::poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
                if let Some(status) = process.try_wait().ok().flatten() {
                    return Ok(Err(format!(
                        "node {name} exited with {status}: {}",
                        std::fs::read_to_string(&log_path).unwrap_or_default()
                    )));
                }
                std::os::unix::net::UnixStream::connect(&socket)
                    .map(|_| Ok(()))
                    .map_err(|error| error.to_string())
            });
        match serving {
            Ok(Ok(())) => Ok(Node { root, process }),
            Ok(Err(exited)) => Err(exited),
            Err(last) => panic!("node {name} neither served nor exited within 20s: {last}"),
        }
    }

    /// Starts node `name`, which the cluster refuses: its exit and stderr.
    fn refused(cluster: &EtcdCluster, name: &str) -> Output {
        let root = tempfile::tempdir().unwrap();
        let output = Node::command(cluster, root.path(), name)
            .stderr(Stdio::piped())
            .output()
            .expect("vd controller runs");
        assert!(!output.status.success(), "node {name} was not refused");
        output
    }

    fn vd(&self, args: &[&str]) -> Output {
        Command::new(vd_binary())
            .arg("--root")
            .arg(self.root.path())
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .expect("vd runs")
    }

    fn nodes(&self) -> serde_json::Value {
        let output = self.vd(&["get", "nodes", "-o", "json"]);
        assert!(output.status.success(), "{output:?}");
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        answer["nodes"].clone()
    }

    fn kill_hard(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: signalling a child of ours.
        unsafe { libc::kill(self.process.id() as i32, libc::SIGTERM) };
        let _ = self.process.wait();
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn one_node_per_cluster_lists_itself_then_hands_over_when_lost() {
    let Some(cluster) = EtcdCluster::start(1) else {
        return;
    };
    let mut a = Node::start(&cluster, "a");

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

    // While a is alive: its name is taken, and no second node is active.
    let same_name = Node::refused(&cluster, "a");
    assert!(
        stderr(&same_name).contains("node \"a\" is already alive in this cluster"),
        "{}",
        stderr(&same_name)
    );
    let second = Node::refused(&cluster, "b");
    assert!(
        stderr(&second).contains(
            "node \"a\" is active in this cluster, and this voodu runs one active node per cluster"
        ),
        "{}",
        stderr(&second)
    );

    // a is killed: once its lease runs out, b joins, lists a as lost, and
    // has a's workload.
    a.kill_hard();
    let b = wait_until(Duration::from_secs(15), Duration::from_millis(300), || {
        Node::try_start(&cluster, "b")
    });
    let nodes = b.nodes();
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
