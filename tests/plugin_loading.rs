//! Loading real plugin shared objects into the host: the two samples, the
//! ABI compatibility promise, and one fixture per way a plugin can fail. In
//! every failure case the host keeps running, names what went wrong, and a
//! healthy plugin loaded beside the broken one keeps answering.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use voodu_plugin_abi::ffi::{VOODU_ABI_VERSION_MAJOR, VOODU_ABI_VERSION_MINOR};
use voodu_plugin_abi::messages::{Block, ValidateRequest, WorkloadKind};
use voodu_plugin_host::handle::Health;
use voodu_plugin_host::{load_plugin, CallError, LoadError, LoadOptions, PluginHandle, PluginKind};
use voodu_tests::{c_fixture, capture_logs, rust_cdylib};

fn request(block_type: &str, spec: serde_json::Value) -> ValidateRequest {
    ValidateRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: Block {
            block_type: block_type.into(),
            labels: vec![],
            spec,
        },
        workload: json!({"image": "ghcr.io/acme/esl:1.2", "replicas": 3, "ports": ["8084"]}),
    }
}

fn load(path: &Path) -> Result<PluginHandle, LoadError> {
    load_within(path, Duration::from_millis(500))
}

/// [`load`] with calls bounded by `call_timeout`.
fn load_within(path: &Path, call_timeout: Duration) -> Result<PluginHandle, LoadError> {
    load_plugin(
        path,
        &LoadOptions {
            call_timeout,
            ..LoadOptions::default()
        },
    )
}

fn load_ok(path: &Path) -> PluginHandle {
    load(path).unwrap_or_else(|error| panic!("{} should load: {error}", path.display()))
}

/// A healthy plugin, to prove a failing neighbour does not disturb it.
fn healthy() -> PluginHandle {
    load_ok(&rust_cdylib("voodu_echo"))
}

fn assert_still_answers(plugin: &PluginHandle) {
    let reply = plugin
        .validate(&request("echo", json!({})))
        .expect("the healthy plugin keeps answering");
    assert_eq!(reply.spec, json!({"greeting": "hello"}));
}

fn load_error(path: &Path) -> String {
    match load(path) {
        Ok(handle) => panic!(
            "{} loaded but must be refused: {:?}",
            path.display(),
            handle.info()
        ),
        Err(error) => error.to_string(),
    }
}

#[test]
fn rust_sample_fills_in_its_default_and_loads_through_abi_stable() {
    let echo = load_ok(&rust_cdylib("voodu_echo"));
    let info = echo.info();
    assert_eq!(info.name, "echo");
    assert_eq!(info.version, "1.0.0");
    assert_eq!(info.kind, PluginKind::Rust);
    assert_eq!(
        (info.abi_major, info.abi_minor),
        (VOODU_ABI_VERSION_MAJOR, VOODU_ABI_VERSION_MINOR),
        "built against this ABI"
    );
    assert!(info.has_extensions);
    let reply = echo
        .validate(&request("echo", json!({"extra": [1, 2]})))
        .expect("validate succeeds");
    assert_eq!(reply.spec, json!({"greeting": "hello", "extra": [1, 2]}));
    let kept = echo
        .validate(&request("echo", json!({"greeting": "hi"})))
        .expect("validate succeeds");
    assert_eq!(kept.spec, json!({"greeting": "hi"}));
}

#[test]
fn doubles_come_back_from_a_plugin_exactly_as_sent() {
    // The host reads replies with serde_json's float_roundtrip, so no
    // double that JSON can carry is moved by a last-bit rounding.
    let echo = load_ok(&rust_cdylib("voodu_echo"));
    let sent: serde_json::Value = serde_json::from_str(
        r#"{"tiny": 1.5e-300, "tenth": 0.1, "min": 2.2250738585072014e-308, "odd": 0.30000000000000004}"#,
    )
    .expect("valid JSON");
    let reply = echo
        .validate(&request("echo", sent.clone()))
        .expect("echo accepts any other option");
    for key in ["tiny", "tenth", "min", "odd"] {
        assert_eq!(
            reply.spec[key].to_string(),
            sent[key].to_string(),
            "{key} came back changed"
        );
    }
}

#[test]
fn c_sample_fills_in_its_default_and_loads_through_the_entry_symbol() {
    let echo_c = load_ok(Path::new(voodu_echo_c::PLUGIN_PATH));
    let info = echo_c.info();
    assert_eq!(info.name, "echo_c");
    assert_eq!(info.kind, PluginKind::C);
    assert_eq!(
        (info.abi_major, info.abi_minor),
        (VOODU_ABI_VERSION_MAJOR, VOODU_ABI_VERSION_MINOR),
        "built against this ABI"
    );
    let reply = echo_c
        .validate(&request(
            "echo_c",
            json!({"nested": {"greeting": "not top-level"}}),
        ))
        .expect("validate succeeds");
    assert_eq!(
        reply.spec,
        json!({"greeting": "hello", "nested": {"greeting": "not top-level"}})
    );
    let empty = echo_c.validate(&request("echo_c", json!({}))).expect("ok");
    assert_eq!(empty.spec, json!({"greeting": "hello"}));
    let kept = echo_c
        .validate(&request("echo_c", json!({"greeting": "hi \"there\""})))
        .expect("ok");
    assert_eq!(kept.spec, json!({"greeting": "hi \"there\""}));
    // C plugins without publish/drain/forget get the ABI's "not supported" defaults.
    assert!(echo_c
        .drain(&voodu_plugin_abi::messages::DrainRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: request("echo_c", json!({})).block,
            replica: voodu_plugin_abi::messages::Endpoint {
                replica_id: "a1".into(),
                address: "172.18.0.5:8084".into(),
                node: None,
            },
            budget_ms: 30_000,
            elapsed_ms: 0,
        })
        .is_ok_and(|reply| reply == voodu_plugin_abi::messages::DrainReply::Drained));
}

#[test]
fn both_samples_log_through_the_host_callback_tagged_with_their_name() {
    let logs = capture_logs();
    let echo = load_ok(&rust_cdylib("voodu_echo"));
    let echo_c = load_ok(Path::new(voodu_echo_c::PLUGIN_PATH));
    echo.validate(&request("echo", json!({}))).expect("ok");
    echo_c.validate(&request("echo_c", json!({}))).expect("ok");
    let text = logs.text();
    assert!(
        text.lines().any(|line| line.contains("plugin=\"echo\"")
            && line.contains("validated the echo block of deployment/prod/esl")),
        "no tagged log line from echo in:\n{text}"
    );
    assert!(
        text.lines()
            .any(|line| line.contains("plugin=\"echo_c\"")
                && line.contains("validated an echo_c block")),
        "no tagged log line from echo_c in:\n{text}"
    );
}

#[test]
fn a_refusal_carries_the_plugins_own_message() {
    let echo = healthy();
    let error = echo
        .validate(&request("echo", json!({"greeting": 42})))
        .expect_err("a non-string greeting is refused");
    assert!(matches!(error, CallError::Refused { .. }), "{error:?}");
    assert_eq!(error.to_string(), "greeting must be a string, not 42");
}

#[test]
fn a_panic_in_validate_becomes_a_panic_status_and_poisons_the_instance() {
    let neighbour = healthy();
    // A bound well past the panic's own cost: the first panic's backtrace
    // (RUST_BACKTRACE is set in the tests) reads the binary's debug info,
    // which once took over the usual 500 ms under a full suite's load, and
    // the call was then counted hung, not panicked.
    let panicky = load_within(
        &rust_cdylib("voodu_fixture_panicky"),
        Duration::from_secs(10),
    )
    .expect("panicky loads");
    let first = panicky
        .validate(&request("panicky", json!({})))
        .expect_err("a panic is an error");
    assert!(
        matches!(first, CallError::Panicked { .. }),
        "a panic is told by its status: {first:?}"
    );
    assert_eq!(
        first.to_string(),
        "plugin panicky failed in validate: panicked in validate: the panicky fixture always \
         panics in validate"
    );
    let second = panicky
        .validate(&request("panicky", json!({})))
        .expect_err("a poisoned plugin refuses every later call");
    assert!(
        matches!(second, CallError::Panicked { .. }),
        "a poisoned refusal is a panic's status too: {second:?}"
    );
    assert!(
        panicky
            .last_failure()
            .is_some_and(|failure| failure.panicked),
        "the handle knows the plugin panicked: {:?}",
        panicky.last_failure()
    );
    let second = second.to_string();
    assert!(second.contains("plugin panicky is poisoned"), "{second}");
    assert!(second.contains("until it is reloaded"), "{second}");
    assert_still_answers(&neighbour);
}

#[test]
fn a_hanging_validate_times_out_and_wedges_only_that_plugin() {
    let neighbour = healthy();
    let hang = load_ok(&c_fixture("hang"));
    let started = Instant::now();
    let error = hang
        .validate(&request("hang", json!({})))
        .expect_err("a hang is an error");
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    assert_eq!(
        error.to_string(),
        "plugin hang did not answer validate within 500ms; it is marked wedged and gets no more \
         calls until it is reloaded"
    );
    assert_eq!(
        hang.health(),
        Health::Wedged {
            stuck_call: voodu_plugin_host::PluginCall::Validate
        }
    );
    let again = hang
        .validate(&request("hang", json!({})))
        .expect_err("a wedged plugin fails fast");
    // Refused without being attempted (Wedged, not TimedOut): it does not
    // wait its call bound again.
    assert!(matches!(again, CallError::Wedged { .. }), "{again:?}");
    assert!(again.to_string().contains("reload the plugin"));
    assert_still_answers(&neighbour);
}

#[test]
fn an_invalid_json_reply_is_an_error_naming_the_plugin_and_call() {
    let neighbour = healthy();
    let bad = load_ok(&c_fixture("bad_json"));
    let error = bad
        .validate(&request("bad_json", json!({})))
        .expect_err("invalid JSON is an error")
        .to_string();
    assert!(
        error.starts_with("plugin bad_json returned an invalid validate reply: "),
        "{error}"
    );
    assert!(error.contains("`this is {not json`"), "{error}");
    assert_still_answers(&neighbour);
}

#[test]
fn a_64_mib_reply_is_refused_above_the_documented_limit() {
    let neighbour = healthy();
    let huge = load_ok(&c_fixture("huge_reply"));
    let error = huge
        .validate(&request("huge_reply", json!({})))
        .expect_err("an oversized reply is an error");
    assert!(
        matches!(
            error,
            CallError::ReplyTooLarge {
                size: 67_108_864,
                limit: voodu_plugin_abi::ffi::VOODU_MAX_REPLY_BYTES,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "plugin huge_reply returned a 67108864-byte validate reply, over the 16777216-byte limit; \
         the reply was discarded"
    );
    assert_still_answers(&neighbour);
}

#[test]
fn a_null_or_empty_name_is_refused_at_load() {
    let neighbour = healthy();
    let null = load_error(&c_fixture("null_name"));
    assert!(
        null.contains("libnull_name.so: invalid plugin name: the name is NULL"),
        "{null}"
    );
    let empty = load_error(&c_fixture("empty_name"));
    assert!(
        empty.contains("libempty_name.so: invalid plugin name: the name is empty"),
        "{empty}"
    );
    assert!(empty.contains("[a-z0-9_-]"), "the fix is named: {empty}");
    assert_still_answers(&neighbour);
}

#[test]
fn a_wrong_abi_version_is_refused_with_the_fix() {
    let neighbour = healthy();
    let error = load_error(&c_fixture("wrong_abi"));
    assert!(
        error.ends_with(
            "libwrong_abi.so: built for voodu plugin ABI 2.0, but this host speaks ABI 1.x — \
             rebuild against voodu-plugin-abi 1.x"
        ),
        "{error}"
    );
    assert_still_answers(&neighbour);
}

#[test]
fn a_missing_entry_symbol_is_refused() {
    let neighbour = healthy();
    let error = load_error(&c_fixture("no_entry"));
    assert!(
        error.contains("libno_entry.so: no `voodu_plugin_entry_v1` symbol"),
        "{error}"
    );
    assert!(error.contains("not a voodu plugin"), "{error}");
    assert_still_answers(&neighbour);
}

#[test]
fn a_library_linked_without_a_library_it_uses_is_refused_at_load_naming_the_symbol() {
    let neighbour = healthy();
    let error = load_error(&c_fixture("unlinked_cjson"));
    // The loader names the first of its cJSON symbols it could not bind.
    assert!(
        error.contains("libunlinked_cjson.so: needs the symbol `cJSON_")
            && error.contains("`, which no library it was linked with defines"),
        "{error}"
    );
    assert!(error.contains(": -lcjson)"), "{error}");
    assert!(error.contains("-Wl,-z,defs"), "{error}");
    assert_still_answers(&neighbour);
}

#[test]
fn a_file_that_is_not_a_shared_object_is_refused() {
    let neighbour = healthy();
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("libnotes.so");
    std::fs::write(&path, "these are notes, not a plugin\n").expect("write");
    let error = load_error(&path);
    assert!(
        error.starts_with(&format!(
            "{}: not a loadable shared object (",
            path.display()
        )),
        "{error}"
    );
    assert!(
        error.contains("invalid ELF header") || error.contains("file too short"),
        "{error}"
    );
    assert_still_answers(&neighbour);
}

#[test]
fn a_rust_plugin_with_a_different_vtable_layout_gets_a_short_precise_report() {
    let neighbour = healthy();
    let path = rust_cdylib("voodu_fixture_layout_mismatch");
    let error = load_error(&path);
    assert!(
        error.starts_with(&format!(
            "{}: its vtable layout does not match voodu plugin ABI 1.x: ",
            path.display()
        )),
        "{error}"
    );
    assert!(
        error.ends_with("— rebuild against voodu-plugin-abi 1.x"),
        "{error}"
    );
    assert!(
        error.contains("u32") && error.contains("usize"),
        "names what differs: {error}"
    );
    assert!(!error.contains('\n'), "one line, not a dump: {error}");
    assert!(
        error.len() < 600,
        "short, not a dump ({} chars): {error}",
        error.len()
    );
    assert_still_answers(&neighbour);
}

#[test]
fn a_plugin_built_against_the_frozen_1_0_abi_loads_in_this_1_2_host() {
    let compat = load_ok(&rust_cdylib("voodu_fixture_compat_v1_0"));
    let info = compat.info();
    assert_eq!(info.kind, PluginKind::Rust);
    assert_eq!((info.abi_major, info.abi_minor), (1, 0));
    assert!(
        !info.has_extensions,
        "a 1.0 vtable has no get_extension member"
    );
    let reply = compat
        .validate(&request("compat", json!({})))
        .expect("validate works");
    assert_eq!(reply.spec, json!({"built_against": "1.0"}));
    // This 1.0 fixture leaves forget NULL: the ABI's "not supported" default applies.
    assert!(compat
        .forget(&voodu_plugin_abi::messages::ForgetRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: request("compat", json!({})).block,
        })
        .is_ok());
}

#[test]
fn shutdown_stops_the_instance_and_later_calls_fail_clearly() {
    let echo = healthy();
    echo.shutdown();
    assert_eq!(echo.health(), Health::ShutDown);
    let error = echo
        .validate(&request("echo", json!({})))
        .expect_err("no calls after shutdown");
    assert_eq!(
        error.to_string(),
        "plugin echo is shut down; validate was not attempted"
    );
}

#[test]
fn the_c_sample_rejects_a_truncated_request_without_reading_past_it() {
    let echo_c = load_ok(Path::new(voodu_echo_c::PLUGIN_PATH));
    for truncated in [
        &b"{\"block\":{\"spec\":"[..],
        b"{\"block\":{\"spec\":{\"a\":\"\\",
        b"{",
    ] {
        let error = echo_c
            .call_raw(voodu_plugin_host::PluginCall::Validate, truncated.to_vec())
            .expect_err("a truncated request is an error");
        assert!(
            error
                .to_string()
                .starts_with("plugin echo_c failed in validate: malformed validate request"),
            "{error}"
        );
    }
    assert!(echo_c.validate(&request("echo_c", json!({}))).is_ok());
}

#[test]
fn publish_through_the_rust_sdk_is_acknowledged() {
    let echo = healthy();
    echo.publish(&voodu_plugin_abi::messages::PublishRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: request("echo", json!({"greeting": "hello"})).block,
        generation: 1,
        endpoints: vec![voodu_plugin_abi::messages::Endpoint {
            replica_id: "a1".into(),
            address: "172.18.0.5:8084".into(),
            node: None,
        }],
    })
    .expect("publish is acknowledged");
}

/// Publishes `endpoints` (replica id, `IP:port`) to `plugin` for the block
/// of type `block_type` with the normalised `spec`.
fn publish_set(
    plugin: &PluginHandle,
    block_type: &str,
    spec: serde_json::Value,
    endpoints: &[(&str, String)],
) {
    plugin
        .publish(&voodu_plugin_abi::messages::PublishRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: request(block_type, spec).block,
            generation: 1,
            endpoints: endpoints
                .iter()
                .map(
                    |(replica_id, address)| voodu_plugin_abi::messages::Endpoint {
                        replica_id: (*replica_id).into(),
                        address: address.clone(),
                        node: None,
                    },
                )
                .collect(),
        })
        .expect("publish is acknowledged");
}

/// What a connection to `address` reads before the server closes it.
fn greeting_at(client: std::net::TcpStream) -> String {
    use std::io::Read;
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut text = String::new();
    let _ = (&client).read_to_string(&mut text);
    text
}

#[test]
fn traffik_listens_on_a_socket_the_host_holds_so_a_connection_made_between_two_instances_waits_and_is_served(
) {
    use std::io::Write;
    use voodu_plugin_host::listeners::ListenerTable;
    // A replica that greets each connection and closes it.
    let replica = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let replica_address = replica.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut stream in replica.incoming().flatten() {
            let _ = stream.write_all(b"hello from the replica");
        }
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("127.0.0.1:{port}");
    let traffik = rust_cdylib("voodu_traffik");
    let first = load_ok(&traffik);
    let spec = first
        .validate(&request("traffik", json!({"port": 8084, "bind": bind})))
        .expect("valid")
        .spec;
    let endpoints = [("a1", replica_address)];
    publish_set(&first, "traffik", spec.clone(), &endpoints);
    assert_eq!(
        greeting_at(std::net::TcpStream::connect(&bind).unwrap()),
        "hello from the replica"
    );
    assert_eq!(
        ListenerTable::process().held_for("traffik"),
        [bind.parse().unwrap()],
        "the host holds traffik's socket"
    );
    // The instance stops (a reload or a replace): no one accepts, but the
    // host still holds the socket, so a client is not refused.
    first.shutdown();
    let waiting = std::net::TcpStream::connect(&bind).expect("not refused between instances");
    // The next instance asks for the same address and gets the same
    // socket: it serves the connection that waited.
    let second = load_ok(&traffik);
    publish_set(&second, "traffik", spec, &endpoints);
    assert_eq!(greeting_at(waiting), "hello from the replica");
    second.shutdown();
}

/// A drain request of the recorder fixture for the replica at `address`,
/// its block's spec `spec`.
fn recorder_drain(
    address: &str,
    spec: serde_json::Value,
) -> voodu_plugin_abi::messages::DrainRequest {
    voodu_plugin_abi::messages::DrainRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: request("recorder", spec).block,
        replica: voodu_plugin_abi::messages::Endpoint {
            replica_id: "a1".into(),
            address: address.into(),
            node: None,
        },
        budget_ms: 30_000,
        elapsed_ms: 0,
    }
}

#[test]
fn a_rust_plugin_counts_the_connections_open_to_a_replica_through_the_sdk() {
    // The recorder answers a drain from Host::connections_to: drained only
    // when the host counts no connection from this process (the test is
    // the controller here) to the replica's address.
    let recorder = load_ok(&rust_cdylib("voodu_fixture_recorder"));
    let replica = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = replica.local_addr().expect("bound").to_string();
    let counted = json!({"file": "/dev/null", "drain": "connections"});
    let open: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(&address).expect("connects"))
        .collect();
    let _accepted: Vec<_> = (0..2).map(|_| replica.accept().expect("accepts")).collect();
    assert_eq!(
        recorder
            .drain(&recorder_drain(&address, counted.clone()))
            .expect("the host counts them"),
        voodu_plugin_abi::messages::DrainReply::Draining { retry_after_ms: 50 },
        "two connections are open to the replica"
    );
    drop(open);
    assert_eq!(
        recorder
            .drain(&recorder_drain(&address, counted.clone()))
            .expect("the host counts them"),
        voodu_plugin_abi::messages::DrainReply::Drained,
        "a closed connection is no longer established"
    );
    // What the host refuses reaches the plugin with the host's reason.
    let not_an_address = recorder
        .drain(&recorder_drain("esl-1:8084", counted))
        .expect_err("a name is not an address");
    assert!(
        not_an_address.to_string().contains("is not an address"),
        "{not_an_address}"
    );
    // Pid 0 is refused by the SDK, never read as the controller's own.
    let pid_zero = recorder
        .drain(&recorder_drain(
            &address,
            json!({"file": "/dev/null", "drain": "connections", "holder_pid": 0}),
        ))
        .expect_err("pid 0 names no process");
    assert!(
        pid_zero.to_string().contains("pid 0 is no process"),
        "{pid_zero}"
    );
}

/// The settings schema `plugin` describes; it must describe one.
fn settings_schema_of(plugin: &PluginHandle) -> serde_json::Value {
    plugin
        .settings_schema()
        .expect("describes")
        .unwrap_or_else(|| panic!("{} takes settings", plugin.name()))
}

#[test]
fn a_rust_plugins_settings_are_described_taken_whole_or_refused_at_their_pointer() {
    // traffik's one setting: where a block without `bind` listens.
    let traffik = load_ok(&rust_cdylib("voodu_traffik"));
    let schema = settings_schema_of(&traffik);
    assert_eq!(
        schema["properties"]["default_bind_host"]["default"], "0.0.0.0",
        "{schema}"
    );
    let unbound = || {
        traffik
            .validate(&request("traffik", json!({"port": 8084})))
            .expect("valid")
            .spec["bind"]
            .clone()
    };
    assert_eq!(unbound(), "0.0.0.0:8084", "before any settings");
    traffik
        .configure(&json!({"default_bind_host": "127.0.0.1"}))
        .expect("an IP address is taken");
    assert_eq!(unbound(), "127.0.0.1:8084");
    let refused = traffik
        .configure(&json!({"default_bind_host": "the-lan"}))
        .expect_err("a name is not an IP address");
    assert!(
        matches!(&refused, CallError::Refused { pointer: Some(pointer), .. } if pointer == "/default_bind_host"),
        "{refused:?}"
    );
    assert_eq!(
        unbound(),
        "127.0.0.1:8084",
        "a refusal keeps the settings it had"
    );
    // A plugin that describes no settings is never configured.
    let echo = load_ok(&rust_cdylib("voodu_echo"));
    assert_eq!(echo.settings_schema().expect("describes"), None);
}

#[test]
fn a_c_plugins_settings_are_described_and_keep_its_config_files_in_their_directory() {
    let haproxy = load_ok(Path::new(voodu_haproxy::PLUGIN_PATH));
    let schema = settings_schema_of(&haproxy);
    assert_eq!(
        schema["properties"]["config_dir"]["type"], "string",
        "{schema}"
    );
    let block =
        |config_path: &str| request("haproxy", json!({"port": 8084, "config_path": config_path}));
    // Without config_dir, any path.
    haproxy
        .validate(&block("/etc/passwd"))
        .expect("anywhere, unset");
    haproxy
        .configure(&json!({"config_dir": "/run/voodu-haproxy"}))
        .expect("an absolute directory is taken");
    haproxy
        .validate(&block("/run/voodu-haproxy/esl.cfg"))
        .expect("inside it");
    for outside in [
        "/etc/passwd",
        "/run/voodu-haproxy-other/esl.cfg",
        "/run/voodu-haproxy/../passwd",
    ] {
        let refused = haproxy
            .validate(&block(outside))
            .expect_err("outside config_dir");
        assert!(
            matches!(&refused, CallError::Refused { pointer: Some(pointer), message, .. }
                if pointer == "/config_path" && message.contains("outside config_dir /run/voodu-haproxy")),
            "{outside}: {refused:?}"
        );
    }
    let refused = haproxy
        .configure(&json!({"config_dir": "relative/dir"}))
        .expect_err("a relative directory");
    assert!(
        matches!(&refused, CallError::Refused { pointer: Some(pointer), .. } if pointer == "/config_dir"),
        "{refused:?}"
    );
    haproxy
        .validate(&block("/run/voodu-haproxy/esl.cfg"))
        .expect("the settings it had are kept");
    haproxy.configure(&json!({})).expect("none: anywhere again");
    haproxy
        .validate(&block("/etc/haproxy/esl.cfg"))
        .expect("anywhere");
}
