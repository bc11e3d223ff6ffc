//! What one row group costs in memory at 10,000 containers (issue 42's RSS target): the rows a
//! 5 s row group holds there (a keyframe row per container each second, 2 busy
//! containers' rows every millisecond), pushed and flushed through the Parquet sink, with the
//! heap counted by the allocator. Prints the heap while the rows wait, its peak while the row
//! group is encoded and written, and the bytes on disk.
//! `cargo run --release -p cachescope-sinks --example sink_memory [-- CONTAINERS [SECONDS]]`

use cachescope_engine::row::{ContainerMeta, Pmu, Row, Status};
use cachescope_sinks::parquet::{Options, ParquetSink};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// The system allocator, counting the bytes it holds and their peak.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` holds for System's as well.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = NOW.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` above with this layout.
        unsafe { System.dealloc(p, l) };
        NOW.fetch_sub(l.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn mb(b: usize) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let seconds: i64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let metas: Vec<Arc<ContainerMeta>> = (0..n)
        .map(|i| {
            Arc::new(ContainerMeta {
                id: format!("cachescope-rss/c{i:05}"),
                cgroup_path: format!("cachescope-rss/c{i:05}"),
                ..Default::default()
            })
        })
        .collect();
    let t0 = 1_790_000_000_000_000_000i64;
    let row = |m: &Arc<ContainerMeta>, t: i64, interval: i64, d: u32, busy: bool| Row {
        time_ns: t,
        interval_ns: interval,
        container: m.clone(),
        domain: d,
        rmid: None,
        llc_occupancy_bytes: None,
        mbm_total_bytes: None,
        mbm_local_bytes: None,
        pmu: Pmu {
            cycles: busy.then_some(2_000_000 + t as u64 % 977),
            instructions: busy.then_some(3_000_000 + t as u64 % 991),
            llc_references: None,
            llc_misses: None,
            lost: false,
        },
        cpu_ns: Some(if busy { 900_000 + t as u64 % 1000 } else { 0 }),
        status: Status::Ok,
        mbm_counter: None,
    };
    let before = NOW.load(Relaxed);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = Options::new(dir.path().to_path_buf(), "bench-host".into());
    opts.flush_rows = usize::MAX;
    let mut sink = ParquetSink::new(opts).expect("sink");
    let mut rows = 0usize;
    for ms in 1..=seconds * 1000 {
        let t = t0 + ms * 1_000_000;
        let mut batch: Vec<Row> = metas[..2.min(n)].iter().map(|m| row(m, t, 1_000_000, 0, true)).collect();
        if ms % 1000 == 0 {
            // The keyframe: every container once a second (one L3 domain, as on `none`).
            batch.extend(metas.iter().map(|m| row(m, t, 1_000_000_000, 0, false)));
        }
        rows += batch.len();
        sink.push(batch);
    }
    let waiting = NOW.load(Relaxed) - before;
    PEAK.store(NOW.load(Relaxed), Relaxed);
    let start = Instant::now();
    sink.flush(Instant::now()).expect("flush");
    let took = start.elapsed();
    let peak = PEAK.load(Relaxed) - before;
    let (st, e) = sink.close();
    assert!(e.is_none(), "close: {e:?}");
    println!("{n} containers, a row group of {seconds} s: {rows} rows");
    println!(
        "heap: {:.1} MB while the rows wait, {:.1} MB at the peak of the flush ({:.0} ms)",
        mb(waiting),
        mb(peak),
        took.as_secs_f64() * 1e3
    );
    println!("on disk: {} bytes, {:.2} bytes a row", st.bytes_closed, st.bytes_closed as f64 / rows as f64);
}
