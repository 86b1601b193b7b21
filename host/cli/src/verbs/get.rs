//! `vd get`: stored workloads ([`Request::Get`], answered by
//! [`Response::Workloads`](voodu_api::Response::Workloads)) or the replicas
//! Docker runs ([`Request::Pods`], answered by
//! [`Response::Pods`](voodu_api::Response::Pods), or streamed with `-w`
//! through [`WatchView`](crate::render::WatchView)).

use std::process::ExitCode;

use anstream::println;
use clap::ValueEnum;

use voodu_api::{Request, WorkloadId, WorkloadSummary};
use voodu_plugin_abi::messages::WorkloadKind;

use super::Call;
use crate::render::{table, WARNING};
use crate::{fail, OutputArg, EXIT_USAGE};

/// `vd get`'s arguments.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// What to list: stored deployments, statefulsets or workloads
    /// (both), or pods (the replicas Docker runs).
    #[arg(value_enum)]
    what: GetWhat,
    /// For pods: only this workload's (KIND/SCOPE/NAME).
    workload: Option<WorkloadId>,
    /// For pods: keep streaming changes as they happen (one JSON object
    /// per line with -o json).
    #[arg(short = 'w', long = "watch", conflicts_with = "orphans")]
    watch: bool,
    /// For pods: only the orphans, containers of this controller whose
    /// workload the store has no record of (a lost or replaced store, a
    /// restored backup); they are left running until adopted or pruned.
    #[arg(long)]
    orphans: bool,
    #[command(flatten)]
    output: OutputArg,
}

/// What `vd get` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GetWhat {
    /// Stored deployments.
    #[value(alias = "deployment")]
    Deployments,
    /// Stored statefulsets.
    #[value(alias = "statefulset")]
    Statefulsets,
    /// Stored jobs.
    #[value(alias = "job")]
    Jobs,
    /// Stored cronjobs.
    #[value(alias = "cronjob")]
    Cronjobs,
    /// Every stored workload.
    #[value(alias = "all")]
    Workloads,
    /// The replicas Docker runs.
    #[value(alias = "replicas", alias = "pod")]
    Pods,
    /// The cluster's nodes, alive or lost.
    #[value(alias = "node")]
    Nodes,
}

impl GetArgs {
    /// [`Request::Pods`] for pods, else [`Request::Get`] of the kind
    /// asked; `--orphans` of anything but pods is bad arguments.
    pub fn call(self) -> Result<Call, ExitCode> {
        let GetArgs {
            what,
            workload,
            watch,
            orphans,
            output,
        } = self;
        match (what, orphans) {
            (GetWhat::Nodes, false) => Ok(Call::new(Request::Nodes, output.output)),
            (GetWhat::Pods, _) => Ok(Call::new(
                Request::Pods {
                    workload,
                    watch,
                    orphans,
                },
                output.output,
            )),
            (what, true) => Err(fail(
                format!(
                    "vd get {}: --orphans lists pods only — `vd get pods --orphans`",
                    what.to_possible_value()
                        .map_or_else(String::new, |value| value.get_name().to_owned())
                ),
                EXIT_USAGE,
            )),
            (what, false) => {
                let kind = match what {
                    GetWhat::Deployments => Some(WorkloadKind::Deployment),
                    GetWhat::Statefulsets => Some(WorkloadKind::Statefulset),
                    GetWhat::Jobs => Some(WorkloadKind::Job),
                    GetWhat::Cronjobs => Some(WorkloadKind::Cronjob),
                    GetWhat::Workloads | GetWhat::Pods | GetWhat::Nodes => None,
                };
                Ok(Call::new(Request::Get { kind }, output.output))
            }
        }
    }
}

/// Prints the cluster's nodes as a table: `NAME STATUS LAST-SEEN PLUGINS
/// REPLICAS`, the answering node marked `*`, the leader's status `alive,
/// leader`.
pub fn node_table(nodes: &[voodu_api::NodeRow]) {
    if nodes.is_empty() {
        println!("no nodes");
        return;
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|node| {
            let plugins: Vec<String> = node
                .plugins
                .iter()
                .map(|plugin| format!("{} {} (ABI {})", plugin.name, plugin.version, plugin.abi))
                .collect();
            vec![
                if node.this_node {
                    format!("{} *", node.name)
                } else {
                    node.name.clone()
                },
                match (node.alive, node.leader) {
                    (true, true) => "alive, leader".to_owned(),
                    (true, false) => "alive".to_owned(),
                    (false, _) if node.waiting_ordinals.is_empty() => "lost".to_owned(),
                    (false, _) => format!(
                        "lost; waiting on it: {} (once its host is down, `vd node remove {}` moves them)",
                        node.waiting_ordinals.join(", "),
                        node.name
                    ),
                },
                node.last_seen.clone(),
                if plugins.is_empty() {
                    "-".to_owned()
                } else {
                    plugins.join(", ")
                },
                node.replicas.to_string(),
            ]
        })
        .collect();
    table(
        &["NAME", "STATUS", "LAST-SEEN", "PLUGINS", "REPLICAS"],
        &rows,
    );
    for node in nodes {
        for refused in &node.refused_plugins {
            println!(
                "{WARNING}node {} refused plugin {} {}{WARNING:#}: {}",
                node.name, refused.name, refused.version, refused.reason
            );
        }
    }
}

/// Prints the stored workloads as a table.
pub fn workload_table(workloads: &[WorkloadSummary]) {
    if workloads.is_empty() {
        println!("no workloads stored — `vd apply -f <manifests>` stores some");
        return;
    }
    let rows: Vec<Vec<String>> = workloads
        .iter()
        .map(|workload| {
            vec![
                workload.id.kind.to_string(),
                workload.id.scope.clone(),
                workload.id.name.clone(),
                workload.revision.to_string(),
                workload.replicas.to_string(),
                workload.image.clone().unwrap_or_else(|| "-".into()),
                if workload.blocks.is_empty() {
                    "-".into()
                } else {
                    workload.blocks.join(", ")
                },
                workload.updated_at.clone(),
            ]
        })
        .collect();
    table(
        &[
            "KIND", "SCOPE", "NAME", "REVISION", "REPLICAS", "IMAGE", "BLOCKS", "UPDATED",
        ],
        &rows,
    );
}

/// How long ago a Unix time was, shortly: `45s`, `12m`, `3h`, `2d`.
fn age(created_unix: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let seconds = now.saturating_sub(u64::try_from(created_unix).unwrap_or(0));
    match seconds {
        0..=119 => format!("{seconds}s"),
        120..=7_199 => format!("{}m", seconds / 60),
        7_200..=172_799 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// Prints replicas as a table, with a WORKLOAD column first unless they
/// are one workload's (`vd describe`).
pub fn replica_table(replicas: &[voodu_api::Replica], with_workload: bool) {
    if replicas.is_empty() {
        println!("no replicas");
        return;
    }
    // In a cluster, each replica's node.
    let with_node = replicas.iter().any(|replica| replica.node.is_some());
    let rows: Vec<Vec<String>> = replicas
        .iter()
        .map(|replica| {
            let mut row = Vec::new();
            if with_workload {
                row.push(replica.workload.to_string());
            }
            row.push(replica.replica_id.clone());
            if with_node {
                row.push(replica.node.clone().unwrap_or_else(|| "-".into()));
            }
            row.extend([
                replica.container_name.clone(),
                replica.state.clone(),
                match (replica.is_running(), replica.ready) {
                    (false, _) => "no".into(),
                    (true, Some(false)) => "no".into(),
                    (true, _) => "yes".into(),
                },
                replica.restarts.to_string(),
                age(replica.created),
                replica.ip.clone().unwrap_or_else(|| "-".into()),
                replica.spec_hash.clone(),
            ]);
            row
        })
        .collect();
    let mut header = Vec::new();
    if with_workload {
        header.push("WORKLOAD");
    }
    header.push("REPLICA");
    if with_node {
        header.push("NODE");
    }
    header.extend([
        "CONTAINER",
        "STATE",
        "READY",
        "RESTARTS",
        "AGE",
        "ADDRESS",
        "CONTAINER-HASH",
    ]);
    table(&header, &rows);
}
