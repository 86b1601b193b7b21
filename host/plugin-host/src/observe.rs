//! One process-wide observer of every plugin call, for metrics: the
//! embedding program (the controller) registers a callback, and each call's
//! plugin, kind, result and duration reach it. The plugin host keeps no
//! figures itself and depends on no metrics crate.

use std::sync::OnceLock;
use std::time::Duration;

use crate::error::CallError;
use crate::handle::PluginCall;

/// How one plugin call ended, in the bounded set metrics label with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
#[strum(serialize_all = "lowercase")]
pub enum CallResult {
    /// The plugin answered OK.
    Ok,
    /// The plugin refused (the operator's input).
    Refused,
    /// The plugin failed, answered something invalid, or could not be called.
    Error,
    /// The call overran its bound, or waited for one that did.
    Timeout,
    /// The plugin panicked, or refused the call because an earlier one did
    /// (its status said so: the SDK catches a Rust plugin's panics).
    Panic,
}

impl CallResult {
    /// The label value: `ok`, `refused`, ...
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// How `outcome` is counted.
    pub fn of<T>(outcome: &Result<T, CallError>) -> CallResult {
        match outcome {
            Ok(_) => CallResult::Ok,
            Err(CallError::Refused { .. }) => CallResult::Refused,
            Err(
                CallError::TimedOut { .. } | CallError::Overran { .. } | CallError::Busy { .. },
            ) => CallResult::Timeout,
            Err(CallError::Panicked { .. }) => CallResult::Panic,
            Err(_) => CallResult::Error,
        }
    }
}

/// What the observer is told of each call: the plugin, the call, how it
/// ended, and how long it took.
pub type CallObserver = Box<dyn Fn(&str, PluginCall, CallResult, Duration) + Send + Sync>;

static OBSERVER: OnceLock<CallObserver> = OnceLock::new();

/// Registers the process's observer; false if one was already registered
/// (the first stays).
pub fn observe_calls(observer: CallObserver) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Tells the observer, if any, of one call.
pub(crate) fn observed(plugin: &str, call: PluginCall, result: CallResult, took: Duration) {
    if let Some(observer) = OBSERVER.get() {
        observer(plugin, call, result, took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::PluginCall;

    #[test]
    fn a_call_counts_as_a_panic_by_its_error_kind_never_by_its_words() {
        let words = "panicked in validate: plugin p is poisoned".to_owned();
        let panicked: Result<(), CallError> = Err(CallError::Panicked {
            plugin: "p".into(),
            call: PluginCall::Validate,
            message: "boom".into(),
        });
        let failed_with_the_words: Result<(), CallError> = Err(CallError::Failed {
            plugin: "p".into(),
            call: PluginCall::Validate,
            message: words,
        });
        assert_eq!(CallResult::of(&panicked), CallResult::Panic);
        assert_eq!(CallResult::of(&failed_with_the_words), CallResult::Error);
    }
}
