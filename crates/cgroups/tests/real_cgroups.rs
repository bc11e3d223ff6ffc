//! Against the real cgroup v2 hierarchy, as root. Each test works in its own cgroup subtree so
//! the host's other cgroups do not interfere; without root or cgroup v2 it says why and skips.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_cgroups::identity::Runtime;
use cachescope_cgroups::watch::{Lifecycle, Watcher};
use cachescope_cgroups::{scan, threads, Hierarchy};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A private subtree under the v2 root, removed (depth first) on drop.
struct TestRoot(PathBuf);

impl TestRoot {
    fn new(tag: &str) -> Option<TestRoot> {
        // SAFETY: geteuid has no preconditions and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            cachescope_testkit::skip("not root, cannot create cgroups");
            return None;
        }
        let h = match Hierarchy::find(Path::new("/proc")) {
            Ok(h) if h.v2 => h,
            other => {
                cachescope_testkit::skip(format!("no cgroup v2 hierarchy ({other:?})"));
                return None;
            }
        };
        let dir = h.root.join(format!("cachescope-test-{tag}-{}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => Some(TestRoot(dir)),
            Err(e) => {
                cachescope_testkit::skip(format!("cannot create {}: {e}", dir.display()));
                None
            }
        }
    }
}

fn rm_tree(p: &Path) {
    if let Ok(entries) = std::fs::read_dir(p) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rm_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(p);
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        rm_tree(&self.0);
    }
}

/// Every test of this file holds it: one counts the process's descriptors, and the others
/// open watchers and sockets (tests run as threads of one process).
static FDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long a wait for an event may take before the test calls it a hang: the events come in
/// milliseconds (the slowest, a reconcile, every 200 ms), on a loaded host in a few seconds.
const HANG: Duration = Duration::from_secs(30);

/// Poll `done` every 10 ms until it holds or [`HANG`] has passed; the time it took.
fn wait_until(mut done: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !done() && t0.elapsed() < HANG {
        std::thread::sleep(Duration::from_millis(10));
    }
    t0.elapsed()
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn discovers_identity_cgroup_id_and_threads() {
    let _fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(root) = TestRoot::new("disc") else { return };
    let uid = "8e2f6a3c_1b4d_4e5f_9a0b_1c2d3e4f5a6b";
    let docker = format!("system.slice/docker-{ID}.scope");
    let pod =
        format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/cri-containerd-{ID}.scope");
    for p in [&docker, &pod, &"system.slice/cron.service".to_string()] {
        std::fs::create_dir_all(root.0.join(p)).unwrap();
    }
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    std::fs::write(root.0.join(&docker).join("cgroup.procs"), child.id().to_string()).unwrap();

    let found = scan(&root.0, &[]).unwrap();
    let by_path: BTreeMap<_, _> = found.iter().map(|c| (c.cgroup_path.clone(), c)).collect();
    assert_eq!(found.len(), 3, "{found:?}");
    let d = by_path[&docker];
    assert_eq!((d.identity.id.as_str(), d.identity.runtime), (ID, Runtime::Docker));
    assert_eq!(d.cgroup_id, Some(std::fs::metadata(root.0.join(&docker)).unwrap().ino()));
    let k = by_path[&pod];
    assert_eq!(k.identity.runtime, Runtime::Containerd);
    assert_eq!(k.identity.pod_uid.as_deref(), Some("8e2f6a3c-1b4d-4e5f-9a0b-1c2d3e4f5a6b"));
    assert_eq!(by_path["system.slice/cron.service"].identity.runtime, Runtime::Systemd);

    let tids = threads(&root.0, &docker, true).unwrap();
    assert_eq!(tids, vec![child.id()]);
    child.kill().unwrap();
    child.wait().unwrap();
    // The killed process leaves the cgroup; its threads list empties.
    let took = wait_until(|| threads(&root.0, &docker, true).unwrap().is_empty());
    println!("threads list empty {took:?} after the kill");
    assert!(threads(&root.0, &docker, true).unwrap().is_empty());
}

/// Events until none came for `quiet` (a check that nothing more comes: what comes later is
/// missed, never a failure).
fn collect(
    rx: &std::sync::mpsc::Receiver<cachescope_cgroups::watch::Event>,
    quiet: Duration,
) -> Vec<cachescope_cgroups::watch::Event> {
    let mut out = Vec::new();
    while let Ok(e) = rx.recv_timeout(quiet) {
        out.push(e);
    }
    out
}

#[test]
fn watcher_reports_start_and_stop() {
    let _fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(root) = TestRoot::new("watch") else { return };
    std::fs::create_dir_all(root.0.join("system.slice")).unwrap();
    let (w, rx) = Watcher::start(&root.0, vec![], Duration::from_secs(3600)).unwrap();
    assert!(collect(&rx, Duration::from_millis(100)).is_empty(), "no containers yet");
    let p = format!("system.slice/docker-{ID}.scope");
    let t0 = Instant::now();
    std::fs::create_dir(root.0.join(&p)).unwrap();
    let e = rx.recv_timeout(HANG).unwrap();
    println!("Started seen after {:?}", t0.elapsed());
    assert_eq!((e.kind, e.container.cgroup_path.as_str()), (Lifecycle::Started, p.as_str()));
    assert_eq!(e.container.cgroup_id, Some(std::fs::metadata(root.0.join(&p)).unwrap().ino()));
    // A new pod slice and a container inside it, created back to back: both levels found.
    let pod = "kubepods.slice/kubepods-pod8e2f6a3c_1b4d_4e5f_9a0b_1c2d3e4f5a6b.slice";
    std::fs::create_dir_all(root.0.join(pod).join(format!("crio-{ID}.scope"))).unwrap();
    let e = rx.recv_timeout(HANG).unwrap();
    assert_eq!(e.container.identity.runtime, Runtime::CriO);
    std::fs::remove_dir(root.0.join(&p)).unwrap();
    let e = rx.recv_timeout(HANG).unwrap();
    assert_eq!((e.kind, e.container.cgroup_path.as_str()), (Lifecycle::Stopped, p.as_str()));
    assert!(collect(&rx, Duration::from_millis(200)).is_empty(), "no duplicates");
    w.stop().unwrap();
}

/// The voluntary context switches of this process's thread named `name`.
fn thread_switches(name: &str) -> Option<u64> {
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        if comm.trim() != name {
            return None;
        }
        let status = std::fs::read_to_string(t.path().join("status")).ok()?;
        status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok())
    })
}

/// With nothing changing and its walk an hour away, the watch thread sleeps: it woke 20 times
/// a second to look at its stop flag (issue 42: a thread's wake-ups are most of an idle
/// collector's cost). Stopping it still ends it at once (the test would hang otherwise).
#[test]
fn an_idle_watcher_does_not_wake() {
    let _fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(root) = TestRoot::new("sleep") else { return };
    std::fs::create_dir_all(root.0.join("system.slice")).unwrap();
    let (w, rx) = Watcher::start(&root.0, vec![], Duration::from_secs(3600)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let before = thread_switches("cgroup-watch").expect("the watch thread is named cgroup-watch");
    std::thread::sleep(Duration::from_secs(1));
    let after = thread_switches("cgroup-watch").unwrap();
    println!("the idle watch thread switched {} times in 1 s", after - before);
    assert!(after - before <= 2, "the idle watch thread woke {} times in 1 s", after - before);
    // And it still sees a change at once.
    std::fs::create_dir(root.0.join(format!("system.slice/docker-{ID}.scope"))).unwrap();
    let e = rx.recv_timeout(HANG).unwrap();
    assert_eq!(e.kind, Lifecycle::Started);
    w.stop().unwrap();
}

#[test]
fn churn_reports_every_start_and_stop_exactly_once_without_leaks() {
    let _fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(root) = TestRoot::new("churn") else { return };
    std::fs::create_dir_all(root.0.join("system.slice")).unwrap();
    let fds_before = fd_count();
    let (w, rx) = Watcher::start(&root.0, vec![], Duration::from_millis(200)).unwrap();
    let watches_before = w.watch_count();
    // Pod slices exist before their containers, as with real runtimes: a container whose
    // parent directory appears and vanishes before any watch is on it cannot be seen by
    // inotify (nor by a rescan).
    let slices: Vec<PathBuf> = (0..20)
        .map(|i| root.0.join(format!("kubepods.slice/kubepods-pod{:08x}_0000_0000_0000_{:012x}.slice", i, i)))
        .collect();
    for s in &slices {
        std::fs::create_dir_all(s).unwrap();
    }
    let took = wait_until(|| w.watch_count() >= watches_before + 21);
    let watches_with_slices = w.watch_count();
    println!("the slices' 21 watches in place after {took:?}");
    let n = 200;
    let t0 = Instant::now();
    for i in 0..n {
        let id = format!("{:064x}", i);
        let p = if i % 2 == 0 {
            root.0.join(format!("system.slice/docker-{id}.scope"))
        } else {
            slices[i % slices.len()].join(format!("cri-containerd-{id}.scope"))
        };
        std::fs::create_dir(&p).unwrap();
        std::fs::remove_dir(&p).unwrap();
    }
    let churn = t0.elapsed();
    // Every event, however long the watcher takes: 2n of them, or a hang. Then a second of
    // quiet (5 reconciles) for a duplicate to show; one later than that is missed, not failed.
    let mut events = Vec::new();
    while events.len() < 2 * n && t0.elapsed() < HANG {
        match rx.recv_timeout(HANG.saturating_sub(t0.elapsed())) {
            Ok(e) => events.push(e),
            Err(_) => break,
        }
    }
    let all_seen = t0.elapsed();
    events.extend(collect(&rx, Duration::from_secs(1)));
    let mut count: BTreeMap<(String, bool), usize> = BTreeMap::new();
    for e in &events {
        *count.entry((e.container.cgroup_path.clone(), e.kind == Lifecycle::Started)).or_default() += 1;
    }
    let starts = count.iter().filter(|((_, s), _)| *s).count();
    let stops = count.iter().filter(|((_, s), _)| !*s).count();
    println!(
        "{n} containers churned in {churn:?}, their events all seen after {all_seen:?}: {} events, {starts} started, \
         {stops} stopped",
        events.len()
    );
    assert!(
        count.values().all(|&v| v == 1),
        "duplicates: {:?}",
        count.iter().filter(|(_, &v)| v != 1).collect::<Vec<_>>()
    );
    assert_eq!((starts, stops), (n, n), "every start and stop reported");
    // Per container, Started precedes Stopped.
    let mut seen = BTreeMap::new();
    for e in &events {
        let started = seen.entry(e.container.cgroup_path.clone()).or_insert(false);
        if e.kind == Lifecycle::Started {
            *started = true;
        } else {
            assert!(*started, "Stopped before Started for {}", e.container.cgroup_path);
        }
    }
    assert_eq!(w.watch_count(), watches_with_slices, "container churn must not add watches");
    for s in &slices {
        std::fs::remove_dir(s).unwrap();
    }
    std::fs::remove_dir(root.0.join("kubepods.slice")).unwrap();
    let took = wait_until(|| w.watch_count() == watches_before);
    println!("the slices' watches gone after {took:?}");
    assert_eq!(w.watch_count(), watches_before, "watches of removed directories leaked");
    w.stop().unwrap();
    assert_eq!(fd_count(), fds_before, "file descriptors leaked");
}

/// A container's threads leave out those of containers nested in it: each thread belongs to
/// the nearest enclosing container.
#[test]
fn nested_containers_own_their_threads() {
    let _fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    use cachescope_cgroups::sandbox::Sandbox;
    let mut sb = match Sandbox::for_host("cachescope-nested-threads") {
        Ok(s) => s,
        Err(why) => return cachescope_testkit::skip(why),
    };
    let outer = sb.add("outer").unwrap();
    let inner = outer.join("inner");
    std::fs::create_dir(&inner).unwrap();
    let mut a = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let mut b = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    std::fs::write(outer.join("cgroup.procs"), a.id().to_string()).unwrap();
    std::fs::write(inner.join("cgroup.procs"), b.id().to_string()).unwrap();
    let root = outer.parent().unwrap().parent().unwrap().to_path_buf();
    let rel = outer.strip_prefix(&root).unwrap().to_str().unwrap().to_string();
    let all = cachescope_cgroups::threads(&root, &rel, true).unwrap();
    let own = cachescope_cgroups::threads_except(&root, &rel, std::slice::from_ref(&inner)).unwrap();
    let _ = (a.kill(), b.kill(), a.wait(), b.wait());
    std::thread::sleep(std::time::Duration::from_millis(100));
    let _ = std::fs::remove_dir(&inner);
    drop(sb);
    assert_eq!(all, vec![a.id().min(b.id()), a.id().max(b.id())]);
    assert_eq!(own, vec![a.id()], "the nested container's thread is its own");
}

/// Past the inotify watch limit, directories are still searched: a container below one is
/// found at the start, and one created there later at the next reconcile; the watcher counts
/// what it could not watch.
#[test]
fn past_the_watch_limit_nothing_escapes() {
    let _fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(root) = TestRoot::new("limit") else { return };
    let deep = root.0.join("a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::create_dir(deep.join(format!("docker-{ID}.scope"))).unwrap();
    let (w, rx) = Watcher::start_limited(&root.0, vec![], Duration::from_millis(200), Some(2)).unwrap();
    let e = rx.recv_timeout(HANG).unwrap();
    assert_eq!(e.container.cgroup_path, format!("a/b/c/docker-{ID}.scope"));
    assert!(w.unwatched() >= 2, "a/b and a/b/c are not watched: {}", w.unwatched());
    let later = format!("crio-{ID}.scope");
    std::fs::create_dir(deep.join(&later)).unwrap();
    let t0 = Instant::now();
    let e = rx.recv_timeout(HANG).unwrap();
    println!("found below an unwatched directory after {:?}", t0.elapsed());
    assert_eq!((e.kind, e.container.cgroup_path), (Lifecycle::Started, format!("a/b/c/{later}")));
    w.stop().unwrap();
}

/// Below a directory it cannot watch, only the periodic walk sees changes: a container whose
/// directory is removed and made again under the same path between two walks (a new cgroup
/// id) is stopped and started again, once each, and one left alone is reported by no walk.
#[test]
fn a_walk_reports_a_directory_made_again_and_nothing_unchanged() {
    let _fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(root) = TestRoot::new("rewalk") else { return };
    let deep = root.0.join("a/b");
    std::fs::create_dir_all(&deep).unwrap();
    let (stay, again) = (format!("docker-{ID}.scope"), format!("crio-{ID}.scope"));
    std::fs::create_dir(deep.join(&stay)).unwrap();
    std::fs::create_dir(deep.join(&again)).unwrap();
    let (w, rx) = Watcher::start_limited(&root.0, vec![], Duration::from_millis(200), Some(1)).unwrap();
    // Each wait ends at its event; HANG is only a hang's ceiling.
    let first = [rx.recv_timeout(HANG).unwrap(), rx.recv_timeout(HANG).unwrap()];
    let old_id = first.iter().find(|e| e.container.cgroup_path.ends_with(&again)).unwrap().container.cgroup_id;
    std::fs::remove_dir(deep.join(&again)).unwrap();
    std::fs::create_dir(deep.join(&again)).unwrap();
    let mut later = vec![rx.recv_timeout(HANG).unwrap(), rx.recv_timeout(HANG).unwrap()];
    // Nothing more: the container left alone is reported by no walk (five walks' time).
    later.extend(collect(&rx, Duration::from_secs(1)));
    let seen: Vec<(Lifecycle, &str)> =
        later.iter().map(|e| (e.kind.clone(), e.container.cgroup_path.as_str())).collect();
    let path = format!("a/b/{again}");
    assert_eq!(seen, [(Lifecycle::Stopped, path.as_str()), (Lifecycle::Started, path.as_str())]);
    assert_eq!(later[0].container.cgroup_id, old_id);
    assert_ne!(later[1].container.cgroup_id, old_id, "the new directory's id");
    w.stop().unwrap();
}

/// Two cgroups whose names carry the same runtime id (a container id reused under two
/// parents): the first in path order keeps the bare id, the other gets `id@path`, the same in
/// every run whatever order the directories were made in.
#[test]
fn a_shared_runtime_id_gets_the_same_suffix_in_every_run() {
    let _fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    use cachescope_cgroups::source::HostContainers;
    use cachescope_engine::{Change, ContainerSource};
    let Some(t) = TestRoot::new("dupid") else { return };
    let h = Hierarchy::find(Path::new("/proc")).unwrap();
    let id = format!("{:0>64x}", u128::from(std::process::id()) << 32 | 0xd0b1e);
    // Made in reverse order of their paths.
    for parent in ["b", "a"] {
        std::fs::create_dir_all(t.0.join(parent).join(format!("docker-{id}.scope"))).unwrap();
    }
    let run = || {
        let mut src = HostContainers::start(&h, Vec::new()).unwrap();
        let mut ids: BTreeMap<String, String> = BTreeMap::new();
        let deadline = Instant::now() + HANG;
        while ids.len() < 2 && Instant::now() < deadline {
            let mut out = Vec::new();
            src.poll(Duration::ZERO, &mut out).unwrap();
            for ch in out {
                if let Change::Started(c) = ch {
                    if c.meta.id.starts_with(&id) {
                        ids.insert(c.meta.cgroup_path.clone(), c.meta.id.clone());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        ids
    };
    let first = run();
    assert_eq!(first.len(), 2, "{first:?}");
    let rel = t.0.strip_prefix(&h.root).unwrap().to_str().unwrap().to_string();
    let a = format!("{rel}/a/docker-{id}.scope");
    let b = format!("{rel}/b/docker-{id}.scope");
    assert_eq!(first[&a], id, "{first:?}");
    assert_eq!(first[&b], format!("{id}@{b}"), "{first:?}");
    assert_eq!(run(), first, "the same in a second run");
}
