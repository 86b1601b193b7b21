//! Typed errors of loading a plugin and of calling one. Each message names
//! the file or the plugin, what went wrong, and the fix where there is one.

use std::path::PathBuf;
use std::time::Duration;

use super::handle::PluginCall;

/// Why a plugin file could not be loaded. The host keeps running and other
/// plugins are unaffected.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be opened as a shared object at all.
    #[error(
        "{path}: not a loadable shared object ({reason}) — a voodu plugin is a .so built as a \
         Rust cdylib or with `cc -shared`"
    )]
    NotASharedObject {
        /// The file.
        path: PathBuf,
        /// What the dynamic loader said.
        reason: String,
    },
    /// The caller refused the plugin by its identity, before its `init`
    /// ran (an install of a name that is taken, say).
    #[error("{reason}")]
    RefusedBeforeInit {
        /// The caller's reason, in full.
        reason: String,
    },
    /// The shared object needs a symbol that no library loaded with it
    /// defines: it was linked without a library it uses.
    #[error(
        "{path}: needs the symbol `{symbol}`, which no library it was linked with defines, so \
         its first call would end the controller — link the plugin with the library that \
         provides it{hint}, and build with `-Wl,-z,defs` so the linker finds this before voodu does"
    )]
    UnresolvedSymbol {
        /// The file.
        path: PathBuf,
        /// The first symbol the dynamic loader could not bind.
        symbol: String,
        /// The link flag that likely provides it (` (for `cJSON_Parse`:
        /// -lcjson)`), or empty.
        hint: String,
    },
    /// The shared object exports no `voodu_plugin_entry_v1`.
    #[error(
        "{path}: no `voodu_plugin_entry_v1` symbol{other}, so it is not a voodu plugin for ABI 1 \
         — export it (see include/voodu_plugin.h) or, for Rust, use \
         `voodu_plugin_abi::export_plugin!`"
    )]
    MissingEntrySymbol {
        /// The file.
        path: PathBuf,
        /// ` (it exports voodu_plugin_entry_v2 instead)` when another major's
        /// entry symbol is there, else empty.
        other: String,
    },
    /// The vtable declares a major ABI version other than 1.
    #[error(
        "{path}: built for voodu plugin ABI {major}.{minor}, but this host speaks ABI 1.x — \
         rebuild against voodu-plugin-abi 1.x"
    )]
    IncompatibleAbiVersion {
        /// The file.
        path: PathBuf,
        /// The plugin's major version.
        major: u32,
        /// The plugin's minor version.
        minor: u32,
    },
    /// abi_stable's layout check found the Rust plugin's vtable to differ.
    #[error(
        "{path}: its vtable layout does not match voodu plugin ABI 1.x: {mismatch} — rebuild \
         against voodu-plugin-abi 1.x"
    )]
    LayoutMismatch {
        /// The file.
        path: PathBuf,
        /// The first mismatches abi_stable reported, one line.
        mismatch: String,
    },
    /// abi_stable refused the library for another reason.
    #[error(
        "{path}: abi_stable refused the library: {reason} — rebuild against voodu-plugin-abi 1.x"
    )]
    AbiStable {
        /// The file.
        path: PathBuf,
        /// abi_stable's own message, shortened to its first line.
        reason: String,
    },
    /// The vtable is structurally unusable (NULL, too small, a required member missing).
    #[error("{path}: invalid plugin vtable: {reason}")]
    InvalidVtable {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The plugin's name is NULL, empty or not a valid block type.
    #[error("{path}: invalid plugin name: {reason} — the name must be a lowercase letter then [a-z0-9_-], at most 64 characters: the block type the plugin owns")]
    InvalidName {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `init` returned a failure.
    #[error("{path}: plugin {plugin} failed to start: {message}")]
    InitFailed {
        /// The file.
        path: PathBuf,
        /// The plugin's name.
        plugin: String,
        /// The plugin's own message.
        message: String,
    },
    /// `init` did not return in time.
    #[error("{path}: plugin {plugin} did not finish init within {timeout:?}; it was abandoned")]
    InitTimedOut {
        /// The file.
        path: PathBuf,
        /// The plugin's name.
        plugin: String,
        /// The bound it overran.
        timeout: Duration,
    },
    /// Opening the library did not return in time: a library constructor
    /// that hangs. It is found in a forked probe and never opened in the
    /// host (see [`crate::loader::probe_in_child`]).
    #[error("{path}: the library did not finish loading within {timeout:?} (a constructor that never returns?), so it was not loaded — remove the file from its plugin directory, or fix the library")]
    LoadTimedOut {
        /// The file.
        path: PathBuf,
        /// The bound it overran.
        timeout: Duration,
    },
    /// An out-of-process plugin's child could not load the library: the
    /// child's own words, as the load would have said them in process.
    #[error("{message}")]
    RefusedInChild {
        /// The file.
        path: PathBuf,
        /// The child's load error.
        message: String,
    },
    /// An out-of-process plugin's child could not be started, or did not
    /// take part in the load as it should.
    #[error("{path}: its own process (out of process) failed: {reason}")]
    ChildFailed {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// Why a call into a loaded plugin did not produce a reply.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The plugin refused the input; `message` is its own words, shown to the
    /// operator as they are.
    #[error("{message}")]
    Refused {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
        /// The plugin's message.
        message: String,
        /// The option at fault, as a JSON pointer into the block's spec
        /// (`/listen`), when the plugin named one.
        pointer: Option<String>,
    },
    /// The plugin reported a failure of its own.
    #[error("plugin {plugin} failed in {call}: {message}")]
    Failed {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
        /// The plugin's message.
        message: String,
    },
    /// The plugin's own code panicked in this call, or did in an earlier
    /// one and it refuses every call until it is reloaded (poisoned): its
    /// status said so (`VOODU_STATUS_PANICKED`, ABI 1.3).
    #[error("plugin {plugin} failed in {call}: {message}")]
    Panicked {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
        /// The plugin's message: the panic's words.
        message: String,
    },
    /// The call overran its bound. The plugin is now wedged.
    #[error(
        "plugin {plugin} did not answer {call} within {timeout:?}; it is marked wedged and gets \
         no more calls until it is reloaded"
    )]
    TimedOut {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
        /// The bound it overran.
        timeout: Duration,
    },
    /// An out-of-process plugin's call overran its bound: its child
    /// process was killed and is started again, so the plugin is not
    /// wedged (a plugin in process would be).
    #[error(
        "plugin {plugin} did not answer {call} within {timeout:?}; its process was killed and is \
         started again"
    )]
    Overran {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
        /// The bound it overran.
        timeout: Duration,
    },
    /// Another call held the plugin for this call's whole bound; this call
    /// was not attempted and the plugin is not marked wedged by it.
    #[error(
        "plugin {plugin} was busy with another call for {timeout:?}, so {call} was not attempted"
    )]
    Busy {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
        /// The bound it waited.
        timeout: Duration,
    },
    /// An earlier call overran its bound; this call was not attempted.
    #[error(
        "plugin {plugin} is wedged: its {stuck_call} call never returned, so {call} was not \
         attempted — reload the plugin"
    )]
    Wedged {
        /// The plugin's name.
        plugin: String,
        /// The call that was refused.
        call: PluginCall,
        /// The call that never returned.
        stuck_call: PluginCall,
    },
    /// The reply exceeded [`voodu_plugin_abi::ffi::VOODU_MAX_REPLY_BYTES`].
    #[error(
        "plugin {plugin} returned a {size}-byte {call} reply, over the {limit}-byte limit; the \
         reply was discarded"
    )]
    ReplyTooLarge {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
        /// The reply's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The reply was not the JSON the call expects.
    #[error("plugin {plugin} returned an invalid {call} reply: {reason}")]
    InvalidReply {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
        /// Why it was rejected, with the start of the reply.
        reason: String,
    },
    /// The plugin has been shut down.
    #[error("plugin {plugin} is shut down; {call} was not attempted")]
    ShutDown {
        /// The plugin's name.
        plugin: String,
        /// The call.
        call: PluginCall,
    },
}

impl CallError {
    /// The JSON pointer a refusal named (`/listen`), if any.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            CallError::Refused { pointer, .. } => pointer.as_deref(),
            _ => None,
        }
    }
}
