//! `vd config set|get|list|unset|import`: voodu's config buckets
//! ([`Request::ConfigSet`] and its siblings), and their answers
//! ([`Response::ConfigChanged`](voodu_api::Response::ConfigChanged),
//! [`Response::Config`](voodu_api::Response::Config),
//! [`Response::ConfigValue`](voodu_api::Response::ConfigValue)).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anstream::{eprintln, println};
use clap::Subcommand;

use voodu_api::{ConfigChange, ConfigListing, ConfigVariable, Request};
use voodu_model::config::BucketName;

use super::Call;
use crate::render::GOOD;
use crate::{fail, Output, OutputArg, EXIT_USAGE};

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
    /// Print one variable's value alone (a secret's only with --reveal);
    /// without KEY, the bucket's variables as KEY=VALUE lines, only those
    /// whose names contain --matching's text when given.
    Get(GetArgs),
    /// List a bucket's variables (secrets hidden), or every bucket.
    List(ListArgs),
    /// Set variables of a bucket from a .env file (`-` reads standard
    /// input): one NAME=value per line, comments and blank lines skipped;
    /// a line that is no assignment fails it before anything is set.
    Import(ImportArgs),
    /// Remove variables of a bucket; the workloads that take it roll.
    Unset(UnsetArgs),
    /// Seal every secret anew under the controller's first --secrets-key,
    /// after a new key was put first; then the old one may go. No value
    /// changes, no workload rolls.
    #[command(name = "rotate-key")]
    RotateKey(RotateKeyArgs),
}

/// `vd config rotate-key`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RotateKeyArgs {
    #[command(flatten)]
    output: OutputArg,
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
    restart: NoRestartArg,
    #[command(flatten)]
    output: OutputArg,
}

/// `--no-restart`, of the verbs that change a bucket.
#[derive(Debug, clap::Args)]
struct NoRestartArg {
    /// Store the change, but let the workloads that take the bucket keep
    /// their replicas running with the env they have, until their next
    /// `vd restart` or an apply that changes them (replicas made
    /// meanwhile take the new env).
    #[arg(long)]
    no_restart: bool,
}

/// How `vd config get` and `list` print a bucket's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
enum ConfigOutput {
    /// KEY=VALUE lines, as voodu prints them (and a shell sources them).
    #[default]
    Text,
    /// The API's JSON, for scripts.
    Json,
    /// An HCL `env = { ... }` attribute, to paste into a manifest; a
    /// secret not revealed is a comment, never a value.
    Hcl,
}

/// The output argument of `get` and `list`.
#[derive(Debug, clap::Args)]
struct ConfigOutputArg {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ConfigOutput::Text)]
    output: ConfigOutput,
}

/// `vd config get`'s arguments.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The bucket.
    bucket: BucketName,
    /// The variable; without it, every variable (or those --matching
    /// names).
    #[arg(conflicts_with = "matching")]
    key: Option<String>,
    /// Only the variables whose names contain this, in any case (voodu's
    /// `vd config REF get PATTERN`).
    #[arg(long, value_name = "PATTERN")]
    matching: Option<String>,
    /// Print secrets' values.
    #[arg(long)]
    reveal: bool,
    #[command(flatten)]
    output: ConfigOutputArg,
}

/// `vd config list`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The bucket; without one, every bucket's name.
    bucket: Option<BucketName>,
    #[command(flatten)]
    output: ConfigOutputArg,
}

/// `vd config import`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The bucket: scope/name, or a scope alone.
    bucket: BucketName,
    /// The .env file; `-` reads standard input.
    file: PathBuf,
    /// Keep them as secrets.
    #[arg(long)]
    secret: bool,
    #[command(flatten)]
    restart: NoRestartArg,
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
    restart: NoRestartArg,
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
                restart,
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
                set_call(bucket, values, secret, &restart, output)
            }
            ConfigCommand::Get(GetArgs {
                bucket,
                key: Some(key),
                reveal,
                output,
                ..
            }) => Call::new(
                Request::ConfigGet {
                    bucket,
                    key,
                    reveal,
                },
                output.output.into(),
            ),
            ConfigCommand::Get(GetArgs {
                bucket,
                key: None,
                matching,
                reveal,
                output,
            }) => listing_call(Some(bucket), matching, reveal, output.output),
            ConfigCommand::List(ListArgs { bucket, output }) => {
                listing_call(bucket, None, false, output.output)
            }
            ConfigCommand::Import(ImportArgs {
                bucket,
                file,
                secret,
                restart,
                output,
            }) => {
                let values = read_env_file(&file).map_err(|message| {
                    fail(format!("vd config import {bucket}: {message}"), EXIT_USAGE)
                })?;
                set_call(bucket, values, secret, &restart, output)
            }
            ConfigCommand::Unset(UnsetArgs {
                bucket,
                keys,
                restart,
                output,
            }) => Call::new(
                Request::ConfigUnset {
                    bucket,
                    keys,
                    no_restart: restart.no_restart,
                },
                output.output,
            ),
            ConfigCommand::RotateKey(RotateKeyArgs { output }) => {
                Call::new(Request::ConfigRotateKey, output.output)
            }
        })
    }
}

impl From<ConfigOutput> for Output {
    fn from(output: ConfigOutput) -> Output {
        match output {
            ConfigOutput::Json => Output::Json,
            ConfigOutput::Text | ConfigOutput::Hcl => Output::Text,
        }
    }
}

/// [`Request::ConfigSet`] of `values`, from `set` or `import`.
fn set_call(
    bucket: BucketName,
    values: BTreeMap<String, String>,
    secret: bool,
    restart: &NoRestartArg,
    output: OutputArg,
) -> Call {
    Call::new(
        Request::ConfigSet {
            bucket,
            values,
            secret,
            no_restart: restart.no_restart,
        },
        output.output,
    )
}

/// [`Request::ConfigList`], printed as `output` says.
fn listing_call(
    bucket: Option<BucketName>,
    matching: Option<String>,
    reveal: bool,
    output: ConfigOutput,
) -> Call {
    let mut call = Call::new(
        Request::ConfigList {
            bucket,
            matching,
            reveal,
        },
        output.into(),
    );
    call.as_hcl = output == ConfigOutput::Hcl;
    call
}

/// The variables of the .env file at `file` (`-`: standard input), each
/// name checked; an empty file is refused.
fn read_env_file(file: &std::path::Path) -> Result<BTreeMap<String, String>, String> {
    let text = if file == std::path::Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| format!("standard input cannot be read: {error}"))?;
        text
    } else {
        std::fs::read_to_string(file)
            .map_err(|error| format!("{} cannot be read: {error}", file.display()))?
    };
    let variables = voodu_manifest::env_file::variables(&text)
        .map_err(|error| format!("{}: {error}", file.display()))?;
    if variables.is_empty() {
        return Err(format!(
            "{} sets no variable — write one NAME=value per line",
            file.display()
        ));
    }
    for (name, _) in &variables {
        if let Some(problem) = voodu_model::config::key_problem(name) {
            return Err(format!("{}: {problem}", file.display()));
        }
    }
    Ok(variables.into_iter().collect())
}

/// Prints a bucket's variables as an HCL `env` attribute, to paste into a
/// manifest: values quoted and escaped as HCL reads them (a `${` stays
/// text); a secret not revealed is a comment naming how to reveal it.
pub fn hcl(listing: &ConfigListing) {
    let Some(bucket) = &listing.bucket else {
        return self::listing(listing);
    };
    println!("{}", hcl_text(bucket, &listing.variables));
}

/// The text [`hcl`] prints.
fn hcl_text(bucket: &BucketName, variables: &[ConfigVariable]) -> String {
    let mut text = String::from("env = {\n");
    for variable in variables {
        match &variable.value {
            Some(value) => text.push_str(&format!("  {} = {}\n", variable.key, hcl_string(value))),
            None => text.push_str(&format!(
                "  # {} is a secret: vd config get {bucket} {} --reveal\n",
                variable.key, variable.key
            )),
        }
    }
    text.push('}');
    text
}

/// `value` as an HCL quoted string.
fn hcl_string(value: &str) -> String {
    let expression = hcl::Expression::String(value.to_owned());
    hcl::format::to_string(&expression).unwrap_or_else(|_| format!("{value:?}"))
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
        if change.kept {
            println!("{workload}: its replicas keep the env they run with (--no-restart) — vd restart {workload} rolls them to the new one");
        } else {
            println!("{workload}: rolling to the new env");
        }
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

/// Prints what `config rotate-key` did, and what may go now.
pub fn resealed(resealed: usize, key: &str, retired: &[String]) {
    println!("{GOOD}sealed{GOOD:#} {resealed} secret(s) anew under key {key}; every secret is sealed under it now");
    if !retired.is_empty() {
        println!(
            "key(s) {} seal nothing now: drop their --secrets-key at the next start (on every node of a cluster)",
            retired.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `-o hcl` prints reads back as HCL to the same values: quotes,
    /// backslashes, new lines and a `${` that must stay text.
    #[test]
    fn hcl_output_reads_back_as_the_same_values() {
        let bucket: BucketName = "prod/api".parse().unwrap();
        let written = "a \"quoted\" \\ value\nwith ${NOT_INTERPOLATED} and %{ if }";
        let text = hcl_text(
            &bucket,
            &[
                ConfigVariable {
                    key: "TRICKY".into(),
                    value: Some(written.into()),
                    secret: false,
                },
                ConfigVariable {
                    key: "TOKEN".into(),
                    value: None,
                    secret: true,
                },
            ],
        );
        assert!(
            text.contains("  # TOKEN is a secret: vd config get prod/api TOKEN --reveal\n"),
            "{text}"
        );
        let body: hcl::Body = hcl::from_str(&text).unwrap();
        let value: hcl::Value = hcl::eval::Evaluate::evaluate(
            &body.attributes().next().unwrap().expr,
            &hcl::eval::Context::new(),
        )
        .unwrap();
        assert_eq!(value, hcl::value!({ TRICKY = (written) }));
    }
}
