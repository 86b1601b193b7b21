//! What the reconciler needs of the plugins: publish, drain and forget,
//! by plugin name. [`PluginRegistry`] is the real implementation; the
//! reconciler's unit tests use a fake. Every call is blocking and bounded
//! by the plugin handle's own deadline, so callers run it on a blocking
//! thread and never hold a lock across it.

use voodu_plugin_abi::messages::{DrainReply, DrainRequest, ForgetRequest, PublishRequest};

use std::sync::Arc;

use voodu_plugin_host::handle::Health;
use voodu_plugin_host::{CallError, PluginHandle, PluginRegistry};

/// Why a call into a block's plugin did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockCallError {
    /// No plugin of that name is loaded.
    #[error("plugin \"{0}\" is not installed")]
    NotInstalled(String),
    /// The call failed: refused, errored, timed out, wedged or poisoned.
    #[error("{0}")]
    Failed(String),
}

/// The plugins that own blocks, as the reconciler calls them.
pub trait BlockPlugins: Send + Sync + 'static {
    /// Sends one block its endpoint set.
    fn publish(&self, plugin: &str, request: &PublishRequest) -> Result<(), BlockCallError>;
    /// Asks one block's plugin to drain a replica.
    fn drain(&self, plugin: &str, request: &DrainRequest) -> Result<DrainReply, BlockCallError>;
    /// Tells one block's plugin that the block is gone.
    fn forget(&self, plugin: &str, request: &ForgetRequest) -> Result<(), BlockCallError>;
}

fn loaded(registry: &PluginRegistry, plugin: &str) -> Result<Arc<PluginHandle>, BlockCallError> {
    registry
        .get(plugin)
        .ok_or_else(|| BlockCallError::NotInstalled(plugin.to_owned()))
}

/// Calls the live instance of `plugin`. A call that failed because its
/// instance was shut down by a replace in the meantime is made again, once,
/// in the instance that replaced it: a drain or publish in flight during
/// `plugins:install --replace` is asked again, not lost.
fn call_live<T>(
    registry: &PluginRegistry,
    plugin: &str,
    call: impl Fn(&PluginHandle) -> Result<T, CallError>,
) -> Result<T, BlockCallError> {
    let handle = loaded(registry, plugin)?;
    match call(&handle) {
        Err(error) if handle.health() == Health::ShutDown => {
            let live = loaded(registry, plugin)?;
            if Arc::ptr_eq(&live, &handle) {
                return Err(BlockCallError::Failed(error.to_string()));
            }
            call(&live).map_err(|error| BlockCallError::Failed(error.to_string()))
        }
        result => result.map_err(|error| BlockCallError::Failed(error.to_string())),
    }
}

impl BlockPlugins for PluginRegistry {
    fn publish(&self, plugin: &str, request: &PublishRequest) -> Result<(), BlockCallError> {
        call_live(self, plugin, |handle| handle.publish(request))
    }

    fn drain(&self, plugin: &str, request: &DrainRequest) -> Result<DrainReply, BlockCallError> {
        call_live(self, plugin, |handle| handle.drain(request))
    }

    fn forget(&self, plugin: &str, request: &ForgetRequest) -> Result<(), BlockCallError> {
        call_live(self, plugin, |handle| handle.forget(request))
    }
}
