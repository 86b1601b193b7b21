//! `vd node remove NAME`: [`Request::NodeRemove`], and its answer,
//! [`Response::NodeRemoved`](voodu_api::Response::NodeRemoved).

use anstream::println;
use clap::Subcommand;

use voodu_api::Request;

use super::Call;
use crate::render::GOOD;
use crate::OutputArg;

/// `vd node`'s arguments: a subcommand.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    #[command(subcommand)]
    command: NodeCommand,
}

/// What `vd node` does.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Declare a lost node's host gone for good. A lost node's
    /// statefulset ordinals wait for it (its host may still run them:
    /// two copies would be two primaries); removing it moves them to the
    /// other nodes. Make sure the host is down first. Refused while the
    /// node is alive.
    Remove(RemoveArgs),
}

/// `vd node remove`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    /// The node's name (`vd get nodes` lists them).
    name: String,
    #[command(flatten)]
    output: OutputArg,
}

impl NodeArgs {
    /// [`Request::NodeRemove`].
    pub fn call(self) -> Call {
        let NodeCommand::Remove(RemoveArgs { name, output }) = self.command;
        Call::new(Request::NodeRemove { name }, output.output)
    }
}

/// Says which node went and what moves.
pub fn removed(name: &str, ordinals: &[String], deployment_replicas: u32) {
    let moving = if ordinals.is_empty() {
        "no statefulset ordinal waited on it".to_owned()
    } else {
        format!(
            "its statefulset ordinals move to the other nodes: {}",
            ordinals.join(", ")
        )
    };
    println!(
        "{GOOD}removed{GOOD:#} node {name}: {moving}{}",
        if deployment_replicas == 0 {
            String::new()
        } else {
            format!("; {deployment_replicas} deployment replica(s) still placed on it move too")
        }
    );
}
