//! Reading a plugin's reply: its status, then its body as the call's reply
//! type. Pure functions of the bytes a plugin returned, so they can be
//! fuzzed (`fuzz/`, target `plugin_replies`) without a plugin.

use serde::de::DeserializeOwned;
use voodu_plugin_abi::ffi::{
    VooduStatus, VOODU_STATUS_ERROR, VOODU_STATUS_OK, VOODU_STATUS_PANICKED, VOODU_STATUS_REFUSED,
};
use voodu_plugin_abi::messages::FailureReply;

use crate::error::CallError;
use crate::handle::PluginCall;

/// The body of an OK reply, or the error its status stands for: a
/// refusal or a failure with the plugin's `{"message": ...}`, or an
/// invalid reply for a status the ABI does not define.
pub fn status_body(
    plugin: &str,
    call: PluginCall,
    status: VooduStatus,
    body: Vec<u8>,
) -> Result<Vec<u8>, CallError> {
    match status {
        VOODU_STATUS_OK => Ok(body),
        VOODU_STATUS_REFUSED | VOODU_STATUS_ERROR | VOODU_STATUS_PANICKED => {
            let failure: FailureReply = serde_json::from_slice(&body)
                .map_err(|error| invalid_reply(plugin, call, &body, &error))?;
            let plugin = plugin.to_owned();
            let message = failure.message;
            Err(match status {
                VOODU_STATUS_REFUSED => CallError::Refused {
                    plugin,
                    call,
                    message,
                    pointer: failure.pointer,
                },
                VOODU_STATUS_PANICKED => CallError::Panicked {
                    plugin,
                    call,
                    message,
                },
                _ => CallError::Failed {
                    plugin,
                    call,
                    message,
                },
            })
        }
        unknown => Err(CallError::InvalidReply {
            plugin: plugin.to_owned(),
            call,
            reason: format!(
                "unknown status {unknown} (expected 0 ok, 1 refused, 2 error or 3 panicked)"
            ),
        }),
    }
}

/// An OK body read as the call's reply type (`validate`, `drain`).
pub fn decode_typed<Rep: DeserializeOwned>(
    plugin: &str,
    call: PluginCall,
    body: &[u8],
) -> Result<Rep, CallError> {
    serde_json::from_slice(body).map_err(|error| invalid_reply(plugin, call, body, &error))
}

/// An OK body of a call that only acknowledges (`publish`, `forget`):
/// empty, or any JSON value.
pub fn decode_ack(plugin: &str, call: PluginCall, body: &[u8]) -> Result<(), CallError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(body)
        .map(drop)
        .map_err(|error| invalid_reply(plugin, call, body, &error))
}

/// The error for a reply that is not the JSON its call expects, showing
/// the start of what came back.
pub fn invalid_reply(
    plugin: &str,
    call: PluginCall,
    body: &[u8],
    error: &serde_json::Error,
) -> CallError {
    const SHOWN: usize = 80;
    let start = String::from_utf8_lossy(&body[..body.len().min(SHOWN)]).into_owned();
    let ellipsis = if body.len() > SHOWN { "…" } else { "" };
    CallError::InvalidReply {
        plugin: plugin.to_owned(),
        call,
        reason: format!("{error} in `{start}{ellipsis}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_status_is_its_own_error_and_a_panic_is_told_by_its_status_alone() {
        let body =
            |message: &str| serde_json::to_vec(&serde_json::json!({ "message": message })).unwrap();
        let of = |status| {
            status_body(
                "p",
                PluginCall::Validate,
                status,
                body("panicked in validate: boom"),
            )
        };
        assert!(matches!(
            of(VOODU_STATUS_PANICKED),
            Err(CallError::Panicked { .. })
        ));
        // The same words under ERROR are a failure: words never decide.
        assert!(matches!(
            of(VOODU_STATUS_ERROR),
            Err(CallError::Failed { .. })
        ));
        assert!(matches!(
            of(VOODU_STATUS_REFUSED),
            Err(CallError::Refused { .. })
        ));
        let unknown = of(4).unwrap_err().to_string();
        assert!(unknown.contains("3 panicked"), "{unknown}");
    }
}
