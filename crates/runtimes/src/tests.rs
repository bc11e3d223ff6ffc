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
    let mut r = Resolver::start(gone.clone(), EngineApi { runtime: "Podman", ..gone }, Bundles { templates: vec![] });
    let metas: Vec<Arc<ContainerMeta>> = (0..3).map(|i| ContainerMeta::named(&format!("c{i}"))).collect();
    for m in &metas {
        r.ask(Which::Docker, &m.id, m.clone());
    }
    // Asks are answered in order: once Podman's news is out, all three Docker asks were
    // answered (waited for, not slept on; 60 s is a hung resolver).
    let p = ContainerMeta::named("p0");
    r.ask(Which::Podman, &p.id, p.clone());
    let mut news = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    while !news.iter().any(|l: &String| l.starts_with("Podman")) && Instant::now() < until {
        news.extend(r.news());
        std::thread::sleep(Duration::from_millis(10));
    }
    news.extend(r.news());
    assert_eq!(news.len(), 2, "{news:?}");
    assert!(news[0].starts_with("Docker containers by id only: its API: ") && news[0].contains("none.sock"));
    assert!(news[1].starts_with("Podman containers by id only: its API: "), "{news:?}");
    assert!(metas.iter().chain([&p]).all(|m| m.runtime.get().is_none()));
}

/// containerd's CRI plugin's annotations (1.6, trimmed), CRI-O's (1.28, trimmed).
const CONTAINERD_SPEC: &str = r#"{"ociVersion":"1.0.2-dev","annotations":{"io.kubernetes.cri.container-name":"app","io.kubernetes.cri.container-type":"container","io.kubernetes.cri.image-name":"registry.k8s.io/shop/web:2","io.kubernetes.cri.sandbox-id":"5f1e","io.kubernetes.cri.sandbox-name":"web-0","io.kubernetes.cri.sandbox-namespace":"prod","io.kubernetes.cri.sandbox-uid":"8f0e0c5c-3c2b-4e2a-9d0a-3b1f7a2c9e11"},"linux":{"cgroupsPath":"kubepods-besteffort-pod8f0e0c5c.slice:cri-containerd:abc"}}"#;
const CRIO_SPEC: &str = r#"{"annotations":{"io.kubernetes.pod.name":"db-1","io.kubernetes.pod.namespace":"data","io.kubernetes.container.name":"postgres","io.kubernetes.cri-o.ImageName":"docker.io/library/postgres:16","io.kubernetes.cri-o.ContainerType":"container"}}"#;
const SANDBOX_SPEC: &str = r#"{"annotations":{"io.kubernetes.cri.container-type":"sandbox","io.kubernetes.cri.sandbox-name":"web-0","io.kubernetes.cri.sandbox-namespace":"prod"}}"#;

#[test]
fn cri_identity_from_oci_bundles() {
    let m = parse_oci_spec(CONTAINERD_SPEC.as_bytes()).unwrap();
    assert_eq!((m.name.as_deref(), m.pod_container.as_deref()), (Some("app"), Some("app")));
    assert_eq!((m.pod_name.as_deref(), m.pod_namespace.as_deref()), (Some("web-0"), Some("prod")));
    assert_eq!(m.image.as_deref(), Some("registry.k8s.io/shop/web:2"));
    let m = parse_oci_spec(CRIO_SPEC.as_bytes()).unwrap();
    assert_eq!(
        (m.name.as_deref(), m.pod_name.as_deref(), m.pod_namespace.as_deref()),
        (Some("postgres"), Some("db-1"), Some("data"))
    );
    assert_eq!(m.image.as_deref(), Some("docker.io/library/postgres:16"));
    let m = parse_oci_spec(SANDBOX_SPEC.as_bytes()).unwrap();
    assert_eq!((m.name.as_deref(), m.pod_container), (Some("POD"), None), "the pause container");
    assert_eq!(parse_oci_spec(b"{}").unwrap(), RuntimeMeta::default());
    assert!(parse_oci_spec(b"not json").is_err());

    // Found through the templates, in order; absent: None; hostile ids never reach a path.
    let dir = tempfile::tempdir().unwrap();
    let id = "c01a7ae6332eb1875d4b7f38ae98fa481f51ec29827865bde8517fd8a9e9cc5f";
    std::fs::create_dir_all(dir.path().join("crio").join(id)).unwrap();
    std::fs::write(dir.path().join("crio").join(id).join("config.json"), CRIO_SPEC).unwrap();
    let b = Bundles {
        templates: vec![
            format!("{}/containerd/{{id}}/config.json", dir.path().display()),
            format!("{}/crio/{{id}}/config.json", dir.path().display()),
        ],
    };
    assert_eq!(b.inspect(id).unwrap().unwrap().pod_name.as_deref(), Some("db-1"));
    assert_eq!(b.inspect("0123abcd").unwrap(), None);
    assert!(b.inspect("../../etc").is_err() && b.inspect("..").is_err() && b.inspect("").is_err());
    // A FIFO where the spec should be is passed over, never opened (it would block).
    let fifo_id = "f1f0";
    std::fs::create_dir_all(dir.path().join("containerd").join(fifo_id)).unwrap();
    let fifo = dir.path().join("containerd").join(fifo_id).join("config.json");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path, alive for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert_eq!(b.inspect(fifo_id).unwrap(), None);
}

#[test]
fn list_fields() {
    let list = br#"[{"Id":"1762453feaf6","Names":["/web-1"],"Image":"shop/web:2"},{"Id":"99","Names":[]},{"Id":"7a","Names":["db"]}]"#;
    let v = parse_list(list).unwrap();
    assert_eq!(v, [("1762453feaf6".to_string(), "web-1".to_string()), ("7a".into(), "db".into())]);
    assert!(parse_list(b"{}").is_err());
}

/// An Engine API that answers every request: the inspect above for an inspect, and the list
/// in `names` (changed by the test) for a list.
fn serve_many(dir: &tempfile::TempDir, names: Arc<Mutex<String>>) -> PathBuf {
    let p = dir.path().join("api.sock");
    let l = UnixListener::bind(&p).unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut head = [0u8; 1024];
            let n = s.read(&mut head).unwrap_or(0);
            let head = String::from_utf8_lossy(&head[..n]).to_string();
            let body = if head.starts_with("GET /containers/json") {
                format!(r#"[{{"Id":"1762453feaf6","Names":["/{}"]}}]"#, names.lock().unwrap())
            } else {
                INSPECT.to_string()
            };
            let _ = s.write_all(format!("HTTP/1.0 200 OK\r\n\r\n{body}").as_bytes());
        }
    });
    p
}

#[test]
fn a_rename_reaches_every_holder_at_the_next_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let names = Arc::new(Mutex::new("web-1".to_string()));
    let api = EngineApi { runtime: "Docker", socket: serve_many(&dir, names.clone()) };
    let r = Resolver::start(api.clone(), api, Bundles { templates: vec![] });
    let meta = Arc::new(ContainerMeta { id: "1762453feaf6".into(), ..Default::default() });
    r.ask(Which::Docker, "1762453feaf6", meta.clone());
    // A rename is seen at the next refresh (REFRESH); waited for, up to what only a hung
    // resolver takes.
    let until = |want: &str| {
        let deadline = Instant::now() + REFRESH * 30;
        while meta.name() != Some(want) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        meta.name().map(String::from)
    };
    assert_eq!(until("web-1").as_deref(), Some("web-1"));
    *names.lock().unwrap() = "web-renamed".into();
    let t = Instant::now();
    assert_eq!(until("web-renamed").as_deref(), Some("web-renamed"));
    println!("the rename followed in {:?} (REFRESH {REFRESH:?})", t.elapsed());
    assert_eq!(meta.pod_name(), Some("web-0"), "the rest of what the runtime said stays");
}
