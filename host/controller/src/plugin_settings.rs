//! How the controller checks a plugin's settings against the schema the
//! plugin describes (`describe_settings`, ABI 1.3), with the `jsonschema`
//! crate, before the plugin's `configure` sees them. The plugin host takes
//! this check from its embedder, so that it pulls in no validator itself.

use std::sync::Arc;

use serde_json::Value;
use voodu_plugin_host::settings::{SettingsCheck, SettingsProblem};

/// The check the controller gives its plugin registry.
pub fn json_schema_check() -> SettingsCheck {
    Arc::new(problems)
}

/// What in `settings` does not conform to `schema`, each at its JSON
/// pointer; a schema that is itself not valid is one problem, the plugin's.
fn problems(schema: &Value, settings: &Value) -> Vec<SettingsProblem> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(validator) => validator,
        Err(error) => {
            return vec![SettingsProblem {
                pointer: String::new(),
                message: format!(
                    "the plugin's settings schema is not a valid JSON Schema ({error}), so no settings can be checked — report it to its author"
                ),
            }]
        }
    };
    validator
        .iter_errors(settings)
        .map(|error| SettingsProblem {
            pointer: error.instance_path.to_string(),
            message: error.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "bind_host": {"type": "string", "description": "Where to listen."},
                "workers": {"type": "integer", "minimum": 1, "maximum": 64, "description": "How many."}
            },
            "additionalProperties": false
        })
    }

    #[test]
    fn conforming_settings_have_no_problem() {
        assert!(problems(&schema(), &json!({"bind_host": "127.0.0.1", "workers": 4})).is_empty());
        assert!(problems(&schema(), &json!({})).is_empty());
    }

    #[test]
    fn each_problem_is_named_at_its_pointer() {
        let found = problems(&schema(), &json!({"workers": 0, "bind_host": 7}));
        let pointers: Vec<&str> = found
            .iter()
            .map(|problem| problem.pointer.as_str())
            .collect();
        assert!(pointers.contains(&"/workers"), "{found:?}");
        assert!(pointers.contains(&"/bind_host"), "{found:?}");
        let unknown = problems(&schema(), &json!({"bind_hots": "x"}));
        assert_eq!(unknown.len(), 1, "{unknown:?}");
        assert!(unknown[0].message.contains("bind_hots"), "{unknown:?}");
    }

    #[test]
    fn a_schema_that_is_not_one_is_the_plugins_problem() {
        let found = problems(&json!({"type": 12}), &json!({}));
        assert_eq!(found.len(), 1);
        assert!(
            found[0].message.contains("report it to its author"),
            "{found:?}"
        );
    }
}
