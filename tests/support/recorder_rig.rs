//! The engine rig of the runtime tests: a controller driving the real
//! Docker engine with the `recorder` fixture plugin installed (it writes
//! every call it receives to a file), and the helpers the topic files
//! (`rollouts_docker`, `drains_docker`, `deletes_docker`, `crashes_docker`,
//! `cli_streams_docker`, `plugin_faults_docker`) share. Each includes it
//! with `#[path]`, beside `engine.rs` and `vd.rs`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::engine::{docker, DockerRig};
use crate::vd;

/// One call the recorder received.
pub type Call = voodu_tests::RecordedCall;

/// Every call the recorder wrote to `path`, in order.
pub fn calls(path: &Path) -> Vec<Call> {
    voodu_tests::recorded_calls(path)
}

/// The calls of one kind (`publish`, `drain`, ...), in order.
pub fn of_kind(calls: &[Call], kind: &str) -> Vec<Call> {
    calls.iter().filter(|c| c.call == kind).cloned().collect()
}

/// Waits up to `timeout` for the recorded calls to satisfy `done`.
pub fn wait_for_calls(path: &Path, timeout: Duration, done: impl Fn(&[Call]) -> bool) -> Vec<Call> {
    voodu_tests::wait_until(timeout, Duration::from_millis(5), || {
        let recorded = calls(path);
        if done(&recorded) {
            Ok(recorded)
        } else {
            Err(format!("the recorder never saw it: {recorded:#?}"))
        }
    })
}

/// Now, in Unix seconds.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
}

/// The built `recorder` fixture plugin.
pub fn recorder_plugin() -> String {
    voodu_tests::rust_cdylib("voodu_fixture_recorder")
        .display()
        .to_string()
}

/// An engine rig with the recorder installed, and the file it records to.
pub struct Rig {
    /// The engine rig: controller, scope and image.
    pub base: DockerRig,
    /// The file the recorder writes every call to.
    pub calls: PathBuf,
}

impl std::ops::Deref for Rig {
    type Target = DockerRig;
    fn deref(&self) -> &DockerRig {
        &self.base
    }
}

impl std::ops::DerefMut for Rig {
    fn deref_mut(&mut self) -> &mut DockerRig {
        &mut self.base
    }
}

impl Rig {
    /// Starts it on a controller that drives Docker; `None` (a skip) when
    /// no engine answers outside CI.
    pub fn start() -> Option<Rig> {
        Rig::start_with(vd::Controller::start_with_docker)
    }

    /// Starts it on the controller `start_controller` starts.
    pub fn start_with(start_controller: impl FnOnce() -> vd::Controller) -> Option<Rig> {
        let base = DockerRig::start_with(&recorder_plugin(), start_controller)?;
        let calls = base.controller.root().join("calls.jsonl");
        Some(Rig { base, calls })
    }

    /// A manifest for `kind "<scope>" "<name>"` with the recorder block.
    pub fn manifest(&self, kind: &str, name: &str, body: &str, recorder: &str) -> String {
        self.controller.manifest(
            &format!("{name}.hcl"),
            &format!(
                "{kind} \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  ports = [\"8084\"]\n{body}\n  recorder {{\n    file = \"{calls}\"\n{recorder}\n  }}\n}}\n",
                scope = self.scope.name,
                image = self.image.name,
                calls = self.calls.display(),
            ),
        )
    }

    /// `vd apply -f FILE`, which must succeed.
    pub fn apply(&self, file: &str) -> vd::Run {
        self.controller.vd(&["apply", "-f", file]).success()
    }

    /// Every call the recorder received so far.
    pub fn calls(&self) -> Vec<Call> {
        calls(&self.calls)
    }

    /// The replica ids of the last publish the recorder received.
    pub fn last_published_ids(&self) -> Vec<String> {
        of_kind(&self.calls(), "publish")
            .last()
            .expect("a publish was recorded")
            .replica_ids()
    }

    /// A replica's container name in this rig's scope.
    pub fn container_name(&self, name: &str, replica_id: &str) -> String {
        format!("{}-{name}.{replica_id}", self.scope.name)
    }
}

/// Starts `vd ARGS` against the rig's controller in the background, its
/// stdout read line by line into a channel.
pub fn spawn_vd(
    rig: &Rig,
    args: &[&str],
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = std::process::Command::new(vd::vd_binary())
        .args(args)
        .env("VOODU_ROOT", rig.controller.root())
        .env("NO_COLOR", "1")
        .current_dir(rig.controller.root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("vd runs");
    let stdout = child.stdout.take().expect("stdout");
    (child, voodu_tests::lines_of(stdout))
}

/// Reads lines until one satisfies `wanted`, within `timeout`.
pub fn read_until(
    lines: &std::sync::mpsc::Receiver<String>,
    timeout: Duration,
    mut wanted: impl FnMut(&str) -> bool,
) -> Vec<String> {
    // Not a wait_until: it blocks on the stream line by line, keeping each,
    // and fails at once if the stream ends.
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                let done = wanted(&line);
                seen.push(line);
                if done {
                    return seen;
                }
            }
            Err(_) => panic!("never saw the line; saw {seen:#?}"),
        }
    }
}

/// Samples `vd get workloads` every 200 ms on a thread of its own until
/// the returned flag is set; the join handle gives the slowest answer.
pub fn sample_get_latency(
    rig: &Rig,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<Duration>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let root = rig.controller.root().to_owned();
    let sampler = std::thread::spawn(move || {
        let mut slowest = Duration::ZERO;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            let started = Instant::now();
            let status = std::process::Command::new(vd::vd_binary())
                .args(["get", "workloads"])
                .env("VOODU_ROOT", &root)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("vd runs");
            assert!(status.success(), "vd get failed beside a hostile plugin");
            slowest = slowest.max(started.elapsed());
            std::thread::sleep(Duration::from_millis(200));
        }
        slowest
    });
    (stop, sampler)
}

/// A misbehaving plugin at runtime: installs it, applies a two-replica
/// workload with `block`, and checks while it misbehaves that a killed
/// replica of the recorder's workload is withdrawn and published again,
/// that `vd get` answers in under a second throughout, and that the plugin
/// is listed with `state` and named in its workload's events (when
/// `event_reason` is given). Returns the slowest `vd get`.
pub fn hostile_plugin_beside_the_recorder(
    rig: &Rig,
    plugin_file: &str,
    plugin: &str,
    block: &str,
    state: &str,
    event_reason: Option<&str>,
) -> Duration {
    rig.controller
        .vd(&["plugins:install", plugin_file])
        .success();
    let (stop, sampler) = sample_get_latency(rig);
    let stuck = rig.controller.manifest(
        "stuck.hcl",
        &format!(
            "deployment \"{}\" \"stuck\" {{\n  image = \"{}\"\n  ports = [\"8084\"]\n  replicas = 2\n  drain_timeout = \"2s\"\n  {block}\n}}\n",
            rig.scope.name, rig.image.name
        ),
    );
    rig.controller
        .vd(&["apply", "--no-wait", "-f", &stuck])
        .success();
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 1", ""));
    let victim = rig.last_published_ids()[0].clone();
    let before = rig.calls().len();
    docker(&["kill", &rig.container_name("web", &victim)]);
    wait_for_calls(&rig.calls, Duration::from_secs(15), |calls| {
        let publishes = of_kind(&calls[before..], "publish");
        publishes.iter().any(|p| p.endpoints().is_empty())
            && publishes.last().is_some_and(|p| p.endpoints().len() == 1)
    });
    wait_until_listed(rig, plugin, state);
    if let Some(reason) = event_reason {
        voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
            let events = rig.describe_json("deployment", "stuck")["events"].clone();
            let named = events.as_array().is_some_and(|events| {
                events.iter().any(|event| {
                    event["reason"] == reason
                        && event["message"]
                            .as_str()
                            .is_some_and(|message| message.contains(&format!("{plugin} block")))
                })
            });
            if named {
                Ok(())
            } else {
                Err(format!("no {reason} event names {plugin}: {events:#}"))
            }
        });
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let slowest = sampler.join().expect("the sampler");
    assert!(
        slowest < Duration::from_secs(1),
        "vd get took {slowest:?} beside {plugin}"
    );
    slowest
}

/// A C failure fixture's path, as `vd plugins:install` takes it.
pub fn c_fixture(name: &str) -> String {
    voodu_tests::c_fixture(name).display().to_string()
}

/// Waits up to 20 s for `vd plugins:list` to show `plugin` in `state`.
pub fn wait_until_listed(rig: &DockerRig, plugin: &str, state: &str) {
    voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        let listed = rig.controller.vd(&["plugins:list"]).success();
        if listed
            .stdout
            .lines()
            .any(|line| line.starts_with(plugin) && line.contains(state))
        {
            Ok(())
        } else {
            Err(format!("{plugin} is not listed {state}: {listed:?}"))
        }
    });
}
