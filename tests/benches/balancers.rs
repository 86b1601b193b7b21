//! traffik against HAProxy, side by side in one run: both in TCP mode on
//! loopback, in front of the same three backends, under the same load
//! generator (32 client threads, a new connection per request: connect,
//! send a line, read the answer until the backend closes).
//!
//! - traffik: the sample plugin's cdylib, loaded by the host's loader and
//!   fed one publish.
//! - HAProxy: the real one, started from the configuration the haproxy
//!   sample plugin renders for the same endpoints.
//!
//! Each iteration is a batch of 3,200 requests; criterion reports the time
//! per batch (requests per second = 3,200 / time). The p99 latency of single
//! requests, over every batch, is printed at the end for both.
//!
//! Run: `cargo bench -p voodu-tests --bench balancers` (needs haproxy).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use parking_lot::Mutex;
use serde_json::json;
use voodu_plugin_abi::messages::{Block, Endpoint, PublishRequest, ValidateRequest, WorkloadKind};
use voodu_plugin_host::{load_plugin, LoadOptions};
use voodu_tests::{free_port, id_backend};

const CLIENTS: usize = 32;
const BATCH: usize = 3_200;

fn request(through: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(through) else {
        return false;
    };
    let _ = stream.set_nodelay(true);
    if stream.write_all(b"ping\n").is_err() {
        return false;
    }
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).is_ok() && !answer.is_empty()
}

/// Runs one batch through `through`; returns its wall time, recording each
/// request's latency.
fn batch(through: SocketAddr, latencies: &Arc<Mutex<Vec<Duration>>>) -> Duration {
    let started = Instant::now();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let latencies = latencies.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::with_capacity(BATCH / CLIENTS);
                for _ in 0..BATCH / CLIENTS {
                    let one = Instant::now();
                    assert!(request(through), "a request through {through} failed");
                    mine.push(one.elapsed());
                }
                latencies.lock().extend(mine);
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a client");
    }
    started.elapsed()
}

fn p99(latencies: &Mutex<Vec<Duration>>) -> Duration {
    let mut sorted = latencies.lock().clone();
    sorted.sort();
    sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)]
}

fn block(block_type: &str, spec: serde_json::Value) -> Block {
    Block {
        block_type: block_type.into(),
        labels: vec![],
        spec,
    }
}

fn bench_balancers(c: &mut Criterion) {
    let backends = [
        ("a", id_backend("a")),
        ("b", id_backend("b")),
        ("c", id_backend("c")),
    ];
    let endpoints: Vec<Endpoint> = backends
        .iter()
        .map(|(id, address)| Endpoint {
            replica_id: (*id).into(),
            address: address.to_string(),
            node: None,
        })
        .collect();
    let publish =
        |plugin: &voodu_plugin_host::PluginHandle, block_type: &str, spec: serde_json::Value| {
            let validated = plugin
                .validate(&ValidateRequest {
                    kind: WorkloadKind::Deployment,
                    scope: "bench".into(),
                    name: "lb".into(),
                    block: block(block_type, spec),
                    workload: json!({"replicas": 3, "ports": ["8084"]}),
                })
                .expect("the block is valid");
            plugin
                .publish(&PublishRequest {
                    kind: WorkloadKind::Deployment,
                    scope: "bench".into(),
                    name: "lb".into(),
                    block: block(block_type, validated.spec),
                    generation: 1,
                    endpoints: endpoints.clone(),
                })
                .expect("published");
        };

    let traffik = load_plugin(
        &voodu_tests::rust_cdylib("voodu_traffik"),
        &LoadOptions::default(),
    )
    .expect("traffik loads");
    let traffik_address = SocketAddr::from(([127, 0, 0, 1], free_port()));
    publish(
        &traffik,
        "traffik",
        json!({"port": 8084, "bind": traffik_address.to_string()}),
    );

    let dir = tempfile::tempdir().unwrap();
    let haproxy_plugin = load_plugin(
        Path::new(voodu_haproxy::PLUGIN_PATH),
        &LoadOptions::default(),
    )
    .expect("the haproxy plugin loads");
    let haproxy_address = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = dir.path().join("haproxy.cfg");
    publish(
        &haproxy_plugin,
        "haproxy",
        json!({"port": 8084, "frontend": haproxy_address.to_string(), "config_path": config.display().to_string()}),
    );
    let mut haproxy = Command::new("haproxy")
        .args(["-f"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy runs (install it from the distribution)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(haproxy_address).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }

    let traffik_latencies = Arc::new(Mutex::new(Vec::new()));
    let haproxy_latencies = Arc::new(Mutex::new(Vec::new()));
    let mut group = c.benchmark_group("tcp_balancer_3200_requests");
    group.sample_size(20);
    group.throughput(Throughput::Elements(BATCH as u64));
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("traffik", |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| batch(traffik_address, &traffik_latencies))
                .sum()
        })
    });
    group.bench_function("haproxy", |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| batch(haproxy_address, &haproxy_latencies))
                .sum()
        })
    });
    group.finish();
    eprintln!(
        "p99 latency of one request: traffik {:?}, haproxy {:?} ({} and {} requests)",
        p99(&traffik_latencies),
        p99(&haproxy_latencies),
        traffik_latencies.lock().len(),
        haproxy_latencies.lock().len()
    );
    let _ = haproxy.kill();
    let _ = haproxy.wait();
}

criterion_group!(benches, bench_balancers);
criterion_main!(benches);
