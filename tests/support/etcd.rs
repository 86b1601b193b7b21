//! A real etcd cluster for the cluster store's tests: members started as
//! processes on 127.0.0.1 ports, each with its own data directory, killed
//! and removed when the cluster is dropped. On CI (`CI=true`) a missing
//! `etcd` fails the test (`tests/run` installs Debian's `etcd-server`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use voodu_store_etcd::{EtcdOptions, EtcdStore};

/// One member of a test cluster.
pub struct Member {
    /// Its name, `m0`, `m1`, ...
    pub name: String,
    /// Its client URL.
    pub client_url: String,
    peer_url: String,
    data_dir: PathBuf,
    process: Option<Child>,
    /// The command it runs under (`nsenter --net=...` on a rig host), or
    /// none for this machine's own network.
    wrap: Vec<String>,
}

/// A test etcd cluster.
pub struct EtcdCluster {
    /// Its members, in order.
    pub members: Vec<Member>,
    /// Flags every member starts with beside the cluster's own.
    extra: Vec<String>,
    _root: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `size` members and waits until the cluster answers; `None`
    /// when etcd is not installed here (and this is not CI).
    pub fn start(size: usize) -> Option<EtcdCluster> {
        EtcdCluster::start_with(size, &[])
    }

    /// Like [`EtcdCluster::start`], every member with `extra` flags too
    /// (`--max-txn-ops 100000`, say).
    pub fn start_with(size: usize, extra: &[&str]) -> Option<EtcdCluster> {
        if !voodu_tests::required_on_ci("etcd", Command::new("etcd").arg("--version")) {
            return None;
        }
        // A port picked free may be taken by another test before etcd
        // binds it: a cluster that does not come up is started again on
        // other ports, its members' logs kept for the failure.
        let mut logs = Vec::new();
        for _ in 0..3 {
            let root = tempfile::tempdir().expect("a temporary directory");
            let members: Vec<Member> = (0..size)
                .map(|index| Member {
                    name: format!("m{index}"),
                    client_url: format!("http://127.0.0.1:{}", voodu_tests::free_port()),
                    peer_url: format!("http://127.0.0.1:{}", voodu_tests::free_port()),
                    data_dir: root.path().join(format!("m{index}")),
                    process: None,
                    wrap: Vec::new(),
                })
                .collect();
            let mut cluster = EtcdCluster {
                members,
                extra: extra.iter().map(|flag| (*flag).to_owned()).collect(),
                _root: root,
            };
            for index in 0..size {
                cluster.start_member(index);
            }
            match cluster.healthy_within(Duration::from_secs(20)) {
                Ok(()) => return Some(cluster),
                Err(why) => logs.push(format!("{why}\n{}", cluster.logs())),
            }
        }
        panic!("etcd did not come up in 3 tries:\n{}", logs.join("\n---\n"));
    }

    /// Starts one member on each of `places`: its address and the
    /// command it runs under (a rig host's network), on etcd's own ports;
    /// `None` when etcd is not installed here (and this is not CI).
    pub fn start_placed(places: &[(String, Vec<String>)]) -> Option<EtcdCluster> {
        if !voodu_tests::required_on_ci("etcd", Command::new("etcd").arg("--version")) {
            return None;
        }
        let root = tempfile::tempdir().expect("a temporary directory");
        let members = places
            .iter()
            .enumerate()
            .map(|(index, (address, wrap))| Member {
                name: format!("m{index}"),
                client_url: format!("http://{address}:2379"),
                peer_url: format!("http://{address}:2380"),
                data_dir: root.path().join(format!("m{index}")),
                process: None,
                wrap: wrap.clone(),
            })
            .collect();
        let mut cluster = EtcdCluster {
            members,
            extra: Vec::new(),
            _root: root,
        };
        for index in 0..places.len() {
            cluster.start_member(index);
        }
        cluster.wait_healthy(Duration::from_secs(30));
        Some(cluster)
    }

    /// What every member wrote to its log.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|member| {
                let log = std::fs::read_to_string(member.data_dir.with_extension("log"))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                format!(
                    "{}: {}",
                    member.name,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|member| format!("{}={}", member.name, member.peer_url))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts (or starts again) member `index`, with its data.
    pub fn start_member(&mut self, index: usize) {
        let initial_cluster = self.initial_cluster();
        let extra = self.extra.clone();
        let member = &mut self.members[index];
        let mut command = match member.wrap.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg("etcd");
                command
            }
            None => Command::new("etcd"),
        };
        let process = command
            .args([
                "--name",
                &member.name,
                "--data-dir",
                &member.data_dir.to_string_lossy(),
                "--listen-client-urls",
                &member.client_url,
                "--advertise-client-urls",
                &member.client_url,
                "--listen-peer-urls",
                &member.peer_url,
                "--initial-advertise-peer-urls",
                &member.peer_url,
                "--initial-cluster",
                &initial_cluster,
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "voodu-test",
                "--heartbeat-interval",
                "50",
                "--election-timeout",
                "500",
            ])
            .args(&extra)
            .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH)
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(member.data_dir.with_extension("log"))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            )
            .spawn()
            .expect("etcd starts");
        member.process = Some(process);
    }

    /// Kills member `index` (SIGKILL); its data stays for a restart.
    pub fn kill_member(&mut self, index: usize) {
        if let Some(mut process) = self.members[index].process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|member| member.client_url.clone())
            .collect()
    }

    /// Waits until every running member answers a read and a write of
    /// the store (which needs the cluster's quorum).
    pub fn wait_healthy(&self, within: Duration) {
        if let Err(why) = self.healthy_within(within) {
            panic!("not within {within:?}: {why}\n{}", self.logs());
        }
    }

    /// Whether every running member answers within `within`; why not.
    fn healthy_within(&self, within: Duration) -> Result<(), String> {
        let running: Vec<&Member> = self
            .members
            .iter()
            .filter(|member| member.process.is_some())
            .collect();
        voodu_tests::poll_until(within, Duration::from_millis(100), || {
            for member in &running {
                let mut options = EtcdOptions::new(vec![member.client_url.clone()]);
                options.prefix = "/health-check".into();
                options.request_timeout = Duration::from_secs(1);
                EtcdStore::connect(&options)
                    .map_err(|error| format!("{} does not answer yet: {error}", member.name))?;
            }
            Ok::<(), String>(())
        })
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill_member(index);
        }
    }
}
