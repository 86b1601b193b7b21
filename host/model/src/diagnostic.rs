//! One reportable problem with an apply: which workload, what is wrong and
//! how to fix it, and where it was written. Parsing, validation and the
//! controller all report through this type, so every error reads the same.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::workload::{Location, WorkloadId};

/// A problem found while applying manifests.
#[serde_with::serde_as]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The workload it concerns, when there is one; in JSON, as messages
    /// name it (`"deployment/prod/esl"`).
    #[serde_as(as = "Option<serde_with::DisplayFromStr>")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadId>,
    /// What is wrong and, where there is one, the fix.
    pub message: String,
    /// Where it was written, when that is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl Diagnostic {
    /// A problem with one workload.
    pub fn for_workload(
        workload: &WorkloadId,
        message: impl Into<String>,
        location: Option<Location>,
    ) -> Self {
        Diagnostic {
            workload: Some(workload.clone()),
            message: message.into(),
            location,
        }
    }

    /// A problem at a place in a file that belongs to no workload (a syntax
    /// error, a stray top-level block).
    pub fn at(location: Location, message: impl Into<String>) -> Self {
        Diagnostic {
            workload: None,
            message: message.into(),
            location: Some(location),
        }
    }

    /// A problem with neither a workload nor a place (an unreadable file).
    pub fn general(message: impl Into<String>) -> Self {
        Diagnostic {
            workload: None,
            message: message.into(),
            location: None,
        }
    }
}

/// A problem in a workload's core spec, and where in the workload's body it
/// lies, as data: the parser turns the path into a file and line, so no
/// location is ever recovered from a message's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SpecProblem {
    /// From the workload's body to what is wrong, outermost first: block
    /// types and attribute names, as written (`["probes", "readiness",
    /// "http", "port"]`). It may stop short of what is missing (a block
    /// with no `path` names the block). Empty for the workload as a whole.
    pub path: Vec<String>,
    /// What is wrong and the fix.
    pub message: String,
}

impl SpecProblem {
    /// A problem at `path` (see [`SpecProblem::path`]).
    pub fn at<S: AsRef<str>>(path: &[S], message: impl Into<String>) -> Self {
        SpecProblem {
            path: path.iter().map(|part| part.as_ref().to_owned()).collect(),
            message: message.into(),
        }
    }

    /// A problem with the workload as a whole (no image, say).
    pub fn of_workload(message: impl Into<String>) -> Self {
        SpecProblem {
            path: Vec::new(),
            message: message.into(),
        }
    }
}

/// The one-line form: `deployment/prod/esl: <message>`, or
/// `prod.hcl:3:5: <message>` when no workload is known.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.workload, &self.location) {
            (Some(workload), _) => write!(f, "{workload}: {}", self.message),
            (None, Some(location)) => write!(f, "{location}: {}", self.message),
            (None, None) => f.write_str(&self.message),
        }
    }
}
