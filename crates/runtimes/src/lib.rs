//! Container metadata from the runtimes, through their APIs on their local sockets: Docker
//! Engine's `GET /containers/{id}/json`, which Podman serves too. Names, images, and the pod a
//! kubelet made the container for (its `io.kubernetes.pod.*` labels). For the CRI runtimes
//! (containerd, CRI-O), whose APIs are gRPC, the same identity is read from the OCI bundle the
//! runtime writes for each container ([`Bundles`]): the CRI sets the pod's name, namespace and
//! uid, the container's name and its image as annotations of the OCI spec. The bundle is
//! read rather than asked of the CRI (`ContainerStatus` on the runtime's socket, as the kubelet
//! does): the annotations are the ones the CRI plugin derives from the kubelet's request, the
//! same values its API would return; a file read needs no gRPC client in the daemon and no
//! socket path per runtime; and it is there from the container's first instruction, while
//! the runtime's API can be slow or busy exactly when a node is loaded. cAdvisor, for its
//! part, asks containerd's own API (not the CRI) for the same spec. Tested against containerd's
//! CRI plugin driven as a kubelet drives it (crates/cli/tests/kubernetes.rs).
//!
//! Never on the sampling path: a [`Resolver`] thread asks, and fills the container's
//! [`ContainerMeta::runtime`] once answered (every holder of the container's `Arc` sees it);
//! every [`REFRESH`] it lists each runtime's containers once and follows renames.
//! A runtime that cannot be reached leaves ids only, and says why once.

use cachescope_engine::{ContainerMeta, RuntimeMeta};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest answer read: an inspect is a few KiB; labels can make it tens.
const MAX_ANSWER: u64 = 1 << 20;
/// Longest list of containers read: a KiB or two per container.
const MAX_LIST: u64 = 64 << 20;
const TIMEOUT: Duration = Duration::from_secs(2);
/// How often the names of the containers already resolved are checked against their
/// runtime's list: `docker rename` changes a name in place, and one list request covers every
/// container of a runtime.
pub const REFRESH: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{socket}: {error}")]
    Io { socket: PathBuf, error: std::io::Error },
    #[error("{socket}: HTTP {status} for {path}")]
    Status { socket: PathBuf, status: u16, path: String },
    #[error("{socket}: malformed answer to {path}: {why}")]
    Malformed { socket: PathBuf, path: String, why: String },
}

/// A Docker-compatible Engine API on a unix socket.
#[derive(Debug, Clone)]
pub struct EngineApi {
    /// "Docker", "Podman": for people.
    pub runtime: &'static str,
    pub socket: PathBuf,
}

impl EngineApi {
    pub fn docker() -> EngineApi {
        EngineApi { runtime: "Docker", socket: PathBuf::from("/var/run/docker.sock") }
    }

    pub fn podman() -> EngineApi {
        EngineApi { runtime: "Podman", socket: PathBuf::from("/run/podman/podman.sock") }
    }

    /// A container's metadata (`id`: its full id or name).
    pub fn inspect(&self, id: &str) -> Result<RuntimeMeta, ApiError> {
        // Ids come from cgroup names: only what an id or name can hold goes into the path.
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
            return Err(self.malformed(id, "not a container id"));
        }
        let path = format!("/containers/{id}/json");
        let body = self.get(&path, MAX_ANSWER)?;
        parse_inspect(&body).map_err(|why| self.malformed(&path, &why))
    }

    /// Every container's id and name (`GET /containers/json?all=1`).
    pub fn names(&self) -> Result<Vec<(String, String)>, ApiError> {
        let path = "/containers/json?all=1";
        let body = self.get(path, MAX_LIST)?;
        parse_list(&body).map_err(|why| self.malformed(path, &why))
    }

    fn malformed(&self, path: &str, why: &str) -> ApiError {
        ApiError::Malformed { socket: self.socket.clone(), path: path.to_string(), why: why.to_string() }
    }

    /// One GET; HTTP/1.0, so the answer ends with the connection.
    fn get(&self, path: &str, max: u64) -> Result<Vec<u8>, ApiError> {
        let io = |error| ApiError::Io { socket: self.socket.clone(), error };
        let mut s = UnixStream::connect(&self.socket).map_err(io)?;
        s.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        s.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes()).map_err(io)?;
        let mut answer = Vec::new();
        s.take(max).read_to_end(&mut answer).map_err(io)?;
        let (status, chunked, body) = split_response(&answer).ok_or_else(|| self.malformed(path, "no HTTP head"))?;
        if status != 200 {
            return Err(ApiError::Status { socket: self.socket.clone(), status, path: path.to_string() });
        }
        if chunked {
            return dechunk(body).ok_or_else(|| self.malformed(path, "bad chunked encoding"));
        }
        Ok(body.to_vec())
    }
}

/// Status, whether the body is chunked, and the body.
fn split_response(a: &[u8]) -> Option<(u16, bool, &[u8])> {
    let end = a.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&a[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    Some((status, chunked, &a[end + 4..]))
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&b[..eol]).ok()?.split(';').next()?.trim();
        let n = usize::from_str_radix(size, 16).ok()?;
        b = &b[eol + 2..];
        if n == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..n)?);
        b = b.get(n + 2..)?;
    }
}

/// The fields of an inspect answer we use.
pub fn parse_inspect(body: &[u8]) -> Result<RuntimeMeta, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let s = |v: Option<&Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from);
    let labels = v.pointer("/Config/Labels");
    let label = |k: &str| s(labels.and_then(|l| l.get(k)));
    Ok(RuntimeMeta {
        name: s(v.get("Name")).map(|n| n.trim_start_matches('/').to_string()),
        image: s(v.pointer("/Config/Image")),
        pod_name: label("io.kubernetes.pod.name"),
        pod_namespace: label("io.kubernetes.pod.namespace"),
        pod_container: label("io.kubernetes.container.name"),
    })
}

/// The ids and names of a container list (`Names` hold "/name" on Docker).
pub fn parse_list(body: &[u8]) -> Result<Vec<(String, String)>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let list = v.as_array().ok_or("not a list")?;
    Ok(list
        .iter()
        .filter_map(|c| {
            let id = c.get("Id")?.as_str()?;
            let name = c.get("Names")?.as_array()?.first()?.as_str()?.trim_start_matches('/');
            (!id.is_empty() && !name.is_empty()).then(|| (id.to_string(), name.to_string()))
        })
        .collect())
}

/// Longest OCI spec read: a few KiB, tens with many mounts and annotations.
const MAX_SPEC: u64 = 4 << 20;

/// The OCI bundles a CRI runtime writes, one `config.json` per container: path templates
/// where `{id}` is the container id (the cgroup's last component).
#[derive(Debug, Clone)]
pub struct Bundles {
    pub templates: Vec<String>,
}

impl Bundles {
    /// containerd's (Kubernetes' `k8s.io` namespace; k3s's state directory too) and CRI-O's.
    pub fn cri() -> Bundles {
        Bundles {
            templates: vec![
                "/run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json".into(),
                "/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json".into(),
                "/run/containers/storage/overlay-containers/{id}/userdata/config.json".into(),
            ],
        }
    }

    /// The container's identity from its bundle's annotations; None where no bundle holds it.
    pub fn inspect(&self, id: &str) -> Result<Option<RuntimeMeta>, String> {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) || id.starts_with('.')
        {
            return Err(format!("{id:?} is not a container id"));
        }
        for t in &self.templates {
            let path = PathBuf::from(t.replace("{id}", id));
            // A regular file only (never a FIFO that would block), and bounded.
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() => {}
                _ => continue,
            }
            let mut body = Vec::new();
            std::fs::File::open(&path)
                .and_then(|f| f.take(MAX_SPEC).read_to_end(&mut body))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            return parse_oci_spec(&body).map(Some).map_err(|why| format!("{}: {why}", path.display()));
        }
        Ok(None)
    }
}

/// The identity the CRI leaves in an OCI spec's annotations: containerd's CRI plugin
/// (`io.kubernetes.cri.*`) or CRI-O (`io.kubernetes.pod.*`, `io.kubernetes.container.name`).
pub fn parse_oci_spec(body: &[u8]) -> Result<RuntimeMeta, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let ann = v.get("annotations");
    let get = |keys: &[&str]| {
        keys.iter().find_map(|k| ann.and_then(|a| a.get(k)).and_then(Value::as_str).filter(|s| !s.is_empty()))
    };
    let container = get(&["io.kubernetes.cri.container-name", "io.kubernetes.container.name"]).map(String::from);
    // A pod's sandbox (pause) container has no container name of its own.
    let sandbox = get(&["io.kubernetes.cri.container-type"]) == Some("sandbox")
        || get(&["io.kubernetes.cri-o.ContainerType"]) == Some("sandbox");
    Ok(RuntimeMeta {
        name: if sandbox { Some("POD".into()) } else { container.clone() },
        image: get(&["io.kubernetes.cri.image-name", "io.kubernetes.cri-o.ImageName"]).map(String::from),
        pod_name: get(&["io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"]).map(String::from),
        pod_namespace: get(&["io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"]).map(String::from),
        pod_container: if sandbox { None } else { container },
    })
}

/// Which API a container's runtime answers on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Docker,
    Podman,
    /// containerd or CRI-O, through the OCI bundles they write.
    Cri,
}

struct Ask {
    which: Which,
    id: String,
    meta: Arc<ContainerMeta>,
}

/// A thread that asks the runtimes about new containers and fills in their metadata.
pub struct Resolver {
    tx: Option<Sender<Ask>>,
    handle: Option<JoinHandle<()>>,
    said: Arc<Mutex<Vec<String>>>,
    told: usize,
}

impl Resolver {
    pub fn start(docker: EngineApi, podman: EngineApi, cri: Bundles) -> Resolver {
        let (tx, rx) = channel();
        let said = Arc::new(Mutex::new(Vec::new()));
        let s2 = said.clone();
        let handle = std::thread::Builder::new()
            .name("runtime-meta".into())
            .spawn(move || serve(rx, docker, podman, cri, s2))
            .ok();
        Resolver { tx: Some(tx), handle, said, told: 0 }
    }

    /// Ask about a container; its `meta.runtime` is set when the runtime answers.
    pub fn ask(&self, which: Which, id: &str, meta: Arc<ContainerMeta>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Ask { which, id: id.to_string(), meta });
        }
    }

    /// Lines not yet given out: why a runtime could not be asked (once per runtime).
    pub fn news(&mut self) -> Vec<String> {
        let said = self.said.lock().unwrap_or_else(|p| p.into_inner());
        let out = said[self.told..].to_vec();
        self.told = said.len();
        out
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A container resolved through an Engine API, whose name is checked again at each refresh.
struct Followed {
    which: Which,
    id: String,
    meta: Weak<ContainerMeta>,
}

fn serve(rx: Receiver<Ask>, docker: EngineApi, podman: EngineApi, cri: Bundles, said: Arc<Mutex<Vec<String>>>) {
    let mut told: Vec<Which> = Vec::new();
    let mut say = |which: Which, line: String| {
        if !told.contains(&which) {
            told.push(which);
            said.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    };
    let mut followed: Vec<Followed> = Vec::new();
    let mut next_refresh = Instant::now() + REFRESH;
    loop {
        let a = match rx.recv_timeout(next_refresh.saturating_duration_since(Instant::now())) {
            Ok(a) => a,
            Err(RecvTimeoutError::Timeout) => {
                refresh(&mut followed, &docker, &podman);
                next_refresh = Instant::now() + REFRESH;
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let api = match a.which {
            Which::Docker => &docker,
            Which::Podman => &podman,
            Which::Cri => {
                // The bundle is written before the container's cgroup exists; one retry all
                // the same (CRI-O's may lag on a loaded node). A pod's names never change.
                let mut r = cri.inspect(&a.id);
                if matches!(r, Ok(None)) {
                    std::thread::sleep(Duration::from_millis(100));
                    r = cri.inspect(&a.id);
                }
                match r {
                    Ok(Some(m)) => {
                        a.meta.runtime.set(m);
                    }
                    Ok(None) => say(
                        Which::Cri,
                        format!(
                            "containerd/CRI-O container {} by id only: no OCI bundle for it at {}",
                            a.id,
                            cri.templates.join(", ")
                        ),
                    ),
                    Err(e) => say(Which::Cri, format!("containerd/CRI-O container {} by id only: {e}", a.id)),
                }
                continue;
            }
        };
        // A container may be asked about the moment its cgroup appears, before the runtime
        // lists it: one retry.
        let mut r = api.inspect(&a.id);
        if matches!(r, Err(ApiError::Status { status: 404, .. })) {
            std::thread::sleep(Duration::from_millis(100));
            r = api.inspect(&a.id);
        }
        match r {
            Ok(m) => {
                a.meta.runtime.set(m);
                followed.push(Followed { which: a.which, id: a.id, meta: Arc::downgrade(&a.meta) });
            }
            // Said once per runtime: unreachable (not installed, API off, no permission),
            // or answering what we cannot use.
            Err(e) => {
                let line = match e {
                    ApiError::Io { .. } => format!("{} containers by id only: its API: {e}", api.runtime),
                    _ => format!("{} container {} by id only: {e}", api.runtime, a.id),
                };
                say(a.which, line);
            }
        }
    }
}

/// Renames: each runtime with followed containers lists its containers once, and a followed
/// container whose name changed gets the new one. Containers gone from cachescope are
/// dropped; a runtime that does not answer now is asked again at the next refresh.
fn refresh(followed: &mut Vec<Followed>, docker: &EngineApi, podman: &EngineApi) {
    followed.retain(|f| f.meta.strong_count() > 0);
    for (which, api) in [(Which::Docker, docker), (Which::Podman, podman)] {
        if !followed.iter().any(|f| f.which == which) {
            continue;
        }
        let Ok(list) = api.names() else { continue };
        let names: std::collections::HashMap<String, String> = list.into_iter().collect();
        for f in followed.iter().filter(|f| f.which == which) {
            let (Some(meta), Some(name)) = (f.meta.upgrade(), names.get(&f.id)) else { continue };
            if meta.name() != Some(name.as_str()) {
                let mut m = meta.runtime.get().cloned().unwrap_or_default();
                m.name = Some(name.clone());
                meta.runtime.set(m);
            }
        }
    }
}

#[cfg(test)]
mod tests;
