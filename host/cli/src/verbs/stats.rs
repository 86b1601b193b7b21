//! `vd stats [KIND/SCOPE/NAME]`: [`Request::Stats`], and its answer,
//! [`Response::Stats`](voodu_api::Response::Stats): one row per replica,
//! with its CPU, memory, network and restarts; `-w` asks again every
//! [`REFRESH_EVERY`] until interrupted.

use std::time::Duration;

use indicatif::HumanBytes;
use voodu_api::client::Client;
use voodu_api::{ReplicaStats, Request, Response, WorkloadId};

use super::Call;
use crate::render::table;
use crate::{Output, OutputArg};

/// How often `vd stats -w` asks again (each answer itself takes about the
/// engine's one-second sample).
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// `vd stats`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Only this workload's replicas, KIND/SCOPE/NAME (deployment/prod/esl).
    workload: Option<WorkloadId>,
    /// Ask again every 2 s until interrupted: the table is redrawn (with -o
    /// json, one answer a line).
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    output: OutputArg,
}

impl StatsArgs {
    /// [`Request::Stats`].
    pub fn call(self) -> Call {
        Call::new(
            Request::Stats {
                workload: self.workload,
            },
            self.output.output,
        )
    }

    /// `vd stats -w`: asks again every [`REFRESH_EVERY`], redrawing the
    /// table, until interrupted or the controller fails to answer (its
    /// error then).
    pub fn watch(self, client: &Client) -> Result<(), voodu_api::client::ClientError> {
        let output = self.output.output;
        let request = Request::Stats {
            workload: self.workload,
        };
        loop {
            let answer = client.call(&request, &mut |_| {})?;
            match output {
                Output::Json => match serde_json::to_string(&answer) {
                    Ok(line) => println!("{line}"),
                    Err(error) => eprintln!("vd stats: {error}"),
                },
                Output::Text => {
                    // Clear the screen and go home, as `watch` does.
                    print!("\x1b[2J\x1b[H");
                    if let Response::Stats { replicas, .. } = &answer {
                        stats_table(replicas);
                    }
                    crate::render::unanswered(&answer);
                }
            }
            std::thread::sleep(REFRESH_EVERY);
        }
    }
}

/// `vd stats`: one row per replica, its usage or `-` when not running.
pub fn stats_table(replicas: &[ReplicaStats]) {
    if replicas.is_empty() {
        println!("no replicas");
        return;
    }
    // In a cluster, each replica's node.
    let with_node = replicas.iter().any(|replica| replica.node.is_some());
    let rows: Vec<Vec<String>> = replicas
        .iter()
        .map(|replica| {
            let usage = replica.usage.as_ref();
            let or_dash = |text: Option<String>| text.unwrap_or_else(|| "-".into());
            let mut row = vec![replica.workload.to_string(), replica.replica_id.clone()];
            if with_node {
                row.push(or_dash(replica.node.clone()));
            }
            row.extend([
                replica.state.clone(),
                or_dash(usage.map(|usage| format!("{:.1}%", usage.cpu_percent))),
                or_dash(usage.map(|usage| {
                    let limit = usage.memory_limit_bytes.map_or_else(
                        || "no limit".to_owned(),
                        |bytes| HumanBytes(bytes).to_string(),
                    );
                    format!("{} / {limit}", HumanBytes(usage.memory_bytes))
                })),
                or_dash(usage.map(|usage| {
                    format!(
                        "{} / {}",
                        HumanBytes(usage.network_rx_bytes),
                        HumanBytes(usage.network_tx_bytes)
                    )
                })),
                replica.restarts.to_string(),
            ]);
            row
        })
        .collect();
    let mut header = vec!["WORKLOAD", "REPLICA"];
    if with_node {
        header.push("NODE");
    }
    header.extend(["STATE", "CPU", "MEMORY / LIMIT", "NET IN / OUT", "RESTARTS"]);
    table(&header, &rows);
}
