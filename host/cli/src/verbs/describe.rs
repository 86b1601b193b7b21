//! `vd describe`: [`Request::Describe`], and its answer,
//! [`Response::Described`](voodu_api::Response::Described): core spec,
//! plugin blocks in order, rollout, replicas, published endpoints and
//! recent events.

use anstream::println;
use anstyle::Style;
use serde_json::Value;

use voodu_api::{Description, Request, WorkloadId};

use super::Call;
use crate::render::{ERROR, GOOD, HEADING, WARNING};
use crate::{fail, OutputArg, EXIT_USAGE};
use std::process::ExitCode;

/// `vd describe`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl; or, as voodu
    /// writes it, KIND then SCOPE/NAME: `vd describe deployment prod/esl`.
    #[arg(value_name = "KIND/SCOPE/NAME | KIND")]
    target: String,
    /// SCOPE/NAME, when the kind came first.
    #[arg(value_name = "SCOPE/NAME")]
    scope_name: Option<String>,
    /// How many recent events to show.
    #[arg(long, default_value_t = 20)]
    events: usize,
    /// Also list the env its replicas take: the manifest's env with its
    /// config buckets laid over it as they are now, each variable with
    /// where it comes from (a secret's value is never shown; replicas a
    /// `config --no-restart` change keeps run the env they had).
    #[arg(long)]
    show_env: bool,
    #[command(flatten)]
    output: OutputArg,
}

/// The workload `vd describe` names, in either form.
fn described_workload(target: &str, scope_name: Option<&str>) -> Result<WorkloadId, String> {
    let written = match scope_name {
        Some(scope_name) => format!("{target}/{scope_name}"),
        None => target.to_owned(),
    };
    written
        .parse()
        .map_err(|error: voodu_model::WorkloadIdError| {
            format!("{error} (or as voodu writes it: vd describe deployment prod/esl)")
        })
}

impl DescribeArgs {
    /// [`Request::Describe`].
    pub fn call(self) -> Result<Call, ExitCode> {
        let workload = described_workload(&self.target, self.scope_name.as_deref())
            .map_err(|message| fail(format!("vd describe: {message}"), EXIT_USAGE))?;
        Ok(Call::new(
            Request::Describe {
                workload,
                events: self.events,
                show_env: self.show_env,
            },
            self.output.output,
        ))
    }
}

fn compact(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// Prints one workload, section by section.
pub fn described(description: &Description) {
    let workload = &description.workload;
    println!("{HEADING}{}{HEADING:#}", workload.id);
    println!("  revision   {}", workload.revision);
    println!(
        "  applied    {} (first applied {})",
        workload.updated_at, workload.created_at
    );
    if let Some(source) = &workload.source {
        println!("  source     {source}");
    }
    println!("{HEADING}core spec{HEADING:#}");
    if let Ok(Value::Object(core)) = serde_json::to_value(&workload.core_spec) {
        let width = core.keys().map(String::len).max().unwrap_or(0);
        for (key, value) in &core {
            let shown = match key.as_str() {
                "resources" => limits(&workload.core_spec.resources),
                "secrets" => secret_places(workload),
                _ => compact(value),
            };
            println!("  {key:width$}  {shown}");
        }
    }
    for warning in &description.not_acted_on {
        println!("  {WARNING}warning{WARNING:#}: {warning}");
    }
    if let Some(env) = &description.env {
        println!(
            "{HEADING}env{HEADING:#} ({}, as new replicas take it)",
            env.len()
        );
        for variable in env {
            let from = variable
                .from
                .as_ref()
                .map(|bucket| format!("  (from {bucket})"))
                .unwrap_or_default();
            match &variable.value {
                Some(value) => println!("  {}={value}{from}", variable.key),
                None => println!("  {}=(secret){from}", variable.key),
            }
        }
    }
    println!("{HEADING}plugin blocks{HEADING:#} (in order)");
    if workload.blocks.is_empty() {
        println!("  none");
    }
    for (index, block) in workload.blocks.iter().enumerate() {
        println!("  {}. {}", index + 1, block.display_name());
        println!("       spec       {}", block.spec);
        println!(
            "       endpoints  {}",
            serde_json::to_value(block.endpoints).unwrap_or_default()
        );
    }
    if let Some(status) = &description.status {
        println!("{HEADING}rollout{HEADING:#}");
        let step = match (&status.step, status.step_ms) {
            (Some(step), Some(ms)) => format!(
                ": {step} ({})",
                humantime::format_duration(std::time::Duration::from_millis(ms - ms % 1000))
            ),
            _ => String::new(),
        };
        let style = match status.phase {
            voodu_api::Phase::Failed | voodu_api::Phase::CrashLooping => ERROR,
            _ => GOOD,
        };
        println!(
            "  status     {style}{}{style:#} (revision {}){step}",
            status.phase.as_str(),
            status.revision
        );
        if let Some(error) = &status.error {
            println!("  error      {error}");
        }
        for crash in &status.crashes {
            println!(
                "  crashes    replica {}: {} death(s) in a row{}{}{}",
                crash.replica_id,
                crash.deaths,
                crash
                    .last_exit_code
                    .map(|code| format!(", last exit code {code}"))
                    .unwrap_or_default(),
                if crash.oom_killed { ", OOM-killed" } else { "" },
                if crash.crash_looping {
                    " — crash-looping"
                } else {
                    ""
                }
            );
        }
    }
    println!("{HEADING}replicas{HEADING:#}");
    for waiting in &description.waiting {
        println!("  {WARNING}waiting{WARNING:#}: {waiting}");
    }
    if description.replicas.is_empty() {
        println!("  none");
    } else {
        super::get::replica_table(&description.replicas, false);
        for replica in &description.replicas {
            if let Some(failure) = &replica.last_probe_failure {
                println!("  {} not ready: {failure}", replica.replica_id);
            }
        }
    }
    println!("{HEADING}published endpoints{HEADING:#} (last set per block)");
    if description.publications.is_empty() {
        println!("  none yet");
    }
    for publication in &description.publications {
        let endpoints: Vec<String> = publication
            .endpoints
            .iter()
            .map(|endpoint| format!("{}={}", endpoint.replica_id, endpoint.address))
            .collect();
        let latency = publication
            .latency_ms
            .map(|ms| format!(" (published {ms:.1} ms after the change)"))
            .unwrap_or_default();
        println!(
            "  {}  generation {}  [{}]  at {}{latency}",
            voodu_model::block_display_name(&publication.block_type, &publication.labels),
            publication.generation,
            endpoints.join(", "),
            publication.at
        );
        if let Some(drain) = &publication.last_drain {
            println!(
                "    last drain: replica {} {} in {} ms, at {}",
                drain.replica_id,
                match drain.outcome {
                    voodu_api::DrainOutcomeKind::Drained => "drained",
                    voodu_api::DrainOutcomeKind::BudgetExhausted => "ran out of its budget",
                    voodu_api::DrainOutcomeKind::Failed => "failed to drain",
                },
                drain.took_ms,
                drain.at
            );
        }
    }
    println!("{HEADING}events{HEADING:#} (oldest first)");
    for event in &description.events {
        let style = match event.level {
            voodu_api::EventLevel::Info => Style::new(),
            voodu_api::EventLevel::Warning => WARNING,
            voodu_api::EventLevel::Error => ERROR,
        };
        println!(
            "  {}  {style}{:<14}{style:#} {}{}",
            event.at,
            event.reason,
            super::events::on_node(event.node.as_deref()),
            event.message
        );
    }
}

/// A `resources` block's limits as an operator reads them:
/// `memory 64 MiB, cpus 0.5, pids 100`.
fn limits(resources: &voodu_model::resources::Resources) -> String {
    let mut parts = Vec::new();
    if let Some(bytes) = resources.memory_bytes {
        parts.push(format!(
            "memory {}",
            indicatif::HumanBytes(u64::try_from(bytes).unwrap_or(0))
        ));
    }
    if let Some(nano_cpus) = resources.nano_cpus {
        parts.push(format!("cpus {}", nano_cpus as f64 / 1e9));
    }
    if let Some(pids) = resources.pids {
        parts.push(format!("pids {pids}"));
    }
    parts.join(", ")
}

/// Where secrets reached the spec, one per variable and attribute:
/// `DB_PASSWORD from prod/api in env.DATABASE_URL`.
fn secret_places(workload: &voodu_api::StoredWorkload) -> String {
    let mut shown: Vec<String> = workload
        .core_spec
        .secrets
        .iter()
        .map(|place| {
            format!(
                "{} from {} in {}",
                place.variable,
                place.bucket,
                place.attribute(&workload.blocks)
            )
        })
        .collect();
    shown.dedup();
    shown.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_is_named_whole_or_as_voodu_writes_it_kind_first() {
        let esl: WorkloadId = "deployment/prod/esl".parse().unwrap();
        assert_eq!(
            described_workload("deployment/prod/esl", None),
            Ok(esl.clone())
        );
        assert_eq!(described_workload("deployment", Some("prod/esl")), Ok(esl));
        assert_eq!(
            described_workload("statefulsets", Some("data/pg")).map(|id| id.to_string()),
            Ok("statefulset/data/pg".to_owned())
        );
        let refused = described_workload("deployment", Some("esl")).unwrap_err();
        assert!(
            refused.contains("vd describe deployment prod/esl"),
            "{refused}"
        );
    }
}
