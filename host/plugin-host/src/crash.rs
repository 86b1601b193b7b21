//! Quarantine after a crash. A plugin that segfaults (or aborts, or hits an
//! illegal instruction) inside a call takes the whole controller with it:
//! nothing in-process survives that. What the host can do is make sure the
//! next start does not crash the same way, and say why.
//!
//! Every plugin thread registers a slot here: its thread id, the call in
//! progress, and an open descriptor of the plugin's directory. A handler
//! for `SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE` and `SIGABRT` looks up the
//! crashing thread; if it is a plugin thread inside a call, it writes
//! [`CRASH_MARKER`] (the call and the signal) into that plugin's directory
//! with `openat`/`write`/`close` only, which are async-signal-safe. Then it
//! puts back the handler that was there before (Rust's own stack-overflow
//! handler, or the default) and returns, so the process dies as it would
//! have. A controller killed by `SIGKILL` writes nothing: only a real crash
//! inside a plugin call quarantines the plugin.
//!
//! A plugin that calls `exit()` inside a call ends the process too; an
//! `atexit` hook writes the marker the same way (`publish exit`). `_exit()`
//! runs no hook and is not told apart from a kill.
//!
//! At the next start the registry finds the marker and does not load that
//! plugin ([`crashed_in`]); `vd plugins:list` names it with the call and
//! the signal. Replacing, reloading or removing the plugin clears it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Once, OnceLock};

use crate::handle::PluginCall;

/// The file, inside a plugin's directory, that records a crash in one of
/// its calls: `<call> <signal>`, for example `publish SIGSEGV`.
pub const CRASH_MARKER: &str = ".crashed";

const SLOTS: usize = 512;
const SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

struct Slot {
    /// `pthread_self` of the plugin thread, 0 when the slot is free.
    thread: AtomicUsize,
    /// The call in progress (`PluginCall` as 1 + its index), 0 for none.
    call: AtomicU8,
    /// An open descriptor of the plugin's directory, or -1.
    dir: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    thread: AtomicUsize::new(0),
    call: AtomicU8::new(0),
    dir: AtomicI32::new(-1),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
static INSTALL: Once = Once::new();
static PREVIOUS: OnceLock<[libc::sigaction; SIGNALS.len()]> = OnceLock::new();

const CALLS: [PluginCall; 8] = [
    PluginCall::Init,
    PluginCall::Validate,
    PluginCall::Publish,
    PluginCall::Drain,
    PluginCall::Forget,
    PluginCall::Describe,
    PluginCall::DescribeSettings,
    PluginCall::Configure,
];

fn call_code(call: PluginCall) -> u8 {
    CALLS
        .iter()
        .position(|known| *known == call)
        .map_or(0, |index| index as u8 + 1)
}

/// A plugin thread's registration; dropping it frees the slot.
#[derive(Debug)]
pub struct ThreadSlot(Option<usize>);

impl ThreadSlot {
    /// Marks `call` as in progress on this thread.
    pub fn enter(&self, call: PluginCall) {
        if let Some(index) = self.0 {
            TABLE[index].call.store(call_code(call), Ordering::SeqCst);
        }
    }

    /// Marks the call as finished.
    pub fn leave(&self) {
        if let Some(index) = self.0 {
            TABLE[index].call.store(0, Ordering::SeqCst);
        }
    }
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        if let Some(index) = self.0 {
            let slot = &TABLE[index];
            slot.call.store(0, Ordering::SeqCst);
            let dir = slot.dir.swap(-1, Ordering::SeqCst);
            if dir >= 0 {
                // SAFETY: the descriptor was opened by `register` and is ours.
                unsafe { libc::close(dir) };
            }
            slot.thread.store(0, Ordering::SeqCst);
        }
    }
}

/// Registers the calling thread as the thread of the plugin in `dir`, and
/// installs the crash handler the first time. Without a free slot or an
/// openable directory, the thread runs unguarded (a crash is then not
/// quarantined).
pub fn register(dir: &Path) -> ThreadSlot {
    INSTALL.call_once(install_handlers);
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return ThreadSlot(None);
    };
    // SAFETY: a valid C string; the flags open a directory for openat.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return ThreadSlot(None);
    }
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    for (index, slot) in TABLE.iter().enumerate() {
        if slot
            .thread
            .compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            slot.dir.store(fd, Ordering::SeqCst);
            return ThreadSlot(Some(index));
        }
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    ThreadSlot(None)
}

/// What the marker in `dir` says, when the controller crashed in one of
/// that plugin's calls: `publish SIGSEGV`.
pub fn crashed_in(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(CRASH_MARKER))
        .ok()
        .map(|text| text.trim().to_owned())
}

/// Removes the crash marker of the plugin in `dir`, if any.
pub fn clear(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(CRASH_MARKER));
}

fn install_handlers() {
    let mut previous: [libc::sigaction; SIGNALS.len()] =
        // SAFETY: sigaction is plain data; zeroed is a valid value.
        unsafe { std::mem::zeroed() };
    for (index, signal) in SIGNALS.iter().enumerate() {
        // SAFETY: reading the current action into our own storage.
        unsafe { libc::sigaction(*signal, std::ptr::null(), &mut previous[index]) };
    }
    if PREVIOUS.set(previous).is_err() {
        return;
    }
    // SAFETY: registering a handler that takes nothing and returns.
    unsafe { libc::atexit(on_exit_in_a_call) };
    for signal in SIGNALS {
        // SAFETY: a zeroed sigaction with our handler, SA_SIGINFO so the
        // handler gets the three-argument form, SA_ONSTACK so a stack
        // overflow still runs it on the alternate stack Rust sets up.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_crash
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

fn signal_name(signal: libc::c_int) -> &'static [u8] {
    match signal {
        libc::SIGSEGV => b"SIGSEGV",
        libc::SIGBUS => b"SIGBUS",
        libc::SIGILL => b"SIGILL",
        libc::SIGFPE => b"SIGFPE",
        libc::SIGABRT => b"SIGABRT",
        _ => b"a signal",
    }
}

/// If the calling thread is a plugin thread inside a call, writes the
/// plugin's [`CRASH_MARKER`] as `<call> <cause>` and returns the call.
/// Only async-signal-safe calls: `pthread_self`, `openat`, `write`,
/// `close`.
fn write_marker_for_this_thread(cause: &[u8]) -> Option<PluginCall> {
    // SAFETY: pthread_self is async-signal-safe.
    let me = unsafe { libc::pthread_self() } as usize;
    let slot = TABLE
        .iter()
        .find(|slot| slot.thread.load(Ordering::SeqCst) == me)?;
    let code = slot.call.load(Ordering::SeqCst);
    let dir = slot.dir.load(Ordering::SeqCst);
    if code == 0 || dir < 0 {
        return None;
    }
    let call = CALLS[usize::from(code - 1)];
    let text = call.as_str().as_bytes();
    let name = c".crashed";
    // SAFETY: openat/write/close on our own descriptor and buffers.
    unsafe {
        let fd = libc::openat(
            dir,
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o600,
        );
        if fd >= 0 {
            libc::write(fd, text.as_ptr().cast(), text.len());
            libc::write(fd, b" ".as_ptr().cast(), 1);
            libc::write(fd, cause.as_ptr().cast(), cause.len());
            libc::close(fd);
        }
    }
    Some(call)
}

/// The cause a marker records when a plugin called `exit()` in a call.
pub const EXIT_CAUSE: &str = "exit";

/// Runs at `exit()`: when a plugin calls it inside a call (a C author's
/// usual fatal-error path), the process ends all the same, but the plugin
/// is quarantined at the next start, as after a crash, and stderr names
/// the call and the plugin's directory. An `exit()` from any other thread
/// (the controller's own end) writes nothing.
extern "C" fn on_exit_in_a_call() {
    if let Some(call) = write_marker_for_this_thread(EXIT_CAUSE.as_bytes()) {
        eprintln!(
            "voodu: a plugin called exit() inside its {call}, which ends the controller; it is quarantined at the next start (its directory holds {CRASH_MARKER})",
            call = call.as_str()
        );
    }
}

/// The crash handler. Only async-signal-safe calls: `pthread_self`,
/// `openat`, `write`, `close`, `sigaction`.
extern "C" fn on_crash(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    write_marker_for_this_thread(signal_name(signal));
    // Put back what was there and let it run: Rust's handler tells a stack
    // overflow from a plain fault; the default ends the process.
    if let Some(previous) = PREVIOUS.get() {
        if let Some(index) = SIGNALS.iter().position(|known| *known == signal) {
            let old = &previous[index];
            // SAFETY: restoring the action read at install time.
            unsafe { libc::sigaction(signal, old, std::ptr::null_mut()) };
            let handler = old.sa_sigaction;
            if handler == libc::SIG_DFL {
                // Pending until this handler returns, then fatal, whether
                // the signal came from a fault or from kill.
                // SAFETY: raise is async-signal-safe.
                unsafe { libc::raise(signal) };
            } else if handler != libc::SIG_IGN {
                if old.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: the previous handler, with the arguments it expects.
                    let previous: extern "C" fn(
                        libc::c_int,
                        *mut libc::siginfo_t,
                        *mut libc::c_void,
                    ) = unsafe { std::mem::transmute(handler) };
                    previous(signal, info, context);
                } else {
                    // SAFETY: as above, the one-argument form.
                    let previous: extern "C" fn(libc::c_int) =
                        unsafe { std::mem::transmute(handler) };
                    previous(signal);
                }
            }
        }
    }
}
