//! Manifests: HCL text to workloads with opaque plugin blocks. This module
//! knows nothing of plugins, the store or Docker.
//!
//! - [`files`] expands `-f` paths into manifest files.
//! - [`parse`] walks the HCL structure into [`Workload`]s, collecting every
//!   problem with its file, line and column.
//! - [`body`] encodes a plugin block's body as JSON, losslessly and in
//!   source order; [`expression`] evaluates one expression with exact
//!   numbers; [`lines`] turns byte offsets into `file:line:column`.
//! - [`core_spec`] type-checks voodu's own attributes and blocks.
//! - [`ports`] parses port mappings; [`resources`] the `resources` block;
//!   [`probes`] the `probes` block.
//! - [`model`] holds the types the rest of the host shares.

pub mod body;
pub mod core_spec;
pub mod expression;
pub mod files;
pub mod lines;
pub mod model;
pub mod parse;
pub mod ports;
pub mod probes;
pub mod resources;
pub mod suggest;

pub use core_spec::CoreSpec;
pub use model::{
    block_display_name, parse_kind, parse_kind_exact, Location, NormalisedBlock, PluginBlock,
    Workload, WorkloadId, WorkloadIdError,
};
pub use parse::{parse_manifest, parse_manifests, ManifestSource, ParsedManifests};
