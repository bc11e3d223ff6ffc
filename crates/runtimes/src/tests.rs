use super::*;
use std::os::unix::net::UnixListener;

/// An answer as Docker 20.10 gives it (trimmed).
const INSPECT: &str = r#"{"Id":"1762453feaf6","Name":"/web-1","Config":{"Image":"shop/web:2","Labels":{"com.docker.compose.project":"shop","io.kubernetes.pod.name":"web-0","io.kubernetes.pod.namespace":"prod","io.kubernetes.container.name":"app"}}}"#;

/// A one-request server on a fresh socket that answers `answer`; the socket's path.
fn serve_once(dir: &tempfile::TempDir, answer: Vec<u8>) -> PathBuf {
    let p = dir.path().join("api.sock");
    let l = UnixListener::bind(&p).unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut head = [0u8; 1024];
            let _ = s.read(&mut head);
            let _ = s.write_all(&answer);
        }
    });
    p
}

#[test]
fn inspect_fields() {
    let m = parse_inspect(INSPECT.as_bytes()).unwrap();
    assert_eq!(m.name.as_deref(), Some("web-1"));
    assert_eq!(m.image.as_deref(), Some("shop/web:2"));
    assert_eq!((m.pod_name.as_deref(), m.pod_namespace.as_deref()), (Some("web-0"), Some("prod")));
    assert_eq!(m.pod_container.as_deref(), Some("app"));
    let bare = parse_inspect(br#"{"Name":"","Config":{"Labels":null}}"#).unwrap();
    assert_eq!(bare, RuntimeMeta::default(), "empty is absent");
    assert!(parse_inspect(b"<html>").is_err());
}

#[test]
fn over_a_socket_plain_and_chunked() {
    let dir = tempfile::tempdir().unwrap();
    let plain = format!("HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{INSPECT}");
    let api = EngineApi { runtime: "Docker", socket: serve_once(&dir, plain.into_bytes()) };
    assert_eq!(api.inspect("1762453feaf6").unwrap().name.as_deref(), Some("web-1"));
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = INSPECT.split_at(20);
    let chunked = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let api = EngineApi { runtime: "Docker", socket: serve_once(&dir, chunked.into_bytes()) };
    assert_eq!(api.inspect("web-1").unwrap().pod_namespace.as_deref(), Some("prod"));
    let dir = tempfile::tempdir().unwrap();
    let missing = b"HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"No such container\"}".to_vec();
    let api = EngineApi { runtime: "Docker", socket: serve_once(&dir, missing) };
    assert!(matches!(api.inspect("abc"), Err(ApiError::Status { status: 404, .. })));
    assert!(matches!(api.inspect("../../x"), Err(ApiError::Malformed { .. })), "never a path");
}

#[test]
fn unreachable_runtime_is_said_once_and_ids_stay() {
    let dir = tempfile::tempdir().unwrap();
    let gone = EngineApi { runtime: "Docker", socket: dir.path().join("none.sock") };
    let mut r = Resolver::start(gone.clone(), EngineApi { runtime: "Podman", ..gone });
    let metas: Vec<Arc<ContainerMeta>> = (0..3).map(|i| ContainerMeta::named(&format!("c{i}"))).collect();
    for m in &metas {
        r.ask(Which::Docker, &m.id, m.clone());
    }
    let mut news = Vec::new();
    for _ in 0..100 {
        news.extend(r.news());
        if !news.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    news.extend(r.news());
    assert_eq!(news.len(), 1, "{news:?}");
    assert!(news[0].starts_with("Docker containers by id only: its API: ") && news[0].contains("none.sock"));
    assert!(metas.iter().all(|m| m.runtime.get().is_none()));
}
