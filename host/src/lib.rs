//! # voodu-host
//!
//! The voodu controller as a library, and the `vd` binary's code. See
//! `ARCHITECTURE.md` at the repository root for how data flows from an HCL
//! file to a plugin call.
//!
//! - [`manifest`] parses HCL into workloads with opaque plugin blocks.
//! - [`plugin`] loads plugin shared objects and calls them.
//! - [`store`] is the embedded SQLite state database.
//! - [`diagnostic`] is the one error shape every apply problem takes.

#![warn(missing_docs)]

pub mod diagnostic;
pub mod manifest;
pub mod plugin;
pub mod store;
