//! Helpers the CLI's test binaries share.
#![allow(dead_code)] // each test binary uses its own part

pub mod rdt;

use arrow_array::RecordBatch;
use cachescope_cgroups::sandbox::Sandbox;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The cachescope binary under test, as a command.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cachescope"))
}

/// The bundled scenario (scenarios/noisy-neighbour.toml).
pub fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/noisy-neighbour.toml")
}

/// The files in `dir` whose extension is `ext`, sorted.
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// The finished Parquet files in `dir`, sorted.
pub fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    files_with_ext(dir, "parquet")
}

/// `docker`, as a command; its output when it succeeds.
pub fn docker(args: &[&str]) -> Option<String> {
    let out = Command::new("docker").args(args).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A sandbox cgroup on this host's v2 tree, or None after saying why the test skips.
pub fn sandbox(prefix: &str) -> Option<Sandbox> {
    match Sandbox::for_host(prefix) {
        Ok(s) => Some(s),
        Err(why) => {
            cachescope_testkit::skip(why);
            None
        }
    }
}

/// Whether `cmd` is on the PATH.
pub fn have(cmd: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {cmd}")).output().is_ok_and(|o| o.status.success())
}

/// The first lines of a failed guest's panic message, where a CI summary that keeps only a
/// message's start still shows them: the script's verdict (QEMU's status, a ceiling reached),
/// the guest's last CS- line (how far its script got) and the console's last lines.
pub fn guest_failure(said: &str) -> String {
    let verdict = said.lines().filter(|l| l.contains("qemu exited") || l.contains("reached no user space"));
    let last = said.lines().rfind(|l| l.starts_with("CS-") && !l.starts_with("CS-INFO"));
    let tail: Vec<&str> = said.lines().filter(|l| l.contains(":   ")).collect();
    let mut m: Vec<String> = verdict.map(str::to_string).collect();
    m.push(format!("the guest's last CS- line: {}", last.unwrap_or("(none)")));
    m.extend(tail[tail.len().saturating_sub(8)..].iter().map(|l| l.to_string()));
    m.join("\n")
}

/// The "CS-RESULT key=value" lines a QEMU guest printed (scripts/guest-qemu.sh), by key.
pub fn guest_results(said: &str) -> std::collections::HashMap<String, String> {
    said.lines()
        .filter_map(|l| l.strip_prefix("CS-RESULT "))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A run whose stderr is read as it goes: `started` is what came up to and with the first line
/// holding the marker (or all of it, if none did: the run ended first); [`Started::finish`]
/// waits for the end and adds the rest.
pub struct Started {
    pub child: std::process::Child,
    pub started: String,
    /// Whether the marker came.
    pub seen: bool,
    /// The lines after it, as they come (the sender goes at the end of stderr).
    rest: std::sync::mpsc::Receiver<String>,
}

impl Started {
    /// Spawn `cmd` (its stderr piped) and return once its stderr says `marker`.
    pub fn spawn(cmd: &mut Command, marker: &str) -> Started {
        Started::spawn_within(cmd, marker, std::time::Duration::MAX)
    }

    /// The same, giving up after `ceiling` (a ceiling only a hang reaches; `seen` then false).
    pub fn spawn_within(cmd: &mut Command, marker: &str, ceiling: std::time::Duration) -> Started {
        use std::io::BufRead;
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let (tx, rest) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines {
                if tx.send(line.unwrap() + "\n").is_err() {
                    return;
                }
            }
        });
        let deadline = std::time::Instant::now().checked_add(ceiling);
        let (mut started, mut seen) = (String::new(), false);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            let line = match left {
                Some(left) => rest.recv_timeout(left).ok(),
                None => rest.recv().ok(),
            };
            let Some(line) = line else { break };
            started.push_str(&line);
            if line.contains(marker) {
                seen = true;
                break;
            }
        }
        Started { child, started, seen, rest }
    }

    /// Wait for the run's end: its status and all it said on stderr.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().unwrap();
        (status, self.started + &self.rest.iter().collect::<String>())
    }

    /// [`Started::finish`], failing the test once the run goes on past `ceiling` (a ceiling
    /// only a hang reaches; the run is killed then).
    pub fn finish_within(mut self, ceiling: std::time::Duration) -> (std::process::ExitStatus, String) {
        let status = wait_within(&mut self.child, ceiling);
        let said = self.started + &self.rest.iter().collect::<String>();
        (status.unwrap_or_else(|| panic!("still running after {ceiling:?}: killed\n{said}")), said)
    }
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// scripts/package.sh run on the binary under test, into `dir`: the paths of the two
/// packages it printed last (cachescope_<version>_amd64.deb, cachescope-dkms_<version>_all.deb),
/// checked to be named after the workspace's version.
pub fn packages(dir: &Path) -> (String, String) {
    packages_of(dir, Path::new(env!("CARGO_BIN_EXE_cachescope")))
}

/// [`packages`] of binary `bin`.
pub fn packages_of(dir: &Path, bin: &Path) -> (String, String) {
    let o =
        Command::new(repo().join("scripts/package.sh")).arg(dir).env("CACHESCOPE_PACKAGE_BIN", bin).output().unwrap();
    assert!(o.status.success(), "package.sh: {}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let paths: Vec<&str> = stdout.lines().collect();
    let version = env!("CARGO_PKG_VERSION");
    let [deb, dkms] = paths[paths.len().saturating_sub(2)..] else { panic!("{stdout}") };
    assert!(deb.ends_with(&format!("/cachescope_{version}_amd64.deb")), "{stdout}");
    assert!(dkms.ends_with(&format!("/cachescope-dkms_{version}_all.deb")), "{stdout}");
    (deb.to_string(), dkms.to_string())
}

/// The release build of cachescope, for the tests that measure costs (a debug build is 5-10×
/// slower: 1,000 containers at 1 ms overload it). Built once per test process into a target
/// directory outside the clone (CACHESCOPE_RELEASE_TARGET, default
/// /var/cache/cachescope/target-release), where cargo keeps what did not change.
pub fn release_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| release_build(&[]).join("cachescope")).clone()
}

/// The release build of binary `bin` of workspace package `package`, built with cachescope in
/// one cargo invocation (as scripts/build.sh builds it, so the shared crates are compiled once).
pub fn release_tool(package: &str, bin: &str) -> PathBuf {
    release_build(&["-p", package]).join(bin)
}

/// The cli crate's example `name`, from the debug build these tests belong to (cargo builds the
/// examples with the tests, in the same target directory): an example is built with the cli's
/// dev-dependencies, whose features make a release build of it compile every workspace crate
/// a second time (50 s on 2 CPUs).
pub fn debug_example(name: &str) -> PathBuf {
    // This test's binary is TARGET/debug/deps/NAME-HASH.
    let exe = std::env::current_exe().unwrap();
    let Some(target) = exe.ancestors().nth(3) else { panic!("{}: not in a cargo target directory", exe.display()) };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    // Nothing to do when the tests' build made it; a run of one test binary may not have.
    let o = Command::new(cargo)
        .current_dir(repo())
        .args(["build", "--locked", "-q", "-p", "cachescope", "--example", name, "--target-dir"])
        .arg(target)
        .output()
        .unwrap();
    assert!(o.status.success(), "debug build of example {name}: {}", String::from_utf8_lossy(&o.stderr));
    target.join("debug/examples").join(name)
}

/// `cargo build --release` of the cli crate with `more` arguments, in the release target
/// directory kept between runs; that build's directory.
fn release_build(more: &[&str]) -> PathBuf {
    let target = std::env::var("CACHESCOPE_RELEASE_TARGET")
        .unwrap_or_else(|_| "/var/cache/cachescope/target-release".to_string());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let o = Command::new(cargo)
        .current_dir(repo())
        .args(["build", "--release", "--locked", "-q", "-p", "cachescope", "--target-dir", &target])
        .args(more)
        .output()
        .unwrap();
    assert!(o.status.success(), "release build {more:?}: {}", String::from_utf8_lossy(&o.stderr));
    Path::new(&target).join("release")
}

/// The record batches of Parquet `files`, and their key-value metadata.
pub fn read(files: &[PathBuf]) -> (Vec<RecordBatch>, BTreeMap<String, String>) {
    let mut out = Vec::new();
    let mut md = BTreeMap::new();
    for f in files {
        let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap()).unwrap();
        for kv in b.metadata().file_metadata().key_value_metadata().unwrap() {
            md.insert(kv.key.clone(), kv.value.clone().unwrap_or_default());
        }
        out.extend(b.build().unwrap().map(|r| r.unwrap()));
    }
    (out, md)
}

/// `GET path` over HTTP/1.0 from `addr`: the whole answer, headers included.
pub fn get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// A local image holding busybox (no registry: `docker import` / `podman import` of a
/// one-binary root), for the runtime `cli` (docker or podman).
pub fn busybox_image(cli: &str) -> Option<&'static str> {
    const IMAGE: &str = "localhost/cachescope-test-busybox:1";
    let ok = |args: &[&str]| Command::new(cli).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status();
    if ok(&["image", "inspect", IMAGE]).is_ok_and(|s| s.success()) {
        return Some(IMAGE);
    }
    let root = tempfile::tempdir().ok()?;
    std::fs::create_dir(root.path().join("bin")).ok()?;
    std::fs::copy("/usr/bin/busybox", root.path().join("bin/busybox")).ok()?;
    for c in ["sh", "sleep"] {
        std::os::unix::fs::symlink("busybox", root.path().join("bin").join(c)).ok()?;
    }
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("tar -C {} -c . | {cli} import - {IMAGE}", root.path().display()))
        .stdout(Stdio::null())
        .status()
        .ok()?
        .success();
    ok.then_some(IMAGE)
}

/// `tmux ARGS`: what it printed.
pub fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// What a child writes on a pipe, collected as it comes, so that a test waits for the event it
/// needs (a line, a screen) rather than a fixed time.
pub struct Watch {
    seen: std::sync::Arc<Seen>,
    reader: std::thread::JoinHandle<()>,
}

/// The bytes so far and whether the pipe has closed, and a wake-up for each change.
type Seen = (std::sync::Mutex<(Vec<u8>, bool)>, std::sync::Condvar);

impl Watch {
    pub fn new(mut from: impl Read + Send + 'static) -> Watch {
        let seen: std::sync::Arc<Seen> = std::sync::Arc::new(Default::default());
        let s = seen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                let n = from.read(&mut buf).unwrap_or(0);
                let mut g = s.0.lock().unwrap();
                g.0.extend_from_slice(&buf[..n]);
                g.1 = n == 0;
                s.1.notify_all();
                if n == 0 {
                    return;
                }
            }
        });
        Watch { seen, reader }
    }

    /// Wait until `what` holds of the text so far (or the pipe closed), `ceiling` at most:
    /// whether it holds.
    pub fn until(&self, ceiling: std::time::Duration, what: impl Fn(&str) -> bool) -> bool {
        let deadline = std::time::Instant::now() + ceiling;
        let mut g = self.seen.0.lock().unwrap();
        loop {
            if what(&String::from_utf8_lossy(&g.0)) {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if g.1 || left.is_zero() {
                return false;
            }
            g = self.seen.1.wait_timeout(g, left).unwrap().0;
        }
    }

    /// The text so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.0.lock().unwrap().0).into_owned()
    }

    /// All of it, once the pipe has closed.
    pub fn finish(self) -> String {
        let Watch { seen, reader } = self;
        reader.join().unwrap();
        let text = String::from_utf8_lossy(&seen.0.lock().unwrap().0).into_owned();
        text
    }
}

/// Wait for `child`'s end, `ceiling` at most (a ceiling only a hang reaches): its status, or
/// None after killing it.
pub fn wait_within(child: &mut std::process::Child, ceiling: std::time::Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + ceiling;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `cmd` run to its end with its output, failing the test if it runs past `ceiling` (a
/// ceiling only a hang reaches); with how long it took, to print.
pub fn output_within(cmd: &mut Command, ceiling: std::time::Duration) -> (std::process::Output, std::time::Duration) {
    let t = std::time::Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (out, err) = (Watch::new(child.stdout.take().unwrap()), Watch::new(child.stderr.take().unwrap()));
    let status = wait_within(&mut child, ceiling);
    let took = t.elapsed();
    let (stdout, stderr) = (out.finish(), err.finish());
    let status = status.unwrap_or_else(|| panic!("{cmd:?} still ran after {ceiling:?}: killed\n{stderr}"));
    (std::process::Output { status, stdout: stdout.into_bytes(), stderr: stderr.into_bytes() }, took)
}

/// Send `sig` to `child` (spawned by the test and not yet waited for).
pub fn signal(child: &std::process::Child, sig: i32) {
    // SAFETY: kill(2) on a pid we spawned and still hold; no memory is involved.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0, "kill {sig}");
}

/// Time the scheduler charged to no task on any CPU (irq + softirq + steal from /proc/stat), in
/// ns so far. eBPF's cpu-clock counts it while a task is current, cpu.stat does not: an upper
/// bound of a container's charge against cpu.stat adds what this grew by over the same window.
pub fn uncharged_ns() -> i64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some("cpu")).unwrap();
    let f: Vec<i64> = line.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    (f[5] + f[6] + f[7]) * 1_000_000_000 / hz
}

/// A cgroup's CPU time so far (cpu.stat usage_usec), in ns.
pub fn cgroup_cpu_ns(dir: &Path) -> i64 {
    cachescope_cgroups::cpu_usage_usec(dir).unwrap_or_else(|| panic!("no cpu.stat in {}", dir.display())) as i64 * 1000
}

/// Real time now, in ns since the epoch (what rows' `time_ns` are).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64
}

/// The kernel's account of some cgroups' CPU time, sampled every 5 ms on a thread while a run
/// goes on: afterwards, what each used over the window its rows cover (the same window, not
/// the run's whole life from spawn to exit).
pub struct CpuTrace {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<CpuSample>>,
}

/// One sample: real time (ns), each cgroup's cpu.stat usage (ns; None once it is gone) and the
/// host's [`uncharged_ns`].
#[derive(Debug, Clone)]
pub struct CpuSample {
    pub at_ns: i64,
    pub usage_ns: Vec<Option<i64>>,
    pub uncharged_ns: i64,
}

impl CpuTrace {
    pub fn start(cgroups: &[PathBuf]) -> CpuTrace {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, cgroups) = (stop.clone(), cgroups.to_vec());
        let thread = std::thread::spawn(move || {
            let mut v = Vec::new();
            loop {
                let last = s.load(std::sync::atomic::Ordering::Relaxed);
                // Usage between two readings of the clock: the sample's time is within them.
                let before = now_ns();
                let usage_ns =
                    cgroups.iter().map(|c| cachescope_cgroups::cpu_usage_usec(c).map(|u| u as i64 * 1000)).collect();
                let uncharged_ns = uncharged_ns();
                v.push(CpuSample { at_ns: (before + now_ns()) / 2, usage_ns, uncharged_ns });
                if last {
                    return v;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        CpuTrace { stop, thread }
    }

    /// Stop sampling (before the cgroups are removed): the samples.
    pub fn stop(self) -> Vec<CpuSample> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// What cgroup `i` of `samples` used over [from_ns, to_ns], as bounds: at least its growth
/// between the samples just inside the window, at most its growth between those just outside,
/// plus the time no task was charged meanwhile (which eBPF's cpu-clock may count). None where
/// the samples do not reach around the window.
pub fn cpu_within(samples: &[CpuSample], i: usize, from_ns: i64, to_ns: i64) -> Option<(i64, i64)> {
    let inside: Vec<&CpuSample> =
        samples.iter().filter(|s| s.at_ns >= from_ns && s.at_ns <= to_ns && s.usage_ns[i].is_some()).collect();
    let before = samples.iter().rev().find(|s| s.at_ns <= from_ns && s.usage_ns[i].is_some())?;
    let after = samples.iter().find(|s| s.at_ns >= to_ns && s.usage_ns[i].is_some())?;
    let at_least = match (inside.first(), inside.last()) {
        (Some(a), Some(b)) => b.usage_ns[i]? - a.usage_ns[i]?,
        _ => 0,
    };
    let at_most = after.usage_ns[i]? - before.usage_ns[i]? + after.uncharged_ns - before.uncharged_ns;
    Some((at_least, at_most))
}

/// A container's CPU time as its rows charge it (`charged` ns, rows covering [from_ns, to_ns])
/// against the kernel's count for cgroup `i` of `samples` over that window: no more than the
/// kernel's (with the time no task was charged), no less unless the run said counts were lost
/// (`lost`: the collector starved, a timing outcome, printed). The 3 % and 10 ms: cpu-clock is
/// charged in 1 ms slots and at switches, the samples are 5 ms apart.
pub fn check_cpu(what: &str, charged: i64, window: (i64, i64), samples: &[CpuSample], i: usize, lost: bool) {
    check_cpu_read_late(what, charged, window, samples, i, lost, 0);
}

/// [`check_cpu`] where the counters' reads can come up to `late_ns` apart (the perf path's
/// recorder stopped by SIGSTOP): the CPU time at either end of the window is split across such
/// a read in proportion, an error of up to a read's worth at each end, so the lower bound is the
/// kernel's count over the window less `late_ns` at each end. The upper bound is unchanged.
pub fn check_cpu_read_late(
    what: &str,
    charged: i64,
    (from_ns, to_ns): (i64, i64),
    samples: &[CpuSample],
    i: usize,
    lost: bool,
    late_ns: i64,
) {
    let around = || panic!("{what}: the trace does not reach around the rows' window");
    let (at_least, at_most) = cpu_within(samples, i, from_ns, to_ns).unwrap_or_else(around);
    let at_least = if late_ns > 0 && to_ns - from_ns > 2 * late_ns {
        cpu_within(samples, i, from_ns + late_ns, to_ns - late_ns).unwrap_or_else(around).0
    } else {
        at_least
    };
    println!(
        "{what}: {charged} ns of CPU in rows over {:.3} s; the kernel's count over that window {at_least}..{at_most} ns ({:.3} of the most){}",
        (to_ns - from_ns) as f64 / 1e9,
        charged as f64 / at_most.max(1) as f64,
        if lost { "; PMU counts were lost, so no lower bound" } else { "" }
    );
    assert!(
        charged <= at_most + at_most * 3 / 100 + 10_000_000,
        "{what}: {charged} ns charged, the kernel counted at most {at_most}"
    );
    if !lost {
        assert!(
            charged >= at_least - at_least * 3 / 100 - 10_000_000,
            "{what}: {charged} ns charged, the kernel counted at least {at_least}"
        );
    }
}

/// A duration as Debug prints it ("17ms", "1.5ms", "100µs", "1s").
pub fn debug_duration(s: &str) -> Option<std::time::Duration> {
    let at = s.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let n: f64 = s[..at].parse().ok()?;
    let unit = match &s[at..] {
        "ns" => 1e-9,
        "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return None,
    };
    Some(std::time::Duration::from_secs_f64(n * unit))
}

/// A run's summary of its overload (crates/engine/src/budget.rs: "overloaded: X of Y intervals
/// read only part of the containers; each was read every A on average then, and at least
/// every B"): (X, Y, B). None: it never was.
pub fn overloaded(err: &str) -> Option<(u64, u64, std::time::Duration)> {
    let line = err.lines().find_map(|l| l.split("overloaded: ").nth(1))?;
    let mut w = line.split_whitespace();
    let cut = w.next()?.parse().ok()?;
    let all = w.nth(1)?.parse().ok()?;
    let least = line.split("at least every ").nth(1)?.split_whitespace().next()?;
    Some((cut, all, debug_duration(least.trim_end_matches(|c: char| !c.is_alphanumeric()))?))
}
