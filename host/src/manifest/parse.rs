//! HCL text to workloads. The parser walks hcl-edit's `Body` structure by
//! structure, rather than deserialising the document, so blocks keep their
//! source order and their spans, and two blocks of one type are never
//! merged.

use std::collections::HashMap;
use std::ops::Range;

use hcl::eval::{Context, Evaluate};
use hcl_edit::structure::{Body, Structure};
use hcl_edit::Span;
use serde_json::Value;
use voodu_plugin_abi::messages::Block;

use super::core_spec::{is_core_block, CoreSpecBuilder};
use super::model::{
    block_display_name, parse_kind_exact, Location, PluginBlock, Workload, WorkloadId,
};
use super::suggest::closest;
use crate::diagnostic::Diagnostic;

/// One manifest file's name and text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestSource {
    /// The file as the operator named it; used in locations.
    pub path: String,
    /// The file's text.
    pub text: String,
}

/// What parsing a set of manifests produced: every workload that parsed,
/// and every problem found, in file order.
#[derive(Debug, Default)]
pub struct ParsedManifests {
    /// The workloads, in file order and then source order.
    pub workloads: Vec<Workload>,
    /// Every problem found; the apply fails if there is any.
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses every source and checks that no workload is declared twice.
pub fn parse_manifests(sources: &[ManifestSource]) -> ParsedManifests {
    let mut parsed = ParsedManifests::default();
    let mut declared: HashMap<WorkloadId, Location> = HashMap::new();
    for source in sources {
        let (workloads, diagnostics) = parse_manifest(&source.path, &source.text);
        parsed.diagnostics.extend(diagnostics);
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
    parsed
}

/// Maps byte offsets in one file to lines and columns.
struct LineIndex<'a> {
    file: &'a str,
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(file: &'a str, text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        LineIndex {
            file,
            text,
            line_starts,
        }
    }

    fn locate(&self, offset: usize) -> Location {
        let line = self.line_starts.partition_point(|start| *start <= offset);
        let line_start = self.line_starts[line.saturating_sub(1)];
        let column = self
            .text
            .get(line_start..offset)
            .map_or(1, |prefix| prefix.chars().count() + 1);
        Location {
            file: self.file.to_owned(),
            line,
            column,
        }
    }

    fn locate_span(&self, span: Option<Range<usize>>) -> Location {
        self.locate(span.map_or(0, |span| span.start))
    }
}

/// Parses one manifest file into its workloads and its problems.
pub fn parse_manifest(file: &str, text: &str) -> (Vec<Workload>, Vec<Diagnostic>) {
    let lines = LineIndex::new(file, text);
    let mut diagnostics = Vec::new();
    let body = match hcl_edit::parser::parse_body(text) {
        Ok(body) => body,
        Err(error) => {
            let location = Location {
                file: file.to_owned(),
                line: error.location().line(),
                column: error.location().column(),
            };
            let message = format!("HCL syntax error: {}", error.message());
            return (Vec::new(), vec![Diagnostic::at(location, message)]);
        }
    };
    let mut workloads = Vec::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attribute) => diagnostics.push(Diagnostic::at(
                lines.locate_span(attribute.span()),
                format!(
                    "attribute \"{}\" outside any workload — a manifest holds only deployment \"scope\" \"name\" {{ ... }} and statefulset \"scope\" \"name\" {{ ... }} blocks",
                    attribute.key.as_str()
                ),
            )),
            Structure::Block(block) => {
                let location = lines.locate_span(block.span());
                let keyword = block.ident.as_str();
                let Some(kind) = parse_kind_exact(keyword) else {
                    let hint = closest(keyword, ["deployment", "statefulset"].into_iter())
                        .map(|near| format!(" (did you mean \"{near}\"?)"))
                        .unwrap_or_default();
                    diagnostics.push(Diagnostic::at(
                        location,
                        format!(
                            "unknown workload kind \"{keyword}\"{hint} — a manifest holds deployment \"scope\" \"name\" {{ ... }} and statefulset \"scope\" \"name\" {{ ... }} blocks"
                        ),
                    ));
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
                if let Some(workload) =
                    parse_workload(id, &block.body, location, &lines, &mut diagnostics)
                {
                    workloads.push(workload);
                }
            }
        }
    }
    (workloads, diagnostics)
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
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Workload> {
    let errors_before = diagnostics.len();
    let mut core = CoreSpecBuilder::default();
    let mut plugin_blocks = Vec::new();
    let mut attributes_seen: HashMap<&str, Location> = HashMap::new();
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
                let value = match evaluate(attribute.value.clone()) {
                    Ok(value) => value,
                    Err(message) => {
                        report(format!("attribute \"{key}\": {message}"), value_at);
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
                if let Err(message) = check_unique_attributes(&block.body, lines) {
                    report(format!("{display}: {message}"), at);
                    continue;
                }
                let spec = match body_to_json(&block.body) {
                    Ok(spec) => spec,
                    Err(message) => {
                        report(format!("{display}: {message}"), at);
                        continue;
                    }
                };
                if is_core_block(id.kind, block_type) {
                    if let Err(message) = core.block(block_type, &labels, spec) {
                        report(message, at);
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
                            spec,
                        },
                        location: at,
                    });
                }
            }
        }
    }

    if diagnostics.len() > errors_before {
        return None;
    }
    match core.finish() {
        Ok(core) => Some(Workload {
            id,
            core,
            plugin_blocks,
            location,
        }),
        Err(message) => {
            diagnostics.push(Diagnostic::for_workload(&id, message, Some(location)));
            None
        }
    }
}

/// Refuses a body (at any depth) that sets one attribute twice, which the
/// JSON form would silently collapse.
fn check_unique_attributes(body: &Body, lines: &LineIndex<'_>) -> Result<(), String> {
    let mut seen: HashMap<&str, Location> = HashMap::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attribute) => {
                let at = lines.locate_span(attribute.span());
                let key = attribute.key.as_str();
                if let Some(first) = seen.insert(key, at.clone()) {
                    return Err(format!(
                        "attribute \"{key}\" is set twice, at {first} and at {at} — keep one"
                    ));
                }
            }
            Structure::Block(block) => check_unique_attributes(&block.body, lines)?,
        }
    }
    Ok(())
}

/// Evaluates one expression with no variables or functions in scope.
fn evaluate(expression: hcl_edit::expr::Expression) -> Result<Value, String> {
    let expression: hcl::Expression = expression.into();
    let value = expression
        .evaluate(&Context::new())
        .map_err(|error| format!("cannot be evaluated: {}", one_line(&error.to_string())))?;
    serde_json::to_value(value).map_err(|error| format!("has no JSON form: {error}"))
}

/// A block body as JSON, following the HCL JSON mapping for nested blocks.
fn body_to_json(body: &Body) -> Result<Value, String> {
    let body: hcl::Body = body.clone().into();
    let body = body
        .evaluate(&Context::new())
        .map_err(|error| format!("cannot be evaluated: {}", one_line(&error.to_string())))?;
    hcl::from_body::<Value>(body).map_err(|error| format!("has no JSON form: {error}"))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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
    fn plugin_blocks_keep_source_order_across_types() {
        let (workloads, errors) = parse(
            r#"
deployment "prod" "esl" {
  image = "esl:1"
  traffik "sip" { port = 5060 }
  probes { path = "/health" }
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
        assert_eq!(workloads[0].plugin_blocks[2].location.line, 7);
        assert_eq!(
            workloads[0].core.blocks["probes"],
            json!({"path": "/health"})
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
            ["deployment/prod/esl: attribute \"replicas\" must be a whole number of 0 or more, not the string \"3\" — write replicas = 3 [esl.hcl:3:14]"]
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
            json!({"port": 8084, "health": {"path": "/"}})
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
        assert!(workloads.is_empty());
        assert_eq!(errors.len(), 3, "{errors:?}");
    }
}
