//! `vd explain BLOCK`: [`Request::Explain`], and its answer,
//! [`Response::Explained`](voodu_api::Response::Explained): the options a
//! plugin's block takes, as the plugin describes them (a JSON Schema), for
//! people as `kubectl explain` shows a field, or as the schema with
//! `-o json`.

use anstream::println;
use serde_json::Value;
use voodu_api::Request;

use super::Call;
use crate::OutputArg;

/// `vd explain`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The block type (`traffik`), which is the name of the plugin that
    /// owns it.
    block: String,
    #[command(flatten)]
    output: OutputArg,
}

impl ExplainArgs {
    /// [`Request::Explain`].
    pub fn call(self) -> Call {
        Call::new(Request::Explain { block: self.block }, self.output.output)
    }
}

/// One option's type in words: `integer`, `string, one of tcp, http`.
fn kind_of(option: &Value) -> String {
    let mut words = match &option["type"] {
        Value::String(kind) => kind.clone(),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".into(),
    };
    if let Some(choices) = option["enum"].as_array() {
        let choices: Vec<String> = choices.iter().map(Value::to_string).collect();
        words.push_str(&format!(", one of {}", choices.join(", ")));
    }
    match (option["minimum"].as_i64(), option["maximum"].as_i64()) {
        (Some(low), Some(high)) => words.push_str(&format!(", {low} to {high}")),
        (Some(low), None) => words.push_str(&format!(", at least {low}")),
        (None, Some(high)) => words.push_str(&format!(", at most {high}")),
        (None, None) => {}
    }
    words
}

/// A block's options for people, then the plugin-wide settings it takes
/// (and those it was given).
pub fn explained(
    plugin: &str,
    version: &str,
    schema: Option<&Value>,
    settings_schema: Option<&Value>,
    settings: Option<&Value>,
) {
    println!("BLOCK:   {plugin} (plugin {plugin} {version})");
    match schema {
        None => println!("\nThe plugin describes no options: see its documentation."),
        Some(schema) => {
            if let Some(description) = schema["description"].as_str() {
                println!("\nDESCRIPTION:\n    {description}");
            }
            options("OPTIONS", schema);
            match schema["additionalProperties"].as_bool() {
                Some(false) => {
                    println!("\nAny other option is refused, with the nearest name offered.")
                }
                Some(true) => println!("\nOther options are kept as written."),
                None => {}
            }
        }
    }
    let Some(settings_schema) = settings_schema else {
        return;
    };
    options(
        &format!("SETTINGS (plugin-wide: `vd plugins:settings {plugin} FILE`)"),
        settings_schema,
    );
    match settings {
        Some(settings) => println!(
            "\nGIVEN:\n    {}",
            serde_json::to_string_pretty(settings)
                .unwrap_or_else(|_| settings.to_string())
                .replace('\n', "\n    ")
        ),
        None => println!("\nGIVEN:   none (each setting takes its default)"),
    }
}

/// The properties of object schema `schema`, under `heading`.
fn options(heading: &str, schema: &Value) {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let Some(options) = schema["properties"].as_object() else {
        return;
    };
    println!("\n{heading}:");
    for (name, option) in options {
        let mut head = format!("    {name}  <{}>", kind_of(option));
        if required.contains(&name.as_str()) {
            head.push_str(", required");
        }
        if let Some(default) = option.get("default") {
            head.push_str(&format!(", default {default}"));
        }
        println!("{head}");
        if let Some(description) = option["description"].as_str() {
            println!("        {description}");
        }
    }
}
