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
//! - Plugin states, dropped log lines and the work queue's depth are read
//!   when Prometheus scrapes ([`Metrics::encode`]).

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

/// `{plugin, call, result}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginCallLabels {
    /// The plugin's name.
    pub plugin: String,
    /// `validate`, `publish`, `drain`, `forget`, `describe`.
    pub call: String,
    /// `ok`, `refused`, `error`, `timeout`, `panic`.
    pub result: String,
}

/// `{plugin, call}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginCallKind {
    /// The plugin's name.
    pub plugin: String,
    /// The call.
    pub call: String,
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

/// The controller's metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    plugin_calls: Family<PluginCallLabels, Counter>,
    plugin_call_duration: Family<PluginCallKind, Histogram>,
    plugin_state: Family<PluginStateLabels, Gauge>,
    log_lines_dropped: Family<PluginLabel, Counter>,
    /// The dropped-line count of each plugin at the last scrape, to count
    /// on from.
    dropped_seen: Mutex<HashMap<String, u64>>,
    api_requests: Family<ApiLabels, Counter>,
    workqueue_depth: Gauge,
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
        Metrics {
            registry,
            plugin_calls,
            plugin_call_duration,
            plugin_state,
            log_lines_dropped,
            dropped_seen: Mutex::new(HashMap::new()),
            api_requests,
            workqueue_depth,
        }
    }

    /// Counts one plugin call.
    pub fn plugin_call(&self, plugin: &str, call: PluginCall, result: CallResult, took: Duration) {
        self.plugin_calls
            .get_or_create(&PluginCallLabels {
                plugin: plugin.to_owned(),
                call: call.as_str().to_owned(),
                result: result.as_str().to_owned(),
            })
            .inc();
        self.plugin_call_duration
            .get_or_create(&PluginCallKind {
                plugin: plugin.to_owned(),
                call: call.as_str().to_owned(),
            })
            .observe(took.as_secs_f64());
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
    /// date from `controller`.
    pub fn encode(&self, controller: &crate::Controller) -> String {
        self.refresh(controller);
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
                        .is_some_and(|(_, error)| error.contains("is poisoned")) =>
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
                            let text =
                                tokio::task::spawn_blocking(move || metrics.encode(&controller))
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
