//! A TCP proxy in the test that can be cut: a node's connection to etcd
//! goes through it, so the test can cut the node off from the cluster store
//! (every open connection closed, new ones refused) and restore it, while
//! the node's process and its containers run on.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A proxy from a port of this machine to one target.
pub struct CuttableProxy {
    address: SocketAddr,
    open: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<TcpStream>>>,
}

impl CuttableProxy {
    /// Listens on a free port of this machine's address `ip` (the rig's
    /// bridge, say) and forwards every connection to `target`.
    pub fn start_on(ip: &str, target: SocketAddr) -> CuttableProxy {
        let listener = TcpListener::bind((ip, 0)).expect("a free port");
        let address = listener.local_addr().expect("its address");
        let open = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (accepting, tracked) = (open.clone(), connections.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if !accepting.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(target) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(client_copy), Ok(server_copy)) = (client.try_clone(), server.try_clone())
                {
                    let mut held = tracked.lock().unwrap();
                    held.push(client_copy);
                    held.push(server_copy);
                }
                pipe(&client, &server);
                pipe(&server, &client);
            }
        });
        CuttableProxy {
            address,
            open,
            connections,
        }
    }

    /// The URL a client reaches the target through.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Cuts every connection through it and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            let _ = connection.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for CuttableProxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Copies bytes from `from` to `to` on a thread of its own until either
/// side closes.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => {
                    if to.write_all(&buffer[..read]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
