//! `version`: the controller's version, plugin ABI and build, and its
//! worker process; `controller upgrade`: a new worker.

use voodu_api::{Failure, Response, VersionInfo};

use crate::Controller;

/// How long `vd controller upgrade` waits for the new worker: it loads
/// every plugin, each `init` bounded by the plugin call timeout.
pub(crate) const UPGRADE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(300);

/// This controller's version, and the worker that answers.
pub(crate) fn handle(controller: &Controller) -> Response {
    Response::Version(VersionInfo {
        worker: controller.worker_info(),
        ..VersionInfo::current()
    })
}

/// Asks the supervisor for a new worker and waits for it to serve.
pub(crate) fn upgrade(controller: &Controller) -> Result<Response, Failure> {
    let Some(link) = controller.supervisor_link() else {
        return Err(Failure::new(
            "this controller runs without a supervisor (it is embedded, or `vd up`), so it cannot be upgraded in place — stop it and start the new binary",
        ));
    };
    link.request_upgrade(UPGRADE_DEADLINE)
        .map(Response::Upgraded)
        .map_err(|reason| Failure::new(format!("the controller was not upgraded: {reason}")))
}
