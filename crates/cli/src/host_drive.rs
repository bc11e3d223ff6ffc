//! `--emulate MODEL` without a scenario: this host's real containers (from the cgroup v2 tree)
//! drive the emulated cache. Each interval, the memory traffic the eBPF attribution measured
//! for a container on an L3 domain (LLC misses × 64 bytes where this CPU counts misses; CPU
//! time × a stated rate where it does not) becomes that container's traffic in the emulated
//! domain; the emulated cache turns fills into occupancy (random replacement among everyone's
//! lines) and counts MBM. The containers, their lifecycle, the RMID assignment and the PMU
//! columns are real; occupancy and bandwidth are emulated, and every output says so.

use crate::pmu::{PmuColumns, PmuSource};
use crate::CliError;
use cachescope_cgroups::identity::Glob;
use cachescope_cgroups::watch::{Event, Lifecycle, Watcher};
use cachescope_cgroups::Hierarchy;
use cachescope_emu::{EmuPlatform, PlatformSpec, Scenario};
use cachescope_engine::row::{ContainerMeta, Pmu};
use cachescope_platform::Topology;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

/// Bytes of memory traffic per CPU-second of a container where no LLC-miss counter exists:
/// a round figure between an idle loop (~0) and a streaming core (~10 GB/s), said in the data.
pub const BYTES_PER_CPU_SECOND: f64 = 1e9;
/// An LLC miss moves one cache line.
const LINE_BYTES: f64 = 64.0;

/// A host container the drive follows.
pub struct Followed {
    pub meta: Arc<ContainerMeta>,
    /// This interval's PMU values per emulated domain, for the rows.
    pmu: Vec<Pmu>,
}

pub struct HostDrive {
    watcher: Option<Watcher>,
    events: Receiver<Event>,
    /// The cgroup v2 mount point.
    root: PathBuf,
    pub pmu: PmuColumns,
    /// Host L3 domain id → emulated domain (its index).
    domain_index: BTreeMap<u32, u32>,
    /// The containers followed, by id.
    pub containers: BTreeMap<String, Followed>,
    /// Emulated domains, for sizing each container's PMU values.
    ndomains: usize,
    /// What drives the emulated traffic, in words (header, stderr, file metadata).
    pub driver: String,
}

/// The emulated platform shaped like this host (its L3 domains and their size) with the
/// monitoring of `model`, and the drive that feeds it from the host's containers.
pub fn start(
    model: &str,
    globs: Vec<Glob>,
    interval: Duration,
    source: PmuSource,
) -> Result<(Arc<EmuPlatform>, HostDrive), CliError> {
    let topo = Topology::read(Path::new("/sys")).map_err(CliError::unavailable)?;
    if topo.l3_domains.is_empty() {
        return Err(CliError::unavailable("sysfs shows no L3 cache on this host: nothing to emulate it after"));
    }
    let l3_bytes = topo.l3_domains.iter().filter_map(|d| d.size_bytes).max().ok_or_else(|| {
        CliError::unavailable("sysfs does not give the L3 size (cache/index3/size): nothing to emulate it after")
    })?;
    let cpus_per_domain = topo.l3_domains.iter().map(|d| d.cpus.len() as u32).max().unwrap_or(1).max(1);
    let platform = PlatformSpec {
        model: model.to_string(),
        l3_mib: l3_bytes as f64 / (1024.0 * 1024.0),
        domains: topo.l3_domains.len() as u32,
        cpus_per_domain,
        counter_width: None,
        seed: 0,
        jitter: 0.0,
    };
    let scenario = Scenario::platform_only(platform).map_err(CliError::unavailable)?;
    let emu = Arc::new(EmuPlatform::with_model(&scenario, model).map_err(CliError::input)?);
    let h = Hierarchy::find(Path::new("/proc")).map_err(CliError::unavailable)?;
    if !h.v2 {
        return Err(CliError::unavailable(format!(
            "--emulate without --scenario follows this host's containers, which needs cgroup v2; found {}",
            h.description
        )));
    }
    let pmu = PmuColumns::start(interval, source);
    if !pmu.is_on() {
        return Err(CliError::unavailable(format!(
            "--emulate without --scenario measures the host's containers with eBPF or perf events, which are {}",
            pmu.description
        )));
    }
    let driver = if pmu.counts_llc_misses() {
        "each container's measured LLC misses × 64 B".to_string()
    } else {
        format!(
            "each container's measured CPU time × {:.0} GB/s (no LLC-miss counter here)",
            BYTES_PER_CPU_SECOND / 1e9
        )
    };
    let (watcher, events) = Watcher::start(&h.root, globs, Duration::from_secs(2)).map_err(CliError::unavailable)?;
    let domain_index = topo.l3_domains.iter().enumerate().map(|(i, d)| (d.id, i as u32)).collect();
    Ok((
        emu,
        HostDrive {
            watcher: Some(watcher),
            events,
            root: h.root.clone(),
            pmu,
            domain_index,
            containers: BTreeMap::new(),
            ndomains: topo.l3_domains.len(),
            driver,
        },
    ))
}

impl HostDrive {
    /// Containers started and stopped since the last call, added to / stopped in the model.
    pub fn lifecycle(&mut self, emu: &EmuPlatform) -> (Vec<String>, Vec<String>) {
        let (mut started, mut stopped) = (Vec::new(), Vec::new());
        while let Ok(ev) = self.events.try_recv() {
            let c = ev.container;
            let id = c.identity.id.clone();
            match ev.kind {
                Lifecycle::Started => {
                    if self.containers.contains_key(&id) {
                        continue;
                    }
                    self.pmu.follow(&id, c.cgroup_id, &self.root.join(&c.cgroup_path));
                    emu.add_driven(&id);
                    let meta = Arc::new(ContainerMeta {
                        id: id.clone(),
                        name: c.name.clone(),
                        pod_uid: c.identity.pod_uid.clone(),
                        cgroup_path: c.cgroup_path.clone(),
                        ..Default::default()
                    });
                    self.containers.insert(id.clone(), Followed { meta, pmu: vec![Pmu::default(); self.ndomains] });
                    started.push(id);
                }
                Lifecycle::Stopped => {
                    if self.containers.remove(&id).is_none() {
                        continue;
                    }
                    self.pmu.unfollow(&id);
                    emu.stop_driven(&id);
                    stopped.push(id);
                }
            }
        }
        (started, stopped)
    }

    /// The traffic measured over the last `dt` becomes each container's rate in the model for
    /// the same span (so the emulated MBM over a run adds up to what was measured).
    pub fn feed(&mut self, emu: &EmuPlatform, dt: Duration) {
        self.pmu.drain();
        let secs = dt.as_secs_f64().max(1e-6);
        for (id, f) in self.containers.iter_mut() {
            for (&host_domain, &d) in &self.domain_index {
                let (values, cpu_ns) = self.pmu.take(id, host_domain);
                let bytes = match (values.llc_misses, cpu_ns) {
                    (Some(m), _) => m as f64 * LINE_BYTES,
                    (None, Some(ns)) => ns as f64 / 1e9 * BYTES_PER_CPU_SECOND,
                    (None, None) => 0.0,
                };
                emu.set_rate(id, d, bytes / secs);
                if let Some(slot) = f.pmu.get_mut(d as usize) {
                    *slot = values;
                }
            }
        }
    }

    /// The PMU values measured for (container, emulated domain) this interval.
    pub fn pmu_values(&self, id: &str, domain: u32) -> Pmu {
        self.containers.get(id).and_then(|f| f.pmu.get(domain as usize)).copied().unwrap_or_default()
    }

    pub fn stop(mut self) {
        if let Some(w) = self.watcher.take() {
            let _ = w.stop();
        }
    }
}
