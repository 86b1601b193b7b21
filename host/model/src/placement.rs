//! Placement: which node of a cluster runs each replica of a workload.
//!
//! The cluster's leader keeps one [`Placement`] per workload and computes
//! the next one with [`place`], a pure function of the previous placement
//! and of what it knows of the nodes, so every rule is unit-tested without
//! a cluster:
//!
//! - A workload's replicas are **slots**. A deployment's slots are
//!   interchangeable: a node runs as many replicas as it holds slots. A
//!   statefulset's slot `i` is its ordinal `i`.
//! - Placement is **sticky**: a slot stays on its node while that node is
//!   alive and may run the workload. New slots go to the eligible node with
//!   the fewest slots of this workload, then the fewest slots overall, then
//!   by name.
//! - A node that is **lost** (its lease expired) gives up its deployment
//!   slots at once: a second copy of a stateless replica is harmless. A
//!   statefulset's ordinal **never moves on a lease's expiry alone**: a
//!   lost node may be a live host whose `vd` died, its container still
//!   running, and two copies of an ordinal are two database primaries. It
//!   moves when its node comes back and releases it, or when an operator
//!   declares the host gone (`vd node remove NAME`, as Kubernetes's
//!   out-of-service taint for a non-graceful shutdown): the node is then
//!   **removed**, and gives up every slot at once.
//! - A deployment **converges to an even spread**: when one eligible node
//!   holds two slots more than another (a node that joined, or came back,
//!   or reported its plugins after the replicas were placed), one slot
//!   moves, surge-first: the emptier node gets an extra slot
//!   ([`Placement::moving`]), and only once its replicas all serve does
//!   the fuller node give one up (drained, as any removal). One move at a
//!   time per workload, until the spread is even. Statefulset ordinals
//!   never move for balance.
//! - An ordinal whose node is alive but may no longer run it (a `nodes`
//!   list that leaves it out, a plugin it lacks) is **released** (an empty
//!   node name): its node stops it, and the ordinal goes to another node
//!   only once no live node reports running it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use voodu_plugin_abi::messages::WorkloadKind;

/// The longest node name.
pub const MAX_NODE_NAME: usize = 63;

/// A node's name (`--node`, and each entry of a workload's `nodes`): 1 to
/// 63 letters, digits, `.`, `-` or `_`, starting with a letter or digit, as
/// a host name may be.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeName(String);

/// Why a text is not a node name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a node name: {reason} — a node name is 1 to {MAX_NODE_NAME} letters, digits, '.', '-' or '_', starting with a letter or digit, such as \"node-a\"")]
pub struct NodeNameError {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl FromStr for NodeName {
    type Err = NodeNameError;

    fn from_str(input: &str) -> Result<NodeName, NodeNameError> {
        let refuse = |reason| NodeNameError {
            input: input.to_owned(),
            reason,
        };
        let mut chars = input.chars();
        match chars.next() {
            None => return Err(refuse("it is empty")),
            Some(first) if !first.is_ascii_alphanumeric() => {
                return Err(refuse("it must start with a letter or a digit"))
            }
            Some(_) => {}
        }
        if input.len() > MAX_NODE_NAME {
            return Err(refuse("it is too long"));
        }
        if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')) {
            return Err(refuse(
                "it holds a character other than a letter, a digit, '.', '-' or '_'",
            ));
        }
        Ok(NodeName(input.to_owned()))
    }
}

impl TryFrom<String> for NodeName {
    type Error = NodeNameError;

    fn try_from(text: String) -> Result<NodeName, NodeNameError> {
        text.parse()
    }
}

impl From<NodeName> for String {
    fn from(name: NodeName) -> String {
        name.0
    }
}

impl NodeName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which node runs each slot of one workload (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Slot `i`'s node, `None` while the slot is unassigned (no node may
    /// run it yet, or a statefulset ordinal released by its node and not
    /// yet taken by another).
    pub slots: Vec<Option<NodeName>>,
    /// A deployment slot moving for balance: the last slot is an extra
    /// one on `to`, and `from` gives one up once `to`'s replicas serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving: Option<Move>,
}

/// One slot moving from a fuller node to an emptier one, surge-first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The node that gives a slot up once the move is done.
    pub from: NodeName,
    /// The node that holds the extra slot meanwhile.
    pub to: NodeName,
}

impl Placement {
    /// How many slots `node` holds: the replicas of a deployment it runs.
    pub fn count_on(&self, node: &NodeName) -> u32 {
        let held = self.slots.iter().filter(|slot| slot.as_ref() == Some(node));
        u32::try_from(held.count()).unwrap_or(u32::MAX)
    }

    /// The statefulset ordinals `node` runs.
    pub fn ordinals_on(&self, node: &NodeName) -> BTreeSet<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.as_ref() == Some(node))
            .filter_map(|(ordinal, _)| u32::try_from(ordinal).ok())
            .collect()
    }

    /// How many slots each node holds.
    pub fn load(&self) -> BTreeMap<NodeName, u32> {
        let mut load = BTreeMap::new();
        for node in self.slots.iter().flatten() {
            *load.entry(node.clone()).or_default() += 1;
        }
        load
    }
}

/// What the leader knows of one node, for one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeStanding {
    /// Alive, and may run the workload (in its `nodes` list, if any, with
    /// every plugin its blocks need).
    Eligible,
    /// Alive, but may not run the workload.
    Ineligible,
    /// Its lease expired: its deployment slots move, its statefulset
    /// ordinals wait for it (or for an operator's `vd node remove`).
    Lost,
    /// An operator declared its host gone (`vd node remove`), or the
    /// leader never saw it: every slot moves.
    Removed,
}

/// What [`place`] looks at besides the previous placement.
#[derive(Debug)]
pub struct PlacementInput<'a> {
    /// Deployment or statefulset.
    pub kind: WorkloadKind,
    /// The stored replica count.
    pub replicas: u32,
    /// Every node the leader knows, with its standing for this workload.
    /// A node the map leaves out counts as [`NodeStanding::Removed`].
    pub nodes: &'a BTreeMap<NodeName, NodeStanding>,
    /// The statefulset ordinals each live node reports it holds a container
    /// for (running or stopped).
    pub held_ordinals: &'a BTreeMap<NodeName, BTreeSet<u32>>,
    /// This workload's serving replicas on each node (what each node
    /// advertises): a move for balance is done once its new slot serves.
    pub serving: &'a BTreeMap<NodeName, u32>,
    /// How many slots each node holds over every workload placed before
    /// this one: new slots go where there are fewest. Updated with this
    /// workload's placement.
    pub cluster_load: &'a mut BTreeMap<NodeName, u32>,
}

/// The next placement of one workload (see the module doc).
pub fn place(previous: &Placement, input: PlacementInput<'_>) -> Placement {
    let standing = |slot: &Option<NodeName>| match slot {
        Some(node) => input
            .nodes
            .get(node)
            .copied()
            .unwrap_or(NodeStanding::Removed),
        None => NodeStanding::Removed,
    };
    let eligible: Vec<&NodeName> = input
        .nodes
        .iter()
        .filter(|(_, standing)| **standing == NodeStanding::Eligible)
        .map(|(name, _)| name)
        .collect();
    let wanted = usize::try_from(input.replicas).unwrap_or(usize::MAX);
    let mut slots = previous.slots.clone();
    let mut moving = None;
    // This workload's previous slots leave the cluster's load; those kept
    // are counted again below.
    for node in previous.slots.iter().flatten() {
        if let Some(load) = input.cluster_load.get_mut(node) {
            *load = load.saturating_sub(1);
        }
    }
    match input.kind {
        // A job's runs are started where they are asked for, not placed.
        WorkloadKind::Job | WorkloadKind::Cronjob => slots.clear(),
        WorkloadKind::Deployment => {
            // A move for balance in progress: done once the new slot's
            // node serves all its slots (the fuller one gives one up
            // now), kept while it does not yet, called off when either
            // node may no longer run the workload.
            if let Some(step) = &previous.moving {
                let eligible_both = [&step.from, &step.to]
                    .iter()
                    .all(|node| input.nodes.get(*node).copied() == Some(NodeStanding::Eligible));
                let surge_held = slots.len() == wanted + 1
                    && slots.last().and_then(Option::as_ref) == Some(&step.to);
                if eligible_both && surge_held {
                    let placed_on_to = Placement {
                        slots: slots.clone(),
                        moving: None,
                    }
                    .count_on(&step.to);
                    let serves = input.serving.get(&step.to).copied().unwrap_or(0);
                    if serves >= placed_on_to {
                        if let Some(given_up) = slots
                            .iter()
                            .rposition(|slot| slot.as_ref() == Some(&step.from))
                        {
                            slots.remove(given_up);
                        }
                    } else {
                        moving = Some(step.clone());
                    }
                } else if surge_held {
                    slots.pop();
                }
            }
            let wanted = wanted + usize::from(moving.is_some());
            // Slots on nodes that may no longer run them are given up.
            for slot in &mut slots {
                if standing(slot) != NodeStanding::Eligible {
                    *slot = None;
                }
            }
            // A scale down gives up unassigned slots first, then slots of
            // the node with the most, the last of them.
            while slots.len() > wanted {
                if let Some(free) = slots.iter().rposition(Option::is_none) {
                    slots.remove(free);
                    continue;
                }
                let load = Placement {
                    slots: slots.clone(),
                    moving: None,
                }
                .load();
                let busiest = load
                    .iter()
                    .max_by_key(|(name, count)| (**count, std::cmp::Reverse(*name)))
                    .map(|(name, _)| name.clone());
                match slots.iter().rposition(|slot| *slot == busiest) {
                    Some(last) => {
                        slots.remove(last);
                    }
                    None => {
                        slots.pop();
                    }
                }
            }
            slots.resize(wanted, None);
            for index in 0..slots.len() {
                if slots[index].is_none() {
                    slots[index] = least_loaded(&eligible, &slots, input.cluster_load);
                }
            }
            if moving.is_none() && slots.iter().all(Option::is_some) {
                moving = start_move(&eligible, &mut slots);
            }
        }
        WorkloadKind::Statefulset => {
            slots.truncate(wanted);
            slots.resize(wanted, None);
            for slot in &mut slots {
                match standing(slot) {
                    // A lost node's ordinal waits for it: it may still run.
                    NodeStanding::Eligible | NodeStanding::Lost => {}
                    // Released: a live node stops it first; a removed
                    // node's host is gone.
                    NodeStanding::Ineligible | NodeStanding::Removed => *slot = None,
                }
            }
            for ordinal in 0..slots.len() {
                if slots[ordinal].is_some() {
                    continue;
                }
                // A removed node's report no longer counts: its host is
                // gone. A lost one's still does: it may be running.
                let held_somewhere = input.held_ordinals.iter().any(|(node, held)| {
                    input
                        .nodes
                        .get(node)
                        .is_some_and(|standing| *standing != NodeStanding::Removed)
                        && u32::try_from(ordinal).is_ok_and(|n| held.contains(&n))
                });
                if !held_somewhere {
                    slots[ordinal] = least_loaded(&eligible, &slots, input.cluster_load);
                }
            }
        }
    }
    for node in slots.iter().flatten() {
        *input.cluster_load.entry(node.clone()).or_default() += 1;
    }
    Placement { slots, moving }
}

/// Starts one move for balance when an eligible node holds two slots more
/// than another: an extra slot on the emptiest (appended), and the move
/// naming the fullest, which gives one up once it serves.
fn start_move(eligible: &[&NodeName], slots: &mut Vec<Option<NodeName>>) -> Option<Move> {
    let count = |node: &NodeName| {
        slots
            .iter()
            .filter(|slot| slot.as_ref() == Some(node))
            .count()
    };
    let fullest = eligible
        .iter()
        .max_by_key(|node| (count(node), std::cmp::Reverse(**node)))?;
    let emptiest = eligible.iter().min_by_key(|node| (count(node), **node))?;
    if count(fullest) < count(emptiest) + 2 {
        return None;
    }
    slots.push(Some((*emptiest).clone()));
    Some(Move {
        from: (*fullest).clone(),
        to: (*emptiest).clone(),
    })
}

/// The eligible node with the fewest slots of this workload, then the
/// fewest overall, then the first by name; `None` when none is eligible.
fn least_loaded(
    eligible: &[&NodeName],
    slots: &[Option<NodeName>],
    cluster_load: &BTreeMap<NodeName, u32>,
) -> Option<NodeName> {
    eligible
        .iter()
        .min_by_key(|node| {
            let here = slots
                .iter()
                .filter(|slot| slot.as_ref() == Some(**node))
                .count();
            let overall = cluster_load.get(**node).copied().unwrap_or(0);
            (here, overall, (**node).clone())
        })
        .map(|node| (*node).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> NodeName {
        text.parse().unwrap()
    }

    fn nodes(list: &[(&str, NodeStanding)]) -> BTreeMap<NodeName, NodeStanding> {
        list.iter()
            .map(|(node, standing)| (name(node), *standing))
            .collect()
    }

    fn slots(placement: &Placement) -> Vec<&str> {
        placement
            .slots
            .iter()
            .map(|slot| slot.as_ref().map_or("-", NodeName::as_str))
            .collect()
    }

    fn placed(list: &[&str]) -> Placement {
        Placement {
            slots: list
                .iter()
                .map(|node| (*node != "-").then(|| name(node)))
                .collect(),
            moving: None,
        }
    }

    fn run(
        kind: WorkloadKind,
        replicas: u32,
        previous: &Placement,
        standing: &BTreeMap<NodeName, NodeStanding>,
        held: &BTreeMap<NodeName, BTreeSet<u32>>,
    ) -> Placement {
        let mut load = BTreeMap::new();
        place(
            previous,
            PlacementInput {
                kind,
                replicas,
                nodes: standing,
                held_ordinals: held,
                serving: &BTreeMap::new(),
                cluster_load: &mut load,
            },
        )
    }

    use NodeStanding::*;
    use WorkloadKind::{Deployment, Statefulset};

    #[test]
    fn node_names_are_host_like() {
        assert!("node-a".parse::<NodeName>().is_ok());
        assert!("web-1.example.org".parse::<NodeName>().is_ok());
        for bad in ["", "-a", "a/b", "a b", &"x".repeat(64)] {
            let error = bad.parse::<NodeName>().unwrap_err().to_string();
            assert!(error.contains("is not a node name"), "{error}");
        }
    }

    #[test]
    fn a_new_deployment_spreads_over_the_eligible_nodes() {
        let standing = nodes(&[("a", Eligible), ("b", Eligible), ("c", Eligible)]);
        let placement = run(
            Deployment,
            4,
            &Placement::default(),
            &standing,
            &BTreeMap::new(),
        );
        assert_eq!(slots(&placement), ["a", "b", "c", "a"]);
    }

    #[test]
    fn workloads_of_one_replica_go_to_the_least_loaded_node() {
        let standing = nodes(&[("a", Eligible), ("b", Eligible), ("c", Eligible)]);
        let mut load = BTreeMap::new();
        let mut placed_on = Vec::new();
        for _ in 0..3 {
            let placement = place(
                &Placement::default(),
                PlacementInput {
                    kind: Deployment,
                    replicas: 1,
                    nodes: &standing,
                    held_ordinals: &BTreeMap::new(),
                    serving: &BTreeMap::new(),
                    cluster_load: &mut load,
                },
            );
            placed_on.push(slots(&placement)[0].to_owned());
        }
        assert_eq!(placed_on, ["a", "b", "c"]);
    }

    #[test]
    fn placement_is_sticky_and_a_lost_nodes_deployment_slots_move_at_once() {
        let before = placed(&["a", "b", "c"]);
        let all = nodes(&[("a", Eligible), ("b", Eligible), ("c", Eligible)]);
        assert_eq!(run(Deployment, 3, &before, &all, &BTreeMap::new()), before);
        let b_lost = nodes(&[("a", Eligible), ("b", Lost), ("c", Eligible)]);
        let after = run(Deployment, 3, &before, &b_lost, &BTreeMap::new());
        assert_eq!(slots(&after)[0], "a");
        assert_eq!(slots(&after)[2], "c");
        assert!(["a", "c"].contains(&slots(&after)[1]), "{after:?}");
    }

    #[test]
    fn a_lopsided_deployment_moves_one_slot_at_a_time_surge_first() {
        let all = nodes(&[("a", Eligible), ("b", Eligible), ("c", Eligible)]);
        let step = |previous: &Placement, serving: &[(&str, u32)]| {
            let serving: BTreeMap<NodeName, u32> = serving
                .iter()
                .map(|(node, count)| (name(node), *count))
                .collect();
            place(
                previous,
                PlacementInput {
                    kind: Deployment,
                    replicas: 3,
                    nodes: &all,
                    held_ordinals: &BTreeMap::new(),
                    serving: &serving,
                    cluster_load: &mut BTreeMap::new(),
                },
            )
        };
        // Placed while b and c had not reported their plugins: all on a.
        let lopsided = placed(&["a", "a", "a"]);
        let surging = step(&lopsided, &[("a", 3)]);
        assert_eq!(
            slots(&surging),
            ["a", "a", "a", "b"],
            "an extra slot on b first"
        );
        assert_eq!(
            surging.moving,
            Some(Move {
                from: name("a"),
                to: name("b")
            })
        );
        // b's replica does not serve yet: a keeps all three.
        assert_eq!(step(&surging, &[("a", 3)]), surging);
        // It serves: a gives one up, and the next move starts, to c.
        let next = step(&surging, &[("a", 3), ("b", 1)]);
        assert_eq!(slots(&next), ["a", "a", "b", "c"]);
        assert_eq!(
            next.moving,
            Some(Move {
                from: name("a"),
                to: name("c")
            })
        );
        let even = step(&next, &[("a", 2), ("b", 1), ("c", 1)]);
        assert_eq!(slots(&even), ["a", "b", "c"]);
        assert_eq!(even.moving, None, "even: no move");
        assert_eq!(step(&even, &[("a", 1), ("b", 1), ("c", 1)]), even);
    }

    #[test]
    fn a_move_whose_node_is_lost_is_called_off() {
        let surging = Placement {
            slots: placed(&["a", "a", "a", "b"]).slots,
            moving: Some(Move {
                from: name("a"),
                to: name("b"),
            }),
        };
        let b_lost = nodes(&[("a", Eligible), ("b", Lost)]);
        let after = run(Deployment, 3, &surging, &b_lost, &BTreeMap::new());
        assert_eq!(slots(&after), ["a", "a", "a"]);
        assert_eq!(after.moving, None);
    }

    #[test]
    fn a_nodes_list_keeps_replicas_on_the_nodes_it_names() {
        let standing = nodes(&[("a", Eligible), ("b", Ineligible), ("c", Eligible)]);
        let placement = run(
            Deployment,
            4,
            &placed(&["b", "b"]),
            &standing,
            &BTreeMap::new(),
        );
        assert_eq!(slots(&placement), ["a", "c", "a", "c"]);
    }

    #[test]
    fn a_scale_down_takes_from_the_busiest_node() {
        let standing = nodes(&[("a", Eligible), ("b", Eligible)]);
        let placement = run(
            Deployment,
            2,
            &placed(&["a", "b", "a"]),
            &standing,
            &BTreeMap::new(),
        );
        assert_eq!(slots(&placement), ["a", "b"]);
    }

    #[test]
    fn with_no_eligible_node_slots_stay_unassigned() {
        let standing = nodes(&[("a", Ineligible)]);
        let placement = run(
            Deployment,
            2,
            &Placement::default(),
            &standing,
            &BTreeMap::new(),
        );
        assert_eq!(slots(&placement), ["-", "-"]);
    }

    #[test]
    fn a_lost_nodes_ordinal_waits_for_it_and_moves_once_its_node_is_removed() {
        let before = placed(&["a", "b"]);
        let lost = nodes(&[("a", Eligible), ("b", Lost), ("c", Eligible)]);
        let held = BTreeMap::from([(name("b"), BTreeSet::from([1]))]);
        // However long it stays lost: its host may still run the ordinal.
        assert_eq!(run(Statefulset, 2, &before, &lost, &held), before);
        assert_eq!(
            run(Statefulset, 2, &before, &lost, &BTreeMap::new()),
            before
        );
        let removed = nodes(&[("a", Eligible), ("b", Removed), ("c", Eligible)]);
        let after = run(Statefulset, 2, &before, &removed, &held);
        assert_eq!(
            slots(&after),
            ["a", "c"],
            "a removed node's report no longer counts"
        );
        // A node the leader never saw counts as removed.
        let unknown = nodes(&[("a", Eligible), ("c", Eligible)]);
        assert_eq!(
            slots(&run(Statefulset, 2, &before, &unknown, &BTreeMap::new())),
            ["a", "c"]
        );
    }

    #[test]
    fn an_ordinal_released_by_a_live_node_moves_only_once_that_node_stopped_it() {
        let before = placed(&["a", "b"]);
        let standing = nodes(&[("a", Eligible), ("b", Ineligible), ("c", Eligible)]);
        let held = BTreeMap::from([(name("b"), BTreeSet::from([1]))]);
        let released = run(Statefulset, 2, &before, &standing, &held);
        assert_eq!(slots(&released), ["a", "-"]);
        let moved = run(Statefulset, 2, &released, &standing, &BTreeMap::new());
        assert_eq!(slots(&moved), ["a", "c"]);
    }

    #[test]
    fn a_statefulset_scales_by_its_highest_ordinals() {
        let standing = nodes(&[("a", Eligible), ("b", Eligible)]);
        let grown = run(Statefulset, 3, &placed(&["b"]), &standing, &BTreeMap::new());
        assert_eq!(slots(&grown), ["b", "a", "a"]);
        let shrunk = run(Statefulset, 1, &grown, &standing, &BTreeMap::new());
        assert_eq!(slots(&shrunk), ["b"]);
        assert_eq!(grown.ordinals_on(&name("a")), BTreeSet::from([1, 2]));
        assert_eq!(grown.count_on(&name("b")), 1);
    }
}
