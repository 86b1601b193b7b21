//! How `vd` prints answers: JSON as the API sends it, or text for people.
//! Colour goes through anstream, which drops it when the stream is not a
//! terminal or `NO_COLOR` is set.

use anstream::{eprintln, println};
use anstyle::{AnsiColor, Style};
use serde::Serialize;
use serde_json::Value;

use voodu_api::DeleteReport;
use voodu_api::LoadFailure;
use voodu_api::Notice;
use voodu_api::{ApplyReport, WorkloadOutcome};
use voodu_api::{
    Description, Failure, PluginRow, PodChange, Response, WaitReport, WorkloadSummary,
};
use voodu_model::diagnostic::Diagnostic;

const ERROR: Style = AnsiColor::Red.on_default().bold();
const WARNING: Style = AnsiColor::Yellow.on_default().bold();
const GOOD: Style = AnsiColor::Green.on_default();
const DIM: Style = Style::new().dimmed();
const HEADING: Style = Style::new().bold();

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

fn diagnostic(level: &str, style: Style, diagnostic: &Diagnostic) {
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

/// Prints a successful answer for people.
pub fn text(response: &Response) {
    match response {
        Response::Applied(report) => applied(report),
        Response::Described(description) => described(description),
        Response::Workloads { workloads } => workload_table(workloads),
        Response::Pods { replicas } => replica_table(replicas, true),
        Response::Deleted(report) => deleted(report),
        Response::Reloaded {
            plugin,
            was_quarantined,
            instances_left_behind,
        } => {
            let from = if *was_quarantined {
                " (out of quarantine)"
            } else {
                ""
            };
            println!(
                "{GOOD}reloaded{GOOD:#} plugin {} {}{from}: a fresh instance, which has every block's endpoint set",
                plugin.name, plugin.version
            );
            if *instances_left_behind > 0 {
                println!(
                    "{instances_left_behind} earlier instance(s) of it stay in the controller until it restarts (a thread and the library each)"
                );
            }
        }
        Response::Installed {
            plugin,
            replaced_version,
            revalidated,
        } => {
            let replaced = replaced_version
                .as_ref()
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
        }
        Response::Plugins { plugins, failures } => plugin_table(plugins, failures),
        Response::Waited(report) => waited(report),
        Response::Events { events } => {
            for notice in events {
                println!("{}", notice_line(notice));
            }
        }
        Response::Removed { name } => println!("{GOOD}removed{GOOD:#} plugin {name}"),
        Response::Pruned { replicas, dry_run } => pruned(replicas, *dry_run),
        Response::BackedUp {
            path,
            bytes,
            store_id,
        } => println!(
            "{GOOD}backed up{GOOD:#} the store ({store_id}) to {} ({bytes} bytes) — to restore it, stop the controller and put it at <root>/state.db (README, \"Backups\")",
            path.display()
        ),
        // The lines were printed as they came.
        Response::LogsEnded { .. } => {}
        Response::DryRun(report) => {
            for planned in &report.workloads {
                let verb = match planned.outcome {
                    WorkloadOutcome::Created => "would be created",
                    WorkloadOutcome::Updated => "would be updated",
                    WorkloadOutcome::Unchanged => "unchanged",
                };
                println!("{}: {GOOD}{verb}{GOOD:#}", planned.workload);
                for change in &planned.changes {
                    println!("    {change}");
                }
            }
            for warning in &report.warnings {
                diagnostic("warning", WARNING, warning);
            }
            println!("dry run: nothing was stored");
        }
        Response::History {
            workload: _,
            current,
            revisions,
        } => history_table(*current, revisions),
        Response::Version(controller) => {
            let cli = voodu_api::VersionInfo::current();
            println!(
                "vd {} (plugin ABI {}, {})",
                cli.version, cli.plugin_abi, cli.build
            );
            println!(
                "controller {} (plugin ABI {}, {})",
                controller.version, controller.plugin_abi, controller.build
            );
        }
    }
}

fn applied(report: &ApplyReport) {
    let (mut created, mut updated, mut unchanged, mut not_running) = (0, 0, 0, 0);
    for workload in &report.workloads {
        let blocks = match workload.blocks.len() {
            0 => String::new(),
            _ => format!(", with {}", workload.blocks.join(", ")),
        };
        // A workload stored but whose rollout failed is not "created" or
        // "updated" as far as its replicas go.
        let failed = report
            .errors
            .iter()
            .any(|error| error.workload.as_deref() == Some(workload.workload.as_str()));
        let (style, verb) = match (&workload.outcome, failed) {
            (WorkloadOutcome::Created, true) => {
                not_running += 1;
                (ERROR, "stored, not running")
            }
            (WorkloadOutcome::Updated | WorkloadOutcome::Unchanged, true) => {
                not_running += 1;
                (ERROR, "stored, not rolled out")
            }
            (WorkloadOutcome::Created, false) => {
                created += 1;
                (GOOD, "created")
            }
            (WorkloadOutcome::Updated, false) => {
                updated += 1;
                (GOOD, "updated")
            }
            (WorkloadOutcome::Unchanged, false) => {
                unchanged += 1;
                (GOOD, "unchanged")
            }
        };
        match workload.rolled_back_to {
            Some(to) => println!(
                "{}: {style}rolled back{style:#} to revision {to} as revision {}{blocks}{}",
                workload.workload,
                workload.revision,
                if failed { ", not rolled out" } else { "" }
            ),
            None => println!(
                "{}: {style}{verb}{style:#} (revision {}{blocks})",
                workload.workload, workload.revision
            ),
        }
    }
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    for error in &report.errors {
        diagnostic("error", ERROR, error);
    }
    if report.unchanged() && not_running == 0 {
        println!(
            "nothing changed: {} workload(s) already match what is stored",
            report.workloads.len()
        );
    } else if not_running > 0 {
        println!(
            "applied: {created} created, {updated} updated, {unchanged} unchanged; {not_running} stored but not running as applied (see the errors above)"
        );
    } else {
        println!("applied: {created} created, {updated} updated, {unchanged} unchanged");
    }
}

fn compact(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

fn described(description: &Description) {
    let workload = &description.workload;
    println!("{HEADING}{}{HEADING:#}", workload.id);
    println!("  revision   {}", workload.revision);
    println!(
        "  applied    {} (first applied {})",
        workload.updated_at, workload.created_at
    );
    if let Some(source) = &workload.source {
        println!("  source     {source}");
    }
    println!("{HEADING}core spec{HEADING:#}");
    if let Value::Object(core) = &workload.core_spec {
        let width = core.keys().map(String::len).max().unwrap_or(0);
        for (key, value) in core {
            println!("  {key:width$}  {}", compact(value));
        }
    }
    for warning in &description.not_acted_on {
        println!("  {WARNING}warning{WARNING:#}: {warning}");
    }
    println!("{HEADING}plugin blocks{HEADING:#} (in order)");
    if workload.blocks.is_empty() {
        println!("  none");
    }
    for (index, block) in workload.blocks.iter().enumerate() {
        println!("  {}. {}", index + 1, block.display_name());
        println!("       spec       {}", block.spec);
        println!(
            "       endpoints  {}",
            serde_json::to_value(block.endpoints).unwrap_or_default()
        );
    }
    if let Some(status) = &description.status {
        println!("{HEADING}rollout{HEADING:#}");
        let step = match (&status.step, status.step_ms) {
            (Some(step), Some(ms)) => format!(
                ": {step} ({})",
                humantime::format_duration(std::time::Duration::from_millis(ms - ms % 1000))
            ),
            _ => String::new(),
        };
        let style = match status.phase {
            voodu_api::Phase::Failed | voodu_api::Phase::CrashLooping => ERROR,
            _ => GOOD,
        };
        println!(
            "  status     {style}{}{style:#} (revision {}){step}",
            status.phase.as_str(),
            status.revision
        );
        if let Some(error) = &status.error {
            println!("  error      {error}");
        }
        for crash in &status.crashes {
            println!(
                "  crashes    replica {}: {} death(s) in a row{}{}{}",
                crash.replica_id,
                crash.deaths,
                crash
                    .last_exit_code
                    .map(|code| format!(", last exit code {code}"))
                    .unwrap_or_default(),
                if crash.oom_killed { ", OOM-killed" } else { "" },
                if crash.crash_looping {
                    " — crash-looping"
                } else {
                    ""
                }
            );
        }
    }
    println!("{HEADING}replicas{HEADING:#}");
    if description.replicas.is_empty() {
        println!("  none");
    } else {
        replica_table(&description.replicas, false);
    }
    println!("{HEADING}published endpoints{HEADING:#} (last set per block)");
    if description.publications.is_empty() {
        println!("  none yet");
    }
    for publication in &description.publications {
        let endpoints: Vec<String> = publication
            .endpoints
            .iter()
            .map(|endpoint| format!("{}={}", endpoint.replica_id, endpoint.address))
            .collect();
        println!(
            "  {}  generation {}  [{}]  at {}",
            voodu_model::block_display_name(&publication.block_type, &publication.labels),
            publication.generation,
            endpoints.join(", "),
            publication.at
        );
    }
    println!("{HEADING}events{HEADING:#} (oldest first)");
    for event in &description.events {
        let style = match event.level {
            voodu_api::EventLevel::Info => Style::new(),
            voodu_api::EventLevel::Warning => WARNING,
            voodu_api::EventLevel::Error => ERROR,
        };
        println!(
            "  {}  {style}{:<14}{style:#} {}",
            event.at, event.reason, event.message
        );
    }
}

/// Prints rows as left-aligned columns under a bold header.
/// Prints rows under a bold header, each column as wide as its widest
/// cell and two spaces apart (elastic tabstops, by tabwriter).
fn table(header: &[&str], rows: &[Vec<String>]) {
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

fn workload_table(workloads: &[WorkloadSummary]) {
    if workloads.is_empty() {
        println!("no workloads stored — `vd apply -f <manifests>` stores some");
        return;
    }
    let rows: Vec<Vec<String>> = workloads
        .iter()
        .map(|workload| {
            vec![
                workload.id.kind.to_string(),
                workload.id.scope.clone(),
                workload.id.name.clone(),
                workload.revision.to_string(),
                workload.replicas.to_string(),
                workload.image.clone().unwrap_or_else(|| "-".into()),
                if workload.blocks.is_empty() {
                    "-".into()
                } else {
                    workload.blocks.join(", ")
                },
                workload.updated_at.clone(),
            ]
        })
        .collect();
    table(
        &[
            "KIND", "SCOPE", "NAME", "REVISION", "REPLICAS", "IMAGE", "BLOCKS", "UPDATED",
        ],
        &rows,
    );
}

/// How long ago a Unix time was, shortly: `45s`, `12m`, `3h`, `2d`.
fn age(created_unix: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let seconds = now.saturating_sub(u64::try_from(created_unix).unwrap_or(0));
    match seconds {
        0..=119 => format!("{seconds}s"),
        120..=7_199 => format!("{}m", seconds / 60),
        7_200..=172_799 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

fn replica_table(replicas: &[voodu_api::Replica], with_workload: bool) {
    if replicas.is_empty() {
        println!("no replicas");
        return;
    }
    let rows: Vec<Vec<String>> = replicas
        .iter()
        .map(|replica| {
            let mut row = Vec::new();
            if with_workload {
                row.push(replica.workload.to_string());
            }
            row.extend([
                replica.replica_id.clone(),
                replica.container_name.clone(),
                replica.state.clone(),
                match (replica.is_running(), replica.ready) {
                    (false, _) => "no".into(),
                    (true, Some(false)) => "no".into(),
                    (true, _) => "yes".into(),
                },
                replica.restarts.to_string(),
                age(replica.created),
                replica.ip.clone().unwrap_or_else(|| "-".into()),
                replica.spec_hash.clone(),
            ]);
            row
        })
        .collect();
    let mut header = Vec::new();
    if with_workload {
        header.push("WORKLOAD");
    }
    header.extend([
        "REPLICA",
        "CONTAINER",
        "STATE",
        "READY",
        "RESTARTS",
        "AGE",
        "ADDRESS",
        "CONTAINER-HASH",
    ]);
    table(&header, &rows);
}

/// `vd history`: one row per revision, aligned, with what changed since
/// the revision before it.
fn history_table(current: i64, revisions: &[voodu_api::Revision]) {
    let mut rows = Vec::new();
    for (index, revision) in revisions.iter().enumerate() {
        let blocks: Vec<String> = revision
            .blocks
            .iter()
            .map(voodu_model::NormalisedBlock::display_name)
            .collect();
        let mut changes = match index.checked_sub(1).map(|before| &revisions[before]) {
            None => "first applied".to_owned(),
            Some(before) => revision_changes(before, revision),
        };
        if revision.recreated {
            changes = format!("applied again after a delete; {changes}");
        }
        if let Some(same) = revisions[..index]
            .iter()
            .rev()
            .find(|earlier| earlier.spec_hash == revision.spec_hash)
        {
            changes = format!("{changes} (the spec of revision {})", same.revision);
        }
        rows.push(vec![
            if revision.revision == current {
                format!("{} (current)", revision.revision)
            } else {
                revision.revision.to_string()
            },
            revision.applied_at.clone(),
            revision.core_spec["image"]
                .as_str()
                .unwrap_or("-")
                .to_owned(),
            revision.core_spec["replicas"].to_string(),
            if blocks.is_empty() {
                "-".to_owned()
            } else {
                blocks.join(", ")
            },
            changes,
        ]);
    }
    table(
        &[
            "REVISION", "APPLIED", "IMAGE", "REPLICAS", "BLOCKS", "CHANGED",
        ],
        &rows,
    );
}

/// What changed between two revisions, by name: `image, env, probes`.
fn revision_changes(before: &voodu_api::Revision, after: &voodu_api::Revision) -> String {
    let empty = serde_json::Map::new();
    let core = |revision: &voodu_api::Revision| -> serde_json::Map<String, Value> {
        let mut flat = revision.core_spec.as_object().unwrap_or(&empty).clone();
        // voodu's own blocks (probes, resources, ...) are named one by one.
        if let Some(Value::Object(blocks)) = flat.remove("blocks") {
            flat.extend(blocks);
        }
        flat
    };
    let (old, new) = (core(before), core(after));
    let mut changed: Vec<&str> = Vec::new();
    for (key, value) in &new {
        if old.get(key) != Some(value) {
            changed.push(key);
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) {
            changed.push(key);
        }
    }
    if before.blocks != after.blocks {
        changed.push("plugin blocks");
    }
    if changed.is_empty() {
        "nothing".to_owned()
    } else {
        changed.join(", ")
    }
}

fn pruned(replicas: &[voodu_api::Replica], dry_run: bool) {
    if replicas.is_empty() {
        println!("no orphans: every container of this controller belongs to a stored workload");
        return;
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for replica in replicas {
        let made_by = replica
            .store_id
            .as_deref()
            .map(|id| format!(", made for store {id}"))
            .unwrap_or_default();
        println!(
            "{}: {verb} replica {} ({}{made_by})",
            replica.workload, replica.replica_id, replica.container_name
        );
    }
    if dry_run {
        println!("dry run: nothing was removed — `vd prune --orphans` removes them");
    }
}

fn waited(report: &WaitReport) {
    for workload in &report.workloads {
        let style = match workload.phase.as_str() {
            "converged" | "gone" => GOOD,
            _ => ERROR,
        };
        println!("{}: {style}{}{style:#}", workload.workload, workload.phase);
    }
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    for error in &report.errors {
        diagnostic("error", ERROR, error);
    }
}

/// One event as a line: when, workload, reason, message.
fn notice_line(notice: &Notice) -> String {
    let style = match notice.level {
        voodu_api::EventLevel::Info => Style::new(),
        voodu_api::EventLevel::Warning => WARNING,
        voodu_api::EventLevel::Error => ERROR,
    };
    format!(
        "{}  {}  {style}{:<16}{style:#} {}",
        notice.at.as_deref().unwrap_or("-"),
        notice.workload,
        notice.reason,
        notice.message
    )
}

/// Prints the frames of a watch as they arrive: a line each, or one JSON
/// object per line.
pub struct WatchView {
    json: bool,
    header: bool,
}

impl WatchView {
    /// A view printing JSON lines, or text.
    pub fn new(json: bool) -> Self {
        WatchView {
            json,
            header: false,
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
            println!("{}", notice_line(notice));
        }
    }

    /// One log line, prefixed with its replica.
    pub fn log(&mut self, line: &voodu_api::LogLine) {
        if self.json {
            Self::json_line(line);
        } else {
            println!("{HEADING}{}{HEADING:#} | {}", line.replica_id, line.line);
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

fn deleted(report: &DeleteReport) {
    let forgotten = match (report.forgotten.len(), report.pending) {
        (0, _) => String::new(),
        (_, false) => format!(
            "; forgotten by their plugins: {}",
            report.forgotten.join(", ")
        ),
        (_, true) => format!(
            "; its replicas are being drained and removed, then these are forgotten by their plugins: {}",
            report.forgotten.join(", ")
        ),
    };
    println!("{}: {GOOD}deleted{GOOD:#}{forgotten}", report.workload);
    for warning in &report.warnings {
        diagnostic("warning", WARNING, warning);
    }
    for error in &report.errors {
        diagnostic("error", ERROR, error);
    }
}

fn plugin_table(plugins: &[PluginRow], failures: &[LoadFailure]) {
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
                "HEALTH",
                "LOGS DROPPED",
                "PATH",
            ],
            &rows,
        );
    }
    for failure in failures {
        eprintln!(
            "{WARNING}warning{WARNING:#}: {} did not load: {}",
            failure.path.display(),
            failure.error
        );
    }
}
