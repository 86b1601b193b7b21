//! `vd plugins:check FILE [--block FILE.hcl]...`: the conformance run of
//! one plugin file, with no controller and no Docker.
//!
//! The run itself is the `vd` binary's ([`CheckPlugin`], from
//! `voodu-controller`), in a child process of `vd` (`--child`), which
//! writes one JSON [`CheckStep`] per line: a plugin that crashes or calls
//! `exit()` ends the child, and this process names the check it was in.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anstream::println;
use voodu_api::check::{CheckLine, CheckOutcome, CheckReport, CheckStep};
use voodu_plugin_abi::messages::Block;

use crate::render::{ERROR, GOOD, WARNING};
use crate::{fail, Output, OutputArg, EXIT_FAILED};

/// Runs the checks of the plugin at the path with the blocks, each call
/// bounded by the duration, telling each step to the callback. The `vd`
/// binary supplies it (from `voodu-controller`), so that this crate stays
/// free of the plugin host.
pub type CheckPlugin = fn(&Path, &[Block], Duration, &mut dyn FnMut(CheckStep));

/// How much longer each call may take under valgrind, which runs code tens
/// of times slower.
pub const VALGRIND_SLOWDOWN: u32 = 20;

/// How many ports the check gives a plugin for listeners of its own.
pub const PORT_RANGE_SIZE: u16 = 16;

/// The first of [`PORT_RANGE_SIZE`] ports that were free when the check
/// started: the run of them from a port the system picked, when they all
/// bind, else from 20000 on.
fn check_port_range() -> u16 {
    let free = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
    for _ in 0..20 {
        let Ok(probe) = std::net::TcpListener::bind("127.0.0.1:0") else {
            break;
        };
        let Ok(address) = probe.local_addr() else {
            break;
        };
        drop(probe);
        let first = address.port();
        if first <= u16::MAX - PORT_RANGE_SIZE && (first..first + PORT_RANGE_SIZE).all(free) {
            return first;
        }
    }
    20_000
}

/// The exit code valgrind is told to end with when it found an error, so
/// that it is told apart from the plugin's own.
const VALGRIND_ERROR_EXIT: i32 = 97;

/// `vd plugins:check`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsCheckArgs {
    /// The plugin's shared object (.so).
    path: PathBuf,
    /// A file of blocks to validate (`traffik "http" { port = 8084 }`);
    /// without one, the empty block.
    #[arg(long = "block", value_name = "FILE.hcl")]
    blocks: Vec<PathBuf>,
    /// The bound on every plugin call, as the controller's
    /// `--plugin-timeout`.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    plugin_timeout: Duration,
    /// Run the whole check under valgrind (memcheck), and fail on a leak
    /// or an invalid access, with valgrind's first report; each call's
    /// bound is multiplied by [`VALGRIND_SLOWDOWN`] meanwhile.
    #[arg(long)]
    valgrind: bool,
    /// Run the checks in this process, one JSON step per line (what `vd`
    /// runs in its child).
    #[arg(long, hide = true)]
    child: bool,
    #[command(flatten)]
    output: OutputArg,
}

impl PluginsCheckArgs {
    /// Runs the check: in a child process, or as that child.
    pub fn run(self, check: CheckPlugin) -> ExitCode {
        let blocks = match read_blocks(&self.blocks) {
            Ok(blocks) => blocks,
            Err(problems) => {
                return fail(
                    format!("plugins:check: {}", problems.join("; ")),
                    EXIT_FAILED,
                )
            }
        };
        if self.child {
            let mut stdout = std::io::stdout().lock();
            check(&self.path, &blocks, self.plugin_timeout, &mut |step| {
                if let Ok(line) = serde_json::to_string(&step) {
                    let _ = writeln!(stdout, "{line}");
                    let _ = stdout.flush();
                }
            });
            return ExitCode::SUCCESS;
        }
        self.in_a_child()
    }

    fn in_a_child(&self) -> ExitCode {
        let shown = self.path.display().to_string();
        // The child loads a copy in a directory of its own, as an install
        // stages one: what a crash leaves beside the file (the host's
        // crash marker) never lands in the author's build directory.
        let staged = tempfile::tempdir().and_then(|directory| {
            let name = self.path.file_name().unwrap_or_default();
            let copy = directory.path().join(name);
            std::fs::copy(&self.path, &copy).map(|_| (directory, copy))
        });
        let (staging, copy) = match staged {
            Ok(staged) => staged,
            Err(error) => return fail(format!("plugins:check: {shown}: {error}"), EXIT_FAILED),
        };
        let valgrind_log = staging.path().join("valgrind.log");
        let suppressions = staging.path().join("host.supp");
        if self.valgrind && !valgrind_installed() {
            return fail(
                "plugins:check: --valgrind needs valgrind, which is not installed — install it (Debian: apt-get install valgrind), or check without --valgrind",
                EXIT_FAILED,
            );
        }
        if self.valgrind {
            if let Err(error) = std::fs::write(&suppressions, HOST_SUPPRESSIONS) {
                return fail(format!("plugins:check: {error}"), EXIT_FAILED);
            }
        }
        let plugin_timeout = if self.valgrind {
            self.plugin_timeout * VALGRIND_SLOWDOWN
        } else {
            self.plugin_timeout
        };
        let spawned = std::env::current_exe().and_then(|vd| {
            let mut command = if self.valgrind {
                let mut valgrind = std::process::Command::new("valgrind");
                valgrind
                    .arg("--tool=memcheck")
                    .arg("--leak-check=full")
                    .arg("--show-leak-kinds=definite")
                    .arg("--errors-for-leak-kinds=definite")
                    .arg(format!("--error-exitcode={VALGRIND_ERROR_EXIT}"))
                    .arg(format!("--suppressions={}", suppressions.display()))
                    .arg(format!("--log-file={}", valgrind_log.display()))
                    .arg(vd);
                valgrind
            } else {
                std::process::Command::new(vd)
            };
            command
                .arg("plugins:check")
                .arg(&copy)
                .arg("--plugin-timeout")
                .arg(humantime::format_duration(plugin_timeout).to_string())
                .arg("--child");
            for block in &self.blocks {
                command.arg("--block").arg(block);
            }
            // A directory and ports of the check's own for the plugin's
            // own files and listeners, never a live controller's.
            let scratch = staging.path().join("scratch");
            std::fs::create_dir_all(&scratch)?;
            let first = check_port_range();
            command
                .env(voodu_plugin_abi::ffi::SCRATCH_DIR_ENV, &scratch)
                .env(
                    voodu_plugin_abi::ffi::PORT_RANGE_ENV,
                    format!("{first}-{}", first + PORT_RANGE_SIZE - 1),
                );
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
        });
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                return fail(
                    format!("plugins:check: could not start the check: {error}"),
                    EXIT_FAILED,
                )
            }
        };
        let mut checks = Vec::new();
        let mut running: Option<String> = None;
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match serde_json::from_str::<CheckStep>(&line) {
                    Ok(CheckStep::Starting { name }) => running = Some(name),
                    Ok(CheckStep::Checked(mut check)) => {
                        running = None;
                        // Named as the author gave it, not as staged.
                        let staged = copy.display().to_string();
                        check.detail = check.detail.replace(&staged, &shown);
                        if self.output.output == Output::Text {
                            print_line(&check);
                        }
                        checks.push(check);
                    }
                    Err(_) => {}
                }
            }
        }
        let status = child.wait();
        let valgrind_found = self.valgrind
            && status
                .as_ref()
                .is_ok_and(|status| status.code() == Some(VALGRIND_ERROR_EXIT));
        let ended = match &status {
            Ok(status) if status.success() || valgrind_found => None,
            Ok(status) => Some(how_it_ended(status)),
            Err(error) => Some(format!("could not be waited for ({error})")),
        };
        if let Some(ended) = ended {
            let check = CheckLine {
                name: running.unwrap_or_else(|| "the run".into()),
                outcome: CheckOutcome::Fail,
                detail: format!("the plugin ended the process: {ended}; in a controller this ends the controller, and the plugin is quarantined at its next start"),
                fix: Some("return VOODU_STATUS_ERROR with a message instead of crashing or calling exit()".into()),
            };
            if self.output.output == Output::Text {
                print_line(&check);
            }
            checks.push(check);
        }
        if self.valgrind {
            let check = valgrind_check(&valgrind_log, valgrind_found, &copy, &shown);
            if self.output.output == Output::Text {
                print_line(&check);
            }
            checks.push(check);
        }
        let report = CheckReport::of(shown, checks);
        match self.output.output {
            Output::Json => match serde_json::to_string_pretty(&report) {
                Ok(json) => println!("{json}"),
                Err(error) => return fail(format!("plugins:check: {error}"), EXIT_FAILED),
            },
            Output::Text => println!(
                "{}: {} passed, {} warning(s), {} failed",
                report.file, report.passed, report.warnings, report.failed
            ),
        }
        if report.failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// `pass`, `warn` or `fail`, coloured.
pub(crate) fn outcome_word(outcome: CheckOutcome) -> String {
    match outcome {
        CheckOutcome::Pass => format!("{GOOD}pass{GOOD:#}"),
        CheckOutcome::Warn => format!("{WARNING}warn{WARNING:#}"),
        CheckOutcome::Fail => format!("{ERROR}fail{ERROR:#}"),
    }
}

/// What the host itself keeps for the process on purpose, which a leak
/// check must not blame on the plugin: abi_stable keeps every library it
/// loads (and its path) loaded.
const HOST_SUPPRESSIONS: &str = "{
   voodu-host-keeps-loaded-libraries
   Memcheck:Leak
   match-leak-kinds: definite
   ...
   fun:*abi_stable*library*
}
";

/// Whether `valgrind` runs here.
fn valgrind_installed() -> bool {
    std::process::Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The check valgrind's log makes: pass with its summary, or fail with its
/// first error and the leak summary (the staged copy named as the author
/// gave the file).
fn valgrind_check(log: &Path, found: bool, staged: &Path, shown: &str) -> CheckLine {
    let text = std::fs::read_to_string(log)
        .unwrap_or_default()
        .replace(&staged.display().to_string(), shown);
    // valgrind prefixes each line with `==PID== `.
    let lines: Vec<&str> = text
        .lines()
        .map(|line| match line.split_once("== ") {
            Some((prefix, rest)) if prefix.starts_with("==") => rest,
            _ => line,
        })
        .collect();
    // The last summaries are the check's own process (a probe it forks
    // reports first).
    let summary = lines
        .iter()
        .rev()
        .find(|line| line.starts_with("ERROR SUMMARY:"))
        .copied()
        .unwrap_or("no ERROR SUMMARY in valgrind's log");
    let definitely = lines
        .iter()
        .rev()
        .find(|line| line.trim_start().starts_with("definitely lost:"))
        .map(|line| line.trim())
        .unwrap_or("definitely lost: 0 bytes");
    if !found {
        return CheckLine {
            name: "valgrind: no leak and no invalid access".into(),
            outcome: CheckOutcome::Pass,
            detail: format!("{summary}; {definitely}"),
            fix: None,
        };
    }
    // The first error's report: its headline and the frames under it.
    let first: Vec<&str> = lines
        .iter()
        .skip_while(|line| {
            !(line.starts_with("Invalid ")
                || line.contains("are definitely lost")
                || line.starts_with("Conditional jump")
                || line.starts_with("Use of uninitialised")
                || line.starts_with("Mismatched free"))
        })
        .take_while(|line| !line.is_empty())
        .take(8)
        .copied()
        .collect();
    CheckLine {
        name: "valgrind: no leak and no invalid access".into(),
        outcome: CheckOutcome::Fail,
        detail: format!("{summary}; {definitely}; first: {}", first.join(" | ")),
        fix: Some(
            "free what you allocate (replies come back to your free member; everything else is yours), and read and write only inside your buffers".into(),
        ),
    }
}

/// How a child process ended, for the report.
fn how_it_ended(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("it exited with code {code}"),
        (_, Some(signal)) => format!("killed by signal {signal} ({})", signal_name(signal)),
        _ => "it ended".into(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        _ => "a signal",
    }
}

/// One check, as a line for people.
fn print_line(check: &CheckLine) {
    let outcome = outcome_word(check.outcome);
    match &check.fix {
        Some(fix) => println!("{outcome}  {}: {} — {fix}", check.name, check.detail),
        None => println!("{outcome}  {}: {}", check.name, check.detail),
    }
}

/// The blocks of every `--block` file, in order.
fn read_blocks(files: &[PathBuf]) -> Result<Vec<Block>, Vec<String>> {
    let mut blocks = Vec::new();
    for file in files {
        let shown = file.display().to_string();
        let text =
            std::fs::read_to_string(file).map_err(|error| vec![format!("{shown}: {error}")])?;
        blocks.extend(voodu_manifest::body::plugin_blocks(&shown, &text)?);
    }
    Ok(blocks)
}
