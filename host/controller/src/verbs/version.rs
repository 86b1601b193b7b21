//! `version`: the controller's version, plugin ABI and build.

use voodu_api::{Response, VersionInfo};

/// This controller's version.
pub(crate) fn handle() -> Response {
    Response::Version(VersionInfo::current())
}
