//! The RDT machine (tools/rdt-qemu) from a test: its QEMU, the workloads, one boot of a guest
//! script and what it said. Shared by rdt_qemu.rs and rdt_modern.rs.

use super::{debug_example, guest_results, have, release_bin};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The RDT machine's QEMU: tools/rdt-qemu/build.sh builds it once per machine (minutes) and
/// prints its path; CACHESCOPE_RDT_QEMU names another (a developer's build of a changed device;
/// scripts/test.sh never sets it).
/// Asked once per test process: build.sh hashes the patches and the plugin's sources each time.
pub fn rdt_qemu() -> String {
    if let Ok(q) = std::env::var("CACHESCOPE_RDT_QEMU") {
        return q;
    }
    static QEMU: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    QEMU.get_or_init(|| {
        let out = Command::new(root().join("tools/rdt-qemu/build.sh")).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "tools/rdt-qemu/build.sh failed:\n{stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout.lines().last().unwrap_or_default().trim().to_string()
    })
    .clone()
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
    // The recording, unpacked as scripts/guest-qemu.sh unpacks a guest's.
    let rows = Command::new("bash")
        .arg("-c")
        .arg(r#". "$1" && console_block console.log ROWS rows.jsonl"#)
        .arg("bash")
        .arg(root().join("scripts/lib/qemu-boot.sh"))
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
#[derive(Clone, Copy)]
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
    let said = if on_host() {
        let said = run_on_host(work, g, out);
        println!("== this host: {} {}\n{said}", g.script, g.append);
        said
    } else {
        let (extra, tree) = carried(work, &[g.script], g.append, g.kernel);
        launch(qemu, g, &extra, &tree, None, out)
    };
    let mut r = results(&said);
    if let Some(stats) = said.lines().find_map(|l| l.strip_prefix("rdt-stats: ")) {
        r.insert("rdt_stats".into(), stats.to_string());
    }
    ended(&r, &out.join("console.log"), out);
    r
}

/// One check of a boot that runs several (scripts/lib/guest-checks.sh).
pub struct Check<'a> {
    /// Its name: its part of the console and its directory, OUT/checks/NAME.
    pub name: &'a str,
    /// tools/rdt-qemu/guest/SCRIPT runs it.
    pub script: &'a str,
    /// KEY=VALUE words of its environment, beside the boot's kernel parameters.
    pub vars: &'a str,
}

/// Boots `g` once and runs every check in it, in turn (the guest undoes what each left): for
/// each, its results as [`boot`] gives them and its directory (console.log, rows.jsonl,
/// report.json). The device's counts (rdt_stats) are the whole boot's. A boot costs a TCG guest's
/// start and the preparation of its kernel, module and initramfs: the checks that need the same
/// machine, kernel and parameters share one. On a host (scripts/hw-check.sh) each check is a
/// run of its own.
pub fn boot_checks(
    qemu: &str,
    work: &Path,
    g: &Guest,
    checks: &[Check],
    out: &Path,
) -> Vec<(HashMap<String, String>, PathBuf)> {
    let _one = ONE_GUEST.lock().unwrap_or_else(|p| p.into_inner());
    let dir = |c: &Check| out.join("checks").join(c.name);
    if on_host() {
        return checks
            .iter()
            .map(|c| {
                let append = format!("{} {}", g.append, c.vars);
                let one = Guest { script: c.script, append: &append, ..*g };
                let said = run_on_host(work, &one, &dir(c));
                println!("== this host: check {} ({} {append})\n{said}", c.name, c.script);
                let r = results(&said);
                ended(&r, &dir(c).join("console.log"), &dir(c));
                (r, dir(c))
            })
            .collect();
    }
    std::fs::create_dir_all(out).unwrap();
    let list = out.join("checks.list");
    let text: String = checks
        .iter()
        .map(|c| format!("{} {} {}\n", c.name, root().join("tools/rdt-qemu/guest").join(c.script).display(), c.vars))
        .collect();
    std::fs::write(&list, text).unwrap();
    let scripts: Vec<&str> = checks.iter().map(|c| c.script).collect();
    let words = checks.iter().fold(g.append.to_string(), |w, c| format!("{w} {}", c.vars));
    let (extra, tree) = carried(work, &scripts, &words, g.kernel);
    let said = launch(qemu, g, &extra, &tree, Some((&list, checks.len())), out);
    let stats = said.lines().find_map(|l| l.strip_prefix("rdt-stats: "));
    checks
        .iter()
        .map(|c| {
            let begin = format!("CS-CHECK-BEGIN {}", c.name);
            let end = format!("CS-CHECK-END {} ", c.name);
            let part: String = said
                .lines()
                .skip_while(|l| *l != begin)
                .take_while(|l| !l.starts_with(&end))
                .map(|l| format!("{l}\n"))
                .collect();
            let mut r = results(&part);
            if let Some(rc) = said.lines().find_map(|l| l.strip_prefix(&end)) {
                r.insert("check_end".into(), rc.to_string());
            }
            if let Some(stats) = stats {
                r.insert("rdt_stats".into(), stats.to_string());
            }
            let console =
                if dir(c).join("console.log").exists() { dir(c).join("console.log") } else { out.join("console.log") };
            println!("== check {}: {}", c.name, r.get("check_end").map_or("did not end", String::as_str));
            ended(&r, &console, &dir(c));
            (r, dir(c))
        })
        .collect()
}

/// What a guest carries beyond the binary and the workloads, for `scripts` with the parameters
/// `words` on `kernel` (as [`Guest`] names it): (CACHESCOPE_QEMU_EXTRA, CACHESCOPE_QEMU_TREE).
fn carried(work: &Path, scripts: &[&str], words: &str, kernel: &str) -> (std::ffi::OsString, String) {
    // The pqos comparison carries Debian's pqos (and, by ldd, its library) into the guest.
    let mut extra = work.as_os_str().to_owned();
    if scripts.contains(&"pqos.sh") {
        extra.push(" ");
        extra.push(which("pqos"));
    }
    // Linux's perf (Debian's linux-perf), for the PMU's checks.
    if scripts.contains(&"pmu.sh") {
        extra.push(" ");
        extra.push(which("perf"));
    }
    // The kernel's own resctrl selftests, built from the guest kernel's source.
    if scripts.contains(&"selftests.sh") {
        let out = Command::new(root().join("scripts/resctrl-selftests.sh")).arg(kernel).output().unwrap();
        assert!(out.status.success(), "scripts/resctrl-selftests.sh: {}", String::from_utf8_lossy(&out.stderr));
        extra.push(" ");
        extra.push(String::from_utf8_lossy(&out.stdout).trim());
    }
    // The OCI hook test runs containers with Debian's runc; the NRI test with Debian unstable's
    // containerd too, and the CRI client of examples/cri_pod.rs as its kubelet.
    let mode = |m: &str| words.split_whitespace().any(|w| w == format!("cs_mode={m}"));
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
        extra.push(debug_example("cri_pod"));
    }
    // The crun test carries Debian unstable's crun, with the libraries it loads, in /opt/crun.
    let mut tree = String::new();
    if mode("crun") {
        let out = Command::new(root().join("scripts/debian-crun.sh")).output().unwrap();
        assert!(out.status.success(), "scripts/debian-crun.sh: {}", String::from_utf8_lossy(&out.stderr));
        tree = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    (extra, tree)
}

/// QEMU's -icount for the RDT machine's guests (CACHESCOPE_QEMU_ICOUNT overrides; "off": a host
/// thread per vCPU). The guest's clock counts instructions and jumps over idle time: a stream's
/// rate, a workload's settle and a container's first milliseconds are measured in a time the
/// host's load cannot stretch, and a guest waiting in sleep(1) costs no host time. One host
/// thread runs both vCPUs, so two guests share two CPUs (.config/nextest.toml); the gain is in
/// that pairing, not per guest (`kernel_resctrl_on_the_rdt_machine`: 203 s two at a time in
/// CI3, 184 s one at a time with a thread per vCPU in CI1). 8 ns an instruction (shift=3) for
/// every guest. 16 ns made the selftests' test 265 s instead of 375 with the same CMT readings,
/// but a CI run then failed 6.12's L3_CAT selftest (its miss rate changed 0.5 % at 6 ways, 4 %
/// asked), which passed in every run at 8 ns; the PMU's guests ran longer at 16 ns (253 s
/// against 238: fixed-length loops, and twice the timer interrupts per instruction); at 32 ns
/// the workloads that run for a fixed time did too little (a thrasher took 14 % of its victim's
/// lines, 25 % asked; of 100 containers, 30 had no bandwidth figures). (The machine's patch
/// 0007 is what makes one host thread right: before it the cache model was told the wrong
/// vCPU.) The module's guests (kmod.rs) use it too, except on the debug kernel.
pub fn icount() -> String {
    std::env::var("CACHESCOPE_QEMU_ICOUNT").unwrap_or_else(|_| "shift=3,sleep=off".into())
}

/// Runs scripts/guest-qemu.sh for `g` (with `checks`: that list and its length) and returns
/// what it printed.
fn launch(
    qemu: &str,
    g: &Guest,
    extra: &std::ffi::OsStr,
    tree: &str,
    checks: Option<(&Path, usize)>,
    out: &Path,
) -> String {
    let (machine, append, kernel) = (g.machine, g.append, g.kernel);
    // A guest that never reached its /init (TCG on 2 busy host CPUs now and then stalls a
    // vCPU's timer at boot) is booted once more by guest-qemu.sh (scripts/lib/qemu-boot.sh).
    // The release build: the debug one's ticks, reading hundreds of counter files under TCG,
    // took up to 2.5 s each (a CI run's counters test had too few rows).
    let mut cmd = Command::new(root().join("scripts/guest-qemu.sh"));
    cmd.arg(release_bin())
        .arg(out)
        .arg(root().join("tools/rdt-qemu/guest").join(g.script))
        .env("CACHESCOPE_QEMU", qemu)
        .env("CACHESCOPE_QEMU_MACHINE", machine)
        .env("CACHESCOPE_QEMU_APPEND", append)
        .env("CACHESCOPE_QEMU_EXTRA", extra)
        .env("CACHESCOPE_QEMU_TREE", tree)
        .env("CACHESCOPE_GUEST_KMOD", if g.kmod { "1" } else { "0" })
        .env("CACHESCOPE_GUEST_KERNEL", kernel)
        .env("CACHESCOPE_QEMU_ICOUNT", icount());
    if let Some((list, n)) = checks {
        // A ceiling only a hang reaches: 600 s and 300 more a check (guest-qemu.sh's 900 s for
        // one script; its 300 s was not: a CI run's boot took 303 s where 224-241 s is usual,
        // beside two other guests and the fuzzing).
        cmd.env("CACHESCOPE_QEMU_CHECKS", list).env("CACHESCOPE_QEMU_TIMEOUT", (600 + 300 * n).to_string());
    }
    let run = cmd.output().unwrap();
    let said = String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
    println!("== kernel {kernel:?}: {machine} {append}\n{said}");
    assert!(run.status.success(), "guest-qemu.sh failed: {}", super::guest_failure(&said));
    said
}

/// A script's CS-RESULT lines, with its CS-REF lines under "ref" and CS-PQOS-* under "pqos".
fn results(said: &str) -> HashMap<String, String> {
    let mut r = guest_results(said);
    let refs: Vec<&str> = said.lines().filter_map(|l| l.strip_prefix("CS-REF ")).collect();
    r.insert("ref".into(), refs.join("\n"));
    let pqos: Vec<&str> = said.lines().filter(|l| l.starts_with("CS-PQOS-")).collect();
    r.insert("pqos".into(), pqos.join("\n"));
    let perf: Vec<&str> = said.lines().filter(|l| l.starts_with("CS-PERF")).collect();
    r.insert("perf".into(), perf.join("\n"));
    let selftest: Vec<&str> = said.lines().filter_map(|l| l.strip_prefix("CS-SELFTEST ")).collect();
    r.insert("selftest".into(), selftest.join("\n"));
    r
}

/// Fails, with the end of `console`, unless the script said done=1 (and, as one check of
/// several, ended with status 0).
fn ended(r: &HashMap<String, String>, console: &Path, out: &Path) {
    let check_ok = r.get("check_end").is_none_or(|e| e.starts_with("rc=0 "));
    if r.get("done").map(String::as_str) == Some("1") && check_ok {
        return;
    }
    let console = std::fs::read_to_string(console).unwrap_or_default();
    // Kept past the scratch directory, for whoever reads the failure.
    let keep = root()
        .join("target/tmp")
        .join(format!("rdt-{}.console.log", out.file_name().unwrap_or_default().to_string_lossy()));
    let kept = std::fs::create_dir_all(root().join("target/tmp")).and_then(|()| std::fs::write(&keep, &console));
    println!("console kept in {} ({kept:?})", keep.display());
    let tail: Vec<&str> = console.lines().rev().take(60).collect();
    panic!(
        "the guest did not run to the end ({}); console ends:\n{}",
        r.get("check_end").map_or("", String::as_str),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
}

pub fn num(r: &HashMap<String, String>, k: &str) -> i64 {
    let v = r.get(k).unwrap_or_else(|| panic!("the guest did not report {k}"));
    v.parse().unwrap_or_else(|_| panic!("{k}={v} is not a number"))
}

/// A "k=v k=v" value, by key.
pub fn fields(v: &str) -> HashMap<&str, &str> {
    v.split_whitespace().filter_map(|kv| kv.split_once('=')).collect()
}

/// A stream's bytes as the rows count them and as the stream moved them over exactly the same
/// intervals (the rows whose interval lies in the stream's window, tools/rdt-qemu/guest/work.c's
/// marks): (counted, moved, slack), slack being the bytes the comparison cannot place (a chunk
/// at each end of every run of contiguous rows: a chunk is read over a while, not at its mark).
/// A guest given its CPU unevenly (TCG beside other work) moves the stream's bytes unevenly
/// too; this comparison does not care when they moved.
pub fn stream_bytes(rows: &[&serde_json::Value], stream: &str) -> (f64, f64, f64) {
    let f = fields(stream);
    let num = |k: &str| f.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or_else(|| panic!("{k} in {stream}"));
    let (start, end, chunk) = (num("start_ns"), num("end_ns"), num("chunk"));
    let marks: Vec<i64> = f
        .get("marks_us")
        .unwrap_or_else(|| panic!("marks_us in {stream}"))
        .split(',')
        .filter(|m| !m.is_empty())
        .map(|m| start + m.parse::<i64>().unwrap() * 1000)
        .collect();
    // The bytes read by time t: every chunk whose mark is not later.
    let moved_by = |t: i64| (marks.partition_point(|&m| m <= t) as i64 * chunk) as f64;
    let (mut counted, mut moved, mut runs, mut last_end) = (0.0, 0.0, 0, i64::MIN);
    for r in rows {
        let (t, i) = (r["time_ns"].as_i64().unwrap(), r["interval_ns"].as_i64().unwrap());
        let Some(b) = r["mbm_total_bytes"].as_i64().filter(|_| t - i >= start && t <= end) else { continue };
        counted += b as f64;
        moved += moved_by(t) - moved_by(t - i);
        if t - i != last_end {
            runs += 1;
        }
        last_end = t;
    }
    let slack = (2 * runs * chunk) as f64;
    println!(
        "stream: rows in its window count {counted:.0} B, it moved {moved:.0} B over the same intervals ({runs} run(s) of rows, slack {slack:.0} B); {} B over its whole window",
        marks.len() as i64 * chunk
    );
    (counted, moved, slack)
}

/// `counted` within `tolerance` of `moved`, give or take `slack` bytes; and enough bytes compared
/// (8 MiB: 32 of the stream's chunks) for the comparison to mean something.
pub fn near_bytes(what: &str, (counted, moved, slack): (f64, f64, f64), tolerance: f64) {
    let err = (counted - moved) / moved;
    println!("{what}: {counted:.0} B counted for {moved:.0} B moved ({:+.2} %, slack {slack:.0} B)", 100.0 * err);
    assert!(moved >= 8.0 * 1024.0 * 1024.0, "{what}: the rows in the stream's window saw it move only {moved} B");
    assert!(
        (counted - moved).abs() <= tolerance * moved + slack,
        "{what}: {counted} B counted for {moved} B moved, beyond {} % and {slack} B",
        tolerance * 100.0
    );
}

/// Runs each named check's assertions, all of them whatever the others did, prints each one's
/// verdict, and fails naming every check that failed: the checks of one boot are judged apart.
pub fn judge(checks: Vec<(String, Box<dyn FnOnce() + '_>)>) {
    let mut failed = Vec::new();
    for (name, check) in checks {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
            Ok(()) => println!("check {name}: ok"),
            Err(e) => {
                let why = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("check {name}: FAILED: {why}");
                failed.push(format!("{name}: {why}"));
            }
        }
    }
    assert!(failed.is_empty(), "{} check(s) failed:\n{}", failed.len(), failed.join("\n"));
}
