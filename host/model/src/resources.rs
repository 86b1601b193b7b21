//! The `resources` core block, as voodu documents it: the limits a
//! workload's containers run under, mapped to Docker's CPU quota and
//! memory limit (with no swap beyond it).
//!
//! ```hcl
//! resources {
//!   limits {
//!     cpu    = "500m"   # CPUs: "2", "1.5", or millicores "500m"
//!     memory = "512Mi"  # bytes: Ki Mi Gi Ti (1024s), K M G T (1000s), or none
//!     pids   = 200      # processes and threads (this voodu's addition)
//!   }
//!   requests { cpu = "250m" }   # stored, not acted on (as in voodu)
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
    /// The `requests` block: validated and stored, not acted on (voodu
    /// reserves it for a scheduler by capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<Requests>,
}

/// What a `requests` block asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requests {
    /// Memory, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<i64>,
    /// CPU, in billionths of a CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nano_cpus: Option<i64>,
}

/// The smallest memory limit Docker accepts.
const MIN_MEMORY_BYTES: i64 = 6 * 1024 * 1024;

/// What a `resources` block takes.
const TAKES: &str =
    "limits { cpu memory pids }, and requests { cpu memory } (stored, not acted on)";

impl Resources {
    /// Reads a `resources` block's body (HCL's JSON mapping). The error
    /// names the attribute and the fix.
    pub fn from_block(body: &Value) -> Result<Resources, SpecProblem> {
        let fields = block_fields(body, &["resources"])?;
        let mut resources = Resources::default();
        for (key, value) in fields {
            let at = |message: String| SpecProblem::at(&["resources", key.as_str()], message);
            match key.as_str() {
                "limits" => {
                    for (limit, value) in block_fields(value, &["resources", "limits"])? {
                        let at = |message: String| {
                            SpecProblem::at(
                                &["resources", "limits", limit.as_str()],
                                format!("resources.limits: {message}"),
                            )
                        };
                        match limit.as_str() {
                            "memory" => resources.memory_bytes = Some(memory(value).map_err(at)?),
                            "cpu" => resources.nano_cpus = Some(cpu(value).map_err(at)?),
                            "pids" => resources.pids = Some(pids(value).map_err(at)?),
                            "cpus" => {
                                return Err(at(
                                    "unknown attribute \"cpus\" — did you mean cpu = \"500m\"?"
                                        .to_owned(),
                                ))
                            }
                            other => {
                                return Err(at(format!(
                                    "unknown attribute \"{other}\" — limits takes cpu, memory, pids"
                                )))
                            }
                        }
                    }
                }
                "requests" => {
                    let mut requests = Requests::default();
                    for (request, value) in block_fields(value, &["resources", "requests"])? {
                        let at = |message: String| {
                            SpecProblem::at(
                                &["resources", "requests", request.as_str()],
                                format!("resources.requests: {message}"),
                            )
                        };
                        match request.as_str() {
                            "memory" => requests.memory_bytes = Some(memory(value).map_err(at)?),
                            "cpu" => requests.nano_cpus = Some(cpu(value).map_err(at)?),
                            other => {
                                return Err(at(format!(
                                    "unknown attribute \"{other}\" — requests takes cpu, memory"
                                )))
                            }
                        }
                    }
                    resources.requests = Some(requests);
                }
                flat @ ("memory" | "cpus" | "cpu" | "pids") => {
                    let example = match flat {
                        "memory" => "memory = \"512Mi\"",
                        "pids" => "pids = 200",
                        _ => "cpu = \"500m\"",
                    };
                    return Err(at(format!(
                        "resources block: {flat} is a limit — did you mean limits {{ {example} }}? resources takes {TAKES}"
                    )));
                }
                other => {
                    return Err(at(format!(
                        "resources block: unknown attribute \"{other}\" — resources takes {TAKES}"
                    )))
                }
            }
        }
        Ok(resources)
    }

    /// Reads a `resources` block as stores before schema 5 hold it: flat
    /// `memory` (Docker's units: b, k, m, g, powers of 1024), `cpus` and
    /// `pids`. Only the store's migration reads this form; manifests take
    /// voodu's (see [`Resources::from_block`]).
    pub fn from_schema_4_block(body: &Value) -> Result<Resources, String> {
        let fields = block_fields(body, &["resources"]).map_err(|problem| problem.message)?;
        let mut resources = Resources::default();
        for (key, value) in fields {
            let wrong = || format!("resources block: {key} = {value} does not read");
            match key.as_str() {
                "memory" => {
                    let bytes = match value {
                        Value::Number(number) => number.as_i64(),
                        Value::String(text) => docker_size(text),
                        _ => None,
                    };
                    resources.memory_bytes = Some(bytes.ok_or_else(wrong)?);
                }
                "cpus" => resources.nano_cpus = Some(cpu(value)?),
                "pids" => resources.pids = Some(pids(value)?),
                _ => return Err(wrong()),
            }
        }
        Ok(resources)
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.memory_bytes.is_some() || self.nano_cpus.is_some() || self.pids.is_some()
    }

    /// Refuses a `cpu` limit beyond this host's CPUs, which Docker would
    /// refuse at container create. Checked where a spec is applied, never
    /// where a stored one is read: a store moved to a smaller host still
    /// opens.
    pub fn fits_this_host(&self) -> Result<(), SpecProblem> {
        let host_cpus = std::thread::available_parallelism().map_or(1, |cpus| cpus.get());
        match self.nano_cpus {
            Some(nano_cpus) if nano_cpus > host_cpus as i64 * 1_000_000_000 => {
                Err(SpecProblem::at(
                    &["resources", "limits", "cpu"],
                    format!(
                        "resources.limits: cpu must be from 10m to this host's {host_cpus} CPUs, not {} — write cpu = \"500m\"",
                        nano_cpus as f64 / 1e9
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether no limit is set and nothing is requested (no `resources`
    /// block, or an empty one).
    pub fn is_unlimited(&self) -> bool {
        !self.any() && self.requests.is_none()
    }
}

/// A block's body as a map, or a problem at `path`.
fn block_fields<'a>(
    body: &'a Value,
    path: &[&str],
) -> Result<&'a serde_json::Map<String, Value>, SpecProblem> {
    match body {
        Value::Object(fields) => Ok(fields),
        _ => Err(SpecProblem::at(
            path,
            format!(
                "{} must be a block — write {} {{ ... }}",
                path.join("."),
                path.last().copied().unwrap_or_default()
            ),
        )),
    }
}

fn memory(value: &Value) -> Result<i64, String> {
    let wrong = || {
        format!(
            "memory must be a size such as \"512Mi\" or \"4Gi\" (Ki Mi Gi Ti are powers of 1024, K M G T powers of 1000, no suffix is bytes), not {value} — write memory = \"512Mi\""
        )
    };
    let bytes = match value {
        Value::Number(number) => number.as_i64().ok_or_else(wrong)?,
        Value::String(text) => parse_size(text).ok_or_else(wrong)?,
        _ => return Err(wrong()),
    };
    if bytes < MIN_MEMORY_BYTES {
        return Err(format!(
            "memory {value} is below the 6Mi Docker accepts — write memory = \"64Mi\" or more"
        ));
    }
    Ok(bytes)
}

/// A size as voodu writes one: a whole number of bytes with an optional
/// suffix, `Ki` `Mi` `Gi` `Ti` (powers of 1024) or `K` `M` `G` `T` (powers
/// of 1000; `k` too, as Kubernetes writes it).
fn parse_size(text: &str) -> Option<i64> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let number: i64 = number.parse().ok()?;
    let factor: i64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "K" | "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// A size in Docker's notation, as `docker run` reads one and as stores
/// before schema 5 hold it: a whole number of bytes with an optional unit
/// `b`, `k`, `m` or `g` (powers of 1024), case-insensitive, with an
/// optional trailing `b` (`64mb`).
pub fn docker_size(text: &str) -> Option<i64> {
    let lower = text.trim().to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (number, unit) = lower.split_at(digits_end);
    let number: i64 = number.parse().ok()?;
    let shift = match unit {
        "" | "b" => 0,
        "k" | "kb" => 10,
        "m" | "mb" => 20,
        "g" | "gb" => 30,
        _ => return None,
    };
    number.checked_mul(1_i64 << shift)
}

fn cpu(value: &Value) -> Result<i64, String> {
    let wrong = || {
        format!(
            "cpu must be a number of CPUs such as \"2\" or \"1.5\", or millicores such as \"500m\", not {value} — write cpu = \"500m\""
        )
    };
    let count = match value {
        Value::Number(number) => number.as_f64().ok_or_else(wrong)?,
        Value::String(text) => match text.trim().strip_suffix('m') {
            Some(millis) => millis.parse::<u64>().map_err(|_| wrong())? as f64 / 1000.0,
            None => text.trim().parse::<f64>().map_err(|_| wrong())?,
        },
        _ => return Err(wrong()),
    };
    // Docker refuses less than 0.01 (and more than the host has, which
    // `Resources::fits_this_host` checks where a spec is applied).
    if !(count.is_finite() && count >= 0.01 && count <= i64::MAX as f64 / 1e9) {
        return Err(format!(
            "cpu must be 10m (0.01 CPU) or more, not {value} — write cpu = \"500m\""
        ));
    }
    Ok((count * 1e9).round() as i64)
}

fn pids(value: &Value) -> Result<i64, String> {
    value.as_i64().filter(|pids| *pids >= 1).ok_or_else(|| {
        format!("pids must be a whole number of 1 or more, not {value} — write pids = 200")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn voodus_limits_map_to_dockers_units() {
        // voodu's resources page: cpu "2", "1.5", "500m"; memory "4Gi",
        // "512Mi", "1G", "1024".
        let limits = |body: Value| Resources::from_block(&json!({ "limits": body })).unwrap();
        let resources = limits(json!({"cpu": "500m", "memory": "512Mi", "pids": 100}));
        assert_eq!(resources.nano_cpus, Some(500_000_000));
        assert_eq!(resources.memory_bytes, Some(512 << 20));
        assert_eq!(resources.pids, Some(100));
        assert_eq!(limits(json!({"cpu": "2"})).nano_cpus, Some(2_000_000_000));
        assert_eq!(limits(json!({"cpu": "1.5"})).nano_cpus, Some(1_500_000_000));
        assert_eq!(limits(json!({"cpu": 1})).nano_cpus, Some(1_000_000_000));
        assert_eq!(parse_size("4Gi"), Some(4 << 30));
        assert_eq!(parse_size("1G"), Some(1_000_000_000));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("64m"), None);
        assert_eq!(parse_size("4 gigs"), None);
    }

    #[test]
    fn requests_are_validated_and_kept_apart_from_limits() {
        let resources =
            Resources::from_block(&json!({"requests": {"cpu": "250m", "memory": "256Mi"}}))
                .unwrap();
        assert!(!resources.any());
        assert!(!resources.is_unlimited());
        assert_eq!(
            resources.requests,
            Some(Requests {
                memory_bytes: Some(256 << 20),
                nano_cpus: Some(250_000_000)
            })
        );
        assert!(Resources::from_block(&json!({"requests": {"cpu": "lots"}})).is_err());
    }

    #[test]
    fn wrong_values_are_refused_with_the_fix() {
        let error = Resources::from_block(&json!({"limits": {"memory": "4 gigs"}})).unwrap_err();
        assert!(
            error.message.ends_with("write memory = \"512Mi\""),
            "{error}"
        );
        assert_eq!(error.path, ["resources", "limits", "memory"]);
        let error = Resources::from_block(&json!({"limits": {"memory": "1Ki"}}))
            .unwrap_err()
            .message;
        assert!(error.contains("below the 6Mi Docker accepts"), "{error}");
        assert!(Resources::from_block(&json!({"limits": {"cpu": 0}})).is_err());
        assert!(Resources::from_block(&json!({"limits": {"cpu": "two cpus"}})).is_err());
        assert!(Resources::from_block(&json!({"limits": {"cpu": "1m"}})).is_err());
        let too_many = Resources::from_block(&json!({"limits": {"cpu": 100_000}})).unwrap();
        let error = too_many.fits_this_host().unwrap_err();
        assert!(error.message.contains("to this host's"), "{error}");
        assert_eq!(error.path, ["resources", "limits", "cpu"]);
        assert!(Resources::from_block(&json!({"limits": {"pids": 0}})).is_err());
    }

    #[test]
    fn stores_before_schema_5_read_their_flat_form() {
        let resources =
            Resources::from_schema_4_block(&json!({"memory": "64m", "cpus": "1", "pids": 100}))
                .unwrap();
        assert_eq!(resources.memory_bytes, Some(64 << 20));
        assert_eq!(resources.nano_cpus, Some(1_000_000_000));
        assert_eq!(resources.pids, Some(100));
        assert_eq!(docker_size("512KB"), Some(512 << 10));
        assert!(Resources::from_schema_4_block(&json!({"limits": {}})).is_err());
    }

    #[test]
    fn the_earlier_flat_spelling_points_at_limits() {
        let error = Resources::from_block(&json!({"memory": "64m"})).unwrap_err();
        assert_eq!(error.path, ["resources", "memory"]);
        assert_eq!(
            error.message,
            "resources block: memory is a limit — did you mean limits { memory = \"512Mi\" }? resources takes limits { cpu memory pids }, and requests { cpu memory } (stored, not acted on)"
        );
        let error = Resources::from_block(&json!({"cpus": 0.5})).unwrap_err();
        assert!(error
            .message
            .contains("did you mean limits { cpu = \"500m\" }?"));
        let error = Resources::from_block(&json!({"limits": {"cpus": 1}})).unwrap_err();
        assert!(error.message.contains("did you mean cpu = \"500m\"?"));
    }
}
