//! The callback table the host hands to every plugin's `init`: logging,
//! the listening sockets the host holds (ABI 1.2), the plugin's metrics
//! (ABI 1.2) and the connections open to an address (ABI 1.3).
//!
//! Logging is rate-limited per plugin ([`LOG_LINES_PER_SECOND`], bursts
//! of [`LOG_BURST`]) and each line is cut at [`MAX_LOG_LINE_BYTES`], so a
//! plugin that logs in a loop cannot fill the disk or starve the
//! controller; what is dropped is counted ([`LogLimiter::dropped`], shown
//! by `vd plugins:list`) and said in the log at most once a second.
//!
//! Each plugin gets its own table and context, allocated once at load and
//! never freed: a plugin may call back from its own threads until `shutdown`
//! returns, and a wedged plugin may never return from it, so the few bytes
//! are deliberately leaked alongside the (never unloaded) library.

use std::ffi::{c_char, c_void};
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use voodu_plugin_abi::ffi::{
    VooduHostApi, VooduLogLevel, VooduStatus, VOODU_ABI_VERSION, VOODU_LISTEN_REUSE_PORT,
    VOODU_LOG_DEBUG, VOODU_LOG_ERROR, VOODU_LOG_INFO, VOODU_LOG_WARN, VOODU_STATUS_ERROR,
    VOODU_STATUS_OK, VOODU_STATUS_REFUSED,
};

use crate::listeners::ListenerTable;

/// The steady rate of log lines a plugin may write.
pub const LOG_LINES_PER_SECOND: f64 = 100.0;
/// How many lines a plugin may write at once above the steady rate.
pub const LOG_BURST: f64 = 500.0;
/// The longest log line kept, in bytes; the rest is cut.
pub const MAX_LOG_LINE_BYTES: usize = 4096;

/// A token bucket over one plugin's log lines. Written here rather than
/// taken from a rate-limiting crate so that the embeddable plugin host
/// keeps its small dependency tree; it is a dozen lines.
#[derive(Debug)]
pub struct LogLimiter {
    bucket: Mutex<Bucket>,
    dropped: AtomicU64,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
    /// Dropped lines not yet said in the log, and when that was last said.
    unreported: u64,
    reported: Option<Instant>,
}

/// What to do with one line.
enum Verdict {
    /// Log it; first say that `dropped` lines were dropped, if any.
    Log { dropped: u64 },
    /// Drop it.
    Drop,
}

impl LogLimiter {
    fn new() -> Self {
        LogLimiter {
            bucket: Mutex::new(Bucket {
                tokens: LOG_BURST,
                refilled: Instant::now(),
                unreported: 0,
                reported: None,
            }),
            dropped: AtomicU64::new(0),
        }
    }

    /// How many lines this plugin's log has dropped since it was loaded.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn admit(&self) -> Verdict {
        let mut bucket = self.bucket.lock();
        let now = Instant::now();
        let earned = now.duration_since(bucket.refilled).as_secs_f64() * LOG_LINES_PER_SECOND;
        bucket.tokens = (bucket.tokens + earned).min(LOG_BURST);
        bucket.refilled = now;
        if bucket.tokens < 1.0 {
            bucket.unreported += 1;
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Verdict::Drop;
        }
        bucket.tokens -= 1.0;
        let due = bucket
            .reported
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1));
        if bucket.unreported > 0 && due {
            let dropped = std::mem::take(&mut bucket.unreported);
            bucket.reported = Some(now);
            Verdict::Log { dropped }
        } else {
            Verdict::Log { dropped: 0 }
        }
    }
}

/// What a callback needs to know about the plugin calling it.
struct CallbackContext {
    plugin: String,
    limiter: LogLimiter,
    /// The metric names whose refusal was logged, so each is said once.
    refused_metrics: Mutex<std::collections::HashSet<String>>,
}

/// Builds the callback table for plugin `plugin`. The returned table and its
/// context live for the rest of the process; the limiter is the plugin's
/// log rate limit, for its handle to report.
pub fn leak_host_api(plugin: &str) -> (&'static VooduHostApi, &'static LogLimiter) {
    let context: &'static CallbackContext = Box::leak(Box::new(CallbackContext {
        plugin: plugin.to_owned(),
        limiter: LogLimiter::new(),
        refused_metrics: Mutex::new(std::collections::HashSet::new()),
    }));
    let api = Box::leak(Box::new(VooduHostApi {
        abi_version: VOODU_ABI_VERSION,
        struct_size: std::mem::size_of::<VooduHostApi>() as u32,
        host_ctx: context as *const CallbackContext as *mut c_void,
        log: Some(log_from_plugin),
        listen: Some(listen_for_plugin),
        unlisten: Some(unlisten_for_plugin),
        metric: Some(metric_for_plugin),
        connections: Some(connections_for_plugin),
    }));
    // Kept in a list of the process's, so that a leak checker (`vd
    // plugins:check --valgrind`) counts the tables as the host's, still
    // reachable, and a plugin that keeps no pointer to its table is not
    // blamed for them.
    HANDED_OUT.lock().push(api as *const VooduHostApi as usize);
    (api, &context.limiter)
}

/// The address of every host table handed out; they live for the process.
static HANDED_OUT: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A log line or metric a plugin reported, as it is handed to
/// [`forward_to`]'s receiver.
pub(crate) enum Forwarded<'a> {
    /// A log line, at most [`MAX_LOG_LINE_BYTES`] and one byte (so the
    /// receiver still marks it cut).
    Log {
        /// Its `VooduLogLevel`.
        level: VooduLogLevel,
        /// The line's bytes.
        line: &'a [u8],
    },
    /// A metric report of a known kind.
    Metric {
        /// The metric's name.
        name: &'a str,
        /// Its `VooduMetricKind`.
        kind: u32,
        /// The value.
        value: f64,
    },
}

/// Where this process's plugins' log lines and metrics go instead of its
/// own services: set in an out-of-process plugin's child, which hands them
/// to its parent.
static FORWARD: OnceLock<fn(Forwarded<'_>)> = OnceLock::new();

/// Sends every plugin log line and metric of this process to `receiver`
/// from now on (once per process).
pub(crate) fn forward_to(receiver: fn(Forwarded<'_>)) {
    let _ = FORWARD.set(receiver);
}

/// The `log` callback: forwards one line to `tracing`, tagged with the
/// plugin's name, under the target `voodu::plugin`.
unsafe extern "C" fn log_from_plugin(
    host_ctx: *mut c_void,
    level: VooduLogLevel,
    message: *const u8,
    message_len: usize,
) {
    if host_ctx.is_null() {
        return;
    }
    if let Some(forward) = FORWARD.get() {
        let line = if message.is_null() {
            &[][..]
        } else {
            // SAFETY: the plugin lends `message_len` bytes for this call.
            let bytes = unsafe { std::slice::from_raw_parts(message, message_len) };
            &bytes[..bytes.len().min(MAX_LOG_LINE_BYTES + 1)]
        };
        forward(Forwarded::Log { level, line });
        return;
    }
    // SAFETY: `host_ctx` is the leaked `CallbackContext` from `leak_host_api`.
    let context = unsafe { &*(host_ctx as *const CallbackContext) };
    let plugin = context.plugin.as_str();
    match context.limiter.admit() {
        Verdict::Drop => return,
        Verdict::Log { dropped: 0 } => {}
        Verdict::Log { dropped } => tracing::warn!(
            target: "voodu::plugin",
            plugin,
            dropped,
            "the plugin logs faster than {LOG_LINES_PER_SECOND} lines a second; {dropped} lines were dropped"
        ),
    }
    let text = if message.is_null() || message_len == 0 {
        String::new()
    } else {
        // SAFETY: the plugin lends `message_len` bytes for this call.
        let bytes = unsafe { std::slice::from_raw_parts(message, message_len) };
        let kept = &bytes[..bytes.len().min(MAX_LOG_LINE_BYTES)];
        let mut text = String::from_utf8_lossy(kept).into_owned();
        if kept.len() < bytes.len() {
            text.push_str(" [cut]");
        }
        text
    };
    match level {
        VOODU_LOG_ERROR => tracing::error!(target: "voodu::plugin", plugin, "{text}"),
        VOODU_LOG_WARN => tracing::warn!(target: "voodu::plugin", plugin, "{text}"),
        VOODU_LOG_INFO => tracing::info!(target: "voodu::plugin", plugin, "{text}"),
        VOODU_LOG_DEBUG => tracing::debug!(target: "voodu::plugin", plugin, "{text}"),
        _ => tracing::trace!(target: "voodu::plugin", plugin, "{text}"),
    }
}

/// The plugin's context behind `host_ctx`, or `None` for a NULL one.
///
/// # Safety
/// `host_ctx` is NULL or the leaked `CallbackContext` of [`leak_host_api`].
unsafe fn context_of<'a>(host_ctx: *mut c_void) -> Option<&'a CallbackContext> {
    // SAFETY: as the caller promises.
    (!host_ctx.is_null()).then(|| unsafe { &*(host_ctx as *const CallbackContext) })
}

/// The `address_len` bytes at `address` as text, lossily.
///
/// # Safety
/// `address` is NULL or points to `address_len` readable bytes.
unsafe fn borrowed_text(address: *const u8, address_len: usize) -> String {
    if address.is_null() || address_len == 0 {
        return String::new();
    }
    // SAFETY: as the caller promises.
    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(address, address_len) })
        .into_owned()
}

/// The calling plugin's context and the text it lends (`text_len` bytes
/// at `text`, lossily), for a callback that takes both; `None` for a NULL
/// context.
///
/// # Safety
/// As [`context_of`] and [`borrowed_text`].
unsafe fn context_and_text<'a>(
    host_ctx: *mut c_void,
    text: *const u8,
    text_len: usize,
) -> Option<(&'a CallbackContext, String)> {
    // SAFETY: as the caller promises.
    let context = unsafe { context_of(host_ctx) }?;
    // SAFETY: as the caller promises.
    Some((context, unsafe { borrowed_text(text, text_len) }))
}

/// The `listen` host service (ABI 1.2): a descriptor of the socket held
/// for the calling plugin on the address (see `VooduListenFn` for who owns
/// what).
unsafe extern "C" fn listen_for_plugin(
    host_ctx: *mut c_void,
    address: *const u8,
    address_len: usize,
    flags: u32,
    out_fd: *mut i32,
    message: *mut c_char,
    message_cap: usize,
) -> VooduStatus {
    // SAFETY: the table hands out only its own context; the plugin lends
    // `address_len` bytes for the call.
    let Some((context, address)) = (unsafe { context_and_text(host_ctx, address, address_len) })
    else {
        return VOODU_STATUS_ERROR;
    };
    let reuse_port = flags & VOODU_LISTEN_REUSE_PORT != 0;
    let refused = match ListenerTable::process().listen(&context.plugin, &address, reuse_port) {
        Ok(socket) if !out_fd.is_null() => {
            // SAFETY: the plugin passes room for one descriptor.
            unsafe { out_fd.write(socket.into_raw_fd()) };
            return VOODU_STATUS_OK;
        }
        Ok(_) => "out_fd is NULL: pass room for the descriptor".to_owned(),
        Err(error) => error.to_string(),
    };
    tracing::warn!(plugin = %context.plugin, %address, "no listener for the plugin: {refused}");
    // SAFETY: the plugin lends `message_cap` writable bytes, or NULL.
    unsafe { write_message(message, message_cap, &refused) };
    VOODU_STATUS_ERROR
}

/// The `unlisten` host service (ABI 1.2).
unsafe extern "C" fn unlisten_for_plugin(
    host_ctx: *mut c_void,
    address: *const u8,
    address_len: usize,
) {
    // SAFETY: the table hands out only its own context.
    if let Some(context) = unsafe { context_of(host_ctx) } {
        // SAFETY: the plugin lends `address_len` bytes for the call.
        let address = unsafe { borrowed_text(address, address_len) };
        ListenerTable::process().unlisten(&context.plugin, &address);
    }
}

/// The `metric` host service (ABI 1.2): records one report of the
/// plugin's own metric (see `VooduMetricFn`).
unsafe extern "C" fn metric_for_plugin(
    host_ctx: *mut c_void,
    name: *const u8,
    name_len: usize,
    kind: u32,
    value: f64,
) -> VooduStatus {
    use crate::plugin_metrics::{record, MetricKind, MetricRefusal};
    // SAFETY: the table hands out only its own context.
    let Some(context) = (unsafe { context_of(host_ctx) }) else {
        return VOODU_STATUS_ERROR;
    };
    // SAFETY: the plugin lends `name_len` bytes for the call.
    let name = unsafe { borrowed_text(name, name_len) };
    if let Some(forward) = FORWARD.get() {
        if MetricKind::from_ffi(kind).is_none() {
            return VOODU_STATUS_REFUSED;
        }
        forward(Forwarded::Metric {
            name: &name,
            kind,
            value,
        });
        return VOODU_STATUS_OK;
    }
    let recorded = match MetricKind::from_ffi(kind) {
        Some(kind) => record(&context.plugin, &name, kind, value),
        None => Err(MetricRefusal::BadKind(kind)),
    };
    match recorded {
        Ok(()) => VOODU_STATUS_OK,
        Err(refusal) => {
            if context.refused_metrics.lock().insert(name) {
                tracing::warn!(plugin = %context.plugin, "a metric the plugin reported was refused: {refusal}");
            }
            VOODU_STATUS_REFUSED
        }
    }
}

/// The `connections` host service (ABI 1.3): the established TCP
/// connections to an address that this process, or a process tree the
/// plugin names, holds (see `VooduConnectionsFn`).
unsafe extern "C" fn connections_for_plugin(
    host_ctx: *mut c_void,
    address: *const u8,
    address_len: usize,
    pid: i32,
    out_count: *mut u64,
    message: *mut c_char,
    message_cap: usize,
) -> VooduStatus {
    use crate::socket_table::{connections_to, Holder};
    // SAFETY: the table hands out only its own context; the plugin lends
    // `address_len` bytes for the call.
    let Some((context, address)) = (unsafe { context_and_text(host_ctx, address, address_len) })
    else {
        return VOODU_STATUS_ERROR;
    };
    let counted = Holder::from_ffi(pid).and_then(|holder| connections_to(&address, holder));
    let (status, why) = match counted {
        Ok(count) if !out_count.is_null() => {
            // SAFETY: the plugin passes room for one count.
            unsafe { out_count.write(count as u64) };
            return VOODU_STATUS_OK;
        }
        Ok(_) => (
            VOODU_STATUS_REFUSED,
            "out_count is NULL: pass room for the count".to_owned(),
        ),
        Err(error) if error.is_refusal() => (VOODU_STATUS_REFUSED, error.to_string()),
        Err(error) => {
            tracing::warn!(plugin = %context.plugin, %address, "the connections could not be counted: {error}");
            (VOODU_STATUS_ERROR, error.to_string())
        }
    };
    // SAFETY: the plugin lends `message_cap` writable bytes, or NULL.
    unsafe { write_message(message, message_cap, &why) };
    status
}

/// Writes `text` into the caller's buffer of `capacity` bytes, cut to fit
/// and NUL-terminated; nothing when the buffer is NULL or empty.
///
/// # Safety
/// `buffer` is NULL or points to `capacity` writable bytes.
unsafe fn write_message(buffer: *mut c_char, capacity: usize, text: &str) {
    if buffer.is_null() || capacity == 0 {
        return;
    }
    let mut length = text.len().min(capacity - 1);
    while !text.is_char_boundary(length) {
        length -= 1;
    }
    // SAFETY: `length + 1 <= capacity` bytes, as the caller promises.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buffer.cast::<u8>(), length);
        buffer.add(length).write(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voodu_plugin_abi::ffi::{VOODU_METRIC_COUNTER, VOODU_METRIC_GAUGE};

    #[test]
    fn the_connections_service_counts_through_the_table_and_refuses_in_words() {
        let (api, _) = leak_host_api("c-table");
        let connections = api.connections.expect("a 1.3 table has connections");
        let ask = |address: &str, pid: i32| {
            let mut count = u64::MAX;
            let mut message = [0 as c_char; 128];
            // SAFETY: the table's own context; the address is borrowed for
            // the call, the count and message are ours.
            let status = unsafe {
                connections(
                    api.host_ctx,
                    address.as_ptr(),
                    address.len(),
                    pid,
                    &mut count,
                    message.as_mut_ptr(),
                    message.len(),
                )
            };
            // SAFETY: the host NUL-terminates what it writes; the rest is 0.
            let why = unsafe { std::ffi::CStr::from_ptr(message.as_ptr()) };
            (status, count, why.to_string_lossy().into_owned())
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let _held = std::net::TcpStream::connect(&address).unwrap();
        assert_eq!(ask(&address, 0), (VOODU_STATUS_OK, 1, String::new()));
        let (status, count, why) = ask("esl-1.prod:8084", 0);
        assert_eq!((status, count), (VOODU_STATUS_REFUSED, u64::MAX));
        assert!(why.contains("write IP:port"), "{why}");
        let (status, _, why) = ask(&address, -1);
        assert_eq!(status, VOODU_STATUS_REFUSED);
        assert!(why.contains("pid -1 is negative"), "{why}");
    }

    #[test]
    fn a_metric_reported_through_the_plugins_table_is_recorded_and_a_bad_one_refused() {
        let (api, _) = leak_host_api("m-table");
        let metric = api.metric.expect("a 1.2 table has metric");
        let report = |name: &str, kind: u32, value: f64| {
            // SAFETY: the table's own context; the name is borrowed for the
            // call.
            unsafe { metric(api.host_ctx, name.as_ptr(), name.len(), kind, value) }
        };
        assert_eq!(
            report("requests_total", VOODU_METRIC_COUNTER, 2.0),
            VOODU_STATUS_OK
        );
        assert_eq!(
            report("requests", VOODU_METRIC_COUNTER, 1.0),
            VOODU_STATUS_OK
        );
        assert_eq!(report("Bad", VOODU_METRIC_GAUGE, 1.0), VOODU_STATUS_REFUSED);
        assert_eq!(report("requests", 9, 1.0), VOODU_STATUS_REFUSED);
        let ours: Vec<_> = crate::plugin_metrics::snapshot()
            .into_iter()
            .filter(|metric| metric.plugin == "m-table")
            .collect();
        assert_eq!(ours.len(), 1, "{ours:?}");
        assert_eq!((ours[0].name.as_str(), ours[0].value), ("requests", 3.0));
    }
}
