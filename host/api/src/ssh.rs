//! A host's controller over SSH, as `docker -H ssh://` reaches a daemon:
//! the local `vd` runs the user's own `ssh` to the host, which starts
//! `vd dial-stdio` there; that joins the session's standard input and
//! output to the controller's socket. The user's SSH (agent,
//! `~/.ssh/config`, known hosts) decides who gets in, the socket's own
//! check (the controller's user only) holds on the host, and nothing new
//! listens on the network.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};

/// The environment variable that names the `ssh` command to run, with its
/// options (`ssh -F ~/.ssh/voodu_config`), as git's `GIT_SSH_COMMAND`
/// does; a shell runs it. Default: `ssh`.
pub const SSH_COMMAND_VAR: &str = "VD_SSH_COMMAND";

/// The exit code `vd dial-stdio` gives when no controller answers on the
/// host (as every verb gives when none answers locally).
pub const DIAL_NO_CONTROLLER: i32 = 3;

/// ssh's own exit code for a failure of its own (connection, auth).
const SSH_FAILED: i32 = 255;

/// The exit code a shell gives for a command it did not find.
const COMMAND_NOT_FOUND: i32 = 127;

/// Why an SSH target does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshTargetError {
    /// Not a URL of the `ssh://` scheme.
    #[error("{given:?} is not an ssh:// URL ({reason}) — write ssh://user@host, ssh://user@host:2222 or ssh://user@host/var/lib/voodu (the controller's root there)")]
    NotAnSshUrl {
        /// What was given.
        given: String,
        /// Why.
        reason: String,
    },
    /// A remote that is not `user@host[:identity]`.
    #[error("{given:?} is not a voodu remote ({reason}) — write user@host, or user@host:~/.ssh/key.pem to name the key")]
    NotARemote {
        /// What was given.
        given: String,
        /// Why.
        reason: String,
    },
}

/// A host whose controller `vd` reaches over SSH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// The user to log in as; ssh's own default (its config, the local
    /// user) when absent.
    pub user: Option<String>,
    /// The host name or address.
    pub host: String,
    /// The port, when not ssh's default.
    pub port: Option<u16>,
    /// The private key to log in with (`ssh -i`); the agent and ssh's
    /// config otherwise.
    pub identity: Option<PathBuf>,
    /// The controller's root on the host; the host's default root of
    /// that user otherwise.
    pub root: Option<PathBuf>,
}

impl SshTarget {
    /// Reads `ssh://[user@]host[:port][/root]`, as `vd -H` and `VD_HOST`
    /// take it.
    pub fn from_url(given: &str) -> Result<SshTarget, SshTargetError> {
        let refused = |reason: &str| SshTargetError::NotAnSshUrl {
            given: given.to_owned(),
            reason: reason.to_owned(),
        };
        let url = url::Url::parse(given).map_err(|error| refused(&error.to_string()))?;
        if url.scheme() != "ssh" {
            return Err(refused(&format!(
                "its scheme is {:?}; only ssh is spoken",
                url.scheme()
            )));
        }
        let host = url
            .host_str()
            .filter(|host| !host.is_empty())
            .ok_or_else(|| refused("it names no host"))?;
        // A bracketed IPv6 address is given to ssh bare.
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if url.password().is_some() {
            return Err(refused(
                "it carries a password; ssh asks for one itself, use a key",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(refused("it has a query or a fragment"));
        }
        let user = Some(url.username())
            .filter(|user| !user.is_empty())
            .map(|user| percent_decoded(user).ok_or_else(|| refused("its user name is not UTF-8")))
            .transpose()?;
        let root = match url.path() {
            "" | "/" => None,
            path => Some(PathBuf::from(
                percent_decoded(path).ok_or_else(|| refused("its path is not UTF-8"))?,
            )),
        };
        let target = SshTarget {
            user,
            host: host.to_owned(),
            port: url.port(),
            identity: None,
            root,
        };
        target.checked().map_err(|reason| refused(&reason))
    }

    /// Reads a voodu remote, `user@host[:identity]`, as voodu keeps it in
    /// `.git/config`: the identity, when given, is a path (starting with
    /// `/`, `~`, `./` or `../`; `~` is the home directory).
    pub fn from_remote(given: &str) -> Result<SshTarget, SshTargetError> {
        let refused = |reason: &str| SshTargetError::NotARemote {
            given: given.to_owned(),
            reason: reason.to_owned(),
        };
        let (user, rest) = given
            .split_once('@')
            .ok_or_else(|| refused("it names no user (user@host)"))?;
        let (host, identity) = match rest.split_once(':') {
            Some((host, identity)) => (host, Some(identity)),
            None => (rest, None),
        };
        let identity = identity
            .map(|identity| {
                let is_path = ["/", "~", "./", "../"]
                    .iter()
                    .any(|start| identity.starts_with(start));
                if is_path {
                    Ok(expand_home(identity))
                } else {
                    Err(refused(&format!(
                        "{identity:?} after the colon is not a key's path (start it with /, ~, ./ or ../)"
                    )))
                }
            })
            .transpose()?;
        let target = SshTarget {
            user: Some(user.to_owned()),
            host: host.to_owned(),
            port: None,
            identity,
            root: None,
        };
        target.checked().map_err(|reason| refused(&reason))
    }

    /// The target with `root`, when it names none of its own.
    pub fn with_root(mut self, root: Option<&Path>) -> SshTarget {
        if self.root.is_none() {
            self.root = root.map(Path::to_owned);
        }
        self
    }

    /// Refuses what ssh would read as one of its options, or what is no
    /// host or user name.
    fn checked(self) -> Result<SshTarget, String> {
        let plain = |word: &str| {
            !word.is_empty()
                && !word.starts_with('-')
                && !word
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '@')
        };
        if !plain(&self.host) {
            return Err(format!("{:?} is no host name", self.host));
        }
        if let Some(user) = &self.user {
            if !plain(user) {
                return Err(format!("{user:?} is no user name"));
            }
        }
        Ok(self)
    }

    /// `user@host` (or `host`), as ssh takes it.
    pub fn destination(&self) -> String {
        match &self.user {
            Some(user) => format!("{user}@{}", self.host),
            None => self.host.clone(),
        }
    }

    /// The command the host's shell runs: `vd dial-stdio`, with the root.
    fn remote_command(&self) -> String {
        let mut words = vec!["vd".to_owned(), "dial-stdio".to_owned()];
        if let Some(root) = &self.root {
            words.push("--root".to_owned());
            words.push(root.display().to_string());
        }
        shlex::try_join(words.iter().map(String::as_str))
            // Only a word with a NUL byte cannot be quoted; a path has none.
            .unwrap_or_else(|_| "vd dial-stdio".to_owned())
    }

    /// The ssh command that joins this process to the host's controller.
    fn command(&self) -> Command {
        let mut arguments: Vec<String> = Vec::new();
        if let Some(port) = self.port {
            arguments.extend(["-p".to_owned(), port.to_string()]);
        }
        if let Some(identity) = &self.identity {
            arguments.extend(["-i".to_owned(), identity.display().to_string()]);
        }
        // No terminal on the host: the session carries the API's lines.
        arguments.extend([
            "-T".to_owned(),
            "--".to_owned(),
            self.destination(),
            self.remote_command(),
        ]);
        let mut command = match std::env::var(SSH_COMMAND_VAR)
            .ok()
            .filter(|command| !command.trim().is_empty())
        {
            // As git runs GIT_SSH_COMMAND: through a shell, the arguments
            // after it.
            Some(ssh) => {
                let mut command = Command::new("/bin/sh");
                command
                    .arg("-c")
                    .arg(format!("{ssh} \"$@\""))
                    .arg(SSH_COMMAND_VAR);
                command
            }
            None => Command::new("ssh"),
        };
        command.args(arguments);
        command
    }

    /// Starts ssh to the host's `vd dial-stdio`.
    pub(crate) fn dial(&self) -> Result<SshSession, std::io::Error> {
        let mut child = self
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("ssh's pipes were not made"));
        };
        // What ssh and the host's vd say on standard error, kept to name
        // why a session ended without an answer.
        let said = std::thread::spawn(move || {
            let mut said = Vec::new();
            let _ = stderr.read_to_end(&mut said);
            String::from_utf8_lossy(&said).into_owned()
        });
        Ok(SshSession {
            child,
            stdin: Some(stdin),
            stdout: Some(stdout),
            said: Some(said),
        })
    }
}

impl std::fmt::Display for SshTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ssh://{}", self.destination())?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        if let Some(root) = &self.root {
            write!(f, "{}", root.display())?;
        }
        Ok(())
    }
}

/// `~` or `~/...` with the home directory put in.
fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix('~'), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(home).join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(path),
    }
}

/// A URL part with its `%XX` escapes decoded; `None` when that is not
/// UTF-8.
fn percent_decoded(part: &str) -> Option<String> {
    percent_encoding::percent_decode_str(part)
        .decode_utf8()
        .ok()
        .map(|decoded| decoded.into_owned())
}

/// One running ssh session to a host's `vd dial-stdio`.
pub(crate) struct SshSession {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    said: Option<std::thread::JoinHandle<String>>,
}

/// How an ssh session ended.
pub(crate) struct SessionEnd {
    /// ssh's exit status (the host command's, when it ran).
    pub status: Option<ExitStatus>,
    /// What ssh and the host's vd wrote on standard error.
    pub said: String,
}

impl SessionEnd {
    /// Why the session gave no answer, as the client reports it.
    pub fn error(self, target: &SshTarget) -> crate::client::ClientError {
        use crate::client::ClientError;
        let said = self.said.trim().to_owned();
        let target = target.to_string();
        match self.status.and_then(|status| status.code()) {
            Some(SSH_FAILED) => ClientError::SshFailed {
                target,
                said: if said.is_empty() {
                    "ssh exited with 255".to_owned()
                } else {
                    said
                },
            },
            Some(COMMAND_NOT_FOUND) => ClientError::NoVdOnHost { target, said },
            Some(DIAL_NO_CONTROLLER) => ClientError::NotRunningOnHost { target, said },
            code => ClientError::SessionEnded {
                target,
                status: code.map_or_else(|| "a signal".to_owned(), |code| code.to_string()),
                said,
            },
        }
    }
}

impl SshSession {
    /// The session's input (the host's `vd dial-stdio` reads it).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// The session's output (what the controller answers).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// Waits for ssh to end (after the answer: the controller closed the
    /// connection, so the host's vd and ssh end at once), at most
    /// `bound`, then stops it.
    pub fn finish(mut self, bound: std::time::Duration) -> SessionEnd {
        self.stdin = None;
        let started = std::time::Instant::now();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() < bound => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                _ => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        let said = self
            .said
            .take()
            .and_then(|said| said.join().ok())
            .unwrap_or_default();
        SessionEnd { status, said }
    }
}

impl Drop for SshSession {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL gives its user, host, port and the root on the host.
    #[test]
    fn an_ssh_url_gives_user_host_port_and_root() {
        let target = SshTarget::from_url("ssh://ops@10.0.0.5:2222/var/lib/voodu").unwrap();
        assert_eq!(target.user.as_deref(), Some("ops"));
        assert_eq!(target.host, "10.0.0.5");
        assert_eq!(target.port, Some(2222));
        assert_eq!(target.root, Some(PathBuf::from("/var/lib/voodu")));
        assert_eq!(target.to_string(), "ssh://ops@10.0.0.5:2222/var/lib/voodu");
        assert_eq!(
            target.remote_command(),
            "vd dial-stdio --root /var/lib/voodu"
        );
        let bare = SshTarget::from_url("ssh://host.example").unwrap();
        assert_eq!((bare.user, bare.port, bare.root), (None, None, None));
        let v6 = SshTarget::from_url("ssh://root@[::1]:22").unwrap();
        assert_eq!(v6.destination(), "root@::1");
    }

    /// What is no ssh URL, or would read as an option of ssh, is refused
    /// with what to write.
    #[test]
    fn what_is_no_ssh_url_is_refused_with_the_forms_to_write() {
        for given in [
            "tcp://host:2375",
            "host",
            "ssh://",
            "ssh://user:secret@host",
            "ssh://-oProxyCommand=x",
            "ssh://host?x=1",
        ] {
            let error = SshTargetError::to_string(&SshTarget::from_url(given).unwrap_err());
            assert!(error.contains("write ssh://user@host"), "{given}: {error}");
        }
    }

    /// A remote is `user@host`, with a key's path after a colon; a word
    /// that is no path is refused, as voodu refuses it.
    #[test]
    fn a_remote_is_user_at_host_with_an_optional_key_path() {
        let plain = SshTarget::from_remote("ubuntu@1.2.3.4").unwrap();
        assert_eq!(plain.destination(), "ubuntu@1.2.3.4");
        assert_eq!(plain.identity, None);
        let keyed = SshTarget::from_remote("ubuntu@ec2.example.com:/etc/voodu/key.pem").unwrap();
        assert_eq!(keyed.identity, Some(PathBuf::from("/etc/voodu/key.pem")));
        let error = SshTarget::from_remote("ubuntu@host:key.pem")
            .unwrap_err()
            .to_string();
        assert!(error.contains("not a key's path"), "{error}");
        let error = SshTarget::from_remote("host").unwrap_err().to_string();
        assert!(error.contains("names no user"), "{error}");
        assert!(SshTarget::from_remote("-x@host").is_err());
    }

    /// The root is quoted for the host's shell, so a path with a space or
    /// a quote stays one word.
    #[test]
    fn the_root_is_one_word_for_the_hosts_shell() {
        let target = SshTarget::from_remote("ops@host")
            .unwrap()
            .with_root(Some(Path::new("/srv/my voodu's")));
        let words = shlex::split(&target.remote_command()).unwrap();
        assert_eq!(words, ["vd", "dial-stdio", "--root", "/srv/my voodu's"]);
    }
}
