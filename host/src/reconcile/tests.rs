//! The control loop against a fake runtime and fake plugins: coalescing,
//! per-workload serialisation, parallelism, supersede, back-off.

use super::*;
use serde_json::json;

fn core(value: serde_json::Value) -> CoreSpec {
    serde_json::from_value(value).unwrap()
}

#[test]
fn scaling_and_drain_budget_do_not_change_the_container_hash() {
    let base = json!({"image": "esl:1", "replicas": 1, "ports": ["8084"], "drain_timeout": "30s"});
    let mut scaled = base.clone();
    scaled["replicas"] = json!(5);
    scaled["drain_timeout"] = json!("1m");
    scaled["max_surge"] = json!(3);
    let mut new_image = base.clone();
    new_image["image"] = json!("esl:2");
    let mut new_env = base.clone();
    new_env["env"] = json!({"A": "1"});
    assert_eq!(
        container_spec_hash(&core(base.clone())),
        container_spec_hash(&core(scaled))
    );
    assert_ne!(
        container_spec_hash(&core(base.clone())),
        container_spec_hash(&core(new_image))
    );
    assert_ne!(
        container_spec_hash(&core(base)),
        container_spec_hash(&core(new_env))
    );
}
