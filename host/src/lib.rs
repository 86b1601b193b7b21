//! # voodu-host
//!
//! The voodu controller as a library, and the `vd` binary's code. See
//! `ARCHITECTURE.md` at the repository root for how data flows from an HCL
//! file to a plugin call.
//!
//! - [`manifest`] parses HCL into workloads with opaque plugin blocks.
//! - [`plugin`] loads plugin shared objects and calls them.
//! - [`apply`] is the all-or-nothing apply pipeline: parse, validate
//!   through plugins, store.
//! - [`forget`] tells plugins a block is gone, and deletes workloads.
//! - [`history`] lists a workload's revisions and rolls one back.
//! - [`install`] installs or replaces a plugin as one step: the new version
//!   re-validates every stored block of it before it goes live.
//! - [`store`] is the embedded SQLite state database.
//! - [`controller`] owns the store and the plugins and serves [`api`]
//!   on a unix socket; [`client`] is the CLI's end of it.
//! - [`cli`] is the `vd` binary: argument parsing and output.
//! - [`reconcile`] is the control loop: a work queue of workloads that
//!   converges Docker to the store and publishes and drains through the
//!   plugins.
//! - [`activity`] is the live stream of events and steps that waits and
//!   watches follow.
//! - [`runtime`] is the Docker engine, through bollard.
//! - [`diagnostic`] is the one error shape every apply problem takes.

#![warn(missing_docs)]

pub mod activity;
pub mod api;
pub mod apply;
pub mod cli;
pub mod client;
pub mod controller;
pub mod diagnostic;
pub mod forget;
pub mod history;
pub mod install;
pub mod manifest;
pub mod plugin;
pub mod reconcile;
pub mod runtime;
pub mod store;
