//! The host's reading of every plugin reply: a status byte, then the body
//! as each call's reply (validate, drain, publish and forget
//! acknowledgements, refusals and errors). Garbage must become a typed
//! error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voodu_plugin_abi::messages::{DrainReply, ValidateReply};
use voodu_plugin_host::replies::{decode_ack, decode_typed, status_body};
use voodu_plugin_host::PluginCall;

fuzz_target!(|data: &[u8]| {
    let Some((&status, body)) = data.split_first() else {
        return;
    };
    // Mostly the three defined statuses, sometimes another.
    let status = match status % 4 {
        3 => i32::from(status),
        defined => i32::from(defined),
    };
    for call in [
        PluginCall::Validate,
        PluginCall::Publish,
        PluginCall::Drain,
        PluginCall::Forget,
    ] {
        let Ok(body) = status_body("fuzz", call, status, body.to_vec()) else {
            continue;
        };
        let _ = match call {
            PluginCall::Validate => decode_typed::<ValidateReply>("fuzz", call, &body).map(drop),
            PluginCall::Drain => decode_typed::<DrainReply>("fuzz", call, &body).map(drop),
            _ => decode_ack("fuzz", call, &body),
        }
        .map_err(|error| error.to_string());
    }
});
