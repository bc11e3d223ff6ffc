//! The PMU columns of docs/data.md per container and L3 domain, as the engine's PMU source. Two
//! sources: the eBPF attribution (1 ms slots sampled in the kernel, drained in batches; the
//! default), or perf cgroup events (one counter group per container × CPU, read when
//! drained; the fallback where BPF cannot load, fine at ≥ 100 ms for tens of containers).
//! CPU time (cpu-clock) is always counted beside the hardware events, so every row has its
//! `cpu_ns`; where no hardware event can be counted (a VM without a virtual PMU) those
//! columns stay null and the description says why.

use crate::{capacity_for, Attribution};
use cachescope_engine::containers::Container;
use cachescope_engine::pmu::{Counted, Gap, PmuSample, PmuSource};
use cachescope_engine::{ById, ContainerMeta};
use cachescope_engine::{PartError, PartResult};
use cachescope_hw::CpuInfo;
use cachescope_perf::cgroup::{self, CgroupCollector};
use cachescope_perf::counter::{group_fits, CounterGroup, Target};
use cachescope_perf::events::{resolve, Named, PERF_TYPE_SOFTWARE, SW_CPU_CLOCK};
use cachescope_perf::format::{Encoded, Pmu as CorePmu};
use cachescope_platform::clock::monotonic;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Where PMU counts come from (`--pmu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// eBPF, or perf cgroup events where BPF cannot load.
    Auto,
    Bpf,
    Perf,
}

/// How often the eBPF slots are drained: the kernel keeps 1 ms slots meanwhile.
pub const BPF_DRAIN_EVERY: Duration = Duration::from_millis(50);
/// How deep below a container cgroups are followed (cgroup v2 itself allows any depth; a
/// path is at most 4096 bytes, so real nesting stays far below this).
const MAX_NESTING: usize = 2048;

/// cgroup ids that no followed container holds, remembered at most (then forgotten and
/// looked up again).
const MAX_UNKNOWN: usize = 65_536;

/// How often perf cgroup counters are read (each read is a syscall per container × CPU).
pub const PERF_READ_EVERY: Duration = Duration::from_millis(100);
/// Cgroups the eBPF slot map is sized for in one slot: a 1 ms slot sees at most a few
/// cgroups per CPU (one runs at a time), so 8 per CPU, at most 128. A drain walks every
/// bucket of the map, so its size is the drain's cost; charges beyond it are lost and counted.
fn cgroups_per_slot(cpus: usize) -> usize {
    (8 * cpus).clamp(16, 128)
}

/// `CACHESCOPE_BPF_TICKS` (docs/cli.md, a diagnostic for comparing costs): `followed`, the
/// default, or `every-cpu`, the 1 ms tick on every CPU that came before it.
fn ticks_asked() -> Result<crate::Ticks, String> {
    match std::env::var("CACHESCOPE_BPF_TICKS") {
        Err(_) => Ok(crate::Ticks::Followed),
        Ok(v) if v == "followed" => Ok(crate::Ticks::Followed),
        Ok(v) if v == "every-cpu" => Ok(crate::Ticks::EveryCpu),
        Ok(v) => Err(format!("CACHESCOPE_BPF_TICKS: {v:?} is neither \"followed\" nor \"every-cpu\"")),
    }
}

/// `CACHESCOPE_BPF_QUIET` (docs/cli.md, a diagnostic for comparing costs): `on`, the default,
/// charges cgroups no container claims in lumps; `off` charges each apart at every switch, as
/// before 2026-11-29.
fn quiet_asked() -> Result<bool, String> {
    match std::env::var("CACHESCOPE_BPF_QUIET") {
        Err(_) => Ok(true),
        Ok(v) if v == "on" => Ok(true),
        Ok(v) if v == "off" => Ok(false),
        Ok(v) => Err(format!("CACHESCOPE_BPF_QUIET: {v:?} is neither \"on\" nor \"off\"")),
    }
}

enum Source {
    Bpf(Box<Attribution>),
    Perf(CgroupCollector),
}

pub struct PmuColumns {
    src: Source,
    /// For each counted event: the PMU column (Named::ALL order) it fills, or None for the
    /// cpu-clock event (always last).
    columns: Vec<Option<usize>>,
    counted: Counted,
    /// cgroup id → container (the eBPF attribution charges cgroup ids): each followed
    /// container's own cgroup and every cgroup below it, charged to the nearest container.
    by_cgroup: BTreeMap<u64, Arc<ContainerMeta>>,
    /// Followed container → the cgroup id the eBPF ticks follow for it.
    ticked: HashMap<ById, u64>,
    /// Followed containers' cgroup directories, for finding the cgroups below them.
    dirs: BTreeMap<ById, std::path::PathBuf>,
    /// cgroup ids seen in slots that no followed container holds (with `ids`: for good, as a
    /// cgroup's place in the tree does not change; else until the next rescan).
    unknown: std::collections::HashSet<u64>,
    last_rescan: Option<std::time::Instant>,
    /// The cgroup tree by id (crate::cgroup_id), opened at the first followed directory; None
    /// before, or where the kernel refused it (then a charge of an unknown cgroup rescans
    /// every followed container's tree, at most once a second).
    ids: Option<crate::cgroup_id::CgroupIds>,
    ids_failed: bool,
    /// Followed containers' own cgroup ids → container id: a walk below a container stops at
    /// another followed container's cgroup (the nearest container wins).
    own: HashMap<u64, Arc<ContainerMeta>>,
    /// container id → container (perf charges container ids).
    by_id: std::collections::BTreeSet<ById>,
    /// CPU ns per container since the last header line, and slots or reads drained.
    cpu_ns: BTreeMap<ById, u64>,
    reads: u64,
    description: String,
    /// Why PMU columns stay null, each reason once with its columns ("cycles, instructions:
    /// no hardware PMU ..."); None where every column counts.
    null_reason: Option<String>,
    /// The kernel's count of dropped charges at the last drain, and the gap the last drain
    /// found.
    lost_seen: u64,
    gap: Option<Gap>,
    /// Slots of cgroups no followed container holds yet (domain, slot end, values): a
    /// container seen after it started running is charged from its first slot, not from when
    /// it was found. Kept for [`ORPHANS_FOR`].
    orphans: HashMap<u64, Vec<(u32, Duration, Vec<u64>)>>,
    orphan_count: usize,
    /// Orphan slots of a container just followed, for the next drain.
    ready: Vec<PmuSample>,
    /// When perf's counters were last read (CLOCK_MONOTONIC).
    last_read: Option<Duration>,
    /// Containers whose perf events could not be opened: null columns, not 0.
    uncounted: HashSet<String>,
    /// Charges (eBPF) or container reads (perf) the kernel scaled because the counters were
    /// multiplexed, and of how many (perf; eBPF's total comes from its stats).
    mux: (u64, u64),
    /// Whether cgroups no container claims are made quiet (eBPF; `CACHESCOPE_BPF_QUIET`).
    quiet_unclaimed: bool,
    /// cgroups made quiet, and when: said again after [`QUIET_AGAIN`] if still charged (a
    /// quiet one is still charged the lumps of quiet work), in case the kernel forgot it.
    quieted: HashMap<u64, Duration>,
    /// The host's context switches a second while the eBPF programs loaded (None: perf, or
    /// not measured).
    switch_rate: Option<f64>,
    /// The llc columns come from generic cache events counted at the L2 (AMD).
    l2_side: bool,
}

/// The host's context switches since boot (/proc/stat), and when read.
fn host_switches() -> Option<(u64, std::time::Instant)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let n = stat.lines().find_map(|l| l.strip_prefix("ctxt "))?.trim().parse().ok()?;
    Some((n, std::time::Instant::now()))
}

/// Switches a second since `before`, where at least 20 ms passed (else too rough).
fn switch_rate_since(before: (u64, std::time::Instant)) -> Option<f64> {
    let (n, t) = host_switches()?;
    let secs = t.duration_since(before.1).as_secs_f64();
    (secs >= 0.02).then(|| n.saturating_sub(before.0) as f64 / secs)
}

/// Above this many context switches a second the eBPF programs' cost is said at start: about
/// 1.25 % of a core at the 0.5 us a switch between unfollowed tasks costs on our VMs
/// (docs/cost.md, "Context switches").
const HIGH_SWITCH_RATE: f64 = 25_000.0;
/// Said at start where the llc columns come from the kernel's generic cache events that count
/// elsewhere than the L3 (AMD: the L2), so that no one reads them as L3 figures.
const L2_SIDE_NOTE: &str = "llc_references and llc_misses count at the L2 on this CPU: the kernel's generic cache \
events (its core PMU has no per-task L3 event; docs/data.md)";
/// The containers the header's CPU line names, the busiest; the others are counted and summed.
const CPU_LINE_NAMED: usize = 8;

/// The start-up line for a host that switches tasks `rate` times a second, where that is high.
pub fn switch_cost_note(rate: f64) -> Option<String> {
    (rate >= HIGH_SWITCH_RATE).then(|| {
        format!(
            "eBPF: {:.0} context switches a second on this host at start; the program runs at each: \
             about {:.0} % of a core (0.5 us a switch on a 2-CPU VM; cachescope_ebpf_cpu_seconds_total \
             measures it here; --pmu off avoids it)",
            rate,
            (rate * 0.5e-6 * 100.0).max(1.0)
        )
    })
}

/// Counts read at `now` that accrued since `prev`, for rows that end at `wake` (a sample time
/// the read came late for): the part before `wake`, in proportion to the time (as a steady
/// rate would give), and the rest. None where `wake` does not fall inside (`prev`, `now`).
fn split_at(values: &[u64], prev: Duration, wake: Duration, now: Duration) -> Option<(Vec<u64>, Vec<u64>)> {
    if !(prev < wake && wake < now) {
        return None;
    }
    let f = (wake - prev).as_nanos() as f64 / (now - prev).as_nanos() as f64;
    let before: Vec<u64> = values.iter().map(|&v| ((v as f64 * f).round() as u64).min(v)).collect();
    let after = values.iter().zip(&before).map(|(&v, &b)| v - b).collect();
    Some((before, after))
}

/// How long slots of a cgroup no container holds are kept, waiting for one to be found.
const ORPHANS_FOR: Duration = Duration::from_secs(2);
/// How often a cgroup made quiet is made quiet again while it is still charged.
const QUIET_AGAIN: Duration = Duration::from_secs(60);
/// At most this many orphan slots are kept (a host with many unfollowed cgroups).
const MAX_ORPHANS: usize = 200_000;

/// How long a probe group counts before it is judged scheduled or not: several of the kernel's
/// rotations (every 4 ms by default) of the groups it multiplexes.
const FIT_WAIT: Duration = Duration::from_millis(40);

/// The start's description of the columns (`columns`: the hardware events' columns; `missing`:
/// (column, reason) of those left out), which columns count, and why the others are null.
fn described(columns: &[Option<usize>], missing: &[(&str, String)]) -> (String, Counted, Option<String>) {
    let missing = grouped(missing);
    let what = if columns.is_empty() {
        format!("no PMU event counts here ({missing}); CPU time from cpu-clock")
    } else {
        let names: Vec<&str> = columns.iter().flatten().map(|&c| Named::ALL[c].column()).collect();
        let mut d = format!("{}, cpu_ns", names.join(", "));
        if !missing.is_empty() {
            d.push_str(&format!(" (null: {missing})"));
        }
        d
    };
    let mut counted = Counted { cpu_ns: true, ..Counted::default() };
    for c in columns.iter().flatten() {
        counted.pmu[*c] = true;
    }
    (what, counted, (!missing.is_empty()).then_some(missing))
}

fn usable(e: &Encoded) -> bool {
    CounterGroup::open(&Target::Cpu(0), std::slice::from_ref(e)).is_ok()
}

impl PmuColumns {
    /// Resolve the events this CPU counts and start a source; the reason when none works.
    /// `cpus`: every online CPU; `domain_of[cpu]`: the domain its counts are charged to.
    pub fn start(
        cpu: Option<&CpuInfo>,
        cpus: &[usize],
        domain_of: Vec<u32>,
        choice: Choice,
    ) -> Result<PmuColumns, String> {
        let core = CorePmu::load(Path::new("/sys"), "cpu").ok();
        let mut events = Vec::new();
        let mut columns = Vec::new();
        let mut missing = Vec::new();
        let mut l2_side = false;
        if let Some(cpu) = cpu {
            for r in resolve(cpu, core.as_ref()) {
                match r {
                    Ok(x) if usable(&x.encoded) => {
                        l2_side |= matches!(x.named, Named::LlcReferences | Named::LlcMisses) && !x.is_llc;
                        events.push(x.encoded);
                        columns.push(Named::ALL.iter().position(|n| *n == x.named));
                    }
                    Ok(x) => missing.push((x.named.column(), "cannot be opened here".to_string())),
                    Err(u) => missing.push((u.named.column(), u.reason)),
                }
            }
        }
        let (what, counted, null_reason) = described(&columns, &missing);
        events.push(Encoded { type_: PERF_TYPE_SOFTWARE, config: SW_CPU_CLOCK, ..Encoded::default() });
        columns.push(None);
        let quiet_unclaimed = quiet_asked()?;
        let on = |src, description, columns: &[Option<usize>], counted, null_reason: &Option<String>| PmuColumns {
            null_reason: null_reason.clone(),
            src,
            columns: columns.to_vec(),
            counted,
            by_cgroup: BTreeMap::new(),
            ticked: HashMap::new(),
            dirs: BTreeMap::new(),
            unknown: Default::default(),
            last_rescan: None,
            ids: None,
            ids_failed: false,
            own: HashMap::new(),
            by_id: Default::default(),
            cpu_ns: BTreeMap::new(),
            reads: 0,
            description,
            lost_seen: 0,
            gap: None,
            orphans: HashMap::new(),
            orphan_count: 0,
            ready: Vec::new(),
            last_read: None,
            uncounted: HashSet::new(),
            mux: (0, 0),
            quiet_unclaimed,
            quieted: HashMap::new(),
            switch_rate: None,
            l2_side,
        };
        let bpf_failed = if choice == Choice::Perf {
            String::new()
        } else {
            let per_drain = BPF_DRAIN_EVERY.as_millis() as u32;
            let slot = Duration::from_millis(1);
            let cap = capacity_for(cgroups_per_slot(cpus.len()), per_drain);
            let before = host_switches();
            match Attribution::start_with(&events, cpus, slot, cap, ticks_asked()?) {
                Ok(mut a) => {
                    a.group_cpus(domain_of);
                    let d = format!("eBPF, 1 ms slots, {}: {what}", a.tick_mode());
                    let mut p = on(Source::Bpf(Box::new(a)), d, &columns, counted, &null_reason);
                    p.switch_rate = before.and_then(switch_rate_since);
                    return Ok(p);
                }
                Err(e) if choice == Choice::Bpf => return Err(format!("eBPF attribution: {e}")),
                Err(e) => format!("eBPF attribution unavailable: {e}"),
            }
        };
        // perf cgroup events: opened per container as they come; check now that this kernel
        // lets us count at all.
        if let Err(e) = CounterGroup::open(&Target::Cpu(cpus.first().copied().unwrap_or(0)), &events) {
            return Err(if bpf_failed.is_empty() {
                format!("perf events: {e}")
            } else {
                format!("{bpf_failed}; perf events: {e}")
            });
        }
        // One group per container and CPU, which the PMU schedules whole or not at all: a group
        // it cannot hold beside its other users (the NMI watchdog's cycles, a perf pinning
        // counters) is never scheduled, and every event of it, cpu-clock too, would read 0 for
        // the whole run with nothing to scale. Hardware events that do not fit are left out,
        // the last first (misses, references, instructions, cycles), null with the reason.
        let cpu0 = cpus.first().copied().unwrap_or(0);
        let (mut what, mut counted, mut null_reason) = (what, counted, null_reason);
        while events.len() > 1 && !group_fits(cpu0, &events, FIT_WAIT).unwrap_or(true) {
            let at = events.len() - 2;
            events.remove(at);
            if let Some(c) = columns.remove(at) {
                missing.push((
                    Named::ALL[c].column(),
                    "no counter free beside the PMU's other users (the NMI watchdog, perf): a group with it is never scheduled"
                        .to_string(),
                ));
            }
            let hw = &columns[..columns.len() - 1];
            (what, counted, null_reason) = described(hw, &missing);
        }
        let mut col = CgroupCollector::new(events, cpus.to_vec());
        col.group_cpus(domain_of);
        let why = if bpf_failed.is_empty() { "--pmu perf" } else { bpf_failed.as_str() };
        let mut desc = format!("perf cgroup events ({why}), read every {PERF_READ_EVERY:?}: {what}");
        if let Some(w) = cgroup::warning(1, cpus.len(), PERF_READ_EVERY) {
            desc.push_str(&format!("; {w}"));
        }
        Ok(on(Source::Perf(col), desc, &columns, counted, &null_reason))
    }

    /// Map every cgroup below each followed container to it: the nearest enclosing container
    /// wins, at any depth (a process in `web/inner/` is `web`'s unless `inner` is followed).
    fn rescan(&mut self) {
        self.last_rescan = Some(std::time::Instant::now());
        self.unknown.clear();
        // Shallower containers first, so a deeper (nearer) one overwrites what lies below it.
        let mut dirs: Vec<(&std::path::PathBuf, &Arc<ContainerMeta>)> =
            self.dirs.iter().map(|(k, d)| (d, &k.0)).collect();
        dirs.sort_by_key(|(d, _)| d.components().count());
        for (dir, meta) in dirs {
            use std::os::unix::fs::MetadataExt;
            // Its own cgroup first: an enclosing container's walk, done before, mapped it too.
            if let Ok(m) = std::fs::metadata(dir) {
                self.by_cgroup.insert(m.ino(), meta.clone());
            }
            let mut stack = vec![(dir.clone(), 0usize)];
            while let Some((d, depth)) = stack.pop() {
                let Ok(rd) = std::fs::read_dir(&d) else { continue };
                for e in rd.flatten() {
                    let Ok(m) = e.metadata() else { continue };
                    // Non-UTF-8 names are followed like any other: only the inode matters.
                    if m.is_dir() && depth < MAX_NESTING {
                        self.by_cgroup.insert(m.ino(), meta.clone());
                        stack.push((e.path(), depth + 1));
                    }
                }
            }
        }
    }

    /// The container charged for a cgroup id: the nearest followed container among the
    /// cgroup's ancestors, by id (crate::cgroup_id); where the kernel does not give cgroups
    /// by id, a rescan (at most once a second) finds cgroups created below followed
    /// containers since the last one.
    fn owner(&mut self, cgroup_id: u64) -> Option<Arc<ContainerMeta>> {
        if let Some(m) = self.by_cgroup.get(&cgroup_id) {
            return Some(m.clone());
        }
        if self.unknown.contains(&cgroup_id) || self.dirs.is_empty() {
            return None;
        }
        if let Some(ids) = self.ids.as_ref().filter(|_| !self.ids_failed) {
            // Every cgroup of the host that runs gets here once: bounded all the same.
            if self.unknown.len() >= MAX_UNKNOWN {
                self.unknown.clear();
            }
            match ids.ancestry(cgroup_id, MAX_NESTING) {
                Ok(chain) => {
                    let m = chain[1..].iter().find_map(|a| self.by_cgroup.get(a)).cloned();
                    match &m {
                        Some(m) => {
                            self.by_cgroup.insert(cgroup_id, m.clone());
                        }
                        None => {
                            self.unknown.insert(cgroup_id);
                        }
                    }
                    return m;
                }
                // Removed since it ran: a short-lived cgroup no one can place now.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ESTALE | libc::ENOENT)) => {
                    self.unknown.insert(cgroup_id);
                    return None;
                }
                Err(e) => {
                    cachescope_platform::say!(
                        "cgroups by id: {e}; cgroups created inside containers are found by rescanning their trees"
                    );
                    self.ids_failed = true;
                    self.unknown.clear();
                }
            }
        }
        if self.last_rescan.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            self.rescan();
            if let Some(m) = self.by_cgroup.get(&cgroup_id) {
                return Some(m.clone());
            }
        }
        self.unknown.insert(cgroup_id);
        None
    }

    /// Map the cgroups below `dir` (a followed container's) to it, down to another followed
    /// container's cgroup, which keeps its own.
    fn walk(&mut self, dir: std::path::PathBuf, meta: &Arc<ContainerMeta>) {
        use std::os::unix::fs::MetadataExt;
        let mut stack = vec![(dir, 0usize)];
        while let Some((d, depth)) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                // The type comes with the directory's entries: only the cgroups below are
                // stat'ed, not the 30-odd interface files of each (at 10,000 containers,
                // 300,000 inodes the kernel would make for nothing). The inode number is
                // stat's: the entries' own (d_ino) did not match the cgroup ids the kernel
                // charges (measured: a nested container charged another cgroup's time).
                if !e.file_type().is_ok_and(|t| t.is_dir()) || depth >= MAX_NESTING {
                    continue;
                }
                let Ok(ino) = e.metadata().map(|m| m.ino()) else { continue };
                if self.own.contains_key(&ino) {
                    continue;
                }
                self.by_cgroup.insert(ino, meta.clone());
                self.unknown.remove(&ino);
                self.adopt(ino, meta);
                stack.push((e.path(), depth + 1));
            }
        }
    }

    /// A cgroup now held by `meta`: its orphan slots become its samples (for the next drain).
    fn adopt(&mut self, cgroup_id: u64, meta: &Arc<ContainerMeta>) {
        let Some(v) = self.orphans.remove(&cgroup_id) else { return };
        self.orphan_count -= v.len().min(self.orphan_count);
        for (domain, end, values) in v {
            let s = self.sample(meta, domain, end, &values);
            self.ready.push(s);
        }
    }

    /// Whether the llc_misses column is counted.
    pub fn counts_llc_misses(&self) -> bool {
        self.counted.pmu[3]
    }

    fn sample(&mut self, meta: &Arc<ContainerMeta>, domain: u32, end: Duration, values: &[u64]) -> PmuSample {
        let mut v = [0u64; 4];
        let mut cpu_ns = 0;
        for (c, x) in self.columns.iter().zip(values) {
            match c {
                Some(i) => v[*i] = *x,
                None => cpu_ns = *x,
            }
        }
        // The header's per-container CPU line is shown only where no hardware event counts.
        if !self.counted.pmu.iter().any(|&b| b) {
            match self.cpu_ns.get_mut(meta.id.as_str()) {
                Some(n) => *n += cpu_ns,
                None => {
                    self.cpu_ns.insert(ById(meta.clone()), cpu_ns);
                }
            }
        }
        PmuSample { container: meta.clone(), domain, end, values: v, cpu_ns }
    }
}

/// "col, col: reason; col: reason": `missing` (column, reason) pairs with each reason said
/// once, in the order first seen.
fn grouped(missing: &[(&str, String)]) -> String {
    let mut groups: Vec<(Vec<&str>, &str)> = Vec::new();
    for (col, why) in missing {
        match groups.iter_mut().find(|(_, w)| *w == why.as_str()) {
            Some((cols, _)) => cols.push(col),
            None => groups.push((vec![col], why)),
        }
    }
    groups.iter().map(|(cols, why)| format!("{}: {why}", cols.join(", "))).collect::<Vec<_>>().join("; ")
}

impl PmuColumns {
    /// Why PMU columns stay null, each reason once with the columns it explains; None where
    /// every column counts.
    pub fn null_reason(&self) -> Option<&str> {
        self.null_reason.as_deref()
    }

    /// What the eBPF programs will cost on this host, where the switch rate at start makes
    /// it high.
    pub fn start_note(&self) -> Option<String> {
        let notes: Vec<String> =
            [self.l2_side.then(|| L2_SIDE_NOTE.to_string()), self.switch_rate.and_then(switch_cost_note)]
                .into_iter()
                .flatten()
                .collect();
        (!notes.is_empty()).then(|| notes.join("\n"))
    }

    /// Where the counts come from, in two words.
    pub fn source_name(&self) -> &'static str {
        match self.src {
            Source::Bpf(_) => "eBPF",
            Source::Perf(_) => "perf cgroup events",
        }
    }
}

impl PmuSource for PmuColumns {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn slot_len(&self) -> Duration {
        match self.src {
            Source::Bpf(_) => Duration::from_millis(1),
            Source::Perf(_) => PERF_READ_EVERY,
        }
    }

    fn counted(&self) -> Counted {
        self.counted
    }

    fn drain_every(&self) -> Duration {
        match self.src {
            Source::Bpf(_) => BPF_DRAIN_EVERY,
            Source::Perf(_) => PERF_READ_EVERY,
        }
    }

    fn follow(&mut self, c: &Container) {
        match &mut self.src {
            Source::Bpf(a) => {
                use std::os::unix::fs::MetadataExt;
                let own =
                    c.cgroup_id.or_else(|| c.dir.as_ref().and_then(|d| std::fs::metadata(d).ok()).map(|m| m.ino()));
                if let Some(cg) = own {
                    // Without it, its counts are still charged, at switches only.
                    if let Err(e) = a.follow(cg) {
                        cachescope_platform::say!("1 ms ticks for {} (cgroup {cg}): {e}", c.id());
                    }
                    self.ticked.insert(ById(c.meta.clone()), cg);
                }
                if let Some(cg) = own {
                    self.own.insert(cg, c.meta.clone());
                    self.by_cgroup.insert(cg, c.meta.clone());
                    self.unknown.remove(&cg);
                    self.adopt(cg, &c.meta);
                }
                if let Some(dir) = &c.dir {
                    self.dirs.insert(ById(c.meta.clone()), dir.clone());
                    if self.ids.is_none() && !self.ids_failed {
                        match crate::cgroup_id::CgroupIds::on(dir) {
                            Ok(ids) => self.ids = Some(ids),
                            Err(e) => {
                                cachescope_platform::say!("cgroups by id at {}: {e}", dir.display());
                                self.ids_failed = true;
                            }
                        }
                    }
                    if self.ids.is_some() && !self.ids_failed {
                        // Its own cgroups below now (a container's processes often live in
                        // one), where one of them may already have been charged and put
                        // aside (an orphan) or judged nobody's (unknown); those charged later
                        // are found by id when they are. Before anything was charged (the
                        // containers found at the start) there is nothing to put right, and
                        // the walk, a readdir of each container's cgroup, was 14 µs each.
                        if !self.orphans.is_empty() || !self.unknown.is_empty() {
                            self.walk(dir.clone(), &c.meta);
                        }
                    } else {
                        self.last_rescan = None;
                        self.unknown.clear();
                    }
                }
            }
            Source::Perf(col) => {
                let Some(dir) = &c.dir else { return };
                if let Err(e) = col.add(c.id(), dir) {
                    // ENOENT for an existing cgroup: the kernel has no perf_event state in it.
                    // cgroup v2 gives every cgroup one implicitly, but only once the root's
                    // cgroup.subtree_control has been written (systemd does at boot; a bare
                    // /init may never).
                    let hint = if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() {
                        " (the kernel keeps no perf_event state for this cgroup: on cgroup v2 it does once the \
                         root's cgroup.subtree_control has been written, e.g. echo +pids > \
                         /sys/fs/cgroup/cgroup.subtree_control)"
                    } else {
                        ""
                    };
                    cachescope_platform::say!(
                        "perf events for {} ({}): {e}{hint}; its PMU columns and CPU time are null",
                        c.id(),
                        dir.display()
                    );
                    self.uncounted.insert(c.id().to_string());
                }
            }
        }
        self.by_id.insert(ById(c.meta.clone()));
    }

    fn kernel_cpu(&mut self) -> Option<cachescope_engine::pmu::KernelCpu> {
        let Source::Bpf(a) = &self.src else { return None };
        let c = a.kernel_cost().ok()?;
        Some(cachescope_engine::pmu::KernelCpu {
            timers: Duration::from_nanos(c.timer_ns),
            timer_runs: c.timer_runs,
            programs: c.counted.then(|| Duration::from_nanos(c.run_ns)),
            runs: c.runs,
        })
    }

    /// Said only where the kernel scaled something: a run that had the counters to itself
    /// says nothing.
    fn closing(&mut self) -> Vec<String> {
        if !self.counted.pmu.iter().any(|&b| b) {
            return Vec::new();
        }
        let (what, of) = match &self.src {
            Source::Bpf(a) => ("charges", a.stats().map(|s| s.charges).unwrap_or(0)),
            Source::Perf(_) => ("reads", self.mux.1),
        };
        let (scaled, of) = (self.mux.0, of.max(self.mux.0));
        if scaled == 0 {
            return Vec::new();
        }
        let share = if of == 0 { 0.0 } else { 100.0 * scaled as f64 / of as f64 };
        let how = match &self.src {
            Source::Bpf(_) => "what each event counted, and the time it did not at the rate its cgroup last counted at",
            Source::Perf(_) => "count × enabled / running",
        };
        vec![format!(
            "PMU multiplexing: {scaled} of {of} {what} scaled ({share:.2} %): other users of the counters \
             (perf, the NMI watchdog) left fewer than cachescope's events; those values are \
             estimates ({how})"
        )]
    }

    fn uncounted(&self, id: &str) -> bool {
        self.uncounted.contains(id)
    }

    fn unfollow(&mut self, id: &str) {
        if let (Some(cg), Source::Bpf(a)) = (self.ticked.remove(id), &self.src) {
            if let Err(e) = a.unfollow(cg) {
                cachescope_platform::say!("ending 1 ms ticks for {id} (cgroup {cg}): {e}");
            }
        }
        self.by_cgroup.retain(|_, m| m.id != id);
        self.own.retain(|_, c| c.id != id);
        self.dirs.remove(id);
        self.by_id.remove(id);
        self.cpu_ns.remove(id);
        self.uncounted.remove(id);
        if let Source::Perf(col) = &mut self.src {
            col.remove(id);
        }
    }

    fn drain(&mut self, wake: Duration, out: &mut Vec<PmuSample>) -> PartResult<Duration> {
        match &mut self.src {
            Source::Bpf(a) => {
                let slot_ns = a.slot_ns();
                let rows = a.drain().map_err(PartError::failed)?;
                // Every slot before the previous one at the drain's start is complete and
                // drained (not at this line: the collector may have paused in between).
                let mark = Duration::from_nanos(a.drained_below() * slot_ns);
                // The map filled since the last drain (the collector fell behind): the slots
                // where charges were dropped have partial counts.
                let lost = a.lost_charges().map_err(PartError::failed)?;
                if lost > self.lost_seen {
                    if let Some((first, last)) = a.take_lost_slots().map_err(PartError::failed)? {
                        let (from, to) = (first * slot_ns, (last + 1) * slot_ns);
                        let charges = lost - self.lost_seen;
                        self.gap =
                            Some(Gap { from: Duration::from_nanos(from), to: Duration::from_nanos(to), charges });
                    }
                    self.lost_seen = lost;
                }
                let mut last = None;
                out.append(&mut self.ready);
                for r in rows {
                    if last != Some(r.slot) {
                        last = Some(r.slot);
                        self.reads += 1;
                    }
                    self.mux.0 += r.multiplexed;
                    let end = Duration::from_nanos((r.slot + 1) * slot_ns);
                    let Some(meta) = self.owner(r.cgroup_id) else {
                        if r.cgroup_id != crate::IDLE && self.orphan_count < MAX_ORPHANS {
                            self.orphans.entry(r.cgroup_id).or_default().push((r.domain, end, r.values));
                            self.orphan_count += 1;
                        }
                        continue;
                    };
                    if self.orphans.contains_key(&r.cgroup_id) {
                        self.adopt(r.cgroup_id, &meta);
                        out.append(&mut self.ready);
                    }
                    let s = self.sample(&meta, r.domain, end, &r.values);
                    out.push(s);
                }
                let old = mark.saturating_sub(ORPHANS_FOR);
                let mut n = 0;
                let mut unclaimed = Vec::new();
                let quieted = &self.quieted;
                self.orphans.retain(|&cg, v| {
                    // Slots come in time order: the first is the oldest.
                    let unclaimed_since = v.first().is_some_and(|(_, end, _)| *end <= old);
                    if unclaimed_since && quieted.get(&cg).is_none_or(|&t| mark.saturating_sub(t) >= QUIET_AGAIN) {
                        unclaimed.push(cg);
                    }
                    v.retain(|(_, end, _)| *end > old);
                    n += v.len();
                    !v.is_empty()
                });
                self.orphan_count = n;
                // Charged and claimed by no container for ORPHANS_FOR: their switches need
                // not read the counters apart (attrib.bpf.c, "Quiet switches"). A container
                // found later is charged apart from its follow.
                if let (Source::Bpf(a), true) = (&self.src, self.quiet_unclaimed) {
                    if self.quieted.len() + unclaimed.len() > MAX_UNKNOWN {
                        self.quieted.clear();
                    }
                    for &cg in &unclaimed {
                        if let Err(e) = a.quiet(cg) {
                            cachescope_platform::say!(
                                "charging unfollowed cgroups in lumps: {e}; each is charged apart"
                            );
                            self.quiet_unclaimed = false;
                            break;
                        }
                        self.quieted.insert(cg, mark);
                    }
                }
                Ok(mark)
            }
            Source::Perf(col) => {
                let deltas = col.sample().map_err(PartError::failed)?;
                let now = monotonic();
                // What accrued up to the wake-up's sample time is that time's; the rest, the
                // next rows'. At the run's end that rest lies past every row, as it should: a
                // recorder stalled across its last wake-up read 450 ms after its last rows and
                // lost that CPU time when the whole read was stamped `now`.
                let prev = self.last_read.replace(now);
                self.reads += 1;
                for d in deltas {
                    self.mux.0 += u64::from(d.multiplexed);
                    self.mux.1 += 1;
                    let Some(meta) = self.by_id.get(d.id.as_str()).map(|k| k.0.clone()) else { continue };
                    match prev.and_then(|p| split_at(&d.values, p, wake, now)) {
                        Some((before, after)) => {
                            let s = self.sample(&meta, d.domain, wake, &before);
                            out.push(s);
                            let s = self.sample(&meta, d.domain, now, &after);
                            out.push(s);
                        }
                        None => {
                            let s = self.sample(&meta, d.domain, now, &d.values);
                            out.push(s);
                        }
                    }
                }
                Ok(now)
            }
        }
    }

    fn gap(&mut self) -> Option<Gap> {
        self.gap.take()
    }

    /// CPU use per container over the period, where no hardware event is counted (else the
    /// columns say it).
    fn header(&mut self, period: Duration) -> Option<String> {
        let how = match self.src {
            Source::Bpf(_) => format!("eBPF cpu-clock, {} slots of 1 ms", self.reads),
            Source::Perf(_) => format!("perf cgroup cpu-clock, {} reads", self.reads),
        };
        self.reads = 0;
        let secs = period.as_secs_f64().max(1e-9);
        if self.counted.pmu.iter().any(|&b| b) {
            return None;
        }
        if self.by_id.is_empty() {
            return Some(format!("CPUs used: no container followed yet ({how})"));
        }
        // The busiest by name, the rest summed: the line is asked for twice a second, and at
        // thousands of containers naming each was most of the process's allocations. The
        // sums restart at 0 and keep their keys (a container's is removed when it goes).
        let mut used: Vec<(u64, &str)> =
            self.by_id.iter().map(|k| (self.cpu_ns.get_mut(k.id()).map(std::mem::take).unwrap_or(0), k.id())).collect();
        let by_id = &self.by_id;
        Some(cpu_line(&how, &mut used, secs, |id| by_id.get(id).map(|k| k.0.view_label()).unwrap_or_default()))
    }
}

/// The header's CPU line: the [`CPU_LINE_NAMED`] busiest containers by name (ties by id),
/// the others counted and summed. `used`: CPU ns in the period by container id; `label`: the
/// name a container is shown by.
fn cpu_line(how: &str, used: &mut [(u64, &str)], secs: f64, label: impl Fn(&str) -> String) -> String {
    let by_use = |a: &(u64, &str), b: &(u64, &str)| b.0.cmp(&a.0).then(a.1.cmp(b.1));
    if used.len() > CPU_LINE_NAMED {
        used.select_nth_unstable_by(CPU_LINE_NAMED - 1, by_use);
    }
    let head = used.len().min(CPU_LINE_NAMED);
    let (named, rest) = used.split_at_mut(head);
    named.sort_unstable_by(by_use);
    let share = |ns: u64| ns as f64 / 1e9 / secs;
    let mut line = format!("CPUs used ({how}): ");
    for (i, (ns, id)) in named.iter().enumerate() {
        // A name is the runtime's: control characters are shown escaped, never sent.
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(line, "{sep}{} {:.3}", cachescope_engine::row::printable(&label(id)), share(*ns));
    }
    if !rest.is_empty() {
        let busy = rest.iter().filter(|(ns, _)| *ns > 0).count();
        let _ = write!(
            line,
            " and {} more ({busy} of them using {:.3})",
            rest.len(),
            share(rest.iter().map(|(ns, _)| ns).sum())
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::{cpu_line, split_at};
    use std::time::Duration;

    #[test]
    fn the_cpu_line_names_the_busiest_and_sums_the_rest() {
        let label = |id: &str| format!("n-{id}");
        let mut few = [(0, "b"), (500_000_000, "a")];
        assert_eq!(cpu_line("how", &mut few, 1.0, label), "CPUs used (how): n-a 0.500, n-b 0.000");
        let ids: Vec<String> = (0..2000).map(|i| format!("c{i:04}")).collect();
        // Two busy (c1500 the busier), three using a little, the rest idle.
        let mut many: Vec<(u64, &str)> = ids.iter().map(|id| (0, id.as_str())).collect();
        many[1500].0 = 900_000_000;
        many[7].0 = 400_000_000;
        for i in [3, 4, 5] {
            many[i].0 = 1_000_000;
        }
        let line = cpu_line("how", &mut many, 1.0, label);
        assert_eq!(
            line,
            "CPUs used (how): n-c1500 0.900, n-c0007 0.400, n-c0003 0.001, n-c0004 0.001, n-c0005 0.001, \
             n-c0000 0.000, n-c0001 0.000, n-c0002 0.000 and 1992 more (0 of them using 0.000)"
        );
        let mut escaped = [(1, "x")];
        assert_eq!(cpu_line("how", &mut escaped, 1.0, |_| "a\u{1b}[2J".into()), "CPUs used (how): a\\u{1b}[2J 0.000");
    }

    #[test]
    fn each_reason_a_column_is_null_is_said_once_with_its_columns() {
        let m = |c: &'static str, w: &str| (c, w.to_string());
        let missing = [
            m("cycles", "no PMU"),
            m("instructions", "no PMU"),
            m("llc_misses", "busy"),
            m("llc_references", "no PMU"),
        ];
        assert_eq!(super::grouped(&missing), "cycles, instructions, llc_references: no PMU; llc_misses: busy");
        assert_eq!(super::grouped(&[]), "");
    }

    #[test]
    fn a_high_switch_rate_is_said_with_its_cost() {
        assert_eq!(super::switch_cost_note(24_999.0), None);
        let said = super::switch_cost_note(100_000.0).unwrap();
        assert!(said.starts_with("eBPF: 100000 context switches a second"), "{said}");
        assert!(said.contains("about 5 % of a core"), "{said}");
        assert!(said.contains("--pmu off"), "{said}");
    }

    #[test]
    fn a_late_read_is_split_at_the_sample_time_in_proportion() {
        let ms = Duration::from_millis;
        // Read 450 ms after the last rows' time, 500 ms after the previous read: a tenth of
        // what accrued belongs to those rows.
        let (before, after) = split_at(&[1_000, 7, 0], ms(1_500), ms(1_550), ms(2_000)).unwrap();
        assert_eq!(before, [100, 1, 0]);
        assert_eq!(after, [900, 6, 0]);
        // Nothing is lost to rounding, even near u64's end.
        let (b, a) = split_at(&[u64::MAX], ms(0), ms(1), ms(3)).unwrap();
        assert_eq!(b[0].checked_add(a[0]), Some(u64::MAX));
        // A read at or before the sample time (on time, or a virtual clock ahead of it), or
        // a sample time before the previous read: nothing to split.
        assert!(split_at(&[5], ms(10), ms(20), ms(20)).is_none());
        assert!(split_at(&[5], ms(10), ms(30), ms(20)).is_none());
        assert!(split_at(&[5], ms(10), ms(10), ms(20)).is_none());
    }
}
