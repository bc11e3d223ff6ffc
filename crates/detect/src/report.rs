//! What `cachescope info --json` says (docs/cli.md): the decoded CPUID, the topology, each
//! backend's availability and what `auto` picks. Built here from what the probes found; the
//! CLI prints it as JSON or as a table.

use crate::{BackendStatus, Detection, HostPaths, Role};
use cachescope_hw::cpuid::{AmdPmu, AmdQos, ArchPmu, CpuidSnapshot, CpuidSource};
use cachescope_hw::cpulist;
use cachescope_hw::CpuInfo;
use cachescope_platform::{DevCpuid, Topology};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Serialize)]
pub struct InfoReport {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
    pub stepping: u32,
    pub max_basic_leaf: u32,
    pub monitoring: MonitoringJson,
    pub allocation: AllocationJson,
    pub topology: TopologyJson,
    pub backends: Vec<BackendStatus>,
    // Additions beyond docs/cli.md (consumers ignore unknown keys):
    pub max_extended_leaf: Option<u32>,
    pub pmu: PmuJson,
    pub amd_qos: Option<AmdQos>,
    pub cpuid: CpuidOrigin,
    pub auto: AutoChoice,
    /// Why the running host (not a dump) cannot use CMT, for the human summary.
    #[serde(skip)]
    pub host_cmt_absence: Option<String>,
}

#[derive(Serialize)]
pub struct MonitoringJson {
    pub supported: bool,
    pub max_rmid: Option<u32>,
    pub l3: Option<L3Json>,
    /// Why monitoring cannot be used (the CPUID bit or range check), null when it can.
    pub reason: Option<String>,
}

#[derive(Serialize)]
pub struct L3Json {
    pub max_rmid: u32,
    pub upscale_factor: u32,
    /// Effective width: Linux's rule (44 bits on AMD when the offset reads 0).
    pub counter_width: u32,
    pub overflow_bit: bool,
    pub occupancy: bool,
    pub mbm_total: bool,
    pub mbm_local: bool,
    pub non_cpu_agent_cmt: bool,
    pub non_cpu_agent_mbm: bool,
    /// 24 + CPUID.0xF.1:EAX[7:0], as enumerated.
    pub counter_width_enumerated: u32,
}

#[derive(Serialize)]
pub struct AllocationJson {
    pub supported: bool,
    pub l3_cat: bool,
    pub l2_cat: bool,
    pub mba: bool,
    pub l3_cbm_length: Option<u32>,
    pub l3_max_cos: Option<u32>,
    pub l3_cdp: bool,
}

#[derive(Serialize)]
pub struct TopologyJson {
    pub cpus: usize,
    pub l3_domains: Vec<DomainJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Serialize)]
pub struct DomainJson {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub size_bytes: Option<u64>,
}

#[derive(Serialize)]
pub struct PmuJson {
    pub intel_arch: Option<ArchPmu>,
    pub amd: Option<AmdPmu>,
}

#[derive(Serialize)]
pub struct CpuidOrigin {
    /// "instruction" or the recorded vector's path.
    pub source: String,
    pub per_cpu: PerCpuCheck,
}

#[derive(Serialize, Default)]
pub struct PerCpuCheck {
    pub checked: bool,
    pub cpus: usize,
    /// The CPU the others are compared with (the first online one).
    pub reference_cpu: Option<u32>,
    pub agree: Option<bool>,
    pub differing: Vec<CpuDifference>,
    pub reason: Option<String>,
}

#[derive(Serialize)]
pub struct CpuDifference {
    pub cpu: u32,
    pub leaves: Vec<String>,
}

#[derive(Serialize)]
pub struct AutoChoice {
    pub cache_monitoring: Option<&'static str>,
    pub pmu: Option<&'static str>,
    pub containers: Option<&'static str>,
}

/// Read every online CPU's leaves through /dev/cpu/N/cpuid and compare them with the first
/// online CPU's.
pub fn per_cpu_check(paths: &HostPaths, cpus: &[u32]) -> Result<PerCpuCheck, String> {
    if cpus.is_empty() {
        return Err("no online CPUs known (topology unreadable)".into());
    }
    let mut snaps = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let dev = DevCpuid::of_cpu(&paths.dev_root, cpu).map_err(|e| e.to_string())?;
        let snap = CpuidSnapshot::capture(&dev).map_err(|e| format!("{}: {e}", dev.describe()))?;
        snaps.push((cpu, snap));
    }
    let (reference_cpu, reference) = snaps.first().map(|(c, s)| (*c, s)).ok_or("no CPU could be read")?;
    let differing: Vec<CpuDifference> = snaps
        .iter()
        .filter_map(|(cpu, s)| {
            let d = reference.differences(s);
            (!d.is_empty())
                .then(|| CpuDifference { cpu: *cpu, leaves: d.iter().map(|(l, s)| format!("{l:#x}.{s}")).collect() })
        })
        .collect();
    Ok(PerCpuCheck {
        checked: true,
        cpus: snaps.len(),
        reference_cpu: Some(reference_cpu),
        agree: Some(differing.is_empty()),
        differing,
        reason: None,
    })
}

pub fn assemble(
    cpu: &CpuInfo,
    topo: Option<&Topology>,
    topo_err: Option<String>,
    d: Detection,
    cpuid: CpuidOrigin,
) -> InfoReport {
    let absence = cpu.l3_monitoring_absence();
    let m = &cpu.monitoring;
    let l3 = m.l3.as_ref().map(|l| L3Json {
        max_rmid: l.max_rmid,
        upscale_factor: l.upscale_factor,
        counter_width: l.counter_width_linux,
        overflow_bit: l.overflow_bit,
        occupancy: l.occupancy,
        mbm_total: l.mbm_total,
        mbm_local: l.mbm_local,
        non_cpu_agent_cmt: l.non_cpu_agent_cmt,
        non_cpu_agent_mbm: l.non_cpu_agent_mbm,
        counter_width_enumerated: l.counter_width,
    });
    let a = &cpu.allocation;
    let allocation = AllocationJson {
        supported: a.resid_bitmap.is_some_and(|b| b & 0xE != 0),
        l3_cat: a.l3_cat.is_some(),
        l2_cat: a.l2_cat.is_some(),
        mba: a.mba.is_some(),
        l3_cbm_length: a.l3_cat.as_ref().map(|c| c.cbm_length),
        l3_max_cos: a.l3_cat.as_ref().map(|c| c.max_cos),
        l3_cdp: a.l3_cat.as_ref().is_some_and(|c| c.cdp),
    };
    let topology = TopologyJson {
        cpus: topo.map_or(0, |t| t.cpus.len()),
        l3_domains: topo
            .map(|t| {
                t.l3_domains
                    .iter()
                    .map(|d| DomainJson { id: d.id, cpus: d.cpus.clone(), size_bytes: d.size_bytes })
                    .collect()
            })
            .unwrap_or_default(),
        error: topo_err,
    };
    let auto = AutoChoice {
        cache_monitoring: d.auto(Role::CacheMonitoring).map(|b| b.name),
        pmu: d.auto(Role::Pmu).map(|b| b.name),
        containers: d.auto(Role::Containers).map(|b| b.name),
    };
    InfoReport {
        vendor: cpu.vendor.to_string(),
        family: cpu.signature.family,
        model: cpu.signature.model,
        stepping: cpu.signature.stepping,
        max_basic_leaf: cpu.max_basic_leaf,
        monitoring: MonitoringJson {
            supported: absence.is_none(),
            max_rmid: m.max_rmid_any,
            l3,
            reason: absence.map(|a| a.to_string()),
        },
        allocation,
        topology,
        backends: d.backends,
        max_extended_leaf: cpu.max_extended_leaf,
        pmu: PmuJson { intel_arch: cpu.arch_pmu.clone(), amd: cpu.amd_pmu.clone() },
        amd_qos: cpu.amd_qos.clone(),
        cpuid,
        auto,
        host_cmt_absence: None,
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn mib(bytes: u64) -> String {
    if bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// The table for people.
pub fn render(r: &InfoReport) -> String {
    let mut o = String::new();
    let src = if r.cpuid.source == "instruction" {
        "this host".to_string()
    } else {
        format!("recorded dump {}", r.cpuid.source)
    };
    let _ = writeln!(o, "CPU ({src}): {} family {} model {} stepping {}", r.vendor, r.family, r.model, r.stepping);
    let _ = writeln!(
        o,
        "  CPUID max basic leaf {:#x}, max extended leaf {}",
        r.max_basic_leaf,
        opt(r.max_extended_leaf.map(|v| format!("{v:#x}")))
    );
    let pc = &r.cpuid.per_cpu;
    if pc.checked {
        if pc.differing.is_empty() {
            let _ = writeln!(o, "  per-CPU check: all {} CPUs report the same leaves (/dev/cpu/N/cpuid)", pc.cpus);
        } else {
            let _ = writeln!(o, "  per-CPU check: CPUs DISAGREE with CPU {}:", opt(pc.reference_cpu));
            for d in &pc.differing {
                let _ = writeln!(o, "    cpu {}: leaves {}", d.cpu, d.leaves.join(", "));
            }
        }
    } else if let Some(why) = &pc.reason {
        let _ = writeln!(o, "  per-CPU check: not done ({why})");
    }

    let _ = writeln!(o, "\nCache monitoring (CMT/MBM)");
    let m = &r.monitoring;
    match &m.l3 {
        Some(l3) => {
            let _ =
                writeln!(o, "  L3 monitoring: yes; highest RMID {} (any resource {})", l3.max_rmid, opt(m.max_rmid));
            let _ = writeln!(
                o,
                "  events: occupancy {}, MBM total {}, MBM local {}",
                yes_no(l3.occupancy),
                yes_no(l3.mbm_total),
                yes_no(l3.mbm_local)
            );
            let _ = writeln!(
                o,
                "  upscale factor {} B per count; counter width {} bits (enumerated {}); overflow bit {}",
                l3.upscale_factor,
                l3.counter_width,
                l3.counter_width_enumerated,
                yes_no(l3.overflow_bit)
            );
        }
        None => {
            let _ = writeln!(o, "  not usable: {}", m.reason.as_deref().unwrap_or("unknown"));
        }
    }

    let _ = writeln!(o, "\nCache allocation (CAT/MBA)");
    let a = &r.allocation;
    if a.supported {
        let _ = writeln!(
            o,
            "  L3 CAT {} (CBM {} bits, highest COS {}, CDP {}); L2 CAT {}; MBA {}",
            yes_no(a.l3_cat),
            opt(a.l3_cbm_length),
            opt(a.l3_max_cos),
            yes_no(a.l3_cdp),
            yes_no(a.l2_cat),
            yes_no(a.mba)
        );
    } else {
        let _ = writeln!(o, "  not enumerated");
    }

    let _ = writeln!(o, "\nPMU");
    match (&r.pmu.intel_arch, &r.pmu.amd) {
        (Some(p), _) => {
            let _ = writeln!(
                o,
                "  architectural PMU v{}: {} general counters x {} bits, {} fixed x {} bits",
                p.version, p.gp_counters, p.gp_counter_width, p.fixed_counters, p.fixed_counter_width
            );
            if !p.unavailable_events.is_empty() {
                let _ = writeln!(o, "  unavailable architectural events: {}", p.unavailable_events.join(", "));
            }
        }
        (None, Some(p)) => {
            let _ = writeln!(
                o,
                "  AMD core PMU: {} counters; PerfMonV2 {}; PerfCtrExtCore {}",
                p.core_counters,
                yes_no(p.perfmon_v2),
                yes_no(p.perfctr_ext_core)
            );
        }
        (None, None) => {
            let _ = writeln!(o, "  no architectural PMU enumerated by CPUID");
        }
    }
    if let Some(q) = &r.amd_qos {
        let _ = writeln!(
            o,
            "  AMD QoS extensions: L3 bandwidth enforcement {}, BMEC {}, ABMC {}{}",
            yes_no(q.l3_mbe),
            yes_no(q.bmec),
            yes_no(q.abmc),
            q.abmc_counters.map(|n| format!(" ({n} assignable counters)")).unwrap_or_default()
        );
    }

    let t = &r.topology;
    let _ = writeln!(o, "\nTopology (this host)");
    if let Some(e) = &t.error {
        let _ = writeln!(o, "  unreadable: {e}");
    } else {
        let _ = writeln!(o, "  {} CPUs online, {} L3 domain(s)", t.cpus, t.l3_domains.len());
        for d in &t.l3_domains {
            let _ = writeln!(
                o,
                "  L3 {}: CPUs {}, {}",
                d.id,
                cpulist::format(&d.cpus),
                d.size_bytes.map_or("size unknown".into(), mib)
            );
        }
    }

    let _ = writeln!(o, "\nBackends (this host)");
    let width = r.backends.iter().map(|b| b.name.len()).max().unwrap_or(0);
    for b in &r.backends {
        let role = match b.role {
            Role::CacheMonitoring => "cache",
            Role::Pmu => "pmu",
            Role::Containers => "containers",
        };
        let _ = writeln!(o, "  {:<width$}  {:<10}  {:<3}  {}", b.name, role, yes_no(b.available), b.reason);
    }

    let _ = writeln!(o, "\nWhat cachescope will use");
    if let Some(why) = &r.host_cmt_absence {
        let _ = writeln!(
            o,
            "  cache monitoring: {} — CMT/MBM cannot be used on this host ({why}): monitor, record and serve go on {}; --emulate MODEL emulates occupancy and bandwidth, marked as emulated",
            r.auto.cache_monitoring.unwrap_or("(none)"),
            crate::NONE_DOES
        );
    } else {
        let _ = writeln!(o, "  cache monitoring: {}", r.auto.cache_monitoring.unwrap_or("(none available)"));
    }
    let _ = writeln!(
        o,
        "  PMU counters: {}",
        r.auto.pmu.unwrap_or("none available (cycles/instructions/LLC columns will be null)")
    );
    let _ = writeln!(o, "  containers: {}", r.auto.containers.unwrap_or("none available"));
    o
}
