//! The kernel's table of established TCP sockets, asked through its socket
//! diagnostics (`sock_diag` over netlink) with a port for the kernel to
//! filter by, so that the cost does not grow with the thousands of
//! TIME_WAIT sockets a busy host keeps. Two users: the `connections` host
//! service (ABI 1.3: the connections a process holds to a replica, which a
//! balancer waits on before answering a drain), and the supervisor's count
//! of the connections open through the sockets it keeps.
//!
//! A dump is not a snapshot: it counts the sockets seen established while
//! it was read.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::protocols::NETLINK_SOCK_DIAG;

/// One established TCP socket of this network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EstablishedSocket {
    /// Its local end.
    pub local: SocketAddr,
    /// Its remote end.
    pub remote: SocketAddr,
    /// Its inode: 0 while no process holds it (a connection still in a
    /// listener's backlog), else what `/proc/PID/fd/N` names as
    /// `socket:[INODE]`.
    pub inode: u32,
}

/// The port the kernel filters a dump by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortFilter {
    /// Sockets whose local end has this port (those accepted from a
    /// listener on it).
    Local(u16),
    /// Sockets whose remote end has this port (those connected to it).
    Remote(u16),
}

/// Why the connections could not be counted.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionsError {
    /// The address is not `IP:port`.
    #[error("{0:?} is not an address: write IP:port (10.0.0.5:8084, [fd00::5]:8084)")]
    NotAnAddress(String),
    /// No such process runs.
    #[error("no process {0} runs")]
    NoProcess(u32),
    /// A negative pid names no process (0 is this process).
    #[error(
        "pid {0} is negative: pass 0 for the controller's own connections, or a process's pid"
    )]
    NegativePid(i32),
    /// The kernel's socket table could not be read.
    #[error("the kernel's socket table could not be read: {0}")]
    SocketTable(std::io::Error),
    /// A process's descriptors could not be read.
    #[error("the descriptors of process {pid} could not be read: {error}")]
    Descriptors {
        /// The process.
        pid: u32,
        /// Why.
        error: std::io::Error,
    },
}

impl ConnectionsError {
    /// Whether the caller asked for something that cannot be answered (a
    /// bad address, no such process), rather than the host failing.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::NotAnAddress(_) | Self::NoProcess(_) | Self::NegativePid(_)
        )
    }
}

/// Whose connections are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// This process's own.
    ThisProcess,
    /// Those of a process and of every process descended from it (a
    /// master and its workers).
    ProcessTree(u32),
}

impl Holder {
    /// The holder a `pid` of the `connections` service names: 0 is this
    /// process, any other its tree (a negative one is no process).
    pub fn from_ffi(pid: i32) -> Result<Holder, ConnectionsError> {
        match pid {
            0 => Ok(Holder::ThisProcess),
            pid if pid > 0 => Ok(Holder::ProcessTree(pid as u32)),
            negative => Err(ConnectionsError::NegativePid(negative)),
        }
    }
}

/// How many established TCP connections to `remote` (`IP:port`) `holder`
/// holds, in this network namespace.
pub fn connections_to(remote: &str, holder: Holder) -> Result<usize, ConnectionsError> {
    let remote: SocketAddr = remote
        .trim()
        .parse()
        .map_err(|_| ConnectionsError::NotAnAddress(remote.to_owned()))?;
    let held = inodes_held_by(holder)?;
    let sockets =
        established(&[PortFilter::Remote(remote.port())]).map_err(ConnectionsError::SocketTable)?;
    // Each socket once: a dump may list a socket that moved twice.
    let counted: HashSet<u32> = sockets
        .into_iter()
        .filter(|socket| socket.inode != 0 && held.contains(&socket.inode))
        .filter(|socket| same_address(socket.remote, remote))
        .map(|socket| socket.inode)
        .collect();
    Ok(counted.len())
}

/// Whether two addresses are one, an IPv4 address and its IPv6-mapped form
/// alike.
pub fn same_address(one: SocketAddr, other: SocketAddr) -> bool {
    one.port() == other.port() && same_ip(one.ip(), other.ip())
}

/// Whether two IP addresses are one, an IPv4 address and its IPv6-mapped
/// form alike.
pub fn same_ip(one: IpAddr, other: IpAddr) -> bool {
    as_v6(one) == as_v6(other)
}

fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The inodes of the sockets `holder` has open.
fn inodes_held_by(holder: Holder) -> Result<HashSet<u32>, ConnectionsError> {
    let pids = match holder {
        Holder::ThisProcess => vec![std::process::id()],
        Holder::ProcessTree(pid) => process_tree(pid)?,
    };
    let mut inodes = HashSet::new();
    for pid in pids {
        let descriptors = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
            Ok(descriptors) => descriptors,
            // A descendant that exited meanwhile holds nothing.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(ConnectionsError::Descriptors { pid, error }),
        };
        for descriptor in descriptors.flatten() {
            let Ok(target) = std::fs::read_link(descriptor.path()) else {
                continue;
            };
            let inode = target
                .to_str()
                .and_then(|target| target.strip_prefix("socket:["))
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|inode| inode.parse::<u32>().ok());
            inodes.extend(inode);
        }
    }
    Ok(inodes)
}

/// `root` and every process descended from it, from each process's parent
/// in `/proc/PID/stat`.
fn process_tree(root: u32) -> Result<Vec<u32>, ConnectionsError> {
    if !std::path::Path::new(&format!("/proc/{root}")).exists() {
        return Err(ConnectionsError::NoProcess(root));
    }
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let entries = std::fs::read_dir("/proc")
        .map_err(|error| ConnectionsError::Descriptors { pid: root, error })?;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(parent) = parent_in_stat(&stat) {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut tree = vec![root];
    let mut next = 0;
    while next < tree.len() {
        tree.extend(children.remove(&tree[next]).unwrap_or_default());
        next += 1;
    }
    Ok(tree)
}

/// The parent pid in a `/proc/PID/stat` line: the second field after the
/// command, which is in parentheses and may itself hold spaces and `)`.
fn parent_in_stat(stat: &str) -> Option<u32> {
    let after_command = &stat[stat.rfind(')')? + 1..];
    after_command.split_whitespace().nth(1)?.parse().ok()
}

/// Every established TCP socket (IPv4 and IPv6) whose port one of `filters`
/// names, in this network namespace, read over one netlink socket. A socket
/// that two filters name is listed twice.
pub fn established(filters: &[PortFilter]) -> std::io::Result<Vec<EstablishedSocket>> {
    let mut socket = netlink_sys::Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&netlink_sys::SocketAddr::new(0, 0))?;
    let mut found = Vec::new();
    for (&filter, family) in filters
        .iter()
        .flat_map(|filter| [(filter, AF_INET), (filter, AF_INET6)])
    {
        // The kernel skips sockets of another port.
        let mut socket_id = if family == AF_INET {
            SocketId::new_v4()
        } else {
            SocketId::new_v6()
        };
        match filter {
            PortFilter::Local(port) => socket_id.source_port = port,
            PortFilter::Remote(port) => socket_id.destination_port = port,
        }
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        let mut request = NetlinkMessage::new(
            header,
            SockDiagMessage::InetRequest(InetRequest {
                family,
                protocol: IPPROTO_TCP,
                extensions: ExtensionFlags::empty(),
                states: StateFlags::ESTABLISHED,
                socket_id,
            })
            .into(),
        );
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        socket.send(&bytes, 0)?;
        let mut received: Vec<u8> = Vec::with_capacity(1 << 16);
        'dump: loop {
            received.clear();
            let size = socket.recv(&mut received, 0)?.min(received.len());
            let mut offset = 0;
            while offset < size {
                let message =
                    NetlinkMessage::<SockDiagMessage>::deserialize(&received[offset..size])
                        .map_err(|error| std::io::Error::other(error.to_string()))?;
                let length = message.header.length as usize;
                match message.payload {
                    NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
                        let id = &response.header.socket_id;
                        found.push(EstablishedSocket {
                            local: SocketAddr::new(id.source_address, id.source_port),
                            remote: SocketAddr::new(id.destination_address, id.destination_port),
                            inode: response.header.inode,
                        });
                    }
                    NetlinkPayload::Done(_) => break 'dump,
                    NetlinkPayload::Error(error) => {
                        return Err(std::io::Error::other(format!(
                            "the kernel refused the socket dump: {error:?}"
                        )))
                    }
                    _ => {}
                }
                if length == 0 {
                    break;
                }
                // Messages in one datagram are aligned to 4 bytes.
                offset += (length + 3) & !3;
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn the_connections_this_process_holds_to_an_address_are_counted_and_no_others() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_it: Vec<_> = (0..3)
            .map(|_| TcpStream::connect(address).unwrap())
            .collect();
        let accepted: Vec<_> = (0..3).map(|_| listener.accept().unwrap()).collect();
        let _elsewhere = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        // The accepted ends are held here too, but their remote end is the
        // clients' ephemeral port: only the three clients count.
        assert_eq!(
            connections_to(&address.to_string(), Holder::ThisProcess).unwrap(),
            3
        );
        drop(to_it);
        assert_eq!(
            connections_to(&address.to_string(), Holder::ThisProcess).unwrap(),
            0
        );
        drop(accepted);
    }

    #[test]
    fn the_connections_of_a_named_process_and_its_children_are_theirs_not_this_ones() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        // A parent shell whose child holds one connection open (bash's
        // /dev/tcp), as an nginx master's worker would.
        let mut parent = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "bash -c 'exec 3<>/dev/tcp/{}/{}; sleep 30' & wait",
                address.ip(),
                address.port()
            ))
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("bash runs");
        let _accepted = listener.accept().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let counted = loop {
            let counted = connections_to(&address.to_string(), Holder::ProcessTree(parent.id()))
                .expect("counted");
            if counted == 1 || Instant::now() > deadline {
                break counted;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(counted, 1, "the child's connection counts for its parent");
        assert_eq!(
            connections_to(&address.to_string(), Holder::ThisProcess).unwrap(),
            0,
            "this process holds none of them"
        );
        // SAFETY: a plain signal to the group the test started.
        unsafe { libc::kill(-(parent.id() as i32), libc::SIGKILL) };
        let _ = parent.wait();
    }

    #[test]
    fn a_bad_address_or_a_missing_process_is_refused_by_name() {
        let bad = connections_to("esl-1.prod:8084", Holder::ThisProcess).unwrap_err();
        assert!(bad.is_refusal());
        assert!(bad.to_string().contains("write IP:port"), "{bad}");
        let gone = connections_to("127.0.0.1:1", Holder::ProcessTree(u32::MAX - 1)).unwrap_err();
        assert!(gone.is_refusal(), "{gone}");
        assert!(Holder::from_ffi(-4).is_err());
    }

    #[test]
    fn a_parent_is_read_past_a_command_with_spaces_and_parentheses() {
        assert_eq!(
            parent_in_stat("4242 (nginx: worker (x)) S 4241 4241 4241 0 -1"),
            Some(4241)
        );
    }
}
