//! Building the workload's core spec ([`CoreSpec`]) from its attributes
//! and voodu's own blocks, type-checked. Every error message says what was written and what to
//! write instead.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use voodu_plugin_abi::messages::WorkloadKind;

use voodu_model::config::BucketName;
use voodu_model::container::{
    ContainerShape, InitStep, Logs, NetworkMode, Release, Ulimit, UlimitError, VolumeClaim,
    ULIMIT_NAMES,
};
use voodu_model::core_spec::*;
use voodu_model::diagnostic::SpecProblem;
use voodu_model::job::{
    ConcurrencyPolicy, CronSpec, JobSpec, Schedule, TimeZone, CRONJOB_ATTRIBUTES, JOB_ATTRIBUTES,
    MAX_HISTORY_LIMIT, NOT_FOR_JOBS,
};
use voodu_model::limits::{MAX_DRAIN_TIMEOUT, MAX_REPLICAS};
use voodu_model::placement::{NodeName, NodeNameError};
use voodu_model::ports::PortMapping;
use voodu_model::probes::Probes;
use voodu_model::resources::Resources;

use crate::docker_options::parse_docker_options;
use crate::probes::parse_probes;
use crate::suggest::closest;
use crate::voodu_blocks::{check_block, Checked};

/// Core blocks that carry exactly one label (`init "migrate" {}`).
const LABELLED_CORE_BLOCKS: &[&str] = &["init", "volume_claim"];

/// What this voodu offers for `network_mode`.
const NETWORK_MODES: &str = "\"\" (the voodu0 bridge), \"host\" or \"none\"";

/// The core block a misspelt block name was probably meant to be.
pub fn core_block_near(kind: WorkloadKind, name: &str) -> Option<&'static str> {
    let candidates = CORE_BLOCKS.iter().chain(match kind {
        WorkloadKind::Statefulset => STATEFULSET_CORE_BLOCKS.iter(),
        WorkloadKind::Deployment | WorkloadKind::Job | WorkloadKind::Cronjob => [].iter(),
    });
    closest(name, candidates.copied())
}

/// Builds a [`CoreSpec`] from attributes and core blocks one at a time, so
/// each error can be reported where it was written.
#[derive(Debug, Default)]
pub struct CoreSpecBuilder {
    image: Option<String>,
    replicas: Option<u32>,
    command: Vec<String>,
    env: BTreeMap<String, String>,
    ports: Vec<PortMapping>,
    volumes: Vec<String>,
    networks: Vec<String>,
    nodes: Vec<NodeName>,
    restart: Option<RestartPolicy>,
    drain_timeout: Option<Duration>,
    max_surge: Option<u32>,
    progress_deadline: Option<Duration>,
    resources: Resources,
    /// The `probes` block's body, parsed once at [`CoreSpecBuilder::finish`]
    /// where the workload's ports, its default port, are all known.
    probes_body: Option<Value>,
    keep_releases: Option<u32>,
    init: Vec<InitStep>,
    release: Option<Release>,
    on_deploy: Option<voodu_model::on_deploy::OnDeploy>,
    build: Option<voodu_model::build::Build>,
    /// A job's or cronjob's settings as far as they are written.
    job: JobFields,
    shape: ContainerShape,
    /// The variables of `env_file`, which `env` overrides at finish.
    env_from_files: BTreeMap<String, String>,
    /// The contents of the env files the apply read, by path as written.
    env_files: BTreeMap<String, String>,
    /// The workload's kind, whose blocks voodu takes.
    kind: Option<WorkloadKind>,
    /// The workload's scope, in which a bucket `env_from` names without
    /// one lies.
    scope: String,
    env_from: Vec<BucketName>,
    /// Whether `networks` or `network` was written, for the
    /// `network_mode` check at finish.
    networks_written: bool,
    blocks: BTreeMap<String, Value>,
    /// Whether `image` was written, valid or not.
    image_written: bool,
}

/// What a job or cronjob wrote of its own attributes.
#[derive(Debug, Default)]
struct JobFields {
    timeout: Option<Duration>,
    successful_history_limit: Option<u32>,
    failed_history_limit: Option<u32>,
    schedule: Option<Schedule>,
    /// Whether `schedule` was written, valid or not.
    schedule_written: bool,
    timezone: Option<TimeZone>,
    suspend: bool,
    concurrency_policy: ConcurrencyPolicy,
}

/// The attributes a workload of `kind` takes.
fn attributes_of(kind: WorkloadKind) -> Vec<&'static str> {
    let mut allowed: Vec<&'static str> = CORE_ATTRIBUTES
        .iter()
        .copied()
        .filter(|key| !kind.runs_to_completion() || !NOT_FOR_JOBS.contains(key))
        .collect();
    if kind.runs_to_completion() {
        allowed.extend(JOB_ATTRIBUTES);
    }
    if kind == WorkloadKind::Cronjob {
        allowed.extend(CRONJOB_ATTRIBUTES);
    }
    allowed
}

/// A short description of a JSON value for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(flag) => format!("{flag}"),
        Value::Number(number) => format!("the number {number}"),
        Value::String(text) => format!("the string {text:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a map".into(),
    }
}

fn string_list(key: &str, value: Value, example: &str) -> Result<Vec<String>, String> {
    let wrong = |value: &Value| {
        format!(
            "attribute \"{key}\" must be a list of strings, not {} — write {key} = {example}",
            describe(value)
        )
    };
    match value {
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::String(text) => Ok(text),
                Value::Number(number) => Ok(number.to_string()),
                other => Err(wrong(&other)),
            })
            .collect(),
        other => Err(wrong(&other)),
    }
}

impl CoreSpecBuilder {
    /// A builder for a workload of `scope`, that reads `env_file` from
    /// these contents, by path as written (the CLI read them).
    pub fn for_workload(
        kind: WorkloadKind,
        scope: &str,
        env_files: BTreeMap<String, String>,
    ) -> Self {
        CoreSpecBuilder {
            kind: Some(kind),
            scope: scope.to_owned(),
            env_files,
            ..CoreSpecBuilder::default()
        }
    }

    /// Takes one core attribute. The error is the message to report, without
    /// the workload prefix.
    pub fn attribute(&mut self, key: &str, value: Value) -> Result<(), String> {
        if key == "image" {
            self.image_written = true;
        }
        let kind = self.kind.unwrap_or(WorkloadKind::Deployment);
        if kind.runs_to_completion() {
            if NOT_FOR_JOBS.contains(&key) {
                return Err(format!(
                    "attribute \"{key}\" does not apply to a {kind}: a {kind} runs one container to its end each time it runs (vd run SCOPE/NAME{}), serving nothing — remove it",
                    if kind == WorkloadKind::Cronjob { ", or its schedule" } else { "" }
                ));
            }
            if JOB_ATTRIBUTES.contains(&key) || CRONJOB_ATTRIBUTES.contains(&key) {
                return self.job_attribute(kind, key, value);
            }
        } else if JOB_ATTRIBUTES.contains(&key) || CRONJOB_ATTRIBUTES.contains(&key) {
            let owner = if JOB_ATTRIBUTES.contains(&key) {
                "a job or cronjob"
            } else {
                "a cronjob"
            };
            return Err(format!(
                "attribute \"{key}\" belongs to {owner}, not a {kind} — remove it, or declare the workload as cronjob \"scope\" \"name\" {{ ... }}"
            ));
        }
        match key {
            "image" => match value {
                Value::String(image) if !image.trim().is_empty() => self.image = Some(image),
                other => {
                    return Err(format!(
                        "attribute \"image\" must be a non-empty string, not {} — write image = \"ghcr.io/acme/esl:1.2\"",
                        describe(&other)
                    ))
                }
            },
            "replicas" => match value.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(replicas) if replicas <= MAX_REPLICAS => self.replicas = Some(replicas),
                _ => {
                    return Err(format!(
                        "attribute \"replicas\" must be a whole number from 0 to {MAX_REPLICAS}, not {} — write replicas = 3",
                        describe(&value)
                    ))
                }
            },
            "command" => {
                self.command = string_list(key, value, "[\"esl\", \"--port\", \"8084\"]")?;
            }
            "env" => {
                let Value::Object(map) = value else {
                    return Err(format!(
                        "attribute \"env\" must be a map, not {} — write env = {{ LOG_LEVEL = \"debug\" }}",
                        describe(&value)
                    ));
                };
                for (name, value) in map {
                    let text = match value {
                        Value::String(text) => text,
                        Value::Number(number) => number.to_string(),
                        Value::Bool(flag) => flag.to_string(),
                        other => {
                            return Err(format!(
                                "env variable {name:?} must be a string, number or bool, not {} — write env = {{ {name} = \"value\" }}",
                                describe(&other)
                            ))
                        }
                    };
                    self.env.insert(name, text);
                }
            }
            "ports" => {
                self.ports = string_list(key, value, "[\"8084\"]")?
                    .iter()
                    .map(|port| port.parse::<PortMapping>())
                    .collect::<Result<_, _>>()
                    .map_err(|error| error.to_string())?;
            }
            "volumes" => {
                let volumes = string_list(key, value, "[\"data:/var/lib/esl\"]")?;
                if let Some(bad) = volumes
                    .iter()
                    .find(|volume| !volume.contains(":/") || volume.starts_with(':'))
                {
                    return Err(format!(
                        "volume {bad:?} needs a source and an absolute target — write \"data:/var/lib/esl\" or \"/srv/esl:/var/lib/esl:ro\""
                    ));
                }
                self.volumes = volumes;
            }
            "networks" => {
                self.networks_written = true;
                let networks = string_list(key, value, "[\"backend\"]")?;
                for network in networks {
                    if !self.networks.contains(&network) {
                        self.networks.push(network);
                    }
                }
            }
            "network" => match value {
                // voodu's legacy singular form, folded into networks.
                Value::String(network) if !network.is_empty() => {
                    self.networks_written = true;
                    if !self.networks.contains(&network) {
                        self.networks.push(network);
                    }
                }
                other => {
                    return Err(format!(
                        "attribute \"network\" must be a network's name, not {} — write networks = [\"backend\"]",
                        describe(&other)
                    ))
                }
            },
            "network_mode" => match value.as_str() {
                Some("") => self.shape.network_mode = None,
                Some(mode) => match mode.parse::<NetworkMode>() {
                    Ok(mode) => self.shape.network_mode = Some(mode),
                    Err(_) => {
                        return Err(format!(
                            "attribute \"network_mode\" must be {NETWORK_MODES}, not {} — write network_mode = \"host\"",
                            describe(&value)
                        ))
                    }
                },
                None => {
                    return Err(format!(
                        "attribute \"network_mode\" must be {NETWORK_MODES}, not {} — write network_mode = \"host\"",
                        describe(&value)
                    ))
                }
            },
            "env_file" => {
                for path in string_list(key, value, "[\"./.env\"]")? {
                    let Some(text) = self.env_files.get(&path) else {
                        return Err(format!(
                            "env_file {path:?} was not read by vd apply — apply with vd apply, which reads it from its working directory"
                        ));
                    };
                    let variables = crate::env_file::variables(text)
                        .map_err(|error| format!("env_file {path:?}: {error}"))?;
                    self.env_from_files.extend(variables);
                }
            }
            "env_from" => {
                let mut buckets: Vec<BucketName> = Vec::new();
                for written in string_list(key, value, "[\"prod/shared\"]")? {
                    let bucket = BucketName::in_scope(&written, &self.scope)
                        .map_err(|error| format!("env_from: {error}"))?;
                    if buckets.contains(&bucket) {
                        return Err(format!(
                            "env_from names bucket {bucket} twice — name each bucket once"
                        ));
                    }
                    buckets.push(bucket);
                }
                self.env_from = buckets;
            }
            "extra_hosts" => {
                let hosts = string_list(key, value, "[\"legacy.internal:10.0.0.5\"]")?;
                for host in &hosts {
                    let valid = host.split_once(':').is_some_and(|(name, address)| {
                        !name.is_empty()
                            && !name.contains(char::is_whitespace)
                            && (address == "host-gateway" || address.parse::<std::net::IpAddr>().is_ok())
                    });
                    if !valid {
                        return Err(format!(
                            "extra_hosts entry {host:?} is not name:ip — write extra_hosts = [\"legacy.internal:10.0.0.5\"]"
                        ));
                    }
                }
                self.shape.extra_hosts = hosts;
            }
            "cap_add" => {
                let capabilities = string_list(key, value, "[\"NET_ADMIN\"]")?;
                if let Some(bad) = capabilities.iter().find(|capability| {
                    capability.is_empty()
                        || !capability
                            .chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                }) {
                    return Err(format!(
                        "cap_add entry {bad:?} is not a Linux capability — write them in capitals without CAP_, such as cap_add = [\"NET_ADMIN\"]"
                    ));
                }
                self.shape.cap_add = capabilities;
            }
            "ulimits" => {
                let Value::Object(map) = value else {
                    return Err(format!(
                        "attribute \"ulimits\" must be a map, not {} — write ulimits = {{ nofile = \"65536:65536\" }}",
                        describe(&value)
                    ));
                };
                for (name, limit) in map {
                    if !ULIMIT_NAMES.contains(&name.as_str()) {
                        let hint = closest(&name, ULIMIT_NAMES.iter().copied())
                            .map(|near| format!("did you mean {near}? "))
                            .unwrap_or_default();
                        return Err(format!(
                            "ulimits: {name:?} is not a resource Docker limits — {hint}it limits {}",
                            ULIMIT_NAMES.join(", ")
                        ));
                    }
                    let text = match &limit {
                        Value::String(text) => text.clone(),
                        Value::Number(number) => number.to_string(),
                        other => describe(other),
                    };
                    let ulimit: Ulimit = text
                        .parse()
                        .map_err(|error: UlimitError| format!("ulimits.{name}: {error}"))?;
                    self.shape.ulimits.insert(name, ulimit);
                }
            }
            "docker_options" => {
                let options = string_list(key, value, "[\"--shm-size=64m\"]")?;
                self.shape.docker_options = parse_docker_options(&options)?;
            }
            "keep_releases" => match value.as_i64() {
                // voodu: unset or 0 and below keep the default.
                Some(count) if count <= 0 => self.keep_releases = None,
                Some(count) if count <= i64::from(MAX_KEEP_RELEASES) => {
                    self.keep_releases = Some(count as u32)
                }
                _ => {
                    return Err(format!(
                        "attribute \"keep_releases\" must be a whole number up to {MAX_KEEP_RELEASES}, not {} — write keep_releases = 5",
                        describe(&value)
                    ))
                }
            },
            "health_check" => match value {
                Value::String(path) if path.starts_with('/') => {
                    self.blocks.insert(key.to_owned(), Value::String(path));
                }
                other => {
                    return Err(format!(
                        "attribute \"health_check\" must be a path starting with /, not {} — write health_check = \"/healthz\"",
                        describe(&other)
                    ))
                }
            },
            "post_deploy" => {
                let command = string_list(key, value, "[\"bin/notify\"]")?;
                self.blocks.insert(key.to_owned(), Value::from(command));
            }
            "nodes" => {
                let mut nodes: Vec<NodeName> = Vec::new();
                for name in string_list(key, value, "[\"node-a\", \"node-b\"]")? {
                    let node: NodeName = name.parse().map_err(|error: NodeNameError| {
                        format!("attribute \"nodes\": {error}")
                    })?;
                    if nodes.contains(&node) {
                        return Err(format!(
                            "attribute \"nodes\" names node \"{node}\" twice — name each node once"
                        ));
                    }
                    nodes.push(node);
                }
                if nodes.is_empty() {
                    return Err("attribute \"nodes\" is empty, so no node could run the workload — name at least one node, or leave the attribute out to let any node run it".to_owned());
                }
                self.nodes = nodes;
            }
            "restart" => match value {
                Value::String(policy) if RestartPolicy::parse(&policy).is_some() => {
                    self.restart = RestartPolicy::parse(&policy)
                }
                other => {
                    return Err(format!(
                        "attribute \"restart\" must be one of \"no\", \"always\", \"on-failure\" or \"unless-stopped\", not {} — write restart = \"always\"",
                        describe(&other)
                    ))
                }
            },
            "progress_deadline" => {
                match value
                    .as_str()
                    .and_then(|text| humantime::parse_duration(text).ok())
                    .filter(|deadline| !deadline.is_zero())
                {
                    Some(deadline) => {
                        self.progress_deadline = Some(deadline)
                    }
                    None => {
                        return Err(format!(
                            "attribute \"progress_deadline\" must be a duration above 0, not {} — write progress_deadline = \"10m\"",
                            describe(&value)
                        ))
                    }
                }
            }
            "drain_timeout" => {
                let parsed = match &value {
                    Value::String(text) => humantime::parse_duration(text).ok(),
                    Value::Number(number) => number.as_u64().map(Duration::from_secs),
                    _ => None,
                };
                match parsed {
                    Some(duration) if duration > MAX_DRAIN_TIMEOUT => {
                        return Err(format!(
                            "attribute \"drain_timeout\" must be at most {}, not {} — write drain_timeout = \"30s\"",
                            humantime::format_duration(MAX_DRAIN_TIMEOUT),
                            describe(&value)
                        ))
                    }
                    Some(duration) => self.drain_timeout = Some(duration),
                    None => {
                        return Err(format!(
                            "attribute \"drain_timeout\" must be a duration, not {} — write drain_timeout = \"30s\"",
                            describe(&value)
                        ))
                    }
                }
            }
            "max_surge" => match value.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(surge @ 1..=MAX_MAX_SURGE) => self.max_surge = Some(surge),
                _ => {
                    return Err(format!(
                        "attribute \"max_surge\" must be a whole number from 1 to {MAX_MAX_SURGE}, not {} — write max_surge = 2 to start two new replicas at a time in a rolling update",
                        describe(&value)
                    ))
                }
            },
            unknown => {
                let allowed = attributes_of(kind);
                let hint = closest(unknown, allowed.iter().copied())
                    .map(|near| format!("did you mean \"{near}\"? "))
                    .unwrap_or_default();
                return Err(format!(
                    "unknown attribute \"{unknown}\" — {hint}a {kind}'s attributes are {}; settings for a plugin go inside its block",
                    allowed.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Takes one of a job's or cronjob's own attributes.
    fn job_attribute(&mut self, kind: WorkloadKind, key: &str, value: Value) -> Result<(), String> {
        let limit = |value: &Value| {
            value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n <= MAX_HISTORY_LIMIT)
                .ok_or_else(|| {
                    format!(
                        "attribute \"{key}\" must be a whole number from 0 to {MAX_HISTORY_LIMIT}, not {} — write {key} = 3",
                        describe(value)
                    )
                })
        };
        let text = |value: &Value, example: &str| match value {
            Value::String(text) => Ok(text.clone()),
            other => Err(format!(
                "attribute \"{key}\" must be a string, not {} — write {key} = {example}",
                describe(other)
            )),
        };
        if CRONJOB_ATTRIBUTES.contains(&key) && kind != WorkloadKind::Cronjob {
            return Err(format!(
                "attribute \"{key}\" belongs to a cronjob — a job runs when vd run asks; to run it on a schedule, declare cronjob \"scope\" \"name\" {{ schedule = \"*/15 * * * *\" ... }}"
            ));
        }
        match key {
            "timeout" => {
                let parsed = match &value {
                    Value::String(text) => humantime::parse_duration(text).ok(),
                    Value::Number(number) => number.as_u64().map(Duration::from_secs),
                    _ => None,
                };
                match parsed {
                    Some(duration) if !duration.is_zero() => self.job.timeout = Some(duration),
                    _ => {
                        return Err(format!(
                            "attribute \"timeout\" must be a duration above zero, not {} — write timeout = \"10m\"",
                            describe(&value)
                        ))
                    }
                }
            }
            "successful_history_limit" => self.job.successful_history_limit = Some(limit(&value)?),
            "failed_history_limit" => self.job.failed_history_limit = Some(limit(&value)?),
            "schedule" => {
                self.job.schedule_written = true;
                self.job.schedule = Some(text(&value, "\"*/15 * * * *\"")?.parse()?);
            }
            "timezone" => {
                self.job.timezone = Some(text(&value, "\"America/Sao_Paulo\"")?.parse()?);
            }
            "suspend" => match value {
                Value::Bool(suspend) => self.job.suspend = suspend,
                other => {
                    return Err(format!(
                    "attribute \"suspend\" must be true or false, not {} — write suspend = true",
                    describe(&other)
                ))
                }
            },
            "concurrency_policy" => {
                let written = text(&value, "\"Forbid\"")?;
                self.job.concurrency_policy = written.parse().map_err(|_| {
                    format!(
                        "attribute \"concurrency_policy\" is \"Allow\", \"Forbid\" or \"Replace\", not {written:?} — write concurrency_policy = \"Forbid\""
                    )
                })?;
            }
            other => return Err(format!("unknown attribute \"{other}\"")),
        }
        Ok(())
    }

    /// Takes one core block, its body already turned into JSON. The error
    /// carries where in the block the problem lies.
    pub fn block(
        &mut self,
        block_type: &str,
        labels: &[String],
        body: Value,
    ) -> Result<(), SpecProblem> {
        let kind = self.kind.unwrap_or(WorkloadKind::Deployment);
        // voodu's blocks are checked in voodu's shapes; those this voodu
        // acts on come back typed.
        let checked = check_block(kind, block_type, labels.first().map(String::as_str), &body)?;
        let labelled = LABELLED_CORE_BLOCKS.contains(&block_type);
        match (labelled, labels, checked) {
            (true, [_], Checked::Init(step)) => self.init.push(*step),
            (false, [], Checked::Release(release)) => self.release = Some(release),
            (false, [], Checked::OnDeploy(on_deploy)) => self.on_deploy = Some(on_deploy),
            (false, [], Checked::Build(build)) => self.build = Some(build),
            (labelled, labels, _) => self.store_block(block_type, labelled, labels, body)?,
        }
        Ok(())
    }

    /// Takes one core block that checking did not type.
    fn store_block(
        &mut self,
        block_type: &str,
        labelled: bool,
        labels: &[String],
        body: Value,
    ) -> Result<(), SpecProblem> {
        match (labelled, labels) {
            (true, [label]) if block_type == "volume_claim" => {
                self.shape
                    .volume_claims
                    .insert(label.clone(), parse_volume_claim(label, &body)?);
            }
            (true, [label]) => {
                let entry = self
                    .blocks
                    .entry(block_type.to_owned())
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Value::Object(by_label) = entry {
                    by_label.insert(label.clone(), body);
                }
            }
            (true, _) => {
                return Err(SpecProblem::at(&[block_type], format!(
                    "core block \"{block_type}\" takes exactly one label — write {block_type} \"name\" {{ ... }}"
                )))
            }
            (false, []) => match block_type {
                "resources" => {
                    let resources = Resources::from_block(&body)?;
                    resources.fits_this_host()?;
                    self.resources = resources;
                }
                "probes" => self.probes_body = Some(body),
                "logs" => self.shape.logs = Some(parse_logs(&body)?),
                _ => {
                    self.blocks.insert(block_type.to_owned(), body);
                }
            },
            (false, _) => {
                return Err(SpecProblem::at(&[block_type], format!(
                    "core block \"{block_type}\" takes no labels — write {block_type} {{ ... }}"
                )))
            }
        }
        Ok(())
    }

    /// The finished spec, or why it is incomplete.
    pub fn finish(self) -> Result<CoreSpec, SpecProblem> {
        let (spec, mut problems) = self.finish_partial();
        if problems.is_empty() {
            Ok(spec)
        } else {
            Err(problems.remove(0))
        }
    }

    /// The spec as far as it is valid (attributes that were refused keep
    /// their defaults), and why it is incomplete, if it is. Plugins validate
    /// their blocks against it, so that one apply reports every problem.
    pub fn finish_partial(self) -> (CoreSpec, Vec<SpecProblem>) {
        let mut problems = Vec::new();
        // A build names its image at apply, once it is built. With neither
        // image nor build, voodu builds the directory `vd apply` runs in.
        let build = match self.build {
            None if self.image.is_none() && !self.image_written => {
                Some(voodu_model::build::Build {
                    implied: true,
                    ..voodu_model::build::Build::default()
                })
            }
            build => build,
        };
        // Probes are stored with every default filled in, the port among
        // them, so `vd describe` shows what runs.
        let default_port = self.ports.first().map(|mapping| mapping.container_port);
        let probes = match self
            .probes_body
            .map(|body| parse_probes(&body, default_port))
        {
            None => Probes::default(),
            Some(Ok(probes)) => probes,
            Some(Err(problem)) => {
                problems.push(problem);
                Probes::default()
            }
        };
        if self.shape.network_mode.is_some() && self.networks_written {
            problems.push(SpecProblem::at(
                &["network_mode"],
                "network_mode \"host\" or \"none\" leaves no network to join, so networks and network cannot be set with it — keep one",
            ));
        }
        if self.blocks.contains_key("autoscale") && self.replicas.is_some() {
            problems.push(SpecProblem::at(
                &["autoscale"],
                "replicas and autoscale are both set — keep one: replicas = N, or autoscale { min max cpu_target }",
            ));
        }
        if self.image.is_some() && build.is_some() {
            problems.push(SpecProblem::at(
                &["build"],
                "image and build are both set — keep one: image = \"...\" runs an image, build { ... } builds one",
            ));
        }
        let kind = self.kind.unwrap_or(WorkloadKind::Deployment);
        let job = kind.runs_to_completion().then(|| JobSpec {
            timeout: self.job.timeout,
            successful_history_limit: self
                .job
                .successful_history_limit
                .unwrap_or(voodu_model::job::DEFAULT_SUCCESSFUL_HISTORY_LIMIT),
            failed_history_limit: self
                .job
                .failed_history_limit
                .unwrap_or(voodu_model::job::DEFAULT_FAILED_HISTORY_LIMIT),
            cron: None,
        });
        let job = match (kind, job) {
            (WorkloadKind::Cronjob, Some(job)) => match self.job.schedule.clone() {
                Some(schedule) => Some(JobSpec {
                    cron: Some(CronSpec {
                        schedule,
                        timezone: self.job.timezone.unwrap_or_default(),
                        suspend: self.job.suspend,
                        concurrency_policy: self.job.concurrency_policy,
                    }),
                    ..job
                }),
                None if self.job.schedule_written => Some(job),
                None => {
                    problems.push(SpecProblem::of_workload(
                        "a cronjob needs a schedule — write schedule = \"*/15 * * * *\" (minute hour day-of-month month day-of-week)".to_owned(),
                    ));
                    Some(job)
                }
            },
            (_, job) => job,
        };
        // `env` wins over `env_file`, as voodu documents.
        let mut env = self.env_from_files;
        env.extend(self.env);
        // As voodu does, a workload that autoscales starts at its floor (this
        // voodu does not scale it further yet).
        let autoscale_floor = self
            .blocks
            .get("autoscale")
            .and_then(|autoscale| autoscale.get("min"))
            .and_then(Value::as_u64)
            .and_then(|min| u32::try_from(min).ok());
        let spec = CoreSpec {
            image: self.image,
            // A job's runs are no replicas: it keeps none running.
            replicas: if job.is_some() {
                0
            } else {
                self.replicas.or(autoscale_floor).unwrap_or(1)
            },
            command: self.command,
            env,
            ports: self.ports,
            volumes: self.volumes,
            networks: self.networks,
            nodes: self.nodes,
            restart: self.restart,
            drain_timeout: self.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT),
            max_surge: self.max_surge,
            progress_deadline: self.progress_deadline,
            resources: self.resources,
            probes,
            env_from: self.env_from,
            init: self.init,
            on_deploy: self.on_deploy,
            job,
            build,
            release: self.release,
            keep_releases: self.keep_releases,
            shape: self.shape,
            blocks: self.blocks,
            // Recorded at apply, once the blocks are normalised.
            secrets: Vec::new(),
        };
        (spec, problems)
    }
}

/// The most revisions `keep_releases` may keep.
pub const MAX_KEEP_RELEASES: u32 = 1000;

/// Reads a `logs { max_size max_files }` block; a field not written
/// keeps voodu's default (10m × 3), and `max_files` of 0 or below too.
fn parse_logs(body: &Value) -> Result<Logs, SpecProblem> {
    let Value::Object(fields) = body else {
        return Err(SpecProblem::at(
            &["logs"],
            "logs must be a block — write logs { max_size = \"10m\" max_files = 3 }",
        ));
    };
    let mut logs = Logs::default();
    for (key, value) in fields {
        let at =
            |message: String| SpecProblem::at(&["logs", key.as_str()], format!("logs: {message}"));
        match key.as_str() {
            "max_size" => {
                let text = match value {
                    Value::String(text) => text.trim().to_owned(),
                    Value::Number(number) => number.to_string(),
                    _ => String::new(),
                };
                let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
                let (number, unit) = text.split_at(digits_end);
                let valid = number.parse::<u64>().is_ok_and(|size| size > 0)
                    && matches!(unit.to_ascii_lowercase().as_str(), "" | "k" | "m" | "g");
                if !valid {
                    return Err(at(format!(
                        "max_size must be a size in Docker's units (k, m, g), such as \"10m\", not {value} — write max_size = \"10m\""
                    )));
                }
                logs.max_size = text;
            }
            "max_files" => match value.as_i64() {
                Some(count) if count <= 0 => logs.max_files = Logs::default().max_files,
                Some(count) if count <= 1000 => logs.max_files = count as u32,
                _ => {
                    return Err(at(format!(
                        "max_files must be a whole number up to 1000, not {value} — write max_files = 3"
                    )))
                }
            },
            other => {
                return Err(at(format!(
                    "unknown attribute \"{other}\" — logs takes max_size and max_files"
                )))
            }
        }
    }
    Ok(logs)
}

/// Reads a statefulset's `volume_claim "name" { mount_path size }`.
fn parse_volume_claim(label: &str, body: &Value) -> Result<VolumeClaim, SpecProblem> {
    let path = ["volume_claim"];
    let valid_label = !label.is_empty()
        && label.len() <= 63
        && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_label {
        return Err(SpecProblem::at(&path, format!(
            "volume_claim {label:?}: a claim's name names Docker volumes — use lowercase letters, digits and dashes, such as \"data\""
        )));
    }
    let Value::Object(fields) = body else {
        return Err(SpecProblem::at(
            &path,
            format!("volume_claim {label:?} must be a block"),
        ));
    };
    let mut mount_path = None;
    let mut size = None;
    for (key, value) in fields {
        let at = |message: String| {
            SpecProblem::at(
                &["volume_claim", key.as_str()],
                format!("volume_claim {label:?}: {message}"),
            )
        };
        match (key.as_str(), value) {
            ("mount_path", Value::String(target)) if target.starts_with('/') => {
                mount_path = Some(target.clone())
            }
            ("mount_path", other) => {
                return Err(at(format!(
                    "mount_path must be an absolute path, not {other} — write mount_path = \"/var/lib/postgresql/data\""
                )))
            }
            ("size", Value::String(text)) => size = Some(text.clone()),
            ("size", other) => {
                return Err(at(format!("size must be a string such as \"10Gi\", not {other}")))
            }
            (other, _) => {
                return Err(at(format!(
                    "unknown attribute \"{other}\" — a volume_claim takes mount_path and size"
                )))
            }
        }
    }
    let mount_path = mount_path.ok_or_else(|| {
        SpecProblem::at(&path, format!(
            "volume_claim {label:?} has no mount_path — write mount_path = \"/var/lib/postgresql/data\""
        ))
    })?;
    Ok(VolumeClaim { mount_path, size })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_types_name_the_attribute_and_show_the_fix() {
        let mut builder = CoreSpecBuilder::default();
        assert_eq!(
            builder.attribute("replicas", json!("3")).unwrap_err(),
            "attribute \"replicas\" must be a whole number from 0 to 1000, not the string \"3\" — write replicas = 3"
        );
        assert_eq!(
            builder.attribute("ports", json!("8084")).unwrap_err(),
            "attribute \"ports\" must be a list of strings, not the string \"8084\" — write ports = [\"8084\"]"
        );
        assert!(builder.attribute("restart", json!("sometimes")).is_err());
        assert!(builder.attribute("drain_timeout", json!("soon")).is_err());
        assert_eq!(
            builder.attribute("progress_deadline", json!(5)).unwrap_err(),
            "attribute \"progress_deadline\" must be a duration above 0, not the number 5 — write progress_deadline = \"10m\""
        );
        builder
            .attribute("progress_deadline", json!("90s"))
            .unwrap();
    }

    #[test]
    fn max_surge_is_a_whole_number_from_one_to_a_hundred() {
        let mut builder = CoreSpecBuilder::default();
        for bad in [json!(0), json!(101), json!("2"), json!(-1)] {
            let message = builder.attribute("max_surge", bad.clone()).unwrap_err();
            assert!(
                message.starts_with("attribute \"max_surge\" must be a whole number from 1 to 100"),
                "{bad}: {message}"
            );
            assert!(message.contains("write max_surge = 2"), "{message}");
        }
        builder.attribute("image", json!("esl:1")).unwrap();
        assert_eq!(builder.finish().unwrap().surge(), DEFAULT_MAX_SURGE);
        let mut builder = CoreSpecBuilder::default();
        builder.attribute("image", json!("esl:1")).unwrap();
        builder.attribute("max_surge", json!(3)).unwrap();
        assert_eq!(builder.finish().unwrap().surge(), 3);
    }

    #[test]
    fn nodes_names_each_node_a_workload_may_run_on_once() {
        let mut builder = CoreSpecBuilder::default();
        let refused =
            |builder: &mut CoreSpecBuilder, value| builder.attribute("nodes", value).unwrap_err();
        assert!(
            refused(&mut builder, json!(["a", "a"])).contains("names node \"a\" twice"),
            "duplicate"
        );
        assert!(refused(&mut builder, json!([])).contains("is empty, so no node could run"));
        let bad = refused(&mut builder, json!(["web/1"]));
        assert!(
            bad.starts_with("attribute \"nodes\": \"web/1\" is not a node name"),
            "{bad}"
        );
        assert!(
            refused(&mut builder, json!("a")).contains("write nodes = [\"node-a\", \"node-b\"]")
        );
        builder.attribute("nodes", json!(["node-a", "b"])).unwrap();
        builder.attribute("image", json!("esl:1")).unwrap();
        let spec = builder.finish().unwrap();
        let names: Vec<&str> = spec.nodes.iter().map(|node| node.as_str()).collect();
        assert_eq!(names, ["node-a", "b"]);
        assert_eq!(
            serde_json::to_value(&spec).unwrap()["nodes"],
            json!(["node-a", "b"])
        );
    }

    #[test]
    fn unknown_attributes_suggest_the_nearest_core_attribute() {
        let message = CoreSpecBuilder::default()
            .attribute("replica", json!(3))
            .unwrap_err();
        assert!(
            message.starts_with("unknown attribute \"replica\" — did you mean \"replicas\"? "),
            "{message}"
        );
    }

    #[test]
    fn defaults_fill_replicas_and_the_drain_budget() {
        let mut builder = CoreSpecBuilder::default();
        builder.attribute("image", json!("esl:1")).unwrap();
        builder.attribute("ports", json!(["8084", 9090])).unwrap();
        builder.attribute("drain_timeout", json!(90)).unwrap();
        let spec = builder.finish().unwrap();
        assert_eq!(spec.replicas, 1);
        assert_eq!(spec.drain_timeout, Duration::from_secs(90));
        assert_eq!(
            serde_json::to_value(&spec).unwrap()["drain_timeout"],
            "1m 30s"
        );
        assert_eq!(spec.drain_budget(), Duration::from_secs(90));
        assert_eq!(spec.first_container_port(), Some(8084));
        assert_eq!(
            serde_json::to_value(&spec).unwrap()["ports"],
            json!(["8084", "9090"])
        );
    }

    #[test]
    fn a_workload_without_an_image_or_a_build_block_builds_where_vd_apply_runs() {
        let empty = CoreSpecBuilder::default().finish().unwrap();
        let implied = empty.build.expect("voodu's empty workload builds `.`");
        assert!(implied.implied, "{implied:?}");
        assert_eq!(implied.context, ".");
        let mut builder = CoreSpecBuilder::default();
        builder
            .block("build", &[], json!({"context": "."}))
            .unwrap();
        let spec = builder.finish().expect("a build names its image at apply");
        assert_eq!(spec.image, None);
        assert_eq!(spec.build.map(|build| build.context), Some(".".to_owned()));
    }

    #[test]
    fn init_steps_are_typed_in_declaration_order() {
        let mut builder = CoreSpecBuilder::default();
        builder.attribute("image", json!("pg:16")).unwrap();
        builder
            .block(
                "init",
                &["migrate".into()],
                json!({"command": ["migrate"], "retries": 2}),
            )
            .unwrap();
        builder
            .block(
                "init",
                &["seed".into()],
                json!({"command": ["seed"], "image": "tools:1"}),
            )
            .unwrap();
        assert!(builder.block("init", &[], json!({})).is_err());
        assert!(builder.block("probes", &["x".into()], json!({})).is_err());
        let spec = builder.finish().unwrap();
        let names: Vec<&str> = spec.init.iter().map(|step| step.name.as_str()).collect();
        assert_eq!(names, ["migrate", "seed"]);
        assert_eq!(spec.init[0].retries, 2);
        assert_eq!(
            spec.init[0].timeout,
            voodu_model::container::DEFAULT_INIT_TIMEOUT
        );
        assert_eq!(spec.init[1].image.as_deref(), Some("tools:1"));
        assert!(spec.blocks.is_empty());
    }

    #[test]
    fn near_misses_of_core_blocks_are_found() {
        assert_eq!(
            core_block_near(WorkloadKind::Deployment, "probs"),
            Some("probes")
        );
        assert_eq!(core_block_near(WorkloadKind::Deployment, "traffik"), None);
        assert_eq!(
            core_block_near(WorkloadKind::Statefulset, "volume_clam"),
            Some("volume_claim")
        );
    }

    #[test]
    fn a_job_takes_voodus_job_fields_and_refuses_what_serves() {
        let mut job = CoreSpecBuilder::for_workload(WorkloadKind::Job, "prod", BTreeMap::new());
        job.attribute("image", json!("api:1")).unwrap();
        job.attribute("timeout", json!("10m")).unwrap();
        job.attribute("failed_history_limit", json!(5)).unwrap();
        let replicas = job.attribute("replicas", json!(2)).unwrap_err();
        assert!(
            replicas.starts_with("attribute \"replicas\" does not apply to a job"),
            "{replicas}"
        );
        let schedule = job.attribute("schedule", json!("* * * * *")).unwrap_err();
        assert!(schedule.contains("belongs to a cronjob"), "{schedule}");
        let release = job
            .block("release", &[], json!({"command": ["true"]}))
            .unwrap_err();
        assert!(
            release.message.contains("release does not apply to a job"),
            "{release:?}"
        );
        let spec = job.finish().unwrap();
        assert_eq!(spec.replicas, 0);
        let settings = spec.job.expect("a job's settings");
        assert_eq!(settings.timeout, Some(Duration::from_secs(600)));
        assert_eq!(settings.successful_history_limit, 3);
        assert_eq!(settings.failed_history_limit, 5);
        assert!(settings.cron.is_none());

        let mut cron =
            CoreSpecBuilder::for_workload(WorkloadKind::Cronjob, "prod", BTreeMap::new());
        cron.attribute("image", json!("api:1")).unwrap();
        cron.attribute("schedule", json!("0 3 * * *")).unwrap();
        cron.attribute("timezone", json!("America/Sao_Paulo"))
            .unwrap();
        cron.attribute("concurrency_policy", json!("Forbid"))
            .unwrap();
        let wrong = cron
            .attribute("concurrency_policy", json!("Never"))
            .unwrap_err();
        assert!(
            wrong.contains("\"Allow\", \"Forbid\" or \"Replace\""),
            "{wrong}"
        );
        let schedule = cron.finish().unwrap().job.unwrap().cron.unwrap();
        assert_eq!(schedule.schedule.as_str(), "0 3 * * *");
        assert_eq!(schedule.timezone.to_string(), "America/Sao_Paulo");

        let unscheduled =
            CoreSpecBuilder::for_workload(WorkloadKind::Cronjob, "prod", BTreeMap::new());
        let (_, problems) = unscheduled.finish_partial();
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("a cronjob needs a schedule")),
            "{problems:?}"
        );

        let mut deployment =
            CoreSpecBuilder::for_workload(WorkloadKind::Deployment, "prod", BTreeMap::new());
        let timeout = deployment.attribute("timeout", json!("1m")).unwrap_err();
        assert!(timeout.contains("belongs to a job or cronjob"), "{timeout}");
    }
}
