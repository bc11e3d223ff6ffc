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
use cachescope_engine::{PartError, PartResult};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
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
    fn poll(&mut self, _: Duration, out: &mut Vec<Change>) -> PartResult {
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
            // Killed with us, even by SIGKILL (the thread that spawns it runs the whole run).
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                idle.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            self.sandbox.spawn(&name, idle).map_err(PartError::failed)?;
            let rel = format!("{}/{name}", self.sandbox.rel());
            let dir = self.root.join(&rel);
            let cgroup_id = std::fs::metadata(&dir).ok().map(|m| m.ino());
            let meta = ContainerMeta { cgroup_path: rel, ..(*ContainerMeta::named(&name)).clone() };
            self.running.insert(name, stop);
            out.push(Change::Started(Container {
                meta: Arc::new(meta),
                cgroup_id,
                dir: Some(dir),
                cpus: None,
                seen_at: None,
            }));
        }
        let ended: Vec<String> =
            self.running.iter().filter(|(_, s)| s.is_some_and(|s| s <= now)).map(|(k, _)| k.clone()).collect();
        for name in ended {
            self.running.remove(&name);
            self.sandbox.remove(&name);
            out.push(Change::Stopped(name, None));
        }
        Ok(())
    }

    fn threads(&self, id: &str) -> std::io::Result<Vec<u32>> {
        if !self.running.contains_key(id) {
            return Ok(Vec::new());
        }
        threads(&self.root, format!("{}/{id}", self.sandbox.rel()), true).map_err(std::io::Error::other)
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

/// What [`clean_leftovers`] removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cleaned {
    pub cgroups: usize,
    pub processes: usize,
    pub mounts: usize,
}

impl Cleaned {
    /// One line for people, when anything was removed.
    pub fn said(&self) -> Option<String> {
        (*self != Cleaned::default()).then(|| {
            format!(
                "removed what a killed run left: {} sandbox cgroups ({} processes), {} emulated resctrl mounts",
                self.cgroups, self.processes, self.mounts
            )
        })
    }
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new("/proc").join(pid.to_string()).exists()
}

/// The pid in a name `PREFIX<pid>` or `PREFIX<pid>-<n>`.
fn pid_of(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix)?.split('-').next()?.parse().ok()
}

/// Remove what a run killed with SIGKILL left behind: its sandbox cgroups
/// (`cachescope-emu-PID`, their idle processes killed) and its emulated resctrl mounts
/// (`cachescope-resctrl-PID-N` under the temp dir, detached), for every PID no longer alive.
pub fn clean_leftovers(h: &Hierarchy) -> Cleaned {
    let mut done = Cleaned::default();
    let Ok(rd) = std::fs::read_dir(&h.root) else { return done };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = pid_of(&name, "cachescope-emu-") else { continue };
        if pid_alive(pid) || !e.path().is_dir() {
            continue;
        }
        let dir = e.path();
        let children: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|r| r.flatten().map(|c| c.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        for c in children.iter().chain(std::iter::once(&dir)) {
            let procs = std::fs::read_to_string(c.join("cgroup.procs")).unwrap_or_default();
            for p in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill(2) with a pid read from the dead run's own cgroup; no memory is
                // involved.
                if unsafe { libc::kill(p, libc::SIGKILL) } == 0 {
                    done.processes += 1;
                }
            }
        }
        // The kernel removes killed tasks from cgroup.procs shortly after they die.
        for _ in 0..50 {
            if children.iter().all(|c| std::fs::remove_dir(c).is_ok() || !c.exists()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if std::fs::remove_dir(&dir).is_ok() {
            done.cgroups += 1;
        }
    }
    let tmp = std::env::temp_dir();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mounts.lines() {
        let Some(point) = line.split(' ').nth(4) else { continue };
        let p = std::path::Path::new(point);
        let Some(name) = p.file_name().map(|n| n.to_string_lossy().to_string()) else { continue };
        if p.parent() != Some(tmp.as_path()) {
            continue;
        }
        let Some(pid) = pid_of(&name, "cachescope-resctrl-") else { continue };
        if pid_alive(pid) {
            continue;
        }
        let Ok(c) = std::ffi::CString::new(point) else { continue };
        // SAFETY: umount2 with a NUL-terminated path that outlives the call; MNT_DETACH so a
        // mount whose FUSE server is dead cannot block us.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            done.mounts += 1;
            let _ = std::fs::remove_dir(p);
        }
    }
    done
}
