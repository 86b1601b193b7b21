//! Plugins that run in a child process of their own, answering the same
//! calls over a socket.
//!
//! A plugin runs out of process when its install asks for it
//! ([`crate::LoadOptions::out_of_process`]), and always when it carries a
//! Go runtime and this process already holds one ([`crate::go_runtime`]).
//! The child is the host's own binary, started again with
//! [`CHILD_ENV`] set: its `main` hands over to [`serve_if_child`] before
//! anything else. The child opens the library, checks its table as the
//! in-process loader does, and makes the raw calls; the parent keeps
//! everything else (the [`PluginHandle`], its bound on each call, its
//! figures), so an out-of-process plugin is the same handle to its callers.
//!
//! **Channels.** Two socket pairs, handed to the child as descriptors 3
//! and 4:
//! - the calls: a stream of frames (below), parent to child a call and its
//!   request bytes, child to parent the reply, and the plugin's log lines
//!   and metrics whenever it reports them, which the parent passes to the
//!   same host services an in-process plugin reaches;
//! - the listeners: the child's [`ListenerTable`] asks the parent's for
//!   every socket over the supervisor's keeper channel
//!   ([`crate::listeners::keeper`]), and the descriptor comes back with
//!   `SCM_RIGHTS`, so a socket the host (or its supervisor) holds reaches a
//!   plugin in another process, and two plugins never bind one address.
//!
//! **Frames.** `[u32 length][u32 header length][header][payload]`, little
//! endian; the header is a [`postcard`] message ([`ToChild`] or
//! [`FromChild`]), the payload a request's or reply's bytes as they are.
//!
//! **Supervision.** One relay thread per plugin owns the child. A child
//! that dies (a crash, an exit, a kill) fails the call in flight, naming
//! how it died, and is started again after a pause that doubles from
//! 100 ms to 5 s while it keeps dying; its last accepted settings and each
//! block's last publication are handed to the new child, so it serves
//! what the old one did. Calls made while it is down fail at once instead
//! of waiting. A call that overruns its bound kills the child (which is
//! started again the same way) instead of wedging the plugin. A child
//! whose parent is gone sees its channel close and exits, even in the
//! middle of a call.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use voodu_plugin_abi::ffi::{
    VooduHostApi, VooduStatus, VOODU_MAX_REPLY_BYTES, VOODU_STATUS_ERROR, VOODU_STATUS_OK,
};

use crate::error::LoadError;
use crate::handle::{PluginCall, PluginHandle, PluginInfo};
use crate::host_api::{leak_host_api, Forwarded};
use crate::listeners::keeper::{self, KeeperClient};
use crate::listeners::ListenerTable;
use crate::loader::{load_bound, BeforeInit, LoadOptions};
use crate::worker::{Done, Instance, Job, MemberSet, RawReply, ReplyBody};

/// The environment variable that makes the host's binary a plugin's
/// child: the plugin file's path.
pub const CHILD_ENV: &str = "VOODU_PLUGIN_CHILD";

/// The descriptor the child finds the calls channel at.
const CALLS_FD: RawFd = 3;
/// The descriptor the child finds the listeners channel at.
const LISTENERS_FD: RawFd = 4;

/// The largest frame either side accepts: a reply at the ABI's limit and
/// room for its header.
const MAX_FRAME_BYTES: usize = VOODU_MAX_REPLY_BYTES + 64 * 1024;

/// The first pause before a dead child is started again; it doubles while
/// the child keeps dying, up to [`LONGEST_RESTART_PAUSE`].
const FIRST_RESTART_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause before a dead child is started again.
const LONGEST_RESTART_PAUSE: Duration = Duration::from_secs(5);
/// A child that lived this long before it died starts the pauses over.
const STEADY_LIFE: Duration = Duration::from_secs(60);

/// How long each side polls for the next frame or job before it sleeps:
/// calls come in bursts (a reconcile publishes to every block), and waking
/// a sleeping thread costs tens of microseconds, more than a call. Each
/// poll gives the core away, so spinning never starves the side at work.
pub(crate) const SPIN: Duration = Duration::from_micros(250);

/// Polls `stream` for something to read for up to [`SPIN`], yielding the
/// core between polls; the blocking read that follows then finds it there
/// instead of sleeping.
fn spin_until_readable(stream: &UnixStream) {
    let started = Instant::now();
    loop {
        let mut watched = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call; no wait.
        if unsafe { libc::poll(&mut watched, 1, 0) } != 0 || started.elapsed() >= SPIN {
            return;
        }
        std::thread::yield_now();
    }
}

/// The program started as a plugin's child, when not this process's own
/// binary ([`set_child_program`]).
static CHILD_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Starts `program` as every plugin's child from now on, instead of this
/// process's own binary: for a host whose binary does not call
/// [`serve_if_child`] (a test harness, say). False if one was already set.
pub fn set_child_program(program: PathBuf) -> bool {
    CHILD_PROGRAM.set(program).is_ok()
}

/// What the parent sends its child.
#[derive(Debug, Serialize, Deserialize)]
enum ToChild {
    /// After [`FromChild::Hello`]: make the instance (run `init`).
    Proceed,
    /// After [`FromChild::Hello`]: the host refused the plugin; exit.
    Refuse,
    /// Make one call; the payload is the request.
    Call {
        seq: u64,
        call: PluginCall,
        block: Option<String>,
    },
    /// Shut the instance down and exit.
    Shutdown,
}

/// What a child sends its parent.
#[derive(Debug, Serialize, Deserialize)]
enum FromChild {
    /// The library is open and its table checked.
    Hello {
        info: PluginInfo,
        present: MemberSet,
    },
    /// The library could not be loaded: the load error's words.
    LoadFailed { message: String },
    /// `init` returned; the payload is its reply.
    Initialised { status: VooduStatus },
    /// A call returned; the payload is its reply, unless it was over the
    /// limit (`too_large`, its size).
    Done {
        seq: u64,
        status: VooduStatus,
        too_large: Option<usize>,
    },
    /// A log line the plugin wrote; the payload is the line.
    Log { level: u32 },
    /// A metric the plugin reported.
    Metric { name: String, kind: u32, value: f64 },
}

/// Writes one frame: `header`, then `payload` as it is.
fn write_frame(
    stream: &mut impl Write,
    header: &impl Serialize,
    payload: &[u8],
) -> std::io::Result<()> {
    let header = postcard::to_stdvec(header).map_err(std::io::Error::other)?;
    let length = 4 + header.len() + payload.len();
    let mut frame = Vec::with_capacity(4 + length);
    frame.extend_from_slice(&(length as u32).to_le_bytes());
    frame.extend_from_slice(&(header.len() as u32).to_le_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(payload);
    stream.write_all(&frame)
}

/// Reads one frame: its header and its payload. `None` at the end of the
/// stream (the other side is gone).
fn read_frame<T: for<'de> Deserialize<'de>>(
    stream: &mut impl Read,
) -> std::io::Result<Option<(T, Vec<u8>)>> {
    let mut length = [0u8; 4];
    match stream.read_exact(&mut length) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let length = u32::from_le_bytes(length) as usize;
    if !(4..=MAX_FRAME_BYTES).contains(&length) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a {length}-byte frame"),
        ));
    }
    let mut frame = vec![0u8; length];
    stream.read_exact(&mut frame)?;
    let header_length = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
    let Some(header) = frame.get(4..4 + header_length) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a header longer than its frame",
        ));
    };
    let header = postcard::from_bytes(header)
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))?;
    let payload = frame.split_off(4 + header_length);
    Ok(Some((header, payload)))
}

/// How a child process ended, in words: `exited with 3`, `killed by
/// SIGSEGV`.
fn how_it_ended(status: Option<ExitStatus>) -> String {
    let Some(status) = status else {
        return "its end is unknown".into();
    };
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with {code}"),
        (None, Some(signal)) => {
            let name = nix::sys::signal::Signal::try_from(signal)
                .map(|signal| signal.as_str().to_owned())
                .unwrap_or_else(|_| format!("signal {signal}"));
            format!("killed by {name}")
        }
        (None, None) => status.to_string(),
    }
}

/// A child process and the parent's ends of its channels.
struct Running {
    child: Child,
    calls: UnixStream,
    started: Instant,
}

impl Running {
    /// Kills the child, if it still runs, and reaps it.
    fn kill(mut self) -> Option<ExitStatus> {
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

/// Starts the child for `path` and serves its listeners channel from this
/// process's [`ListenerTable`] on a thread of its own.
fn spawn_child(path: &Path) -> std::io::Result<Running> {
    let (calls, child_calls) = UnixStream::pair()?;
    let (listeners, child_listeners) = keeper::channel_pair()?;
    // This process's own binary through /proc: it still starts when the
    // file was replaced on disk since (an upgrade in progress).
    let program = CHILD_PROGRAM
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
    let (calls_fd, listeners_fd) = (child_calls.as_raw_fd(), child_listeners.as_raw_fd());
    let mut command = Command::new(program);
    command
        .env(CHILD_ENV, path)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: only fcntl, dup2 and setpgid run between fork and exec. dup2
    // clears close-on-exec on the copy, so the child keeps exactly these
    // two. A process group of its own: a Ctrl-C at the controller's
    // terminal stops the controller, which shuts the child down in turn,
    // instead of killing the child first.
    unsafe {
        command.pre_exec(move || {
            // Copied above the targets first (close-on-exec), so that one
            // end already at 3 or 4 is not overwritten by the other.
            let lifted =
                [calls_fd, listeners_fd].map(|fd| libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10));
            for (from, to) in lifted.into_iter().zip([CALLS_FD, LISTENERS_FD]) {
                if from < 0 || libc::dup2(from, to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::setpgid(0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    drop((child_calls, child_listeners));
    std::thread::Builder::new()
        .name("voodu-plugin-listeners".into())
        .spawn(move || keeper::serve(ListenerTable::process(), listeners))?;
    Ok(Running {
        child,
        calls,
        started: Instant::now(),
    })
}

/// Starts the child for `path` and takes it through the load: it opens the
/// library and names the plugin, `before_init` decides, and it runs
/// `init`. Every step within `bound`.
fn start_child(
    path: &Path,
    bound: Duration,
    before_init: &BeforeInit,
) -> Result<(Running, PluginInfo, MemberSet), LoadError> {
    let failed = |reason: String| LoadError::ChildFailed {
        path: path.to_owned(),
        reason,
    };
    let mut running = spawn_child(path).map_err(|error| failed(format!("not started: {error}")))?;
    let deadline = Instant::now() + bound;
    let outcome = handshake(path, &mut running, deadline, before_init);
    match outcome {
        Ok((info, present)) => {
            let _ = running.calls.set_read_timeout(None);
            Ok((running, info, present))
        }
        Err(error) => {
            let ended = running.kill();
            Err(match error {
                Handshake::Load(error) => error,
                Handshake::Io(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    LoadError::LoadTimedOut {
                        path: path.to_owned(),
                        timeout: bound,
                    }
                }
                Handshake::Io(error) => failed(format!("{error} ({})", how_it_ended(ended))),
                Handshake::Gone => failed(format!(
                    "its process {} before it loaded the plugin",
                    how_it_ended(ended)
                )),
            })
        }
    }
}

/// Why a handshake with a child failed.
enum Handshake {
    Load(LoadError),
    Io(std::io::Error),
    Gone,
}

impl From<std::io::Error> for Handshake {
    fn from(error: std::io::Error) -> Self {
        Handshake::Io(error)
    }
}

/// The load's conversation with a new child.
fn handshake(
    path: &Path,
    running: &mut Running,
    deadline: Instant,
    before_init: &BeforeInit,
) -> Result<(PluginInfo, MemberSet), Handshake> {
    let next = |running: &mut Running| -> Result<(FromChild, Vec<u8>), Handshake> {
        let left = deadline.saturating_duration_since(Instant::now());
        running
            .calls
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        read_frame::<FromChild>(&mut running.calls)?.ok_or(Handshake::Gone)
    };
    let (mut info, present) = match next(running)? {
        (FromChild::Hello { info, present }, _) => (info, present),
        (FromChild::LoadFailed { message }, _) => {
            return Err(Handshake::Load(LoadError::RefusedInChild {
                path: path.to_owned(),
                message,
            }))
        }
        (other, _) => return Err(unexpected(&other)),
    };
    info.path = path.to_owned();
    info.out_of_process = true;
    if let Err(reason) = before_init(&info) {
        let _ = write_frame(&mut running.calls, &ToChild::Refuse, &[]);
        return Err(Handshake::Load(LoadError::RefusedBeforeInit { reason }));
    }
    write_frame(&mut running.calls, &ToChild::Proceed, &[])?;
    match next(running)? {
        (FromChild::Initialised { status }, body) => {
            let started =
                crate::replies::status_body(&info.name, PluginCall::Init, status, body).map(drop);
            crate::loader::init_outcome(path, &info.name, started).map_err(Handshake::Load)?;
            Ok((info, present))
        }
        (other, _) => Err(unexpected(&other)),
    }
}

fn unexpected(message: &FromChild) -> Handshake {
    Handshake::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("it sent {message:?} out of turn"),
    ))
}

/// Loads the plugin at `path` in a child process of its own and returns
/// its handle: the same handle, and the same errors, as an in-process
/// load.
pub(crate) fn load(
    path: &Path,
    options: &LoadOptions,
    before_init: &BeforeInit,
) -> Result<PluginHandle, LoadError> {
    let bound = load_bound(options);
    let (running, info, present) = start_child(path, bound, before_init)?;
    let (host_api, log_limiter) = leak_host_api(&info.name);
    let (jobs_tx, jobs_rx) = crossbeam_channel::bounded(1);
    // Room for a late reply and a death's failure besides the answer.
    let (done_tx, done_rx) = crossbeam_channel::bounded(4);
    let state = Arc::new(ChildState {
        path: Mutex::new(path.to_owned()),
        pid: AtomicU32::new(running.child.id()),
        restarts: AtomicU32::new(0),
        shutdown_grace_ms: AtomicU64::new(0),
    });
    let relay = Relay {
        state: state.clone(),
        plugin: info.name.clone(),
        bound,
        host_api,
        jobs: jobs_rx,
        done: done_tx,
        shared: Arc::new(Mutex::new(Shared::default())),
        deaths_in_a_row: 0,
    };
    let pid = running.child.id();
    let thread = std::thread::Builder::new()
        .name(format!("voodu-plugin-{}", info.name))
        .spawn(move || relay.run(running))
        .map_err(|error| LoadError::ChildFailed {
            path: path.to_owned(),
            reason: format!("could not start its relay thread: {error}"),
        })?;
    tracing::info!(plugin = %info.name, kind = %info.kind, path = %path.display(), pid, "plugin loaded out of process");
    Ok(PluginHandle::new(
        info,
        present,
        options.call_timeout,
        jobs_tx,
        done_rx,
        thread,
        log_limiter,
    )
    .in_child(state))
}

/// The name the plugin in `path` gives itself, read in a child process
/// that is refused before its `init` runs; `None` when it does not load.
pub(crate) fn name_of(path: &Path, options: &LoadOptions) -> Option<String> {
    let seen = Arc::new(Mutex::new(None));
    let keep = seen.clone();
    let only_the_name: BeforeInit = Arc::new(move |info: &PluginInfo| {
        *keep.lock() = Some(info.name.clone());
        Err("only its name was asked".into())
    });
    let _ = start_child(path, load_bound(options), &only_the_name);
    let name = seen.lock().take();
    name
}

/// What the handle and the relay share of a child process.
#[derive(Debug)]
pub(crate) struct ChildState {
    /// The plugin's file, which a new child loads; the registry moves it
    /// into place after the load.
    path: Mutex<PathBuf>,
    /// The running child's process id, 0 while none runs.
    pid: AtomicU32,
    /// How many times the child was started again.
    restarts: AtomicU32,
    /// How long its shutdown may take, when the handle gave it longer
    /// than the load bound (a stopping controller's grace), in ms.
    shutdown_grace_ms: AtomicU64,
}

impl ChildState {
    /// The running child's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::SeqCst)).filter(|pid| *pid != 0)
    }

    /// How many times the child was started again.
    pub(crate) fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::SeqCst)
    }

    /// Kills the running child (its call overran): the relay sees it end,
    /// and starts another.
    pub(crate) fn kill_running(&self) {
        if let Some(pid) = self.pid().and_then(|pid| i32::try_from(pid).ok()) {
            // SAFETY: our own child: its pid is cleared before it is
            // reaped, so it is never another process's.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Lets the child's shutdown take up to `grace` (a stopping
    /// controller's, so open connections may finish).
    pub(crate) fn grant_shutdown(&self, grace: Duration) {
        let grace = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        self.shutdown_grace_ms.store(grace, Ordering::SeqCst);
    }

    /// The plugin's file is now at `path`.
    pub(crate) fn moved_to(&self, path: PathBuf) {
        *self.path.lock() = path;
    }
}

/// What the relay and the reader share: the call the child is answering
/// (the relay sends it, the reader gets its reply) and what a new child is
/// handed so that it serves what the old one did.
#[derive(Default)]
struct Shared {
    in_flight: Option<InFlight>,
    /// The last settings a child accepted.
    settings: Option<Vec<u8>>,
    /// Each block's last publication.
    publications: HashMap<Arc<str>, Vec<u8>>,
}

struct InFlight {
    seq: u64,
    call: PluginCall,
    /// The block the call is about.
    block: Option<Arc<str>>,
    /// The request of a `configure`, kept once the child accepts it.
    settings: Option<Vec<u8>>,
}

/// The parent's side of one out-of-process plugin: forwards jobs to the
/// child, and starts it again when it dies.
struct Relay {
    state: Arc<ChildState>,
    plugin: String,
    bound: Duration,
    host_api: &'static VooduHostApi,
    jobs: Receiver<Job>,
    done: Sender<Done>,
    shared: Arc<Mutex<Shared>>,
    /// How many times it died without living [`STEADY_LIFE`] in between.
    deaths_in_a_row: u32,
}

/// What the relay waits for.
enum Event {
    Job(Job),
    /// The handle is gone.
    Closed,
    /// The child's channel ended.
    ChildGone,
}

impl Relay {
    /// Runs until the handle shuts the plugin down or is dropped.
    fn run(mut self, first: Running) {
        let mut attached = self.attach(first);
        loop {
            let event = match crate::worker::spin_recv_yielding(&self.jobs, SPIN) {
                Ok(Some(job)) => Event::Job(job),
                Err(()) => Event::Closed,
                Ok(None) => select! {
                    recv(self.jobs) -> job => job.map_or(Event::Closed, Event::Job),
                    recv(attached.1) -> _ => Event::ChildGone,
                },
            };
            let died = match event {
                Event::ChildGone => true,
                Event::Job(Job::Call {
                    seq,
                    call,
                    request,
                    block,
                }) => {
                    self.note_sent(seq, call, &request, block.as_ref());
                    let header = ToChild::Call {
                        seq,
                        call,
                        block: block.as_deref().map(str::to_owned),
                    };
                    let written = write_frame(&mut attached.0.calls, &header, &request);
                    // A failed write means the child is gone: wait for the
                    // reader to see the end too.
                    written.is_err() && {
                        let _ = attached.1.recv_timeout(self.bound);
                        true
                    }
                }
                Event::Job(Job::Init { seq }) => {
                    let _ = self.done.send(failure(seq, "init runs once, at load"));
                    false
                }
                Event::Job(Job::Shutdown) | Event::Closed => {
                    self.shut_down(attached.0);
                    return;
                }
            };
            if died {
                let lived = attached.0.started.elapsed();
                self.state.pid.store(0, Ordering::SeqCst);
                let ended = attached.0.kill();
                self.child_ended(ended, lived);
                match self.restart() {
                    Some(running) => attached = self.attach(running),
                    None => return,
                }
            }
        }
    }

    /// Remembers what a new child must be handed: a block's last
    /// publication (dropped when the block is forgotten), and the call in
    /// flight.
    fn note_sent(&self, seq: u64, call: PluginCall, request: &[u8], block: Option<&Arc<str>>) {
        let mut shared = self.shared.lock();
        match (call, block) {
            (PluginCall::Publish, Some(block)) => {
                shared.publications.insert(block.clone(), request.to_vec());
            }
            (PluginCall::Forget, Some(block)) => {
                shared.publications.remove(block);
            }
            _ => {}
        }
        shared.in_flight = Some(InFlight {
            seq,
            call,
            block: block.cloned(),
            settings: (call == PluginCall::Configure).then(|| request.to_vec()),
        });
    }

    /// Starts the reader of a new child's replies; the receiver is told
    /// when the child's channel ends.
    fn attach(&self, running: Running) -> (Running, Receiver<()>) {
        let (gone_tx, gone_rx) = crossbeam_channel::bounded(1);
        let reader = Reader {
            plugin: self.plugin.clone(),
            host_api: self.host_api,
            done: self.done.clone(),
            shared: self.shared.clone(),
        };
        match running.calls.try_clone() {
            Ok(stream) => {
                let spawned = std::thread::Builder::new()
                    .name(format!("voodu-plugin-{}-replies", self.plugin))
                    .spawn(move || {
                        reader.run(stream);
                        let _ = gone_tx.send(());
                    });
                if let Err(error) = spawned {
                    tracing::error!(plugin = %self.plugin, %error, "no thread to read the plugin's replies");
                }
            }
            Err(error) => {
                tracing::error!(plugin = %self.plugin, %error, "the plugin's channel could not be shared");
                let _ = gone_tx.send(());
            }
        }
        (running, gone_rx)
    }

    /// A child ended on its own: fails the call in flight, naming how.
    fn child_ended(&mut self, ended: Option<ExitStatus>, lived: Duration) {
        if lived >= STEADY_LIFE {
            self.deaths_in_a_row = 0;
        }
        let how = how_it_ended(ended);
        let in_flight = {
            let mut shared = self.shared.lock();
            let in_flight = shared.in_flight.take();
            // A publication the child died of is not handed to the next.
            if let Some(InFlight {
                call: PluginCall::Publish,
                block: Some(block),
                ..
            }) = &in_flight
            {
                shared.publications.remove(block);
            }
            in_flight
        };
        tracing::error!(plugin = %self.plugin, call = ?in_flight.as_ref().map(|flight| flight.call), "the plugin's process {how}; starting it again");
        if let Some(flight) = in_flight {
            let message = format!("its process {how} during the call; it is started again");
            let _ = self.done.send(failure(flight.seq, &message));
        }
    }

    /// Starts a new child after the pause its deaths call for, handing it
    /// the settings and publications the old one had. Calls made in the
    /// meantime fail at once. `None` when the handle shut the plugin down
    /// meanwhile.
    fn restart(&mut self) -> Option<Running> {
        loop {
            let pause = FIRST_RESTART_PAUSE
                .saturating_mul(1 << self.deaths_in_a_row.min(6))
                .min(LONGEST_RESTART_PAUSE);
            self.deaths_in_a_row += 1;
            let resume_at = Instant::now() + pause;
            loop {
                match self.jobs.recv_deadline(resume_at) {
                    Ok(Job::Call { seq, .. } | Job::Init { seq }) => {
                        let _ = self.done.send(failure(
                            seq,
                            "its process died and is being started again; the call was not made",
                        ));
                    }
                    Ok(Job::Shutdown) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                        return None
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => break,
                }
            }
            let no_check: BeforeInit = Arc::new(|_| Ok(()));
            let path = self.state.path.lock().clone();
            match start_child(&path, self.bound, &no_check) {
                Ok((mut running, _, _)) => {
                    if let Err(error) = self.hand_over(&mut running) {
                        // What it was handed may be what kills it: the
                        // next child starts from nothing.
                        let ended = running.kill();
                        self.shared.lock().publications.clear();
                        tracing::error!(plugin = %self.plugin, %error, ended = %how_it_ended(ended), "the restarted plugin did not take back its settings and publications; it is started again without its publications");
                        continue;
                    }
                    let restarts = self.state.restarts.fetch_add(1, Ordering::SeqCst) + 1;
                    self.state.pid.store(running.child.id(), Ordering::SeqCst);
                    tracing::info!(plugin = %self.plugin, pid = running.child.id(), restarts, "the plugin's process was started again");
                    return Some(running);
                }
                Err(error) => {
                    tracing::error!(plugin = %self.plugin, %error, "the plugin's process could not be started again");
                }
            }
        }
    }

    /// Hands a new child the settings and publications the old one had,
    /// before any other call; their replies are read here.
    fn hand_over(&self, running: &mut Running) -> std::io::Result<()> {
        let (settings, publications) = {
            let shared = self.shared.lock();
            (shared.settings.clone(), shared.publications.clone())
        };
        let calls = settings
            .map(|settings| (PluginCall::Configure, None, settings))
            .into_iter()
            .chain(
                publications
                    .into_iter()
                    .map(|(block, request)| (PluginCall::Publish, Some(block), request)),
            );
        running.calls.set_read_timeout(Some(self.bound))?;
        for (call, block, request) in calls {
            let header = ToChild::Call {
                seq: 0,
                call,
                block: block.as_deref().map(str::to_owned),
            };
            write_frame(&mut running.calls, &header, &request)?;
            loop {
                match read_frame::<FromChild>(&mut running.calls)? {
                    Some((FromChild::Done { status, .. }, body)) => {
                        if status != VOODU_STATUS_OK {
                            tracing::warn!(plugin = %self.plugin, %call, reply = %String::from_utf8_lossy(&body), "the restarted plugin refused what its last process had");
                        }
                        break;
                    }
                    Some((other, payload)) => forward(self.host_api, other, &payload),
                    None => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "the restarted process ended",
                        ))
                    }
                }
            }
        }
        running.calls.set_read_timeout(None)
    }

    /// Tells the child to shut its instance down and waits for it to
    /// exit, up to the load bound or the grace the handle gave, whichever
    /// is longer, then kills it.
    fn shut_down(&self, mut running: Running) {
        self.state.pid.store(0, Ordering::SeqCst);
        let _ = write_frame(&mut running.calls, &ToChild::Shutdown, &[]);
        let granted = Duration::from_millis(self.state.shutdown_grace_ms.load(Ordering::SeqCst));
        let deadline = Instant::now() + self.bound.max(granted);
        loop {
            match running.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => {
                    tracing::warn!(plugin = %self.plugin, "the plugin's process did not exit after shutdown; killed");
                    running.kill();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
}

/// A failed call's reply, as a plugin's own error would read.
fn failure(seq: u64, message: &str) -> Done {
    let body = serde_json::to_vec(&serde_json::json!({ "message": message })).unwrap_or_default();
    Done {
        seq,
        reply: RawReply {
            status: VOODU_STATUS_ERROR,
            body: ReplyBody::Bytes(body),
        },
    }
}

/// Reads a child's frames: replies to the handle, log lines and metrics
/// to the host's services.
struct Reader {
    plugin: String,
    host_api: &'static VooduHostApi,
    done: Sender<Done>,
    shared: Arc<Mutex<Shared>>,
}

impl Reader {
    fn run(self, mut stream: UnixStream) {
        loop {
            spin_until_readable(&stream);
            let frame = match read_frame::<FromChild>(&mut stream) {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(error) => {
                    tracing::error!(plugin = %self.plugin, %error, "the plugin's process sent what is not a frame; it is stopped");
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    return;
                }
            };
            match frame {
                (
                    FromChild::Done {
                        seq,
                        status,
                        too_large,
                    },
                    body,
                ) => {
                    {
                        let mut shared = self.shared.lock();
                        if let Some(flight) = shared.in_flight.take_if(|flight| flight.seq == seq) {
                            if status == VOODU_STATUS_OK && flight.settings.is_some() {
                                shared.settings = flight.settings;
                            }
                        }
                    }
                    let body = match too_large {
                        Some(size) => ReplyBody::TooLarge(size),
                        None => ReplyBody::Bytes(body),
                    };
                    let _ = self.done.send(Done {
                        seq,
                        reply: RawReply { status, body },
                    });
                }
                (other, payload) => forward(self.host_api, other, &payload),
            }
        }
    }
}

/// Passes a child's log line or metric to the host service an in-process
/// plugin reaches, through the plugin's own host table (its log limit,
/// its metric names).
fn forward(host_api: &'static VooduHostApi, message: FromChild, payload: &[u8]) {
    match message {
        FromChild::Log { level } => {
            if let Some(log) = host_api.log {
                // SAFETY: the host's own callback, with its own context and
                // a line that outlives the call.
                unsafe { log(host_api.host_ctx, level, payload.as_ptr(), payload.len()) };
            }
        }
        FromChild::Metric { name, kind, value } => {
            if let Some(metric) = host_api.metric {
                // SAFETY: as above.
                unsafe { metric(host_api.host_ctx, name.as_ptr(), name.len(), kind, value) };
            }
        }
        other => tracing::warn!(?other, "an out-of-turn message from a plugin's process"),
    }
}

/// Serves as a plugin's child when this process was started as one
/// ([`CHILD_ENV`] set): loads the plugin and answers its parent's calls
/// until the parent shuts it down or goes away, then returns the exit
/// code. `None` when this process is no plugin's child. A host binary
/// calls this first thing in `main`.
pub fn serve_if_child() -> Option<i32> {
    let path = PathBuf::from(std::env::var_os(CHILD_ENV)?);
    // The plugin's own processes are not children of the host.
    std::env::remove_var(CHILD_ENV);
    Some(child::serve(&path))
}

mod child {
    //! The child's side: one thread makes every call, in order; the
    //! plugin's own threads may log and report metrics at any time.

    use super::*;

    /// The channel to the parent, written by the call thread and by the
    /// plugin's threads through the host table.
    static TO_PARENT: OnceLock<Mutex<UnixStream>> = OnceLock::new();

    fn send(header: &FromChild, payload: &[u8]) -> std::io::Result<()> {
        match TO_PARENT.get() {
            Some(stream) => write_frame(&mut *stream.lock(), header, payload),
            None => Err(std::io::Error::other("no channel to the parent")),
        }
    }

    /// A log line or metric from the plugin, sent to the parent.
    fn forward_to_parent(forwarded: Forwarded<'_>) {
        let _ = match forwarded {
            Forwarded::Log { level, line } => send(&FromChild::Log { level }, line),
            Forwarded::Metric { name, kind, value } => send(
                &FromChild::Metric {
                    name: name.to_owned(),
                    kind,
                    value,
                },
                &[],
            ),
        };
    }

    pub(super) fn serve(path: &Path) -> i32 {
        // SAFETY: the parent put the channels at these descriptors, and
        // nothing else in this process owns them.
        let (calls, listeners) = unsafe {
            (
                UnixStream::from_raw_fd(CALLS_FD),
                OwnedFd::from_raw_fd(LISTENERS_FD),
            )
        };
        let mut reader = calls;
        let Ok(writer) = reader.try_clone() else {
            return 2;
        };
        let _ = TO_PARENT.set(Mutex::new(writer));
        watch_for_the_parents_end();
        crate::host_api::forward_to(forward_to_parent);
        match KeeperClient::new(listeners) {
            Ok(keeper) => {
                ListenerTable::process().hold_through(keeper);
            }
            Err(error) => {
                let _ = send(
                    &FromChild::LoadFailed {
                        message: format!("{}: no listeners channel: {error}", path.display()),
                    },
                    &[],
                );
                return 2;
            }
        }
        let checked = crate::loader::open_table(path)
            .and_then(|(kind, vtable)| crate::loader::checked_table(path, kind, vtable));
        let (info, members) = match checked {
            Ok(checked) => checked,
            Err(error) => {
                let _ = send(
                    &FromChild::LoadFailed {
                        message: error.to_string(),
                    },
                    &[],
                );
                return 1;
            }
        };
        let name = info.name.clone();
        if send(
            &FromChild::Hello {
                info,
                present: members.present(),
            },
            &[],
        )
        .is_err()
        {
            return 2;
        }
        match read_frame::<ToChild>(&mut reader) {
            Ok(Some((ToChild::Proceed, _))) => {}
            _ => return 1,
        }
        let (host_api, _) = leak_host_api(&name);
        let mut instance = Instance::new(members, host_api);
        let reply = instance.init();
        let initialised = reply.status == VOODU_STATUS_OK;
        if send_reply(None, reply).is_err() || !initialised {
            return 1;
        }
        loop {
            spin_until_readable(&reader);
            match read_frame::<ToChild>(&mut reader) {
                Ok(Some((ToChild::Call { seq, call, block }, request))) => {
                    let block: Option<Arc<str>> = block.map(Arc::from);
                    let reply = instance.call(call, &request, block.clone());
                    if let (PluginCall::Forget, Some(block)) = (call, block) {
                        ListenerTable::process().release_block(&name, &block);
                    }
                    if send_reply(Some(seq), reply).is_err() {
                        return 0;
                    }
                }
                Ok(Some((ToChild::Shutdown, _))) => {
                    instance.shutdown();
                    return 0;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return 0,
            }
        }
    }

    /// Ends this process when the parent's end of the calls channel
    /// closes (the parent exited, or was killed), even while a call that
    /// never returns holds the call thread: a hung plugin's child never
    /// outlives its host.
    fn watch_for_the_parents_end() {
        let watcher = std::thread::Builder::new()
            .name("voodu-parent-watch".into())
            .spawn(|| loop {
                let mut watched = libc::pollfd {
                    fd: CALLS_FD,
                    events: libc::POLLRDHUP,
                    revents: 0,
                };
                // SAFETY: one pollfd, valid for the call.
                let ready = unsafe { libc::poll(&mut watched, 1, -1) };
                let ended = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
                if ready > 0 && watched.revents & ended != 0 {
                    // SAFETY: ends the process without running anything
                    // else; the plugin's state is the parent's to rebuild.
                    unsafe { libc::_exit(0) };
                }
            });
        if let Err(error) = watcher {
            tracing::warn!(%error, "no thread to watch for the parent's end");
        }
    }

    /// Sends a reply: `init`'s when `seq` is `None`.
    fn send_reply(seq: Option<u64>, reply: RawReply) -> std::io::Result<()> {
        let (too_large, body) = match reply.body {
            ReplyBody::Bytes(body) => (None, body),
            ReplyBody::TooLarge(size) => (Some(size), Vec::new()),
        };
        let header = match seq {
            None => FromChild::Initialised {
                status: reply.status,
            },
            Some(seq) => FromChild::Done {
                seq,
                status: reply.status,
                too_large,
            },
        };
        send(&header, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_carries_its_header_and_payload_whole_and_a_short_stream_ends() {
        let mut bytes = Vec::new();
        let header = ToChild::Call {
            seq: 7,
            call: PluginCall::Publish,
            block: Some("deployment/prod/esl traffik \"http\" block".into()),
        };
        write_frame(&mut bytes, &header, b"{\"generation\":3}").unwrap();
        write_frame(&mut bytes, &ToChild::Shutdown, &[]).unwrap();
        let mut stream = bytes.as_slice();
        let (first, payload) = read_frame::<ToChild>(&mut stream).unwrap().unwrap();
        assert!(matches!(
            first,
            ToChild::Call { seq: 7, call: PluginCall::Publish, block: Some(ref block) } if block.starts_with("deployment/prod/esl")
        ));
        assert_eq!(payload, b"{\"generation\":3}");
        let (second, payload) = read_frame::<ToChild>(&mut stream).unwrap().unwrap();
        assert!(matches!(second, ToChild::Shutdown));
        assert!(payload.is_empty());
        assert!(read_frame::<ToChild>(&mut stream).unwrap().is_none());
    }

    #[test]
    fn a_frame_over_the_limit_or_with_a_header_past_its_end_is_refused() {
        let too_long = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes();
        let error = read_frame::<ToChild>(&mut too_long.as_slice()).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        let mut lying = Vec::new();
        lying.extend_from_slice(&8u32.to_le_bytes());
        lying.extend_from_slice(&100u32.to_le_bytes());
        lying.extend_from_slice(&[0; 4]);
        let error = read_frame::<ToChild>(&mut lying.as_slice()).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn how_a_child_ended_is_said_in_words() {
        assert_eq!(
            how_it_ended(Some(ExitStatus::from_raw(3 << 8))),
            "exited with 3"
        );
        assert_eq!(
            how_it_ended(Some(ExitStatus::from_raw(11))),
            "killed by SIGSEGV"
        );
        assert_eq!(how_it_ended(None), "its end is unknown");
    }
}
