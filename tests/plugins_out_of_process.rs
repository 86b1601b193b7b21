//! Plugins out of process (`voodu_plugin_host::out_of_process`), through
//! the host's own API in this test process: the child is `vd`, as in the
//! controller. It answers as the same plugin in process does; a child
//! that is killed, or crashes inside a call, fails only that call, is
//! started again, and gets back what the old one was handed; a call that
//! overruns its bound kills only the child; the host survives it all and
//! quarantines nothing.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use voodu_plugin_abi::messages::{Block, Endpoint, PublishRequest, ValidateRequest, WorkloadKind};
use voodu_plugin_host::{load_plugin, CallError, LoadError, LoadOptions, PluginHandle};
use voodu_tests::{c_fixture, recorded_calls, rust_cdylib};

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

/// This process's plugins' children are `vd`, which serves as one.
fn children_are_vd() {
    voodu_plugin_host::out_of_process::set_child_program(vd::vd_binary());
}

fn out_of_process(path: &Path) -> PluginHandle {
    children_are_vd();
    load_plugin(
        path,
        &LoadOptions {
            out_of_process: true,
            ..LoadOptions::default()
        },
    )
    .unwrap_or_else(|error| panic!("{} loads out of process: {error}", path.display()))
}

fn block(block_type: &str, spec: serde_json::Value) -> Block {
    Block {
        block_type: block_type.into(),
        labels: vec!["http".into()],
        spec,
    }
}

fn validate_request(block_type: &str, spec: serde_json::Value) -> ValidateRequest {
    ValidateRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: block(block_type, spec),
        workload: json!({"image": "ghcr.io/acme/esl:1.2", "replicas": 1, "ports": ["8084"]}),
    }
}

fn publish_request(block_type: &str, spec: serde_json::Value, generation: u64) -> PublishRequest {
    PublishRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: block(block_type, spec),
        generation,
        endpoints: vec![Endpoint {
            replica_id: "a1b2".into(),
            address: "10.0.0.7:8084".into(),
            node: None,
        }],
    }
}

/// Kills process `pid` outright.
fn kill_hard(pid: u32) {
    let pid = i32::try_from(pid).expect("a pid");
    // SAFETY: a signal to a child process this test started (through the host).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// Waits until `plugin`'s child has been started again `restarts` times.
fn restarted(plugin: &PluginHandle, restarts: u32) -> u32 {
    voodu_tests::wait_until(
        Duration::from_secs(20),
        Duration::from_millis(10),
        || match (plugin.child_restarts(), plugin.child_pid()) {
            (seen, Some(pid)) if seen == restarts => Ok(pid),
            (seen, pid) => Err(format!("restarts {seen}, child {pid:?}")),
        },
    )
}

#[test]
fn a_plugin_out_of_process_answers_as_in_process_and_a_killed_child_comes_back_with_its_publications(
) {
    let recorder = rust_cdylib("voodu_fixture_recorder");
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.jsonl");
    let spec = json!({"file": calls.display().to_string()});
    let inside = load_plugin(&recorder, &LoadOptions::default()).expect("it loads in process");
    let outside = out_of_process(&recorder);
    assert!(!inside.info().out_of_process);
    assert!(outside.info().out_of_process);
    assert_eq!(outside.info().name, "recorder");
    let child = outside.child_pid().expect("its child runs");
    assert_ne!(child, std::process::id());
    assert_eq!(inside.child_pid(), None);

    // The same answers, in or out.
    let asked = validate_request("recorder", spec.clone());
    assert_eq!(
        inside.validate(&asked).unwrap(),
        outside.validate(&asked).unwrap()
    );
    assert_eq!(inside.describe().unwrap(), outside.describe().unwrap());

    // The child makes the call: the recorder writes its own pid.
    outside
        .publish(&publish_request("recorder", spec.clone(), 7))
        .unwrap();
    let recorded = recorded_calls(&calls);
    let publish = recorded
        .iter()
        .rfind(|call| call.call == "publish")
        .unwrap();
    assert_eq!(publish.pid, child);
    assert_eq!(publish.request["generation"], 7);

    // Killed behind the host's back: started again, and handed the block's
    // last publication before anything else.
    kill_hard(child);
    let again = restarted(&outside, 1);
    assert_ne!(again, child);
    let handed: Vec<_> = recorded_calls(&calls)
        .into_iter()
        .filter(|call| call.pid == again)
        .collect();
    assert_eq!(handed.len(), 1, "{handed:#?}");
    assert_eq!(handed[0].call, "publish");
    assert_eq!(handed[0].request["generation"], 7);
    // And it answers as before.
    assert_eq!(
        inside.validate(&asked).unwrap(),
        outside.validate(&asked).unwrap()
    );
    outside.shutdown();
    voodu_tests::wait_until_gone(again);
}

#[test]
fn a_crash_inside_a_call_out_of_process_fails_that_call_only_and_quarantines_nothing() {
    let segv = c_fixture("segv");
    let plugin = out_of_process(&segv);
    let child = plugin.child_pid().expect("its child runs");
    // The fixture crashes in every publish: the call fails, naming how
    // the child died; this process lives on.
    let failed = plugin
        .publish(&publish_request("segv", json!({}), 1))
        .unwrap_err();
    assert!(
        matches!(&failed, CallError::Failed { message, .. } if message.contains("its process killed by SIGSEGV during the call")),
        "{failed}"
    );
    let again = restarted(&plugin, 1);
    assert_ne!(again, child);
    // The publication it died of is not handed to the next child (which
    // would die of it again): it stays up.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(plugin.child_restarts(), 1);
    assert_eq!(plugin.child_pid(), Some(again));
    // It answers the calls it does not crash in.
    plugin
        .validate(&validate_request("segv", json!({})))
        .expect("validate answers");
    // A crash in a child is not the host's: no quarantine marker.
    let marker = segv
        .parent()
        .unwrap()
        .join(voodu_plugin_host::crash::CRASH_MARKER);
    assert!(!marker.exists(), "{}", marker.display());
}

#[test]
fn out_of_process_a_load_fails_with_the_in_process_words_and_an_overrun_restarts_the_child() {
    children_are_vd();
    let options = LoadOptions {
        out_of_process: true,
        call_timeout: Duration::from_millis(500),
    };
    // No entry symbol: the child's loader says so, as this process's would.
    let inside = load_plugin(&c_fixture("no_entry"), &LoadOptions::default()).unwrap_err();
    let outside = load_plugin(&c_fixture("no_entry"), &options).unwrap_err();
    assert_eq!(outside.to_string(), inside.to_string());
    // A library whose constructor never returns: the load's bound holds,
    // and the child is killed.
    let hung = load_plugin(&c_fixture("ctor_hang"), &options).map(|_| ());
    assert!(
        matches!(hung, Err(LoadError::LoadTimedOut { .. })),
        "{hung:?}"
    );
    // A call that never returns overruns its bound, but costs only the
    // child: it is killed and started again, and the plugin is not wedged
    // (in process it would be, until reloaded).
    let hang = load_plugin(&c_fixture("hang"), &options).expect("it loads");
    let overran = hang
        .validate(&validate_request("hang", json!({})))
        .unwrap_err();
    assert!(matches!(overran, CallError::Overran { .. }), "{overran}");
    assert_eq!(hang.health(), voodu_plugin_host::handle::Health::Ready);
    restarted(&hang, 1);
    assert!(hang.describe().is_ok());
}

/// Set in a copy of this test binary that plays a host which dies while
/// its plugin's call hangs: the copy prints the child's pid and exits.
const HOST_THAT_DIES: &str = "VOODU_TEST_HOST_THAT_DIES";

#[test]
fn a_hung_plugins_child_does_not_outlive_its_host() {
    if std::env::var_os(HOST_THAT_DIES).is_some() {
        // The copy: a plugin whose validate never returns, asked to
        // validate, then the host ends without shutting anything down.
        let hang = out_of_process(&c_fixture("hang"));
        let pid = hang.child_pid().expect("its child runs");
        println!("child pid {pid}");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        let request = validate_request("hang", json!({}));
        std::thread::spawn(move || hang.validate(&request));
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: ends the process at once, as a killed host would.
        unsafe { libc::_exit(0) };
    }
    let mut host = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_hung_plugins_child_does_not_outlive_its_host",
            "--nocapture",
        ])
        .env(HOST_THAT_DIES, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the host runs");
    // Read up to the pid only: the child holds the same pipe while it runs.
    let printed = std::io::BufRead::lines(std::io::BufReader::new(host.stdout.take().unwrap()))
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("child pid ").map(str::to_owned));
    let pid: u32 = printed
        .and_then(|pid| pid.trim().parse().ok())
        .expect("the host printed its plugin's child");
    host.wait().expect("the host ends");
    // Its child sees the channel's end although its call never returns.
    voodu_tests::wait_until_gone(pid);
}
