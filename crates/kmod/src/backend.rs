//! The engine's backend over the module: containers are tagged by the kernel (at cgroup
//! creation when they match the rules, or when attached here), sampled there every interval,
//! and drained here once per batch; each record keeps the kernel's timestamp.

use crate::abi::{self, flags, kind, Info, Record, Stats};
use crate::device::{KernelDevice, KmodError};
use cachescope_engine::backend::{Attach, BackendInfo, CacheBackend, RawSample, Read, Sampling, SlotCounts};
use cachescope_engine::PartResult;
use cachescope_engine::{Container, ContainerMeta, ContainerSource, Status, WaitReason};
use cachescope_hw::msr::Cumulative;
use cachescope_platform::clock::monotonic;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records of cgroups not (yet) attached here are kept this long (a container is reported
/// by the cgroup watcher a few milliseconds after the kernel tagged it).
const EARLY_KEEP: Duration = Duration::from_secs(2);
/// And at most this many in all.
const EARLY_MAX: usize = 200_000;

/// Cgroup ids are inode numbers the kernel hands out: the integer hasher (SipHash was a tenth
/// of the collector's time on the per-record path).
type ById<V> = cachescope_platform::hash::IntMap<u64, V>;

struct Tracked {
    meta: Arc<ContainerMeta>,
    dir: PathBuf,
    /// The time of the RMID assignment the counters belong to (their generation).
    generation: u64,
    rmid: Option<u32>,
    /// Domains whose last counters (DETACH) have arrived.
    detached: usize,
}

pub struct KmodBackend {
    dev: Box<dyn KernelDevice>,
    info: BackendInfo,
    kinfo: Info,
    /// cgroup id → container, and container id → cgroup id.
    by_cgroup: ById<Tracked>,
    cgroup_of: HashMap<String, u64>,
    /// Records of cgroups not attached here yet, oldest first per cgroup.
    early: ById<Vec<Record>>,
    early_len: usize,
    records: Vec<Record>,
    /// CLOCK_MONOTONIC at the run's t = 0.
    origin: Duration,
    lost_kernel: u64,
    lost_early: u64,
    no_rmid: Vec<(String, WaitReason)>,
    stats: Stats,
}

impl KmodBackend {
    /// `rules`: globs over cgroup v2 paths whose cgroups get an RMID when created (the
    /// runtimes' container cgroups and `--containers`), `!` to exclude.
    pub fn new(dev: Box<dyn KernelDevice>, rules: &[String], cpuid: String) -> Result<KmodBackend, KmodError> {
        let k = dev.info()?;
        let adopted = dev.set_rules(rules)?;
        let emulated = (k.emulate != 0).then(|| {
            format!(
                "the kernel module's model (emulate=1: 1 byte per ns a CPU runs under an RMID, {}% local, L3 {} KiB)",
                k.local_pct,
                k.l3_bytes >> 10
            )
        });
        let label = format!(
            "kmod ({}, {} RMIDs, every {} us{})",
            dev.path().display(),
            k.num_rmids,
            k.interval_ns / 1000,
            if k.emulate != 0 { ", EMULATED" } else { "" }
        );
        let info = BackendInfo {
            domains: k.domains().to_vec(),
            upscale: k.upscale,
            mbm_width: k.ctr_width,
            mbm_unit: k.upscale,
            sampling: Sampling::Kernel,
            emulated,
            metadata: vec![
                ("cachescope.kmod.interval_ns".into(), k.interval_ns.to_string()),
                ("cachescope.kmod.num_rmids".into(), k.num_rmids.to_string()),
                ("cachescope.kmod.rules".into(), rules.join(" ")),
                ("cachescope.kmod.adopted".into(), adopted.to_string()),
            ],
            ..BackendInfo::new(label, cpuid, Some(k.l3_bytes))
        };
        Ok(KmodBackend {
            dev,
            info,
            kinfo: k,
            by_cgroup: ById::default(),
            cgroup_of: HashMap::new(),
            early: ById::default(),
            early_len: 0,
            records: Vec::new(),
            origin: monotonic(),
            lost_kernel: 0,
            lost_early: 0,
            no_rmid: Vec::new(),
            stats: Stats::default(),
        })
    }

    /// The module on this host (its device at [`crate::device::DEFAULT_PATH`]) watching
    /// `rules`, with Linux's MBM correction where `cpu` needs it and the counters are real.
    pub fn on_host(rules: &[String], cpu: &cachescope_hw::CpuInfo) -> Result<KmodBackend, KmodError> {
        let dev = crate::Device::open(std::path::Path::new(crate::device::DEFAULT_PATH))?;
        let mut backend = KmodBackend::new(Box::new(dev), rules, cpu.summary())?;
        if backend.kinfo.emulate == 0 {
            backend.info.correct_mbm_for(cpu);
        }
        Ok(backend)
    }

    pub fn kernel_info(&self) -> &Info {
        &self.kinfo
    }

    /// The module samples every `interval_us` (its parameter): the run's interval is that,
    /// and an `asked` one that differs is refused (with why).
    pub fn interval(&self, asked: Option<Duration>) -> Result<Duration, String> {
        let period = Duration::from_nanos(self.kinfo.interval_ns);
        match asked.filter(|i| *i != period) {
            Some(i) => Err(format!(
                "{i:?}: the module samples every {period:?} (its interval_us parameter); leave it unset or reload the module"
            )),
            None => Ok(period),
        }
    }

    /// The domain a CPU's PMU counts are charged to, as the module's rows name domains: its
    /// emulated domains deal CPUs round robin (emu_domains under /sys/module); None where the
    /// domains are the host's L3s.
    pub fn emulated_domains(&self) -> Option<u32> {
        if self.kinfo.emulate == 0 {
            return None;
        }
        let params = crate::device::parameters(std::path::Path::new(crate::device::SYSFS)).unwrap_or_default();
        params.iter().find(|(n, _)| n == "emu_domains").and_then(|(_, v)| v.parse().ok()).filter(|&n: &u32| n > 0)
    }

    fn at(&self, time_ns: u64) -> Duration {
        Duration::from_nanos(time_ns).saturating_sub(self.origin)
    }

    /// Drain the device into `self.records`.
    fn drain(&mut self) -> PartResult {
        Ok(self.dev.drain(&mut self.records).map(|_| ())?)
    }

    fn waiting_reason(&mut self) -> WaitReason {
        if let Ok(s) = self.dev.stats() {
            self.stats = s;
        }
        if self.stats.rmids_limbo > 0 {
            WaitReason::Limbo
        } else {
            WaitReason::Exhausted
        }
    }

    /// One record of an attached cgroup as a sample (None: not a sample).
    fn sample(&mut self, r: &Record) -> Option<RawSample> {
        let at = self.at(r.time_ns);
        let t = self.by_cgroup.get_mut(&r.cgroup_id)?;
        match r.kind {
            kind::ATTACH => {
                t.generation = r.time_ns;
                t.rmid = Some(r.rmid);
                t.detached = 0;
            }
            kind::DETACH => t.detached += 1,
            kind::SAMPLE => {}
            kind::NO_RMID => {
                if t.rmid.take().is_some() {
                    let id = t.meta.id.clone();
                    self.no_rmid.push((id, no_rmid_reason(r.occupancy)));
                }
                return None;
            }
            _ => return None,
        }
        let mut s = RawSample::new(t.meta.clone(), u32::from(r.domain), at);
        s.rmid = Some(r.rmid);
        let f = r.flags;
        s.status = if f & (flags::OCC_ERROR | flags::TOTAL_ERROR | flags::LOCAL_ERROR) != 0 {
            Status::Error
        } else if f & (flags::OCC_UNAVAIL | flags::TOTAL_UNAVAIL | flags::LOCAL_UNAVAIL) != 0 {
            Status::Unavailable
        } else {
            Status::Ok
        };
        let upscale = self.kinfo.upscale;
        if f & (flags::OCC_NONE | flags::OCC_ERROR | flags::OCC_UNAVAIL) == 0 {
            s.occupancy_bytes = Some(r.occupancy.saturating_mul(upscale));
        }
        let generation = t.generation;
        let counter =
            |value: u64, bad: u8| (f & (flags::MBM_NONE | bad) == 0).then_some(Cumulative { generation, value });
        s.mbm_total = counter(r.mbm_total, flags::TOTAL_ERROR | flags::TOTAL_UNAVAIL);
        s.mbm_local = counter(r.mbm_local, flags::LOCAL_ERROR | flags::LOCAL_UNAVAIL);
        Some(s)
    }

    fn keep_early(&mut self, r: Record) {
        if self.early_len >= EARLY_MAX {
            self.lost_early += 1;
            return;
        }
        self.early.entry(r.cgroup_id).or_default().push(r);
        self.early_len += 1;
    }

    fn prune_early(&mut self) {
        let cutoff = monotonic().saturating_sub(EARLY_KEEP).as_nanos() as u64;
        let mut dropped = 0;
        self.early.retain(|_, v| {
            let keep = v.last().is_some_and(|r| r.time_ns >= cutoff);
            if !keep {
                dropped += v.len();
            }
            keep
        });
        self.early_len -= dropped;
    }
}

/// What the module says of a cgroup it runs untagged.
fn no_rmid_reason(why: u64) -> WaitReason {
    match why {
        abi::no_rmid::LIMBO => WaitReason::Limbo,
        abi::no_rmid::TABLE_FULL => WaitReason::TableFull,
        _ => WaitReason::Exhausted,
    }
}

impl KmodBackend {
    /// What it says of itself, for the part the module cannot know (Linux's MBM correction).
    pub fn info_mut(&mut self) -> &mut BackendInfo {
        &mut self.info
    }
}

impl CacheBackend for KmodBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn origin(&mut self, monotonic: Duration) {
        self.origin = monotonic;
    }

    fn attach(&mut self, c: &Container, _: &dyn ContainerSource, _: Duration) -> PartResult<Attach> {
        let (Some(cgid), Some(dir)) = (c.cgroup_id, c.dir.clone()) else {
            return Ok(Attach::Waiting(WaitReason::CannotTag));
        };
        let rmid = match self.dev.attach(&dir) {
            Ok(r) => r,
            // Gone already: its stop follows from the container source.
            Err(KmodError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
            // The module's table of cgroups (max_cgroups) is full: retried as cgroups go.
            Err(KmodError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOMEM) => {
                return Ok(Attach::Waiting(WaitReason::TableFull))
            }
            Err(e) => return Err(e.into()),
        };
        let Some(rmid) = rmid else {
            return Ok(Attach::Waiting(self.waiting_reason()));
        };
        self.cgroup_of.insert(c.id().to_string(), cgid);
        let t = Tracked { meta: c.meta.clone(), dir, generation: 0, rmid: Some(rmid), detached: 0 };
        self.by_cgroup.insert(cgid, t);
        // What the kernel recorded before we knew the container (its ATTACH baseline first).
        if let Some(v) = self.early.remove(&cgid) {
            self.early_len -= v.len();
            let mut v = v;
            v.append(&mut self.records);
            self.records = v;
        }
        Ok(Attach::Monitored { rmid: Some(rmid) })
    }

    fn detach(&mut self, id: &str, _: Duration) -> PartResult {
        let Some(cgid) = self.cgroup_of.remove(id) else { return Ok(()) };
        if let Some(t) = self.by_cgroup.remove(&cgid) {
            // A live cgroup (the RMID policy takes its RMID): the kernel stops tagging it.
            self.dev.detach(&t.dir)?;
        }
        Ok(())
    }

    fn stopping(&mut self, ids: &[String]) {
        // Their cgroups are gone: the kernel reads their last counters at each domain's next
        // tick. Wait for those (a few intervals at most) so no byte of the end is lost.
        let domains = self.kinfo.nr_domains as usize;
        let wanted: Vec<u64> = ids.iter().filter_map(|id| self.cgroup_of.get(id).copied()).collect();
        let deadline = Instant::now()
            + Duration::from_nanos(self.kinfo.interval_ns.saturating_mul(4)).max(Duration::from_millis(4));
        while !wanted.is_empty() && Instant::now() < deadline {
            let from = self.records.len();
            if self.drain().is_err() {
                return;
            }
            let done = |cg: &u64, recs: &[Record]| {
                let n = recs.iter().filter(|r| r.cgroup_id == *cg && r.kind == kind::DETACH).count();
                n + self.by_cgroup.get(cg).map_or(domains, |t| t.detached) >= domains
            };
            let _ = from;
            if wanted.iter().all(|cg| done(cg, &self.records)) {
                return;
            }
            let _ = self.dev.wait(Duration::from_millis(1));
        }
    }

    fn collect(&mut self, _now: Duration, _read: Read<'_>, out: &mut Vec<RawSample>) -> PartResult {
        // The kernel decided what to read (what ran, and the rest round robin): all of it is kept.
        self.drain()?;
        // Each domain's ticks come in order, and the domains' interleave almost in order:
        // sorting the small records (stable: a baseline before a sample of the same instant)
        // keeps the rows in time order.
        if !self.records.is_sorted_by_key(|r| r.time_ns) {
            self.records.sort_by_key(|r| r.time_ns);
        }
        let records = std::mem::take(&mut self.records);
        for r in &records {
            match r.kind {
                kind::OVERRUN => self.lost_kernel += r.occupancy,
                kind::FREED => {}
                // Sampled before the run began (the module samples from the rules' setting,
                // the run's clock starts later): such a row would be stamped at the run's
                // first instant, every one of them at that one instant. The baselines
                // (ATTACH) before it stay, and bandwidth counters are cumulative, so the next
                // sample's delta still holds every byte since the container was tagged.
                kind::SAMPLE if Duration::from_nanos(r.time_ns) < self.origin => {}
                _ if self.by_cgroup.contains_key(&r.cgroup_id) => {
                    if let Some(s) = self.sample(r) {
                        out.push(s);
                    }
                }
                _ => self.keep_early(*r),
            }
        }
        self.records = records;
        self.records.clear();
        Ok(())
    }

    fn upkeep(&mut self, _now: Duration, _src: &dyn ContainerSource) -> PartResult<Vec<(String, WaitReason)>> {
        self.prune_early();
        if let Ok(s) = self.dev.stats() {
            self.stats = s;
        }
        let lost = std::mem::take(&mut self.no_rmid);
        for (id, _) in &lost {
            if let Some(cg) = self.cgroup_of.remove(id) {
                self.by_cgroup.remove(&cg);
            }
        }
        Ok(lost)
    }

    fn slots(&self) -> SlotCounts {
        SlotCounts { in_use: self.stats.rmids_in_use, limbo: Some(self.stats.rmids_limbo) }
    }

    fn header(&self) -> Vec<String> {
        let s = &self.stats;
        let mut v = vec![format!(
            "kmod: {} RMIDs free, {} cgroups watched, {} waiting for an RMID; sampling {:.1} us per tick (max {:.1}) over {} ticks",
            s.rmids_free,
            s.cgroups,
            s.waiting,
            if s.ticks > 0 { s.tick_ns as f64 / s.ticks as f64 / 1e3 } else { 0.0 },
            s.tick_ns_max as f64 / 1e3,
            s.ticks
        )];
        if self.lost_kernel > 0 || self.lost_early > 0 || s.misplaced > 0 {
            v.push(format!(
                "kmod: LOST {} records to a full ring, {} of cgroups never attached here; {} ticks off their domain",
                self.lost_kernel, self.lost_early, s.misplaced
            ));
        }
        v
    }

    fn shutdown(&mut self) -> PartResult<Vec<String>> {
        let s = self.dev.stats()?;
        let mut m = vec![format!(
            "kmod: {} context switches seen, PQR_ASSOC written {} times; {} sampling ticks, {:.1} us each on average; \
             closing the device restores PQR_ASSOC and sends {} RMIDs to limbo",
            s.switches,
            s.pqr_writes,
            s.ticks,
            if s.ticks > 0 { s.tick_ns as f64 / s.ticks as f64 / 1e3 } else { 0.0 },
            s.rmids_in_use
        )];
        if s.overruns > 0 || self.lost_early > 0 {
            m.push(format!(
                "kmod: {} records lost to a full ring (raise ring_records), {} dropped for cgroups never attached",
                s.overruns, self.lost_early
            ));
        }
        Ok(m)
    }
}
