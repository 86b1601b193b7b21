//! A store written by the code of schema 4 (`fixtures/store-schema-4.db`,
//! made from `fixtures/store-schema-4.hcl` by commit e196b57, before core
//! specs were stored as their type) opens at schema 5 with every workload,
//! revision and deletion read as typed core specs, and nothing an operator
//! applied changes meaning: the same manifest, in voodu's spellings now
//! (`fixtures/store-schema-4.voodu.hcl`), parses to the same core specs,
//! and the containers keep their hash where neither the ports nor the
//! probes' names changed.

use std::collections::BTreeMap;
use std::time::Duration;

use voodu_model::probes::Check;
use voodu_model::{EndpointEnvelope, NormalisedBlock, WorkloadId};
use voodu_plugin_abi::messages::Addressing;
use voodu_store::{SqliteStore, StateStore, StoreChange, WorkloadInput};

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// The store of the fixture, copied so the test never changes it.
fn old_store() -> (tempfile::TempDir, SqliteStore) {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("state.db");
    std::fs::copy(fixture("store-schema-4.db"), &path).unwrap();
    let store = SqliteStore::open(&path).expect("a schema-4 store opens");
    (directory, store)
}

/// The manifest as `vd apply` would store it now, with the blocks as the
/// fixture's writer normalised them.
fn manifest_inputs() -> Vec<WorkloadInput> {
    let text = std::fs::read_to_string(fixture("store-schema-4.voodu.hcl")).unwrap();
    let (workloads, diagnostics) =
        voodu_manifest::parse_manifest("store-schema-4.voodu.hcl", &text);
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    workloads
        .into_iter()
        .map(|workload| WorkloadInput {
            block_locations: Vec::new(),
            id: workload.id,
            core_spec: workload.core,
            blocks: workload
                .plugin_blocks
                .into_iter()
                .map(|block| NormalisedBlock {
                    claims: Vec::new(),
                    block_type: block.block.block_type,
                    labels: block.block.labels,
                    spec: block.block.spec,
                    endpoints: EndpointEnvelope {
                        port: Some(8084),
                        addressing: Addressing::Ip,
                    },
                })
                .collect(),
            source: None,
        })
        .collect()
}

fn id(text: &str) -> WorkloadId {
    text.parse().unwrap()
}

#[test]
fn a_schema_4_store_reads_back_as_typed_core_specs() {
    let (_directory, store) = old_store();
    assert_eq!(store.schema_version().unwrap(), 12);

    let esl = store.workload(&id("deployment/prod/esl")).unwrap().unwrap();
    assert_eq!(esl.revision, 2);
    let core = &esl.core_spec;
    assert_eq!(core.replicas, 3);
    assert_eq!(core.resources.memory_bytes, Some(64 << 20));
    assert_eq!(core.resources.nano_cpus, Some(1_000_000_000));
    assert_eq!(core.resources.pids, Some(100));
    let readiness = core.probes.readiness.as_ref().expect("a readiness probe");
    assert_eq!(readiness.period, Duration::from_millis(500));
    assert!(
        matches!(&readiness.check, Check::HttpGet { port: 8084, path, .. } if path == "/ready")
    );
    assert!(core.blocks.is_empty(), "{:?}", core.blocks);
    let ports: Vec<String> = core.ports.iter().map(ToString::to_string).collect();
    assert_eq!(ports, ["8084", "9090:9090", "0.0.0.0:5060:5060/udp"]);

    // Core blocks not acted on stay where they were.
    let pg = store.workload(&id("statefulset/prod/pg")).unwrap().unwrap();
    assert_eq!(pg.core_spec.blocks_not_acted_on(), ["autoscale", "init"]);

    // Every revision, and the deleted workload's tombstone, read too.
    let revisions = store.revisions(&esl.id).unwrap();
    assert_eq!(revisions.len(), 2);
    assert_eq!(revisions[0].core_spec.replicas, 2);
    let gone = id("deployment/prod/gone");
    assert_eq!(store.deletions().unwrap(), std::slice::from_ref(&gone));
    let tombstone = store.tombstone(&gone).unwrap().unwrap();
    assert_eq!(tombstone.core_spec.resources.memory_bytes, Some(128 << 20));
}

#[test]
fn the_manifest_in_voodus_spellings_parses_to_the_stored_specs() {
    let (_directory, store) = old_store();
    let inputs = manifest_inputs();
    // esl's second revision scaled it to 3; its first is the manifest's,
    // with the same values under voodu's names.
    let esl = &inputs[0];
    let first = &store.revisions(&esl.id).unwrap()[0];
    assert_eq!(first.core_spec, esl.core_spec);
    let stored_esl = store.workload(&esl.id).unwrap().unwrap();
    assert_eq!(
        stored_esl.spec_hash,
        store.revisions(&esl.id).unwrap()[1].spec_hash,
        "a workload's hash is its current revision's"
    );
    // The statefulset's stored autoscale block, refused in voodu's shape
    // now, and its init step are the differences: applied, it stores
    // revision 2.
    // Its init step, stored as a block then, is typed now (and run).
    let pg = inputs[1].clone();
    let stored_pg = store.workload(&pg.id).unwrap().unwrap();
    assert_eq!(
        stored_pg.core_spec.blocks["init"]["migrate"]["command"],
        serde_json::json!(["migrate"])
    );
    assert_eq!(pg.core_spec.init[0].command, ["migrate"]);
    let mut stored = stored_pg.core_spec.clone();
    stored.blocks.clear();
    let mut parsed = pg.core_spec.clone();
    parsed.init.clear();
    assert_eq!(stored, parsed);
    assert!(matches!(
        store.apply(&[pg], &[]).unwrap()[..],
        [StoreChange::Updated { revision: 2, .. }]
    ));
    // The old spellings are refused, each pointing at voodu's.
    let old = std::fs::read_to_string(fixture("store-schema-4.hcl")).unwrap();
    let (_, problems) = voodu_manifest::parse_manifest("store-schema-4.hcl", &old);
    let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        messages
            .iter()
            .any(|message| message.contains("did you mean limits { memory = \"512Mi\" }?")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|message| message.contains("did you mean http_get {")),
        "{messages:?}"
    );
}

#[test]
fn containers_keep_their_hash_across_the_migration() {
    let (_directory, store) = old_store();
    let before: BTreeMap<String, String> = serde_json::from_str(
        &std::fs::read_to_string(fixture("store-schema-4.container-hashes.json")).unwrap(),
    )
    .unwrap();
    let pg = store.workload(&id("statefulset/prod/pg")).unwrap().unwrap();
    assert_eq!(pg.core_spec.container_hash(), before["statefulset/prod/pg"]);
    let gone = store
        .tombstone(&id("deployment/prod/gone"))
        .unwrap()
        .unwrap();
    assert_eq!(
        gone.core_spec.container_hash(),
        before["deployment/prod/gone"],
        "limits, stored as limits now, hash as before"
    );
    // esl's revision 1 wrote "127.0.0.1:9090:9090", now stored in its
    // shortest form "9090:9090": the one spelling change, which replaces
    // its replicas once, surge-first, after the upgrade.
    let esl = store
        .revisions(&id("deployment/prod/esl"))
        .unwrap()
        .remove(0);
    assert_ne!(
        esl.core_spec.container_hash(),
        before["deployment/prod/esl"]
    );
}
