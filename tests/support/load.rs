//! Clients through a balancer: one HTTP request and its answering replica,
//! and a load of clients that count what was answered and what failed.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One HTTP request through traffik; the replica id that answered.
pub fn request(through: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&through, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: traffik\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .ok_or_else(|| std::io::Error::other(format!("no HTTP body in {answer:?}")))?;
    if !answer.starts_with("HTTP/1.1 200") || body.trim().is_empty() {
        return Err(std::io::Error::other(format!("bad answer {answer:?}")));
    }
    Ok(body.trim().to_owned())
}

/// The replicas that answer through `through`, once `expected` of them
/// do: rounds of 30 requests, every one answered, for up to 5 s. A
/// replica that refused a connect before it listened is left out by
/// traffik for a second (its ejection), so a single round may miss it.
pub fn replicas_answering(through: SocketAddr, expected: usize) -> HashSet<String> {
    voodu_tests::wait_until(Duration::from_secs(5), Duration::from_millis(200), || {
        let seen = (0..30)
            .map(|_| request(through))
            .collect::<std::io::Result<HashSet<String>>>()
            .map_err(|error| format!("a request failed: {error}"))?;
        if seen.len() == expected {
            Ok(seen)
        } else {
            Err(format!("{} of {expected} answer: {seen:?}", seen.len()))
        }
    })
}

/// Clients sending requests through traffik until stopped, counting what
/// was answered and what failed.
pub struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    errors: Arc<parking_lot::Mutex<Vec<String>>>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    /// Starts `clients` threads sending requests through `through`.
    pub fn start(clients: usize, through: SocketAddr) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let clients = (0..clients)
            .map(|_| {
                let (stop, ok, failed, refused, errors) = (
                    stop.clone(),
                    ok.clone(),
                    failed.clone(),
                    refused.clone(),
                    errors.clone(),
                );
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match request(through) {
                            Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                            Err(error) => {
                                if error.kind() == std::io::ErrorKind::ConnectionRefused {
                                    refused.fetch_add(1, Ordering::Relaxed);
                                    // Nothing listens: do not spin.
                                    std::thread::sleep(Duration::from_millis(1));
                                }
                                errors.lock().push(error.to_string());
                                failed.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            refused,
            errors,
            clients,
        }
    }

    /// The requests answered so far.
    pub fn answered(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    /// The requests failed so far.
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::Relaxed)
    }

    /// The requests refused so far (nothing listened), counted in
    /// [`Load::failed`] too.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::Relaxed)
    }

    /// The first errors so far.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().iter().take(5).cloned().collect()
    }

    /// Stops the clients: (answered, failed, the first errors).
    pub fn stop(mut self) -> (usize, usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for client in std::mem::take(&mut self.clients) {
            client.join().expect("a client thread");
        }
        (self.answered(), self.failed(), self.errors())
    }
}
