//! A real OpenSSH server on loopback, key auth only, for the tests of
//! `vd -H ssh://` and voodu's remotes: the "host" a laptop's `vd` reaches.
//! Its sessions find the `vd` under test on their PATH (as a host with vd
//! in /usr/local/bin would) and the controller's root in VOODU_ROOT (as an
//! operator's host environment sets it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The sshd binary Debian's openssh-server installs.
const SSHD: &str = "/usr/sbin/sshd";

/// A running sshd, stopped on drop, and the ssh client configuration
/// that reaches it with the one authorised key.
pub struct Sshd {
    dir: tempfile::TempDir,
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    child: Child,
}

impl Sshd {
    /// Starts one whose sessions run `vd` (the binary under test) with
    /// VOODU_ROOT at `host_root`; `None` (a skip) when sshd is not
    /// installed outside CI.
    pub fn start(vd: &Path, host_root: &Path) -> Option<Sshd> {
        if !voodu_tests::required_on_ci(
            "openssh-server (/usr/sbin/sshd)",
            Command::new("test").args(["-x", SSHD]),
        ) {
            return None;
        }
        let dir = tempfile::tempdir().expect("a directory for sshd");
        let path = |name: &str| dir.path().join(name);
        for key in ["host_key", "client_key", "stranger_key"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", key, "-f"])
                .arg(path(key))
                .status()
                .expect("ssh-keygen runs");
            assert!(made.success(), "ssh-keygen made {key}");
        }
        std::fs::copy(path("client_key.pub"), path("authorized_keys")).expect("authorised key");
        // The host's vd, under the name a host has it.
        std::fs::create_dir(path("bin")).expect("bin");
        std::os::unix::fs::symlink(vd, path("bin").join("vd")).expect("vd on the host's PATH");
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        let port = voodu_tests::free_port();
        std::fs::write(
            path("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {pid}\n\
                 AuthorizedKeysFile {authorized}\nPubkeyAuthentication yes\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n\
                 SetEnv PATH={bin}:/usr/local/bin:/usr/bin:/bin VOODU_ROOT={root}\n",
                host_key = path("host_key").display(),
                pid = path("sshd.pid").display(),
                authorized = path("authorized_keys").display(),
                bin = path("bin").display(),
                root = host_root.display(),
            ),
        )
        .expect("sshd_config");
        let host_key = std::fs::read_to_string(path("host_key.pub")).expect("host key");
        std::fs::write(
            path("known_hosts"),
            format!("[127.0.0.1]:{port} {host_key}"),
        )
        .expect("known_hosts");
        let client_config = |key: &str| {
            format!(
                "Host voodu-host\n  HostName 127.0.0.1\n  Port {port}\n\
                 Host *\n  IdentityFile {key}\n  IdentitiesOnly yes\n\
                 UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n\
                 BatchMode yes\n  LogLevel ERROR\n",
                key = path(key).display(),
                known = path("known_hosts").display(),
            )
        };
        std::fs::write(path("ssh_config"), client_config("client_key")).expect("ssh_config");
        std::fs::write(path("stranger_config"), client_config("stranger_key"))
            .expect("stranger_config");
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(path("sshd_config"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(path("sshd.log")).expect("sshd.log"))
            .spawn()
            .expect("sshd starts");
        voodu_tests::wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .map(drop)
                .map_err(|error| format!("sshd does not listen on {port}: {error}"))
        });
        Some(Sshd { dir, port, child })
    }

    /// `ssh://root@127.0.0.1:PORT`, with `/root` when given.
    pub fn url(&self, root: Option<&Path>) -> String {
        format!(
            "ssh://root@127.0.0.1:{}{}",
            self.port,
            root.map(|root| root.display().to_string())
                .unwrap_or_default()
        )
    }

    /// The `VD_SSH_COMMAND` that reaches this sshd with the authorised
    /// key, checking its host key.
    pub fn ssh_command(&self) -> String {
        format!("ssh -F {}", self.dir.path().join("ssh_config").display())
    }

    /// The `VD_SSH_COMMAND` of a stranger: a key the host does not know.
    pub fn stranger_ssh_command(&self) -> String {
        format!(
            "ssh -F {}",
            self.dir.path().join("stranger_config").display()
        )
    }

    /// The authorised private key.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }

    /// What sshd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
