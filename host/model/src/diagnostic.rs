//! One reportable problem with an apply: which workload, what is wrong and
//! how to fix it, and where it was written. Parsing, validation and the
//! controller all report through this type, so every error reads the same.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::workload::{Location, WorkloadId};

/// A problem found while applying manifests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The workload it concerns (`deployment/prod/esl`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
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
            workload: Some(workload.to_string()),
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
