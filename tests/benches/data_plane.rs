//! The data plane across the controller's upgrades, crashes and restarts,
//! on the real engine: 50 clients through traffik in front of 3 replicas,
//! each event repeated, side by side with the gap of a controller stopped
//! and started again (what an upgrade or a crash cost before the
//! supervisor held the sockets), in one run.
//!
//! For each event: the requests that failed, how many of them were refused
//! (nothing listened), and a time: for a kill, from the SIGKILL to the
//! answer of a request sent right after it (p50 and p99 over the kills,
//! against the target p99 of 1 s); for a stop and start, from the SIGTERM
//! to the first request answered again.
//!
//! Run: `cargo bench -p voodu-tests --bench data_plane` (needs Docker).
//! Every sample is kept, for percentiles and failure counts, so this bench
//! keeps them itself rather than through criterion.

#[path = "../support/engine.rs"]
#[allow(dead_code)]
mod engine;
#[path = "../support/load.rs"]
#[allow(dead_code)]
mod load;
#[path = "../support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use engine::DockerRig;
use load::{request, Load};

const CLIENTS: usize = 50;

/// The `q` quantile (0 to 1) of `samples`, nearest rank.
fn quantile(samples: &[Duration], q: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// One row of the report.
struct Row {
    event: String,
    times: usize,
    answered: usize,
    failed: usize,
    refused: usize,
    timing: String,
}

/// Runs `event` `times` times under a fresh load, letting 1,000 requests
/// through between two; the row, with `timing` made from the durations
/// `event` returns.
fn measure(
    through: SocketAddr,
    name: &str,
    times: usize,
    mut event: impl FnMut() -> Option<Duration>,
    timing: impl Fn(&[Duration]) -> String,
) -> Row {
    let load = Load::start(CLIENTS, through);
    let settle = |load: &Load| {
        let target = load.answered() + load.failed() + 1_000;
        while load.answered() + load.failed() < target {
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    settle(&load);
    let mut durations = Vec::new();
    for _ in 0..times {
        durations.extend(event());
        settle(&load);
        // The supervisor counts connections every 250 ms.
        std::thread::sleep(Duration::from_millis(300));
    }
    let refused = load.refused();
    let (answered, failed, _) = load.stop();
    Row {
        event: name.to_owned(),
        times,
        answered,
        failed,
        refused,
        timing: timing(&durations),
    }
}

/// Waits for a request through `through` to be answered; from `since`.
fn answered_again(through: SocketAddr, since: Instant) -> Duration {
    while request(through).is_err() {
        std::thread::sleep(Duration::from_millis(1));
    }
    since.elapsed()
}

fn percentiles(durations: &[Duration]) -> String {
    if durations.is_empty() {
        return String::new();
    }
    format!(
        "p50 {:.0?}, p99 {:.0?}",
        quantile(durations, 0.5),
        quantile(durations, 0.99)
    )
}

fn main() {
    if !engine::engine_available() {
        eprintln!("data_plane: no Docker engine answers; nothing measured");
        return;
    }
    let binary = vd::ReplaceableBinary::new();
    let plugin = voodu_tests::rust_cdylib("voodu_traffik");
    let Some(mut rig) = DockerRig::start_with(&plugin.display().to_string(), || {
        vd::Controller::start_from_binary(&binary.path(), true)
    }) else {
        return;
    };
    let through = SocketAddr::from(([127, 0, 0, 1], voodu_tests::free_port()));
    let file = rig.controller.manifest(
        "web.hcl",
        &format!(
            "deployment \"{}\" \"web\" {{\n  image = \"{}\"\n  replicas = 3\n  ports = [\"8084\"]\n  traffik \"http\" {{\n    port = 8084\n    bind = \"{through}\"\n  }}\n}}\n",
            rig.scope.name, rig.image.name
        ),
    );
    rig.controller.vd(&["apply", "-f", &file]).success();
    let mut rows = Vec::new();

    rows.push(measure(
        through,
        "vd controller upgrade (a rebuilt binary)",
        5,
        || {
            binary.put(&std::fs::read(vd::vd_binary()).expect("vd"));
            let started = Instant::now();
            rig.controller.vd(&["controller", "upgrade"]).success();
            Some(started.elapsed())
        },
        |times| format!("the command took {}", percentiles(times)),
    ));
    rows.push(measure(
        through,
        "SIGKILL of the worker",
        10,
        || {
            let worker = rig.controller.pid();
            let killed = Instant::now();
            // SAFETY: signalling the rig's own controller worker.
            unsafe { libc::kill(worker as libc::pid_t, libc::SIGKILL) };
            let back = answered_again(through, killed);
            voodu_tests::wait_until_gone(worker);
            Some(back)
        },
        |times| format!("kill to answered: {} (target p99 < 1s)", percentiles(times)),
    ));
    rows.push(measure(
        through,
        "vd plugins:reload traffik",
        3,
        || {
            rig.controller.vd(&["plugins:reload", "traffik"]).success();
            None
        },
        |_| String::new(),
    ));
    rows.push(measure(
        through,
        "vd plugins:install --replace traffik",
        3,
        || {
            rig.controller
                .vd(&[
                    "plugins:install",
                    "--replace",
                    &plugin.display().to_string(),
                ])
                .success();
            None
        },
        |_| String::new(),
    ));
    let controller = &mut rig.controller;
    rows.push(measure(
        through,
        "controller stopped and started (the gap before the supervisor held the sockets)",
        3,
        || {
            let stopped = Instant::now();
            controller.restart();
            Some(answered_again(through, stopped))
        },
        |times| format!("SIGTERM to answered: {}", percentiles(times)),
    ));

    println!("\n{CLIENTS} clients through traffik in front of 3 replicas:\n");
    println!(
        "| event | times | answered | failed | of them refused | timing |\n|---|---|---|---|---|---|"
    );
    for row in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            row.event, row.times, row.answered, row.failed, row.refused, row.timing
        );
    }
}
