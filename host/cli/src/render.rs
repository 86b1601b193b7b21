//! How `vd` prints answers: JSON as the API sends it, or text for people.
//! Colour goes through anstream, which drops it when the stream is not a
//! terminal or `NO_COLOR` is set.
//!
//! Each verb's text lives in its module under `verbs/`; this module holds
//! what they share (styles, diagnostics, tables, JSON, watches) and
//! [`text`], which hands each answer to its verb's renderer.

use anstream::{eprintln, println};
use anstyle::{AnsiColor, Style};
use serde::Serialize;

use voodu_api::Notice;
use voodu_api::{Failure, PodChange, Response};
use voodu_model::diagnostic::Diagnostic;

use crate::verbs;

/// The style of errors.
pub const ERROR: Style = AnsiColor::Red.on_default().bold();
/// The style of warnings.
pub const WARNING: Style = AnsiColor::Yellow.on_default().bold();
/// The style of what went well.
pub const GOOD: Style = AnsiColor::Green.on_default();
/// The style of what matters less.
const DIM: Style = Style::new().dimmed();
/// The style of headings.
pub const HEADING: Style = Style::new().bold();

/// Prints a value as pretty JSON on stdout.
pub fn json(value: &impl Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(error) => error_line(&format!("cannot print the answer as JSON: {error}")),
    }
}

/// `warning: <message>`, styled for stderr.
pub fn warning_text(message: &str) -> String {
    format!("{WARNING}warning{WARNING:#}: {message}")
}

/// Prints `error: <message>` on stderr.
pub fn error_line(message: &str) {
    eprintln!("{ERROR}error{ERROR:#}: {message}");
}

/// Prints, on stderr, each node an answer had to leave out (it did not
/// answer, or is lost): such an answer is incomplete.
pub fn unanswered(response: &Response) {
    for left_out in response.unanswered() {
        error_line(&left_out.to_string());
    }
}

/// Prints a diagnostic on stderr as `<level>: <diagnostic>`, with its
/// location when it has one.
pub fn diagnostic(level: &str, style: Style, diagnostic: &Diagnostic) {
    eprintln!("{style}{level}{style:#}: {diagnostic}");
    if let (Some(_), Some(location)) = (&diagnostic.workload, &diagnostic.location) {
        eprintln!("  {DIM}-->{DIM:#} {location}");
    }
}

/// Prints a failed request: every problem, then the summary.
pub fn failure(failure: &Failure) {
    for problem in &failure.diagnostics {
        diagnostic("error", ERROR, problem);
    }
    error_line(&failure.message);
}

/// Prints a successful answer for people, by its verb's renderer.
pub fn text(response: &Response) {
    match response {
        Response::Applied(report) => verbs::apply::applied(report),
        Response::Described(description) => verbs::describe::described(description),
        Response::Workloads { workloads } => verbs::get::workload_table(workloads),
        Response::Pods { replicas, .. } => verbs::get::replica_table(replicas, true),
        Response::Stats { replicas, .. } => verbs::stats::stats_table(replicas),
        Response::Deleted(report) => verbs::delete::deleted(report),
        Response::Reloaded {
            plugin,
            was_quarantined,
            instances_left_behind,
        } => verbs::plugins::reloaded(plugin, *was_quarantined, *instances_left_behind),
        Response::Installed {
            plugin,
            replaced_version,
            revalidated,
            statement,
        } => verbs::plugins::installed(
            plugin,
            replaced_version.as_deref(),
            revalidated,
            statement.is_some(),
        ),
        Response::PluginStatement { statement, .. } => println!("{statement}"),
        Response::PluginSigned {
            name,
            key_id,
            removed,
        } => verbs::plugins::signed(name, key_id, *removed),
        Response::Plugins { plugins, failures } => verbs::plugins::plugin_table(plugins, failures),
        Response::Waited(report) => verbs::rollout::waited(report),
        Response::Events { events } => verbs::events::events(events),
        Response::Removed { name, statement } => verbs::plugins::removed(name, statement.is_some()),
        Response::Nodes { nodes } => verbs::get::node_table(nodes),
        Response::NodeRemoved {
            name,
            ordinals,
            deployment_replicas,
        } => verbs::node::removed(name, ordinals, *deployment_replicas),
        Response::Pruned { replicas, dry_run } => verbs::prune::pruned(replicas, *dry_run),
        Response::BackedUp {
            path,
            bytes,
            store_id,
        } => verbs::store::backed_up(path, *bytes, store_id),
        // The lines were printed as they came; a build context is one
        // node's answer to another, never a client's.
        Response::LogsEnded { .. } | Response::Exited { .. } | Response::BuildContext { .. } => {}
        Response::Stopped { workload, replicas } => verbs::stops::stopped(workload, replicas),
        Response::Started { workload, replicas } => verbs::stops::started(workload, replicas),
        Response::RunEnded {
            workload,
            run_id,
            container,
            ending,
            ..
        } => verbs::run::ended(workload, run_id, container, ending),
        Response::DryRun(report) => verbs::apply::dry_run(report),
        Response::History {
            workload: _,
            current,
            revisions,
        } => verbs::history::history_table(*current, revisions),
        Response::Version(controller) => verbs::version::version(controller),
        Response::Upgraded(worker) => verbs::version::upgraded(worker),
        Response::Explained {
            plugin,
            version,
            schema,
            settings_schema,
            settings,
        } => verbs::explain::explained(
            plugin,
            version,
            schema.as_ref(),
            settings_schema.as_ref(),
            settings.as_ref(),
        ),
        Response::PluginSettings {
            plugin,
            version,
            settings,
            previous,
            schema,
        } => verbs::plugins::settings_shown(
            plugin,
            version,
            settings,
            previous.as_ref(),
            schema.is_some(),
        ),
        Response::PluginReply {
            plugin,
            call,
            reply,
            elapsed_ms,
        } => verbs::plugins::reply(plugin, *call, reply, *elapsed_ms),
        Response::ConfigChanged(change) => verbs::config::changed(change),
        Response::Config(listing) => verbs::config::listing(listing),
        Response::SecretsResealed {
            resealed,
            key,
            retired,
        } => verbs::config::resealed(*resealed, key, retired),
        Response::ConfigValue { bucket, variable } => verbs::config::value(bucket, variable),
    }
}

/// Prints rows as left-aligned columns under a bold header.
/// Prints rows under a bold header, each column as wide as its widest
/// cell and two spaces apart (elastic tabstops, by tabwriter).
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    use std::io::Write;
    let mut aligned = tabwriter::TabWriter::new(Vec::new()).minwidth(0).padding(2);
    let header: Vec<String> = header.iter().map(|title| (*title).to_owned()).collect();
    let written = std::iter::once(&header).chain(rows).try_for_each(|cells| {
        let cells: Vec<String> = cells.iter().map(|cell| cell.replace('\t', " ")).collect();
        writeln!(aligned, "{}", cells.join("\t"))
    });
    let text = match written.map_err(|error| error.to_string()).and_then(|()| {
        aligned
            .into_inner()
            .map_err(|error| error.to_string())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    }) {
        Ok(text) => text,
        Err(error) => return error_line(&format!("cannot lay out the table: {error}")),
    };
    let mut lines = text.lines().map(str::trim_end);
    if let Some(first) = lines.next() {
        println!("{HEADING}{first}{HEADING:#}");
    }
    for line in lines {
        println!("{line}");
    }
}

/// Prints the frames of a watch as they arrive: a line each, or one JSON
/// object per line.
pub struct WatchView {
    json: bool,
    header: bool,
    logs: crate::verbs::LogView,
}

impl WatchView {
    /// A view printing JSON lines, or text; log lines as `logs` says.
    pub fn new(json: bool, logs: crate::verbs::LogView) -> Self {
        WatchView {
            json,
            header: false,
            logs,
        }
    }

    fn json_line(value: &impl Serialize) {
        match serde_json::to_string(value) {
            Ok(line) => println!("{line}"),
            Err(error) => error_line(&format!("cannot print the answer as JSON: {error}")),
        }
    }

    /// One event.
    pub fn notice(&mut self, notice: &Notice) {
        if self.json {
            Self::json_line(notice);
        } else {
            println!("{}", verbs::events::notice_line(notice));
        }
    }

    /// What a `vd exec` command wrote, as it wrote it: standard output to
    /// standard output, standard error to standard error.
    pub fn output(&mut self, output: &voodu_api::ExecOutput) {
        use std::io::Write;
        if self.json {
            Self::json_line(output);
            return;
        }
        let written = if output.stderr {
            let mut stderr = std::io::stderr().lock();
            stderr
                .write_all(output.text.as_bytes())
                .and_then(|()| stderr.flush())
        } else {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(output.text.as_bytes())
                .and_then(|()| stdout.flush())
        };
        // A reader that went away (`| head`) is no error of the command's.
        let _ = written;
    }

    /// One log line, prefixed with its replica.
    pub fn log(&mut self, line: &voodu_api::LogLine) {
        if let Some(grep) = &self.logs.grep {
            if !line.line.contains(grep.as_str()) {
                return;
            }
        }
        if self.json {
            Self::json_line(line);
        } else if self.logs.no_prefix {
            println!("{}", line.line);
        } else {
            match &line.node {
                Some(node) => println!(
                    "{HEADING}{} on {node}{HEADING:#} | {}",
                    line.replica_id, line.line
                ),
                None => println!("{HEADING}{}{HEADING:#} | {}", line.replica_id, line.line),
            }
        }
    }

    /// One replica change.
    pub fn pod(&mut self, change: &PodChange) {
        if self.json {
            Self::json_line(change);
            return;
        }
        if !self.header {
            self.header = true;
            println!(
                "{HEADING}{:<9} {:<28} {:<8} {:<24} {:<10} {}{HEADING:#}",
                "CHANGE", "WORKLOAD", "REPLICA", "CONTAINER", "STATE", "ADDRESS"
            );
        }
        let replica = &change.replica;
        println!(
            "{:<9} {:<28} {:<8} {:<24} {:<10} {}",
            change.change,
            replica.workload.to_string(),
            replica.replica_id,
            replica.container_name,
            replica.state,
            replica.ip.as_deref().unwrap_or("-")
        );
    }
}
