//! Running the real `vd` binary against a real controller on a temporary
//! root, for the CLI tests.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The `vd` binary under test.
pub fn vd_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vd-under-test"))
}

/// What one `vd` command did.
#[derive(Debug)]
pub struct Run {
    /// The exit code (-1 if killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// What `output` says.
    pub fn from_output(output: Output) -> Self {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// The standard output as JSON; panics with both streams if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {self:?}"))
    }

    /// Panics with both streams unless the command succeeded.
    pub fn success(self) -> Self {
        assert_eq!(self.code, 0, "vd failed: {self:?}");
        self
    }
}

/// A `vd controller` running on a temporary root, stopped on drop. The
/// replicas it started keep running; the tests remove them.
pub struct Controller {
    root: tempfile::TempDir,
    log: PathBuf,
    child: Option<Child>,
    docker: bool,
    /// A file descriptor limit for the controller process, if any.
    open_files: Option<u64>,
    /// When set, stderr is a pipe held here and never read.
    unread_stderr: Option<std::process::ChildStderr>,
    stderr_to_pipe: bool,
    /// The controller's `--plugin-timeout`: 2 s unless a test asks.
    plugin_timeout: Duration,
    /// The `vd` binary the controller runs as (an upgrade test runs a copy
    /// it can replace).
    binary: PathBuf,
    /// Started by `systemd-socket-activate`, which makes the API socket and
    /// these TCP listeners and passes them in `LISTEN_FDS`.
    socket_activated: Option<Vec<String>>,
    /// More arguments for `vd controller`.
    extra_args: Vec<String>,
}

impl Controller {
    /// Starts a controller on a fresh root, without Docker.
    pub fn start() -> Self {
        Controller::start_with(false, |_| {})
    }

    /// Starts a controller on a fresh root that drives the Docker engine.
    pub fn start_with_docker() -> Self {
        Controller::start_with(true, |_| {})
    }

    /// Starts a controller on a fresh root, after `prepare` has had a chance
    /// to put files in it (pre-installed plugins, say).
    pub fn start_with(docker: bool, prepare: impl FnOnce(&Path)) -> Self {
        Controller::start_on_fresh_root(docker, None, prepare)
    }

    /// Starts a controller on a fresh root that drives the Docker engine
    /// and bounds each plugin call at `plugin_timeout` (the others: 2 s).
    pub fn start_with_docker_and_plugin_timeout(plugin_timeout: Duration) -> Self {
        let mut controller = Controller::new_on_fresh_root(true, None, |_| {});
        controller.plugin_timeout = plugin_timeout;
        controller.spawn();
        controller
    }

    /// Starts a controller without Docker whose process may hold at most
    /// `open_files` file descriptors.
    pub fn start_with_open_files(open_files: u64) -> Self {
        Controller::start_on_fresh_root(false, Some(open_files), |_| {})
    }

    fn start_on_fresh_root(
        docker: bool,
        open_files: Option<u64>,
        prepare: impl FnOnce(&Path),
    ) -> Self {
        let mut controller = Controller::new_on_fresh_root(docker, open_files, prepare);
        controller.spawn();
        controller
    }

    fn new_on_fresh_root(
        docker: bool,
        open_files: Option<u64>,
        prepare: impl FnOnce(&Path),
    ) -> Self {
        let root = tempfile::Builder::new()
            .prefix("vd")
            .tempdir()
            .expect("a temporary root");
        prepare(root.path());
        Controller {
            log: root.path().join("controller.log"),
            child: None,
            root,
            docker,
            open_files,
            unread_stderr: None,
            stderr_to_pipe: false,
            plugin_timeout: Duration::from_secs(2),
            binary: vd_binary(),
            socket_activated: None,
            extra_args: Vec::new(),
        }
    }

    /// Starts a controller on a fresh root with more arguments for `vd
    /// controller` (`--metrics-listen ADDR`, say).
    pub fn start_with_args(docker: bool, args: &[&str]) -> Self {
        let mut controller = Controller::new_on_fresh_root(docker, None, |_| {});
        controller.extra_args = args.iter().map(|arg| (*arg).to_owned()).collect();
        controller.spawn();
        controller
    }

    /// Starts a controller on a fresh root as systemd's socket activation
    /// would: `systemd-socket-activate` makes the API socket and a TCP
    /// listener on each of `listen`, and runs `vd controller` with them.
    pub fn start_socket_activated(docker: bool, listen: &[String]) -> Self {
        let mut controller = Controller::new_on_fresh_root(docker, None, |_| {});
        controller.socket_activated = Some(listen.to_vec());
        controller.spawn();
        controller
    }

    /// Starts a controller on a fresh root that runs as `binary` (a copy of
    /// `vd` the test may replace, for upgrades), with Docker or without.
    pub fn start_from_binary(binary: &Path, docker: bool) -> Self {
        let mut controller = Controller::new_on_fresh_root(docker, None, |_| {});
        controller.binary = binary.to_owned();
        controller.spawn();
        controller
    }

    /// The process id of the controller's worker: the process that loads
    /// the plugins and serves, under `vd controller`'s supervisor.
    pub fn pid(&self) -> u32 {
        voodu_tests::worker_of(self.supervisor_pid())
    }

    /// The process id of `vd controller` itself: the supervisor, which
    /// holds the socket and starts the worker again when it dies.
    pub fn supervisor_pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(&self.log).expect("a log file");
        let mut command = match &self.socket_activated {
            None => Command::new(&self.binary),
            Some(listen) => {
                let mut activate = Command::new("systemd-socket-activate");
                activate
                    .arg("-l")
                    .arg(self.root.path().join("controller.sock"));
                for address in listen {
                    activate.args(["-l", address]);
                }
                activate.arg(&self.binary);
                activate
            }
        };
        command
            .args(["controller", "--plugin-timeout"])
            .arg(format!("{}ms", self.plugin_timeout.as_millis()))
            .arg("--root")
            .arg(self.root.path());
        if !self.docker {
            command.arg("--no-docker");
        }
        command.args(&self.extra_args);
        if let Some(limit) = self.open_files {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe, as pre_exec requires.
            unsafe {
                command.pre_exec(move || {
                    let rlimit = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let stderr = if self.stderr_to_pipe {
            Stdio::piped()
        } else {
            Stdio::from(log)
        };
        let mut child = command
            .env("NO_COLOR", "1")
            .env("VOODU_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("vd controller starts");
        self.unread_stderr = child.stderr.take();
        self.child = Some(child);
        let socket = self.root.path().join("controller.sock");
        let child = self.child.as_mut().expect("just spawned");
        let log = || std::fs::read_to_string(&self.log).unwrap_or_default();
        voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
            // Served means answered: a connection alone can land in the
            // backlog of a controller that is still dying.
            let refused = match UnixStream::connect(&socket) {
                Ok(_) => match voodu_api::client::Client::new(self.root.path())
                    .call(&voodu_api::Request::Version, &mut |_| {})
                {
                    Ok(_) => return Ok(()),
                    Err(error) => std::io::Error::other(error.to_string()),
                },
                Err(error) => error,
            };
            // An exited controller will never serve: fail at once.
            if let Some(status) = child.try_wait().ok().flatten() {
                panic!("the controller exited with {status}: {}", log());
            }
            Err(format!(
                "the controller did not start ({refused}): {}",
                log()
            ))
        });
    }

    /// Stops the controller (SIGTERM) and starts it again on the same root.
    pub fn restart(&mut self) {
        self.restart_after(|_| {});
    }

    /// Stops the controller, runs `between` on its root while nothing runs,
    /// and starts it again.
    pub fn restart_after(&mut self, between: impl FnOnce(&Path)) {
        self.stop();
        between(self.root.path());
        self.spawn();
    }

    /// Stops the controller and starts it again with `args` after
    /// `controller` in place of the ones it had.
    pub fn restart_with_args(&mut self, args: &[&str]) {
        self.stop();
        self.extra_args = args.iter().map(|arg| (*arg).to_owned()).collect();
        self.spawn();
    }

    /// Stops the controller and starts it again with its stderr on a pipe
    /// that nobody reads, which fills after 64 KiB.
    pub fn restart_with_unread_stderr(&mut self) {
        self.stop();
        self.stderr_to_pipe = true;
        self.spawn();
    }

    /// Kills the controller with SIGKILL, as a crash or an OOM kill would,
    /// and reaps it; `restart` starts it again.
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            let worker = voodu_tests::current_worker_of(child.id());
            let _ = child.kill();
            let _ = child.wait();
            // The worker dies with its supervisor (PR_SET_PDEATHSIG); a
            // crash of the controller is both gone.
            if let Some(worker) = worker {
                voodu_tests::wait_until_gone(worker);
            }
        }
    }

    /// Sends SIGTERM and waits up to `within` for the controller to exit
    /// by itself; its exit status, or `None` if it did not (it is then
    /// killed).
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: kill has no memory preconditions; the pid is our child's.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let exited = voodu_tests::poll_until(within, Duration::from_millis(20), || {
            child.try_wait().ok().flatten().ok_or(())
        });
        if exited.is_err() {
            let _ = child.kill();
            let _ = child.wait();
        }
        exited.ok()
    }

    /// Stops the controller (SIGTERM, then SIGKILL after 10 s) and leaves
    /// it stopped; `restart` starts it again.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            // Stopped either way: SIGKILL after the wait, exited or not.
            let _ =
                voodu_tests::poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
                    child.try_wait().ok().flatten().ok_or(())
                });
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The controller's root.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Everything the controller has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits up to 5 s for the controller's log to hold `needle`; fails
    /// the test with the log when it does not.
    pub fn wait_for_log(&self, needle: &str) {
        self.wait_for_log_line(needle, Duration::from_secs(5));
    }

    /// Waits up to `within` for a line of the controller's log holding
    /// `needle`, and returns it.
    pub fn wait_for_log_line(&self, needle: &str, within: Duration) -> String {
        voodu_tests::wait_until(within, Duration::from_millis(20), || {
            let log = self.log_text();
            log.lines()
                .find(|line| line.contains(needle))
                .map(str::to_owned)
                .ok_or_else(|| format!("{needle} not logged: {log}"))
        })
    }

    /// Runs `vd ARGS` against this controller, with `NO_COLOR` set and the
    /// working directory at the root (so manifest paths are relative).
    pub fn vd(&self, args: &[&str]) -> Run {
        self.vd_with_no_color(args, true)
    }

    /// The row of the loaded plugin `name` in `vd plugins:list -o json`.
    pub fn plugin_row(&self, name: &str) -> serde_json::Value {
        let listed = self.vd(&["plugins:list", "-o", "json"]).success().json();
        listed["plugins"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|row| row["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not listed: {listed}"))
    }

    /// Runs `vd ARGS` as [`Controller::vd`] does, with `NO_COLOR` set or
    /// unset: its output is a pipe either way.
    pub fn vd_with_no_color(&self, args: &[&str], no_color: bool) -> Run {
        self.vd_in_shell(args, no_color, &[])
    }

    /// Runs `vd ARGS` as [`Controller::vd`] does, with these variables
    /// set in its environment.
    pub fn vd_with_env(&self, args: &[&str], variables: &[(&str, &str)]) -> Run {
        self.vd_in_shell(args, true, variables)
    }

    /// Runs `vd ARGS` as [`Controller::vd`] does, with `input` on its
    /// standard input.
    pub fn vd_with_stdin(&self, args: &[&str], input: &str) -> Run {
        use std::io::Write;
        let mut child = Command::new(vd_binary())
            .args(args)
            .env("VOODU_ROOT", self.root.path())
            .env("NO_COLOR", "1")
            .current_dir(self.root.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("vd runs");
        let mut stdin = child.stdin.take().expect("stdin");
        let written = input.to_owned();
        let writer = std::thread::spawn(move || stdin.write_all(written.as_bytes()));
        let output = child.wait_with_output().expect("vd ends");
        writer
            .join()
            .expect("the writer ends")
            .expect("stdin written");
        Run::from_output(output)
    }

    fn vd_in_shell(&self, args: &[&str], no_color: bool, variables: &[(&str, &str)]) -> Run {
        let mut command = Command::new(vd_binary());
        command.envs(variables.iter().copied());
        command
            .args(args)
            .env("VOODU_ROOT", self.root.path())
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE")
            .current_dir(self.root.path());
        if no_color {
            command.env("NO_COLOR", "1");
        }
        Run::from_output(command.output().expect("vd runs"))
    }

    /// Writes a manifest file under the root and returns its relative path.
    pub fn manifest(&self, relative: &str, text: &str) -> String {
        let path = self.root.path().join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("manifest directory");
        }
        std::fs::write(&path, text).expect("manifest written");
        relative.to_owned()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A copy of `vd` in a directory of its own, which the test may replace.
pub struct ReplaceableBinary {
    directory: tempfile::TempDir,
}

impl ReplaceableBinary {
    /// A copy of the `vd` under test.
    pub fn new() -> ReplaceableBinary {
        let binary = ReplaceableBinary {
            directory: tempfile::tempdir().expect("a directory"),
        };
        binary.put(&std::fs::read(vd_binary()).expect("vd"));
        binary
    }

    /// Where the copy is.
    pub fn path(&self) -> PathBuf {
        self.directory.path().join("vd")
    }

    /// Replaces the file as an operator's install does: a new file renamed
    /// over the old one (the running one keeps its inode).
    pub fn put(&self, contents: &[u8]) {
        use std::os::unix::fs::PermissionsExt;
        let staging = self.directory.path().join("vd.new");
        std::fs::write(&staging, contents).expect("written");
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755)).expect("mode");
        std::fs::rename(&staging, self.path()).expect("renamed");
    }
}
