//! `vd apply`: manifests in, [`Request::Apply`] out; its answers are what
//! was stored ([`Response::Applied`](voodu_api::Response::Applied), also
//! `vd rollback`'s) or, with `--dry-run`, what would change
//! ([`Response::DryRun`](voodu_api::Response::DryRun)).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anstream::println;

use voodu_api::sources::read_manifests;
use voodu_api::{
    ApplyReport, BuildContext, DryRunReport, ManifestSource, Request, WorkloadOutcome,
};
use voodu_manifest::prescan::{build_contexts, env_file_paths};
use voodu_model::interpolation::referenced_names;

use super::Call;
use crate::render::{diagnostic, ERROR, GOOD, WARNING};
use crate::{fail, OutputArg, WaitArgs, EXIT_FAILED};

/// `vd apply`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Manifest files (.hcl, .voodu, .vdu, .vd) or directories of them,
    /// or a Procfile (voodu's Procfile mode: each line a workload).
    #[arg(short = 'f', long = "file", required = true, num_args = 1.., value_name = "PATH")]
    pub(crate) files: Vec<PathBuf>,
    /// Procfile mode: the app's scope, kept in .voodu/app.json beside the
    /// Procfile (voodu's --app); without it, app.json's, or a new one
    /// written there.
    #[arg(long, value_name = "NAME")]
    pub(crate) app: Option<String>,
    /// Procfile mode: write the manifest the Procfile stands for to
    /// .voodu/<scope>.voodu beside it, and apply nothing (voodu's
    /// --eject).
    #[arg(long)]
    pub(crate) eject: bool,
    /// Parse and validate through the plugins, and show what would
    /// change against what is stored; store nothing and run nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Leave out top-level blocks of voodu's kinds that this voodu does
    /// not run (ingress, job, cronjob, ...), apply the rest, and list what
    /// was left out.
    #[arg(long)]
    pub(crate) skip_unsupported: bool,
    /// Also delete the stored workloads of each scope and kind these files
    /// declare that none of them names (drained, as `vd delete` does).
    #[arg(long, overrides_with = "no_prune")]
    pub(crate) prune: bool,
    /// Delete nothing the files do not name (voodu's flag; the default, so
    /// it only undoes an earlier `--prune` on the same line).
    #[arg(long, overrides_with = "prune")]
    pub(crate) no_prune: bool,
    /// Build the images of `build` blocks again, even when one of the same
    /// context exists (or set VOODU_FORCE_REBUILD=1).
    #[arg(long)]
    pub(crate) force: bool,
    /// Apply without asking (voodu's flag; this vd never asks, so it
    /// changes nothing).
    #[arg(short = 'y', long = "auto-approve", alias = "yes")]
    pub(crate) auto_approve: bool,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) output: OutputArg,
}

impl ApplyArgs {
    /// Reads the manifests into [`Request::Apply`], to be followed unless
    /// a dry run or `--no-wait`; a file that cannot be read fails here.
    pub fn call(self) -> Result<Call, ExitCode> {
        let force = self.force || force_rebuild_asked();
        let request = apply_request(
            &self.files,
            self.app.as_deref(),
            self.dry_run,
            self.skip_unsupported,
            self.prune && !self.no_prune,
            force,
        )
        .map_err(|message| fail(format!("vd apply: {message}"), EXIT_FAILED))?;
        let mut call = Call::new(request, self.output.output);
        if !self.dry_run {
            call.follow = self.wait.follow_up();
        }
        Ok(call)
    }
}

/// [`Request::Apply`] of the manifests `files` name (`-` for standard
/// input), with the values this shell gives the variables they reference
/// and the `env_file`s they name.
pub(crate) fn apply_request(
    files: &[PathBuf],
    app: Option<&str>,
    dry_run: bool,
    skip_unsupported: bool,
    prune: bool,
    force: bool,
) -> Result<Request, String> {
    request_of(
        read_sources(files, app)?,
        dry_run,
        skip_unsupported,
        prune,
        force,
    )
}

/// [`Request::Apply`] of `sources`, with the values this shell gives the
/// variables they reference, the `env_file`s they name and the build
/// contexts of their `build` blocks.
fn request_of(
    sources: Vec<ManifestSource>,
    dry_run: bool,
    skip_unsupported: bool,
    prune: bool,
    force: bool,
) -> Result<Request, String> {
    let environment = shell_variables(&sources)?;
    let env_files = read_env_files(&sources, &environment)?;
    let contexts = read_build_contexts(&sources, &environment)?;
    Ok(Request::Apply {
        sources,
        dry_run,
        environment,
        skip_unsupported,
        env_files,
        prune,
        contexts,
        force,
    })
}

/// The build context of each workload with a `build` block, read from
/// this working directory ([`crate::context`]).
fn read_build_contexts(
    sources: &[ManifestSource],
    environment: &BTreeMap<String, String>,
) -> Result<Vec<BuildContext>, String> {
    let mut contexts = Vec::new();
    let mut sizes = Vec::new();
    for source in sources {
        for (workload, context, dockerfile) in build_contexts(&source.text, environment) {
            let archive = crate::context::archive(&workload.to_string(), &context, &dockerfile)
                .map_err(|error| format!("{}: {error}", source.path))?;
            sizes.push((format!("{workload} ({context})"), archive.len()));
            contexts.push(BuildContext { workload, archive });
        }
    }
    fits_one_request(&sizes)?;
    Ok(contexts)
}

/// The most build contexts one apply carries, as tars: its request line
/// holds them in base64 (a third larger) within
/// [`voodu_api::MAX_REQUEST_BYTES`], beside the manifests.
const MAX_CONTEXT_BYTES: usize = voodu_api::MAX_REQUEST_BYTES / 4 * 3 - (1 << 20);

/// Whether build contexts of these sizes (named as the message names
/// them) fit in one apply; else why not, naming the largest.
fn fits_one_request(sizes: &[(String, usize)]) -> Result<(), String> {
    let total: usize = sizes.iter().map(|(_, size)| size).sum();
    if total <= MAX_CONTEXT_BYTES {
        return Ok(());
    }
    let mib = |bytes: usize| bytes.div_ceil(1 << 20);
    let largest = sizes
        .iter()
        .max_by_key(|(_, size)| *size)
        .map(|(name, size)| format!("{name}, {} MiB", mib(*size)))
        .unwrap_or_default();
    Err(format!(
        "the build contexts take {} MiB, more than the {} MiB one vd apply carries — leave out what the build does not need with a .dockerignore in each context (the largest: {largest}), or apply the workloads in separate runs",
        mib(total),
        MAX_CONTEXT_BYTES >> 20
    ))
}

fn read_sources(paths: &[PathBuf], app: Option<&str>) -> Result<Vec<ManifestSource>, String> {
    let (procfiles, manifests): (Vec<PathBuf>, Vec<PathBuf>) = paths
        .iter()
        .cloned()
        .partition(|path| super::procfile::is_procfile(path));
    let mut sources = if manifests.is_empty() {
        Vec::new()
    } else {
        read_manifests(&manifests).map_err(|error| error.to_string())?
    };
    for path in procfiles {
        sources.push(super::procfile::ProcfileApp::load(&path, app)?.source(false));
    }
    Ok(sources)
}

impl ApplyArgs {
    /// The Procfile among the files, if one is: voodu's Procfile mode.
    pub(crate) fn procfile(&self) -> Result<Option<super::procfile::ProcfileApp>, String> {
        let procfiles: Vec<&PathBuf> = self
            .files
            .iter()
            .filter(|path| super::procfile::is_procfile(path))
            .collect();
        match procfiles.as_slice() {
            [] => Ok(None),
            [path] => super::procfile::ProcfileApp::load(path, self.app.as_deref()).map(Some),
            _ => Err("one Procfile at a time: apply each app's Procfile on its own".to_owned()),
        }
    }

    /// `--eject`: the Procfile's manifest written beside it, nothing sent.
    pub fn eject(self) -> ExitCode {
        match self.procfile() {
            Ok(Some(app)) => match app.eject() {
                Ok(path) => {
                    println!(
                        "{GOOD}wrote{GOOD:#} {} (scope {}): apply it with vd apply -f {}",
                        path.display(),
                        app.scope,
                        path.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(message) => fail(format!("vd apply --eject: {message}"), EXIT_FAILED),
            },
            Ok(None) => fail(
                "vd apply --eject: --eject writes a Procfile's manifest — name the Procfile with -f Procfile",
                EXIT_FAILED,
            ),
            Err(message) => fail(format!("vd apply --eject: {message}"), EXIT_FAILED),
        }
    }

    /// The release phase of a Procfile with a `release:` line, for a real
    /// apply: the apply of its release job alone, and the job to run
    /// before the processes are applied; `None` when there is none.
    pub(crate) fn release_phase(&self) -> Result<Option<(Call, String)>, String> {
        if self.dry_run {
            return Ok(None);
        }
        let Some(app) = self.procfile()? else {
            return Ok(None);
        };
        if !app.has_release() {
            return Ok(None);
        }
        let force = self.force || force_rebuild_asked();
        let request = request_of(vec![app.source(true)], false, false, false, force)?;
        Ok(Some((
            Call::new(request, self.output.output),
            format!("job/{}/{}", app.scope, voodu_manifest::procfile::RELEASE),
        )))
    }
}

/// Whether `VOODU_FORCE_REBUILD` asks every build to run again, as in
/// voodu.
fn force_rebuild_asked() -> bool {
    std::env::var("VOODU_FORCE_REBUILD").is_ok_and(|value| matches!(value.trim(), "1" | "true"))
}

/// The files the manifests' `env_file` attributes name, read from this
/// working directory, as voodu reads them: path as written to contents.
fn read_env_files(
    sources: &[ManifestSource],
    environment: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    let mut files = BTreeMap::new();
    for source in sources {
        for path in env_file_paths(&source.text, environment) {
            if files.contains_key(&path) {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|error| {
                format!(
                    "{}: env_file {path:?} cannot be read from {}: {error} — env_file paths are relative to the directory vd apply runs in",
                    source.path,
                    std::env::current_dir()
                        .map(|dir| dir.display().to_string())
                        .unwrap_or_else(|_| "here".to_owned())
                )
            })?;
            files.insert(path, text);
        }
    }
    Ok(files)
}

/// The values in this shell of the variables the manifests reference
/// (`${NAME}`), those that are set; no other variable leaves the shell.
fn shell_variables(sources: &[ManifestSource]) -> Result<BTreeMap<String, String>, String> {
    let mut values = BTreeMap::new();
    for source in sources {
        for name in referenced_names(&source.text) {
            match std::env::var(name) {
                Ok(value) => {
                    values.insert(name.to_owned(), value);
                }
                Err(std::env::VarError::NotPresent) => {}
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(format!(
                        "{}: the variable {name} in this shell is not UTF-8 text — set it to UTF-8 text, or unset it to use the manifest's default",
                        source.path
                    ))
                }
            }
        }
    }
    Ok(values)
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
            None if workload.restarted => println!(
                "{}: {style}restarting{style:#} (revision {}{blocks}): every replica is replaced, new ones first, each old one drained",
                workload.workload, workload.revision
            ),
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
    for workload in &report.pruned {
        println!(
            "{workload}: {GOOD}pruned{GOOD:#} (no file names it: its replicas are drained and removed)"
        );
    }
    for skipped in &report.skipped {
        diagnostic("skipped", WARNING, skipped);
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
    for workload in &report.pruned {
        println!("{workload}: {ERROR}would be pruned{ERROR:#} (no file names it)");
    }
    for skipped in &report.skipped {
        diagnostic("skipped", WARNING, skipped);
    }
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    println!("dry run: nothing was stored");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_contexts_past_one_request_are_refused_naming_the_largest_and_the_fix() {
        assert!(fits_one_request(&[("deployment/prod/api (.)".into(), 10 << 20)]).is_ok());
        let refused = fits_one_request(&[
            ("deployment/prod/api (./api)".into(), 30 << 20),
            ("deployment/prod/web (./web)".into(), 20 << 20),
        ])
        .unwrap_err();
        assert!(
            refused.starts_with("the build contexts take 50 MiB, more than the 47 MiB"),
            "{refused}"
        );
        assert!(
            refused.contains("(the largest: deployment/prod/api (./api), 30 MiB)"),
            "{refused}"
        );
        assert!(refused.contains(".dockerignore"), "{refused}");
    }
}
