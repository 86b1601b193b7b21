//! Exclusive claims: what one block must hold alone across every workload
//! (the address it listens on), as its plugin's `validate` named it.
//!
//! The rule is written once here, as pure functions, and both stores call
//! it inside their apply transaction: SQLite over its `claims` table, etcd
//! over one key per protocol and port. An apply whose blocks claim what a
//! block of another workload holds, or what another block of the same
//! apply claims, stores nothing ([`crate::StoreError::ClaimsConflict`]).
//! A workload's claims are replaced whole by each apply of it, and
//! released when its deletion is finished (its plugins have forgotten its
//! blocks, so nothing listens there any more).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use voodu_model::workload::Location;
use voodu_model::{NormalisedBlock, WorkloadId};
use voodu_plugin_abi::messages::{Claim, ClaimProtocol};

use crate::WorkloadInput;

/// Who holds a claim: one block of one workload, and where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimHolder {
    /// The workload the block sits in.
    pub workload: WorkloadId,
    /// How messages name the block: `traffik "http" block`.
    pub block: String,
    /// Where the block was written, when the apply that stored it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Location>,
}

impl std::fmt::Display for ClaimHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.workload, self.block)?;
        if let Some(at) = &self.at {
            write!(f, " ({at})")?;
        }
        Ok(())
    }
}

/// One claim and the block that holds (or asks for) it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldClaim {
    /// What is claimed.
    pub claim: Claim,
    /// Who claims it.
    pub holder: ClaimHolder,
}

/// A claim that overlaps one already held: the apply that made it is
/// refused whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimConflict {
    /// The claim the apply made, and its block.
    pub claimant: HeldClaim,
    /// The claim it overlaps, held by another block (of another workload,
    /// or earlier in the same apply).
    pub held: HeldClaim,
}

impl ClaimConflict {
    /// The refusal as the claimant's workload reports it, after its
    /// `deployment/dupx/two: ` prefix: `traffik "http" block:
    /// 127.0.0.1:21300 is already claimed by deployment/dupx/one traffik
    /// "http" block (web.vd:8:3) — ...`.
    pub fn message(&self) -> String {
        let what = if self.claimant.claim == self.held.claim {
            format!("{} is already claimed", self.claimant.claim)
        } else {
            format!(
                "{} overlaps {}, already claimed",
                self.claimant.claim, self.held.claim
            )
        };
        format!(
            "{}: {what} by {} — two blocks never share a listener: give one of them another address, or remove one",
            self.claimant.holder.block, self.held.holder
        )
    }
}

impl std::fmt::Display for ClaimConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.claimant.holder.workload, self.message())
    }
}

/// Every claim of one block list, in block order, held by `workload`'s
/// blocks; `locations` says where each block was written (by position, as
/// long as it goes).
pub fn claims_of_blocks(
    workload: &WorkloadId,
    blocks: &[NormalisedBlock],
    locations: &[Location],
) -> Vec<HeldClaim> {
    blocks
        .iter()
        .enumerate()
        .flat_map(|(position, block)| {
            let holder = ClaimHolder {
                workload: workload.clone(),
                block: block.display_name(),
                at: locations.get(position).cloned(),
            };
            block.claims.iter().map(move |claim| HeldClaim {
                claim: claim.clone(),
                holder: holder.clone(),
            })
        })
        .collect()
}

/// The protocols and ports an apply's claims are on, and those its
/// workloads held before (`previous`): the keys a store reads.
pub fn ports_of<'a>(
    claims: impl IntoIterator<Item = &'a HeldClaim>,
) -> BTreeSet<(ClaimProtocol, u16)> {
    claims
        .into_iter()
        .map(|held| held.claim.port_key())
        .collect()
}

/// Settles an apply's claims: `held` is every claim on the apply's ports
/// held by workloads *outside* the apply (and `previous` what the applied
/// workloads held before, whose locations are kept for blocks the apply
/// gives none). Returns the applied workloads' claims, in order, to store
/// in place of their previous ones; or every conflict, when any.
pub fn settle(
    held: &[HeldClaim],
    previous: &[HeldClaim],
    applied: &[WorkloadInput],
) -> Result<Vec<HeldClaim>, Vec<ClaimConflict>> {
    let mut accepted: Vec<HeldClaim> = Vec::new();
    let mut conflicts = Vec::new();
    for input in applied {
        for mut claim in claims_of_blocks(&input.id, &input.blocks, &input.block_locations) {
            if claim.holder.at.is_none() {
                claim.holder.at = previous
                    .iter()
                    .find(|old| {
                        old.holder.workload == claim.holder.workload
                            && old.holder.block == claim.holder.block
                    })
                    .and_then(|old| old.holder.at.clone());
            }
            let overlapping = held
                .iter()
                .chain(accepted.iter())
                .find(|other| other.claim.overlaps(&claim.claim));
            match overlapping {
                Some(other) => conflicts.push(ClaimConflict {
                    held: other.clone(),
                    claimant: claim,
                }),
                None => accepted.push(claim),
            }
        }
    }
    if conflicts.is_empty() {
        Ok(accepted)
    } else {
        Err(conflicts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voodu_model::EndpointEnvelope;
    use voodu_plugin_abi::messages::{Addressing, WorkloadKind};

    fn input(name: &str, binds: &[&str]) -> WorkloadInput {
        let id = WorkloadId::new(WorkloadKind::Deployment, "dupx", name);
        WorkloadInput {
            id,
            core_spec: voodu_model::CoreSpec::of_image("img", 1),
            blocks: binds
                .iter()
                .map(|bind| NormalisedBlock {
                    block_type: "traffik".into(),
                    labels: vec!["http".into()],
                    spec: serde_json::json!({"bind": bind}),
                    endpoints: EndpointEnvelope {
                        port: Some(8084),
                        addressing: Addressing::Ip,
                    },
                    claims: vec![Claim::listen_tcp(bind.parse().unwrap())],
                })
                .collect(),
            source: None,
            block_locations: vec![Location {
                file: "web.vd".into(),
                line: 8,
                column: 3,
            }],
        }
    }

    #[test]
    fn two_blocks_of_one_apply_that_claim_one_address_are_both_named() {
        let conflicts = settle(
            &[],
            &[],
            &[
                input("one", &["127.0.0.1:21300"]),
                input("two", &["127.0.0.1:21300"]),
            ],
        )
        .unwrap_err();
        assert_eq!(conflicts.len(), 1);
        assert_eq!(
            conflicts[0].to_string(),
            "deployment/dupx/two: traffik \"http\" block: 127.0.0.1:21300 is already claimed by deployment/dupx/one traffik \"http\" block (web.vd:8:3) — two blocks never share a listener: give one of them another address, or remove one"
        );
    }

    #[test]
    fn a_claim_held_outside_the_apply_refuses_an_overlapping_one_and_not_a_distinct_one() {
        let held = claims_of_blocks(
            &WorkloadId::new(WorkloadKind::Deployment, "prod", "web"),
            &input("x", &["0.0.0.0:80"]).blocks,
            &[],
        );
        let conflicts = settle(&held, &[], &[input("two", &["127.0.0.1:80"])]).unwrap_err();
        assert!(conflicts[0]
            .message()
            .contains("127.0.0.1:80 overlaps 0.0.0.0:80, already claimed by deployment/prod/web traffik \"http\" block —"));
        let accepted = settle(&held, &[], &[input("two", &["127.0.0.1:81"])]).unwrap();
        assert_eq!(accepted.len(), 1);
    }

    #[test]
    fn a_block_restored_without_a_location_keeps_the_one_it_had() {
        let mut again = input("one", &["127.0.0.1:21300"]);
        let previous = claims_of_blocks(&again.id, &again.blocks, &again.block_locations);
        again.block_locations.clear();
        let accepted = settle(&[], &previous, &[again]).unwrap();
        assert_eq!(accepted[0].holder.at, previous[0].holder.at);
    }
}
