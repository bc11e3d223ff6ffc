//! Short-lived containers are charged exactly: cgroups each busy for 70 ms, one after
//! another, beside an idle sibling. The reference is the kernel's own count (cpu.stat
//! usage_usec, read just before each rmdir). Every one has rows; its rows hold at least 97 %
//! of its CPU time (eBPF slots are keyed by cgroup id in the kernel, and kept while nobody
//! holds the cgroup yet); the sibling gains nothing; its first row does not begin before its
//! mkdir, its `stopped` row comes after its rmdir, and none of its rows after that (how long
//! after the rmdir is printed).

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::Array;
use common::{bin, parquet_files, sandbox};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

/// What a wait for the recorder may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

/// Poll the recorder's /metrics page at `addr` until `done` says yes of it.
fn wait_for_page(addr: &str, what: &str, done: impl Fn(&str) -> bool) -> Duration {
    let t0 = Instant::now();
    while !common::get(addr, "/metrics").is_some_and(|p| p.starts_with("HTTP/1.1 200") && done(&p)) {
        assert!(t0.elapsed() < HANG, "{what}: not within {HANG:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

/// Sleep until CLOCK_MONOTONIC, the eBPF slots' clock, has crossed `n` slot (1 ms) boundaries.
fn cross_slots(n: u64) {
    let slot = |t: Duration| t.as_nanos() / 1_000_000;
    let until = slot(cachescope_platform::clock::monotonic()) + u128::from(n);
    while slot(cachescope_platform::clock::monotonic()) < until {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The kernel's account of one short container.
struct Truth {
    usage_ns: i64,
    mkdir_ns: i64,
    rmdir_ns: (i64, i64),
    /// Time the scheduler charged to no task (interrupts, and what the hypervisor stole) on the
    /// CPUs it could run on while it ran: cpu-clock, which eBPF counts with, includes it while
    /// the task is current; cpu.stat does not.
    uncharged_ns: i64,
}

/// The fields after the name on /proc/stat's line for CPU `cpu` (None: all), in USER_HZ ticks.
fn proc_stat(cpu: Option<usize>) -> Vec<i64> {
    let name = cpu.map_or("cpu".to_string(), |c| format!("cpu{c}"));
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some(name.as_str())).unwrap();
    line.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect()
}

/// irq + softirq + steal of CPU `cpu` (None: all), in ns so far, from /proc/stat.
fn uncharged_ns(cpu: Option<usize>) -> i64 {
    let f = proc_stat(cpu);
    (f[5] + f[6] + f[7]) * user_hz_ns()
}

/// The steal time /proc/stat reports for all CPUs so far, in ns (0 where the host reports none).
fn steal_ns() -> i64 {
    proc_stat(None)[7] * user_hz_ns()
}

/// One USER_HZ tick (the unit of /proc/stat), in ns.
fn user_hz_ns() -> i64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    1_000_000_000 / hz
}

/// What its rows say.
#[derive(Default)]
struct Got {
    cpu_ns: i64,
    rows: usize,
    first_start_ns: Option<i64>,
    last_ns: Option<i64>,
    stopped_ns: Option<i64>,
}

/// One at a time: two of these side by side (two collectors, four busy loops on two CPUs)
/// measure each other's noise.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `pinned`: the busy loops run on CPU 1 only. Measured here alone: pinned, each cgroup's
/// charge is 1.000-1.004 of the kernel's count, also beside a busy loop outside any followed
/// cgroup on the same CPU; unpinned (moved between CPUs), 0.984-1.034; with a second collector
/// running on the same CPUs, as low as 0.975; on a loaded host (a build beside it) one in 40
/// got 0.96, a tick and a half short. Likely the slot of the loop's last charges: its last
/// row ends at the first sample after the rmdir was seen, and a slot ending after that row is
/// not its; where the rmdir came within a slot of the loop's end (the kernel books what a task
/// ran at its next switch or tick, into the slot then) up to 2 ms were lost. Now the rmdir
/// waits for 2 slot boundaries to pass. Each must get 97 %, or be short by no more than 1.5 ms.
fn short_lived(n: usize, busy_ms: u32, pinned: bool) {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = sandbox(&format!("cachescope-short-{n}")) else { return };
    let mut idle = Command::new("sleep");
    idle.arg("120");
    sb.spawn("idle", idle).unwrap();
    let base = sb.rel();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rec");
    // The Prometheus page says which containers the recorder holds: the test waits on it.
    let run = common::Started::spawn(
        bin()
            .args(["record", "--emulate", "intel-xeon-platinum-8160", "--containers", &format!("{base}/*")])
            .args(["--pmu", "bpf", "--interval", "1ms", "--duration", "120s", "--listen", "127.0.0.1:0", "--output"])
            .arg(&out),
        "serving Prometheus metrics at",
    );
    let addr = run
        .started
        .lines()
        .find_map(|l| l.split("serving Prometheus metrics at http://").nth(1))
        .and_then(|r| r.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no metrics address: {}", run.started))
        .to_string();
    // Sampling, and the idle sibling found.
    let series = |name: &str| format!("container_id=\"{base}_{name}");
    let ready = wait_for_page(&addr, "the idle sibling", |p| p.contains(&series("idle")));
    let mut truth = BTreeMap::new();
    for i in 0..n {
        let name = format!("s{i:03}x");
        let cg = sb.dir().join(&name);
        let mkdir_ns = now_ns();
        std::fs::create_dir(&cg).unwrap();
        let script = format!(
            "echo $$ > {}/cgroup.procs && exec {}timeout {:.3} sh -c 'while :; do :; done'",
            cg.display(),
            if pinned { "taskset -c 1 " } else { "" },
            f64::from(busy_ms) / 1000.0
        );
        let cpu = pinned.then_some(1);
        let uncharged = uncharged_ns(cpu);
        let st = Command::new("sh").args(["-c", &script]).status().unwrap();
        // The loop is reaped: the kernel booked all it ran (at its last switch) into the slot
        // then; once that slot has ended, a row after the rmdir takes it.
        cross_slots(2);
        // Steal is booked at a CPU's ticks, a tick's worth at most each (all of it when an idle
        // CPU wakes): what the loop's last milliseconds lost is in /proc/stat a few ticks later.
        // (A CI run, unpinned, beside a build: +10.1 ms charged over cpu.stat's 46.5 ms, with 0
        // steal read at once.)
        std::thread::sleep(Duration::from_millis(20));
        let uncharged_ns = uncharged_ns(cpu) - uncharged;
        assert!(st.code() == Some(124), "the busy loop ran until its timeout: {st:?}");
        let usage_ns = cachescope_cgroups::cpu_usage_usec(&cg).unwrap() as i64 * 1000;
        let before = now_ns();
        std::fs::remove_dir(&cg).unwrap();
        truth.insert(name, Truth { usage_ns, mkdir_ns, rmdir_ns: (before, now_ns()), uncharged_ns });
    }
    // Every container's series gone from the page: its last rows and its `stopped` row are
    // with the sinks.
    let gone = wait_for_page(&addr, "the stops", |p| truth.keys().all(|name| !p.contains(&series(name))));
    println!("recorder ready after {ready:?}; the last container's series gone {gone:?} after its rmdir");
    // SAFETY: kill(2) on the child we spawned and have not waited for.
    unsafe { libc::kill(run.child.id() as i32, libc::SIGINT) };
    let (status, err) = run.finish();
    assert!(status.success(), "{err}");

    let mut got: BTreeMap<String, Got> = BTreeMap::new();
    for f in parquet_files(&out) {
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for b in r {
            let b = b.unwrap();
            let i64c = |n: &str| b.column_by_name(n).unwrap().as_primitive::<Int64Type>().clone();
            let (t, iv, cpu) = (i64c("time_ns"), i64c("interval_ns"), i64c("cpu_ns"));
            let (id, st) = (
                b.column_by_name("container_id").unwrap().as_string::<i32>().clone(),
                b.column_by_name("status").unwrap().as_string::<i32>().clone(),
            );
            for i in 0..b.num_rows() {
                let Some(name) = id.value(i).strip_prefix(&format!("{base}_")).map(|s| s.split('-').next().unwrap())
                else {
                    continue;
                };
                let g = got.entry(name.to_string()).or_default();
                if st.value(i) == "stopped" {
                    g.stopped_ns = Some(t.value(i));
                    continue;
                }
                g.rows += 1;
                g.last_ns = g.last_ns.max(Some(t.value(i)));
                g.cpu_ns += if cpu.is_valid(i) { cpu.value(i) } else { 0 };
                let start = t.value(i) - iv.value(i);
                g.first_start_ns = Some(g.first_start_ns.map_or(start, |s| s.min(start)));
            }
        }
    }
    // /proc/stat counts in USER_HZ: on a host that reports steal, a container's steal can read
    // one USER_HZ short (the difference of two truncated totals).
    let stat_tick_ns = if steal_ns() > 0 { user_hz_ns() } else { 0 };
    let mut ratios = Vec::new();
    let mut stop_after = Vec::new();
    for (name, tr) in &truth {
        let g = got.get(name).unwrap_or_else(|| panic!("{name} has no rows: {err}"));
        assert!(g.rows > 0, "{name} has no rows");
        let ratio = g.cpu_ns as f64 / tr.usage_ns as f64;
        ratios.push(ratio);
        // A share, or a tick and a half where the host's load left the loop little CPU.
        let short = tr.usage_ns - g.cpu_ns;
        assert!(
            short <= (tr.usage_ns * 3 / 100).max(1_500_000),
            "{name}: {} of {} ns ({ratio:.3}): {err}",
            g.cpu_ns,
            tr.usage_ns
        );
        // eBPF cpu-clock also counts the interrupt and stolen time the scheduler leaves out (a
        // CI run on a loaded host: +15 % on every container, 3 in a row; alone: +0.4 % at most).
        assert!(
            g.cpu_ns <= tr.usage_ns * 11 / 10 + 2_000_000 + tr.uncharged_ns + stat_tick_ns,
            "{name} gained: {} of {} ns ({} ns of interrupts and steal while it ran)",
            g.cpu_ns,
            tr.usage_ns,
            tr.uncharged_ns
        );
        let first = g.first_start_ns.unwrap();
        // (Rows are stamped from CLOCK_MONOTONIC converted once to real time: 0.2 ms of slack.)
        assert!(
            first >= tr.mkdir_ns - 200_000,
            "{name}'s first row begins {} us before its mkdir",
            (tr.mkdir_ns - first) / 1000
        );
        let stopped = g.stopped_ns.unwrap_or_else(|| panic!("{name} has no stopped row"));
        assert!(
            stopped >= tr.rmdir_ns.0 - 200_000,
            "{name} stopped {} us before its rmdir",
            (tr.rmdir_ns.0 - stopped) / 1000
        );
        assert!(g.last_ns <= Some(stopped), "{name} has rows after its stopped row");
        stop_after.push(stopped - tr.rmdir_ns.1);
        // The stop comes an interval or so after the rmdir (printed below); this ceiling is for
        // a stop that never comes.
        assert!(
            stopped <= tr.rmdir_ns.1 + HANG.as_nanos() as i64,
            "{name} stopped {} ms after its rmdir",
            (stopped - tr.rmdir_ns.1) as f64 / 1e6
        );
    }
    let (charged, used): (i64, i64) =
        truth.keys().map(|k| (got[k].cpu_ns, truth[k].usage_ns)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let total = charged as f64 / used as f64;
    let uncharged: i64 = truth.values().map(|t| t.uncharged_ns).sum();
    // Alone: 0.999-1.006. In one full CI run, after the RDT machine's tests: 0.9855 (40
    // pinned cgroups each about 1 ms short), not explained yet. Above, as for each one: the
    // interrupts and steal cpu-clock counts and cpu.stat does not (an unpinned run here read
    // 1.0716 of cpu.stat without them in the bound).
    assert!(
        total >= 0.98 && charged <= used * 105 / 100 + uncharged,
        "all of them: {charged} of {used} ns ({total:.4}; {uncharged} ns of interrupts and steal while they ran)"
    );
    let idle: i64 = got.iter().filter(|(k, _)| k.starts_with("idle")).map(|(_, g)| g.cpu_ns).sum();
    assert!(idle < 5_000_000, "the idle sibling gained {idle} ns");
    ratios.sort_by(f64::total_cmp);
    stop_after.sort_unstable();
    println!(
        "{n} x {busy_ms} ms{}: CPU time charged / cpu.stat min {:.3} median {:.3} max {:.3}, all {total:.4} (interrupts and steal meanwhile: {uncharged} ns); stopped row after rmdir: median {:.2} ms, max {:.2} ms; idle sibling {idle} ns",
        if pinned { " (pinned)" } else { "" },
        ratios[0],
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1],
        stop_after[stop_after.len() / 2] as f64 / 1e6,
        stop_after[stop_after.len() - 1] as f64 / 1e6
    );
    drop(sb);
}

#[test]
fn forty_containers_of_70_ms_are_charged_exactly() {
    short_lived(40, 70, true);
}

#[test]
fn a_hundred_containers_of_70_ms_are_charged_exactly() {
    short_lived(100, 70, true);
}

#[test]
fn forty_unpinned_containers_of_70_ms_are_charged_to_a_few_percent() {
    short_lived(40, 70, false);
}
