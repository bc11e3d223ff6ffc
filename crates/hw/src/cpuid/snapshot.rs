//! The access trait, the leaves cachescope asks for, and a captured snapshot of them.

use serde::Serialize;
use std::collections::BTreeMap;

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
pub(super) fn is_valid_ext_max(eax: u32) -> bool {
    (LEAF_EXT_MAX..=0x8000_FFFF).contains(&eax)
}
