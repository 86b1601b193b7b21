//! What `vd` streams while it follows the engine: `--no-wait` and `rollout status`, `get pods -w` and `events -w`, Ctrl-C, logs, the spinner in a real terminal, and dry runs, JSON steps and rollback.
//! On CI (`CI=true`) a missing engine fails these tests.

use std::time::Duration;

use serde_json::Value;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/recorder_rig.rs"]
mod recorder_rig;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/tmux.rs"]
mod tmux;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::{docker, voodu0_ip};
use recorder_rig::*;

#[test]
fn no_wait_returns_once_stored_and_rollout_status_follows_to_the_end() {
    let Some(rig) = Rig::start() else { return };
    let file = rig.manifest("deployment", "web", "  replicas = 2", "");
    let stored = rig
        .controller
        .vd(&["apply", "--no-wait", "-f", &file])
        .success();
    assert!(!stored.stderr.contains("started replica"), "{stored:?}");
    assert!(stored.stdout.contains("created (revision 1"), "{stored:?}");
    let id = format!("deployment/{}/web", rig.scope.name);
    let followed = rig.controller.vd(&["rollout", "status", &id]).success();
    assert!(
        followed.stdout.contains(&format!("{id}: converged")),
        "{followed:?}"
    );
    assert_eq!(rig.scope.containers().len(), 2);
    // Applying the same again while nothing is left to do waits for
    // nothing, and says so.
    let again = rig.apply(&file);
    assert!(again.stdout.contains("nothing changed"), "{again:?}");
}

#[test]
fn pods_and_events_stream_changes_as_they_happen() {
    let Some(rig) = Rig::start() else { return };
    let id = format!("deployment/{}/web", rig.scope.name);
    let (mut pods, pod_lines) = spawn_vd(&rig, &["get", "pods", "-w", "-o", "json", &id]);
    let (mut events, event_lines) = spawn_vd(&rig, &["events", "-w", "-o", "json", &id]);
    std::thread::sleep(Duration::from_millis(300));
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 1", ""));
    let added = read_until(&pod_lines, Duration::from_secs(10), |line| {
        serde_json::from_str::<Value>(line)
            .is_ok_and(|v| v["change"] == "added" && v["replica"]["state"] == "running")
    });
    let change: Value = serde_json::from_str(added.last().unwrap()).unwrap();
    let replica = change["replica"]["replica_id"].as_str().unwrap().to_owned();
    let started = read_until(&event_lines, Duration::from_secs(10), |line| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| {
            v["reason"] == "replica"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&format!("started replica {replica}")))
        })
    });
    for line in &started {
        let event: Value = serde_json::from_str(line).expect("one JSON object per line");
        assert_eq!(event["workload"]["scope"], rig.scope.name.as_str());
    }
    docker(&["kill", &rig.container_name("web", &replica)]);
    // The controller restarts it at once, so the watch may see it exited,
    // or only running again with a new start: either way, modified.
    read_until(&pod_lines, Duration::from_secs(10), |line| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| {
            v["change"] == "modified" && v["replica"]["replica_id"] == replica.as_str()
        })
    });
    read_until(&event_lines, Duration::from_secs(10), |line| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| v["reason"] == "died")
    });
    let _ = pods.kill();
    let _ = events.kill();
    let _ = pods.wait();
    let _ = events.wait();
}

#[test]
fn ctrl_c_stops_following_a_rollout_never_the_rollout_itself() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let scaled = rig.manifest(
        "deployment",
        "web",
        "  replicas = 1\n  drain_timeout = \"3s\"",
        "    drain = \"never\"",
    );
    let apply = std::process::Command::new(vd::vd_binary())
        .args(["apply", "-f", &scaled])
        .env("VOODU_ROOT", rig.controller.root())
        .env("NO_COLOR", "1")
        .current_dir(rig.controller.root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vd runs");
    wait_for_calls(&rig.calls, Duration::from_secs(10), |calls| {
        calls.iter().any(|c| c.call == "drain")
    });
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(apply.id() as i32, libc::SIGINT) };
    let output = apply.wait_with_output().expect("vd ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    let id = format!("deployment/{}/web", rig.scope.name);
    assert!(
        stderr.contains(&format!(
            "stopped waiting; the rollout goes on in the controller (Ctrl-C never cancels it) — `vd rollout status {id}` follows it again"
        )),
        "{stderr}"
    );
    // The drain runs out its budget and the scale-down finishes anyway.
    let followed = rig.controller.vd(&["rollout", "status", &id]).success();
    assert!(followed.stdout.contains("converged"), "{followed:?}");
    assert_eq!(rig.scope.containers().len(), 1);
}

#[test]
fn logs_show_every_replicas_lines_with_its_id_and_follow_new_ones() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest("deployment", "web", "  replicas = 2", ""));
    let mut ids = rig.last_published_ids();
    ids.sort();
    let workload = format!("deployment/{}/web", rig.scope.name);
    let listening = |id: &str| format!("{id} | echo-server {id} listening on port 8084");

    let logs = rig.controller.vd(&["logs", &workload]).success();
    for id in &ids {
        assert!(
            logs.stdout.lines().any(|line| line == listening(id)),
            "{logs:?}"
        );
    }
    let json = rig
        .controller
        .vd(&["logs", &workload, "--tail", "1", "-o", "json"])
        .success();
    let mut lines: Vec<Value> = json
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    lines.sort_by_key(|line| line["replica_id"].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        lines.len(),
        2,
        "one line per replica with --tail 1: {json:?}"
    );
    assert_eq!(lines[0]["replica_id"], ids[0].as_str());
    assert!(rig
        .controller
        .vd(&["logs", &workload, "--since", "1h"])
        .success()
        .stdout
        .contains(&listening(&ids[0])));
    // voodu's forms: --since a time, -n, --grep, --no-prefix.
    let an_hour_ago =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() - Duration::from_secs(3600))
            .to_string();
    let only = rig
        .controller
        .vd(&[
            "logs",
            &workload,
            "--since",
            &an_hour_ago,
            "-n",
            "5",
            "--grep",
            &format!("echo-server {}", ids[0]),
            "--no-prefix",
        ])
        .success();
    assert_eq!(
        only.stdout.lines().collect::<Vec<_>>(),
        [format!("echo-server {} listening on port 8084", ids[0])],
        "{only:?}"
    );
    let in_the_future =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(3600))
            .to_string();
    assert_eq!(
        rig.controller
            .vd(&["logs", &workload, "--since", &in_the_future])
            .success()
            .stdout,
        "",
        "nothing was written after a time to come"
    );

    // Following: a line a replica writes later appears, with its id.
    let (mut follower, lines) = spawn_vd(&rig, &["logs", "-f", &workload]);
    // Both replicas' earlier lines come first.
    let mut earlier = 0;
    read_until(&lines, Duration::from_secs(10), |line| {
        if line == listening(&ids[0]) || line == listening(&ids[1]) {
            earlier += 1;
        }
        earlier == 2
    });
    let ip = voodu0_ip(&rig.container_name("web", &ids[1]));
    let mut said = std::net::TcpStream::connect((ip.as_str(), 8084)).expect("the replica listens");
    std::io::Write::write_all(&mut said, b"GET /say/hello-logs HTTP/1.0\r\n\r\n").expect("sent");
    let said_line = format!("{} | said hello-logs", ids[1]);
    read_until(&lines, Duration::from_secs(10), |line| line == said_line);
    let _ = follower.kill();
    let _ = follower.wait();

    let unknown = rig
        .controller
        .vd(&["logs", &format!("deployment/{}/nothing", rig.scope.name)]);
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(unknown.stderr.contains("no such workload"), "{unknown:?}");
}

#[test]
fn in_a_real_terminal_the_spinner_shows_the_drain_with_its_clock_and_leaves_plain_lines() {
    if !engine::tool_available("tmux") {
        return;
    }
    let Some(rig) = Rig::start() else { return };
    let body = |replicas: u32| format!("  replicas = {replicas}\n  drain_timeout = \"6s\"");
    rig.apply(&rig.manifest("deployment", "web", &body(2), "    drain = \"never\""));
    let file = rig.manifest("deployment", "web", &body(1), "    drain = \"never\"");
    let command = format!(
        "cd {root} && VOODU_ROOT={root} {vd} apply -f {file}; echo exit=$?; sleep 60",
        root = rig.controller.root().display(),
        vd = vd::vd_binary().display(),
    );
    let terminal = tmux::Terminal::start(&format!("vd-{}", rig.scope.name), &command, 160, 40);

    // While the drain runs, the spinner names it, its block, and its clock
    // against the budget.
    let during =
        voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(100), || {
            let pane = terminal.pane();
            let ticking = pane
                .lines()
                .find(|line| line.contains("draining replica"))
                .is_some_and(|line| {
                    line.contains("s of 6s") && !line.trim_end().ends_with("0s of 6s")
                });
            if ticking {
                Ok(pane)
            } else {
                Err(format!("no drain on screen: {pane}"))
            }
        });
    let drain_line = during
        .lines()
        .find(|line| line.contains("draining replica"))
        .expect("the drain line");
    assert!(
        drain_line.contains("(recorder block)"),
        "the block being drained is named: {during}"
    );
    // Once done: plain lines, the warning, and no spinner left behind.
    let after = terminal.wait_for("exit=", Duration::from_secs(30), "the apply never ended");
    println!(
        "--- during the drain ---\n{}\n--- after ---\n{}",
        during.trim_end(),
        after.trim_end()
    );
    assert!(after.contains("exit=0"), "{after}");
    assert!(
        after.contains("had not finished draining within its 6s budget"),
        "the warning is printed: {after}"
    );
    assert!(after.contains("removed replica"), "{after}");
    // The warning is printed when the budget runs out: before the removal
    // it led to and before the apply's summary, not after.
    let position = |needle: &str| {
        after
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} is on screen: {after}"))
    };
    assert!(
        position("had not finished draining") < position("removed replica")
            && position("removed replica") < position(": updated (revision 2"),
        "warning, then removal, then the summary: {after}"
    );
    assert!(
        !after.lines().any(|line| line.contains("draining replica")),
        "the spinner's last frame is not left behind: {after}"
    );
}

#[test]
fn on_the_engine_dry_runs_run_nothing_json_steps_stream_filters_filter_and_rollback_rolls() {
    let Some(rig) = Rig::start() else { return };
    let body = |replicas: u32| format!("  replicas = {replicas}\n  drain_timeout = \"1s\"");
    let web = format!("deployment/{}/web", rig.scope.name);
    rig.apply(&rig.manifest("deployment", "web", &body(2), "    drain = \"never\""));
    rig.apply(&rig.manifest("deployment", "other", "  replicas = 1", ""));
    let containers_of = |name: &str| {
        rig.scope
            .containers()
            .into_iter()
            .filter(|(container, _)| container.starts_with(&format!("{}-{name}.", rig.scope.name)))
            .count()
    };
    assert_eq!((containers_of("web"), containers_of("other")), (2, 1));

    // `get pods KIND/SCOPE/NAME` shows that workload's replicas only.
    let pods = rig
        .controller
        .vd(&["get", "pods", &web, "-o", "json"])
        .success()
        .json();
    let names: Vec<&str> = pods["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter_map(|replica| replica["workload"]["name"].as_str())
        .collect();
    assert_eq!(names, ["web", "web"], "{pods:#}");

    // A dry run of a scale-up and an image change runs nothing.
    let events_before = rig.describe_json("deployment", "web")["events"]
        .as_array()
        .map_or(0, Vec::len);
    let planned = rig
        .controller
        .vd(&[
            "apply",
            "--dry-run",
            "-f",
            &rig.manifest(
                "deployment",
                "web",
                &format!("{}\n  env = {{ A = \"1\" }}", body(4)),
                "    drain = \"never\"",
            ),
        ])
        .success();
    assert!(
        planned.stdout.contains("dry run: nothing was stored"),
        "{planned:?}"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(containers_of("web"), 2, "a dry run starts nothing");
    let described = rig.describe_json("deployment", "web");
    assert_eq!(described["revision"], 1);
    assert_eq!(
        described["events"].as_array().map_or(0, Vec::len),
        events_before,
        "a dry run records nothing"
    );

    // `-o json` streams the runtime steps too: the drain as a step, its
    // overrun as a warning, the removal as a runtime line.
    let scaled = rig.controller.vd(&[
        "apply",
        "-o",
        "json",
        "-f",
        &rig.manifest("deployment", "web", &body(1), "    drain = \"never\""),
    ]);
    assert_eq!(scaled.code, 0, "{scaled:?}");
    let steps: Vec<Value> = scaled
        .stderr
        .lines()
        .map(|line| serde_json::from_str(line).expect("each step is a JSON line"))
        .collect();
    let has = |kind: &str, text: &str| {
        steps.iter().any(|step| {
            step["step"] == kind
                && step["workload"] == web.as_str()
                && step["message"].as_str().is_some_and(|m| m.contains(text))
        })
    };
    assert!(has("step", "draining replica"), "{steps:#?}");
    assert!(
        has("warning", "had not finished draining within its 1s budget"),
        "{steps:#?}"
    );
    assert!(has("runtime", "(scale down)"), "{steps:#?}");
    assert_eq!(containers_of("web"), 1);

    // Rollback to revision 1 rolls the replicas back to two, as revision 3.
    let rolled = rig.controller.vd(&["rollback", &web, "--to", "1"]);
    assert_eq!(rolled.code, 0, "{rolled:?}");
    assert_eq!(containers_of("web"), 2, "{rolled:?}");
    assert_eq!(rig.describe_json("deployment", "web")["revision"], 3);
    assert_eq!(containers_of("other"), 1, "other workloads are untouched");
}

#[test]
fn exec_runs_a_command_in_a_replica_prints_what_it_writes_and_exits_with_its_code_and_logs_and_exec_take_a_pod_name(
) {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest(
        "deployment",
        "web",
        "  replicas = 2\n  env = { INIT_LOG = \"/dev/null\" }",
        "",
    ));
    let workload = format!("deployment/{}/web", rig.scope.name);
    let mut ids = rig.last_published_ids();
    ids.sort();
    // Standard output, and exit 0.
    let resolved = rig.controller.vd(&[
        "exec",
        &workload,
        "--",
        "/echo-server",
        "resolve",
        &format!("web.{}", rig.scope.name),
    ]);
    assert_eq!(resolved.code, 0, "{resolved:?}");
    assert_eq!(
        resolved.stdout.lines().count(),
        2,
        "both replicas: {resolved:?}"
    );
    // voodu's `vd run SCOPE/NAME CMD...`: the same, in a running replica.
    let run = rig.controller.vd(&[
        "run",
        &format!("{}/web", rig.scope.name),
        "/echo-server",
        "resolve",
        &format!("web.{}", rig.scope.name),
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().count(), 2, "{run:?}");
    // -e, -w and -u reach the command (docker exec's).
    let shaped = rig.controller.vd(&[
        "exec",
        "-e",
        "GREETING=hi",
        "-w",
        "/proc",
        "-u",
        "65534",
        &workload,
        "--",
        "/echo-server",
        "job",
        "0",
    ]);
    assert_eq!(shaped.code, 0, "{shaped:?}");
    assert!(
        shaped
            .stdout
            .contains("job says GREETING=hi cwd=/proc uid=65534"),
        "{shaped:?}"
    );
    let bad = rig
        .controller
        .vd(&["exec", "-e", "=x", &workload, "--", "true"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    // A chosen replica; standard error, and its own exit code.
    let failed = rig.controller.vd(&[
        "exec",
        &workload,
        "--replica",
        &ids[1],
        "--",
        "/echo-server",
        "init",
        "probe",
        "3",
    ]);
    assert_eq!(failed.code, 3, "{failed:?}");
    assert_eq!(failed.stdout, "", "{failed:?}");
    assert_eq!(
        failed.stderr, "init probe: done, exiting with 3\n",
        "{failed:?}"
    );
    // A replica as voodu names it: SCOPE/NAME.ID, or its container.
    let by_name = rig.controller.vd(&[
        "exec",
        &format!("{}/web.{}", rig.scope.name, ids[0]),
        "--",
        "/echo-server",
        "init",
        "named",
        "4",
    ]);
    assert_eq!(by_name.code, 4, "{by_name:?}");
    let logs = rig
        .controller
        .vd(&["logs", &rig.container_name("web", &ids[0])])
        .success();
    assert!(
        logs.stdout.lines().count() > 0
            && logs
                .stdout
                .lines()
                .all(|line| line.starts_with(&format!("{} | ", ids[0]))),
        "only that replica's lines: {logs:?}"
    );
    let nowhere = rig.controller.vd(&["logs", "no-such.pod"]);
    assert_eq!(nowhere.code, 2, "{nowhere:?}");
    assert!(
        nowhere.stderr.contains("nor a replica vd get pods lists"),
        "{nowhere:?}"
    );
    let unknown = rig
        .controller
        .vd(&["exec", &workload, "--replica", "zzzz", "--", "true"]);
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(
        unknown.stderr.contains(&format!(
            "{workload}: no running replica zzzz here — running here: "
        )) && ids.iter().all(|id| unknown.stderr.contains(id.as_str())),
        "{unknown:?}"
    );
    // -t needs a terminal (the interactive cases are the test below).
    let interactive = rig.controller.vd(&["exec", "-it", &workload, "--", "sh"]);
    assert_eq!(interactive.code, 2, "{interactive:?}");
    assert!(
        interactive
            .stderr
            .contains("standard input is not one — drop -t"),
        "{interactive:?}"
    );
}

/// The state of a container (`running`, `exited`), or `gone`.
fn state_of(container: &str) -> String {
    let inspected = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.State.Status}}", container])
        .output()
        .expect("docker runs");
    let state = String::from_utf8_lossy(&inspected.stdout).into_owned();
    if !inspected.status.success() || state.trim().is_empty() {
        "gone".to_owned()
    } else {
        state.trim().to_owned()
    }
}

#[test]
fn stop_drains_and_parks_a_replica_through_rollouts_and_start_brings_it_back_anew() {
    let Some(rig) = Rig::start() else { return };
    let s = rig.scope.name.clone();
    let web = |release: &str| {
        rig.manifest(
            "deployment",
            "web",
            &format!("  replicas = 2\n  env = {{ RELEASE = \"{release}\" }}"),
            "",
        )
    };
    rig.apply(&web("1"));
    let mut ids = rig.last_published_ids();
    ids.sort();
    let parked = ids[0].clone();
    let parked_container = rig.container_name("web", &parked);
    // By its container's name, as voodu's vd stop takes a pod.
    let stopped = rig.controller.vd(&["stop", &parked_container]).success();
    assert!(
        stopped.stdout.contains(&format!("stopped {parked}")),
        "{stopped:?}"
    );
    // Withdrawn from the set, then drained, then stopped; kept.
    let calls = rig.calls();
    let drains = of_kind(&calls, "drain");
    assert!(
        drains
            .iter()
            .any(|call| call.request["replica"]["replica_id"] == parked.as_str()),
        "{drains:?}"
    );
    assert!(!rig.last_published_ids().contains(&parked));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(state_of(&parked_container), "exited", "not started again");
    // A rollout replaces the other replica and leaves the parked one.
    rig.apply(&web("2"));
    assert_eq!(state_of(&parked_container), "exited");
    let running = rig.last_published_ids();
    assert_eq!(running.len(), 1, "{running:?}");
    assert!(
        !ids.contains(&running[0]),
        "the other one was replaced: {running:?}"
    );
    let events = rig
        .controller
        .vd(&["events", &format!("deployment/{s}/web"), "--limit", "100"])
        .success();
    assert!(
        events
            .stdout
            .contains(&format!("vd stop: replica {parked} drained and stopped")),
        "{events:?}"
    );
    // voodu's SCOPE/NAME: every frozen replica, created anew.
    let started = rig.controller.vd(&["start", &format!("{s}/web")]).success();
    assert!(
        started.stdout.contains(&format!("started {parked}")),
        "{started:?}"
    );
    let came_back = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(200));
        rig.last_published_ids().len() == 2
    });
    assert!(came_back, "{:?}", rig.last_published_ids());
    assert_eq!(state_of(&parked_container), "gone");
    // Nothing is stopped now: start says so.
    let again = rig.controller.vd(&["start", &format!("{s}/web")]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(
        again
            .stderr
            .contains("no replica of it is stopped by vd stop"),
        "{again:?}"
    );
    let transient = rig
        .controller
        .vd(&["stop", "--no-freeze", &format!("{s}/web")]);
    assert_eq!(transient.code, 2, "{transient:?}");
}

#[test]
fn a_stopped_statefulset_ordinal_keeps_its_number_and_comes_back_as_itself() {
    let Some(rig) = Rig::start() else { return };
    let s = rig.scope.name.clone();
    rig.apply(&rig.manifest("statefulset", "db", "  replicas = 2", ""));
    let ordinal_one = rig.container_name("db", "1");
    assert_eq!(state_of(&ordinal_one), "running");
    rig.controller.vd(&["stop", &format!("{s}/db.1")]).success();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(state_of(&ordinal_one), "exited", "ordinal 1 stays stopped");
    assert_eq!(state_of(&rig.container_name("db", "0")), "running");
    rig.controller
        .vd(&["start", &format!("statefulset/{s}/db"), "--replica", "1"])
        .success();
    let back = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(200));
        state_of(&ordinal_one) == "running"
    });
    assert!(back, "ordinal 1 runs again: {}", state_of(&ordinal_one));
}

#[test]
fn exec_i_pipes_standard_input_to_the_command_and_exec_it_runs_it_in_a_terminal() {
    let Some(rig) = Rig::start() else { return };
    rig.apply(&rig.manifest(
        "deployment",
        "web",
        "  replicas = 1\n  env = { INIT_LOG = \"/dev/null\" }",
        "",
    ));
    let workload = format!("deployment/{}/web", rig.scope.name);
    // -i: what vd reads goes to the command's standard input, to its end.
    let mut piped = std::process::Command::new(vd::vd_binary())
        .args(["exec", "-i", &workload, "--", "/echo-server", "cat"])
        .env("VOODU_ROOT", rig.controller.root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vd runs");
    {
        use std::io::Write;
        let mut stdin = piped.stdin.take().expect("stdin");
        stdin.write_all(b"one\ntwo\n").expect("written");
    }
    let ended = piped.wait_with_output().expect("vd ends");
    let stdout = String::from_utf8_lossy(&ended.stdout);
    assert_eq!(ended.status.code(), Some(0), "{ended:?}");
    assert_eq!(
        stdout, "terminal: no\ngot: one\ngot: two\nstdin ended\n",
        "{ended:?}"
    );
    // -t without a terminal is refused with what to do.
    let refused = rig
        .controller
        .vd(&["exec", "-it", &workload, "--", "/echo-server", "cat"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("drop -t"), "{refused:?}");

    // -it in a real terminal: the command sees one, keys reach it as
    // typed, and Ctrl-D ends its input.
    if !engine::tool_available("tmux") {
        return;
    }
    let command = format!(
        "VOODU_ROOT={root} {vd} exec -it {workload} -- /echo-server cat; echo exit=$?; sleep 60",
        root = rig.controller.root().display(),
        vd = vd::vd_binary().display(),
    );
    let terminal = tmux::Terminal::start(&format!("vd-it-{}", rig.scope.name), &command, 100, 30);
    let within = Duration::from_secs(10);
    terminal.wait_for(
        "terminal: yes",
        Duration::from_secs(20),
        "no terminal in the command",
    );
    terminal.send(&["hello there", "Enter"]);
    terminal.wait_for(
        "got: hello there",
        within,
        "the line did not reach the command",
    );
    // Its terminal is this one's size, and follows it when it changes.
    terminal.send(&["size", "Enter"]);
    terminal.wait_for(
        "size: 100x30",
        within,
        "the terminal's size is not this one's",
    );
    terminal.resize(120, 40);
    voodu_tests::wait_until(within, Duration::from_millis(300), || {
        terminal.send(&["size", "Enter"]);
        let pane = terminal.pane();
        if pane.contains("size: 120x40") {
            Ok(())
        } else {
            Err(format!("the terminal's new size did not follow: {pane}"))
        }
    });
    terminal.send(&["C-d"]);
    let after = terminal.wait_for("exit=", within, "vd exec -it did not end on Ctrl-D");
    println!("--- vd exec -it in tmux ---\n{}", after.trim_end());
    assert!(
        after.contains("stdin ended") && after.contains("exit=0"),
        "{after}"
    );
}
