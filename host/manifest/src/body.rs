//! A plugin block's body to JSON: every attribute and every nested block, in
//! source order, with nothing merged, rounded or dropped.
//!
//! The encoding (documented for plugin authors in `docs/plugin-authors.md`
//! and in `voodu_plugin_abi::body`):
//!
//! - each attribute is a key of the body's object, in source order, with
//!   its value evaluated exactly (see [`super::expression`]);
//! - nested blocks, if there are any, are the array under the key
//!   `"@blocks"`, in source order, each in the shape of a plugin block
//!   itself: `{"type": T, "labels": [..], "spec": {..}}`, `labels` left out
//!   when there are none. No attribute can be called `@blocks`: HCL names
//!   cannot start with `@`.
//!
//! So `traffik { port = 8084 }` is `{"port": 8084}`, as the seed shows it.
//! The only bodies that cannot be carried are an attribute set twice (the
//! HCL parser refuses it), an object with one key twice, and a value JSON
//! cannot hold. Each is refused at the second of the two clashing things,
//! or at the value.

use hcl_edit::structure::{Body, Structure};
use hcl_edit::Span;
use std::collections::BTreeMap;

use serde_json::{Map, Value};
use voodu_plugin_abi::body::NESTED_BLOCKS_KEY;
use voodu_plugin_abi::messages::Block;

use crate::expression::evaluate_exact;
use crate::lines::LineIndex;
use voodu_model::workload::Location;

/// One reason a body cannot be carried, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyProblem {
    /// Where: the second of two clashing things, or the value at fault.
    pub location: Location,
    /// What is wrong, and the fix.
    pub message: String,
}

/// Encodes a block body, or returns every problem in it.
pub fn encode_body(
    body: &Body,
    lines: &LineIndex<'_>,
) -> Result<Map<String, Value>, Vec<BodyProblem>> {
    let mut object = Map::new();
    let mut nested = Vec::new();
    let mut problems = Vec::new();
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attribute) => {
                // An attribute set twice never gets here: the HCL parser
                // refuses it at the second (see `parse::parse_manifest`).
                let key = attribute.key.as_str();
                match evaluate_exact(&attribute.value, lines.text()) {
                    Ok(value) => {
                        object.insert(key.to_owned(), value);
                    }
                    Err(problem) => problems.push(BodyProblem {
                        location: lines.locate(problem.offset),
                        message: format!("attribute \"{key}\": {}", problem.message),
                    }),
                }
            }
            Structure::Block(block) => match encode_block(block, lines) {
                Ok(block) => nested.push(block),
                Err(found) => problems.extend(found),
            },
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    if !nested.is_empty() {
        let nested = nested
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<Value>, _>>()
            .expect("cannot fail: a block is strings and JSON values");
        object.insert(NESTED_BLOCKS_KEY.to_owned(), Value::Array(nested));
    }
    Ok(object)
}

/// Where each option of a plugin block's body is written, by the JSON
/// pointer (RFC 6901) a plugin's refusal names it with: `/port` for an
/// attribute, `/@blocks/0` for the first nested block and
/// `/@blocks/0/spec/port` for an attribute inside it.
pub fn option_locations(body: &Body, lines: &LineIndex<'_>) -> BTreeMap<String, Location> {
    let mut found = BTreeMap::new();
    add_option_locations(body, lines, "", &mut found);
    found
}

fn add_option_locations(
    body: &Body,
    lines: &LineIndex<'_>,
    prefix: &str,
    found: &mut BTreeMap<String, Location>,
) {
    let mut nested = 0;
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attribute) => {
                let pointer = format!("{prefix}/{}", pointer_token(attribute.key.as_str()));
                found.insert(pointer, lines.locate_span(attribute.span()));
            }
            Structure::Block(block) => {
                let pointer = format!("{prefix}/{NESTED_BLOCKS_KEY}/{nested}");
                found.insert(pointer.clone(), lines.locate_span(block.span()));
                add_option_locations(&block.body, lines, &format!("{pointer}/spec"), found);
                nested += 1;
            }
        }
    }
}

/// A key as one token of a JSON pointer: `~` and `/` escaped.
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// One HCL block as a plugin block: its type, labels and encoded body.
fn encode_block(
    block: &hcl_edit::structure::Block,
    lines: &LineIndex<'_>,
) -> Result<Block, Vec<BodyProblem>> {
    Ok(Block {
        block_type: block.ident.as_str().to_owned(),
        labels: block
            .labels
            .iter()
            .map(|label| label.as_str().to_owned())
            .collect(),
        spec: Value::Object(encode_body(&block.body, lines)?),
    })
}

/// The plugin blocks written at the top of `text` (a file of blocks only,
/// such as `traffik "http" { port = 8084 }`), each encoded as the host
/// sends it: for `vd plugins:check --block`. Every problem comes with its
/// `file:line:column`.
pub fn plugin_blocks(file: &str, text: &str) -> Result<Vec<Block>, Vec<String>> {
    let lines = LineIndex::new(file, text);
    let body = hcl_edit::parser::parse_body(text).map_err(|error| {
        vec![format!(
            "{file}:{}:{}: {}",
            error.location().line(),
            error.location().column(),
            error.message()
        )]
    })?;
    let mut blocks = Vec::new();
    let mut problems = Vec::new();
    for structure in body.iter() {
        match structure {
            Structure::Block(block) => match encode_block(block, &lines) {
                Ok(block) => blocks.push(block),
                Err(found) => problems.extend(
                    found
                        .into_iter()
                        .map(|problem| format!("{}: {}", problem.location, problem.message)),
                ),
            },
            Structure::Attribute(attribute) => problems.push(format!(
                "{}: attribute \"{}\" outside a block — the file holds plugin blocks only, such as traffik \"http\" {{ port = 8084 }}",
                lines.locate_span(attribute.span()),
                attribute.key.as_str()
            )),
        }
    }
    if problems.is_empty() {
        Ok(blocks)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_file_of_plugin_blocks_is_encoded_block_by_block_and_a_stray_attribute_is_named() {
        let blocks = plugin_blocks(
            "b.hcl",
            "traffik \"http\" { port = 8084 }\ntraffik { bind = \"0.0.0.0:80\" }\n",
        )
        .unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].labels, ["http"]);
        assert_eq!(blocks[0].spec, json!({"port": 8084}));
        assert_eq!(blocks[1].spec, json!({"bind": "0.0.0.0:80"}));
        let stray = plugin_blocks("b.hcl", "port = 8084\n").unwrap_err();
        assert!(
            stray[0].starts_with("b.hcl:1:1: attribute \"port\" outside a block"),
            "{stray:?}"
        );
    }

    fn encode(text: &str) -> Result<Value, Vec<String>> {
        let body = hcl_edit::parser::parse_body(text).expect("the test body parses");
        let lines = LineIndex::new("b.hcl", text);
        encode_body(&body, &lines)
            .map(Value::Object)
            .map_err(|problems| {
                problems
                    .iter()
                    .map(|p| format!("{}: {}", p.location, p.message))
                    .collect()
            })
    }

    #[test]
    fn a_flat_body_is_a_plain_object_as_the_seed_shows() {
        assert_eq!(encode("port = 8084\n").unwrap(), json!({"port": 8084}));
    }

    #[test]
    fn an_attribute_and_a_block_of_one_name_both_arrive() {
        let spec = encode("rule = 1\nrule \"x\" { y = 1 }\n").unwrap();
        assert_eq!(
            spec,
            json!({"rule": 1, "@blocks": [{"type": "rule", "labels": ["x"], "spec": {"y": 1}}]})
        );
    }

    #[test]
    fn blocks_with_and_without_labels_keep_source_order_across_types() {
        let spec = encode(
            "rule \"x\" { y = 1 }\nhealth { path = \"/\" }\nrule { x = 5 }\nrule \"x\" \"w\" { y = 2 }\n",
        )
        .unwrap();
        assert_eq!(
            spec,
            json!({"@blocks": [
                {"type": "rule", "labels": ["x"], "spec": {"y": 1}},
                {"type": "health", "spec": {"path": "/"}},
                {"type": "rule", "spec": {"x": 5}},
                {"type": "rule", "labels": ["x", "w"], "spec": {"y": 2}},
            ]})
        );
    }

    #[test]
    fn a_block_is_told_from_an_attribute_holding_the_same_object() {
        let as_block = encode("health { path = \"/\" }\n").unwrap();
        let as_attribute = encode("health = { path = \"/\" }\n").unwrap();
        assert_ne!(as_block, as_attribute);
        assert_eq!(as_attribute, json!({"health": {"path": "/"}}));
    }

    #[test]
    fn keys_keep_their_written_order() {
        let spec = encode("file = \"a\"\naddressing = \"dns\"\nmap = { z = 1, a = 2 }\n").unwrap();
        assert_eq!(
            spec.to_string(),
            r#"{"file":"a","addressing":"dns","map":{"z":1,"a":2}}"#
        );
    }

    #[test]
    fn a_value_that_cannot_be_carried_is_refused_at_the_value() {
        let problems = encode("port = 8084\nweight = 1 / 0\n").unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("b.hcl:2:10: attribute \"weight\": division by zero"),
            "{problems:?}"
        );
    }
}
