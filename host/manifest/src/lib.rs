//! # voodu-manifest
//!
//! Manifests: HCL text to workloads with opaque plugin blocks.
//!
//! **May not depend on** any voodu crate but `voodu-model` and
//! `voodu-plugin-abi`: it knows nothing of plugins, the store or Docker
//! (`tests/crate_rules.rs` checks this).
//!
//! - [`parse`] walks the HCL structure into [`Workload`]s, collecting every
//!   problem with its file, line and column.
//! - [`body`] encodes a plugin block's body as JSON, losslessly and in
//!   source order; [`expression`] evaluates one expression with exact
//!   numbers; [`lines`] turns byte offsets into `file:line:column`.
//! - [`core_spec`] type-checks voodu's own attributes and blocks into a
//!   [`voodu_model::CoreSpec`]; [`probes`] parses the `probes` block.
//! - [`interpolate`] resolves `${NAME}` and `${NAME:-default}` before
//!   HCL parsing, keeping where each part of the text came from.
//! - [`docker_options`] reads voodu's raw `docker run` flags into what
//!   the engine's API takes.
//! - [`limits`] refuses a text too large, binary, or nested too deep
//!   before the parser sees it.
//! - [`other_kinds`] names voodu's other top-level kinds (`ingress`,
//!   `job`, ...) with what this voodu offers instead.
//! - [`prescan`] finds what `vd apply` reads beside the manifests (the
//!   files `env_file` names).
//! - [`voodu_blocks`] checks voodu's blocks this voodu does not act on yet
//!   (`build`, `autoscale`, `on_deploy`, `release`, `init`, ...) in voodu's
//!   shapes.
//! - [`suggest`] finds the name a typo was meant to be.

#![warn(missing_docs)]

pub mod body;
pub mod core_spec;
pub mod docker_options;
pub mod env_file;
pub mod expression;
pub mod interpolate;
pub mod limits;
pub mod lines;
pub mod other_kinds;
pub mod parse;
pub mod prescan;
pub mod probes;
pub mod procfile;
pub mod suggest;
pub mod voodu_blocks;

pub use parse::{
    parse_manifest, parse_manifest_with, parse_manifests, parse_manifests_with, ParseOptions,
    ParsedManifests,
};
