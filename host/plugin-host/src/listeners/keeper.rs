//! The channel between the process that keeps the listening sockets (the
//! supervisor of `vd controller`) and the process whose plugins use them
//! (its worker).
//!
//! A worker's plugins ask for listeners as ever; the worker's
//! [`ListenerTable`] passes each ask to the keeper over a `SOCK_SEQPACKET`
//! socket pair and gets back, for a listen, a descriptor of the keeper's
//! socket (`SCM_RIGHTS`). The keeper binds each address once and keeps the
//! socket across workers, so a worker that dies, or is replaced by an
//! upgrade, leaves connections waiting in the backlog for the next one
//! instead of refused.
//!
//! Each message is one JSON datagram ([`Ask`] one way, [`Answer`] the
//! other); the descriptor of a [`Answer::Listening`] travels with it. The
//! worker asks one thing at a time.

use std::io::{IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{ListenError, ListenerTable};

/// The longest a worker waits for the keeper's answer: it answers from a
/// table in memory, so only a keeper that is gone or stuck takes longer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest message either side sends; an address and a plugin name.
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// What a worker asks of the keeper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ask {
    /// A descriptor of the socket listening on `address` for `plugin`.
    Listen {
        /// The plugin.
        plugin: String,
        /// The address, parsed.
        address: SocketAddr,
        /// Bind with `SO_REUSEPORT`.
        reuse_port: bool,
    },
    /// Close the keeper's copy of the socket on `address` held for `plugin`.
    Unlisten {
        /// The plugin.
        plugin: String,
        /// The address.
        address: SocketAddr,
    },
    /// Close every socket held for `plugin`.
    ReleaseAll {
        /// The plugin.
        plugin: String,
    },
    /// Close every socket held for a plugin not in `plugins` (the plugins
    /// a worker loaded: one quarantined or gone will never ask again).
    Retain {
        /// The plugins to keep sockets for.
        plugins: Vec<String>,
    },
}

/// The keeper's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Listening: the descriptor comes with the message.
    Listening {
        /// The address the socket is bound to (the port chosen, for port 0).
        address: SocketAddr,
    },
    /// No listener, and why.
    Refused(Refusal),
    /// Done (for the asks that carry no descriptor).
    Done,
}

/// A [`ListenError`] as it crosses the channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// [`ListenError::BadAddress`].
    BadAddress {
        /// What the plugin passed.
        given: String,
    },
    /// [`ListenError::HeldByAnother`].
    HeldByAnother {
        /// The address.
        address: SocketAddr,
        /// The plugin that holds it.
        owner: String,
    },
    /// [`ListenError::Bind`]: the system's error number, and its words.
    Bind {
        /// The address.
        address: SocketAddr,
        /// The error number, when the system gave one.
        errno: Option<i32>,
        /// What the system said.
        message: String,
    },
}

impl From<&ListenError> for Refusal {
    fn from(error: &ListenError) -> Self {
        match error {
            ListenError::BadAddress { given } => Refusal::BadAddress {
                given: given.clone(),
            },
            ListenError::HeldByAnother { address, owner } => Refusal::HeldByAnother {
                address: *address,
                owner: owner.clone(),
            },
            // The keeper holds sockets by plugin; blocks are the worker's.
            ListenError::HeldByBlock { address, holder } => Refusal::HeldByAnother {
                address: *address,
                owner: holder.clone(),
            },
            ListenError::Bind { address, source } => Refusal::Bind {
                address: *address,
                errno: source.raw_os_error(),
                message: source.to_string(),
            },
            // The keeper binds itself; it has no keeper of its own.
            ListenError::Keeper { source } => Refusal::Bind {
                address: SocketAddr::from(([0, 0, 0, 0], 0)),
                errno: source.raw_os_error(),
                message: source.to_string(),
            },
        }
    }
}

impl From<Refusal> for ListenError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::BadAddress { given } => ListenError::BadAddress { given },
            Refusal::HeldByAnother { address, owner } => {
                ListenError::HeldByAnother { address, owner }
            }
            Refusal::Bind {
                address,
                errno,
                message,
            } => ListenError::Bind {
                address,
                source: match errno {
                    Some(errno) => std::io::Error::from_raw_os_error(errno),
                    None => std::io::Error::other(message),
                },
            },
        }
    }
}

/// A connected pair for one worker: the keeper's end and the worker's, both
/// close-on-exec (the supervisor clears it on the copy the worker inherits).
pub fn channel_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(std::io::Error::from)
}

/// The worker's side of the channel.
#[derive(Debug)]
pub struct KeeperClient {
    /// One ask at a time: the answer read is the one to the ask sent.
    channel: Mutex<OwnedFd>,
}

impl KeeperClient {
    /// Takes the worker's end of the channel; answers are waited for at
    /// most [`ANSWER_TIMEOUT`].
    pub fn new(channel: OwnedFd) -> std::io::Result<KeeperClient> {
        let socket = socket2::Socket::from(channel);
        socket.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        socket.set_write_timeout(Some(ANSWER_TIMEOUT))?;
        Ok(KeeperClient {
            channel: Mutex::new(socket.into()),
        })
    }

    /// Sends `ask` and reads the answer, with the descriptor it carries.
    pub fn ask(&self, ask: &Ask) -> std::io::Result<(Answer, Option<OwnedFd>)> {
        let channel = self.channel.lock();
        send(channel.as_raw_fd(), ask, None)?;
        match receive::<Answer>(channel.as_raw_fd())? {
            Some(answer) => Ok(answer),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the supervisor closed the channel",
            )),
        }
    }
}

/// Answers a worker's asks from `table` until the worker's end closes (it
/// exited). Run on a thread of its own for each worker.
pub fn serve(table: &ListenerTable, channel: OwnedFd) {
    let fd = channel.as_raw_fd();
    loop {
        let ask = match receive::<Ask>(fd) {
            Ok(Some((ask, _))) => ask,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "a worker's ask for a listener could not be read");
                if error.kind() == std::io::ErrorKind::InvalidData {
                    continue;
                }
                return;
            }
        };
        let (answer, descriptor) = answer(table, ask);
        if let Err(error) = send(fd, &answer, descriptor.as_ref().map(AsRawFd::as_raw_fd)) {
            tracing::warn!(%error, "a worker's ask for a listener could not be answered");
            return;
        }
    }
}

/// What `table` answers to `ask`.
fn answer(table: &ListenerTable, ask: Ask) -> (Answer, Option<OwnedFd>) {
    match ask {
        Ask::Listen {
            plugin,
            address,
            reuse_port,
        } => match table.listen_at(&plugin, address, reuse_port) {
            Ok((socket, address)) => (Answer::Listening { address }, Some(socket)),
            Err(error) => (Answer::Refused(Refusal::from(&error)), None),
        },
        Ask::Unlisten { plugin, address } => {
            table.unlisten_at(&plugin, address);
            (Answer::Done, None)
        }
        Ask::ReleaseAll { plugin } => {
            table.release_all(&plugin);
            (Answer::Done, None)
        }
        Ask::Retain { plugins } => {
            table.retain_only(&plugins);
            (Answer::Done, None)
        }
    }
}

/// Sends `message` as one datagram, with `descriptor` attached.
fn send(fd: RawFd, message: &impl Serialize, descriptor: Option<RawFd>) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let descriptors = descriptor.map(|descriptor| [descriptor]);
    let control: Vec<ControlMessage> = descriptors
        .as_ref()
        .map(|descriptors| ControlMessage::ScmRights(descriptors))
        .into_iter()
        .collect();
    sendmsg::<()>(
        fd,
        &[IoSlice::new(&bytes)],
        &control,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(std::io::Error::from)?;
    Ok(())
}

/// Reads one datagram and the descriptor it carries; `None` at the end of
/// the channel. A datagram that is not a `T` is `InvalidData`.
fn receive<T: for<'de> Deserialize<'de>>(
    fd: RawFd,
) -> std::io::Result<Option<(T, Option<OwnedFd>)>> {
    let mut buffer = vec![0u8; MAX_MESSAGE_BYTES];
    let mut control = nix::cmsg_space!([RawFd; 1]);
    let (bytes, descriptor) = {
        let mut parts = [IoSliceMut::new(&mut buffer)];
        let message = recvmsg::<()>(
            fd,
            &mut parts,
            Some(&mut control),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(std::io::Error::from)?;
        let mut descriptor = None;
        for item in message.cmsgs().map_err(std::io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = item {
                for received in fds {
                    // SAFETY: the kernel made this descriptor for this
                    // process; it is owned from here on (extras are closed).
                    let owned = unsafe { OwnedFd::from_raw_fd(received) };
                    if descriptor.is_none() {
                        descriptor = Some(owned);
                    }
                }
            }
        }
        (message.bytes, descriptor)
    };
    if bytes == 0 {
        return Ok(None);
    }
    let message = serde_json::from_slice(&buffer[..bytes])
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))?;
    Ok(Some((message, descriptor)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_gets_the_keepers_socket_and_its_refusals_across_the_channel() {
        let keeper_table: &'static ListenerTable = Box::leak(Box::new(ListenerTable::default()));
        let (keeper_end, worker_end) = channel_pair().unwrap();
        let server = std::thread::spawn(move || serve(keeper_table, keeper_end));
        let worker = ListenerTable::default();
        assert!(worker.hold_through(KeeperClient::new(worker_end).unwrap()));
        let socket = worker.listen("traffik", "127.0.0.1:0", false).unwrap();
        let address = std::net::TcpListener::from(socket).local_addr().unwrap();
        assert_eq!(
            keeper_table.held_for("traffik"),
            [address],
            "the keeper bound it"
        );
        // The worker's own descriptors close (it died): the keeper's socket
        // still takes connections.
        drop(worker);
        server.join().unwrap();
        std::net::TcpStream::connect(address).expect("waits in the backlog, not refused");
        // A new worker asking for the same address gets the same socket.
        let (keeper_end, worker_end) = channel_pair().unwrap();
        let server = std::thread::spawn(move || serve(keeper_table, keeper_end));
        let worker = ListenerTable::default();
        worker.hold_through(KeeperClient::new(worker_end).unwrap());
        let again = std::net::TcpListener::from(
            worker
                .listen("traffik", &address.to_string(), false)
                .unwrap(),
        );
        again.set_nonblocking(false).unwrap();
        again.accept().expect("the connection made meanwhile");
        let refused = worker
            .listen("haproxy", &address.to_string(), false)
            .unwrap_err();
        assert!(
            refused.to_string().contains("held for plugin traffik"),
            "{refused}"
        );
        // The keeper refuses another plugin too, when asked directly.
        let other = ListenerTable::default();
        let (keeper_end, other_end) = channel_pair().unwrap();
        let other_server = std::thread::spawn(move || serve(keeper_table, keeper_end));
        other.hold_through(KeeperClient::new(other_end).unwrap());
        let refused = other
            .listen("haproxy", &address.to_string(), false)
            .unwrap_err();
        assert!(
            refused.to_string().contains("held for plugin traffik"),
            "{refused}"
        );
        // A worker that loaded no traffik releases its sockets.
        other.retain_only(&["haproxy".to_owned()]);
        assert!(keeper_table.held_for("traffik").is_empty());
        drop(other);
        other_server.join().unwrap();
        drop(worker);
        server.join().unwrap();
    }
}
