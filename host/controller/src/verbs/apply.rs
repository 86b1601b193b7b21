//! `apply` and `apply --dry-run`: parse ([`crate::parse_bounded`]), then,
//! under the write lock, validate through the plugins and store all or
//! nothing ([`crate::apply`]); an apply then queues each workload for the
//! reconciler, whose rollouts a client follows with `wait`.

use std::collections::BTreeMap;

use voodu_api::{ApplyProgress, BuildContext, Failure, Response, WorkloadOutcome};
use voodu_model::diagnostic::Diagnostic;
use voodu_model::{ManifestSource, Workload, WorkloadId};

use super::{refusal, store_failure};
use crate::apply::{apply, dry_run, ApplyError};
use crate::delete::delete_workload;
use crate::{parse_bounded, Controller};

/// What an apply asks, besides its manifests.
pub(crate) struct ApplyOptions {
    /// Say what would change; store nothing.
    pub dry_run: bool,
    /// The `vd apply` shell's values of the variables the manifests use.
    pub environment: BTreeMap<String, String>,
    /// Leave out voodu's kinds that this voodu does not run.
    pub skip_unsupported: bool,
    /// The files `env_file` names, as `vd apply` read them.
    pub env_files: BTreeMap<String, String>,
    /// Delete the stored workloads of each scope and kind the manifests
    /// declare that they do not name (voodu's `apply --prune`).
    pub prune: bool,
    /// The build context of each workload with a `build` block.
    pub contexts: Vec<BuildContext>,
    /// Build again even when an image of the same context exists.
    pub force: bool,
}

/// Builds the image of each parsed workload with a `build` block, from the
/// context `vd apply` sent, and names it in its spec: `image` is
/// `voodu/<scope>-<name>:<digest>` and `build.digest` the context's
/// digest. An image of the same digest is reused unless `force`; a dry
/// run builds nothing. Each line a build writes is a progress step. A
/// build that fails is a problem of its workload, with its last lines.
fn build_images(
    controller: &Controller,
    parsed: &mut voodu_manifest::ParsedManifests,
    contexts: Vec<BuildContext>,
    force: bool,
    dry_run: bool,
    progress: &mut (dyn FnMut(ApplyProgress) + Send),
) -> Vec<Diagnostic> {
    let mut problems = Vec::new();
    let progress = std::sync::Mutex::new(progress);
    for workload in &mut parsed.workloads {
        let Some(build) = workload.core.build.as_mut() else {
            continue;
        };
        let id = workload.id.clone();
        let problem = |message: String| {
            Diagnostic::for_workload(&id, message, Some(workload.location.clone()))
        };
        let Some(context) = contexts.iter().find(|context| context.workload == id) else {
            problems.push(problem(
                "build: its context was not sent — vd apply sends the directory the build block names; apply with a vd of this version".to_owned(),
            ));
            continue;
        };
        // In a cluster the other nodes build the same image from this
        // node's copy of the context, which is source: it crosses only a
        // channel of mutual TLS.
        let keeper = controller.node_name();
        if keeper.is_some() && controller.peer_tls.is_none() {
            problems.push(problem(
                "build: in a cluster the other nodes build the image from this node's copy of the context, which travels only over mutual TLS — start every node with --peer-cacert, --peer-cert and --peer-key (docs/security.md), or build the image yourself and name it with image = \"...\"".to_owned(),
            ));
            continue;
        }
        let (archive, building) =
            match crate::build_context::prepare(build, &context.archive, &controller.build_bases) {
                Ok(prepared) => prepared,
                Err(why) => {
                    problems.push(problem(format!("build: {why}")));
                    continue;
                }
            };
        let digest = building.digest_of(&archive);
        let tag = voodu_model::build::image_tag(&id, &digest);
        build.digest = Some(digest.clone());
        build.handler = building.handler;
        build.kept_by = keeper;
        workload.core.image = Some(tag.clone());
        if dry_run {
            continue;
        }
        if build.kept_by.is_some() {
            let kept = voodu_model::build::ContextDigest::try_from(digest)
                .map_err(std::io::Error::other)
                .and_then(|digest| {
                    crate::build_context::keep(controller.root(), &digest, &archive)
                });
            if let Err(error) = kept {
                problems.push(problem(format!(
                    "build: cannot keep its context for the other nodes under {}: {error}",
                    controller.root().join("contexts").display()
                )));
                continue;
            }
        }
        let Some(reconciler) = controller.reconciler() else {
            problems.push(problem(
                "build: this controller runs without Docker (--no-docker), so it builds nothing — name an image with image = \"...\"".to_owned(),
            ));
            continue;
        };
        let step = |message: String| {
            if let Ok(mut progress) = progress.lock() {
                (*progress)(ApplyProgress::Step {
                    workload: id.clone(),
                    message,
                });
            }
        };
        step(format!("building {tag}"));
        let built =
            crate::block_on(
                reconciler.build_image(&tag, archive, &building, force, &|line| {
                    step(format!("build: {line}"))
                }),
            );
        match built {
            Ok(true) => step(format!("built {tag}")),
            Ok(false) => step(format!("{tag} is built already (the same context)")),
            Err(error) => problems.push(problem(format!("build: {error}"))),
        }
    }
    problems
}

/// What `apply --prune` deletes: the stored workloads of each (kind,
/// scope) that `declared` has, which `declared` does not name, in order.
fn prune_targets(
    controller: &Controller,
    declared: &[WorkloadId],
) -> Result<Vec<WorkloadId>, Failure> {
    let stored = controller.store.workload_ids().map_err(store_failure)?;
    Ok(stored
        .into_iter()
        .filter(|id| !declared.contains(id))
        .filter(|id| {
            declared
                .iter()
                .any(|named| named.kind == id.kind && named.scope == id.scope)
        })
        .collect())
}

/// In a cluster, a warning at each workload whose `nodes` names a node
/// the cluster has never seen (a typo, or a host not yet joined): its
/// replicas on that node wait until a node of that name joins.
fn unknown_nodes(
    controller: &Controller,
    workloads: &[Workload],
) -> Result<Vec<Diagnostic>, Failure> {
    let Some(cluster) = controller.cluster() else {
        return Ok(Vec::new());
    };
    if workloads
        .iter()
        .all(|workload| workload.core.nodes.is_empty())
    {
        return Ok(Vec::new());
    }
    let known: Vec<String> = cluster
        .store
        .nodes()
        .map_err(store_failure)?
        .into_iter()
        .map(|node| node.name)
        .collect();
    Ok(workloads
        .iter()
        .flat_map(|workload| {
            workload
                .core
                .nodes
                .iter()
                .filter(|node| !known.iter().any(|name| name == node.as_str()))
                .map(|node| {
                    Diagnostic::for_workload(
                        &workload.id,
                        format!(
                            "attribute \"nodes\" names node \"{node}\", which this cluster has never seen (it knows {}) — nothing runs there until a node started with --node {node} joins; check the name",
                            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                        ),
                        Some(workload.location.clone()),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect())
}

/// Answers `apply`, or with `dry_run` says what it would do.
pub(crate) fn handle(
    controller: &Controller,
    sources: Vec<ManifestSource>,
    mut options: ApplyOptions,
    progress: &mut (dyn FnMut(ApplyProgress) + Send),
) -> Result<Response, Failure> {
    let dry_run_only = options.dry_run;
    let prune = options.prune;
    let force = options.force;
    let contexts = std::mem::take(&mut options.contexts);
    // Parsing is pure and can be slow for a large manifest: it runs before
    // the write lock, so it never holds up others; so do the builds.
    let mut parsed = parse_bounded(sources, options, controller.store.clone())?;
    let build_problems = build_images(
        controller,
        &mut parsed,
        contexts,
        force,
        dry_run_only,
        progress,
    );
    if !build_problems.is_empty() {
        return Err(refusal(build_problems, |found| {
            format!("apply refused: {found} found, nothing was stored")
        }));
    }
    let unknown_nodes = unknown_nodes(controller, &parsed.workloads)?;
    let declared: Vec<WorkloadId> = parsed.workloads.iter().map(|w| w.id.clone()).collect();
    let _writes = controller.lock_writes()?;
    let pruned = if prune {
        prune_targets(controller, &declared)?
    } else {
        Vec::new()
    };
    if dry_run_only {
        return match dry_run(parsed, &controller.plugins, &*controller.store, progress) {
            Ok(mut report) => {
                report.warnings.extend(unknown_nodes);
                report.pruned = pruned;
                Ok(Response::DryRun(report))
            }
            Err(ApplyError::Refused(diagnostics)) => Err(refusal(diagnostics, |found| {
                format!("dry run: the apply would be refused: {found} found")
            })),
            Err(ApplyError::Store(error)) => Err(store_failure(error)),
        };
    }
    let since_event = controller.store.last_event_id().map_err(store_failure)?;
    let reconciler = controller.reconciler().map(|reconciler| &**reconciler);
    match apply(
        parsed,
        &controller.plugins,
        &*controller.store,
        reconciler,
        progress,
    ) {
        Ok(mut report) => {
            report.since_event = since_event;
            report.warnings.extend(unknown_nodes);
            // What the files no longer name goes as `vd delete` takes it:
            // drained, then forgotten by its plugins.
            for workload in &pruned {
                let deleted = delete_workload(
                    workload,
                    &*controller.plugins,
                    &*controller.store,
                    reconciler.is_none(),
                )
                .map_err(|error| {
                    Failure::new(format!(
                        "{workload}: the apply was stored, but pruning failed: {error} — run the apply with --prune again to finish"
                    ))
                })?;
                if let Some(deleted) = deleted {
                    report.warnings.extend(deleted.warnings);
                    report.pruned.push(workload.clone());
                }
            }
            // Stored: the rollouts run in the reconciler's workers; a client
            // that wants to follow them asks with `Request::Wait`.
            if let Some(reconciler) = controller.reconciler() {
                // A rollout asked for fires its on_deploy webhooks when it
                // settles.
                for applied in &report.workloads {
                    if applied.outcome != WorkloadOutcome::Unchanged {
                        reconciler.await_rollout(&applied.workload, applied.revision);
                    }
                }
                for workload in report
                    .workloads
                    .iter()
                    .map(|applied| &applied.workload)
                    .chain(&report.pruned)
                {
                    reconciler.enqueue(workload);
                }
            }
            Ok(Response::Applied(report))
        }
        Err(ApplyError::Refused(diagnostics)) => Err(refusal(diagnostics, |found| {
            format!("apply refused: {found} found, nothing was stored")
        })),
        Err(ApplyError::Store(error)) => Err(store_failure(error)),
    }
}
