//! CPUID: the access trait, a captured snapshot of the leaves cachescope needs, and the pure
//! decoder that turns a snapshot into [`CpuInfo`].
//!
//! Rules (Intel SDM Vol. 2A "CPUID", Vol. 3B §17.16/§18.2; AMD APM Vol. 3; Linux
//! `arch/x86/kernel/cpu/resctrl/`), with the traps listed in `shared/testdata/cpuid/README.md`:
//! - a basic leaf above CPUID.0:EAX (or an extended leaf above CPUID.80000000h:EAX) is never
//!   trusted: on Intel it returns the highest basic leaf's data, not zeros;
//! - every field is gated on the enumeration path that makes it valid (no L3 fields without
//!   L3 monitoring, no CAT fields without PQE and leaf 0x10 in range);
//! - CPUID.0xF.1:EAX is read here, bit by bit: bits 7:0 are the counter-width offset, bit 8
//!   the overflow bit, bits 9/10 non-CPU-agent monitoring. Masking matters.

mod amd;
mod snapshot;

use amd::{decode_amd_pmu, decode_amd_qos};
pub use amd::{AmdPmu, AmdQos};
use serde::Serialize;
pub use snapshot::*;
use std::fmt;

pub(crate) fn bit(v: u32, n: u32) -> bool {
    (v >> n) & 1 == 1
}

pub(crate) fn bits(v: u32, hi: u32, lo: u32) -> u32 {
    let width = hi - lo + 1;
    let mask = if width >= 32 { u32::MAX } else { (1u32 << width) - 1 };
    (v >> lo) & mask
}

/// CPU vendor from the CPUID.0 vendor string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Vendor {
    Intel,
    Amd,
    /// Hygon Dhyana: AMD Zen derivative with the same PQoS interface.
    Hygon,
    Other(String),
}

impl Vendor {
    pub fn from_id(id: &str) -> Vendor {
        match id {
            "GenuineIntel" => Vendor::Intel,
            "AuthenticAMD" => Vendor::Amd,
            "HygonGenuine" => Vendor::Hygon,
            other => Vendor::Other(other.to_string()),
        }
    }

    /// AMD-style PQoS (Linux's AMD rules: 44-bit counters when the offset reads 0, ext leaves).
    pub fn is_amd_like(&self) -> bool {
        matches!(self, Vendor::Amd | Vendor::Hygon)
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Intel => "GenuineIntel",
            Vendor::Amd => "AuthenticAMD",
            Vendor::Hygon => "HygonGenuine",
            Vendor::Other(s) => s,
        })
    }
}

/// The 12-byte vendor id from CPUID.0 (EBX, EDX, ECX order). Non-printable bytes are escaped
/// so that a garbage leaf never produces an unprintable string.
pub fn vendor_id(leaf0: Regs) -> String {
    let mut bytes = Vec::with_capacity(12);
    for r in [leaf0.ebx, leaf0.edx, leaf0.ecx] {
        bytes.extend_from_slice(&r.to_le_bytes());
    }
    bytes.iter().flat_map(|b| std::ascii::escape_default(*b)).map(char::from).collect()
}

/// Family, model and stepping as displayed (SDM Vol. 2A, CPUID.1:EAX).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Signature {
    pub raw: u32,
    pub family: u32,
    pub model: u32,
    pub stepping: u32,
}

impl Signature {
    pub fn decode(eax: u32) -> Signature {
        let base_family = bits(eax, 11, 8);
        let base_model = bits(eax, 7, 4);
        let family = if base_family == 0xF { base_family + bits(eax, 27, 20) } else { base_family };
        let model =
            if base_family == 0x6 || base_family == 0xF { (bits(eax, 19, 16) << 4) | base_model } else { base_model };
        Signature { raw: eax, family, model, stepping: bits(eax, 3, 0) }
    }
}

/// Why L3 monitoring is not usable, naming the CPUID bit or range check that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum MonitoringAbsence {
    /// CPUID.0:EAX < 7: leaf 7 cannot be queried.
    Leaf7OutOfRange { max_basic_leaf: u32 },
    /// CPUID.(EAX=07H,ECX=0):EBX[12] (PQM) is 0.
    PqmClear,
    /// PQM set but CPUID.0:EAX < 0xF.
    Leaf0xFOutOfRange { max_basic_leaf: u32 },
    /// PQM set, leaf 0xF in range, but CPUID.(EAX=0FH,ECX=0):EDX[1] (L3) is 0.
    NoL3Resource,
    /// A field of leaf 0xF holds a value no real part enumerates (a broken or hostile
    /// vector): it would size per-RMID tables or shift counters out of range.
    OutOfRange { field: &'static str, value: u64, limit: &'static str },
}

/// The largest RMID accepted from CPUID: real parts enumerate at most a few thousand.
pub const MAX_RMID_LIMIT: u32 = 65_535;
/// The widest MBM counter IA32_QM_CTR can hold (bits 61:0 are data).
pub const MAX_COUNTER_WIDTH: u32 = 62;

impl fmt::Display for MonitoringAbsence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MonitoringAbsence::Leaf7OutOfRange { max_basic_leaf } => {
                write!(f, "max basic CPUID leaf is {max_basic_leaf:#x}, so leaf 0x7 (and the PQM bit) cannot be read")
            }
            MonitoringAbsence::PqmClear => {
                f.write_str("CPUID.(EAX=7,ECX=0):EBX[12] (PQM, platform QoS monitoring) is 0")
            }
            MonitoringAbsence::Leaf0xFOutOfRange { max_basic_leaf } => {
                write!(f, "PQM is set but the max basic CPUID leaf is {max_basic_leaf:#x}, so leaf 0xF cannot be read")
            }
            MonitoringAbsence::NoL3Resource => f.write_str(
                "PQM is set but CPUID.(EAX=0xF,ECX=0):EDX[1] (L3 monitoring) is 0: advertised, but no resources",
            ),
            MonitoringAbsence::OutOfRange { field, value, limit } => {
                write!(f, "{field} is {value}, out of range ({limit})")
            }
        }
    }
}

/// CPUID leaf 0xF, subleaf 1: L3 cache monitoring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L3Monitoring {
    /// CPUID.0xF.1:ECX, the highest RMID usable for L3 events.
    pub max_rmid: u32,
    /// CPUID.0xF.1:EBX, bytes per occupancy/MBM count.
    pub upscale_factor: u32,
    /// CPUID.0xF.1:EAX[7:0], the width offset as enumerated.
    pub counter_width_offset: u32,
    /// 24 + offset: the width the SDM rule gives.
    pub counter_width: u32,
    /// The width Linux uses: as `counter_width`, except on AMD with offset 0 (44 bits).
    pub counter_width_linux: u32,
    /// CPUID.0xF.1:EAX[8]: bit 61 of IA32_QM_CTR is an overflow flag, not data.
    pub overflow_bit: bool,
    /// CPUID.0xF.1:EAX[9] / [10]: non-CPU agent CMT / MBM.
    pub non_cpu_agent_cmt: bool,
    pub non_cpu_agent_mbm: bool,
    /// CPUID.0xF.1:EAX with bits 7:0 cleared: the flag bits, in place.
    pub eax_flags: u32,
    /// CPUID.0xF.1:EDX[0] / [1] / [2]: event ids 1 (occupancy), 2 (total), 3 (local).
    pub occupancy: bool,
    pub mbm_total: bool,
    pub mbm_local: bool,
}

/// CPUID leaf 0xF and its gating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Monitoring {
    /// CPUID.7.0:EBX[12] (PQM), with leaf 7 in range.
    pub pqm: bool,
    /// CPUID.0:EAX >= 0xF.
    pub leaf_0xf_in_range: bool,
    /// CPUID.0xF.0:EBX, the highest RMID of any resource (when PQM and in range).
    pub max_rmid_any: Option<u32>,
    /// CPUID.0xF.0:EDX, the resource bitmap (when PQM and in range).
    pub resource_bitmap: Option<u32>,
    pub l3: Option<L3Monitoring>,
}

impl Monitoring {
    /// `None` when L3 monitoring is usable, else the first failed check.
    pub fn l3_absence(&self, max_basic_leaf: u32) -> Option<MonitoringAbsence> {
        if max_basic_leaf < LEAF_EXT_FEATURES {
            Some(MonitoringAbsence::Leaf7OutOfRange { max_basic_leaf })
        } else if !self.pqm {
            Some(MonitoringAbsence::PqmClear)
        } else if !self.leaf_0xf_in_range {
            Some(MonitoringAbsence::Leaf0xFOutOfRange { max_basic_leaf })
        } else if let Some(l3) = &self.l3 {
            let out =
                |field, value: u32, limit| Some(MonitoringAbsence::OutOfRange { field, value: value.into(), limit });
            if l3.max_rmid > MAX_RMID_LIMIT {
                out("CPUID.0xF.1:ECX (max RMID)", l3.max_rmid, "at most 65535")
            } else if self.max_rmid_any.is_some_and(|m| m > MAX_RMID_LIMIT) {
                out("CPUID.0xF.0:EBX (max RMID of any resource)", self.max_rmid_any.unwrap_or(0), "at most 65535")
            } else if l3.upscale_factor == 0 {
                out("CPUID.0xF.1:EBX (upscale factor)", 0, "at least 1 byte per count")
            } else if l3.counter_width_linux > MAX_COUNTER_WIDTH {
                out(
                    "CPUID.0xF.1:EAX[7:0] (counter width offset)",
                    l3.counter_width_offset,
                    "a width of at most 62 bits",
                )
            } else {
                None
            }
        } else {
            Some(MonitoringAbsence::NoL3Resource)
        }
    }
}

/// CPUID leaf 0x10, subleaf 1 (L3) or 2 (L2): cache allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CatDetails {
    /// EAX[4:0] + 1: capacity bitmask length in bits.
    pub cbm_length: u32,
    /// EBX: bitmask of ways shared with other entities.
    pub shareable_bits: u32,
    /// ECX[1]: non-CPU agent allocation (L3 only).
    pub non_cpu_agent: bool,
    /// ECX[2]: code and data prioritization.
    pub cdp: bool,
    /// ECX[3]: non-contiguous bitmasks allowed.
    pub noncontiguous_cbm: bool,
    /// EDX[15:0]: highest class of service (the count is this + 1).
    pub max_cos: u32,
}

impl CatDetails {
    fn decode(r: Regs) -> CatDetails {
        CatDetails {
            cbm_length: bits(r.eax, 4, 0) + 1,
            shareable_bits: r.ebx,
            non_cpu_agent: bit(r.ecx, 1),
            cdp: bit(r.ecx, 2),
            noncontiguous_cbm: bit(r.ecx, 3),
            max_cos: bits(r.edx, 15, 0),
        }
    }
}

/// CPUID leaf 0x10, subleaf 3: memory bandwidth allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MbaDetails {
    /// EAX[11:0] + 1: maximum throttling value.
    pub max_throttle: u32,
    /// ECX[2]: the response of the delay values is linear.
    pub linear: bool,
    /// EDX[15:0]: highest class of service.
    pub max_cos: u32,
}

/// CPUID leaf 0x10 and its gating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Allocation {
    /// CPUID.7.0:EBX[15] (PQE), with leaf 7 in range.
    pub pqe: bool,
    /// CPUID.0:EAX >= 0x10.
    pub leaf_0x10_in_range: bool,
    /// CPUID.0x10.0:EBX (when PQE and in range).
    pub resid_bitmap: Option<u32>,
    pub l3_cat: Option<CatDetails>,
    pub l2_cat: Option<CatDetails>,
    pub mba: Option<MbaDetails>,
}

/// Intel architectural events, in the order of CPUID.0xA:EBX's "not available" bits.
pub const ARCH_EVENTS: &[&str] = &[
    "core_cycles",
    "instructions_retired",
    "reference_cycles",
    "llc_references",
    "llc_misses",
    "branch_instructions_retired",
    "branch_misses_retired",
    "topdown_slots",
];

/// CPUID leaf 0xA: architectural performance monitoring (Intel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchPmu {
    /// EAX[7:0].
    pub version: u32,
    /// EAX[15:8], EAX[23:16].
    pub gp_counters: u32,
    pub gp_counter_width: u32,
    /// EDX[4:0], EDX[12:5] (valid from version 2).
    pub fixed_counters: u32,
    pub fixed_counter_width: u32,
    /// Architectural events CPUID.0xA:EBX marks as unavailable (within EAX[31:24] bits).
    pub unavailable_events: Vec<&'static str>,
    /// Architectural events enumerated and available.
    pub available_events: Vec<&'static str>,
}

impl ArchPmu {
    fn decode(r: Regs) -> Option<ArchPmu> {
        let version = bits(r.eax, 7, 0);
        if version == 0 {
            return None;
        }
        let vector_len = bits(r.eax, 31, 24) as usize;
        let (mut available, mut unavailable) = (Vec::new(), Vec::new());
        for (i, name) in ARCH_EVENTS.iter().enumerate().take(vector_len) {
            // A set bit in EBX means "this event is NOT available".
            if bit(r.ebx, i as u32) {
                unavailable.push(*name);
            } else {
                available.push(*name);
            }
        }
        let (fixed_counters, fixed_counter_width) =
            if version >= 2 { (bits(r.edx, 4, 0), bits(r.edx, 12, 5)) } else { (0, 0) };
        Some(ArchPmu {
            version,
            gp_counters: bits(r.eax, 15, 8),
            gp_counter_width: bits(r.eax, 23, 16),
            fixed_counters,
            fixed_counter_width,
            unavailable_events: unavailable,
            available_events: available,
        })
    }

    pub fn has_event(&self, name: &str) -> bool {
        self.available_events.contains(&name)
    }
}

/// Everything cachescope derives from CPUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuInfo {
    pub vendor: Vendor,
    pub signature: Signature,
    pub max_basic_leaf: u32,
    /// CPUID.80000000h:EAX when it is a valid extended maximum.
    pub max_extended_leaf: Option<u32>,
    pub monitoring: Monitoring,
    pub allocation: Allocation,
    pub arch_pmu: Option<ArchPmu>,
    pub amd_pmu: Option<AmdPmu>,
    pub amd_qos: Option<AmdQos>,
}

impl CpuInfo {
    /// One line: vendor, family/model/stepping, and what L3 monitoring offers.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} family {} model {} stepping {}",
            self.vendor, self.signature.family, self.signature.model, self.signature.stepping
        );
        match &self.monitoring.l3 {
            Some(l3) => s.push_str(&format!(
                "; L3 monitoring: max_rmid {} upscale {} counter_width {} occupancy {} mbm_total {} mbm_local {}",
                l3.max_rmid, l3.upscale_factor, l3.counter_width_linux, l3.occupancy, l3.mbm_total, l3.mbm_local
            )),
            None => s.push_str("; no L3 monitoring"),
        }
        s
    }

    /// Decode a snapshot. Pure and total: any register values decode without panicking.
    pub fn decode(s: &CpuidSnapshot) -> CpuInfo {
        let leaf0 = s.get(LEAF_VENDOR, 0);
        let max_basic = leaf0.eax;
        let in_basic = |leaf: u32| leaf <= max_basic;
        let vendor = Vendor::from_id(&vendor_id(leaf0));
        let signature = Signature::decode(if in_basic(LEAF_FEATURES) { s.get(LEAF_FEATURES, 0).eax } else { 0 });

        let leaf7 = if in_basic(LEAF_EXT_FEATURES) { s.get(LEAF_EXT_FEATURES, 0) } else { Regs::ZERO };
        let monitoring = decode_monitoring(s, bit(leaf7.ebx, 12), in_basic(LEAF_RDT_MONITORING), &vendor);
        let allocation = decode_allocation(s, bit(leaf7.ebx, 15), in_basic(LEAF_RDT_ALLOCATION));

        // Leaf 0xA is Intel-defined; AMD reserves it (reads zeros) and uses extended leaves.
        let arch_pmu = if in_basic(LEAF_ARCH_PMU) && vendor == Vendor::Intel {
            ArchPmu::decode(s.get(LEAF_ARCH_PMU, 0))
        } else {
            None
        };

        let ext_max = s.get(LEAF_EXT_MAX, 0).eax;
        let max_extended_leaf = is_valid_ext_max(ext_max).then_some(ext_max);
        let in_ext = |leaf: u32| max_extended_leaf.is_some_and(|m| leaf <= m);
        let (amd_pmu, amd_qos) = if vendor.is_amd_like() {
            (decode_amd_pmu(s, &in_ext), in_ext(LEAF_AMD_QOS).then(|| decode_amd_qos(s)))
        } else {
            (None, None)
        };

        CpuInfo {
            vendor,
            signature,
            max_basic_leaf: max_basic,
            max_extended_leaf,
            monitoring,
            allocation,
            arch_pmu,
            amd_pmu,
            amd_qos,
        }
    }

    /// `None` when L3 monitoring (CMT) is usable, else the CPUID reason.
    pub fn l3_monitoring_absence(&self) -> Option<MonitoringAbsence> {
        self.monitoring.l3_absence(self.max_basic_leaf)
    }
}

fn decode_monitoring(s: &CpuidSnapshot, pqm: bool, in_range: bool, vendor: &Vendor) -> Monitoring {
    if !(pqm && in_range) {
        return Monitoring { pqm, leaf_0xf_in_range: in_range, max_rmid_any: None, resource_bitmap: None, l3: None };
    }
    let f0 = s.get(LEAF_RDT_MONITORING, 0);
    let l3 = bit(f0.edx, 1).then(|| {
        let f1 = s.get(LEAF_RDT_MONITORING, 1);
        let offset = bits(f1.eax, 7, 0);
        let counter_width = 24 + offset;
        // Linux: AMD parts that report offset 0 (Zen 2/3) have 44-bit counters.
        let counter_width_linux = if vendor.is_amd_like() && offset == 0 { 44 } else { counter_width };
        L3Monitoring {
            max_rmid: f1.ecx,
            upscale_factor: f1.ebx,
            counter_width_offset: offset,
            counter_width,
            counter_width_linux,
            overflow_bit: bit(f1.eax, 8),
            non_cpu_agent_cmt: bit(f1.eax, 9),
            non_cpu_agent_mbm: bit(f1.eax, 10),
            eax_flags: f1.eax & !0xFF,
            occupancy: bit(f1.edx, 0),
            mbm_total: bit(f1.edx, 1),
            mbm_local: bit(f1.edx, 2),
        }
    });
    Monitoring { pqm, leaf_0xf_in_range: true, max_rmid_any: Some(f0.ebx), resource_bitmap: Some(f0.edx), l3 }
}

fn decode_allocation(s: &CpuidSnapshot, pqe: bool, in_range: bool) -> Allocation {
    if !(pqe && in_range) {
        return Allocation {
            pqe,
            leaf_0x10_in_range: in_range,
            resid_bitmap: None,
            l3_cat: None,
            l2_cat: None,
            mba: None,
        };
    }
    let resid = s.get(LEAF_RDT_ALLOCATION, 0).ebx;
    let l3_cat = bit(resid, 1).then(|| CatDetails::decode(s.get(LEAF_RDT_ALLOCATION, 1)));
    let l2_cat = bit(resid, 2).then(|| {
        let mut d = CatDetails::decode(s.get(LEAF_RDT_ALLOCATION, 2));
        d.non_cpu_agent = false; // ECX[1] is defined for L3 only
        d
    });
    let mba = bit(resid, 3).then(|| {
        let r = s.get(LEAF_RDT_ALLOCATION, 3);
        MbaDetails { max_throttle: bits(r.eax, 11, 0) + 1, linear: bit(r.ecx, 2), max_cos: bits(r.edx, 15, 0) }
    });
    Allocation { pqe, leaf_0x10_in_range: true, resid_bitmap: Some(resid), l3_cat, l2_cat, mba }
}

#[cfg(test)]
mod tests;
