//! What `deploy/` ships, checked as a user's cluster or host would check it: the DaemonSet's
//! objects against Kubernetes' schema, the systemd unit with systemd's verifier, and the image
//! run under Docker with exactly the DaemonSet's privileges (docs/deploy.md).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::{docker, sandbox};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn validate(file: &Path) -> Option<(bool, String)> {
    let out = Command::new("kubernetes-validate").args(["--strict", "-k", "1.29.0"]).arg(file).output().ok()?;
    Some((
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    ))
}

#[test]
fn daemonset_passes_the_kubernetes_schema() {
    let ds = deploy().join("kubernetes/daemonset.yaml");
    let Some((ok, out)) = validate(&ds) else {
        return cachescope_testkit::skip(
            "kubernetes-validate is not installed (scripts/setup.sh installs it from PyPI)",
        );
    };
    assert!(ok, "{out}");
    assert_eq!(out.matches("passed").count(), 3, "namespace, service account, DaemonSet: {out}");
    // The check can fail: a misspelt field is refused.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, std::fs::read_to_string(&ds).unwrap().replace("hostPID: true", "hostPid: true")).unwrap();
    let (ok, out) = validate(&bad).unwrap();
    assert!(!ok, "a misspelt field must fail: {out}");
}

/// The manifests as a kustomization (no Helm chart: Helm cannot be had where this is built):
/// `kubectl kustomize` renders them, and what it renders passes the same schema check.
#[test]
fn the_kustomization_renders_what_passes_the_schema() {
    let Ok(o) = Command::new("kubectl").args(["kustomize"]).arg(deploy().join("kubernetes")).output() else {
        return cachescope_testkit::skip("kubectl is not installed (scripts/setup.sh installs kubernetes-client)");
    };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = tempfile::tempdir().unwrap();
    let rendered = dir.path().join("rendered.yaml");
    std::fs::write(&rendered, &o.stdout).unwrap();
    let Some((ok, out)) = validate(&rendered) else {
        return cachescope_testkit::skip(
            "kubernetes-validate is not installed (scripts/setup.sh installs it from PyPI)",
        );
    };
    assert!(ok, "{out}");
    assert_eq!(out.matches("passed").count(), 3, "namespace, service account, DaemonSet: {out}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("app.kubernetes.io/part-of: cachescope") && text.contains("image: cachescope:"), "{text}");
}

#[test]
fn systemd_unit_verifies() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        return cachescope_testkit::skip("systemd-analyze is not installed");
    }
    let unit = std::fs::read_to_string(deploy().join("systemd/cachescope.service")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cachescope.service");
    // The unit names the installed path; here the binary under test stands there.
    std::fs::write(&copy, unit.replace("/usr/local/bin/cachescope", env!("CARGO_BIN_EXE_cachescope"))).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&copy).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.trim().is_empty(), "{text}");
}

/// What `systemd-analyze verify` does not check: a path of ReadWritePaths= that a host may lack
/// (resctrl exists only with RDT) must carry "-", or the unit fails with 226/NAMESPACE there;
/// and a file the Documentation= line names must be one the package ships (docs/*.md as .gz).
#[test]
fn systemd_unit_starts_without_resctrl_and_names_shipped_documents() {
    let unit = std::fs::read_to_string(deploy().join("systemd/cachescope.service")).unwrap();
    let value = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(key))
            .flat_map(|v| v.split_whitespace().map(String::from).collect::<Vec<_>>())
            .collect()
    };
    let paths = value("ReadWritePaths=");
    assert!(paths.contains(&"/var/lib/cachescope".to_string()), "{paths:?}");
    if let Some(p) = paths.iter().find(|p| p.starts_with("/sys")) {
        panic!("ReadWritePaths={p}: a host without it fails the unit; write -{p}");
    }
    let docs = value("Documentation=");
    assert!(!docs.is_empty());
    for d in &docs {
        if let Some(file) = d.strip_prefix("file:///usr/share/doc/cachescope/") {
            let md = file.strip_suffix(".gz").unwrap_or_else(|| panic!("{d}: the package ships docs gzipped"));
            let root = deploy().join("..");
            assert!(root.join("docs").join(md).exists() || root.join(md).exists(), "{d}: no {md} to ship");
        } else {
            assert!(d.starts_with("man:"), "{d}");
        }
    }
}

/// The capabilities the DaemonSet adds (its `add: [...]` line).
fn daemonset_caps() -> Vec<String> {
    let ds = std::fs::read_to_string(deploy().join("kubernetes/daemonset.yaml")).unwrap();
    let line = ds.lines().find(|l| l.trim_start().starts_with("add: [")).unwrap();
    line.split('"').skip(1).step_by(2).map(String::from).collect()
}

/// The image's content (the binary and the libraries it loads, as the Containerfile's runtime
/// stage holds them), run with the DaemonSet's privileges against this host: eBPF loads and a
/// busy host container's CPU time is recorded.
#[test]
fn image_runs_with_the_daemonsets_privileges() {
    if docker(&["info", "--format", "{{.ServerVersion}}"]).is_none() {
        return cachescope_testkit::skip(
            "no Docker daemon reachable (scripts/test.sh starts one where docker.io is installed)",
        );
    }
    let Some(mut sb) = sandbox("cachescope-image") else { return };
    let bin = env!("CARGO_BIN_EXE_cachescope");
    let root = tempfile::tempdir().unwrap();
    let put = |from: &str| {
        let to = root.path().join(from.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, &to).unwrap();
    };
    let ldd = Command::new("ldd").arg(bin).output().unwrap();
    for lib in String::from_utf8_lossy(&ldd.stdout).split_whitespace().filter(|w| w.starts_with('/')) {
        put(lib);
    }
    let dest = root.path().join("usr/local/bin");
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::copy(bin, dest.join("cachescope")).unwrap();
    std::fs::create_dir_all(root.path().join("tmp")).unwrap();
    let image = format!("cachescope-test-image:{}", std::process::id());
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C {} -c . | docker import -c 'ENTRYPOINT [\"/usr/local/bin/cachescope\"]' - {image}",
            root.path().display()
        ))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    // A busy container on the host, found by a glob.
    sb.add("busy").unwrap();
    let busy = sb.dir().join("busy");
    let mut work = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
    std::fs::write(busy.join("cgroup.procs"), work.id().to_string()).unwrap();
    let cg = sb.dir().parent().unwrap().to_path_buf();
    let mut args: Vec<String> = ["run", "--rm", "--network", "none", "--pid", "host", "--cap-drop", "ALL"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for c in daemonset_caps() {
        args.extend(["--cap-add".into(), c]);
    }
    args.extend(
        [
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "-v",
            &format!("{}:{}:ro", cg.display(), cg.display()),
            "-v",
            "/sys/kernel/btf:/sys/kernel/btf:ro",
            &image,
            "monitor",
            "--jsonl",
            "--containers",
            &format!("{}/busy", sb.rel()),
            "--duration",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    // The kernel's count of the busy cgroup's CPU time meanwhile, for the window its rows cover.
    let trace = common::CpuTrace::start(std::slice::from_ref(&busy));
    let run = Command::new("docker").args(&args).output().unwrap();
    let samples = trace.stop();
    let _ = work.kill();
    let _ = work.wait();
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(sb);
    let _ = docker(&["image", "rm", &image]);
    let err = String::from_utf8_lossy(&run.stderr);
    println!("{args:?}\n{err}");
    assert!(run.status.success(), "{err}");
    assert!(err.contains("PMU columns: eBPF"), "eBPF loads with these privileges: {err}");
    // 1 ms rows of the busy container, CPU time from eBPF: what its cgroup's cpu.stat says.
    let (cpu_ns, window, lost) =
        cpu_account(&run.stdout, |v| v["cgroup_path"].as_str().is_some_and(|p| p.ends_with("/busy")));
    assert!(cpu_ns > 0, "the busy container's CPU time, recorded from inside the image: {cpu_ns} ns");
    common::check_cpu(
        "busy, from inside the image",
        cpu_ns,
        window,
        &samples,
        0,
        lost || err.contains("PMU counts incomplete"),
    );
}

/// JSON lines rows `of` a container as an account of its CPU time: what they charge, the
/// window they cover (real ns) and whether the counts of any were lost (null cpu_ns).
fn cpu_account(jsonl: &[u8], of: impl Fn(&serde_json::Value) -> bool) -> (i64, (i64, i64), bool) {
    let (mut cpu, mut from, mut to, mut lost) = (0, i64::MAX, i64::MIN, false);
    for line in String::from_utf8_lossy(jsonl).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (t, iv) = (v["time_ns"].as_i64().unwrap(), v["interval_ns"].as_i64().unwrap());
        if !of(&v) || iv <= 0 {
            continue;
        }
        (from, to) = (from.min(t - iv), to.max(t));
        match v["cpu_ns"].as_i64() {
            Some(c) => cpu += c,
            None => lost = true,
        }
    }
    (cpu, (from, to), lost)
}

/// The cgroup of a container `engine` runs (by id), from its main process's /proc entry.
fn container_cgroup(engine: &str, id: &str) -> PathBuf {
    let pid = Command::new(engine).args(["inspect", "-f", "{{.State.Pid}}", id]).output().unwrap();
    let pid = String::from_utf8_lossy(&pid.stdout).trim().to_string();
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let rel = cg.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    cachescope_cgroups::Hierarchy::find(Path::new("/proc")).unwrap().root.join(rel.trim_start_matches('/'))
}

/// The image as scripts/image.sh builds it without a registry (a debootstrap'd base imported,
/// the .deb installed FROM it, tagged with the version the DaemonSet names), under Docker and
/// under Podman: `info` runs, and run as the DaemonSet runs it (its capabilities, the host's
/// PIDs and cgroup tree) it follows a busy sibling container by its runtime's name for it.
#[test]
fn image_from_the_debian_package_runs_under_docker_and_podman() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return cachescope_testkit::skip("building images needs root");
    }
    if docker(&["info", "--format", "{{.ServerVersion}}"]).is_none() {
        return cachescope_testkit::skip("no Docker daemon reachable (scripts/test.sh starts one)");
    }
    if !common::have("podman") || !common::have("debootstrap") || !common::have("dpkg-shlibdeps") {
        return cachescope_testkit::skip("podman, debootstrap or dpkg-dev is missing (scripts/setup.sh installs them)");
    }
    let repo = common::repo();
    let dir = tempfile::tempdir().unwrap();
    let (deb, _) = common::packages(dir.path());
    let ds = std::fs::read_to_string(deploy().join("kubernetes/daemonset.yaml")).unwrap();
    let named = ds.lines().find_map(|l| l.trim().strip_prefix("image: ")).unwrap().to_string();
    let cg = cachescope_cgroups::Hierarchy::find(Path::new("/proc")).unwrap().root;
    // Podman here cannot raise rlimits (no CAP_SYS_RESOURCE on our machines): ask for less.
    let limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"];
    for engine in ["docker", "podman"] {
        let run = |args: &[&str]| Command::new(engine).args(args).output().unwrap();
        let o = Command::new(repo.join("scripts/image.sh")).args([engine, &deb]).output().unwrap();
        assert!(o.status.success(), "{engine}: image.sh: {}", String::from_utf8_lossy(&o.stderr));
        let tag = String::from_utf8_lossy(&o.stdout).lines().last().unwrap().to_string();
        assert_eq!(tag, named, "the DaemonSet names the image built");
        let extra: &[&str] = if engine == "podman" { &limits } else { &[] };
        let mut args = vec!["run", "--rm", "--network", "none"];
        args.extend(extra);
        args.extend([tag.as_str(), "info"]);
        let o = run(&args);
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && said.contains("Backends"),
            "{engine}: info: {said}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        // A busy sibling, then cachescope beside it as the DaemonSet runs it.
        let sib = format!("cachescope-sibling-{}", std::process::id());
        let mut args = vec!["run", "-d", "--rm", "--network", "none", "--name", &sib, "--entrypoint", "sh"];
        args.extend(extra);
        args.extend([tag.as_str(), "-c", "while :; do :; done"]);
        let o = run(&args);
        assert!(o.status.success(), "{engine}: sibling: {}", String::from_utf8_lossy(&o.stderr));
        let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let caps: Vec<String> = daemonset_caps().into_iter().flat_map(|c| ["--cap-add".to_string(), c]).collect();
        let mount = format!("{}:{}:ro", cg.display(), cg.display());
        let mut args = vec!["run", "--rm", "--network", "none", "--pid", "host", "--cap-drop", "ALL"];
        args.extend(caps.iter().map(String::as_str));
        args.extend(["--security-opt", "no-new-privileges", "-v", &mount, "-v", "/sys/kernel/btf:/sys/kernel/btf:ro"]);
        args.extend(extra);
        args.extend([tag.as_str(), "monitor", "--jsonl", "--emulate", "intel-xeon-platinum-8160", "--duration", "2s"]);
        // The kernel's count of the sibling's CPU time meanwhile, for the window its rows cover.
        let trace = common::CpuTrace::start(&[container_cgroup(engine, &id)]);
        let o = run(&args);
        let samples = trace.stop();
        let _ = run(&["rm", "-f", &sib]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{engine}: monitor: {err}");
        let ours = |v: &serde_json::Value| {
            v["container_id"].as_str().is_some_and(|c| id.starts_with(c) || c.starts_with(&id[..12]))
        };
        let rows =
            String::from_utf8_lossy(&o.stdout).lines().filter(|l| ours(&serde_json::from_str(l).unwrap())).count();
        let (cpu_ns, window, lost) = cpu_account(&o.stdout, ours);
        println!("{engine}: {tag}: the sibling {}: {rows} rows, {cpu_ns} ns of CPU", &id[..12]);
        assert!(
            rows > 0 && cpu_ns > 0,
            "{engine}: the sibling followed from inside the image: {rows} rows, {cpu_ns} ns: {err}"
        );
        let what = format!("{engine}: the sibling, from inside the image");
        common::check_cpu(&what, cpu_ns, window, &samples, 0, lost || err.contains("PMU counts incomplete"));
        let _ = run(&["image", "rm", &tag]);
    }
}
