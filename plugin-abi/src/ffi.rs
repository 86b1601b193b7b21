//! The C view of the plugin ABI: every `#[repr(C)]` type a plugin and the host
//! exchange. `include/voodu_plugin.h` is generated from this file by cbindgen.
//!
//! # Ownership, in one paragraph
//!
//! The host owns every input buffer; a plugin may read it only during the call
//! that received it. The plugin owns every output buffer it writes into a
//! [`VooduBuffer`]; the host copies the bytes out and hands the buffer back to
//! the plugin's `free` member exactly once, on the same thread that made the
//! call. Strings in the vtable (`name`, `version`) are owned by the plugin and
//! must stay valid until the library is unloaded (in practice: static storage).
//!
//! # Threads, in one paragraph
//!
//! The host serialises every call into one plugin instance: `init`,
//! `validate`, `publish`, `drain`, `forget`, `free`, `get_extension` and
//! `shutdown` never run concurrently with each other for the same instance,
//! though successive calls may arrive on different host threads. A plugin may
//! start threads of its own. The host callbacks in [`VooduHostApi`] are
//! thread-safe and may be called from any thread, including the plugin's own,
//! until `shutdown` returns.

use std::ffi::{c_char, c_void};

use abi_stable::StableAbi;

/// The major version of this ABI. It is part of the entry symbol's name
/// (`voodu_plugin_entry_v1`); a host refuses any other major version.
pub const VOODU_ABI_VERSION_MAJOR: u32 = 1;

/// The minor version of this ABI. Minor versions only ever add trailing
/// members to [`VooduPluginV1`] or [`VooduHostApi`], so a plugin built against
/// any 1.x loads in any 1.y host.
///
/// - 1.0: `init`, `validate`, `publish`, `drain`, `forget`, `free`, `shutdown`.
/// - 1.1: adds the trailing `get_extension` member.
/// - 1.2: adds the host services `listen`, `unlisten` and `metric` to
///   [`VooduHostApi`], and the optional `describe` member to
///   [`VooduPluginV1`].
/// - 1.3: adds the host service `connections` to [`VooduHostApi`], the
///   status [`VOODU_STATUS_PANICKED`], and the optional plugin-wide
///   settings members `describe_settings` and `configure` to
///   [`VooduPluginV1`].
pub const VOODU_ABI_VERSION_MINOR: u32 = 3;

/// The value a plugin puts in [`VooduPluginV1::abi_version`]: the major
/// version in the high 16 bits, the minor version in the low 16 bits.
pub const VOODU_ABI_VERSION: u32 = (VOODU_ABI_VERSION_MAJOR << 16) | VOODU_ABI_VERSION_MINOR;

/// The largest reply, in bytes, the host accepts from any plugin call (16 MiB).
/// A larger reply is freed through the plugin's `free` member and the call
/// fails with an error that names the plugin, the call and both sizes.
pub const VOODU_MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// The outcome of a plugin call, returned by every call member.
///
/// A plain integer rather than a C enum, so that a plugin returning a value
/// outside the known set is a reportable error instead of undefined behaviour.
pub type VooduStatus = i32;

/// The call succeeded; the output buffer holds the reply JSON (it may be empty
/// for calls whose reply carries nothing, such as `publish` and `forget`).
pub const VOODU_STATUS_OK: VooduStatus = 0;

/// The plugin refused the input, for example an invalid block at `validate`.
/// The output buffer holds `{"message": "..."}`, which the host shows to the
/// operator as the plugin's own words. A refusal at `validate` about one
/// option may add `"pointer"`: the option as a JSON pointer (RFC 6901) into
/// the block's `spec`, such as `"/listen"` or `"/@blocks/0/spec/port"`; the
/// host then shows the operator that attribute's own file, line and column.
pub const VOODU_STATUS_REFUSED: VooduStatus = 1;

/// The plugin failed for a reason of its own (not the operator's input). The
/// output buffer holds `{"message": "..."}`.
pub const VOODU_STATUS_ERROR: VooduStatus = 2;

/// ABI 1.3: the plugin's own code panicked (a Rust panic, a C++ exception)
/// in this call, or did in an earlier one and the instance now refuses
/// every call until it is reloaded (it is poisoned). The output buffer
/// holds `{"message": "..."}`, the panic's words. The host counts it as a
/// panic (never by reading the message) and shows the plugin as poisoned.
/// A plugin sends it only to a host whose `abi_version` is 1.3 or later
/// (an older host takes 3 for an unknown status): send
/// [`VOODU_STATUS_ERROR`] there. The Rust SDK does both.
pub const VOODU_STATUS_PANICKED: VooduStatus = 3;

/// The severity of a log line a plugin sends through [`VooduHostApi::log`].
pub type VooduLogLevel = u32;

/// An error: something failed and an operator should look.
pub const VOODU_LOG_ERROR: VooduLogLevel = 1;
/// A warning: something surprising that the plugin worked around.
pub const VOODU_LOG_WARN: VooduLogLevel = 2;
/// Information about normal operation.
pub const VOODU_LOG_INFO: VooduLogLevel = 3;
/// Detail useful when debugging the plugin.
pub const VOODU_LOG_DEBUG: VooduLogLevel = 4;
/// Very verbose detail.
pub const VOODU_LOG_TRACE: VooduLogLevel = 5;

/// A byte buffer allocated by the plugin and returned to the host through an
/// out-parameter.
///
/// Ownership: the plugin allocates `ptr` (with any allocator it likes) and
/// writes the buffer into the out-parameter before returning. From then on the
/// host owns the buffer until it passes it back, unchanged, to the plugin's
/// `free` member, which it does exactly once. The host writes
/// `{NULL, 0}` into the out-parameter before every call, so a plugin that
/// writes nothing returns an empty reply; the host never passes an empty
/// buffer (`ptr == NULL`) to `free`.
#[repr(C)]
#[derive(Debug, Clone, Copy, StableAbi)]
pub struct VooduBuffer {
    /// The first byte, or NULL for an empty buffer. Owned by the plugin.
    pub ptr: *mut u8,
    /// The number of bytes at `ptr`.
    pub len: usize,
}

impl VooduBuffer {
    /// The empty buffer the host writes into every out-parameter before a call.
    pub const EMPTY: VooduBuffer = VooduBuffer {
        ptr: std::ptr::null_mut(),
        len: 0,
    };
}

/// The log callback: `host_ctx` is [`VooduHostApi::host_ctx`]; `message`
/// points to `message_len` bytes of UTF-8 (invalid sequences are replaced),
/// borrowed for the duration of the call only. Thread-safe; callable from any
/// thread until the plugin's `shutdown` returns.
pub type VooduLogFn = Option<
    unsafe extern "C" fn(
        host_ctx: *mut c_void,
        level: VooduLogLevel,
        message: *const u8,
        message_len: usize,
    ),
>;

/// A flag of [`VooduHostApi::listen`]: the socket is bound with
/// `SO_REUSEPORT`, so several processes on one host may listen on the
/// address (several voodu nodes on one machine, say).
pub const VOODU_LISTEN_REUSE_PORT: u32 = 1;

/// The `listen` host service (ABI 1.2): a listening TCP socket on `address`,
/// held by the host.
///
/// - `address` points to `address_len` bytes of `IP:port` (`0.0.0.0:8084`,
///   `[::]:8084`), not NUL-terminated, borrowed for the call only.
/// - `flags` is 0 or [`VOODU_LISTEN_REUSE_PORT`].
/// - On [`VOODU_STATUS_OK`] the host writes a new file descriptor into
///   `*out_fd`. **The plugin owns that descriptor**: it accepts on it and
///   `close(2)`s it when done. It must never `shutdown(2)` it, since the
///   host (and any other instance of the plugin) holds the same socket, and
///   it should leave the descriptor's `O_NONBLOCK` as it finds it (set),
///   since that flag is shared by every holder.
/// - The host keeps its own copy of the socket. The same plugin asking for
///   the same address again (a reloaded or replaced instance) gets a
///   descriptor of **the same socket**, never a new bind, so connections
///   that arrive meanwhile wait in its backlog instead of being refused. An
///   address held for another plugin is refused.
/// - On any other status nothing is written to `*out_fd`, and the host
///   writes a NUL-terminated reason into `message` (at most `message_cap`
///   bytes, cut if longer; nothing when `message` is NULL).
///
/// Thread-safe; callable from any thread until the plugin's `shutdown`
/// returns. A plugin must check `struct_size` before calling it: a 1.0 or
/// 1.1 host has no such member, and the plugin binds the socket itself.
pub type VooduListenFn = Option<
    unsafe extern "C" fn(
        host_ctx: *mut c_void,
        address: *const u8,
        address_len: usize,
        flags: u32,
        out_fd: *mut i32,
        message: *mut c_char,
        message_cap: usize,
    ) -> VooduStatus,
>;

/// The `unlisten` host service (ABI 1.2): the plugin no longer wants the
/// socket it asked for on `address` (`address_len` bytes, borrowed), for
/// example because the block that used it was forgotten. The host closes its
/// copy, so the port is free once the plugin has closed its own descriptors;
/// an address the plugin does not hold is ignored. Thread-safe.
pub type VooduUnlistenFn =
    Option<unsafe extern "C" fn(host_ctx: *mut c_void, address: *const u8, address_len: usize)>;

/// A kind of [`VooduHostApi::metric`]: a counter; `value` (at least 0) is
/// added to it.
pub const VOODU_METRIC_COUNTER: u32 = 1;

/// A kind of [`VooduHostApi::metric`]: a gauge; `value` replaces it.
pub const VOODU_METRIC_GAUGE: u32 = 2;

/// The most metrics one plugin may report; a new name beyond them is
/// refused.
pub const VOODU_MAX_PLUGIN_METRICS: u32 = 64;

/// The `metric` host service (ABI 1.2): reports one of the plugin's own
/// metrics, exposed on the controller's `/metrics` as
/// `voodu_plugin_<plugin>_<name>` (a counter with `_total` after it).
///
/// - `name` points to `name_len` bytes, borrowed for the call only: 1 to 64
///   of `a-z`, `0-9` and `_`, starting with a letter (`connections_open`).
///   A counter's name may end in `_total`; it is exposed once either way.
/// - `kind` is [`VOODU_METRIC_COUNTER`] (`value`, finite and at least 0, is
///   added) or [`VOODU_METRIC_GAUGE`] (`value`, finite, replaces the last).
///   A name keeps the kind it was first reported with.
/// - Metrics have no labels: their values are the plugin's totals, so a
///   scrape's cost stays bounded. At most [`VOODU_MAX_PLUGIN_METRICS`]
///   names per plugin.
/// - Returns [`VOODU_STATUS_OK`], or [`VOODU_STATUS_REFUSED`] for a bad
///   name, kind or value, or one name too many (nothing is recorded; the
///   host logs why once per name).
///
/// Cheap (a map update under a lock, no I/O) and thread-safe; callable from
/// any thread until the plugin's `shutdown` returns. A plugin must check
/// `struct_size` first: an older host has no such member.
pub type VooduMetricFn = Option<
    unsafe extern "C" fn(
        host_ctx: *mut c_void,
        name: *const u8,
        name_len: usize,
        kind: u32,
        value: f64,
    ) -> VooduStatus,
>;

/// The `connections` host service (ABI 1.3): how many established TCP
/// connections are open to `address`, held by the controller's process or
/// by a process the plugin names. A balancer asks it before answering a
/// drain `drained`, instead of reading the kernel's socket table itself.
///
/// - `address` points to `address_len` bytes of the remote end, `IP:port`
///   (a replica's `address` as publish and drain requests give it), not
///   NUL-terminated, borrowed for the call only. A name is not resolved.
/// - `pid` 0 counts the connections the controller's own process holds
///   (those a plugin opens itself, as traffik does). A `pid` above 0 counts
///   those held by that process **or any process descended from it** (an
///   nginx or HAProxy the plugin runs: its master and its workers).
/// - On [`VOODU_STATUS_OK`] the host writes the count into `*out_count`.
///   [`VOODU_STATUS_REFUSED`]: `address` is not `IP:port`, or no process
///   `pid` runs. [`VOODU_STATUS_ERROR`]: the kernel's socket table or the
///   process's descriptors could not be read (another user's process,
///   without the right to). On either, nothing is written to `*out_count`
///   and the host writes a NUL-terminated reason into `message` (at most
///   `message_cap` bytes, cut if longer; nothing when `message` is NULL).
/// - Counted in the controller's network namespace, from the kernel's
///   socket diagnostics (`sock_diag`) filtered by the port, so its cost does
///   not grow with the thousands of TIME_WAIT sockets a busy host has; a
///   connection is counted when one of the processes holds its socket.
///
/// Thread-safe; callable from any thread until the plugin's `shutdown`
/// returns. A plugin must check `struct_size` first: an older host has no
/// such member.
pub type VooduConnectionsFn = Option<
    unsafe extern "C" fn(
        host_ctx: *mut c_void,
        address: *const u8,
        address_len: usize,
        pid: i32,
        out_count: *mut u64,
        message: *mut c_char,
        message_cap: usize,
    ) -> VooduStatus,
>;

/// The table of host callbacks handed to the plugin's `init`.
///
/// Ownership: the host owns the table and `host_ctx`; both stay valid from
/// `init` for the rest of the process (the host never frees them, since
/// plugin threads may outlive the instance), so a plugin may keep the
/// pointer. A plugin must check `struct_size` before reading a member added
/// after 1.0.
#[repr(C)]
#[derive(StableAbi)]
pub struct VooduHostApi {
    /// [`VOODU_ABI_VERSION`] of the host.
    pub abi_version: u32,
    /// `sizeof(VooduHostApi)` as the host compiled it. A member lies beyond the
    /// host's table, and must not be read, when its offset is not below this.
    pub struct_size: u32,
    /// Opaque host state; pass it back as the first argument of every callback.
    pub host_ctx: *mut c_void,
    /// Write one line to the controller's log, tagged with the plugin's name.
    /// See [`VooduLogFn`]; spelled out here so abi_stable can check it.
    pub log: Option<
        unsafe extern "C" fn(
            host_ctx: *mut c_void,
            level: VooduLogLevel,
            message: *const u8,
            message_len: usize,
        ),
    >,
    /// ABI 1.2: a listening TCP socket held by the host. See
    /// [`VooduListenFn`]; spelled out here so abi_stable can check it.
    pub listen: Option<
        unsafe extern "C" fn(
            host_ctx: *mut c_void,
            address: *const u8,
            address_len: usize,
            flags: u32,
            out_fd: *mut i32,
            message: *mut c_char,
            message_cap: usize,
        ) -> VooduStatus,
    >,
    /// ABI 1.2: give back a socket asked for with `listen`. See
    /// [`VooduUnlistenFn`].
    pub unlisten:
        Option<unsafe extern "C" fn(host_ctx: *mut c_void, address: *const u8, address_len: usize)>,
    /// ABI 1.2: report one of the plugin's own metrics. See
    /// [`VooduMetricFn`].
    pub metric: Option<
        unsafe extern "C" fn(
            host_ctx: *mut c_void,
            name: *const u8,
            name_len: usize,
            kind: u32,
            value: f64,
        ) -> VooduStatus,
    >,
    /// ABI 1.3: the connections open to an address. See
    /// [`VooduConnectionsFn`].
    pub connections: Option<
        unsafe extern "C" fn(
            host_ctx: *mut c_void,
            address: *const u8,
            address_len: usize,
            pid: i32,
            out_count: *mut u64,
            message: *mut c_char,
            message_cap: usize,
        ) -> VooduStatus,
    >,
}

// SAFETY: the table is immutable once built and its callbacks are documented
// as thread-safe; `host_ctx` is only ever passed back to them.
unsafe impl Sync for VooduHostApi {}
// SAFETY: as above.
unsafe impl Send for VooduHostApi {}

/// `init`: create the plugin instance.
///
/// - `host`: the host callbacks, valid until `shutdown` returns (keep it).
/// - `out_instance`: where the plugin writes its instance pointer, which the
///   host passes back, untouched, to every later call. The plugin owns what it
///   points to and frees it in `shutdown`. NULL is a valid instance.
/// - `out`: on a status other than OK, `{"message": ...}` explaining why.
///
/// Called once, first, before any other member but `free`.
pub type VooduInitFn = Option<
    unsafe extern "C" fn(
        host: *const VooduHostApi,
        out_instance: *mut *mut c_void,
        out: *mut VooduBuffer,
    ) -> VooduStatus,
>;

/// `validate`, `publish`, `drain` and `forget`: one JSON request in, one JSON
/// reply out.
///
/// - `instance`: what `init` wrote into `out_instance`.
/// - `request`, `request_len`: the request JSON, owned by the host and valid
///   only until this call returns. Not NUL-terminated.
/// - `out`: where the plugin writes its reply; see [`VooduBuffer`] for who
///   frees it. On REFUSED or ERROR the reply is `{"message": ...}` (a
///   refusal may name the option at fault, `"pointer": "/listen"`: see
///   [`VOODU_STATUS_REFUSED`]).
///
/// The host waits a bounded time for the call to return. A call that overruns
/// marks the plugin wedged: the host sends it no other call until it is
/// reloaded (only `shutdown`, queued behind the stuck call).
pub type VooduCallFn = Option<
    unsafe extern "C" fn(
        instance: *mut c_void,
        request: *const u8,
        request_len: usize,
        out: *mut VooduBuffer,
    ) -> VooduStatus,
>;

/// `free`: release a buffer this plugin returned through an out-parameter.
/// Called exactly once per non-empty buffer, on the host thread that made the
/// call which produced it. `instance` may be NULL when the buffer came from a
/// failed `init`.
pub type VooduFreeFn = Option<unsafe extern "C" fn(instance: *mut c_void, buffer: VooduBuffer)>;

/// `shutdown`: release the instance and stop every thread the plugin started.
/// Called only after a successful `init`. After it returns the host calls
/// nothing more on this instance. For a wedged plugin it is queued behind the
/// stuck call and runs only if that call ever returns.
///
/// A plugin that carries connections may stop accepting and let the open
/// ones finish first, for as long as the host's environment variable
/// `VOODU_SHUTDOWN_GRACE_MS` says (milliseconds, [`SHUTDOWN_GRACE_ENV`]):
/// the controller sets it from `--upgrade-timeout`, and waits that long for
/// `shutdown` when the controller's worker stops (an upgrade, or SIGTERM).
/// When it is unset, finish within the plugin call bound (5 s by default).
pub type VooduShutdownFn = Option<unsafe extern "C" fn(instance: *mut c_void)>;

/// The environment variable that tells a plugin's `shutdown` how long it may
/// let open connections finish, in milliseconds (see [`VooduShutdownFn`]).
pub const SHUTDOWN_GRACE_ENV: &str = "VOODU_SHUTDOWN_GRACE_MS";

/// The environment variable that, under `vd plugins:check`, names a
/// directory of the check's own: a plugin that writes files of its own (a
/// configuration, a pid file) writes them there while it is set, never
/// where a live controller's plugin would.
pub const SCRATCH_DIR_ENV: &str = "VOODU_SCRATCH_DIR";

/// The environment variable that, under `vd plugins:check`, names ports a
/// plugin may listen on for listeners of its own (outside the host's
/// `listen`): `FIRST-LAST`, inclusive.
pub const PORT_RANGE_ENV: &str = "VOODU_PORT_RANGE";

/// `get_extension` (ABI 1.1): look up an optional capability by its
/// NUL-terminated name (borrowed for the call). Returns a pointer to a table
/// the plugin owns and keeps valid until `shutdown`, or NULL when the plugin
/// does not know the name. No extension is defined yet; hosts use this to add
/// capabilities without changing the vtable again.
pub type VooduGetExtensionFn =
    Option<unsafe extern "C" fn(instance: *mut c_void, name: *const c_char) -> *const c_void>;

/// The plugin's vtable, returned by its entry symbol `voodu_plugin_entry_v1`.
///
/// Ownership: the plugin owns the table and the strings it points to; all
/// must stay valid, unchanged, for as long as the library is loaded (use
/// static storage). The host reads it from any thread.
///
/// The layout up to and including `shutdown` is frozen as ABI 1.0. Members
/// added later are appended, and the host reads one only when `struct_size`
/// shows the plugin's table reaches past it. A NULL member means "not
/// supported": a NULL `publish` or `forget` is a no-op, a NULL `drain` always
/// answers drained. `init`, `validate` and `free` are required.
#[repr(C)]
pub struct VooduPluginV1 {
    /// [`VOODU_ABI_VERSION`] as the plugin was built. The host refuses a major
    /// version other than its own.
    pub abi_version: u32,
    /// `sizeof(VooduPluginV1)` as the plugin was built.
    pub struct_size: u32,
    /// The plugin's name: the block type it owns (`traffik` owns `traffik {}`
    /// blocks). NUL-terminated, non-empty, `[a-z0-9_-]`, static storage.
    pub name: *const c_char,
    /// The plugin's own version, NUL-terminated, static storage.
    pub version: *const c_char,
    /// Create the instance. Required.
    pub init: VooduInitFn,
    /// Validate and normalise one block at apply time. Required.
    ///
    /// The request's `block.spec` is the block's body in voodu's lossless
    /// encoding: each attribute a key, in source order; nested blocks, if
    /// any, an array under the key `"@blocks"`, in source order, each
    /// `{"type", "labels"?, "spec"}` with its own body encoded the same way.
    /// Integers arrive exactly from -2^63 to 2^64-1, other numbers as
    /// doubles that read back to what was written; anything else was
    /// refused at apply. The reply's `endpoints` names the port (default:
    /// the workload's first container port; with neither, the block is
    /// refused) and `ip`, `dns`, `host` or `none` addressing (`host`: the
    /// replica's node address and published host port, in a cluster;
    /// `none`: no publish, no drain). In a cluster each published endpoint
    /// also names its `node`, an optional member. The reply's optional
    /// `claims` lists what the block must hold alone, as
    /// `{"kind": "listen", "protocol": "tcp"|"udp", "address": "IP:port"}`
    /// (the address the plugin, or a process it runs, listens on): an apply
    /// in which another block claims an overlapping address (the same one,
    /// or the unspecified one on the same port) is refused whole, naming
    /// both blocks. The plugin must accept its own normalised spec unchanged:
    /// a replacing version re-validates every stored spec.
    pub validate: VooduCallFn,
    /// Receive the live endpoint set of one block after a reconcile.
    pub publish: VooduCallFn,
    /// Drain one replica before it is removed.
    pub drain: VooduCallFn,
    /// Forget one block: its workload was deleted or the block removed.
    pub forget: VooduCallFn,
    /// Free a buffer this plugin returned. Required.
    pub free: VooduFreeFn,
    /// Release the instance.
    pub shutdown: VooduShutdownFn,
    /// ABI 1.1: look up an optional capability by name.
    pub get_extension: VooduGetExtensionFn,
    /// ABI 1.2, optional: describe the block's options as a JSON Schema, for
    /// `vd explain` and for "did you mean" at apply. The request is `{}`
    /// (members may be added); the reply is an object schema:
    /// `{"type": "object", "description": "...", "properties": {"port":
    /// {"type": "integer", "description": "...", "default": 8084}, ...},
    /// "required": ["port"], "additionalProperties": false}`. Each property
    /// has a `type` (a JSON type name, or an array of them) and a one-line
    /// `description`, and may state a `default`, which validate must
    /// accept. An empty reply means no schema. NULL: the plugin describes
    /// nothing. Owned and freed as every reply.
    pub describe: VooduCallFn,
    /// ABI 1.3, optional: describe the plugin-wide settings (not per block:
    /// a binary's path, a directory, a default certificate) as a JSON
    /// Schema of the same shape as `describe`'s. The request is `{}`; an
    /// empty reply, or NULL, means the plugin takes no settings, and the
    /// host then never calls `configure`. Owned and freed as every reply.
    pub describe_settings: VooduCallFn,
    /// ABI 1.3, optional: take the plugin-wide settings. The request is
    /// `{"settings": {...}}`, the whole settings object as the operator
    /// gave it (`vd plugins:install --settings FILE`, `vd plugins:settings
    /// NAME FILE`), already checked against `describe_settings`' schema;
    /// `{}` when none were given. The host calls it right after `init`,
    /// before any other call but `describe` and `describe_settings`, and
    /// again each time the operator changes them, never while another call
    /// runs. OK (reply empty or `{}`): the plugin uses them from the next
    /// call on. REFUSED (`{"message", "pointer"?}`, the pointer into the
    /// settings): they are not taken, and the plugin keeps the ones it had
    /// (at load, it is not loaded). Called only when `describe_settings`
    /// describes settings.
    pub configure: VooduCallFn,
}

// SAFETY: the vtable is immutable after construction; it holds function
// pointers and pointers to static, immutable strings, so sharing it between
// threads is sound.
unsafe impl Sync for VooduPluginV1 {}
// SAFETY: see `Sync` above; nothing in the table is tied to a thread.
unsafe impl Send for VooduPluginV1 {}

/// The signature of the entry symbol `voodu_plugin_entry_v1`: returns the
/// plugin's vtable, owned by the plugin, valid while the library is loaded.
/// Callable from any thread; must not fail and must not call the host.
pub type VooduPluginEntryV1 = unsafe extern "C" fn() -> *const VooduPluginV1;

/// The name of the entry symbol every v1 plugin exports.
pub const VOODU_PLUGIN_ENTRY_V1_SYMBOL: &str = "voodu_plugin_entry_v1";

/// The size of the ABI 1.0 part of [`VooduPluginV1`]: every member up to and
/// including `shutdown`. A vtable whose `struct_size` is smaller is refused.
pub const VOODU_PLUGIN_V1_0_SIZE: usize =
    std::mem::offset_of!(VooduPluginV1, shutdown) + std::mem::size_of::<VooduShutdownFn>();

extern "C" {
    /// The entry symbol every v1 plugin defines (see [`VooduPluginEntryV1`]).
    /// Returns the plugin's vtable, owned by the plugin and valid, unchanged,
    /// while the library is loaded. Callable from any thread; it must not fail
    /// and must not call the host. Declared here for the C header only: the
    /// host looks it up by name and never links against it.
    pub fn voodu_plugin_entry_v1() -> *const VooduPluginV1;
}
