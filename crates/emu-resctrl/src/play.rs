//! A scenario played for real, as the engine's container source: each scenario container is a
//! cgroup holding one idle process, created on the scenario's schedule and removed when it
//! stops, all under one sandbox cgroup removed at the end. The emulated filesystem tags a
//! thread's traffic by the scenario container its cgroup belongs to.
//!
//! A container runtime creates a container's cgroup and process before the workload runs;
//! the player does the same, a lead ahead of the scenario's start time in the platform's
//! time, so the container is attached (its group made, its threads assigned) before it fills
//! its first line. The platform's clock is held still until the containers present at the
//! start are attached.

use crate::Mounted;
use cachescope_cgroups::sandbox::Sandbox;
use cachescope_cgroups::{cpu_usage_usec, threads, Hierarchy};
use cachescope_emu::Scenario;
use cachescope_engine::containers::{Change, Container, ContainerSource};
use cachescope_engine::ContainerMeta;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

pub struct Play {
    sandbox: Sandbox,
    root: PathBuf,
    /// (start, stop, name), not yet created.
    pending: Vec<(Duration, Option<Duration>, String)>,
    /// name → stop time, of those created.
    running: BTreeMap<String, Option<Duration>>,
    lead: Duration,
    /// The mounted filesystem, held to the end (dropping it unmounts); its clock starts at the
    /// second poll.
    mount: Option<Mounted>,
    polls: u64,
}

impl Play {
    /// A sandbox cgroup for the scenario's containers; `lead`: how long before its start a
    /// container is created (at least two sampling intervals).
    pub fn new(h: &Hierarchy, scenario: &Scenario, lead: Duration) -> Result<Play, String> {
        let sandbox =
            Sandbox::create(h, &format!("cachescope-emu-{}", std::process::id())).map_err(|e| e.to_string())?;
        let pending = scenario
            .containers
            .iter()
            .map(|c| (Duration::from_millis(c.start_ms), c.stop_ms.map(Duration::from_millis), c.name.clone()))
            .collect();
        Ok(Play { sandbox, root: h.root.clone(), pending, running: BTreeMap::new(), lead, mount: None, polls: 0 })
    }

    /// The sandbox's path relative to the cgroup root (the scenario container's cgroups are
    /// its children, named as the containers).
    pub fn rel_prefix(&self) -> String {
        self.sandbox.rel()
    }

    /// Hold the mount (mounted with `wall_clock: false`) until the end; its clock starts once
    /// the first containers are attached.
    pub fn hold(&mut self, m: Mounted) {
        self.mount = Some(m);
    }

    fn now(&self) -> Duration {
        self.mount.as_ref().map_or(Duration::ZERO, |m| m.platform().now())
    }
}

impl ContainerSource for Play {
    fn poll(&mut self, _: Duration, out: &mut Vec<Change>) -> Result<(), String> {
        self.polls += 1;
        if self.polls == 2 {
            if let Some(m) = &self.mount {
                m.state().follow_wall_clock();
            }
        }
        let now = self.now();
        let due: Vec<usize> = (0..self.pending.len()).filter(|&i| self.pending[i].0 <= now + self.lead).collect();
        for i in due.into_iter().rev() {
            let (_, stop, name) = self.pending.remove(i);
            let mut idle = Command::new("sleep");
            idle.arg("infinity");
            self.sandbox.spawn(&name, idle).map_err(|e| e.to_string())?;
            let rel = format!("{}/{name}", self.sandbox.rel());
            let dir = self.root.join(&rel);
            let cgroup_id = std::fs::metadata(&dir).ok().map(|m| m.ino());
            let meta = ContainerMeta { cgroup_path: rel, ..(*ContainerMeta::named(&name)).clone() };
            self.running.insert(name, stop);
            out.push(Change::Started(Container { meta: Arc::new(meta), cgroup_id, dir: Some(dir), cpus: None }));
        }
        let ended: Vec<String> =
            self.running.iter().filter(|(_, s)| s.is_some_and(|s| s <= now)).map(|(k, _)| k.clone()).collect();
        for name in ended {
            self.running.remove(&name);
            self.sandbox.remove(&name);
            out.push(Change::Stopped(name));
        }
        Ok(())
    }

    fn threads(&self, id: &str) -> std::io::Result<Vec<u32>> {
        if !self.running.contains_key(id) {
            return Ok(Vec::new());
        }
        threads(&self.root, &format!("{}/{id}", self.sandbox.rel()), true).map_err(std::io::Error::other)
    }

    fn cpu_usage_usec(&self, id: &str) -> Option<u64> {
        cpu_usage_usec(&self.root.join(format!("{}/{id}", self.sandbox.rel())))
    }

    fn describe(&self) -> String {
        format!("scenario containers played as cgroups under {}", self.sandbox.rel())
    }

    fn stop(&mut self) {
        let names: Vec<String> = self.running.keys().cloned().collect();
        for n in names {
            self.sandbox.remove(&n);
        }
        self.running.clear();
        // Unmount after the backend has removed its groups (the engine stops sources last).
        self.mount = None;
    }
}
