//! `vd plugins:check`: a conformance run of one plugin file against the
//! plugin contract, with no controller and no Docker. It loads the file as
//! `plugins:install` does, then drives every call through the real
//! host-side handle and checks each reply: validate (of the blocks given,
//! or the empty block), that normalising is stable, that numbers survive,
//! publish with empty, one-endpoint and 1,000-endpoint sets and with the
//! fields a newer host sends, drain until drained, forget twice, calls
//! from several threads, and a request at the size limit. Each check is
//! reported as it starts and as it ends ([`CheckStep`]), so a run in a
//! child process that a plugin crashes still names the check.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use voodu_api::check::{CheckLine, CheckOutcome, CheckStep};
use voodu_plugin_abi::messages::{
    Addressing, Block, DrainReply, DrainRequest, Endpoint, ForgetRequest, PublishRequest,
    ValidateReply, ValidateRequest, WorkloadKind,
};
use voodu_plugin_host::handle::Health;
use voodu_plugin_host::{
    load_plugin, CallError, LoadOptions, PluginCall, PluginHandle, PluginName,
};

/// How many endpoints the largest publish carries.
pub const LARGE_SET: usize = 1_000;

/// The drain budget of the drain checks, unless the call bound is longer
/// (under `--valgrind`, 20 times the usual): budgets stretch with it.
pub const DRAIN_BUDGET: Duration = Duration::from_secs(5);

/// The size of the string field in the size-limit check: 1 MiB.
pub const LARGE_FIELD_BYTES: usize = 1024 * 1024;

/// Threads that call the plugin in turn in the threads check.
const THREADS: usize = 4;

/// The workload every request of the run names.
const SCOPE: &str = "check";
const NAME: &str = "conformance";

/// Runs every check of the plugin at `path` with `blocks` (each block's
/// type must be the plugin's), each call bounded by `call_timeout`;
/// `emit` hears each step as it happens.
pub fn run_checks(
    path: &Path,
    blocks: &[Block],
    call_timeout: Duration,
    emit: &mut dyn FnMut(CheckStep),
) {
    let mut run = Run { emit, call_timeout };
    let Some(plugin) = run.load(path) else {
        return;
    };
    let name = plugin.name().to_owned();
    let mut given: Vec<Block> = blocks.to_vec();
    for block in &given {
        if block.block_type != name {
            run.record(
                &format!("block {}", described(block)),
                CheckOutcome::Fail,
                format!(
                    "the block is of type {:?}, but the plugin is {name:?}",
                    block.block_type
                ),
                Some(format!("write the block as {name} {{ ... }}")),
            );
        }
    }
    given.retain(|block| block.block_type == name);
    // First, as the host does: settings come right after init.
    run.settings(&plugin);
    if !run.still_usable(&plugin) {
        return;
    }
    run.describe(&plugin, &name);
    if !run.still_usable(&plugin) {
        return;
    }
    let empty_only = given.is_empty();
    if empty_only {
        given.push(Block {
            block_type: name.clone(),
            labels: Vec::new(),
            spec: json!({}),
        });
    }
    let mut accepted = Vec::new();
    for block in &given {
        if let Some(normalised) = run.validate(&plugin, block, empty_only) {
            accepted.push(normalised);
        }
    }
    for (block, normalised) in &accepted {
        run.stable(&plugin, block, normalised);
        run.numbers(block, normalised);
    }
    let Some((block, normalised)) = accepted.first() else {
        return;
    };
    if !run.still_usable(&plugin) {
        return;
    }
    let stored = Block {
        spec: normalised.spec.clone(),
        ..block.clone()
    };
    if normalised.endpoints.addressing == Addressing::None {
        run.record(
            "publish and drain",
            CheckOutcome::Pass,
            "the block asks for no endpoints (addressing none): the host never sends it publish or drain".into(),
            None,
        );
    } else {
        run.publishes(&plugin, &stored, normalised.endpoints.addressing);
        if !run.still_usable(&plugin) {
            return;
        }
        run.drain(&plugin, &stored, normalised.endpoints.addressing);
        if !run.still_usable(&plugin) {
            return;
        }
        run.sequences(&plugin, &stored, normalised.endpoints.addressing);
    }
    if !run.still_usable(&plugin) {
        return;
    }
    run.forget_twice(&plugin, &stored);
    if !run.still_usable(&plugin) {
        return;
    }
    run.threads(&plugin, block);
    if !run.still_usable(&plugin) {
        return;
    }
    run.large_input(&plugin, &name);
    plugin.shutdown();
    run.left_behind();
}

/// The processes this process started that still run: `pid 4242 (nginx)`.
fn left_processes() -> Vec<String> {
    let this = std::process::id() as i32;
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.filter_map(Result::ok)
        .filter_map(|process| process.stat().ok())
        .filter(|stat| stat.ppid == this && stat.state != 'Z')
        .map(|stat| format!("pid {} ({})", stat.pid, stat.comm))
        .collect()
}

/// The TCP sockets this process listens on that the host's socket table
/// does not hold: `127.0.0.1:8080`.
fn left_listeners() -> Vec<String> {
    let held: Vec<std::net::SocketAddr> = voodu_plugin_host::listeners::ListenerTable::process()
        .held()
        .into_iter()
        .map(|(address, _)| address)
        .collect();
    let Ok(fds) = procfs::process::Process::myself().and_then(|me| me.fd()) else {
        return Vec::new();
    };
    let inodes: std::collections::HashSet<u64> = fds
        .filter_map(Result::ok)
        .filter_map(|fd| match fd.target {
            procfs::process::FDTarget::Socket(inode) => Some(inode),
            _ => None,
        })
        .collect();
    let entries = procfs::net::tcp()
        .into_iter()
        .chain(procfs::net::tcp6())
        .flatten();
    let mut listening: Vec<String> = entries
        .filter(|entry| entry.state == procfs::net::TcpState::Listen)
        .filter(|entry| inodes.contains(&entry.inode))
        .filter(|entry| !held.contains(&entry.local_address))
        .map(|entry| entry.local_address.to_string())
        .collect();
    listening.sort();
    listening.dedup();
    listening
}

/// A drain reply, as the check's lines name it.
fn drain_answer(answer: &DrainReply) -> String {
    match answer {
        DrainReply::Drained => "drained".to_owned(),
        DrainReply::Draining { retry_after_ms } => {
            format!("draining, ask again in {retry_after_ms} ms")
        }
    }
}

/// Values an option's schema forbids, each with why: just below its
/// `minimum`, just above its `maximum`, outside its `enum`, of another type.
fn forbidden_values(described: &Value) -> Vec<(Value, String)> {
    let mut forbidden = Vec::new();
    let kind = described["type"].as_str().unwrap_or_default();
    if let Some(minimum) = described["minimum"].as_f64() {
        let below = if kind == "integer" {
            json!(minimum as i64 - 1)
        } else {
            json!(minimum - 1.0)
        };
        forbidden.push((below, format!("below its minimum {}", described["minimum"])));
    }
    if let Some(maximum) = described["maximum"].as_f64() {
        let above = if kind == "integer" {
            json!(maximum as i64 + 1)
        } else {
            json!(maximum + 1.0)
        };
        forbidden.push((above, format!("above its maximum {}", described["maximum"])));
    }
    if let Some(allowed) = described["enum"].as_array() {
        let outside = json!("not-one-of-them");
        if !allowed.contains(&outside) {
            forbidden.push((outside, "not in its enum".to_owned()));
        }
    }
    let other_type = match kind {
        "integer" | "number" => Some(json!("not a number")),
        "string" => Some(json!(12345)),
        "boolean" => Some(json!("not true or false")),
        _ => None,
    };
    if let Some(value) = other_type {
        let article = if kind == "integer" { "an" } else { "a" };
        forbidden.push((value, format!("not {article} {kind}")));
    }
    forbidden
}

/// `traffik "http"`, for naming a block.
fn described(block: &Block) -> String {
    let labels: String = block.labels.iter().map(|l| format!(" {l:?}")).collect();
    format!("{}{labels}", block.block_type)
}

fn validate_request(block: &Block) -> ValidateRequest {
    ValidateRequest {
        kind: WorkloadKind::Deployment,
        scope: SCOPE.into(),
        name: NAME.into(),
        block: block.clone(),
        workload: json!({"image": "ghcr.io/acme/app:1", "replicas": 3, "ports": ["8084"]}),
    }
}

/// `count` endpoints in the form `addressing` sends them.
fn endpoints(count: usize, addressing: Addressing) -> Vec<Endpoint> {
    (0..count)
        .map(|index| Endpoint {
            replica_id: format!("{index:04x}"),
            address: match addressing {
                Addressing::Dns => format!("{SCOPE}-{NAME}-{index:04x}:8084"),
                _ => format!(
                    "10.{}.{}.{}:8084",
                    index / 65_536 % 256,
                    index / 256 % 256,
                    index % 256
                ),
            },
            node: None,
        })
        .collect()
}

/// Every value written in `value` that is not an array or an object (a
/// number, a string, a boolean, null), by its JSON pointer.
fn written_values(value: &Value, at: String, found: &mut Vec<(String, Value)>) {
    match value {
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                written_values(item, format!("{at}/{index}"), found);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                // A pointer escapes `~` and `/` in a key.
                let key = key.replace('~', "~0").replace('/', "~1");
                written_values(item, format!("{at}/{key}"), found);
            }
        }
        leaf => found.push((at, leaf.clone())),
    }
}

struct Run<'a> {
    emit: &'a mut dyn FnMut(CheckStep),
    call_timeout: Duration,
}

impl Run<'_> {
    /// The drain checks' budget: [`DRAIN_BUDGET`], or the call bound when
    /// that is longer, so a run slowed down (under valgrind) is judged by
    /// budgets stretched as much as its call bounds.
    fn drain_budget(&self) -> Duration {
        DRAIN_BUDGET.max(self.call_timeout)
    }
}

/// The JSON types a schema's `type` may name.
const JSON_TYPES: [&str; 7] = [
    "string", "integer", "number", "boolean", "array", "object", "null",
];

/// What keeps `schema` from being one voodu reads (`vd explain`, "did you
/// mean"): an object schema whose every property has a JSON type and a
/// one-line description. Empty when it is one.
fn schema_problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        problems.push("its \"type\" is not \"object\"".to_owned());
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        problems.push("it has no \"properties\" object".to_owned());
        return problems;
    };
    for (name, option) in properties {
        let typed = match option.get("type") {
            Some(Value::String(kind)) => JSON_TYPES.contains(&kind.as_str()),
            Some(Value::Array(kinds)) => {
                !kinds.is_empty()
                    && kinds
                        .iter()
                        .all(|kind| kind.as_str().is_some_and(|kind| JSON_TYPES.contains(&kind)))
            }
            _ => false,
        };
        if !typed {
            problems.push(format!(
                "option {name} has no JSON \"type\" ({})",
                JSON_TYPES.join(", ")
            ));
        }
        if option
            .get("description")
            .and_then(Value::as_str)
            .is_none_or(|text| text.trim().is_empty())
        {
            problems.push(format!("option {name} has no \"description\""));
        }
    }
    match schema.get("required") {
        None => {}
        Some(Value::Array(required)) => {
            for name in required {
                if !name
                    .as_str()
                    .is_some_and(|name| properties.contains_key(name))
                {
                    problems.push(format!("\"required\" names {name}, which is not an option"));
                }
            }
        }
        Some(_) => problems.push("\"required\" is not an array of option names".to_owned()),
    }
    if schema
        .get("additionalProperties")
        .is_some_and(|value| !value.is_boolean())
    {
        problems.push("\"additionalProperties\" is not true or false".to_owned());
    }
    problems
}

impl Run<'_> {
    /// `describe_settings` and `configure` (ABI 1.3): a plugin that takes
    /// plugin-wide settings describes them in a schema voodu reads, and
    /// takes `{}`, what the host hands it right after init when the
    /// operator gives none (else it would not load without `--settings`).
    /// One whose schema requires a setting is warned, and checked without
    /// settings. A plugin that describes none passes.
    fn settings(&mut self, plugin: &PluginHandle) {
        use voodu_plugin_host::settings::{hand_over, SettingsError};
        const CHECK: &str = "settings";
        self.start(CHECK);
        let schema = match plugin.settings_schema() {
            Err(error) => {
                self.record(
                    CHECK,
                    CheckOutcome::Fail,
                    error.to_string(),
                    Some(
                        "reply to describe_settings with a JSON Schema object, or leave it out"
                            .into(),
                    ),
                );
                return;
            }
            Ok(None) => {
                self.record(
                    CHECK,
                    CheckOutcome::Pass,
                    "the plugin takes no plugin-wide settings".into(),
                    None,
                );
                return;
            }
            Ok(Some(schema)) => schema,
        };
        let problems = schema_problems(&schema);
        if !problems.is_empty() {
            self.record(
                CHECK,
                CheckOutcome::Fail,
                format!("the settings schema is not one voodu reads: {}", problems.join("; ")),
                Some("an object schema: {\"type\": \"object\", \"properties\": {\"binary\": {\"type\": \"string\", \"description\": \"...\"}}}".into()),
            );
            return;
        }
        let names: Vec<String> = schema["properties"]
            .as_object()
            .map(|properties| properties.keys().cloned().collect())
            .unwrap_or_default();
        let check = crate::plugin_settings::json_schema_check();
        let (outcome, detail, fix) = match hand_over(plugin, &json!({}), Some(&check)) {
            Ok(()) => (
                CheckOutcome::Pass,
                format!(
                    "{} setting(s) ({}); configure takes none given ({{}})",
                    names.len(),
                    names.join(", ")
                ),
                None,
            ),
            Err(SettingsError::Invalid { problems, .. }) => (
                CheckOutcome::Warn,
                format!(
                    "its schema requires settings ({}), so it installs only with --settings; the other checks run without them",
                    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
                ),
                Some("give each setting a default the plugin uses when none is given".into()),
            ),
            Err(error) => (
                CheckOutcome::Fail,
                format!("configure refused no settings ({{}}), which the host hands it right after init when the operator gives none: {error}"),
                Some("take {} in configure, each setting at its default; refuse only values that are given and wrong".into()),
            ),
        };
        self.record(CHECK, outcome, detail, fix);
    }

    /// `describe`: a schema voodu reads, whose stated defaults (with the
    /// first example for required options without one) pass validate. A
    /// plugin that describes nothing is warned.
    fn describe(&mut self, plugin: &PluginHandle, name: &str) {
        self.start("describe");
        let schema = match plugin.describe() {
            Err(error) => {
                self.record(
                    "describe",
                    CheckOutcome::Fail,
                    error.to_string(),
                    Some("reply with a JSON Schema object, or leave describe out".into()),
                );
                return;
            }
            Ok(None) => {
                self.record(
                    "describe",
                    CheckOutcome::Warn,
                    format!("the plugin describes no options: `vd explain {name}` shows none, and a misspelt option gets no \"did you mean\""),
                    Some("describe the block's options (Rust: Plugin::describe; C: the describe member, ABI 1.2)".into()),
                );
                return;
            }
            Ok(Some(schema)) => schema,
        };
        let problems = schema_problems(&schema);
        if !problems.is_empty() {
            self.record(
                "describe",
                CheckOutcome::Fail,
                format!("the schema is not one voodu reads: {}", problems.join("; ")),
                Some("an object schema: {\"type\": \"object\", \"properties\": {\"port\": {\"type\": \"integer\", \"description\": \"...\"}}}".into()),
            );
            return;
        }
        let properties = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        self.record(
            "describe",
            CheckOutcome::Pass,
            format!(
                "a schema of {} option(s): {}",
                properties.len(),
                properties.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            None,
        );
        let voodu_plugin_abi::schema::ExampleSpec {
            spec,
            placeholders: missing,
        } = voodu_plugin_abi::schema::example_spec(&schema);
        if !missing.is_empty() {
            self.record(
                "the schema's defaults pass validate",
                CheckOutcome::Warn,
                format!(
                    "not checked: required option(s) {} have no default, and the schema gives no example",
                    missing.join(", ")
                ),
                Some("add \"examples\": [{...}] with a block the plugin accepts".into()),
            );
            return;
        }
        let block = Block {
            block_type: name.to_owned(),
            labels: Vec::new(),
            spec: Value::Object(spec.clone()),
        };
        let shown = block.spec.to_string();
        let mut accepted = false;
        self.timed(
            "the schema's defaults pass validate",
            || plugin.validate(&validate_request(&block)),
            |_| {
                accepted = true;
                (
                    CheckOutcome::Pass,
                    format!("validate accepts {shown}"),
                    None,
                )
            },
        );
        if accepted {
            self.refusal_names_the_option(plugin, name, &properties, &spec);
            self.schema_limits_refused(plugin, name, &properties, &spec);
        }
    }

    /// What the schema forbids is refused: for each option it types, the
    /// accepted `spec` with that option just below its `minimum`, just
    /// above its `maximum`, outside its `enum`, or of another type, each
    /// refused with a message. A plugin that accepts one stores what its
    /// own schema (`vd explain`) says cannot be.
    fn schema_limits_refused(
        &mut self,
        plugin: &PluginHandle,
        name: &str,
        properties: &serde_json::Map<String, Value>,
        spec: &serde_json::Map<String, Value>,
    ) {
        let check = "values the schema forbids are refused";
        let mut tried = Vec::new();
        for (option, described) in properties {
            for (value, why) in forbidden_values(described) {
                tried.push((option.clone(), value, why));
            }
        }
        if tried.is_empty() {
            return;
        }
        self.start(check);
        let mut accepted = Vec::new();
        let mut silent = Vec::new();
        for (option, value, why) in &tried {
            let mut bad = spec.clone();
            bad.insert(option.clone(), value.clone());
            let block = Block {
                block_type: name.to_owned(),
                labels: Vec::new(),
                spec: Value::Object(bad),
            };
            match plugin.validate(&validate_request(&block)) {
                Ok(_) => accepted.push(format!("{option} = {value} ({why})")),
                Err(CallError::Refused { message, .. }) if message.trim().is_empty() => {
                    silent.push(format!("{option} = {value}"))
                }
                Err(CallError::Refused { .. }) => {}
                Err(error) => {
                    self.record(
                        check,
                        CheckOutcome::Fail,
                        format!("{option} = {value}: {error}"),
                        None,
                    );
                    return;
                }
            }
        }
        let (outcome, detail, fix) = if !accepted.is_empty() {
            (
                CheckOutcome::Fail,
                format!("accepted what the schema forbids: {}", accepted.join("; ")),
                Some("refuse, in validate, every value the schema does not allow (or widen the schema)".into()),
            )
        } else if !silent.is_empty() {
            (
                CheckOutcome::Fail,
                format!("refused without a message: {}", silent.join("; ")),
                Some("say what is wrong and how to fix it".into()),
            )
        } else {
            (
                CheckOutcome::Pass,
                format!(
                    "{} value(s) refused, each with a message: {}",
                    tried.len(),
                    tried
                        .iter()
                        .map(|(option, value, _)| format!("{option} = {value}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            )
        };
        self.record(check, outcome, detail, fix);
    }

    /// A refusal names the option at fault: the accepted `spec` with one
    /// option of a declared scalar type given a value of another type is
    /// refused with that option's JSON pointer (`/port`), so the operator
    /// is shown its own line, not the block's.
    fn refusal_names_the_option(
        &mut self,
        plugin: &PluginHandle,
        name: &str,
        properties: &serde_json::Map<String, Value>,
        spec: &serde_json::Map<String, Value>,
    ) {
        let check = "a refusal names the option at fault";
        // An option of the accepted spec first: the rest stays accepted.
        let typed = |option: &String| {
            let wrong = match properties[option.as_str()]["type"].as_str()? {
                "integer" | "number" => json!("not a number"),
                "string" => json!(12345),
                "boolean" => json!("not true or false"),
                _ => return None,
            };
            Some((option.clone(), wrong))
        };
        let chosen = spec
            .keys()
            .filter(|option| properties.contains_key(option.as_str()))
            .chain(properties.keys())
            .find_map(typed);
        let Some((option, wrong)) = chosen else {
            return;
        };
        let mut bad = spec.clone();
        bad.insert(option.clone(), wrong.clone());
        let block = Block {
            block_type: name.to_owned(),
            labels: Vec::new(),
            spec: Value::Object(bad),
        };
        let expected = format!("/{option}");
        self.start(check);
        let (outcome, detail, fix) = match plugin.validate(&validate_request(&block)) {
            Err(CallError::Refused {
                pointer: Some(pointer),
                message,
                ..
            }) if pointer == expected => (
                CheckOutcome::Pass,
                format!("{option} = {wrong} refused at {pointer}: {message}"),
                None,
            ),
            Err(CallError::Refused {
                pointer: Some(pointer),
                ..
            }) => (
                CheckOutcome::Warn,
                format!("{option} = {wrong} refused at {pointer}, not at {expected}"),
                Some("name the option the refusal is about".into()),
            ),
            Err(CallError::Refused { message, .. }) => (
                CheckOutcome::Warn,
                format!(
                    "{option} = {wrong} refused without naming the option: the operator is pointed at the block, not at {option}'s line ({message})"
                ),
                Some(format!(
                    "refuse with the option's JSON pointer: Rust PluginError::refused_at(\"{expected}\", ...); C {{\"message\": ..., \"pointer\": \"{expected}\"}}"
                )),
            ),
            Ok(_) => (
                CheckOutcome::Warn,
                format!("{option} = {wrong} was accepted, though the schema says it is a {}", properties[option.as_str()]["type"]),
                Some("refuse a value the schema does not allow, naming the option".into()),
            ),
            Err(error) => (CheckOutcome::Fail, error.to_string(), None),
        };
        self.record(check, outcome, detail, fix);
    }

    fn start(&mut self, name: &str) {
        (self.emit)(CheckStep::Starting { name: name.into() });
    }

    fn record(&mut self, name: &str, outcome: CheckOutcome, detail: String, fix: Option<String>) {
        (self.emit)(CheckStep::Checked(CheckLine {
            name: name.into(),
            outcome,
            detail,
            fix,
        }));
    }

    /// Records a call's outcome; a call slower than half its bound warns.
    fn timed<T>(
        &mut self,
        name: &str,
        call: impl FnOnce() -> Result<T, CallError>,
        judge: impl FnOnce(T) -> (CheckOutcome, String, Option<String>),
    ) {
        self.start(name);
        let started = Instant::now();
        let result = call();
        let took = started.elapsed();
        let (outcome, detail, fix) = match result {
            Ok(answer) => judge(answer),
            Err(error) => (CheckOutcome::Fail, error.to_string(), None),
        };
        if outcome == CheckOutcome::Pass && took > self.call_timeout / 2 {
            self.record(
                name,
                CheckOutcome::Warn,
                format!(
                    "{detail}; it took {took:?}, more than half the call bound of {:?}",
                    self.call_timeout
                ),
                Some("answer at once and do slow work on a thread of the plugin's own".into()),
            );
        } else {
            self.record(name, outcome, detail, fix);
        }
    }

    /// Whether the plugin still takes calls; a wedged or poisoned one
    /// ends the run with a line that says so, rather than a failure for
    /// every later call it would not be sent.
    fn still_usable(&mut self, plugin: &PluginHandle) -> bool {
        let health = match plugin.health() {
            Health::Ready => return true,
            Health::Wedged { stuck_call } => format!("wedged in {stuck_call}"),
            Health::ShutDown => "shut down".to_owned(),
        };
        self.record(
            "the remaining checks",
            CheckOutcome::Warn,
            format!("not run: the plugin is {health} after the failure above"),
            Some("fix that failure and check again".into()),
        );
        false
    }

    fn load(&mut self, path: &Path) -> Option<PluginHandle> {
        self.start("load");
        let loaded = load_plugin(
            path,
            &LoadOptions {
                call_timeout: self.call_timeout,
                ..LoadOptions::default()
            },
        );
        match loaded {
            Ok(plugin) => {
                let info = plugin.info().clone();
                if let Err(error) = PluginName::new(info.name.clone()) {
                    self.record("load", CheckOutcome::Fail, error.to_string(), None);
                    return None;
                }
                self.record(
                    "load",
                    CheckOutcome::Pass,
                    format!(
                        "{} {} ({} plugin, ABI {}.{}), loaded as plugins:install loads it",
                        info.name, info.version, info.kind, info.abi_major, info.abi_minor
                    ),
                    None,
                );
                Some(plugin)
            }
            Err(error) => {
                self.record("load", CheckOutcome::Fail, error.to_string(), None);
                None
            }
        }
    }

    /// Validates `block`; its normalised reply when accepted.
    fn validate(
        &mut self,
        plugin: &PluginHandle,
        block: &Block,
        empty: bool,
    ) -> Option<(Block, ValidateReply)> {
        let name = if empty {
            "validate the empty block".to_owned()
        } else {
            format!("validate {}", described(block))
        };
        self.start(&name);
        match plugin.validate(&validate_request(block)) {
            Ok(reply) if !reply.spec.is_object() => {
                self.record(
                    &name,
                    CheckOutcome::Fail,
                    format!("the normalised spec is {}, not a JSON object", reply.spec),
                    Some("reply {\"spec\": {...}} with the block's options".into()),
                );
                None
            }
            Ok(reply) => {
                self.record(
                    &name,
                    CheckOutcome::Pass,
                    format!(
                        "normalised to {}, addressing {}",
                        reply.spec,
                        serde_json::to_value(reply.endpoints.addressing)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    ),
                    None,
                );
                Some((block.clone(), reply))
            }
            Err(CallError::Refused { message, .. }) if !empty => {
                self.record(
                    &name,
                    CheckOutcome::Fail,
                    format!("refused: {message}"),
                    Some("give a block the plugin accepts, or fix its validate".into()),
                );
                None
            }
            Err(CallError::Refused { message, .. }) => {
                self.record(
                    &name,
                    CheckOutcome::Warn,
                    format!("refused: {message}; the calls that need an accepted block were not checked"),
                    Some("give a block it accepts with --block FILE.hcl".into()),
                );
                None
            }
            Err(error) => {
                self.record(&name, CheckOutcome::Fail, error.to_string(), None);
                None
            }
        }
    }

    /// Validating the normalised spec gives it back unchanged.
    fn stable(&mut self, plugin: &PluginHandle, block: &Block, normalised: &ValidateReply) {
        let name = format!("normalising {} is stable", described(block));
        let again = Block {
            spec: normalised.spec.clone(),
            ..block.clone()
        };
        let first = normalised.clone();
        self.timed(
            &name,
            || plugin.validate(&validate_request(&again)),
            move |reply| {
                if reply == first {
                    (CheckOutcome::Pass, "validate of the normalised spec gives it back unchanged".into(), None)
                } else {
                    (
                        CheckOutcome::Fail,
                        format!("validate of {} gave {} ({:?}), not the same", first.spec, reply.spec, reply.endpoints),
                        Some("normalising twice must be normalising once: plugins:install --replace sends every stored (normalised) spec to validate".into()),
                    )
                }
            },
        );
    }

    /// Numbers the operator wrote come back exactly.
    fn numbers(&mut self, block: &Block, normalised: &ValidateReply) {
        let name = format!("values in {} survive validate", described(block));
        let mut written = Vec::new();
        written_values(&block.spec, String::new(), &mut written);
        let (mut numbers_changed, mut others_changed) = (Vec::new(), Vec::new());
        for (pointer, value) in written {
            match normalised.spec.pointer(&pointer) {
                Some(now) if *now != value => {
                    let change = format!("{pointer}: {value} became {now}");
                    if value.is_number() && now.is_number() {
                        numbers_changed.push(change);
                    } else {
                        others_changed.push(change);
                    }
                }
                _ => {}
            }
        }
        if numbers_changed.is_empty() && others_changed.is_empty() {
            self.record(
                &name,
                CheckOutcome::Pass,
                "every number and value written comes back exactly".into(),
                None,
            );
            return;
        }
        let changed: Vec<String> = numbers_changed
            .iter()
            .chain(&others_changed)
            .cloned()
            .collect();
        let fix = if numbers_changed.is_empty() {
            "normalise only what the operator left out: a value written is stored as written, or refused with the fix"
        } else {
            "keep numbers exact (a C plugin: cJSON holds doubles; refuse a number it cannot carry)"
        };
        self.record(
            &name,
            CheckOutcome::Warn,
            format!(
                "the normalised spec changes what the operator wrote: {}",
                changed.join(", ")
            ),
            Some(fix.into()),
        );
    }

    fn publishes(&mut self, plugin: &PluginHandle, block: &Block, addressing: Addressing) {
        for (count, label) in [
            (0, "an empty set"),
            (1, "one endpoint"),
            (LARGE_SET, "1,000 endpoints"),
        ] {
            let request = PublishRequest {
                kind: WorkloadKind::Deployment,
                scope: SCOPE.into(),
                name: NAME.into(),
                block: block.clone(),
                generation: 1 + count as u64,
                endpoints: endpoints(count, addressing),
            };
            self.timed(
                &format!("publish {label}"),
                || plugin.publish(&request),
                |()| (CheckOutcome::Pass, "acknowledged".into(), None),
            );
            if plugin.health() != Health::Ready {
                // The caller says why the rest are not run.
                return;
            }
        }
        // A newer host may send fields this plugin does not know.
        let mut request = serde_json::to_value(PublishRequest {
            kind: WorkloadKind::Deployment,
            scope: SCOPE.into(),
            name: NAME.into(),
            block: block.clone(),
            generation: 10_000,
            endpoints: endpoints(1, addressing),
        })
        .unwrap_or_default();
        request["sent_by_a_newer_host"] = json!({"field": true});
        request["endpoints"][0]["zone"] = json!("a");
        let bytes = serde_json::to_vec(&request).unwrap_or_default();
        self.timed(
            "publish with fields a newer host sends",
            || plugin.call_raw(PluginCall::Publish, bytes),
            |_| {
                (
                    CheckOutcome::Pass,
                    "unknown fields are ignored".into(),
                    None,
                )
            },
        );
    }

    fn drain(&mut self, plugin: &PluginHandle, block: &Block, addressing: Addressing) {
        let budget = self.drain_budget();
        let name = "drain until drained";
        self.start(name);
        let replica = endpoints(1, addressing).remove(0);
        let started = Instant::now();
        let mut asked = 0;
        loop {
            asked += 1;
            let request = DrainRequest {
                kind: WorkloadKind::Deployment,
                scope: SCOPE.into(),
                name: NAME.into(),
                block: block.clone(),
                replica: replica.clone(),
                budget_ms: budget.as_millis() as u64,
                elapsed_ms: started.elapsed().as_millis() as u64,
            };
            match plugin.drain(&request) {
                Ok(DrainReply::Drained) => {
                    self.record(
                        name,
                        CheckOutcome::Pass,
                        format!("drained after {asked} call(s)"),
                        None,
                    );
                    return;
                }
                Ok(DrainReply::Draining { retry_after_ms }) => {
                    if retry_after_ms == 0 || retry_after_ms > budget.as_millis() as u64 {
                        self.record(
                            name,
                            CheckOutcome::Warn,
                            format!(
                                "retry_after_ms is {retry_after_ms}, outside 1..={} (the budget)",
                                budget.as_millis()
                            ),
                            Some(
                                "ask to be polled again within the budget, and not at once".into(),
                            ),
                        );
                        return;
                    }
                    if started.elapsed() >= budget {
                        self.record(
                            name,
                            CheckOutcome::Warn,
                            format!("still draining after the {budget:?} budget, with no connection open through it"),
                            Some("answer drained once nothing of the replica is left in the plugin".into()),
                        );
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(retry_after_ms));
                }
                Err(error) => {
                    self.record(name, CheckOutcome::Fail, error.to_string(), None);
                    return;
                }
            }
        }
    }

    /// The orders of calls a live controller makes and a plugin must take:
    /// a publish that still lists a replica being drained, an older
    /// generation after a newer one, a drain of a replica never
    /// published, and a forget in the middle of a drain.
    fn sequences(&mut self, plugin: &PluginHandle, block: &Block, addressing: Addressing) {
        let budget = self.drain_budget();
        let set = endpoints(2, addressing);
        let publish = |generation: u64, endpoints: &[Endpoint]| {
            plugin.publish(&PublishRequest {
                kind: WorkloadKind::Deployment,
                scope: SCOPE.into(),
                name: NAME.into(),
                block: block.clone(),
                generation,
                endpoints: endpoints.to_vec(),
            })
        };
        let drain = |replica: &Endpoint| {
            plugin.drain(&DrainRequest {
                kind: WorkloadKind::Deployment,
                scope: SCOPE.into(),
                name: NAME.into(),
                block: block.clone(),
                replica: replica.clone(),
                budget_ms: budget.as_millis() as u64,
                elapsed_ms: 0,
            })
        };

        let name = "publish a set that lists a replica being drained";
        self.start(name);
        let outcome = publish(20_000, &set)
            .and_then(|()| drain(&set[0]))
            .and_then(|_| publish(20_001, &set))
            .and_then(|()| drain(&set[0]));
        match outcome {
            Ok(answer) => self.record(
                name,
                CheckOutcome::Pass,
                format!("acknowledged, and the drain goes on ({})", drain_answer(&answer)),
                None,
            ),
            Err(error) => self.record(
                name,
                CheckOutcome::Fail,
                error.to_string(),
                Some("a publish may list a replica being drained: keep draining it, and let it go when a set no longer lists it".into()),
            ),
        }
        if !self.still_usable(plugin) {
            return;
        }

        let name = "publish an older generation after a newer one";
        self.timed(
            name,
            || publish(20_010, &set[..1]).and_then(|()| publish(20_005, &set)),
            |()| {
                (
                    CheckOutcome::Pass,
                    "acknowledged (it must change nothing: the check cannot see inside the plugin, so keep the last generation applied and ignore an older one)".into(),
                    None,
                )
            },
        );
        if !self.still_usable(plugin) {
            return;
        }

        let name = "drain a replica never published";
        let stranger = Endpoint {
            replica_id: "never-published".into(),
            ..set[0].clone()
        };
        self.start(name);
        let (outcome, detail, fix) = match drain(&stranger) {
            Ok(DrainReply::Drained) => (CheckOutcome::Pass, "drained at once".to_owned(), None),
            Ok(answer) => (
                CheckOutcome::Warn,
                format!(
                    "answered {}: a rollout would wait on a replica the plugin never had",
                    drain_answer(&answer)
                ),
                Some("answer drained for a replica you hold nothing of".into()),
            ),
            Err(error) => (
                CheckOutcome::Fail,
                error.to_string(),
                Some("answer drained for a replica you hold nothing of".into()),
            ),
        };
        self.record(name, outcome, detail, fix);
        if !self.still_usable(plugin) {
            return;
        }

        let name = "forget a block while one of its replicas drains";
        self.start(name);
        let forgotten = publish(20_020, &set)
            .and_then(|()| drain(&set[0]))
            .and_then(|_| {
                plugin.forget(&ForgetRequest {
                    kind: WorkloadKind::Deployment,
                    scope: SCOPE.into(),
                    name: NAME.into(),
                    block: block.clone(),
                })
            });
        let (outcome, detail, fix) = match forgotten.map(|()| drain(&set[0])) {
            Err(error) => (
                CheckOutcome::Fail,
                error.to_string(),
                Some("a block may be forgotten while a drain of it runs (a delete): acknowledge it".into()),
            ),
            Ok(Ok(DrainReply::Drained)) => (
                CheckOutcome::Pass,
                "acknowledged; the replica then drained at once".into(),
                None,
            ),
            Ok(Ok(answer)) => (
                CheckOutcome::Warn,
                format!("acknowledged, but a drain after it answered {}: nothing of the block should be left", drain_answer(&answer)),
                Some("let forget drop everything of the block, its draining replicas too".into()),
            ),
            Ok(Err(error)) => (
                CheckOutcome::Warn,
                format!("acknowledged, but a drain after it failed: {error}"),
                Some("answer drained for a replica of a block you forgot".into()),
            ),
        };
        self.record(name, outcome, detail, fix);
    }

    fn forget_twice(&mut self, plugin: &PluginHandle, block: &Block) {
        let request = ForgetRequest {
            kind: WorkloadKind::Deployment,
            scope: SCOPE.into(),
            name: NAME.into(),
            block: block.clone(),
        };
        for name in ["forget", "forget again (idempotent)"] {
            self.timed(
                name,
                || plugin.forget(&request),
                |()| (CheckOutcome::Pass, "acknowledged".into(), None),
            );
            if plugin.health() != Health::Ready {
                return;
            }
        }
    }

    fn threads(&mut self, plugin: &PluginHandle, block: &Block) {
        let name = format!("validate from {THREADS} threads in turn");
        self.start(&name);
        let request = validate_request(block);
        let answers: Vec<Result<ValidateReply, String>> = std::thread::scope(|scope| {
            let calls: Vec<_> = (0..THREADS)
                .map(|_| scope.spawn(|| plugin.validate(&request).map_err(|e| e.to_string())))
                .collect();
            calls
                .into_iter()
                .map(|call| {
                    call.join()
                        .unwrap_or_else(|_| Err("the calling thread panicked".into()))
                })
                .collect()
        });
        let first = answers.first().cloned();
        let same = answers.iter().all(|answer| Some(answer) == first.as_ref());
        match (first, same) {
            (Some(Ok(_)), true) => self.record(&name, CheckOutcome::Pass, "every call gave the same answer".into(), None),
            (Some(Err(error)), _) => self.record(&name, CheckOutcome::Fail, error, None),
            _ => self.record(
                &name,
                CheckOutcome::Fail,
                "the same request gave different answers from different threads".into(),
                Some("keep no per-thread state: the host may call from any thread, one call at a time".into()),
            ),
        }
    }

    /// After `shutdown`: the processes the plugin started that still run
    /// (children of this process) and the sockets it still listens on
    /// (beside those the host holds for it, which are the host's), each
    /// named. A plugin must stop in `shutdown` what it started.
    fn left_behind(&mut self) {
        let name = "nothing left running after shutdown";
        self.start(name);
        // A process may still be on its way out: give it a moment.
        let mut left = (Vec::new(), Vec::new());
        for _ in 0..10 {
            left = (left_processes(), left_listeners());
            if left.0.is_empty() && left.1.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (processes, listeners) = left;
        if processes.is_empty() && listeners.is_empty() {
            self.record(
                name,
                CheckOutcome::Pass,
                "no process and no listening socket of the plugin's is left".into(),
                None,
            );
            return;
        }
        let mut found = Vec::new();
        if !processes.is_empty() {
            found.push(format!("processes still running: {}", processes.join(", ")));
        }
        if !listeners.is_empty() {
            found.push(format!("sockets still listening: {}", listeners.join(", ")));
        }
        self.record(
            name,
            CheckOutcome::Warn,
            found.join("; "),
            Some("stop in shutdown what the plugin started: its processes and its listeners (an upgrade or a reload starts a new instance beside them)".into()),
        );
    }

    fn large_input(&mut self, plugin: &PluginHandle, block_type: &str) {
        let name = "validate a block with a 1 MiB string";
        let block = Block {
            block_type: block_type.into(),
            labels: Vec::new(),
            spec: json!({"large": "x".repeat(LARGE_FIELD_BYTES)}),
        };
        self.start(name);
        match plugin.validate(&validate_request(&block)) {
            Ok(_) => self.record(name, CheckOutcome::Pass, "accepted".into(), None),
            Err(CallError::Refused { message, .. }) => self.record(
                name,
                CheckOutcome::Pass,
                format!("refused with its own message ({} bytes)", message.len()),
                None,
            ),
            Err(error) => self.record(name, CheckOutcome::Fail, error.to_string(), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_budget_stretches_with_the_call_bound_as_under_valgrind() {
        let mut emit = |_: CheckStep| {};
        let usual = Run {
            emit: &mut emit,
            call_timeout: Duration::from_secs(5),
        };
        assert_eq!(usual.drain_budget(), DRAIN_BUDGET);
        let mut emit = |_: CheckStep| {};
        let under_valgrind = Run {
            emit: &mut emit,
            call_timeout: Duration::from_secs(5) * 20,
        };
        assert_eq!(under_valgrind.drain_budget(), Duration::from_secs(100));
    }

    #[test]
    fn what_a_schema_forbids_is_each_limit_crossed_and_another_type() {
        let forbidden = forbidden_values(&json!({
            "type": "integer", "minimum": 1, "maximum": 65535
        }));
        let values: Vec<Value> = forbidden.iter().map(|(value, _)| value.clone()).collect();
        assert_eq!(values, [json!(0), json!(65536), json!("not a number")]);
        let forbidden = forbidden_values(&json!({"type": "string", "enum": ["tcp", "http"]}));
        let values: Vec<Value> = forbidden.iter().map(|(value, _)| value.clone()).collect();
        assert_eq!(values, [json!("not-one-of-them"), json!(12345)]);
    }
}
