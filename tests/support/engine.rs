//! The real Docker engine for the reconcile tests: checking it is there,
//! importing the static echo-server as an image, and removing everything a
//! test created, even when it fails. Inspection goes through the `docker`
//! CLI, independently of the controller's bollard client.

use std::io::Write;
use std::process::{Command, Stdio};

pub use voodu_tests::required_on_ci;

/// Whether the Docker engine answers (see [`required_on_ci`]).
pub fn engine_available() -> bool {
    required_on_ci(
        "the Docker engine",
        Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]),
    )
}

/// Whether a tool is installed (see [`required_on_ci`]).
pub fn tool_available(tool: &str) -> bool {
    required_on_ci(
        tool,
        Command::new("sh").args(["-c", &format!("command -v {tool}")]),
    )
}

/// Runs `docker ARGS` and returns its stdout; panics with stderr on failure.
pub fn docker(args: &[&str]) -> String {
    let output = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    assert!(
        output.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    format!(
        "{prefix}{:x}{:x}{}",
        std::process::id(),
        nanos & 0xfff,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The static echo-server imported as an image (`docker import`, with the
/// binary as the whole root filesystem); removed on drop.
pub struct EchoImage {
    /// `voodu-echo-test:<unique>`.
    pub name: String,
}

impl EchoImage {
    /// Imports the image under a unique tag.
    pub fn import() -> Self {
        Self::import_with(&[])
    }

    /// Imports it with a Docker HEALTHCHECK that runs `echo-server health`
    /// every `interval`.
    pub fn import_with_healthcheck(interval: &str) -> Self {
        Self::import_with(&[&format!(
            "HEALTHCHECK --interval={interval} --timeout=1s --retries=1 CMD [\"/echo-server\", \"health\"]"
        )])
    }

    /// Imports it with extra Dockerfile instructions (`docker import
    /// --change`).
    fn import_with(changes: &[&str]) -> Self {
        let name = format!("voodu-echo-test:{}", unique("i"));
        let binary = std::fs::read(env!("VOODU_ECHO_SERVER")).expect("the echo-server was built");
        let mut archive = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(binary.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        archive
            .append_data(&mut header, "echo-server", binary.as_slice())
            .expect("tar entry");
        let rootfs = archive.into_inner().expect("tar archive");
        let changes: Vec<&str> = ["ENTRYPOINT [\"/echo-server\"]"]
            .into_iter()
            .chain(changes.iter().copied())
            .collect();
        import_image(&name, &rootfs, &changes);
        EchoImage { name }
    }
}

impl Drop for EchoImage {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.name])
            .output();
    }
}

/// The shared libraries `binary` loads, by path, as `ldd` lists them.
fn shared_libraries(binary: &str) -> Vec<String> {
    let listed = Command::new("ldd").arg(binary).output().expect("ldd runs");
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, after)) => after.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| path.to_owned())
        })
        .collect()
}

/// `docker import`s `rootfs` (a tar) as image `name`, with `changes`
/// (Dockerfile instructions).
fn import_image(name: &str, rootfs: &[u8], changes: &[&str]) {
    let mut import = Command::new("docker")
        .arg("import")
        .args(changes.iter().flat_map(|change| ["--change", change]))
        .args(["-", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("docker import runs");
    import
        .stdin
        .take()
        .expect("stdin")
        .write_all(rootfs)
        .expect("rootfs written");
    assert!(import.wait().expect("docker import ends").success());
}

/// A stand-in for an image from a registry no test reaches: a shell
/// (dash), busybox's tools (`cp`, `sleep`, ...), the echo-server at
/// `/echo-server`,
/// and `scripts` (each a path and its text, executable), with `changes`
/// (`docker import --change`); no entrypoint. Removed on drop.
pub struct ToolImage {
    /// `voodu-tools-test:<unique>`.
    pub name: String,
}

impl ToolImage {
    /// Imports it under a unique tag.
    pub fn import(scripts: &[(&str, &str)], changes: &[&str]) -> ToolImage {
        let name = format!("voodu-tools-test:{}", unique("t"));
        let busybox =
            std::fs::read("/bin/busybox").expect("busybox-static is installed (tests/run)");
        let echo = std::fs::read(env!("VOODU_ECHO_SERVER")).expect("the echo-server was built");
        let mut archive = tar::Builder::new(Vec::new());
        let mut file = |path: &str, bytes: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o755);
            header.set_cksum();
            archive
                .append_data(&mut header, path, bytes)
                .expect("tar entry");
        };
        file("bin/busybox", &busybox);
        file("echo-server", &echo);
        // The shell is dash, with the libraries it loads: busybox's own
        // shell runs its applets before any program of the same name on
        // PATH, so a script standing in for `nc` would never run.
        file(
            "bin/sh",
            &std::fs::read("/bin/dash").expect("dash is installed"),
        );
        for library in shared_libraries("/bin/dash") {
            let bytes = std::fs::read(&library).expect("a library of dash");
            file(library.trim_start_matches('/'), &bytes);
        }
        for (path, text) in scripts {
            file(path, text.as_bytes());
        }
        for applet in [
            "cp", "mkdir", "dirname", "cat", "echo", "ls", "sleep", "true", "false",
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            header.set_mode(0o777);
            archive
                .append_link(&mut header, format!("bin/{applet}"), "busybox")
                .expect("tar link");
        }
        let rootfs = archive.into_inner().expect("tar archive");
        let changes: Vec<&str> = ["ENV PATH=/usr/local/bin:/bin"]
            .into_iter()
            .chain(changes.iter().copied())
            .collect();
        import_image(&name, &rootfs, &changes);
        ToolImage { name }
    }
}

impl Drop for ToolImage {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.name])
            .output();
    }
}

/// A unique workload scope; on drop, every container labelled with it is
/// removed.
pub struct Scope {
    /// The scope name.
    pub name: String,
}

impl Scope {
    /// A fresh scope.
    pub fn new() -> Self {
        Scope { name: unique("t") }
    }

    /// The containers of this scope: (name, id), oldest first.
    pub fn containers(&self) -> Vec<(String, String)> {
        let listed = docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=voodu.scope={}", self.name),
            "--format",
            "{{.CreatedAt}}\t{{.Names}}\t{{.ID}}",
        ]);
        let mut rows: Vec<(String, String, String)> = listed
            .lines()
            .filter_map(|line| {
                let mut parts = line.split('\t');
                Some((
                    parts.next()?.into(),
                    parts.next()?.into(),
                    parts.next()?.into(),
                ))
            })
            .collect();
        rows.sort();
        rows.into_iter().map(|(_, name, id)| (name, id)).collect()
    }
}

impl Default for Scope {
    fn default() -> Self {
        Scope::new()
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let ids = Command::new("docker")
            .args([
                "ps",
                "-aq",
                "--filter",
                &format!("label=voodu.scope={}", self.name),
            ])
            .output()
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v"])
                .args(&ids)
                .output();
        }
        // The volumes of its statefulsets' claims, which voodu never
        // removes.
        let volumes = Command::new("docker")
            .args([
                "volume",
                "ls",
                "-q",
                "--filter",
                &format!("name=voodu-{}-", self.name),
            ])
            .output()
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default();
        let volumes: Vec<&str> = volumes.split_whitespace().collect();
        if !volumes.is_empty() {
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f"])
                .args(&volumes)
                .output();
        }
    }
}

/// What an engine test stands on: a controller that drives Docker with one
/// plugin installed, a fresh scope, and the echo image. Fields drop in
/// order: the controller stops, the scope's containers go, then the image.
pub struct DockerRig {
    /// The controller, on a temporary root.
    pub controller: crate::vd::Controller,
    /// The test's own scope.
    pub scope: Scope,
    /// The imported echo-server image.
    pub image: EchoImage,
}

impl DockerRig {
    /// Starts it, with the plugin at `plugin` installed; `None` (a skip)
    /// when no engine answers outside CI.
    pub fn start(plugin: &str) -> Option<DockerRig> {
        DockerRig::start_with(plugin, crate::vd::Controller::start_with_docker)
    }

    /// Starts it as [`DockerRig::start`] does, with the workspace's Rust
    /// plugin `crate_name` (`voodu_echo`, `voodu_traffik`, ...).
    pub fn with_rust_plugin(crate_name: &str) -> Option<DockerRig> {
        DockerRig::start(&voodu_tests::rust_cdylib(crate_name).display().to_string())
    }

    /// Starts it as [`DockerRig::start`] does, with the controller
    /// `start_controller` starts.
    pub fn start_with(
        plugin: &str,
        start_controller: impl FnOnce() -> crate::vd::Controller,
    ) -> Option<DockerRig> {
        if !engine_available() {
            return None;
        }
        let image = EchoImage::import();
        let scope = Scope::new();
        let controller = start_controller();
        controller.vd(&["plugins:install", plugin]).success();
        Some(DockerRig {
            controller,
            scope,
            image,
        })
    }
}

impl DockerRig {
    /// Installs the `segv` C fixture and applies a workload `boom` with a
    /// `segv` block: its replica starts, and the publish to `segv` kills
    /// the controller's worker (SIGSEGV); returns once the supervisor has
    /// said so. The apply that did it failed.
    pub fn crash_the_worker_in_publish(&self) {
        self.controller
            .vd(&[
                "plugins:install",
                &voodu_tests::c_fixture("segv").display().to_string(),
            ])
            .success();
        let boom = self.controller.manifest(
            "boom.hcl",
            &format!(
                "deployment \"{}\" \"boom\" {{\n  image = \"{}\"\n  ports = [\"8084\"]\n  segv {{}}\n}}\n",
                self.scope.name, self.image.name
            ),
        );
        let crashed = self.controller.vd(&["apply", "-f", &boom]);
        assert_ne!(crashed.code, 0, "{crashed:?}");
        self.controller
            .wait_for_log("the controller's worker was killed by signal 11");
    }

    /// `vd describe KIND/<scope>/NAME -o json`.
    pub fn describe_json(&self, kind: &str, name: &str) -> serde_json::Value {
        self.controller
            .vd(&[
                "describe",
                &format!("{kind}/{}/{name}", self.scope.name),
                "-o",
                "json",
            ])
            .success()
            .json()
    }
}

/// A container's IP address on `voodu0`.
pub fn voodu0_ip(container: &str) -> String {
    docker(&[
        "inspect",
        "-f",
        "{{(index .NetworkSettings.Networks \"voodu0\").IPAddress}}",
        container,
    ])
}

/// When a container was created, as Docker says it, in nanoseconds.
pub fn created_ns(container: &str) -> u128 {
    let created = docker(&["inspect", "-f", "{{.Created}}", container]);
    parse_rfc3339_ns(&created)
}

/// Nanoseconds since the epoch of an RFC 3339 time with up to nanosecond
/// precision (what Docker prints).
pub fn parse_rfc3339_ns(text: &str) -> u128 {
    let parsed =
        humantime::parse_rfc3339_weak(text.trim_end_matches('Z').split('.').next().unwrap_or(text))
            .unwrap_or_else(|error| panic!("{text:?} is not RFC 3339: {error}"));
    let whole = parsed
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos();
    let fraction = text
        .split('.')
        .nth(1)
        .map(|digits| digits.trim_end_matches('Z'))
        .map(|digits| format!("{digits:0<9}")[..9].parse::<u128>().unwrap_or(0))
        .unwrap_or(0);
    whole + fraction
}

/// The times (ns) at which Docker reported `event` for containers with
/// `label`, between `since_secs` and now.
pub fn event_times(label: &str, event: &str, since_secs: u64) -> Vec<u128> {
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs()
        + 1;
    docker(&[
        "events",
        "--since",
        &since_secs.to_string(),
        "--until",
        &until.to_string(),
        "--filter",
        &format!("label={label}"),
        "--filter",
        &format!("event={event}"),
        "--format",
        "{{.TimeNano}}",
    ])
    .lines()
    .filter_map(|line| line.trim().parse().ok())
    .collect()
}
