//! The dependency rules of ARCHITECTURE.md, enforced: each voodu crate may
//! depend only on the voodu crates its rule names, the CLI never reaches the
//! store or the engine, and the embeddable plugin host pulls in no database,
//! engine client, async runtime or CLI crate, directly or through another.
//! Read from `cargo metadata`, so the rules are checked against what Cargo
//! actually builds.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Every voodu crate, and the voodu crates it may depend on (normal
/// dependencies, not dev or build ones).
const RULES: &[(&str, &[&str])] = &[
    ("voodu-plugin-abi", &[]),
    ("voodu-model", &["voodu-plugin-abi"]),
    ("voodu-manifest", &["voodu-model", "voodu-plugin-abi"]),
    ("voodu-store", &["voodu-model", "voodu-plugin-abi"]),
    (
        "voodu-store-etcd",
        &["voodu-store", "voodu-model", "voodu-plugin-abi"],
    ),
    ("voodu-runtime", &["voodu-model", "voodu-plugin-abi"]),
    ("voodu-plugin-host", &["voodu-plugin-abi"]),
    (
        "voodu-reconcile",
        &[
            "voodu-model",
            "voodu-plugin-abi",
            "voodu-store",
            "voodu-runtime",
            "voodu-plugin-host",
        ],
    ),
    ("voodu-api", &["voodu-model", "voodu-plugin-abi"]),
    (
        "voodu-controller",
        &[
            "voodu-model",
            "voodu-plugin-abi",
            "voodu-manifest",
            "voodu-store",
            "voodu-store-etcd",
            "voodu-runtime",
            "voodu-plugin-host",
            "voodu-reconcile",
            "voodu-api",
        ],
    ),
    (
        "voodu-cli",
        &[
            "voodu-api",
            "voodu-model",
            "voodu-plugin-abi",
            "voodu-manifest",
        ],
    ),
    ("vd", &["voodu-cli", "voodu-controller"]),
    ("voodu-echo", &["voodu-plugin-abi"]),
    ("voodu-echo-c", &[]),
    ("voodu-traffik", &["voodu-plugin-abi"]),
    ("voodu-haproxy", &[]),
];

/// Crates the embeddable plugin host must not pull in, even indirectly.
const NOT_IN_THE_PLUGIN_HOST: &[&str] = &[
    "rusqlite",
    "libsqlite3-sys",
    "bollard",
    "tokio",
    "clap",
    "indicatif",
    "hcl-rs",
    "hyper",
];

struct Graph {
    /// Package id → name.
    names: BTreeMap<String, String>,
    /// Package id → ids of its normal dependencies.
    normal_deps: BTreeMap<String, Vec<String>>,
}

fn graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    let names = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| {
            (
                package["id"].as_str().expect("id").to_owned(),
                package["name"].as_str().expect("name").to_owned(),
            )
        })
        .collect();
    let normal_deps = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve nodes")
        .iter()
        .map(|node| {
            let deps = node["deps"]
                .as_array()
                .expect("deps")
                .iter()
                .filter(|dep| {
                    dep["dep_kinds"]
                        .as_array()
                        .expect("dep_kinds")
                        .iter()
                        .any(|kind| kind["kind"].is_null())
                })
                .map(|dep| dep["pkg"].as_str().expect("pkg").to_owned())
                .collect();
            (node["id"].as_str().expect("id").to_owned(), deps)
        })
        .collect();
    Graph { names, normal_deps }
}

impl Graph {
    fn id_of(&self, name: &str) -> &str {
        self.names
            .iter()
            .find(|(_, package)| package.as_str() == name)
            .map(|(id, _)| id.as_str())
            .unwrap_or_else(|| panic!("no package named {name} in the workspace"))
    }

    fn direct(&self, name: &str) -> BTreeSet<&str> {
        self.normal_deps[self.id_of(name)]
            .iter()
            .map(|id| self.names[id].as_str())
            .collect()
    }

    fn transitive(&self, name: &str) -> BTreeSet<&str> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![self.id_of(name).to_owned()];
        while let Some(id) = todo.pop() {
            for dep in &self.normal_deps[&id] {
                if seen.insert(self.names[dep].as_str()) {
                    todo.push(dep.clone());
                }
            }
        }
        seen
    }
}

fn is_voodu(name: &str) -> bool {
    name.starts_with("voodu-") || name == "vd"
}

#[test]
fn every_voodu_crate_depends_only_on_the_crates_its_rule_allows() {
    let graph = graph();
    let mut broken = Vec::new();
    for (name, allowed) in RULES {
        for dep in graph.direct(name).into_iter().filter(|dep| is_voodu(dep)) {
            if !allowed.contains(&dep) {
                broken.push(format!(
                    "{name} depends on {dep}, which its rule does not allow"
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn every_workspace_crate_that_ships_has_a_rule() {
    let graph = graph();
    let ruled: BTreeSet<&str> = RULES.iter().map(|(name, _)| *name).collect();
    let unruled: Vec<&str> = graph
        .names
        .values()
        .map(String::as_str)
        .filter(|name| is_voodu(name))
        .filter(|name| !name.starts_with("voodu-fixture") && *name != "voodu-tests")
        .filter(|name| *name != "voodu-echo-server" && !name.starts_with("voodu-plugin-abi-"))
        .filter(|name| !ruled.contains(name))
        .collect();
    assert!(
        unruled.is_empty(),
        "add a rule to tests/crate_rules.rs for: {unruled:?}"
    );
}

#[test]
fn the_cli_never_reaches_the_store_the_engine_or_the_plugins() {
    let graph = graph();
    let reached = graph.transitive("voodu-cli");
    for forbidden in [
        "voodu-store",
        "voodu-runtime",
        "voodu-plugin-host",
        "voodu-reconcile",
        "voodu-controller",
        // voodu-manifest is allowed: `vd apply` finds the files `env_file`
        // names with its prescan, as voodu reads them client-side. The
        // controller still parses and validates every manifest.
        "rusqlite",
        "bollard",
    ] {
        assert!(
            !reached.contains(forbidden),
            "voodu-cli reaches {forbidden}"
        );
    }
}

#[test]
fn the_plugin_host_embeds_with_a_small_tree() {
    let graph = graph();
    let reached = graph.transitive("voodu-plugin-host");
    let heavy: Vec<&&str> = NOT_IN_THE_PLUGIN_HOST
        .iter()
        .filter(|name| reached.contains(**name))
        .collect();
    assert!(
        heavy.is_empty(),
        "voodu-plugin-host pulls in {heavy:?}; it must embed without them"
    );
}

#[test]
fn the_runtime_knows_nothing_of_plugins_and_samples_nothing_of_the_host() {
    let graph = graph();
    assert!(!graph
        .transitive("voodu-runtime")
        .contains("voodu-plugin-host"));
    assert!(!graph
        .transitive("voodu-store")
        .contains("voodu-plugin-host"));
    for sample in [
        "voodu-echo",
        "voodu-traffik",
        "voodu-echo-c",
        "voodu-haproxy",
    ] {
        let reached = graph.transitive(sample);
        let host: Vec<&&str> = reached
            .iter()
            .filter(|name| is_voodu(name) && **name != "voodu-plugin-abi")
            .collect();
        assert!(host.is_empty(), "{sample} depends on {host:?}");
    }
}
