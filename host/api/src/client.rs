//! The `vd` CLI's side of the API: connect to the controller's socket, send
//! one request, read frames until the answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::ssh::{SshSession, SshTarget};
use crate::{Failure, Frame, Request, RequestLine, Response, SOCKET_FILE};

/// Why a request got no answer, or a failed one.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket.
    #[error("no controller is running on {root} (nothing answers on {socket}: {source}) — start one with `vd controller --root {root}` and leave it running")]
    NotRunning {
        /// The root.
        root: String,
        /// The socket.
        socket: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The socket is there, but this user may not use it.
    #[error("the controller's socket {socket} is not open to this user (permission denied) — run vd as the user the controller runs as")]
    NotAllowed {
        /// The socket.
        socket: String,
    },
    /// The connection broke.
    #[error("the connection to the controller broke: {0}")]
    Io(#[from] std::io::Error),
    /// The connection ended before the answer, and nothing answers on the
    /// socket any more: the controller process ended during the request
    /// (a plugin that crashed it, a kill).
    #[error("the controller exited during this request — see its log for why. Start it again (a plugin that crashed it is quarantined at the next start), then check with `vd get` what of the request took effect")]
    ControllerExited {
        /// The socket that no longer answers.
        socket: String,
    },
    /// The connection ended before the answer, though the controller still
    /// answers on its socket.
    #[error("the controller ended this request's connection without an answer (its worker may have died and been started again) — see its log for why, then check with `vd get` what of the request took effect")]
    ConnectionDropped {
        /// The socket.
        socket: String,
    },
    /// The controller answered something that is not a frame.
    #[error("the controller answered something unreadable: {0}")]
    Protocol(String),
    /// The controller answered with a failure.
    #[error("{}", .0.message)]
    Failed(Failure),
    /// ssh could not be started here.
    #[error("cannot run ssh to reach {target}: {source} — install OpenSSH's client (or name yours in VD_SSH_COMMAND)")]
    NoSsh {
        /// The host.
        target: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// ssh itself failed: the host did not answer, or let this user in.
    #[error("ssh to {target} failed: {said} — check that `ssh` to it works from here (its user, key and known host)")]
    SshFailed {
        /// The host.
        target: String,
        /// What ssh said.
        said: String,
    },
    /// The host has no `vd` on the PATH its ssh sessions get.
    #[error("{target} has no vd for ssh sessions ({said}) — install vd on the host in a directory on the PATH of a non-interactive session, such as /usr/local/bin")]
    NoVdOnHost {
        /// The host.
        target: String,
        /// What the host's shell said.
        said: String,
    },
    /// The host's vd found no controller at the root.
    #[error("on {target}: {said}")]
    NotRunningOnHost {
        /// The host.
        target: String,
        /// What the host's vd said.
        said: String,
    },
    /// The session ended before the answer, for another reason.
    #[error("the ssh session to {target} ended without an answer (exit status {status}){}{said} — check the host's controller log, then with `vd get` what of the request took effect", if .said.is_empty() { "" } else { ": " })]
    SessionEnded {
        /// The host.
        target: String,
        /// How ssh ended.
        status: String,
        /// What ssh and the host's vd said.
        said: String,
    },
}

/// How long the probe after a dropped connection waits for an answer.
const PROBE_BOUND: std::time::Duration = std::time::Duration::from_millis(1_000);

/// How long an ssh session gets to end by itself after its answer.
const SESSION_END_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

/// Where a client reaches its controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The controller serving a root on this host, at its socket.
    Local(PathBuf),
    /// A host's controller, over SSH ([`crate::ssh`]).
    Ssh(SshTarget),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Local(root) => write!(f, "{}", root.display()),
            Endpoint::Ssh(target) => write!(f, "{target}"),
        }
    }
}

/// A connection target: the controller of one root, here or on a host
/// reached over SSH.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
}

/// What follows a request line on its connection (an interactive exec's
/// [`crate::ExecInput`] lines), writable from several threads at once.
#[derive(Clone)]
pub struct RequestInput(Arc<Mutex<Box<dyn Write + Send>>>);

impl RequestInput {
    fn new(writer: Box<dyn Write + Send>) -> RequestInput {
        RequestInput(Arc::new(Mutex::new(writer)))
    }
}

impl std::fmt::Debug for RequestInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestInput")
    }
}

impl Write for RequestInput {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut writer = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        writer.write(bytes)
    }

    /// Writes all of `bytes` under the lock, so that lines from two
    /// threads never interleave.
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut writer = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        writer.write_all(bytes)?;
        writer.flush()
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let mut writer = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        writer.flush()
    }
}

/// One open connection to a controller.
struct Connection {
    reader: Box<dyn Read + Send>,
    input: RequestInput,
    /// The ssh session it runs through, when remote.
    session: Option<SshSession>,
}

impl Client {
    /// The client of the controller serving `root` on this host.
    pub fn new(root: &Path) -> Self {
        Client {
            endpoint: Endpoint::Local(root.to_owned()),
        }
    }

    /// The client of the controller at `endpoint`.
    pub fn at(endpoint: Endpoint) -> Self {
        Client { endpoint }
    }

    /// Where this client reaches its controller.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Whether the controller runs on another host (so it cannot read
    /// this host's files).
    pub fn is_remote(&self) -> bool {
        matches!(self.endpoint, Endpoint::Ssh(_))
    }

    /// Sends one request and reads frames until the answer; `on_frame`
    /// hears each progress, notice or pod frame as it arrives.
    pub fn call(
        &self,
        request: &Request,
        on_frame: &mut dyn FnMut(&Frame),
    ) -> Result<Response, ClientError> {
        self.call_feeding(request, on_frame, None)
    }

    /// Sends one request, then hands `feed` a handle on the connection,
    /// on a thread of its own, to write what follows the request line (an
    /// interactive exec's [`crate::ExecInput`] lines), and reads frames
    /// until the answer as [`Client::call`] does.
    pub fn call_with_input(
        &self,
        request: &Request,
        on_frame: &mut dyn FnMut(&Frame),
        feed: Box<dyn FnOnce(RequestInput) + Send>,
    ) -> Result<Response, ClientError> {
        self.call_feeding(request, on_frame, Some(feed))
    }

    /// Opens a connection to the controller.
    fn connect(&self) -> Result<Connection, ClientError> {
        match &self.endpoint {
            Endpoint::Local(root) => {
                let socket = root.join(SOCKET_FILE);
                let stream = UnixStream::connect(&socket).map_err(|source| {
                    if source.kind() == std::io::ErrorKind::PermissionDenied {
                        ClientError::NotAllowed {
                            socket: socket.display().to_string(),
                        }
                    } else {
                        ClientError::NotRunning {
                            root: root.display().to_string(),
                            socket: socket.display().to_string(),
                            source,
                        }
                    }
                })?;
                Ok(Connection {
                    input: RequestInput::new(Box::new(stream.try_clone()?)),
                    reader: Box::new(stream),
                    session: None,
                })
            }
            Endpoint::Ssh(target) => {
                let mut session = target.dial().map_err(|source| ClientError::NoSsh {
                    target: target.to_string(),
                    source,
                })?;
                let (Some(stdin), Some(stdout)) = (session.take_stdin(), session.take_stdout())
                else {
                    return Err(ClientError::Protocol("ssh's pipes were not made".into()));
                };
                Ok(Connection {
                    input: RequestInput::new(Box::new(stdin)),
                    reader: Box::new(stdout),
                    session: Some(session),
                })
            }
        }
    }

    fn call_feeding(
        &self,
        request: &Request,
        on_frame: &mut dyn FnMut(&Frame),
        feed: Option<Box<dyn FnOnce(RequestInput) + Send>>,
    ) -> Result<Response, ClientError> {
        let Connection {
            reader,
            mut input,
            session,
        } = self.connect()?;
        let mut line = serde_json::to_vec(&RequestLine::new(request.clone()))
            .map_err(|error| ClientError::Protocol(error.to_string()))?;
        line.push(b'\n');
        if let Err(error) = input.write_all(&line) {
            // An ssh session that ended at once (refused, no vd there)
            // says why on its standard error.
            return Err(match (session, &self.endpoint) {
                (Some(session), Endpoint::Ssh(target)) => {
                    session.finish(SESSION_END_BOUND).error(target)
                }
                _ => error.into(),
            });
        }
        if let Some(feed) = feed {
            let input = input.clone();
            std::thread::spawn(move || feed(input));
        }
        // `input` stays open until the answer: over SSH, its end would end
        // the session's input, which the host's vd passes on.
        let answer = Self::read_answer(reader, on_frame);
        drop(input);
        match (answer, session, &self.endpoint) {
            (Some(answer), Some(session), _) => {
                session.finish(SESSION_END_BOUND);
                answer
            }
            (Some(answer), None, _) => answer,
            (None, Some(session), Endpoint::Ssh(target)) => {
                Err(session.finish(SESSION_END_BOUND).error(target))
            }
            (None, _, Endpoint::Local(root)) => Err(Self::ended_early(&root.join(SOCKET_FILE))),
            (None, None, Endpoint::Ssh(target)) => Err(ClientError::SessionEnded {
                target: target.to_string(),
                status: "unknown".to_owned(),
                said: String::new(),
            }),
        }
    }

    /// Reads frames until the answer; `None` when the connection ended
    /// before one.
    fn read_answer(
        reader: Box<dyn Read + Send>,
        on_frame: &mut dyn FnMut(&Frame),
    ) -> Option<Result<Response, ClientError>> {
        for line in BufReader::new(reader).lines() {
            let line = match line {
                Ok(line) => line,
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(error) => return Some(Err(error.into())),
            };
            let frame: Frame = match serde_json::from_str(&line) {
                Ok(frame) => frame,
                Err(error) => return Some(Err(ClientError::Protocol(error.to_string()))),
            };
            match frame {
                Frame::Done(response) => return Some(Ok(*response)),
                Frame::Failed(failure) => return Some(Err(ClientError::Failed(failure))),
                other => on_frame(&other),
            }
        }
        None
    }

    /// Why a connection ended before its answer: the controller exited
    /// unless it still answers a `version` request on its socket (a
    /// process that is ending may still accept a connection, but answers
    /// nothing).
    fn ended_early(socket: &Path) -> ClientError {
        let shown = socket.display().to_string();
        if Self::answers_version(socket) {
            ClientError::ConnectionDropped { socket: shown }
        } else {
            ClientError::ControllerExited { socket: shown }
        }
    }

    /// Whether a controller answers one `version` request on `socket`
    /// within [`PROBE_BOUND`].
    fn answers_version(socket: &Path) -> bool {
        let probe = || -> Option<()> {
            let mut stream = UnixStream::connect(socket).ok()?;
            stream.set_read_timeout(Some(PROBE_BOUND)).ok()?;
            stream.set_write_timeout(Some(PROBE_BOUND)).ok()?;
            let mut line = serde_json::to_vec(&RequestLine::new(Request::Version)).ok()?;
            line.push(b'\n');
            stream.write_all(&line).ok()?;
            let mut answer = String::new();
            BufReader::new(stream).read_line(&mut answer).ok()?;
            matches!(serde_json::from_str::<Frame>(&answer), Ok(Frame::Done(_))).then_some(())
        };
        probe().is_some()
    }
}
