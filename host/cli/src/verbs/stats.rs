//! `vd stats [REF] [-k KIND] [-s SCOPE] [-n NAME]`: [`Request::Stats`]
//! (voodu's refs: a workload, SCOPE/NAME, a kind or a scope), and its answer,
//! [`Response::Stats`](voodu_api::Response::Stats): one row per replica,
//! with its CPU, memory, network and restarts; `-w` asks again every
//! [`REFRESH_EVERY`] until interrupted.

use std::time::Duration;

use indicatif::HumanBytes;
use voodu_api::client::Client;
use voodu_api::{ReplicaStats, Request, Response, WorkloadFilter, WorkloadId};
use voodu_plugin_abi::messages::WorkloadKind;

use super::Call;
use crate::render::table;
use crate::{Output, OutputArg};

/// How often `vd stats -w` asks again (each answer itself takes about the
/// engine's one-second sample).
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// `vd stats`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Whose replicas, as voodu takes it: KIND/SCOPE/NAME
    /// (deployment/prod/esl), SCOPE/NAME, a kind (deployment,
    /// statefulset, job, cronjob) or a scope; every replica without it.
    #[arg(value_name = "REF", conflicts_with_all = ["kind", "scope", "name"])]
    target: Option<String>,
    /// Only this kind's replicas (voodu's -k).
    #[arg(short = 'k', long, value_parser = parse_kind)]
    kind: Option<WorkloadKind>,
    /// Only this scope's (voodu's -s).
    #[arg(short = 's', long)]
    scope: Option<String>,
    /// Only the workloads of this name (voodu's -n).
    #[arg(short = 'n', long)]
    name: Option<String>,
    /// Ask again every 2 s until interrupted: the table is redrawn (with -o
    /// json, one answer a line).
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    output: OutputArg,
}

/// A kind's word: deployment, statefulset, job or cronjob.
fn parse_kind(word: &str) -> Result<WorkloadKind, String> {
    [
        WorkloadKind::Deployment,
        WorkloadKind::Statefulset,
        WorkloadKind::Job,
        WorkloadKind::Cronjob,
    ]
    .into_iter()
    .find(|kind| kind.as_str() == word)
    .ok_or_else(|| format!("{word:?} is no kind — write deployment, statefulset, job or cronjob"))
}

impl StatsArgs {
    /// [`Request::Stats`] of the replicas the ref or the flags name.
    pub fn call(self) -> Call {
        let output = self.output.output;
        Call::new(self.request(), output)
    }

    /// The request: a whole workload id as `workload`, any other ref or
    /// the flags as a filter.
    fn request(&self) -> Request {
        let mut filter = WorkloadFilter {
            kind: self.kind,
            scope: self.scope.clone(),
            name: self.name.clone(),
        };
        let mut workload = None;
        if let Some(target) = &self.target {
            match target.split('/').collect::<Vec<_>>().as_slice() {
                [_, _, _] => workload = target.parse::<WorkloadId>().ok(),
                [scope, name] => {
                    filter.scope = Some((*scope).to_owned());
                    filter.name = Some((*name).to_owned());
                }
                [word] => match parse_kind(word) {
                    Ok(kind) => filter.kind = Some(kind),
                    Err(_) => filter.scope = Some((*word).to_owned()),
                },
                _ => {}
            }
            // A three-part ref that is no workload id filters nothing
            // away silently: it names what it could not read.
            if workload.is_none() && filter.is_empty() {
                filter.name = Some(target.clone());
            }
        }
        Request::Stats { workload, filter }
    }

    /// `vd stats -w`: asks again every [`REFRESH_EVERY`], redrawing the
    /// table, until interrupted or the controller fails to answer (its
    /// error then).
    pub fn watch(self, client: &Client) -> Result<(), voodu_api::client::ClientError> {
        let output = self.output.output;
        let request = self.request();
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Line {
        #[command(flatten)]
        stats: StatsArgs,
    }

    fn request(words: &[&str]) -> Request {
        let line = Line::try_parse_from(std::iter::once("stats").chain(words.iter().copied()))
            .unwrap_or_else(|error| panic!("{words:?}: {error}"));
        line.stats.request()
    }

    fn filter(
        kind: Option<WorkloadKind>,
        scope: Option<&str>,
        name: Option<&str>,
    ) -> WorkloadFilter {
        WorkloadFilter {
            kind,
            scope: scope.map(str::to_owned),
            name: name.map(str::to_owned),
        }
    }

    /// voodu's refs and flags name the same filters; a whole id asks for
    /// that workload; a ref and flags together are refused.
    #[test]
    fn voodus_refs_and_flags_become_one_filter() {
        let stats = |workload: Option<&str>, filter: WorkloadFilter| Request::Stats {
            workload: workload.map(|id| id.parse().unwrap()),
            filter,
        };
        assert_eq!(
            request(&["deployment/prod/web"]),
            stats(Some("deployment/prod/web"), WorkloadFilter::default())
        );
        assert_eq!(
            request(&["prod/web"]),
            stats(None, filter(None, Some("prod"), Some("web")))
        );
        assert_eq!(
            request(&["statefulset"]),
            stats(None, filter(Some(WorkloadKind::Statefulset), None, None))
        );
        assert_eq!(
            request(&["prod"]),
            stats(None, filter(None, Some("prod"), None))
        );
        assert_eq!(
            request(&["-k", "job", "-s", "batch", "-n", "seed"]),
            stats(
                None,
                filter(Some(WorkloadKind::Job), Some("batch"), Some("seed"))
            )
        );
        assert!(Line::try_parse_from(["stats", "prod", "-k", "job"]).is_err());
        assert!(Line::try_parse_from(["stats", "-k", "pod"]).is_err());
    }
}
