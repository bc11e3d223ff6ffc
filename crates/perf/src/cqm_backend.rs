//! The perf-cqm backend: per-container cgroup events on the legacy `intel_cqm` PMU (Linux
//! 4.1–4.13), its type, configs and scales from sysfs ([`crate::cqm::discover`]). Each
//! attached container gets one event per CMT/MBM event and L3 domain, opened on one CPU of
//! the domain for the container's cgroup; the kernel gives it an RMID when the event is
//! created (ENOSPC when none is left) and frees it when the event is closed. Occupancy reads
//! are bytes now; MBM reads are cumulative counts of `scale × unit` bytes.
//!
//! perf_event_open sits behind [`CqmOpener`], so the backend is tested against a fake sysfs
//! tree and fake counters: no kernel we run has this PMU.

use crate::counter::{CounterGroup, Target};
use crate::cqm::{CqmError, CqmEvent, CqmPmu};
use cachescope_engine::backend::{Attach, BackendInfo, CacheBackend, RawSample, Read, Sampling, SlotCounts};
use cachescope_engine::containers::{Container, ContainerSource};
use cachescope_engine::{ContainerMeta, Status, WaitReason};
use cachescope_engine::{PartError, PartResult};
use cachescope_hw::msr::Cumulative;
use cachescope_platform::Topology;
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One open counter.
pub trait CqmCounter {
    /// The event's current raw value.
    fn read(&mut self) -> io::Result<u64>;
}

/// Opens an `intel_cqm` event for a cgroup on one CPU (perf_event_open with
/// PERF_FLAG_PID_CGROUP), or a fake.
pub trait CqmOpener {
    fn open(&self, event: &CqmEvent, cgroup_dir: &Path, cpu: usize) -> io::Result<Box<dyn CqmCounter>>;
}

/// perf-cqm's interval when none is given: each read of an `intel_cqm` event is a syscall
/// that reads the counter on a CPU of its domain, so it samples as resctrl does.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// The real one.
pub struct PerfOpener;

struct PerfCounter(CounterGroup);

impl CqmCounter for PerfCounter {
    fn read(&mut self) -> io::Result<u64> {
        Ok(self.0.read()?.raw.first().copied().unwrap_or(0))
    }
}

impl CqmOpener for PerfOpener {
    fn open(&self, event: &CqmEvent, cgroup_dir: &Path, cpu: usize) -> io::Result<Box<dyn CqmCounter>> {
        let dir = std::fs::File::open(cgroup_dir)?;
        let g = CounterGroup::open(&Target::Cgroup { dir: &dir, cpu }, std::slice::from_ref(&event.encoded))?;
        Ok(Box::new(PerfCounter(g)))
    }
}

/// Bytes per raw count of an event: its scale in its unit (the kernel says `MB` for MiB).
pub fn bytes_per_count(e: &CqmEvent) -> f64 {
    let unit = match e.unit.as_deref().map(str::trim) {
        Some("MB") => 1024.0 * 1024.0,
        Some("kB") | Some("KB") => 1024.0,
        _ => 1.0,
    };
    e.scale * unit
}

struct Attached {
    meta: Arc<ContainerMeta>,
    generation: u64,
    /// (domain, event name, counter).
    counters: Vec<(u32, &'static str, Box<dyn CqmCounter>)>,
}

pub struct CqmBackend<O: CqmOpener> {
    info: BackendInfo,
    pmu: CqmPmu,
    opener: O,
    /// (domain, the CPU its events are opened on).
    readers: Vec<(u32, usize)>,
    attached: BTreeMap<String, Attached>,
    generation: u64,
}

fn kind(name: &str) -> &'static str {
    match name {
        "llc_occupancy" => "llc_occupancy",
        "total_bytes" => "total_bytes",
        _ => "local_bytes",
    }
}

impl<O: CqmOpener> CqmBackend<O> {
    /// `domains`: each L3 domain with its CPUs (events open on the first).
    pub fn new(pmu: CqmPmu, opener: O, domains: &[(u32, Vec<u32>)], mut info: BackendInfo) -> CqmBackend<O> {
        let readers: Vec<(u32, usize)> =
            domains.iter().filter_map(|(d, cpus)| cpus.first().map(|c| (*d, *c as usize))).collect();
        // Bytes per count of the MBM events (the same for both): the engine's unit.
        let mbm_unit = pmu.events.iter().find(|e| e.name != "llc_occupancy").map_or(1.0, bytes_per_count);
        info.domains = readers.iter().map(|r| r.0).collect();
        info.sampling = Sampling::Tick;
        info.mbm_width = 64;
        info.mbm_unit = mbm_unit.round().max(1.0) as u64;
        info.upscale = pmu.events.iter().find(|e| e.name == "llc_occupancy").map_or(1, |e| bytes_per_count(e) as u64);
        CqmBackend { info, pmu, opener, readers, attached: BTreeMap::new(), generation: 0 }
    }
}

impl CqmBackend<PerfOpener> {
    /// The backend on this host: the `intel_cqm` PMU under `sys` (/sys), read on one CPU of
    /// each L3 domain of `topo`.
    pub fn on_host(sys: &Path, topo: &Topology, cpuid: String) -> Result<Self, CqmError> {
        let pmu = crate::cqm::discover(sys)?;
        let info = BackendInfo::new("perf-cqm (intel_cqm PMU)", cpuid, topo.l3_bytes());
        Ok(CqmBackend::new(pmu, PerfOpener, &topo.domain_cpus(), info))
    }
}

impl<O: CqmOpener> CacheBackend for CqmBackend<O> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn attach(&mut self, c: &Container, _: &dyn ContainerSource, _: Duration) -> PartResult<Attach> {
        if self.attached.contains_key(c.id()) {
            return Ok(Attach::Monitored { rmid: None });
        }
        let Some(dir) = &c.dir else { return Ok(Attach::Waiting(WaitReason::CannotTag)) };
        let mut counters = Vec::new();
        for &(domain, cpu) in &self.readers {
            for e in &self.pmu.events {
                match self.opener.open(e, dir, cpu) {
                    Ok(k) => counters.push((domain, kind(&e.name), k)),
                    // The kernel allocates an RMID per event: none left.
                    Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => {
                        return Ok(Attach::Waiting(WaitReason::Exhausted))
                    }
                    Err(err) => {
                        let what = format!("intel_cqm {} for {} on CPU {cpu}: {err}", e.name, dir.display());
                        // Its cgroup went away meanwhile: that container's trouble alone.
                        return Err(match err.kind() {
                            std::io::ErrorKind::NotFound => PartError::container(c.id(), what),
                            _ => PartError::Failed(what),
                        });
                    }
                }
            }
        }
        self.generation += 1;
        self.attached
            .insert(c.id().to_string(), Attached { meta: c.meta.clone(), generation: self.generation, counters });
        Ok(Attach::Monitored { rmid: None })
    }

    fn detach(&mut self, id: &str, _: Duration) -> PartResult {
        // Closing the events frees their RMIDs (the kernel keeps them in limbo).
        self.attached.remove(id);
        Ok(())
    }

    fn collect(&mut self, now: Duration, read: Read<'_>, out: &mut Vec<RawSample>) -> PartResult {
        let (readers, pmu) = (&self.readers, &self.pmu);
        read.each_mut(&mut self.attached, |_, a| {
            for &(domain, _) in readers {
                let mut s = RawSample::new(a.meta.clone(), domain, now);
                for (_, name, k) in a.counters.iter_mut().filter(|(d, ..)| *d == domain) {
                    let Ok(v) = k.read() else {
                        s.status = Status::Error;
                        continue;
                    };
                    let cum = Some(Cumulative { generation: a.generation, value: v });
                    match *name {
                        "llc_occupancy" => {
                            let scale = pmu.events.iter().find(|e| e.name == *name).map_or(1.0, bytes_per_count);
                            s.occupancy_bytes = Some((v as f64 * scale).round() as u64);
                        }
                        "total_bytes" => s.mbm_total = cum,
                        _ => s.mbm_local = cum,
                    }
                }
                out.push(s);
            }
            Ok(())
        })
    }

    fn slots(&self) -> SlotCounts {
        // The kernel's intel_cqm driver keeps its limbo to itself.
        SlotCounts { in_use: self.attached.len() as u64, limbo: None }
    }

    fn shutdown(&mut self) -> PartResult<Vec<String>> {
        let n = self.attached.len();
        self.attached.clear();
        Ok(if n > 0 { vec![format!("closed the intel_cqm events of {n} containers")] } else { Vec::new() })
    }
}

#[cfg(test)]
mod tests;
