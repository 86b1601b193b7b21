//! `docker_options`: voodu's raw `docker run` flags, read with clap into
//! the [`DockerOptions`] this voodu passes to the engine. voodu appends
//! them to a `docker run` command line; this voodu talks to the engine's
//! API, so it takes the flags that API can express, refuses the flags
//! voodu manages itself (naming the attribute to use instead), and refuses
//! any other flag by name with the reason.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;
use voodu_model::container::DockerOptions;
use voodu_model::resources::docker_size;

/// The `docker run` flags this voodu passes to the engine.
#[derive(Debug, Parser)]
#[command(
    name = "docker_options",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct DockerRunFlags {
    #[arg(long = "shm-size")]
    shm_size: Option<String>,
    #[arg(long = "pids-limit", allow_hyphen_values = true)]
    pids_limit: Option<i64>,
    #[arg(long = "sysctl")]
    sysctl: Vec<String>,
    #[arg(long = "device")]
    device: Vec<String>,
    #[arg(long = "privileged")]
    privileged: bool,
    #[arg(long = "cap-drop")]
    cap_drop: Vec<String>,
    #[arg(long = "security-opt")]
    security_opt: Vec<String>,
    #[arg(long = "tmpfs")]
    tmpfs: Vec<String>,
    #[arg(long = "init")]
    init: bool,
    #[arg(long = "read-only")]
    read_only: bool,
    #[arg(long = "user", short = 'u')]
    user: Option<String>,
    #[arg(long = "workdir", short = 'w')]
    workdir: Option<String>,
    #[arg(long = "hostname", short = 'h')]
    hostname: Option<String>,
    #[arg(long = "dns")]
    dns: Vec<String>,
    #[arg(long = "dns-search")]
    dns_search: Vec<String>,
    #[arg(long = "group-add")]
    group_add: Vec<String>,
    #[arg(long = "stop-signal")]
    stop_signal: Option<String>,
    #[arg(long = "oom-score-adj", allow_hyphen_values = true)]
    oom_score_adj: Option<i64>,
    #[arg(long = "ipc")]
    ipc: Option<String>,
    #[arg(long = "cpu-shares")]
    cpu_shares: Option<i64>,
    #[arg(long = "cpuset-cpus")]
    cpuset_cpus: Option<String>,
}

/// The flags voodu manages itself, and the attribute that sets each.
const MANAGED: &[(&str, &str)] = &[
    (
        "--name",
        "the container name, which voodu sets (<scope>-<name>.<replica>)",
    ),
    ("--network", "networks = [...] or network_mode"),
    ("--net", "networks = [...] or network_mode"),
    ("--restart", "restart"),
    ("--env-file", "env_file = [...]"),
    ("--env", "env = { ... }"),
    ("-e", "env = { ... }"),
    ("--cpus", "resources { limits { cpu } }"),
    ("--memory", "resources { limits { memory } }"),
    ("-m", "resources { limits { memory } }"),
    ("--ulimit", "ulimits = { ... }"),
    ("--label", "the labels, which voodu sets"),
    ("-l", "the labels, which voodu sets"),
    ("--add-host", "extra_hosts = [...]"),
    ("--cap-add", "cap_add = [...]"),
    ("--log-opt", "logs { max_size max_files }"),
    ("--log-driver", "logs { max_size max_files }"),
    ("--publish", "ports = [...]"),
    ("-p", "ports = [...]"),
    ("--volume", "volumes = [...]"),
    ("-v", "volumes = [...]"),
];

/// The flags [`DockerRunFlags`] takes, for messages.
const TAKEN: &str = "--shm-size, --pids-limit, --sysctl, --device, --privileged, --cap-drop, --security-opt, --tmpfs, --init, --read-only, --user, --workdir, --hostname, --dns, --dns-search, --group-add, --stop-signal, --oom-score-adj, --ipc, --cpu-shares, --cpuset-cpus";

/// Reads `docker_options` into what this voodu passes to the engine. The
/// error names the flag and what to do.
pub fn parse_docker_options(options: &[String]) -> Result<DockerOptions, String> {
    for option in options {
        let flag = option.split('=').next().unwrap_or_default();
        if let Some((_, instead)) = MANAGED.iter().find(|(managed, _)| *managed == flag) {
            return Err(format!(
                "docker_options: {flag} is managed by voodu — set it with {instead}"
            ));
        }
    }
    let flags = DockerRunFlags::try_parse_from(options).map_err(|error| {
        let named = |kind| match error.get(kind) {
            Some(ContextValue::String(flag)) => Some(flag.clone()),
            _ => None,
        };
        match error.kind() {
            ErrorKind::UnknownArgument => format!(
                "docker_options: {} is not passed to the engine by this voodu (it talks to the engine's API, which takes {TAKEN}) — remove it, or run the container another way",
                named(ContextKind::InvalidArg).unwrap_or_else(|| "a flag".to_owned())
            ),
            _ => format!(
                "docker_options: {} — write each flag as \"--flag=value\", such as \"--shm-size=64m\"",
                error.render().to_string().lines().next().unwrap_or_default().trim_start_matches("error: ")
            ),
        }
    })?;
    let shm_size = match flags.shm_size {
        None => None,
        Some(size) => Some(docker_size(&size).ok_or_else(|| {
            format!("docker_options: --shm-size={size} is not a size — write --shm-size=64m")
        })?),
    };
    let mut sysctls = std::collections::BTreeMap::new();
    for sysctl in flags.sysctl {
        let (key, value) = sysctl.split_once('=').ok_or_else(|| {
            format!("docker_options: --sysctl={sysctl} is not KEY=VALUE — write --sysctl=net.core.somaxconn=4096")
        })?;
        sysctls.insert(key.to_owned(), value.to_owned());
    }
    let tmpfs = flags
        .tmpfs
        .into_iter()
        .map(|mount| match mount.split_once(':') {
            Some((path, options)) => (path.to_owned(), options.to_owned()),
            None => (mount, String::new()),
        })
        .collect();
    Ok(DockerOptions {
        shm_size,
        pids_limit: flags.pids_limit,
        sysctls,
        devices: flags.device,
        privileged: flags.privileged,
        cap_drop: flags.cap_drop,
        security_opt: flags.security_opt,
        tmpfs,
        init: flags.init,
        read_only: flags.read_only,
        user: flags.user,
        workdir: flags.workdir,
        hostname: flags.hostname,
        dns: flags.dns,
        dns_search: flags.dns_search,
        group_add: flags.group_add,
        stop_signal: flags.stop_signal,
        oom_score_adj: flags.oom_score_adj,
        ipc: flags.ipc,
        cpu_shares: flags.cpu_shares,
        cpuset_cpus: flags.cpuset_cpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(options: &[&str]) -> Result<DockerOptions, String> {
        let options: Vec<String> = options.iter().map(|option| option.to_string()).collect();
        parse_docker_options(&options)
    }

    #[test]
    fn voodus_documented_examples_read_into_engine_options() {
        let options = parse(&[
            "--shm-size=2g",
            "--sysctl=net.core.somaxconn=4096",
            "--sysctl=net.ipv4.tcp_keepalive_time=60",
            "--pids-limit=4096",
        ])
        .unwrap();
        assert_eq!(options.shm_size, Some(2 << 30));
        assert_eq!(options.pids_limit, Some(4096));
        assert_eq!(options.sysctls["net.core.somaxconn"], "4096");
        assert_eq!(options.sysctls.len(), 2);
        let options = parse(&[
            "--device=/dev/snd",
            "--privileged",
            "--tmpfs",
            "/run:size=64m",
        ])
        .unwrap();
        assert_eq!(options.devices, ["/dev/snd"]);
        assert!(options.privileged);
        assert_eq!(options.tmpfs["/run"], "size=64m");
    }

    #[test]
    fn managed_and_unknown_flags_are_refused_by_name() {
        assert_eq!(
            parse(&["--memory=1g"]).unwrap_err(),
            "docker_options: --memory is managed by voodu — set it with resources { limits { memory } }"
        );
        assert!(parse(&["--ulimit", "nofile=1"])
            .unwrap_err()
            .contains("set it with ulimits"));
        let error = parse(&["--gpus=all"]).unwrap_err();
        assert!(
            error.starts_with("docker_options: --gpus is not passed to the engine by this voodu"),
            "{error}"
        );
        let error = parse(&["--shm-size=lots"]).unwrap_err();
        assert!(error.contains("is not a size"), "{error}");
        assert!(parse(&["--sysctl=novalue"])
            .unwrap_err()
            .contains("KEY=VALUE"));
    }
}
