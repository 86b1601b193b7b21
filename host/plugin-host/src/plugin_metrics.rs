//! Each plugin's own metrics, as it reports them through the `metric` host
//! service (ABI 1.2): counters and gauges without labels, by plugin and
//! name, kept for the life of the process so a plugin reloaded or replaced
//! goes on counting where its predecessor stopped. The embedding program
//! reads them at each scrape ([`snapshot`]); the plugin host depends on no
//! metrics crate.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use voodu_plugin_abi::ffi::{VOODU_MAX_PLUGIN_METRICS, VOODU_METRIC_COUNTER, VOODU_METRIC_GAUGE};

/// The longest metric name a plugin may report.
pub const MAX_METRIC_NAME_LEN: usize = 64;

/// What kind of metric a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up: each report adds to it.
    Counter,
    /// Each report replaces it.
    Gauge,
}

impl MetricKind {
    /// The kind the ABI's `kind` number names.
    pub fn from_ffi(kind: u32) -> Option<MetricKind> {
        match kind {
            VOODU_METRIC_COUNTER => Some(MetricKind::Counter),
            VOODU_METRIC_GAUGE => Some(MetricKind::Gauge),
            _ => None,
        }
    }
}

/// One plugin metric, as read for a scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginMetric {
    /// The plugin that reports it.
    pub plugin: String,
    /// Its name as the plugin gave it, less a counter's `_total`.
    pub name: String,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// Its value now.
    pub value: f64,
}

/// Why a report was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricRefusal {
    /// The name breaks the rule.
    #[error("metric name {0:?} is not 1 to {MAX_METRIC_NAME_LEN} of a-z, 0-9 and _, starting with a letter")]
    BadName(String),
    /// The kind is neither counter nor gauge.
    #[error("metric kind {0} is neither VOODU_METRIC_COUNTER (1) nor VOODU_METRIC_GAUGE (2)")]
    BadKind(u32),
    /// The value is not finite, or a counter's is negative.
    #[error("metric {name:?}: {value} is not a value a {kind} takes")]
    BadValue {
        /// The metric.
        name: String,
        /// The value.
        value: f64,
        /// `counter` or `gauge`.
        kind: &'static str,
    },
    /// The name was first reported as the other kind.
    #[error("metric {0:?} was first reported as the other kind (a counter stays a counter, a gauge a gauge)")]
    KindChanged(String),
    /// The plugin already reports as many metrics as it may.
    #[error(
        "the plugin already reports {VOODU_MAX_PLUGIN_METRICS} metrics; {0:?} is one too many"
    )]
    TooMany(String),
}

/// Every plugin's metrics: `(plugin, name)` to kind and value.
static METRICS: Mutex<BTreeMap<(String, String), (MetricKind, f64)>> = Mutex::new(BTreeMap::new());

/// Whether `name` follows the rule.
fn good_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_METRIC_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Records one report of `plugin`: `value` added to counter `name`, or set
/// as gauge `name`.
pub fn record(plugin: &str, name: &str, kind: MetricKind, value: f64) -> Result<(), MetricRefusal> {
    if !good_name(name) {
        return Err(MetricRefusal::BadName(name.to_owned()));
    }
    let name = match kind {
        MetricKind::Counter => name.strip_suffix("_total").unwrap_or(name),
        MetricKind::Gauge => name,
    };
    let (valid, kind_word) = match kind {
        MetricKind::Counter => (value.is_finite() && value >= 0.0, "counter"),
        MetricKind::Gauge => (value.is_finite(), "gauge"),
    };
    if !valid || name.is_empty() {
        return Err(MetricRefusal::BadValue {
            name: name.to_owned(),
            value,
            kind: kind_word,
        });
    }
    let mut metrics = METRICS.lock();
    let key = (plugin.to_owned(), name.to_owned());
    if let Some((known, current)) = metrics.get_mut(&key) {
        if *known != kind {
            return Err(MetricRefusal::KindChanged(name.to_owned()));
        }
        match kind {
            MetricKind::Counter => *current += value,
            MetricKind::Gauge => *current = value,
        }
        return Ok(());
    }
    let reported = metrics.keys().filter(|(owner, _)| owner == plugin).count();
    if reported >= VOODU_MAX_PLUGIN_METRICS as usize {
        return Err(MetricRefusal::TooMany(name.to_owned()));
    }
    metrics.insert(key, (kind, value));
    Ok(())
}

/// Every plugin metric now, by plugin then name.
pub fn snapshot() -> Vec<PluginMetric> {
    METRICS
        .lock()
        .iter()
        .map(|((plugin, name), (kind, value))| PluginMetric {
            plugin: plugin.clone(),
            name: name.clone(),
            kind: *kind,
            value: *value,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(plugin: &str) -> Vec<PluginMetric> {
        snapshot()
            .into_iter()
            .filter(|metric| metric.plugin == plugin)
            .collect()
    }

    #[test]
    fn counters_add_up_and_gauges_take_the_last_value() {
        record("m-add", "bytes_total", MetricKind::Counter, 10.0).unwrap();
        record("m-add", "bytes", MetricKind::Counter, 5.0).unwrap();
        record("m-add", "open", MetricKind::Gauge, 3.0).unwrap();
        record("m-add", "open", MetricKind::Gauge, 1.0).unwrap();
        let metrics = of("m-add");
        assert_eq!(metrics.len(), 2, "{metrics:?}");
        assert_eq!(
            (metrics[0].name.as_str(), metrics[0].value),
            ("bytes", 15.0)
        );
        assert_eq!((metrics[1].name.as_str(), metrics[1].value), ("open", 1.0));
    }

    #[test]
    fn bad_names_values_kinds_and_one_metric_too_many_are_refused() {
        for bad in ["", "Upper", "9lives", "has-dash", "sp ace", &"x".repeat(65)] {
            assert_eq!(
                record("m-bad", bad, MetricKind::Gauge, 1.0),
                Err(MetricRefusal::BadName(bad.to_owned()))
            );
        }
        assert!(matches!(
            record("m-bad", "down", MetricKind::Counter, -1.0),
            Err(MetricRefusal::BadValue { .. })
        ));
        assert!(matches!(
            record("m-bad", "nan", MetricKind::Gauge, f64::NAN),
            Err(MetricRefusal::BadValue { .. })
        ));
        record("m-bad", "flip", MetricKind::Gauge, 1.0).unwrap();
        assert_eq!(
            record("m-bad", "flip", MetricKind::Counter, 1.0),
            Err(MetricRefusal::KindChanged("flip".into()))
        );
        assert_eq!(MetricKind::from_ffi(7), None);
        for n in 1..VOODU_MAX_PLUGIN_METRICS {
            record("m-bad", &format!("m{n}"), MetricKind::Gauge, 0.0).unwrap();
        }
        assert_eq!(
            record("m-bad", "one_more", MetricKind::Gauge, 0.0),
            Err(MetricRefusal::TooMany("one_more".into()))
        );
        // A metric already known is still reported.
        record("m-bad", "m1", MetricKind::Gauge, 2.0).unwrap();
        assert_eq!(of("m-bad").len(), VOODU_MAX_PLUGIN_METRICS as usize);
    }
}
