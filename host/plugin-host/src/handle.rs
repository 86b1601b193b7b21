//! The host-side plugin handle: one type for Rust and C plugins alike, with
//! typed methods. Calls into one plugin are serialised, and every call has a
//! bounded wait: a plugin that overruns is marked wedged and refused from
//! then on, and never holds a caller past its deadline.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use voodu_plugin_abi::ffi::VOODU_MAX_REPLY_BYTES;
use voodu_plugin_abi::messages::{
    Block, DrainReply, DrainRequest, ForgetRequest, PublishRequest, ValidateReply, ValidateRequest,
    WorkloadKind,
};

use super::error::CallError;
use super::host_api::LogLimiter;
use super::worker::{
    spin_recv, spin_recv_yielding, Done, Job, MemberSet, RawReply, ReplyBody, CALLER_SPIN,
};
use crate::replies;

/// How the host names one block of one workload to the listen service
/// and in its refusals: `deployment/prod/esl traffik "http" block`.
fn block_ref(kind: WorkloadKind, scope: &str, name: &str, block: &Block) -> Arc<str> {
    let labels: String = block
        .labels
        .iter()
        .map(|label| format!(" {label:?}"))
        .collect();
    Arc::from(format!(
        "{kind}/{scope}/{name} {}{labels} block",
        block.block_type
    ))
}

/// One of the calls the host makes into a plugin.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumIter,
    serde::Serialize,
    serde::Deserialize,
)]
#[strum(serialize_all = "lowercase")]
pub enum PluginCall {
    /// Instance creation at load.
    Init,
    /// Block validation at apply.
    Validate,
    /// Endpoint publication after a reconcile.
    Publish,
    /// Draining a replica before its removal.
    Drain,
    /// Forgetting a removed block.
    Forget,
    /// Describing the block's options (ABI 1.2, optional).
    Describe,
    /// Describing the plugin-wide settings (ABI 1.3, optional).
    #[strum(serialize = "describe_settings")]
    DescribeSettings,
    /// Handing the plugin its plugin-wide settings (ABI 1.3, optional).
    Configure,
}

impl PluginCall {
    /// The call's name as the ABI spells it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How a plugin was built, which decides how it was checked at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PluginKind {
    /// Built with the Rust SDK: checked by abi_stable's layout check.
    Rust,
    /// Built against `include/voodu_plugin.h`: checked by `abi_version` and
    /// `struct_size`.
    C,
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginKind::Rust => "Rust",
            PluginKind::C => "C",
        })
    }
}

/// What the host knows about a loaded plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginInfo {
    /// The plugin's name: the block type it owns.
    pub name: String,
    /// The plugin's own version string.
    pub version: String,
    /// The ABI major version the plugin was built against.
    pub abi_major: u32,
    /// The ABI minor version the plugin was built against.
    pub abi_minor: u32,
    /// Rust or C.
    pub kind: PluginKind,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// Whether the plugin's vtable reaches the 1.1 `get_extension` member.
    pub has_extensions: bool,
    /// Whether it runs in a child process of its own
    /// ([`crate::out_of_process`]).
    pub out_of_process: bool,
}

/// Whether a plugin still takes calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Answering calls.
    Ready,
    /// A call overran its bound and never returned; no call is sent any more
    /// (only `shutdown`, which runs if the stuck call ever returns).
    Wedged {
        /// The call that never returned.
        stuck_call: PluginCall,
    },
    /// Shut down; nothing more is sent.
    ShutDown,
}

/// The caller's end of the plugin thread, behind the serialising lock.
struct Caller {
    jobs: Sender<Job>,
    done: Receiver<Done>,
    next_seq: u64,
}

/// A plugin's last call, when it failed ([`PluginHandle::last_failure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastFailure {
    /// The call.
    pub call: PluginCall,
    /// The error, for the operator.
    pub error: String,
    /// Whether the plugin's status said it panicked (or is poisoned by an
    /// earlier panic).
    pub panicked: bool,
}

/// A loaded plugin. Dropping the handle shuts the instance down (without
/// waiting, so a wedged plugin cannot block the drop). The library itself is
/// never unloaded: plugin threads may outlive the instance.
pub struct PluginHandle {
    info: PluginInfo,
    /// Which calls the plugin has a member for.
    present: MemberSet,
    call_timeout: Duration,
    caller: Mutex<Caller>,
    health: Mutex<Health>,
    thread: Mutex<Option<JoinHandle<()>>>,
    log_limiter: &'static LogLimiter,
    last_failure: Mutex<Option<LastFailure>>,
    /// The last call that failed, kept after later calls succeed.
    last_error: Mutex<Option<LastFailure>>,
    /// What `describe` answered, once asked.
    described: std::sync::OnceLock<Option<serde_json::Value>>,
    /// What `describe_settings` answered, once asked.
    settings_described: std::sync::OnceLock<Option<serde_json::Value>>,
    /// Its calls' figures since it was loaded.
    tally: crate::call_figures::CallTally,
    /// Its child process, when it runs out of process.
    child: Option<Arc<crate::out_of_process::ChildState>>,
}

impl fmt::Debug for PluginHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginHandle")
            .field("info", &self.info)
            .field("health", &*self.health.lock())
            .finish()
    }
}

impl PluginHandle {
    pub(crate) fn new(
        info: PluginInfo,
        present: MemberSet,
        call_timeout: Duration,
        jobs: Sender<Job>,
        done: Receiver<Done>,
        thread: JoinHandle<()>,
        log_limiter: &'static LogLimiter,
    ) -> Self {
        PluginHandle {
            info,
            present,
            call_timeout,
            caller: Mutex::new(Caller {
                jobs,
                done,
                next_seq: 0,
            }),
            health: Mutex::new(Health::Ready),
            thread: Mutex::new(Some(thread)),
            log_limiter,
            last_failure: Mutex::new(None),
            last_error: Mutex::new(None),
            described: std::sync::OnceLock::new(),
            settings_described: std::sync::OnceLock::new(),
            tally: crate::call_figures::CallTally::default(),
            child: None,
        }
    }

    /// The same handle, for a plugin whose calls its child process answers.
    pub(crate) fn in_child(mut self, child: Arc<crate::out_of_process::ChildState>) -> Self {
        self.child = Some(child);
        self
    }

    /// The process id of the child process answering this plugin's calls,
    /// when it runs out of process (and its child is running).
    pub fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|child| child.pid())
    }

    /// How many times this plugin's child process was started again after
    /// it died; 0 for a plugin in process.
    pub fn child_restarts(&self) -> u32 {
        self.child.as_ref().map_or(0, |child| child.restarts())
    }

    /// The same handle, reporting `path` as the file it was loaded from:
    /// the registry loads a staged copy, then renames it into place.
    pub(crate) fn installed_at(mut self, path: PathBuf) -> Self {
        if let Some(child) = &self.child {
            child.moved_to(path.clone());
        }
        self.info.path = path;
        self
    }

    /// How many of each call were made since this plugin was loaded, how
    /// many it refused or failed, and their 99th percentile duration.
    pub fn call_figures(&self) -> Vec<crate::call_figures::CallFigures> {
        self.tally.figures()
    }

    /// What the host knows about this plugin.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// The plugin's name: the block type it owns.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Whether the plugin still takes calls.
    pub fn health(&self) -> Health {
        *self.health.lock()
    }

    /// How many of the plugin's log lines the rate limit dropped.
    pub fn log_lines_dropped(&self) -> u64 {
        self.log_limiter.dropped()
    }

    /// Validates and normalises one block.
    pub fn validate(&self, request: &ValidateRequest) -> Result<ValidateReply, CallError> {
        self.typed_call(PluginCall::Validate, request, None)
    }

    /// Publishes the live endpoint set of one block. A plugin without
    /// `publish` accepts it silently.
    pub fn publish(&self, request: &PublishRequest) -> Result<(), CallError> {
        if !self.present.has(PluginCall::Publish) {
            return Ok(());
        }
        let block = block_ref(request.kind, &request.scope, &request.name, &request.block);
        self.acknowledged_call(PluginCall::Publish, request, Some(block))
    }

    /// Asks the plugin to drain one replica. A plugin without `drain` has
    /// nothing to drain.
    pub fn drain(&self, request: &DrainRequest) -> Result<DrainReply, CallError> {
        if !self.present.has(PluginCall::Drain) {
            return Ok(DrainReply::Drained);
        }
        let block = block_ref(request.kind, &request.scope, &request.name, &request.block);
        self.typed_call(PluginCall::Drain, request, Some(block))
    }

    /// Tells the plugin a block is gone. A plugin without `forget` holds
    /// nothing to release.
    pub fn forget(&self, request: &ForgetRequest) -> Result<(), CallError> {
        let block = block_ref(request.kind, &request.scope, &request.name, &request.block);
        let result = if self.present.has(PluginCall::Forget) {
            self.acknowledged_call(PluginCall::Forget, request, Some(block.clone()))
        } else {
            Ok(())
        };
        // Forgotten: another of its blocks may take the sockets it had.
        crate::listeners::ListenerTable::process().release_block(&self.info.name, &block);
        result
    }

    /// The block's options as the plugin describes them (a JSON Schema), or
    /// `None` when it describes nothing (no `describe` member, an empty or
    /// `null` reply). Asked once and kept: a plugin's options do not change
    /// while it is loaded.
    pub fn describe(&self) -> Result<Option<serde_json::Value>, CallError> {
        self.schema_of(PluginCall::Describe, &self.described)
    }

    /// The plugin-wide settings as the plugin describes them (a JSON
    /// Schema, ABI 1.3), or `None` when it takes no settings (no
    /// `describe_settings` member, an empty or `null` reply). Asked once
    /// and kept.
    pub fn settings_schema(&self) -> Result<Option<serde_json::Value>, CallError> {
        self.schema_of(PluginCall::DescribeSettings, &self.settings_described)
    }

    /// What `call` (`describe` or `describe_settings`) answers, asked once
    /// and kept in `kept`.
    fn schema_of(
        &self,
        call: PluginCall,
        kept: &std::sync::OnceLock<Option<serde_json::Value>>,
    ) -> Result<Option<serde_json::Value>, CallError> {
        if let Some(described) = kept.get() {
            return Ok(described.clone());
        }
        let described = if !self.has_member(call)? {
            None
        } else {
            let reply = self.call_raw(call, b"{}".to_vec())?;
            if reply.is_empty() {
                None
            } else {
                let schema: serde_json::Value =
                    serde_json::from_slice(&reply).map_err(|error| CallError::Failed {
                        plugin: self.info.name.clone(),
                        call,
                        message: format!("its {call} reply is not JSON: {error}"),
                    })?;
                (!schema.is_null()).then_some(schema)
            }
        };
        Ok(kept.get_or_init(|| described).clone())
    }

    /// Hands the plugin its plugin-wide settings (`configure`, ABI 1.3),
    /// which the caller has checked against [`PluginHandle::settings_schema`].
    /// A plugin without the member takes none: it is not called.
    pub fn configure(&self, settings: &serde_json::Value) -> Result<(), CallError> {
        if !self.present.has(PluginCall::Configure) {
            return Ok(());
        }
        let request = voodu_plugin_abi::messages::ConfigureRequest {
            settings: settings.clone(),
        };
        self.acknowledged_call(PluginCall::Configure, &request, None)
    }

    /// Sends raw request bytes to `call` and returns the raw reply bytes of
    /// an OK status. For benchmarks and diagnostics; the typed methods are
    /// the API.
    pub fn call_raw(&self, call: PluginCall, request: Vec<u8>) -> Result<Vec<u8>, CallError> {
        self.has_member(call)?;
        self.round_trip(call, request, None)
    }

    /// Whether the plugin has a member for `call`; `init` is no member
    /// that can be called again.
    fn has_member(&self, call: PluginCall) -> Result<bool, CallError> {
        if call == PluginCall::Init {
            return Err(CallError::Failed {
                plugin: self.info.name.clone(),
                call,
                message: "init runs once, at load, and cannot be called again".into(),
            });
        }
        Ok(self.present.has(call))
    }

    /// Shuts the instance down. A ready plugin's thread gets up to the call
    /// bound to finish (after any call in flight); a wedged plugin is not
    /// waited for, and its `shutdown` runs only if its stuck call ever
    /// returns. Later calls fail with [`CallError::ShutDown`].
    pub fn shutdown(&self) {
        self.shutdown_within(self.call_timeout);
    }

    /// The bound on each call to this plugin (`--plugin-timeout`).
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// [`PluginHandle::shutdown`], waiting up to `bound` for it instead of
    /// the call bound: for a controller's worker that stops, whose plugins
    /// may let open connections finish for the grace it gave them.
    pub fn shutdown_within(&self, bound: Duration) {
        let previous = std::mem::replace(&mut *self.health.lock(), Health::ShutDown);
        if previous == Health::ShutDown {
            return;
        }
        if let Some(child) = &self.child {
            child.grant_shutdown(bound);
        }
        let _ = self.caller.lock().jobs.try_send(Job::Shutdown);
        if previous != Health::Ready {
            return;
        }
        let Some(thread) = self.thread.lock().take() else {
            return;
        };
        let deadline = Instant::now() + bound;
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            tracing::warn!(plugin = %self.info.name, "shutdown did not return within {bound:?}");
        }
    }

    /// A call whose OK reply carries nothing: an empty body or any JSON.
    fn acknowledged_call<Req: Serialize>(
        &self,
        call: PluginCall,
        request: &Req,
        block: Option<Arc<str>>,
    ) -> Result<(), CallError> {
        let result = self
            .round_trip(call, self.encode(call, request)?, block)
            .and_then(|body| replies::decode_ack(&self.info.name, call, &body));
        self.note_outcome(call, &result);
        result
    }

    fn encode<Req: Serialize>(
        &self,
        call: PluginCall,
        request: &Req,
    ) -> Result<Vec<u8>, CallError> {
        serde_json::to_vec(request).map_err(|error| CallError::InvalidReply {
            plugin: self.info.name.clone(),
            call,
            reason: format!("the host could not encode the request: {error}"),
        })
    }

    fn typed_call<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        call: PluginCall,
        request: &Req,
        block: Option<Arc<str>>,
    ) -> Result<Rep, CallError> {
        let result = self
            .round_trip(call, self.encode(call, request)?, block)
            .and_then(|body| {
                serde_json::from_slice(&body)
                    .map_err(|error| self.invalid_reply(call, &body, &error))
            });
        self.note_outcome(call, &result);
        result
    }

    /// Remembers whether the plugin's last answered call failed (an error,
    /// an invalid or oversized reply), for [`PluginHandle::last_failure`].
    /// A refusal is an answer, not a failure.
    fn note_outcome<T>(&self, call: PluginCall, result: &Result<T, CallError>) {
        let failure = match result {
            Ok(_) | Err(CallError::Refused { .. }) => None,
            Err(
                error @ (CallError::Failed { .. }
                | CallError::Panicked { .. }
                | CallError::InvalidReply { .. }
                | CallError::ReplyTooLarge { .. }),
            ) => Some(LastFailure {
                call,
                error: error.to_string(),
                panicked: matches!(error, CallError::Panicked { .. }),
            }),
            Err(_) => return,
        };
        if failure.is_some() {
            self.last_error.lock().clone_from(&failure);
        }
        *self.last_failure.lock() = failure;
    }

    /// The last call that failed since the plugin was loaded, also when
    /// later calls succeeded (unlike [`PluginHandle::last_failure`]).
    pub fn last_error(&self) -> Option<LastFailure> {
        self.last_error.lock().clone()
    }

    /// The plugin's last call, when it failed: a plugin that is loaded and
    /// answers, but answers garbage, an oversized reply or errors (a
    /// poisoned Rust plugin, say).
    pub fn last_failure(&self) -> Option<LastFailure> {
        self.last_failure.lock().clone()
    }

    /// Sends request bytes to one call member and returns the body of its OK
    /// reply: the path every call but `init` takes.
    fn round_trip(
        &self,
        call: PluginCall,
        request: Vec<u8>,
        block: Option<Arc<str>>,
    ) -> Result<Vec<u8>, CallError> {
        let started = Instant::now();
        let outcome = self
            .dispatch(call, |seq| Job::Call {
                seq,
                call,
                request,
                block,
            })
            .and_then(|reply| self.ok_body(call, reply));
        let (result, took) = (crate::observe::CallResult::of(&outcome), started.elapsed());
        self.tally.record(call, result, took);
        crate::observe::observed(&self.info.name, call, result, took);
        outcome
    }

    /// Runs one job, built for its sequence number, on the plugin thread and
    /// waits for it within the bound.
    pub(crate) fn dispatch(
        &self,
        call: PluginCall,
        job: impl FnOnce(u64) -> Job,
    ) -> Result<RawReply, CallError> {
        // One deadline covers waiting for an earlier call and this one.
        let deadline = Instant::now() + self.call_timeout;
        let Some(mut caller) = self.caller.try_lock_until(deadline) else {
            return Err(CallError::Busy {
                plugin: self.info.name.clone(),
                call,
                timeout: self.call_timeout,
            });
        };
        match *self.health.lock() {
            Health::Ready => {}
            Health::Wedged { stuck_call } => {
                return Err(CallError::Wedged {
                    plugin: self.info.name.clone(),
                    call,
                    stuck_call,
                })
            }
            Health::ShutDown => return Err(self.shut_down(call)),
        }
        caller.next_seq += 1;
        let seq = caller.next_seq;
        if caller.jobs.send(job(seq)).is_err() {
            return Err(self.shut_down(call));
        }
        // Out of process the reply crosses two processes: waited for
        // longer, giving the core to them meanwhile.
        let spun = match self.child {
            None => spin_recv(&caller.done, CALLER_SPIN),
            Some(_) => spin_recv_yielding(&caller.done, crate::out_of_process::SPIN),
        };
        if let Ok(Some(done)) = spun {
            if done.seq == seq {
                return Ok(done.reply);
            }
        }
        loop {
            match caller.done.recv_deadline(deadline) {
                Ok(done) if done.seq == seq => return Ok(done.reply),
                Ok(_late_reply_of_an_abandoned_call) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(child) = &self.child {
                        // Out of process, a call that never returns costs
                        // only its process: killed, and started again.
                        child.kill_running();
                        tracing::error!(
                            plugin = %self.info.name,
                            "{call} did not return within {:?}; its process was killed",
                            self.call_timeout
                        );
                        return Err(CallError::Overran {
                            plugin: self.info.name.clone(),
                            call,
                            timeout: self.call_timeout,
                        });
                    }
                    let mut health = self.health.lock();
                    if *health == Health::Ready {
                        *health = Health::Wedged { stuck_call: call };
                    }
                    drop(health);
                    tracing::error!(
                        plugin = %self.info.name,
                        "{call} did not return within {:?}; plugin marked wedged",
                        self.call_timeout
                    );
                    return Err(CallError::TimedOut {
                        plugin: self.info.name.clone(),
                        call,
                        timeout: self.call_timeout,
                    });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.shut_down(call)),
            }
        }
    }

    /// The body of an OK reply, or the error its status stands for.
    pub(crate) fn ok_body(&self, call: PluginCall, reply: RawReply) -> Result<Vec<u8>, CallError> {
        let body = match reply.body {
            ReplyBody::Bytes(body) => body,
            ReplyBody::TooLarge(size) => {
                return Err(CallError::ReplyTooLarge {
                    plugin: self.info.name.clone(),
                    call,
                    size,
                    limit: VOODU_MAX_REPLY_BYTES,
                })
            }
        };
        replies::status_body(&self.info.name, call, reply.status, body)
    }

    fn invalid_reply(&self, call: PluginCall, body: &[u8], error: &serde_json::Error) -> CallError {
        replies::invalid_reply(&self.info.name, call, body, error)
    }

    fn shut_down(&self, call: PluginCall) -> CallError {
        CallError::ShutDown {
            plugin: self.info.name.clone(),
            call,
        }
    }
}

impl Drop for PluginHandle {
    fn drop(&mut self) {
        let health = std::mem::replace(&mut *self.health.lock(), Health::ShutDown);
        if health != Health::ShutDown {
            let _ = self.caller.lock().jobs.try_send(Job::Shutdown);
        }
    }
}

/// Exposed to the loader: runs `init` through the same bounded dispatch.
pub(crate) fn run_init(handle: &PluginHandle) -> Result<(), CallError> {
    let reply = handle.dispatch(PluginCall::Init, |seq| Job::Init { seq })?;
    handle.ok_body(PluginCall::Init, reply).map(drop)
}
