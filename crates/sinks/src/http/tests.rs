//! The attacks that denied /metrics to scrapers, on loopback: a client that pipelines requests
//! and never reads, a thousand clients that connect and say nothing, more of them than the
//! server holds, two hundred scrapes at once, a huge head; and what HTTP says of HEAD, other
//! methods and bare-LF requests.

use super::*;

/// Send `request` as is and read the whole answer: (status line, whole answer).
fn ask(addr: SocketAddr, request: &str) -> std::io::Result<(String, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    let status = String::from_utf8_lossy(&answer).lines().next().unwrap_or("").to_string();
    Ok((status, answer))
}

fn get(addr: SocketAddr, path: &str) -> std::io::Result<(String, usize)> {
    ask(addr, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")).map(|(s, a)| (s, a.len()))
}

fn small() -> Page {
    Arc::new(|| "cachescope_up 1\n".to_string())
}

fn serve(page: Page) -> HttpServer {
    HttpServer::start("127.0.0.1:0".parse().expect("addr"), page).expect("server")
}

/// A scrape's time, which must stay under a second whatever else is connected.
fn timed_scrape(addr: SocketAddr) -> Duration {
    let t = Instant::now();
    let (status, _) = get(addr, "/metrics").expect("scrape");
    assert_eq!(status, "HTTP/1.1 200 OK");
    t.elapsed()
}

#[test]
fn no_client_blocks_the_others() {
    // A page of 2 MB: more than a socket buffer holds, so an answer nobody reads stays unsent.
    let big = "x".repeat(2 << 20);
    let page: Page = Arc::new(move || big.clone());
    let mut server = serve(page);
    let addr = server.addr();
    // One client pipelines 50 requests and never reads an answer. They go in one write: the
    // server may answer the first and close before a later write (a CI run on a loaded host
    // saw one fail with ECONNRESET), which is this test's subject, not its failure.
    let mut hog = TcpStream::connect(addr).expect("hog");
    hog.write_all("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(50).as_bytes()).expect("pipeline");
    // Twenty connect and say nothing.
    let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).expect("idle")).collect();
    std::thread::sleep(Duration::from_millis(100));
    // Six others each get the whole page, long before anyone's deadline.
    let started = Instant::now();
    let clients: Vec<_> = (0..6).map(|_| std::thread::spawn(move || get(addr, "/metrics"))).collect();
    for c in clients {
        let (status, len) = c.join().expect("client").expect("get");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(len > 2 << 20, "the whole page: {len}");
    }
    assert!(started.elapsed() < DEADLINE, "{:?}", started.elapsed());
    // The idle ones are cut off at their deadline; the hog too, unless its answer fitted in
    // the socket buffers (loopback's grow to megabytes), and then it was answered and closed.
    std::thread::sleep(DEADLINE + Duration::from_millis(500));
    let (served, dropped) = (server.stats.served.load(Ordering::Relaxed), server.stats.dropped.load(Ordering::Relaxed));
    assert!(dropped >= 20 && served + dropped >= 27, "{:?}", server.stats);
    assert!(timed_scrape(addr) < Duration::from_secs(1));
    drop((hog, idle));
    server.stop();
}

#[test]
fn a_thousand_idle_connections_do_not_deny_a_scrape() {
    let server = serve(small());
    let addr = server.addr();
    let idle: Vec<TcpStream> = (0..1000).map(|_| TcpStream::connect(addr).expect("idle")).collect();
    std::thread::sleep(Duration::from_millis(200));
    // Scrapes while they are held open (within their deadline), each well under a second.
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        worst = worst.max(timed_scrape(addr));
    }
    assert!(worst < Duration::from_secs(1), "slowest scrape {worst:?}");
    assert_eq!(server.stats.refused.load(Ordering::Relaxed), 0, "{:?}", server.stats);
    // More silent connections than the server holds: the oldest silent ones make room, and
    // the scrape is answered.
    let more: Vec<TcpStream> = (0..MAX_CONNS - 1000 + 100).map(|_| TcpStream::connect(addr).expect("more")).collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(timed_scrape(addr) < Duration::from_secs(1));
    assert!(server.stats.dropped.load(Ordering::Relaxed) >= 100, "the oldest made room: {:?}", server.stats);
    assert_eq!(server.stats.refused.load(Ordering::Relaxed), 0, "{:?}", server.stats);
    drop((idle, more));
}

#[test]
fn simultaneous_scrapes_are_all_served_from_shared_renderings() {
    let renders = Arc::new(AtomicU64::new(0));
    let r2 = renders.clone();
    let page: Page = Arc::new(move || {
        r2.fetch_add(1, Ordering::Relaxed);
        // A page that takes a while to make, as thousands of containers do.
        std::thread::sleep(Duration::from_millis(5));
        "cachescope_up 1\n".repeat(10_000)
    });
    let server = serve(page);
    let addr = server.addr();
    let barrier = Arc::new(std::sync::Barrier::new(200));
    let clients: Vec<_> = (0..200)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                get(addr, "/metrics")
            })
        })
        .collect();
    for c in clients {
        let (status, len) = c.join().expect("client").expect("get");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(len > 160_000, "{len}");
    }
    let made = renders.load(Ordering::Relaxed);
    assert!(made < 200, "{made} renderings for 200 scrapes");
    assert_eq!(server.stats.rendered.load(Ordering::Relaxed), made);
    assert_eq!(server.stats.refused.load(Ordering::Relaxed), 0, "{:?}", server.stats);
}

#[test]
fn methods_paths_and_line_endings_answer_as_http_says() {
    let server = serve(small());
    let addr = server.addr();
    let (status, answer) = ask(addr, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("head");
    let text = String::from_utf8_lossy(&answer);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(text.contains("Content-Length: 16\r\n"), "the GET's length: {text}");
    assert!(text.ends_with("\r\n\r\n"), "no body: {text:?}");
    for method in ["POST", "PUT", "DELETE"] {
        let (status, answer) = ask(addr, &format!("{method} /metrics HTTP/1.1\r\nHost: x\r\n\r\n")).expect("method");
        assert_eq!(status, "HTTP/1.1 405 Method Not Allowed", "{method}");
        assert!(String::from_utf8_lossy(&answer).contains("Allow: GET, HEAD\r\n"), "{method}");
    }
    // Bare LF, as some clients and hand-typed requests end their lines.
    let (status, answer) = ask(addr, "GET /metrics HTTP/1.0\nHost: x\n\n").expect("bare LF");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(answer.ends_with(b"cachescope_up 1\n"));
    assert_eq!(get(addr, "/other").expect("404").0, "HTTP/1.1 404 Not Found");
    assert_eq!(ask(addr, "hello\r\n\r\n").expect("400").0, "HTTP/1.1 400 Bad Request");
    let (status, _) = get(addr, "/metrics?x=1").expect("query");
    assert_eq!(status, "HTTP/1.1 200 OK");
    // A head past 8 KiB is refused, whatever follows.
    let (status, _) = ask(addr, &format!("GET /metrics HTTP/1.1\r\nX: {}\r\n", "a".repeat(20_000))).expect("431");
    assert!(status.starts_with("HTTP/1.1 431"), "{status}");
}

#[test]
fn head_ends_are_found_with_either_line_ending() {
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\n", 0), Some(24));
    assert_eq!(head_end(b"GET / HTTP/1.1\nA: b\n\n", 0), Some(21));
    assert_eq!(head_end(b"\r\nGET / HTTP/1.1\n\n", 0), Some(18), "a leading empty line is skipped");
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
    assert_eq!(head_end(b"\r\n\r\n", 0), None);
}
