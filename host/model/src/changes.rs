//! What changed between two specs of one workload: the one computation
//! behind `vd apply --dry-run`, `vd diff` and `vd history`.
//!
//! [`changes`] compares a core spec and its plugin blocks with another's
//! and answers one [`Change`] per path that differs: an attribute added,
//! removed or replaced (a JSON patch of the two specs), the keys of an
//! object in another order (plugins see the order, so it is part of the
//! spec), a plugin block added, forgotten, changed or moved. Each change
//! prints as the line a dry run shows (`~ replicas: 3 → 2`) and names the
//! attribute it is about (`replicas`), which is what `vd history` lists.

use std::fmt;

use serde_json::{json, Value};

use crate::core_spec::CoreSpec;
use crate::workload::NormalisedBlock;

/// One difference between two specs of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// What it is about: the core attribute (`replicas`, `env`; voodu's
    /// own blocks by their name, `probes`), or [`PLUGIN_BLOCKS`] for any
    /// plugin block.
    pub attribute: String,
    /// What changed there.
    pub kind: ChangeKind,
}

/// The attribute every change of a plugin block is about.
pub const PLUGIN_BLOCKS: &str = "plugin blocks";

/// What one [`Change`] is.
#[derive(Debug, Clone, PartialEq)]
pub enum ChangeKind {
    /// A value is there that was not, at `path` (`env.LEVEL`, `echo
    /// "http" block.spec.port`).
    Added {
        /// Where.
        path: String,
        /// The new value.
        value: Value,
    },
    /// A value is gone.
    Removed {
        /// Where.
        path: String,
        /// The value it had.
        was: Value,
    },
    /// A value is another.
    Replaced {
        /// Where.
        path: String,
        /// The value it had.
        was: Value,
        /// The value it has.
        now: Value,
    },
    /// An object keeps its keys, in another order.
    KeyOrder {
        /// Where; empty for the top.
        path: String,
    },
    /// A plugin block is new.
    BlockAdded {
        /// How messages name it: `echo "http" block`.
        block: String,
        /// Its spec.
        spec: Value,
    },
    /// A plugin block is gone: its plugin forgets it.
    BlockForgotten {
        /// How messages name it.
        block: String,
    },
    /// The plugin blocks both specs have are in another order.
    BlockOrder {
        /// Their order before.
        was: Vec<String>,
        /// Their order now.
        now: Vec<String>,
    },
}

impl fmt::Display for Change {
    /// The line a dry run shows: `~ replicas: 3 → 2`, `+ echo "http"
    /// block: {...}`, `- echo "sip" block (its plugin forgets it)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ChangeKind::Added { path, value } => write!(f, "+ {path}: {value}"),
            ChangeKind::Removed { path, was } => write!(f, "- {path}: {was}"),
            ChangeKind::Replaced { path, was, now } => write!(f, "~ {path}: {was} → {now}"),
            ChangeKind::KeyOrder { path } => write!(
                f,
                "~ {}: key order changes",
                if path.is_empty() { "(top)" } else { path }
            ),
            ChangeKind::BlockAdded { block, spec } => write!(f, "+ {block}: {spec}"),
            ChangeKind::BlockForgotten { block } => {
                write!(f, "- {block} (its plugin forgets it)")
            }
            ChangeKind::BlockOrder { was, now } => {
                write!(f, "~ block order: {} → {}", was.join(", "), now.join(", "))
            }
        }
    }
}

/// Every difference from `old` to `new` (each a core spec and its plugin
/// blocks): the core attributes first, then the plugin blocks. The core
/// spec's `secrets` (where secrets were placed) are left out: a secret's
/// change shows as the change of the value it is in.
pub fn changes(
    (old_core, old_blocks): (&CoreSpec, &[NormalisedBlock]),
    (new_core, new_blocks): (&CoreSpec, &[NormalisedBlock]),
) -> Vec<Change> {
    let as_json = |core: &CoreSpec| {
        let mut value = serde_json::to_value(core).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            fields.remove("secrets");
        }
        value
    };
    let mut found = Vec::new();
    value_changes(
        "",
        &as_json(old_core),
        &as_json(new_core),
        &mut |path, kind| {
            found.push(Change {
                attribute: core_attribute(path),
                kind,
            })
        },
    );
    block_changes(old_blocks, new_blocks, &mut found);
    found
}

/// The core attribute a path is in: its first part, or, under `blocks`
/// (voodu's own blocks), the block's name.
fn core_attribute(path: &str) -> String {
    let mut parts = path.split('.');
    match parts.next() {
        Some("blocks") => parts.next().unwrap_or("blocks").to_owned(),
        Some("") | None => "(top)".to_owned(),
        Some(first) => first.to_owned(),
    }
}

/// The differences between two JSON values under `path`, each handed to
/// `found` with its path.
fn value_changes(path: &str, old: &Value, new: &Value, found: &mut dyn FnMut(&str, ChangeKind)) {
    // Where a JSON pointer into these values is, as messages name it:
    // `env.LEVEL`, `echo "http" block.spec.port`.
    let at = |pointer: &json_patch::jsonptr::Pointer| -> String {
        std::iter::once(path.to_owned())
            .chain(pointer.tokens().map(|token| token.decoded().into_owned()))
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join(".")
    };
    let was = |pointer: &json_patch::jsonptr::Pointer| {
        old.pointer(pointer.as_str())
            .cloned()
            .unwrap_or(Value::Null)
    };
    for operation in json_patch::diff(old, new).0 {
        let (place, kind) = match operation {
            json_patch::PatchOperation::Add(add) => {
                let path = at(&add.path);
                (
                    path.clone(),
                    ChangeKind::Added {
                        path,
                        value: add.value,
                    },
                )
            }
            json_patch::PatchOperation::Remove(remove) => {
                let path = at(&remove.path);
                (
                    path.clone(),
                    ChangeKind::Removed {
                        path,
                        was: was(&remove.path),
                    },
                )
            }
            json_patch::PatchOperation::Replace(replace) => {
                let path = at(&replace.path);
                (
                    path.clone(),
                    ChangeKind::Replaced {
                        path,
                        was: was(&replace.path),
                        now: replace.value,
                    },
                )
            }
            // `diff` writes only adds, removes and replaces.
            _ => continue,
        };
        found(&place, kind);
    }
    key_order_changes(path, old, new, found);
}

/// The one change a JSON patch cannot say: the keys an object keeps, in
/// another order.
fn key_order_changes(
    path: &str,
    old: &Value,
    new: &Value,
    found: &mut dyn FnMut(&str, ChangeKind),
) {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return;
    };
    let common = |from: &serde_json::Map<String, Value>, other: &serde_json::Map<String, Value>| {
        from.keys()
            .filter(|key| other.contains_key(key.as_str()))
            .cloned()
            .collect::<Vec<_>>()
    };
    if common(old, new) != common(new, old) {
        found(
            path,
            ChangeKind::KeyOrder {
                path: path.to_owned(),
            },
        );
    }
    for (key, was) in old {
        if let Some(now) = new.get(key) {
            let inner = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            key_order_changes(&inner, was, now, found);
        }
    }
}

/// The differences between two specs' plugin blocks: added, forgotten,
/// changed, reordered.
fn block_changes(old: &[NormalisedBlock], new: &[NormalisedBlock], found: &mut Vec<Change>) {
    let mut push = |kind| {
        found.push(Change {
            attribute: PLUGIN_BLOCKS.to_owned(),
            kind,
        })
    };
    for block in new {
        match old.iter().find(|was| was.same_identity(block)) {
            Some(was) => {
                let name = block.display_name();
                value_changes(
                    &format!("{name}.spec"),
                    &was.spec,
                    &block.spec,
                    &mut |_, kind| push(kind),
                );
                value_changes(
                    &format!("{name}.endpoints"),
                    &json!(was.endpoints),
                    &json!(block.endpoints),
                    &mut |_, kind| push(kind),
                );
            }
            None => push(ChangeKind::BlockAdded {
                block: block.display_name(),
                spec: block.spec.clone(),
            }),
        }
    }
    for was in old {
        if !new.iter().any(|block| block.same_identity(was)) {
            push(ChangeKind::BlockForgotten {
                block: was.display_name(),
            });
        }
    }
    let order = |blocks: &[NormalisedBlock], other: &[NormalisedBlock]| -> Vec<String> {
        blocks
            .iter()
            .filter(|block| other.iter().any(|b| b.same_identity(block)))
            .map(NormalisedBlock::display_name)
            .collect()
    };
    let (was, now) = (order(old, new), order(new, old));
    if was != now {
        push(ChangeKind::BlockOrder { was, now });
    }
}

/// The attributes `changes` are about, each once, in order: what `vd
/// history` lists (`image, env, plugin blocks`).
pub fn attributes(changes: &[Change]) -> Vec<&str> {
    let mut named: Vec<&str> = Vec::new();
    for change in changes {
        if !named.contains(&change.attribute.as_str()) {
            named.push(&change.attribute);
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(image: &str, replicas: u32) -> CoreSpec {
        CoreSpec::of_image(image, replicas)
    }

    fn block(labels: &[&str], spec: Value) -> NormalisedBlock {
        serde_json::from_value(json!({
            "type": "echo",
            "labels": labels,
            "spec": spec,
            "endpoints": {}
        }))
        .expect("a block")
    }

    #[test]
    fn json_changes_are_named_by_path_and_a_new_key_order_is_a_change() {
        let mut lines = Vec::new();
        value_changes(
            "",
            &json!({"image": "a", "env": {"A": "1", "B": "2"}, "gone": 1}),
            &json!({"image": "b", "env": {"B": "2", "A": "1", "C": "3"}}),
            &mut |_, kind| {
                lines.push(
                    Change {
                        attribute: String::new(),
                        kind,
                    }
                    .to_string(),
                )
            },
        );
        lines.sort();
        assert_eq!(
            lines,
            [
                "+ env.C: \"3\"",
                "- gone: 1",
                "~ env: key order changes",
                "~ image: \"a\" → \"b\"",
            ]
        );
    }

    #[test]
    fn a_workloads_changes_print_as_a_dry_run_shows_them_and_name_their_attributes() {
        let old_blocks = [
            block(&["http"], json!({"greeting": "hi"})),
            block(&["sip"], json!({})),
        ];
        let new_blocks = [
            block(&["http"], json!({"greeting": "hello"})),
            block(&["new"], json!({"greeting": "hello"})),
        ];
        let found = changes(
            (&core("esl:1", 3), &old_blocks),
            (&core("esl:1", 2), &new_blocks),
        );
        let lines: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "~ replicas: 3 → 2",
                "~ echo \"http\" block.spec.greeting: \"hi\" → \"hello\"",
                "+ echo \"new\" block: {\"greeting\":\"hello\"}",
                "- echo \"sip\" block (its plugin forgets it)",
            ]
        );
        assert_eq!(attributes(&found), ["replicas", PLUGIN_BLOCKS]);
        assert!(changes(
            (&core("esl:1", 3), &old_blocks),
            (&core("esl:1", 3), &old_blocks)
        )
        .is_empty());
    }

    #[test]
    fn voodu_blocks_are_named_by_their_own_name() {
        assert_eq!(core_attribute("blocks.probes.http.path"), "probes");
        assert_eq!(core_attribute("env.LEVEL"), "env");
        assert_eq!(core_attribute(""), "(top)");
    }
}
