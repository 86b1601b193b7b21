//! How many connections a worker's plugins have open through the sockets
//! the supervisor keeps: sampled while the worker lives, so that when it
//! dies the supervisor can say how many were cut with it.
//!
//! A connection accepted from a kept socket is an established TCP socket
//! with that socket's local address and an inode (one still in the backlog
//! has none). The supervisor never accepts, so each is held by a worker
//! (during an upgrade, the old one's count in too). They come from the
//! kernel's socket diagnostics (`sock_diag` over netlink), asking for the
//! established sockets of each kept port only
//! ([`voodu_plugin_host::socket_table`]).
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

use voodu_plugin_host::socket_table::{established, same_ip, PortFilter};

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
    let filters: Vec<PortFilter> = ports.into_iter().map(PortFilter::Local).collect();
    let Ok(sockets) = established(&filters) else {
        return BTreeMap::new();
    };
    // Each socket once: a dump may list a socket that moved twice. One in
    // the backlog has no inode yet: no worker holds it.
    let accepted: HashSet<(u32, &String)> = sockets
        .into_iter()
        .filter(|socket| socket.inode != 0)
        .filter_map(|socket| {
            let (_, plugin) = listeners.iter().find(|(listener, _)| {
                listener.port() == socket.local.port()
                    && (listener.ip().is_unspecified() || same_ip(listener.ip(), socket.local.ip()))
            })?;
            Some((socket.inode, plugin))
        })
        .collect();
    for (_, plugin) in accepted {
        *open.entry(plugin.clone()).or_insert(0) += 1;
    }
    open
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
