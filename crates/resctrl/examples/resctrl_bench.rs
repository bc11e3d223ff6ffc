//! Cost of resctrl operations as cachescope performs them: a counter read with pread(2) on a
//! file kept open, against open+read+close of the same file and against pread of a tmpfs file
//! (the syscall floor), plus group creation/removal and a tasks write.
//!
//! `cargo run --release -p cachescope-resctrl --example resctrl_bench [-- --root /sys/fs/resctrl]`
//! Without --root it mounts the emulated resctrl filesystem (FUSE, root needed); with it, it
//! creates one group `cachescope-bench` on that mount and removes it at the end.

#![allow(clippy::unwrap_used)] // a benchmark: a panic is the report

use cachescope_emu::{EmuPlatform, Scenario};
use cachescope_emu_resctrl::{Mounted, Options, TaskLookup};
use cachescope_resctrl::{GroupRef, Resctrl};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const SCENARIO: &str = include_str!("../../../testdata/scenarios/thrash-then-stream.toml");

const REPEATS: usize = 7;

/// Median over REPEATS runs of `n` calls of `f`, in ns per call.
fn median_ns(n: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..REPEATS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[REPEATS / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let root = args.iter().position(|a| a == "--root").and_then(|i| args.get(i + 1)).cloned();
    let _mount;
    let (rc, what) = match root {
        Some(r) => {
            _mount = None;
            (Resctrl::at(r.clone()), format!("resctrl at {r}"))
        }
        None => {
            let sc = Scenario::parse(SCENARIO, Path::new("bench.toml")).unwrap();
            let p = Arc::new(EmuPlatform::new(&sc).unwrap());
            let m = Mounted::start(p, Options::default(), Box::new(|_| TaskLookup::Exists(Some("thrash".into()))))
                .unwrap_or_else(|e| {
                    eprintln!("resctrl_bench: {e}");
                    std::process::exit(3)
                });
            let w = format!("emulated resctrl over FUSE at {}", m.root().display());
            let rc = Resctrl::at(m.root());
            _mount = Some(m);
            (rc, w)
        }
    };
    let domains = rc.domains().unwrap();
    let events = rc.info().unwrap().events();
    let ops = 2000;
    let create = median_ns(20, || {
        let g = rc.create_group("", "bench-churn").unwrap();
        rc.remove_group(&g).unwrap();
    });
    let g: GroupRef = rc.create_group("", "bench").unwrap();
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    let tasks = median_ns(200, || {
        rc.assign_tasks(&g, &mut || Ok(vec![me])).unwrap();
    });
    let mut reader = rc.reader(&g, &domains, &events).unwrap();
    let per_group = reader.len();
    let mut out = Vec::new();
    let pread = median_ns(ops / per_group.max(1), || reader.read_all(&mut out).unwrap()) / per_group as f64;
    let file = rc.group_dir(&g).join("mon_data").join(format!("mon_L3_{:02}", domains[0].id)).join("llc_occupancy");
    let mut buf = [0u8; 32];
    let reopen = median_ns(ops, || {
        let mut f = File::open(&file).unwrap();
        let _ = f.read(&mut buf).unwrap();
    });
    // A file whose contents need no computation: what the transport alone costs.
    let info = File::open(rc.root().join("info/L3_MON/num_rmids")).unwrap();
    let transport = median_ns(ops, || {
        let _ = info.read_at(&mut buf, 0).unwrap();
    });
    let shm = tempfile::NamedTempFile::new_in("/dev/shm").or_else(|_| tempfile::NamedTempFile::new()).unwrap();
    std::fs::write(shm.path(), "123456\n").unwrap();
    let f = File::open(shm.path()).unwrap();
    let floor = median_ns(ops * 10, || {
        let _ = f.read_at(&mut buf, 0).unwrap();
    });
    // Back to the default group, then remove ours.
    let _ = std::fs::write(rc.root().join("tasks"), me.to_string());
    drop(reader);
    rc.remove_group(&g).unwrap();

    println!(
        "resctrl_bench: {what}; {} domains x {} events = {per_group} counters per group",
        domains.len(),
        events.len()
    );
    println!("medians of {REPEATS} runs, ns per operation:");
    println!("  counter read, pread on an open file      {pread:>10.0}  ({:.1}x the tmpfs pread floor)", pread / floor);
    println!("  counter read, open+read+close           {reopen:>10.0}  ({:.1}x pread)", reopen / pread);
    println!("  pread of a constant file on this mount   {transport:>10.0}  (the filesystem's own transport cost)");
    println!("  tmpfs pread (syscall floor)             {floor:>10.0}");
    println!("  tasks: write one tid + re-read list     {tasks:>10.0}");
    println!("  group mkdir + rmdir                     {create:>10.0}");
    let per_tick = pread * per_group as f64;
    println!(
        "one group per tick: {:.1} us; at 1 ms, reading every counter fits {:.0} groups per core",
        per_tick / 1e3,
        1e6 / per_tick
    );
}
