//! What the BPF attribution costs, as root:
//! 1. the collector's own CPU (user + system seconds per wall second, getrusage) at 1 ms slots
//!    with 1, 10 and 100 test cgroups running small busy/sleep loops, draining every 1 ms and
//!    every 10 ms;
//! 2. the added cost per context switch: two threads pinned to one CPU ping-pong through pipes,
//!    with and without the program attached (medians, interleaved runs).
//!
//! `cargo run --release -p cachescope-bpf --example bpf_bench`

#![allow(clippy::unwrap_used)] // a benchmark: a panic is the report

use cachescope_bpf::Attribution;
use cachescope_cgroups::sandbox::Sandbox;
use cachescope_cgroups::Hierarchy;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET and sched_setaffinity act on it and this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// ns per round trip (two context switches) of a ping-pong on CPU 0.
fn ping_pong(rounds: usize) -> f64 {
    let (mut a, mut b) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        pin(0);
        let mut buf = [0u8; 1];
        for _ in 0..rounds {
            b.read_exact(&mut buf).unwrap();
            b.write_all(&buf).unwrap();
        }
    });
    pin(0);
    let mut buf = [0u8; 1];
    let start = Instant::now();
    for _ in 0..rounds {
        a.write_all(&buf).unwrap();
        a.read_exact(&mut buf).unwrap();
    }
    let ns = start.elapsed().as_nanos() as f64 / rounds as f64;
    t.join().unwrap();
    ns
}

/// Sizing of the slot map for the largest run: 100 cgroups (plus the host's), drains every 10 slots.
const CAP_CGROUPS: usize = 128;
const CAP_DRAIN: u32 = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("bpf_bench: needs root (BPF, cgroups)");
        std::process::exit(3);
    }
    let cpus: Vec<usize> = cachescope_platform::Topology::read(std::path::Path::new("/sys"))
        .unwrap()
        .online_cpus()
        .map(|c| c as usize)
        .collect();
    let (ev, unit) = cachescope_perf::counter::cycles_or_cpu_clock();
    // The program attached for one measurement (1 ms slots, the map sized for the largest run).
    let attach = || {
        Attribution::start(&[ev], &cpus, Duration::from_millis(1), cachescope_bpf::capacity_for(CAP_CGROUPS, CAP_DRAIN))
            .unwrap()
    };
    println!("bpf_bench: {} CPUs, event {unit}, 1 ms slots", cpus.len());

    // 2. Context-switch cost, interleaved: without the program, with it charging this
    // process's cgroup apart, and with that cgroup quiet (what the collector makes of a
    // cgroup no container claims).
    let rounds = 20_000;
    let own = {
        use std::os::unix::fs::MetadataExt;
        let h = Hierarchy::find(Path::new("/proc")).unwrap();
        let rel = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let rel = rel.lines().find_map(|l| l.strip_prefix("0::")).unwrap().trim_start_matches('/').to_string();
        std::fs::metadata(h.root.join(rel)).unwrap().ino()
    };
    let (mut without, mut with, mut quiet) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        without.push(ping_pong(rounds));
        let mut a = attach();
        with.push(ping_pong(rounds));
        a.quiet(own).unwrap();
        quiet.push(ping_pong(rounds));
        let _ = a.drain_all().unwrap();
    }
    let (w0, w1, w2) = (median(without), median(with), median(quiet));
    println!(
        "context switch: ping-pong round trip {w0:.0} ns without, {w1:.0} ns with the program: +{:.0} ns per switch ({:.1} %); \
         its cgroup quiet: {w2:.0} ns, +{:.0} ns per switch",
        (w1 - w0) / 2.0,
        100.0 * (w1 - w0) / w0,
        (w2 - w0) / 2.0,
    );

    // What a drain costs by itself, and what waking every 1 ms costs with nothing to do.
    let mut a = attach();
    let t = Instant::now();
    for _ in 0..2000 {
        let _ = a.drain().unwrap();
    }
    let per_drain = t.elapsed().as_secs_f64() / 2000.0;
    drop(a);
    let (c0, t0) = (cachescope_platform::clock::process_cpu(), Instant::now());
    for i in 1..=2000u32 {
        if let Some(d) = (t0 + Duration::from_millis(1) * i).checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    let idle_wake = (cachescope_platform::clock::process_cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
    println!(
        "one drain (batched lookup-and-delete, back to back): {:.1} us; waking every 1 ms with no work: {:.2} % of a core",
        per_drain * 1e6,
        idle_wake * 100.0
    );

    // 1. Collector CPU with 1, 10, 100 cgroups of busy/sleep loops.
    let h = Hierarchy::find(Path::new("/proc")).unwrap();
    let baseline = 2.4;
    for n in [1usize, 10, 100] {
        let mut sb = Sandbox::create(&h, &format!("cachescope-bench-{}", std::process::id())).unwrap();
        for i in 0..n {
            let mut c = Command::new("sh");
            c.args(["-c", "while :; do i=0; while [ $i -lt 300 ]; do i=$((i+1)); done; sleep 0.005; done"]);
            sb.spawn(&format!("w{i}"), c).unwrap();
        }
        for drain_every in [Duration::from_millis(1), Duration::from_millis(10)] {
            let mut a = attach();
            let wall = Duration::from_secs(3);
            let (c0, t0) = (cachescope_platform::clock::process_cpu(), Instant::now());
            let (mut rows, mut slots) = (0usize, std::collections::BTreeSet::new());
            let mut tick = 0u32;
            while t0.elapsed() < wall {
                tick += 1;
                let due = t0 + drain_every * tick;
                if let Some(d) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                for r in a.drain().unwrap() {
                    rows += 1;
                    slots.insert(r.slot);
                }
            }
            let used = (cachescope_platform::clock::process_cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();
            let st = a.stats().unwrap();
            println!(
                "{n:>3} cgroups, drain every {drain_every:>4?}: collector {:.2} % of a core (the existing collector: {baseline} %, {:.1}x as much); {} slots, {:.0} rows/s, {} charges, {} lost",
                used * 100.0,
                baseline / (used * 100.0).max(1e-9),
                slots.len(),
                rows as f64 / wall.as_secs_f64(),
                st.charges,
                st.lost_charges
            );
        }
        drop(sb);
    }
}
