//! `vd version`: [`Request::Version`], and its answer,
//! [`Response::Version`](voodu_api::Response::Version): this CLI's version
//! and the controller's (the CLI's alone when no controller answers).

use anstream::println;

use voodu_api::{Request, VersionInfo};

use super::Call;
use crate::OutputArg;

/// `vd version`'s arguments.
#[derive(Debug, clap::Args)]
pub struct VersionArgs {
    #[command(flatten)]
    output: OutputArg,
}

impl VersionArgs {
    /// [`Request::Version`].
    pub fn call(self) -> Call {
        Call::new(Request::Version, self.output.output)
    }
}

/// Prints this CLI's version and the controller's.
pub fn version(controller: &VersionInfo) {
    let cli = VersionInfo::current();
    println!(
        "vd {} (plugin ABI {}, {})",
        cli.version, cli.plugin_abi, cli.build
    );
    println!(
        "controller {} (plugin ABI {}, {})",
        controller.version, controller.plugin_abi, controller.build
    );
}

/// Prints this CLI's version alone: no controller answered.
pub fn without_controller() {
    let cli = VersionInfo::current();
    std::println!(
        "vd {} (plugin ABI {}, {})",
        cli.version,
        cli.plugin_abi,
        cli.build
    );
}
