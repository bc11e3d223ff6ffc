//! What the kernel module costs, run as root where it is loaded (scripts/bench-kmod.sh runs
//! it in a QEMU guest, where every figure is TCG's: compare them with each other only):
//! 1. per context switch: two processes pinned to the last CPU (not the sampling timer's,
//!    the first of its domain) ping-pong through pipes, the module
//!    closed (no probes), open with both in one watched cgroup (lookup, no PQR_ASSOC write),
//!    and open with each in its own (a write at every switch); medians of interleaved runs;
//! 2. the sampling timer's cost per tick against how many RMIDs ran in the interval: 0 to 16
//!    containers each running 0.1 ms of every 0.5 ms on any CPU (the module's own tick counters);
//! 3. the user-space collector at the module's interval for 10 such containers: the engine
//!    draining every 50 ms into a sink that drops rows, its CPU as a share of one core.
//!
//! `kmod_bench` (the module loaded, emu_rmids >= 18 when emulating); `kmod_bench unloaded`:
//! the ping-pong of 1. alone, run with the module not loaded (its probes stay registered from
//! the first open until unload, so "closed" after the first round includes their early return).

#![allow(clippy::unwrap_used)] // a benchmark: a panic is the report

mod common;

use cachescope_engine::sink::{Flow, OutputError, Sink};
use cachescope_engine::{Container, ContainerMeta, Row};
use cachescope_kmod::abi::kind;
use cachescope_kmod::{Device, KmodBackend};
use common::Containers;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROOT: &str = "/sys/fs/cgroup/kbench";

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET and sched_setaffinity act on it and this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn join(cgroup: &str, pid: u32) {
    std::fs::write(format!("{ROOT}/{cgroup}/cgroup.procs"), pid.to_string()).unwrap();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The highest online CPU; not from the affinity mask, which pinning narrows.
fn last_cpu() -> usize {
    // SAFETY: sysconf only reads a system value.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    (n.max(1) - 1) as usize
}

/// The child's side: echo bytes until EOF.
fn pong() {
    pin(last_cpu());
    let (mut i, mut o) = (std::io::stdin().lock(), std::io::stdout().lock());
    let mut b = [0u8; 1];
    while i.read_exact(&mut b).is_ok() {
        if o.write_all(&b).and_then(|_| o.flush()).is_err() {
            return;
        }
    }
}

/// Spin 0.1 ms of every 0.5 ms, forever, on any CPU (the parent is pinned).
fn spin() {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET and sched_setaffinity act on it and this process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..=last_cpu() {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
    loop {
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(100) {
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_micros(400));
    }
}

fn me() -> PathBuf {
    std::env::current_exe().unwrap()
}

/// ns per round trip (two context switches), parent in cgroup `a`, child in `b`.
fn ping_pong(a: &str, b: &str, rounds: usize) -> f64 {
    join(a, std::process::id());
    let mut child = Command::new(me()).arg("pong").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    join(b, child.id());
    let (mut w, mut r) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let mut buf = [0u8; 1];
    for _ in 0..100 {
        w.write_all(&buf).unwrap();
        r.read_exact(&mut buf).unwrap();
    }
    let t = Instant::now();
    for _ in 0..rounds {
        w.write_all(&buf).unwrap();
        r.read_exact(&mut buf).unwrap();
    }
    let ns = t.elapsed().as_nanos() as f64 / rounds as f64;
    drop(w);
    child.wait().unwrap();
    ns
}

struct Drop;
impl Sink for Drop {
    fn rows(&mut self, _: &[Row]) -> Flow {
        Flow::Continue
    }
    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        Ok(Vec::new())
    }
}

/// The ping-pong with no module: the baseline of "module closed".
fn unloaded() {
    std::fs::create_dir_all(format!("{ROOT}/a")).unwrap();
    pin(last_cpu());
    let rounds = 20_000;
    let runs: Vec<f64> = (0..5).map(|_| ping_pong("a", "a", rounds)).collect();
    println!("  module not loaded               {:8.0} ns per round trip (median of 5 x {rounds})", median(runs));
    std::fs::write("/sys/fs/cgroup/cgroup.procs", std::process::id().to_string()).unwrap();
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("pong") => return pong(),
        Some("spin") => return spin(),
        Some("unloaded") => return unloaded(),
        _ => {}
    }
    let dev_path = Path::new(cachescope_kmod::device::DEFAULT_PATH);
    for c in ["a", "b"].iter().map(|s| s.to_string()).chain((0..16).map(|i| format!("s{i}"))) {
        std::fs::create_dir_all(format!("{ROOT}/{c}")).unwrap();
    }
    pin(last_cpu());

    // 1. Per context switch.
    let rounds = 20_000;
    let (mut off, mut same, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        off.push(ping_pong("a", "a", rounds));
        let dev = Device::open(dev_path).unwrap();
        dev.set_rules(&["kbench/*".into()]).unwrap();
        same.push(ping_pong("a", "a", rounds));
        diff.push(ping_pong("a", "b", rounds));
        let s = dev.stats().unwrap();
        drop(dev);
        assert!(s.pqr_writes > rounds as u64, "each switch between a and b writes PQR_ASSOC ({})", s.pqr_writes);
    }
    let (off, same, diff) = (median(off), median(same), median(diff));
    println!(
        "per context switch (ping-pong on CPU {}, medians of 5 x {rounds} round trips, 2 switches each):",
        last_cpu()
    );
    println!("  module closed                   {:8.0} ns per round trip", off);
    println!("  open, one watched cgroup        {:8.0} ns  (+{:.0} ns per switch: lookup)", same, (same - off) / 2.0);
    println!(
        "  open, two watched cgroups       {:8.0} ns  (+{:.0} ns per switch: lookup + PQR_ASSOC write)",
        diff,
        (diff - off) / 2.0
    );
    std::fs::write("/sys/fs/cgroup/cgroup.procs", std::process::id().to_string()).unwrap();

    // 2. The sampling tick against active RMIDs.
    let mut dev = Device::open(dev_path).unwrap();
    dev.set_rules(&["kbench/*".into()]).unwrap();
    let info = dev.info().unwrap();
    println!("sampling tick ({} domains, every {} us):", info.nr_domains, info.interval_ns / 1000);
    let mut spinners: Vec<Child> = Vec::new();
    let mut records = Vec::new();
    for k in [0usize, 1, 2, 4, 8, 16] {
        while spinners.len() < k {
            let c = Command::new(me()).arg("spin").spawn().unwrap();
            join(&format!("s{}", spinners.len()), c.id());
            spinners.push(c);
        }
        std::thread::sleep(Duration::from_millis(300));
        dev.drain(&mut records).unwrap();
        records.clear();
        // Median of 10 windows: under TCG a window can hold a translation stall of milliseconds.
        let (mut per_tick, mut reads) = (Vec::new(), Vec::new());
        for _ in 0..10 {
            let s0 = dev.stats().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            dev.drain(&mut records).unwrap();
            let s1 = dev.stats().unwrap();
            let ticks = (s1.ticks - s0.ticks).max(1) as f64;
            reads.push(records.iter().filter(|r| r.kind == kind::SAMPLE).count() as f64 / ticks);
            per_tick.push((s1.tick_ns - s0.tick_ns) as f64 / ticks / 1e3);
            records.clear();
        }
        println!(
            "  {k:2} busy containers: {:5.1} RMIDs read per domain tick, {:6.2} us per tick (median of 10 x 0.2 s; max so far {:.1} us)",
            median(reads),
            median(per_tick),
            dev.stats().unwrap().tick_ns_max as f64 / 1e3
        );
    }
    drop(dev);

    // 3. The user-space collector, 10 busy containers.
    for c in spinners.drain(10..) {
        let mut c = c;
        c.kill().unwrap();
        c.wait().unwrap();
    }
    let dev = Device::open(dev_path).unwrap();
    let backend = KmodBackend::new(Box::new(dev), &["kbench/*".into()], "bench".into()).unwrap();
    let containers = (0..10)
        .map(|i| {
            let dir = PathBuf::from(format!("{ROOT}/s{i}"));
            Container {
                meta: ContainerMeta::named(&format!("s{i}")),
                cgroup_id: Some(std::fs::metadata(&dir).unwrap().ino()),
                dir: Some(dir),
                cpus: None,
                seen_at: None,
            }
        })
        .collect();
    let parts = cachescope_engine::Parts {
        backend: Box::new(backend),
        containers: Box::new(Containers(containers)),
        pmu: None,
        world: None,
        sinks: vec![Box::new(Drop)],
    };
    let opts = cachescope_engine::Options {
        interval: Duration::from_nanos(info.interval_ns),
        batch: Duration::from_millis(50),
        duration: Some(Duration::from_secs(5)),
        virtual_time: false,
        status_every: Duration::from_secs(1),
        every_interval: false,
        stop: Arc::new(AtomicBool::new(false)),
    };
    let (c0, w0) = (cachescope_platform::clock::process_cpu(), Instant::now());
    let summary = cachescope_engine::run(parts, &opts).unwrap();
    let share = (cachescope_platform::clock::process_cpu() - c0).as_secs_f64() / w0.elapsed().as_secs_f64();
    println!(
        "collector: 10 busy containers, drained every 50 ms for 5 s: {:.2} % of a core ({} wake-ups)",
        share * 100.0,
        summary.wakes
    );
    for mut c in spinners {
        c.kill().unwrap();
        c.wait().unwrap();
    }
}
