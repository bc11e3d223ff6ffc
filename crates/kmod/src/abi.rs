//! The module's user-space interface, as `kmod/cachescope_abi.h` defines it: the records read
//! from `/dev/cachescope`, the info, rules and stats structures, the ioctl numbers. The layout
//! is versioned; [`check`] refuses a module whose version or record size this build does not
//! know. A test compiles the header and compares every size and offset with these.

/// The header, for tests and for people reading `cachescope info`.
pub const HEADER: &str = include_str!("../../../kmod/cachescope_abi.h");

/// 2: a NO_RMID record says why in its occupancy field ([`no_rmid`]).
pub const ABI_VERSION: u32 = 2;
pub const RECORD_SIZE: usize = 48;
pub const MAX_DOMAINS: usize = 64;
pub const MAX_RULES: usize = 32;
pub const RULE_LEN: usize = 256;
/// What the module accepts in all (bytes of rules, without their `!`).
pub const RULES_BYTES: usize = 1024;

pub mod kind {
    pub const SAMPLE: u8 = 1;
    pub const ATTACH: u8 = 2;
    pub const DETACH: u8 = 3;
    pub const NO_RMID: u8 = 4;
    pub const OVERRUN: u8 = 5;
    pub const FREED: u8 = 6;
}

/// Why a NO_RMID record's cgroup runs untagged (its occupancy field).
pub mod no_rmid {
    pub const EXHAUSTED: u64 = 0;
    pub const LIMBO: u64 = 1;
    pub const TABLE_FULL: u64 = 2;
}

pub mod flags {
    pub const OCC_ERROR: u8 = 0x01;
    pub const OCC_UNAVAIL: u8 = 0x02;
    pub const TOTAL_ERROR: u8 = 0x04;
    pub const TOTAL_UNAVAIL: u8 = 0x08;
    pub const LOCAL_ERROR: u8 = 0x10;
    pub const LOCAL_UNAVAIL: u8 = 0x20;
    pub const OCC_NONE: u8 = 0x40;
    pub const MBM_NONE: u8 = 0x80;
}

/// One record, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Record {
    pub time_ns: u64,
    pub cgroup_id: u64,
    pub occupancy: u64,
    pub mbm_total: u64,
    pub mbm_local: u64,
    pub rmid: u32,
    pub domain: u16,
    pub kind: u8,
    pub flags: u8,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Record {
    /// Decodes one record (x86: little-endian).
    pub fn parse(b: &[u8; RECORD_SIZE]) -> Record {
        Record {
            time_ns: u64_at(b, 0),
            cgroup_id: u64_at(b, 8),
            occupancy: u64_at(b, 16),
            mbm_total: u64_at(b, 24),
            mbm_local: u64_at(b, 32),
            rmid: u32::from_le_bytes([b[40], b[41], b[42], b[43]]),
            domain: u16::from_le_bytes([b[44], b[45]]),
            kind: b[46],
            flags: b[47],
        }
    }

    /// Encodes it (the test module's fake device writes these).
    pub fn encode(&self) -> [u8; RECORD_SIZE] {
        let mut b = [0u8; RECORD_SIZE];
        for (i, v) in [self.time_ns, self.cgroup_id, self.occupancy, self.mbm_total, self.mbm_local].iter().enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[40..44].copy_from_slice(&self.rmid.to_le_bytes());
        b[44..46].copy_from_slice(&self.domain.to_le_bytes());
        b[46] = self.kind;
        b[47] = self.flags;
        b
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Info {
    pub abi_version: u32,
    pub record_size: u32,
    pub emulate: u32,
    pub num_rmids: u32,
    pub nr_domains: u32,
    pub ctr_width: u32,
    pub upscale: u64,
    pub interval_ns: u64,
    pub l3_bytes: u64,
    pub limbo_bytes: u64,
    pub domain_ids: [u32; MAX_DOMAINS],
    pub ring_records: u32,
    pub local_pct: u32,
    pub has_total: u32,
    pub has_local: u32,
}

impl Default for Info {
    fn default() -> Info {
        // SAFETY: every field is an integer or an array of them; all zeros is a valid value.
        unsafe { std::mem::zeroed() }
    }
}

impl Info {
    pub fn domains(&self) -> &[u32] {
        &self.domain_ids[..(self.nr_domains as usize).min(MAX_DOMAINS)]
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Rules {
    pub count: u32,
    pub pad: u32,
    pub rule: [[u8; RULE_LEN]; MAX_RULES],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub rmids_in_use: u64,
    pub rmids_limbo: u64,
    pub rmids_free: u64,
    pub cgroups: u64,
    pub waiting: u64,
    pub overruns: u64,
    pub switches: u64,
    pub pqr_writes: u64,
    pub ticks: u64,
    pub tick_ns: u64,
    pub tick_ns_max: u64,
    pub misplaced: u64,
}

const MAGIC: u64 = 0xCE;
const fn ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (MAGIC << 8) | nr
}
const fn iow(nr: u64, size: usize) -> u64 {
    (1 << 30) | ((size as u64) << 16) | (MAGIC << 8) | nr
}
pub const IOC_INFO: u64 = ior(1, std::mem::size_of::<Info>());
pub const IOC_RULES: u64 = iow(2, std::mem::size_of::<Rules>());
pub const IOC_ATTACH: u64 = iow(3, 4);
pub const IOC_DETACH: u64 = iow(4, 4);
pub const IOC_STATS: u64 = ior(5, std::mem::size_of::<Stats>());

/// Whether this build can read the module's records.
pub fn check(info: &Info) -> Result<(), String> {
    if info.abi_version != ABI_VERSION || info.record_size as usize != RECORD_SIZE {
        return Err(format!(
            "the loaded module speaks ABI {} with {}-byte records; this cachescope reads ABI {ABI_VERSION} with \
             {RECORD_SIZE}-byte records (rebuild and reload the module from this release's kmod/)",
            info.abi_version, info.record_size
        ));
    }
    if info.nr_domains == 0 || info.nr_domains as usize > MAX_DOMAINS || info.num_rmids < 2 || info.upscale == 0 {
        return Err(format!(
            "the module reports {} domains, {} RMIDs, upscale {}: not usable",
            info.nr_domains, info.num_rmids, info.upscale
        ));
    }
    if !(8..=64).contains(&info.ctr_width) {
        return Err(format!("the module reports a {}-bit counter", info.ctr_width));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_sizes_match_the_header() {
        let r = Record {
            time_ns: 1,
            cgroup_id: 2,
            occupancy: 3,
            mbm_total: u64::MAX,
            mbm_local: 5,
            rmid: 6,
            domain: 7,
            kind: kind::DETACH,
            flags: flags::MBM_NONE,
        };
        assert_eq!(Record::parse(&r.encode()), r);
        let define = |name: &str| -> u64 {
            let line = HEADER.lines().find(|l| l.starts_with(&format!("#define {name}"))).unwrap_or_default();
            line.split_whitespace().nth(2).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX)
        };
        assert_eq!(define("CACHESCOPE_ABI_VERSION"), u64::from(ABI_VERSION));
        let member = |name: &str| -> u64 {
            let line = HEADER.lines().find(|l| l.trim_start().starts_with(&format!("{name}\t"))).unwrap_or_default();
            line.split('=')
                .nth(1)
                .and_then(|v| v.trim().trim_end_matches(|c| c != ',').trim_end_matches(',').trim().parse().ok())
                .unwrap_or(u64::MAX)
        };
        assert_eq!(member("CS_NO_RMID_EXHAUSTED"), no_rmid::EXHAUSTED);
        assert_eq!(member("CS_NO_RMID_LIMBO"), no_rmid::LIMBO);
        assert_eq!(member("CS_NO_RMID_TABLE_FULL"), no_rmid::TABLE_FULL);
        assert_eq!(define("CACHESCOPE_MAX_DOMAINS"), MAX_DOMAINS as u64);
        assert_eq!(define("CACHESCOPE_MAX_RULES"), MAX_RULES as u64);
        assert_eq!(define("CACHESCOPE_RULE_LEN"), RULE_LEN as u64);
        assert_eq!(std::mem::size_of::<Info>(), 6 * 4 + 4 * 8 + MAX_DOMAINS * 4 + 4 * 4);
        assert_eq!(IOC_ATTACH, 0x4004_ce03);
    }

    #[test]
    fn refuses_other_versions() {
        let mut i = Info {
            abi_version: ABI_VERSION,
            record_size: 48,
            nr_domains: 1,
            num_rmids: 4,
            upscale: 1,
            ctr_width: 24,
            ..Default::default()
        };
        assert!(check(&i).is_ok());
        i.abi_version = 1;
        assert!(check(&i).unwrap_err().contains("ABI 1"));
        i.abi_version = ABI_VERSION;
        i.record_size = 56;
        assert!(check(&i).is_err());
    }
}
