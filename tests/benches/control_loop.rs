//! The control loop on the real engine, each figure beside its peer in the
//! same run (a plain bench binary: each scenario takes seconds, so it is
//! measured once per round rather than sampled by criterion):
//!
//! - `head_of_line`: an apply of a new one-replica workload B while
//!   workload A drains a replica that never says drained, against A's
//!   15 s drain itself.
//! - `self_healing`: `docker kill` of a replica to the recorder receiving
//!   the set with it back, over 20 kills (each of a different replica, so
//!   no restart back-off applies); p50 and p99, against the engine's own
//!   healing, its peer: a container run with `--restart always` whose
//!   process is killed as often, from its `die` to its `start`; and their
//!   ratio.
//! - `wedged_plugin`: 100 workloads with a recorder block; after each of
//!   10 kills, the time from Docker's `die` to the recorder receiving the
//!   withdrawal, first alone (the peer), then with one more workload whose
//!   plugin hangs in publish; p50 and p99 of each and their ratio.
//!
//! - `metrics_overhead`: the self-healing figure (a `docker kill` to the
//!   recorder receiving the set without the replica) on two controllers,
//!   one without `--metrics-listen` and one with it, scraped every second,
//!   in alternating rounds of kills; p50 and p99 of each and their ratio.
//!
//! Run: `cargo bench -p voodu-tests --bench control_loop` (needs the
//! engine); `-- metrics_overhead` runs that scenario alone.
//! `converge_20` (against a sequential and an 8-way parallel `docker run`)
//! is in the `reconcile` bench.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../support/engine.rs"]
mod engine;
#[allow(dead_code)]
#[path = "../support/vd.rs"]
mod vd;

use engine::{docker, EchoImage, Scope};
use vd::Controller;

fn publishes(path: &Path) -> Vec<(u128, Vec<String>, String)> {
    voodu_tests::recorded_publishes(path)
        .into_iter()
        .map(|p| (p.at_ns, p.replica_ids, p.workload_name))
        .collect()
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The first publish to workload `name` after `after_ns` whose set passes
/// `done`; its receive time.
fn wait_publish(path: &Path, name: &str, after_ns: u128, done: impl Fn(&[String]) -> bool) -> u128 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((at, _, _)) = publishes(path)
            .into_iter()
            .find(|(at, ids, n)| *at > after_ns && n == name && done(ids))
        {
            return at;
        }
        assert!(Instant::now() < deadline, "no publish arrived for {name}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// When Docker last reported `die` for a replica id, in ns.
fn died_at(replica_id: &str, since_secs: u64) -> u128 {
    engine::event_times(&format!("voodu.replica_id={replica_id}"), "die", since_secs)
        .last()
        .copied()
        .expect("docker reported the death")
}

/// `a` over `b`.
fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// The engine's own healing, the peer of `self_healing`: a container of
/// `image` run with `--restart always` and its process killed once, `kills` times (a
/// fresh container each time: the engine doubles its restart delay for a
/// container killed again within 10 s, where voodu kills each replica
/// once); each time from its `die` to its `start`, as Docker reports them.
fn engine_restart_policy(image: &str, scope: &str, kills: usize) -> Vec<Duration> {
    let mut healed = Vec::new();
    for kill in 0..kills {
        let name = format!("{scope}-restart-policy-{kill}");
        let label = format!("voodu-bench={name}");
        docker(&[
            "run",
            "-d",
            "--restart",
            "always",
            "--name",
            &name,
            "--label",
            &label,
            image,
        ]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while docker(&["inspect", "-f", "{{.State.Running}}", &name]) != "true" {
            assert!(Instant::now() < deadline, "{name} did not run");
            std::thread::sleep(Duration::from_millis(5));
        }
        let since = (now_ns() / 1_000_000_000) as u64;
        // Its process killed from the host, as a crash: the engine takes
        // `docker kill` for a stop it was asked for, and restarts nothing.
        let pid = docker(&["inspect", "-f", "{{.State.Pid}}", &name]);
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status()
            .expect("kill runs");
        assert!(killed.success(), "kill -9 {pid} failed");
        let (died, started) = loop {
            let died = engine::event_times(&label, "die", since).last().copied();
            let started = engine::event_times(&label, "start", since).last().copied();
            match (died, started) {
                (Some(died), Some(started)) if started > died => break (died, started),
                _ => {
                    assert!(Instant::now() < deadline, "{name} was not restarted");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        healed.push(Duration::from_nanos(started.saturating_sub(died) as u64));
        docker(&["rm", "-f", &name]);
    }
    healed
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn manifest(scope: &str, name: &str, image: &str, body: &str, block: &str) -> String {
    format!(
        "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  ports = [\"8084\"]\n{body}\n{block}\n}}\n"
    )
}

fn recorder(calls: &Path, extra: &str) -> String {
    format!(
        "  recorder {{\n    file = \"{}\"\n{extra}\n  }}",
        calls.display()
    )
}

fn last_ids(calls: &Path, name: &str) -> Vec<String> {
    publishes(calls)
        .into_iter()
        .rfind(|(_, _, n)| n == name)
        .map(|(_, ids, _)| ids)
        .unwrap_or_default()
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") || !engine::engine_available() {
        return;
    }
    let image = EchoImage::import();
    let scope = Scope::new();
    let recorder_so = voodu_tests::rust_cdylib("voodu_fixture_recorder");
    // `cargo bench --bench control_loop -- metrics_overhead` runs that one.
    if std::env::args().any(|arg| arg == "metrics_overhead") {
        metrics_overhead(&image, &scope, &recorder_so);
        return;
    }
    let controller = Controller::start_with_docker();
    controller
        .vd(&["plugins:install", &recorder_so.display().to_string()])
        .success();
    let calls = controller.root().join("calls.jsonl");

    // Head-of-line.
    let budget = Duration::from_secs(15);
    let never = recorder(&calls, "    drain = \"never\"");
    let a = |replicas: u32| {
        manifest(
            &scope.name,
            "a",
            &image.name,
            &format!("  replicas = {replicas}\n  drain_timeout = \"15s\""),
            &never,
        )
    };
    let file = controller.manifest("a.hcl", &a(2));
    controller.vd(&["apply", "-f", &file]).success();
    let file = controller.manifest("a.hcl", &a(1));
    let a_started = Instant::now();
    let mut a_apply = Command::new(vd::vd_binary())
        .args(["apply", "-f", &file])
        .env("VOODU_ROOT", controller.root())
        .current_dir(controller.root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("vd runs");
    std::thread::sleep(Duration::from_secs(1));
    let b = controller.manifest(
        "b.hcl",
        &manifest(&scope.name, "b", &image.name, "  replicas = 1", ""),
    );
    let b_started = Instant::now();
    controller.vd(&["apply", "-f", &b]).success();
    let b_took = b_started.elapsed();
    let _ = a_apply.wait();
    let a_took = a_started.elapsed();
    eprintln!(
        "head_of_line: B's apply {:?} while A drained for {:?} (budget {:?}): ratio {:.3}",
        b_took,
        a_took,
        budget,
        b_took.as_secs_f64() / a_took.as_secs_f64()
    );
    for name in ["a", "b"] {
        controller
            .vd(&[
                "delete",
                "--no-wait",
                &format!("deployment/{}/{name}", scope.name),
            ])
            .success();
    }

    // Self-healing.
    let heal = controller.manifest(
        "heal.hcl",
        &manifest(
            &scope.name,
            "heal",
            &image.name,
            "  replicas = 20",
            &recorder(&calls, ""),
        ),
    );
    controller.vd(&["apply", "-f", &heal]).success();
    let victims = last_ids(&calls, "heal");
    let mut healed = Vec::new();
    for victim in &victims {
        let container = format!("{}-heal.{victim}", scope.name);
        let since = (now_ns() / 1_000_000_000) as u64;
        let mark = now_ns();
        docker(&["kill", &container]);
        let withdrawn = wait_publish(&calls, "heal", mark, |ids| !ids.contains(victim));
        let back = wait_publish(&calls, "heal", withdrawn, |ids| ids.contains(victim));
        let died = died_at(victim, since);
        healed.push(Duration::from_nanos(back.saturating_sub(died) as u64));
    }
    healed.sort();
    let mut engine_healed = engine_restart_policy(&image.name, &scope.name, healed.len());
    engine_healed.sort();
    eprintln!(
        "self_healing over {} kills: docker die to the replacement published p50 {:?}, p99 {:?}, max {:?}; the engine's --restart always, die to start: p50 {:?}, p99 {:?}; ratio p50 {:.2}, p99 {:.2}",
        healed.len(),
        percentile(&healed, 0.5),
        percentile(&healed, 0.99),
        healed.last().copied().unwrap_or_default(),
        percentile(&engine_healed, 0.5),
        percentile(&engine_healed, 0.99),
        ratio(percentile(&healed, 0.5), percentile(&engine_healed, 0.5)),
        ratio(percentile(&healed, 0.99), percentile(&engine_healed, 0.99)),
    );
    controller
        .vd(&["delete", &format!("deployment/{}/heal", scope.name)])
        .success();

    // A wedged plugin among 100 workloads, against the same 100 alone.
    let mut text = String::new();
    for n in 0..100 {
        text.push_str(&manifest(
            &scope.name,
            &format!("w{n}"),
            &image.name,
            "  replicas = 1",
            &recorder(&calls, ""),
        ));
    }
    let many = controller.manifest("many.hcl", &text);
    let applied = Instant::now();
    controller
        .vd(&["apply", "-f", &many, "--timeout", "10m"])
        .success();
    eprintln!(
        "wedged_plugin: 100 workloads converged in {:?}",
        applied.elapsed()
    );
    // Each kill of a workload not killed before: no restart back-off.
    let withdrawals_of = |first: usize| {
        let mut withdrawals = Vec::new();
        for n in 0..10 {
            let name = format!("w{}", first + n * 5);
            let victim = last_ids(&calls, &name)[0].clone();
            let container = format!("{}-{name}.{victim}", scope.name);
            let since = (now_ns() / 1_000_000_000) as u64;
            let mark = now_ns();
            docker(&["kill", &container]);
            let withdrawn = wait_publish(&calls, &name, mark, |ids| !ids.contains(&victim));
            let died = died_at(&victim, since);
            withdrawals.push(Duration::from_nanos(withdrawn.saturating_sub(died) as u64));
        }
        withdrawals.sort();
        withdrawals
    };
    let alone = withdrawals_of(0);
    let hang = format!("{}/libhang_publish.so", env!("VOODU_C_FIXTURES"));
    controller.vd(&["plugins:install", &hang]).success();
    let stuck = controller.manifest(
        "stuck.hcl",
        &manifest(
            &scope.name,
            "stuck",
            &image.name,
            "  replicas = 1",
            "  hang_publish {}",
        ),
    );
    controller
        .vd(&["apply", "-f", &stuck, "--timeout", "10m"])
        .success();
    let wedged = withdrawals_of(2);
    eprintln!(
        "wedged_plugin: die to withdrawal published, other workloads' blocks, over {} kills each: alone p50 {:?}, p99 {:?}; beside a plugin hung in publish p50 {:?}, p99 {:?}; ratio p50 {:.2}, p99 {:.2}",
        wedged.len(),
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
        percentile(&wedged, 0.5),
        percentile(&wedged, 0.99),
        ratio(percentile(&wedged, 0.5), percentile(&alone, 0.5)),
        ratio(percentile(&wedged, 0.99), percentile(&alone, 0.99)),
    );
    let listed = controller.vd(&["plugins:list"]).success();
    eprintln!("wedged_plugin: plugins:list\n{}", listed.stdout);
    drop(controller);

    metrics_overhead(&image, &scope, &recorder_so);
}

/// One controller of the metrics comparison, with a workload of 10
/// recorded replicas.
struct Measured {
    controller: Controller,
    calls: std::path::PathBuf,
    name: String,
}

impl Measured {
    fn start(
        controller: Controller,
        scope: &Scope,
        image: &EchoImage,
        recorder_so: &Path,
        name: &str,
    ) -> Measured {
        controller
            .vd(&["plugins:install", &recorder_so.display().to_string()])
            .success();
        let calls = controller.root().join("calls.jsonl");
        let file = controller.manifest(
            "m.hcl",
            &manifest(
                &scope.name,
                name,
                &image.name,
                "  replicas = 10",
                &recorder(&calls, ""),
            ),
        );
        controller.vd(&["apply", "-f", &file]).success();
        Measured {
            controller,
            calls,
            name: name.to_owned(),
        }
    }

    /// Kills `kills` replicas one by one; each time from Docker's `die` to
    /// the recorder receiving the set without it, then waits for it back.
    fn heal(&self, scope: &Scope, kills: usize) -> Vec<Duration> {
        let mut withdrawals = Vec::new();
        for n in 0..kills {
            let ids = last_ids(&self.calls, &self.name);
            let victim = ids[n % ids.len()].clone();
            let container = format!("{}-{}.{victim}", scope.name, self.name);
            let since = (now_ns() / 1_000_000_000) as u64;
            let mark = now_ns();
            docker(&["kill", &container]);
            let withdrawn =
                wait_publish(&self.calls, &self.name, mark, |ids| !ids.contains(&victim));
            wait_publish(&self.calls, &self.name, withdrawn, |ids| {
                ids.contains(&victim)
            });
            let died = died_at(&victim, since);
            withdrawals.push(Duration::from_nanos(withdrawn.saturating_sub(died) as u64));
        }
        withdrawals
    }
}

/// The self-healing figure with metrics off and on (see the module doc).
fn metrics_overhead(image: &EchoImage, scope: &Scope, recorder_so: &Path) {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], voodu_tests::free_port()));
    let off = Measured::start(
        Controller::start_with_docker(),
        scope,
        image,
        recorder_so,
        "off",
    );
    let on = Measured::start(
        Controller::start_with_args(true, &["--metrics-listen", &address.to_string()]),
        scope,
        image,
        recorder_so,
        "on",
    );
    // Scraped as Prometheus would, every second.
    let scraping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let scraper = {
        let scraping = scraping.clone();
        std::thread::spawn(move || {
            let mut scrapes = 0u32;
            while scraping.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut stream) = std::net::TcpStream::connect(address) {
                    use std::io::{Read, Write};
                    let _ = write!(stream, "GET /metrics HTTP/1.0\r\n\r\n");
                    let mut body = String::new();
                    if stream.read_to_string(&mut body).is_ok()
                        && body.contains("voodu_reconcile_passes_total")
                    {
                        scrapes += 1;
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            scrapes
        })
    };
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        without.extend(off.heal(scope, 10));
        with.extend(on.heal(scope, 10));
    }
    scraping.store(false, std::sync::atomic::Ordering::Relaxed);
    let scrapes = scraper.join().unwrap_or(0);
    without.sort();
    with.sort();
    let (p50_off, p99_off) = (percentile(&without, 0.5), percentile(&without, 0.99));
    let (p50_on, p99_on) = (percentile(&with, 0.5), percentile(&with, 0.99));
    eprintln!(
        "metrics_overhead: die to withdrawal over {} kills each: metrics off p50 {p50_off:?} p99 {p99_off:?}; on ({scrapes} scrapes) p50 {p50_on:?} p99 {p99_on:?}; ratio p50 {:.3}, p99 {:.3}",
        without.len(),
        p50_on.as_secs_f64() / p50_off.as_secs_f64(),
        p99_on.as_secs_f64() / p99_off.as_secs_f64()
    );
    drop((off.controller, on.controller));
}
