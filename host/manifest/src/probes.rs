//! Parsing the `probes` core block into [`voodu_model::probes::Probes`],
//! with every default filled in and every mistake named with its fix and
//! with where it lies (a [`SpecProblem`] path).

use std::time::Duration;

use serde_json::{Map, Value};
use voodu_model::diagnostic::SpecProblem;
use voodu_model::probes::{
    Check, Probe, Probes, DEFAULT_FAILURE_THRESHOLD, DEFAULT_INTERVAL, DEFAULT_SUCCESS_THRESHOLD,
    DEFAULT_TIMEOUT,
};

/// Where in the `probes` block the parser is: `probes`, `probes.readiness`,
/// `probes.readiness.http`. Messages start with it, and problems carry it
/// as their path.
#[derive(Clone)]
struct At(Vec<String>);

impl At {
    fn within(&self, part: &str) -> At {
        let mut path = self.0.clone();
        path.push(part.to_owned());
        At(path)
    }

    /// A problem with the block itself.
    fn problem(&self, message: impl std::fmt::Display) -> SpecProblem {
        SpecProblem::at(&self.0, format!("{}: {message}", self.0.join(".")))
    }

    /// A problem with one of its attributes or blocks, `key`.
    fn problem_in(&self, key: &str, message: impl std::fmt::Display) -> SpecProblem {
        SpecProblem::at(
            &self.within(key).0,
            format!("{}: {message}", self.0.join(".")),
        )
    }
}

/// Reads a `probes` block's body (HCL's JSON mapping). `default_port` is
/// the workload's first container port. The error names the attribute,
/// the fix, and where it lies.
pub fn parse_probes(body: &Value, default_port: Option<u16>) -> Result<Probes, SpecProblem> {
    let at = At(vec!["probes".to_owned()]);
    let fields = object(body, &at)?;
    let mut probes = Probes::default();
    for (key, value) in fields {
        match key.as_str() {
            "readiness" => {
                probes.readiness = Some(parse_probe(value, &at.within(key), default_port)?)
            }
            "liveness" => {
                probes.liveness = Some(parse_probe(value, &at.within(key), default_port)?)
            }
            other => {
                return Err(at.problem_in(
                    other,
                    format!("unknown block \"{other}\" — probes holds readiness {{ ... }} and liveness {{ ... }}"),
                ))
            }
        }
    }
    Ok(probes)
}

fn object<'a>(value: &'a Value, at: &At) -> Result<&'a Map<String, Value>, SpecProblem> {
    match value {
        Value::Object(fields) => Ok(fields),
        Value::Array(_) => Err(at.problem(format!(
            "write one {} block, not several",
            at.0.last().map_or("", String::as_str)
        ))),
        other => Err(SpecProblem::at(
            &at.0,
            format!("{} must be a block, not {other}", at.0.join(".")),
        )),
    }
}

fn parse_probe(value: &Value, at: &At, default_port: Option<u16>) -> Result<Probe, SpecProblem> {
    let fields = object(value, at)?;
    let mut check = None;
    let mut probe = Probe {
        check: Check::Tcp { port: 0 },
        interval: DEFAULT_INTERVAL,
        timeout: DEFAULT_TIMEOUT,
        failure_threshold: DEFAULT_FAILURE_THRESHOLD,
        success_threshold: DEFAULT_SUCCESS_THRESHOLD,
        initial_delay: Duration::ZERO,
    };
    for (key, value) in fields {
        let problem = |message: String| at.problem_in(key, message);
        match key.as_str() {
            "http" | "tcp" | "exec" => {
                if check.is_some() {
                    return Err(problem(
                        "one check per probe — keep one of http {}, tcp {} and exec {}".into(),
                    ));
                }
                check = Some(parse_check(key, value, &at.within(key), default_port)?);
            }
            "interval" => probe.interval = duration(value, key, "2s").map_err(problem)?,
            "timeout" => probe.timeout = duration(value, key, "1s").map_err(problem)?,
            "initial_delay" => probe.initial_delay = duration_or_zero(value, key).map_err(problem)?,
            "failure_threshold" => probe.failure_threshold = threshold(value, key).map_err(problem)?,
            "success_threshold" => probe.success_threshold = threshold(value, key).map_err(problem)?,
            other => {
                return Err(problem(format!(
                    "unknown attribute \"{other}\" — a probe takes http {{}}, tcp {{}} or exec {{}}, and interval, timeout, failure_threshold, success_threshold, initial_delay"
                )))
            }
        }
    }
    probe.check = check.ok_or_else(|| {
        at.problem(
            "no check — add http { path = \"/ready\" }, tcp {} or exec { command = [\"...\"] }",
        )
    })?;
    Ok(probe)
}

fn parse_check(
    kind: &str,
    value: &Value,
    at: &At,
    default_port: Option<u16>,
) -> Result<Check, SpecProblem> {
    let fields = object(value, at)?;
    let allowed: &[&str] = match kind {
        "http" => &["path", "port", "status"],
        "tcp" => &["port"],
        _ => &["command"],
    };
    if let Some(unknown) = fields.keys().find(|key| !allowed.contains(&key.as_str())) {
        return Err(at.problem_in(
            unknown,
            format!(
                "unknown attribute \"{unknown}\" — it takes {}",
                allowed.join(", ")
            ),
        ));
    }
    let port = || -> Result<u16, SpecProblem> {
        match fields.get("port") {
            Some(value) => value
                .as_u64()
                .and_then(|port| u16::try_from(port).ok())
                .filter(|port| *port > 0)
                .ok_or_else(|| at.problem_in("port", format!("port must be a number from 1 to 65535, not {value} — write port = 8084"))),
            None => default_port.ok_or_else(|| {
                at.problem(format!("no port to check — the workload has no ports; write port = 8084 in the {kind} block"))
            }),
        }
    };
    match kind {
        "http" => {
            let path = match fields.get("path") {
                Some(Value::String(path)) if path.starts_with('/') => path.clone(),
                Some(other) => {
                    return Err(at.problem_in(
                        "path",
                        format!("path must be a string starting with /, not {other} — write path = \"/ready\""),
                    ))
                }
                None => return Err(at.problem("no path — write path = \"/ready\"")),
            };
            let status = match fields.get("status") {
                None => Vec::new(),
                Some(Value::Array(codes)) if !codes.is_empty() => codes
                    .iter()
                    .map(|code| {
                        code.as_u64()
                            .and_then(|code| u16::try_from(code).ok())
                            .filter(|code| (100..600).contains(code))
                            .ok_or_else(|| at.problem_in("status", format!("status must list HTTP codes from 100 to 599, not {code} — write status = [200]")))
                    })
                    .collect::<Result<_, _>>()?,
                Some(other) => {
                    return Err(at.problem_in(
                        "status",
                        format!("status must be a list of HTTP codes, not {other} — write status = [200, 204]"),
                    ))
                }
            };
            Ok(Check::Http {
                path,
                port: port()?,
                status,
            })
        }
        "tcp" => Ok(Check::Tcp { port: port()? }),
        _ => {
            let command: Option<Vec<String>> = fields.get("command").and_then(|command| {
                command.as_array().and_then(|parts| {
                    parts
                        .iter()
                        .map(|part| part.as_str().map(str::to_owned))
                        .collect()
                })
            });
            match command {
                Some(command) if !command.is_empty() => Ok(Check::Exec { command }),
                _ => Err(at.problem_in(
                    "command",
                    "command must be a non-empty list of strings — write command = [\"pg_isready\", \"-q\"]",
                )),
            }
        }
    }
}

/// The shortest interval or timeout a probe takes.
const MIN_PERIOD: Duration = Duration::from_millis(10);
/// The longest duration a probe setting takes.
const MAX_PERIOD: Duration = Duration::from_secs(3600);

fn duration(value: &Value, key: &str, example: &str) -> Result<Duration, String> {
    let parsed = duration_or_zero(value, key)?;
    if parsed < MIN_PERIOD {
        return Err(format!(
            "{key} must be 10ms or longer — write {key} = \"{example}\""
        ));
    }
    Ok(parsed)
}

fn duration_or_zero(value: &Value, key: &str) -> Result<Duration, String> {
    value
        .as_str()
        .and_then(|text| humantime::parse_duration(text).ok())
        .filter(|duration| *duration <= MAX_PERIOD)
        .ok_or_else(|| {
            format!("{key} must be a duration up to 1h, such as \"2s\" or \"500ms\", not {value} — write {key} = \"2s\"")
        })
}

fn threshold(value: &Value, key: &str) -> Result<u32, String> {
    value
        .as_u64()
        .and_then(|count| u32::try_from(count).ok())
        .filter(|count| *count >= 1)
        .ok_or_else(|| {
            format!("{key} must be a whole number of 1 or more, not {value} — write {key} = 3")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_filled_in_and_the_port_defaults_to_the_workloads() {
        let probes = parse_probes(
            &json!({"readiness": {"http": {"path": "/ready"}, "interval": "500ms", "failure_threshold": 1}}),
            Some(8084),
        )
        .unwrap();
        let readiness = probes.readiness.unwrap();
        assert_eq!(
            readiness.check,
            Check::Http {
                path: "/ready".into(),
                port: 8084,
                status: vec![]
            }
        );
        assert_eq!(readiness.interval, Duration::from_millis(500));
        assert_eq!(readiness.timeout, DEFAULT_TIMEOUT);
        assert_eq!(readiness.failure_threshold, 1);
        assert_eq!(readiness.success_threshold, 1);
        assert!(probes.liveness.is_none());
    }

    #[test]
    fn probes_round_trip_through_their_stored_form() {
        let probes = parse_probes(
            &json!({"liveness": {"exec": {"command": ["true"]}, "timeout": "2s"},
                    "readiness": {"tcp": {"port": 5432}, "initial_delay": "1s"}}),
            None,
        )
        .unwrap();
        let stored = serde_json::to_value(&probes).unwrap();
        assert_eq!(stored["readiness"]["tcp"]["port"], 5432);
        assert_eq!(stored["readiness"]["initial_delay"], "1s");
        assert_eq!(serde_json::from_value::<Probes>(stored).unwrap(), probes);
    }

    #[test]
    fn mistakes_are_named_with_the_fix() {
        let error = |body: Value, port: Option<u16>| parse_probes(&body, port).unwrap_err().message;
        assert_eq!(
            error(json!({"readiness": {"http": {"path": "/"}}}), None),
            "probes.readiness.http: no port to check — the workload has no ports; write port = 8084 in the http block"
        );
        assert!(error(json!({"readiness": {"interval": "2s"}}), Some(1)).contains("no check"));
        assert!(error(
            json!({"readiness": {"http": {"path": "/"}, "tcp": {}}}),
            Some(1)
        )
        .contains("one check per probe"));
        assert!(
            error(json!({"readiness": {"tcp": {}, "interval": 5}}), Some(1))
                .ends_with("write interval = \"2s\"")
        );
        assert!(error(
            json!({"readiness": {"tcp": {}, "failure_threshold": 0}}),
            Some(1)
        )
        .contains("1 or more"));
        assert!(error(json!({"readyness": {}}), Some(1)).contains("unknown block \"readyness\""));
        assert!(error(
            json!({"readiness": {"tcp": {}, "interval": "1ns"}}),
            Some(1)
        )
        .contains("10ms or longer"));
        assert!(error(
            json!({"readiness": {"tcp": {}, "initial_delay": "400d"}}),
            Some(1)
        )
        .contains("up to 1h"));
        assert!(error(json!({"readiness": [{}, {}]}), Some(1)).contains("not several"));
        assert!(error(json!({"liveness": {"http": {"path": "x"}}}), Some(1))
            .contains("starting with /"));
    }

    #[test]
    fn each_problem_carries_where_it_lies() {
        let path = |body: Value| parse_probes(&body, None).unwrap_err().path;
        assert_eq!(
            path(json!({"readiness": {"http": {"path": "/", "port": 0}}})),
            ["probes", "readiness", "http", "port"]
        );
        assert_eq!(
            path(json!({"readiness": {"http": {"path": "/"}}})),
            ["probes", "readiness", "http"]
        );
        assert_eq!(
            path(json!({"liveness": {"tcp": {"port": 1}, "interval": 5}})),
            ["probes", "liveness", "interval"]
        );
        assert_eq!(path(json!({"readyness": {}})), ["probes", "readyness"]);
    }

    #[test]
    fn status_codes_decide_what_passes() {
        let default = Check::Http {
            path: "/".into(),
            port: 1,
            status: vec![],
        };
        assert!(default.passes_status(204) && default.passes_status(302));
        assert!(!default.passes_status(503));
        let only_200 = Check::Http {
            path: "/".into(),
            port: 1,
            status: vec![200],
        };
        assert!(!only_200.passes_status(204));
    }
}
