//! The control loop against a fake runtime and fake plugins: coalescing,
//! per-workload serialisation, parallelism, supersede, back-off.

use super::*;
use serde_json::json;
use voodu_model::EventReason;

fn core(value: serde_json::Value) -> CoreSpec {
    serde_json::from_value(value).unwrap()
}

#[test]
fn scaling_and_drain_budget_do_not_change_the_container_hash() {
    let base = json!({"image": "esl:1", "replicas": 1, "ports": ["8084"], "drain_timeout": "30s"});
    let mut scaled = base.clone();
    scaled["replicas"] = json!(5);
    scaled["drain_timeout"] = json!("1m");
    scaled["max_surge"] = json!(3);
    let mut new_image = base.clone();
    new_image["image"] = json!("esl:2");
    let mut new_env = base.clone();
    new_env["env"] = json!({"A": "1"});
    assert_eq!(
        core(base.clone()).container_hash(),
        core(scaled).container_hash()
    );
    assert_ne!(
        core(base.clone()).container_hash(),
        core(new_image).container_hash()
    );
    assert_ne!(core(base).container_hash(), core(new_env).container_hash());
}

mod fake {
    //! A fake container runtime and fake plugins, for fast, deterministic
    //! tests of the control loop.

    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use futures_util::stream::BoxStream;
    use futures_util::StreamExt;
    use parking_lot::{Condvar, Mutex};
    use serde_json::Value;
    use voodu_plugin_abi::messages::{DrainReply, DrainRequest, ForgetRequest, PublishRequest};

    use crate::{BlockCallError, BlockPlugins};
    use voodu_model::WorkloadId;
    use voodu_runtime::{ContainerRuntime, Replica, ReplicaSpec, RuntimeError, RuntimeEvent};

    /// Containers in memory; creates take `create_delay` and are counted.
    #[derive(Default)]
    pub struct Runtime {
        pub containers: Mutex<Vec<Replica>>,
        pub create_delay: Duration,
        /// How long a start takes (Docker's takes a few hundred ms).
        pub start_delay: Duration,
        pub in_flight: AtomicUsize,
        pub max_in_flight: AtomicUsize,
        pub creates: AtomicUsize,
        pub starts: AtomicUsize,
        next: AtomicUsize,
        /// The jobs' runs: each exits with the code the command's first
        /// word names (`["exit", "3"]` → 3; else 0).
        pub runs: Mutex<Vec<voodu_runtime::JobRun>>,
    }

    impl Runtime {
        pub fn with_create_delay(create_delay: Duration) -> Arc<Runtime> {
            Arc::new(Runtime {
                create_delay,
                ..Default::default()
            })
        }

        pub fn with_start_delay(start_delay: Duration) -> Arc<Runtime> {
            Arc::new(Runtime {
                start_delay,
                ..Default::default()
            })
        }

        /// Marks a container exited, as a crash would, and returns the
        /// event Docker would send.
        pub fn kill(&self, replica_id: &str, exit_code: i64) -> RuntimeEvent {
            let mut containers = self.containers.lock();
            let replica = containers
                .iter_mut()
                .find(|r| r.replica_id == replica_id)
                .expect("the replica exists");
            replica.state = "exited".into();
            RuntimeEvent {
                workload: replica.workload.clone(),
                replica_id: replica_id.into(),
                container_id: replica.container_id.clone(),
                action: "die".into(),
                exit_code: Some(exit_code),
                time_nanos: 0,
            }
        }

        pub fn running(&self, workload: &WorkloadId) -> Vec<String> {
            self.containers
                .lock()
                .iter()
                .filter(|r| &r.workload == workload && r.is_running())
                .map(|r| r.replica_id.clone())
                .collect()
        }
    }

    #[async_trait::async_trait]
    impl ContainerRuntime for Runtime {
        async fn ensure_network(&self) -> Result<(), RuntimeError> {
            Ok(())
        }

        async fn remove_network_if_unused(&self) -> Result<bool, RuntimeError> {
            Ok(false)
        }

        async fn list(&self, workload: Option<&WorkloadId>) -> Result<Vec<Replica>, RuntimeError> {
            Ok(self
                .containers
                .lock()
                .iter()
                .filter(|r| workload.is_none_or(|w| &r.workload == w))
                .cloned()
                .collect())
        }

        async fn create(&self, spec: &ReplicaSpec) -> Result<Replica, RuntimeError> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.create_delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.creates.fetch_add(1, Ordering::SeqCst);
            let n = self.next.fetch_add(1, Ordering::SeqCst);
            let replica = Replica {
                container_id: format!("c{n}"),
                container_name: format!("{}.{}", spec.workload.name, spec.replica_id),
                workload: spec.workload.clone(),
                replica_id: spec.replica_id.clone(),
                spec_hash: spec.spec_hash.clone(),
                state: "running".into(),
                ip: Some(format!("10.0.{}.{}", n / 250, n % 250 + 2)),
                host_ports: Default::default(),
                host_ip: None,
                created: i64::try_from(n).unwrap_or(0),
                owner: Some(spec.owner.clone()),
                store_id: Some(spec.store_id.clone()),
                probes: Some(spec.probes.clone()),
                health: None,
                ready: None,
                last_probe_failure: None,
                restarts: 0,
            };
            self.containers.lock().push(replica.clone());
            Ok(replica)
        }

        async fn start(&self, replica: &Replica) -> Result<Replica, RuntimeError> {
            tokio::time::sleep(self.start_delay).await;
            self.starts.fetch_add(1, Ordering::SeqCst);
            let mut containers = self.containers.lock();
            let found = containers
                .iter_mut()
                .find(|r| r.container_id == replica.container_id)
                .ok_or_else(|| RuntimeError::NotRunning {
                    container: replica.container_name.clone(),
                    state: "gone".into(),
                })?;
            found.state = "running".into();
            Ok(found.clone())
        }

        async fn remove(&self, replica: &Replica, _stop: i32) -> Result<(), RuntimeError> {
            self.containers
                .lock()
                .retain(|r| r.container_id != replica.container_id);
            Ok(())
        }

        async fn stop(&self, replica: &Replica, _stop: i32) -> Result<(), RuntimeError> {
            if let Some(found) = self
                .containers
                .lock()
                .iter_mut()
                .find(|r| r.container_id == replica.container_id)
            {
                found.state = "exited".into();
            }
            Ok(())
        }

        async fn exec(
            &self,
            _replica: &Replica,
            _command: &voodu_runtime::ExecCommand,
            _output: Option<&tokio::sync::mpsc::UnboundedSender<voodu_runtime::ExecOutput>>,
            _session: Option<voodu_runtime::ExecSession>,
        ) -> Result<i64, RuntimeError> {
            Ok(0)
        }

        async fn run_init(
            &self,
            _replica: &ReplicaSpec,
            _step: &voodu_model::container::InitStep,
        ) -> Result<voodu_runtime::InitOutcome, RuntimeError> {
            Ok(voodu_runtime::InitOutcome::Succeeded)
        }

        /// It has no image and builds none.
        async fn has_image(&self, _tag: &str) -> Result<bool, RuntimeError> {
            Ok(false)
        }

        async fn build_image(
            &self,
            _tag: &str,
            _archive: Vec<u8>,
            _build: &voodu_model::build::Build,
            _progress: &(dyn Fn(String) + Send + Sync),
        ) -> Result<(), RuntimeError> {
            Ok(())
        }

        /// Its init steps always succeed and leave nothing behind.
        async fn step_containers(
            &self,
            _workload: Option<&WorkloadId>,
        ) -> Result<Vec<voodu_runtime::StepContainer>, RuntimeError> {
            Ok(Vec::new())
        }

        async fn remove_step_container(
            &self,
            _step: &voodu_runtime::StepContainer,
        ) -> Result<(), RuntimeError> {
            Ok(())
        }

        async fn run_job(
            &self,
            spec: &ReplicaSpec,
            run: &voodu_runtime::JobRunRequest,
            _output: Option<&tokio::sync::mpsc::UnboundedSender<voodu_runtime::ExecOutput>>,
        ) -> Result<voodu_runtime::JobRunEnd, RuntimeError> {
            let exit_code = match spec.command.as_slice() {
                [first, code, ..] if first == "exit" => code.parse().unwrap_or(0),
                _ => 0,
            };
            let n = self.next.fetch_add(1, Ordering::SeqCst);
            let container_name = format!(
                "{}-{}.run-{}",
                spec.workload.scope, spec.workload.name, run.run_id
            );
            self.runs.lock().push(voodu_runtime::JobRun {
                container_id: format!("run{n}"),
                container_name: container_name.clone(),
                workload: spec.workload.clone(),
                run_id: run.run_id.clone(),
                trigger: Some(run.trigger),
                state: "exited".into(),
                created: n as i64,
                exit_code: Some(exit_code),
                store_id: Some(spec.store_id.clone()),
            });
            Ok(voodu_runtime::JobRunEnd {
                container_name,
                exit_code: Some(exit_code),
            })
        }

        async fn job_runs(
            &self,
            workload: Option<&WorkloadId>,
        ) -> Result<Vec<voodu_runtime::JobRun>, RuntimeError> {
            Ok(self
                .runs
                .lock()
                .iter()
                .filter(|run| workload.is_none_or(|w| &run.workload == w))
                .cloned()
                .collect())
        }

        async fn remove_job_run(&self, run: &voodu_runtime::JobRun) -> Result<(), RuntimeError> {
            self.runs
                .lock()
                .retain(|kept| kept.container_id != run.container_id);
            Ok(())
        }

        fn logs(
            &self,
            _replica: &Replica,
            _request: &voodu_runtime::LogRequest,
        ) -> BoxStream<'static, Result<String, RuntimeError>> {
            futures_util::stream::empty().boxed()
        }

        fn events(&self) -> BoxStream<'static, Result<RuntimeEvent, RuntimeError>> {
            futures_util::stream::pending().boxed()
        }

        async fn usage(
            &self,
            _replica: &Replica,
        ) -> Result<voodu_runtime::ReplicaUsage, RuntimeError> {
            Ok(voodu_runtime::ReplicaUsage::default())
        }
    }

    /// Records every call; the plugin named `slow` blocks in publish until
    /// released.
    #[derive(Default)]
    pub struct Plugins {
        pub calls: Mutex<Vec<(String, String, Value)>>,
        held: Mutex<bool>,
        released: Condvar,
        pub drain_replies: Mutex<HashMap<String, DrainReply>>,
    }

    impl Plugins {
        pub fn hold_slow(&self) {
            *self.held.lock() = true;
        }

        pub fn release_slow(&self) {
            *self.held.lock() = false;
            self.released.notify_all();
        }

        pub fn publishes(&self, plugin: &str) -> Vec<Value> {
            self.requests(plugin, "publish")
        }

        pub fn drains(&self, plugin: &str) -> Vec<Value> {
            self.requests(plugin, "drain")
        }

        fn requests(&self, plugin: &str, kind: &str) -> Vec<Value> {
            self.calls
                .lock()
                .iter()
                .filter(|(p, call, _)| p == plugin && call == kind)
                .map(|(_, _, request)| request.clone())
                .collect()
        }
    }

    impl BlockPlugins for Plugins {
        fn publish(&self, plugin: &str, request: &PublishRequest) -> Result<(), BlockCallError> {
            self.calls.lock().push((
                plugin.into(),
                "publish".into(),
                serde_json::to_value(request).unwrap(),
            ));
            if plugin == "slow" {
                let mut held = self.held.lock();
                while *held {
                    self.released.wait(&mut held);
                }
            }
            Ok(())
        }

        fn drain(
            &self,
            plugin: &str,
            request: &DrainRequest,
        ) -> Result<DrainReply, BlockCallError> {
            self.calls.lock().push((
                plugin.into(),
                "drain".into(),
                serde_json::to_value(request).unwrap(),
            ));
            Ok(self
                .drain_replies
                .lock()
                .get(plugin)
                .cloned()
                .unwrap_or(DrainReply::Drained))
        }

        fn forget(&self, plugin: &str, request: &ForgetRequest) -> Result<(), BlockCallError> {
            self.calls.lock().push((
                plugin.into(),
                "forget".into(),
                serde_json::to_value(request).unwrap(),
            ));
            Ok(())
        }
    }
}

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::status::Phase;
use voodu_plugin_abi::messages::WorkloadKind;
use voodu_store::{SqliteStore, WorkloadInput};

fn block(plugin: &str) -> NormalisedBlock {
    NormalisedBlock {
        claims: Vec::new(),
        block_type: plugin.into(),
        labels: vec![],
        spec: json!({}),
        endpoints: voodu_model::EndpointEnvelope {
            port: Some(8084),
            addressing: voodu_plugin_abi::messages::Addressing::Ip,
        },
    }
}

fn store_workload(
    store: &Arc<dyn StateStore>,
    id: &WorkloadId,
    core: serde_json::Value,
    blocks: &[&str],
) {
    let mut core_spec = json!({"image": "esl:1", "replicas": 1, "drain_timeout": "5s"});
    for (key, value) in core.as_object().unwrap() {
        core_spec[key] = value.clone();
    }
    let core_spec = serde_json::from_value(core_spec).expect("a core spec");
    store
        .apply(
            &[WorkloadInput {
                block_locations: Vec::new(),
                id: id.clone(),
                core_spec,
                blocks: blocks.iter().map(|plugin| block(plugin)).collect(),
                source: None,
            }],
            &[],
        )
        .unwrap();
}

struct Rig {
    runtime: Arc<fake::Runtime>,
    plugins: Arc<fake::Plugins>,
    store: Arc<dyn StateStore>,
    reconciler: Arc<Reconciler>,
}

/// A started reconciler over these parts, with `workers` workers.
fn reconciler_on(
    runtime: &Arc<fake::Runtime>,
    plugins: &Arc<fake::Plugins>,
    store: &Arc<dyn StateStore>,
    workers: usize,
) -> Arc<Reconciler> {
    let reconciler = Reconciler::new(
        runtime.clone(),
        plugins.clone(),
        store.clone(),
        ActivityBus::default(),
        ReconcilerConfig {
            owner: "test".into(),
            workers,
            publish_wait: Duration::from_secs(2),
        },
    );
    reconciler.start(Duration::from_secs(3600));
    reconciler
}

fn rig(runtime: Arc<fake::Runtime>, workers: usize) -> Rig {
    let plugins = Arc::new(fake::Plugins::default());
    let store: Arc<dyn StateStore> = Arc::new(SqliteStore::open_in_memory().unwrap());
    let reconciler = reconciler_on(&runtime, &plugins, &store, workers);
    Rig {
        runtime,
        plugins,
        store,
        reconciler,
    }
}

fn workload(name: &str) -> WorkloadId {
    WorkloadId::new(WorkloadKind::Deployment, "t", name)
}

/// Waits until a pass that began after `ticket` settled; returns its phase.
async fn settled(reconciler: &Reconciler, id: &WorkloadId, ticket: u64) -> Phase {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(settled) = reconciler.settled(id) {
            if settled.ticket >= ticket {
                return settled.phase;
            }
        }
        assert!(Instant::now() < deadline, "{id} never settled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_triggers_of_one_workload_make_one_set_of_replicas() {
    let rig = rig(
        fake::Runtime::with_create_delay(Duration::from_millis(100)),
        8,
    );
    let esl = workload("esl");
    store_workload(&rig.store, &esl, json!({"replicas": 2}), &["fast"]);
    let mut ticket = 0;
    for _ in 0..10 {
        ticket = rig.reconciler.enqueue(&esl);
    }
    assert_eq!(
        settled(&rig.reconciler, &esl, ticket).await,
        Phase::Converged
    );
    // Never two passes of one workload at once: exactly the replicas asked
    // for were created, not one per trigger.
    assert_eq!(rig.runtime.creates.load(Ordering::SeqCst), 2);
    assert_eq!(rig.runtime.running(&esl).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_workloads_reconcile_in_parallel_up_to_the_pool_size() {
    for (workers, expected_max) in [(8, 8), (1, 1)] {
        let rig = rig(
            fake::Runtime::with_create_delay(Duration::from_millis(150)),
            workers,
        );
        let ids: Vec<WorkloadId> = (0..8).map(|n| workload(&format!("w{n}"))).collect();
        for id in &ids {
            store_workload(&rig.store, id, json!({"replicas": 1}), &[]);
        }
        let tickets: Vec<u64> = ids.iter().map(|id| rig.reconciler.enqueue(id)).collect();
        for (id, ticket) in ids.iter().zip(tickets) {
            assert_eq!(settled(&rig.reconciler, id, ticket).await, Phase::Converged);
        }
        assert_eq!(
            rig.runtime.max_in_flight.load(Ordering::SeqCst),
            expected_max,
            "with {workers} worker(s)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_replicas_of_one_workload_are_created_at_most_eight_at_a_time() {
    let rig = rig(
        fake::Runtime::with_create_delay(Duration::from_millis(100)),
        8,
    );
    let big = workload("big");
    store_workload(&rig.store, &big, json!({"replicas": 20}), &["fast"]);
    let ticket = rig.reconciler.enqueue(&big);
    assert_eq!(
        settled(&rig.reconciler, &big, ticket).await,
        Phase::Converged
    );
    assert_eq!(rig.runtime.running(&big).len(), 20);
    assert_eq!(rig.runtime.max_in_flight.load(Ordering::SeqCst), 8);
    // The last publish lists all 20.
    let last = rig.plugins.publishes("fast").pop().unwrap();
    assert_eq!(last["endpoints"].as_array().unwrap().len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_plugin_delays_only_its_own_blocks_and_then_gets_the_newest_set() {
    let rig = rig(fake::Runtime::with_create_delay(Duration::ZERO), 8);
    rig.plugins.hold_slow();
    let esl = workload("esl");
    store_workload(&rig.store, &esl, json!({"replicas": 1}), &["slow", "fast"]);
    let ticket = rig.reconciler.enqueue(&esl);
    // The pass waits at most the publish bound for the slow plugin...
    assert_eq!(
        settled(&rig.reconciler, &esl, ticket).await,
        Phase::Converged
    );
    // ...while the fast plugin already has the set.
    assert_eq!(rig.plugins.publishes("fast").len(), 1);
    assert_eq!(rig.plugins.publishes("slow").len(), 1);
    // Three more sets while the slow plugin is stuck in its first call:
    // the fast one hears each, the slow one only the newest once free.
    for replicas in [2, 3, 4] {
        store_workload(
            &rig.store,
            &esl,
            json!({"replicas": replicas}),
            &["slow", "fast"],
        );
        let ticket = rig.reconciler.enqueue(&esl);
        settled(&rig.reconciler, &esl, ticket).await;
    }
    assert_eq!(rig.plugins.publishes("fast").len(), 4);
    assert_eq!(rig.plugins.publishes("slow").len(), 1);
    rig.plugins.release_slow();
    let deadline = Instant::now() + Duration::from_secs(5);
    while rig.plugins.publishes("slow").len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the slow plugin never got the newest set"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let slow = rig.plugins.publishes("slow");
    assert_eq!(slow.len(), 2, "superseded sets are never sent");
    assert_eq!(slow[1]["endpoints"].as_array().unwrap().len(), 4);
    assert_eq!(slow[1]["generation"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_block_hears_nothing_after_its_forget_and_its_set_is_not_shown() {
    let rig = rig(fake::Runtime::with_create_delay(Duration::ZERO), 8);
    rig.plugins.hold_slow();
    let esl = workload("esl");
    store_workload(&rig.store, &esl, json!({"replicas": 1}), &["slow", "fast"]);
    let ticket = rig.reconciler.enqueue(&esl);
    settled(&rig.reconciler, &esl, ticket).await;
    // The slow plugin is stuck in its first publish; a second set waits in
    // its lane.
    store_workload(&rig.store, &esl, json!({"replicas": 2}), &["slow", "fast"]);
    let ticket = rig.reconciler.enqueue(&esl);
    settled(&rig.reconciler, &esl, ticket).await;
    assert_eq!(rig.plugins.publishes("slow").len(), 1);
    // A new revision drops the slow block, as an apply does: out of the
    // publisher first, then forgotten.
    store_workload(&rig.store, &esl, json!({"replicas": 2}), &["fast"]);
    rig.reconciler.drop_blocks(&esl, &[block("slow")]);
    let warnings = crate::forget::forget_blocks(&esl, &[block("slow")], &*rig.plugins, &*rig.store);
    assert!(warnings.is_empty(), "{warnings:?}");
    rig.plugins.release_slow();
    let ticket = rig.reconciler.enqueue(&esl);
    settled(&rig.reconciler, &esl, ticket).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let slow_calls: Vec<String> = rig
        .plugins
        .calls
        .lock()
        .iter()
        .filter(|(plugin, _, _)| plugin == "slow")
        .map(|(_, call, _)| call.clone())
        .collect();
    assert_eq!(
        slow_calls,
        ["publish", "forget"],
        "the queued set is never sent, before or after the forget"
    );
    // The set that was in flight at the drop is not recorded either: the
    // store shows no live set for the dropped block.
    let shown: Vec<_> = rig
        .store
        .publications(&esl)
        .unwrap()
        .into_iter()
        .filter(|publication| publication.forgotten_at.is_none())
        .map(|publication| publication.block_type)
        .collect();
    assert_eq!(shown, ["fast"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replica_is_restarted_at_once_then_with_back_off() {
    // A start takes a moment, as Docker's does: were it instant, the set
    // with the replica back would supersede the withdrawal before it is
    // sent, which is right, but leaves nothing to observe here.
    let rig = rig(
        fake::Runtime::with_start_delay(Duration::from_millis(100)),
        8,
    );
    let esl = workload("esl");
    store_workload(&rig.store, &esl, json!({"replicas": 1}), &["fast"]);
    let ticket = rig.reconciler.enqueue(&esl);
    settled(&rig.reconciler, &esl, ticket).await;
    let id = rig.runtime.running(&esl)[0].clone();
    // First death: withdrawn from the set and restarted at once.
    let died = Instant::now();
    rig.reconciler.on_event(&rig.runtime.kill(&id, 3)).await;
    while !rig
        .plugins
        .publishes("fast")
        .iter()
        .any(|p| p["endpoints"].as_array().unwrap().is_empty())
    {
        assert!(died.elapsed() < Duration::from_secs(2), "never withdrawn");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    while rig.runtime.running(&esl).is_empty() {
        assert!(died.elapsed() < Duration::from_secs(2), "not restarted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first_restart = died.elapsed();
    // Second death in a row: the restart waits about a second.
    let died = Instant::now();
    rig.reconciler.on_event(&rig.runtime.kill(&id, 3)).await;
    while rig.runtime.running(&esl).is_empty() {
        assert!(died.elapsed() < Duration::from_secs(5), "not restarted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waited = died.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    // The first was restarted at once: sooner than the back-off of the
    // second (a relation, not a wall-clock bound a loaded machine breaks).
    assert!(
        first_restart < waited,
        "first restart after {first_restart:?}, the second after {waited:?}"
    );
    // Third: crash-looping, with the exit code, until the 2 s back-off ends.
    rig.reconciler.on_event(&rig.runtime.kill(&id, 3)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, _) = rig.reconciler.status(&esl).unwrap();
    assert_eq!(status.phase, Phase::CrashLooping);
    assert_eq!(status.crashes[0].last_exit_code, Some(3));
    assert!(status.crashes[0].crash_looping);
    assert_eq!(rig.runtime.starts.load(Ordering::SeqCst), 2);
    let events = rig.store.events(&esl, 50).unwrap();
    let died: Vec<&str> = events
        .iter()
        .filter(|e| e.reason == EventReason::Died)
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(died.len(), 3);
    assert!(died[0].ends_with("died (exit code 3)"), "{died:?}");
    assert!(events.iter().any(|e| e.reason == EventReason::Restarted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_apply_during_a_drain_is_picked_up_at_the_next_step() {
    let rig = rig(fake::Runtime::with_create_delay(Duration::ZERO), 8);
    let esl = workload("esl");
    store_workload(&rig.store, &esl, json!({"replicas": 3}), &["fast"]);
    let ticket = rig.reconciler.enqueue(&esl);
    settled(&rig.reconciler, &esl, ticket).await;
    // Scale to 2 with a drain that takes a while...
    rig.plugins.drain_replies.lock().insert(
        "fast".into(),
        voodu_plugin_abi::messages::DrainReply::Draining { retry_after_ms: 50 },
    );
    store_workload(
        &rig.store,
        &esl,
        json!({"replicas": 2, "drain_timeout": "600ms"}),
        &["fast"],
    );
    let first = rig.reconciler.enqueue(&esl);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // ...and, mid-drain, to 1: the same pass goes on to 1 once the drain
    // ends, and no second pass runs beside it.
    store_workload(
        &rig.store,
        &esl,
        json!({"replicas": 1, "drain_timeout": "600ms"}),
        &["fast"],
    );
    let second = rig.reconciler.enqueue(&esl);
    assert_eq!(
        settled(&rig.reconciler, &esl, first).await,
        Phase::Converged
    );
    assert_eq!(
        settled(&rig.reconciler, &esl, second).await,
        Phase::Converged
    );
    assert_eq!(rig.runtime.running(&esl).len(), 1);
    let drains: Vec<String> = rig
        .plugins
        .calls
        .lock()
        .iter()
        .filter(|(_, call, _)| call == "drain")
        .map(|(_, _, request)| {
            request["replica"]["replica_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let distinct: std::collections::BTreeSet<&String> = drains.iter().collect();
    assert_eq!(
        distinct.len(),
        2,
        "each removed replica drained: {drains:?}"
    );
}

/// The `replica` events of a workload, oldest first.
fn replica_lines(store: &Arc<dyn StateStore>, id: &WorkloadId) -> Vec<String> {
    let mut events = store.events(id, 100).unwrap();
    events.sort_by_key(|event| event.id);
    events
        .into_iter()
        .filter(|event| event.reason == EventReason::Replica)
        .map(|event| match event.message.split_once(" at ") {
            Some((step, _address)) => step.to_owned(),
            None => event.message,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_names_its_removals_delete_not_rolling_update() {
    let rig = rig(Arc::new(fake::Runtime::default()), 2);
    let esl = workload("gone");
    store_workload(&rig.store, &esl, json!({"replicas": 2}), &["fast"]);
    let ticket = rig.reconciler.enqueue(&esl);
    assert_eq!(
        settled(&rig.reconciler, &esl, ticket).await,
        Phase::Converged
    );
    rig.store.delete(&esl).unwrap();
    let ticket = rig.reconciler.enqueue(&esl);
    settled(&rig.reconciler, &esl, ticket).await;
    let removals: Vec<String> = replica_lines(&rig.store, &esl)
        .into_iter()
        .filter(|line| line.starts_with("removed"))
        .collect();
    assert_eq!(removals.len(), 2, "{removals:?}");
    assert!(
        removals.iter().all(|line| line.ends_with("(delete)")),
        "{removals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_scaled_and_rolled_names_each_step_rightly() {
    let rig = rig(Arc::new(fake::Runtime::default()), 2);
    let db = WorkloadId::new(WorkloadKind::Statefulset, "t", "db");
    store_workload(&rig.store, &db, json!({"replicas": 1}), &["fast"]);
    let ticket = rig.reconciler.enqueue(&db);
    assert_eq!(
        settled(&rig.reconciler, &db, ticket).await,
        Phase::Converged
    );
    store_workload(
        &rig.store,
        &db,
        json!({"replicas": 3, "image": "esl:2"}),
        &["fast"],
    );
    let ticket = rig.reconciler.enqueue(&db);
    assert_eq!(
        settled(&rig.reconciler, &db, ticket).await,
        Phase::Converged
    );
    assert_eq!(
        replica_lines(&rig.store, &db),
        [
            "started replica 0 (scale up)",
            "started replica 1 (scale up)",
            "started replica 2 (scale up)",
            "removed replica 0 (rolling update)",
            "started replica 0 (rolling update)",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_spec_whose_ports_limits_or_probes_do_not_read_runs_nothing_and_removes_nothing() {
    for (name, broken, named) in [
        ("ports", r#"$.ports"#, r#"["not-a-port"]"#),
        ("resources", r#"$.resources"#, r#"{"memory_bytes": "lots"}"#),
        ("probes", r#"$.probes"#, r#"{"readiness": 5}"#),
    ] {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("state.db");
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::open(&path).unwrap());
        let runtime = fake::Runtime::with_create_delay(Duration::ZERO);
        let plugins = Arc::new(fake::Plugins::default());
        let reconciler = reconciler_on(&runtime, &plugins, &store, 8);
        let id = workload(name);
        store_workload(&store, &id, json!({"replicas": 1}), &["fast"]);
        let ticket = reconciler.enqueue(&id);
        assert_eq!(settled(&reconciler, &id, ticket).await, Phase::Converged);
        // The stored spec turns unreadable (an edited or corrupted store;
        // voodu itself stores only specs of its type): the pass fails,
        // naming the column and what does not read, and the running replica
        // stays, rather than being replaced by one without its ports,
        // limits or probes.
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE workloads SET core_spec = json_set(core_spec, ?1, json(?2), '$.replicas', 3)",
                [broken, named],
            )
            .unwrap();
        let ticket = reconciler.enqueue(&id);
        assert_eq!(
            settled(&reconciler, &id, ticket).await,
            Phase::Failed,
            "{name}"
        );
        let error = reconciler
            .settled(&id)
            .and_then(|s| s.error)
            .unwrap_or_default();
        assert!(error.contains("malformed core spec"), "{name}: {error}");
        assert_eq!(
            runtime.creates.load(Ordering::SeqCst),
            1,
            "{name}: nothing new is run"
        );
        assert_eq!(runtime.running(&id).len(), 1, "{name}: nothing is removed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_last_generation_is_never_restarted_from_zero() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("state.db");
    let store: Arc<dyn StateStore> = Arc::new(SqliteStore::open(&path).unwrap());
    let esl = workload("esl");
    store_workload(&store, &esl, json!({"replicas": 1}), &["fast"]);
    let runtime = fake::Runtime::with_create_delay(Duration::ZERO);
    let first_plugins = Arc::new(fake::Plugins::default());
    let first = reconciler_on(&runtime, &first_plugins, &store, 2);
    let ticket = first.enqueue(&esl);
    assert_eq!(settled(&first, &esl, ticket).await, Phase::Converged);
    assert!(!first_plugins.publishes("fast").is_empty());
    drop(first);
    // A new controller on the same store, whose publications table is
    // gone: it may not publish generation 1 again to a plugin that has
    // seen later ones. It publishes nothing and says why.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE publications")
        .unwrap();
    let plugins = Arc::new(fake::Plugins::default());
    let second = reconciler_on(&runtime, &plugins, &store, 2);
    let ticket = second.enqueue(&esl);
    settled(&second, &esl, ticket).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let warning = loop {
        let events = store.events(&esl, 50).unwrap();
        if let Some(event) = events
            .iter()
            .find(|event| event.reason == EventReason::PublishFailed)
        {
            break event.message.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no publish-failed event: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        warning.contains("not published: the last generation could not be read"),
        "{warning}"
    );
    assert!(
        plugins.publishes("fast").is_empty(),
        "no set is published with a restarted generation: {:?}",
        plugins.publishes("fast")
    );
}

/// The reasons of a workload's stored events, oldest first.
fn event_reasons(store: &Arc<dyn StateStore>, id: &WorkloadId) -> Vec<EventReason> {
    store
        .events(id, 100)
        .unwrap()
        .into_iter()
        .map(|event| event.reason)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_of_a_store_that_was_lost_are_reported_and_never_removed() {
    // Three replicas made for the first store; the store is then lost, and
    // a fresh one (another identity, no record of the workload) takes over.
    let runtime = Arc::new(fake::Runtime::default());
    let first = rig(runtime.clone(), 2);
    let web = workload("web");
    store_workload(&first.store, &web, json!({"replicas": 3}), &["fast"]);
    let ticket = first.reconciler.enqueue(&web);
    assert_eq!(
        settled(&first.reconciler, &web, ticket).await,
        Phase::Converged
    );
    first.reconciler.stop();
    let lost_id = first.store.id().to_owned();
    let second = rig(runtime.clone(), 2);
    assert_ne!(second.store.id(), lost_id);
    second.reconciler.resync().await;
    let ticket = second.reconciler.enqueue(&web);
    settled(&second.reconciler, &web, ticket).await;
    assert_eq!(runtime.running(&web).len(), 3, "nothing was removed");
    assert!(
        second.plugins.drains("fast").is_empty(),
        "nothing was drained"
    );
    let orphaned = second.store.events(&web, 10).unwrap();
    let orphaned: Vec<&str> = orphaned
        .iter()
        .filter(|event| event.reason == EventReason::Orphaned)
        .map(|event| event.message.as_str())
        .collect();
    assert_eq!(orphaned.len(), 1, "reported once: {orphaned:?}");
    assert!(
        orphaned[0].starts_with("3 replicas of deployment/t/web (")
            && orphaned[0].contains(&format!("were made by another store ({lost_id})"))
            && orphaned[0].contains("vd prune --orphans"),
        "{}",
        orphaned[0]
    );
    // Listed as orphans; applying the manifest again adopts them without
    // a restart, as the spec matches.
    let orphans = second.reconciler.orphans().await.unwrap();
    assert_eq!(orphans[&web].len(), 3);
    let creates = runtime.creates.load(Ordering::SeqCst);
    store_workload(&second.store, &web, json!({"replicas": 3}), &["fast"]);
    let ticket = second.reconciler.enqueue(&web);
    assert_eq!(
        settled(&second.reconciler, &web, ticket).await,
        Phase::Converged
    );
    assert_eq!(
        runtime.creates.load(Ordering::SeqCst),
        creates,
        "no restart"
    );
    assert_eq!(runtime.running(&web).len(), 3);
    assert!(event_reasons(&second.store, &web).contains(&EventReason::Adopted));
    assert!(second.reconciler.orphans().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_removes_only_the_containers_made_before_the_deletion() {
    let rig = rig(Arc::new(fake::Runtime::default()), 2);
    let web = workload("swept");
    store_workload(&rig.store, &web, json!({"replicas": 2}), &["fast"]);
    let ticket = rig.reconciler.enqueue(&web);
    assert_eq!(
        settled(&rig.reconciler, &web, ticket).await,
        Phase::Converged
    );
    rig.store.delete(&web).unwrap();
    // A container of the same workload made after the deletion (by the
    // clock), as a restored store would find one.
    let later = {
        let mut containers = rig.runtime.containers.lock();
        let mut later = containers[0].clone();
        later.container_id = "c-later".into();
        later.replica_id = "beef".into();
        later.created = i64::MAX / 2000;
        containers.push(later.clone());
        later
    };
    let ticket = rig.reconciler.enqueue(&web);
    assert_eq!(settled(&rig.reconciler, &web, ticket).await, Phase::Gone);
    assert_eq!(rig.runtime.running(&web), vec!["beef".to_owned()]);
    assert_eq!(
        rig.plugins.drains("fast").len(),
        2,
        "the deleted ones drained"
    );
    let orphans = rig.reconciler.orphans().await.unwrap();
    assert_eq!(orphans[&web], vec![later]);
    // Pruned when the operator asks.
    let pruned = rig.reconciler.prune_orphans().await.unwrap();
    assert_eq!(pruned[&web].len(), 1);
    assert!(rig.runtime.running(&web).is_empty());
    assert!(event_reasons(&rig.store, &web).contains(&EventReason::Pruned));
}

fn tcp_probe(port: u16) -> voodu_model::probes::Probe {
    voodu_model::probes::Probe {
        check: voodu_model::probes::Check::TcpSocket { port },
        period: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        failure_threshold: 3,
        success_threshold: 1,
        initial_delay: Duration::ZERO,
    }
}

#[test]
fn a_replica_is_probed_with_the_probes_it_was_created_with() {
    use voodu_model::probes::{Check, Probes};
    let probe = tcp_probe;
    let board = probes::ProbeBoard::default();
    let web = workload("web");
    // The workload's newest revision probes port 9997.
    board.configure(
        &web,
        Probes {
            readiness: Some(probe(9997)),
            ..Probes::default()
        },
    );
    let mut old = voodu_runtime::Replica {
        container_id: "c1".into(),
        container_name: "t-web.a".into(),
        workload: web.clone(),
        replica_id: "a".into(),
        spec_hash: "old".into(),
        state: "running".into(),
        ip: None,
        host_ports: Default::default(),
        host_ip: None,
        created: 1,
        owner: None,
        store_id: None,
        probes: Some(Probes {
            readiness: Some(probe(8084)),
            ..Probes::default()
        }),
        health: None,
        ready: None,
        last_probe_failure: None,
        restarts: 0,
    };
    let own = board.probes_for(&old).unwrap();
    assert_eq!(
        own.readiness.unwrap().check,
        Check::TcpSocket { port: 8084 }
    );
    // Made without probes: none, whatever a later revision says.
    old.probes = Some(Probes::default());
    assert!(board.probes_for(&old).is_none());
    // Made before voodu labelled probes: the workload's, as before.
    old.probes = None;
    let legacy = board.probes_for(&old).unwrap();
    assert_eq!(
        legacy.readiness.unwrap().check,
        Check::TcpSocket { port: 9997 }
    );
}

#[test]
fn new_probes_change_the_container_hash_and_no_probes_keep_it() {
    let base = json!({"image": "esl:1", "replicas": 1, "ports": ["8084"], "drain_timeout": "30s"});
    let with_probe = |port| {
        let mut spec = base.clone();
        spec["probes"] = json!(voodu_model::probes::Probes {
            readiness: Some(tcp_probe(port)),
            ..Default::default()
        });
        spec
    };
    let probed = with_probe(8084);
    let other_port = with_probe(9997);
    let hash = |value: &serde_json::Value| core(value.clone()).container_hash();
    assert_ne!(hash(&base), hash(&probed));
    assert_ne!(hash(&probed), hash(&other_port));
    assert_eq!(
        hash(&base),
        hash(&json!({"image": "esl:1", "ports": ["8084"], "replicas": 4, "drain_timeout": "30s"}))
    );
}

#[test]
fn a_failure_repeated_is_counted_for_the_back_off_but_recorded_once() {
    let streaks = passes::PassHistory::default();
    let web = workload("web");
    assert_eq!(streaks.failed(&web, "image not found"), (1, true));
    assert_eq!(streaks.failed(&web, "image not found"), (2, false));
    assert_eq!(
        streaks.failed(&web, "probe failed"),
        (3, true),
        "a new failure"
    );
    streaks.succeeded(&web);
    assert_eq!(
        streaks.failed(&web, "probe failed"),
        (1, true),
        "a new streak"
    );
}

fn listed(id: &str, hash: &str, serving: bool) -> voodu_runtime::Replica {
    voodu_runtime::Replica {
        workload: workload("web"),
        spec_hash: hash.into(),
        state: if serving { "running" } else { "exited" }.into(),
        created: 1,
        ..crate::test_replica(id)
    }
}

#[test]
fn a_failed_rollout_says_what_still_serves_truthfully() {
    let old = |id| listed(id, "old", true);
    assert_eq!(
        converge::still_serving(&[old("a"), old("b"), listed("n", "new", false)], "new"),
        "the 2 replicas it was to replace keep serving"
    );
    assert_eq!(
        converge::still_serving(&[listed("n", "new", false)], "new"),
        "no replica of it is serving"
    );
    assert_eq!(
        converge::still_serving(
            &[listed("n", "new", true), listed("m", "new", false)],
            "new"
        ),
        "1 ready replica keeps serving"
    );
}

#[test]
fn a_rolling_update_counts_its_replacements_against_the_replica_count() {
    let desired = plan::Desired {
        kind: WorkloadKind::Deployment,
        replicas: 4,
        spec_hash: "new".into(),
        max_surge: 1,
        ordinals: None,
        held: Default::default(),
    };
    let observed = [
        listed("a", "new", true),
        listed("b", "old", true),
        listed("c", "old", true),
        listed("d", "old", true),
    ];
    let roll = |n: usize| -> Vec<(String, plan::Reason)> {
        (0..n)
            .map(|i| (format!("x{i}"), plan::Reason::Roll))
            .collect()
    };
    assert_eq!(
        converge::creates_step(&desired, &observed, &roll(1)),
        "replacing replica 2/4 (rolling update)"
    );
    assert_eq!(
        converge::creates_step(&desired, &observed, &roll(2)),
        "replacing replicas 2-3/4 (rolling update)"
    );
    assert_eq!(
        converge::creates_step(&desired, &[], &[("x".into(), plan::Reason::ScaleUp)]),
        "starting 1 replica (scale up)"
    );
    let pg = plan::Desired {
        kind: WorkloadKind::Statefulset,
        replicas: 3,
        ..desired.clone()
    };
    assert_eq!(
        converge::creates_step(&pg, &[], &[("1".into(), plan::Reason::ScaleUp)]),
        "starting replica 2/3 (scale up)"
    );
}

#[test]
fn the_back_off_doubles_from_its_first_wait_up_to_its_bound() {
    let waits: Vec<u64> = (0..8)
        .map(|n| doubling_wait(Duration::from_secs(1), Duration::from_secs(30), n).as_secs())
        .collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    assert_eq!(
        doubling_wait(Duration::from_secs(1), Duration::from_secs(60), u32::MAX),
        Duration::from_secs(60)
    );
}
