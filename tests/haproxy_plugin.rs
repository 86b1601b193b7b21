//! The haproxy C sample plugin, loaded by the host's own loader: its
//! validation, a configuration the real HAProxy accepts (`haproxy -c`), the
//! real HAProxy in front of backends (and of echo replicas on the engine),
//! drains through HAProxy's runtime socket, reloads through its master
//! socket, and no leak under valgrind. On CI (`CI=true`) a missing HAProxy,
//! valgrind or engine fails these tests.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engine::tool_available;
use serde_json::{json, Value};
use voodu_plugin_abi::messages::{
    Block, Claim, DrainReply, DrainRequest, Endpoint, ForgetRequest, PublishRequest,
    ValidateRequest, WorkloadKind,
};
use voodu_plugin_host::{load_plugin, CallError, LoadOptions, PluginHandle};
use voodu_tests::{free_port, id_backend};

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/load.rs"]
mod load;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

fn plugin() -> PluginHandle {
    load_plugin(
        Path::new(voodu_haproxy::PLUGIN_PATH),
        &LoadOptions::default(),
    )
    .expect("the haproxy sample loads")
}

fn block(spec: Value) -> Block {
    Block {
        block_type: "haproxy".into(),
        labels: vec!["http".into()],
        spec,
    }
}

fn validate(plugin: &PluginHandle, spec: Value, workload: Value) -> Result<(Value, Value), String> {
    let request = ValidateRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: block(spec),
        workload,
    };
    match plugin.validate(&request) {
        Ok(reply) => Ok((reply.spec, serde_json::to_value(reply.endpoints).unwrap())),
        Err(CallError::Refused { message, .. }) => Err(message),
        Err(other) => panic!("validate failed: {other}"),
    }
}

fn publish(plugin: &PluginHandle, spec: &Value, generation: u64, endpoints: &[(&str, SocketAddr)]) {
    plugin
        .publish(&PublishRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: block(spec.clone()),
            generation,
            endpoints: endpoints
                .iter()
                .map(|(id, address)| Endpoint {
                    replica_id: (*id).into(),
                    address: address.to_string(),
                    node: None,
                })
                .collect(),
        })
        .expect("publish renders the configuration");
}

/// Asks the plugin to drain `replica` at `address` of the block `spec`,
/// within a 10 s budget.
fn drain_of(
    plugin: &PluginHandle,
    spec: &Value,
    replica: &str,
    address: SocketAddr,
) -> Result<DrainReply, CallError> {
    plugin.drain(&DrainRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: block(spec.clone()),
        replica: Endpoint {
            replica_id: replica.into(),
            address: address.to_string(),
            node: None,
        },
        budget_ms: 10_000,
        elapsed_ms: 0,
    })
}

fn ask(through: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&through, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let body = answer
        .split("\r\n\r\n")
        .last()
        .unwrap_or(&answer)
        .trim()
        .to_owned();
    (!body.is_empty()).then_some(body)
}

/// The real HAProxy in master-worker mode, stopped on drop.
struct Haproxy(Child);

impl Haproxy {
    fn start(config: &Path, master_socket: &Path, frontend: SocketAddr) -> Haproxy {
        // HAProxy's own messages go next to its configuration, for failures.
        let log_path = config.with_extension("log");
        let log = std::fs::File::create(&log_path).expect("a log file");
        let mut child = Command::new("haproxy")
            .arg("-W")
            .arg("-S")
            .arg(master_socket)
            .arg("-f")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("haproxy starts");
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(20), || {
            let refused = match TcpStream::connect(frontend) {
                Ok(_) => return Ok(()),
                Err(error) => error,
            };
            // An exited HAProxy will never listen: fail at once.
            if let Some(status) = child.try_wait().ok().flatten() {
                panic!(
                    "haproxy never listened on {frontend} (exited: {status}); its log:\n{}",
                    log()
                );
            }
            Err(format!(
                "haproxy never listened on {frontend} ({refused}); its log:\n{}",
                log()
            ))
        });
        Haproxy(child)
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spec_in(dir: &Path, frontend: SocketAddr, sockets: bool) -> Value {
    let mut spec = json!({
        "port": 8084,
        "config_path": dir.join("haproxy.cfg").display().to_string(),
        "frontend": frontend.to_string(),
    });
    if sockets {
        spec["runtime_socket"] = json!(dir.join("runtime.sock").display().to_string());
        spec["master_socket"] = json!(dir.join("master.sock").display().to_string());
    }
    spec
}

/// The claims haproxy's validate names for a block with `frontend`.
fn claims_for(plugin: &PluginHandle, frontend: &str) -> Vec<Claim> {
    let request = ValidateRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: block(json!({"port": 8084, "config_path": "/tmp/x.cfg", "frontend": frontend})),
        workload: json!({}),
    };
    plugin.validate(&request).expect("a valid block").claims
}

#[test]
fn haproxy_claims_the_address_its_frontend_binds() {
    let plugin = plugin();
    let claim = |address: &str| vec![Claim::listen_tcp(address.parse().unwrap())];
    assert_eq!(
        claims_for(&plugin, "127.0.0.1:8084"),
        claim("127.0.0.1:8084")
    );
    // HAProxy's "every address" spellings claim the unspecified address.
    assert_eq!(claims_for(&plugin, "*:8085"), claim("0.0.0.0:8085"));
    assert_eq!(claims_for(&plugin, ":8086"), claim("0.0.0.0:8086"));
    assert_eq!(claims_for(&plugin, "[::1]:8087"), claim("[::1]:8087"));
    // A name is HAProxy's to resolve: nothing the host could compare.
    assert_eq!(claims_for(&plugin, "localhost:8088"), Vec::<Claim>::new());
}

#[test]
fn validate_fills_defaults_and_refuses_in_the_seeds_tone() {
    let plugin = plugin();
    let (spec, endpoints) = validate(
        &plugin,
        json!({"port": 8084, "config_path": "/tmp/x.cfg"}),
        json!({}),
    )
    .unwrap();
    assert_eq!(
        spec,
        json!({"port": 8084, "config_path": "/tmp/x.cfg", "frontend": "127.0.0.1:8084", "mode": "tcp"})
    );
    assert_eq!(endpoints, json!({"port": 8084, "addressing": "ip"}));
    let (_, endpoints) = validate(
        &plugin,
        json!({"port": 80, "config_path": "/tmp/x.cfg", "network": "voodu0", "mode": "http"}),
        json!({}),
    )
    .unwrap();
    assert_eq!(endpoints, json!({"port": 80, "addressing": "dns"}));
    assert_eq!(
        validate(&plugin, json!({"port": 80, "config_path": "/x", "weight": 1}), json!({})).unwrap_err(),
        "unknown key \"weight\" — a haproxy block takes port, config_path, frontend, mode, runtime_socket, master_socket, network, pid_file"
    );
    assert_eq!(
        validate(&plugin, json!({"config_path": "/x"}), json!({})).unwrap_err(),
        "port is required — write haproxy { port = 8084 } with the replicas' port"
    );
    assert!(validate(&plugin, json!({"port": 80}), json!({}))
        .unwrap_err()
        .starts_with("config_path is required"));
    assert_eq!(
        validate(
            &plugin,
            json!({"port": 80, "config_path": "/x", "mode": "udp"}),
            json!({})
        )
        .unwrap_err(),
        "mode must be \"tcp\" or \"http\", not \"udp\""
    );
    // Values go into the configuration as one word: no directive injection.
    assert_eq!(
        validate(
            &plugin,
            json!({"port": 80, "config_path": "/x", "frontend": "127.0.0.1:80\n    bind *:1"}),
            json!({})
        )
        .unwrap_err(),
        "frontend must be one word, without spaces, '#' or control characters"
    );
}

#[test]
fn the_rendered_configuration_passes_haproxy_check() {
    if !tool_available("haproxy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin();
    let frontend = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let spec = spec_in(dir.path(), frontend, true);
    let (spec, _) = validate(&plugin, spec, json!({})).unwrap();
    publish(
        &plugin,
        &spec,
        4,
        &[("a1", id_backend("a1")), ("b2", id_backend("b2"))],
    );
    let config = std::fs::read_to_string(dir.path().join("haproxy.cfg")).unwrap();
    assert!(config.contains("generation 4"), "{config}");
    assert!(config.contains("    server a1 127.0.0.1:"), "{config}");
    assert!(config.contains("backend voodu_prod_esl_http"), "{config}");
    let check = Command::new("haproxy")
        .args(["-c", "-f"])
        .arg(dir.path().join("haproxy.cfg"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "haproxy -c refused it: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    // No temporary file is left beside it.
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(files, [dir.path().join("haproxy.cfg")]);
    // forget removes it.
    plugin
        .forget(&ForgetRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: block(spec),
        })
        .unwrap();
    assert!(!dir.path().join("haproxy.cfg").exists());
}

#[test]
fn haproxy_reaches_every_backend_changes_servers_on_publish_and_drains_through_its_runtime_socket()
{
    if !tool_available("haproxy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin();
    let frontend = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (spec, _) = validate(&plugin, spec_in(dir.path(), frontend, true), json!({})).unwrap();
    // The first publish renders the file HAProxy starts from; nothing
    // listens on the master socket yet, which is not an error.
    let (a, b, c) = (id_backend("a1"), id_backend("b2"), id_backend("c3"));
    publish(&plugin, &spec, 1, &[("a1", a), ("b2", b)]);
    let _haproxy = Haproxy::start(
        &dir.path().join("haproxy.cfg"),
        &dir.path().join("master.sock"),
        frontend,
    );
    // Both backends answer through it (HAProxy may still be bringing a
    // server up for the first requests: asked in rounds, within 10 s).
    let both = HashSet::from(["a1".to_owned(), "b2".to_owned()]);
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let seen: HashSet<String> = (0..20).filter_map(|_| ask(frontend)).collect();
        if seen == both {
            Ok(())
        } else {
            Err(format!("HAProxy reached {seen:?}"))
        }
    });

    // A publish with a new set adds the server through the runtime socket
    // (without it, it would reload HAProxy through its master socket).
    publish(&plugin, &spec, 2, &[("a1", a), ("b2", b), ("c3", c)]);
    // One CI run saw a reload not take effect; if one has not after 5 s,
    // publish (and so reload) again, and keep HAProxy's log for the failure.
    let mut next_publish = Instant::now() + Duration::from_secs(5);
    let mut generation = 2;
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        let seen: HashSet<String> = (0..30).filter_map(|_| ask(frontend)).collect();
        if seen.contains("c3") {
            return Ok(());
        }
        if Instant::now() > next_publish {
            generation += 1;
            publish(
                &plugin,
                &spec,
                generation,
                &[("a1", a), ("b2", b), ("c3", c)],
            );
            next_publish = Instant::now() + Duration::from_secs(5);
        }
        Err(format!(
            "the reload never served c3: {seen:?}; HAProxy said: {}",
            std::fs::read_to_string(dir.path().join("haproxy.log")).unwrap_or_default()
        ))
    });

    // Draining b2 sets it to DRAIN: no new connection reaches it.
    let drain = |replica: &str, address: SocketAddr| {
        drain_of(&plugin, &spec, replica, address).expect("drain answers")
    };
    // A connection held open on every server keeps b2 busy at first.
    let held: Vec<TcpStream> = (0..6)
        .map(|_| TcpStream::connect(frontend).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(matches!(drain("b2", b), DrainReply::Draining { .. }));
    let seen: HashSet<String> = (0..30).filter_map(|_| ask(frontend)).collect();
    assert!(
        !seen.contains("b2"),
        "a drained server got new connections: {seen:?}"
    );
    assert!(seen.contains("a1") && seen.contains("c3"));
    drop(held);
    voodu_tests::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match drain("b2", b) {
            DrainReply::Drained => Ok(()),
            reply => Err(format!("b2 never drained: {reply:?}")),
        },
    );
}

#[test]
fn without_a_runtime_socket_a_drain_waits_until_haproxys_processes_hold_no_connection_to_the_replica(
) {
    if !tool_available("haproxy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin();
    let frontend = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let pid_file = dir.path().join("haproxy.pid");
    let mut asked = spec_in(dir.path(), frontend, false);
    asked["pid_file"] = json!(pid_file.display().to_string());
    let (spec, _) = validate(&plugin, asked, json!({})).unwrap();
    assert_eq!(spec["pid_file"], json!(pid_file.display().to_string()));
    let drain = |spec: &Value, replica: &str, address: SocketAddr| {
        drain_of(&plugin, spec, replica, address)
    };
    let (a, b) = (id_backend("a1"), id_backend("b2"));
    publish(&plugin, &spec, 1, &[("a1", a), ("b2", b)]);
    // Before HAProxy wrote its pid, a drain fails naming the file rather
    // than answer drained.
    let early = drain(&spec, "b2", b).expect_err("no pid file yet");
    assert!(
        early.to_string().contains("pid file"),
        "the failure names the pid file: {early}"
    );
    let rendered = std::fs::read_to_string(dir.path().join("haproxy.cfg")).unwrap();
    assert!(
        rendered.contains(&format!("pidfile {}", pid_file.display())),
        "{rendered}"
    );
    let _haproxy = Haproxy::start(
        &dir.path().join("haproxy.cfg"),
        &dir.path().join("master.sock"),
        frontend,
    );
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        if std::fs::read_to_string(&pid_file).is_ok_and(|pid| !pid.trim().is_empty()) {
            Ok(())
        } else {
            Err("HAProxy never wrote its pid file".to_owned())
        }
    });
    // Connections held through HAProxy (tcp mode: each opens one to a
    // server at once, in turn) keep b2 busy: HAProxy's worker, a child of
    // the master the pid file names, holds them.
    let held: Vec<TcpStream> = (0..6)
        .map(|_| TcpStream::connect(frontend).unwrap())
        .collect();
    voodu_tests::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || match drain(&spec, "b2", b).expect("drain answers") {
            DrainReply::Draining { .. } => Ok(()),
            reply => Err(format!(
                "b2 drained while HAProxy held connections to it: {reply:?}"
            )),
        },
    );
    // A connection this process holds to b2 itself is not HAProxy's: once
    // HAProxy's are closed, b2 is drained though that one stays open.
    let _ours = TcpStream::connect(b).unwrap();
    drop(held);
    voodu_tests::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match drain(&spec, "b2", b).expect("drain answers") {
            DrainReply::Drained => Ok(()),
            reply => Err(format!("b2 never drained: {reply:?}")),
        },
    );
    // On voodu0, HAProxy is in another network namespace: refused.
    let mut on_network = spec_in(dir.path(), frontend, false);
    on_network["pid_file"] = json!("/run/haproxy.pid");
    on_network["network"] = json!("voodu0");
    let refusal = validate(&plugin, on_network, json!({})).unwrap_err();
    assert!(refusal.contains("runtime_socket"), "{refusal}");
}

#[test]
fn the_plugin_frees_everything_it_allocates_under_valgrind() {
    if !tool_available("valgrind") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new("valgrind")
        .args([
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect,possible",
            "--error-exitcode=99",
        ])
        .arg(env!("VOODU_PLUGIN_DRIVER"))
        .arg(voodu_haproxy::PLUGIN_PATH)
        .arg(dir.path().join("haproxy.cfg"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert!(report.contains("ERROR SUMMARY: 0 errors"), "{report}");
    assert!(
        report.contains("definitely lost: 0 bytes")
            || report.contains("All heap blocks were freed"),
        "{report}"
    );
}

/// An engine rig with the haproxy plugin installed, and a free address for
/// HAProxy's frontend; `None` (a skip) without HAProxy or an engine outside
/// CI.
fn engine_rig() -> Option<(engine::DockerRig, SocketAddr)> {
    if !tool_available("haproxy") {
        return None;
    }
    let rig = engine::DockerRig::start(voodu_haproxy::PLUGIN_PATH)?;
    Some((rig, SocketAddr::from(([127, 0, 0, 1], free_port()))))
}

#[test]
fn haproxy_with_the_rendered_configuration_reaches_every_echo_replica() {
    let Some((rig, frontend)) = engine_rig() else {
        return;
    };
    let (controller, scope, image) = (&rig.controller, &rig.scope, &rig.image);
    let config = controller.root().join("haproxy.cfg");
    let file = controller.manifest(
        "web.hcl",
        &format!(
            "deployment \"{}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n  ports = [\"8084\"]\n  haproxy {{\n    port = 8084\n    frontend = \"{frontend}\"\n    config_path = \"{}\"\n  }}\n}}\n",
            scope.name,
            image.name,
            config.display()
        ),
    );
    controller.vd(&["apply", "-f", &file]).success();
    let rendered = std::fs::read_to_string(&config).unwrap();
    assert_eq!(rendered.matches("    server ").count(), 3, "{rendered}");
    let _haproxy = Haproxy::start(&config, &controller.root().join("master.sock"), frontend);
    let seen: HashSet<String> = (0..30).filter_map(|_| ask(frontend)).collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
}

#[test]
fn a_rolling_update_behind_haproxy_under_load_fails_no_request() {
    let Some((rig, frontend)) = engine_rig() else {
        return;
    };
    let (controller, scope, image) = (&rig.controller, &rig.scope, &rig.image);
    let root = controller.root();
    let manifest = |release: u32| {
        controller.manifest(
            "web.hcl",
            &format!(
                "deployment \"{}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n  ports = [\"8084\"]\n  env = {{ RELEASE = \"{release}\" }}\n  haproxy {{\n    port = 8084\n    mode = \"http\"\n    frontend = \"{frontend}\"\n    config_path = \"{}\"\n    runtime_socket = \"{}\"\n    master_socket = \"{}\"\n  }}\n}}\n",
                scope.name,
                image.name,
                root.join("haproxy.cfg").display(),
                root.join("runtime.sock").display(),
                root.join("master.sock").display(),
            ),
        )
    };
    controller.vd(&["apply", "-f", &manifest(1)]).success();
    let _haproxy = Haproxy::start(
        &root.join("haproxy.cfg"),
        &root.join("master.sock"),
        frontend,
    );
    voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(100), || {
        let seen: HashSet<String> = (0..30).filter_map(|_| ask(frontend)).collect();
        if seen.len() == 3 {
            Ok(())
        } else {
            Err(format!("not every replica is served: {seen:?}"))
        }
    });
    let load = load::Load::start(16, frontend);
    let served_past = |count: usize| {
        voodu_tests::wait_until(Duration::from_secs(60), Duration::from_millis(10), || {
            let (answered, lost) = (load.answered(), load.failed());
            if answered + lost >= count {
                Ok(())
            } else {
                Err(format!("too slow: {answered} answered, {lost} failed"))
            }
        })
    };
    served_past(1_000);
    for release in 2..=3 {
        controller
            .vd(&["apply", "-f", &manifest(release)])
            .success();
        served_past(load.answered() + load.failed() + 2_000);
    }
    let (answered, failed, errors) = load.stop();
    println!(
        "2 rolling updates behind HAProxy under 16 clients: {answered} answered, {failed} failed"
    );
    // The servers changed through the runtime socket, not by reloads; the
    // file on disk has the same set, for HAProxy's next start.
    assert!(
        controller
            .log_text()
            .contains("changed HAProxy's servers through its runtime socket"),
        "{}",
        controller.log_text()
    );
    let rendered = std::fs::read_to_string(root.join("haproxy.cfg")).unwrap();
    assert_eq!(rendered.matches("    server ").count(), 3, "{rendered}");
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed: {errors:?}; HAProxy said: {}",
        answered + failed,
        std::fs::read_to_string(root.join("haproxy.log")).unwrap_or_default()
    );
}
