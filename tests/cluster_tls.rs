//! A node's way into etcd: TLS (etcd with `--client-cert-auth` and
//! `--trusted-ca-file`, certificates made here with rcgen) and etcd's user
//! auth, each on a real etcd on a host of the rig of its own, each node on
//! another (`support/hosts.rs`). A node with what etcd asks for joins; one
//! without is refused, naming what failed (the client certificate, an
//! expired one, the wrong CA, the password), never the quorum.

#[path = "support/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[path = "support/engine.rs"]
#[allow(dead_code)]
mod engine;
#[path = "support/etcd.rs"]
#[allow(dead_code)]
mod etcd;
#[path = "support/hosts.rs"]
#[allow(dead_code)]
mod hosts;
#[path = "support/vd.rs"]
#[allow(dead_code)]
mod vd;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use cluster::{stderr, vd_binary, Engine, Launch, Node};
use hosts::HostRig;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};

/// A CA and the certificates it signs, as PEM files in one directory.
struct Certificates {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Certificates {
    fn new() -> Certificates {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "voodu test CA");
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        Certificates { dir, ca, ca_key }
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The flags that put node `name` on the node-to-node channel's
    /// mutual TLS with this CA: a certificate naming it, made now.
    fn peer_flags(&self, name: &str) -> Vec<String> {
        let (cert, key) = self.issue(name, &[name], None, false);
        vec![
            "--peer-cacert".to_owned(),
            path(&self.ca()),
            "--peer-cert".to_owned(),
            path(&cert),
            "--peer-key".to_owned(),
            path(&key),
        ]
    }

    /// A certificate named `name`, for the DNS names `dns` and address
    /// `ip`, signed by the CA; `expired` makes one whose validity ended
    /// years ago. Its certificate and key files.
    fn issue(
        &self,
        name: &str,
        dns: &[&str],
        ip: Option<&str>,
        expired: bool,
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let dns: Vec<String> = dns.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(dns).unwrap();
        if let Some(ip) = ip {
            params
                .subject_alt_names
                .push(SanType::IpAddress(ip.parse().unwrap()));
        }
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let certificate = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let cert = self.dir.path().join(format!("{name}.pem"));
        let key_file = self.dir.path().join(format!("{name}-key.pem"));
        std::fs::write(&cert, certificate.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert, key_file)
    }
}

/// One etcd member on host `e1` of a rig, with `flags`, killed on drop
/// (before the rig goes).
struct Etcd {
    process: Child,
    url: String,
    _data: tempfile::TempDir,
}

impl Etcd {
    /// Starts etcd on `rig`'s host `e1`, serving clients at
    /// `scheme://ADDRESS:2379`; `None` (a skip) where etcd or etcdctl is
    /// not installed and this is not CI.
    fn start(rig: &HostRig, scheme: &str, flags: &[String]) -> Option<Etcd> {
        if !(voodu_tests::required_on_ci("etcd", Command::new("etcd").arg("--version"))
            && voodu_tests::required_on_ci("etcdctl", Command::new("etcdctl").arg("version")))
        {
            return None;
        }
        let data = tempfile::tempdir().unwrap();
        let address = rig.address("e1");
        let url = format!("{scheme}://{address}:2379");
        let peer_url = format!("http://{address}:2380");
        let wrap = rig.wrap("e1");
        let process = Command::new(&wrap[0])
            .args(&wrap[1..])
            .args(["etcd", "--name", "m0", "--data-dir"])
            .arg(data.path())
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .arg(format!("--initial-cluster=m0={peer_url}"))
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        Some(Etcd {
            process,
            url,
            _data: data,
        })
    }

    /// `etcdctl ARGS` against it, with `auth` flags (certificates, user);
    /// its output once it succeeds, within 20 s.
    fn ctl(&self, auth: &[String], args: &[&str]) -> String {
        voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
            let output = Command::new("etcdctl")
                .args(["--endpoints", &self.url])
                .args(auth)
                .args(args)
                .output()
                .expect("etcdctl runs");
            if output.status.success() {
                Ok(String::from_utf8_lossy(&output.stdout).into_owned())
            } else {
                Err(String::from_utf8_lossy(&output.stderr).into_owned())
            }
        })
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// `vd controller` (no Docker) on host `name` of `rig`, on `url` with
/// `args` and `env`, which must be refused: its output.
fn refused(rig: &HostRig, url: &str, name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    rig.add_bare(name);
    let root = tempfile::tempdir().unwrap();
    let wrap = rig.wrap(name);
    let output = Command::new(&wrap[0])
        .args(&wrap[1..])
        .arg(vd_binary())
        .arg("--root")
        .arg(root.path())
        .args([
            "controller",
            "--no-docker",
            "--cluster",
            url,
            "--node",
            name,
        ])
        .args(args)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("vd runs");
    assert!(!output.status.success(), "node {name} was not refused");
    output
}

/// How node `name` runs on its own host of `rig`, with `args` and `env`.
fn on_host(rig: &HostRig, name: &str, args: Vec<String>, env: Vec<(String, String)>) -> Launch {
    rig.add_bare(name);
    Launch {
        wrap: rig.wrap(name),
        args,
        env,
        ..Launch::default()
    }
}

fn path(file: &Path) -> String {
    file.display().to_string()
}

#[test]
fn a_node_with_certificates_etcd_trusts_joins_and_one_without_is_refused_naming_why() {
    let Some(rig) = HostRig::up(&[], &["e1"]) else {
        return;
    };
    let certificates = Certificates::new();
    let (server, server_key) =
        certificates.issue("etcd", &["localhost"], Some(&rig.address("e1")), false);
    let (client, client_key) =
        certificates.issue("node-a", &["localhost"], Some("127.0.0.1"), false);
    let (expired, expired_key) =
        certificates.issue("node-old", &["localhost"], Some("127.0.0.1"), true);
    let Some(etcd) = Etcd::start(
        &rig,
        "https",
        &[
            "--client-cert-auth".into(),
            format!("--trusted-ca-file={}", path(&certificates.ca())),
            format!("--cert-file={}", path(&server)),
            format!("--key-file={}", path(&server_key)),
        ],
    ) else {
        return;
    };
    let tls = [
        format!("--cacert={}", path(&certificates.ca())),
        format!("--cert={}", path(&client)),
        format!("--key={}", path(&client_key)),
    ];
    etcd.ctl(&tls, &["endpoint", "health"]);

    // With the CA and a client certificate: it joins, and serves.
    let a = Node::launch(
        &etcd.url,
        "a",
        Engine::None,
        &on_host(
            &rig,
            "a",
            vec![
                "--cluster-cacert".into(),
                path(&certificates.ca()),
                "--cluster-cert".into(),
                path(&client),
                "--cluster-key".into(),
                path(&client_key),
            ],
            Vec::new(),
        ),
    );
    assert_eq!(a.nodes()[0]["name"], "a", "{}", a.nodes());

    // Without a client certificate: refused, naming it, no quorum hint.
    let ca = path(&certificates.ca());
    let without = refused(&rig, &etcd.url, "b", &["--cluster-cacert", &ca], &[]);
    let said = stderr(&without);
    assert!(
        said.contains("refused this node") && said.contains("client certificate"),
        "{said}"
    );
    assert!(!said.contains("quorum"), "{said}");
    // An expired one: named as expired.
    let expired = refused(
        &rig,
        &etcd.url,
        "c",
        &[
            "--cluster-cacert",
            &ca,
            "--cluster-cert",
            &path(&expired),
            "--cluster-key",
            &path(&expired_key),
        ],
        &[],
    );
    let said = stderr(&expired);
    assert!(
        said.contains("client certificate") && said.contains("expired at"),
        "{said}"
    );
    // Another CA than the one that signed etcd's: named.
    let other = Certificates::new();
    let other_ca = path(&other.ca());
    let wrong_ca = refused(&rig, &etcd.url, "d", &["--cluster-cacert", &other_ca], &[]);
    let said = stderr(&wrong_ca);
    assert!(
        said.contains("etcd's certificate is not signed by the CA in --cluster-cacert"),
        "{said}"
    );
    // https without a CA: says what to give.
    let no_ca = refused(&rig, &etcd.url, "e", &[], &[]);
    assert!(
        stderr(&no_ca).contains("an https:// cluster needs --cluster-cacert FILE"),
        "{}",
        stderr(&no_ca)
    );
}

#[test]
fn with_etcd_auth_on_the_right_password_joins_and_a_wrong_or_missing_one_is_refused() {
    let Some(rig) = HostRig::up(&[], &["e1"]) else {
        return;
    };
    let Some(etcd) = Etcd::start(&rig, "http", &[]) else {
        return;
    };
    etcd.ctl(&[], &["user", "add", "root:root-secret"]);
    etcd.ctl(&[], &["auth", "enable"]);
    let as_root = ["--user=root:root-secret".to_owned()];
    etcd.ctl(&as_root, &["endpoint", "health"]);

    // The password from the environment (never an argument): it joins.
    let a = Node::launch(
        &etcd.url,
        "a",
        Engine::None,
        &on_host(
            &rig,
            "a",
            vec!["--cluster-user".into(), "root".into()],
            vec![("VOODU_CLUSTER_PASSWORD".into(), "root-secret".into())],
        ),
    );
    assert_eq!(a.nodes()[0]["name"], "a", "{}", a.nodes());

    // From a file: the same.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, "root-secret\n").unwrap();
    let b = Node::launch(
        &etcd.url,
        "b",
        Engine::None,
        &on_host(
            &rig,
            "b",
            vec![
                "--cluster-user".into(),
                "root".into(),
                "--cluster-password-file".into(),
                path(&file),
            ],
            Vec::new(),
        ),
    );
    assert!(b.lists("a"), "{}", b.nodes());

    // A wrong password: refused, naming the user.
    let wrong = refused(
        &rig,
        &etcd.url,
        "c",
        &["--cluster-user", "root"],
        &[("VOODU_CLUSTER_PASSWORD", "guess")],
    );
    let said = stderr(&wrong);
    assert!(
        said.contains("etcd refused user root: wrong user or password"),
        "{said}"
    );
    assert!(!said.contains("quorum"), "{said}");
    // No user: says etcd asks for one.
    let none = refused(&rig, &etcd.url, "d", &[], &[]);
    assert!(
        stderr(&none).contains("etcd asks for a user"),
        "{}",
        stderr(&none)
    );
    // A user and no password anywhere: says where to give it.
    let missing = refused(&rig, &etcd.url, "e", &["--cluster-user", "root"], &[]);
    assert!(
        stderr(&missing).contains("etcd user root needs its password"),
        "{}",
        stderr(&missing)
    );
}

/// The node-to-node channel with `--peer-cacert`, `--peer-cert` and
/// `--peer-key`, on hosts of their own: two nodes with certificates of the
/// cluster's CA answer each other; a node whose certificate another CA
/// signed is refused both ways and named as left out; a plain request to a
/// node's peer port, as anyone on the network could send, gets no answer,
/// and the node logs the refusal.
#[test]
fn the_node_to_node_channel_is_mutual_tls_and_a_peer_without_a_cluster_certificate_is_refused() {
    let Some(cluster) = cluster::BareCluster::start(1) else {
        return;
    };
    let urls = cluster.endpoints().join(",");
    let ours = Certificates::new();
    let theirs = Certificates::new();
    let node = |name: &str, ca: &Certificates| {
        let mut launch = cluster.launch(name);
        launch.args.extend(ca.peer_flags(name));
        // On the machine's engine (its socket reaches into the host's
        // network namespace): the views the channel carries are a
        // reconciler's.
        Node::launch(&urls, name, Engine::Docker, &launch)
    };
    if !engine::engine_available() {
        return;
    }
    let a = node("a", &ours);
    let b = node("b", &ours);
    let c = node("c", &theirs);
    let left_out = |asking: &Node| -> Vec<(String, String)> {
        let pods = asking.vd(&["get", "pods", "-o", "json"]);
        let answer: serde_json::Value = serde_json::from_slice(&pods.stdout)
            .unwrap_or_else(|error| panic!("{error}: {pods:?}"));
        answer["unanswered"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|left| {
                (
                    left["node"].as_str().unwrap_or_default().to_owned(),
                    left["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    // b answers a over TLS; c, whose certificate another CA signed, is
    // left out, named with the handshake's failure.
    let from_a =
        voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(300), || {
            // Left out for its certificate, not because it has not said
            // yet where it answers (a node that is still starting).
            let left = left_out(&a);
            if left.iter().map(|(node, _)| node.as_str()).eq(["c"])
                && left[0].1.contains("TLS handshake failed")
            {
                Ok(left)
            } else {
                Err(format!(
                    "a's view leaves out {left:?}; a's log: {}",
                    a.log()
                ))
            }
        });
    assert!(from_a[0].1.contains("TLS handshake failed"), "{from_a:?}");
    voodu_tests::wait_until(Duration::from_secs(20), Duration::from_millis(300), || {
        let from_c = left_out(&c);
        let names: Vec<&str> = from_c.iter().map(|(node, _)| node.as_str()).collect();
        if names == ["a", "b"]
            && from_c
                .iter()
                .all(|(_, reason)| reason.contains("TLS handshake failed"))
        {
            Ok(())
        } else {
            Err(format!(
                "c is answered by a node, or not refused for TLS: {from_c:?}"
            ))
        }
    });

    // A request line sent in the clear to a's peer port, from host c.
    let address = std::fs::read_to_string(a.root.path().join("peer-address")).unwrap();
    let (ip, port) = address.trim().rsplit_once(':').unwrap();
    let line = format!(
        r#"{{"protocol":{},"from":"c","to":"a","peer_verb":"pods"}}"#,
        voodu_api::PROTOCOL_VERSION
    );
    let mut plain = Command::new(&cluster.hosts.wrap("c")[0]);
    plain.args(&cluster.hosts.wrap("c")[1..]).args([
        "bash",
        "-c",
        &format!("exec 3<>/dev/tcp/{ip}/{port}; echo '{line}' >&3; timeout 5 cat <&3; true"),
    ]);
    let answered = plain.output().expect("bash runs");
    let said = String::from_utf8_lossy(&answered.stdout);
    // No frame of any kind: not even a refusal in the protocol's words.
    assert!(!said.contains('{'), "a plain request got an answer: {said}");
    voodu_tests::wait_until(Duration::from_secs(5), Duration::from_millis(100), || {
        if a.log()
            .contains("refused a peer connection without a certificate of the cluster's CA")
        {
            Ok(())
        } else {
            Err(a.log())
        }
    });
    drop(b);
}

/// Two hosts of the rig, each with its own engine, whose nodes `a` and
/// `b` talk over mutual TLS; the nodes stop before the rig.
struct TwoTlsHosts {
    a: Node,
    b: Node,
    _ca: Certificates,
    rig: cluster::DockerCluster,
}

impl TwoTlsHosts {
    /// `None` (a skip) where the rig cannot run and this is not CI.
    fn start() -> Option<TwoTlsHosts> {
        let rig = cluster::DockerCluster::start(1)?;
        let urls = rig.etcd.endpoints().join(",");
        let ca = Certificates::new();
        Some(TwoTlsHosts {
            a: rig.node_with(&urls, "a", &ca.peer_flags("a")),
            b: rig.node_with(&urls, "b", &ca.peer_flags("b")),
            _ca: ca,
            rig,
        })
    }
}

/// `vd exec` on one host into a replica that runs on another: over the
/// node-to-node channel's mutual TLS, the command runs there, its output
/// and exit code come back, and `-i` carries standard input to it.
#[test]
fn vd_exec_reaches_a_replica_of_another_host_over_the_mutual_tls_channel() {
    let Some(hosts) = TwoTlsHosts::start() else {
        return;
    };
    let (a, b, rig) = (&hosts.a, &hosts.b, &hosts.rig);
    let scope = &rig.scope.name;
    let web = format!("deployment/{scope}/web");
    a.apply(
        "web.hcl",
        &format!(
            "deployment \"{scope}\" \"web\" {{\n  image = \"{}\"\n  replicas = 1\n  nodes = [\"b\"]\n  env = {{ INIT_LOG = \"/dev/null\" }}\n}}\n",
            rig.image.name
        ),
    );
    let on_b =
        voodu_tests::wait_until(
            Duration::from_secs(30),
            Duration::from_millis(300),
            || match b.running(&web).as_slice() {
                [id] => Ok(id.clone()),
                other => Err(format!("b runs {other:?}; b's log: {}", b.log())),
            },
        );
    assert!(a.running(&web).is_empty(), "none on a");
    // Asked on a, run on b: its standard error and its own exit code.
    let ran = a.vd(&[
        "exec",
        &web,
        "--replica",
        &on_b,
        "--",
        "/echo-server",
        "init",
        "probe",
        "3",
    ]);
    assert_eq!(ran.status.code(), Some(3), "{ran:?}");
    assert_eq!(stderr(&ran), "init probe: done, exiting with 3\n");
    // Without --replica: the one running replica, wherever it runs.
    let any = a.vd(&["exec", &web, "--", "/echo-server", "init", "any", "0"]);
    assert_eq!(any.status.code(), Some(0), "{any:?}");
    // -i: what vd reads reaches the command on b, to its end.
    let mut piped = Command::new(vd_binary())
        .arg("--root")
        .arg(a.root.path())
        .args(["exec", "-i", &web, "--", "/echo-server", "cat"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vd runs");
    {
        use std::io::Write;
        let mut stdin = piped.stdin.take().expect("stdin");
        stdin.write_all(b"one\ntwo\n").expect("written");
    }
    let ended = piped.wait_with_output().expect("vd ends");
    assert_eq!(ended.status.code(), Some(0), "{ended:?}");
    assert_eq!(
        String::from_utf8_lossy(&ended.stdout),
        "terminal: no\ngot: one\ngot: two\nstdin ended\n",
        "{ended:?}"
    );
    // A replica no node runs is named as such.
    let missing = a.vd(&["exec", &web, "--replica", "zzzz", "--", "true"]);
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    assert!(
        stderr(&missing).contains("no running replica zzzz on any node"),
        "{missing:?}"
    );
}

/// A `build` block applied on one host runs on another: the node that
/// took the apply builds the image and keeps the context; the node the
/// replica is placed on lacks the image, fetches the context from it over
/// the node-to-node channel's mutual TLS, checks it against its digest,
/// builds the same image on its own engine and runs it, and keeps the
/// context too, for the nodes that ask next.
#[test]
fn a_build_applied_on_one_host_is_built_on_the_host_that_runs_it_from_the_context_over_mutual_tls()
{
    let Some(hosts) = TwoTlsHosts::start() else {
        return;
    };
    let (a, b, rig) = (&hosts.a, &hosts.b, &hosts.rig);
    let scope = &rig.scope.name;
    let web = format!("deployment/{scope}/web");
    let app = a.root.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(
        app.join("Dockerfile"),
        format!(
            "FROM {}\nENV GREETING=built-from-the-context\n",
            rig.image.name
        ),
    )
    .unwrap();
    a.apply(
        "web.hcl",
        &format!(
            "deployment \"{scope}\" \"web\" {{\n  build {{\n    context = \"{}\"\n  }}\n  replicas = 1\n  nodes = [\"b\"]\n  env = {{ INIT_LOG = \"/dev/null\" }}\n}}\n",
            app.display()
        ),
    );
    let described = a.vd(&["describe", &web, "-o", "json"]);
    assert!(described.status.success(), "{described:?}");
    let described: serde_json::Value = serde_json::from_slice(&described.stdout).unwrap();
    let build = &described["core_spec"]["build"];
    assert_eq!(build["kept_by"], "a", "{described}");
    let digest = build["digest"].as_str().unwrap_or_default().to_owned();
    let tag = described["core_spec"]["image"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(tag.starts_with(&format!("voodu/{scope}-web:")), "{tag}");
    let images = |host: &str| {
        rig.hosts.docker(
            host,
            &["image", "ls", "--format", "{{.Repository}}:{{.Tag}}"],
        )
    };
    assert!(images("a").contains(&tag), "a built it at apply");

    // b runs it: built there, from a's context.
    voodu_tests::wait_until(
        Duration::from_secs(90),
        Duration::from_millis(500),
        || match b.running(&web).as_slice() {
            [_] => Ok(()),
            other => Err(format!("b runs {other:?}; b's log: {}", b.log())),
        },
    );
    assert!(images("b").contains(&tag), "{}", images("b"));
    let events = a.vd(&["events", &web]);
    let events = String::from_utf8_lossy(&events.stdout).into_owned();
    assert!(
        events.contains(&format!("built {tag} from the context node a keeps")),
        "{events}"
    );
    // What runs on b is the image built from that context.
    let ran = a.vd(&["exec", &web, "--", "/echo-server", "job", "0"]);
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains("GREETING=built-from-the-context"),
        "{ran:?}"
    );
    // b keeps the context too, the very bytes a keeps.
    let kept = |node: &Node| {
        std::fs::read(
            node.root
                .path()
                .join("contexts")
                .join(format!("{digest}.tar")),
        )
    };
    assert_eq!(kept(b).ok(), kept(a).ok());
    assert!(kept(a).is_ok());

    // A job built from the same context, run on b: b builds its image
    // (another tag) before the run starts, and the run is that image's.
    a.apply(
        "task.hcl",
        &format!(
            "job \"{scope}\" \"task\" {{\n  build {{\n    context = \"{}\"\n  }}\n  command = [\"job\", \"0\"]\n}}\n",
            app.display()
        ),
    );
    let ran = b.vd(&["run", &format!("{scope}/task")]);
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains("GREETING=built-from-the-context"),
        "{ran:?}"
    );
    assert!(
        images("b").contains(&format!("voodu/{scope}-task:{}", &digest[..12])),
        "{}",
        images("b")
    );
}
