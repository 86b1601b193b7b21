//! `vd` from a laptop: `vd -H ssh://` and voodu's remotes reach a host's
//! controller through a real OpenSSH server (key auth only, its host key
//! checked): an apply with its progress, `logs -f` stopped with Ctrl-C,
//! `exec` with its exit code and standard input, a plugin installed from
//! the laptop's file, remotes kept in `.git/config` with `voodu` the
//! default, and a stranger's key refused by SSH with `vd` saying so.
//! On CI (`CI=true`) a missing engine or sshd fails these tests.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/engine.rs"]
mod engine;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/recorder_rig.rs"]
mod recorder_rig;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/sshd.rs"]
mod sshd;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/tmux.rs"]
mod tmux;
#[allow(dead_code)] // Each test binary uses part of the helpers.
#[path = "support/vd.rs"]
mod vd;

use engine::voodu0_ip;
use recorder_rig::{read_until, Rig};
use sshd::Sshd;
use vd::{vd_binary, Run};

/// Runs `vd ARGS` as on a laptop: in `laptop`, with no root of its own
/// (no VOODU_ROOT), ssh as `ssh_command`, `input` on standard input.
fn laptop_vd(laptop: &Path, ssh_command: &str, args: &[&str], input: Option<&str>) -> Run {
    use std::io::Write;
    let mut child = Command::new(vd_binary())
        .args(args)
        .current_dir(laptop)
        .env_remove("VOODU_ROOT")
        .env_remove("VD_HOST")
        .env("NO_COLOR", "1")
        .env("VD_SSH_COMMAND", ssh_command)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vd runs");
    let writer = input.map(|input| {
        let mut stdin = child.stdin.take().expect("stdin");
        let input = input.to_owned();
        std::thread::spawn(move || stdin.write_all(input.as_bytes()))
    });
    let output = child.wait_with_output().expect("vd ends");
    if let Some(writer) = writer {
        writer.join().expect("writer").expect("stdin written");
    }
    Run::from_output(output)
}

/// The `vd dial-stdio` processes serving `root` now.
fn dials_for(root: &Path) -> Vec<String> {
    let wanted = format!("dial-stdio\0--root\0{}", root.display());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).into_owned())
        .filter(|cmdline| cmdline.contains(&wanted))
        .collect()
}

#[test]
fn an_operator_on_a_laptop_applies_follows_logs_and_execs_over_ssh() {
    let Some(rig) = Rig::start() else { return };
    let Some(sshd) = Sshd::start(&vd_binary(), Path::new("/nonexistent")) else {
        return;
    };
    let root = rig.controller.root().to_owned();
    // The root in the URL: the host's own default root is elsewhere.
    let url = sshd.url(Some(&root));
    let ssh = sshd.ssh_command();
    let laptop = tempfile::tempdir().unwrap();
    std::fs::write(
        laptop.path().join("web.hcl"),
        format!(
            "deployment \"{}\" \"web\" {{\n  image = \"{}\"\n  ports = [\"8084\"]\n  env = {{ INIT_LOG = \"/dev/null\" }}\n}}\n",
            rig.scope.name, rig.image.name
        ),
    )
    .unwrap();

    // The manifest is read on the laptop; the rollout's progress streams
    // back through the session as it happens.
    let applied = laptop_vd(
        laptop.path(),
        &ssh,
        &["-H", &url, "apply", "-f", "web.hcl"],
        None,
    );
    assert_eq!(applied.code, 0, "{applied:?}\nsshd: {}", sshd.log());
    assert!(
        applied.stdout.contains("created (revision 1"),
        "{applied:?}"
    );
    assert!(applied.stderr.contains("started replica"), "{applied:?}");
    let containers = rig.scope.containers();
    assert_eq!(containers.len(), 1, "{containers:?}");
    let container = &containers[0].0;
    let replica = container.rsplit('.').next().unwrap().to_owned();
    // VD_HOST, as docker's DOCKER_HOST: the same host without -H.
    let pods = Command::new(vd_binary())
        .args(["get", "pods"])
        .current_dir(laptop.path())
        .env_remove("VOODU_ROOT")
        .env("NO_COLOR", "1")
        .env("VD_SSH_COMMAND", &ssh)
        .env("VD_HOST", &url)
        .output()
        .map(Run::from_output)
        .expect("vd runs");
    assert_eq!(pods.code, 0, "{pods:?}");
    assert!(pods.stdout.contains(&replica), "{pods:?}");

    // exec: what the command writes, and its exit code, come back.
    let workload = format!("deployment/{}/web", rig.scope.name);
    let exec = laptop_vd(
        laptop.path(),
        &ssh,
        &[
            "-H",
            &url,
            "exec",
            &workload,
            "--",
            "/echo-server",
            "init",
            "probe",
            "3",
        ],
        None,
    );
    assert_eq!(exec.code, 3, "{exec:?}");
    assert_eq!(
        exec.stderr, "init probe: done, exiting with 3\n",
        "{exec:?}"
    );
    // exec -i: the laptop's standard input is the command's.
    let input = "line one\nline two\n";
    let cat = laptop_vd(
        laptop.path(),
        &ssh,
        &[
            "-H",
            &url,
            "exec",
            "-i",
            &workload,
            "--",
            "/echo-server",
            "cat",
        ],
        Some(input),
    );
    assert_eq!(cat.code, 0, "{cat:?}");
    assert_eq!(
        cat.stdout, "terminal: no\ngot: line one\ngot: line two\nstdin ended\n",
        "{cat:?}"
    );

    // exec -it from a real terminal: the command gets one, keys reach it
    // through the session, Ctrl-D ends its input.
    if voodu_tests::required_on_ci("tmux", Command::new("tmux").arg("-V")) {
        let command = format!(
            "VD_SSH_COMMAND='{ssh}' {vd} -H {url} exec -it {workload} -- /echo-server cat; echo exit=$?; sleep 60",
            vd = vd_binary().display(),
        );
        let terminal =
            tmux::Terminal::start(&format!("vd-ssh-{}", rig.scope.name), &command, 90, 25);
        let within = Duration::from_secs(15);
        terminal.wait_for("terminal: yes", within, "no terminal over ssh");
        terminal.send(&["typed on the laptop", "Enter"]);
        terminal.wait_for(
            "got: typed on the laptop",
            within,
            "the keys did not reach it",
        );
        terminal.send(&["size", "Enter"]);
        terminal.wait_for("size: 90x25", within, "not this terminal's size");
        terminal.send(&["C-d"]);
        let after = terminal.wait_for("exit=", within, "vd exec -it did not end on Ctrl-D");
        assert!(
            after.contains("stdin ended") && after.contains("exit=0"),
            "{after}"
        );
    }

    // logs -f: a line the replica writes later arrives; Ctrl-C (SIGINT to
    // the terminal's process group: vd and its ssh) stops the local side,
    // and the host's end goes too.
    let mut follower = Command::new(vd_binary())
        .args(["-H", &url, "logs", "-f", &workload])
        .current_dir(laptop.path())
        .env_remove("VOODU_ROOT")
        .env("NO_COLOR", "1")
        .env("VD_SSH_COMMAND", &ssh)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("vd logs -f runs");
    let lines = voodu_tests::lines_of(follower.stdout.take().unwrap());
    let listening = format!("{replica} | echo-server {replica} listening on port 8084");
    read_until(&lines, Duration::from_secs(15), |line| line == listening);
    let say = |word: &str| {
        let ip = voodu0_ip(container);
        let mut said = std::net::TcpStream::connect((ip.as_str(), 8084)).expect("it listens");
        std::io::Write::write_all(
            &mut said,
            format!("GET /say/{word} HTTP/1.0\r\n\r\n").as_bytes(),
        )
        .expect("sent");
        let _ = std::io::Read::read_to_end(&mut said, &mut Vec::new());
    };
    say("over-ssh");
    let said = format!("{replica} | said over-ssh");
    read_until(&lines, Duration::from_secs(10), |line| line == said);
    assert_eq!(dials_for(&root).len(), 1, "one session to the host");
    // SAFETY: signalling the process group this test started.
    unsafe { libc::kill(-(follower.id() as i32), libc::SIGINT) };
    let stopped =
        voodu_tests::poll_until(Duration::from_secs(5), Duration::from_millis(20), || {
            follower.try_wait().ok().flatten().ok_or(())
        });
    if stopped.is_err() {
        let _ = follower.kill();
        panic!("vd logs -f went on after Ctrl-C");
    }
    // The controller notices the next time it writes, as locally.
    say("after-ctrl-c");
    voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let left = dials_for(&root);
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("the host's vd dial-stdio goes on: {left:?}"))
        }
    });
}

#[test]
fn remotes_live_in_git_config_and_the_voodu_remote_is_the_default() {
    if !voodu_tests::required_on_ci("git", Command::new("git").arg("--version")) {
        return;
    }
    let controller = vd::Controller::start();
    // The host's environment names the controller's root.
    let Some(sshd) = Sshd::start(&vd_binary(), controller.root()) else {
        return;
    };
    let ssh = sshd.ssh_command();
    let laptop = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let output = Command::new("git")
            .args(args)
            .current_dir(laptop.path())
            .output()
            .expect("git runs");
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let vd = |args: &[&str]| laptop_vd(laptop.path(), &ssh, args, None);

    // Outside a repository, there is nowhere to keep a remote.
    let nowhere = vd(&["remote", "add", "voodu", "root@voodu-host"]);
    assert_eq!(nowhere.code, 1, "{nowhere:?}");
    assert!(nowhere.stderr.contains("git init"), "{nowhere:?}");

    git(&["init", "-q"]);
    git(&[
        "remote",
        "add",
        "origin",
        "https://example.com/acme/app.git",
    ]);
    let key = sshd.client_key().display().to_string();
    let added = vd(&["remote", "add", "voodu", &format!("root@voodu-host:{key}")]);
    assert_eq!(added.code, 0, "{added:?}");
    assert!(added.stdout.contains("added remote voodu"), "{added:?}");
    let bare_key = vd(&["remote", "add", "prod", "root@voodu-host:key.pem"]);
    assert_eq!(bare_key.code, 1, "{bare_key:?}");
    assert!(bare_key.stderr.contains("not a key's path"), "{bare_key:?}");
    // Kept as a git remote, where git itself shows it; origin is git's.
    assert!(
        git(&["remote", "get-url", "voodu"]).trim() == format!("root@voodu-host:{key}"),
        "{}",
        git(&["remote", "-v"])
    );
    let listed = vd(&["remote", "list"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(listed.stdout.contains("voodu"), "{listed:?}");
    assert!(!listed.stdout.contains("origin"), "{listed:?}");

    // No flag: the voodu remote is the default, and the host's controller
    // answers (no controller runs at this laptop's own default root).
    let workloads = vd(&["get", "workloads"]);
    assert_eq!(workloads.code, 0, "{workloads:?}\nsshd: {}", sshd.log());
    assert!(sshd.log().contains("Accepted publickey"), "{}", sshd.log());
    // A plugin installed from the laptop's file: its bytes go along.
    let plugin = voodu_tests::rust_cdylib("voodu_echo").display().to_string();
    let installed = vd(&["-r", "voodu", "plugins:install", &plugin]);
    assert_eq!(installed.code, 0, "{installed:?}");
    let plugins = vd(&["plugins:list"]);
    assert!(plugins.stdout.contains("echo"), "{plugins:?}");
    let received = controller.root().join("received");
    assert_eq!(
        std::fs::read_dir(&received)
            .map(|entries| entries.count())
            .unwrap_or(0),
        0,
        "the sent file is removed once installed"
    );

    // A root on the host with no controller: exit 3, naming host and root.
    let elsewhere = vd(&["-r", "voodu", "--root", "/nonexistent", "get", "workloads"]);
    assert_eq!(elsewhere.code, 3, "{elsewhere:?}");
    assert!(
        elsewhere
            .stderr
            .contains("on ssh://root@voodu-host/nonexistent")
            && elsewhere
                .stderr
                .contains("no controller is running on /nonexistent"),
        "{elsewhere:?}"
    );
    let unknown = vd(&["-r", "staging", "get", "workloads"]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    assert!(
        unknown.stderr.contains("no remote \"staging\""),
        "{unknown:?}"
    );
    // The controller runs on the host itself, never through a remote.
    let here_only = vd(&["-r", "voodu", "controller"]);
    assert_eq!(here_only.code, 2, "{here_only:?}");
    assert!(
        here_only.stderr.contains("runs on this host only"),
        "{here_only:?}"
    );

    // A key the host does not know: SSH refuses it, and vd says so.
    let url = sshd.url(None);
    let stranger = laptop_vd(
        laptop.path(),
        &sshd.stranger_ssh_command(),
        &["-H", &url, "get", "workloads"],
        None,
    );
    assert_eq!(stranger.code, 1, "{stranger:?}");
    assert!(
        stranger.stderr.contains(&format!("ssh to {url} failed"))
            && stranger.stderr.contains("Permission denied"),
        "{stranger:?}"
    );

    let removed = vd(&["remote", "remove", "voodu"]);
    assert_eq!(removed.code, 0, "{removed:?}");
    let listed = vd(&["remote", "list"]);
    assert!(listed.stdout.contains("no voodu remotes"), "{listed:?}");
    let origin = vd(&["remote", "remove", "origin"]);
    assert_eq!(origin.code, 1, "{origin:?}");
    assert!(origin.stderr.contains("not a voodu one"), "{origin:?}");
}
