//! This host's containers as the engine's container source: the cgroup v2 watcher's events,
//! and each container's threads and CPU use read from its cgroup.

use crate::identity::{Glob, Runtime};
use crate::watch::{Early, Event, Lifecycle, Watcher};
use crate::{cpu_usage_usec, threads_except, CgroupError, Hierarchy};
use cachescope_engine::containers::{Change, Container, ContainerSource};
use cachescope_engine::PartResult;
use cachescope_engine::{ById, ContainerMeta};
use cachescope_runtimes::{Bundles, EngineApi, Resolver, Which};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

pub struct HostContainers {
    watcher: Option<Watcher>,
    events: Receiver<Event>,
    root: PathBuf,
    /// id → exact cgroup path (relative to the root) of the containers running.
    by_id: BTreeMap<ById, PathBuf>,
    /// exact cgroup path → the id it was reported under (unique: a second cgroup claiming a
    /// runtime id already in use is reported as `ID@PATH`, never hidden behind the first).
    by_path: BTreeMap<PathBuf, Arc<ContainerMeta>>,
    what: String,
    /// Said that the inotify watch limit was reached.
    said_unwatched: bool,
    /// Asks Docker and Podman about their containers (names, pods), off the sampling path.
    resolver: Resolver,
}

impl HostContainers {
    /// Watch the cgroup v2 tree of `h` for containers (runtimes by name, and `globs`).
    pub fn start(h: &Hierarchy, globs: Vec<Glob>) -> Result<HostContainers, CgroupError> {
        Self::start_with(h, globs, None)
    }

    /// As [`start`](Self::start), telling `early` of each container that starts, in the
    /// watcher's thread, as soon as its cgroup appears.
    pub fn start_with(h: &Hierarchy, globs: Vec<Glob>, early: Option<Early>) -> Result<HostContainers, CgroupError> {
        const RUNTIMES: &str = "Docker, containerd, CRI-O and Podman containers and Kubernetes pods, by cgroup name";
        let what = if globs.is_empty() {
            RUNTIMES.to_string()
        } else {
            format!("{RUNTIMES}, and {} --containers glob(s)", globs.len())
        };
        // inotify reports changes as they happen, and a queue overflow starts a full walk at
        // once; the periodic walk is a safety net that costs a walk of the whole tree (on a
        // host of a thousand containers, half the watcher's CPU time when it came every
        // 10 s). Below directories past the watch limit it comes every 10 s (watch.rs).
        let (watcher, events) = Watcher::start_with(&h.root, globs, Duration::from_secs(60), None, early)?;
        Ok(HostContainers {
            watcher: Some(watcher),
            events,
            root: h.root.clone(),
            by_id: BTreeMap::new(),
            by_path: BTreeMap::new(),
            what,
            said_unwatched: false,
            resolver: Resolver::start(EngineApi::docker(), EngineApi::podman(), Bundles::cri()),
        })
    }
}

impl ContainerSource for HostContainers {
    fn poll(&mut self, _now: Duration, out: &mut Vec<Change>) -> PartResult {
        if let Some(n) = self.watcher.as_ref().map(Watcher::unwatched).filter(|&n| n > 0 && !self.said_unwatched) {
            self.said_unwatched = true;
            cachescope_platform::say!(
                "the inotify watch limit is reached (fs.inotify.max_user_watches): {n} cgroup \
                 directories are searched every 10 s instead of watched; containers there start late in the data"
            );
        }
        for line in self.resolver.news() {
            cachescope_platform::say!("{line}");
        }
        while let Ok(ev) = self.events.try_recv() {
            let c = ev.container;
            match ev.kind {
                Lifecycle::Started => {
                    if self.by_path.contains_key(&c.rel) {
                        continue;
                    }
                    let mut id = c.identity.id.clone();
                    if self.by_id.contains_key(id.as_str()) {
                        id = format!("{id}@{}", c.cgroup_path);
                    }
                    // Two paths whose text is the same (one not UTF-8): both are reported.
                    let base = id.clone();
                    let mut n = 1;
                    while self.by_id.contains_key(id.as_str()) {
                        n += 1;
                        id = format!("{base}#{n}");
                    }
                    let meta = Arc::new(ContainerMeta {
                        id,
                        name: c.name.clone(),
                        pod_uid: c.identity.pod_uid.clone(),
                        cgroup_path: c.cgroup_path.clone(),
                        ..Default::default()
                    });
                    self.by_id.insert(ById(meta.clone()), c.rel.clone());
                    self.by_path.insert(c.rel.clone(), meta.clone());
                    let which = match c.identity.runtime {
                        Runtime::Docker => Some(Which::Docker),
                        Runtime::Podman => Some(Which::Podman),
                        Runtime::Containerd | Runtime::CriO | Runtime::Kubernetes => Some(Which::Cri),
                        _ => None,
                    };
                    if let Some(w) = which {
                        self.resolver.ask(w, &c.identity.id, meta.clone());
                    }
                    out.push(Change::Started(Container {
                        meta,
                        cgroup_id: c.cgroup_id,
                        dir: Some(self.root.join(&c.rel)),
                        cpus: None,
                        seen_at: Some(ev.monotonic),
                    }));
                }
                Lifecycle::Stopped => {
                    if let Some(meta) = self.by_path.remove(&c.rel) {
                        self.by_id.remove(meta.id.as_str());
                        out.push(Change::Stopped(meta.id.clone(), Some(ev.monotonic)));
                    }
                }
            }
        }
        Ok(())
    }

    /// Its threads, less those of containers nested in it (theirs).
    fn threads(&self, id: &str) -> std::io::Result<Vec<u32>> {
        let Some(rel) = self.by_id.get(id) else { return Ok(Vec::new()) };
        let nested: Vec<PathBuf> =
            self.by_path.keys().filter(|p| *p != rel && p.starts_with(rel)).map(|p| self.root.join(p)).collect();
        threads_except(&self.root, rel, &nested).map_err(std::io::Error::other)
    }

    fn cpu_usage_usec(&self, id: &str) -> Option<u64> {
        cpu_usage_usec(&self.root.join(self.by_id.get(id)?))
    }

    fn describe(&self) -> String {
        self.what.clone()
    }

    fn stop(&mut self) {
        if let Some(w) = self.watcher.take() {
            let _ = w.stop();
        }
    }
}
