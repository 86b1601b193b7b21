//! The apply half of voodu end to end: the real `vd` binary against a real
//! controller on a temporary root, with the sample plugins installed through
//! `vd plugins:install`.

use serde_json::{json, Value};
use vd::Controller;
use voodu_tests::rust_cdylib;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

fn echo_rust() -> String {
    rust_cdylib("voodu_echo").display().to_string()
}

fn echo_c() -> String {
    voodu_echo_c::PLUGIN_PATH.to_owned()
}

/// A controller with both echo samples installed.
fn controller_with_echo_plugins() -> Controller {
    let controller = Controller::start();
    controller.vd(&["plugins:install", &echo_rust()]).success();
    controller.vd(&["plugins:install", &echo_c()]).success();
    controller
}

fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter_map(|line| line.strip_prefix("error: "))
        .collect()
}

#[test]
fn a_refused_block_and_a_missing_plugin_print_the_seeds_messages_and_store_nothing() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        r#"deployment "prod" "esl" {
  image    = "ghcr.io/acme/esl:1.2"
  replicas = 3
  ports    = ["8084"]

  echo "http" { greeting = 42 }
  traffik { port = 8084 }
  probs { path = "/health" }
}
"#,
    );
    let run = controller.vd(&["apply", "-f", &file]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        error_lines(&run.stderr),
        [
            "deployment/prod/esl: echo \"http\" block: greeting must be a string, not 42",
            "deployment/prod/esl: block \"traffik\" belongs to a plugin named \"traffik\", which is not installed — run `vd plugins:install <source>` or remove the block",
            "deployment/prod/esl: block \"probs\" belongs to a plugin named \"probs\", which is not installed — run `vd plugins:install <source>` or remove the block (did you mean the core block \"probes\"?)",
            "apply refused: 3 problems found, nothing was stored",
        ],
        "{run:?}"
    );
    // Each problem points at its block, or at the option the plugin's
    // refusal names (echo names `/greeting`: its value, column 17).
    for line in [
        "  --> esl.hcl:6:17",
        "  --> esl.hcl:7:3",
        "  --> esl.hcl:8:3",
    ] {
        assert!(
            run.stderr.lines().any(|l| l == line),
            "{line} missing: {}",
            run.stderr
        );
    }
    let describe = controller.vd(&["describe", "deployment/prod/esl"]);
    assert_eq!(describe.code, 1);
    assert!(
        describe
            .stderr
            .contains("deployment/prod/esl: no such workload"),
        "{describe:?}"
    );
    // The refusal is the same in JSON, with locations.
    let json = controller.vd(&["apply", "-f", &file, "-o", "json"]).json();
    assert_eq!(json["diagnostics"][0]["workload"], "deployment/prod/esl");
    assert_eq!(
        json["diagnostics"][0]["location"],
        json!({"file": "esl.hcl", "line": 6, "column": 17})
    );
}

#[test]
fn blocks_keep_source_order_across_interleaved_types() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        r#"deployment "prod" "esl" {
  image = "esl:1"
  ports = ["8084"]
  echo "b" {}
  echo_c "y" {}
  probes {
    readiness {
      http_get { path = "/" }
    }
  }
  echo "a" {}
  echo_c "x" {}
}
"#,
    );
    controller.vd(&["apply", "-f", &file]).success();
    let described = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    let order: Vec<String> = described["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|block| {
            format!(
                "{} {}",
                block["type"].as_str().unwrap(),
                block["labels"][0].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(order, ["echo b", "echo_c y", "echo a", "echo_c x"]);
    // The core block stays in the core spec, with its defaults filled in,
    // and never reached a plugin.
    assert_eq!(
        described["core_spec"]["probes"],
        json!({"readiness": {"http_get": {"path": "/", "port": 8084}, "period": "10s", "timeout": "1s",
               "failure_threshold": 3, "success_threshold": 1, "initial_delay": "0s"}})
    );
}

#[test]
fn two_blocks_with_the_same_type_and_labels_are_refused_naming_both_lines() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "dup.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  echo \"sip\" {}\n  echo \"sip\" {}\n  echo_c {}\n  echo_c {}\n}\n",
    );
    let run = controller.vd(&["apply", "-f", &file]);
    assert_eq!(run.code, 1);
    assert_eq!(
        error_lines(&run.stderr)[..2],
        [
            "deployment/prod/esl: two echo \"sip\" blocks, at dup.hcl:3:3 and at dup.hcl:4:3 — give each block its own label",
            "deployment/prod/esl: two echo_c blocks, at dup.hcl:5:3 and at dup.hcl:6:3 — blocks of one type need labels to tell them apart: echo_c \"a\" { ... } and echo_c \"b\" { ... }",
        ],
        "{run:?}"
    );
}

#[test]
fn an_apply_of_two_files_with_one_refused_leaves_the_store_unchanged() {
    let controller = controller_with_echo_plugins();
    let api = |replicas: u32| {
        format!("deployment \"prod\" \"api\" {{\n  image = \"api:1\"\n  ports = [\"8084\"]\n  replicas = {replicas}\n  echo {{}}\n}}\n")
    };
    controller.manifest("first/api.hcl", &api(1));
    controller.vd(&["apply", "-f", "first"]).success();
    let before = controller
        .vd(&["get", "workloads", "-o", "json"])
        .success()
        .json();

    controller.manifest("second/a-api.hcl", &api(5));
    controller.manifest(
        "second/b-web.hcl",
        "deployment \"prod\" \"web\" {\n  image = \"web:1\"\n  ports = [\"8084\"]\n  echo { greeting = [\"not\", \"a\", \"string\"] }\n}\n",
    );
    let run = controller.vd(&["apply", "-f", "second"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .contains("deployment/prod/web: echo block: greeting must be a string"),
        "{run:?}"
    );

    let after = controller
        .vd(&["get", "workloads", "-o", "json"])
        .success()
        .json();
    assert_eq!(before, after, "a refused apply changed the store");
    let api_now = controller
        .vd(&["describe", "deployment/prod/api", "-o", "json"])
        .success()
        .json();
    assert_eq!(api_now["revision"], 1);
    assert_eq!(api_now["core_spec"]["replicas"], 1);
    // The refusal is recorded as an event of the workload it concerns.
    let web_events = controller.vd(&["describe", "deployment/prod/web"]);
    assert_eq!(web_events.code, 1, "web was never stored");
}

#[test]
fn reapplying_an_unchanged_manifest_changes_nothing_and_says_so() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.vd",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo {}\n}\n",
    );
    let first = controller.vd(&["apply", "-f", &file]).success();
    assert!(
        first
            .stdout
            .contains("deployment/prod/esl: created (revision 1, with echo block)"),
        "{first:?}"
    );
    let again = controller.vd(&["apply", "-f", &file]).success();
    assert_eq!(
        again.stdout,
        "deployment/prod/esl: unchanged (revision 1, with echo block)\nnothing changed: 1 workload(s) already match what is stored\n"
    );
    let described = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    assert_eq!(described["revision"], 1);
}

#[test]
fn describe_shows_the_normalised_spec_with_the_plugins_defaults() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\", \"9090\"]\n  echo \"http\" {}\n  echo_c { greeting = \"hi\" }\n}\n",
    );
    controller.vd(&["apply", "-f", &file]).success();
    let described = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    assert_eq!(
        described["blocks"],
        json!([
            {"type": "echo", "labels": ["http"], "spec": {"greeting": "hello"},
             "endpoints": {"port": 8084, "addressing": "ip"}},
            {"type": "echo_c", "spec": {"greeting": "hi"},
             "endpoints": {"port": 8084, "addressing": "ip"}},
        ])
    );
    assert_eq!(described["core_spec"]["replicas"], 1);
    assert_eq!(described["core_spec"]["drain_timeout"], "30s");
    let events: Vec<&str> = described["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["message"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["created revision 1"]);
    let text = controller
        .vd(&["describe", "deployment/prod/esl"])
        .success();
    assert!(
        text.stdout
            .contains("  1. echo \"http\" block\n       spec       {\"greeting\":\"hello\"}"),
        "{text:?}"
    );
}

#[test]
fn delete_and_dropped_blocks_are_forgotten_by_their_plugin() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo \"sip\" {}\n  echo \"http\" {}\n}\n",
    );
    controller.vd(&["apply", "-f", &file]).success();
    // Dropping a block on re-apply forgets that block only.
    controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo \"http\" {}\n}\n",
    );
    controller.vd(&["apply", "-f", &file]).success();
    controller.wait_for_log("forgot the echo \"sip\" block of deployment/prod/esl");
    assert!(!controller
        .log_text()
        .contains("forgot the echo \"http\" block"));

    let deleted = controller.vd(&["delete", "deployment/prod/esl"]).success();
    assert_eq!(
        deleted.stdout,
        "deployment/prod/esl: deleted; forgotten by their plugins: echo \"http\" block\n"
    );
    controller.wait_for_log("forgot the echo \"http\" block of deployment/prod/esl");
    let gone = controller.vd(&["describe", "deployment/prod/esl"]);
    assert_eq!(gone.code, 1);
    let again = controller.vd(&["delete", "deployment/prod/esl"]);
    assert_eq!(again.code, 1);
    assert!(again
        .stderr
        .contains("deployment/prod/esl: no such workload"));
}

#[test]
fn plugins_install_list_and_remove() {
    let controller = Controller::start();
    let empty = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    assert_eq!(empty["plugins"], json!([]));

    let installed = controller.vd(&["plugins:install", &echo_rust()]).success();
    assert!(
        installed
            .stdout
            .starts_with("installed plugin echo 1.0.0 (Rust plugin, ABI 1.3) at "),
        "{installed:?}"
    );
    controller.vd(&["plugins:install", &echo_c()]).success();

    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    let plugins = listed["plugins"].as_array().unwrap();
    let row = |name: &str| {
        plugins
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(row("echo")["kind"], "Rust");
    assert_eq!(row("echo_c")["kind"], "C");
    assert_eq!(row("echo")["abi"], "1.3");
    assert_eq!(row("echo")["version"], "1.0.0");
    let installed_path = controller.root().join("plugins/echo/libvoodu_echo.so");
    assert_eq!(row("echo")["path"], installed_path.display().to_string());
    assert!(installed_path.exists());
    // No staging directory is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(controller.root().join("plugins"))
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A second install of the same name needs --replace.
    let twice = controller.vd(&["plugins:install", &echo_rust()]);
    assert_eq!(twice.code, 1);
    assert!(twice.stderr.contains("a plugin named \"echo\" is installed already (version 1.0.0) — run `vd plugins:install --replace"), "{twice:?}");
    // Refused by its name before its init ran: one instance was started,
    // the installed one.
    let started = controller
        .log_text()
        .lines()
        .filter(|line| line.contains("plugin loaded") && line.contains("plugin=echo "))
        .count();
    assert_eq!(started, 1, "{}", controller.log_text());
    let replaced = controller
        .vd(&["plugins:install", "--replace", &echo_rust()])
        .success();
    assert!(
        replaced.stdout.contains(", replacing 1.0.0 at "),
        "{replaced:?}"
    );

    // A file that is not a plugin is refused and nothing is installed.
    let junk = controller.manifest("junk.so", "not a shared object");
    let refused = controller.vd(&["plugins:install", &junk]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.starts_with("error: plugins:install: "),
        "{refused:?}"
    );

    // Remove is refused while a workload uses the plugin, naming it.
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo {}\n}\n",
    );
    controller.vd(&["apply", "-f", &file]).success();
    let busy = controller.vd(&["plugins:remove", "echo"]);
    assert_eq!(busy.code, 1);
    assert_eq!(
        error_lines(&busy.stderr),
        ["plugins:remove: plugin \"echo\" is still used by deployment/prod/esl — remove its blocks from that workload or delete it first"]
    );
    controller.vd(&["delete", "deployment/prod/esl"]).success();
    controller.vd(&["plugins:remove", "echo"]).success();
    assert!(!installed_path.exists());
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    let names: Vec<&str> = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo_c"]);
    let unknown = controller.vd(&["plugins:remove", "echo"]);
    assert_eq!(unknown.code, 1);
    assert!(
        unknown
            .stderr
            .contains("no plugin named \"echo\" is installed"),
        "{unknown:?}"
    );
}

#[test]
fn installed_plugins_load_at_start_and_a_broken_one_does_not_stop_the_others() {
    let mut controller = controller_with_echo_plugins();
    // Plant a plugin whose ABI is wrong, as if installed by an older voodu.
    let broken = controller.root().join("plugins/wrong_abi");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(
        voodu_tests::c_fixture("wrong_abi"),
        broken.join("libwrong_abi.so"),
    )
    .unwrap();
    controller.restart();
    let listed = controller.vd(&["plugins:list"]).success();
    assert!(listed.stdout.contains("echo    1.0.0"), "{listed:?}");
    assert!(listed.stdout.contains("echo_c  1.0.0"), "{listed:?}");
    assert!(
        listed.stderr.contains("wrong_abi did not load: "),
        "{listed:?}"
    );
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo {}\n}\n",
    );
    controller.vd(&["apply", "-f", &file]).success();
}

#[test]
fn the_store_survives_a_controller_restart() {
    let mut controller = controller_with_echo_plugins();
    let file = controller.manifest("esl.hcl", "statefulset \"db\" \"pg\" {\n  image = \"pg:16\"\n  ports = [\"5432\"]\n  volume_claim \"data\" {\n    mount_path = \"/var/lib/postgresql/data\"\n    size       = \"1Gi\"\n  }\n  echo {}\n}\n");
    controller.vd(&["apply", "-f", &file]).success();
    controller.restart();
    let listed = controller
        .vd(&["get", "statefulsets", "-o", "json"])
        .success()
        .json();
    assert_eq!(
        listed["workloads"][0]["id"],
        json!({"kind": "statefulset", "scope": "db", "name": "pg"})
    );
    let again = controller.vd(&["apply", "-f", &file]).success();
    assert!(again.stdout.contains("unchanged (revision 1"), "{again:?}");
}

#[test]
fn parse_errors_name_the_file_line_and_column() {
    let controller = Controller::start();
    controller.manifest(
        "m/a.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  replicas = \"three\"\n}\n",
    );
    controller.manifest("m/b.hcl", "deployment \"prod\" \"web\" {\n  image = \n}\n");
    let run = controller.vd(&["apply", "-f", "m"]);
    assert_eq!(run.code, 1);
    let errors = error_lines(&run.stderr);
    assert_eq!(errors[0], "deployment/prod/esl: attribute \"replicas\" must be a whole number from 0 to 1000, not the string \"three\" — write replicas = 3");
    assert!(run.stderr.contains("  --> m/a.hcl:3:14"), "{run:?}");
    assert!(
        errors[1].starts_with("m/b.hcl:2:11: HCL syntax error: "),
        "{run:?}"
    );
    assert_eq!(
        errors[2],
        "apply refused: 2 problems found, nothing was stored"
    );
}

#[test]
fn without_a_controller_the_cli_says_how_to_start_one() {
    let root = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(vd::vd_binary())
        .args(["get", "deployments"])
        .env("VOODU_ROOT", root.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: no controller is running on {}",
            root.path().display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "start one with `vd controller --root {}`",
            root.path().display()
        )),
        "{stderr}"
    );
}

#[test]
fn the_root_and_socket_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let controller = Controller::start();
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(controller.root()), 0o700);
    assert_eq!(mode(&controller.root().join("controller.sock")), 0o600);
    // A second controller on the same root is refused.
    let second = std::process::Command::new(vd::vd_binary())
        .args(["controller", "--root"])
        .arg(controller.root())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&second.stderr)
        .contains("another controller is already running on"));
}

#[test]
fn workloads_whose_container_names_would_clash_are_refused() {
    let controller = controller_with_echo_plugins();
    let first = controller.manifest(
        "a.hcl",
        "deployment \"a-b\" \"c\" {\n  image = \"x:1\"\n}\n",
    );
    controller.vd(&["apply", "-f", &first]).success();
    let second = controller.manifest(
        "b.hcl",
        "deployment \"a\" \"b-c\" {\n  image = \"x:1\"\n}\nstatefulset \"a-b\" \"c\" {\n  image = \"x:1\"\n}\n",
    );
    let run = controller.vd(&["apply", "-f", &second]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        error_lines(&run.stderr)[..2],
        [
            "deployment/a/b-c: its containers would be named a-b-c.<replica>, as those of deployment/a-b/c are — rename one of them",
            "statefulset/a-b/c: its containers would be named a-b-c.<replica>, as those of deployment/a-b/c are — rename one of them",
        ],
        "{run:?}"
    );
}

fn versioned(version: u8) -> String {
    voodu_tests::c_fixture(&format!("versioned_v{version}"))
        .display()
        .to_string()
}

#[test]
fn replacing_a_plugin_revalidates_every_stored_block_all_or_nothing() {
    let controller = Controller::start();
    controller.vd(&["plugins:install", &versioned(1)]).success();
    let workload = |name: &str, block: &str| {
        format!(
            "deployment \"t\" \"{name}\" {{\n  image = \"esl:1\"\n  ports = [\"8080\"]\n  {block}\n}}\n"
        )
    };
    let file = controller.manifest(
        "all.hcl",
        &[
            workload("a", "versioned { legacy = true }"),
            workload("b", "versioned \"x\" { mode = \"loose\" }"),
            workload("c", "versioned { size = 1 }"),
            workload("d", "versioned \"y\" { legacy = true }"),
        ]
        .concat(),
    );
    controller.vd(&["apply", "-f", &file]).success();

    // Version 2 refuses a's and d's stored blocks: nothing changes, and
    // each refusal names its workload and block.
    let refused = controller.vd(&["plugins:install", "--replace", &versioned(2)]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert_eq!(
        error_lines(&refused.stderr),
        [
            "deployment/t/a: versioned block: legacy is gone in versioned 2.0.0 - remove it (as stored; refused by versioned 2.0.0)",
            "deployment/t/d: versioned \"y\" block: legacy is gone in versioned 2.0.0 - remove it (as stored; refused by versioned 2.0.0)",
            "plugins:install: the new version refused 2 stored blocks; nothing changed — fix them and apply, or keep the installed version",
        ],
        "{refused:?}"
    );
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    assert_eq!(listed["plugins"][0]["version"], "1.0.0");
    let c = controller
        .vd(&["describe", "deployment/t/c", "-o", "json"])
        .success()
        .json();
    assert_eq!(c["revision"], 1);
    assert_eq!(c["blocks"][0]["spec"], json!({"size": 1}));

    // Without the legacy attribute, version 2 goes live, and stores its
    // normalisation as a new revision only where it differs.
    let file = controller.manifest(
        "all.hcl",
        &[
            workload("a", "versioned {}"),
            workload("b", "versioned \"x\" { mode = \"loose\" }"),
            workload("c", "versioned { size = 1 }"),
            workload("d", "versioned \"y\" { mode = \"strict\" }"),
        ]
        .concat(),
    );
    controller.vd(&["apply", "-f", &file]).success();
    let replaced = controller
        .vd(&["plugins:install", "--replace", &versioned(2)])
        .success();
    assert!(replaced.stdout.contains("replacing 1.0.0"), "{replaced:?}");
    assert!(
        replaced
            .stdout
            .contains("deployment/t/c: blocks normalised anew by versioned 2.0.0"),
        "{replaced:?}"
    );
    let describe = |name: &str| {
        controller
            .vd(&["describe", &format!("deployment/t/{name}"), "-o", "json"])
            .success()
            .json()
    };
    let (a, b, c, d) = (describe("a"), describe("b"), describe("c"), describe("d"));
    assert_eq!(c["revision"], 2);
    assert_eq!(c["blocks"][0]["spec"], json!({"size": 1, "mode": "strict"}));
    assert_eq!(a["revision"], 3);
    assert_eq!(b["revision"], 1, "b already had its mode");
    assert_eq!(d["revision"], 2, "d's re-apply gave it its mode");
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    assert_eq!(listed["plugins"][0]["version"], "2.0.0");
    // The replaced instance was shut down; the refused version 2 of the
    // first try was shut down too, and the new one is still running.
    controller.wait_for_log("versioned 1.0.0 shut down");
    assert_eq!(
        controller
            .log_text()
            .matches("versioned 2.0.0 shut down")
            .count(),
        1,
        "only the refused candidate is shut down, not the live one: {}",
        controller.log_text()
    );
}

#[test]
fn the_plugin_receives_the_body_as_written_nested_blocks_and_key_order_included() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        r#"deployment "prod" "esl" {
  image = "esl:1"
  ports = ["8084"]
  echo "🦀 crab" {
    zeta       = 1
    alpha      = { file = "f", addressing = "dns" }
    rule       = 1
    rule "x" { y = 1 }
    health { path = "/" }
    rule { x = 5 }
    rule "x" "w" { y = 2 }
    big        = 18446744073709551615
    small      = -9223372036854775808
    fraction   = 0.1
  }
}
"#,
    );
    controller.vd(&["apply", "-f", &file]).success();
    let described = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    let block = &described["blocks"][0];
    assert_eq!(block["labels"], json!(["🦀 crab"]));
    // Compared as text: the order of keys is part of what is checked.
    assert_eq!(
        serde_json::to_string(&block["spec"]).unwrap(),
        concat!(
            r#"{"zeta":1,"alpha":{"file":"f","addressing":"dns"},"rule":1,"#,
            r#""big":18446744073709551615,"small":-9223372036854775808,"fraction":0.1,"#,
            r#""@blocks":[{"type":"rule","labels":["x"],"spec":{"y":1}},"#,
            r#"{"type":"health","spec":{"path":"/"}},"#,
            r#"{"type":"rule","spec":{"x":5}},"#,
            r#"{"type":"rule","labels":["x","w"],"spec":{"y":2}}],"#,
            r#""greeting":"hello"}"#
        )
    );
    // The text form keeps the order too.
    let text = controller
        .vd(&["describe", "deployment/prod/esl"])
        .success();
    let zeta = text.stdout.find("zeta").expect("zeta shown");
    let alpha = text.stdout.find("alpha").expect("alpha shown");
    assert!(zeta < alpha, "{}", text.stdout);
}

#[test]
fn numbers_that_json_cannot_carry_exactly_are_refused_where_they_are_written() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo {\n    a = 1/0\n    b = 18446744073709551616\n    c = 1e-400\n    d = 0/0\n  }\n}\n",
    );
    let run = controller.vd(&["apply", "-f", &file]);
    assert_eq!(run.code, 1, "{run:?}");
    let errors = error_lines(&run.stderr);
    assert_eq!(errors.len(), 5, "{run:?}");
    assert!(
        errors[0].starts_with("deployment/prod/esl: echo block: attribute \"a\": division by zero")
    );
    assert!(errors[1].contains(
        "the integer 18446744073709551616 is outside the integers voodu carries exactly"
    ));
    assert!(errors[2]
        .contains("the number 1e-400 is too small for a 64-bit float and would arrive as 0"));
    assert!(errors[3].contains("attribute \"d\": division by zero"));
    for (line, column) in [(5, 9), (6, 9), (7, 9), (8, 9)] {
        let at = format!("  --> esl.hcl:{line}:{column}");
        assert!(
            run.stderr.lines().any(|l| l == at),
            "{at} missing: {}",
            run.stderr
        );
    }
    let huge = controller.manifest(
        "huge.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  echo { a = 1e309 }\n}\n",
    );
    let run = controller.vd(&["apply", "-f", &huge]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .contains("the number 1e309 is larger than the largest 64-bit float"),
        "{run:?}"
    );
    assert!(
        run.stderr.contains("huge.hcl:3:14: the number 1e309"),
        "{run:?}"
    );
}

#[test]
fn a_core_spec_error_and_a_plugin_refusal_are_reported_in_one_round() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  replicas = \"three\"\n  echo \"🦀 crab 👩\u{200d}👩\u{200d}👧\" { greeting = 42 }\n}\n",
    );
    let run = controller.vd(&["apply", "-f", &file]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        error_lines(&run.stderr),
        [
            "deployment/prod/esl: attribute \"replicas\" must be a whole number from 0 to 1000, not the string \"three\" — write replicas = 3",
            "deployment/prod/esl: echo \"🦀 crab 👩\u{200d}👩\u{200d}👧\" block: greeting must be a string, not 42",
            "apply refused: 2 problems found, nothing was stored",
        ]
    );
}

#[test]
fn a_block_with_no_port_to_publish_is_refused_with_the_fix() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  echo \"http\" {}\n}\n",
    );
    let run = controller.vd(&["apply", "-f", &file]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        error_lines(&run.stderr)[0],
        "deployment/prod/esl: echo \"http\" block: no port to publish to the echo plugin — the workload has no ports and the plugin named none; add ports = [\"8080\"] to the workload, or give the block the port the plugin's options take"
    );
    assert!(run.stderr.contains("  --> esl.hcl:3:3"), "{run:?}");
}

#[test]
fn bad_arguments_exit_2_and_usage_shows_the_root_as_optional() {
    let controller = Controller::start();
    for args in [
        &["get", "foo"][..],
        &["describe", "hcjob/web"],
        &["delete", "deployment/esl"],
        &["get", "pods", "pod/a/b"],
        &["apply"],
    ] {
        let run = controller.vd(args);
        assert_eq!(run.code, 2, "vd {args:?}: {run:?}");
    }
    let run = controller.vd(&["apply"]);
    let usage = run
        .stderr
        .lines()
        .find(|line| line.starts_with("Usage:"))
        .expect("a usage line");
    assert!(
        usage.ends_with(" apply --file <PATH>..."),
        "--root is optional, so the usage line does not show it: {usage}"
    );
    let run = controller.vd(&["describe", "hcjob/web"]);
    assert!(
        run.stderr
            .contains("write it as KIND/SCOPE/NAME, for example deployment/prod/esl"),
        "{run:?}"
    );
}

#[test]
fn core_blocks_that_are_not_acted_on_are_warned_about_at_apply_and_in_describe() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  health_check = \"/health\"\n  autoscale {\n    min        = 2\n    max        = 3\n    cpu_target = 60\n  }\n  resources {\n    limits { memory = \"64Mi\" }\n    requests { cpu = \"250m\" }\n  }\n  init \"migrate\" { command = [\"m\"] }\n  on_deploy {\n    success { url = \"https://hooks.example.com/deployed\" }\n  }\n}\n",
    );
    let applied = controller.vd(&["apply", "-f", &file]).success();
    let warnings: Vec<&str> = applied
        .stderr
        .lines()
        .filter_map(|line| line.strip_prefix("warning: "))
        .collect();
    assert_eq!(
        warnings,
        [
            "deployment/prod/esl: `autoscale` block is stored but not acted on by this voodu",
            "deployment/prod/esl: `health_check` is stored but not acted on by this voodu",
            "deployment/prod/esl: `resources.requests` block is stored but not acted on by this voodu",
        ],
        "resources' limits, init and on_deploy are acted on, so they are not warned about: {applied:?}"
    );
    // Each at its place: the attribute, the block, the requests inside
    // resources.
    for at in ["esl.hcl:4:3", "esl.hcl:5:3", "esl.hcl:12:5"] {
        assert!(
            applied.stderr.contains(&format!("  --> {at}")),
            "{at}: {applied:?}"
        );
    }
    let as_json = controller
        .vd(&["apply", "-o", "json", "-f", &file])
        .success()
        .json();
    assert_eq!(
        as_json["warnings"].as_array().map(Vec::len),
        Some(3),
        "the same warnings in JSON: {as_json}"
    );
    let described = controller
        .vd(&["describe", "deployment/prod/esl"])
        .success();
    assert!(
        described
            .stdout
            .contains("warning: `autoscale` block is stored but not acted on by this voodu"),
        "{described:?}"
    );
    let json = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    assert_eq!(json["not_acted_on"].as_array().unwrap().len(), 3);

    // A wrong limit is refused with the fix.
    let bad = controller.manifest(
        "bad.hcl",
        "deployment \"prod\" \"bad\" {\n  image = \"esl:1\"\n  resources {\n    limits { memory = \"lots\" }\n  }\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &bad]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("resources.limits: memory must be a size such as \"512Mi\""),
        "{refused:?}"
    );
}

#[test]
fn version_names_the_cli_the_controller_the_plugin_abi_and_the_worker() {
    let controller = Controller::start();
    let text = controller.vd(&["version"]).success();
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{text:?}");
    assert!(
        lines[2].starts_with(&format!(
            "worker     pid {} ({}, voodu 1.0.0), started ",
            controller.pid(),
            vd::vd_binary().display()
        )) && lines[2].ends_with(&format!("supervisor pid {}", controller.supervisor_pid())),
        "{text:?}"
    );
    assert!(
        lines[0].starts_with("vd 1.0.0 (plugin ABI 1.3, "),
        "{text:?}"
    );
    assert!(
        lines[1].starts_with("controller 1.0.0 (plugin ABI 1.3, "),
        "{text:?}"
    );
    let json = controller.vd(&["version", "-o", "json"]).success().json();
    assert_eq!(json["plugin_abi"], "1.3");
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(json["worker"]["pid"], controller.pid());

    // Without a controller: the CLI's own line, and exit code 3.
    let nowhere = tempfile::tempdir().unwrap();
    let alone = std::process::Command::new(vd::vd_binary())
        .args(["version", "--root"])
        .arg(nowhere.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(alone.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&alone.stdout).starts_with("vd 1.0.0 (plugin ABI 1.3, "));
}

#[test]
fn completions_are_generated_for_each_shell() {
    let controller = Controller::start();
    let bash = controller.vd(&["completions", "bash"]).success();
    assert!(bash.stdout.contains("plugins:install"), "{bash:?}");
    assert!(bash.stdout.contains("complete -F"), "{bash:?}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let script = controller.vd(&["completions", shell]).success();
        assert!(script.stdout.contains("rollout"), "{shell}: {script:?}");
    }
    assert_eq!(controller.vd(&["completions", "tcsh"]).code, 2);
}

#[test]
fn a_dry_run_and_vd_diff_show_what_would_change_and_store_nothing_and_diff_exits_2_on_changes() {
    let controller = controller_with_echo_plugins();
    let esl = |replicas: u32, blocks: &str| {
        format!(
            "deployment \"prod\" \"esl\" {{\n  image = \"esl:1\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n{blocks}\n}}\n"
        )
    };
    let file = controller.manifest(
        "m/esl.hcl",
        &esl(
            3,
            "  echo \"http\" { greeting = \"hi\" }\n  echo \"sip\" {}",
        ),
    );
    controller.vd(&["apply", "-f", &file]).success();
    let events_before = controller
        .vd(&["events", "-o", "json", "--limit", "1000"])
        .success()
        .stdout
        .lines()
        .count();

    controller.manifest(
        "m/esl.hcl",
        &esl(
            2,
            "  echo \"http\" { greeting = \"hello\" }\n  echo_c \"new\" {}",
        ),
    );
    controller.manifest(
        "m/web.hcl",
        "deployment \"prod\" \"web\" {\n  image = \"web:1\"\n  ports = [\"80\"]\n}\n",
    );
    let planned = controller.vd(&["apply", "--dry-run", "-f", "m"]).success();
    assert_eq!(
        planned.stdout.lines().collect::<Vec<_>>(),
        [
            "deployment/prod/esl: would be updated",
            "    ~ replicas: 3 → 2",
            "    ~ echo \"http\" block.spec.greeting: \"hi\" → \"hello\"",
            "    + echo_c \"new\" block: {\"greeting\":\"hello\"}",
            "    - echo \"sip\" block (its plugin forgets it)",
            "deployment/prod/web: would be created",
            "dry run: nothing was stored",
        ],
        "{planned:?}"
    );
    // Nothing was stored or recorded.
    let described = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    assert_eq!(described["revision"], 1);
    assert_eq!(described["core_spec"]["replicas"], 3);
    assert_eq!(
        controller.vd(&["describe", "deployment/prod/web"]).code,
        1,
        "web was not created"
    );
    let events_after = controller
        .vd(&["events", "-o", "json", "--limit", "1000"])
        .success()
        .stdout
        .lines()
        .count();
    assert_eq!(events_before, events_after);

    // A refusal is a refusal, in a dry run too.
    controller.manifest(
        "m/web.hcl",
        "deployment \"prod\" \"web\" {\n  image = 1\n}\n",
    );
    let refused = controller.vd(&["apply", "--dry-run", "-f", "m"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("dry run: the apply would be refused: 1 problem found"),
        "{refused:?}"
    );
    let json = controller
        .vd(&["apply", "--dry-run", "-f", "m/esl.hcl", "-o", "json"])
        .success()
        .json();
    assert_eq!(json["type"], "dry_run");
    assert_eq!(json["workloads"][0]["outcome"], "updated");

    // vd diff: the same plan as voodu shows it, and an exit code for CI:
    // 2 with changes, 0 without, 1 on an error.
    controller.manifest(
        "m/web.hcl",
        "deployment \"prod\" \"web\" {\n  image = \"web:1\"\n  ports = [\"80\"]\n}\n",
    );
    let diff = controller.vd(&["diff", "-f", "m"]);
    assert_eq!(diff.code, 2, "{diff:?}");
    assert_eq!(
        diff.stdout.lines().collect::<Vec<_>>(),
        [
            "~ deployment/prod/esl",
            "    ~ replicas: 3 → 2",
            "    ~ echo \"http\" block.spec.greeting: \"hi\" → \"hello\"",
            "    + echo_c \"new\" block: {\"greeting\":\"hello\"}",
            "    - echo \"sip\" block (its plugin forgets it)",
            "+ deployment/prod/web (new)",
            "1 to add, 1 to modify, 0 to prune",
        ],
        "{diff:?}"
    );
    let as_json = controller.vd(&["diff", "-f", "m", "-o", "json", "--detailed-exitcode"]);
    assert_eq!(as_json.code, 2, "{as_json:?}");
    assert_eq!(as_json.json()["type"], "dry_run");
    controller.vd(&["apply", "-f", "m"]).success();
    let same = controller.vd(&["diff", "-f", "m"]);
    assert_eq!(same.code, 0, "{same:?}");
    assert_eq!(
        same.stdout.lines().collect::<Vec<_>>(),
        [
            "= deployment/prod/esl (unchanged)",
            "= deployment/prod/web (unchanged)",
            "no changes",
        ],
        "{same:?}"
    );
    controller.manifest(
        "m/web.hcl",
        "deployment \"prod\" \"web\" {\n  image = 1\n}\n",
    );
    let refused = controller.vd(&["diff", "-f", "m"]);
    assert_eq!(refused.code, 1, "{refused:?}");
}

#[test]
fn history_lists_revisions_and_rollback_applies_one_again_through_validation() {
    let controller = controller_with_echo_plugins();
    let esl = |replicas: u32, blocks: &str| {
        format!(
            "deployment \"prod\" \"esl\" {{\n  image = \"esl:1\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n{blocks}\n}}\n"
        )
    };
    for (replicas, blocks) in [
        (1, "  echo { greeting = \"a\" }"),
        (2, "  echo { greeting = \"b\" }\n  echo_c {}"),
        (3, "  echo { greeting = \"c\" }"),
    ] {
        let file = controller.manifest("esl.hcl", &esl(replicas, blocks));
        controller.vd(&["apply", "-f", &file]).success();
    }
    let history = controller.vd(&["history", "deployment/prod/esl"]).success();
    let rows: Vec<&str> = history.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{history:?}");
    assert!(rows[1].contains("echo block, echo_c block"), "{history:?}");
    assert!(rows[2].starts_with("3 (current)"), "{history:?}");
    // Aligned: every row's last column starts where its heading does.
    let header = history.stdout.lines().next().expect("a header");
    let changed_at = header.find("CHANGED").expect("a CHANGED column");
    assert!(
        rows[0][changed_at..].starts_with("first applied"),
        "{history:?}"
    );
    assert!(
        rows[1][changed_at..].starts_with("replicas, plugin blocks"),
        "{history:?}"
    );

    // By default, back to the revision before the current one, as a new
    // revision, and it says which.
    let rolled = controller
        .vd(&["rollback", "deployment/prod/esl"])
        .success();
    assert!(
        rolled.stdout.contains(
            "deployment/prod/esl: rolled back to revision 2 as revision 4, with echo block, echo_c block"
        ),
        "{rolled:?}"
    );
    let history = controller.vd(&["history", "deployment/prod/esl"]).success();
    assert!(
        history
            .stdout
            .lines()
            .nth(4)
            .is_some_and(|row| row.ends_with("replicas, plugin blocks (the spec of revision 2)")),
        "{history:?}"
    );
    let described = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    assert_eq!(described["core_spec"]["replicas"], 2);
    assert_eq!(described["blocks"][0]["spec"]["greeting"], "b");
    assert!(
        controller
            .vd(&["events", "deployment/prod/esl"])
            .success()
            .stdout
            .contains("rolled back from revision 3 to the spec of revision 2"),
        "the rollback is an event"
    );

    // A revision that is not there names the ones that are.
    let missing = controller.vd(&["rollback", "deployment/prod/esl", "--to", "9"]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stderr.contains(
            "no revision 9 — `vd history deployment/prod/esl` lists its revisions (1 to 4)"
        ),
        "{missing:?}"
    );

    // Through validation: a block whose plugin is gone refuses the rollback.
    controller
        .vd(&["rollback", "deployment/prod/esl", "--to", "1"])
        .success();
    controller.vd(&["plugins:remove", "echo_c"]).success();
    let refused = controller.vd(&["rollback", "deployment/prod/esl", "--to", "2"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("echo_c block of revision 2 belongs to a plugin named \"echo_c\", which is not installed"),
        "{refused:?}"
    );
    let described = controller
        .vd(&["describe", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    assert_eq!(described["revision"], 5, "nothing changed");
}

#[test]
fn the_c_samples_are_also_at_a_path_that_does_not_change_between_builds() {
    for built in [voodu_echo_c::PLUGIN_PATH, voodu_haproxy::PLUGIN_PATH] {
        let built = std::path::Path::new(built);
        // <target>/<profile>/build/<package>-<hash>/out/<file>
        let profile_dir = built.ancestors().nth(4).expect("the profile directory");
        let stable = profile_dir.join(built.file_name().expect("a file name"));
        assert_eq!(
            std::fs::read(&stable).unwrap_or_default(),
            std::fs::read(built).expect("the built plugin"),
            "{} is a copy of {}",
            stable.display(),
            built.display()
        );
        // And it installs from there.
        let controller = Controller::start();
        controller
            .vd(&["plugins:install", &stable.display().to_string()])
            .success();
    }
}

#[test]
fn with_json_output_every_step_is_a_json_line_on_stderr() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo {}\n}\n",
    );
    let run = controller
        .vd(&["apply", "-f", &file, "-o", "json"])
        .success();
    let steps: Vec<Value> = run
        .stderr
        .lines()
        .map(|line| serde_json::from_str(line).expect("each step is a JSON line"))
        .collect();
    let kinds: Vec<&str> = steps
        .iter()
        .filter_map(|step| step["step"].as_str())
        .collect();
    assert_eq!(kinds, ["parsed", "validating", "validated"], "{run:?}");
    assert_eq!(steps[1]["workload"], "deployment/prod/esl");
    // The answer itself is still the one JSON document on stdout.
    assert_eq!(run.json()["workloads"][0]["outcome"], "created");
}

/// Applies `bytes` as `name` and returns its error lines and the location
/// lines (`  --> file:line:col`), after checking that the apply failed with
/// exit code 1.
fn refused(controller: &Controller, name: &str, bytes: &[u8]) -> (Vec<String>, Vec<String>) {
    let path = controller.root().join(name);
    std::fs::write(&path, bytes).expect("manifest written");
    let run = controller.vd(&["apply", "-f", name]);
    assert_eq!(run.code, 1, "{name} must be refused: {run:?}");
    let errors = error_lines(&run.stderr)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let locations = run
        .stderr
        .lines()
        .filter_map(|line| line.trim().strip_prefix("--> "))
        .map(str::to_owned)
        .collect();
    (errors, locations)
}

fn deployment(name: &str, body: &str) -> String {
    format!("deployment \"prod\" \"{name}\" {{\n  image = \"esl:1\"\n{body}\n}}\n")
}

#[test]
fn bad_input_is_refused_with_its_location_and_the_fix_and_nothing_is_stored() {
    let controller = Controller::start();
    // A 50 MB manifest is refused before it is read or sent.
    let big = controller.root().join("big.vd");
    std::fs::File::create(&big)
        .and_then(|file| file.set_len(50 * 1000 * 1000))
        .expect("sparse file");
    let run = controller.vd(&["apply", "-f", "big.vd"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        error_lines(&run.stderr),
        ["vd apply: big.vd is 47.7 MiB, more than the 8.0 MiB a manifest may be — split it into several files"]
    );
    std::fs::remove_file(&big).unwrap();

    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "deep.vd",
            format!(
                "deployment \"prod\" \"deep\" {{\n  env = {}\n}}\n",
                "{ a = ".repeat(10_000) + "1" + &" }".repeat(10_000)
            )
            .into_bytes(),
            "deep.vd:2:75: blocks, objects and lists are nested more than 12 deep here — flatten the structure",
            "",
        ),
        (
            "invalid.vd",
            b"deployment \"prod\" \"esl\" {\n  image = \"\xc3\x28\"\n}\n".to_vec(),
            "vd apply: invalid.vd:2:12: the file is not UTF-8 text (a byte that is not UTF-8 here; a binary file?) — a manifest is UTF-8 HCL",
            "",
        ),
        (
            "x.vd",
            b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00".to_vec(),
            "x.vd:1:8: the file holds a NUL byte, so it is not HCL text (a binary file?) — a manifest is UTF-8 HCL",
            "",
        ),
        (
            "dots.vd",
            b"deployment \"..\" \"x\" {\n  image = \"esl:1\"\n}\n".to_vec(),
            "deployment/../x: the scope \"..\" cannot name containers — use 1 to 63 lowercase letters, digits and inner dashes, for example \"esl-api\"",
            "dots.vd:1:1",
        ),
        (
            "spaces.vd",
            b"deployment \"prod\" \"my app\" {\n  image = \"esl:1\"\n}\n".to_vec(),
            "deployment/prod/my app: the name \"my app\" cannot name containers — use 1 to 63 lowercase letters, digits and inner dashes, for example \"esl-api\"",
            "spaces.vd:1:1",
        ),
        (
            "negative.vd",
            deployment("neg", "  replicas = -1").into_bytes(),
            "deployment/prod/neg: attribute \"replicas\" must be a whole number from 0 to 1000, not the number -1 — write replicas = 3",
            "negative.vd:3:14",
        ),
        (
            "billion.vd",
            deployment("many", "  replicas = 1e9").into_bytes(),
            "deployment/prod/many: attribute \"replicas\" must be a whole number from 0 to 1000, not the number 1000000000 — write replicas = 3",
            "billion.vd:3:14",
        ),
        (
            "string.vd",
            deployment("str", "  replicas = \"3\"").into_bytes(),
            "deployment/prod/str: attribute \"replicas\" must be a whole number from 0 to 1000, not the string \"3\" — write replicas = 3",
            "string.vd:3:14",
        ),
        (
            "port.vd",
            deployment("port", "  ports = [\"70000\"]").into_bytes(),
            "deployment/prod/port: port \"70000\" is not a port mapping (container port \"70000\" is not a number from 1 to 65535) — write \"8084\", \"8084:8084\" or \"0.0.0.0:8084:8084\", with /udp for UDP",
            "port.vd:3:11",
        ),
        (
            "minus.vd",
            deployment("minus", "  drain_timeout = \"-5s\"").into_bytes(),
            "deployment/prod/minus: attribute \"drain_timeout\" must be a duration, not the string \"-5s\" — write drain_timeout = \"30s\"",
            "minus.vd:3:19",
        ),
        (
            "abc.vd",
            deployment("abc", "  drain_timeout = \"abc\"").into_bytes(),
            "deployment/prod/abc: attribute \"drain_timeout\" must be a duration, not the string \"abc\" — write drain_timeout = \"30s\"",
            "abc.vd:3:19",
        ),
        (
            "forever.vd",
            deployment("forever", "  drain_timeout = \"999999h\"").into_bytes(),
            "deployment/prod/forever: attribute \"drain_timeout\" must be at most 1h, not the string \"999999h\" — write drain_timeout = \"30s\"",
            "forever.vd:3:19",
        ),
    ];
    for (name, bytes, error, location) in &cases {
        let (errors, locations) = refused(&controller, name, bytes);
        assert_eq!(errors[0], *error, "{name}: {errors:?}");
        if !location.is_empty() {
            assert_eq!(
                locations.first().map(String::as_str),
                Some(*location),
                "{name}"
            );
        }
    }

    // A long name: refused, and the message names it whole.
    let long = "a".repeat(300);
    let (errors, _) = refused(
        &controller,
        "long.vd",
        format!("deployment \"prod\" \"{long}\" {{\n  image = \"esl:1\"\n}}\n").as_bytes(),
    );
    assert_eq!(errors[0], format!("deployment/prod/{long}: the name \"{long}\" cannot name containers — use 1 to 63 lowercase letters, digits and inner dashes, for example \"esl-api\""));

    // 10,000 workloads in one file: refused at the first one beyond the
    // bound, before any is validated.
    let many: String = (0..10_000)
        .map(|n| deployment(&format!("w{n}"), ""))
        .collect();
    let (errors, _) = refused(&controller, "many.vd", many.as_bytes());
    assert_eq!(
        errors[0],
        "many.vd:4001:1: this apply declares 10000 workloads, more than the 1000 one apply may — apply the files in several parts"
    );

    // Nothing of any of it was stored.
    let stored = controller
        .vd(&["get", "workloads", "-o", "json"])
        .success()
        .json();
    assert_eq!(stored["workloads"], json!([]), "{stored}");
}

#[test]
fn plugins_install_refuses_files_that_are_not_safe_to_load_and_pins_a_digest() {
    use std::os::unix::fs::PermissionsExt;
    let controller = Controller::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let place = |name: &str, mode: u32| {
        let path = dir.path().join(name);
        std::fs::copy(echo_rust(), &path).expect("copied");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path.display().to_string()
    };
    let refusal = |path: &str, extra: &[&str]| {
        let mut args = vec!["plugins:install", path];
        args.extend_from_slice(extra);
        let run = controller.vd(&args);
        assert_eq!(run.code, 1, "{path} must be refused: {run:?}");
        let errors = error_lines(&run.stderr).join("\n");
        errors
            .strip_prefix("plugins:install: ")
            .unwrap_or(&errors)
            .to_owned()
    };

    let writable = place("libwritable.so", 0o666);
    assert_eq!(
        refusal(&writable, &[]),
        format!("{writable}: it is writable by anyone (mode 666) — installing a plugin runs its code inside the controller, so make it writable by its owner only (chmod go-w) and check it is the file you built")
    );

    let not_so = place("echo.plugin", 0o644);
    assert_eq!(
        refusal(&not_so, &[]),
        format!("{not_so}: {not_so} does not end in .so — installing a plugin runs its code inside the controller, so install the shared object the build produced (lib<name>.so)")
    );

    let open_dir = dir.path().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let in_open_dir = open_dir.join("libecho.so");
    std::fs::copy(echo_rust(), &in_open_dir).unwrap();
    let in_open_dir = in_open_dir.display().to_string();
    assert_eq!(
        refusal(&in_open_dir, &[]),
        format!("{in_open_dir}: it is under {}, which anyone may write and has no sticky bit, so anyone could replace it — installing a plugin runs its code inside the controller, so move it to a directory only you can write", open_dir.display())
    );

    // Another user's file (the tests run as root on CI, which may chown).
    let foreign = place("libforeign.so", 0o644);
    let chowned = std::process::Command::new("chown")
        .args(["4242:4242", &foreign])
        .status()
        .is_ok_and(|status| status.success());
    if chowned {
        assert_eq!(
            refusal(&foreign, &[]),
            format!("{foreign}: it belongs to user 4242, not to the controller's user {} — installing a plugin runs its code inside the controller, so install a copy you own, or one root installed", unsafe { libc::geteuid() })
        );
    } else {
        assert!(
            !voodu_tests::on_ci(),
            "CI runs as root and must check ownership"
        );
    }

    // A pinned digest that does not match is refused; the right one installs.
    let good = place("libgood.so", 0o755);
    let digest = voodu_plugin_host::registry::sha256_hex(std::path::Path::new(&good)).unwrap();
    let wrong = "0".repeat(64);
    assert_eq!(
        refusal(&good, &["--sha256", &wrong]),
        format!("{good} has SHA-256 {digest}, not the {wrong} that --sha256 pins — this is not the file you meant to install")
    );
    let bad_hex = controller.vd(&["plugins:install", &good, "--sha256", "xyz"]);
    assert_eq!(bad_hex.code, 2, "{bad_hex:?}");

    // Through a symlink, with the right digest: the installed copy is a
    // regular file only the controller's user may read or write.
    let link = dir.path().join("libecho-link.so");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    controller
        .vd(&[
            "plugins:install",
            link.to_str().unwrap(),
            "--sha256",
            &digest.to_uppercase(),
        ])
        .success();
    let installed = controller.root().join("plugins/echo/libgood.so");
    let metadata = std::fs::symlink_metadata(&installed).expect("the installed copy");
    assert!(metadata.file_type().is_file(), "{metadata:?}");
    assert_eq!(metadata.permissions().mode() & 0o777, 0o600);

    // A second plugin claiming the installed name is refused without --replace.
    let again = place("libagain.so", 0o644);
    assert!(
        refusal(&again, &[]).starts_with("a plugin named \"echo\" is installed already"),
        "{}",
        refusal(&again, &[])
    );
}

#[test]
fn a_workload_deleted_and_applied_again_tells_one_story_in_history_describe_and_events() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo {}\n}\n",
    );
    controller.vd(&["apply", "-f", &file]).success();
    let describe = || {
        controller
            .vd(&["describe", "deployment/prod/esl", "-o", "json"])
            .success()
            .json()
    };
    let first = describe();
    controller.vd(&["delete", "deployment/prod/esl"]).success();
    // Times are kept to the second: let one pass.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    controller.vd(&["apply", "-f", &file]).success();
    let again = describe();
    assert_eq!(again["revision"], 2, "revisions go on");
    assert_eq!(
        again["created_at"], first["created_at"],
        "first applied is when revision 1 was"
    );
    assert_ne!(again["updated_at"], first["updated_at"]);
    let history = controller.vd(&["history", "deployment/prod/esl"]).success();
    let rows: Vec<&str> = history.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{history:?}");
    assert!(
        rows[1].contains("applied again after a delete; nothing (the spec of revision 1)"),
        "{history:?}"
    );
    let events = controller
        .vd(&["events", "deployment/prod/esl"])
        .success()
        .stdout;
    let order = [
        "created revision 1",
        "deleted at revision 1",
        "created again, after a delete, as revision 2",
    ];
    for needle in order {
        assert!(events.contains(needle), "{needle}: {events}");
    }
    let positions: Vec<usize> = order.iter().filter_map(|n| events.find(n)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{events}");
    // One name for an event's id in every view.
    assert!(
        again["events"][0]["event_id"].as_i64().is_some(),
        "{again:#}"
    );
    let notices = controller
        .vd(&["events", "deployment/prod/esl", "-o", "json"])
        .success()
        .json();
    assert!(
        notices["events"][0]["event_id"].as_i64().is_some(),
        "{notices:#}"
    );
}

#[test]
fn completions_piped_into_a_reader_that_stops_early_exit_quietly() {
    let mut child = std::process::Command::new(vd::vd_binary())
        .args(["completions", "bash"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vd runs");
    // The reader goes away before reading anything, as `| head -0` would.
    drop(child.stdout.take());
    let finished = child.wait_with_output().expect("vd ends");
    assert_eq!(finished.status.code(), Some(0));
    assert!(
        finished.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&finished.stderr)
    );
}

#[test]
fn a_typo_of_an_installed_plugins_name_is_asked_about() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  ehco \"http\" {}\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &file]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(
            "block \"ehco\" belongs to a plugin named \"ehco\", which is not installed — run `vd plugins:install <source>` or remove the block (did you mean the plugin \"echo\"?)"
        ),
        "{refused:?}"
    );
}

#[test]
fn a_workload_whose_own_attributes_are_wrong_is_never_called_valid() {
    let controller = controller_with_echo_plugins();
    let file = controller.manifest(
        "esl.hcl",
        "deployment \"prod\" \"esl\" {\n  image = \"esl:1\"\n  replicas = \"three\"\n  ports = [\"8084\"]\n  echo \"http\" {}\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &file]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        !refused.stderr.contains("deployment/prod/esl: valid"),
        "{refused:?}"
    );
    assert!(
        refused.stderr.contains("deployment/prod/esl: 1 problem"),
        "{refused:?}"
    );
}

#[test]
fn a_request_sent_as_the_worker_is_killed_waits_and_is_answered_by_the_next_worker() {
    let controller = Controller::start();
    controller
        .vd(&["plugins:install", voodu_echo_c::PLUGIN_PATH])
        .success();
    let supervisor = controller.supervisor_pid();
    let mut answered_after = Vec::new();
    for _ in 0..10 {
        let worker = controller.pid();
        // SAFETY: signalling a process of this test's controller.
        unsafe { libc::kill(worker as libc::pid_t, libc::SIGKILL) };
        let sent = std::time::Instant::now();
        // Sent while no worker serves: it waits in the socket's backlog.
        let listed = controller
            .vd(&["plugins:list", "-o", "json"])
            .success()
            .json();
        answered_after.push(sent.elapsed());
        assert_eq!(listed["plugins"][0]["name"], "echo_c", "{listed}");
        assert_ne!(controller.pid(), worker, "a new worker serves");
        assert_eq!(controller.supervisor_pid(), supervisor);
    }
    answered_after.sort();
    println!(
        "SIGKILL of the worker to a request answered, 10 kills: median {:?}, max {:?}",
        answered_after[5], answered_after[9]
    );
    assert!(controller
        .log_text()
        .contains("the controller's worker was killed by signal 9"));
}

#[test]
fn plugins_call_sends_each_call_to_the_loaded_plugin_and_prints_its_reply_or_refusal() {
    let controller = Controller::start();
    controller.vd(&["plugins:install", &echo_c()]).success();
    let echo = voodu_tests::rust_cdylib("voodu_echo");
    controller
        .vd(&["plugins:install", &echo.display().to_string()])
        .success();
    for plugin in ["echo_c", "echo"] {
        for call in ["validate", "publish", "drain", "forget"] {
            // The example is a request the plugin takes as it is.
            let example = controller
                .vd(&["plugins:call", plugin, call, "--example"])
                .success();
            let file = controller.manifest(&format!("{plugin}-{call}.json"), &example.stdout);
            let answered = controller
                .vd(&["plugins:call", plugin, call, &file, "-o", "json"])
                .success()
                .json();
            assert_eq!(answered["plugin"], plugin, "{answered}");
            assert_eq!(answered["call"], call, "{answered}");
            if call == "validate" {
                assert!(answered["reply"]["spec"].is_object(), "{answered}");
            }
            if call == "drain" {
                // A state, or nothing (drained at once).
                let reply = &answered["reply"];
                assert!(reply.is_null() || reply["state"].is_string(), "{answered}");
            }
        }
    }
    // A plugin's example is its own block, built from its schema (its
    // example and defaults), and it takes it back as it is.
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    controller
        .vd(&["plugins:install", &traffik.display().to_string()])
        .success();
    for call in ["validate", "publish", "drain", "forget"] {
        let example = controller
            .vd(&["plugins:call", "traffik", call, "--example"])
            .success();
        let request: serde_json::Value = serde_json::from_str(&example.stdout).unwrap();
        assert_eq!(request["block"]["type"], "traffik", "{request}");
        // Validate's is the schema's example with its defaults; the others
        // carry the block as traffik normalised it (its bind filled in).
        let spec = &request["block"]["spec"];
        assert_eq!(spec["port"], 8084, "{request}");
        assert_eq!(spec["balance"], "round_robin", "{request}");
        if call != "validate" {
            assert_eq!(spec["bind"], "0.0.0.0:8084", "{request}");
        }
        // Sent back on a free port: a publish makes traffik listen.
        let port = voodu_tests::free_port().to_string();
        let file = controller.manifest(
            &format!("traffik-{call}.json"),
            &example.stdout.replace("8084", &port),
        );
        controller
            .vd(&["plugins:call", "traffik", call, &file])
            .success();
    }
    // The plugin's refusal, in its own words, and exit code 1.
    let refused_file = controller.manifest(
        "refused.json",
        &controller
            .vd(&["plugins:call", "traffik", "validate", "--example"])
            .success()
            .stdout
            .replace("8084", "70000"),
    );
    let refused = controller.vd(&["plugins:call", "traffik", "validate", &refused_file]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .starts_with("error: plugin traffik refused the validate request (in ")
            && refused
                .stderr
                .contains("port must be a number from 1 to 65535, not 70000"),
        "{refused:?}"
    );
    // A file that is no JSON is named with its line and column; a plugin
    // that is not loaded is named.
    let bad = controller.manifest("bad.json", "{\n  \"kind\": \n");
    let unparsed = controller.vd(&["plugins:call", "echo_c", "validate", &bad]);
    assert_eq!(unparsed.code, 1, "{unparsed:?}");
    assert!(
        unparsed
            .stderr
            .contains("bad.json:3:0: not JSON: EOF while parsing a value"),
        "{unparsed:?}"
    );
    let missing = controller.vd(&["plugins:call", "nope", "forget", &refused_file]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stderr.contains("no plugin nope is loaded"),
        "{missing:?}"
    );
}

#[test]
fn explain_shows_a_blocks_options_and_apply_offers_the_nearest_for_an_unknown_one() {
    let controller = Controller::start();
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    controller
        .vd(&["plugins:install", &traffik.display().to_string()])
        .success();
    controller.vd(&["plugins:install", &echo_c()]).success();
    let text = controller.vd(&["explain", "traffik"]).success();
    assert!(
        text.stdout.starts_with("BLOCK:   traffik (plugin traffik 1.0.0)\n")
            && text.stdout.contains("    port  <integer, 1 to 65535>, required\n")
            && text.stdout.contains(
                "    balance  <string, one of \"round_robin\", \"least_conn\">, default \"round_robin\"\n"
            )
            && text
                .stdout
                .contains("Any other option is refused, with the nearest name offered."),
        "{text:?}"
    );
    let json = controller
        .vd(&["explain", "echo_c", "-o", "json"])
        .success()
        .json();
    // The plugin's JSON Schema itself, no wrapper around it.
    assert_eq!(json["properties"]["greeting"]["default"], "hello", "{json}");
    assert_eq!(json["additionalProperties"], true, "{json}");
    assert!(json.get("plugin").is_none(), "{json}");
    let missing = controller.vd(&["explain", "nope"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("no plugin owns nope blocks here"),
        "{missing:?}"
    );
    // A misspelt option is refused before the plugin's own validate, with
    // the nearest name, the file and the misspelt option's own line.
    let file = controller.manifest(
        "web.hcl",
        "deployment \"prod\" \"web\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  traffik \"http\" {\n    port    = 8084\n    balanse = \"least_conn\"\n  }\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &file]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(
            "deployment/prod/web: traffik \"http\" block: unknown option `balanse` — did you mean `balance`? (traffik takes port, bind, balance, addressing, reuse_port; `vd explain traffik` describes them)"
        ) && refused.stderr.contains("web.hcl:6:5"),
        "{refused:?}"
    );
    // A refusal by the plugin itself that names the option (a JSON
    // pointer) points at that attribute's line, not the block's.
    let file = controller.manifest(
        "range.hcl",
        "deployment \"prod\" \"range\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  traffik \"http\" {\n    port    = 8084\n    balance = \"random\"\n  }\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &file]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(
            "deployment/prod/range: traffik \"http\" block: balance must be \"round_robin\" or \"least_conn\", not \"random\""
        ) && refused.stderr.contains("range.hcl:6:5"),
        "{refused:?}"
    );
    // One about the block as a whole points at the block.
    let file = controller.manifest(
        "whole.hcl",
        "deployment \"prod\" \"whole\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  traffik \"http\" {\n    balance = \"least_conn\"\n  }\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &file]);
    assert!(
        refused.stderr.contains("port is required") && refused.stderr.contains("whole.hcl:4:3"),
        "{refused:?}"
    );
    // echo_c keeps other options as written: none is refused for its name.
    let kept = controller.manifest(
        "kept.hcl",
        "deployment \"prod\" \"kept\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  echo_c \"a\" {\n    colour = \"blue\"\n  }\n}\n",
    );
    controller.vd(&["apply", "-f", &kept]).success();
}

/// A controller with traffik installed with `default_bind_host =
/// 127.0.0.1`: it, traffik's file, and the settings file (`private.json`).
fn controller_with_traffik_on_127_0_0_1() -> (Controller, String, String) {
    let controller = Controller::start();
    let traffik = voodu_tests::rust_cdylib("voodu_traffik")
        .display()
        .to_string();
    let private = controller.manifest("private.json", r#"{"default_bind_host": "127.0.0.1"}"#);
    controller
        .vd(&["plugins:install", &traffik, "--settings", &private])
        .success();
    (controller, traffik, private)
}

#[test]
fn plugin_settings_are_checked_taken_kept_across_restarts_and_replaces_and_shown() {
    let (mut controller, traffik, private) = controller_with_traffik_on_127_0_0_1();
    // Shown by plugins:list, plugins:settings and explain.
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    assert_eq!(
        listed["plugins"][0]["settings"],
        json!({"default_bind_host": "127.0.0.1"}),
        "{listed}"
    );
    let shown = |controller: &Controller| {
        controller
            .vd(&["plugins:settings", "traffik", "-o", "json"])
            .success()
            .json()
    };
    assert_eq!(
        shown(&controller),
        json!({"default_bind_host": "127.0.0.1"})
    );
    let explained = controller.vd(&["explain", "traffik"]).success();
    assert!(
        explained.stdout.contains(
            "SETTINGS (plugin-wide: `vd plugins:settings traffik FILE`):\n    default_bind_host  <string>, default \"0.0.0.0\"\n"
        ) && explained.stdout.contains("\"default_bind_host\": \"127.0.0.1\""),
        "{explained:?}"
    );
    // The plugin uses them: a block without bind listens on that host.
    // Each block its own port: two blocks never claim one address.
    let bound = |controller: &Controller, name: &str, port: u16| {
        let file = controller.manifest(
            &format!("{name}.hcl"),
            &format!("deployment \"prod\" \"{name}\" {{\n  image = \"esl:1\"\n  ports = [\"{port}\"]\n  traffik \"http\" {{\n    port = {port}\n  }}\n}}\n"),
        );
        controller.vd(&["apply", "-f", &file]).success();
        controller
            .vd(&["describe", &format!("deployment/prod/{name}"), "-o", "json"])
            .success()
            .json()["blocks"][0]["spec"]["bind"]
            .clone()
    };
    assert_eq!(bound(&controller, "one", 8084), "127.0.0.1:8084");
    // Refused, each naming where, and nothing changes.
    for (file, text, says) in [
        ("typed.json", r#"{"default_bind_host": 7}"#, "/default_bind_host"),
        ("typo.json", r#"{"default_bind_hots": "10.0.0.5"}"#, "default_bind_hots"),
        (
            "name.json",
            r#"{"default_bind_host": "the-lan"}"#,
            "did not take the settings (at /default_bind_host): default_bind_host must be an IP address",
        ),
        ("array.json", r#"["10.0.0.5"]"#, "settings are one JSON object"),
    ] {
        let refused = controller.vd(&["plugins:settings", "traffik", &controller.manifest(file, text)]);
        assert_eq!(refused.code, 1, "{file}: {refused:?}");
        assert!(
            refused.stderr.contains(says) && refused.stderr.contains("nothing changed"),
            "{file}: {refused:?}"
        );
    }
    let not_json = controller.vd(&[
        "plugins:settings",
        "traffik",
        &controller.manifest("bad.json", "{\n  \"default_bind_host\": \n"),
    ]);
    assert_eq!(not_json.code, 1, "{not_json:?}");
    assert!(not_json.stderr.contains("bad.json:3:"), "{not_json:?}");
    assert_eq!(
        shown(&controller),
        json!({"default_bind_host": "127.0.0.1"})
    );
    // Kept across a restart: handed over right after init.
    controller.restart();
    assert_eq!(
        shown(&controller),
        json!({"default_bind_host": "127.0.0.1"})
    );
    assert_eq!(bound(&controller, "two", 8085), "127.0.0.1:8085");
    // A replace without --settings keeps them.
    controller
        .vd(&["plugins:install", "--replace", &traffik])
        .success();
    assert_eq!(
        shown(&controller),
        json!({"default_bind_host": "127.0.0.1"})
    );
    // Changed at once, from standard input; then dropped with {}.
    let changed = controller
        .vd_with_stdin(
            &["plugins:settings", "traffik", "-"],
            r#"{"default_bind_host": "127.0.0.2"}"#,
        )
        .success();
    assert!(
        changed
            .stdout
            .contains("changed the settings of plugin traffik 1.0.0")
            && changed.stdout.contains("\"127.0.0.1\""),
        "{changed:?}"
    );
    assert_eq!(bound(&controller, "three", 8086), "127.0.0.2:8086");
    controller
        .vd_with_stdin(&["plugins:settings", "traffik", "-"], "{}")
        .success();
    assert_eq!(shown(&controller), json!({}));
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    assert!(listed["plugins"][0].get("settings").is_none(), "{listed}");
    assert_eq!(bound(&controller, "four", 8087), "0.0.0.0:8087");
    // A plugin that describes none takes none.
    controller.vd(&["plugins:install", &echo_rust()]).success();
    let refused = controller.vd(&["plugins:settings", "echo", &private]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("echo 1.0.0 takes no settings"),
        "{refused:?}"
    );
}

#[test]
fn a_plugin_whose_kept_settings_are_refused_at_start_is_named_and_new_settings_load_it() {
    let (mut controller, _, private) = controller_with_traffik_on_127_0_0_1();
    // Settings the schema takes but the plugin refuses, written while the
    // controller is down (as an older version of it might have kept).
    controller.restart_after(|root| {
        std::fs::write(
            root.join("plugins/traffik/settings.json"),
            r#"{"default_bind_host": "the-lan"}"#,
        )
        .expect("written");
    });
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    assert_eq!(listed["plugins"], json!([]), "{listed}");
    let failure = listed["failures"][0]["error"].as_str().unwrap_or_default();
    assert!(
        failure.contains("default_bind_host must be an IP address")
            && failure.contains("`vd plugins:settings traffik FILE`"),
        "{listed}"
    );
    // The fix the failure names loads it again, with the new settings.
    controller
        .vd(&["plugins:settings", "traffik", &private])
        .success();
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    assert_eq!(listed["plugins"][0]["name"], "traffik", "{listed}");
    assert_eq!(
        listed["plugins"][0]["settings"],
        json!({"default_bind_host": "127.0.0.1"}),
        "{listed}"
    );
    assert_eq!(listed["failures"], json!([]), "{listed}");
}
