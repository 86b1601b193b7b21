//! `vd plugins:check`: the conformance run of a plugin file, with no
//! controller and no Docker. The four samples pass it; every load-failure
//! and hostile fixture fails it at the check that names what is wrong, and
//! a plugin that crashes or calls exit() ends only the check's child.

use std::path::Path;

use serde_json::Value;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

/// `vd plugins:check FILE [ARGS]` as JSON, and its exit code.
fn check(file: &Path, args: &[&str]) -> (i32, Value) {
    let output = std::process::Command::new(vd::vd_binary())
        .arg("plugins:check")
        .arg(file)
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("vd runs");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "not JSON ({error}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), report)
}

/// The checks of a report with `outcome`, as `name: detail` lines.
fn with_outcome(report: &Value, outcome: &str) -> Vec<String> {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|check| check["outcome"] == outcome)
        .map(|check| {
            format!(
                "{}: {}",
                check["name"].as_str().unwrap_or_default(),
                check["detail"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// A block file holding `text`.
fn block_file(directory: &Path, text: &str) -> String {
    let path = directory.join("block.hcl");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn the_four_samples_pass_every_check() {
    let directory = tempfile::tempdir().unwrap();
    let config = directory.path().join("voodu.cfg");
    let samples = [
        (voodu_tests::rust_cdylib("voodu_echo"), String::new()),
        (
            Path::new(voodu_echo_c::PLUGIN_PATH).to_owned(),
            String::new(),
        ),
        (
            voodu_tests::rust_cdylib("voodu_traffik"),
            "traffik \"http\" {\n  port = 8084\n  bind = \"127.0.0.1:0\"\n}\n".to_owned(),
        ),
        (
            voodu_tests::rust_cdylib("voodu_haproxy"),
            format!(
                "haproxy \"web\" {{\n  port = 8084\n  config_path = \"{}\"\n}}\n",
                config.display()
            ),
        ),
    ];
    for (file, block) in samples {
        let args: Vec<String> = if block.is_empty() {
            Vec::new()
        } else {
            vec!["--block".into(), block_file(directory.path(), &block)]
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, report) = check(&file, &args);
        assert_eq!(code, 0, "{}: {report:#}", file.display());
        assert_eq!(report["failed"], 0, "{report:#}");
        assert_eq!(report["warnings"], 0, "{report:#}");
        let names: Vec<&str> = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|check| check["name"].as_str())
            .collect();
        for expected in [
            "load",
            "publish an empty set",
            "publish 1,000 endpoints",
            "publish with fields a newer host sends",
            "drain until drained",
            "forget again (idempotent)",
            "validate from 4 threads in turn",
            "validate a block with a 1 MiB string",
            "a refusal names the option at fault",
            "values the schema forbids are refused",
            "publish a set that lists a replica being drained",
            "publish an older generation after a newer one",
            "drain a replica never published",
            "forget a block while one of its replicas drains",
            "nothing left running after shutdown",
        ] {
            assert!(
                names.contains(&expected),
                "{}: no {expected:?} in {names:?}",
                file.display()
            );
        }
        assert!(
            names
                .iter()
                .any(|name| name.starts_with("normalising ") && name.ends_with(" is stable")),
            "{names:?}"
        );
    }
}

#[test]
fn each_load_failure_fixture_fails_the_load_check_with_the_installs_message() {
    for (fixture, says) in [
        (
            "wrong_abi",
            "built for voodu plugin ABI 2.0, but this host speaks ABI 1.x",
        ),
        ("no_entry", "no `voodu_plugin_entry_v1` symbol"),
        ("null_name", "invalid plugin name: the name is NULL"),
        ("empty_name", "invalid plugin name"),
        ("unlinked_cjson", "needs the symbol `cJSON_"),
    ] {
        let file = voodu_tests::c_fixture(fixture);
        let (code, report) = check(&file, &[]);
        assert_eq!(code, 1, "{fixture}: {report:#}");
        let failed = with_outcome(&report, "fail");
        assert_eq!(failed.len(), 1, "{fixture}: {failed:?}");
        assert!(failed[0].starts_with("load: "), "{fixture}: {failed:?}");
        assert!(failed[0].contains(says), "{fixture}: {failed:?}");
        // Named as given, never as the check's staged copy.
        assert!(
            failed[0].contains(&file.display().to_string()),
            "{failed:?}"
        );
    }
    let (code, report) = check(
        &voodu_tests::c_fixture("ctor_hang"),
        &["--plugin-timeout", "500ms"],
    );
    assert_eq!(code, 1);
    assert!(
        with_outcome(&report, "fail")[0].contains(
            "the library did not finish loading within 2s (a constructor that never returns?)"
        ),
        "{report:#}"
    );
    let not_a_library = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(not_a_library.path(), b"not an ELF file").unwrap();
    let (code, report) = check(not_a_library.path(), &[]);
    assert_eq!(code, 1);
    assert!(
        with_outcome(&report, "fail")[0].contains("not a loadable shared object"),
        "{report:#}"
    );
}

#[test]
fn each_hostile_fixture_fails_at_the_check_that_meets_its_fault() {
    let directory = tempfile::tempdir().unwrap();
    let exit_block = block_file(
        directory.path(),
        "exit_validate { mode = \"exit-in-validate\" }\n",
    );
    for (file, args, check_name, says) in [
        (
            voodu_tests::c_fixture("hang"),
            vec![],
            "validate the empty block",
            "did not answer validate within 500ms",
        ),
        (
            voodu_tests::c_fixture("bad_json"),
            vec![],
            "validate the empty block",
            "returned an invalid validate reply",
        ),
        (
            voodu_tests::c_fixture("huge_reply"),
            vec![],
            "validate the empty block",
            "over the 16777216-byte limit",
        ),
        (
            voodu_tests::c_fixture("bad_status"),
            vec![],
            "publish an empty set",
            "unknown status 42",
        ),
        (
            voodu_tests::c_fixture("hang_publish"),
            vec![],
            "publish an empty set",
            "did not answer publish within 500ms",
        ),
        (
            voodu_tests::c_fixture("hang_drain"),
            vec![],
            "drain until drained",
            "did not answer drain within 500ms",
        ),
        (
            voodu_tests::c_fixture("segv"),
            vec![],
            "publish an empty set",
            "the plugin ended the process: killed by signal 11 (SIGSEGV)",
        ),
        (
            voodu_tests::c_fixture("exit_validate"),
            vec!["--block", exit_block.as_str()],
            "validate exit_validate",
            "the plugin ended the process: it exited with code 3",
        ),
        (
            voodu_tests::rust_cdylib("voodu_fixture_panicky"),
            vec![],
            "validate the empty block",
            "panicked in validate",
        ),
    ] {
        let mut args = args;
        args.extend(["--plugin-timeout", "500ms"]);
        let (code, report) = check(&file, &args);
        let shown = file.display();
        assert_eq!(code, 1, "{shown}: {report:#}");
        let failed = with_outcome(&report, "fail");
        let expected = format!("{check_name}: ");
        assert!(
            failed
                .first()
                .is_some_and(|first| first.starts_with(&expected) && first.contains(says)),
            "{shown}: the first failure is not {check_name:?} saying {says:?}: {failed:#?}"
        );
        assert_eq!(
            report["passed"].as_u64().unwrap()
                + report["warnings"].as_u64().unwrap()
                + report["failed"].as_u64().unwrap(),
            report["checks"].as_array().unwrap().len() as u64
        );
    }
}

#[test]
fn the_text_report_has_a_line_per_check_and_a_summary() {
    let output = std::process::Command::new(vd::vd_binary())
        .arg("plugins:check")
        .arg(voodu_echo_c::PLUGIN_PATH)
        .env("NO_COLOR", "1")
        .output()
        .expect("vd runs");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("pass  load: echo_c 1.0.0 (C plugin, ABI 1.3)"),
        "{text}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|last| last.ends_with(": 23 passed, 0 warning(s), 0 failed")),
        "{text}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.starts_with("pass  "))
            .count(),
        23,
        "{text}"
    );
}

#[test]
fn under_valgrind_a_clean_plugin_passes_and_one_that_leaks_and_reads_past_its_buffer_fails() {
    // On CI a missing valgrind fails here (tests/run --setup installs it).
    if !engine::tool_available("valgrind") {
        return;
    }
    let (code, report) = check(Path::new(voodu_echo_c::PLUGIN_PATH), &["--valgrind"]);
    assert_eq!(code, 0, "{report:#}");
    let passed = with_outcome(&report, "pass");
    assert!(
        passed.iter().any(|line| line
            .starts_with("valgrind: no leak and no invalid access: ERROR SUMMARY: 0 errors")),
        "{passed:?}"
    );
    let leaky = voodu_tests::c_fixture("leak_publish");
    let (code, report) = check(&leaky, &["--valgrind"]);
    assert_eq!(code, 1, "{report:#}");
    let failed = with_outcome(&report, "fail");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].starts_with("valgrind: no leak and no invalid access: ERROR SUMMARY: ")
            && failed[0].contains("definitely lost: ")
            && failed[0].contains("Invalid read of size 1")
            && failed[0].contains("fixture_publish"),
        "{failed:?}"
    );
    // Without --valgrind, nothing in its replies is wrong.
    let (code, _) = check(&leaky, &[]);
    assert_eq!(code, 0);
}

#[test]
fn a_schema_voodu_cannot_read_fails_the_describe_check_naming_the_option() {
    let (code, report) = check(&voodu_tests::c_fixture("bad_schema"), &[]);
    assert_eq!(code, 1, "{report:#}");
    let failed = with_outcome(&report, "fail");
    assert_eq!(
        failed,
        ["describe: the schema is not one voodu reads: option port has no \"description\""],
        "{report:#}"
    );
    // A plugin that describes nothing is warned, not failed.
    let (code, report) = check(&voodu_tests::c_fixture("leak_publish"), &[]);
    assert_eq!(code, 0, "{report:#}");
    assert!(
        with_outcome(&report, "warn")
            .iter()
            .any(|line| line.starts_with("describe: the plugin describes no options")),
        "{report:#}"
    );
}

#[test]
fn a_refusal_of_one_option_that_does_not_name_it_is_warned_with_the_fix() {
    let (code, report) = check(&voodu_tests::c_fixture("refuses_unnamed"), &[]);
    assert_eq!(code, 0, "{report:#}");
    let warned = with_outcome(&report, "warn");
    assert!(
        warned.iter().any(|line| line.starts_with(
            "a refusal names the option at fault: port = \"not a number\" refused without naming the option"
        )),
        "{report:#}"
    );
}

#[test]
fn a_plugin_that_accepts_what_its_schema_forbids_fails_naming_each_value() {
    let (code, report) = check(&voodu_tests::c_fixture("accepts_forbidden"), &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        with_outcome(&report, "fail"),
        ["values the schema forbids are refused: accepted what the schema forbids: port = 0 (below its minimum 1); port = 65536 (above its maximum 65535); port = \"not a number\" (not an integer)"],
        "{report:#}"
    );
}

#[test]
fn the_orders_of_calls_a_live_controller_makes_fail_a_plugin_that_breaks_on_them() {
    let (code, report) = check(&voodu_tests::c_fixture("strict_state"), &[]);
    assert_eq!(code, 1, "{report:#}");
    let failed = with_outcome(&report, "fail");
    assert!(
        failed.iter().any(|line| line.starts_with(
            "publish a set that lists a replica being drained: plugin strict_state failed in publish: the set lists a replica that is draining"
        )),
        "{report:#}"
    );
    assert!(
        failed.iter().any(|line| line.starts_with(
            "drain a replica never published: plugin strict_state failed in drain: unknown replica"
        )),
        "{report:#}"
    );
    assert!(
        with_outcome(&report, "warn").iter().any(|line| line.starts_with(
            "forget a block while one of its replicas drains: acknowledged, but a drain after it failed"
        )),
        "{report:#}"
    );
    assert!(
        with_outcome(&report, "pass")
            .iter()
            .any(|line| line.starts_with("publish an older generation after a newer one")),
        "{report:#}"
    );
}

#[test]
fn a_process_and_a_listener_left_after_shutdown_are_named_and_the_plugin_is_given_a_scratch_directory_and_ports(
) {
    let (code, report) = check(&voodu_tests::c_fixture("leaves_behind"), &[]);
    assert_eq!(code, 0, "{report:#}");
    // Its publishes pass: the check set both variables, and the port it
    // named was free.
    assert!(
        with_outcome(&report, "pass")
            .iter()
            .any(|line| line.starts_with("publish one endpoint")),
        "{report:#}"
    );
    let warned = with_outcome(&report, "warn");
    let left = warned
        .iter()
        .find(|line| line.starts_with("nothing left running after shutdown: "))
        .unwrap_or_else(|| panic!("{report:#}"));
    assert!(
        left.contains("processes still running: pid ")
            && left.contains("(sleep)")
            && left.contains("sockets still listening: 127.0.0.1:"),
        "{left}"
    );
}

#[test]
fn a_normalised_spec_that_changes_a_number_or_a_value_written_is_warned_naming_each() {
    let directory = tempfile::tempdir().unwrap();
    let blocks = block_file(
        directory.path(),
        "changes_values \"a\" {\n  count    = 9007199254740993\n  greeting = \"hi\"\n}\n",
    );
    let (code, report) = check(
        &voodu_tests::c_fixture("changes_values"),
        &["--block", &blocks],
    );
    let warned = with_outcome(&report, "warn");
    assert!(
        warned.iter().any(|line| line
            == "values in changes_values \"a\" survive validate: the normalised spec changes what the operator wrote: /count: 9007199254740993 became 9007199254740992, /greeting: \"hi\" became \"HI\""),
        "{warned:?}"
    );
    // A warning, not a failure; only the stability check may fail (the
    // fixture normalises every spec to the same one, which is stable).
    assert_eq!(code, 0, "{report:#}");
}

#[test]
fn a_plugin_whose_configure_refuses_no_settings_fails_the_settings_check() {
    let (code, report) = check(&voodu_tests::c_fixture("refuses_settings"), &[]);
    assert_eq!(code, 1, "{report:#}");
    let failed = with_outcome(&report, "fail");
    assert_eq!(failed.len(), 1, "{report:#}");
    assert!(
        failed[0].starts_with("settings: configure refused no settings ({})")
            && failed[0].contains("binary is required"),
        "{report:#}"
    );
    // traffik's and haproxy's settings pass, naming them.
    let (code, report) = check(&voodu_tests::rust_cdylib("voodu_traffik"), &[]);
    assert_eq!(code, 0, "{report:#}");
    assert!(
        with_outcome(&report, "pass").iter().any(|line| line
            == "settings: 1 setting(s) (default_bind_host); configure takes none given ({})"),
        "{report:#}"
    );
}
