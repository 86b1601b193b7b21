//! The listening sockets the host holds for plugins: the ABI 1.2 `listen`
//! and `unlisten` host services.
//!
//! A plugin asks for a TCP listener on an address and gets a descriptor of
//! a socket the host binds once and keeps. The same plugin asking for the
//! same address again (a reloaded or replaced instance) gets a descriptor
//! of the same socket, never a new bind: connections that arrive while one
//! instance stops and the next starts wait in the socket's backlog instead
//! of being refused. An address is held for one plugin; another plugin
//! asking for it is refused, naming the holder.
//!
//! Within a plugin, a socket asked for during a call about one block
//! (its `publish`, `drain` or `forget`: the host knows which block the
//! plugin thread is working for) belongs to that block: another block of
//! the same plugin asking for the address is refused, naming the holder,
//! until the holder is forgotten ([`ListenerTable::release_block`]). The
//! apply already refuses two blocks that claim one address; this keeps a
//! plugin that does not claim, or a store written before claims, from
//! handing one block's traffic to another.
//!
//! The table is the process's (there is one set of ports per process), so
//! it lives in one static: [`ListenerTable::process`]. Under `vd
//! controller`'s supervisor the sockets are the supervisor's: the table
//! asks it for each one through a [`keeper::KeeperClient`]
//! ([`ListenerTable::hold_through`]), so they outlive the worker.

pub mod keeper;

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};

use keeper::{Answer, Ask, KeeperClient};

use parking_lot::Mutex;
use socket2::{Domain, Protocol, Socket, Type};

/// How many connections wait in a held socket's backlog: the kernel's
/// ceiling (`net.core.somaxconn`) bounds it further.
pub const LISTEN_BACKLOG: i32 = 4096;

/// Why a plugin got no listener.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The address is not `IP:port`.
    #[error(
        "{given:?} is not an address to listen on — write it as IP:port (0.0.0.0:8084, [::]:8084)"
    )]
    BadAddress {
        /// What the plugin passed.
        given: String,
    },
    /// Another plugin holds the address.
    #[error("{address} is held for plugin {owner} — give this plugin's block another port, or remove the other block")]
    HeldByAnother {
        /// The address.
        address: SocketAddr,
        /// The plugin that holds it.
        owner: String,
    },
    /// Another block of the same plugin listens on the address.
    #[error("{address} is held for {holder} — two blocks never share a listener: give this block another address, or remove the other one")]
    HeldByBlock {
        /// The address.
        address: SocketAddr,
        /// The block that holds it: `deployment/prod/esl traffik "http" block`.
        holder: String,
    },
    /// The system refused the bind.
    #[error("could not listen on {address}: {source} — free the port (`ss -ltnp 'sport = :{port}'` shows who has it) or pick another", port = address.port())]
    Bind {
        /// The address.
        address: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
    /// The supervisor that keeps the sockets did not answer.
    #[error("the controller's supervisor, which keeps the listening sockets, did not answer: {source} — see the controller's log")]
    Keeper {
        /// What went wrong on the channel.
        source: std::io::Error,
    },
}

/// One socket the host holds, and the plugin it holds it for: `None` for
/// one handed to the host before any plugin asked (systemd's), which the
/// first plugin to ask for its address claims.
#[derive(Debug)]
struct Held {
    owner: Option<String>,
    /// The block it was asked for, when asked during a call about one.
    block: Option<Arc<str>>,
    socket: Socket,
}

thread_local! {
    /// The block the call running on this thread is about (the plugin
    /// thread sets it around each `publish`, `drain` and `forget`).
    static CALLING_BLOCK: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// Runs `call` with `block` as the block this thread's listens are for.
pub(crate) fn for_block<R>(block: Option<Arc<str>>, call: impl FnOnce() -> R) -> R {
    let previous = CALLING_BLOCK.with(|calling| calling.replace(block));
    let result = call();
    CALLING_BLOCK.with(|calling| *calling.borrow_mut() = previous);
    result
}

/// The block the call on this thread is about, if any.
fn calling_block() -> Option<Arc<str>> {
    CALLING_BLOCK.with(|calling| calling.borrow().clone())
}

/// The listening sockets held for plugins, by address.
#[derive(Debug, Default)]
pub struct ListenerTable {
    held: Mutex<HashMap<SocketAddr, Held>>,
    /// Set in a supervisor's worker: where the sockets come from.
    keeper: OnceLock<KeeperClient>,
}

impl ListenerTable {
    /// The process's table.
    pub fn process() -> &'static ListenerTable {
        static TABLE: OnceLock<ListenerTable> = OnceLock::new();
        TABLE.get_or_init(ListenerTable::default)
    }

    /// A new descriptor of the socket listening on `address` for `plugin`:
    /// the one already held for it, or one bound now (with `SO_REUSEADDR`,
    /// and `SO_REUSEPORT` when `reuse_port`), non-blocking and
    /// close-on-exec. The caller owns the descriptor.
    pub fn listen(
        &self,
        plugin: &str,
        address: &str,
        reuse_port: bool,
    ) -> Result<OwnedFd, ListenError> {
        let address = parse(address)?;
        self.listen_at(plugin, address, reuse_port)
            .map(|(socket, _)| socket)
    }

    /// Takes the sockets from `keeper` from now on instead of binding them
    /// (this process is a supervisor's worker); false if a keeper was
    /// already set.
    pub fn hold_through(&self, keeper: KeeperClient) -> bool {
        self.keeper.set(keeper).is_ok()
    }

    /// [`ListenerTable::listen`] of a parsed address; also the address the
    /// socket is bound to (the port chosen, for port 0).
    pub fn listen_at(
        &self,
        plugin: &str,
        address: SocketAddr,
        reuse_port: bool,
    ) -> Result<(OwnedFd, SocketAddr), ListenError> {
        let block = calling_block();
        let mut held = self.held.lock();
        if let Some(existing) = held.get_mut(&address) {
            match &existing.owner {
                Some(owner) if owner != plugin => {
                    return Err(ListenError::HeldByAnother {
                        address,
                        owner: owner.clone(),
                    })
                }
                Some(_) => {}
                None => {
                    tracing::info!(plugin, %address, "the plugin claims a socket handed to the host");
                    existing.owner = Some(plugin.to_owned());
                }
            }
            match (&existing.block, &block) {
                (Some(holder), Some(asker)) if holder != asker => {
                    return Err(ListenError::HeldByBlock {
                        address,
                        holder: holder.to_string(),
                    })
                }
                (None, Some(_)) => existing.block.clone_from(&block),
                _ => {}
            }
            return existing
                .socket
                .try_clone()
                .map(|socket| (OwnedFd::from(socket), address))
                .map_err(|source| ListenError::Bind { address, source });
        }
        let socket = match self.keeper.get() {
            Some(keeper) => Self::ask_keeper(keeper, plugin, address, reuse_port)?,
            None => {
                bind(address, reuse_port).map_err(|source| ListenError::Bind { address, source })?
            }
        };
        let handed = socket
            .try_clone()
            .map_err(|source| ListenError::Bind { address, source })?;
        // Held under the address it got: port 0 asks for any port, and a
        // later ask names the one it got.
        let address = socket
            .local_addr()
            .ok()
            .and_then(|bound| bound.as_socket())
            .unwrap_or(address);
        tracing::info!(plugin, %address, "listening for the plugin");
        held.insert(
            address,
            Held {
                owner: Some(plugin.to_owned()),
                block,
                socket,
            },
        );
        Ok((handed.into(), address))
    }

    /// The keeper's socket for `plugin` on `address`.
    fn ask_keeper(
        keeper: &KeeperClient,
        plugin: &str,
        address: SocketAddr,
        reuse_port: bool,
    ) -> Result<Socket, ListenError> {
        let ask = Ask::Listen {
            plugin: plugin.to_owned(),
            address,
            reuse_port,
        };
        match keeper.ask(&ask) {
            Ok((Answer::Listening { .. }, Some(socket))) => Ok(Socket::from(socket)),
            Ok((Answer::Refused(refusal), _)) => Err(refusal.into()),
            Ok((answer, _)) => Err(ListenError::Keeper {
                source: std::io::Error::other(format!("it answered {answer:?} with no socket")),
            }),
            Err(source) => Err(ListenError::Keeper { source }),
        }
    }

    /// Tells the keeper, if there is one; a keeper that cannot be told is
    /// logged (its sockets are closed when the supervisor ends).
    fn tell_keeper(&self, ask: Ask) {
        if let Some(keeper) = self.keeper.get() {
            if let Err(error) = keeper.ask(&ask) {
                tracing::warn!(%error, ?ask, "the supervisor could not be told to close a listener");
            }
        }
    }

    /// Closes the host's copy of the socket `plugin` holds on `address`;
    /// the port is free once the plugin's own descriptors are closed too.
    /// An address the plugin does not hold is ignored.
    pub fn unlisten(&self, plugin: &str, address: &str) {
        if let Ok(address) = parse(address) {
            self.unlisten_at(plugin, address);
        }
    }

    /// [`ListenerTable::unlisten`] of a parsed address.
    pub fn unlisten_at(&self, plugin: &str, address: SocketAddr) {
        let mut held = self.held.lock();
        if held
            .get(&address)
            .is_some_and(|existing| existing.owner.as_deref() == Some(plugin))
        {
            held.remove(&address);
            tracing::info!(plugin, %address, "no longer listening for the plugin");
            self.tell_keeper(Ask::Unlisten {
                plugin: plugin.to_owned(),
                address,
            });
        }
    }

    /// `block` of `plugin` was forgotten: the sockets it listened on stay
    /// held for the plugin (until it gives them back), but another of its
    /// blocks may now take them.
    pub fn release_block(&self, plugin: &str, block: &str) {
        for existing in self.held.lock().values_mut() {
            if existing.owner.as_deref() == Some(plugin) && existing.block.as_deref() == Some(block)
            {
                existing.block = None;
            }
        }
    }

    /// Closes every socket held for `plugin` (it was removed): a client is
    /// then refused at once instead of waiting in a backlog no instance
    /// will ever accept from.
    pub fn release_all(&self, plugin: &str) {
        let mut held = self.held.lock();
        let before = held.len();
        held.retain(|_, existing| existing.owner.as_deref() != Some(plugin));
        if held.len() != before {
            tracing::info!(
                plugin,
                released = before - held.len(),
                "the plugin's sockets are closed"
            );
        }
        self.tell_keeper(Ask::ReleaseAll {
            plugin: plugin.to_owned(),
        });
    }

    /// Closes every socket held for a plugin not in `plugins`: called with
    /// the plugins a worker loaded, it closes those of a plugin that was
    /// quarantined or is gone, which would never accept again.
    pub fn retain_only(&self, plugins: &[String]) {
        let mut held = self.held.lock();
        held.retain(|address, existing| {
            let Some(owner) = &existing.owner else {
                // Not claimed yet: kept for the plugin that will ask.
                return true;
            };
            let keep = plugins.contains(owner);
            if !keep {
                tracing::info!(plugin = %owner, %address, "the plugin is not loaded: its socket is closed");
            }
            keep
        });
        self.tell_keeper(Ask::Retain {
            plugins: plugins.to_vec(),
        });
    }

    /// Holds `socket`, already listening (systemd's, passed in
    /// `LISTEN_FDS`), for the first plugin that asks for its address; the
    /// address it listens on.
    pub fn adopt(&self, socket: OwnedFd) -> std::io::Result<SocketAddr> {
        let socket = Socket::from(socket);
        let address = socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| std::io::Error::other("not an IP socket"))?;
        socket.set_nonblocking(true)?;
        self.held.lock().insert(
            address,
            Held {
                owner: None,
                block: None,
                socket,
            },
        );
        Ok(address)
    }

    /// Every address held, with the plugin it is held for.
    pub fn held(&self) -> Vec<(SocketAddr, String)> {
        let mut held: Vec<(SocketAddr, String)> = self
            .held
            .lock()
            .iter()
            .filter_map(|(address, held)| Some((*address, held.owner.clone()?)))
            .collect();
        held.sort();
        held
    }

    /// The addresses held for `plugin`.
    pub fn held_for(&self, plugin: &str) -> Vec<SocketAddr> {
        let mut addresses: Vec<SocketAddr> = self
            .held
            .lock()
            .iter()
            .filter(|(_, held)| held.owner.as_deref() == Some(plugin))
            .map(|(address, _)| *address)
            .collect();
        addresses.sort();
        addresses
    }
}

/// `address` as `IP:port`.
fn parse(address: &str) -> Result<SocketAddr, ListenError> {
    address.trim().parse().map_err(|_| ListenError::BadAddress {
        given: address.to_owned(),
    })
}

/// A TCP socket bound to `address` and listening.
fn bind(address: SocketAddr, reuse_port: bool) -> std::io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if address.is_ipv6() {
        socket.set_only_v6(false).ok();
    }
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// The inode of the socket behind a descriptor: equal for two
    /// descriptors of one socket.
    fn inode(fd: &OwnedFd) -> u64 {
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: a valid descriptor and a buffer of the right type.
        let done = unsafe { libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) };
        assert_eq!(done, 0);
        // SAFETY: fstat filled it.
        unsafe { stat.assume_init() }.st_ino
    }

    #[test]
    fn the_same_plugin_asking_again_gets_the_same_socket_and_another_plugin_is_refused() {
        let table = ListenerTable::default();
        let first = table.listen("traffik", "127.0.0.1:0", false).unwrap();
        let port = std::net::TcpListener::from(first.try_clone().unwrap())
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let again = table.listen("traffik", &address, false).unwrap();
        assert_eq!(inode(&first), inode(&again), "the same socket");
        let other = table.listen("haproxy", &address, false).unwrap_err();
        assert_eq!(
            other.to_string(),
            format!("{address} is held for plugin traffik — give this plugin's block another port, or remove the other block")
        );
        assert_eq!(table.held_for("traffik"), [address.parse().unwrap()]);
    }

    #[test]
    fn a_socket_asked_for_one_block_is_refused_to_another_until_the_first_is_forgotten() {
        let table = ListenerTable::default();
        let one: Arc<str> = Arc::from("deployment/dupx/one traffik \"http\" block");
        let two: Arc<str> = Arc::from("deployment/dupx/two traffik \"http\" block");
        let first = for_block(Some(one.clone()), || {
            table.listen("traffik", "127.0.0.1:0", false)
        })
        .unwrap();
        let address = std::net::TcpListener::from(first.try_clone().unwrap())
            .local_addr()
            .unwrap()
            .to_string();
        // The same block again (a replaced instance): the same socket.
        let again = for_block(Some(one.clone()), || {
            table.listen("traffik", &address, false)
        })
        .unwrap();
        assert_eq!(inode(&first), inode(&again));
        let refused = for_block(Some(two.clone()), || {
            table.listen("traffik", &address, false)
        })
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!("{address} is held for deployment/dupx/one traffik \"http\" block — two blocks never share a listener: give this block another address, or remove the other one")
        );
        // The holder is forgotten: the other block may take the socket.
        table.release_block("traffik", &one);
        let taken = for_block(Some(two.clone()), || {
            table.listen("traffik", &address, false)
        })
        .unwrap();
        assert_eq!(
            inode(&first),
            inode(&taken),
            "the held socket, not a new bind"
        );
        assert!(for_block(Some(one), || table.listen("traffik", &address, false)).is_err());
    }

    #[test]
    fn a_connection_made_while_no_instance_accepts_waits_in_the_backlog() {
        let table = ListenerTable::default();
        let socket = table.listen("traffik", "127.0.0.1:0", false).unwrap();
        let listener = std::net::TcpListener::from(socket);
        let address = listener.local_addr().unwrap();
        // The instance stops: its descriptor is closed; the host still
        // holds the socket.
        drop(listener);
        let mut client = std::net::TcpStream::connect(address).expect("not refused");
        // The next instance asks again and accepts the waiting connection.
        let again = std::net::TcpListener::from(
            table
                .listen("traffik", &address.to_string(), false)
                .unwrap(),
        );
        again.set_nonblocking(false).unwrap();
        let (mut accepted, _) = again.accept().unwrap();
        use std::io::{Read, Write};
        client.write_all(b"ping").unwrap();
        let mut read = [0u8; 4];
        accepted.read_exact(&mut read).unwrap();
        assert_eq!(&read, b"ping");
    }

    #[test]
    fn unlisten_frees_the_port_and_a_bad_address_is_refused_with_the_form() {
        let table = ListenerTable::default();
        let socket = table.listen("traffik", "127.0.0.1:0", false).unwrap();
        let address = std::net::TcpListener::from(socket).local_addr().unwrap();
        table.unlisten("haproxy", &address.to_string());
        assert_eq!(
            table.held_for("traffik").len(),
            1,
            "only its holder frees it"
        );
        table.unlisten("traffik", &address.to_string());
        assert!(table.held_for("traffik").is_empty());
        std::net::TcpListener::bind(address).expect("the port is free again");
        let socket = table.listen("traffik", "127.0.0.1:0", false).unwrap();
        let address = std::net::TcpListener::from(socket).local_addr().unwrap();
        table.release_all("traffik");
        assert!(table.held_for("traffik").is_empty());
        std::net::TcpStream::connect(address).expect_err("refused once released");
        let bad = table.listen("traffik", "8084", false).unwrap_err();
        assert!(bad.to_string().contains("write it as IP:port"), "{bad}");
    }
}
