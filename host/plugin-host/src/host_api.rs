//! The callback table the host hands to every plugin's `init`.
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

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use voodu_plugin_abi::ffi::{
    VooduHostApi, VooduLogLevel, VOODU_ABI_VERSION, VOODU_LOG_DEBUG, VOODU_LOG_ERROR,
    VOODU_LOG_INFO, VOODU_LOG_WARN,
};

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
}

/// Builds the callback table for plugin `plugin`. The returned table and its
/// context live for the rest of the process; the limiter is the plugin's
/// log rate limit, for its handle to report.
pub fn leak_host_api(plugin: &str) -> (&'static VooduHostApi, &'static LogLimiter) {
    let context: &'static CallbackContext = Box::leak(Box::new(CallbackContext {
        plugin: plugin.to_owned(),
        limiter: LogLimiter::new(),
    }));
    let api = Box::leak(Box::new(VooduHostApi {
        abi_version: VOODU_ABI_VERSION,
        struct_size: std::mem::size_of::<VooduHostApi>() as u32,
        host_ctx: context as *const CallbackContext as *mut c_void,
        log: Some(log_from_plugin),
    }));
    (api, &context.limiter)
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
