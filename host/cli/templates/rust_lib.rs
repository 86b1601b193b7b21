//! `{{name}}`: a voodu plugin, made by `vd plugins:new`.
//!
//! It owns `{{name}} "LABEL" { ... }` blocks inside a deployment or a
//! statefulset, with one option, `greeting`: a string of 1 to 64
//! characters, "hello" when the block gives none. Change [`normalise`] to
//! take your own options; keep refusals in voodu's style (what is wrong,
//! then how to write it).
//!
//! Build: `cargo build --release`, then check it with
//! `vd plugins:check target/release/libvoodu_{{lib}}.so --block example.hcl`
//! and install it with `vd plugins:install target/release/libvoodu_{{lib}}.so`.

use voodu_plugin_abi::messages::{
    DrainReply, DrainRequest, ForgetRequest, PublishRequest, ValidateReply, ValidateRequest,
};
use voodu_plugin_abi::serde_json::Value;
use voodu_plugin_abi::{Host, LogLevel, Plugin, PluginError};

/// The greeting filled in when a block gives none.
pub const DEFAULT_GREETING: &str = "hello";

/// The longest greeting taken, in characters.
pub const MAX_GREETING_CHARS: usize = 64;

/// The plugin's instance: the host's callbacks, to log with.
pub struct Instance {
    host: Host,
}

impl Plugin for Instance {
    const NAME: &'static std::ffi::CStr = c"{{name}}";
    const VERSION: &'static std::ffi::CStr = c"0.1.0";

    /// Runs at every load (install, reload, replace, each start): keep it
    /// free of side effects; do real work at the first call that needs it.
    fn init(host: Host) -> Result<Self, String> {
        Ok(Instance { host })
    }

    /// Normalises the block or refuses it; a refusal fails the apply with
    /// this message, named with the workload and the block.
    fn validate(&mut self, request: ValidateRequest) -> Result<ValidateReply, PluginError> {
        let spec = normalise(request.block.spec)?;
        Ok(ValidateReply::new(spec, Default::default()))
    }

    /// The whole live set of running replicas, after every reconcile.
    fn publish(&mut self, request: PublishRequest) -> Result<(), PluginError> {
        self.host.log(
            LogLevel::Info,
            &format!(
                "{}/{}/{}: generation {}, {} replica(s)",
                request.kind,
                request.scope,
                request.name,
                request.generation,
                request.endpoints.len()
            ),
        );
        Ok(())
    }

    /// The block's options as a JSON Schema: `vd explain {{name}}` shows
    /// them, and an option the block gives that is not here is refused at
    /// apply with the nearest name.
    fn describe(&self) -> Option<Value> {
        Some(voodu_plugin_abi::serde_json::json!({
            "type": "object",
            "description": "A {{name}} block, made by vd plugins:new.",
            "properties": {
                "greeting": {"type": "string", "default": DEFAULT_GREETING,
                             "description": "A greeting of 1 to 64 characters."}
            },
            "additionalProperties": false
        }))
    }

    /// A replica is about to be removed: answer drained once it has no more
    /// work here, or `Draining { retry_after_ms }` to be asked again.
    fn drain(&mut self, _request: DrainRequest) -> Result<DrainReply, PluginError> {
        Ok(DrainReply::Drained)
    }

    /// The block was removed: let go of what it held. Called again for a
    /// block already forgotten, so it must not fail then.
    fn forget(&mut self, request: ForgetRequest) -> Result<(), PluginError> {
        self.host.log(
            LogLevel::Info,
            &format!(
                "forgot the {} block of {}/{}/{}",
                request.block.block_type, request.kind, request.scope, request.name
            ),
        );
        Ok(())
    }
}

/// Checks and normalises a `{{name}}` block body; `Err` is the refusal,
/// naming the option at fault (`/greeting`) when there is one, so the
/// operator is shown its own line.
pub fn normalise(mut spec: Value) -> Result<Value, PluginError> {
    let fields = spec.as_object_mut().ok_or_else(|| {
        PluginError::Refused(
            "a {{name}} block is a block body — write {{name}} \"http\" { greeting = \"hello\" }".to_owned(),
        )
    })?;
    match fields.get("greeting") {
        None => {
            fields.insert("greeting".into(), DEFAULT_GREETING.into());
        }
        Some(Value::String(greeting))
            if !greeting.is_empty() && greeting.chars().count() <= MAX_GREETING_CHARS => {}
        Some(other) => {
            return Err(PluginError::refused_at(
                "/greeting",
                format!(
                    "greeting must be a string of 1 to {MAX_GREETING_CHARS} characters, not {other} — write greeting = \"hello\""
                ),
            ))
        }
    }
    Ok(spec)
}

voodu_plugin_abi::export_plugin!(Instance);

#[cfg(test)]
mod tests {
    use super::*;
    use voodu_plugin_abi::serde_json;

    #[test]
    fn a_missing_greeting_gets_the_default_and_a_bad_one_is_refused_with_the_fix() {
        let filled = normalise(serde_json::json!({})).unwrap();
        assert_eq!(filled, serde_json::json!({"greeting": "hello"}));
        let kept = normalise(serde_json::json!({"greeting": "hi", "other": 1})).unwrap();
        assert_eq!(kept, serde_json::json!({"greeting": "hi", "other": 1}));
        let refused = normalise(serde_json::json!({"greeting": 3})).unwrap_err();
        assert_eq!(
            refused,
            PluginError::refused_at(
                "/greeting",
                "greeting must be a string of 1 to 64 characters, not 3 — write greeting = \"hello\""
            )
        );
        assert!(normalise(serde_json::json!({"greeting": ""})).is_err());
        assert!(normalise(serde_json::json!("a value")).is_err());
    }
}
