//! How many connections a worker's plugins have open through the sockets
//! the supervisor keeps: sampled while the worker lives, so that when it
//! dies the supervisor can say how many were cut with it.
//!
//! A connection accepted from a kept socket is an established TCP entry
//! with that socket's local address and a socket inode (one still in the
//! backlog has none). The supervisor never accepts, so every such entry in
//! the worker's network namespace is held by a worker (during an upgrade,
//! the old one's count in too). The entries come from `/proc/<pid>/net`
//! (through `procfs`); matching them against the worker's descriptors
//! instead would race with connections that live a few milliseconds.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use procfs::net::TcpState;
use procfs::process::Process;

/// The established, accepted connections on each kept listener's address,
/// summed by the plugin the listener is kept for (every plugin keeping a
/// socket is named, with 0 if none is open). Empty when `/proc` cannot be
/// read (the worker is gone already).
pub fn open_through(pid: u32, listeners: &[(SocketAddr, String)]) -> BTreeMap<String, usize> {
    let mut open: BTreeMap<String, usize> = listeners
        .iter()
        .map(|(_, plugin)| (plugin.clone(), 0))
        .collect();
    if listeners.is_empty() {
        return open;
    }
    let Ok(process) = Process::new(pid as i32) else {
        return BTreeMap::new();
    };
    let entries = process
        .tcp()
        .unwrap_or_default()
        .into_iter()
        .chain(process.tcp6().unwrap_or_default());
    // The table is read in pieces while it changes: an entry that moved
    // may be read twice, so each socket counts once.
    let mut counted = std::collections::HashSet::new();
    for entry in entries {
        if entry.state != TcpState::Established || entry.inode == 0 || !counted.insert(entry.inode)
        {
            continue;
        }
        let through = listeners.iter().find(|(listener, _)| {
            listener.port() == entry.local_address.port()
                && (listener.ip().is_unspecified()
                    || to_v6(listener.ip()) == to_v6(entry.local_address.ip()))
        });
        if let Some((_, plugin)) = through {
            *open.entry(plugin.clone()).or_insert(0) += 1;
        }
    }
    open
}

/// An address in its IPv6 form (an IPv4 one mapped), to compare across
/// the two tables.
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
        let _elsewhere = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let open = open_through(
            std::process::id(),
            &[(
                SocketAddr::from(([0, 0, 0, 0], address.port())),
                "traffik".to_owned(),
            )],
        );
        // This process holds both ends: the accepted three match the
        // listener's port; the clients' ends have ephemeral local ports.
        assert_eq!(open.get("traffik"), Some(&3), "{open:?}");
        drop((clients, accepted));
    }
}
