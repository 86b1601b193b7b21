//! The C samples read and write JSON with cJSON. Loaded through the host's
//! own loader, as the controller loads them: text round-trips exactly,
//! whatever its escapes; what cJSON cannot carry (a NUL inside a string, a
//! number it would write back changed) is refused by name, never cut short
//! or rounded; junk is an error, never a value; and every refusal reaches
//! the host as JSON it parses, quotes, backslashes and newlines included.
//! The haproxy sample fails a drain whose statistics it cannot read rather
//! than answer drained.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use voodu_plugin_abi::messages::{
    Block, DrainReply, DrainRequest, Endpoint, ValidateRequest, WorkloadKind,
};
use voodu_plugin_host::{load_plugin, CallError, LoadOptions, PluginCall, PluginHandle};

fn load(path: &str) -> PluginHandle {
    load_plugin(Path::new(path), &LoadOptions::default())
        .unwrap_or_else(|error| panic!("{path} should load: {error}"))
}

fn echo_c() -> PluginHandle {
    load(voodu_echo_c::PLUGIN_PATH)
}

/// Validates an `echo_c` block with this spec through the typed call (the
/// host's own encoding: serde_json writes non-ASCII as UTF-8, control
/// characters as `\u00XX`).
fn validate(plugin: &PluginHandle, spec: Value) -> Result<Value, CallError> {
    plugin
        .validate(&ValidateRequest {
            kind: WorkloadKind::Deployment,
            scope: "prod".into(),
            name: "esl".into(),
            block: Block {
                block_type: "echo_c".into(),
                labels: vec![],
                spec,
            },
            workload: json!({"image": "esl:1", "replicas": 1, "ports": ["8084"]}),
        })
        .map(|reply| reply.spec)
}

/// A validate request around `spec_text`, a block body as JSON text, so
/// that its escapes reach the plugin exactly as written here.
fn request_text(spec_text: &str) -> String {
    format!(
        r#"{{"kind":"deployment","scope":"prod","name":"esl","block":{{"type":"echo_c","spec":{spec_text}}},"workload":{{"replicas":1}}}}"#
    )
}

/// Sends raw request bytes to validate; the reply's spec on success.
fn validate_raw(plugin: &PluginHandle, request: &str) -> Result<Value, CallError> {
    let reply = plugin.call_raw(PluginCall::Validate, request.as_bytes().to_vec())?;
    let reply: Value = serde_json::from_slice(&reply).expect("an OK reply is JSON");
    Ok(reply["spec"].clone())
}

fn refusal(result: Result<Value, CallError>) -> String {
    match result {
        Err(CallError::Refused { message, .. }) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_euro_sign_round_trips_exactly_escaped_or_not() {
    let echo_c = echo_c();
    let spec = validate_raw(&echo_c, &request_text(r#"{"greeting":"5 \u20ac, \u00e9"}"#))
        .expect("validate succeeds");
    assert_eq!(spec["greeting"], "5 \u{20ac}, \u{e9}");
    assert_eq!(
        spec["greeting"].as_str().unwrap().as_bytes(),
        "5 €, é".as_bytes()
    );
    // As the host writes it: raw UTF-8.
    let spec = validate(&echo_c, json!({"greeting": "5 €", "note": "ünïcödé"})).unwrap();
    assert_eq!(spec, json!({"greeting": "5 €", "note": "ünïcödé"}));
}

#[test]
fn a_surrogate_pair_becomes_the_one_character_it_encodes() {
    let echo_c = echo_c();
    let spec = validate_raw(
        &echo_c,
        &request_text(r#"{"greeting":"crab \ud83e\udd80!"}"#),
    )
    .expect("validate succeeds");
    assert_eq!(spec["greeting"], "crab \u{1f980}!");
    assert_eq!(spec["greeting"].as_str().unwrap().chars().count(), 7);
    let spec = validate(&echo_c, json!({"greeting": "🦀"})).unwrap();
    assert_eq!(spec["greeting"], "🦀");
    // Half a pair is not a character: the request is malformed.
    for lone in [r#"{"greeting":"\ud83e"}"#, r#"{"greeting":"\udd80x"}"#] {
        let error = validate_raw(&echo_c, &request_text(lone))
            .expect_err("a lone surrogate is an error")
            .to_string();
        assert!(
            error.starts_with("plugin echo_c failed in validate: malformed validate request"),
            "{error}"
        );
    }
}

#[test]
fn a_nul_in_a_string_is_refused_by_name_never_cut_short() {
    let echo_c = echo_c();
    let reason = "holds a NUL character (\\u0000), which this plugin cannot carry: its strings \
                  end at the first NUL — remove it";
    assert_eq!(
        refusal(validate(&echo_c, json!({"greeting": "hello\u{0}world"}))),
        format!("greeting {reason}")
    );
    assert_eq!(
        refusal(validate(
            &echo_c,
            json!({"greeting": "hi", "nested": {"list": ["ok", "x\u{0}"]}})
        )),
        format!("nested.list[1] {reason}")
    );
    assert_eq!(
        refusal(validate(&echo_c, json!({"ke\u{0}y": 1}))),
        format!("the key ke {reason}")
    );
    // Escaped as the host escapes it, or written by hand: the same refusal.
    assert_eq!(
        refusal(validate_raw(
            &echo_c,
            &request_text(r#"{"greeting":"a\u0000"}"#)
        )),
        format!("greeting {reason}")
    );
    // A backslash followed by the text u0000 is no NUL, and is carried.
    let spec = validate(&echo_c, json!({"greeting": "\\u0000 is six characters"})).unwrap();
    assert_eq!(spec["greeting"], "\\u0000 is six characters");
}

#[test]
fn junk_where_a_value_belongs_is_an_error_never_a_value() {
    let echo_c = echo_c();
    let mut requests: Vec<String> = [
        r#"{"greeting": tru}"#,
        r#"{"greeting": nul}"#,
        r#"{"greeting": truex}"#,
        r#"{"greeting": 1x}"#,
        r#"{"greeting": -}"#,
        r#"{"greeting": "a" "b"}"#,
        r#"{"greeting": "hi",}"#,
        r#"{"greeting": 'hi'}"#,
    ]
    .into_iter()
    .map(request_text)
    .collect();
    // Trailing garbage after a whole, valid request.
    requests.push(request_text(r#"{"greeting": "hi"}"#) + " trailing");
    requests.push(request_text(r#"{"greeting": "hi"}"#) + "{}");
    // A raw control character, which JSON always escapes.
    requests.push(request_text("{\"greeting\": \"a\u{1}b\"}"));
    for request in requests {
        let error = validate_raw(&echo_c, &request).expect_err(&request);
        assert!(
            matches!(error, CallError::Failed { .. }),
            "{request}: {error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("plugin echo_c failed in validate: malformed validate request"),
            "{request}: {error}"
        );
    }
    // Whitespace around the request is fine.
    let spec = validate_raw(&echo_c, &format!(" \n{}\r\n\t", request_text("{}"))).unwrap();
    assert_eq!(spec, json!({"greeting": "hello"}));
}

#[test]
fn refusals_with_quotes_backslashes_and_newlines_reach_the_host_intact() {
    let echo_c = echo_c();
    // The operator's value, shown back as JSON inside the message.
    assert_eq!(
        refusal(validate(&echo_c, json!({"greeting": {"say": "\"hi\"\\"}}))),
        r#"greeting must be a string, not {"say":"\"hi\"\\"}"#
    );
    assert_eq!(
        refusal(validate(&echo_c, json!({"greeting": 42}))),
        "greeting must be a string, not 42"
    );
    // A field named with a quote, a backslash and a newline.
    let message = refusal(validate(&echo_c, json!({"a \"b\"\\c\nd": "\u{0}"})));
    assert!(
        message.starts_with("a \"b\"\\c\nd holds a NUL character"),
        "{message:?}"
    );
    // A refusal in validate is the operator's to fix, not a plugin failure.
    assert!(matches!(
        validate(&echo_c, json!({"greeting": []})),
        Err(CallError::Refused { .. })
    ));
}

#[test]
fn numbers_come_back_exactly_or_are_refused_by_name() {
    let echo_c = echo_c();
    let spec = json!({
        "greeting": "hi",
        "port": 8084,
        "negative": -3,
        "large": 999_999_999_999_999u64,
        "ratio": 0.1,
        "tiny": 1.5e-10,
        "list": [1, 2.5, {"deep": -0.25}]
    });
    assert_eq!(validate(&echo_c, spec.clone()).unwrap(), spec);
    assert_eq!(
        refusal(validate(
            &echo_c,
            json!({"id": 18_446_744_073_709_551_615u64})
        )),
        "id is beyond ±10^15, which this plugin cannot carry exactly (cJSON keeps numbers as \
         doubles) — write it as a string"
    );
    assert_eq!(
        refusal(validate(
            &echo_c,
            json!({"list": [1, {"x": 0.30000000000000004}]})
        )),
        "list[1].x would come back from cJSON as 0.3, not exactly as written — write it as a \
         string"
    );
}

/// A stand-in for HAProxy's runtime socket in `dir`: it answers `show stat`
/// with `stats`, or with `None` holds the connection without answering,
/// and answers every other command with nothing.
fn fake_runtime_socket(dir: &Path, stats: Option<&'static str>) -> PathBuf {
    let path = dir.join("runtime.sock");
    let listener = UnixListener::bind(&path).expect("bind the fake runtime socket");
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut command = [0u8; 256];
            let read = stream.read(&mut command).unwrap_or(0);
            if command[..read].starts_with(b"show stat") {
                match stats {
                    Some(answer) => {
                        let _ = stream.write_all(answer.as_bytes());
                    }
                    None => std::thread::sleep(Duration::from_secs(3)),
                }
            }
        }
    });
    path
}

fn drain_through(stats: Option<&'static str>) -> Result<DrainReply, CallError> {
    let dir = tempfile::tempdir().unwrap();
    let socket = fake_runtime_socket(dir.path(), stats);
    let haproxy = load(voodu_haproxy::PLUGIN_PATH);
    haproxy.drain(&DrainRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: Block {
            block_type: "haproxy".into(),
            labels: vec!["http".into()],
            spec: json!({
                "port": 8084,
                "config_path": dir.path().join("haproxy.cfg").display().to_string(),
                "frontend": "127.0.0.1:8084",
                "mode": "tcp",
                "runtime_socket": socket.display().to_string(),
            }),
        },
        replica: Endpoint {
            replica_id: "b2".into(),
            address: "127.0.0.1:9002".into(),
            node: None,
        },
        budget_ms: 10_000,
        elapsed_ms: 0,
    })
}

#[test]
fn a_haproxy_drain_fails_rather_than_claim_drained_when_show_stat_cannot_be_read() {
    let failure = |stats: Option<&'static str>| match drain_through(stats) {
        Err(error @ CallError::Failed { .. }) => error.to_string(),
        other => panic!("{stats:?} must fail the drain, not answer {other:?}"),
    };
    let garbage = failure(Some("Unknown command.\n  help\n"));
    assert!(
        garbage.contains("did not answer show stat with its statistics: \"Unknown command.\""),
        "{garbage}"
    );
    let nothing = failure(Some(""));
    assert!(
        nothing.contains("answered show stat with nothing"),
        "{nothing}"
    );
    let silent = failure(None);
    assert!(silent.contains("did not answer within 2 s"), "{silent}");
    let no_sessions = failure(Some(
        "# pxname,svname,qcur,qmax,scur,smax\nvoodu_prod_esl_http,b2,0,0,,0\n",
    ));
    assert!(
        no_sessions.contains("listed voodu_prod_esl_http/b2 without its current sessions"),
        "{no_sessions}"
    );
    // What it can read it answers as before.
    assert_eq!(
        drain_through(Some(
            "# pxname,svname,qcur,qmax,scur,smax\nvoodu_prod_esl_http,b2,0,0,3,5\n"
        ))
        .unwrap(),
        DrainReply::Draining {
            retry_after_ms: 100
        }
    );
    assert_eq!(
        drain_through(Some(
            "# pxname,svname,qcur,qmax,scur,smax\nvoodu_prod_esl_http,b2,0,0,0,5\n"
        ))
        .unwrap(),
        DrainReply::Drained
    );
    // A server HAProxy does not list carries no sessions through it.
    assert_eq!(
        drain_through(Some(
            "# pxname,svname,qcur,qmax,scur,smax\nvoodu_prod_esl_http,a1,0,0,3,5\n"
        ))
        .unwrap(),
        DrainReply::Drained
    );
}
