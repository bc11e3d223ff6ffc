//! The attacks that blocked the old server, on loopback: a client that pipelines requests and
//! never reads, clients that connect and say nothing, a flood of connections, a huge head.

use super::*;

fn get(addr: SocketAddr, path: &str) -> std::io::Result<(String, usize)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    let text = String::from_utf8_lossy(&body).to_string();
    let status = text.lines().next().unwrap_or("").to_string();
    Ok((status, body.len()))
}

#[test]
fn no_client_blocks_the_others() {
    // A page of 2 MB: more than a socket buffer holds, so an answer nobody reads blocks.
    let big = "x".repeat(2 << 20);
    let page: Page = Arc::new(move || big.clone());
    let mut server = HttpServer::start("127.0.0.1:0".parse().unwrap(), page).unwrap();
    let addr = server.addr();
    // One client pipelines 50 requests and never reads an answer.
    let mut hog = TcpStream::connect(addr).unwrap();
    for _ in 0..50 {
        write!(hog, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    }
    // Twenty connect and say nothing.
    let idle: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    // Six others each get the whole page, within the deadline plus the time to send it.
    let started = Instant::now();
    let clients: Vec<_> = (0..6).map(|_| std::thread::spawn(move || get(addr, "/metrics"))).collect();
    for c in clients {
        let (status, len) = c.join().unwrap().unwrap();
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(len > 2 << 20, "the whole page: {len}");
    }
    // Silent clients hold no worker, the hog at most one: no one waited for their deadlines.
    assert!(started.elapsed() < DEADLINE, "{:?}", started.elapsed());
    // The idle ones and the hog were cut off at their deadline.
    std::thread::sleep(DEADLINE + Duration::from_millis(500));
    assert!(server.stats.dropped.load(Ordering::Relaxed) >= 2, "{:?}", server.stats);
    let (status, _) = get(addr, "/metrics").unwrap();
    assert!(status.contains(" 200 "), "served again once they are gone: {status}");
    drop((hog, idle));
    server.stop();
}

#[test]
fn flood_is_answered_busy_not_queued_forever_and_heads_are_capped() {
    let page: Page = Arc::new(|| "cachescope_up 1\n".to_string());
    let server = HttpServer::start("127.0.0.1:0".parse().unwrap(), page).unwrap();
    let addr = server.addr();
    // More silent connections than may wait for their head: the excess is refused at once,
    // and none of them holds a worker.
    let silent: Vec<TcpStream> = (0..PENDING + 8).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.stats.refused.load(Ordering::Relaxed) >= 1, "{:?}", server.stats);
    drop(silent);
    // Meanwhile (and after) a real request is answered.
    std::thread::sleep(DEADLINE + Duration::from_millis(500));
    assert_eq!(get(addr, "/other").unwrap().0, "HTTP/1.1 404 Not Found");
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = s.write_all(format!("GET /metrics HTTP/1.1\r\nX: {}\r\n", "a".repeat(20_000)).as_bytes());
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    assert!(body.starts_with("HTTP/1.1 431"), "{body}");
    let (status, _) = get(addr, "/metrics?x=1").unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
}
