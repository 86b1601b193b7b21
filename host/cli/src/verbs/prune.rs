//! `vd prune --orphans`: [`Request::PruneOrphans`] (named first, in text
//! mode, by a dry run of it), and its answer,
//! [`Response::Pruned`].

use anstream::println;

use voodu_api::client::Client;
use voodu_api::{Request, Response};

use super::Call;
use crate::{Output, OutputArg};

/// `vd prune`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Remove the orphans (`vd get pods --orphans` lists them).
    #[arg(long, required = true)]
    orphans: bool,
    /// Only name what would be removed.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    output: OutputArg,
}

impl PruneArgs {
    /// [`Request::PruneOrphans`]; unless a dry run or `-o json`, first
    /// names the orphans it is about to remove, asking `client`.
    pub fn call(self, client: &Client) -> Call {
        let PruneArgs {
            orphans: _,
            dry_run,
            output,
        } = self;
        if !dry_run && output.output == Output::Text {
            name_orphans(client);
        }
        Call::new(Request::PruneOrphans { dry_run }, output.output)
    }
}

/// Names the orphans a prune is about to remove, before it removes them.
fn name_orphans(client: &Client) {
    let listed = client.call(&Request::PruneOrphans { dry_run: true }, &mut |_| {});
    if let Ok(Response::Pruned { replicas, .. }) = listed {
        for replica in &replicas {
            std::println!(
                "{}: removing replica {} ({}), drained first",
                replica.workload,
                replica.replica_id,
                replica.container_name
            );
        }
    }
}

/// Prints the orphans removed, or that would be.
pub fn pruned(replicas: &[voodu_api::Replica], dry_run: bool) {
    if replicas.is_empty() {
        println!("no orphans: every container of this controller belongs to a stored workload");
        return;
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for replica in replicas {
        let made_by = replica
            .store_id
            .as_deref()
            .map(|id| format!(", made for store {id}"))
            .unwrap_or_default();
        println!(
            "{}: {verb} replica {} ({}{made_by})",
            replica.workload, replica.replica_id, replica.container_name
        );
    }
    if dry_run {
        println!("dry run: nothing was removed — `vd prune --orphans` removes them");
    }
}
