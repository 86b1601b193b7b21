//! `vd controller upgrade` and SIGHUP, without Docker: the new worker runs
//! the binary now at the controller's path and takes over; a binary that
//! fails, or one that cannot load a plugin the old worker serves, leaves
//! the old worker serving and says why. The same under load through
//! traffik is in `traffik_docker.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use vd::{vd_binary, Controller, ReplaceableBinary as Binary};

/// The worker `vd version -o json` names.
fn worker(controller: &Controller) -> serde_json::Value {
    let version = controller.vd(&["version", "-o", "json"]).success().json();
    version["worker"].clone()
}

fn wait_for_worker_pid(controller: &Controller, not: u64) -> u64 {
    voodu_tests::poll_until(Duration::from_secs(20), Duration::from_millis(20), || {
        let pid = worker(controller)["pid"].as_u64().ok_or(())?;
        if pid == not {
            Err(())
        } else {
            Ok(pid)
        }
    })
    .expect("a new worker serves")
}

#[test]
fn an_upgrade_starts_the_binary_now_at_the_controllers_path_and_a_failing_one_leaves_the_old_worker_serving(
) {
    let binary = Binary::new();
    let controller = Controller::start_from_binary(&binary.path(), false);
    let first = worker(&controller);
    assert_eq!(first["binary"], binary.path().display().to_string());
    let first_pid = first["pid"].as_u64().expect("a pid");
    assert_eq!(first_pid, u64::from(controller.pid()));
    let applied = controller.manifest(
        "web.hcl",
        "deployment \"prod\" \"web\" {\n  image = \"nginx:1\"\n}\n",
    );
    controller.vd(&["apply", "-f", &applied]).success();

    // A binary that exits at once: the upgrade fails, naming how, and the
    // old worker serves on.
    binary.put(b"#!/bin/sh\necho 'this vd is broken' >&2\nexit 3\n");
    let refused = controller.vd(&["controller", "upgrade"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("the controller was not upgraded: the new worker")
            && refused
                .stderr
                .contains("exited with code 3 before it served"),
        "{refused:?}"
    );
    assert_eq!(worker(&controller)["pid"].as_u64(), Some(first_pid));
    assert!(controller.log_text().contains("this vd is broken"));

    // The real binary again: the new worker serves, with the state the old
    // one stored.
    binary.put(&std::fs::read(vd_binary()).expect("vd"));
    let upgraded = controller
        .vd(&["controller", "upgrade", "-o", "json"])
        .success()
        .json();
    let second_pid = upgraded["pid"].as_u64().expect("the new worker's pid");
    assert_ne!(second_pid, first_pid);
    assert_eq!(worker(&controller)["pid"].as_u64(), Some(second_pid));
    assert_eq!(
        upgraded["supervisor_pid"].as_u64(),
        Some(u64::from(controller.supervisor_pid()))
    );
    voodu_tests::wait_until_gone(first_pid as u32);
    let listed = controller.vd(&["get", "workloads"]).success();
    assert!(listed.stdout.contains("web"), "{listed:?}");
    // The old worker stopped cleanly, after the new one served.
    assert!(controller
        .log_text()
        .contains("upgraded: the new worker serves"));
    controller.wait_for_log("the old worker exited with code 0");

    // SIGHUP to the supervisor does the same.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(controller.supervisor_pid() as libc::pid_t, libc::SIGHUP) };
    let third_pid = wait_for_worker_pid(&controller, second_pid);
    assert_ne!(third_pid, first_pid);
    controller.vd(&["apply", "-f", &applied]).success();
}

/// The one `.so` installed for `plugin` under the root.
fn installed_library(root: &Path, plugin: &str) -> PathBuf {
    let directory = root.join("plugins").join(plugin);
    std::fs::read_dir(&directory)
        .expect("the plugin's directory")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|extension| extension == "so"))
        .unwrap_or_else(|| panic!("no library in {}", directory.display()))
}

#[test]
fn an_upgrade_whose_worker_cannot_load_a_plugin_the_old_one_serves_is_called_off() {
    let controller = Controller::start();
    let echo = voodu_tests::rust_cdylib("voodu_echo");
    controller
        .vd(&["plugins:install", &echo.display().to_string()])
        .success();
    let before = worker(&controller)["pid"].as_u64();
    // The installed file is damaged under the running worker: the next
    // worker cannot load it.
    let library = installed_library(controller.root(), "echo");
    std::fs::remove_file(&library).expect("removed");
    std::fs::write(&library, b"not a shared object").expect("written");
    let refused = controller.vd(&["controller", "upgrade"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("the new worker could not load plugin echo, which this one serves"),
        "{refused:?}"
    );
    assert_eq!(worker(&controller)["pid"].as_u64(), before);
    let listed = controller.vd(&["plugins:list"]).success();
    assert!(listed.stdout.contains("echo"), "{listed:?}");
    let validated = controller.manifest(
        "web.hcl",
        "deployment \"prod\" \"web\" {\n  image = \"nginx:1\"\n  ports = [\"8084\"]\n  echo \"a\" {}\n}\n",
    );
    controller.vd(&["apply", "-f", &validated]).success();
}
