//! The round trip of one `validate` with a ~1 KiB block, in one run:
//!
//! - through the loaded Rust plugin (abi_stable) and the loaded C plugin;
//! - peer (a): exec-per-call, a process spawned per call, JSON over stdio;
//! - peer (b): a persistent process answering over a unix socket;
//! - the same Rust plugin out of process (`LoadOptions::out_of_process`):
//!   its child, `vd`, makes the call and the reply crosses a socket pair
//!   (the goal: at most 3× in process).
//!
//! The `boundary` group isolates the host's own overhead: the same request
//! bytes through `PluginHandle::call_raw` versus the plugin's JSON work
//! called directly in-process. Their difference is the boundary cost.
//!
//! The `metrics_overhead` group runs the Rust plugin's round trip with the
//! controller's metrics off and on, alternating (its `Metrics` counting
//! every call, as with `--metrics-listen`), and prints the ratio.
//!
//! Run: `cargo bench -p voodu-tests --bench plugin_call`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use voodu_plugin_abi::messages::{Block, ValidateReply, ValidateRequest, WorkloadKind};
use voodu_plugin_host::{load_plugin, LoadOptions, PluginCall};
use voodu_tests::rust_cdylib;

const PEER: &str = env!("CARGO_BIN_EXE_echo-peer");
/// `vd`, which serves as an out-of-process plugin's child.
const VD: &str = env!("CARGO_BIN_EXE_vd-under-test");

/// A validate request whose block is about 1 KiB of JSON.
fn request(block_type: &str) -> ValidateRequest {
    let mut spec = serde_json::Map::new();
    for index in 0..28 {
        spec.insert(
            format!("setting_{index:02}"),
            json!(format!("value-{index:02}-abcdefghij")),
        );
    }
    let request = ValidateRequest {
        kind: WorkloadKind::Deployment,
        scope: "prod".into(),
        name: "esl".into(),
        block: Block {
            block_type: block_type.into(),
            labels: vec!["http".into()],
            spec: Value::Object(spec),
        },
        workload: json!({"image": "ghcr.io/acme/esl:1.2", "replicas": 3, "ports": ["8084"]}),
    };
    let size = serde_json::to_vec(&request.block)
        .map(|b| b.len())
        .unwrap_or(0);
    assert!(
        (900..1300).contains(&size),
        "block is {size} bytes, not ~1 KiB"
    );
    request
}

fn exec_per_call(request: &[u8]) -> ValidateReply {
    let mut child = Command::new(PEER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn echo-peer");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request)
        .expect("write");
    let mut reply = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut reply)
        .expect("read");
    child.wait().expect("wait");
    serde_json::from_slice(&reply).expect("a reply")
}

struct SocketPeer {
    child: std::process::Child,
    stream: UnixStream,
    _dir: tempfile::TempDir,
}

impl SocketPeer {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("peer.sock");
        let child = Command::new(PEER)
            .arg("serve")
            .arg(&socket)
            .spawn()
            .expect("spawn echo-peer serve");
        let stream = (0..200)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                UnixStream::connect(&socket).ok()
            })
            .expect("the peer listens");
        SocketPeer {
            child,
            stream,
            _dir: dir,
        }
    }

    fn call(&mut self, request: &[u8]) -> ValidateReply {
        self.stream
            .write_all(&(request.len() as u32).to_le_bytes())
            .expect("write");
        self.stream.write_all(request).expect("write");
        let mut length = [0u8; 4];
        self.stream.read_exact(&mut length).expect("read");
        let mut reply = vec![0u8; u32::from_le_bytes(length) as usize];
        self.stream.read_exact(&mut reply).expect("read");
        serde_json::from_slice(&reply).expect("a reply")
    }
}

impl Drop for SocketPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn round_trip(c: &mut Criterion) {
    let options = LoadOptions::default();
    let rust = load_plugin(&rust_cdylib("voodu_echo"), &options).expect("load echo");
    let c_plugin =
        load_plugin(Path::new(voodu_echo_c::PLUGIN_PATH), &options).expect("load echo_c");
    let rust_request = request("echo");
    let c_request = request("echo_c");
    let mut group = c.benchmark_group("validate_1KiB_round_trip");
    group.bench_function("in_process_rust_plugin", |b| {
        b.iter(|| rust.validate(&rust_request).expect("ok"))
    });
    group.bench_function("in_process_c_plugin", |b| {
        b.iter(|| c_plugin.validate(&c_request).expect("ok"))
    });
    voodu_plugin_host::out_of_process::set_child_program(VD.into());
    let outside = load_plugin(
        &rust_cdylib("voodu_echo"),
        &LoadOptions {
            out_of_process: true,
            ..LoadOptions::default()
        },
    )
    .expect("load echo out of process");
    group.bench_function("out_of_process_rust_plugin", |b| {
        b.iter(|| outside.validate(&rust_request).expect("ok"))
    });
    drop(outside);
    let mut peer = SocketPeer::start();
    group.bench_function("peer_b_unix_socket_process", |b| {
        b.iter(|| {
            let bytes = serde_json::to_vec(&rust_request).expect("encode");
            peer.call(&bytes)
        })
    });
    drop(peer);
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("peer_a_exec_per_call", |b| {
        b.iter(|| {
            let bytes = serde_json::to_vec(&rust_request).expect("encode");
            exec_per_call(&bytes)
        })
    });
    group.finish();

    let bytes = serde_json::to_vec(&rust_request).expect("encode");
    let mut boundary = c.benchmark_group("boundary");
    boundary.bench_function("plugin_json_work_direct", |b| {
        b.iter(|| voodu_echo::answer_validate_json(&bytes.clone()).expect("ok"))
    });
    boundary.bench_function("rust_plugin_call_raw", |b| {
        b.iter(|| {
            rust.call_raw(PluginCall::Validate, bytes.clone())
                .expect("ok")
        })
    });
    boundary.finish();
}

/// The Rust plugin's round trip with metrics off and on, alternating
/// (off, on, off, on) so that drift over the run falls on both; the ratio
/// of the sums of criterion's estimates. The observer is process-wide and
/// set once, so it is registered at the start and forwards to the
/// controller's `Metrics` only while on (the cost of that check, an atomic
/// load, falls on both).
fn metrics_overhead(c: &mut Criterion) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let options = LoadOptions::default();
    let rust = load_plugin(&rust_cdylib("voodu_echo"), &options).expect("load echo");
    let request = request("echo");
    let metrics = Arc::new(voodu_controller::metrics::Metrics::new());
    let on = Arc::new(AtomicBool::new(false));
    {
        let (metrics, on) = (metrics.clone(), on.clone());
        voodu_plugin_host::observe::observe_calls(Box::new(move |plugin, call, result, took| {
            if on.load(Ordering::Relaxed) {
                metrics.plugin_call(plugin, call, result, took);
            }
        }));
    }
    let mut group = c.benchmark_group("metrics_overhead");
    for (name, metrics_on) in [
        ("off_1", false),
        ("on_1", true),
        ("off_2", false),
        ("on_2", true),
    ] {
        on.store(metrics_on, Ordering::Relaxed);
        group.bench_function(name, |b| b.iter(|| rust.validate(&request).expect("ok")));
    }
    // The work metrics add to each call, alone: far steadier on a busy
    // machine than the difference of two round trips.
    group.bench_function("metrics_work_per_call", |b| {
        b.iter(|| {
            metrics.plugin_call(
                "echo",
                PluginCall::Validate,
                voodu_plugin_host::observe::CallResult::Ok,
                Duration::from_micros(27),
            )
        })
    });
    group.finish();
    // Criterion's own figure: the slope when it sampled linearly, else
    // the mean.
    let estimate = |name: &str| -> Option<f64> {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
        let file = target.join(format!(
            "criterion/metrics_overhead/{name}/new/estimates.json"
        ));
        let estimates: Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
        estimates["slope"]["point_estimate"]
            .as_f64()
            .or_else(|| estimates["mean"]["point_estimate"].as_f64())
    };
    let sum = |names: [&str; 2]| -> Option<f64> { Some(estimate(names[0])? + estimate(names[1])?) };
    if let (Some(off), Some(on)) = (sum(["off_1", "off_2"]), sum(["on_1", "on_2"])) {
        eprintln!(
            "metrics_overhead: validate round trip {:.0} ns with metrics off, {:.0} ns on: ratio {:.4} ({:+.2}%)",
            off / 2.0,
            on / 2.0,
            on / off,
            (on / off - 1.0) * 100.0
        );
        if let Some(work) = estimate("metrics_work_per_call") {
            eprintln!(
                "metrics_overhead: the metrics' own work per call {work:.0} ns, {:.3}% of the round trip with metrics off",
                work / (off / 2.0) * 100.0
            );
        }
    }
}

criterion_group!(benches, round_trip, metrics_overhead);
criterion_main!(benches);
