//! voodu's own documented examples, page by page, written into the test
//! as text, each parsed as `vd apply` parses it: every attribute and block
//! voodu documents for `deployment` and `statefulset` reads with voodu's
//! spelling, types and defaults, and what voodu refuses is refused here
//! too, with the reason. (The engine side of each is in
//! `manifest_language_docker.rs` and `probes_docker.rs`.)

use std::collections::BTreeMap;
use std::time::Duration;

use voodu_manifest::{parse_manifest_with, ParseOptions};
use voodu_model::container::NetworkMode;
use voodu_model::probes::Check;
use voodu_model::{CoreSpec, Diagnostic};

/// What parsing an example must give.
enum Expect {
    /// It parses; the check looks at the core spec.
    Parses(fn(&CoreSpec)),
    /// It is refused, with a message holding this.
    Refused(&'static str),
}

struct Example {
    page: &'static str,
    text: &'static str,
    expect: Expect,
}

fn parse(text: &str) -> (Vec<CoreSpec>, Vec<Diagnostic>) {
    let env_files = BTreeMap::from([(
        "./.env".to_owned(),
        "DATABASE_URL=postgres://db/app\nPORT=1\n".to_owned(),
    )]);
    let variables = BTreeMap::from([
        ("VERSION".to_owned(), "1.7".to_owned()),
        ("PG_PASSWORD".to_owned(), "secret".to_owned()),
        (
            "SLACK_WEBHOOK_URL".to_owned(),
            "https://hooks.slack.com/x".to_owned(),
        ),
        ("PD_ROUTING_KEY".to_owned(), "key".to_owned()),
        ("PROBE_TOKEN".to_owned(), "token".to_owned()),
    ]);
    let parsed = parse_manifest_with(
        "voodu.hcl",
        text,
        ParseOptions {
            variables: &variables,
            env_files: &env_files,
            ..ParseOptions::default()
        },
    );
    (
        parsed
            .workloads
            .into_iter()
            .map(|workload| workload.core)
            .collect(),
        parsed.diagnostics,
    )
}

const EXAMPLES: &[Example] = &[
    Example {
        page: "deployment: image + env + ports",
        text: r#"deployment "prod" "api" {
  image    = "ghcr.io/myorg/api:1.7"
  replicas = 3

  env = {
    PORT     = "8080"
    NODE_ENV = "production"
  }

  ports = ["8080"]
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(core.replicas, 3);
            assert_eq!(core.env["NODE_ENV"], "production");
            assert_eq!(core.ports[0].to_string(), "8080");
            assert_eq!(core.restart_policy().as_str(), "unless-stopped");
            assert_eq!(core.releases_kept(), 5);
        }),
    },
    Example {
        page: "deployment: synopsis attributes",
        text: r#"deployment "prod" "api" {
  image         = "ghcr.io/myorg/api:1.7"
  replicas      = 3
  command       = ["bin/server"]
  env           = { PORT = "8080" }
  env_file      = ["./.env"]
  ports         = ["8080"]
  volumes       = ["/host/path:/in/container:ro"]
  networks      = ["voodu0"]
  network_mode  = ""
  restart       = "unless-stopped"
  health_check  = "/healthz"
  post_deploy   = ["bin/notify"]
  keep_releases = 5
  extra_hosts   = ["legacy.internal:10.0.0.5"]
  cap_add       = ["NET_ADMIN"]

  ulimits = {
    nofile = "1048576:1048576"
  }
  docker_options = ["--shm-size=64m"]
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(core.command, ["bin/server"]);
            assert_eq!(core.env["PORT"], "8080", "env wins over env_file");
            assert_eq!(core.env["DATABASE_URL"], "postgres://db/app");
            assert_eq!(core.keep_releases, Some(5));
            assert_eq!(core.shape.extra_hosts, ["legacy.internal:10.0.0.5"]);
            assert_eq!(core.shape.cap_add, ["NET_ADMIN"]);
            assert_eq!(core.shape.ulimits["nofile"].hard, 1048576);
            assert_eq!(core.shape.docker_options.shm_size, Some(64 << 20));
            assert_eq!(core.shape.network_mode, None);
            assert_eq!(core.blocks_not_acted_on(), ["health_check", "post_deploy"]);
        }),
    },
    Example {
        page: "deployment: pinned to host network",
        text: r#"deployment "infra" "node-exporter" {
  image        = "prom/node-exporter:latest"
  network_mode = "host"
  # No `ports` — host networking exposes the port directly.
}"#,
        expect: Expect::Parses(|core| assert_eq!(core.shape.network_mode, Some(NetworkMode::Host))),
    },
    Example {
        page: "deployment: network_mode with networks is refused",
        text: r#"deployment "infra" "x" {
  image        = "x:1"
  network_mode = "host"
  networks     = ["backend"]
}"#,
        expect: Expect::Refused("cannot be set with it"),
    },
    Example {
        page: "deployment: raw docker pass-through",
        text: r#"deployment "prod" "search" {
  image = "ghcr.io/myorg/search:1.0"

  ulimits = {
    nofile  = "1048576:1048576"   # huge file table for hot connections
    memlock = "-1"                 # lock RSS so the index doesn't swap
  }

  docker_options = [
    "--shm-size=2g",
    "--sysctl=net.core.somaxconn=4096",
    "--sysctl=net.ipv4.tcp_keepalive_time=60",
    "--pids-limit=4096",
  ]
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(core.shape.ulimits["memlock"].soft, -1);
            let options = &core.shape.docker_options;
            assert_eq!(options.shm_size, Some(2 << 30));
            assert_eq!(options.sysctls.len(), 2);
            assert_eq!(options.pids_limit, Some(4096));
        }),
    },
    Example {
        page: "deployment: public exposure",
        text: r#"deployment "prod" "edge" {
  image = "ghcr.io/myorg/edge:1.0"
  ports = ["0.0.0.0:8080:8080"]   # bind on all interfaces
}"#,
        expect: Expect::Parses(|core| assert_eq!(core.ports[0].to_string(), "0.0.0.0:8080:8080")),
    },
    Example {
        page: "deployment: minimal, build at repo root",
        text: r#"deployment "prod" "api" {}"#,
        expect: Expect::Parses(|core| {
            let build = core.build.as_ref().expect("voodu builds `.`");
            assert!(build.implied && build.context == ".", "{build:?}");
        }),
    },
    Example {
        page: "deployment: image and build both set",
        text: r#"deployment "prod" "api" {
  image = "a:1"
  build {
    context    = "."
    dockerfile = "Dockerfile"
  }
}"#,
        expect: Expect::Refused("image and build are both set"),
    },
    Example {
        page: "statefulset: single-node postgres",
        text: r#"statefulset "data" "pg" {
  image    = "postgres:16"
  replicas = 1
  ports    = ["5432"]

  env = {
    POSTGRES_DB       = "myapp"
    POSTGRES_PASSWORD = "${PG_PASSWORD}"
  }

  volume_claim "data" {
    mount_path = "/var/lib/postgresql/data"
  }

  probes {
    readiness {
      exec { command = ["pg_isready"] }
      period = "5s"
    }
  }
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(core.env["POSTGRES_PASSWORD"], "secret");
            assert_eq!(
                core.shape.volume_claims["data"].mount_path,
                "/var/lib/postgresql/data"
            );
            let readiness = core.probes.readiness.as_ref().unwrap();
            assert_eq!(
                readiness.check,
                Check::Exec {
                    command: vec!["pg_isready".into()]
                }
            );
            assert_eq!(readiness.period, Duration::from_secs(5));
        }),
    },
    Example {
        page: "statefulset: kafka with per-pod data and ordinal-driven config",
        text: r#"statefulset "infra" "kafka" {
  image    = "bitnami/kafka:3.7"
  replicas = 3
  ports    = ["9092"]

  env = {
    KAFKA_CFG_NODE_ID                  = "${VOODU_REPLICA_ORDINAL}"
    KAFKA_CFG_PROCESS_ROLES            = "controller,broker"
    KAFKA_CFG_CONTROLLER_QUORUM_VOTERS = "0@kafka-0.infra:9093,1@kafka-1.infra:9093,2@kafka-2.infra:9093"
  }

  volume_claim "data" {
    mount_path = "/bitnami/kafka"
    size       = "50Gi"
  }
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(
                core.env["KAFKA_CFG_NODE_ID"], "${VOODU_REPLICA_ORDINAL}",
                "filled per replica"
            );
            assert_eq!(
                core.shape.volume_claims["data"].size.as_deref(),
                Some("50Gi")
            );
        }),
    },
    Example {
        page: "statefulset: multi-claim",
        text: r#"statefulset "data" "pg" {
  image = "postgres:16"

  volume_claim "data" {
    mount_path = "/var/lib/postgresql/data"
  }

  volume_claim "wal-archive" {
    mount_path = "/pg-archive"
  }
}"#,
        expect: Expect::Parses(|core| assert_eq!(core.shape.volume_claims.len(), 2)),
    },
    Example {
        page: "statefulset: a claim needs mount_path",
        text: r#"statefulset "data" "pg" {
  image = "postgres:16"
  volume_claim "data" {
    size = "1Gi"
  }
}"#,
        expect: Expect::Refused("has no mount_path"),
    },
    Example {
        page: "probes: HTTP service with all three probes",
        text: r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:1.7"
  ports = ["8080"]

  probes {
    startup {
      http_get {
        path = "/health"
        port = 8080
      }
      period            = "2s"
      failure_threshold = 30   # 60s budget before declared dead
    }

    liveness {
      http_get {
        path = "/health"
        port = 8080
      }
      period            = "10s"
      failure_threshold = 3
    }

    readiness {
      http_get {
        path = "/ready"
        port = 8080
      }
      period            = "5s"
      failure_threshold = 1
      success_threshold = 2
    }
  }
}"#,
        expect: Expect::Parses(|core| {
            let startup = core.probes.startup.as_ref().unwrap();
            assert_eq!(startup.failure_threshold, 30);
            assert_eq!(startup.timeout, Duration::from_secs(1), "voodu's default");
            assert_eq!(core.probes.readiness.as_ref().unwrap().success_threshold, 2);
            assert_eq!(
                core.probes.liveness.as_ref().unwrap().period,
                Duration::from_secs(10)
            );
        }),
    },
    Example {
        page: "probes: stateful service with TCP probe",
        text: r#"statefulset "data" "pg" {
  image = "postgres:16"
  ports = ["5432"]

  probes {
    startup {
      tcp_socket { port = 5432 }
      period            = "2s"
      failure_threshold = 30
    }

    readiness {
      exec { command = ["pg_isready", "-U", "postgres"] }
      period            = "5s"
      failure_threshold = 1
      success_threshold = 2
    }
  }

  volume_claim "data" { mount_path = "/var/lib/postgresql/data" }
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(
                core.probes.startup.as_ref().unwrap().check,
                Check::TcpSocket { port: 5432 }
            );
        }),
    },
    Example {
        page: "probes: HTTPS probe with custom header",
        text: r#"deployment "prod" "api" {
  image = "a:1"
  probes {
    liveness {
      http_get {
        path   = "/-/live"
        port   = 8443
        scheme = "https"

        http_headers = {
          "Authorization" = "Bearer ${PROBE_TOKEN}"
        }
      }
      period = "10s"
    }
  }
}"#,
        expect: Expect::Parses(|core| {
            let Check::HttpGet {
                scheme,
                http_headers,
                port,
                ..
            } = &core.probes.liveness.as_ref().unwrap().check
            else {
                panic!("an http_get probe");
            };
            assert_eq!(*scheme, voodu_model::probes::Scheme::Https);
            assert_eq!(*port, 8443);
            assert_eq!(http_headers["Authorization"], "Bearer token");
        }),
    },
    Example {
        page: "probes: zero selectors",
        text: r#"deployment "prod" "api" {
  image = "a:1"
  probes {
    readiness {
      period = "5s"
    }
  }
}"#,
        expect: Expect::Refused("no selector"),
    },
    Example {
        page: "resources: heavy worker",
        text: r#"deployment "prod" "worker" {
  image   = "ghcr.io/myorg/worker:1.7"
  command = ["bin/worker"]

  resources {
    limits {
      cpu    = "1"
      memory = "8Gi"
    }
  }
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(core.resources.memory_bytes, Some(8 << 30));
            assert_eq!(core.resources.nano_cpus, Some(1_000_000_000));
        }),
    },
    Example {
        page: "resources: per-init caps",
        text: r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:1.7"

  resources {
    limits { cpu = "1" memory = "512Mi" }   # parent
  }

  init "warmup" {
    command = ["bin/warmup"]

    resources {
      limits { cpu = "2" memory = "2Gi" }   # explicit caps for the one-shot
    }
  }
}"#,
        expect: Expect::Refused("a block written on one line holds one attribute"),
    },
    Example {
        page: "logs: chatty service",
        text: r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:1.7"

  logs {
    max_size  = "100m"
    max_files = 5
  }
}"#,
        expect: Expect::Parses(|core| {
            let logs = core.shape.logs.as_ref().unwrap();
            assert_eq!((logs.max_size.as_str(), logs.max_files), ("100m", 5));
        }),
    },
    Example {
        page: "logs: max_files 0 falls back to 3",
        text: r#"deployment "prod" "api" {
  image = "a:1"
  logs {
    max_files = 0
  }
}"#,
        expect: Expect::Parses(|core| {
            let logs = core.shape.logs.as_ref().unwrap();
            assert_eq!((logs.max_size.as_str(), logs.max_files), ("10m", 3));
        }),
    },
    Example {
        page: "init: multi-step boot",
        text: r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:1.7"

  init "schema" {
    command = ["bin/db:create-extensions"]
    timeout = "2m"
  }

  init "migrate" {
    command = ["bin/rails", "db:migrate"]
    timeout = "10m"
    retries = 1
  }

  init "warmup" {
    command = ["bin/warmup-cache"]
    timeout = "5m"

    resources {
      limits {
        cpu    = "2"
        memory = "1Gi"
      }
    }
  }
}"#,
        expect: Expect::Parses(|core| {
            let names: Vec<&str> = core.init.iter().map(|step| step.name.as_str()).collect();
            assert_eq!(names, ["schema", "migrate", "warmup"], "declaration order");
            assert_eq!(core.init[1].retries, 1);
            assert_eq!(core.init[2].resources.memory_bytes, Some(1 << 30));
            assert!(core.blocks_not_acted_on().is_empty());
        }),
    },
    Example {
        page: "init: retries above 5",
        text: r#"deployment "prod" "api" {
  image = "a:1"
  init "migrate" {
    command = ["bin/rails", "db:migrate"]
    retries = 6
  }
}"#,
        expect: Expect::Refused("retries must be 0 to 5"),
    },
    Example {
        page: "release: preflight + migration + cache priming",
        text: r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:1.7"

  release {
    pre_command  = ["bin/preflight-check"]
    command      = ["bin/db:migrate"]
    post_command = ["bin/cache:warm"]
    timeout      = "15m"
  }
}"#,
        expect: Expect::Parses(|core| {
            let release = core.release.as_ref().unwrap();
            assert_eq!(release.pre_command, ["bin/preflight-check"]);
            assert_eq!(release.command, ["bin/db:migrate"]);
            assert_eq!(release.post_command, ["bin/cache:warm"]);
            assert_eq!(release.timeout, Duration::from_secs(15 * 60));
            assert!(core.blocks_not_acted_on().is_empty());
        }),
    },
    Example {
        page: "autoscale: HTTP API",
        text: r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:1.7"

  autoscale {
    min           = 3
    max           = 20
    cpu_target    = 60
    cooldown_up   = "30s"
    cooldown_down = "10m"
  }
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(core.replicas, 3, "voodu seeds the replica count to min");
            assert_eq!(core.blocks_not_acted_on(), ["autoscale"]);
        }),
    },
    Example {
        page: "autoscale: min = 0 is rejected",
        text: r#"deployment "prod" "worker" {
  image   = "ghcr.io/myorg/worker:1.7"
  command = ["bin/worker"]

  autoscale {
    min           = 0           # NOTE: rejected — see trade-offs
    max           = 30
    cpu_target    = 80
    cooldown_up   = "20s"
    cooldown_down = "1m"
  }
}"#,
        expect: Expect::Refused("min must be 1 or more"),
    },
    Example {
        page: "autoscale: mutex with replicas",
        text: r#"deployment "prod" "api" {
  image    = "a:1"
  replicas = 3
  autoscale {
    min        = 3
    max        = 15
    cpu_target = 60
  }
}"#,
        expect: Expect::Refused("replicas and autoscale are both set"),
    },
    Example {
        page: "on_deploy: Slack on success, PagerDuty on failure",
        text: r#"deployment "prod" "api" {
  image = "a:1"
  on_deploy {
    success {
      url = "${SLACK_WEBHOOK_URL}"
    }
    failure {
      url    = "https://events.pagerduty.com/v2/enqueue"
      method = "POST"
      headers = {
        "X-Routing-Key" = "${PD_ROUTING_KEY}"
      }
    }
  }
}"#,
        expect: Expect::Parses(|core| {
            let on_deploy = core.on_deploy.as_ref().expect("on_deploy is read typed");
            assert_eq!(on_deploy.success[0].url, "https://hooks.slack.com/x");
            assert_eq!(on_deploy.failure[0].headers["X-Routing-Key"], "key");
        }),
    },
    Example {
        page: "on_deploy: inline body with templating",
        text: r##"deployment "prod" "api" {
  image = "a:1"
  on_deploy {
    success {
      url = "${SLACK_WEBHOOK_URL}"
      body = {
        text = "deployed {{name}} ({{release_id}}) at {{completed_at}}"
        channel = "#deploys"
      }
    }
  }
}"##,
        expect: Expect::Parses(|core| {
            let on_deploy = core.on_deploy.as_ref().expect("on_deploy is read typed");
            assert_eq!(
                on_deploy.success[0].body.as_ref().expect("a body")["text"],
                "deployed {{name}} ({{release_id}}) at {{completed_at}}",
                "fire-time templates are left as text"
            );
        }),
    },
    Example {
        page: "build: bring your own Dockerfile",
        text: r#"deployment "prod" "api" {
  build {
    context    = "."
    dockerfile = "Dockerfile.prod"
    args       = { RELEASE = "v1" }
  }
  command = ["bin/api"]
}"#,
        expect: Expect::Parses(|core| {
            let build = core.build.as_ref().expect("build is read typed");
            assert_eq!(build.dockerfile, "Dockerfile.prod");
            assert_eq!(build.args["RELEASE"], "v1");
            assert_eq!(core.image, None, "named at apply, once built");
        }),
    },
    Example {
        page: "interpolation: per-env value resolution",
        text: r#"deployment "staging" "api" {
  image = "ghcr.io/myorg/api:${VERSION}"
  env = {
    LOG_LEVEL = "${LOG_LEVEL:-debug}"
  }
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(core.image.as_deref(), Some("ghcr.io/myorg/api:1.7"));
            assert_eq!(core.env["LOG_LEVEL"], "debug");
        }),
    },
    Example {
        page: "interpolation: an asset reference stays for the controller",
        text: r#"statefulset "data" "pg" {
  image = "postgres:16"

  volumes = [
    "${asset.data.pg-config.postgresql_conf}:/etc/postgresql/postgresql.conf:ro"
  ]
}"#,
        expect: Expect::Parses(|core| {
            assert_eq!(
                core.volumes[0],
                "${asset.data.pg-config.postgresql_conf}:/etc/postgresql/postgresql.conf:ro"
            );
        }),
    },
    Example {
        page: "interpolation: unknown variable is an apply error",
        text: r#"deployment "prod" "api" {
  image = "ghcr.io/myorg/api:${NOT_SET_ANYWHERE}"
}"#,
        expect: Expect::Refused("undefined variable NOT_SET_ANYWHERE"),
    },
    Example {
        page: "ports: a UDP range",
        text: r#"deployment "voice" "rtp" {
  image = "a:1"
  ports = ["16384-32768/udp"]
}"#,
        expect: Expect::Parses(|core| assert_eq!(core.ports[0].extra_ports, 16384)),
    },
];

#[test]
fn every_documented_example_parses_or_is_refused_as_voodu_says() {
    let mut failures = Vec::new();
    for example in EXAMPLES {
        let (specs, problems) = parse(example.text);
        match &example.expect {
            Expect::Parses(check) => {
                if !problems.is_empty() {
                    failures.push(format!("{}: refused: {problems:?}", example.page));
                    continue;
                }
                if let Err(panic) = std::panic::catch_unwind(|| check(&specs[0])) {
                    let why = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                        .unwrap_or_default();
                    failures.push(format!("{}: {why}", example.page));
                }
            }
            Expect::Refused(reason) => {
                let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
                if !messages.iter().any(|message| message.contains(reason)) {
                    failures.push(format!(
                        "{}: expected a refusal holding {reason:?}, got {messages:?}",
                        example.page
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
