//! What an interval costs with N followed containers of which some ran, through the engine,
//! the live noisy-neighbour finder and the recorder (sparse rows, the Parquet encoder), as
//! `record` runs them on the `none` path: the instruction
//! guard of crates/cli/tests/instructions.rs runs this under callgrind, and `perf stat` or
//! `time` can run it too. The PMU source is a stand-in that reports, for each 1 ms slot, 1 ms
//! of CPU for each container that ran (eBPF's slots, without the kernel).
//!
//! Usage: interval_cost idle|busy|BUSY_COUNT CONTAINERS SECONDS [DIR]
//!   idle: none ran; busy: all ran; a number: that many ran. Virtual time, 1 ms intervals.

use cachescope_engine::backend::Unsupported;
use cachescope_engine::containers::{Change, Container, ContainerSource};
use cachescope_engine::pmu::{Counted, PmuSample, PmuSource};
use cachescope_engine::{ContainerMeta, Options, PartResult, Parts, Sink};
use cachescope_report::live::FinderSink;
use cachescope_sinks::run_sinks::{RecordOptions, RecordSink};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Starts every container at once, at the run's start.
struct AllAtOnce(Vec<Arc<ContainerMeta>>, bool);

impl ContainerSource for AllAtOnce {
    fn poll(&mut self, _: Duration, out: &mut Vec<Change>) -> PartResult {
        if !std::mem::replace(&mut self.1, true) {
            out.extend(self.0.iter().map(|m| Change::Started(Container { meta: m.clone(), ..Default::default() })));
        }
        Ok(())
    }
    fn describe(&self) -> String {
        "containers started at once".into()
    }
}

/// 1 ms slots of 1 ms CPU for the first `busy` containers followed, up to `until` after
/// `origin` (CLOCK_MONOTONIC), delivered as the run drains.
struct Slots {
    followed: Vec<Arc<ContainerMeta>>,
    busy: usize,
    origin: Duration,
    next: Duration,
    until: Duration,
}

impl PmuSource for Slots {
    fn describe(&self) -> String {
        "stand-in slots".into()
    }
    fn counted(&self) -> Counted {
        Counted { pmu: [false; 4], cpu_ns: true }
    }
    fn drain_every(&self) -> Duration {
        Duration::from_millis(50)
    }
    fn follow(&mut self, c: &Container) {
        self.followed.push(c.meta.clone());
    }
    fn unfollow(&mut self, id: &str) {
        self.followed.retain(|m| m.id != id);
    }
    fn drain(&mut self, wake: Duration, out: &mut Vec<PmuSample>) -> PartResult<Duration> {
        let to = (wake + Duration::from_millis(1)).min(self.origin + self.until);
        while self.next < to {
            self.next += Duration::from_millis(1);
            for m in self.followed.iter().take(self.busy) {
                let end = self.next;
                out.push(PmuSample { container: m.clone(), domain: 0, end, values: [0; 4], cpu_ns: 1_000_000 });
            }
        }
        Ok(self.next)
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: interval_cost idle|busy|BUSY_COUNT CONTAINERS SECONDS [DIR]";
    let (Some(kind), Some(n), Some(secs)) = (args.get(1), args.get(2), args.get(3)) else {
        anyhow::bail!("{usage}");
    };
    let n: usize = n.parse().map_err(|e| anyhow::anyhow!("CONTAINERS {n:?}: {e}"))?;
    let secs: u64 = secs.parse().map_err(|e| anyhow::anyhow!("SECONDS {secs:?}: {e}"))?;
    let busy = match kind.as_str() {
        "idle" => 0,
        "busy" => n,
        k => k.parse().map_err(|e| anyhow::anyhow!("{k:?} is not idle, busy or a count: {e}"))?,
    };
    let tmp = tempfile::tempdir()?;
    let dir = args.get(4).map_or_else(|| tmp.path().to_path_buf(), std::path::PathBuf::from);
    let backend = Unsupported::new(vec![0], None, String::new(), "interval_cost");
    let info = cachescope_engine::CacheBackend::info(&backend).clone();
    // Row groups and files by the rows, not the wall clock: under callgrind a run takes 20 to
    // 200 times as long, and a flush every 5 s of that (a row group's encoding and zstd's
    // context reset) made the instruction count follow the host's speed. A row group per 5 s
    // of virtual time: every busy container's row each interval, each idle one's keyframe.
    let rows_per_sec = busy.min(n) as u64 * 1_000 + n.saturating_sub(busy) as u64;
    let record = RecordSink::start(RecordOptions {
        flush_every: Duration::MAX,
        flush_rows: (5 * rows_per_sec).max(1) as usize,
        rotate_every: Duration::MAX,
        ..RecordOptions::for_run(dir, "bench".into(), &info, &[])
    })?;
    let metas = (0..n).map(|i| ContainerMeta::named(&format!("{i:016x}"))).collect();
    let origin = cachescope_platform::clock::monotonic();
    let until = Duration::from_secs(secs + 1);
    let pmu = Slots { followed: Vec::new(), busy, origin, next: origin, until };
    let parts = Parts {
        backend: Box::new(backend),
        containers: Box::new(AllAtOnce(metas, false)),
        pmu: Some(Box::new(pmu)),
        world: None,
        sinks: vec![
            Box::new(FinderSink::new(cachescope_sinks::noisy::Board::shared())) as Box<dyn Sink>,
            Box::new(record),
        ],
    };
    let opts = Options {
        interval: Duration::from_millis(1),
        batch: Duration::from_millis(50),
        duration: Some(Duration::from_secs(secs)),
        virtual_time: true,
        status_every: Duration::from_secs(1),
        // As the recorder: CACHESCOPE_READ=every-interval reads every container every interval.
        every_interval: std::env::var("CACHESCOPE_READ").is_ok_and(|v| v == "every-interval"),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let sum = cachescope_engine::run(parts, &opts)?;
    println!("{} intervals, {n} containers, {busy} ran", sum.samples);
    for m in &sum.messages {
        println!("{m}");
    }
    Ok(())
}
