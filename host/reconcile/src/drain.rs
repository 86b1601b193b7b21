//! Draining a replica before its removal: every plugin with a block on the
//! workload is asked in parallel and polled at the `retry_after_ms` it
//! gives, until all say drained or the budget runs out. A plugin cannot hold
//! a removal hostage: what has not finished by then is reported, by name,
//! and the removal goes ahead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use voodu_plugin_abi::messages::{DrainReply, DrainRequest, Endpoint};

use super::plugins::{BlockCallError, BlockPlugins};
use super::publish::endpoint_set;
use super::tally::{DrainResult, Tally};
use voodu_model::serving::ServingReplica;
use voodu_model::{NormalisedBlock, WorkloadId};

/// The shortest wait between two drain polls, whatever a plugin asks.
const MIN_POLL: Duration = Duration::from_millis(10);

/// A block whose plugin had not finished draining.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unfinished {
    /// `traffik "http" block`.
    pub block: String,
    /// The plugin's name.
    pub plugin: String,
    /// What happened, as the rest of a sentence about the block: "had not
    /// finished draining within its 30s budget", "failed to drain it: ...".
    pub why: String,
}

/// How a drain ended (on this node, or on another node of the cluster,
/// which sends it back through the store).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DrainOutcome {
    /// Blocks that said drained.
    pub drained: Vec<String>,
    /// Blocks that did not.
    pub unfinished: Vec<Unfinished>,
    /// How long the drain took.
    pub elapsed: Duration,
}

/// Asks every block's plugin to drain `replica`, in parallel, within
/// `budget`. The budget bounds everything: a plugin whose call hangs is
/// reported when the budget runs out, not when its call bound does. Each
/// block's drain is told to `tally`.
pub(crate) async fn drain_replica(
    plugins: &Arc<dyn BlockPlugins>,
    tally: &Tally,
    workload: &WorkloadId,
    blocks: &[NormalisedBlock],
    replica: &ServingReplica,
    budget: Duration,
) -> DrainOutcome {
    let started = Instant::now();
    // A block that asked for no endpoints has never been told of a replica,
    // so it has nothing to drain.
    let drained_blocks = blocks
        .iter()
        .filter(|block| block.endpoints.takes_endpoints());
    let results = futures_util::future::join_all(drained_blocks.map(|block| async move {
        let result = drain_block(plugins, workload, block, replica, budget, started).await;
        let ended = result
            .as_ref()
            .map_or_else(|(ended, _)| *ended, |()| DrainResult::Drained);
        tally.drained(
            workload,
            block,
            &replica.replica_id,
            ended,
            started.elapsed(),
        );
        (
            block.display_name(),
            result.map_err(|(_, unfinished)| unfinished),
        )
    }))
    .await;
    let mut outcome = DrainOutcome {
        drained: Vec::new(),
        unfinished: Vec::new(),
        elapsed: started.elapsed(),
    };
    for (block, result) in results {
        match result {
            Ok(()) => outcome.drained.push(block),
            Err(unfinished) => outcome.unfinished.push(unfinished),
        }
    }
    outcome
}

async fn drain_block(
    plugins: &Arc<dyn BlockPlugins>,
    workload: &WorkloadId,
    block: &NormalisedBlock,
    replica: &ServingReplica,
    budget: Duration,
    started: Instant,
) -> Result<(), (DrainResult, Unfinished)> {
    let unfinished = |why: String| {
        (
            DrainResult::Failed,
            Unfinished {
                block: block.display_name(),
                plugin: block.block_type.clone(),
                why,
            },
        )
    };
    let out_of_budget = || {
        let (_, unfinished) = unfinished(format!(
            "had not finished draining within its {} budget",
            humantime::format_duration(budget)
        ));
        (DrainResult::BudgetExhausted, unfinished)
    };
    // The replica as this block's publications named it, even if it is no
    // longer running.
    let endpoint = endpoint_set(block, std::slice::from_ref(replica))
        .pop()
        .unwrap_or_else(|| Endpoint {
            replica_id: replica.replica_id.clone(),
            address: match block.endpoints.port {
                Some(port) => format!("{}:{port}", replica.container_name),
                None => replica.container_name.clone(),
            },
            node: replica.node.as_ref().map(ToString::to_string),
        });
    loop {
        let elapsed = started.elapsed();
        if elapsed >= budget {
            return Err(out_of_budget());
        }
        let request = DrainRequest {
            kind: workload.kind,
            scope: workload.scope.clone(),
            name: workload.name.clone(),
            block: block.to_block(),
            replica: endpoint.clone(),
            budget_ms: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
            elapsed_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        };
        let call = {
            let plugins = plugins.clone();
            let plugin = block.block_type.clone();
            tokio::task::spawn_blocking(move || plugins.drain(&plugin, &request))
        };
        let remaining = budget.saturating_sub(started.elapsed());
        let reply = match tokio::time::timeout(remaining, call).await {
            Err(_) => return Err(out_of_budget()),
            Ok(Err(join)) => Err(BlockCallError::Failed(format!(
                "the drain call panicked in the host: {join}"
            ))),
            Ok(Ok(reply)) => reply,
        };
        match reply {
            Ok(DrainReply::Drained) => return Ok(()),
            Ok(DrainReply::Draining { retry_after_ms }) => {
                let remaining = budget.saturating_sub(started.elapsed());
                tokio::time::sleep(
                    Duration::from_millis(retry_after_ms)
                        .max(MIN_POLL)
                        .min(remaining),
                )
                .await;
            }
            Err(BlockCallError::NotInstalled(_)) => {
                return Err(unfinished(
                    "could not be asked, since the plugin is not installed".into(),
                ))
            }
            Err(error) => return Err(unfinished(format!("failed to drain it: {error}"))),
        }
    }
}

impl crate::Reconciler {
    /// Drains `replica` of `workload`, which another node of the cluster is
    /// about to remove, from this node's plugins within `budget`: every
    /// block of the workload as stored (or, once deleted, as its tombstone
    /// keeps it) is asked, as for a replica of this node's own.
    pub async fn drain_for_peer(
        &self,
        workload: &WorkloadId,
        replica: &ServingReplica,
        budget: Duration,
    ) -> DrainOutcome {
        let blocks = match self.store.workload(workload) {
            Ok(Some(stored)) => stored.blocks,
            Ok(None) => match self.store.tombstone(workload) {
                Ok(Some(tombstone)) => tombstone.blocks,
                Ok(None) => Vec::new(),
                Err(error) => {
                    tracing::warn!(%error, %workload, "the blocks to drain could not be read");
                    Vec::new()
                }
            },
            Err(error) => {
                tracing::warn!(%error, %workload, "the blocks to drain could not be read");
                Vec::new()
            }
        };
        drain_replica(
            &self.plugins,
            &self.tally,
            workload,
            &blocks,
            replica,
            budget,
        )
        .await
    }
}
