//! Typed access to a plugin block's body as the host encodes it.
//!
//! The host carries a body losslessly and in source order:
//!
//! - each **attribute** is a key of the body's JSON object, in the order it
//!   was written: `port = 8084` is `"port": 8084`;
//! - the **nested blocks**, if there are any, are one array under the key
//!   [`NESTED_BLOCKS_KEY`] (`"@blocks"`), in source order, whatever their
//!   types. Each has the shape of a plugin block itself:
//!   `{"type": T, "labels": [..], "spec": {..}}`, `labels` left out when it
//!   has none, and its `spec` is a body encoded the same way.
//!
//! No attribute can be named `@blocks`, because HCL names cannot start with
//! `@`, so a block is never confused with an attribute, and an attribute and
//! a block of one name both arrive. A body without nested blocks is a plain
//! object: `traffik { port = 8084 }` arrives as `{"port": 8084}`.
//!
//! ```
//! use serde_json::json;
//! use voodu_plugin_abi::messages::Block;
//!
//! // rule = 1
//! // rule "x" { y = 1 }
//! // rule { x = 5 }
//! let block = Block {
//!     block_type: "router".into(),
//!     labels: vec![],
//!     spec: json!({
//!         "rule": 1,
//!         "@blocks": [
//!             {"type": "rule", "labels": ["x"], "spec": {"y": 1}},
//!             {"type": "rule", "spec": {"x": 5}}
//!         ]
//!     }),
//! };
//! let body = block.body().unwrap();
//! assert_eq!(body.attribute("rule"), Some(&json!(1)));
//! let rules: Vec<&Block> = body.blocks_of_type("rule").collect();
//! assert_eq!(rules[0].labels, ["x"]);
//! assert_eq!(rules[1].body().unwrap().attribute("x"), Some(&json!(5)));
//! ```
//!
//! A plugin that deserialises its spec into a struct of its own takes the
//! nested blocks with `#[serde(rename = "@blocks", default)] blocks:
//! Vec<Block>`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::messages::Block;

/// The key under which a body's nested blocks arrive.
pub const NESTED_BLOCKS_KEY: &str = "@blocks";

/// A block body split into its attributes and its nested blocks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Body {
    /// Every attribute, in source order.
    #[serde(flatten)]
    pub attributes: Map<String, Value>,
    /// Every nested block, in source order, whatever its type.
    #[serde(rename = "@blocks", default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Block>,
}

impl Body {
    /// Reads a body from a block's spec. Fails when the spec is not an
    /// object, or its `@blocks` is not an array of blocks.
    pub fn from_spec(spec: &Value) -> Result<Body, serde_json::Error> {
        Body::deserialize(spec)
    }

    /// One attribute's value.
    pub fn attribute(&self, name: &str) -> Option<&Value> {
        self.attributes.get(name)
    }

    /// The nested blocks of one type, in source order.
    pub fn blocks_of_type<'a>(&'a self, block_type: &'a str) -> impl Iterator<Item = &'a Block> {
        self.blocks
            .iter()
            .filter(move |block| block.block_type == block_type)
    }
}

impl Block {
    /// This block's spec read as a body: its attributes and nested blocks.
    pub fn body(&self) -> Result<Body, serde_json::Error> {
        Body::from_spec(&self.spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_flat_spec_is_all_attributes_in_written_order() {
        let body = Body::from_spec(&json!({"port": 8084, "bind": "0.0.0.0:8084"})).unwrap();
        assert!(body.blocks.is_empty());
        let keys: Vec<&String> = body.attributes.keys().collect();
        assert_eq!(keys, ["port", "bind"]);
    }

    #[test]
    fn nested_blocks_nest_and_round_trip() {
        let spec = json!({
            "mode": "http",
            "@blocks": [
                {"type": "route", "labels": ["/api"], "spec": {
                    "backend": "a",
                    "@blocks": [{"type": "header", "labels": ["x"], "spec": {"value": "1"}}]
                }},
                {"type": "health", "spec": {"path": "/"}}
            ]
        });
        let body = Body::from_spec(&spec).unwrap();
        assert_eq!(body.blocks.len(), 2);
        let route = body.blocks_of_type("route").next().unwrap();
        let headers = route.body().unwrap();
        assert_eq!(headers.blocks[0].labels, ["x"]);
        assert_eq!(serde_json::to_value(&body).unwrap(), spec);
    }

    #[test]
    fn a_spec_that_is_not_an_object_is_an_error() {
        assert!(Body::from_spec(&json!([1, 2])).is_err());
        assert!(Body::from_spec(&json!({"@blocks": 3})).is_err());
    }
}
