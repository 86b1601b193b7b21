//! The plugin verbs, `plugins_install`, `plugins_reload`, `plugins_list`
//! and `plugins_remove`. Installing or reloading is one transaction
//! ([`crate::install`]): the new version revalidates every stored block of
//! its type and is made live only if it accepts them all; then the
//! reconciler tells it every block's current set.

use std::path::Path;

use voodu_api::{Failure, PluginRow, Response};
use voodu_model::signing::{PluginSignature, PluginStatement};
use voodu_plugin_host::{InstallOptions, Installed, RegistryError};
use voodu_store_etcd::PluginRecord;

use super::store_failure;
use crate::install::{install_plugin, InstallError, InstallReport};
use crate::{wire, Controller, MAX_RELOADS};

/// Installs (or with `options.replace`, replaces) the plugin at `path`,
/// checked against `options.sha256` when given, with `options.settings`
/// (else those of the plugin it replaces).
pub(crate) fn install(
    controller: &Controller,
    path: &Path,
    options: InstallOptions,
) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let (plugin, installed, report) =
        install_and_announce(controller, path, &options, "plugins:install")?;
    let statement = share_with_cluster(controller, &plugin)?
        .map(|record| statement_of(controller, &record, &plugin.abi).to_text());
    if let Some(settings) = &options.settings {
        share_settings_with_cluster(controller, &plugin.name, settings)?;
    }
    Ok(Response::Installed {
        plugin,
        replaced_version: installed.replaced_version,
        revalidated: report.revalidated.iter().map(ToString::to_string).collect(),
        statement,
    })
}

/// Installs a plugin whose file a client on another host sent (`vd -H
/// ssh://... plugins:install`): written to a private directory of the
/// root first, then installed as [`install`] does, and removed.
/// `sent_from` is where it was read on the client's host.
pub(crate) fn install_sent(
    controller: &Controller,
    sent_from: &Path,
    bytes: &[u8],
    options: InstallOptions,
) -> Result<Response, Failure> {
    let received = controller.root.join(RECEIVED_DIR);
    let cannot_keep = |error: &dyn std::fmt::Display| {
        Failure::new(format!(
            "plugins:install: cannot keep the file sent from {} in {}: {error}",
            sent_from.display(),
            received.display()
        ))
    };
    crate::create_private_dir(&received).map_err(|error| cannot_keep(&error))?;
    let name = sent_from
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .unwrap_or_else(|| "plugin.so".to_owned());
    // A name of its own per request, never over another's file: two
    // installs sent at once each install their own bytes.
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let count = SENT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let file = received.join(format!("{}-{count}-{name}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)
        .and_then(|mut out| std::io::Write::write_all(&mut out, bytes))
        .map_err(|error| cannot_keep(&error))?;
    let installed = install(controller, &file, options);
    let _ = std::fs::remove_file(&file);
    installed
}

/// Where a plugin file sent by a client waits while it is installed, under
/// the root.
const RECEIVED_DIR: &str = "received";

/// Loads the installed plugin `name` again from its file, at most
/// [`MAX_RELOADS`] times in a controller's life.
pub(crate) fn reload(controller: &Controller, name: &str) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let failure = |error: RegistryError| Failure::new(format!("plugins:reload: {error}"));
    let (file, was_quarantined) = controller.plugins.installed_file(name).map_err(failure)?;
    let left_behind = {
        let mut reloads = controller.reloads.lock();
        let count = reloads.entry(name.to_owned()).or_insert(0);
        if *count >= MAX_RELOADS {
            return Err(Failure::new(format!(
                "plugins:reload: {name} was reloaded {MAX_RELOADS} times by this controller, and each reload leaves the old instance's thread and library behind — restart the controller (`vd controller`) to reload it again"
            )));
        }
        // An instance is left behind only when one was loaded.
        if controller.plugins.get(name).is_some() {
            *count += 1;
        }
        *count
    };
    let (plugin, _, _) = install_and_announce(
        controller,
        &file,
        &InstallOptions {
            replace: true,
            sha256: None,
            settings: None,
            out_of_process: Some(controller.plugins.runs_out_of_process(name)),
        },
        "plugins:reload",
    )?;
    Ok(Response::Reloaded {
        plugin,
        was_quarantined,
        instances_left_behind: left_behind,
    })
}

/// Every loaded plugin, and every plugin file that failed to load.
pub(crate) fn list(controller: &Controller) -> Response {
    Response::Plugins {
        plugins: controller
            .plugins
            .list()
            .iter()
            .map(|handle| wire::plugin_row(handle))
            .map(|row| api_row_with_settings(controller, row))
            .collect(),
        failures: controller
            .load_failures
            .lock()
            .iter()
            .map(wire::load_failure)
            .collect(),
    }
}

/// `row`, with the settings its plugin keeps.
fn api_row_with_settings(controller: &Controller, mut row: PluginRow) -> PluginRow {
    row.settings = kept_settings(controller, &row.name);
    row
}

/// Removes the plugin `name`, which no stored workload may still use.
pub(crate) fn remove(controller: &Controller, name: &str) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let users = controller
        .store
        .workloads_with_block_type(name)
        .map_err(store_failure)?;
    if !users.is_empty() {
        let names: Vec<String> = users.iter().map(ToString::to_string).collect();
        return Err(Failure::new(format!(
            "plugins:remove: plugin \"{name}\" is still used by {} — remove its blocks from {} or delete {} first",
            names.join(", "),
            if users.len() == 1 { "that workload" } else { "those workloads" },
            if users.len() == 1 { "it" } else { "them" },
        )));
    }
    controller
        .plugins
        .remove(name)
        .map_err(|error| Failure::new(format!("plugins:remove: {error}")))?;
    let removal = match controller.cluster() {
        Some(cluster) => cluster
            .store
            .put_plugin_settings(name, &serde_json::json!({}))
            .and_then(|()| cluster.store.remove_plugin(name))
            .map_err(|error| {
            Failure::new(format!(
                "plugins:remove: {name} is removed from this node, but the cluster could not be told: {error} — run it again"
            ))
        })?,
        None => None,
    };
    controller
        .load_failures
        .lock()
        .retain(|failure| !failure.path.ends_with(name));
    Ok(Response::Removed {
        name: name.to_owned(),
        statement: removal.map(|record| statement_of(controller, &record, "").to_text()),
    })
}

/// In a cluster: stores the installed file for every node, so a node that
/// starts (or takes the workloads over) installs it too.
fn share_with_cluster(
    controller: &Controller,
    plugin: &PluginRow,
) -> Result<Option<PluginRecord>, Failure> {
    let Some(cluster) = controller.cluster() else {
        return Ok(None);
    };
    let unshared = |error: String| {
        Failure::new(format!(
            "plugins:install: {} {} is live on this node, but not stored for the cluster: {error} — install it again",
            plugin.name, plugin.version
        ))
    };
    let (file, _) = controller
        .plugins
        .installed_file(&plugin.name)
        .map_err(|error| unshared(error.to_string()))?;
    let bytes = std::fs::read(&file).map_err(|error| unshared(error.to_string()))?;
    cluster
        .store
        .put_plugin(&plugin.name, &plugin.version, &bytes)
        .map(Some)
        .map_err(|error| unshared(error.to_string()))
}

/// What an operator signs of `record`: stated by this node, now.
fn statement_of(controller: &Controller, record: &PluginRecord, abi: &str) -> PluginStatement {
    PluginStatement {
        name: record.name.clone(),
        version: record.version.clone(),
        abi: abi.to_owned(),
        sha256: record.sha256.clone(),
        node: controller.node_name().unwrap_or_default(),
        at: voodu_store::rfc3339(now_ms()),
        removed: record.removed,
    }
}

/// Unix milliseconds now.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

/// The cluster's record of plugin `name`, for `verb`.
fn cluster_record(
    controller: &Controller,
    name: &str,
    verb: &str,
) -> Result<PluginRecord, Failure> {
    let Some(cluster) = controller.cluster() else {
        return Err(Failure::new(format!(
            "{verb}: this node is not in a cluster — signatures are for plugins installed cluster-wide"
        )));
    };
    cluster
        .store
        .plugin_records()
        .map_err(store_failure)?
        .into_iter()
        .find(|record| record.name == name)
        .ok_or_else(|| {
            Failure::new(format!(
                "{verb}: the cluster has no plugin {name:?} — `vd plugins:list` shows those installed"
            ))
        })
}

/// The statement of cluster plugin `name`'s record, for an operator to
/// sign (`vd plugins:sign`).
pub(crate) fn statement(controller: &Controller, name: &str) -> Result<Response, Failure> {
    let record = cluster_record(controller, name, "plugins:sign")?;
    let abi = controller
        .plugins
        .get(name)
        .map(|handle| format!("{}.{}", handle.info().abi_major, handle.info().abi_minor))
        .unwrap_or_default();
    Ok(Response::PluginStatement {
        name: name.to_owned(),
        statement: statement_of(controller, &record, &abi).to_text(),
    })
}

/// Puts an operator's signature on cluster plugin `name`'s record: it must
/// verify under its own key, over a statement of the record as it is now.
pub(crate) fn sign(
    controller: &Controller,
    name: &str,
    signature: &PluginSignature,
) -> Result<Response, Failure> {
    let _writes = controller.lock_writes()?;
    let refused = |why: String| Failure::new(format!("plugins:sign: {name}: {why}"));
    let record = cluster_record(controller, name, "plugins:sign")?;
    let statement = signature
        .verified_statement()
        .map_err(|error| refused(error.to_string()))?;
    if statement.name != record.name
        || statement.version != record.version
        || statement.sha256 != record.sha256
        || statement.removed != record.removed
    {
        return Err(refused(format!(
            "the signed statement is of {} {} ({}), the record of {} {} ({}) — sign the record as it is now (`vd plugins:sign {name}`)",
            statement.name, statement.version, statement.sha256, record.name, record.version, record.sha256
        )));
    }
    let Some(cluster) = controller.cluster() else {
        return Err(refused("not in a cluster".to_owned()));
    };
    if !cluster
        .store
        .sign_plugin(&record, signature)
        .map_err(store_failure)?
    {
        return Err(refused(
            "its record was replaced while it was signed — sign it again".to_owned(),
        ));
    }
    tracing::info!(plugin = %name, key = %signature.key_id(), "a cluster plugin's record was signed");
    Ok(Response::PluginSigned {
        name: name.to_owned(),
        key_id: signature.key_id().to_owned(),
        removed: statement.removed,
    })
}

/// Installs (or replaces) a plugin and makes it hear every set; `verb`
/// starts each error message. The caller holds the write lock.
fn install_and_announce(
    controller: &Controller,
    path: &Path,
    options: &InstallOptions,
    verb: &str,
) -> Result<(PluginRow, Installed, InstallReport), Failure> {
    let report = install_plugin(path, options, &controller.plugins, &*controller.store).map_err(
        |error| match error {
            InstallError::Refused(diagnostics) => Failure {
                message: format!(
                    "{verb}: the new version refused {} stored block{}; nothing changed — fix {} and apply, or keep the installed version",
                    diagnostics.len(),
                    if diagnostics.len() == 1 { "" } else { "s" },
                    if diagnostics.len() == 1 { "it" } else { "them" },
                ),
                diagnostics,
            },
            InstallError::LiveButNotStored { installed, error } => {
                // Live all the same: it hears every set.
                if let Some(reconciler) = controller.reconciler() {
                    reconciler.plugin_changed(&installed.info.name);
                }
                Failure::new(format!(
                    "{verb}: {}",
                    InstallError::LiveButNotStored { installed, error }
                ))
            }
            other => Failure::new(format!("{verb}: {other}")),
        },
    )?;
    let mut report = report;
    let replaced = report.replaced.take();
    let installed = report.installed.clone();
    let plugin = controller
        .plugins
        .get(&installed.info.name)
        .map(|handle| wire::plugin_row(&handle))
        .ok_or_else(|| Failure::new("the plugin was removed while installing"))?;
    controller
        .load_failures
        .lock()
        .retain(|failure| !failure.path.ends_with(&installed.info.name));
    if let Some(reconciler) = controller.reconciler() {
        // The new instance hears every block's current set.
        reconciler.plugin_changed(&installed.info.name);
    }
    if let Some(replaced) = replaced {
        // Shut down once the new instance is live and being offered every
        // set, off this request: a plugin serving traffic (traffik) stops
        // accepting on the sockets the host holds, which the new instance
        // accepts on, and finishes its open connections first.
        let spawned = std::thread::Builder::new()
            .name("voodu-plugin-replaced".into())
            .spawn(move || replaced.shutdown());
        if let Err(error) = spawned {
            tracing::warn!(%error, "the replaced instance could not be shut down on a thread of its own");
        }
    }
    Ok((plugin, installed, report))
}

/// The loaded plugin `name`, or why there is none to ask.
fn loaded_plugin(
    controller: &Controller,
    name: &str,
) -> Result<std::sync::Arc<voodu_plugin_host::PluginHandle>, Failure> {
    controller.plugins().get(name).ok_or_else(|| {
        Failure::new(format!(
            "no plugin {name} is loaded — `vd plugins:list` lists the plugins, and why any did not load"
        ))
    })
}

/// `plugins:call`: one call, with the request as the author wrote it, to the
/// loaded instance (it reaches the live plugin: a publish changes what it
/// serves); the reply of an OK status, or why there is none.
pub(crate) fn call(
    controller: &Controller,
    name: &str,
    call: voodu_api::PluginCallName,
    request: &serde_json::Value,
) -> Result<Response, Failure> {
    use voodu_api::PluginCallName;
    use voodu_plugin_host::PluginCall;
    let plugin = loaded_plugin(controller, name)?;
    let which = match call {
        PluginCallName::Validate => PluginCall::Validate,
        PluginCallName::Publish => PluginCall::Publish,
        PluginCallName::Drain => PluginCall::Drain,
        PluginCallName::Forget => PluginCall::Forget,
    };
    let bytes = serde_json::to_vec(request)
        .map_err(|error| Failure::new(format!("the request cannot be sent: {error}")))?;
    let started = std::time::Instant::now();
    let outcome = plugin.call_raw(which, bytes);
    let elapsed_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(reply) => Ok(Response::PluginReply {
            plugin: name.to_owned(),
            call,
            reply: if reply.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::from_slice(&reply).unwrap_or_else(|_| {
                    serde_json::Value::String(String::from_utf8_lossy(&reply).into_owned())
                })
            },
            elapsed_ms,
        }),
        Err(voodu_plugin_host::CallError::Refused { message, .. }) => Err(Failure::new(format!(
            "plugin {name} refused the {call} request (in {elapsed_ms} ms): {message}"
        ))),
        Err(error) => Err(Failure::new(format!("{error} (after {elapsed_ms} ms)"))),
    }
}

/// `explain`: the options of block type `block`, as its plugin describes
/// them.
pub(crate) fn explain(controller: &Controller, block: &str) -> Result<Response, Failure> {
    let plugin = controller.plugins().get(block).ok_or_else(|| {
        Failure::new(format!(
            "no plugin owns {block} blocks here — `vd plugins:list` lists the loaded plugins, whose names are the block types they own"
        ))
    })?;
    let schema = plugin.describe().map_err(|error| {
        Failure::new(format!(
            "{error} — the plugin could not describe its options"
        ))
    })?;
    let settings_schema = plugin.settings_schema().map_err(|error| {
        Failure::new(format!(
            "{error} — the plugin could not describe its settings"
        ))
    })?;
    Ok(Response::Explained {
        plugin: plugin.name().to_owned(),
        version: plugin.info().version.clone(),
        schema,
        settings_schema,
        settings: kept_settings(controller, block),
    })
}

/// The settings plugin `name` keeps, `None` when it keeps none (or they
/// cannot be read, which its load would have said).
pub(crate) fn kept_settings(controller: &Controller, name: &str) -> Option<serde_json::Value> {
    controller
        .plugins
        .settings(name)
        .ok()
        .filter(|settings| settings.as_object().is_none_or(|fields| !fields.is_empty()))
}

/// `plugins:settings`: plugin `name`'s settings, or, given `settings`, new
/// ones: checked against its schema, taken by its `configure`, kept beside
/// its file and, in a cluster, stored for every node. A plugin that did
/// not load (its kept settings refused) is loaded again from its file with
/// the new ones.
pub(crate) fn settings(
    controller: &Controller,
    name: &str,
    settings: Option<serde_json::Value>,
) -> Result<Response, Failure> {
    let verb = "plugins:settings";
    let answer = |handle: &voodu_plugin_host::PluginHandle,
                  settings: serde_json::Value,
                  previous: Option<serde_json::Value>| {
        Ok(Response::PluginSettings {
            plugin: handle.name().to_owned(),
            version: handle.info().version.clone(),
            settings,
            previous,
            schema: handle
                .settings_schema()
                .map_err(|error| Failure::new(format!("{verb}: {error}")))?,
        })
    };
    let Some(settings) = settings else {
        let handle = loaded_plugin(controller, name)
            .map_err(|failure| Failure::new(format!("{verb}: {}", failure.message)))?;
        let kept = controller
            .plugins
            .settings(name)
            .map_err(|error| Failure::new(format!("{verb}: {error}")))?;
        return answer(&handle, kept, None);
    };
    let _writes = controller.lock_writes()?;
    let previous = if controller.plugins.get(name).is_some() {
        controller
            .plugins
            .set_settings(name, &settings)
            .map_err(|error| Failure::new(format!("{verb}: {name}: {error} — nothing changed")))?
    } else {
        // Not loaded: load it again from its file, with these.
        let (file, _) = controller
            .plugins
            .installed_file(name)
            .map_err(|error| Failure::new(format!("{verb}: {error}")))?;
        let previous = controller.plugins.settings(name).unwrap_or_default();
        install_and_announce(
            controller,
            &file,
            &InstallOptions {
                replace: true,
                sha256: None,
                settings: Some(settings.clone()),
                out_of_process: Some(controller.plugins.runs_out_of_process(name)),
            },
            verb,
        )?;
        previous
    };
    share_settings_with_cluster(controller, name, &settings)?;
    let handle = controller
        .plugins
        .get(name)
        .ok_or_else(|| Failure::new("the plugin was removed while its settings changed"))?;
    tracing::info!(plugin = %name, "the plugin's settings were changed");
    answer(&handle, settings, Some(previous))
}

/// In a cluster: stores plugin `name`'s settings for every node, which
/// each hand them to their instance.
fn share_settings_with_cluster(
    controller: &Controller,
    name: &str,
    settings: &serde_json::Value,
) -> Result<(), Failure> {
    let Some(cluster) = controller.cluster() else {
        return Ok(());
    };
    cluster
        .store
        .put_plugin_settings(name, settings)
        .map_err(|error| {
            Failure::new(format!(
                "{name}'s settings are taken on this node, but not stored for the cluster: {error} — give them again"
            ))
        })
}
