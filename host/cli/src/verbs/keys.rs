//! `vd keys new secrets FILE`: a new key for `vd controller --secrets-key`,
//! 256 random bits from the system as 64 hex digits, in a file only its
//! owner may read; `vd keys new signing FILE`: an operator's Ed25519 key
//! for signing cluster plugins, and FILE.pub for the nodes to trust. Never
//! over a file that exists. No controller is asked.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anstream::println;
use clap::{Subcommand, ValueEnum};

use crate::render::GOOD;
use crate::{fail, EXIT_FAILED};

/// `vd keys`'s arguments: a subcommand.
#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

/// What `vd keys` does.
#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Write a new key to FILE (mode 0600; refused if FILE exists).
    New {
        /// What the key is for.
        #[arg(value_enum)]
        kind: KeyKind,
        /// The file to write.
        file: PathBuf,
    },
}

/// The kinds of key.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum KeyKind {
    /// Seals secrets at rest: `vd controller --secrets-key FILE`.
    Secrets,
    /// An operator's Ed25519 key that signs cluster plugins
    /// (`plugins:install --signing-key FILE`); its public half, FILE.pub,
    /// goes to every node (`vd controller --trust-key FILE.pub`).
    Signing,
}

/// A secrets key's length in bytes.
const SECRETS_KEY_BYTES: usize = 32;

impl KeysArgs {
    /// Runs the subcommand.
    pub fn run(self) -> ExitCode {
        let KeysCommand::New { kind, file } = self.command;
        if let KeyKind::Signing = kind {
            return new_signing_key(&file);
        }
        let mut key = [0u8; SECRETS_KEY_BYTES];
        if let Err(error) = getrandom::fill(&mut key) {
            return fail(
                format!("vd keys new: the system gave no random bytes: {error}"),
                EXIT_FAILED,
            );
        }
        match write_new(&file, &format!("{}\n", hex::encode(key)), 0o600) {
            Ok(()) => {
                println!(
                    "{GOOD}wrote{GOOD:#} a secrets key to {} — start the controller with --secrets-key {} (every node of a cluster, the same file), and keep a copy: without it the sealed secrets are lost",
                    file.display(),
                    file.display()
                );
                ExitCode::SUCCESS
            }
            Err(error) => not_written(&file, &error),
        }
    }
}

/// Writes `text` to a new file `path` of `mode`; never over one.
fn write_new(path: &std::path::Path, text: &str, mode: u32) -> std::io::Result<()> {
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    out.write_all(text.as_bytes())?;
    out.sync_all()
}

/// Why a key file was not written (exit 1).
fn not_written(path: &std::path::Path, error: &std::io::Error) -> ExitCode {
    if error.kind() == std::io::ErrorKind::AlreadyExists {
        return fail(
            format!(
                "vd keys new: {} exists — a key is never overwritten; name another file",
                path.display()
            ),
            EXIT_FAILED,
        );
    }
    fail(
        format!("vd keys new: cannot write {}: {error}", path.display()),
        EXIT_FAILED,
    )
}

/// Writes a new signing key to `file` and its public half to `file.pub`.
fn new_signing_key(file: &std::path::Path) -> ExitCode {
    let (private, public) = match voodu_model::signing::SigningKey::generate() {
        Ok(pair) => pair,
        Err(error) => {
            return fail(
                format!("vd keys new: the system gave no random bytes: {error}"),
                EXIT_FAILED,
            )
        }
    };
    let mut public_file = file.as_os_str().to_owned();
    public_file.push(".pub");
    let public_file = PathBuf::from(public_file);
    if let Err(error) = write_new(&public_file, &public, 0o644) {
        return not_written(&public_file, &error);
    }
    if let Err(error) = write_new(file, &private, 0o600) {
        let _ = std::fs::remove_file(&public_file);
        return not_written(file, &error);
    }
    println!(
        "{GOOD}wrote{GOOD:#} a signing key to {} and its public half to {} — sign with plugins:install --signing-key {}, and start every node with --trust-key {}",
        file.display(),
        public_file.display(),
        file.display(),
        public_file.display()
    );
    ExitCode::SUCCESS
}
