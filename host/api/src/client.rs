//! The `vd` CLI's side of the API: connect to the controller's socket, send
//! one request, read frames until the answer.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

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
}

/// How long the probe after a dropped connection waits for an answer.
const PROBE_BOUND: std::time::Duration = std::time::Duration::from_millis(1_000);

/// A connection target: the controller of one root.
#[derive(Debug, Clone)]
pub struct Client {
    root: PathBuf,
}

impl Client {
    /// The client of the controller serving `root`.
    pub fn new(root: &Path) -> Self {
        Client {
            root: root.to_owned(),
        }
    }

    /// Sends one request and reads frames until the answer; `on_frame`
    /// hears each progress, notice or pod frame as it arrives.
    pub fn call(
        &self,
        request: &Request,
        on_frame: &mut dyn FnMut(&Frame),
    ) -> Result<Response, ClientError> {
        let socket = self.root.join(SOCKET_FILE);
        let mut stream = UnixStream::connect(&socket).map_err(|source| {
            if source.kind() == std::io::ErrorKind::PermissionDenied {
                ClientError::NotAllowed {
                    socket: socket.display().to_string(),
                }
            } else {
                ClientError::NotRunning {
                    root: self.root.display().to_string(),
                    socket: socket.display().to_string(),
                    source,
                }
            }
        })?;
        let mut line = serde_json::to_vec(&RequestLine::new(request.clone()))
            .map_err(|error| ClientError::Protocol(error.to_string()))?;
        line.push(b'\n');
        stream.write_all(&line)?;
        for line in BufReader::new(stream).lines() {
            let line = match line {
                Ok(line) => line,
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(error) => return Err(error.into()),
            };
            let frame: Frame = serde_json::from_str(&line)
                .map_err(|error| ClientError::Protocol(error.to_string()))?;
            match frame {
                Frame::Done(response) => return Ok(*response),
                Frame::Failed(failure) => return Err(ClientError::Failed(failure)),
                other => on_frame(&other),
            }
        }
        Err(Self::ended_early(&socket))
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
