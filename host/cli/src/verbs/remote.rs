//! `vd remote add|list|remove`: voodu's remotes, the hosts `vd -r NAME`
//! reaches over SSH. They are kept where voodu keeps them, as git remotes
//! in the repository's `.git/config` (`[remote "prod"] url =
//! ubuntu@host:~/.ssh/prod.pem`), through `git` itself, so `git remote -v`
//! shows them and a clone brings them along. The remote named `voodu` is
//! the default of every verb when there is one. No controller is asked.

use std::process::{Command, ExitCode};

use anstream::println;
use clap::Subcommand;

use voodu_api::ssh::SshTarget;

use crate::render::{table, GOOD};
use crate::{fail, EXIT_FAILED};

/// The remote every verb uses when none is named, as voodu's.
pub const DEFAULT_REMOTE: &str = "voodu";

/// `vd remote`'s arguments: a subcommand.
#[derive(Debug, clap::Args)]
pub struct RemoteArgs {
    #[command(subcommand)]
    command: RemoteCommand,
}

/// What `vd remote` does.
#[derive(Debug, Subcommand)]
enum RemoteCommand {
    /// Keep a remote: NAME and user@host[:identity] (the identity a key's
    /// path: /..., ~/..., ./... or ../...), in .git/config.
    Add {
        /// The remote's name (`voodu` makes it the default).
        name: String,
        /// user@host, or user@host:~/.ssh/key.pem.
        #[arg(value_name = "USER@HOST[:IDENTITY]")]
        url: String,
    },
    /// List the voodu remotes of this repository (git remotes that are not
    /// user@host[:identity], such as origin, are left out).
    #[command(visible_alias = "ls")]
    List,
    /// Forget a remote, here only: the host is not touched.
    #[command(visible_alias = "rm")]
    Remove {
        /// The remote's name.
        name: String,
    },
}

/// Why a remote could not be used or kept.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// git could not be run.
    #[error("voodu keeps its remotes in .git/config, and git could not be run: {0} — install git")]
    NoGit(std::io::Error),
    /// git refused (not a repository, a name taken).
    #[error("git {command}: {said}")]
    Git {
        /// The git command.
        command: String,
        /// What git said.
        said: String,
    },
    /// No remote of that name.
    #[error("no remote {name:?} in this repository's .git/config — `vd remote list` shows those there are; `vd remote add {name} user@host` keeps one")]
    Unknown {
        /// The name.
        name: String,
    },
    /// The git remote of that name is not a voodu remote.
    #[error("remote {name:?} is a git remote, not a voodu one: {reason}")]
    NotVoodu {
        /// The name.
        name: String,
        /// Why its URL does not read.
        reason: String,
    },
}

/// Runs git with `arguments`; its standard output when it succeeds,
/// `Ok(None)` when it exits 1 (git config: no such key).
fn git(arguments: &[&str]) -> Result<Option<String>, RemoteError> {
    let output = Command::new("git")
        .args(arguments)
        .output()
        .map_err(RemoteError::NoGit)?;
    match output.status.code() {
        Some(0) => Ok(Some(String::from_utf8_lossy(&output.stdout).into_owned())),
        Some(1) if arguments.first() == Some(&"config") => Ok(None),
        _ => {
            let said = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            let said = if said.contains("not a git repository") {
                format!("{said} — voodu keeps its remotes in .git/config: run this in your app's git repository (git init makes one)")
            } else {
                said
            };
            Err(RemoteError::Git {
                command: arguments.join(" "),
                said,
            })
        }
    }
}

/// The URL git keeps for remote `name`, if there is one (or no
/// repository here).
fn url_of(name: &str) -> Result<Option<String>, RemoteError> {
    match git(&["config", "--get", &format!("remote.{name}.url")]) {
        Ok(url) => Ok(url.map(|url| url.trim().to_owned())),
        // Outside a repository git config exits 128: no remote there.
        Err(RemoteError::Git { said, .. }) if said.contains("not a git repository") => Ok(None),
        Err(error) => Err(error),
    }
}

/// The host remote `name` names.
pub fn target(name: &str) -> Result<SshTarget, RemoteError> {
    let url = url_of(name)?.ok_or_else(|| RemoteError::Unknown {
        name: name.to_owned(),
    })?;
    SshTarget::from_remote(&url).map_err(|error| RemoteError::NotVoodu {
        name: name.to_owned(),
        reason: error.to_string(),
    })
}

/// The default remote's host, when this repository has one (and git is
/// here to say).
pub fn default_target() -> Result<Option<SshTarget>, RemoteError> {
    match url_of(DEFAULT_REMOTE) {
        Ok(Some(_)) => target(DEFAULT_REMOTE).map(Some),
        Ok(None) | Err(RemoteError::NoGit(_)) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Every voodu remote here: its name and URL, in git's order.
fn voodu_remotes() -> Result<Vec<(String, String)>, RemoteError> {
    let listed = git(&["config", "--get-regexp", r"^remote\..*\.url$"])?.unwrap_or_default();
    Ok(listed
        .lines()
        .filter_map(|line| {
            let (key, url) = line.split_once(' ')?;
            let name = key.strip_prefix("remote.")?.strip_suffix(".url")?;
            SshTarget::from_remote(url)
                .is_ok()
                .then(|| (name.to_owned(), url.to_owned()))
        })
        .collect())
}

impl RemoteArgs {
    /// Runs the subcommand.
    pub fn run(self) -> ExitCode {
        let outcome = match self.command {
            RemoteCommand::Add { name, url } => add(&name, &url),
            RemoteCommand::List => list(),
            RemoteCommand::Remove { name } => remove(&name),
        };
        match outcome {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => fail(format!("vd remote: {message}"), EXIT_FAILED),
        }
    }
}

fn add(name: &str, url: &str) -> Result<(), String> {
    let target = SshTarget::from_remote(url).map_err(|error| error.to_string())?;
    git(&["remote", "add", name, url]).map_err(|error| error.to_string())?;
    let default = if name == DEFAULT_REMOTE {
        " (the default: every verb goes there unless -r, -H or --root says otherwise)".to_owned()
    } else {
        format!(" (vd -r {name} ...)")
    };
    println!(
        "{GOOD}added{GOOD:#} remote {name}: {}{default}",
        target.destination()
    );
    Ok(())
}

fn list() -> Result<(), String> {
    let remotes = voodu_remotes().map_err(|error| error.to_string())?;
    if remotes.is_empty() {
        println!("no voodu remotes here — `vd remote add voodu user@host` keeps the default one");
        return Ok(());
    }
    let rows = remotes
        .into_iter()
        .map(|(name, url)| vec![name, url])
        .collect::<Vec<_>>();
    table(&["NAME", "URL"], &rows);
    Ok(())
}

fn remove(name: &str) -> Result<(), String> {
    target(name).map_err(|error| error.to_string())?;
    git(&["remote", "remove", name]).map_err(|error| error.to_string())?;
    println!("{GOOD}removed{GOOD:#} remote {name} (here only; the host is untouched)");
    Ok(())
}
