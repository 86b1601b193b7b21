//! `echo`: the minimal Rust sample plugin, and the template to copy.
//!
//! It owns `echo {}` blocks. At validate it checks that `greeting`, when
//! given, is a string, fills in the default `greeting = "hello"`, logs one
//! line through the host, and returns the normalised spec. At forget it
//! logs which block it forgot. Every other call keeps the SDK's default.

use voodu_plugin_abi::messages::{ForgetRequest, ValidateReply, ValidateRequest};
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
        let spec = normalise(request.block.spec)?;
        self.host.log(
            LogLevel::Info,
            &format!(
                "validated the echo block of {}/{}/{}",
                request.kind, request.scope, request.name
            ),
        );
        Ok(ValidateReply::new(spec, Default::default()))
    }

    fn describe(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "type": "object",
            "description": "Echoes its block back, normalised: the minimal sample.",
            "properties": {
                "greeting": {"type": "string", "default": DEFAULT_GREETING,
                             "description": "A greeting, kept in the normalised spec."}
            },
            "additionalProperties": true
        }))
    }

    fn forget(&mut self, request: ForgetRequest) -> Result<(), PluginError> {
        let labels: String = request
            .block
            .labels
            .iter()
            .map(|label| format!(" {label:?}"))
            .collect();
        self.host.log(
            LogLevel::Info,
            &format!(
                "forgot the echo{labels} block of {}/{}/{}",
                request.kind, request.scope, request.name
            ),
        );
        Ok(())
    }
}

/// Checks and normalises an `echo` block body: `greeting`, when given, must
/// be a string, and defaults to [`DEFAULT_GREETING`]. `Err` is the refusal
/// message.
pub fn normalise(mut spec: serde_json::Value) -> Result<serde_json::Value, PluginError> {
    let fields = spec.as_object_mut().ok_or_else(|| {
        PluginError::Refused("the echo block must be a block body, not a value".to_owned())
    })?;
    match fields.get("greeting") {
        None => {
            fields.insert("greeting".into(), DEFAULT_GREETING.into());
        }
        Some(serde_json::Value::String(_)) => {}
        Some(other) => {
            return Err(PluginError::refused_at(
                "/greeting",
                format!("greeting must be a string, not {other}"),
            ))
        }
    }
    Ok(spec)
}

/// The plugin's whole JSON work for one validate, bytes to bytes, without
/// the ABI: decode the request, normalise, encode the reply. The benchmark's
/// in-process baseline and its out-of-process peers run exactly this.
pub fn answer_validate_json(request: &[u8]) -> Result<Vec<u8>, String> {
    let request: ValidateRequest =
        serde_json::from_slice(request).map_err(|error| error.to_string())?;
    let spec = normalise(request.block.spec).map_err(|refusal| match refusal {
        PluginError::Refused(message)
        | PluginError::RefusedAt { message, .. }
        | PluginError::Failed(message) => message,
    })?;
    let reply = ValidateReply::new(spec, Default::default());
    serde_json::to_vec(&reply).map_err(|error| error.to_string())
}

voodu_plugin_abi::export_plugin!(Echo);
