//! CMT/MBM over an [`MsrDevice`]: the same code runs on `/dev/cpu/N/msr` and on the emulator.
//!
//! - [`Reader`]: the read protocol (one reader CPU per L3 domain, serialized per domain;
//!   EVTSEL write then CTR read; Error → re-read EVTSEL to detect interference and retry,
//!   Unavailable → retry, both bounded).
//! - [`MbmTracker`]: cumulative counts to per-interval bytes, modulo 2^width, with the longest
//!   safe interval enforced.
//! - [`CorePinning`]: core-pinned RMIDs in IA32_PQR_ASSOC with CLOS kept, tampering reported,
//!   originals restored.
//! - [`ContainerRmids`]: containers to RMIDs through the allocator, limbo handled.

#![forbid(unsafe_code)]

mod pinning;
mod session;

use cachescope_hw::cpuid::L3Monitoring;
use cachescope_hw::msr::{
    cumulative_delta, max_safe_interval, Cumulative, Event, EvtSel, MsrDevice, MsrError, QmCtr, RegisterError,
    IA32_QM_CTR, IA32_QM_EVTSEL,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub use pinning::{parse_core_groups, CorePinning, PinError, Tampered};
pub use session::{sample_rmid, ContainerRmids, ContainerSample, RmidSample, SessionError, TaskTagger};

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

/// Per-interval MBM bytes from cumulative counters.
#[derive(Debug, Clone)]
pub struct MbmTracker {
    width: u32,
    upscale: u64,
    max_interval: Duration,
    last: BTreeMap<(u32, u32, Event), (u64, Duration)>,
}

/// One MBM delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MbmDelta {
    pub counts: u64,
    pub bytes: u64,
    /// The two reads were farther apart than the safe interval: whole wraps may be missing.
    pub gap_exceeded: bool,
}

impl MbmTracker {
    /// `peak_bytes_per_sec`: the most the platform can move per domain (sets the safe interval).
    pub fn new(caps: &Caps, peak_bytes_per_sec: u64) -> Self {
        MbmTracker {
            width: caps.counter_width,
            upscale: u64::from(caps.upscale_factor),
            max_interval: max_safe_interval(caps.counter_width, caps.upscale_factor, peak_bytes_per_sec),
            last: BTreeMap::new(),
        }
    }

    pub fn max_interval(&self) -> Duration {
        self.max_interval
    }

    /// Refuse a sampling interval during which the counter could wrap more than once unseen.
    pub fn check_interval(&self, interval: Duration, peak_bytes_per_sec: u64) -> Result<(), IntervalTooLong> {
        if interval > self.max_interval {
            return Err(IntervalTooLong {
                interval,
                max: self.max_interval,
                width: self.width,
                upscale: self.upscale as u32,
                peak_gbps: peak_bytes_per_sec as f64 / 1e9,
            });
        }
        Ok(())
    }

    /// Feed a reading taken at `at`; the delta since the previous good reading of the same
    /// counter, or None for the first reading (or after Unavailable/Error, which break the chain).
    pub fn update(&mut self, domain: u32, rmid: u32, event: Event, reading: Reading, at: Duration) -> Option<MbmDelta> {
        let key = (domain, rmid, event);
        let Reading::Count(count) = reading else {
            self.last.remove(&key);
            return None;
        };
        let prev = self.last.insert(key, (count, at));
        // One derivation for every backend: an RMID's chain is broken by forget_rmid, so the
        // generation is constant here.
        let cum = |value| Cumulative { generation: 0, value };
        let (p, t) = prev?;
        let counts = cumulative_delta(Some(cum(p)), cum(count), self.width)?;
        Some(MbmDelta { counts, bytes: counts * self.upscale, gap_exceeded: at.saturating_sub(t) > self.max_interval })
    }

    /// Forget a counter's history (its RMID changed owner).
    pub fn forget_rmid(&mut self, domain: u32, rmid: u32) {
        self.last.retain(|(d, r, _), _| !(*d == domain && *r == rmid));
    }
}

#[cfg(test)]
mod tests;
