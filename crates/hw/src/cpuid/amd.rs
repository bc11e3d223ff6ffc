//! AMD's own leaves: the core PMU (0x80000001, 0x80000022) and PQoS extensions (0x80000020).

use super::{bit, bits, CpuidSnapshot, Regs, LEAF_AMD_PERFMON, LEAF_AMD_QOS, LEAF_EXT_FEATURES_AMD};
use serde::Serialize;

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

pub(super) fn decode_amd_pmu(s: &CpuidSnapshot, in_ext: &dyn Fn(u32) -> bool) -> Option<AmdPmu> {
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

pub(super) fn decode_amd_qos(s: &CpuidSnapshot) -> AmdQos {
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
