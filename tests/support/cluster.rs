//! Cluster nodes for the cluster tests: `vd controller --cluster` processes,
//! each on a root of its own, against a test etcd ([`crate::etcd`]). Every
//! node drives the one Docker engine of this host (or none, with
//! `--no-docker`); the owner label of each root keeps their containers
//! apart.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::engine::{engine_available, EchoImage, Scope};
use crate::etcd::EtcdCluster;

/// The `vd` binary under test.
pub fn vd_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vd-under-test"))
}

/// The lease of the test nodes: short, so a killed node is lost soon.
pub const LEASE_TTL: Duration = Duration::from_secs(2);

/// Whether a node drives Docker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// `--no-docker`: it validates and stores only.
    None,
    /// It drives this host's Docker engine.
    Docker,
}

/// One `vd controller --cluster` process on a root of its own.
pub struct Node {
    /// Its name.
    pub name: String,
    /// Its root.
    pub root: tempfile::TempDir,
    process: Child,
    /// How it was started, to start it again.
    started: (String, Engine, Launch),
}

/// How a node is started beyond its cluster and name: under a wrapper
/// (a rig host's network), with environment (its engine's `DOCKER_HOST`)
/// and flags (`--advertise`) of its own.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// The command the node runs under, if any.
    pub wrap: Vec<String>,
    /// Environment variables beside the test's.
    pub env: Vec<(String, String)>,
    /// Flags after the cluster's own.
    pub args: Vec<String>,
    /// `--lease-ttl`, when not [`LEASE_TTL`].
    pub lease_ttl: Option<Duration>,
}

impl Node {
    fn command(urls: &str, root: &Path, name: &str, engine: Engine) -> Command {
        Node::launched(urls, root, name, engine, &Launch::default())
    }

    fn launched(urls: &str, root: &Path, name: &str, engine: Engine, launch: &Launch) -> Command {
        let mut command = match launch.wrap.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(vd_binary());
                command
            }
            None => Command::new(vd_binary()),
        };
        command.envs(launch.env.iter().map(|(name, value)| (name, value)));
        command.arg("controller");
        if engine == Engine::None {
            command.arg("--no-docker");
        }
        command
            .arg("--root")
            .arg(root)
            .args(["--cluster", urls])
            .args(["--node", name, "--lease-ttl"])
            .arg(format!(
                "{}s",
                launch.lease_ttl.unwrap_or(LEASE_TTL).as_secs()
            ))
            // Any free port: the nodes of a test may share one host.
            .args(["--peer-port", "0"])
            .args(&launch.args)
            // Unless the test is about signed plugins, the nodes load the
            // plugins a test installs unsigned, as a lab's do.
            .args(
                (!launch.args.iter().any(|arg| arg == "--trust-key"))
                    .then_some("--trust-unsigned-plugins"),
            )
            .env("NO_COLOR", "1")
            .env(
                "VOODU_LOG",
                std::env::var("VOODU_NODE_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        command
    }

    /// Starts node `name` on the cluster store at `urls` as `launch`
    /// says, and waits until it serves its socket; panics if it exits.
    pub fn launch(urls: &str, name: &str, engine: Engine, launch: &Launch) -> Node {
        Node::try_launch(urls, name, engine, launch).unwrap_or_else(|refusal| panic!("{refusal}"))
    }

    fn try_launch(urls: &str, name: &str, engine: Engine, launch: &Launch) -> Result<Node, String> {
        let root = tempfile::tempdir().unwrap();
        let process = Node::spawn_serving(root.path(), urls, name, engine, launch)?;
        Ok(Node {
            name: name.to_owned(),
            root,
            process,
            started: (urls.to_owned(), engine, launch.clone()),
        })
    }

    /// Stops the node with SIGTERM, as an operator's `systemctl stop`
    /// does, and waits for it to exit.
    pub fn terminate(&mut self) {
        // SAFETY: signalling a child of ours: the supervisor, which stops
        // its worker and exits.
        unsafe { libc::kill(self.process.id() as i32, libc::SIGTERM) };
        let _ = self.process.wait();
    }

    /// Starts the node again on its root, as it was started; panics if it
    /// exits instead of serving.
    pub fn start_again(&mut self) {
        let _ = self.process.wait();
        let (urls, engine, launch) = self.started.clone();
        self.process = Node::spawn_serving(self.root.path(), &urls, &self.name, engine, &launch)
            .unwrap_or_else(|refusal| panic!("{refusal}"));
    }

    /// Starts a node on `root` and waits until it serves its socket: its
    /// process, or why it exited first.
    fn spawn_serving(
        root: &Path,
        urls: &str,
        name: &str,
        engine: Engine,
        launch: &Launch,
    ) -> Result<Child, String> {
        let log_path = root.join("controller.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut process = Node::launched(urls, root, name, engine, launch)
            .stderr(log)
            .spawn()
            .expect("vd controller starts");
        let socket = root.join("controller.sock");
        let serving =
            voodu_tests::poll_until(Duration::from_secs(30), Duration::from_millis(50), || {
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
            Ok(Ok(())) => Ok(process),
            Ok(Err(exited)) => Err(exited),
            Err(last) => panic!("node {name} neither served nor exited within 30s: {last}"),
        }
    }

    /// Starts node `name`, which the cluster refuses: its exit and stderr.
    pub fn refused(cluster: &EtcdCluster, name: &str) -> Output {
        let root = tempfile::tempdir().unwrap();
        let output = Node::command(
            &cluster.endpoints().join(","),
            root.path(),
            name,
            Engine::None,
        )
        .stderr(Stdio::piped())
        .output()
        .expect("vd controller runs");
        assert!(!output.status.success(), "node {name} was not refused");
        output
    }

    /// Runs `vd ARGS` against this node.
    pub fn vd(&self, args: &[&str]) -> Output {
        Command::new(vd_binary())
            .arg("--root")
            .arg(self.root.path())
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .expect("vd runs")
    }

    /// Writes `text` as `file` in the node's root and applies it there,
    /// without waiting for the rollout; panics if the apply fails.
    pub fn apply(&self, file: &str, text: &str) {
        let path = self.root.path().join(file);
        std::fs::write(&path, text).unwrap();
        let applied = self.vd(&["apply", "--no-wait", "-f", &path.to_string_lossy()]);
        assert!(
            applied.status.success(),
            "apply on {}: {}",
            self.name,
            String::from_utf8_lossy(&applied.stderr)
        );
    }

    /// Whether `vd get nodes` on this node lists node `name`, alive or lost.
    pub fn lists(&self, name: &str) -> bool {
        self.nodes()
            .as_array()
            .into_iter()
            .flatten()
            .any(|node| node["name"] == name)
    }

    /// `vd get nodes -o json`'s nodes.
    pub fn nodes(&self) -> serde_json::Value {
        let output = self.vd(&["get", "nodes", "-o", "json"]);
        assert!(output.status.success(), "{output:?}");
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        answer["nodes"].clone()
    }

    /// The replica ids this node runs (state `running`) of `workload`
    /// (`deployment/prod/esl`), sorted; empty when the node does not
    /// answer. (`vd get pods` lists every node's; this node's are those
    /// that name it.)
    pub fn running(&self, workload: &str) -> Vec<String> {
        let output = self.vd(&["get", "pods", "-o", "json"]);
        let Ok(answer) = serde_json::from_slice::<serde_json::Value>(&output.stdout) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = answer["replicas"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|replica| {
                let id = &replica["workload"];
                let listed = format!(
                    "{}/{}/{}",
                    id["kind"].as_str().unwrap_or_default(),
                    id["scope"].as_str().unwrap_or_default(),
                    id["name"].as_str().unwrap_or_default()
                );
                listed == workload
                    && replica["state"] == "running"
                    && replica["node"] == self.name.as_str()
            })
            .filter_map(|replica| replica["replica_id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        ids
    }

    /// The ids of every container this node runs or keeps (`vd get
    /// pods`, of this node).
    pub fn container_ids(&self) -> Vec<String> {
        let output = self.vd(&["get", "pods", "-o", "json"]);
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("vd get pods on {}: {error}: {output:?}", self.name));
        answer["replicas"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|replica| replica["node"] == self.name.as_str())
            .filter_map(|replica| replica["container_id"].as_str().map(str::to_owned))
            .collect()
    }

    /// Whether the node's last `vd get pods` lists a running replica
    /// `replica_id` of `workload`.
    pub fn runs(&self, workload: &str, replica_id: &str) -> bool {
        self.running(workload).iter().any(|id| id == replica_id)
    }

    /// The node's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.path().join("controller.log")).unwrap_or_default()
    }

    /// The process id of the node's worker: the process that runs its
    /// plugins and its share of the replicas, under `vd controller`'s
    /// supervisor.
    pub fn pid(&self) -> i32 {
        voodu_tests::worker_of(self.process.id()) as i32
    }

    /// The process id of the node's supervisor (`vd controller`).
    pub fn supervisor_pid(&self) -> u32 {
        self.process.id()
    }

    /// Sends the node's worker `signal` (SIGSTOP, SIGCONT, ...): a frozen
    /// worker is a frozen node.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling a grandchild of ours.
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// Kills the node with SIGKILL and reaps it.
    pub fn kill_hard(&mut self) {
        let worker = voodu_tests::current_worker_of(self.process.id());
        let _ = self.process.kill();
        let _ = self.process.wait();
        // The worker dies with its supervisor (PR_SET_PDEATHSIG).
        if let Some(worker) = worker {
            voodu_tests::wait_until_gone(worker);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A frozen worker hears its supervisor's SIGTERM only once thawed.
        if let Some(worker) = voodu_tests::current_worker_of(self.process.id()) {
            // SAFETY: signalling a grandchild of ours.
            unsafe { libc::kill(worker as i32, libc::SIGCONT) };
        }
        // SAFETY: signalling a child of ours: the supervisor, which stops
        // its worker and exits.
        unsafe { libc::kill(self.process.id() as i32, libc::SIGTERM) };
        let _ = self.process.wait();
    }
}

/// A command's stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// [`voodu_tests::wait_until`] that, when it runs out of time, prints the
/// logs of `nodes` before it fails the test.
pub fn wait_or_dump<T, E: std::fmt::Display>(
    nodes: &[&Node],
    within: Duration,
    every: Duration,
    probe: impl FnMut() -> Result<T, E>,
) -> T {
    match voodu_tests::poll_until(within, every, probe) {
        Ok(found) => found,
        Err(seen) => {
            for node in nodes {
                eprintln!("==== node {} log\n{}", node.name, node.log());
            }
            panic!("not within {within:?}: {seen}")
        }
    }
}

/// What a cluster engine test stands on: a fresh scope, the echo image, a
/// rig of real hosts (`support/hosts.rs`), each node on a host of its own
/// with its own engine and address, and an etcd whose members run on hosts
/// of their own. Declare it before the test's nodes, so that they stop
/// first; then the scope, the image, etcd, and the rig with everything on
/// it.
pub struct DockerCluster {
    /// The test's own scope.
    pub scope: Scope,
    /// The imported echo-server image (on this machine's engine; each
    /// host gets a copy when its node starts).
    pub image: EchoImage,
    /// The cluster store.
    pub etcd: EtcdCluster,
    /// The hosts: `e1`, `e2`, ... for etcd's members, and one per node,
    /// named as the node.
    pub hosts: crate::hosts::HostRig,
}

impl DockerCluster {
    /// A cluster store of `members` members, each on a host of its own;
    /// `None` (a skip) when the engine, etcd or the rig's tools are
    /// missing here and this is not CI.
    pub fn start(members: usize) -> Option<DockerCluster> {
        if !engine_available() {
            return None;
        }
        let bare: Vec<String> = (1..=members).map(|index| format!("e{index}")).collect();
        let bare: Vec<&str> = bare.iter().map(String::as_str).collect();
        let hosts = crate::hosts::HostRig::up(&[], &bare)?;
        let etcd = hosts.etcd(&bare)?;
        Some(DockerCluster {
            scope: Scope::new(),
            image: EchoImage::import(),
            etcd,
            hosts,
        })
    }

    /// Starts node `name` on host `name` (made now, with its own engine
    /// and the echo image, if the rig has no such host yet), driving that
    /// engine and advertising the host's address.
    pub fn node(&self, name: &str) -> Node {
        self.node_via(&self.etcd.endpoints().join(","), name)
    }

    /// [`DockerCluster::node`], reaching the cluster store at `urls`.
    pub fn node_via(&self, urls: &str, name: &str) -> Node {
        self.node_with(urls, name, &[])
    }

    /// [`DockerCluster::node_via`], with the flags `extra` after the
    /// rig's own (`--peer-cert ...`).
    pub fn node_with(&self, urls: &str, name: &str, extra: &[String]) -> Node {
        self.hosts.add(name);
        self.hosts.load(name, &self.image.name);
        let mut launch = self.hosts.launch(name);
        launch.args.extend(extra.iter().cloned());
        Node::launch(urls, name, Engine::Docker, &launch)
    }

    /// `docker ARGS` on every one of `hosts`' engines, their outputs in
    /// order, each line with its host: `(host, line)`.
    pub fn docker_on_each(&self, hosts: &[&str], args: &[&str]) -> Vec<(String, String)> {
        hosts
            .iter()
            .flat_map(|host| {
                self.hosts
                    .docker(host, args)
                    .lines()
                    .map(|line| ((*host).to_owned(), line.to_owned()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// What a cluster test without Docker stands on: a rig of hosts without
/// engines (`support/hosts.rs`), each node on one of its own, named as the
/// node, and an etcd whose members run on hosts of theirs (`e1`, ...).
/// Declare it before the test's nodes, so that they stop first.
pub struct BareCluster {
    /// The cluster store.
    pub etcd: EtcdCluster,
    /// The hosts.
    pub hosts: crate::hosts::HostRig,
}

impl BareCluster {
    /// A cluster store of `members` members, each on a host of its own;
    /// `None` (a skip) when etcd or the rig's tools are missing here and
    /// this is not CI.
    pub fn start(members: usize) -> Option<BareCluster> {
        let bare: Vec<String> = (1..=members).map(|index| format!("e{index}")).collect();
        let bare: Vec<&str> = bare.iter().map(String::as_str).collect();
        let hosts = crate::hosts::HostRig::up(&[], &bare)?;
        let etcd = hosts.etcd(&bare)?;
        Some(BareCluster { etcd, hosts })
    }

    /// The store's client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.etcd.endpoints()
    }

    /// How node `name` runs: on host `name` (made now if the rig has no
    /// such host yet), advertising its address.
    pub fn launch(&self, name: &str) -> Launch {
        self.hosts.add_bare(name);
        Launch {
            env: Vec::new(),
            ..self.hosts.launch(name)
        }
    }

    /// Starts node `name` on host `name`, without Docker.
    pub fn node(&self, name: &str) -> Node {
        Node::launch(
            &self.endpoints().join(","),
            name,
            Engine::None,
            &self.launch(name),
        )
    }
}

/// Installs the plugin file `file` through `node` (so, cluster-wide) and
/// waits until `count` live nodes report `plugin` loaded.
pub fn install_everywhere(node: &Node, file: &Path, plugin: &str, count: usize) {
    let installed = node.vd(&["plugins:install", &file.to_string_lossy()]);
    assert!(installed.status.success(), "{installed:?}");
    voodu_tests::wait_until(Duration::from_secs(15), Duration::from_millis(200), || {
        let nodes = node.nodes();
        let loaded = nodes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|row| {
                row["alive"] == true
                    && row["plugins"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|loaded| loaded["name"] == plugin)
            })
            .count();
        if loaded == count {
            Ok(())
        } else {
            Err(format!(
                "{plugin} loaded on {loaded} of {count} nodes: {nodes}"
            ))
        }
    });
}
