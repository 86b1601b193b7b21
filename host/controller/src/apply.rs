//! The apply pipeline, all or nothing: parse every manifest, send every
//! plugin block to its plugin's `validate`, collect every problem, and store
//! every workload with its normalised blocks in one transaction only if
//! there is none. Blocks that a new revision dropped are forgotten by their
//! plugins afterwards.

use std::collections::BTreeMap;

use serde_json::Value;
use voodu_plugin_abi::messages::{Addressing, Block, ValidateRequest};

use voodu_api::{
    AppliedWorkload, ApplyProgress, ApplyReport, DryRunReport, PlannedWorkload, WorkloadOutcome,
};
use voodu_manifest::core_spec::core_block_near;
use voodu_manifest::suggest::closest;
use voodu_manifest::ParsedManifests;
use voodu_model::core_spec::{is_core_block, not_acted_on_message, CoreSpec};
use voodu_model::diagnostic::Diagnostic;
use voodu_model::ports::Protocol;
use voodu_model::secrets::redacted;
use voodu_model::{
    block_display_name, EndpointEnvelope, NormalisedBlock, PluginBlock, Workload, WorkloadId,
};
use voodu_plugin_host::{CallError, PluginHandle, PluginRegistry};
use voodu_reconcile::forget::forget_blocks;
use voodu_reconcile::Reconciler;
use voodu_store::claims::{claims_of_blocks, settle, ClaimConflict, HeldClaim};
use voodu_store::{EventLevel, NewEvent, StateStore, StoreChange, StoreError, WorkloadInput};

/// Why an apply stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The manifests or their blocks were refused; every problem is listed.
    #[error("the apply was refused with {} problem(s); nothing was stored", .0.len())]
    Refused(Vec<Diagnostic>),
    /// The store failed; the transaction was rolled back.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The seed's message for a block whose plugin is not installed, with a
/// hint when the name is close to one of voodu's own blocks or to an
/// installed plugin's name.
fn missing_plugin_message(
    workload: &Workload,
    block: &PluginBlock,
    installed: &[String],
) -> String {
    let block_type = &block.block.block_type;
    let mut message = format!(
        "block \"{block_type}\" belongs to a plugin named \"{block_type}\", which is not installed — run `vd plugins:install <source>` or remove the block"
    );
    if let Some(core) = core_block_near(workload.id.kind, block_type) {
        message.push_str(&format!(" (did you mean the core block \"{core}\"?)"));
    } else if let Some(plugin) = closest(block_type, installed.iter().map(String::as_str)) {
        message.push_str(&format!(" (did you mean the plugin \"{plugin}\"?)"));
    }
    message
}

/// Why a block that asked for endpoints cannot have them: no address is
/// ever published without a port.
fn no_port_message(block: &Block) -> String {
    format!(
        "{}: no port to publish to the {} plugin — the workload has no ports and the plugin named none; add ports = [\"8080\"] to the workload, or give the block the port the plugin's options take",
        block_display_name(&block.block_type, &block.labels),
        block.block_type
    )
}

/// When the block's plugin describes its options and takes no others
/// (`additionalProperties: false`), the first option the block gives that
/// the plugin does not know, refused with the nearest known name, beside
/// its JSON pointer (`/balanse`); `None` otherwise (the plugin's own
/// validate judges then). Nested blocks (`@blocks`) are the plugin's to
/// judge.
fn unknown_option(block: &Block, plugin: &PluginHandle) -> Option<(String, String)> {
    let schema = plugin.describe().ok()??;
    if schema.get("additionalProperties") != Some(&serde_json::Value::Bool(false)) {
        return None;
    }
    let known: Vec<&str> = schema
        .get("properties")?
        .as_object()?
        .keys()
        .map(String::as_str)
        .collect();
    let given = block.spec.as_object()?;
    let unknown = given
        .keys()
        .find(|key| !key.starts_with('@') && !known.contains(&key.as_str()))?;
    let nearest = known
        .iter()
        .map(|name| (strsim::jaro_winkler(unknown, name), *name))
        .filter(|(likeness, _)| *likeness >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name);
    let plugin_name = plugin.name();
    let pointer = format!("/{}", unknown.replace('~', "~0").replace('/', "~1"));
    Some((pointer, match nearest {
        Some(name) => format!(
            "unknown option `{unknown}` — did you mean `{name}`? ({plugin_name} takes {}; `vd explain {plugin_name}` describes them)",
            known.join(", ")
        ),
        None => format!(
            "unknown option `{unknown}` — {plugin_name} takes {} (`vd explain {plugin_name}` describes them)",
            known.join(", ")
        ),
    }))
}

/// Why a block was refused at validate: the problem (without the
/// workload's prefix), and the option it is about, as a JSON pointer into
/// the block's spec, when the plugin named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRefusal {
    /// What is wrong, starting with the block's name.
    pub message: String,
    /// The option at fault: `/listen`.
    pub pointer: Option<String>,
}

impl From<String> for BlockRefusal {
    fn from(message: String) -> Self {
        BlockRefusal {
            message,
            pointer: None,
        }
    }
}

impl std::fmt::Display for BlockRefusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

/// Sends one block to its plugin's `validate` and returns the block as
/// stored, or the refusal. `core` is the workload's core spec; its first
/// container port is the port the block publishes when the plugin names
/// none. An option the plugin's schema does not know is refused first,
/// with the nearest name.
pub fn validate_block(
    id: &WorkloadId,
    core: &CoreSpec,
    block: &Block,
    plugin: &PluginHandle,
) -> Result<NormalisedBlock, BlockRefusal> {
    let display = || block_display_name(&block.block_type, &block.labels);
    let default_port = core.first_container_port();
    let request = ValidateRequest {
        kind: id.kind,
        scope: id.scope.clone(),
        name: id.name.clone(),
        block: block.clone(),
        // The ABI's edge: plugins read the core spec as JSON.
        workload: serde_json::to_value(core)
            .expect("cannot fail: a core spec is strings, numbers and maps"),
    };
    if let Some((pointer, refusal)) = unknown_option(block, plugin) {
        return Err(BlockRefusal {
            message: format!("{}: {refusal}", display()),
            pointer: Some(pointer),
        });
    }
    let reply = match plugin.validate(&request) {
        Ok(reply) => reply,
        Err(CallError::Refused {
            message, pointer, ..
        }) => {
            return Err(BlockRefusal {
                message: format!("{}: {message}", display()),
                pointer,
            })
        }
        Err(error) => return Err(format!("{}: {error}", display()).into()),
    };
    let port = reply.endpoints.port.or(default_port);
    // A job's runs serve nothing, so nothing is published to its blocks.
    if port.is_none()
        && reply.endpoints.addressing != Addressing::None
        && !id.kind.runs_to_completion()
    {
        return Err(no_port_message(block).into());
    }
    if let (Some(port), Addressing::Host, false) = (
        port,
        reply.endpoints.addressing,
        id.kind.runs_to_completion(),
    ) {
        let published = core
            .ports
            .iter()
            .any(|mapping| mapping.container_port == port && mapping.protocol == Protocol::Tcp);
        if !published {
            return Err(format!(
                "{}: the {} plugin asked for host addressing on port {port}, which the workload does not publish on the host — add \"{port}\" to the workload's ports (Docker then picks the host port), or have the block use a published port",
                display(),
                block.block_type
            )
            .into());
        }
    }
    Ok(NormalisedBlock {
        block_type: block.block_type.clone(),
        labels: block.labels.clone(),
        spec: reply.spec,
        endpoints: EndpointEnvelope {
            port,
            addressing: reply.endpoints.addressing,
        },
        claims: reply.claims,
    })
}

/// Sends one workload's plugin blocks to their plugins. Returns the
/// normalised blocks, in order, or every problem found.
pub fn validate_workload(
    workload: &Workload,
    plugins: &PluginRegistry,
) -> Result<Vec<NormalisedBlock>, Vec<Diagnostic>> {
    let mut normalised = Vec::with_capacity(workload.plugin_blocks.len());
    let mut problems = Vec::new();
    for block in &workload.plugin_blocks {
        let problem = |message: String| {
            Diagnostic::for_workload(&workload.id, message, Some(block.location.clone()))
        };
        debug_assert!(!is_core_block(workload.id.kind, &block.block.block_type));
        let Some(plugin) = plugins.get(&block.block.block_type) else {
            let installed: Vec<String> = plugins
                .list()
                .iter()
                .map(|handle| handle.name().to_owned())
                .collect();
            problems.push(problem(missing_plugin_message(workload, block, &installed)));
            continue;
        };
        match validate_block(&workload.id, &workload.core, &block.block, &plugin) {
            Ok(block) => normalised.push(block),
            // At the option's own line when the plugin named it.
            Err(BlockRefusal {
                message,
                pointer: Some(pointer),
            }) => problems.push(Diagnostic::for_workload(
                &workload.id,
                message,
                Some(block.location_of(&pointer).clone()),
            )),
            Err(refusal) => problems.push(problem(refusal.message)),
        }
    }
    if problems.is_empty() {
        Ok(normalised)
    } else {
        Err(problems)
    }
}

/// A parsed workload's core spec, with the places where the secrets its
/// `${NAME}`s took landed, in it and in its normalised blocks
/// ([`voodu_model::secrets`]).
fn with_secret_places(workload: &Workload, blocks: &[NormalisedBlock]) -> CoreSpec {
    let mut core = workload.core.clone();
    if workload.secrets.is_empty() {
        return core;
    }
    let as_json =
        serde_json::to_value(&core).expect("cannot fail: a core spec is strings, numbers and maps");
    let specs: Vec<Value> = blocks.iter().map(|block| block.spec.clone()).collect();
    core.secrets = voodu_model::secrets::places_of(&workload.secrets, &as_json, &specs);
    core
}

/// What validation made of a set of manifests: the workloads to store, the
/// workloads as parsed, and every problem found.
struct Validated {
    inputs: Vec<WorkloadInput>,
    workloads: Vec<Workload>,
    problems: Vec<Diagnostic>,
}

/// Validates every plugin block of parsed manifests through its plugin;
/// stores nothing.
fn validate_all(
    parsed: ParsedManifests,
    plugins: &PluginRegistry,
    store: &dyn StateStore,
    progress: &mut (dyn FnMut(ApplyProgress) + Send),
) -> Result<Validated, ApplyError> {
    progress(ApplyProgress::Parsed {
        workloads: parsed.workloads.len(),
        problems: parsed.diagnostics.len(),
    });
    let mut problems = parsed.diagnostics;
    let stored_ids = store.workload_ids()?;
    let clashes = name_clashes(&stored_ids, &parsed.workloads);
    let mut inputs = Vec::with_capacity(parsed.workloads.len());
    for workload in &parsed.workloads {
        if let Some(clash) = clashes
            .iter()
            .find(|clash| clash.workload.as_ref() == Some(&workload.id))
        {
            problems.push(clash.clone());
            continue;
        }
        progress(ApplyProgress::Validating {
            workload: workload.id.clone(),
            blocks: workload.plugin_blocks.len(),
        });
        // A bucket `env_from` names must hold variables: a typo in its name
        // would start replicas without them.
        for bucket in &workload.core.env_from {
            if store.config_bucket(bucket)?.is_empty() {
                problems.push(Diagnostic::for_workload(
                    &workload.id,
                    format!(
                        "env_from names config bucket {bucket}, which has no variables — set them with vd config set {bucket} KEY=VALUE, or remove it from env_from"
                    ),
                    Some(workload.attribute_location("env_from")),
                ));
            }
        }
        // Its own attributes' problems count too: a workload with any is
        // never called valid.
        let own_problems = problems
            .iter()
            .filter(|problem| problem.workload.as_ref() == Some(&workload.id))
            .count();
        let found = own_problems
            + match validate_workload(workload, plugins) {
                Ok(blocks) => {
                    inputs.push(WorkloadInput {
                        id: workload.id.clone(),
                        core_spec: with_secret_places(workload, &blocks),
                        blocks,
                        source: Some(workload.location.to_string()),
                        block_locations: workload
                            .plugin_blocks
                            .iter()
                            .map(|block| block.location.clone())
                            .collect(),
                    });
                    0
                }
                Err(found) => {
                    let count = found.len();
                    problems.extend(found);
                    count
                }
            };
        progress(ApplyProgress::Validated {
            workload: workload.id.clone(),
            problems: found,
        });
    }

    Ok(Validated {
        inputs,
        workloads: parsed.workloads,
        problems,
    })
}

/// Applies manifests: all of them, or nothing. The store is locked only to
/// commit, so plugin calls never hold up readers.
pub fn apply(
    mut parsed: ParsedManifests,
    plugins: &PluginRegistry,
    store: &dyn StateStore,
    reconciler: Option<&Reconciler>,
    progress: &mut (dyn FnMut(ApplyProgress) + Send),
) -> Result<ApplyReport, ApplyError> {
    let skipped = std::mem::take(&mut parsed.skipped);
    let Validated {
        inputs,
        workloads,
        problems,
    } = validate_all(parsed, plugins, store, progress)?;
    if !problems.is_empty() {
        store.record_events(&refusal_events(&problems))?;
        return Err(ApplyError::Refused(problems));
    }

    let stored = store_validated(
        &inputs,
        not_acted_on_warnings(&workloads),
        &[],
        plugins,
        store,
        reconciler,
    );
    let mut report = match stored {
        Err(ApplyError::Refused(problems)) => {
            store.record_events(&refusal_events(&problems))?;
            return Err(ApplyError::Refused(problems));
        }
        other => other?,
    };
    report.skipped = skipped;
    Ok(report)
}

/// The refusal of each claim that overlaps one another block holds, at
/// the claiming block, naming the holder with its file and line.
pub fn claim_refusals(conflicts: &[ClaimConflict]) -> Vec<Diagnostic> {
    conflicts
        .iter()
        .map(|conflict| {
            Diagnostic::for_workload(
                &conflict.claimant.holder.workload,
                conflict.message(),
                conflict.claimant.holder.at.clone(),
            )
        })
        .collect()
}

/// A store's error, with its claim conflicts turned into the apply's
/// refusal (nothing was stored).
fn refused_claims(error: StoreError) -> ApplyError {
    match error {
        StoreError::ClaimsConflict(conflicts) => ApplyError::Refused(claim_refusals(&conflicts)),
        other => ApplyError::Store(other),
    }
}

/// Stores validated workloads in one transaction, with `events`, and tells
/// plugins to forget the blocks a new revision dropped, once `reconciler`
/// (when the controller runs one) has dropped them from its publisher.
/// `warnings` start the report.
pub fn store_validated(
    inputs: &[WorkloadInput],
    warnings: Vec<Diagnostic>,
    events: &[NewEvent],
    plugins: &PluginRegistry,
    store: &dyn StateStore,
    reconciler: Option<&Reconciler>,
) -> Result<ApplyReport, ApplyError> {
    let changes = store.apply(inputs, events).map_err(refused_claims)?;
    let mut report = ApplyReport {
        workloads: Vec::with_capacity(inputs.len()),
        warnings,
        errors: Vec::new(),
        skipped: Vec::new(),
        since_event: 0,
        pruned: Vec::new(),
    };
    for (input, change) in inputs.iter().zip(changes) {
        let (outcome, revision) = match change {
            StoreChange::Created { revision } => (WorkloadOutcome::Created, revision),
            StoreChange::Unchanged { revision } => (WorkloadOutcome::Unchanged, revision),
            StoreChange::Updated {
                revision,
                previous_blocks,
            } => {
                let dropped: Vec<NormalisedBlock> = previous_blocks
                    .into_iter()
                    .filter(|old| !input.blocks.iter().any(|new| new.same_identity(old)))
                    .collect();
                // Dropped from the publisher first, so that no set queued
                // for one reaches its plugin after the forget.
                if let Some(reconciler) = reconciler {
                    reconciler.drop_blocks(&input.id, &dropped);
                }
                report
                    .warnings
                    .extend(forget_blocks(&input.id, &dropped, plugins, store));
                (WorkloadOutcome::Updated, revision)
            }
        };
        report.workloads.push(AppliedWorkload {
            workload: input.id.clone(),
            outcome,
            revision,
            blocks: input
                .blocks
                .iter()
                .map(NormalisedBlock::display_name)
                .collect(),
            rolled_back_to: None,
            restarted: false,
        });
    }
    Ok(report)
}

/// A warning for each core block or attribute this controller stores but
/// does not act on (those `vd describe` lists), at its place.
fn not_acted_on_warnings(workloads: &[Workload]) -> Vec<Diagnostic> {
    workloads
        .iter()
        .flat_map(|workload| {
            workload
                .core
                .blocks_not_acted_on()
                .into_iter()
                .map(|block_type| {
                    let at = workload
                        .core_blocks_at
                        .iter()
                        .find(|(written, _)| written == block_type)
                        .map_or_else(|| workload.location.clone(), |(_, at)| at.clone());
                    Diagnostic::for_workload(
                        &workload.id,
                        not_acted_on_message(block_type),
                        Some(at),
                    )
                })
        })
        .collect()
}

/// Parses and validates like [`apply`], then says what would change
/// against what is stored. Stores nothing, records nothing, runs nothing.
pub fn dry_run(
    mut parsed: ParsedManifests,
    plugins: &PluginRegistry,
    store: &dyn StateStore,
    progress: &mut (dyn FnMut(ApplyProgress) + Send),
) -> Result<DryRunReport, ApplyError> {
    let skipped = std::mem::take(&mut parsed.skipped);
    let Validated {
        inputs,
        workloads,
        problems,
    } = validate_all(parsed, plugins, store, progress)?;
    if !problems.is_empty() {
        return Err(ApplyError::Refused(problems));
    }
    let conflicts = dry_run_claims(&inputs, store)?;
    if !conflicts.is_empty() {
        return Err(ApplyError::Refused(claim_refusals(&conflicts)));
    }
    let mut planned = Vec::with_capacity(inputs.len());
    for input in &inputs {
        let stored = store.workload(&input.id)?;
        let (outcome, changes) = match stored {
            None => (WorkloadOutcome::Created, Vec::new()),
            Some(stored)
                if stored.spec_hash == voodu_store::spec_hash(&input.core_spec, &input.blocks) =>
            {
                (WorkloadOutcome::Unchanged, Vec::new())
            }
            Some(stored) => {
                // Changes are shown with every secret hidden; one that
                // changed under the same name says so.
                let (old_core, old_blocks) = redacted(&stored.core_spec, &stored.blocks);
                let (new_core, new_blocks) = redacted(&input.core_spec, &input.blocks);
                let mut changes: Vec<String> = voodu_model::changes::changes(
                    (&old_core, &old_blocks),
                    (&new_core, &new_blocks),
                )
                .iter()
                .map(ToString::to_string)
                .collect();
                changes.extend(secrets_changed(
                    (&stored.core_spec, &stored.blocks),
                    (&input.core_spec, &input.blocks),
                ));
                (WorkloadOutcome::Updated, changes)
            }
        };
        planned.push(PlannedWorkload {
            workload: input.id.clone(),
            outcome,
            changes,
        });
    }
    Ok(DryRunReport {
        workloads: planned,
        warnings: not_acted_on_warnings(&workloads),
        skipped,
        pruned: Vec::new(),
    })
}

/// The string a secret place is in: in the core spec (as JSON), or in
/// `block`'s spec.
fn secret_string<'a>(
    place: &voodu_model::secrets::SecretPlace,
    core: &'a Value,
    block: Option<&'a NormalisedBlock>,
) -> Option<&'a str> {
    match place.block {
        None => core.pointer(&place.pointer)?.as_str(),
        Some(_) => block?.spec.pointer(&place.pointer)?.as_str(),
    }
}

/// A line for each secret whose value changed where the hidden changes
/// show none: `~ env.DB_PASSWORD: <secret DB_PASSWORD from prod/api> (a
/// new value)`.
fn secrets_changed(
    (old_core, old_blocks): (&CoreSpec, &[NormalisedBlock]),
    (new_core, new_blocks): (&CoreSpec, &[NormalisedBlock]),
) -> Vec<String> {
    let json = |core: &CoreSpec| serde_json::to_value(core).unwrap_or_default();
    let (old_json, new_json) = (json(old_core), json(new_core));
    let mut lines = Vec::new();
    for place in &new_core.secrets {
        let new_block = place.block.and_then(|i| new_blocks.get(i));
        let old_block =
            new_block.and_then(|new| old_blocks.iter().find(|old| old.same_identity(new)));
        let (Some(now), Some(was)) = (
            secret_string(place, &new_json, new_block),
            secret_string(place, &old_json, old_block),
        ) else {
            continue;
        };
        let same_place_before = old_core.secrets.iter().any(|old| {
            old.pointer == place.pointer
                && old.variable == place.variable
                && old.bucket == place.bucket
                && old.block.is_some() == place.block.is_some()
        });
        if now != was && same_place_before {
            lines.push(format!(
                "~ {}: {} (a new value)",
                place.attribute(new_blocks),
                place.marker()
            ));
        }
    }
    lines.dedup();
    lines
}

/// The claim conflicts an apply of `inputs` would be refused with, found
/// as the store finds them ([`voodu_store::claims::settle`]) over the
/// stored workloads' claims, storing nothing.
fn dry_run_claims(
    inputs: &[WorkloadInput],
    store: &dyn StateStore,
) -> Result<Vec<ClaimConflict>, StoreError> {
    if inputs
        .iter()
        .all(|input| input.blocks.iter().all(|block| block.claims.is_empty()))
    {
        return Ok(Vec::new());
    }
    let held: Vec<HeldClaim> = store
        .workloads(None)?
        .iter()
        .filter(|stored| !inputs.iter().any(|input| input.id == stored.id))
        .flat_map(|stored| claims_of_blocks(&stored.id, &stored.blocks, &[]))
        .collect();
    Ok(settle(&held, &[], inputs).err().unwrap_or_default())
}

/// Workloads whose containers would share names (and DNS aliases) with
/// another workload's: `<scope>-<name>.<id>` cannot tell `"a-b" "c"` from
/// `"a" "b-c"`, nor a deployment from a statefulset of the same name.
fn name_clashes(stored: &[WorkloadId], applied: &[Workload]) -> Vec<Diagnostic> {
    let prefix = |id: &WorkloadId| format!("{}-{}", id.scope, id.name);
    let mut owners: std::collections::HashMap<String, WorkloadId> =
        stored.iter().map(|id| (prefix(id), id.clone())).collect();
    let mut clashes = Vec::new();
    for workload in applied {
        let id = &workload.id;
        match owners.get(&prefix(id)) {
            Some(other) if other != id => clashes.push(Diagnostic::for_workload(
                id,
                format!(
                    "its containers would be named {}.<replica>, as those of {other} are — rename one of them",
                    prefix(id)
                ),
                Some(workload.location.clone()),
            )),
            _ => {
                owners.insert(prefix(id), id.clone());
            }
        }
    }
    clashes
}

/// One `refused` event per workload with problems, listing them.
fn refusal_events(problems: &[Diagnostic]) -> Vec<NewEvent> {
    let mut by_workload: BTreeMap<WorkloadId, Vec<&str>> = BTreeMap::new();
    for problem in problems {
        if let Some(id) = &problem.workload {
            by_workload
                .entry(id.clone())
                .or_default()
                .push(&problem.message);
        }
    }
    by_workload
        .into_iter()
        .map(|(workload, messages)| NewEvent {
            workload,
            level: EventLevel::Error,
            reason: voodu_model::EventReason::Refused,
            message: format!("apply refused: {}", messages.join("; ")),
        })
        .collect()
}
