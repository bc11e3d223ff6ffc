//! The LLC occupancy and memory-traffic model behind the emulated platform.
//!
//! Per L3 domain, resident bytes are tracked per (container, RMID the lines were tagged with
//! when filled). In each step of virtual time a running container moves `bandwidth × dt` bytes
//! of memory traffic (counted by MBM under the RMID its CPU carries) and fills new lines at
//! `traffic × (1 − resident / footprint)`: the share of its accesses that miss its own working
//! set. Fills go to free space first; beyond that they evict every resident line with equal
//! probability (a fluid random-replacement cache). Invariants, held by construction:
//! - a container's resident bytes never exceed its footprint (fills are clamped to the gap);
//! - the bytes resident in a domain never exceed the L3 size;
//! - alone on a domain, a container converges to its footprint;
//! - MBM bytes equal bandwidth × time exactly (before quantization to the upscale unit);
//! - lines of a stopped container, or of a freed RMID, stay until evicted by others' fills.

use crate::scenario::Scenario;
use cachescope_hw::msr::Event;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

const STEP: Duration = Duration::from_millis(1);
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone)]
struct Container {
    name: String,
    cpus: Vec<u32>,
    footprint: f64,
    /// bytes per second
    bandwidth: f64,
    local_fraction: f64,
    start: Duration,
    stop: Option<Duration>,
    /// RMID given by the engine (task-based tagging); None: the CPU's PQR_ASSOC RMID.
    tag: Option<u32>,
    /// Driven from outside (a host container's measured misses): bytes per second per
    /// domain, set each interval; `cpus`, `bandwidth` and `footprint` are then unused.
    driven: Option<Vec<f64>>,
}

impl Container {
    fn running_at(&self, now: Duration) -> bool {
        self.start <= now && self.stop.is_none_or(|s| now < s)
    }
}

/// Resident bytes are stored divided by `scale`: an eviction, which shrinks every line by the
/// same factor, is one multiplication of `scale` instead of a walk of every line (thousands of
/// containers are stepped every millisecond). The sums per container and per RMID are kept
/// the same way, so neither a fill nor an occupancy read walks the lines.
#[derive(Debug, Clone)]
struct Domain {
    lines: BTreeMap<(usize, u32), f64>,
    /// Sums of `lines` per container index and per RMID, and in all.
    by_container: Vec<f64>,
    by_rmid: HashMap<u32, f64>,
    total: f64,
    scale: f64,
    mbm_total: BTreeMap<u32, f64>,
    mbm_local: BTreeMap<u32, f64>,
    has_data: BTreeSet<u32>,
}

impl Default for Domain {
    fn default() -> Domain {
        Domain {
            lines: BTreeMap::new(),
            by_container: Vec::new(),
            by_rmid: HashMap::new(),
            total: 0.0,
            scale: 1.0,
            mbm_total: BTreeMap::new(),
            mbm_local: BTreeMap::new(),
            has_data: BTreeSet::new(),
        }
    }
}

impl Domain {
    fn resident_of(&self, i: usize) -> f64 {
        self.by_container.get(i).copied().unwrap_or(0.0) * self.scale
    }

    fn fill(&mut self, i: usize, rmid: u32, bytes: f64) {
        let stored = bytes / self.scale;
        *self.lines.entry((i, rmid)).or_default() += stored;
        if self.by_container.len() <= i {
            self.by_container.resize(i + 1, 0.0);
        }
        self.by_container[i] += stored;
        *self.by_rmid.entry(rmid).or_default() += stored;
        self.total += stored;
    }

    /// Every resident line keeps `keep` of its bytes (random replacement, as a fluid).
    fn shrink(&mut self, keep: f64) {
        self.scale *= keep;
        if self.scale < 1e-100 || self.lines.len() > 4 * (self.by_container.len() + self.by_rmid.len()) + 64 {
            self.normalize();
        }
    }

    /// Bytes stored as they are (scale 1), lines under a byte dropped, sums recomputed.
    fn normalize(&mut self) {
        let scale = std::mem::replace(&mut self.scale, 1.0);
        self.lines.values_mut().for_each(|b| *b *= scale);
        self.lines.retain(|_, b| *b >= 1.0);
        self.by_container.iter_mut().for_each(|b| *b = 0.0);
        self.by_rmid.clear();
        self.total = 0.0;
        for (&(i, r), &b) in &self.lines {
            self.by_container[i] += b;
            *self.by_rmid.entry(r).or_default() += b;
            self.total += b;
        }
    }
}

#[derive(Debug, Clone)]
pub struct CacheModel {
    now: Duration,
    l3: f64,
    upscale: f64,
    cpus_per_domain: u32,
    containers: Vec<Container>,
    /// Name → indexes of its entries in `containers`, oldest first (a restarted container
    /// has several): lookups by name cost O(1), not a scan of every container at every step.
    by_name: std::collections::HashMap<String, Vec<usize>>,
    domains: Vec<Domain>,
    rng: u64,
    jitter: f64,
}

impl CacheModel {
    pub fn new(s: &Scenario, upscale_factor: u32) -> CacheModel {
        let p = &s.platform;
        let mut by_name: std::collections::HashMap<String, Vec<usize>> = Default::default();
        for (i, c) in s.containers.iter().enumerate() {
            by_name.entry(c.name.clone()).or_default().push(i);
        }
        CacheModel {
            now: Duration::ZERO,
            l3: p.l3_mib * MIB,
            upscale: f64::from(upscale_factor.max(1)),
            cpus_per_domain: p.cpus_per_domain,
            containers: s
                .containers
                .iter()
                .map(|c| Container {
                    name: c.name.clone(),
                    cpus: c.cpus.clone(),
                    footprint: c.footprint_mib * MIB,
                    bandwidth: c.bandwidth_mbps * 1e6,
                    local_fraction: c.local_fraction,
                    start: Duration::from_millis(c.start_ms),
                    stop: c.stop_ms.map(Duration::from_millis),
                    tag: None,
                    driven: None,
                })
                .collect(),
            by_name,
            domains: vec![Domain::default(); p.domains as usize],
            rng: p.seed ^ 0x9E37_79B9_7F4A_7C15,
            jitter: p.jitter,
        }
    }

    pub fn now(&self) -> Duration {
        self.now
    }

    /// Indexes of the entries named `name`, newest first.
    fn named(&self, name: &str) -> impl Iterator<Item = usize> + '_ {
        self.by_name.get(name).into_iter().flat_map(|v| v.iter().rev().copied())
    }

    pub fn l3_bytes(&self) -> f64 {
        self.l3
    }

    pub fn running(&self) -> Vec<String> {
        self.containers.iter().filter(|c| c.running_at(self.now)).map(|c| c.name.clone()).collect()
    }

    /// Add a container whose traffic is set from outside ([`set_rate`](Self::set_rate)),
    /// running from now on. Every byte of its traffic is a line fill (each LLC miss brings a
    /// line in), up to the L3 size: its working set is unknown, so nothing caps it lower.
    /// False when a container of that name is running already.
    pub fn add_driven(&mut self, name: &str) -> bool {
        if self.named(name).any(|i| self.containers[i].running_at(self.now)) {
            return false;
        }
        self.by_name.entry(name.to_string()).or_default().push(self.containers.len());
        // A name that comes back (a restarted container) gets a fresh entry: its old lines
        // stay with the old one until evicted, as a stopped container's do.
        self.containers.push(Container {
            name: name.to_string(),
            cpus: Vec::new(),
            footprint: self.l3,
            bandwidth: 0.0,
            local_fraction: 1.0,
            start: self.now,
            stop: None,
            tag: None,
            driven: Some(vec![0.0; self.domains.len()]),
        });
        true
    }

    /// Set a driven container's memory traffic in `domain`, bytes per second, until set again.
    pub fn set_rate(&mut self, name: &str, domain: u32, bytes_per_sec: f64) -> bool {
        let now = self.now;
        let i = self.named(name).find(|&i| self.containers[i].running_at(now));
        match i.map(|i| &mut self.containers[i]) {
            Some(Container { driven: Some(rates), .. }) if (domain as usize) < rates.len() => {
                rates[domain as usize] = bytes_per_sec.max(0.0);
                true
            }
            _ => false,
        }
    }

    /// Stop a driven container now; its lines stay until others' fills evict them.
    pub fn stop_driven(&mut self, name: &str) -> bool {
        let now = self.now;
        let i = self.named(name).find(|&i| self.containers[i].driven.is_some() && self.containers[i].stop.is_none());
        match i.map(|i| &mut self.containers[i]) {
            Some(c) => {
                c.stop = Some(now);
                true
            }
            None => false,
        }
    }

    pub fn tag(&mut self, name: &str, rmid: Option<u32>) -> bool {
        let i = self.named(name).next();
        match i.map(|i| &mut self.containers[i]) {
            Some(c) => {
                c.tag = rmid;
                true
            }
            None => false,
        }
    }

    pub fn rmid_occupancy(&self, domain: u32, rmid: u32) -> f64 {
        self.domains.get(domain as usize).map_or(0.0, |d| d.by_rmid.get(&rmid).copied().unwrap_or(0.0) * d.scale)
    }

    pub fn container_occupancy(&self, domain: u32, name: &str) -> f64 {
        // Every entry of that name: a restarted driven container's old lines count too.
        let ids: Vec<usize> = self.named(name).collect();
        self.domains.get(domain as usize).map_or(0.0, |d| ids.iter().map(|&i| d.resident_of(i)).sum())
    }

    pub fn domain_total(&self, domain: u32) -> f64 {
        self.domains.get(domain as usize).map_or(0.0, |d| d.total * d.scale)
    }

    /// The counter in upscale units, or None when the RMID has no data in that domain.
    pub fn counter(&self, domain: u32, rmid: u32, event: Event) -> Option<u64> {
        let d = self.domains.get(domain as usize)?;
        if !d.has_data.contains(&rmid) {
            return None;
        }
        let bytes = match event {
            Event::L3Occupancy => self.rmid_occupancy(domain, rmid).min(self.l3),
            Event::MbmTotal => d.mbm_total.get(&rmid).copied().unwrap_or(0.0),
            Event::MbmLocal => d.mbm_local.get(&rmid).copied().unwrap_or(0.0),
        };
        Some((bytes / self.upscale).floor() as u64)
    }

    /// Advance by `dt` in steps of at most 1 ms; `pqr_rmid(cpu)` gives a CPU's RMID.
    pub fn advance(&mut self, dt: Duration, pqr_rmid: &dyn Fn(u32) -> u32) {
        let mut left = dt;
        while !left.is_zero() {
            let h = left.min(STEP);
            self.step(h, pqr_rmid);
            left -= h;
        }
    }

    fn next_unit(&mut self) -> f64 {
        // xorshift64*: deterministic per seed.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn step(&mut self, h: Duration, pqr_rmid: &dyn Fn(u32) -> u32) {
        let secs = h.as_secs_f64();
        for d in 0..self.domains.len() {
            let lo = d as u32 * self.cpus_per_domain;
            let hi = lo + self.cpus_per_domain;
            // (container, per-CPU tags here, fill bytes)
            let mut fills: Vec<(usize, Vec<u32>, f64)> = Vec::new();
            for i in 0..self.containers.len() {
                let c = &self.containers[i];
                if !c.running_at(self.now) {
                    continue;
                }
                let (tags, traffic, footprint) = match &c.driven {
                    Some(rates) => {
                        let r = rates.get(d).copied().unwrap_or(0.0);
                        if r <= 0.0 {
                            continue;
                        }
                        (vec![c.tag.unwrap_or(0)], r * secs, c.footprint)
                    }
                    None => {
                        let here: Vec<u32> = c.cpus.iter().copied().filter(|&cpu| cpu >= lo && cpu < hi).collect();
                        if here.is_empty() {
                            continue;
                        }
                        let share = here.len() as f64 / c.cpus.len() as f64;
                        let tags = here.iter().map(|&cpu| c.tag.unwrap_or_else(|| pqr_rmid(cpu))).collect();
                        (tags, c.bandwidth * secs * share, c.footprint * share)
                    }
                };
                let per_cpu = traffic / tags.len() as f64;
                let local = c.local_fraction;
                let dom = &mut self.domains[d];
                for &t in &tags {
                    *dom.mbm_total.entry(t).or_default() += per_cpu;
                    *dom.mbm_local.entry(t).or_default() += per_cpu * local;
                    dom.has_data.insert(t);
                }
                let resident = dom.resident_of(i);
                let gap = (footprint - resident).max(0.0);
                let mut fill = traffic * (gap / footprint);
                if self.jitter > 0.0 {
                    fill *= 1.0 + self.jitter * (2.0 * self.next_unit() - 1.0);
                }
                fills.push((i, tags, fill.clamp(0.0, gap)));
            }
            let l3 = self.l3;
            let dom = &mut self.domains[d];
            let mut total_fill: f64 = fills.iter().map(|f| f.2).sum();
            if total_fill > l3 {
                let k = l3 / total_fill;
                fills.iter_mut().for_each(|f| f.2 *= k);
                total_fill = l3;
            }
            let resident = dom.total * dom.scale;
            let evict = (total_fill - (l3 - resident)).max(0.0);
            if evict > 0.0 && resident > 0.0 {
                let keep = (1.0 - evict / resident).max(0.0);
                if keep > 0.0 {
                    dom.shrink(keep);
                } else {
                    *dom = Domain {
                        mbm_total: std::mem::take(&mut dom.mbm_total),
                        mbm_local: std::mem::take(&mut dom.mbm_local),
                        has_data: std::mem::take(&mut dom.has_data),
                        ..Domain::default()
                    };
                }
            }
            for (i, tags, fill) in fills {
                let per = fill / tags.len() as f64;
                for t in tags {
                    dom.fill(i, t, per);
                }
            }
        }
        self.now += h;
    }
}
