//! `vd apply`: manifests in, [`Request::Apply`] out; its answers are what
//! was stored ([`Response::Applied`](voodu_api::Response::Applied), also
//! `vd rollback`'s) or, with `--dry-run`, what would change
//! ([`Response::DryRun`](voodu_api::Response::DryRun)).

use std::path::PathBuf;
use std::process::ExitCode;

use anstream::println;

use voodu_api::sources::read_manifests;
use voodu_api::{ApplyReport, DryRunReport, ManifestSource, Request, WorkloadOutcome};

use super::Call;
use crate::render::{diagnostic, ERROR, GOOD, WARNING};
use crate::{fail, OutputArg, WaitArgs, EXIT_FAILED};

/// `vd apply`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Manifest files (.hcl, .voodu, .vdu, .vd) or directories of them.
    #[arg(short = 'f', long = "file", required = true, num_args = 1.., value_name = "PATH")]
    pub(crate) files: Vec<PathBuf>,
    /// Parse and validate through the plugins, and show what would
    /// change against what is stored; store nothing and run nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) output: OutputArg,
}

impl ApplyArgs {
    /// Reads the manifests into [`Request::Apply`], to be followed unless
    /// a dry run or `--no-wait`; a file that cannot be read fails here.
    pub fn call(self) -> Result<Call, ExitCode> {
        match read_sources(&self.files) {
            Ok(sources) => {
                let dry_run = self.dry_run;
                let mut call = Call::new(Request::Apply { sources, dry_run }, self.output.output);
                if !dry_run {
                    call.follow = self.wait.follow_up();
                }
                Ok(call)
            }
            Err(message) => Err(fail(format!("vd apply: {message}"), EXIT_FAILED)),
        }
    }
}

fn read_sources(paths: &[PathBuf]) -> Result<Vec<ManifestSource>, String> {
    read_manifests(paths).map_err(|error| error.to_string())
}

/// Prints what an apply (or a rollback) stored, workload by workload, and
/// the counts.
pub fn applied(report: &ApplyReport) {
    let (mut created, mut updated, mut unchanged, mut not_running) = (0, 0, 0, 0);
    for workload in &report.workloads {
        let blocks = match workload.blocks.len() {
            0 => String::new(),
            _ => format!(", with {}", workload.blocks.join(", ")),
        };
        // A workload stored but whose rollout failed is not "created" or
        // "updated" as far as its replicas go.
        let failed = report
            .errors
            .iter()
            .any(|error| error.workload.as_ref() == Some(&workload.workload));
        let (style, verb) = match (&workload.outcome, failed) {
            (WorkloadOutcome::Created, true) => {
                not_running += 1;
                (ERROR, "stored, not running")
            }
            (WorkloadOutcome::Updated | WorkloadOutcome::Unchanged, true) => {
                not_running += 1;
                (ERROR, "stored, not rolled out")
            }
            (WorkloadOutcome::Created, false) => {
                created += 1;
                (GOOD, "created")
            }
            (WorkloadOutcome::Updated, false) => {
                updated += 1;
                (GOOD, "updated")
            }
            (WorkloadOutcome::Unchanged, false) => {
                unchanged += 1;
                (GOOD, "unchanged")
            }
        };
        match workload.rolled_back_to {
            Some(to) => println!(
                "{}: {style}rolled back{style:#} to revision {to} as revision {}{blocks}{}",
                workload.workload,
                workload.revision,
                if failed { ", not rolled out" } else { "" }
            ),
            None => println!(
                "{}: {style}{verb}{style:#} (revision {}{blocks})",
                workload.workload, workload.revision
            ),
        }
    }
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    for error in &report.errors {
        diagnostic("error", ERROR, error);
    }
    if report.unchanged() && not_running == 0 {
        println!(
            "nothing changed: {} workload(s) already match what is stored",
            report.workloads.len()
        );
    } else if not_running > 0 {
        println!(
            "applied: {created} created, {updated} updated, {unchanged} unchanged; {not_running} stored but not running as applied (see the errors above)"
        );
    } else {
        println!("applied: {created} created, {updated} updated, {unchanged} unchanged");
    }
}

/// Prints what a dry run would change, workload by workload.
pub fn dry_run(report: &DryRunReport) {
    for planned in &report.workloads {
        let verb = match planned.outcome {
            WorkloadOutcome::Created => "would be created",
            WorkloadOutcome::Updated => "would be updated",
            WorkloadOutcome::Unchanged => "unchanged",
        };
        println!("{}: {GOOD}{verb}{GOOD:#}", planned.workload);
        for change in &planned.changes {
            println!("    {change}");
        }
    }
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    println!("dry run: nothing was stored");
}
