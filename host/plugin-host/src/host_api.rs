//! The callback table the host hands to every plugin's `init`.
//!
//! Each plugin gets its own table and context, allocated once at load and
//! never freed: a plugin may call back from its own threads until `shutdown`
//! returns, and a wedged plugin may never return from it, so the few bytes
//! are deliberately leaked alongside the (never unloaded) library.

use std::ffi::c_void;

use voodu_plugin_abi::ffi::{
    VooduHostApi, VooduLogLevel, VOODU_ABI_VERSION, VOODU_LOG_DEBUG, VOODU_LOG_ERROR,
    VOODU_LOG_INFO, VOODU_LOG_WARN,
};

/// What a callback needs to know about the plugin calling it.
struct CallbackContext {
    plugin: String,
}

/// Builds the callback table for plugin `plugin`. The returned table and its
/// context live for the rest of the process.
pub fn leak_host_api(plugin: &str) -> &'static VooduHostApi {
    let context: &'static CallbackContext = Box::leak(Box::new(CallbackContext {
        plugin: plugin.to_owned(),
    }));
    Box::leak(Box::new(VooduHostApi {
        abi_version: VOODU_ABI_VERSION,
        struct_size: std::mem::size_of::<VooduHostApi>() as u32,
        host_ctx: context as *const CallbackContext as *mut c_void,
        log: Some(log_from_plugin),
    }))
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
    let text = if message.is_null() || message_len == 0 {
        String::new()
    } else {
        // SAFETY: the plugin lends `message_len` bytes for this call.
        String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(message, message_len) })
            .into_owned()
    };
    let plugin = context.plugin.as_str();
    match level {
        VOODU_LOG_ERROR => tracing::error!(target: "voodu::plugin", plugin, "{text}"),
        VOODU_LOG_WARN => tracing::warn!(target: "voodu::plugin", plugin, "{text}"),
        VOODU_LOG_INFO => tracing::info!(target: "voodu::plugin", plugin, "{text}"),
        VOODU_LOG_DEBUG => tracing::debug!(target: "voodu::plugin", plugin, "{text}"),
        _ => tracing::trace!(target: "voodu::plugin", plugin, "{text}"),
    }
}
