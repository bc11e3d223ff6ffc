//! The four per-container PMU quantities, resolved to the best encoding this CPU has, and said
//! honestly: where only a non-L3 event exists, the resolution names the event used and does
//! not call it LLC.

use crate::format::{Encoded, Pmu};
use cachescope_hw::cpuid::Vendor;
use cachescope_hw::CpuInfo;

/// perf's generic hardware event type and ids (linux/perf_event.h).
pub const PERF_TYPE_HARDWARE: u32 = 0;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
const HW_CPU_CYCLES: u64 = 0;
const HW_INSTRUCTIONS: u64 = 1;
const HW_CACHE_REFERENCES: u64 = 2;
const HW_CACHE_MISSES: u64 = 3;
/// Software cpu-clock (ns): what a machine without a PMU can still count per cgroup.
pub const SW_CPU_CLOCK: u64 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Named {
    Cycles,
    Instructions,
    LlcReferences,
    LlcMisses,
}

impl Named {
    pub const ALL: [Named; 4] = [Named::Cycles, Named::Instructions, Named::LlcReferences, Named::LlcMisses];

    /// The column name of docs/data.md.
    pub fn column(self) -> &'static str {
        match self {
            Named::Cycles => "cycles",
            Named::Instructions => "instructions",
            Named::LlcReferences => "llc_references",
            Named::LlcMisses => "llc_misses",
        }
    }
}

/// How a named quantity is counted on this CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub named: Named,
    pub encoded: Encoded,
    /// What is actually counted, for the data and `info` (e.g. "event=0x2e,umask=0x41 (architectural LLC miss)").
    pub event_used: String,
    /// False when the event is not an L3 event although the column says llc_*.
    pub is_llc: bool,
}

/// Why a quantity cannot be counted here (its column is null, status `unsupported`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub named: Named,
    pub reason: String,
}

/// Resolve every named quantity. `core_pmu` is the `cpu` PMU from sysfs (None: the kernel
/// has no hardware PMU here, as in many VMs).
pub fn resolve(cpu: &CpuInfo, core_pmu: Option<&Pmu>) -> Vec<Result<Resolved, Unsupported>> {
    Named::ALL.iter().map(|&n| resolve_one(n, cpu, core_pmu)).collect()
}

fn generic(named: Named, id: u64, what: &str, is_llc: bool) -> Resolved {
    Resolved {
        named,
        encoded: Encoded { type_: PERF_TYPE_HARDWARE, config: id, ..Encoded::default() },
        event_used: what.to_string(),
        is_llc,
    }
}

fn resolve_one(named: Named, cpu: &CpuInfo, core_pmu: Option<&Pmu>) -> Result<Resolved, Unsupported> {
    let Some(pmu) = core_pmu else {
        return Err(Unsupported {
            named,
            reason: "no hardware PMU: the kernel exposes no `cpu` event source (common in virtual machines)".into(),
        });
    };
    match named {
        Named::Cycles => return Ok(generic(named, HW_CPU_CYCLES, "generic cycles", false)),
        Named::Instructions => return Ok(generic(named, HW_INSTRUCTIONS, "generic instructions", false)),
        _ => {}
    }
    let (arch_name, terms, generic_id) = match named {
        Named::LlcReferences => ("llc_references", "event=0x2e,umask=0x4f", HW_CACHE_REFERENCES),
        _ => ("llc_misses", "event=0x2e,umask=0x41", HW_CACHE_MISSES),
    };
    match cpu.vendor {
        Vendor::Intel => {
            let available = cpu.arch_pmu.as_ref().is_some_and(|a| a.available_events.contains(&arch_name));
            if !available {
                return Err(Unsupported {
                    named,
                    reason: format!("CPUID.0xA does not enumerate the architectural {arch_name} event"),
                });
            }
            let encoded = pmu
                .encode(terms)
                .map_err(|e| Unsupported { named, reason: format!("encoding {terms} on the cpu PMU: {e}") })?;
            Ok(Resolved { named, encoded, event_used: format!("{terms} (architectural {arch_name})"), is_llc: true })
        }
        // AMD's core PMU has no per-core L3 event; the L3 PMU (amd_l3) counts per CCX, not
        // per task. The kernel's generic cache events there are L2-side (PMCx060/PMCx064).
        _ => Ok(generic(
            named,
            generic_id,
            &format!(
                "generic cache-{} (not an L3 event on this CPU: on AMD it counts at the L2)",
                if named == Named::LlcMisses { "misses" } else { "references" }
            ),
            false,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Field;
    use cachescope_hw::cpuid::CpuidSnapshot;
    use std::collections::BTreeMap;

    fn cpu_pmu() -> Pmu {
        let f = [("event", "config:0-7"), ("umask", "config:8-15"), ("cmask", "config:24-31"), ("inv", "config:23")];
        Pmu {
            name: "cpu".into(),
            type_: 4,
            fields: f.iter().map(|(n, t)| (n.to_string(), Field::parse(n, t).unwrap())).collect(),
            events: BTreeMap::new(),
        }
    }

    fn vector(name: &str) -> CpuInfo {
        let p =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/cpuid").join(format!("{name}.json"));
        let v = cachescope_platform::RecordedVector::load(&p).unwrap();
        CpuInfo::decode(&v.snapshot())
    }

    /// An Intel CPU with leaf 0xA version 4, 7 architectural events; `ebx` marks unavailable ones.
    fn intel_with_leaf_a(ebx: u32) -> CpuInfo {
        use cachescope_hw::Regs;
        let vendor = Regs {
            eax: 0xA,
            ebx: u32::from_le_bytes(*b"Genu"),
            ecx: u32::from_le_bytes(*b"ntel"),
            edx: u32::from_le_bytes(*b"ineI"),
        };
        let leaf_a = Regs { eax: 0x0730_0404, ebx, ecx: 0, edx: 0x0603 };
        CpuInfo::decode(&CpuidSnapshot::from_leaves(vec![((0, 0), vendor), ((0xA, 0), leaf_a)]))
    }

    #[test]
    fn intel_uses_the_architectural_llc_events() {
        let cpu = intel_with_leaf_a(0);
        assert_eq!(cpu.vendor, Vendor::Intel);
        let r = resolve(&cpu, Some(&cpu_pmu()));
        let miss = r[3].as_ref().unwrap();
        assert_eq!(miss.encoded, Encoded { type_: 4, config: 0x412e, config1: 0, config2: 0 });
        assert!(miss.is_llc && miss.event_used.contains("architectural"));
        assert_eq!(r[2].as_ref().unwrap().encoded.config, 0x4f2e);
        assert_eq!(r[0].as_ref().unwrap().encoded.type_, PERF_TYPE_HARDWARE);
        // EBX bit 4 set: LLC misses not available on this part.
        let r = resolve(&intel_with_leaf_a(1 << 4), Some(&cpu_pmu()));
        assert!(r[3].as_ref().unwrap_err().reason.contains("llc_misses"));
        assert!(r[2].is_ok());
        // The recorded vectors carry no leaf 0xA: nothing enumerated, nothing claimed.
        assert!(resolve(&vector("intel-xeon-platinum-8160"), Some(&cpu_pmu()))[3].is_err());
    }

    #[test]
    fn amd_says_which_event_it_used() {
        let cpu = vector("amd-epyc-7742");
        let r = resolve(&cpu, Some(&cpu_pmu()));
        let miss = r[3].as_ref().unwrap();
        assert!(!miss.is_llc && miss.event_used.contains("not an L3 event"), "{miss:?}");
        assert_eq!(miss.encoded, Encoded { type_: PERF_TYPE_HARDWARE, config: 3, ..Encoded::default() });
    }

    #[test]
    fn no_pmu_is_unsupported_with_a_reason() {
        let cpu = CpuInfo::decode(&CpuidSnapshot::from_leaves(Vec::new()));
        for r in resolve(&cpu, None) {
            assert!(r.unwrap_err().reason.contains("no hardware PMU"));
        }
    }
}
