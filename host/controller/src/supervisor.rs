//! `vd controller`'s supervisor: a small process that holds the root's
//! lock and the API socket, and runs the controller itself as a worker
//! process it starts again whenever it dies.
//!
//! The supervisor loads no plugin and opens no store. It binds
//! `controller.sock` once and hands the listening socket to every worker it
//! starts (inherited as descriptor 3, with the write end of a ready pipe as
//! descriptor 4, named to the worker by `--worker-fds 3,4`). So when a
//! worker dies (a plugin that segfaults or calls `exit()`, a SIGKILL, an
//! OOM kill) the socket stays open: a `vd` request sent meanwhile waits in
//! its backlog and is answered by the next worker, never refused. The
//! crashed plugin is quarantined by the next worker's start, as before.
//!
//! - The socket file appears only once the first worker is ready (it is
//!   bound under a temporary name and renamed then), so "the socket
//!   accepts" still means "the controller serves".
//! - A worker that dies after it served is started again at once (its
//!   crashed plugin is quarantined by then). One that dies before it
//!   serves waits first, from the second such death in a row, doubling
//!   from [`FIRST_BACKOFF`] up to [`MAX_BACKOFF`]. The supervisor never
//!   exits because a worker died.
//! - The first worker failing before it is ready (a corrupt store, a bad
//!   flag) ends the supervisor with the worker's exit code: the worker has
//!   said why on the shared stderr.
//! - SIGTERM or SIGINT is passed to the worker, which stops as it always
//!   did; the supervisor then removes the socket and exits with the
//!   worker's code.
//! - The worker gets SIGKILL when the supervisor dies (`PR_SET_PDEATHSIG`),
//!   so a supervisor killed outright leaves no worker behind.

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use voodu_api::SOCKET_FILE;

use crate::ControllerError;

/// The wait before starting a worker again after a second quick death.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two starts of a worker that keeps dying.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often the supervisor looks at its worker and its signals.
const TICK: Duration = Duration::from_millis(10);

/// The descriptor a worker finds the API socket on.
pub const WORKER_API_FD: i32 = 3;
/// The descriptor a worker writes its ready byte to.
pub const WORKER_READY_FD: i32 = 4;

/// Set by SIGTERM or SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_signal: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// How to start a worker: the program (this `vd`) and its arguments,
/// without `--worker-fds`, which the supervisor adds.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments (`--root R controller ...`).
    pub args: Vec<OsString>,
}

/// Why the supervisor ended.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Root, lock or socket trouble, as the controller would say it.
    #[error(transparent)]
    Controller(#[from] ControllerError),
    /// The first worker ended before it was ready; it said why.
    #[error("the controller did not start ({0}) — see the lines above for why")]
    FirstStartFailed(String),
    /// A worker could not be started at all.
    #[error("could not start the controller's worker {program}: {source}")]
    Spawn {
        /// The program.
        program: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Runs the supervisor until SIGTERM or SIGINT: takes the root's lock,
/// binds the API socket, and keeps a worker running on it; `ready` is
/// called once, when the first worker serves. Returns the last worker's
/// exit status.
pub fn supervise(
    root: &Path,
    worker: &WorkerCommand,
    ready: Box<dyn FnOnce() + Send>,
) -> Result<ExitStatus, SupervisorError> {
    let root_error = |source| ControllerError::Root {
        path: root.to_owned(),
        source,
    };
    crate::create_private_dir(root)?;
    let lock = File::create(root.join("controller.lock")).map_err(root_error)?;
    if lock.try_lock().is_err() {
        return Err(ControllerError::AlreadyRunning(root.to_owned()).into());
    }
    let socket = root.join(SOCKET_FILE);
    let (listener, staging) = crate::server::bind_owner_only(&socket)?;
    install_stop_handlers();
    let mut ready = Some(ready);
    let mut quick_deaths = 0u32;
    let mut generation = 0u64;
    let outcome = loop {
        generation += 1;
        let started = Instant::now();
        let (mut child, ready_pipe) = spawn_worker(worker, &listener)?;
        let (status, was_ready) = watch(&mut child, ready_pipe, || {
            if let Some(ready) = ready.take() {
                if std::fs::rename(&staging, &socket).is_err() {
                    tracing::error!(socket = %socket.display(), "the API socket could not be put in place");
                }
                ready();
            }
        });
        if STOP.load(Ordering::SeqCst) {
            break Ok(status);
        }
        if ready.is_some() {
            // The first worker never served: it has said why.
            break Err(SupervisorError::FirstStartFailed(describe(&status)));
        }
        let ran = started.elapsed();
        // A worker that served is started again at once; one that died
        // before it served (a store it cannot open, say) waits, doubling
        // with each such death in a row.
        quick_deaths = if was_ready { 0 } else { quick_deaths + 1 };
        let backoff = match quick_deaths {
            0 | 1 => Duration::ZERO,
            deaths => (FIRST_BACKOFF * 2u32.saturating_pow(deaths - 2)).min(MAX_BACKOFF),
        };
        tracing::error!(
            pid = child.id(),
            generation,
            "the controller's worker {} after {}; the API socket stays open and a new worker starts{}",
            describe(&status),
            humantime::format_duration(Duration::from_millis(ran.as_millis() as u64)),
            if backoff.is_zero() {
                " now".to_owned()
            } else {
                format!(" in {}", humantime::format_duration(backoff))
            }
        );
        let until = Instant::now() + backoff;
        while Instant::now() < until && !STOP.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
        }
        if STOP.load(Ordering::SeqCst) {
            break Ok(status);
        }
    };
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&staging);
    drop(lock);
    outcome
}

/// How a worker ended, in words.
fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (_, Some(signal)) => format!("was killed by signal {signal}"),
        _ => "ended".into(),
    }
}

fn install_stop_handlers() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a handler that only stores to an atomic.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Starts a worker with the API socket and a ready pipe inherited; the
/// read end of the pipe.
fn spawn_worker(
    worker: &WorkerCommand,
    listener: &std::os::unix::net::UnixListener,
) -> Result<(Child, File), SupervisorError> {
    let spawn_error = |source| SupervisorError::Spawn {
        program: worker.program.clone(),
        source,
    };
    let mut ends = [0; 2];
    // SAFETY: a two-element buffer for pipe2.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(spawn_error(std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 returned two new descriptors, now owned here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let api = listener.as_raw_fd();
    let ready = write_end.as_raw_fd();
    let supervisor = std::process::id() as libc::pid_t;
    let mut command = Command::new(&worker.program);
    command
        .args(&worker.args)
        .arg("--worker-fds")
        .arg(format!("{WORKER_API_FD},{WORKER_READY_FD}"));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            // dup2 leaves the copies without close-on-exec.
            if libc::dup2(api, WORKER_API_FD) < 0 || libc::dup2(ready, WORKER_READY_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The worker dies with the supervisor, never outlives it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != supervisor {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let child = command.spawn().map_err(spawn_error)?;
    drop(write_end);
    Ok((child, File::from(read_end)))
}

/// Waits for the worker to end, calling `on_ready` when it first says it
/// is ready, and passing SIGTERM on when the supervisor is asked
/// to stop. Returns its status and whether it was ready.
fn watch(child: &mut Child, ready_pipe: File, mut on_ready: impl FnMut()) -> (ExitStatus, bool) {
    let fd = ready_pipe.as_raw_fd();
    // SAFETY: our own descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut ready_pipe = ready_pipe;
    let mut was_ready = false;
    let mut told_to_stop = false;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return (status, was_ready);
        }
        if !was_ready {
            let mut byte = [0u8; 1];
            if matches!(ready_pipe.read(&mut byte), Ok(1)) {
                was_ready = true;
                on_ready();
            }
        }
        if STOP.load(Ordering::SeqCst) && !told_to_stop {
            told_to_stop = true;
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
        std::thread::sleep(TICK);
    }
}
