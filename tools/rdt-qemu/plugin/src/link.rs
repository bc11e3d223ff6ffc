//! The device's shared state, mirrored from the patch's include/hw/i386/rdt-link.h
//! (`struct qemu_rdt_link`, version 4). Field order, types and padding must match.

/// The layout version this plugin speaks (2: `vcpu_cbm`, cache allocation; 3: the PMU; 4: the
/// lookups source, for AMD's core counters, and `pmu_fault`).
pub const VERSION: u32 = 4;

/// `pmu_source`'s sources (QEMU_RDT_PMU_*).
pub const PMU_INSNS: u32 = 0;
pub const PMU_LLC_REFS: u32 = 1;
pub const PMU_LLC_MISSES: u32 = 2;
pub const PMU_LOOKUPS: u32 = 3;

#[repr(C)]
pub struct RdtLink {
    pub version: u32,
    pub nr_vcpus: u32,
    pub nr_domains: u32,
    pub nr_rmids: u32,
    pub llc_size: u64,
    pub llc_ways: u32,
    pub line_size: u32,
    /// 0 until the guest first uses monitoring (read atomically).
    pub active: u32,
    pub reserved: u32,
    pub vcpu_domain: *const u32,
    /// The RMID in each vCPU's PQR_ASSOC (read atomically).
    pub vcpu_rmid: *const u32,
    /// `[nr_domains * nr_rmids]`, index `domain * nr_rmids + rmid` (written atomically).
    pub lines: *mut u64,
    pub fill_bytes: *mut u64,
    pub wb_bytes: *mut u64,
    /// The capacity bitmask each vCPU's class of service may fill (all ones without cache
    /// allocation; read atomically).
    pub vcpu_cbm: *const u64,
    /// 1: the device has a PMU; the plugin counts its sources.
    pub pmu: u32,
    pub l2_ways: u32,
    /// Each vCPU's private cache, bytes.
    pub l2_size: u64,
    /// The device's: the privilege level of the code being translated.
    pub cpl: Option<unsafe extern "C" fn() -> u32>,
    /// The device's: brings the vCPU's counters up to date; instructions until the next call.
    pub pmu_check: Option<unsafe extern "C" fn(vcpu: u32) -> u64>,
    /// The plugin's (written atomically): a source counted for a vCPU at a privilege.
    pub pmu_source: Option<unsafe extern "C" fn(vcpu: u32, user: u32, source: u32) -> u64>,
    /// The plugin's (written atomically): call pmu_check after that many instructions.
    pub pmu_rearm: Option<unsafe extern "C" fn(vcpu: u32, insns: u64)>,
    /// The device's (version 4), for the exception being raised: the privilege (1: user) of
    /// an instruction that faulted and retired nothing, whose count is taken back; -1 else.
    pub pmu_fault: Option<unsafe extern "C" fn(vcpu: u32) -> i32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_layout_matches_the_c_header() {
        // Offsets as a C compiler lays out struct qemu_rdt_link on x86_64.
        assert_eq!(offset_of!(RdtLink, llc_size), 16);
        assert_eq!(offset_of!(RdtLink, active), 32);
        assert_eq!(offset_of!(RdtLink, vcpu_domain), 40);
        assert_eq!(offset_of!(RdtLink, wb_bytes), 72);
        assert_eq!(offset_of!(RdtLink, vcpu_cbm), 80);
        assert_eq!(offset_of!(RdtLink, pmu), 88);
        assert_eq!(offset_of!(RdtLink, l2_size), 96);
        assert_eq!(offset_of!(RdtLink, cpl), 104);
        assert_eq!(offset_of!(RdtLink, pmu_rearm), 128);
        assert_eq!(offset_of!(RdtLink, pmu_fault), 136);
        assert_eq!(size_of::<RdtLink>(), 144);
    }
}
