//! The controller's metrics, scraped by a real Prometheus (Debian's
//! `prometheus`, started here on a loopback port with a 1 s scrape
//! interval): plugin calls by result, API requests, plugin states; every
//! metric `docs/operators.md` lists is exposed, and no label carries a
//! workload's name. On the real engine, a rollout with drains, a `docker
//! kill` and a refused apply are all counted. On CI (`CI=true`) a missing
//! Prometheus or engine fails the tests.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::{docker, DockerRig};
use vd::Controller;
use voodu_tests::free_port;

/// One HTTP GET on loopback: the body of a 200, or why not.
fn get(address: SocketAddr, path: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))
        .map_err(|error| error.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|error| error.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")
        .map_err(|error| error.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|error| error.to_string())?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") {
        Ok(body.to_owned())
    } else {
        Err(head.lines().next().unwrap_or_default().to_owned())
    }
}

/// A real Prometheus scraping `target` every second, stopped on drop.
struct Prometheus {
    child: Child,
    web: SocketAddr,
    _data: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: voodu\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let web = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                data.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        Prometheus {
            child,
            web,
            _data: data,
        }
    }

    /// The value of the instant query `query`, once it has one of at least
    /// `at_least` (waiting for scrapes).
    fn wait_for(&self, query: &str, at_least: f64) -> f64 {
        let path = format!("/api/v1/query?query={}", encode(query));
        voodu_tests::poll_until(Duration::from_secs(40), Duration::from_millis(500), || {
            let body = get(self.web, &path).map_err(|error| format!("{query}: {error}"))?;
            let answer: serde_json::Value =
                serde_json::from_str(&body).map_err(|error| format!("{query}: {error}: {body}"))?;
            let value = answer["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|value| value.parse::<f64>().ok())
                .ok_or_else(|| format!("{query}: no value yet: {body}"))?;
            if value >= at_least {
                Ok(value)
            } else {
                Err(format!("{query}: {value} < {at_least}"))
            }
        })
        .unwrap_or_else(|error| panic!("Prometheus never saw it: {error}"))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` percent-encoded for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Asserts that every metric the operators' guide lists is in `exposed`.
fn assert_every_documented_metric_is_exposed(exposed: &str) {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operators.md"),
    )
    .unwrap();
    let section = guide
        .split("### Metrics")
        .nth(1)
        .expect("docs/operators.md has a Metrics section");
    let documented: Vec<&str> = section
        .lines()
        .take_while(|line| !line.starts_with("## "))
        .filter_map(|line| line.strip_prefix("| `voodu_"))
        .filter_map(|rest| rest.split('`').next())
        .collect();
    assert!(documented.len() >= 14, "{documented:?}");
    for name in &documented {
        let name = format!("voodu_{}", name.split('{').next().unwrap_or(name));
        assert!(
            exposed.lines().any(|line| line.starts_with(&name)),
            "{name} is documented but not exposed:\n{exposed}"
        );
    }
}

#[test]
fn a_real_prometheus_scrapes_plugin_calls_api_requests_and_plugin_states() {
    // On CI a missing Prometheus fails here (tests/run --setup installs it).
    if !engine::tool_available("prometheus") {
        return;
    }
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let controller =
        Controller::start_with_args(false, &["--metrics-listen", &metrics.to_string()]);
    let prometheus = Prometheus::start(metrics);
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    controller
        .vd(&["plugins:install", &traffik.display().to_string()])
        .success();
    // A C plugin reporting its own metric through the host's `metric`.
    controller
        .vd(&["plugins:install", voodu_echo_c::PLUGIN_PATH])
        .success();
    let good = controller.manifest(
        "good.hcl",
        "deployment \"prod\" \"esl-workload\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  traffik \"http\" { port = 8084 }\n  echo_c {}\n}\n",
    );
    controller.vd(&["apply", "-f", &good]).success();
    let refused = controller.manifest(
        "refused.hcl",
        "deployment \"prod\" \"esl-workload\" {\n  image = \"esl:1\"\n  ports = [\"8084\"]\n  traffik \"http\" { port = 70000 }\n}\n",
    );
    assert_eq!(controller.vd(&["apply", "-f", &refused]).code, 1);

    prometheus.wait_for(
        "voodu_plugin_calls_total{plugin=\"traffik\",call=\"validate\",result=\"ok\"}",
        1.0,
    );
    prometheus.wait_for(
        "voodu_plugin_calls_total{plugin=\"traffik\",call=\"validate\",result=\"refused\"}",
        1.0,
    );
    prometheus.wait_for(
        "voodu_api_requests_total{verb=\"apply\",result=\"failed\"}",
        1.0,
    );
    prometheus.wait_for(
        "voodu_plugin_state{plugin=\"traffik\",state=\"ready\"}",
        1.0,
    );
    prometheus.wait_for(
        "voodu_plugin_call_duration_seconds_count{plugin=\"traffik\",call=\"validate\"}",
        2.0,
    );
    // One validation of echo_c's block passed (the refused apply stopped at
    // traffik's, or went on to echo_c's: at least one).
    prometheus.wait_for("voodu_plugin_echo_c_validations_total", 1.0);

    // No label value is a workload's name.
    let exposed = get(metrics, "/metrics").expect("the metrics");
    assert!(!exposed.contains("esl-workload"), "{exposed}");
    // Only metrics are served there.
    assert_eq!(get(metrics, "/"), Err("HTTP/1.0 404 Not Found".to_owned()));
}

#[test]
fn a_rollout_with_drains_a_docker_kill_and_a_refused_apply_are_counted_on_the_engine() {
    if !engine::tool_available("prometheus") {
        return;
    }
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let traffik = voodu_tests::rust_cdylib("voodu_traffik");
    let Some(rig) = DockerRig::start_with(&traffik.display().to_string(), || {
        Controller::start_with_args(true, &["--metrics-listen", &metrics.to_string()])
    }) else {
        return;
    };
    let prometheus = Prometheus::start(metrics);
    let through = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let manifest = |release: &str, port: u32| {
        rig.controller.manifest(
            "web.hcl",
            &format!(
                "deployment \"{}\" \"web\" {{\n  image = \"{}\"\n  replicas = 2\n  ports = [\"8084\"]\n  env = {{ RELEASE = \"{release}\" }}\n  traffik \"http\" {{\n    port = {port}\n    bind = \"{through}\"\n  }}\n}}\n",
                rig.scope.name, rig.image.name
            ),
        )
    };
    rig.controller
        .vd(&["apply", "-f", &manifest("1", 8084)])
        .success();
    // A rollout: each old replica is drained by traffik before it goes.
    rig.controller
        .vd(&["apply", "-f", &manifest("2", 8084)])
        .success();
    // Traffic through traffik, which reports it as its own metrics.
    for _ in 0..20 {
        get(through, "/").expect("traffik answers");
    }
    // A replica killed behind the controller's back is started again.
    let (victim, _) = rig
        .scope
        .containers()
        .into_iter()
        .last()
        .expect("a replica");
    docker(&["kill", &victim]);
    // An apply traffik refuses.
    assert_eq!(
        rig.controller
            .vd(&["apply", "-f", &manifest("3", 70000)])
            .code,
        1
    );

    // What Prometheus must have seen of all that, each at least so much.
    for (query, at_least) in [
        (
            "voodu_drains_total{plugin=\"traffik\",outcome=\"drained\"}",
            2.0,
        ),
        (
            "voodu_drain_duration_seconds_count{plugin=\"traffik\"}",
            2.0,
        ),
        ("voodu_replica_restarts_total", 1.0),
        ("voodu_reconcile_passes_total{result=\"converged\"}", 2.0),
        ("voodu_reconcile_pass_duration_seconds_count", 2.0),
        ("voodu_workqueue_wait_seconds_count", 2.0),
        (
            "voodu_publish_latency_seconds_count{plugin=\"traffik\"}",
            2.0,
        ),
        (
            "voodu_plugin_calls_total{plugin=\"traffik\",call=\"publish\",result=\"ok\"}",
            2.0,
        ),
        (
            "voodu_plugin_calls_total{plugin=\"traffik\",call=\"validate\",result=\"refused\"}",
            1.0,
        ),
        (
            "voodu_api_requests_total{verb=\"apply\",result=\"failed\"}",
            1.0,
        ),
        ("voodu_replicas{state=\"running\"}", 2.0),
        ("voodu_plugin_traffik_connections_total", 20.0),
        ("voodu_plugin_traffik_bytes_sent_total", 20.0),
        ("voodu_plugin_traffik_connections_open", 0.0),
    ] {
        prometheus.wait_for(query, at_least);
    }
    // The same figures, per plugin and per block, without Prometheus.
    let listed = rig
        .controller
        .vd(&["plugins:list", "-o", "json"])
        .success()
        .json();
    let calls = &listed["plugins"][0]["calls"];
    let figures = |call: &str| {
        calls
            .as_array()
            .into_iter()
            .flatten()
            .find(|figures| figures["call"] == call)
            .cloned()
            .unwrap_or_else(|| panic!("no {call} figures in {listed}"))
    };
    assert!(figures("validate")["calls"].as_u64() >= Some(3), "{listed}");
    assert_eq!(figures("validate")["refused"], 1, "{listed}");
    assert!(figures("publish")["calls"].as_u64() >= Some(2), "{listed}");
    assert_eq!(figures("publish")["errors"], 0, "{listed}");
    assert!(
        figures("publish")["p99_ms"].as_f64() > Some(0.0),
        "{listed}"
    );
    let table = rig.controller.vd(&["plugins:list"]).success();
    assert!(
        table.stdout.contains("P99") && table.stdout.contains("publish"),
        "{table:?}"
    );
    let described = rig.describe_json("deployment", "web");
    let block = &described["publications"][0];
    assert!(block["latency_ms"].as_f64() > Some(0.0), "{described}");
    assert_eq!(block["last_drain"]["outcome"], "drained", "{described}");

    let exposed = get(metrics, "/metrics").expect("the metrics");
    // The sample the closing note quotes.
    eprintln!("/metrics after the rollout:\n{exposed}");
    assert_every_documented_metric_is_exposed(&exposed);
    assert!(!exposed.contains(&rig.scope.name), "{exposed}");
}
