//! voodu's container-shaping attributes on the real engine: each one, as
//! voodu documents it, checked with `docker inspect` on the replica it
//! made (`ulimits`, `cap_add`, `extra_hosts`, `logs`, `resources { limits
//! }`, `docker_options`, port ranges with `/udp`, `network_mode = "host"`,
//! and a statefulset's `volume_claim`s, which outlive the workload).

use std::time::Duration;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/load.rs"]
mod load;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::{docker, DockerRig};
use serde_json::Value;
use voodu_tests::free_port;

fn rig() -> Option<DockerRig> {
    DockerRig::with_rust_plugin("voodu_echo")
}

/// `docker inspect` of one container, as JSON.
fn inspect(container: &str) -> Value {
    let text = docker(&["inspect", container]);
    let parsed: Value = serde_json::from_str(&text).expect("docker inspect prints JSON");
    parsed[0].clone()
}

fn apply(rig: &DockerRig, file: &str, text: &str) {
    let file = rig.controller.manifest(file, text);
    rig.controller.vd(&["apply", "-f", &file]).success();
}

#[test]
fn voodus_container_attributes_reach_the_engine() {
    let Some(rig) = rig() else {
        return;
    };
    // voodu's deployment page's attributes, in voodu's spelling.
    apply(
        &rig,
        "shaped.hcl",
        &format!(
            r#"deployment "{scope}" "shaped" {{
  image       = "{image}"
  ports       = ["8084", "9000-9003/udp"]
  cap_add     = ["NET_ADMIN"]
  extra_hosts = ["legacy.internal:10.0.0.5"]
  ulimits = {{
    nofile = "4096:8192"
  }}
  docker_options = [
    "--shm-size=64m",
    "--sysctl=net.core.somaxconn=4096",
  ]
  logs {{
    max_size  = "5m"
    max_files = 2
  }}
  resources {{
    limits {{
      cpu    = "500m"
      memory = "64Mi"
    }}
  }}
}}
"#,
            scope = rig.scope.name,
            image = rig.image.name,
        ),
    );
    let described = rig.describe_json("deployment", "shaped");
    let replica = described["replicas"][0]["replica_id"]
        .as_str()
        .expect("a replica");
    let container = inspect(&format!("{}-shaped.{replica}", rig.scope.name));
    let host = &container["HostConfig"];
    let ulimits: Vec<(String, i64, i64)> = host["Ulimits"]
        .as_array()
        .expect("ulimits")
        .iter()
        .map(|limit| {
            (
                limit["Name"].as_str().unwrap().to_owned(),
                limit["Soft"].as_i64().unwrap(),
                limit["Hard"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(
        ulimits.contains(&("nofile".into(), 4096, 8192)),
        "{ulimits:?}"
    );
    assert!(
        ulimits.contains(&("nproc".into(), 4096, 4096)),
        "voodu's default for a key not written: {ulimits:?}"
    );
    assert_eq!(host["CapAdd"], serde_json::json!(["NET_ADMIN"]));
    let extra_hosts = host["ExtraHosts"].as_array().expect("extra hosts");
    assert!(extra_hosts.contains(&Value::from("legacy.internal:10.0.0.5")));
    assert!(extra_hosts.contains(&Value::from("host.docker.internal:host-gateway")));
    assert_eq!(host["LogConfig"]["Type"], "json-file");
    assert_eq!(host["LogConfig"]["Config"]["max-size"], "5m");
    assert_eq!(host["LogConfig"]["Config"]["max-file"], "2");
    assert_eq!(host["NanoCpus"], 500_000_000);
    assert_eq!(host["Memory"], 64 * 1024 * 1024);
    assert_eq!(host["ShmSize"], 64 * 1024 * 1024);
    assert_eq!(host["Sysctls"]["net.core.somaxconn"], "4096");
    let bindings = host["PortBindings"].as_object().expect("port bindings");
    for port in 9000..=9003 {
        assert!(
            bindings.contains_key(&format!("{port}/udp")),
            "{port}/udp: {bindings:?}"
        );
    }
    assert!(bindings.contains_key("8084/tcp"));

    // A flag voodu manages is refused by name, with the attribute to use.
    let file = rig.controller.manifest(
        "managed.hcl",
        &format!(
            "deployment \"{}\" \"managed\" {{\n  image = \"{}\"\n  docker_options = [\"--memory=1g\"]\n}}\n",
            rig.scope.name, rig.image.name
        ),
    );
    let refused = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("docker_options: --memory is managed by voodu — set it with resources { limits { memory } }"),
        "{refused:?}"
    );
}

#[test]
fn network_mode_host_runs_on_the_hosts_network_and_is_probed_at_loopback() {
    let Some(rig) = rig() else {
        return;
    };
    let port = free_port();
    apply(
        &rig,
        "hostnet.hcl",
        &format!(
            r#"deployment "{scope}" "hostnet" {{
  image        = "{image}"
  network_mode = "host"
  env          = {{ PORT = "{port}" }}
  probes {{
    readiness {{
      tcp_socket {{ port = {port} }}
      period = "200ms"
    }}
  }}
}}
"#,
            scope = rig.scope.name,
            image = rig.image.name,
        ),
    );
    let described = rig.describe_json("deployment", "hostnet");
    let replica = &described["replicas"][0];
    assert_eq!(replica["ip"], "127.0.0.1", "{described:#}");
    assert_eq!(replica["ready"], true, "{described:#}");
    let container = inspect(&format!(
        "{}-hostnet.{}",
        rig.scope.name,
        replica["replica_id"].as_str().unwrap()
    ));
    assert_eq!(container["HostConfig"]["NetworkMode"], "host");
    // It answers on the host's own address.
    let answer = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(answer.is_ok(), "{answer:?}");
}

#[test]
fn volume_claims_give_each_ordinal_its_own_volume_which_outlives_the_workload() {
    let Some(rig) = rig() else {
        return;
    };
    apply(
        &rig,
        "pg.hcl",
        &format!(
            r#"statefulset "{scope}" "pg" {{
  image    = "{image}"
  replicas = 2
  volume_claim "data" {{
    mount_path = "/var/lib/data"
    size       = "1Gi"
  }}
}}
"#,
            scope = rig.scope.name,
            image = rig.image.name,
        ),
    );
    for ordinal in 0..2 {
        let container = inspect(&format!("{}-pg.{ordinal}", rig.scope.name));
        let volume = format!("voodu-{}-pg-data-{ordinal}", rig.scope.name);
        let mounts = container["Mounts"].as_array().expect("mounts");
        assert!(
            mounts
                .iter()
                .any(|mount| mount["Name"] == volume.as_str()
                    && mount["Destination"] == "/var/lib/data"),
            "{mounts:#?}"
        );
        let env = container["Config"]["Env"].as_array().expect("env");
        assert!(
            env.contains(&Value::from(format!("VOODU_REPLICA_ORDINAL={ordinal}"))),
            "{env:?}"
        );
    }
    rig.controller
        .vd(&["delete", &format!("statefulset/{}/pg", rig.scope.name)])
        .success();
    voodu_tests::wait_until(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || match rig.scope.containers().is_empty() {
            true => Ok(()),
            false => Err("the replicas are not removed yet"),
        },
    );
    for ordinal in 0..2 {
        let volume = format!("voodu-{}-pg-data-{ordinal}", rig.scope.name);
        let listed = docker(&["volume", "ls", "-q", "--filter", &format!("name={volume}")]);
        assert_eq!(
            listed.trim(),
            volume,
            "a claim's volume outlives its workload"
        );
    }
}

/// The env of a running container, as `NAME=value` strings.
fn container_env(container: &str) -> Vec<String> {
    inspect(container)["Config"]["Env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|value| value.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_config_change_rolls_the_workloads_that_take_it_with_no_failed_request() {
    let Some(rig) = DockerRig::with_rust_plugin("voodu_traffik") else {
        return;
    };
    let scope = rig.scope.name.clone();
    let through = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let bucket = format!("{scope}/shared");
    rig.controller
        .vd(&[
            "config",
            "set",
            &bucket,
            "GREETING=from-the-bucket",
            "LEVEL=info",
        ])
        .success();
    apply(
        &rig,
        "web.hcl",
        &format!(
            r#"deployment "{scope}" "web" {{
  image    = "{image}"
  replicas = 3
  ports    = ["8084"]
  env      = {{ GREETING = "from-env", ONLY_ENV = "kept" }}
  env_from = ["shared"]
  probes {{
    readiness {{
      http_get {{ path = "/ready" }}
      period = "200ms"
    }}
  }}
  traffik "http" {{
    port = 8084
    bind = "{through}"
  }}
}}
"#,
            image = rig.image.name,
        ),
    );
    let replicas = |rig: &DockerRig| running_containers(rig, "web");
    let before = replicas(&rig);
    assert_eq!(before.len(), 3);
    let env = container_env(&before[0]);
    assert!(
        env.contains(&"GREETING=from-the-bucket".to_owned()),
        "the bucket wins over env: {env:?}"
    );
    assert!(env.contains(&"ONLY_ENV=kept".to_owned()), "{env:?}");
    assert!(env.contains(&"LEVEL=info".to_owned()), "{env:?}");

    // 50 clients through traffik while the bucket changes.
    let load = load::Load::start(50, through);
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(10), || {
        if load.answered() >= 500 {
            Ok(())
        } else {
            Err("the load has not started")
        }
    });
    let changed = rig
        .controller
        .vd(&["config", "set", &bucket, "GREETING=changed"])
        .success();
    assert!(
        changed
            .stdout
            .contains(&format!("deployment/{scope}/web: rolling to the new env")),
        "{changed:?}"
    );
    rig.controller
        .vd(&[
            "rollout",
            "status",
            &format!("deployment/{scope}/web"),
            "--timeout",
            "120s",
        ])
        .success();
    let answered_during = load.answered();
    let (answered, failed, errors) = load.stop();
    println!(
        "a config change rolled 3 replicas behind traffik: {answered} answered, {failed} failed"
    );
    assert_eq!(
        failed, 0,
        "no request fails while the bucket change rolls: {errors:?}"
    );
    assert!(answered_during > 1_000, "{answered_during}");
    let after = replicas(&rig);
    assert_eq!(after.len(), 3);
    assert!(
        after.iter().all(|replica| !before.contains(replica)),
        "every replica was replaced: {before:?} {after:?}"
    );
    for replica in &after {
        let env = container_env(replica);
        assert!(env.contains(&"GREETING=changed".to_owned()), "{env:?}");
    }
    let described = rig
        .controller
        .vd(&[
            "describe",
            &format!("deployment/{scope}/web"),
            "--events",
            "200",
            "-o",
            "json",
        ])
        .success()
        .json();
    let reasons: Vec<&str> = described["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|event| event["reason"].as_str())
        .collect();
    assert!(reasons.contains(&"config-changed"), "{reasons:?}");
}

/// The running containers of deployment `name` in the rig's scope.
fn running_containers(rig: &DockerRig, name: &str) -> Vec<String> {
    rig.describe_json("deployment", name)["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .filter(|replica| replica["state"] == "running")
        .map(|replica| {
            format!(
                "{}-{name}.{}",
                rig.scope.name,
                replica["replica_id"].as_str().unwrap()
            )
        })
        .collect()
}

/// What a replica's echo-server answers at `path`.
fn http_get(container: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let ip = engine::voodu0_ip(container);
    let mut stream =
        std::net::TcpStream::connect((ip.as_str(), 8084)).expect("the replica answers");
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn init_steps_run_in_order_before_each_replica_and_a_failing_one_starts_none() {
    let Some(rig) = rig() else {
        return;
    };
    let scope = rig.scope.name.clone();
    let manifest = |release: u32, second: &str| {
        format!(
            r#"deployment "{scope}" "web" {{
  image    = "{image}"
  replicas = 2
  ports    = ["8084"]
  volumes  = ["voodu-{scope}-shared:/shared"]
  env      = {{ INIT_LOG = "/shared/${{VOODU_REPLICA_ID}}.log", RELEASE = "{release}" }}

  init "one" {{
    command = ["init", "one"]
    timeout = "30s"
  }}

  init "two" {{
{second}
  }}
}}
"#,
            image = rig.image.name,
        )
    };
    apply(
        &rig,
        "web.hcl",
        &manifest(
            1,
            "    command = [\"init\", \"two\"]\n    timeout = \"30s\"",
        ),
    );
    let running = |rig: &DockerRig| running_containers(rig, "web");
    let before = running(&rig);
    assert_eq!(before.len(), 2);
    for replica in &before {
        // Each replica's own steps ran, in order, before it started.
        assert_eq!(http_get(replica, "/init-log"), "one\ntwo\n", "{replica}");
    }

    // A second revision whose second step fails (exit 3), with one retry:
    // no new replica starts, and the two old ones keep running.
    let file = rig.controller.manifest(
        "web.hcl",
        &manifest(
            2,
            "    command = [\"init\", \"two\", \"3\"]\n    timeout = \"30s\"\n    retries = 1",
        ),
    );
    let failed = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(failed.code, 1, "{failed:?}");
    assert!(
        failed.stderr.contains("init step \"two\" exited with code 3 (its last line: \"init two: done, exiting with 3\")"),
        "{failed:?}"
    );
    assert!(
        failed
            .stderr
            .contains("(after 2 attempt(s)); the replica was not started"),
        "{failed:?}"
    );
    assert_eq!(running(&rig), before, "the old replicas keep running");
    let kept = docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=voodu.scope={scope}"),
        "--filter",
        "label=voodu.init=two",
        "--format",
        "{{.Names}} {{.State}}",
    ]);
    assert!(
        kept.contains(".init-two exited"),
        "the failed step's container is kept: {kept}"
    );

    // The controller keeps trying (a new replica id each time): however
    // often the step fails, the workload keeps only its last failed one.
    let step_containers = |rig: &DockerRig| -> Vec<String> {
        docker(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=voodu.scope={}", rig.scope.name),
            "--filter",
            "label=voodu.init",
            "--format",
            "{{.Names}} {{.State}}",
        ])
        .lines()
        .map(str::to_owned)
        .collect()
    };
    let exited = |rig: &DockerRig| {
        step_containers(rig)
            .iter()
            .filter(|line| line.ends_with(" exited"))
            .count()
    };
    let failures = |rig: &DockerRig| {
        rig.controller
            .vd(&[
                "events",
                &format!("deployment/{}/web", rig.scope.name),
                "--limit",
                "200",
                "-o",
                "json",
            ])
            .success()
            .json()["events"]
            .as_array()
            .map_or(0, |events| {
                events
                    .iter()
                    .filter(|event| event["reason"] == "init-failed")
                    .count()
            })
    };
    voodu_tests::wait_until(Duration::from_secs(90), Duration::from_millis(500), || {
        let seen = failures(&rig);
        (seen >= 3)
            .then_some(())
            .ok_or(format!("{seen} init-failed events"))
    });
    assert_eq!(
        exited(&rig),
        1,
        "only the last failed step container is kept: {:?}",
        step_containers(&rig)
    );

    // The next success removes it.
    apply(
        &rig,
        "web.hcl",
        &manifest(
            3,
            "    command = [\"init\", \"two\"]\n    timeout = \"30s\"",
        ),
    );
    assert_eq!(
        step_containers(&rig),
        Vec::<String>::new(),
        "after a success"
    );

    // A failed step's container goes with its workload's deletion.
    let file = rig.controller.manifest(
        "web.hcl",
        &manifest(
            4,
            "    command = [\"init\", \"two\", \"3\"]\n    timeout = \"30s\"",
        ),
    );
    let failed = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(failed.code, 1, "{failed:?}");
    assert_eq!(exited(&rig), 1, "kept after the failure");
    rig.controller
        .vd(&["delete", &format!("deployment/{scope}/web")])
        .success();
    voodu_tests::wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
        let left = step_containers(&rig);
        left.is_empty().then_some(()).ok_or(format!("{left:?}"))
    });
}

#[test]
fn a_release_runs_once_per_release_and_a_failing_command_leaves_the_old_replicas_serving() {
    let Some(rig) = rig() else {
        return;
    };
    let scope = rig.scope.name.clone();
    let manifest = |release: u32, command: &str| {
        format!(
            r#"deployment "{scope}" "api" {{
  image    = "{image}"
  replicas = 2
  ports    = ["8084"]
  volumes  = ["voodu-{scope}-shared:/shared"]
  env      = {{ INIT_LOG = "/shared/release.log", RELEASE = "{release}" }}

  release {{
    pre_command  = ["init", "pre-{release}"]
    command      = {command}
    post_command = ["init", "post-{release}"]
    timeout      = "30s"
  }}

  echo "http" {{}}
}}
"#,
            image = rig.image.name,
        )
    };
    apply(&rig, "api.hcl", &manifest(1, r#"["init", "migrate-1"]"#));
    let running = |rig: &DockerRig| running_containers(rig, "api");
    let before = running(&rig);
    assert_eq!(before.len(), 2);
    // Once per release, not per replica: pre_command, command, then, once
    // the rollout converged, post_command.
    voodu_tests::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match http_get(&before[0], "/init-log").as_str() {
            "pre-1\nmigrate-1\npost-1\n" => Ok(()),
            other => Err(format!("the release log holds {other:?}")),
        },
    );

    // A release whose command fails: no new replica, the old ones serving
    // and still published.
    let file = rig
        .controller
        .manifest("api.hcl", &manifest(2, r#"["init", "migrate-2", "3"]"#));
    let failed = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(failed.code, 1, "{failed:?}");
    assert!(
        failed.stderr.contains("release command exited with code 3 (its last line: \"init migrate-2: done, exiting with 3\")"),
        "{failed:?}"
    );
    assert!(
        failed.stderr.contains("the old replicas keep serving"),
        "{failed:?}"
    );
    assert_eq!(running(&rig), before, "no replica was replaced");
    let described = rig.describe_json("deployment", "api");
    let published: Vec<String> = described["publications"][0]["endpoints"]
        .as_array()
        .expect("the echo block's set")
        .iter()
        .map(|endpoint| format!("{scope}-api.{}", endpoint["replica_id"].as_str().unwrap()))
        .collect();
    let mut expected = before.clone();
    expected.sort();
    let mut published_sorted = published.clone();
    published_sorted.sort();
    assert_eq!(published_sorted, expected, "{described:#}");
    assert_eq!(
        http_get(&before[0], "/init-log"),
        "pre-1\nmigrate-1\npost-1\npre-2\nmigrate-2\n",
        "post_command runs only after a rollout"
    );
}

/// voodu's `vd release SCOPE/NAME run`: the release's commands run again
/// for the same spec (which a `vd restart` never does), then the replicas
/// are replaced and `post_command` runs; `vd release SCOPE/NAME` lists
/// what its releases ran. A deployment without a release is refused,
/// naming what to write.
#[test]
fn vd_release_run_runs_the_release_again_then_replaces_the_replicas() {
    let Some(rig) = rig() else {
        return;
    };
    let scope = rig.scope.name.clone();
    let manifest = format!(
        r#"deployment "{scope}" "api" {{
  image    = "{image}"
  replicas = 2
  ports    = ["8084"]
  volumes  = ["voodu-{scope}-shared:/shared"]
  env      = {{ INIT_LOG = "/shared/release.log" }}

  release {{
    pre_command  = ["init", "pre"]
    command      = ["init", "migrate"]
    post_command = ["init", "post"]
    timeout      = "30s"
  }}
}}

deployment "{scope}" "plain" {{
  image = "{image}"
}}
"#,
        image = rig.image.name,
    );
    apply(&rig, "api.hcl", &manifest);
    let before = running_containers(&rig, "api");
    voodu_tests::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match http_get(&before[0], "/init-log").as_str() {
            "pre\nmigrate\npost\n" => Ok(()),
            other => Err(format!("the release log holds {other:?}")),
        },
    );
    let ran = rig
        .controller
        .vd(&["release", &format!("{scope}/api"), "run"])
        .success();
    assert!(
        ran.stderr
            .contains("release run asked: its 2 release command(s) ran; every replica is replaced"),
        "{ran:?}"
    );
    let after = running_containers(&rig, "api");
    assert_eq!(after.len(), 2);
    assert!(
        after.iter().all(|name| !before.contains(name)),
        "every replica replaced: {before:?} then {after:?}"
    );
    voodu_tests::wait_until(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || match http_get(&after[0], "/init-log").as_str() {
            "pre\nmigrate\npost\npre\nmigrate\npost\n" => Ok(()),
            other => Err(format!("the release log holds {other:?}")),
        },
    );
    let history = rig
        .controller
        .vd(&["release", &format!("{scope}/api")])
        .success();
    assert_eq!(
        history.stdout.matches("release command finished").count(),
        2,
        "{history:?}"
    );
    assert!(
        !history.stdout.contains("restarted"),
        "only the release's events: {history:?}"
    );
    let refused = rig
        .controller
        .vd(&["release", &format!("{scope}/plain"), "run"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(&format!(
            "deployment/{scope}/plain has no release block — add release {{ command = [\"...\"] }} to it, or replace its replicas with vd restart deployment/{scope}/plain"
        )),
        "{refused:?}"
    );
}

/// voodu's `vd config set --no-restart`: the change is stored, the running
/// replicas keep the env they have through every pass, until `vd restart`
/// rolls them to it; a change made without the flag rolls at once.
#[test]
fn config_set_no_restart_keeps_the_replicas_until_a_restart() {
    let Some(rig) = rig() else {
        return;
    };
    let scope = rig.scope.name.clone();
    let bucket = format!("{scope}/shared");
    let web = format!("deployment/{scope}/web");
    rig.controller
        .vd(&["config", "set", &bucket, "GREETING=one"])
        .success();
    apply(
        &rig,
        "web.hcl",
        &format!(
            "deployment \"{scope}\" \"web\" {{\n  image    = \"{}\"\n  replicas = 2\n  env_from = [\"shared\"]\n}}\n",
            rig.image.name
        ),
    );
    let greeting = |container: &str| -> String {
        inspect(container)["Config"]["Env"]
            .as_array()
            .expect("an env")
            .iter()
            .filter_map(Value::as_str)
            .find_map(|pair| pair.strip_prefix("GREETING="))
            .unwrap_or_default()
            .to_owned()
    };
    let before = running_containers(&rig, "web");
    assert_eq!(before.len(), 2);
    let kept = rig
        .controller
        .vd(&["config", "set", &bucket, "GREETING=two", "--no-restart"])
        .success();
    assert!(
        kept.stdout.contains(&format!(
            "{web}: its replicas keep the env they run with (--no-restart) — vd restart {web} rolls them to the new one"
        )),
        "{kept:?}"
    );
    // The pass the change queued, and another, converge with no roll.
    rig.controller.vd(&["rollout", "status", &web]).success();
    rig.controller
        .vd(&["config", "unset", &bucket, "GREETING", "--no-restart"])
        .success();
    rig.controller.vd(&["rollout", "status", &web]).success();
    assert_eq!(
        running_containers(&rig, "web"),
        before,
        "no replica replaced"
    );
    assert!(before.iter().all(|container| greeting(container) == "one"));
    // A restart takes the bucket as it is now.
    rig.controller
        .vd(&["config", "set", &bucket, "GREETING=three", "--no-restart"])
        .success();
    rig.controller.vd(&["restart", &web]).success();
    let restarted = running_containers(&rig, "web");
    assert!(restarted
        .iter()
        .all(|container| !before.contains(container)));
    assert!(
        restarted
            .iter()
            .all(|container| greeting(container) == "three"),
        "{restarted:?}"
    );
    // Without the flag, the change rolls them.
    rig.controller
        .vd(&["config", "set", &bucket, "GREETING=four"])
        .success();
    voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        let rolled = running_containers(&rig, "web");
        if rolled.len() == 2
            && rolled
                .iter()
                .all(|container| !restarted.contains(container))
            && rolled.iter().all(|container| greeting(container) == "four")
        {
            Ok(())
        } else {
            Err(format!("running {rolled:?}"))
        }
    });
}

#[test]
fn a_secret_that_reaches_a_manifest_through_a_variable_appears_in_no_output() {
    let Some(rig) = DockerRig::with_rust_plugin("voodu_echo") else {
        return;
    };
    let scope = rig.scope.name.clone();
    let bucket = format!("{scope}/api");
    let set_password = |password: &str| {
        rig.controller
            .vd(&[
                "config",
                "set",
                &bucket,
                &format!("DB_PASSWORD={password}"),
                "--secret",
            ])
            .success();
    };
    set_password("hunter2-s3cret");
    let manifest = format!(
        r#"deployment "{scope}" "api" {{
  image    = "{image}"
  ports    = ["8084"]
  env      = {{ DATABASE_URL = "postgres://app:${{DB_PASSWORD}}@db/app", LEVEL = "info" }}
  echo "http" {{}}
}}
"#,
        image = rig.image.name,
    );
    let file = rig.controller.manifest("api.hcl", &manifest);
    let applied = rig.controller.vd(&["apply", "-f", &file]).success();
    let workload = format!("deployment/{scope}/api");
    // The replica runs with the value itself.
    let replica = running_containers(&rig, "api").remove(0);
    assert!(
        container_env(&replica)
            .contains(&"DATABASE_URL=postgres://app:hunter2-s3cret@db/app".to_owned()),
        "{:?}",
        container_env(&replica)
    );
    // Every view shows where it is and from which bucket, never the value.
    let marker = format!("postgres://app:<secret DB_PASSWORD from {bucket}>@db/app");
    let described = rig.describe_json("deployment", "api");
    assert_eq!(
        described["core_spec"]["env"]["DATABASE_URL"], marker,
        "{described}"
    );
    let text = rig.controller.vd(&["describe", &workload]).success();
    assert!(
        text.stdout
            .contains(&format!("DB_PASSWORD from {bucket} in env.DATABASE_URL")),
        "{text:?}"
    );
    set_password("hunter3-rotated");
    let dry = rig
        .controller
        .vd(&["apply", "--dry-run", "-f", &file])
        .success();
    assert!(
        dry.stdout.contains(&format!(
            "~ env.DATABASE_URL: <secret DB_PASSWORD from {bucket}> (a new value)"
        )),
        "a changed secret is named, not shown: {dry:?}"
    );
    let dry_json = rig
        .controller
        .vd(&["apply", "--dry-run", "-o", "json", "-f", &file])
        .success();
    rig.controller.vd(&["apply", "-f", &file]).success();
    let outputs = [
        applied,
        dry,
        dry_json,
        rig.controller.vd(&["describe", &workload]).success(),
        rig.controller
            .vd(&["describe", &workload, "-o", "json"])
            .success(),
        rig.controller.vd(&["history", &workload]).success(),
        rig.controller
            .vd(&["history", &workload, "-o", "json"])
            .success(),
        rig.controller
            .vd(&["get", "workloads", "-o", "json"])
            .success(),
        rig.controller
            .vd(&["events", &workload, "--limit", "100", "-o", "json"])
            .success(),
    ];
    for output in &outputs {
        for value in ["hunter2-s3cret", "hunter3-rotated"] {
            assert!(
                !output.stdout.contains(value) && !output.stderr.contains(value),
                "{value} shown: {output:?}"
            );
        }
    }
    let history = rig
        .controller
        .vd(&["history", &workload, "-o", "json"])
        .success()
        .json();
    assert!(
        history
            .to_string()
            .contains(&format!("<secret DB_PASSWORD from {bucket}>")),
        "{history}"
    );
    let log = rig.controller.log_text();
    assert!(
        !log.contains("hunter2-s3cret") && !log.contains("hunter3-rotated"),
        "{log}"
    );
    // The new revision runs the new value.
    let replica = running_containers(&rig, "api").remove(0);
    assert!(
        container_env(&replica)
            .contains(&"DATABASE_URL=postgres://app:hunter3-rotated@db/app".to_owned()),
        "{:?}",
        container_env(&replica)
    );
}

#[test]
fn vd_restart_replaces_every_replica_through_traffik_with_no_failed_request_and_keeps_the_spec() {
    let Some(rig) = DockerRig::with_rust_plugin("voodu_traffik") else {
        return;
    };
    let scope = rig.scope.name.clone();
    let through = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let file = rig.controller.manifest(
        "web.hcl",
        &format!(
            r#"deployment "{scope}" "web" {{
  image    = "{image}"
  replicas = 3
  ports    = ["8084"]
  probes {{
    readiness {{
      http_get {{ path = "/ready" }}
      period = "200ms"
    }}
  }}
  traffik "http" {{
    port = 8084
    bind = "{through}"
  }}
}}
"#,
            image = rig.image.name,
        ),
    );
    rig.controller.vd(&["apply", "-f", &file]).success();
    let workload = format!("deployment/{scope}/web");
    let before = running_containers(&rig, "web");
    assert_eq!(before.len(), 3);

    let load = load::Load::start(50, through);
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(10), || {
        if load.answered() >= 500 {
            Ok(())
        } else {
            Err("the load has not started")
        }
    });
    let restarted = rig.controller.vd(&["restart", &workload]).success();
    assert!(
        restarted
            .stdout
            .contains(&format!("{workload}: restarting (revision 1")),
        "{restarted:?}"
    );
    let answered_during = load.answered();
    let (answered, failed, errors) = load.stop();
    println!("vd restart rolled 3 replicas behind traffik: {answered} answered, {failed} failed");
    assert_eq!(
        failed, 0,
        "no request fails while the restart rolls: {errors:?}"
    );
    assert!(answered_during > 1_000, "{answered_during}");
    let after = running_containers(&rig, "web");
    assert_eq!(after.len(), 3);
    assert!(
        after.iter().all(|replica| !before.contains(replica)),
        "every replica was replaced: {before:?} {after:?}"
    );
    // The spec and its revision stay, and an apply of the same file after
    // it changes nothing and replaces nothing.
    let described = rig.describe_json("deployment", "web");
    assert_eq!(described["revision"], 1, "{described}");
    let again = rig.controller.vd(&["apply", "-f", &file]).success();
    assert!(again.stdout.contains("unchanged (revision 1"), "{again:?}");
    assert_eq!(running_containers(&rig, "web"), after);
    let events = rig
        .controller
        .vd(&["events", &workload, "--limit", "200", "-o", "json"])
        .success()
        .json();
    let reasons: Vec<&str> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|event| event["reason"].as_str())
        .collect();
    assert!(reasons.contains(&"restarted"), "{reasons:?}");
    assert_eq!(
        reasons
            .iter()
            .filter(|reason| **reason == "drained")
            .count(),
        3,
        "each old replica drained: {reasons:?}"
    );
}

#[test]
fn apply_prune_deletes_drained_what_the_files_no_longer_name_in_their_scope_and_kind() {
    let Some(rig) = DockerRig::with_rust_plugin("voodu_echo") else {
        return;
    };
    let scope = rig.scope.name.clone();
    let deployment = |name: &str| {
        format!(
            "deployment \"{scope}\" \"{name}\" {{\n  image = \"{image}\"\n  ports = [\"8084\"]\n  echo \"http\" {{}}\n}}\n",
            image = rig.image.name,
        )
    };
    let both = rig.controller.manifest(
        "both.hcl",
        &format!("{}{}", deployment("web"), deployment("api")),
    );
    rig.controller.vd(&["apply", "-f", &both]).success();
    // Another scope's workload is never pruned by this file.
    let elsewhere = rig.controller.manifest(
        "elsewhere.hcl",
        &deployment("web").replace(&format!("\"{scope}\""), &format!("\"{scope}x\"")),
    );
    rig.controller.vd(&["apply", "-f", &elsewhere]).success();
    let web_only = rig.controller.manifest("web.hcl", &deployment("web"));

    // Without --prune, nothing goes; diff --prune names what would.
    let kept = rig.controller.vd(&["apply", "-f", &web_only]).success();
    assert!(!kept.stdout.contains("pruned"), "{kept:?}");
    assert_eq!(running_containers(&rig, "api").len(), 1);
    let diff = rig.controller.vd(&["diff", "--prune", "-f", &web_only]);
    assert_eq!(diff.code, 2, "{diff:?}");
    assert!(
        diff.stdout.contains(&format!("- deployment/{scope}/api"))
            && diff.stdout.contains("0 to add, 0 to modify, 1 to prune"),
        "{diff:?}"
    );
    assert!(!diff.stdout.contains(&format!("{scope}x")), "{diff:?}");

    let pruned = rig
        .controller
        .vd(&["apply", "--prune", "-y", "-f", &web_only])
        .success();
    assert!(
        pruned
            .stdout
            .contains(&format!("deployment/{scope}/api: pruned")),
        "{pruned:?}"
    );
    let gone = rig
        .controller
        .vd(&["describe", &format!("deployment/{scope}/api")]);
    assert_eq!(gone.code, 1, "{gone:?}");
    assert!(
        rig.scope
            .containers()
            .iter()
            .all(|(name, _)| !name.starts_with(&format!("{scope}-api."))),
        "its replica is removed: {:?}",
        rig.scope.containers()
    );
    let events = rig
        .controller
        .vd(&[
            "events",
            &format!("deployment/{scope}/api"),
            "--limit",
            "100",
            "-o",
            "json",
        ])
        .success()
        .json();
    assert!(
        events["events"]
            .as_array()
            .expect("events")
            .iter()
            .any(|event| event["reason"] == "drained"),
        "drained before it went: {events}"
    );
    assert_eq!(running_containers(&rig, "web").len(), 1);
    rig.controller
        .vd(&["describe", &format!("deployment/{scope}x/web")])
        .success();
    rig.controller
        .vd(&["delete", &format!("deployment/{scope}x/web")])
        .success();
}

/// One request a webhook listener received.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(written, _)| written.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// An HTTP listener on loopback that records every request and answers
/// 500 to the first `failing_first` of them, 200 after.
fn webhook_listener(
    failing_first: usize,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
) {
    use std::io::{BufRead, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = listener.local_addr().expect("its address");
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let mut reader = std::io::BufReader::new(stream);
            let mut first = String::new();
            if reader.read_line(&mut first).is_err() {
                continue;
            }
            let mut words = first.split_whitespace();
            let (method, path) = (
                words.next().unwrap_or_default().to_owned(),
                words.next().unwrap_or_default().to_owned(),
            );
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.trim().split_once(':') {
                    headers.push((name.trim().to_owned(), value.trim().to_owned()));
                }
            }
            let length: usize = headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, value)| value.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let count = {
                let mut all = seen.lock().unwrap();
                all.push(Received {
                    method,
                    path,
                    headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                });
                all.len()
            };
            let status = if count <= failing_first {
                "500 Internal Server Error"
            } else {
                "200 OK"
            };
            let _ = reader.get_mut().write_all(
                format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            );
        }
    });
    (address, received)
}

#[test]
fn on_deploy_webhooks_fire_when_a_rollout_converges_or_fails_retried_and_never_holding_it_up() {
    let Some(rig) = DockerRig::with_rust_plugin("voodu_echo") else {
        return;
    };
    let scope = rig.scope.name.clone();
    // The first delivery is answered 500: it is tried again.
    let (hooks, received) = webhook_listener(1);
    let manifest = |image: &str| {
        format!(
            r#"deployment "{scope}" "api" {{
  image = "{image}"
  ports = ["8084"]
  echo "http" {{}}

  on_deploy {{
    success {{
      url     = "http://{hooks}/hooks/success"
      headers = {{ "X-Token" = "t0k" }}
    }}

    failure {{
      url    = "http://{hooks}/hooks/failure"
      method = "PUT"
      body   = {{ text = "{{{{scope}}}}/{{{{name}}}} revision {{{{release_id}}}} {{{{status}}}}: {{{{error}}}}" }}
    }}
  }}
}}
"#
        )
    };
    let file = rig
        .controller
        .manifest("api.hcl", &manifest(&rig.image.name));
    let applied = rig.controller.vd(&["apply", "-f", &file]).success();
    assert!(
        !applied.stderr.contains("not acted on"),
        "on_deploy is acted on now: {applied:?}"
    );
    let delivered =
        voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            let all = received.lock().unwrap().clone();
            (all.len() >= 2)
                .then_some(all.clone())
                .ok_or(format!("{all:?}"))
        });
    assert_eq!(
        delivered.len(),
        2,
        "one failed attempt, then the delivery: {delivered:?}"
    );
    let success = &delivered[1];
    assert_eq!(
        (success.method.as_str(), success.path.as_str()),
        ("POST", "/hooks/success")
    );
    assert_eq!(success.header("X-Token"), Some("t0k"));
    assert_eq!(success.header("User-Agent"), Some("voodu-deploy-webhook"));
    assert_eq!(success.header("Content-Type"), Some("application/json"));
    let payload: Value = serde_json::from_str(&success.body).expect("JSON");
    assert_eq!(payload["kind"], "deployment");
    assert_eq!(payload["scope"], scope.as_str());
    assert_eq!(payload["name"], "api");
    assert_eq!(payload["release_id"], "1");
    assert_eq!(payload["image"], rig.image.name.as_str());
    assert_eq!(payload["status"], "success");
    assert_eq!(payload["error"], "");

    // A revision whose image no engine has fails its rollout: the failure
    // target hears of it, its body's fields filled in.
    let file = rig
        .controller
        .manifest("api.hcl", &manifest("voodu-no-such-image:missing"));
    let failed = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(failed.code, 1, "{failed:?}");
    let failure =
        voodu_tests::wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
            let all = received.lock().unwrap().clone();
            all.iter()
                .find(|request| request.path == "/hooks/failure")
                .cloned()
                .ok_or(format!("{all:?}"))
        });
    assert_eq!(failure.method, "PUT");
    let body: Value = serde_json::from_str(&failure.body).expect("JSON");
    let text = body["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with(&format!("{scope}/api revision 2 failure: "))
            && text.contains("voodu-no-such-image"),
        "{body}"
    );
    // Each delivery is an event naming the target without its path.
    let events = rig
        .controller
        .vd(&[
            "events",
            &format!("deployment/{scope}/api"),
            "--limit",
            "100",
            "-o",
            "json",
        ])
        .success()
        .json();
    let webhooks: Vec<String> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|event| event["reason"] == "webhook")
        .filter_map(|event| event["message"].as_str().map(str::to_owned))
        .collect();
    assert!(
        webhooks.iter().any(|message| message
            == &format!(
                "on_deploy success webhook to http://{hooks}: answered 200 (attempt 2 of 3)"
            )),
        "{webhooks:?}"
    );
    assert!(
        webhooks.iter().all(|message| !message.contains("/hooks/")),
        "{webhooks:?}"
    );
}

#[test]
fn a_build_block_is_built_from_the_context_vd_apply_sends_tagged_by_its_content_and_reused_when_unchanged(
) {
    let Some(rig) = DockerRig::with_rust_plugin("voodu_echo") else {
        return;
    };
    let scope = rig.scope.name.clone();
    let app = rig.controller.root().join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(
        app.join("Dockerfile"),
        format!("FROM {}\nCOPY hello.txt /hello.txt\n", rig.image.name),
    )
    .unwrap();
    std::fs::write(app.join("hello.txt"), "one").unwrap();
    std::fs::write(app.join(".dockerignore"), "*.log\n").unwrap();
    std::fs::write(app.join("noise.log"), "left out").unwrap();
    let file = rig.controller.manifest(
        "web.hcl",
        &format!(
            "deployment \"{scope}\" \"web\" {{\n  build {{\n    context = \"./app\"\n  }}\n  ports = [\"8084\"]\n  echo \"http\" {{}}\n}}\n"
        ),
    );
    let image_of = |rig: &DockerRig| {
        let replica = running_containers(rig, "web").remove(0);
        inspect(&replica)["Config"]["Image"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let built = rig.controller.vd(&["apply", "-f", &file]).success();
    assert!(
        built
            .stderr
            .contains(&format!("building voodu/{scope}-web:")),
        "{built:?}"
    );
    let first = image_of(&rig);
    assert!(first.starts_with(&format!("voodu/{scope}-web:")), "{first}");
    let described = rig.describe_json("deployment", "web");
    assert_eq!(
        described["core_spec"]["image"],
        first.as_str(),
        "{described}"
    );
    assert_eq!(described["core_spec"]["build"]["context"], "./app");
    let digest = described["core_spec"]["build"]["digest"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(first.ends_with(&digest[..12]), "{first} {digest}");

    // Unchanged (a touched file with the same bytes, an ignored file
    // changed): the same image, no replica replaced.
    std::fs::write(app.join("hello.txt"), "one").unwrap();
    std::fs::write(app.join("noise.log"), "more noise").unwrap();
    let replicas = running_containers(&rig, "web");
    let again = rig.controller.vd(&["apply", "-f", &file]).success();
    assert!(again.stdout.contains("unchanged (revision 1"), "{again:?}");
    assert!(again.stderr.contains("is built already"), "{again:?}");
    assert_eq!(running_containers(&rig, "web"), replicas);

    // A changed file: a new image, and the replicas roll to it.
    std::fs::write(app.join("hello.txt"), "two").unwrap();
    let diff = rig.controller.vd(&["diff", "-f", &file]);
    assert_eq!(diff.code, 2, "{diff:?}");
    rig.controller.vd(&["apply", "-f", &file]).success();
    let second = image_of(&rig);
    assert_ne!(second, first);
    assert!(
        second.starts_with(&format!("voodu/{scope}-web:")),
        "{second}"
    );

    // A build that fails fails the apply with the build's own words, and
    // stores nothing.
    std::fs::write(
        app.join("Dockerfile"),
        format!("FROM {}\nCOPY missing.txt /missing.txt\n", rig.image.name),
    )
    .unwrap();
    let failed = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(failed.code, 1, "{failed:?}");
    assert!(
        failed.stderr.contains(&format!(
            "deployment/{scope}/web: build: the build of voodu/{scope}-web:"
        )) && failed.stderr.contains("missing.txt"),
        "{failed:?}"
    );
    assert!(failed.stderr.contains("nothing was stored"), "{failed:?}");
    assert_eq!(rig.describe_json("deployment", "web")["revision"], 2);
    assert_eq!(image_of(&rig), second);

    // A context without a Dockerfile, nor a language's marker files, is
    // refused, naming both ways out.
    std::fs::remove_file(app.join("Dockerfile")).unwrap();
    let no_dockerfile = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(no_dockerfile.code, 1, "{no_dockerfile:?}");
    assert!(
        no_dockerfile.stderr.contains(
            "the context \"./app\" has no Dockerfile, and no file voodu finds a language by (go.mod"
        ),
        "{no_dockerfile:?}"
    );
    rig.controller
        .vd(&["delete", &format!("deployment/{scope}/web")])
        .success();
    for image in [first, second] {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", &image])
            .output();
    }
}

/// A stand-in for a Go toolchain image where no registry is reachable:
/// busybox's tools, and a `go` whose `build -o OUT PACKAGE` copies the
/// binary the package directory holds (`app.bin`) to `OUT`; removed on
/// drop.
struct FakeGoImage(engine::ToolImage);

impl FakeGoImage {
    fn import() -> FakeGoImage {
        let go = r#"#!/bin/sh
case "$1" in
  mod) echo "fake go: mod $2"; exit 0 ;;
  build)
    shift
    out=app
    package=.
    while [ $# -gt 0 ]; do
      case "$1" in
        -o) out="$2"; shift 2 ;;
        -*) shift ;;
        *) package="$1"; shift ;;
      esac
    done
    mkdir -p "$(dirname "$out")"
    cp "$package/app.bin" "$out"
    echo "fake go: built $package into $out" ;;
  *) echo "fake go: $*" >&2; exit 2 ;;
esac
"#;
        FakeGoImage(engine::ToolImage::import(&[("usr/local/bin/go", go)], &[]))
    }
}

/// A Go service's directory: `go.mod`, and the echo-server as what `go
/// build` of `package` gives (see [`FakeGoImage`]).
fn go_service(directory: &std::path::Path, package: &str) {
    std::fs::create_dir_all(directory).unwrap();
    std::fs::create_dir_all(directory.join(package)).unwrap();
    std::fs::write(
        directory.join("go.mod"),
        "module example.com/svc\n\ngo 1.25\n",
    )
    .unwrap();
    std::fs::copy(
        env!("VOODU_ECHO_SERVER"),
        directory.join(package).join("app.bin"),
    )
    .unwrap();
}

#[test]
fn a_context_without_a_dockerfile_is_built_by_its_language_s_handler_on_the_base_the_operator_set()
{
    if !engine::engine_available() {
        return;
    }
    let go = FakeGoImage::import();
    let bases = [
        "--build-base".to_owned(),
        "go=".to_owned() + &go.0.name,
        "--build-base".to_owned(),
        "go-runtime=scratch".to_owned(),
    ];
    let args: Vec<&str> = bases.iter().map(String::as_str).collect();
    let Some(rig) = DockerRig::start_with(
        &voodu_tests::rust_cdylib("voodu_echo").display().to_string(),
        || vd::Controller::start_with_args(true, &args),
    ) else {
        return;
    };
    let scope = rig.scope.name.clone();
    let root = rig.controller.root().to_owned();
    go_service(&root.join("named"), "cmd/api");
    go_service(&root.join("found"), "cmd/api");
    // voodu's build.mdx "Go service with path-driven build", and the same
    // with the language found from go.mod.
    let file = rig.controller.manifest(
        "go.hcl",
        &format!(
            r#"deployment "{scope}" "api" {{
  build {{
    context = "./named"
    path    = "cmd/api"
    lang {{
      name    = "go"
      version = "1.25"
    }}
  }}
  ports = ["8084"]
  echo "http" {{}}
}}

deployment "{scope}" "found" {{
  build {{
    context = "./found"
    path    = "cmd/api"
  }}
  ports = ["8084"]
}}
"#
        ),
    );
    let built = rig.controller.vd(&["apply", "-f", &file]);
    assert_eq!(built.code, 0, "{built:?}");
    assert!(
        built
            .stderr
            .contains("fake go: built ./cmd/api into /out/app"),
        "the handler's Dockerfile ran go build of the path: {built:?}"
    );
    for name in ["api", "found"] {
        let replica = running_containers(&rig, name).remove(0);
        // The built service runs: the echo-server answers with its id.
        let id = replica.rsplit('.').next().unwrap_or_default().to_owned();
        assert_eq!(http_get(&replica, "/").trim(), id, "{replica}");
        let build = &rig.describe_json("deployment", name)["core_spec"]["build"];
        assert_eq!(build["handler"], "go", "{build}");
    }
    // Unchanged: the same image, not built again.
    let again = rig.controller.vd(&["apply", "-f", &file]).success();
    assert!(again.stderr.contains("is built already"), "{again:?}");

    // voodu's empty workload: built from where vd apply runs.
    let here = root.join("here");
    go_service(&here, ".");
    std::fs::write(
        here.join("empty.hcl"),
        format!("deployment \"{scope}\" \"empty\" {{}}\n"),
    )
    .unwrap();
    let empty = std::process::Command::new(vd::vd_binary())
        .args(["apply", "-f", "empty.hcl"])
        .current_dir(&here)
        .env("VOODU_ROOT", &root)
        .output()
        .expect("vd runs");
    assert!(empty.status.success(), "{empty:?}");
    assert_eq!(running_containers(&rig, "empty").len(), 1);
    let build = &rig.describe_json("deployment", "empty")["core_spec"]["build"];
    assert_eq!(
        (&build["implied"], &build["handler"]),
        (&Value::Bool(true), &Value::from("go")),
        "{build}"
    );

    for name in ["api", "found", "empty"] {
        rig.controller
            .vd(&["delete", &format!("deployment/{scope}/{name}")])
            .success();
    }
    let _ = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "docker images -q --filter 'reference=voodu/{scope}-*' | xargs -r docker rmi -f"
            ),
        ])
        .output();
}

#[test]
fn secrets_are_sealed_at_rest_reach_the_container_and_a_key_rotation_keeps_every_env() {
    let keys = tempfile::tempdir().unwrap();
    let key = |name: &str| keys.path().join(name).display().to_string();
    let new_key = |name: &str| {
        std::process::Command::new(vd::vd_binary())
            .args(["keys", "new", "secrets", &key(name)])
            .output()
            .expect("vd keys runs")
    };
    assert!(new_key("old.key").status.success());
    let again = new_key("old.key");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("never overwritten"),
        "{again:?}"
    );
    let old = key("old.key");
    let Some(mut rig) = DockerRig::start_with(
        &voodu_tests::rust_cdylib("voodu_echo").display().to_string(),
        || vd::Controller::start_with_args(true, &["--secrets-key", &old]),
    ) else {
        return;
    };
    let scope = rig.scope.name.clone();
    let bucket = format!("{scope}/shared");
    rig.controller
        .vd(&["config", "set", &bucket, "TOKEN=hunter2-sealed", "--secret"])
        .success();
    apply(
        &rig,
        "web.hcl",
        &format!(
            "deployment \"{scope}\" \"web\" {{\n  image = \"{}\"\n  env_from = [\"shared\"]\n}}\n",
            rig.image.name
        ),
    );
    let before = running_containers(&rig, "web");
    assert_eq!(before.len(), 1);
    assert!(container_env(&before[0]).contains(&"TOKEN=hunter2-sealed".to_owned()));
    let root = rig.controller.root().to_owned();
    let on_disk = || -> String {
        ["state.db", "state.db-wal"]
            .iter()
            .filter_map(|file| std::fs::read(root.join(file)).ok())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .collect()
    };
    assert!(
        !on_disk().contains("hunter2-sealed"),
        "the secret is sealed at rest"
    );

    // A controller without the key does not start, naming it.
    assert!(new_key("new.key").status.success());
    let new = key("new.key");
    rig.controller.stop();
    let refused = std::process::Command::new(vd::vd_binary())
        .arg("--root")
        .arg(rig.controller.root())
        .args(["controller", "--secrets-key", &new])
        .output()
        .expect("vd controller runs");
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("TOKEN is sealed under secrets key") && said.contains("--secrets-key"),
        "{said}"
    );

    // The new key first, the old one after: every secret moves to the new
    // key, and the replica keeps its env (it is not replaced).
    rig.controller
        .restart_with_args(&["--secrets-key", &new, "--secrets-key", &old]);
    let rotated = rig.controller.vd(&["config", "rotate-key"]).success();
    assert!(
        rotated.stdout.contains("sealed 1 secret(s) anew"),
        "{rotated:?}"
    );
    assert!(rotated.stdout.contains("seal nothing now"), "{rotated:?}");
    rig.controller.restart_with_args(&["--secrets-key", &new]);
    let revealed = rig
        .controller
        .vd(&["config", "get", &bucket, "TOKEN", "--reveal"])
        .success();
    assert_eq!(revealed.stdout.trim(), "hunter2-sealed");
    rig.controller
        .vd(&["rollout", "status", &format!("deployment/{scope}/web")])
        .success();
    assert_eq!(
        running_containers(&rig, "web"),
        before,
        "no replica was replaced"
    );
    assert!(!on_disk().contains("hunter2-sealed"));
}

/// The stand-in tools voodu's production stack calls in its init steps
/// and probes: `apk` installs nothing (the tools are there), `nc -z` and
/// `redis-cli ping` check that the port opens, `rabbitmq-diagnostics`
/// answers for the broker.
const STACK_TOOLS: &[(&str, &str)] = &[
    ("usr/local/bin/apk", "#!/bin/sh\nexit 0\n"),
    (
        "usr/local/bin/nc",
        "#!/bin/sh\n[ \"$1\" = -z ] && shift\nexec /echo-server tcp-check \"$1\" \"$2\"\n",
    ),
    (
        "usr/local/bin/redis-cli",
        "#!/bin/sh\nhost=127.0.0.1\nport=6379\nwhile [ $# -gt 0 ]; do\n  case \"$1\" in\n    -h) host=\"$2\"; shift 2 ;;\n    -p) port=\"$2\"; shift 2 ;;\n    *) shift ;;\n  esac\ndone\n/echo-server tcp-check \"$host\" \"$port\" && echo PONG\n",
    ),
    ("usr/local/bin/rabbitmq-diagnostics", "#!/bin/sh\nexit 0\n"),
];

/// voodu's production stack (its `examples/fsw-esl`, the capstone of its
/// example pages), run end to end on the engine with only its images
/// changed: redis, rabbitmq (a statefulset with a claim, startup,
/// liveness and readiness probes), and five Go services built from one
/// context with a `SERVICE` build argument, whose init steps wait for
/// redis, rabbitmq and each other by their voodu DNS names, with probes,
/// limits, `env_from` and `on_deploy` from a shared bucket. The `redis`
/// macro, which this voodu leaves out, is written as the statefulset its
/// refusal names. Every workload converges, serving and ready, and an
/// apply again changes nothing.
#[test]
fn voodu_s_production_stack_runs_end_to_end_with_only_its_images_changed() {
    if !engine::engine_available() {
        return;
    }
    // The stack's scope is its own, `fsw`: whatever a run before left is
    // removed first, and everything at the end.
    drop(engine::Scope {
        name: "fsw".to_owned(),
    });
    let _stack = engine::Scope {
        name: "fsw".to_owned(),
    };
    let tools = engine::ToolImage::import(STACK_TOOLS, &[]);
    let redis =
        engine::ToolImage::import(STACK_TOOLS, &["ENV PORT=6379", "CMD [\"/echo-server\"]"]);
    let rabbitmq =
        engine::ToolImage::import(STACK_TOOLS, &["ENV PORT=5672", "CMD [\"/echo-server\"]"]);
    let controller = vd::Controller::start_with_docker();
    let root = controller.root().to_owned();
    // The services' shared context: each listens where its manifest's
    // probes look (api 9092, adapter 8080, controller 9091).
    let esl = root.join("stack/apps/esl");
    std::fs::create_dir_all(&esl).unwrap();
    std::fs::write(
        esl.join("Dockerfile"),
        format!(
            "FROM {}\nARG SERVICE\nENV SERVICE=$SERVICE\nCOPY start.sh /start.sh\nCMD [\"/bin/sh\", \"/start.sh\"]\n",
            tools.name
        ),
    )
    .unwrap();
    std::fs::write(
        esl.join("start.sh"),
        "case \"$SERVICE\" in\n  api) PORT=9092 ;;\n  adapter) PORT=8080 ;;\n  controller) PORT=9091 ;;\n  *) PORT=8000 ;;\nesac\nexport PORT\nexec /echo-server\n",
    )
    .unwrap();
    let examples =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/voodu-examples/fsw-esl");
    for file in [
        "redis",
        "rabbitmq",
        "api",
        "adapter",
        "controller",
        "events",
        "jobs",
    ] {
        let written = std::fs::read_to_string(examples.join(format!("{file}.hcl"))).unwrap();
        let text = written
            .replace(
                "image = \"redis:8\"",
                &format!("image = \"{}\"", redis.name),
            )
            .replace(
                "image   = \"redis:8\"",
                &format!("image   = \"{}\"", tools.name),
            )
            .replace(
                "\"rabbitmq:3-management\"",
                &format!("\"{}\"", rabbitmq.name),
            )
            .replace("\"alpine:latest\"", &format!("\"{}\"", tools.name))
            // The macro this voodu leaves out, as its refusal says to write it.
            .replace(
                "redis \"fsw\" \"redis\" {",
                "statefulset \"fsw\" \"redis\" {",
            );
        controller.manifest(&format!("stack/{file}.hcl"), &text);
    }
    controller
        .vd(&[
            "config",
            "set",
            "fsw/shared",
            "SLACK_WEBHOOK_URL=http://127.0.0.1:9/slack",
            "PD_ROUTING_KEY=test-key",
        ])
        .success();
    // `./apps/esl` is relative to where vd apply runs, as in voodu.
    let applied = std::process::Command::new(vd::vd_binary())
        .args(["apply", "-f", ".", "--timeout", "240s"])
        .env("VOODU_ROOT", &root)
        .env("NO_COLOR", "1")
        .current_dir(root.join("stack"))
        .output()
        .expect("vd runs");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&applied.stdout),
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(
        applied.status.success(),
        "{said}\n{}",
        controller.log_text()
    );
    let pods = controller
        .vd(&["get", "pods", "-o", "json"])
        .success()
        .json();
    let mut running: Vec<String> = pods["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|replica| replica["state"] == "running")
        .map(|replica| {
            replica["workload"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    running.sort();
    running.dedup();
    assert_eq!(
        running,
        [
            "adapter",
            "api",
            "controller",
            "events",
            "jobs",
            "rabbitmq",
            "redis"
        ],
        "{pods}"
    );
    // The controller's init step waited for every dependency by name, and
    // finished.
    let events = controller
        .vd(&["events", "deployment/fsw/controller", "--limit", "200"])
        .success();
    assert!(events.stdout.contains("wait-deps"), "{}", events.stdout);
    // Applied again: nothing to change.
    let again = std::process::Command::new(vd::vd_binary())
        .args(["diff", "-f", "."])
        .env("VOODU_ROOT", &root)
        .env("NO_COLOR", "1")
        .current_dir(root.join("stack"))
        .output()
        .expect("vd runs");
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    for workload in [
        "deployment/fsw/api",
        "deployment/fsw/adapter",
        "deployment/fsw/controller",
        "deployment/fsw/events",
        "deployment/fsw/jobs",
        "statefulset/fsw/rabbitmq",
        "statefulset/fsw/redis",
    ] {
        controller.vd(&["delete", workload]).success();
    }
    let _ = std::process::Command::new("docker")
        .args(["volume", "rm", "-f", "voodu-fsw-rabbitmq-data-0"])
        .output();
}
