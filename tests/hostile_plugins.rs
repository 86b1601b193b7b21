//! Plugins that misbehave at runtime, beyond the load-time fixtures: one
//! that floods the log from a thread of its own. The controller stays
//! responsive, the flood is rate-limited with a count of what was dropped,
//! and a stderr nobody reads never blocks it.

use std::time::{Duration, Instant};

use vd::Controller;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

/// A C failure fixture's path, as `vd plugins:install` takes it.
fn fixture(name: &str) -> String {
    voodu_tests::c_fixture(name).display().to_string()
}

/// The slowest of `times` runs of `vd get workloads`, each checked.
fn slowest_get(controller: &Controller, times: usize) -> Duration {
    (0..times)
        .map(|_| {
            let started = Instant::now();
            controller.vd(&["get", "workloads"]).success();
            std::thread::sleep(Duration::from_millis(100));
            started.elapsed() - Duration::from_millis(100)
        })
        .max()
        .unwrap_or_default()
}

/// Installs the fixture `name` beside `hang_publish`, and applies a
/// workload whose `name` block says `mode`: the apply that ends the
/// controller's worker inside the fixture's validate.
fn apply_what_ends_the_worker(controller: &Controller, name: &str, mode: &str) -> vd::Run {
    for plugin in [name, "hang_publish"] {
        controller
            .vd(&["plugins:install", &fixture(plugin)])
            .success();
    }
    let file = controller.manifest(
        "ends.vd",
        &format!("deployment \"prod\" \"ends\" {{\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  {name} {{ mode = \"{mode}\" }}\n}}\n"),
    );
    let ended = controller.vd(&["apply", "-f", &file]);
    assert_ne!(ended.code, 0, "{ended:?}");
    assert!(
        ended
            .stderr
            .contains("the controller ended this request's connection without an answer (its worker may have died and been started again) — see its log for why"),
        "{ended:?}"
    );
    ended
}

/// Why `vd plugins:list` says the plugin in the directory `name` did not
/// load.
fn load_failure(controller: &Controller, name: &str) -> serde_json::Value {
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    listed["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .find(|failure| {
            failure["path"]
                .as_str()
                .is_some_and(|path| path.ends_with(&format!("/{name}")))
        })
        .map(|failure| failure["error"].clone())
        .unwrap_or_else(|| panic!("{name} is not named: {listed}"))
}

#[test]
fn a_log_flood_is_rate_limited_counted_and_never_starves_the_controller() {
    let controller = Controller::start();
    let installed = Instant::now();
    controller
        .vd(&["plugins:install", &fixture("log_flood")])
        .success();
    let slowest = slowest_get(&controller, 20);
    let elapsed = installed.elapsed();
    let log = controller.log_text();
    let kept = log
        .lines()
        .filter(|line| line.contains("flood line"))
        .count();
    let dropped = controller.plugin_row("log_flood")["log_lines_dropped"]
        .as_u64()
        .expect("a count");
    println!(
        "log flood for {elapsed:?}: {kept} lines kept, {dropped} dropped, {} KiB of log, vd get at most {slowest:?}",
        log.len() / 1024
    );
    // The burst, the steady rate over the time it ran, and some slack.
    let allowed = 500 + (100.0 * elapsed.as_secs_f64()) as usize + 100;
    assert!(kept <= allowed, "{kept} lines kept, more than {allowed}");
    assert!(dropped > 10_000, "only {dropped} lines dropped");
    assert!(
        log.contains("lines were dropped"),
        "the log says nothing of the drops"
    );
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
}

#[test]
fn a_stderr_nobody_reads_never_blocks_the_controller() {
    let mut controller = Controller::start();
    controller
        .vd(&["plugins:install", &fixture("log_flood")])
        .success();
    // The flood fills the pipe's 64 KiB within a fraction of a second.
    controller.restart_with_unread_stderr();
    std::thread::sleep(Duration::from_secs(1));
    let slowest = slowest_get(&controller, 20);
    println!("stderr unread: vd get at most {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    assert_eq!(controller.plugin_row("log_flood")["health"], "ready");
}

#[test]
fn a_wedged_plugin_gets_a_fresh_instance_from_plugins_reload() {
    let controller = Controller::start();
    controller
        .vd(&["plugins:install", &fixture("hang")])
        .success();
    controller.manifest(
        "hang.vd",
        "deployment \"prod\" \"stuck\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  hang {}\n}\n",
    );
    let run = controller.vd(&["apply", "-f", "hang.vd"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        controller.plugin_row("hang")["health"],
        "wedged in validate"
    );
    let reloaded = controller.vd(&["plugins:reload", "hang"]).success();
    assert!(
        reloaded
            .stdout
            .starts_with("reloaded plugin hang 0.0.0: a fresh instance"),
        "{reloaded:?}"
    );
    assert!(
        reloaded
            .stdout
            .contains("1 earlier instance(s) of it stay in the controller until it restarts"),
        "{reloaded:?}"
    );
    assert_eq!(controller.plugin_row("hang")["health"], "ready");
    let missing = controller.vd(&["plugins:reload", "nothere"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing
            .stderr
            .contains("no plugin named \"nothere\" is installed"),
        "{missing:?}"
    );
}

#[test]
fn a_poisoned_plugin_gets_a_fresh_instance_from_plugins_reload_at_most_sixteen_times() {
    let controller = Controller::start();
    controller
        .vd(&[
            "plugins:install",
            &voodu_tests::rust_cdylib("voodu_fixture_panicky")
                .display()
                .to_string(),
        ])
        .success();
    controller.manifest(
        "panic.vd",
        "deployment \"prod\" \"p\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  panicky {}\n}\n",
    );
    let apply = || {
        let run = controller.vd(&["apply", "-f", "panic.vd"]);
        assert_eq!(run.code, 1, "{run:?}");
        run.stderr
    };
    assert!(apply().contains("panicked in validate"));
    assert!(apply().contains("plugin panicky is poisoned"));
    for reload in 1..=16 {
        let reloaded = controller.vd(&["plugins:reload", "panicky"]);
        assert_eq!(reloaded.code, 0, "reload {reload}: {reloaded:?}");
        // A fresh instance: it panics anew instead of being poisoned.
        let stderr = apply();
        assert!(
            stderr.contains("panicked in validate") && !stderr.contains("poisoned"),
            "reload {reload}: {stderr}"
        );
    }
    let refused = controller.vd(&["plugins:reload", "panicky"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("panicky was reloaded 16 times by this controller, and each reload leaves the old instance's thread and library behind — restart the controller"),
        "{refused:?}"
    );
}

#[test]
fn a_plugin_that_crashed_the_worker_is_quarantined_by_the_next_worker_started_at_once() {
    let mut controller = Controller::start();
    apply_what_ends_the_worker(&controller, "segv", "crash-in-validate");
    // The worker died with the plugin; the supervisor started a new one at
    // once, which quarantines it and serves, with its other plugins loaded.
    controller.wait_for_log("the controller's worker was killed by signal 11");
    assert_eq!(
        load_failure(&controller, "segv"),
        "quarantined: the controller crashed with SIGSEGV inside this plugin's validate, so it was not loaded — replace it with a fixed build (`vd plugins:install --replace FILE.so`), try it again (`vd plugins:reload segv`), or remove it (`vd plugins:remove segv`)"
    );
    assert_eq!(controller.plugin_row("hang_publish")["health"], "ready");
    let text = controller.vd(&["plugins:list"]).success();
    assert!(text.stderr.contains("quarantined"), "{text:?}");
    // It stays quarantined across restarts until the operator acts.
    controller.restart();
    assert!(controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json()["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .all(|row| row["name"] != "segv"));
    let reloaded = controller.vd(&["plugins:reload", "segv"]).success();
    assert!(
        reloaded.stdout.contains("(out of quarantine)"),
        "{reloaded:?}"
    );
    assert_eq!(controller.plugin_row("segv")["health"], "ready");
    controller.vd(&["plugins:remove", "segv"]).success();
}

#[test]
fn a_plugin_calling_exit_in_a_call_is_named_and_quarantined_by_the_next_worker_not_a_crash_loop() {
    let controller = Controller::start();
    apply_what_ends_the_worker(&controller, "exit_validate", "exit-in-validate");
    // The worker ended with the plugin's exit code, which named the call,
    // and a new worker was started at once: no restart by anyone.
    controller.wait_for_log("the controller's worker exited with code 3");
    assert!(
        controller.log_text().contains(
            "voodu: a plugin called exit() inside its validate, which ends the controller"
        ),
        "{}",
        controller.log_text()
    );
    // The new worker serves, with the plugin quarantined and named, and
    // the same apply is refused instead of ending the worker again.
    assert_eq!(
        load_failure(&controller, "exit_validate"),
        "quarantined: this plugin called exit() inside its validate, which ended the controller, so it was not loaded — replace it with a fixed build (`vd plugins:install --replace FILE.so`), try it again (`vd plugins:reload exit_validate`), or remove it (`vd plugins:remove exit_validate`)"
    );
    assert_eq!(controller.plugin_row("hang_publish")["health"], "ready");
    let refused = controller.vd(&["apply", "-f", "ends.vd"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("exit_validate"), "{refused:?}");
    controller.vd(&["get", "workloads"]).success();
}

#[test]
fn a_c_plugin_linked_without_its_json_library_is_refused_at_install_and_at_start_and_never_runs() {
    let unlinked = fixture("unlinked_cjson");
    let controller = Controller::start_with(false, |root| {
        // Already in the plugins directory when the controller starts.
        let directory = root.join("plugins/unlinked_cjson");
        std::fs::create_dir_all(&directory).unwrap();
        std::fs::copy(&unlinked, directory.join("libunlinked_cjson.so")).unwrap();
    });
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    let at_start = listed["failures"][0]["error"].as_str().unwrap_or_default();
    assert!(
        at_start.contains("libunlinked_cjson.so: needs the symbol `cJSON_")
            && at_start.contains(": -lcjson)"),
        "{listed}"
    );
    let installed = controller.vd(&["plugins:install", &unlinked]);
    assert_eq!(installed.code, 1, "{installed:?}");
    assert!(
        installed.stderr.contains("needs the symbol `cJSON_")
            && installed.stderr.contains("-Wl,-z,defs"),
        "{installed:?}"
    );
    // Nothing runs it: a block of its type is refused as a missing plugin,
    // and the controller goes on answering.
    controller.manifest(
        "unlinked.vd",
        "deployment \"prod\" \"json\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  unlinked_cjson {}\n}\n",
    );
    let applied = controller.vd(&["apply", "-f", "unlinked.vd"]);
    assert_eq!(applied.code, 1, "{applied:?}");
    assert!(
        applied.stderr.contains("unlinked_cjson") && !applied.stderr.contains("exited"),
        "{applied:?}"
    );
    controller.vd(&["get", "workloads"]).success();
    assert!(controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json()["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .all(|row| row["name"] != "unlinked_cjson"));
}

#[test]
fn a_library_constructor_that_hangs_neither_stalls_the_start_nor_sigterm() {
    let mut controller = Controller::start_with(false, |root| {
        let directory = root.join("plugins/ctor_hang");
        std::fs::create_dir_all(&directory).unwrap();
        std::fs::copy(fixture("ctor_hang"), directory.join("libctor_hang.so")).unwrap();
        // A healthy plugin that loads after it (in lexical order).
        let echo = root.join("plugins/echo");
        std::fs::create_dir_all(&echo).unwrap();
        std::fs::copy(
            voodu_tests::rust_cdylib("voodu_echo"),
            echo.join("libvoodu_echo.so"),
        )
        .unwrap();
    });
    // It started (the test rig waited for its socket) and serves.
    controller.vd(&["get", "workloads"]).success();
    let listed = controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    let failure = listed["failures"][0]["error"].as_str().unwrap_or_default();
    assert!(
        failure.contains("libctor_hang.so: the library did not finish loading within 5s (a constructor that never returns?)"),
        "{listed}"
    );
    assert_eq!(controller.plugin_row("echo")["health"], "ready");
    let started = Instant::now();
    let status = controller.terminate(Duration::from_secs(15));
    println!(
        "SIGTERM with a stuck library load: exited in {:?} with {status:?}",
        started.elapsed()
    );
    let status = status.expect("the controller ends on SIGTERM");
    assert_eq!(status.code(), Some(0), "{status:?}");
}
