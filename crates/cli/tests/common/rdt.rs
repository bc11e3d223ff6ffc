//! The RDT machine (tools/rdt-qemu) from a test: its QEMU, the workloads, one boot of a guest
//! script and what it said. Shared by rdt_qemu.rs and rdt_modern.rs.

use super::{console_tail, guest_results, have, release_bin, release_example};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The RDT machine's QEMU: tools/rdt-qemu/build.sh builds it once per machine (minutes) and
/// prints its path; CACHESCOPE_RDT_QEMU names another (a developer's build of a changed device;
/// scripts/test.sh never sets it).
pub fn rdt_qemu() -> String {
    if let Ok(q) = std::env::var("CACHESCOPE_RDT_QEMU") {
        return q;
    }
    let out = Command::new(root().join("tools/rdt-qemu/build.sh")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tools/rdt-qemu/build.sh failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().unwrap_or_default().trim().to_string()
}

/// Whether the tests run on this host's own RDT hardware instead of the RDT machine
/// (CACHESCOPE_RDT_HOST=1, set by scripts/hw-check.sh): the same guest scripts and checks, with
/// the host's CPU, LLC and kernel, and without what only the device can do (inject, few RMIDs,
/// other CPU models and kernels).
pub fn on_host() -> bool {
    std::env::var_os("CACHESCOPE_RDT_HOST").is_some_and(|v| v == "1")
}

/// Whether this run checks `backend`: all unless CACHESCOPE_RDT_BACKENDS names some (a
/// comma-separated list, for a developer chasing one backend; scripts/test.sh never sets it).
pub fn wanted(backend: &str) -> bool {
    std::env::var("CACHESCOPE_RDT_BACKENDS").map_or(true, |v| v.split(',').any(|b| b == backend))
}

/// Runs tools/rdt-qemu/guest/SCRIPT on this host (root, in a private mount namespace, so its
/// /tmp is its own) with the cs_* parameters of `g.append` in its environment, leaves
/// OUT/console.log and OUT/rows.jsonl as guest-qemu.sh does, and returns what it printed.
pub fn run_on_host(work: &Path, g: &Guest, out: &Path) -> String {
    std::fs::create_dir_all(out).unwrap();
    let bin = release_bin();
    let dirs = [work.parent().unwrap(), bin.parent().unwrap()];
    let path = format!("{}:{}:{}", dirs[0].display(), dirs[1].display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh"])
        .arg(root().join("tools/rdt-qemu/guest").join(g.script))
        .env("CS_HOST", "1")
        .env("CS_INIT", root().join("scripts/lib/guest-init.sh"))
        .env("PATH", path);
    for (k, v) in g.append.split_whitespace().filter_map(|kv| kv.split_once('=')) {
        if k.starts_with("cs_") {
            cmd.env(k, v);
        }
    }
    let run = cmd.output().unwrap();
    let said = String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
    std::fs::write(out.join("console.log"), &said).unwrap();
    let rows = Command::new("sh")
        .arg("-c")
        .arg("sed -n '/^CS-ROWS-BEGIN/,/^CS-ROWS-END/p' console.log | sed '1d;$d' | base64 -d | gunzip >rows.jsonl")
        .current_dir(out)
        .status()
        .unwrap();
    if !rows.success() {
        println!("no recording in {}", out.display());
    }
    said
}

/// The path of `cmd` on the PATH.
pub fn which(cmd: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(format!("command -v {cmd}")).output().unwrap();
    assert!(out.status.success(), "{cmd} is not installed (scripts/setup.sh installs it)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What every test here needs: the RDT machine's QEMU, a scratch directory and the workloads;
/// None, after saying why, where a guest cannot be made.
pub fn machine() -> Option<(String, tempfile::TempDir, PathBuf)> {
    let headers = Command::new("dpkg-query").args(["-W", "linux-headers-amd64"]).output();
    if on_host() {
        assert!(have("gcc") && have("unshare"), "host mode needs gcc and unshare");
    } else if !have("gcc") || !headers.is_ok_and(|o| o.status.success()) || !Path::new("/bin/busybox").exists() {
        cachescope_testkit::skip("needs gcc, linux-headers-amd64 and busybox-static (scripts/setup.sh installs them)");
        return None;
    }
    let qemu = if on_host() { String::new() } else { rdt_qemu() };
    let dir = tempfile::tempdir().unwrap();
    let work = workloads(dir.path());
    Some((qemu, dir, work))
}

/// As [`machine`], for what only the RDT machine can do (its device's properties, other CPU
/// models and kernels): skipped, saying `what`, where the tests run on a host's own RDT.
#[track_caller]
pub fn device_machine(what: &str) -> Option<(String, tempfile::TempDir, PathBuf)> {
    if on_host() {
        cachescope_testkit::skip(format!("{what}: on the RDT machine only"));
        return None;
    }
    machine()
}

/// The workloads, a static binary for the busybox guest.
pub fn workloads(dir: &Path) -> PathBuf {
    let bin = dir.join("rdt-work");
    let cc = Command::new("gcc")
        .args(["-O2", "-static", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bin)
        .arg(root().join("tools/rdt-qemu/guest/work.c"))
        .output()
        .unwrap();
    assert!(cc.status.success(), "gcc: {}", String::from_utf8_lossy(&cc.stderr));
    bin
}

/// One boot of the RDT machine.
pub struct Guest<'a> {
    /// tools/rdt-qemu/guest/SCRIPT runs as /init.
    pub script: &'a str,
    /// "": this release's kernel; else a Debian suite whose newest kernel boots.
    pub kernel: &'a str,
    /// CPU, topology, -device rdt.
    pub machine: &'a str,
    /// Kernel parameters (key=value ones reach the script's environment).
    pub append: &'a str,
    /// Build the kernel module into the guest (this release's kernel only).
    pub kmod: bool,
}

/// Boots `g` and returns the guest's CS-RESULT lines (and its CS-REF lines, under "ref").
/// One guest at a time: two TCG guests on a 2-CPU host stretch each other's timing (the
/// kmod stream read +5.8 % once, its rows covered 40 % of the window another time).
pub static ONE_GUEST: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn boot(qemu: &str, work: &Path, g: &Guest, out: &Path) -> HashMap<String, String> {
    let _one = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let (machine, append, kernel) = (g.machine, g.append, g.kernel);
    // The pqos comparison carries Debian's pqos (and, by ldd, its library) into the guest.
    let mut extra = work.as_os_str().to_owned();
    if g.script == "pqos.sh" {
        extra.push(" ");
        extra.push(which("pqos"));
    }
    // The OCI hook test runs containers with Debian's runc; the NRI test with Debian unstable's
    // containerd too, and the CRI client of examples/cri_pod.rs as its kubelet.
    let mode = |m: &str| g.append.split_whitespace().any(|w| w == format!("cs_mode={m}"));
    if mode("hook") || mode("nri") {
        extra.push(" ");
        extra.push(which("runc"));
    }
    if mode("nri") {
        let out = Command::new(root().join("scripts/debian-containerd.sh")).output().unwrap();
        assert!(out.status.success(), "scripts/debian-containerd.sh: {}", String::from_utf8_lossy(&out.stderr));
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        for b in ["containerd", "containerd-shim-runc-v2", "ctr"] {
            extra.push(" ");
            extra.push(dir.join(b));
        }
        extra.push(" ");
        extra.push(release_example("cri_pod"));
    }
    // The crun test carries Debian unstable's crun, with the libraries it loads, in /opt/crun.
    let mut tree = String::new();
    if g.append.split_whitespace().any(|w| w == "cs_mode=crun") {
        let out = Command::new(root().join("scripts/debian-crun.sh")).output().unwrap();
        assert!(out.status.success(), "scripts/debian-crun.sh: {}", String::from_utf8_lossy(&out.stderr));
        tree = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    let said = if on_host() {
        let said = run_on_host(work, g, out);
        println!("== this host: {} {append}\n{said}", g.script);
        said
    } else {
        // A guest that never reached its /init is booted once more: TCG on 2 host CPUs now and
        // then stalls a vCPU's timer at boot (RCU stall reports, "timer wakeup didn't happen",
        // no init; seen once in a CI run on Debian's 6.1, the device idle).
        let mut said = String::new();
        for attempt in 1..=2 {
            // The release build: the debug one's ticks, reading hundreds of counter files
            // under TCG, took up to 2.5 s each (a CI run's counters test had too few rows).
            let run = Command::new(root().join("scripts/guest-qemu.sh"))
                .arg(release_bin())
                .arg(out)
                .arg(root().join("tools/rdt-qemu/guest").join(g.script))
                .env("CACHESCOPE_QEMU", qemu)
                .env("CACHESCOPE_QEMU_MACHINE", machine)
                .env("CACHESCOPE_QEMU_APPEND", append)
                .env("CACHESCOPE_QEMU_EXTRA", &extra)
                .env("CACHESCOPE_QEMU_TREE", &tree)
                .env("CACHESCOPE_GUEST_KMOD", if g.kmod { "1" } else { "0" })
                .env("CACHESCOPE_GUEST_KERNEL", kernel)
                .output()
                .unwrap();
            said = String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
            println!("== kernel {kernel:?}: {machine} {append} (boot {attempt})\n{said}");
            // Before judging the run: a guest that never reached /init fails guest-qemu.sh.
            if !said.contains("CS-RESULT ") && attempt == 1 {
                println!("no result; the console's end:\n{}", console_tail(&out.join("console.log")));
                continue;
            }
            assert!(run.status.success(), "guest-qemu.sh failed");
            break;
        }
        said
    };
    let mut r = guest_results(&said);
    let refs: Vec<&str> = said.lines().filter_map(|l| l.strip_prefix("CS-REF ")).collect();
    r.insert("ref".into(), refs.join("\n"));
    let pqos: Vec<&str> = said.lines().filter(|l| l.starts_with("CS-PQOS-")).collect();
    r.insert("pqos".into(), pqos.join("\n"));
    if let Some(stats) = said.lines().find_map(|l| l.strip_prefix("rdt-stats: ")) {
        r.insert("rdt_stats".into(), stats.to_string());
    }
    if r.get("done").map(String::as_str) != Some("1") {
        let console = std::fs::read_to_string(out.join("console.log")).unwrap_or_default();
        // Kept past the scratch directory, for whoever reads the failure.
        let keep = root()
            .join("target/tmp")
            .join(format!("rdt-{}.console.log", out.file_name().unwrap_or_default().to_string_lossy()));
        let kept = std::fs::create_dir_all(root().join("target/tmp")).and_then(|()| std::fs::write(&keep, &console));
        println!("console kept in {} ({kept:?})", keep.display());
        let tail: Vec<&str> = console.lines().rev().take(60).collect();
        panic!(
            "the guest did not run to the end; console ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    r
}

pub fn num(r: &HashMap<String, String>, k: &str) -> i64 {
    let v = r.get(k).unwrap_or_else(|| panic!("the guest did not report {k}"));
    v.parse().unwrap_or_else(|_| panic!("{k}={v} is not a number"))
}

/// A "k=v k=v" value, by key.
pub fn fields(v: &str) -> HashMap<&str, &str> {
    v.split_whitespace().filter_map(|kv| kv.split_once('=')).collect()
}
