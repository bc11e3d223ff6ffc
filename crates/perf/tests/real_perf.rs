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
    sb.spawn("busy", busy()).unwrap();
    sb.spawn("idle", idle()).unwrap();
    let u0 = cpu_usage_usec(&busy_dir).unwrap();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    // A cgroup created after start is picked up from then on.
    let late_dir = sb.add("late").unwrap();
    col.add("late", &late_dir).unwrap();
    sb.spawn("late", busy()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let d = col.sample().unwrap();
    let u1 = cpu_usage_usec(&busy_dir).unwrap();
    let wall = t0.elapsed();
    let get = |id: &str| d.iter().filter(|x| x.id == id).map(|x| x.values[0]).sum::<u64>();
    let (b, i, l) = (get("busy"), get("idle"), get("late"));
    println!("over {wall:?}: busy {b} {unit}, idle {i}, late {l}; kernel usage_usec of busy {}", u1 - u0);
    assert!(b > 0 && l > 0, "busy and late counted");
    assert!(i * 100 < b, "idle about zero: {i} vs {b}");
    if unit == "cpu-clock ns" {
        // Independent count: the kernel's CPU accounting of the same cgroup over the window.
        let kernel_ns = (u1 - u0) * 1000;
        assert!(b as f64 >= 0.9 * kernel_ns as f64, "perf {b} ns < 90% of cpu.stat {kernel_ns} ns");
        assert!((b as f64) <= 1.1 * kernel_ns as f64 + 5e6, "perf {b} ns >> cpu.stat {kernel_ns} ns");
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
    while t.elapsed() < Duration::from_millis(50) {
        x = x.wrapping_add(std::hint::black_box(1));
    }
    let cpu = cachescope_platform::clock::thread_cpu().saturating_sub(cpu0).as_nanos() as u64;
    let b = g.read().unwrap();
    let d = b.delta_since(&a);
    println!("50 ms of spinning ({cpu} ns on a CPU): {} {unit} (x={x})", d[0].value);
    // The thread ran `cpu` ns of the 50 ms (less on a loaded machine): cpu-clock counts that.
    // Both members count the same thing over the same window (clocks are sampled one after
    // the other in a group read, so allow 1 %).
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
    std::thread::sleep(Duration::from_millis(400));
    let d = col.sample().unwrap();
    let on = |cpu: usize| d.iter().filter(|x| x.domain == cpu as u32).map(|x| x.values[0]).sum::<u64>();
    let (here, elsewhere) = (on(last), cpus.iter().filter(|&&c| c != last).map(|&c| on(c)).sum::<u64>());
    println!("pinned to CPU {last}: {here} there, {elsewhere} on the others");
    assert!(here > 0 && elsewhere * 20 < here, "{d:?}");
    assert_eq!(d.iter().filter(|x| x.id == "pinned").count(), cpus.len(), "one delta per group");
}
