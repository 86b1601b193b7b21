//! The plugin's own host thread. Every raw call into a plugin instance runs
//! here, one at a time, so the instance pointer never leaves this thread and a
//! plugin that hangs only ever blocks this thread: callers wait on a reply
//! channel with a deadline and walk away when it passes.

use std::ffi::c_void;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::path::PathBuf;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::crash::{self, ThreadSlot};
use crate::handle::PluginCall;
use voodu_plugin_abi::ffi::{
    VooduBuffer, VooduCallFn, VooduFreeFn, VooduHostApi, VooduInitFn, VooduShutdownFn, VooduStatus,
    VOODU_MAX_REPLY_BYTES,
};

/// The vtable members the host uses, copied out of the plugin's table once.
#[derive(Clone, Copy)]
pub(crate) struct Members {
    pub init: VooduInitFn,
    pub validate: VooduCallFn,
    pub publish: VooduCallFn,
    pub drain: VooduCallFn,
    pub forget: VooduCallFn,
    pub describe: VooduCallFn,
    pub describe_settings: VooduCallFn,
    pub configure: VooduCallFn,
    pub free: VooduFreeFn,
    pub shutdown: VooduShutdownFn,
}

/// The bytes of a reply, or its size when it was over the limit and dropped.
pub(crate) enum ReplyBody {
    Bytes(Vec<u8>),
    TooLarge(usize),
}

/// What one raw call returned.
pub(crate) struct RawReply {
    pub status: VooduStatus,
    pub body: ReplyBody,
}

/// Work for the plugin thread.
pub(crate) enum Job {
    Init {
        seq: u64,
    },
    Call {
        seq: u64,
        call: PluginCall,
        member: VooduCallFn,
        request: Vec<u8>,
        /// The block the call is about, for the listen service
        /// ([`crate::listeners`]): a socket asked for during the call is
        /// that block's.
        block: Option<Arc<str>>,
    },
    Shutdown,
}

/// A finished job, tagged with the sequence number of the job it answers so
/// the caller can drop a reply that arrives after it gave up waiting.
pub(crate) struct Done {
    pub seq: u64,
    pub reply: RawReply,
}

/// Starts the plugin thread. It ends after a [`Job::Shutdown`] or when every
/// sender of `jobs` is gone.
/// `dir` is the plugin's directory, where a crash inside one of its calls
/// is recorded ([`crate::crash`]).
pub(crate) fn spawn(
    plugin: &str,
    dir: PathBuf,
    members: Members,
    host: &'static VooduHostApi,
    jobs: Receiver<Job>,
    done: Sender<Done>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("voodu-plugin-{plugin}"))
        .spawn(move || {
            let slot = crash::register(&dir);
            run(&slot, members, host, jobs, done)
        })
}

/// How long the plugin thread keeps polling for the next job after one ends,
/// before it sleeps. Plugin calls come in bursts (a reconcile publishes to
/// every block, an apply validates every block), and a sleeping thread costs
/// tens of microseconds to wake, far more than the call itself.
const WORKER_SPIN: Duration = Duration::from_micros(200);

/// How long a caller polls for its reply before it sleeps until the deadline.
pub(crate) const CALLER_SPIN: Duration = Duration::from_micros(50);

/// Polls `channel` for up to `budget`. `Ok(None)` when nothing came in time,
/// `Err` when every sender is gone.
pub(crate) fn spin_recv<T>(channel: &Receiver<T>, budget: Duration) -> Result<Option<T>, ()> {
    let start = Instant::now();
    let mut polls: u32 = 0;
    loop {
        match channel.try_recv() {
            Ok(value) => return Ok(Some(value)),
            Err(TryRecvError::Disconnected) => return Err(()),
            Err(TryRecvError::Empty) => {}
        }
        std::hint::spin_loop();
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(64) && start.elapsed() >= budget {
            return Ok(None);
        }
    }
}

fn run(
    slot: &ThreadSlot,
    members: Members,
    host: &'static VooduHostApi,
    jobs: Receiver<Job>,
    done: Sender<Done>,
) {
    let mut instance: *mut c_void = std::ptr::null_mut();
    // `shutdown` only ever follows a successful `init`.
    let mut initialised = false;
    loop {
        let job = match spin_recv(&jobs, WORKER_SPIN) {
            Ok(Some(job)) => job,
            Ok(None) => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(()) => return,
        };
        let mut out = VooduBuffer::EMPTY;
        let (seq, status) = match job {
            Job::Init { seq } => {
                slot.enter(PluginCall::Init);
                let status = match members.init {
                    // SAFETY: the ABI's init contract; `host` lives forever.
                    Some(init) => unsafe { init(host, &mut instance, &mut out) },
                    None => voodu_plugin_abi::ffi::VOODU_STATUS_ERROR,
                };
                slot.leave();
                initialised = status == voodu_plugin_abi::ffi::VOODU_STATUS_OK;
                (seq, status)
            }
            Job::Call {
                seq,
                call: which,
                member,
                request,
                block,
            } => {
                slot.enter(which);
                let status = match member {
                    // SAFETY: the request outlives the call; `instance` came from init.
                    Some(call) => crate::listeners::for_block(block, || unsafe {
                        call(instance, request.as_ptr(), request.len(), &mut out)
                    }),
                    None => voodu_plugin_abi::ffi::VOODU_STATUS_OK,
                };
                slot.leave();
                (seq, status)
            }
            Job::Shutdown => {
                if let (true, Some(shutdown)) = (initialised, members.shutdown) {
                    // SAFETY: no call is in flight; nothing is called afterwards.
                    unsafe { shutdown(instance) };
                }
                return;
            }
        };
        let reply = take_reply(members.free, instance, status, out);
        // The caller may have given up; a queued Shutdown still follows.
        let _ = done.send(Done { seq, reply });
    }
}

/// Copies the plugin's reply out (unless it is over the limit) and hands the
/// buffer back to the plugin's `free`.
fn take_reply(
    free: VooduFreeFn,
    instance: *mut c_void,
    status: VooduStatus,
    out: VooduBuffer,
) -> RawReply {
    let body = if out.ptr.is_null() || out.len == 0 {
        ReplyBody::Bytes(Vec::new())
    } else if out.len > VOODU_MAX_REPLY_BYTES {
        ReplyBody::TooLarge(out.len)
    } else {
        // SAFETY: the plugin wrote `len` readable bytes at `ptr`.
        ReplyBody::Bytes(unsafe { std::slice::from_raw_parts(out.ptr, out.len) }.to_vec())
    };
    if !out.ptr.is_null() {
        if let Some(free) = free {
            // SAFETY: handing back, once, the buffer this plugin produced.
            unsafe { free(instance, out) };
        }
    }
    RawReply { status, body }
}
