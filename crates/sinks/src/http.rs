//! A small HTTP/1.x server for `/metrics` that no client can wedge. One thread reads every
//! connection's request head at once (poll(2), non-blocking), so clients that connect and say
//! nothing hold no worker; a head must arrive within [`DEADLINE`] and fit in 8 KiB. Complete
//! requests go to [`WORKERS`] threads, each writing one answer within the deadline and then
//! closing (pipelined requests are never read), so a client that never reads its answer holds
//! one worker for at most the deadline. At most [`PENDING`] connections wait for their head and
//! [`QUEUE`] for a worker; beyond that a connection is answered 503 and closed at once.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections served at once.
pub const WORKERS: usize = 4;
/// Complete requests waiting for a worker.
pub const QUEUE: usize = 32;
/// Connections whose request head is still arriving.
pub const PENDING: usize = 256;
/// How long a client has to send its request head, and to take the answer.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// The largest request head read.
const MAX_HEAD: usize = 8 * 1024;

/// What the server did, for tests and self-metrics.
#[derive(Debug, Default)]
pub struct HttpStats {
    pub served: AtomicU64,
    /// Connections answered 503 because every worker and queue slot was taken.
    pub refused: AtomicU64,
    /// Connections closed for missing a deadline, a head too large, or a malformed request.
    pub dropped: AtomicU64,
}

/// The page to serve, made when asked.
pub type Page = Arc<dyn Fn() -> String + Send + Sync>;

pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub stats: Arc<HttpStats>,
}

impl HttpServer {
    /// Listen on `addr` (fails at once when the port is taken) and serve `page` at /metrics.
    pub fn start(addr: SocketAddr, page: Page) -> std::io::Result<HttpServer> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(HttpStats::default());
        let (tx, rx) = sync_channel::<Request>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for i in 0..WORKERS {
            let (rx, page, stats, stop) = (rx.clone(), page.clone(), stats.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("cachescope-http-{i}"))
                    .spawn(move || work(&rx, &page, &stats, &stop))?,
            );
        }
        let (stop2, stats2) = (stop.clone(), stats.clone());
        threads.push(
            std::thread::Builder::new()
                .name("cachescope-http".into())
                .spawn(move || accept(listener, tx, &stats2, &stop2))?,
        );
        Ok(HttpServer { addr, stop, threads, stats })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting and wait for the threads (each notices within 200 ms).
    pub fn stop(&mut self) {
        if self.stop.swap(true, Ordering::Relaxed) {
            return;
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A connection whose request head is still arriving.
struct Incoming {
    conn: TcpStream,
    head: Vec<u8>,
    deadline: Instant,
}

fn refuse(mut c: TcpStream, status: &str, why: &str) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = c.write_all(&response(status, why));
}

fn accept(listener: TcpListener, tx: SyncSender<Request>, stats: &HttpStats, stop: &AtomicBool) {
    use std::os::fd::AsRawFd;
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut pending: Vec<Incoming> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        fds.clear();
        fds.push(libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        fds.extend(pending.iter().map(|p| libc::pollfd { fd: p.conn.as_raw_fd(), events: libc::POLLIN, revents: 0 }));
        // SAFETY: `fds` is a valid array of fds.len() pollfds for descriptors that `listener`
        // and `pending` keep open for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
        if n < 0 {
            continue;
        }
        let now = Instant::now();
        // Heads that arrived (or connections that closed); indexes shift by the listener.
        let mut done = Vec::new();
        for (i, p) in pending.iter_mut().enumerate() {
            if fds.get(i + 1).is_none_or(|f| f.revents == 0) {
                continue;
            }
            loop {
                match p.conn.read(&mut buf) {
                    Ok(0) => {
                        done.push((i, false));
                        break;
                    }
                    Ok(k) => {
                        p.head.extend_from_slice(&buf[..k]);
                        if p.head.windows(4).any(|w| w == b"\r\n\r\n") || p.head.len() > MAX_HEAD {
                            done.push((i, true));
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        done.push((i, false));
                        break;
                    }
                }
            }
        }
        for (i, complete) in done.into_iter().rev() {
            let p = pending.swap_remove(i);
            if !complete {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
            } else if p.head.len() > MAX_HEAD {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                refuse(p.conn, "431 Request Header Fields Too Large", "request head too large\n");
            } else {
                let _ = p.conn.set_nonblocking(false);
                match tx.try_send(Request { conn: p.conn, head: p.head, deadline: p.deadline }) {
                    Ok(()) => {}
                    Err(TrySendError::Full(r)) => {
                        stats.refused.fetch_add(1, Ordering::Relaxed);
                        refuse(r.conn, "503 Service Unavailable", "busy: try again\n");
                    }
                    Err(TrySendError::Disconnected(_)) => return,
                }
            }
        }
        // Those that said too little in time.
        let before = pending.len();
        pending.retain(|p| p.deadline > now);
        stats.dropped.fetch_add((before - pending.len()) as u64, Ordering::Relaxed);
        // New connections.
        while let Ok((conn, _)) = listener.accept() {
            if pending.len() >= PENDING || conn.set_nonblocking(true).is_err() {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                refuse(conn, "503 Service Unavailable", "busy: try again\n");
                continue;
            }
            pending.push(Incoming { conn, head: Vec::with_capacity(256), deadline: now + DEADLINE });
        }
    }
    // Dropping `tx` ends the workers once the queue is empty.
}

/// A complete request head and its connection.
struct Request {
    conn: TcpStream,
    head: Vec<u8>,
    deadline: Instant,
}

fn work(rx: &Mutex<Receiver<Request>>, page: &Page, stats: &HttpStats, stop: &AtomicBool) {
    loop {
        let next = match rx.lock() {
            Ok(r) => r.recv_timeout(Duration::from_millis(200)),
            Err(_) => return,
        };
        match next {
            Ok(c) => {
                if serve(c, page) {
                    stats.served.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !stop.load(Ordering::Relaxed) => {}
            Err(_) => return,
        }
    }
}

fn response(status: &str, body: &str) -> Vec<u8> {
    let ct = if status.starts_with("200") { "text/plain; version=0.0.4; charset=utf-8" } else { "text/plain" };
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

/// One answer, within the request's deadline (at least 100 ms to write it); false when the
/// client failed to take it.
fn serve(r: Request, page: &Page) -> bool {
    let Request { mut conn, head, deadline } = r;
    let end = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(head.len());
    let line = String::from_utf8_lossy(&head[..end]);
    let mut words = line.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let answer = if method == "GET" && (path == "/metrics" || path.starts_with("/metrics?")) {
        response("200 OK", &page())
    } else {
        response("404 Not Found", "cachescope: see /metrics\n")
    };
    // Whatever else it sent (pipelined requests) is never read: the connection closes.
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
    if conn.set_write_timeout(Some(left)).is_err() {
        return false;
    }
    let ok = conn.write_all(&answer).is_ok();
    let _ = conn.shutdown(std::net::Shutdown::Both);
    ok
}

#[cfg(test)]
mod tests;
