//! `vd apply` of 1,000 deployments with two plugin blocks each, against raw
//! `hcl::parse` of the same text, in one run.
//!
//! - `raw_hcl_parse`: the peer, hcl-rs parsing the text into a `Body`.
//! - `parse_only`: voodu's manifest parser (spans, typed core spec, plugin
//!   blocks as JSON), to show where the time goes.
//! - `apply`: the whole pipeline: parse, validate all 2,000 blocks through
//!   the C-ABI sample plugin (`echo_c`), and store everything in one
//!   transaction into a fresh on-disk SQLite store (WAL).
//! - `store_only`: that transaction alone, on the same validated input.
//!
//! Run: `cargo bench -p voodu-tests --bench apply`.

use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use voodu_controller::apply::{apply, validate_workload};
use voodu_manifest::parse_manifests;
use voodu_model::ManifestSource;
use voodu_plugin_host::{load_plugin, LoadOptions, PluginRegistry};
use voodu_store::{SqliteStore, Store, WorkloadInput};

const DEPLOYMENTS: usize = 1_000;

/// 1,000 deployments, each with two labelled `echo_c` blocks.
fn manifest_text() -> String {
    let mut text = String::new();
    for index in 0..DEPLOYMENTS {
        text.push_str(&format!(
            r#"deployment "prod" "svc-{index}" {{
  image    = "ghcr.io/acme/svc:1.{index}"
  replicas = 3
  ports    = ["8084"]
  env      = {{ LOG_LEVEL = "info", INDEX = "{index}" }}

  echo_c "sip" {{
    greeting = "hello sip {index}"
  }}
  echo_c "http" {{
    greeting = "hello http {index}"
  }}
}}

"#
        ));
    }
    text
}

fn bench_apply(c: &mut Criterion) {
    let text = manifest_text();
    let sources = vec![ManifestSource {
        path: "bench.hcl".into(),
        text: text.clone(),
    }];
    let plugins_dir = tempfile::tempdir().expect("a plugins directory");
    let (registry, failures) =
        PluginRegistry::open(plugins_dir.path(), LoadOptions::default(), vec![])
            .expect("an empty registry");
    assert!(failures.is_empty());
    registry.insert_loaded(
        load_plugin(
            Path::new(voodu_echo_c::PLUGIN_PATH),
            &LoadOptions::default(),
        )
        .expect("the C sample loads"),
    );

    let mut group = c.benchmark_group("apply_1000_deployments");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(15));
    group.bench_function("raw_hcl_parse", |b| {
        b.iter(|| hcl::parse(&text).expect("the text parses"))
    });
    group.bench_function("parse_only", |b| {
        b.iter(|| {
            let parsed = parse_manifests(&sources);
            assert_eq!(parsed.workloads.len(), DEPLOYMENTS);
            parsed
        })
    });
    let inputs: Vec<WorkloadInput> = parse_manifests(&sources)
        .workloads
        .iter()
        .map(|workload| WorkloadInput {
            block_locations: Vec::new(),
            id: workload.id.clone(),
            core_spec: workload.core.clone(),
            blocks: validate_workload(workload, &registry).expect("valid blocks"),
            source: Some(workload.location.to_string()),
        })
        .collect();
    group.bench_function("store_only", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("a state directory");
                let store = Store::open(&dir.path().join("state.db")).expect("a store");
                (dir, store)
            },
            |(dir, mut store)| {
                store.apply(&inputs, &[]).expect("stored");
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("apply", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("a state directory");
                let store = SqliteStore::open(&dir.path().join("state.db")).expect("a store");
                (dir, store)
            },
            |(dir, store)| {
                let report = apply(
                    parse_manifests(&sources),
                    &registry,
                    &store,
                    None,
                    &mut |_| {},
                )
                .expect("the apply passes");
                assert_eq!(report.workloads.len(), DEPLOYMENTS);
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_apply);
criterion_main!(benches);
