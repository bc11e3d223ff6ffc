//! PMU columns per container from the eBPF attribution (1 ms slots, split by L3 domain): the
//! four quantities of §5.3 where this CPU counts them, joined into each interval's rows by
//! (cgroup id → container, domain). Where none can be counted (e.g. a VM without a virtual
//! PMU) the columns stay null and the CPU time the kernel's cpu-clock charges is shown in the
//! header instead. Off, with the reason said once, where BPF cannot load.

use cachescope_bpf::{capacity_for, Attribution};
use cachescope_engine::row::Pmu as PmuValues;
use cachescope_hw::cpuid::CpuidSnapshot;
use cachescope_hw::CpuInfo;
use cachescope_perf::counter::{CounterGroup, Target};
use cachescope_perf::events::{resolve, Named, PERF_TYPE_SOFTWARE, SW_CPU_CLOCK};
use cachescope_perf::format::{Encoded, Pmu as CorePmu};
use cachescope_platform::{InstructionCpuid, Topology};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub struct PmuColumns {
    attr: Option<Attribution>,
    /// Which of the four PMU values (Named::ALL order) each counted event fills; empty when
    /// only cpu-clock is counted.
    columns: Vec<usize>,
    /// cgroup id → container id.
    pub names: BTreeMap<u64, String>,
    /// (container, domain) → per-event sums since the last take.
    sums: BTreeMap<(String, u32), Vec<u64>>,
    /// cpu-clock ns per container since the last header line (when no PMU event counts).
    cpu_ns: BTreeMap<String, u64>,
    slots: u64,
    /// What is counted, for the header and the file metadata.
    pub description: String,
}

fn usable(e: &Encoded) -> bool {
    CounterGroup::open(&Target::Cpu(0), std::slice::from_ref(e)).is_ok()
}

impl PmuColumns {
    pub fn off(why: String) -> PmuColumns {
        PmuColumns {
            attr: None,
            columns: Vec::new(),
            names: BTreeMap::new(),
            sums: BTreeMap::new(),
            cpu_ns: BTreeMap::new(),
            slots: 0,
            description: format!("off: {why}"),
        }
    }

    pub fn start(interval: Duration) -> PmuColumns {
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
        let description = if columns.is_empty() {
            events.push(Encoded { type_: PERF_TYPE_SOFTWARE, config: SW_CPU_CLOCK, ..Encoded::default() });
            format!("no PMU event counts here ({}); CPU time from cpu-clock instead", missing.join("; "))
        } else {
            let names: Vec<&str> = columns.iter().map(|&c| Named::ALL[c].column()).collect();
            let mut d = format!("eBPF, 1 ms slots: {}", names.join(", "));
            if !missing.is_empty() {
                d.push_str(&format!(" (null: {})", missing.join("; ")));
            }
            d
        };
        let per_drain = (interval.as_millis() as u32).max(1);
        match Attribution::start(&events, &cpus, Duration::from_millis(1), capacity_for(256, per_drain)) {
            Ok(mut a) => {
                a.group_cpus(domain_of);
                PmuColumns { attr: Some(a), columns, description, ..PmuColumns::off(String::new()) }
            }
            Err(e) => PmuColumns::off(format!("eBPF attribution: {e}")),
        }
    }

    pub fn is_on(&self) -> bool {
        self.attr.is_some()
    }

    /// Whether the llc_misses column is counted.
    pub fn counts_llc_misses(&self) -> bool {
        self.attr.is_some() && self.columns.iter().any(|&c| Named::ALL[c] == Named::LlcMisses)
    }

    /// Pull completed slots out of the kernel.
    pub fn drain(&mut self) {
        let Some(a) = self.attr.as_mut() else { return };
        match a.drain() {
            Ok(rows) => {
                let mut last = None;
                for r in rows {
                    if last != Some(r.slot) {
                        last = Some(r.slot);
                        self.slots += 1;
                    }
                    let Some(id) = self.names.get(&r.cgroup_id) else { continue };
                    if self.columns.is_empty() {
                        *self.cpu_ns.entry(id.clone()).or_default() += r.values[0];
                    }
                    let n = self.columns.len().max(1);
                    let s = self.sums.entry((id.clone(), r.domain)).or_insert_with(|| vec![0; n]);
                    for (x, v) in s.iter_mut().zip(&r.values) {
                        *x += v;
                    }
                }
            }
            Err(e) => {
                eprintln!("cachescope: PMU attribution stopped: {e}");
                self.attr = None;
                self.description = format!("off: stopped: {e}");
            }
        }
    }

    /// This interval's counts for (container, domain): None columns where not counted, and
    /// the CPU time (ns) charged to it where only cpu-clock counts.
    pub fn take(&mut self, id: &str, domain: u32) -> (PmuValues, Option<u64>) {
        let mut v = [None; 4];
        let sums = self.sums.remove(&(id.to_string(), domain));
        if self.attr.is_none() {
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
        self.attr.as_ref()?;
        if !self.columns.is_empty() {
            return None;
        }
        let secs = period.as_secs_f64().max(1e-9);
        let ids: std::collections::BTreeSet<&String> = self.names.values().collect();
        let per: Vec<String> = ids
            .into_iter()
            .map(|id| format!("{id} {:.3}", self.cpu_ns.get(id).copied().unwrap_or(0) as f64 / 1e9 / secs))
            .collect();
        self.cpu_ns.clear();
        Some(format!(
            "CPUs used (eBPF cpu-clock, {} slots of 1 ms): {}",
            std::mem::take(&mut self.slots),
            per.join(", ")
        ))
    }
}
