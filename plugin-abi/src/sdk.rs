//! The Rust plugin SDK: implement [`Plugin`], then export it with
//! [`export_plugin!`](crate::export_plugin).
//!
//! The SDK owns everything unsafe: it decodes requests, encodes replies,
//! allocates and frees buffers, and wraps every entry in `catch_unwind`. A
//! panic becomes an ERROR reply carrying the panic message and poisons the
//! instance: every later call fails fast with a clear error until the host
//! reloads the plugin. A panic never unwinds into the host.

use std::any::Any;
use std::ffi::{c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ffi::{
    VooduBuffer, VooduHostApi, VooduLogLevel, VooduPluginV1, VooduStatus, VOODU_ABI_VERSION,
    VOODU_LOG_DEBUG, VOODU_LOG_ERROR, VOODU_LOG_INFO, VOODU_LOG_TRACE, VOODU_LOG_WARN,
    VOODU_STATUS_ERROR, VOODU_STATUS_OK, VOODU_STATUS_REFUSED,
};
use crate::messages::{
    ConfigureRequest, DrainReply, DrainRequest, FailureReply, ForgetRequest, PublishRequest,
    ValidateReply, ValidateRequest,
};

/// Why a plugin call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginError {
    /// The operator's input is not acceptable; the message is shown to them
    /// as the plugin's own words, after `deployment/prod/esl: traffik block: `.
    Refused(String),
    /// The operator's input is not acceptable because of one option: the
    /// message as with [`PluginError::Refused`], and the option as a JSON
    /// pointer into the block's spec (`/listen`), so the operator is shown
    /// that attribute's own line. Made by [`PluginError::refused_at`].
    RefusedAt {
        /// The option at fault: `/listen`, `/@blocks/0/spec/port`.
        pointer: String,
        /// The plugin's own words.
        message: String,
    },
    /// The plugin failed for a reason of its own.
    Failed(String),
}

impl PluginError {
    /// A refusal of the option at `pointer` (a JSON pointer into the
    /// block's spec, such as `/listen`), in the plugin's own words.
    pub fn refused_at(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        PluginError::RefusedAt {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// A voodu plugin written in Rust.
///
/// The host serialises calls into one instance, so methods take `&mut self`.
/// A plugin that runs threads of its own shares state with them as usual
/// (`Arc`, channels). Every method but [`Plugin::validate`] has a default that
/// does nothing, which is what a plugin needs that only checks blocks.
pub trait Plugin: Send + 'static {
    /// The plugin's name, which is the block type it owns: `c"traffik"`.
    const NAME: &'static CStr;
    /// The plugin's own version: `c"1.0.0"`.
    const VERSION: &'static CStr;

    /// Create the instance. `host` stays valid until [`Plugin::shutdown`]
    /// returns; keep it to log later. An `Err` fails the plugin's load with
    /// that message.
    fn init(host: Host) -> Result<Self, String>
    where
        Self: Sized;

    /// Validate and normalise one block at apply time.
    fn validate(&mut self, request: ValidateRequest) -> Result<ValidateReply, PluginError>;

    /// Receive the whole live endpoint set of one block.
    fn publish(&mut self, request: PublishRequest) -> Result<(), PluginError> {
        let _ = request;
        Ok(())
    }

    /// Drain one replica before it is removed. The default has nothing to
    /// drain.
    fn drain(&mut self, request: DrainRequest) -> Result<DrainReply, PluginError> {
        let _ = request;
        Ok(DrainReply::Drained)
    }

    /// Forget one block: release whatever the plugin holds for it.
    fn forget(&mut self, request: ForgetRequest) -> Result<(), PluginError> {
        let _ = request;
        Ok(())
    }

    /// Release everything before the host unloads the plugin.
    fn shutdown(&mut self) {}

    /// The block's options as a JSON Schema (ABI 1.2's `describe`), for
    /// `vd explain` and for "did you mean" at apply: an object schema whose
    /// `properties` each have a `type`, a one-line `description` and maybe
    /// a `default` that [`Plugin::validate`] accepts. The default describes
    /// nothing.
    fn describe(&self) -> Option<serde_json::Value> {
        None
    }

    /// The plugin-wide settings as a JSON Schema (ABI 1.3's
    /// `describe_settings`), of the same shape as [`Plugin::describe`]'s:
    /// what is not per block (a binary's path, a directory, a default
    /// address). The default takes no settings, and the host then never
    /// calls [`Plugin::configure`].
    fn describe_settings(&self) -> Option<serde_json::Value> {
        None
    }

    /// Take the plugin-wide settings, already checked against
    /// [`Plugin::describe_settings`]' schema: right after
    /// [`Plugin::init`] (an empty object when the operator gave none), and
    /// each time the operator changes them. An `Err` refuses them: at load,
    /// the plugin does not load; later, it keeps the settings it had, so
    /// take the new ones only once all of them are checked. The default
    /// accepts them and ignores them.
    fn configure(&mut self, settings: serde_json::Value) -> Result<(), PluginError> {
        let _ = settings;
        Ok(())
    }
}

/// The severity of a log line sent to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Something failed.
    Error,
    /// Something surprising was worked around.
    Warn,
    /// Normal operation.
    Info,
    /// Debugging detail.
    Debug,
    /// Very verbose detail.
    Trace,
}

impl LogLevel {
    fn to_ffi(self) -> VooduLogLevel {
        match self {
            LogLevel::Error => VOODU_LOG_ERROR,
            LogLevel::Warn => VOODU_LOG_WARN,
            LogLevel::Info => VOODU_LOG_INFO,
            LogLevel::Debug => VOODU_LOG_DEBUG,
            LogLevel::Trace => VOODU_LOG_TRACE,
        }
    }
}

/// How long [`Plugin::shutdown`] may let open connections finish: the
/// host's `VOODU_SHUTDOWN_GRACE_MS` (set by the controller from
/// `--upgrade-timeout`), or `None` when the host sets none (finish within
/// the plugin call bound then).
pub fn shutdown_grace() -> Option<std::time::Duration> {
    std::env::var(crate::ffi::SHUTDOWN_GRACE_ENV)
        .ok()?
        .trim()
        .parse()
        .ok()
        .map(std::time::Duration::from_millis)
}

/// The host's callbacks, as handed to [`Plugin::init`]. Cheap to copy, and
/// usable from any thread until [`Plugin::shutdown`] returns.
#[derive(Debug, Clone, Copy)]
pub struct Host {
    api: *const VooduHostApi,
}

// SAFETY: the ABI promises the host table and its callbacks are thread-safe
// and valid from `init` until `shutdown` returns.
unsafe impl Send for Host {}
// SAFETY: as above.
unsafe impl Sync for Host {}

impl Host {
    /// Write one line to the controller's log, tagged with the plugin's name.
    pub fn log(&self, level: LogLevel, message: &str) {
        if self.api.is_null() {
            return;
        }
        // SAFETY: non-null and valid for the process (see VooduHostApi). The
        // host's table may be older and shorter than this SDK's, so read the
        // size first, and each member only once the size covers it.
        unsafe {
            let struct_size = std::ptr::addr_of!((*self.api).struct_size).read() as usize;
            let log_end = std::mem::offset_of!(VooduHostApi, log) + std::mem::size_of::<usize>();
            if struct_size < log_end {
                return;
            }
            let host_ctx = std::ptr::addr_of!((*self.api).host_ctx).read();
            if let Some(log) = std::ptr::addr_of!((*self.api).log).read() {
                // The callback borrows the message for the call only.
                log(host_ctx, level.to_ffi(), message.as_ptr(), message.len());
            }
        }
    }
}

/// Why [`Host::listen`] gave no listener.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The host is older than ABI 1.2 and holds no sockets: bind it
    /// yourself.
    #[error("this host is older than ABI 1.2 and holds no sockets for plugins")]
    Unsupported,
    /// The host refused, with its reason.
    #[error("{0}")]
    Refused(String),
}

/// Options of [`Host::listen`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ListenOptions {
    /// Bind with `SO_REUSEPORT`, so several processes on one host may listen
    /// on the address.
    pub reuse_port: bool,
}

impl Host {
    /// A listening TCP socket on `address`, held by the host (ABI 1.2): the
    /// same address asked for again, by this instance or by a reloaded or
    /// replaced one, is the same socket, so connections that arrive while
    /// one instance stops and the next starts wait instead of being
    /// refused. The listener is non-blocking (keep it so: the flag is
    /// shared with the host's copy); drop it when done, and call
    /// [`Host::unlisten`] when the address is no longer wanted.
    ///
    /// Fails with [`ListenError::Unsupported`] on a host older than 1.2,
    /// where the plugin binds the socket itself.
    pub fn listen(
        &self,
        address: std::net::SocketAddr,
        options: ListenOptions,
    ) -> Result<std::net::TcpListener, ListenError> {
        use std::os::fd::FromRawFd;
        let Some((host_ctx, listen, _)) = self.listen_members() else {
            return Err(ListenError::Unsupported);
        };
        let address = address.to_string();
        let flags = if options.reuse_port {
            crate::ffi::VOODU_LISTEN_REUSE_PORT
        } else {
            0
        };
        let mut fd: i32 = -1;
        let mut message = [0 as std::ffi::c_char; 512];
        // SAFETY: the callback borrows the address for the call and writes
        // at most `message.len()` bytes, NUL included.
        let status = unsafe {
            listen(
                host_ctx,
                address.as_ptr(),
                address.len(),
                flags,
                &mut fd,
                message.as_mut_ptr(),
                message.len(),
            )
        };
        if status != crate::ffi::VOODU_STATUS_OK || fd < 0 {
            // SAFETY: the host NUL-terminated it, or left it zeroed.
            let reason = unsafe { std::ffi::CStr::from_ptr(message.as_ptr()) };
            return Err(ListenError::Refused(reason.to_string_lossy().into_owned()));
        }
        // SAFETY: on OK the descriptor is new and ours (see VooduListenFn).
        Ok(unsafe { std::net::TcpListener::from_raw_fd(fd) })
    }

    /// Gives back the socket asked for with [`Host::listen`] on `address`
    /// (the address it is bound to): the host closes its copy, and the port
    /// is free once this plugin's own listener is dropped too. Nothing on a
    /// host older than 1.2.
    pub fn unlisten(&self, address: std::net::SocketAddr) {
        if let Some((host_ctx, _, Some(unlisten))) = self.listen_members() {
            let address = address.to_string();
            // SAFETY: the callback borrows the address for the call.
            unsafe { unlisten(host_ctx, address.as_ptr(), address.len()) };
        }
    }

    /// The host's context and its `listen` and `unlisten` members, when its
    /// table reaches them (a 1.2 host).
    #[allow(clippy::type_complexity)]
    fn listen_members(
        &self,
    ) -> Option<(
        *mut std::ffi::c_void,
        unsafe extern "C" fn(
            *mut std::ffi::c_void,
            *const u8,
            usize,
            u32,
            *mut i32,
            *mut std::ffi::c_char,
            usize,
        ) -> crate::ffi::VooduStatus,
        crate::ffi::VooduUnlistenFn,
    )> {
        if self.api.is_null() {
            return None;
        }
        // SAFETY: non-null and valid for the process; each member is read
        // only once the host's `struct_size` covers it.
        unsafe {
            let struct_size = std::ptr::addr_of!((*self.api).struct_size).read() as usize;
            let unlisten_end =
                std::mem::offset_of!(VooduHostApi, unlisten) + std::mem::size_of::<usize>();
            if struct_size < unlisten_end {
                return None;
            }
            let host_ctx = std::ptr::addr_of!((*self.api).host_ctx).read();
            let listen = std::ptr::addr_of!((*self.api).listen).read()?;
            let unlisten = std::ptr::addr_of!((*self.api).unlisten).read();
            Some((host_ctx, listen, unlisten))
        }
    }
}

/// Whose connections [`Host::connections_to`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionHolder {
    /// The controller's own process: the connections this plugin opens
    /// itself (a balancer inside the controller, as traffik is).
    Controller,
    /// A process and every process descended from it: a proxy the plugin
    /// runs (nginx's or HAProxy's master, its workers with it). Pid 0 is
    /// refused, never read as the controller.
    ProcessTree(u32),
}

/// Why [`Host::connections_to`] gave no count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionsError {
    /// The host is older than ABI 1.3 and counts no connections.
    #[error("this host is older than ABI 1.3 and counts no connections")]
    Unsupported,
    /// The host refused what was asked (an address that is not `IP:port`,
    /// no such process), with its reason.
    #[error("{0}")]
    Refused(String),
    /// The host could not read the kernel's socket table or the process's
    /// descriptors, with its reason.
    #[error("{0}")]
    Failed(String),
}

impl Host {
    /// How many established TCP connections to `address` (a replica's
    /// `IP:port`, as a drain request gives it) `holder` has open (ABI 1.3),
    /// counted by the host from the kernel's socket table: what a balancer
    /// waits on before answering a drain
    /// [`DrainReply::Drained`](crate::messages::DrainReply::Drained).
    /// Cheap enough for a drain's polls (one dump filtered by port in the
    /// kernel), not for every request.
    pub fn connections_to(
        &self,
        address: &str,
        holder: ConnectionHolder,
    ) -> Result<u64, ConnectionsError> {
        if self.api.is_null() {
            return Err(ConnectionsError::Unsupported);
        }
        let pid = match holder {
            ConnectionHolder::Controller => 0,
            // 0 would ask the host for the controller's own connections:
            // a pid read from a file that was never written must not.
            ConnectionHolder::ProcessTree(0) => {
                return Err(ConnectionsError::Refused(
                    "pid 0 is no process: pass ConnectionHolder::Controller for the \
                     controller's own connections, or the proxy's pid"
                        .to_owned(),
                ))
            }
            ConnectionHolder::ProcessTree(pid) => i32::try_from(pid)
                .map_err(|_| ConnectionsError::Refused(format!("no process {pid} runs")))?,
        };
        let mut count = 0u64;
        let mut message = [0 as std::ffi::c_char; 512];
        // SAFETY: non-null and valid for the process; the member is read
        // only once the host's `struct_size` covers it; the callback
        // borrows the address for the call and writes at most
        // `message.len()` bytes, NUL included.
        let status = unsafe {
            let struct_size = std::ptr::addr_of!((*self.api).struct_size).read() as usize;
            let connections_end =
                std::mem::offset_of!(VooduHostApi, connections) + std::mem::size_of::<usize>();
            if struct_size < connections_end {
                return Err(ConnectionsError::Unsupported);
            }
            let host_ctx = std::ptr::addr_of!((*self.api).host_ctx).read();
            let Some(connections) = std::ptr::addr_of!((*self.api).connections).read() else {
                return Err(ConnectionsError::Unsupported);
            };
            connections(
                host_ctx,
                address.as_ptr(),
                address.len(),
                pid,
                &mut count,
                message.as_mut_ptr(),
                message.len(),
            )
        };
        if status == crate::ffi::VOODU_STATUS_OK {
            return Ok(count);
        }
        // SAFETY: the host NUL-terminated it, or left it zeroed.
        let reason = unsafe { std::ffi::CStr::from_ptr(message.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        if status == crate::ffi::VOODU_STATUS_REFUSED {
            Err(ConnectionsError::Refused(reason))
        } else {
            Err(ConnectionsError::Failed(reason))
        }
    }
}

/// Why [`Host::count`] or [`Host::gauge`] recorded nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricError {
    /// The host is older than ABI 1.2 and takes no plugin metrics.
    #[error("this host is older than ABI 1.2 and takes no plugin metrics")]
    Unsupported,
    /// The host refused the name, kind or value (it logs why, once per
    /// name).
    #[error("the host refused metric {0:?}; its log says why")]
    Refused(String),
}

impl Host {
    /// Adds `value` to this plugin's counter `name` (ABI 1.2), exposed on
    /// the controller's `/metrics` as `voodu_plugin_<plugin>_<name>_total`.
    /// A name is 1 to 64 of `a-z`, `0-9` and `_`, starting with a letter;
    /// at most 64 names per plugin. Cheap enough for a hot path (a map
    /// update in the host), though adding up locally and reporting now and
    /// then is cheaper still.
    pub fn count(&self, name: &str, value: f64) -> Result<(), MetricError> {
        self.metric(name, crate::ffi::VOODU_METRIC_COUNTER, value)
    }

    /// Sets this plugin's gauge `name` to `value` (ABI 1.2), exposed as
    /// `voodu_plugin_<plugin>_<name>`. Names as for [`Host::count`].
    pub fn gauge(&self, name: &str, value: f64) -> Result<(), MetricError> {
        self.metric(name, crate::ffi::VOODU_METRIC_GAUGE, value)
    }

    fn metric(&self, name: &str, kind: u32, value: f64) -> Result<(), MetricError> {
        if self.api.is_null() {
            return Err(MetricError::Unsupported);
        }
        // SAFETY: non-null and valid for the process; the member is read
        // only once the host's `struct_size` covers it, and the callback
        // borrows the name for the call only.
        let status = unsafe {
            let struct_size = std::ptr::addr_of!((*self.api).struct_size).read() as usize;
            let metric_end =
                std::mem::offset_of!(VooduHostApi, metric) + std::mem::size_of::<usize>();
            if struct_size < metric_end {
                return Err(MetricError::Unsupported);
            }
            let host_ctx = std::ptr::addr_of!((*self.api).host_ctx).read();
            let Some(metric) = std::ptr::addr_of!((*self.api).metric).read() else {
                return Err(MetricError::Unsupported);
            };
            metric(host_ctx, name.as_ptr(), name.len(), kind, value)
        };
        if status == crate::ffi::VOODU_STATUS_OK {
            Ok(())
        } else {
            Err(MetricError::Refused(name.to_owned()))
        }
    }
}

/// The state behind the instance pointer the host passes to every call.
struct Instance<P> {
    plugin: Mutex<P>,
    /// Set by the first panic; later calls fail fast with it.
    poisoned: Mutex<Option<String>>,
    /// The status a panic is reported with to this host (`panic_status_for`).
    panic_status: VooduStatus,
}

/// Builds the vtable of plugin `P`. Used by [`export_plugin!`](crate::export_plugin);
/// not meant to be called by hand.
pub const fn vtable<P: Plugin>() -> VooduPluginV1 {
    VooduPluginV1 {
        abi_version: VOODU_ABI_VERSION,
        struct_size: std::mem::size_of::<VooduPluginV1>() as u32,
        name: P::NAME.as_ptr(),
        version: P::VERSION.as_ptr(),
        init: Some(init_entry::<P>),
        validate: Some(validate_entry::<P>),
        publish: Some(publish_entry::<P>),
        drain: Some(drain_entry::<P>),
        forget: Some(forget_entry::<P>),
        free: Some(free_entry),
        shutdown: Some(shutdown_entry::<P>),
        get_extension: Some(get_extension_entry),
        describe: Some(describe_entry::<P>),
        describe_settings: Some(describe_settings_entry::<P>),
        configure: Some(configure_entry::<P>),
    }
}

/// The reply body of `publish` and `forget`: `{}`.
#[derive(Serialize)]
struct Empty {}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// Hands `bytes` to the host through `out`; the host gives them back to
/// [`free_entry`].
unsafe fn write_out(out: *mut VooduBuffer, bytes: Vec<u8>) {
    if out.is_null() {
        return;
    }
    let boxed = bytes.into_boxed_slice();
    let len = boxed.len();
    let ptr = Box::into_raw(boxed) as *mut u8;
    *out = VooduBuffer { ptr, len };
}

unsafe fn write_failure(out: *mut VooduBuffer, message: String) {
    write_failure_reply(out, &FailureReply::new(message));
}

unsafe fn write_failure_reply(out: *mut VooduBuffer, failure: &FailureReply) {
    let body = serde_json::to_vec(failure)
        .unwrap_or_else(|_| br#"{"message":"unencodable failure"}"#.to_vec());
    write_out(out, body);
}

unsafe extern "C" fn init_entry<P: Plugin>(
    host: *const VooduHostApi,
    out_instance: *mut *mut c_void,
    out: *mut VooduBuffer,
) -> VooduStatus {
    let panic_status = panic_status_for(host);
    let created = catch_unwind(AssertUnwindSafe(|| P::init(Host { api: host })));
    let failure = match created {
        Ok(Ok(plugin)) => {
            let instance = Box::new(Instance {
                plugin: Mutex::new(plugin),
                poisoned: Mutex::new(None),
                panic_status,
            });
            if !out_instance.is_null() {
                *out_instance = Box::into_raw(instance) as *mut c_void;
            }
            return VOODU_STATUS_OK;
        }
        Ok(Err(message)) => message,
        Err(payload) => {
            write_failure(
                out,
                format!("panicked in init: {}", panic_message(&*payload)),
            );
            return panic_status;
        }
    };
    write_failure(out, failure);
    VOODU_STATUS_ERROR
}

/// The status a panic is reported with to `host`:
/// [`VOODU_STATUS_PANICKED`](crate::ffi::VOODU_STATUS_PANICKED) for a 1.3
/// host or later, [`VOODU_STATUS_ERROR`] for an older one, which does not
/// know it.
///
/// # Safety
/// `host` is NULL or the host's table, valid for the call.
unsafe fn panic_status_for(host: *const VooduHostApi) -> VooduStatus {
    if host.is_null() {
        return VOODU_STATUS_ERROR;
    }
    // SAFETY: non-null and valid, as the caller promises; `abi_version` is
    // in every table since 1.0.
    let version = unsafe { std::ptr::addr_of!((*host).abi_version).read() };
    let (major, minor) = (version >> 16, version & 0xffff);
    if major == crate::ffi::VOODU_ABI_VERSION_MAJOR && minor >= 3 {
        crate::ffi::VOODU_STATUS_PANICKED
    } else {
        VOODU_STATUS_ERROR
    }
}

/// The shared body of every JSON call: decode, run under `catch_unwind`,
/// encode, and poison the instance on a panic.
unsafe fn run_call<P, Req, Rep>(
    instance: *mut c_void,
    request: *const u8,
    request_len: usize,
    out: *mut VooduBuffer,
    call_name: &str,
    call: impl FnOnce(&mut P, Req) -> Result<Rep, PluginError>,
) -> VooduStatus
where
    P: Plugin,
    Req: DeserializeOwned,
    Rep: Serialize,
{
    if instance.is_null() {
        write_failure(out, format!("{call_name} called without an instance"));
        return VOODU_STATUS_ERROR;
    }
    // SAFETY: the host passes back the pointer `init_entry` produced.
    let instance = &*(instance as *const Instance<P>);
    let poisoned = instance
        .poisoned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(first_panic) = poisoned {
        write_failure(
            out,
            format!(
                "plugin {} is poisoned: an earlier call panicked ({first_panic}); \
                 it refuses every call until it is reloaded",
                P::NAME.to_string_lossy()
            ),
        );
        return instance.panic_status;
    }
    let bytes: &[u8] = if request.is_null() || request_len == 0 {
        &[]
    } else {
        // SAFETY: the host lends `request_len` bytes for the duration of the call.
        std::slice::from_raw_parts(request, request_len)
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let decoded: Req = serde_json::from_slice(bytes).map_err(|error| {
            PluginError::Failed(format!("malformed {call_name} request: {error}"))
        })?;
        let mut plugin = instance.plugin.lock().unwrap_or_else(|e| e.into_inner());
        let reply = call(&mut plugin, decoded)?;
        serde_json::to_vec(&reply).map_err(|error| {
            PluginError::Failed(format!("could not encode the {call_name} reply: {error}"))
        })
    }));
    match outcome {
        Ok(Ok(body)) => {
            write_out(out, body);
            VOODU_STATUS_OK
        }
        Ok(Err(PluginError::Refused(message))) => {
            write_failure(out, message);
            VOODU_STATUS_REFUSED
        }
        Ok(Err(PluginError::RefusedAt { pointer, message })) => {
            let failure = FailureReply {
                message,
                pointer: Some(pointer),
            };
            write_failure_reply(out, &failure);
            VOODU_STATUS_REFUSED
        }
        Ok(Err(PluginError::Failed(message))) => {
            write_failure(out, message);
            VOODU_STATUS_ERROR
        }
        Err(payload) => {
            let message = panic_message(&*payload);
            *instance.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
            write_failure(out, format!("panicked in {call_name}: {message}"));
            instance.panic_status
        }
    }
}

/// Defines one generic `extern "C"` call entry that decodes `$request`, runs
/// `$body` on the plugin, and encodes `$reply` through [`run_call`].
macro_rules! call_entry {
    ($entry:ident, $call:literal, $request:ty, $reply:ty, $body:expr) => {
        unsafe extern "C" fn $entry<P: Plugin>(
            instance: *mut c_void,
            request: *const u8,
            request_len: usize,
            out: *mut VooduBuffer,
        ) -> VooduStatus {
            run_call::<P, $request, $reply>(instance, request, request_len, out, $call, $body)
        }
    };
}

call_entry!(
    describe_entry,
    "describe",
    serde_json::Value,
    Option<serde_json::Value>,
    |plugin, _request| Ok(plugin.describe())
);
call_entry!(
    describe_settings_entry,
    "describe_settings",
    serde_json::Value,
    Option<serde_json::Value>,
    |plugin, _request| Ok(plugin.describe_settings())
);
call_entry!(
    configure_entry,
    "configure",
    ConfigureRequest,
    Empty,
    |plugin, request| plugin.configure(request.settings).map(|()| Empty {})
);
call_entry!(
    validate_entry,
    "validate",
    ValidateRequest,
    ValidateReply,
    |plugin, request| plugin.validate(request)
);
call_entry!(
    publish_entry,
    "publish",
    PublishRequest,
    Empty,
    |plugin, request| plugin.publish(request).map(|()| Empty {})
);
call_entry!(
    drain_entry,
    "drain",
    DrainRequest,
    DrainReply,
    |plugin, request| plugin.drain(request)
);
call_entry!(
    forget_entry,
    "forget",
    ForgetRequest,
    Empty,
    |plugin, request| plugin.forget(request).map(|()| Empty {})
);

unsafe extern "C" fn free_entry(_instance: *mut c_void, buffer: VooduBuffer) {
    if buffer.ptr.is_null() {
        return;
    }
    // SAFETY: `write_out` produced this pointer and length from a boxed slice.
    drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
        buffer.ptr, buffer.len,
    )));
}

unsafe extern "C" fn shutdown_entry<P: Plugin>(instance: *mut c_void) {
    if instance.is_null() {
        return;
    }
    // SAFETY: the host passes back the pointer `init_entry` produced, once.
    let instance = Box::from_raw(instance as *mut Instance<P>);
    let _ = catch_unwind(AssertUnwindSafe(move || {
        let mut plugin = instance.plugin.lock().unwrap_or_else(|e| e.into_inner());
        plugin.shutdown();
    }));
}

unsafe extern "C" fn get_extension_entry(
    _instance: *mut c_void,
    _name: *const std::ffi::c_char,
) -> *const c_void {
    std::ptr::null()
}

/// Exports a [`Plugin`] from a `cdylib` crate: the versioned C entry symbol
/// `voodu_plugin_entry_v1` and an abi_stable root module that references the
/// same vtable, so the host can check the layout before trusting it.
///
/// ```ignore
/// voodu_plugin_abi::export_plugin!(MyPlugin);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        static VOODU_PLUGIN_VTABLE: $crate::ffi::VooduPluginV1 = $crate::sdk::vtable::<$plugin>();

        /// The versioned C entry symbol of this voodu plugin.
        #[no_mangle]
        pub extern "C" fn voodu_plugin_entry_v1() -> *const $crate::ffi::VooduPluginV1 {
            &VOODU_PLUGIN_VTABLE
        }

        $crate::export_root_module_for!(voodu_plugin_entry_v1);
    };
}
