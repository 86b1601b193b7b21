//! voodu's core blocks that this voodu stores but does not act on yet
//! (`build`, `autoscale`, `on_deploy`, `on_probe`, `release`, `init`,
//! `depends_on`), checked in voodu's shapes before they are stored: a
//! mistake is refused where it is written, as voodu refuses it, so that
//! the manifest applies unchanged to a voodu that acts on them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use voodu_model::build::Build;
use voodu_model::container::{InitStep, Release, Ulimit, DEFAULT_INIT_TIMEOUT};
use voodu_model::diagnostic::SpecProblem;
use voodu_model::lang::{Lang, LangName};
use voodu_model::on_deploy::{OnDeploy, Webhook};
use voodu_model::resources::Resources;
use voodu_plugin_abi::messages::WorkloadKind;

use crate::docker_options::parse_docker_options;

/// Where a problem lies: the block's path, for messages and locations.
struct At<'a> {
    path: Vec<&'a str>,
}

impl<'a> At<'a> {
    fn new(block: &'a str) -> Self {
        At { path: vec![block] }
    }

    fn problem(&self, key: Option<&'a str>, message: impl std::fmt::Display) -> SpecProblem {
        let mut path = self.path.clone();
        path.extend(key);
        SpecProblem::at(&path, format!("{}: {message}", self.path.join(".")))
    }

    fn within(&self, part: &'a str) -> At<'a> {
        let mut path = self.path.clone();
        path.push(part);
        At { path }
    }
}

/// The fields of a block body, or why it is not one.
fn fields<'v>(body: &'v Value, at: &At<'_>) -> Result<&'v Map<String, Value>, SpecProblem> {
    body.as_object()
        .ok_or_else(|| at.problem(None, "must be a block, written name { ... }"))
}

/// Refuses a key `allowed` does not hold.
fn only(fields: &Map<String, Value>, allowed: &[&str], at: &At<'_>) -> Result<(), SpecProblem> {
    match fields.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(unknown) => Err(SpecProblem::at(
            &[at.path.clone(), vec![unknown.as_str()]].concat(),
            format!(
                "{}: unknown attribute \"{unknown}\" — it takes {}",
                at.path.join("."),
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

fn string<'k>(
    fields: &Map<String, Value>,
    key: &'k str,
    at: &At<'k>,
) -> Result<Option<String>, SpecProblem> {
    match fields.get(key) {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(at.problem(Some(key), format!("{key} must be a string, not {other}"))),
    }
}

fn strings<'k>(
    fields: &Map<String, Value>,
    key: &'k str,
    at: &At<'k>,
    example: &str,
) -> Result<Option<Vec<String>>, SpecProblem> {
    match fields.get(key) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| {
                at.problem(
                    Some(key),
                    format!("{key} must be a list of strings — write {key} = {example}"),
                )
            }),
        Some(other) => Err(at.problem(
            Some(key),
            format!("{key} must be a list of strings, not {other} — write {key} = {example}"),
        )),
    }
}

fn string_map<'k>(
    fields: &Map<String, Value>,
    key: &'k str,
    at: &At<'k>,
) -> Result<(), SpecProblem> {
    match fields.get(key) {
        None => Ok(()),
        Some(Value::Object(map))
            if map.values().all(|value| value.is_string() || value.is_number() || value.is_boolean()) =>
        {
            Ok(())
        }
        Some(other) => Err(at.problem(Some(key), format!("{key} must be a map of strings, not {other} — write {key} = {{ NAME = \"value\" }}"))),
    }
}

fn duration<'k>(
    fields: &Map<String, Value>,
    key: &'k str,
    at: &At<'k>,
    example: &str,
) -> Result<Option<Duration>, SpecProblem> {
    match fields.get(key) {
        None => Ok(None),
        Some(value) => value
            .as_str()
            .and_then(|text| humantime::parse_duration(text).ok())
            .map(Some)
            .ok_or_else(|| at.problem(Some(key), format!("{key} must be a duration such as \"{example}\", not {value} — write {key} = \"{example}\""))),
    }
}

fn integer(fields: &Map<String, Value>, key: &str) -> Option<i64> {
    fields.get(key).and_then(Value::as_i64)
}

/// The blocks (or the one block) a repeatable block's JSON holds: HCL's
/// JSON mapping makes a block written twice a list.
fn each(body: &Value) -> Vec<&Value> {
    match body {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    }
}

/// What checking a block gave: a block this voodu acts on comes back
/// typed, read once; any other is stored as its JSON.
#[derive(Debug)]
pub enum Checked {
    /// Stored as written, and warned about as not acted on.
    Stored,
    /// An `init "name"` step.
    Init(Box<InitStep>),
    /// The `release` block.
    Release(Release),
    /// The `on_deploy` block.
    OnDeploy(OnDeploy),
    /// The `build` block.
    Build(Build),
}

/// Checks one of voodu's not-yet-acted-on core blocks in voodu's shape.
/// `labels` is an `init` block's name.
pub fn check_block(
    kind: WorkloadKind,
    block_type: &str,
    label: Option<&str>,
    body: &Value,
) -> Result<Checked, SpecProblem> {
    let deployments_only = |what: &str| {
        SpecProblem::at(
            &[block_type],
            format!("{block_type}: {what} — voodu takes {block_type} on deployments only"),
        )
    };
    let stored = |checked: Result<(), SpecProblem>| checked.map(|()| Checked::Stored);
    if kind.runs_to_completion() && voodu_model::job::BLOCKS_NOT_FOR_JOBS.contains(&block_type) {
        return Err(SpecProblem::at(
            &[block_type],
            format!(
                "{block_type} does not apply to a {kind}: a {kind} runs one container to its end each time it runs, serving nothing — remove it (voodu's {kind} takes build, depends_on, resources and logs)"
            ),
        ));
    }
    match block_type {
        "build" => read_build(body).map(Checked::Build),
        "autoscale" if kind == WorkloadKind::Statefulset => Err(deployments_only(
            "a statefulset's replica count is what its manifest says",
        )),
        "autoscale" => stored(check_autoscale(body)),
        "release" if kind == WorkloadKind::Statefulset => Err(deployments_only(
            "statefulsets run no release hooks; migrations are the workload's own concern",
        )),
        "release" => read_release(body).map(Checked::Release),
        "on_deploy" if kind == WorkloadKind::Statefulset => {
            Err(deployments_only("statefulsets send no deploy webhooks"))
        }
        "on_deploy" => read_on_deploy(body).map(Checked::OnDeploy),
        "on_probe" => stored(check_webhooks(body, "on_probe", &["failure", "recovery"])),
        "init" => {
            read_init(label.unwrap_or_default(), body).map(|step| Checked::Init(Box::new(step)))
        }
        "depends_on" => {
            let at = At::new("depends_on");
            let fields = fields(body, &at)?;
            only(fields, &["assets"], &at)?;
            strings(fields, "assets", &at, "[\"scope.name.key\"]")?;
            Ok(Checked::Stored)
        }
        _ => Ok(Checked::Stored),
    }
}

fn check_build(body: &Value) -> Result<(), SpecProblem> {
    let at = At::new("build");
    let fields = fields(body, &at)?;
    only(
        fields,
        &["context", "dockerfile", "path", "args", "lang"],
        &at,
    )?;
    for key in ["context", "dockerfile", "path"] {
        string(fields, key, &at)?;
    }
    string_map(fields, "args", &at)?;
    if let Some(lang) = fields.get("lang") {
        let at = at.within("lang");
        let lang = self::fields(lang, &at)?;
        only(lang, &["name", "version", "entrypoint"], &at)?;
        string(lang, "name", &at)?;
        string(lang, "version", &at)?;
        strings(lang, "entrypoint", &at, "[\"./api\"]")?;
    }
    Ok(())
}

/// `build`, checked in voodu's shape, typed. voodu's language handlers
/// (`lang`, and the `path` only they use) are not in this vd: refused with
/// the way forward, a Dockerfile in the context.
fn read_build(body: &Value) -> Result<Build, SpecProblem> {
    check_build(body)?;
    let at = At::new("build");
    let fields = fields(body, &at)?;
    let lang = match fields.get("lang") {
        None => None,
        Some(block) => {
            let at = at.within("lang");
            let lang = self::fields(block, &at)?;
            let name = match lang.get("name").and_then(Value::as_str) {
                None => None,
                Some(name) => Some(name.parse::<LangName>().map_err(|_| {
                    let known: Vec<&str> = LangName::ALL.iter().map(|lang| lang.as_str()).collect();
                    at.problem(
                        Some("name"),
                        format!(
                            "name {name:?} is no language voodu builds — write one of {}, or put a Dockerfile in the context",
                            known.join(", ")
                        ),
                    )
                })?),
            };
            Some(Lang {
                name,
                version: lang
                    .get("version")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                entrypoint: lang
                    .get("entrypoint")
                    .and_then(Value::as_array)
                    .map(|words| {
                        words
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        }
    };
    let text = |key: &str, default: &str| {
        fields
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_owned()
    };
    let args = match fields.get("args") {
        Some(Value::Object(args)) => args
            .iter()
            .map(|(key, value)| {
                let value = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned);
                (key.clone(), value)
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    Ok(Build {
        context: text("context", "."),
        dockerfile: text("dockerfile", "Dockerfile"),
        args,
        path: fields
            .get("path")
            .and_then(Value::as_str)
            .map(str::to_owned),
        lang,
        implied: false,
        handler: None,
        digest: None,
        kept_by: None,
    })
}

fn check_autoscale(body: &Value) -> Result<(), SpecProblem> {
    let at = At::new("autoscale");
    let fields = fields(body, &at)?;
    only(
        fields,
        &["min", "max", "cpu_target", "cooldown_up", "cooldown_down"],
        &at,
    )?;
    let min = integer(fields, "min");
    let max = integer(fields, "max");
    match min {
        Some(min) if min >= 1 => {}
        Some(_) => {
            return Err(at.problem(
                Some("min"),
                "min must be 1 or more (voodu does not scale to zero) — write min = 1",
            ))
        }
        None => return Err(at.problem(None, "min is required — write min = 2")),
    }
    match (min, max) {
        (Some(min), Some(max)) if max >= min => {}
        (_, Some(_)) => {
            return Err(at.problem(Some("max"), "max must be at least min — write max = 10"))
        }
        (_, None) => return Err(at.problem(None, "max is required — write max = 10")),
    }
    match fields.get("cpu_target").and_then(Value::as_f64) {
        Some(target) if target > 0.0 && target <= 100.0 => {}
        Some(_) => {
            return Err(at.problem(
                Some("cpu_target"),
                "cpu_target must be a percentage above 0 and at most 100 — write cpu_target = 60",
            ))
        }
        None => return Err(at.problem(None, "cpu_target is required — write cpu_target = 60")),
    }
    duration(fields, "cooldown_up", &at, "30s")?;
    duration(fields, "cooldown_down", &at, "5m")?;
    Ok(())
}

fn read_release(body: &Value) -> Result<Release, SpecProblem> {
    let at = At::new("release");
    let fields = fields(body, &at)?;
    only(
        fields,
        &["command", "pre_command", "post_command", "timeout"],
        &at,
    )?;
    let mut commands = [Vec::new(), Vec::new(), Vec::new()];
    for (key, read) in ["command", "pre_command", "post_command"]
        .into_iter()
        .zip(&mut commands)
    {
        if let Some(command) = strings(fields, key, &at, "[\"bin/rails\", \"db:migrate\"]")? {
            if command.is_empty() {
                return Err(at.problem(
                    Some(key),
                    format!("{key} is empty — give it a command, or leave it out"),
                ));
            }
            *read = command;
        }
    }
    let timeout = duration(fields, "timeout", &at, "10m")?.unwrap_or(DEFAULT_INIT_TIMEOUT);
    let [command, pre_command, post_command] = commands;
    Ok(Release {
        pre_command,
        command,
        post_command,
        timeout,
    })
}

fn check_webhooks(
    body: &Value,
    block: &'static str,
    slots: &[&'static str],
) -> Result<(), SpecProblem> {
    let at = At::new(block);
    let fields = fields(body, &at)?;
    only(fields, slots, &at)?;
    for slot in slots {
        let Some(targets) = fields.get(*slot) else {
            continue;
        };
        let at = at.within(slot);
        for target in each(targets) {
            let target = self::fields(target, &at)?;
            only(target, &["url", "method", "headers", "body", "file"], &at)?;
            match string(target, "url", &at)? {
                Some(url) if !url.trim().is_empty() => {}
                _ => {
                    return Err(at.problem(
                        Some("url"),
                        "url is required — write url = \"https://hooks.example.com/...\"",
                    ))
                }
            }
            if let Some(method) = string(target, "method", &at)? {
                if !["POST", "PUT", "PATCH", "DELETE"].contains(&method.as_str()) {
                    return Err(at.problem(
                        Some("method"),
                        format!("method must be POST, PUT, PATCH or DELETE, not {method:?}"),
                    ));
                }
            }
            string_map(target, "headers", &at)?;
            if target.contains_key("body") && target.contains_key("file") {
                return Err(at.problem(Some("file"), "body and file are both set — keep one"));
            }
            if let Some(file) = string(target, "file", &at)? {
                if !file.starts_with("${asset.") {
                    return Err(at.problem(Some("file"), format!("file must be an asset reference such as \"${{asset.prod.webhooks.pagerduty}}\", not {file:?}")));
                }
            }
        }
    }
    Ok(())
}

/// `on_deploy`, checked in voodu's shape, typed. A target's `file` names
/// a voodu asset, which this voodu does not keep: it is refused with the
/// inline form to write.
fn read_on_deploy(body: &Value) -> Result<OnDeploy, SpecProblem> {
    check_webhooks(body, "on_deploy", &["success", "failure"])?;
    let at = At::new("on_deploy");
    let mut on_deploy = OnDeploy::default();
    for (slot, targets) in [
        ("success", &mut on_deploy.success),
        ("failure", &mut on_deploy.failure),
    ] {
        let Some(written) = body.get(slot) else {
            continue;
        };
        let at = at.within(slot);
        for target in each(written) {
            if target.get("file").is_some() {
                return Err(at.problem(
                    Some("file"),
                    "file names a voodu asset, which this voodu does not keep — write the payload inline: body = { ... } ({{status}}, {{error}}, {{release_id}} and voodu's other fields are filled in)",
                ));
            }
            let mut without_headers = target.clone();
            if let Some(fields) = without_headers.as_object_mut() {
                fields.remove("headers");
            }
            let mut hook: Webhook = serde_json::from_value(without_headers)
                .map_err(|error| at.problem(None, format!("cannot be read: {error}")))?;
            // Numbers and booleans in headers are sent as text.
            if let Some(Value::Object(headers)) = target.get("headers") {
                hook.headers = headers
                    .iter()
                    .map(|(name, value)| {
                        let text = value
                            .as_str()
                            .map_or_else(|| value.to_string(), str::to_owned);
                        (name.clone(), text)
                    })
                    .collect();
            }
            targets.push(hook);
        }
    }
    Ok(on_deploy)
}

fn read_init(name: &str, body: &Value) -> Result<InitStep, SpecProblem> {
    let at = At::new("init");
    let valid_name = name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_name {
        return Err(at.problem(None, format!("init {name:?}: an init step's name is lowercase letters, digits and dashes, starting with a letter or digit — write init \"migrate\"")));
    }
    let fields = fields(body, &at)?;
    only(
        fields,
        &[
            "command",
            "image",
            "timeout",
            "retries",
            "resources",
            "ulimits",
            "docker_options",
        ],
        &at,
    )?;
    let command = match strings(fields, "command", &at, "[\"bin/rails\", \"db:migrate\"]")? {
        Some(command) if !command.is_empty() => command,
        _ => {
            return Err(at.problem(
                None,
                format!(
                "init {name:?} has no command — write command = [\"bin/rails\", \"db:migrate\"]"
            ),
            ))
        }
    };
    let image = string(fields, "image", &at)?;
    let timeout = duration(fields, "timeout", &at, "10m")?.unwrap_or(DEFAULT_INIT_TIMEOUT);
    let mut retries = 0;
    if let Some(written) = fields.get("retries") {
        match written.as_u64() {
            Some(count @ 0..=5) => retries = count as u32,
            _ => return Err(at.problem(Some("retries"), format!("retries must be 0 to 5, not {written} (more is a chronic-failure loop, as voodu says) — write retries = 1"))),
        }
    }
    let mut resources = Resources::default();
    if let Some(block) = fields.get("resources") {
        resources = Resources::from_block(block).map_err(|problem| {
            SpecProblem::at(
                &[
                    &["init"][..],
                    &problem.path.iter().map(String::as_str).collect::<Vec<_>>(),
                ]
                .concat(),
                format!("init {name:?}: {}", problem.message),
            )
        })?;
        resources.fits_this_host()?;
    }
    string_map(fields, "ulimits", &at)?;
    let ulimits = match fields.get("ulimits").and_then(Value::as_object) {
        Some(map) => Some(
            map.iter()
                .map(|(limit, value)| {
                    let text = match value {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    text.parse::<Ulimit>()
                        .map(|ulimit| (limit.clone(), ulimit))
                        .map_err(|error| {
                            SpecProblem::at(&["init", "ulimits"], format!("init {name:?}: {error}"))
                        })
                })
                .collect::<Result<BTreeMap<_, _>, _>>()?,
        ),
        None => None,
    };
    let docker_options = match strings(fields, "docker_options", &at, "[\"--shm-size=64m\"]")? {
        Some(options) => Some(
            parse_docker_options(&options)
                .map_err(|message| at.problem(Some("docker_options"), message))?,
        ),
        None => None,
    };
    Ok(InitStep {
        name: name.to_owned(),
        command,
        image,
        timeout,
        retries,
        resources,
        ulimits,
        docker_options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(kind: WorkloadKind, block: &str, body: Value) -> Result<Checked, String> {
        check_block(kind, block, Some("migrate"), &body).map_err(|problem| problem.message)
    }

    const DEPLOYMENT: WorkloadKind = WorkloadKind::Deployment;

    #[test]
    fn voodus_documented_shapes_pass() {
        check(DEPLOYMENT, "autoscale", json!({"min": 3, "max": 15, "cpu_target": 60, "cooldown_up": "30s", "cooldown_down": "5m"})).unwrap();
        let Checked::Build(build) = check(DEPLOYMENT, "build", json!({"context": "./app", "dockerfile": "Dockerfile.prod", "args": {"NODE_VERSION": "24-alpine", "N": 1}})).unwrap() else {
            panic!("build is read typed");
        };
        assert_eq!(
            (build.context.as_str(), build.dockerfile.as_str()),
            ("./app", "Dockerfile.prod")
        );
        assert_eq!(build.args["N"], "1");
        // voodu's language handlers: the handler, its version, what it
        // builds and runs.
        let Checked::Build(go) = check(DEPLOYMENT, "build", json!({"context": ".", "path": "cmd/api", "lang": {"name": "go", "version": "1.25", "entrypoint": ["./api"]}})).unwrap() else {
            panic!("build is read typed");
        };
        let lang = go.lang.expect("its lang block");
        assert_eq!(lang.name, Some(voodu_model::lang::LangName::Go));
        assert_eq!(
            (lang.version.as_deref(), lang.entrypoint.as_slice()),
            (Some("1.25"), &["./api".to_owned()][..])
        );
        assert_eq!(go.path.as_deref(), Some("cmd/api"));
        let java = check(DEPLOYMENT, "build", json!({"lang": {"name": "java"}})).unwrap_err();
        assert!(java.contains("name \"java\" is no language voodu builds — write one of go, nodejs, python, ruby, rails"), "{java}");
        check(DEPLOYMENT, "release", json!({"command": ["bin/rails", "db:migrate"], "pre_command": ["bin/preflight"], "post_command": ["bin/notify-deployed"], "timeout": "10m"})).unwrap();
        let Checked::OnDeploy(on_deploy) = check(DEPLOYMENT, "on_deploy", json!({"success": [{"url": "https://hooks.slack.com/x"}, {"url": "https://api.datadoghq.com/api/v1/events", "headers": {"DD-API-KEY": "k", "X-N": 1}}], "failure": {"url": "https://events.pagerduty.com/v2/enqueue", "method": "PUT", "body": {"summary": "{{name}} failed"}}})).unwrap() else {
            panic!("on_deploy is read typed");
        };
        assert_eq!(on_deploy.success.len(), 2);
        assert_eq!(on_deploy.success[1].headers["X-N"], "1");
        assert_eq!(
            on_deploy.failure[0].method,
            voodu_model::on_deploy::WebhookMethod::Put
        );
        // A voodu asset is refused with the inline form to write.
        let asset = check(DEPLOYMENT, "on_deploy", json!({"failure": {"url": "https://events.pagerduty.com/v2/enqueue", "file": "${asset.prod.webhooks.pagerduty}"}})).unwrap_err();
        assert!(
            asset.contains("write the payload inline: body = { ... }"),
            "{asset:?}"
        );
        check(DEPLOYMENT, "init", json!({"command": ["bin/warm-cache"], "timeout": "5m", "retries": 1, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}})).unwrap();
    }

    #[test]
    fn voodus_refusals_are_named_where_they_lie() {
        assert!(check(
            DEPLOYMENT,
            "autoscale",
            json!({"min": 0, "max": 30, "cpu_target": 80})
        )
        .unwrap_err()
        .contains("min must be 1 or more"));
        assert!(check(
            DEPLOYMENT,
            "autoscale",
            json!({"min": 3, "max": 2, "cpu_target": 80})
        )
        .unwrap_err()
        .contains("max must be at least min"));
        assert!(check(
            DEPLOYMENT,
            "autoscale",
            json!({"min": 1, "max": 2, "cpu_target": 120})
        )
        .unwrap_err()
        .contains("cpu_target"));
        assert!(check(WorkloadKind::Statefulset, "autoscale", json!({}))
            .unwrap_err()
            .contains("deployments only"));
        assert!(
            check(DEPLOYMENT, "on_deploy", json!({"success": {"url": ""}}))
                .unwrap_err()
                .contains("url is required")
        );
        assert!(check(
            DEPLOYMENT,
            "on_deploy",
            json!({"success": {"url": "u", "method": "GET"}})
        )
        .unwrap_err()
        .contains("POST, PUT, PATCH or DELETE"));
        assert!(check(
            DEPLOYMENT,
            "on_deploy",
            json!({"failure": {"url": "u", "body": {}, "file": "${asset.a.b}"}})
        )
        .unwrap_err()
        .contains("keep one"));
        assert!(check(
            DEPLOYMENT,
            "on_deploy",
            json!({"failure": {"url": "u", "file": "./x.json"}})
        )
        .unwrap_err()
        .contains("asset reference"));
        assert!(check(DEPLOYMENT, "init", json!({"command": []}))
            .unwrap_err()
            .contains("has no command"));
        assert!(
            check(DEPLOYMENT, "init", json!({"command": ["x"], "retries": 6}))
                .unwrap_err()
                .contains("retries must be 0 to 5")
        );
        assert!(check(
            DEPLOYMENT,
            "init",
            json!({"command": ["x"], "timeout": "soon"})
        )
        .unwrap_err()
        .contains("timeout must be a duration"));
        assert!(check_block(
            DEPLOYMENT,
            "init",
            Some("Migrate"),
            &json!({"command": ["x"]})
        )
        .unwrap_err()
        .message
        .contains("lowercase"));
        assert!(check(DEPLOYMENT, "build", json!({"dockerfil": "x"}))
            .unwrap_err()
            .contains("unknown attribute \"dockerfil\""));
        assert!(check(DEPLOYMENT, "release", json!({"command": []}))
            .unwrap_err()
            .contains("is empty"));
    }
}
