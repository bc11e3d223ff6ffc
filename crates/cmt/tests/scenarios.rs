//! The msr backend against the emulated platform: scenarios with known answers.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_cmt::*;
use cachescope_emu::{EmuPlatform, Scenario};
use cachescope_engine::backend::{Attach, BackendInfo, CacheBackend};
use cachescope_engine::containers::{Change, Container, ContainerSource};
use cachescope_engine::derive::Derive;
use cachescope_engine::PartResult;
use cachescope_engine::{ContainerMeta, Status, WaitReason};
use cachescope_hw::msr::{Event, MsrDevice, MsrError, IA32_PQR_ASSOC};
use cachescope_rmid::Config;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Tags scenario containers; names the scenario does not have (fillers) are accepted.
struct Tagger(Arc<EmuPlatform>);
impl TaskTagger for Tagger {
    fn tag(&self, c: &str, rmid: Option<u32>) -> PartResult {
        self.0.tag_container(c, rmid);
        Ok(())
    }
}

/// The backend asks nothing of the source here.
struct NoSource;
impl ContainerSource for NoSource {
    fn poll(&mut self, _: Duration, _: &mut Vec<Change>) -> PartResult {
        Ok(())
    }
    fn describe(&self) -> String {
        String::new()
    }
}

fn container(id: &str) -> Container {
    Container { meta: ContainerMeta::named(id), ..Default::default() }
}

fn platform(model: &str, width: Option<u32>, containers: &str) -> Arc<EmuPlatform> {
    let w = width.map(|w| format!("counter_width = {w}\n")).unwrap_or_default();
    let text =
        format!("[platform]\nmodel = \"{model}\"\nl3_mib = 32\ndomains = 2\ncpus_per_domain = 4\n{w}{containers}");
    Arc::new(EmuPlatform::new(&Scenario::parse(&text, Path::new("t.toml")).unwrap()).unwrap())
}

fn reader(p: &Arc<EmuPlatform>) -> Reader<Arc<EmuPlatform>> {
    let caps = Caps::from_l3(p.l3(), p.cpu_info().monitoring.max_rmid_any.unwrap());
    Reader::new(p.clone(), caps, &p.domains(), Retries::default())
}

fn backend(p: &Arc<EmuPlatform>, min_limbo: Duration, tag: bool) -> MsrBackend<Arc<EmuPlatform>> {
    let caps = reader(p).caps().clone();
    let cfg = Config::with_default_threshold(caps.max_rmid, p.l3_bytes(), min_limbo);
    let mut info = BackendInfo::new("emulated", String::new(), Some(p.l3_bytes()));
    (info.emulated, info.upkeep_every) = (Some("a scenario".into()), Duration::from_millis(10));
    let tagger: Option<Box<dyn TaskTagger>> = if tag { Some(Box::new(Tagger(p.clone()))) } else { None };
    MsrBackend::new(p.clone(), caps, &p.domains(), cfg, tagger, info)
}

fn attach(b: &mut MsrBackend<Arc<EmuPlatform>>, c: Container) -> Option<u32> {
    match b.attach(&c, &NoSource, Duration::ZERO).unwrap() {
        Attach::Monitored { rmid } => rmid,
        Attach::Waiting(_) => None,
    }
}

const MIB: f64 = 1024.0 * 1024.0;

#[test]
fn one_container_alone_converges_to_its_footprint() {
    let p = platform(
        "intel-xeon-platinum-8160",
        None,
        "[[container]]\nname = \"solo\"\ncpus = [0, 1]\nfootprint_mib = 24\nbandwidth_mbps = 4000\n",
    );
    let mut b = backend(&p, Duration::ZERO, true);
    let rmid = attach(&mut b, container("solo")).unwrap();
    let r = b.reader();
    p.advance(Duration::from_secs(1));
    let occ = r.occupancy_bytes(0, rmid).unwrap().unwrap() as f64;
    let upscale = f64::from(r.caps().upscale_factor);
    let want = 24.0 * MIB;
    assert!((occ - want).abs() <= upscale + 0.02 * want, "occupancy {occ} vs footprint {want}");
    assert!(occ <= want, "never above the footprint");
    // Domain 1 has no CPU of this container: no data there.
    assert_eq!(r.read(1, rmid, Event::L3Occupancy).unwrap(), Reading::Unavailable);
}

#[test]
fn two_containers_never_exceed_the_l3() {
    let p = platform(
        "intel-xeon-platinum-8160",
        None,
        "[[container]]\nname = \"a\"\ncpus = [0]\nfootprint_mib = 24\nbandwidth_mbps = 6000\n\
         [[container]]\nname = \"b\"\ncpus = [1]\nfootprint_mib = 20\nbandwidth_mbps = 3000\nstart_ms = 100\n",
    );
    let mut b = backend(&p, Duration::ZERO, true);
    let (ra, rb) = (attach(&mut b, container("a")).unwrap(), attach(&mut b, container("b")).unwrap());
    let r = b.reader();
    let l3 = 32.0 * MIB;
    let mut max_sum: f64 = 0.0;
    for _ in 0..200 {
        p.advance(Duration::from_millis(5));
        let a = r.occupancy_bytes(0, ra).unwrap().unwrap_or(0) as f64;
        let b = r.occupancy_bytes(0, rb).unwrap().unwrap_or(0) as f64;
        assert!(a + b <= l3, "{a} + {b} > {l3}");
        max_sum = max_sum.max(a + b);
    }
    // Demand (44 MiB) exceeds the cache: the sum is pinned near the L3 size.
    assert!(max_sum > 0.95 * l3, "{max_sum}");
}

#[test]
fn mbm_total_equals_bandwidth_times_time_across_wraps() {
    // EPYC: 64-byte units; a 24-bit counter wraps every 1 GiB: 40 GB over 10 s is ~37 wraps.
    let p = platform(
        "amd-epyc-7742",
        Some(24),
        "[[container]]\nname = \"bw\"\ncpus = [4]\nfootprint_mib = 8\nbandwidth_mbps = 4000\nlocal_fraction = 0.75\n",
    );
    let mut b = backend(&p, Duration::ZERO, true);
    assert_eq!(b.reader().caps().counter_width, 24);
    attach(&mut b, container("bw")).unwrap();
    // The engine's one derivation, on the backend's raw counts.
    let info = b.info().clone();
    let mut derive = Derive::new(info.mbm_width, info.mbm_unit, 0);
    let mut raw = Vec::new();
    let mut rows = |b: &mut MsrBackend<Arc<EmuPlatform>>, now| {
        b.collect(now, cachescope_engine::Read::All, &mut raw).unwrap();
        raw.drain(..).map(|s| derive.row(s, Duration::ZERO)).filter(|r| r.domain == 1).collect::<Vec<_>>()
    };
    let (mut total, mut local) = (0u64, 0u64);
    let first = rows(&mut b, p.now()); // no data yet in domain 1 → Unavailable
    assert!(first.iter().all(|r| r.status == Status::Unavailable && r.mbm_total_bytes.is_none()));
    p.advance(Duration::from_millis(1));
    rows(&mut b, p.now()); // first counts: baseline
    let start = p.now();
    for _ in 0..100 {
        p.advance(Duration::from_millis(100));
        for x in rows(&mut b, p.now()) {
            total += x.mbm_total_bytes.unwrap();
            local += x.mbm_local_bytes.unwrap();
        }
    }
    let secs = (p.now() - start).as_secs_f64();
    let want = 4000e6 * secs;
    let wraps = want / (64.0 * (1u64 << 24) as f64);
    assert!(wraps >= 3.0, "{wraps}");
    assert!((total as f64 - want).abs() <= 64.0, "total {total} vs {want}");
    assert!((local as f64 - 0.75 * want).abs() <= 64.0, "local {local}");
}

#[test]
fn freed_rmid_stays_out_of_reuse_until_its_occupancy_decays() {
    let p = platform(
        "intel-xeon-e5-2620v4",
        None,
        "[[container]]\nname = \"old\"\ncpus = [0]\nfootprint_mib = 16\nbandwidth_mbps = 8000\nstop_ms = 200\n\
         [[container]]\nname = \"evictor\"\ncpus = [1]\nfootprint_mib = 32\nbandwidth_mbps = 1000\nstart_ms = 300\n\
         [[container]]\nname = \"new\"\ncpus = [2]\nfootprint_mib = 1\nbandwidth_mbps = 10\nstart_ms = 300\n",
    );
    let mut b = backend(&p, Duration::from_millis(10), true);
    // Hold every RMID but one with placeholder owners so reuse is forced onto the freed one.
    let max = b.reader().caps().max_rmid;
    let old = attach(&mut b, container("old")).unwrap();
    let fillers = (0..max - 1).filter(|i| attach(&mut b, container(&format!("filler{i}"))).is_some()).count();
    assert_eq!(fillers as u32, max - 1);
    p.advance(Duration::from_millis(200));
    let dirty = b.reader().occupancy_bytes(0, old).unwrap().unwrap();
    assert!(dirty > 15 * 1024 * 1024, "{dirty}");
    b.detach("old", p.now()).unwrap();
    p.advance(Duration::from_millis(100)); // 300 ms: evictor and new start
    let waiting = b.attach(&container("new"), &NoSource, p.now()).unwrap();
    assert_eq!(waiting, Attach::Waiting(WaitReason::Limbo), "only a dirty RMID left");
    let threshold = b.allocator().config().threshold_bytes as f64;
    let mut got = None;
    for _ in 0..400 {
        p.advance(Duration::from_millis(5));
        b.upkeep(p.now(), &NoSource).unwrap();
        if let Attach::Monitored { rmid } = b.attach(&container("new"), &NoSource, p.now()).unwrap() {
            got = Some((rmid.unwrap(), p.now()));
            break;
        }
        // Until handed out, the freed RMID's occupancy stays above the threshold.
        assert!(p.true_occupancy(0, old) >= threshold * 0.9);
    }
    let (rm, at) = got.expect("the RMID comes back once the evictor has flushed the old lines");
    assert_eq!(rm, old);
    let upscale = f64::from(b.reader().caps().upscale_factor);
    assert!(p.true_occupancy(0, old) < threshold + upscale, "handed out clean");
    println!("RMID {old} reused at {at:?} after dirty {dirty} B decayed below {threshold} B");
}

#[test]
fn gp_error_and_unavailable_paths() {
    let p = platform(
        "intel-xeon-e5-2699v3",
        None,
        "[[container]]\nname = \"x\"\ncpus = [0]\nfootprint_mib = 1\nbandwidth_mbps = 100\n",
    );
    let r = reader(&p);
    // RMID above the maximum: refused by the register layer before any write.
    let e = r.read(0, r.caps().max_rmid + 1, Event::L3Occupancy).unwrap_err().to_string();
    assert!(e.contains("above the maximum"), "{e}");
    assert!(matches!(
        p.write(0, IA32_PQR_ASSOC, u64::from(r.caps().max_rmid_any) + 1),
        Err(MsrError::GeneralProtection { .. })
    ));
    // An unknown MSR: #GP.
    assert!(matches!(p.read(0, 0x1234), Err(MsrError::GeneralProtection { .. })));
    // Haswell-EP has no MBM: the hardware's Error bit, retried then reported.
    let ops0 = r.stats.msr_ops.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(r.read(0, 1, Event::MbmTotal).unwrap(), Reading::Error);
    let ops = r.stats.msr_ops.load(std::sync::atomic::Ordering::Relaxed) - ops0;
    assert_eq!(ops, 3 * 4, "EVTSEL write, CTR read, EVTSEL re-read, 4 attempts");
    // No data yet: Unavailable after bounded retries.
    assert_eq!(r.read(0, 1, Event::L3Occupancy).unwrap(), Reading::Unavailable);
    // Interference: another agent rewrites EVTSEL once; the retry succeeds and it is counted.
    p.tag_container("x", Some(1));
    p.advance(Duration::from_millis(10));
    p.inject_interference(1);
    assert!(matches!(r.read(0, 1, Event::L3Occupancy).unwrap(), Reading::Count(_)));
    assert_eq!(r.stats.interference.load(std::sync::atomic::Ordering::Relaxed), 1);
    // Persistent interference: bounded, then Error.
    p.inject_interference(100);
    assert_eq!(r.read(0, 1, Event::L3Occupancy).unwrap(), Reading::Error);
}

#[test]
fn core_pinned_groups_on_the_emulator() {
    // No task tagging: traffic carries the RMID of the CPU it runs on.
    let p = platform(
        "intel-xeon-platinum-8160",
        None,
        "[[container]]\nname = \"left\"\ncpus = [0, 1]\nfootprint_mib = 8\nbandwidth_mbps = 2000\n\
         [[container]]\nname = \"right\"\ncpus = [4, 5]\nfootprint_mib = 4\nbandwidth_mbps = 1000\n",
    );
    let r = reader(&p);
    p.write(0, IA32_PQR_ASSOC, 2 << 32).unwrap(); // CLOS 2 on CPU 0
    let groups = parse_core_groups("0-1,4-5").unwrap();
    let pin = CorePinning::apply(p.clone(), &[(groups[0].clone(), 1), (groups[1].clone(), 2)], 191, 191).unwrap();
    assert_eq!(p.read(0, IA32_PQR_ASSOC).unwrap(), (2 << 32) | 1);
    p.advance(Duration::from_millis(500));
    let left = r.occupancy_bytes(0, 1).unwrap().unwrap() as f64;
    let right = r.occupancy_bytes(1, 2).unwrap().unwrap() as f64;
    assert!((left - 8.0 * MIB).abs() < 0.03 * 8.0 * MIB, "{left}");
    assert!((right - 4.0 * MIB).abs() < 0.03 * 4.0 * MIB, "{right}");
    drop(pin);
    assert_eq!(p.read(0, IA32_PQR_ASSOC).unwrap(), 2 << 32, "restored with CLOS");
    assert_eq!(p.read(4, IA32_PQR_ASSOC).unwrap(), 0);
}

#[test]
fn core_groups_through_the_backend_restore_on_shutdown() {
    let p = platform(
        "intel-xeon-platinum-8160",
        None,
        "[[container]]\nname = \"left\"\ncpus = [0, 1]\nfootprint_mib = 8\nbandwidth_mbps = 2000\n",
    );
    p.write(0, IA32_PQR_ASSOC, 2 << 32).unwrap();
    let mut b = backend(&p, Duration::ZERO, false);
    // Without a tagger, threads cannot be followed: only core groups are monitored.
    assert_eq!(
        b.attach(&container("left"), &NoSource, Duration::ZERO).unwrap(),
        Attach::Waiting(WaitReason::CannotTag)
    );
    let group = Container { cpus: Some(vec![0, 1]), ..container("cores 0-1") };
    let rmid = attach(&mut b, group).unwrap();
    assert_eq!(p.read(0, IA32_PQR_ASSOC).unwrap(), (2 << 32) | u64::from(rmid));
    p.advance(Duration::from_millis(500));
    let mut raw = Vec::new();
    b.collect(p.now(), cachescope_engine::Read::All, &mut raw).unwrap();
    assert_eq!(raw.len(), 1, "one domain: the group's cores are all in domain 0");
    let occ = raw[0].occupancy_bytes.unwrap() as f64;
    assert!((occ - 8.0 * MIB).abs() < 0.03 * 8.0 * MIB, "{occ}");
    assert_eq!(b.shutdown().unwrap(), vec!["restored IA32_PQR_ASSOC on 2 CPUs".to_string()]);
    assert_eq!(p.read(0, IA32_PQR_ASSOC).unwrap(), 2 << 32, "restored with CLOS");
}
