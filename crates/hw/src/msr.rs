//! RDT monitoring MSRs (SDM Vol. 3B §17.16): typed layouts, the `MsrDevice` access trait, and
//! counter arithmetic. Pure: the device implementations live elsewhere.

use std::fmt;

pub const IA32_QM_EVTSEL: u32 = 0xC8D;
pub const IA32_QM_CTR: u32 = 0xC8E;
pub const IA32_PQR_ASSOC: u32 = 0xC8F;

/// Monitoring event ids (IA32_QM_EVTSEL bits 7:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    L3Occupancy = 1,
    MbmTotal = 2,
    MbmLocal = 3,
}

impl Event {
    pub const ALL: [Event; 3] = [Event::L3Occupancy, Event::MbmTotal, Event::MbmLocal];

    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn from_id(id: u8) -> Option<Event> {
        match id {
            1 => Some(Event::L3Occupancy),
            2 => Some(Event::MbmTotal),
            3 => Some(Event::MbmLocal),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Event::L3Occupancy => "llc_occupancy",
            Event::MbmTotal => "mbm_total_bytes",
            Event::MbmLocal => "mbm_local_bytes",
        }
    }
}

/// Width of the RMID field: ceil(log2(1 + max_rmid)) (SDM, IA32_PQR_ASSOC).
pub fn rmid_width(max_rmid: u32) -> u32 {
    let n = u64::from(max_rmid) + 1;
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("RMID {rmid} is above the maximum {max} (writing it would raise #GP)")]
    RmidAboveMax { rmid: u32, max: u32 },
}

/// IA32_PQR_ASSOC: the RMID in bits `width-1:0`, the class of service in bits 63:32. Bits in
/// between are reserved and are carried through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PqrAssoc {
    pub raw: u64,
    pub rmid_width: u32,
}

impl PqrAssoc {
    pub fn new(raw: u64, max_rmid: u32) -> Self {
        PqrAssoc { raw, rmid_width: rmid_width(max_rmid) }
    }

    fn rmid_mask(&self) -> u64 {
        (1u64 << self.rmid_width) - 1
    }

    pub fn rmid(&self) -> u32 {
        (self.raw & self.rmid_mask()) as u32
    }

    pub fn clos(&self) -> u32 {
        (self.raw >> 32) as u32
    }

    /// The same register with `rmid` in the RMID field and every other bit kept. Refused
    /// before anything is written when `rmid > max_rmid`.
    pub fn with_rmid(&self, rmid: u32, max_rmid: u32) -> Result<PqrAssoc, RegisterError> {
        if rmid > max_rmid {
            return Err(RegisterError::RmidAboveMax { rmid, max: max_rmid });
        }
        Ok(PqrAssoc { raw: (self.raw & !self.rmid_mask()) | u64::from(rmid), rmid_width: self.rmid_width })
    }
}

/// IA32_QM_EVTSEL: event id in bits 7:0, RMID from bit 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvtSel {
    pub event_id: u8,
    pub rmid: u32,
}

impl EvtSel {
    /// Encode for `event` on `rmid`, refusing RMIDs above the maximum.
    pub fn new(event: Event, rmid: u32, max_rmid: u32) -> Result<EvtSel, RegisterError> {
        if rmid > max_rmid {
            return Err(RegisterError::RmidAboveMax { rmid, max: max_rmid });
        }
        Ok(EvtSel { event_id: event.id(), rmid })
    }

    pub fn encode(&self) -> u64 {
        (u64::from(self.rmid) << 32) | u64::from(self.event_id)
    }

    /// Decode, keeping `width` bits of RMID (bits above are reserved).
    pub fn decode(raw: u64, rmid_width: u32) -> EvtSel {
        let mask = (1u64 << rmid_width.min(32)) - 1;
        EvtSel { event_id: (raw & 0xFF) as u8, rmid: ((raw >> 32) & mask) as u32 }
    }
}

pub const CTR_ERROR: u64 = 1 << 63;
pub const CTR_UNAVAILABLE: u64 = 1 << 62;
pub const CTR_OVERFLOW: u64 = 1 << 61;

/// IA32_QM_CTR as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QmCtr {
    /// Bit 63: unsupported RMID or event.
    Error,
    /// Bit 62: no data for this RMID (yet).
    Unavailable,
    /// Data bits 61:0, or 60:0 with `overflow` split off when CPUID.0xF.1:EAX[8] is set.
    Data { count: u64, overflow: bool },
}

impl QmCtr {
    pub fn decode(raw: u64, overflow_bit_enumerated: bool) -> QmCtr {
        if raw & CTR_ERROR != 0 {
            QmCtr::Error
        } else if raw & CTR_UNAVAILABLE != 0 {
            QmCtr::Unavailable
        } else if overflow_bit_enumerated {
            QmCtr::Data { count: raw & (CTR_OVERFLOW - 1), overflow: raw & CTR_OVERFLOW != 0 }
        } else {
            QmCtr::Data { count: raw & (CTR_UNAVAILABLE - 1), overflow: false }
        }
    }

    pub fn encode(&self, overflow_bit_enumerated: bool) -> u64 {
        match *self {
            QmCtr::Error => CTR_ERROR,
            QmCtr::Unavailable => CTR_UNAVAILABLE,
            QmCtr::Data { count, overflow } => {
                let mask = if overflow_bit_enumerated { CTR_OVERFLOW - 1 } else { CTR_UNAVAILABLE - 1 };
                (count & mask) | if overflow && overflow_bit_enumerated { CTR_OVERFLOW } else { 0 }
            }
        }
    }
}

/// Why an MSR access failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsrError {
    /// The CPU raised #GP: the MSR does not exist or the value is invalid (EIO from the driver).
    #[error("CPU {cpu}: {op} of MSR {msr:#x} raised #GP (invalid MSR or value)")]
    GeneralProtection { cpu: u32, msr: u32, op: MsrOp },
    #[error("{path}: permission denied (needs root with CAP_SYS_RAWIO)")]
    Permission { path: String },
    #[error("{path}: the msr driver is not loaded or CPU {cpu} is offline (modprobe msr)")]
    NoDevice { path: String, cpu: u32 },
    #[error("{context}: {message}")]
    Other { context: String, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsrOp {
    Read,
    Write,
}

impl fmt::Display for MsrOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MsrOp::Read => "read",
            MsrOp::Write => "write",
        })
    }
}

/// Read and write one model-specific register on one logical CPU.
pub trait MsrDevice: Send + Sync {
    fn read(&self, cpu: u32, msr: u32) -> Result<u64, MsrError>;
    fn write(&self, cpu: u32, msr: u32, value: u64) -> Result<(), MsrError>;
}

impl<T: MsrDevice + ?Sized> MsrDevice for std::sync::Arc<T> {
    fn read(&self, cpu: u32, msr: u32) -> Result<u64, MsrError> {
        (**self).read(cpu, msr)
    }
    fn write(&self, cpu: u32, msr: u32, value: u64) -> Result<(), MsrError> {
        (**self).write(cpu, msr, value)
    }
}

/// Counts between two reads of a cumulative counter `width` bits wide, modulo 2^width.
pub fn wrapping_delta(prev: u64, cur: u64, width: u32) -> u64 {
    if width >= 64 {
        cur.wrapping_sub(prev)
    } else {
        let m = (1u64 << width) - 1;
        (cur.wrapping_sub(prev)) & m
    }
}

/// One reading of a cumulative counter: its value and the generation of what it counts (a
/// resctrl group's inode, an RMID's allocation number), so a re-created source is told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cumulative {
    pub generation: u64,
    pub value: u64,
}

/// Counts since `prev`, or None when there is no valid baseline: no previous reading, a new
/// generation (the group or RMID was re-created), or, for a counter that cannot wrap
/// (`width` 64, e.g. resctrl's byte counts the kernel keeps wrap-free), a decrease, which
/// means the counter was reset. Narrower counters wrap modulo 2^width.
pub fn cumulative_delta(prev: Option<Cumulative>, cur: Cumulative, width: u32) -> Option<u64> {
    let prev = prev.filter(|p| p.generation == cur.generation)?;
    if width >= 64 && cur.value < prev.value {
        return None;
    }
    Some(wrapping_delta(prev.value, cur.value, width))
}

/// The longest interval between two MBM reads that cannot miss a wrap: the time the counter
/// takes to count through 2^width units at `peak_bytes_per_sec`. Reads farther apart than this
/// could lose whole wraps and under-report.
pub fn max_safe_interval(width: u32, upscale_factor: u32, peak_bytes_per_sec: u64) -> std::time::Duration {
    let span_bytes = (1u128 << width.min(64)) * u128::from(upscale_factor.max(1));
    let secs = span_bytes as f64 / peak_bytes_per_sec.max(1) as f64;
    std::time::Duration::from_secs_f64(secs.min(u64::MAX as f64 / 2.0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn cumulative_deltas() {
        let c = |generation, value| Cumulative { generation, value };
        assert_eq!(cumulative_delta(None, c(1, 10), 24), None, "no baseline");
        assert_eq!(cumulative_delta(Some(c(1, 10)), c(1, 15), 24), Some(5));
        assert_eq!(cumulative_delta(Some(c(1, (1 << 24) - 2)), c(1, 3), 24), Some(5), "wrap");
        assert_eq!(cumulative_delta(Some(c(1, 10)), c(2, 15), 24), None, "re-created");
        assert_eq!(cumulative_delta(Some(c(1, 10)), c(1, 4), 64), None, "64-bit decrease is a reset");
        assert_eq!(cumulative_delta(Some(c(1, 10)), c(1, 10), 64), Some(0));
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rmid_widths() {
        assert_eq!(rmid_width(0), 0);
        assert_eq!(rmid_width(1), 1);
        assert_eq!(rmid_width(63), 6);
        assert_eq!(rmid_width(71), 7);
        assert_eq!(rmid_width(191), 8);
        assert_eq!(rmid_width(255), 8);
        assert_eq!(rmid_width(287), 9);
        assert_eq!(rmid_width(1023), 10);
    }

    #[test]
    fn pqr_keeps_clos_and_refuses_big_rmid() {
        let p = PqrAssoc::new(0x0000_0005_0000_0003, 191);
        assert_eq!((p.rmid(), p.clos()), (3, 5));
        let q = p.with_rmid(190, 191).unwrap();
        assert_eq!(q.raw, 0x0000_0005_0000_00BE);
        assert_eq!(q.clos(), 5);
        assert_eq!(p.with_rmid(192, 191), Err(RegisterError::RmidAboveMax { rmid: 192, max: 191 }));
    }

    #[test]
    fn ctr_bits() {
        assert_eq!(QmCtr::decode(CTR_ERROR | 5, false), QmCtr::Error);
        assert_eq!(QmCtr::decode(CTR_UNAVAILABLE | 5, true), QmCtr::Unavailable);
        assert_eq!(QmCtr::decode(CTR_OVERFLOW | 5, false), QmCtr::Data { count: CTR_OVERFLOW | 5, overflow: false });
        assert_eq!(QmCtr::decode(CTR_OVERFLOW | 5, true), QmCtr::Data { count: 5, overflow: true });
    }

    #[test]
    fn deltas_wrap() {
        assert_eq!(wrapping_delta(10, 15, 24), 5);
        assert_eq!(wrapping_delta((1 << 24) - 2, 3, 24), 5);
        assert_eq!(wrapping_delta(u64::MAX, 1, 64), 2);
    }

    #[test]
    fn safe_interval() {
        // Broadwell-EP: 24-bit counters of 32 KiB at 500 GB/s: 2^24 * 32768 / 5e11 = 1.0995 s.
        let d = max_safe_interval(24, 32768, 500_000_000_000);
        assert!((d.as_secs_f64() - 1.0995).abs() < 1e-3, "{d:?}");
    }

    proptest! {
        #[test]
        fn evtsel_roundtrip(ev in 1u8..=3, max in 0u32..1024, r in 0u32..1024) {
            let event = Event::from_id(ev).unwrap();
            match EvtSel::new(event, r, max) {
                Ok(sel) => prop_assert_eq!(EvtSel::decode(sel.encode(), rmid_width(max)), sel),
                Err(_) => prop_assert!(r > max),
            }
        }

        #[test]
        fn pqr_roundtrip(raw in any::<u64>(), max in 1u32..1024, r in 0u32..1024) {
            let p = PqrAssoc::new(raw, max);
            match p.with_rmid(r, max) {
                Ok(q) => {
                    prop_assert_eq!(q.rmid(), r);
                    prop_assert_eq!(q.clos(), p.clos());
                    prop_assert_eq!(q.raw & !((1u64 << q.rmid_width) - 1), raw & !((1u64 << q.rmid_width) - 1));
                }
                Err(_) => prop_assert!(r > max),
            }
        }

        #[test]
        fn ctr_roundtrip(count in 0u64..(1 << 61), ovf in any::<bool>(), en in any::<bool>()) {
            let c = QmCtr::Data { count, overflow: ovf && en };
            prop_assert_eq!(QmCtr::decode(c.encode(en), en), c);
        }

        #[test]
        fn delta_inverts_add(prev in any::<u64>(), add in any::<u64>(), width in 1u32..=64) {
            let m = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
            let cur = prev.wrapping_add(add) & m;
            prop_assert_eq!(wrapping_delta(prev & m, cur, width), add & m);
        }
    }
}
