//! The report of `vd plugins:check`: one line per check of a plugin
//! against the plugin contract, as the conformance run writes them (one
//! JSON [`CheckStep`] per line, from a child process, so a plugin that
//! crashes ends the child, not `vd`) and as the CLI prints them.

use serde::{Deserialize, Serialize};

/// How one check ended.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::Display, strum::AsRefStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum CheckOutcome {
    /// The plugin did what the contract asks.
    Pass,
    /// Allowed, but likely to surprise an operator.
    Warn,
    /// A breach of the contract: an operator would meet it.
    Fail,
}

/// One check and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckLine {
    /// What was checked (`validate the empty block`).
    pub name: String,
    /// How it ended.
    pub outcome: CheckOutcome,
    /// What was seen: the reason of a failure or a warning.
    pub detail: String,
    /// The fix, for a failure or a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// One line of the conformance run as it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum CheckStep {
    /// A check starts (said first, so a crash inside it can be named).
    Starting {
        /// The check.
        name: String,
    },
    /// A check ended.
    Checked(CheckLine),
}

/// The whole report, as `vd plugins:check -o json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// The plugin file checked.
    pub file: String,
    /// Every check, in order.
    pub checks: Vec<CheckLine>,
    /// How many passed.
    pub passed: usize,
    /// How many warned.
    pub warnings: usize,
    /// How many failed.
    pub failed: usize,
}

impl CheckReport {
    /// The report of `checks` on `file`, counted.
    pub fn of(file: String, checks: Vec<CheckLine>) -> CheckReport {
        let count = |outcome| checks.iter().filter(|c| c.outcome == outcome).count();
        CheckReport {
            file,
            passed: count(CheckOutcome::Pass),
            warnings: count(CheckOutcome::Warn),
            failed: count(CheckOutcome::Fail),
            checks,
        }
    }
}
