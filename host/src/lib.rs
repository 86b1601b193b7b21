//! # voodu-host
//!
//! The voodu controller as a library. Today it holds the plugin host:
//! [`plugin`] loads plugin shared objects (Rust through abi_stable, C through
//! the versioned entry symbol) into one [`plugin::PluginHandle`] type with
//! typed, serialised, time-bounded calls. See `ARCHITECTURE.md` at the
//! repository root for how the parts fit.

#![warn(missing_docs)]

pub mod plugin;
