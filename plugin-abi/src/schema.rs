//! What voodu reads of the JSON Schema a plugin's `describe` answers: a
//! block spec to start from, built from the schema alone. `vd plugins:call
//! --example` sends it, and `vd plugins:check` validates it.

use serde_json::{Map, Value};

/// A block spec built from a plugin's schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ExampleSpec {
    /// The first of the schema's `examples`, with every option's `default`
    /// laid over it, and a placeholder of its type for each required
    /// option that has neither.
    pub spec: Map<String, Value>,
    /// The required options that got only a placeholder: the spec is no
    /// real block until they are filled in.
    pub placeholders: Vec<String>,
}

/// The spec `schema` describes as a start: its first example, its
/// defaults, and placeholders for required options with neither.
pub fn example_spec(schema: &Value) -> ExampleSpec {
    let mut spec = schema["examples"][0]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let properties = schema["properties"].as_object();
    for (option, described) in properties.into_iter().flatten() {
        if let Some(default) = described.get("default") {
            spec.insert(option.clone(), default.clone());
        }
    }
    let mut placeholders = Vec::new();
    let required = schema["required"].as_array().into_iter().flatten();
    for option in required.filter_map(Value::as_str) {
        if spec.contains_key(option) {
            continue;
        }
        let described = properties.and_then(|properties| properties.get(option));
        spec.insert(option.to_owned(), placeholder(described));
        placeholders.push(option.to_owned());
    }
    ExampleSpec { spec, placeholders }
}

/// A value of the type an option's schema names: its first `enum` value,
/// else an empty one of its `type`.
fn placeholder(described: Option<&Value>) -> Value {
    let Some(described) = described else {
        return Value::Null;
    };
    if let Some(first) = described["enum"].get(0) {
        return first.clone();
    }
    let kind = match &described["type"] {
        Value::Array(kinds) => kinds.first().and_then(Value::as_str),
        kind => kind.as_str(),
    };
    match kind {
        Some("string") => Value::String(String::new()),
        Some("integer" | "number") => described
            .get("minimum")
            .cloned()
            .unwrap_or_else(|| Value::from(0)),
        Some("boolean") => Value::Bool(false),
        Some("array") => Value::Array(Vec::new()),
        Some("object") => Value::Object(Map::new()),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_example_takes_the_defaults_and_a_required_option_without_either_a_placeholder() {
        let schema = json!({
            "type": "object",
            "properties": {
                "port": {"type": "integer", "minimum": 1},
                "listen": {"type": "integer", "minimum": 1024},
                "balance": {"type": "string", "enum": ["rr", "lc"], "default": "rr"},
                "mode": {"type": "string", "enum": ["tcp", "http"]}
            },
            "required": ["port", "listen", "mode"],
            "examples": [{"port": 8084}]
        });
        let example = example_spec(&schema);
        assert_eq!(
            Value::Object(example.spec),
            json!({"port": 8084, "balance": "rr", "listen": 1024, "mode": "tcp"})
        );
        assert_eq!(example.placeholders, ["listen", "mode"]);
    }

    #[test]
    fn a_schema_without_examples_or_defaults_gives_an_empty_spec() {
        let example = example_spec(&json!({"type": "object"}));
        assert!(example.spec.is_empty());
        assert!(example.placeholders.is_empty());
    }
}
