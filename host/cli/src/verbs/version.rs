//! `vd version`: [`Request::Version`], and its answer,
//! [`Response::Version`](voodu_api::Response::Version): this CLI's version
//! and the controller's (the CLI's alone when no controller answers).

use anstream::println;

use voodu_api::{Request, VersionInfo, WorkerInfo};

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
    if let Some(worker) = &controller.worker {
        println!("worker     {}", worker_line(worker));
    }
}

/// One worker in words: its pid, binary, version and start.
fn worker_line(worker: &WorkerInfo) -> String {
    let started =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(worker.started_at_unix_ms);
    let age = std::time::SystemTime::now()
        .duration_since(started)
        .map(|age| {
            humantime::format_duration(std::time::Duration::from_secs(age.as_secs())).to_string()
        })
        .unwrap_or_else(|_| "0s".into());
    format!(
        "pid {} ({}, voodu {}), started {} ({} ago), supervisor pid {}",
        worker.pid,
        worker.binary,
        worker.version,
        humantime::format_rfc3339_seconds(started),
        age,
        worker.supervisor_pid
    )
}

/// `vd controller upgrade`'s arguments.
#[derive(Debug, clap::Args)]
pub struct UpgradeArgs {
    #[command(flatten)]
    output: OutputArg,
}

impl UpgradeArgs {
    /// [`Request::UpgradeController`].
    pub fn call(self) -> Call {
        Call::new(Request::UpgradeController, self.output.output)
    }
}

/// Prints the worker an upgrade started.
pub fn upgraded(worker: &WorkerInfo) {
    println!("upgraded: the new worker serves — {}", worker_line(worker));
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
