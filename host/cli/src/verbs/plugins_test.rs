//! `vd plugins:test FILE.so -f MANIFEST [--through ADDR]`: an acceptance
//! run of a plugin on the engine, with a throwaway controller (see
//! `voodu_controller::acceptance`, which the `vd` binary supplies as
//! [`TestPlugin`], so that this crate stays a client). One line per step
//! as it ends, the plugin's calls, and a summary; exit 0 only when no step
//! failed and no request was lost.

use std::path::PathBuf;
use std::process::ExitCode;

use anstream::println;
use voodu_api::acceptance::{TestPlan, TestReport, TestStep, Through};

use super::check::outcome_word;
use super::plugins::call_figures_cells;
use crate::render::table;
use crate::{fail, Output, OutputArg, EXIT_FAILED};

/// Runs the plan, telling each step as it ends; the whole report.
pub type TestPlugin = fn(&TestPlan, &mut dyn FnMut(&TestStep)) -> TestReport;

/// `vd plugins:test`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsTestArgs {
    /// The plugin's shared object (.so).
    path: PathBuf,
    /// The manifest to apply: workloads with the plugin's blocks.
    #[arg(short = 'f', long = "file", value_name = "MANIFEST")]
    manifest: PathBuf,
    /// Send requests through the address the plugin serves the whole run:
    /// tcp://IP:PORT (a line sent, one read back) or http://IP:PORT/PATH
    /// (a GET answered below 500).
    #[arg(long, value_name = "ADDR")]
    through: Option<Through>,
    #[command(flatten)]
    output: OutputArg,
}

impl PluginsTestArgs {
    /// Runs the acceptance run with `test`, and prints it.
    pub fn run(self, test: TestPlugin) -> ExitCode {
        let absolute = |path: &PathBuf, what: &str| {
            std::fs::canonicalize(path).map_err(|error| {
                fail(
                    format!("plugins:test: {what} {}: {error}", path.display()),
                    EXIT_FAILED,
                )
            })
        };
        let plugin = match absolute(&self.path, "the plugin") {
            Ok(path) => path,
            Err(code) => return code,
        };
        let manifest = match absolute(&self.manifest, "the manifest") {
            Ok(path) => path,
            Err(code) => return code,
        };
        let vd = match std::env::current_exe() {
            Ok(vd) => vd,
            Err(error) => return fail(format!("plugins:test: {error}"), EXIT_FAILED),
        };
        let plan = TestPlan {
            plugin,
            manifest,
            through: self.through,
            vd,
        };
        let text = self.output.output == Output::Text;
        let report = test(&plan, &mut |step| {
            if text {
                print_step(step);
            }
        });
        match self.output.output {
            Output::Json => match serde_json::to_string_pretty(&report) {
                Ok(json) => println!("{json}"),
                Err(error) => return fail(format!("plugins:test: {error}"), EXIT_FAILED),
            },
            Output::Text => print_summary(&report),
        }
        if report.passed() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// One step: outcome, name, time, what was seen, and the requests.
fn print_step(step: &TestStep) {
    let requests = step
        .requests
        .as_ref()
        .map(|requests| {
            let mut said = format!(
                " [{} answered, {} failed",
                requests.answered, requests.failed
            );
            if let Some(first) = &requests.first_failure {
                said.push_str(&format!(": {first}"));
            }
            said + "]"
        })
        .unwrap_or_default();
    println!(
        "{}  {} ({:.1}s): {}{requests}",
        outcome_word(step.outcome),
        step.name,
        step.took_ms as f64 / 1000.0,
        step.detail
    );
}

/// The plugin's calls, then one line: steps and requests.
fn print_summary(report: &TestReport) {
    if !report.calls.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = report.calls.iter().map(call_figures_cells).collect();
        table(&["CALL", "CALLS", "REFUSED", "ERRORS", "P99"], &rows);
    }
    let failed = report
        .steps
        .iter()
        .filter(|step| step.outcome == voodu_api::acceptance::StepOutcome::Fail)
        .count();
    let requests = report
        .requests
        .as_ref()
        .map(|requests| {
            format!(
                "; {} request(s) answered, {} failed",
                requests.answered, requests.failed
            )
        })
        .unwrap_or_default();
    println!(
        "{}: {} step(s), {failed} failed{requests}",
        report.file,
        report.steps.len()
    );
}
