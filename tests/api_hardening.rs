//! The controller's socket under hostile clients: garbage, a request line
//! far beyond the limit, clients that connect and send nothing, and a
//! controller at its file descriptor limit. Each gets a bounded answer or
//! is dropped, and other clients are served meanwhile.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use vd::Controller;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

fn connect(controller: &Controller) -> UnixStream {
    UnixStream::connect(controller.root().join("controller.sock")).expect("the socket answers")
}

/// The first frame the controller answers on `stream`, as JSON.
fn answer(stream: &UnixStream) -> serde_json::Value {
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .expect("an answer line");
    serde_json::from_str(&line).unwrap_or_else(|error| panic!("{error}: {line:?}"))
}

/// How long `vd get workloads` takes, after checking that it succeeds.
fn get_latency(controller: &Controller) -> Duration {
    let started = Instant::now();
    controller.vd(&["get", "workloads"]).success();
    started.elapsed()
}

/// The controller's resident memory, in KiB, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The CPU time the controller has used, from /proc (utime + stime).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    let after_name = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

#[test]
fn garbage_gets_a_malformed_request_answer_and_a_wrong_protocol_is_named() {
    let controller = Controller::start();
    let mut garbage = connect(&controller);
    garbage.write_all(b"\x01\x02 not json at all\n").unwrap();
    let frame = answer(&garbage);
    let message = frame["failed"]["message"].as_str().expect("a failure");
    assert!(message.starts_with("malformed request: "), "{frame}");

    let mut old = connect(&controller);
    old.write_all(b"{\"protocol\": 0, \"verb\": \"version\"}\n")
        .unwrap();
    assert_eq!(
        answer(&old)["failed"]["message"],
        format!(
            "the client speaks API protocol 0, this controller {} — use the vd of the controller's version",
            voodu_api::PROTOCOL_VERSION
        )
    );
    assert!(get_latency(&controller) < Duration::from_secs(1));
}

#[test]
fn a_request_line_beyond_the_limit_is_refused_without_reading_the_rest() {
    let controller = Controller::start();
    let mut stream = connect(&controller);
    let writer = {
        let mut stream = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            // Up to 1 GiB with no newline, until the controller hangs up.
            let chunk = vec![b'x'; 1 << 20];
            let mut sent = 0usize;
            while sent < 1 << 30 {
                if stream.write_all(&chunk).is_err() {
                    break;
                }
                sent += chunk.len();
            }
            sent
        })
    };
    // Other clients are served while the line streams in.
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        slowest = slowest.max(get_latency(&controller));
    }
    let frame = answer(&stream);
    assert_eq!(
        frame["failed"]["message"],
        "the request line is longer than 67108864 bytes — split the apply into smaller ones"
    );
    let sent = writer.join().unwrap();
    let _ = stream.read(&mut [0; 1]);
    assert!(sent < 1 << 30, "the controller read all {sent} bytes");
    let rss = rss_kib(controller.pid());
    println!("1 GiB request: refused after {} MiB sent; controller RSS {} MiB; vd get at most {slowest:?}", sent >> 20, rss >> 10);
    assert!(rss < 256 * 1024, "RSS {rss} KiB");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
}

#[test]
fn clients_that_send_nothing_are_answered_and_dropped_and_others_are_served() {
    let controller = Controller::start();
    let idle: Vec<UnixStream> = (0..50).map(|_| connect(&controller)).collect();
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        slowest = slowest.max(get_latency(&controller));
    }
    println!("50 idle clients: vd get at most {slowest:?}");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    let started = Instant::now();
    for stream in &idle {
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        assert_eq!(
            answer(stream)["failed"]["message"],
            "no request line within 10s — send one JSON line per connection"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn at_its_descriptor_limit_the_controller_neither_spins_nor_floods_its_log() {
    let controller = Controller::start_with_open_files(64);
    // More connections than the controller has descriptors for.
    let held: Vec<UnixStream> = (0..120)
        .filter_map(|_| UnixStream::connect(controller.root().join("controller.sock")).ok())
        .collect();
    let cpu_before = cpu_time(controller.pid());
    let log_before = controller.log_text().len();
    std::thread::sleep(Duration::from_secs(3));
    let cpu = cpu_time(controller.pid()) - cpu_before;
    let logged = controller.log_text().len() - log_before;
    println!(
        "at the fd limit for 3 s: {cpu:?} of CPU, {logged} bytes of log, {} connections held",
        held.len()
    );
    assert!(
        cpu < Duration::from_millis(500),
        "the accept loop spins: {cpu:?}"
    );
    assert!(logged < 4096, "{logged} bytes logged");
    drop(held);
    // Once the clients are gone, it serves again.
    voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        let run = controller.vd(&["get", "workloads"]);
        match run.code {
            0 => Ok(()),
            _ => Err(format!("not served again: {run:?}")),
        }
    });
}

#[test]
fn two_hundred_concurrent_applies_each_succeed_or_fail_cleanly_and_the_store_holds_the_last_of_each(
) {
    let controller = Controller::start();
    let echo = voodu_tests::rust_cdylib("voodu_echo").display().to_string();
    controller.vd(&["plugins:install", &echo]).success();
    controller
        .vd(&["plugins:install", voodu_echo_c::PLUGIN_PATH])
        .success();
    let manifest = |client: usize, replicas: usize| {
        format!(
            "deployment \"load\" \"w{client}\" {{\n  image = \"esl:1\"\n  replicas = {replicas}\n  ports = [\"8084\"]\n  echo {{ greeting = \"hi {client}\" }}\n  echo_c \"b\" {{ greeting = \"ho {client}\" }}\n}}\n"
        )
    };
    let started = Instant::now();
    let root = controller.root().to_owned();
    let clients: Vec<_> = (0..200)
        .map(|client| {
            let first = controller.manifest(&format!("load/{client}-a.vd"), &manifest(client, 1));
            let second = controller.manifest(&format!("load/{client}-b.vd"), &manifest(client, 2));
            let root = root.clone();
            std::thread::spawn(move || {
                [first, second].map(|file| {
                    std::process::Command::new(vd::vd_binary())
                        .args(["apply", "--no-wait", "-f", &file])
                        .env("VOODU_ROOT", &root)
                        .current_dir(&root)
                        .output()
                        .expect("vd runs")
                })
            })
        })
        .collect();
    let mut succeeded = 0;
    let mut failed_cleanly = 0;
    for client in clients {
        for output in client.join().expect("a client") {
            match output.status.code() {
                Some(0) => succeeded += 1,
                Some(1) if !output.stderr.is_empty() => failed_cleanly += 1,
                other => panic!(
                    "an apply ended with {other:?}: {}",
                    String::from_utf8_lossy(&output.stderr)
                ),
            }
        }
    }
    let took = started.elapsed();
    let stored = controller
        .vd(&["get", "workloads", "-o", "json"])
        .success()
        .json();
    let workloads = stored["workloads"].as_array().expect("workloads");
    let rss = rss_kib(controller.pid());
    println!(
        "200 clients, 400 applies in {took:?}: {succeeded} succeeded, {failed_cleanly} failed cleanly; {} workloads stored; controller RSS {} MiB",
        workloads.len(),
        rss >> 10
    );
    assert_eq!(succeeded + failed_cleanly, 400);
    assert_eq!(succeeded, 400, "no apply had a reason to fail");
    assert_eq!(workloads.len(), 200);
    // Each client's second apply came after its first: the store holds it.
    for workload in workloads {
        assert_eq!(workload["replicas"], 2, "{workload}");
        assert_eq!(
            workload["blocks"].as_array().map(Vec::len),
            Some(2),
            "{workload}"
        );
    }
    assert!(took < Duration::from_secs(120), "{took:?}");
}

#[test]
fn a_client_of_another_user_gets_no_service() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(!voodu_tests::on_ci(), "CI runs as root and must check this");
        return;
    }
    use std::os::unix::process::CommandExt;
    let controller = Controller::start();
    let mut command = std::process::Command::new(vd::vd_binary());
    command
        .args(["get", "workloads"])
        .env("VOODU_ROOT", controller.root())
        .env("NO_COLOR", "1");
    // SAFETY: setgid/setuid are async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(|| {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command.output().expect("vd runs as nobody");
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("another user: exit {:?}: {stderr}", output.status.code());
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    // The root is 0700 and the socket 0600, so the connection itself is
    // refused; the controller's peer check is the second line.
    assert!(
        stderr.contains("is not open to this user (permission denied) — run vd as the user the controller runs as")
            || stderr.contains("only the user the controller runs as"),
        "{stderr}"
    );
}
