//! `vd apply`'s progress: a spinner on a terminal, plain lines otherwise,
//! both on stderr so stdout carries only the answer.
//!
//! The spinner shows the step in progress with its clock, and counts where
//! there are some, per workload: `starting replica 2/3 1s`, `replacing
//! replica 2/4 (rolling update)`, `draining replica 50be (traffik "http"
//! block) 6s of 8s`. Each finished step is a plain line, and
//! a warning is printed when it happens. With `-o json`, every step is a
//! JSON line on stderr instead.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use anstream::eprintln;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use voodu_api::{ApplyProgress, WorkloadId};

/// Shows apply progress as frames arrive.
pub struct ApplyProgressView {
    enabled: bool,
    json: bool,
    spinner: Option<ProgressBar>,
    /// The replicas a `starting N replicas` step is starting, per workload,
    /// and how many have started: the spinner counts them.
    starting: HashMap<WorkloadId, (usize, usize)>,
    /// Whether stderr takes colour (a terminal, and `NO_COLOR` unset).
    colour: bool,
    /// The step each workload last showed as a plain line: a step shown
    /// again unchanged (a rollout that keeps waiting) is not repeated.
    shown: HashMap<WorkloadId, String>,
}

impl ApplyProgressView {
    /// A view: `text` shows steps for people (a spinner on a terminal,
    /// lines otherwise), `json` prints each as a JSON line; neither shows
    /// nothing (other verbs).
    pub fn new(text: bool, json: bool) -> Self {
        let enabled = text;
        let spinner = (enabled && !json && std::io::stderr().is_terminal()).then(|| {
            let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            spinner.set_style(
                ProgressStyle::with_template("{spinner} {prefix} {elapsed}{msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            spinner.enable_steady_tick(Duration::from_millis(100));
            spinner
        });
        ApplyProgressView {
            enabled: enabled || json,
            json,
            spinner,
            starting: HashMap::new(),
            colour: anstream::AutoStream::choice(&std::io::stderr())
                != anstream::ColorChoice::Never,
            shown: HashMap::new(),
        }
    }

    /// Sets the step in progress; its clock starts again. A drain's
    /// budget (`..., budget 8s`) shows as `6s of 8s`.
    fn current(&mut self, workload: &WorkloadId, message: &str) {
        let Some(spinner) = &self.spinner else {
            if self.shown.get(workload).map(String::as_str) != Some(message) {
                eprintln!("{workload}: {message}");
                self.shown.insert(workload.clone(), message.to_owned());
            }
            return;
        };
        let (text, of) = match message.rsplit_once(", budget ") {
            Some((text, budget)) => (text, format!(" of {budget}")),
            None => (message, String::new()),
        };
        spinner.set_prefix(format!("{workload}: {text}"));
        spinner.set_message(of);
        spinner.reset_elapsed();
    }

    /// Prints a finished line; its styles go only where stderr takes
    /// colour (anstream strips them from a pipe, a file or `NO_COLOR`).
    fn line(&self, text: String) {
        match &self.spinner {
            Some(spinner) if self.colour => spinner.println(text),
            Some(spinner) => spinner.println(anstream::adapter::strip_str(&text).to_string()),
            None => eprintln!("{text}"),
        }
    }

    /// Shows one step.
    pub fn show(&mut self, step: &ApplyProgress) {
        if !self.enabled {
            return;
        }
        if self.json {
            match serde_json::to_string(step) {
                Ok(line) => eprintln!("{line}"),
                Err(error) => eprintln!("cannot print a step as JSON: {error}"),
            }
            return;
        }
        match step {
            // Parsing's own problems are counted with the rest, once, in
            // the refusal's total: a count here would disagree with it.
            ApplyProgress::Parsed { workloads, .. } => {
                self.line(format!("parsed {workloads} workload(s)"));
            }
            ApplyProgress::Validating { workload, blocks } => match &self.spinner {
                Some(spinner) => {
                    spinner.set_prefix(format!("validating {workload}"));
                    spinner.set_message("");
                    spinner.reset_elapsed();
                }
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
                if message.starts_with("started replica") {
                    if let Some((total, started)) = self.starting.get_mut(workload) {
                        if *started < *total {
                            *started += 1;
                            let (count, total) = (*started + 1, *total);
                            if count <= total {
                                let step = format!("starting replica {count}/{total}");
                                self.current(workload, &step);
                            }
                        }
                    }
                }
            }
            ApplyProgress::Step { workload, message } => {
                // `starting 3 replicas (scale up)`: count them as they start.
                let total = message
                    .strip_prefix("starting ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|count| count.parse::<usize>().ok());
                match total {
                    Some(total) => {
                        self.starting.insert(workload.clone(), (total, 0));
                        self.current(workload, &format!("starting replica 1/{total}"));
                    }
                    None => self.current(workload, message),
                }
            }
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
