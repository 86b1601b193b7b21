//! What the write verbs report: an apply's progress and outcome, a dry
//! run's plan, a delete.

use serde::{Deserialize, Serialize};
use voodu_model::{Diagnostic, WorkloadId};

/// How far an apply has got, reported as it goes.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum ApplyProgress {
    /// The manifests are parsed.
    Parsed {
        /// How many workloads they declare.
        workloads: usize,
        /// How many problems parsing found.
        problems: usize,
    },
    /// A workload's blocks are going to their plugins.
    Validating {
        /// `deployment/prod/esl`.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// How many plugin blocks it has.
        blocks: usize,
    },
    /// A workload's blocks have been validated.
    Validated {
        /// `deployment/prod/esl`.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// How many problems were found.
        problems: usize,
    },
    /// A step on the engine: a replica started, drained, removed.
    Runtime {
        /// `deployment/prod/esl`.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// What happened, one line.
        message: String,
    },
    /// The step in progress, for a spinner (not a finished step).
    Step {
        /// `deployment/prod/esl`.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// What is going on, one line.
        message: String,
    },
    /// Something did not go as asked, as it happened (a drain ran out of
    /// budget, a publish failed).
    Warning {
        /// `deployment/prod/esl`.
        #[serde_as(as = "serde_with::DisplayFromStr")]
        workload: WorkloadId,
        /// What happened, one line.
        message: String,
    },
}

/// What happened to one workload in a successful apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadOutcome {
    /// Stored for the first time.
    Created,
    /// Stored as a new revision.
    Updated,
    /// Identical to the stored revision; nothing was written.
    Unchanged,
}

/// One workload's line in the apply report.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedWorkload {
    /// `deployment/prod/esl`.
    #[serde_as(as = "serde_with::DisplayFromStr")]
    pub workload: WorkloadId,
    /// Created, updated or unchanged.
    pub outcome: WorkloadOutcome,
    /// Its revision now.
    pub revision: i64,
    /// Its plugin blocks, named as messages name them, in order.
    pub blocks: Vec<String>,
    /// For a rollback: the revision whose spec it applied again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_to: Option<i64>,
    /// For `vd restart`: its replicas are being replaced, its spec as it
    /// was.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restarted: bool,
}

/// What a successful apply did.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyReport {
    /// Every workload, in manifest order.
    pub workloads: Vec<AppliedWorkload>,
    /// Problems that did not stop the apply (a plugin that could not be
    /// told to forget a removed block, a drain that ran out of budget).
    pub warnings: Vec<Diagnostic>,
    /// Workloads that were stored but did not converge on Docker.
    #[serde(default)]
    pub errors: Vec<Diagnostic>,
    /// With `--skip-unsupported`, each top-level block of a kind this
    /// voodu does not run, left out, with what to write instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Diagnostic>,
    /// The newest event id before this apply stored anything: a wait that
    /// follows replays the steps recorded after it.
    #[serde(default)]
    pub since_event: i64,
    /// With `--prune`, the stored workloads it deleted: of a scope and kind
    /// the manifests declare, named by none of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[serde_as(as = "Vec<serde_with::DisplayFromStr>")]
    pub pruned: Vec<WorkloadId>,
}

impl ApplyReport {
    /// Whether nothing at all changed.
    pub fn unchanged(&self) -> bool {
        self.pruned.is_empty()
            && self
                .workloads
                .iter()
                .all(|workload| workload.outcome == WorkloadOutcome::Unchanged)
    }
}

/// What an apply would do to one workload.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedWorkload {
    /// `deployment/prod/esl`.
    #[serde_as(as = "serde_with::DisplayFromStr")]
    pub workload: WorkloadId,
    /// Whether it would be created, updated or left unchanged.
    pub outcome: WorkloadOutcome,
    /// For an update, what changes, one line each: `~ replicas: 3 → 2`,
    /// `+ echo "sip" block`, `- env.DEBUG: "1"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

/// What an apply would do, from `vd apply --dry-run`.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DryRunReport {
    /// Every workload, in manifest order.
    pub workloads: Vec<PlannedWorkload>,
    /// Warnings the apply would give (core blocks not acted on).
    pub warnings: Vec<Diagnostic>,
    /// With `--skip-unsupported`, the blocks it would leave out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Diagnostic>,
    /// With `--prune`, the stored workloads it would delete: of a scope and
    /// kind the manifests declare, named by none of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[serde_as(as = "Vec<serde_with::DisplayFromStr>")]
    pub pruned: Vec<WorkloadId>,
}

/// What deleting a workload did.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteReport {
    /// `deployment/prod/esl`.
    #[serde_as(as = "serde_with::DisplayFromStr")]
    pub workload: WorkloadId,
    /// The blocks whose plugins are told to forget them.
    pub forgotten: Vec<String>,
    /// Whether the controller is still draining and removing the replicas,
    /// after which the blocks are forgotten.
    #[serde(default)]
    pub pending: bool,
    /// Plugins that could not be told.
    pub warnings: Vec<Diagnostic>,
    /// What kept the delete from finishing (its replicas did not all go):
    /// any makes `vd delete` exit 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<Diagnostic>,
    /// The newest event id before the delete: a wait that follows replays
    /// the steps recorded after it.
    #[serde(default)]
    pub since_event: i64,
}

/// What `vd config set` or `vd config unset` did.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigChange {
    /// The bucket.
    pub bucket: voodu_model::config::BucketName,
    /// The variables set, by name (never their values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<String>,
    /// The variables removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unset: Vec<String>,
    /// The workloads that take the bucket, whose replicas roll (or, with
    /// `kept`, keep running as they are).
    #[serde_as(as = "Vec<serde_with::DisplayFromStr>")]
    pub rolling: Vec<WorkloadId>,
    /// `--no-restart`: those workloads' replicas keep the env they run
    /// with until their next `vd restart` or an apply that changes them;
    /// replicas made meanwhile take the new one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
}

/// What `vd config get` or `vd config list` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigListing {
    /// The bucket shown; `None` when every bucket's name is listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<voodu_model::config::BucketName>,
    /// Every bucket's name, when no bucket was named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<voodu_model::config::BucketName>,
    /// The bucket's variables, in name order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<ConfigVariable>,
}

/// One variable of a bucket, as `vd config` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigVariable {
    /// Its name.
    pub key: String,
    /// Its value; `None` for a secret not asked to be revealed.
    pub value: Option<String>,
    /// Whether it is a secret.
    pub secret: bool,
}
