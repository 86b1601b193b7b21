//! `vd store backup FILE`: [`Request::StoreBackup`] to an absolute path,
//! and its answer, [`Response::BackedUp`](voodu_api::Response::BackedUp).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anstream::println;
use clap::Subcommand;

use voodu_api::client::Client;
use voodu_api::Request;

use super::Call;
use crate::render::GOOD;
use crate::{fail, OutputArg, EXIT_FAILED};

/// `vd store`'s arguments: a subcommand.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    command: StoreCommand,
}

/// What `vd store` does.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Write a consistent copy of the store to FILE while the controller
    /// runs (SQLite's online backup). To restore: stop the controller, put
    /// the copy at <root>/state.db, start it (see the README).
    Backup(BackupArgs),
}

/// `vd store backup`'s arguments.
#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The copy to write; it must not exist yet.
    file: PathBuf,
    #[command(flatten)]
    output: OutputArg,
}

impl StoreArgs {
    /// [`Request::StoreBackup`] to the file as an absolute path; a
    /// directory that cannot be used fails here. Through `client` to a
    /// controller on another host, the copy is written there: its path
    /// must be absolute, and is the host's.
    pub fn call(self, client: &Client) -> Result<Call, ExitCode> {
        let StoreCommand::Backup(BackupArgs { file, output }) = self.command;
        if client.is_remote() {
            if file.is_absolute() {
                return Ok(Call::new(
                    Request::StoreBackup { path: file },
                    output.output,
                ));
            }
            return Err(fail(
                format!(
                    "vd store backup: the controller at {} writes the copy on its host — give the copy's absolute path there, not {}",
                    client.endpoint(),
                    file.display()
                ),
                EXIT_FAILED,
            ));
        }
        match absolute_new_file(&file) {
            Ok(path) => Ok(Call::new(Request::StoreBackup { path }, output.output)),
            Err(message) => Err(fail(format!("vd store backup: {message}"), EXIT_FAILED)),
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

/// Prints where the copy went, and how to restore it.
pub fn backed_up(path: &Path, bytes: u64, store_id: &str) {
    println!(
        "{GOOD}backed up{GOOD:#} the store ({store_id}) to {} ({bytes} bytes) — to restore it, stop the controller and put it at <root>/state.db (README, \"Backups\")",
        path.display()
    );
}
