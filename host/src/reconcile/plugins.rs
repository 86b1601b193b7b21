//! What the reconciler needs of the plugins: publish, drain and forget,
//! by plugin name. [`PluginRegistry`] is the real implementation; the
//! reconciler's unit tests use a fake. Every call is blocking and bounded
//! by the plugin handle's own deadline, so callers run it on a blocking
//! thread and never hold a lock across it.

use voodu_plugin_abi::messages::{DrainReply, DrainRequest, ForgetRequest, PublishRequest};

use crate::plugin::PluginRegistry;

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

fn loaded(
    registry: &PluginRegistry,
    plugin: &str,
) -> Result<std::sync::Arc<crate::plugin::PluginHandle>, BlockCallError> {
    registry
        .get(plugin)
        .ok_or_else(|| BlockCallError::NotInstalled(plugin.to_owned()))
}

fn failed(error: crate::plugin::CallError) -> BlockCallError {
    BlockCallError::Failed(error.to_string())
}

impl BlockPlugins for PluginRegistry {
    fn publish(&self, plugin: &str, request: &PublishRequest) -> Result<(), BlockCallError> {
        loaded(self, plugin)?.publish(request).map_err(failed)
    }

    fn drain(&self, plugin: &str, request: &DrainRequest) -> Result<DrainReply, BlockCallError> {
        loaded(self, plugin)?.drain(request).map_err(failed)
    }

    fn forget(&self, plugin: &str, request: &ForgetRequest) -> Result<(), BlockCallError> {
        loaded(self, plugin)?.forget(request).map_err(failed)
    }
}
