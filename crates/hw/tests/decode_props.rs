//! Property tests: any register values decode without panicking, and every field is gated on
//! the enumeration path that makes it valid.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_hw::cpuid::*;
use proptest::prelude::*;

const KEYS: &[(u32, u32)] = &[
    (0, 0),
    (1, 0),
    (7, 0),
    (0xA, 0),
    (0xF, 0),
    (0xF, 1),
    (0x10, 0),
    (0x10, 1),
    (0x10, 2),
    (0x10, 3),
    (0x8000_0000, 0),
    (0x8000_0001, 0),
    (0x8000_0020, 0),
    (0x8000_0020, 1),
    (0x8000_0020, 3),
    (0x8000_0020, 5),
    (0x8000_0022, 0),
];

fn regs() -> impl Strategy<Value = Regs> {
    // Bias towards the interesting bits being set so gated paths are reached often.
    (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(a, b, c, d, dense)| {
        if dense {
            Regs::new(a, b | (1 << 12) | (1 << 15) | 0xE, c, d | 0x7)
        } else {
            Regs::new(a, b, c, d)
        }
    })
}

fn snapshot() -> impl Strategy<Value = CpuidSnapshot> {
    (
        proptest::collection::vec(regs(), KEYS.len()),
        0u32..0x30,
        prop::sample::select(vec!["GenuineIntel", "AuthenticAMD", "HygonGenuine", "CentaurHauls"]),
        any::<bool>(),
    )
        .prop_map(|(rs, max_basic, vendor, ext)| {
            let mut leaves: Vec<((u32, u32), Regs)> = KEYS.iter().copied().zip(rs).collect();
            let v = vendor.as_bytes();
            let w = |i: usize| u32::from_le_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
            leaves[0].1 = Regs::new(max_basic, w(0), w(8), w(4));
            if ext {
                leaves[10].1.eax = 0x8000_0000 | (leaves[10].1.eax & 0x3F);
            }
            CpuidSnapshot::from_leaves(leaves)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn decode_is_total_and_gated(s in snapshot()) {
        let i = CpuInfo::decode(&s);
        let max = i.max_basic_leaf;
        let leaf7 = s.get(7, 0).ebx;
        // Gating of monitoring.
        prop_assert_eq!(i.monitoring.pqm, max >= 7 && leaf7 & (1 << 12) != 0);
        if let Some(l3) = &i.monitoring.l3 {
            prop_assert!(i.monitoring.pqm && max >= 0xF && s.get(0xF, 0).edx & 2 != 0);
            // Usable exactly when every field is in range (sizes taken from input are bounded).
            let in_range = l3.max_rmid <= MAX_RMID_LIMIT
                && i.monitoring.max_rmid_any.is_none_or(|m| m <= MAX_RMID_LIMIT)
                && l3.upscale_factor > 0
                && l3.counter_width_linux <= MAX_COUNTER_WIDTH;
            match i.l3_monitoring_absence() {
                None => prop_assert!(in_range),
                Some(MonitoringAbsence::OutOfRange { .. }) => prop_assert!(!in_range),
                Some(other) => prop_assert!(false, "{other}"),
            }
        } else {
            prop_assert!(i.l3_monitoring_absence().is_some());
        }
        if max < 0xF || !i.monitoring.pqm {
            prop_assert_eq!(i.monitoring.max_rmid_any, None);
        }
        if let Some(l3) = &i.monitoring.l3 {
            prop_assert!(l3.counter_width >= 24 && l3.counter_width <= 24 + 255);
            prop_assert_eq!(l3.eax_flags & 0xFF, 0);
        }
        // Gating of allocation.
        prop_assert_eq!(i.allocation.pqe, max >= 7 && leaf7 & (1 << 15) != 0);
        if max < 0x10 || !i.allocation.pqe {
            prop_assert!(i.allocation.resid_bitmap.is_none() && i.allocation.l3_cat.is_none());
            prop_assert!(i.allocation.l2_cat.is_none() && i.allocation.mba.is_none());
        }
        if let Some(c) = &i.allocation.l3_cat {
            prop_assert!((1..=32).contains(&c.cbm_length));
        }
        // Vendor-specific leaves.
        if i.vendor != Vendor::Intel || max < 0xA {
            prop_assert!(i.arch_pmu.is_none());
        }
        if !i.vendor.is_amd_like() || i.max_extended_leaf.is_none_or(|m| m < 0x8000_0020) {
            prop_assert!(i.amd_qos.is_none());
        }
    }

    #[test]
    fn capture_never_asks_out_of_range(s in snapshot()) {
        // A source that fails the test if queried above the enumerated maxima.
        struct Strict(CpuidSnapshot);
        impl CpuidSource for Strict {
            fn describe(&self) -> String { "strict".into() }
            fn cpuid(&self, leaf: u32, sub: u32) -> Result<Regs, CpuidError> {
                let max = self.0.get(0, 0).eax;
                let ext = self.0.get(0x8000_0000, 0).eax;
                let ok = leaf <= max || leaf == 0x8000_0000 || (leaf > 0x8000_0000 && ext >= 0x8000_0000 && leaf <= ext);
                if ok { Ok(self.0.get(leaf, sub)) } else { Err(CpuidError::Unsupported(format!("{leaf:#x} queried"))) }
            }
        }
        let captured = CpuidSnapshot::capture(&Strict(s.clone()));
        prop_assert!(captured.is_ok(), "{:?}", captured.err());
        prop_assert_eq!(CpuInfo::decode(&captured.unwrap()), CpuInfo::decode(&s));
    }
}
