//! Perf cgroup events for real, as root, on cgroup v2: a busy process in a test cgroup, an
//! idle one, one created after start. Counts cycles where the host has a hardware PMU and
//! software cpu-clock (ns) where it does not (our VMs), saying which; checked against the
//! kernel's own CPU accounting of the cgroup (`cpu.stat` usage_usec).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_cgroups::cpu_usage_usec;
use cachescope_cgroups::sandbox::Sandbox;
use cachescope_perf::cgroup::CgroupCollector;
use cachescope_perf::counter::{CounterGroup, Target};
use cachescope_perf::Encoded;
use std::process::Command;
use std::time::{Duration, Instant};

fn sandbox(tag: &str) -> Option<Sandbox> {
    match Sandbox::for_host(&format!("cachescope-perftest-{tag}")) {
        Ok(s) => Some(s),
        Err(why) => {
            cachescope_testkit::skip(why);
            None
        }
    }
}

fn event() -> (Encoded, &'static str) {
    let (ev, unit) = cachescope_perf::counter::cycles_or_cpu_clock();
    if unit != "cycles" {
        println!("note: no hardware PMU on this host; counting software cpu-clock (ns) instead");
    }
    (ev, unit)
}

fn busy() -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", "while :; do :; done"]);
    c
}

fn idle() -> Command {
    let mut c = Command::new("sleep");
    c.arg("60");
    c
}

/// irq + softirq + steal of every CPU so far, in ns, from /proc/stat: time the scheduler
/// charges to no task, which cpu-clock counts while a task is current and cpu.stat does not.
fn uncharged_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some("cpu")).unwrap();
    let f: Vec<u64> = line.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    (f[5] + f[6] + f[7]) * 1_000_000_000 / hz
}

/// Wait until the cgroup `dir` has used `ms` of CPU time since `from_usec` (its cpu.stat), so
/// that what is compared is a count of CPU time whatever the host's load gave it; a ceiling
/// only a hang reaches. The wall time it took.
fn wait_cpu(dir: &std::path::Path, from_usec: u64, ms: u64) -> Duration {
    let t0 = Instant::now();
    while cpu_usage_usec(dir).unwrap() < from_usec + ms * 1000 {
        assert!(t0.elapsed() < Duration::from_secs(60), "{}: not {ms} ms of CPU in 60 s", dir.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    t0.elapsed()
}

fn cpus() -> Vec<usize> {
    cachescope_platform::Topology::read(std::path::Path::new("/sys"))
        .unwrap()
        .online_cpus()
        .map(|c| c as usize)
        .collect()
}

#[test]
fn busy_idle_and_late_cgroups() {
    let Some(mut sb) = sandbox("cg") else { return };
    let (ev, unit) = event();
    let busy_dir = sb.add("busy").unwrap();
    let idle_dir = sb.add("idle").unwrap();
    let mut col = CgroupCollector::new(vec![ev], cpus());
    col.add("busy", &busy_dir).unwrap();
    col.add("idle", &idle_dir).unwrap();
    // The cgroup is empty until the spawn: from here cpu.stat counts what perf counts.
    let (u0, irq0) = (cpu_usage_usec(&busy_dir).unwrap(), uncharged_ns());
    sb.spawn("busy", busy()).unwrap();
    sb.spawn("idle", idle()).unwrap();
    let t0 = Instant::now();
    // The busy loop's CPU time, not a share of wall time a loaded host may not give it.
    wait_cpu(&busy_dir, u0, 200);
    // A cgroup created after start is picked up from then on.
    let late_dir = sb.add("late").unwrap();
    col.add("late", &late_dir).unwrap();
    sb.spawn("late", busy()).unwrap();
    wait_cpu(&late_dir, 0, 50);
    // cpu.stat read just inside perf's window and just outside it.
    let inside = cpu_usage_usec(&busy_dir).unwrap();
    let d = col.sample().unwrap();
    let (u1, irq1) = (cpu_usage_usec(&busy_dir).unwrap(), uncharged_ns());
    let wall = t0.elapsed();
    let get = |id: &str| d.iter().filter(|x| x.id == id).map(|x| x.values[0]).sum::<u64>();
    let (b, i, l) = (get("busy"), get("idle"), get("late"));
    println!(
        "over {wall:?}: busy {b} {unit}, idle {i}, late {l}; kernel usage_usec of busy {}..{}, irq+softirq+steal {} us",
        inside - u0,
        u1 - u0,
        (irq1 - irq0) / 1000
    );
    assert!(b > 0 && l > 0, "busy and late counted");
    assert!(i * 100 < b, "idle about zero: {i} vs {b}");
    if unit == "cpu-clock ns" {
        // Independent count: the kernel's CPU accounting of the same cgroup over the window,
        // less the interrupt and stolen time cpu-clock also counts (on any CPU: it moves).
        let (least, most) = ((inside - u0) * 1000, (u1 - u0) * 1000);
        assert!(b as f64 >= 0.9 * least as f64, "perf {b} ns < 90% of cpu.stat {least} ns");
        assert!(
            (b as f64) <= 1.1 * most as f64 + 5e6 + (irq1 - irq0) as f64,
            "perf {b} ns >> cpu.stat {most} ns (and {} ns of interrupts and steal)",
            irq1 - irq0
        );
    }
    col.remove("late");
    assert_eq!(col.len(), 2);
}

#[test]
fn per_task_group_counts_this_thread() {
    let (ev, unit) = event();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut g = match CounterGroup::open(&Target::Task(tid), &[ev, ev]) {
        Ok(g) => g,
        Err(e) => {
            cachescope_testkit::skip(format!("perf_event_open for a task failed: {e}"));
            return;
        }
    };
    let a = g.read().unwrap();
    let cpu0 = cachescope_platform::clock::thread_cpu();
    let t = Instant::now();
    let mut x = 0u64;
    // 50 ms on a CPU, however long a loaded host takes to give them.
    while cachescope_platform::clock::thread_cpu().saturating_sub(cpu0) < Duration::from_millis(50) {
        x = x.wrapping_add(std::hint::black_box(1));
    }
    let cpu = cachescope_platform::clock::thread_cpu().saturating_sub(cpu0).as_nanos() as u64;
    let b = g.read().unwrap();
    let d = b.delta_since(&a);
    println!("spinning for {:?} ({cpu} ns on a CPU): {} {unit} (x={x})", t.elapsed(), d[0].value);
    // The thread ran `cpu` ns: cpu-clock counts that. Both members count the same thing over
    // the same window (clocks are sampled one after the other in a group read, so allow 1 %).
    assert!(d[0].value as f64 > cpu as f64 * 0.9 || unit == "cycles" && d[0].value > 0, "{d:?} of {cpu} ns");
    assert!((d[0].value as f64 - d[1].value as f64).abs() <= 0.01 * d[0].value as f64, "{d:?}");
    assert!(b.enabled_ns >= a.enabled_ns && b.running_ns <= b.enabled_ns);
}

#[test]
fn per_cpu_group_counts() {
    let (ev, unit) = event();
    let mut g = CounterGroup::open(&Target::Cpu(0), &[ev]).unwrap();
    let a = g.read().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let b = g.read().unwrap();
    println!("{a:?} {b:?} {unit}");
    assert!(b.raw[0] > a.raw[0], "{a:?} {b:?}");
    assert!(b.enabled_ns > a.enabled_ns);
}

/// Counts split by CPU group: a busy process pinned to the last CPU is counted in that CPU's
/// group only (here each CPU is its own group, standing in for L3 domains).
#[test]
fn counts_split_by_cpu_group() {
    let cpus = cpus();
    if cpus.len() < 2 {
        return cachescope_testkit::skip("one CPU, nothing to split");
    }
    let Some(mut sb) = sandbox("split") else { return };
    let (ev, _) = event();
    let dir = sb.add("pinned").unwrap();
    let last = *cpus.last().unwrap();
    let mut col = CgroupCollector::new(vec![ev], cpus.clone());
    col.group_cpus((0..=last as u32).collect());
    col.add("pinned", &dir).unwrap();
    let mut pinned = Command::new("taskset");
    pinned.args(["-c", &last.to_string(), "sh", "-c", "while :; do :; done"]);
    sb.spawn("pinned", pinned).unwrap();
    // What runs elsewhere is taskset's start: compared with 100 ms of CPU the loop got, not
    // with what 400 ms of a loaded host's wall time gave it.
    let took = wait_cpu(&dir, 0, 100);
    let d = col.sample().unwrap();
    let on = |cpu: usize| d.iter().filter(|x| x.domain == cpu as u32).map(|x| x.values[0]).sum::<u64>();
    let (here, elsewhere) = (on(last), cpus.iter().filter(|&&c| c != last).map(|&c| on(c)).sum::<u64>());
    println!("pinned to CPU {last}: {here} there, {elsewhere} on the others (100 ms of CPU in {took:?})");
    assert!(here > 0 && elsewhere * 20 < here, "{d:?}");
    assert_eq!(d.iter().filter(|x| x.id == "pinned").count(), cpus.len(), "one delta per group");
}
