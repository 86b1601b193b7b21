//! `vd config set|get|list|unset`: voodu's config buckets
//! ([`Request::ConfigSet`] and its siblings), and their answers
//! ([`Response::ConfigChanged`](voodu_api::Response::ConfigChanged),
//! [`Response::Config`](voodu_api::Response::Config),
//! [`Response::ConfigValue`](voodu_api::Response::ConfigValue)).

use std::collections::BTreeMap;
use std::process::ExitCode;

use anstream::{eprintln, println};
use clap::Subcommand;

use voodu_api::{ConfigChange, ConfigListing, ConfigVariable, Request};
use voodu_model::config::BucketName;

use super::Call;
use crate::render::GOOD;
use crate::{fail, OutputArg, EXIT_USAGE};

/// `vd config`'s arguments: a subcommand.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

/// What `vd config` does.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Set variables of a bucket (scope/name); the workloads that take it
    /// (env_from, or their own bucket) roll to the new env.
    Set(SetArgs),
    /// Print one variable's value (a secret's only with --reveal).
    Get(GetArgs),
    /// List a bucket's variables (secrets hidden), or every bucket.
    List(ListArgs),
    /// Remove variables of a bucket; the workloads that take it roll.
    Unset(UnsetArgs),
}

/// `vd config set`'s arguments.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The bucket: scope/name (`prod/shared`, or a workload's own:
    /// `prod/api`).
    bucket: BucketName,
    /// The variables, KEY=VALUE each.
    #[arg(required = true, value_name = "KEY=VALUE")]
    pairs: Vec<String>,
    /// Keep them as secrets: `vd config list` never prints them, and
    /// `vd config get` only with --reveal.
    #[arg(long)]
    secret: bool,
    #[command(flatten)]
    output: OutputArg,
}

/// `vd config get`'s arguments.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The bucket.
    bucket: BucketName,
    /// The variable.
    key: String,
    /// Print a secret's value.
    #[arg(long)]
    reveal: bool,
    #[command(flatten)]
    output: OutputArg,
}

/// `vd config list`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The bucket; without one, every bucket's name.
    bucket: Option<BucketName>,
    #[command(flatten)]
    output: OutputArg,
}

/// `vd config unset`'s arguments.
#[derive(Debug, clap::Args)]
pub struct UnsetArgs {
    /// The bucket.
    bucket: BucketName,
    /// The variables.
    #[arg(required = true, value_name = "KEY")]
    keys: Vec<String>,
    #[command(flatten)]
    output: OutputArg,
}

impl ConfigArgs {
    /// The request of the subcommand; a `set` argument that is not
    /// KEY=VALUE fails here.
    pub fn call(self) -> Result<Call, ExitCode> {
        Ok(match self.command {
            ConfigCommand::Set(SetArgs {
                bucket,
                pairs,
                secret,
                output,
            }) => {
                let mut values = BTreeMap::new();
                for pair in pairs {
                    let Some((key, value)) = pair.split_once('=') else {
                        return Err(fail(
                            format!("vd config set: {pair:?} is not KEY=VALUE — write DATABASE_URL=postgres://db/app"),
                            EXIT_USAGE,
                        ));
                    };
                    values.insert(key.to_owned(), value.to_owned());
                }
                Call::new(
                    Request::ConfigSet {
                        bucket,
                        values,
                        secret,
                    },
                    output.output,
                )
            }
            ConfigCommand::Get(GetArgs {
                bucket,
                key,
                reveal,
                output,
            }) => Call::new(
                Request::ConfigGet {
                    bucket,
                    key,
                    reveal,
                },
                output.output,
            ),
            ConfigCommand::List(ListArgs { bucket, output }) => {
                Call::new(Request::ConfigList { bucket }, output.output)
            }
            ConfigCommand::Unset(UnsetArgs {
                bucket,
                keys,
                output,
            }) => Call::new(Request::ConfigUnset { bucket, keys }, output.output),
        })
    }
}

/// Prints what a change did: the variables, never their values, and the
/// workloads that roll.
pub fn changed(change: &ConfigChange) {
    let mut what = Vec::new();
    if !change.set.is_empty() {
        what.push(format!("set {}", change.set.join(", ")));
    }
    if !change.unset.is_empty() {
        what.push(format!("unset {}", change.unset.join(", ")));
    }
    println!(
        "config {}: {GOOD}{}{GOOD:#}",
        change.bucket,
        what.join("; ")
    );
    if change.rolling.is_empty() {
        println!("no workload takes {} yet", change.bucket);
    }
    for workload in &change.rolling {
        println!("{workload}: rolling to the new env");
    }
}

/// Prints a bucket's variables (secrets hidden), or every bucket's name.
pub fn listing(listing: &ConfigListing) {
    match &listing.bucket {
        None if listing.buckets.is_empty() => println!("no config buckets"),
        None => {
            for bucket in &listing.buckets {
                println!("{bucket}");
            }
        }
        Some(bucket) if listing.variables.is_empty() => {
            println!("config {bucket} has no variables")
        }
        // KEY=VALUE lines, as voodu prints them (and a shell sources them).
        Some(_) => {
            for variable in &listing.variables {
                let value = variable.value.as_deref().unwrap_or("(secret)");
                println!("{}={value}", variable.key);
            }
        }
    }
}

/// Prints one variable's value alone, for scripts; a secret not revealed
/// is said so on stderr.
pub fn value(bucket: &BucketName, variable: &ConfigVariable) {
    match &variable.value {
        Some(value) => println!("{value}"),
        None => eprintln!(
            "config {bucket}: {} is a secret — add --reveal to print it",
            variable.key
        ),
    }
}
