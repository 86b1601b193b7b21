//! voodu's Procfile mode: `vd apply -f Procfile` deploys a Heroku- or
//! Dokku-style app with no HCL written. Each `type: command` line becomes
//! a workload, as voodu's `procfile.mdx` maps them:
//!
//! - `release: <cmd>` is `job "<scope>" "release"`, a one-shot that `vd
//!   apply` runs at each apply before the processes roll (Heroku's
//!   release phase);
//! - every other line is `deployment "<scope>" "<type>"`: one replica,
//!   `restart = "on-failure"`, the command shell-wrapped (`/bin/sh -c`),
//!   and a port, from 5000 up in declaration order, set as `PORT` and
//!   published (a port an `app.json` ingress entry names pins it and
//!   takes no slot).
//!
//! Every workload is built from the Procfile's directory (its language
//! found from its marker files, or its own Dockerfile). The scope is the
//! project-link file's, `.voodu/app.json`, whose `ingress` entries become
//! `ingress` blocks, which this voodu leaves out as it leaves out any
//! ingress (naming the plugin block to write instead).
//!
//! [`render`] writes the HCL this voodu then applies as any manifest; `vd
//! apply -f Procfile --eject` writes it to `.voodu/<scope>.voodu`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

/// The process type whose line is the release job.
pub const RELEASE: &str = "release";

/// The first port a process gets, as in voodu.
pub const FIRST_PORT: u16 = 5000;

/// The file name `vd apply -f` takes as a Procfile.
pub const FILE_NAME: &str = "Procfile";

/// One `type: command` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// The process type (`web`), a workload's name.
    pub name: String,
    /// The command, as written after the colon.
    pub command: String,
    /// Its line in the Procfile, from 1.
    pub line: usize,
}

/// Why a Procfile is refused; each names its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcfileError {
    /// No process at all.
    #[error("it declares no process — write one `type: command` line per process, such as `web: bundle exec puma -p $PORT`")]
    Empty,
    /// A line that is not `type: command`.
    #[error(
        "line {line}: {text:?} is not `type: command` — write `web: bundle exec puma -p $PORT`"
    )]
    NotAProcess {
        /// The line, from 1.
        line: usize,
        /// What it holds.
        text: String,
    },
    /// A type that cannot name a workload.
    #[error("line {line}: process type {name:?} must start with a letter and hold only letters, digits, `-` and `_`, and name a workload in lowercase (1 to 63 characters) — rename it, as `web`")]
    BadType {
        /// The line, from 1.
        line: usize,
        /// The type written.
        name: String,
    },
    /// A type written twice.
    #[error("line {line}: process type {name:?} is declared on line {first} already — keep one")]
    Duplicate {
        /// The second line.
        line: usize,
        /// The type.
        name: String,
        /// The first line.
        first: usize,
    },
}

/// The processes of a Procfile, in order: blank lines and `#` comments are
/// skipped, every other line must be `type: command` with a type voodu
/// accepts (`^[A-Za-z][A-Za-z0-9_-]*$`) and this voodu can name a workload
/// by (lowercase), each type once.
pub fn parse(text: &str) -> Result<Vec<Process>, Vec<ProcfileError>> {
    let mut processes: Vec<Process> = Vec::new();
    let mut problems = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((name, command)) = trimmed.split_once(':') else {
            problems.push(ProcfileError::NotAProcess {
                line,
                text: trimmed.to_owned(),
            });
            continue;
        };
        let (name, command) = (name.trim(), command.trim());
        if command.is_empty() {
            problems.push(ProcfileError::NotAProcess {
                line,
                text: trimmed.to_owned(),
            });
            continue;
        }
        if !valid_type(name) {
            problems.push(ProcfileError::BadType {
                line,
                name: name.to_owned(),
            });
            continue;
        }
        if let Some(first) = processes.iter().find(|process| process.name == name) {
            problems.push(ProcfileError::Duplicate {
                line,
                name: name.to_owned(),
                first: first.line,
            });
            continue;
        }
        processes.push(Process {
            name: name.to_owned(),
            command: command.to_owned(),
            line,
        });
    }
    if processes.is_empty() && problems.is_empty() {
        problems.push(ProcfileError::Empty);
    }
    if problems.is_empty() {
        Ok(processes)
    } else {
        Err(problems)
    }
}

/// voodu's pattern for a process type, narrowed to what names a workload
/// here (lowercase letters, digits and inner dashes; `_` read as `-` is
/// not done, so `_` is refused with the reason).
fn valid_type(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(first) if first.is_ascii_lowercase())
        && name.len() <= 63
        && !name.ends_with('-')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The project-link file, `.voodu/app.json`: the app's scope, and its
/// processes' ingress entries. Fields this voodu does not read are kept
/// by whoever writes the file and ignored here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AppLink {
    /// The scope every workload of the Procfile gets.
    #[serde(default)]
    pub scope: Option<String>,
    /// Each process's ingress entry, by process type.
    #[serde(default)]
    pub ingress: BTreeMap<String, IngressEntry>,
}

/// One process's ingress entry in `app.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct IngressEntry {
    /// The host name it routes.
    #[serde(default)]
    pub host: Option<String>,
    /// The port: pins the process's port.
    #[serde(default)]
    pub port: Option<u16>,
}

/// Each deployment's port: an ingress entry's port pins it; the others
/// take 5000, 5001, ... in declaration order, skipping pinned ones.
pub fn ports(processes: &[Process], link: &AppLink) -> BTreeMap<String, u16> {
    let pinned: BTreeSet<u16> = processes
        .iter()
        .filter_map(|process| link.ingress.get(&process.name)?.port)
        .collect();
    let mut next = FIRST_PORT;
    let mut ports = BTreeMap::new();
    for process in processes.iter().filter(|process| process.name != RELEASE) {
        let port = match link.ingress.get(&process.name).and_then(|entry| entry.port) {
            Some(port) => port,
            None => {
                while pinned.contains(&next) {
                    next += 1;
                }
                next += 1;
                next - 1
            }
        };
        ports.insert(process.name.clone(), port);
    }
    ports
}

/// An HCL string literal of `text`: quoted and escaped as JSON is (which
/// HCL reads the same), with `${` and `%{` escaped so nothing in a
/// command is interpolated or templated.
fn literal(text: &str) -> String {
    serde_json::Value::String(text.to_owned())
        .to_string()
        .replace("${", "$${")
        .replace("%{", "%%{")
}

/// The manifest a Procfile stands for, in `scope`, each workload built
/// from `context` (the Procfile's directory, as `vd apply` reaches it).
pub fn render(processes: &[Process], scope: &str, context: &str, link: &AppLink) -> String {
    let ports = ports(processes, link);
    let build = format!("  build {{\n    context = {}\n  }}\n", literal(context));
    let shell = |command: &str| format!("[\"/bin/sh\", \"-c\", {}]", literal(command));
    let mut text = format!(
        "# Generated from a Procfile by vd apply (voodu's Procfile mode): scope {scope}.\n"
    );
    for process in processes {
        let name = &process.name;
        text.push('\n');
        match ports.get(name) {
            None => {
                text.push_str(&format!(
                    "# {FILE_NAME} line {}: the release phase, run at each apply before the processes roll.\njob {} {} {{\n{build}  command = {}\n}}\n",
                    process.line,
                    literal(scope),
                    literal(name),
                    shell(&process.command)
                ));
            }
            Some(port) => {
                text.push_str(&format!(
                    "# {FILE_NAME} line {}.\ndeployment {} {} {{\n{build}  replicas = 1\n  restart  = \"on-failure\"\n  command  = {}\n  env      = {{ PORT = \"{port}\" }}\n  ports    = [\"{port}\"]\n}}\n",
                    process.line,
                    literal(scope),
                    literal(name),
                    shell(&process.command)
                ));
            }
        }
    }
    for (name, entry) in &link.ingress {
        let Some(port) = ports.get(name) else {
            continue;
        };
        text.push_str(&format!(
            "\n# .voodu/app.json's ingress for {name}.\ningress {} {} {{\n  service = {}\n  host    = {}\n  port    = {port}\n}}\n",
            literal(scope),
            literal(name),
            literal(name),
            literal(entry.host.as_deref().unwrap_or_default()),
        ));
    }
    text
}

/// Whether `scope` can be a Procfile app's scope (it names containers).
pub fn valid_scope(scope: &str) -> bool {
    !scope.is_empty()
        && scope.len() <= 63
        && scope
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !scope.starts_with('-')
        && !scope.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAILS: &str = "web: env RUBYOPT=\"-W0\" bundle exec puma -p $PORT\nworker: bundle exec sidekiq -C config/sidekiq.yml\n\n# the sync loop\nsync: bundle exec bin/sync\nrelease: bundle exec rails db:migrate\n";

    #[test]
    fn each_line_is_a_process_in_order_comments_and_blank_lines_skipped() {
        let processes = parse(RAILS).unwrap();
        let names: Vec<(&str, usize)> = processes
            .iter()
            .map(|process| (process.name.as_str(), process.line))
            .collect();
        assert_eq!(
            names,
            [("web", 1), ("worker", 2), ("sync", 5), ("release", 6)]
        );
        assert_eq!(
            processes[0].command,
            "env RUBYOPT=\"-W0\" bundle exec puma -p $PORT"
        );
    }

    #[test]
    fn a_procfile_voodu_refuses_is_refused_here_naming_each_line() {
        assert_eq!(parse("\n# nothing\n"), Err(vec![ProcfileError::Empty]));
        let refused = parse("web: a\nweb: b\n9lives: c\nno colon\nWeb_2: d\n").unwrap_err();
        let said: Vec<String> = refused.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 4, "{said:?}");
        assert!(said[0].starts_with("line 2: process type \"web\" is declared on line 1 already"));
        assert!(said[1].starts_with("line 3: process type \"9lives\" must start with a letter"));
        assert!(said[2].starts_with("line 4: \"no colon\" is not `type: command`"));
        assert!(said[3].starts_with("line 5: process type \"Web_2\""));
    }

    #[test]
    fn ports_start_at_5000_in_order_skip_the_release_and_an_ingress_port_pins_one() {
        let processes = parse(RAILS).unwrap();
        let unpinned = ports(&processes, &AppLink::default());
        assert_eq!(
            unpinned,
            BTreeMap::from([
                ("web".to_owned(), 5000),
                ("worker".to_owned(), 5001),
                ("sync".to_owned(), 5002)
            ])
        );
        let link = AppLink {
            scope: Some("ws".into()),
            ingress: BTreeMap::from([(
                "worker".to_owned(),
                IngressEntry {
                    host: Some("w.example.com".into()),
                    port: Some(5000),
                },
            )]),
        };
        assert_eq!(
            ports(&processes, &link),
            BTreeMap::from([
                ("web".to_owned(), 5001),
                ("worker".to_owned(), 5000),
                ("sync".to_owned(), 5002)
            ])
        );
    }

    #[test]
    fn the_rendered_manifest_parses_to_voodu_s_mapping_with_commands_as_written() {
        let processes = parse("web: echo \"${HOME}\" %{x} $PORT\nrelease: ./migrate\n").unwrap();
        let link: AppLink = serde_json::from_str(
            r#"{"scope": "ws", "ingress": {"web": {"host": "app.example.com", "tls": {"enabled": true}}}}"#,
        )
        .unwrap();
        let text = render(&processes, "ws", "apps/ws", &link);
        let parsed = crate::parse_manifest_with(
            "Procfile",
            &text,
            crate::ParseOptions {
                skip_unsupported: true,
                ..crate::ParseOptions::default()
            },
        );
        assert!(parsed.diagnostics.is_empty(), "{:?}", parsed.diagnostics);
        assert_eq!(parsed.skipped.len(), 1, "the ingress is left out");
        let [web, release] = parsed.workloads.as_slice() else {
            panic!("{:?}", parsed.workloads);
        };
        assert_eq!(release.id.to_string(), "job/ws/release");
        assert_eq!(release.core.command, ["/bin/sh", "-c", "./migrate"]);
        assert_eq!(web.id.to_string(), "deployment/ws/web");
        assert_eq!(
            web.core.command,
            ["/bin/sh", "-c", "echo \"${HOME}\" %{x} $PORT"]
        );
        assert_eq!(web.core.env.get("PORT").map(String::as_str), Some("5000"));
        assert_eq!(web.core.ports.len(), 1);
        assert_eq!(
            web.core.restart_policy(),
            voodu_model::core_spec::RestartPolicy::OnFailure
        );
        assert_eq!(
            web.core.build.as_ref().map(|build| build.context.as_str()),
            Some("apps/ws")
        );
    }
}
