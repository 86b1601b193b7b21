//! voodu's `job` and `cronjob` on the real engine, written as voodu's
//! `jobs.mdx` writes them (the image changed only): `vd apply` registers
//! and runs nothing; `vd run` runs a job once, streams what it writes and
//! exits with its code (124 past its timeout); finished runs are kept
//! within their history limits for `vd logs`; a cronjob runs on its
//! schedule, once a tick, honours `suspend` and `concurrency_policy`.
//! On CI (`CI=true`) a missing engine fails these tests.

use std::time::{Duration, Instant};

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::DockerRig;

fn echo_rig() -> Option<DockerRig> {
    DockerRig::with_rust_plugin("voodu_echo")
}

/// The containers of the rig's scope whose name starts with
/// `<scope>-<name>.run-`.
fn runs_of(rig: &DockerRig, name: &str) -> Vec<String> {
    let prefix = format!("{}-{name}.run-", rig.scope.name);
    rig.scope
        .containers()
        .into_iter()
        .map(|(container, _)| container)
        .filter(|container| container.starts_with(&prefix))
        .collect()
}

/// Waits up to `within` for `holds`; whether it held.
fn eventually(within: Duration, mut holds: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    loop {
        if holds() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The messages of a workload's events with `reason`, oldest first.
fn event_messages(rig: &DockerRig, workload: &str, reason: &str) -> Vec<String> {
    rig.controller
        .vd(&["events", workload, "--limit", "500", "-o", "json"])
        .success()
        .json()["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|event| event["reason"] == reason)
        .map(|event| event["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn vd_run_runs_a_job_once_streams_its_output_exits_with_its_code_and_keeps_its_history() {
    let Some(rig) = echo_rig() else { return };
    let scope = &rig.scope.name;
    let image = &rig.image.name;
    // voodu's jobs.mdx "Database seed", with its config bucket, and two
    // more: one that fails, one that runs past its timeout. The echo block
    // is validated like any plugin block, and never published to.
    rig.controller
        .vd(&[
            "config",
            &format!("{scope}/shared"),
            "set",
            "GREETING=from-the-bucket",
        ])
        .success();
    let jobs = rig.controller.manifest(
        "jobs.hcl",
        &format!(
            r#"job "{scope}" "seed" {{
  image    = "{image}"
  command  = ["job", "0"]
  env_from = ["{scope}/shared"]
  timeout  = "5m"
  successful_history_limit = 2
  echo "http" {{}}
}}

job "{scope}" "fails" {{
  image   = "{image}"
  command = ["job", "3"]
}}

job "{scope}" "slow" {{
  image   = "{image}"
  command = ["job", "0", "60000"]
  timeout = "2s"
}}
"#
        ),
    );
    let applied = rig.controller.vd(&["apply", "-f", &jobs]);
    assert_eq!(applied.code, 0, "{applied:?}");
    // Registered, not run.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        rig.scope.containers().is_empty(),
        "{:?}",
        rig.scope.containers()
    );
    let listed = rig
        .controller
        .vd(&["get", "jobs", "-o", "json"])
        .success()
        .json();
    let kinds: Vec<&str> = listed["workloads"]
        .as_array()
        .expect("workloads")
        .iter()
        .filter(|workload| workload["id"]["scope"] == scope.as_str())
        .filter_map(|workload| workload["id"]["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["job", "job", "job"], "{listed}");

    // vd run SCOPE/NAME, as voodu writes it: the output as it came, on
    // the stream it was written to, and the job's exit code.
    let ran = rig.controller.vd(&["run", &format!("{scope}/seed")]);
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout.contains("job says GREETING=from-the-bucket ")
            && ran.stdout.contains("job done, exiting with 0"),
        "{ran:?}"
    );
    assert!(ran.stderr.contains("job writes to stderr too"), "{ran:?}");
    assert!(
        ran.stderr.contains(&format!("job/{scope}/seed: run "))
            && ran.stderr.contains("exited with code 0 — vd logs "),
        "{ran:?}"
    );
    let failed = rig.controller.vd(&["run", &format!("job/{scope}/fails")]);
    assert_eq!(failed.code, 3, "{failed:?}");
    assert!(failed.stderr.contains("exited with code 3"), "{failed:?}");
    let slow = rig.controller.vd(&["run", &format!("{scope}/slow")]);
    assert_eq!(slow.code, 124, "{slow:?}");
    assert!(
        slow.stderr
            .contains("ran past its timeout of 2s and was killed"),
        "{slow:?}"
    );

    // History: seed keeps its 2 newest successful runs, fails its newest
    // failed one (voodu's default of 1).
    for _ in 0..2 {
        rig.controller
            .vd(&["run", &format!("{scope}/seed")])
            .success();
        assert_eq!(
            rig.controller.vd(&["run", &format!("{scope}/fails")]).code,
            3
        );
    }
    assert!(
        eventually(Duration::from_secs(15), || runs_of(&rig, "seed").len() == 2
            && runs_of(&rig, "fails").len() == 1),
        "seed: {:?}, fails: {:?}",
        runs_of(&rig, "seed"),
        runs_of(&rig, "fails")
    );

    // The kept runs are rows of vd get pods, and vd logs shows them, of
    // the job or of one run by its container's name.
    let pods = rig
        .controller
        .vd(&["get", "pods", &format!("job/{scope}/seed"), "-o", "json"])
        .success()
        .json();
    let rows = pods["replicas"].as_array().expect("replicas");
    assert_eq!(rows.len(), 2, "{pods}");
    assert!(
        rows.iter().all(|row| row["replica_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("run-"))
            && row["state"] == "exited"),
        "{pods}"
    );
    let logs = rig
        .controller
        .vd(&["logs", &format!("job/{scope}/seed")])
        .success();
    assert_eq!(
        logs.stdout
            .matches("job says GREETING=from-the-bucket ")
            .count(),
        2,
        "{logs:?}"
    );
    let newest = runs_of(&rig, "fails").remove(0);
    let one = rig.controller.vd(&["logs", &newest]).success();
    assert!(one.stdout.contains("job done, exiting with 3"), "{one:?}");

    // Each run is recorded.
    let workload = format!("job/{scope}/fails");
    assert_eq!(event_messages(&rig, &workload, "run-started").len(), 3);
    let failures = event_messages(&rig, &workload, "run-failed");
    assert_eq!(failures.len(), 3, "{failures:?}");
    assert!(failures[0].contains("exited with code 3"), "{failures:?}");

    // What is no job is refused, with what to do.
    let nothing = rig.controller.vd(&["run", &format!("{scope}/nothing")]);
    assert_eq!(nothing.code, 1, "{nothing:?}");
    assert!(
        nothing
            .stderr
            .contains("no job or cronjob of that name is stored"),
        "{nothing:?}"
    );

    // A delete takes every run with it.
    rig.controller
        .vd(&["delete", &format!("job/{scope}/seed")])
        .success();
    assert!(
        eventually(Duration::from_secs(15), || runs_of(&rig, "seed").is_empty()),
        "{:?}",
        runs_of(&rig, "seed")
    );
    assert_eq!(runs_of(&rig, "fails").len(), 1);
}

#[test]
fn a_job_refuses_what_serves_and_a_cronjob_needs_a_schedule_each_named_at_its_line() {
    let Some(rig) = echo_rig() else { return };
    let scope = &rig.scope.name;
    let image = &rig.image.name;
    let wrong = rig.controller.manifest(
        "wrong.hcl",
        &format!(
            r#"job "{scope}" "seed" {{
  image    = "{image}"
  replicas = 2
}}

cronjob "{scope}" "nightly" {{
  image = "{image}"
}}

cronjob "{scope}" "typo" {{
  image    = "{image}"
  schedule = "61 * * * *"
}}
"#
        ),
    );
    let refused = rig.controller.vd(&["apply", "-f", &wrong]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(&format!(
            "job/{scope}/seed: attribute \"replicas\" does not apply to a job"
        )) && refused.stderr.contains("wrong.hcl:3:"),
        "{refused:?}"
    );
    assert!(
        refused.stderr.contains(&format!(
            "cronjob/{scope}/nightly: a cronjob needs a schedule — write schedule = \"*/15 * * * *\""
        )),
        "{refused:?}"
    );
    assert!(
        refused
            .stderr
            .contains("schedule \"61 * * * *\" is not a cron expression")
            && refused.stderr.contains("wrong.hcl:12:"),
        "{refused:?}"
    );
    // Nothing of it was stored.
    let listed = rig
        .controller
        .vd(&["get", "workloads", "-o", "json"])
        .success()
        .json();
    assert!(!listed.to_string().contains(scope.as_str()), "{listed}");
}

#[test]
fn a_cronjob_runs_once_a_tick_keeps_its_history_limits_and_honours_suspend_and_forbid() {
    let Some(rig) = echo_rig() else { return };
    let scope = &rig.scope.name;
    let image = &rig.image.name;
    // Every 2 seconds (a leading seconds field); a run lasts 3 s under
    // Forbid, so every other tick finds one running and is skipped.
    let cron = |suspend: bool| {
        rig.controller.manifest(
            "cron.hcl",
            &format!(
                r#"cronjob "{scope}" "tick" {{
  schedule = "*/2 * * * * *"
  timezone = "America/Sao_Paulo"
  suspend  = {suspend}
  image    = "{image}"
  command  = ["job", "0"]
  successful_history_limit = 2
}}

cronjob "{scope}" "slow" {{
  schedule           = "*/2 * * * * *"
  concurrency_policy = "Forbid"
  suspend            = {suspend}
  image              = "{image}"
  command            = ["job", "0", "3000"]
}}
"#
            ),
        )
    };
    rig.controller.vd(&["apply", "-f", &cron(false)]).success();
    std::thread::sleep(Duration::from_secs(11));
    let started = event_messages(&rig, &format!("cronjob/{scope}/tick"), "run-started");
    // About one run a tick (5 or 6 in 11 s), each for a tick of its own.
    assert!((4..=6).contains(&started.len()), "{started:#?}");
    let ticks: std::collections::BTreeSet<&str> = started
        .iter()
        .filter_map(|message| message.split("for the tick of ").nth(1))
        .collect();
    assert_eq!(ticks.len(), started.len(), "a tick ran twice: {started:#?}");
    assert!(
        eventually(Duration::from_secs(5), || runs_of(&rig, "tick").len() <= 3),
        "{:?}",
        runs_of(&rig, "tick")
    );
    // Forbid: never two runs at once, and the ticks that found one running
    // were skipped and said so.
    let slow = format!("cronjob/{scope}/slow");
    let skipped = event_messages(&rig, &slow, "run-skipped");
    assert!(!skipped.is_empty(), "no tick was skipped");
    assert!(
        skipped[0].contains("concurrency_policy is \"Forbid\""),
        "{skipped:?}"
    );
    let slow_started = event_messages(&rig, &slow, "run-started");
    assert!((2..=4).contains(&slow_started.len()), "{slow_started:#?}");

    // Suspended: no tick runs.
    rig.controller.vd(&["apply", "-f", &cron(true)]).success();
    std::thread::sleep(Duration::from_secs(4));
    let before = event_messages(&rig, &format!("cronjob/{scope}/tick"), "run-started").len();
    std::thread::sleep(Duration::from_secs(5));
    let after = event_messages(&rig, &format!("cronjob/{scope}/tick"), "run-started").len();
    assert_eq!(before, after, "a suspended cronjob ran");
    // vd run still runs it, out of its schedule.
    let ran = rig
        .controller
        .vd(&["run", &format!("cronjob/{scope}/tick")])
        .success();
    assert!(ran.stdout.contains("job done"), "{ran:?}");
}

#[test]
fn a_build_mode_job_is_built_at_apply_and_vd_run_runs_the_image_it_built() {
    let Some(rig) = echo_rig() else { return };
    let scope = &rig.scope.name;
    // voodu's jobs.mdx "One-shot migration with build-mode".
    let tools = rig.controller.root().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(
        tools.join("Dockerfile.tools"),
        format!("FROM {}\nENV GREETING=built-in\n", rig.image.name),
    )
    .unwrap();
    let file = rig.controller.manifest(
        "migrate.hcl",
        &format!(
            r#"job "{scope}" "migrate" {{
  build {{
    context    = "./tools"
    dockerfile = "Dockerfile.tools"
  }}
  command = ["job", "0"]
}}
"#
        ),
    );
    let applied = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(applied.code, 0, "{applied:?}");
    assert!(
        applied
            .stderr
            .contains(&format!("building voodu/{scope}-migrate:")),
        "{applied:?}"
    );
    assert!(runs_of(&rig, "migrate").is_empty(), "apply runs nothing");
    let ran = rig
        .controller
        .vd(&["run", &format!("{scope}/migrate")])
        .success();
    assert!(
        ran.stdout.contains("job says GREETING=built-in "),
        "the run is of the image the apply built: {ran:?}"
    );
    let described = rig.describe_json("job", "migrate");
    let image = described["core_spec"]["image"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        image.starts_with(&format!("voodu/{scope}-migrate:")),
        "{described}"
    );
    rig.controller
        .vd(&["delete", &format!("job/{scope}/migrate")])
        .success();
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &image])
        .output();
}

/// voodu's Procfile mode, from its `procfile.mdx` (the commands changed
/// to the test image's): `vd apply -f Procfile` builds the Procfile's
/// directory, runs the `release:` line as a job before the processes
/// roll (Heroku's release phase), and runs each other line as a
/// deployment with `PORT` from 5000; the scope is kept in
/// `.voodu/app.json`. A release that fails applies no process.
#[test]
fn a_procfile_applies_as_voodu_maps_it_its_release_phase_first_and_a_failed_one_rolls_nothing() {
    let Some(rig) = echo_rig() else {
        return;
    };
    let scope = rig.scope.name.clone();
    let app = rig.controller.root().join("app");
    std::fs::create_dir_all(&app).unwrap();
    // The processes are shell-wrapped (`/bin/sh -c`), as in voodu: the
    // image gets busybox as its shell, and no entrypoint (as a language
    // handler's image has none).
    std::fs::copy("/bin/busybox", app.join("busybox"))
        .expect("busybox-static is installed (tests/run)");
    std::fs::write(
        app.join("Dockerfile"),
        format!(
            "FROM {}\nCOPY busybox /bin/sh\nENTRYPOINT []\nENV GREETING=from-the-procfile-build\n",
            rig.image.name
        ),
    )
    .unwrap();
    let procfile = |release_code: u8, web: &str| {
        std::fs::write(
            app.join("Procfile"),
            format!("# the app\nweb: {web}\nrelease: /echo-server job {release_code}\n"),
        )
        .unwrap();
    };
    procfile(0, "exec /echo-server");
    let applied = rig
        .controller
        .vd(&["apply", "-f", "app/Procfile", "--app", &scope])
        .success();
    assert!(
        applied
            .stdout
            .contains("job says GREETING=from-the-procfile-build"),
        "the release ran, from the image built of the directory: {applied:?}"
    );
    let link: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(app.join(".voodu/app.json")).unwrap())
            .unwrap();
    assert_eq!(link["scope"], scope.as_str());
    let web = format!("deployment/{scope}/web");
    let described = rig.describe_json("deployment", "web");
    assert_eq!(
        described["core_spec"]["command"],
        serde_json::json!(["/bin/sh", "-c", "exec /echo-server"])
    );
    assert_eq!(described["core_spec"]["env"]["PORT"], "5000");
    assert_eq!(described["core_spec"]["restart"], "on-failure");
    // It serves on the port voodu gave it.
    let health = rig
        .controller
        .vd(&["exec", &web, "--", "/echo-server", "health"]);
    assert_eq!(health.code, 0, "{health:?}");
    // The release ran before the web process was created (event ids rise
    // across workloads).
    let release_finished = rig
        .controller
        .vd(&["events", &format!("job/{scope}/release"), "-o", "json"])
        .success()
        .json()["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|event| event["reason"] == "run-finished")
        .and_then(|event| event["event_id"].as_i64())
        .expect("the release's run finished");
    let web_created = rig
        .controller
        .vd(&["events", &web, "-o", "json"])
        .success()
        .json()["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|event| event["event_id"].as_i64())
        .min()
        .expect("web's events");
    assert!(
        release_finished <= web_created,
        "{release_finished} {web_created}"
    );

    // A failing release phase: the new web command is not applied.
    procfile(3, "exec /echo-server --changed");
    let failed = rig.controller.vd(&["apply", "-f", "app/Procfile"]);
    assert_ne!(failed.code, 0, "{failed:?}");
    assert!(
        failed.stderr.contains(&format!(
            "the release phase (job/{scope}/release) failed, so the Procfile's processes were not applied"
        )),
        "{failed:?}"
    );
    let described = rig.describe_json("deployment", "web");
    assert_eq!(
        described["core_spec"]["command"],
        serde_json::json!(["/bin/sh", "-c", "exec /echo-server"]),
        "web kept its spec"
    );
    for workload in [web, format!("job/{scope}/release")] {
        rig.controller.vd(&["delete", &workload]).success();
    }
}
