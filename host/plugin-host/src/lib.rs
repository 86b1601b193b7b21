//! # voodu-plugin-host
//!
//! Loading voodu plugins and calling them, every call bounded in time. An
//! embedder loads one with [`load_plugin`] and calls it through its
//! [`PluginHandle`].
//!
//! **May not depend on** any other voodu crate but `voodu-plugin-abi`, nor
//! on the store, the engine, tokio or the CLI's crates, so that embedding it
//! pulls in a small tree (`tests/crate_rules.rs` checks this).
//!
//!
//! - [`loader`] opens a shared object, decides whether it is a Rust plugin
//!   (abi_stable root module) or a C plugin (entry symbol only), checks the
//!   vtable, and starts the instance.
//! - [`handle`] is the host-side handle both kinds end in: typed methods,
//!   calls serialised per plugin, every call bounded in time.
//! - [`worker`] runs the raw calls on the plugin's own host thread, so a
//!   plugin that hangs never blocks a caller beyond its deadline.
//! - [`registry`] keeps the installed plugins under `<root>/plugins/`:
//!   loads them at start, installs and removes them.
//! - [`host_api`] is the callback table the host hands to plugins (logging,
//!   listening sockets, metrics, connection counts).
//! - [`socket_table`] reads the kernel's established TCP sockets (the
//!   `connections` service, and the supervisor's count).
//! - [`settings`] checks a plugin's plugin-wide settings and hands them to
//!   its `configure`; the registry keeps them beside its file.
//! - [`out_of_process`] runs a plugin in a child process of its own (the
//!   same binary), answering the same calls over a socket: on request, and
//!   for a second library with a Go runtime ([`go_runtime`]).
//! - [`error`] holds the typed load and call errors.
//! - [`name`] is [`PluginName`], the one rule for a plugin's name.
//! - [`replies`] reads a plugin's reply bytes (pure, fuzzed).
//! - [`crash`] records a crash inside a plugin call, so the next start
//!   quarantines that plugin instead of crashing again.

#![warn(missing_docs)]

mod abi_report;
pub mod call_figures;
pub mod crash;
pub mod error;
pub mod go_runtime;
pub mod handle;
pub mod host_api;
pub mod listeners;
pub mod loader;
pub mod name;
pub mod observe;
pub mod out_of_process;
pub mod plugin_metrics;
pub mod registry;
pub mod replies;
pub mod settings;
pub mod socket_table;
mod worker;

pub use error::{CallError, LoadError};
pub use handle::{PluginCall, PluginHandle, PluginInfo, PluginKind};
pub use loader::{load_plugin, LoadOptions};
pub use name::{PluginName, PluginNameError};
pub use registry::{
    InstallOptions, Installed, LoadFailure, PluginRegistry, RegistryError, StagedPlugin,
};
