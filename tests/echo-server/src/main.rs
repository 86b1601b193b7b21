//! `echo-server`: the workload the reconcile tests run. It listens on
//! `0.0.0.0:$PORT` (default 8084) and answers every connection with its
//! replica id (`$VOODU_REPLICA_ID`): as an HTTP response to an HTTP request,
//! or as one line to anything else. It exits at once on SIGTERM, so replicas
//! stop without waiting for Docker's kill timeout.
//!
//! With `EXIT_AFTER_MS=N` it exits after N ms with `EXIT_CODE` (default 1),
//! for the crash-loop tests.
//!
//! With `ALLOCATE_MB=N` it allocates and touches N MiB at start, for the
//! memory-limit tests (a replica under a lower limit is OOM-killed).
//!
//! Readiness, for probe tests: with `WARMUP_MS=N` it listens at once but
//! answers HTTP requests with 503 for its first N ms, as an application
//! warming up does. `GET /ready` answers 200 when it is ready and 503 when
//! not; `GET /toggle-ready` flips it between ready and not ready (from then
//! on, every HTTP answer is 503 while it is not), and says which it is now.
//! `GET /say/WORDS` writes `said WORDS` to its log (for log tests).
//! `GET /hang` answers, then leaves every later HTTP request unanswered, as
//! a hung application does (for liveness tests). `GET /probe-header`
//! answers 200 only to a request with the header `X-Probe: voodu`, 401
//! otherwise (for probes with `http_headers`).
//!
//! `echo-server init NAME [CODE]` is an init step: it appends NAME to
//! `$INIT_LOG` (default `/shared/init.log`) and exits with CODE (default
//! 0); `GET /init-log` answers that file's contents.
//!
//! `echo-server health` is its own health check, for images with a
//! HEALTHCHECK and for exec probes: it asks `127.0.0.1:$PORT/ready` and
//! exits 0 when that answers 200, 1 otherwise.
//!
//! It uses only std, so it builds as a static binary (`crt-static`) and runs
//! in an image that holds nothing else. It resolves no names.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Set by `/toggle-ready`: answer 503 until toggled back.
static FORCED_UNREADY: AtomicBool = AtomicBool::new(false);
/// Set by `/hang`: accept requests and never answer them.
static HUNG: AtomicBool = AtomicBool::new(false);
/// When the warm-up ends.
static READY_AT: OnceLock<Instant> = OnceLock::new();

fn is_ready() -> bool {
    !FORCED_UNREADY.load(Ordering::SeqCst) && READY_AT.get().is_none_or(|at| Instant::now() >= *at)
}

extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    fn _exit(status: i32) -> !;
}

extern "C" fn exit_now(_signal: i32) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { _exit(0) }
}

fn answer(stream: TcpStream, replica_id: &str) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let mut stream = stream;
    let is_http = ["GET ", "POST ", "HEAD ", "PUT "]
        .iter()
        .any(|method| first.starts_with(method));
    if is_http {
        // Read the headers; keep-alive requests get one answer each.
        let mut probe_header = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
                break;
            }
            probe_header |= line.trim().eq_ignore_ascii_case("x-probe: voodu");
        }
        let path = first.split_whitespace().nth(1).unwrap_or("/");
        if HUNG.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_secs(3600));
            return Ok(());
        }
        if let Some(words) = path.strip_prefix("/say/") {
            eprintln!("said {words}");
        }
        if path == "/hang" {
            HUNG.store(true, Ordering::SeqCst);
        }
        if path == "/toggle-ready" {
            FORCED_UNREADY.fetch_xor(true, Ordering::SeqCst);
        }
        if path == "/init-log" {
            let log = std::env::var("INIT_LOG").unwrap_or_else(|_| "/shared/init.log".into());
            let body = std::fs::read_to_string(log).unwrap_or_default();
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )?;
            return stream.flush();
        }
        let ready = is_ready();
        let (status, body) = match (path, ready) {
            // Passes only when asked with the header `X-Probe: voodu`.
            ("/probe-header", _) if probe_header => ("200 OK", "header seen\n".to_owned()),
            ("/probe-header", _) => ("401 Unauthorized", "no X-Probe header\n".to_owned()),
            ("/ready" | "/toggle-ready", true) => ("200 OK", "ready\n".to_owned()),
            ("/ready" | "/toggle-ready", false) => {
                ("503 Service Unavailable", "not ready\n".to_owned())
            }
            (_, true) => ("200 OK", format!("{replica_id}\n")),
            (_, false) => (
                "503 Service Unavailable",
                format!("{replica_id} is not ready\n"),
            ),
        };
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
    } else {
        writeln!(stream, "{replica_id}")?;
    }
    stream.flush()
}

/// `echo-server health`: 0 when the server on this host answers `/ready`
/// with 200.
fn health_check(port: &str) -> i32 {
    let Ok(mut stream) = TcpStream::connect(format!("127.0.0.1:{port}")) else {
        return 1;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /ready HTTP/1.0\r\nHost: health\r\n\r\n")
        .is_err()
    {
        return 1;
    }
    let mut first = String::new();
    let _ = BufReader::new(stream).read_line(&mut first);
    if first.starts_with("HTTP/1.1 200") {
        0
    } else {
        1
    }
}

/// `echo-server init NAME [CODE]`: an init step for the tests. Appends
/// `NAME` as a line to `$INIT_LOG` (default `/shared/init.log`) and exits
/// with `CODE` (default 0).
fn init_step() -> i32 {
    let name = std::env::args().nth(2).unwrap_or_default();
    let code = std::env::args()
        .nth(3)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let log = std::env::var("INIT_LOG").unwrap_or_else(|_| "/shared/init.log".into());
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut file| writeln!(file, "{name}"));
    if let Err(error) = written {
        eprintln!("init {name}: cannot write {log}: {error}");
        return 1;
    }
    eprintln!("init {name}: done, exiting with {code}");
    code
}

/// `echo-server tcp-check HOST PORT`: exits 0 when a TCP connection to
/// `HOST:PORT` opens within 2 s, 1 otherwise (the test stack's stand-in
/// for `nc -z` and `redis-cli ping`).
fn tcp_check() -> i32 {
    use std::net::ToSocketAddrs;
    let host = std::env::args().nth(2).unwrap_or_default();
    let port: u16 = std::env::args()
        .nth(3)
        .and_then(|port| port.parse().ok())
        .unwrap_or(0);
    let Ok(addresses) = (host.as_str(), port).to_socket_addrs() else {
        return 1;
    };
    let open = addresses
        .into_iter()
        .any(|address| TcpStream::connect_timeout(&address, Duration::from_secs(2)).is_ok());
    i32::from(!open)
}

/// `echo-server resolve NAME`: prints the addresses `NAME` resolves to
/// from inside the container (Docker's DNS on its networks), one a line;
/// exits 1 when it resolves to none.
fn resolve() -> i32 {
    use std::net::ToSocketAddrs;
    let name = std::env::args().nth(2).unwrap_or_default();
    match (name.as_str(), 0).to_socket_addrs() {
        Ok(addresses) => {
            let mut found = 0;
            for address in addresses {
                println!("{}", address.ip());
                found += 1;
            }
            i32::from(found == 0)
        }
        Err(error) => {
            eprintln!("resolve {name}: {error}");
            1
        }
    }
}

/// `echo-server job CODE [SLEEP_MS]`: a job's run. Writes `GREETING=...`
/// (its env's) to standard output and a line to standard error, sleeps
/// `SLEEP_MS`, says it is done, and exits with `CODE`.
fn job() -> i32 {
    let code = std::env::args()
        .nth(2)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let sleep_ms = std::env::args()
        .nth(3)
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0);
    extern "C" {
        fn getuid() -> u32;
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { getuid() };
    println!(
        "job says GREETING={} cwd={} uid={uid}",
        std::env::var("GREETING").unwrap_or_default(),
        std::env::current_dir()
            .map(|dir| dir.display().to_string())
            .unwrap_or_default()
    );
    eprintln!("job writes to stderr too");
    std::thread::sleep(std::time::Duration::from_millis(sleep_ms));
    println!("job done, exiting with {code}");
    code
}

/// Its standard output's terminal size, `COLSxROWS` (`none` when it is
/// no terminal).
fn terminal_size() -> String {
    #[repr(C)]
    #[derive(Default)]
    struct Winsize {
        rows: u16,
        cols: u16,
        x_pixels: u16,
        y_pixels: u16,
    }
    extern "C" {
        fn ioctl(fd: i32, request: std::ffi::c_ulong, ...) -> i32;
    }
    const TIOCGWINSZ: std::ffi::c_ulong = 0x5413;
    let mut size = Winsize::default();
    // SAFETY: TIOCGWINSZ writes one winsize into the struct given.
    let done = unsafe { ioctl(1, TIOCGWINSZ, &mut size as *mut Winsize) };
    if done == 0 {
        format!("{}x{}", size.cols, size.rows)
    } else {
        "none".to_owned()
    }
}

/// `echo-server cat` (a line `size` is answered with the terminal's
/// size): says whether its standard input is a terminal, then
/// writes `got: LINE` for each line it reads, and `stdin ended` at its
/// end.
fn cat() -> i32 {
    use std::io::{BufRead, IsTerminal};
    println!(
        "terminal: {}",
        if std::io::stdin().is_terminal() {
            "yes"
        } else {
            "no"
        }
    );
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line == "size" {
            println!("size: {}", terminal_size());
            continue;
        }
        println!("got: {line}");
    }
    println!("stdin ended");
    0
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("cat") {
        std::process::exit(cat());
    }
    if std::env::args().nth(1).as_deref() == Some("job") {
        std::process::exit(job());
    }
    if std::env::args().nth(1).as_deref() == Some("init") {
        std::process::exit(init_step());
    }
    if std::env::args().nth(1).as_deref() == Some("tcp-check") {
        std::process::exit(tcp_check());
    }
    if std::env::args().nth(1).as_deref() == Some("resolve") {
        std::process::exit(resolve());
    }
    if std::env::args().nth(1).as_deref() == Some("health") {
        let port = std::env::var("PORT").unwrap_or_else(|_| "8084".into());
        std::process::exit(health_check(&port));
    }
    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;
    // SAFETY: installing a handler that only calls _exit.
    unsafe {
        signal(SIGTERM, exit_now);
        signal(SIGINT, exit_now);
    }
    if let Some(after) = std::env::var("EXIT_AFTER_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
    {
        let code = std::env::var("EXIT_CODE")
            .ok()
            .and_then(|code| code.parse::<i32>().ok())
            .unwrap_or(1);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(after));
            std::process::exit(code);
        });
    }
    if let Some(megabytes) = std::env::var("ALLOCATE_MB")
        .ok()
        .and_then(|mb| mb.parse::<usize>().ok())
    {
        // Touch every page, so the memory is really in use, and keep it.
        let hog = vec![1_u8; megabytes << 20];
        std::mem::forget(hog);
    }
    if let Some(warmup) = std::env::var("WARMUP_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
    {
        let _ = READY_AT.set(Instant::now() + Duration::from_millis(warmup));
    }
    let port = std::env::var("PORT").unwrap_or_else(|_| "8084".into());
    let replica_id = std::env::var("VOODU_REPLICA_ID").unwrap_or_else(|_| "unknown".into());
    let listener = match TcpListener::bind(format!("0.0.0.0:{port}")) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("echo-server: cannot listen on port {port}: {error}");
            std::process::exit(1);
        }
    };
    eprintln!("echo-server {replica_id} listening on port {port}");
    for stream in listener.incoming().flatten() {
        let replica_id = replica_id.clone();
        std::thread::spawn(move || {
            let _ = answer(stream, &replica_id);
        });
    }
}
