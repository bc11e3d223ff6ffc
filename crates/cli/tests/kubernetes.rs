//! Kubernetes pods as the kubelet makes them: this test speaks the CRI (the kubelet's gRPC
//! API) to containerd's CRI plugin, with the pod and container metadata and labels a kubelet
//! sends, and checks that cachescope names the pod's container by pod, namespace and
//! container in the live view, the Parquet rows and the Prometheus labels.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use arrow_array::cast::AsArray;
use common::{bin, busybox_image, docker, get, parquet_files, read, tmux};
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

const SOCKET: &str = "/run/containerd/containerd.sock";
const PAUSE: &str = "localhost/cachescope-test-pause:1";

/// A CRI client on containerd's socket, each call run to its end.
struct Cri {
    rt: tokio::runtime::Runtime,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

impl Cri {
    fn connect(socket: &Path) -> Result<Cri, String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        let path = socket.to_path_buf();
        // The URI is required by the endpoint and ignored by the connector: the socket is the address.
        let endpoint =
            tonic::transport::Endpoint::from_static("http://localhost").connect_timeout(Duration::from_secs(5));
        let channel = rt
            .block_on(endpoint.connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?))
                }
            })))
            .map_err(|e| format!("{}: {e}", socket.display()))?;
        Ok(Cri { rt, runtime: RuntimeServiceClient::new(channel.clone()), images: ImageServiceClient::new(channel) })
    }

    /// Runs one call of the runtime service.
    fn run<T, F>(&self, what: &str, call: impl FnOnce(RuntimeServiceClient<Channel>) -> F) -> T
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match self.rt.block_on(call(self.runtime.clone())) {
            Ok(r) => r.into_inner(),
            Err(e) => panic!("CRI {what}: {e}"),
        }
    }
}

/// containerd with its CRI plugin on [`SOCKET`]: the one running, or one started here (its
/// process, to stop at the end). `config`: where to write the configuration of one started
/// here: the defaults, but oom_score_adj never below containerd's own, as on a node without
/// CAP_SYS_RESOURCE (our machines': a pod's sandbox asks for -998, which runc cannot set).
fn containerd(config: &Path) -> Option<Child> {
    if std::os::unix::net::UnixStream::connect(SOCKET).is_ok() {
        return None;
    }
    std::fs::write(config, "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  restrict_oom_score_adj = true\n")
        .unwrap();
    let child = Command::new("containerd")
        .arg("--config")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(SOCKET).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(child)
}

fn stop_containerd(mut d: Child) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = d.kill();
    let _ = d.wait();
    // A socket left behind would make the next dockerd dial it instead of starting its own.
    for f in ["containerd.sock", "containerd.sock.ttrpc"] {
        let _ = std::fs::remove_file(Path::new(SOCKET).with_file_name(f));
    }
}

/// `sh -c script`, which must succeed.
fn sh(script: &str) {
    let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

/// What the test started, undone however it ends: the pod (and its containers) through the
/// CRI, the live view's tmux session, the recorder, the pod's cgroups.
struct Undo<'a> {
    cri: &'a Cri,
    pod: Option<String>,
    session: String,
    recorder: Option<Child>,
    uid: String,
}

impl Undo<'_> {
    /// Stops the recorder (SIGTERM: it closes its files); its output.
    fn stop_recorder(&mut self) -> Option<std::process::Output> {
        let rec = self.recorder.take()?;
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(rec.id() as i32, libc::SIGTERM) };
        rec.wait_with_output().ok()
    }

    fn remove_pod(&mut self) {
        let Some(p) = self.pod.take() else { return };
        let q = p.clone();
        // Stopping the sandbox stops its containers; removing it removes them.
        let _ = self
            .cri
            .rt
            .block_on(self.cri.runtime.clone().stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: q }));
        let _ = self
            .cri
            .rt
            .block_on(self.cri.runtime.clone().remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: p }));
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        self.remove_pod();
        tmux(&["kill-session", "-t", &self.session]);
        let _ = self.stop_recorder();
        // The pod's cgroups, which the kubelet would remove, in every hierarchy.
        for h in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
            let uid = &self.uid;
            for d in [format!("kubepods/besteffort/pod{uid}"), "kubepods/besteffort".into(), "kubepods".into()] {
                let _ = std::fs::remove_dir(h.path().join(d));
            }
        }
        let _ =
            std::fs::remove_dir(PathBuf::from("/sys/fs/cgroup").join(format!("kubepods/besteffort/pod{}", self.uid)));
    }
}

fn kubelet_labels(uid: &str, container: Option<&str>) -> HashMap<String, String> {
    let mut l: HashMap<String, String> =
        [("io.kubernetes.pod.name", "web-0"), ("io.kubernetes.pod.namespace", "shop"), ("io.kubernetes.pod.uid", uid)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    if let Some(c) = container {
        l.insert("io.kubernetes.container.name".into(), c.into());
    }
    l
}

/// A pod `shop/web-0` with one container `app`, made through the CRI as a kubelet with the
/// cgroupfs driver makes it (pod cgroup `kubepods/besteffort/pod<uid>`, host network, the
/// kubelet's labels and annotations), while `record --listen` and the live view (`monitor`
/// in tmux, 160 columns) run. Both name it `shop/web-0/app`; the rows carry pod, namespace,
/// uid, container name and image.
#[test]
fn pod_made_through_the_cri_is_named_by_pod_namespace_and_container() {
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return cachescope_testkit::skip("not root");
    }
    if Command::new("containerd").arg("--version").output().is_err()
        || Command::new("ctr").arg("--version").output().is_err()
    {
        return cachescope_testkit::skip("containerd is not installed (docker.io brings it)");
    }
    if docker(&["info", "--format", "{{.ServerVersion}}"]).is_none() {
        return cachescope_testkit::skip("no Docker daemon to build the images with");
    }
    if Command::new("tmux").arg("-V").output().is_err() {
        return cachescope_testkit::skip("no tmux (scripts/setup.sh installs it)");
    }
    let Some(image) = busybox_image("docker") else {
        return cachescope_testkit::skip("no busybox image (busybox-static)");
    };
    let conf = tempfile::NamedTempFile::new().unwrap();
    let daemon = containerd(conf.path());
    let result = std::panic::catch_unwind(|| pod_case(image));
    if let Some(d) = daemon {
        stop_containerd(d);
    }
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

fn pod_case(image: &str) {
    let cri = Cri::connect(Path::new(SOCKET)).unwrap_or_else(|e| panic!("containerd's CRI: {e}"));
    let version = cri.run("Version", |mut c| async move { c.version(cri::VersionRequest::default()).await });
    println!("CRI: {} {} (API {})", version.runtime_name, version.runtime_version, version.runtime_api_version);
    // The sandbox (pause) image this containerd uses, from its own configuration, made here
    // (no registry): busybox sleeping, tagged with that name in the CRI's namespace.
    let status = cri.run("Status", |mut c| async move { c.status(cri::StatusRequest { verbose: true }).await });
    let config: serde_json::Value =
        serde_json::from_str(status.info.get("config").map_or("{}", String::as_str)).unwrap();
    let sandbox_image =
        config["sandboxImage"].as_str().unwrap_or_else(|| panic!("no sandboxImage in {config}")).to_string();
    if docker(&["image", "inspect", PAUSE]).is_none() {
        sh(&format!(
            "docker create --name cachescope-test-pause-{pid} {image} /bin/sleep 1 >/dev/null && \
             docker export cachescope-test-pause-{pid} | docker import --change 'ENTRYPOINT [\"/bin/sleep\", \"86400\"]' - {PAUSE} >/dev/null; \
             s=$?; docker rm cachescope-test-pause-{pid} >/dev/null; exit $s",
            pid = std::process::id()
        ));
    }
    sh(&format!("docker save {image} {PAUSE} | ctr -n k8s.io images import - >/dev/null"));
    sh(&format!("ctr -n k8s.io images tag --force {PAUSE} {sandbox_image} >/dev/null"));
    let img = image.to_string();
    let seen = cri.rt.block_on(cri.images.clone().image_status(cri::ImageStatusRequest {
        image: Some(cri::ImageSpec { image: img.clone(), ..Default::default() }),
        verbose: false,
    }));
    assert!(seen.is_ok_and(|r| r.into_inner().image.is_some()), "the CRI does not see {image}");

    let pid = std::process::id();
    let uid = format!("0c5e7a11-0000-4000-8000-{pid:012}");
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("pods");
    std::fs::create_dir_all(logs.join("app")).unwrap();
    let out_dir = dir.path().join("rec");
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let rec = bin()
        // Emulated cache values (this host has none) driven by the host's containers, so that
        // the cAdvisor-named series, which carry only cache values, are on the page.
        .args(["record", "--emulate", "intel-xeon-platinum-8160", "--duration", "40s", "--listen", &addr, "--output"])
        .arg(&out_dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let session = format!("cachescope-test-cri-{pid}");
    let cmd = format!("{} monitor --duration 40s", env!("CARGO_BIN_EXE_cachescope"));
    tmux(&["new-session", "-d", "-s", &session, "-x", "160", "-y", "30", &cmd]);
    let mut undo = Undo { cri: &cri, pod: None, session: session.clone(), recorder: Some(rec), uid: uid.clone() };
    std::thread::sleep(Duration::from_millis(700));

    let sandbox_config = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "web-0".into(),
            uid: uid.clone(),
            namespace: "shop".into(),
            attempt: 0,
        }),
        // A host-network pod keeps the node's hostname (the kubelet sends none).
        log_directory: logs.to_string_lossy().into(),
        labels: kubelet_labels(&uid, None),
        annotations: [("kubernetes.io/config.source".to_string(), "api".to_string())].into(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: format!("/kubepods/besteffort/pod{uid}"),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    network: cri::NamespaceMode::Node as i32,
                    pid: cri::NamespaceMode::Container as i32,
                    ipc: cri::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let sc = sandbox_config.clone();
    let pod = cri
        .run("RunPodSandbox", |mut c| async move {
            c.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(sc), runtime_handler: String::new() }).await
        })
        .pod_sandbox_id;
    undo.pod = Some(pod.clone());
    let container_config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: "app".into(), attempt: 0 }),
        image: Some(cri::ImageSpec { image: img.clone(), ..Default::default() }),
        // A little work every 100 ms, so that it drives the emulated cache while recorded
        // (a container that only sleeps may have used its CPU before it was found).
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "while :; do n=0; while [ $n -lt 2000 ]; do n=$((n+1)); done; sleep 0.1; done".into(),
        ],
        labels: kubelet_labels(&uid, Some("app")),
        annotations: [
            ("io.kubernetes.container.hash", "5f1a2b3c"),
            ("io.kubernetes.container.restartCount", "0"),
            ("io.kubernetes.container.terminationMessagePath", "/dev/termination-log"),
            ("io.kubernetes.container.terminationMessagePolicy", "File"),
            ("io.kubernetes.pod.terminationGracePeriod", "30"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        log_path: "app/0.log".into(),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(cri::LinuxContainerResources { cpu_shares: 2, oom_score_adj: 1000, ..Default::default() }),
            security_context: Some(cri::LinuxContainerSecurityContext::default()),
        }),
        ..Default::default()
    };
    let (p, sc) = (pod.clone(), sandbox_config.clone());
    let id = cri
        .run("CreateContainer", |mut c| async move {
            c.create_container(cri::CreateContainerRequest {
                pod_sandbox_id: p,
                config: Some(container_config),
                sandbox_config: Some(sc),
            })
            .await
        })
        .container_id;
    let cid = id.clone();
    cri.run("StartContainer", |mut c| async move {
        c.start_container(cri::StartContainerRequest { container_id: cid }).await
    });

    // Until /metrics and the live view name it (a new cgroup is found within an upkeep).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut page, mut screen) = (String::new(), String::new());
    while Instant::now() < deadline {
        page = get(&addr, "/metrics").unwrap_or_default();
        screen = tmux(&["capture-pane", "-p", "-t", &session]);
        let named =
            |prefix: &str| page.lines().any(|l| l.starts_with(prefix) && l.contains(&id) && l.contains("web-0"));
        if named("cachescope_llc_occupancy_bytes{")
            && named("container_llc_occupancy_bytes{")
            && screen.contains("shop/web-0/app")
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("live view:\n{screen}");
    println!("metrics of {id}:\n{}", page.lines().filter(|l| l.contains(&id)).collect::<Vec<_>>().join("\n"));

    // As the kubelet ends a pod: its container stopped and removed, then its sandbox.
    let cid = id.clone();
    cri.run("StopContainer", |mut c| async move {
        c.stop_container(cri::StopContainerRequest { container_id: cid, timeout: 0 }).await
    });
    let cid = id.clone();
    cri.run("RemoveContainer", |mut c| async move {
        c.remove_container(cri::RemoveContainerRequest { container_id: cid }).await
    });
    undo.remove_pod();
    tmux(&["send-keys", "-t", &session, "q"]);
    std::thread::sleep(Duration::from_millis(500));
    let out = undo.stop_recorder().unwrap_or_else(|| panic!("the recorder's output"));
    drop(undo);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = screen.lines().find(|l| l.contains("shop/web-0/app"));
    assert!(line.is_some(), "the live view names the pod's container:\n{screen}");
    let (batches, _) = read(&parquet_files(&out_dir));
    let mut named = 0;
    for b in &batches {
        let s = |n: &str| b.column_by_name(n).unwrap().as_string::<i32>().clone();
        let (ids, names, pods, nss, uids, paths) =
            (s("container_id"), s("container_name"), s("pod_name"), s("pod_namespace"), s("pod_uid"), s("cgroup_path"));
        for i in 0..b.num_rows() {
            if ids.value(i) != id {
                continue;
            }
            if named == 0 {
                println!(
                    "row: container_id={} container_name={} pod_name={} pod_namespace={} pod_uid={} cgroup_path={}",
                    ids.value(i),
                    names.value(i),
                    pods.value(i),
                    nss.value(i),
                    uids.value(i),
                    paths.value(i),
                );
            }
            assert_eq!((names.value(i), pods.value(i), nss.value(i)), ("app", "web-0", "shop"));
            assert_eq!(uids.value(i), uid, "from the cgroup path");
            assert!(paths.value(i).ends_with(&format!("kubepods/besteffort/pod{uid}/{id}")), "{}", paths.value(i));
            named += 1;
        }
    }
    assert!(named > 0, "rows of {id}: {err}");
    let ours = |prefix: &str| page.lines().find(|l| l.starts_with(prefix) && l.contains(&id)).unwrap_or_default();
    let metric = ours("cachescope_llc_occupancy_bytes{");
    println!("metric: {metric}");
    for label in ["container_name=\"app\"", "pod_name=\"web-0\"", "pod_namespace=\"shop\""] {
        assert!(metric.contains(label), "{label} in {metric}");
    }
    // cAdvisor's names, as dashboards built on the kubelet's metrics select them.
    let cadvisor = ours("container_llc_occupancy_bytes{");
    println!("metric: {cadvisor}");
    let labels = [
        format!("id=\"/kubepods/besteffort/pod{uid}/{id}\""),
        "name=\"app\"".into(),
        format!("image=\"{image}\""),
        "container=\"app\"".into(),
        "pod=\"web-0\"".into(),
        "namespace=\"shop\"".into(),
    ];
    for label in &labels {
        assert!(cadvisor.contains(label.as_str()), "{label} in {cadvisor}");
    }
}
