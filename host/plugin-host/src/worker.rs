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
use strum::IntoEnumIterator;

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

impl Members {
    /// The member that answers `call`; `init` is none of them.
    pub(crate) fn member(&self, call: PluginCall) -> VooduCallFn {
        match call {
            PluginCall::Validate => self.validate,
            PluginCall::Publish => self.publish,
            PluginCall::Drain => self.drain,
            PluginCall::Forget => self.forget,
            PluginCall::Describe => self.describe,
            PluginCall::DescribeSettings => self.describe_settings,
            PluginCall::Configure => self.configure,
            PluginCall::Init => None,
        }
    }

    /// Which calls the plugin has a member for.
    pub(crate) fn present(&self) -> MemberSet {
        let mut present = MemberSet::default();
        for call in PluginCall::iter() {
            if call != PluginCall::Init && self.member(call).is_some() {
                present.insert(call);
            }
        }
        present
    }
}

/// Which of a plugin's optional calls it has a member for: all the handle
/// needs to know of its table, in or out of process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct MemberSet(u16);

impl MemberSet {
    fn bit(call: PluginCall) -> u16 {
        1 << (call as u16)
    }

    /// Marks `call` as present.
    pub(crate) fn insert(&mut self, call: PluginCall) {
        self.0 |= Self::bit(call);
    }

    /// Whether the plugin has a member for `call`.
    pub(crate) fn has(self, call: PluginCall) -> bool {
        self.0 & Self::bit(call) != 0
    }
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
    spin_recv_with(channel, budget, std::hint::spin_loop)
}

/// [`spin_recv`], giving the core away between polls: for a wait that
/// spans another process's work (an out-of-process call), on a machine
/// with fewer cores than spinning threads.
pub(crate) fn spin_recv_yielding<T>(
    channel: &Receiver<T>,
    budget: Duration,
) -> Result<Option<T>, ()> {
    spin_recv_with(channel, budget, std::thread::yield_now)
}

fn spin_recv_with<T>(
    channel: &Receiver<T>,
    budget: Duration,
    between: impl Fn(),
) -> Result<Option<T>, ()> {
    let start = Instant::now();
    let mut polls: u32 = 0;
    loop {
        match channel.try_recv() {
            Ok(value) => return Ok(Some(value)),
            Err(TryRecvError::Disconnected) => return Err(()),
            Err(TryRecvError::Empty) => {}
        }
        between();
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
    let mut instance = Instance::new(members, host);
    loop {
        let job = match spin_recv(&jobs, WORKER_SPIN) {
            Ok(Some(job)) => job,
            Ok(None) => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(()) => return,
        };
        let (seq, reply) = match job {
            Job::Init { seq } => {
                slot.enter(PluginCall::Init);
                let reply = instance.init();
                slot.leave();
                (seq, reply)
            }
            Job::Call {
                seq,
                call,
                request,
                block,
            } => {
                slot.enter(call);
                let reply = instance.call(call, &request, block);
                slot.leave();
                (seq, reply)
            }
            Job::Shutdown => {
                instance.shutdown();
                return;
            }
        };
        // The caller may have given up; a queued Shutdown still follows.
        let _ = done.send(Done { seq, reply });
    }
}

/// One plugin instance and the raw calls into it: what the plugin thread
/// runs, and what an out-of-process plugin's child runs
/// ([`crate::out_of_process`]). Not `Send`: the instance pointer stays on
/// the thread that made it.
pub(crate) struct Instance {
    members: Members,
    host: &'static VooduHostApi,
    instance: *mut c_void,
    /// `shutdown` only ever follows a successful `init`.
    initialised: bool,
}

impl Instance {
    /// An instance not yet made: [`Instance::init`] makes it.
    pub(crate) fn new(members: Members, host: &'static VooduHostApi) -> Self {
        Instance {
            members,
            host,
            instance: std::ptr::null_mut(),
            initialised: false,
        }
    }

    /// Runs the plugin's `init`.
    pub(crate) fn init(&mut self) -> RawReply {
        let mut out = VooduBuffer::EMPTY;
        let status = match self.members.init {
            // SAFETY: the ABI's init contract; `host` lives forever.
            Some(init) => unsafe { init(self.host, &mut self.instance, &mut out) },
            None => voodu_plugin_abi::ffi::VOODU_STATUS_ERROR,
        };
        self.initialised = status == voodu_plugin_abi::ffi::VOODU_STATUS_OK;
        take_reply(self.members.free, self.instance, status, out)
    }

    /// Runs one call member with `request`; a member the plugin does not
    /// have answers OK with nothing. `block` is the block the call is
    /// about, for the listen service.
    pub(crate) fn call(
        &mut self,
        call: PluginCall,
        request: &[u8],
        block: Option<Arc<str>>,
    ) -> RawReply {
        let mut out = VooduBuffer::EMPTY;
        let instance = self.instance;
        let status = match self.members.member(call) {
            // SAFETY: the request outlives the call; `instance` came from init.
            Some(member) => crate::listeners::for_block(block, || unsafe {
                member(instance, request.as_ptr(), request.len(), &mut out)
            }),
            None => voodu_plugin_abi::ffi::VOODU_STATUS_OK,
        };
        take_reply(self.members.free, self.instance, status, out)
    }

    /// Runs the plugin's `shutdown`, if `init` made the instance.
    pub(crate) fn shutdown(self) {
        if let (true, Some(shutdown)) = (self.initialised, self.members.shutdown) {
            // SAFETY: no call is in flight; nothing is called afterwards.
            unsafe { shutdown(self.instance) };
        }
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
