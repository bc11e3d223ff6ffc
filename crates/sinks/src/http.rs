//! A small HTTP/1.x server for `/metrics` that no client can deny to the others. One thread
//! serves every connection with poll(2), non-blocking: it reads each request head, answers,
//! and writes the answer as the client takes it, so no client holds anything another needs.
//!
//! - Time: a head must arrive within [`DEADLINE`] of the connect and fit in 8 KiB, and the
//!   answer must be taken within [`DEADLINE`] of the head; then the connection is closed
//!   (pipelined requests are never read).
//! - Number: at most [`MAX_CONNS`] connections are open. A new one beyond that evicts the
//!   connection that has waited longest for its head, so idle connections cannot keep a scrape
//!   out: a scraper's head arrives within a millisecond of its connect. Only when every
//!   connection is being answered is a new one told 503.
//! - Cost: simultaneous scrapes share one rendering of the page (made at most every
//!   [`FRESH`]), and the answer's bytes are shared, not copied per client.
//!
//! `GET /metrics` is the page, `HEAD /metrics` its headers; other methods there get 405 with
//! `Allow`, other paths 404, and a request line that is not HTTP 400. Lines may end in CRLF or
//! bare LF.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections open at once (waiting for their head or taking their answer).
pub const MAX_CONNS: usize = 2048;
/// How long a client has to send its request head, and then to take the answer.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// How long one rendering of the page serves the scrapes that ask for it.
pub const FRESH: Duration = Duration::from_millis(50);
/// The largest request head read.
const MAX_HEAD: usize = 8 * 1024;

/// What the server did, for tests and self-metrics.
#[derive(Debug, Default)]
pub struct HttpStats {
    /// Answers written completely (any status).
    pub served: AtomicU64,
    /// Connections answered 503 because every connection slot was being answered.
    pub refused: AtomicU64,
    /// Connections closed for missing a deadline, a head too large, closing early, or being
    /// evicted for a newer one while they had still not sent their head.
    pub dropped: AtomicU64,
    /// Renderings of the page (fewer than 200 answers when scrapes come together).
    pub rendered: AtomicU64,
}

/// The page to serve, made when asked.
pub type Page = Arc<dyn Fn() -> String + Send + Sync>;

pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<HttpStats>,
}

impl HttpServer {
    /// Listen on `addr` (fails at once when the port is taken) and serve `page` at /metrics.
    pub fn start(addr: SocketAddr, page: Page) -> std::io::Result<HttpServer> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let max_conns = raise_fd_limit(MAX_CONNS as u64 * 2);
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(HttpStats::default());
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let thread = std::thread::Builder::new().name("cachescope-http".into()).spawn(move || {
            Server { listener, page, stats: stats2, conns: Vec::new(), cached: None, max_conns }.run(&stop2)
        })?;
        Ok(HttpServer { addr, stop, thread: Some(thread), stats })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop serving and wait for the thread (it notices within 100 ms).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Let the process hold `want` descriptors beside what it has, up to the hard limit (the
/// common soft default, 1024, is below MAX_CONNS plus the collector's own perf events); the
/// connections the server may then hold: half of the limit it got, at most [`MAX_CONNS`].
fn raise_fd_limit(want: u64) -> usize {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 64;
    }
    let goal = r.rlim_cur.saturating_add(want as libc::rlim_t).min(r.rlim_max);
    if goal > r.rlim_cur {
        let mut up = r;
        up.rlim_cur = goal;
        // SAFETY: setrlimit reads one rlimit we own; a refusal leaves the limit as it was.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &up) } == 0 {
            r = up;
        }
    }
    usize::try_from(r.rlim_cur / 2).unwrap_or(MAX_CONNS).clamp(64, MAX_CONNS)
}

/// An answer being written: `buf[at..len]` is still to go (a HEAD answer stops at the end of
/// the headers of the shared page).
struct Out {
    buf: Arc<Vec<u8>>,
    len: usize,
    at: usize,
}

struct Conn {
    stream: TcpStream,
    head: Vec<u8>,
    out: Option<Out>,
    deadline: Instant,
    since: Instant,
}

/// A rendering of the page as a whole 200 answer, and where its headers end.
struct Rendered {
    at: Instant,
    answer: Arc<Vec<u8>>,
    head_len: usize,
}

struct Server {
    listener: TcpListener,
    page: Page,
    stats: Arc<HttpStats>,
    conns: Vec<Conn>,
    cached: Option<Rendered>,
    /// [`MAX_CONNS`], or fewer where the descriptor limit is low.
    max_conns: usize,
}

enum Step {
    Keep,
    /// Answered completely.
    Done,
    /// Closed without a complete answer.
    Drop,
}

impl Server {
    fn run(mut self, stop: &AtomicBool) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            fds.clear();
            fds.push(libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            fds.extend(self.conns.iter().map(|c| libc::pollfd {
                fd: c.stream.as_raw_fd(),
                events: if c.out.is_some() { libc::POLLOUT } else { libc::POLLIN },
                revents: 0,
            }));
            // SAFETY: `fds` is a valid array of fds.len() pollfds for descriptors that the
            // listener and `self.conns` keep open for the duration of the call.
            if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) } < 0 {
                continue;
            }
            let now = Instant::now();
            // Walk backwards so that swap_remove leaves the indexes still to visit in place.
            for i in (0..self.conns.len()).rev() {
                let ready = fds.get(i + 1).is_some_and(|f| f.revents != 0);
                let step = if ready { self.step(i, now) } else { Step::Keep };
                let step = match step {
                    Step::Keep if self.conns[i].deadline <= now => Step::Drop,
                    s => s,
                };
                match step {
                    Step::Keep => {}
                    Step::Done => {
                        self.stats.served.fetch_add(1, Ordering::Relaxed);
                        close(self.conns.swap_remove(i).stream);
                    }
                    Step::Drop => {
                        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                        close(self.conns.swap_remove(i).stream);
                    }
                }
            }
            self.accept(now);
        }
    }

    fn accept(&mut self, now: Instant) {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // Out of descriptors (or another refusal): the listener stays readable,
                    // so wait a little rather than spin on it.
                    std::thread::sleep(Duration::from_millis(20));
                    return;
                }
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if self.conns.len() >= self.max_conns {
                // The connection that has waited longest for its head makes room.
                let oldest = (0..self.conns.len())
                    .filter(|&i| self.conns[i].out.is_none())
                    .min_by_key(|&i| (!self.conns[i].head.is_empty(), self.conns[i].since));
                match oldest {
                    Some(i) => {
                        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                        close(self.conns.swap_remove(i).stream);
                    }
                    None => {
                        self.stats.refused.fetch_add(1, Ordering::Relaxed);
                        let mut s = stream;
                        let _ = s.write_all(&response("503 Service Unavailable", "busy: try again\n", ""));
                        close(s);
                        continue;
                    }
                }
            }
            self.conns.push(Conn { stream, head: Vec::new(), out: None, deadline: now + DEADLINE, since: now });
        }
    }

    /// Read what arrived, or write what the client can take.
    fn step(&mut self, i: usize, now: Instant) -> Step {
        if self.conns[i].out.is_none() {
            match read_head(&mut self.conns[i]) {
                Head::More => return Step::Keep,
                Head::Closed => return Step::Drop,
                Head::TooLarge => {
                    let answer = response("431 Request Header Fields Too Large", "request head too large\n", "");
                    let len = answer.len();
                    self.conns[i].out = Some(Out { buf: Arc::new(answer), len, at: 0 });
                }
                Head::Complete(end) => {
                    let head = std::mem::take(&mut self.conns[i].head);
                    let out = self.answer(&head[..end], now);
                    self.conns[i].out = Some(out);
                }
            }
            self.conns[i].deadline = now + DEADLINE;
        }
        write_out(&mut self.conns[i])
    }

    fn answer(&mut self, head: &[u8], now: Instant) -> Out {
        let whole = |v: Vec<u8>| {
            let len = v.len();
            Out { buf: Arc::new(v), len, at: 0 }
        };
        let head_only = match route(head) {
            Route::Page { head_only } => head_only,
            Route::NotFound { head_only } => {
                let mut v = response("404 Not Found", "cachescope: see /metrics\n", "");
                if head_only {
                    v.truncate(headers_len(&v));
                }
                return whole(v);
            }
            Route::MethodNotAllowed => {
                return whole(response("405 Method Not Allowed", "GET or HEAD\n", "Allow: GET, HEAD\r\n"))
            }
            Route::BadRequest(why) => return whole(response("400 Bad Request", why, "")),
        };
        let r = match self.cached.take().filter(|c| now.duration_since(c.at) < FRESH) {
            Some(r) => r,
            None => {
                self.stats.rendered.fetch_add(1, Ordering::Relaxed);
                let answer = response("200 OK", &(self.page)(), "");
                Rendered { at: now, head_len: headers_len(&answer), answer: Arc::new(answer) }
            }
        };
        let len = if head_only { r.head_len } else { r.answer.len() };
        let out = Out { buf: r.answer.clone(), len, at: 0 };
        self.cached = Some(r);
        out
    }
}

/// What a request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// /metrics: the page (GET), or its headers only (HEAD).
    Page {
        head_only: bool,
    },
    NotFound {
        head_only: bool,
    },
    /// /metrics with a method other than GET or HEAD.
    MethodNotAllowed,
    /// Not an HTTP/1.x request line: why.
    BadRequest(&'static str),
}

/// Route a request head (its bytes up to the blank line; anything a client sent).
pub fn route(head: &[u8]) -> Route {
    let text = String::from_utf8_lossy(head);
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    let [method, target, version] = words[..] else {
        return Route::BadRequest("not an HTTP request line\n");
    };
    if !version.starts_with("HTTP/1.") {
        return Route::BadRequest("only HTTP/1.x is served\n");
    }
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    if path != "/metrics" {
        return Route::NotFound { head_only };
    }
    if method != "GET" && !head_only {
        return Route::MethodNotAllowed;
    }
    Route::Page { head_only }
}

enum Head {
    More,
    Closed,
    TooLarge,
    /// The head ends at this offset (its blank line included).
    Complete(usize),
}

fn read_head(c: &mut Conn) -> Head {
    let mut buf = [0u8; 2048];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) => return Head::Closed,
            Ok(k) => {
                let from = c.head.len().saturating_sub(3);
                c.head.extend_from_slice(&buf[..k]);
                if let Some(end) = head_end(&c.head, from) {
                    return Head::Complete(end);
                }
                if c.head.len() > MAX_HEAD {
                    return Head::TooLarge;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Head::More,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Head::Closed,
        }
    }
}

/// The end of a request head: the first empty line after the request line, with CRLF or bare
/// LF endings (leading empty lines, which RFC 9112 lets a server ignore, are skipped);
/// searching from `from`.
pub fn head_end(h: &[u8], from: usize) -> Option<usize> {
    let start = h.iter().position(|b| *b != b'\r' && *b != b'\n')?;
    let from = from.max(start);
    (from..h.len()).find_map(|i| {
        if h[i] != b'\n' {
            return None;
        }
        let next = h.get(i + 1)?;
        match next {
            b'\n' => Some(i + 2),
            b'\r' if h.get(i + 2) == Some(&b'\n') => Some(i + 3),
            _ => None,
        }
    })
}

fn write_out(c: &mut Conn) -> Step {
    let Some(o) = c.out.as_mut() else { return Step::Keep };
    while o.at < o.len {
        match c.stream.write(&o.buf[o.at..o.len]) {
            Ok(0) => return Step::Drop,
            Ok(k) => o.at += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::Keep,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Drop,
        }
    }
    Step::Done
}

fn close(s: TcpStream) {
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Where the headers of an answer made by [`response`] end.
fn headers_len(answer: &[u8]) -> usize {
    answer.windows(4).position(|w| w == b"\r\n\r\n").map_or(answer.len(), |p| p + 4)
}

fn response(status: &str, body: &str, extra: &str) -> Vec<u8> {
    let ct = if status.starts_with("200") { "text/plain; version=0.0.4; charset=utf-8" } else { "text/plain" };
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

#[cfg(test)]
mod tests;
