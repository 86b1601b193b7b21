//! `vd history`: [`Request::History`], and its answer,
//! [`Response::History`](voodu_api::Response::History): one row per stored
//! revision, with what changed since the one before.

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

/// What changed between two revisions, by name: `image, env, probes,
/// plugin blocks` (the attributes of `voodu_model::changes`, which `vd
/// apply --dry-run` and `vd diff` show line by line).
fn revision_changes(before: &voodu_api::Revision, after: &voodu_api::Revision) -> String {
    let changes = voodu_model::changes::changes(
        (&before.core_spec, &before.blocks),
        (&after.core_spec, &after.blocks),
    );
    let named = voodu_model::changes::attributes(&changes);
    if named.is_empty() {
        "nothing".to_owned()
    } else {
        named.join(", ")
    }
}
