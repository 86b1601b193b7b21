//! What the controller and its plugins are doing, in numbers: the metrics
//! `vd controller --metrics-listen ADDR` serves on `/metrics` in the
//! Prometheus text format (through `prometheus-client`; no exposition is
//! written by hand).
//!
//! Label values are bounded: plugin names and fixed enums only, never a
//! workload's name (those belong in events and `vd describe`).
//!
//! - Plugin calls reach [`Metrics`] through the plugin host's call observer
//!   (`voodu_plugin_host::observe`), so every call is counted wherever it
//!   is made.
//! - API requests are counted by [`crate::Controller::handle`].
//! - What the control loop does (passes, queue waits, publish latency,
//!   drains, restarts) reaches [`Metrics`] as the reconciler's
//!   [`ReconcileObserver`].
//! - Plugin states, dropped log lines, the work queue's depth and the
//!   replicas by state are read when Prometheus scrapes
//!   ([`Metrics::encode`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use voodu_plugin_host::observe::CallResult;
use voodu_plugin_host::PluginCall;
use voodu_reconcile::tally::{DrainResult, PassResult, ReconcileObserver};

/// `{plugin, call, result}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginCallLabels {
    /// The plugin's name.
    pub plugin: String,
    /// `validate`, `publish`, `drain`, `forget`, `describe`.
    pub call: &'static str,
    /// `ok`, `refused`, `error`, `timeout`, `panic`.
    pub result: &'static str,
}

/// `{plugin, call}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginCallKind {
    /// The plugin's name.
    pub plugin: String,
    /// The call.
    pub call: &'static str,
}

/// The calls a plugin's call metrics are kept for, in the order of
/// [`PluginCallSeries`]' slots (`init` is never observed: it is no call of
/// the plugin's blocks).
const OBSERVED_CALLS: [PluginCall; 5] = [
    PluginCall::Validate,
    PluginCall::Publish,
    PluginCall::Drain,
    PluginCall::Forget,
    PluginCall::Describe,
];

/// One plugin's call series, made once when it is first observed (every
/// call and result at 0, as Prometheus advises), so counting a call takes
/// no allocation and no lookup by label set.
#[derive(Debug)]
struct PluginCallSeries {
    /// By call slot, then by result (`CallResult` order).
    calls: Vec<Vec<Counter>>,
    /// By call slot.
    durations: Vec<Histogram>,
}

/// A plugin's health, as `voodu_plugin_state` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue, strum::EnumIter)]
#[allow(non_camel_case_types)]
pub enum PluginState {
    /// Answers calls.
    ready,
    /// Stuck in a call past its bound.
    wedged,
    /// Refuses every call after a panic.
    poisoned,
    /// Not loaded after it crashed the controller.
    quarantined,
}

/// `{plugin, state}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginStateLabels {
    /// The plugin's name.
    pub plugin: String,
    /// Its state.
    pub state: PluginState,
}

/// `{plugin}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginLabel {
    /// The plugin's name.
    pub plugin: String,
}

/// `{verb, result}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ApiLabels {
    /// The API verb, as the wire names it (`apply`, `plugins_install`).
    pub verb: String,
    /// `ok` or `failed`.
    pub result: String,
}

/// `{result}` of a pass.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PassLabels {
    /// How it ended (`converged`, `waiting`, `failed`, ...).
    pub result: &'static str,
}

/// `{plugin, outcome}` of a drain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DrainLabels {
    /// The plugin's name.
    pub plugin: String,
    /// `drained`, `budget_exhausted` or `failed`.
    pub outcome: &'static str,
}

/// A replica's state, as `voodu_replicas{state}` labels it: Docker's
/// container states, and `other` for any Docker adds.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    EncodeLabelValue,
    strum::EnumIter,
    strum::EnumString,
)]
#[allow(non_camel_case_types)]
pub enum ReplicaState {
    /// Made, never started.
    created,
    /// Running.
    running,
    /// Paused.
    paused,
    /// Being restarted by Docker.
    restarting,
    /// Being removed.
    removing,
    /// Stopped.
    exited,
    /// Dead (could not be removed).
    dead,
    /// A state this build does not know.
    other,
}

impl ReplicaState {
    /// Docker's state `state`, as labelled.
    pub fn of(state: &str) -> ReplicaState {
        state.parse().unwrap_or(ReplicaState::other)
    }
}

/// `{state}` of a replica.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReplicaStateLabel {
    /// Its state.
    pub state: ReplicaState,
}

/// How many replicas this controller has in each state, as counted for
/// one scrape.
pub type ReplicaCounts = std::collections::BTreeMap<ReplicaState, i64>;

/// The controller's metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    plugin_calls: Family<PluginCallLabels, Counter>,
    plugin_call_duration: Family<PluginCallKind, Histogram>,
    /// Each plugin's call series, by plugin name.
    plugin_series: parking_lot::RwLock<HashMap<String, Arc<PluginCallSeries>>>,
    plugin_state: Family<PluginStateLabels, Gauge>,
    log_lines_dropped: Family<PluginLabel, Counter>,
    /// The dropped-line count of each plugin at the last scrape, to count
    /// on from.
    dropped_seen: Mutex<HashMap<String, u64>>,
    api_requests: Family<ApiLabels, Counter>,
    workqueue_depth: Gauge,
    workqueue_wait: Histogram,
    passes: Family<PassLabels, Counter>,
    pass_duration: Histogram,
    publish_latency: Family<PluginLabel, Histogram>,
    drains: Family<DrainLabels, Counter>,
    drain_duration: Family<PluginLabel, Histogram>,
    replica_restarts: Counter,
    replicas: Family<ReplicaStateLabel, Gauge>,
}

/// Buckets from 1 ms to ~4.4 min, fourfold.
fn seconds_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 10))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric registered, none observed yet.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("voodu");
        let plugin_calls = Family::<PluginCallLabels, Counter>::default();
        registry.register(
            "plugin_calls",
            "Plugin calls, by plugin, call and result",
            plugin_calls.clone(),
        );
        let plugin_call_duration =
            Family::<PluginCallKind, Histogram>::new_with_constructor(|| {
                // 100 µs to ~26 s.
                Histogram::new(exponential_buckets(0.0001, 4.0, 10))
            });
        registry.register(
            "plugin_call_duration_seconds",
            "How long plugin calls take, by plugin and call",
            plugin_call_duration.clone(),
        );
        let plugin_state = Family::<PluginStateLabels, Gauge>::default();
        registry.register(
            "plugin_state",
            "Each plugin's state: 1 for the one it is in, 0 for the others",
            plugin_state.clone(),
        );
        let log_lines_dropped = Family::<PluginLabel, Counter>::default();
        registry.register(
            "plugin_log_lines_dropped",
            "Log lines a plugin wrote above its rate limit, dropped",
            log_lines_dropped.clone(),
        );
        let api_requests = Family::<ApiLabels, Counter>::default();
        registry.register(
            "api_requests",
            "API requests answered, by verb and result",
            api_requests.clone(),
        );
        let workqueue_depth = Gauge::default();
        registry.register(
            "workqueue_depth",
            "Workloads waiting for a reconcile pass",
            workqueue_depth.clone(),
        );
        let workqueue_wait = seconds_buckets();
        registry.register(
            "workqueue_wait_seconds",
            "How long a workload waited in the queue before its pass started",
            workqueue_wait.clone(),
        );
        let passes = Family::<PassLabels, Counter>::default();
        registry.register(
            "reconcile_passes",
            "Reconcile passes, by how they ended",
            passes.clone(),
        );
        let pass_duration = seconds_buckets();
        registry.register(
            "reconcile_pass_duration_seconds",
            "How long reconcile passes take",
            pass_duration.clone(),
        );
        let publish_latency =
            Family::<PluginLabel, Histogram>::new_with_constructor(seconds_buckets);
        registry.register(
            "publish_latency_seconds",
            "From a Docker event, readiness flip or pass seeing a change to the plugin's publish of it returning, by plugin",
            publish_latency.clone(),
        );
        let drains = Family::<DrainLabels, Counter>::default();
        registry.register(
            "drains",
            "Drains of a replica by one plugin, by how they ended",
            drains.clone(),
        );
        let drain_duration =
            Family::<PluginLabel, Histogram>::new_with_constructor(seconds_buckets);
        registry.register(
            "drain_duration_seconds",
            "How long a plugin's drain of a replica took, by plugin",
            drain_duration.clone(),
        );
        let replica_restarts = Counter::default();
        registry.register(
            "replica_restarts",
            "Replicas the controller started again after they stopped",
            replica_restarts.clone(),
        );
        let replicas = Family::<ReplicaStateLabel, Gauge>::default();
        registry.register(
            "replicas",
            "This controller's replicas, by Docker state",
            replicas.clone(),
        );
        registry.register_collector(Box::new(PluginMetricsCollector));
        Metrics {
            registry,
            plugin_calls,
            plugin_call_duration,
            plugin_series: parking_lot::RwLock::new(HashMap::new()),
            plugin_state,
            log_lines_dropped,
            dropped_seen: Mutex::new(HashMap::new()),
            api_requests,
            workqueue_depth,
            workqueue_wait,
            passes,
            pass_duration,
            publish_latency,
            drains,
            drain_duration,
            replica_restarts,
            replicas,
        }
    }

    /// Counts one plugin call.
    pub fn plugin_call(&self, plugin: &str, call: PluginCall, result: CallResult, took: Duration) {
        let Some(slot) = OBSERVED_CALLS.iter().position(|observed| *observed == call) else {
            return;
        };
        // `result as usize`: the slot of `CallResult::iter()`'s order,
        // which is the declaration order.
        let count = |series: &PluginCallSeries| {
            series.calls[slot][result as usize].inc();
            series.durations[slot].observe(took.as_secs_f64());
        };
        if let Some(series) = self.plugin_series.read().get(plugin) {
            count(series);
            return;
        }
        count(&self.plugin_series(plugin));
    }

    /// `plugin`'s call series, made the first time it is asked for.
    fn plugin_series(&self, plugin: &str) -> Arc<PluginCallSeries> {
        if let Some(series) = self.plugin_series.read().get(plugin) {
            return series.clone();
        }
        use strum::IntoEnumIterator;
        let series = Arc::new(PluginCallSeries {
            calls: OBSERVED_CALLS
                .iter()
                .map(|call| {
                    CallResult::iter()
                        .map(|result| {
                            self.plugin_calls
                                .get_or_create(&PluginCallLabels {
                                    plugin: plugin.to_owned(),
                                    call: call.as_str(),
                                    result: result.as_str(),
                                })
                                .clone()
                        })
                        .collect()
                })
                .collect(),
            durations: OBSERVED_CALLS
                .iter()
                .map(|call| {
                    self.plugin_call_duration
                        .get_or_create(&PluginCallKind {
                            plugin: plugin.to_owned(),
                            call: call.as_str(),
                        })
                        .clone()
                })
                .collect(),
        });
        self.plugin_series
            .write()
            .entry(plugin.to_owned())
            .or_insert(series)
            .clone()
    }

    /// Counts one API request.
    pub fn api_request(&self, verb: voodu_api::Verb, ok: bool) {
        let verb: &'static str = verb.into();
        self.api_requests
            .get_or_create(&ApiLabels {
                verb: verb.to_owned(),
                result: if ok { "ok" } else { "failed" }.to_owned(),
            })
            .inc();
    }

    /// Sends every plugin call to these metrics (the plugin host's observer
    /// is process-wide: the first controller of the process registers it).
    pub fn observe_plugin_calls(self: &Arc<Self>) {
        let metrics = self.clone();
        voodu_plugin_host::observe::observe_calls(Box::new(move |plugin, call, result, took| {
            metrics.plugin_call(plugin, call, result, took)
        }));
    }

    /// The text exposition, with what is read at scrape time brought up to
    /// date from `controller`, and the replicas counted by state
    /// (`None`: not counted, without Docker or when the engine did not
    /// answer; the gauges keep their last values).
    pub fn encode(
        &self,
        controller: &crate::Controller,
        replicas: Option<ReplicaCounts>,
    ) -> String {
        self.refresh(controller);
        if let Some(counts) = replicas {
            use strum::IntoEnumIterator;
            for state in ReplicaState::iter() {
                self.replicas
                    .get_or_create(&ReplicaStateLabel { state })
                    .set(counts.get(&state).copied().unwrap_or(0));
            }
        }
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(%error, "the metrics could not be encoded");
        }
        text
    }

    /// Plugin states, dropped log lines and the work queue's depth, now.
    fn refresh(&self, controller: &crate::Controller) {
        use strum::IntoEnumIterator;
        let mut now: Vec<(String, PluginState)> = controller
            .plugins()
            .list()
            .iter()
            .map(|plugin| {
                let state = match plugin.health() {
                    voodu_plugin_host::handle::Health::Wedged { .. } => PluginState::wedged,
                    _ if plugin
                        .last_failure()
                        .is_some_and(|failure| failure.panicked) =>
                    {
                        PluginState::poisoned
                    }
                    _ => PluginState::ready,
                };
                let dropped = plugin.log_lines_dropped();
                let mut seen = self.dropped_seen.lock();
                let before = seen.insert(plugin.name().to_owned(), dropped).unwrap_or(0);
                self.log_lines_dropped
                    .get_or_create(&PluginLabel {
                        plugin: plugin.name().to_owned(),
                    })
                    .inc_by(dropped.saturating_sub(before));
                (plugin.name().to_owned(), state)
            })
            .collect();
        for (plugin, why) in controller.unloaded_plugins() {
            if why.starts_with("quarantined") {
                now.push((plugin, PluginState::quarantined));
            }
        }
        for (plugin, current) in now {
            for state in PluginState::iter() {
                self.plugin_state
                    .get_or_create(&PluginStateLabels {
                        plugin: plugin.clone(),
                        state,
                    })
                    .set(i64::from(state == current));
            }
        }
        if let Some(reconciler) = controller.reconciler() {
            self.workqueue_depth
                .set(i64::try_from(reconciler.queue_depth()).unwrap_or(i64::MAX));
        }
    }
}

/// Serves `/metrics` on `listener` until the runtime ends; any other path
/// is 404. It serves only metrics, never the API.
pub async fn serve(
    controller: Arc<crate::Controller>,
    metrics: Arc<Metrics>,
    listener: tokio::net::TcpListener,
) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    use hyper::{Request, Response, StatusCode};
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (controller, metrics) = (controller.clone(), metrics.clone());
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let (controller, metrics) = (controller.clone(), metrics.clone());
                    async move {
                        let response = if request.uri().path() == "/metrics" {
                            let replicas = count_replicas(&controller).await;
                            let text = tokio::task::spawn_blocking(move || {
                                metrics.encode(&controller, replicas)
                            })
                            .await
                            .unwrap_or_default();
                            Response::builder()
                                .header(
                                    "content-type",
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                )
                                .body(Full::new(Bytes::from(text)))
                        } else {
                            Response::builder()
                                .status(StatusCode::NOT_FOUND)
                                .body(Full::new(Bytes::from_static(
                                    b"only /metrics is served here\n",
                                )))
                        };
                        response
                    }
                });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// The plugins' own metrics (the `metric` host service, ABI 1.2), read at
/// each scrape: `voodu_plugin_<plugin>_<name>`, a `-` in the plugin's name
/// written `_`.
#[derive(Debug)]
struct PluginMetricsCollector;

impl prometheus_client::collector::Collector for PluginMetricsCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use voodu_plugin_host::plugin_metrics::{snapshot, MetricKind};
        for metric in snapshot() {
            let name = format!("plugin_{}_{}", metric.plugin.replace('-', "_"), metric.name);
            let help = format!("Reported by plugin {}", metric.plugin);
            match metric.kind {
                MetricKind::Counter => {
                    let counter = ConstCounter::new(metric.value);
                    let described =
                        encoder.encode_descriptor(&name, &help, None, counter.metric_type())?;
                    counter.encode(described)?;
                }
                MetricKind::Gauge => {
                    let gauge = ConstGauge::new(metric.value);
                    let described =
                        encoder.encode_descriptor(&name, &help, None, gauge.metric_type())?;
                    gauge.encode(described)?;
                }
            }
        }
        Ok(())
    }
}

/// This controller's replicas by state, as the engine lists them now.
async fn count_replicas(controller: &crate::Controller) -> Option<ReplicaCounts> {
    let reconciler = controller.reconciler()?;
    let listed = reconciler.replicas(None).await.ok()?;
    let mut counts = ReplicaCounts::new();
    for replica in &listed {
        *counts.entry(ReplicaState::of(&replica.state)).or_default() += 1;
    }
    Some(counts)
}

impl ReconcileObserver for Metrics {
    fn pass_finished(&self, result: PassResult, took: Duration) {
        self.passes
            .get_or_create(&PassLabels {
                result: result.into(),
            })
            .inc();
        self.pass_duration.observe(took.as_secs_f64());
    }

    fn waited_in_queue(&self, waited: Duration) {
        self.workqueue_wait.observe(waited.as_secs_f64());
    }

    fn published(&self, plugin: &str, latency: Duration) {
        self.publish_latency
            .get_or_create(&PluginLabel {
                plugin: plugin.to_owned(),
            })
            .observe(latency.as_secs_f64());
    }

    fn drained(&self, plugin: &str, result: DrainResult, took: Duration) {
        self.drains
            .get_or_create(&DrainLabels {
                plugin: plugin.to_owned(),
                outcome: result.into(),
            })
            .inc();
        self.drain_duration
            .get_or_create(&PluginLabel {
                plugin: plugin.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    fn replica_restarted(&self) {
        self.replica_restarts.inc();
    }
}
