//! One module per verb of the API: each holds the verb's arguments (a
//! `clap::Args` struct that [`Command`](crate::Command) wraps), the
//! function that turns them into a [`Request`], and the text renderers of
//! the verb's [`Response`](voodu_api::Response)s. What every verb shares
//! (calling the controller, following rollouts, exit codes, JSON, tables,
//! styles, watches, progress) stays in `lib.rs`, `render.rs` and
//! `progress.rs`.
//!
//! [`command_words`] is the table that makes a missing part visible: a
//! verb added to the API fails to compile there until `vd` has a command
//! that sends it.

pub mod apply;
pub mod check;
pub mod config;
pub mod delete;
pub mod describe;
pub mod dial;
pub mod diff;
pub mod events;
pub mod exec;
pub mod explain;
pub mod get;
pub mod history;
pub mod keys;
pub mod logs;
pub mod new;
pub mod node;
pub mod plugins;
pub mod plugins_test;
pub mod procfile;
pub mod prune;
pub mod release;
pub mod remote;
pub mod rollback;
pub mod rollout;
pub mod run;
pub mod stats;
pub mod stops;
pub mod store;
pub mod version;

use voodu_api::{Request, Verb};

use crate::{FollowUp, Output};

/// What a verb's arguments ask of the controller: the request, how to
/// print its answer, and whether to follow the rollouts it starts.
pub struct Call {
    /// The request to send.
    pub request: Request,
    /// How to print the answer.
    pub output: Output,
    /// Follow the rollouts the answer names, unless `None`.
    pub follow: Option<FollowUp>,
    /// `vd diff`: a dry run's answer is shown as changes, and its exit
    /// code says whether there are any.
    pub diff: bool,
    /// `vd config get|list -o hcl`: a bucket's variables are printed as
    /// an HCL `env` attribute.
    pub as_hcl: bool,
    /// Only the events this says yes to are shown (`vd release`'s
    /// history: its release events).
    pub only_events: Option<fn(&voodu_api::Notice) -> bool>,
    /// How log lines are shown.
    pub log_view: LogView,
    /// The operator's key that signs the statement the answer gives
    /// (`plugins:install --signing-key`, `plugins:sign`), and what the
    /// operator approves: the statement must state it.
    pub sign_with: Option<(
        voodu_model::signing::SigningKey,
        voodu_model::signing::Approval,
    )>,
}

/// A workload, or one of its replicas, as `vd logs` and `vd exec` take
/// them: `KIND/SCOPE/NAME`, or a replica as voodu names it, by its
/// container's name (`prod-web.a1f3`) or as `SCOPE/NAME.ID`
/// (`prod/web.a1f3`, `data/pg.0`), which is looked up among the replicas
/// `vd get pods` lists (asking `client`).
pub fn workload_or_replica(
    client: &voodu_api::client::Client,
    target: &str,
) -> Result<(voodu_api::WorkloadId, Option<String>), String> {
    if let Ok(workload) = target.parse() {
        return Ok((workload, None));
    }
    let listed = client
        .call(
            &Request::Pods {
                workload: None,
                watch: false,
                orphans: false,
            },
            &mut |_| {},
        )
        .map_err(|error| error.to_string())?;
    let voodu_api::Response::Pods { replicas, .. } = listed else {
        return Err("the controller answered a listing of replicas with something else".into());
    };
    // voodu's SCOPE/NAME: the one workload of that scope and name that
    // has replicas.
    if let [scope, name] = target.split('/').collect::<Vec<_>>().as_slice() {
        let mut workloads: Vec<&voodu_api::WorkloadId> = replicas
            .iter()
            .map(|replica| &replica.workload)
            .filter(|workload| workload.scope == *scope && workload.name == *name)
            .collect();
        workloads.dedup();
        match workloads.as_slice() {
            [one] => return Ok(((*one).clone(), None)),
            [] => {}
            several => {
                let kinds: Vec<String> = several.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "{target:?} names {} — write KIND/SCOPE/NAME",
                    kinds.join(" and ")
                ));
            }
        }
    }
    replicas
        .iter()
        .find(|replica| {
            replica.container_name == target
                || format!(
                    "{}/{}.{}",
                    replica.workload.scope, replica.workload.name, replica.replica_id
                ) == target
        })
        .map(|replica| (replica.workload.clone(), Some(replica.replica_id.clone())))
        .ok_or_else(|| {
            format!("{target:?} is neither a workload (KIND/SCOPE/NAME, for example deployment/prod/esl, or SCOPE/NAME of one with replicas) nor a replica vd get pods lists (its container, prod-esl.a1f3, or prod/esl.a1f3)")
        })
}

/// How `vd logs` shows its lines.
#[derive(Debug, Clone, Default)]
pub struct LogView {
    /// Only lines that hold this text (`--grep`).
    pub grep: Option<String>,
    /// Without the replica (and node) before each line (`--no-prefix`).
    pub no_prefix: bool,
}

impl Call {
    /// A request whose answer is printed as `output`, and not followed.
    pub fn new(request: Request, output: Output) -> Self {
        Call {
            request,
            output,
            follow: None,
            diff: false,
            as_hcl: false,
            only_events: None,
            log_view: LogView::default(),
            sign_with: None,
        }
    }

    /// The call, with the statement its answer gives signed by the key
    /// when it states what the approval says.
    pub fn signed_with(
        mut self,
        signing: Option<(
            voodu_model::signing::SigningKey,
            voodu_model::signing::Approval,
        )>,
    ) -> Self {
        self.sign_with = signing;
        self
    }
}

/// The `vd` words that send `verb`: subcommand names, and for `vd get` the
/// value that picks what it lists (`["get", "pods"]`).
///
/// This `match` has no `_` arm on purpose: a verb added to
/// [`voodu_api::Request`] fails to compile here until it has a `vd`
/// command, and the test `every_api_verb_has_a_vd_command` checks that
/// the words name one.
pub fn command_words(verb: Verb) -> &'static [&'static str] {
    match verb {
        Verb::Apply => &["apply"],
        Verb::Describe => &["describe"],
        Verb::Get => &["get", "workloads"],
        Verb::Pods => &["get", "pods"],
        Verb::PruneOrphans => &["prune"],
        Verb::StoreBackup => &["store", "backup"],
        Verb::Wait => &["rollout", "status"],
        Verb::Events => &["events"],
        Verb::Delete => &["delete"],
        Verb::Version => &["version"],
        Verb::UpgradeController => &["controller", "upgrade"],
        Verb::History => &["history"],
        Verb::Rollback => &["rollback"],
        Verb::Restart => &["restart"],
        Verb::Exec => &["exec"],
        Verb::Run => &["run"],
        Verb::Stop => &["stop"],
        Verb::Start => &["start"],
        Verb::Logs => &["logs"],
        Verb::PluginsInstall => &["plugins:install"],
        Verb::PluginsList => &["plugins:list"],
        Verb::PluginsSettings => &["plugins:settings"],
        Verb::PluginsReload => &["plugins:reload"],
        Verb::PluginsRemove => &["plugins:remove"],
        Verb::PluginsStatement | Verb::PluginsSign => &["plugins:sign"],
        Verb::PluginsCall => &["plugins:call"],
        Verb::Explain => &["explain"],
        Verb::Stats => &["stats"],
        Verb::Nodes => &["get", "nodes"],
        Verb::NodeRemove => &["node", "remove"],
        Verb::ConfigSet => &["config", "set"],
        Verb::ConfigUnset => &["config", "unset"],
        Verb::ConfigGet => &["config", "get"],
        Verb::ConfigList => &["config", "list"],
        Verb::ConfigRotateKey => &["config", "rotate-key"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};
    use strum::IntoEnumIterator;

    use crate::{Cli, Command};

    /// Every verb of the API has a `vd` command: [`command_words`] names
    /// one for each (a verb added to the API fails to compile there until
    /// it has a CLI command), and each word is a subcommand of the one
    /// before, or, as last word, a value its positional argument takes
    /// (`vd get pods`); the last names a command that runs, not a group.
    #[test]
    fn every_api_verb_has_a_vd_command() {
        let root = Cli::command();
        for verb in Verb::iter() {
            let name: &'static str = verb.into();
            let words = command_words(verb);
            assert!(!words.is_empty(), "{name}: no vd words");
            let mut command = &root;
            for (index, word) in words.iter().enumerate() {
                if let Some(sub) = command.find_subcommand(word) {
                    command = sub;
                    continue;
                }
                let last = index + 1 == words.len();
                let a_value = command.get_positionals().any(|argument| {
                    argument
                        .get_possible_values()
                        .iter()
                        .any(|value| value.matches(word, false))
                });
                assert!(
                    last && a_value,
                    "{name}: `vd {}` has no `{word}`",
                    words[..index].join(" ")
                );
            }
            assert!(
                command.get_subcommands().next().is_none(),
                "{name}: `vd {}` needs a subcommand still",
                words.join(" ")
            );
        }
    }

    /// Parsing `vd` with each verb's words (and the arguments the command
    /// requires) builds a request of that verb.
    #[test]
    fn each_verbs_words_send_that_verb() {
        let directory = tempfile::tempdir().unwrap();
        let file = directory.path().join("web.hcl");
        std::fs::write(&file, "").unwrap();
        let file = file.to_str().unwrap().to_owned();
        let json = directory.path().join("request.json");
        std::fs::write(&json, "{}").unwrap();
        let json = json.to_str().unwrap().to_owned();
        let copy = directory.path().join("copy.db");
        let copy = copy.to_str().unwrap().to_owned();
        let key = directory.path().join("op.key");
        let (private, _) = voodu_model::signing::SigningKey::generate().unwrap();
        std::fs::write(&key, private).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let key = key.to_str().unwrap().to_owned();
        let client = voodu_api::client::Client::new(directory.path());
        for verb in Verb::iter() {
            let workload = "deployment/prod/web".to_owned();
            let rest: Vec<String> = match verb {
                Verb::Apply => vec!["-f".into(), file.clone()],
                Verb::PluginsInstall => vec![file.clone()],
                Verb::StoreBackup => vec![copy.clone()],
                Verb::PruneOrphans => vec!["--orphans".into(), "--dry-run".into()],
                Verb::PluginsReload | Verb::PluginsRemove => vec!["echo".into()],
                Verb::PluginsSettings => vec!["traffik".into(), json.clone()],
                Verb::PluginsStatement | Verb::PluginsSign => {
                    vec![
                        "echo".into(),
                        "--signing-key".into(),
                        key.clone(),
                        "--removal".into(),
                    ]
                }
                Verb::NodeRemove => vec!["c".into()],
                Verb::PluginsCall => vec!["echo".into(), "validate".into(), json.clone()],
                Verb::Explain => vec!["traffik".into()],
                Verb::ConfigSet => vec!["prod/shared".into(), "A=1".into()],
                Verb::ConfigUnset | Verb::ConfigGet => vec!["prod/shared".into(), "A".into()],
                Verb::Describe
                | Verb::Wait
                | Verb::Delete
                | Verb::History
                | Verb::Rollback
                | Verb::Restart
                | Verb::Logs => vec![workload],
                Verb::Exec => vec![workload, "--".into(), "true".into()],
                Verb::Run => vec!["prod/seed".into()],
                Verb::Stop | Verb::Start => vec![workload],
                Verb::Get
                | Verb::Pods
                | Verb::Events
                | Verb::Version
                | Verb::UpgradeController
                | Verb::PluginsList
                | Verb::Stats
                | Verb::Nodes
                | Verb::ConfigList
                | Verb::ConfigRotateKey => Vec::new(),
            };
            let line: Vec<String> = std::iter::once("vd".to_owned())
                .chain(command_words(verb).iter().map(|word| (*word).to_owned()))
                .chain(rest)
                .collect();
            let cli = Cli::try_parse_from(&line)
                .unwrap_or_else(|error| panic!("{}: {error}", line.join(" ")));
            let call = match cli.command {
                Command::Controller { action: None, .. }
                | Command::Up { .. }
                | Command::Completions { .. } => {
                    panic!("{}: not a verb of the API", line.join(" "))
                }
                command => crate::call_of(command, &client)
                    .unwrap_or_else(|code| panic!("{}: exit {code:?}", line.join(" "))),
            };
            // plugins:sign asks for the statement, then sends its
            // signature with the answer.
            if verb == Verb::PluginsSign {
                assert_eq!(Verb::from(&call.request), Verb::PluginsStatement);
                assert!(call.sign_with.is_some(), "{}", line.join(" "));
                continue;
            }
            assert_eq!(Verb::from(&call.request), verb, "{}", line.join(" "));
        }
    }

    #[test]
    fn voodus_no_prune_undoes_an_earlier_prune_and_the_last_one_wins() {
        let prunes = |words: &str| {
            let cli = Cli::try_parse_from(words.split(' ')).expect("parses");
            match cli.command {
                Command::Apply(apply) => apply.prune && !apply.no_prune,
                _ => panic!("{words}: not an apply"),
            }
        };
        assert!(prunes("vd apply -f web.hcl --prune"));
        assert!(!prunes("vd apply -f web.hcl --no-prune"));
        assert!(!prunes("vd apply -f web.hcl --prune --no-prune"));
        assert!(prunes("vd apply -f web.hcl --no-prune --prune"));
    }
}
