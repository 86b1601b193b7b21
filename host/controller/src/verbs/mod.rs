//! One handler module per verb of the API: [`answer`] matches every
//! [`Request`] variant (no catch-all, so a verb added to the API does not
//! compile until it has a handler here), and each arm calls its verb's
//! module. The streaming verbs (`wait`, `logs`, and watches) are answered
//! in [`crate::stream`] instead, which the server routes to first.
//!
//! | verb | module |
//! |---|---|
//! | `apply` (and `--dry-run`) | [`apply`] |
//! | `describe` | [`describe`] |
//! | `get` | [`get`] |
//! | `pods` (and `--orphans`) | [`pods`] |
//! | `events` | [`events`] |
//! | `delete` | [`delete`] |
//! | `history` | [`history`] |
//! | `rollback` | [`rollback`] |
//! | `restart` | [`restart`] |
//! | `stop`, `start` | [`stops`] |
//! | `plugins_install`, `plugins_reload`, `plugins_list`, `plugins_remove` | [`plugins`] |
//! | `prune_orphans` | [`prune`] |
//! | `store_backup` | [`crate::backup`] |
//! | `version` | [`version`] |
//! | `nodes` | [`nodes`] |
//! | `wait`, `logs`, `exec` | [`crate::stream`] |

pub(crate) mod apply;
pub(crate) mod config;
pub(crate) mod delete;
pub(crate) mod describe;
pub(crate) mod events;
pub(crate) mod get;
pub(crate) mod history;
pub(crate) mod nodes;
pub(crate) mod plugins;
pub(crate) mod pods;
pub(crate) mod prune;
pub(crate) mod restart;
pub(crate) mod rollback;
pub(crate) mod stats;
pub(crate) mod stops;
pub(crate) mod version;

use voodu_api::{ApplyProgress, Failure, Request, Response};
use voodu_plugin_host::InstallOptions;
use voodu_store::StoreError;

use crate::Controller;

/// A store failure, as a request's answer.
pub(crate) fn store_failure(error: StoreError) -> Failure {
    Failure::new(error.to_string())
}

/// A refusal with its problems: `message` is given how many were found
/// (`"1 problem"`, `"3 problems"`) and says what was refused.
pub(crate) fn refusal(
    diagnostics: Vec<voodu_model::Diagnostic>,
    message: impl FnOnce(&str) -> String,
) -> Failure {
    let count = diagnostics.len();
    let found = format!("{count} problem{}", if count == 1 { "" } else { "s" });
    Failure {
        message: message(&found),
        diagnostics,
    }
}

/// Answers one request with its verb's handler.
pub(crate) fn answer(
    controller: &Controller,
    request: Request,
    progress: &mut (dyn FnMut(ApplyProgress) + Send),
) -> Result<Response, Failure> {
    match request {
        Request::Apply {
            sources,
            dry_run,
            environment,
            skip_unsupported,
            env_files,
            prune,
            contexts,
            force,
        } => apply::handle(
            controller,
            sources,
            apply::ApplyOptions {
                dry_run,
                environment,
                skip_unsupported,
                env_files,
                prune,
                contexts,
                force,
            },
            progress,
        ),
        Request::Describe {
            workload,
            events,
            show_env,
        } => describe::handle(controller, &workload, events, show_env),
        Request::Get { kind } => get::handle(controller, kind),
        Request::Pods {
            workload, orphans, ..
        } => pods::handle(controller, workload.as_ref(), orphans),
        Request::Events {
            workload, limit, ..
        } => events::handle(controller, workload.as_ref(), limit),
        Request::Delete { workload } => delete::handle(controller, &workload),
        Request::History { workload } => history::handle(controller, &workload),
        Request::Rollback { workload, to } => rollback::handle(controller, &workload, to),
        Request::Restart { workload, release } => restart::handle(controller, &workload, release),
        Request::Stop { workload, replica } => {
            stops::stop(controller, &workload, replica.as_deref())
        }
        Request::Start { workload, replica } => {
            stops::start(controller, &workload, replica.as_deref())
        }
        Request::PluginsInstall {
            path,
            file: None,
            replace,
            sha256,
            settings,
            out_of_process,
        } => plugins::install(
            controller,
            &path,
            InstallOptions {
                replace,
                sha256,
                settings,
                out_of_process,
            },
        ),
        Request::PluginsInstall {
            path,
            file: Some(bytes),
            replace,
            sha256,
            settings,
            out_of_process,
        } => plugins::install_sent(
            controller,
            &path,
            &bytes,
            InstallOptions {
                replace,
                sha256,
                settings,
                out_of_process,
            },
        ),
        Request::PluginsSettings { name, settings } => {
            plugins::settings(controller, &name, settings)
        }
        Request::PluginsReload { name } => plugins::reload(controller, &name),
        Request::PluginsList => Ok(plugins::list(controller)),
        Request::PluginsRemove { name } => plugins::remove(controller, &name),
        Request::PluginsStatement { name } => plugins::statement(controller, &name),
        Request::PluginsSign { name, signature } => plugins::sign(controller, &name, &signature),
        Request::Explain { block } => plugins::explain(controller, &block),
        Request::Stats { workload, filter } => {
            stats::handle(controller, workload.as_ref(), &filter)
        }
        Request::PluginsCall {
            name,
            call,
            request,
        } => plugins::call(controller, &name, call, &request),
        Request::PruneOrphans { dry_run } => prune::handle(controller, dry_run),
        Request::StoreBackup { path } => crate::backup::backup(&*controller.store, &path),
        Request::Version => Ok(version::handle(controller)),
        Request::UpgradeController => version::upgrade(controller),
        Request::Nodes => nodes::handle(controller),
        Request::NodeRemove { name } => nodes::remove(controller, &name),
        Request::ConfigSet {
            bucket,
            values,
            secret,
            no_restart,
        } => config::set(controller, bucket, values, secret, no_restart),
        Request::ConfigUnset {
            bucket,
            keys,
            no_restart,
        } => config::unset(controller, bucket, keys, no_restart),
        Request::ConfigGet {
            bucket,
            key,
            reveal,
        } => config::get(controller, bucket, &key, reveal),
        Request::ConfigList {
            bucket,
            matching,
            reveal,
        } => config::list(controller, bucket, matching.as_deref(), reveal),
        Request::ConfigRotateKey => config::rotate_key(controller),
        Request::Wait { .. }
        | Request::Logs { .. }
        | Request::Exec { .. }
        | Request::Run { .. } => Err(Failure::new(
            "this request is answered by the controller's stream handler",
        )),
    }
}
