//! # voodu-model
//!
//! The words every step of voodu's data path shares, and nothing else:
//!
//! - [`workload`]: [`WorkloadId`], [`Location`], [`Workload`] with its
//!   [`PluginBlock`]s, and the [`NormalisedBlock`] a plugin's validate
//!   returns and the store keeps; [`ManifestSource`], a manifest file's name
//!   and text.
//! - [`core_spec`]: the workload's [`CoreSpec`], with [`ports`],
//!   [`probes`] and [`resources`], and [`container`], the rest of what
//!   shapes a replica's container.
//! - [`changes`]: what changed between two specs of a workload, the one
//!   computation behind `vd apply --dry-run`, `vd diff` and `vd history`.
//! - [`config`]: voodu's config buckets, which `env_from` reads.
//! - [`diagnostic`]: [`Diagnostic`], the one shape every apply problem
//!   takes.
//! - [`naming`]: container names, labels and network aliases on the engine.
//! - [`placement`]: which node of a cluster runs each replica; [`serving`]:
//!   a serving replica, here or on another node, as endpoints are computed.
//! - [`limits`]: the bounds on what one apply may ask.
//! - [`interpolation`]: where `${NAME}` references lie in a manifest.
//! - [`event`] holds [`EventLevel`], how serious an event is.
//!
//! **May not depend on** any other voodu crate but `voodu-plugin-abi` (for
//! the message types a block travels in). Every other host crate depends
//! on this one; a rule check in `tests/crate_rules.rs` keeps it so.

#![warn(missing_docs)]

pub mod build;
pub mod changes;
pub mod config;
pub mod container;
pub mod core_spec;
pub mod diagnostic;
pub mod event;
pub mod interpolation;
pub mod job;
pub mod lang;
pub mod limits;
pub mod naming;
pub mod on_deploy;
pub mod placement;
pub mod ports;
pub mod probes;
pub mod resources;
pub mod secrets;
pub mod serving;
pub mod signing;
pub mod workload;

pub use core_spec::CoreSpec;
pub use diagnostic::Diagnostic;
pub use event::{EventLevel, EventReason};
pub use workload::{
    block_display_name, hcl_quoted, parse_kind, parse_kind_exact, EndpointEnvelope, Location,
    ManifestSource, NormalisedBlock, PluginBlock, Workload, WorkloadId, WorkloadIdError,
};
