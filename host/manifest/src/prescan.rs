//! What `vd apply` reads before it sends the manifests: the files each
//! workload's `env_file` names, which voodu reads on the machine that runs
//! the CLI, relative to its working directory.

use hcl_edit::structure::Structure;
use serde_json::Value;
use voodu_model::parse_kind_exact;

use crate::expression::evaluate_exact;
use crate::interpolate::{blank_every_reference, interpolate, Variables};

/// The paths the workloads of `text` name in `env_file`, in order, once
/// each; `${NAME}`s resolved from `variables` (one that cannot be is left
/// empty: the parse that follows reports it). A text that does not parse
/// names none (the parse that follows reports why).
pub fn env_file_paths(text: &str, variables: &dyn Variables) -> Vec<String> {
    let interpolated = interpolate(text, variables).unwrap_or_else(|_| blank_every_reference(text));
    let Ok(body) = hcl_edit::parser::parse_body(&interpolated.text) else {
        return Vec::new();
    };
    let mut paths: Vec<String> = Vec::new();
    for block in body.iter().filter_map(Structure::as_block) {
        if parse_kind_exact(block.ident.as_str()).is_none() {
            continue;
        }
        for attribute in block.body.iter().filter_map(Structure::as_attribute) {
            if attribute.key.as_str() != "env_file" {
                continue;
            }
            if let Ok(Value::Array(items)) = evaluate_exact(&attribute.value, &interpolated.text) {
                for item in items {
                    if let Value::String(path) = item {
                        if !path.is_empty() && !paths.contains(&path) {
                            paths.push(path);
                        }
                    }
                }
            }
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interpolate::no_variables;

    #[test]
    fn env_files_are_found_in_every_workload_once() {
        let text = "deployment \"prod\" \"api\" {\n  env_file = [\"./.env\", \"${ENV_DIR:-conf}/api.env\"]\n}\nstatefulset \"data\" \"pg\" {\n  env_file = [\"./.env\"]\n}\ningress \"prod\" \"api\" {\n  env_file = [\"ignored\"]\n}\n";
        assert_eq!(
            env_file_paths(text, &no_variables),
            ["./.env", "conf/api.env"]
        );
        assert!(env_file_paths("deployment {", &no_variables).is_empty());
    }
}
