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
