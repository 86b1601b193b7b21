//! HCL text to workloads. The parser walks hcl-edit's `Body` structure by
//! structure, rather than deserialising the document, so blocks keep their
//! source order and their spans, and two blocks of one type are never
//! merged.

use std::collections::{BTreeMap, HashMap};

use hcl::eval::{Context, Evaluate};
use hcl_edit::structure::{Body, Structure};
use hcl_edit::Span;
use serde_json::Value;
use voodu_plugin_abi::messages::Block;

use crate::body::{encode_body, BodyProblem};
use crate::core_spec::CoreSpecBuilder;
use crate::expression::{evaluate_exact, one_line, overflowing_literal};
use crate::interpolate::{
    blank_every_reference, interpolate, no_variables, InterpolationProblem, Variables,
};
use crate::limits::check_text;
use crate::lines::LineIndex;
use crate::other_kinds::{classify, ingress_instead, OtherKind};
use crate::prescan::{BucketLookup, WithBuckets};
use voodu_model::core_spec::{is_core_block, CORE_ATTRIBUTES_NOT_ACTED_ON};
use voodu_model::diagnostic::Diagnostic;
use voodu_model::interpolation::referenced_names;
use voodu_model::limits::{MAX_MANIFEST_BYTES, MAX_WORKLOADS_PER_APPLY};
use voodu_model::workload::{
    block_display_name, parse_kind_exact, Location, ManifestSource, PluginBlock, Workload,
    WorkloadId,
};

/// What parsing a set of manifests produced: every workload that parsed,
/// and every problem found, in file order.
#[derive(Debug, Default)]
pub struct ParsedManifests {
    /// The workloads, in file order and then source order.
    pub workloads: Vec<Workload>,
    /// Every problem found; the apply fails if there is any.
    pub diagnostics: Vec<Diagnostic>,
    /// With [`ParseOptions::skip_unsupported`], each top-level block of a
    /// kind this voodu does not run, left out, with what to write instead.
    pub skipped: Vec<Diagnostic>,
}

/// How manifests are parsed.
#[derive(Clone, Copy)]
pub struct ParseOptions<'a> {
    /// Where `${NAME}` takes its value from.
    pub variables: &'a dyn Variables,
    /// Leave out top-level blocks of voodu's other kinds (`ingress`,
    /// `job`, ...) and list them, rather than refusing the file.
    pub skip_unsupported: bool,
    /// The contents of the files `env_file` names, by path as written, as
    /// `vd apply` read them.
    pub env_files: &'a BTreeMap<String, String>,
    /// Where the config buckets that `env_from` names are read, for the
    /// `${NAME}`s the shell does not set.
    pub buckets: Option<&'a dyn BucketLookup>,
}

/// No env file was read.
static NO_ENV_FILES: BTreeMap<String, String> = BTreeMap::new();

impl Default for ParseOptions<'_> {
    fn default() -> Self {
        ParseOptions {
            variables: &no_variables,
            skip_unsupported: false,
            env_files: &NO_ENV_FILES,
            buckets: None,
        }
    }
}

/// Parses every source with no variable set (only `${NAME:-default}`s
/// resolve), as [`parse_manifests_with`].
pub fn parse_manifests(sources: &[ManifestSource]) -> ParsedManifests {
    parse_manifests_with(sources, ParseOptions::default())
}

/// Parses every source as `options` say, and checks that no workload is
/// declared twice.
pub fn parse_manifests_with(
    sources: &[ManifestSource],
    options: ParseOptions<'_>,
) -> ParsedManifests {
    let mut parsed = ParsedManifests::default();
    let mut declared: HashMap<WorkloadId, Location> = HashMap::new();
    for source in sources {
        let ParsedManifests {
            workloads,
            diagnostics,
            skipped,
        } = parse_manifest_with(&source.path, &source.text, options);
        parsed.diagnostics.extend(diagnostics);
        parsed.skipped.extend(skipped);
        for workload in workloads {
            if let Some(first) = declared.get(&workload.id) {
                parsed.diagnostics.push(Diagnostic::for_workload(
                    &workload.id,
                    format!(
                        "declared twice, at {first} and at {} — keep one of them",
                        workload.location
                    ),
                    Some(workload.location.clone()),
                ));
                continue;
            }
            declared.insert(workload.id.clone(), workload.location.clone());
            parsed.workloads.push(workload);
        }
    }
    if let Some(beyond) = parsed.workloads.get(MAX_WORKLOADS_PER_APPLY) {
        // Nothing is stored when there is a problem, so the workloads are
        // not validated either: the count is the one error to fix.
        let problem = Diagnostic::at(
            beyond.location.clone(),
            format!(
                "this apply declares {} workloads, more than the {MAX_WORKLOADS_PER_APPLY} one apply may — apply the files in several parts",
                parsed.workloads.len()
            ),
        );
        parsed.workloads.clear();
        parsed.diagnostics.insert(0, problem);
    }
    parsed
}

/// Parses one manifest file with no variable set (see
/// [`parse_manifest_with`]).
pub fn parse_manifest(file: &str, text: &str) -> (Vec<Workload>, Vec<Diagnostic>) {
    let parsed = parse_manifest_with(file, text, ParseOptions::default());
    (parsed.workloads, parsed.diagnostics)
}

/// Parses one manifest file into its workloads and its problems, its
/// `${NAME}`s resolved first, as `options` say.
pub fn parse_manifest_with(
    file: &str,
    written: &str,
    options: ParseOptions<'_>,
) -> ParsedManifests {
    let refused = |diagnostics| ParsedManifests {
        diagnostics,
        ..ParsedManifests::default()
    };
    if written.len() > MAX_MANIFEST_BYTES {
        // Refused before any work on it.
        let lines = LineIndex::new(file, written);
        return refused(check_text(&lines, file).into_iter().collect());
    }
    // The buckets are read only when the shell leaves a variable unset.
    let with_buckets = match options.buckets {
        Some(buckets)
            if referenced_names(written)
                .into_iter()
                .any(|name| options.variables.value(name).is_none()) =>
        {
            Some(WithBuckets::new(written, options.variables, buckets))
        }
        _ => None,
    };
    let variables: &dyn Variables = match with_buckets.as_ref() {
        Some(with_buckets) => with_buckets,
        None => options.variables,
    };
    let interpolated = match interpolate(written, variables) {
        Ok(interpolated) => interpolated,
        Err(problems) => return refused(interpolation_diagnostics(file, written, problems)),
    };
    let lines = LineIndex::interpolated(file, written, &interpolated);
    // The text the parser sees is checked, at places in the text as written.
    if let Some(problem) = check_text(&lines, file) {
        return refused(vec![problem]);
    }
    let text = interpolated.text.as_str();
    let mut diagnostics = Vec::new();
    let body = match hcl_edit::parser::parse_body(text) {
        Ok(body) => body,
        Err(error) => {
            let (line, column) = (error.location().line(), error.location().column());
            let too_large = lines
                .offset_of(line, column)
                .and_then(|offset| overflowing_literal(text, offset));
            let redefined = error
                .message()
                .contains("redefined attribute")
                .then(|| lines.offset_of(line, column))
                .flatten()
                .map(|offset| {
                    let name: String = text[offset..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
                        .collect();
                    (
                        offset,
                        format!("attribute \"{name}\" is set twice in one body — keep one"),
                    )
                });
            let diagnostic = match (too_large, redefined) {
                (Some((start, message)), _) => Diagnostic::at(lines.locate(start), message),
                (None, Some((offset, message))) => Diagnostic::at(lines.locate(offset), message),
                (None, None) => {
                    let offset = lines.offset_of(line, column);
                    // Where the parser stopped, in the file as written.
                    let at = match offset {
                        Some(offset) => lines.locate(offset),
                        None => Location {
                            file: file.to_owned(),
                            line,
                            column,
                        },
                    };
                    let message = if one_line_block_with_two_attributes(
                        error.message(),
                        offset,
                        text,
                    ) {
                        "a block written on one line holds one attribute, and this one holds more (voodu's docs write some that way, but HCL refuses them) — put each attribute on its own line".to_owned()
                    } else {
                        format!("HCL syntax error: {}", error.message())
                    };
                    Diagnostic::at(at, message)
                }
            };
            return refused(vec![diagnostic]);
        }
    };
    let mut workloads = Vec::new();
    let mut skipped = Vec::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attribute) => diagnostics.push(Diagnostic::at(
                lines.locate_span(attribute.span()),
                format!(
                    "attribute \"{}\" outside any workload — a manifest holds only deployment, statefulset, job and cronjob blocks, each as KIND \"scope\" \"name\" {{ ... }}",
                    attribute.key.as_str()
                ),
            )),
            Structure::Block(block) => {
                let location = lines.locate_span(block.span());
                let keyword = block.ident.as_str();
                // voodu's `app`: a deployment and an ingress of one name.
                // The deployment runs; the ingress side (`host`, `tls`,
                // `location`, `lb`) is left out as any ingress is.
                let (kind, deployment_body) = match (keyword, block.labels.as_slice()) {
                    ("app", [scope, name]) => {
                        let (body, ingress_side) = app_halves(&block.body);
                        if let Some(host) = ingress_side {
                            let instead = ingress_instead(
                                scope.as_str(),
                                name.as_str(),
                                None,
                                first_port(&block.body, lines.text()),
                                host.as_deref(),
                            );
                            let written = format!(
                                "the ingress side of app \"{}\" \"{}\" (host, tls, location, lb)",
                                scope.as_str(),
                                name.as_str()
                            );
                            if options.skip_unsupported {
                                skipped.push(Diagnostic::at(
                                    location.clone(),
                                    format!("skipped {written}: this voodu does not run ingress — {instead}; the app's deployment is applied"),
                                ));
                            } else {
                                diagnostics.push(Diagnostic::at(
                                    location.clone(),
                                    format!("{written}: this voodu does not run ingress — {instead}; nothing in this apply was stored (vd apply --skip-unsupported applies the rest, the app's deployment with it)"),
                                ));
                            }
                        }
                        (crate::prescan::workload_kind(keyword), Some(body))
                    }
                    _ => (parse_kind_exact(keyword), None),
                };
                let body = deployment_body.as_ref().unwrap_or(&block.body);
                let Some(kind) = kind else {
                    let written = block_display_name(
                        keyword,
                        &block
                            .labels
                            .iter()
                            .map(|label| label.as_str().to_owned())
                            .collect::<Vec<_>>(),
                    );
                    let written = written.trim_end_matches(" block");
                    let kind_of = match (keyword, block.labels.as_slice()) {
                        ("ingress", [scope, name]) => {
                            let attribute = |key: &str| {
                                block
                                    .body
                                    .iter()
                                    .filter_map(Structure::as_attribute)
                                    .find(|attribute| attribute.key.as_str() == key)
                                    .and_then(|attribute| {
                                        evaluate_exact(&attribute.value, lines.text()).ok()
                                    })
                            };
                            let service = attribute("service");
                            let host = attribute("host");
                            OtherKind::Unsupported {
                                instead: ingress_instead(
                                    scope.as_str(),
                                    name.as_str(),
                                    service.as_ref().and_then(|value| value.as_str()),
                                    attribute("port").and_then(|value| value.as_u64()),
                                    host.as_ref().and_then(|value| value.as_str()),
                                ),
                            }
                        }
                        _ => classify(keyword),
                    };
                    match kind_of {
                        OtherKind::Typo(near) => diagnostics.push(Diagnostic::at(
                            location,
                            format!(
                                "unknown workload kind \"{keyword}\" (did you mean \"{near}\"?) — a manifest holds deployment, statefulset, job and cronjob blocks, each as KIND \"scope\" \"name\" {{ ... }}"
                            ),
                        )),
                        OtherKind::Unsupported { instead } if options.skip_unsupported => {
                            skipped.push(Diagnostic::at(
                                location,
                                format!("skipped {written}: this voodu does not run {keyword} — {instead}"),
                            ))
                        }
                        OtherKind::Unsupported { instead } => diagnostics.push(Diagnostic::at(
                            location,
                            format!(
                                "{written}: this voodu does not run {keyword} — {instead}; nothing in this apply was stored (vd apply --skip-unsupported applies the rest)"
                            ),
                        )),
                    }
                    continue;
                };
                let labels: Vec<&str> = block.labels.iter().map(|label| label.as_str()).collect();
                let [scope, name] = labels.as_slice() else {
                    diagnostics.push(Diagnostic::at(
                        location,
                        format!(
                            "a {kind} block needs two labels, a scope and a name, and has {} — write {kind} \"prod\" \"esl\" {{ ... }}",
                            labels.len()
                        ),
                    ));
                    continue;
                };
                let id = WorkloadId::new(kind, *scope, *name);
                if let Some(problem) = name_problem(scope, "scope").or_else(|| name_problem(name, "name")) {
                    diagnostics.push(Diagnostic::for_workload(&id, problem, Some(location)));
                    continue;
                }
                workloads.push(parse_workload(
                    id,
                    body,
                    location,
                    &lines,
                    options,
                    &mut diagnostics,
                    &mut skipped,
                ));
            }
        }
    }
    if let Some(buckets) = with_buckets.as_ref() {
        for workload in &mut workloads {
            workload.secrets = buckets.secrets_of(&workload.id);
        }
    }
    ParsedManifests {
        workloads,
        diagnostics,
        skipped,
    }
}

/// Whether a syntax error is HCL refusing a second attribute in a block
/// written on one line (`http_get { path = "/" port = 8080 }`): the
/// parser stopped inside a `{ ... }` that opened on the same line, after an
/// attribute, where an identifier begins.
fn one_line_block_with_two_attributes(message: &str, offset: Option<usize>, text: &str) -> bool {
    let Some(offset) = offset else {
        return false;
    };
    let line_start = text[..offset].rfind('\n').map_or(0, |at| at + 1);
    let before = &text[line_start..offset];
    message.contains("expected `}`, newline or identifier")
        && before.contains('{')
        && before.contains('=')
        && text[offset..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
}

/// Interpolation problems as diagnostics, each at its `${` in the file as
/// written and, when it lies inside a workload, naming the workload. The
/// workloads are found by parsing the file with every variable empty.
fn interpolation_diagnostics(
    file: &str,
    written: &str,
    problems: Vec<InterpolationProblem>,
) -> Vec<Diagnostic> {
    let lines = LineIndex::new(file, written);
    let mut workloads: Vec<(std::ops::Range<usize>, WorkloadId)> = Vec::new();
    let blank = blank_every_reference(written);
    if let Ok(body) = hcl_edit::parser::parse_body(&blank.text) {
        for block in body.iter().filter_map(Structure::as_block) {
            let labels: Vec<&str> = block.labels.iter().map(|label| label.as_str()).collect();
            if let (Some(kind), [scope, name], Some(span)) = (
                parse_kind_exact(block.ident.as_str()),
                labels.as_slice(),
                block.span(),
            ) {
                let span = blank.original_offset(span.start)..blank.original_offset(span.end);
                workloads.push((span, WorkloadId::new(kind, *scope, *name)));
            }
        }
    }
    problems
        .into_iter()
        .map(|problem| {
            let at = lines.locate(problem.offset);
            match workloads
                .iter()
                .find(|(span, _)| span.contains(&problem.offset))
            {
                Some((_, workload)) => {
                    Diagnostic::for_workload(workload, problem.message, Some(at))
                }
                None => Diagnostic::at(at, problem.message),
            }
        })
        .collect()
}

/// Why a scope or name cannot name containers and DNS aliases, if it cannot.
fn name_problem(value: &str, what: &str) -> Option<String> {
    let valid = !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    (!valid).then(|| {
        format!(
            "the {what} {value:?} cannot name containers — use 1 to 63 lowercase letters, digits and inner dashes, for example \"esl-api\""
        )
    })
}

fn parse_workload(
    id: WorkloadId,
    body: &Body,
    location: Location,
    lines: &LineIndex<'_>,
    options: ParseOptions<'_>,
    diagnostics: &mut Vec<Diagnostic>,
    skipped: &mut Vec<Diagnostic>,
) -> Workload {
    let mut core = CoreSpecBuilder::for_workload(id.kind, &id.scope, options.env_files.clone());
    let mut plugin_blocks = Vec::new();
    let mut core_blocks_at = Vec::new();
    let first_problem = diagnostics.len();
    let mut attributes_seen: HashMap<&str, Location> = HashMap::new();
    let mut attributes_at = Vec::new();
    let mut blocks_seen: HashMap<(&str, Vec<String>), Location> = HashMap::new();
    let mut report = |message: String, at: Location| {
        diagnostics.push(Diagnostic::for_workload(&id, message, Some(at)));
    };

    for structure in body.iter() {
        match structure {
            Structure::Attribute(attribute) => {
                let key = attribute.key.as_str();
                let at = lines.locate_span(attribute.span());
                if let Some(first) = attributes_seen.get(key) {
                    report(
                        format!(
                            "attribute \"{key}\" is set twice, at {first} and at {at} — keep one"
                        ),
                        at,
                    );
                    continue;
                }
                attributes_seen.insert(key, at.clone());
                let value_at = lines.locate_span(attribute.value.span());
                attributes_at.push((key.to_owned(), value_at.clone()));
                let value = match evaluate_exact(&attribute.value, lines.text()) {
                    Ok(value) => value,
                    Err(problem) => {
                        report(
                            format!("attribute \"{key}\": {}", problem.message),
                            lines.locate(problem.offset),
                        );
                        continue;
                    }
                };
                if let Err(message) = core.attribute(key, value) {
                    report(message, value_at);
                }
            }
            Structure::Block(block) => {
                let block_type = block.ident.as_str();
                let labels: Vec<String> = block
                    .labels
                    .iter()
                    .map(|label| label.as_str().to_owned())
                    .collect();
                let at = lines.locate_span(block.span());
                let display = block_display_name(block_type, &labels);
                if let Some(first) = blocks_seen.get(&(block_type, labels.clone())) {
                    let fix = if labels.is_empty() {
                        format!(
                            "blocks of one type need labels to tell them apart: {block_type} \"a\" {{ ... }} and {block_type} \"b\" {{ ... }}"
                        )
                    } else {
                        "give each block its own label".to_owned()
                    };
                    report(
                        format!("two {display}s, at {first} and at {at} — {fix}"),
                        at,
                    );
                    continue;
                }
                blocks_seen.insert((block_type, labels.clone()), at.clone());
                // Every body is checked the same way (exact numbers, no
                // clashes), so one that would panic or change in hcl-rs never
                // reaches it.
                let encoded = match encode_body(&block.body, lines) {
                    Ok(encoded) => encoded,
                    Err(problems) => {
                        for BodyProblem { location, message } in problems {
                            report(format!("{display}: {message}"), location);
                        }
                        continue;
                    }
                };
                if is_core_block(id.kind, block_type) {
                    core_blocks_at.push((block_type.to_owned(), at.clone()));
                    // voodu's own blocks keep HCL's JSON mapping.
                    match core_body_to_json(&block.body) {
                        Ok(mut spec) => {
                            if block_type == "on_deploy" && options.skip_unsupported {
                                for left_out in without_asset_payloads(&mut spec) {
                                    skipped.push(Diagnostic::for_workload(
                                        &id,
                                        format!("skipped an on_deploy.{left_out}: its payload is a voodu asset, which this voodu does not keep — write it inline: body = {{ ... }} ({{{{status}}}}, {{{{error}}}}, {{{{release_id}}}} and voodu's other fields are filled in)"),
                                        Some(at.clone()),
                                    ));
                                }
                            }
                            if let Err(problem) = core.block(block_type, &labels, spec) {
                                // The path starts at this block's type.
                                let within = problem.path.get(1..).unwrap_or_default();
                                let at = locate_path(&block.body, within, lines).unwrap_or(at);
                                report(problem.message, at);
                            }
                        }
                        Err(message) => report(format!("{display}: {message}"), at),
                    }
                } else if block_type == "volume_claim" {
                    report(
                        "volume_claim blocks belong to statefulsets — declare this workload as statefulset \"scope\" \"name\" { ... }, or mount a named volume with volumes = [\"data:/path\"]".to_owned(),
                        at,
                    );
                } else {
                    plugin_blocks.push(PluginBlock {
                        block: Block {
                            block_type: block_type.to_owned(),
                            labels,
                            spec: Value::Object(encoded),
                        },
                        location: at,
                        option_locations: crate::body::option_locations(&block.body, lines),
                    });
                }
            }
        }
    }

    // A workload with problems is still returned, with what of its core
    // spec was valid, so that its plugin blocks are validated in the same
    // round: the apply stores nothing while any problem stands.
    let (core, incomplete) = core.finish_partial();
    for problem in incomplete {
        let at = locate_path(body, &problem.path, lines).unwrap_or_else(|| location.clone());
        diagnostics.push(Diagnostic::for_workload(&id, problem.message, Some(at)));
    }
    // What is stored but not acted on is warned of at the apply, at its
    // place: attributes too, and a `resources` block's `requests`.
    for attribute in CORE_ATTRIBUTES_NOT_ACTED_ON {
        if let Some(at) = attributes_seen.get(attribute) {
            core_blocks_at.push(((*attribute).to_owned(), at.clone()));
        }
    }
    if core.shape.network_mode.is_some() && !core.ports.is_empty() {
        if let Some(at) = attributes_seen.get("ports") {
            core_blocks_at.push((
                voodu_model::core_spec::PORTS_NOT_PUBLISHED.to_owned(),
                at.clone(),
            ));
        }
    }
    if core.resources.requests.is_some() {
        let path = ["resources".to_owned(), "requests".to_owned()];
        if let Some(at) = locate_path(body, &path, lines) {
            core_blocks_at.push(("resources.requests".to_owned(), at));
        }
    }
    // The workload's problems in source order, those found at finish too.
    diagnostics[first_problem..]
        .sort_by_key(|problem| problem.location.as_ref().map(|at| (at.line, at.column)));
    Workload {
        id,
        core,
        plugin_blocks,
        core_blocks_at,
        location,
        attributes_at,
        secrets: Vec::new(),
    }
}

/// Where a [`SpecProblem`](voodu_model::diagnostic::SpecProblem) path
/// leads in `body`: the value of the attribute it ends at, or the deepest
/// block of it that is written (a problem about what is missing names the
/// block it is missing from). `None` when not even its first part is
/// written.
fn locate_path(body: &Body, path: &[String], lines: &LineIndex<'_>) -> Option<Location> {
    let mut body = body;
    let mut found = None;
    for part in path {
        let structure = body.iter().find(|structure| match structure {
            Structure::Attribute(attribute) => attribute.key.as_str() == part,
            Structure::Block(block) => block.ident.as_str() == part,
        });
        match structure {
            Some(Structure::Attribute(attribute)) => {
                found = attribute.value.span();
                break;
            }
            Some(Structure::Block(block)) => {
                found = block.span();
                body = &block.body;
            }
            None => break,
        }
    }
    found.map(|span| lines.locate_span(Some(span)))
}

/// A core block's body as JSON, following HCL's JSON mapping for nested
/// blocks. Only called once [`encode_body`] has checked the body.
/// The two halves of voodu's `app`: its body without the ingress side,
/// which is a deployment's; and, when it has an ingress side (`host`,
/// `tls`, `location`, `lb`), the host it names, if it names one as text.
fn app_halves(body: &Body) -> (Body, Option<Option<String>>) {
    const INGRESS_SIDE: &[&str] = &["host", "tls", "location", "lb"];
    let mut host = None;
    let mut has_ingress_side = false;
    let deployment: Body = body
        .iter()
        .filter(|structure| {
            let key = match structure {
                Structure::Attribute(attribute) => attribute.key.as_str(),
                Structure::Block(block) => block.ident.as_str(),
            };
            if !INGRESS_SIDE.contains(&key) {
                return true;
            }
            has_ingress_side = true;
            if let Structure::Attribute(attribute) = structure {
                if key == "host" {
                    host = attribute.value.as_str().map(str::to_owned);
                }
            }
            false
        })
        .cloned()
        .collect();
    (deployment, has_ingress_side.then_some(host))
}

/// The first port an `app`'s `ports` publishes (its ingress side's port,
/// as voodu derives it), when it is written plainly.
fn first_port(body: &Body, text: &str) -> Option<u64> {
    let ports = body
        .iter()
        .filter_map(Structure::as_attribute)
        .find(|attribute| attribute.key.as_str() == "ports")?;
    let value = evaluate_exact(&ports.value, text).ok()?;
    let first = value.as_array()?.first()?.as_str()?.to_owned();
    let container = first.rsplit(':').next()?.split('/').next()?;
    container.split('-').next()?.parse().ok()
}

/// `on_deploy`'s targets whose payload is a voodu asset (`file =
/// "${asset...}"`) taken out, for `--skip-unsupported`, which leaves the
/// assets out: each slot's target left out, as `failure target 2
/// (https://...)`.
fn without_asset_payloads(on_deploy: &mut Value) -> Vec<String> {
    let mut left_out = Vec::new();
    let Some(slots) = on_deploy.as_object_mut() else {
        return left_out;
    };
    for slot in ["success", "failure"] {
        let Some(written) = slots.remove(slot) else {
            continue;
        };
        let written = match written {
            Value::Array(targets) => targets,
            single => vec![single],
        };
        let mut kept = Vec::new();
        for (index, target) in written.into_iter().enumerate() {
            if target.get("file").is_some() {
                let url = target.get("url").and_then(Value::as_str).unwrap_or("?");
                left_out.push(format!("{slot} target {} ({url})", index + 1));
            } else {
                kept.push(target);
            }
        }
        if !kept.is_empty() {
            slots.insert(slot.to_owned(), Value::Array(kept));
        }
    }
    left_out
}

fn core_body_to_json(body: &Body) -> Result<Value, String> {
    let body: hcl::Body = body.clone().into();
    let body = body
        .evaluate(&Context::new())
        .map_err(|error| format!("cannot be evaluated: {}", one_line(&error.to_string())))?;
    hcl::from_body::<Value>(body).map_err(|error| format!("has no JSON form: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> (Vec<Workload>, Vec<String>) {
        let (workloads, diagnostics) = parse_manifest("esl.hcl", text);
        (
            workloads,
            diagnostics
                .iter()
                .map(|d| match &d.location {
                    Some(at) => format!("{d} [{at}]"),
                    None => d.to_string(),
                })
                .collect(),
        )
    }

    #[test]
    fn each_option_of_a_plugin_block_is_located_by_its_json_pointer() {
        let (workloads, errors) = parse(
            r#"deployment "prod" "esl" {
  image = "esl:1"
  nginx "web" {
    listen = 70000
    tls    = { cert = "a.pem" }
    location "/api" {
      pass = "http://api"
    }
  }
}
"#,
        );
        assert!(errors.is_empty(), "{errors:?}");
        let block = &workloads[0].plugin_blocks[0];
        let at = |pointer: &str| block.location_of(pointer).to_string();
        assert_eq!(at("/listen"), "esl.hcl:4:5");
        assert_eq!(at("/tls"), "esl.hcl:5:5");
        // Into an object value: its attribute.
        assert_eq!(at("/tls/cert"), "esl.hcl:5:5");
        assert_eq!(at("/@blocks/0"), "esl.hcl:6:5");
        assert_eq!(at("/@blocks/0/spec/pass"), "esl.hcl:7:7");
        // Not written (a default, a typo of the plugin's): the block.
        assert_eq!(at("/missing"), "esl.hcl:3:3");
        assert_eq!(at(""), "esl.hcl:3:3");
    }

    #[test]
    fn plugin_blocks_keep_source_order_across_types() {
        let (workloads, errors) = parse(
            r#"
deployment "prod" "esl" {
  image = "esl:1"
  traffik "sip" { port = 5060 }
  autoscale {
    min        = 1
    max        = 3
    cpu_target = 60
  }
  haproxy { mode = "tcp" }
  traffik "http" { port = 8084 }
}
"#,
        );
        assert!(errors.is_empty(), "{errors:?}");
        let blocks: Vec<(String, Vec<String>)> = workloads[0]
            .plugin_blocks
            .iter()
            .map(|b| (b.block.block_type.clone(), b.block.labels.clone()))
            .collect();
        assert_eq!(
            blocks,
            [
                ("traffik".into(), vec!["sip".into()]),
                ("haproxy".into(), vec![]),
                ("traffik".into(), vec!["http".into()]),
            ]
        );
        assert_eq!(
            workloads[0].plugin_blocks[2].block.spec,
            json!({"port": 8084})
        );
        assert_eq!(workloads[0].plugin_blocks[2].location.line, 11);
        assert_eq!(
            workloads[0].core.blocks["autoscale"],
            json!({"min": 1, "max": 3, "cpu_target": 60})
        );
    }

    #[test]
    fn duplicate_blocks_name_both_lines() {
        let (_, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  traffik { port = 1 }\n  traffik { port = 2 }\n}\n",
        );
        assert_eq!(
            errors,
            ["deployment/prod/esl: two traffik blocks, at esl.hcl:3:3 and at esl.hcl:4:3 — blocks of one type need labels to tell them apart: traffik \"a\" { ... } and traffik \"b\" { ... } [esl.hcl:4:3]"]
        );
    }

    #[test]
    fn syntax_errors_name_file_line_and_column() {
        let (_, errors) = parse("deployment \"prod\" \"esl\" {\n  image = \n}\n");
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("esl.hcl:2:11: HCL syntax error: invalid expression"),
            "{errors:?}"
        );
    }

    #[test]
    fn wrong_types_are_reported_at_the_value() {
        let (_, errors) =
            parse("deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  replicas = \"3\"\n}\n");
        assert_eq!(
            errors,
            ["deployment/prod/esl: attribute \"replicas\" must be a whole number from 0 to 1000, not the string \"3\" — write replicas = 3 [esl.hcl:3:14]"]
        );
    }

    #[test]
    fn nested_plugin_body_becomes_json_and_expressions_are_evaluated() {
        let (workloads, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  replicas = 1 + 2\n  traffik \"http\" {\n    port = 8000 + 84\n    health { path = \"/\" }\n  }\n}\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(workloads[0].core.replicas, 3);
        assert_eq!(
            workloads[0].plugin_blocks[0].block.spec,
            json!({"port": 8084, "@blocks": [{"type": "health", "spec": {"path": "/"}}]})
        );
    }

    #[test]
    fn a_workload_declared_twice_is_an_error() {
        let text = "deployment \"prod\" \"esl\" { image = \"a\" }\n";
        let parsed = parse_manifests(&[
            ManifestSource {
                path: "a.hcl".into(),
                text: text.into(),
            },
            ManifestSource {
                path: "b.hcl".into(),
                text: text.into(),
            },
        ]);
        assert_eq!(parsed.workloads.len(), 1);
        assert_eq!(
            parsed.diagnostics[0].to_string(),
            "deployment/prod/esl: declared twice, at a.hcl:1:1 and at b.hcl:1:1 — keep one of them"
        );
    }

    #[test]
    fn unknown_kinds_and_bad_labels_are_refused_with_the_fix() {
        let (_, errors) = parse("deploymnet \"prod\" \"esl\" {}\ndeployment \"esl\" {}\ndeployment \"Prod\" \"esl\" { image = \"a\" }\n");
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with(
            "esl.hcl:1:1: unknown workload kind \"deploymnet\" (did you mean \"deployment\"?)"
        ));
        assert!(errors[1].starts_with("esl.hcl:2:1: a deployment block needs two labels"));
        assert!(
            errors[2].starts_with("deployment/Prod/esl: the scope \"Prod\" cannot name containers")
        );
    }

    #[test]
    fn every_error_in_a_workload_is_reported() {
        let (workloads, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = 1\n  replica = 2\n  ports = [\"x\"]\n}\n",
        );
        // The workload comes back with what was valid, so its plugin blocks
        // are validated in the same round; the apply stores nothing.
        assert_eq!(workloads.len(), 1);
        assert_eq!(errors.len(), 3, "{errors:?}");
    }

    #[test]
    fn an_attribute_set_twice_in_a_plugin_body_is_named_at_the_second() {
        let (_, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  traffik {\n    port = 1\n    port = 2\n  }\n}\n",
        );
        assert_eq!(
            errors,
            ["esl.hcl:5:5: attribute \"port\" is set twice in one body — keep one [esl.hcl:5:5]"]
        );
    }

    #[test]
    fn a_number_too_large_for_a_double_is_named_not_a_syntax_error() {
        let (_, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  traffik { weight = 1e309 }\n}\n",
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "esl.hcl:3:22: the number 1e309 is larger than the largest 64-bit float"
            ),
            "{errors:?}"
        );
    }

    #[test]
    fn numbers_that_would_change_are_refused_at_their_own_location() {
        let (_, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  traffik {\n    port = 8084\n    weight = [1, 1/0]\n    big = 18446744073709551616\n    tiny = 1e-400\n  }\n}\n",
        );
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].contains("traffik block: attribute \"weight\": division by zero"));
        assert!(errors[0].ends_with("[esl.hcl:5:18]"), "{errors:?}");
        assert!(errors[1].contains("the integer 18446744073709551616 is outside"));
        assert!(errors[1].ends_with("[esl.hcl:6:11]"), "{errors:?}");
        assert!(errors[2].contains("would arrive as 0"));
        assert!(errors[2].ends_with("[esl.hcl:7:12]"), "{errors:?}");
    }

    #[test]
    fn an_evaluation_error_points_at_the_expression_not_the_block() {
        let (_, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  traffik \"http\" {\n    bind = [1, host.ip]\n  }\n}\n",
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].ends_with("[esl.hcl:4:16]"), "{errors:?}");
    }

    #[test]
    fn a_core_spec_error_leaves_the_plugin_blocks_to_be_validated() {
        let (workloads, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  replicas = \"three\"\n  traffik { prot = 8084 }\n}\n",
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(workloads.len(), 1);
        assert_eq!(workloads[0].core.replicas, 1);
        assert_eq!(
            workloads[0].plugin_blocks[0].block.spec,
            json!({"prot": 8084})
        );
    }

    #[test]
    fn core_block_mistakes_are_reported_at_the_attribute() {
        let (_, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  probes {\n    readiness {\n      tcp_socket {}\n      period = 5\n    }\n  }\n  resources {\n    limits {\n      memory = \"lots\"\n    }\n  }\n  ports = [\"8084\"]\n}\n",
        );
        // In source order, although probes are read once the ports, which
        // come after them here, are known.
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].contains("period must be a duration"),
            "{errors:?}"
        );
        assert!(errors[0].ends_with("[esl.hcl:6:16]"), "{errors:?}");
        assert!(errors[1].contains("memory must be a size"), "{errors:?}");
        assert!(errors[1].ends_with("[esl.hcl:11:16]"), "{errors:?}");
        let (_, errors) = parse(
            "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  probes {\n    liveness {\n      http_get { path = \"/\" }\n    }\n  }\n}\n",
        );
        assert_eq!(
            errors,
            ["deployment/prod/esl: probes.liveness.http_get: no port to check — the workload has no ports; write port = 8080 in the http_get block [esl.hcl:5:7]"]
        );
    }

    fn parse_with(text: &str, variables: &[(&str, &str)]) -> (Vec<Workload>, Vec<String>) {
        let variables: std::collections::BTreeMap<String, String> = variables
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        let parsed = parse_manifest_with(
            "api.hcl",
            text,
            ParseOptions {
                variables: &variables,
                ..ParseOptions::default()
            },
        );
        let (workloads, diagnostics) = (parsed.workloads, parsed.diagnostics);
        let errors = diagnostics
            .iter()
            .map(|d| format!("{d} [{}]", d.location.as_ref().unwrap()))
            .collect();
        (workloads, errors)
    }

    #[test]
    fn variables_fill_core_attributes_and_plugin_blocks_before_hcl_parses() {
        // voodu's own example: the image tag from the shell, a default
        // otherwise, and a variable inside a plugin block's body.
        let text = r#"
deployment "prod" "api" {
  image    = "ghcr.io/acme/api:${IMAGE_TAG:-latest}"
  replicas = ${REPLICAS:-2}
  env = {
    DATABASE_URL = "${DATABASE_URL:-postgres://localhost/myapp_dev}"
  }
  traffik "http" {
    host = "${HOST}"
    port = 8084
  }
}
"#;
        let (workloads, errors) =
            parse_with(text, &[("HOST", "api.example.com"), ("REPLICAS", "3")]);
        assert!(errors.is_empty(), "{errors:?}");
        let core = &workloads[0].core;
        assert_eq!(core.image.as_deref(), Some("ghcr.io/acme/api:latest"));
        assert_eq!(core.replicas, 3);
        assert_eq!(core.env["DATABASE_URL"], "postgres://localhost/myapp_dev");
        assert_eq!(
            workloads[0].plugin_blocks[0].block.spec,
            json!({"host": "api.example.com", "port": 8084})
        );
        let (workloads, errors) = parse_with(text, &[("HOST", "h"), ("IMAGE_TAG", "1.7")]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            workloads[0].core.image.as_deref(),
            Some("ghcr.io/acme/api:1.7")
        );
    }

    #[test]
    fn a_missing_variable_is_named_at_its_place_with_its_workload() {
        let text = "deployment \"prod\" \"api\" {\n  image = \"api:${TAG}\"\n  traffik { host = \"${HOST}\" }\n}\n";
        let (workloads, errors) = parse_with(text, &[]);
        assert!(workloads.is_empty());
        assert_eq!(
            errors,
            [
                "deployment/prod/api: undefined variable TAG — export TAG before vd apply, set it in a config bucket the workload's env_from names, or write ${TAG:-default} [api.hcl:2:16]",
                "deployment/prod/api: undefined variable HOST — export HOST before vd apply, set it in a config bucket the workload's env_from names, or write ${HOST:-default} [api.hcl:3:21]",
            ]
        );
    }

    #[test]
    fn escapes_stay_literal_and_later_problems_keep_their_columns() {
        // `$${` is a literal `${`; the error after a substitution on the
        // same line is still reported at its column in the file as written.
        let text = "deployment \"prod\" \"api\" {\n  image = \"api:${TAG}\"\n  traffik { note = \"$${NOT_A_VAR} {{name}}\" }\n  env = { A = \"${LONG_VALUE}\", B = [] }\n}\n";
        let (workloads, errors) = parse_with(
            text,
            &[
                ("TAG", "1"),
                ("LONG_VALUE", "a much longer value than the reference"),
            ],
        );
        assert_eq!(
            errors,
            ["deployment/prod/api: env variable \"B\" must be a string, number or bool, not a list — write env = { B = \"value\" } [api.hcl:4:9]"]
        );
        assert_eq!(
            workloads[0].plugin_blocks[0].block.spec,
            json!({"note": "${NOT_A_VAR} {{name}}"})
        );
        let (_, errors) = parse_with(
            "deployment \"prod\" \"api\" {\n  image = \"${TAG}\"\n  replicas = \"${TAG}\" = 1\n}\n",
            &[("TAG", "a-very-long-image-name:1")],
        );
        assert!(
            errors[0].starts_with("api.hcl:3:23: HCL syntax error"),
            "{errors:?}"
        );
    }

    /// A file as voodu's own docs write it: a deployment beside an
    /// ingress, a job (which runs here) and a postgres macro.
    const VOODU_FILE: &str = r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:1.7"
  ports = ["8080"]
}

ingress "prod" "api" {
  service = "api"
  host    = "api.example.com"
}

job "prod" "backup" {
  image   = "postgres:16"
  command = ["sh", "-c", "pg_dump $DATABASE_URL > /backups/dump.sql"]
}

postgres "data" "pg" {
  image = "postgres:16"
}
"#;

    #[test]
    fn voodus_other_kinds_refuse_the_file_whole_each_with_what_to_write_instead() {
        let parsed = parse_manifest_with("voodu.hcl", VOODU_FILE, ParseOptions::default());
        let errors: Vec<String> = parsed.diagnostics.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("voodu.hcl:6:1: ingress \"prod\" \"api\": this voodu does not run ingress — write the route inside the deployment it routes to: deployment \"prod\" \"api\" { ... traffik \"http\" { port = <the deployment's port> } } (traffik routes by port; to route by the host name \"api.example.com\""), "{errors:?}");
        assert!(
            errors[0].ends_with(
                "nothing in this apply was stored (vd apply --skip-unsupported applies the rest)"
            ),
            "{errors:?}"
        );
        assert!(errors[1].contains("postgres \"data\" \"pg\": this voodu does not run postgres — a postgres from a voodu plugin macro"), "{errors:?}");
        assert!(parsed.skipped.is_empty());
    }

    #[test]
    fn an_app_is_its_deployment_and_its_ingress_side_is_refused_or_left_out_as_an_ingress() {
        let text = "app \"prod\" \"web\" {\n  image = \"web:1\"\n  ports = [\"8080\"]\n  host = \"web.example.com\"\n  tls {\n    enabled = true\n  }\n}\n";
        let refused = parse_manifest_with("app.hcl", text, ParseOptions::default());
        let said: Vec<String> = refused
            .diagnostics
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("app.hcl:1:1: the ingress side of app \"prod\" \"web\" (host, tls, location, lb): this voodu does not run ingress — write the route inside the deployment it routes to: deployment \"prod\" \"web\" { ... traffik \"http\" { port = 8080 } }"),
            "{said:?}"
        );
        let skipped = parse_manifest_with(
            "app.hcl",
            text,
            ParseOptions {
                skip_unsupported: true,
                ..ParseOptions::default()
            },
        );
        assert!(skipped.diagnostics.is_empty(), "{:?}", skipped.diagnostics);
        assert_eq!(skipped.skipped.len(), 1);
        let [web] = skipped.workloads.as_slice() else {
            panic!("{:?}", skipped.workloads);
        };
        assert_eq!(web.id.to_string(), "deployment/prod/web");
        assert_eq!(web.core.image.as_deref(), Some("web:1"));
        assert!(web.plugin_blocks.is_empty(), "tls is no plugin block");
        // Without an ingress side it is a deployment, nothing refused.
        let plain = parse_manifest_with(
            "app.hcl",
            "app \"prod\" \"worker\" {\n  image = \"w:1\"\n}\n",
            ParseOptions::default(),
        );
        assert!(plain.diagnostics.is_empty() && plain.workloads.len() == 1);
    }

    #[test]
    fn skip_unsupported_applies_the_rest_and_lists_what_it_left_out() {
        let parsed = parse_manifest_with(
            "voodu.hcl",
            VOODU_FILE,
            ParseOptions {
                skip_unsupported: true,
                ..ParseOptions::default()
            },
        );
        assert!(parsed.diagnostics.is_empty(), "{:?}", parsed.diagnostics);
        // The deployment and the job.
        assert_eq!(parsed.workloads.len(), 2);
        let skipped: Vec<String> = parsed.skipped.iter().map(ToString::to_string).collect();
        assert_eq!(skipped.len(), 2);
        assert!(
            skipped[0].starts_with(
                "voodu.hcl:6:1: skipped ingress \"prod\" \"api\": this voodu does not run ingress"
            ),
            "{skipped:?}"
        );
        // A misspelt workload kind is never skipped.
        let parsed = parse_manifest_with(
            "voodu.hcl",
            "deploymnet \"prod\" \"api\" {}\n",
            ParseOptions {
                skip_unsupported: true,
                ..ParseOptions::default()
            },
        );
        assert_eq!(parsed.diagnostics.len(), 1);
        assert!(parsed.skipped.is_empty());
    }
}
