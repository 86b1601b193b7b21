//! How many connections a worker's plugins have open through the sockets
//! the supervisor keeps: sampled while the worker lives, so that when it
//! dies the supervisor can say how many were cut with it.
//!
//! A connection accepted from a kept socket is an established TCP socket
//! with that socket's local address and an inode (one still in the backlog
//! has none). The supervisor never accepts, so each is held by a worker
//! (during an upgrade, the old one's count in too). They come from the
//! kernel's socket diagnostics (`sock_diag` over netlink), asking for the
//! established sockets of each kept port only.
//!
//! The count is an estimate: a dump is not a snapshot (one under load took
//! 50 to 100 ms here, the kernel walking thousands of sockets in TIME_WAIT,
//! while a proxied request lasts a few), so it counts the connections seen
//! established while it was read; and it is the last count, taken at most
//! [`super::SAMPLE_EVERY`] before a death. Counting only the sockets seen
//! in two dumps in a row would bound it by what was open at once, but
//! under load that counted none of ~40 open: too few to be useful.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::protocols::NETLINK_SOCK_DIAG;

/// The accepted connections open through each kept listener, summed by the
/// plugin the listener is kept for (every plugin keeping a socket is named,
/// with 0 if none is open). Empty when the kernel cannot be asked.
pub fn open_through(listeners: &[(SocketAddr, String)]) -> BTreeMap<String, usize> {
    let mut open: BTreeMap<String, usize> = listeners
        .iter()
        .map(|(_, plugin)| (plugin.clone(), 0))
        .collect();
    if listeners.is_empty() {
        return open;
    }
    let mut ports: Vec<u16> = listeners
        .iter()
        .map(|(listener, _)| listener.port())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    let Ok(sockets) = established_on(&ports) else {
        return BTreeMap::new();
    };
    // Each socket once: a dump may list a socket that moved twice. One in
    // the backlog has no inode yet: no worker holds it.
    let accepted: HashSet<(u32, &String)> = sockets
        .into_iter()
        .filter(|(_, inode)| *inode != 0)
        .filter_map(|(local, inode)| {
            let (_, plugin) = listeners.iter().find(|(listener, _)| {
                listener.port() == local.port()
                    && (listener.ip().is_unspecified() || to_v6(listener.ip()) == to_v6(local.ip()))
            })?;
            Some((inode, plugin))
        })
        .collect();
    for (_, plugin) in accepted {
        *open.entry(plugin.clone()).or_insert(0) += 1;
    }
    open
}

/// The local address and inode of every established TCP socket whose local
/// port is one of `ports`, IPv4 and IPv6, in this network namespace.
fn established_on(ports: &[u16]) -> std::io::Result<Vec<(SocketAddr, u32)>> {
    let mut socket = netlink_sys::Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&netlink_sys::SocketAddr::new(0, 0))?;
    let mut found = Vec::new();
    for (&port, family) in ports
        .iter()
        .flat_map(|port| [(port, AF_INET), (port, AF_INET6)])
    {
        // The kernel skips sockets of another local port.
        let mut socket_id = if family == AF_INET {
            SocketId::new_v4()
        } else {
            SocketId::new_v6()
        };
        socket_id.source_port = port;
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
                        found.push((
                            SocketAddr::new(id.source_address, id.source_port),
                            response.header.inode,
                        ));
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

/// An address in its IPv6 form (an IPv4 one mapped), to compare across
/// the two families.
fn to_v6(ip: std::net::IpAddr) -> std::net::Ipv6Addr {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connections_accepted_from_a_kept_listener_are_counted_for_its_plugin() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let clients: Vec<_> = (0..3)
            .map(|_| std::net::TcpStream::connect(address).unwrap())
            .collect();
        let accepted: Vec<_> = (0..3).map(|_| listener.accept().unwrap()).collect();
        // One more waits in the backlog, not accepted: not counted.
        let _waiting = std::net::TcpStream::connect(address).unwrap();
        let _elsewhere = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let open = open_through(&[
            (
                SocketAddr::from(([0, 0, 0, 0], address.port())),
                "traffik".to_owned(),
            ),
            (SocketAddr::from(([127, 0, 0, 1], 1)), "haproxy".to_owned()),
        ]);
        // The accepted three have the listener's port; the clients' ends
        // have ephemeral local ports.
        assert_eq!(open.get("traffik"), Some(&3), "{open:?}");
        assert_eq!(open.get("haproxy"), Some(&0), "{open:?}");
        drop((clients, accepted));
    }
}
