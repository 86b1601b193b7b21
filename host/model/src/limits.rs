//! The bounds on what one apply may ask, shared by the client (which checks
//! files before sending them) and the parser (which checks every source it
//! is given, whoever sent it). Each is far above what a real manifest
//! needs, and low enough that no input can exhaust the controller.

use std::time::Duration;

/// The largest manifest file, in bytes: 8 MiB.
pub const MAX_MANIFEST_BYTES: usize = 8 * 1024 * 1024;

/// The deepest nesting of blocks, objects, lists and parentheses in a
/// manifest. The HCL parser recurses once per level, so this bound keeps
/// its stack small; and on some unclosed constructs its backtracking
/// doubles with each level (the fuzzer found three: 1.5 s at 20 levels in
/// a release build, 6 ms at 12), so the bound is low. Real manifests nest
/// a handful deep (a workload, `probes`, `readiness`, `http` is four).
pub const MAX_NESTING: usize = 12;

/// The most workloads one apply may declare, across all its files.
pub const MAX_WORKLOADS_PER_APPLY: usize = 1000;

/// The most replicas one workload may ask for.
pub const MAX_REPLICAS: u32 = 1000;

/// The longest drain budget (`drain_timeout`): one hour.
pub const MAX_DRAIN_TIMEOUT: Duration = Duration::from_secs(3600);

/// The most attributes or keys in one body or object (an `env` map, a
/// plugin block). hcl-edit inserts each key with a linear search, so a
/// parse is quadratic in this number; the bound keeps it to a fraction of
/// a second.
pub const MAX_ITEMS_PER_OBJECT: usize = 5000;
