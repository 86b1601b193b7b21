//! Plugin-wide settings (ABI 1.3): what an operator gives a plugin once,
//! not per block (a binary's path, a directory, a default address).
//!
//! A plugin takes settings when it describes them (`describe_settings`).
//! Handing them over ([`hand_over`]) checks that they are an object, checks
//! them against the plugin's schema with the [`SettingsCheck`] the embedder
//! gave the registry (the controller's validates JSON Schema), then calls
//! the plugin's `configure`, which may refuse them too.
//!
//! The [`crate::registry`] owns them: kept as `settings.json` in the
//! plugin's directory, beside its file, so they are staged, renamed into
//! place and removed with it, and a controller that starts hands them to
//! the plugin right after `init`.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::error::CallError;
use crate::handle::PluginHandle;

/// The file a plugin's settings are kept in, in its directory.
pub const SETTINGS_FILE: &str = "settings.json";

/// One thing wrong with settings: where (a JSON pointer into them, empty
/// for the whole object) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsProblem {
    /// A JSON pointer into the settings (`/bind_host`); empty for the whole.
    pub pointer: String,
    /// What is wrong, for the operator.
    pub message: String,
}

impl std::fmt::Display for SettingsProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pointer.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.pointer, self.message)
        }
    }
}

/// Checks settings against a plugin's settings schema: the problems, none
/// when they conform. Given to the registry by the embedder
/// ([`crate::PluginRegistry::open_with_settings_check`]), so this crate
/// pulls in no schema validator.
pub type SettingsCheck = Arc<dyn Fn(&Value, &Value) -> Vec<SettingsProblem> + Send + Sync>;

/// Why a plugin did not take settings.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// Settings are one JSON object.
    #[error("settings are one JSON object ({{\"name\": value, ...}}), not {found}")]
    NotAnObject {
        /// The JSON type given.
        found: &'static str,
    },
    /// The plugin describes no settings, and some were given.
    #[error("{plugin} {version} takes no settings (it describes none) — give none, or `{{}}` to drop those kept")]
    NotTaken {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
    },
    /// They do not conform to the plugin's settings schema.
    #[error("{plugin} {version} refuses these settings: {} — `vd explain {plugin}` shows its settings", .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
        /// What is wrong.
        problems: Vec<SettingsProblem>,
    },
    /// The plugin's `configure` refused them, or failed.
    #[error("{plugin} did not take the settings{}: {error}", .error.pointer().map(|pointer| format!(" (at {pointer})")).unwrap_or_default())]
    Configure {
        /// The plugin.
        plugin: String,
        /// Its refusal or failure.
        error: CallError,
    },
    /// Kept settings could not be read or written.
    #[error("the settings kept at {path} cannot be {action}: {reason}")]
    Kept {
        /// The file.
        path: std::path::PathBuf,
        /// `read` or `written`.
        action: &'static str,
        /// Why.
        reason: String,
    },
}

/// Checks `settings` and hands them to `handle`'s `configure`. An empty
/// object to a plugin that takes no settings is no call at all.
pub fn hand_over(
    handle: &PluginHandle,
    settings: &Value,
    check: Option<&SettingsCheck>,
) -> Result<(), SettingsError> {
    let Some(fields) = settings.as_object() else {
        return Err(SettingsError::NotAnObject {
            found: json_type(settings),
        });
    };
    let configure_failed = |error: CallError| SettingsError::Configure {
        plugin: handle.name().to_owned(),
        error,
    };
    let Some(schema) = handle.settings_schema().map_err(configure_failed)? else {
        if fields.is_empty() {
            return Ok(());
        }
        return Err(SettingsError::NotTaken {
            plugin: handle.name().to_owned(),
            version: handle.info().version.clone(),
        });
    };
    if let Some(check) = check {
        let problems = check(&schema, settings);
        if !problems.is_empty() {
            return Err(SettingsError::Invalid {
                plugin: handle.name().to_owned(),
                version: handle.info().version.clone(),
                problems,
            });
        }
    }
    handle.configure(settings).map_err(configure_failed)
}

/// The settings kept in plugin directory `directory`: `{}` when none are.
pub fn read_kept(directory: &Path) -> Result<Value, SettingsError> {
    let path = directory.join(SETTINGS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| SettingsError::Kept {
            path,
            action: "read",
            reason: error.to_string(),
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Ok(Value::Object(Default::default()))
        }
        Err(error) => Err(SettingsError::Kept {
            path,
            action: "read",
            reason: error.to_string(),
        }),
    }
}

/// Keeps `settings` in plugin directory `directory`, whole or not at all
/// (written beside, then renamed over), readable by the owner only; an
/// empty object removes the file.
pub fn write_kept(directory: &Path, settings: &Value) -> Result<(), SettingsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = directory.join(SETTINGS_FILE);
    let failed = |error: std::io::Error| SettingsError::Kept {
        path: path.clone(),
        action: "written",
        reason: error.to_string(),
    };
    if settings.as_object().is_some_and(|fields| fields.is_empty()) {
        return match std::fs::remove_file(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(failed(error)),
            _ => Ok(()),
        };
    }
    let beside = directory.join(format!(".{SETTINGS_FILE}.{}", std::process::id()));
    let mut text = serde_json::to_vec_pretty(settings).map_err(|error| failed(error.into()))?;
    text.push(b'\n');
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&beside)
        .and_then(|mut file| {
            file.write_all(&text)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&beside, &path))
        .map_err(failed)
}

/// The JSON type name of `value`.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kept_settings_are_written_whole_and_an_empty_object_removes_them() {
        let directory = tempfile::tempdir().unwrap();
        assert_eq!(read_kept(directory.path()).unwrap(), json!({}));
        write_kept(directory.path(), &json!({"bind_host": "127.0.0.1"})).unwrap();
        assert_eq!(
            read_kept(directory.path()).unwrap(),
            json!({"bind_host": "127.0.0.1"})
        );
        let mode = std::fs::metadata(directory.path().join(SETTINGS_FILE))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        write_kept(directory.path(), &json!({})).unwrap();
        assert!(!directory.path().join(SETTINGS_FILE).exists());
        assert_eq!(read_kept(directory.path()).unwrap(), json!({}));
    }

    #[test]
    fn unreadable_kept_settings_name_their_file() {
        let directory = tempfile::tempdir().unwrap();
        std::fs::write(directory.path().join(SETTINGS_FILE), "{not json").unwrap();
        let error = read_kept(directory.path()).unwrap_err().to_string();
        assert!(error.contains(SETTINGS_FILE), "{error}");
    }
}
