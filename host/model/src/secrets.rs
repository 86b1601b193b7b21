//! Secrets that reach a workload's spec. A value of a config bucket kept
//! as a secret (`vd config set --secret`) may reach a manifest through
//! `${NAME}`; the spec that runs must hold it, but nothing that shows the
//! spec may. So the apply records, with the spec, each place a secret
//! landed ([`SecretPlace`]: which string, which bytes of it, from which
//! bucket and variable), and every view of a stored spec (`vd describe`,
//! `vd history`, `vd get -o json`, a dry run's changes) shows it
//! [`redacted`] instead: `<secret DB_PASSWORD from prod/api>`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::BucketName;
use crate::core_spec::CoreSpec;
use crate::workload::NormalisedBlock;

/// A secret value that a manifest's `${NAME}` took from a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretUse {
    /// The bucket it came from.
    pub bucket: BucketName,
    /// The variable.
    pub variable: String,
    /// The value, as substituted.
    pub value: String,
}

/// Where a secret landed in a stored spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretPlace {
    /// The plugin block (its position among the workload's blocks) whose
    /// spec holds it; `None`: the core spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<usize>,
    /// The JSON pointer of the string that holds it (`/env/DB_PASSWORD`).
    pub pointer: String,
    /// Where in that string it starts, in bytes.
    pub start: usize,
    /// Where it ends, in bytes.
    pub end: usize,
    /// The bucket it came from.
    pub bucket: BucketName,
    /// The variable.
    pub variable: String,
}

impl SecretPlace {
    /// What shows instead of the value.
    pub fn marker(&self) -> String {
        format!("<secret {} from {}>", self.variable, self.bucket)
    }

    /// The attribute that holds it, as messages name attributes:
    /// `env.DATABASE_URL`; within its block's spec for a block's
    /// (`blocks` are the workload's, in order): `pg "main" block.spec.password`.
    pub fn attribute(&self, blocks: &[NormalisedBlock]) -> String {
        let at = self
            .pointer
            .split('/')
            .skip(1)
            .map(|token| token.replace("~1", "/").replace("~0", "~"))
            .collect::<Vec<_>>()
            .join(".");
        match self.block.and_then(|i| blocks.get(i)) {
            Some(block) => format!("{}.spec.{at}", block.display_name()),
            None => at,
        }
    }
}

/// Every place one of `secrets` appears in the strings of `core` (the core
/// spec as JSON) and of each block's spec, in order.
pub fn places_of(secrets: &[SecretUse], core: &Value, blocks: &[Value]) -> Vec<SecretPlace> {
    let mut places = Vec::new();
    if secrets.iter().all(|secret| secret.value.is_empty()) {
        return places;
    }
    // The longest values first, so one secret inside another is hidden
    // with it, never left half shown.
    let mut secrets: Vec<&SecretUse> = secrets
        .iter()
        .filter(|secret| !secret.value.is_empty())
        .collect();
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.value.len()));
    let targets =
        std::iter::once((None, core)).chain(blocks.iter().enumerate().map(|(i, b)| (Some(i), b)));
    for (block, value) in targets {
        let mut strings = Vec::new();
        strings_of(value, String::new(), &mut strings);
        for (pointer, text) in strings {
            let mut found: Vec<SecretPlace> = Vec::new();
            for secret in &secrets {
                for (start, _) in text.match_indices(secret.value.as_str()) {
                    let end = start + secret.value.len();
                    // One secret inside another's bytes is already hidden.
                    if found.iter().any(|f| start < f.end && f.start < end) {
                        continue;
                    }
                    found.push(SecretPlace {
                        block,
                        pointer: pointer.clone(),
                        start,
                        end,
                        bucket: secret.bucket.clone(),
                        variable: secret.variable.clone(),
                    });
                }
            }
            found.sort_by_key(|place| place.start);
            places.extend(found);
        }
    }
    places
}

/// Each string of `value` with its JSON pointer.
fn strings_of(value: &Value, pointer: String, out: &mut Vec<(String, String)>) {
    let escape = |token: &str| token.replace('~', "~0").replace('/', "~1");
    match value {
        Value::String(text) => out.push((pointer, text.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                strings_of(item, format!("{pointer}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                strings_of(item, format!("{pointer}/{}", escape(key)), out);
            }
        }
        _ => {}
    }
}

/// `value` with each of `places` (those of one target) shown as its
/// marker.
pub fn redact_value(value: &mut Value, places: &[&SecretPlace]) {
    let mut by_pointer: Vec<&&SecretPlace> = places.iter().collect();
    // From the last byte backwards, so earlier ranges keep their offsets.
    by_pointer.sort_by(|a, b| (&a.pointer, b.start).cmp(&(&b.pointer, a.start)));
    for place in by_pointer {
        if let Some(Value::String(text)) = value.pointer_mut(&place.pointer) {
            if place.end <= text.len()
                && text.is_char_boundary(place.start)
                && text.is_char_boundary(place.end)
            {
                text.replace_range(place.start..place.end, &place.marker());
            } else {
                // The string is not the one the place was recorded for:
                // hide all of it rather than guess.
                *text = place.marker();
            }
        }
    }
}

/// A stored spec as every view shows it: each secret that reached it
/// through `${NAME}` replaced by its marker. The places stay, so a reader
/// sees where secrets are.
pub fn redacted(core: &CoreSpec, blocks: &[NormalisedBlock]) -> (CoreSpec, Vec<NormalisedBlock>) {
    if core.secrets.is_empty() {
        return (core.clone(), blocks.to_vec());
    }
    let in_core: Vec<&SecretPlace> = core.secrets.iter().filter(|p| p.block.is_none()).collect();
    let redacted_core = redacted_core(core, &in_core);
    let blocks = blocks
        .iter()
        .enumerate()
        .map(|(i, block)| {
            let mine: Vec<&SecretPlace> =
                core.secrets.iter().filter(|p| p.block == Some(i)).collect();
            let mut block = block.clone();
            redact_value(&mut block.spec, &mine);
            block
        })
        .collect();
    (redacted_core, blocks)
}

/// The core spec with `places` hidden. All of them at once, when the spec
/// still reads as one after; otherwise one at a time, keeping each that
/// leaves a spec that reads (a value that is also part of a typed string,
/// such as `api` inside `env_from`'s `prod/api`, stays there: it is the
/// bucket's name, not the secret). Never all of the spec as it was.
fn redacted_core(core: &CoreSpec, places: &[&SecretPlace]) -> CoreSpec {
    let Ok(original) = serde_json::to_value(core) else {
        return core.clone();
    };
    let mut all = original.clone();
    redact_value(&mut all, places);
    if let Ok(spec) = serde_json::from_value(all) {
        return spec;
    }
    let mut kept = original;
    for place in places {
        let mut tried = kept.clone();
        redact_value(&mut tried, &[*place]);
        if serde_json::from_value::<CoreSpec>(tried.clone()).is_ok() {
            kept = tried;
        }
    }
    serde_json::from_value(kept).unwrap_or_else(|_| core.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(variable: &str, value: &str) -> SecretUse {
        SecretUse {
            bucket: "prod/api".parse().unwrap(),
            variable: variable.to_owned(),
            value: value.to_owned(),
        }
    }

    #[test]
    fn a_secret_is_found_in_the_core_spec_and_in_block_specs_and_shown_as_its_marker() {
        let core = json!({"env": {"DB_URL": "postgres://app:hunter2@db/app", "LEVEL": "info"}, "command": ["run", "hunter2"]});
        let block = json!({"password": "hunter2"});
        let places = places_of(
            &[secret("PASS", "hunter2")],
            &core,
            std::slice::from_ref(&block),
        );
        // serde_json's maps keep their keys sorted or in insertion order,
        // as the build's features decide: the places are compared sorted.
        let mut pointers: Vec<(Option<usize>, &str)> = places
            .iter()
            .map(|p| (p.block, p.pointer.as_str()))
            .collect();
        pointers.sort();
        assert_eq!(
            pointers,
            [
                (None, "/command/1"),
                (None, "/env/DB_URL"),
                (Some(0), "/password")
            ]
        );
        let mut shown = core.clone();
        let in_core: Vec<&SecretPlace> = places.iter().filter(|p| p.block.is_none()).collect();
        redact_value(&mut shown, &in_core);
        assert_eq!(
            shown["env"]["DB_URL"],
            "postgres://app:<secret PASS from prod/api>@db/app"
        );
        assert_eq!(shown["env"]["LEVEL"], "info");
        assert!(!shown.to_string().contains("hunter2"), "{shown}");
    }

    #[test]
    fn two_secrets_in_one_string_are_each_hidden() {
        let core = json!({"env": {"URL": "u:alice p:s3cret"}});
        let places = places_of(
            &[secret("USER", "alice"), secret("PASS", "s3cret")],
            &core,
            &[],
        );
        let mut shown = core.clone();
        redact_value(&mut shown, &places.iter().collect::<Vec<_>>());
        assert_eq!(
            shown["env"]["URL"],
            "u:<secret USER from prod/api> p:<secret PASS from prod/api>"
        );
    }

    #[test]
    fn a_secret_inside_another_is_hidden_with_it() {
        let core = json!({"env": {"URL": "app-s3cret"}});
        let places = places_of(
            &[secret("USER", "app"), secret("PASS", "app-s3cret")],
            &core,
            &[],
        );
        let mut shown = core.clone();
        redact_value(&mut shown, &places.iter().collect::<Vec<_>>());
        assert_eq!(shown["env"]["URL"], "<secret PASS from prod/api>");
    }

    #[test]
    fn a_secret_also_in_a_typed_field_never_shows_the_others() {
        let mut spec = CoreSpec::of_image("esl:1", 1);
        spec.env.insert("DB_USER".into(), "api".into());
        spec.env.insert("DB_PASSWORD".into(), "hunter2".into());
        spec.env_from = vec!["prod/api".parse().unwrap()];
        let json = serde_json::to_value(&spec).unwrap();
        spec.secrets = places_of(
            &[secret("DB_USER", "api"), secret("DB_PASSWORD", "hunter2")],
            &json,
            &[],
        );
        let (shown, _) = redacted(&spec, &[]);
        let text = serde_json::to_string(&shown).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(shown.env["DB_USER"], "<secret DB_USER from prod/api>");
        assert_eq!(shown.env_from[0].to_string(), "prod/api");
    }

    #[test]
    fn a_string_changed_since_is_hidden_whole() {
        let places = places_of(&[secret("PASS", "hunter2")], &json!({"a": "hunter2"}), &[]);
        let mut shown = json!({"a": "x"});
        redact_value(&mut shown, &places.iter().collect::<Vec<_>>());
        assert_eq!(shown["a"], "<secret PASS from prod/api>");
    }
}
