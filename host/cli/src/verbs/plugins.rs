//! `vd plugins:install`, `plugins:list`, `plugins:reload`,
//! `plugins:remove` and `plugins:call`: [`Request::PluginsInstall`],
//! [`Request::PluginsList`], [`Request::PluginsReload`],
//! [`Request::PluginsRemove`] and [`Request::PluginsCall`], and their
//! answers (`plugins:call`'s is
//! [`Response::PluginReply`](voodu_api::Response::PluginReply)),
//! [`Response::Installed`](voodu_api::Response::Installed),
//! [`Response::Plugins`](voodu_api::Response::Plugins),
//! [`Response::Reloaded`](voodu_api::Response::Reloaded) and
//! [`Response::Removed`](voodu_api::Response::Removed).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anstream::{eprintln, println};

use sha2::Digest;
use voodu_api::client::Client;
use voodu_api::{LoadFailure, PluginRow, Request, Response};
use voodu_model::signing::{Approval, SigningKey};

use super::Call;
use crate::render::{table, GOOD, WARNING};
use crate::{fail, OutputArg, EXIT_FAILED};

/// `vd plugins:install`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsInstallArgs {
    /// The plugin's shared object (.so).
    pub(crate) path: PathBuf,
    /// Replace an installed plugin of the same name.
    #[arg(long)]
    pub(crate) replace: bool,
    /// Install only if the file's SHA-256 is this (64 hex digits), as
    /// published by whoever built it.
    #[arg(long, value_name = "HEX", value_parser = parse_sha256)]
    pub(crate) sha256: Option<String>,
    /// The plugin-wide settings to install it with: a JSON file (`-`
    /// reads standard input), checked against the settings the plugin
    /// describes. Without it, a replaced plugin's settings are kept.
    #[arg(long, value_name = "FILE")]
    pub(crate) settings: Option<PathBuf>,
    /// Run the plugin in a child process of its own, which the controller
    /// restarts when it dies; its calls cross a socket. Without it (or
    /// --in-process), a replaced plugin runs where it ran, a new one in
    /// the controller (but a second plugin written in Go runs out of
    /// process: one process holds one Go runtime).
    #[arg(long, conflicts_with = "in_process")]
    pub(crate) out_of_process: bool,
    /// Run the plugin in the controller's own process.
    #[arg(long)]
    pub(crate) in_process: bool,
    /// In a cluster: sign the record stored for every node with this
    /// operator's key (`vd keys new signing FILE`); nodes started with
    /// --trust-key load only records a trusted key signed.
    #[arg(long, value_name = "FILE")]
    pub(crate) signing_key: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) output: OutputArg,
}

/// `vd plugins:sign`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsSignArgs {
    /// The plugin installed cluster-wide.
    name: String,
    /// The operator's key (`vd keys new signing FILE`).
    #[arg(long, value_name = "FILE", required = true)]
    signing_key: PathBuf,
    /// The SHA-256 of the file you approve (`sha256sum FILE`, 64 hex
    /// digits): nothing is signed unless the cluster's record is of that
    /// file, so a file swapped in the store is never signed.
    #[arg(long, value_name = "HEX", value_parser = parse_sha256, required_unless_present = "removal")]
    sha256: Option<String>,
    /// Sign the plugin's removal (after `plugins:remove`), not its file.
    #[arg(long, conflicts_with = "sha256")]
    removal: bool,
    #[command(flatten)]
    output: OutputArg,
}

impl PluginsSignArgs {
    /// [`Request::PluginsStatement`], whose answer is signed with the key
    /// and sent back if it states what was approved; a key that cannot be
    /// read fails here.
    pub fn call(self) -> Result<Call, ExitCode> {
        let key = signing_key(&self.signing_key)?;
        let approval = Approval {
            name: self.name.clone(),
            sha256: self.sha256,
            removed: self.removal,
        };
        Ok(Call::new(
            Request::PluginsStatement { name: self.name },
            self.output.output,
        )
        .signed_with(Some((key, approval))))
    }
}

/// The operator's signing key in `path`, or why not (exit 1).
fn signing_key(path: &std::path::Path) -> Result<SigningKey, ExitCode> {
    SigningKey::from_file(path).map_err(|error| fail(format!("--signing-key {error}"), EXIT_FAILED))
}

/// A `--sha256` argument: 64 hex digits, kept in lowercase.
fn parse_sha256(text: &str) -> Result<String, String> {
    if text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err("a SHA-256 is 64 hex digits, as `sha256sum FILE` prints it".into())
    }
}

impl PluginsInstallArgs {
    /// [`Request::PluginsInstall`] of the file as an absolute path (the
    /// controller reads it), or with its bytes when `client` reaches a
    /// controller on another host; a file that cannot be read fails here.
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        let PluginsInstallArgs {
            path,
            replace,
            sha256,
            settings,
            out_of_process,
            in_process,
            signing_key: key_file,
            output,
        } = self;
        let out_of_process = match (out_of_process, in_process) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        let key = key_file.as_deref().map(signing_key).transpose()?;
        let settings = settings
            .as_deref()
            .map(|file| read_settings(file, "plugins:install"))
            .transpose()?;
        let cannot_read = |error: std::io::Error| {
            fail(
                format!(
                    "vd plugins:install: cannot read {}: {error}",
                    path.display()
                ),
                EXIT_FAILED,
            )
        };
        let absolute = std::fs::canonicalize(&path).map_err(cannot_read)?;
        let file = if client.is_remote() {
            Some(std::fs::read(&absolute).map_err(cannot_read)?)
        } else {
            None
        };
        // What the operator signs is the file read here: the statement
        // the controller answers with must be of its SHA-256 (the
        // plugin's name is checked against the controller's answer).
        let signing = match key {
            Some(key) => {
                let bytes = match &file {
                    Some(bytes) => bytes.clone(),
                    None => std::fs::read(&absolute).map_err(cannot_read)?,
                };
                let approval = Approval {
                    name: String::new(),
                    sha256: Some(hex::encode(sha2::Sha256::digest(&bytes))),
                    removed: false,
                };
                Some((key, approval))
            }
            None => None,
        };
        Ok(Call::new(
            Request::PluginsInstall {
                path: absolute,
                file,
                replace,
                sha256,
                settings,
                out_of_process,
            },
            output.output,
        )
        .signed_with(signing))
    }
}

/// `vd plugins:list`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsListArgs {
    #[command(flatten)]
    output: OutputArg,
}

impl PluginsListArgs {
    /// [`Request::PluginsList`].
    pub fn call(self) -> Call {
        Call::new(Request::PluginsList, self.output.output)
    }
}

/// `vd plugins:settings`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsSettingsArgs {
    /// The plugin's name.
    name: String,
    /// The new settings: a JSON object in a file (`-` reads standard
    /// input; `{}` drops them). Without it, the settings are shown.
    file: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArg,
}

impl PluginsSettingsArgs {
    /// [`Request::PluginsSettings`]; a file that cannot be read, or is not
    /// JSON, fails here.
    pub fn call(self) -> Result<Call, ExitCode> {
        let settings = self
            .file
            .as_deref()
            .map(|file| read_settings(file, "plugins:settings"))
            .transpose()?;
        Ok(Call::new(
            Request::PluginsSettings {
                name: self.name,
                settings,
            },
            self.output.output,
        ))
    }
}

/// The settings in `file` (`-`: standard input), which must be JSON; the
/// controller checks the rest. `verb` starts the error.
fn read_settings(file: &Path, verb: &str) -> Result<serde_json::Value, ExitCode> {
    read_json(
        Some(file),
        verb,
        "settings are one JSON object, `vd explain NAME` shows those the plugin takes",
    )
}

/// The JSON document in `file`, or on standard input when it is `-` or
/// none. A file that cannot be read, or text that is not JSON, fails with
/// `vd VERB: FILE:LINE:COLUMN: ...` and `fix`.
fn read_json(file: Option<&Path>, verb: &str, fix: &str) -> Result<serde_json::Value, ExitCode> {
    let (text, source) = match file.filter(|path| *path != Path::new("-")) {
        Some(path) => (std::fs::read_to_string(path), path.display().to_string()),
        None => {
            let mut text = String::new();
            (
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map(|_| text),
                "stdin".to_owned(),
            )
        }
    };
    let text = text.map_err(|error| {
        fail(
            format!("vd {verb}: cannot read {source}: {error}"),
            EXIT_FAILED,
        )
    })?;
    serde_json::from_str(&text).map_err(|error| {
        fail(
            format!(
                "vd {verb}: {source}:{}:{}: not JSON: {error} — {fix}",
                error.line(),
                error.column()
            ),
            EXIT_FAILED,
        )
    })
}

/// Prints a plugin's settings, and those they replaced.
pub fn settings_shown(
    plugin: &str,
    version: &str,
    settings: &serde_json::Value,
    previous: Option<&serde_json::Value>,
    takes_settings: bool,
) {
    let shown = |settings: &serde_json::Value| {
        serde_json::to_string_pretty(settings).unwrap_or_else(|_| settings.to_string())
    };
    if !takes_settings {
        println!("plugin {plugin} {version} takes no settings");
        return;
    }
    match previous {
        Some(previous) => {
            println!("{GOOD}changed{GOOD:#} the settings of plugin {plugin} {version}:");
            println!("{}", shown(settings));
            println!("they were:\n{}", shown(previous));
        }
        None => {
            println!("settings of plugin {plugin} {version}:");
            println!("{}", shown(settings));
        }
    }
}

/// `vd plugins:reload`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsReloadArgs {
    /// The plugin's name.
    name: String,
    #[command(flatten)]
    output: OutputArg,
}

impl PluginsReloadArgs {
    /// [`Request::PluginsReload`].
    pub fn call(self) -> Call {
        Call::new(
            Request::PluginsReload { name: self.name },
            self.output.output,
        )
    }
}

/// `vd plugins:remove`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsRemoveArgs {
    /// The plugin's name.
    name: String,
    /// In a cluster: sign its removal with this operator's key; nodes
    /// started with --trust-key unload it only once its removal is signed.
    #[arg(long, value_name = "FILE")]
    signing_key: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArg,
}

impl PluginsRemoveArgs {
    /// [`Request::PluginsRemove`]; a signing key that cannot be read
    /// fails here.
    pub fn call(self) -> Result<Call, ExitCode> {
        let key = self.signing_key.as_deref().map(signing_key).transpose()?;
        let approval = Approval {
            name: self.name.clone(),
            sha256: None,
            removed: true,
        };
        Ok(Call::new(
            Request::PluginsRemove { name: self.name },
            self.output.output,
        )
        .signed_with(key.map(|key| (key, approval))))
    }
}

/// Prints the plugin installed, what it replaced, and the workloads whose
/// blocks it normalised anew.
pub fn installed(
    plugin: &PluginRow,
    replaced_version: Option<&str>,
    revalidated: &[String],
    for_the_cluster: bool,
) {
    let replaced = replaced_version
        .map(|version| format!(", replacing {version}"))
        .unwrap_or_default();
    println!(
        "{GOOD}installed{GOOD:#} plugin {} {} ({} plugin, ABI {}){replaced} at {}",
        plugin.name,
        plugin.version,
        plugin.kind,
        plugin.abi,
        plugin.path.display()
    );
    for workload in revalidated {
        println!(
            "{workload}: blocks normalised anew by {} {}, stored as a new revision",
            plugin.name, plugin.version
        );
    }
    if for_the_cluster {
        println!(
            "stored for every node of the cluster; nodes that trust operators' keys load it once signed (--signing-key, or `vd plugins:sign {} --signing-key FILE`)",
            plugin.name
        );
    }
}

/// Where a plugin runs, for the PROCESS column: `controller`, or its own
/// child's pid and how often it was started again (`pid 4242, 1 restart`).
fn process_column(plugin: &PluginRow) -> String {
    if !plugin.out_of_process {
        return "controller".into();
    }
    let pid = plugin
        .child_pid
        .map_or_else(|| "restarting".to_owned(), |pid| format!("pid {pid}"));
    match plugin.child_restarts {
        0 => pid,
        1 => format!("{pid}, 1 restart"),
        restarts => format!("{pid}, {restarts} restarts"),
    }
}

/// Prints the loaded plugins as a table, then a warning for each that did
/// not load.
pub fn plugin_table(plugins: &[PluginRow], failures: &[LoadFailure]) {
    if plugins.is_empty() {
        println!("no plugins loaded — `vd plugins:install <file.so>` installs one");
    } else {
        let rows: Vec<Vec<String>> = plugins
            .iter()
            .map(|plugin| {
                vec![
                    plugin.name.clone(),
                    plugin.version.clone(),
                    plugin.abi.clone(),
                    plugin.kind.clone(),
                    process_column(plugin),
                    plugin.health.clone(),
                    plugin.log_lines_dropped.to_string(),
                    plugin.path.display().to_string(),
                ]
            })
            .collect();
        table(
            &[
                "NAME",
                "VERSION",
                "ABI",
                "KIND",
                "PROCESS",
                "HEALTH",
                "LOGS DROPPED",
                "PATH",
            ],
            &rows,
        );
        call_table(plugins);
        settings_table(plugins);
    }
    for failure in failures {
        eprintln!(
            "{WARNING}warning{WARNING:#}: {} did not load: {}",
            failure.path.display(),
            failure.error
        );
    }
}

/// Prints the settings each plugin was given, one line each; nothing when
/// none was given any.
fn settings_table(plugins: &[PluginRow]) {
    let rows: Vec<Vec<String>> = plugins
        .iter()
        .filter_map(|plugin| {
            let settings = plugin.settings.as_ref()?;
            Some(vec![plugin.name.clone(), settings.to_string()])
        })
        .collect();
    if !rows.is_empty() {
        println!();
        table(&["PLUGIN", "SETTINGS"], &rows);
    }
}

/// One call's figures as table cells: call, calls, refused, errors, p99.
pub(crate) fn call_figures_cells(figures: &voodu_api::CallFigures) -> Vec<String> {
    vec![
        figures.call.to_string(),
        figures.calls.to_string(),
        figures.refused.to_string(),
        figures.errors.to_string(),
        format!("{:.1}ms", figures.p99_ms),
    ]
}

/// Prints each plugin's calls since it was loaded: how many, refused,
/// failed, and the 99th percentile of the last 1,000; nothing before any
/// call was made.
fn call_table(plugins: &[PluginRow]) {
    let rows: Vec<Vec<String>> = plugins
        .iter()
        .flat_map(|plugin| {
            plugin.calls.iter().map(|figures| {
                let mut row = vec![plugin.name.clone()];
                row.extend(call_figures_cells(figures));
                row
            })
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    println!();
    table(
        &["PLUGIN", "CALL", "CALLS", "REFUSED", "ERRORS", "P99"],
        &rows,
    );
}

/// Prints the plugin given a fresh instance, and the earlier instances
/// left behind.
pub fn reloaded(plugin: &PluginRow, was_quarantined: bool, instances_left_behind: u32) {
    let from = if was_quarantined {
        " (out of quarantine)"
    } else {
        ""
    };
    println!(
        "{GOOD}reloaded{GOOD:#} plugin {} {}{from}: a fresh instance, which has every block's endpoint set",
        plugin.name, plugin.version
    );
    if instances_left_behind > 0 {
        println!(
            "{instances_left_behind} earlier instance(s) of it stay in the controller until it restarts (a thread and the library each)"
        );
    }
}

/// Prints the plugin removed.
pub fn removed(name: &str, for_the_cluster: bool) {
    println!("{GOOD}removed{GOOD:#} plugin {name}");
    if for_the_cluster {
        println!(
            "removed for every node of the cluster; nodes that trust operators' keys unload it once its removal is signed (--signing-key, or `vd plugins:sign {name} --signing-key FILE`)"
        );
    }
}

/// `vd plugins:call`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsCallArgs {
    /// The plugin's name.
    name: String,
    /// The call: validate, publish, drain or forget.
    call: voodu_api::PluginCallName,
    /// The request, as JSON: a file, or `-` (or nothing) for stdin.
    file: Option<PathBuf>,
    /// Print a sample request for CALL, to edit and send, instead: its
    /// block built from the plugin's own schema (`vd explain NAME`), asked
    /// of the running controller.
    #[arg(long)]
    example: bool,
    #[command(flatten)]
    output: OutputArg,
}

impl PluginsCallArgs {
    /// [`Request::PluginsCall`], with the request read and parsed here so
    /// that a file that is no JSON is named with its line and column.
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        if self.example {
            let spec = example_spec_of(client, &self.name)?;
            let spec = match self.call {
                voodu_api::PluginCallName::Validate => spec,
                _ => normalised(client, &self.name, spec),
            };
            println!("{}", example_request(self.call, &self.name, spec));
            return Err(ExitCode::SUCCESS);
        }
        let from_stdin = self
            .file
            .as_deref()
            .is_none_or(|path| path == Path::new("-"));
        if from_stdin && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            return Err(fail(
                format!(
                    "vd plugins:call: give the request as a file, or on stdin — `vd plugins:call {} {} --example` prints one to start from",
                    self.name, self.call
                ),
                EXIT_FAILED,
            ));
        }
        let request = read_json(
            self.file.as_deref(),
            "plugins:call",
            &format!(
                "`vd plugins:call {} {} --example` prints a request to start from",
                self.name, self.call
            ),
        )?;
        Ok(Call::new(
            Request::PluginsCall {
                name: self.name,
                call: self.call,
                request,
            },
            self.output.output,
        ))
    }
}

/// The block spec of plugin `name`'s example: built from the schema it
/// describes, asked of the controller. Placeholders for required options
/// with no default and no example are named on stderr; a plugin that
/// describes nothing gets an empty spec, and says so.
fn example_spec_of(client: &Client, name: &str) -> Result<serde_json::Value, ExitCode> {
    let request = Request::Explain {
        block: name.to_owned(),
    };
    let schema = match client.call(&request, &mut |_| {}) {
        Ok(Response::Explained { schema, .. }) => schema,
        Ok(other) => {
            return Err(fail(
                format!("vd plugins:call: the controller answered {other:?} to explain"),
                EXIT_FAILED,
            ))
        }
        Err(voodu_api::client::ClientError::Failed(failure)) => {
            return Err(fail(
                format!("vd plugins:call: {}", failure.message),
                EXIT_FAILED,
            ))
        }
        Err(error @ voodu_api::client::ClientError::NotRunning { .. }) => {
            return Err(fail(
                format!("vd plugins:call: {error}"),
                crate::EXIT_NO_CONTROLLER,
            ))
        }
        Err(error) => return Err(fail(format!("vd plugins:call: {error}"), EXIT_FAILED)),
    };
    let Some(schema) = schema else {
        eprintln!(
            "{}",
            crate::render::warning_text(&format!(
                "plugin {name} describes no options: the example's spec is empty; fill in what its blocks take"
            ))
        );
        return Ok(serde_json::json!({}));
    };
    let example = voodu_plugin_abi::schema::example_spec(&schema);
    if !example.placeholders.is_empty() {
        eprintln!(
            "{}",
            crate::render::warning_text(&format!(
                "plugin {name}'s schema gives no default or example for {}: the example holds a placeholder for each; fill them in",
                example.placeholders.join(", ")
            ))
        );
    }
    Ok(serde_json::Value::Object(example.spec))
}

/// `spec` as plugin `name` normalises it (its validate reply's spec), as
/// publish, drain and forget carry a block: the spec as it was when the
/// plugin refuses it, with a warning.
fn normalised(client: &Client, name: &str, spec: serde_json::Value) -> serde_json::Value {
    let validate = example_request(voodu_api::PluginCallName::Validate, name, spec.clone());
    let request = Request::PluginsCall {
        name: name.to_owned(),
        call: voodu_api::PluginCallName::Validate,
        request: serde_json::from_str(&validate).unwrap_or_default(),
    };
    match client.call(&request, &mut |_| {}) {
        Ok(Response::PluginReply { reply, .. }) if reply["spec"].is_object() => {
            reply["spec"].clone()
        }
        answer => {
            let why = match answer {
                Err(error) => error.to_string(),
                Ok(other) => format!("it answered {other:?}"),
            };
            eprintln!(
                "{}",
                crate::render::warning_text(&format!(
                    "plugin {name} did not validate the example's spec, so it is not normalised: {why}"
                ))
            );
            spec
        }
    }
}

/// A request for `call` to plugin `plugin` as the host sends it, its block
/// of `spec`, with sample values for the rest.
fn example_request(
    call: voodu_api::PluginCallName,
    plugin: &str,
    spec: serde_json::Value,
) -> String {
    use voodu_api::PluginCallName;
    use voodu_plugin_abi::messages::{
        Block, DrainRequest, Endpoint, ForgetRequest, PublishRequest, ValidateRequest, WorkloadKind,
    };
    let block = Block {
        block_type: plugin.into(),
        labels: Vec::new(),
        spec,
    };
    let endpoint = |replica: &str, address: &str| Endpoint {
        replica_id: replica.into(),
        address: address.into(),
        node: None,
    };
    let request = match call {
        PluginCallName::Validate => serde_json::to_value(ValidateRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block,
            workload: serde_json::json!({ "image": "ghcr.io/acme/esl:1.2", "replicas": 2, "ports": ["8084"] }),
        }),
        PluginCallName::Publish => serde_json::to_value(PublishRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block,
            generation: 1,
            endpoints: vec![
                endpoint("a1b2c3", "172.17.0.2:8084"),
                endpoint("d4e5f6", "172.17.0.3:8084"),
            ],
        }),
        PluginCallName::Drain => serde_json::to_value(DrainRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block,
            replica: endpoint("a1b2c3", "172.17.0.2:8084"),
            budget_ms: 30_000,
            elapsed_ms: 0,
        }),
        PluginCallName::Forget => serde_json::to_value(ForgetRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block,
        }),
    };
    request
        .and_then(|request| serde_json::to_string_pretty(&request))
        .unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"))
}

/// Prints a plugin's OK reply to `vd plugins:call`.
pub fn reply(
    plugin: &str,
    call: voodu_api::PluginCallName,
    reply: &serde_json::Value,
    elapsed_ms: u64,
) {
    eprintln!("plugin {plugin} answered {call} OK in {elapsed_ms} ms");
    if reply.is_null() {
        println!("(an empty reply)");
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(reply).unwrap_or_else(|_| reply.to_string())
        );
    }
}

/// Prints that a cluster plugin's record was signed.
pub fn signed(name: &str, key_id: &str, removed: bool) {
    if removed {
        println!("{GOOD}signed{GOOD:#} the removal of {name} from the cluster with key {key_id}: nodes that trust it unload it");
    } else {
        println!("{GOOD}signed{GOOD:#} the cluster's record of {name} with key {key_id}: nodes that trust it load it");
    }
}
