//! The `resources` core block: the limits a workload's containers run
//! under. `memory`, `cpus` and `pids` map to Docker's memory limit (with no
//! swap beyond it), CPU quota and process-count limit.
//!
//! ```hcl
//! resources {
//!   memory = "256m"   # bytes, or with a unit: b, k, m, g (powers of 1024)
//!   cpus   = 0.5      # CPUs, as a number or a string
//!   pids   = 200      # processes and threads
//! }
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diagnostic::SpecProblem;

/// The limits of one workload's containers; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// The memory limit, in bytes. Swap is not allowed beyond it.
    pub memory_bytes: Option<i64>,
    /// The CPU limit, in billionths of a CPU (Docker's `NanoCpus`).
    pub nano_cpus: Option<i64>,
    /// The most processes and threads the container may run.
    pub pids: Option<i64>,
}

/// The smallest memory limit Docker accepts.
const MIN_MEMORY_BYTES: i64 = 6 * 1024 * 1024;

/// The keys a `resources` block takes.
const KEYS: &[&str] = &["memory", "cpus", "pids"];

impl Resources {
    /// Reads a `resources` block's body (HCL's JSON mapping). The error
    /// names the attribute and the fix.
    pub fn from_block(body: &Value) -> Result<Resources, SpecProblem> {
        let Value::Object(fields) = body else {
            return Err(SpecProblem::at(
                &["resources"],
                "the resources block must be a block body",
            ));
        };
        let mut resources = Resources::default();
        for (key, value) in fields {
            let at = |message: String| SpecProblem::at(&["resources", key.as_str()], message);
            match key.as_str() {
                "memory" => resources.memory_bytes = Some(memory(value).map_err(at)?),
                "cpus" => resources.nano_cpus = Some(cpus(value).map_err(at)?),
                "pids" => resources.pids = Some(pids(value).map_err(at)?),
                other => {
                    return Err(at(format!(
                        "resources block: unknown attribute \"{other}\" — it takes {}",
                        KEYS.join(", ")
                    )))
                }
            }
        }
        Ok(resources)
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.memory_bytes.is_some() || self.nano_cpus.is_some() || self.pids.is_some()
    }

    /// Refuses a `cpus` beyond this host's CPUs, which Docker would refuse
    /// at container create. Checked where a spec is applied, never where a
    /// stored one is read: a store moved to a smaller host still opens.
    pub fn fits_this_host(&self) -> Result<(), SpecProblem> {
        let host_cpus = std::thread::available_parallelism().map_or(1, |cpus| cpus.get());
        match self.nano_cpus {
            Some(nano_cpus) if nano_cpus > host_cpus as i64 * 1_000_000_000 => {
                Err(SpecProblem::at(
                    &["resources", "cpus"],
                    format!(
                        "resources block: cpus must be from 0.01 to this host's {host_cpus} CPUs, not {} — write cpus = 0.5",
                        nano_cpus as f64 / 1e9
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether no limit is set (no `resources` block, or an empty one).
    pub fn is_unlimited(&self) -> bool {
        !self.any()
    }
}

fn memory(value: &Value) -> Result<i64, String> {
    let wrong = || {
        format!(
            "resources block: memory must be a size such as \"256m\" or \"1g\" (units b, k, m, g), not {value} — write memory = \"256m\""
        )
    };
    let bytes = match value {
        Value::Number(number) => number.as_i64().ok_or_else(wrong)?,
        Value::String(text) => parse_size(text).ok_or_else(wrong)?,
        _ => return Err(wrong()),
    };
    if bytes < MIN_MEMORY_BYTES {
        return Err(format!(
            "resources block: memory {value} is below the 6m Docker accepts — write memory = \"64m\" or more"
        ));
    }
    Ok(bytes)
}

/// A size in Docker's notation: a whole number of bytes with an optional
/// unit `b`, `k`, `m` or `g` (powers of 1024), case-insensitive, with an
/// optional trailing `b` (`64mb`).
fn parse_size(text: &str) -> Option<i64> {
    let lower = text.trim().to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (number, unit) = lower.split_at(digits_end);
    let number: i64 = number.parse().ok()?;
    let shift = match unit.trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        _ if unit == "b" => 0,
        _ => return None,
    };
    number.checked_mul(1_i64 << shift)
}

fn cpus(value: &Value) -> Result<i64, String> {
    let wrong = || {
        format!(
            "resources block: cpus must be a number of CPUs above 0, such as 0.5 or 2, not {value} — write cpus = 0.5"
        )
    };
    let count = match value {
        Value::Number(number) => number.as_f64().ok_or_else(wrong)?,
        Value::String(text) => text.trim().parse::<f64>().map_err(|_| wrong())?,
        _ => return Err(wrong()),
    };
    // Docker refuses less than 0.01 (and more than the host has, which
    // `Resources::fits_this_host` checks where a spec is applied).
    if !(count.is_finite() && count >= 0.01 && count <= i64::MAX as f64 / 1e9) {
        return Err(format!(
            "resources block: cpus must be 0.01 or more, not {value} — write cpus = 0.5"
        ));
    }
    Ok((count * 1e9).round() as i64)
}

fn pids(value: &Value) -> Result<i64, String> {
    value
        .as_i64()
        .filter(|pids| *pids >= 1)
        .ok_or_else(|| {
            format!(
                "resources block: pids must be a whole number of 1 or more, not {value} — write pids = 200"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_map_to_dockers_units() {
        let resources =
            Resources::from_block(&json!({"memory": "64m", "cpus": 0.5, "pids": 100})).unwrap();
        assert_eq!(
            resources,
            Resources {
                memory_bytes: Some(64 * 1024 * 1024),
                nano_cpus: Some(500_000_000),
                pids: Some(100),
            }
        );
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("512KB"), Some(512 << 10));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12x"), None);
        assert_eq!(
            Resources::from_block(&json!({"cpus": "1"}))
                .unwrap()
                .nano_cpus,
            Some(1_000_000_000)
        );
    }

    #[test]
    fn wrong_values_are_refused_with_the_fix() {
        let error = Resources::from_block(&json!({"memory": "lots"})).unwrap_err();
        assert!(
            error.message.ends_with("write memory = \"256m\""),
            "{error}"
        );
        assert_eq!(error.path, ["resources", "memory"]);
        let error = Resources::from_block(&json!({"memory": "1k"}))
            .unwrap_err()
            .message;
        assert!(error.contains("below the 6m Docker accepts"), "{error}");
        assert!(Resources::from_block(&json!({"cpus": 0})).is_err());
        assert!(Resources::from_block(&json!({"cpus": 0.001})).is_err());
        let too_many = Resources::from_block(&json!({"cpus": 100_000})).unwrap();
        let error = too_many.fits_this_host().unwrap_err();
        assert!(error.message.contains("to this host's"), "{error}");
        assert_eq!(error.path, ["resources", "cpus"]);
        assert!(Resources::from_block(&json!({"cpus": 1}))
            .unwrap()
            .fits_this_host()
            .is_ok());
        assert!(Resources::from_block(&json!({"pids": 0})).is_err());
        let error = Resources::from_block(&json!({"memroy": "64m"})).unwrap_err();
        assert_eq!(error.path, ["resources", "memroy"]);
        let error = error.message;
        assert_eq!(
            error,
            "resources block: unknown attribute \"memroy\" — it takes memory, cpus, pids"
        );
    }
}
