//! One store test suite, written against the store interface
//! (`voodu_store::StateStore`), run against both backends: the embedded
//! SQLite store and the cluster store on a real etcd. Then the cluster
//! store's own faults: a member down, and no quorum.

#[path = "support/etcd.rs"]
#[allow(dead_code)] // Each test binary uses part of the helpers.
mod etcd;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use voodu_model::{CoreSpec, EndpointEnvelope, EventLevel, Location, NormalisedBlock, WorkloadId};
use voodu_plugin_abi::messages::{Addressing, Claim, Endpoint, WorkloadKind};
use voodu_store::config::{ConfigHold, HoldChange};
use voodu_store::sealing::SecretKeys;
use voodu_store::{
    NewEvent, SqliteStore, StateStore, StoreChange, StoreError, WorkloadInput,
    MAX_EVENTS_PER_WORKLOAD,
};
use voodu_store_etcd::{EtcdOptions, EtcdStore};

use etcd::EtcdCluster;

/// Makes a fresh, empty store of one backend.
type Backend<'a> = &'a dyn Fn() -> Arc<dyn StateStore>;

fn id(name: &str) -> WorkloadId {
    WorkloadId::new(WorkloadKind::Deployment, "prod", name)
}

fn block(block_type: &str, label: &str) -> NormalisedBlock {
    NormalisedBlock {
        claims: Vec::new(),
        block_type: block_type.into(),
        labels: vec![label.into()],
        spec: json!({"port": 8084}),
        endpoints: EndpointEnvelope {
            port: Some(8084),
            addressing: Addressing::Ip,
        },
    }
}

fn input(name: &str, replicas: u32, blocks: &[(&str, &str)]) -> WorkloadInput {
    WorkloadInput {
        block_locations: Vec::new(),
        id: id(name),
        core_spec: CoreSpec::of_image("esl:1", replicas),
        blocks: blocks.iter().map(|(t, l)| block(t, l)).collect(),
        source: Some("esl.hcl:1:1".into()),
    }
}

fn event(name: &str, message: &str) -> NewEvent {
    NewEvent {
        workload: id(name),
        level: EventLevel::Info,
        reason: voodu_model::EventReason::Other("test".into()),
        message: message.into(),
    }
}

/// Every check of the contract, each on a fresh store.
fn contract(backend: Backend<'_>) {
    revisions_rise_only_when_the_spec_changes(backend());
    a_delete_leaves_a_deletion_then_a_tombstone_and_revisions_go_on(backend());
    events_are_numbered_in_order_and_heard_after_commit(backend());
    a_forgotten_publication_keeps_its_generation(backend());
    workloads_are_listed_by_kind_and_by_block_type(backend());
    apply_then_refused_stores_nothing(backend());
    two_writers_at_once_never_mix(backend());
    an_apply_of_many_workloads_is_one_step(backend());
    only_the_newest_keep_releases_revisions_are_kept(backend());
    config_buckets_are_set_and_unset_whole_with_their_events(backend());
    only_the_newest_events_of_each_workload_are_kept(backend());
    claims_are_exclusive_across_workloads_and_freed_by_a_finished_delete(backend());
    a_restart_marks_the_workload_keeps_its_revision_and_outlives_applies(backend());
    frozen_replicas_are_added_and_thawed_and_outlive_applies(backend());
    config_holds_are_kept_with_the_change_and_end_with_a_restart_apply_or_rolling_change(backend());
}

/// `vd config ... --no-restart`: a hold is stored with the change that
/// takes it, reads back, and stops holding once the workload is restarted
/// or changed by an apply; a change that rolls releases it.
fn config_holds_are_kept_with_the_change_and_end_with_a_restart_apply_or_rolling_change(
    store: Arc<dyn StateStore>,
) {
    use voodu_model::config::{Bucket, BucketName, ConfigValue};
    let shared: BucketName = "prod/shared".parse().unwrap();
    let set = |value: &str| {
        Bucket::from([(
            "LOG_LEVEL".to_owned(),
            ConfigValue {
                value: value.to_owned(),
                secret: false,
            },
        )])
    };
    store.apply(&[input("esl", 2, &[])], &[]).unwrap();
    let stored = store.workload(&id("esl")).unwrap().unwrap();
    let hold = ConfigHold::of(&stored, "0123abcd".to_owned());
    store
        .change_config(
            &shared,
            &set("debug"),
            &[],
            &[],
            &HoldChange::Keep(vec![hold.clone()]),
        )
        .unwrap();
    assert_eq!(
        store.config_bucket(&shared).unwrap(),
        set("debug"),
        "stored with its hold"
    );
    assert_eq!(
        store.config_holds(&id("esl")).unwrap(),
        std::slice::from_ref(&hold)
    );
    assert!(hold.holds_for(&stored));
    assert!(store.config_holds(&id("other")).unwrap().is_empty());
    // A restart ends it; so does an apply that changes the workload.
    store.restart(&id("esl"), &[]).unwrap();
    let restarted = store.workload(&id("esl")).unwrap().unwrap();
    assert!(!hold.holds_for(&restarted));
    store.apply(&[input("esl", 3, &[])], &[]).unwrap();
    let applied = store.workload(&id("esl")).unwrap().unwrap();
    let second = ConfigHold::of(&applied, "4567cdef".to_owned());
    assert!(second.holds_for(&applied));
    store.apply(&[input("esl", 4, &[])], &[]).unwrap();
    assert!(!second.holds_for(&store.workload(&id("esl")).unwrap().unwrap()));
    // A change that rolls releases every hold of the workloads it names.
    store
        .change_config(
            &shared,
            &set("warn"),
            &[],
            &[],
            &HoldChange::Keep(vec![second]),
        )
        .unwrap();
    assert_eq!(store.config_holds(&id("esl")).unwrap().len(), 2);
    store
        .change_config(
            &shared,
            &set("info"),
            &[],
            &[],
            &HoldChange::Release(vec![id("esl")]),
        )
        .unwrap();
    assert!(store.config_holds(&id("esl")).unwrap().is_empty());
    assert_eq!(store.config_bucket(&shared).unwrap(), set("info"));
}

fn frozen_replicas_are_added_and_thawed_and_outlive_applies(store: Arc<dyn StateStore>) {
    use std::collections::BTreeSet;
    use voodu_store::Freeze;
    let ids = |ids: &[&str]| {
        ids.iter()
            .map(|id| (*id).to_owned())
            .collect::<BTreeSet<_>>()
    };
    let esl = input("esl", 3, &[("traffik", "http")]);
    assert_eq!(
        store
            .freeze(&esl.id, &Freeze::Add(ids(&["a1f3"])), &[])
            .unwrap(),
        None,
        "nothing to freeze before it is stored"
    );
    store.apply(std::slice::from_ref(&esl), &[]).unwrap();
    assert!(store.workload(&esl.id).unwrap().unwrap().frozen.is_empty());
    let frozen = store
        .freeze(
            &esl.id,
            &Freeze::Add(ids(&["a1f3", "b2c4"])),
            &[event("esl", "stopped")],
        )
        .unwrap();
    assert_eq!(frozen, Some(ids(&["a1f3", "b2c4"])));
    // An apply, changed or not, keeps them, and the revision is the spec's.
    let scaled = input("esl", 4, &[("traffik", "http")]);
    store.apply(&[scaled], &[]).unwrap();
    let stored = store.workload(&esl.id).unwrap().unwrap();
    assert_eq!(
        (stored.revision, stored.frozen),
        (2, ids(&["a1f3", "b2c4"]))
    );
    let thawed = store
        .freeze(&esl.id, &Freeze::Remove(Some(ids(&["a1f3"]))), &[])
        .unwrap();
    assert_eq!(thawed, Some(ids(&["b2c4"])));
    store.freeze(&esl.id, &Freeze::Remove(None), &[]).unwrap();
    assert!(store.workload(&esl.id).unwrap().unwrap().frozen.is_empty());
    let messages: Vec<String> = store
        .events(&esl.id, 10)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert!(messages.contains(&"stopped".to_owned()), "{messages:?}");
}

fn a_restart_marks_the_workload_keeps_its_revision_and_outlives_applies(
    store: Arc<dyn StateStore>,
) {
    let esl = input("esl", 1, &[("traffik", "http")]);
    assert_eq!(
        store
            .restart(&esl.id, &[event("esl", "restarted")])
            .unwrap(),
        None,
        "nothing to restart before it is stored"
    );
    store.apply(std::slice::from_ref(&esl), &[]).unwrap();
    assert_eq!(store.workload(&esl.id).unwrap().unwrap().restarted_ms, None);
    let marked = store
        .restart(&esl.id, &[event("esl", "restarted")])
        .unwrap()
        .expect("a stored workload is marked");
    let stored = store.workload(&esl.id).unwrap().unwrap();
    assert_eq!((stored.revision, stored.restarted_ms), (1, Some(marked)));
    // An apply, changed or not, keeps the mark: it is no part of the spec.
    store.apply(std::slice::from_ref(&esl), &[]).unwrap();
    let scaled = input("esl", 2, &[("traffik", "http")]);
    store.apply(&[scaled], &[]).unwrap();
    let stored = store.workload(&esl.id).unwrap().unwrap();
    assert_eq!((stored.revision, stored.restarted_ms), (2, Some(marked)));
    let messages: Vec<String> = store
        .events(&esl.id, 10)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert!(messages.contains(&"restarted".to_owned()), "{messages:?}");
}

/// A workload whose blocks listen on `binds` (traffik blocks, each
/// claiming its address), written at `web.vd`, line 8 on.
fn listener(name: &str, binds: &[&str]) -> WorkloadInput {
    let mut input = input(name, 1, &[]);
    for (index, bind) in binds.iter().enumerate() {
        let mut block = block("traffik", &format!("l{index}"));
        block.claims = vec![Claim::listen_tcp(bind.parse().unwrap())];
        input.blocks.push(block);
        input.block_locations.push(Location {
            file: "web.vd".into(),
            line: 8 + index,
            column: 3,
        });
    }
    input
}

/// What a refused apply's conflicts say, one line each.
fn conflicts(result: Result<Vec<StoreChange>, StoreError>) -> Vec<String> {
    match result {
        Err(StoreError::ClaimsConflict(conflicts)) => {
            conflicts.iter().map(ToString::to_string).collect()
        }
        other => panic!("expected a claims conflict, got {other:?}"),
    }
}

/// Claims (a block's listen address) are held by one block at a time,
/// across workloads and within one apply; a refused apply stores nothing;
/// an apply of the holder replaces its claims; a delete frees them only
/// once it is finished (its plugins forgot the blocks).
fn claims_are_exclusive_across_workloads_and_freed_by_a_finished_delete(
    store: Arc<dyn StateStore>,
) {
    store
        .apply(&[listener("one", &["127.0.0.1:21300"])], &[])
        .unwrap();
    // Another workload, the same address: refused, naming the holder.
    let refused = conflicts(store.apply(
        &[
            listener("two", &["127.0.0.1:21300"]),
            input("bystander", 1, &[]),
        ],
        &[],
    ));
    assert_eq!(
        refused,
        ["deployment/prod/two: traffik \"l0\" block: 127.0.0.1:21300 is already claimed by deployment/prod/one traffik \"l0\" block (web.vd:8:3) — two blocks never share a listener: give one of them another address, or remove one"]
    );
    assert!(
        store.workload(&id("two")).unwrap().is_none(),
        "nothing stored"
    );
    assert!(
        store.workload(&id("bystander")).unwrap().is_none(),
        "not even the others"
    );
    // The unspecified address overlaps every address on its port.
    assert_eq!(
        conflicts(store.apply(&[listener("two", &["0.0.0.0:21300"])], &[])).len(),
        1
    );
    // Two blocks of one apply claiming one address: the later is named.
    let refused = conflicts(store.apply(
        &[
            listener("three", &["127.0.0.2:80"]),
            listener("four", &["127.0.0.2:80"]),
        ],
        &[],
    ));
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].starts_with("deployment/prod/four:"),
        "{refused:?}"
    );
    assert!(
        refused[0].contains("by deployment/prod/three traffik"),
        "{refused:?}"
    );
    // The holder moves to another address and the address is free, in
    // one apply.
    store
        .apply(
            &[
                listener("one", &["127.0.0.1:21301"]),
                listener("two", &["127.0.0.1:21300"]),
            ],
            &[],
        )
        .unwrap();
    // A deleted workload holds its claims until its deletion is finished.
    store.delete(&id("two")).unwrap();
    let refused = conflicts(store.apply(&[listener("five", &["127.0.0.1:21300"])], &[]));
    assert!(refused[0].contains("by deployment/prod/two"), "{refused:?}");
    store.finish_deletion(&id("two")).unwrap();
    store
        .apply(&[listener("five", &["127.0.0.1:21300"])], &[])
        .unwrap();
    // Claims are stored with their blocks and come back with them.
    let five = store.workload(&id("five")).unwrap().unwrap();
    assert_eq!(
        five.blocks[0].claims,
        [Claim::listen_tcp("127.0.0.1:21300".parse().unwrap())]
    );
}

/// Each workload keeps its newest [`MAX_EVENTS_PER_WORKLOAD`] events: the
/// older ones leave its listing and the store-wide log alike, and a busy
/// workload never pushes out a quiet one's events.
fn only_the_newest_events_of_each_workload_are_kept(store: Arc<dyn StateStore>) {
    let kept = usize::try_from(MAX_EVENTS_PER_WORKLOAD).unwrap();
    let over = 30;
    store.record_events(&[event("quiet", "quiet one")]).unwrap();
    // In batches a default etcd takes in one transaction.
    let messages: Vec<String> = (0..kept + over).map(|n| format!("busy {n}")).collect();
    for batch in messages.chunks(50) {
        let events: Vec<NewEvent> = batch.iter().map(|m| event("busy", m)).collect();
        store.record_events(&events).unwrap();
    }
    let busy: Vec<String> = store
        .events(&id("busy"), kept * 2)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(
        (busy.len(), busy.first()),
        (kept, messages.get(over)),
        "the newest {kept} are kept"
    );
    assert_eq!(busy, messages[over..], "oldest first");
    let logged: Vec<String> = store
        .recent_events(None, kept * 2)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.message)
        .collect();
    assert_eq!(logged.len(), kept + 1, "the store-wide log drops them too");
    assert_eq!(logged[0], "quiet one");
    assert_eq!(logged[1..], messages[over..]);
    let quiet: Vec<String> = store
        .events(&id("quiet"), 10)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(quiet, ["quiet one"]);
}

/// voodu's config buckets: set and unset in one step with the events that
/// tell of it, listed by name, a secret kept as one.
fn config_buckets_are_set_and_unset_whole_with_their_events(store: Arc<dyn StateStore>) {
    use voodu_model::config::{Bucket, BucketName, ConfigValue};
    let rolls = HoldChange::Release(Vec::new());
    let shared: BucketName = "prod/shared".parse().unwrap();
    let value = |text: &str, secret| ConfigValue {
        value: text.to_owned(),
        secret,
    };
    assert!(store.config_bucket(&shared).unwrap().is_empty());
    let set = Bucket::from([
        ("DATABASE_URL".to_owned(), value("postgres://db/app", true)),
        ("LOG_LEVEL".to_owned(), value("info", false)),
    ]);
    store
        .change_config(
            &shared,
            &set,
            &[],
            &[event(
                "esl",
                "config prod/shared: set DATABASE_URL, LOG_LEVEL",
            )],
            &rolls,
        )
        .unwrap();
    let read = store.config_bucket(&shared).unwrap();
    assert_eq!(read, set);
    assert!(read["DATABASE_URL"].secret);
    let tools: BucketName = "aws/cli".parse().unwrap();
    store
        .change_config(
            &tools,
            &Bucket::from([("AWS_REGION".to_owned(), value("us-east-1", false))]),
            &[],
            &[],
            &rolls,
        )
        .unwrap();
    // A scope's own bucket (`prod`), kept apart from its named ones.
    let scope = BucketName::of_scope("prod");
    store
        .change_config(
            &scope,
            &Bucket::from([("REGION".to_owned(), value("eu", false))]),
            &[],
            &[],
            &rolls,
        )
        .unwrap();
    assert_eq!(store.config_bucket(&scope).unwrap().len(), 1);
    assert_eq!(store.config_bucket(&shared).unwrap().len(), 2);
    let mut listed = store.config_buckets().unwrap();
    listed.sort();
    let mut expected = vec![tools.clone(), shared.clone(), scope.clone()];
    expected.sort();
    assert_eq!(listed, expected);
    store
        .change_config(&scope, &Bucket::new(), &["REGION".to_owned()], &[], &rolls)
        .unwrap();
    assert_eq!(
        store.config_buckets().unwrap(),
        [tools.clone(), shared.clone()]
    );
    store
        .change_config(
            &shared,
            &Bucket::from([("LOG_LEVEL".to_owned(), value("debug", false))]),
            &["DATABASE_URL".to_owned()],
            &[],
            &rolls,
        )
        .unwrap();
    let read = store.config_bucket(&shared).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read["LOG_LEVEL"].value, "debug");
    store
        .change_config(
            &tools,
            &Bucket::new(),
            &["AWS_REGION".to_owned()],
            &[],
            &rolls,
        )
        .unwrap();
    assert_eq!(store.config_buckets().unwrap(), [shared]);
    let messages: Vec<String> = store
        .events(&id("esl"), 10)
        .unwrap()
        .into_iter()
        .map(|event| event.message)
        .collect();
    assert_eq!(
        messages,
        ["config prod/shared: set DATABASE_URL, LOG_LEVEL"]
    );
}

/// voodu's `keep_releases`: the store keeps the newest N revisions of a
/// workload (5 when it is not set), and a delete and apply again go on
/// from the last number.
fn only_the_newest_keep_releases_revisions_are_kept(store: Arc<dyn StateStore>) {
    let numbers = |store: &Arc<dyn StateStore>| -> Vec<i64> {
        store
            .revisions(&id("kept"))
            .unwrap()
            .iter()
            .map(|revision| revision.revision)
            .collect()
    };
    for replicas in 1..=7 {
        store.apply(&[input("kept", replicas, &[])], &[]).unwrap();
    }
    assert_eq!(numbers(&store), [3, 4, 5, 6, 7], "voodu's default, 5");
    let mut two = input("kept", 8, &[]);
    two.core_spec.keep_releases = Some(2);
    store.apply(&[two], &[]).unwrap();
    assert_eq!(numbers(&store), [7, 8]);
    assert_eq!(store.revision_count(&id("kept")).unwrap(), 2);
    assert_eq!(store.workload(&id("kept")).unwrap().unwrap().revision, 8);
}

/// Twenty workloads in one apply (the cluster store reads them as one
/// range, not key by key): created together, unchanged together, and one
/// changed among them is the only update.
fn an_apply_of_many_workloads_is_one_step(store: Arc<dyn StateStore>) {
    let many = |changed: Option<usize>| -> Vec<WorkloadInput> {
        (0..20)
            .map(|index| {
                let replicas = if Some(index) == changed { 2 } else { 1 };
                input(&format!("svc-{index:02}"), replicas, &[("traffik", "http")])
            })
            .collect()
    };
    let created = store.apply(&many(None), &[]).unwrap();
    assert!(created
        .iter()
        .all(|change| *change == StoreChange::Created { revision: 1 }));
    let again = store.apply(&many(None), &[]).unwrap();
    assert!(again
        .iter()
        .all(|change| *change == StoreChange::Unchanged { revision: 1 }));
    let one_changed = store.apply(&many(Some(7)), &[]).unwrap();
    let updated: Vec<usize> = one_changed
        .iter()
        .enumerate()
        .filter(|(_, change)| matches!(change, StoreChange::Updated { revision: 2, previous_blocks } if previous_blocks.len() == 1))
        .map(|(index, _)| index)
        .collect();
    assert_eq!(updated, [7]);
    assert_eq!(store.workload_ids().unwrap().len(), 20);
}

fn revisions_rise_only_when_the_spec_changes(store: Arc<dyn StateStore>) {
    let esl = input("esl", 1, &[("traffik", "sip"), ("traffik", "http")]);
    assert_eq!(
        store.apply(std::slice::from_ref(&esl), &[]).unwrap(),
        [StoreChange::Created { revision: 1 }]
    );
    assert_eq!(
        store.apply(std::slice::from_ref(&esl), &[]).unwrap(),
        [StoreChange::Unchanged { revision: 1 }]
    );
    let scaled = input("esl", 3, &[("traffik", "http")]);
    let changes = store.apply(&[scaled], &[]).unwrap();
    let [StoreChange::Updated {
        revision: 2,
        previous_blocks,
    }] = changes.as_slice()
    else {
        panic!("an update to revision 2: {changes:?}");
    };
    assert_eq!(previous_blocks.len(), 2);
    let stored = store.workload(&esl.id).unwrap().unwrap();
    assert_eq!((stored.revision, stored.core_spec.replicas), (2, 3));
    assert_eq!(stored.blocks.len(), 1);
    assert_eq!(stored.source.as_deref(), Some("esl.hcl:1:1"));
    assert_eq!(store.revision_count(&esl.id).unwrap(), 2);
    let revisions = store.revisions(&esl.id).unwrap();
    assert_eq!(
        revisions.iter().map(|r| r.revision).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(revisions[1].spec_hash, stored.spec_hash);
    let (last_core, last_blocks) = store.last_revision(&esl.id).unwrap().unwrap();
    assert_eq!((last_core.replicas, last_blocks.len()), (3, 1));
    let messages: Vec<String> = store
        .events(&esl.id, 10)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(messages, ["created revision 1", "updated revision 2"]);
}

fn a_delete_leaves_a_deletion_then_a_tombstone_and_revisions_go_on(store: Arc<dyn StateStore>) {
    let esl = input("esl", 1, &[("traffik", "http")]);
    store.apply(std::slice::from_ref(&esl), &[]).unwrap();
    let deleted = store.delete(&esl.id).unwrap().expect("it was stored");
    assert_eq!(deleted.revision, 1);
    assert!(store.delete(&esl.id).unwrap().is_none(), "gone already");
    assert!(store.workload(&esl.id).unwrap().is_none());
    assert_eq!(store.deletions().unwrap(), std::slice::from_ref(&esl.id));
    let (core, blocks) = store.deletion(&esl.id).unwrap().unwrap();
    assert_eq!((core.replicas, blocks.len()), (1, 1));
    store
        .record_publication(&esl.id, "traffik", &["http".into()], 3, &[])
        .unwrap();
    store.finish_deletion(&esl.id).unwrap();
    assert!(store.deletions().unwrap().is_empty());
    assert!(store.deletion(&esl.id).unwrap().is_none());
    assert!(store.publications(&esl.id).unwrap().is_empty());
    let tombstone = store.tombstone(&esl.id).unwrap().unwrap();
    assert!(tombstone.finished);
    // Applied again: its revisions go on, and the tombstone goes.
    assert_eq!(
        store.apply(std::slice::from_ref(&esl), &[]).unwrap(),
        [StoreChange::Created { revision: 2 }]
    );
    assert!(store.tombstone(&esl.id).unwrap().is_none());
    assert!(store.revisions(&esl.id).unwrap()[1].recreated);
    let last = store.events(&esl.id, 1).unwrap().remove(0).message;
    assert_eq!(last, "created again, after a delete, as revision 2");
}

fn events_are_numbered_in_order_and_heard_after_commit(store: Arc<dyn StateStore>) {
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = heard.clone();
    store.set_event_sink(Box::new(move |workload, event| {
        sink.lock()
            .unwrap()
            .push((workload.name.clone(), event.id, event.message.clone()));
    }));
    let before = store.last_event_id().unwrap();
    store
        .record_events(&[event("a", "one"), event("b", "two"), event("a", "three")])
        .unwrap();
    let last = store.last_event_id().unwrap();
    assert_eq!(last, before + 3);
    let heard = heard.lock().unwrap().clone();
    assert_eq!(
        heard,
        [
            ("a".to_owned(), before + 1, "one".to_owned()),
            ("b".to_owned(), before + 2, "two".to_owned()),
            ("a".to_owned(), before + 3, "three".to_owned()),
        ]
    );
    let after: Vec<String> = store
        .events_after(None, before + 1, 10)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.message)
        .collect();
    assert_eq!(after, ["two", "three"]);
    let of_a: Vec<String> = store
        .events_after(Some(&id("a")), before, 10)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.message)
        .collect();
    assert_eq!(of_a, ["one", "three"]);
    let recent: Vec<String> = store
        .recent_events(None, 2)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e.message)
        .collect();
    assert_eq!(recent, ["two", "three"], "the newest, oldest first");
    let of_a_newest: Vec<String> = store
        .events(&id("a"), 1)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(of_a_newest, ["three"]);
}

fn a_forgotten_publication_keeps_its_generation(store: Arc<dyn StateStore>) {
    let esl = id("esl");
    let labels = vec!["http".to_owned()];
    let endpoint = Endpoint {
        replica_id: "a1".into(),
        address: "172.19.0.2:8084".into(),
        node: None,
    };
    store
        .record_publication(&esl, "traffik", &labels, 7, std::slice::from_ref(&endpoint))
        .unwrap();
    store
        .record_publication(&esl, "echo", &[], 2, std::slice::from_ref(&endpoint))
        .unwrap();
    store.forget_publication(&esl, "traffik", &labels).unwrap();
    let publications = store.publications(&esl).unwrap();
    let traffik = publications
        .iter()
        .find(|p| p.block_type == "traffik")
        .unwrap();
    assert!(traffik.forgotten_at.is_some() && traffik.endpoints.is_empty());
    assert_eq!(traffik.generation, 7);
    store
        .record_publication(&esl, "traffik", &labels, 8, &[endpoint])
        .unwrap();
    let again = store.publications(&esl).unwrap();
    assert!(again.iter().all(|p| p.forgotten_at.is_none()));
    store.clear_publications(&esl).unwrap();
    assert!(store.publications(&esl).unwrap().is_empty());
}

fn workloads_are_listed_by_kind_and_by_block_type(store: Arc<dyn StateStore>) {
    let mut pg = input("pg", 1, &[]);
    pg.id = WorkloadId::new(WorkloadKind::Statefulset, "prod", "pg");
    store
        .apply(
            &[
                input("web", 1, &[("traffik", "http")]),
                input("api", 1, &[("haproxy", "")]),
                pg.clone(),
            ],
            &[],
        )
        .unwrap();
    let names = |workloads: Vec<voodu_store::StoredWorkload>| -> Vec<String> {
        workloads.into_iter().map(|w| w.id.to_string()).collect()
    };
    assert_eq!(
        names(store.workloads(None).unwrap()),
        [
            "deployment/prod/api",
            "deployment/prod/web",
            "statefulset/prod/pg"
        ]
    );
    assert_eq!(
        names(store.workloads(Some(WorkloadKind::Statefulset)).unwrap()),
        ["statefulset/prod/pg"]
    );
    assert_eq!(store.workload_ids().unwrap().len(), 3);
    assert_eq!(
        store.workloads_with_block_type("traffik").unwrap(),
        [id("web")]
    );
}

fn apply_then_refused_stores_nothing(store: Arc<dyn StateStore>) {
    let esl = input("esl", 1, &[]);
    let mut asked = 0;
    let outcome = store
        .apply_then(
            std::slice::from_ref(&esl),
            &[event("esl", "x")],
            &mut || {
                asked += 1;
                false
            },
        )
        .unwrap();
    assert_eq!((outcome, asked), (None, 1));
    assert!(store.workload(&esl.id).unwrap().is_none());
    assert_eq!(store.last_event_id().unwrap(), 0);
    let stored = store
        .apply_then(std::slice::from_ref(&esl), &[], &mut || true)
        .unwrap();
    assert_eq!(stored, Some(vec![StoreChange::Created { revision: 1 }]));
}

/// Two writers apply changes to one workload at once, 10 each: every
/// change is one revision, numbered without a gap or a repeat, and the
/// current one is a spec one of them wrote whole.
fn two_writers_at_once_never_mix(store: Arc<dyn StateStore>) {
    let applied = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..2u32)
        .map(|writer| {
            let store = store.clone();
            let applied = applied.clone();
            std::thread::spawn(move || {
                for round in 0..10u32 {
                    // Distinct replica counts: every apply is a change.
                    let replicas = 1 + writer * 100 + round;
                    let label = format!("w{writer}");
                    let mut change = input("esl", replicas, &[("traffik", &label)]);
                    // Every revision kept, to count them.
                    change.core_spec.keep_releases = Some(100);
                    let change = store.apply(&[change], &[]).unwrap();
                    assert!(!matches!(change[0], StoreChange::Unchanged { .. }));
                    applied.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let revisions = store.revisions(&id("esl")).unwrap();
    assert_eq!(
        revisions.iter().map(|r| r.revision).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<i64>>()
    );
    let current = store.workload(&id("esl")).unwrap().unwrap();
    let writer = (current.core_spec.replicas - 1) / 100;
    assert_eq!(
        current.blocks[0].labels,
        [format!("w{writer}")],
        "the spec and the blocks come from one apply"
    );
}

/// Opens the one store under test with these secrets keys (the first
/// seals); `None`: no key.
type KeyedBackend<'a> = &'a dyn Fn(Option<Arc<SecretKeys>>) -> Arc<dyn StateStore>;

/// A secret set before any key is stored plain; the first start with a key
/// seals it, so what the backend keeps (`raw`) shows ciphertext and the
/// store reads the value; a store without that key names it; with a new
/// key put first, a rotation seals every secret under it, after which the
/// old key alone no longer opens them. Plain variables stay plain.
fn secrets_are_sealed_at_rest_and_a_rotation_moves_them_to_the_new_key(
    open: KeyedBackend<'_>,
    raw: &dyn Fn() -> String,
) {
    use voodu_model::config::{Bucket, BucketName, ConfigValue};
    use voodu_store::sealing::Reseal;
    let api: BucketName = "prod/api".parse().unwrap();
    let value = |text: &str, secret| ConfigValue {
        value: text.to_owned(),
        secret,
    };
    let first = Bucket::from([
        ("TOKEN".to_owned(), value("hunter2-stored-plain", true)),
        ("LOG_LEVEL".to_owned(), value("loud-and-plain", false)),
    ]);
    open(None)
        .change_config(&api, &first, &[], &[], &HoldChange::Release(Vec::new()))
        .unwrap();
    assert!(
        raw().contains("hunter2-stored-plain"),
        "stored plain without a key"
    );

    let old = Arc::new(SecretKeys::from_bytes(&[[1; 32]]));
    let sealing = open(Some(old.clone()));
    assert_eq!(sealing.reseal_secrets(Reseal::Plain).unwrap(), 1);
    let second = Bucket::from([("SECOND".to_owned(), value("hunter2-second", true))]);
    sealing
        .change_config(&api, &second, &[], &[], &HoldChange::Release(Vec::new()))
        .unwrap();
    let kept = raw();
    assert!(
        !kept.contains("hunter2-stored-plain") && !kept.contains("hunter2-second"),
        "sealed at rest: {kept}"
    );
    assert!(
        kept.contains("loud-and-plain"),
        "a plain variable stays plain"
    );
    let read = sealing.config_bucket(&api).unwrap();
    assert_eq!(read["TOKEN"], value("hunter2-stored-plain", true));
    assert_eq!(read["SECOND"], value("hunter2-second", true));
    assert_eq!(sealing.reseal_secrets(Reseal::Plain).unwrap(), 0);

    let without = open(None).config_bucket(&api).unwrap_err().to_string();
    assert!(
        without.contains(old.first().as_str()) && without.contains("--secrets-key"),
        "{without}"
    );

    let both = Arc::new(SecretKeys::from_bytes(&[[2; 32], [1; 32]]));
    let rotating = open(Some(both.clone()));
    assert_eq!(rotating.config_bucket(&api).unwrap().len(), 3);
    assert_eq!(
        rotating.reseal_secrets(Reseal::NotUnderFirstKey).unwrap(),
        2
    );
    let new_only = open(Some(Arc::new(SecretKeys::from_bytes(&[[2; 32]]))));
    assert_eq!(
        new_only.config_bucket(&api).unwrap(),
        rotating.config_bucket(&api).unwrap()
    );
    let old_only = open(Some(old)).config_bucket(&api).unwrap_err().to_string();
    assert!(old_only.contains(both.first().as_str()), "{old_only}");
}

#[test]
fn the_sqlite_store_seals_secrets_at_rest() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("state.db");
    secrets_are_sealed_at_rest_and_a_rotation_moves_them_to_the_new_key(
        &|keys| {
            let store = SqliteStore::open(&path).unwrap();
            store.set_secret_keys(keys);
            Arc::new(store) as Arc<dyn StateStore>
        },
        // Every byte SQLite keeps: the database and its write-ahead log.
        &|| {
            ["state.db", "state.db-wal"]
                .iter()
                .filter_map(|file| std::fs::read(directory.path().join(file)).ok())
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .collect()
        },
    );
}

#[test]
fn the_etcd_store_seals_secrets_at_rest() {
    let Some(cluster) = EtcdCluster::start(1) else {
        return;
    };
    let endpoints = cluster.endpoints();
    secrets_are_sealed_at_rest_and_a_rotation_moves_them_to_the_new_key(
        &|keys| {
            let mut options = EtcdOptions::new(endpoints.clone());
            options.prefix = "/sealed".to_owned();
            let mut store = EtcdStore::connect(&options).unwrap();
            store.set_secret_keys(keys);
            Arc::new(store) as Arc<dyn StateStore>
        },
        // What `etcdctl get` shows of the store's keys.
        &|| {
            let output = std::process::Command::new("etcdctl")
                .args([
                    "--endpoints",
                    &endpoints.join(","),
                    "get",
                    "--prefix",
                    "/sealed/",
                ])
                .output()
                .expect("etcdctl runs");
            assert!(output.status.success(), "{output:?}");
            String::from_utf8_lossy(&output.stdout).into_owned()
        },
    );
}

#[test]
fn the_sqlite_store_keeps_the_contract() {
    let directory = tempfile::tempdir().unwrap();
    let count = AtomicUsize::new(0);
    contract(&|| {
        let path = directory
            .path()
            .join(format!("state-{}.db", count.fetch_add(1, Ordering::SeqCst)));
        Arc::new(SqliteStore::open(&path).unwrap()) as Arc<dyn StateStore>
    });
}

#[test]
fn the_etcd_store_keeps_the_contract() {
    let Some(cluster) = EtcdCluster::start(1) else {
        return;
    };
    let count = AtomicUsize::new(0);
    contract(&|| {
        let mut options = EtcdOptions::new(cluster.endpoints());
        // A fresh store: its own prefix.
        options.prefix = format!("/contract-{}", count.fetch_add(1, Ordering::SeqCst));
        Arc::new(EtcdStore::connect(&options).unwrap()) as Arc<dyn StateStore>
    });
}

#[test]
fn with_one_of_three_members_down_the_etcd_store_goes_on() {
    let Some(mut cluster) = EtcdCluster::start(3) else {
        return;
    };
    let store = EtcdStore::connect(&EtcdOptions::new(cluster.endpoints())).unwrap();
    store.apply(&[input("esl", 1, &[])], &[]).unwrap();
    cluster.kill_member(0);
    assert_eq!(
        store.apply(&[input("esl", 2, &[])], &[]).unwrap(),
        [StoreChange::Updated {
            revision: 2,
            previous_blocks: vec![]
        }]
    );
    store
        .record_publication(&id("esl"), "traffik", &[], 1, &[])
        .unwrap();
    assert_eq!(store.workload(&id("esl")).unwrap().unwrap().revision, 2);
}

#[test]
fn without_quorum_an_apply_fails_within_5s_stores_nothing_and_goes_on_when_quorum_returns() {
    let Some(mut cluster) = EtcdCluster::start(3) else {
        return;
    };
    let store = EtcdStore::connect(&EtcdOptions::new(cluster.endpoints())).unwrap();
    store.apply(&[input("esl", 1, &[])], &[]).unwrap();
    cluster.kill_member(1);
    cluster.kill_member(2);
    let started = Instant::now();
    let refused = store
        .apply(&[input("esl", 5, &[]), input("web", 1, &[])], &[])
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed in {:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            refused,
            StoreError::NoQuorum {
                reachable: 1,
                members: 3
            }
        ),
        "{refused}"
    );
    assert!(
        refused.to_string().starts_with(
            "the cluster store has no quorum (1 of 3 members reachable) — nothing was stored"
        ),
        "{refused}"
    );
    // Quorum back: nothing of the refused apply is there, and writes go on.
    cluster.start_member(1);
    cluster.wait_healthy(Duration::from_secs(30));
    voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        store.workload(&id("esl")).map(|_| ())
    });
    assert_eq!(store.workload(&id("esl")).unwrap().unwrap().revision, 1);
    assert!(store.workload(&id("web")).unwrap().is_none());
    store.apply(&[input("esl", 5, &[])], &[]).unwrap();
    assert_eq!(store.workload(&id("esl")).unwrap().unwrap().revision, 2);
}

#[test]
fn an_apply_larger_than_etcds_transaction_limit_is_refused_whole_naming_the_flag() {
    // etcd's default: at most 128 operations in one transaction.
    let Some(cluster) = EtcdCluster::start(1) else {
        return;
    };
    let store = EtcdStore::connect(&EtcdOptions::new(cluster.endpoints())).unwrap();
    let many: Vec<WorkloadInput> = (0..50)
        .map(|index| input(&format!("svc-{index}"), 1, &[]))
        .collect();
    let refused = store.apply(&many, &[]).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("raise etcd's --max-txn-ops (and --max-request-bytes), or apply fewer workloads at once"),
        "{refused}"
    );
    assert!(
        store.workload_ids().unwrap().is_empty(),
        "nothing is stored"
    );
    assert_eq!(store.last_event_id().unwrap(), 0);
}
