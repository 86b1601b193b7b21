//! What an operator reads, on the real engine: every line belongs to the
//! command that printed it, counts cover the rollout, one event per thing
//! that happened, and no terminal escape codes reach a pipe. On CI
//! (`CI=true`) a missing engine fails these tests.

use std::time::Duration;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::{docker, DockerRig};

fn echo_rig() -> Option<DockerRig> {
    DockerRig::with_rust_plugin("voodu_echo")
}

/// A deployment of the rig's scope with an echo block; `body` goes inside.
fn manifest(rig: &DockerRig, file: &str, name: &str, body: &str) -> String {
    rig.controller.manifest(
        file,
        &format!(
            "deployment \"{scope}\" \"{name}\" {{\n  ports = [\"8084\"]\n{body}\n  echo \"http\" {{}}\n}}\n",
            scope = rig.scope.name,
        ),
    )
}

/// The reasons and messages of a workload's events, oldest first.
fn events(rig: &DockerRig, name: &str) -> Vec<(String, String)> {
    let listed = rig
        .controller
        .vd(&[
            "events",
            &format!("deployment/{}/{name}", rig.scope.name),
            "--limit",
            "200",
            "-o",
            "json",
        ])
        .success()
        .json();
    listed["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|event| {
            (
                event["reason"].as_str().unwrap_or_default().to_owned(),
                event["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn count(events: &[(String, String)], reason: &str) -> usize {
    events.iter().filter(|(r, _)| r == reason).count()
}

#[test]
fn a_mistyped_image_is_named_with_the_fix_once_and_no_escape_code_reaches_a_pipe() {
    let Some(rig) = echo_rig() else { return };
    let typo = manifest(&rig, "typo.hcl", "typo", "  image = \"voodu-ecoh:latest\"");
    for no_color in [false, true] {
        let applied = rig
            .controller
            .vd_with_no_color(&["apply", "-f", &typo], no_color);
        assert_eq!(applied.code, 1, "{applied:?}");
        let all = format!("{}{}", applied.stdout, applied.stderr);
        assert!(!all.contains('\u{1b}'), "NO_COLOR={no_color}: {all:?}");
        assert!(
            applied.stderr.contains(
                "the image voodu-ecoh:latest is not on this host and could not be pulled"
            ) && applied
                .stderr
                .contains("`docker images` lists the images here"),
            "{applied:?}"
        );
        assert!(
            applied.stdout.contains(if no_color {
                // Applied again unchanged: stored, and still not running.
                ": stored, not rolled out (revision 1"
            } else {
                ": stored, not running (revision 1"
            }) && applied.stdout.contains("1 stored but not running")
                && !applied.stdout.contains("1 created"),
            "{applied:?}"
        );
        // The failure is the answer's error, once: not also a warning.
        assert_eq!(
            applied.stderr.matches("did not converge").count(),
            1,
            "{applied:?}"
        );
    }
    // Passes keep failing the same way with back-off (1 s, 2 s, ...): one
    // converge-failed event for them all.
    std::thread::sleep(Duration::from_secs(4));
    let recorded = events(&rig, "typo");
    assert!(count(&recorded, "create-failed") >= 2, "{recorded:#?}");
    assert_eq!(count(&recorded, "converge-failed"), 1, "{recorded:#?}");
    // A delete says nothing of the starts that failed before it.
    let deleted = rig
        .controller
        .vd(&["delete", &format!("deployment/{}/typo", rig.scope.name)]);
    assert_eq!(deleted.code, 0, "{deleted:?}");
    assert!(!deleted.stderr.contains("could not start"), "{deleted:?}");
}

#[test]
fn rollout_status_of_a_workload_never_stored_says_so_and_runs_no_pass() {
    let Some(rig) = echo_rig() else { return };
    let never = format!("deployment/{}/never", rig.scope.name);
    let status = rig.controller.vd(&["rollout", "status", &never]);
    assert_eq!(status.code, 1, "{status:?}");
    assert!(
        status
            .stderr
            .contains(&format!("{never}: no such workload")),
        "{status:?}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !rig.controller.log_text().contains(&never),
        "no pass was run for it: {}",
        rig.controller.log_text()
    );
}

#[test]
fn a_rolling_update_counts_its_replacements_and_each_restart_is_one_event() {
    let Some(rig) = echo_rig() else { return };
    let image = rig.image.name.clone();
    let version = |v: u32, replicas: u32| {
        manifest(
            &rig,
            &format!("web-{v}-{replicas}.hcl"),
            "web",
            &format!("  image = \"{image}\"\n  replicas = {replicas}\n  env = {{ V = \"{v}\" }}"),
        )
    };
    rig.controller
        .vd(&["apply", "-f", &version(1, 3)])
        .success();
    let rolled = rig
        .controller
        .vd(&["apply", "-f", &version(2, 3)])
        .success();
    for n in 1..=3 {
        assert!(
            rolled
                .stderr
                .contains(&format!("replacing replica {n}/3 (rolling update)")),
            "{rolled:?}"
        );
    }
    assert!(
        !rolled.stderr.contains("starting replica 1/1"),
        "{rolled:?}"
    );
    // Scaled down by two at once: both drained in one step, in the plural.
    let scaled = rig
        .controller
        .vd(&["apply", "-f", &version(2, 1)])
        .success();
    assert!(scaled.stderr.contains("draining replicas "), "{scaled:?}");
    // describe shows the rollout in a section of its own.
    let described = rig
        .controller
        .vd(&["describe", &format!("deployment/{}/web", rig.scope.name)])
        .success();
    let lines: Vec<&str> = described.stdout.lines().collect();
    let heading = lines
        .iter()
        .position(|line| *line == "rollout")
        .unwrap_or_else(|| panic!("a rollout section: {described:?}"));
    assert!(
        lines[heading + 1].starts_with("  status     converged (revision 3)"),
        "{described:?}"
    );
    // A replica killed is restarted, and that is one event.
    let (name, _) = rig.scope.containers().pop().expect("a replica");
    docker(&["kill", &name]);
    voodu_tests::wait_until(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || match count(&events(&rig, "web"), "restarted") {
            0 => Err("never restarted"),
            _ => Ok(()),
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    let recorded = events(&rig, "web");
    assert_eq!(count(&recorded, "restarted"), 1, "{recorded:#?}");
    assert!(
        !recorded
            .iter()
            .any(|(reason, message)| reason == "replica" && message.contains("restarted")),
        "{recorded:#?}"
    );
}

#[test]
fn a_later_apply_never_shows_an_earlier_rollouts_steps_or_failures() {
    let Some(rig) = echo_rig() else { return };
    let image = rig.image.name.clone();
    let version = |v: u32, probe_port: u16| {
        manifest(
            &rig,
            &format!("web-{v}.hcl"),
            "web",
            &format!(
                "  image = \"{image}\"\n  replicas = 2\n  env = {{ V = \"{v}\" }}\n  progress_deadline = \"2s\"\n  probes {{\n    readiness {{\n      tcp_socket {{ port = {probe_port} }}\n      period = \"300ms\"\n    }}\n  }}"
            ),
        )
    };
    rig.controller
        .vd(&["apply", "-f", &version(1, 8084)])
        .success();
    // A broken revision: not ready within its deadline, retried with
    // back-off meanwhile.
    let broken = rig.controller.vd(&["apply", "-f", &version(2, 9997)]);
    assert_eq!(broken.code, 1, "{broken:?}");
    assert!(broken.stderr.contains(":9997"), "{broken:?}");
    std::thread::sleep(Duration::from_millis(500));
    // The fix: nothing of revision 2's probe or retries in its output.
    let fixed = rig
        .controller
        .vd(&["apply", "-f", &version(3, 8084)])
        .success();
    assert!(!fixed.stderr.contains("9997"), "{fixed:?}");
    assert!(!fixed.stderr.contains("retrying in"), "{fixed:?}");
    // Nor in a rollback's.
    let rolled = rig
        .controller
        .vd(&[
            "rollback",
            &format!("deployment/{}/web", rig.scope.name),
            "--to",
            "1",
        ])
        .success();
    assert!(!rolled.stderr.contains("9997"), "{rolled:?}");
    assert!(
        rolled
            .stdout
            .contains("rolled back to revision 1 as revision 4"),
        "{rolled:?}"
    );
}

#[test]
fn describe_shows_no_set_of_a_block_a_later_revision_dropped() {
    let Some(rig) = echo_rig() else { return };
    let image = rig.image.name.clone();
    let with = |blocks: &str| {
        rig.controller.manifest(
            &format!("blocks-{}.hcl", blocks.len()),
            &format!(
                "deployment \"{scope}\" \"web\" {{\n  image = \"{image}\"\n  ports = [\"8084\"]\n{blocks}\n}}\n",
                scope = rig.scope.name,
            ),
        )
    };
    rig.controller
        .vd(&[
            "apply",
            "-f",
            &with("  echo \"http\" {}\n  echo \"sip\" {}"),
        ])
        .success();
    let published = |rig: &DockerRig| -> Vec<String> {
        rig.describe_json("deployment", "web")["publications"]
            .as_array()
            .expect("publications")
            .iter()
            .map(|publication| {
                publication["labels"][0]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(published(&rig), ["http", "sip"]);
    rig.controller
        .vd(&["apply", "-f", &with("  echo \"http\" {}")])
        .success();
    assert_eq!(published(&rig), ["http"], "the dropped block's set is gone");
}

#[test]
fn two_workloads_started_together_each_count_to_their_total() {
    let Some(rig) = echo_rig() else { return };
    let image = rig.image.name.clone();
    let both = rig.controller.manifest(
        "both.hcl",
        &["alpha", "beta"]
            .iter()
            .map(|name| {
                format!(
                    "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  replicas = 3\n  ports = [\"8084\"]\n}}\n",
                    scope = rig.scope.name,
                )
            })
            .collect::<String>(),
    );
    let applied = rig.controller.vd(&["apply", "-f", &both]).success();
    for name in ["alpha", "beta"] {
        let workload = format!("deployment/{}/{name}", rig.scope.name);
        for n in 1..=3 {
            assert!(
                applied
                    .stderr
                    .contains(&format!("{workload}: starting replica {n}/3")),
                "{workload} counts to 3: {applied:?}"
            );
        }
    }
}

#[test]
fn stats_shows_each_replicas_cpu_memory_network_and_restarts_from_the_engine() {
    let Some(rig) = echo_rig() else { return };
    let image = rig.image.name.clone();
    let web = format!("deployment/{}/web", rig.scope.name);
    rig.controller
        .vd(&[
            "apply",
            "-f",
            &manifest(
                &rig,
                "web.hcl",
                "web",
                &format!(
                    "  image = \"{image}\"\n  replicas = 2\n  resources {{\n    limits {{ memory = \"64Mi\" }}\n  }}"
                ),
            ),
        ])
        .success();
    let stats = |workload: &str| {
        rig.controller
            .vd(&["stats", workload, "-o", "json"])
            .success()
            .json()["replicas"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let rows = stats(&web);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        let usage = &row["usage"];
        assert!(usage["memory_bytes"].as_u64() > Some(0), "{row}");
        // The limit the manifest set, as the engine enforces it.
        assert_eq!(usage["memory_limit_bytes"], 64 * 1024 * 1024, "{row}");
        assert!(usage["cpu_percent"].as_f64() >= Some(0.0), "{row}");
        assert_eq!(row["restarts"], 0, "{row}");
    }
    // A replica killed behind the controller's back shows its restart.
    let (name, _) = rig.scope.containers().pop().expect("a replica");
    docker(&["kill", &name]);
    let restarted =
        voodu_tests::poll_until(Duration::from_secs(20), Duration::from_millis(200), || {
            let rows = stats(&web);
            let restarts: u64 = rows.iter().filter_map(|row| row["restarts"].as_u64()).sum();
            let running = rows.iter().filter(|row| row["state"] == "running").count();
            if restarts == 1 && running == 2 {
                Ok(rows)
            } else {
                Err(format!("{rows:?}"))
            }
        })
        .expect("the killed replica is restarted and counted");
    assert!(restarted.iter().all(|row| row["usage"].is_object()));
    // The table an operator reads: every replica, with units.
    let table = rig.controller.vd(&["stats"]).success();
    assert!(
        table.stdout.contains("MEMORY / LIMIT") && table.stdout.contains("64.00 MiB"),
        "{table:?}"
    );
    assert_eq!(
        table
            .stdout
            .lines()
            .filter(|line| line.contains(&rig.scope.name))
            .count(),
        2,
        "{table:?}"
    );
    // describe names the limit in an operator's units.
    let described = rig.controller.vd(&["describe", &web]).success();
    assert!(
        described.stdout.contains("memory 64.00 MiB"),
        "{described:?}"
    );
    // A replica without a memory limit is shown without one, never
    // against the host's memory.
    let free = format!("deployment/{}/free", rig.scope.name);
    rig.controller
        .vd(&[
            "apply",
            "-f",
            &manifest(&rig, "free.hcl", "free", &format!("  image = \"{image}\"")),
        ])
        .success();
    let rows = stats(&free);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0]["usage"]["memory_bytes"].as_u64() > Some(0),
        "{rows:?}"
    );
    assert!(
        rows[0]["usage"].get("memory_limit_bytes").is_none(),
        "{rows:?}"
    );
    let table = rig.controller.vd(&["stats", &free]).success();
    assert!(table.stdout.contains(" / no limit"), "{table:?}");
    // voodu's refs and flags: a scope, SCOPE/NAME, -k with -n.
    let rows_of = |args: &[&str]| -> Vec<String> {
        let mut line = vec!["stats"];
        line.extend_from_slice(args);
        line.extend(["-o", "json"]);
        let answer = rig.controller.vd(&line).success().json();
        answer["replicas"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|row| {
                row["workload"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    let scope = rig.scope.name.clone();
    assert_eq!(rows_of(&[&scope]).len(), 3, "web's two and free's one");
    assert_eq!(rows_of(&[&format!("{scope}/free")]), ["free"], "SCOPE/NAME");
    assert_eq!(
        rows_of(&["-k", "deployment", "-s", &scope, "-n", "web"]).len(),
        2,
        "-k -s -n"
    );
    assert!(rows_of(&["-k", "statefulset", "-s", &scope]).is_empty());
    // -w asks again every 2 s: two answers, each with both replicas.
    let mut watching = std::process::Command::new(vd::vd_binary())
        .arg("--root")
        .arg(rig.controller.root())
        .args(["stats", &web, "-w", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("vd stats -w runs");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        watching.stdout.take().expect("its stdout"),
    ));
    for _ in 0..2 {
        let line = lines.next().expect("an answer").expect("a line");
        let answer: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(
            answer["replicas"].as_array().map(Vec::len),
            Some(2),
            "{line}"
        );
    }
    let _ = watching.kill();
    let _ = watching.wait();
    // A workload with no replicas has no stats to show.
    assert!(rig
        .controller
        .vd(&["stats", "deployment/nowhere/none", "-o", "json"])
        .success()
        .json()["replicas"]
        .as_array()
        .is_some_and(Vec::is_empty));
}
