//! `vd stop` and `vd start`, as voodu has them: [`Request::Stop`] and
//! [`Request::Start`]. A replica is named as `vd exec` and `vd logs` take
//! it: KIND/SCOPE/NAME (with `-r ID`), SCOPE/NAME, its container
//! (`prod-web.a1f3`) or SCOPE/NAME.ID (`data/redis.0`).

use std::process::ExitCode;

use voodu_api::client::Client;
use voodu_api::{Request, WorkloadId};

use super::{workload_or_replica, Call};
use crate::{fail, OutputArg, EXIT_USAGE};

/// `vd stop`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// The workload (every replica of it on this node) or one replica.
    #[arg(value_name = "SCOPE/NAME | KIND/SCOPE/NAME | POD")]
    target: String,
    /// One replica: its id, or a statefulset's ordinal.
    #[arg(long, value_name = "ID")]
    replica: Option<String>,
    /// voodu's default: the replica stays stopped until `vd start`
    /// (accepted; a stop here always freezes).
    #[arg(long)]
    freeze: bool,
    /// voodu's transient stop: refused here, naming why.
    #[arg(long, conflicts_with = "freeze")]
    no_freeze: bool,
    #[command(flatten)]
    output: OutputArg,
}

/// `vd start`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// The workload (every frozen replica of it) or one replica.
    #[arg(value_name = "SCOPE/NAME | KIND/SCOPE/NAME | POD")]
    target: String,
    /// One replica: its id, or a statefulset's ordinal.
    #[arg(long, value_name = "ID")]
    replica: Option<String>,
    #[command(flatten)]
    output: OutputArg,
}

impl StopArgs {
    /// [`Request::Stop`]; `--no-freeze` is refused with why.
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        if self.no_freeze {
            return Err(fail(
                "vd stop: --no-freeze is not offered — this controller restarts a stopped replica at once (it heals what it runs), so a stop here always holds until vd start; vd restart replaces replicas instead",
                EXIT_USAGE,
            ));
        }
        let (workload, named) = target(client, "stop", &self.target)?;
        Ok(Call::new(
            Request::Stop {
                workload,
                replica: self.replica.or(named),
            },
            self.output.output,
        ))
    }
}

impl StartArgs {
    /// [`Request::Start`].
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        let (workload, named) = target(client, "start", &self.target)?;
        Ok(Call::new(
            Request::Start {
                workload,
                replica: self.replica.or(named),
            },
            self.output.output,
        ))
    }
}

/// The workload and replica a `vd stop` or `vd start` target names.
fn target(
    client: &Client,
    verb: &str,
    written: &str,
) -> Result<(WorkloadId, Option<String>), ExitCode> {
    workload_or_replica(client, written)
        .map_err(|message| fail(format!("vd {verb}: {message}"), EXIT_USAGE))
}

/// What `vd stop` did, for people.
pub fn stopped(workload: &WorkloadId, replicas: &[String]) {
    println!(
        "{workload}: stopped {} (drained first); frozen until vd start {workload}",
        replicas.join(", ")
    );
}

/// What `vd start` did, for people.
pub fn started(workload: &WorkloadId, replicas: &[String]) {
    println!(
        "{workload}: started {} anew from the current spec",
        replicas.join(", ")
    );
}
