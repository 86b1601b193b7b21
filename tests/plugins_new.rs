//! `vd plugins:new`: a Rust and a C project, generated outside the
//! workspace and built there as an author would (the Rust one offline, with
//! its own test; the C one with its Makefile against the header and
//! cJSON), pass `vd plugins:check` as they are.

use std::path::Path;
use std::process::Command;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use vd::vd_binary;

/// `vd ARGS` in `dir`, with no controller: (code, stdout, stderr).
fn vd_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(vd_binary())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("vd runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `command`, failing the test with its output when it fails.
fn succeeds(command: &mut Command) -> String {
    let output = command.output().expect("it runs");
    assert!(
        output.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `vd plugins:check` of `library` with the project's example blocks:
/// every check passes.
fn passes_the_check(project: &Path, library: &Path) {
    let (code, stdout, stderr) = vd_in(
        project,
        &[
            "plugins:check",
            &library.display().to_string(),
            "--block",
            "example.hcl",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains(" passed, 0 warning(s), 0 failed"),
        "{stdout}"
    );
}

#[test]
fn a_new_c_plugin_builds_with_its_makefile_and_passes_the_check() {
    let outside = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = vd_in(outside.path(), &["plugins:new", "greeter", "--lang", "c"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.starts_with("wrote plugin greeter (C) in greeter: greeter.c, Makefile, example.hcl"),
        "{stdout}"
    );
    let project = outside.path().join("greeter");
    // Ordinary code an author adds builds: an snprintf of a /proc path
    // built from another, which -O2 -Wall flags as possibly truncated.
    let source = project.join("greeter.c");
    let mut text = std::fs::read_to_string(&source).unwrap();
    text.push_str(
        "\nint greeter_fd_path(char *out, unsigned long size, int pid, int fd);\nint greeter_fd_path(char *out, unsigned long size, int pid, int fd) {\n  char dir[64];\n  char path[32];\n  snprintf(dir, sizeof dir, \"/proc/%d/fd\", pid);\n  snprintf(path, sizeof path, \"%s/%d\", dir, fd);\n  return snprintf(out, size, \"%s\", path);\n}\n",
    );
    std::fs::write(&source, text).unwrap();
    succeeds(Command::new("make").current_dir(&project));
    passes_the_check(&project, &project.join("libgreeter.so"));
    // Its validate refuses a bad value in voodu's style, through the host.
    let plugin = voodu_plugin_host::load_plugin(
        &project.join("libgreeter.so"),
        &voodu_plugin_host::LoadOptions::default(),
    )
    .expect("it loads");
    let refused = plugin
        .validate(&voodu_plugin_abi::messages::ValidateRequest {
            kind: voodu_plugin_abi::messages::WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: voodu_plugin_abi::messages::Block {
                block_type: "greeter".into(),
                labels: vec!["http".into()],
                spec: serde_json::json!({"greeting": 3}),
            },
            workload: serde_json::json!({}),
        })
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "greeting must be a string of 1 to 64 bytes, not 3 — write greeting = \"hello\""
    );
    // The same directory again is refused, not overwritten.
    let (code, _, stderr) = vd_in(outside.path(), &["plugins:new", "greeter", "--lang", "c"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("greeter is not empty — choose another --dir"),
        "{stderr}"
    );
}

#[test]
fn a_new_rust_plugin_builds_offline_passes_its_own_test_and_the_check() {
    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("lb");
    let (code, stdout, stderr) = vd_in(
        outside.path(),
        &[
            "plugins:new",
            "my_lb",
            "--lang",
            "rust",
            "--dir",
            &project.display().to_string(),
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    // Built where the workspace keeps its other out-of-tree builds, so the
    // SDK's dependencies compile once across runs.
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/new-plugin");
    let cargo = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO"));
        command
            .args(args)
            .arg("--offline")
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS");
        command
    };
    succeeds(&mut cargo(&["build", "--quiet"]));
    let tested = succeeds(&mut cargo(&["test"]));
    assert!(
        tested.contains(
            "a_missing_greeting_gets_the_default_and_a_bad_one_is_refused_with_the_fix ... ok"
        ),
        "{tested}"
    );
    passes_the_check(&project, &target.join("debug/libvoodu_my_lb.so"));
    // A name that cannot name a block is refused with examples.
    let (code, _, stderr) = vd_in(outside.path(), &["plugins:new", "My-LB", "--lang", "rust"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("(greeter, my_lb2)"), "{stderr}");
}

#[test]
fn sdk_and_sdk_version_choose_what_a_new_project_builds_against() {
    let outside = tempfile::tempdir().unwrap();
    // A published SDK version: a version dependency, and no lock of the
    // checkout's.
    let (code, stdout, stderr) = vd_in(
        outside.path(),
        &[
            "plugins:new",
            "pinned",
            "--lang",
            "rust",
            "--sdk-version",
            "1.2.0",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let manifest = std::fs::read_to_string(outside.path().join("pinned/Cargo.toml")).unwrap();
    assert!(
        manifest.contains("voodu-plugin-abi = \"1.2.0\""),
        "{manifest}"
    );
    assert!(!outside.path().join("pinned/Cargo.lock").exists());
    // Another header directory for C, recorded in the Makefile.
    let include = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../include")
        .canonicalize()
        .unwrap();
    let copy = outside.path().join("headers");
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(include.join("voodu_plugin.h"), copy.join("voodu_plugin.h")).unwrap();
    let (code, stdout, stderr) = vd_in(
        outside.path(),
        &[
            "plugins:new",
            "elsewhere",
            "--lang",
            "c",
            "--sdk",
            &copy.display().to_string(),
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let makefile = std::fs::read_to_string(outside.path().join("elsewhere/Makefile")).unwrap();
    assert!(
        makefile.contains(&format!(
            "VOODU_INCLUDE ?= {}",
            copy.canonicalize().unwrap().display()
        )),
        "{makefile}"
    );
    // A path without the SDK is refused, naming the flag.
    let (code, _, stderr) = vd_in(
        outside.path(),
        &[
            "plugins:new",
            "nowhere",
            "--lang",
            "c",
            "--sdk",
            "/nonexistent",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("no voodu_plugin.h in /nonexistent — name its directory with --sdk PATH"),
        "{stderr}"
    );
    let (code, _, stderr) = vd_in(
        outside.path(),
        &[
            "plugins:new",
            "nowhere",
            "--lang",
            "rust",
            "--sdk",
            "/nonexistent",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("the Rust SDK at /nonexistent cannot be used"),
        "{stderr}"
    );
}

#[test]
fn two_new_go_plugins_build_pass_the_check_and_run_in_one_controller_the_second_out_of_process() {
    if !voodu_tests::required_on_ci("go (Debian's golang-go)", Command::new("go").arg("version")) {
        return;
    }
    let outside = tempfile::tempdir().unwrap();
    let mut libraries = Vec::new();
    for name in ["greeter", "salute"] {
        let (code, stdout, stderr) = vd_in(outside.path(), &["plugins:new", name, "--lang", "go"]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert!(
            stdout.starts_with(&format!(
                "wrote plugin {name} (Go) in {name}: {name}.go, vtable.c, go.mod, Makefile, example.hcl"
            )),
            "{stdout}"
        );
        let project = outside.path().join(name);
        succeeds(Command::new("make").current_dir(&project));
        libraries.push(project.join(format!("lib{name}.so")));
    }
    passes_the_check(&outside.path().join("greeter"), &libraries[0]);

    // One controller: the first Go runtime in it, the second in a child of
    // its own, each told by its `.go.buildinfo` section.
    let controller = vd::Controller::start();
    for library in &libraries {
        controller
            .vd(&["plugins:install", &library.display().to_string()])
            .success();
    }
    let (greeter, salute) = (
        controller.plugin_row("greeter"),
        controller.plugin_row("salute"),
    );
    assert_eq!(greeter["out_of_process"], false, "{greeter}");
    assert_eq!(salute["out_of_process"], true, "{salute}");
    assert!(salute["child_pid"].as_u64().is_some(), "{salute}");
    let listed = controller.vd(&["plugins:list"]).success();
    assert!(listed.stdout.contains("controller"), "{listed:?}");
    assert!(listed.stdout.contains("pid "), "{listed:?}");

    // Both validate at apply: defaults filled in, a refusal at its line.
    let manifest = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  greeter \"http\" {}\n  salute \"http\" {\n    greeting = \"hi\"\n  }\n}\n",
    );
    controller.vd(&["apply", "-f", &manifest]).success();
    let described = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    assert_eq!(
        described["blocks"][0]["spec"],
        serde_json::json!({"greeting": "hello"})
    );
    assert_eq!(
        described["blocks"][1]["spec"],
        serde_json::json!({"greeting": "hi"})
    );
    let bad = controller.manifest(
        "bad.hcl",
        "deployment \"prod\" \"bad\" {\n  image = \"esl:1\"\n  salute \"http\" {\n    greeting = 3\n  }\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &bad]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("bad.hcl:4:")
            && refused
                .stderr
                .contains("greeting must be a string of 1 to 64 bytes, not 3"),
        "{refused:?}"
    );

    // A replace of the one in the controller: its new library would be a
    // second Go runtime there, so it runs out of process; the stored
    // blocks are validated again by it.
    controller
        .vd(&[
            "plugins:install",
            "--replace",
            &libraries[0].display().to_string(),
        ])
        .success();
    assert_eq!(controller.plugin_row("greeter")["out_of_process"], true);

    // Reloaded after a restart: one in, one out again, and both answer.
    let mut controller = controller;
    controller.restart();
    let rows = [
        controller.plugin_row("greeter"),
        controller.plugin_row("salute"),
    ];
    let out: Vec<bool> = rows
        .iter()
        .map(|row| row["out_of_process"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(out.iter().filter(|out| **out).count(), 1, "{rows:?}");
    controller.vd(&["apply", "-f", &manifest]).success();
    assert!(
        !controller.log_text().contains("bad sweepgen"),
        "{}",
        controller.log_text()
    );
}
