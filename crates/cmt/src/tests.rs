use super::*;
use cachescope_hw::msr::{MsrOp, IA32_PQR_ASSOC};
use std::collections::BTreeMap;

#[test]
fn core_groups() {
    assert_eq!(parse_core_groups("0-3,4-7").unwrap(), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    assert_eq!(parse_core_groups("[0,2],[1,3],5").unwrap(), vec![vec![0, 2], vec![1, 3], vec![5]]);
    for bad in ["", "0-3,2", "[0,1", "a", "3-1", "[0]x"] {
        assert!(parse_core_groups(bad).is_err(), "{bad}");
    }
}

#[test]
fn longest_safe_interval_is_enforced() {
    let caps = Caps {
        max_rmid: 7,
        max_rmid_any: 7,
        upscale_factor: 64,
        counter_width: 24,
        overflow_bit: false,
        events: vec![],
    };
    // 2^24 × 64 B at 100 GB/s = 10.7 ms.
    let e = check_interval(&caps, Duration::from_millis(11), 100_000_000_000).unwrap_err().to_string();
    assert!(e.contains("longer than the longest safe MBM interval 10.7"), "{e}");
    assert!(check_interval(&caps, Duration::from_millis(10), 100_000_000_000).is_ok());
}

/// A device that records writes and fails on demand, to check pinning without the emulator.
#[derive(Default)]
struct Regs(std::sync::Mutex<BTreeMap<u32, u64>>);

impl MsrDevice for Regs {
    fn read(&self, cpu: u32, msr: u32) -> Result<u64, MsrError> {
        if msr != IA32_PQR_ASSOC {
            return Err(MsrError::GeneralProtection { cpu, msr, op: MsrOp::Read });
        }
        Ok(*self.0.lock().unwrap().get(&cpu).unwrap_or(&(5u64 << 32)))
    }
    fn write(&self, cpu: u32, msr: u32, value: u64) -> Result<(), MsrError> {
        if cpu == 99 {
            return Err(MsrError::GeneralProtection { cpu, msr, op: MsrOp::Write });
        }
        self.0.lock().unwrap().insert(cpu, value);
        Ok(())
    }
}

#[test]
fn pinning_keeps_clos_reports_tampering_and_restores() {
    let dev = std::sync::Arc::new(Regs::default());
    let mut pin = CorePinning::apply(dev.clone(), &[(vec![0, 1], 3), (vec![2], 4)], 7, 7).unwrap();
    assert_eq!(dev.read(1, IA32_PQR_ASSOC).unwrap(), (5 << 32) | 3, "CLOS 5 kept");
    assert_eq!(dev.read(2, IA32_PQR_ASSOC).unwrap(), (5 << 32) | 4);
    assert!(pin.verify().unwrap().is_empty());
    // Someone else rewrites CPU 1.
    dev.write(1, IA32_PQR_ASSOC, 6).unwrap();
    assert_eq!(pin.verify().unwrap(), vec![Tampered { cpu: 1, expected: (5 << 32) | 3, found: 6 }]);
    let report = pin.restore().unwrap();
    assert_eq!(report.restored, 2);
    assert_eq!(report.left_alone.len(), 1);
    assert_eq!(dev.read(0, IA32_PQR_ASSOC).unwrap(), 5 << 32);
    assert_eq!(dev.read(1, IA32_PQR_ASSOC).unwrap(), 6, "their value is not overwritten");
    // RMID above the maximum: refused before anything is written.
    let e = CorePinning::apply(dev.clone(), &[(vec![7], 8)], 7, 7).err().unwrap();
    assert!(e.to_string().contains("above the maximum"), "{e}");
    assert!(!dev.0.lock().unwrap().contains_key(&7));
    // A failing core midway: the cores already written are put back (on drop).
    let e = CorePinning::apply(dev.clone(), &[(vec![10, 99], 2)], 7, 7).err().unwrap();
    assert!(e.to_string().contains("#GP"), "{e}");
    assert_eq!(dev.read(10, IA32_PQR_ASSOC).unwrap(), 5 << 32);
}
