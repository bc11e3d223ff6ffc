//! Scale (issue 24): 1,000 containers at 1 ms on the none path (eBPF PMU columns) and on the
//! host-driven emulated path, each run to its end with nothing dropped and its memory bounded,
//! keeping up as the read budget promises (crates/engine/src/budget.rs: every container read
//! at least every MAX_GROUPS intervals, its rows covering the run); and the eBPF ticks' work
//! following the followed containers, not the CPU count (QEMU guests of 2 and 16 vCPUs, and the
//! newest kernel Debian carries). The wall time, the share of overloaded intervals and the CPU
//! time per container-interval are printed, not judged: they are the host's; the table of costs
//! is scripts/bench-cost.sh's.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;
use cachescope_engine::budget::MAX_GROUPS;
use common::{have, overloaded, parquet_files, read, release_bin, sandbox};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const CONTAINERS: usize = 1000;
/// One at a time: a QEMU guest beside the 1,000 containers takes the CPU they are measured on.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
const SECONDS: u64 = 10;
const INTERVAL: Duration = Duration::from_millis(1);

/// What a run did, from wait4.
struct Measured {
    ok: bool,
    err: String,
    rss_kb: i64,
    /// User and system CPU time.
    cpu: Duration,
    wall: Duration,
}

/// Run `cmd` to its end, killed (and the test failed) past `ceiling`, which only a hang reaches.
#[allow(clippy::zombie_processes)] // waited for with wait4, for its rusage
fn run_measured(cmd: &mut Command, ceiling: Duration) -> Measured {
    use std::io::Read;
    let t = Instant::now();
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let pid = child.id() as i32;
    let mut status = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    let mut killed = false;
    let ru = loop {
        // SAFETY: wait4 on our own child, not waited for elsewhere; `status` and `ru` outlive
        // the call and a zeroed rusage is valid.
        let got = unsafe { libc::wait4(pid, &mut status, if killed { 0 } else { libc::WNOHANG }, ru.as_mut_ptr()) };
        if got == pid {
            // SAFETY: wait4 filled it for the child it returned.
            break unsafe { ru.assume_init() };
        }
        assert_eq!(got, 0, "wait4: {}", std::io::Error::last_os_error());
        if t.elapsed() > ceiling {
            let _ = child.kill();
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = t.elapsed();
    let err = reader.join().unwrap();
    assert!(!killed, "still running after {ceiling:?}: killed\n{err}");
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Measured { ok, err, rss_kb: ru.ru_maxrss, cpu: tv(ru.ru_utime) + tv(ru.ru_stime), wall }
}

/// What a container's rows say.
struct Rows {
    /// The start of its first interval.
    first: i64,
    /// The times of its rows, in order.
    times: Vec<i64>,
    /// The longest interval of a row whose counts were not lost.
    longest: i64,
}

/// What the rows say, per container.
fn per_container(dir: &Path) -> HashMap<String, Rows> {
    let (batches, _) = read(&parquet_files(dir));
    let mut by: HashMap<String, Rows> = HashMap::new();
    for b in &batches {
        let i64c = |n: &str| b.column_by_name(n).unwrap().as_primitive::<Int64Type>().clone();
        let (t, iv, cpu) = (i64c("time_ns"), i64c("interval_ns"), i64c("cpu_ns"));
        let (id, st) = (
            b.column_by_name("container_id").unwrap().as_string::<i32>().clone(),
            b.column_by_name("status").unwrap().as_string::<i32>().clone(),
        );
        for i in 0..b.num_rows() {
            if st.value(i) == "stopped" {
                continue;
            }
            let e =
                by.entry(id.value(i).to_string()).or_insert(Rows { first: i64::MAX, times: Vec::new(), longest: 0 });
            e.first = e.first.min(t.value(i) - iv.value(i));
            e.times.push(t.value(i));
            // A row whose PMU counts were lost (null cpu_ns) spans the intervals it stands for.
            if cpu.is_valid(i) {
                e.longest = e.longest.max(iv.value(i));
            }
        }
    }
    for e in by.values_mut() {
        e.times.sort_unstable();
    }
    by
}

#[test]
fn a_thousand_containers_at_1ms_on_the_none_and_emulated_paths() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = sandbox("cachescope-scale") else { return };
    let bin = release_bin();
    for i in 0..CONTAINERS {
        let name = format!("c{i:04}");
        sb.add(&name).unwrap();
        let mut c = Command::new(if i == 0 { "sh" } else { "sleep" });
        if i == 0 {
            // One busy container: the other CPU stays for the collector and the rest.
            c.args(["-c", "while :; do :; done"]);
        } else {
            c.arg("600");
        }
        sb.spawn(&name, c).unwrap();
    }
    let sel = format!("{}/*", sb.rel());
    let ours = format!("{}_c", sb.rel().replace('/', "_"));
    for (path, extra) in
        [("none", vec!["--backend", "none"]), ("emulated", vec!["--emulate", "intel-xeon-platinum-8160"])]
    {
        let out = tempfile::tempdir().unwrap();
        let m = run_measured(
            Command::new(&bin)
                .args(["record", "--containers", &sel, "--interval", "1ms", "--duration", &format!("{SECONDS}s")])
                .args(&extra)
                .arg("--output")
                .arg(out.path()),
            // Start (1,000 cgroups found, eBPF loaded) and end (the file closed) take about a
            // second; a minute more is a hang.
            Duration::from_secs(SECONDS + 60),
        );
        let (ok, err, rss_mb) = (m.ok, &m.err, m.rss_kb / 1024);
        let over = overloaded(err);
        let summary = err.lines().find(|l| l.contains("recorded ")).unwrap_or("(no summary)");
        let intervals = over.map_or(SECONDS * 1000, |o| o.1);
        println!(
            "{path}: {CONTAINERS} containers, wall {:.2?}, {:.3} % of {intervals} intervals overloaded, CPU {:.2?} ({:.0} ns per \
             container-interval), peak RSS {rss_mb} MB; {summary}",
            m.wall,
            over.map_or(0.0, |o| o.0 as f64 / o.1 as f64 * 100.0),
            m.cpu,
            m.cpu.as_nanos() as f64 / (CONTAINERS as f64 * intervals as f64),
        );
        assert!(ok, "{path}: {err}");
        assert!(err.contains("recorded "), "{path}: no summary: {err}");
        assert!(!err.contains("rows lost"), "{path}: {err}");
        // The collector starved of CPU for about a second (the host's doing, not the
        // collector's): its rows say so (null counts), the run goes on. Said, not judged.
        if let Some(l) = err.lines().find(|l| l.contains("PMU counts incomplete")) {
            println!("{path}: {l}");
        }
        assert!(rss_mb < 256, "{path}: peak RSS {rss_mb} MB");
        // Keeping up as the budget promises: the longest a container waited for a read, by the
        // run's own account, is at most MAX_GROUPS intervals...
        let least = over.map_or(INTERVAL, |o| o.2);
        assert!(least <= INTERVAL * MAX_GROUPS as u32, "{path}: a container waited {least:?}: {err}");
        // Quiet intervals (issue 42): with CPU time counted, an interval reads who ran, the
        // new and a keyframe share, so an idle container's row spans up to its keyframe
        // period, and the reads are about one busy container's and one keyframe per interval
        // (a count, whatever the host's load): under 1 % of the 10 million followed.
        let quiet = err.lines().find(|l| l.contains("container-intervals"));
        let least = match quiet {
            Some(l) => {
                let n: Vec<u64> = l.split(' ').filter_map(|w| w.parse().ok()).collect();
                let (read, followed) = (n[0], n[1]);
                println!("{path}: {l}");
                assert!(read * 100 < followed, "{path}: {l}");
                least + cachescope_engine::quiet::KEYFRAME
            }
            None => least,
        };
        // ...which its rows bear out: each of ours has rows from the run's first interval on,
        // no row spans more (its interval is the time since its previous read), and it has a
        // row at least once a second (a keyframe) to the run's end.
        let rows = per_container(out.path());
        let ours: Vec<(&String, &Rows)> = rows.iter().filter(|(k, _)| k.starts_with(&ours)).collect();
        assert_eq!(ours.len(), CONTAINERS, "{path}: every container has rows");
        let start = ours.iter().map(|(_, r)| r.first).min().unwrap();
        let end = ours.iter().filter_map(|(_, r)| r.times.last()).max().copied().unwrap();
        println!("{path}: rows over {:.3} s", (end - start) as f64 / 1e9);
        let (least_ns, second) = (least.as_nanos() as i64, 1_000_000_000);
        for (id, Rows { first, times, longest }) in &ours {
            assert_eq!(*first, start, "{path}: {id}'s rows begin with the run");
            assert!(*longest <= least_ns, "{path}: {id} has a row of {longest} ns (at least every {least:?})");
            let gaps = std::iter::once(start).chain(times.iter().copied()).chain(std::iter::once(end));
            let gaps: Vec<i64> = gaps.collect::<Vec<_>>().windows(2).map(|w| w[1] - w[0]).collect();
            let widest = gaps.iter().max().copied().unwrap_or(0);
            assert!(widest <= second + least_ns, "{path}: {id} went {widest} ns without a row");
        }
    }
}

/// One guest: (ticks asked, the header's words, program runs, timer runs) per tick mode it
/// ran, the runs per second of the guest's recording. A guest that never reached its /init (TCG
/// with many vCPUs on 2 host CPUs sometimes stalls at boot: RCU stall reports, no init) is
/// booted once more by guest-qemu.sh.
fn guest(vcpus: u32, kernel: &str, modes: &str) -> Vec<(String, String, f64, f64)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(root.join("scripts/guest-qemu.sh"))
        .arg(release_bin())
        .arg(out.path())
        .arg(root.join("crates/bpf/test/guest-ticks.sh"))
        .env("CACHESCOPE_GUEST_KMOD", "0")
        .env("CACHESCOPE_GUEST_KERNEL", kernel)
        // The RDT machine's QEMU (10.2.2, its device not asked for), not Debian's 7.2: loading
        // the eBPF programs patches the kernel's text, and 7.2 with a thread per vCPU now and
        // then leaves a vCPU running a stale translation of the patched site for good (the
        // module's guests met it first, kmod/README.md): at 16 vCPUs "soft lockup - CPU#6
        // stuck for 75s! [cachescope]", once in two runs, which a second boot used to hide.
        .env("CACHESCOPE_QEMU", common::rdt::rdt_qemu())
        .env("CACHESCOPE_QEMU_MACHINE", format!("-cpu max -smp {vcpus}"))
        .env("CACHESCOPE_QEMU_APPEND", format!("secs=5 modes={modes}"))
        // A boot takes 10-20 s (19 and 20 s at 16 vCPUs in two CI runs); one that stalls
        // never reaches /init (a CI run's first 16-vCPU boot met its ceiling, then was booted
        // again): 60 s to reach it, 120 s for the whole run, ceilings only a hang reaches.
        .env("CACHESCOPE_QEMU_BOOT_TIMEOUT", "60")
        .env("CACHESCOPE_QEMU_TIMEOUT", "120")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
    println!("== {vcpus} vCPUs, kernel {}\n{said}", if kernel.is_empty() { "default" } else { kernel });
    assert!(run.status.success(), "guest-qemu.sh failed");
    results(&said, vcpus, modes)
}

fn results(said: &str, vcpus: u32, modes: &str) -> Vec<(String, String, f64, f64)> {
    let mut got = Vec::new();
    for line in said.lines().filter_map(|l| l.strip_prefix("CS-RESULT ")) {
        let field = |k: &str| {
            let at = line.find(&format!("{k}="))? + k.len() + 1;
            let v = &line[at..];
            Some(if let Some(q) = v.strip_prefix('"') { q.split('"').next()? } else { v.split(' ').next()? })
        };
        let num = |k: &str| field(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or_else(|| panic!("{k} in {line}"));
        assert_eq!(field("rc"), Some("0"), "{line}");
        assert_eq!(num("cpus") as u32, vcpus);
        let secs = num("secs");
        got.push((
            field("ticks").unwrap().to_string(),
            field("mode").unwrap().to_string(),
            num("runs") / secs,
            num("timer_runs") / secs,
        ));
    }
    assert_eq!(got.len(), modes.split(',').count(), "every mode reported: {said}");
    got
}

#[test]
fn ebpf_ticks_follow_containers_not_cpus() {
    if !have("qemu-system-x86_64") || !Path::new("/bin/busybox").exists() {
        cachescope_testkit::skip("needs qemu-system-x86_64 and busybox-static (scripts/setup.sh installs them)");
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    // This release's kernel (6.1: timers not pinned) at 2 and 16 vCPUs.
    let two = guest(2, "", "followed,every-cpu");
    let sixteen = guest(16, "", "followed");
    for (ticks, mode, ..) in two.iter().chain(&sixteen) {
        let want = if ticks == "followed" { "ticks where followed containers run" } else { "ticks on every CPU" };
        assert_eq!(mode, want, "{ticks}");
    }
    let total = |g: &(String, String, f64, f64)| g.2 + g.3;
    let (f2, e2, f16) = (total(&two[0]), total(&two[1]), total(&sixteen[0]));
    println!(
        "eBPF runs per second, one busy followed container: 2 vCPUs {f2:.0} (timers {:.0}; every-CPU ticks {e2:.0}), \
         16 vCPUs {f16:.0} (timers {:.0}): {:.2}x",
        two[0].3,
        sixteen[0].3,
        f16 / f2
    );
    // The 1 ms work follows the followed container, not the CPUs: its timer runs only on the
    // CPU whose current task is followed, once a 1 ms slot at most; one busy task is on one
    // CPU at a time (twice that for its moves between CPUs). A count a busy host can only
    // lower (TCG vCPUs starved miss expiries), where a ratio of rates of two boots (16 vCPUs
    // against 2) moved with the load each boot met. (Armed on every CPU, it would run up to
    // 16,000 times a second at 16 vCPUs.)
    for (vcpus, g) in [(2, &two[0]), (16, &sixteen[0])] {
        assert!(g.3 <= 2_000.0, "{vcpus} vCPUs, followed ticks: {:.0} timer runs a second", g.3);
    }
    // The newest kernel (timers pinned to their CPU).
    let newest = guest(2, "unstable", "followed");
    assert_eq!(newest[0].1, "ticks where followed containers run");
    println!("newest kernel, 2 vCPUs: {:.0} timer runs a second", newest[0].3);
    assert!(newest[0].3 <= 2_000.0, "newest kernel, followed ticks: {:.0} timer runs a second", newest[0].3);
}
