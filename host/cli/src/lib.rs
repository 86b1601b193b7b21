//! # voodu-cli
//!
//! The `vd` command line: argument parsing, and one function per verb. Every
//! verb but `controller` is a client of the controller's API and never opens
//! the store or Docker itself.
//!
//! Exit codes: 0 success, 1 the request failed (a refused apply, an unknown
//! workload, ...), 2 bad arguments, 3 no controller is running.
//!
//! **May not depend on** any voodu crate but `voodu-api`, `voodu-model` and `voodu-plugin-abi`: it is a client of the controller's API, never opening the store or the engine, and runs a controller only through the [`RunController`] the `vd` binary hands it (`tests/crate_rules.rs` checks this).

#![warn(missing_docs)]

mod progress;
mod render;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use voodu_api::client::{Client, ClientError};
use voodu_api::sources::read_manifests;
use voodu_api::{Frame, Request, Response, WaitReport};
use voodu_model::{ManifestSource, WorkloadId};
use voodu_plugin_abi::messages::WorkloadKind;

/// Exit code of a request that failed.
const EXIT_FAILED: u8 = 1;
/// Exit code of bad arguments, as clap uses.
const EXIT_USAGE: u8 = 2;
/// Exit code when no controller answers.
const EXIT_NO_CONTROLLER: u8 = 3;
/// Exit code after Ctrl-C stopped a wait (the rollout goes on).
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Parser)]
#[command(
    name = "vd",
    version,
    about = "voodu: declare workloads in HCL, and the controller makes Docker match",
    after_help = "Exit codes: 0 success, 1 the request failed, 2 bad arguments, 3 no controller is running."
)]
struct Cli {
    /// The controller's root directory: state, plugins and socket.
    /// Default: $VOODU_ROOT, else $HOME/.voodu.
    // Read from the environment by hand, not with clap's `env`: clap counts
    // an argument taken from the environment as given, and so printed
    // `--root <DIR>` in every usage line as if it were required.
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// How read verbs print their answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
enum Output {
    /// For people.
    #[default]
    Text,
    /// The API's JSON, for scripts.
    Json,
}

#[derive(Debug, clap::Args)]
struct OutputArg {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Debug, clap::Args)]
struct ControllerArgs {
    /// The bound on every plugin call; a plugin that overruns it is marked
    /// wedged.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    plugin_timeout: Duration,
    /// Validate and store only; never touch Docker.
    #[arg(long)]
    no_docker: bool,
    /// How often every workload is converged again, to repair what Docker's
    /// events missed.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    resync: Duration,
    /// How many workloads reconcile at once; rollouts of different
    /// workloads never wait for each other below this bound.
    /// Default: the controller's own (8).
    #[arg(long, value_parser = clap::value_parser!(usize))]
    workers: Option<usize>,
}

/// How `vd controller` and `vd up` want a controller run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerOptions {
    /// The root directory.
    pub root: PathBuf,
    /// The bound on every plugin call.
    pub plugin_timeout: Duration,
    /// Whether to drive the Docker engine.
    pub docker: bool,
    /// How often every workload is converged again.
    pub resync: Duration,
    /// How many workloads reconcile at once; `None`: the controller's
    /// default.
    pub workers: Option<usize>,
}

/// Runs a controller in the foreground until SIGINT or SIGTERM, calling
/// `ready` once its socket accepts connections. The `vd` binary supplies
/// it (from `voodu-controller`), so that this crate stays a client of the
/// API. The error is one line for the operator.
pub type RunController = fn(&ControllerOptions, Box<dyn FnOnce() + Send>) -> Result<(), String>;

#[derive(Debug, clap::Args)]
struct WaitArgs {
    /// Return as soon as the change is stored, without following the
    /// rollout.
    #[arg(long)]
    no_wait: bool,
    /// Stop following after this long (the rollout goes on), exiting 1 and
    /// naming what is still converging, at which step.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    timeout: Option<Duration>,
}

impl WaitArgs {
    /// How to follow the rollout the request starts, unless `--no-wait`.
    fn follow_up(&self) -> Option<FollowUp> {
        (!self.no_wait).then_some(FollowUp {
            timeout: self.timeout,
        })
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller in the foreground: owns the store and the plugins,
    /// and serves the API on <root>/controller.sock.
    Controller {
        #[command(flatten)]
        options: ControllerArgs,
    },
    /// Run a controller in the foreground and apply manifests to it: for
    /// single-host use and demos. Ctrl-C stops the controller (the replicas
    /// keep running).
    Up {
        /// Manifest files or directories.
        #[arg(short = 'f', long = "file", required = true, num_args = 1.., value_name = "PATH")]
        files: Vec<PathBuf>,
        /// Plugins to install (or replace) before applying.
        #[arg(long = "plugin", value_name = "FILE.so")]
        plugins: Vec<PathBuf>,
        #[command(flatten)]
        options: ControllerArgs,
    },
    /// Apply manifests, all or nothing: every plugin block is validated by
    /// its plugin, and nothing is stored unless all pass. Then follow the
    /// rollouts until they converge (Ctrl-C stops following, not the
    /// rollout).
    Apply {
        /// Manifest files (.hcl, .voodu, .vdu, .vd) or directories of them.
        #[arg(short = 'f', long = "file", required = true, num_args = 1.., value_name = "PATH")]
        files: Vec<PathBuf>,
        /// Parse and validate through the plugins, and show what would
        /// change against what is stored; store nothing and run nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        wait: WaitArgs,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Follow a workload's rollout until it converges (or, for a deleted
    /// one, until its replicas are gone).
    #[command(name = "rollout")]
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// Show recent events, of one workload or all; -w streams new ones.
    Events {
        /// KIND/SCOPE/NAME; every workload's when left out.
        workload: Option<WorkloadId>,
        /// How many recent events to show first.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Keep streaming events as they happen (one JSON object per line
        /// with -o json).
        #[arg(short = 'w', long = "watch")]
        watch: bool,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show one workload: core spec, normalised blocks in order, recent events.
    Describe {
        /// KIND/SCOPE/NAME, for example deployment/prod/esl.
        workload: WorkloadId,
        /// How many recent events to show.
        #[arg(long, default_value_t = 20)]
        events: usize,
        #[command(flatten)]
        output: OutputArg,
    },
    /// List stored workloads, or the replicas Docker runs.
    Get {
        /// What to list: stored deployments, statefulsets or workloads
        /// (both), or pods (the replicas Docker runs).
        #[arg(value_enum)]
        what: GetWhat,
        /// For pods: only this workload's (KIND/SCOPE/NAME).
        workload: Option<WorkloadId>,
        /// For pods: keep streaming changes as they happen (one JSON object
        /// per line with -o json).
        #[arg(short = 'w', long = "watch", conflicts_with = "orphans")]
        watch: bool,
        /// For pods: only the orphans, containers of this controller whose
        /// workload the store has no record of (a lost or replaced store, a
        /// restored backup); they are left running until adopted or pruned.
        #[arg(long)]
        orphans: bool,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Remove what the controller leaves alone unless asked: with
    /// --orphans, every container whose workload the store has no record
    /// of, each drained as any removal, after naming it.
    Prune {
        /// Remove the orphans (`vd get pods --orphans` lists them).
        #[arg(long, required = true)]
        orphans: bool,
        /// Only name what would be removed.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        output: OutputArg,
    },
    /// The store: `vd store backup FILE` writes a consistent copy of it
    /// while the controller runs.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Delete a workload: its replicas are drained and removed, then each
    /// plugin with a block on it is told to forget it.
    Delete {
        /// KIND/SCOPE/NAME, for example deployment/prod/esl.
        workload: WorkloadId,
        #[command(flatten)]
        wait: WaitArgs,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Install a plugin: check that it loads and names itself, then make it
    /// live under <root>/plugins/<name>/.
    #[command(name = "plugins:install")]
    PluginsInstall {
        /// The plugin's shared object (.so).
        path: PathBuf,
        /// Replace an installed plugin of the same name.
        #[arg(long)]
        replace: bool,
        /// Install only if the file's SHA-256 is this (64 hex digits), as
        /// published by whoever built it.
        #[arg(long, value_name = "HEX", value_parser = parse_sha256)]
        sha256: Option<String>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// List the loaded plugins: name, version, ABI, kind, path.
    #[command(name = "plugins:list")]
    PluginsList {
        #[command(flatten)]
        output: OutputArg,
    },
    /// List a workload's stored revisions.
    History {
        /// KIND/SCOPE/NAME, for example deployment/prod/esl.
        workload: WorkloadId,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Apply a stored revision of a workload again (through the plugins'
    /// validation), as a new revision, and follow the rollout.
    Rollback {
        /// KIND/SCOPE/NAME, for example deployment/prod/esl.
        workload: WorkloadId,
        /// The revision to go back to; default: the one before the current.
        #[arg(long, value_name = "N")]
        to: Option<i64>,
        #[command(flatten)]
        wait: WaitArgs,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show every replica's log, each line prefixed with its replica id.
    Logs {
        /// KIND/SCOPE/NAME, for example deployment/prod/esl.
        workload: WorkloadId,
        /// Keep streaming new lines (of the replicas running now) until
        /// Ctrl-C.
        #[arg(short = 'f', long = "follow")]
        follow: bool,
        /// Only lines written within this long (`10m`, `1h`).
        #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
        since: Option<Duration>,
        /// Only the last N lines of each replica.
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show the versions of this CLI and of the controller, and the plugin
    /// ABI they host.
    Version {
        #[command(flatten)]
        output: OutputArg,
    },
    /// Print a shell completion script: `vd completions bash >
    /// /etc/bash_completion.d/vd`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Give a plugin a fresh instance: for one wedged in a call, poisoned by
    /// a panic, or quarantined after a crash. Its file is loaded anew, every
    /// stored block is validated again, and every block's endpoint set is
    /// sent to it at once.
    #[command(name = "plugins:reload")]
    PluginsReload {
        /// The plugin's name.
        name: String,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Remove a plugin; refused while a stored workload has a block for it.
    #[command(name = "plugins:remove")]
    PluginsRemove {
        /// The plugin's name.
        name: String,
        #[command(flatten)]
        output: OutputArg,
    },
}

/// What `vd get` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum GetWhat {
    /// Stored deployments.
    #[value(alias = "deployment")]
    Deployments,
    /// Stored statefulsets.
    #[value(alias = "statefulset")]
    Statefulsets,
    /// Every stored workload.
    #[value(alias = "all")]
    Workloads,
    /// The replicas Docker runs.
    #[value(alias = "replicas", alias = "pod")]
    Pods,
}

#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// Write a consistent copy of the store to FILE while the controller
    /// runs (SQLite's online backup). To restore: stop the controller, put
    /// the copy at <root>/state.db, start it (see the README).
    Backup {
        /// The copy to write; it must not exist yet.
        file: PathBuf,
        #[command(flatten)]
        output: OutputArg,
    },
}

#[derive(Debug, Subcommand)]
enum RolloutCommand {
    /// Wait until the workload's containers match what is stored, showing
    /// each step; exits 1 if it fails or crash-loops.
    Status {
        /// KIND/SCOPE/NAME, for example deployment/prod/esl.
        workload: WorkloadId,
        /// Stop waiting after this long, naming the step in progress.
        #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
        timeout: Option<Duration>,
        #[command(flatten)]
        output: OutputArg,
    },
}

fn default_root() -> PathBuf {
    if let Some(root) = std::env::var_os("VOODU_ROOT").filter(|root| !root.is_empty()) {
        return PathBuf::from(root);
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib"))
        .join(".voodu")
}

/// A `--sha256` argument: 64 hex digits, kept in lowercase.
fn parse_sha256(text: &str) -> Result<String, String> {
    if text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err("a SHA-256 is 64 hex digits, as `sha256sum FILE` prints it".into())
    }
}

/// Prints an error line on stderr and returns the exit code.
fn fail(message: impl std::fmt::Display, code: u8) -> ExitCode {
    render::error_line(&message.to_string());
    ExitCode::from(code)
}

/// Runs `vd` with the process's arguments; `controller` runs the
/// controller for `vd controller` and `vd up`.
pub fn main(controller: RunController) -> ExitCode {
    let cli = Cli::parse();
    let root = cli.root.clone().unwrap_or_else(default_root);
    match cli.command {
        Command::Controller { options } => run_controller(controller, &root, &options, None),
        Command::Up {
            files,
            plugins,
            options,
        } => run_controller(controller, &root, &options, Some((plugins, files))),
        Command::Completions { shell } => {
            // Generated into memory first: clap_complete panics on a write
            // error, and a reader that stops early (`| head -1`) is no
            // error of ours.
            let mut script = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "vd",
                &mut script,
            );
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(&script).and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(error) => fail(format!("vd completions: {error}"), EXIT_FAILED),
            }
        }
        command => run_client(&root, command),
    }
}

/// Runs a controller; with `up` (plugins, files), installs the plugins and
/// applies the files once it is ready, and stops it with exit code 1 if
/// either fails.
fn run_controller(
    controller: RunController,
    root: &Path,
    options: &ControllerArgs,
    up: Option<(Vec<PathBuf>, Vec<PathBuf>)>,
) -> ExitCode {
    RUNS_CONTROLLER.store(true, std::sync::atomic::Ordering::SeqCst);
    let config = ControllerOptions {
        root: root.to_owned(),
        plugin_timeout: options.plugin_timeout,
        docker: !options.no_docker,
        resync: options.resync,
        workers: options.workers.map(|workers| workers.max(1)),
    };
    let apply_failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = apply_failed.clone();
    let root = root.to_owned();
    let result = controller(
        &config,
        Box::new(move || {
            if let Some((plugins, files)) = up {
                std::thread::spawn(move || {
                    let text = || OutputArg {
                        output: Output::Text,
                    };
                    let installed = plugins.into_iter().all(|path| {
                        let install = Command::PluginsInstall {
                            path,
                            replace: true,
                            sha256: None,
                            output: text(),
                        };
                        run_client(&root, install) == ExitCode::SUCCESS
                    });
                    let apply = Command::Apply {
                        files,
                        dry_run: false,
                        wait: WaitArgs {
                            no_wait: false,
                            timeout: None,
                        },
                        output: text(),
                    };
                    if !installed || run_client(&root, apply) != ExitCode::SUCCESS {
                        flag.store(true, std::sync::atomic::Ordering::SeqCst);
                        // SAFETY: signalling our own process has no memory effects.
                        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
                    }
                });
            }
        }),
    );
    match result {
        Ok(()) if apply_failed.load(std::sync::atomic::Ordering::SeqCst) => {
            ExitCode::from(EXIT_FAILED)
        }
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(format!("vd controller: {error}"), EXIT_FAILED),
    }
}

fn read_sources(paths: &[PathBuf]) -> Result<Vec<ManifestSource>, String> {
    read_manifests(paths).map_err(|error| error.to_string())
}

/// What to do after the first answer: follow the rollouts it started.
struct FollowUp {
    timeout: Option<Duration>,
}

fn run_client(root: &Path, command: Command) -> ExitCode {
    let client = Client::new(root);
    let mut follow: Option<FollowUp> = None;
    let (request, output) = match command {
        Command::Controller { .. } | Command::Up { .. } | Command::Completions { .. } => {
            return fail(
                "vd: the controller verbs do not talk to a controller",
                EXIT_FAILED,
            )
        }
        Command::Apply {
            files,
            dry_run,
            wait,
            output,
        } => match read_sources(&files) {
            Ok(sources) => {
                if !dry_run {
                    follow = wait.follow_up();
                }
                (Request::Apply { sources, dry_run }, output.output)
            }
            Err(message) => return fail(format!("vd apply: {message}"), EXIT_FAILED),
        },
        Command::Rollout {
            command:
                RolloutCommand::Status {
                    workload,
                    timeout,
                    output,
                },
        } => (
            Request::Wait {
                workloads: vec![workload],
                since_event: None,
                timeout_ms: timeout.map(duration_ms),
            },
            output.output,
        ),
        Command::Events {
            workload,
            limit,
            watch,
            output,
        } => (
            Request::Events {
                workload,
                limit,
                follow: watch,
            },
            output.output,
        ),
        Command::Describe {
            workload,
            events,
            output,
        } => (Request::Describe { workload, events }, output.output),
        Command::Get {
            what: GetWhat::Pods,
            workload,
            watch,
            orphans,
            output,
        } => (
            Request::Pods {
                workload,
                watch,
                orphans,
            },
            output.output,
        ),
        Command::Get {
            orphans: true,
            what,
            ..
        } => {
            return fail(
                format!(
                    "vd get {}: --orphans lists pods only — `vd get pods --orphans`",
                    what.to_possible_value()
                        .map_or_else(String::new, |value| value.get_name().to_owned())
                ),
                EXIT_USAGE,
            )
        }
        Command::Get { what, output, .. } => {
            let kind = match what {
                GetWhat::Deployments => Some(WorkloadKind::Deployment),
                GetWhat::Statefulsets => Some(WorkloadKind::Statefulset),
                GetWhat::Workloads | GetWhat::Pods => None,
            };
            (Request::Get { kind }, output.output)
        }
        Command::Delete {
            workload,
            wait,
            output,
        } => {
            follow = wait.follow_up();
            (Request::Delete { workload }, output.output)
        }
        Command::PluginsInstall {
            path,
            replace,
            sha256,
            output,
        } => match std::fs::canonicalize(&path) {
            Ok(path) => (
                Request::PluginsInstall {
                    path,
                    replace,
                    sha256,
                },
                output.output,
            ),
            Err(error) => {
                return fail(
                    format!(
                        "vd plugins:install: cannot read {}: {error}",
                        path.display()
                    ),
                    EXIT_FAILED,
                )
            }
        },
        Command::PluginsList { output } => (Request::PluginsList, output.output),
        Command::Version { output } => (Request::Version, output.output),
        Command::History { workload, output } => (Request::History { workload }, output.output),
        Command::Rollback {
            workload,
            to,
            wait,
            output,
        } => {
            follow = wait.follow_up();
            (Request::Rollback { workload, to }, output.output)
        }
        Command::Logs {
            workload,
            follow,
            since,
            tail,
            output,
        } => {
            let since_unix = since.map(|since| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |elapsed| elapsed.as_secs());
                i64::try_from(now.saturating_sub(since.as_secs())).unwrap_or(i64::MAX)
            });
            (
                Request::Logs {
                    workload,
                    follow,
                    since_unix,
                    tail,
                },
                output.output,
            )
        }
        Command::PluginsRemove { name, output } => (Request::PluginsRemove { name }, output.output),
        Command::Prune {
            orphans: _,
            dry_run,
            output,
        } => {
            if !dry_run && output.output == Output::Text {
                name_orphans(&client);
            }
            (Request::PruneOrphans { dry_run }, output.output)
        }
        Command::Store {
            command: StoreCommand::Backup { file, output },
        } => match absolute_new_file(&file) {
            Ok(path) => (Request::StoreBackup { path }, output.output),
            Err(message) => return fail(format!("vd store backup: {message}"), EXIT_FAILED),
        },
        Command::PluginsReload { name, output } => (Request::PluginsReload { name }, output.output),
    };

    let makes_progress = matches!(
        request,
        Request::Apply { .. }
            | Request::Delete { .. }
            | Request::Wait { .. }
            | Request::Rollback { .. }
    );
    let mut progress = progress::ApplyProgressView::new(
        makes_progress && output == Output::Text,
        makes_progress && output == Output::Json,
    );
    let mut watch = render::WatchView::new(output == Output::Json);
    let is_wait = matches!(request, Request::Wait { .. });
    if is_wait {
        interrupt_message(&request);
    }
    let answer = client.call(&request, &mut |frame| match frame {
        Frame::Progress(step) => progress.show(step),
        Frame::Notice(notice) => watch.notice(notice),
        Frame::Pod(change) => watch.pod(change),
        Frame::Log(line) => watch.log(line),
        Frame::Done(_) | Frame::Failed(_) => {}
    });
    let answer = match (answer, follow) {
        (Ok(response), Some(follow)) => {
            let followed = follow_rollouts(&client, &response, &follow, &mut progress);
            merge_wait(response, followed, output)
        }
        (answer, _) => answer,
    };
    progress.finish();
    match answer {
        Ok(response) => {
            match (output, &response) {
                // Streamed line by line already (JSON lines with -o json).
                (_, Response::LogsEnded { .. }) => {}
                (Output::Json, _) => render::json(&response),
                (Output::Text, _) => render::text(&response),
            }
            ExitCode::from(exit_code(&response))
        }
        Err(ClientError::Failed(failure)) => {
            match output {
                Output::Json => render::json(&failure),
                Output::Text => render::failure(&failure),
            }
            ExitCode::from(EXIT_FAILED)
        }
        Err(error @ ClientError::NotRunning { .. }) => {
            if matches!(request, Request::Version) {
                // The CLI's own version still answers.
                let cli = voodu_api::VersionInfo::current();
                println!(
                    "vd {} (plugin ABI {}, {})",
                    cli.version, cli.plugin_abi, cli.build
                );
            }
            fail(error, EXIT_NO_CONTROLLER)
        }
        Err(error) => fail(error, EXIT_FAILED),
    }
}

/// Names the orphans a prune is about to remove, before it removes them.
fn name_orphans(client: &Client) {
    let listed = client.call(&Request::PruneOrphans { dry_run: true }, &mut |_| {});
    if let Ok(Response::Pruned { replicas, .. }) = listed {
        for replica in &replicas {
            println!(
                "{}: removing replica {} ({}), drained first",
                replica.workload, replica.replica_id, replica.container_name
            );
        }
    }
}

/// A file to be written, as an absolute path: its directory must exist
/// (the controller writes it, from its own working directory).
fn absolute_new_file(file: &Path) -> Result<PathBuf, String> {
    let name = file
        .file_name()
        .ok_or_else(|| format!("{} is not a file name", file.display()))?;
    let parent = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let directory = std::fs::canonicalize(parent)
        .map_err(|error| format!("cannot use the directory {}: {error}", parent.display()))?;
    Ok(directory.join(name))
}

/// The exit code of a successful answer: 1 when it carries errors (a
/// workload stored but not converged, a delete that did not finish), from
/// the typed report, never from a message's words.
fn exit_code(response: &Response) -> u8 {
    let failed = match response {
        Response::Applied(report) => !report.errors.is_empty(),
        Response::Waited(report) => !report.errors.is_empty(),
        Response::Deleted(report) => !report.errors.is_empty(),
        _ => false,
    };
    if failed {
        EXIT_FAILED
    } else {
        0
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Set when this process runs a controller (`vd up`): Ctrl-C then belongs to
/// the controller's own graceful shutdown.
static RUNS_CONTROLLER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// On Ctrl-C while following a rollout, says that the rollout goes on and
/// how to follow it again, and exits.
fn interrupt_message(request: &Request) {
    if RUNS_CONTROLLER.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let workloads: Vec<String> = match request {
        Request::Wait { workloads, .. } => workloads.iter().map(ToString::to_string).collect(),
        _ => Vec::new(),
    };
    let _ = ctrlc::set_handler(move || {
        let again = match workloads.as_slice() {
            [one] => format!("`vd rollout status {one}`"),
            _ => "`vd rollout status KIND/SCOPE/NAME`".to_owned(),
        };
        eprintln!(
            "\nvd: stopped waiting; the rollout goes on in the controller (Ctrl-C never cancels it) — {again} follows it again"
        );
        std::process::exit(i32::from(EXIT_INTERRUPTED));
    });
}

/// Follows the rollouts an apply or delete started, streaming their steps
/// into `progress`.
fn follow_rollouts(
    client: &Client,
    response: &Response,
    follow: &FollowUp,
    progress: &mut progress::ApplyProgressView,
) -> Result<WaitReport, ClientError> {
    let (workloads, since_event) = match response {
        Response::Applied(report) => (
            report
                .workloads
                .iter()
                .filter_map(|applied| applied.workload.parse::<WorkloadId>().ok())
                .collect::<Vec<_>>(),
            report.since_event,
        ),
        Response::Deleted(report) => (
            report.workload.parse::<WorkloadId>().into_iter().collect(),
            report.since_event,
        ),
        _ => return Ok(WaitReport::default()),
    };
    let request = Request::Wait {
        workloads,
        since_event: Some(since_event),
        timeout_ms: follow.timeout.map(duration_ms),
    };
    interrupt_message(&request);
    match client.call(&request, &mut |frame| {
        if let Frame::Progress(step) = frame {
            progress.show(step)
        }
    })? {
        Response::Waited(report) => Ok(report),
        _ => Err(ClientError::Protocol(
            "the controller answered a wait with something else".into(),
        )),
    }
}

/// Folds what following the rollouts saw into the first answer. Warnings
/// were shown as they happened in text mode, so only JSON gets them again.
fn merge_wait(
    response: Response,
    followed: Result<WaitReport, ClientError>,
    output: Output,
) -> Result<Response, ClientError> {
    let followed = followed?;
    let keep_warnings = output == Output::Json;
    Ok(match response {
        Response::Applied(mut report) => {
            if keep_warnings {
                report.warnings.extend(followed.warnings);
            }
            report.errors.extend(followed.errors);
            Response::Applied(report)
        }
        Response::Deleted(mut report) => {
            report.pending = false;
            if keep_warnings {
                report.warnings.extend(followed.warnings);
            }
            report.errors.extend(followed.errors);
            Response::Deleted(report)
        }
        other => other,
    })
}

#[cfg(test)]
mod exit_code_tests {
    use super::*;
    use voodu_api::DeleteReport;
    use voodu_model::diagnostic::Diagnostic;

    fn deleted(warnings: &[&str], errors: &[&str]) -> Response {
        let diagnostics =
            |messages: &[&str]| messages.iter().map(|m| Diagnostic::general(*m)).collect();
        Response::Deleted(DeleteReport {
            workload: "deployment/prod/esl".into(),
            forgotten: Vec::new(),
            pending: false,
            warnings: diagnostics(warnings),
            errors: diagnostics(errors),
            since_event: 0,
        })
    }

    #[test]
    fn a_delete_fails_on_its_errors_never_on_a_warnings_words() {
        assert_eq!(exit_code(&deleted(&[], &[])), 0);
        assert_eq!(
            exit_code(&deleted(&["stored, but a plugin could not be told"], &[])),
            0,
            "a warning, whatever it says"
        );
        assert_eq!(exit_code(&deleted(&[], &["did not converge"])), EXIT_FAILED);
    }
}
