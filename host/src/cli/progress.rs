//! `vd apply`'s progress: a spinner on a terminal, plain lines otherwise,
//! both on stderr so stdout carries only the answer.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::apply::ApplyProgress;

/// Shows apply progress as frames arrive.
pub struct ApplyProgressView {
    enabled: bool,
    spinner: Option<ProgressBar>,
}

impl ApplyProgressView {
    /// A view; `enabled` is false for JSON output and for other verbs.
    pub fn new(enabled: bool) -> Self {
        let spinner = (enabled && std::io::stderr().is_terminal()).then(|| {
            let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            spinner.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            spinner.enable_steady_tick(Duration::from_millis(100));
            spinner
        });
        ApplyProgressView { enabled, spinner }
    }

    fn line(&self, text: String) {
        match &self.spinner {
            Some(spinner) => spinner.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// Shows one step.
    pub fn show(&mut self, step: &ApplyProgress) {
        if !self.enabled {
            return;
        }
        match step {
            ApplyProgress::Parsed {
                workloads,
                problems,
            } => {
                let problems = match problems {
                    0 => String::new(),
                    1 => ", 1 problem".to_owned(),
                    n => format!(", {n} problems"),
                };
                self.line(format!("parsed {workloads} workload(s){problems}"));
            }
            ApplyProgress::Validating { workload, blocks } => match &self.spinner {
                Some(spinner) => spinner.set_message(format!("validating {workload}")),
                None => eprintln!("validating {workload} ({blocks} plugin block(s))"),
            },
            ApplyProgress::Validated { workload, problems } => {
                let verdict = match problems {
                    0 => "valid".to_owned(),
                    1 => "1 problem".to_owned(),
                    n => format!("{n} problems"),
                };
                self.line(format!("{workload}: {verdict}"));
            }
            ApplyProgress::Runtime { workload, message } => {
                self.line(format!("{workload}: {message}"));
            }
            ApplyProgress::Step { workload, message } => match &self.spinner {
                Some(spinner) => spinner.set_message(format!("{workload}: {message}")),
                None => eprintln!("{workload}: {message}"),
            },
            ApplyProgress::Warning { workload, message } => {
                self.line(super::render::warning_text(&format!(
                    "{workload}: {message}"
                )));
            }
        }
    }

    /// Clears the spinner.
    pub fn finish(&mut self) {
        if let Some(spinner) = self.spinner.take() {
            spinner.finish_and_clear();
        }
    }
}
