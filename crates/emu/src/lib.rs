//! The emulated RDT platform: a [`CpuidSource`] and an [`MsrDevice`] with the hardware's
//! semantics (SDM Vol. 3B §17.16), over an LLC occupancy model driven by a scenario in virtual
//! time. The engine code that talks to it is the code that talks to silicon.
//!
//! Semantics kept: IA32_PQR_ASSOC per logical CPU, #GP for an RMID above the maximum, for
//! reserved bits and for MSRs not implemented; IA32_QM_EVTSEL per logical CPU; IA32_QM_CTR
//! with Error for an unsupported event or RMID, Unavailable before an RMID has data in that
//! domain, occupancy quantized to the upscale factor, MBM counts that wrap at the counter width;
//! RMIDs scoped per L3 domain. It also plays the kernel's part: a container's traffic is tagged
//! with the RMID the engine gave it ([`EmuPlatform::tag_container`]), or, for core-pinned
//! monitoring, with the RMID in PQR_ASSOC of the CPU it runs on.

#![forbid(unsafe_code)]

pub mod drive;
mod model;
pub mod scenario;

use cachescope_hw::cpuid::{CpuidError, CpuidSnapshot, CpuidSource, L3Monitoring, Regs};
use cachescope_hw::msr::{
    rmid_width, Event, MsrDevice, MsrError, MsrOp, QmCtr, IA32_PQR_ASSOC, IA32_QM_CTR, IA32_QM_EVTSEL,
};
use cachescope_hw::CpuInfo;
use cachescope_platform::RecordedVector;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub use drive::{DrivenWorld, ScenarioContainers, ScenarioWorld};
pub use model::CacheModel;
pub use scenario::{ContainerSpec, PlatformSpec, Scenario, ScenarioError};

include!(concat!(env!("OUT_DIR"), "/models.rs"));

#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    #[error("unknown model {0:?}: not a vector name ({1}) nor a readable file")]
    UnknownModel(String, String),
    #[error("{0}")]
    Vector(#[from] cachescope_platform::VectorError),
    #[error("model {model} cannot be emulated: {why}")]
    NoMonitoring { model: String, why: String },
    /// This host cannot be emulated after (its L3 is unknown).
    #[error("{0}")]
    Host(String),
}

/// Names of the embedded CPUID vectors.
pub fn model_names() -> Vec<&'static str> {
    MODELS.iter().map(|(n, _)| *n).collect()
}

/// Resolve a model: an embedded vector name, or a path to a vector file.
pub fn load_model(model: &str) -> Result<RecordedVector, EmuError> {
    if let Some((name, text)) = MODELS.iter().find(|(n, _)| *n == model) {
        return Ok(RecordedVector::parse(text, Path::new(&format!("{name}.json")))?);
    }
    let p = Path::new(model);
    if p.is_file() {
        return Ok(RecordedVector::load(p)?);
    }
    Err(EmuError::UnknownModel(model.to_string(), model_names().join(", ")))
}

/// Counts of what the engine asked of the platform (for benchmarks).
#[derive(Debug, Default)]
pub struct MsrStats {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
}

struct State {
    pqr: Vec<u64>,
    evtsel: Vec<u64>,
    model: CacheModel,
    /// Remaining CTR reads that see another agent's EVTSEL (interference injection).
    interfere: u32,
}

pub struct EmuPlatform {
    snapshot: CpuidSnapshot,
    cpu: CpuInfo,
    l3: L3Monitoring,
    width: u32,
    cpus_per_domain: u32,
    ncpus: u32,
    state: Mutex<State>,
    pub stats: MsrStats,
}

impl EmuPlatform {
    /// Build the platform of a scenario (its containers are loaded into the model).
    pub fn new(scenario: &Scenario) -> Result<EmuPlatform, EmuError> {
        Self::with_model(scenario, &scenario.platform.model)
    }

    /// As [`new`](Self::new) but with `model` overriding the scenario's (`--emulate MODEL`).
    pub fn with_model(scenario: &Scenario, model: &str) -> Result<EmuPlatform, EmuError> {
        let vector = load_model(model)?;
        let mut snapshot = vector.snapshot();
        let p = &scenario.platform;
        let probe = CpuInfo::decode(&snapshot);
        if let Some(why) = probe.l3_monitoring_absence() {
            return Err(EmuError::NoMonitoring { model: model.to_string(), why: why.to_string() });
        }
        if let Some(w) = p.counter_width {
            // Present the width through CPUID.0xF.1:EAX[7:0], as hardware would.
            let mut f1 = snapshot.get(0xF, 1);
            f1.eax = (f1.eax & !0xFF) | w.saturating_sub(24).min(0xFF);
            let leaves: Vec<((u32, u32), Regs)> =
                snapshot.iter().map(|(k, v)| if k == (0xF, 1) { (k, f1) } else { (k, v) }).collect();
            snapshot = CpuidSnapshot::from_leaves(leaves);
        }
        let cpu = CpuInfo::decode(&snapshot);
        let mut l3 = cpu
            .monitoring
            .l3
            .clone()
            .ok_or_else(|| EmuError::NoMonitoring { model: model.to_string(), why: "no L3 monitoring".into() })?;
        // The override wins even where CPUID cannot express it (below 24 bits, or 24 on AMD).
        let width = p.counter_width.unwrap_or(l3.counter_width_linux);
        l3.counter_width_linux = width;
        let ncpus = scenario.total_cpus();
        let model = CacheModel::new(scenario, l3.upscale_factor);
        Ok(EmuPlatform {
            snapshot,
            cpu,
            l3,
            width,
            cpus_per_domain: p.cpus_per_domain,
            ncpus,
            state: Mutex::new(State {
                pqr: vec![0; ncpus as usize],
                evtsel: vec![0; ncpus as usize],
                model,
                interfere: 0,
            }),
            stats: MsrStats::default(),
        })
    }

    /// The platform of `model` shaped like this host's L3 (its domains, their CPUs and size),
    /// with no scenario containers: for a world driven by the host's containers.
    pub fn like_host(model: &str, topo: &cachescope_platform::Topology) -> Result<EmuPlatform, EmuError> {
        if topo.l3_domains.is_empty() {
            return Err(EmuError::Host("sysfs shows no L3 cache on this host: nothing to emulate it after".into()));
        }
        let l3_bytes = topo.l3_domains.iter().filter_map(|d| d.size_bytes).max().ok_or_else(|| {
            EmuError::Host("sysfs does not give the L3 size (cache/index3/size): nothing to emulate it after".into())
        })?;
        let platform = PlatformSpec {
            model: model.to_string(),
            l3_mib: l3_bytes as f64 / (1024.0 * 1024.0),
            domains: topo.l3_domains.len() as u32,
            cpus_per_domain: topo.l3_domains.iter().map(|d| d.cpus.len() as u32).max().unwrap_or(1).max(1),
            counter_width: None,
            seed: 0,
            jitter: 0.0,
        };
        let scenario = Scenario::platform_only(platform).map_err(|e| EmuError::Host(e.to_string()))?;
        EmuPlatform::with_model(&scenario, model)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn cpu_info(&self) -> &CpuInfo {
        &self.cpu
    }

    /// The MBM counter width in effect (may be below 24 in tests; CPUID cannot say so).
    pub fn counter_width(&self) -> u32 {
        self.width
    }

    pub fn l3(&self) -> &L3Monitoring {
        &self.l3
    }

    pub fn domain_of_cpu(&self, cpu: u32) -> u32 {
        cpu / self.cpus_per_domain
    }

    pub fn domains(&self) -> Vec<(u32, Vec<u32>)> {
        let n = self.ncpus / self.cpus_per_domain;
        (0..n).map(|d| (d, (d * self.cpus_per_domain..(d + 1) * self.cpus_per_domain).collect())).collect()
    }

    pub fn l3_bytes(&self) -> u64 {
        self.lock().model.l3_bytes() as u64
    }

    /// Advance virtual time by `dt` (in model steps of at most 1 ms).
    pub fn advance(&self, dt: Duration) {
        let mut st = self.lock();
        let pqr = st.pqr.clone();
        st.model.advance(dt, &|cpu| (pqr[cpu as usize] & ((1u64 << rmid_width(self.max_rmid_any())) - 1)) as u32);
    }

    /// Advance virtual time up to `t` since the start (no-op if already there).
    pub fn advance_to(&self, t: Duration) {
        let now = self.now();
        if t > now {
            self.advance(t - now);
        }
    }

    pub fn now(&self) -> Duration {
        self.lock().model.now()
    }

    /// Scenario containers running at the current virtual time.
    pub fn running_containers(&self) -> Vec<String> {
        self.lock().model.running()
    }

    /// Add a container driven from outside (see [`CacheModel::add_driven`]).
    pub fn add_driven(&self, name: &str) -> bool {
        self.lock().model.add_driven(name)
    }

    /// Set a driven container's traffic in `domain` (bytes per second) until set again.
    pub fn set_rate(&self, name: &str, domain: u32, bytes_per_sec: f64) -> bool {
        self.lock().model.set_rate(name, domain, bytes_per_sec)
    }

    /// [`Self::set_rate`] for each (container, domain, bytes per second), under one lock.
    pub fn set_rates(&self, rates: &[(&str, u32, f64)]) {
        if rates.is_empty() {
            return;
        }
        let mut p = self.lock();
        for &(name, domain, bytes_per_sec) in rates {
            p.model.set_rate(name, domain, bytes_per_sec);
        }
    }

    /// Stop a driven container; its lines stay until evicted.
    pub fn stop_driven(&self, name: &str) -> bool {
        self.lock().model.stop_driven(name)
    }

    /// The kernel's part: tag the threads of `container` with `rmid` (None: back to the
    /// default, RMID 0 / the CPU's PQR_ASSOC).
    pub fn tag_container(&self, container: &str, rmid: Option<u32>) -> bool {
        self.lock().model.tag(container, rmid)
    }

    /// Model truth for tests: exact occupancy bytes of `rmid` in `domain`.
    pub fn true_occupancy(&self, domain: u32, rmid: u32) -> f64 {
        self.lock().model.rmid_occupancy(domain, rmid)
    }

    /// Model truth for tests: a container's resident bytes in `domain` (all its RMIDs).
    pub fn container_occupancy(&self, domain: u32, container: &str) -> f64 {
        self.lock().model.container_occupancy(domain, container)
    }

    /// The next `n` CTR reads see IA32_QM_EVTSEL rewritten by another agent.
    pub fn inject_interference(&self, n: u32) {
        self.lock().interfere = n;
    }

    fn max_rmid_any(&self) -> u32 {
        self.cpu.monitoring.max_rmid_any.unwrap_or(0)
    }

    fn check_cpu(&self, cpu: u32) -> Result<usize, MsrError> {
        if cpu >= self.ncpus {
            return Err(MsrError::NoDevice { path: format!("emulated cpu {cpu}"), cpu });
        }
        Ok(cpu as usize)
    }

    fn event_supported(&self, ev: Event) -> bool {
        match ev {
            Event::L3Occupancy => self.l3.occupancy,
            Event::MbmTotal => self.l3.mbm_total,
            Event::MbmLocal => self.l3.mbm_local,
        }
    }

    fn read_ctr(&self, st: &mut State, cpu: usize) -> u64 {
        let width = rmid_width(self.max_rmid_any());
        let mut sel = st.evtsel[cpu];
        if st.interfere > 0 {
            st.interfere -= 1;
            // Another agent selected an event id that does not exist.
            sel = (sel & !0xFF) | 0x7F;
            st.evtsel[cpu] = sel;
        }
        let event = Event::from_id((sel & 0xFF) as u8);
        let rmid = ((sel >> 32) & ((1u64 << width) - 1)) as u32;
        let ovf = self.l3.overflow_bit;
        let Some(event) = event.filter(|e| self.event_supported(*e)) else {
            return QmCtr::Error.encode(ovf);
        };
        if rmid > self.l3.max_rmid {
            return QmCtr::Error.encode(ovf);
        }
        let domain = self.domain_of_cpu(cpu as u32);
        match st.model.counter(domain, rmid, event) {
            None => QmCtr::Unavailable.encode(ovf),
            Some(units) => {
                let count = match event {
                    Event::L3Occupancy => units,
                    _ => units & ((1u64 << self.width) - 1),
                };
                QmCtr::Data { count, overflow: false }.encode(ovf)
            }
        }
    }
}

impl CpuidSource for EmuPlatform {
    fn describe(&self) -> String {
        "emulated platform".into()
    }

    fn cpuid(&self, leaf: u32, subleaf: u32) -> Result<Regs, CpuidError> {
        Ok(self.snapshot.get(leaf, subleaf))
    }
}

impl MsrDevice for EmuPlatform {
    fn read(&self, cpu: u32, msr: u32) -> Result<u64, MsrError> {
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        let c = self.check_cpu(cpu)?;
        let mut st = self.lock();
        match msr {
            IA32_PQR_ASSOC => Ok(st.pqr[c]),
            IA32_QM_EVTSEL => Ok(st.evtsel[c]),
            IA32_QM_CTR => Ok(self.read_ctr(&mut st, c)),
            _ => Err(MsrError::GeneralProtection { cpu, msr, op: MsrOp::Read }),
        }
    }

    fn write(&self, cpu: u32, msr: u32, value: u64) -> Result<(), MsrError> {
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        let c = self.check_cpu(cpu)?;
        let gp = Err(MsrError::GeneralProtection { cpu, msr, op: MsrOp::Write });
        let width = rmid_width(self.max_rmid_any());
        let mut st = self.lock();
        match msr {
            IA32_PQR_ASSOC => {
                let rmid = value & ((1u64 << width) - 1);
                let reserved = value & 0xFFFF_FFFF & !((1u64 << width) - 1);
                if rmid > u64::from(self.max_rmid_any()) || reserved != 0 {
                    return gp;
                }
                st.pqr[c] = value;
                Ok(())
            }
            IA32_QM_EVTSEL => {
                // Bits 31:8 and RMID bits above the field width are reserved.
                let reserved = (value & 0xFFFF_FF00) | ((value >> 32) & !((1u64 << width) - 1));
                if reserved != 0 {
                    return gp;
                }
                st.evtsel[c] = value;
                Ok(())
            }
            _ => gp, // QM_CTR is read-only; nothing else is implemented.
        }
    }
}

#[cfg(test)]
mod tests;
