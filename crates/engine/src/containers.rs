//! Where containers come from: a source reports them as they start and stop (the host's
//! cgroup tree, a scenario, a player of real cgroups, core groups) and answers what the RMID
//! policy and the backends ask about them (threads, CPU use).

use crate::error::PartResult;
use crate::row::ContainerMeta;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A container as its source knows it.
#[derive(Debug, Clone, Default)]
pub struct Container {
    pub meta: Arc<ContainerMeta>,
    /// The cgroup v2 id (its directory's inode): what the eBPF attribution charges.
    pub cgroup_id: Option<u64>,
    /// Its cgroup v2 directory (absolute), where it has one.
    pub dir: Option<PathBuf>,
    /// Core groups: the logical CPUs whose traffic is the group's (`--cores`).
    pub cpus: Option<Vec<u32>>,
    /// When the source saw it appear (CLOCK_MONOTONIC), where it knows: its rows begin there,
    /// not before, and a run that samples behind real time attaches it only once there.
    pub seen_at: Option<Duration>,
}

impl Container {
    pub fn id(&self) -> &str {
        &self.meta.id
    }
}

/// A lifecycle change.
#[derive(Debug, Clone)]
pub enum Change {
    Started(Container),
    /// A container's end, and when the source saw it (CLOCK_MONOTONIC) where it knows: its
    /// last row is the first sampled after that.
    Stopped(String, Option<Duration>),
}

/// Containers, their lifecycle, and what is known about each.
pub trait ContainerSource {
    /// Changes up to `now` (time since the run's start) into `out`. Emulated sources follow
    /// `now`; host sources hand over what arrived since the last call.
    fn poll(&mut self, now: Duration, out: &mut Vec<Change>) -> PartResult;
    /// Thread ids of a container now (empty when it is gone or has none).
    fn threads(&self, _id: &str) -> std::io::Result<Vec<u32>> {
        Ok(Vec::new())
    }
    /// CPU time used so far in µs (cgroup `cpu.stat`), where known.
    fn cpu_usage_usec(&self, _id: &str) -> Option<u64> {
        None
    }
    /// What the containers are, in words (header, file metadata).
    fn describe(&self) -> String;
    /// Release what the source holds (watch threads, cgroups it created).
    fn stop(&mut self) {}
}
