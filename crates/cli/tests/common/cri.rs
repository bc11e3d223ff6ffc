//! A CRI client as a kubelet speaks it to containerd (the kubelet's gRPC API): pods and their
//! containers with the metadata, labels and annotations a kubelet sends. Shared by
//! tests/kubernetes.rs and examples/cri_pod.rs (the RDT machine's guest's kubelet).

#![allow(dead_code)] // each user takes its own part

use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use tonic::transport::Channel;

/// A CRI client on containerd's socket, each call run to its end.
pub struct Cri {
    pub rt: tokio::runtime::Runtime,
    pub runtime: RuntimeServiceClient<Channel>,
    pub images: ImageServiceClient<Channel>,
}

impl Cri {
    pub fn connect(socket: &Path) -> Result<Cri, String> {
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

    /// The runtime's version, once its CRI answers: a containerd just started takes the socket
    /// before its CRI plugin is ready ("server is not initialized yet"). Waits for that
    /// answer, not a time; the ceiling is for a containerd that never gets there.
    pub fn version(&self) -> cri::VersionResponse {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match self.rt.block_on(self.runtime.clone().version(cri::VersionRequest::default())) {
                Ok(r) => return r.into_inner(),
                Err(e) if e.message().contains("not initialized") && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => panic!("CRI Version: {e}"),
            }
        }
    }

    /// Runs one call of the runtime service.
    pub fn run<T, F>(&self, what: &str, call: impl FnOnce(RuntimeServiceClient<Channel>) -> F) -> T
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match self.rt.block_on(call(self.runtime.clone())) {
            Ok(r) => r.into_inner(),
            Err(e) => panic!("CRI {what}: {e}"),
        }
    }

    /// The pod `shop/web-0` (uid `uid`) as a kubelet makes it; its id.
    pub fn run_pod(&self, uid: &str, logs: &Path) -> String {
        let sc = sandbox_config(uid, logs);
        self.run("RunPodSandbox", |mut c| async move {
            c.run_pod_sandbox(cri::RunPodSandboxRequest { config: Some(sc), runtime_handler: String::new() }).await
        })
        .pod_sandbox_id
    }

    /// Its container `app`, `sh -c script` in `image`, made and started; its id.
    pub fn start_container(&self, pod: &str, uid: &str, logs: &Path, image: &str, script: &str) -> String {
        let (sandbox, config, pod) = (sandbox_config(uid, logs), container_config(uid, image, script), pod.to_string());
        let id = self
            .run("CreateContainer", |mut c| async move {
                c.create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: pod,
                    config: Some(config),
                    sandbox_config: Some(sandbox),
                })
                .await
            })
            .container_id;
        let cid = id.clone();
        self.run("StartContainer", |mut c| async move {
            c.start_container(cri::StartContainerRequest { container_id: cid }).await
        });
        id
    }
}

pub fn kubelet_labels(uid: &str, container: Option<&str>) -> HashMap<String, String> {
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

/// The pod as a kubelet with the cgroupfs driver asks for it.
pub fn sandbox_config(uid: &str, logs: &Path) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "web-0".into(),
            uid: uid.to_string(),
            namespace: "shop".into(),
            attempt: 0,
        }),
        // A host-network pod keeps the node's hostname (the kubelet sends none).
        log_directory: logs.to_string_lossy().into(),
        labels: kubelet_labels(uid, None),
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
    }
}

/// Its container `app`: `sh -c script` in `img`, with the kubelet's labels.
pub fn container_config(uid: &str, img: &str, script: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: "app".into(), attempt: 0 }),
        image: Some(cri::ImageSpec { image: img.to_string(), ..Default::default() }),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        labels: kubelet_labels(uid, Some("app")),
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
    }
}
