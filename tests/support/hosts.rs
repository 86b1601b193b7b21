//! Hosts on this machine for the cluster tests: each a network namespace
//! with an address of its own and, when asked, its own Docker engine, made
//! and faulted by the operator's script `examples/hosts/rig.sh` (one
//! implementation for the tests and for an operator trying three hosts).
//! Dropping the rig takes down everything it made, even when a test
//! fails.

use std::path::PathBuf;
use std::process::Command;

use crate::cluster::Launch;

/// The operator's rig script.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/hosts/rig.sh")
}

/// Where the rigs' ids are taken: one directory per id in use, holding
/// the pid of the test process that took it.
const IDS: &str = "/tmp/voodu-rig-ids";

/// A rig of hosts, taken down on drop.
pub struct HostRig {
    id: u32,
}

impl HostRig {
    /// Makes `engines` (hosts with an engine each) and `bare` (hosts with
    /// none: etcd members). `None` (a skip) where namespaces cannot be
    /// made (not root, no `ip`, `nsenter` or `dockerd`) and this is not
    /// CI; on CI that fails.
    pub fn up(engines: &[&str], bare: &[&str]) -> Option<HostRig> {
        // Each asked on its own, so a skip (or CI's failure) names what
        // is missing.
        let root = voodu_tests::required_on_ci(
            "root (the rig makes namespaces and links)",
            Command::new("sh").args(["-c", "test \"$(id -u)\" -eq 0"]),
        );
        if !(root
            && ["ip", "nsenter", "dockerd", "iptables"]
                .iter()
                .all(|tool| crate::engine::tool_available(tool)))
        {
            return None;
        }
        let rig = HostRig { id: take_id() };
        if !engines.is_empty() {
            rig.script(&[&["up"], engines].concat());
        }
        if !bare.is_empty() {
            rig.script(&[&["up-bare"], bare].concat());
        }
        Some(rig)
    }

    /// Makes `host` with an engine of its own, if the rig has no such host
    /// yet (a host killed stays dead: see [`HostRig::restart`]).
    pub fn add(&self, host: &str) {
        self.script(&["up", host]);
    }

    /// Makes `host` without an engine, if the rig has no such host yet.
    pub fn add_bare(&self, host: &str) {
        self.script(&["up-bare", host]);
    }

    /// This machine's address on the rig's bridge: every host reaches it
    /// (a proxy the test runs listens there).
    pub fn bridge_address(&self) -> String {
        format!("10.77.{}.1", self.id)
    }

    /// Runs the rig script with `args`; panics with its output if it fails.
    fn script(&self, args: &[&str]) -> String {
        let output = Command::new("bash")
            .arg(script())
            .args(args)
            .env("RIG_ID", self.id.to_string())
            .output()
            .expect("rig.sh runs");
        assert!(
            output.status.success(),
            "rig.sh {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// The host's address.
    pub fn address(&self, host: &str) -> String {
        self.script(&["addr", host])
    }

    /// The network namespace file of `host`.
    fn netns(&self, host: &str) -> String {
        format!("/var/run/netns/vdrig{}-{host}", self.id)
    }

    /// The command a program runs under to be on `host`'s network.
    pub fn wrap(&self, host: &str) -> Vec<String> {
        vec!["nsenter".into(), format!("--net={}", self.netns(host))]
    }

    /// `DOCKER_HOST` for `host`'s engine.
    pub fn docker_host(&self, host: &str) -> String {
        format!("unix:///tmp/voodu-rig-{}/hosts/{host}/docker.sock", self.id)
    }

    /// `docker ARGS` against `host`'s engine: its standard output.
    pub fn docker(&self, host: &str, args: &[&str]) -> String {
        let output = Command::new("docker")
            .args(args)
            .env("DOCKER_HOST", self.docker_host(host))
            .output()
            .expect("docker runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Copies `image` from this machine's engine into `host`'s.
    pub fn load(&self, host: &str, image: &str) {
        self.script(&["load", host, image]);
    }

    /// How a `vd controller` node runs on `host`: in its network, driving
    /// its engine, advertising its address.
    pub fn launch(&self, host: &str) -> Launch {
        Launch {
            wrap: self.wrap(host),
            env: vec![("DOCKER_HOST".into(), self.docker_host(host))],
            args: vec!["--advertise".into(), self.address(host)],
            lease_ttl: None,
        }
    }

    /// An etcd member on each of `hosts`, on etcd's own ports.
    pub fn etcd(&self, hosts: &[&str]) -> Option<crate::etcd::EtcdCluster> {
        let places: Vec<(String, Vec<String>)> = hosts
            .iter()
            .map(|host| (self.address(host), self.wrap(host)))
            .collect();
        crate::etcd::EtcdCluster::start_placed(&places)
    }

    /// The TCP connections established from `host` to `to`'s address: on
    /// a host that just died, what was in flight to it.
    pub fn established(&self, host: &str, to: &str) -> usize {
        let wrap = self.wrap(host);
        let output = Command::new(&wrap[0])
            .args(&wrap[1..])
            .args([
                "ss",
                "-Htn",
                "state",
                "established",
                "dst",
                &self.address(to),
            ])
            .output()
            .expect("ss runs");
        String::from_utf8_lossy(&output.stdout).lines().count()
    }

    /// A killed `host` brought back: its link up and its engine started
    /// again on its data (the images it had), nothing running.
    pub fn restart(&self, host: &str) {
        self.script(&["heal", host]);
        self.script(&["up", host]);
    }

    /// A fault of the script's (`cut`, `heal`, `partition`,
    /// `unpartition`, `freeze`, `thaw`, `kill`) on `host`.
    pub fn fault(&self, fault: &str, host: &str) {
        self.script(&[fault, host]);
    }
}

impl Drop for HostRig {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("down")
            .env("RIG_ID", self.id.to_string())
            .output();
        let _ = std::fs::remove_dir_all(format!("{IDS}/{}", self.id));
    }
}

/// A rig id no other live test process holds: one left by a process
/// that died is taken down first and taken over.
fn take_id() -> u32 {
    std::fs::create_dir_all(IDS).expect("the rig ids' directory");
    for id in 1..=250u32 {
        let claim = PathBuf::from(format!("{IDS}/{id}"));
        if std::fs::create_dir(&claim).is_ok() {
            std::fs::write(claim.join("pid"), std::process::id().to_string()).expect("a pid file");
            return id;
        }
        let holder: Option<u32> = std::fs::read_to_string(claim.join("pid"))
            .ok()
            .and_then(|pid| pid.trim().parse().ok());
        let alive =
            holder.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive && holder.is_some() {
            // Left by a test process that died: its rig goes first.
            let _ = Command::new("bash")
                .arg(script())
                .arg("down")
                .env("RIG_ID", id.to_string())
                .output();
            std::fs::write(claim.join("pid"), std::process::id().to_string()).expect("a pid file");
            return id;
        }
    }
    panic!("no free rig id in {IDS}");
}
