//! What is read before a manifest is parsed: the files each workload's
//! `env_file` names, which voodu reads on the machine that runs `vd apply`,
//! relative to its working directory; and the config buckets each
//! workload's `env_from` names, whose variables `${NAME}` may take
//! ([`WithBuckets`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;

use hcl_edit::structure::Structure;
use hcl_edit::Span;
use serde_json::Value;
use voodu_model::config::{Bucket, BucketName};
use voodu_model::secrets::SecretUse;
use voodu_model::{parse_kind_exact, WorkloadId};
use voodu_plugin_abi::messages::WorkloadKind;

use crate::expression::evaluate_exact;
use crate::interpolate::{blank_every_reference, interpolate, Variables};

/// The kind of workload a top-level block is, voodu's `app` (a deployment
/// with an ingress side) among them; `None` for any other block.
pub fn workload_kind(keyword: &str) -> Option<WorkloadKind> {
    parse_kind_exact(keyword).or((keyword == "app").then_some(WorkloadKind::Deployment))
}

/// The paths the workloads of `text` name in `env_file`, in order, once
/// each; `${NAME}`s resolved from `variables` (one that cannot be is left
/// empty: the parse that follows reports it). A text that does not parse
/// names none (the parse that follows reports why).
pub fn env_file_paths(text: &str, variables: &dyn Variables) -> Vec<String> {
    let interpolated = interpolate(text, variables).unwrap_or_else(|_| blank_every_reference(text));
    let Ok(body) = hcl_edit::parser::parse_body(&interpolated.text) else {
        return Vec::new();
    };
    let mut paths: Vec<String> = Vec::new();
    for block in body.iter().filter_map(Structure::as_block) {
        if workload_kind(block.ident.as_str()).is_none() {
            continue;
        }
        for attribute in block.body.iter().filter_map(Structure::as_attribute) {
            if attribute.key.as_str() != "env_file" {
                continue;
            }
            if let Ok(Value::Array(items)) = evaluate_exact(&attribute.value, &interpolated.text) {
                for item in items {
                    if let Value::String(path) = item {
                        if !path.is_empty() && !paths.contains(&path) {
                            paths.push(path);
                        }
                    }
                }
            }
        }
    }
    paths
}

/// The build contexts the workloads of `text` name: each workload with a
/// `build` block, its `context` (default `.`) and `dockerfile` (default
/// `Dockerfile`), `${NAME}`s resolved from `variables` as in
/// [`env_file_paths`]. A text that does not parse names none.
pub fn build_contexts(text: &str, variables: &dyn Variables) -> Vec<(WorkloadId, String, String)> {
    let interpolated = interpolate(text, variables).unwrap_or_else(|_| blank_every_reference(text));
    let Ok(body) = hcl_edit::parser::parse_body(&interpolated.text) else {
        return Vec::new();
    };
    let mut contexts = Vec::new();
    for block in body.iter().filter_map(Structure::as_block) {
        let labels: Vec<&str> = block.labels.iter().map(|label| label.as_str()).collect();
        let (Some(kind), [scope, name]) = (workload_kind(block.ident.as_str()), labels.as_slice())
        else {
            continue;
        };
        // voodu's empty workload: neither image nor build, so `.` is built.
        let has_image = block
            .body
            .iter()
            .filter_map(Structure::as_attribute)
            .any(|attribute| attribute.key.as_str() == "image");
        let has_build = block
            .body
            .iter()
            .filter_map(Structure::as_block)
            .any(|inner| inner.ident.as_str() == "build");
        if !has_image && !has_build {
            contexts.push((
                WorkloadId::new(kind, *scope, *name),
                ".".to_owned(),
                "Dockerfile".to_owned(),
            ));
        }
        for build in block
            .body
            .iter()
            .filter_map(Structure::as_block)
            .filter(|inner| inner.ident.as_str() == "build")
        {
            let attribute = |key: &str, default: &str| {
                build
                    .body
                    .iter()
                    .filter_map(Structure::as_attribute)
                    .find(|attribute| attribute.key.as_str() == key)
                    .and_then(|attribute| evaluate_exact(&attribute.value, &interpolated.text).ok())
                    .and_then(|value| value.as_str().map(str::to_owned))
                    .unwrap_or_else(|| default.to_owned())
            };
            contexts.push((
                WorkloadId::new(kind, *scope, *name),
                attribute("context", "."),
                attribute("dockerfile", "Dockerfile"),
            ));
        }
    }
    contexts
}

/// Where a config bucket's variables come from at parse time (the store,
/// in the controller).
pub trait BucketLookup {
    /// The bucket's variables, values and whether each is a secret; empty
    /// when it has none.
    fn bucket(&self, bucket: &BucketName) -> Bucket;
}

/// A variable as a workload's buckets give it.
#[derive(Debug, Clone)]
struct BucketVariable {
    value: String,
    /// The bucket that gave it (the last one that sets it).
    bucket: BucketName,
    secret: bool,
}

/// The apply's variables as voodu resolves them: the shell's first, then
/// the `env_from` buckets of the workload a reference is written in (later
/// buckets winning, the workload's own bucket last), then the default.
/// It remembers each secret it gave, by workload ([`WithBuckets::secrets_of`]).
pub struct WithBuckets<'a> {
    shell: &'a dyn Variables,
    /// Each workload's span in the text as written, its id, and its
    /// buckets' variables, laid over one another.
    workloads: Vec<(Range<usize>, WorkloadId, BTreeMap<String, BucketVariable>)>,
    /// The secrets given so far, by workload.
    given: RefCell<BTreeMap<WorkloadId, Vec<SecretUse>>>,
}

impl<'a> WithBuckets<'a> {
    /// Finds each workload of `written` and reads its buckets through
    /// `buckets`.
    pub fn new(written: &str, shell: &'a dyn Variables, buckets: &dyn BucketLookup) -> Self {
        let blank = blank_every_reference(written);
        let mut workloads = Vec::new();
        let mut read: BTreeMap<BucketName, Bucket> = BTreeMap::new();
        if let Ok(body) = hcl_edit::parser::parse_body(&blank.text) {
            for block in body.iter().filter_map(Structure::as_block) {
                let labels: Vec<&str> = block.labels.iter().map(|label| label.as_str()).collect();
                let (Some(kind), [scope, name], Some(span)) = (
                    workload_kind(block.ident.as_str()),
                    labels.as_slice(),
                    block.span(),
                ) else {
                    continue;
                };
                // The scope's bucket first, as `CoreSpec::buckets` lays
                // them, then env_from's, then the workload's own.
                let mut named: Vec<BucketName> = vec![BucketName::of_scope(scope)];
                named.extend(
                    block
                        .body
                        .iter()
                        .filter_map(Structure::as_attribute)
                        .filter(|attribute| attribute.key.as_str() == "env_from")
                        .filter_map(|attribute| evaluate_exact(&attribute.value, &blank.text).ok())
                        .filter_map(|value| match value {
                            Value::Array(items) => Some(items),
                            _ => None,
                        })
                        .flatten()
                        .filter_map(|item| BucketName::in_scope(item.as_str()?, scope).ok()),
                );
                if let Ok(own) = format!("{scope}/{name}").parse() {
                    named.push(own);
                }
                let mut variables = BTreeMap::new();
                for bucket in named {
                    let values = read
                        .entry(bucket.clone())
                        .or_insert_with(|| buckets.bucket(&bucket));
                    variables.extend(values.iter().map(|(key, value)| {
                        let variable = BucketVariable {
                            value: value.value.clone(),
                            bucket: bucket.clone(),
                            secret: value.secret,
                        };
                        (key.clone(), variable)
                    }));
                }
                let span = blank.original_offset(span.start)..blank.original_offset(span.end);
                workloads.push((span, WorkloadId::new(kind, *scope, *name), variables));
            }
        }
        WithBuckets {
            shell,
            workloads,
            given: RefCell::default(),
        }
    }

    /// The secrets of config buckets that `${NAME}`s in `workload` took,
    /// once each, in the order they were first taken.
    pub fn secrets_of(&self, workload: &WorkloadId) -> Vec<SecretUse> {
        self.given
            .borrow()
            .get(workload)
            .cloned()
            .unwrap_or_default()
    }
}

impl Variables for WithBuckets<'_> {
    fn value(&self, name: &str) -> Option<String> {
        self.shell.value(name)
    }

    fn value_at(&self, name: &str, offset: usize) -> Option<String> {
        if let Some(value) = self.shell.value(name) {
            return Some(value);
        }
        let (_, workload, variables) = self
            .workloads
            .iter()
            .find(|(span, _, _)| span.contains(&offset))?;
        let variable = variables.get(name)?;
        if variable.secret {
            let mut given = self.given.borrow_mut();
            let taken = given.entry(workload.clone()).or_default();
            if !taken.iter().any(|secret| secret.variable == name) {
                taken.push(SecretUse {
                    bucket: variable.bucket.clone(),
                    variable: name.to_owned(),
                    value: variable.value.clone(),
                });
            }
        }
        Some(variable.value.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpolate::no_variables;

    #[test]
    fn env_files_are_found_in_every_workload_once() {
        let text = "deployment \"prod\" \"api\" {\n  env_file = [\"./.env\", \"${ENV_DIR:-conf}/api.env\"]\n}\nstatefulset \"data\" \"pg\" {\n  env_file = [\"./.env\"]\n}\ningress \"prod\" \"api\" {\n  env_file = [\"ignored\"]\n}\n";
        assert_eq!(
            env_file_paths(text, &no_variables),
            ["./.env", "conf/api.env"]
        );
        assert!(env_file_paths("deployment {", &no_variables).is_empty());
    }
}
