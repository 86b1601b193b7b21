//! The installed plugins: `<root>/plugins/<name>/<file>.so`, one directory
//! per plugin, named after the block type the plugin owns.
//!
//! The registry loads every installed plugin at start (one that fails does
//! not stop the others), installs new ones by staging the file and renaming
//! its directory into place, and removes them. It owns each plugin's
//! settings too (`<root>/plugins/<name>/settings.json`, see
//! [`crate::settings`]): handed over at every load, moved with the file.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::error::LoadError;
use super::handle::{PluginHandle, PluginInfo};
use super::loader::{load_plugin, LoadOptions};
use super::settings::SettingsCheck;

/// A plugin that was installed but did not load at start.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadFailure {
    /// The plugin's directory.
    pub path: PathBuf,
    /// Why it did not load.
    pub error: String,
}

/// Why an install or removal failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The file system refused.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Where.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is not a loadable plugin.
    #[error("{0}")]
    Load(#[from] LoadError),
    /// The plugin's name cannot name a block or a directory.
    #[error("{path} names itself {name:?}, which cannot be a block type — a plugin's name is letters, digits, '_' and '-', starting with a letter")]
    BadName {
        /// The plugin file.
        path: PathBuf,
        /// The name it gave.
        name: String,
    },
    /// The plugin's name is taken by one of voodu's own blocks.
    #[error("{path} names itself {name:?}, which is a core block of voodu, so its blocks would never reach it — rebuild the plugin under another name")]
    CoreBlockName {
        /// The plugin file.
        path: PathBuf,
        /// The name it gave.
        name: String,
    },
    /// A plugin of that name is installed already.
    #[error("a plugin named {name:?} is installed already (version {version}) — run `vd plugins:install --replace {path}` to replace it")]
    AlreadyInstalled {
        /// The name.
        name: String,
        /// The installed version.
        version: String,
        /// The file being installed.
        path: PathBuf,
    },
    /// The file, or a directory above it, is not safe to load code from.
    #[error(
        "{path}: {reason} — installing a plugin runs its code inside the controller, so {fix}"
    )]
    Unsafe {
        /// The file as given.
        path: PathBuf,
        /// What is wrong.
        reason: String,
        /// What to do.
        fix: &'static str,
    },
    /// The file's SHA-256 is not the one the operator pinned.
    #[error("{path} has SHA-256 {actual}, not the {expected} that --sha256 pins — this is not the file you meant to install")]
    DigestMismatch {
        /// The file as given.
        path: PathBuf,
        /// The pinned digest.
        expected: String,
        /// The file's digest.
        actual: String,
    },
    /// The plugin did not take its settings (at install, at load, or when
    /// they were changed); nothing changed.
    #[error(transparent)]
    Settings(#[from] crate::settings::SettingsError),
    /// No plugin of that name is installed.
    #[error(
        "no plugin named {name:?} is installed — `vd plugins:list` shows the installed plugins"
    )]
    NotInstalled {
        /// The name.
        name: String,
    },
}

/// How to install a plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallOptions {
    /// Replace an installed plugin of the same name.
    pub replace: bool,
    /// The SHA-256 (hex) the file must have; the copy is checked, not the
    /// source, so the file cannot change between the check and the load.
    pub sha256: Option<String>,
    /// The plugin-wide settings to install it with; `None` keeps those an
    /// installed plugin of the same name has (none for a new one).
    pub settings: Option<serde_json::Value>,
    /// Whether it runs in a child process of its own
    /// ([`crate::out_of_process`]); `None` keeps what an installed plugin
    /// of the same name does (in process for a new one, unless it is a
    /// second Go runtime). Kept beside its file.
    pub out_of_process: Option<bool>,
}

/// The file, inside a plugin's directory, whose presence runs it out of
/// process.
pub const OUT_OF_PROCESS_MARKER: &str = "out-of-process";

/// Whether the plugin installed in `directory` runs out of process.
fn kept_out_of_process(directory: &Path) -> bool {
    directory.join(OUT_OF_PROCESS_MARKER).exists()
}

/// What an install did.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The plugin now loaded.
    pub info: PluginInfo,
    /// The version it replaced, if any.
    pub replaced_version: Option<String>,
}

/// A plugin loaded from a copy under the plugins directory, not yet live
/// (see [`PluginRegistry::stage`]).
#[derive(Debug)]
pub struct StagedPlugin {
    staging: PathBuf,
    file_name: std::ffi::OsString,
    handle: Option<PluginHandle>,
}

impl StagedPlugin {
    /// The staged instance, to check before it goes live: calls into it
    /// are real calls into the new version.
    pub fn handle(&self) -> &PluginHandle {
        self.handle
            .as_ref()
            .expect("cannot fail: a staged plugin holds its handle until committed")
    }
}

impl Drop for StagedPlugin {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown();
        }
        // Gone already when the commit renamed it into place.
        if self.staging.exists() {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// Whether a plugin name can be a block type and a directory name.
fn is_valid_plugin_name(name: &str) -> bool {
    crate::name::PluginName::new(name).is_ok()
}

/// Opens a plugin file for installing, refusing what is not safe to load
/// code from: a path that does not end in `.so` (after symlinks are
/// resolved), anything but a regular file, a file anyone may write or that
/// belongs to another user (root's files are trusted), and a file under a
/// directory anyone may write without the sticky bit (anyone could swap
/// it). The checks are made on the opened file, which is then the one
/// copied. Returns the file and its resolved path.
fn open_safely(source: &Path) -> Result<(File, PathBuf), RegistryError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let unsafe_file = |reason: String, fix: &'static str| RegistryError::Unsafe {
        path: source.to_owned(),
        reason,
        fix,
    };
    let io = |action: &'static str| {
        move |error| RegistryError::Io {
            action,
            path: source.to_owned(),
            source: error,
        }
    };
    let resolved = std::fs::canonicalize(source).map_err(io("resolve"))?;
    if !is_shared_object(&resolved) {
        return Err(unsafe_file(
            format!("{} does not end in .so", resolved.display()),
            "install the shared object the build produced (lib<name>.so)",
        ));
    }
    let file = File::open(&resolved).map_err(io("open"))?;
    let metadata = file.metadata().map_err(io("read"))?;
    if !metadata.is_file() {
        return Err(unsafe_file(
            "it is not a regular file".into(),
            "install the shared object itself",
        ));
    }
    let mode = metadata.permissions().mode();
    if mode & 0o002 != 0 {
        return Err(unsafe_file(
            format!("it is writable by anyone (mode {:o})", mode & 0o7777),
            "make it writable by its owner only (chmod go-w) and check it is the file you built",
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own_uid = unsafe { libc::geteuid() };
    if metadata.uid() != own_uid && metadata.uid() != 0 {
        return Err(unsafe_file(
            format!(
                "it belongs to user {}, not to the controller's user {own_uid}",
                metadata.uid()
            ),
            "install a copy you own, or one root installed",
        ));
    }
    for directory in resolved.ancestors().skip(1) {
        let Ok(metadata) = std::fs::metadata(directory) else {
            continue;
        };
        let mode = metadata.permissions().mode();
        if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            return Err(unsafe_file(
                format!(
                    "it is under {}, which anyone may write and has no sticky bit, so anyone could replace it",
                    directory.display()
                ),
                "move it to a directory only you can write",
            ));
        }
    }
    Ok((file, resolved))
}

/// Copies `from` into a new file at `to` that only its owner may read or
/// write (mode 0600), whatever the source's mode.
fn copy_owner_only(from: &mut File, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut copy = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    std::io::copy(from, &mut copy)?;
    copy.sync_all()
}

/// The SHA-256 of a file, in lowercase hex.
pub fn sha256_hex(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    Ok(hex::encode(Sha256::digest(std::fs::read(path)?)))
}

/// Whether a file looks like a shared object.
fn is_shared_object(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|extension| extension.to_str()),
        Some("so" | "dylib")
    )
}

/// The loaded plugins, by name, and where they are installed.
pub struct PluginRegistry {
    plugins_dir: PathBuf,
    options: LoadOptions,
    reserved_names: Vec<&'static str>,
    loaded: RwLock<BTreeMap<String, Arc<PluginHandle>>>,
    staging_counter: AtomicU64,
    /// How settings are checked against a plugin's schema, when the
    /// embedder gave a way.
    settings_check: Option<SettingsCheck>,
}

impl std::fmt::Debug for PluginRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRegistry")
            .field("plugins_dir", &self.plugins_dir)
            .field("loaded", &self.loaded.read().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl PluginRegistry {
    /// Opens the plugins directory (creating it) and loads every plugin
    /// installed there. `reserved_names` are names no plugin may take (the
    /// core blocks). Plugins that fail to load are reported, not fatal.
    pub fn open(
        plugins_dir: &Path,
        options: LoadOptions,
        reserved_names: Vec<&'static str>,
    ) -> Result<(PluginRegistry, Vec<LoadFailure>), RegistryError> {
        Self::open_with_settings_check(plugins_dir, options, reserved_names, None)
    }

    /// [`PluginRegistry::open`], with `settings_check` checking settings
    /// against a plugin's settings schema before its `configure` sees
    /// them: those kept, at start, and those given later (the controller
    /// validates JSON Schema). Without one, only the plugin's `configure`
    /// checks them.
    pub fn open_with_settings_check(
        plugins_dir: &Path,
        options: LoadOptions,
        reserved_names: Vec<&'static str>,
        settings_check: Option<SettingsCheck>,
    ) -> Result<(PluginRegistry, Vec<LoadFailure>), RegistryError> {
        std::fs::create_dir_all(plugins_dir).map_err(|source| RegistryError::Io {
            action: "create",
            path: plugins_dir.to_owned(),
            source,
        })?;
        let registry = PluginRegistry {
            plugins_dir: plugins_dir.to_owned(),
            options,
            reserved_names,
            loaded: RwLock::new(BTreeMap::new()),
            staging_counter: AtomicU64::new(0),
            settings_check,
        };
        let mut failures = Vec::new();
        let entries = std::fs::read_dir(plugins_dir).map_err(|source| RegistryError::Io {
            action: "read",
            path: plugins_dir.to_owned(),
            source,
        })?;
        let mut directories: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.is_dir())
            .collect();
        directories.sort();
        for directory in directories {
            let Some(dir_name) = directory.file_name().and_then(|name| name.to_str()) else {
                continue;
            };
            if dir_name.starts_with('.') {
                // Left over from an install that did not finish.
                let _ = std::fs::remove_dir_all(&directory);
                continue;
            }
            match registry.load_installed(&directory, dir_name) {
                Ok(handle) => {
                    tracing::info!(plugin = dir_name, version = %handle.info().version, "plugin loaded");
                    registry
                        .loaded
                        .write()
                        .insert(dir_name.to_owned(), Arc::new(handle));
                }
                Err(error) => {
                    tracing::error!(path = %directory.display(), %error, "plugin did not load");
                    failures.push(LoadFailure {
                        path: directory,
                        error,
                    });
                }
            }
        }
        Ok((registry, failures))
    }

    fn load_installed(&self, directory: &Path, dir_name: &str) -> Result<PluginHandle, String> {
        if let Some(crash) = crate::crash::crashed_in(directory) {
            let (call, cause) = crash
                .split_once(' ')
                .unwrap_or((crash.as_str(), "a signal"));
            let what = if cause == crate::crash::EXIT_CAUSE {
                format!("this plugin called exit() inside its {call}, which ended the controller")
            } else {
                format!("the controller crashed with {cause} inside this plugin's {call}")
            };
            return Err(format!(
                "quarantined: {what}, so it was not loaded — replace it with a fixed build (`vd plugins:install --replace FILE.so`), try it again (`vd plugins:reload {dir_name}`), or remove it (`vd plugins:remove {dir_name}`)"
            ));
        }
        let objects: Vec<PathBuf> = std::fs::read_dir(directory)
            .map_err(|error| format!("cannot read {}: {error}", directory.display()))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| is_shared_object(path))
            .collect();
        let [object] = objects.as_slice() else {
            return Err(format!(
                "{} holds {} shared objects, not one — reinstall the plugin with `vd plugins:install`",
                directory.display(),
                objects.len()
            ));
        };
        let options = LoadOptions {
            out_of_process: self.options.out_of_process || kept_out_of_process(directory),
            ..self.options
        };
        let handle = load_plugin(object, &options).map_err(|error| error.to_string())?;
        if handle.name() != dir_name {
            return Err(format!(
                "{} names itself {:?} but is installed as {dir_name:?} — reinstall it with `vd plugins:install`",
                object.display(),
                handle.name()
            ));
        }
        let settings = crate::settings::read_kept(directory).map_err(|error| error.to_string())?;
        if let Err(error) =
            crate::settings::hand_over(&handle, &settings, self.settings_check.as_ref())
        {
            handle.shutdown();
            return Err(format!(
                "{error} — give it settings it takes with `vd plugins:settings {dir_name} FILE`"
            ));
        }
        Ok(handle)
    }

    /// Whether the plugin in `file` replaces one installed to run out of
    /// process. Only asked when one is: the plugin's name is then read in
    /// a child process (the file's code runs only there), which is refused
    /// before its `init`.
    fn keeps_out_of_process_as(&self, file: &Path) -> bool {
        let any = self
            .loaded
            .read()
            .keys()
            .any(|name| kept_out_of_process(&self.plugins_dir.join(name)));
        any && crate::out_of_process::name_of(file, &self.options)
            .is_some_and(|name| kept_out_of_process(&self.plugins_dir.join(name)))
    }

    /// Whether the installed plugin `name` was installed to run out of
    /// process (`plugins:install --out-of-process`).
    pub fn runs_out_of_process(&self, name: &str) -> bool {
        self.options.out_of_process || kept_out_of_process(&self.plugins_dir.join(name))
    }

    /// The directory plugins are installed in.
    pub fn plugins_dir(&self) -> &Path {
        &self.plugins_dir
    }

    /// The loaded plugin of that name.
    pub fn get(&self, name: &str) -> Option<Arc<PluginHandle>> {
        self.loaded.read().get(name).cloned()
    }

    /// Every loaded plugin, by name.
    pub fn list(&self) -> Vec<Arc<PluginHandle>> {
        self.loaded.read().values().cloned().collect()
    }

    /// Installs the plugin file at `source`: stages a copy under the plugins
    /// directory, loads it there to check that it loads and names itself,
    /// then renames the staging directory to `<plugins>/<name>/`. The plugin
    /// is live when this returns. An installed plugin of the same name is
    /// refused unless `replace`, in which case it is shut down and replaced.
    /// [`PluginRegistry::stage`] and [`PluginRegistry::commit`] do the same
    /// in two steps, for a caller that checks the new version in between.
    pub fn install(
        &self,
        source: &Path,
        options: &InstallOptions,
    ) -> Result<Installed, RegistryError> {
        let staged = self.stage(source, options)?;
        let (installed, replaced) = self.commit(staged)?;
        if let Some(replaced) = replaced {
            replaced.shutdown();
        }
        Ok(installed)
    }

    /// The first half of an install: copies the file under the plugins
    /// directory and loads it there, checking that it loads, names itself
    /// validly, and does not take an installed name unless `replace`. The
    /// plugin is loaded but not live: [`PluginRegistry::get`] still returns
    /// the installed version until [`PluginRegistry::commit`]. Dropping the
    /// staged plugin shuts it down and removes its files.
    pub fn stage(
        &self,
        source: &Path,
        options: &InstallOptions,
    ) -> Result<StagedPlugin, RegistryError> {
        let replace = options.replace;
        let (mut opened, resolved) = open_safely(source)?;
        let file_name = resolved
            .file_name()
            .ok_or_else(|| RegistryError::Io {
                action: "read",
                path: source.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file"),
            })?
            .to_owned();
        let staging = self.plugins_dir.join(format!(
            ".staging-{}-{}",
            std::process::id(),
            self.staging_counter.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&staging).map_err(|error| RegistryError::Io {
            action: "create",
            path: staging.clone(),
            source: error,
        })?;
        // From here on, dropping `staged` cleans up.
        let mut staged = StagedPlugin {
            staging,
            file_name,
            handle: None,
        };
        let staged_file = staged.staging.join(&staged.file_name);
        copy_owner_only(&mut opened, &staged_file).map_err(|error| RegistryError::Io {
            action: "copy",
            path: source.to_owned(),
            source: error,
        })?;
        if let Some(expected) = &options.sha256 {
            let actual = sha256_hex(&staged_file).map_err(|error| RegistryError::Io {
                action: "read",
                path: staged_file.clone(),
                source: error,
            })?;
            if !actual.eq_ignore_ascii_case(expected.trim()) {
                return Err(RegistryError::DigestMismatch {
                    path: source.to_owned(),
                    expected: expected.trim().to_ascii_lowercase(),
                    actual,
                });
            }
        }
        // The name is checked before the plugin's `init` runs, so an
        // install refused by its name runs none of the plugin's code but
        // its library's constructors; the same checks run again below, on
        // the registry as it is then.
        let installed: std::collections::HashMap<String, String> = self
            .loaded
            .read()
            .iter()
            .map(|(name, handle)| (name.clone(), handle.info().version.clone()))
            .collect();
        let reserved: Vec<&'static str> = self.reserved_names.clone();
        let shown_source = source.to_owned();
        let before_init: crate::loader::BeforeInit = Arc::new(move |info: &PluginInfo| {
            refuse_by_name(
                &info.name,
                &reserved,
                installed.get(&info.name).cloned(),
                replace,
                &shown_source,
            )
            .map_err(|refused| refused.to_string())
        });
        // Where it runs: as asked, else where the installed plugin of its
        // name runs.
        let out_of_process = self.options.out_of_process
            || match options.out_of_process {
                Some(chosen) => chosen,
                None => self.keeps_out_of_process_as(&staged_file),
            };
        if out_of_process {
            std::fs::write(staged.staging.join(OUT_OF_PROCESS_MARKER), b"").map_err(|error| {
                RegistryError::Io {
                    action: "write",
                    path: staged.staging.join(OUT_OF_PROCESS_MARKER),
                    source: error,
                }
            })?;
        }
        let load_options = LoadOptions {
            out_of_process,
            ..self.options
        };
        let handle = crate::loader::load_plugin_checked(&staged_file, &load_options, before_init)?;
        let name = handle.name().to_owned();
        staged.handle = Some(handle);
        if !is_valid_plugin_name(&name) {
            return Err(RegistryError::BadName {
                path: source.to_owned(),
                name,
            });
        }
        let installed_version = self
            .get(&name)
            .map(|previous| previous.info().version.clone());
        refuse_by_name(
            &name,
            &self.reserved_names,
            installed_version,
            replace,
            source,
        )?;
        // Configured before anything else is asked of it: the settings
        // given, else those the installed plugin keeps (a replace keeps
        // them). They move into place with the file.
        let settings = match &options.settings {
            Some(settings) => settings.clone(),
            None => crate::settings::read_kept(&self.plugins_dir.join(&name))?,
        };
        crate::settings::hand_over(staged.handle(), &settings, self.settings_check.as_ref())?;
        crate::settings::write_kept(&staged.staging, &settings)?;
        Ok(staged)
    }

    /// The second half of an install: renames the staged plugin's directory
    /// to `<plugins>/<name>/` and makes it the live instance. Returns the
    /// instance it replaced, which the caller shuts down once it holds no
    /// lock ([`PluginHandle::shutdown`] lets a call in flight finish first,
    /// and may wait for it); the next call goes to the new instance.
    pub fn commit(
        &self,
        mut staged: StagedPlugin,
    ) -> Result<(Installed, Option<Arc<PluginHandle>>), RegistryError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| RegistryError::Io {
                action,
                path,
                source,
            }
        };
        let handle = staged
            .handle
            .take()
            .expect("cannot fail: a staged plugin holds its handle until committed");
        let name = handle.name().to_owned();
        let mut loaded = self.loaded.write();
        let previous = loaded.get(&name).cloned();
        let target = self.plugins_dir.join(&name);
        let retired = self
            .plugins_dir
            .join(format!(".retired-{name}-{}", std::process::id()));
        if target.exists() {
            if let Err(error) = std::fs::rename(&target, &retired) {
                staged.handle = Some(handle);
                return Err(io("move aside", &target)(error));
            }
        }
        if let Err(error) = std::fs::rename(&staged.staging, &target) {
            let _ = std::fs::rename(&retired, &target);
            staged.handle = Some(handle);
            return Err(io("install into", &target)(error));
        }
        let _ = std::fs::remove_dir_all(&retired);
        let handle = Arc::new(handle.installed_at(target.join(&staged.file_name)));
        let info = handle.info().clone();
        loaded.insert(name, handle);
        drop(loaded);
        tracing::info!(plugin = %info.name, version = %info.version, "plugin installed");
        let installed = Installed {
            info,
            replaced_version: previous
                .as_ref()
                .map(|previous| previous.info().version.clone()),
        };
        Ok((installed, previous))
    }

    /// Shuts the plugin down, closes the sockets the host held for it, and
    /// deletes its directory. Whether any workload
    /// still uses it is the caller's question: the registry knows no
    /// workloads.
    pub fn remove(&self, name: &str) -> Result<Option<PluginInfo>, RegistryError> {
        let directory = self.plugins_dir.join(name);
        let removed = self.loaded.write().remove(name);
        if removed.is_none() && (!is_valid_plugin_name(name) || !directory.is_dir()) {
            return Err(RegistryError::NotInstalled {
                name: name.to_owned(),
            });
        }
        if let Some(handle) = &removed {
            handle.shutdown();
        }
        crate::listeners::ListenerTable::process().release_all(name);
        if directory.exists() {
            std::fs::remove_dir_all(&directory).map_err(|source| RegistryError::Io {
                action: "remove",
                path: directory,
                source,
            })?;
        }
        Ok(removed.map(|handle| handle.info().clone()))
    }

    /// The installed shared object of plugin `name` (loaded or not, as a
    /// quarantined one is not), and whether it is quarantined after a crash.
    pub fn installed_file(&self, name: &str) -> Result<(PathBuf, bool), RegistryError> {
        let directory = self.plugins_dir.join(name);
        let not_installed = || RegistryError::NotInstalled {
            name: name.to_owned(),
        };
        if !is_valid_plugin_name(name) || !directory.is_dir() {
            return Err(not_installed());
        }
        let object = std::fs::read_dir(&directory)
            .map_err(|source| RegistryError::Io {
                action: "read",
                path: directory.clone(),
                source,
            })?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .find(|path| is_shared_object(path))
            .ok_or_else(not_installed)?;
        Ok((object, crate::crash::crashed_in(&directory).is_some()))
    }

    /// The settings plugin `name` keeps (`{}` for none).
    pub fn settings(&self, name: &str) -> Result<serde_json::Value, RegistryError> {
        self.installed_file(name)?;
        Ok(crate::settings::read_kept(&self.plugins_dir.join(name))?)
    }

    /// Gives the loaded plugin `name` new settings: checked, handed to its
    /// `configure`, then kept. Returns those it had. Refused or not kept,
    /// nothing changes (the plugin is handed its old settings back when
    /// they could not be kept). The caller serialises this with installs.
    pub fn set_settings(
        &self,
        name: &str,
        settings: &serde_json::Value,
    ) -> Result<serde_json::Value, RegistryError> {
        let handle = self.get(name).ok_or_else(|| RegistryError::NotInstalled {
            name: name.to_owned(),
        })?;
        let directory = self.plugins_dir.join(name);
        let previous = crate::settings::read_kept(&directory)?;
        let check = self.settings_check.as_ref();
        crate::settings::hand_over(&handle, settings, check)?;
        if let Err(error) = crate::settings::write_kept(&directory, settings) {
            if let Err(restore) = crate::settings::hand_over(&handle, &previous, check) {
                tracing::warn!(plugin = %name, %restore, "the settings it had could not be handed back");
            }
            return Err(error.into());
        }
        Ok(previous)
    }

    /// Adds an already-loaded plugin, for embedding and benchmarks that load
    /// plugins themselves.
    pub fn insert_loaded(&self, handle: PluginHandle) {
        self.loaded
            .write()
            .insert(handle.name().to_owned(), Arc::new(handle));
    }
}

/// Refuses an install of a plugin named `name` from `source`: a core
/// block's name (`reserved`), or a name already installed (at
/// `installed_version`) without `replace`. Asked before the plugin's `init`
/// runs, and again once it is loaded, on the registry as it is then.
fn refuse_by_name(
    name: &str,
    reserved: &[&'static str],
    installed_version: Option<String>,
    replace: bool,
    source: &Path,
) -> Result<(), RegistryError> {
    if reserved.contains(&name) {
        return Err(RegistryError::CoreBlockName {
            path: source.to_owned(),
            name: name.to_owned(),
        });
    }
    match installed_version {
        Some(version) if !replace => Err(RegistryError::AlreadyInstalled {
            name: name.to_owned(),
            version,
            path: source.to_owned(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_must_be_block_types() {
        assert!(is_valid_plugin_name("traffik"));
        assert!(is_valid_plugin_name("voodu-haproxy_2"));
        assert!(!is_valid_plugin_name(""));
        assert!(!is_valid_plugin_name("../etc"));
        assert!(!is_valid_plugin_name("2fast"));
        assert!(!is_valid_plugin_name(".hidden"));
    }
}
