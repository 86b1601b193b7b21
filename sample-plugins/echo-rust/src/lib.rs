//! `echo`: the minimal Rust sample plugin, and the template to copy.
//!
//! It owns `echo {}` blocks. At validate it checks that `greeting`, when
//! given, is a string, fills in the default `greeting = "hello"`, logs one
//! line through the host, and returns the normalised spec. Every other call
//! keeps the SDK's default.

use voodu_plugin_abi::messages::{ValidateReply, ValidateRequest};
use voodu_plugin_abi::{Host, LogLevel, Plugin, PluginError};

/// The greeting filled in when a block gives none.
pub const DEFAULT_GREETING: &str = "hello";

/// The plugin's instance: it keeps the host handle to log later.
pub struct Echo {
    host: Host,
}

impl Plugin for Echo {
    const NAME: &'static std::ffi::CStr = c"echo";
    const VERSION: &'static std::ffi::CStr = c"1.0.0";

    fn init(host: Host) -> Result<Self, String> {
        Ok(Echo { host })
    }

    fn validate(&mut self, request: ValidateRequest) -> Result<ValidateReply, PluginError> {
        let mut spec = request.block.spec;
        let fields = spec.as_object_mut().ok_or_else(|| {
            PluginError::Refused("the echo block must be a block body, not a value".into())
        })?;
        match fields.get("greeting") {
            None => {
                fields.insert("greeting".into(), DEFAULT_GREETING.into());
            }
            Some(serde_json::Value::String(_)) => {}
            Some(other) => {
                return Err(PluginError::Refused(format!(
                    "greeting must be a string, not {other}"
                )))
            }
        }
        self.host.log(
            LogLevel::Info,
            &format!(
                "validated the echo block of {}/{}/{}",
                request.kind, request.scope, request.name
            ),
        );
        Ok(ValidateReply {
            spec,
            endpoints: Default::default(),
        })
    }
}

voodu_plugin_abi::export_plugin!(Echo);
