//! The BPF attribution for real, as root: test cgroups with a busy and an idle process, one
//! created after start, 1 ms slots. Counts cycles where the host has a hardware PMU and
//! software cpu-clock (ns) where it does not (our VMs), saying which.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_bpf::{Attribution, IDLE};
use cachescope_cgroups::cpu_usage_usec;
use cachescope_cgroups::sandbox::Sandbox;
use cachescope_perf::counter::{CounterGroup, Target};
use cachescope_perf::Encoded;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn setup(tag: &str) -> Option<Sandbox> {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        println!("note: no kernel BTF; the program needs none (no CO-RE), continuing");
    }
    match Sandbox::for_host(&format!("cachescope-bpftest-{tag}")) {
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

/// Sizing of the slot map: a handful of cgroups, drained every ~20 slots.
const CAP_CGROUPS: usize = 64;
const CAP_DRAIN: u32 = 32;

fn cpus() -> Vec<usize> {
    cachescope_platform::Topology::read(std::path::Path::new("/sys"))
        .unwrap()
        .online_cpus()
        .map(|c| c as usize)
        .collect()
}

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(args[0]);
    c.args(&args[1..]);
    c
}

/// One at a time: each test's busy loops would take the other's CPU time.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn attributes_busy_idle_and_late_cgroups_per_slot() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = setup("attr") else { return };
    let (ev, unit) = event();
    let cpus = cpus();
    let mut attr = match Attribution::start(
        &[ev],
        &cpus,
        Duration::from_millis(1),
        cachescope_bpf::capacity_for(CAP_CGROUPS, CAP_DRAIN),
    ) {
        Ok(a) => a,
        Err(e) => panic!("BPF should load on this host (root, BPF available): {e}"),
    };
    let busy = sb.add("busy").unwrap();
    let idle = sb.add("idle").unwrap();
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let (busy_id, idle_id) = (ino(&busy), ino(&idle));
    println!("ticks: {}", attr.tick_mode());
    attr.follow(busy_id).unwrap();
    attr.follow(idle_id).unwrap();
    // Per-CPU totals by an independent perf count, to check that nothing is lost or doubled.
    let mut per_cpu: Vec<CounterGroup> =
        cpus.iter().map(|&c| CounterGroup::open(&Target::Cpu(c), &[ev]).unwrap()).collect();
    let before: Vec<u64> = per_cpu.iter_mut().map(|g| g.read().unwrap().raw[0]).collect();
    let _ = attr.drain_all().unwrap(); // forget what came before the counters above
    let base_totals = attr.cpu_totals().to_vec();
    sb.spawn("busy", cmd(&["sh", "-c", "while :; do :; done"])).unwrap();
    sb.spawn("idle", cmd(&["sleep", "60"])).unwrap();
    let u0 = cpu_usage_usec(&busy).unwrap();
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let mut late_id = 0;
    while t0.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(20));
        rows.extend(attr.drain().unwrap());
        if late_id == 0 && t0.elapsed() > Duration::from_millis(500) {
            let late = sb.add("late").unwrap();
            late_id = ino(&late);
            attr.follow(late_id).unwrap();
            sb.spawn("late", cmd(&["sh", "-c", "while :; do :; done"])).unwrap();
        }
    }
    let u1 = cpu_usage_usec(&busy).unwrap();
    rows.extend(attr.drain_all().unwrap());
    let after: Vec<u64> = per_cpu.iter_mut().map(|g| g.read().unwrap().raw[0]).collect();
    let mut by_cg: BTreeMap<u64, u64> = BTreeMap::new();
    let mut slots = std::collections::BTreeSet::new();
    for r in &rows {
        *by_cg.entry(r.cgroup_id).or_default() += r.values[0];
        slots.insert(r.slot);
    }
    let g = |id| by_cg.get(&id).copied().unwrap_or(0);
    let kernel = (u1 - u0) * 1000;
    println!(
        "{} slots of 1 ms; busy {} {unit} (cpu.stat {kernel} ns), idle {}, late {}, idle task {}; stats {:?}",
        slots.len(),
        g(busy_id),
        g(idle_id),
        g(late_id),
        g(IDLE),
        attr.stats().unwrap()
    );
    assert!(slots.len() >= 900, "1 ms slots over ~1 s: {}", slots.len());
    assert!(g(busy_id) > 0 && g(late_id) > 0, "busy and late cgroups charged");
    assert!(g(idle_id) * 100 < g(busy_id), "idle cgroup about zero");
    if unit == "cpu-clock ns" {
        assert!(g(busy_id) as f64 >= 0.9 * kernel as f64, "BPF {} < 90% of cpu.stat {kernel}", g(busy_id));
    }
    // Per CPU: everything charged (cgroups and idle) equals the CPU's own count within 1 %.
    for (i, &cpu) in cpus.iter().enumerate() {
        let charged = attr.cpu_totals()[cpu] - base_totals[cpu];
        let total = after[i] - before[i];
        let err = (charged as f64 - total as f64).abs() / total as f64;
        println!("CPU {cpu}: charged {charged}, counted {total} ({:.3} %)", err * 100.0);
        assert!(err < 0.01, "CPU {cpu}: charged {charged} vs {total}");
    }
    let st = attr.stats().unwrap();
    assert_eq!(st.lost_charges, 0);
    assert_eq!(st.read_failures, 0);
}

/// Ticks follow the followed: a busy task in a cgroup no one follows gets no 1 ms timer; once
/// followed while it runs (no switch needed) it is split into 1 ms slots; unfollowed, the
/// timer stops again. Its counts are charged all along (at switches).
#[test]
fn ticks_run_only_where_followed_tasks_run() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = setup("ticks") else { return };
    let (ev, _) = event();
    let cpus = cpus();
    let attr = Attribution::start(&[ev], &cpus, Duration::from_millis(1), cachescope_bpf::capacity_for(64, 600));
    let mut attr = attr.unwrap();
    if !matches!(attr.tick_mode(), cachescope_bpf::TickMode::Followed { .. }) {
        cachescope_testkit::skip(format!("this kernel refuses BPF timers: {}", attr.tick_mode()));
        return;
    }
    let busy = sb.add("spin").unwrap();
    let id = std::fs::metadata(&busy).unwrap().ino();
    sb.spawn("spin", cmd(&["sh", "-c", "while :; do :; done"])).unwrap();
    let runs = |a: &Attribution| a.stats().unwrap().timer_runs;
    // Timer runs, slots charged, and the ms the task ran (cpu.stat): on a loaded host it gets
    // less than the whole 600 ms, and a timer runs only while it is on the CPU.
    let phase = |a: &mut Attribution| {
        let (r0, u0) = (runs(a), cpu_usage_usec(&busy).unwrap());
        let _ = a.drain_all().unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let rows = a.drain_all().unwrap();
        let slots = rows.iter().filter(|r| r.cgroup_id == id).count();
        (runs(a) - r0, slots, (cpu_usage_usec(&busy).unwrap() - u0) / 1000)
    };
    let (unfollowed_runs, unfollowed_slots, _) = phase(&mut attr);
    attr.follow(id).unwrap();
    let (followed_runs, followed_slots, ran_ms) = phase(&mut attr);
    attr.unfollow(id).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let (after_runs, _, _) = phase(&mut attr);
    println!(
        "{}; timer runs in 600 ms: unfollowed {unfollowed_runs} ({unfollowed_slots} slots charged), \
         followed {followed_runs} ({followed_slots} slots, {ran_ms} ms on a CPU), after unfollow {after_runs}",
        attr.tick_mode()
    );
    assert!(unfollowed_runs <= 10, "timers ran {unfollowed_runs} times with nothing followed");
    assert!(ran_ms >= 200, "the busy task ran only {ran_ms} ms of 600: the host is too loaded to tell");
    assert!(
        followed_runs * 100 >= ran_ms * 85,
        "followed while running: {followed_runs} timer runs in {ran_ms} ms on a CPU"
    );
    assert!(
        followed_slots as u64 * 100 >= ran_ms * 75,
        "followed: {followed_slots} slots of 1 ms charged in {ran_ms} ms on a CPU"
    );
    assert!(after_runs <= 10, "timers ran {after_runs} times after unfollow");
}
