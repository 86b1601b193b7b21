//! 1,000 workloads with two plugin blocks each, stored in one apply: into
//! the cluster store on a real etcd (one member on loopback, started by the
//! bench with its transaction limits raised for an apply this large),
//! against the same apply into the embedded SQLite store, in one run.
//!
//! Run: `cargo bench -p voodu-tests --bench cluster_store` (needs `etcd`:
//! `tests/run --setup` installs it). The target: etcd at most 3×
//! SQLite.

#[path = "../support/etcd.rs"]
#[allow(dead_code)]
mod etcd;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::json;
use voodu_model::{CoreSpec, EndpointEnvelope, NormalisedBlock, WorkloadId};
use voodu_plugin_abi::messages::{Addressing, WorkloadKind};
use voodu_store::{SqliteStore, StateStore, WorkloadInput};
use voodu_store_etcd::{EtcdOptions, EtcdStore};

const WORKLOADS: usize = 1_000;

fn inputs() -> Vec<WorkloadInput> {
    (0..WORKLOADS)
        .map(|index| WorkloadInput {
            block_locations: Vec::new(),
            id: WorkloadId::new(WorkloadKind::Deployment, "prod", format!("svc-{index}")),
            core_spec: CoreSpec::of_image(format!("ghcr.io/acme/svc:1.{index}"), 3),
            blocks: ["sip", "http"]
                .iter()
                .map(|label| NormalisedBlock {
                    claims: Vec::new(),
                    block_type: "echo_c".into(),
                    labels: vec![(*label).into()],
                    spec: json!({"greeting": format!("hello {label} {index}")}),
                    endpoints: EndpointEnvelope {
                        port: Some(8084),
                        addressing: Addressing::Ip,
                    },
                })
                .collect(),
            source: Some(format!("bench.hcl:{index}:1")),
        })
        .collect()
}

fn bench_cluster_store(c: &mut Criterion) {
    let inputs = inputs();
    let Some(cluster) = etcd::EtcdCluster::start_with(
        1,
        &[
            "--max-txn-ops",
            "100000",
            "--max-request-bytes",
            "67108864",
            "--quota-backend-bytes",
            "8589934592",
        ],
    ) else {
        eprintln!("etcd is not installed: `tests/run --setup` installs it");
        return;
    };
    let mut group = c.benchmark_group("apply_1000_workloads");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));

    let directory = tempfile::tempdir().expect("a directory");
    let fresh = AtomicUsize::new(0);
    group.bench_function("sqlite", |b| {
        b.iter_batched(
            || {
                let path = directory
                    .path()
                    .join(format!("state-{}.db", fresh.fetch_add(1, Ordering::SeqCst)));
                SqliteStore::open(&path).expect("a store")
            },
            |store| store.apply(&inputs, &[]).expect("stored"),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("etcd", |b| {
        b.iter_batched(
            || {
                let mut options = EtcdOptions::new(cluster.endpoints());
                options.prefix = format!("/bench-{}", fresh.fetch_add(1, Ordering::SeqCst));
                options.request_timeout = Duration::from_secs(30);
                EtcdStore::connect(&options).expect("a store")
            },
            |store| store.apply(&inputs, &[]).expect("stored"),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_cluster_store);
criterion_main!(benches);
