//! Kubernetes pods as the kubelet makes them: this test speaks the CRI (the kubelet's gRPC
//! API) to containerd's CRI plugin, with the pod and container metadata and labels a kubelet
//! sends, and checks that cachescope names the pod's container by pod, namespace and
//! container in the live view, the Parquet rows and the Prometheus labels.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
#[path = "common/cri.rs"]
mod kubelet;
use arrow_array::cast::AsArray;
use common::{bin, busybox_image, docker, get, parquet_files, read, tmux};
use k8s_cri::v1 as cri;
use kubelet::Cri;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SOCKET: &str = "/run/containerd/containerd.sock";
const PAUSE: &str = "localhost/cachescope-test-pause:1";

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

/// SIGTERM, 5 s to exit, then SIGKILL.
fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn stop_containerd(d: Child) {
    stop(d);
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
    if Command::new("tmux").arg("-V").output().is_err() {
        return cachescope_testkit::skip("no tmux (scripts/setup.sh installs it)");
    }
    let Some(image) = images_to_import() else { return };
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

/// The busybox image, built with Docker; None, said as a skip, where that cannot be.
fn images_to_import() -> Option<&'static str> {
    if docker(&["info", "--format", "{{.ServerVersion}}"]).is_none() {
        cachescope_testkit::skip("no Docker daemon to build the images with");
        return None;
    }
    let image = busybox_image("docker");
    if image.is_none() {
        cachescope_testkit::skip("no busybox image (busybox-static)");
    }
    image
}

/// `cachescope hook nri` registered on the NRI socket of Debian unstable's containerd 2.1 (NRI
/// is on by default there; this release's 1.6 has none), started here with its own root,
/// state and sockets beside the host's containerd. A pod made through the CRI, as in the test
/// above: the plugin is told of its container at StartContainer, while the container's first
/// process is still runc's init (its program not yet run), finds that process in the
/// container's cgroup (containerd 2.1 gives no pid at that event), and names the pod; the
/// container then runs. On this host (no resctrl) the tagging itself says why it cannot be;
/// the RDT machine's guests test the tagging (`young_containers_are_tagged_before_their_first_instruction`).
#[test]
fn the_nri_plugin_is_told_of_each_container_before_its_program_runs() {
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return cachescope_testkit::skip("not root");
    }
    let Some(image) = images_to_import() else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let got = Command::new(root.join("scripts/debian-containerd.sh")).output().unwrap();
    assert!(got.status.success(), "scripts/debian-containerd.sh: {}", String::from_utf8_lossy(&got.stderr));
    let bin_dir = PathBuf::from(String::from_utf8_lossy(&got.stdout).trim());
    let d = tempfile::tempdir().unwrap();
    let (sock, nri) = (d.path().join("containerd.sock"), d.path().join("nri.sock"));
    let config = format!(
        "version = 3\nroot = \"{0}/root\"\nstate = \"{0}/state\"\n[grpc]\n  address = \"{1}\"\n\
         [plugins.'io.containerd.nri.v1.nri']\n  disable = false\n  socket_path = \"{2}\"\n  \
         plugin_path = \"{0}/nri-plugins\"\n  plugin_config_path = \"{0}/nri-conf\"\n\
         [plugins.'io.containerd.cri.v1.runtime']\n  restrict_oom_score_adj = true\n\
         [plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = \"{PAUSE}\"\n",
        d.path().display(),
        sock.display(),
        nri.display()
    );
    std::fs::write(d.path().join("config.toml"), config).unwrap();
    // Its shim is found on PATH; runc is this release's.
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let log = std::fs::File::create(d.path().join("containerd.log")).unwrap();
    let daemon = Command::new(bin_dir.join("containerd"))
        .arg("--config")
        .arg(d.path().join("config.toml"))
        .env("PATH", &path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Not by connecting: containerd takes any connection there for a plugin, and says so.
    while !nri.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let plugin_log = d.path().join("plugin.log");
    let plugin = bin()
        .args(["hook", "nri", "--plugin-index", "10", "--containers", "kubepods/*/*/*", "--socket"])
        .arg(&nri)
        .stderr(std::fs::File::create(&plugin_log).unwrap())
        .spawn()
        .unwrap();
    let ctr = format!("{} --address {}", bin_dir.join("ctr").display(), sock.display());
    let result = std::panic::catch_unwind(|| nri_case(image, &sock, &ctr, &plugin_log));
    stop(plugin);
    stop(daemon);
    let said = std::fs::read_to_string(&plugin_log).unwrap_or_default();
    println!("the plugin said:\n{said}");
    if let Err(p) = result {
        let log = std::fs::read_to_string(d.path().join("containerd.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        println!("containerd's log ends:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        std::panic::resume_unwind(p);
    }
}

fn nri_case(image: &str, sock: &Path, ctr: &str, plugin_log: &Path) {
    let said = || std::fs::read_to_string(plugin_log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !said().contains("registered with containerd") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(said().contains("hook nri: registered with containerd 2."), "the plugin: {}", said());
    let cri = Cri::connect(sock).unwrap_or_else(|e| panic!("containerd 2's CRI: {e}"));
    cri.version();
    import_images(&cri, image, ctr);
    let uid = format!("0c5e7a11-0000-4000-8001-{:012}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("pods");
    std::fs::create_dir_all(logs.join("app")).unwrap();
    let mut undo = Undo { cri: &cri, pod: None, session: String::new(), recorder: None, uid: uid.clone() };
    let id = start_pod(&cri, &mut undo, &uid, &logs, image);
    let cid = id.clone();
    let status = cri.run("ContainerStatus", |mut c| async move {
        c.container_status(cri::ContainerStatusRequest { container_id: cid, verbose: false }).await
    });
    let state = status.status.map(|s| s.state);
    assert_eq!(state, Some(cri::ContainerState::ContainerRunning as i32), "the plugin let it start");
    undo.remove_pod();
    drop(undo);
    let said = said();
    let line = said
        .lines()
        .find(|l| l.contains("StartContainer shop/web-0/app"))
        .unwrap_or_else(|| panic!("no StartContainer for shop/web-0/app in: {said}"));
    // "pid N (runc:[2:INIT])": runc's init, waiting for the start, is the container's process.
    let pid: u32 = line
        .split("pid ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line}"));
    assert!(pid > 1 && line.contains("(runc:[2:INIT])"), "before the program ran: {line}");
    assert!(line.contains(&format!("kubepods/besteffort/pod{uid}/{id}")) || line.contains("resctrl"), "{line}");
}

fn pod_case(image: &str) {
    let cri = Cri::connect(Path::new(SOCKET)).unwrap_or_else(|e| panic!("containerd's CRI: {e}"));
    let version = cri.version();
    println!("CRI: {} {} (API {})", version.runtime_name, version.runtime_version, version.runtime_api_version);
    import_images(&cri, image, "ctr");
    let img = image.to_string();

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

    let id = start_pod(&cri, &mut undo, &uid, &logs, &img);

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

/// `image` and the sandbox (pause) image this containerd uses, named as its own configuration
/// says, made here (no registry): busybox sleeping, imported into the CRI's namespace with
/// `ctr` (the command, with its address where not the default).
fn import_images(cri: &Cri, image: &str, ctr: &str) {
    // Both tests make the pause image under one name: one at a time.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let status = cri.run("Status", |mut c| async move { c.status(cri::StatusRequest { verbose: true }).await });
    let config: serde_json::Value =
        serde_json::from_str(status.info.get("config").map_or("{}", String::as_str)).unwrap();
    // containerd 1.x says; 2.x does not, and the test that starts one configures PAUSE.
    let sandbox_image = config["sandboxImage"].as_str().unwrap_or(PAUSE).to_string();
    if docker(&["image", "inspect", PAUSE]).is_none() {
        sh(&format!(
            "docker create --name cachescope-test-pause-{pid} {image} /bin/sleep 1 >/dev/null && \
             docker export cachescope-test-pause-{pid} | docker import --change 'ENTRYPOINT [\"/bin/sleep\", \"86400\"]' - {PAUSE} >/dev/null; \
             s=$?; docker rm cachescope-test-pause-{pid} >/dev/null; exit $s",
            pid = std::process::id()
        ));
    }
    sh(&format!("docker save {image} {PAUSE} | {ctr} -n k8s.io images import - >/dev/null"));
    if sandbox_image != PAUSE {
        sh(&format!("{ctr} -n k8s.io images tag --force {PAUSE} {sandbox_image} >/dev/null"));
    }
    // The CRI's image store follows containerd's events (2.x: a moment after the import): both
    // images seen before a pod is asked for (a sandbox image not seen yet is pulled, and there is
    // no registry: a CI run's pod failed so). A ceiling only a hang reaches.
    let deadline = Instant::now() + Duration::from_secs(60);
    for wanted in [image, sandbox_image.as_str()] {
        loop {
            let seen = cri.rt.block_on(cri.images.clone().image_status(cri::ImageStatusRequest {
                image: Some(cri::ImageSpec { image: wanted.to_string(), ..Default::default() }),
                verbose: false,
            }));
            if seen.is_ok_and(|r| r.into_inner().image.is_some()) {
                break;
            }
            assert!(Instant::now() < deadline, "the CRI does not see {wanted}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The pod and its container made and started as a kubelet does; the container's id. The pod
/// is `undo`'s to remove.
fn start_pod(cri: &Cri, undo: &mut Undo, uid: &str, logs: &Path, image: &str) -> String {
    let pod = cri.run_pod(uid, logs);
    undo.pod = Some(pod.clone());
    // A little work every 100 ms, so that it drives the emulated cache while recorded (a
    // container that only sleeps may have used its CPU before it was found).
    let work = "while :; do n=0; while [ $n -lt 2000 ]; do n=$((n+1)); done; sleep 0.1; done";
    cri.start_container(&pod, uid, logs, image, work)
}
