//! `vd plugins:test` on the real engine, as an author runs it: traffik
//! with load through the address it serves passes every step, each
//! counting requests, with none lost but what was in flight to the killed
//! replica; a manifest the plugin refuses fails
//! at the apply and runs nothing after it. Nothing is left on the engine.
//! On CI (`CI=true`) a missing engine fails these tests.

use std::process::Command;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::{engine_available, EchoImage, Scope};

/// `vd plugins:test ARGS`, from a fresh directory holding `manifest`.
fn plugins_test(manifest: &str, args: &[&str]) -> vd::Run {
    let directory = tempfile::tempdir().expect("a directory");
    let file = directory.path().join("test.hcl");
    std::fs::write(&file, manifest).expect("written");
    vd::Run::from_output(
        Command::new(vd::vd_binary())
            .arg("plugins:test")
            .args(args)
            .arg("-f")
            .arg(&file)
            .env("NO_COLOR", "1")
            .current_dir(directory.path())
            .output()
            .expect("vd runs"),
    )
}

#[test]
fn traffik_under_load_passes_every_step_and_loses_no_request_but_to_the_killed_replica() {
    if !engine_available() {
        return;
    }
    let image = EchoImage::import();
    let scope = Scope::new();
    let port = voodu_tests::free_port();
    let manifest = format!(
        "deployment \"{}\" \"web\" {{\n  image    = \"{}\"\n  replicas = 2\n  ports    = [\"8084\"]\n  traffik \"http\" {{\n    port = 8084\n    bind = \"127.0.0.1:{port}\"\n  }}\n}}\n",
        scope.name, image.name
    );
    let traffik = voodu_tests::rust_cdylib("voodu_traffik")
        .display()
        .to_string();
    let through = format!("http://127.0.0.1:{port}/");
    let run = plugins_test(&manifest, &[&traffik, "--through", &through, "-o", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let report = run.json();
    let steps: Vec<(String, String)> = report["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|step| {
            (
                step["name"].as_str().unwrap_or_default().to_owned(),
                step["outcome"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let web = format!("deployment/{}/web", scope.name);
    let names: Vec<&str> = steps.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "throwaway controller".to_owned(),
            "install".to_owned(),
            "apply".to_owned(),
            format!("load through {through}"),
            format!("rolling update of {web}"),
            format!("a replica of {web} killed"),
            format!("scale down of {web} by one replica"),
            format!("delete {web}"),
        ],
        "{report:#}"
    );
    assert!(
        steps.iter().all(|(_, outcome)| outcome == "pass"),
        "{report:#}"
    );
    // Each step under load counted requests, and none was lost where
    // none may be: a request in flight to the killed replica may die with
    // it (that step passes all the same), no other.
    for step in &report["steps"].as_array().expect("steps")[4..7] {
        assert!(step["requests"]["answered"].as_u64() > Some(0), "{step}");
        if !step["name"].as_str().unwrap_or_default().contains("killed") {
            assert_eq!(step["requests"]["failed"], 0, "{step}");
        }
    }
    assert!(
        report["requests"]["answered"].as_u64() > Some(0),
        "{report:#}"
    );
    let calls: Vec<&str> = report["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter_map(|figures| figures["call"].as_str())
        .collect();
    for call in ["validate", "publish", "drain", "forget"] {
        assert!(calls.contains(&call), "{call} not made: {report:#}");
    }
    assert!(
        scope.containers().is_empty(),
        "left on the engine: {:?}",
        scope.containers()
    );
}

#[test]
fn a_manifest_the_plugin_refuses_fails_the_apply_and_runs_nothing_after_it() {
    if !engine_available() {
        return;
    }
    let scope = Scope::new();
    let manifest = format!(
        "deployment \"{}\" \"web\" {{\n  image = \"never-run:1\"\n  ports = [\"8084\"]\n  echo_c {{ greeting = 12345 }}\n}}\n",
        scope.name
    );
    let run = plugins_test(&manifest, &[voodu_echo_c::PLUGIN_PATH]);
    assert_eq!(run.code, 1, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].starts_with("pass  throwaway controller"),
        "{run:?}"
    );
    assert!(lines[1].starts_with("pass  install"), "{run:?}");
    assert!(
        lines[2].starts_with("fail  apply") && lines[2].contains("greeting must be a string"),
        "{run:?}"
    );
    assert!(
        !run.stdout.contains("rolling update"),
        "nothing runs after a failed apply: {run:?}"
    );
    assert!(run.stdout.contains("3 step(s), 1 failed"), "{run:?}");
}

#[test]
fn a_call_the_plugin_fails_during_a_step_fails_that_step_naming_the_error() {
    if !engine_available() {
        return;
    }
    let image = EchoImage::import();
    let scope = Scope::new();
    let calls = tempfile::tempdir().expect("a directory");
    // The recorder fails every drain: the host goes on (the replica goes
    // when its budget is spent), but the plugin did not drain it.
    let manifest = format!(
        "deployment \"{}\" \"web\" {{\n  image    = \"{}\"\n  replicas = 2\n  ports    = [\"8084\"]\n  recorder {{\n    file  = \"{}\"\n    drain = \"fail\"\n  }}\n}}\n",
        scope.name,
        image.name,
        calls.path().join("calls.jsonl").display()
    );
    let recorder = voodu_tests::rust_cdylib("voodu_fixture_recorder")
        .display()
        .to_string();
    let run = plugins_test(&manifest, &[&recorder]);
    assert_eq!(run.code, 1, "{run:?}");
    let rolled = run
        .stdout
        .lines()
        .find(|line| line.contains("rolling update"))
        .unwrap_or_else(|| panic!("no rolling update step: {run:?}"));
    assert!(
        rolled.starts_with("fail  rolling update")
            && rolled.contains("but the plugin failed")
            && rolled.contains("failed in drain"),
        "{run:?}"
    );
    // A step in which it failed nothing passes.
    assert!(run.stdout.contains("pass  apply"), "{run:?}");
}
