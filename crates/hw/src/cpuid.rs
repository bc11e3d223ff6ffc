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

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// The four registers one CPUID query returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Regs {
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

impl Regs {
    pub const ZERO: Regs = Regs { eax: 0, ebx: 0, ecx: 0, edx: 0 };

    pub const fn new(eax: u32, ebx: u32, ecx: u32, edx: u32) -> Self {
        Regs { eax, ebx, ecx, edx }
    }
}

/// Why a CPUID query failed (the instruction itself cannot fail; its transports can).
#[derive(Debug, thiserror::Error)]
pub enum CpuidError {
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{0}")]
    Unsupported(String),
}

/// One way of executing CPUID: the instruction, `/dev/cpu/N/cpuid`, a recorded vector, or the
/// emulator. Implementations live outside this crate.
pub trait CpuidSource {
    /// Human-readable origin, used in messages ("/dev/cpu/3/cpuid", "vector foo.json").
    fn describe(&self) -> String;
    /// Execute CPUID with EAX = `leaf`, ECX = `subleaf`.
    fn cpuid(&self, leaf: u32, subleaf: u32) -> Result<Regs, CpuidError>;
}

impl<T: CpuidSource + ?Sized> CpuidSource for &T {
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn cpuid(&self, leaf: u32, subleaf: u32) -> Result<Regs, CpuidError> {
        (**self).cpuid(leaf, subleaf)
    }
}

pub const LEAF_VENDOR: u32 = 0x0;
pub const LEAF_FEATURES: u32 = 0x1;
pub const LEAF_EXT_FEATURES: u32 = 0x7;
pub const LEAF_ARCH_PMU: u32 = 0xA;
pub const LEAF_RDT_MONITORING: u32 = 0xF;
pub const LEAF_RDT_ALLOCATION: u32 = 0x10;
pub const LEAF_EXT_MAX: u32 = 0x8000_0000;
pub const LEAF_EXT_FEATURES_AMD: u32 = 0x8000_0001;
pub const LEAF_AMD_QOS: u32 = 0x8000_0020;
pub const LEAF_AMD_PERFMON: u32 = 0x8000_0022;

/// Basic (leaf, subleaf) pairs cachescope reads, queried only when in range.
const BASIC_QUERIES: &[(u32, u32)] = &[
    (LEAF_FEATURES, 0),
    (LEAF_EXT_FEATURES, 0),
    (LEAF_ARCH_PMU, 0),
    (LEAF_RDT_MONITORING, 0),
    (LEAF_RDT_MONITORING, 1),
    (LEAF_RDT_ALLOCATION, 0),
    (LEAF_RDT_ALLOCATION, 1),
    (LEAF_RDT_ALLOCATION, 2),
    (LEAF_RDT_ALLOCATION, 3),
];

/// Extended (leaf, subleaf) pairs, queried only when in range.
const EXTENDED_QUERIES: &[(u32, u32)] = &[
    (LEAF_EXT_FEATURES_AMD, 0),
    (LEAF_AMD_QOS, 0),
    (LEAF_AMD_QOS, 1),
    (LEAF_AMD_QOS, 2),
    (LEAF_AMD_QOS, 3),
    (LEAF_AMD_QOS, 5),
    (LEAF_AMD_PERFMON, 0),
];

/// The CPUID leaves cachescope needs, captured once from a source.
///
/// Leaves that were not captured read as zeros, as an absent leaf does on hardware. Decoding
/// from a snapshot keeps the decoder pure and lets per-CPU captures be compared directly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuidSnapshot {
    leaves: BTreeMap<(u32, u32), Regs>,
}

impl CpuidSnapshot {
    /// A snapshot from explicit values (recorded vectors, tests, the emulator).
    pub fn from_leaves(leaves: impl IntoIterator<Item = ((u32, u32), Regs)>) -> Self {
        CpuidSnapshot { leaves: leaves.into_iter().collect() }
    }

    /// Query `src` for every leaf the decoder uses, never asking for a leaf above the
    /// enumerated maximum (basic or extended).
    pub fn capture(src: &dyn CpuidSource) -> Result<Self, CpuidError> {
        let mut leaves = BTreeMap::new();
        let leaf0 = src.cpuid(LEAF_VENDOR, 0)?;
        leaves.insert((LEAF_VENDOR, 0), leaf0);
        for &(leaf, sub) in BASIC_QUERIES {
            if leaf <= leaf0.eax {
                leaves.insert((leaf, sub), src.cpuid(leaf, sub)?);
            }
        }
        let ext = src.cpuid(LEAF_EXT_MAX, 0)?;
        leaves.insert((LEAF_EXT_MAX, 0), ext);
        if is_valid_ext_max(ext.eax) {
            for &(leaf, sub) in EXTENDED_QUERIES {
                if leaf <= ext.eax {
                    leaves.insert((leaf, sub), src.cpuid(leaf, sub)?);
                }
            }
        }
        Ok(CpuidSnapshot { leaves })
    }

    /// Registers of (leaf, subleaf); zeros when not captured.
    pub fn get(&self, leaf: u32, subleaf: u32) -> Regs {
        self.leaves.get(&(leaf, subleaf)).copied().unwrap_or(Regs::ZERO)
    }

    pub fn contains(&self, leaf: u32, subleaf: u32) -> bool {
        self.leaves.contains_key(&(leaf, subleaf))
    }

    pub fn iter(&self) -> impl Iterator<Item = ((u32, u32), Regs)> + '_ {
        self.leaves.iter().map(|(k, v)| (*k, *v))
    }

    /// The (leaf, subleaf) pairs whose registers differ between two snapshots, ignoring fields
    /// that legitimately differ per logical CPU (the initial APIC ID in CPUID.1:EBX[31:24]).
    pub fn differences(&self, other: &CpuidSnapshot) -> Vec<(u32, u32)> {
        let mut keys: Vec<(u32, u32)> = self.leaves.keys().chain(other.leaves.keys()).copied().collect();
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .filter(|&(leaf, sub)| {
                let (mut a, mut b) = (self.get(leaf, sub), other.get(leaf, sub));
                if leaf == LEAF_FEATURES {
                    a.ebx &= 0x00FF_FFFF;
                    b.ebx &= 0x00FF_FFFF;
                }
                a != b
            })
            .collect()
    }
}

/// An extended maximum is meaningful only in the 0x8000_xxxx range; anything else (zeros from
/// an old part or a dump that lacks it, garbage) means "no extended leaves".
fn is_valid_ext_max(eax: u32) -> bool {
    (LEAF_EXT_MAX..=0x8000_FFFF).contains(&eax)
}

fn bit(v: u32, n: u32) -> bool {
    (v >> n) & 1 == 1
}

fn bits(v: u32, hi: u32, lo: u32) -> u32 {
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

/// AMD core PMU: CPUID 0x80000001:ECX[23] (PerfCtrExtCore) and 0x80000022 (PerfMonV2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AmdPmu {
    /// Six core counters at MSR C001_020x instead of the legacy four.
    pub perfctr_ext_core: bool,
    /// 0x80000022:EAX[0]: global control/status MSRs.
    pub perfmon_v2: bool,
    /// 0x80000022:EAX[1]: LBR stack v2.
    pub lbr_v2: bool,
    /// Number of core counters: 0x80000022:EBX[3:0] with PerfMonV2, else 6 or 4.
    pub core_counters: u32,
    /// 0x80000022:EBX[15:10] / [21:16] (PerfMonV2 only).
    pub northbridge_counters: Option<u32>,
    pub umc_counters: Option<u32>,
}

/// AMD PQoS extensions: CPUID 0x80000020.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AmdQos {
    /// Subleaf 0, EBX: feature bitmap.
    pub feature_bitmap: u32,
    /// EBX[1]: L3 memory bandwidth enforcement.
    pub l3_mbe: bool,
    /// EBX[2]: slow-memory bandwidth enforcement.
    pub l3_smbe: bool,
    /// EBX[3]: bandwidth event configuration (which traffic MBM counts is configurable).
    pub bmec: bool,
    /// EBX[5]: assignable bandwidth monitoring counters (ABMC).
    pub abmc: bool,
    /// EBX[6]: L3 smart data cache injection allocation enforcement.
    pub sdciae: bool,
    /// Subleaf 1 (when L3MBE): EAX bandwidth length, EDX[15:0] highest COS.
    pub mbe_bandwidth_length: Option<u32>,
    pub mbe_max_cos: Option<u32>,
    /// Subleaf 3 ECX (when BMEC): valid bits of the event configuration.
    pub bmec_event_config_mask: Option<u32>,
    /// Subleaf 5 EBX[15:0] + 1 (when ABMC): number of assignable counters.
    pub abmc_counters: Option<u32>,
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

fn decode_amd_pmu(s: &CpuidSnapshot, in_ext: &dyn Fn(u32) -> bool) -> Option<AmdPmu> {
    if !in_ext(LEAF_EXT_FEATURES_AMD) {
        return None;
    }
    let perfctr_ext_core = bit(s.get(LEAF_EXT_FEATURES_AMD, 0).ecx, 23);
    let pm = if in_ext(LEAF_AMD_PERFMON) { s.get(LEAF_AMD_PERFMON, 0) } else { Regs::ZERO };
    let perfmon_v2 = bit(pm.eax, 0);
    let core_counters = if perfmon_v2 {
        bits(pm.ebx, 3, 0)
    } else if perfctr_ext_core {
        6
    } else {
        4
    };
    Some(AmdPmu {
        perfctr_ext_core,
        perfmon_v2,
        lbr_v2: bit(pm.eax, 1),
        core_counters,
        northbridge_counters: perfmon_v2.then(|| bits(pm.ebx, 15, 10)),
        umc_counters: perfmon_v2.then(|| bits(pm.ebx, 21, 16)),
    })
}

fn decode_amd_qos(s: &CpuidSnapshot) -> AmdQos {
    let ebx = s.get(LEAF_AMD_QOS, 0).ebx;
    let (l3_mbe, bmec, abmc) = (bit(ebx, 1), bit(ebx, 3), bit(ebx, 5));
    let sub1 = s.get(LEAF_AMD_QOS, 1);
    AmdQos {
        feature_bitmap: ebx,
        l3_mbe,
        l3_smbe: bit(ebx, 2),
        bmec,
        abmc,
        sdciae: bit(ebx, 6),
        mbe_bandwidth_length: l3_mbe.then_some(sub1.eax),
        mbe_max_cos: l3_mbe.then_some(bits(sub1.edx, 15, 0)),
        bmec_event_config_mask: bmec.then(|| s.get(LEAF_AMD_QOS, 3).ecx),
        abmc_counters: abmc.then(|| bits(s.get(LEAF_AMD_QOS, 5).ebx, 15, 0) + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(leaves: &[((u32, u32), Regs)]) -> CpuidSnapshot {
        CpuidSnapshot::from_leaves(leaves.iter().copied())
    }

    const INTEL0: fn(u32) -> Regs = |max| Regs::new(max, 0x756e_6547, 0x6c65_746e, 0x4965_6e69);
    const AMD0: fn(u32) -> Regs = |max| Regs::new(max, 0x6874_7541, 0x444d_4163, 0x6974_6e65);

    #[test]
    fn vendor_strings() {
        assert_eq!(vendor_id(INTEL0(0)), "GenuineIntel");
        assert_eq!(vendor_id(AMD0(0)), "AuthenticAMD");
        assert_eq!(vendor_id(Regs::ZERO), "\\x00".repeat(12));
    }

    #[test]
    fn signature_rules() {
        // Skylake-SP 0x50654: family 6, model 0x55, stepping 4.
        assert_eq!(Signature::decode(0x0005_0654), Signature { raw: 0x50654, family: 6, model: 85, stepping: 4 });
        // Zen 2 0x830F10: family 0xF + 8 = 23, model 0x31.
        let s = Signature::decode(0x0083_0F10);
        assert_eq!((s.family, s.model, s.stepping), (23, 49, 0));
        // Family 5: extended model ignored.
        let s = Signature::decode(0x000F_0543);
        assert_eq!((s.family, s.model, s.stepping), (5, 4, 3));
    }

    #[test]
    fn leaf_above_max_is_not_trusted() {
        // Max basic 0xD, yet garbage in 0xF/0x10 (Intel returns the highest leaf's data).
        let s = snap(&[
            ((0, 0), INTEL0(0xD)),
            ((7, 0), Regs::new(0, (1 << 12) | (1 << 15), 0, 0)),
            ((0xF, 0), Regs::new(0, 0xFF, 0, 2)),
            ((0xF, 1), Regs::new(0, 0x10000, 0xFF, 7)),
            ((0x10, 0), Regs::new(0, 2, 0, 0)),
        ]);
        let i = CpuInfo::decode(&s);
        assert!(i.monitoring.pqm && !i.monitoring.leaf_0xf_in_range);
        assert_eq!(i.monitoring.l3, None);
        assert_eq!(i.monitoring.max_rmid_any, None);
        assert_eq!(i.allocation.resid_bitmap, None);
        assert_eq!(i.l3_monitoring_absence(), Some(MonitoringAbsence::Leaf0xFOutOfRange { max_basic_leaf: 0xD }));
    }

    #[test]
    fn eax_flag_bits_are_masked_from_width() {
        let s = snap(&[
            ((0, 0), INTEL0(0x20)),
            ((7, 0), Regs::new(0, 1 << 12, 0, 0)),
            ((0xF, 0), Regs::new(0, 0x1FF, 0, 2)),
            ((0xF, 1), Regs::new(0x708, 0x1_6000, 0x1FF, 7)),
        ]);
        let l3 = CpuInfo::decode(&s).monitoring.l3.unwrap();
        assert_eq!(l3.counter_width, 32);
        assert!(l3.overflow_bit && l3.non_cpu_agent_cmt && l3.non_cpu_agent_mbm);
        assert_eq!(l3.eax_flags, 0x700);
    }

    #[test]
    fn amd_zero_offset_means_44_bits_for_linux() {
        let s = snap(&[
            ((0, 0), AMD0(0x10)),
            ((7, 0), Regs::new(0, 1 << 12, 0, 0)),
            ((0xF, 0), Regs::new(0, 0xFF, 0, 2)),
            ((0xF, 1), Regs::new(0, 64, 0xFF, 7)),
        ]);
        let l3 = CpuInfo::decode(&s).monitoring.l3.unwrap();
        assert_eq!((l3.counter_width, l3.counter_width_linux), (24, 44));
    }

    #[test]
    fn advertised_but_no_resources() {
        let s = snap(&[((0, 0), INTEL0(0x16)), ((7, 0), Regs::new(0, (1 << 12) | (1 << 15), 0, 0))]);
        let i = CpuInfo::decode(&s);
        assert_eq!(i.l3_monitoring_absence(), Some(MonitoringAbsence::NoL3Resource));
        assert_eq!(i.monitoring.max_rmid_any, Some(0));
        assert_eq!(i.allocation.resid_bitmap, Some(0));
        assert_eq!(i.allocation.l3_cat, None);
    }

    #[test]
    fn arch_pmu_leaf() {
        // Version 4, 4 GP counters of 48 bits, 7-bit vector with LLC misses unavailable,
        // 3 fixed counters of 48 bits.
        let eax = 4 | (4 << 8) | (48 << 16) | (7 << 24);
        let s = snap(&[((0, 0), INTEL0(0xA)), ((0xA, 0), Regs::new(eax, 1 << 4, 0, 3 | (48 << 5)))]);
        let p = CpuInfo::decode(&s).arch_pmu.unwrap();
        assert_eq!((p.version, p.gp_counters, p.gp_counter_width), (4, 4, 48));
        assert_eq!((p.fixed_counters, p.fixed_counter_width), (3, 48));
        assert_eq!(p.unavailable_events, vec!["llc_misses"]);
        assert!(p.has_event("llc_references") && !p.has_event("llc_misses") && !p.has_event("topdown_slots"));
    }

    #[test]
    fn amd_extended_leaves_gated_on_ext_max() {
        let qos = ((LEAF_AMD_QOS, 0), Regs::new(0, 0b10_1010, 0, 0));
        let abmc = ((LEAF_AMD_QOS, 5), Regs::new(0, 31, 0, 0));
        let pm = ((LEAF_AMD_PERFMON, 0), Regs::new(1, 6 | (16 << 10), 0, 0));
        // Without 0x80000000 the extended leaves are untrusted.
        let i = CpuInfo::decode(&snap(&[((0, 0), AMD0(0x10)), qos, abmc, pm]));
        assert_eq!((i.amd_qos, i.amd_pmu), (None, None));
        let ext = ((LEAF_EXT_MAX, 0), Regs::new(0x8000_0028, 0, 0, 0));
        let i = CpuInfo::decode(&snap(&[((0, 0), AMD0(0x10)), ext, qos, abmc, pm]));
        let q = i.amd_qos.unwrap();
        assert!(q.l3_mbe && q.bmec && q.abmc && !q.l3_smbe);
        assert_eq!(q.abmc_counters, Some(32));
        let p = i.amd_pmu.unwrap();
        assert!(p.perfmon_v2);
        assert_eq!((p.core_counters, p.northbridge_counters), (6, Some(16)));
    }

    #[test]
    fn differences_ignore_apic_id() {
        let a = snap(&[((1, 0), Regs::new(1, 0x0000_0800, 0, 0))]);
        let b = snap(&[((1, 0), Regs::new(1, 0x0100_0800, 0, 0))]);
        assert!(a.differences(&b).is_empty());
        let c = snap(&[((1, 0), Regs::new(1, 0x0100_0800, 0, 0)), ((7, 0), Regs::new(0, 1, 0, 0))]);
        assert_eq!(a.differences(&c), vec![(7, 0)]);
    }
}
