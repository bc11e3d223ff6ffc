//! What the kmod backend's user-space side costs at 1 ms for 10 containers in 2 L3 domains:
//! the engine (drain, decode, derive, release to a sink that drops rows) fed by a user-space
//! fake of the module that produces what the kernel would (20 records per millisecond),
//! drained every 100 ms as `--backend kmod` does (BATCH_MS=N to compare). Prints the
//! collector's CPU as a share of one core: the median of 5 runs of 3 s, the fake's own time
//! subtracted. Without the module's read() syscalls, which move 48-byte records in batches
//! of 4096.
//!
//! `cargo run --release -p cachescope-kmod --example collector_bench`

#![allow(clippy::unwrap_used)] // a benchmark: a panic is the report

mod common;

use cachescope_engine::sink::{Flow, OutputError, Sink};
use cachescope_engine::{Container, ContainerMeta, Row};
use cachescope_kmod::abi::{kind, Record};
use cachescope_kmod::fake::FakeKernel;
use cachescope_kmod::KmodBackend;
use common::Containers;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CONTAINERS: u64 = 10;
const DOMAINS: u16 = 2;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Drop(Arc<AtomicU64>);
impl Sink for Drop {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        self.0.fetch_add(rows.len() as u64, Ordering::Relaxed);
        Flow::Continue
    }
    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        Ok(Vec::new())
    }
}

/// (collector CPU share of a core, rows per second)
fn run(secs: u64, batch_ms: u64) -> (f64, f64) {
    let k = FakeKernel::new(&[0, 1], 64, 24, 65536);
    let fake_ns = Arc::new(AtomicU64::new(0));
    let spent = fake_ns.clone();
    let mut last_ms = monotonic_ns() / 1_000_000;
    let mut counter = 0u64;
    k.state().generator = Some(Box::new(move |q| {
        let t = Instant::now();
        let now_ms = monotonic_ns() / 1_000_000;
        for ms in last_ms + 1..=now_ms {
            counter += 1000;
            for c in 0..CONTAINERS {
                for d in 0..DOMAINS {
                    let kind = if ms == last_ms + 1 && counter == 1000 { kind::ATTACH } else { kind::SAMPLE };
                    q.push_back(Record {
                        time_ns: ms * 1_000_000,
                        cgroup_id: 100 + c,
                        occupancy: 40 + c,
                        mbm_total: counter % (1 << 24),
                        mbm_local: (counter / 2) % (1 << 24),
                        rmid: 1 + c as u32,
                        domain: d,
                        kind,
                        flags: 0,
                    });
                }
            }
        }
        last_ms = now_ms;
        spent.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }));
    let backend = KmodBackend::new(Box::new(k), &cachescope_kmod::rules(&[]), "bench".into()).unwrap();
    let containers = (0..CONTAINERS)
        .map(|c| Container {
            meta: ContainerMeta::named(&format!("c{c}")),
            cgroup_id: Some(100 + c),
            dir: Some(PathBuf::from(format!("/nonexistent/c{c}"))),
            cpus: None,
            seen_at: None,
        })
        .collect();
    let rows = Arc::new(AtomicU64::new(0));
    let parts = cachescope_engine::Parts {
        backend: Box::new(backend),
        containers: Box::new(Containers(containers)),
        pmu: None,
        world: None,
        sinks: vec![Box::new(Drop(rows.clone()))],
    };
    let opts = cachescope_engine::Options {
        interval: Duration::from_millis(1),
        batch: Duration::from_millis(batch_ms),
        duration: Some(Duration::from_secs(secs)),
        virtual_time: false,
        status_every: Duration::from_secs(1),
        every_interval: false,
        stop: Arc::new(AtomicBool::new(false)),
    };
    let (c0, w0) = (cachescope_platform::clock::process_cpu(), Instant::now());
    cachescope_engine::run(parts, &opts).unwrap();
    let (cpu, wall) = (cachescope_platform::clock::process_cpu() - c0, w0.elapsed());
    let collector = cpu.saturating_sub(Duration::from_nanos(fake_ns.load(Ordering::Relaxed)));
    (collector.as_secs_f64() / wall.as_secs_f64(), rows.load(Ordering::Relaxed) as f64 / wall.as_secs_f64())
}

fn main() {
    let batch_ms: u64 = std::env::var("BATCH_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let mut shares = Vec::new();
    let mut rates = Vec::new();
    for _ in 0..5 {
        let (share, rate) = run(3, batch_ms);
        shares.push(share);
        rates.push(rate);
    }
    shares.sort_by(f64::total_cmp);
    rates.sort_by(f64::total_cmp);
    println!(
        "kmod collector, {CONTAINERS} containers x {DOMAINS} domains at 1 ms, drained every {batch_ms} ms: \
         {:.3} % of a core (median of 5 x 3 s; min {:.3}, max {:.3}), {:.0} rows/s; target <= 0.3 %",
        shares[2] * 100.0,
        shares[0] * 100.0,
        shares[4] * 100.0,
        rates[2]
    );
}
