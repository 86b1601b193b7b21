//! `vd plugins:new NAME --lang rust|c|go [--dir DIR]`: a new plugin project
//! that builds and passes `vd plugins:check` as it is, written here with no
//! controller. The templates are in `host/cli/templates/`.
//!
//! The SDK is found without flags: a Rust project depends on the
//! `plugin-abi` crate of the checkout this `vd` was built from, a C project
//! includes that checkout's `include/voodu_plugin.h` (both paths recorded
//! at build time, and so does a Go project's Makefile); `--sdk PATH` names another, and `--sdk-version X` a
//! published SDK version (Rust). A Rust project also gets the checkout's
//! `Cargo.lock`, so it builds offline with the versions voodu was built
//! with.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anstream::println;

use crate::{fail, EXIT_FAILED};

/// The language of a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A cdylib crate on the Rust SDK.
    Rust,
    /// A C source file and a Makefile against the header, with cJSON.
    C,
    /// A Go package built with `-buildmode=c-shared` against the header:
    /// the calls as `//export` functions, the table in a C file.
    Go,
}

/// `vd plugins:new`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PluginsNewArgs {
    /// The plugin's name, which is also its block's type: lowercase
    /// letters, digits and `_`, starting with a letter.
    name: String,
    /// The language.
    #[arg(long, value_enum)]
    lang: Lang,
    /// Where to write the project (default: ./NAME); it must not exist or
    /// be empty.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The SDK to build against: the `plugin-abi` crate's directory (Rust)
    /// or the directory of `voodu_plugin.h` (C). Default: those of the
    /// checkout this `vd` was built from.
    #[arg(long, value_name = "PATH", conflicts_with = "sdk_version")]
    sdk: Option<PathBuf>,
    /// Depend on this published version of the Rust SDK instead of a path.
    #[arg(long, value_name = "X")]
    sdk_version: Option<String>,
}

/// The checkout this `vd` was built from.
fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `name` as a plugin and block name, or why not.
fn checked_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let starts_with_letter = chars.next().is_some_and(|first| first.is_ascii_lowercase());
    if starts_with_letter
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        Ok(())
    } else {
        Err(format!(
            "{name:?} cannot name a plugin — use lowercase letters, digits and _, starting with a letter, at most 64 (greeter, my_lb2)"
        ))
    }
}

impl PluginsNewArgs {
    /// Writes the project and says how to build, check and install it.
    pub fn run(self) -> ExitCode {
        match self.write() {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(message) => fail(format!("vd plugins:new: {message}"), EXIT_FAILED),
        }
    }

    fn write(&self) -> Result<String, String> {
        checked_name(&self.name)?;
        let dir = self
            .dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(&self.name));
        if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(format!(
                "{} is not empty — choose another --dir, or remove it",
                dir.display()
            ));
        }
        let files = match self.lang {
            Lang::Rust => self.rust_files()?,
            Lang::C => self.c_files()?,
            Lang::Go => self.go_files()?,
        };
        for (relative, contents) in &files {
            let path = dir.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
            }
            std::fs::write(&path, contents)
                .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        }
        let written: Vec<String> = files.iter().map(|(path, _)| path.clone()).collect();
        let shown = dir.display();
        let next = match self.lang {
            Lang::Rust => format!(
                "  cd {shown} && cargo build --release && cargo test\n  vd plugins:check target/release/libvoodu_{lib}.so --block example.hcl\n  vd plugins:install target/release/libvoodu_{lib}.so",
                lib = self.name
            ),
            Lang::C | Lang::Go => format!(
                "  cd {shown} && make && make check\n  vd plugins:install ./lib{}.so",
                self.name
            ),
        };
        Ok(format!(
            "wrote plugin {} ({}) in {shown}: {}\nnext:\n{next}",
            self.name,
            match self.lang {
                Lang::Rust => "Rust",
                Lang::C => "C",
                Lang::Go => "Go",
            },
            written.join(", ")
        ))
    }

    fn fill(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{lib}}", &self.name)
            .replace("{{crate}}", &self.name.replace('_', "-"))
    }

    fn rust_files(&self) -> Result<Vec<(String, String)>, String> {
        let dependency = match (&self.sdk, &self.sdk_version) {
            (_, Some(version)) => format!("voodu-plugin-abi = {version:?}"),
            (sdk, None) => {
                let sdk = sdk.clone().unwrap_or_else(|| checkout().join("plugin-abi"));
                let sdk = std::fs::canonicalize(&sdk).map_err(|error| {
                    format!(
                        "the Rust SDK at {} cannot be used ({error}) — name it with --sdk PATH (the plugin-abi directory of a voodu checkout) or --sdk-version X",
                        sdk.display()
                    )
                })?;
                if !sdk.join("Cargo.toml").is_file() {
                    return Err(format!(
                        "{} is not the SDK's crate (no Cargo.toml) — --sdk names voodu's plugin-abi directory",
                        sdk.display()
                    ));
                }
                format!(
                    "voodu-plugin-abi = {{ path = {:?} }}",
                    sdk.display().to_string()
                )
            }
        };
        let mut files = vec![
            (
                "Cargo.toml".to_owned(),
                self.fill(include_str!("../../templates/rust_Cargo.toml"))
                    .replace("{{sdk_dependency}}", &dependency),
            ),
            (
                "src/lib.rs".to_owned(),
                self.fill(include_str!("../../templates/rust_lib.rs")),
            ),
            (
                "example.hcl".to_owned(),
                self.fill(include_str!("../../templates/example.hcl")),
            ),
        ];
        // The versions voodu was built with, so that it builds offline.
        if self.sdk_version.is_none() {
            if let Ok(lock) = std::fs::read_to_string(checkout().join("Cargo.lock")) {
                files.push(("Cargo.lock".to_owned(), lock));
            }
        }
        Ok(files)
    }

    /// The directory of `voodu_plugin.h` a C or Go project builds against.
    fn header_dir(&self) -> Result<PathBuf, String> {
        if self.sdk_version.is_some() {
            return Err(
                "--sdk-version is for Rust; a C or Go plugin takes the header from --sdk PATH"
                    .into(),
            );
        }
        let include = self
            .sdk
            .clone()
            .unwrap_or_else(|| checkout().join("include"));
        let include = std::fs::canonicalize(&include)
            .ok()
            .filter(|include| include.join("voodu_plugin.h").is_file())
            .ok_or_else(|| {
                format!(
                    "no voodu_plugin.h in {} — name its directory with --sdk PATH",
                    include.display()
                )
            })?;
        Ok(include)
    }

    fn go_files(&self) -> Result<Vec<(String, String)>, String> {
        let include = self.header_dir()?;
        Ok(vec![
            (
                format!("{}.go", self.name),
                self.fill(include_str!("../../templates/go_plugin.go")),
            ),
            (
                "vtable.c".to_owned(),
                self.fill(include_str!("../../templates/go_vtable.c")),
            ),
            (
                "go.mod".to_owned(),
                self.fill(include_str!("../../templates/go_mod")),
            ),
            (
                "Makefile".to_owned(),
                self.fill(include_str!("../../templates/go_Makefile"))
                    .replace("{{include}}", &include.display().to_string()),
            ),
            (
                "example.hcl".to_owned(),
                self.fill(include_str!("../../templates/example.hcl")),
            ),
        ])
    }

    fn c_files(&self) -> Result<Vec<(String, String)>, String> {
        let include = self.header_dir()?;
        Ok(vec![
            (
                format!("{}.c", self.name),
                self.fill(include_str!("../../templates/c_plugin.c")),
            ),
            (
                "Makefile".to_owned(),
                self.fill(include_str!("../../templates/c_Makefile"))
                    .replace("{{include}}", &include.display().to_string()),
            ),
            (
                "example.hcl".to_owned(),
                self.fill(include_str!("../../templates/example.hcl")),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_cannot_name_a_block_is_refused_with_examples() {
        assert!(checked_name("greeter").is_ok());
        assert!(checked_name("my_lb2").is_ok());
        for bad in ["", "Greeter", "2lb", "my-lb", "a b"] {
            let refused = checked_name(bad).unwrap_err();
            assert!(refused.contains("(greeter, my_lb2)"), "{refused}");
        }
    }
}
