//! `vd history`: [`Request::History`], and its answer,
//! [`Response::History`](voodu_api::Response::History): one row per stored
//! revision, with what changed since the one before.

use serde_json::Value;

use voodu_api::{Request, WorkloadId};

use super::Call;
use crate::render::table;
use crate::OutputArg;

/// `vd history`'s arguments.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// KIND/SCOPE/NAME, for example deployment/prod/esl.
    workload: WorkloadId,
    #[command(flatten)]
    output: OutputArg,
}

impl HistoryArgs {
    /// [`Request::History`].
    pub fn call(self) -> Call {
        Call::new(
            Request::History {
                workload: self.workload,
            },
            self.output.output,
        )
    }
}

/// `vd history`: one row per revision, aligned, with what changed since
/// the revision before it.
pub fn history_table(current: i64, revisions: &[voodu_api::Revision]) {
    let mut rows = Vec::new();
    for (index, revision) in revisions.iter().enumerate() {
        let blocks: Vec<String> = revision
            .blocks
            .iter()
            .map(voodu_model::NormalisedBlock::display_name)
            .collect();
        let mut changes = match index.checked_sub(1).map(|before| &revisions[before]) {
            None => "first applied".to_owned(),
            Some(before) => revision_changes(before, revision),
        };
        if revision.recreated {
            changes = format!("applied again after a delete; {changes}");
        }
        if let Some(same) = revisions[..index]
            .iter()
            .rev()
            .find(|earlier| earlier.spec_hash == revision.spec_hash)
        {
            changes = format!("{changes} (the spec of revision {})", same.revision);
        }
        rows.push(vec![
            if revision.revision == current {
                format!("{} (current)", revision.revision)
            } else {
                revision.revision.to_string()
            },
            revision.applied_at.clone(),
            revision
                .core_spec
                .image
                .as_deref()
                .unwrap_or("-")
                .to_owned(),
            revision.core_spec.replicas.to_string(),
            if blocks.is_empty() {
                "-".to_owned()
            } else {
                blocks.join(", ")
            },
            changes,
        ]);
    }
    table(
        &[
            "REVISION", "APPLIED", "IMAGE", "REPLICAS", "BLOCKS", "CHANGED",
        ],
        &rows,
    );
}

/// What changed between two revisions, by name: `image, env, probes`.
fn revision_changes(before: &voodu_api::Revision, after: &voodu_api::Revision) -> String {
    let empty = serde_json::Map::new();
    let core = |revision: &voodu_api::Revision| -> serde_json::Map<String, Value> {
        let as_json = serde_json::to_value(&revision.core_spec).unwrap_or_default();
        let mut flat = as_json.as_object().unwrap_or(&empty).clone();
        // voodu's own blocks (probes, resources, ...) are named one by one.
        if let Some(Value::Object(blocks)) = flat.remove("blocks") {
            flat.extend(blocks);
        }
        flat
    };
    let (old, new) = (core(before), core(after));
    let mut changed: Vec<&str> = Vec::new();
    for (key, value) in &new {
        if old.get(key) != Some(value) {
            changed.push(key);
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) {
            changed.push(key);
        }
    }
    if before.blocks != after.blocks {
        changed.push("plugin blocks");
    }
    if changed.is_empty() {
        "nothing".to_owned()
    } else {
        changed.join(", ")
    }
}
