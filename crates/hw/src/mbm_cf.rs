//! The MBM correction factor of Broadwell-X and Skylake-X (family 6, models 0x4F and 0x55,
//! which include Cascade Lake and Cooper Lake): on these parts the MBM counters of RMIDs above
//! a threshold count wrong by a known factor (Intel's erratum). Linux corrects them
//! (`intel_rdt_mbm_apply_quirk`, arch/x86/kernel/cpu/resctrl/monitor.c); the values below are
//! the facts of its table. The threshold and factor depend on how many RMIDs the part has:
//! entry `(max_rmid + 1) / 8 - 1`. The kernel multiplies the counts of an RMID above the
//! threshold by the factor in 2^20 fixed point before scaling; so do we, so that the msr and
//! kmod backends read what resctrl reads on the same part.

use crate::cpuid::{CpuInfo, Vendor};

/// (threshold, factor): counts of an RMID above the threshold are multiplied by the factor.
const TABLE: [(u32, f64); 28] = [
    (7, 1.000000),
    (15, 1.000000),
    (15, 0.969650),
    (31, 1.000000),
    (31, 1.066667),
    (31, 0.969650),
    (47, 1.142857),
    (63, 1.000000),
    (63, 1.185115),
    (63, 1.066553),
    (79, 1.454545),
    (95, 1.000000),
    (95, 1.230769),
    (95, 1.142857),
    (95, 1.066667),
    (127, 1.000000),
    (127, 1.254863),
    (127, 1.185255),
    (151, 1.000000),
    (127, 1.066667),
    (167, 1.000000),
    (159, 1.454334),
    (183, 1.000000),
    (127, 0.969744),
    (191, 1.280246),
    (191, 1.230921),
    (215, 1.000000),
    (191, 1.143118),
];

const BROADWELL_X: u32 = 0x4F;
const SKYLAKE_X: u32 = 0x55;

/// A correction in force: counts of RMIDs above `above_rmid` times `factor_q20` / 2^20.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MbmCorrection {
    pub above_rmid: u32,
    pub factor_q20: u64,
}

impl MbmCorrection {
    /// The correction Linux applies on this CPU; None where it applies none (other parts, an
    /// RMID count past the table, or a factor of exactly 1).
    pub fn for_cpu(cpu: &CpuInfo) -> Option<MbmCorrection> {
        let l3 = cpu.monitoring.l3.as_ref()?;
        if cpu.vendor != Vendor::Intel || cpu.signature.family != 6 {
            return None;
        }
        if cpu.signature.model != BROADWELL_X && cpu.signature.model != SKYLAKE_X {
            return None;
        }
        Self::for_rmids(l3.max_rmid)
    }

    /// The table's entry for a part whose highest RMID is `max_rmid`.
    pub fn for_rmids(max_rmid: u32) -> Option<MbmCorrection> {
        let index = ((u64::from(max_rmid) + 1) / 8).checked_sub(1)?;
        let (above_rmid, factor) = *TABLE.get(usize::try_from(index).ok()?)?;
        // The kernel's CF(): rounded to the nearest 2^-20.
        let factor_q20 = (1_048_576.0 * factor + 0.5) as u64;
        (factor_q20 != 1 << 20).then_some(MbmCorrection { above_rmid, factor_q20 })
    }

    /// `counts` of `rmid` as the kernel reports them.
    pub fn apply(&self, rmid: u32, counts: u64) -> u64 {
        self.apply_carrying(rmid, counts, &mut 0)
    }

    /// The same for one interval of many: `rem` carries what earlier intervals left below
    /// one count (in 2^-20 counts), so that the intervals add up to the corrected whole.
    pub fn apply_carrying(&self, rmid: u32, counts: u64, rem: &mut u32) -> u64 {
        if rmid <= self.above_rmid {
            return counts;
        }
        let x = u128::from(counts) * u128::from(self.factor_q20) + u128::from(*rem);
        *rem = (x & 0xF_FFFF) as u32;
        (x >> 20) as u64
    }

    /// For file metadata and people: "RMIDs above 15 x 0.969650".
    pub fn describe(&self) -> String {
        format!("RMIDs above {} x {:.6}", self.above_rmid, self.factor_q20 as f64 / 1_048_576.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_follows_the_rmid_count() {
        // 32 RMIDs (max 31): entry 3, factor 1: nothing to correct.
        assert_eq!(MbmCorrection::for_rmids(31), None);
        // 24 RMIDs: entry 2, RMIDs above 15 read 0.969650 of their counts.
        let c = MbmCorrection::for_rmids(23).unwrap();
        assert_eq!((c.above_rmid, c.factor_q20), (15, 1_016_752));
        assert_eq!(c.apply(15, 1_000_000), 1_000_000);
        assert_eq!(c.apply(16, 1_000_000), 969_650);
        // 72 RMIDs: entry 8.
        let c = MbmCorrection::for_rmids(71).unwrap();
        assert_eq!((c.above_rmid, c.apply(64, 1 << 20)), (63, 1_242_683));
        // Fewer than 8 RMIDs, or more than the table knows: none.
        assert_eq!(MbmCorrection::for_rmids(6), None);
        assert_eq!(MbmCorrection::for_rmids(8 * 29 - 1), None);
        assert_eq!(MbmCorrection::for_rmids(u32::MAX), None);
        // Large counts do not overflow.
        assert_eq!(
            MbmCorrection::for_rmids(23).unwrap().apply(20, u64::MAX),
            ((u128::from(u64::MAX) * 1_016_752) >> 20) as u64
        );
    }
}
