//! Keeps `docs/plugin-authors.md` true: every code block in it is compiled,
//! parsed or run here (its Rust blocks are doc-tests of `voodu-plugin-abi`).
//!
//! - `c` blocks are compiled as strict C99 into a shared object, loaded by
//!   the host's loader, and asked to validate a block;
//! - `json` blocks must be one of the plugin messages;
//! - `hcl` blocks must parse as manifests without a problem;
//! - `go` blocks must be excerpts of the Go file `vd plugins:new greeter
//!   --lang go` writes (which `tests/plugins_new.rs` builds and loads);
//! - any other block fails this test.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use voodu_manifest::parse_manifest;
use voodu_plugin_abi::messages::{
    Block, ConfigureRequest, DrainReply, DrainRequest, FailureReply, PublishRequest, ValidateReply,
    ValidateRequest, WorkloadKind,
};
use voodu_plugin_host::{load_plugin, LoadOptions};

fn guide() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/plugin-authors.md"))
        .expect("docs/plugin-authors.md exists")
}

/// The fenced code blocks of a markdown text: (language, code).
fn code_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(language)) => current = Some((language.trim().to_owned(), String::new())),
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some((_, code)), None) => {
                code.push_str(line);
                code.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

fn blocks_in(language: &str) -> Vec<String> {
    code_blocks(&guide())
        .into_iter()
        .filter(|(lang, _)| lang == language)
        .map(|(_, code)| code)
        .collect()
}

#[test]
fn every_code_block_is_of_a_checked_kind() {
    let blocks = code_blocks(&guide());
    assert!(blocks.len() >= 8, "{blocks:?}");
    for (language, _) in &blocks {
        assert!(
            ["rust", "c", "json", "hcl", "toml", "go"].contains(&language.as_str()),
            "a ```{language} block is checked by nothing"
        );
    }
}

#[test]
fn the_go_excerpts_are_the_file_plugins_new_writes() {
    let excerpts = blocks_in("go");
    assert!(excerpts.len() >= 2, "{excerpts:?}");
    let template =
        include_str!("../host/cli/templates/go_plugin.go").replace("{{name}}", "greeter");
    for excerpt in excerpts {
        assert!(
            template.contains(&excerpt),
            "the guide's Go excerpt is not in the file `vd plugins:new greeter --lang go` writes:\n{excerpt}"
        );
    }
}

#[test]
fn the_c_walkthrough_is_what_plugins_new_writes_and_builds_outside_the_checkout() {
    let sources = blocks_in("c");
    assert_eq!(sources.len(), 1);
    let template = include_str!("../host/cli/templates/c_plugin.c").replace("{{name}}", "greeter");
    assert_eq!(
        sources[0], template,
        "the guide's C plugin is the one `vd plugins:new greeter --lang c` writes"
    );
    // Built in a directory of its own, as the guide's command says, with
    // the header named by its path.
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("greeter.c");
    std::fs::write(&source, &sources[0]).unwrap();
    let library: PathBuf = dir.path().join("libgreeter.so");
    let include = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../include")
        .canonicalize()
        .unwrap();
    let command = guide()
        .lines()
        .find(|line| line.starts_with("`cc -std=c99"))
        .expect("the guide's build command")
        .trim_matches('`')
        .replace("/path/to/voodu/include", &include.display().to_string());
    let compiled = Command::new("sh")
        .args(["-c", &command])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        compiled.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let plugin =
        load_plugin(&library, &LoadOptions::default()).expect("the guide's C plugin loads");
    assert_eq!(plugin.name(), "greeter");
    let validate = |spec: serde_json::Value| {
        plugin.validate(&ValidateRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: Block {
                block_type: "greeter".into(),
                labels: vec![],
                spec,
            },
            workload: json!({"replicas": 1}),
        })
    };
    let reply = validate(json!({})).expect("it validates");
    assert_eq!(reply.spec, json!({"greeting": "hello"}));
    let refused = validate(json!({"greeting": ""})).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "greeting must be a string of 1 to 64 bytes, not \"\" — write greeting = \"hello\""
    );
    let too_large = validate(json!({"count": 9007199254740993u64})).unwrap_err();
    assert!(
        too_large.to_string().contains("too large to keep exactly"),
        "{too_large}"
    );
}

#[test]
fn every_json_example_is_a_plugin_message() {
    let examples = blocks_in("json");
    assert!(examples.len() >= 5);
    for example in examples {
        let value: serde_json::Value = serde_json::from_str(&example)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {example}"));
        // A message of one of these types that carries every member the
        // example writes: one whose members a type would drop unread (an
        // object with a `spec` and a misspelt rest) is none.
        let is_message = carried::<ValidateRequest>(&value)
            || carried::<ValidateReply>(&value)
            || carried::<PublishRequest>(&value)
            || carried::<DrainRequest>(&value)
            || carried::<DrainReply>(&value)
            || carried::<FailureReply>(&value)
            || carried::<ConfigureRequest>(&value);
        assert!(is_message, "not a plugin message: {example}");
    }
}

/// Whether `example` reads as a `M` that, written again, still holds every
/// member and value the example wrote (defaults may add members).
fn carried<M: serde::de::DeserializeOwned + serde::Serialize>(example: &serde_json::Value) -> bool {
    let Ok(message) = serde_json::from_value::<M>(example.clone()) else {
        return false;
    };
    let written = serde_json::to_value(&message).expect("a message serialises");
    holds(&written, example)
}

/// Whether `whole` holds every member and value of `part`.
fn holds(whole: &serde_json::Value, part: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (whole, part) {
        (Value::Object(whole), Value::Object(part)) => part
            .iter()
            .all(|(key, value)| whole.get(key).is_some_and(|kept| holds(kept, value))),
        (Value::Array(whole), Value::Array(part)) => {
            whole.len() == part.len()
                && whole
                    .iter()
                    .zip(part)
                    .all(|(kept, value)| holds(kept, value))
        }
        (whole, part) => whole == part,
    }
}

#[test]
fn a_json_example_with_a_member_no_message_reads_is_not_one() {
    // What the check above used to take: a `spec`, and a misspelt member
    // every message type would drop.
    let misspelt = json!({"spec": {"port": 8084}, "endpoints": {}, "claimz": []});
    assert!(!carried::<ValidateReply>(&misspelt));
    let right = json!({"spec": {"port": 8084}, "endpoints": {}});
    assert!(carried::<ValidateReply>(&right));
}

#[test]
fn every_hcl_example_parses_as_a_manifest() {
    for example in blocks_in("hcl") {
        let (workloads, problems) = parse_manifest("guide.hcl", &example);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(workloads[0].plugin_blocks[0].block.block_type, "greeter");
    }
}

#[test]
fn the_body_encoding_example_is_what_the_parser_sends() {
    let hcl = blocks_in("hcl")
        .into_iter()
        .find(|example| example.contains("rule \"x\" \"w\""))
        .expect("the guide shows the encoding of nested blocks");
    let json = blocks_in("json")
        .into_iter()
        .find(|example| example.contains("@blocks"))
        .expect("the guide shows the encoded request");
    let (workloads, problems) = parse_manifest("guide.hcl", &hcl);
    assert!(problems.is_empty(), "{problems:?}");
    let request: ValidateRequest = serde_json::from_str(&json).expect("a validate request");
    assert_eq!(workloads[0].plugin_blocks[0].block, request.block);
    // Key order is part of the encoding: compare the text.
    assert_eq!(
        serde_json::to_string(&workloads[0].plugin_blocks[0].block.spec).unwrap(),
        serde_json::to_string(&request.block.spec).unwrap()
    );
}

#[test]
fn the_rust_walkthrough_builds_outside_the_workspace_as_an_author_would() {
    let manifests = blocks_in("toml");
    assert_eq!(manifests.len(), 1, "the guide shows one Cargo.toml");
    let rust = blocks_in("rust");
    let source = rust
        .iter()
        .find(|code| code.contains("export_plugin!(Greeter)"))
        .expect("the guide's Rust plugin");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let abi = workspace.join("plugin-abi").canonicalize().unwrap();
    let manifest = manifests[0].replace(
        "path = \"../voodu/plugin-abi\"",
        &format!("path = {:?}", abi.display().to_string()),
    );
    assert_ne!(
        manifest, manifests[0],
        "the guide's path is the one replaced"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Cargo.toml"), manifest).unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), source).unwrap();
    // The workspace's lock, so the crate builds offline with the versions
    // the workspace already has.
    std::fs::copy(workspace.join("Cargo.lock"), dir.path().join("Cargo.lock")).unwrap();
    let target = workspace.join("target/guide-plugin");
    let built = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet"])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let plugin = load_plugin(
        &target.join("debug/libvoodu_greeter.so"),
        &LoadOptions::default(),
    )
    .expect("the guide's Rust plugin loads");
    assert_eq!(plugin.name(), "greeter");
    let reply = plugin
        .validate(&ValidateRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: Block {
                block_type: "greeter".into(),
                labels: vec![],
                spec: json!({"greeting": "hi"}),
            },
            workload: json!({"replicas": 1}),
        })
        .expect("it validates");
    assert_eq!(reply.spec, json!({"greeting": "hi", "shout": false}));
}
