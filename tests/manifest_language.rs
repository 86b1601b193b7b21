//! voodu's manifest language through the real `vd` binary and a real
//! controller (no engine needed): parse-time `${NAME}` interpolation from
//! the shell of `vd apply`, and voodu's other top-level kinds refused
//! whole or, with `--skip-unsupported`, left out and listed.

use vd::Controller;
use voodu_tests::rust_cdylib;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

fn controller_with_echo() -> Controller {
    let controller = Controller::start();
    let echo = rust_cdylib("voodu_echo").display().to_string();
    controller.vd(&["plugins:install", &echo]).success();
    controller
}

fn lines_with<'a>(stderr: &'a str, prefix: &str) -> Vec<&'a str> {
    stderr
        .lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .collect()
}

/// voodu's interpolation page's example, with a plugin block beside it.
const INTERPOLATED: &str = r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:${VERSION}"
  ports = ["8080"]
  env = {
    DATABASE_URL = "${DATABASE_URL:-postgres://localhost/myapp_dev}"
    LOG_LEVEL    = "${LOG_LEVEL:-info}"
  }
  echo "http" {
    greeting = "hello from ${GREETER:-nobody}, $${NOT_A_VARIABLE}"
  }
}
"#;

#[test]
fn variables_come_from_the_shell_of_vd_apply_then_their_defaults() {
    let controller = controller_with_echo();
    let file = controller.manifest("api.hcl", INTERPOLATED);
    controller
        .vd_with_env(
            &["apply", "-f", &file],
            &[
                ("VERSION", "1.7"),
                ("LOG_LEVEL", "debug"),
                ("GREETER", "the \"shell\""),
            ],
        )
        .success();
    let described = controller
        .vd(&["describe", "deployment/prod/api", "-o", "json"])
        .success()
        .json();
    let core_spec = &described["core_spec"];
    assert_eq!(core_spec["image"], "ghcr.io/myorg/api:1.7");
    assert_eq!(core_spec["env"]["LOG_LEVEL"], "debug");
    assert_eq!(
        core_spec["env"]["DATABASE_URL"],
        "postgres://localhost/myapp_dev"
    );
    // Inside a plugin block too: the value arrives as it was in the shell,
    // quotes and all, and `$${` stays a literal `${`.
    let block = &described["blocks"][0]["spec"];
    assert_eq!(
        block["greeting"], "hello from the \"shell\", ${NOT_A_VARIABLE}",
        "{described}"
    );
}

#[test]
fn a_missing_variable_is_named_at_its_file_line_and_column_and_nothing_is_stored() {
    let controller = controller_with_echo();
    let file = controller.manifest("api.hcl", INTERPOLATED);
    let refused = controller.vd_with_env(&["apply", "-f", &file], &[("UNRELATED", "x")]);
    assert_eq!(refused.code, 1, "{refused:?}");
    let errors = lines_with(&refused.stderr, "error: ");
    assert_eq!(
        errors[0],
        "deployment/prod/api: undefined variable VERSION — export VERSION before vd apply, set it in a config bucket the workload's env_from names, or write ${VERSION:-default}"
    );
    assert!(refused.stderr.contains("  --> api.hcl:2:30"), "{refused:?}");
    assert_eq!(
        errors[1],
        "apply refused: 1 problem found, nothing was stored"
    );
    let listed = controller
        .vd(&["get", "workloads", "-o", "json"])
        .success()
        .json();
    assert_eq!(
        listed["workloads"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
}

#[test]
fn a_manifest_on_standard_input_is_applied_with_dash_and_located_as_stdin() {
    let controller = controller_with_echo();
    let refused = controller.vd_with_stdin(&["apply", "-f", "-"], INTERPOLATED);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("  --> <stdin>:2:30"), "{refused:?}");
    let applied = controller.vd_with_stdin(
        &["apply", "--no-wait", "-f", "-"],
        "deployment \"prod\" \"piped\" {\n  image = \"esl:1\"\n  ports = [\"8080\"]\n  echo \"http\" {}\n}\n",
    );
    assert_eq!(applied.code, 0, "{applied:?}");
    let described = controller
        .vd(&["describe", "deployment/prod/piped", "-o", "json"])
        .success()
        .json();
    assert_eq!(described["source"], "<stdin>:1:1", "{described}");
}

#[test]
fn a_scope_s_bucket_is_taken_by_every_workload_of_the_scope_and_its_own_bucket_wins() {
    let controller = controller_with_echo();
    controller
        .vd(&["config", "shop", "set", "TAG=from-the-scope", "LEVEL=info"])
        .success();
    controller
        .vd(&["config:set", "shop/api", "TAG=from-its-own"])
        .success();
    let file = controller.manifest(
        "shop.hcl",
        "deployment \"shop\" \"api\" {\n  image = \"api:${TAG}\"\n  env = { LEVEL = \"${LEVEL}\" }\n}\ndeployment \"shop\" \"web\" {\n  image = \"web:${TAG}\"\n}\n",
    );
    controller
        .vd(&["apply", "--no-wait", "-f", &file])
        .success();
    let image = |name: &str| {
        controller
            .vd(&["describe", &format!("deployment/shop/{name}"), "-o", "json"])
            .success()
            .json()["core_spec"]["image"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(image("web"), "web:from-the-scope");
    assert_eq!(image("api"), "api:from-its-own", "its own bucket wins");
    let listed = controller.vd(&["config", "shop"]).success();
    assert_eq!(
        listed.stdout, "LEVEL=info\nTAG=from-the-scope\n",
        "{listed:?}"
    );
    let buckets = controller
        .vd(&["config", "list", "-o", "json"])
        .success()
        .json();
    assert_eq!(buckets["buckets"], serde_json::json!(["shop", "shop/api"]));
}

/// A file as voodu's documentation writes one: a deployment, its ingress,
/// a cronjob (which runs here) and a postgres from a plugin macro.
const VOODU_FILE: &str = r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:1.7"
  ports = ["8080"]
}

ingress "prod" "api" {
  service = "api"
  host    = "api.example.com"
}

cronjob "data" "reindex" {
  schedule = "0 3 * * *"
  image    = "ghcr.io/myorg/api:1.7"
  command  = ["bin/reindex"]
}

postgres "data" "pg" {
  image = "postgres:16"
}
"#;

#[test]
fn other_kinds_refuse_the_whole_file_naming_what_to_use_instead() {
    let controller = controller_with_echo();
    let file = controller.manifest("voodu.hcl", VOODU_FILE);
    let refused = controller.vd(&["apply", "-f", &file]);
    assert_eq!(refused.code, 1, "{refused:?}");
    let errors = lines_with(&refused.stderr, "error: ");
    assert_eq!(errors.len(), 3, "{refused:?}");
    assert!(
        errors[0].starts_with("voodu.hcl:6:1: ingress \"prod\" \"api\": this voodu does not run ingress — write the route inside the deployment it routes to: deployment \"prod\" \"api\" { ... traffik \"http\" { port = <the deployment's port> } }"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("voodu.hcl:17:1: postgres \"data\" \"pg\""),
        "{errors:?}"
    );
    assert_eq!(
        errors[2],
        "apply refused: 2 problems found, nothing was stored"
    );
    let listed = controller
        .vd(&["get", "workloads", "-o", "json"])
        .success()
        .json();
    assert_eq!(
        listed["workloads"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
}

#[test]
fn skip_unsupported_applies_the_rest_and_lists_what_it_left_out() {
    let controller = controller_with_echo();
    let file = controller.manifest("voodu.hcl", VOODU_FILE);
    let applied = controller
        .vd(&["apply", "-f", &file, "--skip-unsupported"])
        .success();
    let skipped = lines_with(&applied.stderr, "skipped: ");
    assert_eq!(skipped.len(), 2, "{applied:?}");
    assert!(
        skipped[0].starts_with(
            "voodu.hcl:6:1: skipped ingress \"prod\" \"api\": this voodu does not run ingress"
        ),
        "{skipped:?}"
    );
    assert!(
        applied.stdout.contains("deployment/prod/api: created")
            && applied.stdout.contains("cronjob/data/reindex: created"),
        "{applied:?}"
    );
    let json = controller
        .vd(&["apply", "-f", &file, "--skip-unsupported", "-o", "json"])
        .success()
        .json();
    assert_eq!(json["skipped"].as_array().map(Vec::len), Some(2), "{json}");
}

#[test]
fn env_file_is_read_by_vd_apply_and_env_wins_on_a_collision() {
    let controller = controller_with_echo();
    controller.manifest(
        ".env",
        "# voodu reads .env files client-side\nDATABASE_URL=postgres://db/app\nLOG_LEVEL=warn\nQUOTED=\"a b\"\n",
    );
    let file = controller.manifest(
        "api.hcl",
        "deployment \"prod\" \"api\" {\n  image    = \"ghcr.io/myorg/api:1.7\"\n  env_file = [\"./.env\"]\n  env      = { LOG_LEVEL = \"debug\" }\n}\n",
    );
    controller.vd(&["apply", "-f", &file]).success();
    let described = controller
        .vd(&["describe", "deployment/prod/api", "-o", "json"])
        .success()
        .json();
    let env = &described["core_spec"]["env"];
    assert_eq!(env["DATABASE_URL"], "postgres://db/app");
    assert_eq!(env["LOG_LEVEL"], "debug", "inline env wins over env_file");
    assert_eq!(env["QUOTED"], "a b");

    // A file that is not there is named, with where it was looked for.
    let missing = controller.manifest(
        "missing.hcl",
        "deployment \"prod\" \"other\" {\n  image    = \"a:1\"\n  env_file = [\"./nowhere.env\"]\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &missing]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("missing.hcl: env_file \"./nowhere.env\" cannot be read from"),
        "{refused:?}"
    );
}

#[test]
fn config_buckets_are_set_listed_and_unset_and_secrets_are_printed_only_when_asked() {
    let controller = controller_with_echo();
    let set = controller
        .vd(&[
            "config",
            "set",
            "prod/shared",
            "LOG_LEVEL=info",
            "REGION=eu",
        ])
        .success();
    assert!(
        set.stdout
            .contains("config prod/shared: set LOG_LEVEL, REGION"),
        "{set:?}"
    );
    assert!(
        set.stdout.contains("no workload takes prod/shared yet"),
        "{set:?}"
    );
    let secret = controller
        .vd(&[
            "config",
            "set",
            "prod/shared",
            "DATABASE_URL=postgres://u:hunter2@db/app",
            "--secret",
        ])
        .success();
    assert!(!secret.stdout.contains("hunter2"), "{secret:?}");

    let listed = controller.vd(&["config", "list", "prod/shared"]).success();
    assert_eq!(
        listed.stdout.lines().collect::<Vec<_>>(),
        ["DATABASE_URL=(secret)", "LOG_LEVEL=info", "REGION=eu"],
        "KEY=VALUE lines, as voodu prints them: {listed:?}"
    );
    assert!(
        !listed.stdout.contains("hunter2"),
        "a secret is never listed: {listed:?}"
    );
    let hidden = controller
        .vd(&["config", "get", "prod/shared", "DATABASE_URL"])
        .success();
    assert_eq!(hidden.stdout, "", "{hidden:?}");
    assert!(hidden
        .stderr
        .contains("DATABASE_URL is a secret — add --reveal to print it"));
    let revealed = controller
        .vd(&["config", "get", "prod/shared", "DATABASE_URL", "--reveal"])
        .success();
    assert_eq!(revealed.stdout, "postgres://u:hunter2@db/app\n");
    assert_eq!(
        controller
            .vd(&["config", "get", "prod/shared", "REGION"])
            .success()
            .stdout,
        "eu\n"
    );
    let buckets = controller
        .vd(&["config", "list", "-o", "json"])
        .success()
        .json();
    assert_eq!(buckets["buckets"], serde_json::json!(["prod/shared"]));

    controller
        .vd(&["config", "unset", "prod/shared", "REGION"])
        .success();
    let missing = controller.vd(&["config", "get", "prod/shared", "REGION"]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing
            .stderr
            .contains("config prod/shared has no variable REGION — it has DATABASE_URL, LOG_LEVEL"),
        "{missing:?}"
    );
    // voodu's forms: the bucket before its verb, and config:VERB.
    controller
        .vd(&["config", "prod/other", "set", "ZONE=b"])
        .success();
    controller
        .vd(&["config:set", "prod/other", "TIER=web"])
        .success();
    assert_eq!(
        controller.vd(&["config", "prod/other"]).success().stdout,
        "TIER=web\nZONE=b\n"
    );
    controller
        .vd(&["config", "prod/other", "unset", "ZONE", "TIER"])
        .success();
    // voodu's get: the variables whose names contain a pattern, in any
    // case; none is refused naming what there is.
    assert_eq!(
        controller
            .vd(&["config", "prod/shared", "get", "log"])
            .success()
            .stdout,
        "LOG_LEVEL=info\n"
    );
    let none = controller.vd(&["config", "prod/shared", "get", "ZONE"]);
    assert_eq!(none.code, 1, "{none:?}");
    assert!(
        none.stderr.contains("config prod/shared: no variable's name contains \"ZONE\" — it has DATABASE_URL, LOG_LEVEL"),
        "{none:?}"
    );
    // -o hcl: an env attribute to paste into a manifest; a secret is a
    // comment, never a value.
    assert_eq!(
        controller
            .vd(&["config", "get", "prod/shared", "-o", "hcl"])
            .success()
            .stdout,
        "env = {\n  # DATABASE_URL is a secret: vd config get prod/shared DATABASE_URL --reveal\n  LOG_LEVEL = \"info\"\n}\n"
    );
    // import: a .env file (or standard input) in one change; a line that
    // is no assignment sets nothing.
    let dotenv = controller.manifest(
        ".env.production",
        "# production\n\nexport RAILS_ENV=production\nGREETING=\"hello world\"\n",
    );
    let imported = controller
        .vd(&["config", "prod/web", "import", &dotenv])
        .success();
    assert!(
        imported
            .stdout
            .contains("config prod/web: set GREETING, RAILS_ENV"),
        "{imported:?}"
    );
    assert_eq!(
        controller.vd(&["config", "prod/web"]).success().stdout,
        "GREETING=hello world\nRAILS_ENV=production\n"
    );
    let piped = controller.vd_with_stdin(
        &["config", "import", "prod/web", "-", "--secret"],
        "API_KEY=abc123\n",
    );
    assert_eq!(piped.code, 0, "{piped:?}");
    let broken = controller.manifest("broken.env", "A=1\nnot an assignment\n");
    let refused = controller.vd(&["config", "import", "prod/web", &broken]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("write one NAME=value per line"),
        "{refused:?}"
    );
    assert_eq!(
        controller.vd(&["config", "prod/web"]).success().stdout,
        "API_KEY=(secret)\nGREETING=hello world\nRAILS_ENV=production\n",
        "the broken file set nothing"
    );
    // Neither the events nor the controller's log ever hold a value.
    let log = controller.log_text();
    assert!(!log.contains("hunter2"), "{log}");
    assert!(!log.contains("abc123"), "{log}");
}

#[test]
fn env_from_takes_a_buckets_variables_for_interpolation_and_refuses_a_bucket_with_none() {
    let controller = controller_with_echo();
    // voodu's own example: a webhook URL from the bucket, not the shell.
    let file = controller.manifest(
        "api.hcl",
        "deployment \"prod\" \"api\" {\n  image    = \"ghcr.io/myorg/api:${VERSION}\"\n  env_from = [\"prod/shared\"]\n  env = {\n    LOG_LEVEL = \"${LOG_LEVEL:-info}\"\n  }\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &file]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("undefined variable VERSION"),
        "{refused:?}"
    );
    // A bucket with no variables (a typo in its name?) is refused.
    let typo = controller.manifest(
        "typo.hcl",
        "deployment \"prod\" \"web\" {\n  image    = \"web:1\"\n  env_from = [\"prod/sahred\"]\n}\n",
    );
    let refused = controller.vd(&["apply", "-f", &typo]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("deployment/prod/web: env_from names config bucket prod/sahred, which has no variables — set them with vd config set prod/sahred KEY=VALUE, or remove it from env_from"),
        "{refused:?}"
    );
    assert!(
        refused.stderr.contains("  --> typo.hcl:3:14"),
        "at the attribute: {refused:?}"
    );
    controller
        .vd(&[
            "config",
            "set",
            "prod/shared",
            "VERSION=1.7",
            "LOG_LEVEL=warn",
        ])
        .success();
    // The shell wins over the bucket.
    controller
        .vd_with_env(&["apply", "-f", &file], &[("LOG_LEVEL", "debug")])
        .success();
    let described = controller
        .vd(&["describe", "deployment/prod/api", "-o", "json"])
        .success()
        .json();
    assert_eq!(described["core_spec"]["image"], "ghcr.io/myorg/api:1.7");
    assert_eq!(described["core_spec"]["env"]["LOG_LEVEL"], "debug");
    assert_eq!(
        described["core_spec"]["env_from"],
        serde_json::json!(["prod/shared"])
    );
    // A change to the bucket names the workload that takes it.
    let changed = controller
        .vd(&["config", "set", "prod/shared", "LOG_LEVEL=error"])
        .success();
    assert!(
        changed
            .stdout
            .contains("deployment/prod/api: rolling to the new env"),
        "{changed:?}"
    );
    // describe --show-env: what the replicas run with, each variable with
    // where it comes from; the bucket wins over the manifest's env, and a
    // secret's value is never shown.
    controller
        .vd(&[
            "config",
            "set",
            "prod/shared",
            "TOKEN=s3cr3t-value",
            "--secret",
        ])
        .success();
    let shown = controller
        .vd(&["describe", "deployment/prod/api", "--show-env"])
        .success();
    assert!(
        shown.stdout.contains("env (3, as new replicas take it)")
            && shown
                .stdout
                .contains("  LOG_LEVEL=error  (from prod/shared)\n")
            && shown
                .stdout
                .contains("  TOKEN=(secret)  (from prod/shared)\n")
            && shown.stdout.contains("  VERSION=1.7  (from prod/shared)\n"),
        "{shown:?}"
    );
    assert!(!shown.stdout.contains("s3cr3t-value"), "{shown:?}");
    let plain = controller
        .vd(&["describe", "deployment/prod/api"])
        .success();
    assert!(
        !plain.stdout.contains("as new replicas take it"),
        "{plain:?}"
    );
    let json = controller
        .vd(&[
            "describe",
            "deployment/prod/api",
            "--show-env",
            "-o",
            "json",
        ])
        .success()
        .json();
    assert_eq!(
        json["env"],
        serde_json::json!([
            {"key": "LOG_LEVEL", "value": "error", "from": "prod/shared"},
            {"key": "TOKEN", "value": null, "from": "prod/shared"},
            {"key": "VERSION", "value": "1.7", "from": "prod/shared"},
        ])
    );
}

/// What applying one of voodu's example files (`--skip-unsupported`, with
/// what the operator sets up first) stores: how many workloads, and how
/// many of its blocks are left out, each naming what to write instead.
type Applied = (usize, usize);

/// voodu's 43 example manifests and its Procfile example, by path under
/// `tests/fixtures/voodu-examples` (upstream's `examples/`), with what
/// each stores here. Those storing nothing hold only kinds this voodu
/// leaves out (asset, ingress, the redis macro).
const VOODU_EXAMPLE_FILES: &[(&str, Applied)] = &[
    ("app/everything.hcl", (1, 6)),
    ("asset/basic.hcl", (0, 2)),
    ("asset/with-deployment.hcl", (1, 2)),
    ("autoscale/sidekiq-worker.hcl", (1, 0)),
    ("autoscale/web-api-burst.hcl", (1, 1)),
    ("build/auto-detect.hcl", (1, 1)),
    ("build/custom-dockerfile.hcl", (1, 0)),
    ("build/go-monorepo.hcl", (3, 1)),
    ("build/statefulset-pgvector.hcl", (1, 0)),
    ("docker-passthrough/voodu.hcl", (3, 0)),
    ("fsw-esl/adapter.hcl", (1, 0)),
    ("fsw-esl/api.hcl", (1, 0)),
    ("fsw-esl/controller.hcl", (1, 0)),
    ("fsw-esl/events.hcl", (1, 0)),
    ("fsw-esl/jobs.hcl", (1, 0)),
    ("fsw-esl/rabbitmq.hcl", (1, 0)),
    ("fsw-esl/redis.hcl", (0, 1)),
    ("fullstack/deployment.hcl", (1, 1)),
    ("ingress/paths.hcl", (2, 5)),
    ("ingress/profiles.hcl", (0, 4)),
    ("init/multi-step.hcl", (1, 0)),
    ("init/rails-migrate.hcl", (1, 1)),
    ("init/statefulset-pg-bootstrap.hcl", (1, 0)),
    ("multi-env/app.voodu", (1, 1)),
    ("on_deploy/fanout-multi-target.hcl", (1, 2)),
    ("on_deploy/pagerduty-on-failure.hcl", (1, 3)),
    ("on_deploy/slack-block-kit.hcl", (1, 3)),
    ("on_deploy/slack-notify.hcl", (1, 0)),
    ("on_deploy/telegram-bot.hcl", (1, 0)),
    ("probes/deployment-http.hcl", (1, 1)),
    ("probes/postgres-pg-isready.hcl", (1, 0)),
    ("probes/rails-with-startup.hcl", (1, 1)),
    ("probes/statefulset-tcp.hcl", (1, 0)),
    ("procfile/Procfile", (4, 1)),
    ("registry/ghcr-private.hcl", (1, 1)),
    ("registry/multi-registry.hcl", (2, 2)),
    ("shared-scope/clowk-api.voodu", (1, 1)),
    ("shared-scope/clowk-app.voodu", (1, 1)),
    ("shared-scope/clowk-jobs.voodu", (1, 0)),
    ("shared-scope/clowk-lp.voodu", (1, 1)),
    ("stack/voodu.hcl", (1, 5)),
    ("statefulset/postgres-cluster.hcl", (1, 0)),
    ("statefulset/postgres.hcl", (1, 0)),
    ("statefulset/redis.hcl", (1, 0)),
];

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// voodu's own example files, as its repository publishes them, applied
/// as an operator moving an app does: with the variables exported, the
/// config buckets set and the build contexts (which the examples only
/// name) in place, and `--skip-unsupported` for the kinds this voodu
/// leaves out. 41 of the 44 store what they declare of the kinds that
/// run here (an `app` as its deployment); the other 3 hold only kinds
/// that stay out (assets, ingresses, the redis macro), each named with
/// what to write instead. Every file's figures are checked, so one that
/// starts or stops applying is seen.
#[test]
fn voodu_s_own_example_files_apply_as_an_operator_moving_an_app_would() {
    let controller = Controller::start();
    let work = tempfile::tempdir().unwrap();
    copy_tree(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/voodu-examples"),
        work.path(),
    );
    let at = |path: &str| work.path().join(path);
    // What the examples ask the operator to set up.
    for bucket in [
        "prod/shared",
        "prod/db-credentials",
        "prod/cache-credentials",
        "fsw/shared",
        "aws/cli",
    ] {
        controller
            .vd(&["config", "set", bucket, "EXAMPLE=1"])
            .success();
    }
    let write = |path: &str, text: &str| {
        std::fs::create_dir_all(at(path).parent().unwrap()).unwrap();
        std::fs::write(at(path), text).unwrap();
    };
    write("build/apps/esl/Dockerfile.fsw", "FROM scratch\n");
    write("fsw-esl/apps/esl/Dockerfile", "FROM scratch\nARG SERVICE\n");
    write("build/infra/postgres/Dockerfile.pgvector", "FROM scratch\n");
    for service in ["api", "worker", "scheduler"] {
        write(
            &format!("build/apps/{service}/go.mod"),
            "module example.com/x\n",
        );
    }
    write("build/package.json", "{}\n");
    write("procfile/Gemfile", "source \"https://rubygems.org\"\n");
    let variables = [
        "SLACK_WEBHOOK_URL",
        "DD_API_KEY",
        "PD_ROUTING_KEY",
        "OPSGENIE_KEY",
        "TELEGRAM_BOT_TOKEN",
        "TELEGRAM_CHAT_ID",
        "GHCR_USER",
        "GHCR_TOKEN",
        "HARBOR_USER",
        "HARBOR_TOKEN",
    ];
    let mut failures = Vec::new();
    let mut applying = 0;
    for (path, expected) in VOODU_EXAMPLE_FILES {
        let file = at(path);
        let output = std::process::Command::new(vd::vd_binary())
            .args([
                "apply",
                "--dry-run",
                "--skip-unsupported",
                "-o",
                "json",
                "-f",
            ])
            .arg(file.file_name().unwrap())
            .env("VOODU_ROOT", controller.root())
            .env("NO_COLOR", "1")
            .envs(
                variables
                    .iter()
                    .map(|name| (name, "https://hooks.example.com/x")),
            )
            .current_dir(file.parent().unwrap())
            .output()
            .expect("vd runs");
        let said = String::from_utf8_lossy(&output.stderr).into_owned();
        let Ok(report) = serde_json::from_slice::<serde_json::Value>(&output.stdout) else {
            failures.push(format!("{path}: refused: {said}"));
            continue;
        };
        let count = |key: &str| report[key].as_array().map_or(0, Vec::len);
        let got = (count("workloads"), count("skipped"));
        if got != *expected {
            failures.push(format!(
                "{path}: stores {got:?}, expected {expected:?}: {report}"
            ));
        }
        let left_out = report["skipped"].as_array().cloned().unwrap_or_default();
        for skipped in &left_out {
            let message = skipped["message"].as_str().unwrap_or_default();
            if !message.contains(" — ") {
                failures.push(format!(
                    "{path}: left out without what to write instead: {message}"
                ));
            }
        }
        if got.0 > 0 {
            applying += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        (applying, VOODU_EXAMPLE_FILES.len()),
        (41, 44),
        "voodu's example files that apply here"
    );
}
