//! Parsing the `probes` core block into [`voodu_model::probes::Probes`],
//! with every default filled in and every mistake named with its fix and
//! with where it lies (a [`SpecProblem`] path).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use voodu_model::diagnostic::SpecProblem;
use voodu_model::probes::{
    Check, Probe, Probes, Scheme, DEFAULT_FAILURE_THRESHOLD, DEFAULT_PERIOD,
    DEFAULT_SUCCESS_THRESHOLD, DEFAULT_TIMEOUT,
};

use crate::suggest::closest;

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

/// The probes a `probes` block holds.
const PROBE_KINDS: &str = "startup { ... }, readiness { ... } and liveness { ... }";

/// Reads a `probes` block's body (HCL's JSON mapping). `default_port` is
/// the workload's first container port. The error names the attribute,
/// the fix, and where it lies.
pub fn parse_probes(body: &Value, default_port: Option<u16>) -> Result<Probes, SpecProblem> {
    let at = At(vec!["probes".to_owned()]);
    let fields = object(body, &at)?;
    let mut probes = Probes::default();
    for (key, value) in fields {
        let slot = match key.as_str() {
            "startup" => &mut probes.startup,
            "readiness" => &mut probes.readiness,
            "liveness" => &mut probes.liveness,
            other => {
                let hint = closest(other, ["startup", "readiness", "liveness"].into_iter())
                    .map(|near| format!("did you mean \"{near}\"? "))
                    .unwrap_or_default();
                return Err(at.problem_in(
                    other,
                    format!("unknown block \"{other}\" — {hint}probes holds {PROBE_KINDS}"),
                ));
            }
        };
        *slot = Some(parse_probe(value, &at.within(key), default_port)?);
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

/// This project's earlier spellings, and voodu's for each.
const EARLIER_SPELLINGS: &[(&str, &str)] = &[
    ("http", "http_get { path = \"/ready\" port = 8080 }"),
    ("tcp", "tcp_socket { port = 8080 }"),
    ("interval", "period = \"10s\""),
];

/// The selectors a probe takes, one of.
const SELECTORS: &str = "http_get {}, tcp_socket {} or exec {}";

fn parse_probe(value: &Value, at: &At, default_port: Option<u16>) -> Result<Probe, SpecProblem> {
    let fields = object(value, at)?;
    let mut check = None;
    let mut probe = Probe {
        check: Check::TcpSocket { port: 0 },
        period: DEFAULT_PERIOD,
        timeout: DEFAULT_TIMEOUT,
        failure_threshold: DEFAULT_FAILURE_THRESHOLD,
        success_threshold: DEFAULT_SUCCESS_THRESHOLD,
        initial_delay: Duration::ZERO,
    };
    for (key, value) in fields {
        let problem = |message: String| at.problem_in(key, message);
        match key.as_str() {
            "http_get" | "tcp_socket" | "exec" => {
                if check.is_some() {
                    return Err(problem(format!(
                        "one selector per probe — keep one of {SELECTORS}"
                    )));
                }
                check = Some(parse_check(key, value, &at.within(key), default_port)?);
            }
            "period" => probe.period = duration(value, key, "10s").map_err(problem)?,
            "timeout" => probe.timeout = duration(value, key, "1s").map_err(problem)?,
            "initial_delay" => {
                probe.initial_delay = duration_or_zero(value, key).map_err(problem)?
            }
            "failure_threshold" => {
                probe.failure_threshold = threshold(value, key).map_err(problem)?
            }
            "success_threshold" => {
                probe.success_threshold = threshold(value, key).map_err(problem)?
            }
            other => {
                let hint = EARLIER_SPELLINGS
                    .iter()
                    .find(|(earlier, _)| *earlier == other)
                    .map(|(_, voodus)| format!("did you mean {voodus}? "))
                    .unwrap_or_default();
                return Err(problem(format!(
                    "unknown attribute \"{other}\" — {hint}a probe takes {SELECTORS}, and period, timeout, failure_threshold, success_threshold, initial_delay"
                )));
            }
        }
    }
    probe.check = check.ok_or_else(|| {
        at.problem(
            "no selector — add http_get { path = \"/ready\" }, tcp_socket {} or exec { command = [\"...\"] }",
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
        "http_get" => &["path", "port", "scheme", "http_headers", "status"],
        "tcp_socket" => &["port"],
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
                .ok_or_else(|| at.problem_in("port", format!("port must be a number from 1 to 65535, not {value} — write port = 8080"))),
            None => default_port.ok_or_else(|| {
                at.problem(format!("no port to check — the workload has no ports; write port = 8080 in the {kind} block"))
            }),
        }
    };
    match kind {
        "http_get" => {
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
            let scheme = match fields.get("scheme") {
                None => Scheme::Http,
                Some(Value::String(scheme)) => match scheme.parse::<Scheme>() {
                    Ok(Scheme::Http) => Scheme::Http,
                    Ok(Scheme::Https) => Scheme::Https,
                    Err(_) => {
                        return Err(at.problem_in(
                            "scheme",
                            format!("scheme must be \"http\" or \"https\", not {scheme:?} — write scheme = \"http\""),
                        ))
                    }
                },
                Some(other) => {
                    return Err(at.problem_in(
                        "scheme",
                        format!("scheme must be \"http\" or \"https\", not {other} — write scheme = \"http\""),
                    ))
                }
            };
            let http_headers = match fields.get("http_headers") {
                None => BTreeMap::new(),
                Some(Value::Object(headers)) => headers
                    .iter()
                    .map(|(name, value)| match value {
                        Value::String(text)
                            if http::HeaderName::from_bytes(name.as_bytes()).is_ok()
                                && http::HeaderValue::from_str(text).is_ok() =>
                        {
                            Ok((name.clone(), text.clone()))
                        }
                        other => Err(at.problem_in(
                            "http_headers",
                            format!("http_headers: {name:?} = {other} is not an HTTP header — names are letters, digits and dashes, values visible text; write http_headers = {{ \"X-Probe\" = \"voodu\" }}"),
                        )),
                    })
                    .collect::<Result<_, _>>()?,
                Some(other) => {
                    return Err(at.problem_in(
                        "http_headers",
                        format!("http_headers must be a map of header names to values, not {other} — write http_headers = {{ \"X-Probe\" = \"voodu\" }}"),
                    ))
                }
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
            Ok(Check::HttpGet {
                path,
                port: port()?,
                scheme,
                http_headers,
                status,
            })
        }
        "tcp_socket" => Ok(Check::TcpSocket { port: port()? }),
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

/// The shortest period or timeout a probe takes.
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
            format!("{key} must be a duration up to 1h, such as \"10s\" or \"1m30s\", not {value} — write {key} = \"10s\"")
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
    fn voodus_defaults_are_filled_in_and_the_port_defaults_to_the_workloads() {
        let probes = parse_probes(
            &json!({"readiness": {"http_get": {"path": "/ready"}, "failure_threshold": 1}}),
            Some(8084),
        )
        .unwrap();
        let readiness = probes.readiness.unwrap();
        assert_eq!(
            readiness.check,
            Check::HttpGet {
                path: "/ready".into(),
                port: 8084,
                scheme: Scheme::Http,
                http_headers: BTreeMap::new(),
                status: vec![]
            }
        );
        assert_eq!(readiness.period, Duration::from_secs(10));
        assert_eq!(readiness.timeout, Duration::from_secs(1));
        assert_eq!(readiness.failure_threshold, 1);
        assert_eq!(readiness.success_threshold, 1);
        assert_eq!(readiness.initial_delay, Duration::ZERO);
        assert!(probes.liveness.is_none() && probes.startup.is_none());
    }

    #[test]
    fn probes_round_trip_through_their_stored_form() {
        let probes = parse_probes(
            &json!({"liveness": {"exec": {"command": ["true"]}, "timeout": "2s"},
                    "readiness": {"tcp_socket": {"port": 5432}, "initial_delay": "1s"},
                    "startup": {"http_get": {"path": "/health", "port": 8080,
                        "http_headers": {"X-Probe": "voodu"}}, "period": "1m30s"}}),
            None,
        )
        .unwrap();
        let stored = serde_json::to_value(&probes).unwrap();
        assert_eq!(stored["readiness"]["tcp_socket"]["port"], 5432);
        assert_eq!(stored["readiness"]["initial_delay"], "1s");
        assert_eq!(stored["startup"]["period"], "1m 30s");
        assert_eq!(
            stored["startup"]["http_get"]["http_headers"]["X-Probe"],
            "voodu"
        );
        assert_eq!(serde_json::from_value::<Probes>(stored).unwrap(), probes);
    }

    #[test]
    fn mistakes_are_named_with_the_fix() {
        let error = |body: Value, port: Option<u16>| parse_probes(&body, port).unwrap_err().message;
        assert_eq!(
            error(json!({"readiness": {"http_get": {"path": "/"}}}), None),
            "probes.readiness.http_get: no port to check — the workload has no ports; write port = 8080 in the http_get block"
        );
        assert!(error(json!({"readiness": {"period": "2s"}}), Some(1)).contains("no selector"));
        assert!(error(
            json!({"readiness": {"http_get": {"path": "/"}, "tcp_socket": {}}}),
            Some(1)
        )
        .contains("one selector per probe"));
        assert!(error(
            json!({"readiness": {"tcp_socket": {}, "period": 5}}),
            Some(1)
        )
        .ends_with("write period = \"10s\""));
        assert!(error(
            json!({"readiness": {"tcp_socket": {}, "failure_threshold": 0}}),
            Some(1)
        )
        .contains("1 or more"));
        assert!(error(json!({"readyness": {}}), Some(1))
            .contains("unknown block \"readyness\" — did you mean \"readiness\"?"));
        assert!(error(
            json!({"readiness": {"tcp_socket": {}, "period": "1ns"}}),
            Some(1)
        )
        .contains("10ms or longer"));
        assert!(error(
            json!({"readiness": {"tcp_socket": {}, "initial_delay": "400d"}}),
            Some(1)
        )
        .contains("up to 1h"));
        assert!(error(json!({"readiness": [{}, {}]}), Some(1)).contains("not several"));
        assert!(
            error(json!({"liveness": {"http_get": {"path": "x"}}}), Some(1))
                .contains("starting with /")
        );
        assert!(error(
            json!({"liveness": {"http_get": {"path": "/", "http_headers": {"Bad Name": "x"}}}}),
            Some(1)
        )
        .contains("is not an HTTP header"));
    }

    #[test]
    fn this_projects_earlier_spellings_point_at_voodus() {
        let error = |body: Value| parse_probes(&body, Some(8084)).unwrap_err().message;
        assert_eq!(
            error(json!({"readiness": {"http": {"path": "/ready"}}})),
            "probes.readiness: unknown attribute \"http\" — did you mean http_get { path = \"/ready\" port = 8080 }? a probe takes http_get {}, tcp_socket {} or exec {}, and period, timeout, failure_threshold, success_threshold, initial_delay"
        );
        assert!(error(json!({"liveness": {"tcp": {}}}))
            .contains("did you mean tcp_socket { port = 8080 }?"));
        assert!(
            error(json!({"liveness": {"tcp_socket": {}, "interval": "2s"}}))
                .contains("did you mean period = \"10s\"?")
        );
    }

    #[test]
    fn each_problem_carries_where_it_lies() {
        let path = |body: Value| parse_probes(&body, None).unwrap_err().path;
        assert_eq!(
            path(json!({"readiness": {"http_get": {"path": "/", "port": 0}}})),
            ["probes", "readiness", "http_get", "port"]
        );
        assert_eq!(
            path(json!({"readiness": {"http_get": {"path": "/"}}})),
            ["probes", "readiness", "http_get"]
        );
        assert_eq!(
            path(json!({"liveness": {"tcp_socket": {"port": 1}, "period": 5}})),
            ["probes", "liveness", "period"]
        );
        assert_eq!(path(json!({"readyness": {}})), ["probes", "readyness"]);
    }

    #[test]
    fn status_codes_decide_what_passes() {
        let check = |status: Vec<u16>| Check::HttpGet {
            path: "/".into(),
            port: 1,
            scheme: Scheme::Http,
            http_headers: BTreeMap::new(),
            status,
        };
        let default = check(vec![]);
        assert!(default.passes_status(204) && default.passes_status(302));
        assert!(!default.passes_status(503));
        assert!(!check(vec![200]).passes_status(204));
    }
}
