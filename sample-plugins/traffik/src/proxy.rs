//! The balancers: one TCP listener per block, on traffik's own tokio
//! runtime (never the host's). Each publish swaps a block's backend set in
//! one step; a drain stops new connections to a replica at once and counts
//! down its open ones; a forget closes the listener and frees the port.
//! With a 1.2 host, what traffik carries is reported as its own metrics
//! every [`REPORT_EVERY`] ([`Tally`]).
//!
//! A replica that does not answer a connect within [`CONNECT_TIMEOUT`] (a
//! dead host's packets vanish) costs the connection only that wait: it is
//! tried on another replica, as HAProxy's `retries` and `redispatch` do,
//! and the silent one is left out of new choices for a while that doubles
//! with each failure in a row ([`EJECTION_BASE`] to [`EJECTION_MAX`], as
//! Envoy's outlier detection), then tried again by the next connection;
//! one that answers is chosen as before. When every replica is left out,
//! they are all tried: a guess beats refusing. Only a failure of a
//! replica that was chosen while it was not left out counts as one more
//! in a row: a burst of connections that chose it before its first
//! failure was known is one failure, not a row of them.
//!
//! A replica that is published the moment its container runs may not
//! listen yet. When every published replica refused a connection, the
//! client is not closed: traffik waits a moment ([`RETRY_PAUSE_FIRST`],
//! doubling to [`RETRY_PAUSE_MAX`]) and tries them all again, for up to
//! [`CONNECT_BUDGET`] in all, as HAProxy's `retries` with its `timeout
//! connect` do. A block with no replica published closes the client at
//! once: nothing is starting that it could wait for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use voodu_plugin_abi::{Host, ListenError, ListenOptions};

use crate::config::{Balance, TraffikSpec};

/// How long a new connection may wait, over every try, for a replica to
/// take it before it is closed.
pub const CONNECT_BUDGET: Duration = Duration::from_secs(3);
/// The first pause before every replica is tried again, once each refused
/// a connection; each further round doubles it.
pub const RETRY_PAUSE_FIRST: Duration = Duration::from_millis(25);
/// The longest pause between two rounds of tries.
pub const RETRY_PAUSE_MAX: Duration = Duration::from_millis(400);
/// How long one connection attempt to a replica may take: a connect on a
/// network the nodes share answers within milliseconds, so a replica
/// silent for this long is taken for gone and the next one is tried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a replica that failed a connect is left out of new choices
/// the first time; each failure in a row doubles it.
pub const EJECTION_BASE: Duration = Duration::from_secs(1);
/// The longest a failing replica is left out at a time.
pub const EJECTION_MAX: Duration = Duration::from_secs(10);

/// Milliseconds since traffik's first use of the clock: the unit of
/// [`Backend`]'s ejections, kept in an atomic.
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// How often traffik reports its metrics to the host.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What traffik carried since its last report, over every block; the
/// reporter takes each count and adds it to the host's counter.
#[derive(Debug, Default)]
pub struct Tally {
    /// Client connections accepted.
    accepted: AtomicU64,
    /// Client connections no replica took (none answered, or none is
    /// published).
    failed: AtomicU64,
    /// Bytes read from clients and sent on to replicas.
    received: AtomicU64,
    /// Bytes read from replicas and sent back to clients.
    sent: AtomicU64,
}

impl Tally {
    /// Reports to `host`: the connections carried now (a gauge), and what
    /// was counted since the last report (counters).
    fn report(&self, host: &Host, carrying: usize) {
        // A host that takes no metrics (older than 1.2) is told nothing.
        if host.gauge("connections_open", carrying as f64).is_err() {
            return;
        }
        for (name, count) in [
            ("connections_total", &self.accepted),
            ("connections_failed_total", &self.failed),
            ("bytes_received_total", &self.received),
            ("bytes_sent_total", &self.sent),
        ] {
            let _ = host.count(name, count.swap(0, Ordering::Relaxed) as f64);
        }
    }
}

/// One replica behind a balancer.
#[derive(Debug)]
pub struct Backend {
    /// The replica's id.
    pub replica_id: String,
    /// Where it listens.
    pub address: SocketAddr,
    draining: AtomicBool,
    open: AtomicUsize,
    /// Connects failed in a row.
    failures: AtomicU64,
    /// Until when ([`now_ms`]) new connections leave it out; 0: never.
    ejected_until_ms: AtomicU64,
}

impl Backend {
    /// A replica at `address`, answering, with nothing open.
    fn new(replica_id: String, address: SocketAddr) -> Backend {
        Backend {
            replica_id,
            address,
            draining: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            failures: AtomicU64::new(0),
            ejected_until_ms: AtomicU64::new(0),
        }
    }

    /// Whether new connections leave it out now: its last connect failed,
    /// and its ejection has not run out.
    pub fn is_ejected(&self) -> bool {
        now_ms() < self.ejected_until_ms.load(Ordering::SeqCst)
    }

    /// A connect to it failed: it is left out for [`EJECTION_BASE`],
    /// doubled for each failure in a row before, at most [`EJECTION_MAX`].
    /// A connection that chose it before it was left out adds nothing: it
    /// fails for the reason already counted.
    fn connect_failed(&self) {
        if self.is_ejected() {
            return;
        }
        let before = self.failures.fetch_add(1, Ordering::SeqCst);
        let ejection = EJECTION_BASE
            .saturating_mul(1u32 << before.min(8))
            .min(EJECTION_MAX);
        let until =
            now_ms().saturating_add(u64::try_from(ejection.as_millis()).unwrap_or(u64::MAX));
        self.ejected_until_ms.store(until, Ordering::SeqCst);
    }

    /// A connect to it succeeded: it is chosen as before.
    fn connected(&self) {
        if self.failures.swap(0, Ordering::SeqCst) != 0 {
            self.ejected_until_ms.store(0, Ordering::SeqCst);
        }
    }
    /// Connections to this replica that are open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Whether new connections avoid it.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

/// Counts one open connection for as long as it lives.
struct OpenConnection(Arc<Backend>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One block's backend set.
#[derive(Debug)]
struct Pool {
    balance: Balance,
    generation: Mutex<u64>,
    backends: RwLock<Arc<Vec<Arc<Backend>>>>,
    next: AtomicUsize,
}

impl Pool {
    /// Picks a replica for a new connection, avoiding draining ones and
    /// those in `tried`, and counts the connection as open on it.
    fn pick(&self, tried: &[SocketAddr]) -> Option<OpenConnection> {
        let backends = self.backends.read().clone();
        // A replica may start draining between the choice and the count:
        // then choose again, among the others.
        for _ in 0..=backends.len() {
            let untried: Vec<&Arc<Backend>> = backends
                .iter()
                .filter(|backend| !backend.is_draining() && !tried.contains(&backend.address))
                .collect();
            // Left out while ejected, unless every one is.
            let answering: Vec<&Arc<Backend>> = untried
                .iter()
                .copied()
                .filter(|backend| !backend.is_ejected())
                .collect();
            let candidates = if answering.is_empty() {
                untried
            } else {
                answering
            };
            let chosen = match self.balance {
                Balance::RoundRobin if !candidates.is_empty() => {
                    candidates[self.next.fetch_add(1, Ordering::Relaxed) % candidates.len()]
                }
                Balance::LeastConn => *candidates.iter().min_by_key(|b| b.open_connections())?,
                Balance::RoundRobin => return None,
            };
            chosen.open.fetch_add(1, Ordering::SeqCst);
            if !chosen.is_draining() {
                return Some(OpenConnection(chosen.clone()));
            }
            chosen.open.fetch_sub(1, Ordering::SeqCst);
        }
        None
    }
}

/// What a drain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainState {
    /// No open connection is left.
    Drained,
    /// This many connections are still open.
    Open(usize),
}

struct Listener {
    bind: SocketAddr,
    pool: Arc<Pool>,
    task: JoinHandle<()>,
}

/// Every block's balancer, on one runtime.
pub struct Balancers {
    runtime: tokio::runtime::Runtime,
    listeners: HashMap<String, Listener>,
    /// The host that holds the listening sockets (ABI 1.2), or `None` to
    /// bind them here.
    host: Option<Host>,
    /// The client connections being carried now, over every block.
    carrying: Arc<AtomicUsize>,
    /// What was carried since the last report to the host.
    tally: Arc<Tally>,
}

/// Counts one carried connection while it lives.
struct Carrying(Arc<AtomicUsize>);

impl Carrying {
    fn start(count: &Arc<AtomicUsize>) -> Carrying {
        count.fetch_add(1, Ordering::SeqCst);
        Carrying(count.clone())
    }
}

impl Drop for Carrying {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Balancers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancers")
            .field("blocks", &self.listeners.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Balancers {
    /// Starts traffik's own runtime.
    pub fn new() -> std::io::Result<Balancers> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("traffik")
            .enable_all()
            .build()?;
        Ok(Balancers {
            runtime,
            listeners: HashMap::new(),
            host: None,
            carrying: Arc::new(AtomicUsize::new(0)),
            tally: Arc::new(Tally::default()),
        })
    }

    /// Starts traffik's own runtime, asking `host` for its listening
    /// sockets: a 1.2 host holds them, so a reloaded or replaced traffik
    /// gets the same sockets and no connection is refused meanwhile. An
    /// older host holds none, and traffik binds them itself.
    /// Reports its metrics to `host` every [`REPORT_EVERY`] too.
    pub fn with_host(host: Host) -> std::io::Result<Balancers> {
        let mut balancers = Balancers::new()?;
        balancers.host = Some(host);
        let (tally, carrying) = (balancers.tally.clone(), balancers.carrying.clone());
        balancers.runtime.spawn(async move {
            let mut every = tokio::time::interval(REPORT_EVERY);
            loop {
                every.tick().await;
                tally.report(&host, carrying.load(Ordering::Relaxed));
            }
        });
        Ok(balancers)
    }

    /// The address a block's balancer listens on, once it does.
    pub fn local_address(&self, block: &str) -> Option<SocketAddr> {
        self.listeners.get(block).map(|listener| listener.bind)
    }

    /// Replaces a block's backend set with `endpoints` (replica id,
    /// `IP:port`), starting its listener on first use. A generation older
    /// than the last applied one is ignored (returns `Ok(false)`).
    pub fn publish(
        &mut self,
        block: &str,
        spec: &TraffikSpec,
        generation: u64,
        endpoints: &[(String, String)],
    ) -> Result<bool, String> {
        let Some(listener) = self.listeners.get(block) else {
            // The first set: the listener starts accepting with it, never
            // with an empty pool (a client accepted then would be closed
            // unanswered).
            let backends = backends_for(&[], endpoints)?;
            let listener = self.listen(spec, backends, generation)?;
            self.listeners.insert(block.to_owned(), listener);
            return Ok(true);
        };
        let pool = &listener.pool;
        let mut applied = pool.generation.lock();
        if generation < *applied {
            return Ok(false);
        }
        let current = pool.backends.read().clone();
        let next = backends_for(&current, endpoints)?;
        *pool.backends.write() = Arc::new(next);
        *applied = generation;
        Ok(true)
    }

    fn listen(
        &self,
        spec: &TraffikSpec,
        backends: Vec<Arc<Backend>>,
        generation: u64,
    ) -> Result<Listener, String> {
        let bind: SocketAddr = spec
            .bind
            .parse()
            .map_err(|_| format!("bind {:?} is not an address", spec.bind))?;
        let asked = self.host.map(|host| {
            host.listen(
                bind,
                ListenOptions {
                    reuse_port: spec.reuse_port,
                },
            )
        });
        let std_listener = match asked {
            Some(Ok(listener)) => listener,
            Some(Err(ListenError::Refused(reason))) => {
                return Err(format!("cannot listen on {bind}: {reason}"))
            }
            Some(Err(ListenError::Unsupported)) | None => bind_listener(bind, spec.reuse_port)
                .map_err(|error| format!("cannot listen on {bind}: {error}"))?,
        };
        std_listener
            .set_nonblocking(true)
            .map_err(|error| error.to_string())?;
        let bound = std_listener
            .local_addr()
            .map_err(|error| error.to_string())?;
        let pool = Arc::new(Pool {
            balance: spec.balance,
            generation: Mutex::new(generation),
            backends: RwLock::new(Arc::new(backends)),
            next: AtomicUsize::new(0),
        });
        let serving = pool.clone();
        let carrying = self.carrying.clone();
        let tally = self.tally.clone();
        let task = self.runtime.spawn(async move {
            let Ok(listener) = TcpListener::from_std(std_listener) else {
                return;
            };
            loop {
                match listener.accept().await {
                    Ok((client, _)) => {
                        let carried = Carrying::start(&carrying);
                        tally.accepted.fetch_add(1, Ordering::Relaxed);
                        let (pool, tally) = (serving.clone(), tally.clone());
                        tokio::spawn(async move {
                            proxy(client, pool, &tally).await;
                            drop(carried);
                        });
                    }
                    // Out of file descriptors, say: back off rather than spin.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        });
        Ok(Listener {
            bind: bound,
            pool,
            task,
        })
    }

    /// Stops new connections to `replica_id` and says whether any are still
    /// open. An unknown replica has nothing to drain.
    pub fn drain(&self, block: &str, replica_id: &str) -> DrainState {
        let Some(listener) = self.listeners.get(block) else {
            return DrainState::Drained;
        };
        let backends = listener.pool.backends.read().clone();
        let Some(backend) = backends.iter().find(|b| b.replica_id == replica_id) else {
            return DrainState::Drained;
        };
        backend.draining.store(true, Ordering::SeqCst);
        match backend.open_connections() {
            0 => DrainState::Drained,
            open => DrainState::Open(open),
        }
    }

    /// Closes a block's listener and frees its port.
    pub fn forget(&mut self, block: &str) -> bool {
        match self.listeners.remove(block) {
            Some(listener) => {
                listener.task.abort();
                // Wait for the listener to close, so the port is free when
                // forget returns.
                let _ = self.runtime.block_on(listener.task);
                if let Some(host) = self.host {
                    host.unlisten(listener.bind);
                }
                true
            }
            None => false,
        }
    }

    /// Stops accepting on every block's listener at once, then lets the
    /// connections being carried finish for up to `grace`; returns how many
    /// were still open when it ran out. With a host that holds the sockets,
    /// connections that arrive meanwhile wait for the next instance.
    pub fn stop_accepting_and_finish(&mut self, grace: Duration) -> usize {
        for (_, listener) in self.listeners.drain() {
            listener.task.abort();
            let _ = self.runtime.block_on(listener.task);
        }
        let deadline = std::time::Instant::now() + grace;
        loop {
            let open = self.carrying.load(Ordering::SeqCst);
            if open == 0 || std::time::Instant::now() >= deadline {
                return open;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The backends of a block, for tests and logs.
    pub fn backends(&self, block: &str) -> Vec<Arc<Backend>> {
        self.listeners
            .get(block)
            .map(|listener| listener.pool.backends.read().to_vec())
            .unwrap_or_default()
    }
}

/// The backends for `endpoints` (replica id, `IP:port`), keeping the
/// counters and drain state of those already in `current`.
fn backends_for(
    current: &[Arc<Backend>],
    endpoints: &[(String, String)],
) -> Result<Vec<Arc<Backend>>, String> {
    let mut next = Vec::with_capacity(endpoints.len());
    for (replica_id, address) in endpoints {
        let address: SocketAddr = address.parse().map_err(|_| {
            format!("endpoint {address:?} is not IP:port — traffik needs ip addressing")
        })?;
        let kept = current
            .iter()
            .find(|backend| backend.replica_id == *replica_id && backend.address == address)
            .cloned();
        next.push(kept.unwrap_or_else(|| Arc::new(Backend::new(replica_id.clone(), address))));
    }
    Ok(next)
}

/// Carries one client connection to a replica, trying another replica if
/// one refuses, and every one again after a pause when all refused, for up
/// to [`CONNECT_BUDGET`]; counts it in `tally`.
async fn proxy(mut client: TcpStream, pool: Arc<Pool>, tally: &Tally) {
    let deadline = tokio::time::Instant::now() + CONNECT_BUDGET;
    let mut tried = Vec::new();
    let mut pause = RETRY_PAUSE_FIRST;
    loop {
        let Some(open) = pool.pick(&tried) else {
            // Nothing published (or all draining): nothing to wait for.
            // Else every replica refused: they may be starting.
            if tried.is_empty() || tokio::time::Instant::now() + pause >= deadline {
                break;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_PAUSE_MAX);
            tried.clear();
            continue;
        };
        let address = open.0.address;
        let attempt =
            CONNECT_TIMEOUT.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(attempt, TcpStream::connect(address)).await {
            Ok(Ok(mut server)) => {
                open.0.connected();
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let Ok((received, sent)) =
                    tokio::io::copy_bidirectional(&mut client, &mut server).await
                {
                    tally.received.fetch_add(received, Ordering::Relaxed);
                    tally.sent.fetch_add(sent, Ordering::Relaxed);
                }
                drop(open);
                return;
            }
            // A refusal, or silence for the whole of CONNECT_TIMEOUT: the
            // replica's fault. Silence cut short by the budget is not.
            Ok(Err(_)) => {
                open.0.connect_failed();
                tried.push(address);
            }
            Err(_) => {
                if attempt == CONNECT_TIMEOUT {
                    open.0.connect_failed();
                }
                tried.push(address);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
    }
    tally.failed.fetch_add(1, Ordering::Relaxed);
}

/// A listening socket on `bind`; with `reuse_port`, shared with the other
/// sockets bound there with it (`SO_REUSEPORT`).
fn bind_listener(bind: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::TcpListener> {
    if !reuse_port {
        return std::net::TcpListener::bind(bind);
    }
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(bind),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&bind.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A backend that answers every connection with its id, after the client
    /// sends one byte.
    fn backend(id: &'static str) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut byte = [0u8; 1];
                    if stream.read_exact(&mut byte).is_ok() {
                        let _ = stream.write_all(id.as_bytes());
                    }
                });
            }
        });
        address
    }

    fn ask(through: SocketAddr) -> String {
        let mut stream = std::net::TcpStream::connect(through).unwrap();
        stream.write_all(b"?").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    fn spec() -> TraffikSpec {
        TraffikSpec {
            port: 1,
            bind: "127.0.0.1:0".into(),
            balance: Balance::RoundRobin,
            addressing: voodu_plugin_abi::messages::Addressing::Ip,
            reuse_port: false,
        }
    }

    #[test]
    fn connections_are_spread_over_every_published_replica() {
        let mut balancers = Balancers::new().unwrap();
        let endpoints = vec![
            ("a".to_owned(), backend("a").to_string()),
            ("b".to_owned(), backend("b").to_string()),
        ];
        assert!(balancers.publish("web", &spec(), 1, &endpoints).unwrap());
        let through = balancers.local_address("web").unwrap();
        let mut seen: Vec<String> = (0..6).map(|_| ask(through)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, ["a", "b"]);
    }

    /// A replica that refuses (nothing listens on its port any more) costs
    /// no client its connection: it is tried on the other, and then left
    /// out, so later connections do not try it first; once it listens
    /// again and its ejection ran out, it is chosen again.
    #[test]
    fn a_replica_that_fails_a_connect_is_left_out_then_tried_again() {
        let mut balancers = Balancers::new().unwrap();
        let gone_address = closed_port();
        let endpoints = vec![
            ("dead".to_owned(), gone_address.to_string()),
            ("b".to_owned(), backend("b").to_string()),
        ];
        assert!(balancers.publish("web", &spec(), 1, &endpoints).unwrap());
        let through = balancers.local_address("web").unwrap();
        for _ in 0..6 {
            assert_eq!(ask(through), "b", "every connection answered");
        }
        let dead = balancers
            .backends("web")
            .into_iter()
            .find(|backend| backend.replica_id == "dead")
            .unwrap();
        assert!(dead.is_ejected(), "left out after its failed connect");
        assert_eq!(
            dead.failures.load(Ordering::SeqCst),
            1,
            "tried once: the connections after it never tried it"
        );
        // It answers again: once its ejection ran out, it is chosen.
        answer_on(gone_address, "dead");
        std::thread::sleep(EJECTION_BASE + Duration::from_millis(100));
        let seen: Vec<String> = (0..4).map(|_| ask(through)).collect();
        assert!(seen.iter().any(|id| id == "dead"), "{seen:?}");
        assert!(!dead.is_ejected());
    }

    /// A port nothing listens on: bound, then closed.
    fn closed_port() -> SocketAddr {
        let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = gone.local_addr().unwrap();
        drop(gone);
        address
    }

    /// Answers with `id` on `address` from now on.
    fn answer_on(address: SocketAddr, id: &'static str) {
        let listener = std::net::TcpListener::bind(address).unwrap();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let mut byte = [0u8; 1];
                if stream.read_exact(&mut byte).is_ok() {
                    let _ = stream.write_all(id.as_bytes());
                }
            }
        });
    }

    /// A replica published the moment its container runs may not listen
    /// yet: a client that comes then waits, and is answered once it does,
    /// rather than closed unanswered.
    #[test]
    fn a_client_waits_for_a_published_replica_that_does_not_listen_yet() {
        let mut balancers = Balancers::new().unwrap();
        let starting = closed_port();
        let endpoints = vec![("late".to_owned(), starting.to_string())];
        assert!(balancers.publish("web", &spec(), 1, &endpoints).unwrap());
        let through = balancers.local_address("web").unwrap();
        let client = std::thread::spawn(move || ask(through));
        std::thread::sleep(Duration::from_millis(300));
        answer_on(starting, "late");
        assert_eq!(client.join().unwrap(), "late");
        // One that never listens closes the client within the budget.
        let never = vec![("never".to_owned(), closed_port().to_string())];
        assert!(balancers.publish("web", &spec(), 2, &never).unwrap());
        let started = std::time::Instant::now();
        let mut closed = std::net::TcpStream::connect(through).unwrap();
        closed.write_all(b"?").unwrap();
        let mut answer = Vec::new();
        // Closed with the byte unread: a reset, or an end.
        let _ = closed.read_to_end(&mut answer);
        assert!(answer.is_empty(), "closed unanswered");
        let waited = started.elapsed();
        assert!(
            waited >= CONNECT_BUDGET - RETRY_PAUSE_MAX
                && waited < CONNECT_BUDGET + Duration::from_secs(1),
            "{waited:?}"
        );
    }

    /// Many connections that chose a replica before its first refusal was
    /// known fail as one: it is left out for [`EJECTION_BASE`], not for
    /// as many doublings as there were connections in flight.
    #[test]
    fn a_burst_of_refused_connects_is_one_failure_in_a_row() {
        let mut balancers = Balancers::new().unwrap();
        let starting = closed_port();
        let endpoints = vec![
            ("late".to_owned(), starting.to_string()),
            ("b".to_owned(), backend("b").to_string()),
        ];
        assert!(balancers.publish("web", &spec(), 1, &endpoints).unwrap());
        let through = balancers.local_address("web").unwrap();
        let clients: Vec<_> = (0..32)
            .map(|_| std::thread::spawn(move || ask(through)))
            .collect();
        for client in clients {
            assert_eq!(client.join().unwrap(), "b");
        }
        let late = balancers.backends("web")[0].clone();
        assert_eq!(late.failures.load(Ordering::SeqCst), 1);
        answer_on(starting, "late");
        std::thread::sleep(EJECTION_BASE + Duration::from_millis(100));
        let seen: Vec<String> = (0..4).map(|_| ask(through)).collect();
        assert!(seen.iter().any(|id| id == "late"), "{seen:?}");
    }

    #[test]
    fn what_is_carried_is_counted_for_the_host() {
        let mut balancers = Balancers::new().unwrap();
        let endpoints = vec![("a".to_owned(), backend("a").to_string())];
        assert!(balancers.publish("web", &spec(), 1, &endpoints).unwrap());
        let through = balancers.local_address("web").unwrap();
        for _ in 0..3 {
            assert_eq!(ask(through), "a");
        }
        let tally = balancers.tally.clone();
        let counted = || {
            (
                tally.accepted.load(Ordering::Relaxed),
                tally.sent.load(Ordering::Relaxed),
                tally.failed.load(Ordering::Relaxed),
            )
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while counted().1 < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Each answer is the replica's one-byte id.
        assert_eq!(counted(), (3, 3, 0));
        // No replica published: the connection is counted failed.
        assert!(balancers.publish("web", &spec(), 2, &[]).unwrap());
        let _ = std::net::TcpStream::connect(through).map(|mut stream| {
            let mut rest = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stream, &mut rest);
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while counted().2 < 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(counted(), (4, 3, 1));
    }

    #[test]
    fn two_blocks_are_two_independent_balancers() {
        let mut balancers = Balancers::new().unwrap();
        let sip = vec![("s".to_owned(), backend("sip").to_string())];
        let http = vec![("h".to_owned(), backend("http").to_string())];
        balancers
            .publish("esl/traffik \"sip\"", &spec(), 1, &sip)
            .unwrap();
        balancers
            .publish("esl/traffik \"http\"", &spec(), 1, &http)
            .unwrap();
        let sip_port = balancers.local_address("esl/traffik \"sip\"").unwrap();
        let http_port = balancers.local_address("esl/traffik \"http\"").unwrap();
        assert_ne!(sip_port, http_port);
        assert_eq!(ask(sip_port), "sip");
        assert_eq!(ask(http_port), "http");
        // Forgetting one leaves the other serving.
        assert!(balancers.forget("esl/traffik \"sip\""));
        assert_eq!(ask(http_port), "http");
    }

    #[test]
    fn older_generations_are_ignored() {
        let mut balancers = Balancers::new().unwrap();
        let a = vec![("a".to_owned(), backend("a").to_string())];
        let b = vec![("b".to_owned(), backend("b").to_string())];
        balancers.publish("web", &spec(), 5, &a).unwrap();
        assert!(!balancers.publish("web", &spec(), 4, &b).unwrap());
        assert_eq!(ask(balancers.local_address("web").unwrap()), "a");
    }

    #[test]
    fn a_drained_replica_gets_no_new_connections_and_waits_for_open_ones() {
        let mut balancers = Balancers::new().unwrap();
        let endpoints = vec![
            ("a".to_owned(), backend("a").to_string()),
            ("b".to_owned(), backend("b").to_string()),
        ];
        balancers.publish("web", &spec(), 1, &endpoints).unwrap();
        let through = balancers.local_address("web").unwrap();
        // Hold connections open (no byte sent) until one lands on "a".
        let mut held = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while balancers.backends("web")[0].open_connections() == 0 {
            held.push(std::net::TcpStream::connect(through).unwrap());
            std::thread::sleep(Duration::from_millis(20));
            assert!(std::time::Instant::now() < deadline);
        }
        assert!(matches!(balancers.drain("web", "a"), DrainState::Open(_)));
        // New connections all go to "b" now.
        for _ in 0..4 {
            assert_eq!(ask(through), "b");
        }
        drop(held);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while balancers.drain("web", "a") != DrainState::Drained {
            assert!(std::time::Instant::now() < deadline, "never drained");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(balancers.drain("web", "unknown"), DrainState::Drained);
    }

    #[test]
    fn forget_closes_the_listener_and_frees_the_port() {
        let mut balancers = Balancers::new().unwrap();
        let endpoints = vec![("a".to_owned(), backend("a").to_string())];
        balancers.publish("web", &spec(), 1, &endpoints).unwrap();
        let through = balancers.local_address("web").unwrap();
        assert!(balancers.forget("web"));
        std::net::TcpListener::bind(through).expect("the port is free again");
        assert!(!balancers.forget("web"));
    }
}
