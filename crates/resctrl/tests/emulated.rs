//! The resctrl client and its container session against the emulated resctrl filesystem,
//! mounted over FUSE: real syscalls through the real VFS. Needs root and /dev/fuse; without
//! them each test says why and skips.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_emu::{EmuPlatform, Scenario};
use cachescope_emu_resctrl::{fuse_available, proc_resolver, Fault, Mounted, Options, TaskLookup, TaskResolver};
use cachescope_engine::backend::{BackendInfo, CacheBackend};
use cachescope_engine::containers::{Change, Container, ContainerSource};
use cachescope_engine::derive::Derive;
use cachescope_engine::slots::Slots;
use cachescope_engine::{ContainerMeta, Row, Status, WaitReason};
use cachescope_engine::{PartError, PartResult};
use cachescope_hw::msr::Event;
use cachescope_resctrl::{ContainerGroups, Domain, GroupRef, Resctrl, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const SCENARIO: &str = include_str!("../../../testdata/scenarios/thrash-then-stream.toml");

/// Fake thread ids: 100 is the thrashing workload, 101..=4999 exist with no traffic, the rest
/// do not exist.
fn resolver() -> TaskResolver {
    Box::new(|tid| match tid {
        100 => TaskLookup::Exists(Some("thrash".into())),
        101..=4999 => TaskLookup::Exists(None),
        _ => TaskLookup::Missing,
    })
}

fn mount(opts: Options) -> Option<Mounted> {
    if let Err(why) = fuse_available() {
        cachescope_testkit::skip(why);
        return None;
    }
    let sc = Scenario::parse(SCENARIO, Path::new("t.toml")).unwrap();
    let p = Arc::new(EmuPlatform::new(&sc).unwrap());
    let opts = Options { wall_clock: false, min_limbo: Duration::ZERO, ..opts };
    Some(Mounted::start(p, opts, resolver()).unwrap())
}

/// Containers as a test sees them: thread lists (a queue of successive answers per id, the
/// last one repeating) and CPU usage.
#[derive(Default)]
struct Fake {
    threads: RefCell<HashMap<String, Vec<Vec<u32>>>>,
    cpu: RefCell<HashMap<String, u64>>,
}

impl Fake {
    fn with(ids: &[(&str, Vec<u32>)]) -> Fake {
        let f = Fake::default();
        for (id, t) in ids {
            f.threads.borrow_mut().insert(id.to_string(), vec![t.clone()]);
        }
        f
    }
}

impl ContainerSource for Fake {
    fn poll(&mut self, _: Duration, _: &mut Vec<Change>) -> PartResult {
        Ok(())
    }
    fn describe(&self) -> String {
        "fake".into()
    }
    fn threads(&self, id: &str) -> std::io::Result<Vec<u32>> {
        let mut m = self.threads.borrow_mut();
        let q = m.entry(id.to_string()).or_default();
        Ok(if q.len() > 1 { q.remove(0) } else { q.first().cloned().unwrap_or_default() })
    }
    fn cpu_usage_usec(&self, id: &str) -> Option<u64> {
        self.cpu.borrow().get(id).copied()
    }
}

fn row<'a>(rows: &'a [Row], id: &str, dom: u32) -> &'a Row {
    rows.iter().find(|r| r.container.id == id && r.domain == dom).unwrap()
}

/// The backend with the engine's RMID policy and derivation around it, stepped by hand.
struct Run {
    s: ContainerGroups,
    slots: Slots,
    derive: Derive,
}

fn container(id: &str) -> Container {
    Container { meta: ContainerMeta::named(id), ..Default::default() }
}

impl Run {
    fn new(rc: Resctrl) -> Run {
        let info = BackendInfo::new("resctrl", String::new(), None);
        let s = ContainerGroups::new(rc, info).unwrap();
        let derive = Derive::new(s.info().mbm_width, s.info().mbm_unit, 0);
        Run { s, slots: Slots::default(), derive }
    }

    /// Start a container; whether it has a group now.
    fn start(&mut self, id: &str, src: &Fake, now: Duration) -> bool {
        self.slots.start(container(id), &mut self.s, src, now).unwrap();
        self.slots.held().contains_key(id)
    }

    fn stop(&mut self, id: &str) {
        self.slots.stop(id, &mut self.s, Duration::ZERO).unwrap();
    }

    fn sample(&mut self) -> Vec<Row> {
        let mut raw = Vec::new();
        self.s.collect(Duration::ZERO, cachescope_engine::Read::All, &mut raw).unwrap();
        raw.into_iter().map(|x| self.derive.row(x, Duration::ZERO)).collect()
    }

    fn maintain(&mut self, src: &Fake, now: Duration) {
        self.slots.upkeep(&mut self.s, src, now, &|id| src.cpu_usage_usec(id)).unwrap();
    }

    fn waiting(&self, id: &str) -> Option<WaitReason> {
        self.slots.waiting().get(id).map(|w| w.reason)
    }
}

#[test]
fn container_lifecycle_end_to_end() {
    let Some(m) = mount(Options::default()) else { return };
    let rc = Resctrl::at(m.root());
    let info = rc.info().unwrap();
    assert_eq!(info.num_rmids, 192);
    assert_eq!(info.events(), vec![Event::L3Occupancy, Event::MbmTotal, Event::MbmLocal]);
    let mut s = Run::new(rc.clone());
    let src = Fake::with(&[("thrash", vec![100, 101])]);
    assert!(s.start("thrash", &src, Duration::ZERO));
    assert!(m.root().join("mon_groups/cachescope-thrash").is_dir());
    let tasks = std::fs::read_to_string(m.root().join("mon_groups/cachescope-thrash/tasks")).unwrap();
    assert_eq!(tasks, "100\n101\n");
    m.platform().advance(Duration::from_secs(1));
    let first = s.sample();
    let r = row(&first, "thrash", 0);
    assert_eq!(r.status, Status::Ok);
    assert!(r.llc_occupancy_bytes.unwrap() > 20 << 20, "{r:?}");
    assert_eq!(r.mbm_total_bytes, None, "no baseline on the first read");
    m.platform().advance(Duration::from_millis(500));
    let second = s.sample();
    let r = row(&second, "thrash", 0);
    // 4000 MB/s × 0.5 s, quantized to the 98304-byte upscale unit.
    let tot = r.mbm_total_bytes.unwrap() as f64;
    assert!((tot - 2e9).abs() <= 2.0 * 98304.0, "{tot}");
    let loc = r.mbm_local_bytes.unwrap() as f64;
    assert!((loc - 1.5e9).abs() <= 2.0 * 98304.0, "{loc}");
    // Domain 1 never saw the workload: the kernel's word, not 0.
    assert_eq!(row(&second, "thrash", 1).status, Status::Unavailable);
    assert_eq!(row(&second, "thrash", 1).llc_occupancy_bytes, None);
    s.stop("thrash");
    assert!(!m.root().join("mon_groups/cachescope-thrash").exists());
    assert_eq!(m.state().rmid_counts(), (0, 1), "the RMID went to limbo");
    assert_eq!(s.s.stats().created, 1);
    assert_eq!(s.s.stats().removed, 1);
}

/// A sample carries the time its counters were read, not the time the read was asked for: on
/// a loaded host the reads of many groups take milliseconds, and bandwidth over an interval
/// needs the interval the bytes were counted in.
#[test]
fn samples_carry_the_time_of_their_read() {
    let Some(m) = mount(Options::default()) else { return };
    let mut s = Run::new(Resctrl::at(m.root()));
    let src = Fake::with(&[("thrash", vec![100]), ("idle", vec![101])]);
    assert!(s.start("thrash", &src, Duration::ZERO) && s.start("idle", &src, Duration::ZERO));
    let read = |s: &mut Run, now: Duration| {
        let mut raw = Vec::new();
        s.s.collect(now, cachescope_engine::Read::All, &mut raw).unwrap();
        raw.iter().map(|r| r.at).collect::<Vec<_>>()
    };
    // Before the engine says when the run began: the time asked for.
    assert!(read(&mut s, Duration::from_secs(3)).iter().all(|&at| at == Duration::from_secs(3)));
    // The run began 10 s ago and the engine asks at its 3 s: the reads happen now, at 10 s.
    let began = std::time::Instant::now();
    s.s.origin(cachescope_platform::clock::monotonic() - Duration::from_secs(10));
    let ats = read(&mut s, Duration::from_secs(3));
    let spent = began.elapsed();
    assert_eq!(ats.len(), 4, "two containers, two domains");
    for &at in &ats {
        assert!(at >= Duration::from_secs(10) && at <= Duration::from_secs(10) + spent, "{at:?}");
    }
    // Never earlier than asked: a clock that says otherwise is not followed backwards.
    assert!(read(&mut s, Duration::from_secs(60)).iter().all(|&at| at == Duration::from_secs(60)));
}

#[test]
fn domains_with_gaps_and_snc_sub_domains() {
    let Some(m) = mount(Options { domain_ids: Some(vec![0, 2]), snc: 2, ..Options::default() }) else { return };
    let rc = Resctrl::at(m.root());
    assert_eq!(rc.domains().unwrap(), vec![Domain { id: 0, sub: vec![0, 1] }, Domain { id: 2, sub: vec![2, 3] }]);
    let mut s = Run::new(rc.clone());
    s.start("thrash", &Fake::with(&[("thrash", vec![100])]), Duration::ZERO);
    m.platform().advance(Duration::from_secs(1));
    let rows = s.sample();
    // Each SNC node is a domain of the rows (its mon_sub_L3_YY).
    assert_eq!(rows.iter().map(|r| r.domain).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    let g = GroupRef { ctrl: String::new(), name: "cachescope-thrash".into() };
    let sub = |n| rc.read_sub(&g, 0, n, Event::L3Occupancy).unwrap().bytes().unwrap();
    let node = |d| row(&rows, "thrash", d).llc_occupancy_bytes.unwrap();
    assert_eq!((node(0), node(1)), (sub(0), sub(1)), "a node's row is its mon_sub_L3 file");
    let l3 = std::fs::read_to_string(rc.group_dir(&g).join("mon_data/mon_L3_00/llc_occupancy")).unwrap();
    assert_eq!(node(0) + node(1), l3.trim().parse::<u64>().unwrap(), "the nodes sum to the L3 file");
}

#[test]
fn error_unavailable_unassigned_are_statuses() {
    // 4 assignable counters per domain: two groups get MBM counters, the third does not.
    let Some(m) = mount(Options { mbm_counters: Some(4), ..Options::default() }) else { return };
    let rc = Resctrl::at(m.root());
    let a = rc.info().unwrap().assign.unwrap();
    assert_eq!((a.mode.as_str(), a.counters.clone()), ("mbm_event", vec![(Some(0), 4), (Some(1), 4)]));
    let mut s = Run::new(rc);
    // Only c's thread (100) makes traffic.
    let src = Fake::with(&[("a", vec![101]), ("b", vec![102]), ("c", vec![100])]);
    for id in ["a", "b", "c"] {
        assert!(s.start(id, &src, Duration::ZERO));
    }
    m.platform().advance(Duration::from_millis(200));
    m.state().inject("mon_groups/cachescope-b", 0, Some(Fault::Error));
    let rows = s.sample();
    assert_eq!(row(&rows, "a", 0).status, Status::Unavailable, "no data for an RMID that never ran");
    assert_eq!(row(&rows, "b", 0).status, Status::Error);
    assert_eq!(row(&rows, "b", 0).llc_occupancy_bytes, None);
    let c = row(&rows, "c", 0);
    assert_eq!(c.status, Status::Unassigned);
    assert!(c.llc_occupancy_bytes.is_some_and(|b| b > 0) && c.mbm_total_bytes.is_none(), "{c:?}");
    m.state().inject("mon_groups/cachescope-b", 0, Some(Fault::Unavailable));
    assert_eq!(row(&s.sample(), "b", 0).status, Status::Unavailable);
}

#[test]
fn group_deleted_between_listing_and_reading() {
    let Some(m) = mount(Options::default()) else { return };
    let rc = Resctrl::at(m.root());
    let mut s = Run::new(rc.clone());
    let src = Fake::with(&[("thrash", vec![100])]);
    s.start("thrash", &src, Duration::ZERO);
    m.platform().advance(Duration::from_millis(300));
    let listed = rc.our_groups().unwrap();
    assert_eq!(listed.len(), 1);
    // Another agent (pqos --reset, say) removes it after we listed it.
    std::fs::remove_dir(m.root().join("mon_groups/cachescope-thrash")).unwrap();
    let rows = s.sample();
    assert_eq!(row(&rows, "thrash", 0).status, Status::Error);
    assert_eq!(s.s.stats().groups_vanished, 1);
    s.maintain(&src, Duration::from_millis(300));
    assert_eq!(s.s.stats().recreated, 1);
    assert!(m.root().join("mon_groups/cachescope-thrash").is_dir());
    let tasks = std::fs::read_to_string(m.root().join("mon_groups/cachescope-thrash/tasks")).unwrap();
    assert_eq!(tasks, "100\n", "threads re-assigned");
    m.platform().advance(Duration::from_millis(100));
    let r = s.sample();
    assert_eq!(row(&r, "thrash", 0).status, Status::Ok);
    assert_eq!(row(&r, "thrash", 0).mbm_total_bytes, None, "new generation: no delta across groups");
    assert!(rc.read_sub(&listed[0].0, 0, 0, Event::L3Occupancy).is_err(), "no SNC here");
}

#[test]
fn threads_exiting_and_spawning_during_assignment() {
    let Some(m) = mount(Options::default()) else { return };
    let rc = Resctrl::at(m.root());
    let g = rc.create_group("", "web").unwrap();
    // Round 1: 101 and 6000 (which exits before it is moved: ESRCH). Round 2: 102 was
    // spawned meanwhile. Round 3: nothing new.
    let mut answers = vec![vec![101, 6000], vec![101, 102], vec![101, 102]].into_iter();
    let a = rc.assign_tasks(&g, &mut || Ok(answers.next().unwrap_or_default())).unwrap();
    assert_eq!((a.moved, a.vanished, a.rounds), (2, 1, 3));
    let tasks = std::fs::read_to_string(rc.group_dir(&g).join("tasks")).unwrap();
    assert_eq!(tasks, "101\n102\n");
    // EINVAL: a thread in another CTRL_MON group is refused, with the kernel's reason.
    std::fs::create_dir(m.root().join("gold")).unwrap();
    std::fs::write(m.root().join("gold/tasks"), "103\n").unwrap();
    let a = rc.assign_tasks(&g, &mut || Ok(vec![103])).unwrap();
    assert_eq!(a.refused, vec![(103, "Can't move task to different control group".to_string())]);
    // A container's group can live under its CTRL_MON group instead.
    let g2 = rc.create_group("gold", "batch").unwrap();
    assert_eq!(rc.assign_tasks(&g2, &mut || Ok(vec![103])).unwrap().moved, 1);
    assert_eq!(rc.our_groups().unwrap().len(), 2);
}

#[test]
fn real_threads_through_proc() {
    if let Err(why) = fuse_available() {
        cachescope_testkit::skip(why);
        return;
    }
    let sc = Scenario::parse(SCENARIO, Path::new("t.toml")).unwrap();
    let p = Arc::new(EmuPlatform::new(&sc).unwrap());
    let opts = Options { wall_clock: false, ..Options::default() };
    let m = Mounted::start(p, opts, proc_resolver("/proc".into(), |_| None)).unwrap();
    let rc = Resctrl::at(m.root());
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
        let _ = rx.recv();
    });
    let tid = tid_rx.recv().unwrap();
    let g = rc.create_group("", "self").unwrap();
    let a = rc.assign_tasks(&g, &mut || Ok(vec![tid, 0x7fff_fff0])).unwrap();
    assert_eq!((a.moved, a.vanished), (1, 1));
    let tasks = || std::fs::read_to_string(rc.group_dir(&g).join("tasks")).unwrap();
    assert_eq!(tasks(), format!("{tid}\n"));
    drop(tx);
    t.join().unwrap();
    // A joined thread may still be in /proc for a moment (the kernel wakes the joiner before it
    // reaps the thread).
    assert!(eventually(|| tasks().is_empty()), "an exited thread leaves the list: {:?}", tasks());
}

#[test]
fn exhaustion_budget_and_recovery_after_limbo() {
    let Some(m) = mount(Options::default()) else { return };
    let rc = Resctrl::at(m.root());
    let mut s = Run::new(rc.clone());
    s.slots.policy.min_hold = Duration::ZERO;
    // 191 usable RMIDs (1..=191); "thrash" is the one whose lines fill the cache.
    let mut ids: Vec<(String, Vec<u32>)> = vec![("thrash".into(), vec![100])];
    ids.extend((0..190).map(|i| (format!("idle{i:03}"), vec![200 + i])));
    ids.push(("late".into(), vec![150]));
    ids.push(("hot".into(), vec![151]));
    let src = Fake::default();
    for (id, t) in &ids {
        src.threads.borrow_mut().insert(id.clone(), vec![t.clone()]);
        src.cpu.borrow_mut().insert(id.clone(), 0);
    }
    let mut now = Duration::ZERO;
    for (id, _) in &ids {
        s.start(id, &src, now);
    }
    assert_eq!(s.s.monitored().count(), 191);
    assert_eq!(s.slots.waiting().len(), 2);
    assert!(s.slots.waiting().values().all(|x| x.reason == WaitReason::Exhausted));
    assert!(rc.last_cmd_status().starts_with("Out of RMIDs"));
    m.platform().advance(Duration::from_secs(1));
    let rows = s.sample();
    assert!(rows.iter().all(|r| r.container.id != "late" && r.container.id != "hot"), "waiting: no group read");
    // "hot" starts using a core: the budget gives it the RMID of an idle container.
    s.maintain(&src, now);
    now += Duration::from_secs(1);
    src.cpu.borrow_mut().insert("hot".into(), 1_000_000);
    src.cpu.borrow_mut().insert("thrash".into(), 800_000);
    s.maintain(&src, now);
    assert!(s.s.monitored().any(|(id, _)| id == "hot"), "{:?}", s.slots.waiting().keys());
    assert_eq!(s.slots.evictions, 1);
    let evicted: Vec<&String> =
        s.slots.waiting().iter().filter(|(_, w)| w.reason == WaitReason::Evicted).map(|(k, _)| k).collect();
    assert_eq!(evicted.len(), 1);
    assert!(evicted[0].starts_with("idle"), "the idlest went without: {evicted:?}");
    // thrash stops: its RMID is dirty (24 MiB resident), so the next one waits in limbo...
    s.stop("thrash");
    s.maintain(&src, now);
    assert!(s.slots.waiting().values().any(|w| w.reason == WaitReason::Limbo), "{:?}", s.slots.waiting().keys());
    // ... until the streaming workload (from 3 s) has evicted those lines.
    let mut recovered = false;
    for _ in 0..100 {
        m.platform().advance(Duration::from_millis(100));
        now += Duration::from_millis(100);
        s.maintain(&src, now);
        if s.slots.waiting().len() == 1 {
            recovered = true;
            break;
        }
    }
    assert!(recovered, "{:?}", s.slots.waiting().keys());
    assert_eq!(s.s.monitored().count(), 191);
}

#[test]
fn leftovers_adopted_or_removed_and_others_untouched() {
    let Some(m) = mount(Options::default()) else { return };
    let root = m.root();
    for g in ["mon_groups/cachescope-alive", "mon_groups/cachescope-dead", "mon_groups/theirs"] {
        std::fs::create_dir(root.join(g)).unwrap();
    }
    std::fs::write(root.join("mon_groups/theirs/tasks"), "104\n").unwrap();
    let rc = Resctrl::at(root);
    let mut s = Run::new(rc.clone());
    let src = Fake::with(&[("alive", vec![101])]);
    // The running container is attached first, then the first upkeep removes the rest.
    assert!(s.start("alive", &src, Duration::ZERO));
    s.maintain(&src, Duration::ZERO);
    assert_eq!((s.s.stats().adopted, s.s.stats().leftovers_removed), (1, 1));
    assert!(root.join("mon_groups/cachescope-alive").is_dir());
    assert!(!root.join("mon_groups/cachescope-dead").exists(), "its RMID is returned");
    assert!(root.join("mon_groups/theirs").is_dir(), "never touch others' groups");
    assert_eq!(std::fs::read_to_string(root.join("mon_groups/theirs/tasks")).unwrap(), "104\n");
    assert_eq!(std::fs::read_to_string(root.join("mon_groups/cachescope-alive/tasks")).unwrap(), "101\n");
    s.slots.stop_all(&mut s.s, Duration::ZERO).unwrap();
    assert!(root.join("mon_groups/theirs").is_dir());
    assert_eq!(rc.mon_groups().unwrap().len(), 1);
}

#[test]
fn hostile_container_ids_are_refused() {
    let Some(m) = mount(Options::default()) else { return };
    let rc = Resctrl::at(m.root());
    let mut s = Run::new(rc.clone());
    let src = Fake::default();
    for id in ["../../info", "..", "a/b", "x\ny", ".hidden", &"z".repeat(200)] {
        assert!(!s.start(id, &src, Duration::ZERO), "{id:?}");
        assert_eq!(s.waiting(id), Some(WaitReason::BadId));
    }
    assert_eq!(rc.mon_groups().unwrap(), vec![], "nothing created");
    assert!(m.root().join("info/L3_MON").is_dir());
    assert_eq!(rc.info().unwrap().num_rmids, 192);
    let v = Value::parse(b"Unassigned\n");
    assert_eq!(v.map(Value::status), Some(Status::Unassigned));
}

/// The threads a fake cgroup directory lists (its `threads` file).
fn fake_threads(dir: &Path) -> std::io::Result<Vec<u32>> {
    Ok(std::fs::read_to_string(dir.join("threads"))?.split_whitespace().filter_map(|t| t.parse().ok()).collect())
}

/// Until `what` holds, at most 30 s (only a hung tagger takes that long; it acts within
/// milliseconds of an event).
fn eventually(what: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    what()
}

/// Whether an inotify descriptor of this process watches `file` (its fdinfo lists each watch's
/// inode, in hex).
fn watched(file: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(ino) = std::fs::metadata(file).map(|m| m.ino()) else { return false };
    let want = format!(" ino:{ino:x} ");
    std::fs::read_dir("/proc/self/fdinfo").unwrap().flatten().any(|e| {
        std::fs::read_to_string(e.path())
            .is_ok_and(|t| t.lines().any(|l| l.starts_with("inotify") && l.contains(&want)))
    })
}

/// The tagger: a new container gets its group when its cgroup reports its first thread
/// (`cgroup.events` changes), not before; a thread that joins while it is young follows; a
/// container whose first thread sits in another owner's MON group is left to it.
#[test]
fn young_containers_are_tagged_at_their_first_thread() {
    let Some(m) = mount(Options::default()) else { return };
    let root = m.root();
    std::fs::create_dir(root.join("mon_groups/theirs")).unwrap();
    std::fs::write(root.join("mon_groups/theirs/tasks"), "104\n").unwrap();
    let cg = tempfile::tempdir().unwrap();
    let (young, taken) = (cg.path().join("young"), cg.path().join("taken"));
    for d in [&young, &taken] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join("cgroup.events"), "populated 0\nfrozen 0\n").unwrap();
        std::fs::write(d.join("threads"), "").unwrap();
    }
    let (tagger, tx) = cachescope_resctrl::tagger::Tagger::start(Resctrl::at(root), fake_threads).unwrap();
    let t0 = std::time::Instant::now();
    tx.young("young", &young);
    tx.young("taken", &taken);
    // The tagger takes them in order, each looked at as it is watched: once "taken" is
    // watched, "young" was looked at, empty.
    assert!(eventually(|| watched(&taken.join("cgroup.events"))), "the tagger follows the young containers");
    let group = root.join("mon_groups/cachescope-young");
    assert!(!group.exists(), "no group for an empty cgroup");
    let populate = |d: &Path, tids: &str| {
        std::fs::write(d.join("threads"), tids).unwrap();
        std::fs::write(d.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
    };
    populate(&young, "101\n");
    populate(&taken, "104\n");
    let tasks = || std::fs::read_to_string(group.join("tasks")).unwrap_or_default();
    assert!(eventually(|| tasks().contains("101")), "tagged at its first thread: {:?}", tasks());
    // (Within YOUNG of its start, or the tagger no longer follows it: tens of ms here.)
    println!(
        "a thread joins {:?} after the container started (YOUNG {:?})",
        t0.elapsed(),
        cachescope_resctrl::tagger::YOUNG
    );
    populate(&young, "101\n102\n");
    assert!(eventually(|| tasks().contains("102")), "a thread that joined later: {:?}", tasks());
    let s = tagger.stats();
    let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    // The other cgroup is looked at in its own time (a CI run read the stats before).
    assert!(eventually(|| n(&s.left) == 1), "another owner's container left to it");
    // Counted after the thread is written (the test may see the thread first).
    assert!(eventually(|| n(&s.threads_moved) == 2), "{s:?}");
    assert!(!root.join("mon_groups/cachescope-taken").exists(), "another owner's container");
    assert_eq!(std::fs::read_to_string(root.join("mon_groups/theirs/tasks")).unwrap(), "104\n");
    assert_eq!((n(&s.tagged) >= 1, n(&s.threads_moved), n(&s.left)), (true, 2, 1));
    drop(tagger);
}

/// A runtime that moves a container into a group of its own after we tagged it (crun's
/// enableMonitoring does, after the tagger saw the cgroup populated): its group wins once ours
/// is empty (ours removed, theirs read, nothing moved back); while some of the container is
/// still in ours, nothing is moved either way.
#[test]
fn a_runtimes_own_group_made_after_ours_wins_without_a_fight() {
    let Some(m) = mount(Options::default()) else { return };
    let root = m.root();
    let rc = Resctrl::at(root);
    let mut s = Run::new(rc.clone());
    let src = Fake::with(&[("web", vec![101]), ("db", vec![102, 103])]);
    assert!(s.start("web", &src, Duration::ZERO) && s.start("db", &src, Duration::ZERO));
    // crun: a CTRL_MON group named after the container, a MON group in it, the pid into both.
    for (c, tid) in [("web", "101"), ("db", "102")] {
        std::fs::create_dir_all(root.join(format!("{c}/mon_groups/{c}"))).unwrap();
        std::fs::write(root.join(format!("{c}/tasks")), tid).unwrap();
        std::fs::write(root.join(format!("{c}/mon_groups/{c}/tasks")), tid).unwrap();
    }
    s.maintain(&src, Duration::ZERO);
    assert!(!root.join("mon_groups/cachescope-web").exists(), "ours, emptied by the runtime, is removed");
    assert_eq!(std::fs::read_to_string(root.join("web/mon_groups/web/tasks")).unwrap(), "101\n", "nothing moved back");
    assert_eq!(std::fs::read_to_string(root.join("db/mon_groups/db/tasks")).unwrap(), "102\n", "nor here");
    assert_eq!(std::fs::read_to_string(root.join("mon_groups/cachescope-db/tasks")).unwrap(), "103\n");
    assert_eq!((s.s.stats().yielded, s.s.stats().foreign), (1, 1));
    let rows = s.sample();
    assert!(rows.iter().any(|r| r.container.id == "web"), "the container is read from the runtime's group");
    s.slots.stop_all(&mut s.s, Duration::ZERO).unwrap();
    assert!(root.join("web/mon_groups/web").is_dir(), "the runtime's group is left to it");
    assert!(!root.join("mon_groups/cachescope-db").exists());
}

/// The mount going away under a run is `Gone` (the CLI's exit 3), never one container's
/// trouble (which would only make that container wait).
#[test]
fn a_mount_that_goes_away_is_gone_not_a_containers_trouble() {
    let Some(m) = mount(Options::default()) else { return };
    let mut run = Run::new(Resctrl::at(m.root()));
    let src = Fake::with(&[("b", vec![102])]);
    drop(m);
    match run.s.attach(&container("b"), &src, Duration::ZERO) {
        Err(PartError::Gone(why)) => assert!(why.contains("no longer mounted"), "{why}"),
        other => panic!("{other:?}"),
    }
}
