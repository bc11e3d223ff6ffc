//! The loop itself, with a fake backend, scripted containers, a fake PMU source and a sink
//! that keeps what it gets.

use super::*;
use crate::backend::{Attach, BackendInfo, RawSample, SlotCounts, Unsupported};
use crate::containers::Container;
use crate::error::PartResult;
use crate::pmu::PmuSample;
use crate::row::ContainerMeta;
use crate::sink::OutputError;
use crate::slots::WaitReason;
use cachescope_hw::msr::Cumulative;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Each attached container moves `rate` counts per ms on a 10-bit counter (wrapping every
/// 1024), so deltas must survive wraps; `rmids` RMIDs, freed ones in limbo until an upkeep.
struct Fake {
    info: BackendInfo,
    rate: u64,
    rmids: u32,
    attached: BTreeMap<String, (Arc<ContainerMeta>, u32, Duration)>,
    limbo: Vec<u32>,
    log: Arc<Mutex<Vec<String>>>,
    /// Counter modulus (the width's), and the CPU time (this thread's, as the read budget
    /// counts it: a preempted read costs no less) a read of one container costs.
    wrap: u64,
    cost: Duration,
    /// Attaches of this container refused, this many times, as the container's own trouble.
    refuse: Option<(&'static str, u32)>,
}

impl Fake {
    fn new(sampling: Sampling, rmids: u32, log: Arc<Mutex<Vec<String>>>) -> Fake {
        Fake {
            info: BackendInfo {
                label: "fake".into(),
                cpuid: String::new(),
                domains: vec![0, 1],
                upscale: 1,
                l3_bytes: Some(1 << 20),
                mbm_width: 10,
                mbm_unit: 64,
                mbm_correction: None,
                sampling,
                emulated: None,
                upkeep_every: Duration::from_millis(10),
                moves_without_tasks: false,
                metadata: Vec::new(),
            },
            rate: 300,
            rmids,
            attached: BTreeMap::new(),
            limbo: Vec::new(),
            log,
            wrap: 1024,
            cost: Duration::ZERO,
            refuse: None,
        }
    }
}

impl CacheBackend for Fake {
    fn info(&self) -> &BackendInfo {
        &self.info
    }
    fn attach(&mut self, c: &Container, _: &dyn ContainerSource, now: Duration) -> PartResult<Attach> {
        if let Some((id, n)) = self.refuse.as_mut().filter(|(id, n)| *id == c.id() && *n > 0) {
            *n -= 1;
            return Err(if *id == "fatal" {
                PartError::failed("the device broke")
            } else {
                PartError::container(id, "ENOENT")
            });
        }
        let used: Vec<u32> = self.attached.values().map(|a| a.1).chain(self.limbo.iter().copied()).collect();
        let Some(rmid) = (1..=self.rmids).find(|r| !used.contains(r)) else {
            let reason = if self.limbo.is_empty() { WaitReason::Exhausted } else { WaitReason::Limbo };
            return Ok(Attach::Waiting(reason));
        };
        self.log.lock().unwrap().push(format!("attach {} {}", c.id(), now.as_millis()));
        self.attached.insert(c.id().into(), (c.meta.clone(), rmid, now));
        Ok(Attach::Monitored { rmid: Some(rmid) })
    }
    fn detach(&mut self, id: &str, now: Duration) -> PartResult {
        self.log.lock().unwrap().push(format!("detach {id} {}", now.as_millis()));
        if let Some(a) = self.attached.remove(id) {
            self.limbo.push(a.1);
        }
        Ok(())
    }
    fn collect(&mut self, now: Duration, read: Read<'_>, out: &mut Vec<RawSample>) -> PartResult {
        let (rate, cost, wrap, log, domains) = (self.rate, self.cost, self.wrap, &self.log, &self.info.domains);
        read.each(&self.attached, |_, (meta, rmid, since)| {
            let counts = (now - *since).as_millis() as u64 * rate;
            log.lock().unwrap().push(format!("read {} {}", meta.id, now.as_millis()));
            let t = thread_cpu();
            while thread_cpu().saturating_sub(t) < cost {
                std::hint::spin_loop();
            }
            for &domain in domains {
                out.push(RawSample {
                    container: meta.clone(),
                    domain,
                    at: now,
                    rmid: Some(*rmid),
                    status: Status::Ok,
                    mbm_counter: None,
                    occupancy_bytes: Some(counts.min(1000)),
                    mbm_total: Some(Cumulative { generation: u64::from(*rmid), value: counts % wrap }),
                    mbm_local: None,
                });
            }
            Ok(())
        })
    }
    fn upkeep(&mut self, _: Duration, _: &dyn ContainerSource) -> PartResult<Vec<(String, WaitReason)>> {
        self.limbo.clear();
        Ok(Vec::new())
    }
    fn slots(&self) -> SlotCounts {
        SlotCounts { in_use: self.attached.len() as u64, limbo: Some(self.limbo.len() as u64) }
    }
    fn shutdown(&mut self) -> PartResult<Vec<String>> {
        Ok(vec!["fake shut down".into()])
    }
}

/// Containers on a schedule: (id, start ms, stop ms).
struct Script(Vec<(&'static str, u64, Option<u64>)>, Vec<&'static str>);

impl ContainerSource for Script {
    fn poll(&mut self, now: Duration, out: &mut Vec<Change>) -> PartResult {
        let ms = now.as_millis() as u64;
        for &(id, start, stop) in &self.0 {
            let running = self.1.contains(&id);
            if !running && start <= ms && stop.is_none_or(|s| ms < s) {
                self.1.push(id);
                out.push(Change::Started(Container { meta: ContainerMeta::named(id), ..Default::default() }));
            } else if running && stop.is_some_and(|s| s <= ms) {
                self.1.retain(|x| *x != id);
                out.push(Change::Stopped(id.into(), None));
            }
        }
        Ok(())
    }
    fn describe(&self) -> String {
        "script".into()
    }
}

#[derive(Default)]
struct Kept {
    rows: Vec<Row>,
    forgotten: Vec<(String, usize)>,
    statuses: Vec<RunStatus>,
    finished: bool,
}

struct VecSink(Arc<Mutex<Kept>>);

impl Sink for VecSink {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        self.0.lock().unwrap().rows.extend_from_slice(rows);
        Flow::Continue
    }
    fn status(&mut self, st: &RunStatus) -> Flow {
        self.0.lock().unwrap().statuses.push(st.clone());
        Flow::Continue
    }
    fn forget(&mut self, id: &str) {
        let mut k = self.0.lock().unwrap();
        let n = k.rows.len();
        k.forgotten.push((id.to_string(), n));
    }
    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        self.0.lock().unwrap().finished = true;
        Ok(Vec::new())
    }
}

fn opts(interval_ms: u64, duration_ms: u64) -> Options {
    Options {
        interval: Duration::from_millis(interval_ms),
        batch: Duration::from_millis(10),
        duration: Some(Duration::from_millis(duration_ms)),
        virtual_time: true,
        status_every: Duration::from_millis(20),
        every_interval: false,
        stop: Arc::new(AtomicBool::new(false)),
    }
}

fn parts(
    backend: Box<dyn CacheBackend>,
    script: Script,
    pmu: Option<Box<dyn PmuSource>>,
    sinks: usize,
) -> (Parts, Vec<Arc<Mutex<Kept>>>) {
    let kept: Vec<Arc<Mutex<Kept>>> = (0..sinks).map(|_| Arc::default()).collect();
    let sinks = kept.iter().map(|k| Box::new(VecSink(k.clone())) as Box<dyn Sink>).collect();
    (Parts { backend, containers: Box::new(script), pmu, world: None, sinks }, kept)
}

#[test]
fn every_interval_derived_once_attached_before_read_and_ended_in_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let script = Script(vec![("a", 0, None), ("b", 5, Some(30))], Vec::new());
    let (p, kept) = parts(Box::new(Fake::new(Sampling::Virtual, 8, log.clone())), script, None, 2);
    let sum = run(p, &opts(1, 50)).unwrap();
    assert_eq!(sum.samples, 50);
    assert!(sum.messages.contains(&"fake shut down".to_string()));
    let log = log.lock().unwrap();
    // b is attached at 5 ms, before anything of its first interval is read.
    let attach = log.iter().position(|l| l == "attach b 5").unwrap();
    let first_read = log.iter().position(|l| l.starts_with("read b")).unwrap();
    assert!(attach < first_read && log[first_read] == "read b 5", "{log:?}");
    // Its last interval (ending at 30 ms) is read before it is detached.
    let last_read = log.iter().rposition(|l| l.starts_with("read b")).unwrap();
    assert_eq!(log[last_read], "read b 30");
    assert!(log.iter().position(|l| l == "detach b 30").unwrap() > last_read);
    let k0 = kept[0].lock().unwrap();
    let k1 = kept[1].lock().unwrap();
    assert_eq!(k0.rows, k1.rows, "every sink gets the same rows");
    assert!(k0.finished && k1.finished);
    let a: Vec<&Row> = k0.rows.iter().filter(|r| r.container.id == "a" && r.domain == 1).collect();
    assert_eq!(a.len(), 50);
    assert!(a.windows(2).all(|w| w[1].time_ns - w[0].time_ns == 1_000_000 && w[1].interval_ns == 1_000_000));
    // 300 counts/ms of 64 B on a 10-bit counter: every delta is exact across the wraps.
    assert_eq!(a[0].mbm_total_bytes, None, "no baseline for the first sample");
    assert!(a[1..].iter().all(|r| r.mbm_total_bytes == Some(300 * 64)), "{:?}", a[1..5].to_vec());
    // b's rows end before the sinks are told to forget it.
    let (id, at) = &k0.forgotten[0];
    assert_eq!(id, "b");
    assert_eq!(*at, k0.rows.iter().rposition(|r| r.container.id == "b").unwrap() + 1);
    assert!(k0.rows.windows(2).all(|w| w[0].time_ns <= w[1].time_ns), "time order");
    assert!(!k0.statuses.is_empty() && k0.statuses.iter().all(|s| s.backend == "fake"));
}

#[test]
fn no_rmid_rows_until_an_rmid_frees_up() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let script = Script(vec![("a", 0, Some(12)), ("b", 2, None)], Vec::new());
    let (p, kept) = parts(Box::new(Fake::new(Sampling::Tick, 1, log)), script, None, 1);
    let mut o = opts(1, 40);
    o.status_every = Duration::from_millis(5);
    run(p, &o).unwrap();
    let k = kept[0].lock().unwrap();
    let b: Vec<&Row> = k.rows.iter().filter(|r| r.container.id == "b" && r.domain == 0).collect();
    let no_rmid = b.iter().filter(|r| r.status == Status::NoRmid).count();
    assert!(no_rmid >= 10, "waiting while a holds the only RMID: {no_rmid}");
    assert!(b.iter().all(|r| r.status != Status::NoRmid || (r.rmid.is_none() && r.llc_occupancy_bytes.is_none())));
    let first_ok = b.iter().position(|r| r.status == Status::Ok).expect("b gets the RMID after limbo");
    assert!(b[first_ok..].iter().all(|r| r.status == Status::Ok && r.rmid == Some(1)));
    let waiting = k.statuses.iter().find(|s| s.unmonitored == 1).expect("a status while b waits");
    assert!(waiting.extra.iter().any(|l| l.contains("b (rmids exhausted)")), "{:?}", waiting.extra);
}

#[test]
fn a_containers_own_trouble_does_not_end_the_run_but_anything_else_does() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let script = || Script(vec![("a", 0, None), ("b", 2, None)], Vec::new());
    let mut fake = Fake::new(Sampling::Tick, 8, log.clone());
    fake.refuse = Some(("b", 2));
    let (p, kept) = parts(Box::new(fake), script(), None, 1);
    let sum = run(p, &opts(1, 40)).unwrap();
    // Refused at its start and at the first upkeep (10 ms), attached at the next.
    assert!(log.lock().unwrap().iter().any(|l| l == "attach b 20"), "{:?}", log.lock().unwrap());
    let k = kept[0].lock().unwrap();
    let b: Vec<&Row> = k.rows.iter().filter(|r| r.container.id == "b" && r.domain == 0).collect();
    assert!(b.first().is_some_and(|r| r.status != Status::Ok) && b.last().is_some_and(|r| r.status == Status::Ok));
    let said = sum.messages.iter().find(|m| m.contains("attaches refused")).expect("the refusals are said");
    assert!(said.starts_with("2 attaches") && said.contains("container b: ENOENT"), "{said}");

    let mut fake = Fake::new(Sampling::Tick, 8, log);
    fake.refuse = Some(("fatal", 1));
    let script = Script(vec![("fatal", 0, None)], Vec::new());
    let (p, _) = parts(Box::new(fake), script, None, 1);
    match run(p, &opts(1, 40)) {
        Err(RunError::Part { what: "attach", why: PartError::Failed(w) }) => assert_eq!(w, "the device broke"),
        other => panic!("{:?}", other.map(|s| s.messages)),
    }
}

/// One PMU slot per ms per followed container: 1000 cycles and 1 ms of CPU on domain 0,
/// delivered up to 1 s after `origin` at once (a source far ahead of the run).
struct FakePmu {
    followed: Vec<Arc<ContainerMeta>>,
    origin: Duration,
    next: Duration,
    /// A container whose counters "could not be opened": no slots, and said so.
    uncounted: Option<&'static str>,
    /// Only these run (the others get no slots); None: all.
    only: Option<Vec<&'static str>>,
    /// How far ahead of `origin` it delivers.
    horizon: Duration,
}

impl PmuSource for FakePmu {
    fn describe(&self) -> String {
        "fake".into()
    }
    fn counted(&self) -> Counted {
        Counted { pmu: [true, false, false, false], cpu_ns: true }
    }
    fn drain_every(&self) -> Duration {
        Duration::from_millis(5)
    }
    fn follow(&mut self, c: &Container) {
        if self.uncounted != Some(c.meta.id.as_str()) {
            self.followed.push(c.meta.clone());
        }
    }
    fn uncounted(&self, id: &str) -> bool {
        self.uncounted == Some(id)
    }
    fn unfollow(&mut self, id: &str) {
        self.followed.retain(|m| m.id != id);
    }
    fn drain(&mut self, _wake: Duration, out: &mut Vec<PmuSample>) -> PartResult<Duration> {
        while self.next < self.origin + self.horizon {
            self.next += Duration::from_millis(1);
            for m in self.followed.iter().filter(|m| self.only.as_ref().is_none_or(|o| o.contains(&m.id.as_str()))) {
                out.push(PmuSample {
                    container: m.clone(),
                    domain: 0,
                    end: self.next,
                    values: [1000, 0, 0, 0],
                    cpu_ns: 1_000_000,
                });
            }
        }
        Ok(self.next)
    }
}

#[test]
fn without_cache_monitoring_rows_carry_pmu_and_cpu_columns() {
    let backend = Unsupported::new(vec![0], None, String::new(), "no RDT");
    let script = Script(vec![("a", 0, None)], Vec::new());
    let (mut p, kept) = parts(Box::new(backend), script, None, 1);
    // The run's clock starts after this, so each slot ends within the 1 ms row it belongs to.
    let origin = cachescope_platform::clock::monotonic();
    p.pmu = Some(Box::new(FakePmu {
        followed: Vec::new(),
        origin,
        next: origin,
        uncounted: None,
        only: None,
        horizon: Duration::from_secs(1),
    }));
    let sum = run(p, &opts(1, 30)).unwrap();
    assert!(sum.samples >= 25, "{}", sum.samples);
    let k = kept[0].lock().unwrap();
    assert!(!k.rows.is_empty());
    assert!(k.rows.iter().all(|r| r.status == Status::Unsupported && r.llc_occupancy_bytes.is_none()));
    assert!(k.rows.iter().all(|r| r.mbm_total_bytes.is_none() && r.pmu.instructions.is_none()), "uncounted is null");
    let cpu: u64 = k.rows.iter().filter_map(|r| r.cpu_ns).sum();
    let cycles: u64 = k.rows.iter().filter_map(|r| r.pmu.cycles).sum();
    assert_eq!(cpu, k.rows.len() as u64 * 1_000_000, "one slot of CPU per 1 ms row");
    assert_eq!(cycles, k.rows.len() as u64 * 1000);
}

/// Slots from before the run's start are in no row (a container there from the start: its
/// first row held them all, 20 ms of CPU in 1 ms). A container found late is charged from its
/// first slot: those slots (the source's orphans, given when it is followed) are in a row that
/// reaches back for them, in whole intervals, never over the row before it.
#[test]
fn a_first_row_reaches_back_to_the_slots_before_it() {
    let backend = Unsupported::new(vec![0], None, String::new(), "no RDT");
    // "early" is there from the start; "late" is found 30 ms in, having run for 12 ms.
    let script = Script(vec![("early", 0, None), ("late", 30, None)], Vec::new());
    let (mut p, kept) = parts(Box::new(backend), script, None, 1);
    let origin = cachescope_platform::clock::monotonic();
    let backlog = Duration::from_millis(12);
    // Slots from 20 ms before the run for the first: dropped.
    p.pmu = Some(Box::new(Orphans {
        followed: Vec::new(),
        next: origin - Duration::from_millis(20),
        backlog,
        owed: Vec::new(),
    }));
    run(p, &opts(1, 60)).unwrap();
    let k = kept[0].lock().unwrap();
    let first =
        |id: &str| k.rows.iter().filter(|r| r.container.id == id).min_by_key(|r| r.time_ns).cloned().expect("rows");
    let early = first("early");
    assert!(early.interval_ns <= 2_000_000, "the early one's first row spans {} ns: before the run", early.interval_ns);
    assert!(early.cpu_ns.unwrap_or(0) <= 2_000_000, "{:?} ns of CPU from before the run", early.cpu_ns);
    // The late one's backlog is in a row that reaches back for it (its first counted row;
    // here the engine's row at its birth came first, with nothing yet).
    let back = k.rows.iter().filter(|r| r.container.id == "late").find(|r| r.cpu_ns.unwrap_or(0) > 1_000_000);
    let back = back.expect("a row with the late one's backlog");
    assert!(back.interval_ns > 1_000_000, "the backlog's row spans {} ns", back.interval_ns);
    for id in ["early", "late"] {
        let mut rows: Vec<&Row> = k.rows.iter().filter(|r| r.container.id == id).collect();
        rows.sort_by_key(|r| r.time_ns);
        for w in rows.windows(2) {
            assert!(w[1].time_ns - w[1].interval_ns >= w[0].time_ns, "{id}: rows overlap");
        }
        for r in &rows {
            assert_eq!(r.interval_ns % 1_000_000, 0, "whole intervals");
        }
    }
    assert!(
        k.rows.iter().filter(|r| r.container.id == "early").all(|r| r.cpu_ns.unwrap_or(0) as i64 <= r.interval_ns),
        "no row holds more CPU than it is long"
    );
}

/// A slot of 1 ms of CPU time (and no counts) for container `m`, ending at `end`.
fn cpu_slot(m: &Arc<ContainerMeta>, end: Duration) -> PmuSample {
    PmuSample { container: m.clone(), domain: 0, end, values: [0; 4], cpu_ns: 1_000_000 }
}

/// 1 ms slots of 1 ms CPU for every followed container, delivered as the run drains; a
/// container followed late gets `backlog` of slots before that first (the orphans a source
/// keeps for a cgroup no followed container held yet).
struct Orphans {
    followed: Vec<Arc<ContainerMeta>>,
    next: Duration,
    backlog: Duration,
    owed: Vec<PmuSample>,
}

impl PmuSource for Orphans {
    fn describe(&self) -> String {
        "orphans".into()
    }
    fn counted(&self) -> Counted {
        Counted { pmu: [false; 4], cpu_ns: true }
    }
    fn drain_every(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn follow(&mut self, c: &Container) {
        // The first follows come before any drain: only a later one has a backlog.
        if !self.followed.is_empty() {
            let mut end = self.next.saturating_sub(self.backlog);
            while end < self.next {
                end += Duration::from_millis(1);
                self.owed.push(cpu_slot(&c.meta, end));
            }
        }
        self.followed.push(c.meta.clone());
    }
    fn unfollow(&mut self, id: &str) {
        self.followed.retain(|m| m.id != id);
    }
    fn drain(&mut self, wake: Duration, out: &mut Vec<PmuSample>) -> PartResult<Duration> {
        out.append(&mut self.owed);
        while self.next < wake {
            self.next += Duration::from_millis(1);
            for m in &self.followed {
                out.push(cpu_slot(m, self.next));
            }
        }
        // Complete a few slots behind, as the kernel's slots are drained (eBPF: every 50 ms):
        // a row waits for them, and a late container's orphans come with its first.
        Ok(self.next.saturating_sub(Duration::from_millis(5)))
    }
}

/// A container the PMU source could not count (its perf events failed to open) has null PMU
/// columns and CPU time, never 0, while its neighbour's are counted.
#[test]
fn a_container_without_counters_has_null_pmu_columns_not_zero() {
    let backend = Unsupported::new(vec![0], None, String::new(), "no RDT");
    let script = Script(vec![("a", 0, None), ("b", 0, None)], Vec::new());
    let (mut p, kept) = parts(Box::new(backend), script, None, 1);
    let origin = cachescope_platform::clock::monotonic();
    p.pmu = Some(Box::new(FakePmu {
        followed: Vec::new(),
        origin,
        next: origin,
        uncounted: Some("b"),
        only: None,
        horizon: Duration::from_secs(1),
    }));
    run(p, &opts(1, 30)).unwrap();
    let k = kept[0].lock().unwrap();
    let of =
        |id: &str| k.rows.iter().filter(|r| r.container.id == id && r.status != Status::Stopped).collect::<Vec<_>>();
    assert!(!of("b").is_empty());
    assert!(of("b").iter().all(|r| r.pmu.cycles.is_none() && r.cpu_ns.is_none()), "b is unknown, not idle");
    assert!(of("a").iter().all(|r| r.pmu.cycles == Some(1000) && r.cpu_ns == Some(1_000_000)));
}

#[test]
fn read_every_interval_but_attached_as_soon_as_reported() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let script = Script(vec![("a", 0, None), ("b", 35, None)], Vec::new());
    let (p, kept) = parts(Box::new(Fake::new(Sampling::Tick, 8, log.clone())), script, None, 1);
    run(p, &opts(100, 400)).unwrap();
    let log = log.lock().unwrap();
    // b is attached at the first 10 ms wake-up after it started, long before the next read.
    assert!(log.contains(&"attach b 40".to_string()), "{log:?}");
    let reads: Vec<&String> = log.iter().filter(|l| l.starts_with("read a")).collect();
    assert_eq!(reads, ["read a 100", "read a 200", "read a 300", "read a 400"], "one read per interval");
    let k = kept[0].lock().unwrap();
    let b: Vec<&Row> = k.rows.iter().filter(|r| r.container.id == "b" && r.domain == 0).collect();
    assert_eq!(b[0].interval_ns, 100_000_000, "its first interval runs from the previous read");
}

/// Overload: 100 containers whose reads cost 2 ms of CPU per 1 ms interval, in real time. The
/// run reads part of them each interval, in turn, and keeps up; each container's rows still
/// add up to every byte it moved (a row spans everything since its previous one). Judged by
/// what the run did (its intervals, its reads, the budget's account), never by how late its
/// wake-ups were: that is the machine's load, and is printed.
#[test]
fn overload_reads_in_turn_and_loses_nothing() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let ids: Vec<&'static str> = (0..100).map(|i| &*Box::leak(format!("c{i:03}").into_boxed_str())).collect();
    let script = Script(ids.iter().map(|&id| (id, 0, None)).collect(), Vec::new());
    let mut fake = Fake::new(Sampling::Virtual, 200, log.clone());
    (fake.wrap, fake.info.mbm_width, fake.cost) = (1 << 32, 32, Duration::from_micros(20));
    let (p, kept) = parts(Box::new(fake), script, None, 1);
    let o = Options { virtual_time: false, batch: Duration::from_millis(50), ..opts(1, 1000) };
    let sum = run(p, &o).unwrap();
    let reads = log.lock().unwrap().iter().filter(|l| l.starts_with("read ")).count();
    println!("{} wakes, {} missed, {} reads, {:?}", sum.wakes, sum.missed, reads, sum.messages);
    // Every interval of the second was sampled (a late wake-up catches up on the grid), and
    // from the 4th on (crate::budget::WARMUP) only part of the containers were read.
    assert_eq!(sum.samples, 1000);
    let said = sum.messages.iter().find(|m| m.starts_with("overloaded:")).expect("the overload is said");
    let cut: u64 = said["overloaded: ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(cut >= 900 && said.contains(" of 1000 intervals"), "{said}");
    // It kept up: reading all would take 2 s of CPU in 1 s (100,000 reads); the budget's share
    // of each interval (crate::budget::SHARE) holds about 27 reads of 20 us.
    assert!(reads < 50_000, "{reads} reads of 20 us of CPU each in a 1 s run");
    let k = kept[0].lock().unwrap();
    for id in &ids {
        let rs: Vec<&Row> = k.rows.iter().filter(|r| r.container.id == *id && r.domain == 0).collect();
        assert!(rs.len() >= 10, "{id}: {} rows", rs.len());
        let moved: u64 = rs.iter().filter_map(|r| r.mbm_total_bytes).sum();
        let span = (rs.last().unwrap().time_ns - rs[0].time_ns) as u64 / 1_000_000;
        assert_eq!(moved, span * 300 * 64, "{id}: every byte between its first and last row");
        // Rows are on the run's grid: a row's span counts intervals, not the wall clock.
        let longest = rs.windows(2).map(|w| w[1].interval_ns).max().unwrap();
        assert!(longest <= 100_000_000, "{id}: read at least every 100 intervals ({longest} ns)");
    }
    assert!(k.statuses.iter().any(|s| s.extra.iter().any(|l| l.starts_with("overloaded:"))));
}

/// With CPU time counted, an interval reads who ran in it and a keyframe share: each idle
/// container once per second, in its own interval, and nothing it moved meanwhile is lost
/// (its next row spans everything since its last).
#[test]
fn a_quiet_run_reads_who_ran_and_each_idle_container_once_per_keyframe() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let ids: Vec<&'static str> = (0..50).map(|i| &*Box::leak(format!("c{i:02}").into_boxed_str())).collect();
    let script = Script(ids.iter().map(|&id| (id, 0, None)).chain([("late", 1500, Some(2200))]).collect(), Vec::new());
    let mut fake = Fake::new(Sampling::Virtual, 200, log.clone());
    (fake.wrap, fake.info.mbm_width) = (1 << 32, 32);
    let (mut p, kept) = parts(Box::new(fake), script, None, 1);
    let origin = cachescope_platform::clock::monotonic();
    let only = Some(vec!["c00", "c01"]);
    let horizon = Duration::from_secs(3);
    p.pmu = Some(Box::new(FakePmu { followed: Vec::new(), origin, next: origin, uncounted: None, only, horizon }));
    let o = opts(1, 2500);
    let sum = run(p, &o).unwrap();
    let log = log.lock().unwrap();
    let reads = |id: &str| log.iter().filter(|l| l.split(' ').nth(1) == Some(id) && l.starts_with("read ")).count();
    assert!(reads("c00") >= 2499, "{}", reads("c00"));
    // Idle: its first interval, then once per second.
    for id in &ids[2..] {
        assert!((2..=4).contains(&reads(id)), "{id}: {} reads", reads(id));
    }
    // Started and stopped between keyframes: its first and its last interval, and its keyframe.
    assert!((2..=3).contains(&reads("late")), "late: {}", reads("late"));
    let said = sum.messages.iter().find(|m| m.contains("container-intervals")).expect("said");
    assert!(said.starts_with("read "), "{said}");
    let k = kept[0].lock().unwrap();
    for id in &ids[2..] {
        let rs: Vec<&Row> =
            k.rows.iter().filter(|r| r.container.id == *id && r.domain == 0 && r.status != Status::Stopped).collect();
        // Every byte the backend counted, in rows whose intervals tile the run.
        let moved: u64 = rs.iter().filter_map(|r| r.mbm_total_bytes).sum();
        let span: i64 = rs.iter().map(|r| r.interval_ns).sum();
        assert_eq!(moved, (rs.last().unwrap().time_ns - rs[0].time_ns) as u64 / 1_000_000 * 300 * 64, "{id}");
        assert_eq!(span, rs.last().unwrap().time_ns - rs[0].time_ns + rs[0].interval_ns, "{id}");
        // After its first row, keyframes a second apart; CPU time 0 (counted, nothing ran),
        // never null.
        for w in rs[1..].windows(2) {
            assert_eq!(w[1].interval_ns, 1_000_000_000, "{id}");
        }
        assert!(rs.iter().all(|r| r.cpu_ns == Some(0)), "{id}");
    }
}

/// Read at the tick (the PMU drained behind it): who ran lately is read at every interval.
#[test]
fn a_quiet_run_read_at_the_tick_reads_who_ran_lately() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let ids: Vec<&'static str> = (0..20).map(|i| &*Box::leak(format!("t{i:02}").into_boxed_str())).collect();
    let script = Script(ids.iter().map(|&id| (id, 0, None)).collect(), Vec::new());
    let (mut p, _) = parts(Box::new(Fake::new(Sampling::Tick, 200, log.clone())), script, None, 1);
    let origin = cachescope_platform::clock::monotonic();
    let (only, horizon) = (Some(vec!["t00"]), Duration::from_secs(1));
    p.pmu = Some(Box::new(FakePmu { followed: Vec::new(), origin, next: origin, uncounted: None, only, horizon }));
    let o = Options { virtual_time: false, ..opts(10, 600) };
    run(p, &o).unwrap();
    let log = log.lock().unwrap();
    let reads = |id: &str| log.iter().filter(|l| l.split(' ').nth(1) == Some(id) && l.starts_with("read ")).count();
    assert!(reads("t00") >= 50, "{}", reads("t00"));
    for id in &ids[1..] {
        assert!((1..=2).contains(&reads(id)), "{id}: {} reads", reads(id));
    }
}

/// 1 ms slots of 1 ms CPU for the followed containers named in `busy`, delivered as the run
/// drains (up to its wake-up), as eBPF's slots come.
struct PacedPmu {
    followed: Vec<Arc<ContainerMeta>>,
    busy: Vec<&'static str>,
    next: Duration,
}

impl PmuSource for PacedPmu {
    fn describe(&self) -> String {
        "paced".into()
    }
    fn counted(&self) -> Counted {
        Counted { pmu: [false; 4], cpu_ns: true }
    }
    fn drain_every(&self) -> Duration {
        Duration::from_millis(10)
    }
    fn follow(&mut self, c: &Container) {
        self.followed.push(c.meta.clone());
    }
    fn unfollow(&mut self, id: &str) {
        self.followed.retain(|m| m.id != id);
    }
    fn drain(&mut self, wake: Duration, out: &mut Vec<PmuSample>) -> PartResult<Duration> {
        while self.next < wake + Duration::from_millis(1) {
            self.next += Duration::from_millis(1);
            for m in self.followed.iter().filter(|m| self.busy.contains(&m.id.as_str())) {
                out.push(cpu_slot(m, self.next));
            }
        }
        Ok(self.next)
    }
}

/// RMIDs run out in a quiet run: the busy container left waiting replaces an idle one once
/// it may (the policy's 5 s hold), judged by the CPU time the PMU source counted. The
/// container source here knows no CPU time (no `cpu.stat` is read while the PMU counts it).
#[test]
fn a_quiet_run_gives_rmids_to_the_busy_by_the_cpu_time_the_pmu_counted() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let script = Script(vec![("idle0", 0, None), ("idle1", 0, None), ("busy", 0, None)], Vec::new());
    let (mut p, kept) = parts(Box::new(Fake::new(Sampling::Virtual, 2, log.clone())), script, None, 1);
    let next = cachescope_platform::clock::monotonic();
    p.pmu = Some(Box::new(PacedPmu { followed: Vec::new(), busy: vec!["busy"], next }));
    run(p, &opts(1, 6500)).unwrap();
    let log = log.lock().unwrap();
    let at = |what: &str| log.iter().find(|l| l.starts_with(what)).map(|l| l.rsplit(' ').next().unwrap().to_string());
    let (detached, attached) = (at("detach idle0"), at("attach busy"));
    assert!(
        detached.is_some() && attached.is_some(),
        "{:?}",
        log.iter().filter(|l| !l.starts_with("read")).collect::<Vec<_>>()
    );
    let ms: u64 = attached.unwrap().parse().unwrap();
    assert!((5000..6000).contains(&ms), "busy attached at {ms} ms");
    let kept_to: u64 = at("detach idle1").unwrap().parse().unwrap();
    assert!(kept_to >= 6500, "one swap, of the first idle one: idle1 kept its RMID to the end, not {kept_to} ms");
    let k = kept[0].lock().unwrap();
    let busy: Vec<&Row> = k.rows.iter().filter(|r| r.container.id == "busy" && r.domain == 0).collect();
    assert!(
        busy.first().is_some_and(|r| r.status == Status::NoRmid) && busy.last().is_some_and(|r| r.status == Status::Ok)
    );
}
