//! # voodu-plugin-abi
//!
//! The stable ABI between the voodu controller and its plugins, in these parts:
//!
//! - [`ffi`]: the `#[repr(C)]` types of the C ABI, from which cbindgen generates
//!   `include/voodu_plugin.h`. Every item says who owns what, for how long, and
//!   on which thread.
//! - [`body`]: typed access to a block body's attributes and nested blocks,
//!   as the host encodes them (the `"@blocks"` key).
//! - [`messages`]: the serde types of every JSON message, shared by the host and
//!   the SDK so the two cannot drift apart.
//! - [`sdk`]: the Rust plugin SDK, a [`sdk::Plugin`] trait and the
//!   [`export_plugin!`] macro.
//! - [`root_module`]: the abi_stable root module a Rust plugin also exports, so
//!   the host can check its layout before trusting it.

#![warn(missing_docs)]

pub mod body;
pub mod ffi;
pub mod messages;
pub mod root_module;
pub mod schema;
pub mod sdk;

#[doc(hidden)]
pub use abi_stable;

pub use sdk::{
    ConnectionHolder, ConnectionsError, Host, ListenError, ListenOptions, LogLevel, Plugin,
    PluginError,
};

/// The `serde_json` the messages use, for a plugin's own JSON work.
pub use serde_json;

/// The plugin authors' guide (`docs/plugin-authors.md`), included so that its
/// Rust examples are compiled as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/plugin-authors.md")]
pub struct PluginAuthorsGuide;
