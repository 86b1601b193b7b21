//! Helpers shared by the end-to-end tests: where the built plugins are, and a
//! process-wide log capture for checking what plugins log through the host.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// A loopback backend that answers each connection with `id` once the
/// client has sent something, then closes it. It serves until the process
/// ends.
pub fn id_backend(id: &'static str) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let address = listener.local_addr().expect("a bound address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut request = [0u8; 256];
                if stream.read(&mut request).is_ok_and(|n| n > 0) {
                    let _ = stream.write_all(id.as_bytes());
                }
            });
        }
    });
    address
}

/// The compiled C failure fixture `name` (`libNAME.so` in its directory).
pub fn c_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("VOODU_C_FIXTURES")).join(format!("lib{name}.so"))
}

/// The cdylib of a workspace crate, by its library name (`voodu_echo`),
/// looked up next to the running test binary (`target/<profile>/deps`) and
/// one level up, where cargo copies the cdylibs of workspace members.
pub fn rust_cdylib(lib_name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    let deps = exe.parent().expect("the test binary is in a directory");
    let file = format!("lib{lib_name}.so");
    let candidates = [deps.join(&file), deps.join("..").join(&file)];
    candidates
        .iter()
        .find(|path| path.exists())
        .cloned()
        .unwrap_or_else(|| panic!("{file} was not built; looked in {candidates:?}"))
}

/// Every formatted log line, from every thread, since [`capture_logs`] was
/// first called.
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// The captured text so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs (once per process) a global `tracing` subscriber that writes
/// into a buffer, and returns that buffer. Global, because plugins log from
/// their own host threads.
pub fn capture_logs() -> CapturedLogs {
    static LOGS: OnceLock<CapturedLogs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = CapturedLogs::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    })
    .clone()
}

/// One publish the `recorder` fixture wrote to its calls file.
#[derive(Debug, Clone)]
pub struct RecordedPublish {
    /// When the plugin received it, wall clock, in ns.
    pub at_ns: u128,
    /// The replica ids of its set.
    pub replica_ids: Vec<String>,
    /// The workload's name.
    pub workload_name: String,
    /// The set's generation.
    pub generation: u64,
}

/// One call the `recorder` fixture wrote down: which, when, and the
/// request as the plugin received it.
#[derive(Debug, Clone)]
pub struct RecordedCall {
    /// `validate`, `publish`, `drain` or `forget`.
    pub call: String,
    /// When the plugin received it, in nanoseconds since the Unix epoch.
    pub at_ns: u128,
    /// The process that made the call: which controller, where several
    /// share one calls file.
    pub pid: u32,
    /// The request's JSON.
    pub request: serde_json::Value,
}

impl RecordedCall {
    /// A publish's endpoints: (replica id, address), in order.
    pub fn endpoints(&self) -> Vec<(String, String)> {
        self.request["endpoints"]
            .as_array()
            .map(|endpoints| {
                endpoints
                    .iter()
                    .map(|e| {
                        (
                            e["replica_id"].as_str().unwrap_or_default().to_owned(),
                            e["address"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A publish's endpoints: (replica id, address, node), in order.
    pub fn endpoints_with_nodes(&self) -> Vec<(String, String, String)> {
        self.request["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let text = |key: &str| e[key].as_str().unwrap_or_default().to_owned();
                (text("replica_id"), text("address"), text("node"))
            })
            .collect()
    }

    /// A publish's replica ids, in order.
    pub fn replica_ids(&self) -> Vec<String> {
        self.endpoints().into_iter().map(|(id, _)| id).collect()
    }

    /// The replica a drain call named.
    pub fn drained_replica(&self) -> String {
        self.request["replica"]["replica_id"]
            .as_str()
            .expect("a drain names its replica")
            .to_owned()
    }
}

/// Every call the `recorder` fixture wrote to `path`, in order: the one
/// reader of its file.
pub fn recorded_calls(path: &std::path::Path) -> Vec<RecordedCall> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .map(|line| RecordedCall {
            call: line["call"].as_str().unwrap_or_default().to_owned(),
            at_ns: line["at_ns"]
                .as_str()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            pid: line["pid"]
                .as_u64()
                .and_then(|pid| u32::try_from(pid).ok())
                .unwrap_or(0),
            request: line["request"].clone(),
        })
        .collect()
}

/// Every publish the `recorder` fixture wrote to `path`, in order.
pub fn recorded_publishes(path: &std::path::Path) -> Vec<RecordedPublish> {
    recorded_calls(path)
        .into_iter()
        .filter(|call| call.call == "publish")
        .map(|call| RecordedPublish {
            at_ns: call.at_ns,
            replica_ids: call.replica_ids(),
            workload_name: call.request["name"].as_str().unwrap_or_default().to_owned(),
            generation: call.request["generation"].as_u64().unwrap_or(0),
        })
        .collect()
}

/// Asks `probe` every `every` until it answers `Ok`, and returns what it
/// found; after `within`, fails the test with the last `Err` it gave (what
/// it saw instead).
pub fn wait_until<T, E: std::fmt::Display>(
    within: std::time::Duration,
    every: std::time::Duration,
    probe: impl FnMut() -> Result<T, E>,
) -> T {
    poll_until(within, every, probe).unwrap_or_else(|seen| panic!("not within {within:?}: {seen}"))
}

/// [`wait_until`] for a wait whose timeout is not a failure of the test:
/// asks `probe` every `every` until it answers `Ok`, and after `within`
/// gives back the last `Err`, for the caller to act on (record it and go
/// on, kill what did not stop). The one polling loop of the tests.
pub fn poll_until<T, E>(
    within: std::time::Duration,
    every: std::time::Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match probe() {
            Ok(found) => return Ok(found),
            Err(seen) if std::time::Instant::now() >= deadline => return Err(seen),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// The lines a child process writes to `output`, read on a thread of their
/// own into a channel, so a test can wait for one with a deadline.
pub fn lines_of(output: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(output)
            .lines()
            .map_while(Result::ok)
        {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Whether these tests run on CI: `CI` set to anything but empty, `false`
/// or `0` (CI systems set `true`, `1` or their own name).
pub fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| !matches!(value.trim(), "" | "false" | "0"))
}

/// Whether `check` succeeds. On CI ([`on_ci`]) a failure fails the test,
/// naming `what` is missing; elsewhere the test is skipped with a note.
pub fn required_on_ci(what: &str, check: &mut std::process::Command) -> bool {
    let present = check.output().is_ok_and(|output| output.status.success());
    if !present {
        assert!(
            !on_ci(),
            "{what} is required on CI (.ci/run provides it) and is missing"
        );
        eprintln!("skipped: {what} is missing here");
    }
    present
}

/// The worker process of the `vd controller` supervisor `supervisor`: the
/// process that loads the plugins and serves (see
/// `voodu_controller::supervisor`). Waits up to 10 s for it to exist.
pub fn worker_of(supervisor: u32) -> u32 {
    let children = format!("/proc/{supervisor}/task/{supervisor}/children");
    poll_until(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(5),
        || {
            std::fs::read_to_string(&children)
                .ok()
                .and_then(|text| {
                    text.split_whitespace()
                        .next()
                        .and_then(|pid| pid.parse().ok())
                })
                .ok_or(())
        },
    )
    .unwrap_or_else(|()| panic!("the controller {supervisor} has no worker"))
}

/// The worker of `supervisor`, if it has one now.
pub fn current_worker_of(supervisor: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{supervisor}/task/{supervisor}/children"))
        .ok()
        .and_then(|text| {
            text.split_whitespace()
                .next()
                .and_then(|pid| pid.parse().ok())
        })
}

/// Waits up to 10 s for process `pid` to be gone (or a zombie holding no
/// descriptor): after its
/// supervisor was killed outright, a worker gets SIGKILL too, but may take
/// a moment to die (inside an fsync, say).
pub fn wait_until_gone(pid: u32) {
    let gone = poll_until(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(5),
        || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => Ok(()),
            // A zombie whose threads have all exited holds no descriptor
            // any more (while one still tears down, the leader already
            // shows Z but the socket is still open).
            Ok(stat)
                if stat
                    .rsplit(") ")
                    .next()
                    .is_some_and(|rest| rest.starts_with('Z'))
                    && std::fs::read_dir(format!("/proc/{pid}/fd"))
                        .map_or(true, |mut entries| entries.next().is_none()) =>
            {
                Ok(())
            }
            Ok(_) => Err(()),
        },
    );
    assert!(
        gone.is_ok(),
        "process {pid} outlived its supervisor by 10 s"
    );
}
