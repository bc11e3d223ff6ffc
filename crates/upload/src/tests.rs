use super::*;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

fn env(k: &str) -> Option<String> {
    match k {
        "AWS_ACCESS_KEY_ID" => Some("AKIDTEST".into()),
        "AWS_SECRET_ACCESS_KEY" => Some("secret".into()),
        _ => None,
    }
}

#[test]
fn urls_keys_and_refusals() {
    let t = Target::new("s3://fleet-data/cachescope/", Some("http://127.0.0.1:9"), env).unwrap();
    let f = "cachescope-node-a-1-20261123T215646Z-20098-0001.parquet";
    assert_eq!(t.key("node-a-1", f), format!("cachescope/host=node-a-1/date=2026-11-23/{f}"));
    let bare = Target::new("s3://fleet-data", Some("http://127.0.0.1:9"), env).unwrap();
    assert_eq!(bare.key("h", "x.parquet"), "host=h/date=unknown/x.parquet");
    assert_eq!(date_of(f).as_deref(), Some("2026-11-23"));
    assert_eq!(date_of("cachescope-h-2026-1-2.parquet"), None);
    for bad in ["fleet-data", "s3://", "s3://Fleet", "s3://b/../x", "http://b/x"] {
        assert!(matches!(Target::new(bad, None, env), Err(UploadError::Url(_))), "{bad}");
    }
    assert!(matches!(Target::new("s3://bucket", Some("ftp://x"), env), Err(UploadError::Endpoint(..))));
    assert!(matches!(Target::new("s3://bucket", None, |_| None), Err(UploadError::Credentials("AWS_ACCESS_KEY_ID"))));
}

/// (path, body length) of each PUT a store accepted.
type Accepted = Arc<Mutex<Vec<(String, usize)>>>;

/// A store that refuses the first `fail` PUTs with 503, then keeps what it is given.
fn store(fail: usize) -> (String, Accepted) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", l.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let n = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            // (As S3 decodes it: `=` arrives percent-encoded.)
            let path = line.split(' ').nth(1).unwrap_or("").split('?').next().unwrap_or("").replace("%3D", "=");
            let mut len = 0;
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let mut s = s;
            if n.fetch_add(1, Ordering::SeqCst) < fail {
                let _ = s.write_all(b"HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            } else {
                g.lock().unwrap().push((path, len));
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        }
    });
    (addr, got)
}

#[test]
fn retries_until_the_store_answers_and_never_twice() {
    let dir = tempfile::tempdir().unwrap();
    for (n, size) in
        [("cachescope-h-20261123T100000Z-1-0001.parquet", 10), ("cachescope-h-20261123T101000Z-1-0002.parquet", 20)]
    {
        std::fs::write(dir.path().join(n), vec![7u8; size]).unwrap();
    }
    std::fs::write(dir.path().join("cachescope-h-20261123T102000Z-1-0003.parquet.partial"), b"open").unwrap();
    let (addr, got) = store(2);
    let t = Target::new("s3://bucket/p", Some(&addr), env).unwrap();
    let u = Uploader::start(dir.path().to_path_buf(), "h".into(), t.clone());
    // Two refusals cost 1 s and 2 s of backoff; the end returns when all is uploaded, and
    // only a hung store reaches the deadline.
    let line = u.finish(Duration::from_secs(60), &AtomicBool::new(false));
    assert!(line.starts_with("uploaded 2 files (30 bytes) to s3://bucket/p after 2 failed attempts"), "{line}");
    let put = got.lock().unwrap().clone();
    assert_eq!(
        put,
        [
            ("/bucket/p/host=h/date=2026-11-23/cachescope-h-20261123T100000Z-1-0001.parquet".to_string(), 10),
            ("/bucket/p/host=h/date=2026-11-23/cachescope-h-20261123T101000Z-1-0002.parquet".to_string(), 20)
        ],
        "the open file waits"
    );
    // A later run: the journal says both are there; only the file closed since goes.
    std::fs::rename(
        dir.path().join("cachescope-h-20261123T102000Z-1-0003.parquet.partial"),
        dir.path().join("cachescope-h-20261123T102000Z-1-0003.parquet"),
    )
    .unwrap();
    let line = Uploader::start(dir.path().to_path_buf(), "h".into(), t)
        .finish(Duration::from_secs(60), &AtomicBool::new(false));
    assert!(line.starts_with("uploaded 1 files (4 bytes)"), "{line}");
    assert_eq!(got.lock().unwrap().len(), 3, "nothing uploaded twice");
}

#[test]
fn a_store_that_is_down_keeps_the_files_for_later() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cachescope-h-20261123T100000Z-1-0001.parquet"), b"rows").unwrap();
    // Nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = Target::new("s3://bucket", Some(&format!("http://127.0.0.1:{port}")), env).unwrap();
    let line = Uploader::start(dir.path().to_path_buf(), "h".into(), t)
        .finish(Duration::from_secs(2), &AtomicBool::new(false));
    assert!(line.contains("1 not yet (kept on disk"), "{line}");
    assert!(!dir.path().join(JOURNAL).exists());
    assert!(dir.path().join("cachescope-h-20261123T100000Z-1-0001.parquet").exists());
}

/// A store that takes connections and never answers: the run's end waits its deadline, not the
/// HTTP client's, and every file not acknowledged is counted, however many.
#[test]
fn a_store_that_never_answers_holds_the_end_no_longer_than_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    for i in 1..=3 {
        std::fs::write(dir.path().join(format!("cachescope-h-20261123T10000{i}Z-1-000{i}.parquet")), b"rows").unwrap();
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", l.local_addr().unwrap());
    // Accepted and held open, never read from nor answered.
    let held = Arc::new(Mutex::new(Vec::new()));
    let h = held.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            h.lock().unwrap().push(s);
        }
    });
    let t = Target::new("s3://bucket", Some(&addr), env).unwrap();
    let u = Uploader::start(dir.path().to_path_buf(), "h".into(), t);
    // The upload is under way (the store took its connection) before the end begins.
    let until = Instant::now() + Duration::from_secs(60);
    while held.lock().unwrap().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!held.lock().unwrap().is_empty(), "the store was reached");
    let started = Instant::now();
    let line = u.finish(Duration::from_secs(2), &AtomicBool::new(false));
    let took = started.elapsed();
    println!("the end with a store that never answers, deadline 2 s: {took:?}");
    // Ended by its own deadline: the request had not failed (the HTTP client would have said
    // why after STALL_TIMEOUT), and far sooner than that.
    assert!(
        line.ends_with("3 not yet (kept on disk, uploaded by the next run into this directory): out of time"),
        "{line}"
    );
    assert!(took < STALL_TIMEOUT - Duration::from_secs(2), "the end waited {took:?}");
    // Interrupted: at once, whatever the deadline.
    let t = Target::new("s3://bucket", Some(&addr), env).unwrap();
    let u = Uploader::start(dir.path().to_path_buf(), "h".into(), t);
    let started = Instant::now();
    let line = u.finish(Duration::from_secs(300), &AtomicBool::new(true));
    let took = started.elapsed();
    println!("the end when interrupted: {took:?}");
    assert!(
        line.ends_with("3 not yet (kept on disk, uploaded by the next run into this directory): interrupted"),
        "{line}"
    );
    assert!(took < Duration::from_secs(30), "not its deadline: {took:?}");
}

/// The journal holds any file name (issue 41: `old run.parquet` was uploaded again by every
/// run, split at its space) and still reads the first format's lines.
#[test]
fn the_journal_holds_names_with_spaces_and_reads_the_old_format() {
    let dir = tempfile::tempdir().unwrap();
    let (endpoint, got) = store(0);
    let t = Target::new("s3://bucket/p", Some(&endpoint), env).unwrap();
    for name in
        ["old run.parquet", "cachescope-h-20261123T100000Z-1-0001.parquet", "two  spaces\nand a newline.parquet"]
    {
        std::fs::write(dir.path().join(name), b"rows").unwrap();
    }
    let line = Uploader::start(dir.path().to_path_buf(), "h".into(), t.clone())
        .finish(Duration::from_secs(60), &AtomicBool::new(false));
    assert!(line.starts_with("uploaded 3 files"), "{line}");
    let line = Uploader::start(dir.path().to_path_buf(), "h".into(), t.clone())
        .finish(Duration::from_secs(60), &AtomicBool::new(false));
    assert!(line.starts_with("uploaded 0 files") && !line.contains("not yet"), "a second run sends nothing: {line}");
    assert_eq!(got.lock().unwrap().len(), 3, "each file once");
    // A journal of the first format ("NAME KEY"), names with spaces included.
    let old = "old run.parquet p/host=h/date=unknown/old run.parquet\n\
               cachescope-h-20261123T100000Z-1-0001.parquet p/host=h/date=2026-11-23/cachescope-h-20261123T100000Z-1-0001.parquet\n";
    std::fs::write(dir.path().join(JOURNAL), old).unwrap();
    let done = acknowledged(dir.path());
    assert!(
        done.contains("old run.parquet") && done.contains("cachescope-h-20261123T100000Z-1-0001.parquet"),
        "{done:?}"
    );
    assert_eq!(journaled_file(&journal_line("a b\nc", "k/a b\nc")).as_deref(), Some("a b\nc"));
}
