//! A lost or restored store never deletes what runs, on the real engine:
//! the store's identity on every container tells the controller which
//! replicas it has no record of, and those are reported and left running
//! until the operator adopts them (apply) or prunes them. On CI
//! (`CI=true`) a missing engine fails these tests.

use std::path::Path;
use std::time::Duration;

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

fn manifest(rig: &DockerRig, name: &str, replicas: u32) -> String {
    rig.controller.manifest(
        &format!("{name}.hcl"),
        &format!(
            "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n  echo \"http\" {{}}\n}}\n",
            scope = rig.scope.name,
            image = rig.image.name,
        ),
    )
}

/// Removes the store and its WAL files, as a wrong cleanup would.
fn delete_store(root: &Path) {
    for file in ["state.db", "state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(root.join(file));
    }
}

/// The container ids of the rig's scope whose name starts with `prefix`.
fn container_ids(rig: &DockerRig, prefix: &str) -> Vec<String> {
    let mut ids: Vec<String> = rig
        .scope
        .containers()
        .into_iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(_, id)| id)
        .collect();
    ids.sort();
    ids
}

/// `vd get pods --orphans -o json`: the orphans' container names.
fn orphan_names(rig: &DockerRig) -> Vec<String> {
    let listed = rig
        .controller
        .vd(&["get", "pods", "--orphans", "-o", "json"])
        .success()
        .json();
    let mut names: Vec<String> = listed["replicas"]
        .as_array()
        .expect("a list of replicas")
        .iter()
        .map(|replica| {
            replica["container_name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

/// Waits up to 10 s for the controller's log to report `needle`.
fn wait_for_report(rig: &DockerRig, needle: &str) -> String {
    rig.controller
        .wait_for_log_line(needle, Duration::from_secs(10))
}

#[test]
fn a_deleted_store_removes_no_replica_and_an_apply_adopts_them_without_a_restart() {
    let Some(mut rig) = echo_rig() else { return };
    let web = manifest(&rig, "web", 3);
    rig.controller.vd(&["apply", "-f", &web]).success();
    let prefix = format!("{}-web.", rig.scope.name);
    let before = container_ids(&rig, &prefix);
    assert_eq!(before.len(), 3);
    rig.controller.restart_after(delete_store);
    // The start's resync sees the three replicas; they are reported, with
    // what to do, and none is removed.
    let workload = format!("deployment/{}/web", rig.scope.name);
    let line = wait_for_report(&rig, &format!("3 replicas of {workload}"));
    assert!(
        line.contains("were made by another store (")
            && line.contains("they are left running — apply their manifests to adopt them, or vd prune --orphans to remove them"),
        "{line}"
    );
    // A resync later, still all there.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(container_ids(&rig, &prefix), before, "nothing was removed");
    assert_eq!(orphan_names(&rig).len(), 3);
    let events = rig
        .controller
        .vd(&["events", &workload, "-o", "json"])
        .success()
        .stdout;
    assert!(events.contains("\"orphaned\""), "{events}");
    // Applying the same manifest adopts them: the same containers.
    rig.controller.vd(&["apply", "-f", &web]).success();
    assert_eq!(
        container_ids(&rig, &prefix),
        before,
        "adopted, not replaced"
    );
    assert!(orphan_names(&rig).is_empty());
    let events = rig
        .controller
        .vd(&["events", &workload, "-o", "json"])
        .success()
        .stdout;
    assert!(events.contains("\"adopted\""), "{events}");
}

#[test]
fn prune_names_the_orphans_then_removes_them() {
    let Some(mut rig) = echo_rig() else { return };
    rig.controller
        .vd(&["apply", "-f", &manifest(&rig, "old", 2)])
        .success();
    rig.controller.restart_after(delete_store);
    let workload = format!("deployment/{}/old", rig.scope.name);
    wait_for_report(&rig, &format!("2 replicas of {workload}"));
    let dry = rig
        .controller
        .vd(&["prune", "--orphans", "--dry-run"])
        .success();
    assert_eq!(
        dry.stdout.matches("would remove replica").count(),
        2,
        "{}",
        dry.stdout
    );
    assert_eq!(rig.scope.containers().len(), 2, "a dry run removes nothing");
    let pruned = rig.controller.vd(&["prune", "--orphans"]).success();
    let named = pruned.stdout.find("removing replica").expect("named first");
    let removed = pruned
        .stdout
        .find(": removed replica")
        .expect("then removed");
    assert!(named < removed, "{}", pruned.stdout);
    assert!(rig.scope.containers().is_empty());
    assert!(orphan_names(&rig).is_empty());
}

#[test]
fn a_restored_backup_reports_the_workloads_it_lacks_as_orphans_and_keeps_its_own() {
    let Some(mut rig) = echo_rig() else { return };
    rig.controller
        .vd(&["apply", "-f", &manifest(&rig, "kept", 1)])
        .success();
    let backup = rig.controller.root().join("backup.db");
    let backed_up = rig
        .controller
        .vd(&["store", "backup", backup.to_str().expect("a UTF-8 path")])
        .success();
    assert!(
        backed_up.stdout.starts_with("backed up the store ("),
        "{}",
        backed_up.stdout
    );
    // A second backup to the same file is refused rather than overwriting.
    let again = rig
        .controller
        .vd(&["store", "backup", backup.to_str().expect("a UTF-8 path")]);
    assert_eq!(again.code, 1);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    // Two applies the backup does not have.
    rig.controller
        .vd(&["apply", "-f", &manifest(&rig, "later", 2)])
        .success();
    rig.controller
        .vd(&["apply", "-f", &manifest(&rig, "newest", 1)])
        .success();
    let scope = rig.scope.name.clone();
    let ids = |rig: &DockerRig, name: &str| container_ids(rig, &format!("{scope}-{name}."));
    let (kept, later, newest) = (ids(&rig, "kept"), ids(&rig, "later"), ids(&rig, "newest"));
    rig.controller.restart_after(|root| {
        delete_store(root);
        std::fs::copy(root.join("backup.db"), root.join("state.db")).expect("restored");
    });
    let line = wait_for_report(&rig, &format!("2 replicas of deployment/{scope}/later"));
    assert!(
        line.contains("made by this store, which has no record of them"),
        "{line}"
    );
    wait_for_report(&rig, &format!("1 replica of deployment/{scope}/newest"));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(ids(&rig, "later"), later, "never removed");
    assert_eq!(ids(&rig, "newest"), newest, "never removed");
    assert_eq!(ids(&rig, "kept"), kept, "the backup's own workload runs on");
    assert_eq!(orphan_names(&rig).len(), 3);
}

#[test]
fn a_corrupt_store_stops_the_controller_naming_the_file_and_removes_nothing() {
    let Some(mut rig) = echo_rig() else { return };
    rig.controller
        .vd(&["apply", "-f", &manifest(&rig, "web", 1)])
        .success();
    let before = rig.scope.containers();
    rig.controller.stop();
    delete_store(rig.controller.root());
    std::fs::write(rig.controller.root().join("state.db"), vec![0x5a_u8; 8192]).expect("written");
    let started = std::process::Command::new(vd::vd_binary())
        .args([
            "--root",
            rig.controller.root().to_str().expect("UTF-8"),
            "controller",
        ])
        .output()
        .expect("vd runs");
    let stderr = String::from_utf8_lossy(&started.stderr);
    assert_eq!(started.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("state.db cannot be used")
            && stderr.contains("nothing was run or removed")
            && stderr.contains("restore a backup"),
        "{stderr}"
    );
    assert_eq!(rig.scope.containers(), before);
}

/// A job's finished run is kept for `vd logs`; when the store that knew
/// the job is lost, the run is an orphan like a replica: listed, then
/// removed by `vd prune --orphans`.
#[test]
fn a_job_run_left_by_a_lost_store_is_an_orphan_that_prune_removes() {
    let Some(mut rig) = echo_rig() else { return };
    let file = rig.controller.manifest(
        "seed.hcl",
        &format!(
            "job \"{scope}\" \"seed\" {{\n  image   = \"{image}\"\n  command = [\"job\", \"0\"]\n}}\n",
            scope = rig.scope.name,
            image = rig.image.name,
        ),
    );
    rig.controller.vd(&["apply", "-f", &file]).success();
    rig.controller
        .vd(&["run", &format!("job/{}/seed", rig.scope.name)])
        .success();
    let kept = container_ids(&rig, &format!("{}-seed.run-", rig.scope.name));
    assert_eq!(kept.len(), 1, "the finished run is kept");
    rig.controller.restart_after(delete_store);
    let listed = orphan_names(&rig);
    assert!(
        matches!(listed.as_slice(), [name] if name.contains("-seed.run-")),
        "{listed:?}"
    );
    let pruned = rig.controller.vd(&["prune", "--orphans"]).success();
    assert!(pruned.stdout.contains("-seed.run-"), "{}", pruned.stdout);
    assert!(rig.scope.containers().is_empty(), "pruned");
    assert!(orphan_names(&rig).is_empty());
}

#[test]
fn a_failed_init_step_s_container_left_by_a_lost_store_is_an_orphan_that_prune_removes() {
    let Some(mut rig) = echo_rig() else { return };
    let file = rig.controller.manifest(
        "stuck.hcl",
        &format!(
            "deployment \"{scope}\" \"stuck\" {{\n  image = \"{image}\"\n  init \"migrate\" {{\n    command = [\"init\", \"migrate\", \"3\"]\n  }}\n}}\n",
            scope = rig.scope.name,
            image = rig.image.name,
        ),
    );
    let failed = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(failed.code, 1, "{failed:?}");
    let kept = container_ids(&rig, &format!("{}-stuck.", rig.scope.name));
    assert_eq!(kept.len(), 1, "the failed step's container is kept");
    rig.controller.restart_after(delete_store);
    let listed = orphan_names(&rig);
    assert!(
        matches!(listed.as_slice(), [name] if name.ends_with(".init-migrate")),
        "{listed:?}"
    );
    let pruned = rig.controller.vd(&["prune", "--orphans"]).success();
    assert!(pruned.stdout.contains(".init-migrate"), "{}", pruned.stdout);
    assert!(rig.scope.containers().is_empty(), "pruned");
    assert!(orphan_names(&rig).is_empty());
}
