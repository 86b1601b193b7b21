//! `vd diff -f FILE`: what an apply of the manifests would change, as
//! voodu shows it, with an exit code a script can branch on: 0 when
//! nothing would change, 2 when something would, 1 on an error (as
//! `terraform plan -detailed-exitcode` does). It is an apply's dry run
//! ([`voodu_api::Request::Apply`] with `dry_run`): the plugins validate,
//! nothing is stored and nothing runs.

use std::path::PathBuf;
use std::process::ExitCode;

use anstream::println;

use voodu_api::{DryRunReport, WorkloadOutcome};

use super::apply::apply_request;
use super::Call;
use crate::render::{diagnostic, ERROR, GOOD, WARNING};
use crate::{fail, OutputArg, EXIT_FAILED};

/// The exit code of a diff with changes.
pub const EXIT_CHANGES: u8 = 2;

/// `vd diff`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// Manifest files (.hcl, .voodu, .vdu, .vd), directories of them, or
    /// `-` for standard input.
    #[arg(short = 'f', long = "file", required = true, num_args = 1.., value_name = "PATH")]
    pub(crate) files: Vec<PathBuf>,
    /// Exit 2 when something would change (always so here; accepted for
    /// voodu's scripts, whose diff needs it).
    #[arg(long)]
    pub(crate) detailed_exitcode: bool,
    /// Leave out top-level blocks of voodu's kinds that this voodu does
    /// not run, as `vd apply --skip-unsupported` does.
    #[arg(long)]
    pub(crate) skip_unsupported: bool,
    /// Also show the stored workloads `vd apply --prune` would delete: of
    /// each scope and kind these files declare, named by none of them.
    #[arg(long)]
    pub(crate) prune: bool,
    #[command(flatten)]
    pub(crate) output: OutputArg,
}

impl DiffArgs {
    /// The dry run of an apply of the files.
    pub fn call(self) -> Result<Call, ExitCode> {
        let request = apply_request(
            &self.files,
            None,
            true,
            self.skip_unsupported,
            self.prune,
            false,
        )
        .map_err(|message| fail(format!("vd diff: {message}"), EXIT_FAILED))?;
        let mut call = Call::new(request, self.output.output);
        call.diff = true;
        Ok(call)
    }
}

/// Whether an apply would change anything.
pub fn has_changes(report: &DryRunReport) -> bool {
    !report.pruned.is_empty()
        || report
            .workloads
            .iter()
            .any(|planned| planned.outcome != WorkloadOutcome::Unchanged)
}

/// Prints a dry run as voodu's diff does: `~` a workload that would
/// change, with its changes below, `+` one that would be created, `=` one
/// left as it is; then the counts.
pub fn render(report: &DryRunReport) {
    let (mut added, mut modified) = (0, 0);
    for planned in &report.workloads {
        match planned.outcome {
            WorkloadOutcome::Created => {
                added += 1;
                println!("{GOOD}+ {}{GOOD:#} (new)", planned.workload);
            }
            WorkloadOutcome::Updated => {
                modified += 1;
                println!("{WARNING}~ {}{WARNING:#}", planned.workload);
                for change in &planned.changes {
                    println!("    {change}");
                }
            }
            WorkloadOutcome::Unchanged => println!("= {} (unchanged)", planned.workload),
        }
    }
    if !report.pruned.is_empty() {
        println!("--- would prune (--prune; leave it out to keep them) ---");
        for workload in &report.pruned {
            println!("{ERROR}- {workload}{ERROR:#}");
        }
    }
    for skipped in &report.skipped {
        diagnostic("skipped", WARNING, skipped);
    }
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    let pruned = report.pruned.len();
    if added + modified + pruned == 0 {
        println!("no changes");
    } else {
        println!("{added} to add, {modified} to modify, {pruned} to prune");
    }
}
