//! PMU columns per container: the four quantities of §5.3 where this CPU counts them, split by
//! L3 domain and joined into each interval's rows by container. Two sources: the eBPF
//! attribution (1 ms slots, any number of containers; the default), or perf cgroup events
//! (one counter group per container × CPU, read every interval; the fallback where BPF cannot
//! load, fine at ≥ 100 ms for tens of containers). Where no event can be counted (e.g. a VM
//! without a virtual PMU) the columns stay null and the CPU time the kernel's cpu-clock
//! charges is measured instead. Off, with the reason said, where neither source works.

use cachescope_bpf::{capacity_for, Attribution};
use cachescope_engine::row::Pmu as PmuValues;
use cachescope_hw::cpuid::CpuidSnapshot;
use cachescope_hw::CpuInfo;
use cachescope_perf::cgroup::{self, CgroupCollector};
use cachescope_perf::counter::{CounterGroup, Target};
use cachescope_perf::events::{resolve, Named, PERF_TYPE_SOFTWARE, SW_CPU_CLOCK};
use cachescope_perf::format::{Encoded, Pmu as CorePmu};
use cachescope_platform::{InstructionCpuid, Topology};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Where PMU counts come from (`--pmu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PmuSource {
    /// eBPF, or perf cgroup events where BPF cannot load.
    Auto,
    Bpf,
    /// perf cgroup events (per container × CPU).
    Perf,
    Off,
}

/// What was counted since it was last taken.
#[derive(Default)]
struct Tally {
    /// Values per container and domain: the counted events, or 1 (cpu-clock ns).
    width: usize,
    /// Only cpu-clock is counted.
    cpu_only: bool,
    /// container → domain → per-event sums since the last take (nested: looked up by &str).
    sums: BTreeMap<String, BTreeMap<u32, Vec<u64>>>,
    /// cpu-clock ns per container since the last header line (when `cpu_only`).
    cpu_ns: BTreeMap<String, u64>,
}

impl Tally {
    /// Add one container's counts on one domain.
    fn charge(&mut self, id: &str, domain: u32, values: &[u64]) {
        if self.cpu_only {
            match self.cpu_ns.get_mut(id) {
                Some(ns) => *ns += values[0],
                None => {
                    self.cpu_ns.insert(id.to_string(), values[0]);
                }
            }
        }
        let doms = match self.sums.get_mut(id) {
            Some(d) => d,
            None => self.sums.entry(id.to_string()).or_default(),
        };
        let s = doms.entry(domain).or_insert_with(|| vec![0; self.width]);
        for (x, v) in s.iter_mut().zip(values) {
            *x += v;
        }
    }
}

enum Source {
    Bpf(Box<Attribution>),
    Perf(CgroupCollector),
}

pub struct PmuColumns {
    src: Option<Source>,
    /// Which of the four PMU values (Named::ALL order) each counted event fills; empty when
    /// only cpu-clock is counted.
    columns: Vec<usize>,
    /// cgroup id → container id (the eBPF attribution charges cgroup ids).
    names: BTreeMap<u64, String>,
    tally: Tally,
    /// Slots drained (eBPF) or group reads (perf) since the last header line.
    reads: u64,
    /// What is counted, for the header and the file metadata.
    pub description: String,
}

fn usable(e: &Encoded) -> bool {
    CounterGroup::open(&Target::Cpu(0), std::slice::from_ref(e)).is_ok()
}

impl PmuColumns {
    pub fn off(why: String) -> PmuColumns {
        PmuColumns {
            src: None,
            columns: Vec::new(),
            names: BTreeMap::new(),
            tally: Tally::default(),
            reads: 0,
            description: format!("off: {why}"),
        }
    }

    pub fn start(interval: Duration, choice: PmuSource) -> PmuColumns {
        if choice == PmuSource::Off {
            return PmuColumns::off("--pmu off".into());
        }
        let topo = match Topology::read(Path::new("/sys")) {
            Ok(t) => t,
            Err(e) => return PmuColumns::off(e.to_string()),
        };
        // Every online CPU: available_parallelism would stop at our own affinity or quota.
        let cpus: Vec<usize> = topo.online_cpus().map(|c| c as usize).collect();
        let max_cpu = cpus.iter().copied().max().unwrap_or(0);
        let domain_of: Vec<u32> = (0..=max_cpu).map(|c| topo.domain_of(c as u32).map_or(0, |d| d.id)).collect();
        let host = CpuidSnapshot::capture(&InstructionCpuid).map(|s| CpuInfo::decode(&s));
        let core = CorePmu::load(Path::new("/sys"), "cpu").ok();
        let mut events = Vec::new();
        let mut columns = Vec::new();
        let mut missing = Vec::new();
        if let Ok(cpu) = &host {
            for r in resolve(cpu, core.as_ref()) {
                match r {
                    Ok(x) if usable(&x.encoded) => {
                        events.push(x.encoded);
                        columns.push(Named::ALL.iter().position(|n| *n == x.named).unwrap_or(0));
                    }
                    Ok(x) => missing.push(format!("{}: cannot be opened here", x.named.column())),
                    Err(u) => missing.push(format!("{}: {}", u.named.column(), u.reason)),
                }
            }
        }
        let what = if columns.is_empty() {
            events.push(Encoded { type_: PERF_TYPE_SOFTWARE, config: SW_CPU_CLOCK, ..Encoded::default() });
            format!("no PMU event counts here ({}); CPU time from cpu-clock instead", missing.join("; "))
        } else {
            let names: Vec<&str> = columns.iter().map(|&c| Named::ALL[c].column()).collect();
            let mut d = names.join(", ");
            if !missing.is_empty() {
                d.push_str(&format!(" (null: {})", missing.join("; ")));
            }
            d
        };
        let on = |src, description| PmuColumns {
            src: Some(src),
            columns: columns.clone(),
            tally: Tally { width: columns.len().max(1), cpu_only: columns.is_empty(), ..Tally::default() },
            description,
            ..PmuColumns::off(String::new())
        };
        let bpf_failed = if choice == PmuSource::Perf {
            "--pmu perf".to_string()
        } else {
            let per_drain = (interval.as_millis() as u32).max(1);
            match Attribution::start(&events, &cpus, Duration::from_millis(1), capacity_for(256, per_drain)) {
                Ok(mut a) => {
                    a.group_cpus(domain_of);
                    return on(Source::Bpf(Box::new(a)), format!("eBPF, 1 ms slots: {what}"));
                }
                Err(e) if choice == PmuSource::Bpf => return PmuColumns::off(format!("eBPF attribution: {e}")),
                Err(e) => format!("eBPF attribution unavailable: {e}"),
            }
        };
        // perf cgroup events: opened per container as they come ([`follow`]); check now that
        // this kernel lets us count at all.
        if let Err(e) = CounterGroup::open(&Target::Cpu(cpus.first().copied().unwrap_or(0)), &events) {
            return PmuColumns::off(format!("{bpf_failed}; perf events: {e}"));
        }
        let mut col = CgroupCollector::new(events, cpus.clone());
        col.group_cpus(domain_of);
        let mut pc = on(Source::Perf(col), format!("perf cgroup events ({bpf_failed}), read every interval: {what}"));
        if let Some(w) = cgroup::warning(1, cpus.len(), interval) {
            pc.description.push_str(&format!("; {w}"));
        }
        pc
    }

    pub fn is_on(&self) -> bool {
        self.src.is_some()
    }

    /// Whether the llc_misses column is counted.
    pub fn counts_llc_misses(&self) -> bool {
        self.src.is_some() && self.columns.iter().any(|&c| Named::ALL[c] == Named::LlcMisses)
    }

    /// Count container `id`, whose cgroup v2 directory is `dir` (inode `cgroup_id`).
    pub fn follow(&mut self, id: &str, cgroup_id: Option<u64>, dir: &Path) {
        match &mut self.src {
            Some(Source::Bpf(_)) => {
                if let Some(cg) = cgroup_id {
                    self.names.insert(cg, id.to_string());
                }
            }
            Some(Source::Perf(col)) => {
                if let Err(e) = col.add(id, dir) {
                    eprintln!("cachescope: perf events for {id} ({}): {e}; its PMU columns stay null", dir.display());
                }
            }
            None => {}
        }
    }

    /// Stop counting container `id`.
    pub fn unfollow(&mut self, id: &str) {
        self.names.retain(|_, v| v != id);
        if let Some(Source::Perf(col)) = &mut self.src {
            col.remove(id);
        }
        self.tally.sums.remove(id);
    }

    /// Pull what was counted since the last call.
    pub fn drain(&mut self) {
        let failed = match &mut self.src {
            None => return,
            Some(Source::Bpf(a)) => match a.drain() {
                Ok(rows) => {
                    let mut last = None;
                    for r in rows {
                        if last != Some(r.slot) {
                            last = Some(r.slot);
                            self.reads += 1;
                        }
                        if let Some(id) = self.names.get(&r.cgroup_id) {
                            self.tally.charge(id, r.domain, &r.values);
                        }
                    }
                    None
                }
                Err(e) => Some(e.to_string()),
            },
            Some(Source::Perf(col)) => match col.sample() {
                Ok(deltas) => {
                    self.reads += 1;
                    for d in deltas {
                        self.tally.charge(&d.id, d.domain, &d.values);
                    }
                    None
                }
                Err(e) => Some(e.to_string()),
            },
        };
        if let Some(e) = failed {
            eprintln!("cachescope: PMU counting stopped: {e}");
            self.src = None;
            self.description = format!("off: stopped: {e}");
        }
    }

    /// This interval's counts for (container, domain): None columns where not counted, and
    /// the CPU time (ns) charged to it where only cpu-clock counts.
    pub fn take(&mut self, id: &str, domain: u32) -> (PmuValues, Option<u64>) {
        let mut v = [None; 4];
        let sums = self.tally.sums.get_mut(id).and_then(|d| d.remove(&domain));
        if self.src.is_none() {
            return (PmuValues::from_values(v), None);
        }
        if self.columns.is_empty() {
            return (PmuValues::from_values(v), Some(sums.map_or(0, |s| s[0])));
        }
        for (i, &slot) in self.columns.iter().enumerate() {
            v[slot] = Some(sums.as_ref().map_or(0, |s| s[i]));
        }
        (PmuValues::from_values(v), None)
    }

    /// A header line of CPU use per container when only cpu-clock is counted; resets.
    pub fn cpu_line(&mut self, period: Duration) -> Option<String> {
        let how = match self.src.as_ref()? {
            Source::Bpf(_) => format!("eBPF cpu-clock, {} slots of 1 ms", self.reads),
            Source::Perf(_) => format!("perf cgroup cpu-clock, {} reads", self.reads),
        };
        self.reads = 0;
        if !self.columns.is_empty() {
            return None;
        }
        let secs = period.as_secs_f64().max(1e-9);
        let cpu_ns = &mut self.tally.cpu_ns;
        let ids: std::collections::BTreeSet<&String> = self.names.values().chain(cpu_ns.keys()).collect();
        let per: Vec<String> = ids
            .into_iter()
            .map(|id| format!("{id} {:.3}", cpu_ns.get(id).copied().unwrap_or(0) as f64 / 1e9 / secs))
            .collect();
        cpu_ns.clear();
        Some(format!("CPUs used ({how}): {}", per.join(", ")))
    }
}
