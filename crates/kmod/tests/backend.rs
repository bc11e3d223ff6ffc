//! The backend's logic against a module faked in user space: records that arrive before user
//! space knows the container, generations, statuses, waiting for RMIDs, the last counters of a
//! stopping container, and a whole engine run.
#![allow(clippy::unwrap_used)]

use cachescope_engine::backend::{Attach, CacheBackend, RawSample};
use cachescope_engine::sink::{Flow, OutputError, Sink};
use cachescope_engine::PartResult;
use cachescope_engine::{Change, Container, ContainerMeta, ContainerSource, Row, Status, WaitReason};
use cachescope_kmod::abi::{flags, kind, no_rmid, Record};
use cachescope_kmod::fake::FakeKernel;
use cachescope_kmod::KmodBackend;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct NoContainers;
impl ContainerSource for NoContainers {
    fn poll(&mut self, _: Duration, _: &mut Vec<Change>) -> PartResult {
        Ok(())
    }
    fn describe(&self) -> String {
        "none".into()
    }
}

fn container(name: &str, cgid: u64) -> Container {
    Container {
        meta: ContainerMeta::named(name),
        cgroup_id: Some(cgid),
        dir: Some(PathBuf::from(format!("/sys/fs/cgroup/{name}"))),
        cpus: None,
        seen_at: None,
    }
}

fn rec(kind: u8, t_ms: u64, cgid: u64, domain: u16, total: u64) -> Record {
    Record {
        time_ns: t_ms * 1_000_000,
        cgroup_id: cgid,
        occupancy: 3,
        mbm_total: total,
        mbm_local: total / 2,
        rmid: 5,
        domain,
        kind,
        flags: if kind == kind::ATTACH { flags::OCC_NONE } else { 0 },
    }
}

fn backend(k: &FakeKernel) -> KmodBackend {
    let mut b =
        KmodBackend::new(Box::new(k.clone()), &cachescope_kmod::rules(&["ctr/*".into()]), "cpu".into()).unwrap();
    b.origin(Duration::ZERO);
    b
}

fn collect(b: &mut KmodBackend) -> Vec<RawSample> {
    let mut out = Vec::new();
    b.collect(Duration::from_secs(1), cachescope_engine::Read::All, &mut out).unwrap();
    out
}

#[test]
fn records_before_attach_are_replayed_with_their_times() {
    let k = FakeKernel::new(&[0, 1], 8, 24, 64);
    let mut b = backend(&k);
    assert!(k.state().rules.iter().any(|r| r == "**/docker-*.scope") && k.state().rules.contains(&"ctr/*".to_string()));
    // The kernel tagged the cgroup at mkdir and sampled it before user space saw it.
    k.push(rec(kind::ATTACH, 10, 7, 0, 100));
    k.push(rec(kind::ATTACH, 10, 7, 1, 200));
    k.push(rec(kind::SAMPLE, 11, 7, 0, 150));
    k.push(rec(kind::SAMPLE, 11, 99, 0, 1)); // a cgroup user space never attaches
    assert!(collect(&mut b).is_empty(), "nothing known yet");
    let a = b.attach(&container("a", 7), &NoContainers, Duration::ZERO).unwrap();
    assert_eq!(a, Attach::Monitored { rmid: Some(1) });
    k.push(rec(kind::SAMPLE, 12, 7, 1, 260));
    let out = collect(&mut b);
    let got: Vec<(u64, u32, Option<u64>, Option<u64>)> = out
        .iter()
        .map(|s| (s.at.as_millis() as u64, s.domain, s.occupancy_bytes, s.mbm_total.map(|c| c.value)))
        .collect();
    assert_eq!(
        got,
        vec![
            (10, 0, None, Some(100)),
            (10, 1, None, Some(200)),
            (11, 0, Some(192), Some(150)),
            (12, 1, Some(192), Some(260))
        ],
        "the baseline first, occupancy in bytes (3 x 64), kernel times, in time order"
    );
    assert!(out.iter().all(|s| s.mbm_total.unwrap().generation == 10_000_000), "one generation per assignment");
    assert_eq!(out[2].mbm_local.unwrap().value, 75);
    // A new assignment (after the RMID was moved away and back) starts a new generation.
    k.push(rec(kind::ATTACH, 20, 7, 0, 5));
    k.push(rec(kind::SAMPLE, 21, 7, 0, 9));
    let out = collect(&mut b);
    assert!(out.iter().all(|s| s.mbm_total.unwrap().generation == 20_000_000));
}

/// Samples taken before the run's origin are not rows (they would all be stamped at the run's
/// first instant: a CI run summed 24 of them into 101 MB of a 4 MB L3 at one instant); the
/// baseline before it stays, and the first sample after it counts every byte since.
#[test]
fn samples_before_the_runs_origin_are_not_piled_at_its_first_instant() {
    let k = FakeKernel::new(&[0], 8, 24, 64);
    let mut b = backend(&k);
    b.origin(Duration::from_millis(5));
    k.push(rec(kind::ATTACH, 1, 7, 0, 100));
    for t in 2..5 {
        k.push(rec(kind::SAMPLE, t, 7, 0, 100 + t * 10));
    }
    k.push(rec(kind::SAMPLE, 6, 7, 0, 190));
    b.attach(&container("a", 7), &NoContainers, Duration::ZERO).unwrap();
    let got: Vec<(u128, Option<u64>, Option<u64>)> =
        collect(&mut b).iter().map(|s| (s.at.as_millis(), s.occupancy_bytes, s.mbm_total.map(|c| c.value))).collect();
    assert_eq!(got, vec![(0, None, Some(100)), (1, Some(192), Some(190))], "the baseline, then the first sample after");
}

#[test]
fn statuses_follow_the_counter_bits() {
    let k = FakeKernel::new(&[0], 8, 24, 1);
    let mut b = backend(&k);
    b.attach(&container("a", 7), &NoContainers, Duration::ZERO).unwrap();
    let mut r = rec(kind::SAMPLE, 1, 7, 0, 10);
    r.flags = flags::TOTAL_UNAVAIL;
    k.push(r);
    r.flags = flags::OCC_ERROR;
    k.push(r);
    r.flags = flags::MBM_NONE;
    k.push(r);
    let out = collect(&mut b);
    assert_eq!((out[0].status, out[0].mbm_total, out[0].occupancy_bytes), (Status::Unavailable, None, Some(3)));
    assert!(out[0].mbm_local.is_some(), "only the unavailable counter is null");
    assert_eq!((out[1].status, out[1].occupancy_bytes), (Status::Error, None));
    assert_eq!((out[2].status, out[2].mbm_total, out[2].mbm_local), (Status::Ok, None, None));
}

#[test]
fn waiting_for_an_rmid_and_losing_one() {
    let k = FakeKernel::new(&[0], 4, 24, 1);
    let mut b = backend(&k);
    let c = container("b", 8);
    k.state().answers.insert(c.dir.clone().unwrap(), None);
    assert_eq!(b.attach(&c, &NoContainers, Duration::ZERO).unwrap(), Attach::Waiting(WaitReason::Exhausted));
    k.state().stats.rmids_limbo = 1;
    assert_eq!(b.attach(&c, &NoContainers, Duration::ZERO).unwrap(), Attach::Waiting(WaitReason::Limbo));
    // Its records meanwhile (the kernel handed it an RMID from limbo) wait for the retry.
    k.push(rec(kind::ATTACH, 5, 8, 0, 40));
    assert!(collect(&mut b).is_empty());
    k.state().answers.insert(c.dir.clone().unwrap(), Some(3));
    assert_eq!(b.attach(&c, &NoContainers, Duration::ZERO).unwrap(), Attach::Monitored { rmid: Some(3) });
    assert_eq!(collect(&mut b).len(), 1, "the baseline was kept");
    // The kernel says it runs untagged now, and why: the RMID policy hears it at upkeep.
    let untagged = |why| Record { occupancy: why, ..rec(kind::NO_RMID, 6, 8, 0, 0) };
    k.push(untagged(no_rmid::LIMBO));
    assert!(collect(&mut b).is_empty());
    assert_eq!(b.upkeep(Duration::ZERO, &NoContainers).unwrap(), vec![("b".to_string(), WaitReason::Limbo)]);
    for (why, reason) in [(no_rmid::EXHAUSTED, WaitReason::Exhausted), (no_rmid::TABLE_FULL, WaitReason::TableFull)] {
        assert_eq!(b.attach(&c, &NoContainers, Duration::ZERO).unwrap(), Attach::Monitored { rmid: Some(3) });
        k.push(untagged(why));
        assert!(collect(&mut b).is_empty());
        assert_eq!(b.upkeep(Duration::ZERO, &NoContainers).unwrap(), vec![("b".to_string(), reason)]);
    }
    // Detaching a live container gives its RMID back to the kernel.
    b.attach(&container("c", 9), &NoContainers, Duration::ZERO).unwrap();
    b.detach("c", Duration::ZERO).unwrap();
    assert_eq!(k.state().detached, vec![PathBuf::from("/sys/fs/cgroup/c")]);
}

/// stopping() returns at once when the last counters are there, and gives up on those that
/// never come after the module's 4 intervals (4 ms here). Judged by the fake module's count of
/// waits, not a clock: a preempted test takes any time at all.
#[test]
fn stopping_waits_for_the_last_counters_but_not_forever() {
    let k = FakeKernel::new(&[0, 1], 8, 24, 1);
    let mut b = backend(&k);
    b.attach(&container("a", 7), &NoContainers, Duration::ZERO).unwrap();
    k.push(rec(kind::DETACH, 30, 7, 0, 70));
    k.push(rec(kind::DETACH, 30, 7, 1, 80));
    let t = std::time::Instant::now();
    b.stopping(&["a".to_string()]);
    println!("stopping with both domains' counters there: {:?}", t.elapsed());
    assert_eq!(k.state().waits, 0, "both domains' last counters were there: no wait");
    assert_eq!(collect(&mut b).len(), 2);
    b.attach(&container("z", 11), &NoContainers, Duration::ZERO).unwrap();
    let t = std::time::Instant::now();
    b.stopping(&["z".to_string()]);
    let (waited, waits) = (t.elapsed(), k.state().waits);
    println!("stopping that gave up: {waited:?}, {waits} waits");
    // It returns only past its deadline (a lower bound no load can break), after at most 4
    // waits of at least 1 ms each (the fake's), and well before a hang.
    assert!(waited >= Duration::from_millis(4), "{waited:?}");
    assert!(waits <= 4, "polled {waits} times within 4 intervals");
    assert!(waited < Duration::from_secs(30), "{waited:?}");
}

/// A sink that keeps rows.
struct Keep(Arc<Mutex<Vec<Row>>>);
impl Sink for Keep {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        self.0.lock().unwrap().extend_from_slice(rows);
        Flow::Continue
    }
    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        Ok(Vec::new())
    }
}

/// One container from the start.
struct One(Option<Container>);
impl ContainerSource for One {
    fn poll(&mut self, _: Duration, out: &mut Vec<Change>) -> PartResult {
        out.extend(self.0.take().map(Change::Started));
        Ok(())
    }
    fn describe(&self) -> String {
        "one".into()
    }
}

/// A whole engine run over `k`'s module with container "a" (cgroup 7) from the start, in
/// 20 ms batches of 1 ms intervals: the rows it made.
fn engine_run(k: &FakeKernel, duration: Option<Duration>, stop: Arc<AtomicBool>) -> Vec<Row> {
    let rows = Arc::new(Mutex::new(Vec::new()));
    let parts = cachescope_engine::Parts {
        backend: Box::new(backend(k)),
        containers: Box::new(One(Some(container("a", 7)))),
        pmu: None,
        world: None,
        sinks: vec![Box::new(Keep(rows.clone()))],
    };
    let opts = cachescope_engine::Options {
        interval: Duration::from_millis(1),
        batch: Duration::from_millis(20),
        duration,
        virtual_time: false,
        status_every: Duration::from_secs(1),
        every_interval: false,
        stop,
    };
    cachescope_engine::run(parts, &opts).unwrap();
    let rows = rows.lock().unwrap().clone();
    rows
}

/// CLOCK_MONOTONIC in ms, the module's clock.
fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// `k`'s module samples once the run has begun: `at(n, queue)` at the n-th drain (from 1), with
/// `now_ms` CLOCK_MONOTONIC then, so the samples' times follow the run's origin however late
/// the run starts.
fn at_drain(k: &FakeKernel, mut at: impl FnMut(u64, u64, &mut std::collections::VecDeque<Record>) + Send + 'static) {
    let mut n = 0;
    k.state().generator = Some(Box::new(move |q| {
        n += 1;
        at(n, monotonic_ms(), q)
    }));
}

#[test]
fn an_engine_run_keeps_every_byte_and_the_kernels_times() {
    let k = FakeKernel::new(&[0], 8, 16, 64);
    // The kernel's counter advances 1000 counts per ms and wraps at 16 bits; its clock is
    // CLOCK_MONOTONIC, and all of it is in the ring at the run's first read.
    at_drain(&k, |n, now_ms, q| {
        if n == 1 {
            q.push_back(rec(kind::ATTACH, now_ms, 7, 0, 0));
            for ms in 1..=200u64 {
                q.push_back(rec(kind::SAMPLE, now_ms + ms, 7, 0, (ms * 1000) % (1 << 16)));
            }
        }
    });
    let rows = engine_run(&k, Some(Duration::from_millis(60)), Arc::new(AtomicBool::new(false)));
    assert_eq!(rows.len(), 201, "the baseline and 200 samples");
    let bytes: u64 = rows.iter().filter_map(|r| r.mbm_total_bytes).sum();
    assert_eq!(bytes, 200 * 1000 * 64, "every count across 3 wraps");
    let t0 = rows[0].time_ns;
    assert!(rows.windows(2).all(|w| w[1].time_ns - w[0].time_ns == 1_000_000), "the kernel's 1 ms grid");
    assert_eq!(rows[200].time_ns - t0, 200_000_000);
    assert!(rows[1..].iter().all(|r| r.interval_ns == 1_000_000));
}

#[test]
fn a_run_stopped_by_a_signal_keeps_what_the_kernel_sampled_since_the_last_batch() {
    let k = FakeKernel::new(&[0], 8, 16, 64);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    // At the second batch's read (40 ms or more into the run), the stop flag is set; the
    // module samples ten more intervals after it: they are in its ring when the run ends, and
    // only the read after the stop can make them rows.
    at_drain(&k, move |n, now_ms, q| {
        if n == 2 {
            stop2.store(true, std::sync::atomic::Ordering::Relaxed);
        } else if n == 3 {
            q.push_back(rec(kind::ATTACH, now_ms - 10, 7, 0, 0));
            for ms in 1..=10u64 {
                q.push_back(rec(kind::SAMPLE, now_ms - 10 + ms, 7, 0, ms * 1000));
            }
        }
    });
    let rows = engine_run(&k, None, stop);
    assert_eq!(rows.len(), 11, "the baseline and 10 samples");
    assert_eq!(rows.iter().filter_map(|r| r.mbm_total_bytes).sum::<u64>(), 10 * 1000 * 64);
}
