//! CMT/MBM over an [`MsrDevice`]: the same code runs on `/dev/cpu/N/msr` and on the emulator.
//!
//! - [`Reader`]: the read protocol (one reader CPU per L3 domain, serialized per domain;
//!   EVTSEL write then CTR read; Error → re-read EVTSEL to detect interference and retry,
//!   Unavailable → retry, both bounded).
//! - [`check_interval`]: the longest sampling interval at which MBM counters cannot wrap unseen.
//! - [`CorePinning`]: core-pinned RMIDs in IA32_PQR_ASSOC with CLOS kept, tampering reported,
//!   originals restored.
//! - [`MsrBackend`]: the engine's msr (and emulated) backend: containers and core groups to
//!   RMIDs through the allocator, limbo handled, raw counts read.

#![forbid(unsafe_code)]

mod pinning;
mod session;

use cachescope_hw::cpuid::L3Monitoring;
use cachescope_hw::msr::{
    max_safe_interval, Event, EvtSel, MsrDevice, MsrError, QmCtr, RegisterError, IA32_QM_CTR, IA32_QM_EVTSEL,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub use pinning::{parse_core_groups, CoreGroups, CorePinning, PinError, Tampered};
pub use session::{rmid_config, MsrBackend, TaskTagger, DEFAULT_INTERVAL};

/// What the monitoring hardware offers, from CPUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// Highest RMID usable for every event in use (CPUID.0xF.1:ECX for L3 events).
    pub max_rmid: u32,
    /// Highest RMID of any resource (sets the RMID field width).
    pub max_rmid_any: u32,
    pub upscale_factor: u32,
    /// Effective MBM counter width.
    pub counter_width: u32,
    pub overflow_bit: bool,
    pub events: Vec<Event>,
}

impl Caps {
    /// What `cpu` offers for L3 monitoring; None without it.
    pub fn of(cpu: &cachescope_hw::CpuInfo) -> Option<Caps> {
        let l3 = cpu.monitoring.l3.as_ref()?;
        Some(Caps::from_l3(l3, cpu.monitoring.max_rmid_any.unwrap_or(l3.max_rmid)))
    }

    pub fn from_l3(l3: &L3Monitoring, max_rmid_any: u32) -> Caps {
        let mut events = Vec::new();
        for (on, e) in
            [(l3.occupancy, Event::L3Occupancy), (l3.mbm_total, Event::MbmTotal), (l3.mbm_local, Event::MbmLocal)]
        {
            if on {
                events.push(e);
            }
        }
        Caps {
            max_rmid: l3.max_rmid,
            max_rmid_any,
            upscale_factor: l3.upscale_factor,
            counter_width: l3.counter_width_linux,
            overflow_bit: l3.overflow_bit,
            events,
        }
    }
}

/// One counter read's outcome. Absence is a value, never a silent 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Counts (multiply by the upscale factor for bytes).
    Count(u64),
    Unavailable,
    Error,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Msr(#[from] MsrError),
    #[error(transparent)]
    Register(#[from] RegisterError),
    #[error("unknown L3 domain {0}")]
    UnknownDomain(u32),
}

struct DomainReader {
    id: u32,
    cpu: u32,
    lock: Mutex<()>,
}

/// Retry bounds of the read protocol.
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    pub error: u32,
    pub unavailable: u32,
}

impl Default for Retries {
    fn default() -> Self {
        Retries { error: 3, unavailable: 2 }
    }
}

/// Counts of the protocol's work, for benchmarks and self-metrics.
#[derive(Debug, Default)]
pub struct ReaderStats {
    pub msr_ops: AtomicU64,
    pub interference: AtomicU64,
    pub retries: AtomicU64,
}

pub struct Reader<D: MsrDevice> {
    dev: D,
    caps: Caps,
    domains: Vec<DomainReader>,
    retries: Retries,
    pub stats: ReaderStats,
}

impl<D: MsrDevice> Reader<D> {
    /// `domains`: (L3 domain id, its CPUs); reads for a domain run on its first CPU.
    pub fn new(dev: D, caps: Caps, domains: &[(u32, Vec<u32>)], retries: Retries) -> Self {
        let domains = domains
            .iter()
            .filter_map(|(id, cpus)| cpus.first().map(|&cpu| DomainReader { id: *id, cpu, lock: Mutex::new(()) }))
            .collect();
        Reader { dev, caps, domains, retries, stats: ReaderStats::default() }
    }

    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    pub fn device(&self) -> &D {
        &self.dev
    }

    pub fn domain_ids(&self) -> Vec<u32> {
        self.domains.iter().map(|d| d.id).collect()
    }

    /// Read `event` for `rmid` in `domain`.
    pub fn read(&self, domain: u32, rmid: u32, event: Event) -> Result<Reading, ReadError> {
        let sel = EvtSel::new(event, rmid, self.caps.max_rmid)?.encode();
        let d = self.domains.iter().find(|d| d.id == domain).ok_or(ReadError::UnknownDomain(domain))?;
        let _serial = d.lock.lock().unwrap_or_else(|p| p.into_inner());
        let (mut errors, mut unavailable) = (0, 0);
        loop {
            self.dev.write(d.cpu, IA32_QM_EVTSEL, sel)?;
            let raw = self.dev.read(d.cpu, IA32_QM_CTR)?;
            self.stats.msr_ops.fetch_add(2, Ordering::Relaxed);
            match QmCtr::decode(raw, self.caps.overflow_bit) {
                QmCtr::Data { count, .. } => return Ok(Reading::Count(count)),
                QmCtr::Error => {
                    // Did another agent (resctrl, pqos, PCM) rewrite EVTSEL between our two
                    // accesses? Then the Error is theirs: retry.
                    let now = self.dev.read(d.cpu, IA32_QM_EVTSEL)?;
                    self.stats.msr_ops.fetch_add(1, Ordering::Relaxed);
                    if now != sel {
                        self.stats.interference.fetch_add(1, Ordering::Relaxed);
                    }
                    if errors >= self.retries.error {
                        return Ok(Reading::Error);
                    }
                    errors += 1;
                }
                QmCtr::Unavailable => {
                    if unavailable >= self.retries.unavailable {
                        return Ok(Reading::Unavailable);
                    }
                    unavailable += 1;
                }
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Occupancy in bytes (count × upscale factor).
    pub fn occupancy_bytes(&self, domain: u32, rmid: u32) -> Result<Option<u64>, ReadError> {
        Ok(match self.read(domain, rmid, Event::L3Occupancy)? {
            Reading::Count(c) => Some(c.saturating_mul(u64::from(self.caps.upscale_factor))),
            _ => None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "interval {interval:?} is longer than the longest safe MBM interval {max:?} ({width}-bit counters of {upscale} B at {peak_gbps} GB/s could wrap unseen)"
)]
pub struct IntervalTooLong {
    pub interval: Duration,
    pub max: Duration,
    pub width: u32,
    pub upscale: u32,
    pub peak_gbps: f64,
}

/// Refuse a sampling interval during which an MBM counter of `caps` could wrap more than
/// once unseen at `peak_bytes_per_sec` (the most one domain can move).
pub fn check_interval(caps: &Caps, interval: Duration, peak_bytes_per_sec: u64) -> Result<(), IntervalTooLong> {
    let max = max_safe_interval(caps.counter_width, caps.upscale_factor, peak_bytes_per_sec);
    if interval > max {
        return Err(IntervalTooLong {
            interval,
            max,
            width: caps.counter_width,
            upscale: caps.upscale_factor,
            peak_gbps: peak_bytes_per_sec as f64 / 1e9,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
