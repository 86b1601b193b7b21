//! `vd apply -f Procfile`, voodu's Procfile mode, on the CLI's side: the
//! Procfile is read with its project-link file (`.voodu/app.json`, in the
//! Procfile's directory), its scope settled, and the manifest it stands
//! for ([`voodu_manifest::procfile::render`]) sent as any manifest is.
//!
//! The scope is `--app`'s (then kept in `app.json`), else `app.json`'s,
//! else a new random one written to `app.json`, as voodu does: commit the
//! file, so every apply of the app reaches the same workloads.
//!
//! A `release:` line is a job that runs before the processes roll, as
//! Heroku's release phase does: `vd apply` stores the release job alone
//! and runs it, and only when it succeeds applies the processes (see
//! [`crate::run_apply`]).

use std::path::{Path, PathBuf};

use voodu_api::ManifestSource;
use voodu_manifest::procfile::{self, AppLink, Process, RELEASE};

/// The project-link file, within the Procfile's directory.
const APP_JSON: &str = ".voodu/app.json";

/// A Procfile, read and resolved.
#[derive(Debug)]
pub(crate) struct ProcfileApp {
    /// The Procfile as the operator named it.
    path: PathBuf,
    /// Its directory, as `vd apply` reaches it: the build context.
    directory: PathBuf,
    /// Its processes.
    processes: Vec<Process>,
    /// The project-link file.
    link: AppLink,
    /// The app's scope.
    pub scope: String,
}

/// Whether `path` names a Procfile (its file name is `Procfile`).
pub(crate) fn is_procfile(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name == procfile::FILE_NAME)
}

impl ProcfileApp {
    /// Reads the Procfile at `path` and its `app.json`, with the scope
    /// `app` names (kept in `app.json`), or `app.json`'s, or a new one
    /// (written to `app.json`).
    pub(crate) fn load(path: &Path, app: Option<&str>) -> Result<ProcfileApp, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("{}: cannot be read: {error}", path.display()))?;
        let processes = procfile::parse(&text).map_err(|problems| {
            let said: Vec<String> = problems.iter().map(ToString::to_string).collect();
            format!("{}: {}", path.display(), said.join("; "))
        })?;
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
            _ => PathBuf::from("."),
        };
        let link_path = directory.join(APP_JSON);
        let written: Option<serde_json::Value> = match std::fs::read_to_string(&link_path) {
            Ok(text) => Some(
                serde_json::from_str(&text)
                    .map_err(|error| format!("{}: is not JSON: {error}", link_path.display()))?,
            ),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => return Err(format!("{}: cannot be read: {error}", link_path.display())),
        };
        let link: AppLink = match &written {
            Some(value) => serde_json::from_value(value.clone()).map_err(|error| {
                format!(
                    "{}: {error} — it holds {{\"scope\": \"...\", \"ingress\": {{...}}}}",
                    link_path.display()
                )
            })?,
            None => AppLink::default(),
        };
        let scope = match (app, link.scope.as_deref()) {
            (Some(app), _) => app.to_owned(),
            (None, Some(scope)) => scope.to_owned(),
            (None, None) => format!("a{}", voodu_model::naming::new_replica_id(&[])),
        };
        if !procfile::valid_scope(&scope) {
            return Err(format!(
                "the app's scope {scope:?} cannot name containers — use 1 to 63 lowercase letters, digits and inner dashes (--app ws)"
            ));
        }
        if link.scope.as_deref() != Some(scope.as_str()) {
            keep_scope(&link_path, written, &scope)?;
        }
        Ok(ProcfileApp {
            path: path.to_owned(),
            directory,
            processes,
            link,
            scope,
        })
    }

    /// Whether it has a `release:` line.
    pub(crate) fn has_release(&self) -> bool {
        self.processes.iter().any(|process| process.name == RELEASE)
    }

    /// The manifest it stands for; with `release_only`, only its release
    /// job.
    pub(crate) fn source(&self, release_only: bool) -> ManifestSource {
        let processes: Vec<Process> = self
            .processes
            .iter()
            .filter(|process| !release_only || process.name == RELEASE)
            .cloned()
            .collect();
        let link = if release_only {
            AppLink::default()
        } else {
            self.link.clone()
        };
        ManifestSource {
            // Locations are in the manifest `--eject` writes.
            path: format!("{} (generated)", self.path.display()),
            text: procfile::render(
                &processes,
                &self.scope,
                &self.directory.to_string_lossy(),
                &link,
            ),
        }
    }

    /// Writes the manifest to `.voodu/<scope>.voodu` beside the Procfile
    /// (voodu's `--eject`); where it went.
    pub(crate) fn eject(&self) -> Result<PathBuf, String> {
        let path = self
            .directory
            .join(".voodu")
            .join(format!("{}.voodu", self.scope));
        std::fs::write(&path, self.source(false).text)
            .map_err(|error| format!("{}: cannot be written: {error}", path.display()))?;
        Ok(path)
    }
}

/// Writes `scope` into the project-link file at `path`, keeping what else
/// it holds.
fn keep_scope(path: &Path, written: Option<serde_json::Value>, scope: &str) -> Result<(), String> {
    let mut value = written.unwrap_or_else(|| serde_json::json!({}));
    let Some(fields) = value.as_object_mut() else {
        return Err(format!("{}: is not a JSON object", path.display()));
    };
    fields.insert(
        "scope".to_owned(),
        serde_json::Value::String(scope.to_owned()),
    );
    let write = || -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut text = serde_json::to_string_pretty(&value).map_err(std::io::Error::other)?;
        text.push('\n');
        std::fs::write(path, text)
    };
    write().map_err(|error| format!("{}: cannot be written: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_is_kept_in_app_json_and_found_there_next_time_with_its_other_fields() {
        let directory = tempfile::tempdir().unwrap();
        let procfile = directory.path().join("Procfile");
        std::fs::write(&procfile, "web: ./serve\nrelease: ./migrate\n").unwrap();
        std::fs::create_dir_all(directory.path().join(".voodu")).unwrap();
        let link = directory.path().join(APP_JSON);
        std::fs::write(
            &link,
            r#"{"ingress": {"web": {"host": "app.example.com"}}}"#,
        )
        .unwrap();

        let first = ProcfileApp::load(&procfile, None).unwrap();
        assert!(procfile::valid_scope(&first.scope), "{}", first.scope);
        let again = ProcfileApp::load(&procfile, None).unwrap();
        assert_eq!(again.scope, first.scope, "found in app.json");
        let kept: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&link).unwrap()).unwrap();
        assert_eq!(kept["ingress"]["web"]["host"], "app.example.com");

        let named = ProcfileApp::load(&procfile, Some("ws")).unwrap();
        assert_eq!(named.scope, "ws");
        assert_eq!(ProcfileApp::load(&procfile, None).unwrap().scope, "ws");
        assert!(named.has_release());
        let release = named.source(true).text;
        assert!(release.contains("job \"ws\" \"release\""), "{release}");
        assert!(!release.contains("deployment"), "{release}");
        assert!(ProcfileApp::load(&procfile, Some("Not A Scope")).is_err());
    }
}
